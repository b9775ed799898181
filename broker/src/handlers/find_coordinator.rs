//! FindCoordinator (10), versions 0–6 (v4: batched `coordinator_keys`).
//! Groups (key type 0) are coordinated by the broker leading their
//! `__consumer_offsets` partition, on the core owning it; the first
//! request creates that topic, as Kafka does. Transactional ids (key
//! type 1) likewise, by the broker leading their `__transaction_state`
//! partition. Share partitions (key type 2, v6, `group:topicId:partition`)
//! by the broker leading their `__share_group_state` partition (their
//! share coordinator, `crate::share_state`); a key of another form gets
//! INVALID_REQUEST. v5 only lets a transaction coordinator answer
//! TRANSACTION_ABORTABLE, which none here does.

use std::rc::Rc;

use groups::error::GroupError;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;

use crate::errors;
use crate::group::manager;
use crate::shard::Shard;

pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 6;

const KEY_TYPE_GROUP: i8 = 0;
const KEY_TYPE_TRANSACTION: i8 = 1;
const KEY_TYPE_SHARE: i8 = 2;

/// Whether `key` names a share partition: `group:topicId:partition`, the
/// topic id in Kafka's 22-character form, the partition not negative.
fn is_share_partition_key(key: &str) -> bool {
    let mut parts = key.rsplitn(3, ':');
    let (Some(partition), Some(topic_id), Some(group)) = (parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    !group.is_empty()
        && topic_id.len() == 22
        && topic_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        && partition.parse::<i32>().is_ok_and(|p| p >= 0)
}

/// The coordinating broker's id, host and port.
async fn find(
    shard: &Rc<Shard>,
    key: &str,
    key_type: i8,
    listener: &str,
) -> Result<(i32, StrBytes, i32), i16> {
    let id = match key_type {
        KEY_TYPE_GROUP => manager::coordinator(shard, key)
            .await
            .map_err(GroupError::code)?,
        KEY_TYPE_TRANSACTION if !key.is_empty() => crate::txn::manager::coordinator(shard, key)
            .await
            .map_err(|error| error.code())?,
        KEY_TYPE_SHARE if is_share_partition_key(key) => {
            crate::share_state::coordinator(shard, key).await?
        }
        _ => return Err(errors::INVALID_REQUEST),
    };
    let image = shard.metadata.image();
    let id = crate::cluster::client_node(shard, &image, id);
    crate::cluster::listed_brokers(shard, &image, false, listener)
        .into_iter()
        .find(|b| b.id == id)
        .map(|b| (b.id, StrBytes::from_string(b.host), i32::from(b.port)))
        .ok_or(errors::COORDINATOR_NOT_AVAILABLE)
}

pub async fn handle(
    shard: &Rc<Shard>,
    request: FindCoordinatorRequest,
    version: i16,
    listener: &str,
) -> FindCoordinatorResponse {
    if version >= 4 {
        let mut coordinators = Vec::with_capacity(request.coordinator_keys.len());
        for key in request.coordinator_keys {
            let coordinator = match find(shard, &key, request.key_type, listener).await {
                Ok((id, host, port)) => Coordinator::default()
                    .with_node_id(BrokerId(id))
                    .with_host(host)
                    .with_port(port),
                Err(code) => Coordinator::default()
                    .with_node_id(BrokerId(-1))
                    .with_port(-1)
                    .with_error_code(code),
            };
            coordinators.push(coordinator.with_key(key));
        }
        return FindCoordinatorResponse::default().with_coordinators(coordinators);
    }
    let key_type = if version == 0 {
        KEY_TYPE_GROUP
    } else {
        request.key_type
    };
    match find(shard, &request.key, key_type, listener).await {
        Ok((id, host, port)) => FindCoordinatorResponse::default()
            .with_node_id(BrokerId(id))
            .with_host(host)
            .with_port(port),
        Err(code) => FindCoordinatorResponse::default()
            .with_error_code(code)
            .with_node_id(BrokerId(-1))
            .with_port(-1),
    }
}

#[cfg(test)]
mod tests {
    use super::is_share_partition_key;

    #[test]
    fn share_partition_keys_are_group_topic_id_and_partition() {
        assert!(is_share_partition_key("queue:AAAAAAAAAAAAAAAAAAAAAA:0"));
        assert!(is_share_partition_key("a:b:c:_____________________w:12"));
        for bad in [
            "queue",
            "queue:AAAAAAAAAAAAAAAAAAAAAA",
            ":AAAAAAAAAAAAAAAAAAAAAA:0",
            "queue:short:0",
            "queue:AAAAAAAAAAAAAAAAAAAAAA:-1",
            "queue:AAAAAAAAAAAAAAAAAAAA!!:0",
            "queue:AAAAAAAAAAAAAAAAAAAAAA:x",
        ] {
            assert!(!is_share_partition_key(bad), "{bad}");
        }
    }
}
