//! Kafka's `range` assignor, which the group leader runs over its
//! members' subscriptions (their encoding is `protocol::consumer_protocol`).

use std::collections::BTreeMap;

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
    }
}
