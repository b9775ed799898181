//! The records of `__consumer_offsets`, in Kafka's formats: an offset
//! commit has key version 1 (`group`, `topic`, `partition`) and value
//! version 3 (`offset`, `leader_epoch`, `metadata`, `commit_timestamp`);
//! a group's membership has key version 2 (`group`) and a
//! GroupMetadataValue, written at version 3 as Kafka writes it and read
//! at versions 0–4; a null value is a tombstone. Consumer-protocol
//! groups' records (key types 3–8) are in `consumer_records`, share
//! groups' (10, 11, 15) in `share_group_records`.

use bytes::Bytes;

use crate::reader::Reader;

use crate::coordinator::{CommittedOffset, GroupMetadata, MemberMetadata};

const OFFSET_KEY_VERSION: i16 = 1;
const GROUP_METADATA_KEY_VERSION: i16 = 2;
const OFFSET_VALUE_VERSION: i16 = 3;
/// Kafka writes GroupMetadataValue at version 3 (the last one that is not
/// flexible) since 2.3; version 4 adds only the flexible encoding.
const GROUP_METADATA_VALUE_VERSION: i16 = 3;
const GROUP_METADATA_VALUE_VERSION_MAX: i16 = 4;
/// The first flexible GroupMetadataValue version (compact strings, bytes
/// and arrays, tagged fields).
const GROUP_METADATA_VALUE_FLEXIBLE: i16 = 4;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OffsetsKey {
    Offset {
        group_id: String,
        topic: String,
        partition: i32,
    },
    GroupMetadata {
        group_id: String,
    },
    /// A consumer-protocol group's record (key types 3 to 8).
    Consumer(crate::consumer_records::ConsumerKey),
    /// A share group's record (key types 10, 11 and 15).
    Share(crate::share_group_records::ShareGroupKey),
}

fn put_string(out: &mut Vec<u8>, value: &str) {
    let len = i16::try_from(value.len()).expect("bounded by limits");
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(value.as_bytes());
}

fn put_nullable_string(out: &mut Vec<u8>, value: Option<&str>) {
    match value {
        Some(value) => put_string(out, value),
        None => out.extend_from_slice(&(-1i16).to_be_bytes()),
    }
}

fn put_bytes(out: &mut Vec<u8>, value: &[u8]) {
    let len = i32::try_from(value.len()).expect("bounded by limits");
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(value);
}

pub fn offset_key(group_id: &str, topic: &str, partition: i32) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + group_id.len() + topic.len());
    out.extend_from_slice(&OFFSET_KEY_VERSION.to_be_bytes());
    put_string(&mut out, group_id);
    put_string(&mut out, topic);
    out.extend_from_slice(&partition.to_be_bytes());
    out
}

pub fn group_metadata_key(group_id: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + group_id.len());
    out.extend_from_slice(&GROUP_METADATA_KEY_VERSION.to_be_bytes());
    put_string(&mut out, group_id);
    out
}

/// Kafka's GroupMetadataValue, version 3.
pub fn group_metadata_value(group: &GroupMetadata) -> Vec<u8> {
    let members_bytes: usize = group
        .members
        .iter()
        .map(|m| {
            32 + m.member_id.len()
                + m.group_instance_id.as_ref().map_or(0, String::len)
                + m.client_id.len()
                + m.client_host.len()
                + m.subscription.len()
                + m.assignment.len()
        })
        .sum();
    let mut out = Vec::with_capacity(32 + group.protocol_type.len() + members_bytes);
    out.extend_from_slice(&GROUP_METADATA_VALUE_VERSION.to_be_bytes());
    put_string(&mut out, &group.protocol_type);
    out.extend_from_slice(&group.generation_id.to_be_bytes());
    put_nullable_string(&mut out, group.protocol_name.as_deref());
    put_nullable_string(&mut out, group.leader_id.as_deref());
    out.extend_from_slice(&group.state_timestamp_ms.to_be_bytes());
    let count = i32::try_from(group.members.len()).expect("bounded by limits");
    out.extend_from_slice(&count.to_be_bytes());
    for m in &group.members {
        put_string(&mut out, &m.member_id);
        put_nullable_string(&mut out, m.group_instance_id.as_deref());
        put_string(&mut out, &m.client_id);
        put_string(&mut out, &m.client_host);
        out.extend_from_slice(&m.rebalance_timeout_ms.to_be_bytes());
        out.extend_from_slice(&m.session_timeout_ms.to_be_bytes());
        put_bytes(&mut out, &m.subscription);
        put_bytes(&mut out, &m.assignment);
    }
    out
}

pub fn offset_value(offset: &CommittedOffset) -> Vec<u8> {
    let mut out = Vec::with_capacity(24 + offset.metadata.len());
    out.extend_from_slice(&OFFSET_VALUE_VERSION.to_be_bytes());
    out.extend_from_slice(&offset.offset.to_be_bytes());
    out.extend_from_slice(&offset.leader_epoch.to_be_bytes());
    put_string(&mut out, &offset.metadata);
    out.extend_from_slice(&offset.commit_timestamp_ms.to_be_bytes());
    out
}

/// Reads the fields of a GroupMetadataValue in its version's encoding:
/// before version 4 lengths are fixed-width (`-1` null), from 4 they are
/// unsigned varints of length + 1 (`0` null) and structs end in tagged
/// fields.
struct ValueReader<'a> {
    r: Reader<'a>,
    flexible: bool,
}

impl ValueReader<'_> {
    /// A length; `None` inside for null.
    fn length(&mut self, wide: bool) -> Option<Option<usize>> {
        if self.flexible {
            let n = self.r.unsigned_varint()?;
            return Some(n.checked_sub(1).map(|n| n as usize));
        }
        let n = if wide {
            self.r.i32()?
        } else {
            i32::from(self.r.i16()?)
        };
        Some(usize::try_from(n).ok())
    }
    fn nullable_string(&mut self) -> Option<Option<String>> {
        match self.length(false)? {
            Some(len) => Some(Some(String::from_utf8(self.r.take(len)?.to_vec()).ok()?)),
            None => Some(None),
        }
    }
    fn string(&mut self) -> Option<String> {
        self.nullable_string()?
    }
    fn bytes(&mut self) -> Option<Bytes> {
        let len = self.length(true)??;
        Some(Bytes::copy_from_slice(self.r.take(len)?))
    }
    fn array_len(&mut self) -> Option<usize> {
        let len = self.length(true)??;
        // Each element takes at least a byte: a count beyond what is left
        // is a damaged record, not an allocation to make.
        (len <= self.r.bytes.len()).then_some(len)
    }
    /// Skips a struct's tagged fields (flexible versions only).
    fn tagged_fields(&mut self) -> Option<()> {
        if !self.flexible {
            return Some(());
        }
        let count = self.r.unsigned_varint()?;
        for _ in 0..count {
            self.r.unsigned_varint()?;
            let size = self.r.unsigned_varint()?;
            self.r.take(size as usize)?;
        }
        Some(())
    }
}

/// Kafka's GroupMetadataValue, versions 0–4: fields a version lacks take
/// Kafka's defaults (no state timestamp: -1; no rebalance timeout: -1,
/// read as the session timeout; no group instance id: none). `None` when
/// it does not decode.
pub fn parse_group_metadata_value(bytes: &[u8]) -> Option<GroupMetadata> {
    let mut r = Reader { bytes };
    let version = r.i16()?;
    if !(0..=GROUP_METADATA_VALUE_VERSION_MAX).contains(&version) {
        return None;
    }
    let mut v = ValueReader {
        r,
        flexible: version >= GROUP_METADATA_VALUE_FLEXIBLE,
    };
    let protocol_type = v.string()?;
    let generation_id = v.r.i32()?;
    let protocol_name = v.nullable_string()?;
    let leader_id = v.nullable_string()?;
    let state_timestamp_ms = if version >= 2 { v.r.i64()? } else { -1 };
    let count = v.array_len()?;
    let mut members = Vec::with_capacity(count);
    for _ in 0..count {
        let member_id = v.string()?;
        let group_instance_id = if version >= 3 {
            v.nullable_string()?
        } else {
            None
        };
        let client_id = v.string()?;
        let client_host = v.string()?;
        let rebalance_timeout_ms = if version >= 1 { v.r.i32()? } else { -1 };
        let session_timeout_ms = v.r.i32()?;
        let subscription = v.bytes()?;
        let assignment = v.bytes()?;
        v.tagged_fields()?;
        members.push(MemberMetadata {
            member_id,
            group_instance_id,
            client_id,
            client_host,
            rebalance_timeout_ms,
            session_timeout_ms,
            subscription,
            assignment,
        });
    }
    v.tagged_fields()?;
    Some(GroupMetadata {
        protocol_type,
        generation_id,
        protocol_name,
        leader_id,
        state_timestamp_ms,
        members,
    })
}

pub fn parse_key(bytes: &[u8]) -> Option<OffsetsKey> {
    let mut r = Reader { bytes };
    match r.i16()? {
        0 | OFFSET_KEY_VERSION => Some(OffsetsKey::Offset {
            group_id: r.string()?,
            topic: r.string()?,
            partition: r.i32()?,
        }),
        GROUP_METADATA_KEY_VERSION => Some(OffsetsKey::GroupMetadata {
            group_id: r.string()?,
        }),
        kind @ 3..=8 => {
            crate::consumer_records::ConsumerKey::decode(kind, r.bytes).map(OffsetsKey::Consumer)
        }
        kind @ 10..=15 => {
            crate::share_group_records::ShareGroupKey::decode(kind, r.bytes).map(OffsetsKey::Share)
        }
        _ => None,
    }
}

/// Values versions 0–3 (Kafka's); the expire timestamp of 1 is ignored.
pub fn parse_value(bytes: &[u8]) -> Option<CommittedOffset> {
    let mut r = Reader { bytes };
    let version = r.i16()?;
    let offset = r.i64()?;
    let leader_epoch = if version >= 3 { r.i32()? } else { -1 };
    let metadata = r.string()?;
    let commit_timestamp_ms = r.i64()?;
    if version == 1 {
        r.i64()?;
    }
    if version > 3 {
        return None;
    }
    Some(CommittedOffset {
        offset,
        leader_epoch,
        metadata,
        commit_timestamp_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_records_round_trip_in_kafkas_layout() {
        let key = offset_key("grp", "topic", 7);
        assert_eq!(
            key,
            [&[0, 1, 0, 3][..], b"grp", &[0, 5], b"topic", &[0, 0, 0, 7]].concat()
        );
        assert_eq!(
            parse_key(&key),
            Some(OffsetsKey::Offset {
                group_id: "grp".into(),
                topic: "topic".into(),
                partition: 7
            })
        );
        let offset = CommittedOffset {
            offset: 42,
            leader_epoch: 3,
            metadata: "meta".into(),
            commit_timestamp_ms: 1_700_000_000_000,
        };
        let value = offset_value(&offset);
        assert_eq!(value.len(), 2 + 8 + 4 + 2 + 4 + 8);
        assert_eq!(&value[..2], &[0, 3]);
        assert_eq!(parse_value(&value), Some(offset));
        for cut in 0..value.len() {
            assert_eq!(parse_value(&value[..cut]), None, "cut at {cut}");
        }
        assert_eq!(parse_key(&[0, 9]), None);
        assert_eq!(
            parse_key(&[0, 2, 0, 1, b'g']),
            Some(OffsetsKey::GroupMetadata {
                group_id: "g".into()
            })
        );
    }

    #[test]
    fn older_offset_records_still_parse() {
        // Key version 0 has version 1's layout.
        assert_eq!(
            parse_key(&[&[0, 0, 0, 1][..], b"g", &[0, 1], b"t", &[0, 0, 0, 2]].concat()),
            Some(OffsetsKey::Offset {
                group_id: "g".into(),
                topic: "t".into(),
                partition: 2
            })
        );
        let expected = CommittedOffset {
            offset: 5,
            leader_epoch: -1,
            metadata: "m".into(),
            commit_timestamp_ms: 9,
        };
        let v0 = [
            &[0, 0][..],
            &5i64.to_be_bytes(),
            &[0, 1],
            b"m",
            &9i64.to_be_bytes(),
        ]
        .concat();
        assert_eq!(parse_value(&v0), Some(expected.clone()));
        // Version 1 adds an expire timestamp, which is ignored.
        let v1 = [&v0[..], &77i64.to_be_bytes()].concat();
        let v1 = [&[0, 1][..], &v1[2..]].concat();
        assert_eq!(parse_value(&v1), Some(expected));
    }

    fn member(id: &str, instance: Option<&str>) -> MemberMetadata {
        MemberMetadata {
            member_id: id.into(),
            group_instance_id: instance.map(str::to_string),
            client_id: "client".into(),
            client_host: "/127.0.0.1".into(),
            rebalance_timeout_ms: 30_000,
            session_timeout_ms: 10_000,
            subscription: Bytes::from_static(b"sub"),
            assignment: Bytes::from_static(b"asg"),
        }
    }

    fn stable_group() -> GroupMetadata {
        GroupMetadata {
            protocol_type: "consumer".into(),
            generation_id: 7,
            protocol_name: Some("range".into()),
            leader_id: Some("m1".into()),
            state_timestamp_ms: 1_700_000_000_000,
            members: vec![member("m1", None), member("m2", Some("static-2"))],
        }
    }

    /// Builds a value field by field in the encoding of `version`.
    struct Fields {
        out: Vec<u8>,
        flexible: bool,
    }

    impl Fields {
        fn new(version: i16) -> Self {
            Self {
                out: version.to_be_bytes().to_vec(),
                flexible: version >= 4,
            }
        }
        fn length(&mut self, len: Option<usize>, wide: bool) -> &mut Self {
            match (self.flexible, len) {
                (true, len) => {
                    let mut n = len.map_or(0, |l| l + 1);
                    loop {
                        let byte = (n & 0x7f) as u8;
                        n >>= 7;
                        if n == 0 {
                            self.out.push(byte);
                            break;
                        }
                        self.out.push(byte | 0x80);
                    }
                }
                (false, len) => {
                    let n = len.map_or(-1, |l| l as i32);
                    if wide {
                        self.out.extend_from_slice(&n.to_be_bytes());
                    } else {
                        self.out.extend_from_slice(&(n as i16).to_be_bytes());
                    }
                }
            }
            self
        }
        fn string(&mut self, value: Option<&str>) -> &mut Self {
            self.length(value.map(str::len), false);
            self.out
                .extend_from_slice(value.unwrap_or_default().as_bytes());
            self
        }
        fn bytes(&mut self, value: &[u8]) -> &mut Self {
            self.length(Some(value.len()), true);
            self.out.extend_from_slice(value);
            self
        }
        fn i32(&mut self, value: i32) -> &mut Self {
            self.out.extend_from_slice(&value.to_be_bytes());
            self
        }
        fn i64(&mut self, value: i64) -> &mut Self {
            self.out.extend_from_slice(&value.to_be_bytes());
            self
        }
        /// Tagged fields: one unknown tag of two bytes, which readers skip.
        fn tags(&mut self) -> &mut Self {
            if self.flexible {
                self.out.extend_from_slice(&[1, 9, 2, 0xAB, 0xCD]);
            }
            self
        }
    }

    /// `group` in GroupMetadataValue `version`, built field by field.
    fn encoded(group: &GroupMetadata, version: i16) -> Vec<u8> {
        let mut f = Fields::new(version);
        f.string(Some(&group.protocol_type))
            .i32(group.generation_id)
            .string(group.protocol_name.as_deref())
            .string(group.leader_id.as_deref());
        if version >= 2 {
            f.i64(group.state_timestamp_ms);
        }
        f.length(Some(group.members.len()), true);
        for m in &group.members {
            f.string(Some(&m.member_id));
            if version >= 3 {
                f.string(m.group_instance_id.as_deref());
            }
            f.string(Some(&m.client_id)).string(Some(&m.client_host));
            if version >= 1 {
                f.i32(m.rebalance_timeout_ms);
            }
            f.i32(m.session_timeout_ms)
                .bytes(&m.subscription)
                .bytes(&m.assignment)
                .tags();
        }
        f.tags();
        f.out
    }

    #[test]
    fn group_metadata_records_round_trip_in_kafkas_layout() {
        assert_eq!(
            group_metadata_key("grp"),
            [&[0, 2, 0, 3][..], b"grp"].concat()
        );
        assert_eq!(
            parse_key(&group_metadata_key("grp")),
            Some(OffsetsKey::GroupMetadata {
                group_id: "grp".into()
            })
        );
        let stable = stable_group();
        let empty = GroupMetadata {
            protocol_name: None,
            leader_id: None,
            members: Vec::new(),
            ..stable.clone()
        };
        for group in [&stable, &empty] {
            let value = group_metadata_value(group);
            // Written as Kafka writes it: version 3, field by field.
            assert_eq!(value, encoded(group, 3));
            assert_eq!(parse_group_metadata_value(&value).as_ref(), Some(group));
            for cut in 0..value.len() {
                assert_eq!(
                    parse_group_metadata_value(&value[..cut]),
                    None,
                    "cut at {cut}"
                );
            }
        }
        // The Empty group's value, byte by byte: version, "consumer",
        // generation, null protocol and leader, timestamp, no members.
        assert_eq!(
            group_metadata_value(&empty),
            [
                &[0, 3, 0, 8][..],
                b"consumer",
                &[0, 0, 0, 7, 0xFF, 0xFF, 0xFF, 0xFF],
                &1_700_000_000_000i64.to_be_bytes(),
                &[0, 0, 0, 0],
            ]
            .concat()
        );
    }

    #[test]
    fn group_metadata_values_of_every_kafka_version_parse() {
        let full = stable_group();
        for version in 0..=4 {
            let mut expected = full.clone();
            if version < 3 {
                for m in &mut expected.members {
                    m.group_instance_id = None;
                }
            }
            if version < 2 {
                expected.state_timestamp_ms = -1;
            }
            if version < 1 {
                for m in &mut expected.members {
                    m.rebalance_timeout_ms = -1;
                }
            }
            let value = encoded(&full, version);
            assert_eq!(
                parse_group_metadata_value(&value),
                Some(expected),
                "version {version}"
            );
        }
        // A version beyond Kafka's, and a negative one, are not guessed at.
        let mut future = encoded(&full, 4);
        future[..2].copy_from_slice(&5i16.to_be_bytes());
        assert_eq!(parse_group_metadata_value(&future), None);
        assert_eq!(parse_group_metadata_value(&[0xFF, 0xFF]), None);
        // A member count beyond the bytes left is refused, not allocated.
        let mut huge = Fields::new(3);
        huge.string(Some("consumer"))
            .i32(1)
            .string(None)
            .string(None)
            .i64(0)
            .i32(i32::MAX);
        assert_eq!(parse_group_metadata_value(&huge.out), None);
    }
}
