//! `strom user scram set | describe | delete`: the SCRAM credentials
//! SASL/SCRAM authenticates with, as Kafka's
//! `kafka-configs.sh --entity-type users --alter --add-config
//! 'SCRAM-SHA-512=[iterations=8192,password=...]'` manages them. `set`
//! salts the password here (a fresh random salt, PBKDF2 with the
//! mechanism's hash) and sends only the salted password
//! (AlterUserScramCredentials); `describe` lists each user's mechanisms
//! and iteration counts (DescribeUserScramCredentials). Through
//! `protocol::client`, so the tool works against any Kafka broker.

use std::ops::RangeInclusive;

use anyhow::{bail, Context};
use clap::builder::PossibleValuesParser;
use clap::{Args, Subcommand};
use kafka_protocol::messages::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, ApiKey, DescribeUserScramCredentialsRequest,
};
use kafka_protocol::protocol::StrBytes;
use protocol::client::{check_error, Connection};
use protocol::scram::{self, Mechanism, ITERATIONS_MAX, ITERATIONS_MIN};
use serde::Serialize;

use super::format::{print_json_object, Format};
use super::ConnectArgs;

const VERSIONS: RangeInclusive<i16> = 0..=0;
/// Salt bytes `set` draws (Kafka's tools draw a 20-byte-or-longer salt).
const SALT_BYTES: usize = 32;
const MECHANISM_NAMES: [&str; 2] = ["SCRAM-SHA-256", "SCRAM-SHA-512"];

const SET_EXAMPLES: &str = "\
Examples:
  # alice may authenticate with SCRAM-SHA-512 (the password read from a file):
  strom user scram set --user alice --mechanism SCRAM-SHA-512 --password-file alice.pw
  # The same through a SASL_SSL listener, authenticating as an admin:
  strom user scram set --user alice --mechanism SCRAM-SHA-512 --password-file alice.pw \\
      --bootstrap-server broker1:9093 --command-config admin.properties";

#[derive(Args, Debug)]
pub struct UserArgs {
    #[command(subcommand)]
    command: UserCommand,
}

#[derive(Subcommand, Debug)]
enum UserCommand {
    /// SCRAM credentials (SASL mechanisms SCRAM-SHA-256 and
    /// SCRAM-SHA-512), kept in the cluster's metadata on every broker.
    #[command(subcommand)]
    Scram(ScramCommand),
}

#[derive(Subcommand, Debug)]
enum ScramCommand {
    /// Set a user's credential for a mechanism (replacing the one it has):
    /// the password is salted here and never sent.
    #[command(after_help = SET_EXAMPLES)]
    Set(SetArgs),
    /// List users' SCRAM mechanisms and iteration counts: every user with
    /// a credential, or those named (one without any is an error).
    Describe(DescribeArgs),
    /// Delete a user's credential for a mechanism (one it does not have is
    /// an error). Connections that authenticated with it stay open.
    Delete(DeleteArgs),
}

#[derive(Args, Debug)]
#[command(group(
    clap::ArgGroup::new("secret").required(true).args(["password", "password_file"])
))]
struct SetArgs {
    /// The user (SASL user name; the principal is User:NAME).
    #[arg(long, value_name = "NAME")]
    user: String,
    /// The SCRAM mechanism.
    #[arg(long, value_name = "MECHANISM", value_parser = PossibleValuesParser::new(MECHANISM_NAMES))]
    mechanism: String,
    /// The password (shown in the process list: prefer --password-file).
    #[arg(long, value_name = "PASSWORD")]
    password: Option<String>,
    /// A file whose first line is the password.
    #[arg(long, value_name = "FILE")]
    password_file: Option<std::path::PathBuf>,
    /// PBKDF2 iterations, 4096 to 16384 (more: slower to guess, slower to
    /// authenticate for the client).
    #[arg(
        long,
        value_name = "N",
        default_value_t = ITERATIONS_MIN,
        value_parser = clap::value_parser!(i32).range(ITERATIONS_MIN as i64..=ITERATIONS_MAX as i64)
    )]
    iterations: i32,
    #[command(flatten)]
    connect: ConnectArgs,
}

#[derive(Args, Debug)]
struct DescribeArgs {
    /// Only this user (repeatable or comma-separated).
    #[arg(long = "user", value_name = "NAME", value_delimiter = ',')]
    users: Vec<String>,
    /// How to print: `text`, a header then USER<TAB>MECHANISM<TAB>ITERATIONS
    /// per credential, or `json`: {"users": [{"user", "credentials":
    /// [{"mechanism", "iterations"}]}]}.
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = Format::Text)]
    format: Format,
    #[command(flatten)]
    connect: ConnectArgs,
}

#[derive(Args, Debug)]
struct DeleteArgs {
    /// The user.
    #[arg(long, value_name = "NAME")]
    user: String,
    /// The SCRAM mechanism whose credential to delete.
    #[arg(long, value_name = "MECHANISM", value_parser = PossibleValuesParser::new(MECHANISM_NAMES))]
    mechanism: String,
    #[command(flatten)]
    connect: ConnectArgs,
}

pub async fn run(args: UserArgs) -> anyhow::Result<()> {
    match args.command {
        UserCommand::Scram(ScramCommand::Set(args)) => set(&args).await,
        UserCommand::Scram(ScramCommand::Describe(args)) => describe(&args).await,
        UserCommand::Scram(ScramCommand::Delete(args)) => delete(&args).await,
    }
}

fn mechanism(name: &str) -> Mechanism {
    Mechanism::from_name(name).expect("clap allows SCRAM mechanism names only")
}

async fn set(args: &SetArgs) -> anyhow::Result<()> {
    let password = match (&args.password, &args.password_file) {
        (Some(password), _) => password.clone(),
        (None, Some(path)) => std::fs::read_to_string(path)
            .with_context(|| format!("cannot read --password-file {}", path.display()))?
            .lines()
            .next()
            .unwrap_or_default()
            .to_string(),
        (None, None) => unreachable!("clap requires one of them"),
    };
    if password.is_empty() {
        bail!("the password is empty");
    }
    let mechanism = mechanism(&args.mechanism);
    let salt = scram::random_bytes(SALT_BYTES);
    let salted = mechanism.salted_password(password.as_bytes(), &salt, args.iterations as u32);
    let upsertion = ScramCredentialUpsertion::default()
        .with_name(StrBytes::from_string(args.user.clone()))
        .with_mechanism(mechanism.type_id())
        .with_iterations(args.iterations)
        .with_salt(salt.into())
        .with_salted_password(salted.into());
    let request = AlterUserScramCredentialsRequest::default().with_upsertions(vec![upsertion]);
    alter(&args.connect, request).await?;
    outln!(
        "Set the {} credential of user {} ({} iterations).",
        mechanism.name(),
        args.user,
        args.iterations
    );
    Ok(())
}

async fn delete(args: &DeleteArgs) -> anyhow::Result<()> {
    let mechanism = mechanism(&args.mechanism);
    let deletion = ScramCredentialDeletion::default()
        .with_name(StrBytes::from_string(args.user.clone()))
        .with_mechanism(mechanism.type_id());
    let request = AlterUserScramCredentialsRequest::default().with_deletions(vec![deletion]);
    alter(&args.connect, request).await?;
    outln!(
        "Deleted the {} credential of user {}.",
        mechanism.name(),
        args.user
    );
    Ok(())
}

/// Sends one change and checks each user's result.
async fn alter(
    connect: &ConnectArgs,
    request: AlterUserScramCredentialsRequest,
) -> anyhow::Result<()> {
    let mut connection: Connection = connect.connect().await?;
    let version = connection.version::<AlterUserScramCredentialsRequest>(VERSIONS)?;
    let response = connection.call(&request, version).await?;
    for result in &response.results {
        check_error(
            ApiKey::AlterUserScramCredentials,
            result.error_code,
            result.error_message.as_deref(),
        )
        .with_context(|| format!("user {}", result.user.as_str()))?;
    }
    Ok(())
}

#[derive(Debug, Serialize)]
struct User {
    user: String,
    credentials: Vec<Credential>,
}

#[derive(Debug, Serialize)]
struct Credential {
    mechanism: String,
    iterations: i32,
}

async fn describe(args: &DescribeArgs) -> anyhow::Result<()> {
    let mut connection = args.connect.connect().await?;
    let version = connection.version::<DescribeUserScramCredentialsRequest>(VERSIONS)?;
    let users = (!args.users.is_empty()).then(|| {
        args.users
            .iter()
            .map(|u| UserName::default().with_name(StrBytes::from_string(u.clone())))
            .collect()
    });
    let request = DescribeUserScramCredentialsRequest::default().with_users(users);
    let response = connection.call(&request, version).await?;
    check_error(
        ApiKey::DescribeUserScramCredentials,
        response.error_code,
        response.error_message.as_deref(),
    )?;
    let mut listed = Vec::new();
    for result in response.results {
        check_error(
            ApiKey::DescribeUserScramCredentials,
            result.error_code,
            result.error_message.as_deref(),
        )
        .with_context(|| format!("user {}", result.user.as_str()))?;
        listed.push(User {
            user: result.user.to_string(),
            credentials: result
                .credential_infos
                .iter()
                .map(|c| Credential {
                    mechanism: Mechanism::from_type_id(c.mechanism).map_or_else(
                        || format!("UNKNOWN({})", c.mechanism),
                        |m| m.name().to_string(),
                    ),
                    iterations: c.iterations,
                })
                .collect(),
        });
    }
    match args.format {
        Format::Json => print_json_object("users", &listed)?,
        Format::Text => {
            outln!("USER\tMECHANISM\tITERATIONS");
            for user in &listed {
                for credential in &user.credentials {
                    outln!(
                        "{}\t{}\t{}",
                        user.user,
                        credential.mechanism,
                        credential.iterations
                    );
                }
            }
        }
    }
    Ok(())
}
