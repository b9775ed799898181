//! `strom status`: a one-screen summary of a running broker, from its
//! admin listener's `/status` (two samples `--interval-ms` apart give the
//! current throughput).

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use broker::admin_http::{ShardStatus, Status};
use clap::Args;

#[derive(Args, Clone, Debug)]
pub struct StatusArgs {
    /// The broker's admin listener (`admin.listen`).
    #[arg(long, value_name = "HOST:PORT", default_value = broker::config::ADMIN_LISTEN_DEFAULT)]
    pub admin: String,
    /// Time between the two samples throughput is computed from, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    pub interval_ms: u64,
    /// Print the broker's /status JSON instead of the summary.
    #[arg(long)]
    pub json: bool,
    /// How long to wait for each answer, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 5000)]
    pub timeout_ms: u64,
}

pub fn run(args: StatusArgs) -> ExitCode {
    match summary(&args) {
        Ok(text) => {
            out!("{text}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("strom status: {error:#}");
            ExitCode::from(super::EXIT_FAILURE)
        }
    }
}

fn get(admin: &str, path: &str, timeout: Duration) -> anyhow::Result<String> {
    let address = admin
        .to_socket_addrs()
        .with_context(|| format!("bad admin address {admin}"))?
        .next()
        .with_context(|| format!("{admin} resolves to no address"))?;
    let mut stream = TcpStream::connect_timeout(&address, timeout).with_context(|| {
        format!("cannot reach the admin listener at {admin} (is strom running with --admin-listen {admin}?)")
    })?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .with_context(|| format!("reading {path} from {admin}"))?;
    let Some((head, body)) = response.split_once("\r\n\r\n") else {
        bail!("{admin} answered {path} with something that is not HTTP");
    };
    if !head.starts_with("HTTP/1.1 200") {
        bail!(
            "{admin} answered {path} with {}",
            head.lines().next().unwrap_or("")
        );
    }
    Ok(body.to_string())
}

fn sample(args: &StatusArgs) -> anyhow::Result<(Status, String)> {
    let timeout = Duration::from_millis(args.timeout_ms.max(1));
    let body = get(&args.admin, "/status", timeout)?;
    let status: Status = serde_json::from_str(&body)
        .with_context(|| format!("{} /status is not a Strom status", args.admin))?;
    Ok((status, body))
}

fn summary(args: &StatusArgs) -> anyhow::Result<String> {
    let (first, _) = sample(args)?;
    let started = Instant::now();
    std::thread::sleep(Duration::from_millis(args.interval_ms));
    let (second, body) = sample(args)?;
    if args.json {
        return Ok(format!("{body}\n"));
    }
    let seconds = started.elapsed().as_secs_f64().max(1e-3);
    Ok(render(&first, &second, seconds))
}

fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

fn duration(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h {}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d {}h", s / 86_400, (s % 86_400) / 3600),
    }
}

/// Per-second rates between two samples of the same shard (or totals).
fn rates(before: &ShardStatus, after: &ShardStatus, seconds: f64) -> [f64; 5] {
    let per_second = |a: u64, b: u64| b.saturating_sub(a) as f64 / seconds;
    [
        per_second(before.bytes_in, after.bytes_in) / 1e6,
        per_second(before.bytes_out, after.bytes_out) / 1e6,
        per_second(before.requests, after.requests),
        per_second(before.produce_requests, after.produce_requests),
        per_second(before.fetch_requests, after.fetch_requests),
    ]
}

/// The summary screen.
pub fn render(before: &Status, now: &Status, seconds: f64) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "strom {}  node {}  {}  up {}\n",
        now.version,
        now.node_id,
        if now.ready { "ready" } else { "NOT READY" },
        duration(now.uptime_ms)
    ));
    out.push_str(&format!(
        "listen {} (advertised {})\n",
        now.listen, now.advertise
    ));
    let partitions: usize = now.topics.iter().map(|t| t.partitions).sum();
    out.push_str(&format!(
        "cores {}  shards answering {}  topics {}  partitions {}  connections {}\n",
        now.cores,
        now.shards.len(),
        now.topics.len(),
        partitions,
        now.totals.connections
    ));
    let [mb_in, mb_out, requests, produce, fetch] = rates(&before.totals, &now.totals, seconds);
    out.push_str(&format!(
        "throughput over {seconds:.1}s: in {mb_in:.2} MB/s, out {mb_out:.2} MB/s, {requests:.0} requests/s (produce {produce:.0}/s, fetch {fetch:.0}/s)\n"
    ));
    let on_disk = &now.disk.on_disk;
    out.push_str(&format!(
        "disk: {} in logs under {}, {} on disk (segments {}, indexes {}, journal {}, metadata {}, other {}); filesystem {} free of {}\n",
        human_bytes(now.disk.log_bytes),
        now.data_dir,
        human_bytes(on_disk.total()),
        human_bytes(on_disk.segments),
        human_bytes(on_disk.indexes),
        human_bytes(on_disk.journal),
        human_bytes(on_disk.metadata),
        human_bytes(on_disk.other),
        human_bytes(now.disk.filesystem_free_bytes),
        human_bytes(now.disk.filesystem_bytes)
    ));
    out.push_str(&format!(
        "io properties: {}\n\n",
        now.io_properties
            .as_deref()
            .unwrap_or("none (storage defaults; run strom-tune iotune)")
    ));
    out.push_str(&format!(
        "{:<8} {:>10} {:>11} {:>10} {:>9} {:>9} {:>10}\n",
        "", "partitions", "connections", "req/s", "in MB/s", "out MB/s", "log"
    ));
    for shard in &now.shards {
        let previous = before
            .shards
            .iter()
            .find(|s| s.shard == shard.shard)
            .cloned()
            .unwrap_or_default();
        let [mb_in, mb_out, requests, _, _] = rates(&previous, shard, seconds);
        out.push_str(&format!(
            "{:<8} {:>10} {:>11} {:>10.0} {:>9.2} {:>9.2} {:>10}\n",
            format!("shard {}", shard.shard.unwrap_or(0)),
            shard.partitions,
            shard.connections,
            requests,
            mb_in,
            mb_out,
            human_bytes(shard.log_size_bytes)
        ));
    }
    if !now.topics.is_empty() {
        out.push_str("\ntopics:\n");
        const SHOWN_MAX: usize = 20;
        for topic in now.topics.iter().take(SHOWN_MAX) {
            out.push_str(&format!(
                "  {} ({} partitions)\n",
                topic.name, topic.partitions
            ));
        }
        if now.topics.len() > SHOWN_MAX {
            out.push_str(&format!(
                "  ... and {} more (strom topic list)\n",
                now.topics.len() - SHOWN_MAX
            ));
        }
    }
    out
}
