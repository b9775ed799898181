//! Seeds of a share partition (KIP-932) under members that acquire,
//! acknowledge late or never, release, reject and leave, and a leader
//! that crashes before or after writing a change durably.
//! `STROM_SIM_SEED=N` runs only seed N; `STROM_SIM_SEEDS=N` runs N seeds
//! (default 300).

use sim::seeds_from_env;
use sim::share_groups::{run_share_seed, ShareMutation, ShareReport};

#[test]
fn each_record_is_accepted_once_and_none_is_lost() {
    let seeds = seeds_from_env(300);
    let mut sum = ShareReport::default();
    for &seed in &seeds {
        let report = run_share_seed(seed, ShareMutation::None).unwrap_or_else(|broken| {
            panic!("seed {seed} fails: {broken} (STROM_SIM_SEED={seed} replays it)")
        });
        sum.delivered += report.delivered;
        sum.accepted += report.accepted;
        sum.released += report.released;
        sum.rejected += report.rejected;
        sum.lock_expiries += report.lock_expiries;
        sum.refused_acknowledgements += report.refused_acknowledgements;
        sum.archived_at_the_limit += report.archived_at_the_limit;
        sum.leader_crashes += report.leader_crashes;
        sum.unanswered_acceptances += report.unanswered_acceptances;
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
            ("leader crashes", sum.leader_crashes),
            (
                "acceptances written but not answered",
                sum.unanswered_acceptances,
            ),
        ] {
            assert!(count > 0, "no {what} in any seed: {sum:?}");
        }
    }
    println!("{} seeds: {sum:?}", seeds.len());
}

/// Answering acknowledgements before the state is durable is caught: a
/// crash then forgets an acceptance a member was told of, and the record
/// is delivered again.
#[test]
fn acknowledgements_answered_before_they_are_durable_are_caught() {
    let caught = (0..200).find_map(|seed| {
        run_share_seed(seed, ShareMutation::AnswerBeforeDurable)
            .err()
            .map(|broken| (seed, broken))
    });
    let (seed, broken) = caught.expect("answering before durable went unnoticed over 200 seeds");
    println!("caught at seed {seed}: {broken}");
}
