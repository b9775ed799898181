//! CreatePartitions (37), versions 0–3: grows a topic, with the new
//! partitions' replicas assigned by hand or by the broker (placement on
//! cores balances them either way).

use std::rc::Rc;

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse};
use kafka_protocol::protocol::StrBytes;

use crate::controller;
use crate::shard::Shard;

pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 3;

pub async fn handle(
    shard: &Rc<Shard>,
    request: CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    let mut results = Vec::with_capacity(request.topics.len());
    for topic in request.topics {
        let assignments = topic.assignments.map(|list| {
            list.into_iter()
                .map(|a| a.broker_ids.into_iter().map(|id| id.0).collect())
                .collect()
        });
        let outcome = controller::create_partitions(
            shard,
            topic.name.0.to_string(),
            topic.count,
            assignments,
            request.validate_only,
        )
        .await
        .map_err(|r| (r.error_code, r.message));
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
