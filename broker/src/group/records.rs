//! The records of `__consumer_offsets`, in Kafka's formats: an offset
//! commit has key version 1 (`group`, `topic`, `partition`) and value
//! version 3 (`offset`, `leader_epoch`, `metadata`, `commit_timestamp`);
//! a null value is a tombstone. Group metadata keys (version 2) are
//! recognised and skipped: Strom does not persist membership.

use crate::group::coordinator::CommittedOffset;

const OFFSET_KEY_VERSION: i16 = 1;
const GROUP_METADATA_KEY_VERSION: i16 = 2;
const OFFSET_VALUE_VERSION: i16 = 3;

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
}

fn put_string(out: &mut Vec<u8>, value: &str) {
    let len = i16::try_from(value.len()).expect("bounded by limits");
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(value.as_bytes());
}

pub fn offset_key(group_id: &str, topic: &str, partition: i32) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + group_id.len() + topic.len());
    out.extend_from_slice(&OFFSET_KEY_VERSION.to_be_bytes());
    put_string(&mut out, group_id);
    put_string(&mut out, topic);
    out.extend_from_slice(&partition.to_be_bytes());
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

struct Reader<'a> {
    bytes: &'a [u8],
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        if self.bytes.len() < n {
            return None;
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Some(head)
    }
    fn i16(&mut self) -> Option<i16> {
        Some(i16::from_be_bytes(self.take(2)?.try_into().ok()?))
    }
    fn i32(&mut self) -> Option<i32> {
        Some(i32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_be_bytes(self.take(8)?.try_into().ok()?))
    }
    fn string(&mut self) -> Option<String> {
        let len = self.i16()?;
        if len < 0 {
            return Some(String::new());
        }
        String::from_utf8(self.take(len as usize)?.to_vec()).ok()
    }
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
}
