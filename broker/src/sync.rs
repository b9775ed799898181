//! Small single-core synchronisation helpers: a level-triggered
//! notification and a gate that counts holders and wakes when it empties.

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::Duration;

/// The tasks waiting on a [`Notify`] or a [`Gate`]. Each waiting future
/// holds a slot from its first poll until it is dropped, so a waiter polled
/// again and again (a connection races every read against the stop
/// notification) keeps one slot, and a waiter that gives up (a fetch whose
/// data arrived first) leaves nothing behind. Registering and leaving cost
/// O(1) however many tasks ever waited.
#[derive(Default)]
struct Waiters {
    /// `None` in a held slot: its waiter was woken or has not parked yet.
    slots: RefCell<Vec<Option<Waker>>>,
    /// Slots whose waiters were dropped, for reuse.
    free: RefCell<Vec<usize>>,
}

impl Waiters {
    /// Parks `waker` in the slot `key` holds, taking a slot on first use.
    fn park(&self, key: &mut Option<usize>, waker: &Waker) {
        let mut slots = self.slots.borrow_mut();
        let index = *key.get_or_insert_with(|| match self.free.borrow_mut().pop() {
            Some(index) => index,
            None => {
                slots.push(None);
                slots.len() - 1
            }
        });
        match &mut slots[index] {
            Some(parked) if parked.will_wake(waker) => {}
            slot => *slot = Some(waker.clone()),
        }
    }

    /// Gives the slot back (the waiting future is gone).
    fn leave(&self, key: usize) {
        self.slots.borrow_mut()[key] = None;
        self.free.borrow_mut().push(key);
    }

    fn wake_all(&self) {
        let woken: Vec<Waker> = self
            .slots
            .borrow_mut()
            .iter_mut()
            .filter_map(Option::take)
            .collect();
        for waker in woken {
            waker.wake();
        }
    }

    /// Slots held by waiting futures.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.slots.borrow().len() - self.free.borrow().len()
    }
}

/// A future that is ready once `ready()` holds, parked in `waiters` until
/// then and out of them once dropped.
struct WaitFor<'a, F: Fn() -> bool> {
    waiters: &'a Waiters,
    ready: F,
    key: Option<usize>,
}

impl<F: Fn() -> bool + Unpin> std::future::Future for WaitFor<'_, F> {
    type Output = ();

    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if (this.ready)() {
            return Poll::Ready(());
        }
        this.waiters.park(&mut this.key, cx.waker());
        Poll::Pending
    }
}

impl<F: Fn() -> bool> Drop for WaitFor<'_, F> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.waiters.leave(key);
        }
    }
}

/// A flag that, once raised, stays raised and wakes every waiter.
#[derive(Default)]
pub struct Notify {
    raised: Cell<bool>,
    waiters: Waiters,
}

impl Notify {
    pub fn raise(&self) {
        self.raised.set(true);
        self.waiters.wake_all();
    }

    pub fn is_raised(&self) -> bool {
        self.raised.get()
    }

    pub async fn wait(&self) {
        WaitFor {
            waiters: &self.waiters,
            ready: || self.raised.get(),
            key: None,
        }
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

/// Tasks waiting for a condition on shared state to hold; whoever changes
/// that state calls [`Condition::notify_all`] and each waiter checks again.
#[derive(Default)]
pub struct Condition {
    waiters: Waiters,
}

impl Condition {
    pub fn notify_all(&self) {
        self.waiters.wake_all();
    }

    /// Resolves once `ready()` holds, checked now and after each notification.
    pub async fn wait_until<F: Fn() -> bool + Unpin>(&self, ready: F) {
        WaitFor {
            waiters: &self.waiters,
            ready,
            key: None,
        }
        .await
    }
}

/// Counts holders; `wait_empty` resolves when none are left.
#[derive(Default)]
pub struct Gate {
    count: Cell<usize>,
    empty: Waiters,
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
        WaitFor {
            waiters: &self.empty,
            ready: || self.count.get() == 0,
            key: None,
        }
        .await
    }
}

impl Drop for GateGuard {
    fn drop(&mut self) {
        let count = self.gate.count.get() - 1;
        self.gate.count.set(count);
        if count == 0 {
            self.gate.empty.wake_all();
        }
    }
}

/// Which children of a `join_all` were woken since the parent last ran.
struct JoinWakes {
    woken: std::sync::Mutex<Vec<usize>>,
    parent: std::sync::Mutex<Option<Waker>>,
}

/// The waker of one child of a `join_all`: records the child's index and
/// wakes the parent, so the parent polls only the children that can move.
struct ChildWaker {
    index: usize,
    wakes: std::sync::Arc<JoinWakes>,
}

impl std::task::Wake for ChildWaker {
    fn wake(self: std::sync::Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        self.wakes
            .woken
            .lock()
            .expect("join wakes")
            .push(self.index);
        if let Some(parent) = self.wakes.parent.lock().expect("join parent").as_ref() {
            parent.wake_by_ref();
        }
    }
}

/// Polls every future to completion and returns their outputs in order.
/// Each child has its own waker, so a wake-up polls only the children that
/// were woken: a produce or fetch over 1,000 partitions costs O(wake-ups),
/// not O(partitions) per wake-up.
pub async fn join_all<T>(
    futures: Vec<std::pin::Pin<Box<dyn std::future::Future<Output = T> + '_>>>,
) -> Vec<T> {
    let count = futures.len();
    let mut futures: Vec<_> = futures.into_iter().map(Some).collect();
    let mut outputs: Vec<Option<T>> = futures.iter().map(|_| None).collect();
    let wakes = std::sync::Arc::new(JoinWakes {
        // Every child is polled once at first.
        woken: std::sync::Mutex::new((0..count).collect()),
        parent: std::sync::Mutex::new(None),
    });
    let wakers: Vec<Waker> = (0..count)
        .map(|index| {
            Waker::from(std::sync::Arc::new(ChildWaker {
                index,
                wakes: wakes.clone(),
            }))
        })
        .collect();
    let mut remaining = count;
    poll_fn(|cx| {
        {
            let mut parent = wakes.parent.lock().expect("join parent");
            if !parent.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *parent = Some(cx.waker().clone());
            }
        }
        // Bounded: each round takes what was woken; a child woken while
        // being polled is taken in the next round of this same loop.
        loop {
            let woken = std::mem::take(&mut *wakes.woken.lock().expect("join wakes"));
            if woken.is_empty() {
                break;
            }
            for index in woken {
                let Some(future) = futures[index].as_mut() else {
                    continue;
                };
                let mut child_cx = std::task::Context::from_waker(&wakers[index]);
                if let Poll::Ready(value) = future.as_mut().poll(&mut child_cx) {
                    outputs[index] = Some(value);
                    futures[index] = None;
                    remaining -= 1;
                }
            }
        }
        if remaining == 0 {
            Poll::Ready(())
        } else {
            Poll::Pending
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
        let mut wait = std::pin::pin!(notify.wait());
        for _ in 0..100_000 {
            assert!(wait.as_mut().poll(&mut cx).is_pending());
        }
        assert_eq!(notify.waiters.held(), 1);
        assert_eq!(notify.waiters.slots.borrow().len(), 1);
        notify.raise();
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert!(wait.as_mut().poll(&mut cx).is_ready());
    }

    /// Every long-polling fetch races its wait against the stop flag; the
    /// fetches that end (their data came) must leave no waker behind, or the
    /// list grows with every fetch the broker ever served.
    #[test]
    fn dropped_waiters_leave_nothing_behind() {
        let notify = Notify::default();
        let gate = Rc::new(Gate::default());
        let guard = gate.enter();
        let counts: Vec<Arc<Count>> = (0..3)
            .map(|_| Arc::new(Count(AtomicUsize::new(0))))
            .collect();
        for round in 0..10_000 {
            // A distinct task each time, as each fetch is its own task.
            let waker = Waker::from(Arc::new(Count(AtomicUsize::new(0))));
            let mut cx = Context::from_waker(&waker);
            let mut wait = Box::pin(notify.wait());
            assert!(wait.as_mut().poll(&mut cx).is_pending());
            let mut empty = Box::pin(gate.wait_empty());
            assert!(empty.as_mut().poll(&mut cx).is_pending());
            assert_eq!(notify.waiters.held(), 1, "round {round}");
            drop(wait);
            drop(empty);
        }
        assert_eq!(notify.waiters.held(), 0);
        assert_eq!(gate.empty.held(), 0);
        assert!(notify.waiters.slots.borrow().len() <= 1, "slots are reused");

        // Waiters still parked are all woken, each once.
        let mut waits: Vec<_> = counts
            .iter()
            .map(|count| {
                let waker = Waker::from(count.clone());
                let mut wait = Box::pin(notify.wait());
                assert!(wait
                    .as_mut()
                    .poll(&mut Context::from_waker(&waker))
                    .is_pending());
                wait
            })
            .collect();
        notify.raise();
        for count in &counts {
            assert_eq!(count.0.load(Ordering::SeqCst), 1);
        }
        let waker = Waker::from(counts[0].clone());
        for wait in waits.iter_mut() {
            assert!(wait
                .as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_ready());
        }
        drop(guard);
    }
}

#[cfg(test)]
mod join_tests {
    use super::*;
    use std::future::Future;
    use std::task::{Context, Wake};

    struct Noop;
    impl Wake for Noop {
        fn wake(self: std::sync::Arc<Self>) {}
    }

    /// A future that is ready after `n` polls, counting every poll.
    struct Countdown {
        left: usize,
        polls: Rc<Cell<usize>>,
        waker: Rc<RefCell<Option<Waker>>>,
    }

    impl Future for Countdown {
        type Output = usize;
        fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<usize> {
            self.polls.set(self.polls.get() + 1);
            if self.left == 0 {
                return Poll::Ready(self.polls.get());
            }
            self.left -= 1;
            *self.waker.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    #[test]
    fn only_woken_children_are_polled_and_outputs_keep_their_order() {
        let polls = Rc::new(Cell::new(0));
        let wakers: Vec<Rc<RefCell<Option<Waker>>>> = (0..100).map(|_| Rc::default()).collect();
        let futures = (0..100)
            .map(|i| {
                Box::pin(Countdown {
                    left: 1,
                    polls: polls.clone(),
                    waker: wakers[i].clone(),
                }) as std::pin::Pin<Box<dyn Future<Output = usize>>>
            })
            .collect();
        let mut join = std::pin::pin!(join_all(futures));
        let noop = Waker::from(std::sync::Arc::new(Noop));
        let mut cx = Context::from_waker(&noop);
        assert!(join.as_mut().poll(&mut cx).is_pending());
        assert_eq!(polls.get(), 100, "each child polled once at first");
        // Waking one child polls that child only.
        wakers[7].borrow_mut().take().unwrap().wake();
        assert!(join.as_mut().poll(&mut cx).is_pending());
        assert_eq!(polls.get(), 101);
        for (i, waker) in wakers.iter().enumerate() {
            if i != 7 {
                waker.borrow_mut().take().unwrap().wake();
            }
        }
        let Poll::Ready(outputs) = join.as_mut().poll(&mut cx) else {
            panic!("all children are done");
        };
        assert_eq!(polls.get(), 200);
        assert_eq!(outputs.len(), 100);
    }
}

/// One lock per key (a coordinator's partition), made on first use, so
/// that appends to one partition happen in the order they were planned.
#[derive(Default)]
pub struct KeyedLocks {
    locks:
        std::cell::RefCell<std::collections::HashMap<i32, std::rc::Rc<glommio::sync::Semaphore>>>,
}

impl KeyedLocks {
    /// Takes `key`'s lock, waiting for its holder.
    pub async fn lock(&self, key: i32) -> glommio::sync::StaticPermit {
        let lock = self
            .locks
            .borrow_mut()
            .entry(key)
            .or_insert_with(|| std::rc::Rc::new(glommio::sync::Semaphore::new(1)))
            .clone();
        lock.acquire_static_permit(1)
            .await
            .expect("keyed locks are never closed")
    }
}

/// Turns per key (a producer on one partition): whoever takes a turn waits
/// for those before it, in arrival order, and a key with a turn taken or
/// waited for is [`Turns::busy`], so that work arriving later can queue
/// behind it instead of overtaking it. A key's entry goes once no one holds
/// or waits for its turn.
#[derive(Default)]
pub struct Turns {
    queues: Rc<RefCell<std::collections::HashMap<i64, Rc<glommio::sync::Semaphore>>>>,
}

/// A turn taken; the next in line goes once it is dropped.
pub struct Turn {
    queues: Rc<RefCell<std::collections::HashMap<i64, Rc<glommio::sync::Semaphore>>>>,
    key: i64,
    queue: Option<Rc<glommio::sync::Semaphore>>,
    permit: Option<glommio::sync::StaticPermit>,
}

impl Turns {
    /// Whether someone holds or waits for `key`'s turn.
    pub fn busy(&self, key: i64) -> bool {
        self.queues.borrow().contains_key(&key)
    }

    /// Takes `key`'s turn once those before have had theirs.
    pub async fn take(&self, key: i64) -> Turn {
        let queue = self
            .queues
            .borrow_mut()
            .entry(key)
            .or_insert_with(|| Rc::new(glommio::sync::Semaphore::new(1)))
            .clone();
        let mut turn = Turn {
            queues: self.queues.clone(),
            key,
            queue: Some(queue.clone()),
            permit: None,
        };
        turn.permit = Some(
            queue
                .acquire_static_permit(1)
                .await
                .expect("turns are never closed"),
        );
        turn
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        drop(self.permit.take());
        let Some(queue) = self.queue.take() else {
            return;
        };
        // Held by the map and this turn only: no one waits behind it.
        if Rc::strong_count(&queue) == 2 {
            self.queues.borrow_mut().remove(&self.key);
        }
    }
}

#[cfg(test)]
mod turn_tests {
    use super::*;

    #[test]
    fn turns_go_in_arrival_order_and_a_key_is_busy_until_the_last_is_done() {
        let order = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .make()
            .expect("an executor")
            .run(async {
                let turns = Rc::new(Turns::default());
                let order = Rc::new(RefCell::new(Vec::new()));
                assert!(!turns.busy(1));
                let first = turns.take(1).await;
                assert!(turns.busy(1));
                let mut waiting = Vec::new();
                for i in 0..3 {
                    let (turns, order) = (turns.clone(), order.clone());
                    waiting.push(glommio::spawn_local(async move {
                        let _turn = turns.take(1).await;
                        order.borrow_mut().push(i);
                        glommio::yield_if_needed().await;
                    }));
                    // Let each queue up before the next is spawned.
                    glommio::executor().yield_task_queue_now().await;
                }
                // Another key is not held up.
                drop(turns.take(2).await);
                assert!(!turns.busy(2));
                assert!(order.borrow().is_empty());
                drop(first);
                for task in waiting {
                    task.await;
                }
                assert!(!turns.busy(1), "no one holds or waits for the turn");
                let order = order.borrow().clone();
                order
            });
        assert_eq!(order, vec![0, 1, 2]);
    }
}
