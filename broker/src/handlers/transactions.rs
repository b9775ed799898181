//! The transaction coordinator's APIs (KIP-98): InitProducerId with a
//! transactional id, AddPartitionsToTxn (24, v0–3: the client's form;
//! v4–5: brokers' batched form, whose `verify_only` checks that partitions
//! are in a transaction, see `txn::verify`),
//! AddOffsetsToTxn (25, v0–3), EndTxn (26, v0–3), DescribeTransactions
//! (65, v0) and ListTransactions (66, v0–1). Each runs on the core
//! coordinating its transactional id (`txn::manager`); a planned change
//! is answered once its `__transaction_state` record is on every in-sync
//! replica. Versions that would change the protocol (EndTxn v5's epoch
//! bump under `transaction.version` 2) are not advertised.

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::describe_transactions_response::{TopicData, TransactionState};
use kafka_protocol::messages::list_transactions_response::TransactionState as ListedState;
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse, DescribeTransactionsRequest, DescribeTransactionsResponse,
    EndTxnRequest, EndTxnResponse, InitProducerIdRequest, InitProducerIdResponse,
    ListTransactionsRequest, ListTransactionsResponse, ProducerId, TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use txn::coordinator::{AfterAppend, ListFilter, ProducerIdAndEpoch};
use txn::error::{TxnApi, TxnError};
use txn::limits::PRODUCER_EPOCH_EXHAUSTED;

use crate::group::offsets_partition_for;
use crate::metadata::OFFSETS_TOPIC;
use crate::shard::Shard;
use crate::txn::manager::{self, commit_plan, spawn_markers, with_coordinator};

pub const ADD_PARTITIONS_VERSION_MAX: i16 = 5;
/// From this AddPartitionsToTxn version a request batches transactions
/// (brokers' form, with `verify_only`).
const BATCHED_VERSION_MIN: i16 = 4;
/// Transactions in one batched AddPartitionsToTxn.
const ADD_PARTITIONS_TRANSACTIONS_MAX: usize = 1000;
pub const ADD_OFFSETS_VERSION_MAX: i16 = 3;
pub const END_TXN_VERSION_MAX: i16 = 3;
pub const DESCRIBE_VERSION_MAX: i16 = 0;
pub const LIST_VERSION_MAX: i16 = 1;

/// InitProducerId for a transactional id: the producer id and epoch, or
/// the refusal. A new id's producer id comes from the controller.
pub async fn init_producer_id(
    shard: &Rc<Shard>,
    request: &InitProducerIdRequest,
    version: i16,
) -> InitProducerIdResponse {
    let id = request
        .transactional_id
        .as_ref()
        .map(|id| id.0.to_string())
        .unwrap_or_default();
    let timeout_ms = request.transaction_timeout_ms;
    let expected = (request.producer_id.0 >= 0).then_some(ProducerIdAndEpoch {
        producer_id: request.producer_id.0,
        producer_epoch: request.producer_epoch,
    });
    let key = id.clone();
    let outcome = manager::on_coordinator(shard, &key, move |owner, partition| async move {
        // A producer id is fetched ahead when the coordinator may need one:
        // a new id, or epochs about to run out.
        let needs_id = with_coordinator(&owner, partition, |c| {
            c.metadata(&id)
                .is_none_or(|m| m.producer_epoch >= PRODUCER_EPOCH_EXHAUSTED - 1)
        })?;
        let mut fresh = if needs_id {
            Some(
                crate::handlers::init_producer_id::new_producer_id(&owner)
                    .await
                    .map_err(|code| {
                        tracing::warn!(transactional_id = %id, code, "no producer id for a new transactional id; the producer retries");
                        TxnError::CoordinatorNotAvailable
                    })?,
            )
        } else {
            None
        };
        let now = owner.now_ms();
        let plan = with_coordinator(&owner, partition, |c| {
            c.init_producer_id(&id, timeout_ms, expected, now, &mut || {
                fresh.take().ok_or(TxnError::CoordinatorNotAvailable)
            })
        })??;
        match commit_plan(&owner, partition, plan).await? {
            AfterAppend::ProducerId {
                producer_id,
                producer_epoch,
            } => Ok((producer_id, producer_epoch)),
            AfterAppend::Fenced(markers) => {
                // The open transaction is aborted first; the client retries.
                spawn_markers(&owner, partition, markers);
                Err(TxnError::ConcurrentTransactions)
            }
            _ => Err(TxnError::CoordinatorNotAvailable),
        }
    })
    .await
    .and_then(|inner| inner);
    match outcome {
        Ok((producer_id, epoch)) => InitProducerIdResponse::default()
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(epoch),
        Err(error) => InitProducerIdResponse::default()
            .with_error_code(error.code_for(TxnApi::InitProducerId, version))
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1),
    }
}

/// Runs an "add to the transaction" plan (AddPartitionsToTxn,
/// AddOffsetsToTxn): nothing to write is success at once.
async fn add(
    shard: &Rc<Shard>,
    transactional_id: String,
    plan: impl FnOnce(
            &mut txn::coordinator::Coordinator,
            i64,
        ) -> Result<Option<txn::coordinator::Plan>, TxnError>
        + Send
        + 'static,
) -> Result<(), TxnError> {
    let key = transactional_id.clone();
    manager::on_coordinator(shard, &key, move |owner, partition| async move {
        let now = owner.now_ms();
        let Some(plan) = with_coordinator(&owner, partition, |c| plan(c, now))?? else {
            return Ok(());
        };
        match commit_plan(&owner, partition, plan).await? {
            AfterAppend::Added => Ok(()),
            _ => Err(TxnError::CoordinatorNotAvailable),
        }
    })
    .await
    .and_then(|inner| inner)
}

pub async fn add_partitions(
    shard: &Rc<Shard>,
    request: AddPartitionsToTxnRequest,
    version: i16,
) -> AddPartitionsToTxnResponse {
    if version < BATCHED_VERSION_MIN {
        let producer = ProducerIdAndEpoch {
            producer_id: request.v3_and_below_producer_id.0,
            producer_epoch: request.v3_and_below_producer_epoch,
        };
        let id = request.v3_and_below_transactional_id.0.to_string();
        let results = add_or_verify(
            shard,
            id,
            producer,
            &request.v3_and_below_topics,
            false,
            version,
        )
        .await;
        return AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results);
    }
    // The brokers' batched form: each transaction on its own.
    if request.transactions.len() > ADD_PARTITIONS_TRANSACTIONS_MAX {
        return AddPartitionsToTxnResponse::default()
            .with_error_code(crate::errors::INVALID_REQUEST);
    }
    let mut results = Vec::with_capacity(request.transactions.len());
    for transaction in request.transactions {
        let producer = ProducerIdAndEpoch {
            producer_id: transaction.producer_id.0,
            producer_epoch: transaction.producer_epoch,
        };
        let topic_results = add_or_verify(
            shard,
            transaction.transactional_id.0.to_string(),
            producer,
            &transaction.topics,
            transaction.verify_only,
            version,
        )
        .await;
        results.push(
            AddPartitionsToTxnResult::default()
                .with_transactional_id(transaction.transactional_id)
                .with_topic_results(topic_results),
        );
    }
    AddPartitionsToTxnResponse::default().with_results_by_transaction(results)
}

/// One transaction's partitions added to it, or (`verify_only`, a
/// partition leader asking) checked to be in it; each partition's code.
async fn add_or_verify(
    shard: &Rc<Shard>,
    id: String,
    producer: ProducerIdAndEpoch,
    topics: &[AddPartitionsToTxnTopic],
    verify_only: bool,
    version: i16,
) -> Vec<AddPartitionsToTxnTopicResult> {
    let image = shard.metadata.image();
    let asked = || {
        topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(move |&p| (t.name.0.to_string(), p)))
    };
    // Partitions that do not exist are UNKNOWN_TOPIC_OR_PARTITION and the
    // rest OPERATION_NOT_ATTEMPTED, as Kafka answers.
    let unknown: BTreeSet<(String, i32)> = asked()
        .filter(|(topic, p)| {
            image
                .topics
                .get(topic)
                .is_none_or(|t| !(0..t.partition_cores.len() as i32).contains(p))
        })
        .collect();
    let partitions: BTreeSet<(String, i32)> = asked().collect();
    let mut verified: BTreeMap<(String, i32), Result<(), TxnError>> = BTreeMap::new();
    let outcome = if !unknown.is_empty() {
        Err(TxnError::InvalidRequest)
    } else if verify_only {
        let key = id.clone();
        let checked = manager::on_coordinator(shard, &key, move |owner, partition| async move {
            with_coordinator(&owner, partition, |c| {
                c.verify_partitions(&id, producer, &partitions)
            })
            .and_then(|inner| inner)
        })
        .await
        .and_then(|inner| inner);
        checked.map(|each| verified.extend(each))
    } else {
        add(shard, id.clone(), move |c, now| {
            c.add_partitions(&id, producer, &partitions, now)
        })
        .await
    };
    let code_of = |topic: &str, partition: i32| -> i16 {
        if !unknown.is_empty() {
            return if unknown.contains(&(topic.to_string(), partition)) {
                crate::errors::UNKNOWN_TOPIC_OR_PARTITION
            } else {
                crate::errors::OPERATION_NOT_ATTEMPTED
            };
        }
        let outcome = match (&outcome, verified.get(&(topic.to_string(), partition))) {
            (Err(error), _) => Err(*error),
            (Ok(()), Some(each)) => *each,
            (Ok(()), None) if verify_only => Err(TxnError::TransactionAbortable),
            (Ok(()), None) => Ok(()),
        };
        match outcome {
            Ok(()) => crate::errors::NONE,
            Err(error) => error.code_for(TxnApi::AddPartitionsToTxn, version),
        }
    };
    topics
        .iter()
        .map(|t| {
            AddPartitionsToTxnTopicResult::default()
                .with_name(t.name.clone())
                .with_results_by_partition(
                    t.partitions
                        .iter()
                        .map(|&p| {
                            AddPartitionsToTxnPartitionResult::default()
                                .with_partition_index(p)
                                .with_partition_error_code(code_of(&t.name.0, p))
                        })
                        .collect(),
                )
        })
        .collect()
}

pub async fn add_offsets(
    shard: &Rc<Shard>,
    request: AddOffsetsToTxnRequest,
    version: i16,
) -> AddOffsetsToTxnResponse {
    let id = request.transactional_id.0.to_string();
    let group_id = request.group_id.0.to_string();
    let producer = ProducerIdAndEpoch {
        producer_id: request.producer_id.0,
        producer_epoch: request.producer_epoch,
    };
    // The group's offsets partition joins the transaction (the topic is
    // created if missing, as the group's FindCoordinator would).
    let outcome = match crate::group::manager::coordinator(shard, &group_id).await {
        Err(_) => Err(TxnError::CoordinatorNotAvailable),
        Ok(_) => {
            let count = crate::internal_topic::partition_count(shard, OFFSETS_TOPIC);
            let offsets_partition = offsets_partition_for(&group_id, count);
            let key = id.clone();
            add(shard, key, move |c, now| {
                c.add_offsets(&id, producer, offsets_partition, now)
            })
            .await
        }
    };
    AddOffsetsToTxnResponse::default().with_error_code(match outcome {
        Ok(()) => crate::errors::NONE,
        Err(error) => error.code_for(TxnApi::AddOffsetsToTxn, version),
    })
}

pub async fn end_txn(shard: &Rc<Shard>, request: EndTxnRequest, version: i16) -> EndTxnResponse {
    let id = request.transactional_id.0.to_string();
    let producer = ProducerIdAndEpoch {
        producer_id: request.producer_id.0,
        producer_epoch: request.producer_epoch,
    };
    let commit = request.committed;
    let key = id.clone();
    let outcome = manager::on_coordinator(shard, &key, move |owner, partition| async move {
        let now = owner.now_ms();
        let Some(plan) =
            with_coordinator(&owner, partition, |c| c.end_txn(&id, producer, commit, now))??
        else {
            return Ok(());
        };
        match commit_plan(&owner, partition, plan).await? {
            AfterAppend::Ended(markers) => {
                // Decided and durable: the markers are written from here
                // on, and the next transaction waits for them
                // (CONCURRENT_TRANSACTIONS until they are).
                manager::finish_markers(&owner, partition, markers).await;
                Ok(())
            }
            _ => Err(TxnError::CoordinatorNotAvailable),
        }
    })
    .await
    .and_then(|inner| inner);
    EndTxnResponse::default().with_error_code(match outcome {
        Ok(()) => crate::errors::NONE,
        Err(error) => error.code_for(TxnApi::EndTxn, version),
    })
}

pub async fn describe(
    shard: &Rc<Shard>,
    request: DescribeTransactionsRequest,
) -> DescribeTransactionsResponse {
    let mut states = Vec::with_capacity(request.transactional_ids.len());
    for id in request.transactional_ids {
        let key = id.0.to_string();
        let lookup = key.clone();
        let described =
            manager::on_coordinator(shard, &lookup, move |owner, partition| async move {
                with_coordinator(&owner, partition, |c| c.describe(&key))?
            })
            .await
            .and_then(|inner| inner);
        let state = match described {
            Ok(d) => {
                let mut by_topic: std::collections::BTreeMap<String, Vec<i32>> = Default::default();
                for (topic, p) in &d.partitions {
                    by_topic.entry(topic.clone()).or_default().push(*p);
                }
                TransactionState::default()
                    .with_transaction_state(StrBytes::from_string(d.state.to_string()))
                    .with_transaction_timeout_ms(d.timeout_ms)
                    .with_transaction_start_time_ms(d.txn_start_ms)
                    .with_producer_id(ProducerId(d.producer_id))
                    .with_producer_epoch(d.producer_epoch)
                    .with_topics(
                        by_topic
                            .into_iter()
                            .map(|(topic, partitions)| {
                                TopicData::default()
                                    .with_topic(TopicName(StrBytes::from_string(topic)))
                                    .with_partitions(partitions)
                            })
                            .collect(),
                    )
            }
            Err(error) => TransactionState::default().with_error_code(error.code()),
        };
        states.push(state.with_transactional_id(id));
    }
    DescribeTransactionsResponse::default().with_transaction_states(states)
}

/// ListTransactions: every coordinator of this broker's cores, filtered.
pub async fn list(shard: &Rc<Shard>, request: ListTransactionsRequest) -> ListTransactionsResponse {
    let filter = ListFilter {
        states: request
            .state_filters
            .iter()
            .map(|s| s.to_string())
            .collect(),
        producer_ids: request.producer_id_filters.iter().map(|p| p.0).collect(),
        duration_ms: request.duration_filter,
    };
    let mut unknown = Vec::new();
    let mut listed = Vec::new();
    for core in 0..shard.cores {
        let filter = filter.clone();
        let (core_unknown, core_listed) = shard
            .run_on(core, move |owner| async move {
                let now = owner.now_ms();
                let mut unknown = Vec::new();
                let mut listed = Vec::new();
                for coordinator in owner.transactions.coordinators.borrow().values() {
                    if let Ok(listing) = coordinator.list(&filter, now) {
                        unknown = listing.unknown_state_filters;
                        listed.extend(
                            listing
                                .transactions
                                .into_iter()
                                .map(|t| (t.transactional_id, t.producer_id, t.state.to_string())),
                        );
                    }
                }
                (unknown, listed)
            })
            .await;
        unknown = core_unknown;
        listed.extend(core_listed);
    }
    ListTransactionsResponse::default()
        .with_unknown_state_filters(unknown.into_iter().map(StrBytes::from_string).collect())
        .with_transaction_states(
            listed
                .into_iter()
                .map(|(id, producer_id, state)| {
                    ListedState::default()
                        .with_transactional_id(TransactionalId(StrBytes::from_string(id)))
                        .with_producer_id(ProducerId(producer_id))
                        .with_transaction_state(StrBytes::from_string(state))
                })
                .collect(),
        )
}
