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

use super::accumulator::{Accumulator, Outgoing, Waiting, ARENA_BYTES_MAX};
use super::lane::{lane, LaneQueue};
use super::{Control, Plan, ProducerJob};
use crate::e2e::{self, Acknowledged};
use crate::kafka;
use crate::rate::Schedule;
use crate::stats::Recorder;
use crate::workload::KeyDistributor;

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
            producer_ids.insert(
                address.clone(),
                protocol::admin::init_producer_id(&mut conn).await?,
            );
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
