//! `strom group list | describe GROUP | reset-offsets GROUP | delete GROUP`
//! and `GroupMember`, the consumer-group member behind
//! `strom consume TOPIC --group G`. Everything goes through
//! `protocol::client`, so the tools work against any Kafka broker: the
//! group's coordinator is found with FindCoordinator, members speak the
//! classic consumer protocol with the `range` assignor.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use anyhow::{bail, Context};
use bytes::{BufMut, Bytes, BytesMut};
use clap::{Args, Subcommand};
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    ApiKey, DeleteGroupsRequest, DescribeGroupsRequest, FindCoordinatorRequest, GroupId,
    HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, ListGroupsRequest, OffsetCommitRequest,
    OffsetFetchRequest, SyncGroupRequest,
};
use kafka_protocol::protocol::StrBytes;
use protocol::client::{check_error, error_name, Connection};

use super::{list_offsets, partitions, topic_name, ConnectArgs};
use broker::group::coordinator::consumer_subscription_topics;

const FIND_COORDINATOR_VERSIONS: std::ops::RangeInclusive<i16> = 1..=3;
const LIST_GROUPS_VERSIONS: std::ops::RangeInclusive<i16> = 0..=4;
const DESCRIBE_GROUPS_VERSIONS: std::ops::RangeInclusive<i16> = 0..=5;
const DELETE_GROUPS_VERSIONS: std::ops::RangeInclusive<i16> = 0..=2;
const OFFSET_FETCH_VERSIONS: std::ops::RangeInclusive<i16> = 1..=7;
const OFFSET_COMMIT_VERSIONS: std::ops::RangeInclusive<i16> = 2..=8;
const JOIN_GROUP_VERSIONS: std::ops::RangeInclusive<i16> = 0..=7;
const SYNC_GROUP_VERSIONS: std::ops::RangeInclusive<i16> = 0..=5;
const HEARTBEAT_VERSIONS: std::ops::RangeInclusive<i16> = 0..=4;
const LEAVE_GROUP_VERSIONS: std::ops::RangeInclusive<i16> = 0..=4;

const EARLIEST: i64 = -2;
const LATEST: i64 = -1;
const MEMBER_ID_REQUIRED: i16 = 79;
const REBALANCE_IN_PROGRESS: i16 = 27;
const ILLEGAL_GENERATION: i16 = 22;
const UNKNOWN_MEMBER_ID: i16 = 25;
const NON_EMPTY_GROUP: i16 = 68;
const GROUP_ID_NOT_FOUND: i16 = 69;

/// `strom consume --group` member settings.
const SESSION_TIMEOUT_MS: i32 = 10_000;
const REBALANCE_TIMEOUT_MS: i32 = 20_000;
const HEARTBEAT_INTERVAL_MS: u64 = 1_000;
/// JoinGroup retries (MEMBER_ID_REQUIRED, a rebalance racing the join).
const JOIN_ATTEMPTS_MAX: usize = 10;
const ASSIGNOR: &str = "range";

#[derive(Args, Debug)]
pub struct GroupArgs {
    #[command(subcommand)]
    command: GroupCommand,
}

#[derive(Subcommand, Debug)]
enum GroupCommand {
    /// List groups: name, state and protocol type, one per line.
    List {
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// State, members (host as Kafka shows it, /ADDRESS) and their
    /// assignments, and per partition the committed offset, log end offset
    /// and lag; an unknown group is an error.
    Describe {
        group: String,
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// Show, and with --execute commit, new offsets for a group (a dry run
    /// without --execute, as Kafka's tool; --execute is refused while the
    /// group has members).
    ResetOffsets(ResetArgs),
    /// Delete a group and its committed offsets (refused while it has members).
    Delete {
        group: String,
        #[command(flatten)]
        connect: ConnectArgs,
    },
}

#[derive(Args, Debug)]
struct ResetArgs {
    group: String,
    /// Topic whose offsets are reset, every partition (repeatable).
    #[arg(long, value_name = "TOPIC", required_unless_present = "all_topics")]
    topic: Vec<String>,
    /// Every topic the group has committed offsets for.
    #[arg(long, conflicts_with = "topic")]
    all_topics: bool,
    #[command(flatten)]
    target: ResetTarget,
    /// Only show the new offsets; change nothing (the default).
    #[arg(long, conflicts_with = "execute")]
    dry_run: bool,
    /// Commit the new offsets (without it nothing changes).
    #[arg(long)]
    execute: bool,
    #[command(flatten)]
    connect: ConnectArgs,
}

#[derive(Args, Debug)]
#[group(required = true, multiple = false)]
struct ResetTarget {
    /// The first offset still stored.
    #[arg(long)]
    to_earliest: bool,
    /// The end of each partition.
    #[arg(long)]
    to_latest: bool,
    /// This offset (kept within each partition's earliest and latest).
    #[arg(long, value_name = "N")]
    to_offset: Option<i64>,
    /// The committed offset moved by N (negative: back), kept within each
    /// partition's earliest and latest.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    shift_by: Option<i64>,
    /// The first offset with a timestamp at or after TS (ListOffsets by
    /// timestamp; none that late: the end): milliseconds since the epoch or
    /// ISO-8601 YYYY-MM-DDTHH:MM:SS[.mmm] with an optional zone: Z, ±HH:MM,
    /// ±HHMM or ±HH (none: UTC).
    #[arg(long, value_name = "TS")]
    to_datetime: Option<String>,
}

pub async fn run(args: GroupArgs) -> anyhow::Result<()> {
    match args.command {
        GroupCommand::List { connect } => list(&connect).await,
        GroupCommand::Describe { group, connect } => describe(&connect, &group).await,
        GroupCommand::ResetOffsets(args) => reset_offsets(args).await,
        GroupCommand::Delete { group, connect } => delete(&connect, &group).await,
    }
}

fn text(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_string())
}

fn group_id(value: &str) -> GroupId {
    GroupId(text(value))
}

/// A connection to the group's coordinator (FindCoordinator first).
async fn coordinator(connect: &ConnectArgs, group: &str) -> anyhow::Result<Connection> {
    let mut bootstrap = connect.connect().await?;
    let version = bootstrap.version::<FindCoordinatorRequest>(FIND_COORDINATOR_VERSIONS)?;
    let found = bootstrap
        .call(
            &FindCoordinatorRequest::default()
                .with_key(text(group))
                .with_key_type(0),
            version,
        )
        .await?;
    check_error(
        ApiKey::FindCoordinator,
        found.error_code,
        found.error_message.as_deref(),
    )
    .with_context(|| format!("cannot find the coordinator of group {group}"))?;
    let address = format!("{}:{}", found.host.as_str(), found.port);
    if address == bootstrap.address() {
        return Ok(bootstrap);
    }
    connect.to(address).connect().await
}

async fn list(connect: &ConnectArgs) -> anyhow::Result<()> {
    let mut connection = connect.connect().await?;
    let version = connection.version::<ListGroupsRequest>(LIST_GROUPS_VERSIONS)?;
    let response = connection
        .call(&ListGroupsRequest::default(), version)
        .await?;
    check_error(ApiKey::ListGroups, response.error_code, None)?;
    let mut groups: Vec<(String, String, String)> = response
        .groups
        .iter()
        .map(|g| {
            (
                g.group_id.0.to_string(),
                g.group_state.to_string(),
                g.protocol_type.to_string(),
            )
        })
        .collect();
    groups.sort();
    for (name, state, protocol_type) in groups {
        let state = if state.is_empty() { "-" } else { &state };
        let protocol_type = if protocol_type.is_empty() {
            "-"
        } else {
            &protocol_type
        };
        outln!("{name}\t{state}\t{protocol_type}");
    }
    Ok(())
}

/// Topic → partitions of one member's assignment.
type Assignment = BTreeMap<String, Vec<i32>>;

/// A group as DescribeGroups shows it.
struct Described {
    state: String,
    protocol_type: String,
    protocol: String,
    /// member id, client id, host, assignment (topic → partitions).
    members: Vec<(String, String, String, Assignment)>,
}

async fn describe_group(connection: &mut Connection, group: &str) -> anyhow::Result<Described> {
    let version = connection.version::<DescribeGroupsRequest>(DESCRIBE_GROUPS_VERSIONS)?;
    let response = connection
        .call(
            &DescribeGroupsRequest::default().with_groups(vec![group_id(group)]),
            version,
        )
        .await?;
    let Some(found) = response.groups.first() else {
        bail!("the broker described no group");
    };
    check_error(
        ApiKey::DescribeGroups,
        found.error_code,
        found.error_message.as_deref(),
    )
    .with_context(|| format!("cannot describe group {group}"))?;
    let consumer = found.protocol_type.as_str() == "consumer";
    Ok(Described {
        state: found.group_state.to_string(),
        protocol_type: found.protocol_type.to_string(),
        protocol: found.protocol_data.to_string(),
        members: found
            .members
            .iter()
            .map(|m| {
                let assignment = if consumer {
                    decode_assignment(&m.member_assignment).unwrap_or_default()
                } else {
                    BTreeMap::new()
                };
                (
                    m.member_id.to_string(),
                    m.client_id.to_string(),
                    m.client_host.to_string(),
                    assignment,
                )
            })
            .collect(),
    })
}

/// Committed offsets of a group: topic → partition → offset (-1: none).
async fn committed(
    connection: &mut Connection,
    group: &str,
    topic: Option<(&str, &[i32])>,
) -> anyhow::Result<BTreeMap<String, BTreeMap<i32, i64>>> {
    let version = connection.version::<OffsetFetchRequest>(OFFSET_FETCH_VERSIONS)?;
    let request = OffsetFetchRequest::default()
        .with_group_id(group_id(group))
        .with_topics(topic.map(|(name, partitions)| {
            vec![OffsetFetchRequestTopic::default()
                .with_name(topic_name(name))
                .with_partition_indexes(partitions.to_vec())]
        }));
    if topic.is_none() && version < 2 {
        bail!("the broker cannot list every committed offset (OffsetFetch v{version})");
    }
    let response = connection.call(&request, version).await?;
    check_error(ApiKey::OffsetFetch, response.error_code, None)
        .with_context(|| format!("cannot fetch the offsets of group {group}"))?;
    let mut offsets: BTreeMap<String, BTreeMap<i32, i64>> = BTreeMap::new();
    for t in &response.topics {
        for p in &t.partitions {
            check_error(ApiKey::OffsetFetch, p.error_code, None).with_context(|| {
                format!("offset of {}-{}", t.name.0.as_str(), p.partition_index)
            })?;
            offsets
                .entry(t.name.0.to_string())
                .or_default()
                .insert(p.partition_index, p.committed_offset);
        }
    }
    Ok(offsets)
}

async fn describe(connect: &ConnectArgs, group: &str) -> anyhow::Result<()> {
    let mut coordinator = coordinator(connect, group).await?;
    let described = describe_group(&mut coordinator, group).await?;
    let offsets = committed(&mut coordinator, group, None).await?;
    if described.state == "Dead" && described.members.is_empty() && offsets.is_empty() {
        bail!("consumer group {group} does not exist (no members, no committed offsets)");
    }
    outln!(
        "GROUP {group}\tSTATE {}\tPROTOCOL {}/{}\tMEMBERS {}",
        described.state,
        if described.protocol_type.is_empty() {
            "-"
        } else {
            &described.protocol_type
        },
        if described.protocol.is_empty() {
            "-"
        } else {
            &described.protocol
        },
        described.members.len()
    );
    // Partition → owning member, and every topic to show.
    let mut owners: BTreeMap<(String, i32), String> = BTreeMap::new();
    for (member_id, client_id, host, assignment) in &described.members {
        let parts: Vec<String> = assignment
            .iter()
            .map(|(t, ps)| {
                let list: Vec<String> = ps.iter().map(i32::to_string).collect();
                format!("{t}:{}", list.join(","))
            })
            .collect();
        outln!(
            "MEMBER {member_id}\tCLIENT {client_id}\tHOST {}\tASSIGNED {}",
            kafka_host(host),
            if parts.is_empty() {
                "-".to_string()
            } else {
                parts.join(" ")
            }
        );
        for (t, ps) in assignment {
            for p in ps {
                owners.insert((t.clone(), *p), member_id.clone());
            }
        }
    }
    let mut rows: BTreeMap<(String, i32), i64> = BTreeMap::new();
    for (t, ps) in &offsets {
        for (p, offset) in ps {
            rows.insert((t.clone(), *p), *offset);
        }
    }
    for key in owners.keys() {
        rows.entry(key.clone()).or_insert(-1);
    }
    outln!("TOPIC\tPARTITION\tCOMMITTED\tLOG-END\tLAG\tMEMBER");
    let mut bootstrap = connect.connect().await?;
    let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for (t, p) in rows.keys() {
        by_topic.entry(t.clone()).or_default().push(*p);
    }
    for (t, ps) in by_topic {
        let ends = list_offsets(&mut bootstrap, &t, &ps, LATEST).await?;
        for p in ps {
            let committed = rows[&(t.clone(), p)];
            let end = ends[&p];
            let (shown, lag) = if committed >= 0 {
                (committed.to_string(), (end - committed).max(0).to_string())
            } else {
                ("-".to_string(), "-".to_string())
            };
            let owner = owners.get(&(t.clone(), p)).map_or("-", String::as_str);
            outln!("{t}\t{p}\t{shown}\t{end}\t{lag}\t{owner}");
        }
    }
    Ok(())
}

/// A member's host as Kafka's tools show it: `/ADDRESS` (Java's
/// `InetAddress` text, which Kafka brokers report as is); `-` when the
/// broker reports none.
fn kafka_host(host: &str) -> String {
    match host.trim() {
        "" => "-".to_string(),
        host if host.starts_with('/') => host.to_string(),
        host => format!("/{host}"),
    }
}

/// Parses `--to-datetime`: epoch milliseconds or ISO-8601
/// `YYYY-MM-DDTHH:MM:SS[.mmm]` with an optional zone (`Z`, `±HH:MM`,
/// `±HHMM`, `±HH`; none: UTC).
pub fn parse_datetime(text: &str) -> anyhow::Result<i64> {
    let text = text.trim();
    if !text.is_empty() && text.chars().all(|c| c.is_ascii_digit()) {
        return text.parse().context("timestamp out of range");
    }
    let bad = || {
        anyhow::anyhow!(
            "expected milliseconds or YYYY-MM-DDTHH:MM:SS[.mmm][Z|±HH:MM], got {text:?}"
        )
    };
    let (date, time) = text.split_once('T').ok_or_else(bad)?;
    // The zone: Z, ±HH:MM, ±HHMM or ±HH (none: UTC); minutes east of UTC.
    let (time, zone_minutes) = if let Some(time) = time.strip_suffix('Z') {
        (time, 0)
    } else if let Some(at) = time.find(['+', '-']) {
        let (time, zone) = time.split_at(at);
        let sign = if zone.starts_with('-') { -1 } else { 1 };
        let digits: String = zone[1..].chars().filter(|c| *c != ':').collect();
        if !matches!(digits.len(), 2 | 4) || !digits.chars().all(|c| c.is_ascii_digit()) {
            return Err(bad());
        }
        let hours: i64 = digits[..2].parse().map_err(|_| bad())?;
        let minutes: i64 = digits[2..].parse().unwrap_or(0);
        if hours > 18 || minutes > 59 {
            return Err(bad());
        }
        (time, sign * (hours * 60 + minutes))
    } else {
        (time, 0)
    };
    let date: Vec<&str> = date.split('-').collect();
    let (time, millis) = match time.split_once('.') {
        Some((time, fraction)) => {
            if fraction.is_empty()
                || fraction.len() > 3
                || !fraction.chars().all(|c| c.is_ascii_digit())
            {
                return Err(bad());
            }
            let padded = format!("{fraction:0<3}");
            (time, padded.parse::<i64>().map_err(|_| bad())?)
        }
        None => (time, 0),
    };
    let time: Vec<&str> = time.split(':').collect();
    if date.len() != 3 || time.len() != 3 {
        return Err(bad());
    }
    let number = |s: &str| s.parse::<i64>().map_err(|_| bad());
    let (year, month, day) = (number(date[0])?, number(date[1])?, number(date[2])?);
    let (hour, minute, second) = (number(time[0])?, number(time[1])?, number(time[2])?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return Err(bad());
    }
    // Days from the civil date (proleptic Gregorian), after Howard Hinnant's algorithm.
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Ok(((days * 24 + hour) * 60 + minute - zone_minutes) * 60_000 + second * 1000 + millis)
}

async fn reset_offsets(args: ResetArgs) -> anyhow::Result<()> {
    let group = &args.group;
    let mut coordinator = coordinator(&args.connect, group).await?;
    let described = describe_group(&mut coordinator, group).await?;
    let active = !described.members.is_empty();
    if active && args.execute {
        bail!(
            "group {group} has {} active member(s) (state {}); stop its consumers before resetting offsets",
            described.members.len(),
            described.state
        );
    }
    let current = committed(&mut coordinator, group, None).await?;
    let topics: Vec<String> = if args.all_topics {
        if current.is_empty() {
            bail!("group {group} has no committed offsets: name the topics with --topic");
        }
        current.keys().cloned().collect()
    } else {
        args.topic.clone()
    };
    let timestamp = match &args.target.to_datetime {
        Some(text) => Some(parse_datetime(text).context("bad --to-datetime")?),
        None => None,
    };
    let mut bootstrap = args.connect.connect().await?;
    let mut plan: Vec<(String, BTreeMap<i32, i64>)> = Vec::with_capacity(topics.len());
    for topic in &topics {
        let ids = partitions(&mut bootstrap, topic, false).await?;
        let earliest = list_offsets(&mut bootstrap, topic, &ids, EARLIEST).await?;
        let latest = list_offsets(&mut bootstrap, topic, &ids, LATEST).await?;
        let within = |p: &i32, offset: i64| offset.clamp(earliest[p], latest[p]);
        let target = &args.target;
        let wanted: BTreeMap<i32, i64> = if target.to_earliest {
            earliest.clone()
        } else if target.to_latest {
            latest.clone()
        } else if let Some(offset) = target.to_offset {
            ids.iter().map(|p| (*p, within(p, offset))).collect()
        } else if let Some(shift) = target.shift_by {
            let mine = current.get(topic);
            let mut shifted = BTreeMap::new();
            for p in &ids {
                let Some(&now) = mine.and_then(|m| m.get(p)).filter(|o| **o >= 0) else {
                    bail!(
                        "cannot shift {topic}-{p}: group {group} has no committed offset there \
                         (use --to-earliest, --to-latest, --to-offset or --to-datetime)"
                    );
                };
                shifted.insert(*p, within(p, now.saturating_add(shift)));
            }
            shifted
        } else {
            let timestamp = timestamp.expect("clap requires one target");
            list_offsets(&mut bootstrap, topic, &ids, timestamp)
                .await?
                .into_iter()
                .map(|(p, offset)| (p, if offset < 0 { latest[&p] } else { offset }))
                .collect()
        };
        plan.push((topic.clone(), wanted));
    }
    let execute = args.execute && !args.dry_run;
    if execute {
        for (topic, wanted) in &plan {
            commit(&mut coordinator, group, -1, "", topic, wanted)
                .await
                .with_context(|| format!("cannot reset the offsets of group {group}"))?;
        }
    }
    let mut text = String::from("GROUP\tTOPIC\tPARTITION\tNEW-OFFSET\n");
    for (topic, wanted) in &plan {
        for (p, offset) in wanted {
            text.push_str(&format!("{group}\t{topic}\t{p}\t{offset}\n"));
        }
    }
    out!("{text}");
    if !execute {
        eprintln!(
            "Dry run: nothing changed. Add --execute to commit these offsets{}.",
            if active {
                " (refused while the group has members)"
            } else {
                ""
            }
        );
    }
    Ok(())
}

/// OffsetCommit of `offsets` for one topic; the first error fails it.
async fn commit(
    connection: &mut Connection,
    group: &str,
    generation: i32,
    member_id: &str,
    topic: &str,
    offsets: &BTreeMap<i32, i64>,
) -> anyhow::Result<()> {
    if offsets.is_empty() {
        return Ok(());
    }
    let version = connection.version::<OffsetCommitRequest>(OFFSET_COMMIT_VERSIONS)?;
    let request = OffsetCommitRequest::default()
        .with_group_id(group_id(group))
        .with_generation_id_or_member_epoch(generation)
        .with_member_id(text(member_id))
        .with_retention_time_ms(-1)
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(topic_name(topic))
            .with_partitions(
                offsets
                    .iter()
                    .map(|(&p, &offset)| {
                        OffsetCommitRequestPartition::default()
                            .with_partition_index(p)
                            .with_committed_offset(offset)
                            .with_committed_leader_epoch(-1)
                            .with_committed_metadata(Some(StrBytes::default()))
                    })
                    .collect(),
            )]);
    let response = connection.call(&request, version).await?;
    for t in &response.topics {
        for p in &t.partitions {
            check_error(ApiKey::OffsetCommit, p.error_code, None)?;
        }
    }
    Ok(())
}

async fn delete(connect: &ConnectArgs, group: &str) -> anyhow::Result<()> {
    let mut coordinator = coordinator(connect, group).await?;
    let version = coordinator.version::<DeleteGroupsRequest>(DELETE_GROUPS_VERSIONS)?;
    let response = coordinator
        .call(
            &DeleteGroupsRequest::default().with_groups_names(vec![group_id(group)]),
            version,
        )
        .await?;
    let code = response.results.first().map_or(0, |r| r.error_code);
    match code {
        0 => {
            outln!("deleted group {group}");
            Ok(())
        }
        NON_EMPTY_GROUP => {
            bail!("group {group} has active members; stop its consumers before deleting it")
        }
        GROUP_ID_NOT_FOUND => bail!("there is no group {group}"),
        code => bail!("cannot delete group {group}: {}", error_name(code)),
    }
}

/// Consumer-protocol subscription v0: version, topics, null user data.
fn encode_subscription(topics: &[&str]) -> Bytes {
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
fn encode_assignment(assignment: &BTreeMap<String, Vec<i32>>) -> Bytes {
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
pub fn decode_assignment(bytes: &[u8]) -> Option<BTreeMap<String, Vec<i32>>> {
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
fn range_assign(
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

/// A member of a consumer group for one topic (`strom consume --group`).
pub struct GroupMember {
    connect: ConnectArgs,
    group: String,
    topic: String,
    coordinator: Connection,
    member_id: String,
    generation: i32,
    assigned: Vec<i32>,
    /// Raised by the heartbeat task when the coordinator asks to rejoin.
    rejoin: Rc<Cell<bool>>,
    heartbeat: Option<glommio::Task<()>>,
    /// What was last committed, so an idle loop commits nothing.
    last_committed: BTreeMap<i32, i64>,
}

impl GroupMember {
    /// Joins `group` subscribed to `topic` and waits for an assignment.
    pub async fn join(connect: &ConnectArgs, group: &str, topic: &str) -> anyhow::Result<Self> {
        let coordinator = coordinator(connect, group).await?;
        let mut member = GroupMember {
            connect: connect.clone(),
            group: group.to_string(),
            topic: topic.to_string(),
            coordinator,
            member_id: String::new(),
            generation: -1,
            assigned: Vec::new(),
            rejoin: Rc::new(Cell::new(false)),
            heartbeat: None,
            last_committed: BTreeMap::new(),
        };
        member.rejoin().await?;
        Ok(member)
    }

    /// Whether the group rebalances and this member must `rejoin`.
    pub fn rebalance_needed(&self) -> bool {
        self.rejoin.get()
    }

    /// (Re)joins the group and syncs: a new generation and assignment.
    pub async fn rejoin(&mut self) -> anyhow::Result<()> {
        self.heartbeat = None;
        self.rejoin.set(false);
        let join_version = self
            .coordinator
            .version::<JoinGroupRequest>(JOIN_GROUP_VERSIONS)?;
        let sync_version = self
            .coordinator
            .version::<SyncGroupRequest>(SYNC_GROUP_VERSIONS)?;
        for _ in 0..JOIN_ATTEMPTS_MAX {
            let request = JoinGroupRequest::default()
                .with_group_id(group_id(&self.group))
                .with_session_timeout_ms(SESSION_TIMEOUT_MS)
                .with_rebalance_timeout_ms(REBALANCE_TIMEOUT_MS)
                .with_member_id(text(&self.member_id))
                .with_protocol_type(text("consumer"))
                .with_protocols(vec![JoinGroupRequestProtocol::default()
                    .with_name(text(ASSIGNOR))
                    .with_metadata(encode_subscription(&[&self.topic]))]);
            let joined = self.coordinator.call(&request, join_version).await?;
            match joined.error_code {
                0 => {}
                MEMBER_ID_REQUIRED => {
                    self.member_id = joined.member_id.to_string();
                    continue;
                }
                UNKNOWN_MEMBER_ID => {
                    self.member_id.clear();
                    continue;
                }
                REBALANCE_IN_PROGRESS => continue,
                code => {
                    check_error(ApiKey::JoinGroup, code, None)
                        .with_context(|| format!("cannot join group {}", self.group))?;
                }
            }
            self.member_id = joined.member_id.to_string();
            self.generation = joined.generation_id;
            let protocol = joined
                .protocol_name
                .as_ref()
                .map(|p| p.to_string())
                .unwrap_or_else(|| ASSIGNOR.to_string());
            let assignments = if joined.leader.as_str() == self.member_id {
                if protocol != ASSIGNOR {
                    bail!(
                        "group {} chose assignor {protocol}; strom consume only knows {ASSIGNOR}",
                        self.group
                    );
                }
                self.lead(&joined.members).await?
            } else {
                Vec::new()
            };
            let synced = self
                .coordinator
                .call(
                    &SyncGroupRequest::default()
                        .with_group_id(group_id(&self.group))
                        .with_generation_id(self.generation)
                        .with_member_id(text(&self.member_id))
                        .with_protocol_type(Some(text("consumer")))
                        .with_protocol_name(Some(text(&protocol)))
                        .with_assignments(assignments),
                    sync_version,
                )
                .await?;
            match synced.error_code {
                0 => {}
                REBALANCE_IN_PROGRESS | ILLEGAL_GENERATION => continue,
                UNKNOWN_MEMBER_ID => {
                    self.member_id.clear();
                    continue;
                }
                code => {
                    check_error(ApiKey::SyncGroup, code, None)
                        .with_context(|| format!("cannot sync group {}", self.group))?;
                }
            }
            let assignment = decode_assignment(&synced.assignment).unwrap_or_default();
            self.assigned = assignment.get(&self.topic).cloned().unwrap_or_default();
            self.assigned.sort_unstable();
            self.start_heartbeat().await?;
            return Ok(());
        }
        bail!(
            "group {} kept rebalancing: no assignment after {JOIN_ATTEMPTS_MAX} joins",
            self.group
        )
    }

    /// The leader's part: range-assign every member's subscription.
    async fn lead(
        &mut self,
        members: &[kafka_protocol::messages::join_group_response::JoinGroupResponseMember],
    ) -> anyhow::Result<Vec<SyncGroupRequestAssignment>> {
        let mut subscriptions = BTreeMap::new();
        for m in members {
            let topics = consumer_subscription_topics(&m.metadata).unwrap_or_default();
            subscriptions.insert(m.member_id.to_string(), topics);
        }
        let mut counts = BTreeMap::new();
        let mut bootstrap = self.connect.connect().await?;
        for topic in subscriptions.values().flatten() {
            if !counts.contains_key(topic) {
                let ids = partitions(&mut bootstrap, topic, false).await?;
                counts.insert(topic.clone(), ids.len() as i32);
            }
        }
        Ok(range_assign(&subscriptions, &counts)
            .into_iter()
            .map(|(member, assignment)| {
                SyncGroupRequestAssignment::default()
                    .with_member_id(text(&member))
                    .with_assignment(encode_assignment(&assignment))
            })
            .collect())
    }

    async fn start_heartbeat(&mut self) -> anyhow::Result<()> {
        let connect = self.connect.to(self.coordinator.address().to_string());
        let mut connection = connect.connect().await?;
        let version = connection.version::<HeartbeatRequest>(HEARTBEAT_VERSIONS)?;
        let request = HeartbeatRequest::default()
            .with_group_id(group_id(&self.group))
            .with_generation_id(self.generation)
            .with_member_id(text(&self.member_id));
        let rejoin = self.rejoin.clone();
        // Dropping the task (on rejoin or when the member goes) stops it.
        self.heartbeat = Some(glommio::spawn_local(async move {
            loop {
                glommio::timer::sleep(Duration::from_millis(HEARTBEAT_INTERVAL_MS)).await;
                let code = match connection.call(&request, version).await {
                    Ok(response) => response.error_code,
                    Err(_) => REBALANCE_IN_PROGRESS,
                };
                if code != 0 {
                    rejoin.set(true);
                    return;
                }
            }
        }));
        Ok(())
    }

    /// The offsets to start from: committed, else earliest or latest.
    pub async fn start_positions(
        &mut self,
        from_beginning: bool,
    ) -> anyhow::Result<BTreeMap<i32, i64>> {
        if self.assigned.is_empty() {
            return Ok(BTreeMap::new());
        }
        let assigned = self.assigned.clone();
        let found = committed(
            &mut self.coordinator,
            &self.group,
            Some((&self.topic, &assigned)),
        )
        .await?;
        let mine = found.get(&self.topic).cloned().unwrap_or_default();
        let mut bootstrap = self.connect.connect().await?;
        let reset = list_offsets(
            &mut bootstrap,
            &self.topic,
            &assigned,
            if from_beginning { EARLIEST } else { LATEST },
        )
        .await?;
        Ok(assigned
            .iter()
            .map(|p| {
                let offset = mine.get(p).copied().filter(|o| *o >= 0).unwrap_or(reset[p]);
                (*p, offset)
            })
            .collect())
    }

    /// Commits the positions of the assigned partitions. A rebalance in
    /// the way is not an error: the member rejoins after.
    pub async fn commit(&mut self, positions: &BTreeMap<i32, i64>) -> anyhow::Result<()> {
        if *positions == self.last_committed {
            return Ok(());
        }
        let (group, member, generation, topic) = (
            self.group.clone(),
            self.member_id.clone(),
            self.generation,
            self.topic.clone(),
        );
        match commit(
            &mut self.coordinator,
            &group,
            generation,
            &member,
            &topic,
            positions,
        )
        .await
        {
            Ok(()) => {
                self.last_committed = positions.clone();
                Ok(())
            }
            Err(error) => {
                let retry = error.downcast_ref::<protocol::client::ClientError>().is_some_and(|e| {
                    matches!(e, protocol::client::ClientError::Kafka { code, .. }
                        if [REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID].contains(code))
                });
                if retry {
                    self.rejoin.set(true);
                    Ok(())
                } else {
                    Err(error.context(format!("cannot commit offsets of group {group}")))
                }
            }
        }
    }

    /// Commits and leaves the group (no waiting for a session timeout).
    pub async fn finish(mut self, positions: &BTreeMap<i32, i64>) -> anyhow::Result<()> {
        self.commit(positions).await?;
        self.leave().await
    }

    /// Leaves the group without committing.
    pub async fn leave(mut self) -> anyhow::Result<()> {
        self.heartbeat = None;
        let version = self
            .coordinator
            .version::<LeaveGroupRequest>(LEAVE_GROUP_VERSIONS)?;
        let request = LeaveGroupRequest::default().with_group_id(group_id(&self.group));
        // v3+ leaves in batches; before, one member id.
        let request = if version >= 3 {
            request.with_members(vec![
                MemberIdentity::default().with_member_id(text(&self.member_id))
            ])
        } else {
            request.with_member_id(text(&self.member_id))
        };
        let response = self.coordinator.call(&request, version).await?;
        check_error(ApiKey::LeaveGroup, response.error_code, None)?;
        for member in &response.members {
            check_error(ApiKey::LeaveGroup, member.error_code, None)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datetimes_parse_as_utc() {
        assert_eq!(parse_datetime("0").unwrap(), 0);
        assert_eq!(parse_datetime("1700000000000").unwrap(), 1_700_000_000_000);
        assert_eq!(parse_datetime("1970-01-01T00:00:00").unwrap(), 0);
        assert_eq!(
            parse_datetime("2023-11-14T22:13:20Z").unwrap(),
            1_700_000_000_000
        );
        assert_eq!(
            parse_datetime("2023-11-14T22:13:20.5").unwrap(),
            1_700_000_000_500
        );
        assert_eq!(
            parse_datetime("2000-03-01T00:00:00.123").unwrap(),
            951_868_800_123
        );
        assert_eq!(
            parse_datetime("2023-11-15T00:13:20+02:00").unwrap(),
            1_700_000_000_000
        );
        assert_eq!(
            parse_datetime("2023-11-14T17:13:20.000-0500").unwrap(),
            1_700_000_000_000
        );
        for bad in [
            "",
            "yesterday",
            "2023-13-01T00:00:00",
            "2023-11-14 22:13:20",
            "2023-11-14T22:13:20.1234",
            "2023-11-14T22:13:20+2",
            "2023-11-14T22:13:20+02:xx",
        ] {
            assert!(parse_datetime(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn hosts_show_as_kafka_shows_them() {
        assert_eq!(kafka_host("127.0.0.1"), "/127.0.0.1");
        assert_eq!(kafka_host("/127.0.0.1"), "/127.0.0.1");
        assert_eq!(kafka_host(""), "-");
    }

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
