//! Why the coordinator refused a request: its own error type, mapped to
//! Kafka's error codes only where an answer is encoded (the broker's
//! handlers, a simulator's clients).

use protocol::error_codes as codes;

/// Kafka's TRANSACTION_ABORTABLE (Kafka 3.8 and later): a partition the
/// producer writes to is not in its transaction, so it must abort.
pub const TRANSACTION_ABORTABLE: i16 = codes::TRANSACTION_ABORTABLE;

/// The first AddPartitionsToTxn version that answers TRANSACTION_ABORTABLE.
pub const ADD_PARTITIONS_ABORTABLE_VERSION_MIN: i16 = 5;

/// A coordinator's refusal, one variant per Kafka error it answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TxnError {
    /// An empty transactional id, or a request beyond the coordinator's
    /// bounds.
    #[error("the request is malformed")]
    InvalidRequest,
    /// The timeout is not positive or above `transaction.max.timeout.ms`.
    #[error("the transaction timeout is outside the broker's bounds")]
    InvalidTransactionTimeout,
    /// Another change of the id is being written, or its transaction is
    /// being committed or aborted: the client backs off and retries.
    #[error("another transition of this transactional id is in progress")]
    ConcurrentTransactions,
    /// A newer producer with the same transactional id fenced this one.
    /// Clients of older request versions know it as INVALID_PRODUCER_EPOCH
    /// (see [`TxnError::code_for`]).
    #[error("the producer was fenced by a newer one with the same transactional id")]
    ProducerFenced,
    /// The transactional id is unknown, or holds another producer id.
    #[error("the producer id is not the transactional id's")]
    InvalidProducerIdMapping,
    /// The request does not fit the transaction's state (ending a
    /// transaction that has none, or ending it the other way).
    #[error("the transaction's state does not allow this request")]
    InvalidTxnState,
    /// DescribeTransactions of an id the coordinator does not hold.
    #[error("no such transactional id")]
    TransactionalIdNotFound,
    /// A verified partition is not in the producer's transaction.
    #[error("the partition is not in the transaction; the producer must abort")]
    TransactionAbortable,
    /// The id's `__transaction_state` partition is led elsewhere now.
    #[error("this broker is not the transactional id's coordinator")]
    NotCoordinator,
    /// The coordinator holds as many ids as it may, or no producer id
    /// could be allocated: the client retries.
    #[error("the coordinator is not available")]
    CoordinatorNotAvailable,
    /// The coordinator is still reading its `__transaction_state` log.
    #[error("the coordinator is loading its transactions")]
    CoordinatorLoadInProgress,
}

/// The transaction APIs whose older versions answer a fenced producer
/// with INVALID_PRODUCER_EPOCH instead of PRODUCER_FENCED.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnApi {
    InitProducerId,
    AddPartitionsToTxn,
    AddOffsetsToTxn,
    EndTxn,
}

impl TxnApi {
    /// The first version whose clients know PRODUCER_FENCED (Kafka's
    /// request handlers convert it for older ones).
    pub const fn producer_fenced_version_min(self) -> i16 {
        match self {
            TxnApi::InitProducerId => 4,
            TxnApi::AddPartitionsToTxn | TxnApi::AddOffsetsToTxn | TxnApi::EndTxn => 2,
        }
    }
}

impl TxnError {
    /// Kafka's error code for this refusal.
    pub const fn code(self) -> i16 {
        match self {
            TxnError::InvalidRequest => codes::INVALID_REQUEST,
            TxnError::InvalidTransactionTimeout => codes::INVALID_TRANSACTION_TIMEOUT,
            TxnError::ConcurrentTransactions => codes::CONCURRENT_TRANSACTIONS,
            TxnError::ProducerFenced => codes::PRODUCER_FENCED,
            TxnError::InvalidProducerIdMapping => codes::INVALID_PRODUCER_ID_MAPPING,
            TxnError::InvalidTxnState => codes::INVALID_TXN_STATE,
            TxnError::TransactionalIdNotFound => codes::TRANSACTIONAL_ID_NOT_FOUND,
            TxnError::TransactionAbortable => TRANSACTION_ABORTABLE,
            TxnError::NotCoordinator => codes::NOT_COORDINATOR,
            TxnError::CoordinatorNotAvailable => codes::COORDINATOR_NOT_AVAILABLE,
            TxnError::CoordinatorLoadInProgress => codes::COORDINATOR_LOAD_IN_PROGRESS,
        }
    }

    /// Kafka's error code for this refusal in a response of `api` at
    /// `version`: PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH for
    /// clients too old to know it, as Kafka's request handlers answer.
    pub const fn code_for(self, api: TxnApi, version: i16) -> i16 {
        match self {
            TxnError::ProducerFenced if version < api.producer_fenced_version_min() => {
                codes::INVALID_PRODUCER_EPOCH
            }
            // AddPartitionsToTxn before v5 (brokers verifying for
            // producers) knows a partition outside the transaction as
            // INVALID_TXN_STATE.
            TxnError::TransactionAbortable
                if matches!(api, TxnApi::AddPartitionsToTxn)
                    && version < ADD_PARTITIONS_ABORTABLE_VERSION_MIN =>
            {
                codes::INVALID_TXN_STATE
            }
            other => other.code(),
        }
    }

    /// Kafka's error code for an outcome: NONE when it succeeded.
    pub fn code_of<T>(outcome: &Result<T, TxnError>) -> i16 {
        match outcome {
            Ok(_) => codes::NONE,
            Err(error) => error.code(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_refusal_has_its_own_kafka_code() {
        let all = [
            TxnError::InvalidRequest,
            TxnError::InvalidTransactionTimeout,
            TxnError::ConcurrentTransactions,
            TxnError::ProducerFenced,
            TxnError::InvalidProducerIdMapping,
            TxnError::InvalidTxnState,
            TxnError::TransactionalIdNotFound,
            TxnError::TransactionAbortable,
            TxnError::NotCoordinator,
            TxnError::CoordinatorNotAvailable,
            TxnError::CoordinatorLoadInProgress,
        ];
        let codes: std::collections::BTreeSet<i16> = all.iter().map(|e| e.code()).collect();
        assert_eq!(codes.len(), all.len(), "two refusals share a code");
        assert!(!codes.contains(&codes::NONE));
        assert!(!codes.contains(&codes::INVALID_PRODUCER_EPOCH));
        assert_eq!(TRANSACTION_ABORTABLE, 120);
        assert_eq!(TxnError::code_of::<()>(&Ok(())), codes::NONE);
        assert_eq!(
            TxnError::code_of::<()>(&Err(TxnError::ConcurrentTransactions)),
            codes::CONCURRENT_TRANSACTIONS
        );
    }

    #[test]
    fn a_partition_outside_the_transaction_is_invalid_txn_state_before_add_partitions_v5() {
        let abortable = TxnError::TransactionAbortable;
        assert_eq!(
            abortable.code_for(TxnApi::AddPartitionsToTxn, 4),
            codes::INVALID_TXN_STATE
        );
        assert_eq!(
            abortable.code_for(TxnApi::AddPartitionsToTxn, 5),
            TRANSACTION_ABORTABLE
        );
        assert_eq!(
            TxnError::InvalidTxnState.code_for(TxnApi::AddPartitionsToTxn, 5),
            codes::INVALID_TXN_STATE
        );
    }

    #[test]
    fn a_fenced_producer_on_an_old_request_version_is_told_its_epoch_is_invalid() {
        let check = |api, version, expected| {
            assert_eq!(
                TxnError::ProducerFenced.code_for(api, version),
                expected,
                "{api:?} v{version}"
            );
        };
        check(TxnApi::InitProducerId, 3, codes::INVALID_PRODUCER_EPOCH);
        check(TxnApi::InitProducerId, 4, codes::PRODUCER_FENCED);
        for api in [
            TxnApi::AddPartitionsToTxn,
            TxnApi::AddOffsetsToTxn,
            TxnApi::EndTxn,
        ] {
            check(api, 0, codes::INVALID_PRODUCER_EPOCH);
            check(api, 1, codes::INVALID_PRODUCER_EPOCH);
            check(api, 2, codes::PRODUCER_FENCED);
            check(api, 5, codes::PRODUCER_FENCED);
        }
        // Other refusals keep their code at every version.
        assert_eq!(
            TxnError::ConcurrentTransactions.code_for(TxnApi::EndTxn, 0),
            codes::CONCURRENT_TRANSACTIONS
        );
    }
}
