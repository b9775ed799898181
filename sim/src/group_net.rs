//! The network between simulated group members and their coordinator:
//! each message is delivered 1 to 30 ms after it is sent, and 5% are lost
//! while faults last; an answer whose records are not durable yet is held
//! until they are, and lost with the coordinator that held it.

pub(crate) struct GroupNet<M> {
    /// Messages on the way, with the time they arrive.
    in_flight: Vec<(u64, M)>,
    /// Answers waiting for the log to be durable up to their index.
    held: Vec<(usize, M)>,
    /// Messages lost so far.
    pub(crate) lost: u64,
}

impl<M> GroupNet<M> {
    pub(crate) fn new() -> Self {
        Self {
            in_flight: Vec::new(),
            held: Vec::new(),
            lost: 0,
        }
    }

    /// Sends `message` at `now` (lost 5% of the time while `faults`).
    pub(crate) fn send(&mut self, rng: &mut fastrand::Rng, now: u64, faults: bool, message: M) {
        if faults && rng.u32(0..100) < 5 {
            self.lost += 1;
            return;
        }
        let delay = 1 + rng.u64(0..30);
        self.in_flight.push((now + delay, message));
    }

    /// Answers once the log is durable up to `upto` records (the
    /// coordinator's rule), or at once with `before_durable` (the rule
    /// broken on purpose, for the seeds to catch).
    pub(crate) fn answer(
        &mut self,
        rng: &mut fastrand::Rng,
        now: u64,
        faults: bool,
        before_durable: bool,
        upto: usize,
        answer: M,
    ) {
        if before_durable {
            self.send(rng, now, faults, answer);
        } else {
            self.held.push((upto, answer));
        }
    }

    /// The log is durable up to `durable` records: the answers waiting
    /// on it go out.
    pub(crate) fn release(
        &mut self,
        rng: &mut fastrand::Rng,
        now: u64,
        faults: bool,
        durable: usize,
    ) {
        let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|(upto, _)| *upto <= durable);
        self.held = waiting;
        for (_, answer) in ready {
            self.send(rng, now, faults, answer);
        }
    }

    /// The coordinator died: the answers it held are gone.
    pub(crate) fn drop_held(&mut self) {
        self.held.clear();
    }

    /// The messages due at `now`, in the order they arrive.
    pub(crate) fn due(&mut self, now: u64) -> Vec<M> {
        let mut due = Vec::new();
        let mut i = 0;
        while i < self.in_flight.len() {
            if self.in_flight[i].0 <= now {
                due.push(self.in_flight.swap_remove(i));
            } else {
                i += 1;
            }
        }
        due.sort_by_key(|(at, _)| *at);
        due.into_iter().map(|(_, message)| message).collect()
    }
}

/// Whether a member sends a heartbeat at `now`: alive, and its wait for
/// an answer over (it sends the same again) or, with none in flight, its
/// interval up.
pub(crate) fn heartbeat_due(
    alive: bool,
    waiting_until: Option<u64>,
    next_ms: u64,
    now: u64,
) -> bool {
    alive
        && match waiting_until {
            Some(until) => now >= until,
            None => now >= next_ms,
        }
}
