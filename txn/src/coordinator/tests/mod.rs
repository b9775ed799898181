//! Tests of the transaction state machine, by concern: `init`
//! (InitProducerId), `transaction` (adding partitions, ending, markers)
//! and `lifecycle` (timeouts, expiry, loading, applying plans,
//! DescribeTransactions and ListTransactions).

use std::collections::BTreeSet;

use super::*;
use crate::records::{self as recs, TxnRecord};
use crate::TopicPartition;

mod init;
mod lifecycle;
mod transaction;

const TIMEOUT_MS: i32 = 60_000;
const EPOCH: i32 = 5;

fn tp(list: &[(&str, i32)]) -> BTreeSet<TopicPartition> {
    list.iter().map(|(t, p)| (t.to_string(), *p)).collect()
}

fn pe(producer_id: i64, producer_epoch: i16) -> ProducerIdAndEpoch {
    ProducerIdAndEpoch {
        producer_id,
        producer_epoch,
    }
}

/// Drives a loaded coordinator, allocating producer ids from 1000 up and
/// keeping the log of every record it applied.
struct Harness {
    c: Coordinator,
    now_ms: i64,
    last_pid: i64,
    log: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

impl Harness {
    fn new() -> Self {
        Self::with(TxnConfig::default())
    }

    fn with(config: TxnConfig) -> Self {
        let mut c = Coordinator::new(config, EPOCH);
        assert_eq!(c.after_load(), Vec::new());
        Self {
            c,
            now_ms: 1_000_000,
            last_pid: 999,
            log: Vec::new(),
        }
    }

    fn init(&mut self, id: &str, expected: Option<ProducerIdAndEpoch>) -> Result<Plan, TxnError> {
        let last_pid = &mut self.last_pid;
        let mut alloc = || {
            *last_pid += 1;
            Ok(*last_pid)
        };
        self.c
            .init_producer_id(id, TIMEOUT_MS, expected, self.now_ms, &mut alloc)
    }

    /// Appends `plan`'s record (checking it decodes to the planned state)
    /// and applies it.
    fn commit(&mut self, plan: Plan) -> AfterAppend {
        let decoded = recs::decode(plan.key(), plan.value()).unwrap();
        match decoded {
            TxnRecord::Value {
                transactional_id,
                value,
            } => {
                assert_eq!(transactional_id, plan.transactional_id());
                let mut expected = plan.next().log_value();
                if self.c.config().log_value_version == recs::ValueVersion::V0 {
                    expected.previous_producer_id = crate::limits::NO_PRODUCER_ID;
                }
                assert_eq!(value, expected);
            }
            TxnRecord::Tombstone { transactional_id } => {
                assert_eq!(transactional_id, plan.transactional_id());
                assert_eq!(plan.next().state, TxnState::Dead);
            }
        }
        self.log
            .push((plan.key().to_vec(), plan.value().map(<[u8]>::to_vec)));
        let id = plan.transactional_id().to_string();
        self.c.complete(&id, plan).unwrap()
    }

    /// A producer initialised for `id`.
    fn producer(&mut self, id: &str) -> ProducerIdAndEpoch {
        let plan = self.init(id, None).unwrap();
        match self.commit(plan) {
            AfterAppend::ProducerId {
                producer_id,
                producer_epoch,
            } => pe(producer_id, producer_epoch),
            other => panic!("{other:?}"),
        }
    }

    fn add(
        &mut self,
        id: &str,
        producer: ProducerIdAndEpoch,
        partitions: &[(&str, i32)],
    ) -> Result<Option<Plan>, TxnError> {
        self.c
            .add_partitions(id, producer, &tp(partitions), self.now_ms)
    }

    /// Adds `partitions` and applies it.
    fn open(&mut self, id: &str, producer: ProducerIdAndEpoch, partitions: &[(&str, i32)]) {
        let plan = self.add(id, producer, partitions).unwrap().unwrap();
        assert_eq!(self.commit(plan), AfterAppend::Added);
    }

    fn end(
        &mut self,
        id: &str,
        producer: ProducerIdAndEpoch,
        commit: bool,
    ) -> Result<Option<Plan>, TxnError> {
        self.c.end_txn(id, producer, commit, self.now_ms)
    }

    /// Ends the transaction; the markers to write.
    fn decide(&mut self, id: &str, producer: ProducerIdAndEpoch, commit: bool) -> Markers {
        let plan = self.end(id, producer, commit).unwrap().unwrap();
        match self.commit(plan) {
            AfterAppend::Ended(markers) => markers,
            other => panic!("{other:?}"),
        }
    }

    /// The markers are written: the transaction completes.
    fn finish(&mut self, id: &str) {
        let plan = self.c.markers_written(id, self.now_ms).unwrap();
        assert_eq!(self.commit(plan), AfterAppend::Completed);
    }

    fn state(&self, id: &str) -> TxnState {
        self.c.metadata(id).map_or(TxnState::Dead, |m| m.state)
    }

    fn metadata(&self, id: &str) -> TxnMetadata {
        self.c.metadata(id).unwrap().clone()
    }

    /// A coordinator at epoch `epoch` that loaded this one's log.
    fn reload(&self, epoch: i32) -> (Coordinator, Vec<Markers>) {
        let mut loaded = Coordinator::new(self.c.config().clone(), epoch);
        for (key, value) in &self.log {
            loaded.replay(key, value.as_deref()).unwrap();
        }
        let markers = loaded.after_load();
        (loaded, markers)
    }
}
