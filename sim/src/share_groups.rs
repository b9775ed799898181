//! Share partitions (KIP-932) under seeded members and leader crashes:
//! the broker's share partition state (`groups::share`) driven by members
//! that acquire records, acknowledge them late or never (their locks
//! expire), release or reject some, and leave, while the log grows; and
//! the share partition's leader crashing now and then, as the broker runs
//! it: each request's change is made on a copy, written durably (the
//! share coordinator's snapshot, `groups::share::ShareSnapshot`) when it
//! changed anything kept, and only then answered. A crash before the
//! write loses the change and the answer; one after it loses the answer.
//! The new leader restores the last durable snapshot; what members held
//! is gone with the old leader's locks.
//!
//! The rules checked after every step and at the end:
//! - a record is accepted at most once, and a record whose acceptance (or
//!   rejection) was answered is never delivered again;
//! - no record is held by two members at once (a member whose lock
//!   expired has its acknowledgement refused);
//! - each delivery a member sees of a record has a higher delivery count
//!   than the one it saw before, and none beyond the limit;
//! - once members stop failing, every record is accepted or archived: none
//!   is lost while acquired and not acknowledged, not even across crashes.
//!
//! [`ShareMutation::AnswerBeforeDurable`] answers before writing, as a
//! broker must not: a crash then forgets an acceptance a member was told
//! of, and the record comes again.

use std::collections::{BTreeMap, BTreeSet};

use groups::share::{AcknowledgeType, ShareConfig, SharePartition, ShareSnapshot};

const TICK_MS: u64 = 50;
const STEPS: u64 = 2_000;

/// A rule broken on purpose, to show the checks catch it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShareMutation {
    None,
    /// Acknowledgements answered before the state is durable.
    AnswerBeforeDurable,
}

/// What one seed did.
#[derive(Debug, Default, Clone)]
pub struct ShareReport {
    pub delivered: u64,
    pub accepted: u64,
    pub released: u64,
    pub rejected: u64,
    pub lock_expiries: u64,
    pub refused_acknowledgements: u64,
    pub archived_at_the_limit: u64,
    pub leader_crashes: u64,
    /// Acceptances written durably whose answer a crash lost.
    pub unanswered_acceptances: u64,
}

/// What one request asked and what its answer tells the member.
enum Answer {
    Acquired(Vec<groups::share::Acquired>),
    Acknowledged(Vec<(i64, AcknowledgeType, bool)>),
    Nothing,
}

pub fn run_share_seed(seed: u64, mutation: ShareMutation) -> Result<ShareReport, String> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let config = ShareConfig {
        record_lock_ms: 500 + rng.u64(0..1_000),
        delivery_count_limit: 2 + rng.u16(0..4),
        max_record_locks: 5 + rng.usize(0..40),
    };
    let members = 2 + rng.usize(0..4);
    let mut partition = SharePartition::new(0);
    let mut durable: ShareSnapshot = partition.snapshot();
    let mut report = ShareReport::default();
    let mut log_end = 0i64;
    // What each member believes it holds: offset -> its lock's end.
    let mut held: Vec<BTreeMap<i64, u64>> = vec![BTreeMap::new(); members];
    // Answered acceptances and rejections.
    let mut accepted: BTreeSet<i64> = BTreeSet::new();
    let mut rejected: BTreeSet<i64> = BTreeSet::new();
    // Acceptances written durably but never answered (a crash).
    let mut unanswered: BTreeSet<i64> = BTreeSet::new();
    // The delivery count each member last saw of a record.
    let mut last_count: BTreeMap<i64, u16> = BTreeMap::new();
    let mut now = 0u64;
    let settle_from = STEPS * 3 / 4;
    for step in 0..STEPS * 2 {
        now += TICK_MS;
        let faulty = step < settle_from;
        if step < STEPS && rng.u32(0..3) == 0 {
            log_end += i64::from(rng.u32(1..8));
        }
        let m = rng.usize(0..members);
        let name = format!("m{m}");
        // The request's change, on a copy.
        let mut next = partition.clone();
        report.lock_expiries += next.expire_locks(now, &config) as u64;
        let answer = match rng.u32(0..10) {
            0..=3 => {
                Answer::Acquired(next.acquire(&name, log_end, 1 + rng.usize(0..10), now, &config))
            }
            // Acknowledge some of what it holds, or forget it (a slow or
            // dead member: its locks expire).
            4..=8 => {
                let mine: Vec<i64> = held[m].keys().copied().collect();
                let mut outcomes = Vec::new();
                for offset in mine {
                    if faulty && rng.u32(0..10) == 0 {
                        continue;
                    }
                    let kind = match rng.u32(0..10) {
                        0 if faulty => AcknowledgeType::Release,
                        1 if faulty => AcknowledgeType::Reject,
                        _ => AcknowledgeType::Accept,
                    };
                    held[m].remove(&offset);
                    let ok = next
                        .acknowledge(&name, offset, offset, kind, &config)
                        .is_ok();
                    outcomes.push((offset, kind, ok));
                }
                Answer::Acknowledged(outcomes)
            }
            // Leaves (and comes back at once as the same name).
            _ if faulty => {
                next.release_member(&name, &config);
                held[m].clear();
                Answer::Nothing
            }
            _ => Answer::Nothing,
        };
        let crash = faulty && rng.u32(0..80) == 0;
        let crash_before_write = crash && rng.bool();
        let acknowledging = matches!(answer, Answer::Acknowledged(_));
        // The member hears the answer unless a crash took it; answering
        // before the write (the mutation) lets it hear what a crash
        // before the write then forgets.
        let heard = !crash
            || (crash_before_write
                && acknowledging
                && mutation == ShareMutation::AnswerBeforeDurable);
        if !crash_before_write {
            if next.snapshot() != durable {
                durable = next.snapshot();
            }
            partition = next;
        }
        if heard {
            hear(
                &answer,
                (m, now),
                &mut held,
                &mut accepted,
                &mut rejected,
                &mut last_count,
                &mut report,
                &config,
            )?;
        } else if let (false, Answer::Acknowledged(outcomes)) = (crash_before_write, &answer) {
            // Written, not answered: done with, though the member never heard.
            for &(offset, kind, ok) in outcomes {
                if ok && kind == AcknowledgeType::Accept {
                    unanswered.insert(offset);
                    report.unanswered_acceptances += 1;
                }
            }
        }
        if crash {
            // A new leader: the durable snapshot, no locks.
            report.leader_crashes += 1;
            partition = SharePartition::restore(&durable, &config);
            for holds in held.iter_mut() {
                holds.clear();
            }
        }
    }
    // The members stop: their locks run out, and one member drains the
    // partition, accepting what it gets (bounded).
    for _ in 0..1_000 {
        if partition.start_offset() >= log_end {
            break;
        }
        now += config.record_lock_ms;
        report.lock_expiries += partition.expire_locks(now, &config) as u64;
        for range in partition.acquire("drain", log_end, 100, now, &config) {
            for offset in range.first..=range.last {
                if accepted.contains(&offset) || rejected.contains(&offset) {
                    return Err(format!(
                        "offset {offset} delivered again after it was done with"
                    ));
                }
                if unanswered.contains(&offset) {
                    return Err(format!(
                        "offset {offset} delivered again after its acceptance was written"
                    ));
                }
                partition
                    .acknowledge("drain", offset, offset, AcknowledgeType::Accept, &config)
                    .map_err(|e| format!("the drain's acknowledgement refused: {e:?}"))?;
                if !accepted.insert(offset) {
                    return Err(format!("offset {offset} accepted twice"));
                }
                report.accepted += 1;
            }
        }
    }
    // Every record is done with: accepted, rejected, or archived at the
    // delivery limit.
    for offset in 0..log_end {
        if !accepted.contains(&offset) && !rejected.contains(&offset) {
            match partition.record(offset) {
                None if offset < partition.start_offset() => report.archived_at_the_limit += 1,
                state => {
                    return Err(format!(
                    "offset {offset} neither accepted nor archived at the end: {state:?}, start {}",
                    partition.start_offset()
                ))
                }
            }
        }
    }
    Ok(report)
}

/// Member `m` hears `answer`: what it acquired (checked against what is
/// done with and what others hold) or how its acknowledgements went.
#[allow(clippy::too_many_arguments)]
fn hear(
    answer: &Answer,
    (m, now): (usize, u64),
    held: &mut [BTreeMap<i64, u64>],
    accepted: &mut BTreeSet<i64>,
    rejected: &mut BTreeSet<i64>,
    last_count: &mut BTreeMap<i64, u16>,
    report: &mut ShareReport,
    config: &ShareConfig,
) -> Result<(), String> {
    match answer {
        Answer::Acquired(ranges) => {
            for range in ranges {
                for offset in range.first..=range.last {
                    report.delivered += 1;
                    if accepted.contains(&offset) || rejected.contains(&offset) {
                        return Err(format!(
                            "offset {offset} delivered again after it was done with"
                        ));
                    }
                    if range.delivery_count > config.delivery_count_limit {
                        return Err(format!(
                            "offset {offset} delivered {} times",
                            range.delivery_count
                        ));
                    }
                    let before = last_count.insert(offset, range.delivery_count).unwrap_or(0);
                    if range.delivery_count <= before {
                        return Err(format!(
                            "offset {offset} delivered with count {} after {before}",
                            range.delivery_count
                        ));
                    }
                    // Whoever held it before must have lost its lock
                    // (expired; with a dead leader it forgot it at once).
                    for (other, holds) in held.iter_mut().enumerate() {
                        if let Some(until) = holds.remove(&offset) {
                            if until > now {
                                return Err(format!(
                                    "offset {offset} handed to m{m} while m{other} holds it until {until} (now {now})"
                                ));
                            }
                        }
                    }
                    held[m].insert(offset, now + config.record_lock_ms);
                }
            }
        }
        Answer::Acknowledged(outcomes) => {
            for &(offset, kind, ok) in outcomes {
                if !ok {
                    report.refused_acknowledgements += 1;
                    continue;
                }
                match kind {
                    AcknowledgeType::Accept => {
                        report.accepted += 1;
                        if !accepted.insert(offset) {
                            return Err(format!("offset {offset} accepted twice"));
                        }
                    }
                    AcknowledgeType::Release => report.released += 1,
                    AcknowledgeType::Reject => {
                        report.rejected += 1;
                        rejected.insert(offset);
                    }
                }
            }
        }
        Answer::Nothing => {}
    }
    Ok(())
}
