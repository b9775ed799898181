//! OffsetCommit (8), versions 2–9. Members commit with their generation;
//! `assign()` consumers with generation -1 and an empty member id (allowed
//! while the group has no members). Accepted offsets are appended to the
//! group's `__consumer_offsets` partition and answered once durable.
//! v9 carries a KIP-848 member epoch in the generation's place: a
//! consumer-protocol group checks it against the member's epoch
//! (STALE_MEMBER_EPOCH when it differs), a classic group as the
//! generation, as Kafka does. A group that does not exist, with a
//! generation of 0 or more, is GROUP_ID_NOT_FOUND from v9 and
//! ILLEGAL_GENERATION before. v10 (topic ids) is not in the protocol
//! crate yet.

use std::rc::Rc;

use groups::error::GroupError;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::{OffsetCommitRequest, OffsetCommitResponse};

use crate::errors;
use crate::group::coordinator::{CommitPartition, CommittedOffset, Committer};
use crate::group::{manager, records};
use crate::shard::Shard;

pub const VERSION_MIN: i16 = 2;
pub const VERSION_MAX: i16 = 9;

pub async fn handle(
    shard: &Rc<Shard>,
    request: OffsetCommitRequest,
    version: i16,
) -> OffsetCommitResponse {
    let group_id = request.group_id.0.to_string();
    let asked = request.topics.iter().map(|topic| {
        let partitions = topic.partitions.iter().map(|p| AskedOffset {
            partition: p.partition_index,
            offset: p.committed_offset,
            leader_epoch: if version >= 6 {
                p.committed_leader_epoch
            } else {
                -1
            },
            metadata: p.committed_metadata.as_deref(),
        });
        (topic.name.0.as_str(), partitions.collect())
    });
    let (mut codes, valid) = commit_parts(shard, asked);
    let committer = Committer {
        group_id: group_id.clone(),
        generation_id: request.generation_id_or_member_epoch,
        member_id: request.member_id.to_string(),
        group_instance_id: request.group_instance_id.as_ref().map(|i| i.to_string()),
    };
    let slots: Vec<usize> = valid.iter().map(|(slot, _)| *slot).collect();
    let parts: Vec<CommitPartition> = valid.into_iter().map(|(_, p)| p).collect();
    let result = manager::on_coordinator(shard, &group_id, move |owner, partition| async move {
        commit_on_owner(&owner, partition, committer, parts).await
    })
    .await
    .and_then(|inner| inner);
    let result = match result {
        Err(GroupError::GroupIdNotFound) if version < 9 => Err(GroupError::IllegalGeneration),
        other => other,
    };
    place_outcomes(&mut codes, slots, result);
    let mut codes = codes.into_iter();
    let topics = request
        .topics
        .iter()
        .map(|topic| {
            OffsetCommitResponseTopic::default()
                .with_name(topic.name.clone())
                .with_partitions(
                    topic
                        .partitions
                        .iter()
                        .map(|p| {
                            OffsetCommitResponsePartition::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(codes.next().expect("one code per partition"))
                        })
                        .collect(),
                )
        })
        .collect();
    OffsetCommitResponse::default().with_topics(topics)
}

/// One partition's offset as a commit request asks it.
pub struct AskedOffset<'a> {
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<&'a str>,
}

/// The partitions of a commit request (OffsetCommit, TxnOffsetCommit), by
/// topic in request order: one code per partition (UNKNOWN_TOPIC_OR_PARTITION
/// for one that does not exist, else NONE for now) and the partitions to
/// commit with their slot among the codes.
pub fn commit_parts<'a>(
    shard: &Shard,
    topics: impl Iterator<Item = (&'a str, Vec<AskedOffset<'a>>)>,
) -> (Vec<i16>, Vec<(usize, CommitPartition)>) {
    let image = shard.metadata.image();
    let now = shard.now_ms();
    let mut codes: Vec<i16> = Vec::new();
    let mut valid: Vec<(usize, CommitPartition)> = Vec::new();
    for (name, partitions) in topics {
        let count = image
            .topics
            .get(name)
            .map_or(0, |t| t.partition_cores.len() as i32);
        for p in partitions {
            let slot = codes.len();
            if !(0..count).contains(&p.partition) {
                codes.push(errors::UNKNOWN_TOPIC_OR_PARTITION);
                continue;
            }
            codes.push(errors::NONE);
            valid.push((
                slot,
                CommitPartition {
                    topic: name.to_string(),
                    partition: p.partition,
                    offset: CommittedOffset {
                        offset: p.offset,
                        leader_epoch: p.leader_epoch,
                        metadata: p.metadata.unwrap_or_default().to_string(),
                        commit_timestamp_ms: now,
                    },
                },
            ));
        }
    }
    (codes, valid)
}

/// Puts a commit's outcome in the codes of the partitions it was for (by
/// slot): each partition's, or the whole commit's refusal.
pub fn place_outcomes(
    codes: &mut [i16],
    slots: Vec<usize>,
    result: Result<Vec<Result<(), GroupError>>, GroupError>,
) {
    match result {
        Ok(outcomes) => {
            for (slot, outcome) in slots.into_iter().zip(outcomes) {
                codes[slot] = GroupError::code_of(&outcome);
            }
        }
        Err(error) => {
            for slot in slots {
                codes[slot] = error.code();
            }
        }
    }
}

async fn commit_on_owner(
    owner: &Rc<Shard>,
    partition: i32,
    committer: Committer,
    parts: Vec<CommitPartition>,
) -> Result<Vec<Result<(), GroupError>>, GroupError> {
    let lock = manager::write_lock(owner, partition).await;
    let outcomes = manager::with_coordinator(owner, |c| {
        c.commit(owner.now_ms() as u64, &committer, &parts)
    })?;
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
    let last = manager::append(owner, partition, entries).await?;
    drop(lock);
    if let Some(last) = last {
        manager::wait_durable(owner, partition, last).await?;
        manager::maybe_compact(owner, partition).await;
    }
    Ok(outcomes)
}
