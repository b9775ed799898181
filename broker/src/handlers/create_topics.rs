//! CreateTopics (19), versions 2–7, with `validate_only`, configs and
//! manual replica assignments.

use std::rc::Rc;

use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse};
use kafka_protocol::protocol::StrBytes;

use crate::controller::{self, TopicSpec};
use crate::errors;
use crate::shard::Shard;

pub const VERSION_MIN: i16 = 2;
pub const VERSION_MAX: i16 = 7;
// What a broker forwards to the active controller, every broker serves.
const _: () = assert!(
    *crate::cluster::forward::CREATE_TOPICS_VERSIONS.start() == VERSION_MIN
        && *crate::cluster::forward::CREATE_TOPICS_VERSIONS.end() == VERSION_MAX
);

pub async fn handle(shard: &Rc<Shard>, request: CreateTopicsRequest) -> CreateTopicsResponse {
    let mut specs = Vec::with_capacity(request.topics.len());
    let mut early: Vec<Option<(i16, String)>> = Vec::with_capacity(request.topics.len());
    for topic in &request.topics {
        if !topic.assignments.is_empty()
            && (topic.num_partitions != -1 || topic.replication_factor != -1)
        {
            early.push(Some((
                errors::INVALID_REQUEST,
                "a manual replica assignment needs num_partitions and replication_factor -1"
                    .to_string(),
            )));
            continue;
        }
        let mut configs = std::collections::BTreeMap::new();
        let mut null_value = None;
        for config in &topic.configs {
            match &config.value {
                Some(value) => {
                    configs.insert(config.name.to_string(), value.to_string());
                }
                None => null_value = Some(config.name.to_string()),
            }
        }
        if let Some(name) = null_value {
            early.push(Some((
                errors::INVALID_CONFIG,
                format!("config {name} has a null value"),
            )));
            continue;
        }
        early.push(None);
        let spec = TopicSpec {
            name: topic.name.0.to_string(),
            partitions: topic.num_partitions,
            replication_factor: topic.replication_factor,
            configs,
        };
        let assignment = topic
            .assignments
            .iter()
            .map(|a| {
                (
                    a.partition_index,
                    a.broker_ids.iter().map(|id| id.0).collect(),
                )
            })
            .collect();
        specs.push((spec, assignment));
    }
    let mut outcomes = controller::create_assigned_topics(shard, specs, request.validate_only)
        .await
        .into_iter();
    let image = shard.metadata.image();
    let results = request
        .topics
        .iter()
        .zip(early)
        .map(|(topic, early)| {
            let outcome = match early {
                Some(refusal) => Err(refusal),
                None => outcomes
                    .next()
                    .expect("one outcome per spec")
                    .map_err(|r| (r.error_code, r.message)),
            };
            let result = CreatableTopicResult::default().with_name(topic.name.clone());
            match outcome {
                Ok(()) => {
                    let partitions = image
                        .topics
                        .get(topic.name.0.as_str())
                        .map(|t| t.partition_cores.len() as i32)
                        .unwrap_or(if !topic.assignments.is_empty() {
                            topic.assignments.len() as i32
                        } else if topic.num_partitions == -1 {
                            shard.config.num_partitions
                        } else {
                            topic.num_partitions
                        });
                    let replication_factor = topic
                        .assignments
                        .first()
                        .map_or(1, |a| a.broker_ids.len() as i16);
                    // Kafka answers a created topic with a null message;
                    // the generated default is an empty string.
                    result
                        .with_error_message(None)
                        .with_num_partitions(partitions)
                        .with_replication_factor(replication_factor)
                }
                Err((code, message)) => result
                    .with_error_code(code)
                    .with_error_message(Some(StrBytes::from_string(message)))
                    .with_num_partitions(-1)
                    .with_replication_factor(-1),
            }
        })
        .collect();
    CreateTopicsResponse::default().with_topics(results)
}
