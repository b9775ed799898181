//! The cluster: several brokers sharing metadata through a Raft quorum of
//! controllers (the KRaft design, on raft-rs).
//!
//! A node is in a cluster when `controller.quorum.voters` names other
//! voters, or when it is a broker only. Then:
//! - every voter runs the quorum ([`voter`]) on a thread of its own; its
//!   controller listener and connections to the other voters, like every
//!   other byte between brokers, go through the one inter-broker channel
//!   ([`transport`]);
//! - every node runs an agent ([`agent`]) that heartbeats to the active
//!   controller (registering the broker, keeping its session, stopping
//!   it cleanly) and, on a broker that is not a voter, fetches the
//!   committed metadata from the controllers;
//! - the image the quorum commits is published here ([`Cluster::publish`])
//!   and core 0 makes every core's partitions match it ([`reconcile_loop`]);
//! - topic changes are decided on core 0 of the active controller
//!   (`controller`) and proposed through [`Cluster::propose`]; the other
//!   brokers forward admin requests there ([`forward`]).
//!
//! A single node (no other voters) keeps the metadata log in one local
//! file, as before: a quorum of one needs no consensus.

pub mod agent;
pub mod envelope;
pub mod follower;
pub mod forward;
pub mod links;
pub mod membership;
pub use ::replication::placement;
pub mod probe;
pub mod replication;
pub mod transport;
pub mod voter;
pub mod wire;

use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use crate::config::{BrokerConfig, ClusterTiming};
use crate::kraft_config::Voter as VoterAddress;
use crate::metadata::{BrokerMeta, Endpoint, MetadataImage, MetadataRecord};
use crate::shard::Shard;
use voter::{Input, ProposeError};

/// Whether `config` makes this node a member of a cluster.
pub fn is_cluster(config: &BrokerConfig) -> bool {
    let quorum = &config.quorum;
    !quorum.roles.controller
        || quorum.voters.iter().any(|v| v.id != config.node_id)
        || !quorum.bootstrap_servers.is_empty()
}

/// The Raft role of a voter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Role {
    Leader,
    Follower,
    #[default]
    Candidate,
    /// A broker that is not a voter.
    Observer,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Leader => "leader",
            Role::Follower => "follower",
            Role::Candidate => "candidate",
            Role::Observer => "observer",
        }
    }
}

/// What the quorum thread last reported.
#[derive(Debug, Clone, Default)]
pub struct QuorumStatus {
    pub role: Role,
    /// The active controller (-1: none known).
    pub leader: i32,
    pub term: u64,
    pub commit_index: u64,
    pub applied: u64,
    /// On the leader: each voter's replicated index.
    pub progress: Vec<(i32, u64)>,
    /// The voters and learners of the configuration this voter applied
    /// (ascending; empty before its quorum thread reports).
    pub voters: Vec<i32>,
    pub learners: Vec<i32>,
}

/// This node's view of the cluster, shared by its threads and cores.
pub struct Cluster {
    pub node_id: i32,
    pub voters: Vec<VoterAddress>,
    bootstrap_servers: Vec<(String, u16)>,
    pub timing: ClusterTiming,
    /// A voter snapshots its metadata image after this many bytes of
    /// log applied since its last snapshot (`strom.metadata.snapshot.bytes`).
    pub snapshot_log_bytes: u64,
    /// `unclean.leader.election.enable` of the configuration (a topic's
    /// own setting wins).
    pub unclean_default: bool,
    /// The quorum thread's inbox, on a voter.
    pub inbox: Option<flume::Sender<Input>>,
    /// The controller listener and the connections to the controllers,
    /// run on core 0, for this node's threads.
    pub channel: transport::ControllerChannel,
    /// TLS and SASL on the controller listener, served and shown.
    pub security: Arc<crate::config::ControllerSecurity>,
    /// The authorizer, which lets only principals allowed CLUSTER_ACTION
    /// on the cluster use the controller listener (when on).
    pub authorizer: Option<Arc<crate::authorizer::Authorizer>>,
    image: RwLock<Arc<MetadataImage>>,
    status: Mutex<QuorumStatus>,
    /// The active controller as the agent last heard (brokers that are not
    /// voters learn it from heartbeats).
    heard_leader: AtomicI32,
    changed: flume::Sender<()>,
    changed_rx: Mutex<Option<flume::Receiver<()>>>,
    /// The agent's command queue, once it runs.
    agent: std::sync::OnceLock<flume::Sender<agent::Command>>,
    /// On a voter: its log's directory and the other voters' (set before
    /// the controller listener serves).
    pub directories: std::sync::OnceLock<Arc<membership::Directories>>,
    /// Whether this broker serves clients: once it is registered and has
    /// caught up with the metadata ([`Cluster::start_serving`]).
    serving: AtomicBool,
    /// Dropped when serving starts, which wakes every core waiting on
    /// `serving_rx` ([`Cluster::until_serving`]).
    serving_tx: Mutex<Option<flume::Sender<()>>>,
    serving_rx: flume::Receiver<()>,
    /// How long committed metadata took to reach this broker (a broker
    /// that is not a voter): from the active controller's apply to this
    /// broker's publish.
    pub propagation: PropagationHistogram,
    /// ISR changes, leader elections and failovers, for `/metrics`.
    pub probe: probe::ClusterProbe,
    /// This process's incarnation, once the agent runs.
    incarnation: std::sync::OnceLock<u64>,
}

impl crate::metadata::Membership for Cluster {
    fn may_lead(&self, image: &MetadataImage) -> bool {
        Cluster::may_lead(self, image)
    }

    fn as_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }
}

/// The cluster this node is a member of (`None` on a single node).
pub fn of(shard: &Shard) -> Option<Arc<Cluster>> {
    let membership = shard.membership()?.clone();
    Some(
        membership
            .as_any()
            .downcast::<Cluster>()
            .expect("a node's membership is its cluster"),
    )
}

impl crate::metadata::CommittedImage for Cluster {
    fn image(&self) -> Arc<MetadataImage> {
        Cluster::image(self)
    }
}

impl Cluster {
    pub fn new(
        config: &BrokerConfig,
        inbox: Option<flume::Sender<Input>>,
        image: MetadataImage,
    ) -> Self {
        let (changed, changed_rx) = flume::bounded(1);
        let (serving_tx, serving_rx) = flume::bounded(1);
        Cluster {
            node_id: config.node_id,
            voters: config.quorum.voters.clone(),
            bootstrap_servers: config.quorum.bootstrap_servers.clone(),
            snapshot_log_bytes: config.metadata_snapshot_bytes,
            unclean_default: config
                .topic_defaults
                .get("unclean.leader.election.enable")
                .is_some_and(|v| v == "true"),
            timing: config.cluster_timing,
            status: Mutex::new(QuorumStatus {
                role: if inbox.is_some() {
                    Role::Candidate
                } else {
                    Role::Observer
                },
                leader: -1,
                ..QuorumStatus::default()
            }),
            inbox,
            channel: transport::ControllerChannel::default(),
            security: Arc::new(config.controller_security.clone()),
            authorizer: config.authorizer.clone(),
            image: RwLock::new(Arc::new(image)),
            heard_leader: AtomicI32::new(-1),
            changed,
            changed_rx: Mutex::new(Some(changed_rx)),
            agent: std::sync::OnceLock::new(),
            directories: std::sync::OnceLock::new(),
            serving: AtomicBool::new(false),
            serving_tx: Mutex::new(Some(serving_tx)),
            serving_rx,
            propagation: PropagationHistogram::default(),
            probe: probe::ClusterProbe::default(),
            incarnation: std::sync::OnceLock::new(),
        }
    }

    /// Whether this process may act on leaderships `image` gives this
    /// node ([`placement::may_lead`]); never before the agent runs.
    pub fn may_lead(&self, image: &MetadataImage) -> bool {
        self.incarnation
            .get()
            .is_some_and(|&incarnation| placement::may_lead(image, self.node_id, incarnation))
    }

    pub fn is_voter(&self) -> bool {
        self.inbox.is_some()
    }

    /// The last committed image this node applied.
    pub fn image(&self) -> Arc<MetadataImage> {
        self.image.read().expect("cluster image lock").clone()
    }

    pub fn cluster_id(&self) -> String {
        self.image().cluster_id.clone()
    }

    /// Makes `image` the committed one and wakes core 0 to reconcile.
    pub fn publish(&self, image: &MetadataImage) {
        let counting = probe::Counting {
            serving: self.is_serving(),
            controller: self.is_active_controller(),
        };
        let old = std::mem::replace(
            &mut *self.image.write().expect("cluster image lock"),
            Arc::new(image.clone()),
        );
        self.probe.published(&old, image, self.node_id, counting);
        let _ = self.changed.try_send(());
    }

    /// Whether this broker serves clients yet.
    pub fn is_serving(&self) -> bool {
        self.serving.load(Ordering::Acquire)
    }

    /// This broker is registered and caught up with the metadata: its
    /// cores start accepting clients (once; later calls do nothing).
    pub fn start_serving(&self) {
        self.serving.store(true, Ordering::Release);
        // Every core waiting in `until_serving` wakes: the channel closed.
        self.serving_tx.lock().expect("serving lock").take();
    }

    /// Returns once this broker serves clients.
    pub async fn until_serving(&self) {
        if self.is_serving() {
            return;
        }
        // Nothing is ever sent: the sender's drop ends the wait.
        let _ = self.serving_rx.recv_async().await;
    }

    /// The controller to ask: the active one if known, else the next of
    /// [`Cluster::controller_candidates`] after `*rotation` (which moves
    /// on, so each failure tries another).
    pub fn controller_to_ask(&self, rotation: &mut usize) -> Option<(i32, String)> {
        let leader = self.active_controller();
        if let Some(address) = (leader > 0).then(|| self.voter_address(leader)).flatten() {
            return Some((leader, address));
        }
        let candidates = self.controller_candidates();
        if candidates.is_empty() {
            return None;
        }
        *rotation = (*rotation + 1) % candidates.len();
        Some(candidates[*rotation].clone())
    }

    pub fn set_quorum_status(&self, status: QuorumStatus) {
        *self.status.lock().expect("status lock") = status;
    }

    pub fn quorum_status(&self) -> QuorumStatus {
        self.status.lock().expect("status lock").clone()
    }

    pub fn heard_leader(&self, leader: i32) {
        self.heard_leader.store(leader, Ordering::Relaxed);
    }

    /// The active controller as this node knows it (-1: none).
    pub fn active_controller(&self) -> i32 {
        if self.is_voter() {
            self.quorum_status().leader
        } else {
            self.heard_leader.load(Ordering::Relaxed)
        }
    }

    pub fn is_active_controller(&self) -> bool {
        self.is_voter() && self.quorum_status().role == Role::Leader
    }

    /// The controller listener address of voter `id`: from
    /// `controller.quorum.voters`, else from its registration.
    pub fn voter_address(&self, id: i32) -> Option<String> {
        if let Some(v) = self.voters.iter().find(|v| v.id == id) {
            return Some(format!("{}:{}", v.host, v.port));
        }
        self.image()
            .brokers
            .get(&id)
            .map(|b| b.controller_address.clone())
            .filter(|a| !a.is_empty())
    }

    /// The controllers to try when none is known to be active: the voters,
    /// else `controller.quorum.bootstrap.servers` (ids unknown: -1).
    pub fn controller_candidates(&self) -> Vec<(i32, String)> {
        if !self.voters.is_empty() {
            return self
                .voters
                .iter()
                .map(|v| (v.id, format!("{}:{}", v.host, v.port)))
                .collect();
        }
        self.bootstrap_servers
            .iter()
            .map(|(host, port)| (-1, format!("{host}:{port}")))
            .collect()
    }

    /// Starts this node's agent (once), and on a broker that is not a
    /// voter its metadata follower.
    pub fn start_agent(
        self: &Arc<Self>,
        config: &BrokerConfig,
        stored: Option<crate::meta_properties::MetaProperties>,
        clean_shutdown: bool,
    ) -> std::io::Result<()> {
        let broker = identity(config);
        let _ = self.incarnation.set(broker.incarnation);
        let commands = agent::Agent::start(
            self.clone(),
            broker,
            config.data_dir.clone(),
            stored,
            clean_shutdown,
        )?;
        // A data dir that starts refusing writes is told at once.
        let wake = commands.clone();
        crate::storage_health::StorageHealth::get().on_full(Box::new(move || {
            let (answer, _) = flume::bounded(1);
            let _ = wake.try_send(agent::Command::Sync(answer));
        }));
        let _ = self.agent.set(commands);
        if !self.is_voter() {
            follower::Follower::start(self.clone())?;
        }
        Ok(())
    }

    /// The metadata offset the active controller has applied, asked now
    /// (0 when no controller answers).
    pub async fn controller_applied(&self) -> u64 {
        let Some(agent) = self.agent.get() else {
            return 0;
        };
        let (tx, rx) = flume::bounded(1);
        if agent.send_async(agent::Command::Sync(tx)).await.is_err() {
            return 0;
        }
        rx.recv_async().await.unwrap_or(0)
    }

    /// Sends a leader's ISR change to the active controller; its Kafka
    /// error code (NONE once committed). The shortest path that keeps it a
    /// Raft decision: into this node's quorum thread when it is the active
    /// controller, else straight from the calling core over the controller
    /// channel (no thread or tick in between), following one redirect.
    pub async fn alter_partition(&self, alter: wire::AlterPartition) -> i16 {
        use transport::{Lane, IO_TIMEOUT};
        if let Some(inbox) = self.inbox.as_ref().filter(|_| self.is_active_controller()) {
            let (tx, rx) = flume::bounded(1);
            if inbox
                .send_async(Input::AlterPartition(alter.clone(), tx))
                .await
                .is_ok()
            {
                let answer =
                    futures_lite::future::or(async { rx.recv_async().await.ok() }, async {
                        glommio::timer::sleep(IO_TIMEOUT).await;
                        None
                    })
                    .await;
                match answer {
                    Some(code) if code != crate::errors::NOT_CONTROLLER => return code,
                    // Its leadership ended meanwhile: ask the new one.
                    Some(_) => {}
                    None => return crate::errors::REQUEST_TIMED_OUT,
                }
            }
        }
        let mut rotation = 0;
        for _ in 0..2 {
            let Some((id, address)) = self.controller_to_ask(&mut rotation) else {
                break;
            };
            let frame = wire::Frame::AlterPartition(alter.clone());
            let cluster_id = self.cluster_id();
            match self
                .channel
                .call_async(Lane::Isr, &address, &cluster_id, frame, IO_TIMEOUT)
                .await
            {
                Ok(reply) => match reply.frame {
                    wire::Frame::AlterPartitionReply { error_code }
                        if error_code != crate::errors::NOT_CONTROLLER =>
                    {
                        return error_code
                    }
                    wire::Frame::AlterPartitionReply { .. } => {}
                    _ => break,
                },
                Err(error) => {
                    tracing::debug!(voter = id, %address, %error, "ISR change not delivered");
                    self.heard_leader(-1);
                }
            }
        }
        crate::errors::NOT_CONTROLLER
    }

    /// Controlled shutdown: the active controller fences this broker and
    /// moves its leaderships before it stops. Whether it confirmed
    /// within `timeout`.
    pub fn controlled_shutdown(&self, timeout: std::time::Duration) -> bool {
        let Some(agent) = self.agent.get() else {
            return false;
        };
        let (tx, rx) = flume::bounded(1);
        if agent.send(agent::Command::Stop(tx)).is_err() {
            return false;
        }
        rx.recv_timeout(timeout).unwrap_or(false)
    }

    /// Asks this node's quorum thread (the active controller's) for a
    /// change of the voters; how it ended.
    pub async fn change_voters(
        &self,
        request: voter::VoterRequest,
        timeout: std::time::Duration,
    ) -> voter::VoterOutcome {
        let not_controller = || {
            Err((
                crate::errors::NOT_CONTROLLER,
                "this node is not the active controller".to_string(),
            ))
        };
        let Some(inbox) = &self.inbox else {
            return not_controller();
        };
        let (tx, rx) = flume::bounded(1);
        if inbox
            .send_async(Input::ChangeVoters(request, timeout, tx))
            .await
            .is_err()
        {
            return not_controller();
        }
        rx.recv_async().await.unwrap_or_else(|_| not_controller())
    }

    /// Proposes `records` to the quorum and waits until they are committed
    /// and applied on this node; their metadata offset.
    pub async fn propose(&self, records: Vec<MetadataRecord>) -> Result<u64, ProposeError> {
        let Some(inbox) = &self.inbox else {
            return Err(ProposeError::NotController {
                leader: self.active_controller(),
            });
        };
        let (tx, rx) = flume::bounded(1);
        inbox
            .send_async(Input::Propose(records, tx))
            .await
            .map_err(|_| ProposeError::Failed("the quorum thread has stopped".to_string()))?;
        rx.recv_async()
            .await
            .map_err(|_| ProposeError::Failed("the quorum thread has stopped".to_string()))?
    }
}

/// Microseconds since the Unix epoch on this host's clock (0 before it).
pub fn unix_time_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// A histogram of metadata propagation delays over
/// [`crate::metrics::LATENCY_BOUNDS_US`] (then +Inf), updated by the
/// metadata follower thread and read by the admin thread.
#[derive(Default)]
pub struct PropagationHistogram {
    buckets: [AtomicU64; crate::metrics::LATENCY_BOUNDS_US.len() + 1],
    sum_us: AtomicU64,
}

impl PropagationHistogram {
    pub fn record(&self, delay_us: u64) {
        let bucket = crate::metrics::LATENCY_BOUNDS_US.partition_point(|bound| *bound < delay_us);
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(delay_us, Ordering::Relaxed);
    }

    /// The count of each bucket (not cumulative) and the sum.
    pub fn snapshot(&self) -> (Vec<u64>, u64) {
        let buckets = self
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        (buckets, self.sum_us.load(Ordering::Relaxed))
    }
}

/// This broker as it registers: its client address, rack and (on a voter)
/// controller listener, with an incarnation new on every start.
pub fn identity(config: &BrokerConfig) -> BrokerMeta {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let controller_address = config
        .quorum
        .voters
        .iter()
        .find(|v| v.id == config.node_id && config.quorum.roles.controller)
        .map(|v| format!("{}:{}", v.host, v.port))
        .unwrap_or_default();
    // Behind a load balancer every broker advertises the balancer: the
    // image then keeps the address the brokers reach each other at, and
    // only the answers to clients name the balancer (`listed_brokers`).
    // Other brokers reach it on the inter-broker listener.
    let inter_broker = config
        .listeners
        .iter()
        .find(|l| l.name == config.inter_broker.listener)
        .unwrap_or(&config.listeners[0]);
    // Behind a balancer the first listener advertises the balancer: the
    // brokers reach each other at its own address.
    let (host, port) = if config.balancer_enable && inter_broker.name == config.listeners[0].name {
        (config.broker_host.clone(), config.broker_port)
    } else {
        (
            inter_broker.advertise_host.clone(),
            inter_broker.advertise_port,
        )
    };
    // One listener registers no list: its address is `host`/`port`.
    let endpoints = if config.listeners.len() > 1 {
        config
            .listeners
            .iter()
            .map(|l| Endpoint {
                name: l.name.clone(),
                host: l.advertise_host.clone(),
                port: l.advertise_port,
            })
            .collect()
    } else {
        Vec::new()
    };
    BrokerMeta {
        id: config.node_id,
        incarnation: nanos ^ (u64::from(std::process::id()) << 40),
        host,
        port,
        rack: config.quorum.rack.clone(),
        controller_address,
        fenced: false,
        endpoints,
    }
}

/// On core 0: each time the cluster publishes an image, every core
/// installs it, opens the partitions it now owns and deletes the ones it
/// no longer holds. Ends when the cluster is gone.
pub async fn reconcile_loop(shard: Rc<Shard>, cluster: Arc<Cluster>) {
    let Some(changed) = cluster.changed_rx.lock().expect("lock").take() else {
        return;
    };
    loop {
        reconcile_everywhere(&shard, &cluster.image()).await;
        if changed.recv_async().await.is_err() {
            return;
        }
    }
}

/// Makes every core of this node match `image`.
pub async fn reconcile_everywhere(shard: &Rc<Shard>, image: &Arc<MetadataImage>) {
    for core in 0..shard.cores {
        let image = image.clone();
        shard
            .run_on(core, move |shard| async move {
                crate::reconciler::install(&shard, &image);
                if let Err(failure) =
                    crate::reconciler::open_missing(&shard, &shard.metadata.image()).await
                {
                    tracing::error!(%failure, "a partition assigned to this broker cannot be opened");
                }
                crate::reconciler::remove_gone(&shard, crate::reconciler::Removal::Delete).await;
                assign_states(&shard);
            })
            .await;
    }
}

/// Gives each of this core's partitions the replication state its image
/// records (leader or follower, epochs, ISR).
fn assign_states(shard: &Rc<Shard>) {
    let image = shard.metadata.image();
    let partitions: Vec<_> = shard.open_partitions();
    for partition in partitions {
        let state = image
            .topics
            .get(partition.topic())
            .and_then(|t| t.partition(partition.index()));
        if let Some(state) = state {
            let was_leading = partition.is_leader();
            partition.assign(state, shard.config.node_id, shard.may_lead(&image));
            if was_leading && !partition.is_leader() {
                shard.leadership_lost(partition.topic(), partition.index());
            }
        }
    }
}

/// The brokers clients of `listener` are told of, at that listener's
/// addresses: in a cluster every registered broker that is not fenced (and
/// the fenced ones too when `with_fenced`) and has that listener, on a
/// single node the node itself. In load-balancer mode each keeps its id
/// but is given at this broker's advertised address (the balancer's):
/// any broker serves a request for any node.
pub fn listed_brokers(
    shard: &Shard,
    image: &MetadataImage,
    with_fenced: bool,
    listener: &str,
) -> Vec<BrokerMeta> {
    let config = &shard.config;
    let own = config
        .listeners
        .iter()
        .find(|l| l.name == listener)
        .unwrap_or(&config.listeners[0]);
    if shard.in_cluster() {
        let single = single_listed(shard, image);
        return image
            .brokers
            .values()
            .filter(|b| with_fenced || !b.fenced)
            .filter(|b| single.is_none_or(|id| id == b.id))
            .filter_map(|b| {
                let (host, port) = if config.balancer_enable {
                    (own.advertise_host.clone(), own.advertise_port)
                } else {
                    let (host, port) = b.endpoint(listener)?;
                    (host.to_string(), port)
                };
                Some(BrokerMeta {
                    host,
                    port,
                    ..b.clone()
                })
            })
            .collect();
    }
    vec![BrokerMeta {
        id: config.node_id,
        incarnation: 0,
        host: own.advertise_host.clone(),
        port: own.advertise_port,
        rack: config.quorum.rack.clone(),
        controller_address: String::new(),
        fenced: false,
        endpoints: Vec::new(),
    }]
}

/// The `HOST:PORT` at which this node reaches broker `id` (its registered
/// address, never the balancer's), if it is registered and not fenced.
pub fn broker_address(image: &MetadataImage, id: i32) -> Option<String> {
    image
        .brokers
        .get(&id)
        .filter(|b| !b.fenced)
        .map(|b| format!("{}:{}", b.host, b.port))
}

/// The active controller clients are told of (-1 while none is known).
pub fn controller_id(shard: &Shard) -> i32 {
    match of(shard) {
        Some(cluster) => client_node(shard, &shard.metadata.image(), cluster.active_controller()),
        None => shard.config.node_id,
    }
}

/// Behind a load balancer with `strom.balancer.single.broker`: the one
/// broker clients are told of, the live broker with the lowest id (the
/// same answer from every broker). Clients that keep one connection per
/// address (librdkafka before 2.x's releases that tell brokers apart by
/// id, such as Debian 12's kcat on librdkafka 2.0.2) then see one broker
/// that leads everything, and every broker forwards what it does not lead.
pub fn single_listed(shard: &Shard, image: &MetadataImage) -> Option<i32> {
    let config = &shard.config;
    if !config.balancer_enable || !config.balancer_single_broker || !shard.in_cluster() {
        return None;
    }
    image
        .brokers
        .values()
        .filter(|b| !b.fenced)
        .map(|b| b.id)
        .min()
        .or(Some(config.node_id))
}

/// The id clients are told for broker `id` (a leader, a coordinator, the
/// controller): itself, or the one listed broker under
/// `strom.balancer.single.broker`. Negative ids (none) stay as they are.
pub fn client_node(shard: &Shard, image: &MetadataImage, id: i32) -> i32 {
    if id < 0 {
        return id;
    }
    single_listed(shard, image).unwrap_or(id)
}

/// The replicas of a partition on brokers that are not live (none on a
/// single node).
pub fn offline_replicas(image: &MetadataImage, replicas: &[i32]) -> Vec<i32> {
    if image.brokers.is_empty() {
        return Vec::new();
    }
    replicas
        .iter()
        .copied()
        .filter(|&r| !image.is_live(r))
        .collect()
}

/// The leader and leader epoch of a partition, the hint a
/// NOT_LEADER_OR_FOLLOWER answer carries (KIP-951), if it has a leader.
pub fn leader_of(image: &MetadataImage, topic: Option<&str>, partition: i32) -> Option<(i32, i32)> {
    let state = image.topics.get(topic?)?.partition(partition)?;
    (state.leader >= 0).then_some((state.leader, state.leader_epoch))
}

/// The node endpoints of a KIP-951 answer as the message type `$endpoint`
/// (Produce and Fetch each have their own): one per broker of `$brokers`.
#[macro_export]
macro_rules! node_endpoints {
    ($endpoint:ty, $brokers:expr) => {
        $brokers
            .into_iter()
            .map(|b| {
                <$endpoint>::default()
                    .with_node_id(kafka_protocol::messages::BrokerId(b.id))
                    .with_host(kafka_protocol::protocol::StrBytes::from_string(b.host))
                    .with_port(i32::from(b.port))
                    .with_rack(b.rack.map(kafka_protocol::protocol::StrBytes::from_string))
            })
            .collect::<Vec<$endpoint>>()
    };
}

/// The listed brokers among `leaders` (each once, -1 and unknown ids
/// skipped): the node endpoints a KIP-951 answer sends with its hints.
/// Callers pass only the leaders of partitions answered
/// NOT_LEADER_OR_FOLLOWER, so an answer without one costs nothing here.
pub fn leader_endpoints(
    shard: &Shard,
    image: &MetadataImage,
    listener: &str,
    leaders: impl Iterator<Item = i32>,
) -> Vec<BrokerMeta> {
    let mut ids: Vec<i32> = leaders.filter(|&id| id >= 0).collect();
    if ids.is_empty() {
        return Vec::new();
    }
    ids.sort_unstable();
    ids.dedup();
    listed_brokers(shard, image, false, listener)
        .into_iter()
        .filter(|b| ids.binary_search(&b.id).is_ok())
        .collect()
}
