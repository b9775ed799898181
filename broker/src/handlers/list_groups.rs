//! ListGroups (16), versions 0–5 (v4: `states_filter`; v5: `types_filter`
//! and each group's type): the groups of every core's coordinator. Every
//! group here is a classic group, so Kafka 4 reports each as `classic`; a
//! types filter without `classic` (say `consumer`, KIP-848 groups) lists
//! none, and an unknown type matches nothing, as in Kafka. Both filters
//! ignore case.

use std::rc::Rc;

use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{GroupId, ListGroupsRequest, ListGroupsResponse};
use kafka_protocol::protocol::StrBytes;

use crate::errors;
use crate::group::manager;
use crate::shard::Shard;

pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 5;

/// Kafka's name for the type of a group managed by JoinGroup/SyncGroup.
const GROUP_TYPE_CLASSIC: &str = "classic";

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
    let classic_listed = request.types_filter.is_empty()
        || request
            .types_filter
            .iter()
            .any(|t| t.eq_ignore_ascii_case(GROUP_TYPE_CLASSIC));
    let mut error_code = errors::NONE;
    let mut groups = Vec::new();
    for result in manager::on_every_coordinator(shard, |c| c.list()).await {
        match result {
            Ok(listed) => {
                for (group_id, protocol_type, state) in listed {
                    if !classic_listed {
                        continue;
                    }
                    if !states.is_empty() && !states.contains(&state.name().to_ascii_lowercase()) {
                        continue;
                    }
                    let mut group = ListedGroup::default()
                        .with_group_id(GroupId(StrBytes::from_string(group_id)))
                        .with_protocol_type(StrBytes::from_string(protocol_type))
                        .with_group_state(StrBytes::from_static_str(state.name()));
                    if version >= 5 {
                        group =
                            group.with_group_type(StrBytes::from_static_str(GROUP_TYPE_CLASSIC));
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
