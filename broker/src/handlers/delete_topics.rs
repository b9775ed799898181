//! DeleteTopics (20), versions 1–6 (by name; deletion by topic id is
//! refused since topics carry no ids yet).

use std::rc::Rc;

use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{DeleteTopicsRequest, DeleteTopicsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::controller;
use crate::errors;
use crate::shard::Shard;

pub const VERSION_MIN: i16 = 1;
pub const VERSION_MAX: i16 = 6;

pub async fn handle(
    shard: &Rc<Shard>,
    request: DeleteTopicsRequest,
    version: i16,
) -> DeleteTopicsResponse {
    let names: Vec<Option<TopicName>> = if version >= 6 {
        request.topics.into_iter().map(|t| t.name).collect()
    } else {
        request.topic_names.into_iter().map(Some).collect()
    };
    let by_name: Vec<String> = names.iter().flatten().map(|n| n.0.to_string()).collect();
    let mut outcomes = controller::delete_topics(shard, by_name).await.into_iter();
    let responses = names
        .into_iter()
        .map(|name| match name {
            None => DeletableTopicResult::default()
                .with_error_code(errors::UNKNOWN_TOPIC_OR_PARTITION)
                .with_error_message(Some(StrBytes::from_static_str(
                    "deletion by topic id is not supported",
                ))),
            Some(name) => {
                let result = DeletableTopicResult::default().with_name(Some(name));
                match outcomes.next().expect("one outcome per name") {
                    Ok(()) => result,
                    Err(refusal) => result
                        .with_error_code(refusal.error_code)
                        .with_error_message(Some(StrBytes::from_string(refusal.message))),
                }
            }
        })
        .collect();
    DeleteTopicsResponse::default().with_responses(responses)
}
