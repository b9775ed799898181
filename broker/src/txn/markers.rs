//! Writing transaction markers: the transaction coordinator's last step,
//! and the WriteTxnMarkers (27) handler of the broker that leads the
//! partitions. A marker on a partition led by a core here is written by
//! that core (answered once the partition's in-sync replicas hold it);
//! one led by another broker goes there as WriteTxnMarkers over a
//! connection of its own. A marker on a `__consumer_offsets` partition
//! also completes the offsets its group coordinator staged for the
//! transaction.
//!
//! WriteTxnMarkers also comes from operators: KIP-664's abort of a
//! hanging transaction (`strom transaction abort`,
//! `kafka-transactions.sh abort`). A coordinator's request carries a
//! tagged field of Strom's ([`FROM_COORDINATOR_TAG`]); one without it is
//! an operator's and is held to [`check_operator_abort`] on the
//! partition's core before anything is written: only an abort, of a
//! producer the partition knows, at its epoch there, whose transaction
//! is open there. A coordinator's marker needs none of that: it may end
//! a transaction that never wrote to the partition, or fence a producer
//! at a newer epoch, and it must be written all the same.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{
    ProducerId, TopicName, WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};
use kafka_protocol::protocol::StrBytes;
use protocol::control::Marker;

use crate::cluster::links;
use crate::errors;
use crate::limits::TXN_MARKERS_WAIT_MS;
use crate::metadata::OFFSETS_TOPIC;
use crate::producer_state::ProducerView;
use crate::shard::Shard;
use crate::sync::join_all;

type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + 'a>>;

pub const VERSION_MIN: i16 = 1;
pub const VERSION_MAX: i16 = 1;

/// The tagged field (unknown to Kafka, which skips it) that marks a
/// WriteTxnMarkers as a transaction coordinator's; its value is the
/// sending broker's node id (4 bytes, big-endian).
pub const FROM_COORDINATOR_TAG: i32 = 0x5354;

/// One transaction's end, to be marked on its partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkerJob {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub coordinator_epoch: i32,
    pub commit: bool,
    pub partitions: Vec<(String, i32)>,
}

/// Writes `job`'s marker on every partition; returns the partitions whose
/// marker is not known to be written, with the error code (empty: all
/// written).
pub async fn write(shard: &Rc<Shard>, job: &MarkerJob) -> Vec<((String, i32), i16)> {
    let image = shard.metadata.image();
    let mut here: Vec<(usize, String, i32)> = Vec::new();
    let mut elsewhere: BTreeMap<i32, Vec<(String, i32)>> = BTreeMap::new();
    let mut failed = Vec::new();
    for (topic, partition) in &job.partitions {
        let leader = crate::cluster::leader_of(&image, Some(topic), *partition).map(|(id, _)| id);
        match leader {
            Some(leader) if shard.in_cluster() && leader != shard.config.node_id => elsewhere
                .entry(leader)
                .or_default()
                .push((topic.clone(), *partition)),
            _ => match image.leader_core_by_name(topic, *partition, shard.cores) {
                Ok(core) => here.push((core, topic.clone(), *partition)),
                Err(why) => failed.push(((topic.clone(), *partition), errors::not_served(why))),
            },
        }
    }
    let local = join_all(
        here.into_iter()
            .map(|(core, topic, partition)| {
                let job = job.clone();
                Box::pin(async move {
                    let code = write_on_core(
                        shard,
                        core,
                        job,
                        topic.clone(),
                        partition,
                        Sender::Coordinator,
                    )
                    .await;
                    ((topic, partition), code)
                }) as BoxFuture<'_, _>
            })
            .collect(),
    );
    let remote = join_all(
        elsewhere
            .into_iter()
            .map(|(broker, partitions)| {
                let job = job.clone();
                Box::pin(async move { write_remote(shard, broker, &job, partitions).await })
                    as BoxFuture<'_, _>
            })
            .collect(),
    );
    let (local, remote) = futures_lite::future::zip(local, remote).await;
    failed.extend(local.into_iter().filter(|(_, code)| *code != errors::NONE));
    failed.extend(
        remote
            .into_iter()
            .flatten()
            .filter(|(_, code)| *code != errors::NONE),
    );
    failed
}

/// Who asked for a marker: a transaction coordinator (this broker's, or
/// another's through WriteTxnMarkers with [`FROM_COORDINATOR_TAG`]), or
/// an operator aborting a hanging transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sender {
    Coordinator,
    Operator,
}

async fn write_on_core(
    shard: &Rc<Shard>,
    core: usize,
    job: MarkerJob,
    topic: String,
    index: i32,
    sender: Sender,
) -> i16 {
    shard
        .run_on(core, move |owner| async move {
            let Some(partition) = owner.partition(&topic, index) else {
                return errors::NOT_LEADER_OR_FOLLOWER;
            };
            if sender == Sender::Operator {
                // Checked and written with no wait between: the marker's
                // append starts from the state that was checked.
                if !partition.is_leader() {
                    return errors::NOT_LEADER_OR_FOLLOWER;
                }
                let state = PartitionTxns {
                    producers: partition.producers(),
                    open: partition.open_transactions(),
                };
                if let Err(code) = check_operator_abort(&job, &state) {
                    tracing::warn!(%topic, partition = index, producer_id = job.producer_id, producer_epoch = job.producer_epoch, code, "an operator's transaction marker refused; nothing written");
                    return code;
                }
            }
            let code = partition
                .write_marker(
                    job.producer_id,
                    job.producer_epoch,
                    job.coordinator_epoch,
                    Marker::from_commit(job.commit),
                    Duration::from_millis(TXN_MARKERS_WAIT_MS),
                )
                .await;
            if code == errors::NONE && topic == OFFSETS_TOPIC {
                crate::group::manager::complete_txn(&owner, index, job.producer_id, job.commit);
            }
            if code == errors::NONE && sender == Sender::Operator {
                tracing::info!(%topic, partition = index, producer_id = job.producer_id, producer_epoch = job.producer_epoch, coordinator_epoch = job.coordinator_epoch, "an operator aborted a transaction open on this partition");
                crate::metrics::record_operator_abort();
            }
            code
        })
        .await
}

/// What an operator's marker is checked against: the partition's
/// producers as DescribeProducers shows them, and its open transactions
/// as (first offset, producer id).
struct PartitionTxns {
    producers: Vec<ProducerView>,
    open: Vec<(i64, i64)>,
}

/// Whether an operator's marker may be written: an abort (ending a
/// transaction as committed from outside its coordinator would make
/// half of it visible), with a coordinator epoch (Kafka's tool sends 0
/// when DescribeProducers names none), of a producer the partition
/// knows, at its epoch here (an older one is a zombie's, a newer one
/// would fence the producer on this partition alone), whose transaction
/// is open here. Else the Kafka code to answer: INVALID_REQUEST,
/// UNKNOWN_PRODUCER_ID, INVALID_PRODUCER_EPOCH or INVALID_TXN_STATE.
fn check_operator_abort(job: &MarkerJob, state: &PartitionTxns) -> Result<(), i16> {
    if job.commit || job.coordinator_epoch < 0 {
        return Err(errors::INVALID_REQUEST);
    }
    // A producer known only by a coordinator's transactional write
    // (offsets sent to a transaction) has no epoch here to check against.
    let Some(producer) = state
        .producers
        .iter()
        .find(|p| p.producer_id == job.producer_id)
    else {
        return Err(crate::producer_state::UNKNOWN_PRODUCER_ID);
    };
    if producer.epoch != job.producer_epoch {
        return Err(errors::INVALID_PRODUCER_EPOCH);
    }
    if !state.open.iter().any(|&(_, id)| id == job.producer_id) {
        return Err(errors::INVALID_TXN_STATE);
    }
    Ok(())
}

async fn write_remote(
    shard: &Rc<Shard>,
    broker: i32,
    job: &MarkerJob,
    partitions: Vec<(String, i32)>,
) -> Vec<((String, i32), i16)> {
    let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for (topic, partition) in &partitions {
        by_topic.entry(topic.clone()).or_default().push(*partition);
    }
    let marker = WritableTxnMarker::default()
        .with_producer_id(ProducerId(job.producer_id))
        .with_producer_epoch(job.producer_epoch)
        .with_transaction_result(job.commit)
        .with_coordinator_epoch(job.coordinator_epoch)
        .with_topics(
            by_topic
                .into_iter()
                .map(|(name, indexes)| {
                    WritableTxnMarkerTopic::default()
                        .with_name(TopicName(StrBytes::from_string(name)))
                        .with_partition_indexes(indexes)
                })
                .collect(),
        );
    let request = WriteTxnMarkersRequest::default()
        .with_markers(vec![marker])
        .with_unknown_tagged_fields(BTreeMap::from([(
            FROM_COORDINATOR_TAG,
            Bytes::copy_from_slice(&shard.config.node_id.to_be_bytes()),
        )]));
    match links::write_txn_markers(shard, broker, request).await {
        Ok(response) => {
            let mut codes: BTreeMap<(String, i32), i16> = partitions
                .iter()
                .map(|p| (p.clone(), errors::REQUEST_TIMED_OUT))
                .collect();
            for topic in response.markers.into_iter().flat_map(|m| m.topics) {
                for p in topic.partitions {
                    codes.insert((topic.name.0.to_string(), p.partition_index), p.error_code);
                }
            }
            codes.into_iter().collect()
        }
        Err(error) => {
            tracing::warn!(broker, %error, "sending transaction markers failed");
            partitions
                .into_iter()
                .map(|p| (p, errors::COORDINATOR_NOT_AVAILABLE))
                .collect()
        }
    }
}

/// WriteTxnMarkers: each marker written on the partitions this broker
/// leads (others: NOT_LEADER_OR_FOLLOWER); from a transaction coordinator
/// as it is, from an operator once [`check_operator_abort`] allows it.
pub async fn handle(shard: &Rc<Shard>, request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse {
    let image = shard.metadata.image();
    let sender = if request
        .unknown_tagged_fields
        .contains_key(&FROM_COORDINATOR_TAG)
    {
        Sender::Coordinator
    } else {
        Sender::Operator
    };
    let mut markers = Vec::with_capacity(request.markers.len());
    for marker in request.markers {
        let job = MarkerJob {
            producer_id: marker.producer_id.0,
            producer_epoch: marker.producer_epoch,
            coordinator_epoch: marker.coordinator_epoch,
            commit: marker.transaction_result,
            partitions: Vec::new(),
        };
        let mut writes: Vec<BoxFuture<'_, (usize, i32, i16)>> = Vec::new();
        for (slot, topic) in marker.topics.iter().enumerate() {
            let name = topic.name.0.to_string();
            for &index in &topic.partition_indexes {
                let place = image.leader_core_by_name(&name, index, shard.cores);
                let job = job.clone();
                let name = name.clone();
                writes.push(Box::pin(async move {
                    let code = match place {
                        Ok(core) => write_on_core(shard, core, job, name, index, sender).await,
                        Err(why) => errors::not_served(why),
                    };
                    (slot, index, code)
                }));
            }
        }
        let mut topics: Vec<WritableTxnMarkerTopicResult> = marker
            .topics
            .iter()
            .map(|topic| WritableTxnMarkerTopicResult::default().with_name(topic.name.clone()))
            .collect();
        for (slot, index, code) in join_all(writes).await {
            topics[slot].partitions.push(
                WritableTxnMarkerPartitionResult::default()
                    .with_partition_index(index)
                    .with_error_code(code),
            );
        }
        markers.push(
            WritableTxnMarkerResult::default()
                .with_producer_id(marker.producer_id)
                .with_topics(topics),
        );
    }
    WriteTxnMarkersResponse::default().with_markers(markers)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Producer 7 at epoch 2 has a transaction open from offset 10;
    /// producer 8 at epoch 0 has none.
    fn partition() -> PartitionTxns {
        let view = |producer_id, epoch, current_txn_start_offset| ProducerView {
            producer_id,
            epoch,
            last_sequence: 4,
            last_timestamp_ms: 1_000,
            current_txn_start_offset,
            coordinator_epoch: -1,
        };
        PartitionTxns {
            producers: vec![view(7, 2, 10), view(8, 0, -1)],
            open: vec![(10, 7)],
        }
    }

    fn check(producer_id: i64, producer_epoch: i16, coordinator_epoch: i32, commit: bool) -> i16 {
        let job = MarkerJob {
            producer_id,
            producer_epoch,
            coordinator_epoch,
            commit,
            partitions: Vec::new(),
        };
        match check_operator_abort(&job, &partition()) {
            Ok(()) => errors::NONE,
            Err(code) => code,
        }
    }

    #[test]
    fn an_operator_may_only_abort_an_open_transaction_of_a_known_producer_at_its_epoch() {
        let unknown = crate::producer_state::UNKNOWN_PRODUCER_ID;
        // (producer id, producer epoch, coordinator epoch, commit) -> code
        let cases = [
            ((7, 2, 0, false), errors::NONE),
            ((7, 2, 5, false), errors::NONE),
            ((7, 2, 0, true), errors::INVALID_REQUEST),
            ((7, 2, -1, false), errors::INVALID_REQUEST),
            ((7, 1, 0, false), errors::INVALID_PRODUCER_EPOCH),
            ((7, 3, 0, false), errors::INVALID_PRODUCER_EPOCH),
            ((8, 0, 0, false), errors::INVALID_TXN_STATE),
            ((9, 0, 0, false), unknown),
        ];
        for ((producer_id, epoch, coordinator_epoch, commit), expected) in cases {
            assert_eq!(
                check(producer_id, epoch, coordinator_epoch, commit),
                expected,
                "producer {producer_id} epoch {epoch} coordinator epoch {coordinator_epoch} commit {commit}"
            );
        }
    }

    #[test]
    fn a_producer_with_an_open_transaction_but_no_epoch_here_is_refused() {
        // Known only by a coordinator's transactional write: no view.
        let state = PartitionTxns {
            producers: Vec::new(),
            open: vec![(3, 7)],
        };
        let job = MarkerJob {
            producer_id: 7,
            producer_epoch: 0,
            coordinator_epoch: 0,
            commit: false,
            partitions: Vec::new(),
        };
        assert_eq!(
            check_operator_abort(&job, &state),
            Err(crate::producer_state::UNKNOWN_PRODUCER_ID)
        );
    }
}
