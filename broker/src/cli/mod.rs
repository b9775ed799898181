//! The admin and console tools of the `strom` binary (`strom topic`,
//! `strom produce`, `strom consume`, `strom group`, `strom transaction`,
//! `strom config`, `strom cluster`), built
//! on `protocol::client`, `protocol::admin` and `protocol::consumer_protocol`
//! (not on the broker's internals), so they work against any Kafka broker;
//! only `strom repair`, `strom status` and `strom log dump` read the
//! broker's own files and status types. Each runs on one glommio executor
//! on the calling thread (`strom log dump` on none: it only reads files);
//! a failure prints one line on stderr and exits 1. Everything they print
//! goes through [`out!`] and [`outln!`] (`strom log dump`: its own buffered
//! printer, with the same ending), so a reader that goes away
//! (`strom topic list | head -1`) ends the tool quietly, as it ends any
//! Unix tool.

/// `print!` that ends the tool quietly (status 0) when stdout's reader is
/// gone, instead of panicking as `print!` does.
macro_rules! out {
    ($($arg:tt)*) => { $crate::cli::write_stdout(format_args!($($arg)*)) };
}

/// `println!` that ends the tool quietly when stdout's reader is gone.
macro_rules! outln {
    () => { $crate::cli::write_stdout(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::cli::write_stdout(format_args!("{}\n", format_args!($($arg)*))) };
}

pub mod acl;
pub mod cluster;
pub mod config;
pub mod consume;
pub mod format;
pub mod group;
pub mod log_dump;
pub mod produce;
pub mod repair;
pub mod retry;
pub mod status;
pub mod topic;
pub mod transaction;
pub mod user;

use std::future::Future;
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::bail;
use clap::Args;
use protocol::client::{ClientConfig, Connection};

/// The first pause before the bootstrap brokers are tried again, and the
/// longest; rounds at most (the timeout ends them first).
const CONNECT_RETRY_PAUSE_MIN: Duration = Duration::from_millis(50);
const CONNECT_RETRY_PAUSE_MAX: Duration = Duration::from_millis(500);
const CONNECT_ROUNDS_MAX: usize = 10_000;

/// Exit code when the broker is unreachable or a request fails.
pub const EXIT_FAILURE: u8 = 1;
/// io memory of the tools' executor: small, so that it fits the memlock
/// limit of an unprivileged user (see docs/broker.md).
const IO_MEMORY_BYTES: usize = 1 << 20;

/// The environment variable that gives the broker when no flag does.
pub const BOOTSTRAP_ENV: &str = "STROM_BOOTSTRAP";
/// Broker address when neither a flag nor `STROM_BOOTSTRAP` gives one.
const BOOTSTRAP_DEFAULT: &str = "127.0.0.1:9092";
/// Addresses a `--bootstrap` list may hold.
const BOOTSTRAP_ADDRESSES_MAX: usize = 64;

/// Writes to stdout and flushes. A reader that went away (EPIPE, e.g.
/// `| head -1`) ends the process quietly with status 0: what was asked is
/// done and nobody reads the rest. Any other write error exits 1.
pub fn write_stdout(text: std::fmt::Arguments) {
    let mut stdout = std::io::stdout().lock();
    let written = stdout.write_fmt(text).and_then(|()| stdout.flush());
    if let Err(error) = written {
        exit_on_stdout_error(&error);
    }
}

/// Ends the process after a failed write to stdout: quietly (status 0)
/// when the reader is gone, else with one line and status 1.
pub fn exit_on_stdout_error(error: &std::io::Error) -> ! {
    if error.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    eprintln!("strom: cannot write to stdout: {error}");
    std::process::exit(i32::from(EXIT_FAILURE));
}

/// Whether an error is stdout's reader going away (EPIPE).
pub fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

#[derive(Args, Clone, Debug)]
pub struct ConnectArgs {
    /// Broker to connect to, or a comma-separated list tried in order; a
    /// host alone means port 9092 [default: $STROM_BOOTSTRAP, else
    /// 127.0.0.1:9092].
    #[arg(
        long,
        short = 'b',
        visible_alias = "bootstrap-server",
        value_name = "HOST[:PORT][,...]"
    )]
    pub bootstrap: Option<String>,
    /// How long to wait for a bootstrap broker to take the connection
    /// (tried again while refused: a broker that is starting) and for each
    /// response, and how long to keep sending again a request answered
    /// with an error Kafka calls retriable (NOT_CONTROLLER,
    /// UNKNOWN_TOPIC_OR_PARTITION from a new partition's leader, ...), in
    /// milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 30_000)]
    pub timeout_ms: u64,
    /// Client properties (`key=value` lines, as Kafka's tools take):
    /// `security.protocol` (PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL);
    /// for TLS `ssl.truststore.location` (or librdkafka's
    /// `ssl.ca.location`), a PEM file of the authorities the broker's
    /// certificate chains to, and for mutual TLS `ssl.keystore.location`
    /// (key and certificate in one PEM file) or `ssl.certificate.location`
    /// and `ssl.key.location`; for SASL `sasl.mechanism` (PLAIN,
    /// SCRAM-SHA-256, SCRAM-SHA-512) and `sasl.jaas.config`
    /// (PlainLoginModule or ScramLoginModule with username and password)
    /// or `sasl.username` and `sasl.password`.
    #[arg(long, value_name = "FILE")]
    pub command_config: Option<std::path::PathBuf>,
}

impl ConnectArgs {
    /// Connect settings for another broker (a group's coordinator).
    pub fn to(&self, address: String) -> ConnectArgs {
        ConnectArgs {
            bootstrap: Some(address),
            timeout_ms: self.timeout_ms,
            command_config: self.command_config.clone(),
        }
    }

    /// The brokers to try, in order: the flag, else `STROM_BOOTSTRAP`, else
    /// the default; a comma-separated list as Kafka's tools take; `:9092`
    /// added to a bare host.
    pub fn addresses(&self) -> anyhow::Result<Vec<String>> {
        let given = match &self.bootstrap {
            Some(flag) => flag.clone(),
            None => match std::env::var(BOOTSTRAP_ENV) {
                Ok(value) if !value.trim().is_empty() => value,
                Ok(_) => BOOTSTRAP_DEFAULT.to_string(),
                Err(std::env::VarError::NotPresent) => BOOTSTRAP_DEFAULT.to_string(),
                Err(std::env::VarError::NotUnicode(_)) => {
                    bail!("{BOOTSTRAP_ENV} is not valid UTF-8")
                }
            },
        };
        let addresses = protocol::client::bootstrap_list(&given)?;
        if addresses.len() > BOOTSTRAP_ADDRESSES_MAX {
            bail!(
                "at most {BOOTSTRAP_ADDRESSES_MAX} bootstrap addresses, got {}",
                addresses.len()
            );
        }
        Ok(addresses)
    }

    /// Connects to the first of the bootstrap brokers that answers.
    pub async fn connect(&self) -> anyhow::Result<Connection> {
        self.connect_rounds(CONNECT_ROUNDS_MAX).await
    }

    /// Tries each bootstrap broker once, for a caller that paces its own
    /// attempts (consume reconnecting).
    pub async fn connect_once(&self) -> anyhow::Result<Connection> {
        self.connect_rounds(1).await
    }

    /// Tries the bootstrap list `rounds` times at most, within the timeout.
    async fn connect_rounds(&self, rounds: usize) -> anyhow::Result<Connection> {
        let timeout = Duration::from_millis(self.timeout_ms.max(1));
        let (tls, sasl) = match &self.command_config {
            Some(path) => protocol::properties::security(path, "strom", "strom's tools")?,
            None => (None, None),
        };
        let config = ClientConfig {
            client_id: "strom-cli".to_string(),
            software_name: "strom-cli".to_string(),
            connect_timeout: timeout,
            request_timeout: timeout,
            tls,
            sasl,
            ..ClientConfig::default()
        };
        // A broker that is starting refuses connections until it listens:
        // the bootstrap list is tried again, as Kafka's tools do, until
        // the timeout (each round after a short pause).
        let addresses = self.addresses()?;
        let deadline = std::time::Instant::now() + timeout;
        let mut pause = CONNECT_RETRY_PAUSE_MIN;
        let mut failures = Vec::new();
        for round in 1..=rounds {
            match protocol::client::connect_first(&addresses, &config).await {
                Ok(connection) => return Ok(connection),
                Err(round_failures) => failures = round_failures,
            }
            if round == rounds || std::time::Instant::now() + pause >= deadline {
                break;
            }
            glommio::timer::sleep(pause).await;
            pause = (pause * 2).min(CONNECT_RETRY_PAUSE_MAX);
        }
        match failures.len() {
            1 => Err(failures.remove(0).into()),
            _ => {
                let all: Vec<String> = failures.iter().map(ToString::to_string).collect();
                bail!("no bootstrap broker answered: {}", all.join("; "))
            }
        }
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
        Err(error) if is_broken_pipe(&error) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("strom {tool}: {error:#}");
            ExitCode::from(EXIT_FAILURE)
        }
    }
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
