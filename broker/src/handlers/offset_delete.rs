//! OffsetDelete (47), version 0: drops committed offsets of topics the
//! group's members do not subscribe to (GROUP_SUBSCRIBED_TO_TOPIC for
//! those they do); tombstones are durable before the answer.

use std::rc::Rc;

use groups::error::GroupError;
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::{OffsetDeleteRequest, OffsetDeleteResponse};

use crate::group::manager;
use crate::shard::Shard;

pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 0;

pub async fn handle(shard: &Rc<Shard>, request: OffsetDeleteRequest) -> OffsetDeleteResponse {
    let group_id = request.group_id.0.to_string();
    let wanted: Vec<(String, i32)> = request
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.name.0.to_string(), p.partition_index))
        })
        .collect();
    let result = manager::on_coordinator(
        shard,
        &group_id.clone(),
        move |owner, partition| async move {
            let lock = manager::write_lock(&owner, partition).await;
            let mut dropped = Vec::new();
            let outcomes = manager::with_coordinator(&owner, |c| {
                c.delete_offsets(&group_id, &wanted, &mut dropped)
            })?;
            let last = manager::append(&owner, partition, manager::tombstones(&dropped)).await?;
            drop(lock);
            if let Some(last) = last {
                manager::wait_durable(&owner, partition, last).await?;
            }
            Ok(outcomes)
        },
    )
    .await
    .and_then(|inner| inner);
    let outcomes = match result {
        Ok(outcomes) => outcomes,
        Err(error) => return OffsetDeleteResponse::default().with_error_code(error.code()),
    };
    let mut outcomes = outcomes.into_iter();
    let topics = request
        .topics
        .iter()
        .map(|t| {
            OffsetDeleteResponseTopic::default()
                .with_name(t.name.clone())
                .with_partitions(
                    t.partitions
                        .iter()
                        .map(|p| {
                            OffsetDeleteResponsePartition::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(GroupError::code_of(
                                    &outcomes.next().expect("one outcome per partition"),
                                ))
                        })
                        .collect(),
                )
        })
        .collect();
    OffsetDeleteResponse::default().with_topics(topics)
}
