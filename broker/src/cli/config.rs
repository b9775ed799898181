//! `strom config describe --broker [ID]`: every setting a broker reports
//! through DescribeConfigs (BROKER resource), with where its value comes
//! from, in the spirit of `kafka-configs --describe --all`; `strom config
//! alter --broker [ID] | --broker-defaults`: changes dynamic broker
//! settings with IncrementalAlterConfigs, like `kafka-configs --alter
//! --add-config/--delete-config`. A broker answers only for itself, so a
//! request about broker N goes to broker N (its address from Metadata),
//! as Kafka's admin client sends it.

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{ApiKey, DescribeConfigsRequest, IncrementalAlterConfigsRequest};
use kafka_protocol::protocol::StrBytes;
use protocol::client::{check_error, Connection};
use serde::Serialize;

use protocol::admin::{metadata, Router};

use super::format::{print_json, Format};
use super::ConnectArgs;

/// v1+ report each config's source.
const DESCRIBE_CONFIGS_VERSIONS: std::ops::RangeInclusive<i16> = 1..=4;
const RESOURCE_BROKER: i8 = 4;
const INCREMENTAL_ALTER_CONFIGS_VERSIONS: std::ops::RangeInclusive<i16> = 0..=1;
const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;

#[derive(Args, Debug)]
pub struct ConfigArgs {
    #[command(subcommand)]
    command: ConfigCommand,
}

#[derive(Subcommand, Debug)]
enum ConfigCommand {
    /// Print every setting a broker reports, one NAME=VALUE per line with
    /// its source (STATIC_BROKER_CONFIG, DEFAULT_CONFIG, ...). The request
    /// goes to the broker named, whichever one --bootstrap reaches.
    Describe(DescribeArgs),
    /// Change dynamic broker settings while the broker runs (kept across
    /// restarts); read-only settings are refused. A change of one broker
    /// goes to that broker, whichever one --bootstrap reaches.
    Alter(AlterArgs),
}

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["broker", "broker_defaults"])))]
#[command(group(clap::ArgGroup::new("change").required(true).multiple(true).args(["add_config", "delete_config"])))]
struct AlterArgs {
    /// The broker to change, by node id [default: the one connected to].
    #[arg(long, value_name = "ID", num_args = 0..=1, default_missing_value = "")]
    broker: Option<String>,
    /// Change the cluster-wide defaults (the broker resource "") instead of one broker.
    #[arg(long)]
    broker_defaults: bool,
    /// Settings to set: KEY=VALUE[,KEY=VALUE...] (repeatable).
    #[arg(long, value_name = "KEY=VALUE,...")]
    add_config: Vec<String>,
    /// Settings to remove, back to the static or default value: KEY[,KEY...] (repeatable).
    #[arg(long, value_name = "KEY,...")]
    delete_config: Vec<String>,
    #[command(flatten)]
    connect: ConnectArgs,
}

#[derive(Args, Debug)]
struct DescribeArgs {
    /// The broker to describe, by node id [default: the one connected to].
    #[arg(long, value_name = "ID", num_args = 0..=1, default_missing_value = "")]
    broker: Option<String>,
    /// How to print: `text` (a heading, then NAME=VALUE<TAB>source=SOURCE
    /// per line) or `json`: {"broker": ID, "configs": [{"name", "value",
    /// "source", "sensitive"}]} (value null: none or sensitive).
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = Format::Text)]
    format: Format,
    #[command(flatten)]
    connect: ConnectArgs,
}

pub async fn run(args: ConfigArgs) -> anyhow::Result<()> {
    match args.command {
        ConfigCommand::Describe(args) => describe(args).await,
        ConfigCommand::Alter(args) => alter(args).await,
    }
}

/// Kafka's names of DescribeConfigs config sources.
fn source_name(source: i8) -> &'static str {
    match source {
        1 => "DYNAMIC_TOPIC_CONFIG",
        2 => "DYNAMIC_BROKER_CONFIG",
        3 => "DYNAMIC_DEFAULT_BROKER_CONFIG",
        4 => "STATIC_BROKER_CONFIG",
        5 => "DEFAULT_CONFIG",
        6 => "DYNAMIC_BROKER_LOGGER_CONFIG",
        7 => "CLIENT_METRICS_CONFIG",
        8 => "GROUP_CONFIG",
        _ => "UNKNOWN",
    }
}

/// The brokers of the cluster, as the bootstrap broker's Metadata lists
/// them, with a connection to each opened when first needed.
pub(crate) struct Brokers {
    bootstrap: Connection,
    router: Router,
}

impl Brokers {
    pub(crate) async fn discover(connect: &ConnectArgs) -> anyhow::Result<Brokers> {
        let mut bootstrap = connect.connect().await?;
        let response = metadata(&mut bootstrap, Some(&[]), false)
            .await
            .context("cannot list the cluster's brokers")?;
        let router = Router::from_metadata(&bootstrap, &response);
        Ok(Brokers { bootstrap, router })
    }

    /// The node id `--broker` names, else the connected broker's.
    fn id(&self, given: Option<&str>) -> anyhow::Result<i32> {
        match given.map(str::trim) {
            Some(id) if !id.is_empty() => id
                .parse::<i32>()
                .ok()
                .filter(|id| *id >= 0)
                .with_context(|| format!("--broker takes a node id (0 or more), got {id:?}")),
            _ => self.router.bootstrap_id().with_context(|| {
                format!(
                    "cannot tell which broker {} is (Metadata lists {}); give --broker ID",
                    self.bootstrap.address(),
                    self.listed()
                )
            }),
        }
    }

    /// A connection to broker `id`: the bootstrap one if that is the
    /// broker it reached, else one to the address Metadata gives.
    async fn connection(&mut self, id: i32) -> anyhow::Result<&mut Connection> {
        if !self.router.brokers().contains_key(&id) {
            bail!(
                "broker {id} is not in the cluster's metadata (live brokers: {})",
                self.listed()
            );
        }
        let address = self.router.brokers()[&id].clone();
        self.router
            .connection(&mut self.bootstrap, id)
            .await
            .with_context(|| format!("cannot reach broker {id} at {address}"))
    }

    /// The values of `keys` among broker `id`'s settings (as it describes
    /// its own), by key; keys it does not report are left out.
    pub(crate) async fn settings(
        &mut self,
        id: i32,
        keys: &[&str],
    ) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
        let connection = self.connection(id).await?;
        let version = connection.version::<DescribeConfigsRequest>(DESCRIBE_CONFIGS_VERSIONS)?;
        let request = DescribeConfigsRequest::default().with_resources(vec![
            DescribeConfigsResource::default()
                .with_resource_type(RESOURCE_BROKER)
                .with_resource_name(StrBytes::from_string(id.to_string()))
                .with_configuration_keys(Some(
                    keys.iter()
                        .map(|k| StrBytes::from_string(k.to_string()))
                        .collect(),
                )),
        ]);
        let response = connection.call(&request, version).await?;
        let result = response
            .results
            .first()
            .context("the broker described no resource")?;
        check_error(
            ApiKey::DescribeConfigs,
            result.error_code,
            result.error_message.as_deref(),
        )
        .with_context(|| format!("cannot describe the configs of broker {id}"))?;
        Ok(result
            .configs
            .iter()
            .filter_map(|c| Some((c.name.to_string(), c.value.as_ref()?.to_string())))
            .collect())
    }

    /// `ID at HOST:PORT, ...` of every broker listed.
    fn listed(&self) -> String {
        self.router
            .brokers()
            .iter()
            .map(|(id, address)| format!("{id} at {address}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// `--add-config` lists: KEY=VALUE pairs, comma-separated.
fn parse_additions(lists: &[String]) -> anyhow::Result<Vec<(String, String)>> {
    let mut pairs = Vec::new();
    for item in lists.iter().flat_map(|l| l.split(',')) {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        let Some((key, value)) = item.split_once('=') else {
            bail!("--add-config takes KEY=VALUE, got {item:?}");
        };
        if key.trim().is_empty() {
            bail!("--add-config takes KEY=VALUE, got {item:?} (no key)");
        }
        pairs.push((key.trim().to_string(), value.trim().to_string()));
    }
    Ok(pairs)
}

async fn alter(args: AlterArgs) -> anyhow::Result<()> {
    let additions = parse_additions(&args.add_config)?;
    let deletions: Vec<String> = args
        .delete_config
        .iter()
        .flat_map(|l| l.split(','))
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .map(str::to_string)
        .collect();
    if additions.is_empty() && deletions.is_empty() {
        bail!("nothing to change: give --add-config KEY=VALUE or --delete-config KEY");
    }
    let mut brokers = Brokers::discover(&args.connect).await?;
    // The defaults are the cluster's: any broker takes them.
    let (resource, what, connection) = if args.broker_defaults {
        (
            String::new(),
            "the cluster-wide broker defaults".to_string(),
            &mut brokers.bootstrap,
        )
    } else {
        let id = brokers.id(args.broker.as_deref())?;
        (
            id.to_string(),
            format!("broker {id}"),
            brokers.connection(id).await?,
        )
    };
    let version =
        connection.version::<IncrementalAlterConfigsRequest>(INCREMENTAL_ALTER_CONFIGS_VERSIONS)?;
    let configs = additions
        .iter()
        .map(|(key, value)| (key, Some(value.as_str()), OP_SET))
        .chain(deletions.iter().map(|key| (key, None, OP_DELETE)))
        .map(|(key, value, op)| {
            AlterableConfig::default()
                .with_name(StrBytes::from_string(key.clone()))
                .with_config_operation(op)
                .with_value(value.map(|v| StrBytes::from_string(v.to_string())))
        })
        .collect();
    let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(RESOURCE_BROKER)
            .with_resource_name(StrBytes::from_string(resource))
            .with_configs(configs),
    ]);
    let response = connection.call(&request, version).await?;
    let Some(result) = response.responses.first() else {
        bail!("the broker answered for no resource");
    };
    check_error(
        ApiKey::IncrementalAlterConfigs,
        result.error_code,
        result.error_message.as_deref(),
    )
    .with_context(|| format!("cannot change the configs of {what}"))?;
    outln!("Completed updating config for {what}.");
    Ok(())
}

/// One setting as `config describe --format json` prints it.
#[derive(Debug, Serialize)]
struct ConfigView {
    name: String,
    value: Option<String>,
    source: &'static str,
    sensitive: bool,
}

async fn describe(args: DescribeArgs) -> anyhow::Result<()> {
    let mut brokers = Brokers::discover(&args.connect).await?;
    let id = brokers.id(args.broker.as_deref())?;
    let connection = brokers.connection(id).await?;
    let version = connection.version::<DescribeConfigsRequest>(DESCRIBE_CONFIGS_VERSIONS)?;
    let request =
        DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(RESOURCE_BROKER)
            .with_resource_name(StrBytes::from_string(id.to_string()))
            .with_configuration_keys(None)]);
    let response = connection.call(&request, version).await?;
    let Some(result) = response.results.first() else {
        bail!("the broker described no resource");
    };
    check_error(
        ApiKey::DescribeConfigs,
        result.error_code,
        result.error_message.as_deref(),
    )
    .with_context(|| format!("cannot describe the configs of broker {id}"))?;
    if args.format == Format::Json {
        let mut configs: Vec<ConfigView> = result
            .configs
            .iter()
            .map(|config| ConfigView {
                name: config.name.to_string(),
                value: (!config.is_sensitive)
                    .then(|| config.value.as_ref().map(ToString::to_string))
                    .flatten(),
                source: source_name(config.config_source),
                sensitive: config.is_sensitive,
            })
            .collect();
        configs.sort_by(|a, b| a.name.cmp(&b.name));
        #[derive(Serialize)]
        struct BrokerConfigs {
            broker: i32,
            configs: Vec<ConfigView>,
        }
        return print_json(&BrokerConfigs {
            broker: id,
            configs,
        });
    }
    let mut configs: Vec<(String, String, &'static str)> = result
        .configs
        .iter()
        .map(|config| {
            let value = if config.is_sensitive {
                "(sensitive)".to_string()
            } else {
                config
                    .value
                    .as_ref()
                    .map_or_else(|| "null".to_string(), |v| v.as_str().to_string())
            };
            (
                config.name.as_str().to_string(),
                value,
                source_name(config.config_source),
            )
        })
        .collect();
    configs.sort();
    let mut text = format!("All configs for broker {id} are:\n");
    for (name, value, source) in configs {
        text.push_str(&format!("  {name}={value}\tsource={source}\n"));
    }
    out!("{text}");
    Ok(())
}
