//! `strom`: the broker binary.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

mod cli;

#[global_allocator]
static ALLOCATOR: broker::allocator::Split = broker::allocator::Split;

/// Exit code for configuration errors (bad flag, key or value).
const EXIT_CONFIG: u8 = 2;
/// Exit code for failures at start-up or while running.
const EXIT_RUNTIME: u8 = 1;

#[derive(Parser)]
#[command(
    name = "strom",
    version,
    about = "Strom: a Kafka-compatible thread-per-core broker"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Start a broker (the default when no command is given).
    Start(StartArgs),
    /// Create, list, describe, alter and delete topics.
    Topic(cli::topic::TopicArgs),
    /// Write stdin lines as records to a topic.
    Produce(cli::produce::ProduceArgs),
    /// Print a topic's records to stdout.
    Consume(cli::consume::ConsumeArgs),
    /// List, describe, reset the offsets of and delete consumer groups.
    Group(cli::group::GroupArgs),
    /// List, describe, reset the start offsets of and delete share groups
    /// (as kafka-share-groups.sh).
    ShareGroup(cli::group::ShareGroupArgs),
    /// List and describe transactions, show a partition's producers, and
    /// abort a hanging transaction (as kafka-transactions.sh).
    Transaction(cli::transaction::TransactionArgs),
    /// Add, list and remove ACLs (as kafka-acls.sh), for the authorizer.
    Acl(cli::acl::AclArgs),
    /// Set, list and delete users' SCRAM credentials (SASL/SCRAM).
    User(cli::user::UserArgs),
    /// Show the cluster's brokers, controller quorum and partition health.
    Cluster(cli::cluster::ClusterArgs),
    /// Show a broker's settings (DescribeConfigs).
    Config(cli::config::ConfigArgs),
    /// One-screen summary of a running broker (from its admin listener).
    Status(cli::status::StatusArgs),
    /// Offline repairs start-up names when it refuses to drop data.
    Repair(cli::repair::RepairArgs),
    /// Print a data dir's files and their damage (`strom log dump PATH`).
    Log(cli::log_dump::LogArgs),
    /// Print the configuration reference (Markdown), generated from the code.
    ConfigReference,
}

#[derive(Args, Default)]
struct StartArgs {
    /// TOML config file; Kafka's names for Kafka's settings.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Directory for partition logs and the metadata log [default: ./strom-data].
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Address to listen on for clients [default: 127.0.0.1:9092].
    #[arg(long, value_name = "HOST:PORT")]
    listen: Option<String>,
    /// Address clients are told to connect to [default: the listen address].
    #[arg(long, value_name = "HOST:PORT")]
    advertise: Option<String>,
    /// This broker's node id [default: 0].
    #[arg(long, value_name = "N")]
    node_id: Option<String>,
    /// Executors (one per core) [default: every online core, or every CPU of --cpuset].
    #[arg(long, value_name = "N")]
    cores: Option<String>,
    /// CPUs the executors are pinned to, in order, as Linux lists them
    /// (e.g. 0-3,8): several brokers on one host each get their own
    /// [default: CPUs 0..cores].
    #[arg(long, value_name = "CPUS")]
    cpuset: Option<String>,
    /// Admin HTTP listener: /metrics, /health, /ready, /status; `off` for none [default: 127.0.0.1:9644].
    #[arg(long, value_name = "HOST:PORT")]
    admin_listen: Option<String>,
    /// Log lines as `text` or `json` (one object per line) [default: text].
    #[arg(long, value_name = "FORMAT")]
    log_format: Option<String>,
    /// Any other setting, in Kafka's names (repeatable), e.g. --set num.partitions=3.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    settings: Vec<String>,
}

fn init_logging(format: broker::config::LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("STROM_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        broker::config::LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        // One object per line, the event's fields beside `message`.
        broker::config::LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}

fn start(args: StartArgs) -> ExitCode {
    let mut settings = Vec::with_capacity(args.settings.len());
    for setting in &args.settings {
        let Some((key, value)) = setting.split_once('=') else {
            eprintln!("strom: --set expects KEY=VALUE, got {setting:?}");
            return ExitCode::from(EXIT_CONFIG);
        };
        settings.push((key.trim().to_string(), value.to_string()));
    }
    if let Some(format) = args.log_format {
        settings.push(("log.format".to_string(), format));
    }
    let flags = broker::config::Flags {
        config_file: args.config,
        data_dir: args.data_dir,
        listen: args.listen,
        advertise: args.advertise,
        node_id: args.node_id,
        cores: args.cores,
        cpuset: args.cpuset,
        admin_listen: args.admin_listen,
        settings,
    };
    let config = match broker::config::load(&flags) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("strom: configuration error: {error}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    init_logging(config.log_format);
    match broker::runtime::run(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error:#}");
            eprintln!("strom: {error:#}");
            ExitCode::from(EXIT_RUNTIME)
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Start(args)) => start(args),
        Some(Command::Topic(args)) => cli::run("topic", cli::topic::run(args)),
        Some(Command::Produce(args)) => cli::run("produce", cli::produce::run(args)),
        Some(Command::Consume(args)) => cli::run("consume", cli::consume::run(args)),
        Some(Command::Group(args)) => cli::run("group", cli::group::run(args)),
        Some(Command::ShareGroup(args)) => cli::run("share-group", cli::group::run_share(args)),
        Some(Command::Transaction(args)) => cli::run("transaction", cli::transaction::run(args)),
        Some(Command::Acl(args)) => cli::run("acl", cli::acl::run(args)),
        Some(Command::User(args)) => cli::run("user", cli::user::run(args)),
        Some(Command::Cluster(args)) => cli::run("cluster", cli::cluster::run(args)),
        Some(Command::Config(args)) => cli::run("config", cli::config::run(args)),
        Some(Command::Status(args)) => cli::status::run(args),
        Some(Command::Repair(args)) => match cli::repair::run(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("strom repair: {error:#}");
                ExitCode::from(EXIT_RUNTIME)
            }
        },
        Some(Command::Log(args)) => cli::log_dump::run(args),
        Some(Command::ConfigReference) => {
            cli::write_stdout(format_args!("{}", broker::config::reference::render()));
            ExitCode::SUCCESS
        }
        None => start(StartArgs::default()),
    }
}
