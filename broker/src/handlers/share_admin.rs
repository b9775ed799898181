//! Share-group administration (KIP-932), what `kafka-share-groups.sh`
//! and `strom share-group` use: ShareGroupDescribe (77, v1),
//! DescribeShareGroupOffsets (90), AlterShareGroupOffsets (91) and
//! DeleteShareGroupOffsets (92), v0; DeleteGroups of a share group
//! ([`delete_group`]).
//!
//! A share group's members are its coordinator's (in memory: they join
//! again after a coordinator moves); its progress is the share
//! partitions' states at their share coordinators
//! (`crate::share_state`), which outlive the members. A group with
//! members is described as Stable, one with only states as Empty. Its
//! start offsets may be altered or deleted only while it has no members
//! (NON_EMPTY_GROUP): an alteration writes a share partition's state
//! anew at the next state epoch, so a leader holding the old one is
//! fenced and reads it again.

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use groups::error::GroupError;
use groups::share_records::SharePartitionKey;
use kafka_protocol::messages::share_group_describe_response::{
    Assignment, DescribedGroup, Member, TopicPartitions,
};
use kafka_protocol::messages::{
    alter_share_group_offsets_response, delete_share_group_offsets_response,
    describe_share_group_offsets_response, AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsResponse, DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsResponse, DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse, GroupId, ShareGroupDescribeRequest,
    ShareGroupDescribeResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::errors;
use crate::group::manager;
use crate::shard::Shard;
use crate::share_state;

pub const DESCRIBE_VERSION: i16 = 1;
pub const OFFSETS_VERSION: i16 = 0;

fn text(value: impl Into<String>) -> StrBytes {
    StrBytes::from_string(value.into())
}

/// What the coordinator knows of a group id: a share group's members
/// (none: not a share group there), and whether it is another kind.
struct Known {
    /// A share group by that id is kept (in `__consumer_offsets`).
    exists: bool,
    members: Vec<groups::share::ShareMember>,
    group_epoch: i32,
    other_kind: bool,
}

async fn known(shard: &Rc<Shard>, group_id: &str) -> Result<Known, GroupError> {
    let id = group_id.to_string();
    manager::on_coordinator(shard, group_id, move |owner, _| async move {
        manager::with_coordinator(&owner, |c| {
            let share = c.share_group(&id);
            Known {
                exists: share.is_some(),
                members: share
                    .map(|g| g.members.values().cloned().collect())
                    .unwrap_or_default(),
                group_epoch: share.map_or(0, |g| g.group_epoch),
                other_kind: c.groups().any(|g| g.id() == id),
            }
        })
    })
    .await
}

/// Whether any share partition of `group_id` has a state.
async fn has_states(shard: &Rc<Shard>, group_id: &str) -> bool {
    share_state::group_partitions(shard, group_id, None)
        .await
        .iter()
        .any(|(_, _, _, state)| matches!(state, Ok(Some(_))))
}

pub async fn describe(
    shard: &Rc<Shard>,
    request: ShareGroupDescribeRequest,
) -> ShareGroupDescribeResponse {
    let mut described = Vec::with_capacity(request.group_ids.len());
    for group_id in request.group_ids {
        let id = group_id.0.to_string();
        let base = DescribedGroup::default()
            .with_group_id(group_id.clone())
            .with_assignor_name(text("simple"))
            .with_authorized_operations(i32::MIN);
        let group = match known(shard, &id).await {
            Err(error) => base
                .with_error_code(error.code())
                .with_error_message(Some(text(error.to_string()))),
            Ok(k) if k.other_kind => base
                .with_error_code(errors::GROUP_ID_NOT_FOUND)
                .with_error_message(Some(text(format!("group {id} is not a share group")))),
            Ok(k) if k.members.is_empty() => {
                if k.exists || has_states(shard, &id).await {
                    base.with_group_state(text("Empty"))
                        .with_group_epoch(k.group_epoch)
                } else {
                    base.with_group_state(text("Dead"))
                        .with_error_code(errors::GROUP_ID_NOT_FOUND)
                        .with_error_message(Some(text(format!("group {id} not found"))))
                }
            }
            Ok(k) => {
                let image = shard.metadata.image();
                let members = k
                    .members
                    .iter()
                    .map(|m| {
                        let partitions = m
                            .subscribed
                            .iter()
                            .filter_map(|name| image.topics.get(name))
                            .map(|t| {
                                TopicPartitions::default()
                                    .with_topic_id(uuid::Uuid::from_u128(t.topic_id))
                                    .with_topic_name(TopicName(text(t.name.clone())))
                                    .with_partitions((0..t.partition_cores.len() as i32).collect())
                            })
                            .collect();
                        Member::default()
                            .with_member_id(text(m.member_id.clone()))
                            .with_rack_id(m.rack_id.clone().map(text))
                            .with_member_epoch(m.member_epoch)
                            .with_client_id(text(m.client_id.clone()))
                            .with_client_host(text(m.client_host.clone()))
                            .with_subscribed_topic_names(
                                m.subscribed
                                    .iter()
                                    .map(|n| TopicName(text(n.clone())))
                                    .collect(),
                            )
                            .with_assignment(
                                Assignment::default().with_topic_partitions(partitions),
                            )
                    })
                    .collect();
                base.with_group_state(text("Stable"))
                    .with_group_epoch(k.group_epoch)
                    .with_assignment_epoch(k.group_epoch)
                    .with_members(members)
            }
        };
        described.push(group);
    }
    ShareGroupDescribeResponse::default().with_groups(described)
}

pub async fn describe_offsets(
    shard: &Rc<Shard>,
    request: DescribeShareGroupOffsetsRequest,
) -> DescribeShareGroupOffsetsResponse {
    let mut groups_out = Vec::with_capacity(request.groups.len());
    for group in request.groups {
        let id = group.group_id.0.to_string();
        let base =
            describe_share_group_offsets_response::DescribeShareGroupOffsetsResponseGroup::default(
            )
            .with_group_id(group.group_id.clone());
        if let Err(error) = known(shard, &id).await {
            groups_out.push(
                base.with_error_code(error.code())
                    .with_error_message(Some(text(error.to_string()))),
            );
            continue;
        }
        // Named partitions (-1 for any not kept), or every kept one.
        let wanted: Option<BTreeMap<String, BTreeSet<i32>>> = group.topics.as_ref().map(|topics| {
            topics
                .iter()
                .map(|t| {
                    (
                        t.topic_name.0.to_string(),
                        t.partitions.iter().copied().collect(),
                    )
                })
                .collect()
        });
        let only = wanted
            .as_ref()
            .map(|w| w.keys().cloned().collect::<BTreeSet<_>>());
        let mut topics: BTreeMap<
            (String, u128),
            Vec<describe_share_group_offsets_response::DescribeShareGroupOffsetsResponsePartition>,
        > = BTreeMap::new();
        for (name, topic_id, partition, state) in
            share_state::group_partitions(shard, &id, only.as_ref()).await
        {
            let named = wanted
                .as_ref()
                .map(|w| w.get(&name).is_some_and(|p| p.contains(&partition)));
            let row = describe_share_group_offsets_response::DescribeShareGroupOffsetsResponsePartition::default()
                .with_partition_index(partition);
            let row = match state {
                Ok(Some(state)) => row
                    .with_start_offset(state.snapshot.start_offset)
                    .with_leader_epoch(state.leader_epoch),
                Ok(None) if named == Some(true) => row.with_start_offset(-1).with_leader_epoch(-1),
                Ok(None) => continue,
                Err(code) => row
                    .with_start_offset(-1)
                    .with_leader_epoch(-1)
                    .with_error_code(code),
            };
            if named == Some(false) {
                continue;
            }
            topics.entry((name, topic_id)).or_default().push(row);
        }
        // Named topics that do not exist.
        for name in only.iter().flatten() {
            if !shard.metadata.image().topics.contains_key(name) {
                let partitions = wanted
                    .as_ref()
                    .and_then(|w| w.get(name))
                    .cloned()
                    .unwrap_or_default();
                topics.insert(
                    (name.clone(), 0),
                    partitions
                        .into_iter()
                        .map(|p| {
                            describe_share_group_offsets_response::DescribeShareGroupOffsetsResponsePartition::default()
                                .with_partition_index(p)
                                .with_start_offset(-1)
                                .with_leader_epoch(-1)
                                .with_error_code(errors::UNKNOWN_TOPIC_OR_PARTITION)
                        })
                        .collect(),
                );
            }
        }
        groups_out.push(
            base.with_topics(
                topics
                    .into_iter()
                    .map(|((name, topic_id), partitions)| {
                        describe_share_group_offsets_response::DescribeShareGroupOffsetsResponseTopic::default()
                            .with_topic_name(TopicName(text(name)))
                            .with_topic_id(uuid::Uuid::from_u128(topic_id))
                            .with_partitions(partitions)
                    })
                    .collect(),
            ),
        );
    }
    DescribeShareGroupOffsetsResponse::default().with_groups(groups_out)
}

/// The group must exist at its coordinator as no other kind and have no
/// members for its offsets to change.
async fn check_empty(shard: &Rc<Shard>, group_id: &str) -> Result<(), (i16, String)> {
    match known(shard, group_id).await {
        Err(error) => Err((error.code(), error.to_string())),
        Ok(k) if k.other_kind => Err((
            errors::GROUP_ID_NOT_FOUND,
            format!("group {group_id} is not a share group"),
        )),
        Ok(k) if !k.members.is_empty() => Err((
            errors::NON_EMPTY_GROUP,
            format!(
                "share group {group_id} has {} members: stop them first",
                k.members.len()
            ),
        )),
        Ok(_) => Ok(()),
    }
}

/// Returns `$response` with the refusal while the group's offsets may
/// not change (see [`check_empty`]).
macro_rules! refuse_unless_empty {
    ($shard:expr, $id:expr, $response:ty) => {
        if let Err((code, message)) = check_empty($shard, $id).await {
            return <$response>::default()
                .with_error_code(code)
                .with_error_message(Some(text(message)));
        }
    };
}

pub async fn alter_offsets(
    shard: &Rc<Shard>,
    request: AlterShareGroupOffsetsRequest,
) -> AlterShareGroupOffsetsResponse {
    let id = request.group_id.0.to_string();
    refuse_unless_empty!(shard, &id, AlterShareGroupOffsetsResponse);
    let image = shard.metadata.image();
    let mut responses = Vec::with_capacity(request.topics.len());
    for topic in request.topics {
        let name = topic.topic_name.0.to_string();
        let meta = image.topics.get(&name);
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for p in topic.partitions {
            let row = alter_share_group_offsets_response::AlterShareGroupOffsetsResponsePartition::default()
                .with_partition_index(p.partition_index);
            let code = match meta {
                None => errors::UNKNOWN_TOPIC_OR_PARTITION,
                Some(t)
                    if p.partition_index < 0
                        || p.partition_index >= t.partition_cores.len() as i32 =>
                {
                    errors::UNKNOWN_TOPIC_OR_PARTITION
                }
                Some(_) if p.start_offset < 0 => errors::INVALID_REQUEST,
                Some(t) => {
                    let key = SharePartitionKey {
                        group_id: id.clone(),
                        topic_id: t.topic_id,
                        partition: p.partition_index,
                    };
                    match share_state::initialize(shard, key, p.start_offset).await {
                        Ok(_) => {
                            tracing::info!(group = %id, topic = %name, partition = p.partition_index, start_offset = p.start_offset, "share group start offset altered");
                            errors::NONE
                        }
                        Err(code) => code,
                    }
                }
            };
            partitions.push(row.with_error_code(code));
        }
        responses.push(
            alter_share_group_offsets_response::AlterShareGroupOffsetsResponseTopic::default()
                .with_topic_name(TopicName(text(name)))
                .with_topic_id(uuid::Uuid::from_u128(meta.map_or(0, |t| t.topic_id)))
                .with_partitions(partitions),
        );
    }
    AlterShareGroupOffsetsResponse::default().with_responses(responses)
}

/// Deletes the states of `group_id` on `topics` (every topic: `None`);
/// how many went, or the first error.
async fn delete_states(
    shard: &Rc<Shard>,
    group_id: &str,
    topics: Option<&BTreeSet<String>>,
) -> Result<usize, i16> {
    let mut deleted = 0;
    for (_, topic_id, partition, state) in
        share_state::group_partitions(shard, group_id, topics).await
    {
        match state {
            Ok(None) => continue,
            Err(code) => return Err(code),
            Ok(Some(_)) => {}
        }
        let key = SharePartitionKey {
            group_id: group_id.to_string(),
            topic_id,
            partition,
        };
        share_state::delete(shard, key).await?;
        deleted += 1;
    }
    Ok(deleted)
}

pub async fn delete_offsets(
    shard: &Rc<Shard>,
    request: DeleteShareGroupOffsetsRequest,
) -> DeleteShareGroupOffsetsResponse {
    let id = request.group_id.0.to_string();
    refuse_unless_empty!(shard, &id, DeleteShareGroupOffsetsResponse);
    let image = shard.metadata.image();
    let mut responses = Vec::with_capacity(request.topics.len());
    for topic in request.topics {
        let name = topic.topic_name.0.to_string();
        let meta = image.topics.get(&name);
        let code = match meta {
            None => errors::UNKNOWN_TOPIC_OR_PARTITION,
            Some(_) => {
                let only = BTreeSet::from([name.clone()]);
                match delete_states(shard, &id, Some(&only)).await {
                    Ok(deleted) => {
                        tracing::info!(group = %id, topic = %name, deleted, "share group offsets deleted");
                        errors::NONE
                    }
                    Err(code) => code,
                }
            }
        };
        responses.push(
            delete_share_group_offsets_response::DeleteShareGroupOffsetsResponseTopic::default()
                .with_topic_name(TopicName(text(name)))
                .with_topic_id(uuid::Uuid::from_u128(meta.map_or(0, |t| t.topic_id)))
                .with_error_code(code),
        );
    }
    DeleteShareGroupOffsetsResponse::default().with_responses(responses)
}

/// DeleteGroups of a group id its coordinator holds no classic or
/// consumer group for: a share group without members loses its share
/// partitions' states (GROUP_ID_NOT_FOUND when it has none).
pub async fn delete_group(shard: &Rc<Shard>, group_id: &GroupId) -> Result<(), GroupError> {
    let id = group_id.0.to_string();
    match check_empty(shard, &id).await {
        Err((code, _)) if code == errors::NON_EMPTY_GROUP => return Err(GroupError::NonEmptyGroup),
        Err(_) => return Err(GroupError::GroupIdNotFound),
        Ok(()) => {}
    }
    let deleted = match delete_states(shard, &id, None).await {
        Ok(deleted) => deleted,
        Err(_) => return Err(GroupError::CoordinatorNotAvailable),
    };
    let had_group = forget_group(shard, &id).await?;
    if deleted == 0 && !had_group {
        return Err(GroupError::GroupIdNotFound);
    }
    tracing::info!(group = %id, deleted, "share group deleted");
    Ok(())
}

/// Drops the share group's membership on its coordinator and writes the
/// tombstone of its record, durably. Whether there was one.
async fn forget_group(shard: &Rc<Shard>, group_id: &str) -> Result<bool, GroupError> {
    let id = group_id.to_string();
    manager::on_coordinator(shard, group_id, move |owner, partition| async move {
        let had = manager::with_coordinator(&owner, |c| c.delete_share_group(&id))?;
        if had {
            manager::write_group_metadata(&owner, partition).await?;
        }
        Ok(had)
    })
    .await?
}
