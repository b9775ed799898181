//! A lane: one connection to one leader pipelining a producer's batches
//! in produce requests, and recording what the broker acknowledged.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Instant;

use bytes::Bytes;
use kafka_protocol::messages::ProduceResponse;
use protocol::client::{Connection, Pending};

use super::accumulator::{Outgoing, Waiting};
use super::error_text;
use crate::e2e::Acknowledged;
use crate::kafka;
use crate::stats::Recorder;

/// About the most batch bytes one produce request carries.
const REQUEST_BYTES_MAX: usize = 8 << 20;

/// What a lane sends: the batches its producer queued, and the count of
/// them per partition it lowers as it takes them.
pub(super) struct LaneQueue {
    pub(super) rx: flume::Receiver<Outgoing>,
    pub(super) waiting: Rc<Waiting>,
}

/// One connection per producer and leader, pipelining up to
/// `in_flight_max` produce requests (as Kafka clients do with
/// `max.in.flight.requests.per.connection`). Each request takes what is
/// queued, at most one batch per partition; requests on one connection are
/// answered in order, so a partition's batches stay in order.
pub(super) async fn lane(
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
            let round = take_round(&mut queued, &rx, &waiting);
            let batches: Vec<(String, i32, Bytes)> = round
                .iter()
                .map(|o| (o.topic.clone(), o.partition, o.bytes.clone()))
                .collect();
            let request = kafka::produce_request(acks, &batches);
            if acks == 0 {
                let sent = conn.send_without_response(&request, version).await;
                record_unanswered(&mut recorder.borrow_mut(), &round, sent);
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
        record_answered(
            &mut recorder.borrow_mut(),
            &mut acknowledged.borrow_mut(),
            producer,
            round,
            response,
        );
    }
}

/// The next request's batches: what is queued or ready, at most one batch
/// per partition and about 8 MiB; a second batch of a partition waits for
/// the next request.
fn take_round(
    queued: &mut VecDeque<Outgoing>,
    rx: &flume::Receiver<Outgoing>,
    waiting: &Waiting,
) -> Vec<Outgoing> {
    let mut round: Vec<Outgoing> = Vec::new();
    let mut request_bytes = 0usize;
    while request_bytes < REQUEST_BYTES_MAX {
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
    round
}

/// An acks=0 request's batches count as published once written.
fn record_unanswered(
    recorder: &mut Recorder,
    round: &[Outgoing],
    sent: Result<(), protocol::client::ClientError>,
) {
    let now = Instant::now();
    match sent {
        Ok(()) => {
            for o in round {
                recorder.publish(
                    o.records,
                    o.value_bytes,
                    now.saturating_duration_since(o.first_due).as_micros() as u64,
                );
            }
        }
        Err(e) => recorder.error(format!("produce: {}", error_text(&e))),
    }
}

/// A produce response: each batch is published (and its sequences
/// acknowledged) or counted as its partition's error.
fn record_answered(
    recorder: &mut Recorder,
    acknowledged: &mut Acknowledged,
    producer: u32,
    round: Vec<Outgoing>,
    response: Result<ProduceResponse, protocol::client::ClientError>,
) {
    let now = Instant::now();
    match response {
        Ok(response) => {
            let outcome = kafka::produce_errors(&response);
            for o in round {
                match outcome.get(&(o.topic.clone(), o.partition)) {
                    Some(None) => {
                        let latency = now.saturating_duration_since(o.first_due).as_micros() as u64;
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
