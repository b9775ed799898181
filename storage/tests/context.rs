//! Storage contexts are independent: two contexts on one executor (as two
//! cores would have) share no journal round, no journal counters and no
//! budget, and a log counts against the context it was opened with only.

mod common;

use common::{run, Spec};
use storage::journal::Counts;
use storage::{AppendOptions, Context, Log};

/// Appends `count` small batches to `log`, each waited on until durable.
async fn append_durably(log: &Log, seed_base: u64, count: u64) {
    for i in 0..count {
        let info = log
            .append(
                Spec::new(seed_base + i, 2, 300).bytes(),
                AppendOptions::default(),
            )
            .await
            .unwrap();
        log.wait_durable(info.last_offset).await.unwrap();
    }
}

#[test]
fn two_contexts_on_one_executor_share_no_journal_round_and_no_budget() {
    let dir = common::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    run(move || async move {
        let (a, b) = (Context::default(), Context::default());
        let config = common::config(1 << 30);
        let log_a = Log::open(&a, root.join("a-0"), config.clone())
            .await
            .unwrap();
        let log_b = Log::open(&b, root.join("b-0"), config.clone())
            .await
            .unwrap();
        assert_eq!((a.open_logs(), b.open_logs()), (1, 1));

        // Small durable appends go through the journal of their own
        // context only.
        append_durably(&log_a, 0, 20).await;
        let after_a = a.journal_counts();
        assert!(
            after_a.records >= 20,
            "a's journal took a's appends: {after_a:?}"
        );
        assert!(after_a.writes > 0);
        assert_eq!(
            b.journal_counts(),
            Counts::default(),
            "b's journal saw nothing"
        );

        append_durably(&log_b, 1_000, 5).await;
        let after_b = b.journal_counts();
        assert!(
            after_b.records >= 5,
            "b's journal took b's appends: {after_b:?}"
        );
        assert_eq!(
            a.journal_counts(),
            after_a,
            "a's journal saw none of b's appends"
        );

        // Budgets: a third log counts against its own context only.
        let log_a2 = Log::open(&a, root.join("a-1"), config.clone())
            .await
            .unwrap();
        assert_eq!((a.open_logs(), b.open_logs()), (2, 1));
        log_a2.close().await.unwrap();
        drop(log_a2);
        assert_eq!((a.open_logs(), b.open_logs()), (1, 1));

        // Read-ahead: a reader of a reopened log (nothing cached) reads
        // ahead within its own context's budget.
        log_a.close().await.unwrap();
        drop(log_a);
        let log_a = Log::open(&a, root.join("a-0"), config).await.unwrap();
        let end = log_a.next_offset();
        let read = log_a.read(0, 1_000, end).await.unwrap();
        assert!(read.next_offset > 0 && read.next_offset < end);
        assert!(a.read_ahead_bytes() > 0, "a window is read ahead for a");
        assert_eq!(b.read_ahead_bytes(), 0, "b's budget is untouched");
        log_a.close().await.unwrap();
        log_b.close().await.unwrap();
    });
}
