//! One shard per core: the partitions it owns and the mesh of bounded
//! cross-core channels through which any core runs work on any other.
//!
//! A hop is a job (a `Send` closure that builds a local future on the
//! target core) sent over that pair's job channel; the target spawns it,
//! and sends the result back over the reply channel. Record data crosses as
//! `Bytes`, never copied. The channels are glommio `shared_channel`s with
//! capacity [`SHARD_CHANNEL_CAPACITY`]; a full channel makes the sender
//! wait (backpressure). Jobs from one core to another leave in the order
//! they were started, full channel or not ([`OrderedSender`]): the appends
//! of a connection's pipelined produce requests depend on it.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;

use glommio::channels::local_channel;
use glommio::channels::shared_channel::{
    self, ConnectedReceiver, ConnectedSender, SharedReceiver, SharedSender,
};

use crate::config::BrokerConfig;
use crate::limits::SHARD_CHANNEL_CAPACITY;
use crate::memory::MemoryPool;
use crate::metadata::{Membership, MetadataStore, MetadataTable};
use crate::partition::Partition;
use crate::sync::{Gate, Notify};

type AnyReply = Box<dyn Any + Send>;
type LocalFuture = Pin<Box<dyn Future<Output = AnyReply>>>;
type Job = Box<dyn FnOnce(Rc<Shard>) -> LocalFuture + Send>;
/// A hook run when a partition stops being led on this core.
type LeadershipLost = Box<dyn Fn(&Shard, &str, i32)>;

pub struct JobMessage {
    origin: usize,
    id: u64,
    job: Job,
}

pub struct ReplyMessage {
    id: u64,
    value: AnyReply,
}

/// The channel ends one core gets from [`build_mesh`].
pub struct MeshEnds {
    job_senders: Vec<Option<SharedSender<JobMessage>>>,
    job_receivers: Vec<SharedReceiver<JobMessage>>,
    reply_senders: Vec<Option<SharedSender<ReplyMessage>>>,
    reply_receivers: Vec<SharedReceiver<ReplyMessage>>,
}

/// Creates the full mesh of job and reply channels for `cores` cores.
pub fn build_mesh(cores: usize) -> Vec<MeshEnds> {
    let mut ends: Vec<MeshEnds> = (0..cores)
        .map(|_| MeshEnds {
            job_senders: (0..cores).map(|_| None).collect(),
            job_receivers: Vec::new(),
            reply_senders: (0..cores).map(|_| None).collect(),
            reply_receivers: Vec::new(),
        })
        .collect();
    for from in 0..cores {
        for to in 0..cores {
            if from == to {
                continue;
            }
            let (job_tx, job_rx) = shared_channel::new_bounded(SHARD_CHANNEL_CAPACITY);
            ends[from].job_senders[to] = Some(job_tx);
            ends[to].job_receivers.push(job_rx);
            let (reply_tx, reply_rx) = shared_channel::new_bounded(SHARD_CHANNEL_CAPACITY);
            ends[to].reply_senders[from] = Some(reply_tx);
            ends[from].reply_receivers.push(reply_rx);
        }
    }
    ends
}

/// The state of one core.
pub struct Shard {
    pub id: usize,
    pub cores: usize,
    pub config: Arc<BrokerConfig>,
    /// This core's copy of the metadata image, and the shared store.
    pub metadata: MetadataTable,
    /// Partitions this core owns, by topic then partition index.
    pub partitions: RefCell<HashMap<String, HashMap<i32, Rc<Partition>>>>,
    job_senders: RefCell<Vec<Option<Rc<OrderedSender<JobMessage>>>>>,
    reply_senders: RefCell<Vec<Option<Rc<ConnectedSender<ReplyMessage>>>>>,
    pending: RefCell<HashMap<u64, local_channel::LocalSender<AnyReply>>>,
    next_job_id: Cell<u64>,
    /// Raised when the broker stops: listeners stop accepting, connections
    /// stop reading new requests.
    pub stopping: Notify,
    /// Counts live connections; closing drains them.
    pub connections: Rc<Gate>,
    /// This core's share of `queued.max.request.bytes`: frames being
    /// received and handled.
    pub request_pool: Rc<MemoryPool>,
    /// This core's share of `strom.queued.max.response.bytes`: responses
    /// waiting to be written.
    pub response_pool: Rc<MemoryPool>,
    /// Producer ids handed out on the controller core: (next, block end).
    pub producer_ids: Cell<(i64, i64)>,
    /// Serializes metadata changes on the controller core.
    pub controller_lock: glommio::sync::Semaphore,
    /// This node's membership in a cluster (`None` on a single node); the
    /// cluster's code takes its own type back (`cluster::of`).
    membership: Option<Arc<dyn Membership>>,
    /// What runs when a partition of this core stops being led here, as
    /// the services that keep state per led partition registered it
    /// ([`Shard::on_leadership_lost`]).
    leadership_lost: RefCell<Vec<LeadershipLost>>,
    /// The consumer groups this core coordinates.
    pub groups: crate::group_state::GroupManager,
    /// The transactional ids this core coordinates.
    pub transactions: crate::txn_state::TxnManager,
    /// Counters of the logs this core deleted, kept so the metrics' sums
    /// never go back (see `scrape::snapshot`).
    pub retired_logs: RefCell<crate::metrics::StorageSnapshot>,
    /// This core's storage context: every log of the core opens with it
    /// (its journal, filesystem syncs, shared budgets and clock).
    pub storage: storage::Context,
}

impl Shard {
    /// This node's membership in a cluster (`None` on a single node).
    pub fn membership(&self) -> Option<&Arc<dyn Membership>> {
        self.membership.as_ref()
    }

    /// Whether this node is a member of a cluster (not a single node).
    pub fn in_cluster(&self) -> bool {
        self.membership.is_some()
    }

    /// Whether this node may act on the leaderships `image` gives it: on
    /// a single node always; in a cluster once the image holds this
    /// process's registration ([`Membership::may_lead`]).
    pub fn may_lead(&self, image: &crate::metadata::MetadataImage) -> bool {
        self.membership
            .as_ref()
            .is_none_or(|membership| membership.may_lead(image))
    }

    /// Registers what runs when a partition of this core stops being led
    /// here (given the shard, the topic and the partition index). Hooks
    /// are registered as the core starts, never from a hook.
    pub fn on_leadership_lost(&self, hook: impl Fn(&Shard, &str, i32) + 'static) {
        self.leadership_lost.borrow_mut().push(Box::new(hook));
    }

    /// This core no longer leads `topic`'s partition `index` (another
    /// replica leads it, or it left this core): every registered hook runs.
    pub fn leadership_lost(&self, topic: &str, index: i32) {
        for hook in self.leadership_lost.borrow().iter() {
            hook(self, topic, index);
        }
    }

    /// Wall time from the core's clock (`storage.clock()`), in ms since
    /// the Unix epoch: what group sessions, offset commits and producer
    /// expiry decide on.
    pub fn now_ms(&self) -> i64 {
        self.storage.clock().wall_ms()
    }

    pub fn new(
        id: usize,
        cores: usize,
        config: Arc<BrokerConfig>,
        metadata: Arc<MetadataStore>,
        membership: Option<Arc<dyn Membership>>,
    ) -> Rc<Self> {
        let share = |bytes: usize| (bytes / cores.max(1)).max(1);
        let storage = storage::Context::new(
            storage::ContextConfig {
                journal_chunk_bytes_max: config.journal_chunk_bytes_max,
                ..Default::default()
            },
            Rc::new(storage::SystemClock::default()),
        );
        Rc::new(Self {
            id,
            cores,
            request_pool: MemoryPool::new(share(config.queued_request_bytes_max)),
            response_pool: MemoryPool::new(share(config.queued_response_bytes_max)),
            config,
            metadata: MetadataTable::new(metadata),
            partitions: RefCell::new(HashMap::new()),
            job_senders: RefCell::new(Vec::new()),
            reply_senders: RefCell::new(Vec::new()),
            pending: RefCell::new(HashMap::new()),
            next_job_id: Cell::new(0),
            stopping: Notify::default(),
            connections: Rc::new(Gate::default()),
            producer_ids: Cell::new((0, 0)),
            controller_lock: glommio::sync::Semaphore::new(1),
            membership,
            leadership_lost: RefCell::new(Vec::new()),
            groups: Default::default(),
            transactions: Default::default(),
            retired_logs: RefCell::new(crate::metrics::empty_storage()),
            storage,
        })
    }

    /// Connects this core's ends of the mesh and starts serving jobs and
    /// replies. Every core must call it; connecting waits for the peers.
    pub async fn connect_mesh(self: &Rc<Self>, ends: MeshEnds) {
        // Every end waits for its peer, so all ends connect concurrently.
        let job_senders: Vec<_> = ends
            .job_senders
            .into_iter()
            .map(|sender| {
                glommio::spawn_local(async move {
                    Some(Rc::new(OrderedSender::new(sender?.connect().await)))
                })
            })
            .collect();
        let reply_senders: Vec<_> = ends
            .reply_senders
            .into_iter()
            .map(|sender| {
                glommio::spawn_local(async move { Some(Rc::new(sender?.connect().await)) })
            })
            .collect();
        let job_receivers: Vec<_> = ends
            .job_receivers
            .into_iter()
            .map(|receiver| glommio::spawn_local(receiver.connect()))
            .collect();
        let reply_receivers: Vec<_> = ends
            .reply_receivers
            .into_iter()
            .map(|receiver| glommio::spawn_local(receiver.connect()))
            .collect();
        let mut connected = Vec::new();
        for task in job_senders {
            connected.push(task.await);
        }
        *self.job_senders.borrow_mut() = connected;
        let mut connected = Vec::new();
        for task in reply_senders {
            connected.push(task.await);
        }
        *self.reply_senders.borrow_mut() = connected;
        for task in job_receivers {
            let receiver = task.await;
            glommio::spawn_local(serve_jobs(self.clone(), receiver)).detach();
        }
        for task in reply_receivers {
            let receiver = task.await;
            glommio::spawn_local(serve_replies(self.clone(), receiver)).detach();
        }
    }

    /// Runs `work` on core `core` and returns its result here. On this core
    /// it runs directly, without a hop.
    pub async fn run_on<R, F, Fut>(self: &Rc<Self>, core: usize, work: F) -> R
    where
        R: Send + 'static,
        F: FnOnce(Rc<Shard>) -> Fut + Send + 'static,
        Fut: Future<Output = R> + 'static,
    {
        if core == self.id {
            return work(self.clone()).await;
        }
        crate::metrics::record_hop();
        let id = self.next_job_id.get();
        self.next_job_id.set(id + 1);
        let (reply_tx, reply_rx) = local_channel::new_bounded(1);
        self.pending.borrow_mut().insert(id, reply_tx);
        let job: Job = Box::new(move |shard| {
            Box::pin(async move {
                let value: AnyReply = Box::new(work(shard).await);
                value
            })
        });
        let sender = self.job_senders.borrow()[core]
            .clone()
            .expect("mesh connected to every other core");
        if sender
            .send(JobMessage {
                origin: self.id,
                id,
                job,
            })
            .await
            .is_err()
        {
            panic!(
                "core {core} stopped serving jobs while core {} still runs",
                self.id
            );
        }
        let value = reply_rx.recv().await.expect("every job is answered");
        *value.downcast::<R>().expect("reply has the job's type")
    }

    /// Hops from this core still waiting for their reply.
    pub fn hops_in_flight(&self) -> usize {
        self.pending.borrow().len()
    }

    /// The partition `topic`/`partition` if this core owns it and has it open.
    /// Every partition this core has open.
    pub fn open_partitions(&self) -> Vec<Rc<Partition>> {
        self.partitions
            .borrow()
            .values()
            .flat_map(|by_index| by_index.values().cloned())
            .collect()
    }

    pub fn partition(&self, topic: &str, partition: i32) -> Option<Rc<Partition>> {
        self.partitions
            .borrow()
            .get(topic)?
            .get(&partition)
            .cloned()
    }
}

/// A cross-core sender that keeps its callers' order. glommio's
/// `ConnectedSender::send` lets a caller that finds room send at once even
/// while earlier callers wait for room (they are only woken later), so
/// with a full channel a later hop could reach the other core first, and
/// two pipelined produce requests of one connection be appended out of
/// order. Here callers take turns: glommio's semaphore serves its waiters
/// first come, first served, and lets no newcomer pass them.
pub struct OrderedSender<T: Send + Sized> {
    sender: ConnectedSender<T>,
    turn: glommio::sync::Semaphore,
}

impl<T: Send + Sized> OrderedSender<T> {
    pub fn new(sender: ConnectedSender<T>) -> Self {
        Self {
            sender,
            turn: glommio::sync::Semaphore::new(1),
        }
    }

    /// Sends `item` after every send started before this one; `Err` when
    /// the receiver is gone.
    pub async fn send(&self, item: T) -> Result<(), ()> {
        let Ok(_turn) = self.turn.acquire_permit(1).await else {
            return Err(());
        };
        self.sender.send(item).await.map_err(|_| ())
    }
}

async fn serve_jobs(shard: Rc<Shard>, receiver: ConnectedReceiver<JobMessage>) {
    while let Some(message) = receiver.recv().await {
        let shard = shard.clone();
        glommio::spawn_local(async move {
            let value = (message.job)(shard.clone()).await;
            let sender = shard.reply_senders.borrow()[message.origin]
                .clone()
                .expect("mesh connected to every other core");
            // The origin only goes away after every core stopped sending jobs.
            let _ = sender
                .send(ReplyMessage {
                    id: message.id,
                    value,
                })
                .await;
        })
        .detach();
    }
}

async fn serve_replies(shard: Rc<Shard>, receiver: ConnectedReceiver<ReplyMessage>) {
    while let Some(message) = receiver.recv().await {
        let waiter = shard.pending.borrow_mut().remove(&message.id);
        if let Some(waiter) = waiter {
            // The waiter may have been dropped (its request was cancelled).
            let _ = waiter.try_send(message.value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use glommio::LocalExecutorBuilder;
    use std::sync::atomic::{AtomicU8, Ordering};
    use std::time::{Duration, Instant};

    /// Steps of the two cores in `sends_keep_their_order_when_the_channel_is_full`.
    const WAITING: u8 = 0;
    const TAKE_ONE: u8 = 1;
    const TOOK_ONE: u8 = 2;
    const TAKE_ALL: u8 = 3;
    const STEP_DEADLINE: Duration = Duration::from_secs(10);

    fn wait_for(step: &AtomicU8, wanted: u8) {
        let deadline = Instant::now() + STEP_DEADLINE;
        while step.load(Ordering::Acquire) != wanted {
            assert!(Instant::now() < deadline, "step {wanted} not reached");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Sends 1–3 wait on a full channel of capacity 1; the receiver takes
    /// one item, and before the waiting senders run again, send 4 starts
    /// and finds room. It must still leave after 1–3.
    #[test]
    fn sends_keep_their_order_when_the_channel_is_full() {
        let (tx, rx) = shared_channel::new_bounded::<u32>(1);
        let step = Arc::new(AtomicU8::new(WAITING));
        let receiver = LocalExecutorBuilder::default()
            .spawn({
                let step = step.clone();
                move || async move {
                    let rx = rx.connect().await;
                    wait_for(&step, TAKE_ONE);
                    let mut received = vec![rx.recv().await.expect("item 0")];
                    step.store(TOOK_ONE, Ordering::Release);
                    wait_for(&step, TAKE_ALL);
                    for _ in 0..4 {
                        received.push(rx.recv().await.expect("items 1-4"));
                    }
                    received
                }
            })
            .unwrap();
        let sender = LocalExecutorBuilder::default()
            .spawn({
                let step = step.clone();
                move || async move {
                    let sender = Rc::new(OrderedSender::new(tx.connect().await));
                    sender.send(0).await.unwrap();
                    let mut sends: Vec<_> = (1..=3)
                        .map(|i| {
                            let sender = sender.clone();
                            glommio::spawn_local(async move { sender.send(i).await.unwrap() })
                        })
                        .collect();
                    // Every waiting send polls once and finds no room.
                    for _ in 0..3 {
                        futures_lite::future::yield_now().await;
                    }
                    step.store(TAKE_ONE, Ordering::Release);
                    // Blocks this core: the waiting sends are not woken yet.
                    wait_for(&step, TOOK_ONE);
                    let late = sender.clone();
                    sends.push(glommio::spawn_local(
                        async move { late.send(4).await.unwrap() },
                    ));
                    futures_lite::future::yield_now().await;
                    step.store(TAKE_ALL, Ordering::Release);
                    for send in sends {
                        send.await;
                    }
                }
            })
            .unwrap();
        sender.join().unwrap();
        assert_eq!(receiver.join().unwrap(), vec![0, 1, 2, 3, 4]);
    }
}
