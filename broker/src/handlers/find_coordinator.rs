//! FindCoordinator (10), versions 0–6 (v4: batched `coordinator_keys`).
//! Groups (key type 0) are coordinated on this node by the core owning
//! their `__consumer_offsets` partition; the first request creates that
//! topic, as Kafka does. Transactional ids (key type 1) also name this
//! node (InitProducerId refuses them until transactions land). v5 only
//! lets a transaction coordinator answer TRANSACTION_ABORTABLE, which
//! none here does; v6's share groups (key type 2) get INVALID_REQUEST
//! per key, as from a Kafka without a share coordinator (and from any
//! Kafka below v6).

use std::rc::Rc;

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;

use crate::errors;
use crate::group::manager;
use crate::shard::Shard;

pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 6;

const KEY_TYPE_GROUP: i8 = 0;
const KEY_TYPE_TRANSACTION: i8 = 1;

async fn find(shard: &Rc<Shard>, key: &str, key_type: i8) -> Result<(), i16> {
    match key_type {
        KEY_TYPE_GROUP => manager::place(shard, key).await.map(|_| ()),
        KEY_TYPE_TRANSACTION if !key.is_empty() => Ok(()),
        _ => Err(errors::INVALID_REQUEST),
    }
}

pub async fn handle(
    shard: &Rc<Shard>,
    request: FindCoordinatorRequest,
    version: i16,
) -> FindCoordinatorResponse {
    let config = &shard.config;
    let host = StrBytes::from_string(config.advertise_host.clone());
    let port = i32::from(config.advertise_port);
    if version >= 4 {
        let mut coordinators = Vec::with_capacity(request.coordinator_keys.len());
        for key in request.coordinator_keys {
            let coordinator = match find(shard, &key, request.key_type).await {
                Ok(()) => Coordinator::default()
                    .with_node_id(BrokerId(config.node_id))
                    .with_host(host.clone())
                    .with_port(port),
                Err(code) => Coordinator::default()
                    .with_node_id(BrokerId(-1))
                    .with_port(-1)
                    .with_error_code(code),
            };
            coordinators.push(coordinator.with_key(key));
        }
        return FindCoordinatorResponse::default().with_coordinators(coordinators);
    }
    let key_type = if version == 0 {
        KEY_TYPE_GROUP
    } else {
        request.key_type
    };
    match find(shard, &request.key, key_type).await {
        Ok(()) => FindCoordinatorResponse::default()
            .with_node_id(BrokerId(config.node_id))
            .with_host(host)
            .with_port(port),
        Err(code) => FindCoordinatorResponse::default()
            .with_error_code(code)
            .with_node_id(BrokerId(-1))
            .with_port(-1),
    }
}
