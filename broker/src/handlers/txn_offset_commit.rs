//! TxnOffsetCommit (28), versions 0–3: a transactional producer commits
//! its consumer group's offsets inside its transaction (KIP-98; v3 adds
//! KIP-447's member id, generation and instance id, checked when given).
//! The offsets go to the group's `__consumer_offsets` partition as one
//! transactional batch of the producer, answered once every in-sync
//! replica has it; they stay invisible to OffsetFetch until the
//! transaction's commit marker reaches that partition, and go with an
//! abort marker. The producer's first offsets there in a transaction are
//! checked with its transaction coordinator first: a partition not added
//! with AddOffsetsToTxn is INVALID_TXN_STATE.

use std::rc::Rc;

use groups::error::GroupError;
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{TxnOffsetCommitRequest, TxnOffsetCommitResponse};
use txn::coordinator::ProducerIdAndEpoch;

use crate::group::coordinator::{CommitPartition, Committer};
use crate::group::{manager, records};
use crate::handlers::offset_commit::{commit_parts, place_outcomes, AskedOffset};
use crate::metadata::OFFSETS_TOPIC;
use crate::shard::Shard;

pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 3;

pub async fn handle(
    shard: &Rc<Shard>,
    request: TxnOffsetCommitRequest,
    version: i16,
) -> TxnOffsetCommitResponse {
    let group_id = request.group_id.0.to_string();
    let asked = request.topics.iter().map(|topic| {
        let partitions = topic.partitions.iter().map(|p| AskedOffset {
            partition: p.partition_index,
            offset: p.committed_offset,
            leader_epoch: if version >= 2 {
                p.committed_leader_epoch
            } else {
                -1
            },
            metadata: p.committed_metadata.as_deref(),
        });
        (topic.name.0.as_str(), partitions.collect())
    });
    let (mut codes, valid) = commit_parts(shard, asked);
    let (generation_id, member_id, group_instance_id) = if version >= 3 {
        (
            request.generation_id,
            request.member_id.to_string(),
            request.group_instance_id.as_ref().map(|i| i.to_string()),
        )
    } else {
        (-1, String::new(), None)
    };
    let committer = Committer {
        group_id: group_id.clone(),
        generation_id,
        member_id,
        group_instance_id,
    };
    let producer_id = request.producer_id.0;
    let epoch = request.producer_epoch;
    let transactional_id = request.transactional_id.0.to_string();
    let slots: Vec<usize> = valid.iter().map(|(slot, _)| *slot).collect();
    let parts: Vec<CommitPartition> = valid.into_iter().map(|(_, p)| p).collect();
    let result = if request.transactional_id.0.is_empty() || producer_id < 0 {
        Err(GroupError::InvalidRequest)
    } else {
        manager::on_coordinator(shard, &group_id, move |owner, partition| async move {
            let producer = ProducerIdAndEpoch {
                producer_id,
                producer_epoch: epoch,
            };
            commit_on_owner(
                &owner,
                partition,
                &transactional_id,
                producer,
                committer,
                parts,
            )
            .await
        })
        .await
        .and_then(|inner| inner)
    };
    place_outcomes(&mut codes, slots, result);
    let mut codes = codes.into_iter();
    let topics = request
        .topics
        .iter()
        .map(|topic| {
            TxnOffsetCommitResponseTopic::default()
                .with_name(topic.name.clone())
                .with_partitions(
                    topic
                        .partitions
                        .iter()
                        .map(|p| {
                            TxnOffsetCommitResponsePartition::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(codes.next().expect("one code per partition"))
                        })
                        .collect(),
                )
        })
        .collect();
    TxnOffsetCommitResponse::default().with_topics(topics)
}

/// Stages the offsets and appends them as the producer's transactional
/// batch, once the transaction coordinator confirmed that the group's
/// `__consumer_offsets` partition is in the producer's transaction (as
/// Kafka's coordinators check since 3.6): offsets committed without
/// AddOffsetsToTxn, or after the transaction ended, would wait for a marker
/// that never comes, and OffsetFetch would answer UNSTABLE_OFFSET_COMMIT
/// for good.
async fn commit_on_owner(
    owner: &Rc<Shard>,
    partition: i32,
    transactional_id: &str,
    producer: ProducerIdAndEpoch,
    committer: Committer,
    parts: Vec<CommitPartition>,
) -> Result<Vec<Result<(), GroupError>>, GroupError> {
    let ProducerIdAndEpoch {
        producer_id,
        producer_epoch: epoch,
    } = producer;
    let _lock = manager::write_lock(owner, partition).await;
    let log = owner
        .partition(OFFSETS_TOPIC, partition)
        .ok_or(GroupError::NotCoordinator)?;
    if let Some(token) = log.start_txn_verification(producer_id) {
        let checked =
            crate::txn::verify::check(owner, transactional_id, producer, OFFSETS_TOPIC, partition)
                .await;
        // A marker written meanwhile ended the transaction checked.
        let holds = log.txn_verification_holds(producer_id, token);
        log.end_txn_verification(producer_id, token);
        match checked {
            Err(code) => return Err(verification_refusal(code)),
            Ok(()) if !holds => return Err(GroupError::InvalidTxnState),
            Ok(()) => {}
        }
    }
    let outcomes =
        manager::with_coordinator(owner, |c| c.txn_commit(producer_id, &committer, &parts))?;
    let entries: Vec<manager::OffsetsRecord> = parts
        .iter()
        .zip(&outcomes)
        .filter(|(_, outcome)| outcome.is_ok())
        .map(|(p, _)| {
            (
                records::offset_key(&committer.group_id, &p.topic, p.partition),
                Some(records::offset_value(&p.offset)),
            )
        })
        .collect();
    manager::append_transactional(owner, partition, producer_id, epoch, entries).await?;
    Ok(outcomes)
}

/// The transaction coordinator's refusal as a TxnOffsetCommit answer:
/// retriable when it could not answer now.
fn verification_refusal(code: i16) -> GroupError {
    match code {
        crate::errors::PRODUCER_FENCED | crate::errors::INVALID_PRODUCER_EPOCH => {
            GroupError::ProducerFenced
        }
        crate::errors::CONCURRENT_TRANSACTIONS
        | crate::errors::COORDINATOR_NOT_AVAILABLE
        | crate::errors::COORDINATOR_LOAD_IN_PROGRESS
        | crate::errors::NOT_COORDINATOR
        | crate::errors::NETWORK_EXCEPTION => GroupError::CoordinatorLoadInProgress,
        _ => GroupError::InvalidTxnState,
    }
}
