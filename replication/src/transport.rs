//! The seam for broker-to-broker messages in deterministic tests: deciding
//! code hands messages for a node id to a [`Transport`] and takes what
//! arrived from it, so it stays plain and testable. Two implementations:
//! [`Loopback`] (every message is for itself, in order) and
//! [`SimulatedNetwork`], which runs a whole cluster on one thread under a
//! seed, with the faults it documents; the simulator (`sim`) runs over it.
//! The running broker's traffic goes over its own sockets (`cluster/` in
//! the broker crate).
//!
//! Delivery is never promised: a sender that needs an answer retries on its
//! own timer, as it must over a real network.

use std::collections::{BTreeSet, VecDeque};

use crate::replica::NodeId;

/// Messages queued in a transport at most; past it a send is refused
/// (backpressure, instead of memory growing with a slow receiver).
pub const TRANSPORT_QUEUED_MAX: usize = 4_096;

/// A message with its route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope<M> {
    pub from: NodeId,
    pub to: NodeId,
    pub message: M,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    #[error("no route to node {to}")]
    UnknownNode { to: NodeId },
    #[error("{queued} messages queued for delivery already (at most {queued_max})")]
    Full { queued: usize, queued_max: usize },
}

pub trait Transport<M> {
    /// Queues `message` from `from` for `to`. `Ok` means accepted, not
    /// delivered.
    fn send(&mut self, from: NodeId, to: NodeId, message: M) -> Result<(), SendError>;

    /// The next message that has arrived by `now_ms`, if any.
    fn receive(&mut self, now_ms: u64) -> Option<Envelope<M>>;
}

/// A single node talking to itself: messages to its own id come back in
/// the order sent, at once; every other node is unknown.
#[derive(Debug)]
pub struct Loopback<M> {
    node_id: NodeId,
    queue: VecDeque<Envelope<M>>,
}

impl<M> Loopback<M> {
    pub fn new(node_id: NodeId) -> Self {
        Self {
            node_id,
            queue: VecDeque::new(),
        }
    }
}

impl<M> Transport<M> for Loopback<M> {
    fn send(&mut self, from: NodeId, to: NodeId, message: M) -> Result<(), SendError> {
        if to != self.node_id {
            return Err(SendError::UnknownNode { to });
        }
        if self.queue.len() >= TRANSPORT_QUEUED_MAX {
            return Err(SendError::Full {
                queued: self.queue.len(),
                queued_max: TRANSPORT_QUEUED_MAX,
            });
        }
        self.queue.push_back(Envelope { from, to, message });
        Ok(())
    }

    fn receive(&mut self, _now_ms: u64) -> Option<Envelope<M>> {
        self.queue.pop_front()
    }
}

/// The faults a [`SimulatedNetwork`] injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Faults {
    /// Each message is lost with this chance, in parts per million.
    pub drop_per_million: u32,
    /// Each message arrives after a delay drawn evenly from
    /// `0..=delay_ms_max`, so messages overtake one another.
    pub delay_ms_max: u64,
}

impl Faults {
    pub const NONE: Faults = Faults {
        drop_per_million: 0,
        delay_ms_max: 0,
    };
}

/// A cluster's network on one thread, driven by a seed and a manual clock.
/// Faults: loss and delay per [`Faults`]; among the messages that have
/// arrived, the one delivered next is drawn by the seed (any order, not
/// only the order sent); [`partition`](Self::partition) cuts two nodes
/// apart in both directions, losing what they send each other and what is
/// in flight between them until [`heal`](Self::heal). The same seed and
/// the same calls give the same run.
#[derive(Debug)]
pub struct SimulatedNetwork<M> {
    rng: fastrand::Rng,
    faults: Faults,
    nodes: BTreeSet<NodeId>,
    /// Node pairs cut apart, smaller id first.
    cut: BTreeSet<(NodeId, NodeId)>,
    in_flight: Vec<(u64, Envelope<M>)>,
    /// The latest time `receive` was given: sends leave at it.
    now_ms: u64,
    pub delivered: u64,
    pub lost: u64,
}

impl<M> SimulatedNetwork<M> {
    pub fn new(seed: u64, nodes: &[NodeId], faults: Faults) -> Self {
        Self {
            rng: fastrand::Rng::with_seed(seed),
            faults,
            nodes: nodes.iter().copied().collect(),
            cut: BTreeSet::new(),
            in_flight: Vec::new(),
            now_ms: 0,
            delivered: 0,
            lost: 0,
        }
    }

    fn pair(a: NodeId, b: NodeId) -> (NodeId, NodeId) {
        (a.min(b), a.max(b))
    }

    /// Cuts `a` and `b` apart (both directions).
    pub fn partition(&mut self, a: NodeId, b: NodeId) {
        self.cut.insert(Self::pair(a, b));
    }

    pub fn heal(&mut self, a: NodeId, b: NodeId) {
        self.cut.remove(&Self::pair(a, b));
    }

    /// Whether `a` and `b` are cut apart.
    pub fn is_cut(&self, a: NodeId, b: NodeId) -> bool {
        self.cut.contains(&Self::pair(a, b))
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }
}

impl<M> Transport<M> for SimulatedNetwork<M> {
    fn send(&mut self, from: NodeId, to: NodeId, message: M) -> Result<(), SendError> {
        if !self.nodes.contains(&to) {
            return Err(SendError::UnknownNode { to });
        }
        if self.in_flight.len() >= TRANSPORT_QUEUED_MAX {
            return Err(SendError::Full {
                queued: self.in_flight.len(),
                queued_max: TRANSPORT_QUEUED_MAX,
            });
        }
        if self.is_cut(from, to) || self.rng.u32(0..1_000_000) < self.faults.drop_per_million {
            self.lost += 1;
            return Ok(());
        }
        let arrive_ms = self.now_ms + self.rng.u64(0..=self.faults.delay_ms_max);
        self.in_flight
            .push((arrive_ms, Envelope { from, to, message }));
        Ok(())
    }

    fn receive(&mut self, now_ms: u64) -> Option<Envelope<M>> {
        self.now_ms = self.now_ms.max(now_ms);
        loop {
            let arrived: Vec<usize> = (0..self.in_flight.len())
                .filter(|&i| self.in_flight[i].0 <= self.now_ms)
                .collect();
            if arrived.is_empty() {
                return None;
            }
            let pick = arrived[self.rng.usize(0..arrived.len())];
            let (_, envelope) = self.in_flight.swap_remove(pick);
            if self.is_cut(envelope.from, envelope.to) {
                self.lost += 1;
                continue;
            }
            self.delivered += 1;
            return Some(envelope);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replica::{
        Action, Assignment, ReplicaConfig, ReplicaState, Role, REPLICA_LAG_TIME_MAX_MS_DEFAULT,
    };

    #[test]
    fn loopback_delivers_to_itself_in_order_and_knows_no_one_else() {
        let mut transport = Loopback::new(4);
        for n in 0..3 {
            transport.send(4, 4, n).unwrap();
        }
        assert_eq!(
            transport.send(4, 5, 9),
            Err(SendError::UnknownNode { to: 5 })
        );
        let received: Vec<i32> = std::iter::from_fn(|| transport.receive(0))
            .map(|e| e.message)
            .collect();
        assert_eq!(received, vec![0, 1, 2]);
    }

    #[test]
    fn loopback_refuses_past_its_queue_limit() {
        let mut transport = Loopback::new(1);
        for n in 0..TRANSPORT_QUEUED_MAX {
            transport.send(1, 1, n).unwrap();
        }
        assert!(matches!(
            transport.send(1, 1, 0),
            Err(SendError::Full { .. })
        ));
    }

    #[test]
    fn simulated_network_delays_reorders_and_cuts() {
        let faults = Faults {
            drop_per_million: 0,
            delay_ms_max: 100,
        };
        let mut network = SimulatedNetwork::new(7, &[1, 2, 3], faults);
        for n in 0..50 {
            network.send(1, 2, n).unwrap();
        }
        let mut received = Vec::new();
        for now_ms in 0..=100 {
            while let Some(envelope) = network.receive(now_ms) {
                received.push(envelope.message);
            }
        }
        assert_eq!(received.len(), 50, "all arrive by the largest delay");
        assert_ne!(received, (0..50).collect::<Vec<_>>(), "reordered");
        network.partition(2, 1);
        network.send(1, 2, 100).unwrap();
        network.send(3, 2, 101).unwrap();
        let mut after = Vec::new();
        for now_ms in 101..=201 {
            while let Some(envelope) = network.receive(now_ms) {
                after.push(envelope.message);
            }
        }
        assert_eq!(after, vec![101], "only the uncut route delivers");
        assert_eq!(network.send(1, 9, 0), Err(SendError::UnknownNode { to: 9 }));
    }

    /// Follower fetching over the network, as the Kafka protocol's Fetch
    /// will carry it: the follower's log end and the leader's answer.
    #[derive(Debug, Clone)]
    enum Message {
        Fetch {
            leader_epoch: i32,
            fetch_offset: u64,
        },
        FetchReply {
            fetch_offset: u64,
            /// The follower's log ends here once it appends the answer.
            records_end: u64,
            high_watermark: u64,
        },
    }

    const LEADER: NodeId = 1;
    const FETCH_RECORDS_MAX: u64 = 100;
    const FETCH_RETRY_MS: u64 = 500;
    const PARTITION_AT_MS: u64 = 20_000;
    const HEAL_AT_MS: u64 = 80_000;
    const RUN_MS: u64 = 150_000;
    const STEPS_MAX: usize = 100_000;
    /// How long before the cut a follower may have last been caught up: a few
    /// fetch rounds under the largest delay and retries.
    const CAUGHT_UP_SLACK_MS: u64 = 4 * FETCH_RETRY_MS;

    struct Node {
        id: NodeId,
        replica: ReplicaState,
        /// The follower's fetch in flight: when sent.
        fetch_sent_ms: Option<u64>,
        high_watermark_seen: u64,
    }

    fn config(id: NodeId) -> ReplicaConfig {
        ReplicaConfig {
            local_id: id,
            min_insync_replicas: 2,
            lag_time_max_ms: REPLICA_LAG_TIME_MAX_MS_DEFAULT,
        }
    }

    /// Acts on a leader's actions: ISR proposals are committed at once (a
    /// stand-in controller); high watermarks are checked by the caller.
    fn settle(replica: &mut ReplicaState, mut actions: Vec<Action>) {
        let mut rounds = 0;
        while !actions.is_empty() {
            rounds += 1;
            assert!(rounds < 10, "actions keep coming");
            let mut next = Vec::new();
            for action in actions {
                if let Action::ProposeIsr(proposal) = action {
                    replica
                        .isr_committed(proposal.partition_epoch + 1, proposal.isr, &mut next)
                        .expect("the stand-in controller commits");
                }
            }
            actions = next;
        }
    }

    /// One seeded run: a leader and two followers, appends on the leader,
    /// follower 3 cut off from the leader between `PARTITION_AT_MS` and
    /// `HEAL_AT_MS`.
    fn run(seed: u64) {
        let mut rng = fastrand::Rng::with_seed(seed ^ 0x5eed);
        let faults = Faults {
            drop_per_million: rng.u32(0..100_000),
            delay_ms_max: rng.u64(0..300),
        };
        let ids = [LEADER, 2, 3];
        let mut network = SimulatedNetwork::new(seed, &ids, faults);
        let assignment = Assignment {
            leader_epoch: 0,
            partition_epoch: 0,
            replicas: ids.to_vec(),
            isr: ids.to_vec(),
        };
        let mut now_ms = 0u64;
        let mut nodes: Vec<Node> = ids
            .iter()
            .map(|&id| {
                let mut replica = ReplicaState::new(config(id), 0, 0, 0);
                let mut actions = Vec::new();
                if id == LEADER {
                    replica
                        .become_leader(assignment.clone(), now_ms, &mut actions)
                        .unwrap();
                } else {
                    replica
                        .become_follower(LEADER, assignment.clone(), &mut actions)
                        .unwrap();
                }
                Node {
                    id,
                    replica,
                    fetch_sent_ms: None,
                    high_watermark_seen: 0,
                }
            })
            .collect();
        let mut cut = false;
        let mut left_isr_ms = None;
        let mut high_watermark_at_heal = 0;
        let mut steps = 0;
        while now_ms < RUN_MS {
            steps += 1;
            assert!(steps < STEPS_MAX, "seed {seed}: run did not end");
            now_ms += rng.u64(1..50);
            if !cut && (PARTITION_AT_MS..HEAL_AT_MS).contains(&now_ms) {
                network.partition(LEADER, 3);
                cut = true;
            }
            if cut && now_ms >= HEAL_AT_MS {
                network.heal(LEADER, 3);
                cut = false;
                high_watermark_at_heal = nodes[0].replica.high_watermark();
            }
            // The leader: appends, durability, lag checks.
            {
                let leader = &mut nodes[0].replica;
                let mut actions = Vec::new();
                if rng.bool() {
                    let end = leader.log_end_offset() + rng.u64(1..5);
                    leader.local_append(end, &mut actions);
                }
                if rng.u8(0..4) == 0 {
                    let end = leader.log_end_offset();
                    leader.local_durable(end, &mut actions);
                }
                leader.tick(now_ms, &mut actions);
                settle(leader, actions);
            }
            // Followers fetch when idle, or again when an answer is late.
            for node in nodes.iter_mut().skip(1) {
                let due = node
                    .fetch_sent_ms
                    .is_none_or(|sent| now_ms >= sent + FETCH_RETRY_MS);
                if due {
                    let fetch = Message::Fetch {
                        leader_epoch: node.replica.leader_epoch(),
                        fetch_offset: node.replica.log_end_offset(),
                    };
                    network.send(node.id, LEADER, fetch).unwrap();
                    node.fetch_sent_ms = Some(now_ms);
                }
            }
            let mut deliveries = 0;
            while let Some(envelope) = network.receive(now_ms) {
                deliveries += 1;
                assert!(deliveries <= TRANSPORT_QUEUED_MAX, "deliveries bounded");
                deliver(&mut nodes, &mut network, envelope, now_ms);
            }
            check(&nodes, seed);
            if left_isr_ms.is_none() && !nodes[0].replica.isr().contains(&3) {
                left_isr_ms = Some(now_ms);
            }
            for node in &mut nodes {
                node.high_watermark_seen = node.replica.high_watermark();
            }
        }
        let left_isr_ms = left_isr_ms
            .unwrap_or_else(|| panic!("seed {seed}: the cut-off follower never left the ISR"));
        let lag_ms = REPLICA_LAG_TIME_MAX_MS_DEFAULT;
        assert!(
            left_isr_ms >= PARTITION_AT_MS + lag_ms - CAUGHT_UP_SLACK_MS
                && left_isr_ms <= PARTITION_AT_MS + lag_ms + 2 * FETCH_RETRY_MS,
            "seed {seed}: follower 3 left the ISR at {left_isr_ms} ms, not about {lag_ms} ms after the cut at {PARTITION_AT_MS} ms"
        );
        let leader = &nodes[0].replica;
        assert_eq!(
            leader.isr(),
            vec![1, 2, 3],
            "seed {seed}: follower 3 caught up and rejoined after the heal"
        );
        assert!(
            leader.high_watermark() > high_watermark_at_heal,
            "seed {seed}: the high watermark kept advancing"
        );
    }

    fn deliver(
        nodes: &mut [Node],
        network: &mut SimulatedNetwork<Message>,
        envelope: Envelope<Message>,
        now_ms: u64,
    ) {
        let Envelope { from, to, message } = envelope;
        let node = nodes.iter_mut().find(|n| n.id == to).expect("a known node");
        match message {
            Message::Fetch {
                leader_epoch,
                fetch_offset,
            } => {
                let mut actions = Vec::new();
                let answer = node.replica.follower_fetch(
                    from,
                    leader_epoch,
                    fetch_offset,
                    now_ms,
                    &mut actions,
                );
                settle(&mut node.replica, actions);
                if answer.is_ok() {
                    let reply = Message::FetchReply {
                        fetch_offset,
                        records_end: (fetch_offset + FETCH_RECORDS_MAX)
                            .min(node.replica.log_end_offset()),
                        high_watermark: node.replica.high_watermark(),
                    };
                    network.send(to, from, reply).unwrap();
                }
            }
            Message::FetchReply {
                fetch_offset,
                records_end,
                high_watermark,
            } => {
                // A late answer to a fetch already retried is stale.
                if fetch_offset != node.replica.log_end_offset() {
                    return;
                }
                let mut actions = Vec::new();
                node.replica.local_append(records_end, &mut actions);
                // The fetcher's contract: durable before the next fetch.
                node.replica.local_durable(records_end, &mut actions);
                node.replica
                    .leader_high_watermark(high_watermark, &mut actions);
                assert!(actions
                    .iter()
                    .all(|a| matches!(a, Action::HighWatermarkAdvanced { .. })));
                node.fetch_sent_ms = None;
            }
        }
    }

    /// High watermarks only grow, never pass their own log end, and the
    /// leader's never passes an ISR member's actual log end.
    fn check(nodes: &[Node], seed: u64) {
        for node in nodes {
            let hw = node.replica.high_watermark();
            assert!(
                hw >= node.high_watermark_seen,
                "seed {seed}: node {} high watermark moved back",
                node.id
            );
            assert!(hw <= node.replica.log_end_offset(), "seed {seed}");
        }
        let leader = &nodes[0].replica;
        assert_eq!(leader.role(), Role::Leader);
        for id in leader.isr() {
            let member = nodes.iter().find(|n| n.id == id).unwrap();
            assert!(
                leader.high_watermark() <= member.replica.log_end_offset(),
                "seed {seed}: high watermark {} past ISR member {id} at {}",
                leader.high_watermark(),
                member.replica.log_end_offset()
            );
        }
    }

    #[test]
    fn replicas_over_a_faulty_network_keep_the_high_watermark_safe_and_shrink_the_isr() {
        for seed in 0..200 {
            run(seed);
        }
    }
}
