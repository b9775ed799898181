//! InitProducerId: new ids, epoch bumps and fencing, KIP-360's checks of a
//! producer naming itself, and epoch exhaustion.

use super::*;
use crate::limits::{NO_PRODUCER_EPOCH, PRODUCER_EPOCH_EXHAUSTED};

#[test]
fn a_new_transactional_id_gets_a_new_producer_id_at_epoch_zero() {
    let mut h = Harness::new();
    let plan = h.init("t", None).unwrap();
    assert_eq!(plan.transactional_id(), "t");
    assert_eq!(plan.coordinator_epoch(), EPOCH);
    assert_eq!(plan.next().state, TxnState::Empty);
    assert_eq!(plan.next().timeout_ms, TIMEOUT_MS);
    assert_eq!(plan.next().txn_start_ms, -1);
    // Not visible until its record is durable.
    assert_eq!(h.c.metadata("t"), None);
    assert_eq!(h.c.pending("t"), Some(Pending::Append(TxnState::Empty)));
    assert_eq!(h.c.describe("t"), Err(TxnError::TransactionalIdNotFound));
    assert_eq!(
        h.commit(plan),
        AfterAppend::ProducerId {
            producer_id: 1000,
            producer_epoch: 0
        }
    );
    assert_eq!(h.c.pending("t"), None);
    assert_eq!(h.state("t"), TxnState::Empty);
    assert_eq!(h.metadata("t").previous_producer_id, 1000);
}

#[test]
fn init_refuses_an_empty_id_and_timeouts_outside_the_brokers_bounds() {
    let mut h = Harness::new();
    assert_eq!(h.init("", None), Err(TxnError::InvalidRequest));
    let long = "x".repeat(crate::limits::TRANSACTIONAL_ID_BYTES_MAX + 1);
    assert_eq!(h.init(&long, None), Err(TxnError::InvalidRequest));
    let max = h.c.config().max_timeout_ms;
    let mut no_alloc = || -> Result<i64, TxnError> { panic!("no producer id for a refusal") };
    for timeout_ms in [0, -1, max + 1, i32::MIN] {
        assert_eq!(
            h.c.init_producer_id("t", timeout_ms, None, h.now_ms, &mut no_alloc),
            Err(TxnError::InvalidTransactionTimeout),
            "{timeout_ms}"
        );
    }
    let plan =
        h.c.init_producer_id("t", max, None, h.now_ms, &mut || Ok(7))
            .unwrap();
    assert_eq!(plan.next().timeout_ms, max);
}

#[test]
fn reinitialising_bumps_the_epoch_and_fences_the_old_producer() {
    let mut h = Harness::new();
    let old = h.producer("t");
    let new = h.producer("t");
    assert_eq!(new, pe(old.producer_id, 1));
    assert_eq!(h.metadata("t").last_producer_epoch, NO_PRODUCER_EPOCH);
    assert_eq!(h.add("t", old, &[("a", 0)]), Err(TxnError::ProducerFenced));
    assert_eq!(h.end("t", old, true), Err(TxnError::ProducerFenced));
    assert!(h.add("t", new, &[("a", 0)]).unwrap().is_some());
}

#[test]
fn init_during_an_open_transaction_aborts_it_and_fences_its_producer() {
    let mut h = Harness::new();
    let old = h.producer("t");
    h.open("t", old, &[("a", 0), ("b", 1)]);
    h.now_ms += 10;
    let plan = h.init("t", None).unwrap();
    // One record fences and aborts: the epoch is bumped in PrepareAbort.
    assert_eq!(plan.next().state, TxnState::PrepareAbort);
    assert_eq!(plan.next().producer_epoch, 1);
    let markers = match h.commit(plan) {
        AfterAppend::Fenced(markers) => markers,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        markers,
        Markers {
            transactional_id: "t".into(),
            producer_id: old.producer_id,
            producer_epoch: 1,
            coordinator_epoch: EPOCH,
            commit: false,
            partitions: tp(&[("a", 0), ("b", 1)]),
        }
    );
    assert_eq!(h.add("t", old, &[("a", 0)]), Err(TxnError::ProducerFenced));
    // The client's retry waits for the abort to complete.
    assert_eq!(h.init("t", None), Err(TxnError::ConcurrentTransactions));
    h.finish("t");
    assert_eq!(h.state("t"), TxnState::CompleteAbort);
    // The epoch the fence took is never a client's: the retry bumps again.
    assert_eq!(h.producer("t"), pe(old.producer_id, 2));
}

#[test]
fn init_while_a_transaction_is_decided_is_concurrent() {
    let mut h = Harness::new();
    let p = h.producer("t");
    h.open("t", p, &[("a", 0)]);
    h.decide("t", p, true);
    assert_eq!(h.init("t", None), Err(TxnError::ConcurrentTransactions));
    assert_eq!(h.init("t", Some(p)), Err(TxnError::ConcurrentTransactions));
    h.finish("t");
    assert_eq!(h.producer("t"), pe(p.producer_id, 1));
}

#[test]
fn abandoning_a_new_ids_first_record_forgets_the_id() {
    let mut h = Harness::new();
    h.init("t", None).unwrap();
    assert_eq!(h.init("t", None), Err(TxnError::ConcurrentTransactions));
    assert!(h.c.abandon("t"));
    assert_eq!(h.c.transactional_id_count(), 0);
    assert!(!h.c.abandon("t"));
    // The retry starts over with a producer id of its own.
    assert_eq!(h.producer("t"), pe(1001, 0));
}

#[test]
fn an_allocation_failure_is_the_allocators_error_and_leaves_no_trace() {
    let mut h = Harness::new();
    let mut failing = || Err(TxnError::CoordinatorLoadInProgress);
    assert_eq!(
        h.c.init_producer_id("t", TIMEOUT_MS, None, h.now_ms, &mut failing),
        Err(TxnError::CoordinatorLoadInProgress)
    );
    assert_eq!(h.c.transactional_id_count(), 0);
    let mut negative = || Ok(-5);
    assert_eq!(
        h.c.init_producer_id("t", TIMEOUT_MS, None, h.now_ms, &mut negative),
        Err(TxnError::CoordinatorNotAvailable)
    );
    assert_eq!(h.c.transactional_id_count(), 0);
}

#[test]
fn a_rotation_refuses_an_allocator_handing_out_the_current_producer_id() {
    let mut h = at_epoch(PRODUCER_EPOCH_EXHAUSTED, recs::ValueVersion::V0);
    let mut same = || Ok(500);
    assert_eq!(
        h.c.init_producer_id("t", TIMEOUT_MS, None, h.now_ms, &mut same),
        Err(TxnError::CoordinatorNotAvailable)
    );
    assert_eq!(h.c.pending("t"), None);
    assert_eq!(h.producer("t"), pe(1000, 0));
}

#[test]
fn a_producer_naming_its_current_epoch_gets_the_next_and_a_retry_gets_it_again() {
    let mut h = Harness::new();
    let p = h.producer("t");
    let plan = h.init("t", Some(p)).unwrap();
    assert_eq!(
        h.commit(plan),
        AfterAppend::ProducerId {
            producer_id: p.producer_id,
            producer_epoch: 1
        }
    );
    assert_eq!(h.metadata("t").last_producer_epoch, 0);
    // The answer was lost: the same request again gets the same epoch.
    let plan = h.init("t", Some(p)).unwrap();
    assert_eq!(
        h.commit(plan),
        AfterAppend::ProducerId {
            producer_id: p.producer_id,
            producer_epoch: 1
        }
    );
    // A plain InitProducerId in between fences that retry.
    h.producer("t");
    assert_eq!(h.init("t", Some(p)), Err(TxnError::ProducerFenced));
}

#[test]
fn a_producer_naming_a_stale_id_or_epoch_is_fenced() {
    let mut h = Harness::new();
    let p = h.producer("t");
    h.producer("t");
    h.producer("t");
    assert_eq!(
        h.init("t", Some(pe(p.producer_id + 1, 2))),
        Err(TxnError::ProducerFenced)
    );
    assert_eq!(
        h.init("t", Some(pe(p.producer_id, 0))),
        Err(TxnError::ProducerFenced)
    );
    // An expected epoch of -1 is no retry of anything.
    assert_eq!(
        h.init("t", Some(pe(p.producer_id, -1))),
        Err(TxnError::ProducerFenced)
    );
    assert_eq!(h.metadata("t").producer_epoch, 2);
}

#[test]
fn a_producer_whose_id_expired_gets_a_new_one_when_it_names_the_old() {
    let mut h = Harness::new();
    let plan = h.init("t", Some(pe(77, 4))).unwrap();
    assert_eq!(
        h.commit(plan),
        AfterAppend::ProducerId {
            producer_id: 1000,
            producer_epoch: 0
        }
    );
}

/// A coordinator whose log holds `t` at producer 500, epoch `epoch`,
/// CompleteCommit.
fn at_epoch(epoch: i16, version: recs::ValueVersion) -> Harness {
    let mut h = Harness::with(TxnConfig {
        log_value_version: version,
        ..TxnConfig::default()
    });
    let value = TxnMetadata {
        producer_id: 500,
        previous_producer_id: 500,
        producer_epoch: epoch,
        last_producer_epoch: NO_PRODUCER_EPOCH,
        timeout_ms: TIMEOUT_MS,
        state: TxnState::CompleteCommit,
        partitions: BTreeSet::new(),
        txn_start_ms: 10,
        last_update_ms: 20,
    };
    let key = recs::encode_key("t").unwrap();
    let value = recs::encode_value(&value.log_value(), version).unwrap();
    h.c = Coordinator::new(h.c.config().clone(), EPOCH);
    h.c.replay(&key, Some(&value)).unwrap();
    h.c.after_load();
    h.log.push((key, Some(value)));
    h
}

#[test]
fn the_last_client_epoch_is_one_below_the_maximum_and_then_the_producer_id_rotates() {
    let mut h = at_epoch(PRODUCER_EPOCH_EXHAUSTED - 1, recs::ValueVersion::V0);
    assert_eq!(h.producer("t"), pe(500, PRODUCER_EPOCH_EXHAUSTED));
    let rotated = h.producer("t");
    assert_eq!(rotated, pe(1000, 0));
    let metadata = h.metadata("t");
    assert_eq!(metadata.previous_producer_id, 500);
    assert_eq!(metadata.last_producer_epoch, NO_PRODUCER_EPOCH);
}

#[test]
fn a_retried_rotation_gets_the_new_producer_id_again() {
    for version in [recs::ValueVersion::V0, recs::ValueVersion::V1] {
        let mut h = at_epoch(PRODUCER_EPOCH_EXHAUSTED, version);
        let old = pe(500, PRODUCER_EPOCH_EXHAUSTED);
        let plan = h.init("t", Some(old)).unwrap();
        let rotated = AfterAppend::ProducerId {
            producer_id: 1000,
            producer_epoch: 0,
        };
        assert_eq!(h.commit(plan), rotated);
        let metadata = h.metadata("t");
        assert_eq!(metadata.previous_producer_id, 500);
        assert_eq!(metadata.last_producer_epoch, PRODUCER_EPOCH_EXHAUSTED);
        // Across a coordinator change the last epoch is gone (it is not
        // in the log), so a retry there is fenced, as in Kafka; only
        // version 1 records keep the previous producer id.
        let (mut moved, _) = h.reload(EPOCH + 1);
        let previous = moved.metadata("t").unwrap().previous_producer_id;
        match version {
            recs::ValueVersion::V0 => assert_eq!(previous, -1),
            recs::ValueVersion::V1 => assert_eq!(previous, 500),
        }
        assert_eq!(
            moved.init_producer_id("t", TIMEOUT_MS, Some(old), h.now_ms, &mut || Ok(9)),
            Err(TxnError::ProducerFenced),
            "{version:?}"
        );
        // On the same coordinator the answer was lost: the retry names the
        // old id again and gets the new one.
        let plan = h.init("t", Some(old)).unwrap();
        assert_eq!(h.commit(plan), rotated);
    }
}

#[test]
fn an_exhausted_producer_naming_another_epoch_is_fenced() {
    let mut h = at_epoch(PRODUCER_EPOCH_EXHAUSTED, recs::ValueVersion::V0);
    assert_eq!(h.init("t", Some(pe(500, 3))), Err(TxnError::ProducerFenced));
    assert_eq!(h.c.pending("t"), None);
}

#[test]
fn fencing_an_open_transaction_at_the_last_client_epoch_uses_the_reserved_one() {
    let mut h = at_epoch(PRODUCER_EPOCH_EXHAUSTED - 1, recs::ValueVersion::V0);
    let p = h.producer("t");
    assert_eq!(p.producer_epoch, PRODUCER_EPOCH_EXHAUSTED);
    h.open("t", p, &[("a", 0)]);
    let plan = h.init("t", None).unwrap();
    assert_eq!(plan.next().producer_epoch, i16::MAX);
    h.commit(plan);
    h.finish("t");
    // i16::MAX is never a client's: the next producer gets a new id.
    assert_eq!(h.producer("t"), pe(1000, 0));
}
