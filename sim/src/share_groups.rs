//! Share partitions (KIP-932) under seeded members: the broker's share
//! partition state (`groups::share`) driven by members that acquire
//! records, acknowledge them late or never (their locks expire), release
//! or reject some, and leave, while the log grows.
//!
//! The rules checked after every step and at the end:
//! - a record is accepted at most once, and an accepted record is never
//!   delivered again;
//! - no record is held by two members at once (a member whose lock
//!   expired has its acknowledgement refused);
//! - each delivery of a record has a higher delivery count than the one
//!   before, and none beyond the limit;
//! - once members stop failing, every record is accepted or archived: none
//!   is lost while acquired and not acknowledged.

use std::collections::{BTreeMap, BTreeSet};

use groups::share::{AcknowledgeType, ShareConfig, SharePartition};

const TICK_MS: u64 = 50;
const STEPS: u64 = 2_000;

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
}

pub fn run_share_seed(seed: u64) -> Result<ShareReport, String> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let config = ShareConfig {
        record_lock_ms: 500 + rng.u64(0..1_000),
        delivery_count_limit: 2 + rng.u16(0..4),
        max_record_locks: 5 + rng.usize(0..40),
    };
    let members = 2 + rng.usize(0..4);
    let mut partition = SharePartition::new(0);
    let mut report = ShareReport::default();
    let mut log_end = 0i64;
    // What each member believes it holds: offset -> delivery count.
    let mut held: Vec<BTreeMap<i64, u16>> = vec![BTreeMap::new(); members];
    let mut accepted: BTreeSet<i64> = BTreeSet::new();
    let mut rejected: BTreeSet<i64> = BTreeSet::new();
    let mut last_count: BTreeMap<i64, u16> = BTreeMap::new();
    let mut now = 0u64;
    let settle_from = STEPS * 3 / 4;
    for step in 0..STEPS * 2 {
        now += TICK_MS;
        let faulty = step < settle_from;
        if step < STEPS && rng.u32(0..3) == 0 {
            log_end += i64::from(rng.u32(1..8));
        }
        report.lock_expiries += partition.expire_locks(now, &config) as u64;
        let m = rng.usize(0..members);
        let name = format!("m{m}");
        match rng.u32(0..10) {
            // Acquire.
            0..=3 => {
                for range in partition.acquire(&name, log_end, 1 + rng.usize(0..10), now, &config) {
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
                        for (other, holds) in held.iter().enumerate() {
                            if other != m && holds.contains_key(&offset) {
                                // The other's lock must have expired: its
                                // acknowledgement will be refused.
                                if let Some((
                                    groups::share::RecordState::Acquired { member, .. },
                                    _,
                                )) = partition.record(offset)
                                {
                                    if *member == format!("m{other}") {
                                        return Err(format!(
                                            "offset {offset} held by m{other} and {name}"
                                        ));
                                    }
                                }
                            }
                        }
                        held[m].insert(offset, range.delivery_count);
                    }
                }
            }
            // Acknowledge some of what it holds, or forget it (a slow or
            // dead member: its locks expire).
            4..=8 => {
                let mine: Vec<i64> = held[m].keys().copied().collect();
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
                    match partition.acknowledge(&name, offset, offset, kind, &config) {
                        Ok(()) => match kind {
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
                        },
                        Err(_) => report.refused_acknowledgements += 1,
                    }
                }
            }
            // Leaves (and comes back at once as the same name).
            _ if faulty => {
                partition.release_member(&name, &config);
                held[m].clear();
            }
            _ => {}
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
