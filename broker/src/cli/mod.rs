//! The admin and console tools of the `strom` binary (`strom topic`,
//! `strom produce`, `strom consume`), built on `protocol::client` so they
//! work against any Kafka broker. Each runs on one glommio executor on the
//! calling thread; a failure prints one line on stderr and exits 1.

pub mod consume;
pub mod group;
pub mod produce;
pub mod repair;
pub mod status;
pub mod topic;

use std::collections::BTreeMap;
use std::future::Future;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, BrokerId, ListOffsetsRequest, MetadataRequest, MetadataResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use protocol::client::{self, ClientConfig, Connection};

/// Exit code when the broker is unreachable or a request fails.
pub const EXIT_FAILURE: u8 = 1;
/// io memory of the tools' executor: small, so that it fits the memlock
/// limit of an unprivileged user (see docs/broker.md).
const IO_MEMORY_BYTES: usize = 1 << 20;

/// Metadata versions the tools speak (v1+: a null topic list means all).
/// The ListOffsets versions the tools speak.
const LIST_OFFSETS_VERSIONS: std::ops::RangeInclusive<i16> = 1..=7;

pub const METADATA_VERSIONS: std::ops::RangeInclusive<i16> = 1..=12;

#[derive(Args, Clone, Debug)]
pub struct ConnectArgs {
    /// Broker to connect to.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:9092")]
    pub bootstrap: String,
    /// How long to wait for the connection and for each response, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 30_000)]
    pub timeout_ms: u64,
}

impl ConnectArgs {
    pub async fn connect(&self) -> anyhow::Result<Connection> {
        let timeout = Duration::from_millis(self.timeout_ms.max(1));
        let config = ClientConfig {
            client_id: "strom-cli".to_string(),
            software_name: "strom-cli".to_string(),
            connect_timeout: timeout,
            request_timeout: timeout,
            ..ClientConfig::default()
        };
        Ok(Connection::connect(&self.bootstrap, config).await?)
    }
}

/// Runs a tool on a glommio executor on this thread and turns its result
/// into the exit code, printing any error as one line on stderr.
pub fn run<F>(tool: &str, future: F) -> ExitCode
where
    F: Future<Output = anyhow::Result<()>> + 'static,
{
    let executor = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .name("strom-cli")
        .io_memory(IO_MEMORY_BYTES)
        .make();
    let outcome = match executor {
        Ok(executor) => executor.run(future),
        Err(error) => Err(anyhow::anyhow!(
            "cannot start an io_uring executor: {error}"
        )),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("strom {tool}: {error:#}");
            ExitCode::from(EXIT_FAILURE)
        }
    }
}

pub fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

/// Metadata for `topics` (`None`: every topic).
pub async fn metadata(
    connection: &mut Connection,
    topics: Option<&[String]>,
    auto_create: bool,
) -> anyhow::Result<MetadataResponse> {
    let version = connection.version::<MetadataRequest>(METADATA_VERSIONS)?;
    let request = MetadataRequest::default()
        .with_topics(topics.map(|names| {
            names
                .iter()
                .map(|name| MetadataRequestTopic::default().with_name(Some(topic_name(name))))
                .collect()
        }))
        .with_allow_auto_topic_creation(auto_create);
    Ok(connection.call(&request, version).await?)
}

/// The partition ids of one topic, sorted; fails with the broker's error
/// (UNKNOWN_TOPIC_OR_PARTITION) when it does not exist.
pub async fn partitions(
    connection: &mut Connection,
    topic: &str,
    auto_create: bool,
) -> anyhow::Result<Vec<i32>> {
    let response = metadata(connection, Some(&[topic.to_string()]), auto_create).await?;
    let Some(found) = response
        .topics
        .iter()
        .find(|t| t.name.as_ref().map(|n| n.0.as_str()) == Some(topic))
    else {
        bail!("topic {topic} is not in the broker's metadata");
    };
    client::check_error(
        kafka_protocol::messages::ApiKey::Metadata,
        found.error_code,
        None,
    )
    .with_context(|| format!("topic {topic}"))?;
    let mut ids: Vec<i32> = found.partitions.iter().map(|p| p.partition_index).collect();
    ids.sort_unstable();
    if ids.is_empty() {
        bail!("topic {topic} has no partitions");
    }
    Ok(ids)
}

/// ListOffsets for every partition of `topic` at `timestamp` (-1 latest,
/// -2 earliest, else the first offset at or after it; -1 if none).
pub async fn list_offsets(
    connection: &mut Connection,
    topic: &str,
    partitions: &[i32],
    timestamp: i64,
) -> anyhow::Result<BTreeMap<i32, i64>> {
    let version = connection.version::<ListOffsetsRequest>(LIST_OFFSETS_VERSIONS)?;
    let request = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(topic_name(topic))
            .with_partitions(
                partitions
                    .iter()
                    .map(|&p| {
                        ListOffsetsPartition::default()
                            .with_partition_index(p)
                            .with_current_leader_epoch(-1)
                            .with_timestamp(timestamp)
                    })
                    .collect(),
            )]);
    let response = connection.call(&request, version).await?;
    let mut offsets = BTreeMap::new();
    for t in &response.topics {
        for p in &t.partitions {
            client::check_error(ApiKey::ListOffsets, p.error_code, None)
                .with_context(|| format!("cannot list offsets of {topic}-{}", p.partition_index))?;
            offsets.insert(p.partition_index, p.offset);
        }
    }
    for p in partitions {
        if !offsets.contains_key(p) {
            bail!("the broker listed no offset for {topic}-{p}");
        }
    }
    Ok(offsets)
}

/// Parses `KEY=VALUE` (clap value parser).
pub fn key_value(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => {
            Ok((key.trim().to_string(), value.to_string()))
        }
        _ => Err(format!("expected KEY=VALUE, got {text:?}")),
    }
}
