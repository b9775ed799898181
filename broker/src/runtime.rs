//! Start-up and shutdown: one glommio executor per core (pinned, spinning
//! before parking), the cross-core mesh, a signal thread, and the stop
//! sequence (stop accepting, drain connections, close logs).
//!
//! | thread | runs | lifetime |
//! |---|---|---|
//! | main | config, metadata log replay, then waits for events | whole process |
//! | `strom-signals` | `sigwait` for SIGINT/SIGTERM, forwards them | whole process |
//! | `strom-metadata` | appends and syncs the metadata log for the controller | whole process |
//! | `strom-core-N` (one per core) | listener, connections, owned partitions, jobs from other cores | start to stop |
//!
//! The main thread and the cores talk over small bounded flume channels
//! (never on the data path).

use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use glommio::{LocalExecutorBuilder, Placement};

use crate::config::{online_cores, BrokerConfig};
use crate::limits::{DRAIN_MS_MAX, SHUTDOWN_MS_MAX};
use crate::metadata::{MetadataImage, MetadataStore, MetadataWriter};
use crate::partition::Partition;
use crate::server;
use crate::shard::{build_mesh, MeshEnds, Shard};

/// What cores and the signal thread tell the main thread.
#[derive(Debug)]
enum Event {
    Ready {
        core: usize,
        /// Partitions the core opened.
        partitions: usize,
    },
    Fatal {
        core: usize,
        message: String,
    },
    Drained {
        core: usize,
        connections_left: usize,
    },
    Closed {
        core: usize,
        /// Partitions the core closed.
        partitions: usize,
    },
    Signal {
        signal: i32,
    },
}

/// What the main thread tells each core.
#[derive(Debug)]
enum Control {
    Stop,
    Close,
}

fn block_stop_signals() -> libc::sigset_t {
    // SAFETY: the set is initialised by sigemptyset before use and only
    // passed to signal functions; blocking here is inherited by every
    // thread spawned afterwards, so only the signal thread receives them.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

fn spawn_signal_thread(set: libc::sigset_t, events: flume::Sender<Event>) -> anyhow::Result<()> {
    std::thread::Builder::new()
        .name("strom-signals".to_string())
        .spawn(move || loop {
            let mut signal: libc::c_int = 0;
            // SAFETY: `set` is a valid signal set and `signal` a valid out pointer.
            let rc = unsafe { libc::sigwait(&set, &mut signal) };
            if rc == 0 && events.send(Event::Signal { signal }).is_err() {
                return;
            }
        })
        .context("cannot start the signal thread")?;
    Ok(())
}

/// What every core of the node starts from.
struct NodeShared {
    config: Arc<BrokerConfig>,
    metadata: Arc<MetadataStore>,
    /// The cluster this node is a member of (`None` on a single node).
    cluster: Option<Arc<crate::cluster::Cluster>>,
}

async fn core_main(
    core: usize,
    node: NodeShared,
    ends: MeshEnds,
    control: flume::Receiver<Control>,
    events: flume::Sender<Event>,
    scrapes: flume::Receiver<crate::scrape::ScrapeRequest>,
) {
    // Lives as long as the core: see `protocol::watchdog` for the glommio
    // hang it bounds.
    let watchdog = match protocol::watchdog::start(
        &format!("strom-core-{core}"),
        protocol::watchdog::PERIOD,
        protocol::watchdog::STALL_WARNING,
    ) {
        Ok(watchdog) => watchdog,
        Err(error) => {
            let message = format!("cannot start the core's watchdog thread: {error}");
            let _ = events.send(Event::Fatal { core, message });
            return;
        }
    };
    let NodeShared {
        config,
        metadata,
        cluster,
    } = node;
    let shard = Shard::new(
        core,
        config.cores,
        config.clone(),
        metadata.clone(),
        cluster.map(|cluster| cluster as Arc<dyn crate::metadata::Membership>),
    );
    // A group or transaction coordinator leaves with its partition's
    // leadership.
    shard.on_leadership_lost(|shard, topic, index| {
        if topic == crate::metadata::OFFSETS_TOPIC {
            crate::group::manager::unload(shard, index);
        } else if topic == crate::txn::TRANSACTION_STATE_TOPIC {
            crate::txn::manager::unload(shard, index);
        }
    });
    shard.connect_mesh(ends).await;
    // The controller listener and the connections to the controllers run
    // on core 0 from the start: the quorum and the agent need them while
    // the partitions open.
    if let Some(cluster) = crate::cluster::of(&shard).filter(|_| core == 0) {
        glommio::spawn_local(crate::cluster::transport::run_controller_channel(cluster)).detach();
    }

    // Changes committed since this core's table was made count too.
    crate::reconciler::install(&shard, &metadata.image());
    if core == 0 {
        // The keystores AlterConfigs set for this node's listeners.
        crate::config::apply_keystores(&shard.config, &shard.metadata.image(), false, &[]);
    }
    let opened = match crate::reconciler::open_missing(&shard, &shard.metadata.image()).await {
        Ok(opened) => opened,
        Err(failure) => {
            let _ = events.send(Event::Fatal {
                core,
                message: failure.to_string(),
            });
            return;
        }
    };

    let mut bound = Vec::with_capacity(config.listeners.len());
    for listener in &config.listeners {
        match server::bind(listener.address) {
            Ok(socket) => bound.push((socket, listener.clone())),
            Err(error) => {
                let message = format!(
                    "cannot listen on {} (listener {}): {error}",
                    listener.address, listener.name
                );
                let _ = events.send(Event::Fatal { core, message });
                return;
            }
        }
    }
    glommio::spawn_local(crate::scrape::serve_scrapes(shard.clone(), scrapes)).detach();
    // Start-up work (opening logs, the first touch of io memory) may hold
    // the core for a while; from here on that is a stall.
    watchdog.arm();
    let _ = events.send(Event::Ready {
        core,
        partitions: opened,
    });
    let accepts: Vec<_> = bound
        .into_iter()
        .map(|(socket, listener)| {
            glommio::spawn_local(accept_once_serving(shard.clone(), socket, listener))
        })
        .collect();
    if let Some(cluster) = crate::cluster::of(&shard) {
        glommio::spawn_local(crate::cluster::replication::run(
            shard.clone(),
            cluster.clone(),
        ))
        .detach();
        if core == 0 {
            glommio::spawn_local(crate::cluster::reconcile_loop(shard.clone(), cluster)).detach();
        }
    }
    glommio::spawn_local(retention_loop(shard.clone())).detach();
    // The cleaner runs in a task queue of its own with a small share of
    // the core, so produce and fetch keep their latency while it works.
    let cleaner_queue = glommio::executor().create_task_queue(
        glommio::Shares::Static(CLEANER_SHARES),
        glommio::Latency::NotImportant,
        "cleaner",
    );
    glommio::spawn_local_into(
        crate::compaction::cleaner_loop(shard.clone()),
        cleaner_queue,
    )
    .expect("the cleaner's task queue was just made")
    .detach();

    // Stop (or the main thread gone) ends accepting and reading.
    let _ = control.recv_async().await;
    shard.stopping.raise();
    for accept in accepts {
        accept.await;
    }
    futures_lite::future::or(
        shard.connections.wait_empty(),
        glommio::timer::sleep(Duration::from_millis(DRAIN_MS_MAX)),
    )
    .await;
    let _ = events.send(Event::Drained {
        core,
        connections_left: shard.connections.count(),
    });

    // Close only when every core has drained, so no hop arrives after.
    let _ = control.recv_async().await;
    let partitions: Vec<Rc<Partition>> = shard
        .partitions
        .borrow_mut()
        .drain()
        .flat_map(|(_, by_index)| by_index.into_values())
        .collect();
    let closed = partitions.len();
    for partition in partitions {
        partition.close().await;
    }
    let _ = events.send(Event::Closed {
        core,
        partitions: closed,
    });
}

/// Accepts clients on this core, in a cluster only once this broker is
/// registered and caught up with the metadata (as Kafka's brokers do):
/// until then the listener is bound, so a client's connection waits in
/// its backlog and is served from then on, rather than hearing of no
/// brokers and no controller. Ends when the broker stops.
async fn accept_once_serving(
    shard: Rc<Shard>,
    socket: glommio::net::TcpListener,
    listener: std::sync::Arc<crate::config::Listener>,
) {
    if let Some(cluster) = crate::cluster::of(&shard) {
        let stopped = futures_lite::future::or(
            async {
                cluster.until_serving().await;
                false
            },
            async {
                shard.stopping.wait().await;
                true
            },
        )
        .await;
        if stopped {
            return;
        }
    }
    server::accept_loop(shard, socket, listener).await;
}

/// Warns about each partition directory the metadata does not name: its
/// data is not served, and it is left as it is for the operator (a
/// damaged or repaired metadata log may have lost its topic).
/// How long a stopping cluster member waits for the active controller to
/// fence it and move its leaderships.
const CONTROLLED_SHUTDOWN_WAIT: Duration = Duration::from_secs(5);

/// Starts this node's part of the cluster: on a voter the quorum thread,
/// the controller listener and the connections to the other voters; on
/// every node the agent. The metadata then arrives from the quorum.
fn start_cluster(
    config: &BrokerConfig,
    stored_meta: Option<crate::meta_properties::MetaProperties>,
    clean_shutdown: bool,
) -> anyhow::Result<Arc<crate::cluster::Cluster>> {
    use crate::cluster::{transport, voter::Voter, Cluster};
    let local_log = config
        .data_dir
        .join(crate::metadata::METADATA_DIR)
        .join("metadata.log");
    if std::fs::metadata(&local_log).is_ok_and(|m| m.len() > 0) {
        bail!(
            "{} holds a single node's metadata log, but this node is configured as a member \
             of a cluster (controller.quorum.voters names other voters): a cluster member \
             starts from an empty data dir",
            local_log.display()
        );
    }
    let quorum = &config.quorum;
    let voter_entry = quorum
        .voters
        .iter()
        .find(|v| v.id == config.node_id && quorum.roles.controller);
    let image = MetadataImage::new(config.node_id);
    let Some(own) = voter_entry else {
        let cluster = Arc::new(Cluster::new(config, None, image));
        cluster
            .start_agent(config, stored_meta, clean_shutdown)
            .context("cannot start the broker's agent thread")?;
        return Ok(cluster);
    };
    let (inbox, inbox_rx) = flume::bounded(crate::limits::QUORUM_INBOX_MAX);
    let cluster = Arc::new(Cluster::new(config, Some(inbox), image.clone()));
    let listen = quorum
        .listeners
        .iter()
        .find(|l| quorum.is_controller_listener(&l.name))
        .map_or_else(
            || (own.host.clone(), own.port),
            |l| (l.host.clone(), l.port),
        );
    let address = std::net::ToSocketAddrs::to_socket_addrs(&(listen.0.as_str(), listen.1))
        .ok()
        .and_then(|mut a| a.next())
        .with_context(|| {
            format!(
                "the controller listener {}:{} does not resolve",
                listen.0, listen.1
            )
        })?;
    let raft_dir = config
        .data_dir
        .join(crate::metadata::METADATA_DIR)
        .join("raft");
    // Known before the controller listener answers other voters about it.
    let stored_commit = replication::file_store::FileStore::stored_commit(&raft_dir)
        .context("cannot read the controller quorum's store")?;
    let directories = Arc::new(
        crate::cluster::membership::Directories::load(&raft_dir, stored_commit.unwrap_or(0))
            .context("cannot read the controller quorum's directory id")?,
    );
    let _ = cluster.directories.set(directories.clone());
    // Bound now, so a port in use refuses the start; core 0 serves it.
    let listener = std::net::TcpListener::bind(address).map_err(|error| {
        anyhow::anyhow!("cannot listen on the controller listener {address}: {error}")
    })?;
    cluster.channel.listen(listener);
    let peers: Vec<(i32, String)> = quorum
        .voters
        .iter()
        .filter(|v| v.id != config.node_id)
        .map(|v| (v.id, format!("{}:{}", v.host, v.port)))
        .collect();
    let peers: crate::cluster::voter::Peers =
        Box::new(transport::RaftPeers::new(cluster.clone(), &peers));
    // The quorum thread first settles how this voter may take part: an
    // empty log only where no voter counts on it, which may mean waiting
    // for the other voters to be up. The broker starts meanwhile (it
    // serves clients once the quorum registered it); a refusal stops the
    // process with the reason.
    let quorum_cluster = cluster.clone();
    std::thread::Builder::new()
        .name("strom-quorum".to_string())
        .spawn(move || {
            let cluster = quorum_cluster;
            let start = match stored_commit {
                None => crate::cluster::membership::check_empty_start(&cluster, &directories),
                Some(_) => {
                    crate::cluster::membership::announce(cluster.clone(), directories.clone());
                    Ok(crate::cluster::membership::Start::Voter)
                }
            };
            let voter = start.and_then(|start| {
                Voter::open_as(cluster.clone(), &raft_dir, peers, inbox_rx, image, start)
                    .context("cannot open the controller quorum's store")
            });
            match voter {
                Ok(voter) => voter.run(),
                Err(error) => refuse_to_run(&error),
            }
        })
        .context("cannot start the quorum thread")?;
    cluster
        .start_agent(config, stored_meta, clean_shutdown)
        .context("cannot start the broker's agent thread")?;
    tracing::info!(
        node_id = config.node_id,
        controller_listener = %address,
        voters = %crate::kraft_config::render_voters(&quorum.voters),
        "controller quorum member started"
    );
    Ok(cluster)
}

/// Stops the process when a part that started in the background may not
/// run: the reason on stderr and in the log, exit 1 as a refused start.
fn refuse_to_run(error: &anyhow::Error) -> ! {
    tracing::error!("{error:#}");
    eprintln!("strom: {error:#}");
    std::process::exit(1)
}

fn report_unnamed_partition_dirs(data_dir: &std::path::Path, image: &MetadataImage) {
    match crate::metadata::unnamed_partition_dirs(data_dir, image) {
        Ok(dirs) => {
            for dir in dirs {
                tracing::warn!(
                    dir = %dir.display(),
                    holds_data = crate::metadata::partition_dir_holds_data(&dir),
                    "directory in the data dir that the metadata log names no partition for: \
                     not served, left untouched"
                );
            }
        }
        Err(error) => tracing::warn!(
            data_dir = %data_dir.display(),
            %error,
            "cannot list the data dir for directories the metadata does not name"
        ),
    }
}

/// Applies retention to this core's partitions every
/// `log.retention.check.interval.ms`, until the broker stops. The interval
/// may change while the broker runs, so the wait is cut into ticks of at
/// most `RETENTION_TICK` that each read it again.
/// The cleaner's share of its core against the default queue's 1000.
const CLEANER_SHARES: usize = 100;

async fn retention_loop(shard: Rc<Shard>) {
    const RETENTION_TICK: Duration = Duration::from_secs(1);
    let mut last = std::time::Instant::now();
    loop {
        let interval = Duration::from_millis(crate::config::dynamic::retention_check_interval_ms(
            &shard.config,
            &shard.metadata.image(),
        ));
        let due = last + interval;
        let now = std::time::Instant::now();
        if now < due {
            let wait = (due - now).min(RETENTION_TICK);
            if shard.stopping.sleep_unless_raised(wait).await {
                return;
            }
            continue;
        }
        last = now;
        let partitions: Vec<Rc<Partition>> = shard.open_partitions();
        for partition in partitions {
            partition.enforce_retention().await;
        }
    }
}

/// Keeps large buffers (fetch responses, read windows, request frames of
/// several MiB) in the heap instead of a fresh mmap each: glibc maps every
/// allocation above its (adaptive) threshold and unmaps it on free, so each
/// fetch paid page faults and the kernel zeroing its pages. Measured on
/// matrix case (c): broker system CPU 2.2 s -> 1.0 s for 2 GiB consumed.
/// Freed memory above the trim threshold still goes back to the system.
fn keep_large_buffers_in_the_heap() {
    #[cfg(target_env = "gnu")]
    {
        // glibc accepts at most 32 MiB (half its heap size) here.
        const MMAP_THRESHOLD: libc::c_int = 32 << 20;
        const TRIM_THRESHOLD: libc::c_int = 512 << 20;
        // SAFETY: mallopt only changes allocator parameters; called
        // before the executors start allocating.
        let set = unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
                && libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
        };
        if !set {
            tracing::warn!(
                "mallopt refused the allocator settings; large buffers are mapped per use"
            );
        }
    }
}

/// Runs the broker until SIGINT/SIGTERM or a fatal start-up error.
pub fn run(config: BrokerConfig) -> anyhow::Result<()> {
    // A panic on any thread, or a log storage fenced, ends the process.
    crate::fatal::install();
    keep_large_buffers_in_the_heap();
    let huge_pages_off = crate::allocator::configure();
    let config = crate::environment::check(config)?;
    // Held until this function returns, so for the process's whole life.
    let _data_dir_lock = crate::exclusive::DataDirLock::acquire(&config.data_dir)?;
    let _address_guards = config
        .listeners
        .iter()
        .map(|l| crate::exclusive::claim_listen_address(l.address))
        .collect::<anyhow::Result<Vec<_>>>()?;
    tracing::info!(
        "effective configuration: {}",
        crate::config::effective::render(&config)
    );
    crate::config::io_properties::log_use(&config);
    let stored_meta = crate::meta_properties::check_node(&config.data_dir, config.node_id)?;
    let marker = config.data_dir.join(crate::clean_shutdown::FILE_NAME);
    // Read now, taken away once the start-up checks passed (before any
    // log opens): a refused start leaves the data dir as it found it.
    let clean_shutdown = crate::clean_shutdown::found(&config.data_dir)
        .with_context(|| format!("cannot read the clean-shutdown marker {}", marker.display()))?;
    tracing::info!(
        clean_shutdown,
        "{}",
        if clean_shutdown {
            "the previous process stopped cleanly"
        } else {
            "no clean stop recorded before this start (a crash, or a new data dir)"
        }
    );
    let signals = block_stop_signals();
    let (metadata, topics, cluster) = if crate::cluster::is_cluster(&config) {
        let cluster = start_cluster(&config, stored_meta, clean_shutdown)?;
        let store = Arc::new(MetadataStore::replicated(cluster.clone()));
        (store, 0, Some(cluster))
    } else {
        let (log, image) = crate::metadata::open(&config.data_dir, config.node_id)
            .context("cannot open the metadata log")?;
        crate::meta_properties::check_cluster_or_write(
            &config.data_dir,
            stored_meta.as_ref(),
            config.node_id,
            &image.cluster_id,
        )?;
        let topics = image.topics.len();
        report_unnamed_partition_dirs(&config.data_dir, &image);
        let writer = MetadataWriter::start(Box::new(log))
            .context("cannot start the metadata log's writer thread")?;
        (Arc::new(MetadataStore::new(writer, image)), topics, None)
    };
    if clean_shutdown {
        crate::clean_shutdown::take(&config.data_dir).with_context(|| {
            format!(
                "cannot take the clean-shutdown marker {} from the data dir",
                marker.display()
            )
        })?;
    }
    let config = Arc::new(config);
    let cores = config.cores;

    let (events_tx, events_rx) = flume::bounded::<Event>(4 * cores + 16);
    spawn_signal_thread(signals, events_tx.clone())?;
    let (admin, scrape_receivers) =
        crate::admin_http::start(config.clone(), metadata.clone(), cluster.clone())?;
    let mut scrape_receivers = scrape_receivers.into_iter();

    let online = online_cores();
    let mut controls = Vec::with_capacity(cores);
    let mut handles = Vec::with_capacity(cores);
    for (core, ends) in build_mesh(cores).into_iter().enumerate() {
        let (control_tx, control_rx) = flume::bounded::<Control>(2);
        controls.push(control_tx);
        let cpu = if config.cpuset.is_empty() {
            core % online
        } else {
            config.cpuset[core]
        };
        let mut builder = LocalExecutorBuilder::new(Placement::Fixed(cpu))
            .spin_before_park(Duration::from_micros(config.spin_before_park_us))
            .name(&format!("strom-core-{core}"));
        if let Some(bytes) = config.io_memory_bytes {
            builder = builder.io_memory(bytes);
        }
        let node = NodeShared {
            config: config.clone(),
            metadata: metadata.clone(),
            cluster: cluster.clone(),
        };
        let events = events_tx.clone();
        let scrapes = scrape_receivers
            .next()
            .expect("one scrape receiver per core");
        let handle = builder
            .spawn(move || core_main(core, node, ends, control_rx, events, scrapes))
            .map_err(|e| {
                anyhow::anyhow!(
                    "cannot start the executor for core {core} (is io_uring available?): {e}"
                )
            })?;
        handles.push(handle);
    }
    drop(events_tx);

    let mut ready = 0;
    let mut partitions = 0;
    let opening_started = Instant::now();
    let mut failure: Option<String> = None;
    // A core that reported a fatal error has returned: it neither drains
    // nor closes, so the stop sequence must not wait for it.
    let mut gone = 0;
    // A stop signal during start-up is a normal stop once the cores are up.
    let mut stop_requested = false;
    while ready < cores && failure.is_none() {
        match events_rx.recv() {
            Ok(Event::Ready {
                core,
                partitions: opened,
            }) => {
                tracing::debug!(core, partitions = opened, "core ready");
                partitions += opened;
                ready += 1;
            }
            Ok(Event::Fatal { core, message }) => {
                // Logged at once: the cause must reach the operator even
                // if stopping the other cores goes wrong.
                tracing::error!(core, "start-up failed: {message}");
                gone += 1;
                failure = Some(format!("core {core}: {message}"));
            }
            Ok(Event::Signal { signal }) => {
                tracing::info!(signal, "stop requested during start-up");
                stop_requested = true;
            }
            Ok(other) => tracing::debug!(?other, "unexpected event during start-up"),
            Err(_) => failure = Some("every core stopped during start-up".to_string()),
        }
    }
    if failure.is_none() {
        tracing::info!(
            topics,
            cores,
            elapsed_ms = opening_started.elapsed().as_millis() as u64,
            "opened {partitions} partitions"
        );
        admin.set_ready();
        for listener in &config.listeners {
            let oauth = listener.sasl.as_ref().and_then(|sasl| sasl.oauth.as_ref());
            if oauth.is_some_and(|o| !o.checks_signatures()) {
                tracing::warn!(
                    listener = %listener.name,
                    "OAUTHBEARER takes unsigned tokens on this listener (Kafka's unsecured \
                     validator, for development): anyone may claim any principal; set \
                     sasl.oauthbearer.jwks.endpoint.url to check signatures"
                );
            }
        }
        tracing::info!(
            listeners = %config
                .listeners
                .iter()
                .map(|l| format!(
                    "{}://{} ({}, advertised {}:{})",
                    l.name, l.address, l.protocol, l.advertise_host, l.advertise_port
                ))
                .collect::<Vec<_>>()
                .join(", "),
            inter_broker_listener = %config.inter_broker.listener,
            data_dir = %config.data_dir.display(),
            cores,
            topics,
            node_id = config.node_id,
            transparent_huge_pages = %if huge_pages_off { "off" } else { "on" },
            "strom started"
        );
        // Until a stop signal or a fatal error; each arm that ends it breaks.
        #[allow(clippy::while_immutable_condition)]
        while !stop_requested {
            match events_rx.recv() {
                Ok(Event::Signal { signal }) => {
                    tracing::info!(signal, "stopping");
                    break;
                }
                Ok(Event::Fatal { core, message }) => {
                    tracing::error!(core, "{message}");
                    gone += 1;
                    failure = Some(format!("core {core}: {message}"));
                    break;
                }
                Ok(other) => tracing::debug!(?other, "event"),
                Err(_) => {
                    failure = Some("every core stopped".to_string());
                    break;
                }
            }
        }
    }

    if let Some(message) = &failure {
        // Logged now: a stop that then times out must not hide the cause.
        tracing::error!(%message, "stopping after a fatal error");
    }
    admin.set_stopping();
    if let Some(cluster) = &cluster {
        if failure.is_none() {
            let confirmed = cluster.controlled_shutdown(CONTROLLED_SHUTDOWN_WAIT);
            tracing::info!(
                confirmed,
                "controlled shutdown: the active controller moved this broker's leaderships"
            );
        }
    }
    let deadline = Instant::now() + Duration::from_millis(SHUTDOWN_MS_MAX);
    let stop_started = Instant::now();
    for control in &controls {
        let _ = control.send(Control::Stop);
    }
    let mut drained = gone;
    while drained < cores {
        match events_rx.recv_deadline(deadline) {
            Ok(Event::Drained {
                core,
                connections_left,
            }) => {
                if connections_left > 0 {
                    tracing::warn!(
                        core,
                        connections_left,
                        "connections still open after the drain time"
                    );
                }
                drained += 1;
            }
            Ok(Event::Ready { .. }) | Ok(Event::Signal { .. }) => {}
            Ok(Event::Fatal { core, message }) => {
                // Another core failed while this one was failing: it is
                // gone too, and its cause is kept.
                tracing::error!(core, "start-up failed: {message}");
                gone += 1;
                drained += 1;
                failure.get_or_insert(format!("core {core}: {message}"));
            }
            Ok(other) => tracing::debug!(?other, "event while draining"),
            Err(_) => break,
        }
    }
    for control in &controls {
        let _ = control.send(Control::Close);
    }
    let mut closed = gone;
    let mut partitions_closed = 0;
    while closed < cores {
        match events_rx.recv_deadline(deadline) {
            Ok(Event::Closed { core, partitions }) => {
                tracing::debug!(core, partitions, "core closed");
                partitions_closed += partitions;
                closed += 1;
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    if closed < cores {
        let stuck = format!(
            "{} of {cores} cores did not stop within {SHUTDOWN_MS_MAX} ms",
            cores - closed
        );
        // The first failure is the cause; the cores that did not stop
        // are a consequence and come second.
        match failure {
            Some(message) => bail!("{message} (then {stuck})"),
            None => bail!(stuck),
        }
    }
    for handle in handles {
        // A panic exits in the hook (`fatal`), before any join sees it.
        let _ = handle.join();
    }
    if let Some(message) = failure {
        bail!(message);
    }
    if let Err(error) = crate::clean_shutdown::mark(&config.data_dir) {
        // The next start is then taken as after a crash: safe, only slower.
        tracing::warn!(%error, "cannot mark the stop clean in the data dir");
    }
    tracing::info!(
        partitions_closed,
        elapsed_ms = stop_started.elapsed().as_millis() as u64,
        "strom stopped"
    );
    Ok(())
}
