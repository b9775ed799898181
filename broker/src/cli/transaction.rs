//! `strom transaction list | describe ID | describe-producers | abort`:
//! what Kafka's `kafka-transactions.sh` shows and does (KIP-664). `list`
//! asks every broker Metadata names for the transactions its
//! coordinators hold (ListTransactions), `describe` asks the id's
//! coordinator (FindCoordinator key type 1, then DescribeTransactions),
//! `describe-producers` asks a partition's leader for its producers and
//! their open transactions (DescribeProducers), and `abort` ends a
//! hanging transaction on one partition: it finds the producer whose
//! open transaction starts at the offset given (or takes the producer
//! named), then has the leader write an abort marker for it
//! (WriteTxnMarkers). Everything goes through `protocol::client`, so the
//! tools work against any Kafka broker.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;

use anyhow::{bail, Context};
use clap::builder::PossibleValuesParser;
use clap::{Args, Subcommand};
use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{
    ApiKey, DescribeProducersRequest, DescribeTransactionsRequest, FindCoordinatorRequest,
    ListTransactionsRequest, ProducerId, TransactionalId, WriteTxnMarkersRequest,
};
use kafka_protocol::protocol::StrBytes;
use protocol::admin::{metadata, topic_name, Router};
use protocol::client::{
    check_error, error_name, is_retriable_code, ClientError, Connection, ERROR_NONE,
};
use protocol::kafka_protocol::error::ResponseError;
use serde::Serialize;

use super::format::{print_json_object, Format};
use super::retry::{list_on_every_broker, Retry};
use super::ConnectArgs;

const FIND_COORDINATOR_VERSIONS: RangeInclusive<i16> = 1..=3;
const LIST_TRANSACTIONS_VERSIONS: RangeInclusive<i16> = 0..=1;
/// From this ListTransactions version a request can filter on how long
/// transactions have been open.
const LIST_DURATION_FILTER_VERSION: i16 = 1;
const DESCRIBE_TRANSACTIONS_VERSIONS: RangeInclusive<i16> = 0..=0;
const DESCRIBE_PRODUCERS_VERSIONS: RangeInclusive<i16> = 0..=0;
const WRITE_TXN_MARKERS_VERSIONS: RangeInclusive<i16> = 0..=1;
/// FindCoordinator's key type of a transactional id.
const KEY_TYPE_TRANSACTION: i8 = 1;
/// The coordinator epoch an abort carries when DescribeProducers names
/// none (-1), as Kafka's tool sends it.
const COORDINATOR_EPOCH_UNKNOWN_SENT: i32 = 0;

/// Kafka's transaction states, as ListTransactions filters on them.
const STATES: [&str; 8] = [
    "Empty",
    "Ongoing",
    "PrepareCommit",
    "PrepareAbort",
    "CompleteCommit",
    "CompleteAbort",
    "Dead",
    "PrepareEpochFence",
];

/// What `abort --help` ends with.
const ABORT_EXAMPLES: &str = "\
Examples:
  # Which transaction holds orders-0's last stable offset back:
  strom transaction describe-producers --topic orders --partition 0
  # Abort the one that starts at offset 1200 there:
  strom transaction abort --topic orders --partition 0 --start-offset 1200
  # Or name its producer as describe-producers shows it:
  strom transaction abort --topic orders --partition 0 \\
      --producer-id 4000 --producer-epoch 3 --coordinator-epoch 0

Refused, with nothing written: an offset where no open transaction starts, a producer the
leader does not know, one without a transaction open on the partition, or another epoch
than its own.";

#[derive(Args, Debug)]
pub struct TransactionArgs {
    #[command(subcommand)]
    command: TransactionCommand,
}

#[derive(Subcommand, Debug)]
enum TransactionCommand {
    /// List the transactional ids of the whole cluster: id, coordinator
    /// (the broker that listed it), producer id and state, one per line
    /// under a header. Each broker lists only the ids its coordinators
    /// hold, so every broker Metadata names is asked (as
    /// kafka-transactions.sh list does); when one does not answer, the
    /// others' are printed and the tool exits 1 naming it.
    List(ListArgs),
    /// The state of one transactional id at its coordinator: producer id
    /// and epoch, state, timeout, when its transaction started, and the
    /// partitions in it. An unknown id is an error.
    Describe(DescribeArgs),
    /// A partition's producers as its leader knows them: producer id,
    /// epoch, last sequence, last timestamp, the coordinator epoch of its
    /// last marker and the first offset of its open transaction there.
    DescribeProducers(ProducersArgs),
    /// Abort a hanging transaction on one partition (KIP-664): the
    /// leader writes an abort marker for the producer whose transaction
    /// is open there, which moves the partition's last stable offset on
    /// (read_committed consumers read past it) and hides its records.
    /// Meant for a transaction its coordinator no longer ends; one the
    /// coordinator still knows is aborted here only, and its other
    /// partitions are left as they are.
    #[command(after_help = ABORT_EXAMPLES)]
    Abort(AbortArgs),
}

#[derive(Args, Debug)]
struct ListArgs {
    /// Only transactions in this state (repeatable or comma-separated).
    #[arg(
        long = "state",
        value_name = "STATE",
        value_delimiter = ',',
        value_parser = PossibleValuesParser::new(STATES)
    )]
    states: Vec<String>,
    /// Only the transactional ids of this producer id (repeatable or
    /// comma-separated).
    #[arg(
        long = "producer-id",
        value_name = "ID",
        value_delimiter = ',',
        value_parser = clap::value_parser!(i64).range(0..)
    )]
    producer_ids: Vec<i64>,
    /// Only transactions open longer than this, in milliseconds
    /// (ListTransactions v1).
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(i64).range(0..))]
    duration_filter: Option<i64>,
    /// How to print: `text`, a header then
    /// TRANSACTIONAL-ID<TAB>COORDINATOR<TAB>PRODUCER-ID<TAB>STATE per
    /// line, or `json`: {"transactions": [{"transactional_id",
    /// "coordinator", "producer_id", "state"}]}.
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = Format::Text)]
    format: Format,
    #[command(flatten)]
    connect: ConnectArgs,
}

#[derive(Args, Debug)]
struct DescribeArgs {
    /// The transactional id.
    transactional_id: String,
    /// How to print: `text`, a header then one tab-separated line (as
    /// kafka-transactions.sh describe: times in milliseconds, `-` for
    /// none, partitions as TOPIC-PARTITION,...), or `json`:
    /// {"transaction": {"coordinator", "transactional_id", "producer_id",
    /// "producer_epoch", "state", "timeout_ms", "start_time_ms",
    /// "duration_ms", "partitions": [{"topic", "partition"}]}} (null: none).
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = Format::Text)]
    format: Format,
    #[command(flatten)]
    connect: ConnectArgs,
}

#[derive(Args, Debug)]
struct ProducersArgs {
    /// The partition's topic.
    #[arg(long, value_name = "TOPIC")]
    topic: String,
    /// The partition.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i32).range(0..))]
    partition: i32,
    /// How to print: `text`, a header (ProducerId, ProducerEpoch,
    /// LatestCoordinatorEpoch, LastSequence, LastTimestamp,
    /// CurrentTransactionStartOffset, as kafka-transactions.sh) then one
    /// tab-separated line per producer (`-` for none), or `json`:
    /// {"producers": [{"producer_id",
    /// "producer_epoch", "coordinator_epoch", "last_sequence",
    /// "last_timestamp_ms", "current_transaction_start_offset"}]} (null:
    /// none).
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = Format::Text)]
    format: Format,
    #[command(flatten)]
    connect: ConnectArgs,
}

#[derive(Args, Debug)]
#[command(group(
    clap::ArgGroup::new("which").required(true).args(["start_offset", "producer_id"])
))]
struct AbortArgs {
    /// The partition's topic.
    #[arg(long, value_name = "TOPIC")]
    topic: String,
    /// The partition.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i32).range(0..))]
    partition: i32,
    /// The offset the hanging transaction starts at on the partition, as
    /// describe-producers shows it (CurrentTransactionStartOffset): its
    /// producer, epoch and coordinator epoch are taken from there.
    #[arg(long, value_name = "OFFSET", value_parser = clap::value_parser!(i64).range(0..))]
    start_offset: Option<i64>,
    /// The producer whose open transaction to abort (with
    /// --producer-epoch and --coordinator-epoch, instead of
    /// --start-offset).
    #[arg(
        long,
        value_name = "ID",
        value_parser = clap::value_parser!(i64).range(0..),
        requires_all = ["producer_epoch", "coordinator_epoch"]
    )]
    producer_id: Option<i64>,
    /// The producer's epoch on the partition.
    #[arg(
        long,
        value_name = "EPOCH",
        value_parser = clap::value_parser!(i16).range(0..),
        requires = "producer_id"
    )]
    producer_epoch: Option<i16>,
    /// The coordinator epoch the marker carries (describe-producers'
    /// LatestCoordinatorEpoch; 0 when it shows none).
    #[arg(
        long,
        value_name = "EPOCH",
        value_parser = clap::value_parser!(i32).range(0..),
        requires = "producer_id"
    )]
    coordinator_epoch: Option<i32>,
    #[command(flatten)]
    connect: ConnectArgs,
}

pub async fn run(args: TransactionArgs) -> anyhow::Result<()> {
    match args.command {
        TransactionCommand::List(args) => list(&args).await,
        TransactionCommand::Describe(args) => describe(&args).await,
        TransactionCommand::DescribeProducers(args) => describe_producers(&args).await,
        TransactionCommand::Abort(args) => abort(&args).await,
    }
}

fn text(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_string())
}

/// `-` for a value Kafka leaves at -1 (none), else the value.
fn or_dash(value: i64) -> String {
    if value < 0 {
        "-".to_string()
    } else {
        value.to_string()
    }
}

/// A transactional id as ListTransactions lists it.
#[derive(Debug, Clone, Serialize)]
struct Listed {
    transactional_id: String,
    /// The broker that listed it: its coordinator.
    coordinator: i32,
    producer_id: i64,
    state: String,
}

/// What ListTransactions filters on.
#[derive(Debug, Clone, Default)]
struct Filter {
    states: Vec<String>,
    producer_ids: Vec<i64>,
    duration_ms: Option<i64>,
}

/// The transactions of every broker Metadata names (each lists only what
/// its coordinators hold), by transactional id, and the brokers that did
/// not answer, with why. A broker answering a retriable error (a
/// coordinator loading) is asked again within `--timeout-ms`.
async fn list_everywhere(
    connect: &ConnectArgs,
    filter: &Filter,
) -> anyhow::Result<(BTreeMap<String, Listed>, Vec<String>)> {
    list_on_every_broker(
        connect,
        "strom transaction",
        "transactions",
        |listed: &Listed| listed.transactional_id.clone(),
        async |router, bootstrap, id, retry| list_of(router, bootstrap, id, filter, retry).await,
    )
    .await
}

/// ListTransactions of broker `id`, asked again while it answers a
/// retriable error and `retry` allows.
async fn list_of(
    router: &mut Router,
    bootstrap: &mut Connection,
    id: i32,
    filter: &Filter,
    retry: &mut Retry,
) -> anyhow::Result<Vec<Listed>> {
    loop {
        let connection = router.connection(bootstrap, id).await?;
        let version = connection.version::<ListTransactionsRequest>(LIST_TRANSACTIONS_VERSIONS)?;
        let mut request = ListTransactionsRequest::default()
            .with_state_filters(filter.states.iter().map(|s| text(s)).collect())
            .with_producer_id_filters(filter.producer_ids.iter().map(|&p| ProducerId(p)).collect());
        if let Some(duration_ms) = filter.duration_ms {
            if version < LIST_DURATION_FILTER_VERSION {
                bail!("the broker cannot filter on duration (ListTransactions v{version})");
            }
            request = request.with_duration_filter(duration_ms);
        }
        let response = connection.call(&request, version).await?;
        if is_retriable_code(response.error_code) && retry.pause().await {
            continue;
        }
        check_error(ApiKey::ListTransactions, response.error_code, None)?;
        if !response.unknown_state_filters.is_empty() {
            let unknown: Vec<&str> = response
                .unknown_state_filters
                .iter()
                .map(|s| s.as_str())
                .collect();
            bail!("the broker knows no state {}", unknown.join(", "));
        }
        return Ok(response
            .transaction_states
            .iter()
            .map(|t| Listed {
                transactional_id: t.transactional_id.0.to_string(),
                coordinator: id,
                producer_id: t.producer_id.0,
                state: t.transaction_state.to_string(),
            })
            .collect());
    }
}

fn incomplete(failures: &[String]) -> anyhow::Result<()> {
    super::retry::incomplete("transactions", failures)
}

async fn list(args: &ListArgs) -> anyhow::Result<()> {
    let filter = Filter {
        states: args.states.clone(),
        producer_ids: args.producer_ids.clone(),
        duration_ms: args.duration_filter,
    };
    let (listed, failures) = list_everywhere(&args.connect, &filter).await?;
    if args.format == Format::Json {
        let transactions: Vec<&Listed> = listed.values().collect();
        print_json_object("transactions", &transactions)?;
        return incomplete(&failures);
    }
    let mut out = String::from("TransactionalId\tCoordinator\tProducerId\tTransactionState\n");
    for t in listed.values() {
        out.push_str(&format!(
            "{}\t{}\t{}\t{}\n",
            t.transactional_id, t.coordinator, t.producer_id, t.state
        ));
    }
    out!("{out}");
    incomplete(&failures)
}

/// One partition of a transaction.
#[derive(Debug, Serialize)]
struct TopicPartitionView {
    topic: String,
    partition: i32,
}

/// A transactional id as `transaction describe` shows it.
#[derive(Debug, Serialize)]
struct Described {
    coordinator: i32,
    transactional_id: String,
    producer_id: i64,
    producer_epoch: i16,
    state: String,
    timeout_ms: i32,
    start_time_ms: Option<i64>,
    /// How long its transaction has been open, by this host's clock.
    duration_ms: Option<i64>,
    partitions: Vec<TopicPartitionView>,
}

/// The broker coordinating `transactional_id` (FindCoordinator key type
/// 1): its id and a connection to it, asked again while the answer is
/// retriable (the coordinator's partition being created or loaded).
async fn coordinator(
    connect: &ConnectArgs,
    transactional_id: &str,
    retry: &mut Retry,
) -> anyhow::Result<(i32, Connection)> {
    let mut bootstrap = connect.connect().await?;
    loop {
        retry.usable(&mut bootstrap).await?;
        let version = bootstrap.version::<FindCoordinatorRequest>(FIND_COORDINATOR_VERSIONS)?;
        let request = FindCoordinatorRequest::default()
            .with_key(text(transactional_id))
            .with_key_type(KEY_TYPE_TRANSACTION);
        let Some(found) = retry
            .settle(bootstrap.call(&request, version).await)
            .await?
        else {
            continue;
        };
        if is_retriable_code(found.error_code) && retry.pause().await {
            continue;
        }
        check_error(
            ApiKey::FindCoordinator,
            found.error_code,
            found.error_message.as_deref(),
        )
        .with_context(|| {
            format!("cannot find the coordinator of transactional id {transactional_id}")
        })?;
        let address = format!("{}:{}", found.host.as_str(), found.port);
        if address == bootstrap.address() {
            return Ok((found.node_id.0, bootstrap));
        }
        return Ok((found.node_id.0, connect.to(address).connect().await?));
    }
}

async fn describe(args: &DescribeArgs) -> anyhow::Result<()> {
    let id = args.transactional_id.as_str();
    if id.is_empty() {
        bail!("a transactional id cannot be empty");
    }
    let mut retry = Retry::new(&args.connect);
    let state = loop {
        let (coordinator_id, mut coordinator) = coordinator(&args.connect, id, &mut retry).await?;
        let version =
            coordinator.version::<DescribeTransactionsRequest>(DESCRIBE_TRANSACTIONS_VERSIONS)?;
        let request = DescribeTransactionsRequest::default()
            .with_transactional_ids(vec![TransactionalId(text(id))]);
        let response = coordinator.call(&request, version).await?;
        let Some(state) = response.transaction_states.into_iter().next() else {
            bail!("the coordinator described no transactional id");
        };
        // NOT_COORDINATOR: the id's partition moved; find it again.
        if is_retriable_code(state.error_code) && retry.pause().await {
            continue;
        }
        if state.error_code == ResponseError::TransactionalIdNotFound.code() {
            bail!("transactional id {id} not found: its coordinator (broker {coordinator_id}) holds no state for it");
        }
        check_error(ApiKey::DescribeTransactions, state.error_code, None)
            .with_context(|| format!("cannot describe transactional id {id}"))?;
        break (coordinator_id, state);
    };
    let (coordinator_id, state) = state;
    let start_time_ms =
        (state.transaction_start_time_ms >= 0).then_some(state.transaction_start_time_ms);
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let mut partitions: Vec<TopicPartitionView> = state
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|&p| TopicPartitionView {
                topic: t.topic.0.to_string(),
                partition: p,
            })
        })
        .collect();
    partitions.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    let described = Described {
        coordinator: coordinator_id,
        transactional_id: id.to_string(),
        producer_id: state.producer_id.0,
        producer_epoch: state.producer_epoch,
        state: state.transaction_state.to_string(),
        timeout_ms: state.transaction_timeout_ms,
        start_time_ms,
        duration_ms: start_time_ms.map(|start| (now_ms - start).max(0)),
        partitions,
    };
    if args.format == Format::Json {
        return print_json_object("transaction", &described);
    }
    let partitions: Vec<String> = described
        .partitions
        .iter()
        .map(|p| format!("{}-{}", p.topic, p.partition))
        .collect();
    out!(
        "CoordinatorId\tTransactionalId\tProducerId\tProducerEpoch\tTransactionState\t\
         CurrentTransactionTimeoutMs\tCurrentTransactionStartTimeMs\tTransactionDurationMs\t\
         TopicPartitions\n{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
        described.coordinator,
        described.transactional_id,
        described.producer_id,
        described.producer_epoch,
        described.state,
        described.timeout_ms,
        or_dash(described.start_time_ms.unwrap_or(-1)),
        or_dash(described.duration_ms.unwrap_or(-1)),
        if partitions.is_empty() {
            "-".to_string()
        } else {
            partitions.join(",")
        }
    );
    Ok(())
}

/// One producer of a partition as DescribeProducers shows it.
#[derive(Debug, Clone, Serialize)]
struct Producer {
    producer_id: i64,
    producer_epoch: i32,
    coordinator_epoch: Option<i32>,
    last_sequence: Option<i32>,
    last_timestamp_ms: Option<i64>,
    current_transaction_start_offset: Option<i64>,
}

/// The leader of `topic`-`partition` and a connection to it, from the
/// bootstrap broker's Metadata; asked again while the partition has no
/// leader yet. A topic or partition that does not exist is an error at
/// once.
async fn leader<'c>(
    bootstrap: &'c mut Connection,
    router: &'c mut Option<Router>,
    topic: &str,
    partition: i32,
    retry: &mut Retry,
) -> anyhow::Result<&'c mut Connection> {
    loop {
        retry.usable(bootstrap).await?;
        let topics = [topic.to_string()];
        let Some(response) = retry
            .settle(metadata(bootstrap, Some(&topics), false).await)
            .await?
        else {
            continue;
        };
        let found = response
            .topics
            .iter()
            .find(|t| t.name.as_ref().map(|n| n.0.as_str()) == Some(topic));
        let Some(found) = found else {
            bail!("topic {topic} does not exist");
        };
        if found.error_code == ResponseError::UnknownTopicOrPartition.code() {
            bail!("topic {topic} does not exist");
        }
        if is_retriable_code(found.error_code) && retry.pause().await {
            continue;
        }
        check_error(ApiKey::Metadata, found.error_code, None)
            .with_context(|| format!("cannot find topic {topic}"))?;
        if !found
            .partitions
            .iter()
            .any(|p| p.partition_index == partition)
        {
            bail!(
                "topic {topic} has no partition {partition} (it has {})",
                found.partitions.len()
            );
        }
        let routed = Router::from_metadata(bootstrap, &response);
        let Some(leader) = retry.settle(routed.leader(topic, partition)).await? else {
            continue;
        };
        let router = router.insert(routed);
        return Ok(router.connection(bootstrap, leader).await?);
    }
}

/// DescribeProducers of `topic`-`partition` at its leader, asked again
/// (leader found anew) while the answer is retriable.
async fn producers_of(
    bootstrap: &mut Connection,
    topic: &str,
    partition: i32,
    retry: &mut Retry,
) -> anyhow::Result<Vec<Producer>> {
    loop {
        let mut router = None;
        let connection = leader(bootstrap, &mut router, topic, partition, retry).await?;
        let version =
            connection.version::<DescribeProducersRequest>(DESCRIBE_PRODUCERS_VERSIONS)?;
        let request = DescribeProducersRequest::default()
            .with_topics(vec![TopicRequest::default()
                .with_name(topic_name(topic))
                .with_partition_indexes(vec![partition])]);
        let Some(response) = retry
            .settle(connection.call(&request, version).await)
            .await?
        else {
            continue;
        };
        let answer = response
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter())
            .find(|p| p.partition_index == partition);
        let Some(answer) = answer else {
            bail!("the leader of {topic}-{partition} did not describe it");
        };
        if is_retriable_code(answer.error_code) && retry.pause().await {
            continue;
        }
        check_error(
            ApiKey::DescribeProducers,
            answer.error_code,
            answer.error_message.as_deref(),
        )
        .with_context(|| format!("cannot describe the producers of {topic}-{partition}"))?;
        let mut producers: Vec<Producer> = answer
            .active_producers
            .iter()
            .map(|p| Producer {
                producer_id: p.producer_id.0,
                producer_epoch: p.producer_epoch,
                coordinator_epoch: (p.coordinator_epoch >= 0).then_some(p.coordinator_epoch),
                last_sequence: (p.last_sequence >= 0).then_some(p.last_sequence),
                last_timestamp_ms: (p.last_timestamp >= 0).then_some(p.last_timestamp),
                current_transaction_start_offset: (p.current_txn_start_offset >= 0)
                    .then_some(p.current_txn_start_offset),
            })
            .collect();
        producers.sort_by_key(|p| p.producer_id);
        return Ok(producers);
    }
}

async fn describe_producers(args: &ProducersArgs) -> anyhow::Result<()> {
    let mut bootstrap = args.connect.connect().await?;
    let mut retry = Retry::new(&args.connect);
    let producers = producers_of(&mut bootstrap, &args.topic, args.partition, &mut retry).await?;
    if args.format == Format::Json {
        return print_json_object("producers", &producers);
    }
    let mut out = String::from(
        "ProducerId\tProducerEpoch\tLatestCoordinatorEpoch\tLastSequence\tLastTimestamp\t\
         CurrentTransactionStartOffset\n",
    );
    for p in &producers {
        out.push_str(&format!(
            "{}\t{}\t{}\t{}\t{}\t{}\n",
            p.producer_id,
            p.producer_epoch,
            or_dash(p.coordinator_epoch.map_or(-1, i64::from)),
            or_dash(p.last_sequence.map_or(-1, i64::from)),
            or_dash(p.last_timestamp_ms.unwrap_or(-1)),
            or_dash(p.current_transaction_start_offset.unwrap_or(-1)),
        ));
    }
    out!("{out}");
    Ok(())
}

/// The open transaction an abort ends on one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Target {
    producer_id: i64,
    producer_epoch: i16,
    coordinator_epoch: i32,
    start_offset: i64,
}

/// What `abort` was told to end.
#[derive(Debug, Clone, Copy)]
enum Wanted {
    StartOffset(i64),
    Producer {
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
    },
}

/// The open transaction `wanted` names among a partition's producers, or
/// why there is none (the partition is named by `at`).
fn target(wanted: Wanted, producers: &[Producer], at: &str) -> anyhow::Result<Target> {
    let open: Vec<String> = producers
        .iter()
        .filter_map(|p| {
            p.current_transaction_start_offset.map(|offset| {
                format!(
                    "offset {offset} (producer {} epoch {})",
                    p.producer_id, p.producer_epoch
                )
            })
        })
        .collect();
    let open_ones = if open.is_empty() {
        format!("no transaction is open on {at}")
    } else {
        format!("open transactions on {at} start at {}", open.join(", "))
    };
    let epoch_of = |p: &Producer| {
        i16::try_from(p.producer_epoch)
            .with_context(|| format!("producer {} has epoch {}", p.producer_id, p.producer_epoch))
    };
    match wanted {
        Wanted::StartOffset(offset) => {
            let Some(p) = producers
                .iter()
                .find(|p| p.current_transaction_start_offset == Some(offset))
            else {
                bail!("no open transaction starts at offset {offset} on {at}: {open_ones}");
            };
            Ok(Target {
                producer_id: p.producer_id,
                producer_epoch: epoch_of(p)?,
                coordinator_epoch: p
                    .coordinator_epoch
                    .unwrap_or(COORDINATOR_EPOCH_UNKNOWN_SENT),
                start_offset: offset,
            })
        }
        Wanted::Producer {
            producer_id,
            producer_epoch,
            coordinator_epoch,
        } => {
            let Some(p) = producers.iter().find(|p| p.producer_id == producer_id) else {
                bail!("producer {producer_id} is unknown on {at} (its leader holds no state for it): {open_ones}");
            };
            let Some(start_offset) = p.current_transaction_start_offset else {
                bail!("producer {producer_id} has no transaction open on {at}: {open_ones}");
            };
            if i32::from(producer_epoch) != p.producer_epoch {
                bail!(
                    "producer {producer_id} is at epoch {} on {at}, not {producer_epoch}",
                    p.producer_epoch
                );
            }
            Ok(Target {
                producer_id,
                producer_epoch,
                coordinator_epoch,
                start_offset,
            })
        }
    }
}

/// Says on stderr what the coordinators hold for the producer about to
/// be aborted, and refuses when one is committing its transaction (its
/// commit markers are being written: aborting here would lose committed
/// records). A listing that fails is reported and does not stop the
/// abort: a hanging transaction's coordinator may be the broker that
/// cannot answer.
async fn check_coordinators(
    connect: &ConnectArgs,
    target: &Target,
    at: &str,
) -> anyhow::Result<()> {
    let filter = Filter {
        producer_ids: vec![target.producer_id],
        ..Filter::default()
    };
    let (listed, failures) = match list_everywhere(connect, &filter).await {
        Ok(outcome) => outcome,
        Err(error) => {
            eprintln!(
                "strom transaction: cannot ask the coordinators about producer {}: {error:#}",
                target.producer_id
            );
            return Ok(());
        }
    };
    for failure in &failures {
        eprintln!(
            "strom transaction: cannot ask a coordinator about producer {}: {failure}",
            target.producer_id
        );
    }
    for note in coordinators_verdict(listed.values(), at)? {
        eprintln!("strom transaction: note: {note}");
    }
    Ok(())
}

/// What the coordinators' listing of the producer means for an abort on
/// `at`: an error while one is committing its transaction, else a note
/// for each that still has it open.
fn coordinators_verdict<'a>(
    listed: impl IntoIterator<Item = &'a Listed>,
    at: &str,
) -> anyhow::Result<Vec<String>> {
    let mut notes = Vec::new();
    for t in listed {
        match t.state.as_str() {
            "PrepareCommit" => bail!(
                "transactional id {} (coordinator {}) is committing producer {}'s transaction: its commit \
                 markers are being written, and aborting it on {at} would lose committed records",
                t.transactional_id,
                t.coordinator,
                t.producer_id
            ),
            "Ongoing" | "PrepareAbort" | "PrepareEpochFence" => notes.push(format!(
                "transactional id {} (coordinator {}) still has producer {}'s transaction {}: it is \
                 aborted on {at} only, and its coordinator ends it at its timeout or when its producer \
                 does",
                t.transactional_id, t.coordinator, t.producer_id, t.state
            )),
            _ => {}
        }
    }
    Ok(notes)
}

async fn abort(args: &AbortArgs) -> anyhow::Result<()> {
    let at = format!("{}-{}", args.topic, args.partition);
    let wanted = match (args.start_offset, args.producer_id) {
        (Some(offset), None) => Wanted::StartOffset(offset),
        (None, Some(producer_id)) => Wanted::Producer {
            producer_id,
            producer_epoch: args
                .producer_epoch
                .context("--producer-epoch is required")?,
            coordinator_epoch: args
                .coordinator_epoch
                .context("--coordinator-epoch is required")?,
        },
        _ => bail!(
            "give --start-offset, or --producer-id with --producer-epoch and --coordinator-epoch"
        ),
    };
    let mut bootstrap = args.connect.connect().await?;
    let mut retry = Retry::new(&args.connect);
    let producers = producers_of(&mut bootstrap, &args.topic, args.partition, &mut retry).await?;
    let target = target(wanted, &producers, &at)?;
    check_coordinators(&args.connect, &target, &at).await?;
    loop {
        let mut router = None;
        let connection = leader(
            &mut bootstrap,
            &mut router,
            &args.topic,
            args.partition,
            &mut retry,
        )
        .await?;
        let code = write_abort(connection, &args.topic, args.partition, &target).await?;
        // Nothing was written: the leader moved or is being elected.
        let leader_moved = [
            ResponseError::NotLeaderOrFollower,
            ResponseError::LeaderNotAvailable,
            ResponseError::UnknownTopicOrPartition,
        ]
        .iter()
        .any(|e| e.code() == code);
        if leader_moved && retry.pause().await {
            continue;
        }
        if code == ERROR_NONE {
            break;
        }
        bail!(abort_refused(code, &target, &at));
    }
    outln!(
        "Aborted the transaction of producer {} (epoch {}) open on {at} from offset {}.",
        target.producer_id,
        target.producer_epoch,
        target.start_offset
    );
    Ok(())
}

/// Sends the abort marker; the partition's error code.
async fn write_abort(
    connection: &mut Connection,
    topic: &str,
    partition: i32,
    target: &Target,
) -> anyhow::Result<i16> {
    let version = connection.version::<WriteTxnMarkersRequest>(WRITE_TXN_MARKERS_VERSIONS)?;
    let marker = WritableTxnMarker::default()
        .with_producer_id(ProducerId(target.producer_id))
        .with_producer_epoch(target.producer_epoch)
        .with_transaction_result(false)
        .with_coordinator_epoch(target.coordinator_epoch)
        .with_topics(vec![WritableTxnMarkerTopic::default()
            .with_name(topic_name(topic))
            .with_partition_indexes(vec![partition])]);
    let request = WriteTxnMarkersRequest::default().with_markers(vec![marker]);
    let response = connection
        .call(&request, version)
        .await
        .map_err(|error: ClientError| anyhow::Error::from(error))
        .context("the abort marker's answer did not come: check with describe-producers whether the transaction is still open")?;
    response
        .markers
        .iter()
        .flat_map(|m| m.topics.iter())
        .flat_map(|t| t.partitions.iter())
        .find(|p| p.partition_index == partition)
        .map(|p| p.error_code)
        .context("the leader's answer names no partition")
}

/// Why the leader refused the abort, in the operator's words.
fn abort_refused(code: i16, target: &Target, at: &str) -> String {
    let producer = target.producer_id;
    let why = match ResponseError::try_from_code(code) {
        Some(ResponseError::UnknownProducerId) => {
            format!("the leader of {at} holds no state for producer {producer}")
        }
        Some(ResponseError::InvalidTxnState) => {
            format!("producer {producer} has no transaction open on {at} (it ended meanwhile?)")
        }
        Some(ResponseError::InvalidProducerEpoch | ResponseError::ProducerFenced) => format!(
            "epoch {} is not producer {producer}'s epoch on {at}",
            target.producer_epoch
        ),
        Some(ResponseError::TransactionCoordinatorFenced) => format!(
            "coordinator epoch {} is older than the last marker's on {at}",
            target.coordinator_epoch
        ),
        Some(ResponseError::RequestTimedOut | ResponseError::NotEnoughReplicasAfterAppend) => {
            format!(
                "the abort marker was written on {at} but its in-sync replicas did not all confirm it in time: check with describe-producers"
            )
        }
        _ => format!("the leader of {at} refused it"),
    };
    format!("cannot abort: {why} ({})", error_name(code))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn producer(id: i64, epoch: i32, open_at: Option<i64>) -> Producer {
        Producer {
            producer_id: id,
            producer_epoch: epoch,
            coordinator_epoch: None,
            last_sequence: Some(9),
            last_timestamp_ms: Some(1_000),
            current_transaction_start_offset: open_at,
        }
    }

    /// `target` over producer 7 (epoch 2, open from 10) and producer 8
    /// (epoch 0, none open): the target, or the error's text.
    fn check(wanted: Wanted) -> Result<Target, String> {
        let producers = [producer(7, 2, Some(10)), producer(8, 0, None)];
        target(wanted, &producers, "t-0").map_err(|e| format!("{e:#}"))
    }

    #[test]
    fn an_abort_targets_only_an_open_transaction_at_its_producers_epoch() {
        let by_producer = |producer_id, producer_epoch| Wanted::Producer {
            producer_id,
            producer_epoch,
            coordinator_epoch: 3,
        };
        assert_eq!(
            check(Wanted::StartOffset(10)),
            Ok(Target {
                producer_id: 7,
                producer_epoch: 2,
                coordinator_epoch: COORDINATOR_EPOCH_UNKNOWN_SENT,
                start_offset: 10,
            })
        );
        assert_eq!(
            check(by_producer(7, 2)),
            Ok(Target {
                producer_id: 7,
                producer_epoch: 2,
                coordinator_epoch: 3,
                start_offset: 10,
            })
        );
        let refused = [
            (
                Wanted::StartOffset(9),
                "no open transaction starts at offset 9 on t-0: open transactions on t-0 start at offset 10 (producer 7 epoch 2)",
            ),
            (by_producer(9, 0), "producer 9 is unknown on t-0"),
            (by_producer(8, 0), "producer 8 has no transaction open on t-0"),
            (by_producer(7, 1), "producer 7 is at epoch 2 on t-0, not 1"),
        ];
        for (wanted, message) in refused {
            let error = check(wanted).expect_err(message);
            assert!(error.starts_with(message), "{error}");
        }
        let none_open = target(Wanted::StartOffset(0), &[producer(8, 0, None)], "t-0");
        assert!(format!("{:#}", none_open.unwrap_err()).ends_with("no transaction is open on t-0"));
    }

    #[test]
    fn an_abort_is_refused_while_a_coordinator_commits_and_noted_while_one_has_it_open() {
        let listed = |state: &str| Listed {
            transactional_id: "app".to_string(),
            coordinator: 2,
            producer_id: 7,
            state: state.to_string(),
        };
        for state in ["Empty", "CompleteCommit", "CompleteAbort", "Dead"] {
            assert!(coordinators_verdict([&listed(state)], "t-0")
                .unwrap()
                .is_empty());
        }
        for state in ["Ongoing", "PrepareAbort", "PrepareEpochFence"] {
            assert_eq!(
                coordinators_verdict([&listed(state)], "t-0").unwrap(),
                [format!(
                    "transactional id app (coordinator 2) still has producer 7's transaction {state}: \
                     it is aborted on t-0 only, and its coordinator ends it at its timeout or when its \
                     producer does"
                )]
            );
        }
        let committing =
            coordinators_verdict([&listed("Ongoing"), &listed("PrepareCommit")], "t-0");
        assert!(format!("{:#}", committing.unwrap_err()).starts_with(
            "transactional id app (coordinator 2) is committing producer 7's transaction"
        ));
    }
}
