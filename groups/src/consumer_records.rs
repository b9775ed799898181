//! The records of consumer-protocol groups in `__consumer_offsets`, in
//! Kafka's formats: keys are a type (3 group metadata, 5 member metadata,
//! 6 target assignment metadata, 7 a member's target assignment, 8 a
//! member's current assignment; 4, partition metadata, is read and
//! ignored) then the group id and, for a member's records, the member id,
//! as non-flexible strings; values are version 0 of flexible structs
//! (compact strings and arrays, tagged fields). Partitions are named by
//! topic id. A null value is a tombstone.

use crate::reader::Reader;

/// A consumer-protocol group's record key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum ConsumerKey {
    /// The group epoch.
    Group {
        group_id: String,
    },
    /// Written by Kafka 3.7–4.0 (the subscribed topics' metadata); read
    /// and ignored.
    PartitionMetadata {
        group_id: String,
    },
    Member {
        group_id: String,
        member_id: String,
    },
    /// The target assignment's epoch.
    Target {
        group_id: String,
    },
    TargetMember {
        group_id: String,
        member_id: String,
    },
    CurrentAssignment {
        group_id: String,
        member_id: String,
    },
}

pub const GROUP_KEY: i16 = 3;
pub const PARTITION_METADATA_KEY: i16 = 4;
pub const MEMBER_KEY: i16 = 5;
pub const TARGET_KEY: i16 = 6;
pub const TARGET_MEMBER_KEY: i16 = 7;
pub const CURRENT_ASSIGNMENT_KEY: i16 = 8;

impl ConsumerKey {
    pub fn group_id(&self) -> &str {
        match self {
            ConsumerKey::Group { group_id }
            | ConsumerKey::PartitionMetadata { group_id }
            | ConsumerKey::Member { group_id, .. }
            | ConsumerKey::Target { group_id }
            | ConsumerKey::TargetMember { group_id, .. }
            | ConsumerKey::CurrentAssignment { group_id, .. } => group_id,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let (kind, group_id, member_id) = match self {
            ConsumerKey::Group { group_id } => (GROUP_KEY, group_id, None),
            ConsumerKey::PartitionMetadata { group_id } => (PARTITION_METADATA_KEY, group_id, None),
            ConsumerKey::Member {
                group_id,
                member_id,
            } => (MEMBER_KEY, group_id, Some(member_id)),
            ConsumerKey::Target { group_id } => (TARGET_KEY, group_id, None),
            ConsumerKey::TargetMember {
                group_id,
                member_id,
            } => (TARGET_MEMBER_KEY, group_id, Some(member_id)),
            ConsumerKey::CurrentAssignment {
                group_id,
                member_id,
            } => (CURRENT_ASSIGNMENT_KEY, group_id, Some(member_id)),
        };
        group_key(kind, group_id, member_id.map(String::as_str))
    }

    /// The key after its type (`kind`), or `None` if it does not decode.
    pub fn decode(kind: i16, rest: &[u8]) -> Option<ConsumerKey> {
        let mut r = Reader { bytes: rest };
        let group_id = r.key_string()?;
        let key = match kind {
            GROUP_KEY => ConsumerKey::Group { group_id },
            PARTITION_METADATA_KEY => ConsumerKey::PartitionMetadata { group_id },
            TARGET_KEY => ConsumerKey::Target { group_id },
            MEMBER_KEY => ConsumerKey::Member {
                group_id,
                member_id: r.key_string()?,
            },
            TARGET_MEMBER_KEY => ConsumerKey::TargetMember {
                group_id,
                member_id: r.key_string()?,
            },
            CURRENT_ASSIGNMENT_KEY => ConsumerKey::CurrentAssignment {
                group_id,
                member_id: r.key_string()?,
            },
            _ => return None,
        };
        Some(key)
    }
}

/// A member as ConsumerGroupMemberMetadataValue keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemberValue {
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topic_names: Vec<String>,
    pub subscribed_topic_regex: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub server_assignor: Option<String>,
    /// A classic member's protocols (name, metadata), Kafka's
    /// ClassicMemberMetadata (tagged field 0); `None` for a
    /// consumer-protocol member.
    pub classic_protocols: Option<Vec<(String, Vec<u8>)>>,
}

/// Partitions by topic id.
pub type ById = Vec<(u128, Vec<i32>)>;

/// A member's current assignment (ConsumerGroupCurrentMemberAssignmentValue).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AssignmentValue {
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    /// Kafka's member state: 0 stable, 1 unrevoked partitions, 2
    /// unreleased partitions.
    pub state: i8,
    pub assigned: ById,
    pub revoking: ById,
}

/// A group record's key: its type, the group id and, for a member's
/// record, the member id (non-flexible strings).
pub(crate) fn group_key(kind: i16, group_id: &str, member_id: Option<&str>) -> Vec<u8> {
    let mut out = Vec::with_capacity(6 + group_id.len() + member_id.map_or(0, str::len));
    out.extend_from_slice(&kind.to_be_bytes());
    put_key_string(&mut out, group_id);
    if let Some(member_id) = member_id {
        put_key_string(&mut out, member_id);
    }
    out
}

fn put_key_string(out: &mut Vec<u8>, value: &str) {
    let len = i16::try_from(value.len()).expect("bounded by limits");
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(value.as_bytes());
}

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

pub(crate) fn put_compact_string(out: &mut Vec<u8>, value: Option<&str>) {
    match value {
        None => out.push(0),
        Some(value) => {
            put_varint(out, value.len() as u64 + 1);
            out.extend_from_slice(value.as_bytes());
        }
    }
}

pub(crate) fn put_compact_len(out: &mut Vec<u8>, len: usize) {
    put_varint(out, len as u64 + 1);
}

pub(crate) fn put_partitions(out: &mut Vec<u8>, partitions: &ById) {
    put_compact_len(out, partitions.len());
    for (id, ps) in partitions {
        out.extend_from_slice(&id.to_be_bytes());
        put_compact_len(out, ps.len());
        for p in ps {
            out.extend_from_slice(&p.to_be_bytes());
        }
        out.push(0); // no tagged fields
    }
}

/// The value version every record here is written and read at.
const VALUE_VERSION: i16 = 0;

pub(crate) fn value_header() -> Vec<u8> {
    VALUE_VERSION.to_be_bytes().to_vec()
}

/// ConsumerGroupMetadataValue: the group epoch.
pub fn group_value(epoch: i32) -> Vec<u8> {
    let mut out = value_header();
    out.extend_from_slice(&epoch.to_be_bytes());
    out.push(0);
    out
}

/// ConsumerGroupTargetAssignmentMetadataValue: the assignment epoch.
pub fn target_value(assignment_epoch: i32) -> Vec<u8> {
    group_value(assignment_epoch)
}

pub fn member_value(member: &MemberValue) -> Vec<u8> {
    let mut out = value_header();
    put_compact_string(&mut out, member.instance_id.as_deref());
    put_compact_string(&mut out, member.rack_id.as_deref());
    put_compact_string(&mut out, Some(&member.client_id));
    put_compact_string(&mut out, Some(&member.client_host));
    put_compact_len(&mut out, member.subscribed_topic_names.len());
    for name in &member.subscribed_topic_names {
        put_compact_string(&mut out, Some(name));
    }
    put_compact_string(&mut out, member.subscribed_topic_regex.as_deref());
    out.extend_from_slice(&member.rebalance_timeout_ms.to_be_bytes());
    put_compact_string(&mut out, member.server_assignor.as_deref());
    match &member.classic_protocols {
        None => out.push(0),
        Some(protocols) => {
            // ClassicMemberMetadata { SupportedProtocols [ {Name, Metadata} ] }
            let mut field = Vec::new();
            put_compact_len(&mut field, protocols.len());
            for (name, metadata) in protocols {
                put_compact_string(&mut field, Some(name));
                put_compact_len(&mut field, metadata.len());
                field.extend_from_slice(metadata);
                field.push(0);
            }
            field.push(0);
            out.push(1); // one tagged field
            put_varint(&mut out, 0); // tag 0
            put_varint(&mut out, field.len() as u64);
            out.extend_from_slice(&field);
        }
    }
    out
}

pub fn target_member_value(partitions: &ById) -> Vec<u8> {
    let mut out = value_header();
    put_partitions(&mut out, partitions);
    out.push(0);
    out
}

pub fn assignment_value(value: &AssignmentValue) -> Vec<u8> {
    let mut out = value_header();
    out.extend_from_slice(&value.member_epoch.to_be_bytes());
    out.extend_from_slice(&value.previous_member_epoch.to_be_bytes());
    out.push(value.state as u8);
    put_partitions(&mut out, &value.assigned);
    put_partitions(&mut out, &value.revoking);
    out.push(0);
    out
}

impl Reader<'_> {
    pub(crate) fn version(&mut self) -> Option<()> {
        (self.i16()? == VALUE_VERSION).then_some(())
    }
    pub(crate) fn partitions(&mut self) -> Option<ById> {
        let count = self.compact_len()??;
        let mut out = Vec::with_capacity(count);
        for _ in 0..count {
            let id = self.u128()?;
            let n = self.compact_len()??;
            let mut ps = Vec::with_capacity(n);
            for _ in 0..n {
                ps.push(self.i32()?);
            }
            self.tags()?;
            out.push((id, ps));
        }
        Some(out)
    }
}

/// The epoch of a ConsumerGroupMetadataValue or a
/// ConsumerGroupTargetAssignmentMetadataValue.
pub fn parse_epoch(bytes: &[u8]) -> Option<i32> {
    let mut r = Reader { bytes };
    r.version()?;
    let epoch = r.i32()?;
    r.tags()?;
    Some(epoch)
}

pub fn parse_member(bytes: &[u8]) -> Option<MemberValue> {
    let mut r = Reader { bytes };
    r.version()?;
    let instance_id = r.compact_string()?;
    let rack_id = r.compact_string()?;
    let client_id = r.compact_string()??;
    let client_host = r.compact_string()??;
    let count = r.compact_len()??;
    let mut subscribed_topic_names = Vec::with_capacity(count);
    for _ in 0..count {
        subscribed_topic_names.push(r.compact_string()??);
    }
    let subscribed_topic_regex = r.compact_string()?;
    let rebalance_timeout_ms = r.i32()?;
    let server_assignor = r.compact_string()?;
    let mut classic_protocols = None;
    let count = r.varint()?;
    for _ in 0..count {
        let tag = r.varint()?;
        let size = usize::try_from(r.varint()?).ok()?;
        let field = r.take(size)?;
        if tag == 0 {
            let mut f = Reader { bytes: field };
            let n = f.compact_len()??;
            let mut protocols = Vec::with_capacity(n);
            for _ in 0..n {
                let name = f.compact_string()??;
                let len = f.compact_len()??;
                let metadata = f.take(len)?.to_vec();
                f.tags()?;
                protocols.push((name, metadata));
            }
            f.tags()?;
            classic_protocols = Some(protocols);
        }
    }
    Some(MemberValue {
        instance_id,
        rack_id,
        client_id,
        client_host,
        subscribed_topic_names,
        subscribed_topic_regex,
        rebalance_timeout_ms,
        server_assignor,
        classic_protocols,
    })
}

pub fn parse_target_member(bytes: &[u8]) -> Option<ById> {
    let mut r = Reader { bytes };
    r.version()?;
    let partitions = r.partitions()?;
    r.tags()?;
    Some(partitions)
}

pub fn parse_assignment(bytes: &[u8]) -> Option<AssignmentValue> {
    let mut r = Reader { bytes };
    r.version()?;
    let member_epoch = r.i32()?;
    let previous_member_epoch = r.i32()?;
    let state = r.i8()?;
    let assigned = r.partitions()?;
    let revoking = r.partitions()?;
    r.tags()?;
    Some(AssignmentValue {
        member_epoch,
        previous_member_epoch,
        state,
        assigned,
        revoking,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values_round_trip_in_kafkas_layout() {
        let key = ConsumerKey::CurrentAssignment {
            group_id: "g".into(),
            member_id: "m".into(),
        };
        let bytes = key.encode();
        assert_eq!(bytes, [0, 8, 0, 1, b'g', 0, 1, b'm']);
        assert_eq!(ConsumerKey::decode(8, &bytes[2..]), Some(key));
        assert_eq!(group_value(7), [0, 0, 0, 0, 0, 7, 0]);
        assert_eq!(parse_epoch(&group_value(7)), Some(7));
        let member = MemberValue {
            instance_id: Some("i".into()),
            rack_id: None,
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            subscribed_topic_names: vec!["a".into(), "b".into()],
            subscribed_topic_regex: Some("x.*".into()),
            rebalance_timeout_ms: 30_000,
            server_assignor: Some("uniform".into()),
            classic_protocols: None,
        };
        assert_eq!(parse_member(&member_value(&member)), Some(member.clone()));
        let classic = MemberValue {
            classic_protocols: Some(vec![
                ("range".into(), vec![0, 1, 2]),
                ("roundrobin".into(), vec![]),
            ]),
            ..member
        };
        assert_eq!(parse_member(&member_value(&classic)), Some(classic));
        let assignment = AssignmentValue {
            member_epoch: 4,
            previous_member_epoch: 3,
            state: 1,
            assigned: vec![(9, vec![0, 2])],
            revoking: vec![(9, vec![1])],
        };
        let bytes = assignment_value(&assignment);
        assert_eq!(parse_assignment(&bytes), Some(assignment));
        assert_eq!(
            parse_target_member(&target_member_value(&vec![(1, vec![5])])),
            Some(vec![(1, vec![5])])
        );
        // Truncated values do not decode.
        assert_eq!(parse_assignment(&bytes[..bytes.len() - 3]), None);
        assert_eq!(parse_epoch(&[0, 1, 0, 0, 0, 7, 0]), None, "unknown version");
    }
}
