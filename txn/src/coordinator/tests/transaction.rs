//! A transaction's requests: adding partitions and offsets, verifying,
//! ending, and its markers.

use super::*;

#[test]
fn adding_partitions_opens_a_transaction_and_starts_its_clock() {
    let mut h = Harness::new();
    let p = h.producer("t");
    h.now_ms += 100;
    let opened_ms = h.now_ms;
    h.open("t", p, &[("a", 0)]);
    let metadata = h.metadata("t");
    assert_eq!(metadata.state, TxnState::Ongoing);
    assert_eq!(metadata.txn_start_ms, opened_ms);
    h.now_ms += 100;
    h.open("t", p, &[("a", 1), ("b", 0)]);
    let metadata = h.metadata("t");
    assert_eq!(metadata.partitions, tp(&[("a", 0), ("a", 1), ("b", 0)]));
    assert_eq!(metadata.txn_start_ms, opened_ms);
    assert_eq!(metadata.last_update_ms, h.now_ms);
}

#[test]
fn partitions_already_in_the_transaction_are_added_without_a_write() {
    let mut h = Harness::new();
    let p = h.producer("t");
    h.open("t", p, &[("a", 0), ("a", 1)]);
    assert_eq!(h.add("t", p, &[("a", 1)]), Ok(None));
    assert_eq!(h.add("t", p, &[]), Ok(None));
    assert_eq!(h.c.pending("t"), None);
    // Outside a transaction even no partitions open one, as in Kafka.
    let q = h.producer("u");
    assert!(h.add("u", q, &[]).unwrap().is_some());
}

#[test]
fn add_partitions_refusals_follow_kafka() {
    let mut h = Harness::new();
    let old = h.producer("t");
    let p = h.producer("t");
    let check = |h: &mut Harness, id: &str, producer, expected| {
        assert_eq!(
            h.add(id, producer, &[("a", 0)]).map(|plan| plan.is_some()),
            Err(expected),
            "{id} {producer:?}"
        );
    };
    check(&mut h, "", p, TxnError::InvalidRequest);
    check(&mut h, "unknown", p, TxnError::InvalidProducerIdMapping);
    check(
        &mut h,
        "t",
        pe(p.producer_id + 1, p.producer_epoch),
        TxnError::InvalidProducerIdMapping,
    );
    check(&mut h, "t", old, TxnError::ProducerFenced);
    check(
        &mut h,
        "t",
        pe(p.producer_id, p.producer_epoch + 1),
        TxnError::ProducerFenced,
    );
    let long = "x".repeat(crate::limits::TOPIC_NAME_BYTES_MAX + 1);
    assert_eq!(
        h.c.add_partitions("t", p, &tp(&[(&long, 0)]), h.now_ms)
            .map(|p| p.is_some()),
        Err(TxnError::InvalidRequest)
    );
    h.open("t", p, &[("a", 0)]);
    h.decide("t", p, true);
    check(&mut h, "t", p, TxnError::ConcurrentTransactions);
}

#[test]
fn a_transaction_spans_a_bounded_number_of_partitions() {
    let mut h = Harness::new();
    let p = h.producer("t");
    let max = crate::limits::TRANSACTION_PARTITIONS_MAX as i32;
    let all: BTreeSet<TopicPartition> = (0..max).map(|i| ("a".to_string(), i)).collect();
    let plan = h.c.add_partitions("t", p, &all, h.now_ms).unwrap().unwrap();
    h.commit(plan);
    assert_eq!(
        h.add("t", p, &[("b", 0)]).map(|plan| plan.is_some()),
        Err(TxnError::InvalidRequest)
    );
}

#[test]
fn add_offsets_adds_the_groups_offsets_partition() {
    let mut h = Harness::new();
    let p = h.producer("t");
    let plan = h.c.add_offsets("t", p, 17, h.now_ms).unwrap().unwrap();
    h.commit(plan);
    assert_eq!(
        h.metadata("t").partitions,
        tp(&[("__consumer_offsets", 17)])
    );
    assert_eq!(h.c.add_offsets("t", p, 17, h.now_ms), Ok(None));
}

#[test]
fn verify_answers_per_partition_whether_it_is_in_the_transaction() {
    let mut h = Harness::new();
    let p = h.producer("t");
    h.open("t", p, &[("a", 0)]);
    let asked = tp(&[("a", 0), ("a", 1)]);
    assert_eq!(
        h.c.verify_partitions("t", p, &asked),
        Ok(vec![
            (("a".to_string(), 0), Ok(())),
            (("a".to_string(), 1), Err(TxnError::TransactionAbortable)),
        ])
    );
    // Read-only, and a pending transition is not checked.
    h.add("t", p, &[("a", 1)]).unwrap().unwrap();
    assert!(h.c.verify_partitions("t", p, &asked).is_ok());
    h.c.abandon("t");
    let verify = |h: &Harness, id: &str, producer| h.c.verify_partitions(id, producer, &asked);
    assert_eq!(verify(&h, "", p), Err(TxnError::InvalidRequest));
    assert_eq!(verify(&h, "u", p), Err(TxnError::InvalidProducerIdMapping));
    assert_eq!(
        verify(&h, "t", pe(1, 0)),
        Err(TxnError::InvalidProducerIdMapping)
    );
    assert_eq!(
        verify(&h, "t", pe(p.producer_id, 3)),
        Err(TxnError::ProducerFenced)
    );
    h.decide("t", p, false);
    assert_eq!(verify(&h, "t", p), Err(TxnError::ConcurrentTransactions));
}

#[test]
fn committing_writes_commit_markers_and_completes_once_they_are_written() {
    let mut h = Harness::new();
    let p = h.producer("t");
    h.open("t", p, &[("a", 0), ("b", 3)]);
    let started_ms = h.metadata("t").txn_start_ms;
    h.now_ms += 50;
    let plan = h.end("t", p, true).unwrap().unwrap();
    assert_eq!(plan.next().state, TxnState::PrepareCommit);
    assert_eq!(
        h.c.pending("t"),
        Some(Pending::Append(TxnState::PrepareCommit))
    );
    let markers = match h.commit(plan) {
        AfterAppend::Ended(markers) => markers,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        markers,
        Markers {
            transactional_id: "t".into(),
            producer_id: p.producer_id,
            producer_epoch: p.producer_epoch,
            coordinator_epoch: EPOCH,
            commit: true,
            partitions: tp(&[("a", 0), ("b", 3)]),
        }
    );
    assert_eq!(h.state("t"), TxnState::PrepareCommit);
    assert_eq!(h.c.pending("t"), Some(Pending::Markers));
    h.now_ms += 50;
    let plan = h.c.markers_written("t", h.now_ms).unwrap();
    assert_eq!(
        h.c.pending("t"),
        Some(Pending::Completion(TxnState::CompleteCommit))
    );
    h.commit(plan);
    let metadata = h.metadata("t");
    assert_eq!(metadata.state, TxnState::CompleteCommit);
    assert!(metadata.partitions.is_empty());
    assert_eq!(metadata.txn_start_ms, started_ms);
    assert_eq!(metadata.last_update_ms, h.now_ms);
    assert_eq!(metadata.producer_epoch, p.producer_epoch);
    assert_eq!(h.c.pending("t"), None);
}

#[test]
fn an_abort_writes_abort_markers() {
    let mut h = Harness::new();
    let p = h.producer("t");
    h.open("t", p, &[("a", 0)]);
    let markers = h.decide("t", p, false);
    assert!(!markers.commit);
    assert_eq!(h.state("t"), TxnState::PrepareAbort);
    h.finish("t");
    assert_eq!(h.state("t"), TxnState::CompleteAbort);
}

#[test]
fn end_txn_retries_and_refusals_follow_kafka() {
    // (how the transaction stands, commit?, the answer)
    let table: &[(&str, bool, Result<bool, TxnError>)] = &[
        ("empty", true, Err(TxnError::InvalidTxnState)),
        ("empty", false, Err(TxnError::InvalidTxnState)),
        // While markers are written everything waits.
        (
            "commit-decided",
            true,
            Err(TxnError::ConcurrentTransactions),
        ),
        (
            "commit-decided",
            false,
            Err(TxnError::ConcurrentTransactions),
        ),
        (
            "abort-decided",
            false,
            Err(TxnError::ConcurrentTransactions),
        ),
        // A retry after completion succeeds; the other way is refused.
        ("committed", true, Ok(false)),
        ("committed", false, Err(TxnError::InvalidTxnState)),
        ("aborted", false, Ok(false)),
        ("aborted", true, Err(TxnError::InvalidTxnState)),
        ("ongoing", true, Ok(true)),
        ("ongoing", false, Ok(true)),
    ];
    for (stand, commit, expected) in table {
        let mut h = Harness::new();
        let p = h.producer("t");
        if *stand != "empty" {
            h.open("t", p, &[("a", 0)]);
        }
        match *stand {
            "commit-decided" => drop(h.decide("t", p, true)),
            "abort-decided" => drop(h.decide("t", p, false)),
            "committed" | "aborted" => {
                h.decide("t", p, *stand == "committed");
                h.finish("t");
            }
            _ => {}
        }
        let answer = h.end("t", p, *commit).map(|plan| plan.is_some());
        assert_eq!(&answer, expected, "{stand} commit={commit}");
    }
    let mut h = Harness::new();
    let old = h.producer("t");
    let p = h.producer("t");
    assert_eq!(h.end("", p, true), Err(TxnError::InvalidRequest));
    assert_eq!(h.end("u", p, true), Err(TxnError::InvalidProducerIdMapping));
    assert_eq!(
        h.end("t", pe(3, 1), true),
        Err(TxnError::InvalidProducerIdMapping)
    );
    assert_eq!(h.end("t", old, true), Err(TxnError::ProducerFenced));
    assert_eq!(
        h.end("t", pe(p.producer_id, 2), true),
        Err(TxnError::ProducerFenced)
    );
}

#[test]
fn a_decided_transaction_found_without_pending_markers_refuses_the_other_decision() {
    // Only a replayed log can hold one (a coordinator always writes its
    // markers); Kafka's rule still applies.
    let mut h = Harness::new();
    let p = h.producer("t");
    h.open("t", p, &[("a", 0)]);
    h.decide("t", p, true);
    let (mut moved, markers) = h.reload(EPOCH + 1);
    assert_eq!(markers.len(), 1);
    assert_eq!(
        moved.end_txn("t", p, true, 0),
        Err(TxnError::ConcurrentTransactions)
    );
    let mut loading = Coordinator::new(TxnConfig::default(), EPOCH + 2);
    for (key, value) in &h.log {
        loading.replay(key, value.as_deref()).unwrap();
    }
    loading.loading = false;
    assert_eq!(
        loading.end_txn("t", p, false, 0),
        Err(TxnError::InvalidTxnState)
    );
    assert_eq!(
        loading.end_txn("t", p, true, 0),
        Err(TxnError::ConcurrentTransactions)
    );
}

#[test]
fn markers_written_refuses_an_id_not_writing_markers() {
    let mut h = Harness::new();
    assert_eq!(
        h.c.markers_written("t", h.now_ms).map(|_| ()),
        Err(TxnError::NotCoordinator)
    );
    let p = h.producer("t");
    h.open("t", p, &[("a", 0)]);
    assert_eq!(
        h.c.markers_written("t", h.now_ms).map(|_| ()),
        Err(TxnError::InvalidTxnState)
    );
}

#[test]
fn a_failed_completion_append_waits_for_another_markers_written() {
    let mut h = Harness::new();
    let p = h.producer("t");
    h.open("t", p, &[("a", 0)]);
    h.decide("t", p, true);
    let lost = h.c.markers_written("t", h.now_ms).unwrap();
    assert!(h.c.abandon("t"));
    assert_eq!(h.c.pending("t"), Some(Pending::Markers));
    assert!(!h.c.abandon("t"), "markers are not abandoned");
    assert_eq!(h.c.complete("t", lost), Err(TxnError::NotCoordinator));
    h.finish("t");
    assert_eq!(h.state("t"), TxnState::CompleteCommit);
}

#[test]
fn a_new_transaction_after_a_completed_one_starts_afresh() {
    let mut h = Harness::new();
    let p = h.producer("t");
    h.open("t", p, &[("a", 0)]);
    h.decide("t", p, true);
    h.finish("t");
    h.now_ms += 1_000;
    h.open("t", p, &[("b", 0)]);
    let metadata = h.metadata("t");
    assert_eq!(metadata.partitions, tp(&[("b", 0)]));
    assert_eq!(metadata.txn_start_ms, h.now_ms);
    assert_eq!(metadata.producer_epoch, p.producer_epoch);
}
