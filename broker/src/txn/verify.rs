//! A partition leader's check, before a producer's first transactional
//! batch opens a transaction on the partition, that the coordinator has
//! the partition in that producer's ongoing transaction (as Kafka's
//! leaders do since 3.6). Without it, a batch of a transaction that was
//! aborted meanwhile (a retry that arrived late) would open a transaction
//! no coordinator knows of: a hanging transaction that holds the last
//! stable offset until it times out here, and records of an aborted
//! transaction that a later commit marker would make visible.
//!
//! The check goes to the coordinator's core here, or to its broker as
//! AddPartitionsToTxn v4 with `verify_only`. A producer's later
//! transactional batches queue behind its checked one
//! ([`Partition::take_txn_turn`]), so they are appended in the order
//! they came; a marker written while the coordinator is asked voids the
//! check ([`Partition::produce_in_turn`]).

use std::collections::BTreeSet;
use std::rc::Rc;
use std::time::Duration;

use kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use kafka_protocol::messages::{AddPartitionsToTxnRequest, ProducerId, TopicName, TransactionalId};
use kafka_protocol::protocol::StrBytes;
use protocol::batch::RecordBatch;
use txn::coordinator::ProducerIdAndEpoch;
use txn::error::{TxnApi, TxnError};

use crate::cluster::links;
use crate::errors;
use crate::partition::{Partition, ProduceOutcome};
use crate::shard::Shard;
use crate::txn::manager::{self, with_coordinator};

/// The first Produce version whose clients know TRANSACTION_ABORTABLE.
const PRODUCE_ABORTABLE_VERSION_MIN: i16 = 11;

/// Appends a client's batch, checking a transactional one with its
/// coordinator first when it opens the producer's transaction here.
/// `transactional_id`: the Produce request's; `version`: its version.
pub async fn produce(
    shard: &Rc<Shard>,
    partition: &Partition,
    transactional_id: Option<&str>,
    batch: RecordBatch,
    acks: i16,
    timeout: Duration,
    version: i16,
) -> ProduceOutcome {
    let header = *batch.header();
    if !header.is_transactional() || header.is_control() || header.producer_id < 0 {
        return partition.produce(batch, acks, timeout).await;
    }
    let Some(transactional_id) = transactional_id.filter(|id| !id.is_empty()) else {
        // Kafka's answer to transactional records without a
        // transactional id to authorize.
        return ProduceOutcome::error(errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
    };
    if !partition.txn_needs_turn(header.producer_id) {
        return partition.produce(batch, acks, timeout).await;
    }
    let turn = partition.take_txn_turn(header.producer_id).await;
    let Some(token) = partition.start_txn_verification(header.producer_id) else {
        // The batch before this one opened the transaction.
        return partition
            .produce_in_turn(batch, acks, timeout, turn, None)
            .await;
    };
    let producer = ProducerIdAndEpoch {
        producer_id: header.producer_id,
        producer_epoch: header.producer_epoch,
    };
    let checked = check(
        shard,
        transactional_id,
        producer,
        &partition.topic,
        partition.index,
    )
    .await;
    match checked {
        Ok(()) => {
            partition
                .produce_in_turn(batch, acks, timeout, turn, Some(token))
                .await
        }
        Err(code) => {
            partition.end_txn_verification(header.producer_id, token);
            tracing::debug!(
                topic = %partition.topic,
                partition = partition.index,
                transactional_id,
                producer_id = producer.producer_id,
                producer_epoch = producer.producer_epoch,
                code,
                "transactional batch refused: its coordinator does not have the partition in the producer's transaction"
            );
            ProduceOutcome::error(produce_code(code, version))
        }
    }
}

/// The coordinator's answer as a Produce answer of `version`, as Kafka's
/// leaders convert it: a partition outside the transaction is
/// TRANSACTION_ABORTABLE (INVALID_TXN_STATE before Produce v11), and a
/// coordinator that cannot answer now is NOT_ENOUGH_REPLICAS, which every
/// producer retries without refreshing its metadata.
pub fn produce_code(code: i16, version: i16) -> i16 {
    match code {
        errors::TRANSACTION_ABORTABLE | errors::INVALID_TXN_STATE => {
            if version >= PRODUCE_ABORTABLE_VERSION_MIN {
                errors::TRANSACTION_ABORTABLE
            } else {
                errors::INVALID_TXN_STATE
            }
        }
        errors::CONCURRENT_TRANSACTIONS
        | errors::COORDINATOR_NOT_AVAILABLE
        | errors::COORDINATOR_LOAD_IN_PROGRESS
        | errors::NOT_COORDINATOR
        | errors::NETWORK_EXCEPTION => errors::NOT_ENOUGH_REPLICAS,
        errors::PRODUCER_FENCED => errors::INVALID_PRODUCER_EPOCH,
        other => other,
    }
}

/// Asks `transactional_id`'s coordinator whether `topic`-`partition` is in
/// `producer`'s ongoing transaction; the refusal's Kafka code otherwise.
pub async fn check(
    shard: &Rc<Shard>,
    transactional_id: &str,
    producer: ProducerIdAndEpoch,
    topic: &str,
    partition: i32,
) -> Result<(), i16> {
    let coordinator = manager::coordinator(shard, transactional_id)
        .await
        .map_err(TxnError::code)?;
    if shard.in_cluster() && coordinator != shard.config.node_id {
        return check_remote(
            shard,
            coordinator,
            transactional_id,
            producer,
            topic,
            partition,
        )
        .await;
    }
    let id = transactional_id.to_string();
    let asked = (topic.to_string(), partition);
    let verified = manager::on_coordinator(shard, transactional_id, move |owner, state| {
        let partitions = BTreeSet::from([asked]);
        async move {
            with_coordinator(&owner, state, |c| {
                c.verify_partitions(&id, producer, &partitions)
            })
            .and_then(|inner| inner)
            .map(|verified| {
                verified
                    .into_iter()
                    .map(|(_, outcome)| outcome)
                    .next()
                    .unwrap_or(Err(TxnError::TransactionAbortable))
            })
        }
    })
    .await;
    match verified {
        Ok(Ok(Ok(()))) => Ok(()),
        Ok(Ok(Err(error))) | Ok(Err(error)) | Err(error) => {
            Err(error.code_for(TxnApi::AddPartitionsToTxn, i16::MAX))
        }
    }
}

/// [`check`] on another broker: AddPartitionsToTxn v4, verify-only.
async fn check_remote(
    shard: &Rc<Shard>,
    broker: i32,
    transactional_id: &str,
    producer: ProducerIdAndEpoch,
    topic: &str,
    partition: i32,
) -> Result<(), i16> {
    let request = AddPartitionsToTxnRequest::default().with_transactions(vec![
        AddPartitionsToTxnTransaction::default()
            .with_transactional_id(TransactionalId(StrBytes::from_string(
                transactional_id.to_string(),
            )))
            .with_producer_id(ProducerId(producer.producer_id))
            .with_producer_epoch(producer.producer_epoch)
            .with_verify_only(true)
            .with_topics(vec![AddPartitionsToTxnTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                .with_partitions(vec![partition])]),
    ]);
    let response = match links::add_partitions_to_txn(shard, broker, request).await {
        Ok(response) => response,
        Err(error) => {
            tracing::debug!(%error, "transaction coordinator not reached to check a partition");
            return Err(errors::NETWORK_EXCEPTION);
        }
    };
    if response.error_code != errors::NONE {
        return Err(response.error_code);
    }
    let code = response
        .results_by_transaction
        .iter()
        .filter(|t| t.transactional_id.0.as_str() == transactional_id)
        .flat_map(|t| &t.topic_results)
        .filter(|t| t.name.0.as_str() == topic)
        .flat_map(|t| &t.results_by_partition)
        .find(|p| p.partition_index == partition)
        .map(|p| p.partition_error_code)
        .unwrap_or(errors::INVALID_TXN_STATE);
    if code == errors::NONE {
        Ok(())
    } else {
        Err(code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_coordinator_refusal_is_answered_as_producers_of_each_version_know_it() {
        for code in [errors::TRANSACTION_ABORTABLE, errors::INVALID_TXN_STATE] {
            assert_eq!(produce_code(code, 10), errors::INVALID_TXN_STATE);
            assert_eq!(produce_code(code, 11), errors::TRANSACTION_ABORTABLE);
        }
        for code in [
            errors::CONCURRENT_TRANSACTIONS,
            errors::COORDINATOR_NOT_AVAILABLE,
            errors::COORDINATOR_LOAD_IN_PROGRESS,
            errors::NOT_COORDINATOR,
            errors::NETWORK_EXCEPTION,
        ] {
            assert_eq!(produce_code(code, 9), errors::NOT_ENOUGH_REPLICAS);
        }
        assert_eq!(
            produce_code(errors::PRODUCER_FENCED, 9),
            errors::INVALID_PRODUCER_EPOCH
        );
        assert_eq!(
            produce_code(errors::INVALID_PRODUCER_ID_MAPPING, 9),
            errors::INVALID_PRODUCER_ID_MAPPING
        );
    }
}
