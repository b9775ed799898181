//! The active controller's view of its brokers' liveness: when each was
//! last heard, and which have been silent for longer than the session
//! timeout (and are fenced). Plain code over a [`Moment`] the caller
//! passes in: the broker's voter uses [`std::time::Instant`], the
//! simulator its manual clock's milliseconds.
//!
//! # Rules
//!
//! - A heartbeat makes its broker heard now ([`Sessions::heard`]).
//! - A broker is expired when it was never heard or was last heard more
//!   than the session timeout ago ([`Sessions::expired`]).
//! - **Time the controller did not run does not count.** The caller turns
//!   its loop at least once a tick and reports each turn
//!   ([`Sessions::turn`]); a turn late by at least the stall threshold
//!   means the controller was not running (its process was stopped, its
//!   VM stalled), so no heartbeat could be taken meanwhile. Every session
//!   moves on by the stall and is at least a failover grace from expiring.
//!   Without this a controller resuming after more than a session fences
//!   every live broker at once.
//! - **A new active controller gives every broker a failover grace**
//!   ([`Sessions::took_over`]): a broker that died with the old controller
//!   is fenced within the grace, one alive is heard meanwhile; a heartbeat
//!   taken since the election counts as it is.
//! - **A closed heartbeat connection shortens the session** to a grace
//!   from now ([`Sessions::shorten`]), never lengthens it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::replica::NodeId;

/// A point in time, as the caller's clock gives it.
pub trait Moment: Copy + Ord + std::fmt::Debug {
    /// `self` plus `duration`.
    fn after(self, duration: Duration) -> Self;
    /// `self` minus `duration`, if the clock reaches back that far.
    fn before(self, duration: Duration) -> Option<Self>;
    /// How long after `earlier` this is (zero if it is not after it).
    fn since(self, earlier: Self) -> Duration;
}

impl Moment for Instant {
    fn after(self, duration: Duration) -> Self {
        self + duration
    }
    fn before(self, duration: Duration) -> Option<Self> {
        self.checked_sub(duration)
    }
    fn since(self, earlier: Self) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

/// Milliseconds of a manual clock.
impl Moment for u64 {
    fn after(self, duration: Duration) -> Self {
        self + duration.as_millis() as u64
    }
    fn before(self, duration: Duration) -> Option<Self> {
        self.checked_sub(duration.as_millis() as u64)
    }
    fn since(self, earlier: Self) -> Duration {
        Duration::from_millis(self.saturating_sub(earlier))
    }
}

/// How long sessions last and how stalls are told apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionTiming {
    /// `broker.session.timeout.ms`.
    pub timeout: Duration,
    /// What a broker gets to be heard after the controller took over or
    /// stalled (at most `timeout`).
    pub failover_grace: Duration,
    /// A loop turn at least this late is a stall.
    pub stall_min: Duration,
}

/// The brokers' sessions on the active controller.
#[derive(Debug, Clone)]
pub struct Sessions<T: Moment> {
    timing: SessionTiming,
    heard: BTreeMap<NodeId, T>,
    last_turn: T,
}

impl<T: Moment> Sessions<T> {
    pub fn new(timing: SessionTiming, now: T) -> Self {
        assert!(
            timing.failover_grace <= timing.timeout,
            "a failover grace longer than the session: {timing:?}"
        );
        Self {
            timing,
            heard: BTreeMap::new(),
            last_turn: now,
        }
    }

    pub fn timing(&self) -> SessionTiming {
        self.timing
    }

    /// A heartbeat from `broker` was taken at `now`.
    pub fn heard(&mut self, broker: NodeId, now: T) {
        self.heard.insert(broker, now);
    }

    /// When `broker` was last heard (or counts as heard).
    pub fn last_heard(&self, broker: NodeId) -> Option<T> {
        self.heard.get(&broker).copied()
    }

    /// Whether `broker`'s session ran out at `now`.
    pub fn expired(&self, broker: NodeId, now: T) -> bool {
        self.heard
            .get(&broker)
            .is_none_or(|&at| now.since(at) > self.timing.timeout)
    }

    /// The caller's loop turned at `now`. A turn the stall threshold late
    /// moves every session on by the stall (see the rules); returns the
    /// stall then.
    pub fn turn(&mut self, now: T) -> Option<Duration> {
        let stalled = now.since(self.last_turn);
        self.last_turn = now;
        if stalled < self.timing.stall_min {
            return None;
        }
        let fresh = self.grace_start(now);
        for heard in self.heard.values_mut() {
            let moved = heard.after(stalled);
            let resumed = match fresh {
                Some(fresh) => moved.max(fresh),
                None => moved,
            };
            *heard = resumed.min(now);
        }
        Some(stalled)
    }

    /// This node became the active controller at `now`, with `brokers`
    /// registered: each is heard a failover grace before its session would
    /// end, unless a heartbeat since then says more.
    pub fn took_over(&mut self, brokers: impl IntoIterator<Item = NodeId>, now: T) {
        let heard = self.grace_start(now).unwrap_or(now);
        let since_election: Vec<(NodeId, T)> = self
            .heard
            .iter()
            .filter(|(_, &at)| at > heard)
            .map(|(&id, &at)| (id, at))
            .collect();
        self.heard = brokers.into_iter().map(|id| (id, heard)).collect();
        self.heard.extend(since_election);
    }

    /// The last-heard time that leaves a session exactly the failover
    /// grace from `now` (if the clock reaches back that far).
    fn grace_start(&self, now: T) -> Option<T> {
        now.before(self.timing.timeout - self.timing.failover_grace)
    }

    /// `broker`'s session ends at `expires_at` unless it is heard again
    /// (earlier if it would end sooner anyway). Whether it had a session.
    pub fn shorten(&mut self, broker: NodeId, expires_at: T) -> bool {
        let Some(last) = self.heard.get_mut(&broker) else {
            return false;
        };
        if let Some(short) = expires_at.before(self.timing.timeout) {
            *last = (*last).min(short);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing() -> SessionTiming {
        SessionTiming {
            timeout: Duration::from_millis(400),
            failover_grace: Duration::from_millis(150),
            stall_min: Duration::from_millis(60),
        }
    }

    #[test]
    fn a_silent_broker_expires_after_the_session_and_not_before() {
        let mut sessions = Sessions::new(timing(), 1_000u64);
        assert!(sessions.expired(1, 1_000), "never heard");
        sessions.heard(1, 1_000);
        assert!(!sessions.expired(1, 1_400));
        assert!(sessions.expired(1, 1_401));
    }

    #[test]
    fn a_stall_does_not_count_against_any_session() {
        let mut sessions = Sessions::new(timing(), 1_000u64);
        sessions.heard(1, 990);
        sessions.heard(2, 700);
        assert_eq!(sessions.turn(1_020), None, "a turn 20 ms late is no stall");
        // The controller did not run for 2 s.
        assert_eq!(sessions.turn(3_020), Some(Duration::from_millis(2_000)));
        assert!(!sessions.expired(1, 3_020) && !sessions.expired(2, 3_020));
        // Broker 1 was heard 30 ms before the stall began: its session
        // resumes with the 370 ms it had left.
        assert_eq!(sessions.last_heard(1), Some(2_990));
        // Broker 2 had 80 ms left: it gets the failover grace instead.
        assert_eq!(sessions.last_heard(2), Some(3_020 - 250));
        assert!(!sessions.expired(2, 3_020 + 150));
        assert!(sessions.expired(2, 3_020 + 151));
        // Time it runs without hearing a broker still counts.
        assert_eq!(sessions.turn(3_040), None);
        assert!(sessions.expired(1, 2_990 + 401));
    }

    #[test]
    fn a_new_controller_gives_every_broker_the_grace_and_keeps_newer_heartbeats() {
        let mut sessions = Sessions::new(timing(), 0u64);
        sessions.heard(3, 9_950);
        sessions.took_over([1, 2, 3], 10_000);
        assert_eq!(sessions.last_heard(1), Some(9_750));
        assert_eq!(sessions.last_heard(3), Some(9_950));
        assert!(!sessions.expired(2, 10_150) && sessions.expired(2, 10_151));
    }

    #[test]
    fn a_closed_connection_only_shortens_a_session() {
        let mut sessions = Sessions::new(timing(), 0u64);
        sessions.heard(1, 1_000);
        assert!(sessions.shorten(1, 1_100));
        assert!(sessions.expired(1, 1_101));
        sessions.heard(1, 2_000);
        assert!(
            sessions.shorten(1, 3_000),
            "later than the session: no change"
        );
        assert_eq!(sessions.last_heard(1), Some(2_000));
        assert!(!sessions.shorten(7, 3_000), "no session to shorten");
    }

    #[test]
    fn instants_move_like_milliseconds() {
        let start = Instant::now();
        let mut sessions = Sessions::new(timing(), start);
        sessions.heard(1, start);
        let later = start + Duration::from_secs(5);
        assert_eq!(sessions.turn(later), Some(Duration::from_secs(5)));
        assert!(!sessions.expired(1, later));
    }
}
