//! Time, loading and applying plans: timeouts, expiry of idle ids, a
//! coordinator taking over a log, plans applied once, and what
//! DescribeTransactions and ListTransactions show.

use super::*;

#[test]
fn a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced() {
    let mut h = Harness::new();
    let p = h.producer("t");
    h.open("t", p, &[("a", 0)]);
    let started_ms = h.now_ms;
    // Kafka aborts once start + timeout < now.
    assert!(h.c.expired(started_ms + i64::from(TIMEOUT_MS)).is_empty());
    h.now_ms = started_ms + i64::from(TIMEOUT_MS) + 1;
    assert_eq!(h.c.expired(h.now_ms), vec!["t".to_string()]);
    let plan = h.c.abort_expired("t", h.now_ms).unwrap();
    assert_eq!(plan.next().state, TxnState::PrepareAbort);
    assert_eq!(h.c.expired(h.now_ms), Vec::<String>::new(), "pending");
    let markers = match h.commit(plan) {
        AfterAppend::Fenced(markers) => markers,
        other => panic!("{other:?}"),
    };
    assert!(!markers.commit);
    assert_eq!(markers.producer_epoch, p.producer_epoch + 1);
    // The old producer learns it was fenced whatever it tries.
    assert_eq!(h.end("t", p, true), Err(TxnError::ProducerFenced));
    assert_eq!(h.add("t", p, &[("b", 0)]), Err(TxnError::ProducerFenced));
    h.finish("t");
    assert_eq!(h.end("t", p, true), Err(TxnError::ProducerFenced));
    assert_eq!(h.state("t"), TxnState::CompleteAbort);
}

#[test]
fn abort_expired_skips_what_is_no_longer_expired() {
    let mut h = Harness::new();
    let p = h.producer("t");
    let late_ms = h.now_ms + 10 * i64::from(TIMEOUT_MS);
    assert!(
        h.c.abort_expired("t", late_ms).is_none(),
        "no transaction open"
    );
    assert!(h.c.abort_expired("unknown", late_ms).is_none());
    h.open("t", p, &[("a", 0)]);
    assert!(h.c.abort_expired("t", h.now_ms).is_none(), "not timed out");
    h.add("t", p, &[("b", 0)]).unwrap().unwrap();
    assert!(h.c.abort_expired("t", late_ms).is_none(), "pending");
    h.c.abandon("t");
    h.decide("t", p, true);
    assert!(h.c.abort_expired("t", late_ms).is_none(), "decided");
}

#[test]
fn idle_ids_expire_with_a_tombstone() {
    let mut h = Harness::new();
    let expiration_ms = crate::config::TRANSACTIONAL_ID_EXPIRATION_MS_DEFAULT;
    let idle = h.producer("idle");
    let done = h.producer("done");
    h.open("done", done, &[("a", 0)]);
    h.decide("done", done, true);
    h.finish("done");
    let open = h.producer("open");
    h.open("open", open, &[("a", 0)]);
    let _ = idle;
    let written_ms = h.now_ms;
    assert!(h
        .c
        .expire_ids(written_ms + expiration_ms - 1, expiration_ms)
        .is_empty());
    h.now_ms = written_ms + expiration_ms;
    let plans = h.c.expire_ids(h.now_ms, expiration_ms);
    let ids: Vec<&str> = plans.iter().map(|p| p.transactional_id()).collect();
    assert_eq!(
        ids,
        vec!["done", "idle"],
        "an open transaction never expires"
    );
    assert!(plans.iter().all(|p| p.value().is_none()));
    assert_eq!(h.init("idle", None), Err(TxnError::ConcurrentTransactions));
    assert!(
        h.c.expire_ids(h.now_ms, expiration_ms).is_empty(),
        "pending"
    );
    let mut plans = plans.into_iter();
    let done_plan = plans.next().unwrap();
    assert_eq!(h.commit(done_plan), AfterAppend::Expired);
    assert_eq!(h.c.metadata("done"), None);
    assert_eq!(h.c.describe("done"), Err(TxnError::TransactionalIdNotFound));
    // A tombstone that could not be written leaves the id as it was.
    assert!(h.c.abandon("idle"));
    assert_eq!(h.state("idle"), TxnState::Empty);
    // A removed id starts over with a new producer id.
    assert_eq!(h.producer("done").producer_epoch, 0);
}

#[test]
fn a_replayed_log_rebuilds_every_id_and_a_tombstone_removes_one() {
    for version in [recs::ValueVersion::V0, recs::ValueVersion::V1] {
        let mut h = Harness::with(TxnConfig {
            log_value_version: version,
            ..TxnConfig::default()
        });
        let a = h.producer("a");
        h.open("a", a, &[("x", 0)]);
        let b = h.producer("b");
        h.open("b", b, &[("x", 1)]);
        h.decide("b", b, false);
        h.finish("b");
        h.producer("c");
        h.now_ms += crate::config::TRANSACTIONAL_ID_EXPIRATION_MS_DEFAULT;
        let plans = h.c.expire_ids(h.now_ms, 1);
        assert_eq!(plans.len(), 2);
        for plan in plans {
            if plan.transactional_id() == "c" {
                h.commit(plan);
            } else {
                h.c.abandon(plan.transactional_id());
            }
        }
        let (loaded, markers) = h.reload(EPOCH + 1);
        assert!(markers.is_empty());
        let persisted = |c: &Coordinator| -> Vec<(String, TxnLogValue)> {
            c.transactions()
                .map(|(id, m)| {
                    let mut value = m.log_value();
                    if version == recs::ValueVersion::V0 {
                        value.previous_producer_id = -1;
                    }
                    (id.to_string(), value)
                })
                .collect()
        };
        assert_eq!(persisted(&loaded), persisted(&h.c));
        assert_eq!(loaded.metadata("c"), None);
        assert_eq!(loaded.metadata("a").unwrap().state, TxnState::Ongoing);
        assert_eq!(loaded.metadata("a").unwrap().last_producer_epoch, -1);
    }
}

#[test]
fn decided_transactions_found_at_load_get_their_markers_again() {
    let mut h = Harness::new();
    let p = h.producer("t");
    h.open("t", p, &[("a", 0), ("b", 0)]);
    let sent = h.decide("t", p, true);
    let mut loading = Coordinator::new(TxnConfig::default(), EPOCH + 1);
    for (key, value) in &h.log {
        loading.replay(key, value.as_deref()).unwrap();
    }
    assert!(loading.is_loading());
    assert_eq!(
        loading.end_txn("t", p, true, 0),
        Err(TxnError::CoordinatorLoadInProgress)
    );
    assert_eq!(
        loading.describe("t"),
        Err(TxnError::CoordinatorLoadInProgress)
    );
    assert!(loading.expired(i64::MAX).is_empty());
    let markers = loading.after_load();
    assert_eq!(
        markers,
        vec![Markers {
            coordinator_epoch: EPOCH + 1,
            ..sent
        }]
    );
    assert_eq!(loading.pending("t"), Some(Pending::Markers));
    let plan = loading.markers_written("t", h.now_ms).unwrap();
    assert_eq!(plan.coordinator_epoch(), EPOCH + 1);
    assert_eq!(loading.complete("t", plan), Ok(AfterAppend::Completed));
    assert_eq!(
        loading.metadata("t").unwrap().state,
        TxnState::CompleteCommit
    );
}

#[test]
fn replay_skips_unknown_keys_and_refuses_damaged_records() {
    let mut c = Coordinator::new(TxnConfig::default(), EPOCH);
    let key = recs::encode_key("t").unwrap();
    let value = TxnLogValue {
        producer_id: 9,
        previous_producer_id: -1,
        next_producer_id: -1,
        producer_epoch: 0,
        timeout_ms: TIMEOUT_MS,
        state: TxnState::Empty,
        partitions: BTreeSet::new(),
        last_update_ms: 1,
        start_ms: -1,
        client_transaction_version: 0,
    };
    let bytes = |value: &TxnLogValue| recs::encode_value(value, recs::ValueVersion::V0).unwrap();
    assert_eq!(c.replay(&key, Some(&bytes(&value))), Ok(Replayed::Stored));
    assert_eq!(
        c.replay(&[0, 2, 0, 1, b'g'], Some(b"anything")),
        Ok(Replayed::UnknownKey { version: 2 })
    );
    assert!(c.replay(&key, Some(&[0, 0, 1])).is_err());
    assert!(c.replay(&[0, 0, 0, 9], None).is_err());
    let fence = TxnLogValue {
        state: TxnState::PrepareEpochFence,
        ..value.clone()
    };
    assert_eq!(
        c.replay(&key, Some(&bytes(&fence))),
        Err(recs::RecordError::StateNotInLog {
            state: TxnState::PrepareEpochFence
        })
    );
    assert!(
        c.metadata("t").is_some(),
        "a refused record changes nothing"
    );
    let dead = TxnLogValue {
        state: TxnState::Dead,
        ..value.clone()
    };
    assert_eq!(c.replay(&key, Some(&bytes(&dead))), Ok(Replayed::Removed));
    assert_eq!(c.metadata("t"), None);
    assert_eq!(c.replay(&key, Some(&bytes(&value))), Ok(Replayed::Stored));
    assert_eq!(c.replay(&key, None), Ok(Replayed::Removed));
    assert_eq!(c.transactional_id_count(), 0);
}

#[test]
fn a_plan_is_applied_once_and_only_by_the_coordinator_that_made_it() {
    let mut h = Harness::new();
    let plan = h.init("t", None).unwrap();
    let copy = plan.clone();
    assert_eq!(
        h.c.complete("u", plan.clone()),
        Err(TxnError::NotCoordinator)
    );
    h.commit(plan);
    assert_eq!(
        h.c.complete("t", copy.clone()),
        Err(TxnError::NotCoordinator)
    );
    // Another leadership of the partition does not apply it either.
    let (mut moved, _) = h.reload(EPOCH + 1);
    assert_eq!(moved.complete("t", copy), Err(TxnError::NotCoordinator));
    // An abandoned plan is gone for good.
    let p = pe(1000, 0);
    let plan = h.add("t", p, &[("a", 0)]).unwrap().unwrap();
    h.c.abandon("t");
    assert_eq!(h.c.complete("t", plan), Err(TxnError::NotCoordinator));
    assert_eq!(h.state("t"), TxnState::Empty);
}

#[test]
fn describe_shows_the_durable_state_as_kafka_names_it() {
    let mut h = Harness::new();
    assert_eq!(h.c.describe(""), Err(TxnError::InvalidRequest));
    assert_eq!(h.c.describe("t"), Err(TxnError::TransactionalIdNotFound));
    let p = h.producer("t");
    h.open("t", p, &[("a", 0), ("b", 2)]);
    assert_eq!(
        h.c.describe("t"),
        Ok(TxnDescription {
            transactional_id: "t".into(),
            producer_id: p.producer_id,
            producer_epoch: p.producer_epoch,
            state: TxnState::Ongoing,
            timeout_ms: TIMEOUT_MS,
            txn_start_ms: h.now_ms,
            partitions: tp(&[("a", 0), ("b", 2)]),
        })
    );
    assert_eq!(h.c.describe("t").unwrap().state.name(), "Ongoing");
}

#[test]
fn list_filters_by_state_producer_and_duration() {
    let mut h = Harness::new();
    let a = h.producer("a");
    h.open("a", a, &[("x", 0)]);
    h.now_ms += 1_000;
    let b = h.producer("b");
    h.open("b", b, &[("x", 0)]);
    h.producer("c");
    h.init("new", None).unwrap();
    let ids = |filter: ListFilter| -> (Vec<String>, Vec<String>) {
        let listing = h.c.list(&filter, h.now_ms).unwrap();
        let ids = listing
            .transactions
            .iter()
            .map(|t| t.transactional_id.clone())
            .collect();
        (ids, listing.unknown_state_filters)
    };
    let names = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    // An id whose first record is not written yet is not listed.
    assert_eq!(ids(ListFilter::default()).0, names(&["a", "b", "c"]));
    let by_state = ListFilter {
        states: names(&["Ongoing", "Bogus"]),
        ..ListFilter::default()
    };
    assert_eq!(ids(by_state), (names(&["a", "b"]), names(&["Bogus"])));
    let only_unknown = ListFilter {
        states: names(&["Bogus"]),
        ..ListFilter::default()
    };
    assert_eq!(ids(only_unknown).0, Vec::<String>::new());
    let by_producer = ListFilter {
        producer_ids: vec![b.producer_id],
        ..ListFilter::default()
    };
    assert_eq!(ids(by_producer).0, names(&["b"]));
    // Started more than 500 ms ago: `a`, and `c`, which never started
    // (its start is -1), as Kafka compares.
    let by_duration = ListFilter {
        duration_ms: 500,
        ..ListFilter::default()
    };
    assert_eq!(ids(by_duration).0, names(&["a", "c"]));
    let listing = h.c.list(&ListFilter::default(), h.now_ms).unwrap();
    assert_eq!(
        listing.transactions[0],
        TxnListing {
            transactional_id: "a".into(),
            producer_id: a.producer_id,
            state: TxnState::Ongoing
        }
    );
}

#[test]
fn a_coordinator_writing_version_one_records_keeps_the_previous_producer_id() {
    let mut h = Harness::with(TxnConfig {
        log_value_version: recs::ValueVersion::V1,
        ..TxnConfig::default()
    });
    let plan = h.init("t", None).unwrap();
    assert_eq!(&plan.value().unwrap()[..2], &[0, 1]);
    h.commit(plan);
    let (loaded, _) = h.reload(EPOCH + 1);
    assert_eq!(loaded.metadata("t").unwrap().previous_producer_id, 1000);
}
