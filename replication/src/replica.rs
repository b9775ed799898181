//! One partition's replication state as a plain, deterministic state
//! machine: log end offset, durable offset, high watermark, leader epoch,
//! the replica set and ISR, and on the leader each follower's log end
//! offset and last caught-up time. No I/O and no clock of its own: every
//! input that depends on time takes `now_ms`, the ISR lag is checked by
//! `tick`, and a produce with `acks=all` is parked under a [`WaiterId`] that
//! a later input completes through the returned [`Action`]s. The runtime
//! edge (`partition::Partition`) feeds the inputs from the log and turns
//! the actions into wake-ups; the broker's follower fetches, its fetchers
//! and the committed metadata feed the rest, and the simulator (`sim`)
//! drives the same code over a [`crate::transport::Transport`].
//!
//! # Rules
//!
//! - **High watermark (leader).** The least log end offset over the ISR.
//!   The leader's own copy counts with its log end offset: an appended
//!   record is visible to consumers before it is synced, as a single node
//!   has always done (its high watermark was the log end) and as Kafka does
//!   (page cache). A follower counts with the offset it last fetched from,
//!   which by the fetcher's contract is its log end once that append is
//!   durable under the follower's flush policy. While an ISR change is
//!   proposed the high watermark is taken over the larger of the two sets
//!   (Kafka's "maximal ISR"): a follower being removed still holds it back
//!   until the removal is committed, one being added counts at once.
//! - **High watermark (follower).** The leader's high watermark as the
//!   last fetch answer carried it, never past the local log end.
//! - The high watermark never moves back and never passes the local log
//!   end; both are asserted in release builds. The one exception is
//!   [`ReplicaState::truncated`]: a log cut below the high watermark takes
//!   it down to the new end (Kafka's `UnifiedLog.truncateTo` does the
//!   same). A follower of a cleanly elected leader never cuts below it
//!   (the new leader holds every committed record); only an unclean
//!   election does.
//! - **Truncation (follower).** After a leader change a follower asks the
//!   leader where its latest epoch ended (OffsetForLeaderEpoch) and cuts
//!   its log where the two diverge: [`divergence`] decides, KIP-101 and
//!   KIP-279's rules.
//! - **acks=all.** A waiter for `last_offset` completes once the high
//!   watermark and the local durable offset (durable under the leader's
//!   flush policy) are both past it: with `NONE` if the committed ISR then
//!   has at least `min.insync.replicas` members, else with
//!   `NOT_ENOUGH_REPLICAS_AFTER_APPEND`. With replicas = ISR = this node
//!   this is exactly the single-node rule: the answer comes when the batch
//!   is durable under the flush policy.
//! - A produce with `acks=all` is refused before the append with
//!   `NOT_ENOUGH_REPLICAS` when the committed ISR is smaller than
//!   `min.insync.replicas`; any produce to a non-leader with
//!   `NOT_LEADER_OR_FOLLOWER`.
//! - **ISR.** A follower is caught up at a fetch whose offset reaches the
//!   leader's log end, or the leader's log end at its previous fetch
//!   (Kafka's rule, so a steady stream of appends does not make a keeping-up
//!   follower look behind). `tick` proposes to remove the followers not
//!   caught up for `replica.lag.time.max.ms`; a fetch that reaches the high
//!   watermark proposes to add a follower outside the ISR. Proposals carry
//!   the leader and partition epochs (Kafka's AlterPartition); one is in
//!   flight at a time and the ISR changes only when one is committed.
//! - Epochs only grow: a leader or follower change with an older leader
//!   epoch, or a committed ISR with an older partition epoch, is refused.
//! - **Low watermark (leader).** The least log start offset over the
//!   committed ISR: the leader's own, and each follower's as its fetches
//!   report it (0 until one does, so a follower not heard from since this
//!   leadership began holds it down). DeleteRecords answers once it has
//!   reached the offset asked for (Kafka's `lowWatermarkIfLeader`).

use std::collections::{BTreeMap, BTreeSet};

/// A broker's node id (Kafka's `broker.id` / `node.id`).
pub type NodeId = i32;

/// Identifies a parked `acks=all` produce.
pub type WaiterId = u64;

/// `replica.lag.time.max.ms`' default.
pub const REPLICA_LAG_TIME_MAX_MS_DEFAULT: u64 = 30_000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaConfig {
    /// This broker.
    pub local_id: NodeId,
    /// `min.insync.replicas`.
    pub min_insync_replicas: usize,
    /// `replica.lag.time.max.ms`.
    pub lag_time_max_ms: u64,
}

/// A leadership or followership as the controller assigns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    pub leader_epoch: i32,
    /// Kafka's partition epoch: bumped by every change of the ISR or the
    /// replica set.
    pub partition_epoch: i32,
    pub replicas: Vec<NodeId>,
    pub isr: Vec<NodeId>,
}

/// An ISR change the leader asks the controller for (AlterPartition).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsrProposal {
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub isr: Vec<NodeId>,
}

/// What the edge must do after an input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Consumers may now read below `high_watermark`.
    HighWatermarkAdvanced { high_watermark: u64 },
    /// Answer a parked `acks=all` produce.
    CompleteAcks {
        waiter: WaiterId,
        result: Result<(), ReplicaError>,
    },
    /// Send this to the controller.
    ProposeIsr(IsrProposal),
}

/// Why the replica state refuses an input or fails a parked produce; the
/// broker answers each with the Kafka error of the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicaError {
    /// An input that contradicts itself or this replica (a leader told to
    /// follow itself, an assignment without this node).
    InvalidRequest,
    /// This replica does not lead (or no longer leads) the partition.
    NotLeaderOrFollower,
    /// The input names an older leader epoch than this replica's.
    FencedLeaderEpoch,
    /// The input names a newer leader epoch than this replica knows.
    UnknownLeaderEpoch,
    /// A follower fetched past the leader's log end.
    OffsetOutOfRange,
    /// `acks=all` with fewer ISR members than `min.insync.replicas`,
    /// refused before the append.
    NotEnoughReplicas,
    /// The ISR shrank below `min.insync.replicas` after the append.
    NotEnoughReplicasAfterAppend,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// No assignment yet.
    Offline,
    Leader,
    Follower {
        leader_id: NodeId,
    },
}

/// What the leader knows of one follower.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FollowerState {
    /// The offset of its last fetch; `None` until it fetches from this leader.
    log_end_offset: Option<u64>,
    last_caught_up_ms: u64,
    /// The leader's log end and the time at its previous fetch.
    last_fetch_leader_end: u64,
    last_fetch_ms: u64,
    /// Its log start offset as its last fetch reported it; `None` until
    /// one does.
    log_start_offset: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct ReplicaState {
    config: ReplicaConfig,
    role: Role,
    leader_epoch: i32,
    partition_epoch: i32,
    replicas: Vec<NodeId>,
    isr: BTreeSet<NodeId>,
    log_end_offset: u64,
    durable_offset: u64,
    high_watermark: u64,
    /// Leader only: the other replicas.
    followers: BTreeMap<NodeId, FollowerState>,
    /// Leader only: the log end when this leadership began. Everything
    /// below it may have been committed by an earlier leader, beyond the
    /// high watermark this leader knows (Kafka's leader epoch start
    /// offset): a follower joins the ISR only once it has all of it.
    leadership_start_offset: u64,
    pending_isr: Option<IsrProposal>,
    /// Parked `acks=all` produces by the last offset they wait for.
    waiters: BTreeMap<(u64, WaiterId), ()>,
}

impl ReplicaState {
    /// A replica of a log holding offsets below `log_end_offset`, durable
    /// below `durable_offset`, not yet leader or follower. The high
    /// watermark starts at `log_start_offset` (nothing is known committed
    /// until an assignment says who has what).
    pub fn new(
        config: ReplicaConfig,
        log_start_offset: u64,
        log_end_offset: u64,
        durable_offset: u64,
    ) -> Self {
        assert!(
            log_start_offset <= log_end_offset && durable_offset <= log_end_offset,
            "replica offsets out of order: start {log_start_offset}, durable {durable_offset}, end {log_end_offset}"
        );
        Self {
            config,
            role: Role::Offline,
            leader_epoch: -1,
            partition_epoch: -1,
            replicas: Vec::new(),
            isr: BTreeSet::new(),
            log_end_offset,
            durable_offset,
            high_watermark: log_start_offset,
            followers: BTreeMap::new(),
            leadership_start_offset: 0,
            pending_isr: None,
            waiters: BTreeMap::new(),
        }
    }

    pub fn role(&self) -> Role {
        self.role
    }

    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch
    }

    pub fn partition_epoch(&self) -> i32 {
        self.partition_epoch
    }

    pub fn high_watermark(&self) -> u64 {
        self.high_watermark
    }

    pub fn log_end_offset(&self) -> u64 {
        self.log_end_offset
    }

    pub fn durable_offset(&self) -> u64 {
        self.durable_offset
    }

    pub fn replicas(&self) -> &[NodeId] {
        &self.replicas
    }

    /// How many replicas the committed ISR holds (no allocation).
    pub fn isr_len(&self) -> usize {
        self.isr.len()
    }

    /// The committed ISR, in id order.
    pub fn isr(&self) -> Vec<NodeId> {
        self.isr.iter().copied().collect()
    }

    pub fn pending_isr(&self) -> Option<&IsrProposal> {
        self.pending_isr.as_ref()
    }

    /// Leader only: a follower's last fetch offset.
    pub fn follower_log_end_offset(&self, id: NodeId) -> Option<u64> {
        self.followers.get(&id).and_then(|f| f.log_end_offset)
    }

    /// A new `min.insync.replicas` (a topic config change).
    pub fn set_min_insync_replicas(&mut self, min_insync_replicas: usize) {
        self.config.min_insync_replicas = min_insync_replicas.max(1);
    }

    pub fn waiter_count(&self) -> usize {
        self.waiters.len()
    }

    /// Becomes leader for `assignment`; its ISR must hold this node.
    pub fn become_leader(
        &mut self,
        assignment: Assignment,
        now_ms: u64,
        actions: &mut Vec<Action>,
    ) -> Result<(), ReplicaError> {
        self.check_assignment(&assignment)?;
        if !assignment.isr.contains(&self.config.local_id) {
            return Err(ReplicaError::InvalidRequest);
        }
        if self.role != Role::Leader || assignment.leader_epoch != self.leader_epoch {
            self.leadership_start_offset = self.log_end_offset;
            // Every follower starts caught up now, its log end unknown
            // until it fetches (Kafka resets them on each new leadership).
            self.followers = assignment
                .replicas
                .iter()
                .filter(|&&id| id != self.config.local_id)
                .map(|&id| {
                    (
                        id,
                        FollowerState {
                            log_end_offset: None,
                            last_caught_up_ms: now_ms,
                            last_fetch_leader_end: 0,
                            last_fetch_ms: now_ms,
                            log_start_offset: None,
                        },
                    )
                })
                .collect();
        } else {
            // Same leadership, a new replica set: keep what is known.
            let mut kept = BTreeMap::new();
            for &id in &assignment.replicas {
                if id == self.config.local_id {
                    continue;
                }
                let state = self.followers.get(&id).copied().unwrap_or(FollowerState {
                    log_end_offset: None,
                    last_caught_up_ms: now_ms,
                    last_fetch_leader_end: 0,
                    last_fetch_ms: now_ms,
                    log_start_offset: None,
                });
                kept.insert(id, state);
            }
            self.followers = kept;
        }
        self.apply_assignment(assignment, Role::Leader);
        self.advance_high_watermark(actions);
        self.complete_waiters(actions);
        Ok(())
    }

    /// Becomes a follower of `leader_id`; parked produces fail with
    /// `NOT_LEADER_OR_FOLLOWER`.
    pub fn become_follower(
        &mut self,
        leader_id: NodeId,
        assignment: Assignment,
        actions: &mut Vec<Action>,
    ) -> Result<(), ReplicaError> {
        self.check_assignment(&assignment)?;
        if leader_id == self.config.local_id {
            return Err(ReplicaError::InvalidRequest);
        }
        self.followers.clear();
        self.apply_assignment(assignment, Role::Follower { leader_id });
        self.fail_parked(actions);
        Ok(())
    }

    /// This node no longer holds the partition (moved away, deleted, or
    /// the broker stops): it leads and follows nothing, and parked
    /// produces fail with `NOT_LEADER_OR_FOLLOWER`, as when leadership
    /// moves, instead of waiting for acknowledgements that will never
    /// come here.
    pub fn stop(&mut self, actions: &mut Vec<Action>) {
        self.role = Role::Offline;
        self.followers.clear();
        self.pending_isr = None;
        self.fail_parked(actions);
    }

    /// Fails every parked produce with `NOT_LEADER_OR_FOLLOWER`.
    fn fail_parked(&mut self, actions: &mut Vec<Action>) {
        for ((_, waiter), ()) in std::mem::take(&mut self.waiters) {
            actions.push(Action::CompleteAcks {
                waiter,
                result: Err(ReplicaError::NotLeaderOrFollower),
            });
        }
    }

    fn check_assignment(&self, assignment: &Assignment) -> Result<(), ReplicaError> {
        if assignment.leader_epoch < self.leader_epoch
            || assignment.partition_epoch < self.partition_epoch
        {
            return Err(ReplicaError::FencedLeaderEpoch);
        }
        let replicas: BTreeSet<_> = assignment.replicas.iter().collect();
        let valid = assignment.leader_epoch >= 0
            && replicas.len() == assignment.replicas.len()
            && replicas.contains(&self.config.local_id)
            && assignment.isr.iter().all(|id| replicas.contains(id));
        if !valid {
            return Err(ReplicaError::InvalidRequest);
        }
        Ok(())
    }

    fn apply_assignment(&mut self, assignment: Assignment, role: Role) {
        self.role = role;
        self.leader_epoch = assignment.leader_epoch;
        self.partition_epoch = assignment.partition_epoch;
        self.replicas = assignment.replicas;
        self.isr = assignment.isr.into_iter().collect();
        self.pending_isr = None;
    }

    /// Refuses a produce before its append: `NOT_LEADER_OR_FOLLOWER` when
    /// not the leader, `NOT_ENOUGH_REPLICAS` for `acks=all` while the ISR is
    /// below `min.insync.replicas`.
    pub fn admit_produce(&self, acks: i16) -> Result<(), ReplicaError> {
        if self.role != Role::Leader {
            return Err(ReplicaError::NotLeaderOrFollower);
        }
        if acks == -1 && self.isr.len() < self.config.min_insync_replicas {
            return Err(ReplicaError::NotEnoughReplicas);
        }
        Ok(())
    }

    /// The local log now ends at `log_end_offset`.
    pub fn local_append(&mut self, log_end_offset: u64, actions: &mut Vec<Action>) {
        assert!(
            log_end_offset >= self.log_end_offset,
            "log end offset moved back from {} to {log_end_offset}",
            self.log_end_offset
        );
        self.log_end_offset = log_end_offset;
        self.advance_high_watermark(actions);
    }

    /// The local log was cut back to end at `log_end_offset` (a follower
    /// diverged from its leader; the log is durable up to its new end).
    /// The log end and the durable offset go back to it and the high
    /// watermark is clamped to it (see the rules above). A leader does not
    /// truncate in Kafka's protocol; should one, its parked produces for
    /// offsets that are gone fail with `NOT_LEADER_OR_FOLLOWER` and what
    /// its followers have is counted up to the new end only. An end at or
    /// past the current one is an append.
    pub fn truncated(&mut self, log_end_offset: u64, actions: &mut Vec<Action>) {
        if log_end_offset >= self.log_end_offset {
            self.local_append(log_end_offset, actions);
            return;
        }
        self.log_end_offset = log_end_offset;
        self.durable_offset = self.durable_offset.min(log_end_offset);
        self.high_watermark = self.high_watermark.min(log_end_offset);
        for follower in self.followers.values_mut() {
            follower.log_end_offset = follower.log_end_offset.map(|end| end.min(log_end_offset));
            follower.last_fetch_leader_end = follower.last_fetch_leader_end.min(log_end_offset);
        }
        let gone: Vec<(u64, WaiterId)> = self
            .waiters
            .range((log_end_offset, 0)..)
            .map(|(&key, ())| key)
            .collect();
        for key in gone {
            self.waiters.remove(&key);
            actions.push(Action::CompleteAcks {
                waiter: key.1,
                result: Err(ReplicaError::NotLeaderOrFollower),
            });
        }
        assert!(
            self.durable_offset <= self.log_end_offset
                && self.high_watermark <= self.log_end_offset,
            "replica offsets past the log end after a truncation"
        );
    }

    /// Offsets below `durable_offset` are durable under the flush policy.
    pub fn local_durable(&mut self, durable_offset: u64, actions: &mut Vec<Action>) {
        assert!(
            durable_offset <= self.log_end_offset,
            "durable offset {durable_offset} past the log end {}",
            self.log_end_offset
        );
        self.durable_offset = self.durable_offset.max(durable_offset);
        self.complete_waiters(actions);
    }

    /// Parks a produce whose batch ends at `last_offset` until `acks=all`
    /// holds (it may complete at once).
    pub fn await_acks(&mut self, waiter: WaiterId, last_offset: u64, actions: &mut Vec<Action>) {
        if self.role != Role::Leader {
            actions.push(Action::CompleteAcks {
                waiter,
                result: Err(ReplicaError::NotLeaderOrFollower),
            });
            return;
        }
        assert!(
            last_offset < self.log_end_offset,
            "acks wait for offset {last_offset} not in the log (end {})",
            self.log_end_offset
        );
        let fresh = self.waiters.insert((last_offset, waiter), ()).is_none();
        assert!(fresh, "acks waiter {waiter} parked twice");
        self.complete_waiters(actions);
    }

    /// Forgets a parked produce whose caller went away.
    pub fn cancel_acks(&mut self, waiter: WaiterId) {
        self.waiters.retain(|&(_, id), _| id != waiter);
    }

    /// A follower fetched from `fetch_offset` (its log end). Refused with
    /// `NOT_LEADER_OR_FOLLOWER` when not the leader,
    /// `FENCED_LEADER_EPOCH`/`UNKNOWN_LEADER_EPOCH` for another epoch,
    /// `NOT_LEADER_OR_FOLLOWER` for a node outside the replica set and
    /// `OFFSET_OUT_OF_RANGE` past the log end.
    pub fn follower_fetch(
        &mut self,
        replica_id: NodeId,
        leader_epoch: i32,
        fetch_offset: u64,
        now_ms: u64,
        actions: &mut Vec<Action>,
    ) -> Result<(), ReplicaError> {
        if self.role != Role::Leader {
            return Err(ReplicaError::NotLeaderOrFollower);
        }
        if leader_epoch < self.leader_epoch {
            return Err(ReplicaError::FencedLeaderEpoch);
        }
        if leader_epoch > self.leader_epoch {
            return Err(ReplicaError::UnknownLeaderEpoch);
        }
        if fetch_offset > self.log_end_offset {
            return Err(ReplicaError::OffsetOutOfRange);
        }
        let leader_end = self.log_end_offset;
        let Some(follower) = self.followers.get_mut(&replica_id) else {
            return Err(ReplicaError::NotLeaderOrFollower);
        };
        if fetch_offset >= leader_end {
            follower.last_caught_up_ms = follower.last_caught_up_ms.max(now_ms);
        } else if fetch_offset >= follower.last_fetch_leader_end {
            follower.last_caught_up_ms = follower.last_caught_up_ms.max(follower.last_fetch_ms);
        }
        follower.last_fetch_leader_end = leader_end;
        follower.last_fetch_ms = now_ms;
        follower.log_end_offset = Some(fetch_offset);
        // In sync: at the high watermark, and holding all this leader had
        // when it took over (a new leader's high watermark may lag what
        // its predecessor committed).
        if !self.isr.contains(&replica_id)
            && self.pending_isr.is_none()
            && fetch_offset >= self.high_watermark
            && fetch_offset >= self.leadership_start_offset
        {
            let mut isr = self.isr.clone();
            isr.insert(replica_id);
            self.propose(isr, actions);
        }
        self.advance_high_watermark(actions);
        self.complete_waiters(actions);
        Ok(())
    }

    /// Leader only: follower `replica_id` reported its log start offset
    /// (in its fetch). The last report counts, lower or not: a follower
    /// whose copy started over holds the low watermark down again.
    pub fn follower_log_start(&mut self, replica_id: NodeId, log_start_offset: u64) {
        if self.role != Role::Leader {
            return;
        }
        if let Some(follower) = self.followers.get_mut(&replica_id) {
            follower.log_start_offset = Some(log_start_offset);
        }
    }

    /// Leader only: the least log start offset over the committed ISR,
    /// `local_log_start` being this leader's own (see the rules above);
    /// `None` when not the leader.
    pub fn low_watermark(&self, local_log_start: u64) -> Option<u64> {
        if self.role != Role::Leader {
            return None;
        }
        let followers = self
            .isr
            .iter()
            .filter(|&&id| id != self.config.local_id)
            .map(|id| {
                self.followers
                    .get(id)
                    .and_then(|f| f.log_start_offset)
                    .unwrap_or(0)
            });
        Some(followers.fold(local_log_start, u64::min))
    }

    /// Follower only: the leader's high watermark from a fetch answer.
    pub fn leader_high_watermark(&mut self, high_watermark: u64, actions: &mut Vec<Action>) {
        if !matches!(self.role, Role::Follower { .. }) {
            return;
        }
        self.raise_high_watermark(high_watermark.min(self.log_end_offset), actions);
    }

    /// Checks the followers' lag; proposes to shrink the ISR.
    pub fn tick(&mut self, now_ms: u64, actions: &mut Vec<Action>) {
        if self.role != Role::Leader || self.pending_isr.is_some() {
            return;
        }
        let lagging: Vec<NodeId> = self
            .isr
            .iter()
            .filter_map(|id| self.followers.get(id).map(|f| (*id, f)))
            .filter(|(_, f)| {
                now_ms.saturating_sub(f.last_caught_up_ms) > self.config.lag_time_max_ms
            })
            .map(|(id, _)| id)
            .collect();
        if lagging.is_empty() {
            return;
        }
        let isr = self
            .isr
            .iter()
            .copied()
            .filter(|id| !lagging.contains(id))
            .collect();
        self.propose(isr, actions);
    }

    /// The controller committed `isr` at `partition_epoch` (an answer to a
    /// proposal, or a change of its own). An older epoch is refused.
    pub fn isr_committed(
        &mut self,
        partition_epoch: i32,
        isr: Vec<NodeId>,
        actions: &mut Vec<Action>,
    ) -> Result<(), ReplicaError> {
        if partition_epoch <= self.partition_epoch {
            return Err(ReplicaError::FencedLeaderEpoch);
        }
        if !isr.iter().all(|id| self.replicas.contains(id))
            || (self.role == Role::Leader && !isr.contains(&self.config.local_id))
        {
            return Err(ReplicaError::InvalidRequest);
        }
        self.partition_epoch = partition_epoch;
        self.isr = isr.into_iter().collect();
        self.pending_isr = None;
        self.advance_high_watermark(actions);
        self.complete_waiters(actions);
        Ok(())
    }

    /// The controller refused or lost the proposal: another may be made.
    pub fn isr_proposal_failed(&mut self) {
        self.pending_isr = None;
    }

    /// The controller refused the ISR change this leader sent `attempts`
    /// times; `stale` when it refused it for an epoch that moved on
    /// (INVALID_UPDATE_VERSION, FENCED_LEADER_EPOCH). A change sent again
    /// may have been taken the first time (its answer lost), so a stale
    /// refusal of a resend keeps it proposed, its members counted for the
    /// high watermark, until an assignment settles it, as Kafka's leaders
    /// do. Any other refusal proves no attempt was taken: another change
    /// may be proposed. Whether the change is still proposed.
    pub fn isr_change_refused(&mut self, stale: bool, attempts: u32) -> bool {
        if stale && attempts > 1 {
            return self.pending_isr.is_some();
        }
        self.pending_isr = None;
        false
    }

    fn propose(&mut self, isr: BTreeSet<NodeId>, actions: &mut Vec<Action>) {
        let proposal = IsrProposal {
            leader_epoch: self.leader_epoch,
            partition_epoch: self.partition_epoch,
            isr: isr.into_iter().collect(),
        };
        self.pending_isr = Some(proposal.clone());
        actions.push(Action::ProposeIsr(proposal));
    }

    /// Leader only: the least log end over the committed ISR and any
    /// proposed one; `None` while a member's log end is unknown.
    fn isr_log_end(&self) -> Option<u64> {
        let proposed = self.pending_isr.iter().flat_map(|p| p.isr.iter());
        let mut least = self.log_end_offset;
        for id in self.isr.iter().chain(proposed) {
            if *id == self.config.local_id {
                continue;
            }
            least = least.min(self.followers.get(id)?.log_end_offset?);
        }
        Some(least)
    }

    fn advance_high_watermark(&mut self, actions: &mut Vec<Action>) {
        if self.role != Role::Leader {
            return;
        }
        if let Some(candidate) = self.isr_log_end() {
            self.raise_high_watermark(candidate, actions);
        }
    }

    fn raise_high_watermark(&mut self, candidate: u64, actions: &mut Vec<Action>) {
        if candidate > self.high_watermark {
            self.high_watermark = candidate;
            actions.push(Action::HighWatermarkAdvanced {
                high_watermark: candidate,
            });
        }
        assert!(
            self.high_watermark <= self.log_end_offset,
            "high watermark {} past the log end {}",
            self.high_watermark,
            self.log_end_offset
        );
    }

    fn complete_waiters(&mut self, actions: &mut Vec<Action>) {
        if self.role != Role::Leader {
            return;
        }
        let reached = self.high_watermark.min(self.durable_offset);
        let result = if self.isr.len() >= self.config.min_insync_replicas {
            Ok(())
        } else {
            Err(ReplicaError::NotEnoughReplicasAfterAppend)
        };
        while let Some(entry) = self.waiters.first_entry() {
            let (last_offset, waiter) = *entry.key();
            if last_offset >= reached {
                break;
            }
            entry.remove();
            actions.push(Action::CompleteAcks { waiter, result });
        }
    }
}

/// Kafka's "no epoch" and "no offset" in an OffsetForLeaderEpoch answer.
const UNDEFINED_EPOCH: i32 = -1;
const UNDEFINED_OFFSET: i64 = -1;

/// Where a follower's log stands, for [`divergence`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerLog {
    /// The local log end offset.
    pub log_end: u64,
    /// The follower's high watermark: Kafka's cut when the leader knows no
    /// end for the epoch asked.
    pub high_watermark: u64,
}

/// What a follower does with the leader's OffsetForLeaderEpoch answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Divergence {
    /// The logs agree up to the local log end: fetch from there.
    Agree,
    /// Cut the local log to this offset, then fetch from there.
    TruncateTo(u64),
    /// The leader answered an epoch this log does not have (KIP-279): cut
    /// to the end of the largest local epoch below it, then ask the leader
    /// again with the local log's latest epoch.
    TruncateAndAskAgain(u64),
}

impl Divergence {
    /// The offset to cut the log to, if any.
    pub fn truncation_offset(self) -> Option<u64> {
        match self {
            Divergence::Agree => None,
            Divergence::TruncateTo(offset) | Divergence::TruncateAndAskAgain(offset) => {
                Some(offset)
            }
        }
    }
}

/// The follower's decision after asking the leader where the follower's
/// latest epoch ended, as Kafka's fetcher makes it
/// (`AbstractFetcherThread.getOffsetTruncationState`):
///
/// - `leader_answer` is the leader's (epoch, end offset): the largest
///   epoch it has at or below the one asked, and where that epoch ends in
///   its log.
/// - `local_epoch_end` is this log's own answer for the leader's epoch
///   (`Partition::end_offset_for_epoch(leader_answer.0)`, the local epoch
///   cache only): the largest local epoch at or below it and its end here.
///
/// Rules: with no end offset from the leader (UNDEFINED), cut to the high
/// watermark; with an end but no epoch (a leader without epochs), or no
/// local epoch at or below the leader's, cut to the leader's end; when the
/// local floor epoch is the leader's, cut to the smaller of the two ends;
/// when it is an older one, cut to its local end and ask again. Never past
/// the local log end: a cut at or past it means the logs agree.
pub fn divergence(
    local_epoch_end: (i32, i64),
    leader_answer: (i32, i64),
    follower: FollowerLog,
) -> Divergence {
    let offset = |value: i64| u64::try_from(value).unwrap_or(0);
    let (leader_epoch, leader_end) = leader_answer;
    let (local_epoch, local_end) = local_epoch_end;
    let (cut, complete) = if leader_end == UNDEFINED_OFFSET {
        (follower.high_watermark, true)
    } else if leader_epoch == UNDEFINED_EPOCH || local_end == UNDEFINED_OFFSET {
        (offset(leader_end), true)
    } else if local_epoch != leader_epoch {
        (offset(local_end), false)
    } else {
        (offset(local_end).min(offset(leader_end)), true)
    };
    let cut = cut.min(follower.log_end);
    match (cut < follower.log_end, complete) {
        (false, true) => Divergence::Agree,
        (_, false) => Divergence::TruncateAndAskAgain(cut),
        (true, true) => Divergence::TruncateTo(cut),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAG_MS: u64 = 30_000;

    /// Drives one replica and remembers every action.
    struct Harness {
        replica: ReplicaState,
        now_ms: u64,
        next_waiter: WaiterId,
        acks: BTreeMap<WaiterId, Result<(), ReplicaError>>,
        proposals: Vec<IsrProposal>,
        high_watermarks: Vec<u64>,
    }

    impl Harness {
        fn new(local_id: NodeId, min_insync_replicas: usize) -> Self {
            let config = ReplicaConfig {
                local_id,
                min_insync_replicas,
                lag_time_max_ms: LAG_MS,
            };
            Self {
                replica: ReplicaState::new(config, 0, 0, 0),
                now_ms: 1_000_000,
                next_waiter: 0,
                acks: BTreeMap::new(),
                proposals: Vec::new(),
                high_watermarks: Vec::new(),
            }
        }

        /// A single node as the broker runs today.
        fn single_node() -> Self {
            let mut h = Self::new(1, 1);
            h.lead(0, &[1], &[1]);
            h
        }

        /// Node 1 leading replicas 1, 2, 3.
        fn three(min_insync_replicas: usize) -> Self {
            let mut h = Self::new(1, min_insync_replicas);
            h.lead(0, &[1, 2, 3], &[1, 2, 3]);
            h
        }

        fn absorb(&mut self, actions: Vec<Action>) {
            for action in actions {
                match action {
                    Action::HighWatermarkAdvanced { high_watermark } => {
                        assert_eq!(high_watermark, self.replica.high_watermark());
                        self.high_watermarks.push(high_watermark)
                    }
                    Action::CompleteAcks { waiter, result } => {
                        assert!(self.acks.insert(waiter, result).is_none(), "answered twice");
                    }
                    Action::ProposeIsr(proposal) => self.proposals.push(proposal),
                }
            }
        }

        fn lead(&mut self, epoch: i32, replicas: &[NodeId], isr: &[NodeId]) {
            let mut actions = Vec::new();
            let assignment = Assignment {
                leader_epoch: epoch,
                partition_epoch: epoch,
                replicas: replicas.to_vec(),
                isr: isr.to_vec(),
            };
            self.replica
                .become_leader(assignment, self.now_ms, &mut actions)
                .expect("leadership accepted");
            self.absorb(actions);
        }

        fn append(&mut self, records: u64) -> u64 {
            let mut actions = Vec::new();
            let end = self.replica.log_end_offset() + records;
            self.replica.local_append(end, &mut actions);
            self.absorb(actions);
            end - 1
        }

        fn durable(&mut self, offset: u64) {
            let mut actions = Vec::new();
            self.replica.local_durable(offset, &mut actions);
            self.absorb(actions);
        }

        /// An `acks=all` produce of `records`, durable or not yet.
        fn produce_all(&mut self, records: u64, durable: bool) -> WaiterId {
            self.replica.admit_produce(-1).expect("admitted");
            let last = self.append(records);
            if durable {
                self.durable(last + 1);
            }
            self.next_waiter += 1;
            let mut actions = Vec::new();
            self.replica
                .await_acks(self.next_waiter, last, &mut actions);
            self.absorb(actions);
            self.next_waiter
        }

        fn fetch(&mut self, id: NodeId, offset: u64) -> Result<(), ReplicaError> {
            let mut actions = Vec::new();
            let epoch = self.replica.leader_epoch();
            let result = self
                .replica
                .follower_fetch(id, epoch, offset, self.now_ms, &mut actions);
            self.absorb(actions);
            result
        }

        fn tick(&mut self, advance_ms: u64) {
            self.now_ms += advance_ms;
            let mut actions = Vec::new();
            self.replica.tick(self.now_ms, &mut actions);
            self.absorb(actions);
        }

        /// Commits the last proposal as the controller would.
        fn commit_proposal(&mut self) {
            let proposal = self.proposals.last().cloned().expect("a proposal");
            let mut actions = Vec::new();
            self.replica
                .isr_committed(proposal.partition_epoch + 1, proposal.isr, &mut actions)
                .expect("committed");
            self.absorb(actions);
        }

        fn hw(&self) -> u64 {
            self.replica.high_watermark()
        }
    }

    #[test]
    fn low_watermark_is_the_least_log_start_over_the_isr() {
        let single = Harness::single_node();
        assert_eq!(
            single.replica.low_watermark(7),
            Some(7),
            "led alone: its own"
        );
        let mut h = Harness::three(1);
        h.append(10);
        assert_eq!(
            h.replica.low_watermark(4),
            Some(0),
            "followers not heard from hold it at 0"
        );
        h.replica.follower_log_start(2, 4);
        assert_eq!(h.replica.low_watermark(4), Some(0), "node 3 not yet");
        h.replica.follower_log_start(3, 6);
        assert_eq!(
            h.replica.low_watermark(4),
            Some(4),
            "the leader's own is least"
        );
        assert_eq!(h.replica.low_watermark(9), Some(4), "node 2's is least");
        h.replica.follower_log_start(2, 2);
        assert_eq!(
            h.replica.low_watermark(9),
            Some(2),
            "the last report counts"
        );
        h.replica.follower_log_start(9, 0);
        assert_eq!(
            h.replica.low_watermark(9),
            Some(2),
            "not a replica: ignored"
        );
        // Out of the ISR, a follower no longer holds it down.
        h.replica.follower_log_start(2, 9);
        h.now_ms += LAG_MS;
        h.fetch(2, 10).expect("fetch");
        h.tick(2);
        h.commit_proposal();
        assert_eq!(h.replica.isr(), vec![1, 2], "node 3 lagged");
        assert_eq!(h.replica.low_watermark(9), Some(9));
        // A follower reports nothing to a replica that does not lead.
        let mut actions = Vec::new();
        h.replica
            .become_follower(
                2,
                Assignment {
                    leader_epoch: 1,
                    partition_epoch: 5,
                    replicas: vec![1, 2, 3],
                    isr: vec![1, 2],
                },
                &mut actions,
            )
            .expect("follows");
        h.replica.follower_log_start(3, 9);
        assert_eq!(h.replica.low_watermark(9), None);
    }

    #[test]
    fn single_node_high_watermark_is_the_log_end() {
        let mut h = Harness::single_node();
        assert_eq!(h.replica.leader_epoch(), 0);
        assert_eq!(h.replica.isr(), vec![1]);
        h.append(5);
        assert_eq!(h.hw(), 5, "visible once appended, synced or not");
        h.append(3);
        assert_eq!(h.hw(), 8);
        assert_eq!(h.high_watermarks, vec![5, 8]);
    }

    #[test]
    fn single_node_acks_all_answers_when_durable() {
        let mut h = Harness::single_node();
        let waiter = h.produce_all(4, false);
        assert_eq!(h.acks.get(&waiter), None, "not durable yet");
        assert_eq!(h.hw(), 4);
        h.durable(2);
        assert_eq!(h.acks.get(&waiter), None, "durable only in part");
        h.durable(4);
        assert_eq!(h.acks.get(&waiter), Some(&Ok(())));
        let at_once = h.produce_all(1, true);
        assert_eq!(h.acks.get(&at_once), Some(&Ok(())));
        assert_eq!(h.replica.waiter_count(), 0);
    }

    #[test]
    fn single_node_never_refuses_or_proposes() {
        let mut h = Harness::single_node();
        for _ in 0..10 {
            h.produce_all(1, true);
            h.tick(LAG_MS * 2);
        }
        assert!(h.proposals.is_empty());
        assert!(h.acks.values().all(|result| result.is_ok()));
    }

    #[test]
    fn three_replicas_high_watermark_is_the_least_isr_log_end() {
        let mut h = Harness::three(2);
        h.append(10);
        assert_eq!(h.hw(), 0, "followers' log ends unknown");
        h.fetch(2, 6).unwrap();
        assert_eq!(h.hw(), 0, "follower 3 still unknown");
        h.fetch(3, 4).unwrap();
        assert_eq!(h.hw(), 4);
        h.fetch(3, 10).unwrap();
        assert_eq!(h.hw(), 6);
        h.fetch(2, 10).unwrap();
        assert_eq!(h.hw(), 10);
        assert_eq!(h.high_watermarks, vec![4, 6, 10]);
    }

    #[test]
    fn acks_all_waits_for_every_isr_member() {
        let mut h = Harness::three(2);
        let waiter = h.produce_all(3, true);
        h.fetch(2, 3).unwrap();
        assert_eq!(h.acks.get(&waiter), None, "follower 3 has not fetched");
        h.fetch(3, 3).unwrap();
        assert_eq!(h.acks.get(&waiter), Some(&Ok(())));
    }

    #[test]
    fn acks_all_waits_for_the_leader_to_be_durable() {
        let mut h = Harness::three(2);
        let waiter = h.produce_all(3, false);
        h.fetch(2, 3).unwrap();
        h.fetch(3, 3).unwrap();
        assert_eq!(h.hw(), 3);
        assert_eq!(h.acks.get(&waiter), None);
        h.durable(3);
        assert_eq!(h.acks.get(&waiter), Some(&Ok(())));
    }

    #[test]
    fn lagging_follower_leaves_the_isr_after_the_lag_time() {
        let mut h = Harness::three(2);
        let waiter = h.produce_all(5, true);
        h.fetch(2, 5).unwrap();
        h.fetch(3, 0).unwrap();
        h.tick(LAG_MS);
        assert!(h.proposals.is_empty(), "not past the lag time yet");
        h.fetch(2, 5).unwrap();
        h.tick(1);
        assert_eq!(
            h.proposals,
            vec![IsrProposal {
                leader_epoch: 0,
                partition_epoch: 0,
                isr: vec![1, 2],
            }]
        );
        assert_eq!(h.acks.get(&waiter), None, "still held until committed");
        h.tick(LAG_MS);
        assert_eq!(h.proposals.len(), 1, "one proposal in flight");
        h.commit_proposal();
        assert_eq!(h.replica.isr(), vec![1, 2]);
        assert_eq!(h.replica.partition_epoch(), 1);
        assert_eq!(h.hw(), 5);
        assert_eq!(h.acks.get(&waiter), Some(&Ok(())));
    }

    #[test]
    fn follower_keeping_up_with_steady_appends_stays_in_the_isr() {
        let mut h = Harness::three(2);
        h.fetch(3, 0).unwrap();
        for _ in 0..100 {
            h.append(1);
            h.fetch(2, h.replica.log_end_offset()).unwrap();
            // Always one append behind, but at the previous fetch's end.
            h.fetch(3, h.replica.log_end_offset() - 1).unwrap();
            h.tick(LAG_MS / 10);
        }
        assert!(h.proposals.is_empty(), "{:?}", h.proposals);
    }

    #[test]
    fn follower_rejoins_the_isr_when_it_reaches_the_high_watermark() {
        let mut h = Harness::three(2);
        h.append(4);
        h.tick(LAG_MS);
        h.fetch(2, 4).unwrap();
        h.tick(1);
        h.commit_proposal();
        assert_eq!(h.replica.isr(), vec![1, 2]);
        assert_eq!(h.hw(), 4);
        h.fetch(3, 2).unwrap();
        assert_eq!(h.proposals.len(), 1, "below the high watermark");
        h.fetch(3, 4).unwrap();
        assert_eq!(h.proposals.len(), 2);
        assert_eq!(h.proposals[1].isr, vec![1, 2, 3]);
        assert_eq!(h.proposals[1].partition_epoch, 1);
        // Proposed members count for the high watermark at once.
        h.append(2);
        h.fetch(2, 6).unwrap();
        assert_eq!(h.hw(), 4, "follower 3 is at 4");
        h.commit_proposal();
        assert_eq!(h.replica.isr(), vec![1, 2, 3]);
    }

    /// A new leader's high watermark may lag what its predecessor
    /// committed: a follower at that high watermark but short of the log
    /// the new leader took over with may be missing acknowledged records,
    /// and joins the ISR only once it has them all (found by the cluster
    /// simulator: such a follower, elected next, lost them).
    #[test]
    fn a_follower_joins_a_new_leaders_isr_only_with_all_it_took_over() {
        let mut h = Harness::new(1, 2);
        // As a follower it has 10 records, told a high watermark of 6.
        let mut actions = Vec::new();
        h.replica.local_append(10, &mut actions);
        h.replica.local_durable(10, &mut actions);
        let follow = Assignment {
            leader_epoch: 1,
            partition_epoch: 1,
            replicas: vec![1, 2, 3],
            isr: vec![1, 2, 3],
        };
        h.replica.become_follower(3, follow, &mut actions).unwrap();
        h.replica.leader_high_watermark(6, &mut actions);
        h.absorb(actions);
        // It leads at epoch 2 with 3 in sync; 2 is out.
        h.lead(2, &[1, 2, 3], &[1, 3]);
        assert_eq!(h.hw(), 6);
        h.fetch(2, 7).unwrap();
        assert!(
            h.proposals.is_empty(),
            "at the high watermark but short of the takeover log end: {:?}",
            h.proposals
        );
        h.fetch(2, 10).unwrap();
        assert_eq!(h.proposals.len(), 1);
        assert_eq!(h.proposals[0].isr, vec![1, 2, 3]);
    }

    #[test]
    fn produce_is_refused_below_min_insync_replicas() {
        let mut h = Harness::new(1, 2);
        h.lead(0, &[1, 2], &[1]);
        assert_eq!(
            h.replica.admit_produce(-1),
            Err(ReplicaError::NotEnoughReplicas)
        );
        assert_eq!(h.replica.admit_produce(1), Ok(()));
        assert_eq!(h.replica.admit_produce(0), Ok(()));
    }

    #[test]
    fn isr_shrinking_under_a_waiter_answers_not_enough_replicas_after_append() {
        let mut h = Harness::new(1, 2);
        h.lead(0, &[1, 2], &[1, 2]);
        let waiter = h.produce_all(2, true);
        h.tick(LAG_MS + 1);
        h.commit_proposal();
        assert_eq!(h.replica.isr(), vec![1]);
        assert_eq!(
            h.acks.get(&waiter),
            Some(&Err(ReplicaError::NotEnoughReplicasAfterAppend))
        );
        assert_eq!(
            h.replica.admit_produce(-1),
            Err(ReplicaError::NotEnoughReplicas)
        );
    }

    #[test]
    fn losing_leadership_fails_parked_produces() {
        let mut h = Harness::three(2);
        let waiter = h.produce_all(2, true);
        let mut actions = Vec::new();
        let assignment = Assignment {
            leader_epoch: 1,
            partition_epoch: 1,
            replicas: vec![1, 2, 3],
            isr: vec![1, 2, 3],
        };
        h.replica
            .become_follower(2, assignment, &mut actions)
            .unwrap();
        h.absorb(actions);
        assert_eq!(
            h.acks.get(&waiter),
            Some(&Err(ReplicaError::NotLeaderOrFollower))
        );
        assert_eq!(h.replica.role(), Role::Follower { leader_id: 2 });
        assert_eq!(
            h.replica.admit_produce(1),
            Err(ReplicaError::NotLeaderOrFollower)
        );
        assert_eq!(h.fetch(3, 0), Err(ReplicaError::NotLeaderOrFollower));
    }

    #[test]
    fn a_stopped_replica_fails_parked_produces_and_serves_nothing() {
        let mut h = Harness::three(2);
        let waiter = h.produce_all(2, true);
        assert_eq!(h.acks.get(&waiter), None, "parked until the ISR has it");
        let mut actions = Vec::new();
        h.replica.stop(&mut actions);
        h.absorb(actions);
        assert_eq!(
            h.acks.get(&waiter),
            Some(&Err(ReplicaError::NotLeaderOrFollower))
        );
        assert_eq!(h.replica.waiter_count(), 0);
        assert_eq!(h.replica.role(), Role::Offline);
        assert_eq!(
            h.replica.admit_produce(-1),
            Err(ReplicaError::NotLeaderOrFollower)
        );
        assert_eq!(h.fetch(3, 0), Err(ReplicaError::NotLeaderOrFollower));
    }

    #[test]
    fn follower_high_watermark_follows_the_leader_within_its_log() {
        let mut h = Harness::new(2, 1);
        let mut actions = Vec::new();
        let assignment = Assignment {
            leader_epoch: 3,
            partition_epoch: 3,
            replicas: vec![1, 2],
            isr: vec![1, 2],
        };
        h.replica
            .become_follower(1, assignment, &mut actions)
            .unwrap();
        h.append(5);
        h.replica.leader_high_watermark(9, &mut actions);
        assert_eq!(h.hw(), 5, "not past the local log end");
        h.replica.leader_high_watermark(2, &mut actions);
        assert_eq!(h.hw(), 5, "never back");
    }

    #[test]
    fn stale_epochs_and_bad_fetches_are_refused() {
        let mut h = Harness::three(2);
        h.lead(2, &[1, 2, 3], &[1, 2, 3]);
        let mut actions = Vec::new();
        let old = Assignment {
            leader_epoch: 1,
            partition_epoch: 1,
            replicas: vec![1, 2, 3],
            isr: vec![1, 2, 3],
        };
        assert_eq!(
            h.replica.become_leader(old, h.now_ms, &mut actions),
            Err(ReplicaError::FencedLeaderEpoch)
        );
        h.append(2);
        let now = h.now_ms;
        assert_eq!(
            h.replica.follower_fetch(2, 1, 0, now, &mut actions),
            Err(ReplicaError::FencedLeaderEpoch)
        );
        assert_eq!(
            h.replica.follower_fetch(2, 3, 0, now, &mut actions),
            Err(ReplicaError::UnknownLeaderEpoch)
        );
        assert_eq!(h.fetch(2, 3), Err(ReplicaError::OffsetOutOfRange));
        assert_eq!(h.fetch(9, 0), Err(ReplicaError::NotLeaderOrFollower));
        assert_eq!(
            h.replica.isr_committed(1, vec![1], &mut actions),
            Err(ReplicaError::FencedLeaderEpoch)
        );
        assert_eq!(
            h.replica.isr_committed(5, vec![2, 3], &mut actions),
            Err(ReplicaError::InvalidRequest),
            "the leader stays in its ISR"
        );
    }

    #[test]
    fn truncation_takes_the_log_end_durable_offset_and_high_watermark_back() {
        let mut h = Harness::single_node();
        let kept = h.produce_all(4, true);
        let gone = h.produce_all(3, false);
        assert_eq!(h.acks.get(&kept), Some(&Ok(())));
        assert_eq!((h.hw(), h.replica.durable_offset()), (7, 4));
        let mut actions = Vec::new();
        h.replica.truncated(5, &mut actions);
        h.absorb(actions);
        assert_eq!(h.replica.log_end_offset(), 5);
        assert_eq!(h.replica.durable_offset(), 4, "not past what was durable");
        assert_eq!(h.hw(), 5, "clamped to the new log end");
        assert_eq!(
            h.acks.get(&gone),
            Some(&Err(ReplicaError::NotLeaderOrFollower))
        );
        assert_eq!(h.replica.waiter_count(), 0);
        let mut actions = Vec::new();
        h.replica.truncated(2, &mut actions);
        h.absorb(actions);
        assert_eq!(
            (
                h.replica.log_end_offset(),
                h.replica.durable_offset(),
                h.hw()
            ),
            (2, 2, 2)
        );
        h.append(3);
        assert_eq!(h.hw(), 5, "appends continue from the new end");
    }

    #[test]
    fn a_follower_truncated_at_its_end_changes_nothing() {
        let mut h = Harness::new(2, 1);
        let mut actions = Vec::new();
        let assignment = Assignment {
            leader_epoch: 1,
            partition_epoch: 1,
            replicas: vec![1, 2],
            isr: vec![1, 2],
        };
        h.replica
            .become_follower(1, assignment, &mut actions)
            .unwrap();
        h.append(6);
        h.replica.leader_high_watermark(4, &mut actions);
        h.replica.truncated(6, &mut actions);
        assert_eq!((h.replica.log_end_offset(), h.hw()), (6, 4));
        h.replica.truncated(5, &mut actions);
        assert_eq!((h.replica.log_end_offset(), h.hw()), (5, 4), "above the hw");
    }

    /// (local epoch end, leader's answer, log end, high watermark) and the
    /// decision.
    fn check_divergence(
        local: (i32, i64),
        leader: (i32, i64),
        log_end: u64,
        high_watermark: u64,
        expected: Divergence,
    ) {
        let follower = FollowerLog {
            log_end,
            high_watermark,
        };
        assert_eq!(
            divergence(local, leader, follower),
            expected,
            "local {local:?}, leader {leader:?}, log end {log_end}, hw {high_watermark}"
        );
    }

    #[test]
    fn divergence_follows_kip_101_and_kip_279() {
        use Divergence::*;
        // Same epoch, the leader's ends where ours does: the logs agree.
        check_divergence((3, 20), (3, 20), 20, 10, Agree);
        // Same epoch, the leader's ends later (it wrote more in it): agree.
        check_divergence((3, 20), (3, 25), 20, 10, Agree);
        // Same epoch, the leader's ends earlier: cut there (KIP-101).
        check_divergence((3, 20), (3, 15), 20, 10, TruncateTo(15));
        // Our epoch 3 ends at 18 with epoch 4 after it, which the leader
        // never had; the leader's 3 ends at 25: cut where ours ends.
        check_divergence((3, 18), (3, 25), 22, 10, TruncateTo(18));
        // The leader answers a smaller epoch (2) that we do not have; our
        // largest below it (1) ends at 12: cut there and ask again (KIP-279).
        check_divergence((1, 12), (2, 15), 20, 10, TruncateAndAskAgain(12));
        // ...even when that cut is our log end.
        check_divergence((1, 20), (2, 15), 20, 10, TruncateAndAskAgain(20));
        // The leader answers a smaller epoch we have, ending below ours.
        check_divergence((2, 17), (2, 15), 20, 10, TruncateTo(15));
        // No local epoch at or below the leader's: trust the leader's end.
        check_divergence((-1, -1), (2, 15), 20, 10, TruncateTo(15));
        check_divergence((-1, -1), (2, 25), 20, 10, Agree);
        // A leader without epochs (end, no epoch): its end.
        check_divergence((3, 20), (-1, 8), 20, 10, TruncateTo(8));
        // UNDEFINED (the leader knows no epoch as old as ours): the high
        // watermark, Kafka's fallback.
        check_divergence((3, 20), (-1, -1), 20, 10, TruncateTo(10));
        check_divergence((3, 20), (-1, -1), 20, 20, Agree);
        assert_eq!(TruncateTo(4).truncation_offset(), Some(4));
        assert_eq!(TruncateAndAskAgain(4).truncation_offset(), Some(4));
        assert_eq!(Agree.truncation_offset(), None);
    }

    #[test]
    #[should_panic(expected = "log end offset moved back")]
    fn log_end_moving_back_is_refused_loudly() {
        let mut h = Harness::single_node();
        h.append(3);
        let mut actions = Vec::new();
        h.replica.local_append(1, &mut actions);
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        #[derive(Debug, Clone)]
        enum Input {
            Append(u64),
            Durable,
            Fetch { id: NodeId, behind: u64 },
            Tick(u64),
            Produce { records: u64 },
            Commit,
            LeaderChange { followers_lead: bool },
        }

        fn input() -> impl Strategy<Value = Input> {
            prop_oneof![
                (1u64..5).prop_map(Input::Append),
                Just(Input::Durable),
                (2..4, 0u64..6).prop_map(|(id, behind)| Input::Fetch { id, behind }),
                (0u64..20_000).prop_map(Input::Tick),
                (1u64..4).prop_map(|records| Input::Produce { records }),
                Just(Input::Commit),
                any::<bool>().prop_map(|followers_lead| Input::LeaderChange { followers_lead }),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]
            #[test]
            fn invariants_hold_over_any_input_sequence(
                min_insync in 1usize..4,
                inputs in proptest::collection::vec(input(), 1..200),
            ) {
                let mut h = Harness::new(1, min_insync);
                h.lead(0, &[1, 2, 3], &[1, 2, 3]);
                let mut epoch = 0;
                let mut parked = BTreeMap::new();
                let mut last_hw = h.hw();
                for input in inputs {
                    match input {
                        Input::Append(records) => {
                            h.append(records);
                        }
                        Input::Durable => {
                            let end = h.replica.log_end_offset();
                            h.durable(end);
                        }
                        Input::Fetch { id, behind } => {
                            if h.replica.role() == Role::Leader {
                                let offset = h.replica.log_end_offset().saturating_sub(behind);
                                h.fetch(id, offset).unwrap();
                            }
                        }
                        Input::Tick(ms) => h.tick(ms),
                        Input::Produce { records } => {
                            if h.replica.admit_produce(-1).is_ok() {
                                let waiter = h.produce_all(records, false);
                                parked.insert(waiter, h.replica.log_end_offset() - 1);
                            }
                        }
                        Input::Commit => {
                            if let Some(proposal) = h.replica.pending_isr().cloned() {
                                let mut actions = Vec::new();
                                h.replica
                                    .isr_committed(proposal.partition_epoch + 1, proposal.isr, &mut actions)
                                    .unwrap();
                                h.absorb(actions);
                            }
                        }
                        Input::LeaderChange { followers_lead } => {
                            epoch = epoch.max(h.replica.partition_epoch()) + 1;
                            let assignment = Assignment {
                                leader_epoch: epoch,
                                partition_epoch: epoch,
                                replicas: vec![1, 2, 3],
                                isr: vec![1, 2, 3],
                            };
                            let mut actions = Vec::new();
                            if followers_lead {
                                h.replica.become_follower(2, assignment, &mut actions).unwrap();
                            } else {
                                h.replica.become_leader(assignment, h.now_ms, &mut actions).unwrap();
                            }
                            h.absorb(actions);
                        }
                    }
                    let hw = h.hw();
                    prop_assert!(hw >= last_hw, "high watermark moved back");
                    prop_assert!(hw <= h.replica.log_end_offset());
                    if hw > last_hw && h.replica.role() == Role::Leader {
                        // It only advances to what every ISR member has.
                        for id in h.replica.isr().into_iter().filter(|&id| id != 1) {
                            let end = h.replica.follower_log_end_offset(id);
                            prop_assert!(end.is_some_and(|end| hw <= end), "high watermark {hw} past member {id} at {end:?}");
                        }
                    }
                    // A waiter answered NONE had its batch below the high
                    // watermark and durable.
                    for (waiter, code) in &h.acks {
                        if let Some(last) = parked.remove(waiter) {
                            if code.is_ok() {
                                prop_assert!(last < hw && last < h.replica.durable_offset());
                            }
                        }
                    }
                    last_hw = hw;
                }
            }
        }
    }
}
