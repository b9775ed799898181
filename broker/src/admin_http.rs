//! The admin HTTP listener (`admin.listen`, default 127.0.0.1:9644) on its
//! own thread, `strom-admin`, off the data path:
//!
//! | path | answer |
//! |---|---|
//! | `GET /metrics` | Prometheus text, per shard (`shard="N"`) and in total (`shard="all"`) |
//! | `GET /health` | 200 while the process runs |
//! | `GET /ready` | 200 once every core has recovered its partitions and accepts clients (in a cluster: once the broker is registered and caught up with the metadata), 503 before and while stopping |
//! | `GET /status` | JSON summary for `strom status` |
//!
//! A scrape asks every core for a [`ShardSnapshot`] over a bounded flume
//! channel and waits at most [`SCRAPE_MS_MAX`]; a core that does not
//! answer in time is left out (and counted in
//! `strom_scrape_shards_missing`). Each connection is served on a thread
//! of its own, so a slow or half-sent request never holds up a probe: its
//! request head must arrive within [`REQUEST_HEAD_MS_MAX`], and at most
//! [`ADMIN_CONNECTIONS_MAX`] are open at once. Past that bound the oldest
//! connection still sending its request is closed to make room, so a
//! flood of idle connections cannot lock `/health` out.

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::config::BrokerConfig;
use crate::metadata::MetadataStore;
use crate::metrics::{self, ShardSnapshot, LATENCY_BOUNDS_US};
use crate::scrape::ScrapeRequest;

/// Longest a scrape waits for the cores' snapshots.
pub const SCRAPE_MS_MAX: u64 = 2_000;
/// Longest one admin connection may take to send its whole request head.
pub const REQUEST_HEAD_MS_MAX: u64 = 2_000;
/// Longest one admin connection may take to read (each write of) the answer.
pub const ADMIN_WRITE_MS_MAX: u64 = 5_000;
/// Admin connections open at once (each has a thread while it is served).
pub const ADMIN_CONNECTIONS_MAX: usize = 32;
const _: () = assert!(REQUEST_HEAD_MS_MAX < ADMIN_WRITE_MS_MAX);
/// Largest request head read; anything longer is refused.
pub const REQUEST_HEAD_BYTES_MAX: usize = 8 << 10;
/// Scrape requests queued per core.
const SCRAPE_QUEUE_PER_CORE: usize = 4;

/// What the admin thread knows of the broker.
pub struct AdminState {
    ready: AtomicBool,
    stopping: AtomicBool,
    started: Instant,
    started_unix_ms: u64,
    config: Arc<BrokerConfig>,
    metadata: Arc<MetadataStore>,
    cluster: Option<Arc<crate::cluster::Cluster>>,
    scrapers: Vec<flume::Sender<ScrapeRequest>>,
    /// Where the listener is bound, if it is.
    pub address: Option<SocketAddr>,
}

impl AdminState {
    /// Every core has opened its partitions and listens.
    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::Release);
    }

    /// The broker is stopping: no longer ready.
    pub fn set_stopping(&self) {
        self.stopping.store(true, Ordering::Release);
    }

    /// Every core listens and, in a cluster, accepts clients: the broker
    /// is registered and caught up with the metadata.
    fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
            && !self.stopping.load(Ordering::Acquire)
            && self
                .cluster
                .as_ref()
                .is_none_or(|cluster| cluster.is_serving())
    }

    /// Asks every core for its snapshot; cores that do not answer within
    /// [`SCRAPE_MS_MAX`] are missing from the result.
    fn scrape(&self) -> Vec<ShardSnapshot> {
        if !self.ready.load(Ordering::Acquire) {
            return Vec::new();
        }
        let deadline = Instant::now() + Duration::from_millis(SCRAPE_MS_MAX);
        let (reply_tx, reply_rx) = flume::bounded(self.scrapers.len().max(1));
        let mut asked = 0;
        for scraper in &self.scrapers {
            let request = ScrapeRequest {
                reply: reply_tx.clone(),
            };
            if scraper.try_send(request).is_ok() {
                asked += 1;
            }
        }
        drop(reply_tx);
        let mut snapshots = Vec::with_capacity(asked);
        while snapshots.len() < asked {
            match reply_rx.recv_deadline(deadline) {
                Ok(snapshot) => snapshots.push(snapshot),
                Err(_) => break,
            }
        }
        snapshots.sort_by_key(|s| s.shard);
        snapshots
    }
}

/// Creates the admin state and binds the listener (before the cores start,
/// so a bad address fails the start). Returns one scrape receiver per core,
/// for [`crate::scrape::serve_scrapes`].
pub fn start(
    config: Arc<BrokerConfig>,
    metadata: Arc<MetadataStore>,
    cluster: Option<Arc<crate::cluster::Cluster>>,
) -> anyhow::Result<(Arc<AdminState>, Vec<flume::Receiver<ScrapeRequest>>)> {
    let (scrapers, receivers): (Vec<_>, Vec<_>) = (0..config.cores)
        .map(|_| flume::bounded(SCRAPE_QUEUE_PER_CORE))
        .unzip();
    let listener = match config.admin_listen {
        None => None,
        Some(address) => match TcpListener::bind(address) {
            Ok(listener) => Some(listener),
            Err(error) if config.admin_listen_required => {
                return Err(error)
                    .with_context(|| format!("cannot listen on admin.listen {address}"));
            }
            Err(error) => {
                tracing::warn!(%address, %error, "admin listener not started (set --admin-listen to another address, or off)");
                None
            }
        },
    };
    let address = listener.as_ref().and_then(|l| l.local_addr().ok());
    let state = Arc::new(AdminState {
        ready: AtomicBool::new(false),
        stopping: AtomicBool::new(false),
        started: Instant::now(),
        started_unix_ms: storage::clock::system_wall_ms().max(0) as u64,
        config,
        metadata,
        cluster,
        scrapers,
        address,
    });
    if let Some(listener) = listener {
        let serving = state.clone();
        std::thread::Builder::new()
            .name("strom-admin".to_string())
            .spawn(move || serve(serving, listener))
            .context("cannot start the admin thread")?;
        if let Some(address) = state.address {
            tracing::info!(%address, "admin listener: /metrics /health /ready /status");
        }
    }
    Ok((state, receivers))
}

/// An admin connection being served: a handle to close it, and whether it
/// is still sending its request (only those are closed to make room).
struct OpenConnection {
    id: u64,
    stream: TcpStream,
    reading: Arc<AtomicBool>,
}

fn serve(state: Arc<AdminState>, listener: TcpListener) {
    let open: Arc<Mutex<Vec<OpenConnection>>> = Arc::default();
    let mut next_id = 0u64;
    for stream in listener.incoming() {
        let stream = match stream {
            Ok(stream) => stream,
            Err(error) => {
                tracing::debug!(%error, "admin accept failed");
                continue;
            }
        };
        next_id += 1;
        let id = next_id;
        let reading = Arc::new(AtomicBool::new(true));
        {
            let mut open = open.lock().expect("admin connections lock");
            if open.len() >= ADMIN_CONNECTIONS_MAX {
                match open.iter().position(|c| c.reading.load(Ordering::Acquire)) {
                    Some(oldest) => {
                        let evicted = open.remove(oldest);
                        let _ = evicted.stream.shutdown(std::net::Shutdown::Both);
                        tracing::debug!(
                            limit = ADMIN_CONNECTIONS_MAX,
                            "admin connections at their limit: closed the oldest one still sending its request"
                        );
                    }
                    None => {
                        // Every open one is being answered: refuse this one.
                        drop(stream);
                        continue;
                    }
                }
            }
            let Ok(handle) = stream.try_clone() else {
                continue;
            };
            open.push(OpenConnection {
                id,
                stream: handle,
                reading: reading.clone(),
            });
        }
        let (state, connections) = (state.clone(), open.clone());
        let spawned = std::thread::Builder::new()
            .name("strom-admin-req".to_string())
            .spawn(move || {
                if let Err(error) = answer(&state, stream, &reading) {
                    tracing::debug!(%error, "admin connection");
                }
                connections
                    .lock()
                    .expect("admin connections lock")
                    .retain(|c| c.id != id);
            });
        if let Err(error) = spawned {
            tracing::warn!(%error, "cannot start a thread for an admin connection");
            open.lock()
                .expect("admin connections lock")
                .retain(|c| c.id != id);
        }
    }
}

/// Reads a request head (up to the blank line) within [`REQUEST_HEAD_MS_MAX`]
/// in all; `None` when it is larger than [`REQUEST_HEAD_BYTES_MAX`].
fn read_head(stream: &mut TcpStream) -> std::io::Result<Option<Vec<u8>>> {
    let deadline = Instant::now() + Duration::from_millis(REQUEST_HEAD_MS_MAX);
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        stream.set_read_timeout(Some(left))?;
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > REQUEST_HEAD_BYTES_MAX {
            return Ok(None);
        }
    }
    Ok(Some(head))
}

fn answer(state: &AdminState, mut stream: TcpStream, reading: &AtomicBool) -> std::io::Result<()> {
    stream.set_write_timeout(Some(Duration::from_millis(ADMIN_WRITE_MS_MAX)))?;
    let head = read_head(&mut stream)?;
    reading.store(false, Ordering::Release);
    let Some(head) = head else {
        return respond(&mut stream, 431, "text/plain", "request head too large\n");
    };
    let head = String::from_utf8_lossy(&head);
    let mut parts = head.lines().next().unwrap_or("").split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    if method != "GET" {
        return respond(&mut stream, 405, "text/plain", "only GET\n");
    }
    match path {
        "/health" => respond(&mut stream, 200, "text/plain", "ok\n"),
        "/ready" if state.is_ready() => respond(&mut stream, 200, "text/plain", "ready\n"),
        "/ready" => respond(&mut stream, 503, "text/plain", "not ready\n"),
        "/metrics" => {
            let body = render_metrics(state, &state.scrape());
            respond(
                &mut stream,
                200,
                "text/plain; version=0.0.4; charset=utf-8",
                &body,
            )
        }
        "/status" => {
            let status = status(state, &state.scrape());
            let body = serde_json::to_string_pretty(&status).expect("status serializes");
            respond(&mut stream, 200, "application/json", &body)
        }
        _ => respond(&mut stream, 404, "text/plain", "not found\n"),
    }
}

fn respond(
    stream: &mut TcpStream,
    code: u16,
    content_type: &str,
    body: &str,
) -> std::io::Result<()> {
    let reason = match code {
        200 => "OK",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        _ => "Service Unavailable",
    };
    let head = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())?;
    stream.flush()
}

/// Prometheus text exposition: a family's HELP and TYPE once, then samples.
struct Exposition {
    out: String,
}

impl Exposition {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        self.out
            .push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (key, label)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let escaped = label
                    .replace('\\', "\\\\")
                    .replace('"', "\\\"")
                    .replace('\n', "\\n");
                self.out.push_str(&format!("{key}=\"{escaped}\""));
            }
            self.out.push('}');
        }
        self.out.push_str(&format!(" {value}\n"));
    }

    /// A histogram from non-cumulative bucket counts with `bounds_us` upper
    /// bounds (then +Inf), exposed in seconds.
    fn histogram(
        &mut self,
        name: &str,
        labels: &[(&str, &str)],
        bounds_us: &[u64],
        buckets: &[u64],
        sum_us: u64,
    ) {
        let mut cumulative = 0u64;
        for (i, count) in buckets.iter().enumerate() {
            cumulative += count;
            let le = match bounds_us.get(i) {
                Some(bound) => format!("{}", *bound as f64 / 1e6),
                None => "+Inf".to_string(),
            };
            let mut with_le = labels.to_vec();
            with_le.push(("le", &le));
            self.sample(&format!("{name}_bucket"), &with_le, cumulative);
        }
        self.sample(&format!("{name}_sum"), labels, sum_us as f64 / 1e6);
        self.sample(&format!("{name}_count"), labels, cumulative);
    }
}

/// A per-destination figure of forwarded requests: metric name, help text,
/// and how to read it.
type ForwardFigure = (
    &'static str,
    &'static str,
    fn(&crate::metrics::ForwardSnapshot) -> u64,
);

/// The requests forwarded to other brokers (load-balancer mode), by
/// destination broker and API.
fn render_forwarded(e: &mut Exposition, rows: &[(String, &ShardSnapshot)]) {
    let per_destination: [ForwardFigure; 4] = [
        (
            "strom_forwarded_requests_total",
            "Requests sent to the broker that leads their partitions (load-balancer mode), by destination broker and API.",
            |f| f.requests,
        ),
        (
            "strom_forwarded_request_failures_total",
            "Forwarded requests that got no answer (leader unreachable, timed out, connection lost): their partitions were answered NOT_LEADER_OR_FOLLOWER.",
            |f| f.failures,
        ),
        (
            "strom_forwarded_request_bytes_total",
            "Bytes of forwarded request bodies, by destination broker and API.",
            |f| f.bytes_out,
        ),
        (
            "strom_forwarded_response_bytes_total",
            "Bytes of the answers to forwarded requests, by destination broker and API.",
            |f| f.bytes_in,
        ),
    ];
    for (name, help, value) in per_destination {
        e.family(name, "counter", help);
        for (shard, s) in rows {
            for f in &s.forwarded {
                let broker = f.broker.to_string();
                let api = metrics::api_name(f.api_key);
                e.sample(
                    name,
                    &[("shard", shard), ("broker", &broker), ("api", &api)],
                    value(f),
                );
            }
        }
    }
    e.family(
        "strom_forward_latency_seconds",
        "histogram",
        "Time from handing a forwarded request over (including the wait for room in flight) to the leader's answer, by destination broker and API.",
    );
    for (shard, s) in rows {
        for f in &s.forwarded {
            let broker = f.broker.to_string();
            let api = metrics::api_name(f.api_key);
            e.histogram(
                "strom_forward_latency_seconds",
                &[("shard", shard), ("broker", &broker), ("api", &api)],
                &LATENCY_BOUNDS_US,
                &f.latency_buckets,
                f.latency_us_total,
            );
        }
    }
}

/// How far this voter's state machine and, on the active controller,
/// each voter and learner are behind.
fn render_quorum_lag(e: &mut Exposition, status: &crate::cluster::QuorumStatus) {
    e.family(
        "strom_quorum_applied_index",
        "gauge",
        "The highest metadata log index this node applied to its image (below strom_quorum_commit_index while it catches up).",
    );
    e.sample("strom_quorum_applied_index", &[], status.applied);
    e.family(
        "strom_quorum_follower_lag_entries",
        "gauge",
        "On the active controller: entries each voter and learner's log is behind the controller's, by node (0 for the controller itself).",
    );
    let head = status.progress.iter().map(|(_, matched)| *matched).max();
    for (node, matched) in &status.progress {
        let lag = head.unwrap_or(0).saturating_sub(*matched);
        e.sample(
            "strom_quorum_follower_lag_entries",
            &[("node", &node.to_string())],
            lag,
        );
    }
}

/// ISR changes, elections and failovers: each counted by one node (see
/// `crate::cluster::probe`), so sums over the brokers count each once.
fn render_cluster_events(e: &mut Exposition, probe: &crate::cluster::probe::ProbeSnapshot) {
    let counters = [
        (
            "strom_isr_shrinks_total",
            "Committed changes that took replicas out of the ISR of a partition this broker leads after the change (one per partition per change).",
            probe.isr_shrinks,
        ),
        (
            "strom_isr_expands_total",
            "Committed changes that put replicas into the ISR of a partition this broker leads after the change.",
            probe.isr_expands,
        ),
        (
            "strom_leader_elections_total",
            "Partitions this broker became the leader of (after a failover, a controlled shutdown, a preferred-leader move or a reassignment).",
            probe.leader_elections,
        ),
        (
            "strom_unclean_leader_elections_total",
            "Of those, partitions this broker took over without being in their ISR: records committed before may be lost (unclean.leader.election.enable).",
            probe.unclean_leader_elections,
        ),
        (
            "strom_failover_partitions_total",
            "On the active controller: leaderships it took from brokers it fenced for going unheard (moved to an in-sync replica, or left without a leader when none was live).",
            probe.failover_partitions,
        ),
    ];
    for (name, help, value) in counters {
        e.family(name, "counter", help);
        e.sample(name, &[], value);
    }
    let bounds = &crate::cluster::probe::UNAVAILABLE_BOUNDS_US;
    e.family(
        "strom_failover_unheard_seconds",
        "histogram",
        "On the active controller: for each broker it fenced for going unheard (its session ran out, or its heartbeat connection closed and it did not come back within the grace), how long since its last heartbeat. A failed leader's partitions take no writes from its failure until this fence moves them: this time, less up to one heartbeat interval.",
    );
    e.histogram(
        "strom_failover_unheard_seconds",
        &[],
        bounds,
        &probe.fenced_unheard.buckets,
        probe.fenced_unheard.sum_us,
    );
    e.family(
        "strom_partition_offline_seconds",
        "histogram",
        "On the active controller: for each partition that got a leader again after having none, how long it had none (from the change that took its leader to the one that gave it one, as this node applied them).",
    );
    e.histogram(
        "strom_partition_offline_seconds",
        &[],
        bounds,
        &probe.offline.buckets,
        probe.offline.sum_us,
    );
}

/// Sums shard snapshots into the `shard="all"` figures.
fn total(snapshots: &[ShardSnapshot]) -> ShardSnapshot {
    let mut all = ShardSnapshot {
        storage: crate::metrics::empty_storage(),
        ..ShardSnapshot::default()
    };
    for s in snapshots {
        for api in &s.apis {
            match all.apis.iter_mut().find(|a| a.api_key == api.api_key) {
                Some(sum) => {
                    sum.requests += api.requests;
                    sum.latency_us_total += api.latency_us_total;
                    sum.bytes_in += api.bytes_in;
                    sum.bytes_out += api.bytes_out;
                    for (t, c) in sum.latency_buckets.iter_mut().zip(&api.latency_buckets) {
                        *t += c;
                    }
                }
                None => all.apis.push(api.clone()),
            }
        }
        for (key, label, count) in &s.errors {
            match all
                .errors
                .iter_mut()
                .find(|(k, l, _)| k == key && l == label)
            {
                Some(sum) => sum.2 += count,
                None => all.errors.push((*key, label.clone(), *count)),
            }
        }
        all.hops += s.hops;
        all.hops_in_flight += s.hops_in_flight;
        all.connections += s.connections;
        all.partitions += s.partitions;
        all.leaders += s.leaders;
        all.stalls += s.stalls;
        all.cleaner.runs += s.cleaner.runs;
        all.cleaner.failures += s.cleaner.failures;
        all.cleaner.bytes_read += s.cleaner.bytes_read;
        all.cleaner.bytes_written += s.cleaner.bytes_written;
        all.cleaner.records_removed += s.cleaner.records_removed;
        all.cleaner.busy_us += s.cleaner.busy_us;
        all.cleaner.backlog += s.cleaner.backlog;
        all.queued_request_bytes += s.queued_request_bytes;
        all.queued_request_bytes_peak += s.queued_request_bytes_peak;
        all.queued_response_bytes += s.queued_response_bytes;
        all.queued_response_bytes_peak += s.queued_response_bytes_peak;
        all.connections_closed_idle += s.connections_closed_idle;
        all.connections_closed_receive_timeout += s.connections_closed_receive_timeout;
        all.tls_handshakes += s.tls_handshakes;
        all.tls_handshakes_failed += s.tls_handshakes_failed;
        for counted in &s.authentications {
            match all
                .authentications
                .iter_mut()
                .find(|a| a.listener == counted.listener && a.mechanism == counted.mechanism)
            {
                Some(sum) => {
                    sum.succeeded += counted.succeeded;
                    sum.failed += counted.failed;
                }
                None => all.authentications.push(counted.clone()),
            }
        }
        for (sum, d) in all.denials.iter_mut().zip(s.denials) {
            *sum += d;
        }
        all.storage.add(&s.storage);
        all.txn_ends.add(&s.txn_ends);
        for stage in &s.stages {
            match all.stages.iter_mut().find(|t| t.stage == stage.stage) {
                Some(sum) => sum.add(stage),
                None => all.stages.push(stage.clone()),
            }
        }
        for forwarded in &s.forwarded {
            match all
                .forwarded
                .iter_mut()
                .find(|f| f.broker == forwarded.broker && f.api_key == forwarded.api_key)
            {
                Some(sum) => sum.add(forwarded),
                None => all.forwarded.push(forwarded.clone()),
            }
        }
    }
    all.forwarded.sort_by_key(|f| (f.broker, f.api_key));
    all.apis.sort_by_key(|a| a.api_key);
    all.errors.sort();
    all
}

/// A per-shard figure: metric name, help text, and how to read it.
type ShardFigure = (&'static str, &'static str, fn(&ShardSnapshot) -> u64);

/// The `/metrics` page.
pub fn render_metrics(state: &AdminState, snapshots: &[ShardSnapshot]) -> String {
    let mut e = Exposition { out: String::new() };
    e.family(
        "strom_build_info",
        "gauge",
        "Version of the running broker.",
    );
    e.sample(
        "strom_build_info",
        &[("version", env!("CARGO_PKG_VERSION"))],
        1,
    );
    e.family(
        "strom_uptime_seconds",
        "gauge",
        "Seconds since the broker process started.",
    );
    e.sample(
        "strom_uptime_seconds",
        &[],
        state.started.elapsed().as_secs_f64(),
    );
    e.family(
        "strom_ready",
        "gauge",
        "1 once every core has recovered its partitions and accepts clients (in a cluster: once the broker is registered and caught up with the metadata).",
    );
    e.sample("strom_ready", &[], u8::from(state.is_ready()));
    e.family("strom_cores", "gauge", "Executors (shards) configured.");
    e.sample("strom_cores", &[], state.config.cores);
    e.family(
        "strom_scrape_shards_missing",
        "gauge",
        "Shards that did not answer this scrape in time.",
    );
    let missing = if state.ready.load(Ordering::Acquire) {
        state.config.cores.saturating_sub(snapshots.len())
    } else {
        state.config.cores
    };
    e.sample("strom_scrape_shards_missing", &[], missing);
    e.family(
        "strom_data_dir_disk_bytes",
        "gauge",
        "Bytes the data dir takes on disk (allocated blocks: preallocated segment space and journal chunks included), by kind.",
    );
    for (kind, bytes) in crate::disk_usage::measure(&state.config.data_dir).by_kind() {
        e.sample("strom_data_dir_disk_bytes", &[("kind", kind)], bytes);
    }
    let image = state.metadata.image();
    e.family("strom_topics", "gauge", "Topics in the metadata.");
    e.sample("strom_topics", &[], image.topics.len());
    e.family(
        "strom_metadata_offset",
        "gauge",
        "The metadata offset this node applied (the Raft index in a cluster).",
    );
    e.sample("strom_metadata_offset", &[], image.offset);
    let partitions = image.topics.values().flat_map(|t| t.partitions.iter());
    let (offline, under_replicated) = partitions.fold((0u64, 0u64), |(off, under), p| {
        (
            off + u64::from(p.leader < 0),
            under + u64::from(p.isr.len() < p.replicas.len()),
        )
    });
    e.family(
        "strom_offline_partitions",
        "gauge",
        "Partitions without a leader.",
    );
    e.sample("strom_offline_partitions", &[], offline);
    e.family(
        "strom_under_replicated_partitions",
        "gauge",
        "Partitions whose in-sync replicas are fewer than their replicas.",
    );
    e.sample("strom_under_replicated_partitions", &[], under_replicated);
    if let Some(cluster) = &state.cluster {
        let status = cluster.quorum_status();
        e.family(
            "strom_quorum_role",
            "gauge",
            "This node's role in the controller quorum: 1 for the role it has.",
        );
        for role in [
            crate::cluster::Role::Leader,
            crate::cluster::Role::Follower,
            crate::cluster::Role::Candidate,
            crate::cluster::Role::Observer,
        ] {
            e.sample(
                "strom_quorum_role",
                &[("role", role.name())],
                u64::from(status.role == role),
            );
        }
        e.family(
            "strom_quorum_commit_index",
            "gauge",
            "The highest metadata log index this voter knows committed.",
        );
        e.sample("strom_quorum_commit_index", &[], status.commit_index);
        e.family(
            "strom_quorum_term",
            "gauge",
            "The quorum's current term (leader epoch).",
        );
        e.sample("strom_quorum_term", &[], status.term);
        e.family(
            "strom_quorum_active_controller",
            "gauge",
            "The node id of the active controller as this node knows it (-1: none).",
        );
        e.sample(
            "strom_quorum_active_controller",
            &[],
            i64::from(cluster.active_controller()),
        );
        e.family(
            "strom_brokers",
            "gauge",
            "Registered brokers, by state (live or fenced).",
        );
        let fenced = image.brokers.values().filter(|b| b.fenced).count();
        e.sample(
            "strom_brokers",
            &[("state", "live")],
            image.brokers.len() - fenced,
        );
        e.sample("strom_brokers", &[("state", "fenced")], fenced);
        e.family(
            "strom_metadata_propagation_seconds",
            "histogram",
            "On a broker that is not a voter: time from the active controller applying a metadata change to this broker publishing it to its cores (the controller's wall clock against this host's: skew between hosts adds to it).",
        );
        let (buckets, sum_us) = cluster.propagation.snapshot();
        e.histogram(
            "strom_metadata_propagation_seconds",
            &[],
            &LATENCY_BOUNDS_US,
            &buckets,
            sum_us,
        );
        render_quorum_lag(&mut e, &status);
        render_cluster_events(&mut e, &cluster.probe.snapshot());
    }

    let all = total(snapshots);
    let mut rows: Vec<(String, &ShardSnapshot)> =
        snapshots.iter().map(|s| (s.shard.to_string(), s)).collect();
    rows.push(("all".to_string(), &all));

    e.family(
        "strom_requests_total",
        "counter",
        "Requests handled, by API.",
    );
    for (shard, s) in &rows {
        for api in &s.apis {
            let name = metrics::api_name(api.api_key);
            e.sample(
                "strom_requests_total",
                &[("shard", shard), ("api", &name)],
                api.requests,
            );
        }
    }
    e.family(
        "strom_request_errors_total",
        "counter",
        "Kafka error codes in responses of every API (top level and per topic, partition, resource, group or member), and requests that closed their connection (error=\"connection_closed\").",
    );
    for (shard, s) in &rows {
        for (key, label, count) in &s.errors {
            let name = metrics::api_name(*key);
            e.sample(
                "strom_request_errors_total",
                &[("shard", shard), ("api", &name), ("error", label)],
                count,
            );
        }
    }
    e.family(
        "strom_request_latency_seconds",
        "histogram",
        "Time from a request's decoding to its response being ready, by API.",
    );
    for (shard, s) in &rows {
        for api in &s.apis {
            let name = metrics::api_name(api.api_key);
            e.histogram(
                "strom_request_latency_seconds",
                &[("shard", shard), ("api", &name)],
                &LATENCY_BOUNDS_US,
                &api.latency_buckets,
                api.latency_us_total,
            );
        }
    }
    render_forwarded(&mut e, &rows);
    e.family(
        "strom_replication_stage_seconds",
        "histogram",
        "Where replicated acks=all batches spend their time, by stage: leader_local_durable (the leader's own append made durable), leader_follower_fetch (a follower's fetch at the leader, its wait included), follower_append_durable (a follower's append made durable), leader_isr_wait (from durable on the leader to acks=all holding), answer_after_acks (from acks=all holding to the produce resuming to answer).",
    );
    for (shard, s) in &rows {
        for stage in &s.stages {
            e.histogram(
                "strom_replication_stage_seconds",
                &[("shard", shard), ("stage", stage.stage.name())],
                &crate::stages::STAGE_BOUNDS_US,
                &stage.buckets,
                stage.sum_us,
            );
        }
    }
    let counters: [ShardFigure; 11] = [
        (
            "strom_request_bytes_total",
            "Bytes of request frames received (after the length prefix).",
            |s| s.apis.iter().map(|a| a.bytes_in).sum(),
        ),
        (
            "strom_response_bytes_total",
            "Bytes of responses sent (with their length prefix).",
            |s| s.apis.iter().map(|a| a.bytes_out).sum(),
        ),
        (
            "strom_cross_core_hops_total",
            "Work sent to the core that owns a partition.",
            |s| s.hops,
        ),
        (
            "strom_log_writes_total",
            "O_DIRECT writes submitted by the partition logs.",
            |s| s.storage.writes,
        ),
        (
            "strom_log_written_bytes_total",
            "Bytes written by the partition logs (page-aligned, tails rewritten).",
            |s| s.storage.bytes_written,
        ),
        (
            "strom_cleaner_runs_total",
            "Cleanings of compacted logs by the core's cleaner that changed something.",
            |s| s.cleaner.runs,
        ),
        (
            "strom_cleaner_failures_total",
            "Cleanings that failed (each logged; the log stays as it was).",
            |s| s.cleaner.failures,
        ),
        (
            "strom_cleaner_read_bytes_total",
            "Bytes the cleaner read from segment files.",
            |s| s.cleaner.bytes_read,
        ),
        (
            "strom_cleaner_written_bytes_total",
            "Bytes of cleaned segments the cleaner wrote.",
            |s| s.cleaner.bytes_written,
        ),
        (
            "strom_cleaner_records_removed_total",
            "Records the cleaner removed: superseded by a later record of their key, or tombstones past delete.retention.ms.",
            |s| s.cleaner.records_removed,
        ),
        (
            "strom_cleaner_busy_microseconds_total",
            "Time the core's cleaner spent cleaning.",
            |s| s.cleaner.busy_us,
        ),
    ];
    for (name, help, value) in counters {
        e.family(name, "counter", help);
        for (shard, s) in &rows {
            e.sample(name, &[("shard", shard)], value(s));
        }
    }
    e.family(
        "strom_batch_cache_reads_total",
        "counter",
        "Log reads served from the batch cache (source=\"cache\") or the segment files (source=\"disk\").",
    );
    for (shard, s) in &rows {
        e.sample(
            "strom_batch_cache_reads_total",
            &[("shard", shard), ("source", "cache")],
            s.storage.reads_cached,
        );
        e.sample(
            "strom_batch_cache_reads_total",
            &[("shard", shard), ("source", "disk")],
            s.storage.reads_disk,
        );
    }
    e.family(
        "strom_batch_cache_hit_ratio",
        "gauge",
        "Share of log reads served from the batch cache since start (NaN before any read).",
    );
    for (shard, s) in &rows {
        let reads = s.storage.reads_cached + s.storage.reads_disk;
        let ratio = if reads == 0 {
            f64::NAN
        } else {
            s.storage.reads_cached as f64 / reads as f64
        };
        e.sample("strom_batch_cache_hit_ratio", &[("shard", shard)], ratio);
    }
    e.family(
        "strom_fdatasync_latency_seconds",
        "histogram",
        "Syncs of the partition logs (fdatasync, or the wait for the shared syncfs under strom.flush.scope=filesystem) and their latency.",
    );
    for (shard, s) in &rows {
        e.histogram(
            "strom_fdatasync_latency_seconds",
            &[("shard", shard)],
            &storage::SYNC_LATENCY_BOUNDS_US,
            &s.storage.sync_latency_buckets,
            s.storage.sync_latency_us_total,
        );
    }
    let gauges: [ShardFigure; 19] = [
        (
            "strom_partitions",
            "Partitions a shard owns.",
            |s| s.partitions,
        ),
        (
            "strom_partition_leaders",
            "Partitions a shard leads.",
            |s| s.leaders,
        ),
        (
            "strom_connections",
            "Open client connections.",
            |s| s.connections,
        ),
        (
            "strom_cross_core_hops_in_flight",
            "Hops sent to other cores still waiting for a reply (the shard's cross-core queue depth).",
            |s| s.hops_in_flight,
        ),
        (
            "strom_log_pending_bytes",
            "Appended bytes not yet written to their segment file (bounded by strom.pending.bytes per log; under the journal, small durable appends wait here for a larger write).",
            |s| s.storage.pending_bytes,
        ),
        (
            "strom_log_size_bytes",
            "Bytes in the segments of the partition logs.",
            |s| s.storage.log_size_bytes,
        ),
        (
            "strom_fdatasync_total",
            "Syncs of the partition logs (a counter; also the histogram's _count).",
            |s| s.storage.syncs,
        ),
        (
            "strom_journal_writes_total",
            "Writes of the core's journal, each followed by an fdatasync: one per sync round for the small durable appends of all its partitions.",
            |s| s.storage.journal_writes,
        ),
        (
            "strom_journal_records_total",
            "Records written to the core's journal (one per partition per round, and tombstones).",
            |s| s.storage.journal_records,
        ),
        (
            "strom_core_stalls_total",
            "Times the core went 500 ms or more without running its tasks once started: the process was stopped, starved of CPU, or a task ran without yielding (each also logged, with its length).",
            |s| s.stalls,
        ),
        (
            "strom_queued_request_bytes",
            "Request bytes held in the core's share of queued.max.request.bytes: frames being received and handled.",
            |s| s.queued_request_bytes,
        ),
        (
            "strom_queued_request_bytes_peak",
            "The most request bytes the core has held at once since start.",
            |s| s.queued_request_bytes_peak,
        ),
        (
            "strom_queued_response_bytes",
            "Response bytes waiting to be written on the core (its share of strom.queued.max.response.bytes).",
            |s| s.queued_response_bytes,
        ),
        (
            "strom_queued_response_bytes_peak",
            "The most response bytes waiting to be written on the core at once since start.",
            |s| s.queued_response_bytes_peak,
        ),
        (
            "strom_connections_closed_idle_total",
            "Connections closed after connections.max.idle.ms without a byte in either direction.",
            |s| s.connections_closed_idle,
        ),
        (
            "strom_connections_closed_receive_timeout_total",
            "Connections closed because an admitted request did not arrive within strom.request.receive.timeout.ms.",
            |s| s.connections_closed_receive_timeout,
        ),
        (
            "strom_tls_handshakes_total",
            "TLS handshakes completed on the client listener (its security protocol SSL).",
            |s| s.tls_handshakes,
        ),
        (
            "strom_tls_handshakes_failed_total",
            "TLS handshakes on the client listener that failed or did not finish within strom.request.receive.timeout.ms.",
            |s| s.tls_handshakes_failed,
        ),
        (
            "strom_journal_bytes_total",
            "Record bytes written to the core's journal (written again to the segment files later).",
            |s| s.storage.journal_bytes,
        ),
    ];
    let name = "strom_cleaner_backlog";
    e.family(
        name,
        "gauge",
        "Compacted logs due for a cleaning (at or past min.cleanable.dirty.ratio or max.compaction.lag.ms) at the core's cleaner's last look.",
    );
    for (shard, s) in &rows {
        e.sample(name, &[("shard", shard)], s.cleaner.backlog);
    }
    render_cleaned_logs(&mut e, snapshots, state.config.metrics_partition_labels);
    for (name, help, value) in gauges {
        let kind = if name.ends_with("_total") {
            "counter"
        } else {
            "gauge"
        };
        e.family(name, kind, help);
        for (shard, s) in &rows {
            e.sample(name, &[("shard", shard)], value(s));
        }
    }
    type AuthenticationFigure = (
        &'static str,
        &'static str,
        fn(&crate::metrics::AuthenticationSnapshot) -> u64,
    );
    let authentications: [AuthenticationFigure; 2] = [
        (
            "strom_authentications_total",
            "SASL authentications that succeeded, by listener and mechanism (the controller listener's too).",
            |a| a.succeeded,
        ),
        (
            "strom_authentications_failed_total",
            "SASL authentications that failed, by listener and mechanism (\"none\" before a served one was named): bad credentials, a mechanism not enabled, a request before authenticating; each closed its connection.",
            |a| a.failed,
        ),
    ];
    for (name, help, value) in authentications {
        e.family(name, "counter", help);
        for (shard, s) in &rows {
            for a in &s.authentications {
                e.sample(
                    name,
                    &[
                        ("shard", shard),
                        ("listener", &a.listener),
                        ("mechanism", &a.mechanism),
                    ],
                    value(a),
                );
            }
        }
    }
    let name = "strom_authorization_denials_total";
    e.family(
        name,
        "counter",
        "Requests (or topics, groups, keys of one) the authorizer refused, by resource type.",
    );
    for (shard, s) in &rows {
        for (resource, count) in crate::metrics::DENIAL_RESOURCES.iter().zip(s.denials) {
            e.sample(name, &[("shard", shard), ("resource", resource)], count);
        }
    }
    render_transactions(&mut e, snapshots, &rows);
    render_topics(&mut e, snapshots, state.config.metrics_partition_labels);
    e.out
}

/// Each compacted log's dirty ratio and time since its last cleaning on
/// this broker: per partition with `strom.metrics.partition.labels`, else
/// per topic (dirty bytes over cleanable bytes of all its partitions, and
/// the longest time since a cleaning).
fn render_cleaned_logs(e: &mut Exposition, snapshots: &[ShardSnapshot], by_partition: bool) {
    // (topic, partition or -1) → (dirty, cleanable, longest since cleaned).
    let mut logs: BTreeMap<(&str, i32), (u64, u64, Option<u64>)> = BTreeMap::new();
    for log in snapshots.iter().flat_map(|s| &s.cleaner_logs) {
        let partition = if by_partition { log.partition } else { -1 };
        let entry = logs.entry((log.topic.as_str(), partition)).or_default();
        entry.0 += log.dirty_bytes;
        entry.1 += log.cleanable_bytes;
        if let Some(ms) = log.since_cleaned_ms {
            entry.2 = Some(entry.2.map_or(ms, |m| m.max(ms)));
        }
    }
    let labelled = |topic: &str, partition: i32, e: &mut Exposition, name: &str, value: f64| {
        let partition_text = partition.to_string();
        let mut labels = vec![("topic", topic)];
        if partition >= 0 {
            labels.push(("partition", partition_text.as_str()));
        }
        e.sample(name, &labels, value);
    };
    let name = "strom_cleaner_dirty_ratio";
    e.family(
        name,
        "gauge",
        "Share of a compacted log's cleanable bytes (sealed segments below the high watermark) not cleaned yet, on this broker's replicas (per topic; per partition with strom.metrics.partition.labels).",
    );
    for (&(topic, partition), &(dirty, cleanable, _)) in &logs {
        let ratio = if cleanable == 0 {
            0.0
        } else {
            dirty as f64 / cleanable as f64
        };
        labelled(topic, partition, e, name, ratio);
    }
    let name = "strom_cleaner_since_cleaning_seconds";
    e.family(
        name,
        "gauge",
        "Seconds since the last cleaning of a compacted log's replica on this broker, the longest over the topic's partitions unless per partition (absent until a first cleaning since start).",
    );
    for (&(topic, partition), &(_, _, since)) in &logs {
        if let Some(ms) = since {
            labelled(topic, partition, e, name, ms as f64 / 1000.0);
        }
    }
}

/// The transaction coordinators this broker runs (one per
/// `__transaction_state` partition it leads, labelled with it) and the
/// ends of transactions counted on each core.
fn render_transactions(
    e: &mut Exposition,
    snapshots: &[ShardSnapshot],
    rows: &[(String, &ShardSnapshot)],
) {
    type CoordinatorFigure = (
        &'static str,
        &'static str,
        fn(&crate::metrics::TxnCoordinatorSnapshot) -> f64,
    );
    let per_coordinator: [CoordinatorFigure; 3] = [
        (
            "strom_transactions_open",
            "Transactions open (Ongoing) at the coordinator of a __transaction_state partition this broker leads, by that partition.",
            |c| c.open as f64,
        ),
        (
            "strom_transactions_oldest_open_seconds",
            "How long the oldest transaction open at the coordinator has been open (0: none), by __transaction_state partition.",
            |c| c.oldest_open_ms as f64 / 1000.0,
        ),
        (
            "strom_transactions_markers_pending",
            "Transactions the coordinator decided (PrepareCommit, PrepareAbort) whose markers are not all written yet, by __transaction_state partition.",
            |c| c.markers_pending as f64,
        ),
    ];
    for (name, help, value) in per_coordinator {
        e.family(name, "gauge", help);
        for s in snapshots {
            for coordinator in &s.txn_coordinators {
                let partition = coordinator.partition.to_string();
                e.sample(name, &[("partition", &partition)], value(coordinator));
            }
        }
    }
    type EndFigure = (
        &'static str,
        &'static str,
        fn(&crate::metrics::TxnEndsSnapshot) -> u64,
    );
    let ends: [EndFigure; 4] = [
        (
            "strom_transactions_committed_total",
            "Transactions this broker's coordinators committed, counted once every marker was written.",
            |t| t.committed,
        ),
        (
            "strom_transactions_aborted_total",
            "Transactions this broker's coordinators aborted (by the producer, at a timeout, or to fence it), counted once every marker was written.",
            |t| t.aborted,
        ),
        (
            "strom_transactions_timed_out_total",
            "Transactions this broker's coordinators decided to abort because they were open past their transaction.timeout.ms.",
            |t| t.timed_out,
        ),
        (
            "strom_transactions_aborted_by_operator_total",
            "Transactions aborted on a partition this broker leads by an operator's WriteTxnMarkers (strom transaction abort, kafka-transactions.sh abort), one per partition.",
            |t| t.operator_aborts,
        ),
    ];
    for (name, help, value) in ends {
        e.family(name, "counter", help);
        for (shard, s) in rows {
            e.sample(name, &[("shard", shard)], value(&s.txn_ends));
        }
    }
}

/// One topic's (or partition's) figures, summed over the shards.
#[derive(Default)]
struct TopicFigures {
    bytes_in: u64,
    records_in: u64,
    bytes_out: u64,
    records_out: u64,
    log_start_offset: i64,
    log_end_offset: i64,
    high_watermark: i64,
    last_stable_offset_lag: i64,
    size_bytes: u64,
    /// This broker leads the partition (one of the topic's, without a
    /// partition label): the log gauges are its.
    led: bool,
}

/// A group's committed offsets and lag for one topic (or partition).
#[derive(Default)]
struct GroupFigures {
    committed_offset: i64,
    lag: i64,
}

/// A series key: the topic, and the partition when partitions are labelled.
type TopicKey = (String, Option<i32>);

/// Per-topic series (`topic="..."`), or per partition (`topic`,
/// `partition`) with `strom.metrics.partition.labels`, and consumer group
/// lag (`group`, `topic`[, `partition`]): the same names either way, so
/// `sum by (topic)` reads both. In a cluster a partition's log figures
/// come from its leader only and its traffic is counted by the broker
/// that served it (the leader; followers' fetches are not counted), so
/// `sum by (topic)` over the brokers counts each partition once.
fn render_topics(e: &mut Exposition, snapshots: &[ShardSnapshot], by_partition: bool) {
    let key = |topic: &str, partition: i32| -> TopicKey {
        (topic.to_string(), by_partition.then_some(partition))
    };
    let mut topics: BTreeMap<TopicKey, TopicFigures> = BTreeMap::new();
    let mut high_watermarks: HashMap<(&str, i32), i64> = HashMap::new();
    // Every replica this broker holds, leader or follower: whether a
    // follower's copy has taken its leader's log start.
    let mut replica_starts: BTreeMap<TopicKey, i64> = BTreeMap::new();
    for s in snapshots {
        for log in &s.partition_logs {
            high_watermarks.insert((log.topic.as_str(), log.partition), log.high_watermark);
            *replica_starts
                .entry(key(&log.topic, log.partition))
                .or_default() += log.log_start_offset;
            // A follower's copy is the leader's again: summed over the
            // brokers, each partition counts once.
            if !log.leader {
                continue;
            }
            let t = topics.entry(key(&log.topic, log.partition)).or_default();
            t.led = true;
            t.log_start_offset += log.log_start_offset;
            t.log_end_offset += log.log_end_offset;
            t.high_watermark += log.high_watermark;
            t.last_stable_offset_lag += (log.high_watermark - log.last_stable_offset).max(0);
            t.size_bytes += log.size_bytes;
        }
    }
    for s in snapshots {
        for traffic in &s.traffic {
            // Only partitions a shard still owns: a deleted topic's
            // counters are not shown.
            if !high_watermarks.contains_key(&(traffic.topic.as_str(), traffic.partition)) {
                continue;
            }
            let t = topics
                .entry(key(&traffic.topic, traffic.partition))
                .or_default();
            t.bytes_in += traffic.bytes_in;
            t.records_in += traffic.records_in;
            t.bytes_out += traffic.bytes_out;
            t.records_out += traffic.records_out;
        }
    }
    let mut groups: BTreeMap<(String, TopicKey), GroupFigures> = BTreeMap::new();
    for s in snapshots {
        for committed in &s.committed {
            let Some(high_watermark) =
                high_watermarks.get(&(committed.topic.as_str(), committed.partition))
            else {
                continue;
            };
            if committed.offset < 0 {
                continue;
            }
            let g = groups
                .entry((
                    committed.group.clone(),
                    key(&committed.topic, committed.partition),
                ))
                .or_default();
            g.committed_offset += committed.offset;
            g.lag += (high_watermark - committed.offset).max(0);
        }
    }
    type TopicFigure = (&'static str, &'static str, fn(&TopicFigures) -> i64);
    let figures: [TopicFigure; 9] = [
        (
            "strom_topic_bytes_in_total",
            "Record batch bytes produced to the topic (appended).",
            |t| t.bytes_in as i64,
        ),
        (
            "strom_topic_records_in_total",
            "Records produced to the topic (appended).",
            |t| t.records_in as i64,
        ),
        (
            "strom_topic_bytes_out_total",
            "Record batch bytes of the topic sent in fetch responses to consumers (not to followers).",
            |t| t.bytes_out as i64,
        ),
        (
            "strom_topic_records_out_total",
            "Records of the topic sent in fetch responses to consumers (whole batches, as sent; not to followers).",
            |t| t.records_out as i64,
        ),
        (
            "strom_topic_log_start_offset",
            "Log start offset, on the partition's leader (summed over the topic's partitions it leads without a partition label).",
            |t| t.log_start_offset,
        ),
        (
            "strom_topic_log_end_offset",
            "Log end offset: the offset the next record gets, on the partition's leader (summed over the topic's partitions it leads without a partition label).",
            |t| t.log_end_offset,
        ),
        (
            "strom_topic_high_watermark",
            "High watermark: consumers read up to it, on the partition's leader (summed over the topic's partitions it leads without a partition label).",
            |t| t.high_watermark,
        ),
        (
            "strom_topic_last_stable_offset_lag",
            "High watermark minus last stable offset, on the partition's leader: records read_committed consumers cannot read yet because a transaction open before them is not decided (summed over the topic's partitions it leads without a partition label).",
            |t| t.last_stable_offset_lag,
        ),
        (
            "strom_topic_log_size_bytes",
            "Bytes of the segments on disk of the topic's partitions this broker leads (each follower holds about as much again).",
            |t| t.size_bytes as i64,
        ),
    ];
    for (name, help, value) in figures {
        let counter = name.ends_with("_total");
        e.family(name, if counter { "counter" } else { "gauge" }, help);
        for ((topic, partition), t) in &topics {
            if !counter && !t.led {
                continue;
            }
            let partition = partition.map(|p| p.to_string());
            let mut labels = vec![("topic", topic.as_str())];
            if let Some(partition) = &partition {
                labels.push(("partition", partition));
            }
            e.sample(name, &labels, value(t));
        }
    }
    let name = "strom_topic_replica_log_start_offset";
    e.family(
        name,
        "gauge",
        "Log start offset of the topic's partitions this broker holds a replica of, leader or follower (summed over them without a partition label).",
    );
    for ((topic, partition), start) in &replica_starts {
        let partition = partition.map(|p| p.to_string());
        let mut labels = vec![("topic", topic.as_str())];
        if let Some(partition) = &partition {
            labels.push(("partition", partition));
        }
        e.sample(name, &labels, start);
    }
    type GroupFigure = (&'static str, &'static str, fn(&GroupFigures) -> i64);
    let figures: [GroupFigure; 2] = [
        (
            "strom_consumer_group_committed_offset",
            "Offset the group committed (summed over the topic's partitions without a partition label).",
            |g| g.committed_offset,
        ),
        (
            "strom_consumer_group_lag",
            "Records between the group's committed offset and the high watermark, over the partitions it committed for.",
            |g| g.lag,
        ),
    ];
    type ConsumerFigure = (
        &'static str,
        &'static str,
        fn(&crate::metrics::ConsumerGroupSnapshot) -> i64,
    );
    let consumer_figures: [ConsumerFigure; 3] = [
        (
            "strom_consumer_group_epoch",
            "Epoch of a consumer-protocol group (group.protocol=consumer), on its coordinator: each change of members, subscriptions or subscribed partitions bumps it, so its rise counts the group's rebalances.",
            |g| i64::from(g.epoch),
        ),
        (
            "strom_consumer_group_members",
            "Members of a consumer-protocol group, on its coordinator.",
            |g| g.members as i64,
        ),
        (
            "strom_consumer_group_reconciling_members",
            "Members of a consumer-protocol group still reconciling: not at the target assignment's epoch, or waiting to give up or get partitions.",
            |g| g.reconciling as i64,
        ),
    ];
    for (name, help, value) in consumer_figures {
        e.family(name, "gauge", help);
        for s in snapshots {
            for g in &s.consumer_groups {
                e.sample(name, &[("group", g.group.as_str())], value(g));
            }
        }
    }
    type ShareFigure = (
        &'static str,
        &'static str,
        &'static str,
        fn(&crate::metrics::ShareGroupFigures) -> u64,
    );
    let share_figures: [ShareFigure; 5] = [
        (
            "strom_share_group_records_in_flight",
            "gauge",
            "Records of a share group's partitions this broker leads that were delivered or are due again and are not yet acknowledged or archived.",
            |g| g.in_flight,
        ),
        (
            "strom_share_group_records_acquired",
            "gauge",
            "Records of a share group's partitions this broker leads held by a member now, under an acquisition lock.",
            |g| g.acquired,
        ),
        (
            "strom_share_group_deliveries_total",
            "counter",
            "Records handed to a share group's members by this broker, each delivery counted.",
            |g| g.counters.deliveries,
        ),
        (
            "strom_share_group_redeliveries_total",
            "counter",
            "Of the deliveries, records delivered again after a release, an expired lock or a leader change.",
            |g| g.counters.redeliveries,
        ),
        (
            "strom_share_group_lock_expiries_total",
            "counter",
            "Acquisition locks that ran out before their record was acknowledged (group.share.record.lock.duration.ms).",
            |g| g.counters.lock_expiries,
        ),
    ];
    let mut share: BTreeMap<&str, crate::metrics::ShareGroupFigures> = BTreeMap::new();
    for s in snapshots {
        for g in &s.share_groups {
            let sum = share.entry(g.group.as_str()).or_default();
            sum.in_flight += g.in_flight;
            sum.acquired += g.acquired;
            sum.counters.deliveries += g.counters.deliveries;
            sum.counters.redeliveries += g.counters.redeliveries;
            sum.counters.lock_expiries += g.counters.lock_expiries;
        }
    }
    for (name, kind, help, value) in share_figures {
        e.family(name, kind, help);
        for (group, g) in &share {
            e.sample(name, &[("group", group)], value(g) as i64);
        }
    }
    for (name, help, value) in figures {
        e.family(name, "gauge", help);
        for ((group, (topic, partition)), g) in &groups {
            let partition = partition.map(|p| p.to_string());
            let mut labels = vec![("group", group.as_str()), ("topic", topic.as_str())];
            if let Some(partition) = &partition {
                labels.push(("partition", partition));
            }
            e.sample(name, &labels, value(g));
        }
    }
}

/// The `/status` answer, read by `strom status`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Status {
    pub version: String,
    pub node_id: i32,
    pub ready: bool,
    pub uptime_ms: u64,
    pub started_at_unix_ms: u64,
    pub listen: String,
    pub advertise: String,
    pub data_dir: String,
    pub cores: usize,
    pub io_properties: Option<String>,
    pub topics: Vec<TopicStatus>,
    pub shards: Vec<ShardStatus>,
    pub totals: ShardStatus,
    pub disk: DiskStatus,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TopicStatus {
    pub name: String,
    pub partitions: usize,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ShardStatus {
    /// The shard, or `None` for the totals.
    pub shard: Option<usize>,
    pub partitions: u64,
    pub connections: u64,
    pub requests: u64,
    pub produce_requests: u64,
    pub fetch_requests: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub log_size_bytes: u64,
    pub log_written_bytes: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DiskStatus {
    /// Bytes in the partition logs.
    pub log_bytes: u64,
    /// What the data dir takes on disk, by kind.
    #[serde(default)]
    pub on_disk: crate::disk_usage::DiskUsage,
    /// The data directory's filesystem.
    pub filesystem_bytes: u64,
    pub filesystem_free_bytes: u64,
}

fn shard_status(shard: Option<usize>, s: &ShardSnapshot) -> ShardStatus {
    let requests_of = |key: kafka_protocol::messages::ApiKey| {
        s.apis
            .iter()
            .filter(|a| a.api_key == key as i16)
            .map(|a| a.requests)
            .sum()
    };
    ShardStatus {
        shard,
        partitions: s.partitions,
        connections: s.connections,
        requests: s.apis.iter().map(|a| a.requests).sum(),
        produce_requests: requests_of(kafka_protocol::messages::ApiKey::Produce),
        fetch_requests: requests_of(kafka_protocol::messages::ApiKey::Fetch),
        bytes_in: s.apis.iter().map(|a| a.bytes_in).sum(),
        bytes_out: s.apis.iter().map(|a| a.bytes_out).sum(),
        log_size_bytes: s.storage.log_size_bytes,
        log_written_bytes: s.storage.bytes_written,
    }
}

/// Size and bytes available of the filesystem holding `dir`; (0, 0) when
/// unknown.
pub(crate) fn filesystem(dir: &std::path::Path) -> (u64, u64) {
    use std::os::unix::ffi::OsStrExt;
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return (0, 0);
    };
    // SAFETY: statvfs writes into the zeroed struct; the path is a valid C string.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut stat) } != 0 {
        return (0, 0);
    }
    let block = stat.f_frsize as u64;
    (stat.f_blocks as u64 * block, stat.f_bavail as u64 * block)
}

fn status(state: &AdminState, snapshots: &[ShardSnapshot]) -> Status {
    let config = &state.config;
    let image = state.metadata.image();
    let all = total(snapshots);
    let (filesystem_bytes, filesystem_free_bytes) = filesystem(&config.data_dir);
    Status {
        version: env!("CARGO_PKG_VERSION").to_string(),
        node_id: config.node_id,
        ready: state.is_ready(),
        uptime_ms: state.started.elapsed().as_millis() as u64,
        started_at_unix_ms: state.started_unix_ms,
        listen: config.listen.to_string(),
        advertise: format!("{}:{}", config.advertise_host, config.advertise_port),
        data_dir: config.data_dir.display().to_string(),
        cores: config.cores,
        io_properties: config
            .io_properties
            .as_ref()
            .map(|a| a.path.display().to_string()),
        topics: image
            .topics
            .values()
            .map(|t| TopicStatus {
                name: t.name.clone(),
                partitions: t.partition_cores.len(),
            })
            .collect(),
        shards: snapshots
            .iter()
            .map(|s| shard_status(Some(s.shard), s))
            .collect(),
        totals: shard_status(None, &all),
        disk: DiskStatus {
            log_bytes: all.storage.log_size_bytes,
            on_disk: crate::disk_usage::measure(&config.data_dir),
            filesystem_bytes,
            filesystem_free_bytes,
        },
    }
}
