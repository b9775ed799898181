//! Heartbeat (12), versions 0–4: keeps a member's session alive;
//! REBALANCE_IN_PROGRESS tells it to rejoin.

use std::rc::Rc;

use groups::error::GroupError;
use kafka_protocol::messages::{HeartbeatRequest, HeartbeatResponse};

use crate::group::manager;
use crate::shard::Shard;

pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 4;

pub async fn handle(shard: &Rc<Shard>, request: HeartbeatRequest) -> HeartbeatResponse {
    let group_id = request.group_id.0.to_string();
    let member_id = request.member_id.to_string();
    let instance = request.group_instance_id.map(|i| i.to_string());
    let generation = request.generation_id;
    let outcome = manager::on_coordinator(shard, &group_id.clone(), move |owner, _| async move {
        manager::with_coordinator(&owner, |c| {
            c.heartbeat(
                owner.now_ms() as u64,
                &group_id,
                generation,
                &member_id,
                instance.as_deref(),
            )
        })
    })
    .await
    .and_then(|inner| inner);
    HeartbeatResponse::default().with_error_code(GroupError::code_of(&outcome))
}
