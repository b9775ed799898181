//! The shapes are checked against the crate's own decoders: random bodies
//! generated from each shape must decode with the crate and consume exactly
//! the bytes the walk consumed, for every request and version.

use super::*;
use bytes::Bytes;
use kafka_protocol::messages::RequestKind;

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn put_unsigned_varint(out: &mut Vec<u8>, mut value: u32) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn put_text(out: &mut Vec<u8>, rng: &mut Rng, compact: bool, wide_length: bool) {
    let length = rng.below(6) as usize;
    if compact {
        put_unsigned_varint(out, length as u32 + 1);
    } else if wide_length {
        out.extend_from_slice(&(length as i32).to_be_bytes());
    } else {
        out.extend_from_slice(&(length as i16).to_be_bytes());
    }
    out.extend((0..length).map(|_| b'a' + rng.below(26) as u8));
}

fn put_count(out: &mut Vec<u8>, compact: bool, count: usize) {
    if compact {
        put_unsigned_varint(out, count as u32 + 1);
    } else {
        out.extend_from_slice(&(count as i32).to_be_bytes());
    }
}

/// Writes a random instance of `shape` at `version`.
fn generate(out: &mut Vec<u8>, rng: &mut Rng, shape: &Struct, version: i16, depth: usize) {
    for field in shape.fields {
        if field.since <= version && version <= field.until {
            generate_kind(out, rng, field.kind, version, depth);
        }
    }
    if version >= shape.flexible_since {
        // Sometimes an unknown tagged field, which the decoders skip by
        // size, and the known ones the decoders read themselves.
        let mut tagged: Vec<(u32, Vec<u8>)> = Vec::new();
        for known in shape.tags.iter().filter(|t| version >= t.since) {
            if rng.below(2) == 0 {
                let mut content = Vec::new();
                generate_kind(&mut content, rng, known.kind, version, depth + 1);
                tagged.push((known.tag, content));
            }
        }
        if rng.below(3) == 0 {
            let size = rng.below(4) as usize;
            tagged.push((1000, (0..size).map(|_| rng.below(256) as u8).collect()));
        }
        put_unsigned_varint(out, tagged.len() as u32);
        for (tag, content) in tagged {
            put_unsigned_varint(out, tag);
            put_unsigned_varint(out, content.len() as u32);
            out.extend_from_slice(&content);
        }
    }
}

fn generate_kind(out: &mut Vec<u8>, rng: &mut Rng, kind: Kind, version: i16, depth: usize) {
    let elements = if depth > 3 { 0 } else { rng.below(3) as usize };
    match kind {
        Kind::Fixed(bytes) => out.extend((0..bytes).map(|_| rng.below(2) as u8)),
        Kind::Str => put_text(out, rng, false, false),
        Kind::CompactStr | Kind::CompactBytes => put_text(out, rng, true, false),
        Kind::Bytes => put_text(out, rng, false, true),
        Kind::Array(shape) | Kind::CompactArray(shape) => {
            put_count(out, matches!(kind, Kind::CompactArray(_)), elements);
            for _ in 0..elements {
                generate(out, rng, shape, version, depth + 1);
            }
        }
        Kind::ArrayOf(bytes) | Kind::CompactArrayOf(bytes) => {
            put_count(out, matches!(kind, Kind::CompactArrayOf(_)), elements);
            out.extend((0..elements * bytes).map(|_| rng.below(256) as u8));
        }
        Kind::ArrayOfStr | Kind::CompactArrayOfStr => {
            let compact = matches!(kind, Kind::CompactArrayOfStr);
            put_count(out, compact, elements);
            for _ in 0..elements {
                put_text(out, rng, compact, false);
            }
        }
        Kind::Struct(shape) => generate(out, rng, shape, version, depth + 1),
        Kind::OptionStruct(shape) => {
            out.push(1);
            generate(out, rng, shape, version, depth + 1);
        }
    }
}

fn api_keys() -> Vec<ApiKey> {
    (0..100i16)
        .filter_map(|k| ApiKey::try_from(k).ok())
        .filter(|&k| known(k))
        .collect()
}

#[test]
fn walks_agree_with_the_crate_decoders_for_every_request_and_version() {
    let keys = api_keys();
    assert!(keys.len() >= 39, "{keys:?}");
    let mut rng = Rng(0x5eed);
    for api_key in keys {
        let root = generated::request(api_key as i16).unwrap();
        for version in root.versions.0..=root.versions.1 {
            for round in 0..40 {
                let mut body = Vec::new();
                generate(&mut body, &mut rng, root, version, 0);
                check_request(api_key, version, &body).unwrap_or_else(|e| {
                    panic!("{api_key:?} v{version} round {round}: walk refused: {e}")
                });
                let mut bytes = Bytes::from(body.clone());
                match RequestKind::decode(api_key, &mut bytes, version) {
                    Ok(_) => assert!(
                        bytes.is_empty(),
                        "{api_key:?} v{version}: the crate left {} of {} bytes",
                        bytes.len(),
                        body.len()
                    ),
                    Err(e) => panic!("{api_key:?} v{version}: crate refused {body:?}: {e}"),
                }
                // Every strict prefix is refused by the walk, or decodes
                // with the crate (trailing optional data never exists, so
                // the walk must refuse it).
                let cut = rng.below(body.len().max(1) as u64) as usize;
                if cut < body.len() {
                    assert!(
                        check_request(api_key, version, &body[..cut]).is_err(),
                        "{api_key:?} v{version}: a prefix of {cut}/{} bytes passed",
                        body.len()
                    );
                }
            }
        }
    }
}

#[test]
fn counts_larger_than_the_body_are_refused() {
    // Metadata v1: topics array of i32::MAX in a 4-byte body.
    let error = check_request(ApiKey::Metadata, 1, &i32::MAX.to_be_bytes()).unwrap_err();
    assert!(matches!(error, ShapeError::Count { count, .. } if count == i32::MAX as u64));
    // Metadata v12: compact count 2^31 (varint), then nothing.
    let error = check_request(
        ApiKey::Metadata,
        12,
        &[0x80, 0x80, 0x80, 0x80, 0x08, 0, 0, 0],
    )
    .unwrap_err();
    assert!(matches!(error, ShapeError::Count { .. }), "{error:?}");
    // Produce v9 with one topic claiming 1000 partitions in a few bytes.
    let body = [
        0x00, // transactional id: null
        0xff, 0xff, // acks -1
        0, 0, 0x75, 0x30, // timeout
        0x02, // one topic
        0x02, b't', // name "t"
        0xe9, 0x07, // 1000 partitions (+1)
        0, 0, 0, 0,
    ];
    let error = check_request(ApiKey::Produce, 9, &body).unwrap_err();
    assert!(
        matches!(error, ShapeError::Count { count: 1000, .. }),
        "{error:?}"
    );
    // An empty Metadata v12 request passes.
    check_request(ApiKey::Metadata, 12, &[1, 1, 0, 0]).unwrap();
}

#[test]
fn unknown_api_and_version_are_refused() {
    assert_eq!(
        check_request(ApiKey::Metadata, 99, &[]),
        Err(ShapeError::Version {
            version: 99,
            min: 0,
            max: 13
        })
    );
}
