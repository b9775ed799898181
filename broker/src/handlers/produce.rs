//! Produce (0), versions 0–13 advertised; 3–13 served. v0–2 (which old
//! librdkafka needs to see advertised) are answered UNSUPPORTED_VERSION per
//! partition, as Kafka 4 does. v10's leader hints (KIP-951): a partition
//! another broker leads answers NOT_LEADER_OR_FOLLOWER with the current
//! leader and epoch, and the answer lists that leader's endpoint. v11–12 change only transaction semantics, which idempotent producers do
//! not use. v13 names topics by id, in the request and the answer: an id
//! no topic has (or the nil id) is UNKNOWN_TOPIC_ID for each of its
//! partitions, as in Kafka, and nothing is auto-created (there is no name
//! to create).
//!
//! In load-balancer mode (`strom.balancer.enable`) a partition another
//! broker leads is not validated here: its batch goes, as the client sent
//! it, to that leader in a Produce of the same acks, timeout and
//! transactional id (one per leader, [`crate::cluster::links`]), and the
//! leader's answer takes the partition's place in this answer.
//!
//! Path: validate each partition's batch here (size, CRC, one v2 batch,
//! then every record as Kafka's LogValidator does: the offset range against
//! the count, lengths, varints, offset deltas, timestamps, headers, through
//! bounded streaming decompression when compressed; walked in place, no
//! copy), group partitions by owning core, hop there with the `Bytes` (no copy),
//! append (and with acks=all wait until durable), gather the answers.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, LeaderIdAndEpoch, NodeEndpoint, PartitionProduceResponse,
    TopicProduceResponse,
};
use kafka_protocol::messages::{BrokerId, ProduceRequest, ProduceResponse};
use kafka_protocol::protocol::StrBytes;
use protocol::batch::{BatchError, RecordBatch};
use protocol::codec::RequestFrame;

use crate::cluster::links::{self, Origin};
use crate::cluster::{client_node, leader_endpoints, leader_of};
use crate::controller::{self, TopicSpec};
use crate::errors;
use crate::handlers::scatter::{
    each_concurrently, forwarded_outcomes, forwarded_topics, BrokerWork, Scatter,
};
use crate::limits::{DECOMPRESSED_BATCH_BYTES_MAX, DECOMPRESSION_RATIO_MAX};
use crate::metadata::{validate_topic_name, MetadataImage, TopicMeta};
use crate::partition::ProduceOutcome;
use crate::shard::Shard;

pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 13;
/// Lowest version whose body the codec decodes.
pub const VERSION_SERVED_MIN: i16 = 3;
/// From this version topics are named by id.
const VERSION_TOPIC_IDS_MIN: i16 = 13;

/// One partition's batch, validated, on its way to the owning core.
struct Append {
    topic: String,
    partition: i32,
    batch: RecordBatch,
}

/// One partition's data for the broker that leads it: the index of its
/// topic in the request, and the partition as the client sent it.
struct Forward {
    topic: usize,
    data: PartitionProduceData,
}

/// A routed batch's bytes and records, for the topic metrics.
type Appended = Option<(u64, u64)>;

/// Creates the topics a produce request names that do not exist yet, when
/// auto-create is on.
async fn auto_create(shard: &Rc<Shard>, request: &ProduceRequest, image: &MetadataImage) -> bool {
    if !shard.config.auto_create_topics {
        return false;
    }
    let missing: Vec<String> = request
        .topic_data
        .iter()
        .map(|t| t.name.0.to_string())
        .filter(|n| !image.topics.contains_key(n) && validate_topic_name(n).is_ok())
        .collect();
    if missing.is_empty() {
        return false;
    }
    let specs = missing
        .into_iter()
        .map(|name| TopicSpec {
            name,
            partitions: shard.config.num_partitions,
            replication_factor: -1,
            configs: BTreeMap::new(),
        })
        .collect();
    controller::create_topics(shard, specs, false).await;
    true
}

/// The largest batch a topic accepts.
fn max_message_bytes(shard: &Shard, configs: &BTreeMap<String, String>) -> usize {
    configs
        .get("max.message.bytes")
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or_else(|| {
            crate::config::dynamic::message_max_bytes(&shard.config, &shard.metadata.image())
        })
}

thread_local! {
    /// Each core's buffer for decompressed record chunks, reused by every
    /// compressed batch the core validates.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Bytes a compressed batch of a topic with this `max.message.bytes` may
/// decompress to.
fn decompressed_bytes_max(max_message_bytes: usize) -> usize {
    max_message_bytes
        .saturating_mul(DECOMPRESSION_RATIO_MAX)
        .min(DECOMPRESSED_BATCH_BYTES_MAX)
}

/// Validates a client's batch fully: header, CRC, then every record.
fn validate_batch(
    records: Bytes,
    max_message_bytes: usize,
) -> Result<(RecordBatch, protocol::records::RecordsSummary), BatchError> {
    let batch = RecordBatch::new(records)?;
    let bound = decompressed_bytes_max(max_message_bytes);
    let summary = SCRATCH.with_borrow_mut(|scratch| {
        protocol::records::validate_producer_batch(batch.bytes(), batch.header(), bound, scratch)
    })?;
    Ok((batch, summary))
}

/// Whether a batch holds a record without a key (for the answer's message
/// only: the batch was checked already).
fn has_keyless_record(data: &PartitionProduceData) -> bool {
    let Some(records) = &data.records else {
        return false;
    };
    let Ok(batch) = RecordBatch::new(records.clone()) else {
        return false;
    };
    SCRATCH
        .with_borrow_mut(|scratch| {
            protocol::records::validate_producer_batch(
                batch.bytes(),
                batch.header(),
                DECOMPRESSED_BATCH_BYTES_MAX,
                scratch,
            )
        })
        .is_ok_and(|summary| summary.keyless_records > 0)
}

/// Whether a topic is compacted (its `cleanup.policy`, else the broker's).
fn is_compacted(
    shard: &Shard,
    image: &MetadataImage,
    overrides: &BTreeMap<String, String>,
) -> bool {
    overrides
        .get("cleanup.policy")
        .cloned()
        .or_else(|| {
            crate::config::dynamic::topic_default_value(&shard.config, image, "cleanup.policy")
        })
        .and_then(|value| crate::topic_config::CleanupPolicy::parse(&value))
        .is_some_and(|policy| policy.compact)
}

/// Kafka's message for a record without a key in a compacted topic
/// (KIP-467 carries it in the partition's answer).
fn keyless_message(topic: &str, partition: i32) -> String {
    format!(
        "Compacted topic cannot accept message without key in topic partition {topic}-{partition}."
    )
}

/// The batch in the codec the topic's `compression.type` asks for,
/// recompressed when its codec differs (Kafka's LogValidator does the
/// same); as it came with `producer`. A recompressed batch larger than
/// `max.message.bytes` is refused as Kafka refuses it.
fn recompress_for_topic(
    shard: &Shard,
    image: &crate::metadata::MetadataImage,
    overrides: &BTreeMap<String, String>,
    batch: RecordBatch,
    max_message_bytes: usize,
) -> Result<RecordBatch, BatchError> {
    let target = crate::topic_config::compression_codec(|key| {
        overrides
            .get(key)
            .cloned()
            .or_else(|| crate::config::dynamic::topic_default_value(&shard.config, image, key))
    });
    let Some(target) = target else {
        return Ok(batch);
    };
    let bound = decompressed_bytes_max(max_message_bytes);
    match protocol::recompress::recompress(batch.bytes(), batch.header(), target, bound)? {
        None => Ok(batch),
        Some(bytes) if bytes.len() > max_message_bytes => Err(BatchError::DecompressedTooLarge {
            limit_bytes: max_message_bytes,
        }),
        Some(bytes) => RecordBatch::new(Bytes::from(bytes)),
    }
}

/// The Kafka error code for a batch refused here. Kafka answers an
/// undecodable compressed stream with CORRUPT_MESSAGE; a stream over the
/// decompression bound gets MESSAGE_TOO_LARGE, on which Java producers
/// split the batch and retry; the rest is INVALID_RECORD (or CORRUPT_MESSAGE
/// for a CRC mismatch) as for any bad batch.
fn rejected_code(error: &BatchError) -> i16 {
    match error {
        BatchError::CorruptCompressed { .. } => errors::CORRUPT_MESSAGE,
        BatchError::DecompressedTooLarge { .. } => errors::MESSAGE_TOO_LARGE,
        other => errors::batch_error_code(other),
    }
}

/// What the request asks of every partition, checked once.
struct Asked<'a> {
    shard: &'a Shard,
    image: &'a MetadataImage,
    acks: i16,
    by_id: bool,
    origin: Origin,
}

/// Checks one partition's batch and finds its owner: the owning core and
/// the validated batch (recompressed for the topic when it asks), or the
/// error code that answers the partition.
fn check_partition(
    asked: &Asked<'_>,
    name: &str,
    topic: Option<&TopicMeta>,
    partition_data: &PartitionProduceData,
) -> Result<(usize, RecordBatch), i16> {
    let Asked {
        shard,
        image,
        acks,
        by_id,
        ..
    } = *asked;
    if !matches!(acks, -1..=1) {
        return Err(errors::INVALID_REQUIRED_ACKS);
    }
    if by_id && topic.is_none() {
        return Err(errors::UNKNOWN_TOPIC_ID);
    }
    let Some(topic) = topic else {
        return Err(if validate_topic_name(name).is_err() {
            errors::INVALID_TOPIC_EXCEPTION
        } else {
            errors::UNKNOWN_TOPIC_OR_PARTITION
        });
    };
    if crate::metadata::is_internal_topic(name) {
        // Kafka: "Cannot append to internal topic"; only the broker's own
        // coordinators write there.
        return Err(errors::INVALID_TOPIC_EXCEPTION);
    }
    let core = image
        .leader_core(topic, partition_data.index, shard.cores)
        .map_err(errors::not_served)?;
    let records = partition_data
        .records
        .clone()
        .ok_or(errors::INVALID_RECORD)?;
    let max_bytes = max_message_bytes(shard, &topic.configs);
    if records.len() > max_bytes {
        return Err(errors::MESSAGE_TOO_LARGE);
    }
    let compacted = is_compacted(shard, image, &topic.configs);
    let (batch, summary) = validate_batch(records, max_bytes).map_err(|error| {
        tracing::debug!(topic = name, partition = partition_data.index, %error, "rejected batch");
        rejected_code(&error)
    })?;
    if compacted && summary.keyless_records > 0 {
        tracing::debug!(
            topic = name,
            partition = partition_data.index,
            records = summary.keyless_records,
            "rejected records without a key for a compacted topic"
        );
        return Err(errors::INVALID_RECORD);
    }
    recompress_for_topic(shard, image, &topic.configs, batch, max_bytes)
        .map(|batch| (core, batch))
        .map_err(|error| {
            tracing::debug!(topic = name, partition = partition_data.index, %error, "rejected batch");
            rejected_code(&error)
        })
}

/// The broker a partition's data is forwarded to, as it came: another
/// broker leads it (load-balancer mode), and nothing this broker checks
/// first refuses it (acks, an unknown or internal topic).
fn leader_elsewhere(
    asked: &Asked<'_>,
    name: &str,
    topic: Option<&TopicMeta>,
    partition: i32,
) -> Option<i32> {
    if !matches!(asked.acks, -1..=1) || topic.is_none() || crate::metadata::is_internal_topic(name)
    {
        return None;
    }
    links::leader_elsewhere(asked.shard, asked.image, asked.origin, name, partition)
}

pub async fn handle(
    shard: &Rc<Shard>,
    request: ProduceRequest,
    version: i16,
    origin: Origin,
    listener: &str,
) -> Option<ProduceResponse> {
    let acks = request.acks;
    // How long acks=all waits for the ISR before REQUEST_TIMED_OUT.
    let timeout = Duration::from_millis(u64::try_from(request.timeout_ms).unwrap_or(0));
    let by_id = version >= VERSION_TOPIC_IDS_MIN;
    let mut image = shard.metadata.image();
    if !by_id && auto_create(shard, &request, &image).await {
        image = shard.metadata.image();
    }
    // Each topic's name: as given, or found by its id (v13+).
    let names: Vec<Option<String>> = request
        .topic_data
        .iter()
        .map(|topic_data| {
            if !by_id {
                return Some(topic_data.name.0.to_string());
            }
            super::metadata::topic_by_id(&image, topic_data.topic_id).map(|t| t.name.clone())
        })
        .collect();
    let asked = Asked {
        shard,
        image: &image,
        acks,
        by_id,
        origin,
    };
    let (mut scatter, appended) = route(&asked, &request, &names);
    let transactional_id = request.transactional_id.as_ref().map(|id| id.0.to_string());
    scatter
        .gather_forwarding(
            shard,
            move |owner, work| {
                let transactional_id = transactional_id.clone();
                async move {
                    each_concurrently(work, |append: Append| {
                        let partition = owner.partition(&append.topic, append.partition);
                        let owner = owner.clone();
                        let transactional_id = transactional_id.clone();
                        async move {
                            match partition {
                                Some(partition) => {
                                    crate::txn::verify::produce(
                                        &owner,
                                        &partition,
                                        transactional_id.as_deref(),
                                        append.batch,
                                        acks,
                                        timeout,
                                        version,
                                    )
                                    .await
                                }
                                None => ProduceOutcome::error(errors::NOT_LEADER_OR_FOLLOWER),
                            }
                        }
                    })
                    .await
                }
            },
            |broker, work| forward(shard, &request, version, broker, work),
        )
        .await;
    let slots = request
        .topic_data
        .iter()
        .zip(&names)
        .flat_map(|(topic_data, name)| {
            let name = name.as_deref().unwrap_or_default();
            topic_data
                .partition_data
                .iter()
                .map(move |p| (name, p.index))
        });
    for ((topic, partition), (outcome, appended)) in slots.zip(scatter.outcomes().zip(&appended)) {
        if let (errors::NONE, Some((bytes, records))) = (outcome.error_code, appended) {
            crate::metrics::record_produced(topic, partition, *bytes, *records);
        }
    }
    if acks == 0 {
        return None;
    }
    let mut response = response(&request, scatter.into_outcomes(), version);
    for ((topic, name), asked) in response
        .responses
        .iter_mut()
        .zip(&names)
        .zip(&request.topic_data)
    {
        let compacted = name
            .as_deref()
            .and_then(|n| image.topics.get(n))
            .is_some_and(|t| is_compacted(shard, &image, &t.configs));
        for (partition, data) in topic
            .partition_responses
            .iter_mut()
            .zip(&asked.partition_data)
        {
            if compacted
                && partition.error_code == errors::INVALID_RECORD
                && has_keyless_record(data)
            {
                let message = keyless_message(name.as_deref().unwrap_or_default(), partition.index);
                partition.record_errors = vec![BatchIndexAndErrorMessage::default()
                    .with_batch_index(0)
                    .with_batch_index_error_message(Some(StrBytes::from_string(message.clone())))];
                partition.error_message = Some(StrBytes::from_string(message));
            }
        }
        for partition in &mut topic.partition_responses {
            if partition.error_code == errors::NOT_LEADER_OR_FOLLOWER {
                if let Some((leader, epoch)) = leader_of(&image, name.as_deref(), partition.index) {
                    partition.current_leader = LeaderIdAndEpoch::default()
                        .with_leader_id(BrokerId(client_node(shard, &image, leader)))
                        .with_leader_epoch(epoch);
                }
            }
        }
    }
    let leaders = leader_endpoints(
        shard,
        &image,
        listener,
        response.responses.iter().flat_map(|t| {
            t.partition_responses
                .iter()
                .filter(|p| p.error_code == errors::NOT_LEADER_OR_FOLLOWER)
                .map(|p| p.current_leader.leader_id.0)
        }),
    );
    response.node_endpoints = crate::node_endpoints!(NodeEndpoint, leaders);
    Some(response)
}

/// Sends a leader the partitions it leads, in one Produce as the client
/// asked (acks, timeout, transactional id, version; batches as they came);
/// its answer for each, or NOT_LEADER_OR_FOLLOWER for all when there is
/// none (the client retries after refreshing its metadata).
async fn forward(
    shard: &Rc<Shard>,
    request: &ProduceRequest,
    version: i16,
    broker: i32,
    work: BrokerWork<Forward>,
) -> BrokerWork<ProduceOutcome> {
    let topic_data = forwarded_topics(
        &work,
        |part| part.topic,
        |index| {
            let asked = &request.topic_data[index];
            TopicProduceData::default()
                .with_name(asked.name.clone())
                .with_topic_id(asked.topic_id)
        },
        |topic, part| topic.partition_data.push(part.data.clone()),
    );
    let forwarded = ProduceRequest::default()
        .with_acks(request.acks)
        .with_timeout_ms(request.timeout_ms)
        .with_transactional_id(request.transactional_id.clone())
        .with_topic_data(topic_data);
    let answers = match links::produce(shard, broker, forwarded, version).await {
        // acks=0: nothing is answered to the client either.
        Ok(None) => Ok(work
            .iter()
            .map(|_| ProduceOutcome::error(errors::NONE))
            .collect()),
        Ok(Some(response)) => Ok(response
            .responses
            .iter()
            .flat_map(|t| &t.partition_responses)
            .map(|p| ProduceOutcome {
                error_code: p.error_code,
                base_offset: p.base_offset,
                log_append_time_ms: p.log_append_time_ms,
                log_start_offset: p.log_start_offset,
            })
            .collect()),
        Err(error) => Err(error.to_string()),
    };
    forwarded_outcomes(broker, work, answers, || {
        ProduceOutcome::error(errors::NOT_LEADER_OR_FOLLOWER)
    })
}

/// Per partition, in request order: its answer now, its batch routed to
/// the owning core, or (load-balancer mode) its data forwarded to the
/// broker that leads it; and the routed batch's bytes and records, for the
/// topic metrics (counted by the leader for a forwarded one).
fn route(
    asked: &Asked<'_>,
    request: &ProduceRequest,
    names: &[Option<String>],
) -> (Scatter<Append, ProduceOutcome, Forward>, Vec<Appended>) {
    let mut scatter = Scatter::default();
    let mut appended = Vec::new();
    for (topic_index, (topic_data, name)) in request.topic_data.iter().zip(names).enumerate() {
        let name = name.as_deref().unwrap_or_default();
        let topic = asked.image.topics.get(name).map(|topic| &**topic);
        for partition_data in &topic_data.partition_data {
            if let Some(broker) = leader_elsewhere(asked, name, topic, partition_data.index) {
                appended.push(None);
                scatter.forward(
                    broker,
                    Forward {
                        topic: topic_index,
                        data: partition_data.clone(),
                    },
                );
                continue;
            }
            match check_partition(asked, name, topic, partition_data) {
                Ok((core, batch)) => {
                    appended.push(Some((
                        batch.bytes().len() as u64,
                        batch.header().record_count.max(0) as u64,
                    )));
                    scatter.route(
                        core,
                        Append {
                            topic: name.to_string(),
                            partition: partition_data.index,
                            batch,
                        },
                    );
                }
                Err(code) => {
                    appended.push(None);
                    scatter.answer(ProduceOutcome::error(code));
                }
            }
        }
    }
    (scatter, appended)
}

/// The answer, topics and partitions in the order asked.
fn response(
    request: &ProduceRequest,
    mut outcomes: impl Iterator<Item = ProduceOutcome>,
    version: i16,
) -> ProduceResponse {
    let by_id = version >= VERSION_TOPIC_IDS_MIN;
    let responses = request
        .topic_data
        .iter()
        .map(|topic_data| {
            let partition_responses = topic_data
                .partition_data
                .iter()
                .map(|p| {
                    let outcome = outcomes.next().expect("one outcome per partition");
                    PartitionProduceResponse::default()
                        .with_index(p.index)
                        .with_error_code(error_code_for_version(outcome.error_code, version))
                        .with_base_offset(outcome.base_offset)
                        .with_log_append_time_ms(outcome.log_append_time_ms)
                        .with_log_start_offset(outcome.log_start_offset)
                })
                .collect();
            let response = if by_id {
                TopicProduceResponse::default().with_topic_id(topic_data.topic_id)
            } else {
                TopicProduceResponse::default().with_name(topic_data.name.clone())
            };
            response.with_partition_responses(partition_responses)
        })
        .collect();
    ProduceResponse::default().with_responses(responses)
}

/// UNKNOWN_PRODUCER_ID came with produce v5, beside the log start offset a
/// client compares its last acknowledged offset with to act on it; v3–4
/// clients know no such code and get OUT_OF_ORDER_SEQUENCE_NUMBER.
fn error_code_for_version(code: i16, version: i16) -> i16 {
    if code == crate::producer_state::UNKNOWN_PRODUCER_ID && version < 5 {
        errors::OUT_OF_ORDER_SEQUENCE_NUMBER
    } else {
        code
    }
}

/// Answers a v0–2 produce request, which the codec cannot decode, with
/// UNSUPPORTED_VERSION for every partition. Parsed by hand with every count
/// bounded by the bytes left; a malformed body gets no answer (`None` would
/// look like acks=0, so it gets an empty response list instead).
pub fn answer_old_version(request: &RequestFrame) -> Option<Bytes> {
    let version = request.api_version;
    let mut body = request.body.clone();
    let mut topics: Vec<(Bytes, Vec<i32>)> = Vec::new();
    let mut acks = 1i16;
    let parsed = (|| -> Option<()> {
        if body.remaining() < 10 {
            return None;
        }
        acks = body.get_i16();
        let _timeout = body.get_i32();
        let topic_count = body.get_i32();
        if topic_count < 0 || topic_count as usize > body.remaining() / 6 {
            return None;
        }
        for _ in 0..topic_count {
            if body.remaining() < 2 {
                return None;
            }
            let name_len = body.get_i16();
            if name_len < 0 || name_len as usize + 4 > body.remaining() {
                return None;
            }
            let name = body.split_to(name_len as usize);
            let partition_count = body.get_i32();
            if partition_count < 0 || partition_count as usize > body.remaining() / 8 {
                return None;
            }
            let mut partitions = Vec::with_capacity(partition_count as usize);
            for _ in 0..partition_count {
                if body.remaining() < 8 {
                    return None;
                }
                partitions.push(body.get_i32());
                let set_len = body.get_i32();
                if set_len < 0 || set_len as usize > body.remaining() {
                    return None;
                }
                body.advance(set_len as usize);
            }
            topics.push((name, partitions));
        }
        Some(())
    })();
    if parsed.is_some() && acks == 0 {
        return None;
    }
    let mut out = BytesMut::new();
    out.put_i32(0);
    out.put_i32(request.correlation_id);
    out.put_i32(topics.len() as i32);
    for (name, partitions) in &topics {
        out.put_i16(name.len() as i16);
        out.put_slice(name);
        out.put_i32(partitions.len() as i32);
        for &partition in partitions {
            out.put_i32(partition);
            out.put_i16(errors::UNSUPPORTED_VERSION);
            crate::metrics::record_error_code(
                kafka_protocol::messages::ApiKey::Produce as i16,
                errors::UNSUPPORTED_VERSION,
            );
            out.put_i64(-1);
            if version >= 2 {
                out.put_i64(-1);
            }
        }
    }
    if version >= 1 {
        out.put_i32(0);
    }
    let length = (out.len() - 4) as i32;
    out[..4].copy_from_slice(&length.to_be_bytes());
    Some(out.freeze())
}
