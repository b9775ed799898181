//! Request dispatch: version checks, body decoding, one handler per API
//! (one file each, its supported version range first), response encoding.

use std::net::IpAddr;
use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::FetchResponse;
use kafka_protocol::messages::{ApiKey, RequestKind};
use kafka_protocol::protocol::{Encodable, HeaderVersion};
use protocol::codec::{self, Encoded, RequestFrame};

use crate::errors::ConnectionError;
use crate::memory::ResponseBudget;
use crate::metrics::{self, ErrorCodes};
use crate::shard::Shard;

pub mod access;
pub mod acls;
pub mod api_versions;
pub mod authorized_operations;
pub mod configs;
pub mod consumer_groups;
pub mod create_partitions;
pub mod create_topics;
pub mod delete_groups;
pub mod delete_records;
pub mod delete_topics;
pub mod describe_cluster;
pub mod describe_groups;
pub mod describe_log_dirs;
pub mod describe_producers;
pub mod describe_quorum;
pub mod describe_topic_partitions;
pub mod elect_leaders;
pub mod fetch;
pub mod find_coordinator;
pub mod heartbeat;
pub mod init_producer_id;
pub mod join_group;
pub mod leave_group;
pub mod list_config_resources;
pub mod list_groups;
pub mod list_offsets;
pub mod metadata;
pub mod offset_commit;
pub mod offset_delete;
pub mod offset_fetch;
pub mod offset_for_leader_epoch;
pub mod partition_reassignments;
pub mod placement;
pub mod produce;
pub mod raft_voters;
pub mod scatter;
pub mod scram_credentials;
pub mod share_admin;
pub mod share_groups;
pub mod sync_group;
pub mod transactions;
pub mod txn_offset_commit;

/// Every API the broker answers, with the versions it advertises.
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    // Served on a SASL listener's connections before authentication
    // (`crate::sasl`).
    (
        ApiKey::SaslHandshake,
        crate::sasl::HANDSHAKE_VERSIONS.0,
        crate::sasl::HANDSHAKE_VERSIONS.1,
    ),
    (
        ApiKey::SaslAuthenticate,
        crate::sasl::AUTHENTICATE_VERSIONS.0,
        crate::sasl::AUTHENTICATE_VERSIONS.1,
    ),
    (ApiKey::Produce, produce::VERSION_MIN, produce::VERSION_MAX),
    (ApiKey::Fetch, fetch::VERSION_MIN, fetch::VERSION_MAX),
    (
        ApiKey::ListOffsets,
        list_offsets::VERSION_MIN,
        list_offsets::VERSION_MAX,
    ),
    (
        ApiKey::Metadata,
        metadata::VERSION_MIN,
        metadata::VERSION_MAX,
    ),
    (
        ApiKey::OffsetForLeaderEpoch,
        offset_for_leader_epoch::VERSION_MIN,
        offset_for_leader_epoch::VERSION_MAX,
    ),
    (
        ApiKey::ApiVersions,
        api_versions::VERSION_MIN,
        api_versions::VERSION_MAX,
    ),
    (
        ApiKey::CreateTopics,
        create_topics::VERSION_MIN,
        create_topics::VERSION_MAX,
    ),
    (
        ApiKey::DeleteTopics,
        delete_topics::VERSION_MIN,
        delete_topics::VERSION_MAX,
    ),
    (
        ApiKey::DeleteRecords,
        delete_records::VERSION_MIN,
        delete_records::VERSION_MAX,
    ),
    (
        ApiKey::InitProducerId,
        init_producer_id::VERSION_MIN,
        init_producer_id::VERSION_MAX,
    ),
    (
        ApiKey::DescribeConfigs,
        configs::DESCRIBE_VERSION_MIN,
        configs::DESCRIBE_VERSION_MAX,
    ),
    (
        ApiKey::AlterConfigs,
        configs::ALTER_VERSION_MIN,
        configs::ALTER_VERSION_MAX,
    ),
    (
        ApiKey::CreatePartitions,
        create_partitions::VERSION_MIN,
        create_partitions::VERSION_MAX,
    ),
    (
        ApiKey::IncrementalAlterConfigs,
        configs::INCREMENTAL_VERSION_MIN,
        configs::INCREMENTAL_VERSION_MAX,
    ),
    (
        ApiKey::DescribeCluster,
        describe_cluster::VERSION_MIN,
        describe_cluster::VERSION_MAX,
    ),
    (
        ApiKey::ElectLeaders,
        elect_leaders::VERSION_MIN,
        elect_leaders::VERSION_MAX,
    ),
    (
        ApiKey::AlterPartitionReassignments,
        partition_reassignments::ALTER_VERSION_MIN,
        partition_reassignments::ALTER_VERSION_MAX,
    ),
    (
        ApiKey::ListPartitionReassignments,
        partition_reassignments::LIST_VERSION_MIN,
        partition_reassignments::LIST_VERSION_MAX,
    ),
    (
        ApiKey::DescribeQuorum,
        describe_quorum::VERSION_MIN,
        describe_quorum::VERSION_MAX,
    ),
    (
        ApiKey::AddRaftVoter,
        raft_voters::ADD_VERSION_MIN,
        raft_voters::ADD_VERSION_MAX,
    ),
    (
        ApiKey::RemoveRaftVoter,
        raft_voters::REMOVE_VERSION_MIN,
        raft_voters::REMOVE_VERSION_MAX,
    ),
    (ApiKey::DescribeAcls, acls::VERSION_MIN, acls::VERSION_MAX),
    (ApiKey::CreateAcls, acls::VERSION_MIN, acls::VERSION_MAX),
    (ApiKey::DeleteAcls, acls::VERSION_MIN, acls::VERSION_MAX),
    (
        ApiKey::DescribeUserScramCredentials,
        scram_credentials::VERSION_MIN,
        scram_credentials::VERSION_MAX,
    ),
    (
        ApiKey::AlterUserScramCredentials,
        scram_credentials::VERSION_MIN,
        scram_credentials::VERSION_MAX,
    ),
    (
        ApiKey::DescribeLogDirs,
        describe_log_dirs::VERSION_MIN,
        describe_log_dirs::VERSION_MAX,
    ),
    (
        ApiKey::DescribeProducers,
        describe_producers::VERSION_MIN,
        describe_producers::VERSION_MAX,
    ),
    (
        ApiKey::ListConfigResources,
        list_config_resources::VERSION_MIN,
        list_config_resources::VERSION_MAX,
    ),
    (
        ApiKey::DescribeTopicPartitions,
        describe_topic_partitions::VERSION_MIN,
        describe_topic_partitions::VERSION_MAX,
    ),
    // Consumer groups.
    (
        ApiKey::OffsetCommit,
        offset_commit::VERSION_MIN,
        offset_commit::VERSION_MAX,
    ),
    (
        ApiKey::OffsetFetch,
        offset_fetch::VERSION_MIN,
        offset_fetch::VERSION_MAX,
    ),
    (
        ApiKey::FindCoordinator,
        find_coordinator::VERSION_MIN,
        find_coordinator::VERSION_MAX,
    ),
    (
        ApiKey::JoinGroup,
        join_group::VERSION_MIN,
        join_group::VERSION_MAX,
    ),
    (
        ApiKey::Heartbeat,
        heartbeat::VERSION_MIN,
        heartbeat::VERSION_MAX,
    ),
    (
        ApiKey::LeaveGroup,
        leave_group::VERSION_MIN,
        leave_group::VERSION_MAX,
    ),
    (
        ApiKey::SyncGroup,
        sync_group::VERSION_MIN,
        sync_group::VERSION_MAX,
    ),
    (
        ApiKey::DescribeGroups,
        describe_groups::VERSION_MIN,
        describe_groups::VERSION_MAX,
    ),
    (
        ApiKey::ListGroups,
        list_groups::VERSION_MIN,
        list_groups::VERSION_MAX,
    ),
    (
        ApiKey::DeleteGroups,
        delete_groups::VERSION_MIN,
        delete_groups::VERSION_MAX,
    ),
    (
        ApiKey::OffsetDelete,
        offset_delete::VERSION_MIN,
        offset_delete::VERSION_MAX,
    ),
    (
        ApiKey::ConsumerGroupHeartbeat,
        consumer_groups::VERSION_MIN,
        consumer_groups::VERSION_MAX,
    ),
    (
        ApiKey::ConsumerGroupDescribe,
        consumer_groups::VERSION_MIN,
        consumer_groups::VERSION_MAX,
    ),
    (
        ApiKey::ShareGroupHeartbeat,
        share_groups::VERSION_MIN,
        share_groups::VERSION_MAX,
    ),
    (
        ApiKey::ShareFetch,
        share_groups::VERSION_MIN,
        share_groups::VERSION_MAX,
    ),
    (
        ApiKey::ShareAcknowledge,
        share_groups::VERSION_MIN,
        share_groups::VERSION_MAX,
    ),
    (
        ApiKey::ShareGroupDescribe,
        share_admin::DESCRIBE_VERSION,
        share_admin::DESCRIBE_VERSION,
    ),
    (
        ApiKey::DescribeShareGroupOffsets,
        share_admin::OFFSETS_VERSION,
        share_admin::OFFSETS_VERSION,
    ),
    (
        ApiKey::AlterShareGroupOffsets,
        share_admin::OFFSETS_VERSION,
        share_admin::OFFSETS_VERSION,
    ),
    (
        ApiKey::DeleteShareGroupOffsets,
        share_admin::OFFSETS_VERSION,
        share_admin::OFFSETS_VERSION,
    ),
    // Between brokers: a share partition's leader and its share coordinator.
    (
        ApiKey::ReadShareGroupState,
        crate::share_state::wire::VERSION,
        crate::share_state::wire::VERSION,
    ),
    (
        ApiKey::WriteShareGroupState,
        crate::share_state::wire::VERSION,
        crate::share_state::wire::VERSION,
    ),
    (
        ApiKey::AddPartitionsToTxn,
        0,
        transactions::ADD_PARTITIONS_VERSION_MAX,
    ),
    (
        ApiKey::AddOffsetsToTxn,
        0,
        transactions::ADD_OFFSETS_VERSION_MAX,
    ),
    (ApiKey::EndTxn, 0, transactions::END_TXN_VERSION_MAX),
    (
        ApiKey::DescribeTransactions,
        0,
        transactions::DESCRIBE_VERSION_MAX,
    ),
    (ApiKey::ListTransactions, 0, transactions::LIST_VERSION_MAX),
    (
        ApiKey::TxnOffsetCommit,
        txn_offset_commit::VERSION_MIN,
        txn_offset_commit::VERSION_MAX,
    ),
    (
        ApiKey::WriteTxnMarkers,
        crate::txn::markers::VERSION_MIN,
        crate::txn::markers::VERSION_MAX,
    ),
];

/// The advertised ranges, as the ApiVersions response lists them.
pub fn advertised() -> Vec<ApiVersion> {
    SUPPORTED
        .iter()
        .map(|&(key, min, max)| {
            ApiVersion::default()
                .with_api_key(key as i16)
                .with_min_version(min)
                .with_max_version(max)
        })
        .collect()
}

fn supported_range(api_key: ApiKey) -> Option<(i16, i16)> {
    SUPPORTED
        .iter()
        .find(|(key, _, _)| *key == api_key)
        .map(|&(_, min, max)| (min, max))
}

/// Handles one request frame. `Ok(None)` sends nothing (acks=0 produce);
/// an error closes the connection after the responses before it.
/// Frames of other requests than Produce above `NON_PRODUCE_FRAME_BYTES_MAX`
/// are refused by the server before they are read. `budget` is what the
/// response may hold of its connection's memory; Fetch sizes its answer by it.
/// `peer` is the client's address (JoinGroup records it as the member's host);
/// `session` who asks, when the authorizer is on.
pub async fn handle(
    shard: Rc<Shard>,
    frame: Bytes,
    budget: &mut ResponseBudget,
    peer: Option<IpAddr>,
    session: Option<Rc<crate::authorizer::Session>>,
    listener: &str,
) -> Result<Option<Encoded>, ConnectionError> {
    if let Some(answer) = api_versions_unsupported(&frame) {
        metrics::record_error_code(
            ApiKey::ApiVersions as i16,
            crate::errors::UNSUPPORTED_VERSION,
        );
        return Ok(Some(answer.into()));
    }
    if frame.get(..2) == Some(&(ApiKey::Envelope as i16).to_be_bytes()[..]) {
        return serve_envelope(shard, frame, budget, session, listener).await;
    }
    if let Some(answer) = forward_to_controller(&shard, &frame, session.as_deref(), peer).await {
        return Ok(Some(answer.into()));
    }
    // The frame as the client framed it, for a group request forwarded whole.
    let original = frame.clone();
    let request = codec::decode_header(frame)?;
    let api_key = request.api_key;
    let version = request.api_version;
    let Some((min, max)) = supported_range(api_key) else {
        return Err(ConnectionError::UnsupportedApi { api_key });
    };
    if version < min || version > max || !api_key.valid_versions().contains(version) {
        if api_key == ApiKey::Produce && (0..produce::VERSION_SERVED_MIN).contains(&version) {
            return Ok(produce::answer_old_version(&request).map(Encoded::from));
        }
        return Err(ConnectionError::UnsupportedVersion {
            api_key,
            api_version: version,
        });
    }
    let body = codec::decode_body(&request)?;
    let mut checked = None;
    let mut body = body;
    if let Some(access) = session.as_ref().and_then(|s| access::Access::of(&shard, s)) {
        match access.check(api_key, body) {
            access::Checked::Serve(allowed, denied) => {
                body = allowed;
                denied.count();
                checked = Some((access, denied));
            }
            access::Checked::Deny(answer) => {
                let out = Respond {
                    api_key: api_key as i16,
                    id: request.correlation_id,
                    version,
                };
                return Ok(Some(encode_refusal(&out, *answer)?));
            }
            access::Checked::Close(why) => {
                metrics::record_denial(crate::authorizer::resource::CLUSTER);
                tracing::warn!(reason = %why, "closing connection: not authorized");
                return Err(ConnectionError::NotAuthorized(why));
            }
        }
    }
    // A request the authorizer cut down is answered here, never
    // forwarded whole as the client framed it.
    let cut = checked
        .as_ref()
        .is_some_and(|(_, denied)| !denied.is_empty());
    if !cut {
        if let Some(answer) = crate::coordinator_forward::forward(
            &shard,
            &request,
            &body,
            &original,
            peer,
            session.as_deref(),
        )
        .await
        {
            return Ok(Some(answer.into()));
        }
    }
    dispatch(shard, &request, body, budget, peer, checked, listener).await
}

/// A whole request the authorizer refused: its answer.
fn encode_refusal(
    out: &Respond,
    answer: kafka_protocol::messages::ResponseKind,
) -> Result<Encoded, ConnectionError> {
    use kafka_protocol::messages::ResponseKind as K;
    /// Counts the refusal by the resource its first authorization code
    /// names, then encodes it.
    macro_rules! refused {
        ($response:expr) => {{
            let response = $response;
            count_denial(&response, out.version);
            out.encode(&response)
        }};
    }
    let encoded = match answer {
        K::Produce(r) => refused!(r),
        K::Fetch(r) => {
            count_denial(&r, out.version);
            out.encode_fetch(&r)
        }
        K::JoinGroup(r) => refused!(r),
        K::SyncGroup(r) => refused!(r),
        K::Heartbeat(r) => refused!(r),
        K::ConsumerGroupHeartbeat(r) => refused!(r),
        K::ShareGroupHeartbeat(r) => refused!(r),
        K::ShareFetch(r) => refused!(r),
        K::ShareAcknowledge(r) => refused!(r),
        K::LeaveGroup(r) => refused!(r),
        K::OffsetCommit(r) => refused!(r),
        K::OffsetFetch(r) => refused!(r),
        K::FindCoordinator(r) => refused!(r),
        K::InitProducerId(r) => refused!(r),
        K::AddOffsetsToTxn(r) => refused!(r),
        K::EndTxn(r) => refused!(r),
        K::AddPartitionsToTxn(r) => refused!(r),
        K::TxnOffsetCommit(r) => refused!(r),
        K::CreateAcls(r) => refused!(r),
        K::DeleteAcls(r) => refused!(r),
        K::DescribeAcls(r) => refused!(r),
        K::AlterUserScramCredentials(r) => refused!(r),
        K::DescribeUserScramCredentials(r) => refused!(r),
        K::OffsetDelete(r) => refused!(r),
        K::ElectLeaders(r) => refused!(r),
        K::AlterPartitionReassignments(r) => refused!(r),
        K::ListPartitionReassignments(r) => refused!(r),
        K::DescribeQuorum(r) => refused!(r),
        K::AddRaftVoter(r) => refused!(r),
        K::RemoveRaftVoter(r) => refused!(r),
        K::DescribeLogDirs(r) => refused!(r),
        K::ListConfigResources(r) => refused!(r),
        K::WriteTxnMarkers(r) => refused!(r),
        other => {
            return Err(ConnectionError::NotAuthorized(format!(
                "no refusal answer for {other:?}"
            )))
        }
    };
    Ok(encoded?)
}

/// Counts one denial, by the resource type of the response's first
/// authorization error code.
fn count_denial(response: &impl ErrorCodes, version: i16) {
    use crate::authorizer::resource;
    use crate::errors;
    let mut kind = None;
    response.each_error_code(version, &mut |code| {
        kind = kind.or(match code {
            errors::TOPIC_AUTHORIZATION_FAILED => Some(resource::TOPIC),
            errors::GROUP_AUTHORIZATION_FAILED => Some(resource::GROUP),
            errors::CLUSTER_AUTHORIZATION_FAILED => Some(resource::CLUSTER),
            errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED => Some(resource::TRANSACTIONAL_ID),
            _ => None,
        });
    });
    if let Some(kind) = kind {
        metrics::record_denial(kind);
    }
}

/// In a cluster, a metadata change sent to a broker that is not the
/// active controller goes there, and its answer comes back unchanged.
async fn forward_to_controller(
    shard: &Rc<Shard>,
    frame: &Bytes,
    session: Option<&crate::authorizer::Session>,
    peer: Option<IpAddr>,
) -> Option<Bytes> {
    crate::cluster::of(shard)?;
    let [k0, k1, ..] = **frame else {
        return None;
    };
    let api_key = ApiKey::try_from(i16::from_be_bytes([k0, k1])).ok()?;
    if !crate::cluster::forward::is_controller_api(api_key) {
        return None;
    }
    crate::cluster::forward::forward(shard, api_key, frame, session, peer).await
}

/// An Envelope from another broker: the client's request it carries,
/// served as the client's principal, and its answer carried back. Only a
/// principal allowed CLUSTER_ACTION on the cluster (a broker) may send
/// one, and only while the authorizer is on (brokers send none without
/// it); a request that cannot be served is refused with the Envelope's
/// own error code.
async fn serve_envelope(
    shard: Rc<Shard>,
    frame: Bytes,
    budget: &mut ResponseBudget,
    session: Option<Rc<crate::authorizer::Session>>,
    listener: &str,
) -> Result<Option<Encoded>, ConnectionError> {
    use crate::authorizer::{operation, resource, CLUSTER_NAME};
    use crate::cluster::envelope;
    let request = codec::decode_header(frame)?;
    let out = Respond {
        api_key: ApiKey::Envelope as i16,
        id: request.correlation_id,
        version: request.api_version,
    };
    let refuse = |code: i16, why: String| {
        tracing::warn!(reason = %why, "an Envelope refused");
        Ok(Some(out.encode(&envelope::answer(None, code))?))
    };
    let Some(access) = session.as_ref().and_then(|s| access::Access::of(&shard, s)) else {
        return refuse(
            crate::errors::INVALID_REQUEST,
            "an Envelope while the authorizer is off".to_string(),
        );
    };
    if !access.allows(operation::CLUSTER_ACTION, resource::CLUSTER, CLUSTER_NAME) {
        metrics::record_denial(resource::CLUSTER);
        let principal = session.as_ref().map_or("", |s| s.principal.as_str());
        return refuse(
            crate::errors::CLUSTER_AUTHORIZATION_FAILED,
            format!("{principal} may not forward requests (CLUSTER_ACTION on the cluster)"),
        );
    }
    let opened = match envelope::open(request.body, request.api_version) {
        Ok(opened) => opened,
        Err(why) => return refuse(crate::errors::INVALID_REQUEST, why),
    };
    if opened.frame.get(..2) == Some(&(ApiKey::Envelope as i16).to_be_bytes()[..]) {
        return refuse(
            crate::errors::INVALID_REQUEST,
            "an Envelope inside an Envelope".to_string(),
        );
    }
    let host = opened.peer.map(|p| p.to_string()).unwrap_or_default();
    let client = Rc::new(crate::authorizer::Session::new(opened.principal, host));
    let served = Box::pin(handle(
        shard.clone(),
        opened.frame,
        budget,
        opened.peer,
        Some(client),
        listener,
    ))
    .await;
    match served {
        Ok(inner) => Ok(Some(out.encode(&envelope::answer(
            inner.map(|encoded| encoded.to_bytes()),
            crate::errors::NONE,
        ))?)),
        Err(error) => refuse(
            crate::errors::INVALID_REQUEST,
            format!("the request it carries cannot be served: {error}"),
        ),
    }
}

/// Kafka's answer to an ApiVersions request at a version it does not serve
/// (above or below its range): a v0 body with UNSUPPORTED_VERSION listing
/// ApiVersions' own range, so that the client retries at a version both
/// sides know. Only the correlation id is read: the header's shape at an
/// unknown version (flexible or not) is the client's guess, and a client
/// probing versions must get an answer, never a closed connection.
fn api_versions_unsupported(frame: &[u8]) -> Option<Bytes> {
    let [k0, k1, v0, v1, c0, c1, c2, c3, ..] = *frame else {
        return None;
    };
    let version = i16::from_be_bytes([v0, v1]);
    if i16::from_be_bytes([k0, k1]) != ApiKey::ApiVersions as i16
        || (api_versions::VERSION_MIN..=api_versions::VERSION_MAX).contains(&version)
    {
        return None;
    }
    let own = ApiVersion::default()
        .with_api_key(ApiKey::ApiVersions as i16)
        .with_min_version(api_versions::VERSION_MIN)
        .with_max_version(api_versions::VERSION_MAX);
    let correlation_id = i32::from_be_bytes([c0, c1, c2, c3]);
    Some(codec::api_versions_unsupported(correlation_id, vec![own]))
}

trait VersionContains {
    fn contains(&self, version: i16) -> bool;
}

impl VersionContains for kafka_protocol::protocol::VersionRange {
    fn contains(&self, version: i16) -> bool {
        self.min <= version && version <= self.max
    }
}

/// A group member's client host and client id: those its request carries,
/// or, for one another broker forwarded, the member's own.
fn member_client(request: &RequestFrame, peer: Option<IpAddr>) -> (String, String) {
    let forwarded = crate::coordinator_forward::forwarded_client(request.client_id.as_deref());
    forwarded.unwrap_or_else(|| {
        (
            peer.map(join_group::client_host).unwrap_or_default(),
            request
                .client_id
                .as_ref()
                .map(|c| c.to_string())
                .unwrap_or_default(),
        )
    })
}

async fn dispatch(
    shard: Rc<Shard>,
    request: &RequestFrame,
    body: RequestKind,
    budget: &mut ResponseBudget,
    peer: Option<IpAddr>,
    checked: Option<(access::Access, access::Denied)>,
    listener: &str,
) -> Result<Option<Encoded>, ConnectionError> {
    let denied = checked.as_ref().map(|(_, d)| d);
    let access = checked.as_ref().map(|(a, _)| a);
    let out = Respond {
        api_key: request.api_key as i16,
        id: request.correlation_id,
        version: request.api_version,
    };
    let version = request.api_version;
    let origin = crate::cluster::links::Origin::of(request.client_id.as_deref());
    let encoded = match body {
        RequestKind::ApiVersions(_) => out.encode(&api_versions::handle(version)),
        // On a listener without SASL, or after authenticating (no
        // re-authentication yet): Kafka's answer.
        RequestKind::SaslHandshake(_) => out.encode(
            &kafka_protocol::messages::SaslHandshakeResponse::default()
                .with_error_code(crate::errors::ILLEGAL_SASL_STATE),
        ),
        RequestKind::SaslAuthenticate(_) => out.encode(
            &kafka_protocol::messages::SaslAuthenticateResponse::default()
                .with_error_code(crate::errors::ILLEGAL_SASL_STATE),
        ),
        RequestKind::Metadata(body) => {
            let mut response = metadata::handle(&shard, body, version, listener).await;
            if let (Some(denied), Some(access)) = (denied, access) {
                denied.metadata(access, &mut response);
                use crate::authorizer::{resource, CLUSTER_NAME};
                for topic in &mut response.topics {
                    let name = topic.name.as_ref().map_or("", |n| n.as_str());
                    topic.topic_authorized_operations =
                        access.operations(topic.topic_authorized_operations, resource::TOPIC, name);
                }
                response.cluster_authorized_operations = access.operations(
                    response.cluster_authorized_operations,
                    resource::CLUSTER,
                    CLUSTER_NAME,
                );
            }
            out.encode(&response)
        }
        RequestKind::CreateTopics(body) => {
            let mut response = create_topics::handle(&shard, body).await;
            if let Some(denied) = denied {
                denied.create_topics(&mut response);
            }
            out.encode(&response)
        }
        RequestKind::Produce(body) => {
            match produce::handle(&shard, body, version, origin, listener).await {
                Some(mut response) => {
                    if let Some(denied) = denied {
                        denied.produce(&mut response);
                    }
                    out.encode(&response)
                }
                None => return Ok(None),
            }
        }
        RequestKind::Fetch(body) => {
            let mut response = fetch::handle(&shard, body, version, budget, origin, listener).await;
            if let Some(denied) = denied {
                denied.fetch(&mut response);
            }
            out.encode_fetch(&response)
        }
        RequestKind::ListOffsets(body) => {
            let mut response = list_offsets::handle(&shard, body, version, origin).await;
            if let Some(denied) = denied {
                denied.list_offsets(&mut response);
            }
            out.encode(&response)
        }
        RequestKind::OffsetForLeaderEpoch(body) => {
            let mut response = offset_for_leader_epoch::handle(&shard, body, version, origin).await;
            if let Some(denied) = denied {
                denied.offset_for_leader_epoch(&mut response);
            }
            out.encode(&response)
        }
        RequestKind::DeleteTopics(body) => {
            let mut response = delete_topics::handle(&shard, body, version).await;
            if let Some(denied) = denied {
                denied.delete_topics(&mut response);
            }
            out.encode(&response)
        }
        RequestKind::CreateAcls(body) => out.encode(&acls::create(&shard, body).await),
        RequestKind::DescribeAcls(body) => out.encode(&acls::describe(&shard, body)),
        RequestKind::DeleteAcls(body) => out.encode(&acls::delete(&shard, body).await),
        RequestKind::DeleteRecords(body) => {
            let mut response = delete_records::handle(&shard, body, version, origin).await;
            if let Some(denied) = denied {
                denied.delete_records(&mut response);
            }
            out.encode(&response)
        }
        RequestKind::CreatePartitions(body) => {
            let mut response = create_partitions::handle(&shard, body).await;
            if let Some(denied) = denied {
                denied.create_partitions(&mut response);
            }
            out.encode(&response)
        }
        RequestKind::DescribeConfigs(body) => {
            let mut response = configs::describe(&shard, body, version);
            if let Some(denied) = denied {
                denied.describe_configs(&mut response);
            }
            out.encode(&response)
        }
        RequestKind::AlterConfigs(body) => {
            let mut response = configs::alter(&shard, body).await;
            if let Some(denied) = denied {
                denied.alter_configs(&mut response);
            }
            out.encode(&response)
        }
        RequestKind::IncrementalAlterConfigs(body) => {
            let mut response = configs::incremental_alter(&shard, body).await;
            if let Some(denied) = denied {
                denied.incremental_alter_configs(&mut response);
            }
            out.encode(&response)
        }
        RequestKind::DescribeCluster(body) => {
            let mut response = describe_cluster::handle(&shard, body, version, listener);
            if let Some(access) = access {
                use crate::authorizer::{resource, CLUSTER_NAME};
                response.cluster_authorized_operations = access.operations(
                    response.cluster_authorized_operations,
                    resource::CLUSTER,
                    CLUSTER_NAME,
                );
            }
            out.encode(&response)
        }
        RequestKind::ElectLeaders(body) => {
            out.encode(&elect_leaders::handle(&shard, body, version).await)
        }
        RequestKind::AlterPartitionReassignments(body) => {
            out.encode(&partition_reassignments::alter(&shard, body, version).await)
        }
        RequestKind::ListPartitionReassignments(body) => {
            out.encode(&partition_reassignments::list(&shard, body))
        }
        RequestKind::DescribeQuorum(body) => {
            out.encode(&describe_quorum::handle(&shard, body, version))
        }
        RequestKind::AddRaftVoter(body) => out.encode(&raft_voters::add(&shard, body).await),
        RequestKind::RemoveRaftVoter(body) => out.encode(&raft_voters::remove(&shard, body).await),
        RequestKind::DescribeUserScramCredentials(body) => {
            out.encode(&scram_credentials::describe(&shard, body))
        }
        RequestKind::AlterUserScramCredentials(body) => {
            out.encode(&scram_credentials::alter(&shard, body).await)
        }
        RequestKind::DescribeLogDirs(body) => {
            out.encode(&describe_log_dirs::handle(&shard, body).await)
        }
        RequestKind::DescribeProducers(body) => {
            let mut response = describe_producers::handle(&shard, body).await;
            if let Some(denied) = denied {
                denied.describe_producers(&mut response);
            }
            out.encode(&response)
        }
        RequestKind::ListConfigResources(body) => {
            out.encode(&list_config_resources::handle(&shard, body, version))
        }
        RequestKind::DescribeTopicPartitions(body) => {
            let mut response = describe_topic_partitions::handle(&shard, body);
            if let (Some(denied), Some(access)) = (denied, access) {
                denied.describe_topic_partitions(access, &mut response);
                for topic in &mut response.topics {
                    let name = topic.name.as_ref().map_or("", |n| n.as_str());
                    topic.topic_authorized_operations = access.operations(
                        topic.topic_authorized_operations,
                        crate::authorizer::resource::TOPIC,
                        name,
                    );
                }
            }
            out.encode(&response)
        }
        RequestKind::InitProducerId(body) => {
            out.encode(&init_producer_id::handle(&shard, body, version).await)
        }
        RequestKind::FindCoordinator(body) => {
            let mut response = find_coordinator::handle(&shard, body, version, listener).await;
            if let Some(denied) = denied {
                denied.find_coordinator(&mut response);
            }
            out.encode(&response)
        }
        RequestKind::JoinGroup(body) => {
            let (client_host, client_id) = member_client(request, peer);
            let client = join_group::Client {
                id: client_id,
                host: client_host,
            };
            out.encode(&join_group::handle(&shard, body, version, client).await)
        }
        RequestKind::ConsumerGroupHeartbeat(body) => {
            let (client_host, client_id) = member_client(request, peer);
            out.encode(&consumer_groups::heartbeat(&shard, body, client_id, client_host).await)
        }
        RequestKind::ShareGroupHeartbeat(body) => {
            let (client_host, client_id) = member_client(request, peer);
            out.encode(&share_groups::heartbeat(&shard, body, client_id, client_host).await)
        }
        RequestKind::ShareFetch(body) => {
            let mut response = share_groups::fetch(&shard, body, origin).await;
            if let Some(denied) = denied {
                denied.share_fetch(&mut response);
            }
            out.encode(&response)
        }
        RequestKind::ShareAcknowledge(body) => {
            let mut response = share_groups::acknowledge(&shard, body, origin).await;
            if let Some(denied) = denied {
                denied.share_acknowledge(&mut response);
            }
            out.encode(&response)
        }
        RequestKind::ConsumerGroupDescribe(body) => {
            let mut response = consumer_groups::describe(&shard, body).await;
            if let (Some(denied), Some(access)) = (denied, access) {
                denied.consumer_group_describe(&mut response);
                described_operations(access, &mut response.groups);
            }
            out.encode(&response)
        }
        RequestKind::SyncGroup(body) => out.encode(&sync_group::handle(&shard, body).await),
        RequestKind::Heartbeat(body) => out.encode(&heartbeat::handle(&shard, body).await),
        RequestKind::LeaveGroup(body) => {
            out.encode(&leave_group::handle(&shard, body, version).await)
        }
        RequestKind::OffsetCommit(body) => {
            out.encode(&offset_commit::handle(&shard, body, version).await)
        }
        RequestKind::OffsetFetch(body) => {
            out.encode(&offset_fetch::handle(&shard, body, version).await)
        }
        RequestKind::OffsetDelete(body) => {
            let mut response = offset_delete::handle(&shard, body).await;
            if let Some(denied) = denied {
                denied.offset_delete(&mut response);
            }
            out.encode(&response)
        }
        RequestKind::DescribeGroups(body) => {
            let mut response = describe_groups::handle(&shard, body, version).await;
            if let (Some(denied), Some(access)) = (denied, access) {
                denied.describe_groups(&mut response);
                access.group_operations(
                    response
                        .groups
                        .iter_mut()
                        .map(|g| (&mut g.authorized_operations, g.group_id.0.as_str())),
                );
            }
            out.encode(&response)
        }
        RequestKind::ListGroups(body) => {
            let mut response = list_groups::handle(&shard, body, version).await;
            if let (Some(denied), Some(access)) = (denied, access) {
                denied.list_groups(access, &mut response);
            }
            out.encode(&response)
        }
        RequestKind::DeleteGroups(body) => {
            let mut response = delete_groups::handle(&shard, body).await;
            if let Some(denied) = denied {
                denied.delete_groups(&mut response);
            }
            out.encode(&response)
        }
        RequestKind::AddPartitionsToTxn(body) => {
            out.encode(&transactions::add_partitions(&shard, body, version).await)
        }
        RequestKind::AddOffsetsToTxn(body) => {
            out.encode(&transactions::add_offsets(&shard, body, version).await)
        }
        RequestKind::EndTxn(body) => {
            out.encode(&transactions::end_txn(&shard, body, version).await)
        }
        RequestKind::DescribeTransactions(body) => {
            let mut response = transactions::describe(&shard, body).await;
            if let Some(denied) = denied {
                denied.describe_transactions(&mut response);
            }
            out.encode(&response)
        }
        RequestKind::ListTransactions(body) => {
            let mut response = transactions::list(&shard, body).await;
            if let (Some(denied), Some(access)) = (denied, access) {
                denied.list_transactions(access, &mut response);
            }
            out.encode(&response)
        }
        RequestKind::TxnOffsetCommit(body) => {
            out.encode(&txn_offset_commit::handle(&shard, body, version).await)
        }
        RequestKind::WriteTxnMarkers(body) => {
            out.encode(&crate::txn::markers::handle(&shard, body).await)
        }
        RequestKind::ShareGroupDescribe(body) => {
            let mut response = share_admin::describe(&shard, body).await;
            if let (Some(denied), Some(access)) = (denied, access) {
                denied.share_group_describe(&mut response);
                described_operations(access, &mut response.groups);
            }
            out.encode(&response)
        }
        RequestKind::DescribeShareGroupOffsets(body) => {
            let mut response = share_admin::describe_offsets(&shard, body).await;
            if let (Some(denied), Some(access)) = (denied, access) {
                denied.describe_share_group_offsets(access, &mut response);
            }
            out.encode(&response)
        }
        RequestKind::AlterShareGroupOffsets(body) => {
            let mut response = share_admin::alter_offsets(&shard, body).await;
            if let Some(denied) = denied {
                denied.alter_share_group_offsets(&mut response);
            }
            out.encode(&response)
        }
        RequestKind::DeleteShareGroupOffsets(body) => {
            let mut response = share_admin::delete_offsets(&shard, body).await;
            if let Some(denied) = denied {
                denied.delete_share_group_offsets(&mut response);
            }
            out.encode(&response)
        }
        RequestKind::ReadShareGroupState(body) => {
            out.encode(&crate::share_state::wire::handle_read(&shard, body).await)
        }
        RequestKind::WriteShareGroupState(body) => {
            out.encode(&crate::share_state::wire::handle_write(&shard, body).await)
        }
        _ => {
            return Err(ConnectionError::UnsupportedApi {
                api_key: request.api_key,
            })
        }
    };
    Ok(Some(encoded?))
}

/// A described group: its id, and the operations the principal may do
/// on it (filled in by [`described_operations`]).
trait DescribedGroup {
    fn operations(&mut self) -> (&mut i32, &str);
}

impl DescribedGroup for kafka_protocol::messages::consumer_group_describe_response::DescribedGroup {
    fn operations(&mut self) -> (&mut i32, &str) {
        (&mut self.authorized_operations, self.group_id.0.as_str())
    }
}

impl DescribedGroup for kafka_protocol::messages::share_group_describe_response::DescribedGroup {
    fn operations(&mut self) -> (&mut i32, &str) {
        (&mut self.authorized_operations, self.group_id.0.as_str())
    }
}

/// Fills each described group's authorized operations for `access`.
fn described_operations(access: &access::Access, groups: &mut [impl DescribedGroup]) {
    access.group_operations(groups.iter_mut().map(DescribedGroup::operations));
}

/// Encodes a handler's response, then counts its error codes: every
/// answered API goes through here.
struct Respond {
    api_key: i16,
    id: i32,
    version: i16,
}

impl Respond {
    fn encode<R>(&self, response: &R) -> Result<Encoded, codec::CodecError>
    where
        R: Encodable + HeaderVersion + ErrorCodes,
    {
        let encoded = codec::encode_response(self.id, self.version, response)?;
        metrics::record_response_errors(self.api_key, self.version, response);
        Ok(encoded.into())
    }

    /// A fetch response: its record sets are sent from the buffers they
    /// were read into, not copied into the frame.
    fn encode_fetch(&self, response: &FetchResponse) -> Result<Encoded, codec::CodecError> {
        let records: Vec<Bytes> = response
            .responses
            .iter()
            .flat_map(|topic| topic.partitions.iter())
            .filter_map(|partition| partition.records.clone())
            .collect();
        let encoded = codec::encode_response_sharing(self.id, self.version, response, &records)?;
        metrics::record_response_errors(self.api_key, self.version, response);
        Ok(encoded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advertised_versions_are_decodable_by_the_codec() {
        for &(key, min, max) in SUPPORTED {
            let valid = key.valid_versions();
            assert!(min <= max, "{key:?}");
            // Produce v0-2 are advertised for old librdkafka but answered
            // without decoding; everything else must decode.
            if key != ApiKey::Produce {
                assert!(
                    valid.min <= min && max <= valid.max,
                    "{key:?} {min}..{max} vs {valid}"
                );
            }
        }
    }
}
