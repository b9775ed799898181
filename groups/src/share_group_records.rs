//! The records of share groups' membership in `__consumer_offsets`, in
//! Kafka's formats: keys are a type (10 a member's metadata, 11 the
//! group's epoch, 15 a member's epoch) then the group id and, for a
//! member's records, the member id, as non-flexible strings; values are
//! version 0 of flexible structs. A null value is a tombstone.
//!
//! The group record's metadata hash is written as 0, and a member's
//! assigned partitions are written empty: a share member is assigned
//! every partition of the topics it subscribes to, so its assignment is
//! computed again from its subscription. Kafka's other share-group keys
//! (12 to 14, 16) are not written, and read as unknown.

use crate::consumer_records::{group_key, put_compact_len, put_compact_string, value_header};
use crate::reader::Reader;

pub const MEMBER_KEY: i16 = 10;
pub const GROUP_KEY: i16 = 11;
pub const CURRENT_ASSIGNMENT_KEY: i16 = 15;

/// A share group's record key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum ShareGroupKey {
    /// The group epoch; the group exists while this record does.
    Group { group_id: String },
    /// A member's client, rack and subscription.
    Member { group_id: String, member_id: String },
    /// A member's epoch.
    CurrentAssignment { group_id: String, member_id: String },
}

impl ShareGroupKey {
    pub fn group_id(&self) -> &str {
        match self {
            ShareGroupKey::Group { group_id }
            | ShareGroupKey::Member { group_id, .. }
            | ShareGroupKey::CurrentAssignment { group_id, .. } => group_id,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let (kind, group_id, member_id) = match self {
            ShareGroupKey::Group { group_id } => (GROUP_KEY, group_id, None),
            ShareGroupKey::Member {
                group_id,
                member_id,
            } => (MEMBER_KEY, group_id, Some(member_id)),
            ShareGroupKey::CurrentAssignment {
                group_id,
                member_id,
            } => (CURRENT_ASSIGNMENT_KEY, group_id, Some(member_id)),
        };
        group_key(kind, group_id, member_id.map(String::as_str))
    }

    /// The key after its type (`kind`), or `None` if it does not decode.
    pub fn decode(kind: i16, rest: &[u8]) -> Option<ShareGroupKey> {
        let mut r = Reader { bytes: rest };
        let group_id = r.key_string()?;
        let key = match kind {
            GROUP_KEY => ShareGroupKey::Group { group_id },
            MEMBER_KEY => ShareGroupKey::Member {
                group_id,
                member_id: r.key_string()?,
            },
            CURRENT_ASSIGNMENT_KEY => ShareGroupKey::CurrentAssignment {
                group_id,
                member_id: r.key_string()?,
            },
            _ => return None,
        };
        Some(key)
    }
}

/// A share member as ShareGroupMemberMetadataValue keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ShareMemberValue {
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topic_names: Vec<String>,
}

/// ShareGroupMetadataValue: the group epoch (and a metadata hash of 0).
pub fn group_value(epoch: i32) -> Vec<u8> {
    let mut out = value_header();
    out.extend_from_slice(&epoch.to_be_bytes());
    out.extend_from_slice(&0i64.to_be_bytes());
    out.push(0);
    out
}

pub fn parse_group(bytes: &[u8]) -> Option<i32> {
    let mut r = Reader { bytes };
    r.version()?;
    let epoch = r.i32()?;
    r.i64()?;
    r.tags()?;
    Some(epoch)
}

pub fn member_value(member: &ShareMemberValue) -> Vec<u8> {
    let mut out = value_header();
    put_compact_string(&mut out, member.rack_id.as_deref());
    put_compact_string(&mut out, Some(&member.client_id));
    put_compact_string(&mut out, Some(&member.client_host));
    put_compact_len(&mut out, member.subscribed_topic_names.len());
    for name in &member.subscribed_topic_names {
        put_compact_string(&mut out, Some(name));
    }
    out.push(0);
    out
}

pub fn parse_member(bytes: &[u8]) -> Option<ShareMemberValue> {
    let mut r = Reader { bytes };
    r.version()?;
    let rack_id = r.compact_string()?;
    let client_id = r.compact_string()??;
    let client_host = r.compact_string()??;
    let count = r.compact_len()??;
    let mut subscribed_topic_names = Vec::with_capacity(count);
    for _ in 0..count {
        subscribed_topic_names.push(r.compact_string()??);
    }
    r.tags()?;
    Some(ShareMemberValue {
        rack_id,
        client_id,
        client_host,
        subscribed_topic_names,
    })
}

/// ShareGroupCurrentMemberAssignmentValue: the member's epoch (as its
/// previous one too), state 0 (stable) and no partitions listed.
pub fn assignment_value(member_epoch: i32) -> Vec<u8> {
    let mut out = value_header();
    out.extend_from_slice(&member_epoch.to_be_bytes());
    out.extend_from_slice(&member_epoch.to_be_bytes());
    out.push(0);
    put_compact_len(&mut out, 0);
    out.push(0);
    out
}

/// The member epoch of a ShareGroupCurrentMemberAssignmentValue (its
/// partitions, Kafka's or none, are read past).
pub fn parse_assignment(bytes: &[u8]) -> Option<i32> {
    let mut r = Reader { bytes };
    r.version()?;
    let member_epoch = r.i32()?;
    r.i32()?;
    r.i8()?;
    r.partitions()?;
    r.tags()?;
    Some(member_epoch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values_round_trip_in_kafkas_layout() {
        let key = ShareGroupKey::Member {
            group_id: "g".into(),
            member_id: "m".into(),
        };
        let bytes = key.encode();
        assert_eq!(bytes, [0, 10, 0, 1, b'g', 0, 1, b'm']);
        assert_eq!(ShareGroupKey::decode(10, &bytes[2..]), Some(key));
        let group = ShareGroupKey::Group {
            group_id: "g".into(),
        };
        assert_eq!(group.encode(), [0, 11, 0, 1, b'g']);
        assert_eq!(ShareGroupKey::decode(12, &group.encode()[2..]), None);
        assert_eq!(
            group_value(7),
            [0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(parse_group(&group_value(7)), Some(7));
        let member = ShareMemberValue {
            rack_id: None,
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            subscribed_topic_names: vec!["a".into(), "b".into()],
        };
        assert_eq!(parse_member(&member_value(&member)), Some(member.clone()));
        let racked = ShareMemberValue {
            rack_id: Some("r1".into()),
            ..member
        };
        assert_eq!(parse_member(&member_value(&racked)), Some(racked));
        let assignment = assignment_value(4);
        assert_eq!(assignment, [0, 0, 0, 0, 0, 4, 0, 0, 0, 4, 0, 1, 0]);
        assert_eq!(parse_assignment(&assignment), Some(4));
        // Kafka's value with partitions listed: the epoch is read past them.
        let mut kafkas = vec![0, 0, 0, 0, 0, 5, 0, 0, 0, 4, 0, 2];
        kafkas.extend_from_slice(&9u128.to_be_bytes());
        kafkas.extend_from_slice(&[2, 0, 0, 0, 3, 0, 0]);
        assert_eq!(parse_assignment(&kafkas), Some(5));
        // Truncated or unknown versions do not decode.
        assert_eq!(parse_assignment(&assignment[..assignment.len() - 2]), None);
        assert_eq!(parse_group(&group_value(7)[..9]), None);
        let mut unknown = group_value(7);
        unknown[1] = 1;
        assert_eq!(parse_group(&unknown), None);
    }
}
