//! Memory budgets for what connections buffer: request frames being
//! received and handled, responses waiting to be written.
//!
//! A [`MemoryPool`] counts bytes against a capacity; a [`Lease`] holds some
//! of them and gives them back when dropped. Each core has one pool for
//! requests (`queued.max.request.bytes`) and one for responses
//! (`strom.queued.max.response.bytes`), each the broker's setting divided
//! by the cores, and each connection a response pool of its own
//! (`strom.connection.queued.max.response.bytes`). The server decides what
//! to do when a pool is full (wait, or read no more requests); this module
//! only counts.

use std::cell::Cell;
use std::rc::Rc;

use crate::sync::Condition;

/// Bytes counted against a capacity on one core.
pub struct MemoryPool {
    capacity: usize,
    used: Cell<usize>,
    /// Bytes ever taken beyond the capacity at once, for the metrics.
    peak: Cell<usize>,
    released: Condition,
}

impl MemoryPool {
    pub fn new(capacity: usize) -> Rc<Self> {
        assert!(capacity > 0, "a memory pool needs a capacity");
        Rc::new(Self {
            capacity,
            used: Cell::new(0),
            peak: Cell::new(0),
            released: Condition::default(),
        })
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn used(&self) -> usize {
        self.used.get()
    }

    /// The most bytes held at once since the pool was made.
    pub fn peak(&self) -> usize {
        self.peak.get()
    }

    pub fn available(&self) -> usize {
        self.capacity.saturating_sub(self.used.get())
    }

    pub fn is_exhausted(&self) -> bool {
        self.used.get() >= self.capacity
    }

    /// Whether `bytes` may be taken now: they fit, or nothing is held (so a
    /// request larger than the whole pool is still served, alone).
    pub fn admits(&self, bytes: usize) -> bool {
        let used = self.used.get();
        used == 0 || used + bytes <= self.capacity
    }

    /// Takes `bytes` if [`admits`](Self::admits) allows it.
    pub fn try_take(self: &Rc<Self>, bytes: usize) -> Option<Lease> {
        self.admits(bytes).then(|| self.take_now(bytes))
    }

    /// Waits until `bytes` are admitted, then takes them.
    pub async fn take(self: &Rc<Self>, bytes: usize) -> Lease {
        self.released.wait_until(|| self.admits(bytes)).await;
        self.take_now(bytes)
    }

    /// Takes `bytes` whatever the pool holds: for memory already in use
    /// (a response already made) that must be counted.
    pub fn take_now(self: &Rc<Self>, bytes: usize) -> Lease {
        self.add(bytes);
        Lease {
            pool: self.clone(),
            bytes,
        }
    }

    /// Resolves once `ready()` holds, checked after every release.
    pub async fn wait_until<F: Fn() -> bool + Unpin>(&self, ready: F) {
        self.released.wait_until(ready).await
    }

    fn add(&self, bytes: usize) {
        let used = self.used.get() + bytes;
        self.used.set(used);
        self.peak.set(self.peak.get().max(used));
    }

    fn remove(&self, bytes: usize) {
        let used = self.used.get();
        assert!(bytes <= used, "a lease gives back more than it took");
        self.used.set(used - bytes);
        if bytes > 0 {
            self.released.notify_all();
        }
    }
}

/// Bytes held in a pool; given back when dropped.
pub struct Lease {
    pool: Rc<MemoryPool>,
    bytes: usize,
}

impl Lease {
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Holds `bytes` from now on: what is no longer needed goes back at
    /// once, what more is needed is taken whatever the pool holds.
    pub fn resize(&mut self, bytes: usize) {
        if bytes > self.bytes {
            self.pool.add(bytes - self.bytes);
        } else {
            self.pool.remove(self.bytes - bytes);
        }
        self.bytes = bytes;
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.pool.remove(self.bytes);
    }
}

/// What one response may hold of its connection's and its core's response
/// budgets. Made when the request is read, sized to the response once it is
/// encoded, given back once it is written.
pub struct ResponseBudget {
    connection: Lease,
    core: Lease,
}

impl ResponseBudget {
    /// Holds nothing yet in either pool.
    pub fn new(connection: &Rc<MemoryPool>, core: &Rc<MemoryPool>) -> Self {
        Self {
            connection: connection.take_now(0),
            core: core.take_now(0),
        }
    }

    /// Reserves room for a response of up to `wanted` bytes, as much as both
    /// pools have left, and returns it: at least 1, so a Fetch answers with
    /// at least its first batch (Kafka's rule) whatever the budgets hold.
    pub fn reserve_up_to(&mut self, wanted: usize) -> usize {
        let room = (self.connection.pool.available() + self.connection.bytes)
            .min(self.core.pool.available() + self.core.bytes);
        // Never nothing: a held byte is what tells the connection's reader
        // that an answer is on its way, and the answer takes what it needs
        // when it is made.
        let bytes = wanted.min(room).max(1);
        self.hold(bytes);
        bytes
    }

    /// Holds exactly `bytes` (the encoded response) from now on.
    pub fn hold(&mut self, bytes: usize) {
        self.connection.resize(bytes);
        self.core.resize(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_count_until_dropped() {
        let pool = MemoryPool::new(100);
        let a = pool.try_take(60).expect("fits");
        assert_eq!(pool.used(), 60);
        assert!(pool.try_take(50).is_none(), "60 + 50 > 100");
        let b = pool.try_take(40).expect("fits exactly");
        assert!(pool.is_exhausted());
        drop(a);
        assert_eq!(pool.used(), 40);
        drop(b);
        assert_eq!(pool.used(), 0);
        assert_eq!(pool.peak(), 100);
    }

    #[test]
    fn an_empty_pool_admits_one_request_larger_than_itself() {
        let pool = MemoryPool::new(100);
        let big = pool.try_take(250).expect("alone, it is admitted");
        assert!(pool.try_take(1).is_none(), "nothing more until it is gone");
        drop(big);
        assert!(pool.try_take(1).is_some());
    }

    #[test]
    fn resize_gives_back_and_takes_more() {
        let pool = MemoryPool::new(100);
        let mut lease = pool.take_now(80);
        lease.resize(10);
        assert_eq!(pool.used(), 10);
        lease.resize(130);
        assert_eq!(
            pool.used(),
            130,
            "a made response is counted whatever it costs"
        );
        drop(lease);
        assert_eq!(pool.used(), 0);
    }

    #[test]
    fn a_response_reserves_what_both_pools_have_left() {
        let connection = MemoryPool::new(100);
        let core = MemoryPool::new(60);
        let _other = core.take_now(20);
        let mut budget = ResponseBudget::new(&connection, &core);
        assert_eq!(budget.reserve_up_to(1_000), 40, "the core has 40 left");
        assert_eq!(connection.used(), 40);
        assert_eq!(
            budget.reserve_up_to(10),
            10,
            "a smaller wish gives back the rest"
        );
        assert_eq!(core.used(), 30);
        budget.hold(75);
        assert_eq!((connection.used(), core.used()), (75, 95));
        let mut second = ResponseBudget::new(&connection, &core);
        assert_eq!(second.reserve_up_to(50), 1, "nothing left: one batch");
        assert_eq!((connection.used(), core.used()), (76, 96));
        drop(budget);
        drop(second);
        assert_eq!((connection.used(), core.used()), (0, 20));
    }

    #[test]
    fn a_waiting_take_proceeds_once_bytes_are_given_back() {
        glommio::LocalExecutorBuilder::default()
            .spawn(|| async {
                let pool = MemoryPool::new(100);
                let held = pool.take_now(90);
                let waiter = glommio::spawn_local({
                    let pool = pool.clone();
                    async move { pool.take(50).await.bytes() }
                });
                glommio::yield_if_needed().await;
                glommio::executor().yield_task_queue_now().await;
                assert_eq!(pool.used(), 90, "the waiter has not taken yet");
                drop(held);
                assert_eq!(waiter.await, 50);
                assert_eq!(pool.used(), 0);
            })
            .expect("executor")
            .join()
            .expect("join");
    }
}
