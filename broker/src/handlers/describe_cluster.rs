//! DescribeCluster (60), versions 0–2: this node is the whole cluster and
//! its controller, reached at a broker endpoint, never fenced (v2).
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
    let config = &shard.config;
    DescribeClusterResponse::default()
        .with_cluster_id(StrBytes::from_string(
            shard.metadata.image().cluster_id.clone(),
        ))
        .with_controller_id(BrokerId(config.node_id))
        .with_endpoint_type(ENDPOINT_BROKER)
        .with_cluster_authorized_operations(authorized_operations::cluster(
            request.include_cluster_authorized_operations,
        ))
        .with_brokers(vec![DescribeClusterBroker::default()
            .with_broker_id(BrokerId(config.node_id))
            .with_host(StrBytes::from_string(config.advertise_host.clone()))
            .with_port(i32::from(config.advertise_port))
            .with_rack(config.quorum.rack.clone().map(StrBytes::from_string))])
}
