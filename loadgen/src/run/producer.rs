//! One producer: takes records on the rate schedule, accumulates them per
//! partition, and hands full or lingered batches to its lanes.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use bytes::Bytes;

use super::accumulator::{Accumulator, Outgoing, Waiting};
use super::lane::{lane, LaneQueue};
use super::{Control, Plan, ProducerJob};
use crate::e2e::{self, Acknowledged};
use crate::kafka;
use crate::rate::Schedule;
use crate::stats::Recorder;
use crate::workload::{Compression, KeyDistributor};

/// The key of a next record: none (the sticky partition takes it),
/// `key-N` round robin over 1,024 keys, or the time in nanoseconds made
/// unique by a counter.
fn next_key(distributor: KeyDistributor, counter: &mut u64, now_unix_us: u64) -> Option<Bytes> {
    match distributor {
        KeyDistributor::NoKey => None,
        KeyDistributor::KeyRoundRobin => {
            *counter += 1;
            Some(Bytes::from(format!("key-{}", *counter % 1024)))
        }
        KeyDistributor::RandomNano => {
            let key = Bytes::from(format!("{}", now_unix_us * 1000 + *counter));
            *counter += 1;
            Some(key)
        }
    }
}

/// A producer's lanes to the leaders of its topic's partitions: one lane
/// (a connection pipelining up to `in_flight_max` requests) per leader,
/// its queue holding up to one ready batch per partition.
struct Lanes {
    /// Leader (node id and address) → its lane's queue.
    senders: HashMap<(i32, String), flume::Sender<Outgoing>>,
    tasks: Vec<glommio::Task<()>>,
    /// Leader → producer id and epoch, when idempotent.
    producer_ids: HashMap<(i32, String), (i64, i16)>,
}

/// Connects a lane to every leader of the job's partitions (and asks
/// each for a producer id when idempotent) and starts it.
async fn open_lanes(
    job: &ProducerJob,
    plan: &Plan,
    waiting: &Rc<Waiting>,
    recorder: &Rc<RefCell<Recorder>>,
    acknowledged: &Rc<RefCell<Acknowledged>>,
) -> Result<Lanes> {
    let settings = &plan.workload.producer;
    let partitions = plan.workload.partitions_per_topic;
    let mut lanes = Lanes {
        senders: HashMap::new(),
        tasks: Vec::new(),
        producer_ids: HashMap::new(),
    };
    for p in 0..partitions {
        let leader = plan
            .leader_of(&(job.topic.clone(), p as i32))
            .with_context(|| format!("no leader for {}-{p}", job.topic))?;
        if lanes.senders.contains_key(&leader) {
            continue;
        }
        let mut conn = kafka::connect(&leader.1).await?;
        if settings.idempotence && !lanes.producer_ids.contains_key(&leader) {
            lanes.producer_ids.insert(
                leader.clone(),
                protocol::admin::init_producer_id(&mut conn).await?,
            );
        }
        let (tx, rx) = flume::bounded(partitions.max(4));
        lanes.senders.insert(leader, tx);
        lanes.tasks.push(glommio::spawn_local(lane(
            conn,
            LaneQueue {
                rx,
                waiting: waiting.clone(),
            },
            settings.acks,
            settings.in_flight_max,
            job.id,
            recorder.clone(),
            acknowledged.clone(),
        )));
    }
    Ok(lanes)
}

pub(super) async fn produce(
    job: ProducerJob,
    plan: Arc<Plan>,
    control: Arc<Control>,
    recorder: Rc<RefCell<Recorder>>,
    acknowledged: Rc<RefCell<Acknowledged>>,
) -> Result<()> {
    let w = &plan.workload;
    let settings = w.producer.clone();
    let partitions = w.partitions_per_topic;
    let waiting = Rc::new(Waiting::new(partitions));
    let lanes = open_lanes(&job, &plan, &waiting, &recorder, &acknowledged).await?;
    let mut batches = BatchSender {
        job: &job,
        plan: &plan,
        compression: settings.compression,
        senders: lanes.senders,
        producer_ids: lanes.producer_ids,
        waiting: waiting.clone(),
        sequences: vec![0; partitions],
    };

    let mut accumulators: Vec<Accumulator> =
        (0..partitions).map(|_| Accumulator::default()).collect();
    let mut next_sequence = vec![0u64; partitions];
    let mut schedule = Schedule::new(job.rate, plan.start);
    let keyed = w.key_distributor != KeyDistributor::NoKey;
    let mut sticky = (job.id as usize) % partitions;
    let mut key_counter = 0u64;
    let value_len = plan.payload.len();
    // A closed-loop round takes one batch's worth: as many records as fit
    // a batch by the fullness rule (`Accumulator::append`, keys at their
    // longest), so a round sends one full batch, not a full one and a
    // straggler of a few records (which took (a) from ~12,000 to ~19,000
    // produce requests and cost it a fifth of its throughput).
    let key_len_max = match w.key_distributor {
        KeyDistributor::NoKey => None,
        KeyDistributor::KeyRoundRobin => Some("key-1023".len()),
        KeyDistributor::RandomNano => Some(u64::MAX.to_string().len()),
    };
    let records_per_batch = kafka::records_per_batch(settings.batch_bytes, key_len_max, value_len);

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
            let key = next_key(w.key_distributor, &mut key_counter, plan.unix_us(now));
            let partition = match &key {
                Some(key) => kafka::partition_for_key(key, partitions) as usize,
                None => sticky,
            };
            let sequence = next_sequence[partition];
            next_sequence[partition] += 1;
            let acc = &mut accumulators[partition];
            let mut value = acc.value_from(&plan.payload, settings.batch_bytes);
            if value.len() >= e2e::HEADER_LEN {
                e2e::write_header(&mut value, job.id, sequence, plan.unix_us(due));
            }
            sent_bytes += value.len() as u64;
            let full = acc.append(value.freeze(), key, due, sequence, settings.batch_bytes);
            recorder
                .borrow_mut()
                .sent(1, now.saturating_duration_since(due).as_micros() as u64);
            if full {
                batches.send(partition, acc).await?;
                if !keyed {
                    sticky = (sticky + 1) % partitions;
                }
            }
        }
        let lingered = Lingered {
            linger: settings.linger,
            open_loop: schedule.is_open_loop(),
            keyed,
        };
        let (next_deadline, held) = lingered
            .send(&mut accumulators, &mut batches, &mut sticky)
            .await?;
        if schedule.is_open_loop() {
            nap(&schedule, next_deadline, held, &waiting).await;
        } else {
            glommio::yield_if_needed().await;
        }
    }
    // Send what is left, then let the lanes finish their in-flight requests.
    for (p, acc) in accumulators.iter_mut().enumerate() {
        if acc.first_due.is_some() {
            batches.send(p, acc).await?;
        }
    }
    drop(batches);
    for task in lanes.tasks {
        task.await;
    }
    Ok(())
}

/// Turns a partition's accumulated records into a batch (with a producer
/// id and sequence when idempotent) and hands it to the lane of the
/// partition's leader, waiting while that lane's queue is full.
struct BatchSender<'a> {
    job: &'a ProducerJob,
    plan: &'a Plan,
    compression: Compression,
    /// Leader (node id and address) → its lane's queue.
    senders: HashMap<(i32, String), flume::Sender<Outgoing>>,
    /// Leader → producer id and epoch, when idempotent.
    producer_ids: HashMap<(i32, String), (i64, i16)>,
    waiting: Rc<Waiting>,
    /// Each partition's next base sequence (idempotence).
    sequences: Vec<i32>,
}

impl BatchSender<'_> {
    async fn send(&mut self, p: usize, acc: &mut Accumulator) -> Result<()> {
        let sealed = acc.seal();
        let count = sealed.values.len();
        let leader = self
            .plan
            .leader_of(&(self.job.topic.clone(), p as i32))
            .expect("every partition's lane was opened");
        let pid = self.producer_ids.get(&leader).copied().unwrap_or((-1, -1));
        let base_sequence = if pid.0 >= 0 {
            let base = self.sequences[p];
            self.sequences[p] = base.wrapping_add(count as i32);
            base
        } else {
            -1
        };
        let timestamp_ms = (self.plan.unix_us(sealed.first_due) / 1000) as i64;
        let bytes = kafka::encode_batch(
            sealed.values,
            sealed.keys,
            timestamp_ms,
            pid,
            base_sequence,
            self.compression,
        )?;
        let outgoing = Outgoing {
            topic: self.job.topic.clone(),
            partition: p as i32,
            bytes,
            records: count as u64,
            value_bytes: sealed.value_bytes,
            first_due: sealed.first_due,
            sequences: sealed.sequences,
        };
        self.waiting.queued(p);
        let sender = self.senders[&leader].clone();
        sender
            .send_async(outgoing)
            .await
            .map_err(|_| anyhow::anyhow!("lane closed"))
    }
}

/// When open batches go without being full.
struct Lingered {
    linger: Duration,
    open_loop: bool,
    /// Keyed records: no sticky partition to move on.
    keyed: bool,
}

impl Lingered {
    /// Sends the batches whose oldest record has lingered long enough
    /// (every open batch in a closed loop), unless an earlier batch of
    /// their partition still waits for its request: then they stay open
    /// (see `Waiting`). Returns the next linger deadline and whether a
    /// batch was held.
    async fn send(
        &self,
        accumulators: &mut [Accumulator],
        batches: &mut BatchSender<'_>,
        sticky: &mut usize,
    ) -> Result<(Option<Instant>, bool)> {
        let now = Instant::now();
        let mut next_deadline: Option<Instant> = None;
        let mut held = false;
        let partitions = accumulators.len();
        for (p, acc) in accumulators.iter_mut().enumerate() {
            let Some(first_due) = acc.first_due else {
                continue;
            };
            let deadline = first_due + self.linger;
            let due = deadline <= now;
            if due && batches.waiting.any_waiting(p) && self.open_loop {
                held = true;
                continue;
            }
            if due || !self.open_loop {
                batches.send(p, acc).await?;
                if !self.keyed && p == *sticky {
                    *sticky = (*sticky + 1) % partitions;
                }
            } else {
                next_deadline = Some(next_deadline.map_or(deadline, |d: Instant| d.min(deadline)));
            }
        }
        Ok((next_deadline, held))
    }
}

/// An open-loop producer waits for its next record's due time or the next
/// linger deadline; with batches held, a lane taking a waiting batch
/// wakes it sooner.
async fn nap(schedule: &Schedule, next_deadline: Option<Instant>, held: bool, waiting: &Waiting) {
    let now = Instant::now();
    // Open loop: the next due time, whatever `now` is.
    let next_due = schedule.clone().next_due(now);
    let wake = next_deadline.map_or(next_due, |d| d.min(next_due));
    if wake <= now && !held {
        return;
    }
    let nap = glommio::timer::sleep(
        wake.saturating_duration_since(now)
            .max(Duration::from_micros(20)),
    );
    if held {
        futures_lite::future::or(nap, async {
            let _ = waiting.drained.acquire(1).await;
        })
        .await;
    } else {
        nap.await;
    }
}
