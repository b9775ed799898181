//! Share groups (KIP-932, queues for Kafka): ShareGroupHeartbeat (76),
//! ShareFetch (78) and ShareAcknowledge (79), version 1.
//!
//! Membership is the group coordinator's (`groups::share::ShareGroup`):
//! every member is assigned every partition of its topics. Each share
//! partition's state (`groups::share::SharePartition`: the records in
//! flight, who holds which under what lock, delivery counts) lives on the
//! core that owns the partition, beside its log. ShareFetch first applies
//! the acknowledgements it carries, then acquires records for the member
//! up to the high watermark (the last stable offset for a
//! `share.isolation.level=read_committed` group, whose aborted records and
//! markers are archived as they are acquired) and returns the batches that
//! hold them with the acquired ranges (the client keeps the records of
//! those ranges). One that finds nothing waits, up to its `max_wait_ms`,
//! for an append past what a share partition has handed out or for
//! acknowledgements and expired locks on its cores ([`wait_for_records`]),
//! then looks again.
//! A share session (per group and member, on the connection's core)
//! carries the partitions between requests: epoch 0 opens one with the
//! request's partitions, each later request brings the next epoch with
//! what it adds and forgets, -1 closes it (acknowledging only).
//!
//! Each change of a share partition's state is written to its share
//! coordinator (`crate::share_state`) before the request is answered; a
//! new leader reads it there. In load-balancer mode the session stays on
//! the broker the client reached, and the partitions another broker leads
//! are served there ([`forward`]).

use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use groups::share::{AcknowledgeType, ShareHeartbeat, SharePartition};
use groups::share_records::{SharePartitionKey, ShareState};
use kafka_protocol::messages::share_fetch_response::{
    AcquiredRecords, LeaderIdAndEpoch, PartitionData, ShareFetchableTopicResponse,
};
use kafka_protocol::messages::share_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::{
    share_acknowledge_response, ShareAcknowledgeRequest, ShareAcknowledgeResponse,
    ShareFetchRequest, ShareFetchResponse, ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::cluster::links::{self, Origin};
use crate::errors;
use crate::group::manager;
use crate::group_state::{HeldShare, ShareSession};
use crate::shard::Shard;
use crate::share_state;

pub const VERSION_MIN: i16 = 1;
pub const VERSION_MAX: i16 = 1;

/// Records acquired per partition and request at most when the client
/// asks for none in particular.
const MAX_RECORDS_DEFAULT: usize = 500;
/// How long a ShareFetch that acquired nothing waits for records at most.
const EMPTY_WAIT_MAX: Duration = Duration::from_millis(500);

fn text(value: impl Into<String>) -> StrBytes {
    StrBytes::from_string(value.into())
}

pub async fn heartbeat(
    shard: &Rc<Shard>,
    request: ShareGroupHeartbeatRequest,
    client_id: String,
    client_host: String,
) -> ShareGroupHeartbeatResponse {
    let group_id = request.group_id.0.to_string();
    let outcome = manager::on_coordinator(
        shard,
        &group_id.clone(),
        move |owner, partition| async move {
            let image = owner.metadata.image();
            // The group's own settings (IncrementalAlterConfigs on the group).
            let settings = GroupSettings::of(&owner, &group_id);
            let counts: BTreeMap<String, i32> = image
                .topics
                .values()
                .map(|t| (t.name.clone(), t.partition_cores.len() as i32))
                .collect();
            let ids: BTreeMap<String, u128> = image
                .topics
                .values()
                .map(|t| (t.name.clone(), t.topic_id))
                .collect();
            let decoded = ShareHeartbeat {
                group_id,
                member_id: request.member_id.to_string(),
                member_epoch: request.member_epoch,
                rack_id: request.rack_id.map(|r| r.to_string()),
                subscribed_topic_names: request
                    .subscribed_topic_names
                    .map(|names| names.into_iter().map(|n| n.0.to_string()).collect()),
                client_id,
                client_host,
                session_timeout_ms: settings.session_timeout_ms,
            };
            // A join, a leave or a new subscription queues the group's
            // records; they are written to `__consumer_offsets` and the
            // heartbeat answered once they (and whatever another task
            // appended with them) are durable on every in-sync replica, so
            // a new coordinator knows the member and the epoch it was
            // told. A heartbeat that changes nothing writes nothing.
            let (answer, changed) = manager::with_coordinator(&owner, |c| {
                let answer = c.share_heartbeat(owner.now_ms() as u64, decoded, &counts);
                (answer, c.has_metadata_changes())
            });
            if changed {
                manager::write_group_metadata(&owner, partition).await?;
                manager::maybe_compact(&owner, partition).await;
            }
            answer.map(|answer| (answer, ids, settings.heartbeat_interval_ms))
        },
    )
    .await
    .and_then(|inner| inner);
    match outcome {
        Err(error) => ShareGroupHeartbeatResponse::default()
            .with_error_code(error.code())
            .with_error_message(Some(text(error.to_string()))),
        Ok((answer, ids, interval)) => ShareGroupHeartbeatResponse::default()
            .with_member_id(Some(text(answer.member_id)))
            .with_member_epoch(answer.member_epoch)
            .with_heartbeat_interval_ms(i32::try_from(interval).unwrap_or(i32::MAX))
            .with_assignment(answer.assignment.map(|topics| {
                Assignment::default().with_topic_partitions(
                    topics
                        .into_iter()
                        .map(|(name, count)| {
                            TopicPartitions::default()
                                .with_topic_id(uuid::Uuid::from_u128(
                                    ids.get(&name).copied().unwrap_or(0),
                                ))
                                .with_partitions((0..count).collect())
                        })
                        .collect(),
                )
            })),
    }
}

/// A share group's own settings (group configs) over the broker's.
struct GroupSettings {
    session_timeout_ms: Option<u64>,
    heartbeat_interval_ms: u64,
    record_lock_ms: u64,
    auto_offset_reset: String,
    /// `share.isolation.level=read_committed`: records up to the last
    /// stable offset only, never those of aborted transactions.
    read_committed: bool,
}

impl GroupSettings {
    fn of(shard: &Shard, group_id: &str) -> Self {
        let image = shard.metadata.image();
        let configs = image.group_configs.get(group_id);
        let text = |key: &str| configs.and_then(|c| c.get(key)).cloned();
        let number = |key: &str| text(key).and_then(|v| v.trim().parse::<u64>().ok());
        let broker = &shard.config.groups.share;
        GroupSettings {
            session_timeout_ms: number("share.session.timeout.ms"),
            heartbeat_interval_ms: number("share.heartbeat.interval.ms")
                .unwrap_or(broker.heartbeat_interval_ms),
            record_lock_ms: number("share.record.lock.duration.ms")
                .unwrap_or(broker.partition.record_lock_ms),
            auto_offset_reset: text("share.auto.offset.reset").unwrap_or_else(|| "latest".into()),
            read_committed: text("share.isolation.level")
                .is_some_and(|level| level.trim() == "read_committed"),
        }
    }
}

/// Where a share partition without a kept state starts
/// (`share.auto.offset.reset`): the log end, its start, or the first
/// record at most `by_duration:` old (the log end when none is).
async fn start_offset(log: &crate::partition::Partition, reset: &str, now_ms: i64) -> i64 {
    if reset == "earliest" {
        return log.log_start_offset();
    }
    let Some(age_ms) = reset
        .strip_prefix("by_duration:")
        .and_then(groups::share::parse_duration_ms)
    else {
        return log.high_watermark();
    };
    let since = now_ms
        .saturating_sub(i64::try_from(age_ms).unwrap_or(i64::MAX))
        .max(0);
    let found = log.list_offset(since, false).await;
    if found.error_code == errors::NONE && found.offset >= 0 {
        found.offset.min(log.high_watermark())
    } else {
        log.high_watermark()
    }
}

/// One acknowledgement batch: offsets and a type each (one type for the
/// whole range when only one is given).
type Acks = Vec<(i64, i64, Vec<i8>)>;

/// What a request asks of one share partition.
#[derive(Debug, Clone, Default)]
struct Want {
    acks: Acks,
    /// Acquire records for the member.
    fetch: bool,
    /// The member's session closed: what it holds goes back.
    release: bool,
    /// A session opens with it: a state held here with nothing acquired
    /// is read again (an operator may have reset it meanwhile).
    fresh: bool,
}

/// What one partition's turn on its owner core gave.
struct Served {
    error_code: i16,
    acknowledge_error_code: i16,
    /// The partition's leader (another broker's when forwarded), -1 unknown.
    leader_id: i32,
    leader_epoch: i32,
    records: Option<bytes::Bytes>,
    acquired: Vec<groups::share::Acquired>,
}

impl Served {
    fn refused(code: i16) -> Self {
        Served {
            error_code: code,
            acknowledge_error_code: code,
            leader_id: -1,
            leader_epoch: -1,
            records: None,
            acquired: Vec::new(),
        }
    }
}

/// The turn of a share partition: a hash of its key.
fn turn_of(key: &(String, String, i32)) -> i32 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut hasher);
    hasher.finish() as i32
}

/// Applies `acks` of `member_id` to `state`; the acknowledgement's code.
fn apply_acks(
    state: &mut SharePartition,
    member_id: &str,
    acks: Acks,
    config: &groups::share::ShareConfig,
) -> i16 {
    let mut code = errors::NONE;
    for (first, last, types) in acks {
        let outcome = if types.len() <= 1 {
            let kind = types.first().copied().unwrap_or(1);
            match AcknowledgeType::from_code(kind) {
                Some(kind) => state.acknowledge(member_id, first, last, kind, config),
                None => Err(groups::share::InvalidRecordState { offset: first }),
            }
        } else {
            let mut result = Ok(());
            for (offset, code) in (first..=last).zip(types) {
                let one = match AcknowledgeType::from_code(code) {
                    Some(kind) => state.acknowledge(member_id, offset, offset, kind, config),
                    None => Err(groups::share::InvalidRecordState { offset }),
                };
                result = result.and(one);
            }
            result
        };
        if outcome.is_err() {
            code = ResponseError::InvalidRecordState.code();
        }
    }
    code
}

/// On the core owning `topic`-`partition`: applies what `want` asks of
/// `member` (acknowledgements, a release, an acquisition), writes the
/// share partition's changed state at its share coordinator and only
/// then answers, with the records acquired.
#[allow(clippy::too_many_arguments)]
async fn serve_partition(
    owner: Rc<Shard>,
    group_id: String,
    member_id: String,
    topic: String,
    topic_id: u128,
    partition: i32,
    want: Want,
    limits: (usize, usize),
) -> Served {
    let Some(log) = owner.partition(&topic, partition).filter(|p| p.is_leader()) else {
        return Served::refused(errors::NOT_LEADER_OR_FOLLOWER);
    };
    let key = (group_id.clone(), topic, partition);
    let _turn = owner.groups.share_turns.lock(turn_of(&key)).await;
    let settings = GroupSettings::of(&owner, &group_id);
    let config = groups::share::ShareConfig {
        record_lock_ms: settings.record_lock_ms,
        ..owner.config.groups.share.partition
    };
    let leader_epoch = log.leader_epoch();
    let state_key = SharePartitionKey {
        group_id: group_id.clone(),
        topic_id,
        partition,
    };
    let cached = owner
        .groups
        .share_partitions
        .borrow()
        .get(&key)
        .is_some_and(|h| {
            h.leader_epoch == leader_epoch && (!want.fresh || h.partition.acquired_count() > 0)
        });
    if !cached {
        // Not served here at this leader epoch yet: the state as the
        // share coordinator keeps it.
        let held = match share_state::read(&owner, state_key.clone()).await {
            Err(code) => {
                tracing::info!(group = %group_id, partition, code, "share partition state not read");
                return Served::refused(errors::NOT_LEADER_OR_FOLLOWER);
            }
            Ok(Some(stored)) => HeldShare {
                partition: SharePartition::restore(&stored.snapshot, &config),
                leader_epoch,
                state_epoch: stored.state_epoch,
                written: stored.snapshot,
            },
            Ok(None) => {
                let start = start_offset(&log, &settings.auto_offset_reset, owner.now_ms()).await;
                let partition = SharePartition::new(start);
                HeldShare {
                    written: partition.snapshot(),
                    partition,
                    leader_epoch,
                    state_epoch: 0,
                }
            }
        };
        owner
            .groups
            .share_partitions
            .borrow_mut()
            .insert(key.clone(), held);
    }
    // Changed in place (this request holds the partition's turn); should
    // the durable write fail, the held state is dropped and read again.
    let now = owner.now_ms() as u64;
    let upper = if settings.read_committed {
        log.last_stable_offset()
    } else {
        log.high_watermark()
    };
    let held = || {
        std::cell::RefMut::map(owner.groups.share_partitions.borrow_mut(), |partitions| {
            partitions
                .get_mut(&key)
                .expect("held above, under the partition's turn")
        })
    };
    let gives_back = want.release || !want.acks.is_empty();
    let (expired, acknowledge_error_code, mut acquired) = {
        let mut next = held();
        let expired = next.partition.expire_locks(now, &config);
        let acknowledge_error_code =
            apply_acks(&mut next.partition, &member_id, want.acks, &config);
        if want.release {
            next.partition.release_member(&member_id, &config);
        }
        let acquired = if want.fetch {
            next.partition
                .acquire(&member_id, upper, limits.0, now, &config)
        } else {
            Vec::new()
        };
        (expired, acknowledge_error_code, acquired)
    };
    // Read committed: the records of aborted transactions and the markers
    // among those just acquired are archived, never handed out.
    let mut read_ahead = None;
    if settings.read_committed {
        if let Some(first) = acquired.first() {
            let read = log.read(first.first, limits.1.max(1), true).await;
            if read.error_code != errors::NONE {
                // What is acquired cannot be told committed: nothing of
                // this request applies (the state is read again).
                tracing::info!(group = %group_id, partition, code = read.error_code, "share partition not read for read_committed");
                owner.groups.share_partitions.borrow_mut().remove(&key);
                return Served::refused(read.error_code);
            }
            let (kept, dropped) = committed_only(&acquired, &read);
            let mut next = held();
            for (first, last) in dropped {
                let archived = next.partition.acknowledge(
                    &member_id,
                    first,
                    last,
                    groups::share::AcknowledgeType::Reject,
                    &config,
                );
                debug_assert!(archived.is_ok(), "just acquired by this member");
            }
            drop(next);
            acquired = kept;
            read_ahead = Some(read.records);
        }
    }
    let changed = {
        let next = held();
        let snapshot = next.partition.snapshot();
        (snapshot != next.written).then_some(ShareState {
            state_epoch: next.state_epoch,
            leader_epoch,
            snapshot,
        })
    };
    if let Some(state) = changed {
        let snapshot = state.snapshot.clone();
        if let Err(code) = share_state::write(&owner, state_key, state).await {
            tracing::info!(group = %group_id, partition, code, "share partition state not written: nothing of this request applied");
            // Fenced: another leader or a reset wrote since; read again next time.
            owner.groups.share_partitions.borrow_mut().remove(&key);
            return Served::refused(errors::NOT_LEADER_OR_FOLLOWER);
        }
        if let Some(held) = owner.groups.share_partitions.borrow_mut().get_mut(&key) {
            held.written = snapshot;
        }
    }
    if gives_back || expired > 0 {
        // Waiting fetches look again.
        let groups = &owner.groups;
        groups.share_changes.set(groups.share_changes.get() + 1);
        groups.share_changed.notify_all();
    }
    crate::metrics::record_share(
        &group_id,
        crate::metrics::ShareActivity {
            acquired: acquired.iter().map(|a| (a.last - a.first + 1) as u64).sum(),
            redelivered: acquired
                .iter()
                .filter(|a| a.delivery_count > 1)
                .map(|a| (a.last - a.first + 1) as u64)
                .sum(),
            lock_expiries: expired as u64,
        },
    );
    let records = match (acquired.first(), read_ahead) {
        (None, _) => None,
        (Some(_), Some(records)) => Some(records),
        (Some(first), None) => {
            let read = log.read(first.first, limits.1.max(1), false).await;
            (read.error_code == errors::NONE).then_some(read.records)
        }
    };
    Served {
        error_code: errors::NONE,
        acknowledge_error_code,
        leader_id: owner.config.node_id,
        leader_epoch,
        records,
        acquired,
    }
}

/// `acquired` split by what a read_committed read of it shows: the ranges
/// to hand out, and those to archive (aborted transactions' records and
/// transaction markers).
fn committed_only(
    acquired: &[groups::share::Acquired],
    read: &crate::partition::FetchOutcome,
) -> (Vec<groups::share::Acquired>, Vec<(i64, i64)>) {
    let batches: Vec<groups::share::LoggedBatch> =
        protocol::batch::split_batches(read.records.clone())
            .map_while(Result::ok)
            .map(|batch| {
                let header = batch.header();
                groups::share::LoggedBatch {
                    base: header.base_offset,
                    last: header.last_offset(),
                    producer_id: header.producer_id,
                    transactional: header.is_transactional(),
                    control: header.is_control(),
                }
            })
            .collect();
    let aborted: Vec<groups::share::AbortedTxn> = read
        .aborted
        .iter()
        .map(|txn| groups::share::AbortedTxn {
            producer_id: txn.producer_id,
            first: txn.first_offset,
            marker: txn.last_offset,
        })
        .collect();
    groups::share::split_acquired(acquired, &groups::share::not_committed(&batches, &aborted))
}

/// The share session of (`group_id`, `member_id`) on this core moved on
/// by a request at `epoch` naming `added` and `forgotten` partitions: the
/// partitions to fetch, or the error code.
fn advance_session(
    shard: &Shard,
    key: (String, String),
    epoch: i32,
    added: &[(u128, i32)],
    forgotten: &[(u128, i32)],
) -> Result<Vec<(u128, i32)>, i16> {
    let mut sessions = shard.groups.share_sessions.borrow_mut();
    match epoch {
        0 => {
            let session = ShareSession {
                epoch: 1,
                partitions: added.iter().copied().collect(),
            };
            let partitions = session.partitions.iter().copied().collect();
            sessions.insert(key, session);
            Ok(partitions)
        }
        // Closed: its partitions, whose records the member held go back.
        -1 => Ok(sessions
            .remove(&key)
            .map(|s| s.partitions.into_iter().collect())
            .unwrap_or_default()),
        epoch => {
            let Some(session) = sessions.get_mut(&key) else {
                return Err(ResponseError::ShareSessionNotFound.code());
            };
            if session.epoch != epoch {
                return Err(ResponseError::InvalidShareSessionEpoch.code());
            }
            session.epoch = epoch.wrapping_add(1).max(1);
            session.partitions.extend(added.iter().copied());
            for p in forgotten {
                session.partitions.remove(p);
            }
            Ok(session.partitions.iter().copied().collect())
        }
    }
}

/// Serves `wanted` partitions on their cores; the answers by partition.
/// In load-balancer mode a client's partitions led by another broker go
/// to that broker (see [`forward`]).
/// The shortest time between two looks of an empty ShareFetch.
const EMPTY_LOOK_MIN: Duration = Duration::from_millis(10);

/// How often an empty ShareFetch looks again at share partitions other
/// brokers serve for it (load-balancer mode), which it cannot wait on.
const FORWARDED_LOOK_EVERY: Duration = Duration::from_millis(50);

/// Waits until one of the share partitions `keys` may have records to
/// hand out, or `deadline`: its log grew past what its share partition has
/// handed out, or a share partition on its core took acknowledgements or
/// had locks expire. Partitions another broker serves are looked at again
/// every [`FORWARDED_LOOK_EVERY`].
async fn wait_for_records(
    shard: &Rc<Shard>,
    origin: Origin,
    group_id: &str,
    keys: Vec<(u128, i32)>,
    deadline: std::time::Instant,
) {
    let image = shard.metadata.image();
    let mut deadline = deadline;
    let mut by_core: BTreeMap<usize, Vec<(String, i32)>> = BTreeMap::new();
    for (topic_id, partition) in keys {
        let Some(topic) = super::metadata::topic_by_id(&image, uuid::Uuid::from_u128(topic_id))
        else {
            continue;
        };
        if links::leader_elsewhere(shard, &image, origin, &topic.name, partition).is_some() {
            deadline = deadline.min(std::time::Instant::now() + FORWARDED_LOOK_EVERY);
            continue;
        }
        if let Ok(core) = image.leader_core(topic, partition, shard.cores) {
            by_core
                .entry(core)
                .or_default()
                .push((topic.name.clone(), partition));
        }
    }
    type Wait<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + 'a>>;
    let mut waits: Vec<Wait<'_>> = by_core
        .into_iter()
        .map(|(core, parts)| {
            let group = group_id.to_string();
            Box::pin(shard.run_on(core, move |owner| async move {
                let seen = owner.groups.share_changes.get();
                let mut waits: Vec<Wait<'static>> = Vec::new();
                for (topic, index) in parts {
                    let Some(partition) = owner.partition(&topic, index) else {
                        continue;
                    };
                    let end = owner
                        .groups
                        .share_partitions
                        .borrow()
                        .get(&(group.clone(), topic, index))
                        .map_or_else(|| partition.high_watermark(), |h| h.partition.end_offset());
                    waits.push(Box::pin(
                        async move { partition.wait_for_append(end).await },
                    ));
                }
                let changes = owner.clone();
                waits.push(Box::pin(async move {
                    changes
                        .groups
                        .share_changed
                        .wait_until(|| changes.groups.share_changes.get() != seen)
                        .await
                }));
                waits.push(Box::pin(glommio::timer::sleep(
                    deadline.saturating_duration_since(std::time::Instant::now()),
                )));
                crate::sync::select_first(waits).await;
            })) as Wait<'_>
        })
        .collect();
    waits.push(Box::pin(glommio::timer::sleep(
        deadline.saturating_duration_since(std::time::Instant::now()),
    )));
    waits.push(Box::pin(shard.stopping.wait()));
    crate::sync::select_first(waits).await;
}

async fn serve_all(
    shard: &Rc<Shard>,
    origin: Origin,
    group_id: &str,
    member_id: &str,
    wanted: BTreeMap<(u128, i32), Want>,
    limits: (usize, usize),
) -> BTreeMap<(u128, i32), Served> {
    let image = shard.metadata.image();
    let mut out = BTreeMap::new();
    let mut elsewhere: BTreeMap<i32, BTreeMap<(u128, i32), Want>> = BTreeMap::new();
    type Serving<'a> =
        std::pin::Pin<Box<dyn std::future::Future<Output = ((u128, i32), Served)> + 'a>>;
    let mut here: Vec<Serving<'_>> = Vec::new();
    for ((topic_id, partition), want) in wanted {
        let Some(topic) = super::metadata::topic_by_id(&image, uuid::Uuid::from_u128(topic_id))
        else {
            out.insert(
                (topic_id, partition),
                Served::refused(errors::UNKNOWN_TOPIC_ID),
            );
            continue;
        };
        if let Some(leader) = links::leader_elsewhere(shard, &image, origin, &topic.name, partition)
        {
            elsewhere
                .entry(leader)
                .or_default()
                .insert((topic_id, partition), want);
            continue;
        }
        let name = topic.name.clone();
        match image.leader_core(topic, partition, shard.cores) {
            Err(why) => {
                out.insert(
                    (topic_id, partition),
                    Served::refused(errors::not_served(why)),
                );
            }
            Ok(core) => {
                let (group, member) = (group_id.to_string(), member_id.to_string());
                here.push(Box::pin(async move {
                    let served = shard
                        .run_on(core, move |owner| {
                            serve_partition(
                                owner, group, member, name, topic_id, partition, want, limits,
                            )
                        })
                        .await;
                    ((topic_id, partition), served)
                }));
            }
        }
    }
    // The partitions at once: each waits for its own state's durable write.
    let forwards = elsewhere
        .into_iter()
        .map(|(leader, parts)| {
            Box::pin(forward(shard, leader, group_id, member_id, parts, limits))
                as std::pin::Pin<Box<dyn std::future::Future<Output = _>>>
        })
        .collect();
    // The partitions served here and those forwarded, all at once.
    let (served, forwarded) =
        futures_lite::future::zip(crate::sync::join_all(here), crate::sync::join_all(forwards))
            .await;
    out.extend(served);
    for answered in forwarded {
        out.extend(answered);
    }
    out
}

/// Load-balancer mode: `parts` of a client's share request, led by
/// `leader`, served there. The session stays here, with the client's
/// connection; the leader gets a ShareFetch marked forwarded, which it
/// serves without a session: its partitions' acknowledgements, then a
/// release of what the member holds (epoch -1, the session closed here),
/// or an acquisition (`max_records` above 0), or nothing more.
async fn forward(
    shard: &Rc<Shard>,
    leader: i32,
    group_id: &str,
    member_id: &str,
    parts: BTreeMap<(u128, i32), Want>,
    (max_records, max_bytes): (usize, usize),
) -> BTreeMap<(u128, i32), Served> {
    use kafka_protocol::messages::share_fetch_request::{
        AcknowledgementBatch, FetchPartition, FetchTopic,
    };
    let release = parts.values().any(|w| w.release);
    let fetch = parts.values().any(|w| w.fetch);
    let mut topics: BTreeMap<u128, Vec<FetchPartition>> = BTreeMap::new();
    for (&(topic_id, partition), want) in &parts {
        topics.entry(topic_id).or_default().push(
            FetchPartition::default()
                .with_partition_index(partition)
                .with_acknowledgement_batches(
                    want.acks
                        .iter()
                        .map(|(first, last, types)| {
                            AcknowledgementBatch::default()
                                .with_first_offset(*first)
                                .with_last_offset(*last)
                                .with_acknowledge_types(types.clone())
                        })
                        .collect(),
                ),
        );
    }
    let request = ShareFetchRequest::default()
        .with_group_id(Some(kafka_protocol::messages::GroupId(text(group_id))))
        .with_member_id(Some(text(member_id)))
        .with_share_session_epoch(if release { -1 } else { 0 })
        .with_max_records(if fetch {
            i32::try_from(max_records).unwrap_or(i32::MAX)
        } else {
            0
        })
        .with_max_bytes(i32::try_from(max_bytes).unwrap_or(i32::MAX))
        .with_topics(
            topics
                .into_iter()
                .map(|(id, partitions)| {
                    FetchTopic::default()
                        .with_topic_id(uuid::Uuid::from_u128(id))
                        .with_partitions(partitions)
                })
                .collect(),
        );
    let mut out: BTreeMap<(u128, i32), Served> = parts
        .keys()
        .map(|&key| (key, Served::refused(errors::NOT_LEADER_OR_FOLLOWER)))
        .collect();
    match links::share_fetch(shard, leader, request).await {
        Err(error) => {
            tracing::info!(leader, %error, "share partitions not forwarded to their leader");
        }
        Ok(response) if response.error_code != errors::NONE => {
            for served in out.values_mut() {
                *served = Served::refused(response.error_code);
            }
        }
        Ok(response) => {
            for topic in response.responses {
                let id = topic.topic_id.as_u128();
                for p in topic.partitions {
                    let Some(slot) = out.get_mut(&(id, p.partition_index)) else {
                        continue;
                    };
                    *slot = Served {
                        error_code: p.error_code,
                        acknowledge_error_code: p.acknowledge_error_code,
                        leader_id: p.current_leader.leader_id,
                        leader_epoch: p.current_leader.leader_epoch,
                        records: p.records.filter(|r| !r.is_empty()),
                        acquired: p
                            .acquired_records
                            .iter()
                            .map(|a| groups::share::Acquired {
                                first: a.first_offset,
                                last: a.last_offset,
                                delivery_count: u16::try_from(a.delivery_count).unwrap_or(0),
                            })
                            .collect(),
                    };
                }
            }
        }
    }
    out
}

fn acks_of(
    batches: Vec<kafka_protocol::messages::share_fetch_request::AcknowledgementBatch>,
) -> Acks {
    batches
        .into_iter()
        .map(|b| (b.first_offset, b.last_offset, b.acknowledge_types))
        .collect()
}

pub async fn fetch(
    shard: &Rc<Shard>,
    request: ShareFetchRequest,
    origin: Origin,
) -> ShareFetchResponse {
    let (Some(group_id), Some(member_id)) = (
        request.group_id.as_ref().map(|g| g.0.to_string()),
        request.member_id.as_ref().map(|m| m.to_string()),
    ) else {
        return ShareFetchResponse::default().with_error_code(errors::INVALID_REQUEST);
    };
    let mut wanted: BTreeMap<(u128, i32), Want> = BTreeMap::new();
    let mut added = Vec::new();
    for topic in request.topics {
        let id = topic.topic_id.as_u128();
        for p in topic.partitions {
            added.push((id, p.partition_index));
            wanted
                .entry((id, p.partition_index))
                .or_default()
                .acks
                .extend(acks_of(p.acknowledgement_batches));
        }
    }
    let forgotten: Vec<(u128, i32)> = request
        .forgotten_topics_data
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |p| (t.topic_id.as_u128(), *p)))
        .collect();
    let closing = request.share_session_epoch == -1;
    // Forwarded by a broker in load-balancer mode: its session, not one
    // here (see `forward`).
    let forwarded = origin == Origin::Forwarded;
    let fetched = if forwarded {
        if closing || request.max_records > 0 {
            added.clone()
        } else {
            Vec::new()
        }
    } else {
        let session = advance_session(
            shard,
            (group_id.clone(), member_id.clone()),
            request.share_session_epoch,
            &added,
            &forgotten,
        );
        match session {
            Err(code) => return ShareFetchResponse::default().with_error_code(code),
            Ok(partitions) => partitions,
        }
    };
    if request.share_session_epoch == 0 && !forwarded {
        for want in wanted.values_mut() {
            want.fresh = true;
        }
    }
    let named: Vec<(u128, i32)> = wanted.keys().copied().collect();
    for key in fetched {
        let want = wanted.entry(key).or_default();
        if closing {
            want.release = true;
        } else {
            want.fetch = true;
        }
    }
    let max_records = usize::try_from(request.max_records)
        .ok()
        .filter(|&n| n > 0)
        .unwrap_or(MAX_RECORDS_DEFAULT);
    let max_bytes = usize::try_from(request.max_bytes).unwrap_or(0).max(1 << 20);
    let wait = if forwarded {
        Duration::ZERO
    } else {
        Duration::from_millis(u64::try_from(request.max_wait_ms).unwrap_or(0)).min(EMPTY_WAIT_MAX)
    };
    let deadline = std::time::Instant::now() + wait;
    let mut served = serve_all(
        shard,
        origin,
        &group_id,
        &member_id,
        wanted.clone(),
        (max_records, max_bytes),
    )
    .await;
    if closing {
        // Only the partitions the request named are answered.
        served.retain(|key, _| named.contains(key));
    }
    // Nothing to hand out yet: wait a little for records, as a fetch does.
    while !closing
        && served.values().all(|s| s.acquired.is_empty())
        && std::time::Instant::now() < deadline
    {
        let pause = std::time::Instant::now();
        wait_for_records(
            shard,
            origin,
            &group_id,
            wanted.keys().copied().collect(),
            deadline,
        )
        .await;
        // At most one look a few milliseconds (a partition at its lock
        // limit, or read_committed behind an open transaction, has records
        // it cannot hand out yet).
        let looked = pause.elapsed();
        if looked < EMPTY_LOOK_MIN {
            glommio::timer::sleep(EMPTY_LOOK_MIN - looked).await;
        }
        let fetch_only = wanted
            .iter()
            .filter(|(_, want)| want.fetch)
            .map(|(k, _)| {
                let want = Want {
                    fetch: true,
                    ..Want::default()
                };
                (*k, want)
            })
            .collect();
        let again = serve_all(
            shard,
            origin,
            &group_id,
            &member_id,
            fetch_only,
            (max_records, max_bytes),
        )
        .await;
        for (key, s) in again {
            if let Some(slot) = served.get_mut(&key) {
                slot.acquired = s.acquired;
                slot.records = s.records;
                if slot.error_code == errors::NONE {
                    slot.error_code = s.error_code;
                }
            }
        }
    }
    let mut topics: BTreeMap<u128, Vec<PartitionData>> = BTreeMap::new();
    for ((topic_id, partition), s) in served {
        topics.entry(topic_id).or_default().push(
            PartitionData::default()
                .with_partition_index(partition)
                .with_error_code(s.error_code)
                .with_acknowledge_error_code(s.acknowledge_error_code)
                .with_current_leader(
                    LeaderIdAndEpoch::default()
                        .with_leader_id(s.leader_id)
                        .with_leader_epoch(s.leader_epoch),
                )
                // Empty, never null: clients cannot parse a null record set.
                .with_records(Some(s.records.unwrap_or_default()))
                .with_acquired_records(
                    s.acquired
                        .iter()
                        .map(|a| {
                            AcquiredRecords::default()
                                .with_first_offset(a.first)
                                .with_last_offset(a.last)
                                .with_delivery_count(
                                    i16::try_from(a.delivery_count).unwrap_or(i16::MAX),
                                )
                        })
                        .collect(),
                ),
        );
    }
    let lock_ms = GroupSettings::of(shard, &group_id).record_lock_ms;
    ShareFetchResponse::default()
        .with_acquisition_lock_timeout_ms(i32::try_from(lock_ms).unwrap_or(i32::MAX))
        .with_responses(
            topics
                .into_iter()
                .map(|(id, partitions)| {
                    ShareFetchableTopicResponse::default()
                        .with_topic_id(uuid::Uuid::from_u128(id))
                        .with_partitions(partitions)
                })
                .collect(),
        )
}

pub async fn acknowledge(
    shard: &Rc<Shard>,
    request: ShareAcknowledgeRequest,
    origin: Origin,
) -> ShareAcknowledgeResponse {
    let (Some(group_id), Some(member_id)) = (
        request.group_id.as_ref().map(|g| g.0.to_string()),
        request.member_id.as_ref().map(|m| m.to_string()),
    ) else {
        return ShareAcknowledgeResponse::default().with_error_code(errors::INVALID_REQUEST);
    };
    if request.share_session_epoch == 0 {
        return ShareAcknowledgeResponse::default()
            .with_error_code(ResponseError::InvalidShareSessionEpoch.code());
    }
    let closed = match advance_session(
        shard,
        (group_id.clone(), member_id.clone()),
        request.share_session_epoch,
        &[],
        &[],
    ) {
        Err(code) => return ShareAcknowledgeResponse::default().with_error_code(code),
        // A closing acknowledgement: what the member still holds goes back.
        Ok(partitions) if request.share_session_epoch == -1 => partitions,
        Ok(_) => Vec::new(),
    };
    let mut wanted: BTreeMap<(u128, i32), Want> = BTreeMap::new();
    for topic in request.topics {
        let id = topic.topic_id.as_u128();
        for p in topic.partitions {
            wanted
                .entry((id, p.partition_index))
                .or_default()
                .acks
                .extend(
                    p.acknowledgement_batches
                        .into_iter()
                        .map(|b| (b.first_offset, b.last_offset, b.acknowledge_types)),
                );
        }
    }
    let answered: Vec<(u128, i32)> = wanted.keys().copied().collect();
    for key in closed {
        wanted.entry(key).or_default().release = true;
    }
    let mut served = serve_all(shard, origin, &group_id, &member_id, wanted, (0, 0)).await;
    // Only the partitions the request named are answered.
    served.retain(|key, _| answered.contains(key));
    let mut topics: BTreeMap<u128, Vec<share_acknowledge_response::PartitionData>> =
        BTreeMap::new();
    for ((topic_id, partition), s) in served {
        topics.entry(topic_id).or_default().push(
            share_acknowledge_response::PartitionData::default()
                .with_partition_index(partition)
                .with_error_code(if s.error_code == errors::NONE {
                    s.acknowledge_error_code
                } else {
                    s.error_code
                }),
        );
    }
    ShareAcknowledgeResponse::default().with_responses(
        topics
            .into_iter()
            .map(|(id, partitions)| {
                share_acknowledge_response::ShareAcknowledgeTopicResponse::default()
                    .with_topic_id(uuid::Uuid::from_u128(id))
                    .with_partitions(partitions)
            })
            .collect(),
    )
}
