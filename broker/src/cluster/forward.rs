//! Admin changes reach the active controller from any broker: a broker
//! that is not the active controller sends the client's request, as the
//! client framed it, to the active controller's client listener and
//! returns its answer unchanged (the correlation id is the client's).
//! The controller decides with the latest metadata, and its answer names
//! the outcome of each part exactly as if the client had asked it.
//! After the answer, this broker waits (bounded) until its own image has
//! caught up with the controller's, so the client's next request here
//! sees the change.

use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;

use super::transport::{self, Purpose};
use crate::change::{Assignment, Outcome, Refusal, TopicSpec};
use crate::errors;
use crate::shard::Shard;

/// How long a forwarded admin request may take.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a broker waits for its image to show a forwarded change.
const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(5);
/// CreateTopics versions the broker's own requests to the active
/// controller use: those every Strom broker serves (the handler's range).
pub const CREATE_TOPICS_VERSIONS: std::ops::RangeInclusive<i16> = 2..=7;

/// The APIs that change metadata and so are decided by the active controller.
pub fn is_controller_api(api_key: ApiKey) -> bool {
    matches!(
        api_key,
        ApiKey::CreateTopics
            | ApiKey::DeleteTopics
            | ApiKey::CreatePartitions
            | ApiKey::AlterConfigs
            | ApiKey::IncrementalAlterConfigs
            | ApiKey::ElectLeaders
            | ApiKey::AlterPartitionReassignments
            | ApiKey::ListPartitionReassignments
            | ApiKey::DescribeQuorum
            | ApiKey::AddRaftVoter
            | ApiKey::RemoveRaftVoter
            | ApiKey::AlterUserScramCredentials
            | ApiKey::CreateAcls
            | ApiKey::DeleteAcls
    )
}

/// The client listener address of the active controller, if it is
/// another broker this node knows.
pub fn controller_address(shard: &Shard) -> Option<String> {
    let cluster = crate::cluster::of(shard)?;
    if cluster.is_active_controller() {
        return None;
    }
    let leader = cluster.active_controller();
    let image = shard.metadata.image();
    image
        .brokers
        .get(&leader)
        .map(|b| format!("{}:{}", b.host, b.port))
}

/// Forwards `frame` (a whole request without its length prefix) to the
/// active controller; its answer (a whole response frame with its length
/// prefix), or `None` when it cannot be reached: the request is then
/// answered here, and the controller's refusal (NOT_CONTROLLER) tells
/// the client to retry.
/// While the authorizer is on, the request travels in an Envelope with
/// the client's principal (`session`) and address, so the controller
/// authorizes the client.
pub async fn forward(
    shard: &Rc<Shard>,
    api_key: ApiKey,
    frame: &Bytes,
    session: Option<&crate::authorizer::Session>,
    peer: Option<std::net::IpAddr>,
) -> Option<Bytes> {
    let address = controller_address(shard)?;
    let answer = match session.filter(|_| shard.config.authorizer.is_some()) {
        None => transport::exchange_with(shard, &address, frame, FORWARD_TIMEOUT).await,
        Some(session) => {
            let wrapped = super::envelope::wrap(frame, session, peer, shard.config.node_id)?;
            match transport::exchange_with(shard, &address, &wrapped, FORWARD_TIMEOUT).await {
                Ok(answer) => super::envelope::unwrap(&answer),
                Err(error) => Err(error),
            }
        }
    };
    match answer {
        Ok(answer) => {
            // A read changes nothing here to catch up with.
            if !matches!(
                api_key,
                ApiKey::DescribeQuorum | ApiKey::AddRaftVoter | ApiKey::RemoveRaftVoter
            ) {
                catch_up(shard).await;
            }
            Some(answer)
        }
        Err(error) => {
            tracing::warn!(%address, %error, "cannot forward an admin request to the active controller");
            None
        }
    }
}

/// Waits until this broker's image is at least as new as what the
/// controller had applied when it answered (bounded; a slow catch-up
/// only delays the client seeing its change here).
async fn catch_up(shard: &Rc<Shard>) {
    let Some(cluster) = crate::cluster::of(shard) else {
        return;
    };
    let target = cluster.controller_applied().await;
    let deadline = Instant::now() + CATCH_UP_TIMEOUT;
    while cluster.image().offset < target && Instant::now() < deadline {
        glommio::timer::sleep(Duration::from_millis(5)).await;
    }
    super::reconcile_everywhere(shard, &cluster.image()).await;
}

/// Creates topics through the active controller, for the broker's own
/// needs (auto-created topics, the offsets topic) on a broker that is not
/// it: a CreateTopics request of its own. One outcome per spec.
pub async fn create_topics(
    shard: &Rc<Shard>,
    specs: Vec<(TopicSpec, Assignment)>,
    validate_only: bool,
) -> Vec<Outcome> {
    use kafka_protocol::messages::create_topics_request::{
        CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig,
    };
    use kafka_protocol::messages::{BrokerId, CreateTopicsRequest, TopicName};
    use kafka_protocol::protocol::StrBytes;

    let unavailable = |message: String| {
        let refusal = Refusal {
            error_code: errors::NOT_CONTROLLER,
            message,
        };
        vec![Err(refusal); specs.len()]
    };
    let Some(address) = controller_address(shard) else {
        return unavailable("no active controller is known".to_string());
    };
    let topics = specs
        .iter()
        .map(|(spec, assignment)| {
            CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_string(spec.name.clone())))
                .with_num_partitions(if assignment.is_empty() {
                    spec.partitions
                } else {
                    -1
                })
                .with_replication_factor(if assignment.is_empty() {
                    spec.replication_factor
                } else {
                    -1
                })
                .with_assignments(
                    assignment
                        .iter()
                        .map(|(index, brokers)| {
                            CreatableReplicaAssignment::default()
                                .with_partition_index(*index)
                                .with_broker_ids(brokers.iter().copied().map(BrokerId).collect())
                        })
                        .collect(),
                )
                .with_configs(
                    spec.configs
                        .iter()
                        .map(|(name, value)| {
                            CreatableTopicConfig::default()
                                .with_name(StrBytes::from_string(name.clone()))
                                .with_value(Some(StrBytes::from_string(value.clone())))
                        })
                        .collect(),
                )
        })
        .collect();
    let request = CreateTopicsRequest::default()
        .with_topics(topics)
        .with_timeout_ms(FORWARD_TIMEOUT.as_millis() as i32)
        .with_validate_only(validate_only);
    let response = call_controller(shard, &address, &request, CREATE_TOPICS_VERSIONS).await;
    let response = match response {
        Ok(response) => response,
        Err(error) => return unavailable(format!("the active controller at {address}: {error}")),
    };
    catch_up(shard).await;
    specs
        .iter()
        .map(|(spec, _)| {
            let result = response
                .topics
                .iter()
                .find(|t| t.name.0.as_str() == spec.name);
            match result {
                Some(t) if t.error_code == errors::NONE => Ok(()),
                Some(t) => Err(Refusal {
                    error_code: t.error_code,
                    message: t
                        .error_message
                        .as_ref()
                        .map(|m| m.to_string())
                        .unwrap_or_default(),
                }),
                None => Err(Refusal {
                    error_code: errors::UNKNOWN_SERVER_ERROR,
                    message: "the active controller did not answer for this topic".to_string(),
                }),
            }
        })
        .collect()
}

/// A new producer id from the active controller, for a transaction
/// coordinator on a broker that is not it: an InitProducerId request
/// without a transactional id (what an idempotent producer sends), whose
/// answer is an id nobody else holds. The error code when it cannot.
pub async fn allocate_producer_id(shard: &Rc<Shard>) -> Result<i64, i16> {
    use kafka_protocol::messages::InitProducerIdRequest;

    let Some(address) = controller_address(shard) else {
        return Err(errors::NOT_CONTROLLER);
    };
    let request = InitProducerIdRequest::default()
        .with_transactional_id(None)
        .with_transaction_timeout_ms(-1)
        .with_producer_id(kafka_protocol::messages::ProducerId(-1))
        .with_producer_epoch(-1);
    let response = call_controller(shard, &address, &request, 0..=5).await;
    match response {
        Ok(r) if r.error_code == errors::NONE && r.producer_id.0 >= 0 => Ok(r.producer_id.0),
        Ok(r) => Err(r.error_code),
        Err(error) => {
            tracing::warn!(%address, %error, "cannot get a producer id from the active controller");
            Err(errors::COORDINATOR_NOT_AVAILABLE)
        }
    }
}

/// One request of this broker's own to the active controller at
/// `address`, at the highest of `versions` both serve.
async fn call_controller<R: kafka_protocol::protocol::Request>(
    shard: &Rc<Shard>,
    address: &str,
    request: &R,
    versions: std::ops::RangeInclusive<i16>,
) -> Result<R::Response, String> {
    let purpose = Purpose::Admin {
        timeout: FORWARD_TIMEOUT,
    };
    let mut connection = transport::connect_address(shard, address, purpose).await?;
    let version = connection
        .version::<R>(versions)
        .map_err(|e| e.to_string())?;
    connection
        .call(request, version)
        .await
        .map_err(|e| e.to_string())
}
