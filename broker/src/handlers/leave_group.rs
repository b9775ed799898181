//! LeaveGroup (13), versions 0–5: one member (v0–2) or a batch of members
//! by member id or group instance id (v3+), each with its own error; v5's
//! per-member `reason` is accepted (Kafka only logs it).

use std::rc::Rc;

use groups::error::GroupError;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::{LeaveGroupRequest, LeaveGroupResponse};
use kafka_protocol::protocol::StrBytes;

use crate::errors;
use crate::group::manager;
use crate::shard::Shard;

pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 5;

pub async fn handle(
    shard: &Rc<Shard>,
    request: LeaveGroupRequest,
    version: i16,
) -> LeaveGroupResponse {
    let group_id = request.group_id.0.to_string();
    let members: Vec<(String, Option<String>)> = if version >= 3 {
        request
            .members
            .iter()
            .map(|m| {
                (
                    m.member_id.to_string(),
                    m.group_instance_id.as_ref().map(|i| i.to_string()),
                )
            })
            .collect()
    } else {
        vec![(request.member_id.to_string(), None)]
    };
    let leaving = members.clone();
    let result = manager::on_coordinator(shard, &group_id.clone(), move |owner, _| async move {
        manager::leave(&owner, &group_id, &leaving).await
    })
    .await
    .and_then(|inner| inner);
    match result {
        Err(error) => LeaveGroupResponse::default().with_error_code(error.code()),
        Ok(outcomes) if version < 3 => LeaveGroupResponse::default()
            .with_error_code(outcomes.first().map_or(errors::NONE, GroupError::code_of)),
        Ok(outcomes) => LeaveGroupResponse::default().with_members(
            members
                .into_iter()
                .zip(outcomes)
                .map(|((member_id, instance), outcome)| {
                    MemberResponse::default()
                        .with_member_id(StrBytes::from_string(member_id))
                        .with_group_instance_id(instance.map(StrBytes::from_string))
                        .with_error_code(GroupError::code_of(&outcome))
                })
                .collect(),
        ),
    }
}
