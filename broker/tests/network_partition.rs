//! A network partition that isolates a partition leader: three brokers
//! (each `--cores 1`, all three controller voters), each in a network
//! namespace of its own, and a client in a fourth, all on one bridge (see
//! `test_support::netns`). A topic with three replicas and
//! `min.insync.replicas=2` takes self-checking records from an idempotent
//! `acks=all` confluent-kafka producer (tests/clients/replication_check.py)
//! that records every acknowledgement. Then blackhole routes cut the leader
//! of the busiest partition off from the two other brokers, while the
//! client still reaches all three, for well past the session timeout, and
//! the cut is healed; a second round does the same to the active
//! controller (a leader too), so that a leader cut off together with the
//! controller is covered in every run. The claims: the isolated leader acknowledges nothing
//! it cannot keep (no acknowledged record lost, none duplicated, order
//! kept); the majority elects new leaders and acknowledgements resume on
//! the isolated leader's partitions while the cut holds; after healing the
//! old leader is back in every ISR, leads its partitions again, and the
//! producer ends with no failed record.
//!
//! Needs root (network namespaces); elsewhere it prints
//! `SKIPPED: network namespaces not available: ...` and returns.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::acks::{acks, now_ms, replication_script, Reaped};
use test_support::cluster::Cluster;
use test_support::netns::Network;
use test_support::{poll_until, run, strom_bin};

const TOPIC: &str = "partitioned";
const PARTITIONS: i32 = 6;
/// The client's host in the test network; the brokers are "1", "2", "3".
const CLIENT: &str = "client";
/// Acknowledgements before the cut, so that it lands mid-stream.
const ACKS_BEFORE_CUT: usize = 2_000;
/// Acknowledgements after healing, so that the producer runs on through
/// the old leader's return.
const ACKS_AFTER_HEAL: usize = 2_000;
/// How long the cut holds at least: five sessions (2 s in the harness) and
/// twice `replica.lag.time.max.ms`, so the isolated leader is fenced and
/// would have shrunk its ISR if it could.
const CUT_HELD_MIN: Duration = Duration::from_secs(10);
/// By when, after the cut, the majority must have new leaders and
/// acknowledgements on every partition the isolated broker led.
const CUT_RESUME_DEADLINE: Duration = Duration::from_secs(40);
const SETTLE_DEADLINE: Duration = Duration::from_secs(60);
const KCAT_DEADLINE: Duration = Duration::from_secs(20);

/// What one broker's metadata says, as kcat in the client's namespace
/// lists it through `bootstrap` (naming `TOPIC` only once it exists: a
/// request naming it would create it).
#[derive(Debug, Clone)]
struct Listed {
    controller: i32,
    brokers: usize,
    /// Each partition of `TOPIC`: (leader, ISR).
    partitions: BTreeMap<i32, (i32, BTreeSet<i32>)>,
}

fn listed(network: &Network, bootstrap: &str) -> Option<Listed> {
    listed_with(network, bootstrap, &["-t", TOPIC])
}

fn listed_with(network: &Network, bootstrap: &str, args: &[&str]) -> Option<Listed> {
    let output = run(
        network
            .command(CLIENT, "kcat")
            .args(["-b", bootstrap, "-L", "-J", "-m", "5"])
            .args(args),
        None,
        KCAT_DEADLINE,
    );
    if !output.status.success() {
        return None;
    }
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).ok()?;
    // A topic not listed (yet) has no partitions.
    let partitions = common::listing::partitions_of(&json, TOPIC)
        .unwrap_or_default()
        .into_iter()
        .map(|(index, (leader, isr))| (index, (leader, isr.into_iter().collect())))
        .collect();
    Some(Listed {
        controller: json["controllerid"].as_i64()? as i32,
        brokers: json["brokers"].as_array()?.len(),
        partitions,
    })
}

/// Every partition of `TOPIC` led, with its whole ISR, as `bootstrap` lists it.
fn all_in_sync(network: &Network, bootstrap: &str) -> Option<Listed> {
    listed(network, bootstrap).filter(|l| {
        l.partitions.len() == PARTITIONS as usize
            && l.partitions
                .values()
                .all(|(leader, isr)| *leader > 0 && isr.len() == 3)
    })
}

/// Whom a round cuts off from the two other brokers.
#[derive(Debug, Clone, Copy)]
enum Isolate {
    /// The leader of the partition with the most acknowledgements.
    BusiestLeader,
    /// The active controller.
    Controller,
}

/// What one round measured.
struct RoundReport {
    isolated: i32,
    /// The partitions it led at the cut.
    led: BTreeSet<i32>,
    /// The active controller at the cut.
    controller: i32,
    held: Duration,
    /// Cut to the majority listing new leaders for `led`.
    elected_after: Duration,
    /// Cut to the first acknowledgement of a record sent after it, per
    /// partition of `led`.
    resumed_after_ms: BTreeMap<i32, u64>,
    acked_during_cut: usize,
    /// Healing to the old leader back in every ISR and leading `led`.
    rejoined_after: Duration,
}

impl std::fmt::Display for RoundReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "isolated broker {} (leader of {:?}; controller was {}) for {} ms: majority \
             listed new leaders after {} ms; first acknowledgement after the cut on each of \
             its partitions after {:?} ms ({} acknowledged during the cut); back in every ISR \
             and leading again {} ms after healing",
            self.isolated,
            self.led,
            self.controller,
            self.held.as_millis(),
            self.elected_after.as_millis(),
            self.resumed_after_ms,
            self.acked_during_cut,
            self.rejoined_after.as_millis(),
        )
    }
}

struct Round<'a> {
    network: &'a Network,
    cluster: &'a Cluster,
    acks_file: &'a Path,
}

impl Round<'_> {
    fn bootstrap_of(&self, id: i32) -> String {
        self.cluster.node(id).broker.bootstrap()
    }

    /// Cuts `choice` off from the two other brokers for at least
    /// [`CUT_HELD_MIN`], checking that the majority takes over its
    /// partitions and acknowledges on them meanwhile, heals the cut and
    /// waits for the old leader to be back in every ISR and leading its
    /// partitions again.
    fn isolate(&self, choice: Isolate) -> RoundReport {
        let (network, cluster, acks_file) = (self.network, self.cluster, self.acks_file);
        let mut per_partition: BTreeMap<i32, usize> = BTreeMap::new();
        for (_, partition, _, _) in acks(acks_file) {
            *per_partition.entry(partition).or_default() += 1;
        }
        let busiest = *per_partition.iter().max_by_key(|(_, n)| **n).unwrap().0;
        let before = cluster.wait_for("the partitions listed before the cut", || {
            all_in_sync(network, &self.bootstrap_of(1)).filter(|l| l.controller > 0)
        });
        let isolated = match choice {
            Isolate::BusiestLeader => before.partitions[&busiest].0,
            Isolate::Controller => before.controller,
        };
        let led: BTreeSet<i32> = before
            .partitions
            .iter()
            .filter(|(_, (leader, _))| *leader == isolated)
            .map(|(p, _)| *p)
            .collect();
        assert!(
            !led.is_empty(),
            "broker {isolated} leads nothing: {before:?}"
        );
        let majority: Vec<i32> = (1..=3).filter(|&id| id != isolated).collect();
        let acked_before_cut = acks(acks_file).len();

        let isolated_host = isolated.to_string();
        for other in &majority {
            network.cut(&isolated_host, &other.to_string());
        }
        // From when the cut is whole: a record sent before may still have
        // been replicated and acknowledged.
        let cut_at = now_ms();
        let cut = Instant::now();
        // While the cut holds: the majority lists new leaders for the
        // isolated broker's partitions, and records sent after the cut
        // are acknowledged on each of them.
        let mut elected_after: Option<Duration> = None;
        let mut first_ack_after_cut: BTreeMap<i32, u64> = BTreeMap::new();
        let held = poll_until(CUT_RESUME_DEADLINE, || {
            for (_, partition, at, sent) in acks(acks_file) {
                if led.contains(&partition) && sent > cut_at {
                    let first = first_ack_after_cut.entry(partition).or_insert(at);
                    *first = (*first).min(at);
                }
            }
            if elected_after.is_none() {
                let majority_view = listed(network, &self.bootstrap_of(majority[0]));
                let elected = majority_view.is_some_and(|l| {
                    led.iter().all(|p| {
                        l.partitions.get(p).is_some_and(|(leader, isr)| {
                            majority.contains(leader) && !isr.contains(&isolated)
                        })
                    })
                });
                if elected {
                    elected_after = Some(cut.elapsed());
                }
            }
            (cut.elapsed() >= CUT_HELD_MIN
                && elected_after.is_some()
                && first_ack_after_cut.len() == led.len())
            .then_some(())
        });
        if held.is_none() {
            panic!(
                "within {CUT_RESUME_DEADLINE:?} of isolating broker {isolated}: new leaders \
                 for its partitions {led:?} listed by the majority: {elected_after:?}; \
                 partitions acknowledged since: {:?}\n{}",
                first_ack_after_cut.keys().collect::<Vec<_>>(),
                cluster.logs()
            );
        }
        let acked_during_cut = acks(acks_file).len() - acked_before_cut;
        let cut_held = cut.elapsed();
        for other in &majority {
            network.heal(&isolated_host, &other.to_string());
        }

        // After healing: the old leader back in every ISR, and leading
        // its partitions again (the controller's rebalance), as the
        // majority's metadata says (the old leader's own may still be the
        // stale one).
        let healed = Instant::now();
        let rejoined = poll_until(SETTLE_DEADLINE, || {
            all_in_sync(network, &self.bootstrap_of(majority[0])).filter(|l| {
                led.iter().all(|p| {
                    l.partitions
                        .get(p)
                        .is_some_and(|(leader, _)| *leader == isolated)
                })
            })
        });
        if rejoined.is_none() {
            panic!(
                "broker {isolated} not back in every ISR and leading {led:?} within \
                 {SETTLE_DEADLINE:?} of healing: {:?}\n{}",
                listed(network, &self.bootstrap_of(majority[0])),
                cluster.logs()
            );
        }
        RoundReport {
            isolated,
            controller: before.controller,
            held: cut_held,
            elected_after: elected_after.expect("checked"),
            resumed_after_ms: first_ack_after_cut
                .iter()
                .map(|(p, at)| (*p, at - cut_at))
                .collect(),
            acked_during_cut,
            rejoined_after: healed.elapsed(),
            led,
        }
    }
}

#[test]
fn an_isolated_leader_acknowledges_nothing_it_cannot_keep_and_rejoins() {
    // Dropped last (declared first): the brokers and the producer end
    // before their namespaces go.
    let network = match Network::create(&["1", "2", "3", CLIENT]) {
        Ok(network) => network,
        Err(why) => {
            eprintln!("SKIPPED: network namespaces not available: {why}");
            return;
        }
    };
    let hosts = (1..=3).map(|id| network.host(&id.to_string())).collect();
    let cluster = Cluster::start_on(
        hosts,
        &[
            "--set",
            "replica.lag.time.max.ms=5000",
            // The old leader takes its partitions back once in sync, so
            // the final read goes through its log too.
            "--set",
            "leader.imbalance.check.interval.seconds=1",
        ],
    );
    let bootstrap_of = |id: i32| cluster.node(id).broker.bootstrap();
    cluster.wait_for("three brokers and a controller listed", || {
        listed_with(&network, &bootstrap_of(1), &[]).filter(|l| l.brokers == 3 && l.controller > 0)
    });
    let created = run(
        network.command(CLIENT, strom_bin()).args([
            "topic",
            "create",
            TOPIC,
            "--partitions",
            &PARTITIONS.to_string(),
            "--replication-factor",
            "3",
            "--config",
            "min.insync.replicas=2",
            "--bootstrap",
            &bootstrap_of(1),
        ]),
        None,
        SETTLE_DEADLINE,
    );
    assert!(
        created.status.success(),
        "topic create: {}",
        String::from_utf8_lossy(&created.stderr)
    );
    cluster.wait_for("every partition led with three in sync", || {
        all_in_sync(&network, &bootstrap_of(1))
    });

    let dir = tempfile::tempdir().unwrap();
    let acks_file = dir.path().join("acks");
    let stop_file = dir.path().join("stop");
    let producer_log = dir.path().join("producer.log");
    let mut producer = Reaped(
        network
            .command(CLIENT, "python3")
            .arg(replication_script())
            .args(["produce", &cluster.bootstrap(), TOPIC])
            .arg(&stop_file)
            .arg(&acks_file)
            .stdout(std::fs::File::create(&producer_log).unwrap())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 runs in the client's namespace"),
    );
    cluster.wait_for("acknowledgements before the cut", || {
        (acks(&acks_file).len() >= ACKS_BEFORE_CUT).then_some(())
    });

    // Round 1 cuts off the leader of the partition with the most
    // acknowledgements; round 2 the active controller (which leads
    // partitions too), so that a leader cut off together with the
    // controller is always covered.
    let mut rounds = Vec::new();
    for choice in [Isolate::BusiestLeader, Isolate::Controller] {
        let round = Round {
            network: &network,
            cluster: &cluster,
            acks_file: &acks_file,
        };
        rounds.push(round.isolate(choice));
        let acked = acks(&acks_file).len();
        cluster.wait_for("acknowledgements after healing", || {
            (acks(&acks_file).len() >= acked + ACKS_AFTER_HEAL).then_some(())
        });
    }

    let checked = common::acks::stop_and_check(
        &mut producer,
        &stop_file,
        &producer_log,
        network
            .command(CLIENT, "python3")
            .arg(replication_script())
            .args(["check", &cluster.bootstrap(), TOPIC])
            .arg(&acks_file),
        || cluster.logs(),
    );
    // What the controllers did, for the record.
    for node in &cluster.nodes {
        for line in node.broker.log().lines().filter(|l| {
            ["active controller", "fenced", "unfenced", "diverges"]
                .iter()
                .any(|w| l.contains(w))
        }) {
            println!("node {}: {line}", node.id);
        }
    }
    for (n, round) in rounds.iter().enumerate() {
        println!("round {}: {round}", n + 1);
    }
    println!("{}", checked.trim());
}
