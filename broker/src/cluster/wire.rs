//! The controller listener's frames: what voters send each other (Raft
//! messages) and what brokers send the controllers (heartbeats that also
//! register, metadata fetches). Kafka's KRaft carries these in its own
//! RPCs (Vote, Fetch, BrokerHeartbeat); Strom's quorum is raft-rs, whose
//! messages are protobuf, so the controller listener speaks this small
//! framed protocol instead. Client listeners speak only Kafka.
//!
//! Frame: `len u32 | crc32 u32 (crc32fast of the payload) | payload`,
//! payload `kind u8 | cluster id | body`. Every length is checked against
//! the bytes left before anything is allocated; a frame above
//! [`FRAME_BYTES_MAX`] closes the connection.

use protobuf::Message as _;
use replication::Message;

use crate::metadata::{BrokerMeta, MetadataRecord};

/// Largest frame: a metadata snapshot or a batch of entries.
pub const FRAME_BYTES_MAX: usize = 64 << 20;

const KIND_RAFT: u8 = 1;
const KIND_HEARTBEAT: u8 = 2;
const KIND_HEARTBEAT_REPLY: u8 = 3;
const KIND_FETCH: u8 = 4;
const KIND_FETCH_REPLY: u8 = 5;
const KIND_ALTER_PARTITION: u8 = 6;
const KIND_ALTER_PARTITION_REPLY: u8 = 7;
const KIND_VOTER_PROBE: u8 = 8;
const KIND_VOTER_PROBE_REPLY: u8 = 9;
const KIND_AUTHENTICATE: u8 = 10;
const KIND_AUTHENTICATE_REPLY: u8 = 11;

/// A voter's answer to another whose Raft log is empty (see
/// `cluster::membership`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoterProbeReply {
    /// The quorum has committed entries, as this voter knows.
    pub formed: bool,
    /// The asking node is a voter or learner of this voter's configuration.
    pub member: bool,
    /// The directory this voter knows the asking node by ("" none).
    pub known: String,
    /// Every directory this voter knows, its own included: what a voter
    /// back with a new disk learns the others by.
    pub directories: Vec<(i32, String)>,
}

/// A heartbeat's start-up flags ([`Startup`]).
const STARTUP_KNOWN: u8 = 1;
const STARTUP_CLEAN: u8 = 2;
const STARTUP_NEW_DIRECTORY: u8 = 4;
/// The heartbeat's broker has a data dir that refuses writes.
const STORAGE_FULL: u8 = 8;

pub use replication::placement::AlterPartition;

/// A broker's heartbeat to the active controller; the first one of an
/// incarnation registers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heartbeat {
    pub broker: BrokerMeta,
    /// The last metadata offset the broker applied.
    pub applied: u64,
    /// The broker is stopping (SIGTERM): fence it and move its
    /// leaderships away now (controlled shutdown).
    pub shutting_down: bool,
    /// How this incarnation's process found its data dir at start: what
    /// the controller needs to know whether the broker may have lost
    /// records it acknowledged in an earlier incarnation.
    pub startup: Startup,
    /// The broker's data dir refuses writes for want of space: take it
    /// out of the ISRs and move its leaderships until it says otherwise.
    pub storage_full: bool,
}

/// How a broker's process found its data dir when it started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Startup {
    /// The previous process stopped cleanly: its logs were closed with
    /// everything durable.
    pub clean: bool,
    /// The data dir was new (no `meta.properties`): whatever an earlier
    /// incarnation of this node id held is gone (a replaced or emptied
    /// disk).
    pub new_directory: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeartbeatStatus {
    /// Heard; `fenced` says whether the broker is fenced in the metadata.
    Accepted { fenced: bool },
    /// This voter is not the active controller (`leader` may name it).
    NotController,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatReply {
    pub status: HeartbeatStatus,
    /// The active controller as this voter knows it (-1: none).
    pub leader: i32,
    /// The metadata offset this voter has applied.
    pub applied: u64,
}

/// What a broker without a copy of the Raft log asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchReply {
    /// Committed entries after the asked offset, in order, and where the
    /// answering voter stood when it answered.
    Entries {
        /// (index, records) of each entry.
        entries: Vec<(u64, Vec<MetadataRecord>)>,
        /// The offset the voter had applied: a broker is caught up once it
        /// has applied this much.
        applied: u64,
        /// When the voter applied `applied`, in microseconds since the Unix
        /// epoch on its clock (0: unknown); the broker measures how long a
        /// change took to reach it from this.
        applied_at_us: u64,
    },
    /// The asked offset is behind the voter's snapshot: the image at `index`.
    Snapshot { index: u64, image: Vec<u8> },
}

/// One frame of the controller listener.
#[derive(Debug, Clone)]
pub enum Frame {
    Raft(Box<Message>),
    Heartbeat(Heartbeat),
    HeartbeatReply(HeartbeatReply),
    /// Committed entries after `after`. The voter holds the request up to
    /// `wait_ms` while it has applied nothing newer (a long poll: the
    /// answer goes out as soon as something newer is applied).
    Fetch {
        after: u64,
        wait_ms: u32,
    },
    FetchReply(FetchReply),
    AlterPartition(AlterPartition),
    /// A Kafka error code: NONE once the change is committed.
    AlterPartitionReply {
        error_code: i16,
    },
    /// A voter whose Raft log is empty asks whether it may take part.
    VoterProbe {
        node_id: i32,
        directory: String,
    },
    VoterProbeReply(VoterProbeReply),
    /// The first frame on a SASL controller listener: the mechanism
    /// (PLAIN) and its client message.
    Authenticate {
        mechanism: String,
        auth: Vec<u8>,
    },
    /// Why the authentication failed; empty: authenticated.
    AuthenticateReply {
        error: String,
    },
}

/// A frame and the cluster id its sender knows ("" before it knows one).
#[derive(Debug, Clone)]
pub struct Envelope {
    pub cluster_id: String,
    pub frame: Frame,
}

pub fn encode_records(records: &[MetadataRecord]) -> Vec<u8> {
    let mut out = Vec::new();
    put_u32(&mut out, records.len() as u32);
    for record in records {
        put_bytes(&mut out, &record.encode());
    }
    out
}

pub fn decode_records(mut buf: &[u8]) -> Result<Vec<MetadataRecord>, String> {
    let count = take_u32(&mut buf)? as usize;
    if count > buf.len() / 4 {
        return Err(format!("{count} records in {} bytes", buf.len()));
    }
    let mut records = Vec::with_capacity(count);
    for _ in 0..count {
        records.push(MetadataRecord::decode(take_bytes(&mut buf)?)?);
    }
    if !buf.is_empty() {
        return Err(format!("{} trailing bytes after the records", buf.len()));
    }
    Ok(records)
}

impl Envelope {
    pub fn encode(&self) -> Vec<u8> {
        let mut payload = Vec::new();
        let kind = match &self.frame {
            Frame::Raft(_) => KIND_RAFT,
            Frame::Heartbeat(_) => KIND_HEARTBEAT,
            Frame::HeartbeatReply(_) => KIND_HEARTBEAT_REPLY,
            Frame::Fetch { .. } => KIND_FETCH,
            Frame::FetchReply(_) => KIND_FETCH_REPLY,
            Frame::AlterPartition(_) => KIND_ALTER_PARTITION,
            Frame::AlterPartitionReply { .. } => KIND_ALTER_PARTITION_REPLY,
            Frame::VoterProbe { .. } => KIND_VOTER_PROBE,
            Frame::VoterProbeReply(_) => KIND_VOTER_PROBE_REPLY,
            Frame::Authenticate { .. } => KIND_AUTHENTICATE,
            Frame::AuthenticateReply { .. } => KIND_AUTHENTICATE_REPLY,
        };
        payload.push(kind);
        put_bytes(&mut payload, self.cluster_id.as_bytes());
        match &self.frame {
            Frame::Raft(message) => {
                let bytes = message
                    .write_to_bytes()
                    .expect("a raft message always encodes");
                put_bytes(&mut payload, &bytes);
            }
            Frame::Heartbeat(heartbeat) => {
                put_bytes(
                    &mut payload,
                    &MetadataRecord::BrokerRegistered(heartbeat.broker.clone()).encode(),
                );
                payload.extend_from_slice(&heartbeat.applied.to_be_bytes());
                payload.push(u8::from(heartbeat.shutting_down));
                payload.push(
                    STARTUP_KNOWN
                        | if heartbeat.startup.clean {
                            STARTUP_CLEAN
                        } else {
                            0
                        }
                        | if heartbeat.startup.new_directory {
                            STARTUP_NEW_DIRECTORY
                        } else {
                            0
                        }
                        | if heartbeat.storage_full {
                            STORAGE_FULL
                        } else {
                            0
                        },
                );
            }
            Frame::HeartbeatReply(reply) => {
                let status = match reply.status {
                    HeartbeatStatus::Accepted { fenced: false } => 0u8,
                    HeartbeatStatus::Accepted { fenced: true } => 1,
                    HeartbeatStatus::NotController => 2,
                };
                payload.push(status);
                payload.extend_from_slice(&reply.leader.to_be_bytes());
                payload.extend_from_slice(&reply.applied.to_be_bytes());
            }
            Frame::Fetch { after, wait_ms } => {
                payload.extend_from_slice(&after.to_be_bytes());
                payload.extend_from_slice(&wait_ms.to_be_bytes());
            }
            Frame::FetchReply(FetchReply::Entries {
                entries,
                applied,
                applied_at_us,
            }) => {
                payload.push(0);
                put_u32(&mut payload, entries.len() as u32);
                for (index, records) in entries {
                    payload.extend_from_slice(&index.to_be_bytes());
                    put_bytes(&mut payload, &encode_records(records));
                }
                payload.extend_from_slice(&applied.to_be_bytes());
                payload.extend_from_slice(&applied_at_us.to_be_bytes());
            }
            Frame::FetchReply(FetchReply::Snapshot { index, image }) => {
                payload.push(1);
                payload.extend_from_slice(&index.to_be_bytes());
                put_bytes(&mut payload, image);
            }
            Frame::AlterPartition(alter) => {
                put_bytes(&mut payload, alter.topic.as_bytes());
                for value in [
                    alter.partition,
                    alter.leader,
                    alter.leader_epoch,
                    alter.partition_epoch,
                ] {
                    payload.extend_from_slice(&value.to_be_bytes());
                }
                put_u32(&mut payload, alter.isr.len() as u32);
                for id in &alter.isr {
                    payload.extend_from_slice(&id.to_be_bytes());
                }
            }
            Frame::AlterPartitionReply { error_code } => {
                payload.extend_from_slice(&error_code.to_be_bytes());
            }
            Frame::VoterProbe { node_id, directory } => {
                payload.extend_from_slice(&node_id.to_be_bytes());
                put_bytes(&mut payload, directory.as_bytes());
            }
            Frame::VoterProbeReply(reply) => {
                payload.push(u8::from(reply.formed) | (u8::from(reply.member) << 1));
                put_bytes(&mut payload, reply.known.as_bytes());
                put_u32(&mut payload, reply.directories.len() as u32);
                for (node, directory) in &reply.directories {
                    payload.extend_from_slice(&node.to_be_bytes());
                    put_bytes(&mut payload, directory.as_bytes());
                }
            }
            Frame::Authenticate { mechanism, auth } => {
                put_bytes(&mut payload, mechanism.as_bytes());
                put_bytes(&mut payload, auth);
            }
            Frame::AuthenticateReply { error } => {
                put_bytes(&mut payload, error.as_bytes());
            }
        }
        let mut out = Vec::with_capacity(payload.len() + 8);
        put_u32(&mut out, payload.len() as u32);
        put_u32(&mut out, crc32fast::hash(&payload));
        out.extend_from_slice(&payload);
        out
    }

    pub fn decode(payload: &[u8]) -> Result<Envelope, String> {
        let mut buf = payload;
        let kind = take::<1>(&mut buf)?[0];
        let cluster_id = String::from_utf8(take_bytes(&mut buf)?.to_vec())
            .map_err(|_| "the cluster id is not UTF-8".to_string())?;
        let frame = match kind {
            KIND_RAFT => {
                let message = Message::parse_from_bytes(take_bytes(&mut buf)?)
                    .map_err(|e| format!("raft message: {e}"))?;
                Frame::Raft(Box::new(message))
            }
            KIND_HEARTBEAT => {
                let MetadataRecord::BrokerRegistered(broker) =
                    MetadataRecord::decode(take_bytes(&mut buf)?)?
                else {
                    return Err("a heartbeat without its broker".to_string());
                };
                let applied = u64::from_be_bytes(take::<8>(&mut buf)?);
                let shutting_down = take::<1>(&mut buf)?[0] != 0;
                let flags = take::<1>(&mut buf)?[0];
                if flags & !(STARTUP_KNOWN | STARTUP_CLEAN | STARTUP_NEW_DIRECTORY | STORAGE_FULL)
                    != 0
                    || flags & STARTUP_KNOWN == 0
                {
                    return Err(format!("heartbeat start-up flags {flags:#04x}"));
                }
                let startup = Startup {
                    clean: flags & STARTUP_CLEAN != 0,
                    new_directory: flags & STARTUP_NEW_DIRECTORY != 0,
                };
                Frame::Heartbeat(Heartbeat {
                    broker,
                    applied,
                    shutting_down,
                    startup,
                    storage_full: flags & STORAGE_FULL != 0,
                })
            }
            KIND_HEARTBEAT_REPLY => {
                let status = match take::<1>(&mut buf)?[0] {
                    0 => HeartbeatStatus::Accepted { fenced: false },
                    1 => HeartbeatStatus::Accepted { fenced: true },
                    2 => HeartbeatStatus::NotController,
                    other => return Err(format!("heartbeat status {other}")),
                };
                Frame::HeartbeatReply(HeartbeatReply {
                    status,
                    leader: i32::from_be_bytes(take::<4>(&mut buf)?),
                    applied: u64::from_be_bytes(take::<8>(&mut buf)?),
                })
            }
            KIND_FETCH => {
                let after = u64::from_be_bytes(take::<8>(&mut buf)?);
                // A broker of an earlier release sends no wait: answered at once.
                let wait_ms = if buf.is_empty() {
                    0
                } else {
                    u32::from_be_bytes(take::<4>(&mut buf)?)
                };
                Frame::Fetch { after, wait_ms }
            }
            KIND_FETCH_REPLY => match take::<1>(&mut buf)?[0] {
                0 => {
                    let count = take_u32(&mut buf)? as usize;
                    if count > buf.len() / 12 {
                        return Err(format!("{count} entries in {} bytes", buf.len()));
                    }
                    let mut entries = Vec::with_capacity(count);
                    for _ in 0..count {
                        let index = u64::from_be_bytes(take::<8>(&mut buf)?);
                        entries.push((index, decode_records(take_bytes(&mut buf)?)?));
                    }
                    // A voter of an earlier release sends neither: its last
                    // entry is all it had, its time unknown.
                    let (applied, applied_at_us) = if buf.is_empty() {
                        (entries.last().map_or(0, |(index, _)| *index), 0)
                    } else {
                        (
                            u64::from_be_bytes(take::<8>(&mut buf)?),
                            u64::from_be_bytes(take::<8>(&mut buf)?),
                        )
                    };
                    Frame::FetchReply(FetchReply::Entries {
                        entries,
                        applied,
                        applied_at_us,
                    })
                }
                1 => Frame::FetchReply(FetchReply::Snapshot {
                    index: u64::from_be_bytes(take::<8>(&mut buf)?),
                    image: take_bytes(&mut buf)?.to_vec(),
                }),
                other => return Err(format!("fetch reply kind {other}")),
            },
            KIND_ALTER_PARTITION => {
                let topic = String::from_utf8(take_bytes(&mut buf)?.to_vec())
                    .map_err(|_| "the topic name is not UTF-8".to_string())?;
                let mut ints = [0i32; 4];
                for value in &mut ints {
                    *value = i32::from_be_bytes(take::<4>(&mut buf)?);
                }
                let count = take_u32(&mut buf)? as usize;
                if count > buf.len() / 4 {
                    return Err(format!("{count} ISR members in {} bytes", buf.len()));
                }
                let isr = (0..count)
                    .map(|_| take::<4>(&mut buf).map(i32::from_be_bytes))
                    .collect::<Result<_, _>>()?;
                Frame::AlterPartition(AlterPartition {
                    topic,
                    partition: ints[0],
                    leader: ints[1],
                    leader_epoch: ints[2],
                    partition_epoch: ints[3],
                    isr,
                })
            }
            KIND_ALTER_PARTITION_REPLY => Frame::AlterPartitionReply {
                error_code: i16::from_be_bytes(take::<2>(&mut buf)?),
            },
            KIND_VOTER_PROBE => Frame::VoterProbe {
                node_id: i32::from_be_bytes(take::<4>(&mut buf)?),
                directory: String::from_utf8(take_bytes(&mut buf)?.to_vec())
                    .map_err(|_| "the directory id is not UTF-8".to_string())?,
            },
            KIND_VOTER_PROBE_REPLY => {
                let flags = take::<1>(&mut buf)?[0];
                if flags & !3 != 0 {
                    return Err(format!("voter probe reply flags {flags:#04x}"));
                }
                let known = String::from_utf8(take_bytes(&mut buf)?.to_vec())
                    .map_err(|_| "the directory id is not UTF-8".to_string())?;
                let count = take_u32(&mut buf)? as usize;
                if count > buf.len() / 8 {
                    return Err(format!("{count} directories in {} bytes", buf.len()));
                }
                let mut directories = Vec::with_capacity(count);
                for _ in 0..count {
                    let node = i32::from_be_bytes(take::<4>(&mut buf)?);
                    let directory = String::from_utf8(take_bytes(&mut buf)?.to_vec())
                        .map_err(|_| "a directory id is not UTF-8".to_string())?;
                    directories.push((node, directory));
                }
                Frame::VoterProbeReply(VoterProbeReply {
                    formed: flags & 1 != 0,
                    member: flags & 2 != 0,
                    known,
                    directories,
                })
            }
            KIND_AUTHENTICATE => Frame::Authenticate {
                mechanism: String::from_utf8(take_bytes(&mut buf)?.to_vec())
                    .map_err(|_| "the mechanism is not UTF-8".to_string())?,
                auth: take_bytes(&mut buf)?.to_vec(),
            },
            KIND_AUTHENTICATE_REPLY => Frame::AuthenticateReply {
                error: String::from_utf8(take_bytes(&mut buf)?.to_vec())
                    .map_err(|_| "the error is not UTF-8".to_string())?,
            },
            other => return Err(format!("unknown frame kind {other}")),
        };
        if !buf.is_empty() {
            return Err(format!("{} trailing bytes", buf.len()));
        }
        Ok(Envelope { cluster_id, frame })
    }
}

/// Bytes before a frame's payload: its length and its CRC.
pub const FRAME_HEAD_BYTES: usize = 8;

/// The payload length and CRC a frame's head announces; a length above
/// [`FRAME_BYTES_MAX`] is refused before anything is allocated.
pub fn frame_head(head: &[u8; FRAME_HEAD_BYTES]) -> std::io::Result<(usize, u32)> {
    let len = u32::from_be_bytes(head[..4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_be_bytes(head[4..].try_into().expect("4 bytes"));
    if len > FRAME_BYTES_MAX {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("frame of {len} bytes is above the {FRAME_BYTES_MAX}-byte limit"),
        ));
    }
    Ok((len, crc))
}

/// The envelope in a frame's `payload`, checked against its head's `crc`.
pub fn frame_payload(payload: &[u8], crc: u32) -> std::io::Result<Envelope> {
    let invalid = |reason: String| std::io::Error::new(std::io::ErrorKind::InvalidData, reason);
    if crc32fast::hash(payload) != crc {
        return Err(invalid("frame CRC mismatch".to_string()));
    }
    Envelope::decode(payload).map_err(invalid)
}

/// Reads one frame; `Ok(None)` at a clean end of stream.
#[cfg(test)]
pub fn read_frame(stream: &mut impl std::io::Read) -> std::io::Result<Option<Envelope>> {
    let mut head = [0u8; FRAME_HEAD_BYTES];
    match stream.read_exact(&mut head[..1]) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    stream.read_exact(&mut head[1..])?;
    let (len, crc) = frame_head(&head)?;
    let mut payload = vec![0u8; len];
    stream.read_exact(&mut payload)?;
    frame_payload(&payload, crc).map(Some)
}

fn put_u32(out: &mut Vec<u8>, value: u32) {
    out.extend_from_slice(&value.to_be_bytes());
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_u32(out, bytes.len() as u32);
    out.extend_from_slice(bytes);
}

fn take<const N: usize>(buf: &mut &[u8]) -> Result<[u8; N], String> {
    if buf.len() < N {
        return Err("truncated field".to_string());
    }
    let (head, rest) = buf.split_at(N);
    *buf = rest;
    Ok(head.try_into().expect("N bytes"))
}

fn take_u32(buf: &mut &[u8]) -> Result<u32, String> {
    Ok(u32::from_be_bytes(take::<4>(buf)?))
}

fn take_bytes<'a>(buf: &mut &'a [u8]) -> Result<&'a [u8], String> {
    let len = take_u32(buf)? as usize;
    if len > buf.len() {
        return Err(format!("length {len} beyond the {} bytes left", buf.len()));
    }
    let (head, rest) = buf.split_at(len);
    *buf = rest;
    Ok(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broker() -> BrokerMeta {
        BrokerMeta {
            id: 2,
            incarnation: 9,
            host: "127.0.0.1".to_string(),
            port: 19092,
            rack: Some("a".to_string()),
            controller_address: "127.0.0.1:19093".to_string(),
            fenced: false,
            endpoints: Vec::new(),
        }
    }

    fn round_trip(frame: Frame) {
        let envelope = Envelope {
            cluster_id: "c1".to_string(),
            frame,
        };
        let bytes = envelope.encode();
        let decoded = read_frame(&mut &bytes[..]).unwrap().unwrap();
        assert_eq!(format!("{decoded:?}"), format!("{envelope:?}"));
        // Every cut and every flipped byte is an error, never a panic.
        for cut in 0..bytes.len() {
            let got = read_frame(&mut &bytes[..cut]);
            assert!(
                cut == 0 && matches!(got, Ok(None)) || got.is_err(),
                "cut {cut}"
            );
        }
        for at in 0..bytes.len() {
            let mut flipped = bytes.clone();
            flipped[at] ^= 0x20;
            assert!(read_frame(&mut &flipped[..]).is_err(), "flip at {at}");
        }
    }

    #[test]
    fn frames_round_trip_and_damage_is_refused() {
        let message = Message {
            from: 1,
            to: 3,
            term: 7,
            ..Default::default()
        };
        round_trip(Frame::Raft(Box::new(message)));
        round_trip(Frame::Heartbeat(Heartbeat {
            broker: broker(),
            applied: 42,
            shutting_down: true,
            startup: Startup {
                clean: false,
                new_directory: true,
            },
            storage_full: true,
        }));
        for status in [
            HeartbeatStatus::Accepted { fenced: false },
            HeartbeatStatus::Accepted { fenced: true },
            HeartbeatStatus::NotController,
        ] {
            round_trip(Frame::HeartbeatReply(HeartbeatReply {
                status,
                leader: 3,
                applied: 5,
            }));
        }
        round_trip(Frame::Fetch {
            after: 17,
            wait_ms: 500,
        });
        round_trip(Frame::Authenticate {
            mechanism: "PLAIN".to_string(),
            auth: b"\0broker\0secret".to_vec(),
        });
        round_trip(Frame::AuthenticateReply {
            error: "unknown user".to_string(),
        });
        round_trip(Frame::VoterProbe {
            node_id: 3,
            directory: "q1Sh-9_ISia_zwGINzRvyQ".to_string(),
        });
        round_trip(Frame::VoterProbeReply(VoterProbeReply {
            formed: true,
            member: false,
            known: "q1Sh-9_ISia_zwGINzRvyQ".to_string(),
            directories: vec![(1, "a".to_string()), (2, "b".to_string())],
        }));
        round_trip(Frame::FetchReply(FetchReply::Entries {
            entries: vec![
                (18, vec![MetadataRecord::ClusterId("x".to_string())]),
                (19, vec![MetadataRecord::BrokerRegistered(broker())]),
            ],
            applied: 19,
            applied_at_us: 1_700_000_000_000_000,
        }));
        round_trip(Frame::FetchReply(FetchReply::Snapshot {
            index: 30,
            image: vec![1, 2, 3],
        }));
        round_trip(Frame::AlterPartition(AlterPartition {
            topic: "t".to_string(),
            partition: 3,
            leader: 2,
            leader_epoch: 4,
            partition_epoch: 9,
            isr: vec![2, 3],
        }));
        round_trip(Frame::AlterPartitionReply { error_code: 6 });
    }

    /// Frames of a release before long polls (a fetch without its wait,
    /// entries without the voter's applied offset) still decode.
    #[test]
    fn fetch_frames_without_their_later_fields_decode() {
        let decode = |payload: Vec<u8>| Envelope::decode(&payload).unwrap().frame;
        let mut fetch = vec![KIND_FETCH];
        put_bytes(&mut fetch, b"c1");
        fetch.extend_from_slice(&17u64.to_be_bytes());
        assert!(matches!(
            decode(fetch),
            Frame::Fetch {
                after: 17,
                wait_ms: 0
            }
        ));
        let mut reply = vec![KIND_FETCH_REPLY];
        put_bytes(&mut reply, b"c1");
        reply.push(0);
        put_u32(&mut reply, 1);
        reply.extend_from_slice(&18u64.to_be_bytes());
        put_bytes(&mut reply, &encode_records(&[]));
        let Frame::FetchReply(FetchReply::Entries {
            entries,
            applied,
            applied_at_us,
        }) = decode(reply)
        else {
            panic!("not entries");
        };
        assert_eq!((entries.len(), applied, applied_at_us), (1, 18, 0));
    }

    #[test]
    fn an_oversized_length_is_refused_before_allocating() {
        let mut bytes = Vec::new();
        put_u32(&mut bytes, u32::MAX);
        put_u32(&mut bytes, 0);
        assert!(read_frame(&mut &bytes[..]).is_err());
    }
}
