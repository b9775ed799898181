//! DescribeGroups (15), versions 0–6: state, protocol and members (with
//! metadata and assignment when Stable). A consumer-protocol group is
//! described as Kafka describes it: protocol type `consumer`, its assignor
//! as the protocol, its epoch as the generation and each member's
//! subscription and assignment in the consumer protocol's encoding. An unknown group is Dead, and
//! from v6 also GROUP_ID_NOT_FOUND with Kafka's message. Asked for
//! authorized operations (v3+), a group found gets every operation a
//! group supports, as from Kafka without an authorizer.

use std::rc::Rc;

use groups::error::GroupError;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::{DescribeGroupsRequest, DescribeGroupsResponse};
use kafka_protocol::protocol::StrBytes;

use crate::errors;
use crate::group::coordinator::GroupState;
use crate::group::manager;
use crate::handlers::authorized_operations;
use crate::shard::Shard;

pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 6;

/// DescribeGroups v6 answers GROUP_ID_NOT_FOUND for an unknown group.
const VERSION_GROUP_NOT_FOUND_MIN: i16 = 6;

pub async fn handle(
    shard: &Rc<Shard>,
    request: DescribeGroupsRequest,
    version: i16,
) -> DescribeGroupsResponse {
    let operations = authorized_operations::group(request.include_authorized_operations);
    let mut groups = Vec::with_capacity(request.groups.len());
    for group_id in request.groups {
        let id = group_id.0.to_string();
        let described = if id.is_empty() {
            Err(GroupError::InvalidGroupId)
        } else {
            manager::on_coordinator(shard, &id.clone(), move |owner, _| async move {
                manager::with_coordinator(&owner, |c| c.describe(&id))
            })
            .await
        };
        let group = match described {
            // A Dead group is gone (or going): Kafka no longer holds it.
            Ok(d) if d.state == GroupState::Dead && version >= VERSION_GROUP_NOT_FOUND_MIN => {
                DescribedGroup::default()
                    .with_error_code(errors::GROUP_ID_NOT_FOUND)
                    .with_error_message(Some(StrBytes::from_string(format!(
                        "Group {} not found.",
                        group_id.0
                    ))))
                    .with_group_state(StrBytes::from_static_str(d.state.name()))
            }
            Ok(d) => DescribedGroup::default()
                .with_authorized_operations(operations)
                .with_group_state(StrBytes::from_static_str(d.state_name))
                .with_protocol_type(StrBytes::from_string(d.protocol_type))
                .with_protocol_data(StrBytes::from_string(d.protocol_name))
                .with_members(
                    d.members
                        .into_iter()
                        .map(|m| {
                            DescribedGroupMember::default()
                                .with_member_id(StrBytes::from_string(m.member_id))
                                .with_group_instance_id(
                                    m.group_instance_id.map(StrBytes::from_string),
                                )
                                .with_client_id(StrBytes::from_string(m.client_id))
                                .with_client_host(StrBytes::from_string(m.client_host))
                                .with_member_metadata(m.metadata)
                                .with_member_assignment(m.assignment)
                        })
                        .collect(),
                ),
            Err(error) => DescribedGroup::default()
                .with_error_code(error.code())
                .with_group_state(StrBytes::from_static_str("Dead")),
        };
        groups.push(group.with_group_id(group_id));
    }
    DescribeGroupsResponse::default().with_groups(groups)
}
