//! What the authorizer lets a request do, checked before its handler runs
//! (and before a group request is forwarded to its coordinator), when
//! `authorizer.class.name` switches the authorizer on.
//!
//! Each API checks what Kafka checks: Produce WRITE on each topic (and on
//! the transactional id), Fetch READ on each topic (a replica's fetch
//! CLUSTER_ACTION), Metadata, ListOffsets and OffsetForLeaderEpoch
//! DESCRIBE on each topic (Metadata lists only the topics the principal
//! may describe, and creates a topic only with CREATE on it or the
//! cluster), CreateTopics CREATE, DeleteTopics DELETE, the group APIs READ
//! (DescribeGroups and OffsetFetch DESCRIBE, DeleteGroups DELETE) on the
//! group, FindCoordinator DESCRIBE on the group or transactional id,
//! InitProducerId WRITE on the transactional id or IDEMPOTENT_WRITE on the
//! cluster (or WRITE on a topic), the transaction APIs WRITE on the
//! transactional id, the ACL and SCRAM APIs ALTER or DESCRIBE on the
//! cluster; the operator APIs: DescribeConfigs and AlterConfigs /
//! IncrementalAlterConfigs DESCRIBE_CONFIGS and ALTER_CONFIGS on the
//! topic, group or cluster (broker resources), CreatePartitions ALTER and
//! DeleteRecords DELETE on the topic, DescribeProducers READ on the topic,
//! DescribeTopicPartitions DESCRIBE on it (all topics: those described),
//! OffsetDelete DELETE on the group and READ on its topics, the share
//! group APIs READ on the group (ShareFetch and ShareAcknowledge also
//! READ on each topic; ShareGroupDescribe and DescribeShareGroupOffsets
//! DESCRIBE on it and on the topics described; AlterShareGroupOffsets
//! READ and DeleteShareGroupOffsets DELETE on it, both READ on the
//! topics), DescribeTransactions DESCRIBE on the transactional id
//! (ListTransactions those described), ElectLeaders,
//! AlterPartitionReassignments and the voter changes ALTER on the
//! cluster, ListPartitionReassignments,
//! DescribeQuorum and DescribeLogDirs DESCRIBE on it, ListConfigResources
//! DESCRIBE_CONFIGS on it, WriteTxnMarkers CLUSTER_ACTION. A resource
//! refused is answered with Kafka's code (TOPIC_AUTHORIZATION_FAILED,
//! GROUP_AUTHORIZATION_FAILED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
//! CLUSTER_AUTHORIZATION_FAILED) beside the answers of those allowed. An
//! API this list does not name is served to super users only: another
//! principal's connection is closed, with a line in the log naming the
//! API.

use std::rc::Rc;
use std::sync::Arc;

use kafka_protocol::messages::BrokerId;
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind, TopicName};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use crate::authorizer::{operation, resource, Authorizer, Session, CLUSTER_NAME};
use crate::errors;
use crate::metadata::MetadataImage;
use crate::shard::Shard;

/// What the authorizer decides about one request (moved once, right
/// away: the request's size is not worth a box).
#[allow(clippy::large_enum_variant)]
pub enum Checked {
    /// Served, with the resources refused (answered with their codes
    /// beside the handler's answer).
    Serve(RequestKind, Denied),
    /// Refused whole: this answer.
    Deny(Box<ResponseKind>),
    /// Refused by closing the connection: why, for the log.
    Close(String),
}

/// Topics (or groups, or coordinator keys) a request named and may not
/// touch: each is answered with `code`.
#[derive(Debug, Default)]
pub struct Denied {
    pub topics: Vec<DeniedTopic>,
    pub groups: Vec<String>,
    /// Topics refused within one group of a request: (group, topic).
    pub group_topics: Vec<(String, DeniedTopic)>,
    pub keys: Vec<(String, i16)>,
    /// Metadata of every topic: keep only those the principal may describe.
    pub filter_topics: bool,
    /// ListGroups: keep only the groups the principal may describe.
    pub filter_groups: bool,
    /// Config resources refused: Kafka's config resource type, name, code.
    pub configs: Vec<(i8, String, i16)>,
    /// ListTransactions: keep only the ids the principal may describe.
    pub filter_transactional_ids: bool,
}

#[derive(Debug)]
pub struct DeniedTopic {
    pub name: String,
    pub id: Uuid,
    pub partitions: Vec<i32>,
}

/// One request's principal and the authorizer with the ACLs it decides by.
pub struct Access {
    authorizer: Arc<Authorizer>,
    session: Rc<Session>,
    image: Rc<MetadataImage>,
}

impl Access {
    /// None when no authorizer is on: everything is allowed.
    pub fn of(shard: &Shard, session: &Rc<Session>) -> Option<Access> {
        let authorizer = shard.config.authorizer.clone()?;
        Some(Access {
            authorizer,
            session: Rc::clone(session),
            image: shard.metadata.image(),
        })
    }

    pub fn allows(&self, op: i8, kind: i8, name: &str) -> bool {
        self.authorizer
            .allows(&self.image.acls, &self.session, op, kind, name)
    }

    fn topic(&self, op: i8, name: &str) -> bool {
        self.allows(op, resource::TOPIC, name)
    }

    /// Keeps the groups `op` is allowed on; the others are denied.
    fn keep_groups(
        &self,
        op: i8,
        groups: &mut Vec<kafka_protocol::messages::GroupId>,
        denied: &mut Denied,
    ) {
        groups.retain(|g| {
            let ok = self.group(op, g);
            if !ok {
                denied.groups.push(g.to_string());
            }
            ok
        });
    }

    fn cluster(&self, op: i8) -> bool {
        self.allows(op, resource::CLUSTER, CLUSTER_NAME)
    }

    fn group(&self, op: i8, name: &str) -> bool {
        self.allows(op, resource::GROUP, name)
    }

    fn transactional_id(&self, name: &str) -> bool {
        self.allows(operation::WRITE, resource::TRANSACTIONAL_ID, name)
    }

    fn is_super_user(&self) -> bool {
        self.authorizer
            .super_users
            .iter()
            .any(|s| s == &self.session.principal)
    }

    /// Metadata's topics allowed DESCRIBE (the others are refused).
    pub fn may_describe_topic(&self, name: &str) -> bool {
        self.topic(operation::DESCRIBE, name)
    }

    /// An authorized-operations field (`supported`, or not requested)
    /// narrowed to what this principal may do on the resource.
    pub fn operations(&self, supported: i32, kind: i8, name: &str) -> i32 {
        super::authorized_operations::restrict(supported, |op| self.allows(op, kind, name))
    }

    /// [`Access::operations`] of each group described: (its field, its id).
    pub fn group_operations<'a>(&self, groups: impl Iterator<Item = (&'a mut i32, &'a str)>) {
        for (operations, group_id) in groups {
            *operations = self.operations(*operations, resource::GROUP, group_id);
        }
    }

    pub fn may_describe_group(&self, name: &str) -> bool {
        self.group(operation::DESCRIBE, name)
    }

    /// Checks `body` (of `api_key` at `version`).
    pub fn check(&self, api_key: ApiKey, body: RequestKind) -> Checked {
        use RequestKind as R;
        let mut denied = Denied::default();
        let body = match body {
            R::ApiVersions(_) | R::SaslHandshake(_) | R::SaslAuthenticate(_) => body,
            R::Produce(mut request) => {
                if let Some(id) = &request.transactional_id {
                    if !self.transactional_id(id) {
                        return Checked::Deny(Box::new(ResponseKind::Produce(produce_refused(
                            &request,
                            errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                        ))));
                    }
                }
                request.topic_data.retain(|t| {
                    let name = self.name_of(&t.name, t.topic_id);
                    let allowed = name
                        .as_deref()
                        .is_some_and(|n| self.topic(operation::WRITE, n));
                    if !allowed {
                        denied.topics.push(DeniedTopic {
                            name: t.name.to_string(),
                            id: t.topic_id,
                            partitions: t.partition_data.iter().map(|p| p.index).collect(),
                        });
                    }
                    allowed
                });
                R::Produce(request)
            }
            _ => return self.check_more(api_key, body, denied),
        };
        Checked::Serve(body, denied)
    }

    fn check_more(&self, api_key: ApiKey, body: RequestKind, mut denied: Denied) -> Checked {
        use RequestKind as R;
        let body = match body {
            R::Fetch(mut request) => {
                let replica = request.replica_id.0.max(request.replica_state.replica_id.0);
                if replica >= 0 {
                    if !self.cluster(operation::CLUSTER_ACTION) {
                        return Checked::Deny(Box::new(ResponseKind::Fetch(
                            kafka_protocol::messages::FetchResponse::default()
                                .with_error_code(errors::CLUSTER_AUTHORIZATION_FAILED),
                        )));
                    }
                } else {
                    request.topics.retain(|t| {
                        let name = self.name_of(&t.topic, t.topic_id);
                        let allowed = name
                            .as_deref()
                            .is_some_and(|n| self.topic(operation::READ, n));
                        if !allowed {
                            denied.topics.push(DeniedTopic {
                                name: t.topic.to_string(),
                                id: t.topic_id,
                                partitions: t.partitions.iter().map(|p| p.partition).collect(),
                            });
                        }
                        allowed
                    });
                }
                R::Fetch(request)
            }
            R::Metadata(mut request) => {
                match &mut request.topics {
                    None => denied.filter_topics = true,
                    Some(topics) => {
                        topics.retain(|t| {
                            let name = t
                                .name
                                .as_ref()
                                .map(|n| n.to_string())
                                .or_else(|| self.name_of(&TopicName::default(), t.topic_id));
                            let allowed = name
                                .as_deref()
                                .is_some_and(|n| self.topic(operation::DESCRIBE, n));
                            if !allowed {
                                denied.topics.push(DeniedTopic {
                                    name: name.unwrap_or_default(),
                                    id: t.topic_id,
                                    partitions: Vec::new(),
                                });
                            }
                            allowed
                        });
                        let may_create = |t: &kafka_protocol::messages::metadata_request::MetadataRequestTopic| {
                            self.cluster(operation::CREATE)
                                || t.name
                                    .as_ref()
                                    .is_some_and(|n| self.topic(operation::CREATE, n))
                        };
                        if !topics.iter().all(may_create) {
                            request.allow_auto_topic_creation = false;
                        }
                    }
                }
                R::Metadata(request)
            }
            R::ListOffsets(mut request) => {
                request.topics.retain(|t| {
                    let allowed = self.topic(operation::DESCRIBE, &t.name);
                    if !allowed {
                        denied.topics.push(DeniedTopic {
                            name: t.name.to_string(),
                            id: Default::default(),
                            partitions: t.partitions.iter().map(|p| p.partition_index).collect(),
                        });
                    }
                    allowed
                });
                R::ListOffsets(request)
            }
            R::OffsetForLeaderEpoch(mut request) => {
                if request.replica_id.0 >= 0 && !self.cluster(operation::CLUSTER_ACTION) {
                    return Checked::Close(
                        "OffsetForLeaderEpoch of a replica without CLUSTER_ACTION".to_string(),
                    );
                }
                request.topics.retain(|t| {
                    let allowed = self.topic(operation::DESCRIBE, &t.topic);
                    if !allowed {
                        denied.topics.push(DeniedTopic {
                            name: t.topic.to_string(),
                            id: Default::default(),
                            partitions: t.partitions.iter().map(|p| p.partition).collect(),
                        });
                    }
                    allowed
                });
                R::OffsetForLeaderEpoch(request)
            }
            R::CreateTopics(mut request) => {
                let cluster = self.cluster(operation::CREATE);
                request.topics.retain(|t| {
                    let allowed = cluster || self.topic(operation::CREATE, &t.name);
                    if !allowed {
                        denied.topics.push(DeniedTopic {
                            name: t.name.to_string(),
                            id: Default::default(),
                            partitions: Vec::new(),
                        });
                    }
                    allowed
                });
                R::CreateTopics(request)
            }
            R::DeleteTopics(mut request) => {
                request.topic_names.retain(|name| {
                    let allowed = self.topic(operation::DELETE, name);
                    if !allowed {
                        denied.topics.push(DeniedTopic {
                            name: name.to_string(),
                            id: Default::default(),
                            partitions: Vec::new(),
                        });
                    }
                    allowed
                });
                request.topics.retain(|t| {
                    let name = self.name_of(&t.name.clone().unwrap_or_default(), t.topic_id);
                    let allowed = name
                        .as_deref()
                        .is_some_and(|n| self.topic(operation::DELETE, n));
                    if !allowed {
                        denied.topics.push(DeniedTopic {
                            name: name.unwrap_or_default(),
                            id: t.topic_id,
                            partitions: Vec::new(),
                        });
                    }
                    allowed
                });
                R::DeleteTopics(request)
            }
            _ => return self.check_groups(api_key, body, denied),
        };
        Checked::Serve(body, denied)
    }

    fn check_groups(&self, api_key: ApiKey, body: RequestKind, mut denied: Denied) -> Checked {
        use kafka_protocol::messages::*;
        use RequestKind as R;
        let group_refused = errors::GROUP_AUTHORIZATION_FAILED;
        let deny = |response: ResponseKind| Checked::Deny(Box::new(response));
        let body = match body {
            R::JoinGroup(ref r) if !self.group(operation::READ, &r.group_id) => {
                return deny(ResponseKind::JoinGroup(
                    JoinGroupResponse::default().with_error_code(group_refused),
                ))
            }
            R::SyncGroup(ref r) if !self.group(operation::READ, &r.group_id) => {
                return deny(ResponseKind::SyncGroup(
                    SyncGroupResponse::default().with_error_code(group_refused),
                ))
            }
            R::Heartbeat(ref r) if !self.group(operation::READ, &r.group_id) => {
                return deny(ResponseKind::Heartbeat(
                    HeartbeatResponse::default().with_error_code(group_refused),
                ))
            }
            R::LeaveGroup(ref r) if !self.group(operation::READ, &r.group_id) => {
                return deny(ResponseKind::LeaveGroup(
                    LeaveGroupResponse::default().with_error_code(group_refused),
                ))
            }
            R::ConsumerGroupHeartbeat(ref r) if !self.group(operation::READ, &r.group_id) => {
                return deny(ResponseKind::ConsumerGroupHeartbeat(
                    ConsumerGroupHeartbeatResponse::default().with_error_code(group_refused),
                ))
            }
            R::ShareGroupHeartbeat(ref r) if !self.group(operation::READ, &r.group_id) => {
                return deny(ResponseKind::ShareGroupHeartbeat(
                    ShareGroupHeartbeatResponse::default().with_error_code(group_refused),
                ))
            }
            R::ShareFetch(ref r)
                if !r
                    .group_id
                    .as_ref()
                    .is_some_and(|g| self.group(operation::READ, g)) =>
            {
                return deny(ResponseKind::ShareFetch(
                    ShareFetchResponse::default().with_error_code(group_refused),
                ))
            }
            R::ShareAcknowledge(ref r)
                if !r
                    .group_id
                    .as_ref()
                    .is_some_and(|g| self.group(operation::READ, g)) =>
            {
                return deny(ResponseKind::ShareAcknowledge(
                    ShareAcknowledgeResponse::default().with_error_code(group_refused),
                ))
            }
            // Records of a share group come only from topics the
            // principal may READ; the others are answered
            // TOPIC_AUTHORIZATION_FAILED and never join its share session.
            R::ShareFetch(mut request) => {
                request.topics.retain(|t| {
                    let partitions = t.partitions.iter().map(|p| p.partition_index).collect();
                    self.share_topic_or_deny(t.topic_id, partitions, &mut denied)
                });
                R::ShareFetch(request)
            }
            R::ShareAcknowledge(mut request) => {
                request.topics.retain(|t| {
                    let partitions = t.partitions.iter().map(|p| p.partition_index).collect();
                    self.share_topic_or_deny(t.topic_id, partitions, &mut denied)
                });
                R::ShareAcknowledge(request)
            }
            R::JoinGroup(_)
            | R::SyncGroup(_)
            | R::Heartbeat(_)
            | R::LeaveGroup(_)
            | R::ConsumerGroupHeartbeat(_)
            | R::ShareGroupHeartbeat(_) => body,
            R::OffsetCommit(ref r) => {
                let group = self.group(operation::READ, &r.group_id);
                let topics_allowed = r
                    .topics
                    .iter()
                    .all(|t| self.topic(operation::READ, &t.name));
                if group && topics_allowed {
                    body
                } else {
                    // Refused whole: the group, or the topics not allowed
                    // (the others are not attempted).
                    let topics = r
                        .topics
                        .iter()
                        .map(|t| {
                            let code = if !group {
                                group_refused
                            } else if self.topic(operation::READ, &t.name) {
                                errors::OPERATION_NOT_ATTEMPTED
                            } else {
                                errors::TOPIC_AUTHORIZATION_FAILED
                            };
                            offset_commit_response::OffsetCommitResponseTopic::default()
                                .with_name(t.name.clone())
                                .with_topic_id(t.topic_id)
                                .with_partitions(
                                    t.partitions
                                        .iter()
                                        .map(|p| {
                                            offset_commit_response::OffsetCommitResponsePartition::default()
                                                .with_partition_index(p.partition_index)
                                                .with_error_code(code)
                                        })
                                        .collect(),
                                )
                        })
                        .collect();
                    return deny(ResponseKind::OffsetCommit(
                        OffsetCommitResponse::default().with_topics(topics),
                    ));
                }
            }
            R::OffsetFetch(ref r) => {
                let mut groups: Vec<&str> = r.groups.iter().map(|g| g.group_id.as_str()).collect();
                if !r.group_id.is_empty() {
                    groups.push(&r.group_id);
                }
                if groups.iter().all(|g| self.group(operation::DESCRIBE, g)) {
                    body
                } else {
                    let response = OffsetFetchResponse::default()
                        .with_error_code(group_refused)
                        .with_groups(
                            r.groups
                                .iter()
                                .map(|g| {
                                    offset_fetch_response::OffsetFetchResponseGroup::default()
                                        .with_group_id(g.group_id.clone())
                                        .with_error_code(group_refused)
                                })
                                .collect(),
                        );
                    return deny(ResponseKind::OffsetFetch(response));
                }
            }
            R::FindCoordinator(mut request) => {
                let key_type = request.key_type;
                let allowed = |key: &str| match key_type {
                    0 => self.group(operation::DESCRIBE, key),
                    1 => self.allows(operation::DESCRIBE, resource::TRANSACTIONAL_ID, key),
                    // A share coordinator: asked by brokers only.
                    2 => self.cluster(operation::CLUSTER_ACTION),
                    _ => true,
                };
                let code = match key_type {
                    1 => errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    2 => errors::CLUSTER_AUTHORIZATION_FAILED,
                    _ => group_refused,
                };
                if !request.key.is_empty() && !allowed(&request.key) {
                    return deny(ResponseKind::FindCoordinator(
                        FindCoordinatorResponse::default()
                            .with_error_code(code)
                            .with_error_message(Some(refusal_text(code)))
                            .with_node_id(BrokerId(-1))
                            .with_port(-1),
                    ));
                }
                request.coordinator_keys.retain(|key| {
                    let ok = allowed(key);
                    if !ok {
                        denied.keys.push((key.to_string(), code));
                    }
                    ok
                });
                R::FindCoordinator(request)
            }
            R::DescribeGroups(mut request) => {
                self.keep_groups(operation::DESCRIBE, &mut request.groups, &mut denied);
                R::DescribeGroups(request)
            }
            R::ConsumerGroupDescribe(mut request) => {
                self.keep_groups(operation::DESCRIBE, &mut request.group_ids, &mut denied);
                R::ConsumerGroupDescribe(request)
            }
            R::ShareGroupDescribe(mut request) => {
                self.keep_groups(operation::DESCRIBE, &mut request.group_ids, &mut denied);
                R::ShareGroupDescribe(request)
            }
            R::ListGroups(request) => {
                denied.filter_groups = !self.cluster(operation::DESCRIBE);
                R::ListGroups(request)
            }
            R::DeleteGroups(mut request) => {
                self.keep_groups(operation::DELETE, &mut request.groups_names, &mut denied);
                R::DeleteGroups(request)
            }
            _ => return self.check_transactions_and_admin(api_key, body, denied),
        };
        Checked::Serve(body, denied)
    }

    fn check_transactions_and_admin(
        &self,
        api_key: ApiKey,
        body: RequestKind,
        denied: Denied,
    ) -> Checked {
        use kafka_protocol::messages::*;
        use RequestKind as R;
        let txn_refused = errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
        let cluster_refused = errors::CLUSTER_AUTHORIZATION_FAILED;
        let deny = |response: ResponseKind| Checked::Deny(Box::new(response));
        match &body {
            R::InitProducerId(r) => {
                let allowed = match &r.transactional_id {
                    Some(id) => self.transactional_id(id),
                    None => {
                        self.cluster(operation::IDEMPOTENT_WRITE)
                            || self
                                .image
                                .topics
                                .keys()
                                .any(|t| self.topic(operation::WRITE, t))
                    }
                };
                if !allowed {
                    let code = if r.transactional_id.is_some() {
                        txn_refused
                    } else {
                        cluster_refused
                    };
                    return deny(ResponseKind::InitProducerId(
                        InitProducerIdResponse::default()
                            .with_error_code(code)
                            .with_producer_id(ProducerId(-1))
                            .with_producer_epoch(-1),
                    ));
                }
            }
            R::AddOffsetsToTxn(r) => {
                if !self.transactional_id(&r.transactional_id) {
                    return deny(ResponseKind::AddOffsetsToTxn(
                        AddOffsetsToTxnResponse::default().with_error_code(txn_refused),
                    ));
                }
                if !self.group(operation::READ, &r.group_id) {
                    return deny(ResponseKind::AddOffsetsToTxn(
                        AddOffsetsToTxnResponse::default()
                            .with_error_code(errors::GROUP_AUTHORIZATION_FAILED),
                    ));
                }
            }
            R::EndTxn(r) => {
                if !self.transactional_id(&r.transactional_id) {
                    return deny(ResponseKind::EndTxn(
                        EndTxnResponse::default().with_error_code(txn_refused),
                    ));
                }
            }
            R::AddPartitionsToTxn(r) if !r.v3_and_below_transactional_id.is_empty() => {
                let id_ok = self.transactional_id(&r.v3_and_below_transactional_id);
                let topics_ok = r
                    .v3_and_below_topics
                    .iter()
                    .all(|t| self.topic(operation::WRITE, &t.name));
                if !id_ok || !topics_ok {
                    let results = r
                        .v3_and_below_topics
                        .iter()
                        .map(|t| {
                            let code = if !id_ok {
                                txn_refused
                            } else if self.topic(operation::WRITE, &t.name) {
                                errors::OPERATION_NOT_ATTEMPTED
                            } else {
                                errors::TOPIC_AUTHORIZATION_FAILED
                            };
                            add_partitions_to_txn_response::AddPartitionsToTxnTopicResult::default()
                                .with_name(t.name.clone())
                                .with_results_by_partition(
                                    t.partitions
                                        .iter()
                                        .map(|p| {
                                            add_partitions_to_txn_response::AddPartitionsToTxnPartitionResult::default()
                                                .with_partition_index(*p)
                                                .with_partition_error_code(code)
                                        })
                                        .collect(),
                                )
                        })
                        .collect();
                    return deny(ResponseKind::AddPartitionsToTxn(
                        AddPartitionsToTxnResponse::default()
                            .with_results_by_topic_v3_and_below(results),
                    ));
                }
            }
            R::TxnOffsetCommit(r) => {
                let code = if !self.transactional_id(&r.transactional_id) {
                    Some(txn_refused)
                } else if !self.group(operation::READ, &r.group_id) {
                    Some(errors::GROUP_AUTHORIZATION_FAILED)
                } else if !r
                    .topics
                    .iter()
                    .all(|t| self.topic(operation::READ, &t.name))
                {
                    Some(errors::TOPIC_AUTHORIZATION_FAILED)
                } else {
                    None
                };
                if let Some(code) = code {
                    let topics = r
                        .topics
                        .iter()
                        .map(|t| {
                            txn_offset_commit_response::TxnOffsetCommitResponseTopic::default()
                                .with_name(t.name.clone())
                                .with_partitions(
                                    t.partitions
                                        .iter()
                                        .map(|p| {
                                            txn_offset_commit_response::TxnOffsetCommitResponsePartition::default()
                                                .with_partition_index(p.partition_index)
                                                .with_error_code(code)
                                        })
                                        .collect(),
                                )
                        })
                        .collect();
                    return deny(ResponseKind::TxnOffsetCommit(
                        TxnOffsetCommitResponse::default().with_topics(topics),
                    ));
                }
            }
            R::CreateAcls(r) => {
                if !self.cluster(operation::ALTER) {
                    let results = r
                        .creations
                        .iter()
                        .map(|_| {
                            create_acls_response::AclCreationResult::default()
                                .with_error_code(cluster_refused)
                        })
                        .collect();
                    return deny(ResponseKind::CreateAcls(
                        CreateAclsResponse::default().with_results(results),
                    ));
                }
            }
            R::DeleteAcls(r) => {
                if !self.cluster(operation::ALTER) {
                    let results = r
                        .filters
                        .iter()
                        .map(|_| {
                            delete_acls_response::DeleteAclsFilterResult::default()
                                .with_error_code(cluster_refused)
                        })
                        .collect();
                    return deny(ResponseKind::DeleteAcls(
                        DeleteAclsResponse::default().with_filter_results(results),
                    ));
                }
            }
            R::DescribeAcls(_) => {
                if !self.cluster(operation::DESCRIBE) {
                    return deny(ResponseKind::DescribeAcls(
                        DescribeAclsResponse::default().with_error_code(cluster_refused),
                    ));
                }
            }
            R::AlterUserScramCredentials(r) => {
                if !self.cluster(operation::ALTER) {
                    let mut users: Vec<StrBytes> = r
                        .deletions
                        .iter()
                        .map(|d| d.name.clone())
                        .chain(r.upsertions.iter().map(|u| u.name.clone()))
                        .collect();
                    users.dedup();
                    let results = users
                        .into_iter()
                        .map(|user| {
                            alter_user_scram_credentials_response::AlterUserScramCredentialsResult::default()
                                .with_user(user)
                                .with_error_code(cluster_refused)
                        })
                        .collect();
                    return deny(ResponseKind::AlterUserScramCredentials(
                        AlterUserScramCredentialsResponse::default().with_results(results),
                    ));
                }
            }
            R::DescribeUserScramCredentials(_) => {
                if !self.cluster(operation::DESCRIBE) {
                    return deny(ResponseKind::DescribeUserScramCredentials(
                        DescribeUserScramCredentialsResponse::default()
                            .with_error_code(cluster_refused),
                    ));
                }
            }
            R::DescribeCluster(_) => {}
            _ => return self.check_operator_apis(api_key, body, denied),
        }
        Checked::Serve(body, denied)
    }

    /// The operator APIs: configs, partitions, records, elections,
    /// reassignments, the quorum, log dirs, producers and transactions
    /// listings, and the markers between brokers, each as Kafka checks it.
    fn check_operator_apis(
        &self,
        api_key: ApiKey,
        body: RequestKind,
        mut denied: Denied,
    ) -> Checked {
        use kafka_protocol::messages::*;
        use RequestKind as R;
        let cluster_refused = errors::CLUSTER_AUTHORIZATION_FAILED;
        let deny = |response: ResponseKind| Checked::Deny(Box::new(response));
        let message = || Some(refusal_text(cluster_refused));
        if let Some(op) = cluster_operation(&body) {
            if !self.cluster(op) {
                return deny(cluster_refusal(&body));
            }
            return Checked::Serve(body, denied);
        }
        let body = match body {
            R::DescribeConfigs(mut request) => {
                request.resources.retain(|r| {
                    self.config_resource(
                        operation::DESCRIBE_CONFIGS,
                        r.resource_type,
                        &r.resource_name,
                        &mut denied,
                    )
                });
                R::DescribeConfigs(request)
            }
            R::AlterConfigs(mut request) => {
                request.resources.retain(|r| {
                    self.config_resource(
                        operation::ALTER_CONFIGS,
                        r.resource_type,
                        &r.resource_name,
                        &mut denied,
                    )
                });
                R::AlterConfigs(request)
            }
            R::IncrementalAlterConfigs(mut request) => {
                request.resources.retain(|r| {
                    self.config_resource(
                        operation::ALTER_CONFIGS,
                        r.resource_type,
                        &r.resource_name,
                        &mut denied,
                    )
                });
                R::IncrementalAlterConfigs(request)
            }
            R::CreatePartitions(mut request) => {
                request.topics.retain(|t| {
                    self.topic_or_deny(operation::ALTER, &t.name, Vec::new(), &mut denied)
                });
                R::CreatePartitions(request)
            }
            R::DeleteRecords(mut request) => {
                request.topics.retain(|t| {
                    let partitions = t.partitions.iter().map(|p| p.partition_index).collect();
                    self.topic_or_deny(operation::DELETE, &t.name, partitions, &mut denied)
                });
                R::DeleteRecords(request)
            }
            R::DescribeProducers(mut request) => {
                request.topics.retain(|t| {
                    self.topic_or_deny(
                        operation::READ,
                        &t.name,
                        t.partition_indexes.clone(),
                        &mut denied,
                    )
                });
                R::DescribeProducers(request)
            }
            // Kafka's checks: DESCRIBE on the group and on each topic to
            // describe a share group's offsets, READ on the group (DELETE
            // to delete them) and READ on each topic to change them.
            R::DescribeShareGroupOffsets(mut request) => {
                request.groups.retain_mut(|g| {
                    if !self.group(operation::DESCRIBE, &g.group_id) {
                        denied.groups.push(g.group_id.to_string());
                        return false;
                    }
                    match g.topics.as_mut() {
                        // Every topic with a state: those the principal
                        // may not describe are left out of the answer.
                        None => denied.filter_topics = true,
                        Some(topics) => topics.retain(|t| {
                            let allowed = self.topic(operation::DESCRIBE, &t.topic_name);
                            if !allowed {
                                denied.group_topics.push((
                                    g.group_id.to_string(),
                                    DeniedTopic {
                                        name: t.topic_name.to_string(),
                                        id: Default::default(),
                                        partitions: t.partitions.clone(),
                                    },
                                ));
                            }
                            allowed
                        }),
                    }
                    true
                });
                R::DescribeShareGroupOffsets(request)
            }
            R::AlterShareGroupOffsets(mut request) => {
                if !self.group(operation::READ, &request.group_id) {
                    return deny(ResponseKind::AlterShareGroupOffsets(
                        AlterShareGroupOffsetsResponse::default()
                            .with_error_code(errors::GROUP_AUTHORIZATION_FAILED)
                            .with_error_message(Some(refusal_text(
                                errors::GROUP_AUTHORIZATION_FAILED,
                            ))),
                    ));
                }
                request.topics.retain(|t| {
                    let partitions = t.partitions.iter().map(|p| p.partition_index).collect();
                    self.topic_or_deny(operation::READ, &t.topic_name, partitions, &mut denied)
                });
                R::AlterShareGroupOffsets(request)
            }
            R::DeleteShareGroupOffsets(mut request) => {
                if !self.group(operation::DELETE, &request.group_id) {
                    return deny(ResponseKind::DeleteShareGroupOffsets(
                        DeleteShareGroupOffsetsResponse::default()
                            .with_error_code(errors::GROUP_AUTHORIZATION_FAILED)
                            .with_error_message(Some(refusal_text(
                                errors::GROUP_AUTHORIZATION_FAILED,
                            ))),
                    ));
                }
                request.topics.retain(|t| {
                    self.topic_or_deny(operation::READ, &t.topic_name, Vec::new(), &mut denied)
                });
                R::DeleteShareGroupOffsets(request)
            }
            R::OffsetDelete(mut request) => {
                if !self.group(operation::DELETE, &request.group_id) {
                    return deny(ResponseKind::OffsetDelete(
                        OffsetDeleteResponse::default()
                            .with_error_code(errors::GROUP_AUTHORIZATION_FAILED),
                    ));
                }
                request.topics.retain(|t| {
                    let partitions = t.partitions.iter().map(|p| p.partition_index).collect();
                    self.topic_or_deny(operation::READ, &t.name, partitions, &mut denied)
                });
                R::OffsetDelete(request)
            }
            R::DescribeTopicPartitions(mut request) => {
                if request.topics.is_empty() {
                    denied.filter_topics = true;
                } else {
                    request.topics.retain(|t| {
                        let allowed = self.topic(operation::DESCRIBE, &t.name);
                        if !allowed {
                            denied.topics.push(DeniedTopic {
                                name: t.name.to_string(),
                                id: Default::default(),
                                partitions: Vec::new(),
                            });
                        }
                        allowed
                    });
                }
                R::DescribeTopicPartitions(request)
            }
            R::DescribeTransactions(mut request) => {
                request.transactional_ids.retain(|id| {
                    let allowed = self.allows(operation::DESCRIBE, resource::TRANSACTIONAL_ID, id);
                    if !allowed {
                        denied.keys.push((
                            id.to_string(),
                            errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                        ));
                    }
                    allowed
                });
                R::DescribeTransactions(request)
            }
            R::ListTransactions(request) => {
                denied.filter_transactional_ids = true;
                R::ListTransactions(request)
            }
            R::ElectLeaders(request) => {
                if !self.cluster(operation::ALTER) {
                    let results = request
                        .topic_partitions
                        .iter()
                        .flatten()
                        .map(|t| {
                            elect_leaders_response::ReplicaElectionResult::default()
                                .with_topic(t.topic.clone())
                                .with_partition_result(
                                    t.partitions
                                        .iter()
                                        .map(|&p| {
                                            elect_leaders_response::PartitionResult::default()
                                                .with_partition_id(p)
                                                .with_error_code(cluster_refused)
                                                .with_error_message(message())
                                        })
                                        .collect(),
                                )
                        })
                        .collect();
                    return deny(ResponseKind::ElectLeaders(
                        ElectLeadersResponse::default()
                            .with_error_code(cluster_refused)
                            .with_replica_election_results(results),
                    ));
                }
                R::ElectLeaders(request)
            }
            R::WriteTxnMarkers(request) => {
                if !self.cluster(operation::CLUSTER_ACTION) {
                    let markers = request
                        .markers
                        .iter()
                        .map(|m| {
                            write_txn_markers_response::WritableTxnMarkerResult::default()
                                .with_producer_id(m.producer_id)
                                .with_topics(
                                    m.topics
                                        .iter()
                                        .map(|t| {
                                            write_txn_markers_response::WritableTxnMarkerTopicResult::default()
                                                .with_name(t.name.clone())
                                                .with_partitions(
                                                    t.partition_indexes
                                                        .iter()
                                                        .map(|&p| {
                                                            write_txn_markers_response::WritableTxnMarkerPartitionResult::default()
                                                                .with_partition_index(p)
                                                                .with_error_code(cluster_refused)
                                                        })
                                                        .collect(),
                                                )
                                        })
                                        .collect(),
                                )
                        })
                        .collect();
                    return deny(ResponseKind::WriteTxnMarkers(
                        WriteTxnMarkersResponse::default().with_markers(markers),
                    ));
                }
                R::WriteTxnMarkers(request)
            }
            other => {
                if !self.is_super_user() {
                    return Checked::Close(format!(
                        "{api_key:?} by {} refused: with the authorizer on, only super users \
                         may call it",
                        self.session.principal
                    ));
                }
                other
            }
        };
        Checked::Serve(body, denied)
    }

    /// Whether a config resource (Kafka's config resource types: topic,
    /// broker, broker logger, client metrics, group) allows `op`; a refused
    /// one is noted with its code.
    fn config_resource(&self, op: i8, resource_type: i8, name: &str, denied: &mut Denied) -> bool {
        const TOPIC: i8 = 2;
        const GROUP: i8 = 32;
        let (allowed, code) = match resource_type {
            TOPIC => (self.topic(op, name), errors::TOPIC_AUTHORIZATION_FAILED),
            GROUP => (self.group(op, name), errors::GROUP_AUTHORIZATION_FAILED),
            _ => (self.cluster(op), errors::CLUSTER_AUTHORIZATION_FAILED),
        };
        if !allowed {
            denied.configs.push((resource_type, name.to_string(), code));
        }
        allowed
    }

    /// Whether `op` on topic `name` is allowed; a refused one is noted with
    /// its partitions.
    fn topic_or_deny(
        &self,
        op: i8,
        name: &TopicName,
        partitions: Vec<i32>,
        denied: &mut Denied,
    ) -> bool {
        let allowed = self.topic(op, name);
        if !allowed {
            denied.topics.push(DeniedTopic {
                name: name.to_string(),
                id: Default::default(),
                partitions,
            });
        }
        allowed
    }

    /// Whether the topic `id` names may be READ; a refused one is noted
    /// with its partitions (an unknown id is left to the handler, which
    /// answers UNKNOWN_TOPIC_ID).
    fn share_topic_or_deny(&self, id: Uuid, partitions: Vec<i32>, denied: &mut Denied) -> bool {
        let Some(name) = self.name_of(&TopicName::default(), id) else {
            return true;
        };
        let allowed = self.topic(operation::READ, &name);
        if !allowed {
            denied.topics.push(DeniedTopic {
                name,
                id,
                partitions,
            });
        }
        allowed
    }

    /// A topic's name, from its name or its id (newer versions send ids).
    fn name_of(&self, name: &TopicName, id: Uuid) -> Option<String> {
        if !name.is_empty() {
            return Some(name.to_string());
        }
        super::metadata::topic_by_id(&self.image, id).map(|t| t.name.clone())
    }
}

/// The cluster operation an API that acts on the cluster alone needs:
/// ALTER to change reassignments or voters, DESCRIBE to list
/// reassignments, the quorum or log dirs, DESCRIBE_CONFIGS to list config
/// resources.
fn cluster_operation(body: &RequestKind) -> Option<i8> {
    use RequestKind as R;
    match body {
        R::AlterPartitionReassignments(_) | R::AddRaftVoter(_) | R::RemoveRaftVoter(_) => {
            Some(operation::ALTER)
        }
        R::ListPartitionReassignments(_) | R::DescribeQuorum(_) | R::DescribeLogDirs(_) => {
            Some(operation::DESCRIBE)
        }
        R::ListConfigResources(_) => Some(operation::DESCRIBE_CONFIGS),
        _ => None,
    }
}

/// CLUSTER_AUTHORIZATION_FAILED in the answer to one of the APIs of
/// [`cluster_operation`].
fn cluster_refusal(body: &RequestKind) -> ResponseKind {
    use kafka_protocol::messages::*;
    use RequestKind as R;
    let code = errors::CLUSTER_AUTHORIZATION_FAILED;
    let text = || Some(refusal_text(code));
    match body {
        R::AlterPartitionReassignments(_) => ResponseKind::AlterPartitionReassignments(
            AlterPartitionReassignmentsResponse::default()
                .with_error_code(code)
                .with_error_message(text()),
        ),
        R::ListPartitionReassignments(_) => ResponseKind::ListPartitionReassignments(
            ListPartitionReassignmentsResponse::default()
                .with_error_code(code)
                .with_error_message(text()),
        ),
        R::DescribeQuorum(_) => ResponseKind::DescribeQuorum(
            DescribeQuorumResponse::default()
                .with_error_code(code)
                .with_error_message(text()),
        ),
        R::AddRaftVoter(_) => ResponseKind::AddRaftVoter(
            AddRaftVoterResponse::default()
                .with_error_code(code)
                .with_error_message(text()),
        ),
        R::RemoveRaftVoter(_) => ResponseKind::RemoveRaftVoter(
            RemoveRaftVoterResponse::default()
                .with_error_code(code)
                .with_error_message(text()),
        ),
        R::DescribeLogDirs(_) => {
            ResponseKind::DescribeLogDirs(DescribeLogDirsResponse::default().with_error_code(code))
        }
        _ => ResponseKind::ListConfigResources(
            ListConfigResourcesResponse::default().with_error_code(code),
        ),
    }
}

/// The text beside a refusal's code (Kafka's exception message).
fn refusal_text(code: i16) -> StrBytes {
    StrBytes::from_static_str(match code {
        errors::GROUP_AUTHORIZATION_FAILED => "Group authorization failed.",
        errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED => "Transactional Id authorization failed.",
        errors::CLUSTER_AUTHORIZATION_FAILED => "Cluster authorization failed.",
        _ => "Topic authorization failed.",
    })
}

fn produce_refused(
    request: &kafka_protocol::messages::ProduceRequest,
    code: i16,
) -> kafka_protocol::messages::ProduceResponse {
    use kafka_protocol::messages::produce_response::*;
    kafka_protocol::messages::ProduceResponse::default().with_responses(
        request
            .topic_data
            .iter()
            .map(|t| {
                TopicProduceResponse::default()
                    .with_name(t.name.clone())
                    .with_topic_id(t.topic_id)
                    .with_partition_responses(
                        t.partition_data
                            .iter()
                            .map(|p| {
                                PartitionProduceResponse::default()
                                    .with_index(p.index)
                                    .with_error_code(code)
                                    .with_base_offset(-1)
                            })
                            .collect(),
                    )
            })
            .collect(),
    )
}

/// The answers of the refused resources, added beside the handler's.
/// Adds the groups a describe request was denied to its response, each
/// GROUP_AUTHORIZATION_FAILED (every describe response lists groups of
/// its own type with these two fields).
macro_rules! refuse_groups {
    ($denied:expr, $response:expr, $group:ty) => {
        for group in &$denied.groups {
            $response.groups.push(
                <$group>::default()
                    .with_group_id(kafka_protocol::messages::GroupId(StrBytes::from_string(
                        group.clone(),
                    )))
                    .with_error_code(errors::GROUP_AUTHORIZATION_FAILED),
            );
        }
    };
}

/// The partitions of a refused topic `$topic` as `$partition`s, each
/// TOPIC_AUTHORIZATION_FAILED with Kafka's message (an iterator).
macro_rules! refused_partitions {
    ($partition:ty, $topic:expr) => {
        $topic.partitions.iter().map(|&p| {
            <$partition>::default()
                .with_partition_index(p)
                .with_error_code(Denied::topic_code())
                .with_error_message(Some(refusal_text(Denied::topic_code())))
        })
    };
}

impl Denied {
    pub fn is_empty(&self) -> bool {
        self.topics.is_empty()
            && self.groups.is_empty()
            && self.group_topics.is_empty()
            && self.keys.is_empty()
            && !self.filter_topics
            && !self.filter_groups
            && self.configs.is_empty()
            && !self.filter_transactional_ids
    }

    /// Counts each refused topic, group and coordinator key.
    pub fn count(&self) {
        for _ in self
            .topics
            .iter()
            .chain(self.group_topics.iter().map(|(_, t)| t))
        {
            crate::metrics::record_denial(resource::TOPIC);
        }
        for _ in &self.groups {
            crate::metrics::record_denial(resource::GROUP);
        }
        for (_, _, code) in &self.configs {
            crate::metrics::record_denial(match *code {
                errors::TOPIC_AUTHORIZATION_FAILED => resource::TOPIC,
                errors::GROUP_AUTHORIZATION_FAILED => resource::GROUP,
                _ => resource::CLUSTER,
            });
        }
        for (_, code) in &self.keys {
            crate::metrics::record_denial(
                if *code == errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED {
                    resource::TRANSACTIONAL_ID
                } else {
                    resource::GROUP
                },
            );
        }
    }

    fn topic_code() -> i16 {
        errors::TOPIC_AUTHORIZATION_FAILED
    }

    pub fn produce(&self, response: &mut kafka_protocol::messages::ProduceResponse) {
        use kafka_protocol::messages::produce_response::*;
        for t in &self.topics {
            response.responses.push(
                TopicProduceResponse::default()
                    .with_name(TopicName(StrBytes::from_string(t.name.clone())))
                    .with_topic_id(t.id)
                    .with_partition_responses(
                        t.partitions
                            .iter()
                            .map(|&p| {
                                PartitionProduceResponse::default()
                                    .with_index(p)
                                    .with_error_code(Self::topic_code())
                                    .with_base_offset(-1)
                            })
                            .collect(),
                    ),
            );
        }
    }

    pub fn fetch(&self, response: &mut kafka_protocol::messages::FetchResponse) {
        use kafka_protocol::messages::fetch_response::*;
        for t in &self.topics {
            response.responses.push(
                FetchableTopicResponse::default()
                    .with_topic(TopicName(StrBytes::from_string(t.name.clone())))
                    .with_topic_id(t.id)
                    .with_partitions(
                        t.partitions
                            .iter()
                            .map(|&p| {
                                PartitionData::default()
                                    .with_partition_index(p)
                                    .with_error_code(Self::topic_code())
                                    .with_high_watermark(-1)
                                    .with_last_stable_offset(-1)
                                    .with_log_start_offset(-1)
                            })
                            .collect(),
                    ),
            );
        }
    }

    pub fn metadata(
        &self,
        access: &Access,
        response: &mut kafka_protocol::messages::MetadataResponse,
    ) {
        use kafka_protocol::messages::metadata_response::*;
        if self.filter_topics {
            response.topics.retain(|t| {
                t.name
                    .as_ref()
                    .is_some_and(|n| access.may_describe_topic(n))
            });
        }
        for t in &self.topics {
            response.topics.push(
                MetadataResponseTopic::default()
                    .with_error_code(Self::topic_code())
                    .with_name(
                        (!t.name.is_empty())
                            .then(|| TopicName(StrBytes::from_string(t.name.clone()))),
                    )
                    .with_topic_id(t.id),
            );
        }
    }

    pub fn list_offsets(&self, response: &mut kafka_protocol::messages::ListOffsetsResponse) {
        use kafka_protocol::messages::list_offsets_response::*;
        for t in &self.topics {
            response.topics.push(
                ListOffsetsTopicResponse::default()
                    .with_name(TopicName(StrBytes::from_string(t.name.clone())))
                    .with_partitions(
                        t.partitions
                            .iter()
                            .map(|&p| {
                                ListOffsetsPartitionResponse::default()
                                    .with_partition_index(p)
                                    .with_error_code(Self::topic_code())
                                    .with_offset(-1)
                                    .with_timestamp(-1)
                            })
                            .collect(),
                    ),
            );
        }
    }

    pub fn offset_for_leader_epoch(
        &self,
        response: &mut kafka_protocol::messages::OffsetForLeaderEpochResponse,
    ) {
        use kafka_protocol::messages::offset_for_leader_epoch_response::*;
        for t in &self.topics {
            response.topics.push(
                OffsetForLeaderTopicResult::default()
                    .with_topic(TopicName(StrBytes::from_string(t.name.clone())))
                    .with_partitions(
                        t.partitions
                            .iter()
                            .map(|&p| {
                                EpochEndOffset::default()
                                    .with_partition(p)
                                    .with_error_code(Self::topic_code())
                                    .with_leader_epoch(-1)
                                    .with_end_offset(-1)
                            })
                            .collect(),
                    ),
            );
        }
    }

    pub fn create_topics(&self, response: &mut kafka_protocol::messages::CreateTopicsResponse) {
        use kafka_protocol::messages::create_topics_response::*;
        for t in &self.topics {
            response.topics.push(
                CreatableTopicResult::default()
                    .with_name(TopicName(StrBytes::from_string(t.name.clone())))
                    .with_error_code(Self::topic_code())
                    .with_error_message(Some(StrBytes::from_static_str("Authorization failed.")))
                    .with_num_partitions(-1)
                    .with_replication_factor(-1),
            );
        }
    }

    pub fn delete_topics(&self, response: &mut kafka_protocol::messages::DeleteTopicsResponse) {
        use kafka_protocol::messages::delete_topics_response::*;
        for t in &self.topics {
            response.responses.push(
                DeletableTopicResult::default()
                    .with_name(
                        (!t.name.is_empty())
                            .then(|| TopicName(StrBytes::from_string(t.name.clone()))),
                    )
                    .with_topic_id(t.id)
                    .with_error_code(Self::topic_code()),
            );
        }
    }

    pub fn find_coordinator(
        &self,
        response: &mut kafka_protocol::messages::FindCoordinatorResponse,
    ) {
        use kafka_protocol::messages::find_coordinator_response::*;
        for (key, code) in &self.keys {
            response.coordinators.push(
                Coordinator::default()
                    .with_key(StrBytes::from_string(key.clone()))
                    .with_node_id(BrokerId(-1))
                    .with_port(-1)
                    .with_error_code(*code)
                    .with_error_message(Some(refusal_text(*code))),
            );
        }
    }

    pub fn describe_groups(&self, response: &mut kafka_protocol::messages::DescribeGroupsResponse) {
        refuse_groups!(
            self,
            response,
            kafka_protocol::messages::describe_groups_response::DescribedGroup
        );
    }

    pub fn consumer_group_describe(
        &self,
        response: &mut kafka_protocol::messages::ConsumerGroupDescribeResponse,
    ) {
        refuse_groups!(
            self,
            response,
            kafka_protocol::messages::consumer_group_describe_response::DescribedGroup
        );
    }

    pub fn share_group_describe(
        &self,
        response: &mut kafka_protocol::messages::ShareGroupDescribeResponse,
    ) {
        refuse_groups!(
            self,
            response,
            kafka_protocol::messages::share_group_describe_response::DescribedGroup
        );
    }

    pub fn describe_share_group_offsets(
        &self,
        access: &Access,
        response: &mut kafka_protocol::messages::DescribeShareGroupOffsetsResponse,
    ) {
        use kafka_protocol::messages::describe_share_group_offsets_response::*;
        if self.filter_topics {
            for group in &mut response.groups {
                group
                    .topics
                    .retain(|t| access.may_describe_topic(&t.topic_name));
            }
        }
        for (group_id, t) in &self.group_topics {
            let topic = DescribeShareGroupOffsetsResponseTopic::default()
                .with_topic_name(TopicName(StrBytes::from_string(t.name.clone())))
                .with_partitions(
                    refused_partitions!(DescribeShareGroupOffsetsResponsePartition, t)
                        .map(|p| p.with_start_offset(-1).with_leader_epoch(-1))
                        .collect(),
                );
            if let Some(group) = response
                .groups
                .iter_mut()
                .find(|g| g.group_id.as_str() == group_id)
            {
                group.topics.push(topic);
            }
        }
        for group in &self.groups {
            response.groups.push(
                DescribeShareGroupOffsetsResponseGroup::default()
                    .with_group_id(kafka_protocol::messages::GroupId(StrBytes::from_string(
                        group.clone(),
                    )))
                    .with_error_code(errors::GROUP_AUTHORIZATION_FAILED)
                    .with_error_message(Some(refusal_text(errors::GROUP_AUTHORIZATION_FAILED))),
            );
        }
    }

    pub fn share_fetch(&self, response: &mut kafka_protocol::messages::ShareFetchResponse) {
        use kafka_protocol::messages::share_fetch_response::*;
        for t in &self.topics {
            response.responses.push(
                ShareFetchableTopicResponse::default()
                    .with_topic_id(t.id)
                    .with_partitions(
                        refused_partitions!(PartitionData, t)
                            // Empty, never null: clients cannot parse a
                            // null record set.
                            .map(|p| p.with_records(Some(Default::default())))
                            .collect(),
                    ),
            );
        }
    }

    pub fn share_acknowledge(
        &self,
        response: &mut kafka_protocol::messages::ShareAcknowledgeResponse,
    ) {
        use kafka_protocol::messages::share_acknowledge_response::*;
        for t in &self.topics {
            response.responses.push(
                ShareAcknowledgeTopicResponse::default()
                    .with_topic_id(t.id)
                    .with_partitions(refused_partitions!(PartitionData, t).collect()),
            );
        }
    }

    pub fn alter_share_group_offsets(
        &self,
        response: &mut kafka_protocol::messages::AlterShareGroupOffsetsResponse,
    ) {
        use kafka_protocol::messages::alter_share_group_offsets_response::*;
        for t in &self.topics {
            response.responses.push(
                AlterShareGroupOffsetsResponseTopic::default()
                    .with_topic_name(TopicName(StrBytes::from_string(t.name.clone())))
                    .with_partitions(
                        refused_partitions!(AlterShareGroupOffsetsResponsePartition, t).collect(),
                    ),
            );
        }
    }

    pub fn delete_share_group_offsets(
        &self,
        response: &mut kafka_protocol::messages::DeleteShareGroupOffsetsResponse,
    ) {
        use kafka_protocol::messages::delete_share_group_offsets_response::*;
        for t in &self.topics {
            response.responses.push(
                DeleteShareGroupOffsetsResponseTopic::default()
                    .with_topic_name(TopicName(StrBytes::from_string(t.name.clone())))
                    .with_error_code(Self::topic_code())
                    .with_error_message(Some(refusal_text(Self::topic_code()))),
            );
        }
    }

    pub fn list_groups(
        &self,
        access: &Access,
        response: &mut kafka_protocol::messages::ListGroupsResponse,
    ) {
        if self.filter_groups {
            response
                .groups
                .retain(|g| access.may_describe_group(&g.group_id));
        }
    }

    pub fn describe_configs(
        &self,
        response: &mut kafka_protocol::messages::DescribeConfigsResponse,
    ) {
        use kafka_protocol::messages::describe_configs_response::*;
        for (resource_type, name, code) in &self.configs {
            response.results.push(
                DescribeConfigsResult::default()
                    .with_error_code(*code)
                    .with_error_message(Some(refusal_text(*code)))
                    .with_resource_type(*resource_type)
                    .with_resource_name(StrBytes::from_string(name.clone())),
            );
        }
    }

    pub fn alter_configs(&self, response: &mut kafka_protocol::messages::AlterConfigsResponse) {
        use kafka_protocol::messages::alter_configs_response::*;
        for (resource_type, name, code) in &self.configs {
            response.responses.push(
                AlterConfigsResourceResponse::default()
                    .with_error_code(*code)
                    .with_error_message(Some(refusal_text(*code)))
                    .with_resource_type(*resource_type)
                    .with_resource_name(StrBytes::from_string(name.clone())),
            );
        }
    }

    pub fn incremental_alter_configs(
        &self,
        response: &mut kafka_protocol::messages::IncrementalAlterConfigsResponse,
    ) {
        use kafka_protocol::messages::incremental_alter_configs_response::*;
        for (resource_type, name, code) in &self.configs {
            response.responses.push(
                AlterConfigsResourceResponse::default()
                    .with_error_code(*code)
                    .with_error_message(Some(refusal_text(*code)))
                    .with_resource_type(*resource_type)
                    .with_resource_name(StrBytes::from_string(name.clone())),
            );
        }
    }

    pub fn create_partitions(
        &self,
        response: &mut kafka_protocol::messages::CreatePartitionsResponse,
    ) {
        use kafka_protocol::messages::create_partitions_response::*;
        for t in &self.topics {
            response.results.push(
                CreatePartitionsTopicResult::default()
                    .with_name(TopicName(StrBytes::from_string(t.name.clone())))
                    .with_error_code(Self::topic_code())
                    .with_error_message(Some(refusal_text(Self::topic_code()))),
            );
        }
    }

    pub fn delete_records(&self, response: &mut kafka_protocol::messages::DeleteRecordsResponse) {
        use kafka_protocol::messages::delete_records_response::*;
        for t in &self.topics {
            response.topics.push(
                DeleteRecordsTopicResult::default()
                    .with_name(TopicName(StrBytes::from_string(t.name.clone())))
                    .with_partitions(
                        t.partitions
                            .iter()
                            .map(|&p| {
                                DeleteRecordsPartitionResult::default()
                                    .with_partition_index(p)
                                    .with_low_watermark(-1)
                                    .with_error_code(Self::topic_code())
                            })
                            .collect(),
                    ),
            );
        }
    }

    pub fn describe_producers(
        &self,
        response: &mut kafka_protocol::messages::DescribeProducersResponse,
    ) {
        use kafka_protocol::messages::describe_producers_response::*;
        for t in &self.topics {
            response.topics.push(
                TopicResponse::default()
                    .with_name(TopicName(StrBytes::from_string(t.name.clone())))
                    .with_partitions(
                        t.partitions
                            .iter()
                            .map(|&p| {
                                PartitionResponse::default()
                                    .with_partition_index(p)
                                    .with_error_code(Self::topic_code())
                                    .with_error_message(Some(refusal_text(Self::topic_code())))
                            })
                            .collect(),
                    ),
            );
        }
    }

    pub fn offset_delete(&self, response: &mut kafka_protocol::messages::OffsetDeleteResponse) {
        use kafka_protocol::messages::offset_delete_response::*;
        for t in &self.topics {
            response.topics.push(
                OffsetDeleteResponseTopic::default()
                    .with_name(TopicName(StrBytes::from_string(t.name.clone())))
                    .with_partitions(
                        t.partitions
                            .iter()
                            .map(|&p| {
                                OffsetDeleteResponsePartition::default()
                                    .with_partition_index(p)
                                    .with_error_code(Self::topic_code())
                            })
                            .collect(),
                    ),
            );
        }
    }

    pub fn describe_topic_partitions(
        &self,
        access: &Access,
        response: &mut kafka_protocol::messages::DescribeTopicPartitionsResponse,
    ) {
        use kafka_protocol::messages::describe_topic_partitions_response::*;
        if self.filter_topics {
            response.topics.retain(|t| {
                t.name
                    .as_ref()
                    .is_some_and(|n| access.may_describe_topic(n))
            });
        }
        for t in &self.topics {
            response.topics.push(
                DescribeTopicPartitionsResponseTopic::default()
                    .with_error_code(Self::topic_code())
                    .with_name(Some(TopicName(StrBytes::from_string(t.name.clone())))),
            );
        }
    }

    pub fn describe_transactions(
        &self,
        response: &mut kafka_protocol::messages::DescribeTransactionsResponse,
    ) {
        use kafka_protocol::messages::describe_transactions_response::*;
        for (id, code) in &self.keys {
            response.transaction_states.push(
                TransactionState::default()
                    .with_error_code(*code)
                    .with_transactional_id(kafka_protocol::messages::TransactionalId(
                        StrBytes::from_string(id.clone()),
                    ))
                    .with_producer_id(kafka_protocol::messages::ProducerId(-1))
                    .with_producer_epoch(-1),
            );
        }
    }

    pub fn list_transactions(
        &self,
        access: &Access,
        response: &mut kafka_protocol::messages::ListTransactionsResponse,
    ) {
        if self.filter_transactional_ids {
            response.transaction_states.retain(|t| {
                access.allows(
                    operation::DESCRIBE,
                    resource::TRANSACTIONAL_ID,
                    &t.transactional_id,
                )
            });
        }
    }

    pub fn delete_groups(&self, response: &mut kafka_protocol::messages::DeleteGroupsResponse) {
        use kafka_protocol::messages::delete_groups_response::*;
        for group in &self.groups {
            response.results.push(
                DeletableGroupResult::default()
                    .with_group_id(kafka_protocol::messages::GroupId(StrBytes::from_string(
                        group.clone(),
                    )))
                    .with_error_code(errors::GROUP_AUTHORIZATION_FAILED),
            );
        }
    }
}
