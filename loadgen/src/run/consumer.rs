//! Consumers: one fetch loop per leader broker, prefetching the next
//! response while the records of this one are checked.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use kafka_protocol::messages::FetchResponse;
use protocol::client::{error_name, ERROR_NONE};

use super::{error_text, ConsumerJob, Control, Mode, Plan};
use crate::e2e::Tracker;
use crate::kafka;
use crate::stats::Recorder;

pub(super) async fn consume(
    job: ConsumerJob,
    plan: Arc<Plan>,
    control: Arc<Control>,
    recorder: Rc<RefCell<Recorder>>,
    tracker: Rc<RefCell<Tracker>>,
) -> Result<()> {
    // One connection per leader broker (node id).
    let mut by_leader: HashMap<(i32, String), Vec<(String, i32)>> = HashMap::new();
    for tp in &job.partitions {
        let leader = plan
            .leader_of(tp)
            .with_context(|| format!("no leader for {}-{}", tp.0, tp.1))?;
        by_leader.entry(leader).or_default().push(tp.clone());
    }
    let mut tasks = Vec::new();
    for ((_, leader), partitions) in by_leader {
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
            let next = records.as_ref().and_then(kafka::next_fetch_offset);
            if let (ERROR_NONE, Some(next)) = (error, next) {
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
        let any = consume_response(
            &response,
            &plan,
            &mut offsets,
            &mut recorder.borrow_mut(),
            &mut tracker.borrow_mut(),
        )?;
        if control.stop.load(Ordering::Relaxed) {
            empty_after_stop = if any { 0 } else { empty_after_stop + 1 };
        }
    }
}

/// Counts (and in end-to-end mode checks) the records of one fetch
/// response and moves `offsets` past them; whether it held any record.
fn consume_response(
    response: &FetchResponse,
    plan: &Plan,
    offsets: &mut HashMap<(String, i32), i64>,
    recorder: &mut Recorder,
    tracker: &mut Tracker,
) -> Result<bool> {
    if response.error_code != ERROR_NONE {
        recorder.error(error_name(response.error_code));
    }
    let mut any = false;
    for (tp, error, records) in kafka::fetch_partitions(response) {
        if error != ERROR_NONE {
            recorder.error(error_name(error));
            continue;
        }
        let Some(records) = records else { continue };
        let from = offsets[&tp];
        let now_us = plan.unix_us(Instant::now());
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
    Ok(any)
}
