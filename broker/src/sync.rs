//! Small single-core synchronisation helpers: a level-triggered
//! notification and a gate that counts holders and wakes when it empties.

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::Duration;

/// Adds `waker` unless the same task is already registered. A waiter that
/// is polled again and again (a connection races every read against the
/// stop notification) must not add a waker each time: the list would grow
/// without bound and glommio aborts once a task's waker count overflows.
fn register(waiters: &RefCell<Vec<Waker>>, waker: &Waker) {
    let mut waiters = waiters.borrow_mut();
    if !waiters.iter().any(|w| w.will_wake(waker)) {
        waiters.push(waker.clone());
    }
}

/// A flag that, once raised, stays raised and wakes every waiter.
#[derive(Default)]
pub struct Notify {
    raised: Cell<bool>,
    waiters: RefCell<Vec<Waker>>,
}

impl Notify {
    pub fn raise(&self) {
        self.raised.set(true);
        for waker in self.waiters.borrow_mut().drain(..) {
            waker.wake();
        }
    }

    pub fn is_raised(&self) -> bool {
        self.raised.get()
    }

    pub async fn wait(&self) {
        poll_fn(|cx| {
            if self.raised.get() {
                Poll::Ready(())
            } else {
                register(&self.waiters, cx.waker());
                Poll::Pending
            }
        })
        .await
    }

    /// Sleeps for `duration`, cut short when the flag is raised: for loops
    /// that tick until the broker stops. True when the flag ended the sleep.
    pub async fn sleep_unless_raised(&self, duration: Duration) -> bool {
        futures_lite::future::or(
            async {
                glommio::timer::sleep(duration).await;
                false
            },
            async {
                self.wait().await;
                true
            },
        )
        .await
    }
}

/// Counts holders; `wait_empty` resolves when none are left.
#[derive(Default)]
pub struct Gate {
    count: Cell<usize>,
    empty: RefCell<Vec<Waker>>,
}

/// Held while a connection lives; dropping it leaves the gate.
pub struct GateGuard {
    gate: Rc<Gate>,
}

impl Gate {
    pub fn enter(self: &Rc<Self>) -> GateGuard {
        self.count.set(self.count.get() + 1);
        GateGuard { gate: self.clone() }
    }

    pub fn count(&self) -> usize {
        self.count.get()
    }

    pub async fn wait_empty(&self) {
        poll_fn(|cx| {
            if self.count.get() == 0 {
                Poll::Ready(())
            } else {
                register(&self.empty, cx.waker());
                Poll::Pending
            }
        })
        .await
    }
}

impl Drop for GateGuard {
    fn drop(&mut self) {
        let count = self.gate.count.get() - 1;
        self.gate.count.set(count);
        if count == 0 {
            for waker in self.gate.empty.borrow_mut().drain(..) {
                waker.wake();
            }
        }
    }
}

/// Polls every future to completion and returns their outputs in order.
pub async fn join_all<T>(
    futures: Vec<std::pin::Pin<Box<dyn std::future::Future<Output = T> + '_>>>,
) -> Vec<T> {
    let mut futures: Vec<_> = futures.into_iter().map(Some).collect();
    let mut outputs: Vec<Option<T>> = futures.iter().map(|_| None).collect();
    poll_fn(|cx| {
        let mut pending = false;
        for (slot, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            if let Some(future) = slot {
                match future.as_mut().poll(cx) {
                    Poll::Ready(value) => {
                        *output = Some(value);
                        *slot = None;
                    }
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    outputs
        .into_iter()
        .map(|o| o.expect("every future completed"))
        .collect()
}

/// Resolves with the output of whichever future finishes first.
pub async fn select_first<T>(
    mut futures: Vec<std::pin::Pin<Box<dyn std::future::Future<Output = T> + '_>>>,
) -> Option<T> {
    if futures.is_empty() {
        return None;
    }
    poll_fn(|cx| {
        for future in futures.iter_mut() {
            if let Poll::Ready(value) = future.as_mut().poll(cx) {
                return Poll::Ready(Some(value));
            }
        }
        Poll::Pending
    })
    .await
}

#[cfg(test)]
mod wake_tests {
    use super::*;
    use std::future::Future;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::{Context, Wake};

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn repeated_polls_register_one_waker() {
        let notify = Notify::default();
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        for _ in 0..100_000 {
            let mut wait = std::pin::pin!(notify.wait());
            assert!(wait.as_mut().poll(&mut cx).is_pending());
        }
        assert_eq!(notify.waiters.borrow().len(), 1);
        notify.raise();
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
    }
}
