//! `strom topic create|list|describe|alter|delete`: topic administration
//! with CreateTopics, Metadata, DescribeConfigs, IncrementalAlterConfigs,
//! CreatePartitions and DeleteTopics.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{
    ApiKey, CreatePartitionsRequest, CreateTopicsRequest, DeleteTopicsRequest,
    DescribeConfigsRequest, IncrementalAlterConfigsRequest,
};
use kafka_protocol::protocol::StrBytes;
use protocol::client::{check_error, Connection, ERROR_NONE};
use protocol::kafka_protocol::error::ResponseError;

use protocol::admin::{list_topic_offsets, metadata, topic_name, EARLIEST, LATEST};

use super::{key_value, ConnectArgs};

const CREATE_TOPICS_VERSIONS: std::ops::RangeInclusive<i16> = 2..=7;
const DELETE_TOPICS_VERSIONS: std::ops::RangeInclusive<i16> = 1..=6;
const CREATE_PARTITIONS_VERSIONS: std::ops::RangeInclusive<i16> = 0..=3;
const DESCRIBE_CONFIGS_VERSIONS: std::ops::RangeInclusive<i16> = 1..=4;
const INCREMENTAL_ALTER_VERSIONS: std::ops::RangeInclusive<i16> = 0..=1;
/// How long the broker may take to apply an admin change.
const ADMIN_TIMEOUT_MS: i32 = 30_000;
const RESOURCE_TOPIC: i8 = 2;
const CONFIG_SOURCE_DYNAMIC_TOPIC: i8 = 1;
const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;

#[derive(Args, Debug)]
pub struct TopicArgs {
    #[command(subcommand)]
    command: TopicCommand,
}

#[derive(Subcommand, Debug)]
enum TopicCommand {
    /// Create a topic.
    Create(CreateArgs),
    /// List the names of all topics, one per line.
    List(ListArgs),
    /// Show partitions (leader, replicas, in-sync replicas, offline
    /// replicas, start and end offsets as the leaders report them) and
    /// configs of topics.
    Describe(DescribeArgs),
    /// Change topic configs or add partitions.
    Alter(AlterArgs),
    /// Delete topics and all their data.
    Delete(DeleteArgs),
    /// Move partitions' leadership to their preferred (first) replica, or
    /// with --unclean give partitions without a leader a live replica even
    /// out of sync (records only the lost leader had are lost).
    ElectLeaders(ElectArgs),
    /// Move partitions' replicas to other brokers or change how many
    /// there are: the new replicas copy the log from the leader, and the
    /// old ones leave (deleting their copy) only once every new one is in
    /// sync. The first replica listed is the preferred leader.
    Reassign(ReassignArgs),
    /// List the partitions being reassigned: their replicas, those being
    /// added and those leaving.
    Reassignments(ReassignmentsArgs),
}

#[derive(Args, Debug)]
struct ReassignArgs {
    /// The topic whose partitions move.
    topic: String,
    /// Only this partition (repeatable) [default: every partition].
    #[arg(long, value_name = "N")]
    partition: Vec<i32>,
    /// The brokers to hold the replicas, comma-separated, preferred leader
    /// first, e.g. --replicas 4,2,3.
    #[arg(
        long,
        value_name = "IDS",
        value_delimiter = ',',
        required_unless_present = "cancel"
    )]
    replicas: Vec<i32>,
    /// Cancel the moves under way instead: back to the replicas before them.
    #[arg(long, conflicts_with = "replicas")]
    cancel: bool,
    /// Wait until the moves are done (every new replica in sync, the old
    /// ones gone), at most this many seconds; fail if they are not.
    #[arg(long, value_name = "SECONDS")]
    wait: Option<u64>,
    #[command(flatten)]
    connect: ConnectArgs,
}

#[derive(Args, Debug)]
struct ReassignmentsArgs {
    /// Topics to list [default: every topic].
    topics: Vec<String>,
    #[command(flatten)]
    connect: ConnectArgs,
}

#[derive(Args, Debug)]
struct ElectArgs {
    /// Topics whose partitions to elect for [default: every partition].
    topics: Vec<String>,
    /// Only this partition of the topic given (repeatable).
    #[arg(long, value_name = "N")]
    partition: Vec<i32>,
    /// Unclean election: only partitions without a leader, any live replica.
    #[arg(long)]
    unclean: bool,
    #[command(flatten)]
    connect: ConnectArgs,
}

#[derive(Args, Debug)]
struct CreateArgs {
    /// Name of the topic to create.
    topic: String,
    /// Number of partitions [default: the broker's num.partitions].
    #[arg(long, value_name = "N")]
    partitions: Option<i32>,
    /// Replication factor [default: the broker's default.replication.factor].
    #[arg(long, value_name = "N")]
    replication_factor: Option<i16>,
    /// Topic config override, e.g. --config retention.ms=60000 (repeatable).
    #[arg(long = "config", value_name = "KEY=VALUE", value_parser = key_value)]
    configs: Vec<(String, String)>,
    /// Only check that the broker would accept the topic; create nothing.
    #[arg(long)]
    validate_only: bool,
    /// Succeed, changing nothing, when the topic exists already.
    #[arg(long)]
    if_not_exists: bool,
    #[command(flatten)]
    connect: ConnectArgs,
}

#[derive(Args, Debug)]
struct ListArgs {
    #[command(flatten)]
    connect: ConnectArgs,
}

#[derive(Args, Debug)]
struct DescribeArgs {
    /// Topics to describe [default: every topic].
    topics: Vec<String>,
    /// Show every config with its value, not only the topic's overrides.
    #[arg(long)]
    all_configs: bool,
    #[command(flatten)]
    connect: ConnectArgs,
}

#[derive(Args, Debug)]
struct AlterArgs {
    /// Name of the topic to change.
    topic: String,
    /// Set a topic config, e.g. --config retention.ms=60000 (repeatable).
    #[arg(long = "config", value_name = "KEY=VALUE", value_parser = key_value)]
    configs: Vec<(String, String)>,
    /// Remove a topic config override, back to the broker default (repeatable).
    #[arg(long = "delete-config", value_name = "KEY")]
    delete_configs: Vec<String>,
    /// Grow the topic to this many partitions (partitions can only be added).
    #[arg(long, value_name = "N")]
    partitions: Option<i32>,
    #[command(flatten)]
    connect: ConnectArgs,
}

#[derive(Args, Debug)]
struct DeleteArgs {
    /// Topics to delete.
    #[arg(required = true)]
    topics: Vec<String>,
    #[command(flatten)]
    connect: ConnectArgs,
}

pub async fn run(args: TopicArgs) -> anyhow::Result<()> {
    match args.command {
        TopicCommand::Create(args) => create(args).await,
        TopicCommand::List(args) => list(args).await,
        TopicCommand::Describe(args) => describe(args).await,
        TopicCommand::Alter(args) => alter(args).await,
        TopicCommand::Delete(args) => delete(args).await,
        TopicCommand::ElectLeaders(args) => elect_leaders(args).await,
        TopicCommand::Reassign(args) => reassign(args).await,
        TopicCommand::Reassignments(args) => reassignments(args).await,
    }
}

fn text(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_string())
}

fn message(value: &Option<StrBytes>) -> Option<&str> {
    value.as_ref().map(|m| m.as_str())
}

async fn create(args: CreateArgs) -> anyhow::Result<()> {
    let mut connection = args.connect.connect().await?;
    let version = connection.version::<CreateTopicsRequest>(CREATE_TOPICS_VERSIONS)?;
    // v4+ accepts -1 for "the broker's default".
    let default_allowed = version >= 4;
    let partitions = match args.partitions {
        Some(n) if n <= 0 => bail!("--partitions must be at least 1"),
        Some(n) => n,
        None if default_allowed => -1,
        None => bail!("this broker needs --partitions (CreateTopics v{version})"),
    };
    let replication_factor = match args.replication_factor {
        Some(n) if n <= 0 => bail!("--replication-factor must be at least 1"),
        Some(n) => n,
        None if default_allowed => -1,
        None => 1,
    };
    let topic = CreatableTopic::default()
        .with_name(topic_name(&args.topic))
        .with_num_partitions(partitions)
        .with_replication_factor(replication_factor)
        .with_configs(
            args.configs
                .iter()
                .map(|(key, value)| {
                    CreatableTopicConfig::default()
                        .with_name(text(key))
                        .with_value(Some(text(value)))
                })
                .collect(),
        );
    let request = CreateTopicsRequest::default()
        .with_topics(vec![topic])
        .with_timeout_ms(ADMIN_TIMEOUT_MS)
        .with_validate_only(args.validate_only);
    let response = connection.call(&request, version).await?;
    for result in &response.topics {
        let exists = ResponseError::try_from_code(result.error_code)
            == Some(ResponseError::TopicAlreadyExists);
        if args.if_not_exists && exists {
            outln!("Topic {} already exists.", args.topic);
            return Ok(());
        }
        check_error(
            ApiKey::CreateTopics,
            result.error_code,
            message(&result.error_message),
        )
        .with_context(|| format!("cannot create topic {}", args.topic))?;
    }
    if args.validate_only {
        outln!("Topic {} would be created.", args.topic);
    } else {
        outln!("Created topic {}.", args.topic);
    }
    Ok(())
}

async fn list(args: ListArgs) -> anyhow::Result<()> {
    let mut connection = args.connect.connect().await?;
    let response = metadata(&mut connection, None, false).await?;
    let mut names: Vec<&str> = response
        .topics
        .iter()
        .filter_map(|t| t.name.as_ref().map(|n| n.0.as_str()))
        .collect();
    names.sort_unstable();
    let mut out = String::new();
    for name in names {
        let _ = writeln!(out, "{name}");
    }
    out!("{out}");
    Ok(())
}

async fn describe(args: DescribeArgs) -> anyhow::Result<()> {
    let mut connection = args.connect.connect().await?;
    let wanted = (!args.topics.is_empty()).then_some(&args.topics[..]);
    let response = metadata(&mut connection, wanted, false).await?;
    let mut topics: Vec<_> = response.topics.iter().collect();
    topics.sort_by(|a, b| a.name.cmp(&b.name));
    let mut out = String::new();
    for topic in topics {
        let name = topic.name.as_ref().map(|n| n.0.as_str()).unwrap_or("");
        check_error(ApiKey::Metadata, topic.error_code, None)
            .with_context(|| format!("cannot describe topic {name}"))?;
        let configs = describe_configs(&mut connection, name, args.all_configs).await?;
        let replication_factor = topic
            .partitions
            .iter()
            .map(|p| p.replica_nodes.len())
            .max()
            .unwrap_or(0);
        let configs_text: Vec<String> = configs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(
            out,
            "Topic: {name}\tPartitionCount: {}\tReplicationFactor: {replication_factor}\tConfigs: {}",
            topic.partitions.len(),
            configs_text.join(",")
        );
        let mut partitions: Vec<_> = topic.partitions.iter().collect();
        partitions.sort_by_key(|p| p.partition_index);
        let readable: Vec<i32> = partitions
            .iter()
            .filter(|p| p.error_code == ERROR_NONE && p.leader_id.0 >= 0)
            .map(|p| p.partition_index)
            .collect();
        let (starts, ends) = if readable.is_empty() {
            Default::default()
        } else {
            (
                list_topic_offsets(&mut connection, name, &readable, EARLIEST).await?,
                list_topic_offsets(&mut connection, name, &readable, LATEST).await?,
            )
        };
        for partition in partitions {
            let ids = |nodes: &[kafka_protocol::messages::BrokerId]| {
                nodes
                    .iter()
                    .map(|n| n.0.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            };
            let _ = write!(
                out,
                "\tTopic: {name}\tPartition: {}\tLeader: {}\tReplicas: {}\tIsr: {}",
                partition.partition_index,
                if partition.leader_id.0 < 0 {
                    "none".to_string()
                } else {
                    partition.leader_id.0.to_string()
                },
                ids(&partition.replica_nodes),
                ids(&partition.isr_nodes),
            );
            // Only when some are (a single node has none): the line stays
            // as Kafka's tool prints a healthy partition.
            if !partition.offline_replicas.is_empty() {
                let _ = write!(out, "\tOffline: {}", ids(&partition.offline_replicas));
            }
            if let (Some(start), Some(end)) = (
                starts.get(&partition.partition_index),
                ends.get(&partition.partition_index),
            ) {
                let _ = write!(out, "\tStartOffset: {start}\tEndOffset: {end}");
            }
            if partition.error_code != ERROR_NONE {
                let _ = write!(
                    out,
                    "\tError: {}",
                    protocol::client::error_name(partition.error_code)
                );
            }
            out.push('\n');
        }
    }
    out!("{out}");
    Ok(())
}

/// The topic's config overrides (or every config with `all`), by name.
async fn describe_configs(
    connection: &mut Connection,
    topic: &str,
    all: bool,
) -> anyhow::Result<BTreeMap<String, String>> {
    let version = connection.version::<DescribeConfigsRequest>(DESCRIBE_CONFIGS_VERSIONS)?;
    let request =
        DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(RESOURCE_TOPIC)
            .with_resource_name(text(topic))
            .with_configuration_keys(None)]);
    let response = connection.call(&request, version).await?;
    let mut configs = BTreeMap::new();
    for result in &response.results {
        check_error(
            ApiKey::DescribeConfigs,
            result.error_code,
            message(&result.error_message),
        )
        .with_context(|| format!("cannot describe configs of topic {topic}"))?;
        for config in &result.configs {
            if !all && config.config_source != CONFIG_SOURCE_DYNAMIC_TOPIC {
                continue;
            }
            let value = if config.is_sensitive {
                "(sensitive)".to_string()
            } else {
                config
                    .value
                    .as_ref()
                    .map(|v| v.as_str().to_string())
                    .unwrap_or_else(|| "null".to_string())
            };
            configs.insert(config.name.as_str().to_string(), value);
        }
    }
    Ok(configs)
}

async fn alter(args: AlterArgs) -> anyhow::Result<()> {
    if args.configs.is_empty() && args.delete_configs.is_empty() && args.partitions.is_none() {
        bail!("nothing to change: give --config, --delete-config or --partitions");
    }
    let mut connection = args.connect.connect().await?;
    if !args.configs.is_empty() || !args.delete_configs.is_empty() {
        let version =
            connection.version::<IncrementalAlterConfigsRequest>(INCREMENTAL_ALTER_VERSIONS)?;
        let mut changes: Vec<AlterableConfig> = args
            .configs
            .iter()
            .map(|(key, value)| {
                AlterableConfig::default()
                    .with_name(text(key))
                    .with_config_operation(OP_SET)
                    .with_value(Some(text(value)))
            })
            .collect();
        changes.extend(args.delete_configs.iter().map(|key| {
            AlterableConfig::default()
                .with_name(text(key))
                .with_config_operation(OP_DELETE)
                .with_value(None)
        }));
        let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(RESOURCE_TOPIC)
                .with_resource_name(text(&args.topic))
                .with_configs(changes),
        ]);
        let response = connection.call(&request, version).await?;
        for result in &response.responses {
            check_error(
                ApiKey::IncrementalAlterConfigs,
                result.error_code,
                message(&result.error_message),
            )
            .with_context(|| format!("cannot change configs of topic {}", args.topic))?;
        }
        outln!("Updated configs of topic {}.", args.topic);
    }
    if let Some(count) = args.partitions {
        let version = connection.version::<CreatePartitionsRequest>(CREATE_PARTITIONS_VERSIONS)?;
        let request = CreatePartitionsRequest::default()
            .with_topics(vec![CreatePartitionsTopic::default()
                .with_name(topic_name(&args.topic))
                .with_count(count)
                .with_assignments(None)])
            .with_timeout_ms(ADMIN_TIMEOUT_MS);
        let response = connection.call(&request, version).await?;
        for result in &response.results {
            check_error(
                ApiKey::CreatePartitions,
                result.error_code,
                message(&result.error_message),
            )
            .with_context(|| format!("cannot add partitions to topic {}", args.topic))?;
        }
        outln!("Topic {} now has {count} partitions.", args.topic);
    }
    Ok(())
}

async fn delete(args: DeleteArgs) -> anyhow::Result<()> {
    let mut connection = args.connect.connect().await?;
    let version = connection.version::<DeleteTopicsRequest>(DELETE_TOPICS_VERSIONS)?;
    let mut request = DeleteTopicsRequest::default().with_timeout_ms(ADMIN_TIMEOUT_MS);
    if version >= 6 {
        request.topics = args
            .topics
            .iter()
            .map(|name| DeleteTopicState::default().with_name(Some(topic_name(name))))
            .collect();
    } else {
        request.topic_names = args.topics.iter().map(|name| topic_name(name)).collect();
    }
    let response = connection.call(&request, version).await?;
    let mut failures = Vec::new();
    for result in &response.responses {
        let name = result.name.as_ref().map(|n| n.0.as_str()).unwrap_or("?");
        match check_error(
            ApiKey::DeleteTopics,
            result.error_code,
            message(&result.error_message),
        ) {
            Ok(()) => outln!("Deleted topic {name}."),
            Err(error) => failures.push(format!("cannot delete topic {name}: {error}")),
        }
    }
    if !failures.is_empty() {
        bail!("{}", failures.join("; "));
    }
    Ok(())
}

/// ElectLeaders; prints each partition's result and fails if any partition
/// could not get the leader asked for (ELECTION_NOT_NEEDED is fine).
async fn elect_leaders(args: ElectArgs) -> anyhow::Result<()> {
    use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
    use kafka_protocol::messages::ElectLeadersRequest;
    if !args.partition.is_empty() && args.topics.len() != 1 {
        bail!("--partition needs exactly one topic");
    }
    let mut connection = args.connect.connect().await?;
    let version = connection.version::<ElectLeadersRequest>(0..=2)?;
    if args.unclean && version == 0 {
        bail!("the broker does not support unclean elections (ElectLeaders v0 only)");
    }
    let topic_partitions = if args.topics.is_empty() {
        None
    } else {
        let known = partitions_of(&mut connection, &args.topics).await?;
        Some(
            known
                .into_iter()
                .map(|(name, all)| {
                    let partitions = if args.partition.is_empty() {
                        all
                    } else {
                        args.partition.clone()
                    };
                    TopicPartitions::default()
                        .with_topic(topic_name(&name))
                        .with_partitions(partitions)
                })
                .collect(),
        )
    };
    let request = ElectLeadersRequest::default()
        .with_election_type(i8::from(args.unclean))
        .with_topic_partitions(topic_partitions)
        .with_timeout_ms(ADMIN_TIMEOUT_MS);
    let response = connection.call(&request, version).await?;
    check_error(ApiKey::ElectLeaders, response.error_code, None)?;
    let mut failures = Vec::new();
    let mut lines = Vec::new();
    for topic in &response.replica_election_results {
        for result in &topic.partition_result {
            let outcome = match result.error_code {
                ERROR_NONE => "elected".to_string(),
                code if code == ELECTION_NOT_NEEDED => "unchanged (leads already)".to_string(),
                code => {
                    let name = protocol::client::error_name(code);
                    failures.push(format!("{}-{}: {name}", topic.topic.0, result.partition_id));
                    name
                }
            };
            lines.push(format!(
                "{}\t{}\t{outcome}",
                topic.topic.0, result.partition_id
            ));
        }
    }
    lines.sort();
    for line in lines {
        outln!("{line}");
    }
    if !failures.is_empty() {
        bail!("no leader elected for {}", failures.join(", "));
    }
    Ok(())
}

const ALTER_REASSIGNMENTS_VERSIONS: std::ops::RangeInclusive<i16> = 0..=1;
/// How often `reassign --wait` asks whether the moves are done.
const REASSIGN_POLL: std::time::Duration = std::time::Duration::from_millis(500);

/// AlterPartitionReassignments for the partitions asked (all of the
/// topic's by default); prints each one's outcome, then with --wait polls
/// ListPartitionReassignments until none of them is moving.
async fn reassign(args: ReassignArgs) -> anyhow::Result<()> {
    use kafka_protocol::messages::alter_partition_reassignments_request::{
        ReassignablePartition, ReassignableTopic,
    };
    use kafka_protocol::messages::{AlterPartitionReassignmentsRequest, BrokerId};
    let mut connection = args.connect.connect().await?;
    let version =
        connection.version::<AlterPartitionReassignmentsRequest>(ALTER_REASSIGNMENTS_VERSIONS)?;
    let partitions = if args.partition.is_empty() {
        let mut known = partitions_of(&mut connection, std::slice::from_ref(&args.topic)).await?;
        known.pop().map(|(_, all)| all).unwrap_or_default()
    } else {
        args.partition.clone()
    };
    let target = (!args.cancel).then(|| {
        args.replicas
            .iter()
            .map(|&id| BrokerId(id))
            .collect::<Vec<_>>()
    });
    let request = AlterPartitionReassignmentsRequest::default()
        .with_timeout_ms(ADMIN_TIMEOUT_MS)
        .with_allow_replication_factor_change(true)
        .with_topics(vec![ReassignableTopic::default()
            .with_name(topic_name(&args.topic))
            .with_partitions(
                partitions
                    .iter()
                    .map(|&p| {
                        ReassignablePartition::default()
                            .with_partition_index(p)
                            .with_replicas(target.clone())
                    })
                    .collect(),
            )]);
    let response = connection.call(&request, version).await?;
    check_error(
        ApiKey::AlterPartitionReassignments,
        response.error_code,
        response.error_message.as_deref(),
    )?;
    let mut failures = Vec::new();
    for topic in &response.responses {
        for result in &topic.partitions {
            let outcome = if result.error_code == ERROR_NONE {
                if args.cancel { "cancelled" } else { "moving" }.to_string()
            } else {
                let reason = format!(
                    "{}{}",
                    protocol::client::error_name(result.error_code),
                    result
                        .error_message
                        .as_ref()
                        .map(|m| format!(": {m}"))
                        .unwrap_or_default()
                );
                failures.push(format!(
                    "{}-{}: {reason}",
                    topic.name.0, result.partition_index
                ));
                reason
            };
            outln!("{}\t{}\t{outcome}", topic.name.0, result.partition_index);
        }
    }
    if !failures.is_empty() {
        bail!("not reassigned: {}", failures.join("; "));
    }
    let Some(seconds) = args.wait else {
        return Ok(());
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(seconds);
    loop {
        let moving = list_reassignments(&mut connection, Some(std::slice::from_ref(&args.topic)))
            .await?
            .into_iter()
            .filter(|(_, p, _)| partitions.contains(p))
            .count();
        if moving == 0 {
            outln!("done");
            return Ok(());
        }
        if std::time::Instant::now() >= deadline {
            bail!(
                "{moving} partition(s) of {} still moving after {seconds} s (see `strom topic reassignments {}`)",
                args.topic,
                args.topic
            );
        }
        glommio::timer::sleep(REASSIGN_POLL).await;
    }
}

/// One partition being reassigned: topic, partition, and its replicas,
/// those being added and those leaving.
type Moving = (String, i32, [Vec<i32>; 3]);

/// ListPartitionReassignments for `topics` (every partition of each), or
/// for every topic.
async fn list_reassignments(
    connection: &mut Connection,
    topics: Option<&[String]>,
) -> anyhow::Result<Vec<Moving>> {
    use kafka_protocol::messages::list_partition_reassignments_request::ListPartitionReassignmentsTopics;
    use kafka_protocol::messages::ListPartitionReassignmentsRequest;
    let version = connection.version::<ListPartitionReassignmentsRequest>(0..=0)?;
    let wanted = match topics {
        None => None,
        Some(topics) => Some(
            partitions_of(connection, topics)
                .await?
                .into_iter()
                .map(|(name, partitions)| {
                    ListPartitionReassignmentsTopics::default()
                        .with_name(topic_name(&name))
                        .with_partition_indexes(partitions)
                })
                .collect(),
        ),
    };
    let request = ListPartitionReassignmentsRequest::default()
        .with_timeout_ms(ADMIN_TIMEOUT_MS)
        .with_topics(wanted);
    let response = connection.call(&request, version).await?;
    check_error(
        ApiKey::ListPartitionReassignments,
        response.error_code,
        response.error_message.as_deref(),
    )?;
    let ids =
        |ids: &[kafka_protocol::messages::BrokerId]| ids.iter().map(|b| b.0).collect::<Vec<_>>();
    let mut moving: Vec<Moving> = response
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                (
                    t.name.0.to_string(),
                    p.partition_index,
                    [
                        ids(&p.replicas),
                        ids(&p.adding_replicas),
                        ids(&p.removing_replicas),
                    ],
                )
            })
        })
        .collect();
    moving.sort();
    Ok(moving)
}

/// Prints the partitions being reassigned, one per line.
async fn reassignments(args: ReassignmentsArgs) -> anyhow::Result<()> {
    let mut connection = args.connect.connect().await?;
    let topics = (!args.topics.is_empty()).then_some(args.topics.as_slice());
    let moving = list_reassignments(&mut connection, topics).await?;
    if moving.is_empty() {
        outln!("no partition is being reassigned");
        return Ok(());
    }
    let list = |ids: &[i32]| ids.iter().map(i32::to_string).collect::<Vec<_>>().join(",");
    outln!("TOPIC\tPARTITION\tREPLICAS\tADDING\tREMOVING");
    for (topic, partition, [replicas, adding, removing]) in moving {
        outln!(
            "{topic}\t{partition}\t{}\t{}\t{}",
            list(&replicas),
            list(&adding),
            list(&removing)
        );
    }
    Ok(())
}

/// Each of `topics` with its partition indexes (ascending), from Metadata;
/// fails naming the first topic the broker does not have.
async fn partitions_of(
    connection: &mut Connection,
    topics: &[String],
) -> anyhow::Result<Vec<(String, Vec<i32>)>> {
    let metadata = metadata(connection, Some(topics), false).await?;
    let mut known = Vec::with_capacity(metadata.topics.len());
    for topic in &metadata.topics {
        let name = topic
            .name
            .as_ref()
            .map(|n| n.0.to_string())
            .unwrap_or_default();
        check_error(ApiKey::Metadata, topic.error_code, None)
            .with_context(|| format!("topic {name}"))?;
        let mut partitions: Vec<i32> = topic.partitions.iter().map(|p| p.partition_index).collect();
        partitions.sort_unstable();
        known.push((name, partitions));
    }
    Ok(known)
}

/// Kafka's ELECTION_NOT_NEEDED: the partition has the leader asked for.
const ELECTION_NOT_NEEDED: i16 = 84;
