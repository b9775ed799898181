//! Share groups (KIP-932, queues for Kafka): the state of one share
//! partition, as plain code. Members of a share group read the same
//! partitions cooperatively: each record is acquired by one member at a
//! time, under a lock with a deadline, and then acknowledged one by one:
//! accepted (done), released (available again, delivered anew later) or
//! rejected (archived, never delivered again). A record delivered
//! `delivery_count_limit` times and not accepted is archived.
//!
//! The share-partition start offset (SPSO) is the first offset not yet
//! done with; records from it up to the end offset (SPEO) are in flight,
//! each with its state and delivery count. Past the SPEO nothing was
//! delivered yet. `acquire` hands out records from the in-flight window
//! first (those released or whose lock expired), then new ones from the
//! log, at most `max_record_locks` acquired at once.
//!
//! The rules the tests (and the simulator) check: a record is acquired by
//! at most one member at a time; an acknowledgement counts only from the
//! member holding the record; an accepted record is never delivered
//! again; a released or expired record is delivered again with a higher
//! delivery count; the SPSO never moves back and passes only records done
//! with.

use std::collections::BTreeMap;

/// An ISO-8601 duration as `share.auto.offset.reset=by_duration:` takes
/// it (Java's `Duration.parse`): `P[nD][T[nH][nM][n[.f]S]]`, in
/// milliseconds; `None` for anything else, a negative one included.
pub fn parse_duration_ms(text: &str) -> Option<u64> {
    let rest = text.strip_prefix('P').or_else(|| text.strip_prefix('p'))?;
    let (days, time) = match rest.find(['T', 't']) {
        Some(at) => (&rest[..at], Some(&rest[at + 1..])),
        None => (rest, None),
    };
    let mut total: f64 = 0.0;
    let mut any = false;
    let mut take = |part: &str, units: &[(char, f64)]| -> Option<()> {
        let mut number = String::new();
        let mut next_unit = 0;
        for c in part.chars() {
            if c.is_ascii_digit() || c == '.' {
                number.push(c);
                continue;
            }
            let at = units[next_unit..]
                .iter()
                .position(|(u, _)| u.eq_ignore_ascii_case(&c))?;
            let value: f64 = number.parse().ok()?;
            total += value * units[next_unit + at].1;
            next_unit += at + 1;
            number.clear();
            any = true;
        }
        number.is_empty().then_some(())
    };
    take(days, &[('D', 86_400_000.0)])?;
    if let Some(time) = time {
        if time.is_empty() {
            return None;
        }
        take(time, &[('H', 3_600_000.0), ('M', 60_000.0), ('S', 1_000.0)])?;
    }
    (any && total.is_finite() && total < 1e18).then_some(total as u64)
}

/// How a member acknowledges a record (Kafka's acknowledge types).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcknowledgeType {
    /// 1: processed.
    Accept,
    /// 2: give it back, to be delivered again.
    Release,
    /// 3: unprocessable: never deliver it again.
    Reject,
}

impl AcknowledgeType {
    /// Kafka's code (0 is a gap: an offset with no record, as after
    /// compaction, which is accepted).
    pub fn from_code(code: i8) -> Option<Self> {
        match code {
            0 | 1 => Some(AcknowledgeType::Accept),
            2 => Some(AcknowledgeType::Release),
            3 => Some(AcknowledgeType::Reject),
            _ => None,
        }
    }
}

/// A record's state in the in-flight window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordState {
    Available,
    Acquired { member: String, lock_until_ms: u64 },
    Acknowledged,
    Archived,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct InFlight {
    state: RecordState,
    delivery_count: u16,
}

/// Records handed to a member: offsets `first..=last`, each delivered
/// `delivery_count` times so far (this delivery included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acquired {
    pub first: i64,
    pub last: i64,
    pub delivery_count: u16,
}

/// Why an acknowledgement was refused (Kafka's INVALID_RECORD_STATE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidRecordState {
    pub offset: i64,
}

/// The settings a share partition runs by (Kafka's `group.share.*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareConfig {
    /// `group.share.record.lock.duration.ms`.
    pub record_lock_ms: u64,
    /// `group.share.delivery.count.limit`.
    pub delivery_count_limit: u16,
    /// `group.share.partition.max.record.locks`.
    pub max_record_locks: usize,
}

impl Default for ShareConfig {
    fn default() -> Self {
        Self {
            record_lock_ms: 30_000,
            delivery_count_limit: 5,
            max_record_locks: 2_000,
        }
    }
}

/// A record's state as it is kept durably (Kafka's delivery states):
/// an acquired record is kept as available with its delivery count, so
/// that a new leader hands it out again.
pub const DELIVERY_AVAILABLE: i8 = 0;
pub const DELIVERY_ACKNOWLEDGED: i8 = 2;
pub const DELIVERY_ARCHIVED: i8 = 4;

/// Consecutive in-flight records with one durable state and delivery count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateBatch {
    pub first: i64,
    pub last: i64,
    pub delivery_state: i8,
    pub delivery_count: i16,
}

/// What of a share partition is kept durably: its start offset and the
/// in-flight records after it. Locks and their holders are not: after a
/// leader move every record not acknowledged is available again.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ShareSnapshot {
    pub start_offset: i64,
    pub batches: Vec<StateBatch>,
}

impl ShareSnapshot {
    /// Records in flight (from the start offset to the last one delivered).
    pub fn in_flight(&self) -> i64 {
        self.batches
            .iter()
            .map(|b| b.last - b.first + 1)
            .sum::<i64>()
    }
}

/// One share partition's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharePartition {
    /// The share-partition start offset.
    start: i64,
    /// In-flight records, from `start`, each with its state.
    in_flight: BTreeMap<i64, InFlight>,
    /// One past the last offset ever delivered.
    end: i64,
}

impl SharePartition {
    /// A share partition starting at `start` (`share.auto.offset.reset`:
    /// the log start for `earliest`, the log end for `latest`).
    pub fn new(start: i64) -> Self {
        Self {
            start,
            in_flight: BTreeMap::new(),
            end: start,
        }
    }

    pub fn start_offset(&self) -> i64 {
        self.start
    }

    pub fn end_offset(&self) -> i64 {
        self.end
    }

    /// Records acquired now (locks held).
    pub fn acquired_count(&self) -> usize {
        self.in_flight
            .values()
            .filter(|r| matches!(r.state, RecordState::Acquired { .. }))
            .count()
    }

    /// The state and delivery count of `offset` while in flight.
    pub fn record(&self, offset: i64) -> Option<(&RecordState, u16)> {
        self.in_flight
            .get(&offset)
            .map(|r| (&r.state, r.delivery_count))
    }

    /// Hands `member` up to `max_records` records below `log_end`: first
    /// those available again in the window, then new ones; each locked
    /// until `now_ms` + the lock duration. Contiguous records with the
    /// same delivery count come as one range.
    pub fn acquire(
        &mut self,
        member: &str,
        log_end: i64,
        max_records: usize,
        now_ms: u64,
        config: &ShareConfig,
    ) -> Vec<Acquired> {
        let room = config
            .max_record_locks
            .saturating_sub(self.acquired_count())
            .min(max_records);
        let lock_until_ms = now_ms + config.record_lock_ms;
        let mut taken: Vec<(i64, u16)> = Vec::new();
        for (&offset, record) in self.in_flight.iter_mut() {
            if taken.len() >= room || offset >= log_end {
                break;
            }
            if record.state == RecordState::Available {
                record.delivery_count += 1;
                record.state = RecordState::Acquired {
                    member: member.to_string(),
                    lock_until_ms,
                };
                taken.push((offset, record.delivery_count));
            }
        }
        while taken.len() < room && self.end < log_end {
            self.in_flight.insert(
                self.end,
                InFlight {
                    state: RecordState::Acquired {
                        member: member.to_string(),
                        lock_until_ms,
                    },
                    delivery_count: 1,
                },
            );
            taken.push((self.end, 1));
            self.end += 1;
        }
        let mut out: Vec<Acquired> = Vec::new();
        for (offset, count) in taken {
            match out.last_mut() {
                Some(last) if last.last + 1 == offset && last.delivery_count == count => {
                    last.last = offset
                }
                _ => out.push(Acquired {
                    first: offset,
                    last: offset,
                    delivery_count: count,
                }),
            }
        }
        out
    }

    /// `member` acknowledges offsets `first..=last` as `kind`. All or
    /// nothing: every offset must be in flight and acquired by `member`.
    pub fn acknowledge(
        &mut self,
        member: &str,
        first: i64,
        last: i64,
        kind: AcknowledgeType,
        config: &ShareConfig,
    ) -> Result<(), InvalidRecordState> {
        for offset in first..=last {
            let held = self.in_flight.get(&offset).is_some_and(|r| {
                matches!(&r.state, RecordState::Acquired { member: holder, .. } if holder == member)
            });
            if !held {
                return Err(InvalidRecordState { offset });
            }
        }
        for offset in first..=last {
            let record = self.in_flight.get_mut(&offset).expect("checked in flight");
            record.state = match kind {
                AcknowledgeType::Accept => RecordState::Acknowledged,
                AcknowledgeType::Reject => RecordState::Archived,
                AcknowledgeType::Release
                    if record.delivery_count >= config.delivery_count_limit =>
                {
                    RecordState::Archived
                }
                AcknowledgeType::Release => RecordState::Available,
            };
        }
        self.advance();
        Ok(())
    }

    /// Locks past their deadline end: the records are available again
    /// (archived once delivered as often as the limit allows). How many.
    pub fn expire_locks(&mut self, now_ms: u64, config: &ShareConfig) -> usize {
        let mut expired = 0;
        for record in self.in_flight.values_mut() {
            if let RecordState::Acquired { lock_until_ms, .. } = record.state {
                if lock_until_ms <= now_ms {
                    expired += 1;
                    record.state = if record.delivery_count >= config.delivery_count_limit {
                        RecordState::Archived
                    } else {
                        RecordState::Available
                    };
                }
            }
        }
        self.advance();
        expired
    }

    /// A member left: what it held is available again.
    pub fn release_member(&mut self, member: &str, config: &ShareConfig) {
        for record in self.in_flight.values_mut() {
            if matches!(&record.state, RecordState::Acquired { member: holder, .. } if holder == member)
            {
                record.state = if record.delivery_count >= config.delivery_count_limit {
                    RecordState::Archived
                } else {
                    RecordState::Available
                };
            }
        }
        self.advance();
    }

    /// The durable part of the state (see [`ShareSnapshot`]).
    pub fn snapshot(&self) -> ShareSnapshot {
        let mut batches: Vec<StateBatch> = Vec::new();
        for (&offset, record) in &self.in_flight {
            let delivery_state = match record.state {
                RecordState::Available | RecordState::Acquired { .. } => DELIVERY_AVAILABLE,
                RecordState::Acknowledged => DELIVERY_ACKNOWLEDGED,
                RecordState::Archived => DELIVERY_ARCHIVED,
            };
            let delivery_count = i16::try_from(record.delivery_count).unwrap_or(i16::MAX);
            match batches.last_mut() {
                Some(last)
                    if last.last + 1 == offset
                        && last.delivery_state == delivery_state
                        && last.delivery_count == delivery_count =>
                {
                    last.last = offset
                }
                _ => batches.push(StateBatch {
                    first: offset,
                    last: offset,
                    delivery_state,
                    delivery_count,
                }),
            }
        }
        ShareSnapshot {
            start_offset: self.start,
            batches,
        }
    }

    /// The state a snapshot describes: every record not acknowledged or
    /// archived is available again (archived once delivered as often as
    /// the limit allows). Batches before the start offset, overlapping
    /// one another or with unknown states are ignored; a gap between
    /// batches is available, never delivered.
    pub fn restore(snapshot: &ShareSnapshot, config: &ShareConfig) -> Self {
        let mut partition = SharePartition::new(snapshot.start_offset);
        for batch in &snapshot.batches {
            let state = match batch.delivery_state {
                DELIVERY_AVAILABLE => {
                    let count = u16::try_from(batch.delivery_count.max(0)).unwrap_or(0);
                    if count >= config.delivery_count_limit {
                        RecordState::Archived
                    } else {
                        RecordState::Available
                    }
                }
                DELIVERY_ACKNOWLEDGED => RecordState::Acknowledged,
                DELIVERY_ARCHIVED => RecordState::Archived,
                _ => continue,
            };
            let first = batch.first.max(partition.end);
            if batch.last < first {
                continue;
            }
            for offset in partition.end..first {
                partition.in_flight.insert(
                    offset,
                    InFlight {
                        state: RecordState::Available,
                        delivery_count: 0,
                    },
                );
            }
            for offset in first..=batch.last {
                partition.in_flight.insert(
                    offset,
                    InFlight {
                        state: state.clone(),
                        delivery_count: u16::try_from(batch.delivery_count.max(0)).unwrap_or(0),
                    },
                );
            }
            partition.end = batch.last + 1;
        }
        partition.advance();
        partition
    }

    /// Records in flight not yet done with (available again or acquired).
    pub fn pending_count(&self) -> usize {
        self.in_flight
            .values()
            .filter(|r| {
                matches!(
                    r.state,
                    RecordState::Available | RecordState::Acquired { .. }
                )
            })
            .count()
    }

    /// The SPSO moves past the records done with at the window's front.
    fn advance(&mut self) {
        while let Some(entry) = self.in_flight.first_entry() {
            if matches!(
                entry.get().state,
                RecordState::Acknowledged | RecordState::Archived
            ) {
                let offset = *entry.key();
                entry.remove();
                self.start = offset + 1;
            } else {
                break;
            }
        }
        if self.in_flight.is_empty() {
            self.start = self.start.max(self.end);
        }
    }
}

/// A batch of the log, as much as read_committed delivery needs of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoggedBatch {
    pub base: i64,
    pub last: i64,
    pub producer_id: i64,
    pub transactional: bool,
    pub control: bool,
}

/// An aborted transaction of a partition: its producer, its first offset
/// and the offset of the marker that aborted it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first: i64,
    pub marker: i64,
}

/// The offset ranges of `batches` that a share group reading committed
/// records (`share.isolation.level=read_committed`) never delivers: the
/// markers that end transactions and every record of an aborted one.
pub fn not_committed(batches: &[LoggedBatch], aborted: &[AbortedTxn]) -> Vec<(i64, i64)> {
    batches
        .iter()
        .filter(|b| {
            b.control
                || (b.transactional
                    && aborted.iter().any(|t| {
                        t.producer_id == b.producer_id && t.first <= b.base && b.base < t.marker
                    }))
        })
        .map(|b| (b.base, b.last))
        .collect()
}

/// `acquired` without the offsets in `excluded`: the ranges that remain,
/// and the acquired ranges that fell in `excluded`.
pub fn split_acquired(
    acquired: &[Acquired],
    excluded: &[(i64, i64)],
) -> (Vec<Acquired>, Vec<(i64, i64)>) {
    let mut kept = Vec::new();
    let mut dropped = Vec::new();
    for range in acquired {
        let mut next = range.first;
        let mut cuts: Vec<(i64, i64)> = excluded
            .iter()
            .map(|&(first, last)| (first.max(range.first), last.min(range.last)))
            .filter(|(first, last)| first <= last)
            .collect();
        cuts.sort_unstable();
        for (first, last) in cuts {
            if first < next {
                // Overlaps a cut already taken.
                if last >= next {
                    dropped.push((next, last));
                    next = last + 1;
                }
                continue;
            }
            if first > next {
                kept.push(Acquired {
                    first: next,
                    last: first - 1,
                    delivery_count: range.delivery_count,
                });
            }
            dropped.push((first, last));
            next = last + 1;
        }
        if next <= range.last {
            kept.push(Acquired {
                first: next,
                last: range.last,
                delivery_count: range.delivery_count,
            });
        }
    }
    (kept, dropped)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ShareConfig {
        ShareConfig {
            record_lock_ms: 1_000,
            delivery_count_limit: 3,
            max_record_locks: 10,
        }
    }

    #[test]
    fn records_go_to_one_member_at_a_time_and_accepted_ones_never_again() {
        let c = config();
        let mut p = SharePartition::new(0);
        let a = p.acquire("a", 6, 4, 0, &c);
        assert_eq!(
            a,
            [Acquired {
                first: 0,
                last: 3,
                delivery_count: 1
            }]
        );
        let b = p.acquire("b", 6, 4, 0, &c);
        assert_eq!(
            b,
            [Acquired {
                first: 4,
                last: 5,
                delivery_count: 1
            }]
        );
        // b cannot acknowledge a's records; a can.
        assert_eq!(
            p.acknowledge("b", 0, 0, AcknowledgeType::Accept, &c),
            Err(InvalidRecordState { offset: 0 })
        );
        p.acknowledge("a", 0, 1, AcknowledgeType::Accept, &c)
            .unwrap();
        assert_eq!(p.start_offset(), 2);
        // Accepted twice: refused.
        assert_eq!(
            p.acknowledge("a", 0, 0, AcknowledgeType::Accept, &c),
            Err(InvalidRecordState { offset: 0 })
        );
        // a releases 2, rejects 3: 2 comes again with a higher count, 3 never.
        p.acknowledge("a", 2, 2, AcknowledgeType::Release, &c)
            .unwrap();
        p.acknowledge("a", 3, 3, AcknowledgeType::Reject, &c)
            .unwrap();
        let again = p.acquire("b", 6, 10, 10, &c);
        assert_eq!(
            again,
            [Acquired {
                first: 2,
                last: 2,
                delivery_count: 2
            }]
        );
        p.acknowledge("b", 2, 2, AcknowledgeType::Accept, &c)
            .unwrap();
        p.acknowledge("b", 4, 5, AcknowledgeType::Accept, &c)
            .unwrap();
        assert_eq!(p.start_offset(), 6);
        assert!(p.acquire("a", 6, 10, 20, &c).is_empty());
    }

    #[test]
    fn expired_locks_redeliver_and_the_delivery_limit_archives() {
        let c = config();
        let mut p = SharePartition::new(10);
        assert_eq!(p.acquire("a", 11, 5, 0, &c).len(), 1);
        for round in 2..=3u16 {
            assert_eq!(p.expire_locks(1_000 * u64::from(round), &c), 1);
            let again = p.acquire("b", 11, 5, 1_000 * u64::from(round), &c);
            assert_eq!(again[0].delivery_count, round);
        }
        // Delivered three times (the limit): archived when its lock ends.
        assert_eq!(p.expire_locks(10_000, &c), 1);
        assert_eq!(p.start_offset(), 11);
        assert!(p.acquire("a", 11, 5, 10_000, &c).is_empty());
        // A late acknowledgement of an expired lock is refused.
        assert!(p
            .acknowledge("b", 10, 10, AcknowledgeType::Accept, &c)
            .is_err());
    }

    #[test]
    fn durations_read_as_java_reads_them() {
        assert_eq!(parse_duration_ms("PT10M"), Some(600_000));
        assert_eq!(parse_duration_ms("P1D"), Some(86_400_000));
        assert_eq!(parse_duration_ms("P1DT1H0.5S"), Some(90_000_500));
        assert_eq!(parse_duration_ms("PT1.5S"), Some(1_500));
        for bad in [
            "", "P", "PT", "10M", "PT10X", "PT1S1M", "P-1D", "PTM", "P1H",
        ] {
            assert_eq!(parse_duration_ms(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_restored_snapshot_keeps_acknowledgements_and_hands_out_acquired_records_again() {
        let c = config();
        let mut p = SharePartition::new(0);
        p.acquire("a", 8, 8, 0, &c);
        p.acknowledge("a", 0, 1, AcknowledgeType::Accept, &c)
            .unwrap();
        p.acknowledge("a", 3, 3, AcknowledgeType::Accept, &c)
            .unwrap();
        p.acknowledge("a", 4, 4, AcknowledgeType::Reject, &c)
            .unwrap();
        p.acknowledge("a", 5, 5, AcknowledgeType::Release, &c)
            .unwrap();
        let snapshot = p.snapshot();
        assert_eq!(snapshot.start_offset, 2);
        assert_eq!(
            snapshot.batches,
            [
                StateBatch {
                    first: 2,
                    last: 2,
                    delivery_state: DELIVERY_AVAILABLE,
                    delivery_count: 1
                },
                StateBatch {
                    first: 3,
                    last: 3,
                    delivery_state: DELIVERY_ACKNOWLEDGED,
                    delivery_count: 1
                },
                StateBatch {
                    first: 4,
                    last: 4,
                    delivery_state: DELIVERY_ARCHIVED,
                    delivery_count: 1
                },
                StateBatch {
                    first: 5,
                    last: 7,
                    delivery_state: DELIVERY_AVAILABLE,
                    delivery_count: 1
                },
            ]
        );
        let mut q = SharePartition::restore(&snapshot, &c);
        assert_eq!(q.snapshot(), snapshot);
        // What a held (2, 6, 7) or released (5) comes again, counted; what
        // was accepted (0, 1, 3) or rejected (4) never.
        let again = q.acquire("b", 8, 10, 0, &c);
        let offsets: Vec<(i64, i64, u16)> = again
            .iter()
            .map(|a| (a.first, a.last, a.delivery_count))
            .collect();
        assert_eq!(offsets, [(2, 2, 2), (5, 7, 2)]);
        // Delivered as often as the limit allows: archived on restore.
        let mut limit = snapshot.clone();
        limit.batches[0].delivery_count = 3;
        let r = SharePartition::restore(&limit, &c);
        assert_eq!(r.record(2), None);
        assert_eq!(r.start_offset(), 5, "2 archived, 3 accepted, 4 rejected");
        // Nonsense is ignored, never trusted into a window that goes back.
        let odd = ShareSnapshot {
            start_offset: 10,
            batches: vec![
                StateBatch {
                    first: 3,
                    last: 5,
                    delivery_state: DELIVERY_ACKNOWLEDGED,
                    delivery_count: 1,
                },
                StateBatch {
                    first: 12,
                    last: 12,
                    delivery_state: 9,
                    delivery_count: 1,
                },
            ],
        };
        let r = SharePartition::restore(&odd, &c);
        assert_eq!(r.start_offset(), 10);
        assert_eq!(r.end_offset(), 10);
    }

    #[test]
    fn record_locks_are_bounded_and_a_member_leaving_releases_its_records() {
        let c = config();
        let mut p = SharePartition::new(0);
        assert_eq!(
            p.acquire("a", 100, 100, 0, &c)[0].last,
            9,
            "at most 10 locks"
        );
        assert!(p.acquire("b", 100, 100, 0, &c).is_empty());
        p.release_member("a", &c);
        let b = p.acquire("b", 100, 3, 0, &c);
        assert_eq!(
            b,
            [Acquired {
                first: 0,
                last: 2,
                delivery_count: 2
            }]
        );
    }

    fn batch(
        base: i64,
        last: i64,
        producer_id: i64,
        transactional: bool,
        control: bool,
    ) -> LoggedBatch {
        LoggedBatch {
            base,
            last,
            producer_id,
            transactional,
            control,
        }
    }

    #[test]
    fn read_committed_skips_markers_and_aborted_records_only() {
        let batches = [
            batch(0, 4, 7, false, false),
            // Producer 8's transaction, aborted by the marker at 10.
            batch(5, 7, 8, true, false),
            // Producer 9's transaction, committed by the marker at 11.
            batch(8, 9, 9, true, false),
            batch(10, 10, 8, true, true),
            batch(11, 11, 9, true, true),
            // Producer 8 again, in a later transaction still open.
            batch(12, 13, 8, true, false),
        ];
        let aborted = [AbortedTxn {
            producer_id: 8,
            first: 5,
            marker: 10,
        }];
        assert_eq!(
            not_committed(&batches, &aborted),
            vec![(5, 7), (10, 10), (11, 11)]
        );
        assert_eq!(
            not_committed(&batches, &[]),
            vec![(10, 10), (11, 11)],
            "without aborted transactions only the markers"
        );
    }

    #[test]
    fn acquired_ranges_lose_exactly_the_excluded_offsets() {
        let acquired = [
            Acquired {
                first: 0,
                last: 9,
                delivery_count: 1,
            },
            Acquired {
                first: 20,
                last: 24,
                delivery_count: 2,
            },
        ];
        let (kept, dropped) = split_acquired(&acquired, &[(3, 4), (4, 6), (9, 21), (30, 31)]);
        let ranges: Vec<(i64, i64, u16)> = kept
            .iter()
            .map(|a| (a.first, a.last, a.delivery_count))
            .collect();
        assert_eq!(ranges, vec![(0, 2, 1), (7, 8, 1), (22, 24, 2)]);
        assert_eq!(dropped, vec![(3, 4), (5, 6), (9, 9), (20, 21)]);
        let (kept, dropped) = split_acquired(&acquired, &[]);
        assert_eq!(kept, acquired.to_vec());
        assert!(dropped.is_empty());
    }
}

/// A share group's membership (ShareGroupHeartbeat): members, their
/// subscriptions and epochs. Every member is assigned every partition of
/// the topics it subscribes to: records, not partitions, are what its
/// members divide (each acquired by one member at a time).
#[derive(Debug, Clone, Default)]
pub struct ShareGroup {
    pub group_epoch: i32,
    pub members: BTreeMap<String, ShareMember>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareMember {
    pub member_id: String,
    pub member_epoch: i32,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed: std::collections::BTreeSet<String>,
    pub session_deadline_ms: u64,
}

/// A record of a share group for `__consumer_offsets`: key and value
/// (`None`: a tombstone).
pub type ShareGroupRecord = (Vec<u8>, Option<Vec<u8>>);

impl ShareGroup {
    /// The group's epoch record: the group exists while it does.
    pub fn epoch_record(&self, group_id: &str) -> ShareGroupRecord {
        use crate::share_group_records as r;
        let key = r::ShareGroupKey::Group {
            group_id: group_id.to_string(),
        };
        (key.encode(), Some(r::group_value(self.group_epoch)))
    }

    /// A member's records: its metadata, then its epoch.
    pub fn member_records(group_id: &str, member: &ShareMember) -> [ShareGroupRecord; 2] {
        use crate::share_group_records as r;
        let value = r::ShareMemberValue {
            rack_id: member.rack_id.clone(),
            client_id: member.client_id.clone(),
            client_host: member.client_host.clone(),
            subscribed_topic_names: member.subscribed.iter().cloned().collect(),
        };
        [
            (
                r::ShareGroupKey::Member {
                    group_id: group_id.to_string(),
                    member_id: member.member_id.clone(),
                }
                .encode(),
                Some(r::member_value(&value)),
            ),
            (
                r::ShareGroupKey::CurrentAssignment {
                    group_id: group_id.to_string(),
                    member_id: member.member_id.clone(),
                }
                .encode(),
                Some(r::assignment_value(member.member_epoch)),
            ),
        ]
    }

    /// The tombstones of a member that left: its epoch, then its metadata.
    pub fn member_tombstones(group_id: &str, member_id: &str) -> [ShareGroupRecord; 2] {
        use crate::share_group_records::ShareGroupKey;
        let key = |assignment: bool| {
            let (group_id, member_id) = (group_id.to_string(), member_id.to_string());
            if assignment {
                ShareGroupKey::CurrentAssignment {
                    group_id,
                    member_id,
                }
            } else {
                ShareGroupKey::Member {
                    group_id,
                    member_id,
                }
            }
            .encode()
        };
        [(key(true), None), (key(false), None)]
    }

    /// Every record that carries the group as it is now: its epoch, then
    /// each member's.
    pub fn records(&self, group_id: &str) -> Vec<ShareGroupRecord> {
        let mut out = vec![self.epoch_record(group_id)];
        for member in self.members.values() {
            out.extend(Self::member_records(group_id, member));
        }
        out
    }

    /// Replays one of its records loaded from `__consumer_offsets`
    /// (`value` `None`: a tombstone); a loaded member's session starts at
    /// `now_ms`. False when the value does not decode (skipped).
    pub fn load(
        &mut self,
        key: &crate::share_group_records::ShareGroupKey,
        value: Option<&[u8]>,
        now_ms: u64,
        session_timeout_ms: u64,
    ) -> bool {
        use crate::share_group_records::{self as r, ShareGroupKey};
        let new_member = |member_id: &str| ShareMember {
            member_id: member_id.to_string(),
            member_epoch: 0,
            rack_id: None,
            client_id: String::new(),
            client_host: String::new(),
            subscribed: std::collections::BTreeSet::new(),
            session_deadline_ms: now_ms + session_timeout_ms,
        };
        match (key, value) {
            (ShareGroupKey::Group { .. }, None) => {}
            (ShareGroupKey::Group { .. }, Some(value)) => match r::parse_group(value) {
                Some(epoch) => self.group_epoch = epoch,
                None => return false,
            },
            (ShareGroupKey::Member { member_id, .. }, None) => {
                self.members.remove(member_id);
            }
            (ShareGroupKey::Member { member_id, .. }, Some(value)) => {
                let Some(loaded) = r::parse_member(value) else {
                    return false;
                };
                let member = self
                    .members
                    .entry(member_id.clone())
                    .or_insert_with(|| new_member(member_id));
                member.rack_id = loaded.rack_id;
                member.client_id = loaded.client_id;
                member.client_host = loaded.client_host;
                member.subscribed = loaded.subscribed_topic_names.into_iter().collect();
            }
            (ShareGroupKey::CurrentAssignment { .. }, None) => {}
            (ShareGroupKey::CurrentAssignment { member_id, .. }, Some(value)) => {
                let Some(epoch) = r::parse_assignment(value) else {
                    return false;
                };
                self.members
                    .entry(member_id.clone())
                    .or_insert_with(|| new_member(member_id))
                    .member_epoch = epoch;
            }
        }
        true
    }
}

/// A ShareGroupHeartbeat, decoded.
#[derive(Debug, Clone, Default)]
pub struct ShareHeartbeat {
    pub group_id: String,
    pub member_id: String,
    /// 0 joins, -1 leaves.
    pub member_epoch: i32,
    pub rack_id: Option<String>,
    pub subscribed_topic_names: Option<Vec<String>>,
    pub client_id: String,
    pub client_host: String,
    /// The group's own `share.session.timeout.ms`, over the broker's.
    pub session_timeout_ms: Option<u64>,
}

/// An accepted share heartbeat's answer: the member's epoch and its
/// partitions (topic name → partition count: every partition).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareHeartbeatAnswer {
    pub member_id: String,
    pub member_epoch: i32,
    pub assignment: Option<BTreeMap<String, i32>>,
}

/// Why a share heartbeat was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShareRefusal {
    InvalidRequest,
    UnknownMemberId,
    FencedMemberEpoch,
    GroupMaxSizeReached,
}

impl ShareGroup {
    /// ShareGroupHeartbeat; `topics` are the partition counts of every
    /// topic the metadata has.
    pub fn heartbeat(
        &mut self,
        now_ms: u64,
        request: ShareHeartbeat,
        topics: &BTreeMap<String, i32>,
        session_timeout_ms: u64,
        max_size: usize,
    ) -> Result<ShareHeartbeatAnswer, ShareRefusal> {
        if request.member_id.is_empty() || request.member_epoch < -1 {
            return Err(ShareRefusal::InvalidRequest);
        }
        match request.member_epoch {
            -1 => {
                if self.members.remove(&request.member_id).is_none() {
                    return Err(ShareRefusal::UnknownMemberId);
                }
                self.group_epoch += 1;
                return Ok(ShareHeartbeatAnswer {
                    member_id: request.member_id,
                    member_epoch: -1,
                    assignment: None,
                });
            }
            0 => {
                let Some(names) = &request.subscribed_topic_names else {
                    return Err(ShareRefusal::InvalidRequest);
                };
                if !self.members.contains_key(&request.member_id) && self.members.len() >= max_size
                {
                    return Err(ShareRefusal::GroupMaxSizeReached);
                }
                self.group_epoch += 1;
                self.members.insert(
                    request.member_id.clone(),
                    ShareMember {
                        member_id: request.member_id.clone(),
                        member_epoch: self.group_epoch,
                        rack_id: request.rack_id.clone(),
                        client_id: request.client_id.clone(),
                        client_host: request.client_host.clone(),
                        subscribed: names.iter().cloned().collect(),
                        session_deadline_ms: now_ms + session_timeout_ms,
                    },
                );
            }
            epoch => {
                let Some(member) = self.members.get_mut(&request.member_id) else {
                    return Err(ShareRefusal::UnknownMemberId);
                };
                if epoch != member.member_epoch {
                    return Err(ShareRefusal::FencedMemberEpoch);
                }
                member.session_deadline_ms = now_ms + session_timeout_ms;
                if let Some(names) = &request.subscribed_topic_names {
                    let names: std::collections::BTreeSet<String> = names.iter().cloned().collect();
                    if names != member.subscribed {
                        member.subscribed = names;
                        self.group_epoch += 1;
                        member.member_epoch = self.group_epoch;
                    }
                }
            }
        }
        let member = &self.members[&request.member_id];
        let assignment: BTreeMap<String, i32> = member
            .subscribed
            .iter()
            .filter_map(|name| Some((name.clone(), *topics.get(name)?)))
            .collect();
        Ok(ShareHeartbeatAnswer {
            member_id: request.member_id,
            member_epoch: member.member_epoch,
            assignment: Some(assignment),
        })
    }

    /// Members silent past their session leave; their ids.
    pub fn expire(&mut self, now_ms: u64) -> Vec<String> {
        let gone: Vec<String> = self
            .members
            .values()
            .filter(|m| m.session_deadline_ms <= now_ms)
            .map(|m| m.member_id.clone())
            .collect();
        for id in &gone {
            self.members.remove(id);
        }
        if !gone.is_empty() {
            self.group_epoch += 1;
        }
        gone
    }
}
