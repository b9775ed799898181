//! `strom group list | describe GROUP | reset-offsets GROUP | delete GROUP`
//! and `GroupMember`, the consumer-group member behind
//! `strom consume TOPIC --group G`. Everything goes through
//! `protocol::client`, so the tools work against any Kafka broker: the
//! group's coordinator is found with FindCoordinator, members speak the
//! classic consumer protocol with the `range` assignor. Each broker lists
//! only the groups it coordinates, so listings ask every broker Metadata
//! names, as Kafka's admin client does.
//!
//! `commands` holds the admin commands, `datetime` the `--to-datetime`
//! parser, `assignor` the consumer protocol and the range assignor,
//! `member` the group member.

mod assignor;
mod commands;
mod datetime;
mod member;
mod share;

pub use datetime::parse_datetime;
pub use member::GroupMember;
pub use share::{run as run_share, ShareGroupArgs};

use std::collections::BTreeMap;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::{
    ApiKey, FindCoordinatorRequest, GroupId, OffsetCommitRequest, OffsetFetchRequest,
};
use kafka_protocol::protocol::StrBytes;
use protocol::client::{check_error, Connection};

use protocol::admin::topic_name;

use super::format::Format;
use super::ConnectArgs;

const FIND_COORDINATOR_VERSIONS: std::ops::RangeInclusive<i16> = 1..=3;
const LIST_GROUPS_VERSIONS: std::ops::RangeInclusive<i16> = 0..=5;
const CONSUMER_GROUP_DESCRIBE_VERSIONS: std::ops::RangeInclusive<i16> = 0..=1;
const DESCRIBE_GROUPS_VERSIONS: std::ops::RangeInclusive<i16> = 0..=5;
const DELETE_GROUPS_VERSIONS: std::ops::RangeInclusive<i16> = 0..=2;
const OFFSET_FETCH_VERSIONS: std::ops::RangeInclusive<i16> = 1..=7;
const OFFSET_COMMIT_VERSIONS: std::ops::RangeInclusive<i16> = 2..=8;
const JOIN_GROUP_VERSIONS: std::ops::RangeInclusive<i16> = 0..=7;
const SYNC_GROUP_VERSIONS: std::ops::RangeInclusive<i16> = 0..=5;
const HEARTBEAT_VERSIONS: std::ops::RangeInclusive<i16> = 0..=4;
const LEAVE_GROUP_VERSIONS: std::ops::RangeInclusive<i16> = 0..=4;

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
    /// List the groups of the whole cluster: name, state and protocol
    /// type, one per line. Each broker lists only the groups it
    /// coordinates, so every broker Metadata names is asked (as
    /// kafka-consumer-groups.sh does); when one does not answer, the
    /// others' groups are printed and the tool exits 1 naming it.
    List {
        /// How to print: `text`, GROUP<TAB>STATE<TAB>PROTOCOL-TYPE per
        /// line, or `json`: {"groups": [{"group", "state",
        /// "protocol_type", "coordinator"}]} (coordinator: the id of the
        /// broker that listed it).
        #[arg(long, value_enum, value_name = "FORMAT", default_value_t = Format::Text)]
        format: Format,
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// State, members (host as Kafka shows it, /ADDRESS) and their
    /// assignments, and per partition the committed offset, log end offset
    /// and lag; an unknown group is an error. With --all-groups, every
    /// group of the cluster, one block each.
    Describe(DescribeArgs),
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
struct DescribeArgs {
    /// The group to describe.
    #[arg(required_unless_present = "all_groups")]
    group: Option<String>,
    /// Describe every group of the cluster (as `group list` finds them,
    /// asking every broker), one block each, separated by an empty line.
    #[arg(long, conflicts_with = "group")]
    all_groups: bool,
    /// How to print: `text` (a GROUP line, MEMBER lines, then
    /// TOPIC PARTITION COMMITTED LOG-END LAG MEMBER rows) or `json`:
    /// {"groups": [{"group", "state", "protocol_type", "protocol",
    /// "members": [{"member_id", "client_id", "host", "assignment": {TOPIC:
    /// [PARTITION]}}], "offsets": [{"topic", "partition", "committed",
    /// "log_end", "lag", "member", "error"}]}]} (null: none).
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = Format::Text)]
    format: Format,
    #[command(flatten)]
    connect: ConnectArgs,
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
        GroupCommand::List { format, connect } => commands::list(&connect, format).await,
        GroupCommand::Describe(args) => commands::describe(&args).await,
        GroupCommand::ResetOffsets(args) => commands::reset_offsets(args).await,
        GroupCommand::Delete { group, connect } => commands::delete(&connect, &group).await,
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
