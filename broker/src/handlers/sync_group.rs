//! SyncGroup (14), versions 0–5. Followers wait on the coordinator core
//! for the leader's assignment; in Stable every member gets the assignment
//! it holds (never an empty one in its place).

use std::rc::Rc;

use groups::error::GroupError;
use kafka_protocol::messages::{SyncGroupRequest, SyncGroupResponse};
use kafka_protocol::protocol::StrBytes;

use crate::group::coordinator::{SyncRequest, SyncResponse};
use crate::group::manager;
use crate::shard::Shard;

pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 5;

pub async fn handle(shard: &Rc<Shard>, request: SyncGroupRequest) -> SyncGroupResponse {
    let group_id = request.group_id.0.to_string();
    let sync = SyncRequest {
        group_id: group_id.clone(),
        generation_id: request.generation_id,
        member_id: request.member_id.to_string(),
        group_instance_id: request.group_instance_id.map(|i| i.to_string()),
        protocol_type: request.protocol_type.map(|t| t.to_string()),
        protocol_name: request.protocol_name.map(|n| n.to_string()),
        assignments: request
            .assignments
            .into_iter()
            .map(|a| (a.member_id.to_string(), a.assignment))
            .collect(),
    };
    let response = manager::on_coordinator(shard, &group_id, move |owner, _| async move {
        manager::sync(&owner, sync).await
    })
    .await
    .unwrap_or_else(SyncResponse::error);
    SyncGroupResponse::default()
        .with_error_code(GroupError::code_or_none(response.error))
        .with_protocol_type(response.protocol_type.map(StrBytes::from_string))
        .with_protocol_name(response.protocol_name.map(StrBytes::from_string))
        .with_assignment(response.assignment)
}
