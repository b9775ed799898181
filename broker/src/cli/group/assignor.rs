//! The consumer protocol's subscription and assignment encodings, and
//! Kafka's `range` assignor that the group leader runs.

use std::collections::BTreeMap;

use bytes::{BufMut, Bytes, BytesMut};

/// Consumer-protocol subscription v0: version, topics, null user data.
pub(super) fn encode_subscription(topics: &[&str]) -> Bytes {
    let mut out = BytesMut::new();
    out.put_i16(0);
    out.put_i32(topics.len() as i32);
    for t in topics {
        out.put_i16(t.len() as i16);
        out.put_slice(t.as_bytes());
    }
    out.put_i32(-1);
    out.freeze()
}

/// Consumer-protocol assignment v0: version, (topic, partitions)*, null user data.
pub(super) fn encode_assignment(assignment: &BTreeMap<String, Vec<i32>>) -> Bytes {
    let mut out = BytesMut::new();
    out.put_i16(0);
    out.put_i32(assignment.len() as i32);
    for (t, ps) in assignment {
        out.put_i16(t.len() as i16);
        out.put_slice(t.as_bytes());
        out.put_i32(ps.len() as i32);
        for p in ps {
            out.put_i32(*p);
        }
    }
    out.put_i32(-1);
    out.freeze()
}

/// The topic partitions of a consumer-protocol assignment (any version:
/// later versions only append fields).
pub(super) fn decode_assignment(bytes: &[u8]) -> Option<BTreeMap<String, Vec<i32>>> {
    let mut at = 2usize;
    let take = |at: &mut usize, n: usize| -> Option<&[u8]> {
        let slice = bytes.get(*at..*at + n)?;
        *at += n;
        Some(slice)
    };
    take(&mut 0, 2)?;
    let count = i32::from_be_bytes(take(&mut at, 4)?.try_into().ok()?);
    if count < 0 {
        return Some(BTreeMap::new());
    }
    let mut out = BTreeMap::new();
    for _ in 0..count {
        let len = i16::from_be_bytes(take(&mut at, 2)?.try_into().ok()?);
        let name = String::from_utf8(take(&mut at, len.max(0) as usize)?.to_vec()).ok()?;
        let n = i32::from_be_bytes(take(&mut at, 4)?.try_into().ok()?);
        if n < 0 || n as usize > bytes.len() {
            return None;
        }
        let mut ps = Vec::with_capacity(n as usize);
        for _ in 0..n {
            ps.push(i32::from_be_bytes(take(&mut at, 4)?.try_into().ok()?));
        }
        out.insert(name, ps);
    }
    Some(out)
}

/// Kafka's range assignor: per topic, members (sorted by id) get
/// consecutive ranges, the first ones one partition more.
pub(super) fn range_assign(
    subscriptions: &BTreeMap<String, Vec<String>>,
    partition_counts: &BTreeMap<String, i32>,
) -> BTreeMap<String, BTreeMap<String, Vec<i32>>> {
    let mut result: BTreeMap<String, BTreeMap<String, Vec<i32>>> = subscriptions
        .keys()
        .map(|m| (m.clone(), BTreeMap::new()))
        .collect();
    for (topic, &count) in partition_counts {
        let members: Vec<&String> = subscriptions
            .iter()
            .filter(|(_, topics)| topics.contains(topic))
            .map(|(m, _)| m)
            .collect();
        if members.is_empty() {
            continue;
        }
        let per = count / members.len() as i32;
        let extra = count % members.len() as i32;
        let mut next = 0;
        for (i, member) in members.iter().enumerate() {
            let n = per + i32::from((i as i32) < extra);
            let ps: Vec<i32> = (next..next + n).collect();
            next += n;
            result
                .get_mut(*member)
                .expect("member")
                .insert(topic.clone(), ps);
        }
    }
    result
}
#[cfg(test)]
mod tests {
    use super::*;
    use broker::group::coordinator::consumer_subscription_topics;

    #[test]
    fn range_assignment_matches_kafkas_range_assignor() {
        let subscriptions: BTreeMap<String, Vec<String>> = [
            ("a".to_string(), vec!["t".to_string(), "u".to_string()]),
            ("b".to_string(), vec!["t".to_string()]),
            ("c".to_string(), vec!["t".to_string()]),
        ]
        .into_iter()
        .collect();
        let counts = [("t".to_string(), 7), ("u".to_string(), 2)]
            .into_iter()
            .collect();
        let result = range_assign(&subscriptions, &counts);
        assert_eq!(result["a"]["t"], vec![0, 1, 2]);
        assert_eq!(result["b"]["t"], vec![3, 4]);
        assert_eq!(result["c"]["t"], vec![5, 6]);
        assert_eq!(result["a"]["u"], vec![0, 1]);
        assert!(!result["b"].contains_key("u"));
        let encoded = encode_assignment(&result["a"]);
        assert_eq!(decode_assignment(&encoded).unwrap(), result["a"]);
        assert_eq!(
            consumer_subscription_topics(&encode_subscription(&["t", "u"])),
            Some(vec!["t".to_string(), "u".to_string()])
        );
        assert_eq!(decode_assignment(&encoded[..encoded.len() - 6]), None);
    }
}
