//! The runtime edge of the group coordinator on one core: routes a group's
//! requests to the core that owns its `__consumer_offsets` partition,
//! loads that partition's offsets and groups on first use, parks
//! JoinGroup and SyncGroup requests on local channels, runs the deadline
//! tick, and writes offset and membership records (durable before a
//! commit, a SyncGroup that completes a rebalance or a LeaveGroup that
//! empties a group is answered).

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use glommio::channels::local_channel;
use protocol::batch::build::{self, NewRecord};
use protocol::batch::{split_batches, RecordBatch};

use crate::errors;
use crate::group::coordinator::{
    Answer, Coordinator, DroppedOffset, JoinRequest, JoinResponse, Replies, Reply, SyncRequest,
    SyncResponse, WaiterId,
};
use crate::group::records;
use crate::group::{offsets_partition_for, OFFSETS_TOPIC};
use crate::internal_topic::{self, InternalTopic, Placement, Unplaced};
use crate::limits::{
    GROUP_TICK_MS, OFFSETS_BATCH_BYTES_MAX, OFFSETS_COMMIT_TIMEOUT_MS,
    OFFSETS_COMPACT_SLACK_RECORDS, OFFSETS_LOAD_READ_BYTES, OFFSETS_RETENTION_CHECK_MS,
};
use crate::partition::Partition;
use crate::shard::Shard;
use crate::sync::Notify;
use groups::error::GroupError;
use groups::load::Replayed;

pub use crate::group_state::GroupManager;

fn offsets_partition_count(shard: &Shard) -> i32 {
    internal_topic::partition_count(shard, OFFSETS_TOPIC)
}

/// `__consumer_offsets` as Kafka creates it: compacted, 100 MiB segments.
fn offsets_topic(shard: &Shard) -> InternalTopic {
    InternalTopic::compacted(
        OFFSETS_TOPIC,
        shard.config.groups.offsets_partitions,
        shard.config.offsets_replication_factor,
        None,
        &[("max.message.bytes", "1048588")],
    )
}

fn group_error(why: Unplaced) -> GroupError {
    match why {
        Unplaced::NotAvailable => GroupError::CoordinatorNotAvailable,
        Unplaced::NotHere => GroupError::NotCoordinator,
    }
}

/// How long a new coordinator waits for its offsets partition's high
/// watermark to cover the log it was given before answering
/// COORDINATOR_LOAD_IN_PROGRESS (clients retry).
const OFFSETS_LOAD_CATCH_UP_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The broker coordinating `group_id`: the leader of its offsets
/// partition (COORDINATOR_NOT_AVAILABLE while it has none). The first
/// call creates `__consumer_offsets`, as Kafka's first FindCoordinator.
pub async fn coordinator(shard: &Rc<Shard>, group_id: &str) -> Result<i32, GroupError> {
    internal_topic::coordinator(shard, &offsets_topic(shard), group_id)
        .await
        .map_err(group_error)
}

/// Returns the group's placement on this node: NOT_COORDINATOR when
/// another broker leads its offsets partition.
pub async fn place(shard: &Rc<Shard>, group_id: &str) -> Result<Placement, GroupError> {
    internal_topic::place(shard, &offsets_topic(shard), group_id)
        .await
        .map_err(group_error)
}

/// Runs `work` on the core that coordinates `group_id`, after that core
/// has loaded the group's offsets partition.
pub async fn on_coordinator<R, F, Fut>(
    shard: &Rc<Shard>,
    group_id: &str,
    work: F,
) -> Result<R, GroupError>
where
    R: Send + 'static,
    F: FnOnce(Rc<Shard>, i32) -> Fut + Send + 'static,
    Fut: Future<Output = R> + 'static,
{
    let placement = place(shard, group_id).await?;
    shard
        .run_on(placement.core, move |owner| async move {
            // The image may say this broker leads while its replica does
            // not (yet): a broker back from a crash replays a metadata log
            // that can be behind, and its leaderships are withheld until
            // the controller knows this process. Its log may then miss
            // commits made meanwhile elsewhere: it must not load them.
            offsets_partition(&owner, placement.partition)?;
            ensure_loaded(&owner, placement.partition).await?;
            Ok(work(owner.clone(), placement.partition).await)
        })
        .await
}

/// This broker no longer leads offsets partition `partition`: its groups
/// leave this core's coordinator (their members are told NOT_COORDINATOR
/// and find the new one), and it is loaded again from the log if it comes
/// back.
pub fn unload(shard: &Shard, partition: i32) {
    if !shard.groups.loaded.borrow_mut().remove(&partition) {
        return;
    }
    let forgotten = forget_partition(shard, partition);
    tracing::info!(
        partition,
        groups = forgotten,
        "offsets partition led elsewhere now: its groups unloaded"
    );
}

/// Drops the groups and staged offsets of offsets partition `partition`
/// from this core's coordinator; how many groups went.
fn forget_partition(shard: &Shard, partition: i32) -> usize {
    let count = offsets_partition_count(shard);
    let mut replies = Vec::new();
    let forgotten = with_coordinator(shard, |c| {
        let ours =
            |group_id: &str| crate::group::offsets_partition_for(group_id, count) == partition;
        c.forget_txn_offsets(ours);
        c.forget(ours, GroupError::NotCoordinator, &mut replies)
    });
    dispatch(shard, replies);
    forgotten
}

/// Loads one offsets partition into this core's coordinator, once.
pub async fn ensure_loaded(shard: &Rc<Shard>, partition: i32) -> Result<(), GroupError> {
    let manager = &shard.groups;
    start_ticking(shard);
    loop {
        if manager.loaded.borrow().contains(&partition) {
            return Ok(());
        }
        let in_progress = manager.loading.borrow().get(&partition).cloned();
        if let Some(notify) = in_progress {
            notify.wait().await;
            continue;
        }
        let notify = Rc::new(Notify::default());
        manager
            .loading
            .borrow_mut()
            .insert(partition, notify.clone());
        let epoch = offsets_partition(shard, partition).map(|p| p.leader_epoch());
        let mut result = match epoch {
            Ok(_) => load(shard, partition).await,
            Err(why) => Err(why),
        };
        manager.loading.borrow_mut().remove(&partition);
        // Leadership lost (or lost and regained) while loading: what was
        // read may be behind the log another leader extended.
        let still = offsets_partition(shard, partition).map(|p| p.leader_epoch());
        if result.is_ok() && still.is_ok() && still == epoch {
            manager.loaded.borrow_mut().insert(partition);
        } else {
            if result.is_ok() {
                tracing::info!(
                    partition,
                    "offsets partition led elsewhere before its load finished: not loaded"
                );
                result = Err(GroupError::NotCoordinator);
            }
            // Nothing half-read stays behind.
            forget_partition(shard, partition);
        }
        notify.raise();
        return result;
    }
}

/// This core's replica of offsets partition `partition`, while it leads
/// (NOT_COORDINATOR otherwise: a follower's log may miss commits).
fn offsets_partition(shard: &Shard, partition: i32) -> Result<Rc<Partition>, GroupError> {
    shard
        .partition(OFFSETS_TOPIC, partition)
        .filter(|p| p.is_leader())
        .ok_or(GroupError::NotCoordinator)
}

async fn load(shard: &Rc<Shard>, partition: i32) -> Result<(), GroupError> {
    let log = offsets_partition(shard, partition)?;
    // A new leader's log may hold commits its high watermark does not
    // cover yet: it waits (bounded) for the high watermark to reach its
    // log end, then loads up to it (`groups::load::load_end`).
    let log_end = log.log_end_offset();
    if groups::load::load_end(log_end, log.high_watermark()).is_none() {
        futures_lite::future::or(log.wait_for_append(log_end - 1), async {
            glommio::timer::sleep(OFFSETS_LOAD_CATCH_UP_WAIT).await;
        })
        .await;
    }
    let Some(end) = groups::load::load_end(log_end, log.high_watermark()) else {
        return Err(GroupError::CoordinatorLoadInProgress);
    };
    let mut from = log.log_start_offset();
    let mut records_loaded = 0u64;
    // Consumer-protocol groups' records name topics by id.
    let image = shard.metadata.image();
    let topic_names = |id: u128| {
        image
            .topics
            .values()
            .find(|t| t.topic_id == id)
            .map(|t| t.name.clone())
    };
    while from < end {
        let read = log.read(from, OFFSETS_LOAD_READ_BYTES, false).await;
        if read.error_code != errors::NONE {
            tracing::error!(
                partition,
                from,
                code = read.error_code,
                "cannot load offsets"
            );
            return Err(GroupError::CoordinatorLoadInProgress);
        }
        let mut next = from;
        let count = offsets_partition_count(shard);
        for batch in split_batches(read.records) {
            let Ok(batch) = batch else { break };
            let header = *batch.header();
            next = header.last_offset() + 1;
            if header.is_control() {
                // A transaction's end: its staged offsets apply or go.
                if let Some(marker) = protocol::control::marker_of(batch.bytes()) {
                    with_coordinator(shard, |c| {
                        c.complete_txn(
                            header.producer_id,
                            marker == protocol::control::Marker::Commit,
                            |group_id| offsets_partition_for(group_id, count) == partition,
                        )
                    });
                }
                continue;
            }
            let Ok(batch_records) = batch.records() else {
                continue;
            };
            for record in batch_records.flatten() {
                let Some(key) = record.key.as_deref() else {
                    continue;
                };
                if header.is_transactional() {
                    // Offsets committed inside a transaction wait for its marker.
                    if let Some(records::OffsetsKey::Offset {
                        group_id,
                        topic,
                        partition: index,
                    }) = records::parse_key(key)
                    {
                        if let Some(offset) = record.value.as_deref().and_then(records::parse_value)
                        {
                            with_coordinator(shard, |c| {
                                c.stage_txn_offset(
                                    header.producer_id,
                                    &group_id,
                                    &topic,
                                    index,
                                    offset,
                                )
                            });
                            records_loaded += 1;
                        }
                    }
                    continue;
                }
                let now = shard.now_ms() as u64;
                let replayed = with_coordinator(shard, |c| {
                    groups::load::replay_with_topics(
                        c,
                        key,
                        record.value.as_deref(),
                        now,
                        &topic_names,
                    )
                });
                match replayed {
                    Replayed::UnknownKey => continue,
                    Replayed::UndecodableGroupMetadata { group_id } => {
                        tracing::warn!(
                            partition,
                            group = %group_id,
                            "skipped a group metadata record that does not decode"
                        );
                        continue;
                    }
                    Replayed::Offset | Replayed::GroupMetadata => {}
                }
                records_loaded += 1;
            }
        }
        if next <= from {
            break;
        }
        from = next;
    }
    tracing::info!(
        partition,
        records = records_loaded,
        "loaded {OFFSETS_TOPIC} partition"
    );
    Ok(())
}

/// Runs `f` on this core's coordinator (created on first use).
pub fn with_coordinator<R>(shard: &Shard, f: impl FnOnce(&mut Coordinator) -> R) -> R {
    let mut slot = shard.groups.coordinator.borrow_mut();
    let coordinator = slot.get_or_insert_with(|| {
        let seed = shard.now_ms() as u64 ^ ((shard.id as u64) << 56);
        Coordinator::new(shard.config.groups.clone(), seed)
    });
    f(coordinator)
}

/// Runs `f` on this core's coordinator if it has one (for metrics: a
/// scrape never creates one).
pub fn with_loaded_coordinator<R>(shard: &Shard, f: impl FnOnce(&Coordinator) -> R) -> Option<R> {
    shard.groups.coordinator.borrow().as_ref().map(f)
}

fn dispatch(shard: &Shard, replies: Replies) {
    let mut waiters = shard.groups.waiters.borrow_mut();
    for (waiter, reply) in replies {
        if let Some(sender) = waiters.remove(&waiter) {
            // The request may have been dropped with its connection.
            let _ = sender.try_send(reply);
        }
    }
}

fn new_waiter(shard: &Shard) -> (WaiterId, local_channel::LocalReceiver<Reply>) {
    let id = shard.groups.next_waiter.get() + 1;
    shard.groups.next_waiter.set(id);
    let (sender, receiver) = local_channel::new_bounded(1);
    shard.groups.waiters.borrow_mut().insert(id, sender);
    (id, receiver)
}

/// Puts a JoinGroup or SyncGroup to the coordinator with a waiter ready.
/// An answer given now is returned at once; a parked call resolves when
/// `dispatch` hands the waiter its reply, which `from_reply` unpacks. None
/// when the waiter was dropped or got the other kind of reply. A
/// membership record the call took is durable in offsets partition
/// `partition` before anyone is answered (as Kafka answers SyncGroup only
/// once the group is stored); if it cannot be written, SyncGroup answers
/// carry the error instead.
async fn ask_or_park<T>(
    shard: &Rc<Shard>,
    partition: i32,
    ask: impl FnOnce(&mut Coordinator, WaiterId, &mut Replies) -> Answer<T>,
    from_reply: impl FnOnce(Reply) -> Option<T>,
) -> Option<T> {
    let (waiter, receiver) = new_waiter(shard);
    let mut replies = Vec::new();
    let (answer, took_metadata) = with_coordinator(shard, |c| {
        (ask(c, waiter, &mut replies), c.has_metadata_changes())
    });
    if took_metadata {
        if let Err(code) = write_group_metadata(shard, partition).await {
            for (_, reply) in &mut replies {
                if let Reply::Sync(response) = reply {
                    if response.error.is_none() {
                        *response = SyncResponse::error(code);
                    }
                }
            }
        }
    }
    dispatch(shard, replies);
    match answer {
        Answer::Now(response) => {
            // An answered call's waiter gets no reply; drop it so it does not linger.
            shard.groups.waiters.borrow_mut().remove(&waiter);
            Some(response)
        }
        Answer::Parked => receiver.recv().await.and_then(from_reply),
    }
}

/// JoinGroup on the coordinator core; resolves when the join phase ends.
pub async fn join(shard: &Rc<Shard>, request: JoinRequest) -> JoinResponse {
    let member_id = request.member_id.clone();
    if shard.stopping.is_raised() {
        return JoinResponse::error(GroupError::NotCoordinator, &member_id);
    }
    let now = shard.now_ms() as u64;
    let partition = offsets_partition_for(&request.group_id, offsets_partition_count(shard));
    let answer = ask_or_park(
        shard,
        partition,
        |c, waiter, replies| c.join(now, request, waiter, replies),
        |reply| match reply {
            Reply::Join(response) => Some(response),
            _ => None,
        },
    )
    .await;
    answer.unwrap_or_else(|| JoinResponse::error(GroupError::NotCoordinator, &member_id))
}

/// SyncGroup on the coordinator core; resolves when the leader assigned.
pub async fn sync(shard: &Rc<Shard>, request: SyncRequest) -> SyncResponse {
    if shard.stopping.is_raised() {
        return SyncResponse::error(GroupError::NotCoordinator);
    }
    let now = shard.now_ms() as u64;
    let partition = offsets_partition_for(&request.group_id, offsets_partition_count(shard));
    let answer = ask_or_park(
        shard,
        partition,
        |c, waiter, replies| c.sync(now, request, waiter, replies),
        |reply| match reply {
            Reply::Sync(response) => Some(response),
            _ => None,
        },
    )
    .await;
    answer.unwrap_or_else(|| SyncResponse::error(GroupError::NotCoordinator))
}

/// LeaveGroup on the coordinator core: answered once the record of a
/// group it emptied is durable (a restart right after a consumer closed
/// finds the group as the consumer left it).
pub async fn leave(
    shard: &Shard,
    group_id: &str,
    members: &[(String, Option<String>)],
) -> Result<Vec<Result<(), GroupError>>, GroupError> {
    let mut replies = Vec::new();
    let (result, took_metadata) = with_coordinator(shard, |c| {
        let result = c.leave(shard.now_ms() as u64, group_id, members, &mut replies);
        (result, c.has_metadata_changes())
    });
    let partition = offsets_partition_for(group_id, offsets_partition_count(shard));
    if took_metadata {
        if let Err(code) = write_group_metadata(shard, partition).await {
            tracing::warn!(
                partition,
                error = %code,
                "cannot write a group's record after LeaveGroup"
            );
        }
    }
    dispatch(shard, replies);
    result
}

/// A record for `__consumer_offsets`: key and value (None: tombstone).
pub type OffsetsRecord = (Vec<u8>, Option<Vec<u8>>);

pub fn tombstones(dropped: &[DroppedOffset]) -> Vec<OffsetsRecord> {
    dropped
        .iter()
        .map(|d| {
            (
                records::offset_key(&d.group_id, &d.topic, d.partition),
                None,
            )
        })
        .collect()
}

/// Takes the partition's write lock. Callers apply their change to the
/// coordinator while holding it, then `append` before releasing it.
pub async fn write_lock(shard: &Shard, partition: i32) -> glommio::sync::StaticPermit {
    shard.groups.write_locks.lock(partition).await
}

/// The membership records the coordinator queued for the groups of
/// offsets partition `partition`, each group's latest.
fn metadata_records(shard: &Shard, partition: i32) -> Vec<OffsetsRecord> {
    let count = offsets_partition_count(shard);
    let ours = |id: &str| offsets_partition_for(id, count) == partition;
    let (changes, consumer, share) = with_coordinator(shard, |c| {
        if !c.has_metadata_changes() {
            return (Vec::new(), Vec::new(), Vec::new());
        }
        (
            c.take_metadata_changes(ours),
            c.take_consumer_records(ours),
            c.take_share_records(ours),
        )
    });
    changes
        .into_iter()
        .map(|(group_id, metadata)| {
            (
                records::group_metadata_key(&group_id),
                metadata.map(|m| records::group_metadata_value(&m)),
            )
        })
        .chain(consumer)
        .chain(share)
        .collect()
}

/// Appends records to an offsets partition (in batches of at most
/// `OFFSETS_BATCH_BYTES_MAX`), followed by the membership records queued
/// for its groups, and returns the last offset written. Call with the
/// partition's write lock held: the queue is taken under it, so records
/// reach the log in the order the coordinator took them.
pub async fn append(
    shard: &Shard,
    partition: i32,
    mut entries: Vec<OffsetsRecord>,
) -> Result<Option<i64>, GroupError> {
    let log = offsets_partition(shard, partition)?;
    entries.extend(metadata_records(shard, partition));
    let mut last = None;
    let timestamp = shard.now_ms();
    let mut batch: Vec<NewRecord> = Vec::new();
    let mut batch_bytes = 0usize;
    let mut pending: Vec<Vec<NewRecord>> = Vec::new();
    for (key, value) in entries {
        let size = key.len() + value.as_ref().map_or(0, Vec::len) + 32;
        if !batch.is_empty() && batch_bytes + size > OFFSETS_BATCH_BYTES_MAX {
            pending.push(std::mem::take(&mut batch));
            batch_bytes = 0;
        }
        batch_bytes += size;
        batch.push(NewRecord {
            key: Some(key),
            value,
            headers: Vec::new(),
            timestamp_delta: 0,
        });
    }
    if !batch.is_empty() {
        pending.push(batch);
    }
    for records in pending {
        let bytes = Bytes::from(build::batch(timestamp, &records));
        let batch = RecordBatch::new(bytes).map_err(|error| {
            tracing::error!(partition, %error, "an offsets batch built here does not parse");
            GroupError::CoordinatorNotAvailable
        })?;
        // acks=all: a commit is answered once every in-sync replica has
        // it, so a new coordinator after a failover has it too.
        let outcome = log
            .produce(batch, -1, Duration::from_millis(OFFSETS_COMMIT_TIMEOUT_MS))
            .await;
        if outcome.error_code != errors::NONE {
            tracing::error!(
                partition,
                code = outcome.error_code,
                "offsets append failed"
            );
            return Err(GroupError::CoordinatorNotAvailable);
        }
        last = Some(outcome.base_offset + records.len() as i64 - 1);
    }
    Ok(last)
}

/// Waits until the partition holds `last_offset` durably.
pub async fn wait_durable(
    shard: &Shard,
    partition: i32,
    last_offset: i64,
) -> Result<(), GroupError> {
    let log = offsets_partition(shard, partition)?;
    log.wait_durable(last_offset).await.map_err(|code| {
        tracing::error!(partition, code, "offsets sync failed");
        GroupError::CoordinatorNotAvailable
    })
}

/// Writes the membership records queued for `partition` and waits until
/// the partition holds them durably, with whatever was appended before
/// (another task may have taken this caller's records with its own).
pub async fn write_group_metadata(shard: &Shard, partition: i32) -> Result<(), GroupError> {
    let last = {
        let _lock = write_lock(shard, partition).await;
        let log = match offsets_partition(shard, partition) {
            Ok(log) => log,
            Err(code) => {
                // Not this core's partition: its records are not ours to write.
                metadata_records(shard, partition);
                return Err(code);
            }
        };
        match append(shard, partition, Vec::new()).await? {
            Some(last) => last,
            None => log.log_end_offset() - 1,
        }
    };
    if last >= 0 {
        wait_durable(shard, partition, last).await?;
    }
    Ok(())
}

/// Appends `entries` under the write lock and waits until durable.
pub async fn write_durably(
    shard: &Rc<Shard>,
    partition: i32,
    entries: Vec<OffsetsRecord>,
) -> Result<(), GroupError> {
    if entries.is_empty() {
        return Ok(());
    }
    let last = {
        let _lock = write_lock(shard, partition).await;
        append(shard, partition, entries).await?
    };
    if let Some(last) = last {
        wait_durable(shard, partition, last).await?;
    }
    maybe_compact(shard, partition).await;
    Ok(())
}

/// Compaction by snapshot: once a partition holds far more records than
/// live offsets and group records, rewrite those of its groups at the end
/// (each group's offsets before its membership record, the order they
/// had) and move the log start past everything before them. A crash in
/// between replays old records and then the snapshot: the same state.
pub async fn maybe_compact(shard: &Rc<Shard>, partition: i32) {
    let Ok(log) = offsets_partition(shard, partition) else {
        return;
    };
    let held = (log.high_watermark() - log.log_start_offset()).max(0) as u64;
    // Counting live offsets walks the core's groups: only when the log
    // has grown past the bound the last count set.
    let check_at = shard
        .groups
        .compact_check_at
        .borrow()
        .get(&partition)
        .copied()
        .unwrap_or(OFFSETS_COMPACT_SLACK_RECORDS);
    if held <= check_at {
        return;
    }
    let partitions = offsets_partition_count(shard);
    let live_count = with_coordinator(shard, |c| {
        c.groups()
            .filter(|g| offsets_partition_for(g.id(), partitions) == partition)
            .map(|g| {
                g.offsets().len() as u64
                    + u64::from(g.metadata().is_some())
                    + g.consumer().map_or(0, |c| 3 * c.members.len() as u64 + 2)
            })
            .sum::<u64>()
            + c.share_groups()
                .filter(|(id, _)| offsets_partition_for(id, partitions) == partition)
                .map(|(_, g)| 1 + 2 * g.members.len() as u64)
                .sum::<u64>()
    });
    let bound = 2 * live_count + OFFSETS_COMPACT_SLACK_RECORDS;
    if held <= bound {
        shard
            .groups
            .compact_check_at
            .borrow_mut()
            .insert(partition, bound);
        return;
    }
    // Hold the write lock from snapshot to append, so no commit lands
    // between the state read and the records that carry it.
    let lock = write_lock(shard, partition).await;
    let live: Vec<OffsetsRecord> = with_coordinator(shard, |c| {
        c.groups()
            .filter(|g| offsets_partition_for(g.id(), partitions) == partition)
            .flat_map(|g| {
                let offsets = g.offsets().iter().map(|((topic, index), offset)| {
                    (
                        records::offset_key(g.id(), topic, *index),
                        Some(records::offset_value(offset)),
                    )
                });
                let metadata = g.metadata().map(|m| {
                    (
                        records::group_metadata_key(g.id()),
                        Some(records::group_metadata_value(m)),
                    )
                });
                let consumer = g.consumer().map(|c| c.records(g.id())).unwrap_or_default();
                offsets.chain(metadata).chain(consumer)
            })
            .chain(
                c.share_groups()
                    .filter(|(id, _)| offsets_partition_for(id, partitions) == partition)
                    .flat_map(|(id, g)| g.records(id)),
            )
            .collect()
    });
    shard.groups.compact_check_at.borrow_mut().insert(
        partition,
        2 * live.len() as u64 + OFFSETS_COMPACT_SLACK_RECORDS,
    );
    let snapshot_start = log.high_watermark();
    let result = append(shard, partition, live).await;
    drop(lock);
    let Ok(last) = result else { return };
    if let Some(last) = last {
        if wait_durable(shard, partition, last).await.is_err() {
            return;
        }
    }
    match log.advance_start_offset(snapshot_start).await {
        Ok(()) => tracing::info!(partition, start = snapshot_start, "compacted offsets"),
        Err(code) => tracing::warn!(partition, code, "offsets compaction failed"),
    }
}

/// Starts this core's deadline tick once.
fn start_ticking(shard: &Rc<Shard>) {
    if shard.groups.ticking.replace(true) {
        return;
    }
    let shard = shard.clone();
    glommio::spawn_local(async move {
        let mut next_expiry_ms = 0;
        loop {
            let tick = Duration::from_millis(GROUP_TICK_MS);
            if shard.stopping.sleep_unless_raised(tick).await {
                // Parked JoinGroup and SyncGroup requests answer
                // NOT_COORDINATOR now instead of holding up the drain.
                shard.groups.waiters.borrow_mut().clear();
                return;
            }
            let mut replies = Vec::new();
            let now = shard.now_ms() as u64;
            with_coordinator(&shard, |c| c.tick(now, &mut replies));
            dispatch(&shard, replies);
            start_metadata_writer(&shard);
            if now >= next_expiry_ms {
                next_expiry_ms = now + OFFSETS_RETENTION_CHECK_MS;
                let dropped = with_coordinator(&shard, |c| c.expire_offsets(now));
                if !dropped.is_empty() {
                    write_dropped(&shard, dropped).await;
                }
            }
        }
    })
    .detach();
}

/// Writes the membership records queued on this core (groups the tick
/// emptied or dropped) in the background, so a slow write does not hold
/// up the deadlines. One writer at a time; what is queued while it runs
/// waits for the next tick.
fn start_metadata_writer(shard: &Rc<Shard>) {
    if shard.groups.metadata_writer.get() {
        return;
    }
    let count = offsets_partition_count(shard);
    let partitions: BTreeSet<i32> = with_coordinator(shard, |c| {
        c.metadata_changes()
            .map(|id| offsets_partition_for(id, count))
            .collect()
    });
    if partitions.is_empty() || shard.groups.metadata_writer.replace(true) {
        return;
    }
    let shard = shard.clone();
    glommio::spawn_local(async move {
        for partition in partitions {
            if let Err(code) = write_group_metadata(&shard, partition).await {
                tracing::warn!(partition, error = %code, "cannot write group records");
            }
        }
        shard.groups.metadata_writer.set(false);
    })
    .detach();
}

/// Writes tombstones for dropped offsets, each to its group's partition.
pub async fn write_dropped(shard: &Rc<Shard>, dropped: Vec<DroppedOffset>) {
    let partitions = offsets_partition_count(shard);
    let mut by_partition: BTreeMap<i32, Vec<DroppedOffset>> = BTreeMap::new();
    for d in dropped {
        by_partition
            .entry(offsets_partition_for(&d.group_id, partitions))
            .or_default()
            .push(d);
    }
    for (partition, dropped) in by_partition {
        if let Err(code) = write_durably(shard, partition, tombstones(&dropped)).await {
            tracing::warn!(partition, error = %code, "cannot write offset tombstones");
        }
    }
}

/// Loads every offsets partition this core owns (ListGroups must see
/// groups whose partitions no request has touched since start).
pub async fn load_owned(shard: &Rc<Shard>) -> Result<(), GroupError> {
    let image = shard.metadata.image();
    let Some(topic) = image.topics.get(OFFSETS_TOPIC) else {
        return Ok(());
    };
    for partition in 0..topic.partition_cores.len() as i32 {
        if image.leader_core(topic, partition, shard.cores) == Ok(shard.id)
            && offsets_partition(shard, partition).is_ok()
        {
            ensure_loaded(shard, partition).await?;
        }
    }
    Ok(())
}

/// Runs `work` on every core after it loaded its offsets partitions;
/// results in core order.
pub async fn on_every_coordinator<R, F>(shard: &Rc<Shard>, work: F) -> Vec<Result<R, GroupError>>
where
    R: Send + 'static,
    F: Fn(&Coordinator) -> R + Send + Clone + 'static,
{
    let mut results = Vec::with_capacity(shard.cores);
    for core in 0..shard.cores {
        let work = work.clone();
        let result = shard
            .run_on(core, move |owner| async move {
                load_owned(&owner).await?;
                Ok(with_coordinator(&owner, |c| work(c)))
            })
            .await;
        results.push(result);
    }
    results
}

/// Appends offsets committed inside `producer_id`'s transaction (at
/// `epoch`) to an offsets partition as one transactional batch and waits
/// until every in-sync replica has it; the marker the transaction
/// coordinator has written later makes them visible or drops them. Call
/// with the partition's write lock held.
pub async fn append_transactional(
    shard: &Shard,
    partition: i32,
    producer_id: i64,
    epoch: i16,
    entries: Vec<OffsetsRecord>,
) -> Result<(), GroupError> {
    if entries.is_empty() {
        return Ok(());
    }
    let log = offsets_partition(shard, partition)?;
    let records: Vec<NewRecord> = entries
        .into_iter()
        .map(|(key, value)| NewRecord {
            key: Some(key),
            value,
            headers: Vec::new(),
            timestamp_delta: 0,
        })
        .collect();
    let mut bytes = build::batch(shard.now_ms(), &records);
    protocol::batch::set_producer(&mut bytes, producer_id, epoch, true);
    let batch = RecordBatch::new(Bytes::from(bytes)).map_err(|error| {
        tracing::error!(partition, %error, "a transactional offsets batch built here does not parse");
        GroupError::CoordinatorNotAvailable
    })?;
    let outcome = log
        .append_coordinator_transactional(batch, Duration::from_millis(OFFSETS_COMMIT_TIMEOUT_MS))
        .await;
    if outcome.error_code == errors::INVALID_PRODUCER_EPOCH {
        return Err(GroupError::ProducerFenced);
    }
    if outcome.error_code != errors::NONE {
        tracing::error!(
            partition,
            code = outcome.error_code,
            "transactional offsets append failed"
        );
        return Err(GroupError::CoordinatorNotAvailable);
    }
    Ok(())
}

/// The marker of `producer_id`'s transaction was written to offsets
/// partition `partition` on this core: the offsets it staged for that
/// partition's groups apply (commit) or go (abort).
pub fn complete_txn(shard: &Shard, partition: i32, producer_id: i64, commit: bool) {
    let count = offsets_partition_count(shard);
    let applied = with_coordinator(shard, |c| {
        c.complete_txn(producer_id, commit, |group_id| {
            offsets_partition_for(group_id, count) == partition
        })
    });
    tracing::debug!(
        partition,
        producer_id,
        commit,
        offsets = applied,
        "transactional offsets completed"
    );
}
