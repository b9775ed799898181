//! ListGroups (16), versions 0–4 (v4: `states_filter`): the groups of
//! every core's coordinator.

use std::rc::Rc;

use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{GroupId, ListGroupsRequest, ListGroupsResponse};
use kafka_protocol::protocol::StrBytes;

use crate::errors;
use crate::group::manager;
use crate::shard::Shard;

pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 4;

pub async fn handle(shard: &Rc<Shard>, request: ListGroupsRequest) -> ListGroupsResponse {
    let states: Vec<String> = request
        .states_filter
        .iter()
        .map(|s| s.to_ascii_lowercase())
        .collect();
    let mut error_code = errors::NONE;
    let mut groups = Vec::new();
    for result in manager::on_every_coordinator(shard, |c| c.list()).await {
        match result {
            Ok(listed) => {
                for (group_id, protocol_type, state) in listed {
                    if !states.is_empty() && !states.contains(&state.name().to_ascii_lowercase()) {
                        continue;
                    }
                    groups.push(
                        ListedGroup::default()
                            .with_group_id(GroupId(StrBytes::from_string(group_id)))
                            .with_protocol_type(StrBytes::from_string(protocol_type))
                            .with_group_state(StrBytes::from_static_str(state.name())),
                    );
                }
            }
            Err(code) => error_code = code,
        }
    }
    ListGroupsResponse::default()
        .with_error_code(error_code)
        .with_groups(groups)
}
