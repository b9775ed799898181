//! `strom cluster status`: the cluster as its brokers report it, with
//! DescribeCluster (brokers, fenced ones too, and the active controller),
//! DescribeQuorum (the metadata quorum, forwarded by any broker to the
//! active controller) and Metadata (each partition's replicas, in-sync
//! replicas and leader). Works against any Kafka cluster in KRaft mode.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use anyhow::Context;
use clap::{Args, Subcommand};
use kafka_protocol::messages::describe_quorum_request::{
    PartitionData as QuorumPartition, TopicData as QuorumTopic,
};
use kafka_protocol::messages::{
    ApiKey, DescribeClusterRequest, DescribeClusterResponse, DescribeQuorumRequest,
    DescribeQuorumResponse, MetadataResponse,
};
use protocol::admin::{metadata, topic_name};
use protocol::client::{check_error, Connection};
use serde::Serialize;

use super::ConnectArgs;

const DESCRIBE_CLUSTER_VERSIONS: std::ops::RangeInclusive<i16> = 0..=2;
const DESCRIBE_QUORUM_VERSIONS: std::ops::RangeInclusive<i16> = 0..=2;
/// DescribeCluster v2 can list fenced brokers too.
const DESCRIBE_CLUSTER_FENCED_MIN: i16 = 2;
/// The metadata log, as Kafka names it.
const METADATA_TOPIC: &str = "__cluster_metadata";
/// DescribeCluster's endpoint type for brokers.
const ENDPOINT_BROKER: i8 = 1;

#[derive(Args, Debug)]
pub struct ClusterArgs {
    #[command(subcommand)]
    command: ClusterCommand,
}

#[derive(Subcommand, Debug)]
enum ClusterCommand {
    /// Show the cluster: its id and active controller; every broker with
    /// its address, rack, state (live, or fenced: its session expired or
    /// it shut down) and whether it is a voter of the metadata quorum; the
    /// quorum's leader epoch, high watermark, each voter's lag behind
    /// it (in metadata records) and the brokers that are not voters
    /// (observers); and how many partitions there are, how
    /// many are under-replicated (fewer in-sync replicas than replicas)
    /// and how many are offline (no leader). Any broker of the cluster
    /// can be asked. Exits 1 when no broker answers.
    Status(StatusArgs),
    /// Add a node to the controller quorum as a voter (Kafka's
    /// AddRaftVoter): the node must be running outside the quorum (a voter
    /// that lost its log starts so once it was removed). It gets a
    /// snapshot, catches up, then votes; exits 0 once it does. The node
    /// must be in every node's `controller.quorum.voters`.
    AddVoter(VoterArgs),
    /// Remove a voter from the controller quorum (Kafka's
    /// RemoveRaftVoter), e.g. one whose disk was lost, before it comes
    /// back with a new one. Exits 0 once the removal is committed.
    RemoveVoter(VoterArgs),
}

#[derive(Args, Debug)]
struct VoterArgs {
    /// The node's id.
    #[arg(long, value_name = "N")]
    node_id: i32,
    /// The directory id of the node's log (`__metadata/raft/directory.id`
    /// in its data dir): refused unless it is the one the quorum knows.
    /// Default: whichever the quorum knows.
    #[arg(long, value_name = "UUID")]
    directory_id: Option<String>,
    #[command(flatten)]
    connect: ConnectArgs,
}

#[derive(Args, Debug)]
struct StatusArgs {
    /// Print the status as one JSON object instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    connect: ConnectArgs,
}

pub async fn run(args: ClusterArgs) -> anyhow::Result<()> {
    match args.command {
        ClusterCommand::Status(args) => status(args).await,
        ClusterCommand::AddVoter(args) => change_voters(args, true).await,
        ClusterCommand::RemoveVoter(args) => change_voters(args, false).await,
    }
}

/// How long the active controller may take to add a voter (within the
/// 30 s a broker waits for a request it forwards there).
const ADD_VOTER_TIMEOUT_MS: i32 = 25_000;

async fn change_voters(args: VoterArgs, add: bool) -> anyhow::Result<()> {
    use kafka_protocol::messages::{AddRaftVoterRequest, RemoveRaftVoterRequest};
    let directory = match &args.directory_id {
        Some(text) => broker::cluster::membership::uuid_bits(text)
            .map(uuid::Uuid::from_u128)
            .with_context(|| {
                format!("--directory-id {text} is not a Kafka Uuid (22 characters)")
            })?,
        None => uuid::Uuid::nil(),
    };
    let mut connection = args.connect.connect().await?;
    let node = args.node_id;
    let (api, code, message) = if add {
        let version = connection.version::<AddRaftVoterRequest>(0..=0)?;
        let request = AddRaftVoterRequest::default()
            .with_voter_id(node)
            .with_voter_directory_id(directory)
            .with_timeout_ms(ADD_VOTER_TIMEOUT_MS);
        let response = connection.call(&request, version).await?;
        (
            ApiKey::AddRaftVoter,
            response.error_code,
            response.error_message,
        )
    } else {
        let version = connection.version::<RemoveRaftVoterRequest>(0..=0)?;
        let request = RemoveRaftVoterRequest::default()
            .with_voter_id(node)
            .with_voter_directory_id(directory);
        let response = connection.call(&request, version).await?;
        (
            ApiKey::RemoveRaftVoter,
            response.error_code,
            response.error_message,
        )
    };
    check_error(api, code, message.as_ref().map(|m| m.as_str()))?;
    if add {
        outln!("node {node} is a voter of the controller quorum");
    } else {
        outln!("node {node} is no longer in the controller quorum");
    }
    Ok(())
}

#[derive(Debug, Serialize)]
struct ClusterStatus {
    cluster_id: String,
    /// -1: none known.
    controller: i32,
    brokers: Vec<Broker>,
    /// `None` when the cluster does not answer DescribeQuorum.
    quorum: Option<Quorum>,
    partitions: Partitions,
    /// Each live broker's listeners, as it describes them.
    listeners: Vec<Listener>,
}

/// One listener of one broker.
#[derive(Debug, Serialize)]
struct Listener {
    broker: i32,
    name: String,
    /// PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (empty: the broker did not
    /// answer).
    security_protocol: String,
    /// `HOST:PORT` it listens on.
    address: String,
    /// What the brokers talk to each other on, or the controllers'.
    role: &'static str,
}

#[derive(Debug, Serialize)]
struct Broker {
    id: i32,
    address: String,
    rack: Option<String>,
    fenced: bool,
    voter: bool,
}

#[derive(Debug, Serialize)]
struct Quorum {
    leader: i32,
    leader_epoch: i32,
    high_watermark: i64,
    voters: Vec<Voter>,
    observers: Vec<i32>,
}

#[derive(Debug, Serialize)]
struct Voter {
    id: i32,
    /// -1: unknown.
    log_end_offset: i64,
    /// High watermark − log end offset (`None`: unknown).
    lag: Option<i64>,
}

#[derive(Debug, Default, Serialize)]
struct Partitions {
    total: usize,
    under_replicated: usize,
    offline: usize,
}

async fn status(args: StatusArgs) -> anyhow::Result<()> {
    let mut connection = args.connect.connect().await?;
    let cluster = describe_cluster(&mut connection).await?;
    let quorum = describe_quorum(&mut connection).await?;
    let topics = metadata(&mut connection, None, false).await?;
    let mut status = summarize(&cluster, quorum.as_ref(), &topics);
    let live: Vec<i32> = status
        .brokers
        .iter()
        .filter(|b| !b.fenced)
        .map(|b| b.id)
        .collect();
    status.listeners = listeners(&args.connect, &live).await?;
    if args.json {
        let text = serde_json::to_string_pretty(&status).context("cannot write JSON")?;
        outln!("{text}");
    } else {
        out!("{}", render(&status));
    }
    Ok(())
}

/// The listener settings each broker of `ids` reports, one row per
/// listener; a broker that cannot be asked gets one row saying so.
async fn listeners(connect: &super::ConnectArgs, ids: &[i32]) -> anyhow::Result<Vec<Listener>> {
    const KEYS: [&str; 4] = [
        "listeners",
        "listener.security.protocol.map",
        "inter.broker.listener.name",
        "controller.listener.names",
    ];
    let mut brokers = super::config::Brokers::discover(connect).await?;
    let mut rows = Vec::new();
    for &id in ids {
        let settings = match brokers.settings(id, &KEYS).await {
            Ok(settings) => settings,
            Err(error) => {
                rows.push(Listener {
                    broker: id,
                    name: "-".to_string(),
                    security_protocol: String::new(),
                    address: format!("unknown: {error:#}"),
                    role: "",
                });
                continue;
            }
        };
        let get = |key: &str| settings.get(key).map(String::as_str).unwrap_or("");
        let protocols: BTreeMap<&str, &str> = get("listener.security.protocol.map")
            .split(',')
            .filter_map(|entry| entry.trim().split_once(':'))
            .collect();
        let controllers: Vec<&str> = get("controller.listener.names").split(',').collect();
        for listener in get("listeners").split(',').filter(|l| !l.trim().is_empty()) {
            let (name, address) = listener.trim().split_once("://").unwrap_or(("", listener));
            let role = if controllers.contains(&name) {
                "controller"
            } else if name == get("inter.broker.listener.name") {
                "clients, inter-broker"
            } else {
                "clients"
            };
            rows.push(Listener {
                broker: id,
                name: name.to_string(),
                security_protocol: protocols
                    .get(name)
                    .copied()
                    .unwrap_or("PLAINTEXT")
                    .to_string(),
                address: address.to_string(),
                role,
            });
        }
    }
    Ok(rows)
}

async fn describe_cluster(connection: &mut Connection) -> anyhow::Result<DescribeClusterResponse> {
    let version = connection.version::<DescribeClusterRequest>(DESCRIBE_CLUSTER_VERSIONS)?;
    let request = DescribeClusterRequest::default()
        .with_include_cluster_authorized_operations(false)
        .with_endpoint_type(ENDPOINT_BROKER)
        .with_include_fenced_brokers(version >= DESCRIBE_CLUSTER_FENCED_MIN);
    let response = connection.call(&request, version).await?;
    check_error(
        ApiKey::DescribeCluster,
        response.error_code,
        response.error_message.as_ref().map(|m| m.as_str()),
    )?;
    Ok(response)
}

/// The quorum, or `None` when the broker does not serve DescribeQuorum
/// (or no controller could answer it).
async fn describe_quorum(
    connection: &mut Connection,
) -> anyhow::Result<Option<DescribeQuorumResponse>> {
    let Ok(version) = connection.version::<DescribeQuorumRequest>(DESCRIBE_QUORUM_VERSIONS) else {
        return Ok(None);
    };
    let request = DescribeQuorumRequest::default().with_topics(vec![QuorumTopic::default()
        .with_topic_name(topic_name(METADATA_TOPIC))
        .with_partitions(vec![QuorumPartition::default().with_partition_index(0)])]);
    let response = connection.call(&request, version).await?;
    if check_error(ApiKey::DescribeQuorum, response.error_code, None).is_err() {
        return Ok(None);
    }
    Ok(Some(response))
}

fn summarize(
    cluster: &DescribeClusterResponse,
    quorum: Option<&DescribeQuorumResponse>,
    topics: &MetadataResponse,
) -> ClusterStatus {
    let partition = quorum
        .and_then(|q| q.topics.first())
        .and_then(|t| t.partitions.first())
        .filter(|p| p.error_code == protocol::client::ERROR_NONE);
    let quorum = partition.map(|p| Quorum {
        leader: p.leader_id.0,
        leader_epoch: p.leader_epoch,
        high_watermark: p.high_watermark,
        voters: p
            .current_voters
            .iter()
            .map(|v| Voter {
                id: v.replica_id.0,
                log_end_offset: v.log_end_offset,
                lag: (v.log_end_offset >= 0).then(|| (p.high_watermark - v.log_end_offset).max(0)),
            })
            .collect(),
        observers: p.observers.iter().map(|o| o.replica_id.0).collect(),
    });
    let voters: BTreeSet<i32> = quorum
        .as_ref()
        .map(|q| q.voters.iter().map(|v| v.id).collect())
        .unwrap_or_default();
    let mut brokers: Vec<Broker> = cluster
        .brokers
        .iter()
        .map(|b| Broker {
            id: b.broker_id.0,
            address: format!("{}:{}", b.host, b.port),
            rack: b.rack.as_ref().map(|r| r.to_string()),
            fenced: b.is_fenced,
            voter: voters.contains(&b.broker_id.0),
        })
        .collect();
    brokers.sort_by_key(|b| b.id);
    let mut partitions = Partitions::default();
    for topic in &topics.topics {
        for p in &topic.partitions {
            partitions.total += 1;
            if p.isr_nodes.len() < p.replica_nodes.len() {
                partitions.under_replicated += 1;
            }
            if p.leader_id.0 < 0 {
                partitions.offline += 1;
            }
        }
    }
    ClusterStatus {
        cluster_id: cluster.cluster_id.to_string(),
        controller: cluster.controller_id.0,
        brokers,
        quorum,
        partitions,
        listeners: Vec::new(),
    }
}

fn render(status: &ClusterStatus) -> String {
    let mut out = String::new();
    let or_none = |id: i32| {
        if id < 0 {
            "none".to_string()
        } else {
            id.to_string()
        }
    };
    let _ = writeln!(out, "ClusterId: {}", status.cluster_id);
    let _ = writeln!(out, "Controller: {}", or_none(status.controller));
    let _ = writeln!(out, "BROKER\tADDRESS\tRACK\tSTATE\tVOTER");
    for b in &status.brokers {
        let _ = writeln!(
            out,
            "{}\t{}\t{}\t{}\t{}",
            b.id,
            b.address,
            b.rack.as_deref().unwrap_or("-"),
            if b.fenced { "fenced" } else { "live" },
            if b.voter { "yes" } else { "no" }
        );
    }
    match &status.quorum {
        Some(q) => {
            let _ = writeln!(
                out,
                "QuorumLeader: {}\tLeaderEpoch: {}\tHighWatermark: {}",
                or_none(q.leader),
                q.leader_epoch,
                q.high_watermark
            );
            let _ = writeln!(out, "VOTER\tLOG-END\tLAG");
            for v in &q.voters {
                let unknown = || "-".to_string();
                let _ = writeln!(
                    out,
                    "{}\t{}\t{}",
                    v.id,
                    if v.log_end_offset >= 0 {
                        v.log_end_offset.to_string()
                    } else {
                        unknown()
                    },
                    v.lag.map_or_else(unknown, |l| l.to_string())
                );
            }
            let observers: Vec<String> = q.observers.iter().map(i32::to_string).collect();
            let _ = writeln!(
                out,
                "Observers: {}",
                if observers.is_empty() {
                    "-".to_string()
                } else {
                    observers.join(",")
                }
            );
        }
        None => {
            let _ = writeln!(
                out,
                "QuorumLeader: unknown (no controller answered DescribeQuorum)"
            );
        }
    }
    let p = &status.partitions;
    let _ = writeln!(
        out,
        "Partitions: {}\tUnderReplicated: {}\tOffline: {}",
        p.total, p.under_replicated, p.offline
    );
    if !status.listeners.is_empty() {
        let _ = writeln!(out, "LISTENER\tBROKER\tPROTOCOL\tADDRESS\tFOR");
        for l in &status.listeners {
            let _ = writeln!(
                out,
                "{}\t{}\t{}\t{}\t{}",
                l.name,
                l.broker,
                if l.security_protocol.is_empty() {
                    "-"
                } else {
                    &l.security_protocol
                },
                l.address,
                if l.role.is_empty() { "-" } else { l.role }
            );
        }
    }
    out
}
