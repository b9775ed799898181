//! Fetch (1), versions 4–18. From v13 topics are named by topic id (an id
//! no topic has: UNKNOWN_TOPIC_ID); v15's replica state (a follower's id
//! and broker epoch) makes it a follower fetch, whose fetch offset the
//! leader's replica state counts (or, from a Strom follower, the durable
//! log end its tagged field carries: `cluster::replication`), and whose
//! `log_start_offset` counts toward the low watermark DeleteRecords
//! waits for; v16's leader hints (KIP-951): a
//! partition another broker leads answers NOT_LEADER_OR_FOLLOWER with the
//! current leader, whose endpoint the answer lists. Sessions are
//! declined (session id 0: every fetch is full).
//!
//! Path: group partitions by owning core, read on each owner in parallel,
//! gather. Until `min_bytes` are there or `max_wait_ms` passes, wait for an
//! append to any of the partitions (woken by the log, no polling loop) and
//! read again. `max_bytes` is applied over the gathered answer in request
//! order; the first non-empty partition is always kept whole.
//!
//! In load-balancer mode (`strom.balancer.enable`) the partitions another
//! broker leads go to that leader in one consumer Fetch per leader
//! ([`crate::cluster::links`]), carrying what is left of the client's
//! wait, its `min_bytes`, `max_bytes` and isolation level, while the
//! local partitions are read and waited on here; the answer comes when
//! both are done. (A client that sends each leader's partitions to that
//! node, as Kafka clients do, sends fetches that are all local or all
//! forwarded.) A follower's fetch is never forwarded.

use std::pin::Pin;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, LeaderIdAndEpoch, NodeEndpoint, PartitionData,
};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, ProducerId};

use crate::cluster::links::{self, Origin};
use crate::errors;
use crate::handlers::scatter::{
    forwarded_outcomes, forwarded_topics, BrokerWork, CoreWork, Scatter,
};
use crate::limits::FETCH_WAIT_MS_MAX;
use crate::memory::ResponseBudget;
use crate::partition::{FetchOutcome, FollowerPosition};
use crate::shard::Shard;
use crate::sync::select_first;

pub const VERSION_MIN: i16 = 4;
pub const VERSION_MAX: i16 = 18;

#[derive(Clone)]
struct Wanted {
    topic: String,
    partition: i32,
    fetch_offset: i64,
    partition_max_bytes: usize,
    /// isolation_level 1: up to the last stable offset.
    read_committed: bool,
    /// A follower's fetch: its broker id, and where its copy stands
    /// (the fetch offset there is `fetch_offset`'s).
    replica: Option<(i32, FollowerPosition)>,
}

/// One partition for the broker that leads it: the index of its topic in
/// the request, and the partition as the client asked.
struct Forward {
    topic: usize,
    partition: FetchPartition,
}

type BoxFuture<'a, T> = Pin<Box<dyn std::future::Future<Output = T> + 'a>>;

/// Reads a core's partitions one after the other, `max_bytes` shared
/// among them in request order.
async fn read_core(
    owner: Rc<Shard>,
    wanted: CoreWork<Wanted>,
    max_bytes: usize,
) -> CoreWork<FetchOutcome> {
    let mut budget = max_bytes;
    let mut results = Vec::with_capacity(wanted.len());
    for (slot, w) in wanted {
        let max = w.partition_max_bytes.min(budget.max(1));
        let outcome = match (owner.partition(&w.topic, w.partition), w.replica) {
            (Some(partition), None) => partition.read(w.fetch_offset, max, w.read_committed).await,
            (Some(partition), Some((replica_id, position))) => {
                partition.read_for_follower(replica_id, position, max).await
            }
            (None, _) => FetchOutcome::error(errors::NOT_LEADER_OR_FOLLOWER),
        };
        budget = budget.saturating_sub(outcome.records.len());
        results.push((slot, outcome));
    }
    results
}

/// Waits until any wanted partition grows past its fetch offset, or the
/// deadline passes.
async fn wait_for_data(
    shard: &Rc<Shard>,
    scatter: &Scatter<Wanted, FetchOutcome, Forward>,
    deadline: Instant,
) {
    let waits: Vec<BoxFuture<'_, ()>> = scatter
        .by_core()
        .map(|(core, wanted)| {
            let wanted: Vec<(String, i32, i64, bool)> = wanted
                .iter()
                .map(|(_, w)| {
                    (
                        w.topic.clone(),
                        w.partition,
                        w.fetch_offset,
                        w.replica.is_some(),
                    )
                })
                .collect();
            Box::pin(shard.run_on(core, move |owner| async move {
                let mut waits: Vec<BoxFuture<'static, ()>> = Vec::new();
                for (topic, index, offset, replica) in wanted {
                    if let Some(partition) = owner.partition(&topic, index) {
                        // A follower reads up to the log end, a consumer up
                        // to the high watermark.
                        waits.push(Box::pin(async move {
                            if replica {
                                partition.wait_for_log_end(offset).await
                            } else {
                                partition.wait_for_append(offset).await
                            }
                        }));
                    }
                }
                let timeout = deadline.saturating_duration_since(Instant::now());
                waits.push(Box::pin(glommio::timer::sleep(timeout)));
                select_first(waits).await;
            })) as BoxFuture<'_, ()>
        })
        .collect();
    let mut waits = waits;
    let timeout = deadline.saturating_duration_since(Instant::now());
    waits.push(Box::pin(glommio::timer::sleep(timeout)));
    waits.push(Box::pin(shard.stopping.wait()));
    select_first(waits).await;
}

/// `budget` bounds the answer: `max_bytes` is cut to what the connection and
/// the core may still hold of responses waiting to be written (at least the
/// first batch is always sent, as Kafka does).
pub async fn handle(
    shard: &Rc<Shard>,
    request: FetchRequest,
    version: i16,
    budget: &mut ResponseBudget,
    origin: Origin,
    listener: &str,
) -> FetchResponse {
    // A follower's report of its position (no wait) is not a fetch round.
    let follower = follower_id(&request, version) >= 0 && request.max_wait_ms > 0;
    let started = Instant::now();
    let response = answer(shard, request, version, budget, origin, listener).await;
    if follower {
        crate::stages::record_since(crate::stages::Stage::LeaderFollowerFetch, started);
    }
    response
}

/// The broker id a follower's fetch names (v15+ in replica_state); -1 for
/// a consumer's.
fn follower_id(request: &FetchRequest, version: i16) -> i32 {
    if version >= 15 {
        request.replica_state.replica_id.0
    } else {
        request.replica_id.0
    }
}

async fn answer(
    shard: &Rc<Shard>,
    request: FetchRequest,
    version: i16,
    budget: &mut ResponseBudget,
    origin: Origin,
    listener: &str,
) -> FetchResponse {
    let image = shard.metadata.image();
    let max_wait =
        Duration::from_millis(request.max_wait_ms.clamp(0, FETCH_WAIT_MS_MAX as i32) as u64);
    let deadline = Instant::now() + max_wait;
    let min_bytes = request.min_bytes.max(0) as usize;
    let asked = if request.max_bytes <= 0 {
        i32::MAX as usize
    } else {
        request.max_bytes as usize
    };
    let max_bytes = budget.reserve_up_to(asked);

    let mut scatter: Scatter<Wanted, FetchOutcome, Forward> = Scatter::default();
    // Slots answered by another broker: that broker counts their traffic.
    let mut forwarded_slots = std::collections::BTreeSet::new();
    let replica_id = follower_id(&request, version);
    // v13+ name topics by id (and leave the name empty).
    let names: Vec<Option<String>> = request
        .topics
        .iter()
        .map(|topic| {
            if topic.topic_id.is_nil() {
                Some(topic.topic.0.to_string())
            } else {
                super::metadata::topic_by_id(&image, topic.topic_id).map(|t| t.name.clone())
            }
        })
        .collect();
    for (topic_index, (topic, name)) in request.topics.iter().zip(&names).enumerate() {
        let Some(name) = name.as_deref() else {
            for _ in &topic.partitions {
                scatter.answer(FetchOutcome::error(errors::UNKNOWN_TOPIC_ID));
            }
            continue;
        };
        for p in &topic.partitions {
            let elsewhere = (replica_id < 0)
                .then(|| links::leader_elsewhere(shard, &image, origin, name, p.partition))
                .flatten();
            if let Some(broker) = elsewhere {
                let slot = scatter.forward(
                    broker,
                    Forward {
                        topic: topic_index,
                        partition: p.clone(),
                    },
                );
                forwarded_slots.insert(slot);
                continue;
            }
            let core = image
                .leader_core_by_name(name, p.partition, shard.cores)
                .map_err(errors::not_served);
            match core {
                Err(code) => scatter.answer(FetchOutcome::error(code)),
                Ok(core) => scatter.route(
                    core,
                    Wanted {
                        topic: name.to_string(),
                        partition: p.partition,
                        fetch_offset: p.fetch_offset,
                        partition_max_bytes: p.partition_max_bytes.max(0) as usize,
                        read_committed: replica_id < 0 && request.isolation_level == 1,
                        replica: (replica_id >= 0).then(|| {
                            let durable_end = crate::cluster::replication::durable_end_of(p)
                                .unwrap_or(p.fetch_offset);
                            let position = FollowerPosition {
                                leader_epoch: p.current_leader_epoch,
                                fetch_offset: p.fetch_offset,
                                durable_end,
                                log_start_offset: p.log_start_offset,
                            };
                            (replica_id, position)
                        }),
                    },
                ),
            };
        }
    }
    let by_broker = scatter.take_forwarded();
    let forwarded = crate::sync::join_all(
        by_broker
            .into_iter()
            .map(|(broker, work)| {
                let asked = Asked {
                    request: &request,
                    version,
                    max_bytes,
                    deadline,
                };
                Box::pin(forward(shard, asked, broker, work)) as BoxFuture<'_, _>
            })
            .collect(),
    );
    let local = async {
        loop {
            scatter
                .gather_again(shard, move |owner, wanted| {
                    read_core(owner, wanted, max_bytes)
                })
                .await;
            let mut total = 0usize;
            let mut failed = false;
            for outcome in scatter.routed_outcomes() {
                total += outcome.records.len();
                failed |= outcome.error_code != errors::NONE;
            }
            let expired = Instant::now() >= deadline;
            if total >= min_bytes
                || failed
                || expired
                || scatter.nothing_routed()
                || shard.stopping.is_raised()
            {
                break;
            }
            wait_for_data(shard, &scatter, deadline).await;
        }
    };
    let ((), forwarded) = futures_lite::future::zip(local, forwarded).await;
    scatter.place_forwarded(forwarded);
    // Apply max_bytes across partitions in request order.
    let mut used = 0usize;
    for outcome in scatter.outcomes_mut() {
        let len = outcome.records.len();
        if len == 0 {
            continue;
        }
        if used > 0 && used + len > max_bytes {
            outcome.records = Bytes::new();
        } else {
            used += len;
        }
    }
    let mut outcomes = scatter.into_outcomes().enumerate();
    let responses = request
        .topics
        .iter()
        .zip(&names)
        .map(|(topic, name)| {
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let (slot, outcome) = outcomes.next().expect("one outcome per partition");
                    // A follower's fetch is replication, not consumption.
                    let counted = replica_id < 0 && !forwarded_slots.contains(&slot);
                    if let (Some(name), true) = (name, counted) {
                        crate::metrics::record_fetched(name, p.partition, &outcome.records);
                    }
                    let leader = (outcome.error_code == errors::NOT_LEADER_OR_FOLLOWER)
                        .then(|| crate::cluster::leader_of(&image, name.as_deref(), p.partition))
                        .flatten()
                        .map_or_else(LeaderIdAndEpoch::default, |(leader, epoch)| {
                            LeaderIdAndEpoch::default()
                                .with_leader_id(BrokerId(crate::cluster::client_node(
                                    shard, &image, leader,
                                )))
                                .with_leader_epoch(epoch)
                        });
                    PartitionData::default()
                        .with_current_leader(leader)
                        .with_partition_index(p.partition)
                        .with_error_code(outcome.error_code)
                        .with_high_watermark(outcome.high_watermark)
                        .with_last_stable_offset(outcome.last_stable_offset)
                        .with_log_start_offset(outcome.log_start_offset)
                        .with_aborted_transactions(Some(
                            outcome
                                .aborted
                                .iter()
                                .map(|txn| {
                                    AbortedTransaction::default()
                                        .with_producer_id(ProducerId(txn.producer_id))
                                        .with_first_offset(txn.first_offset)
                                })
                                .collect(),
                        ))
                        .with_preferred_read_replica(BrokerId(-1))
                        .with_records(Some(outcome.records))
                })
                .collect();
            // Named as asked: by name before v13, by id from v13.
            FetchableTopicResponse::default()
                .with_topic(topic.topic.clone())
                .with_topic_id(topic.topic_id)
                .with_partitions(partitions)
        })
        .collect();
    let responses: Vec<FetchableTopicResponse> = responses;
    let leaders = crate::cluster::leader_endpoints(
        shard,
        &image,
        listener,
        responses
            .iter()
            .flat_map(|t| t.partitions.iter())
            .filter(|p| p.error_code == errors::NOT_LEADER_OR_FOLLOWER)
            .map(|p| p.current_leader.leader_id.0),
    );
    let endpoints = crate::node_endpoints!(NodeEndpoint, leaders);
    FetchResponse::default()
        .with_session_id(0)
        .with_responses(responses)
        .with_node_endpoints(endpoints)
}

/// What a forwarded fetch carries over from the client's.
#[derive(Clone, Copy)]
struct Asked<'a> {
    request: &'a FetchRequest,
    version: i16,
    max_bytes: usize,
    deadline: Instant,
}

/// Sends a leader the partitions it leads as one consumer fetch (the
/// client's version, min_bytes, isolation level and rack; max_bytes as far
/// as this answer may hold; the wait left when it is sent); its answer for
/// each, or NOT_LEADER_OR_FOLLOWER for all when there is none.
async fn forward(
    shard: &Rc<Shard>,
    asked: Asked<'_>,
    broker: i32,
    work: BrokerWork<Forward>,
) -> BrokerWork<FetchOutcome> {
    let request = asked.request;
    let topics = forwarded_topics(
        &work,
        |part| part.topic,
        |index| {
            let topic = &request.topics[index];
            FetchTopic::default()
                .with_topic(topic.topic.clone())
                .with_topic_id(topic.topic_id)
        },
        |topic, part| topic.partitions.push(part.partition.clone()),
    );
    let forwarded = FetchRequest::default()
        .with_min_bytes(request.min_bytes)
        .with_max_bytes(asked.max_bytes.min(i32::MAX as usize) as i32)
        .with_isolation_level(request.isolation_level)
        .with_session_id(0)
        .with_session_epoch(-1)
        .with_rack_id(request.rack_id.clone())
        .with_topics(topics);
    let answers = links::fetch(shard, broker, forwarded, asked.version, asked.deadline)
        .await
        .map(|response| {
            response
                .responses
                .into_iter()
                .flat_map(|t| t.partitions)
                .map(|p| FetchOutcome {
                    error_code: p.error_code,
                    high_watermark: p.high_watermark,
                    log_start_offset: p.log_start_offset,
                    last_stable_offset: p.last_stable_offset,
                    aborted: p
                        .aborted_transactions
                        .unwrap_or_default()
                        .iter()
                        .map(|txn| crate::producer_state::AbortedTxn {
                            producer_id: txn.producer_id.0,
                            first_offset: txn.first_offset,
                            // Only the producer and first offset travel.
                            last_offset: i64::MAX,
                        })
                        .collect(),
                    records: p.records.unwrap_or_default(),
                })
                .collect()
        })
        .map_err(|error| error.to_string());
    forwarded_outcomes(broker, work, answers, || {
        FetchOutcome::error(errors::NOT_LEADER_OR_FOLLOWER)
    })
}
