//! Committed offsets: OffsetCommit, OffsetFetch, OffsetDelete, loading
//! from `__consumer_offsets` and retention.

use crate::error::GroupError;
use crate::limits::{CORE_OFFSETS_MAX, GROUP_OFFSETS_MAX, OFFSET_METADATA_BYTES_MAX};

use super::messages::*;
use super::state::Group;
use super::Coordinator;

impl Coordinator {
    /// Offset retention: the offsets of Empty groups expire
    /// `offsets.retention.minutes` after the group became empty (after
    /// their commit when that is unknown, as after a restart). Returns them
    /// for tombstones; a group left with nothing goes.
    pub fn expire_offsets(&mut self, now_ms: u64) -> Vec<DroppedOffset> {
        let retention_ms = self.config.offsets_retention_ms as i64;
        let ids: Vec<String> = self
            .groups
            .values()
            .filter(|g| g.state == GroupState::Empty && !g.offsets.is_empty())
            .map(|g| g.id.clone())
            .collect();
        let mut dropped = Vec::new();
        let now = now_ms as i64;
        for id in ids {
            self.with_group(&id, |group| {
                let empty_since = group.empty_since_ms.map(|ms| ms as i64);
                group.offsets.retain(|(topic, partition), offset| {
                    let base = empty_since.unwrap_or(offset.commit_timestamp_ms);
                    let keep = now < base.saturating_add(retention_ms);
                    if !keep {
                        dropped.push(DroppedOffset {
                            group_id: group.id.clone(),
                            topic: topic.clone(),
                            partition: *partition,
                        });
                    }
                    keep
                });
            });
        }
        dropped
    }

    /// OffsetCommit: checks the committer, then applies every partition
    /// it may commit. Returns one outcome per partition (in order).
    pub fn commit(
        &mut self,
        now_ms: u64,
        committer: &Committer,
        partitions: &[CommitPartition],
    ) -> Result<Vec<Result<(), GroupError>>, GroupError> {
        Self::check_group_id(&committer.group_id)?;
        if !self.groups.contains_key(&committer.group_id) {
            if committer.generation_id >= 0 {
                // OffsetCommit v9+'s answer; the handler gives older
                // versions ILLEGAL_GENERATION, as Kafka does.
                return Err(GroupError::GroupIdNotFound);
            }
            self.add_group(&committer.group_id)?;
        }
        let core_offsets_left = CORE_OFFSETS_MAX.saturating_sub(self.offsets_count);
        self.with_group(&committer.group_id, |group| {
            let consumer =
                group.consumer_commit_allowed(&committer.member_id, committer.generation_id);
            let allowed = if group.state == GroupState::Dead {
                Err(GroupError::CoordinatorNotAvailable)
            } else if let Some(allowed) = consumer {
                allowed
            } else if group.fenced(&committer.member_id, committer.group_instance_id.as_deref()) {
                Err(GroupError::FencedInstanceId)
            } else if committer.generation_id < 0 && group.state == GroupState::Empty {
                Ok(())
            } else if group.state == GroupState::CompletingRebalance {
                Err(GroupError::RebalanceInProgress)
            } else if !group.members.contains_key(&committer.member_id) {
                Err(GroupError::UnknownMemberId)
            } else if committer.generation_id != group.generation_id {
                Err(GroupError::IllegalGeneration)
            } else {
                Ok(())
            };
            allowed?;
            if let Some(member) = group.members.get_mut(&committer.member_id) {
                member.session_deadline_ms = now_ms + member.session_timeout_ms;
            }
            let mut added = 0usize;
            let codes = partitions
                .iter()
                .map(|p| {
                    if p.offset.metadata.len() > OFFSET_METADATA_BYTES_MAX {
                        return Err(GroupError::OffsetMetadataTooLarge);
                    }
                    let key = (p.topic.clone(), p.partition);
                    if !group.offsets.contains_key(&key) {
                        if group.offsets.len() >= GROUP_OFFSETS_MAX || added >= core_offsets_left {
                            return Err(GroupError::InvalidCommitOffsetSize);
                        }
                        added += 1;
                    }
                    group.offsets.insert(key, p.offset.clone());
                    Ok(())
                })
                .collect();
            Ok(codes)
        })
        .expect("group exists")
    }

    /// Offsets loaded from `__consumer_offsets` (no checks; the log holds
    /// only what was accepted). `None` is a tombstone. Queues nothing to
    /// write back (a group it empties had its tombstone written after).
    pub fn load_offset(
        &mut self,
        group_id: &str,
        topic: &str,
        partition: i32,
        offset: Option<CommittedOffset>,
    ) {
        if !self.groups.contains_key(group_id) {
            if offset.is_none() {
                return;
            }
            self.groups
                .insert(group_id.to_string(), Group::new(group_id));
        }
        let dirty_before = self.metadata_dirty.contains(group_id);
        self.with_group(group_id, |group| match offset {
            Some(offset) => {
                group.offsets.insert((topic.to_string(), partition), offset);
            }
            None => {
                group.offsets.remove(&(topic.to_string(), partition));
            }
        });
        if !dirty_before {
            self.metadata_dirty.remove(group_id);
        }
    }

    /// OffsetFetch v9's check of a consumer-protocol member (a classic
    /// group, or none, takes any).
    pub fn check_consumer_member(
        &self,
        group_id: &str,
        member_id: &str,
        member_epoch: i32,
    ) -> Result<(), GroupError> {
        match self.groups.get(group_id) {
            Some(group) if group.consumer.is_some() => group
                .consumer_commit_allowed(member_id, member_epoch)
                .unwrap_or(Ok(())),
            _ => Ok(()),
        }
    }

    /// OffsetFetch: the committed offset of each partition asked, or of
    /// every partition with `None`.
    pub fn fetch_offsets(
        &self,
        group_id: &str,
        wanted: Option<&[(String, i32)]>,
    ) -> Vec<((String, i32), Option<CommittedOffset>)> {
        let group = self.groups.get(group_id);
        match wanted {
            Some(wanted) => wanted
                .iter()
                .map(|key| (key.clone(), group.and_then(|g| g.offsets.get(key)).cloned()))
                .collect(),
            None => group
                .map(|g| {
                    g.offsets
                        .iter()
                        .map(|(key, offset)| (key.clone(), Some(offset.clone())))
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    /// OffsetDelete: drops the offsets of topics no member subscribes to.
    /// Group-level error, or one code per partition.
    pub fn delete_offsets(
        &mut self,
        group_id: &str,
        partitions: &[(String, i32)],
        dropped: &mut Vec<DroppedOffset>,
    ) -> Result<Vec<Result<(), GroupError>>, GroupError> {
        Self::check_group_id(group_id)?;
        let Some(group) = self.groups.get(group_id) else {
            return Err(GroupError::GroupIdNotFound);
        };
        let subscribed = if group.state == GroupState::Empty {
            Vec::new()
        } else {
            match group.subscribed_topics() {
                Some(topics) => topics,
                None => return Err(GroupError::NonEmptyGroup),
            }
        };
        self.with_group(group_id, |group| {
            partitions
                .iter()
                .map(|(topic, partition)| {
                    if subscribed.contains(topic) {
                        return Err(GroupError::GroupSubscribedToTopic);
                    }
                    if group.offsets.remove(&(topic.clone(), *partition)).is_some() {
                        dropped.push(DroppedOffset {
                            group_id: group_id.to_string(),
                            topic: topic.clone(),
                            partition: *partition,
                        });
                    }
                    Ok(())
                })
                .collect()
        })
        .ok_or(GroupError::GroupIdNotFound)
    }
}
