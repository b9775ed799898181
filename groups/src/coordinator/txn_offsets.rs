//! Offsets committed inside a transaction (TxnOffsetCommit, KIP-98 and
//! KIP-447): staged per producer id, invisible to OffsetFetch, and applied
//! or dropped when the transaction's marker reaches the group's
//! `__consumer_offsets` partition (commit or abort).

use crate::coordinator::{CommitPartition, CommittedOffset, Committer, Coordinator};
use crate::error::GroupError;
use crate::limits::OFFSET_METADATA_BYTES_MAX;

/// One offset waiting for its transaction's end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingTxnOffset {
    pub group_id: String,
    pub topic: String,
    pub partition: i32,
    pub offset: CommittedOffset,
}

impl Coordinator {
    /// TxnOffsetCommit: checks the committer (KIP-447: a member id and
    /// generation, when given, must be the group's current ones; an empty
    /// member id and generation -1 commit as an `assign()` consumer) and
    /// stages the offsets under `producer_id`. One outcome per partition.
    pub fn txn_commit(
        &mut self,
        producer_id: i64,
        committer: &Committer,
        partitions: &[CommitPartition],
    ) -> Result<Vec<Result<(), GroupError>>, GroupError> {
        Self::check_group_id(&committer.group_id)?;
        if let Some(group) = self.groups.get(&committer.group_id) {
            let checked = !committer.member_id.is_empty() || committer.generation_id >= 0;
            if checked {
                if group.fenced(&committer.member_id, committer.group_instance_id.as_deref()) {
                    return Err(GroupError::FencedInstanceId);
                }
                if !group.members.contains_key(&committer.member_id) {
                    return Err(GroupError::UnknownMemberId);
                }
                if committer.generation_id != group.generation_id {
                    return Err(GroupError::IllegalGeneration);
                }
            }
        }
        let outcomes = partitions
            .iter()
            .map(|p| {
                if p.offset.metadata.len() > OFFSET_METADATA_BYTES_MAX {
                    return Err(GroupError::OffsetMetadataTooLarge);
                }
                self.stage_txn_offset(
                    producer_id,
                    &committer.group_id,
                    &p.topic,
                    p.partition,
                    p.offset.clone(),
                );
                Ok(())
            })
            .collect();
        Ok(outcomes)
    }

    /// Stages an offset under `producer_id` with no checks (a
    /// transactional offset record replayed from the log); a later one
    /// for the same partition replaces it.
    pub fn stage_txn_offset(
        &mut self,
        producer_id: i64,
        group_id: &str,
        topic: &str,
        partition: i32,
        offset: CommittedOffset,
    ) {
        let pending = self.pending_txn_offsets.entry(producer_id).or_default();
        pending
            .retain(|p| !(p.group_id == group_id && p.topic == topic && p.partition == partition));
        pending.push(PendingTxnOffset {
            group_id: group_id.to_string(),
            topic: topic.to_string(),
            partition,
            offset,
        });
    }

    /// The transaction of `producer_id` ended on the offsets partitions
    /// this coordinator holds (`in_partition` names the groups of the one
    /// whose marker was written): a commit makes its staged offsets the
    /// groups' committed ones, an abort drops them. Returns how many
    /// offsets it applied or dropped.
    pub fn complete_txn(
        &mut self,
        producer_id: i64,
        commit: bool,
        in_partition: impl Fn(&str) -> bool,
    ) -> usize {
        let Some(pending) = self.pending_txn_offsets.remove(&producer_id) else {
            return 0;
        };
        let (ours, others): (Vec<_>, Vec<_>) =
            pending.into_iter().partition(|p| in_partition(&p.group_id));
        if !others.is_empty() {
            self.pending_txn_offsets.insert(producer_id, others);
        }
        let count = ours.len();
        if commit {
            for p in ours {
                self.load_offset(&p.group_id, &p.topic, p.partition, Some(p.offset));
            }
        }
        count
    }

    /// Whether an open transaction has staged an offset for this group's
    /// partition (OffsetFetch with `require_stable` answers
    /// UNSTABLE_OFFSET_COMMIT for it).
    pub fn has_pending_txn_offset(&self, group_id: &str, topic: &str, partition: i32) -> bool {
        self.pending_txn_offsets
            .values()
            .flatten()
            .any(|p| p.group_id == group_id && p.topic == topic && p.partition == partition)
    }

    /// Forgets the staged offsets of the groups `in_partition` names (the
    /// partition is led elsewhere now).
    pub fn forget_txn_offsets(&mut self, in_partition: impl Fn(&str) -> bool) {
        for pending in self.pending_txn_offsets.values_mut() {
            pending.retain(|p| !in_partition(&p.group_id));
        }
        self.pending_txn_offsets
            .retain(|_, pending| !pending.is_empty());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::GroupConfig;

    fn offset(value: i64) -> CommittedOffset {
        CommittedOffset {
            offset: value,
            leader_epoch: -1,
            metadata: String::new(),
            commit_timestamp_ms: 0,
        }
    }

    fn assign_consumer(group_id: &str) -> Committer {
        Committer {
            group_id: group_id.to_string(),
            generation_id: -1,
            member_id: String::new(),
            group_instance_id: None,
        }
    }

    fn part(topic: &str, partition: i32, value: i64) -> CommitPartition {
        CommitPartition {
            topic: topic.to_string(),
            partition,
            offset: offset(value),
        }
    }

    #[test]
    fn transactional_offsets_show_only_once_their_transaction_commits() {
        let mut c = Coordinator::new(GroupConfig::default(), 1);
        let outcomes = c
            .txn_commit(
                7,
                &assign_consumer("g"),
                &[part("t", 0, 10), part("t", 1, 20)],
            )
            .unwrap();
        assert!(outcomes.iter().all(Result::is_ok));
        assert!(c.has_pending_txn_offset("g", "t", 0));
        assert!(c.group("g").is_none_or(|g| g.offsets.is_empty()));
        assert_eq!(c.complete_txn(7, true, |_| true), 2);
        let group = c.group("g").expect("created by the commit");
        assert_eq!(group.offsets[&("t".to_string(), 1)].offset, 20);
        assert!(!c.has_pending_txn_offset("g", "t", 0));
    }

    #[test]
    fn an_aborted_transaction_s_offsets_are_dropped() {
        let mut c = Coordinator::new(GroupConfig::default(), 1);
        c.txn_commit(7, &assign_consumer("g"), &[part("t", 0, 10)])
            .unwrap();
        assert_eq!(c.complete_txn(7, false, |_| true), 1);
        assert!(c.group("g").is_none_or(|g| g.offsets.is_empty()));
        assert_eq!(c.complete_txn(7, true, |_| true), 0, "nothing left");
    }

    #[test]
    fn a_marker_applies_only_the_groups_of_its_partition() {
        let mut c = Coordinator::new(GroupConfig::default(), 1);
        c.txn_commit(7, &assign_consumer("a"), &[part("t", 0, 1)])
            .unwrap();
        c.txn_commit(7, &assign_consumer("b"), &[part("t", 0, 2)])
            .unwrap();
        assert_eq!(c.complete_txn(7, true, |g| g == "a"), 1);
        assert!(c.has_pending_txn_offset("b", "t", 0));
        c.forget_txn_offsets(|g| g == "b");
        assert!(!c.has_pending_txn_offset("b", "t", 0));
    }
}
