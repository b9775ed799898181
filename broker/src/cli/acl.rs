//! `strom acl add | list | remove`: the ACLs the built-in authorizer
//! decides by, with kafka-acls.sh's options (CreateAcls, DescribeAcls,
//! DeleteAcls). Through `protocol::client`, so the tool works against any
//! Kafka broker with an authorizer.

use std::ops::RangeInclusive;

use anyhow::bail;
use clap::{Args, Subcommand};
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::{ApiKey, CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest};
use kafka_protocol::protocol::StrBytes;
use protocol::client::check_error;
use serde::Serialize;

use super::format::{print_json_object, Format};
use super::ConnectArgs;
use broker::authorizer::{
    operation_name, pattern, pattern_name, permission, permission_name, resource, resource_name,
    CLUSTER_NAME, OPERATIONS,
};

const VERSIONS: RangeInclusive<i16> = 1..=3;

const ADD_EXAMPLES: &str = "\
Examples:
  # alice may produce to orders and every topic starting with orders-:
  strom acl add --allow-principal User:alice --operation Write --topic orders
  strom acl add --allow-principal User:alice --operation Write --topic orders- \\
      --resource-pattern-type prefixed
  # bob may consume with group billing, but never from orders-secret:
  strom acl add --allow-principal User:bob --operation Read --topic orders --group billing
  strom acl add --deny-principal User:bob --operation All --topic orders-secret";

#[derive(Args, Debug)]
pub struct AclArgs {
    #[command(subcommand)]
    command: AclCommand,
}

#[derive(Subcommand, Debug)]
enum AclCommand {
    /// Add ACLs: each principal given may (or, --deny-principal, may
    /// not) do each operation given on each resource given.
    #[command(after_help = ADD_EXAMPLES)]
    Add(ChangeArgs),
    /// List the ACLs, all of them or those on the resources given (with
    /// --resource-pattern-type match: those that apply to them).
    List(ListArgs),
    /// Remove the ACLs matching the options (the same as `add` took, or
    /// fewer: a missing principal or operation matches any).
    Remove(ChangeArgs),
}

/// The resources named (kafka-acls.sh's --topic, --group, --cluster,
/// --transactional-id).
#[derive(Args, Debug, Default)]
struct Resources {
    /// A topic (repeatable).
    #[arg(long = "topic", value_name = "TOPIC")]
    topics: Vec<String>,
    /// A consumer group (repeatable).
    #[arg(long = "group", value_name = "GROUP")]
    groups: Vec<String>,
    /// The cluster.
    #[arg(long)]
    cluster: bool,
    /// A transactional id (repeatable).
    #[arg(long = "transactional-id", value_name = "ID")]
    transactional_ids: Vec<String>,
}

impl Resources {
    fn list(&self) -> Vec<(i8, String)> {
        let mut out = Vec::new();
        out.extend(self.topics.iter().map(|t| (resource::TOPIC, t.clone())));
        out.extend(self.groups.iter().map(|g| (resource::GROUP, g.clone())));
        if self.cluster {
            out.push((resource::CLUSTER, CLUSTER_NAME.to_string()));
        }
        out.extend(
            self.transactional_ids
                .iter()
                .map(|t| (resource::TRANSACTIONAL_ID, t.clone())),
        );
        out
    }
}

#[derive(Args, Debug)]
struct ChangeArgs {
    #[command(flatten)]
    resources: Resources,
    /// `literal` (the name itself, or `*`: every one) or `prefixed`
    /// (every name starting with it); `remove` also takes `any` and
    /// `match`.
    #[arg(long, value_name = "TYPE", default_value = "literal")]
    resource_pattern_type: String,
    /// A principal allowed (User:NAME, User:* for any; repeatable).
    #[arg(long = "allow-principal", value_name = "PRINCIPAL")]
    allow: Vec<String>,
    /// A principal denied (repeatable); a deny wins over any allow.
    #[arg(long = "deny-principal", value_name = "PRINCIPAL")]
    deny: Vec<String>,
    /// The host the ACLs apply to (`*`: any).
    #[arg(long, value_name = "HOST", default_value = "*")]
    host: String,
    /// An operation (repeatable): All, Read, Write, Create, Delete, Alter,
    /// Describe, ClusterAction, DescribeConfigs, AlterConfigs,
    /// IdempotentWrite, CreateTokens, DescribeTokens.
    #[arg(long = "operation", value_name = "OPERATION")]
    operations: Vec<String>,
    #[command(flatten)]
    connect: ConnectArgs,
}

#[derive(Args, Debug)]
struct ListArgs {
    #[command(flatten)]
    resources: Resources,
    /// `any` (default), `literal`, `prefixed` or `match`.
    #[arg(long, value_name = "TYPE", default_value = "any")]
    resource_pattern_type: String,
    /// Only the ACLs of this principal.
    #[arg(long, value_name = "PRINCIPAL")]
    principal: Option<String>,
    /// How to print: `text`, a header then RESOURCE-TYPE, NAME, PATTERN,
    /// PRINCIPAL, HOST, OPERATION, PERMISSION per line, tab-separated, or
    /// `json`: {"acls": [{"resource_type", "resource_name",
    /// "pattern_type", "principal", "host", "operation", "permission"}]}.
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = Format::Text)]
    format: Format,
    #[command(flatten)]
    connect: ConnectArgs,
}

pub async fn run(args: AclArgs) -> anyhow::Result<()> {
    match args.command {
        AclCommand::Add(args) => add(&args).await,
        AclCommand::List(args) => list(&args).await,
        AclCommand::Remove(args) => remove(&args).await,
    }
}

fn pattern_code(name: &str, filter: bool) -> anyhow::Result<i8> {
    let code = match name.to_ascii_lowercase().as_str() {
        "literal" => pattern::LITERAL,
        "prefixed" => pattern::PREFIXED,
        "any" if filter => pattern::ANY,
        "match" if filter => pattern::MATCH,
        _ => bail!(
            "--resource-pattern-type {name:?}: expected literal or prefixed{}",
            if filter { ", any or match" } else { "" }
        ),
    };
    Ok(code)
}

/// An operation's code from kafka-acls.sh's name (Read, ClusterAction,
/// ...), any case, with or without `_`.
fn operation_code(name: &str) -> anyhow::Result<i8> {
    let wanted = name.replace('_', "").to_ascii_lowercase();
    OPERATIONS
        .iter()
        .find(|(_, n)| n.replace('_', "").to_ascii_lowercase() == wanted)
        .map(|(c, _)| *c)
        .ok_or_else(|| {
            let names: Vec<&str> = OPERATIONS.iter().map(|(_, n)| *n).collect();
            anyhow::anyhow!("--operation {name:?} is not one of {}", names.join(", "))
        })
}

/// Each (principal, permission) the arguments name.
fn principals(args: &ChangeArgs) -> Vec<(String, i8)> {
    let allow = args.allow.iter().map(|p| (p.clone(), permission::ALLOW));
    let deny = args.deny.iter().map(|p| (p.clone(), permission::DENY));
    allow.chain(deny).collect()
}

async fn add(args: &ChangeArgs) -> anyhow::Result<()> {
    let pattern_type = pattern_code(&args.resource_pattern_type, false)?;
    let resources = args.resources.list();
    if resources.is_empty() {
        bail!("name a resource: --topic, --group, --cluster or --transactional-id");
    }
    let principals = principals(args);
    if principals.is_empty() {
        bail!("name a principal: --allow-principal or --deny-principal (User:NAME)");
    }
    if args.operations.is_empty() {
        bail!("name an operation: --operation (Read, Write, Describe, All, ...)");
    }
    let operations = args
        .operations
        .iter()
        .map(|o| operation_code(o))
        .collect::<anyhow::Result<Vec<i8>>>()?;
    let mut creations = Vec::new();
    for (kind, name) in &resources {
        for (principal, permission) in &principals {
            for &op in &operations {
                creations.push(
                    AclCreation::default()
                        .with_resource_type(*kind)
                        .with_resource_name(StrBytes::from_string(name.clone()))
                        .with_resource_pattern_type(pattern_type)
                        .with_principal(StrBytes::from_string(principal.clone()))
                        .with_host(StrBytes::from_string(args.host.clone()))
                        .with_operation(op)
                        .with_permission_type(*permission),
                );
            }
        }
    }
    let count = creations.len();
    let mut connection = args.connect.connect().await?;
    let version = connection.version::<CreateAclsRequest>(VERSIONS)?;
    let response = connection
        .call(
            &CreateAclsRequest::default().with_creations(creations),
            version,
        )
        .await?;
    for result in &response.results {
        check_error(
            ApiKey::CreateAcls,
            result.error_code,
            result.error_message.as_deref(),
        )?;
    }
    outln!("Added {count} ACL(s).");
    Ok(())
}

async fn remove(args: &ChangeArgs) -> anyhow::Result<()> {
    let pattern_type = pattern_code(&args.resource_pattern_type, true)?;
    let mut resources: Vec<(i8, Option<String>)> = args
        .resources
        .list()
        .into_iter()
        .map(|(k, n)| (k, Some(n)))
        .collect();
    if resources.is_empty() {
        bail!("name a resource: --topic, --group, --cluster or --transactional-id");
    }
    let mut principals: Vec<(Option<String>, i8)> = principals(args)
        .into_iter()
        .map(|(p, k)| (Some(p), k))
        .collect();
    if principals.is_empty() {
        principals.push((None, permission::ANY));
    }
    let mut operations = args
        .operations
        .iter()
        .map(|o| operation_code(o))
        .collect::<anyhow::Result<Vec<i8>>>()?;
    if operations.is_empty() {
        operations.push(broker::authorizer::operation::ANY);
    }
    let mut filters = Vec::new();
    for (kind, name) in resources.drain(..) {
        for (principal, permission) in &principals {
            for &op in &operations {
                filters.push(
                    DeleteAclsFilter::default()
                        .with_resource_type_filter(kind)
                        .with_resource_name_filter(name.clone().map(StrBytes::from_string))
                        .with_pattern_type_filter(pattern_type)
                        .with_principal_filter(principal.clone().map(StrBytes::from_string))
                        .with_host_filter(
                            (args.host != "*").then(|| StrBytes::from_string(args.host.clone())),
                        )
                        .with_operation(op)
                        .with_permission_type(*permission),
                );
            }
        }
    }
    let mut connection = args.connect.connect().await?;
    let version = connection.version::<DeleteAclsRequest>(VERSIONS)?;
    let response = connection
        .call(&DeleteAclsRequest::default().with_filters(filters), version)
        .await?;
    let mut removed = 0;
    for result in &response.filter_results {
        check_error(
            ApiKey::DeleteAcls,
            result.error_code,
            result.error_message.as_deref(),
        )?;
        removed += result.matching_acls.len();
    }
    outln!("Removed {removed} ACL(s).");
    Ok(())
}

#[derive(Debug, Serialize)]
struct Listed {
    resource_type: String,
    resource_name: String,
    pattern_type: String,
    principal: String,
    host: String,
    operation: String,
    permission: String,
}

async fn list(args: &ListArgs) -> anyhow::Result<()> {
    let pattern_type = pattern_code(&args.resource_pattern_type, true)?;
    let mut filters: Vec<(i8, Option<String>)> = args
        .resources
        .list()
        .into_iter()
        .map(|(k, n)| (k, Some(n)))
        .collect();
    if filters.is_empty() {
        filters.push((resource::ANY, None));
    }
    let mut connection = args.connect.connect().await?;
    let version = connection.version::<DescribeAclsRequest>(VERSIONS)?;
    let mut listed = Vec::new();
    for (kind, name) in filters {
        let request = DescribeAclsRequest::default()
            .with_resource_type_filter(kind)
            .with_resource_name_filter(name.map(StrBytes::from_string))
            .with_pattern_type_filter(pattern_type)
            .with_principal_filter(args.principal.clone().map(StrBytes::from_string))
            .with_host_filter(None)
            .with_operation(broker::authorizer::operation::ANY)
            .with_permission_type(permission::ANY);
        let response = connection.call(&request, version).await?;
        check_error(
            ApiKey::DescribeAcls,
            response.error_code,
            response.error_message.as_deref(),
        )?;
        for resource in &response.resources {
            for acl in &resource.acls {
                listed.push(Listed {
                    resource_type: resource_name(resource.resource_type).to_string(),
                    resource_name: resource.resource_name.to_string(),
                    pattern_type: pattern_name(resource.pattern_type).to_string(),
                    principal: acl.principal.to_string(),
                    host: acl.host.to_string(),
                    operation: operation_name(acl.operation).to_string(),
                    permission: permission_name(acl.permission_type).to_string(),
                });
            }
        }
    }
    match args.format {
        Format::Json => print_json_object("acls", &listed)?,
        Format::Text => {
            outln!("RESOURCE-TYPE\tNAME\tPATTERN\tPRINCIPAL\tHOST\tOPERATION\tPERMISSION");
            for acl in &listed {
                outln!(
                    "{}\t{}\t{}\t{}\t{}\t{}\t{}",
                    acl.resource_type,
                    acl.resource_name,
                    acl.pattern_type,
                    acl.principal,
                    acl.host,
                    acl.operation,
                    acl.permission
                );
            }
        }
    }
    Ok(())
}
