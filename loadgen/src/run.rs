//! Running a workload: producers and consumers spread over one glommio
//! executor per core, each executor shipping its measurements to the main
//! thread once a second.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use bytes::{Bytes, BytesMut};
use glommio::{LocalExecutorPoolBuilder, PoolPlacement};
use std::collections::VecDeque;

use kafka_protocol::messages::ProduceResponse;
use protocol::client::{Connection, Pending};

use crate::e2e::{self, Acknowledged, Tracker};
use crate::kafka;
use crate::rate::Schedule;
use crate::stats::Recorder;
use crate::workload::{KeyDistributor, Workload};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Produce,
    Consume,
    #[serde(rename = "e2e")]
    EndToEnd,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Produce => "produce",
            Mode::Consume => "consume",
            Mode::EndToEnd => "e2e",
        }
    }

    /// Whether the run has producers (and so publish latency).
    pub fn produces(self) -> bool {
        self != Mode::Consume
    }

    /// Whether the run has consumers.
    pub fn consumes(self) -> bool {
        self != Mode::Produce
    }
}

/// Everything the executors need, shared read-only.
pub struct Plan {
    pub mode: Mode,
    pub workload: Workload,
    pub topics: Vec<String>,
    pub leaders: kafka::Leaders,
    /// Where consumers start, per partition.
    pub start_offsets: HashMap<(String, i32), i64>,
    /// Where consume mode stops, per partition (the log end at start).
    pub end_offsets: HashMap<(String, i32), i64>,
    pub payload: Bytes,
    pub cores: usize,
    /// How long an idle executor polls before it parks.
    pub spin: Duration,
    pub start: Instant,
    pub start_unix_us: u64,
    pub drain_timeout: Duration,
}

impl Plan {
    fn unix_us(&self, at: Instant) -> u64 {
        self.start_unix_us + at.saturating_duration_since(self.start).as_micros() as u64
    }
}

/// Shared run state across executors.
pub struct Control {
    pub stop: AtomicBool,
    pub producers_running: AtomicUsize,
}

/// What executors send to the main thread.
pub enum Message {
    Interval {
        second: u64,
        recorder: Box<Recorder>,
    },
    Done {
        tracker: Tracker,
        acknowledged: Acknowledged,
        last: Box<Recorder>,
    },
    Failed(String),
}

pub fn unix_us_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// One producer's share: which topic, at what rate.
#[derive(Clone)]
struct ProducerJob {
    id: u32,
    topic: String,
    rate: f64,
    /// Bytes after which this producer stops (0: no limit).
    byte_budget: u64,
}

#[derive(Clone)]
struct ConsumerJob {
    partitions: Vec<(String, i32)>,
}

fn jobs(plan: &Plan) -> (Vec<ProducerJob>, Vec<ConsumerJob>) {
    let w = &plan.workload;
    let mut producers = Vec::new();
    if plan.mode != Mode::Consume {
        let total = plan.topics.len() * w.producers_per_topic;
        for topic in &plan.topics {
            for _ in 0..w.producers_per_topic {
                producers.push(ProducerJob {
                    id: producers.len() as u32,
                    topic: topic.clone(),
                    rate: w.producer_rate / total as f64,
                    byte_budget: w.backlog_bytes.div_ceil(total as u64),
                });
            }
        }
    }
    let mut consumers = Vec::new();
    if plan.mode != Mode::Produce {
        for topic in &plan.topics {
            for _ in 0..w.subscriptions_per_topic {
                let n = w.consumer_per_subscription.max(1);
                for c in 0..n {
                    let partitions: Vec<(String, i32)> = (0..w.partitions_per_topic)
                        .filter(|p| p % n == c)
                        .map(|p| (topic.clone(), p as i32))
                        .collect();
                    if !partitions.is_empty() {
                        consumers.push(ConsumerJob { partitions });
                    }
                }
            }
        }
    }
    (producers, consumers)
}

/// Runs the plan on `plan.cores` executors; `on_message` sees every message
/// on the calling thread until all executors are done.
pub fn execute(
    plan: Plan,
    control: Arc<Control>,
    mut on_message: impl FnMut(Message) -> Result<()>,
) -> Result<()> {
    let plan = Arc::new(plan);
    let (producers, consumers) = jobs(&plan);
    control
        .producers_running
        .store(producers.len(), Ordering::SeqCst);
    let (tx, rx) = flume::unbounded::<Message>();
    let next_core = Arc::new(AtomicUsize::new(0));
    let cores = plan.cores;
    let handles = {
        let (plan, control) = (plan.clone(), control.clone());
        LocalExecutorPoolBuilder::new(PoolPlacement::MaxSpread(cores, allowed_cpus()))
            .spin_before_park(plan.spin)
            .on_all_shards(move || {
                let core = next_core.fetch_add(1, Ordering::SeqCst);
                let mine_p: Vec<ProducerJob> = producers
                    .iter()
                    .filter(|j| j.id as usize % cores == core)
                    .cloned()
                    .collect();
                // Consumers start on the cores after the producers'.
                let offset = producers.len();
                let mine_c: Vec<ConsumerJob> = consumers
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| (i + offset) % cores == core)
                    .map(|(_, j)| j.clone())
                    .collect();
                async move {
                    if let Err(e) = core_main(plan, control, mine_p, mine_c, tx.clone()).await {
                        let _ = tx.send(Message::Failed(format!("{e:#}")));
                    }
                }
            })
            .map_err(|e| anyhow::anyhow!("starting executors: {e}"))?
    };
    let mut result = Ok(());
    for message in rx.iter() {
        if let Err(e) = on_message(message) {
            result = Err(e);
            control.stop.store(true, Ordering::SeqCst);
        }
    }
    handles.join_all();
    result
}

async fn core_main(
    plan: Arc<Plan>,
    control: Arc<Control>,
    producers: Vec<ProducerJob>,
    consumers: Vec<ConsumerJob>,
    tx: flume::Sender<Message>,
) -> Result<()> {
    // A parked executor with runnable tasks would show as latency the
    // broker never caused: see `protocol::watchdog`.
    let _watchdog = protocol::watchdog::start(
        &format!("strom-loadgen-{}", glommio::executor().id()),
        protocol::watchdog::PERIOD,
        protocol::watchdog::STALL_WARNING,
    )
    .context("starting the executor's watchdog thread")?;
    let recorder = Rc::new(RefCell::new(Recorder::default()));
    let tracker = Rc::new(RefCell::new(Tracker::default()));
    let acknowledged: Rc<RefCell<Acknowledged>> = Rc::default();
    let finished = Rc::new(std::cell::Cell::new(false));

    // Ship an interval every second, aligned to the run's start.
    let reporter = {
        let (plan, recorder, tx, finished) =
            (plan.clone(), recorder.clone(), tx.clone(), finished.clone());
        glommio::spawn_local(async move {
            let mut second = 0u64;
            while !finished.get() {
                let due = plan.start + Duration::from_secs(second + 1);
                let now = Instant::now();
                if due > now {
                    glommio::timer::sleep(due - now).await;
                }
                let interval = std::mem::take(&mut *recorder.borrow_mut());
                if tx
                    .send(Message::Interval {
                        second,
                        recorder: Box::new(interval),
                    })
                    .is_err()
                {
                    break;
                }
                second += 1;
            }
        })
    };

    // A failed producer or consumer is also counted as an error of the run.
    let reported = |what: &'static str, recorder: Rc<RefCell<Recorder>>, result: Result<()>| {
        if let Err(e) = &result {
            recorder.borrow_mut().error(format!("{what} failed: {e:#}"));
        }
        result
    };
    let mut tasks = Vec::new();
    for job in producers {
        let (plan, control, recorder, acknowledged) = (
            plan.clone(),
            control.clone(),
            recorder.clone(),
            acknowledged.clone(),
        );
        tasks.push(glommio::spawn_local(async move {
            let result = produce(job, plan, control.clone(), recorder.clone(), acknowledged).await;
            control.producers_running.fetch_sub(1, Ordering::SeqCst);
            reported("producer", recorder, result)
        }));
    }
    for job in consumers {
        let (plan, control, recorder, tracker) = (
            plan.clone(),
            control.clone(),
            recorder.clone(),
            tracker.clone(),
        );
        tasks.push(glommio::spawn_local(async move {
            let result = consume(job, plan, control, recorder.clone(), tracker).await;
            reported("consumer", recorder, result)
        }));
    }
    let mut first_error = None;
    for task in tasks {
        if let Err(e) = task.await {
            first_error.get_or_insert(e);
        }
    }
    finished.set(true);
    reporter.cancel().await;
    let last = std::mem::take(&mut *recorder.borrow_mut());
    let tracker = std::mem::take(&mut *tracker.borrow_mut());
    let acknowledged = std::mem::take(&mut *acknowledged.borrow_mut());
    let _ = tx.send(Message::Done {
        tracker,
        acknowledged,
        last: Box::new(last),
    });
    match first_error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// A batch on its way to a lane.
struct Outgoing {
    topic: String,
    partition: i32,
    bytes: Bytes,
    records: u64,
    value_bytes: u64,
    /// The due time of the batch's oldest record.
    first_due: Instant,
    /// e2e sequences the batch carries.
    sequences: std::ops::Range<u64>,
}

/// Batches handed to a lane but not yet put into a request, per partition,
/// shared by a producer and its lanes. While one waits, the partition's
/// next batch stays open and keeps taking records, as the Kafka clients'
/// accumulators do: with `linger.ms=0` and the in-flight window full, they
/// grow one batch per partition instead of queueing a batch of a record or
/// two per send loop (which made requests of one tiny batch each, and the
/// producer stall behind its own queue).
struct Waiting {
    per_partition: Vec<Cell<u32>>,
    /// Raised by a lane when it takes a partition's last waiting batch.
    drained: glommio::sync::Semaphore,
}

impl Waiting {
    fn new(partitions: usize) -> Waiting {
        Waiting {
            per_partition: (0..partitions).map(|_| Cell::new(0)).collect(),
            drained: glommio::sync::Semaphore::new(0),
        }
    }

    fn queued(&self, partition: usize) {
        let count = &self.per_partition[partition];
        count.set(count.get() + 1);
    }

    fn taken(&self, partition: usize) {
        let count = &self.per_partition[partition];
        count.set(count.get().saturating_sub(1));
        if count.get() == 0 && self.drained.available() == 0 {
            self.drained.signal(1);
        }
    }

    fn any_waiting(&self, partition: usize) -> bool {
        self.per_partition[partition].get() > 0
    }
}

/// What a lane sends: the batches its producer queued, and the count of
/// them per partition it lowers as it takes them.
struct LaneQueue {
    rx: flume::Receiver<Outgoing>,
    waiting: Rc<Waiting>,
}

/// Records waiting to become a batch for one partition.
#[derive(Default)]
struct Accumulator {
    /// Where the next records' values are written: one allocation holds
    /// many values (each a slice of it), not one per record.
    arena: BytesMut,
    values: Vec<Bytes>,
    keys: Vec<Option<Bytes>>,
    /// Value bytes, and the batch's encoded size so far.
    bytes: usize,
    encoded: usize,
    /// The key length and encoded size of a next record with that key,
    /// worked out by the fullness check: the next append with the same
    /// key length takes it instead of sizing its record again.
    next_record: Option<(Option<usize>, usize)>,
    first_due: Option<Instant>,
    first_sequence: u64,
}

/// The most one accumulator's arena allocates at once.
const ARENA_BYTES_MAX: usize = 1 << 20;

async fn produce(
    job: ProducerJob,
    plan: Arc<Plan>,
    control: Arc<Control>,
    recorder: Rc<RefCell<Recorder>>,
    acknowledged: Rc<RefCell<Acknowledged>>,
) -> Result<()> {
    let w = &plan.workload;
    let settings = w.producer.clone();
    let partitions = w.partitions_per_topic;
    // One lane (a connection pipelining up to `in_flight_max` requests) per
    // leader; its queue holds up to one ready batch per partition.
    let lanes_per_leader = 1;
    let mut lane_tx: HashMap<(String, usize), flume::Sender<Outgoing>> = HashMap::new();
    let mut lane_tasks = Vec::new();
    let waiting = Rc::new(Waiting::new(partitions));
    let mut producer_ids: HashMap<String, (i64, i16)> = HashMap::new();
    for p in 0..partitions {
        let address = plan
            .leaders
            .partitions
            .get(&(job.topic.clone(), p as i32))
            .with_context(|| format!("no leader for {}-{p}", job.topic))?
            .clone();
        let key = (address.clone(), p % lanes_per_leader);
        if lane_tx.contains_key(&key) {
            continue;
        }
        let mut conn = kafka::connect(&address).await?;
        if settings.idempotence && !producer_ids.contains_key(&address) {
            producer_ids.insert(address.clone(), kafka::init_producer_id(&mut conn).await?);
        }
        let (tx, rx) = flume::bounded(partitions.max(4));
        lane_tx.insert(key, tx);
        let (recorder, acknowledged, acks) =
            (recorder.clone(), acknowledged.clone(), settings.acks);
        let producer = job.id;
        lane_tasks.push(glommio::spawn_local(lane(
            conn,
            LaneQueue {
                rx,
                waiting: waiting.clone(),
            },
            acks,
            settings.in_flight_max,
            producer,
            recorder,
            acknowledged,
        )));
    }
    let producer_id = |p: usize| -> (i64, i16) {
        let address = &plan.leaders.partitions[&(job.topic.clone(), p as i32)];
        producer_ids.get(address).copied().unwrap_or((-1, -1))
    };

    let mut accumulators: Vec<Accumulator> =
        (0..partitions).map(|_| Accumulator::default()).collect();
    let mut next_sequence = vec![0u64; partitions];
    let mut idempotent_sequence = vec![0i32; partitions];
    let mut schedule = Schedule::new(job.rate, plan.start);
    let mut sticky = (job.id as usize) % partitions;
    let mut key_counter = 0u64;
    let value_len = plan.payload.len();
    // A closed-loop round takes one batch's worth: as many records as fit
    // a batch by the fullness rule below (keys at their longest), so a
    // round sends one full batch, not a full one and a straggler of a few
    // records (which took (a) from ~12,000 to ~19,000 produce requests and
    // cost it a fifth of its throughput).
    let key_len_max = match w.key_distributor {
        KeyDistributor::NoKey => None,
        KeyDistributor::KeyRoundRobin => Some("key-1023".len()),
        KeyDistributor::RandomNano => Some(u64::MAX.to_string().len()),
    };
    let records_per_batch = kafka::records_per_batch(settings.batch_bytes, key_len_max, value_len);

    // Encodes partition `p`'s accumulated records and hands them to its lane.
    let flush = |p: usize,
                 acc: &mut Accumulator,
                 idempotent_sequence: &mut Vec<i32>,
                 lane_tx: &HashMap<(String, usize), flume::Sender<Outgoing>>| {
        let values = std::mem::take(&mut acc.values);
        let keys = std::mem::take(&mut acc.keys);
        let count = values.len();
        let value_bytes = acc.bytes as u64;
        acc.bytes = 0;
        acc.encoded = 0;
        let first_due = acc
            .first_due
            .take()
            .expect("a non-empty accumulator has a due time");
        let pid = producer_id(p);
        let base_sequence = if pid.0 >= 0 {
            idempotent_sequence[p]
        } else {
            -1
        };
        if pid.0 >= 0 {
            idempotent_sequence[p] = idempotent_sequence[p].wrapping_add(count as i32);
        }
        let timestamp_ms = (plan.unix_us(first_due) / 1000) as i64;
        let bytes = kafka::encode_batch(
            values,
            keys,
            timestamp_ms,
            pid,
            base_sequence,
            settings.compression,
        );
        let address = &plan.leaders.partitions[&(job.topic.clone(), p as i32)];
        let sender = &lane_tx[&(address.clone(), p % lanes_per_leader)];
        let outgoing = bytes.map(|bytes| Outgoing {
            topic: job.topic.clone(),
            partition: p as i32,
            bytes,
            records: count as u64,
            value_bytes,
            first_due,
            sequences: acc.first_sequence..acc.first_sequence + count as u64,
        });
        if outgoing.is_ok() {
            waiting.queued(p);
        }
        (outgoing, sender.clone())
    };

    let mut sent_bytes = 0u64;
    loop {
        if control.stop.load(Ordering::Relaxed)
            || (job.byte_budget > 0 && sent_bytes >= job.byte_budget)
        {
            break;
        }
        let now = Instant::now();
        let due_now = if schedule.is_open_loop() {
            schedule.due_count(now).min(10_000)
        } else {
            records_per_batch as u64
        };
        for _ in 0..due_now {
            let due = schedule.next_due(now);
            let (partition, key) = match w.key_distributor {
                KeyDistributor::NoKey => (sticky, None),
                KeyDistributor::KeyRoundRobin => {
                    key_counter += 1;
                    let key = Bytes::from(format!("key-{}", key_counter % 1024));
                    (
                        kafka::partition_for_key(&key, partitions) as usize,
                        Some(key),
                    )
                }
                KeyDistributor::RandomNano => {
                    let key = Bytes::from(format!("{}", plan.unix_us(now) * 1000 + key_counter));
                    key_counter += 1;
                    (
                        kafka::partition_for_key(&key, partitions) as usize,
                        Some(key),
                    )
                }
            };
            let sequence = next_sequence[partition];
            next_sequence[partition] += 1;
            let acc = &mut accumulators[partition];
            if acc.arena.capacity() < value_len {
                acc.arena
                    .reserve(settings.batch_bytes.max(value_len).min(ARENA_BYTES_MAX));
            }
            acc.arena.extend_from_slice(&plan.payload);
            let mut value = acc.arena.split();
            if value.len() >= e2e::HEADER_LEN {
                e2e::write_header(&mut value, job.id, sequence, plan.unix_us(due));
            }
            let index = acc.values.len();
            let key_len = key.as_ref().map(Bytes::len);
            let record_bytes = match acc.next_record {
                Some((k, bytes)) if index > 0 && k == key_len => bytes,
                _ => kafka::record_bytes(index, key_len, value_len),
            };
            if index == 0 {
                acc.first_due = Some(due);
                acc.first_sequence = sequence;
                acc.encoded = kafka::batch_head_bytes();
            }
            acc.encoded += record_bytes;
            acc.bytes += value.len();
            sent_bytes += value.len() as u64;
            acc.values.push(value.freeze());
            acc.keys.push(key);
            recorder
                .borrow_mut()
                .sent(1, now.saturating_duration_since(due).as_micros() as u64);
            // Full when one more record like this one would take the
            // encoded batch past the batch size, as Kafka's producer
            // decides (it sizes each record exactly): values alone up to
            // the batch size, plus the records' framing, could pass the
            // broker's message size limit (MESSAGE_TOO_LARGE) when a
            // stalled broker lets a batch fill.
            let next = kafka::record_bytes(index + 1, key_len, value_len);
            acc.next_record = Some((key_len, next));
            let full = acc.encoded + next > settings.batch_bytes;
            if full {
                let (outgoing, sender) = flush(partition, acc, &mut idempotent_sequence, &lane_tx);
                sender
                    .send_async(outgoing?)
                    .await
                    .map_err(|_| anyhow::anyhow!("lane closed"))?;
                if w.key_distributor == KeyDistributor::NoKey {
                    sticky = (sticky + 1) % partitions;
                }
            }
        }
        // Batches whose oldest record has lingered long enough go now,
        // unless an earlier batch of their partition still waits for its
        // request: then they stay open (see `Waiting`).
        let now = Instant::now();
        let mut next_deadline: Option<Instant> = None;
        let mut held = false;
        for (p, acc) in accumulators.iter_mut().enumerate() {
            let Some(first_due) = acc.first_due else {
                continue;
            };
            let deadline = first_due + settings.linger;
            let due = deadline <= now;
            if due && waiting.any_waiting(p) && schedule.is_open_loop() {
                held = true;
                continue;
            }
            if due || !schedule.is_open_loop() {
                let (outgoing, sender) = flush(p, acc, &mut idempotent_sequence, &lane_tx);
                sender
                    .send_async(outgoing?)
                    .await
                    .map_err(|_| anyhow::anyhow!("lane closed"))?;
                if w.key_distributor == KeyDistributor::NoKey && p == sticky {
                    sticky = (sticky + 1) % partitions;
                }
            } else {
                next_deadline = Some(next_deadline.map_or(deadline, |d: Instant| d.min(deadline)));
            }
        }
        if schedule.is_open_loop() {
            let mut peek = schedule.clone();
            let next_due = peek.next_due(now);
            let wake = next_deadline.map_or(next_due, |d| d.min(next_due));
            let now = Instant::now();
            if wake > now || held {
                let nap = glommio::timer::sleep(
                    wake.saturating_duration_since(now)
                        .max(Duration::from_micros(20)),
                );
                if held {
                    // A lane taking a waiting batch frees the held ones.
                    futures_lite::future::or(nap, async {
                        let _ = waiting.drained.acquire(1).await;
                    })
                    .await;
                } else {
                    nap.await;
                }
            }
        } else {
            glommio::yield_if_needed().await;
        }
    }
    // Send what is left, then let the lanes finish their in-flight requests.
    for (p, acc) in accumulators.iter_mut().enumerate() {
        if acc.first_due.is_some() {
            let (outgoing, sender) = flush(p, acc, &mut idempotent_sequence, &lane_tx);
            sender
                .send_async(outgoing?)
                .await
                .map_err(|_| anyhow::anyhow!("lane closed"))?;
        }
    }
    drop(lane_tx);
    for task in lane_tasks {
        task.await;
    }
    Ok(())
}

/// One connection per producer and leader, pipelining up to
/// `in_flight_max` produce requests (as Kafka clients do with
/// `max.in.flight.requests.per.connection`). Each request takes what is
/// queued, at most one batch per partition; requests on one connection are
/// answered in order, so a partition's batches stay in order.
async fn lane(
    mut conn: Connection,
    queue: LaneQueue,
    acks: i16,
    in_flight_max: usize,
    producer: u32,
    recorder: Rc<RefCell<Recorder>>,
    acknowledged: Rc<RefCell<Acknowledged>>,
) {
    let LaneQueue { rx, waiting } = queue;
    let version = match conn.version::<kafka_protocol::messages::ProduceRequest>(3..=9) {
        Ok(v) => v,
        Err(e) => {
            recorder
                .borrow_mut()
                .error(format!("produce version: {}", error_text(&e)));
            return;
        }
    };
    let mut in_flight: VecDeque<(Pending<ProduceResponse>, Vec<Outgoing>)> = VecDeque::new();
    let mut queued: VecDeque<Outgoing> = VecDeque::new();
    let mut closed = false;
    loop {
        // Send while below the bound and batches are ready; wait for one
        // only when nothing is in flight.
        while in_flight.len() < in_flight_max {
            if queued.is_empty() {
                let next = if in_flight.is_empty() && !closed {
                    rx.recv_async().await.ok()
                } else {
                    rx.try_recv().ok()
                };
                match next {
                    Some(o) => queued.push_back(o),
                    None => {
                        closed |= rx.is_disconnected() && rx.is_empty();
                        break;
                    }
                }
            }
            let mut round: Vec<Outgoing> = Vec::new();
            let mut request_bytes = 0usize;
            while request_bytes < 8 << 20 {
                let Some(o) = queued.pop_front().or_else(|| rx.try_recv().ok()) else {
                    break;
                };
                if round
                    .iter()
                    .any(|x| x.topic == o.topic && x.partition == o.partition)
                {
                    queued.push_front(o);
                    break;
                }
                request_bytes += o.bytes.len();
                waiting.taken(o.partition as usize);
                round.push(o);
            }
            let batches: Vec<(String, i32, Bytes)> = round
                .iter()
                .map(|o| (o.topic.clone(), o.partition, o.bytes.clone()))
                .collect();
            let request = kafka::produce_request(acks, &batches);
            if acks == 0 {
                let sent = conn.send_without_response(&request, version).await;
                let now = Instant::now();
                let mut recorder = recorder.borrow_mut();
                match sent {
                    Ok(()) => {
                        for o in &round {
                            recorder.publish(
                                o.records,
                                o.value_bytes,
                                now.saturating_duration_since(o.first_due).as_micros() as u64,
                            );
                        }
                    }
                    Err(e) => recorder.error(format!("produce: {}", error_text(&e))),
                }
                continue;
            }
            match conn.send(&request, version).await {
                Ok(pending) => in_flight.push_back((pending, round)),
                Err(e) => {
                    let mut recorder = recorder.borrow_mut();
                    for _ in &round {
                        recorder.error(format!("produce: {}", error_text(&e)));
                    }
                }
            }
        }
        if in_flight.is_empty() {
            if closed && queued.is_empty() {
                return;
            }
            continue;
        }
        // Room for more requests: take new batches as they come until a
        // response arrives, so the connection keeps up to `in_flight_max`
        // requests in flight instead of refilling only on responses.
        if in_flight.len() < in_flight_max && !closed {
            let batch = futures_lite::future::or(async { Some(rx.recv_async().await) }, async {
                conn.readable().await;
                None
            })
            .await;
            match batch {
                Some(Ok(o)) => {
                    queued.push_back(o);
                    continue;
                }
                Some(Err(_)) => closed = true,
                None => {}
            }
        }
        let Some((pending, round)) = in_flight.pop_front() else {
            continue;
        };
        let response = conn.receive(pending).await;
        let now = Instant::now();
        let mut recorder = recorder.borrow_mut();
        match response {
            Ok(response) => {
                let outcome = kafka::produce_errors(&response);
                let mut acknowledged = acknowledged.borrow_mut();
                for o in round {
                    match outcome.get(&(o.topic.clone(), o.partition)) {
                        Some(None) => {
                            let latency =
                                now.saturating_duration_since(o.first_due).as_micros() as u64;
                            recorder.publish(o.records, o.value_bytes, latency);
                            acknowledged
                                .entry((o.topic.clone(), o.partition, producer))
                                .or_default()
                                .push(o.sequences);
                        }
                        Some(Some(error)) => recorder.error(error.clone()),
                        None => recorder.error("partition missing from produce response"),
                    }
                }
            }
            Err(e) => {
                for _ in &round {
                    recorder.error(format!("produce: {}", error_text(&e)));
                }
            }
        }
    }
}

/// The CPUs this process may run on (`taskset`, cgroups), for placing the
/// executors: glommio otherwise spreads them over every online CPU, so
/// `taskset -c 1 strom-loadgen` would still put its executor on CPU 0,
/// next to a broker pinned there.
fn allowed_cpus() -> Option<glommio::CpuSet> {
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set, which
    // sched_getaffinity fills for this process.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: `set` is a valid cpu_set_t of `size` bytes.
    if unsafe { libc::sched_getaffinity(0, size, &mut set) } != 0 {
        return None;
    }
    let online = glommio::CpuSet::online().ok()?;
    // SAFETY: CPU_ISSET reads a bit of the set for ids below its capacity.
    let allowed = online
        .filter(|l| l.cpu < libc::CPU_SETSIZE as usize && unsafe { libc::CPU_ISSET(l.cpu, &set) });
    (!allowed.is_empty()).then_some(allowed)
}

/// The error's whole text with its causes (`connection to broker
/// 127.0.0.1:9092 failed: Connection reset by peer (os error 104)`), which
/// is the kind errors are counted by: the address and the cause tell kinds
/// apart, and cutting at the first `:` left `connection to broker 127.0.0.1`.
fn error_text(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    // Bounded: a cause chain is a handful of errors.
    for _ in 0..16 {
        let Some(cause) = source else { break };
        let cause_text = cause.to_string();
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

async fn consume(
    job: ConsumerJob,
    plan: Arc<Plan>,
    control: Arc<Control>,
    recorder: Rc<RefCell<Recorder>>,
    tracker: Rc<RefCell<Tracker>>,
) -> Result<()> {
    // One connection per leader broker.
    let mut by_leader: HashMap<String, Vec<(String, i32)>> = HashMap::new();
    for tp in &job.partitions {
        let leader = plan
            .leaders
            .partitions
            .get(tp)
            .with_context(|| format!("no leader for {}-{}", tp.0, tp.1))?;
        by_leader
            .entry(leader.clone())
            .or_default()
            .push(tp.clone());
    }
    let mut tasks = Vec::new();
    for (leader, partitions) in by_leader {
        let ctx = (
            plan.clone(),
            control.clone(),
            recorder.clone(),
            tracker.clone(),
        );
        tasks.push(glommio::spawn_local(async move {
            fetch_loop(leader, partitions, ctx.0, ctx.1, ctx.2, ctx.3).await
        }));
    }
    for task in tasks {
        task.await?;
    }
    Ok(())
}

async fn fetch_loop(
    leader: String,
    partitions: Vec<(String, i32)>,
    plan: Arc<Plan>,
    control: Arc<Control>,
    recorder: Rc<RefCell<Recorder>>,
    tracker: Rc<RefCell<Tracker>>,
) -> Result<()> {
    let mut conn = kafka::connect(&leader).await?;
    let version = conn.version::<kafka_protocol::messages::FetchRequest>(4..=12)?;
    let mut offsets: HashMap<(String, i32), i64> = partitions
        .iter()
        .map(|tp| (tp.clone(), plan.start_offsets.get(tp).copied().unwrap_or(0)))
        .collect();
    let mut drain_deadline: Option<Instant> = None;
    let mut empty_after_stop = 0;
    // The next fetch is sent as soon as a response arrives, before its
    // records are decoded (its offsets come from the batch headers), so the
    // broker prepares the next response while this one is checked, as
    // Kafka's consumers prefetch.
    let mut pending = None;
    let fetch = |offsets: &HashMap<(String, i32), i64>| {
        let mut wanted: Vec<((String, i32), i64)> =
            offsets.iter().map(|(tp, o)| (tp.clone(), *o)).collect();
        wanted.sort();
        kafka::fetch_request(&wanted, Duration::from_millis(100), 8 << 20, 64 << 20)
    };
    loop {
        if plan.mode == Mode::Consume {
            let done = offsets
                .iter()
                .all(|(tp, o)| plan.end_offsets.get(tp).is_none_or(|end| o >= end));
            if done || control.stop.load(Ordering::Relaxed) {
                return Ok(());
            }
        } else if control.stop.load(Ordering::Relaxed)
            && control.producers_running.load(Ordering::SeqCst) == 0
        {
            let deadline =
                *drain_deadline.get_or_insert_with(|| Instant::now() + plan.drain_timeout);
            if Instant::now() >= deadline || empty_after_stop >= 3 {
                return Ok(());
            }
        }
        let sent = match pending.take() {
            Some(sent) => Ok(sent),
            None => conn.send(&fetch(&offsets), version).await,
        };
        let received = match sent {
            Ok(sent) => conn.receive(sent).await,
            Err(e) => Err(e),
        };
        let response = match received {
            Ok(r) => r,
            Err(e) => {
                recorder
                    .borrow_mut()
                    .error(format!("fetch: {}", error_text(&e)));
                if control.stop.load(Ordering::Relaxed) {
                    return Ok(());
                }
                glommio::timer::sleep(Duration::from_millis(100)).await;
                conn = kafka::connect(&leader).await?;
                continue;
            }
        };
        let mut ahead = offsets.clone();
        for (tp, error, records) in kafka::fetch_partitions(&response) {
            if let (0, Some(next)) = (error, records.as_ref().and_then(kafka::next_fetch_offset)) {
                if ahead.get(&tp).is_some_and(|&from| next > from) {
                    ahead.insert(tp, next);
                }
            }
        }
        let finished = plan.mode == Mode::Consume
            && ahead
                .iter()
                .all(|(tp, o)| plan.end_offsets.get(tp).is_none_or(|end| o >= end));
        if !finished && !control.stop.load(Ordering::Relaxed) {
            // A failed send is made again, and reported, next time round.
            pending = conn.send(&fetch(&ahead), version).await.ok();
        }
        if response.error_code != 0 {
            recorder
                .borrow_mut()
                .error(protocol::client::error_name(response.error_code));
        }
        let mut any = false;
        for (tp, error, records) in kafka::fetch_partitions(&response) {
            if error != 0 {
                recorder
                    .borrow_mut()
                    .error(protocol::client::error_name(error));
                continue;
            }
            let Some(records) = records else { continue };
            let from = offsets[&tp];
            let now_us = plan.unix_us(Instant::now());
            let mut recorder = recorder.borrow_mut();
            let mut tracker = tracker.borrow_mut();
            let next = kafka::decode_records(records, from, |record| {
                any = true;
                let due_us = if plan.mode == Mode::EndToEnd {
                    tracker.observe(&tp.0, tp.1, &record.value, &plan.payload)
                } else {
                    None
                };
                recorder.consumed(
                    record.value.len() as u64,
                    due_us.map(|d| now_us.saturating_sub(d)),
                );
            })?;
            if let Some(next) = next {
                if next > from {
                    offsets.insert(tp.clone(), next);
                }
            }
        }
        if control.stop.load(Ordering::Relaxed) {
            empty_after_stop = if any { 0 } else { empty_after_stop + 1 };
        }
    }
}
