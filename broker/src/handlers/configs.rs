//! DescribeConfigs (32) 1–4, AlterConfigs (33) 0–2 and
//! IncrementalAlterConfigs (44) 0–1, for topics, the broker (its node id,
//! and `""` for the cluster-wide defaults: the dynamic settings) and
//! consumer groups. Changes apply live and are kept in the metadata log;
//! see `config::dynamic` for what each resource holds.

use std::collections::BTreeMap;
use std::rc::Rc;

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{
    alter_configs_response, incremental_alter_configs_request, incremental_alter_configs_response,
    AlterConfigsRequest, AlterConfigsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};
use kafka_protocol::protocol::StrBytes;

use crate::config::dynamic::{self as dynamic_config, Described};
use crate::controller::{self, Refusal};
use crate::errors;
use crate::shard::Shard;
use crate::topic_config;

pub const DESCRIBE_VERSION_MIN: i16 = 1;
pub const DESCRIBE_VERSION_MAX: i16 = 4;
pub const ALTER_VERSION_MIN: i16 = 0;
pub const ALTER_VERSION_MAX: i16 = 2;
pub const INCREMENTAL_VERSION_MIN: i16 = 0;
pub const INCREMENTAL_VERSION_MAX: i16 = 1;

const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
const RESOURCE_GROUP: i8 = 32;

const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
const OP_APPEND: i8 = 2;
const OP_SUBTRACT: i8 = 3;

/// Config types and documentation are in v3+.
const TYPE_AND_DOCUMENTATION_VERSION_MIN: i16 = 3;

/// What a DescribeConfigs request asks to be included.
#[derive(Clone, Copy)]
struct Include {
    synonyms: bool,
    documentation: bool,
    types: bool,
}

fn text(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_string())
}

fn entry(described: Described, include: Include) -> DescribeConfigsResourceResult {
    let mut result = DescribeConfigsResourceResult::default()
        .with_name(text(&described.name))
        .with_value(described.value.as_deref().map(text))
        .with_config_source(described.source)
        .with_read_only(described.read_only);
    if include.synonyms {
        result = result.with_synonyms(
            described
                .synonyms
                .iter()
                .map(|(name, value, source)| {
                    DescribeConfigsSynonym::default()
                        .with_name(text(name))
                        .with_value(value.as_deref().map(text))
                        .with_source(*source)
                })
                .collect(),
        );
    }
    if include.types {
        result = result.with_config_type(dynamic_config::config_type(&described.name));
    }
    if include.documentation {
        result =
            result.with_documentation(dynamic_config::documentation(&described.name).map(text));
    }
    result
}

fn wanted(keys: &Option<Vec<StrBytes>>, name: &str) -> bool {
    keys.as_ref()
        .is_none_or(|keys| keys.iter().any(|k| k.as_str() == name))
}

fn refused(result: DescribeConfigsResult, code: i16, message: String) -> DescribeConfigsResult {
    result
        .with_error_code(code)
        .with_error_message(Some(StrBytes::from_string(message)))
}

pub fn describe(
    shard: &Rc<Shard>,
    request: DescribeConfigsRequest,
    version: i16,
) -> DescribeConfigsResponse {
    let image = shard.metadata.image();
    let config = &shard.config;
    let defaults = dynamic_config::topic_defaults(config, &image);
    let include = Include {
        synonyms: request.include_synonyms,
        documentation: request.include_documentation
            && version >= TYPE_AND_DOCUMENTATION_VERSION_MIN,
        types: version >= TYPE_AND_DOCUMENTATION_VERSION_MIN,
    };
    let results = request
        .resources
        .into_iter()
        .map(|resource| {
            let name = resource.resource_name.as_str().to_string();
            let keys = &resource.configuration_keys;
            let result = DescribeConfigsResult::default()
                .with_resource_type(resource.resource_type)
                .with_resource_name(resource.resource_name.clone());
            let described: Vec<Described> = match resource.resource_type {
                RESOURCE_TOPIC => match image.topics.get(&name) {
                    None => {
                        return refused(
                            result,
                            errors::UNKNOWN_TOPIC_OR_PARTITION,
                            format!("topic {name} does not exist"),
                        )
                    }
                    Some(topic) => topic_config::topic_keys()
                        .filter(|key| wanted(keys, key))
                        .map(|key| {
                            dynamic_config::describe_topic_key(
                                config,
                                &image,
                                &defaults,
                                &topic.configs,
                                key,
                            )
                        })
                        .collect(),
                },
                RESOURCE_BROKER if name == dynamic_config::CLUSTER_DEFAULT => {
                    dynamic_config::describe_cluster_defaults(&image)
                        .into_iter()
                        .filter(|d| wanted(keys, &d.name))
                        .collect()
                }
                RESOURCE_BROKER if name == config.node_id.to_string() => {
                    dynamic_config::broker_keys()
                        .into_iter()
                        .filter(|key| wanted(keys, key))
                        .map(|key| dynamic_config::describe_broker_key(config, &image, key))
                        .collect()
                }
                RESOURCE_BROKER => {
                    return refused(
                        result,
                        errors::INVALID_REQUEST,
                        format!(
                            "unexpected broker id {name:?}: this is broker {}; use its id or \"\" for the cluster-wide defaults",
                            config.node_id
                        ),
                    )
                }
                RESOURCE_GROUP => dynamic_config::describe_group(&image, &name)
                    .into_iter()
                    .filter(|d| wanted(keys, &d.name))
                    .collect(),
                other => {
                    return refused(
                        result,
                        errors::INVALID_REQUEST,
                        format!("resource type {other} is not supported"),
                    )
                }
            };
            result.with_configs(described.into_iter().map(|d| entry(d, include)).collect())
        })
        .collect();
    DescribeConfigsResponse::default().with_results(results)
}

fn refusal_parts(outcome: Result<(), Refusal>) -> (i16, Option<StrBytes>) {
    match outcome {
        Ok(()) => (errors::NONE, None),
        Err(refusal) => (
            refusal.error_code,
            Some(StrBytes::from_string(refusal.message)),
        ),
    }
}

/// Applies a whole new set of settings to one resource.
async fn replace(
    shard: &Rc<Shard>,
    resource_type: i8,
    name: String,
    configs: BTreeMap<String, String>,
    validate_only: bool,
) -> Result<(), Refusal> {
    match resource_type {
        RESOURCE_TOPIC => controller::set_topic_configs(shard, name, configs, validate_only).await,
        RESOURCE_BROKER => {
            check_broker_resource(shard, &name)?;
            let own = name == shard.config.node_id.to_string();
            // This broker's keystores: the new ones must serve before they
            // are kept, and are read again once they are.
            let listeners = if own {
                check_keystores(shard, &configs)?
            } else {
                Vec::new()
            };
            controller::set_broker_configs(shard, name, configs, validate_only).await?;
            if !validate_only && !listeners.is_empty() {
                crate::config::apply_keystores(
                    &shard.config,
                    &shard.metadata.image(),
                    true,
                    &listeners,
                );
            }
            Ok(())
        }
        RESOURCE_GROUP => controller::set_group_configs(shard, name, configs, validate_only).await,
        other => Err(Refusal {
            error_code: errors::INVALID_REQUEST,
            message: format!("resource type {other} cannot be changed"),
        }),
    }
}

/// The TLS listeners whose keystore settings `configs` (a broker's whole
/// dynamic set) names, each checked by building its configuration with
/// them (the files read): INVALID_CONFIG with why when one does not serve.
fn check_keystores(
    shard: &Shard,
    configs: &BTreeMap<String, String>,
) -> Result<Vec<String>, Refusal> {
    let mut named = Vec::new();
    for key in configs.keys() {
        let Some((listener, _)) = crate::tls::reloadable(key) else {
            continue;
        };
        let Some(tls) = shard
            .config
            .listeners
            .iter()
            .find(|l| l.name == listener)
            .and_then(|l| l.tls.clone())
        else {
            return Err(Refusal {
                error_code: errors::INVALID_CONFIG,
                message: format!("{key}: this broker has no TLS listener {listener}"),
            });
        };
        if named.contains(&listener) {
            continue;
        }
        let overrides: Vec<(String, String)> = configs
            .iter()
            .filter_map(|(k, v)| {
                let (l, key) = crate::tls::reloadable(k)?;
                (l == listener).then(|| (key.to_string(), v.clone()))
            })
            .collect();
        tls.build(&overrides).map_err(|(setting, why)| Refusal {
            error_code: errors::INVALID_CONFIG,
            message: format!(
                "Validation of dynamic config update of SSLFactory failed: listener {listener}: \
                 {setting}: {why}"
            ),
        })?;
        named.push(listener);
    }
    Ok(named)
}

/// A broker resource is this node's id or `""` (the cluster-wide default).
/// The broker a change names: the cluster-wide defaults, this broker, or
/// in a cluster any registered broker (a change is forwarded to the
/// controller, which keeps it in the metadata log for that broker).
fn check_broker_resource(shard: &Shard, name: &str) -> Result<(), Refusal> {
    if name == dynamic_config::CLUSTER_DEFAULT || name == shard.config.node_id.to_string() {
        return Ok(());
    }
    if shard.in_cluster() {
        let registered = name
            .parse::<i32>()
            .is_ok_and(|id| shard.metadata.image().brokers.contains_key(&id));
        if registered {
            return Ok(());
        }
        return Err(Refusal {
            error_code: errors::INVALID_REQUEST,
            message: format!(
                "unexpected broker id {name:?}: no such broker is registered; use a broker's id or \"\" for the cluster-wide defaults"
            ),
        });
    }
    Err(Refusal {
        error_code: errors::INVALID_REQUEST,
        message: format!(
            "unexpected broker id {name:?}: this is broker {}; use its id or \"\" for the cluster-wide defaults",
            shard.config.node_id
        ),
    })
}

/// Kafka refuses a resource that names a key twice.
fn refuse_duplicates<'a>(names: impl Iterator<Item = &'a str>) -> Result<(), Refusal> {
    let mut seen = std::collections::BTreeSet::new();
    for name in names {
        if !seen.insert(name) {
            return Err(Refusal {
                error_code: errors::INVALID_REQUEST,
                message: format!("config {name} is given more than once"),
            });
        }
    }
    Ok(())
}

/// AlterConfigs replaces a resource's whole set of settings.
pub async fn alter(shard: &Rc<Shard>, request: AlterConfigsRequest) -> AlterConfigsResponse {
    let mut responses = Vec::new();
    for resource in request.resources {
        let outcome = match refuse_duplicates(resource.configs.iter().map(|c| c.name.as_str())) {
            Err(refusal) => Err(refusal),
            Ok(()) => {
                let configs: BTreeMap<String, String> = resource
                    .configs
                    .iter()
                    .filter_map(|c| {
                        c.value
                            .as_ref()
                            .map(|v| (c.name.to_string(), v.to_string()))
                    })
                    .collect();
                replace(
                    shard,
                    resource.resource_type,
                    resource.resource_name.to_string(),
                    configs,
                    request.validate_only,
                )
                .await
            }
        };
        let (code, message) = refusal_parts(outcome);
        responses.push(
            alter_configs_response::AlterConfigsResourceResponse::default()
                .with_error_code(code)
                .with_error_message(message)
                .with_resource_type(resource.resource_type)
                .with_resource_name(resource.resource_name),
        );
    }
    AlterConfigsResponse::default().with_responses(responses)
}

/// A resource's current settings (what incremental changes start from) and
/// the value a list setting has when it is not set there.
fn current(
    shard: &Shard,
    resource_type: i8,
    name: &str,
) -> Result<(BTreeMap<String, String>, topic_config::TopicDefaults), Refusal> {
    let image = shard.metadata.image();
    let defaults = dynamic_config::topic_defaults(&shard.config, &image);
    let set = match resource_type {
        RESOURCE_TOPIC => match image.topics.get(name) {
            None => {
                return Err(Refusal {
                    error_code: errors::UNKNOWN_TOPIC_OR_PARTITION,
                    message: format!("topic {name} does not exist"),
                })
            }
            Some(topic) => topic.configs.clone(),
        },
        RESOURCE_BROKER => {
            check_broker_resource(shard, name)?;
            image.broker_configs.get(name).cloned().unwrap_or_default()
        }
        RESOURCE_GROUP => image.group_configs.get(name).cloned().unwrap_or_default(),
        other => {
            return Err(Refusal {
                error_code: errors::INVALID_REQUEST,
                message: format!("resource type {other} cannot be changed"),
            })
        }
    };
    Ok((set, defaults))
}

/// Applies one resource's SET, DELETE, APPEND and SUBTRACT operations to
/// its current settings.
fn edit(
    shard: &Shard,
    resource: &incremental_alter_configs_request::AlterConfigsResource,
) -> Result<BTreeMap<String, String>, Refusal> {
    refuse_duplicates(resource.configs.iter().map(|c| c.name.as_str()))?;
    let name = resource.resource_name.as_str();
    let (mut configs, defaults) = current(shard, resource.resource_type, name)?;
    for change in &resource.configs {
        let key = change.name.as_str();
        let value = change.value.as_ref().map(|v| v.as_str());
        match (change.config_operation, value) {
            (OP_SET, Some(value)) => {
                configs.insert(key.to_string(), value.to_string());
            }
            (OP_DELETE, _) => {
                configs.remove(key);
            }
            (op @ (OP_APPEND | OP_SUBTRACT), Some(items)) => {
                if !dynamic_config::is_list(key) {
                    return Err(Refusal {
                        error_code: errors::INVALID_CONFIG,
                        message: format!(
                            "{} applies to list settings only; {key} is not a list",
                            if op == OP_APPEND {
                                "APPEND"
                            } else {
                                "SUBTRACT"
                            }
                        ),
                    });
                }
                let now = configs.get(key).cloned().or_else(|| {
                    let topic_key = if resource.resource_type == RESOURCE_TOPIC {
                        Some(key)
                    } else {
                        topic_config::topic_key_for_broker_key(key)
                    };
                    topic_key.and_then(|k| defaults.get(k))
                });
                let edited = dynamic_config::edit_list(now.as_deref(), items, op == OP_APPEND);
                configs.insert(key.to_string(), edited);
            }
            (OP_SET | OP_APPEND | OP_SUBTRACT, None) => {
                return Err(Refusal {
                    error_code: errors::INVALID_REQUEST,
                    message: format!("config {key} has a null value"),
                })
            }
            (op, _) => {
                return Err(Refusal {
                    error_code: errors::INVALID_REQUEST,
                    message: format!("unknown config operation {op} on {key}"),
                })
            }
        }
    }
    Ok(configs)
}

/// IncrementalAlterConfigs sets, deletes, appends to or subtracts from
/// single keys.
pub async fn incremental_alter(
    shard: &Rc<Shard>,
    request: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let mut responses = Vec::new();
    for resource in request.resources {
        let outcome = match edit(shard, &resource) {
            Err(refusal) => Err(refusal),
            Ok(configs) => {
                replace(
                    shard,
                    resource.resource_type,
                    resource.resource_name.to_string(),
                    configs,
                    request.validate_only,
                )
                .await
            }
        };
        let (code, message) = refusal_parts(outcome);
        responses.push(
            incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                .with_error_code(code)
                .with_error_message(message)
                .with_resource_type(resource.resource_type)
                .with_resource_name(resource.resource_name),
        );
    }
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}
