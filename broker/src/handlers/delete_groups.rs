//! DeleteGroups (42), versions 0–2: an empty group and its committed
//! offsets go (tombstones, durable before the answer); a group with
//! members gets NON_EMPTY_GROUP, an unknown one GROUP_ID_NOT_FOUND. A
//! share group without members loses its share partitions' states.

use std::rc::Rc;

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{DeleteGroupsRequest, DeleteGroupsResponse};

use groups::error::GroupError;

use crate::group::manager;
use crate::shard::Shard;

pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 2;

pub async fn handle(shard: &Rc<Shard>, request: DeleteGroupsRequest) -> DeleteGroupsResponse {
    let mut results = Vec::with_capacity(request.groups_names.len());
    for group_id in request.groups_names {
        let id = group_id.0.to_string();
        let outcome = if id.is_empty() {
            Err(GroupError::InvalidGroupId)
        } else {
            manager::on_coordinator(shard, &id.clone(), move |owner, partition| async move {
                let lock = manager::write_lock(&owner, partition).await;
                let mut dropped = Vec::new();
                let deleted =
                    manager::with_coordinator(&owner, |c| c.delete_group(&id, &mut dropped));
                let last =
                    manager::append(&owner, partition, manager::tombstones(&dropped)).await?;
                drop(lock);
                if let Some(last) = last {
                    manager::wait_durable(&owner, partition, last).await?;
                }
                deleted
            })
            .await
            .and_then(|inner| inner)
        };
        // Not a classic or consumer group: perhaps a share group.
        let outcome = match outcome {
            Err(GroupError::GroupIdNotFound) => {
                crate::handlers::share_admin::delete_group(shard, &group_id).await
            }
            other => other,
        };
        results.push(
            DeletableGroupResult::default()
                .with_group_id(group_id)
                .with_error_code(GroupError::code_of(&outcome)),
        );
    }
    DeleteGroupsResponse::default().with_results(results)
}
