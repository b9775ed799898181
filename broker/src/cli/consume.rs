//! `strom consume TOPIC`: fetches records and writes one line per record
//! to stdout, the value as raw bytes, optionally preceded by partition,
//! offset, timestamp, headers and key (in Kafka's console-consumer format).
//!
//! Offsets are the tool's own: `--offset`, the start of the log
//! (`--from-beginning`) or its end (default). With `--group` the tool is a
//! group member instead (`cli::group::GroupMember`): the group assigns the
//! partitions and the committed offsets are where it starts and what it
//! advances. Compressed batches
//! are decompressed; control batches (transaction markers) are skipped.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::{bail, Context};
use bytes::Bytes;
use clap::Args;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{ApiKey, BrokerId, FetchRequest};
use kafka_protocol::records::RecordBatchDecoder;
use protocol::batch::{self, Compression, RecordBatch};
use protocol::client::check_error;

use super::group::GroupMember;
use super::{list_offsets, partitions, topic_name, ConnectArgs};

const FETCH_VERSIONS: std::ops::RangeInclusive<i16> = 4..=12;
/// Long-poll wait per fetch; bounded by the connection's request timeout.
const FETCH_WAIT_MS_MAX: i32 = 500;
const FETCH_BYTES_MAX: i32 = 50 << 20;
const FETCH_PARTITION_BYTES_MAX: i32 = 1 << 20;
const LIST_OFFSETS_EARLIEST: i64 = -2;
const LIST_OFFSETS_LATEST: i64 = -1;

#[derive(Args, Debug)]
pub struct ConsumeArgs {
    /// Topic to read.
    topic: String,
    /// Start at the first record still stored [default: only new records].
    #[arg(long, conflicts_with = "offset")]
    from_beginning: bool,
    /// Read only this partition [default: every partition].
    #[arg(long, value_name = "N")]
    partition: Option<i32>,
    /// Start at this offset (in every partition read).
    #[arg(long, value_name = "N")]
    offset: Option<i64>,
    /// Consume as a member of this consumer group: read the partitions the
    /// group assigns, start from its committed offsets, commit as records
    /// are printed.
    #[arg(long, value_name = "GROUP", conflicts_with_all = ["offset", "partition"])]
    group: Option<String>,
    /// Exit after printing this many records.
    #[arg(long, value_name = "N")]
    max_messages: Option<u64>,
    /// Exit once every partition is read up to its end (the high watermark
    /// when the partition was last fetched) instead of waiting for more.
    #[arg(long, short = 'e')]
    exit_at_end: bool,
    /// Print the key before the value ("null" for none).
    #[arg(long)]
    print_key: bool,
    /// Print the headers as KEY:VALUE,... before the key ("NO_HEADERS" if none).
    #[arg(long)]
    print_headers: bool,
    /// Print CreateTime:MS (or LogAppendTime:MS) first.
    #[arg(long)]
    print_timestamp: bool,
    /// Print Partition:N before the offset.
    #[arg(long)]
    print_partition: bool,
    /// Print Offset:N before the timestamp.
    #[arg(long)]
    print_offset: bool,
    /// Text between printed fields.
    #[arg(long, value_name = "SEP", default_value = "\t")]
    field_separator: String,
    #[command(flatten)]
    connect: ConnectArgs,
}

/// A record as printed.
struct Printed {
    offset: i64,
    timestamp: i64,
    log_append_time: bool,
    key: Option<Bytes>,
    value: Option<Bytes>,
    headers: Vec<(Bytes, Option<Bytes>)>,
}

pub async fn run(args: ConsumeArgs) -> anyhow::Result<()> {
    if args.offset.is_some_and(|offset| offset < 0) {
        bail!("--offset must be 0 or more");
    }
    let mut connection = args.connect.connect().await?;
    let mut member = match &args.group {
        Some(group) => Some(GroupMember::join(&args.connect, group, &args.topic).await?),
        None => None,
    };
    let all = match &member {
        Some(member) => member.assigned().to_vec(),
        None => partitions(&mut connection, &args.topic, false).await?,
    };
    let chosen = match args.partition {
        Some(partition) if all.contains(&partition) => vec![partition],
        Some(partition) => bail!(
            "topic {} has no partition {partition} (it has {})",
            args.topic,
            all.len()
        ),
        None => all,
    };
    let mut positions: BTreeMap<i32, i64> = match (args.offset, member.as_mut()) {
        (_, Some(member)) => member.start_positions(args.from_beginning).await?,
        (Some(offset), None) => chosen.iter().map(|&p| (p, offset)).collect(),
        (None, None) => {
            let timestamp = if args.from_beginning {
                LIST_OFFSETS_EARLIEST
            } else {
                LIST_OFFSETS_LATEST
            };
            list_offsets(&mut connection, &args.topic, &chosen, timestamp).await?
        }
    };
    let mut printed = 0u64;
    if args.max_messages == Some(0) {
        return Ok(());
    }
    let version = connection.version::<FetchRequest>(FETCH_VERSIONS)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    // Partitions known to be read to their end (for --exit-at-end).
    let mut at_end: BTreeMap<i32, bool> = chosen.iter().map(|&p| (p, false)).collect();
    loop {
        let request = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(FETCH_WAIT_MS_MAX)
            .with_min_bytes(1)
            .with_max_bytes(FETCH_BYTES_MAX)
            .with_isolation_level(0)
            .with_session_id(0)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(topic_name(&args.topic))
                .with_partitions(
                    positions
                        .iter()
                        .map(|(&partition, &offset)| {
                            FetchPartition::default()
                                .with_partition(partition)
                                .with_current_leader_epoch(-1)
                                .with_fetch_offset(offset)
                                .with_last_fetched_epoch(-1)
                                .with_log_start_offset(-1)
                                .with_partition_max_bytes(FETCH_PARTITION_BYTES_MAX)
                        })
                        .collect(),
                )]);
        let response = connection.call(&request, version).await?;
        check_error(ApiKey::Fetch, response.error_code, None).context("fetch failed")?;
        for topic in &response.responses {
            for partition in &topic.partitions {
                let index = partition.partition_index;
                check_error(ApiKey::Fetch, partition.error_code, None).with_context(|| {
                    format!(
                        "cannot fetch {}-{index} at offset {}",
                        args.topic,
                        positions.get(&index).copied().unwrap_or(-1)
                    )
                })?;
                let Some(position) = positions.get_mut(&index) else {
                    continue;
                };
                let records = partition.records.clone().unwrap_or_default();
                for result in batch::split_batches(records) {
                    // A fetch may end inside a batch; the next fetch gets it whole.
                    let Ok(batch) = result else { break };
                    let next = batch.header().last_offset() + 1;
                    if batch.header().is_control() {
                        *position = (*position).max(next);
                        continue;
                    }
                    for record in decode(&batch)? {
                        if record.offset < *position {
                            continue;
                        }
                        print_record(&mut out, &args, index, &record)
                            .context("cannot write to stdout")?;
                        *position = record.offset + 1;
                        printed += 1;
                        if args.max_messages.is_some_and(|max| printed >= max) {
                            out.flush().context("cannot write to stdout")?;
                            if let Some(member) = member.take() {
                                member.finish(&positions).await?;
                            }
                            return Ok(());
                        }
                    }
                    *position = (*position).max(next);
                }
                at_end.insert(index, *position >= partition.high_watermark);
            }
        }
        out.flush().context("cannot write to stdout")?;
        if let Some(member) = member.as_mut() {
            member.commit(&positions).await?;
        }
        if args.exit_at_end && at_end.values().all(|&end| end) {
            if let Some(member) = member.take() {
                member.finish(&positions).await?;
            }
            return Ok(());
        }
        if let Some(member) = member.as_mut().filter(|m| m.rebalance_needed()) {
            member.rejoin().await?;
            positions = member.start_positions(args.from_beginning).await?;
            at_end = positions.keys().map(|&p| (p, false)).collect();
        }
    }
}

/// The records of one batch, decompressing when needed.
fn decode(batch: &RecordBatch) -> anyhow::Result<Vec<Printed>> {
    let header = batch.header();
    let log_append_time = header.is_log_append_time();
    if header.compression() == Compression::None {
        return batch
            .records()?
            .map(|record| {
                let record = record?;
                Ok(Printed {
                    offset: record.offset,
                    timestamp: if log_append_time {
                        header.max_timestamp
                    } else {
                        record.timestamp
                    },
                    log_append_time,
                    key: record.key,
                    value: record.value,
                    headers: record
                        .headers
                        .into_iter()
                        .map(|h| (h.key, h.value))
                        .collect(),
                })
            })
            .collect();
    }
    let mut bytes = batch.bytes().clone();
    let set = RecordBatchDecoder::decode(&mut bytes)
        .map_err(|e| anyhow::anyhow!("cannot decode a compressed batch: {e}"))?;
    Ok(set
        .records
        .into_iter()
        .map(|record| Printed {
            offset: record.offset,
            timestamp: record.timestamp,
            log_append_time,
            key: record.key,
            value: record.value,
            headers: record
                .headers
                .into_iter()
                .map(|(k, v)| (Bytes::copy_from_slice(k.as_bytes()), v))
                .collect(),
        })
        .collect())
}

fn print_record(
    out: &mut impl Write,
    args: &ConsumeArgs,
    partition: i32,
    record: &Printed,
) -> std::io::Result<()> {
    let separator = args.field_separator.as_bytes();
    if args.print_partition {
        write!(out, "Partition:{partition}")?;
        out.write_all(separator)?;
    }
    if args.print_offset {
        write!(out, "Offset:{}", record.offset)?;
        out.write_all(separator)?;
    }
    if args.print_timestamp {
        let kind = if record.log_append_time {
            "LogAppendTime"
        } else {
            "CreateTime"
        };
        write!(out, "{kind}:{}", record.timestamp)?;
        out.write_all(separator)?;
    }
    if args.print_headers {
        if record.headers.is_empty() {
            out.write_all(b"NO_HEADERS")?;
        }
        for (i, (key, value)) in record.headers.iter().enumerate() {
            if i > 0 {
                out.write_all(b",")?;
            }
            out.write_all(key)?;
            out.write_all(b":")?;
            out.write_all(value.as_deref().unwrap_or(b"null"))?;
        }
        out.write_all(separator)?;
    }
    if args.print_key {
        out.write_all(record.key.as_deref().unwrap_or(b"null"))?;
        out.write_all(separator)?;
    }
    out.write_all(record.value.as_deref().unwrap_or(b"null"))?;
    out.write_all(b"\n")
}
