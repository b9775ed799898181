//! Scatter/gather for requests that name many partitions (Produce, Fetch,
//! ListOffsets, DescribeProducers): each partition's work is grouped by
//! the core that owns it, each core runs its group (the local core inline,
//! the others over the cross-core channels of [`Shard::run_on`]), and the
//! outcomes land back in the slots the partitions had in the request, so
//! the answer lists topics and partitions in the order asked, duplicates
//! included.
//!
//! A partition answered without a hop (an unknown topic, a bad batch) takes
//! its slot through [`Scatter::answer`]; a routed one through
//! [`Scatter::route`]; one another broker leads (load-balancer mode)
//! through [`Scatter::forward`], with work of its own type `R` (what the
//! leader is sent). The outcome type is the handler's own, so the same
//! helper carries errors decided here, answers from the owner, and
//! answers from another broker.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use crate::shard::Shard;
use crate::sync::join_all;

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// Where a routed partition's outcome goes: its place in the request. The
/// owner carries it back untouched; only this module makes one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot(usize);

/// The work of one core: each routed partition's slot and work, in the
/// order the request named them.
pub type CoreWork<W> = Vec<(Slot, W)>;

/// The work for one other broker: each forwarded partition's slot and
/// work, in request order.
pub type BrokerWork<R> = Vec<(Slot, R)>;

/// One request's partitions: their outcomes in request order, and the work
/// still to run, grouped by owning core, or by leading broker when it is
/// another one.
pub struct Scatter<W, O, R = ()> {
    /// `None` until a routed partition's owner answers.
    outcomes: Vec<Option<O>>,
    by_core: BTreeMap<usize, CoreWork<W>>,
    by_broker: BTreeMap<i32, BrokerWork<R>>,
}

impl<W, O, R> Default for Scatter<W, O, R> {
    fn default() -> Self {
        Self {
            outcomes: Vec::new(),
            by_core: BTreeMap::new(),
            by_broker: BTreeMap::new(),
        }
    }
}

impl<W, O, R> Scatter<W, O, R> {
    /// The next partition of the request, answered here without a hop.
    /// Returns its index in request order.
    pub fn answer(&mut self, outcome: O) -> usize {
        self.outcomes.push(Some(outcome));
        self.outcomes.len() - 1
    }

    /// The next partition of the request, to be answered by `work` on core
    /// `core`. Returns its index in request order.
    pub fn route(&mut self, core: usize, work: W) -> usize {
        let index = self.outcomes.len();
        self.outcomes.push(None);
        self.by_core
            .entry(core)
            .or_default()
            .push((Slot(index), work));
        index
    }

    /// The next partition of the request, to be answered by the broker
    /// `broker` that leads it. Returns its index in request order.
    pub fn forward(&mut self, broker: i32, work: R) -> usize {
        let index = self.outcomes.len();
        self.outcomes.push(None);
        self.by_broker
            .entry(broker)
            .or_default()
            .push((Slot(index), work));
        index
    }

    /// The forwarded work, by broker, handed over: the caller sends it and
    /// gives the answers back with [`Scatter::place_forwarded`].
    pub fn take_forwarded(&mut self) -> BTreeMap<i32, BrokerWork<R>> {
        std::mem::take(&mut self.by_broker)
    }

    /// Puts the answers of forwarded work in their slots.
    pub fn place_forwarded(&mut self, answers: Vec<BrokerWork<O>>) {
        self.place(answers);
    }

    /// Whether no partition waits for a core.
    pub fn nothing_routed(&self) -> bool {
        self.by_core.is_empty()
    }

    /// The routed work, by core.
    pub fn by_core(&self) -> impl Iterator<Item = (usize, &CoreWork<W>)> {
        self.by_core.iter().map(|(&core, work)| (core, work))
    }

    /// The outcomes of the routed partitions answered so far.
    pub fn routed_outcomes(&self) -> impl Iterator<Item = &O> {
        self.by_core
            .values()
            .flatten()
            .filter_map(|(slot, _)| self.outcomes[slot.0].as_ref())
    }

    /// Every outcome, in request order.
    ///
    /// # Panics
    /// If a routed partition has not been gathered.
    pub fn outcomes(&self) -> impl Iterator<Item = &O> {
        self.outcomes
            .iter()
            .map(|outcome| outcome.as_ref().expect("every partition answered"))
    }

    /// Every outcome, in request order, to change.
    ///
    /// # Panics
    /// If a routed partition has not been gathered.
    pub fn outcomes_mut(&mut self) -> impl Iterator<Item = &mut O> {
        self.outcomes
            .iter_mut()
            .map(|outcome| outcome.as_mut().expect("every partition answered"))
    }

    /// Every outcome, in request order, taken.
    ///
    /// # Panics
    /// If a routed partition has not been gathered.
    pub fn into_outcomes(self) -> impl Iterator<Item = O> {
        self.outcomes
            .into_iter()
            .map(|outcome| outcome.expect("every partition answered"))
    }

    /// Puts each core's answers in their slots. A core answers each slot it
    /// was given exactly once.
    fn place(&mut self, answers: Vec<CoreWork<O>>) {
        for (slot, outcome) in answers.into_iter().flatten() {
            let previous = self.outcomes[slot.0].replace(outcome);
            assert!(previous.is_none(), "slot {} answered twice", slot.0);
        }
    }
}

impl<W: Send + 'static, O: Send + 'static, R> Scatter<W, O, R> {
    /// Runs `run` on every owning core with that core's work, all cores
    /// concurrently, and places the outcomes it returns. `run` gets the
    /// owner's shard and returns one `(slot, outcome)` per `(slot, work)`
    /// it was given. The work is handed over: a second gather has none.
    pub async fn gather<F, Fut>(&mut self, shard: &Rc<Shard>, run: F)
    where
        F: Fn(Rc<Shard>, CoreWork<W>) -> Fut + Clone + Send + 'static,
        Fut: Future<Output = CoreWork<O>> + 'static,
    {
        let by_core = std::mem::take(&mut self.by_core);
        let answers = run_all(by_core.into_iter(), hop_to(shard, run)).await;
        self.place(answers);
    }

    /// As [`Scatter::gather`], and at the same time `forward` sends each
    /// other broker its work (on this core) and returns one
    /// `(slot, outcome)` per `(slot, work)` it was given.
    pub async fn gather_forwarding<F, Fut, G, GFut>(
        &mut self,
        shard: &Rc<Shard>,
        run: F,
        forward: G,
    ) where
        F: Fn(Rc<Shard>, CoreWork<W>) -> Fut + Clone + Send + 'static,
        Fut: Future<Output = CoreWork<O>> + 'static,
        G: Fn(i32, BrokerWork<R>) -> GFut,
        GFut: Future<Output = BrokerWork<O>>,
    {
        let by_core = std::mem::take(&mut self.by_core);
        let by_broker = self.take_forwarded();
        let forwarded = join_all(
            by_broker
                .into_iter()
                .map(|(broker, work)| Box::pin(forward(broker, work)) as BoxFuture<'_, _>)
                .collect(),
        );
        let local = run_all(by_core.into_iter(), hop_to(shard, run));
        let (mut answers, forwarded) = futures_lite::future::zip(local, forwarded).await;
        answers.extend(forwarded);
        self.place(answers);
    }

    /// As [`Scatter::gather`], but each core gets a copy of its work, which
    /// stays here for the next round (a fetch reads again after waiting).
    pub async fn gather_again<F, Fut>(&mut self, shard: &Rc<Shard>, run: F)
    where
        W: Clone,
        F: Fn(Rc<Shard>, CoreWork<W>) -> Fut + Clone + Send + 'static,
        Fut: Future<Output = CoreWork<O>> + 'static,
    {
        for (slot, _) in self.by_core.values().flatten() {
            self.outcomes[slot.0] = None;
        }
        let by_core = self
            .by_core
            .iter()
            .map(|(&core, work)| (core, work.clone()));
        let answers = run_all(by_core, hop_to(shard, run)).await;
        self.place(answers);
    }
}

/// Runs `hop(core, work)` for every core's work concurrently; the answers
/// come back core by core.
async fn run_all<'a, W, O, Hop>(
    by_core: impl Iterator<Item = (usize, CoreWork<W>)>,
    hop: Hop,
) -> Vec<CoreWork<O>>
where
    Hop: Fn(usize, CoreWork<W>) -> BoxFuture<'a, CoreWork<O>>,
{
    join_all(by_core.map(|(core, work)| hop(core, work)).collect()).await
}

/// A hop that runs `run` with the work on the given core (inline when it
/// is this one).
fn hop_to<'a, W, O, F, Fut>(
    shard: &'a Rc<Shard>,
    run: F,
) -> impl Fn(usize, CoreWork<W>) -> BoxFuture<'a, CoreWork<O>>
where
    W: Send + 'static,
    O: Send + 'static,
    F: Fn(Rc<Shard>, CoreWork<W>) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = CoreWork<O>> + 'static,
{
    move |core, work| {
        let run = run.clone();
        Box::pin(shard.run_on(core, move |owner| run(owner, work)))
    }
}

/// The topics of a request forwarded to one broker, built from its parts
/// in request order: consecutive parts of the same topic of the client's
/// request (`topic_of` gives its index there) share one entry, made by
/// `topic` and filled by `add`. A topic whose parts are not consecutive in
/// the client's request is listed again, as the client listed it.
pub fn forwarded_topics<R, T>(
    work: &BrokerWork<R>,
    topic_of: impl Fn(&R) -> usize,
    topic: impl Fn(usize) -> T,
    mut add: impl FnMut(&mut T, &R),
) -> Vec<T> {
    let mut topics: Vec<T> = Vec::new();
    let mut last = None;
    for (_, part) in work {
        let index = topic_of(part);
        if last != Some(index) {
            topics.push(topic(index));
            last = Some(index);
        }
        add(topics.last_mut().expect("pushed above"), part);
    }
    topics
}

/// A forwarded request's outcomes placed in the slots of its parts: the
/// leader's answers, one per part in the order sent; or, when there is no
/// answer or it does not list every part, `refused` for each part (the
/// client retries after refreshing its metadata).
pub fn forwarded_outcomes<R, O>(
    broker: i32,
    work: BrokerWork<R>,
    answers: Result<Vec<O>, String>,
    refused: impl Fn() -> O,
) -> BrokerWork<O> {
    let answers = answers.and_then(|answers| {
        if answers.len() == work.len() {
            Ok(answers)
        } else {
            Err(format!(
                "the leader answered {} partitions of {}",
                answers.len(),
                work.len()
            ))
        }
    });
    match answers {
        Ok(answers) => work
            .into_iter()
            .map(|(slot, _)| slot)
            .zip(answers)
            .collect(),
        Err(error) => {
            tracing::debug!(broker, %error, partitions = work.len(), "forwarded request not answered");
            work.into_iter()
                .map(|(slot, _)| (slot, refused()))
                .collect()
        }
    }
}

/// Runs `each` over a core's work in order, one partition after the other.
pub async fn each_in_order<W, O, Fut>(
    work: CoreWork<W>,
    mut each: impl FnMut(W) -> Fut,
) -> CoreWork<O>
where
    Fut: Future<Output = O>,
{
    let mut answers = Vec::with_capacity(work.len());
    for (slot, work) in work {
        answers.push((slot, each(work).await));
    }
    answers
}

/// Runs `each` over a core's work, every partition at once (appends that
/// wait for a sync wait together).
pub async fn each_concurrently<'a, W, O, Fut>(
    work: CoreWork<W>,
    mut each: impl FnMut(W) -> Fut,
) -> CoreWork<O>
where
    Fut: Future<Output = O> + 'a,
{
    let running = work
        .into_iter()
        .map(|(slot, work)| {
            let running = each(work);
            Box::pin(async move { (slot, running.await) }) as BoxFuture<'a, _>
        })
        .collect();
    join_all(running).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Routes `partitions` ((name, core) each, in request order; a core of
    /// `None` is answered here), gathers with every core answering its
    /// partitions in reverse order and the cores finishing in reverse, and
    /// returns the outcomes in the order they come out.
    fn check(
        partitions: &[(&'static str, Option<usize>)],
        expected_cores: &[usize],
    ) -> Vec<String> {
        let mut scatter: Scatter<&'static str, String> = Scatter::default();
        for (index, &(name, core)) in partitions.iter().enumerate() {
            let at = match core {
                Some(core) => scatter.route(core, name),
                None => scatter.answer(format!("{name}@here")),
            };
            assert_eq!(at, index);
        }
        let cores: Vec<usize> = scatter.by_core().map(|(core, _)| core).collect();
        assert_eq!(cores, expected_cores);
        let hop = |core: usize, work: CoreWork<&'static str>| {
            Box::pin(async move {
                // Later cores finish first.
                for _ in 0..(10 - core) {
                    futures_lite::future::yield_now().await;
                }
                work.into_iter()
                    .rev()
                    .map(|(slot, name)| (slot, format!("{name}@{core}")))
                    .collect()
            }) as BoxFuture<'_, _>
        };
        let by_core = std::mem::take(&mut scatter.by_core);
        let answers = futures_lite::future::block_on(run_all(by_core.into_iter(), hop));
        scatter.place(answers);
        assert!(scatter.nothing_routed(), "the work was handed over");
        scatter.into_outcomes().collect()
    }

    #[test]
    fn outcomes_come_back_in_request_order_across_cores() {
        let got = check(
            &[
                ("a-0", Some(1)),
                ("a-1", Some(0)),
                ("b-0", None),
                ("a-2", Some(1)),
                ("c-0", Some(2)),
                ("a-3", Some(0)),
            ],
            &[0, 1, 2],
        );
        assert_eq!(
            got,
            ["a-0@1", "a-1@0", "b-0@here", "a-2@1", "c-0@2", "a-3@0"]
        );
    }

    #[test]
    fn duplicates_keep_their_own_slots() {
        let got = check(
            &[
                ("a-0", Some(1)),
                ("a-0", Some(1)),
                ("x-9", None),
                ("a-0", Some(1)),
                ("x-9", None),
            ],
            &[1],
        );
        assert_eq!(got, ["a-0@1", "a-0@1", "x-9@here", "a-0@1", "x-9@here"]);
    }

    #[test]
    fn a_request_answered_here_needs_no_core() {
        let got = check(&[("x-1", None), ("x-2", None)], &[]);
        assert_eq!(got, ["x-1@here", "x-2@here"]);
    }

    #[test]
    fn a_core_work_keeps_request_order() {
        let mut scatter: Scatter<u32, u32> = Scatter::default();
        for (value, core) in [(5, 1), (6, 0), (7, 1), (8, 1)] {
            scatter.route(core, value);
        }
        let work: Vec<Vec<u32>> = scatter
            .by_core()
            .map(|(_, work)| work.iter().map(|(_, value)| *value).collect())
            .collect();
        assert_eq!(work, [vec![6], vec![5, 7, 8]]);
    }

    #[test]
    fn forwarded_answers_take_their_slots_among_local_ones() {
        let mut scatter: Scatter<&'static str, String, &'static str> = Scatter::default();
        scatter.route(0, "a-0");
        assert_eq!(scatter.forward(2, "a-1"), 1);
        scatter.answer("x-0@here".to_string());
        scatter.forward(3, "b-0");
        scatter.forward(2, "b-1");
        scatter.route(1, "b-2");
        let forwarded = scatter.take_forwarded();
        let brokers: Vec<i32> = forwarded.keys().copied().collect();
        assert_eq!(brokers, [2, 3]);
        // The leader answers its parts in the order sent.
        let answers: Vec<BrokerWork<String>> = forwarded
            .into_iter()
            .map(|(broker, work)| {
                forwarded_outcomes(
                    broker,
                    work.clone(),
                    Ok(work.iter().map(|(_, w)| format!("{w}@{broker}")).collect()),
                    || "refused".to_string(),
                )
            })
            .collect();
        scatter.place_forwarded(answers);
        let hop = |core: usize, work: CoreWork<&'static str>| {
            Box::pin(async move {
                work.into_iter()
                    .map(|(slot, name)| (slot, format!("{name}@core{core}")))
                    .collect()
            }) as BoxFuture<'_, _>
        };
        let by_core = std::mem::take(&mut scatter.by_core);
        let answers = futures_lite::future::block_on(run_all(by_core.into_iter(), hop));
        scatter.place(answers);
        let got: Vec<String> = scatter.into_outcomes().collect();
        assert_eq!(
            got,
            [
                "a-0@core0",
                "a-1@2",
                "x-0@here",
                "b-0@3",
                "b-1@2",
                "b-2@core1"
            ]
        );
    }

    #[test]
    fn a_forwarded_answer_that_misses_parts_refuses_them_all() {
        let work: BrokerWork<u32> = vec![(Slot(0), 10), (Slot(3), 11)];
        let refused = forwarded_outcomes(2, work.clone(), Ok(vec![1]), || 6);
        assert_eq!(refused, [(Slot(0), 6), (Slot(3), 6)]);
        let failed = forwarded_outcomes(2, work.clone(), Err("unreachable".into()), || 6);
        assert_eq!(failed, [(Slot(0), 6), (Slot(3), 6)]);
        let answered = forwarded_outcomes(2, work, Ok(vec![0, 0]), || 6);
        assert_eq!(answered, [(Slot(0), 0), (Slot(3), 0)]);
    }

    #[test]
    fn forwarded_topics_follow_the_request() {
        // (topic index, partition) parts, in request order.
        let work: BrokerWork<(usize, i32)> = vec![
            (Slot(0), (0, 1)),
            (Slot(1), (0, 4)),
            (Slot(3), (1, 0)),
            (Slot(5), (0, 2)),
        ];
        let topics = forwarded_topics(
            &work,
            |part| part.0,
            |index| (index, Vec::new()),
            |topic: &mut (usize, Vec<i32>), part| topic.1.push(part.1),
        );
        assert_eq!(topics, [(0, vec![1, 4]), (1, vec![0]), (0, vec![2])]);
    }

    #[test]
    #[should_panic(expected = "answered twice")]
    fn a_slot_answered_twice_is_a_bug() {
        let mut scatter: Scatter<u32, u32> = Scatter::default();
        scatter.route(0, 1);
        scatter.route(0, 2);
        let hop = |_core: usize, work: CoreWork<u32>| {
            let first = work[0].0;
            Box::pin(async move { vec![(first, 1u32), (first, 2)] }) as BoxFuture<'_, _>
        };
        let by_core = std::mem::take(&mut scatter.by_core);
        let answers = futures_lite::future::block_on(run_all(by_core.into_iter(), hop));
        scatter.place(answers);
    }
}
