//! Writing transaction markers: the transaction coordinator's last step,
//! and the WriteTxnMarkers (27) handler of the broker that leads the
//! partitions. A marker on a partition led by a core here is written by
//! that core (answered once the partition's in-sync replicas hold it);
//! one led by another broker goes there as WriteTxnMarkers over a
//! connection of its own. A marker on a `__consumer_offsets` partition
//! also completes the offsets its group coordinator staged for the
//! transaction.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

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
use crate::shard::Shard;
use crate::sync::join_all;

type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + 'a>>;

pub const VERSION_MIN: i16 = 1;
pub const VERSION_MAX: i16 = 1;

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
                    let code = write_on_core(shard, core, job, topic.clone(), partition).await;
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

async fn write_on_core(
    shard: &Rc<Shard>,
    core: usize,
    job: MarkerJob,
    topic: String,
    index: i32,
) -> i16 {
    shard
        .run_on(core, move |owner| async move {
            let Some(partition) = owner.partition(&topic, index) else {
                return errors::NOT_LEADER_OR_FOLLOWER;
            };
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
            code
        })
        .await
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
    let request = WriteTxnMarkersRequest::default().with_markers(vec![marker]);
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

/// WriteTxnMarkers from a transaction coordinator: each marker written on
/// the partitions this broker leads (others: NOT_LEADER_OR_FOLLOWER).
pub async fn handle(shard: &Rc<Shard>, request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse {
    let image = shard.metadata.image();
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
                        Ok(core) => write_on_core(shard, core, job, name, index).await,
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
