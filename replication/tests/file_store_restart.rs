//! A 3-voter quorum on file stores: everything committed before all nodes stop is applied
//! again, identically, after they restart from their files, and the quorum keeps committing.

use std::path::Path;

use replication::file_store::FileStore;
use replication::quorum::{Committed, Outgoing, Quorum, QuorumConfig};
use replication::Message;

const VOTERS: [u64; 3] = [1, 2, 3];
const TICKS_MAX: usize = 500;

struct Cluster {
    nodes: Vec<Quorum<FileStore>>,
    applied: Vec<Vec<Committed>>,
    queue: Vec<Message>,
}

impl Cluster {
    fn open(root: &Path) -> Self {
        let nodes = VOTERS
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
        Cluster {
            nodes,
            applied: vec![Vec::new(); VOTERS.len()],
            queue: Vec::new(),
        }
    }

    /// One tick: tick all, deliver everything queued, run every node's ready rounds.
    fn step(&mut self) {
        for node in &mut self.nodes {
            node.tick();
        }
        for message in std::mem::take(&mut self.queue) {
            let to = message.to as usize - 1;
            self.nodes[to].step(message).unwrap();
        }
        for (index, node) in self.nodes.iter_mut().enumerate() {
            while let Some(pending) = node.ready() {
                let persisted = node.persist(pending).unwrap();
                let actions = node.advance(persisted).unwrap();
                self.queue.extend(
                    actions
                        .messages
                        .into_iter()
                        .map(|Outgoing { message, .. }| message),
                );
                self.applied[index]
                    .extend(actions.committed.into_iter().filter(|e| !e.data.is_empty()));
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

    let mut cluster = Cluster::open(root.path());
    for record in &records {
        cluster.leader().propose(record.clone()).unwrap();
    }
    cluster.until("all applied", |c| (0..3).all(|i| c.data(i) == records));
    let before = cluster.applied.clone();
    drop(cluster);

    let mut cluster = Cluster::open(root.path());
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
