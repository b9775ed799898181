//! Random requests on a few transactional ids, with appends that randomly
//! fail, markers written late, timeouts, expiry and coordinator failovers,
//! checked after every step against the rules a transaction coordinator
//! must keep:
//! - a producer's (id, epoch) never goes back for a transactional id, and
//!   `i16::MAX` is never a client's epoch;
//! - durable states change only along Kafka's allowed transitions;
//! - a transaction is decided once: commit and abort markers are never
//!   both issued for it, and a decided transaction completes its way;
//! - while a transition is pending no other request on the id succeeds;
//! - an abandoned append leaves the id as it was;
//! - replaying every record that was applied into a fresh coordinator
//!   gives the same durable state, and its load resends the markers of
//!   exactly the decided transactions.

use std::collections::{BTreeMap, BTreeSet};

use txn::config::TxnConfig;
use txn::coordinator::{
    AfterAppend, Coordinator, Markers, Pending, Plan, ProducerIdAndEpoch, TxnMetadata,
};
use txn::error::TxnError;
use txn::limits::PRODUCER_EPOCH_EXHAUSTED;
use txn::records::{self, TxnLogValue, ValueVersion};
use txn::state::TxnState;

const SEEDS: u64 = 500;
const STEPS: usize = 200;
const IDS: [&str; 4] = ["a", "b", "c", "x"];
const TOPICS: [&str; 2] = ["orders", "payments"];
const EXPIRATION_MS: i64 = 200_000;

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

struct Sim {
    rng: Rng,
    version: ValueVersion,
    c: Coordinator,
    epoch: i32,
    now_ms: i64,
    last_pid: i64,
    /// Every record applied, in order.
    log: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    /// Plans being appended, with the id's durable state before them.
    in_flight: Vec<(Plan, Option<TxnMetadata>)>,
    /// Producer ids and epochs handed to clients, by id (latest last).
    clients: BTreeMap<String, Vec<ProducerIdAndEpoch>>,
    /// The highest (producer id, epoch) each id has had durably.
    floor: BTreeMap<String, (i64, i16)>,
    /// The transactions each id opened, so each has an identity.
    opened: BTreeMap<String, u64>,
    /// Each transaction's decision: commit or abort.
    decisions: BTreeMap<(String, u64), bool>,
}

impl Sim {
    fn new(seed: u64) -> Self {
        let version = if seed % 2 == 0 {
            ValueVersion::V0
        } else {
            ValueVersion::V1
        };
        // `x` starts three epochs short of exhaustion, so its producer id
        // rotates within a run.
        let x = TxnLogValue {
            producer_id: 500,
            previous_producer_id: -1,
            next_producer_id: -1,
            producer_epoch: PRODUCER_EPOCH_EXHAUSTED - 3,
            timeout_ms: 10_000,
            state: TxnState::CompleteCommit,
            partitions: BTreeSet::new(),
            last_update_ms: 0,
            start_ms: 0,
            client_transaction_version: 0,
        };
        let log = vec![(
            records::encode_key("x").unwrap(),
            Some(records::encode_value(&x, version).unwrap()),
        )];
        let mut sim = Sim {
            rng: Rng(seed),
            version,
            c: Coordinator::new(config(version), 0),
            epoch: 0,
            now_ms: 1_000,
            last_pid: 999,
            log,
            in_flight: Vec::new(),
            clients: BTreeMap::new(),
            floor: BTreeMap::from([("x".to_string(), (500, PRODUCER_EPOCH_EXHAUSTED - 3))]),
            opened: BTreeMap::new(),
            decisions: BTreeMap::new(),
        };
        sim.c = sim.load(0);
        sim
    }

    /// A coordinator at `epoch` that replayed the log; checks its load.
    fn load(&mut self, epoch: i32) -> Coordinator {
        let mut loaded = Coordinator::new(config(self.version), epoch);
        for (key, value) in &self.log {
            loaded.replay(key, value.as_deref()).unwrap();
        }
        let markers = loaded.after_load();
        let decided: Vec<&str> = loaded
            .transactions()
            .filter(|(_, m)| matches!(m.state, TxnState::PrepareCommit | TxnState::PrepareAbort))
            .map(|(id, _)| id)
            .collect();
        let resent: Vec<&str> = markers
            .iter()
            .map(|m| m.transactional_id.as_str())
            .collect();
        assert_eq!(
            resent, decided,
            "the load resends exactly the decided transactions"
        );
        for m in &markers {
            assert_eq!(m.coordinator_epoch, epoch);
            let metadata = loaded.metadata(&m.transactional_id).unwrap().clone();
            self.check_markers(m, &metadata);
        }
        loaded
    }

    fn persisted(&self, c: &Coordinator) -> Vec<(String, Vec<u8>)> {
        c.transactions()
            .map(|(id, m)| {
                (
                    id.to_string(),
                    records::encode_value(&m.log_value(), self.version).unwrap(),
                )
            })
            .collect()
    }

    fn check_replay(&mut self) {
        let loaded = self.load(self.epoch + 1);
        assert_eq!(
            self.persisted(&loaded),
            self.persisted(&self.c),
            "replay differs"
        );
    }

    fn alloc(last_pid: &mut i64) -> impl FnMut() -> Result<i64, TxnError> + '_ {
        move || {
            *last_pid += 1;
            Ok(*last_pid)
        }
    }

    /// A producer a client might send as: the latest (mostly), an older
    /// one, or one nobody was given.
    fn producer(&mut self, id: &str) -> ProducerIdAndEpoch {
        let known = self.clients.get(id).cloned().unwrap_or_default();
        match (known.last(), self.rng.below(10)) {
            (Some(latest), 0..=6) => *latest,
            (Some(_), 7 | 8) => *self.rng.pick(&known),
            _ => ProducerIdAndEpoch {
                producer_id: 995 + self.rng.below(10) as i64,
                producer_epoch: self.rng.below(3) as i16,
            },
        }
    }

    fn partitions(&mut self) -> BTreeSet<(String, i32)> {
        (0..1 + self.rng.below(3))
            .map(|_| (self.rng.pick(&TOPICS).to_string(), self.rng.below(3) as i32))
            .collect()
    }

    /// A request's outcome: while the id has a transition pending it must
    /// be refused; a plan goes in flight.
    fn outcome(
        &mut self,
        id: &str,
        pending: Option<Pending>,
        outcome: Result<Option<Plan>, TxnError>,
    ) {
        if pending.is_some() {
            assert!(
                matches!(
                    outcome,
                    Err(TxnError::ConcurrentTransactions
                        | TxnError::ProducerFenced
                        | TxnError::InvalidProducerIdMapping
                        | TxnError::InvalidTransactionTimeout)
                ),
                "{id}: {outcome:?} while {pending:?}"
            );
        }
        if let Ok(Some(plan)) = outcome {
            self.fly(plan);
        }
    }

    fn fly(&mut self, plan: Plan) {
        let id = plan.transactional_id().to_string();
        assert!(
            self.in_flight
                .iter()
                .all(|(p, _)| p.transactional_id() != id),
            "{id}: two transitions in flight"
        );
        let before = self.c.metadata(&id).cloned();
        self.in_flight.push((plan, before));
    }

    fn step(&mut self) {
        let id = self.rng.pick(&IDS).to_string();
        let pending = self.c.pending(&id);
        match self.rng.below(100) {
            0..=14 => {
                let timeout_ms = *self.rng.pick(&[1_000, 10_000, 60_000, 900_001]);
                let expected = match self.rng.below(10) {
                    0..=5 => None,
                    _ => Some(self.producer(&id)),
                };
                let outcome = self.c.init_producer_id(
                    &id,
                    timeout_ms,
                    expected,
                    self.now_ms,
                    &mut Self::alloc(&mut self.last_pid),
                );
                self.outcome(&id, pending, outcome.map(Some));
            }
            15..=34 => {
                let producer = self.producer(&id);
                let partitions = self.partitions();
                let outcome = self
                    .c
                    .add_partitions(&id, producer, &partitions, self.now_ms);
                self.outcome(&id, pending, outcome);
            }
            35..=39 => {
                let producer = self.producer(&id);
                let outcome = self.c.add_offsets(&id, producer, 7, self.now_ms);
                self.outcome(&id, pending, outcome);
            }
            40..=51 => {
                let producer = self.producer(&id);
                let commit = self.rng.chance(60);
                let outcome = self.c.end_txn(&id, producer, commit, self.now_ms);
                self.outcome(&id, pending, outcome);
            }
            52..=55 => {
                let producer = self.producer(&id);
                let partitions = self.partitions();
                if let Ok(answers) = self.c.verify_partitions(&id, producer, &partitions) {
                    let metadata = self.c.metadata(&id).unwrap();
                    assert_eq!(metadata.producer_id, producer.producer_id);
                    for (partition, answer) in answers {
                        assert_eq!(answer.is_ok(), metadata.partitions.contains(&partition));
                    }
                }
            }
            56..=79 => self.resolve(),
            80..=87 => {
                if pending == Some(Pending::Markers) {
                    let plan = self.c.markers_written(&id, self.now_ms).unwrap();
                    self.fly(plan);
                } else {
                    assert!(self.c.markers_written(&id, self.now_ms).is_err());
                }
            }
            88..=93 => {
                self.now_ms += self.rng.below(40_000) as i64;
                for expired in self.c.expired(self.now_ms) {
                    if let Some(plan) = self.c.abort_expired(&expired, self.now_ms) {
                        self.fly(plan);
                    }
                }
            }
            94..=97 => {
                self.now_ms += self.rng.below(100_000) as i64;
                for plan in self.c.expire_ids(self.now_ms, EXPIRATION_MS) {
                    self.fly(plan);
                }
            }
            _ => self.fail_over(),
        }
    }

    /// One in-flight append finishes: mostly durable, sometimes failed.
    fn resolve(&mut self) {
        if self.in_flight.is_empty() {
            return;
        }
        let at = self.rng.below(self.in_flight.len());
        let (plan, before) = self.in_flight.swap_remove(at);
        let id = plan.transactional_id().to_string();
        if self.rng.chance(20) {
            assert!(self.c.abandon(&id));
            assert_eq!(
                self.c.metadata(&id),
                before.as_ref(),
                "{id}: abandon changed the state"
            );
            assert!(matches!(self.c.pending(&id), None | Some(Pending::Markers)));
            return;
        }
        let record = (plan.key().to_vec(), plan.value().map(<[u8]>::to_vec));
        let next = plan.next().clone();
        let then = self.c.complete(&id, plan).unwrap();
        self.log.push(record);
        self.check_transition(&id, before.as_ref(), &next);
        match then {
            AfterAppend::ProducerId {
                producer_id,
                producer_epoch,
            } => {
                assert!(producer_epoch <= PRODUCER_EPOCH_EXHAUSTED);
                assert_eq!(
                    (producer_id, producer_epoch),
                    (next.producer_id, next.producer_epoch)
                );
                let given = ProducerIdAndEpoch {
                    producer_id,
                    producer_epoch,
                };
                self.clients.entry(id.clone()).or_default().push(given);
            }
            AfterAppend::Ended(markers) | AfterAppend::Fenced(markers) => {
                assert_eq!(markers.coordinator_epoch, self.epoch);
                self.check_markers(&markers, &next);
                assert_eq!(self.c.pending(&id), Some(Pending::Markers));
            }
            AfterAppend::Added | AfterAppend::Completed => {
                assert_eq!(self.c.pending(&id), None)
            }
            AfterAppend::Expired => assert_eq!(self.c.metadata(&id), None),
        }
    }

    fn check_transition(&mut self, id: &str, before: Option<&TxnMetadata>, next: &TxnMetadata) {
        match before {
            None => assert_eq!(
                next.state,
                TxnState::Empty,
                "{id}: created as {}",
                next.state
            ),
            Some(before) => assert!(
                next.state.can_follow(before.state),
                "{id}: {} after {}",
                next.state,
                before.state
            ),
        }
        if next.state == TxnState::Dead {
            return;
        }
        let floor = self.floor.entry(id.to_string()).or_insert((-1, -1));
        let now = (next.producer_id, next.producer_epoch);
        assert!(
            now >= *floor,
            "{id}: producer {now:?} went back from {floor:?}"
        );
        if now.0 != floor.0 {
            assert_eq!(now.1, 0, "{id}: a new producer id starts at epoch 0");
        }
        *floor = now;
        let opening =
            next.state == TxnState::Ongoing && before.is_none_or(|b| b.state != TxnState::Ongoing);
        if opening {
            *self.opened.entry(id.to_string()).or_default() += 1;
        }
        let decided = match next.state {
            TxnState::PrepareCommit | TxnState::CompleteCommit => Some(true),
            TxnState::PrepareAbort | TxnState::CompleteAbort => Some(false),
            _ => None,
        };
        if let Some(commit) = decided {
            self.decide(id, commit);
        }
    }

    /// Records the decision of `id`'s current transaction; it never flips.
    fn decide(&mut self, id: &str, commit: bool) {
        let number = self.opened.get(id).copied().unwrap_or(0);
        let decision = *self
            .decisions
            .entry((id.to_string(), number))
            .or_insert(commit);
        assert_eq!(
            decision, commit,
            "{id}: transaction {number} decided both ways"
        );
    }

    fn check_markers(&mut self, markers: &Markers, metadata: &TxnMetadata) {
        let expected_state = if markers.commit {
            TxnState::PrepareCommit
        } else {
            TxnState::PrepareAbort
        };
        assert_eq!(metadata.state, expected_state);
        assert_eq!(markers.partitions, metadata.partitions);
        assert_eq!(
            (markers.producer_id, markers.producer_epoch),
            (metadata.producer_id, metadata.producer_epoch)
        );
        self.decide(&markers.transactional_id.clone(), markers.commit);
    }

    /// The partition's leadership moves: appends in flight are lost, and
    /// the next coordinator loads the log.
    fn fail_over(&mut self) {
        self.epoch += 1;
        let loaded = self.load(self.epoch);
        assert_eq!(
            self.persisted(&loaded),
            self.persisted(&self.c),
            "replay differs"
        );
        self.c = loaded;
        self.in_flight.clear();
    }
}

fn config(version: ValueVersion) -> TxnConfig {
    TxnConfig {
        log_value_version: version,
        ..TxnConfig::default()
    }
}

#[test]
fn random_operations_keep_kafkas_invariants() {
    let mut completed = 0usize;
    let mut rotated = 0usize;
    for seed in 0..SEEDS {
        let mut sim = Sim::new(seed);
        for _ in 0..STEPS {
            let before = sim.log.len();
            sim.step();
            completed += sim.log.len() - before;
        }
        sim.check_replay();
        if sim.c.metadata("x").is_some_and(|m| m.producer_id != 500) {
            rotated += 1;
        }
    }
    // The runs reach the paths they are meant to check.
    assert!(
        completed > SEEDS as usize * 20,
        "only {completed} records applied"
    );
    assert!(rotated > 0, "no producer id ever rotated");
}
