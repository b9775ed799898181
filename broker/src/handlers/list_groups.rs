//! ListGroups (16), versions 0–5 (v4: `states_filter`; v5: `types_filter`
//! and each group's type): the groups of every core's coordinator, each
//! `classic` (JoinGroup/SyncGroup) or `consumer` (KIP-848's
//! ConsumerGroupHeartbeat). An unknown type matches nothing, as in Kafka.
//! Both filters ignore case.

use std::rc::Rc;

use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{GroupId, ListGroupsRequest, ListGroupsResponse};
use kafka_protocol::protocol::StrBytes;

use crate::errors;
use crate::group::manager;
use crate::shard::Shard;

pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 5;

pub async fn handle(
    shard: &Rc<Shard>,
    request: ListGroupsRequest,
    version: i16,
) -> ListGroupsResponse {
    let states: Vec<String> = request
        .states_filter
        .iter()
        .map(|s| s.trim().to_ascii_lowercase())
        .collect();
    let types: Vec<String> = request
        .types_filter
        .iter()
        .map(|t| t.trim().to_ascii_lowercase())
        .collect();
    let mut error_code = errors::NONE;
    let mut groups = Vec::new();
    for result in manager::on_every_coordinator(shard, |c| c.list()).await {
        match result {
            Ok(listed) => {
                for listed in listed {
                    if !types.is_empty() && !types.iter().any(|t| t == listed.group_type) {
                        continue;
                    }
                    if !states.is_empty() && !states.contains(&listed.state.to_ascii_lowercase()) {
                        continue;
                    }
                    let mut group = ListedGroup::default()
                        .with_group_id(GroupId(StrBytes::from_string(listed.group_id)))
                        .with_protocol_type(StrBytes::from_string(listed.protocol_type))
                        .with_group_state(StrBytes::from_static_str(listed.state));
                    if version >= 5 {
                        group = group.with_group_type(StrBytes::from_static_str(listed.group_type));
                    }
                    groups.push(group);
                }
            }
            Err(error) => error_code = error.code(),
        }
    }
    ListGroupsResponse::default()
        .with_error_code(error_code)
        .with_groups(groups)
}
