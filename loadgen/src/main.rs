//! `strom-loadgen`: measures throughput and latency of any Kafka-compatible
//! broker with open-loop producers (no coordinated omission), consumers and
//! end-to-end accounting of every record.

mod e2e;
mod kafka;
mod rate;
mod report;
mod run;
mod stats;
mod workload;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use clap::{Args, Parser, Subcommand};
use protocol::admin::{EARLIEST, LATEST};

use crate::e2e::{Acknowledged, Tracker};
use crate::report::{RunReport, Second};
use crate::run::{Control, Message, Mode, Plan};
use crate::stats::Recorder;
use crate::workload::{Compression, KeyDistributor, Workload};

#[derive(Parser)]
#[command(
    name = "strom-loadgen",
    version,
    about = "Throughput and tail latency of any Kafka-compatible broker, without coordinated omission",
    long_about = "Runs producers and/or consumers against a Kafka-compatible broker and reports \
throughput and latency percentiles. Producers are open-loop: each send is due at a time set by the \
target rate, and latency counts from that time, so a stalled broker shows as latency. In e2e mode \
every record carries its producer, sequence and due time, and the consumers report loss, \
duplicates and reordering."
)]
struct Cli {
    #[command(subcommand)]
    mode: ModeArg,
}

#[derive(Subcommand)]
enum ModeArg {
    /// Produce only; reports publish latency (due time to acknowledgement).
    Produce(RunArgs),
    /// Consume existing data (`--topic`) or data produced first; reports consume throughput.
    Consume(RunArgs),
    /// Produce and consume at once; reports publish and end-to-end latency and record integrity.
    E2e(RunArgs),
}

#[derive(Args, Clone)]
struct RunArgs {
    /// Broker address to bootstrap from: `host:port` (a bare host gets
    /// port 9092), or several, comma-separated, tried in order.
    #[arg(long, default_value = "127.0.0.1:9092")]
    bootstrap: String,
    /// Client properties (`key=value` lines, as Kafka's tools and `strom`'s
    /// take): `security.protocol` (PLAINTEXT, SSL, SASL_PLAINTEXT,
    /// SASL_SSL); for TLS `ssl.truststore.location` (or `ssl.ca.location`)
    /// and for mutual TLS `ssl.keystore.location` (or
    /// `ssl.certificate.location` and `ssl.key.location`, with
    /// `ssl.key.password` for an encrypted key); for SASL `sasl.mechanism`
    /// (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) and `sasl.jaas.config` or
    /// `sasl.username` and `sasl.password`. Every connection of the run
    /// uses them.
    #[arg(long, value_name = "FILE")]
    command_config: Option<PathBuf>,
    /// OpenMessaging Benchmark workload YAML; flags below override its fields.
    #[arg(long, value_name = "FILE")]
    workload: Option<PathBuf>,
    /// Topics to create (OMB `topics`).
    #[arg(long)]
    topics: Option<usize>,
    /// Partitions per topic (OMB `partitionsPerTopic`).
    #[arg(long)]
    partitions: Option<usize>,
    /// Record value size in bytes (OMB `messageSize`).
    #[arg(long)]
    message_size: Option<usize>,
    /// File whose bytes are the record value (OMB `payloadFile`).
    #[arg(long)]
    payload_file: Option<PathBuf>,
    /// Producers per topic (OMB `producersPerTopic`).
    #[arg(long)]
    producers: Option<usize>,
    /// Subscriptions per topic (OMB `subscriptionsPerTopic`).
    #[arg(long)]
    subscriptions: Option<usize>,
    /// Consumers per subscription (OMB `consumerPerSubscription`).
    #[arg(long)]
    consumers: Option<usize>,
    /// Records per second over all producers; 0 = as fast as acknowledged (OMB `producerRate`).
    #[arg(long)]
    rate: Option<f64>,
    /// NO_KEY, KEY_ROUND_ROBIN or RANDOM_NANO (OMB `keyDistributor`).
    #[arg(long)]
    key_distributor: Option<String>,
    /// Measured duration in seconds (OMB `testDurationMinutes` × 60).
    #[arg(long)]
    duration: Option<f64>,
    /// Warm-up in seconds, not counted (OMB `warmupDurationMinutes` × 60).
    #[arg(long)]
    warmup: Option<f64>,
    /// Producer acks: all, 1 or 0.
    #[arg(long)]
    acks: Option<String>,
    /// Producer linger in milliseconds.
    #[arg(long)]
    linger_ms: Option<u64>,
    /// Producer batch size in bytes per partition.
    #[arg(long)]
    batch_size: Option<usize>,
    /// none, gzip, snappy, lz4 or zstd.
    #[arg(long)]
    compression: Option<String>,
    /// Idempotent producers (needs acks=all).
    #[arg(long)]
    idempotence: bool,
    /// Produce requests in flight per producer and broker.
    #[arg(long)]
    in_flight: Option<usize>,
    /// Replicas of each created topic's partitions (OMB's Kafka driver
    /// `replicationFactor`); without it the broker's
    /// `default.replication.factor` applies.
    #[arg(long, value_parser = clap::value_parser!(i16).range(1..))]
    replication_factor: Option<i16>,
    /// Topic config set at creation, KEY=VALUE (repeatable); overrides the workload file's value of the same key.
    #[arg(long = "topic-config", value_name = "KEY=VALUE")]
    topic_configs: Vec<String>,
    /// Use this existing topic instead of creating topics (repeatable); never deleted.
    #[arg(long = "topic", value_name = "NAME")]
    existing_topics: Vec<String>,
    /// Executors (one per core) for producers and consumers [default: every online core].
    #[arg(long)]
    cores: Option<usize>,
    /// Microseconds an idle executor polls before it sleeps. Spinning wakes
    /// it a little sooner but keeps its CPU busy, delaying the kernel's
    /// work for a broker on the same machine (disk completions, softirqs).
    #[arg(long, value_name = "MICROSECONDS", default_value_t = 0, value_parser = clap::value_parser!(u64).range(..=100_000))]
    spin_us: u64,
    /// How long consumers may take to catch up after producers stop, in seconds.
    #[arg(long, default_value_t = 10.0)]
    drain_timeout: f64,
    /// Keep the created topics afterwards.
    #[arg(long)]
    keep: bool,
    /// Write every figure and the per-second series as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write an HDR histogram interval log (publish and e2e, per second).
    #[arg(long, value_name = "FILE")]
    hdr_log: Option<PathBuf>,
    /// Draw latency by percentile and throughput over time as SVG.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Exit non-zero when any record was lost, duplicated or reordered (e2e) or any request failed.
    #[arg(long)]
    strict: bool,
}

fn workload_from(args: &RunArgs) -> Result<Workload> {
    let file = match &args.workload {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading workload {}", path.display()))?;
            Some(
                Workload::from_yaml(&text)
                    .with_context(|| format!("workload {}", path.display()))?,
            )
        }
        None => None,
    };
    let mut w = file.clone().unwrap_or_default();
    // The flags that change the file's fields, as given, for the name.
    let mut flags: Vec<String> = Vec::new();
    fn given(flags: &mut Vec<String>, flag: &str, value: &dyn std::fmt::Display) {
        flags.push(format!("--{flag} {value}"));
    }
    if let Some(v) = args.topics {
        w.topics = v;
        given(&mut flags, "topics", &v);
    }
    if let Some(v) = args.partitions {
        w.partitions_per_topic = v;
        given(&mut flags, "partitions", &v);
    }
    if let Some(v) = args.message_size {
        w.message_size = v;
        given(&mut flags, "message-size", &v);
    }
    if let Some(v) = &args.payload_file {
        w.payload_file = Some(v.clone());
        given(&mut flags, "payload-file", &v.display());
    }
    if let Some(v) = args.producers {
        w.producers_per_topic = v;
        given(&mut flags, "producers", &v);
    }
    if let Some(v) = args.subscriptions {
        w.subscriptions_per_topic = v;
        given(&mut flags, "subscriptions", &v);
    }
    if let Some(v) = args.consumers {
        w.consumer_per_subscription = v;
        given(&mut flags, "consumers", &v);
    }
    if let Some(v) = args.rate {
        w.producer_rate = v;
        given(&mut flags, "rate", &v);
    }
    if let Some(v) = &args.key_distributor {
        w.key_distributor = KeyDistributor::parse(v)?;
        given(&mut flags, "key-distributor", v);
    }
    if let Some(v) = args.duration {
        w.test_duration = Duration::try_from_secs_f64(v).context("--duration")?;
        given(&mut flags, "duration", &v);
    }
    if let Some(v) = args.warmup {
        w.warmup_duration = Duration::try_from_secs_f64(v).context("--warmup")?;
        given(&mut flags, "warmup", &v);
    }
    if let Some(v) = &args.acks {
        w.set_producer("acks", v)?;
        given(&mut flags, "acks", v);
    }
    if let Some(v) = args.linger_ms {
        w.producer.linger = Duration::from_millis(v);
        given(&mut flags, "linger-ms", &v);
    }
    if let Some(v) = args.batch_size {
        w.set_producer("batch.size", &v.to_string())?;
        given(&mut flags, "batch-size", &v);
    }
    if let Some(v) = &args.compression {
        w.producer.compression = Compression::parse(v)?;
        given(&mut flags, "compression", v);
    }
    if args.idempotence {
        w.producer.idempotence = true;
        flags.push("--idempotence".to_string());
    }
    if let Some(v) = args.in_flight {
        w.set_producer("max.in.flight.requests.per.connection", &v.to_string())?;
        given(&mut flags, "in-flight", &v);
    }
    for pair in &args.topic_configs {
        let (k, v) = pair
            .split_once('=')
            .with_context(|| format!("--topic-config {pair}: expected KEY=VALUE"))?;
        // A flag overrides the workload file's setting of the same key.
        w.topic_configs.retain(|(key, _)| key != k);
        w.topic_configs.push((k.to_string(), v.to_string()));
        flags.push(format!("--topic-config {pair}"));
    }
    w.validate()?;
    if let Some(file) = &file {
        w.name = w.name_with_flags(file, &flags);
    }
    Ok(w)
}

fn payload(w: &Workload) -> Result<Bytes> {
    match &w.payload_file {
        Some(path) => {
            let bytes = std::fs::read(path)
                .with_context(|| format!("reading payload file {}", path.display()))?;
            if bytes.is_empty() {
                bail!("payload file {} is empty", path.display());
            }
            Ok(Bytes::from(bytes))
        }
        None => Ok(Bytes::from(protocol::batch::build::pattern(
            7,
            w.message_size,
        ))),
    }
}

/// How long the start-up ListOffsets are retried while a new partition's
/// leader does not yet know it leads.
const LIST_OFFSETS_RETRY_MAX: Duration = Duration::from_secs(30);

/// Runs `f` on a one-off executor (admin calls before and after the run).
fn on_executor<T: Send + 'static, F: std::future::Future<Output = Result<T>> + 'static>(
    f: impl FnOnce() -> F + Send + 'static,
) -> Result<T> {
    glommio::LocalExecutorBuilder::default()
        .spawn(f)
        .map_err(|e| anyhow::anyhow!("starting an executor: {e}"))?
        .join()
        .map_err(|e| anyhow::anyhow!("executor failed: {e:?}"))?
}

/// Serves every allocation from the heap, so that a freed fetch response
/// (up to 64 MiB) is reused by the next one. By default glibc maps each
/// allocation of more than 32 MiB afresh and unmaps it on free: every
/// response then cost page faults and the kernel zeroing its pages, and the
/// load generator, not the broker, bounded consume throughput (matrix case
/// (c): 750 -> 1,060 MB/s, the load generator's system CPU 1.3 -> 0.45 s).
fn keep_large_buffers_in_the_heap() {
    #[cfg(target_env = "gnu")]
    {
        // SAFETY: mallopt only changes allocator parameters; called first
        // in main, before any other thread exists.
        let set = unsafe {
            libc::mallopt(libc::M_MMAP_MAX, 0) == 1
                && libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30) == 1
        };
        if !set {
            eprintln!("strom-loadgen: mallopt refused; large buffers are mapped per use");
        }
    }
}

fn main() -> ExitCode {
    keep_large_buffers_in_the_heap();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("STROM_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match run_mode(cli.mode) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("strom-loadgen: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Returns whether the run was clean (for `--strict`).
fn run_mode(mode: ModeArg) -> Result<bool> {
    let (mode, args) = match mode {
        ModeArg::Produce(a) => (Mode::Produce, a),
        ModeArg::Consume(a) => (Mode::Consume, a),
        ModeArg::E2e(a) => (Mode::EndToEnd, a),
    };
    if let Some(path) = &args.command_config {
        kafka::set_security(protocol::properties::security(
            path,
            "strom-loadgen",
            "strom-loadgen",
        )?);
    }
    let mut workload = workload_from(&args)?;
    let payload = payload(&workload)?;
    let cores = args
        .cores
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let bootstrap = args.bootstrap.clone();

    // Topics: existing ones, or fresh ones named after this run.
    let created = args.existing_topics.is_empty();
    let topics: Vec<String> = if created {
        let tag = run::unix_us_now() % 1_000_000_000;
        (0..workload.topics)
            .map(|i| format!("loadgen-{tag}-{i}"))
            .collect()
    } else {
        args.existing_topics.clone()
    };
    let setup = {
        let (bootstrap, topics, w) = (bootstrap.clone(), topics.clone(), workload.clone());
        let replication_factor = args.replication_factor;
        on_executor(move || async move {
            let leaders = if created {
                kafka::create_topics(
                    &bootstrap,
                    &topics,
                    w.partitions_per_topic,
                    replication_factor,
                    &w.topic_configs,
                )
                .await?
            } else {
                let mut conn = kafka::connect(&bootstrap).await?;
                protocol::admin::leaders(&mut conn, &topics).await?
            };
            let leader_ids = kafka::leader_ids(&bootstrap, &topics).await?;
            Ok((leaders, leader_ids))
        })
    };
    let (leaders, leader_ids) = setup?;
    if !created {
        // Partition counts come from the broker for existing topics.
        let counts: Vec<usize> = topics
            .iter()
            .map(|t| {
                leaders
                    .partitions
                    .keys()
                    .filter(|(name, _)| name == t)
                    .count()
            })
            .collect();
        workload.partitions_per_topic = counts.iter().copied().min().unwrap_or(0);
        if workload.partitions_per_topic == 0 {
            bail!("topic(s) {topics:?} not found on {bootstrap}");
        }
    }
    let all_partitions: Vec<(String, i32)> = leaders.partitions.keys().cloned().collect();
    let (start_offsets, end_offsets) = {
        let (leaders, all) = (leaders.clone(), all_partitions.clone());
        on_executor(move || async move {
            let mut start = std::collections::HashMap::new();
            let mut end = std::collections::HashMap::new();
            let mut by_leader: std::collections::HashMap<String, Vec<(String, i32)>> =
                Default::default();
            for tp in &all {
                by_leader
                    .entry(leaders.partitions[tp].clone())
                    .or_default()
                    .push(tp.clone());
            }
            for (leader, tps) in by_leader {
                let mut conn = kafka::connect(&leader).await?;
                // A just-created partition's leader may not know it leads
                // yet (NOT_LEADER_OR_FOLLOWER), as when a broker behind a
                // load balancer forwards to it: retry, as Kafka's clients
                // do, within a bound.
                let deadline = Instant::now() + LIST_OFFSETS_RETRY_MAX;
                let (latest, earliest) = loop {
                    let offsets = async {
                        let latest = protocol::admin::list_offsets(&mut conn, &tps, LATEST).await?;
                        let earliest =
                            protocol::admin::list_offsets(&mut conn, &tps, EARLIEST).await?;
                        Ok::<_, protocol::client::ClientError>((latest, earliest))
                    };
                    match offsets.await {
                        Ok(found) => break found,
                        Err(e) if Instant::now() < deadline => {
                            tracing::debug!("list offsets at {leader}: {e}; retrying");
                            glommio::timer::sleep(Duration::from_millis(100)).await;
                        }
                        Err(e) => return Err(e.into()),
                    }
                };
                if mode == Mode::Consume {
                    start.extend(earliest);
                } else {
                    start.extend(latest.clone());
                }
                end.extend(latest);
            }
            Ok((start, end))
        })?
    };
    if mode == Mode::Consume && end_offsets.values().all(|&o| o == 0) {
        bail!("consume mode needs existing data: the topic(s) {topics:?} are empty (produce with --keep first)");
    }

    let start = Instant::now() + Duration::from_millis(200);
    let plan = Plan {
        mode,
        workload: workload.clone(),
        topics: topics.clone(),
        leaders,
        leader_ids,
        start_offsets,
        end_offsets,
        payload,
        cores,
        spin: Duration::from_micros(args.spin_us),
        start,
        start_unix_us: run::unix_us_now() + 200_000,
        drain_timeout: Duration::try_from_secs_f64(args.drain_timeout)
            .context("--drain-timeout")?,
    };
    let control = Arc::new(Control {
        stop: AtomicBool::new(false),
        producers_running: AtomicUsize::new(0),
    });

    let warmup_s = workload.warmup_duration.as_secs_f64();
    let end_s = warmup_s + workload.test_duration.as_secs_f64();
    let mut pending: BTreeMap<u64, (usize, Recorder)> = BTreeMap::new();
    let mut total = Recorder::default();
    let mut run_so_far = Recorder::default();
    let mut series: Vec<Second> = Vec::new();
    let mut tracker = Tracker::default();
    // Records consumed in the warm-up's seconds: the tracker checks them,
    // the measured counts leave them out.
    let mut warmup_consumed_records = 0u64;
    let mut acknowledged: Acknowledged = Default::default();
    let mut done = 0usize;
    let mut finished_at: Option<Instant> = None;
    let mut failures: Vec<String> = Vec::new();
    let mut hdr_buf: Vec<u8> = Vec::new();
    let mut hdr_serializer = hdrhistogram::serialization::V2DeflateSerializer::new();
    let mut hdr_writer = hdrhistogram::serialization::interval_log::IntervalLogWriterBuilder::new()
        .with_max_value_divisor(1000.0)
        .add_comment("strom-loadgen latency in microseconds; tags: publish, e2e")
        .begin_log_with(&mut hdr_buf, &mut hdr_serializer)
        .context("HDR log")?;
    let stop_at = start + Duration::from_secs_f64(end_s);
    let control_for_timer = control.clone();
    // A timer thread ends the measured window.
    std::thread::spawn(move || {
        let now = Instant::now();
        if stop_at > now {
            std::thread::sleep(stop_at - now);
        }
        control_for_timer.stop.store(true, Ordering::SeqCst);
    });

    run::execute(plan, control.clone(), |message| {
        match message {
            Message::Interval { second, recorder } => {
                let entry = pending
                    .entry(second)
                    .or_insert_with(|| (0, Recorder::default()));
                entry.0 += 1;
                entry.1.merge(&recorder);
                // A second is complete when every executor reported it.
                while let Some((&s, (count, _))) = pending.iter().next() {
                    // Executors that finished count as reported.
                    if *count + done < cores {
                        break;
                    }
                    let (_, interval) = pending.remove(&s).expect("present");
                    let warmup = (s as f64) < warmup_s;
                    let second = Second::of(s, warmup, &interval);
                    if warmup {
                        warmup_consumed_records += interval.consumed_records;
                    } else {
                        total.merge(&interval);
                        run_so_far.merge(&interval);
                        let tag = hdrhistogram::serialization::interval_log::Tag::new("publish");
                        hdr_writer.write_histogram(
                            &interval.publish_us,
                            Duration::from_secs(s),
                            Duration::from_secs(1),
                            tag,
                        )?;
                        if mode == Mode::EndToEnd {
                            let tag = hdrhistogram::serialization::interval_log::Tag::new("e2e");
                            hdr_writer.write_histogram(
                                &interval.end_to_end_us,
                                Duration::from_secs(s),
                                Duration::from_secs(1),
                                tag,
                            )?;
                        }
                    }
                    let run_p99 = if run_so_far.publish_us.is_empty() {
                        0.0
                    } else {
                        run_so_far.publish_us.value_at_percentile(99.0) as f64 / 1000.0
                    };
                    eprintln!(
                        "{}",
                        second.progress_line(mode, run_so_far.error_count(), run_p99)
                    );
                    series.push(second);
                }
            }
            Message::Done {
                tracker: t,
                acknowledged: a,
                last,
            } => {
                done += 1;
                if done == cores {
                    finished_at = Some(Instant::now());
                }
                tracker.merge(t);
                for (k, v) in a {
                    acknowledged.entry(k).or_default().extend(v);
                }
                // What the executor measured after its last full second
                // (the drain after the window) counts in the totals.
                total.merge(&last);
                if done == cores {
                    for (_, (_, interval)) in std::mem::take(&mut pending) {
                        total.merge(&interval);
                    }
                }
            }
            Message::Failed(e) => failures.push(e),
        }
        Ok(())
    })?;
    drop(hdr_writer);

    if created && !args.keep {
        let (bootstrap, topics) = (bootstrap.clone(), topics.clone());
        if let Err(e) =
            on_executor(move || async move { kafka::delete_topics(&bootstrap, &topics).await })
        {
            eprintln!("strom-loadgen: could not delete the topics: {e:#}");
        }
    } else if created {
        eprintln!("kept topics: {}", topics.join(", "));
    }

    let integrity = (mode == Mode::EndToEnd)
        .then(|| tracker.finish_after_warmup(&acknowledged, warmup_consumed_records));
    // The window ends at the duration, or earlier when producers (backlog)
    // or consumers (consume mode) finished first.
    let window_start = start + workload.warmup_duration;
    let window_end = stop_at.min(finished_at.unwrap_or(stop_at));
    let measured = window_end
        .saturating_duration_since(window_start)
        .as_secs_f64();
    let report = RunReport::new(
        &workload.name,
        mode,
        &bootstrap,
        measured,
        &total,
        integrity.clone(),
        series,
    );
    println!("{}", report.table());
    if let Some(path) = &args.json {
        report.write_json(path)?;
    }
    if let Some(path) = &args.hdr_log {
        std::fs::write(path, &hdr_buf).with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.plot {
        report::write_svg(path, &report, &total.publish_us, &total.end_to_end_us)?;
    }
    for failure in &failures {
        eprintln!("strom-loadgen: {failure}");
    }
    if !failures.is_empty() {
        bail!("{} executor(s) failed", failures.len());
    }
    let clean = total.error_count() == 0
        && integrity
            .as_ref()
            .is_none_or(|i| i.lost == 0 && i.duplicates == 0 && i.reordered == 0 && i.corrupt == 0);
    Ok(clean || !args.strict)
}
