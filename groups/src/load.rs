//! Taking over a `__consumer_offsets` partition: when its log may be read
//! into a coordinator ([`load_end`]) and how each record is replayed
//! ([`replay`]). The broker's `group::manager` reads the log; the
//! simulator replays its simulated log with the same two rules.

use crate::coordinator::Coordinator;
use crate::records::{self, OffsetsKey};

/// How far a new leader of an offsets partition loads, or `None` while it
/// must wait. Its log may hold commits past its high watermark that the
/// in-sync replicas of the previous leader acknowledged; loading only up
/// to its high watermark before that catches up would serve those groups
/// without them. So it loads once its high watermark reaches the log end
/// it had when it took over (or any later log end, as the broker passes
/// the one it has when the load starts), up to the high watermark.
pub fn load_end(log_end_at_takeover: i64, high_watermark: i64) -> Option<i64> {
    (high_watermark >= log_end_at_takeover).then_some(high_watermark)
}

/// What one record did to the coordinator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replayed {
    /// A committed offset, or its tombstone.
    Offset,
    /// A group's membership, or its tombstone.
    GroupMetadata,
    /// A membership record whose value does not decode: skipped.
    UndecodableGroupMetadata { group_id: String },
    /// A key that is not one of Kafka's: skipped.
    UnknownKey,
}

/// Replays one record of the partition (`value` `None` is a tombstone)
/// into `coordinator`, as of `now_ms` (a loaded member's session starts
/// then).
pub fn replay(
    coordinator: &mut Coordinator,
    key: &[u8],
    value: Option<&[u8]>,
    now_ms: u64,
) -> Replayed {
    replay_with_topics(coordinator, key, value, now_ms, &|_| None)
}

/// [`replay`], with `topic_names` resolving the topic ids of
/// consumer-protocol groups' records (a topic it does not know is left
/// out of their assignments).
pub fn replay_with_topics(
    coordinator: &mut Coordinator,
    key: &[u8],
    value: Option<&[u8]>,
    now_ms: u64,
    topic_names: &dyn Fn(u128) -> Option<String>,
) -> Replayed {
    match records::parse_key(key) {
        Some(OffsetsKey::Consumer(key)) => {
            if coordinator.load_consumer_record(&key, value, topic_names, now_ms) {
                Replayed::GroupMetadata
            } else {
                Replayed::UndecodableGroupMetadata {
                    group_id: key.group_id().to_string(),
                }
            }
        }
        Some(OffsetsKey::Share(key)) => {
            if coordinator.load_share_record(&key, value, now_ms) {
                Replayed::GroupMetadata
            } else {
                Replayed::UndecodableGroupMetadata {
                    group_id: key.group_id().to_string(),
                }
            }
        }
        None => Replayed::UnknownKey,
        Some(OffsetsKey::Offset {
            group_id,
            topic,
            partition,
        }) => {
            let offset = value.and_then(records::parse_value);
            coordinator.load_offset(&group_id, &topic, partition, offset);
            Replayed::Offset
        }
        Some(OffsetsKey::GroupMetadata { group_id }) => {
            let metadata = match value {
                None => None,
                Some(bytes) => match records::parse_group_metadata_value(bytes) {
                    Some(metadata) => Some(metadata),
                    None => return Replayed::UndecodableGroupMetadata { group_id },
                },
            };
            coordinator.load_group_metadata(&group_id, metadata, now_ms);
            Replayed::GroupMetadata
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordinator::{CommitPartition, CommittedOffset, Committer, GroupConfig};
    use std::collections::BTreeMap;

    fn committed(offset: i64) -> CommittedOffset {
        CommittedOffset {
            offset,
            leader_epoch: -1,
            metadata: String::new(),
            commit_timestamp_ms: 1_000,
        }
    }

    #[test]
    fn a_new_leader_loads_once_its_high_watermark_reaches_its_log_end() {
        assert_eq!(load_end(10, 7), None);
        assert_eq!(load_end(10, 10), Some(10));
        assert_eq!(load_end(10, 12), Some(12));
        assert_eq!(load_end(0, 0), Some(0));
    }

    #[test]
    fn replayed_commits_and_tombstones_rebuild_the_offsets() {
        let mut source = Coordinator::new(GroupConfig::default(), 1);
        let committer = Committer {
            group_id: "g".to_string(),
            generation_id: -1,
            member_id: String::new(),
            group_instance_id: None,
        };
        let partition = |offset| CommitPartition {
            topic: "t".to_string(),
            partition: 0,
            offset: committed(offset),
        };
        assert_eq!(
            source.commit(1_000, &committer, &[partition(5)]),
            Ok(vec![Ok(())])
        );
        let key = records::offset_key("g", "t", 0);
        let mut loaded = Coordinator::new(GroupConfig::default(), 2);
        for offset in [3, 5] {
            let value = records::offset_value(&committed(offset));
            assert_eq!(
                replay(&mut loaded, &key, Some(&value), 2_000),
                Replayed::Offset
            );
        }
        let wanted = [("t".to_string(), 0)];
        assert_eq!(
            loaded.fetch_offsets("g", Some(&wanted)),
            source.fetch_offsets("g", Some(&wanted))
        );
        assert_eq!(replay(&mut loaded, &key, None, 2_000), Replayed::Offset);
        assert_eq!(loaded.fetch_offsets("g", Some(&wanted))[0].1, None);
        assert_eq!(
            replay(&mut loaded, b"\x00\x09junk", None, 2_000),
            Replayed::UnknownKey
        );
        let group_key = records::group_metadata_key("g");
        assert_eq!(
            replay(&mut loaded, &group_key, Some(b"\x00\x03"), 2_000),
            Replayed::UndecodableGroupMetadata {
                group_id: "g".to_string()
            }
        );
    }

    /// Replays `records` into a new coordinator, as a new leader of the
    /// offsets partition loads them.
    fn share_replayed(records: &[crate::share::ShareGroupRecord], now_ms: u64) -> Coordinator {
        let mut loaded = Coordinator::new(GroupConfig::default(), 9);
        for (key, value) in records {
            assert_eq!(
                replay(&mut loaded, key, value.as_deref(), now_ms),
                Replayed::GroupMetadata
            );
        }
        loaded
    }

    fn share_members(coordinator: &Coordinator) -> Vec<(String, i32, Vec<String>, String)> {
        coordinator
            .share_group("sg")
            .map(|g| {
                g.members
                    .values()
                    .map(|m| {
                        (
                            m.member_id.clone(),
                            m.member_epoch,
                            m.subscribed.iter().cloned().collect(),
                            m.client_id.clone(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A share group's membership is written as it changes and a new
    /// coordinator that replays the records knows every member at the epoch
    /// it was told: its next heartbeat is accepted, not fenced. Members that
    /// left or whose session ran out are gone, the group stays (Empty) until
    /// deleted, and a snapshot of the group replays to the same state.
    #[test]
    fn share_group_membership_survives_a_new_coordinator() {
        let mut source = Coordinator::new(GroupConfig::default(), 1);
        let mut log: Vec<crate::share::ShareGroupRecord> = Vec::new();
        let e1 = crate::coordinator::tests::share_join(&mut source, 1_000, "m1", &["a"]);
        let e2 = crate::coordinator::tests::share_join(&mut source, 1_000, "m2", &["a", "b"]);
        let _e3 = crate::coordinator::tests::share_join(&mut source, 1_000, "m3", &["b"]);
        assert!(source.has_metadata_changes());
        assert!(source.metadata_changes().any(|g| g == "sg"));
        log.extend(source.take_share_records(|_| true));
        assert!(!source.has_metadata_changes(), "taken once");
        // A heartbeat that changes nothing writes nothing.
        let topic_counts: BTreeMap<String, i32> = [("a".to_string(), 3)].into_iter().collect();
        let again = crate::share::ShareHeartbeat {
            group_id: "sg".to_string(),
            member_id: "m1".to_string(),
            member_epoch: e1,
            subscribed_topic_names: None,
            ..Default::default()
        };
        assert_eq!(
            source
                .share_heartbeat(2_000, again.clone(), &topic_counts)
                .map(|a| a.member_epoch),
            Ok(e1)
        );
        assert!(!source.has_metadata_changes());
        // m3 leaves.
        let leave = crate::share::ShareHeartbeat {
            member_id: "m3".to_string(),
            member_epoch: -1,
            ..again.clone()
        };
        assert!(source.share_heartbeat(2_000, leave, &topic_counts).is_ok());
        log.extend(source.take_share_records(|_| true));

        let mut loaded = share_replayed(&log, 3_000);
        assert_eq!(share_members(&loaded), share_members(&source));
        assert_eq!(
            loaded.share_group("sg").unwrap().group_epoch,
            source.share_group("sg").unwrap().group_epoch
        );
        assert_eq!(share_members(&loaded).len(), 2);
        // The members carry on at the epochs they hold.
        for (member, epoch) in [("m1", e1), ("m2", e2)] {
            let beat = crate::share::ShareHeartbeat {
                member_id: member.to_string(),
                member_epoch: epoch,
                ..again.clone()
            };
            assert_eq!(
                loaded
                    .share_heartbeat(3_000, beat, &topic_counts)
                    .map(|a| a.member_epoch),
                Ok(epoch),
                "{member}"
            );
        }
        // A snapshot of the group replays to the same membership.
        let snapshot: Vec<_> = loaded
            .share_groups()
            .flat_map(|(id, g)| g.records(id))
            .collect();
        assert_eq!(
            share_members(&share_replayed(&snapshot, 3_000)),
            share_members(&loaded)
        );

        // Sessions run out on the new coordinator: tombstones, the group stays.
        let session = GroupConfig::default().share.session_timeout_ms;
        let gone = loaded.expire_share_members(3_000 + session + 1);
        assert_eq!(gone.len(), 2);
        log.extend(loaded.take_share_records(|_| true));
        let emptied = share_replayed(&log, 100_000);
        assert!(share_members(&emptied).is_empty());
        assert!(emptied.share_group("sg").is_some(), "an empty group stays");
        assert!(emptied
            .list()
            .iter()
            .any(|g| g.group_id == "sg" && g.state == "Empty" && g.group_type == "share"));

        // Deleted: its tombstone removes it for good.
        assert_eq!(loaded.delete_share_group("sg"), Ok(true));
        assert_eq!(loaded.delete_share_group("sg"), Ok(false));
        log.extend(loaded.take_share_records(|_| true));
        assert!(share_replayed(&log, 100_000).share_group("sg").is_none());
    }
}
