//! The runtime edge of the transaction coordinator on one core: routes a
//! transactional id's requests to the core that owns its
//! `__transaction_state` partition's leader replica, loads that partition
//! on first use (replaying its records, then finishing the transactions it
//! left half ended), appends each planned transition (acks=all: on every
//! in-sync replica) before the coordinator applies it, writes the markers
//! of ended transactions, and aborts transactions past their timeout.

use std::future::Future;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use protocol::batch::build::{self, NewRecord};
use protocol::batch::{split_batches, RecordBatch};
use txn::coordinator::{AfterAppend, Coordinator, Plan};
use txn::error::TxnError;

use super::markers::{self, MarkerJob};
use super::TRANSACTION_STATE_TOPIC;
use crate::errors;
use crate::internal_topic::{self, InternalTopic, Placement, Unplaced};
use crate::limits::{OFFSETS_LOAD_READ_BYTES, TXN_MARKERS_WAIT_MS};
use crate::partition::Partition;
use crate::shard::Shard;
use crate::sync::Notify;

/// `__transaction_state` as Kafka creates it: compacted, 100 MiB
/// segments, `min.insync.replicas` from `transaction.state.log.min.isr`.
fn state_topic(shard: &Shard) -> InternalTopic {
    let config = &shard.config.transactions;
    InternalTopic::compacted(
        TRANSACTION_STATE_TOPIC,
        config.state_partitions,
        config.state_replication_factor,
        Some(config.state_min_isr),
        &[("unclean.leader.election.enable", "false")],
    )
}

fn txn_error(why: Unplaced) -> TxnError {
    match why {
        Unplaced::NotAvailable => TxnError::CoordinatorNotAvailable,
        Unplaced::NotHere => TxnError::NotCoordinator,
    }
}

/// The broker coordinating `transactional_id`: the leader of its
/// `__transaction_state` partition (created on first use, as Kafka's first
/// FindCoordinator for a transactional id does).
pub async fn coordinator(shard: &Rc<Shard>, transactional_id: &str) -> Result<i32, TxnError> {
    internal_topic::coordinator(shard, &state_topic(shard), transactional_id)
        .await
        .map_err(txn_error)
}

/// Runs `work` on the core coordinating `transactional_id`, once that core
/// has loaded its partition; `work` gets the partition.
pub async fn on_coordinator<R, F, Fut>(
    shard: &Rc<Shard>,
    transactional_id: &str,
    work: F,
) -> Result<R, TxnError>
where
    R: Send + 'static,
    F: FnOnce(Rc<Shard>, i32) -> Fut + Send + 'static,
    Fut: Future<Output = R> + 'static,
{
    if transactional_id.is_empty() {
        return Err(TxnError::InvalidRequest);
    }
    let placed = internal_topic::place(shard, &state_topic(shard), transactional_id).await;
    let Placement { partition, core } = placed.map_err(txn_error)?;
    shard
        .run_on(core, move |owner| async move {
            ensure_loaded(&owner, partition).await?;
            Ok(work(owner.clone(), partition).await)
        })
        .await
}

fn state_partition(shard: &Shard, partition: i32) -> Result<Rc<Partition>, TxnError> {
    shard
        .partition(TRANSACTION_STATE_TOPIC, partition)
        .filter(|p| p.is_leader())
        .ok_or(TxnError::NotCoordinator)
}

/// Runs `f` on the coordinator of `partition` (NOT_COORDINATOR when this
/// core has none loaded for it).
pub fn with_coordinator<R>(
    shard: &Shard,
    partition: i32,
    f: impl FnOnce(&mut Coordinator) -> R,
) -> Result<R, TxnError> {
    let mut coordinators = shard.transactions.coordinators.borrow_mut();
    match coordinators.get_mut(&partition) {
        Some(coordinator) if !coordinator.is_loading() => Ok(f(coordinator)),
        Some(_) => Err(TxnError::CoordinatorLoadInProgress),
        None => Err(TxnError::NotCoordinator),
    }
}

fn txn_config(shard: &Shard) -> txn::config::TxnConfig {
    txn::config::TxnConfig {
        max_timeout_ms: shard.config.transactions.max_timeout_ms,
        ..Default::default()
    }
}

/// Loads one `__transaction_state` partition into a coordinator of its
/// own, once per leadership.
pub async fn ensure_loaded(shard: &Rc<Shard>, partition: i32) -> Result<(), TxnError> {
    let manager = &shard.transactions;
    start_ticking(shard);
    loop {
        if manager
            .coordinators
            .borrow()
            .get(&partition)
            .is_some_and(|c| !c.is_loading())
        {
            return Ok(());
        }
        let in_progress = manager.loading.borrow().get(&partition).cloned();
        if let Some(notify) = in_progress {
            notify.wait().await;
            continue;
        }
        let notify = Rc::new(Notify::default());
        manager
            .loading
            .borrow_mut()
            .insert(partition, notify.clone());
        let result = load(shard, partition).await;
        manager.loading.borrow_mut().remove(&partition);
        notify.raise();
        let pending = result?;
        // Transactions the log left decided but not yet marked are
        // finished now, as Kafka's coordinator does after its load.
        for markers in pending {
            spawn_markers(shard, partition, markers);
        }
        return Ok(());
    }
}

/// How long a new coordinator waits for its partition's high watermark to
/// reach the log it was given before answering
/// COORDINATOR_LOAD_IN_PROGRESS (clients retry).
const LOAD_CATCH_UP_WAIT: Duration = Duration::from_secs(5);

/// Polls `check` every few milliseconds until it gives a value or `limit`
/// passes.
async fn poll_local<T>(limit: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(value) = check() {
            return Some(value);
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        glommio::timer::sleep(Duration::from_millis(10)).await;
    }
}

/// Reads the partition's log into a new coordinator at the partition's
/// leader epoch; returns the decided transactions whose markers are to be
/// written.
async fn load(
    shard: &Rc<Shard>,
    partition: i32,
) -> Result<Vec<txn::coordinator::Markers>, TxnError> {
    // The metadata names this core, but a partition just created or just
    // moved here may not lead yet: a short wait, then the client retries.
    let leading = poll_local(LOAD_CATCH_UP_WAIT, || {
        state_partition(shard, partition).ok()
    })
    .await;
    let Some(log) = leading else {
        return Err(TxnError::CoordinatorLoadInProgress);
    };
    let epoch = log.leader_epoch();
    let log_end = log.log_end_offset();
    if log.high_watermark() < log_end {
        futures_lite::future::or(log.wait_for_append(log_end - 1), async {
            glommio::timer::sleep(LOAD_CATCH_UP_WAIT).await;
        })
        .await;
    }
    let end = log.high_watermark();
    if end < log_end {
        return Err(TxnError::CoordinatorLoadInProgress);
    }
    let mut coordinator = Coordinator::new(txn_config(shard), epoch);
    let mut from = log.log_start_offset();
    let mut records = 0u64;
    while from < end {
        let read = log.read(from, OFFSETS_LOAD_READ_BYTES, false).await;
        if read.error_code != errors::NONE {
            tracing::error!(
                partition,
                from,
                code = read.error_code,
                "cannot load transactions"
            );
            return Err(TxnError::CoordinatorLoadInProgress);
        }
        let mut next = from;
        for batch in split_batches(read.records) {
            let Ok(batch) = batch else { break };
            next = batch.header().last_offset() + 1;
            let Ok(batch_records) = batch.records() else {
                continue;
            };
            for record in batch_records.flatten() {
                let Some(key) = record.key.as_deref() else {
                    continue;
                };
                if let Err(error) = coordinator.replay(key, record.value.as_deref()) {
                    // Skipping it would serve an older state of its id,
                    // which could end a decided transaction the other way.
                    tracing::error!(partition, offset = record.offset, %error, "a transaction state record does not decode: the partition is not served");
                    return Err(TxnError::CoordinatorNotAvailable);
                }
                records += 1;
            }
        }
        if next <= from {
            break;
        }
        from = next;
        // Leadership may have moved while this read.
        if state_partition(shard, partition)?.leader_epoch() != epoch {
            return Err(TxnError::NotCoordinator);
        }
    }
    let pending = coordinator.after_load();
    tracing::info!(
        partition,
        records,
        coordinator_epoch = epoch,
        unfinished = pending.len(),
        "loaded {TRANSACTION_STATE_TOPIC} partition"
    );
    shard
        .transactions
        .coordinators
        .borrow_mut()
        .insert(partition, coordinator);
    Ok(pending)
}

/// This broker no longer leads `__transaction_state` partition
/// `partition`: its transactional ids leave this core's coordinator (their
/// producers find the new one), to be loaded again if it comes back.
pub fn unload(shard: &Shard, partition: i32) {
    let Some(coordinator) = shard
        .transactions
        .coordinators
        .borrow_mut()
        .remove(&partition)
    else {
        return;
    };
    tracing::info!(
        partition,
        transactional_ids = coordinator.transactional_id_count(),
        "transaction state partition led elsewhere now: its ids unloaded"
    );
}

/// Takes the partition's write lock.
async fn write_lock(shard: &Shard, partition: i32) -> glommio::sync::StaticPermit {
    shard.transactions.write_locks.lock(partition).await
}

/// Appends a planned transition's record and, once every in-sync replica
/// has it, has the coordinator apply it; returns what follows. When the
/// append fails the record may still be in the log (a timeout), so the
/// partition's coordinator is dropped and loaded again from the log on
/// the next request, which the producer retries.
pub async fn commit_plan(
    shard: &Shard,
    partition: i32,
    plan: Plan,
) -> Result<AfterAppend, TxnError> {
    let _lock = write_lock(shard, partition).await;
    let transactional_id = plan.transactional_id().to_string();
    let written = append(shard, partition, plan.key(), plan.value()).await;
    if let Err(error) = written {
        unload(shard, partition);
        return Err(error);
    }
    with_coordinator(shard, partition, |c| c.complete(&transactional_id, plan))?
}

fn marker_job(markers: &txn::coordinator::Markers) -> MarkerJob {
    MarkerJob {
        producer_id: markers.producer_id,
        producer_epoch: markers.producer_epoch,
        coordinator_epoch: markers.coordinator_epoch,
        commit: markers.commit,
        partitions: markers.partitions.iter().cloned().collect(),
    }
}

/// Appends one `__transaction_state` record (`value` None: a tombstone)
/// and waits until every in-sync replica has it.
async fn append(
    shard: &Shard,
    partition: i32,
    key: &[u8],
    value: Option<&[u8]>,
) -> Result<(), TxnError> {
    let log = state_partition(shard, partition)?;
    let record = NewRecord {
        key: Some(key.to_vec()),
        value: value.map(<[u8]>::to_vec),
        headers: Vec::new(),
        timestamp_delta: 0,
    };
    let bytes = Bytes::from(build::batch(shard.now_ms(), std::slice::from_ref(&record)));
    let batch = RecordBatch::new(bytes).map_err(|error| {
        tracing::error!(partition, %error, "a transaction state batch built here does not parse");
        TxnError::CoordinatorNotAvailable
    })?;
    let outcome = log
        .produce(batch, -1, Duration::from_millis(TXN_MARKERS_WAIT_MS))
        .await;
    if outcome.error_code == errors::NONE {
        return Ok(());
    }
    tracing::warn!(
        partition,
        code = outcome.error_code,
        "transaction state append failed"
    );
    Err(if outcome.error_code == errors::NOT_LEADER_OR_FOLLOWER {
        TxnError::NotCoordinator
    } else {
        TxnError::CoordinatorNotAvailable
    })
}

/// Writes a decided transaction's markers until every partition has them
/// (or this core stops coordinating the partition: the next coordinator
/// finishes the job from the log), then records the transaction complete.
pub async fn finish_markers(shard: &Rc<Shard>, partition: i32, markers: txn::coordinator::Markers) {
    let job = marker_job(&markers);
    let mut left = job.clone();
    let mut attempt = 0u32;
    loop {
        let still_ours = shard
            .transactions
            .coordinators
            .borrow()
            .get(&partition)
            .is_some_and(|c| c.coordinator_epoch() == markers.coordinator_epoch);
        if !still_ours {
            return;
        }
        let failed = markers::write(shard, &left).await;
        if failed.is_empty() {
            crate::metrics::record_txn_ended(markers.commit);
            break;
        }
        attempt += 1;
        if attempt == 1 || attempt.is_multiple_of(50) {
            tracing::warn!(partition, producer_id = job.producer_id, failed = ?failed, attempt, "transaction markers not written yet; retrying");
        }
        left.partitions = failed.into_iter().map(|(p, _)| p).collect();
        if shard
            .stopping
            .sleep_unless_raised(Duration::from_millis(MARKER_RETRY_MS))
            .await
        {
            return;
        }
    }
    let id = markers.transactional_id.clone();
    let plan = with_coordinator(shard, partition, |c| c.markers_written(&id, shard.now_ms()));
    match plan {
        Ok(Ok(plan)) => {
            if let Err(error) = commit_plan(shard, partition, plan).await {
                tracing::warn!(partition, transactional_id = %id, %error, "completing a transaction failed; its partition is loaded again");
            }
        }
        Ok(Err(error)) | Err(error) => {
            tracing::warn!(partition, transactional_id = %id, %error, "a transaction changed while its markers were written")
        }
    }
}

/// Backoff between marker attempts.
const MARKER_RETRY_MS: u64 = 100;

/// Finishes a decided transaction in the background.
pub fn spawn_markers(shard: &Rc<Shard>, partition: i32, markers: txn::coordinator::Markers) {
    let shard = shard.clone();
    glommio::spawn_local(async move {
        finish_markers(&shard, partition, markers).await;
    })
    .detach();
}

fn start_ticking(shard: &Rc<Shard>) {
    if shard.transactions.ticking.replace(true) {
        return;
    }
    let shard = shard.clone();
    glommio::spawn_local(async move {
        let tick = Duration::from_millis(shard.config.transactions.abort_check_ms);
        loop {
            if shard.stopping.sleep_unless_raised(tick).await {
                return;
            }
            let partitions: Vec<i32> = shard
                .transactions
                .coordinators
                .borrow()
                .keys()
                .copied()
                .collect();
            for partition in partitions {
                abort_timed_out(&shard, partition).await;
                expire_ids(&shard, partition).await;
            }
        }
    })
    .detach();
}

/// Aborts the transactions of `partition` open longer than their
/// timeout, fencing their producers (a bumped epoch), as Kafka's
/// coordinator does.
async fn abort_timed_out(shard: &Rc<Shard>, partition: i32) {
    let now = shard.now_ms();
    let Ok(plans) = with_coordinator(shard, partition, |c| {
        let expired = c.expired(now);
        expired
            .iter()
            .filter_map(|id| c.abort_expired(id, now))
            .collect::<Vec<Plan>>()
    }) else {
        return;
    };
    for plan in plans {
        let id = plan.transactional_id().to_string();
        tracing::info!(partition, transactional_id = %id, "transaction timed out: aborting it and fencing its producer");
        match commit_plan(shard, partition, plan).await {
            Ok(AfterAppend::Fenced(markers) | AfterAppend::Ended(markers)) => {
                crate::metrics::record_txn_timed_out();
                spawn_markers(shard, partition, markers)
            }
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(partition, transactional_id = %id, %error, "aborting a timed-out transaction failed; tried again later")
            }
        }
    }
}

/// Removes the transactional ids of `partition` idle past
/// `transactional.id.expiration.ms`.
async fn expire_ids(shard: &Rc<Shard>, partition: i32) {
    let now = shard.now_ms();
    let expiration = shard.config.transactions.id_expiration_ms;
    let Ok(plans) = with_coordinator(shard, partition, |c| c.expire_ids(now, expiration)) else {
        return;
    };
    for plan in plans {
        let id = plan.transactional_id().to_string();
        match commit_plan(shard, partition, plan).await {
            Ok(_) => tracing::info!(partition, transactional_id = %id, "transactional id expired"),
            Err(error) => {
                tracing::debug!(partition, %error, "removing an expired transactional id failed; tried again later")
            }
        }
    }
}
