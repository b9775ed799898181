//! Seeds of every scenario with transactions, on clusters of 3 and 5
//! brokers: the transaction coordinator on the leader of a replicated
//! `__transaction_state` partition, transactional producers and a
//! read_committed reader, with faults. `STROM_SIM_SEED=N` runs only seed
//! N (of every scenario, printing its report); `STROM_SIM_SEEDS=N` runs N
//! seeds per scenario (default 60).

use std::collections::BTreeMap;

use sim::{
    run, run_seeds, seeds_from_env, txn_scenario, Mutation, Report, Scenario, TXN_SCENARIOS,
};

/// What the runs of one scenario did, summed.
#[derive(Debug, Default)]
struct Sum {
    committed: usize,
    aborted: usize,
    read: usize,
    fenced: usize,
    loads: usize,
    events: BTreeMap<&'static str, usize>,
}

impl Sum {
    fn add(&mut self, report: &Report) {
        self.committed += report.transactions_committed;
        self.aborted += report.transactions_aborted;
        self.read += report.records_read;
        self.fenced += report.producers_fenced;
        self.loads += report.coordinator_loads;
        for (&what, &count) in &report.events {
            *self.events.entry(what).or_default() += count;
        }
    }

    fn event(&self, what: &str) -> usize {
        self.events.get(what).copied().unwrap_or(0)
    }
}

/// Runs `scenario` over `seeds`: the first failing seed and why, else
/// the sums of the runs' reports.
fn first_failure(scenario: &Scenario, seeds: &[u64]) -> Result<Sum, (u64, String)> {
    let mut sum = Sum::default();
    run_seeds(scenario, seeds, |report| sum.add(report))?;
    Ok(sum)
}

/// What each scenario must have exercised over its seeds, beside
/// transactions committed, aborted and read: the fault it is about.
fn exercised(name: &str, sum: &Sum, seeds: usize) -> Result<(), String> {
    let (what, count) = match name {
        "txn_coordinator_failover" => ("coordinator loads beyond the first", sum.loads - seeds),
        "txn_failed_appends" => (
            "coordinator appends given up",
            sum.event("coordinator appends given up"),
        ),
        "txn_stalled_markers" => (
            "markers held by a stalled connection",
            sum.event("markers held by a stalled connection"),
        ),
        "txn_producers" => ("producers fenced", sum.fenced),
        "txn_everything" => (
            "transactions timed out",
            sum.event("transactions timed out"),
        ),
        _ => return Ok(()),
    };
    if count == 0 {
        return Err(format!("no {what} in any seed"));
    }
    Ok(())
}

fn every_scenario_keeps_transactions_whole(brokers: usize, default_seeds: u64) {
    let seeds = seeds_from_env(default_seeds);
    for name in TXN_SCENARIOS {
        let scenario = txn_scenario(name, brokers).unwrap();
        let started = std::time::Instant::now();
        let sum = first_failure(&scenario, &seeds).unwrap_or_else(|(seed, broken)| {
            panic!("{name}, {brokers} brokers: seed {seed} fails: {broken} (STROM_SIM_SEED={seed} replays it)")
        });
        assert!(
            sum.committed > 0 && sum.aborted > 0 && sum.read > 0,
            "{name}, {brokers} brokers: no transaction committed, aborted or read in any seed: \
             {sum:?}"
        );
        if let Err(missing) = exercised(name, &sum, seeds.len()) {
            panic!("{name}, {brokers} brokers: {missing}: {sum:?}");
        }
        println!(
            "{name}, {brokers} brokers: {} seeds in {:.1} s: {} transactions committed, {} \
             aborted, {} records read committed, {} producers fenced, {} coordinator loads; {:?}",
            seeds.len(),
            started.elapsed().as_secs_f64(),
            sum.committed,
            sum.aborted,
            sum.read,
            sum.fenced,
            sum.loads,
            sum.events
        );
    }
}

#[test]
fn three_brokers_keep_every_transaction_whole_or_invisible() {
    every_scenario_keeps_transactions_whole(3, 60);
}

#[test]
fn five_brokers_keep_every_transaction_whole_or_invisible() {
    every_scenario_keeps_transactions_whole(5, 60);
}

/// Each rule broken on purpose is caught within the seeds CI runs; what
/// the checks said.
fn caught(name: &str, mutation: Mutation) -> String {
    let mut scenario = txn_scenario(name, 3).unwrap();
    scenario.mutation = mutation;
    let seeds: Vec<u64> = (0..40).collect();
    let Err((seed, broken)) = first_failure(&scenario, &seeds) else {
        panic!("{mutation:?} in {name} went unnoticed over 40 seeds");
    };
    println!("{mutation:?} in {name}: caught at seed {seed}: {broken}");
    broken
}

#[test]
fn a_last_stable_offset_past_an_open_transaction_is_caught() {
    let broken = caught("txn_quiet", Mutation::LastStableIgnoresOpenTransactions);
    assert!(broken.contains("last stable offset"), "{broken}");
}

#[test]
fn markers_counted_written_before_their_partitions_answer_are_caught() {
    caught("txn_stalled_markers", Mutation::MarkersNotAwaited);
}

#[test]
fn a_first_record_appended_unchecked_with_the_coordinator_is_caught() {
    caught("txn_producers", Mutation::FirstRecordUnchecked);
}

/// Seed 268 of `txn_stalled_markers` on 3 brokers: the coordinator's
/// markers' connection to the leader of a data partition stalled while
/// it had a transaction's commit marker to send; the coordinator's broker
/// paused, another took `__transaction_state` over, loaded the decided
/// transaction, wrote its markers and completed it, and the producer
/// opened its next transaction on that partition at the same producer
/// epoch. The stall over, the deposed coordinator's marker arrived and,
/// were a marker refused only for an older producer epoch, would end the
/// new transaction's records as committed before it was decided. A leader
/// refuses a marker from a coordinator epoch older than one that already
/// wrote a marker for the producer (Kafka's rule, the broker's:
/// `ProducerTable::check_marker`); the looser rule is a mutation the seed
/// must catch.
#[test]
fn seed_268_a_marker_from_a_deposed_coordinator_is_refused() {
    let mut scenario = txn_scenario("txn_stalled_markers", 3).unwrap();
    run(268, &scenario).unwrap();
    scenario.mutation = Mutation::MarkersOfAnyCoordinator;
    let broken = run(268, &scenario).expect_err("the seed finds the stale marker");
    assert!(broken.contains("ends transaction"), "{broken}");
}

/// Seed 227 of `txn_everything` on 3 brokers: a leader proposed taking a
/// caught-up follower back into the ISR; the controller took it, but its
/// answer was lost and the leader was cut from the controller. Had the
/// leader given the unanswered change up, it would have counted its high
/// watermark over the ISR it had before (itself alone) and taken a record
/// as committed that the follower, in the ISR by the controller's word,
/// lacked; the controller then fenced the leader and elected that
/// follower. A leader sends an unanswered change again and keeps it
/// proposed, its members counted, until an image settles it (Kafka's
/// leaders do so, and the broker's `send_isr_change`); giving it up is a
/// mutation the seed must catch.
#[test]
fn seed_227_an_unanswered_isr_change_stays_proposed() {
    let mut scenario = txn_scenario("txn_everything", 3).unwrap();
    run(227, &scenario).unwrap();
    scenario.mutation = Mutation::IsrChangeGivenUp;
    let broken = run(227, &scenario).expect_err("the seed finds the lost change");
    assert!(
        broken.contains("disagree below their high watermarks"),
        "{broken}"
    );
}

/// Seed 70 of `txn_stalled_markers` on 5 brokers was the simulator's
/// own: its coordinator counted the late answer of an earlier marker
/// attempt (from a paused former leader) while a later attempt was still
/// held by a stalled connection; that attempt then ended the producer's
/// next transaction. The broker's coordinator waits for each attempt's
/// answer, or gives it up, before the next; here only the answer to the
/// latest attempt on a partition counts.
#[test]
fn seed_70_only_the_latest_marker_attempt_counts() {
    let scenario = txn_scenario("txn_stalled_markers", 5).unwrap();
    run(70, &scenario).unwrap();
}
