//! JoinGroup (11), versions 0–7. v4+ new members first get
//! MEMBER_ID_REQUIRED with their id; v5+ static membership
//! (`group_instance_id`); v7 echoes the protocol type. The request waits
//! on the coordinator core until the group's join phase ends.

use std::rc::Rc;

use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::{JoinGroupRequest, JoinGroupResponse};
use kafka_protocol::protocol::StrBytes;

use crate::group::coordinator::{JoinRequest, JoinResponse};
use crate::group::manager;
use crate::shard::Shard;

pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 7;

fn text(value: String) -> StrBytes {
    StrBytes::from_string(value)
}

pub async fn handle(
    shard: &Rc<Shard>,
    request: JoinGroupRequest,
    version: i16,
    client_id: String,
) -> JoinGroupResponse {
    let group_id = request.group_id.0.to_string();
    let join = JoinRequest {
        group_id: group_id.clone(),
        member_id: request.member_id.to_string(),
        group_instance_id: request.group_instance_id.map(|i| i.to_string()),
        client_id,
        client_host: String::new(),
        session_timeout_ms: request.session_timeout_ms,
        rebalance_timeout_ms: if version == 0 {
            request.session_timeout_ms
        } else {
            request.rebalance_timeout_ms
        },
        protocol_type: request.protocol_type.to_string(),
        protocols: request
            .protocols
            .into_iter()
            .map(|p| (p.name.to_string(), p.metadata))
            .collect(),
        require_known_member_id: version >= 4,
    };
    let member_id = join.member_id.clone();
    let response = manager::on_coordinator(shard, &group_id, move |owner, _| async move {
        manager::join(&owner, join).await
    })
    .await
    .unwrap_or_else(|code| JoinResponse::error(code, &member_id));
    let protocol_name = match (response.protocol_name, version >= 7) {
        (Some(name), _) => Some(text(name)),
        (None, true) => None,
        (None, false) => Some(StrBytes::default()),
    };
    JoinGroupResponse::default()
        .with_error_code(response.error_code)
        .with_generation_id(response.generation_id)
        .with_protocol_type(response.protocol_type.map(text))
        .with_protocol_name(protocol_name)
        .with_leader(text(response.leader))
        .with_member_id(text(response.member_id))
        .with_members(
            response
                .members
                .into_iter()
                .map(|m| {
                    JoinGroupResponseMember::default()
                        .with_member_id(text(m.member_id))
                        .with_group_instance_id(m.group_instance_id.map(text))
                        .with_metadata(m.metadata)
                })
                .collect(),
        )
}
