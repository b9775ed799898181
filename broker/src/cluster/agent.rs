//! The broker's agent (`strom-broker-agent` thread): heartbeats to the
//! active controller every `broker.heartbeat.interval.ms` (the first of an
//! incarnation registers the broker), keeps `meta.properties` in step with
//! the cluster id, refuses to serve a cluster other than the data dir's,
//! stops the broker cleanly on request, and opens the broker to clients
//! once it is registered and caught up with the metadata
//! ([`Cluster::start_serving`]). On a broker that is not a voter the
//! committed metadata arrives through the [`super::follower`].

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::transport::{Lane, IO_TIMEOUT};
use super::wire::{Frame, Heartbeat, HeartbeatStatus, Startup};
use super::Cluster;
use crate::meta_properties::{self, MetaProperties};
use crate::metadata::BrokerMeta;

/// The heartbeat interval until the broker serves clients: registering
/// and seeing the registration applied takes a few heartbeats, and
/// clients wait for it, so these come much sooner than
/// `broker.heartbeat.interval.ms` (Kafka's 2 s).
const STARTING_HEARTBEAT_INTERVAL: Duration = Duration::from_millis(50);
/// While the broker does not serve clients yet, it says why this often.
const NOT_SERVING_NOTICE_EVERY: Duration = Duration::from_secs(10);

/// How long a heartbeat waits for its answer: a quarter of the session
/// (the controller answers at once), at least one heartbeat interval, at
/// most [`IO_TIMEOUT`]. A network partition closes nothing: a
/// heartbeat to an active controller cut off from this broker hangs until
/// this runs out, and only then does the broker look for the new one,
/// which gives it this plus a few intervals to be heard (see
/// `voter::failover_grace`). With the whole `IO_TIMEOUT` (5 s) a broker
/// missed the new controller's grace, and every broker that had
/// heartbeated to the old one was fenced, the new controller's own too.
pub fn heartbeat_timeout(timing: &crate::config::ClusterTiming) -> Duration {
    Duration::from_millis(timing.session_timeout_ms / 4)
        .max(Duration::from_millis(timing.heartbeat_interval_ms))
        .min(IO_TIMEOUT)
}

pub struct Agent {
    cluster: Arc<Cluster>,
    broker: BrokerMeta,
    data_dir: PathBuf,
    stored: Option<MetaProperties>,
    /// How the data dir was found at start, told with every heartbeat.
    startup: Startup,
    interval: Duration,
    /// The voter tried next.
    target: usize,
    commands: flume::Receiver<Command>,
    /// When the agent started, and when it last said why the broker does
    /// not serve clients yet.
    started: std::time::Instant,
    noticed: std::time::Instant,
}

/// What the rest of the broker asks of its agent.
pub enum Command {
    /// Stop cleanly: answered true once the controller fenced this broker.
    Stop(flume::Sender<bool>),
    /// Heartbeat now: answered with the metadata offset the active
    /// controller had applied (0 if none answered).
    Sync(flume::Sender<u64>),
}

impl Agent {
    pub fn start(
        cluster: Arc<Cluster>,
        broker: BrokerMeta,
        data_dir: PathBuf,
        stored: Option<MetaProperties>,
        clean_shutdown: bool,
    ) -> std::io::Result<flume::Sender<Command>> {
        let (commands_tx, commands) = flume::bounded(16);
        let interval = Duration::from_millis(cluster.timing.heartbeat_interval_ms);
        let agent = Agent {
            target: cluster
                .voters
                .iter()
                .position(|v| v.id == cluster.node_id)
                .unwrap_or(0),
            cluster,
            broker,
            data_dir,
            startup: Startup {
                clean: clean_shutdown,
                new_directory: stored.is_none(),
            },
            stored,
            interval,
            commands,
            started: std::time::Instant::now(),
            noticed: std::time::Instant::now(),
        };
        std::thread::Builder::new()
            .name("strom-broker-agent".to_string())
            .spawn(move || agent.run())?;
        Ok(commands_tx)
    }

    fn run(mut self) {
        let mut stopping: Option<flume::Sender<bool>> = None;
        loop {
            self.check_cluster_id();
            let shutting_down = stopping.is_some();
            let fenced = self.heartbeat(shutting_down).map(|(fenced, _)| fenced);
            if let Some(done) = &stopping {
                if fenced == Some(true) {
                    tracing::info!("the controller fenced this broker for its shutdown");
                    let _ = done.send(true);
                    return;
                }
            }
            let wait = if shutting_down {
                Duration::from_millis(100)
            } else if !self.cluster.is_serving() {
                self.note_not_serving();
                STARTING_HEARTBEAT_INTERVAL.min(self.interval)
            } else {
                self.interval
            };
            match self.commands.recv_timeout(wait) {
                Ok(Command::Stop(done)) => stopping = Some(done),
                Ok(Command::Sync(done)) => {
                    let applied = self
                        .heartbeat(shutting_down)
                        .map_or(0, |(_, applied)| applied);
                    let _ = done.send(applied);
                }
                Err(flume::RecvTimeoutError::Timeout) => {}
                Err(flume::RecvTimeoutError::Disconnected) => {
                    if stopping.is_none() {
                        return;
                    }
                }
            }
        }
    }

    /// Writes the cluster id into `meta.properties` once known and this
    /// process's registration is in the metadata, and stops the broker if
    /// the data dir belongs to another cluster.
    fn check_cluster_id(&mut self) {
        let id = self.cluster.cluster_id();
        if id.is_empty() {
            return;
        }
        match &self.stored {
            Some(stored) if stored.cluster_id != id => {
                self.foreign(&stored.cluster_id, &id, "the quorum's metadata")
            }
            Some(_) => {}
            // A new data dir becomes the cluster's only once the controller
            // registered it as new: a crash before that must start as new
            // again (`placement::may_record_directory`).
            None if !super::placement::may_record_directory(
                &self.cluster.image(),
                self.broker.id,
                self.broker.incarnation,
            ) => {}
            None => {
                let meta = MetaProperties {
                    cluster_id: id.clone(),
                    node_id: self.cluster.node_id,
                };
                if let Err(error) = meta_properties::write(&self.data_dir, &meta) {
                    crate::fatal::exit(&format!("cannot record the cluster id: {error}"));
                }
                tracing::info!(cluster_id = %id, "this node joined the cluster");
                self.stored = Some(meta);
            }
        }
    }

    fn foreign(&self, ours: &str, theirs: &str, source: &str) -> ! {
        crate::fatal::exit(&format!(
            "this node's data dir {} belongs to cluster {ours}, but {source} is of cluster \
             {theirs}: it stays out of that cluster. Give it an empty data dir to join {theirs}.",
            self.data_dir.display()
        ))
    }

    /// Our cluster id: the data dir's, else the metadata's ("" for none).
    fn our_cluster_id(&self) -> String {
        self.stored
            .as_ref()
            .map(|m| m.cluster_id.clone())
            .unwrap_or_else(|| self.cluster.cluster_id())
    }

    /// The voter to ask: the active controller if known, else the next.
    fn pick_target(&mut self) -> Option<(i32, String)> {
        self.cluster.controller_to_ask(&mut self.target)
    }

    /// Opens the broker to clients once the active controller accepted a
    /// heartbeat, this process's registration is in the metadata this
    /// node applied, unfenced, that metadata is at least what the
    /// controller had applied when it answered (`controller_applied`), and
    /// the data dir records the cluster id (`meta.properties`). Kafka's
    /// brokers open their client listeners at the same point: a client
    /// served before it would hear of no brokers and no controller, and a
    /// broker that took records before its data dir named the cluster
    /// would return from a crash looking like a new, empty one.
    fn serve_once_caught_up(&self, controller_applied: u64) {
        if self.cluster.is_serving() || self.stored.is_none() {
            return;
        }
        let image = self.cluster.image();
        let registered = image
            .brokers
            .get(&self.broker.id)
            .is_some_and(|b| b.incarnation == self.broker.incarnation && !b.fenced);
        if !registered || image.offset < controller_applied {
            return;
        }
        self.cluster.start_serving();
        tracing::info!(
            metadata_offset = image.offset,
            controller = self.cluster.active_controller(),
            elapsed_ms = self.started.elapsed().as_millis() as u64,
            "registered with the active controller and caught up with the metadata: serving clients"
        );
    }

    /// Says, now and then, why the broker does not serve clients yet.
    fn note_not_serving(&mut self) {
        if self.noticed.elapsed() < NOT_SERVING_NOTICE_EVERY {
            return;
        }
        self.noticed = std::time::Instant::now();
        let image = self.cluster.image();
        let registration = match image.brokers.get(&self.broker.id) {
            Some(b) if b.incarnation != self.broker.incarnation => "an earlier process's",
            Some(b) if b.fenced => "fenced",
            Some(_) => "unfenced",
            None => "none",
        };
        tracing::info!(
            waited_ms = self.started.elapsed().as_millis() as u64,
            controller = self.cluster.active_controller(),
            metadata_offset = image.offset,
            registration,
            cluster_id_recorded = self.stored.is_some(),
            "not serving clients yet: waiting to be registered with the active controller and caught up with the metadata"
        );
    }

    /// One heartbeat round (following one redirect); whether the broker
    /// is fenced and what the controller applied, if one answered.
    fn heartbeat(&mut self, shutting_down: bool) -> Option<(bool, u64)> {
        for _ in 0..2 {
            let (id, address) = self.pick_target()?;
            let heartbeat = Frame::Heartbeat(Heartbeat {
                broker: self.broker.clone(),
                applied: self.cluster.image().offset,
                shutting_down,
                startup: self.startup,
                storage_full: crate::storage_health::StorageHealth::get()
                    .check_room(&self.data_dir),
            });
            let timeout = heartbeat_timeout(&self.cluster.timing);
            let reply = match self.call(&address, heartbeat, timeout) {
                Ok(reply) => reply,
                Err(error) => {
                    tracing::debug!(voter = id, %address, %error, "heartbeat not answered");
                    self.cluster.heard_leader(-1);
                    continue;
                }
            };
            let ours = self.our_cluster_id();
            if !reply.cluster_id.is_empty() && !ours.is_empty() && reply.cluster_id != ours {
                self.foreign(&ours, &reply.cluster_id, &format!("controller {address}"));
            }
            let Frame::HeartbeatReply(reply) = reply.frame else {
                continue;
            };
            self.cluster.heard_leader(reply.leader);
            match reply.status {
                HeartbeatStatus::NotController => {
                    if reply.leader <= 0 || reply.leader == id {
                        return None;
                    }
                    // The next round asks the leader this voter named.
                }
                HeartbeatStatus::Accepted { fenced } => {
                    // The data dir records the cluster before the broker
                    // serves it (the id may have just been applied).
                    self.check_cluster_id();
                    self.serve_once_caught_up(reply.applied);
                    return Some((fenced, reply.applied));
                }
            }
        }
        None
    }

    /// Sends `frame` to `address` and waits up to `timeout` for the
    /// answer; the connection is dropped when the call fails.
    fn call(
        &mut self,
        address: &str,
        frame: Frame,
        timeout: Duration,
    ) -> std::io::Result<super::wire::Envelope> {
        let cluster_id = self.our_cluster_id();
        self.cluster
            .channel
            .call(Lane::Agent, address, &cluster_id, frame, timeout)
    }
}
