//! ListConfigResources (74), versions 0–1: the resources that have
//! configs. v0 (once ListClientMetricsResources) lists client metrics
//! subscriptions, of which there are none; v1 lists the types asked for
//! (none asked: every type Kafka knows), as Kafka does: topics, this
//! broker and its logger; no client metrics and no group configs exist.

use std::rc::Rc;

use kafka_protocol::messages::list_config_resources_response::ConfigResource;
use kafka_protocol::messages::{ListConfigResourcesRequest, ListConfigResourcesResponse};
use kafka_protocol::protocol::StrBytes;

use crate::errors;
use crate::shard::Shard;

pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 1;

/// Kafka's config resource types.
const TOPIC: i8 = 2;
const BROKER: i8 = 4;
const BROKER_LOGGER: i8 = 8;
const CLIENT_METRICS: i8 = 16;
const GROUP: i8 = 32;
/// The types Kafka lists, in the order it lists them.
const LISTED: [i8; 5] = [GROUP, CLIENT_METRICS, BROKER_LOGGER, BROKER, TOPIC];

pub fn handle(
    shard: &Rc<Shard>,
    request: ListConfigResourcesRequest,
    version: i16,
) -> ListConfigResourcesResponse {
    if version == 0 {
        return ListConfigResourcesResponse::default();
    }
    let types: Vec<i8> = if request.resource_types.is_empty() {
        LISTED.to_vec()
    } else {
        request.resource_types
    };
    if types.iter().any(|t| !LISTED.contains(t)) {
        return ListConfigResourcesResponse::default().with_error_code(errors::UNSUPPORTED_VERSION);
    }
    let node = shard.config.node_id.to_string();
    let image = shard.metadata.image();
    let resource = |name: &str, resource_type: i8| {
        ConfigResource::default()
            .with_resource_name(StrBytes::from_string(name.to_string()))
            .with_resource_type(resource_type)
    };
    let mut resources = Vec::new();
    for listed in LISTED {
        if !types.contains(&listed) {
            continue;
        }
        match listed {
            BROKER_LOGGER | BROKER => resources.push(resource(&node, listed)),
            TOPIC => resources.extend(image.topics.keys().map(|name| resource(name, TOPIC))),
            _ => {}
        }
    }
    ListConfigResourcesResponse::default().with_config_resources(resources)
}
