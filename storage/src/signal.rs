//! A single-threaded condition signal: tasks wait until a predicate over
//! the log's state holds; the log notifies after every state change that
//! could make one true. No timers, no polling loops.

use std::cell::RefCell;
use std::future::poll_fn;
use std::task::{Poll, Waker};

#[derive(Default)]
pub(crate) struct Signal {
    wakers: RefCell<Vec<Waker>>,
}

impl Signal {
    pub fn notify_all(&self) {
        let wakers = std::mem::take(&mut *self.wakers.borrow_mut());
        for waker in wakers {
            waker.wake();
        }
    }

    /// Resolves once `ready()` returns true, re-checking after each notify.
    pub async fn wait_until(&self, mut ready: impl FnMut() -> bool) {
        poll_fn(|cx| {
            if ready() {
                return Poll::Ready(());
            }
            let mut wakers = self.wakers.borrow_mut();
            if !wakers.iter().any(|w| w.will_wake(cx.waker())) {
                wakers.push(cx.waker().clone());
            }
            Poll::Pending
        })
        .await
    }
}
