//! The consumer protocol: the bytes members of a `consumer` group exchange
//! through the coordinator, which only stores and forwards them. A member
//! puts its subscription in JoinGroup's protocol metadata; the leader hands
//! each member its assignment in SyncGroup.
//!
//! Both are an i16 version followed by the message of that version
//! (`ConsumerProtocolSubscription` and `ConsumerProtocolAssignment`,
//! encoded and decoded by the `kafka-protocol` crate). As Kafka's Java
//! client does, a version above the highest known one is read as the
//! highest: later versions only append fields. Every array count is
//! checked against the bytes that carry it before the crate's decoders
//! reserve memory for it (see [`crate::shape`]), since a member's metadata
//! reaches the broker from any client.
//!
//! [`decode_subscription`] and [`decode_assignment`] read a whole message;
//! [`subscription_topics`] and [`assignment_partitions`] read only its
//! first field (what a coordinator or an admin tool shows), and so accept
//! a message whose later fields a client wrote wrongly or left out.

use std::collections::BTreeMap;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition as AssignedPartitions;
use kafka_protocol::messages::consumer_protocol_subscription::TopicPartition as OwnedPartitions;
use kafka_protocol::messages::{
    ConsumerProtocolAssignment, ConsumerProtocolSubscription, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, Message, StrBytes};

use crate::shape::{self, Field, Kind, ShapeError, Struct};

/// The protocol type of groups whose members speak this protocol.
pub const PROTOCOL_TYPE: &str = "consumer";
/// The highest subscription and assignment version this module knows.
pub const VERSION_MAX: i16 = ConsumerProtocolSubscription::VERSIONS.max;
const _: () = assert!(ConsumerProtocolAssignment::VERSIONS.max == VERSION_MAX);
/// Bytes of the version before each message.
const VERSION_BYTES: usize = 2;
/// A null `bytes` field (length -1).
const NULL_BYTES: [u8; 4] = (-1i32).to_be_bytes();

/// Topic → partition ids.
pub type TopicPartitions = BTreeMap<String, Vec<i32>>;

/// What a member subscribes to (JoinGroup protocol metadata).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    pub topics: Vec<String>,
    pub user_data: Option<Bytes>,
    /// The partitions the member holds now (v1+; cooperative rebalancing).
    pub owned_partitions: TopicPartitions,
    /// The generation the owned partitions are from (v2+; -1: none).
    pub generation_id: i32,
    /// The member's `client.rack` (v3+).
    pub rack_id: Option<String>,
}

impl Subscription {
    /// A subscription to `topics` with nothing else set.
    pub fn to_topics<S: Into<String>>(topics: impl IntoIterator<Item = S>) -> Self {
        Subscription {
            topics: topics.into_iter().map(Into::into).collect(),
            ..Subscription::default()
        }
    }
}

impl Default for Subscription {
    fn default() -> Self {
        Subscription {
            topics: Vec::new(),
            user_data: None,
            owned_partitions: TopicPartitions::new(),
            generation_id: -1,
            rack_id: None,
        }
    }
}

/// What the leader gives one member (SyncGroup assignment).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Assignment {
    pub partitions: TopicPartitions,
    pub user_data: Option<Bytes>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConsumerProtocolError {
    #[error("consumer protocol {what} of {length} bytes has no version")]
    NoVersion { what: &'static str, length: usize },
    #[error("consumer protocol {what} has the negative version {version}")]
    Version { what: &'static str, version: i16 },
    #[error("consumer protocol {what} v{version} does not fit its bytes: {source}")]
    Shape {
        what: &'static str,
        version: i16,
        #[source]
        source: ShapeError,
    },
    #[error("consumer protocol {what} v{version}: {message}")]
    Codec {
        what: &'static str,
        version: i16,
        message: String,
    },
}

const SUBSCRIPTION: &str = "subscription";
const ASSIGNMENT: &str = "assignment";

/// The wire shapes, field by field as the crate decodes them, for the
/// count checks. A struct that is never flexible has `i16::MAX` there.
static OWNED_PARTITIONS: Struct = Struct {
    versions: (0, VERSION_MAX),
    flexible_since: i16::MAX,
    fields: &[
        field(Kind::Str, 1),        // topic
        field(Kind::ArrayOf(4), 1), // partitions
    ],
    tags: &[],
};
static SUBSCRIPTION_SHAPE: Struct = Struct {
    versions: (0, VERSION_MAX),
    flexible_since: i16::MAX,
    fields: &[
        field(Kind::ArrayOfStr, 0),               // topics
        field(Kind::Bytes, 0),                    // user_data
        field(Kind::Array(&OWNED_PARTITIONS), 1), // owned_partitions
        field(Kind::Fixed(4), 2),                 // generation_id
        field(Kind::Str, 3),                      // rack_id
    ],
    tags: &[],
};
static SUBSCRIPTION_TOPICS_SHAPE: Struct = first_field(&[field(Kind::ArrayOfStr, 0)]);
static ASSIGNED_PARTITIONS: Struct = Struct {
    versions: (0, VERSION_MAX),
    flexible_since: i16::MAX,
    fields: &[
        field(Kind::Str, 0),        // topic
        field(Kind::ArrayOf(4), 0), // partitions
    ],
    tags: &[],
};
static ASSIGNMENT_SHAPE: Struct = Struct {
    versions: (0, VERSION_MAX),
    flexible_since: i16::MAX,
    fields: &[
        field(Kind::Array(&ASSIGNED_PARTITIONS), 0), // assigned_partitions
        field(Kind::Bytes, 0),                       // user_data
    ],
    tags: &[],
};
static ASSIGNMENT_PARTITIONS_SHAPE: Struct =
    first_field(&[field(Kind::Array(&ASSIGNED_PARTITIONS), 0)]);

/// A message read only up to its first field (the rest is not checked).
const fn first_field(fields: &'static [Field]) -> Struct {
    Struct {
        versions: (0, VERSION_MAX),
        flexible_since: i16::MAX,
        fields,
        tags: &[],
    }
}

const fn field(kind: Kind, since: i16) -> Field {
    Field {
        kind,
        since,
        until: VERSION_MAX,
    }
}

/// Encodes a subscription at `version` (0..=[`VERSION_MAX`]); fields the
/// version does not have are left out.
pub fn encode_subscription(
    subscription: &Subscription,
    version: i16,
) -> Result<Bytes, ConsumerProtocolError> {
    let message = ConsumerProtocolSubscription::default()
        .with_topics(subscription.topics.iter().map(|t| text(t)).collect())
        .with_user_data(subscription.user_data.clone())
        .with_owned_partitions(
            subscription
                .owned_partitions
                .iter()
                .map(|(topic, partitions)| {
                    OwnedPartitions::default()
                        .with_topic(topic_name(topic))
                        .with_partitions(partitions.clone())
                })
                .collect(),
        )
        .with_generation_id(subscription.generation_id)
        .with_rack_id(subscription.rack_id.as_deref().map(text));
    encode(SUBSCRIPTION, &message, version)
}

/// Decodes a whole subscription; returns the version it was written at.
pub fn decode_subscription(bytes: &[u8]) -> Result<(i16, Subscription), ConsumerProtocolError> {
    let (version, mut body, _) = checked(SUBSCRIPTION, &SUBSCRIPTION_SHAPE, bytes)?;
    let message = ConsumerProtocolSubscription::decode(&mut body, version)
        .map_err(|e| codec_error(SUBSCRIPTION, version, e))?;
    let mut owned_partitions = TopicPartitions::new();
    for owned in message.owned_partitions {
        owned_partitions
            .entry(owned.topic.0.to_string())
            .or_default()
            .extend(owned.partitions);
    }
    let subscription = Subscription {
        topics: message.topics.iter().map(ToString::to_string).collect(),
        user_data: message.user_data,
        owned_partitions,
        generation_id: message.generation_id,
        rack_id: message.rack_id.map(|r| r.to_string()),
    };
    Ok((version, subscription))
}

/// The topics of a subscription, its first field in every version; `None`
/// when they do not decode.
pub fn subscription_topics(bytes: &[u8]) -> Option<Vec<String>> {
    let mut v0 = first_field_as_v0(SUBSCRIPTION, &SUBSCRIPTION_TOPICS_SHAPE, bytes)?;
    let message = ConsumerProtocolSubscription::decode(&mut v0, 0).ok()?;
    Some(message.topics.iter().map(ToString::to_string).collect())
}

/// Encodes an assignment at `version` (0..=[`VERSION_MAX`]).
pub fn encode_assignment(
    assignment: &Assignment,
    version: i16,
) -> Result<Bytes, ConsumerProtocolError> {
    let message = ConsumerProtocolAssignment::default()
        .with_assigned_partitions(
            assignment
                .partitions
                .iter()
                .map(|(topic, partitions)| {
                    AssignedPartitions::default()
                        .with_topic(topic_name(topic))
                        .with_partitions(partitions.clone())
                })
                .collect(),
        )
        .with_user_data(assignment.user_data.clone());
    encode(ASSIGNMENT, &message, version)
}

/// Decodes a whole assignment; returns the version it was written at.
pub fn decode_assignment(bytes: &[u8]) -> Result<(i16, Assignment), ConsumerProtocolError> {
    let (version, mut body, _) = checked(ASSIGNMENT, &ASSIGNMENT_SHAPE, bytes)?;
    let message = ConsumerProtocolAssignment::decode(&mut body, version)
        .map_err(|e| codec_error(ASSIGNMENT, version, e))?;
    let assignment = Assignment {
        partitions: topic_partitions(message.assigned_partitions),
        user_data: message.user_data,
    };
    Ok((version, assignment))
}

/// The partitions of an assignment, its first field in every version;
/// `None` when they do not decode (an empty assignment, as a member that
/// has not synced yet shows, is `None`).
pub fn assignment_partitions(bytes: &[u8]) -> Option<TopicPartitions> {
    let mut v0 = first_field_as_v0(ASSIGNMENT, &ASSIGNMENT_PARTITIONS_SHAPE, bytes)?;
    let message = ConsumerProtocolAssignment::decode(&mut v0, 0).ok()?;
    Some(topic_partitions(message.assigned_partitions))
}

/// The first field of a message, which every version starts with and
/// lays out alike, followed by a null user data: a whole v0 message, for
/// the crate's decoder.
fn first_field_as_v0(what: &'static str, shape: &'static Struct, bytes: &[u8]) -> Option<Bytes> {
    let (_, body, field_bytes) = checked(what, shape, bytes).ok()?;
    let mut v0 = BytesMut::with_capacity(field_bytes + NULL_BYTES.len());
    v0.put_slice(&body[..field_bytes]);
    v0.put_slice(&NULL_BYTES);
    Some(v0.freeze())
}

fn topic_partitions(decoded: Vec<AssignedPartitions>) -> TopicPartitions {
    let mut partitions = TopicPartitions::new();
    for assigned in decoded {
        partitions
            .entry(assigned.topic.0.to_string())
            .or_default()
            .extend(assigned.partitions);
    }
    partitions
}

/// The version (capped at the highest known), the body after it and how
/// many bytes of it `shape` takes, once the body's counts are known to fit
/// its bytes.
fn checked<'a>(
    what: &'static str,
    shape: &'static Struct,
    bytes: &'a [u8],
) -> Result<(i16, &'a [u8], usize), ConsumerProtocolError> {
    let Some((version, body)) = bytes.split_first_chunk::<VERSION_BYTES>() else {
        return Err(ConsumerProtocolError::NoVersion {
            what,
            length: bytes.len(),
        });
    };
    let version = i16::from_be_bytes(*version);
    if version < 0 {
        return Err(ConsumerProtocolError::Version { what, version });
    }
    let version = version.min(VERSION_MAX);
    let shape_bytes = shape::check_struct(shape, version, body).map_err(|source| {
        ConsumerProtocolError::Shape {
            what,
            version,
            source,
        }
    })?;
    Ok((version, body, shape_bytes))
}

fn encode<M: Encodable>(
    what: &'static str,
    message: &M,
    version: i16,
) -> Result<Bytes, ConsumerProtocolError> {
    if !(0..=VERSION_MAX).contains(&version) {
        return Err(ConsumerProtocolError::Version { what, version });
    }
    let size = message
        .compute_size(version)
        .map_err(|e| codec_error(what, version, e))?;
    let mut out = BytesMut::with_capacity(VERSION_BYTES + size);
    out.put_i16(version);
    message
        .encode(&mut out, version)
        .map_err(|e| codec_error(what, version, e))?;
    Ok(out.freeze())
}

fn codec_error(what: &'static str, version: i16, error: anyhow::Error) -> ConsumerProtocolError {
    ConsumerProtocolError::Codec {
        what,
        version,
        message: error.to_string(),
    }
}

fn text(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_string())
}

fn topic_name(value: &str) -> TopicName {
    TopicName(text(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes written field by field as Kafka's schema lays them out (as the
    /// Java client and librdkafka write them), independent of the crate's
    /// encoder.
    #[derive(Default)]
    struct Wire(Vec<u8>);

    impl Wire {
        fn i16(mut self, value: i16) -> Self {
            self.0.extend_from_slice(&value.to_be_bytes());
            self
        }
        fn i32(mut self, value: i32) -> Self {
            self.0.extend_from_slice(&value.to_be_bytes());
            self
        }
        fn string(self, value: &str) -> Self {
            let mut this = self.i16(value.len() as i16);
            this.0.extend_from_slice(value.as_bytes());
            this
        }
        fn strings(self, values: &[&str]) -> Self {
            let mut this = self.i32(values.len() as i32);
            for value in values {
                this = this.string(value);
            }
            this
        }
        fn bytes(self, value: Option<&[u8]>) -> Self {
            match value {
                None => self.i32(-1),
                Some(value) => {
                    let mut this = self.i32(value.len() as i32);
                    this.0.extend_from_slice(value);
                    this
                }
            }
        }
        fn topic_partitions(self, values: &[(&str, &[i32])]) -> Self {
            let mut this = self.i32(values.len() as i32);
            for (topic, partitions) in values {
                this = this.string(topic).i32(partitions.len() as i32);
                for p in *partitions {
                    this = this.i32(*p);
                }
            }
            this
        }
    }

    fn owned(values: &[(&str, &[i32])]) -> TopicPartitions {
        values
            .iter()
            .map(|(t, ps)| (t.to_string(), ps.to_vec()))
            .collect()
    }

    /// One check per version: the bytes a client writes at that version,
    /// and the subscription they mean.
    fn check_subscription(bytes: &[u8], version: i16, expected: &Subscription) {
        let (decoded_version, decoded) = decode_subscription(bytes).unwrap();
        assert_eq!((decoded_version, &decoded), (version, expected));
        assert_eq!(subscription_topics(bytes).as_ref(), Some(&expected.topics));
        // Encoding it again gives the same bytes.
        assert_eq!(encode_subscription(expected, version).unwrap(), bytes);
    }

    #[test]
    fn subscriptions_decode_as_clients_write_them() {
        // v0: kafka-python (empty user data), older Java (null).
        let v0 = Wire::default()
            .i16(0)
            .strings(&["orders", "payments"])
            .bytes(Some(b""));
        check_subscription(
            &v0.0,
            0,
            &Subscription {
                user_data: Some(Bytes::new()),
                ..Subscription::to_topics(["orders", "payments"])
            },
        );
        // v1: owned partitions (cooperative-sticky), with user data.
        let v1 = Wire::default()
            .i16(1)
            .strings(&["orders"])
            .bytes(Some(b"\x00\x01sticky"))
            .topic_partitions(&[("orders", &[0, 2])]);
        check_subscription(
            &v1.0,
            1,
            &Subscription {
                user_data: Some(Bytes::from_static(b"\x00\x01sticky")),
                owned_partitions: owned(&[("orders", &[0, 2])]),
                ..Subscription::to_topics(["orders"])
            },
        );
        // v2: the generation the owned partitions are from.
        let v2 = Wire::default()
            .i16(2)
            .strings(&["orders"])
            .bytes(None)
            .topic_partitions(&[("orders", &[1])])
            .i32(7);
        check_subscription(
            &v2.0,
            2,
            &Subscription {
                owned_partitions: owned(&[("orders", &[1])]),
                generation_id: 7,
                ..Subscription::to_topics(["orders"])
            },
        );
        // v3: Java 3.x and librdkafka 2.x, with `client.rack`, and without.
        let v3 = Wire::default()
            .i16(3)
            .strings(&["a", "b"])
            .bytes(None)
            .topic_partitions(&[("a", &[0]), ("b", &[3, 4])])
            .i32(12)
            .string("rack-1");
        check_subscription(
            &v3.0,
            3,
            &Subscription {
                owned_partitions: owned(&[("a", &[0]), ("b", &[3, 4])]),
                generation_id: 12,
                rack_id: Some("rack-1".to_string()),
                ..Subscription::to_topics(["a", "b"])
            },
        );
        let v3_no_rack = Wire::default()
            .i16(3)
            .strings(&["a"])
            .bytes(None)
            .topic_partitions(&[])
            .i32(-1)
            .i16(-1);
        check_subscription(&v3_no_rack.0, 3, &Subscription::to_topics(["a"]));
    }

    #[test]
    fn a_later_version_reads_as_the_highest_known() {
        let v9 = Wire::default()
            .i16(9)
            .strings(&["t"])
            .bytes(None)
            .topic_partitions(&[])
            .i32(3)
            .string("r")
            .i32(0x0bad_cafe); // a field of a version we do not know
        let (version, decoded) = decode_subscription(&v9.0).unwrap();
        assert_eq!(version, VERSION_MAX);
        assert_eq!(decoded.topics, ["t"]);
        assert_eq!(decoded.rack_id.as_deref(), Some("r"));
    }

    #[test]
    fn topics_read_even_when_later_fields_are_wrong() {
        // v1 claimed, owned partitions left out: the whole message does
        // not decode, its topics still do.
        let v1 = Wire::default().i16(1).strings(&["ab", "c"]).bytes(None);
        assert!(decode_subscription(&v1.0).is_err());
        assert_eq!(
            subscription_topics(&v1.0),
            Some(vec!["ab".to_string(), "c".to_string()])
        );
        assert_eq!(subscription_topics(&v1.0[..5]), None);
        assert_eq!(subscription_topics(&[0]), None);
        assert_eq!(subscription_topics(&[0xff, 0xff, 0, 0, 0, 0]), None);
    }

    #[test]
    fn counts_beyond_the_bytes_are_refused_before_allocating() {
        // 2^31 - 1 topics claimed in six bytes.
        let huge = [0, 1, 0x7f, 0xff, 0xff, 0xff];
        assert_eq!(subscription_topics(&huge), None);
        assert!(matches!(
            decode_subscription(&huge),
            Err(ConsumerProtocolError::Shape { .. })
        ));
        assert_eq!(assignment_partitions(&huge), None);
        let huge_partitions = Wire::default().i16(0).i32(1).string("t").i32(i32::MAX);
        assert_eq!(assignment_partitions(&huge_partitions.0), None);
        assert!(decode_assignment(&huge_partitions.0).is_err());
    }

    #[test]
    fn assignments_decode_as_clients_write_them() {
        for version in 0..=VERSION_MAX {
            let bytes = Wire::default()
                .i16(version)
                .topic_partitions(&[("t", &[0, 1, 2]), ("u", &[5])])
                .bytes(Some(b"data"));
            let expected = Assignment {
                partitions: owned(&[("t", &[0, 1, 2]), ("u", &[5])]),
                user_data: Some(Bytes::from_static(b"data")),
            };
            assert_eq!(
                decode_assignment(&bytes.0).unwrap(),
                (version, expected.clone())
            );
            assert_eq!(
                assignment_partitions(&bytes.0),
                Some(expected.partitions.clone())
            );
            assert_eq!(encode_assignment(&expected, version).unwrap(), bytes.0);
        }
        // Partitions read without the user data; cut inside them, not.
        let bytes = Wire::default().i16(0).topic_partitions(&[("t", &[0, 1])]);
        assert_eq!(
            assignment_partitions(&bytes.0),
            Some(owned(&[("t", &[0, 1])]))
        );
        assert!(decode_assignment(&bytes.0).is_err());
        assert_eq!(assignment_partitions(&bytes.0[..bytes.0.len() - 2]), None);
        // A member not yet synced has an empty assignment.
        assert_eq!(assignment_partitions(&[]), None);
    }

    #[test]
    fn round_trips_at_every_version() {
        let subscription = Subscription {
            topics: vec!["x".to_string(), "y".to_string()],
            user_data: Some(Bytes::from_static(b"u")),
            owned_partitions: owned(&[("x", &[4, 1])]),
            generation_id: 9,
            rack_id: Some("r2".to_string()),
        };
        for version in 0..=VERSION_MAX {
            let bytes = encode_subscription(&subscription, version).unwrap();
            let (read_version, read) = decode_subscription(&bytes).unwrap();
            assert_eq!(read_version, version);
            // What the version does not carry comes back as the default.
            let expected = Subscription {
                owned_partitions: if version >= 1 {
                    subscription.owned_partitions.clone()
                } else {
                    TopicPartitions::new()
                },
                generation_id: if version >= 2 { 9 } else { -1 },
                rack_id: (version >= 3).then(|| "r2".to_string()),
                ..subscription.clone()
            };
            assert_eq!(read, expected, "v{version}");
        }
        let assignment = Assignment {
            partitions: owned(&[("x", &[0]), ("y", &[1, 2])]),
            user_data: None,
        };
        let bytes = encode_assignment(&assignment, 0).unwrap();
        assert_eq!(decode_assignment(&bytes).unwrap(), (0, assignment));
        assert!(encode_assignment(&Assignment::default(), VERSION_MAX + 1).is_err());
    }
}
