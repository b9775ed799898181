//! DescribeConfigs (32) 1–4, AlterConfigs (33) 0–2 and
//! IncrementalAlterConfigs (44) 0–1, for topics (changes apply live and are
//! kept in the metadata log) and, read-only, for the broker.

use std::collections::BTreeMap;
use std::rc::Rc;

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::{
    alter_configs_response, incremental_alter_configs_response, AlterConfigsRequest,
    AlterConfigsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};
use kafka_protocol::protocol::StrBytes;

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
const SOURCE_DYNAMIC_TOPIC: i8 = 1;
const SOURCE_STATIC_BROKER: i8 = 4;
const SOURCE_DEFAULT: i8 = 5;

const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;

fn entry(name: &str, value: &str, source: i8, read_only: bool) -> DescribeConfigsResourceResult {
    DescribeConfigsResourceResult::default()
        .with_name(StrBytes::from_string(name.to_string()))
        .with_value(Some(StrBytes::from_string(value.to_string())))
        .with_config_source(source)
        .with_read_only(read_only)
}

fn wanted(keys: &Option<Vec<StrBytes>>, name: &str) -> bool {
    keys.as_ref()
        .is_none_or(|keys| keys.iter().any(|k| k.as_str() == name))
}

pub fn describe(
    shard: &Rc<Shard>,
    request: DescribeConfigsRequest,
    _version: i16,
) -> DescribeConfigsResponse {
    let image = shard.metadata.image();
    let config = &shard.config;
    let results = request
        .resources
        .into_iter()
        .map(|resource| {
            let result = DescribeConfigsResult::default()
                .with_resource_type(resource.resource_type)
                .with_resource_name(resource.resource_name.clone());
            match resource.resource_type {
                RESOURCE_TOPIC => match image.topics.get(resource.resource_name.as_str()) {
                    None => result
                        .with_error_code(errors::UNKNOWN_TOPIC_OR_PARTITION)
                        .with_error_message(Some(StrBytes::from_string(format!(
                            "topic {} does not exist",
                            resource.resource_name.as_str()
                        )))),
                    Some(topic) => {
                        let configs = topic_config::topic_keys()
                            .filter(|name| wanted(&resource.configuration_keys, name))
                            .filter_map(|name| match topic.configs.get(name) {
                                Some(value) => {
                                    Some(entry(name, value, SOURCE_DYNAMIC_TOPIC, false))
                                }
                                None => config
                                    .topic_defaults
                                    .get(name)
                                    .map(|value| entry(name, &value, SOURCE_DEFAULT, false)),
                            })
                            .collect();
                        result.with_configs(configs)
                    }
                },
                RESOURCE_BROKER => {
                    let broker: Vec<(&str, String)> = vec![
                        ("broker.id", config.node_id.to_string()),
                        ("node.id", config.node_id.to_string()),
                        (
                            "auto.create.topics.enable",
                            config.auto_create_topics.to_string(),
                        ),
                        ("num.partitions", config.num_partitions.to_string()),
                        ("message.max.bytes", config.message_max_bytes.to_string()),
                        (
                            "delete.topic.enable",
                            config.delete_topic_enable.to_string(),
                        ),
                        ("default.replication.factor", "1".to_string()),
                        ("log.dirs", config.data_dir.display().to_string()),
                    ];
                    let configs = broker
                        .into_iter()
                        .filter(|(name, _)| wanted(&resource.configuration_keys, name))
                        .map(|(name, value)| entry(name, &value, SOURCE_STATIC_BROKER, true))
                        .collect();
                    result.with_configs(configs)
                }
                other => result
                    .with_error_code(errors::INVALID_REQUEST)
                    .with_error_message(Some(StrBytes::from_string(format!(
                        "resource type {other} is not supported"
                    )))),
            }
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

fn not_a_topic(resource_type: i8) -> Result<(), Refusal> {
    Err(Refusal {
        error_code: errors::INVALID_REQUEST,
        message: format!("only topic configs can be changed (resource type {resource_type})"),
    })
}

/// AlterConfigs replaces a topic's whole set of overrides.
pub async fn alter(shard: &Rc<Shard>, request: AlterConfigsRequest) -> AlterConfigsResponse {
    let mut responses = Vec::new();
    for resource in request.resources {
        let outcome = if resource.resource_type != RESOURCE_TOPIC {
            not_a_topic(resource.resource_type)
        } else {
            let configs: BTreeMap<String, String> = resource
                .configs
                .iter()
                .filter_map(|c| {
                    c.value
                        .as_ref()
                        .map(|v| (c.name.to_string(), v.to_string()))
                })
                .collect();
            controller::set_topic_configs(
                shard,
                resource.resource_name.to_string(),
                configs,
                request.validate_only,
            )
            .await
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

/// IncrementalAlterConfigs sets or deletes single keys.
pub async fn incremental_alter(
    shard: &Rc<Shard>,
    request: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let mut responses = Vec::new();
    for resource in request.resources {
        let outcome = if resource.resource_type != RESOURCE_TOPIC {
            not_a_topic(resource.resource_type)
        } else {
            let name = resource.resource_name.to_string();
            match shard.metadata.image().topics.get(&name) {
                None => Err(Refusal {
                    error_code: errors::UNKNOWN_TOPIC_OR_PARTITION,
                    message: format!("topic {name} does not exist"),
                }),
                Some(topic) => {
                    let mut configs = topic.configs.clone();
                    let mut refused = None;
                    for change in &resource.configs {
                        match (change.config_operation, &change.value) {
                            (OP_SET, Some(value)) => {
                                configs.insert(change.name.to_string(), value.to_string());
                            }
                            (OP_DELETE, _) => {
                                configs.remove(change.name.as_str());
                            }
                            (op, _) => {
                                refused = Some(Refusal {
                                    error_code: errors::INVALID_CONFIG,
                                    message: format!(
                                        "operation {op} on {} is not supported",
                                        change.name.as_str()
                                    ),
                                })
                            }
                        }
                    }
                    match refused {
                        Some(refusal) => Err(refusal),
                        None => {
                            controller::set_topic_configs(
                                shard,
                                name,
                                configs,
                                request.validate_only,
                            )
                            .await
                        }
                    }
                }
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
