//! DescribeCluster (60), versions 0–2: the cluster's brokers (fenced ones
//! too when v2 asks, marked so) and its active controller, reached at a
//! broker endpoint; on a single node, the node itself.
//! Authorized operations, when asked for, are all the cluster supports:
//! there is no authorizer.

use std::rc::Rc;

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};
use kafka_protocol::protocol::StrBytes;

use super::authorized_operations;
use crate::errors;
use crate::shard::Shard;

pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 2;

/// Kafka's endpoint types: what this listener is, and what a client asking
/// for a controller gets told instead.
const ENDPOINT_BROKER: i8 = 1;
const ENDPOINT_CONTROLLER: i8 = 2;

pub fn handle(
    shard: &Rc<Shard>,
    request: DescribeClusterRequest,
    version: i16,
    listener: &str,
) -> DescribeClusterResponse {
    if request.endpoint_type != ENDPOINT_BROKER {
        // v0 has no codes of its own for these; Kafka answers INVALID_REQUEST.
        let (error_code, message) = match (version, request.endpoint_type) {
            (0, _) => (
                errors::INVALID_REQUEST,
                "Unsupported endpoint type".to_string(),
            ),
            (_, ENDPOINT_CONTROLLER) => (
                errors::MISMATCHED_ENDPOINT_TYPE,
                "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type CONTROLLER".to_string(),
            ),
            (_, other) => (
                errors::UNSUPPORTED_ENDPOINT_TYPE,
                format!("Unsupported endpoint type {other}"),
            ),
        };
        return DescribeClusterResponse::default()
            .with_error_code(error_code)
            .with_error_message(Some(StrBytes::from_string(message)));
    }
    let image = shard.metadata.image();
    let brokers =
        crate::cluster::listed_brokers(shard, &image, request.include_fenced_brokers, listener)
            .into_iter()
            .map(|b| {
                DescribeClusterBroker::default()
                    .with_broker_id(BrokerId(b.id))
                    .with_host(StrBytes::from_string(b.host))
                    .with_port(i32::from(b.port))
                    .with_rack(b.rack.map(StrBytes::from_string))
                    .with_is_fenced(b.fenced)
            })
            .collect();
    DescribeClusterResponse::default()
        .with_cluster_id(StrBytes::from_string(image.cluster_id.clone()))
        .with_controller_id(BrokerId(crate::cluster::controller_id(shard)))
        .with_endpoint_type(ENDPOINT_BROKER)
        .with_cluster_authorized_operations(authorized_operations::cluster(
            request.include_cluster_authorized_operations,
        ))
        .with_brokers(brokers)
}
