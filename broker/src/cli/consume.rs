//! `strom consume TOPIC`: fetches records and writes one line per record
//! to stdout, the value as raw bytes, optionally preceded by partition,
//! offset, timestamp, headers and key (in Kafka's console-consumer format).
//!
//! Offsets are the tool's own: `--offset`, the start of the log
//! (`--from-beginning`), the first record at or after a time
//! (`--from-timestamp`, ListOffsets by timestamp) or the end (default). With `--group` the tool is a
//! group member instead (`cli::group::GroupMember`): the group assigns the
//! partitions and the committed offsets are where it starts and what it
//! advances. Compressed batches
//! are decompressed; control batches (transaction markers) are skipped.
//!
//! SIGINT/SIGTERM and a closed stdout end it cleanly (a member commits and
//! leaves its group; on a closed stdout it leaves without committing what
//! may not have been read); a lost broker is reconnected to, a bounded number of
//! times, resuming where the tool was (a member: at its group's commits).

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use bytes::Bytes;
use clap::Args;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{ApiKey, BrokerId, FetchRequest};
use kafka_protocol::records::RecordBatchDecoder;
use protocol::batch::{self, Compression, RecordBatch};
use protocol::client::{check_error, Connection};
use protocol::kafka_protocol::error::ResponseError;
use signal_hook::consts::{SIGINT, SIGTERM};

use super::group::{parse_datetime, GroupMember};
use super::retry::{settled_offsets, Retry};
use protocol::admin::{partitions, topic_name, Router};

use super::ConnectArgs;

const FETCH_VERSIONS: std::ops::RangeInclusive<i16> = 4..=12;
/// Long-poll wait per fetch (half the request timeout when that is less).
const FETCH_WAIT_MS_MAX: i32 = 500;
const FETCH_BYTES_MAX: i32 = 50 << 20;
const FETCH_PARTITION_BYTES_MAX: i32 = 1 << 20;
const LIST_OFFSETS_EARLIEST: i64 = -2;
const LIST_OFFSETS_LATEST: i64 = -1;
/// Reconnects in a row without a successful fetch before giving up
/// (with the backoff, about half a minute for a broker to come back).
const RECONNECT_ATTEMPTS_MAX: u32 = 30;
const RECONNECT_BACKOFF_MS: u64 = 1_000;
/// How often a reconnect wait looks for SIGINT/SIGTERM.
const STOP_POLL_MS: u64 = 100;
const _: () = assert!(RECONNECT_BACKOFF_MS >= STOP_POLL_MS);
/// Exit status on a second SIGINT/SIGTERM (128 + SIGINT, as shells report it).
const EXIT_SECOND_SIGNAL: i32 = 130;
/// Kafka errors a broker gives while it starts again (UNKNOWN_TOPIC_OR_PARTITION
/// while its partitions load, LEADER_NOT_AVAILABLE,
/// NOT_LEADER_OR_FOLLOWER, COORDINATOR_LOAD_IN_PROGRESS,
/// COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR): worth reconnecting.
const RETRIABLE_AFTER_RESTART: [ResponseError; 6] = [
    ResponseError::UnknownTopicOrPartition,
    ResponseError::LeaderNotAvailable,
    ResponseError::NotLeaderOrFollower,
    ResponseError::CoordinatorLoadInProgress,
    ResponseError::CoordinatorNotAvailable,
    ResponseError::NotCoordinator,
];

#[derive(Args, Debug)]
pub struct ConsumeArgs {
    /// Topic to read.
    topic: String,
    /// Start at the first record still stored [default: only new records].
    #[arg(long, conflicts_with_all = ["offset", "from_timestamp"])]
    from_beginning: bool,
    /// Start, in every partition read, at the first record whose timestamp
    /// is at or after TS (ListOffsets by timestamp; a partition with none
    /// that late starts at its end): milliseconds since the epoch, or
    /// ISO-8601 YYYY-MM-DDTHH:MM:SS[.mmm] with an optional zone: Z,
    /// ±HH:MM, ±HHMM or ±HH (none: UTC).
    #[arg(long, value_name = "TS", conflicts_with_all = ["offset", "group"])]
    from_timestamp: Option<String>,
    /// Read only this partition [default: every partition].
    #[arg(long, value_name = "N")]
    partition: Option<i32>,
    /// Start at this offset (in every partition read).
    #[arg(long, value_name = "N")]
    offset: Option<i64>,
    /// Consume as a member of this consumer group: read the partitions the
    /// group assigns, start from its committed offsets, commit as records
    /// are printed; on exit (also on SIGINT/SIGTERM) commit and leave the
    /// group (on a closed stdout, leave without committing).
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
    /// Print Partition:N after the timestamp, before the offset.
    #[arg(long)]
    print_partition: bool,
    /// Print Offset:N before the headers, key and value.
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

/// Raised by SIGINT or SIGTERM: the tool commits, leaves its group and
/// exits 0. A second signal exits at once (status 130).
struct StopSignal(Arc<AtomicBool>);

impl StopSignal {
    fn install() -> anyhow::Result<StopSignal> {
        let raised = Arc::new(AtomicBool::new(false));
        for signal in [SIGINT, SIGTERM] {
            // Registered first, so it sees the flag as the first signal left it.
            signal_hook::flag::register_conditional_shutdown(
                signal,
                EXIT_SECOND_SIGNAL,
                raised.clone(),
            )
            .context("cannot handle SIGINT/SIGTERM")?;
            signal_hook::flag::register(signal, raised.clone())
                .context("cannot handle SIGINT/SIGTERM")?;
        }
        Ok(StopSignal(raised))
    }

    fn raised(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// What survives a lost connection: where each partition is (without a
/// group; a member restarts from its group's committed offsets) and how
/// many records were printed.
#[derive(Default)]
struct Progress {
    positions: Option<BTreeMap<i32, i64>>,
    printed: u64,
    /// Whether a fetch has succeeded since the last reconnect.
    fetched: bool,
    /// Whether a fetch has ever succeeded.
    ever_fetched: bool,
}

pub async fn run(args: ConsumeArgs) -> anyhow::Result<()> {
    if args.offset.is_some_and(|offset| offset < 0) {
        bail!("--offset must be 0 or more");
    }
    if let Some(text) = &args.from_timestamp {
        parse_datetime(text).context("bad --from-timestamp")?;
    }
    if args.max_messages == Some(0) {
        return Ok(());
    }
    let stop = StopSignal::install()?;
    let mut progress = Progress::default();
    let mut attempts = 0u32;
    loop {
        let outcome = session(&args, &stop, &mut progress).await;
        let error = match outcome {
            Ok(()) => return Ok(()),
            // Failing before the first fetch (no such topic, no broker)
            // is the user's to fix: no retries.
            Err(error) if progress.ever_fetched && connection_lost(&error) => error,
            Err(error) => return Err(error),
        };
        if std::mem::take(&mut progress.fetched) {
            attempts = 0;
        }
        attempts += 1;
        if attempts > RECONNECT_ATTEMPTS_MAX {
            return Err(error.context(format!(
                "gave up after {RECONNECT_ATTEMPTS_MAX} attempts to reconnect"
            )));
        }
        eprintln!(
            "strom consume: {error:#}; reconnecting in {RECONNECT_BACKOFF_MS} ms \
             (attempt {attempts} of {RECONNECT_ATTEMPTS_MAX})"
        );
        for _ in 0..RECONNECT_BACKOFF_MS / STOP_POLL_MS {
            if stop.raised() {
                return Ok(());
            }
            glommio::timer::sleep(Duration::from_millis(STOP_POLL_MS)).await;
        }
    }
}

/// Where each of `chosen` starts without `--offset`: the log start, the
/// first record at or after `--from-timestamp` (none that late: the end)
/// or the end, from each partition's leader; retriable answers (a new
/// partition's leader that does not know it yet) are asked again within
/// `--timeout-ms`.
async fn start_offsets(
    connection: &mut Connection,
    args: &ConsumeArgs,
    chosen: &[i32],
) -> anyhow::Result<BTreeMap<i32, i64>> {
    let timestamp = match (&args.from_timestamp, args.from_beginning) {
        (Some(text), _) => parse_datetime(text).context("bad --from-timestamp")?,
        (None, true) => LIST_OFFSETS_EARLIEST,
        (None, false) => LIST_OFFSETS_LATEST,
    };
    let mut retry = Retry::new(&args.connect);
    let mut starts = offsets_of(connection, &args.topic, chosen, timestamp, &mut retry).await?;
    // -1: no record that late; those partitions start at their end.
    let late: Vec<i32> = starts
        .iter()
        .filter(|(_, offset)| **offset < 0)
        .map(|(partition, _)| *partition)
        .collect();
    if !late.is_empty() {
        let ends = offsets_of(
            connection,
            &args.topic,
            &late,
            LIST_OFFSETS_LATEST,
            &mut retry,
        )
        .await?;
        starts.extend(ends);
    }
    Ok(starts)
}

/// ListOffsets of some partitions of `topic` at `timestamp` (see
/// [`settled_offsets`]); any partition's failure fails it.
async fn offsets_of(
    connection: &mut Connection,
    topic: &str,
    partitions: &[i32],
    timestamp: i64,
    retry: &mut Retry,
) -> anyhow::Result<BTreeMap<i32, i64>> {
    let wanted: Vec<(String, i32)> = partitions.iter().map(|&p| (topic.to_string(), p)).collect();
    let mut offsets = BTreeMap::new();
    for ((topic, partition), answer) in
        settled_offsets(connection, &wanted, timestamp, retry).await?
    {
        match answer {
            Ok(offset) => offsets.insert(partition, offset),
            Err(failure) => bail!("ListOffsets of {topic}-{partition} failed: {failure}"),
        };
    }
    Ok(offsets)
}

/// Whether the broker went away (or is not back yet): worth reconnecting.
fn connection_lost(error: &anyhow::Error) -> bool {
    use protocol::client::ClientError;
    error.chain().any(|cause| {
        cause
            .downcast_ref::<ClientError>()
            .is_some_and(|error| match error {
                ClientError::Unreachable { .. }
                | ClientError::ConnectTimeout { .. }
                | ClientError::Timeout { .. }
                | ClientError::Io { .. }
                | ClientError::Closed { .. }
                | ClientError::Broken { .. }
                | ClientError::NoLeader { .. } => true,
                _ => error
                    .kafka_error()
                    .is_some_and(|e| RETRIABLE_AFTER_RESTART.contains(&e)),
            })
    })
}

/// One connection's worth of consuming; returns Ok when the tool is done.
async fn session(
    args: &ConsumeArgs,
    stop: &StopSignal,
    progress: &mut Progress,
) -> anyhow::Result<()> {
    // Reconnecting, the loop in `run` paces and counts the attempts.
    let mut connection = if progress.ever_fetched {
        args.connect.connect_once().await?
    } else {
        args.connect.connect().await?
    };
    let mut member = match &args.group {
        Some(group) => Some(GroupMember::join(&args.connect, group, &args.topic).await?),
        None => None,
    };
    let mut positions: BTreeMap<i32, i64> = match (progress.positions.clone(), member.as_mut()) {
        (_, Some(member)) => member.start_positions(args.from_beginning).await?,
        (Some(positions), None) => positions,
        (None, None) => {
            let all = partitions(&mut connection, &args.topic, false).await?;
            let chosen = match args.partition {
                Some(partition) if all.contains(&partition) => vec![partition],
                Some(partition) => bail!(
                    "topic {} has no partition {partition} (it has {})",
                    args.topic,
                    all.len()
                ),
                None => all,
            };
            match args.offset {
                Some(offset) => chosen.iter().map(|&p| (p, offset)).collect(),
                None => start_offsets(&mut connection, args, &chosen).await?,
            }
        }
    };
    let mut router = Router::discover(&mut connection, std::slice::from_ref(&args.topic)).await?;
    let mut leaders = Leaders {
        bootstrap: &mut connection,
        router: &mut router,
    };
    let outcome = fetch_loop(
        args,
        stop,
        progress,
        &mut leaders,
        &mut member,
        &mut positions,
    )
    .await;
    if member.is_none() {
        progress.positions = Some(positions.clone());
    }
    match (outcome, member.take()) {
        (Ok(()), Some(member)) => member.finish(&positions).await,
        // Nobody reads stdout any more: done, as if the reader had asked
        // to stop; what was fetched last may not have been read, so a
        // member leaves without committing it.
        (Err(error), Some(member)) if super::is_broken_pipe(&error) => member.leave().await,
        (Err(error), _) if super::is_broken_pipe(&error) => Ok(()),
        (outcome, _) => outcome,
    }
}

/// The connections fetches go on: each partition's leader's.
struct Leaders<'a> {
    bootstrap: &'a mut Connection,
    router: &'a mut Router,
}

/// Fetches and prints until done (Ok), stdout fails or a connection
/// breaks or a leader moves (Err). Each round sends one fetch to every
/// leader of a partition read, then prints the answers as they come.
/// `positions` is kept current with what was printed.
async fn fetch_loop(
    args: &ConsumeArgs,
    stop: &StopSignal,
    progress: &mut Progress,
    leaders: &mut Leaders<'_>,
    member: &mut Option<GroupMember>,
    positions: &mut BTreeMap<i32, i64>,
) -> anyhow::Result<()> {
    // Half the request timeout at most, so a long poll never times out.
    let fetch_wait_ms = i32::try_from(args.connect.timeout_ms / 2)
        .unwrap_or(i32::MAX)
        .clamp(1, FETCH_WAIT_MS_MAX);
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    // Partitions known to be read to their end (for --exit-at-end).
    let mut at_end: BTreeMap<i32, bool> = positions.keys().map(|&p| (p, false)).collect();
    loop {
        if stop.raised() {
            return Ok(());
        }
        let by_leader = leaders.router.by_leader(
            positions
                .iter()
                .map(|(&partition, &offset)| (args.topic.as_str(), partition, offset)),
        )?;
        let mut pending = Vec::with_capacity(by_leader.len());
        for (leader, wanted) in by_leader {
            let request = FetchRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_max_wait_ms(fetch_wait_ms)
                .with_min_bytes(1)
                .with_max_bytes(FETCH_BYTES_MAX)
                .with_isolation_level(0)
                .with_session_id(0)
                .with_session_epoch(-1)
                .with_topics(vec![FetchTopic::default()
                    .with_topic(topic_name(&args.topic))
                    .with_partitions(
                        wanted
                            .iter()
                            .map(|&(_, partition, offset)| {
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
            let connection = leaders.router.connection(leaders.bootstrap, leader).await?;
            let version = connection.version::<FetchRequest>(FETCH_VERSIONS)?;
            pending.push((leader, connection.send(&request, version).await?));
        }
        let mut responses = Vec::with_capacity(pending.len());
        for (leader, pending) in pending {
            let connection = leaders.router.connection(leaders.bootstrap, leader).await?;
            responses.push(connection.receive(pending).await?);
        }
        for response in &responses {
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
                            print_record(&mut out, args, index, &record)
                                .context("cannot write to stdout")?;
                            *position = record.offset + 1;
                            progress.printed += 1;
                            if args.max_messages.is_some_and(|max| progress.printed >= max) {
                                out.flush().context("cannot write to stdout")?;
                                return Ok(());
                            }
                        }
                        *position = (*position).max(next);
                    }
                    at_end.insert(index, *position >= partition.high_watermark);
                }
            }
        }
        progress.fetched = true;
        progress.ever_fetched = true;
        out.flush().context("cannot write to stdout")?;
        if let Some(member) = member.as_mut() {
            member.commit(positions).await?;
        }
        if args.exit_at_end && at_end.values().all(|&end| end) {
            return Ok(());
        }
        if let Some(member) = member.as_mut().filter(|m| m.rebalance_needed()) {
            member.rejoin().await?;
            *positions = member.start_positions(args.from_beginning).await?;
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
    if args.print_timestamp {
        let kind = if record.log_append_time {
            "LogAppendTime"
        } else {
            "CreateTime"
        };
        write!(out, "{kind}:{}", record.timestamp)?;
        out.write_all(separator)?;
    }
    if args.print_partition {
        write!(out, "Partition:{partition}")?;
        out.write_all(separator)?;
    }
    if args.print_offset {
        write!(out, "Offset:{}", record.offset)?;
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
