//! InitProducerId (22), versions 0–5. Without a transactional id, for
//! idempotent producers: a request naming an existing producer id bumps
//! its epoch (KIP-360). With one, the transaction coordinator of that id
//! answers (`handlers::transactions`); v4+ know PRODUCER_FENCED, older
//! versions get INVALID_PRODUCER_EPOCH instead.

use std::rc::Rc;

use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};

use crate::controller;

use crate::shard::Shard;

pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 5;

pub async fn handle(
    shard: &Rc<Shard>,
    request: InitProducerIdRequest,
    version: i16,
) -> InitProducerIdResponse {
    let refused = |code| {
        InitProducerIdResponse::default()
            .with_error_code(code)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1)
    };
    if request.transactional_id.is_some() {
        return crate::handlers::transactions::init_producer_id(shard, &request, version).await;
    }
    if request.producer_id.0 >= 0
        && request.producer_epoch >= 0
        && request.producer_epoch < i16::MAX - 1
    {
        return InitProducerIdResponse::default()
            .with_producer_id(request.producer_id)
            .with_producer_epoch(request.producer_epoch + 1);
    }
    match new_producer_id(shard).await {
        Ok(id) => InitProducerIdResponse::default()
            .with_producer_id(ProducerId(id))
            .with_producer_epoch(0),
        Err(code) => refused(code),
    }
}

/// A producer id nobody else holds: from this node's controller, or in a
/// cluster from the active controller (asked with an InitProducerId of
/// its own when it is another broker).
pub async fn new_producer_id(shard: &Rc<Shard>) -> Result<i64, i16> {
    if crate::cluster::forward::controller_address(shard).is_some() {
        return crate::cluster::forward::allocate_producer_id(shard).await;
    }
    controller::allocate_producer_id(shard)
        .await
        .map_err(|refusal| refusal.error_code)
}
