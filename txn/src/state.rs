//! The states a transactional id goes through, with Kafka's numbering (the
//! `transaction_status` byte of a `__transaction_state` value), Kafka's
//! names (DescribeTransactions and ListTransactions show them) and the
//! transitions Kafka allows between them.
//!
//! ```text
//! (new id)       → Empty            InitProducerId
//! Empty          → Ongoing          AddPartitionsToTxn / AddOffsetsToTxn
//! Ongoing        → Ongoing          more partitions
//! Ongoing        → PrepareCommit    EndTxn commit
//! Ongoing        → PrepareAbort     EndTxn abort, or fenced with a bumped
//!                                   epoch (InitProducerId, timeout)
//! PrepareCommit  → CompleteCommit   every marker written
//! PrepareAbort   → CompleteAbort    every marker written
//! CompleteCommit → Empty            InitProducerId
//! CompleteAbort  → Empty            InitProducerId
//! ```
//!
//! Empty, CompleteCommit and CompleteAbort also lead to Empty
//! (InitProducerId again), to Ongoing (the next transaction) and to Dead
//! (the id expired: a tombstone). PrepareEpochFence is only ever a pending
//! state in Kafka; here the fence writes PrepareAbort directly.

/// A transactional id's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TxnState {
    /// No transaction open: just initialised, or the last one finished
    /// before the producer initialised again.
    Empty,
    /// A transaction is open: partitions were added to it.
    Ongoing,
    /// The commit is decided and durable; its markers are being written.
    PrepareCommit,
    /// The abort is decided and durable; its markers are being written.
    PrepareAbort,
    /// Every commit marker was written.
    CompleteCommit,
    /// Every abort marker was written.
    CompleteAbort,
    /// The id expired and is being removed (its record is a tombstone).
    Dead,
    /// The producer's epoch is being bumped to fence it before its open
    /// transaction is aborted.
    PrepareEpochFence,
}

impl TxnState {
    pub const ALL: [TxnState; 8] = [
        TxnState::Empty,
        TxnState::Ongoing,
        TxnState::PrepareCommit,
        TxnState::PrepareAbort,
        TxnState::CompleteCommit,
        TxnState::CompleteAbort,
        TxnState::Dead,
        TxnState::PrepareEpochFence,
    ];

    /// Kafka's id of the state: the `transaction_status` byte.
    pub const fn id(self) -> i8 {
        match self {
            TxnState::Empty => 0,
            TxnState::Ongoing => 1,
            TxnState::PrepareCommit => 2,
            TxnState::PrepareAbort => 3,
            TxnState::CompleteCommit => 4,
            TxnState::CompleteAbort => 5,
            TxnState::Dead => 6,
            TxnState::PrepareEpochFence => 7,
        }
    }

    pub fn from_id(id: i8) -> Option<TxnState> {
        TxnState::ALL.into_iter().find(|state| state.id() == id)
    }

    /// Kafka's name of the state, as DescribeTransactions and
    /// ListTransactions show it.
    pub const fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
            TxnState::Dead => "Dead",
            TxnState::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    /// The state named `name` (case-sensitive, as Kafka matches
    /// ListTransactions' state filters).
    pub fn from_name(name: &str) -> Option<TxnState> {
        TxnState::ALL.into_iter().find(|state| state.name() == name)
    }

    /// The states Kafka allows a transition into `self` from (the classic
    /// coordinator's table: an abort without a transaction is not one).
    pub const fn valid_previous(self) -> &'static [TxnState] {
        use TxnState::*;
        match self {
            Empty => &[Empty, CompleteCommit, CompleteAbort],
            Ongoing => &[Ongoing, Empty, CompleteCommit, CompleteAbort],
            PrepareCommit => &[Ongoing],
            PrepareAbort => &[Ongoing, PrepareEpochFence],
            CompleteCommit => &[PrepareCommit],
            CompleteAbort => &[PrepareAbort],
            Dead => &[Empty, CompleteCommit, CompleteAbort],
            PrepareEpochFence => &[Ongoing],
        }
    }

    /// Whether Kafka allows moving from `previous` to `self`.
    pub fn can_follow(self, previous: TxnState) -> bool {
        self.valid_previous().contains(&previous)
    }

    /// Whether an idle id in this state may expire
    /// (`transactional.id.expiration.ms`): only with no transaction open.
    pub const fn expiration_allowed(self) -> bool {
        matches!(
            self,
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
        )
    }

    /// Whether a transaction's markers are decided and being written.
    pub const fn is_prepare(self) -> bool {
        matches!(self, TxnState::PrepareCommit | TxnState::PrepareAbort)
    }
}

impl std::fmt::Display for TxnState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_keep_kafkas_ids_and_names() {
        let expected = [
            (TxnState::Empty, 0, "Empty"),
            (TxnState::Ongoing, 1, "Ongoing"),
            (TxnState::PrepareCommit, 2, "PrepareCommit"),
            (TxnState::PrepareAbort, 3, "PrepareAbort"),
            (TxnState::CompleteCommit, 4, "CompleteCommit"),
            (TxnState::CompleteAbort, 5, "CompleteAbort"),
            (TxnState::Dead, 6, "Dead"),
            (TxnState::PrepareEpochFence, 7, "PrepareEpochFence"),
        ];
        for (state, id, name) in expected {
            assert_eq!(state.id(), id);
            assert_eq!(state.name(), name);
            assert_eq!(TxnState::from_id(id), Some(state));
            assert_eq!(TxnState::from_name(name), Some(state));
        }
        assert_eq!(TxnState::from_id(8), None);
        assert_eq!(TxnState::from_id(-1), None);
        assert_eq!(TxnState::from_name("ongoing"), None);
    }

    #[test]
    fn a_decided_transaction_only_moves_to_its_completion() {
        use TxnState::*;
        let successors = |from: TxnState| -> Vec<TxnState> {
            TxnState::ALL
                .into_iter()
                .filter(|to| to.can_follow(from))
                .collect()
        };
        assert_eq!(successors(PrepareCommit), vec![CompleteCommit]);
        assert_eq!(successors(PrepareAbort), vec![CompleteAbort]);
        assert_eq!(
            successors(Ongoing),
            vec![Ongoing, PrepareCommit, PrepareAbort, PrepareEpochFence]
        );
        assert_eq!(successors(PrepareEpochFence), vec![PrepareAbort]);
        assert_eq!(successors(Dead), Vec::<TxnState>::new());
        for idle in [Empty, CompleteCommit, CompleteAbort] {
            assert_eq!(successors(idle), vec![Empty, Ongoing, Dead]);
            assert!(idle.expiration_allowed());
        }
        assert!(!Ongoing.expiration_allowed());
    }
}
