//! Consumer groups: the classic group protocol and committed offsets.
//!
//! A group belongs to one partition of the internal `__consumer_offsets`
//! topic (Kafka's placement: the Java `String.hashCode` of the group id,
//! made non-negative, modulo the partition count), and the core that owns
//! that partition coordinates it. The plain state machine
//! (`coordinator`) and the on-disk formats (`records`) are the `groups`
//! crate's; `manager` is the runtime edge.

pub mod manager;

pub use ::groups::coordinator::{GroupConfig, GROUP_CONFIG_KEYS};
pub use ::groups::{coordinator, records};

pub use crate::metadata::OFFSETS_TOPIC;

/// A member's host as Kafka records it: Java's `InetAddress.toString()`
/// of the connection's peer with no host name, `/127.0.0.1`; IPv6 in
/// full, `/0:0:0:0:0:0:0:1`; an IPv4-mapped IPv6 address as IPv4.
pub fn client_host(peer: std::net::IpAddr) -> String {
    match peer.to_canonical() {
        std::net::IpAddr::V4(v4) => format!("/{v4}"),
        std::net::IpAddr::V6(v6) => {
            let groups: Vec<String> = v6.segments().iter().map(|g| format!("{g:x}")).collect();
            format!("/{}", groups.join(":"))
        }
    }
}

pub use crate::internal_topic::java_string_hash;

/// The `__consumer_offsets` partition of a group, as Kafka computes it
/// (`Utils.abs(groupId.hashCode) % partitions`, where `abs(MIN)` is 0).
pub fn offsets_partition_for(group_id: &str, partitions: i32) -> i32 {
    crate::internal_topic::partition_for(group_id, partitions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_matches_kafka() {
        // Values of Java's "...".hashCode().
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("a"), 97);
        assert_eq!(java_string_hash("hello"), 99_162_322);
        assert_eq!(java_string_hash("polygenelubricants"), i32::MIN);
        assert_eq!(offsets_partition_for("polygenelubricants", 50), 0);
        assert_eq!(offsets_partition_for("hello", 50), 99_162_322 % 50);
        // A negative hash: "console-consumer-1" style ids often are.
        let h = java_string_hash("zzzzzzzz");
        assert!(h < 0);
        assert_eq!(offsets_partition_for("zzzzzzzz", 50), h.abs() % 50);
        // Non-ASCII counts UTF-16 units: "é" is 0xE9.
        assert_eq!(java_string_hash("é"), 0xE9);
    }
}
