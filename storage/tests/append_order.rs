//! Appends are placed in the order they are called, also while some of
//! them wait under the append lock (the leader-epoch checkpoint a new epoch
//! writes, backpressure) and new appends keep arriving in bursts: the
//! broker relies on it to store a connection's pipelined produce requests
//! in request order. The lock's fairness itself, the part a scheduler's
//! timing decides, is proven deterministically by the unit test in
//! `log/append.rs`.

mod common;

use std::cell::RefCell;
use std::rc::Rc;

use common::{run, Spec};
use storage::{AppendOptions, Log, LogConfig};

const APPENDS: usize = 200;
/// Every tenth append starts a new leader epoch: its checkpoint write
/// waits under the lock while later appends arrive.
const EPOCH_EVERY: usize = 10;
/// Appends started at once, without a yield between them.
const BURST: usize = 7;

fn config() -> LogConfig {
    LogConfig::from_pairs([
        ("segment.bytes", "1073741824"),
        ("strom.preallocate.bytes", "1048576"),
        ("retention.ms", "-1"),
        // Small, so appends also wait under the lock for the writer.
        ("strom.pending.bytes", "65536"),
    ])
    .expect("valid test config")
}

#[test]
fn appends_arriving_while_one_waits_under_the_lock_keep_their_call_order() {
    let dir = common::tempdir().unwrap();
    let path = dir.path().join("t-0");
    run(move || async move {
        let log = Rc::new(Log::open(&common::ctx(), &path, config()).await.unwrap());
        // (call index, base offset) as each append returns.
        let placed: Rc<RefCell<Vec<(usize, u64)>>> = Rc::default();
        let mut tasks = Vec::with_capacity(APPENDS);
        for i in 0..APPENDS {
            let log = log.clone();
            let placed = placed.clone();
            let options = AppendOptions {
                leader_epoch: (i / EPOCH_EVERY) as i32,
                ..AppendOptions::default()
            };
            tasks.push(glommio::spawn_local(async move {
                let spec = Spec::new(i as u64, 4, 4_000);
                let info = log.append(spec.bytes(), options).await.unwrap();
                placed.borrow_mut().push((i, info.base_offset));
            }));
            // Requests arrive in bursts (a connection's reader spawns a
            // handler per frame it read): between bursts the appends
            // started so far run, and an earlier one may release the lock
            // while the next burst is queued to run.
            if i % BURST == BURST - 1 {
                futures_lite::future::yield_now().await;
            }
        }
        for task in tasks {
            task.await;
        }
        let mut placed = placed.borrow().clone();
        placed.sort_by_key(|&(i, _)| i);
        for window in placed.windows(2) {
            let ((a, a_offset), (b, b_offset)) = (window[0], window[1]);
            assert_eq!(
                b_offset,
                a_offset + 4,
                "append {b} was called after append {a} but placed at {b_offset}, \
                 not right after {a_offset}"
            );
        }
        assert_eq!(placed[0].1, 0);
        log.close().await.unwrap();
    });
}
