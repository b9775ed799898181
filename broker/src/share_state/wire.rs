//! The share coordinator's inter-broker requests (see the parent module):
//! ReadShareGroupState (84) and WriteShareGroupState (85), version 0,
//! one share partition each. A write carries in a tagged field what kind
//! it is: a leader's write (fenced by an older leader or state epoch),
//! an operator's reset (a new state epoch) or a removal; a read answers
//! a share partition never written with state epoch -1.

use std::collections::BTreeMap;
use std::rc::Rc;

use bytes::Bytes;
use groups::share::{ShareSnapshot, StateBatch};
use groups::share_records::{SharePartitionKey, ShareState};
use kafka_protocol::messages::{
    read_share_group_state_request, read_share_group_state_response,
    write_share_group_state_request, write_share_group_state_response, ReadShareGroupStateRequest,
    ReadShareGroupStateResponse, WriteShareGroupStateRequest, WriteShareGroupStateResponse,
};
use kafka_protocol::protocol::StrBytes;

use crate::errors;
use crate::shard::Shard;

pub const VERSION: i16 = 0;
/// The tagged field of a WriteShareGroupState request naming its kind.
const WRITE_KIND_TAG: i32 = 10_000;

/// The wire's state batches (each message has its own type, with the
/// same fields) from ours, and ours from the wire's.
macro_rules! wire_batches {
    ($wire:ty, $batches:expr) => {
        $batches
            .iter()
            .map(|b| {
                <$wire>::default()
                    .with_first_offset(b.first)
                    .with_last_offset(b.last)
                    .with_delivery_state(b.delivery_state)
                    .with_delivery_count(b.delivery_count)
            })
            .collect()
    };
}
macro_rules! our_batches {
    ($batches:expr) => {
        $batches
            .iter()
            .map(|b| StateBatch {
                first: b.first_offset,
                last: b.last_offset,
                delivery_state: b.delivery_state,
                delivery_count: b.delivery_count,
            })
            .collect()
    };
}

/// The one partition result of a response (COORDINATOR_NOT_AVAILABLE
/// for a response without one).
macro_rules! first_partition {
    ($response:expr) => {
        $response
            .results
            .into_iter()
            .next()
            .and_then(|r| r.partitions.into_iter().next())
            .ok_or(errors::COORDINATOR_NOT_AVAILABLE)
    };
}

fn key_of(group_id: &StrBytes, topic_id: uuid::Uuid, partition: i32) -> SharePartitionKey {
    SharePartitionKey {
        group_id: group_id.to_string(),
        topic_id: topic_id.as_u128(),
        partition,
    }
}

/// The one share partition a request names (INVALID_REQUEST otherwise).
fn single<T, P>(topics: &[T], partitions: impl Fn(&T) -> &[P]) -> Option<(&T, &P)> {
    match topics {
        [topic] => match partitions(topic) {
            [partition] => Some((topic, partition)),
            _ => None,
        },
        _ => None,
    }
}

pub fn read_request(key: &SharePartitionKey) -> ReadShareGroupStateRequest {
    ReadShareGroupStateRequest::default()
        .with_group_id(StrBytes::from_string(key.group_id.clone()))
        .with_topics(vec![
            read_share_group_state_request::ReadStateData::default()
                .with_topic_id(uuid::Uuid::from_u128(key.topic_id))
                .with_partitions(vec![
                    read_share_group_state_request::PartitionData::default()
                        .with_partition(key.partition)
                        .with_leader_epoch(-1),
                ]),
        ])
}

/// The state a read answered (`None`: never written), or its error.
pub fn read_answer(response: ReadShareGroupStateResponse) -> Result<Option<ShareState>, i16> {
    let result = first_partition!(response)?;
    if result.error_code != errors::NONE {
        return Err(result.error_code);
    }
    if result.state_epoch < 0 {
        return Ok(None);
    }
    Ok(Some(ShareState {
        state_epoch: result.state_epoch,
        leader_epoch: -1,
        snapshot: ShareSnapshot {
            start_offset: result.start_offset,
            batches: our_batches!(result.state_batches),
        },
    }))
}

pub fn write_request(
    key: &SharePartitionKey,
    state: Option<&ShareState>,
    kind: i8,
) -> WriteShareGroupStateRequest {
    let state = state.cloned().unwrap_or_default();
    WriteShareGroupStateRequest::default()
        .with_group_id(StrBytes::from_string(key.group_id.clone()))
        .with_topics(vec![
            write_share_group_state_request::WriteStateData::default()
                .with_topic_id(uuid::Uuid::from_u128(key.topic_id))
                .with_partitions(vec![
                    write_share_group_state_request::PartitionData::default()
                        .with_partition(key.partition)
                        .with_state_epoch(state.state_epoch)
                        .with_leader_epoch(state.leader_epoch)
                        .with_start_offset(state.snapshot.start_offset)
                        .with_state_batches(wire_batches!(
                            write_share_group_state_request::StateBatch,
                            state.snapshot.batches
                        )),
                ]),
        ])
        .with_unknown_tagged_fields(BTreeMap::from([(
            WRITE_KIND_TAG,
            Bytes::copy_from_slice(&kind.to_be_bytes()),
        )]))
}

pub fn write_answer(response: WriteShareGroupStateResponse) -> Result<(), i16> {
    let result = first_partition!(response)?;
    match result.error_code {
        errors::NONE => Ok(()),
        code => Err(code),
    }
}

pub async fn handle_read(
    shard: &Rc<Shard>,
    request: ReadShareGroupStateRequest,
) -> ReadShareGroupStateResponse {
    let Some((topic, partition)) = single(&request.topics, |t| &t.partitions) else {
        return ReadShareGroupStateResponse::default();
    };
    let (topic_id, index) = (topic.topic_id, partition.partition);
    let key = key_of(&request.group_id, topic_id, index);
    let result = read_share_group_state_response::PartitionResult::default().with_partition(index);
    let result = match super::read_here(shard, key).await {
        Err(code) => result.with_error_code(code).with_state_epoch(-1),
        Ok(None) => result.with_state_epoch(-1).with_start_offset(-1),
        Ok(Some(state)) => result
            .with_state_epoch(state.state_epoch)
            .with_start_offset(state.snapshot.start_offset)
            .with_state_batches(wire_batches!(
                read_share_group_state_response::StateBatch,
                state.snapshot.batches
            )),
    };
    ReadShareGroupStateResponse::default().with_results(vec![
        read_share_group_state_response::ReadStateResult::default()
            .with_topic_id(topic_id)
            .with_partitions(vec![result]),
    ])
}

pub async fn handle_write(
    shard: &Rc<Shard>,
    request: WriteShareGroupStateRequest,
) -> WriteShareGroupStateResponse {
    let kind = request
        .unknown_tagged_fields
        .get(&WRITE_KIND_TAG)
        .and_then(|b| b.first())
        .map_or(0, |b| *b as i8);
    let Some((topic, partition)) = single(&request.topics, |t| &t.partitions) else {
        return WriteShareGroupStateResponse::default();
    };
    let (topic_id, index) = (topic.topic_id, partition.partition);
    let key = key_of(&request.group_id, topic_id, index);
    let state = ShareState {
        state_epoch: partition.state_epoch,
        leader_epoch: partition.leader_epoch,
        snapshot: ShareSnapshot {
            start_offset: partition.start_offset,
            batches: our_batches!(partition.state_batches),
        },
    };
    let code = match super::write_for_peer(shard, key, Some(state), kind).await {
        Ok(_) => errors::NONE,
        Err(code) => code,
    };
    WriteShareGroupStateResponse::default().with_results(vec![
        write_share_group_state_response::WriteStateResult::default()
            .with_topic_id(topic_id)
            .with_partitions(vec![
                write_share_group_state_response::PartitionResult::default()
                    .with_partition(index)
                    .with_error_code(code),
            ]),
    ])
}
