//! What kcat's metadata listing (`kcat -L -J`) says of a topic (each
//! partition's leader and ISR) and of the cluster (its brokers and active
//! controller), as the cluster tests poll for them.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

/// How long one listing may take.
pub const LISTING_DEADLINE: Duration = Duration::from_secs(20);

/// Each partition of `topic` in a parsed `kcat -L -J` answer: (leader,
/// ISR); `None` when the topic is not listed or has an error.
pub fn partitions_of(
    json: &serde_json::Value,
    topic: &str,
) -> Option<BTreeMap<i32, (i32, Vec<i32>)>> {
    let listed = json["topics"]
        .as_array()?
        .iter()
        .find(|t| t["topic"] == topic)?;
    if listed["error"].is_string() {
        return None;
    }
    let mut out = BTreeMap::new();
    for p in listed["partitions"].as_array()? {
        let isr = p["isrs"]
            .as_array()?
            .iter()
            .filter_map(|r| r["id"].as_i64())
            .map(|id| id as i32)
            .collect();
        out.insert(
            p["partition"].as_i64()? as i32,
            (p["leader"].as_i64()? as i32, isr),
        );
    }
    Some(out)
}

/// Each partition of `topic` as kcat lists it through `bootstrap`, if it
/// answers and lists the topic.
pub fn partitions(bootstrap: &str, topic: &str) -> Option<BTreeMap<i32, (i32, Vec<i32>)>> {
    let output = super::run(
        Command::new("kcat").args(["-b", bootstrap, "-L", "-J", "-m", "5", "-t", topic]),
        None,
        LISTING_DEADLINE,
    );
    if !output.status.success() {
        return None;
    }
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).ok()?;
    partitions_of(&json, topic).filter(|p| !p.is_empty())
}

/// The brokers `bootstrap` lists and its active controller.
pub fn brokers(bootstrap: &str) -> Option<(Vec<i32>, i32)> {
    let output = super::run(
        Command::new("kcat").args(["-b", bootstrap, "-L", "-J", "-m", "5"]),
        None,
        LISTING_DEADLINE,
    );
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).ok()?;
    let mut ids: Vec<i32> = json["brokers"]
        .as_array()?
        .iter()
        .filter_map(|b| b["id"].as_i64())
        .map(|id| id as i32)
        .collect();
    ids.sort_unstable();
    Some((ids, json["controllerid"].as_i64()? as i32))
}
