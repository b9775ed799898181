//! Deterministic simulation of the metadata-log quorum: 3 and 5 voters on one thread, seeded faults.
//!
//! Faults injected (all from one seeded RNG, virtual time = ticks, no sleeps): message loss,
//! per-message delay (which also reorders), a partition that isolates the leader and heals,
//! another that cuts a follower off long enough to fall behind the leader's snapshot, and
//! crashes, some of them between `ready` and `persist` (the unpersisted round is lost),
//! followed by a restart from the node's store.
//!
//! The application state of a node is the list of entries it applied, from index 1. Every
//! node compacts its log whenever the applied entries since its last snapshot pass
//! `SNAPSHOT_LOG_BYTES_MAX`, with that list as the snapshot data; a restarted node starts from
//! its latest snapshot, and a node that installs a leader's snapshot replaces its list with
//! the snapshot's. The transport reports every snapshot message as delivered or lost.
//!
//! Checked for every seed: at most one leader per term (election safety); every node's state
//! is a prefix of one common sequence of committed entries, and an entry once applied is
//! never applied differently, whether it came as an entry or inside a snapshot (state machine
//! safety); after healing, a proposal is applied on every node within `HEAL_TICKS_MAX` ticks
//! (liveness), and then all nodes' states are identical and hold every entry any node ever
//! applied (no committed entry lost to a compaction or a snapshot).
//!
//! raft-rs draws election timeouts from `thread_rng`; to keep a seed reproducible each node's
//! timeout range is one tick wide, drawn from the seeded RNG at every (re)start.

use std::collections::{BTreeMap, HashMap};

use replication::quorum::{
    Committed, InstalledSnapshot, Outgoing, Quorum, QuorumConfig, SnapshotDelivery, SnapshotPolicy,
};
use replication::store::MemoryStore;
use replication::{Error, Message};

const SEEDS_PER_SIZE: u64 = 1_000;
const CHAOS_TICKS: u64 = 300;
const HEAL_TICKS_MAX: u64 = 300;
const REPROPOSE_EVERY_TICKS: u64 = 40;
const READY_ROUNDS_MAX: usize = 64;
const ELECTION_TICKS_MIN: usize = 10;
const ELECTION_TICKS_SPREAD: usize = 15;
const DELAY_TICKS_MAX: u64 = 4;
/// About ten applied entries: a follower cut off for `CUT_OFF_TICKS_MIN` misses more.
const SNAPSHOT_LOG_BYTES_MAX: u64 = 256;
const CUT_OFF_TICKS_MIN: u64 = 60;
const CUT_OFF_TICKS_MAX: u64 = 150;

struct Faults {
    loss_percent: u32,
    delay_ticks_max: u64,
    crash_per_mille: u32,
    crash_before_persist_percent: u32,
}

struct InFlight {
    deliver_at: u64,
    /// Breaks ties among messages due at the same tick in a seeded order.
    shuffle: u64,
    from: u64,
    message: Message,
    snapshot: bool,
}

/// What the faults and the quorum did, summed over seeds, so that a run that exercised
/// nothing (no crash, no election, nothing committed under faults) fails instead of passing.
#[derive(Default, Debug)]
struct Stats {
    crashes: u64,
    crashes_before_persist: u64,
    leader_partitions: u64,
    messages_lost: u64,
    terms_with_leader: u64,
    entries_committed_under_faults: u64,
    heal_ticks_max: u64,
    compactions: u64,
    snapshots_installed: u64,
    seeds_with_snapshot_installed: u64,
    snapshot_deliveries_failed: u64,
}

struct Sim {
    seed: u64,
    stats: Stats,
    rng: fastrand::Rng,
    voters: Vec<u64>,
    nodes: Vec<Option<Quorum<MemoryStore>>>,
    disks: Vec<MemoryStore>,
    restart_at: Vec<Option<u64>>,
    /// Per node, its application state: the entries applied, from index 1 on.
    applied: Vec<Vec<Committed>>,
    /// The one committed sequence, by index.
    log: BTreeMap<u64, Committed>,
    leaders_by_term: HashMap<u64, u64>,
    in_flight: Vec<InFlight>,
    /// A node alone in its partition: the leader at the time of the partition.
    isolated: Option<u64>,
    /// A follower alone in its partition.
    cut_off: Option<u64>,
    policy: SnapshotPolicy,
    now: u64,
    faults: Faults,
    next_payload: u64,
}

impl Sim {
    fn new(seed: u64, size: u64) -> Self {
        let mut rng = fastrand::Rng::with_seed(seed);
        let voters: Vec<u64> = (1..=size).collect();
        let disks: Vec<MemoryStore> = voters.iter().map(|_| MemoryStore::new(&voters)).collect();
        let faults = Faults {
            loss_percent: rng.u32(0..=20),
            delay_ticks_max: rng.u64(1..=DELAY_TICKS_MAX),
            crash_per_mille: rng.u32(0..=8),
            crash_before_persist_percent: rng.u32(0..=50),
        };
        let mut sim = Sim {
            seed,
            stats: Stats::default(),
            rng,
            nodes: voters.iter().map(|_| None).collect(),
            restart_at: voters.iter().map(|_| None).collect(),
            applied: voters.iter().map(|_| Vec::new()).collect(),
            voters,
            disks,
            log: BTreeMap::new(),
            leaders_by_term: HashMap::new(),
            in_flight: Vec::new(),
            isolated: None,
            cut_off: None,
            policy: SnapshotPolicy {
                log_bytes_max: SNAPSHOT_LOG_BYTES_MAX,
            },
            now: 0,
            faults,
            next_payload: 0,
        };
        for index in 0..sim.voters.len() {
            sim.start(index);
        }
        sim
    }

    fn start(&mut self, index: usize) {
        let mut config = QuorumConfig::new(self.voters[index], self.voters.clone());
        let election_ticks = ELECTION_TICKS_MIN + self.rng.usize(0..ELECTION_TICKS_SPREAD);
        config.election_ticks_min = election_ticks;
        config.election_ticks_max = election_ticks + 1;
        config.heartbeat_ticks = 2;
        // The state machine is volatile: a restarted node starts from its latest snapshot and
        // applies the committed entries after it again.
        config.applied_index = 0;
        let node = Quorum::new(&config, self.disks[index].clone()).expect("start");
        let snapshot = node.latest_snapshot();
        self.nodes[index] = Some(node);
        self.restart_at[index] = None;
        match snapshot {
            Some(snapshot) => self.install(index, snapshot),
            None => self.applied[index].clear(),
        }
    }

    /// Replaces node `index`'s state with a snapshot's, checking it against the common log.
    fn install(&mut self, index: usize, snapshot: InstalledSnapshot) {
        let seed = self.seed;
        let state = decode_state(&snapshot.data);
        assert_eq!(
            state.last().map(|e| (e.index, e.term)),
            Some((snapshot.index, snapshot.term)),
            "seed {seed}: node {} got a snapshot whose state does not end at its index",
            index + 1
        );
        for (position, entry) in state.iter().enumerate() {
            assert_eq!(entry.index, position as u64 + 1, "seed {seed}: a gap");
            self.check_common(index, entry);
        }
        self.applied[index] = state;
    }

    fn crash(&mut self, index: usize) {
        self.stats.crashes += 1;
        self.nodes[index] = None;
        self.restart_at[index] = Some(self.now + self.rng.u64(5..60));
    }

    fn connected(&self, from: u64, to: u64) -> bool {
        [self.isolated, self.cut_off]
            .into_iter()
            .flatten()
            .all(|alone| (from == alone) == (to == alone))
    }

    fn report_snapshot(&mut self, from: u64, to: u64, delivery: SnapshotDelivery) {
        if delivery == SnapshotDelivery::Failed {
            self.stats.snapshot_deliveries_failed += 1;
        }
        if let Some(node) = self.nodes[(from - 1) as usize].as_mut() {
            node.report_snapshot(to, delivery);
        }
    }

    fn leader(&self) -> Option<usize> {
        // Several nodes may believe they lead (in different terms); take the highest term.
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].as_ref().is_some_and(|n| n.is_leader()))
            .max_by_key(|&i| self.nodes[i].as_ref().map(|n| n.term()))
    }

    fn propose(&mut self, payload: Vec<u8>) {
        if let Some(index) = self.leader() {
            let node = self.nodes[index].as_mut().expect("leader is up");
            match node.propose(payload) {
                Ok(())
                | Err(Error::Raft {
                    source: raft::Error::ProposalDropped,
                    ..
                }) => {}
                Err(other) => panic!("seed {}: propose: {other}", self.seed),
            }
        }
    }

    /// One tick of virtual time: restarts, ticks, deliveries, then each node's ready rounds.
    fn step(&mut self, chaos: bool) {
        self.now += 1;
        for index in 0..self.nodes.len() {
            if self.restart_at[index].is_some_and(|at| at <= self.now) {
                self.start(index);
            }
        }
        for node in self.nodes.iter_mut().flatten() {
            node.tick();
        }
        let now = self.now;
        let mut due: Vec<InFlight> = Vec::new();
        let mut later = Vec::with_capacity(self.in_flight.len());
        for message in self.in_flight.drain(..) {
            if message.deliver_at <= now {
                due.push(message);
            } else {
                later.push(message);
            }
        }
        self.in_flight = later;
        due.sort_by_key(|m| (m.deliver_at, m.shuffle));
        for InFlight {
            from,
            message,
            snapshot,
            ..
        } in due
        {
            let to = message.to;
            let connected = self.connected(from, to);
            let node = match self.nodes[(to - 1) as usize].as_mut() {
                Some(node) if connected => node,
                _ => {
                    if snapshot {
                        self.report_snapshot(from, to, SnapshotDelivery::Failed);
                    }
                    continue;
                }
            };
            match node.step(message) {
                Ok(())
                | Err(Error::Raft {
                    source: raft::Error::ProposalDropped,
                    ..
                }) => {}
                Err(other) => panic!("seed {}: step: {other}", self.seed),
            }
            if snapshot {
                self.report_snapshot(from, to, SnapshotDelivery::Delivered);
            }
        }
        for index in 0..self.nodes.len() {
            self.drain_ready(index, chaos);
        }
        self.check_leaders();
    }

    fn drain_ready(&mut self, index: usize, chaos: bool) {
        for _ in 0..READY_ROUNDS_MAX {
            let Some(node) = self.nodes[index].as_mut() else {
                return;
            };
            let Some(pending) = node.ready() else { return };
            if chaos
                && self.rng.u32(0..1000)
                    < self.faults.crash_per_mille * self.faults.crash_before_persist_percent / 10
            {
                drop(pending);
                self.stats.crashes_before_persist += 1;
                self.crash(index);
                return;
            }
            let persisted = node.persist(pending).expect("memory store");
            let actions = node.advance(persisted).expect("advance");
            let from = self.voters[index];
            for outgoing in actions.messages {
                let snapshot = outgoing.is_snapshot();
                let Outgoing { to, message } = outgoing;
                assert_ne!(to, from, "seed {}: a node messaged itself", self.seed);
                if chaos && self.rng.u32(0..100) < self.faults.loss_percent {
                    self.stats.messages_lost += 1;
                    if snapshot {
                        self.report_snapshot(from, to, SnapshotDelivery::Failed);
                    }
                    continue;
                }
                let deliver_at = self.now + self.rng.u64(1..=self.faults.delay_ticks_max);
                let shuffle = self.rng.u64(..);
                self.in_flight.push(InFlight {
                    deliver_at,
                    shuffle,
                    from,
                    message,
                    snapshot,
                });
            }
            if let Some(snapshot) = actions.snapshot {
                self.stats.snapshots_installed += 1;
                self.install(index, snapshot);
            }
            for entry in actions.committed {
                self.apply(index, entry);
            }
            let node = self.nodes[index].as_mut().expect("up");
            if self.policy.is_due(node) {
                let applied = self.applied[index].last().expect("applied something").index;
                node.compact(applied, encode_state(&self.applied[index]))
                    .expect("memory store");
                self.stats.compactions += 1;
            }
        }
        panic!(
            "seed {}: node {} had more than {READY_ROUNDS_MAX} ready rounds in one tick",
            self.seed,
            index + 1
        );
    }

    fn apply(&mut self, index: usize, entry: Committed) {
        let seed = self.seed;
        let expected_index = self.applied[index].last().map_or(1, |last| last.index + 1);
        assert_eq!(
            entry.index,
            expected_index,
            "seed {seed}: node {} applied out of order",
            index + 1
        );
        self.check_common(index, &entry);
        self.applied[index].push(entry);
    }

    /// Checks `entry` against the common log, or adds it there as the first to apply it.
    fn check_common(&mut self, index: usize, entry: &Committed) {
        match self.log.get(&entry.index) {
            Some(known) => assert_eq!(
                known,
                entry,
                "seed {}: node {} applied a different entry at index {} than another node",
                self.seed,
                index + 1,
                entry.index
            ),
            None => {
                self.log.insert(entry.index, entry.clone());
            }
        }
    }

    fn check_leaders(&mut self) {
        for index in 0..self.nodes.len() {
            let Some(node) = self.nodes[index].as_ref() else {
                continue;
            };
            if node.is_leader() {
                let id = self.voters[index];
                let first = *self.leaders_by_term.entry(node.term()).or_insert(id);
                assert_eq!(
                    first,
                    id,
                    "seed {}: two leaders in term {}",
                    self.seed,
                    node.term()
                );
            }
        }
    }

    fn payload(&mut self) -> Vec<u8> {
        self.next_payload += 1;
        format!("seed {} record {}", self.seed, self.next_payload).into_bytes()
    }

    /// Whether every node applied `payload`, and all applied as far as each other.
    fn applied_everywhere(&self, payload: &[u8]) -> bool {
        self.applied
            .iter()
            .all(|applied| applied.iter().any(|e| e.data == payload))
            && self
                .applied
                .iter()
                .all(|applied| applied.len() == self.applied[0].len())
    }
}

/// An application state as snapshot data: per entry, index, term, data length, data.
fn encode_state(state: &[Committed]) -> Vec<u8> {
    let mut out = Vec::new();
    for entry in state {
        out.extend_from_slice(&entry.index.to_le_bytes());
        out.extend_from_slice(&entry.term.to_le_bytes());
        out.extend_from_slice(&(entry.data.len() as u32).to_le_bytes());
        out.extend_from_slice(&entry.data);
    }
    out
}

fn decode_state(mut bytes: &[u8]) -> Vec<Committed> {
    fn take<'a>(bytes: &mut &'a [u8], n: usize) -> &'a [u8] {
        let (head, rest) = bytes.split_at(n);
        *bytes = rest;
        head
    }
    let mut state = Vec::new();
    while !bytes.is_empty() {
        let index = u64::from_le_bytes(take(&mut bytes, 8).try_into().expect("8 bytes"));
        let term = u64::from_le_bytes(take(&mut bytes, 8).try_into().expect("8 bytes"));
        let len = u32::from_le_bytes(take(&mut bytes, 4).try_into().expect("4 bytes")) as usize;
        let data = take(&mut bytes, len).to_vec();
        state.push(Committed { index, term, data });
    }
    state
}

fn run_seed(seed: u64, size: u64) -> Stats {
    let mut sim = Sim::new(seed, size);
    let partition_at = sim.rng.u64(20..CHAOS_TICKS / 2);
    let partition_ticks = sim.rng.u64(20..120);
    let cut_off_at = sim.rng.u64(20..CHAOS_TICKS - CUT_OFF_TICKS_MIN);
    let cut_off_ticks = sim.rng.u64(CUT_OFF_TICKS_MIN..CUT_OFF_TICKS_MAX);
    for _ in 0..CHAOS_TICKS {
        if sim.now == partition_at {
            sim.isolated = sim.leader().map(|i| sim.voters[i]);
            sim.stats.leader_partitions += u64::from(sim.isolated.is_some());
        }
        if sim.now == partition_at + partition_ticks {
            sim.isolated = None;
        }
        if sim.now == cut_off_at {
            let leader = sim.leader().map(|i| sim.voters[i]);
            let followers: Vec<u64> = sim
                .voters
                .iter()
                .copied()
                .filter(|&id| Some(id) != leader)
                .collect();
            sim.cut_off = Some(followers[sim.rng.usize(0..followers.len())]);
        }
        if sim.now == cut_off_at + cut_off_ticks {
            sim.cut_off = None;
        }
        if sim.rng.u32(0..1000) < sim.faults.crash_per_mille {
            let index = sim.rng.usize(0..sim.nodes.len());
            if sim.nodes[index].is_some() {
                sim.crash(index);
            }
        }
        if sim.rng.u32(0..100) < 20 {
            let payload = sim.payload();
            sim.propose(payload);
        }
        sim.step(true);
    }

    sim.stats.entries_committed_under_faults =
        sim.log.values().filter(|e| !e.data.is_empty()).count() as u64;

    // Heal: no partition, every node up, no loss (delays and reordering stay).
    sim.isolated = None;
    sim.cut_off = None;
    for index in 0..sim.nodes.len() {
        if sim.nodes[index].is_none() {
            sim.start(index);
        }
    }
    let healed_at = sim.now;
    let payload = sim.payload();
    let mut proposed_at = None;
    while !sim.applied_everywhere(&payload) {
        assert!(
            sim.now - healed_at < HEAL_TICKS_MAX,
            "seed {seed}, {size} voters: a proposal was not applied everywhere within {HEAL_TICKS_MAX} ticks of healing"
        );
        if sim.leader().is_some()
            && proposed_at.is_none_or(|at| sim.now - at >= REPROPOSE_EVERY_TICKS)
        {
            sim.propose(payload.clone());
            proposed_at = Some(sim.now);
        }
        sim.step(false);
    }

    // Every node's state is the whole common sequence: nothing any node applied is missing.
    let common: Vec<&Committed> = sim.log.values().collect();
    for (index, applied) in sim.applied.iter().enumerate() {
        assert_eq!(
            applied.iter().collect::<Vec<_>>(),
            common,
            "seed {seed}: node {}'s state differs from the common log",
            index + 1
        );
    }
    sim.stats.seeds_with_snapshot_installed = u64::from(sim.stats.snapshots_installed > 0);
    sim.stats.terms_with_leader = sim.leaders_by_term.len() as u64;
    sim.stats.heal_ticks_max = sim.now - healed_at;
    sim.stats
}

/// Runs every seed (or only `STROM_SIM_SEED` to replay one) and checks the faults happened.
fn run_seeds(size: u64) {
    let only = std::env::var("STROM_SIM_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok());
    let seeds: Vec<u64> = match only {
        Some(seed) => vec![seed],
        None => (0..SEEDS_PER_SIZE).collect(),
    };
    let mut total = Stats::default();
    for &seed in &seeds {
        let stats = run_seed(seed, size);
        total.crashes += stats.crashes;
        total.crashes_before_persist += stats.crashes_before_persist;
        total.leader_partitions += stats.leader_partitions;
        total.messages_lost += stats.messages_lost;
        total.terms_with_leader += stats.terms_with_leader;
        total.entries_committed_under_faults += stats.entries_committed_under_faults;
        total.heal_ticks_max = total.heal_ticks_max.max(stats.heal_ticks_max);
        total.compactions += stats.compactions;
        total.snapshots_installed += stats.snapshots_installed;
        total.seeds_with_snapshot_installed += stats.seeds_with_snapshot_installed;
        total.snapshot_deliveries_failed += stats.snapshot_deliveries_failed;
    }
    eprintln!("{size} voters, {} seeds: {total:?}", seeds.len());
    if only.is_none() {
        assert!(
            total.crashes > 0 && total.crashes_before_persist > 0,
            "{total:?}"
        );
        assert!(
            total.leader_partitions > 0 && total.messages_lost > 0,
            "{total:?}"
        );
        assert!(total.terms_with_leader > seeds.len() as u64, "{total:?}");
        assert!(total.entries_committed_under_faults > 0, "{total:?}");
        assert!(
            total.compactions > 0 && total.snapshot_deliveries_failed > 0,
            "{total:?}"
        );
        assert!(
            total.seeds_with_snapshot_installed * 2 > seeds.len() as u64,
            "most seeds must install a snapshot somewhere: {total:?}"
        );
    }
}

#[test]
fn three_voters_stay_safe_and_live_under_seeded_faults() {
    run_seeds(3);
}

#[test]
fn five_voters_stay_safe_and_live_under_seeded_faults() {
    run_seeds(5);
}
