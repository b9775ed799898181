//! Open-loop send scheduling. Send `i` is due at `start + i / rate`; a
//! sender that falls behind sends at once and still measures latency from
//! the due time, so a stalled broker shows up as latency instead of hiding
//! in a lower send rate (no coordinated omission).

use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct Schedule {
    start: Instant,
    /// Seconds between sends; 0 for closed-loop (as fast as acknowledged).
    period: f64,
    next: u64,
}

impl Schedule {
    /// A schedule of `rate` sends per second; `rate == 0` means no schedule:
    /// each send is due when it is made.
    pub fn new(rate: f64, start: Instant) -> Self {
        Self {
            start,
            period: if rate > 0.0 { 1.0 / rate } else { 0.0 },
            next: 0,
        }
    }

    pub fn is_open_loop(&self) -> bool {
        self.period > 0.0
    }

    /// The due time of the next send, and advances the schedule.
    pub fn next_due(&mut self, now: Instant) -> Instant {
        if self.period == 0.0 {
            return now;
        }
        let due = self.start + Duration::from_secs_f64(self.next as f64 * self.period);
        self.next += 1;
        due
    }

    /// How many sends are due at `now` and not yet taken.
    pub fn due_count(&self, now: Instant) -> u64 {
        if self.period == 0.0 {
            return 1;
        }
        let elapsed = now.saturating_duration_since(self.start).as_secs_f64();
        let due = (elapsed / self.period).floor() as u64 + 1;
        due.saturating_sub(self.next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_times_follow_the_rate_not_the_sender() {
        let start = Instant::now();
        let mut schedule = Schedule::new(1000.0, start);
        assert!(schedule.is_open_loop());
        let first = schedule.next_due(start);
        let second = schedule.next_due(start);
        assert_eq!(first, start);
        assert_eq!(second - first, Duration::from_millis(1));
        // A sender that stalls 10 ms finds 9 more sends due at once.
        let later = start + Duration::from_millis(10);
        assert_eq!(schedule.due_count(later), 9);
        // Their due times stay on the schedule: latency counts from them.
        assert_eq!(schedule.next_due(later), start + Duration::from_millis(2));
    }

    #[test]
    fn rate_zero_is_closed_loop() {
        let now = Instant::now();
        let mut schedule = Schedule::new(0.0, now);
        assert!(!schedule.is_open_loop());
        assert_eq!(schedule.next_due(now), now);
        assert_eq!(schedule.due_count(now), 1);
    }
}
