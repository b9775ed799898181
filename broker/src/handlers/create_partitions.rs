//! CreatePartitions (37), versions 0–3: grows a topic; manual assignments
//! are refused (placement balances cores).

use std::rc::Rc;

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse};
use kafka_protocol::protocol::StrBytes;

use crate::controller;
use crate::errors;
use crate::shard::Shard;

pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 3;

pub async fn handle(
    shard: &Rc<Shard>,
    request: CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    let mut results = Vec::with_capacity(request.topics.len());
    for topic in request.topics {
        let outcome = if topic.assignments.is_some() {
            Err((
                errors::INVALID_REPLICA_ASSIGNMENT,
                "manual assignment is not supported".to_string(),
            ))
        } else {
            controller::create_partitions(
                shard,
                topic.name.0.to_string(),
                topic.count,
                request.validate_only,
            )
            .await
            .map_err(|r| (r.error_code, r.message))
        };
        let result = CreatePartitionsTopicResult::default().with_name(topic.name);
        results.push(match outcome {
            Ok(()) => result,
            Err((code, message)) => result
                .with_error_code(code)
                .with_error_message(Some(StrBytes::from_string(message))),
        });
    }
    CreatePartitionsResponse::default().with_results(results)
}
