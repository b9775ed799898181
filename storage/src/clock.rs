//! Time as storage and the broker decide on it: a [`Clock`] gives monotonic
//! time (for deadlines) and wall time (Kafka timestamps: retention, segment
//! age, LogAppendTime, session and producer expiry). [`SystemClock`] reads
//! the system's clocks; [`ManualClock`] moves only when a test moves it, so
//! time-driven behaviour is tested without sleeps and without flakiness.

use std::cell::Cell;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// A source of time. One per core (it lives in the core's
/// [`crate::Context`]); decisions that depend on time take it from here,
/// never from the system directly.
pub trait Clock {
    /// Milliseconds since a fixed point in the past; never goes back.
    fn monotonic_ms(&self) -> u64;
    /// Milliseconds since the Unix epoch: the time Kafka timestamps use.
    fn wall_ms(&self) -> i64;
}

/// The system's clocks.
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    start: Instant,
}

impl Default for SystemClock {
    fn default() -> Self {
        Self {
            start: Instant::now(),
        }
    }
}

impl Clock for SystemClock {
    fn monotonic_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    fn wall_ms(&self) -> i64 {
        system_wall_ms()
    }
}

/// The system's wall time in milliseconds since the Unix epoch, for code
/// with no [`Clock`] of its own (a client stamping its records).
pub fn system_wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A clock that stands still until told to move: [`ManualClock::advance_ms`]
/// moves both times, [`ManualClock::set_wall_ms`] moves wall time alone
/// (wall time may go back, as a system clock may be set back; monotonic
/// time never does).
#[derive(Debug)]
pub struct ManualClock {
    monotonic_ms: Cell<u64>,
    wall_ms: Cell<i64>,
}

impl ManualClock {
    /// A clock showing `wall_ms` as wall time and 0 as monotonic time.
    pub fn new(wall_ms: i64) -> Self {
        Self {
            monotonic_ms: Cell::new(0),
            wall_ms: Cell::new(wall_ms),
        }
    }

    /// Moves both times forward by `ms`.
    pub fn advance_ms(&self, ms: u64) {
        self.monotonic_ms.set(self.monotonic_ms.get() + ms);
        self.wall_ms.set(
            self.wall_ms
                .get()
                .saturating_add(ms.min(i64::MAX as u64) as i64),
        );
    }

    /// Sets wall time (monotonic time stays).
    pub fn set_wall_ms(&self, wall_ms: i64) {
        self.wall_ms.set(wall_ms);
    }
}

impl Clock for ManualClock {
    fn monotonic_ms(&self) -> u64 {
        self.monotonic_ms.get()
    }

    fn wall_ms(&self) -> i64 {
        self.wall_ms.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told() {
        let clock = ManualClock::new(1_000);
        assert_eq!((clock.monotonic_ms(), clock.wall_ms()), (0, 1_000));
        clock.advance_ms(250);
        assert_eq!((clock.monotonic_ms(), clock.wall_ms()), (250, 1_250));
        clock.set_wall_ms(500);
        assert_eq!((clock.monotonic_ms(), clock.wall_ms()), (250, 500));
    }

    #[test]
    fn the_system_clock_never_goes_back() {
        let clock = SystemClock::default();
        let (a, b) = (clock.monotonic_ms(), clock.monotonic_ms());
        assert!(b >= a);
        assert!(clock.wall_ms() > 1_600_000_000_000, "wall time is epoch ms");
    }
}
