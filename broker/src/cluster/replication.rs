//! Replication on each core of a cluster member (the design's per-core
//! replication tasks):
//! - every [`TICK`], the leaders among the core's partitions tick (a
//!   follower that has not caught up for `replica.lag.time.max.ms` is
//!   proposed out of the ISR); every ISR change a partition proposes goes
//!   to the active controller (`Cluster::alter_partition`) as soon
//!   as it is proposed, not at the next tick;
//! - one fetcher per (leader broker, core) fetches, as a follower, every
//!   partition this core follows on that leader, with Kafka's Fetch
//!   carrying this broker's id, over one connection, and appends what it
//!   gets with the leader's offsets and epochs; it fetches again at once,
//!   while those appends sync, and reports each partition's durable log
//!   end (what `acks=all` counts) in every fetch and, when a sync ends
//!   while a fetch waits at the leader, in a position report;
//! - a follower's log start follows the leader's (each fetch answer
//!   carries it: DeleteRecords and retention remove records on every
//!   replica) and each fetch reports its own, which the leader's
//!   DeleteRecords waits for.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ReplicaState};
use kafka_protocol::messages::{BrokerId, FetchRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use protocol::client::Connection;

use super::transport::{self, Purpose};

use super::wire::AlterPartition;
use super::Cluster;
use crate::errors;
use crate::partition::Partition;
use crate::shard::Shard;
use crate::sync::Condition;

/// How often leaders tick and fetchers are started for new leaders.
const TICK: Duration = Duration::from_millis(100);
/// A follower's fetch waits this long at the leader for new records.
const FETCH_WAIT_MS: i32 = 500;
/// Bytes a follower asks for per fetch, and per partition.
const FETCH_BYTES_MAX: i32 = 16 << 20;
const FETCH_PARTITION_BYTES_MAX: i32 = 4 << 20;
/// After a failed fetch (leader unreachable, no leader), the next is tried
/// this much later.
const RETRY_AFTER: Duration = Duration::from_millis(100);
/// The highest Fetch version a follower uses: names topics (v13 on names
/// them by id) and carries the replica id in the request.
const FETCH_VERSION_MAX: i16 = 12;

/// Runs the core's replication until the broker stops.
pub async fn run(shard: Rc<Shard>, cluster: Arc<Cluster>) {
    // The leaders a fetcher of this core runs for; each leaves on exit.
    let fetchers: Rc<RefCell<BTreeSet<i32>>> = Rc::default();
    let proposals = crate::partition::ISR_PROPOSALS.with(Rc::clone);
    let mut next_tick = std::time::Instant::now() + TICK;
    // Proposals counted before the partitions were last looked at: one
    // proposed while they are looked at wakes the loop again.
    let mut seen = proposals.count();
    loop {
        let wait = next_tick.saturating_duration_since(std::time::Instant::now());
        let stop = futures_lite::future::or(
            async { shard.stopping.sleep_unless_raised(wait).await },
            async {
                proposals.proposed_after(seen).await;
                false
            },
        )
        .await;
        if stop {
            return;
        }
        let ticking = std::time::Instant::now() >= next_tick;
        if ticking {
            next_tick = std::time::Instant::now() + TICK;
        }
        seen = proposals.count();
        let partitions = shard.open_partitions();
        for partition in &partitions {
            if ticking && partition.is_leader() {
                partition.tick();
            }
            if let Some(proposal) = partition.take_isr_proposal() {
                let (shard, cluster, partition) =
                    (shard.clone(), cluster.clone(), partition.clone());
                glommio::spawn_local(async move {
                    send_isr_change(&shard, &cluster, &partition, proposal).await;
                })
                .detach();
            }
        }
        let leaders: BTreeSet<i32> = partitions
            .iter()
            .filter_map(|p| p.following().map(|(leader, _)| leader))
            .collect();
        for leader in leaders {
            if !fetchers.borrow_mut().insert(leader) {
                continue;
            }
            let (shard, fetchers) = (shard.clone(), fetchers.clone());
            glommio::spawn_local(async move {
                fetch_from(shard, leader).await;
                fetchers.borrow_mut().remove(&leader);
            })
            .detach();
        }
    }
}

/// Sends the ISR change `proposal` of `partition` (its leader here) to the
/// active controller until it is answered. A request left unanswered (no
/// controller reached, or no answer in time) may still have been taken, so
/// the change stays proposed, its members counted for the high watermark,
/// and is sent again every [`ISR_RESEND_AFTER`] until the controller
/// answers or an assignment settles it (Kafka's leaders retry
/// AlterPartition the same way); a refusal ends it as
/// `ReplicaState::isr_change_refused` says.
async fn send_isr_change(
    shard: &Shard,
    cluster: &Cluster,
    partition: &Partition,
    proposal: replication::replica::IsrProposal,
) {
    let alter = AlterPartition {
        topic: partition.topic().to_string(),
        partition: partition.index(),
        leader: shard.config.node_id,
        leader_epoch: proposal.leader_epoch,
        partition_epoch: proposal.partition_epoch,
        isr: proposal.isr.clone(),
    };
    let mut attempts = 0u32;
    while partition.isr_change_pending(&proposal) {
        attempts += 1;
        let code = cluster.alter_partition(alter.clone()).await;
        match code {
            errors::NONE => return,
            errors::NOT_CONTROLLER | errors::REQUEST_TIMED_OUT => {
                if attempts == 1 || attempts.is_multiple_of(50) {
                    tracing::info!(topic = %alter.topic, partition = alter.partition, isr = ?alter.isr, attempts, "ISR change not answered; it stays proposed and is sent again");
                }
                if shard.stopping.sleep_unless_raised(ISR_RESEND_AFTER).await {
                    return;
                }
            }
            _ => {
                let stale = matches!(
                    code,
                    errors::INVALID_UPDATE_VERSION | errors::FENCED_LEADER_EPOCH
                );
                let kept = partition.isr_change_refused(stale, attempts);
                tracing::info!(
                    topic = %alter.topic,
                    partition = alter.partition,
                    isr = ?alter.isr,
                    attempts,
                    error = %protocol::client::error_name(code),
                    kept_until_assignment = kept,
                    "ISR change not taken"
                );
                return;
            }
        }
    }
}

/// How long an unanswered ISR change waits before it is sent again.
const ISR_RESEND_AFTER: Duration = Duration::from_millis(200);

/// The partitions of this core that follow `leader`, with their leader epoch.
fn following(shard: &Shard, leader: i32) -> Vec<(Rc<Partition>, i32)> {
    shard
        .open_partitions()
        .into_iter()
        .filter_map(|p| match p.following() {
            Some((l, epoch)) if l == leader => Some((p, epoch)),
            _ => None,
        })
        .collect()
}

/// Fetches from `leader` for this core's partitions that follow it,
/// until none does (or the broker stops).
async fn fetch_from(shard: Rc<Shard>, leader: i32) {
    let mut connection: Option<Connection> = None;
    let syncs = Rc::new(Syncs::default());
    loop {
        if shard.stopping.is_raised() {
            return;
        }
        let wanted = following(&shard, leader);
        if wanted.is_empty() {
            return;
        }
        let address = shard
            .metadata
            .image()
            .brokers
            .get(&leader)
            .filter(|b| !b.fenced)
            .map(|b| format!("{}:{}", b.host, b.port));
        let Some(address) = address else {
            glommio::timer::sleep(RETRY_AFTER).await;
            continue;
        };
        if connection.as_ref().is_none_or(|c| c.address() != address) {
            let purpose = Purpose::Replica {
                wait: Duration::from_millis(FETCH_WAIT_MS as u64),
            };
            match transport::connect_address(&shard, &address, purpose).await {
                Ok(connected) => connection = Some(connected),
                Err(error) => {
                    tracing::debug!(leader, %address, %error, "leader unreachable");
                    glommio::timer::sleep(RETRY_AFTER).await;
                    continue;
                }
            }
        }
        let conn = connection.as_mut().expect("connected");
        // After a leader change a follower first cuts what its log holds
        // beyond the new leader's history, then fetches; the partitions
        // not reconciled yet are asked again next round.
        for (partition, epoch) in &wanted {
            if partition.reconciled_at(*epoch) {
                continue;
            }
            // Only an unclean election may cut below the high watermark.
            let unclean = shard
                .metadata
                .image()
                .topics
                .get(partition.topic())
                .is_some_and(|t| {
                    super::placement::unclean_allowed(
                        t,
                        crate::cluster::of(&shard).is_some_and(|c| c.unclean_default),
                    )
                });
            match reconcile(conn, partition, *epoch, unclean).await {
                Ok(true) => partition.set_reconciled(*epoch),
                Ok(false) => {}
                Err(error) => {
                    tracing::debug!(leader, %address, %error, "OffsetForLeaderEpoch failed");
                }
            }
        }
        let wanted: Vec<(Rc<Partition>, i32)> = wanted
            .into_iter()
            .filter(|(p, epoch)| p.reconciled_at(*epoch))
            .collect();
        if wanted.is_empty() {
            connection = None;
            glommio::timer::sleep(RETRY_AFTER).await;
            continue;
        }
        let conn = connection.as_mut().expect("connected");
        match fetch_once(&shard, conn, &wanted, &syncs).await {
            Ok(true) => {}
            // Every partition refused (the leader has not taken its
            // leadership yet, or lost it): ask again a little later.
            Ok(false) => glommio::timer::sleep(RETRY_AFTER).await,
            Err(error) => {
                tracing::debug!(leader, %address, %error, "follower fetch failed");
                connection = None;
                glommio::timer::sleep(RETRY_AFTER).await;
            }
        }
    }
}

/// Rounds of OffsetForLeaderEpoch a follower asks before it fetches
/// (KIP-279: each may cut to an earlier epoch and ask again).
const RECONCILE_ROUNDS_MAX: usize = 8;

/// Asks the leader where this follower's latest epoch ends in its log and
/// cuts the local log where it diverges (KIP-101, KIP-279); whether the
/// logs now agree.
///
/// A cut below the high watermark this replica knows would remove records
/// every ISR member held, some acknowledged: a leader whose history says
/// so lost them (an emptied disk, an unclean election). It is refused
/// unless the topic allows unclean elections; the replica then stays out
/// of sync, its copy intact, until the leader changes.
async fn reconcile(
    connection: &mut Connection,
    partition: &Partition,
    current_epoch: i32,
    unclean_allowed: bool,
) -> Result<bool, protocol::client::ClientError> {
    use crate::replica::{divergence, Divergence};
    use kafka_protocol::messages::offset_for_leader_epoch_request::{
        OffsetForLeaderPartition, OffsetForLeaderTopic,
    };
    use kafka_protocol::messages::OffsetForLeaderEpochRequest;

    for _ in 0..RECONCILE_ROUNDS_MAX {
        let asked = partition.latest_log_epoch();
        if asked < 0 {
            // An empty log (or one written before epochs): nothing to cut.
            return Ok(true);
        }
        let version = connection.version::<OffsetForLeaderEpochRequest>(2..=4)?;
        let request = OffsetForLeaderEpochRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![OffsetForLeaderTopic::default()
                .with_topic(TopicName(StrBytes::from_string(
                    partition.topic().to_string(),
                )))
                .with_partitions(vec![OffsetForLeaderPartition::default()
                    .with_partition(partition.index())
                    .with_current_leader_epoch(current_epoch)
                    .with_leader_epoch(asked)])]);
        let response = connection.call(&request, version).await?;
        let Some(answer) = response.topics.first().and_then(|t| t.partitions.first()) else {
            return Ok(false);
        };
        if answer.error_code != errors::NONE {
            tracing::debug!(
                topic = %partition.topic(),
                partition = partition.index(),
                error = %protocol::client::error_name(answer.error_code),
                "the leader did not say where the epoch ends"
            );
            return Ok(false);
        }
        let leader_answer = (answer.leader_epoch, answer.end_offset);
        let local = partition.end_offset_for_epoch(answer.leader_epoch);
        let decision = divergence(local, leader_answer, partition.follower_log());
        let cut = match decision {
            Divergence::Agree => return Ok(true),
            Divergence::TruncateTo(offset) | Divergence::TruncateAndAskAgain(offset) => offset,
        };
        let high_watermark = partition.follower_log().high_watermark;
        if cut < high_watermark && !unclean_allowed {
            if partition.note_truncation_refused(current_epoch) {
                tracing::error!(
                    topic = %partition.topic(),
                    partition = partition.index(),
                    leader_epoch = current_epoch,
                    cut,
                    high_watermark,
                    "the leader's history would cut this replica below its high watermark: \
                     refused, the copy is kept (the leader lost committed records; only an \
                     unclean election may cut them)"
                );
            }
            return Ok(false);
        }
        let before = partition.log_end_offset();
        match partition.truncate_to(cut).await {
            Ok(end) => tracing::info!(
                topic = %partition.topic(),
                partition = partition.index(),
                leader = partition.following().map_or(-1, |(leader, _)| leader),
                leader_epoch = current_epoch,
                log_end_before = before,
                log_end = end,
                "follower log cut where it diverges from the leader's"
            ),
            Err(error) => {
                tracing::warn!(topic = %partition.topic(), partition = partition.index(), %error, "follower log not cut");
                return Ok(false);
            }
        }
        if let Divergence::TruncateTo(_) = decision {
            return Ok(true);
        }
    }
    Ok(false)
}

/// A Strom follower's durable log end, in a tagged field of each
/// partition of its fetch (Fetch is flexible from v12), far above the tags
/// Kafka defines; a broker that does not know it ignores it. The fetch
/// offset is where the follower's log ends, synced or not, so it can fetch
/// again while its last records sync; the leader counts only the durable
/// end for the high watermark and `acks=all`.
const DURABLE_END_TAG: i32 = 0x5354_0001;

/// The durable log end a follower's fetch carries for `partition`, if any.
pub fn durable_end_of(partition: &FetchPartition) -> Option<i64> {
    let bytes = partition.unknown_tagged_fields.get(&DURABLE_END_TAG)?;
    Some(i64::from_be_bytes(bytes.as_ref().try_into().ok()?))
}

fn with_durable_end(mut partition: FetchPartition, end: i64) -> FetchPartition {
    partition.unknown_tagged_fields.insert(
        DURABLE_END_TAG,
        bytes::Bytes::copy_from_slice(&end.to_be_bytes()),
    );
    partition
}

/// Position reports a fetcher may have sent while its fetch waits at the
/// leader; more wait for that fetch's answer.
const REPORTS_IN_FLIGHT_MAX: usize = 8;
/// Appends whose sync a partition's timing keeps (the stage histogram's
/// start points); older ones are dropped.
const TIMED_APPENDS_MAX: usize = 64;

/// A partition's appends waiting for their sync: each one's last offset
/// and when it was appended.
type TimedAppends = VecDeque<(u64, Instant)>;

/// The syncs of one fetcher's appends, which run beside its fetches: a
/// follower asks for the next records as soon as the last are in its log,
/// and tells the leader its durable end in a position report (a fetch
/// that waits for nothing and asks for no bytes) the moment a sync
/// finishes, while its next fetch may still wait at the leader.
#[derive(Default)]
struct Syncs {
    /// Partitions with a sync task running (by address: the task holds
    /// the partition, so it stays put), and the appends it waits for.
    waiting: RefCell<HashMap<*const Partition, TimedAppends>>,
    /// Bumped whenever a copy becomes durable further.
    advanced: Cell<u64>,
    changed: Condition,
}

impl Syncs {
    /// Notes `partition`'s append up to `last_offset` and makes sure a
    /// task syncs it.
    fn appended(self: &Rc<Self>, partition: &Rc<Partition>, last_offset: u64, at: Instant) {
        let key = Rc::as_ptr(partition);
        let mut waiting = self.waiting.borrow_mut();
        if let Some(queue) = waiting.get_mut(&key) {
            if queue.len() >= TIMED_APPENDS_MAX {
                queue.pop_front();
            }
            queue.push_back((last_offset, at));
            return;
        }
        waiting.insert(key, VecDeque::from([(last_offset, at)]));
        drop(waiting);
        let (syncs, partition) = (self.clone(), partition.clone());
        glommio::spawn_local(async move {
            syncs.sync(&partition).await;
            syncs.waiting.borrow_mut().remove(&key);
        })
        .detach();
    }

    /// Syncs `partition`'s appends, oldest first, until none waits.
    async fn sync(&self, partition: &Partition) {
        let key: *const Partition = partition;
        loop {
            let next = self
                .waiting
                .borrow()
                .get(&key)
                .and_then(|queue| queue.front().copied());
            let Some((last_offset, at)) = next else {
                return;
            };
            // A cut (a new leader's history) may have removed what waited.
            let end = partition.log_end_offset().max(0) as u64;
            if end == 0 {
                return;
            }
            if let Err(code) = partition
                .replicated_durable(last_offset.min(end - 1), at)
                .await
            {
                tracing::warn!(
                    topic = %partition.topic(),
                    partition = partition.index(),
                    error = %protocol::client::error_name(code),
                    "replicated records not made durable"
                );
                return;
            }
            let durable = partition.durable_log_end().max(0) as u64;
            if let Some(queue) = self.waiting.borrow_mut().get_mut(&key) {
                while queue.front().is_some_and(|(last, _)| *last < durable) {
                    queue.pop_front();
                }
            }
            self.advanced.set(self.advanced.get() + 1);
            self.changed.notify_all();
        }
    }
}

/// A follower's fetch for `wanted`: from each log's end, carrying each
/// durable end; a position report waits for nothing and asks for no bytes.
fn follower_fetch(shard: &Shard, wanted: &[(Rc<Partition>, i32)], report: bool) -> FetchRequest {
    let partition_max_bytes = if report { 0 } else { FETCH_PARTITION_BYTES_MAX };
    let mut by_topic: BTreeMap<&str, Vec<FetchPartition>> = BTreeMap::new();
    for (partition, epoch) in wanted {
        let fetch = FetchPartition::default()
            .with_partition(partition.index())
            .with_current_leader_epoch(*epoch)
            .with_fetch_offset(partition.log_end_offset())
            .with_log_start_offset(partition.log_start_offset())
            .with_partition_max_bytes(partition_max_bytes);
        by_topic
            .entry(partition.topic())
            .or_default()
            .push(with_durable_end(fetch, partition.durable_log_end()));
    }
    let topics = by_topic
        .into_iter()
        .map(|(topic, partitions)| {
            FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
                .with_partitions(partitions)
        })
        .collect();
    let node = BrokerId(shard.config.node_id);
    FetchRequest::default()
        .with_replica_id(node)
        .with_replica_state(ReplicaState::default().with_replica_id(node))
        .with_max_wait_ms(if report { 0 } else { FETCH_WAIT_MS })
        .with_min_bytes(if report { 0 } else { 1 })
        .with_max_bytes(if report { 0 } else { FETCH_BYTES_MAX })
        .with_isolation_level(0)
        .with_session_id(0)
        .with_session_epoch(-1)
        .with_topics(topics)
}

/// One fetch for `wanted` and the appends of what it brought (their syncs
/// go on in `syncs`); whether any partition was served. While the fetch
/// waits at the leader, each sync that finishes is reported at once.
async fn fetch_once(
    shard: &Rc<Shard>,
    connection: &mut Connection,
    wanted: &[(Rc<Partition>, i32)],
    syncs: &Rc<Syncs>,
) -> Result<bool, protocol::client::ClientError> {
    let version = connection.version::<FetchRequest>(12..=FETCH_VERSION_MAX)?;
    let mut reported = syncs.advanced.get();
    let pending = connection
        .send(&follower_fetch(shard, wanted, false), version)
        .await?;
    let mut reports = Vec::new();
    loop {
        let answered = futures_lite::future::or(
            async {
                connection.readable().await;
                true
            },
            async {
                syncs
                    .changed
                    .wait_until(|| syncs.advanced.get() > reported)
                    .await;
                false
            },
        )
        .await;
        if answered {
            break;
        }
        reported = syncs.advanced.get();
        if reports.len() < REPORTS_IN_FLIGHT_MAX {
            let report = follower_fetch(shard, wanted, true);
            reports.push(connection.send(&report, version).await?);
        } else {
            // The fetch's answer carries the next position: wait for it.
            connection.readable().await;
            break;
        }
    }
    let response = connection.receive(pending).await?;
    for report in reports {
        // Answered right after the fetch: it carried no records.
        connection.receive(report).await?;
    }
    let mut served = false;
    for topic in response.responses {
        let name = topic.topic.0.to_string();
        for data in topic.partitions {
            let Some((partition, _)) = wanted
                .iter()
                .find(|(p, _)| p.topic() == name && p.index() == data.partition_index)
            else {
                continue;
            };
            match data.error_code {
                errors::NONE => {
                    let records = data.records.unwrap_or_default();
                    let at = Instant::now();
                    match partition
                        .append_replicated(records, data.high_watermark)
                        .await
                    {
                        Ok(Some(last_offset)) => {
                            served = true;
                            syncs.appended(partition, last_offset, at);
                        }
                        Ok(None) => served = true,
                        Err(code) => {
                            // A refused append (a full disk) does not count
                            // as served: with none served the fetcher waits a
                            // little before it asks again instead of spinning.
                            let Some(not_logged) =
                                crate::storage_health::log_now("replicated records not appended")
                            else {
                                continue;
                            };
                            tracing::warn!(
                                not_logged,
                                topic = %name,
                                partition = data.partition_index,
                                error = %protocol::client::error_name(code),
                                "replicated records not appended"
                            );
                            continue;
                        }
                    }
                    // Records the leader removed from its head (DeleteRecords,
                    // retention) go here too; this copy's log start is in its
                    // next fetch, which the leader's DeleteRecords waits for.
                    if data.log_start_offset > partition.log_start_offset() {
                        if let Err(code) = partition.follow_log_start(data.log_start_offset).await {
                            tracing::warn!(
                                topic = %name,
                                partition = data.partition_index,
                                error = %protocol::client::error_name(code),
                                "follower log start not moved to the leader's"
                            );
                        }
                    }
                }
                code => {
                    if code == errors::OFFSET_OUT_OF_RANGE
                        && data.log_start_offset > partition.log_end_offset()
                    {
                        // Everything this copy has lies below the leader's
                        // log start: start over, empty, from there.
                        let start = data.log_start_offset as u64;
                        if let Err(failure) =
                            crate::reconciler::restart_empty_at(shard, partition, start).await
                        {
                            tracing::warn!(%failure, "follower copy not restarted at the leader's log start");
                        }
                        continue;
                    }
                    if code == errors::OFFSET_OUT_OF_RANGE {
                        // The logs disagree: ask where they diverge again.
                        partition.clear_reconciled();
                    }
                    tracing::debug!(
                        topic = %name,
                        partition = data.partition_index,
                        error = %protocol::client::error_name(code),
                        "the leader refused a follower fetch"
                    );
                }
            }
        }
    }
    Ok(served)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::protocol::{Decodable, Encodable};

    #[test]
    fn a_durable_log_end_crosses_the_wire_in_its_tagged_field() {
        let partition = with_durable_end(
            FetchPartition::default()
                .with_partition(3)
                .with_fetch_offset(120),
            97,
        );
        let request = FetchRequest::default().with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_static_str("t")))
            .with_partitions(vec![partition])]);
        let mut bytes = bytes::BytesMut::new();
        request.encode(&mut bytes, FETCH_VERSION_MAX).unwrap();
        let decoded = FetchRequest::decode(&mut bytes.freeze(), FETCH_VERSION_MAX).unwrap();
        let partition = &decoded.topics[0].partitions[0];
        assert_eq!(partition.fetch_offset, 120);
        assert_eq!(durable_end_of(partition), Some(97));
        // A consumer's fetch (or a follower of another broker) has none.
        assert_eq!(durable_end_of(&FetchPartition::default()), None);
    }
}
