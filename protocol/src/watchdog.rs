//! A watchdog for a glommio executor: a thread of its own wakes the
//! executor every period, so it never sleeps with runnable tasks for
//! longer than that, and the executor counts (and logs) the times it went
//! without running for much longer.
//!
//! Why: glommio 0.9 can park an executor that has runnable tasks. Its run
//! loop takes "no task queue ran" to mean "nothing to run", but the loop
//! also runs nothing when the preemption signal (a completion in the
//! latency ring) is already up as it starts: after the thread was stopped
//! or starved of CPU for longer than the preemption timer between polling
//! I/O and running tasks, or when a timer fires in that window. The
//! executor then sleeps in `io_uring_enter` until some I/O completes; a
//! broker whose clients all wait for its answers gets none, and hangs
//! (seen after a `SIGSTOP`/`SIGCONT` of the broker: produce requests
//! unanswered for 30 s until the client gave up). Upstream fixed it after
//! 0.9 (glommio/glommio#53), in no release yet. A wake from another thread
//! ends any such sleep: the woken task is this watchdog's own, and the pass
//! that runs it runs the others.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the watchdog wakes the executor by default: the longest a
/// runnable task can wait while the executor sleeps wrongly. At 100 wakes
/// a second an idle core spends well under 1% of its time on them.
pub const PERIOD: Duration = Duration::from_millis(10);

/// An executor that has not run the watchdog's task for this long was
/// stopped, starved of CPU, or ran a task that did not yield: counted and
/// logged.
pub const STALL_WARNING: Duration = Duration::from_millis(500);

/// Keeps the watchdog running; dropping it stops the thread and the task.
/// Created and dropped on the executor's thread.
pub struct Watchdog {
    origin: Instant,
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    /// The watchdog task's waker, for the thread.
    waker: Mutex<Option<Waker>>,
    stopping: AtomicBool,
    /// Stalls count only once armed: start-up work (opening logs, binding,
    /// first-touch of io memory) is expected to hold the thread. When it
    /// was armed, in microseconds after the watchdog started (`NOT_ARMED`
    /// before): the part of a gap after it counts.
    armed_at_us: AtomicU64,
    runs: AtomicU64,
    stalls: AtomicU64,
    longest_stall_us: AtomicU64,
}

/// `Shared::armed_at_us` before [`Watchdog::arm`].
const NOT_ARMED: u64 = u64::MAX;

thread_local! {
    /// The watchdog of this thread's executor, for [`this_thread_stalls`].
    static CURRENT: std::cell::RefCell<Option<Arc<Shared>>> = const { std::cell::RefCell::new(None) };
}

/// Stalls counted by the watchdog of the calling thread's executor (0
/// without one): for metrics gathered on the executor.
pub fn this_thread_stalls() -> u64 {
    CURRENT.with(|c| {
        c.borrow()
            .as_ref()
            .map_or(0, |s| s.stalls.load(Ordering::Relaxed))
    })
}

/// Starts a watchdog for the executor of the calling thread, which must be
/// inside a glommio executor. `name` names the thread and the log lines.
/// It wakes the executor from the start, but counts and logs stalls only
/// once [`Watchdog::arm`] was called: the executor's start-up work is not
/// a stall.
pub fn start(name: &str, period: Duration, stall_warning: Duration) -> std::io::Result<Watchdog> {
    let shared = Arc::new(Shared::default());
    shared.armed_at_us.store(NOT_ARMED, Ordering::Relaxed);
    let origin = Instant::now();
    let task = {
        let (shared, name) = (shared.clone(), name.to_string());
        let mut last = origin;
        futures_lite::future::poll_fn(move |cx| {
            if shared.stopping.load(Ordering::Relaxed) {
                return Poll::Ready(());
            }
            let now = Instant::now();
            // Only the part of the gap since arming counts: a gap that
            // began in start-up work and ended long after is a stall all
            // the same.
            let armed_at = shared.armed_at_us.load(Ordering::Relaxed);
            let gap = if armed_at == NOT_ARMED {
                Duration::ZERO
            } else {
                now.saturating_duration_since(last.max(origin + Duration::from_micros(armed_at)))
            };
            last = now;
            shared.runs.fetch_add(1, Ordering::Relaxed);
            if gap >= stall_warning {
                shared.stalls.fetch_add(1, Ordering::Relaxed);
                shared
                    .longest_stall_us
                    .fetch_max(gap.as_micros() as u64, Ordering::Relaxed);
                tracing::warn!(
                    executor = %name,
                    stalled_ms = gap.as_millis() as u64,
                    "executor did not run for a while: the process was stopped, starved of CPU, or a task ran without yielding"
                );
            }
            let mut slot = shared.waker.lock().expect("watchdog waker lock");
            if !slot.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *slot = Some(cx.waker().clone());
            }
            Poll::Pending
        })
    };
    glommio::spawn_local(task).detach();
    let (stop, stopped) = mpsc::channel::<()>();
    let thread = std::thread::Builder::new()
        .name(format!("{name}-wd"))
        .spawn({
            let shared = shared.clone();
            move || {
                while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(period) {
                    if let Some(waker) = shared.waker.lock().expect("watchdog waker lock").as_ref()
                    {
                        waker.wake_by_ref();
                    }
                }
            }
        })?;
    CURRENT.with(|c| *c.borrow_mut() = Some(shared.clone()));
    Ok(Watchdog {
        origin,
        stop: Some(stop),
        thread: Some(thread),
        shared,
    })
}

impl Watchdog {
    /// From now on, counts and logs stalls (start-up work is over).
    pub fn arm(&self) {
        let at = self.origin.elapsed().as_micros() as u64;
        self.shared
            .armed_at_us
            .store(at.min(NOT_ARMED - 1), Ordering::Relaxed);
    }

    /// Times the executor ran the watchdog's task.
    pub fn runs(&self) -> u64 {
        self.shared.runs.load(Ordering::Relaxed)
    }

    /// Times the executor went `stall_warning` or longer without running it.
    pub fn stalls(&self) -> u64 {
        self.shared.stalls.load(Ordering::Relaxed)
    }

    /// The longest of those.
    pub fn longest_stall(&self) -> Duration {
        Duration::from_micros(self.shared.longest_stall_us.load(Ordering::Relaxed))
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        CURRENT.with(|c| {
            let mut current = c.borrow_mut();
            if current
                .as_ref()
                .is_some_and(|s| Arc::ptr_eq(s, &self.shared))
            {
                *current = None;
            }
        });
        self.shared.stopping.store(true, Ordering::Relaxed);
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        // The task ends when next run; its waker goes here, on the
        // executor's own thread.
        let waker = self
            .shared
            .waker
            .lock()
            .expect("watchdog waker lock")
            .take();
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `body` on a fresh executor in a thread of its own; `None` if it
    /// has not finished within `limit` (the executor may sleep forever).
    fn on_executor<T: Send + 'static, F: std::future::Future<Output = T> + 'static>(
        limit: Duration,
        body: impl FnOnce() -> F + Send + 'static,
    ) -> Option<T> {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let executor = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
                .make()
                .expect("executor");
            let _ = tx.send(executor.run(body()));
        });
        rx.recv_timeout(limit).ok()
    }

    /// An executor with no I/O and no timer sleeps until something wakes
    /// it; the watchdog's thread does, every period, and each wake runs
    /// the executor's tasks (the watchdog's own counts them). That wake is
    /// what ends a sleep glommio should not have taken.
    #[test]
    fn a_sleeping_executor_is_woken_every_period() {
        let done: Arc<(AtomicBool, Mutex<Option<Waker>>)> = Arc::default();
        let setter = {
            let done = done.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(300));
                done.0.store(true, Ordering::Relaxed);
                if let Some(waker) = done.1.lock().unwrap().take() {
                    waker.wake();
                }
            })
        };
        let outcome = on_executor(Duration::from_secs(10), move || async move {
            let watchdog = start("test", Duration::from_millis(5), Duration::from_secs(5)).unwrap();
            let started = Instant::now();
            futures_lite::future::poll_fn(|cx| {
                *done.1.lock().unwrap() = Some(cx.waker().clone());
                if done.0.load(Ordering::Relaxed) {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            })
            .await;
            (started.elapsed(), watchdog.runs(), watchdog.stalls())
        });
        setter.join().unwrap();
        let (waited, runs, stalls) = outcome.expect("the executor did not finish");
        assert!(waited < Duration::from_secs(5), "waited {waited:?}");
        // 300 ms at one wake per 5 ms: about 60, at least a third of them
        // even on a loaded machine. Without the watchdog's thread: none.
        assert!(runs >= 20, "woken {runs} times in {waited:?}");
        assert_eq!(stalls, 0);
    }

    /// A task that blocks the thread shows as one stall of about its length.
    #[test]
    fn a_blocked_executor_counts_one_stall() {
        let outcome = on_executor(Duration::from_secs(10), || async {
            let watchdog =
                start("test", Duration::from_millis(5), Duration::from_millis(150)).unwrap();
            watchdog.arm();
            glommio::timer::sleep(Duration::from_millis(30)).await;
            let before = watchdog.stalls();
            std::thread::sleep(Duration::from_millis(400));
            // The watchdog's task runs in the passes that follow.
            glommio::timer::sleep(Duration::from_millis(50)).await;
            let seen = this_thread_stalls();
            (before, watchdog.stalls(), watchdog.longest_stall(), seen)
        });
        let (before, after, longest, seen) = outcome.expect("the executor finished");
        // One more than before (a loaded machine may have starved the
        // thread before the block, too).
        assert_eq!(after, before + 1);
        assert_eq!(seen, after);
        assert!(longest >= Duration::from_millis(400), "longest {longest:?}");
    }

    /// A block that starts right after arming, before the watchdog's task
    /// ran again, counts: the stop of a just-started broker once went
    /// uncounted on a loaded machine.
    #[test]
    fn a_block_right_after_arming_is_a_stall() {
        let outcome = on_executor(Duration::from_secs(10), || async {
            let watchdog =
                start("test", Duration::from_millis(5), Duration::from_millis(150)).unwrap();
            std::thread::sleep(Duration::from_millis(300));
            watchdog.arm();
            let armed = Instant::now();
            std::thread::sleep(Duration::from_millis(400));
            glommio::timer::sleep(Duration::from_millis(50)).await;
            (watchdog.stalls(), watchdog.longest_stall(), armed.elapsed())
        });
        let (stalls, longest, since_arming) = outcome.expect("the executor finished");
        assert_eq!(stalls, 1);
        assert!(
            longest >= Duration::from_millis(400) && longest <= since_arming,
            "only the time after arming counts: {longest:?} of {since_arming:?}"
        );
    }

    /// A block before the watchdog is armed (start-up work) is not a stall;
    /// one after is.
    #[test]
    fn a_block_before_arming_is_not_a_stall() {
        let outcome = on_executor(Duration::from_secs(10), || async {
            let watchdog =
                start("test", Duration::from_millis(5), Duration::from_millis(150)).unwrap();
            std::thread::sleep(Duration::from_millis(400));
            glommio::timer::sleep(Duration::from_millis(50)).await;
            let unarmed = watchdog.stalls();
            watchdog.arm();
            glommio::timer::sleep(Duration::from_millis(30)).await;
            std::thread::sleep(Duration::from_millis(400));
            glommio::timer::sleep(Duration::from_millis(50)).await;
            (unarmed, watchdog.stalls())
        });
        let (unarmed, armed) = outcome.expect("the executor finished");
        assert_eq!(unarmed, 0);
        assert!(armed >= 1, "the block after arming was not counted");
    }

    /// Dropping the watchdog ends its thread; the executor then has nothing
    /// to wake it and the flag future is not looked at again.
    #[test]
    fn a_dropped_watchdog_stops_waking_the_executor() {
        let runs = on_executor(Duration::from_secs(10), || async {
            let watchdog = start("test", Duration::from_millis(5), Duration::from_secs(5)).unwrap();
            glommio::timer::sleep(Duration::from_millis(50)).await;
            let shared = watchdog.shared.clone();
            drop(watchdog);
            let at_drop = shared.runs.load(Ordering::Relaxed);
            glommio::timer::sleep(Duration::from_millis(100)).await;
            (at_drop, shared.runs.load(Ordering::Relaxed))
        });
        let (at_drop, later) = runs.expect("the executor finished");
        assert!(at_drop >= 2, "ran {at_drop} times in 50 ms");
        assert_eq!(later, at_drop, "the watchdog ran after it was dropped");
    }
}
