//! Tests of the `__transaction_state` codec: Kafka's layouts byte by byte,
//! round trips of every state in both value versions, and damaged bytes.

use super::*;

fn partitions(list: &[(&str, i32)]) -> BTreeSet<TopicPartition> {
    list.iter().map(|(t, p)| (t.to_string(), *p)).collect()
}

fn ongoing() -> TxnLogValue {
    TxnLogValue {
        producer_id: 4_000,
        previous_producer_id: NO_PRODUCER_ID,
        next_producer_id: NO_PRODUCER_ID,
        producer_epoch: 3,
        timeout_ms: 60_000,
        state: TxnState::Ongoing,
        partitions: partitions(&[("b", 2), ("a", 1), ("b", 0)]),
        last_update_ms: 1_700_000_000_500,
        start_ms: 1_700_000_000_000,
        client_transaction_version: 0,
    }
}

fn empty() -> TxnLogValue {
    TxnLogValue {
        state: TxnState::Empty,
        partitions: BTreeSet::new(),
        start_ms: -1,
        ..ongoing()
    }
}

/// Big-endian bytes of each value, concatenated.
macro_rules! be {
    ($($value:expr),* $(,)?) => {{
        let mut out: Vec<u8> = Vec::new();
        $(out.extend_from_slice(&$value.to_be_bytes());)*
        out
    }};
}

#[test]
fn keys_are_version_zero_and_the_id_as_a_kafka_string() {
    let key = encode_key("txn-1").unwrap();
    assert_eq!(key, [&be!(0i16, 5i16)[..], b"txn-1"].concat());
    assert_eq!(decode_key(&key), Ok("txn-1".to_string()));
    assert_eq!(
        decode_key(&be!(1i16, 1i16, 0x41u8)),
        Err(RecordError::UnknownKeyVersion { version: 1 })
    );
    assert_eq!(
        decode_key(&be!(0i16, -1i16)),
        Err(RecordError::Null {
            field: "transactional_id"
        })
    );
    assert_eq!(
        decode_key(&[&key[..], &[0]].concat()),
        Err(RecordError::TrailingBytes { count: 1 })
    );
    let long = "x".repeat(i16::MAX as usize + 1);
    assert_eq!(
        encode_key(&long),
        Err(RecordError::TooLong {
            field: "transactional_id",
            length: long.len()
        })
    );
}

#[test]
fn a_version_zero_value_is_laid_out_as_kafkas_schema_says() {
    // Built field by field from TransactionLogValue version 0.
    let expected = [
        be!(0i16, 4_000i64, 3i16, 60_000i32, 1i8),
        be!(2i32),
        be!(1i16),
        b"a".to_vec(),
        be!(1i32, 1i32),
        be!(1i16),
        b"b".to_vec(),
        be!(2i32, 0i32, 2i32),
        be!(1_700_000_000_500i64, 1_700_000_000_000i64),
    ]
    .concat();
    let value = ongoing();
    assert_eq!(encode_value(&value, ValueVersion::V0).unwrap(), expected);
    assert_eq!(decode_value(&expected), Ok(value));
}

#[test]
fn an_empty_transaction_writes_null_partitions() {
    let bytes = encode_value(&empty(), ValueVersion::V0).unwrap();
    assert_eq!(
        bytes,
        [
            be!(0i16, 4_000i64, 3i16, 60_000i32, 0i8, -1i32),
            be!(1_700_000_000_500i64, -1i64)
        ]
        .concat()
    );
    assert_eq!(decode_value(&bytes), Ok(empty()));
    let mut refused = empty();
    refused.partitions = partitions(&[("a", 0)]);
    assert_eq!(
        encode_value(&refused, ValueVersion::V0),
        Err(RecordError::PartitionsInEmpty)
    );
    // Kafka ignores the partitions an Empty value lists.
    let listed = [
        be!(0i16, 4_000i64, 3i16, 60_000i32, 0i8, 1i32, 1i16),
        b"a".to_vec(),
        be!(1i32, 7i32, 1_700_000_000_500i64, -1i64),
    ]
    .concat();
    assert_eq!(decode_value(&listed), Ok(empty()));
    // Any other state with no partitions writes an empty array.
    let complete = TxnLogValue {
        state: TxnState::CompleteCommit,
        partitions: BTreeSet::new(),
        ..ongoing()
    };
    let bytes = encode_value(&complete, ValueVersion::V0).unwrap();
    assert_eq!(&bytes[17..21], &be!(0i32)[..]);
    assert_eq!(decode_value(&bytes), Ok(complete));
}

#[test]
fn a_version_one_value_is_flexible_with_its_tagged_fields_last() {
    let value = TxnLogValue {
        previous_producer_id: 3_999,
        client_transaction_version: 2,
        ..ongoing()
    };
    let expected = [
        be!(1i16, 4_000i64, 3i16, 60_000i32, 1i8),
        // Two topics (2 + 1), each: name length + 1, name, ids + 1, ids,
        // no tags.
        vec![3, 2, b'a', 2],
        be!(1i32),
        vec![0, 2, b'b', 3],
        be!(0i32, 2i32),
        vec![0],
        be!(1_700_000_000_500i64, 1_700_000_000_000i64),
        // Two tagged fields, in tag order; next_producer_id is -1, its
        // default, so it is not written.
        vec![2, 0, 8],
        be!(3_999i64),
        vec![2, 2],
        be!(2i16),
    ]
    .concat();
    assert_eq!(encode_value(&value, ValueVersion::V1).unwrap(), expected);
    assert_eq!(decode_value(&expected), Ok(value.clone()));
    // Without tagged fields the value ends in a zero count.
    let plain = encode_value(&ongoing(), ValueVersion::V1).unwrap();
    assert_eq!(plain.last(), Some(&0));
    assert_eq!(decode_value(&plain), Ok(ongoing()));
    // Empty: null partitions are a zero length.
    let bytes = encode_value(&empty(), ValueVersion::V1).unwrap();
    assert_eq!(bytes[17], 0);
    assert_eq!(decode_value(&bytes), Ok(empty()));
    // Version 0 has no tagged fields: they are not written.
    let v0 = decode_value(&encode_value(&value, ValueVersion::V0).unwrap()).unwrap();
    assert_eq!(v0.previous_producer_id, NO_PRODUCER_ID);
    assert_eq!(v0.client_transaction_version, 0);
}

#[test]
fn tags_newer_than_the_schema_are_skipped() {
    let mut bytes = encode_value(&ongoing(), ValueVersion::V1).unwrap();
    bytes.pop();
    // Tag 1 (next producer id) and an unknown tag 9 of three bytes.
    bytes.extend_from_slice(&[2, 1, 8]);
    bytes.extend_from_slice(&be!(5_000i64));
    bytes.extend_from_slice(&[9, 3, 0xAA, 0xBB, 0xCC]);
    let value = decode_value(&bytes).unwrap();
    assert_eq!(value.next_producer_id, 5_000);
    assert_eq!(
        TxnLogValue {
            next_producer_id: -1,
            ..value
        },
        ongoing()
    );
    // A known tag of the wrong size is damage.
    let mut bytes = encode_value(&ongoing(), ValueVersion::V1).unwrap();
    bytes.pop();
    bytes.extend_from_slice(&[1, 0, 4, 0, 0, 0, 1]);
    assert_eq!(
        decode_value(&bytes),
        Err(RecordError::TaggedFieldSize {
            tag: 0,
            size: 4,
            expected: 8
        })
    );
}

#[test]
fn every_state_round_trips_in_both_versions() {
    for state in TxnState::ALL {
        for version in [ValueVersion::V0, ValueVersion::V1] {
            let mut value = ongoing();
            value.state = state;
            if state == TxnState::Empty {
                value.partitions.clear();
            }
            if version == ValueVersion::V1 {
                value.previous_producer_id = 17;
                value.next_producer_id = 18;
            }
            let bytes = encode_value(&value, version).unwrap();
            assert_eq!(&bytes[..2], &version.number().to_be_bytes());
            assert_eq!(
                decode_value(&bytes).as_ref(),
                Ok(&value),
                "{state} {version:?}"
            );
        }
    }
    let key = encode_key("t").unwrap();
    let value = encode_value(&ongoing(), ValueVersion::V0).unwrap();
    assert_eq!(
        decode(&key, Some(&value)),
        Ok(TxnRecord::Value {
            transactional_id: "t".into(),
            value: ongoing()
        })
    );
    assert_eq!(
        decode(&key, None),
        Ok(TxnRecord::Tombstone {
            transactional_id: "t".into()
        })
    );
}

#[test]
fn damaged_values_are_refused_not_guessed_at() {
    for version in [ValueVersion::V0, ValueVersion::V1] {
        let value = TxnLogValue {
            previous_producer_id: 1,
            ..ongoing()
        };
        let bytes = encode_value(&value, version).unwrap();
        for cut in 0..bytes.len() {
            assert!(
                matches!(
                    decode_value(&bytes[..cut]),
                    Err(RecordError::Truncated { .. } | RecordError::CountTooLarge { .. })
                ),
                "{version:?} cut at {cut}"
            );
        }
        assert_eq!(
            decode_value(&[&bytes[..], &[7]].concat()),
            Err(RecordError::TrailingBytes { count: 1 })
        );
    }
    let v0 = encode_value(&ongoing(), ValueVersion::V0).unwrap();
    let with = |offset: usize, patch: &[u8]| {
        let mut bytes = v0.clone();
        bytes[offset..offset + patch.len()].copy_from_slice(patch);
        decode_value(&bytes)
    };
    assert_eq!(
        with(0, &be!(2i16)),
        Err(RecordError::UnknownValueVersion { version: 2 })
    );
    assert_eq!(
        with(0, &be!(-1i16)),
        Err(RecordError::UnknownValueVersion { version: -1 })
    );
    assert_eq!(with(16, &[8]), Err(RecordError::UnknownState { id: 8 }));
    assert_eq!(
        with(17, &be!(i32::MAX)),
        Err(RecordError::CountTooLarge {
            field: "transaction_partitions",
            count: i32::MAX as usize
        })
    );
    assert_eq!(
        with(17, &be!(-2i32)),
        Err(RecordError::NegativeLength {
            field: "transaction_partitions",
            length: -2
        })
    );
    assert_eq!(
        with(21, &be!(-1i16)),
        Err(RecordError::Null { field: "topic" })
    );
    assert_eq!(
        with(23, &[0xFF]),
        Err(RecordError::InvalidUtf8 { field: "topic" })
    );
    assert_eq!(
        with(24, &be!(-1i32)),
        Err(RecordError::Null {
            field: "partition_ids"
        })
    );
    // A varint of more than five bytes.
    let v1 = encode_value(&ongoing(), ValueVersion::V1).unwrap();
    let mut long = v1[..17].to_vec();
    long.extend_from_slice(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x01]);
    assert_eq!(
        decode_value(&long),
        Err(RecordError::VarintTooLong {
            field: "transaction_partitions"
        })
    );
}

/// splitmix64: a deterministic source for the damage test.
fn next(seed: &mut u64) -> u64 {
    *seed = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *seed;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[test]
fn random_damage_never_panics_and_what_decodes_encodes_back() {
    let mut seed = 7;
    let originals = [
        encode_value(&ongoing(), ValueVersion::V0).unwrap(),
        encode_value(&ongoing(), ValueVersion::V1).unwrap(),
        encode_value(&empty(), ValueVersion::V1).unwrap(),
    ];
    for round in 0..20_000 {
        let mut bytes = originals[round % originals.len()].clone();
        for _ in 0..1 + next(&mut seed) % 4 {
            let at = (next(&mut seed) as usize) % bytes.len();
            bytes[at] = next(&mut seed) as u8;
        }
        if next(&mut seed) % 4 == 0 {
            bytes.truncate((next(&mut seed) as usize) % (bytes.len() + 1));
        }
        if let Ok(value) = decode_value(&bytes) {
            // What decodes is a value the codec can write again and read
            // back the same.
            let version = ValueVersion::from_number(i16::from_be_bytes([bytes[0], bytes[1]]));
            let again = encode_value(&value, version.unwrap()).unwrap();
            assert_eq!(decode_value(&again), Ok(value));
        }
        let _ = decode_key(&bytes);
    }
}
