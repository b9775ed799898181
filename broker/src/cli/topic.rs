//! `strom topic create|list|describe|alter|delete|delete-records`: topic
//! administration with CreateTopics, Metadata, DescribeConfigs,
//! IncrementalAlterConfigs, CreatePartitions, DeleteTopics and
//! DeleteRecords. Requests answered with an error
//! Kafka calls retriable (NOT_CONTROLLER while a controller is elected, a
//! new partition's leader that does not know it yet) are sent again
//! within `--timeout-ms`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use anyhow::{bail, Context};
use clap::{ArgGroup, Args, Subcommand};
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{
    ApiKey, CreatePartitionsRequest, CreateTopicsRequest, DeleteTopicsRequest,
    DescribeConfigsRequest, IncrementalAlterConfigsRequest, MetadataResponse,
};
use kafka_protocol::protocol::StrBytes;
use protocol::client::{check_error, error_name, Connection, ERROR_NONE};
use protocol::kafka_protocol::error::ResponseError;
use serde::Serialize;

use protocol::admin::{
    metadata, topic_name, OffsetAnswers, OffsetFailure, Router, TopicPartition, EARLIEST, LATEST,
};

use super::format::{print_json_object, Format};
use super::retry::{admin_retriable, call_admin, Retry};
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
/// The topic config `--under-min-isr-partitions` and
/// `--at-min-isr-partitions` compare the in-sync replicas with.
const MIN_INSYNC_REPLICAS: &str = "min.insync.replicas";
const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;

#[derive(Args, Debug)]
pub struct TopicArgs {
    #[command(subcommand)]
    command: TopicCommand,
}

#[derive(Subcommand, Debug)]
enum TopicCommand {
    /// Create a topic. NOT_CONTROLLER (a controller being elected) and
    /// Kafka's other retriable errors are retried within --timeout-ms.
    Create(CreateArgs),
    /// List the names of all topics, one per line.
    List(ListArgs),
    /// Show partitions (leader, replicas, in-sync replicas, offline
    /// replicas, start and end offsets as the leaders report them) and
    /// configs of topics. A partition whose leader answers a retriable
    /// error (a new partition's leader that does not know it yet) is asked
    /// again within --timeout-ms; one that still fails shows `Error:` on
    /// its line, the others are listed all the same.
    Describe(DescribeArgs),
    /// Change topic configs or add partitions.
    Alter(AlterArgs),
    /// Delete topics and all their data.
    Delete(DeleteArgs),
    /// Delete the records of partitions below an offset, which becomes
    /// each partition's log start offset (as kafka-delete-records.sh):
    /// consumers can no longer read below it (OFFSET_OUT_OF_RANGE; from
    /// the beginning means from there), and whole segments below it are
    /// removed from disk. Either a topic with --partition and --before,
    /// or --offset-json-file. Prints each partition's low watermark, its
    /// log start once the in-sync replicas have it. Fails (exit 1) on a
    /// bad file, an unknown topic or partition, an offset above the high
    /// watermark (OFFSET_OUT_OF_RANGE); NOT_LEADER_OR_FOLLOWER and Kafka's
    /// other retriable errors are retried within --timeout-ms.
    DeleteRecords(DeleteRecordsArgs),
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
    /// Leave out internal topics (those Metadata marks internal, such as
    /// __consumer_offsets).
    #[arg(long)]
    exclude_internal: bool,
    /// How to print: `text`, one name per line, or `json`:
    /// {"topics": [NAME, ...]}.
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = Format::Text)]
    format: Format,
    #[command(flatten)]
    connect: ConnectArgs,
}

#[derive(Args, Debug)]
#[command(group(ArgGroup::new("only").multiple(false).args([
    "under_replicated_partitions",
    "unavailable_partitions",
    "under_min_isr_partitions",
    "at_min_isr_partitions",
])))]
struct DescribeArgs {
    /// Topics to describe [default: every topic].
    topics: Vec<String>,
    /// Show every config with its value, not only the topic's overrides.
    #[arg(long)]
    all_configs: bool,
    /// Only the partitions with fewer in-sync replicas than replicas,
    /// without the topic lines (as kafka-topics.sh).
    #[arg(long)]
    under_replicated_partitions: bool,
    /// Only the partitions without a live leader (none, or a broker
    /// Metadata does not list as live), without the topic lines.
    #[arg(long)]
    unavailable_partitions: bool,
    /// Only the partitions with fewer in-sync replicas than the topic's
    /// min.insync.replicas (acks=all produce is refused) or no leader,
    /// without the topic lines.
    #[arg(long)]
    under_min_isr_partitions: bool,
    /// Only the partitions with exactly min.insync.replicas in-sync
    /// replicas (one more loss and acks=all produce is refused), without
    /// the topic lines.
    #[arg(long)]
    at_min_isr_partitions: bool,
    /// Leave out internal topics (those Metadata marks internal, such as
    /// __consumer_offsets).
    #[arg(long)]
    exclude_internal: bool,
    /// How to print: `text` (kafka-topics.sh's layout) or `json`:
    /// {"topics": [{"name", "internal", "partition_count",
    /// "replication_factor", "configs": {NAME: VALUE}, "partitions":
    /// [{"partition", "leader", "replicas", "isr", "offline",
    /// "start_offset", "end_offset", "error"}]}]} (null: none).
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = Format::Text)]
    format: Format,
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
#[command(group(ArgGroup::new("what").required(true).args(["topic", "offset_json_file"])))]
struct DeleteRecordsArgs {
    /// The topic whose records to delete (with --partition and --before).
    #[arg(requires_all = ["partition", "before"])]
    topic: Option<String>,
    /// A partition of the topic (repeatable).
    #[arg(long, value_name = "N", requires = "topic")]
    partition: Vec<i32>,
    /// Delete every record below this offset; -1: every record below the
    /// high watermark (all that consumers can read).
    #[arg(
        long,
        value_name = "OFFSET",
        allow_negative_numbers = true,
        requires = "topic"
    )]
    before: Option<i64>,
    /// The partitions and offsets in a JSON file, as
    /// kafka-delete-records.sh takes them:
    /// {"partitions": [{"topic": "t", "partition": 0, "offset": 3}, ...],
    /// "version": 1}.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["topic", "partition", "before"])]
    offset_json_file: Option<std::path::PathBuf>,
    /// How to print: `text` (one line per partition, as
    /// kafka-delete-records.sh) or `json`: {"partitions": [{"topic",
    /// "partition", "low_watermark", "error"}]} (null: none).
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = Format::Text)]
    format: Format,
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
        TopicCommand::DeleteRecords(args) => delete_records(args).await,
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
    let mut retry = Retry::new(&args.connect);
    // An attempt answered REQUEST_TIMED_OUT may still take effect, so that
    // the next one finds the topic there.
    let mut timed_out = false;
    let response = call_admin(&mut connection, &request, version, &mut retry, |response| {
        let codes: Vec<i16> = response.topics.iter().map(|t| t.error_code).collect();
        timed_out |= codes.contains(&ResponseError::RequestTimedOut.code());
        codes
    })
    .await
    .with_context(|| format!("cannot create topic {}", args.topic))?;
    for result in &response.topics {
        let exists = ResponseError::try_from_code(result.error_code)
            == Some(ResponseError::TopicAlreadyExists);
        if args.if_not_exists && exists {
            outln!("Topic {} already exists.", args.topic);
            return Ok(());
        }
        if exists && timed_out && !args.validate_only {
            eprintln!(
                "strom topic: an earlier attempt timed out; topic {} exists now",
                args.topic
            );
            outln!("Created topic {}.", args.topic);
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
    let mut retry = Retry::new(&args.connect);
    let response = loop {
        let attempt = retry
            .settle(metadata(&mut connection, None, false).await)
            .await;
        if let Some(response) = attempt.context("cannot list topics")? {
            break response;
        }
    };
    let mut names: Vec<&str> = response
        .topics
        .iter()
        .filter(|t| !(args.exclude_internal && t.is_internal))
        .filter_map(|t| t.name.as_ref().map(|n| n.0.as_str()))
        .collect();
    names.sort_unstable();
    if args.format == Format::Json {
        return print_json_object("topics", &names);
    }
    let mut out = String::new();
    for name in names {
        let _ = writeln!(out, "{name}");
    }
    out!("{out}");
    Ok(())
}

/// Which partitions `topic describe` shows: kafka-topics.sh's filters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Only {
    Every,
    UnderReplicated,
    Unavailable,
    UnderMinIsr,
    AtMinIsr,
}

impl Only {
    fn of(args: &DescribeArgs) -> Only {
        if args.under_replicated_partitions {
            Only::UnderReplicated
        } else if args.unavailable_partitions {
            Only::Unavailable
        } else if args.under_min_isr_partitions {
            Only::UnderMinIsr
        } else if args.at_min_isr_partitions {
            Only::AtMinIsr
        } else {
            Only::Every
        }
    }

    /// Whether `partition` is shown, `live` being the brokers Metadata
    /// lists and `min_isr` the topic's min.insync.replicas.
    fn keeps(self, partition: &PartitionView, live: &BTreeSet<i32>, min_isr: usize) -> bool {
        let led = partition.leader.is_some_and(|id| live.contains(&id));
        let isr = partition.isr.len();
        match self {
            Only::Every => true,
            Only::UnderReplicated => isr < partition.replicas.len(),
            Only::Unavailable => !led,
            Only::UnderMinIsr => partition.leader.is_none() || isr < min_isr,
            Only::AtMinIsr => partition.leader.is_some() && isr == min_isr,
        }
    }
}

/// A topic as `topic describe` shows it.
#[derive(Debug, Serialize)]
struct TopicView {
    name: String,
    internal: bool,
    partition_count: usize,
    replication_factor: usize,
    /// The overrides, or every config with `--all-configs`.
    configs: BTreeMap<String, String>,
    /// The partitions shown (all, or those the filter keeps).
    partitions: Vec<PartitionView>,
}

/// A partition as `topic describe` shows it.
#[derive(Debug, Serialize)]
struct PartitionView {
    partition: i32,
    leader: Option<i32>,
    replicas: Vec<i32>,
    isr: Vec<i32>,
    offline: Vec<i32>,
    start_offset: Option<i64>,
    end_offset: Option<i64>,
    /// Metadata's error for the partition, else why its leader gave no
    /// offsets.
    error: Option<String>,
}

/// Metadata and each led partition's start and end offsets, asked again
/// (within `--timeout-ms`) while a partition's leader answers a
/// retriable error. A topic the broker does not have fails at once, as
/// with kafka-topics.sh.
async fn partitions_and_offsets(
    connection: &mut Connection,
    wanted: Option<&[String]>,
    retry: &mut Retry,
) -> anyhow::Result<(MetadataResponse, OffsetAnswers, OffsetAnswers)> {
    loop {
        retry.usable(connection).await?;
        let attempt = retry
            .settle(metadata(connection, wanted, false).await)
            .await;
        let Some(response) = attempt.context("cannot describe topics")? else {
            continue;
        };
        let mut unsettled_topic = None;
        for topic in &response.topics {
            let name = topic.name.as_ref().map(|n| n.0.as_str()).unwrap_or("");
            if let Err(error) = check_error(ApiKey::Metadata, topic.error_code, None) {
                let error =
                    anyhow::Error::from(error).context(format!("cannot describe topic {name}"));
                if !admin_retriable(topic.error_code) {
                    return Err(error);
                }
                unsettled_topic = Some(error);
            }
        }
        if let Some(error) = unsettled_topic {
            if retry.pause().await {
                continue;
            }
            return Err(error);
        }
        let live: BTreeSet<i32> = response.brokers.iter().map(|b| b.node_id.0).collect();
        let led: Vec<TopicPartition> = response
            .topics
            .iter()
            .flat_map(|t| {
                let name = t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default();
                t.partitions
                    .iter()
                    .filter(|p| p.error_code == ERROR_NONE && live.contains(&p.leader_id.0))
                    .map(move |p| (name.clone(), p.partition_index))
            })
            .collect();
        let mut router = Router::from_metadata(connection, &response);
        let starts = router.list_offsets_each(connection, &led, EARLIEST).await;
        let ends = router.list_offsets_each(connection, &led, LATEST).await;
        let unsettled = starts
            .values()
            .chain(ends.values())
            .any(|answer| answer.as_ref().is_err_and(OffsetFailure::is_retriable));
        if unsettled && retry.pause().await {
            continue;
        }
        return Ok((response, starts, ends));
    }
}

async fn describe(args: DescribeArgs) -> anyhow::Result<()> {
    let only = Only::of(&args);
    let mut connection = args.connect.connect().await?;
    let mut retry = Retry::new(&args.connect);
    let wanted = (!args.topics.is_empty()).then_some(&args.topics[..]);
    let (response, starts, ends) =
        partitions_and_offsets(&mut connection, wanted, &mut retry).await?;
    let live: BTreeSet<i32> = response.brokers.iter().map(|b| b.node_id.0).collect();
    let mut topics: Vec<_> = response
        .topics
        .iter()
        .filter(|t| !(args.exclude_internal && t.is_internal))
        .collect();
    topics.sort_by(|a, b| a.name.cmp(&b.name));
    let names: Vec<String> = topics
        .iter()
        .map(|t| t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default())
        .collect();
    retry.usable(&mut connection).await?;
    let mut configs = topic_configs(&mut connection, &names, &mut retry).await?;
    let ids = |nodes: &[kafka_protocol::messages::BrokerId]| -> Vec<i32> {
        nodes.iter().map(|n| n.0).collect()
    };
    let mut views = Vec::with_capacity(topics.len());
    for (topic, name) in topics.into_iter().zip(names) {
        let all = configs.remove(&name).unwrap_or_default();
        let min_isr = all
            .get(MIN_INSYNC_REPLICAS)
            .and_then(|(value, _)| value.parse::<usize>().ok())
            .unwrap_or(1);
        let shown = all
            .into_iter()
            .filter(|(_, (_, source))| args.all_configs || *source == CONFIG_SOURCE_DYNAMIC_TOPIC)
            .map(|(key, (value, _))| (key, value))
            .collect();
        let mut partitions: Vec<PartitionView> = topic
            .partitions
            .iter()
            .map(|p| {
                let key = (name.clone(), p.partition_index);
                let start = starts.get(&key);
                let end = ends.get(&key);
                let offset_failure = [start, end]
                    .into_iter()
                    .flatten()
                    .find_map(|answer| answer.as_ref().err());
                let error = if p.error_code != ERROR_NONE {
                    Some(error_name(p.error_code))
                } else {
                    offset_failure.map(ToString::to_string)
                };
                let both = match (start, end) {
                    (Some(Ok(start)), Some(Ok(end))) => Some((*start, *end)),
                    _ => None,
                };
                PartitionView {
                    partition: p.partition_index,
                    leader: (p.leader_id.0 >= 0).then_some(p.leader_id.0),
                    replicas: ids(&p.replica_nodes),
                    isr: ids(&p.isr_nodes),
                    offline: ids(&p.offline_replicas),
                    start_offset: both.map(|(start, _)| start),
                    end_offset: both.map(|(_, end)| end),
                    error,
                }
            })
            .collect();
        partitions.sort_by_key(|p| p.partition);
        let partition_count = partitions.len();
        let replication_factor = partitions
            .iter()
            .map(|p| p.replicas.len())
            .max()
            .unwrap_or(0);
        partitions.retain(|p| only.keeps(p, &live, min_isr));
        if only != Only::Every && partitions.is_empty() {
            continue;
        }
        views.push(TopicView {
            name,
            internal: topic.is_internal,
            partition_count,
            replication_factor,
            configs: shown,
            partitions,
        });
    }
    if args.format == Format::Json {
        return print_json_object("topics", &views);
    }
    out!("{}", describe_text(&views, only));
    Ok(())
}

/// kafka-topics.sh's layout: a topic line (not with a filter), then one
/// line per partition, with the start and end offsets.
fn describe_text(views: &[TopicView], only: Only) -> String {
    let list = |ids: &[i32]| ids.iter().map(i32::to_string).collect::<Vec<_>>().join(",");
    let mut out = String::new();
    for topic in views {
        let name = &topic.name;
        if only == Only::Every {
            let configs: Vec<String> = topic
                .configs
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            let _ = writeln!(
                out,
                "Topic: {name}\tPartitionCount: {}\tReplicationFactor: {}\tConfigs: {}",
                topic.partition_count,
                topic.replication_factor,
                configs.join(",")
            );
        }
        for partition in &topic.partitions {
            let _ = write!(
                out,
                "\tTopic: {name}\tPartition: {}\tLeader: {}\tReplicas: {}\tIsr: {}",
                partition.partition,
                partition
                    .leader
                    .map_or_else(|| "none".to_string(), |id| id.to_string()),
                list(&partition.replicas),
                list(&partition.isr),
            );
            // Only when some are (a single node has none): the line stays
            // as Kafka's tool prints a healthy partition.
            if !partition.offline.is_empty() {
                let _ = write!(out, "\tOffline: {}", list(&partition.offline));
            }
            if let (Some(start), Some(end)) = (partition.start_offset, partition.end_offset) {
                let _ = write!(out, "\tStartOffset: {start}\tEndOffset: {end}");
            }
            if let Some(error) = &partition.error {
                let _ = write!(out, "\tError: {error}");
            }
            out.push('\n');
        }
    }
    out
}

/// One config of a topic: its value (`(sensitive)` when secret) and
/// where it comes from (DescribeConfigs' config source).
type ConfigValue = (String, i8);

/// Every config of each of `topics` (one DescribeConfigs), by topic and
/// name.
async fn topic_configs(
    connection: &mut Connection,
    topics: &[String],
    retry: &mut Retry,
) -> anyhow::Result<BTreeMap<String, BTreeMap<String, ConfigValue>>> {
    let mut configs = BTreeMap::new();
    if topics.is_empty() {
        return Ok(configs);
    }
    let version = connection.version::<DescribeConfigsRequest>(DESCRIBE_CONFIGS_VERSIONS)?;
    let request = DescribeConfigsRequest::default().with_resources(
        topics
            .iter()
            .map(|topic| {
                DescribeConfigsResource::default()
                    .with_resource_type(RESOURCE_TOPIC)
                    .with_resource_name(text(topic))
                    .with_configuration_keys(None)
            })
            .collect(),
    );
    let response = call_admin(connection, &request, version, retry, |response| {
        response.results.iter().map(|r| r.error_code).collect()
    })
    .await
    .context("cannot describe the topics' configs")?;
    for result in &response.results {
        let topic = result.resource_name.as_str();
        check_error(
            ApiKey::DescribeConfigs,
            result.error_code,
            message(&result.error_message),
        )
        .with_context(|| format!("cannot describe configs of topic {topic}"))?;
        let mut of_topic = BTreeMap::new();
        for config in &result.configs {
            let value = if config.is_sensitive {
                "(sensitive)".to_string()
            } else {
                config
                    .value
                    .as_ref()
                    .map(|v| v.as_str().to_string())
                    .unwrap_or_else(|| "null".to_string())
            };
            of_topic.insert(
                config.name.as_str().to_string(),
                (value, config.config_source),
            );
        }
        configs.insert(topic.to_string(), of_topic);
    }
    Ok(configs)
}

async fn alter(args: AlterArgs) -> anyhow::Result<()> {
    if args.configs.is_empty() && args.delete_configs.is_empty() && args.partitions.is_none() {
        bail!("nothing to change: give --config, --delete-config or --partitions");
    }
    let mut connection = args.connect.connect().await?;
    let mut retry = Retry::new(&args.connect);
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
        let response = call_admin(&mut connection, &request, version, &mut retry, |response| {
            response.responses.iter().map(|r| r.error_code).collect()
        })
        .await
        .with_context(|| format!("cannot change configs of topic {}", args.topic))?;
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
        let response = call_admin(&mut connection, &request, version, &mut retry, |response| {
            response.results.iter().map(|r| r.error_code).collect()
        })
        .await
        .with_context(|| format!("cannot add partitions to topic {}", args.topic))?;
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
    let mut retry = Retry::new(&args.connect);
    let response = call_admin(&mut connection, &request, version, &mut retry, |response| {
        response.responses.iter().map(|r| r.error_code).collect()
    })
    .await
    .context("cannot delete topics")?;
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

/// The file kafka-delete-records.sh takes (`--offset-json-file`).
#[derive(Debug, serde::Deserialize)]
struct OffsetJsonFile {
    /// Only 1 exists; Kafka's tool takes a file without it as 1.
    version: Option<i64>,
    partitions: Vec<OffsetJsonPartition>,
}

#[derive(Debug, serde::Deserialize)]
struct OffsetJsonPartition {
    topic: String,
    partition: i32,
    offset: i64,
}

/// The partitions and offsets of an offset JSON file, in its order; an
/// error for a file that is not one (or lists a partition twice, as
/// Kafka's tool refuses).
fn parse_offset_json(text: &str) -> anyhow::Result<Vec<(TopicPartition, i64)>> {
    let file: OffsetJsonFile = serde_json::from_str(text)
        .context("not an offset JSON file ({\"partitions\": [{\"topic\", \"partition\", \"offset\"}], \"version\": 1})")?;
    match file.version {
        None | Some(1) => {}
        Some(version) => bail!("version {version} is not supported (only 1)"),
    }
    if file.partitions.is_empty() {
        bail!("it lists no partitions");
    }
    let mut seen = BTreeSet::new();
    let mut wanted = Vec::with_capacity(file.partitions.len());
    for entry in file.partitions {
        let key = (entry.topic, entry.partition);
        if !seen.insert(key.clone()) {
            bail!("it lists {}-{} more than once", key.0, key.1);
        }
        wanted.push((key, entry.offset));
    }
    Ok(wanted)
}

/// One partition's outcome, as `topic delete-records` prints it.
#[derive(Debug, Serialize)]
struct DeletedView {
    topic: String,
    partition: i32,
    low_watermark: Option<i64>,
    error: Option<String>,
}

/// DeleteRecords, each partition sent to its leader; partitions answered
/// with a retriable error (a leader that moved, followers that did not
/// report in time, no leader yet) are sent again within --timeout-ms.
async fn delete_records(args: DeleteRecordsArgs) -> anyhow::Result<()> {
    let wanted: Vec<(TopicPartition, i64)> = match (&args.offset_json_file, &args.topic) {
        (Some(path), _) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            parse_offset_json(&text).with_context(|| format!("{}", path.display()))?
        }
        (None, Some(topic)) => {
            let before = args.before.context("--before is needed with a topic")?;
            let mut partitions = BTreeSet::new();
            for &partition in &args.partition {
                if !partitions.insert(partition) {
                    bail!("--partition {partition} given more than once");
                }
            }
            partitions
                .into_iter()
                .map(|partition| ((topic.clone(), partition), before))
                .collect()
        }
        (None, None) => bail!("name a topic (with --partition and --before) or --offset-json-file"),
    };
    // The broker waits for the followers at most half the time a response
    // may take, so that its answer (perhaps REQUEST_TIMED_OUT, retried)
    // comes before the connection gives up.
    let broker_timeout_ms = (args.connect.timeout_ms / 2).min(ADMIN_TIMEOUT_MS as u64) as i32;
    let mut connection = args.connect.connect().await?;
    let mut retry = Retry::new(&args.connect);
    let topics: Vec<String> = wanted
        .iter()
        .map(|((topic, _), _)| topic.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut answers: BTreeMap<TopicPartition, Result<i64, String>> = BTreeMap::new();
    let mut pending = wanted.clone();
    while !pending.is_empty() {
        retry.usable(&mut connection).await?;
        let attempt = retry
            .settle(metadata(&mut connection, Some(&topics), false).await)
            .await;
        let Some(response) = attempt.context("cannot delete records")? else {
            continue;
        };
        // A topic or partition the broker does not have fails at once.
        let mut known = BTreeSet::new();
        for topic in &response.topics {
            let Some(name) = topic.name.as_ref().map(|n| n.0.to_string()) else {
                continue;
            };
            if topic.error_code == ERROR_NONE {
                known.extend(
                    topic
                        .partitions
                        .iter()
                        .map(|p| (name.clone(), p.partition_index)),
                );
            }
        }
        let (sendable, unknown): (Vec<_>, Vec<_>) = pending
            .into_iter()
            .partition(|(key, _)| known.contains(key));
        for (key, _) in unknown {
            let code = ResponseError::UnknownTopicOrPartition.code();
            answers.insert(key, Err(error_name(code)));
        }
        let mut router = Router::from_metadata(&connection, &response);
        let outcomes = router
            .delete_records_each(&mut connection, &sendable, broker_timeout_ms)
            .await;
        let mut again = Vec::new();
        for (key, offset) in sendable {
            match outcomes.get(&key) {
                Some(Ok(low_watermark)) => {
                    answers.insert(key, Ok(*low_watermark));
                }
                Some(Err(failure))
                    if failure.is_retriable() || matches!(failure, OffsetFailure::NoLeader) =>
                {
                    answers.insert(key.clone(), Err(failure.to_string()));
                    again.push((key, offset));
                }
                Some(Err(failure)) => {
                    answers.insert(key, Err(failure.to_string()));
                }
                None => {
                    answers.insert(key, Err(OffsetFailure::Missing.to_string()));
                }
            }
        }
        if again.is_empty() || !retry.pause().await {
            break;
        }
        pending = again;
    }
    let views: Vec<DeletedView> = wanted
        .iter()
        .map(|((topic, partition), _)| {
            let answer = answers.get(&(topic.clone(), *partition));
            DeletedView {
                topic: topic.clone(),
                partition: *partition,
                low_watermark: answer.and_then(|a| a.as_ref().ok().copied()),
                error: match answer {
                    Some(Err(error)) => Some(error.clone()),
                    Some(Ok(_)) => None,
                    None => Some("not answered".to_string()),
                },
            }
        })
        .collect();
    if args.format == Format::Json {
        print_json_object("partitions", &views)?;
    } else {
        for view in &views {
            match (&view.low_watermark, &view.error) {
                (Some(low), _) => outln!(
                    "partition: {}-{}\tlow_watermark: {low}",
                    view.topic,
                    view.partition
                ),
                (None, error) => outln!(
                    "partition: {}-{}\terror: {}",
                    view.topic,
                    view.partition,
                    error.as_deref().unwrap_or("not answered")
                ),
            }
        }
    }
    let failed: Vec<String> = views
        .iter()
        .filter_map(|v| {
            let error = v.error.as_ref()?;
            let offset = wanted
                .iter()
                .find(|((t, p), _)| *t == v.topic && *p == v.partition)
                .map_or(0, |(_, offset)| *offset);
            Some(format!(
                "{}-{} (before {offset}): {error}",
                v.topic, v.partition
            ))
        })
        .collect();
    if !failed.is_empty() {
        bail!("cannot delete records of {}", failed.join("; "));
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A partition led by `leader` (-1: none).
    fn partition(leader: i32, replicas: &[i32], isr: &[i32]) -> PartitionView {
        PartitionView {
            partition: 0,
            leader: (leader >= 0).then_some(leader),
            replicas: replicas.to_vec(),
            isr: isr.to_vec(),
            offline: Vec::new(),
            start_offset: None,
            end_offset: None,
            error: None,
        }
    }

    #[test]
    fn filters_pick_partitions_as_kafka_topics_does() {
        let live: BTreeSet<i32> = [1, 2].into();
        let filters = [
            Only::Every,
            Only::UnderReplicated,
            Only::Unavailable,
            Only::UnderMinIsr,
            Only::AtMinIsr,
        ];
        // The partition, its topic's min.insync.replicas, and whether each
        // of `filters` keeps it.
        let table = [
            (
                partition(1, &[1, 2, 3], &[1, 2, 3]),
                2,
                [true, false, false, false, false],
            ),
            (
                partition(1, &[1, 2, 3], &[1, 2]),
                2,
                [true, true, false, false, true],
            ),
            (
                partition(2, &[1, 2, 3], &[2]),
                2,
                [true, true, false, true, false],
            ),
            (
                partition(-1, &[3], &[3]),
                1,
                [true, false, true, true, false],
            ),
            // Led by a broker Metadata does not list as live.
            (
                partition(3, &[3], &[3]),
                1,
                [true, false, true, false, true],
            ),
            (
                partition(1, &[1], &[1]),
                1,
                [true, false, false, false, true],
            ),
        ];
        for (row, (partition, min_isr, expected)) in table.iter().enumerate() {
            for (filter, keeps) in filters.iter().zip(expected) {
                assert_eq!(
                    filter.keeps(partition, &live, *min_isr),
                    *keeps,
                    "row {row}, {filter:?}: {partition:?}"
                );
            }
        }
    }
}
