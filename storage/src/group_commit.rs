//! Group commit: one round (a `syncfs`, a journal write) at a time, and
//! every caller that asks while one runs is served by the next one, which
//! starts after it asked. Shared by the filesystem sync and the journal.

use std::cell::RefCell;
use std::future::Future;

use crate::signal::Signal;

pub(crate) struct GroupCommit {
    /// What a round is, for error messages ("syncfs", "journal write").
    what: &'static str,
    /// An abandoned round leaves the group failed: its work may be half
    /// done and nobody can tell (the journal's taken records), rather than
    /// just not started (a `syncfs`, which the next round repeats).
    fail_on_abandon: bool,
    state: RefCell<Rounds>,
    changed: Signal,
}

#[derive(Default)]
struct Rounds {
    /// The last round started; rounds run one at a time.
    started: u64,
    /// The last round finished.
    finished: u64,
    running: bool,
    /// Sticky: every later round fails with it.
    failed: Option<String>,
}

impl GroupCommit {
    pub(crate) fn new(what: &'static str, fail_on_abandon: bool) -> Self {
        Self {
            what,
            fail_on_abandon,
            state: RefCell::new(Rounds::default()),
            changed: Signal::default(),
        }
    }

    /// The round that serves a caller asking now: the next one to start.
    pub(crate) fn next_round(&self) -> std::io::Result<u64> {
        let state = self.state.borrow();
        match &state.failed {
            Some(message) => Err(std::io::Error::other(message.clone())),
            None => Ok(state.started + 1),
        }
    }

    /// Resolves once round `need` has finished, running rounds with `round`
    /// when none runs.
    pub(crate) async fn wait_for<F, Fut>(&self, need: u64, mut round: F) -> std::io::Result<()>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = std::io::Result<()>>,
    {
        loop {
            {
                let state = self.state.borrow();
                if let Some(message) = &state.failed {
                    return Err(std::io::Error::other(message.clone()));
                }
                if state.finished >= need {
                    return Ok(());
                }
            }
            if self.state.borrow().running {
                self.changed
                    .wait_until(|| {
                        let s = self.state.borrow();
                        !s.running || s.finished >= need || s.failed.is_some()
                    })
                    .await;
                continue;
            }
            let generation = {
                let mut state = self.state.borrow_mut();
                state.running = true;
                state.started += 1;
                state.started
            };
            // Should this future be dropped mid-round, the others must not
            // wait for a finish nobody will record.
            let mut guard = RunningGuard(Some(self));
            let result = round().await;
            guard.0 = None;
            let mut state = self.state.borrow_mut();
            state.running = false;
            state.finished = generation;
            if let Err(e) = &result {
                state.failed = Some(format!("{} failed: {e}", self.what));
            }
            drop(state);
            self.changed.notify_all();
        }
    }

    /// Fails the group: every waiting and later caller gets `message`.
    pub(crate) fn fail(&self, message: String) {
        self.state.borrow_mut().failed.get_or_insert(message);
        self.changed.notify_all();
    }

    pub(crate) fn failure(&self) -> Option<String> {
        self.state.borrow().failed.clone()
    }

    pub(crate) fn finished(&self) -> u64 {
        self.state.borrow().finished
    }

    /// Notified on every round's end and failure.
    pub(crate) fn signal(&self) -> &Signal {
        &self.changed
    }
}

struct RunningGuard<'a>(Option<&'a GroupCommit>);

impl Drop for RunningGuard<'_> {
    fn drop(&mut self) {
        if let Some(group) = self.0 {
            let mut state = group.state.borrow_mut();
            state.running = false;
            if group.fail_on_abandon {
                state.failed = Some(format!("a {} was abandoned", group.what));
            }
            drop(state);
            group.changed.notify_all();
        }
    }
}
