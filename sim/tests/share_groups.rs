//! Seeds of a share partition (KIP-932) under members that acquire,
//! acknowledge late or never, release, reject and leave.
//! `STROM_SIM_SEED=N` runs only seed N; `STROM_SIM_SEEDS=N` runs N seeds
//! (default 300).

use sim::seeds_from_env;
use sim::share_groups::{run_share_seed, ShareReport};

#[test]
fn each_record_is_accepted_once_and_none_is_lost() {
    let seeds = seeds_from_env(300);
    let mut sum = ShareReport::default();
    for &seed in &seeds {
        let report = run_share_seed(seed).unwrap_or_else(|broken| {
            panic!("seed {seed} fails: {broken} (STROM_SIM_SEED={seed} replays it)")
        });
        sum.delivered += report.delivered;
        sum.accepted += report.accepted;
        sum.released += report.released;
        sum.rejected += report.rejected;
        sum.lock_expiries += report.lock_expiries;
        sum.refused_acknowledgements += report.refused_acknowledgements;
        sum.archived_at_the_limit += report.archived_at_the_limit;
    }
    if seeds.len() > 1 {
        for (what, count) in [
            ("records released", sum.released),
            ("records rejected", sum.rejected),
            ("locks expired", sum.lock_expiries),
            ("acknowledgements refused", sum.refused_acknowledgements),
            (
                "records archived at the delivery limit",
                sum.archived_at_the_limit,
            ),
        ] {
            assert!(count > 0, "no {what} in any seed: {sum:?}");
        }
    }
    println!("{} seeds: {sum:?}", seeds.len());
}
