//! The share coordinator: share partitions' durable state (KIP-932) in
//! `__share_group_state`. A share partition's state (its start offset and
//! the in-flight records' delivery states and counts) is one record keyed
//! by group, topic id and partition (`groups::share_records`), in the
//! partition of that topic its coordinator key (`group:topicId:partition`)
//! hashes to, whose leader is the share partition's coordinator. The topic
//! is replicated and compacted.
//!
//! The leader of a data partition serving a share group (the share
//! partition's leader) reads the state when it starts serving it and
//! writes each change before it answers the request that made it
//! ([`read`], [`write`]): an acknowledgement is never answered before the
//! in-sync replicas of the state partition hold it durably, so a new
//! leader after a crash or a leader move neither delivers an accepted
//! record again nor forgets one handed out but not acknowledged. Writes
//! carry the data partition's leader epoch and the state epoch: one from
//! an older leader, or made before an operator reset the share partition
//! ([`initialize`]), is refused (FENCED_LEADER_EPOCH, FENCED_STATE_EPOCH)
//! and the writer reads the state again.
//!
//! The coordinator loads a state partition on first use after it took its
//! leadership, and again whenever its leader epoch changed. Requests for a
//! coordinator on another broker go there as ReadShareGroupState,
//! WriteShareGroupState and InitializeShareGroupState, Kafka's
//! inter-broker requests for it.

use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use groups::share_records::{self, SharePartitionKey, ShareState};
use protocol::batch::build::NewRecord;

use crate::errors;
use crate::internal_topic::{self, InternalTopic, Unplaced};
use crate::partition::Partition;
use crate::shard::Shard;

pub mod wire;

pub use crate::metadata::SHARE_STATE_TOPIC;
/// Kafka's `share.coordinator.state.topic.num.partitions` default.
const SHARE_STATE_PARTITIONS: i32 = 50;
/// Kafka's `share.coordinator.state.topic.min.isr` default.
const SHARE_STATE_MIN_ISR: i32 = 2;
/// How long a new coordinator waits for its state partition's high
/// watermark to cover its log before answering COORDINATOR_LOAD_IN_PROGRESS.
const LOAD_CATCH_UP_WAIT: Duration = Duration::from_secs(5);

/// `__share_group_state` as Kafka creates it: replicated like the offsets
/// topic, compacted (each record is a whole snapshot).
fn state_topic(shard: &Shard) -> InternalTopic {
    InternalTopic::compacted(
        SHARE_STATE_TOPIC,
        SHARE_STATE_PARTITIONS,
        shard.config.offsets_replication_factor,
        Some(SHARE_STATE_MIN_ISR),
        &[],
    )
}

fn unplaced(why: Unplaced) -> i16 {
    match why {
        Unplaced::NotAvailable => errors::COORDINATOR_NOT_AVAILABLE,
        Unplaced::NotHere => errors::NOT_COORDINATOR,
    }
}

/// The broker coordinating the share partition `key` (FindCoordinator key
/// type 2): the leader of its state partition.
pub async fn coordinator(shard: &Rc<Shard>, key: &str) -> Result<i32, i16> {
    internal_topic::coordinator(shard, &state_topic(shard), key)
        .await
        .map_err(unplaced)
}

/// What a write asks of the coordinator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WriteKind {
    /// A share partition's leader: fenced by an older leader or state epoch.
    Leader,
    /// An operator's reset: a new state epoch, the leader epoch kept.
    Initialize,
    /// The state removed (a tombstone).
    Delete,
}

/// Runs `op` on the core leading `key`'s state partition on this broker,
/// with that partition loaded and locked: `op` gets the core, the
/// partition's index and its log.
async fn on_coordinator<R, F, Fut>(
    shard: &Rc<Shard>,
    key: &SharePartitionKey,
    op: F,
) -> Result<R, i16>
where
    R: Send + 'static,
    F: FnOnce(Rc<Shard>, i32, Rc<Partition>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<R, i16>> + 'static,
{
    let placement = internal_topic::place(shard, &state_topic(shard), &key.coordinator_key())
        .await
        .map_err(unplaced)?;
    shard
        .run_on(placement.core, move |owner| async move {
            let partition = placement.partition;
            let _lock = owner.groups.share_states.locks.lock(partition).await;
            let log = state_partition(&owner, partition)?;
            ensure_loaded(&owner, partition, &log).await?;
            op(owner, partition, log).await
        })
        .await
}

/// The state of `key` this core keeps for state partition `partition`.
fn kept(shard: &Shard, partition: i32, key: &SharePartitionKey) -> Option<ShareState> {
    shard
        .groups
        .share_states
        .states
        .borrow()
        .get(&partition)
        .and_then(|s| s.get(key))
        .cloned()
}

fn state_partition(shard: &Shard, partition: i32) -> Result<Rc<Partition>, i16> {
    shard
        .partition(SHARE_STATE_TOPIC, partition)
        .filter(|p| p.is_leader())
        .ok_or(errors::NOT_COORDINATOR)
}

/// Loads state partition `partition` unless loaded at its current leader
/// epoch. Call with its lock held.
async fn ensure_loaded(shard: &Rc<Shard>, partition: i32, log: &Partition) -> Result<(), i16> {
    let epoch = log.leader_epoch();
    let store = &shard.groups.share_states;
    if store.loaded.borrow().get(&partition) == Some(&epoch) {
        return Ok(());
    }
    store.loaded.borrow_mut().remove(&partition);
    store.states.borrow_mut().remove(&partition);
    let log_end = log.log_end_offset();
    if groups::load::load_end(log_end, log.high_watermark()).is_none() {
        futures_lite::future::or(log.wait_for_append(log_end - 1), async {
            glommio::timer::sleep(LOAD_CATCH_UP_WAIT).await;
        })
        .await;
    }
    let end = groups::load::load_end(log_end, log.high_watermark())
        .ok_or(errors::COORDINATOR_LOAD_IN_PROGRESS)?;
    let mut states: HashMap<SharePartitionKey, ShareState> = HashMap::new();
    let mut skipped = 0u64;
    let read = internal_topic::for_each_batch(log, end, |batch| {
        let Ok(records) = batch.records() else {
            return;
        };
        for record in records.flatten() {
            let Some(key) = record.key.as_deref().and_then(share_records::parse_key) else {
                skipped += 1;
                continue;
            };
            match record.value.as_deref() {
                None => {
                    states.remove(&key);
                }
                Some(value) => match share_records::parse_value(value) {
                    Some(state) => {
                        states.insert(key, state);
                    }
                    None => skipped += 1,
                },
            }
        }
    })
    .await;
    if let Err(code) = read {
        tracing::error!(partition, code, "cannot load share states");
        return Err(errors::COORDINATOR_LOAD_IN_PROGRESS);
    }
    if log.leader_epoch() != epoch || !log.is_leader() {
        return Err(errors::NOT_COORDINATOR);
    }
    tracing::info!(
        partition,
        share_partitions = states.len(),
        skipped,
        "loaded {SHARE_STATE_TOPIC} partition"
    );
    store.states.borrow_mut().insert(partition, states);
    store.loaded.borrow_mut().insert(partition, epoch);
    Ok(())
}

/// Writes `state` (`None`: a tombstone) for `key` durably on the state
/// partition's in-sync replicas, then keeps it. Refuses a write fenced by
/// the state there.
async fn write_here(
    shard: &Rc<Shard>,
    key: SharePartitionKey,
    state: Option<ShareState>,
    kind: WriteKind,
) -> Result<ShareState, i16> {
    on_coordinator(
        shard,
        &key.clone(),
        move |owner, partition, log| async move {
            let current = kept(&owner, partition, &key);
            let state = match (kind, state, &current) {
                (WriteKind::Delete, _, _) => None,
                (WriteKind::Leader, Some(new), Some(old)) => {
                    if new.leader_epoch < old.leader_epoch {
                        return Err(errors::FENCED_LEADER_EPOCH);
                    }
                    if new.state_epoch != old.state_epoch {
                        return Err(errors::FENCED_STATE_EPOCH);
                    }
                    Some(new)
                }
                (WriteKind::Initialize, Some(new), Some(old)) => Some(ShareState {
                    state_epoch: old.state_epoch + 1,
                    leader_epoch: old.leader_epoch,
                    snapshot: new.snapshot,
                }),
                (_, Some(new), None) => Some(new),
                (_, None, _) => None,
            };
            let record = NewRecord {
                key: Some(share_records::key(&key)),
                value: state.as_ref().map(share_records::value),
                headers: Vec::new(),
                timestamp_delta: 0,
            };
            // acks=all, then durable: answered once every in-sync replica
            // holds it.
            let offset = internal_topic::append_replicated(&log, owner.now_ms(), &[record])
                .await
                .map_err(|code| {
                    tracing::warn!(partition, code, "share state write failed");
                    match code {
                        errors::NOT_LEADER_OR_FOLLOWER => errors::NOT_COORDINATOR,
                        _ => errors::COORDINATOR_NOT_AVAILABLE,
                    }
                })?;
            log.wait_durable(offset).await.map_err(|code| {
                tracing::error!(partition, code, "share state sync failed");
                errors::COORDINATOR_NOT_AVAILABLE
            })?;
            let mut states = owner.groups.share_states.states.borrow_mut();
            let here = states.entry(partition).or_default();
            let kept = state.clone().unwrap_or_default();
            match state {
                Some(state) => here.insert(key, state),
                None => here.remove(&key),
            };
            Ok(kept)
        },
    )
    .await
}

/// The coordinator's state of `key`, read on this broker.
pub async fn read_here(
    shard: &Rc<Shard>,
    key: SharePartitionKey,
) -> Result<Option<ShareState>, i16> {
    on_coordinator(shard, &key.clone(), move |owner, partition, _| async move {
        Ok(kept(&owner, partition, &key))
    })
    .await
}

/// Every share partition state of `group_id` this broker coordinates.
pub async fn group_states_here(
    shard: &Rc<Shard>,
    group_id: String,
) -> Vec<(SharePartitionKey, ShareState)> {
    let mut found = Vec::new();
    for core in 0..shard.cores {
        let group = group_id.clone();
        let here = shard
            .run_on(core, move |owner| async move {
                let mut found = Vec::new();
                let partitions: Vec<i32> = owner
                    .groups
                    .share_states
                    .loaded
                    .borrow()
                    .keys()
                    .copied()
                    .collect();
                for partition in partitions {
                    if state_partition(&owner, partition).is_err() {
                        continue;
                    }
                    let states = owner.groups.share_states.states.borrow();
                    for (key, state) in states.get(&partition).into_iter().flatten() {
                        if key.group_id == group {
                            found.push((key.clone(), state.clone()));
                        }
                    }
                }
                found
            })
            .await;
        found.extend(here);
    }
    found
}

/// A share partition's durable state, from its coordinator wherever it
/// runs; `None`: never written (or deleted).
pub async fn read(shard: &Rc<Shard>, key: SharePartitionKey) -> Result<Option<ShareState>, i16> {
    let broker = coordinator(shard, &key.coordinator_key()).await?;
    if broker == shard.config.node_id {
        return read_here(shard, key).await;
    }
    let request = wire::read_request(&key);
    let answer = crate::cluster::links::call_pooled(
        shard,
        broker,
        kafka_protocol::messages::ApiKey::ReadShareGroupState,
        &request,
        wire::VERSION,
        Duration::ZERO,
    )
    .await;
    match answer {
        Ok(response) => wire::read_answer(response),
        Err(error) => {
            tracing::info!(broker, message = %error.message, "share coordinator not reached");
            Err(errors::COORDINATOR_NOT_AVAILABLE)
        }
    }
}

/// Writes a share partition's state as its leader (see the module
/// documentation for the fencing).
pub async fn write(
    shard: &Rc<Shard>,
    key: SharePartitionKey,
    state: ShareState,
) -> Result<(), i16> {
    remote_or_here(shard, key, Some(state), WriteKind::Leader)
        .await
        .map(|_| ())
}

/// An operator's reset of a share partition: a new start offset, nothing
/// in flight, the next state epoch (its leader reads the state again).
pub async fn initialize(
    shard: &Rc<Shard>,
    key: SharePartitionKey,
    start_offset: i64,
) -> Result<ShareState, i16> {
    let state = ShareState {
        state_epoch: 0,
        leader_epoch: -1,
        snapshot: groups::share::ShareSnapshot {
            start_offset,
            batches: Vec::new(),
        },
    };
    remote_or_here(shard, key, Some(state), WriteKind::Initialize).await
}

/// Removes a share partition's state (its group deleted).
pub async fn delete(shard: &Rc<Shard>, key: SharePartitionKey) -> Result<(), i16> {
    remote_or_here(shard, key, None, WriteKind::Delete)
        .await
        .map(|_| ())
}

async fn remote_or_here(
    shard: &Rc<Shard>,
    key: SharePartitionKey,
    state: Option<ShareState>,
    kind: WriteKind,
) -> Result<ShareState, i16> {
    let broker = coordinator(shard, &key.coordinator_key()).await?;
    if broker == shard.config.node_id {
        return write_here(shard, key, state, kind).await;
    }
    let request = wire::write_request(&key, state.as_ref(), kind.code());
    let answer = crate::cluster::links::call_pooled(
        shard,
        broker,
        kafka_protocol::messages::ApiKey::WriteShareGroupState,
        &request,
        wire::VERSION,
        Duration::from_millis(crate::limits::OFFSETS_COMMIT_TIMEOUT_MS),
    )
    .await;
    match answer {
        Ok(response) => wire::write_answer(response).map(|()| state.unwrap_or_default()),
        Err(error) => {
            tracing::info!(broker, message = %error.message, "share coordinator not reached");
            Err(errors::COORDINATOR_NOT_AVAILABLE)
        }
    }
}

impl WriteKind {
    /// How the kind travels in WriteShareGroupState (a tagged field).
    fn code(self) -> i8 {
        match self {
            WriteKind::Leader => 0,
            WriteKind::Initialize => 1,
            WriteKind::Delete => 2,
        }
    }

    fn from_code(code: i8) -> Option<Self> {
        match code {
            0 => Some(WriteKind::Leader),
            1 => Some(WriteKind::Initialize),
            2 => Some(WriteKind::Delete),
            _ => None,
        }
    }
}

/// Serves a write another broker sent (WriteShareGroupState).
pub async fn write_for_peer(
    shard: &Rc<Shard>,
    key: SharePartitionKey,
    state: Option<ShareState>,
    kind: i8,
) -> Result<ShareState, i16> {
    let kind = WriteKind::from_code(kind).ok_or(errors::INVALID_REQUEST)?;
    write_here(shard, key, state, kind).await
}

/// A share partition of a group: its topic's name and id, the partition,
/// and its state as read (`None`: never written).
pub type GroupPartition = (String, u128, i32, Result<Option<ShareState>, i16>);

/// The share partitions of `group_id` on the topics `only` (every topic
/// but the internal ones when `None`), each with its state.
pub async fn group_partitions(
    shard: &Rc<Shard>,
    group_id: &str,
    only: Option<&std::collections::BTreeSet<String>>,
) -> Vec<GroupPartition> {
    let image = shard.metadata.image();
    let mut topics: Vec<(String, u128, i32)> = image
        .topics
        .values()
        .filter(|t| !crate::metadata::is_internal_topic(&t.name) && !t.name.starts_with("__"))
        .filter(|t| only.is_none_or(|o| o.contains(&t.name)))
        .map(|t| (t.name.clone(), t.topic_id, t.partition_cores.len() as i32))
        .collect();
    topics.sort();
    let keys: Vec<(String, u128, i32)> = topics
        .into_iter()
        .flat_map(|(name, topic_id, count)| {
            (0..count).map(move |partition| (name.clone(), topic_id, partition))
        })
        .collect();
    // A few reads at a time: the coordinators may be other brokers.
    let mut out = Vec::with_capacity(keys.len());
    for chunk in keys.chunks(GROUP_READS_AT_ONCE) {
        let reads = chunk
            .iter()
            .map(|(_, topic_id, partition)| {
                let key = SharePartitionKey {
                    group_id: group_id.to_string(),
                    topic_id: *topic_id,
                    partition: *partition,
                };
                Box::pin(read(shard, key))
                    as std::pin::Pin<Box<dyn std::future::Future<Output = _>>>
            })
            .collect();
        let states = crate::sync::join_all(reads).await;
        out.extend(
            chunk
                .iter()
                .zip(states)
                .map(|((name, topic_id, partition), state)| {
                    (name.clone(), *topic_id, *partition, state)
                }),
        );
    }
    out
}

/// Share-partition states [`group_partitions`] reads at once.
const GROUP_READS_AT_ONCE: usize = 16;
