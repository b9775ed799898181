//! A 3-voter quorum on file stores: everything committed before all nodes stop is applied
//! again, identically, after they restart from their files, and the quorum keeps committing;
//! with compaction, a node cut off past the leader's snapshot catches up by installing it, and
//! every node restarts from its own snapshot.

use std::path::Path;

use replication::file_store::FileStore;
use replication::quorum::{
    Committed, InstalledSnapshot, Outgoing, Quorum, QuorumConfig, SnapshotDelivery, SnapshotPolicy,
};
use replication::Message;

const VOTERS: [u64; 3] = [1, 2, 3];
const TICKS_MAX: usize = 500;

struct Cluster {
    nodes: Vec<Quorum<FileStore>>,
    /// Each node's application state: the entries with data it applied, in log order.
    applied: Vec<Vec<Committed>>,
    /// Each node's applied index: the last committed entry, with data or not.
    applied_index: Vec<u64>,
    queue: Vec<(u64, Message)>,
    /// Compaction after each round, if set.
    policy: Option<SnapshotPolicy>,
    /// A node that neither ticks nor hears nor is heard.
    cut_off: Option<usize>,
    snapshots_installed: Vec<u64>,
}

impl Cluster {
    fn open(root: &Path, policy: Option<SnapshotPolicy>) -> Self {
        let nodes: Vec<Quorum<FileStore>> = VOTERS
            .iter()
            .map(|&id| {
                let mut config = QuorumConfig::new(id, VOTERS.to_vec());
                // Distinct fixed timeouts: node 1 campaigns first, deterministically.
                config.election_ticks_min = 10 + 5 * id as usize;
                config.election_ticks_max = config.election_ticks_min + 1;
                let (store, _) =
                    FileStore::open(&root.join(format!("node-{id}")), &VOTERS).unwrap();
                Quorum::new(&config, store).unwrap()
            })
            .collect();
        // The application starts from its latest snapshot, if any.
        let snapshots: Vec<Option<InstalledSnapshot>> =
            nodes.iter().map(|node| node.latest_snapshot()).collect();
        Cluster {
            nodes,
            applied: snapshots
                .iter()
                .map(|s| s.as_ref().map_or_else(Vec::new, |s| decode_state(&s.data)))
                .collect(),
            applied_index: snapshots
                .iter()
                .map(|s| s.as_ref().map_or(0, |s| s.index))
                .collect(),
            queue: Vec::new(),
            policy,
            cut_off: None,
            snapshots_installed: vec![0; VOTERS.len()],
        }
    }

    /// One tick: tick all, deliver everything queued, run every node's ready rounds.
    fn step(&mut self) {
        let up = |index: usize, cut_off: Option<usize>| cut_off != Some(index);
        for (index, node) in self.nodes.iter_mut().enumerate() {
            if up(index, self.cut_off) {
                node.tick();
            }
        }
        for (from, message) in std::mem::take(&mut self.queue) {
            let (from, to) = (from as usize - 1, message.to as usize - 1);
            let snapshot = Outgoing {
                to: message.to,
                message: message.clone(),
            }
            .is_snapshot();
            let delivered = up(from, self.cut_off) && up(to, self.cut_off);
            if delivered {
                self.nodes[to].step(message).unwrap();
            }
            if snapshot {
                let delivery = if delivered {
                    SnapshotDelivery::Delivered
                } else {
                    SnapshotDelivery::Failed
                };
                self.nodes[from].report_snapshot(to as u64 + 1, delivery);
            }
        }
        for (index, node) in self.nodes.iter_mut().enumerate() {
            if !up(index, self.cut_off) {
                continue;
            }
            while let Some(pending) = node.ready() {
                let persisted = node.persist(pending).unwrap();
                let actions = node.advance(persisted).unwrap();
                let from = VOTERS[index];
                self.queue.extend(
                    actions
                        .messages
                        .into_iter()
                        .map(|Outgoing { message, .. }| (from, message)),
                );
                if let Some(InstalledSnapshot {
                    index: at, data, ..
                }) = actions.snapshot
                {
                    self.snapshots_installed[index] += 1;
                    self.applied[index] = decode_state(&data);
                    self.applied_index[index] = at;
                }
                if let Some(last) = actions.committed.last() {
                    self.applied_index[index] = last.index;
                }
                self.applied[index]
                    .extend(actions.committed.into_iter().filter(|e| !e.data.is_empty()));
                if self.policy.is_some_and(|policy| policy.is_due(node)) {
                    node.compact(
                        self.applied_index[index],
                        encode_state(&self.applied[index]),
                    )
                    .unwrap();
                }
            }
        }
    }

    fn until(&mut self, what: &str, done: impl Fn(&Cluster) -> bool) {
        for _ in 0..TICKS_MAX {
            if done(self) {
                return;
            }
            self.step();
        }
        panic!("not within {TICKS_MAX} ticks: {what}");
    }

    fn leader(&mut self) -> &mut Quorum<FileStore> {
        self.until("a leader", |c| c.nodes.iter().any(|n| n.is_leader()));
        self.nodes.iter_mut().find(|n| n.is_leader()).unwrap()
    }

    fn leader_index(&mut self) -> usize {
        self.leader();
        self.nodes.iter().position(|n| n.is_leader()).unwrap()
    }

    fn data(&self, index: usize) -> Vec<Vec<u8>> {
        self.applied[index].iter().map(|e| e.data.clone()).collect()
    }
}

#[test]
fn committed_entries_survive_a_full_restart_from_files() {
    let root = tempfile::tempdir().unwrap();
    let records: Vec<Vec<u8>> = (0..10)
        .map(|i| format!("record {i}").into_bytes())
        .collect();

    let mut cluster = Cluster::open(root.path(), None);
    for record in &records {
        cluster.leader().propose(record.clone()).unwrap();
    }
    cluster.until("all applied", |c| (0..3).all(|i| c.data(i) == records));
    let before = cluster.applied.clone();
    drop(cluster);

    let mut cluster = Cluster::open(root.path(), None);
    cluster.until("all re-applied", |c| {
        (0..3).all(|i| c.data(i).len() >= records.len())
    });
    assert_eq!(
        cluster.applied, before,
        "the re-applied entries (index, term, data) differ"
    );
    cluster.leader().propose(b"after restart".to_vec()).unwrap();
    cluster.until("the new record applied", |c| {
        (0..3).all(|i| c.data(i).len() == records.len() + 1)
    });
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
        let index = u64::from_le_bytes(take(&mut bytes, 8).try_into().unwrap());
        let term = u64::from_le_bytes(take(&mut bytes, 8).try_into().unwrap());
        let len = u32::from_le_bytes(take(&mut bytes, 4).try_into().unwrap()) as usize;
        let data = take(&mut bytes, len).to_vec();
        state.push(Committed { index, term, data });
    }
    state
}

#[test]
fn a_node_cut_off_past_the_snapshot_catches_up_and_all_restart_from_snapshots() {
    let root = tempfile::tempdir().unwrap();
    let records: Vec<Vec<u8>> = (0..40)
        .map(|i| format!("record {i:02}").into_bytes())
        .collect();
    // About eight records between snapshots.
    let policy = SnapshotPolicy { log_bytes_max: 160 };

    let mut cluster = Cluster::open(root.path(), Some(policy));
    let leader = cluster.leader_index();
    let behind = (leader + 1) % VOTERS.len();
    for record in &records[..5] {
        cluster.leader().propose(record.clone()).unwrap();
    }
    cluster.until("the first records applied", |c| {
        (0..3).all(|i| c.data(i) == records[..5])
    });

    cluster.cut_off = Some(behind);
    for record in &records[5..] {
        cluster.leader().propose(record.clone()).unwrap();
    }
    cluster.until("the rest applied by the two", |c| {
        (0..3).all(|i| i == behind || c.data(i) == records)
    });
    let leader_first = raft::Storage::first_index(cluster.nodes[leader].store()).unwrap();
    let behind_last = raft::Storage::last_index(cluster.nodes[behind].store()).unwrap();
    assert!(
        leader_first > behind_last + 1,
        "the leader's log starts at {leader_first}: it still holds what the node behind \
         needs after {behind_last}"
    );

    cluster.cut_off = None;
    cluster.until("the node behind caught up", |c| c.data(behind) == records);
    assert!(
        cluster.snapshots_installed[behind] > 0,
        "the node behind caught up without a snapshot"
    );
    assert_eq!(cluster.applied[behind], cluster.applied[leader]);
    let before = cluster.applied.clone();
    drop(cluster);

    let mut cluster = Cluster::open(root.path(), Some(policy));
    for (index, node) in cluster.nodes.iter().enumerate() {
        assert!(
            node.latest_snapshot().is_some(),
            "node {} has no snapshot to start from",
            index + 1
        );
    }
    cluster.until("all re-applied", |c| {
        (0..3).all(|i| c.data(i).len() >= records.len())
    });
    assert_eq!(
        cluster.applied, before,
        "the states rebuilt from snapshot and log differ"
    );
    cluster.leader().propose(b"after restart".to_vec()).unwrap();
    cluster.until("the new record applied", |c| {
        (0..3).all(|i| c.data(i).len() == records.len() + 1)
    });
}
