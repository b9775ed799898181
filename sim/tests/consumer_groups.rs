//! Seeds of consumer-protocol groups (KIP-848) under faults: the broker's
//! coordinator, members that heartbeat over a network that loses and
//! delays messages, crash and come back, coordinator failovers that lose
//! the unsynced tail of `__consumer_offsets`, and topics that grow.
//! `STROM_SIM_SEED=N` runs only seed N; `STROM_SIM_SEEDS=N` runs N seeds
//! (default 300).

use sim::consumer_groups::{run_group_seed, GroupMutation, GroupReport};
use sim::seeds_from_env;

#[test]
fn no_partition_is_ever_owned_by_two_members_and_the_group_settles() {
    let seeds = seeds_from_env(300);
    let started = std::time::Instant::now();
    let mut sum = GroupReport::default();
    for &seed in &seeds {
        let report = run_group_seed(seed, GroupMutation::None).unwrap_or_else(|broken| {
            panic!("seed {seed} fails: {broken} (STROM_SIM_SEED={seed} replays it)")
        });
        if seeds.len() == 1 {
            println!("seed {seed}: {report:?}");
        }
        sum.heartbeats += report.heartbeats;
        sum.failovers += report.failovers;
        sum.crashes += report.crashes;
        sum.fenced += report.fenced;
        sum.lost_messages += report.lost_messages;
        sum.topic_growths += report.topic_growths;
    }
    if seeds.len() > 1 {
        for (what, count) in [
            ("coordinator failovers", sum.failovers),
            ("member crashes", sum.crashes),
            ("members fenced", sum.fenced),
            ("lost messages", sum.lost_messages),
            ("topics grown", sum.topic_growths),
        ] {
            assert!(count > 0, "no {what} in any seed: {sum:?}");
        }
    }
    println!(
        "{} seeds in {:.1} s: {sum:?}",
        seeds.len(),
        started.elapsed().as_secs_f64()
    );
}

/// Answering a heartbeat before its records are durable is caught: a
/// failover then gives a partition to a member while another still owns
/// it, or fences members it told of an epoch it forgot.
#[test]
fn heartbeats_answered_before_their_records_are_durable_are_caught() {
    let caught = (0..200).find_map(|seed| {
        run_group_seed(seed, GroupMutation::AnswerBeforeDurable)
            .err()
            .map(|broken| (seed, broken))
    });
    let (seed, broken) = caught.expect("answering before durable went unnoticed over 200 seeds");
    println!("caught at seed {seed}: {broken}");
}
