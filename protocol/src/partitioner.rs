//! Kafka's default partitioner: the Java client's murmur2 hash of a
//! record's key, so keyed records land where any Kafka producer (Java,
//! librdkafka's `murmur2_random`, kcat) puts them. Used by the CLI's
//! producer and the load generator.

/// The 32-bit murmur2 hash with the seed of the Java client's
/// `Utils.murmur2`.
pub fn murmur2(data: &[u8]) -> u32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h = SEED ^ data.len() as u32;
    let chunks = data.chunks_exact(4);
    let tail = chunks.remainder();
    for chunk in chunks {
        let mut k = u32::from_le_bytes(chunk.try_into().expect("4 bytes"));
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h
}

/// Which of `partitions` the Java client's default partitioner picks for
/// `key`: an index from 0.
pub fn partition_index_for_key(key: &[u8], partitions: usize) -> usize {
    (murmur2(key) & 0x7fff_ffff) as usize % partitions
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_the_java_client() {
        // Values from the Java client's Utils.murmur2 test vectors.
        let check = |input: &str, expected: i32| {
            assert_eq!(murmur2(input.as_bytes()) as i32, expected, "{input}")
        };
        check("21", -973_932_308);
        check("foobar", -790_332_482);
        check("a-little-bit-long-string", -985_981_536);
        check("a-little-bit-longer-string", -1_486_304_829);
        check(
            "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
            -58_897_971,
        );
        check("abc", 479_470_107);
    }

    #[test]
    fn keys_spread_as_the_java_client_spreads_them() {
        // murmur2("foobar") is negative; the sign bit is masked off.
        assert_eq!(
            partition_index_for_key(b"foobar", 7),
            ((-790_332_482i32 as u32 & 0x7fff_ffff) % 7) as usize
        );
        assert!((0..1_000).all(|i| partition_index_for_key(format!("k{i}").as_bytes(), 3) < 3));
    }
}
