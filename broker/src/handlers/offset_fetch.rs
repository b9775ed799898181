//! OffsetFetch (9), versions 1–9: the committed offsets of the partitions
//! asked, or of every partition with null topics (v2+); -1 where nothing
//! is committed. v8 asks for several groups at once (`groups[]`). v9's
//! member id and epoch are checked for a consumer-protocol group (an
//! unknown member gets UNKNOWN_MEMBER_ID, another epoch STALE_MEMBER_EPOCH)
//! and ignored for a classic one, as Kafka does. v10 (topic ids) is not in
//! the protocol crate yet.

use std::collections::BTreeMap;
use std::rc::Rc;

use groups::error::GroupError;
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{GroupId, OffsetFetchRequest, OffsetFetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::errors;
use crate::group::coordinator::CommittedOffset;
use crate::group::manager;
use crate::shard::Shard;

pub const VERSION_MIN: i16 = 1;
pub const VERSION_MAX: i16 = 9;

/// A partition's committed offset (`None`: nothing committed), or the
/// error code its answer carries.
type Found = Result<Option<CommittedOffset>, i16>;

/// Per topic, in the order asked (or by name): partition and offset.
type Fetched = Vec<(String, Vec<(i32, Found)>)>;

/// `require_stable` (v7+): a partition an open transaction committed an
/// offset for answers UNSTABLE_OFFSET_COMMIT (the client asks again once
/// the transaction ended) instead of the offset before it.
async fn fetch_group(
    shard: &Rc<Shard>,
    group_id: String,
    topics: Option<Vec<(String, Vec<i32>)>>,
    require_stable: bool,
    member: Option<(String, i32)>,
) -> Result<Fetched, GroupError> {
    if group_id.is_empty() {
        return Err(GroupError::InvalidGroupId);
    }
    manager::on_coordinator(shard, &group_id.clone(), move |owner, _| async move {
        manager::with_coordinator(&owner, |c| {
            if let Some((member_id, epoch)) = &member {
                c.check_consumer_member(&group_id, member_id, *epoch)?;
            }
            let found = |topic: &str, p: i32, offset: Option<CommittedOffset>| -> Found {
                if require_stable && c.has_pending_txn_offset(&group_id, topic, p) {
                    Err(errors::UNSTABLE_OFFSET_COMMIT)
                } else {
                    Ok(offset)
                }
            };
            match topics {
                Some(topics) => Ok(topics
                    .into_iter()
                    .map(|(topic, partitions)| {
                        let wanted: Vec<(String, i32)> =
                            partitions.iter().map(|&p| (topic.clone(), p)).collect();
                        let offsets = c
                            .fetch_offsets(&group_id, Some(&wanted))
                            .into_iter()
                            .map(|((t, p), offset)| (p, found(&t, p, offset)))
                            .collect();
                        (topic, offsets)
                    })
                    .collect()),
                None => {
                    let mut by_topic: BTreeMap<String, Vec<(i32, Found)>> = BTreeMap::new();
                    for ((topic, p), offset) in c.fetch_offsets(&group_id, None) {
                        let offset = found(&topic, p, offset);
                        by_topic.entry(topic).or_default().push((p, offset));
                    }
                    Ok(by_topic.into_iter().collect())
                }
            }
        })
    })
    .await
    .and_then(|inner| inner)
}

/// Offset, leader epoch, metadata and error code of a partition's answer.
fn parts(found: Found) -> (i64, i32, StrBytes, i16) {
    match found {
        Ok(Some(o)) => (
            o.offset,
            o.leader_epoch,
            StrBytes::from_string(o.metadata),
            errors::NONE,
        ),
        Ok(None) => (-1, -1, StrBytes::default(), errors::NONE),
        Err(code) => (-1, -1, StrBytes::default(), code),
    }
}

pub async fn handle(
    shard: &Rc<Shard>,
    request: OffsetFetchRequest,
    version: i16,
) -> OffsetFetchResponse {
    if version >= 8 {
        let mut groups = Vec::with_capacity(request.groups.len());
        for group in request.groups {
            let topics = group.topics.map(|topics| {
                topics
                    .into_iter()
                    .map(|t| (t.name.0.to_string(), t.partition_indexes))
                    .collect()
            });
            // v9: a consumer-protocol member says who it is.
            let member = group
                .member_id
                .filter(|_| group.member_epoch >= 0)
                .map(|id| (id.to_string(), group.member_epoch));
            let result = fetch_group(
                shard,
                group.group_id.0.to_string(),
                topics,
                request.require_stable,
                member,
            )
            .await;
            let response = match result {
                Ok(fetched) => OffsetFetchResponseGroup::default().with_topics(
                    fetched
                        .into_iter()
                        .map(|(topic, partitions)| {
                            OffsetFetchResponseTopics::default()
                                .with_name(TopicName(StrBytes::from_string(topic)))
                                .with_partitions(
                                    partitions
                                        .into_iter()
                                        .map(|(index, offset)| {
                                            let (offset, epoch, metadata, code) = parts(offset);
                                            OffsetFetchResponsePartitions::default()
                                                .with_partition_index(index)
                                                .with_committed_offset(offset)
                                                .with_committed_leader_epoch(epoch)
                                                .with_metadata(Some(metadata))
                                                .with_error_code(code)
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                ),
                Err(error) => OffsetFetchResponseGroup::default().with_error_code(error.code()),
            };
            groups.push(response.with_group_id(GroupId(group.group_id.0)));
        }
        return OffsetFetchResponse::default().with_groups(groups);
    }
    let asked: Option<Vec<(String, Vec<i32>)>> = request.topics.map(|topics| {
        topics
            .into_iter()
            .map(|t| (t.name.0.to_string(), t.partition_indexes))
            .collect()
    });
    let require_stable = version >= 7 && request.require_stable;
    let result = fetch_group(
        shard,
        request.group_id.0.to_string(),
        asked.clone(),
        require_stable,
        None,
    )
    .await;
    let (fetched, error_code) = match result {
        Ok(fetched) => (fetched, errors::NONE),
        // Without a top-level error (v1), each partition carries it.
        Err(error) => (
            asked
                .unwrap_or_default()
                .into_iter()
                .map(|(t, ps)| (t, ps.into_iter().map(|p| (p, Ok(None))).collect()))
                .collect(),
            error.code(),
        ),
    };
    let partition_code = if version < 2 {
        error_code
    } else {
        errors::NONE
    };
    let topics = fetched
        .into_iter()
        .map(|(topic, partitions)| {
            OffsetFetchResponseTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic)))
                .with_partitions(
                    partitions
                        .into_iter()
                        .map(|(index, offset)| {
                            let (offset, epoch, metadata, code) = parts(offset);
                            OffsetFetchResponsePartition::default()
                                .with_partition_index(index)
                                .with_committed_offset(offset)
                                .with_committed_leader_epoch(epoch)
                                .with_metadata(Some(metadata))
                                .with_error_code(if code == errors::NONE {
                                    partition_code
                                } else {
                                    code
                                })
                        })
                        .collect(),
                )
        })
        .collect();
    OffsetFetchResponse::default()
        .with_topics(topics)
        .with_error_code(error_code)
}
