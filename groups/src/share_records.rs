//! The records of share partitions' durable state in
//! `__share_group_state`, one per share partition, each a whole snapshot
//! (the fields of Kafka's ShareSnapshot records): the key is version 0,
//! the group id (a non-flexible string), the topic id and the partition;
//! the value is version 0, the snapshot, state and leader epochs, the
//! start offset and the state batches, fixed-width big-endian. A null
//! value is a tombstone: the share partition's state is gone. The topic
//! is compacted, so the latest snapshot of each key is what stays.

use crate::reader::Reader;
use crate::share::{ShareSnapshot, StateBatch};

/// A share partition: the group, the topic (by id) and its partition.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SharePartitionKey {
    pub group_id: String,
    pub topic_id: u128,
    pub partition: i32,
}

impl SharePartitionKey {
    /// Where its state lives: Kafka's coordinator key
    /// `group:topicId:partition`, placed like any coordinator key.
    pub fn coordinator_key(&self) -> String {
        format!(
            "{}:{}:{}",
            self.group_id,
            crate::share_records::topic_id_text(self.topic_id),
            self.partition
        )
    }
}

/// A topic id as Kafka prints it (URL-safe base64 of the 16 bytes, no
/// padding).
pub fn topic_id_text(id: u128) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes = id.to_be_bytes();
    let mut out = String::with_capacity(22);
    for chunk in bytes.chunks(3) {
        let mut n = 0u32;
        for (i, b) in chunk.iter().enumerate() {
            n |= u32::from(*b) << (16 - 8 * i);
        }
        for i in 0..=chunk.len() {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

/// A share partition's durable state.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ShareState {
    /// Bumped when an operator resets the share partition: a leader
    /// writing an older one is fenced.
    pub state_epoch: i32,
    /// The leader epoch of the data partition's leader that wrote it: an
    /// older leader is fenced.
    pub leader_epoch: i32,
    pub snapshot: ShareSnapshot,
}

const KEY_VERSION: i16 = 0;
const VALUE_VERSION: i16 = 0;
/// Bytes of one state batch in a value.
const BATCH_BYTES: usize = 8 + 8 + 1 + 2;

pub fn key(key: &SharePartitionKey) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + 2 + key.group_id.len() + 16 + 4);
    out.extend_from_slice(&KEY_VERSION.to_be_bytes());
    let len = i16::try_from(key.group_id.len()).unwrap_or(i16::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&key.group_id.as_bytes()[..len as usize]);
    out.extend_from_slice(&key.topic_id.to_be_bytes());
    out.extend_from_slice(&key.partition.to_be_bytes());
    out
}

pub fn parse_key(bytes: &[u8]) -> Option<SharePartitionKey> {
    let mut r = Reader { bytes };
    if r.i16()? != KEY_VERSION {
        return None;
    }
    let group_id = r.key_string()?;
    let topic_id = r.u128()?;
    let partition = r.i32()?;
    r.bytes.is_empty().then_some(SharePartitionKey {
        group_id,
        topic_id,
        partition,
    })
}

pub fn value(state: &ShareState) -> Vec<u8> {
    let batches = &state.snapshot.batches;
    let mut out = Vec::with_capacity(2 + 4 * 3 + 8 + 4 + batches.len() * BATCH_BYTES);
    out.extend_from_slice(&VALUE_VERSION.to_be_bytes());
    // The snapshot epoch: every record is a whole snapshot.
    out.extend_from_slice(&0i32.to_be_bytes());
    out.extend_from_slice(&state.state_epoch.to_be_bytes());
    out.extend_from_slice(&state.leader_epoch.to_be_bytes());
    out.extend_from_slice(&state.snapshot.start_offset.to_be_bytes());
    out.extend_from_slice(&(batches.len() as i32).to_be_bytes());
    for b in batches {
        out.extend_from_slice(&b.first.to_be_bytes());
        out.extend_from_slice(&b.last.to_be_bytes());
        out.extend_from_slice(&b.delivery_state.to_be_bytes());
        out.extend_from_slice(&b.delivery_count.to_be_bytes());
    }
    out
}

pub fn parse_value(bytes: &[u8]) -> Option<ShareState> {
    let mut r = Reader { bytes };
    if r.i16()? != VALUE_VERSION {
        return None;
    }
    let _snapshot_epoch = r.i32()?;
    let state_epoch = r.i32()?;
    let leader_epoch = r.i32()?;
    let start_offset = r.i64()?;
    let count = usize::try_from(r.i32()?).ok()?;
    if count.checked_mul(BATCH_BYTES)? != r.bytes.len() {
        return None;
    }
    let mut batches = Vec::with_capacity(count);
    for _ in 0..count {
        batches.push(StateBatch {
            first: r.i64()?,
            last: r.i64()?,
            delivery_state: r.i8()?,
            delivery_count: r.i16()?,
        });
    }
    Some(ShareState {
        state_epoch,
        leader_epoch,
        snapshot: ShareSnapshot {
            start_offset,
            batches,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::share::{DELIVERY_ACKNOWLEDGED, DELIVERY_AVAILABLE};

    #[test]
    fn keys_and_values_read_back_and_damage_is_refused() {
        let k = SharePartitionKey {
            group_id: "queue".into(),
            topic_id: 0x0123_4567_89ab_cdef_0011_2233_4455_6677,
            partition: 7,
        };
        assert_eq!(parse_key(&key(&k)), Some(k.clone()));
        let state = ShareState {
            state_epoch: 2,
            leader_epoch: 5,
            snapshot: ShareSnapshot {
                start_offset: 100,
                batches: vec![
                    StateBatch {
                        first: 100,
                        last: 104,
                        delivery_state: DELIVERY_AVAILABLE,
                        delivery_count: 2,
                    },
                    StateBatch {
                        first: 105,
                        last: 105,
                        delivery_state: DELIVERY_ACKNOWLEDGED,
                        delivery_count: 1,
                    },
                ],
            },
        };
        let bytes = value(&state);
        assert_eq!(parse_value(&bytes), Some(state));
        assert_eq!(parse_value(&bytes[..bytes.len() - 1]), None);
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(parse_value(&longer), None);
        let mut huge = bytes.clone();
        huge[22..26].copy_from_slice(&i32::MAX.to_be_bytes());
        assert_eq!(parse_value(&huge), None);
        assert_eq!(parse_key(&key(&k)[..5]), None);
        // Kafka's text for a topic id: 22 URL-safe base64 characters.
        assert_eq!(topic_id_text(0), "AAAAAAAAAAAAAAAAAAAAAA");
        assert_eq!(topic_id_text(u128::MAX), "_____________________w");
        assert!(k.coordinator_key().starts_with("queue:"));
        assert!(k.coordinator_key().ends_with(":7"));
    }
}
