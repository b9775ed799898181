//! JoinGroup (11), versions 0–9. v4+ new members first get
//! MEMBER_ID_REQUIRED with their id; v5+ static membership
//! (`group_instance_id`); v7 echoes the protocol type; v8's `reason` is
//! accepted (Kafka only logs it); v9 tells a restarted static leader of a
//! Stable group to skip the assignment (KIP-814). The request waits on
//! the coordinator core until the group's join phase ends.

use std::rc::Rc;

use groups::error::GroupError;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::{JoinGroupRequest, JoinGroupResponse};
use kafka_protocol::protocol::StrBytes;

use crate::group::coordinator::{JoinRequest, JoinResponse};
use crate::group::manager;
use crate::shard::Shard;

pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 9;

fn text(value: String) -> StrBytes {
    StrBytes::from_string(value)
}

/// Who sent the JoinGroup, as DescribeGroups reports the member.
pub struct Client {
    pub id: String,
    /// Kafka's form: `/` and the address (see [`client_host`]).
    pub host: String,
}

pub use crate::group::client_host;

pub async fn handle(
    shard: &Rc<Shard>,
    request: JoinGroupRequest,
    version: i16,
    client: Client,
) -> JoinGroupResponse {
    let group_id = request.group_id.0.to_string();
    let join = JoinRequest {
        group_id: group_id.clone(),
        member_id: request.member_id.to_string(),
        group_instance_id: request.group_instance_id.map(|i| i.to_string()),
        client_id: client.id,
        client_host: client.host,
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
        supports_skip_assignment: version >= 9,
        topics: Some(crate::handlers::consumer_groups::topics(shard)),
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
        .with_error_code(GroupError::code_or_none(response.error))
        .with_generation_id(response.generation_id)
        .with_protocol_type(response.protocol_type.map(text))
        .with_protocol_name(protocol_name)
        .with_leader(text(response.leader))
        .with_member_id(text(response.member_id))
        .with_skip_assignment(response.skip_assignment)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_hosts_read_as_javas_inet_address() {
        for (peer, shown) in [
            ("127.0.0.1", "/127.0.0.1"),
            ("::1", "/0:0:0:0:0:0:0:1"),
            ("::ffff:10.0.0.7", "/10.0.0.7"),
            ("fe80::1:abcd", "/fe80:0:0:0:0:0:1:abcd"),
        ] {
            assert_eq!(client_host(peer.parse().unwrap()), shown, "{peer}");
        }
    }
}
