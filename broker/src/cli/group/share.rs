//! `strom share-group list | describe GROUP | reset-offsets GROUP |
//! delete GROUP`: share groups (KIP-932), as Kafka's
//! `kafka-share-groups.sh` shows and changes them, over the Kafka
//! protocol (ListGroups, ShareGroupDescribe, DescribeShareGroupOffsets,
//! AlterShareGroupOffsets, DeleteGroups at the group's coordinator).

use std::collections::BTreeMap;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use kafka_protocol::messages::alter_share_group_offsets_request::{
    AlterShareGroupOffsetsRequestPartition, AlterShareGroupOffsetsRequestTopic,
};
use kafka_protocol::messages::describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup;
use kafka_protocol::messages::{
    AlterShareGroupOffsetsRequest, ApiKey, DescribeShareGroupOffsetsRequest,
    ShareGroupDescribeRequest,
};
use protocol::admin::topic_name;
use protocol::client::{check_error, Connection, ERROR_NONE};
use protocol::kafka_protocol::error::ResponseError;
use serde::Serialize;

use super::super::format::{print_json_object, Format};
use super::commands::{new_offsets, Placement};
use super::datetime::parse_datetime;
use super::{coordinator, group_id, ConnectArgs, ResetTarget};

#[derive(Args, Debug)]
pub struct ShareGroupArgs {
    #[command(subcommand)]
    command: ShareGroupCommand,
}

#[derive(Subcommand, Debug)]
enum ShareGroupCommand {
    /// List the share groups of the whole cluster (every broker Metadata
    /// names is asked): GROUP<TAB>STATE per line, Stable with members,
    /// Empty without (a group stays until it is deleted).
    List {
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// A share group's state, epoch and members (each assigned every
    /// partition of the topics it subscribes to), then per share
    /// partition its start offset: records before it are done with
    /// (acknowledged or archived). An unknown group is an error.
    Describe {
        group: String,
        /// `text` (a GROUP line, MEMBER lines, TOPIC PARTITION START-OFFSET
        /// rows) or `json`: {"group", "state", "epoch", "members":
        /// [{"member_id", "client_id", "host", "topics"}], "offsets":
        /// [{"topic", "partition", "start_offset"}]}.
        #[arg(long, value_enum, value_name = "FORMAT", default_value_t = Format::Text)]
        format: Format,
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// Show, and with --execute set, new start offsets of a share group on
    /// topics (every partition); what was in flight there is forgotten.
    /// Refused while the group has members.
    ResetOffsets(ResetArgs),
    /// Delete a share group and its share partitions' states (refused
    /// while it has members).
    Delete {
        group: String,
        #[command(flatten)]
        connect: ConnectArgs,
    },
}

#[derive(Args, Debug)]
struct ResetArgs {
    group: String,
    /// Topic whose start offsets are reset, every partition (repeatable).
    #[arg(long, value_name = "TOPIC", required = true)]
    topic: Vec<String>,
    /// Where to (as `strom group reset-offsets`; --shift-by moves each
    /// partition's start offset).
    #[command(flatten)]
    target: ResetTarget,
    /// Only show the new start offsets; change nothing (the default).
    #[arg(long, conflicts_with = "execute")]
    dry_run: bool,
    /// Set the new start offsets (without it nothing changes).
    #[arg(long)]
    execute: bool,
    #[command(flatten)]
    connect: ConnectArgs,
}

pub async fn run(args: ShareGroupArgs) -> anyhow::Result<()> {
    match args.command {
        ShareGroupCommand::List { connect } => list(&connect).await,
        ShareGroupCommand::Describe {
            group,
            format,
            connect,
        } => describe(&connect, &group, format).await,
        ShareGroupCommand::ResetOffsets(args) => reset_offsets(args).await,
        ShareGroupCommand::Delete { group, connect } => {
            super::commands::delete(&connect, &group).await
        }
    }
}

async fn list(connect: &ConnectArgs) -> anyhow::Result<()> {
    let (groups, failures) = super::commands::list_everywhere(connect).await?;
    let mut out = String::new();
    for g in groups
        .values()
        .filter(|g| g.group_type.as_deref() == Some("share"))
    {
        out.push_str(&format!(
            "{}\t{}\n",
            g.group,
            g.state.as_deref().unwrap_or("-")
        ));
    }
    outln!("{}", out.trim_end());
    super::super::retry::incomplete("share groups", &failures)
}

#[derive(Serialize)]
struct Member {
    member_id: String,
    client_id: String,
    host: String,
    topics: Vec<String>,
}

#[derive(Serialize)]
struct Offset {
    topic: String,
    partition: i32,
    start_offset: i64,
}

#[derive(Serialize)]
struct Described {
    group: String,
    state: String,
    epoch: i32,
    members: Vec<Member>,
    offsets: Vec<Offset>,
}

async fn describe(connect: &ConnectArgs, group: &str, format: Format) -> anyhow::Result<()> {
    let mut connection = coordinator(connect, group).await?;
    let version = connection.version::<ShareGroupDescribeRequest>(1..=1)?;
    let response = connection
        .call(
            &ShareGroupDescribeRequest::default().with_group_ids(vec![group_id(group)]),
            version,
        )
        .await?;
    let Some(described) = response.groups.into_iter().next() else {
        bail!("the broker described no group");
    };
    check_error(
        ApiKey::ShareGroupDescribe,
        described.error_code,
        described.error_message.as_deref(),
    )
    .with_context(|| format!("cannot describe share group {group}"))?;
    let rows = start_offsets(&mut connection, group)
        .await?
        .into_iter()
        .flat_map(|(topic, offsets)| {
            offsets
                .into_iter()
                .map(move |(partition, start_offset)| Offset {
                    topic: topic.clone(),
                    partition,
                    start_offset,
                })
        })
        .collect();
    let described = Described {
        group: group.to_string(),
        state: described.group_state.to_string(),
        epoch: described.group_epoch,
        members: described
            .members
            .iter()
            .map(|m| Member {
                member_id: m.member_id.to_string(),
                client_id: m.client_id.to_string(),
                host: m.client_host.to_string(),
                topics: m
                    .subscribed_topic_names
                    .iter()
                    .map(|t| t.0.to_string())
                    .collect(),
            })
            .collect(),
        offsets: rows,
    };
    if format == Format::Json {
        return print_json_object("group", &described);
    }
    let mut out = format!(
        "GROUP {} STATE {} EPOCH {} MEMBERS {}\n",
        described.group,
        described.state,
        described.epoch,
        described.members.len()
    );
    for m in &described.members {
        out.push_str(&format!(
            "MEMBER {} CLIENT {} HOST {} TOPICS {}\n",
            m.member_id,
            m.client_id,
            m.host,
            m.topics.join(",")
        ));
    }
    out.push_str("TOPIC\tPARTITION\tSTART-OFFSET\n");
    for o in &described.offsets {
        out.push_str(&format!(
            "{}\t{}\t{}\n",
            o.topic, o.partition, o.start_offset
        ));
    }
    outln!("{}", out.trim_end());
    Ok(())
}

/// A share group's start offsets: topic → partition → offset (-1: none
/// kept), from its coordinator.
async fn start_offsets(
    connection: &mut Connection,
    group: &str,
) -> anyhow::Result<BTreeMap<String, BTreeMap<i32, i64>>> {
    let version = connection.version::<DescribeShareGroupOffsetsRequest>(0..=0)?;
    let response = connection
        .call(
            &DescribeShareGroupOffsetsRequest::default().with_groups(vec![
                DescribeShareGroupOffsetsRequestGroup::default()
                    .with_group_id(group_id(group))
                    .with_topics(None),
            ]),
            version,
        )
        .await?;
    let mut offsets: BTreeMap<String, BTreeMap<i32, i64>> = BTreeMap::new();
    for g in response.groups {
        check_error(
            ApiKey::DescribeShareGroupOffsets,
            g.error_code,
            g.error_message.as_deref(),
        )
        .with_context(|| format!("cannot describe the offsets of share group {group}"))?;
        for t in g.topics {
            for p in t.partitions {
                check_error(ApiKey::DescribeShareGroupOffsets, p.error_code, None)
                    .with_context(|| format!("{}-{}", t.topic_name.0, p.partition_index))?;
                offsets
                    .entry(t.topic_name.0.to_string())
                    .or_default()
                    .insert(p.partition_index, p.start_offset);
            }
        }
    }
    Ok(offsets)
}

async fn reset_offsets(args: ResetArgs) -> anyhow::Result<()> {
    let group = &args.group;
    let mut coordinator = coordinator(&args.connect, group).await?;
    let current = start_offsets(&mut coordinator, group).await?;
    let timestamp = match &args.target.to_datetime {
        Some(text) => Some(parse_datetime(text).context("bad --to-datetime")?),
        None => None,
    };
    let mut bootstrap = args.connect.connect().await?;
    let mut plan: BTreeMap<String, BTreeMap<i32, i64>> = BTreeMap::new();
    for topic in &args.topic {
        let place = Placement {
            group,
            topic,
            committed: current.get(topic),
        };
        let wanted = new_offsets(&mut bootstrap, &place, &args.target, timestamp)
            .await
            .with_context(|| format!("topic {topic}"))?;
        plan.insert(topic.clone(), wanted);
    }
    let execute = args.execute && !args.dry_run;
    if execute {
        let version = coordinator.version::<AlterShareGroupOffsetsRequest>(0..=0)?;
        let request = AlterShareGroupOffsetsRequest::default()
            .with_group_id(group_id(group))
            .with_topics(
                plan.iter()
                    .map(|(topic, offsets)| {
                        AlterShareGroupOffsetsRequestTopic::default()
                            .with_topic_name(topic_name(topic))
                            .with_partitions(
                                offsets
                                    .iter()
                                    .map(|(&p, &offset)| {
                                        AlterShareGroupOffsetsRequestPartition::default()
                                            .with_partition_index(p)
                                            .with_start_offset(offset)
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            );
        let response = coordinator.call(&request, version).await?;
        if response.error_code == ERROR_NONE {
            for t in &response.responses {
                for p in &t.partitions {
                    check_error(ApiKey::AlterShareGroupOffsets, p.error_code, None)
                        .with_context(|| format!("{}-{}", t.topic_name.0, p.partition_index))?;
                }
            }
        } else if response.error_code == ResponseError::NonEmptyGroup.code() {
            bail!("share group {group} has active members; stop its consumers before resetting offsets");
        } else {
            check_error(
                ApiKey::AlterShareGroupOffsets,
                response.error_code,
                response.error_message.as_deref(),
            )
            .with_context(|| format!("cannot reset the offsets of share group {group}"))?;
        }
    }
    let mut text = String::from("GROUP\tTOPIC\tPARTITION\tNEW-START-OFFSET\n");
    for (topic, wanted) in &plan {
        for (p, offset) in wanted {
            text.push_str(&format!("{group}\t{topic}\t{p}\t{offset}\n"));
        }
    }
    out!("{text}");
    if !execute {
        eprintln!("Dry run: nothing changed. Add --execute to set these start offsets (refused while the group has members).");
    }
    Ok(())
}
