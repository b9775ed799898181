//! DescribeCluster (60), versions 0–1: this node is the whole cluster and
//! its controller.

use std::rc::Rc;

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};
use kafka_protocol::protocol::StrBytes;

use crate::shard::Shard;

pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 1;

pub fn handle(shard: &Rc<Shard>, _request: DescribeClusterRequest) -> DescribeClusterResponse {
    let config = &shard.config;
    DescribeClusterResponse::default()
        .with_cluster_id(StrBytes::from_string(
            shard.metadata.image().cluster_id.clone(),
        ))
        .with_controller_id(BrokerId(config.node_id))
        .with_brokers(vec![DescribeClusterBroker::default()
            .with_broker_id(BrokerId(config.node_id))
            .with_host(StrBytes::from_string(config.advertise_host.clone()))
            .with_port(i32::from(config.advertise_port))])
}
