//! Seeds of a share partition (KIP-932) under members that acquire,
//! acknowledge late or never, release, reject and leave, and a leader
//! that crashes before or after writing a change durably; and of a share
//! group's membership under coordinator failovers.
//! `STROM_SIM_SEED=N` runs only seed N; `STROM_SIM_SEEDS=N` runs N seeds
//! (default 300).

use sim::seeds_from_env;
use sim::share_groups::{run_share_seed, ShareMutation, ShareReport};
use sim::share_membership::{run_share_membership_seed, GroupMutation, MembershipReport};

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

/// Share-group membership under coordinator failovers that lose the
/// unsynced tail of `__consumer_offsets`, members that crash, leave and
/// come back, and a network that loses and delays heartbeats: the
/// coordinator never forgets a member or an epoch it told one of, and
/// once faults stop its members are the live ones at their epochs.
#[test]
fn share_members_keep_their_epochs_across_coordinator_failovers() {
    let seeds = seeds_from_env(300);
    let mut sum = MembershipReport::default();
    for &seed in &seeds {
        let report =
            run_share_membership_seed(seed, GroupMutation::None).unwrap_or_else(|broken| {
                panic!("seed {seed} fails: {broken} (STROM_SIM_SEED={seed} replays it)")
            });
        sum.heartbeats += report.heartbeats;
        sum.failovers += report.failovers;
        sum.crashes += report.crashes;
        sum.leaves += report.leaves;
        sum.rejoins += report.rejoins;
        sum.lost_messages += report.lost_messages;
        sum.expired += report.expired;
    }
    if seeds.len() > 1 {
        for (what, count) in [
            ("coordinator failovers", sum.failovers),
            ("member crashes", sum.crashes),
            ("members leaving", sum.leaves),
            ("members joining again", sum.rejoins),
            ("lost messages", sum.lost_messages),
            ("sessions ended", sum.expired),
        ] {
            assert!(count > 0, "no {what} in any seed: {sum:?}");
        }
    }
    println!("{} seeds: {sum:?}", seeds.len());
}

/// Answering a share heartbeat before its records are durable is caught:
/// a failover then forgets a member, or an epoch, it was told of.
#[test]
fn share_heartbeats_answered_before_their_records_are_durable_are_caught() {
    let caught = (0..200).find_map(|seed| {
        run_share_membership_seed(seed, GroupMutation::AnswerBeforeDurable)
            .err()
            .map(|broken| (seed, broken))
    });
    let (seed, broken) = caught.expect("answering before durable went unnoticed over 200 seeds");
    println!("caught at seed {seed}: {broken}");
}
