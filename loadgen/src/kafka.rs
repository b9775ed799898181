//! The Kafka side of the load generator, on `protocol::client` and
//! `protocol::admin`: topic creation and deletion, record batch encoding,
//! produce and fetch. Nothing here is Strom-specific.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    BrokerId, CreateTopicsRequest, DeleteTopicsRequest, FetchRequest, FetchResponse,
    ProduceRequest, ProduceResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression as KafkaCompression, Record, RecordBatchDecoder, RecordBatchEncoder,
    RecordEncodeOptions, TimestampType,
};
use protocol::admin::{leaders, metadata, topic_name, Leaders};
use protocol::client::{error_name, ClientConfig, Connection, ERROR_NONE};

use crate::workload::Compression;

/// TLS and SASL of every connection, from `--command-config`: set once
/// before the run starts, read by every executor.
static SECURITY: std::sync::OnceLock<protocol::properties::Security> = std::sync::OnceLock::new();

/// Sets the connections' security (once, before any connects).
pub fn set_security(security: protocol::properties::Security) {
    let _ = SECURITY.set(security);
}

pub fn client_config(timeout: Duration) -> ClientConfig {
    let (tls, sasl) = SECURITY.get().cloned().unwrap_or_default();
    ClientConfig {
        client_id: "strom-loadgen".into(),
        software_name: "strom-loadgen".into(),
        request_timeout: timeout,
        tls,
        sasl,
        ..ClientConfig::default()
    }
}

/// Connects to `addresses`: one broker, or a comma-separated list (as
/// every Kafka tool takes its bootstrap servers), tried in order until one
/// answers.
pub async fn connect(addresses: &str) -> Result<Connection> {
    let list = protocol::client::bootstrap_list(addresses)?;
    protocol::client::connect_first(&list, &client_config(Duration::from_secs(30)))
        .await
        .map_err(|failures| {
            let all: Vec<String> = failures.iter().map(ToString::to_string).collect();
            anyhow::anyhow!("cannot connect to any of {addresses}: {}", all.join("; "))
        })
}

/// The node id of every partition's leader of `topics`. Connections are
/// kept per node id, as Kafka's clients keep them: behind a load balancer
/// every broker is listed at the balancer's one address, and each leader
/// still gets a connection of its own (landing on whichever broker the
/// balancer picks).
pub async fn leader_ids(bootstrap: &str, topics: &[String]) -> Result<HashMap<(String, i32), i32>> {
    let mut conn = connect(bootstrap).await?;
    let meta = metadata(&mut conn, Some(topics), false).await?;
    let mut ids = HashMap::new();
    for topic in &meta.topics {
        let name = topic
            .name
            .as_ref()
            .map(|n| n.0.to_string())
            .unwrap_or_default();
        for partition in &topic.partitions {
            ids.insert(
                (name.clone(), partition.partition_index),
                partition.leader_id.0,
            );
        }
    }
    Ok(ids)
}

/// A connection to the controller (admin requests go there).
async fn connect_controller(bootstrap: &str) -> Result<Connection> {
    let mut conn = connect(bootstrap).await?;
    let meta = metadata(&mut conn, Some(&[]), false).await?;
    let controller = meta
        .brokers
        .iter()
        .find(|b| b.node_id == meta.controller_id)
        .map(|b| format!("{}:{}", b.host, b.port))
        .unwrap_or_else(|| conn.address().to_string());
    if controller == conn.address() {
        Ok(conn)
    } else {
        connect(&controller).await
    }
}

/// Creates topics through the controller with `replication_factor`
/// replicas per partition (`None`: the broker's default); waits until every
/// partition has a leader. A refused creation is an error naming the topic
/// and reason.
pub async fn create_topics(
    bootstrap: &str,
    names: &[String],
    partitions: usize,
    replication_factor: Option<i16>,
    configs: &[(String, String)],
) -> Result<Leaders> {
    let mut admin = connect_controller(bootstrap).await?;
    let version = admin.version::<CreateTopicsRequest>(2..=7)?;
    let topics = names
        .iter()
        .map(|name| {
            CreatableTopic::default()
                .with_name(topic_name(name))
                .with_num_partitions(partitions as i32)
                .with_replication_factor(replication_factor.unwrap_or(-1))
                .with_configs(
                    configs
                        .iter()
                        .map(|(k, v)| {
                            CreatableTopicConfig::default()
                                .with_name(StrBytes::from_string(k.clone()))
                                .with_value(Some(StrBytes::from_string(v.clone())))
                        })
                        .collect(),
                )
        })
        .collect();
    let request = CreateTopicsRequest::default()
        .with_topics(topics)
        .with_timeout_ms(30_000);
    let response = admin.call(&request, version).await?;
    for topic in &response.topics {
        if topic.error_code != ERROR_NONE {
            let message = topic
                .error_message
                .as_ref()
                .map(|m| m.to_string())
                .unwrap_or_default();
            bail!(
                "the broker refused to create topic `{}`: {} {message}",
                topic.name.0,
                error_name(topic.error_code)
            );
        }
    }
    // Bounded wait for every partition to have a leader.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut conn = connect(bootstrap).await?;
    loop {
        match leaders(&mut conn, names).await {
            Ok(found) if found.partitions.len() == names.len() * partitions => return Ok(found),
            Ok(_) | Err(_) if Instant::now() < deadline => {
                glommio::timer::sleep(Duration::from_millis(50)).await;
            }
            Ok(found) => bail!(
                "only {} partitions have leaders after 30 s",
                found.partitions.len()
            ),
            Err(e) => return Err(e.into()),
        }
    }
}

pub async fn delete_topics(bootstrap: &str, names: &[String]) -> Result<()> {
    let mut admin = connect_controller(bootstrap).await?;
    let version = admin.version::<DeleteTopicsRequest>(1..=6)?;
    let mut request = DeleteTopicsRequest::default().with_timeout_ms(30_000);
    if version >= 6 {
        request = request.with_topics(
            names
                .iter()
                .map(|n| DeleteTopicState::default().with_name(Some(topic_name(n))))
                .collect(),
        );
    } else {
        request = request.with_topic_names(names.iter().map(|n| topic_name(n)).collect());
    }
    let response = admin.call(&request, version).await?;
    for topic in &response.responses {
        if topic.error_code != ERROR_NONE {
            bail!(
                "deleting topic `{}`: {}",
                topic
                    .name
                    .as_ref()
                    .map(|n| n.0.to_string())
                    .unwrap_or_default(),
                error_name(topic.error_code)
            );
        }
    }
    Ok(())
}

fn kafka_compression(c: Compression) -> KafkaCompression {
    match c {
        Compression::None => KafkaCompression::None,
        Compression::Gzip => KafkaCompression::Gzip,
        Compression::Snappy => KafkaCompression::Snappy,
        Compression::Lz4 => KafkaCompression::Lz4,
        Compression::Zstd => KafkaCompression::Zstd,
    }
}

/// A record batch's header (v2), before its records.
const BATCH_HEAD_BYTES: usize = 61;

/// The most framing one record (v2) adds to its key and value: length,
/// attributes, timestamp and offset deltas, key and value lengths, header
/// count, as varints.
const RECORD_FRAMING_MAX: usize = 32;

/// The most bytes an uncompressed batch of `records` records holding
/// `payload` key and value bytes encodes to (to size its buffer).
pub fn batch_bytes_bound(payload: usize, records: usize) -> usize {
    BATCH_HEAD_BYTES + payload + RECORD_FRAMING_MAX * records
}

/// Bytes of a zigzag varint.
fn varint_len(value: i64) -> usize {
    let zigzag = ((value << 1) ^ (value >> 63)) as u64;
    (64 - zigzag.max(1).leading_zeros() as usize).div_ceil(7)
}

/// The exact bytes record `index` of a batch from [`encode_batch`] takes
/// (v2, uncompressed: the batch's timestamp, no headers), as Kafka's
/// producer sizes a record to decide whether it still fits a batch.
pub fn record_bytes(index: usize, key_len: Option<usize>, value_len: usize) -> usize {
    let key = key_len.map_or(varint_len(-1), |len| varint_len(len as i64) + len);
    let body = 1 // attributes
        + varint_len(0) // timestamp delta
        + varint_len(index as i64) // offset delta
        + key
        + varint_len(value_len as i64)
        + value_len
        + varint_len(0); // header count
    varint_len(body as i64) + body
}

/// The bytes of a batch's header, before its first record.
pub const fn batch_head_bytes() -> usize {
    BATCH_HEAD_BYTES
}

/// How many records with keys of `key_len` and values of `value_len` bytes
/// fill an uncompressed batch of at most `batch_bytes` (at least one).
pub fn records_per_batch(batch_bytes: usize, key_len: Option<usize>, value_len: usize) -> usize {
    let mut size = BATCH_HEAD_BYTES;
    let mut count = 0;
    loop {
        size += record_bytes(count, key_len, value_len);
        if size > batch_bytes {
            return count.max(1);
        }
        count += 1;
    }
}

/// Encodes one record batch. `first_sequence` is the batch's base
/// sequence for an idempotent producer (-1 producer id otherwise).
pub fn encode_batch(
    values: Vec<Bytes>,
    keys: Vec<Option<Bytes>>,
    timestamp_ms: i64,
    producer: (i64, i16),
    first_sequence: i32,
    compression: Compression,
) -> Result<Bytes> {
    // Sized up front: a batch grown from an empty buffer copies itself
    // once per doubling.
    let payload: usize = values.iter().map(Bytes::len).sum::<usize>()
        + keys.iter().flatten().map(Bytes::len).sum::<usize>();
    let capacity = batch_bytes_bound(payload, values.len());
    let records: Vec<Record> = values
        .into_iter()
        .zip(keys)
        .enumerate()
        .map(|(i, (value, key))| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: producer.0,
            producer_epoch: producer.1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // The encoder starts a new batch whenever offset - sequence
            // changes, so sequences follow offsets even without idempotence.
            sequence: first_sequence.max(0).wrapping_add(i as i32),
            timestamp: timestamp_ms,
            key,
            value: Some(value),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::with_capacity(capacity);
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression: kafka_compression(compression),
        },
    )
    .map_err(|e| anyhow!("encoding a record batch: {e}"))?;
    Ok(buf.freeze())
}

pub fn produce_request(acks: i16, batches: &[(String, i32, Bytes)]) -> ProduceRequest {
    let mut topics: Vec<TopicProduceData> = Vec::new();
    for (topic, partition, records) in batches {
        let data = PartitionProduceData::default()
            .with_index(*partition)
            .with_records(Some(records.clone()));
        match topics.iter_mut().find(|t| t.name.0.as_str() == topic) {
            Some(t) => t.partition_data.push(data),
            None => topics.push(
                TopicProduceData::default()
                    .with_name(topic_name(topic))
                    .with_partition_data(vec![data]),
            ),
        }
    }
    ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(30_000)
        .with_topic_data(topics)
}

/// Per-partition outcome of a produce response: error name or success.
pub fn produce_errors(response: &ProduceResponse) -> HashMap<(String, i32), Option<String>> {
    let mut out = HashMap::new();
    for topic in &response.responses {
        for p in &topic.partition_responses {
            let error = (p.error_code != ERROR_NONE).then(|| error_name(p.error_code));
            out.insert((topic.name.0.to_string(), p.index), error);
        }
    }
    out
}

pub fn fetch_request(
    partitions: &[((String, i32), i64)],
    max_wait: Duration,
    partition_bytes_max: i32,
    bytes_max: i32,
) -> FetchRequest {
    let mut topics: Vec<FetchTopic> = Vec::new();
    for ((topic, partition), offset) in partitions {
        let p = FetchPartition::default()
            .with_partition(*partition)
            .with_fetch_offset(*offset)
            .with_partition_max_bytes(partition_bytes_max)
            .with_current_leader_epoch(-1)
            .with_log_start_offset(-1);
        match topics.iter_mut().find(|t| t.topic.0.as_str() == topic) {
            Some(t) => t.partitions.push(p),
            None => topics.push(
                FetchTopic::default()
                    .with_topic(topic_name(topic))
                    .with_partitions(vec![p]),
            ),
        }
    }
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(max_wait.as_millis() as i32)
        .with_min_bytes(1)
        .with_max_bytes(bytes_max)
        .with_isolation_level(0)
        .with_session_id(0)
        .with_session_epoch(-1)
        .with_topics(topics)
}

/// A record as the consumer sees it.
pub struct Consumed {
    pub value: Bytes,
}

/// Decodes the record batches of one fetched partition (any compression),
/// calling `each` for every record at or after `from`. Returns the offset
/// after the last batch.
/// The whole batches at the start of a fetched record set, in order; a
/// partial batch at the end of a fetch response is normal and left out.
fn whole_batches(records: &Bytes) -> impl Iterator<Item = Bytes> + '_ {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        let rest = records.get(at..)?;
        if rest.len() < protocol::batch::LOG_OVERHEAD {
            return None;
        }
        let size = protocol::batch::batch_size(rest)?;
        if size > rest.len() {
            return None;
        }
        at += size;
        Some(records.slice(at - size..at))
    })
}

pub fn decode_records(
    records: Bytes,
    from: i64,
    mut each: impl FnMut(Consumed),
) -> Result<Option<i64>> {
    let mut next = None;
    for mut batch in whole_batches(&records) {
        let header = protocol::batch::validate(&batch).context("fetched batch")?;
        next = Some(header.last_offset() + 1);
        if header.is_control() {
            continue;
        }
        if header.compression() == protocol::batch::Compression::None {
            let view = protocol::batch::RecordBatch::new(batch)?;
            for record in view.records()? {
                let record = record?;
                if record.offset >= from {
                    each(Consumed {
                        value: record.value.unwrap_or_default(),
                    });
                }
            }
        } else {
            let set = RecordBatchDecoder::decode(&mut batch)
                .map_err(|e| anyhow!("decoding a batch: {e}"))?;
            for record in set.records {
                if record.offset >= from {
                    each(Consumed {
                        value: record.value.unwrap_or_default(),
                    });
                }
            }
        }
    }
    Ok(next)
}

/// The offset after the last whole batch of a fetched record set (`None`
/// when it holds none), read from the batch headers only: enough to ask
/// for the next records before these are decoded.
pub fn next_fetch_offset(records: &Bytes) -> Option<i64> {
    whole_batches(records)
        .last()
        .and_then(|batch| protocol::batch::BatchHeader::parse(&batch).ok())
        .map(|header| header.last_offset() + 1)
}

pub fn fetch_partitions(response: &FetchResponse) -> Vec<((String, i32), i16, Option<Bytes>)> {
    let mut out = Vec::new();
    for topic in &response.responses {
        for p in &topic.partitions {
            out.push((
                (topic.topic.0.to_string(), p.partition_index),
                p.error_code,
                p.records.clone(),
            ));
        }
    }
    out
}

/// The partition the Java client's default partitioner picks for `key`.
pub fn partition_for_key(key: &[u8], partitions: usize) -> i32 {
    protocol::partitioner::partition_index_for_key(key, partitions) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch encodes to exactly its header and the records' sizes as
    /// `record_bytes` counts them, whatever the record count and sizes
    /// (offset deltas of 1 to 3 bytes, keyed or not, large values), and
    /// never past the buffer's bound.
    #[test]
    fn record_bytes_counts_what_the_encoder_writes() {
        for (records, value_len, keyed) in [
            (1, 0, false),
            (1, 1_000_000, true),
            (100, 100, true),
            (20_000, 100, false),
            (20_000, 10, true),
            (3, 70_000, true),
        ] {
            let values: Vec<Bytes> = (0..records)
                .map(|i| Bytes::from(vec![i as u8; value_len]))
                .collect();
            let keys: Vec<Option<Bytes>> = (0..records)
                .map(|i| keyed.then(|| Bytes::from(format!("key-{}", i % 1024))))
                .collect();
            let expected = batch_head_bytes()
                + keys
                    .iter()
                    .enumerate()
                    .map(|(i, k)| record_bytes(i, k.as_ref().map(Bytes::len), value_len))
                    .sum::<usize>();
            let payload = values.iter().map(Bytes::len).sum::<usize>()
                + keys.iter().flatten().map(Bytes::len).sum::<usize>();
            let batch = encode_batch(
                values,
                keys,
                1_700_000_000_000,
                (7, 0),
                5,
                Compression::None,
            )
            .unwrap();
            assert_eq!(
                batch.len(),
                expected,
                "{records} records of {value_len} bytes"
            );
            assert!(batch.len() <= batch_bytes_bound(payload, records));
        }
    }

    /// As many records as fit a batch, and not one more: a closed-loop
    /// producer that takes that many per round sends one full batch per
    /// partition, not a full one and a straggler.
    #[test]
    fn records_per_batch_fill_a_batch_exactly() {
        for (batch_bytes, key_len, value_len) in [
            (131_072, None, 1024),
            (131_072, None, 100),
            (16_384, Some(8), 100),
            (1 << 20, None, 108),
            (65_536, None, 65_000),
        ] {
            let n = records_per_batch(batch_bytes, key_len, value_len);
            let size = |count: usize| {
                batch_head_bytes()
                    + (0..count)
                        .map(|i| record_bytes(i, key_len, value_len))
                        .sum::<usize>()
            };
            assert!(size(n) <= batch_bytes, "{batch_bytes}: {n}");
            assert!(size(n + 1) > batch_bytes, "{batch_bytes}: {n}");
        }
        // A record larger than the batch still goes, alone.
        assert_eq!(records_per_batch(1024, None, 4096), 1);
    }

    #[test]
    fn encoded_batches_decode_back() {
        let values: Vec<Bytes> = (0..5).map(|i| Bytes::from(vec![i as u8; 40])).collect();
        let keys: Vec<_> = (0..5).map(|i| Some(Bytes::from(format!("k{i}")))).collect();
        for compression in [Compression::None, Compression::Lz4, Compression::Zstd] {
            let batch = encode_batch(
                values.clone(),
                keys.clone(),
                1_700_000_000_000,
                (-1, -1),
                -1,
                compression,
            )
            .unwrap();
            protocol::batch::validate(&batch).expect("one valid batch");
            let mut seen = Vec::new();
            let next = decode_records(batch, 2, |c| seen.push(c.value)).unwrap();
            assert_eq!(next, Some(5));
            assert_eq!(seen, values[2..].to_vec());
        }
    }

    #[test]
    fn the_next_fetch_offset_skips_a_partial_last_batch() {
        let values: Vec<Bytes> = (0..3).map(|i| Bytes::from(vec![i as u8; 40])).collect();
        let batch = |base: i64| {
            let mut bytes = encode_batch(
                values.clone(),
                vec![None; 3],
                1_700_000_000_000,
                (-1, -1),
                -1,
                Compression::None,
            )
            .unwrap()
            .to_vec();
            protocol::batch::set_base_offset(&mut bytes, base);
            bytes
        };
        let mut set = batch(10);
        set.extend_from_slice(&batch(13));
        let whole = Bytes::from(set.clone());
        assert_eq!(next_fetch_offset(&whole), Some(16));
        // A fetch may end inside a batch: only whole batches count, and
        // decoding agrees with the headers.
        let third = batch(16);
        set.extend_from_slice(&third[..third.len() / 2]);
        let cut = Bytes::from(set);
        assert_eq!(next_fetch_offset(&cut), Some(16));
        let mut seen = 0;
        assert_eq!(decode_records(cut, 0, |_| seen += 1).unwrap(), Some(16));
        assert_eq!(seen, 6);
        assert_eq!(next_fetch_offset(&Bytes::new()), None);
    }
}
