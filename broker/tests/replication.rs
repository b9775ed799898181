//! Replication across real `strom` processes: three brokers (each
//! `--cores 1` on loopback), a topic with three replicas and
//! `min.insync.replicas=2`, and an idempotent `acks=all` confluent-kafka
//! producer writing self-checking records while leaders are killed with
//! `kill -9`, then a follower (tests/clients/replication_check.py). The claim: no
//! acknowledged record lost, none duplicated, order kept. Each round's
//! unavailability (kill to the first acknowledgement after it) is
//! printed; `scripts/soak` runs many rounds.

mod common;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::acks::{acks, now_ms, replication_script, Ack, Reaped};
use common::SoakBudget;
use test_support::cluster::Cluster;
use test_support::{poll_until, run, strom_ok};

const TOPIC: &str = "replicated";
const PARTITIONS: i32 = 6;
/// Acknowledgements between two kills, so that each kill lands mid-stream.
const ACKS_PER_ROUND: usize = 2_000;
const ROUND_DEADLINE: Duration = Duration::from_secs(90);

/// (leader, ISR) of each partition of `TOPIC`, as kcat lists them, once
/// all are listed.
fn partitions(bootstrap: &str) -> Option<BTreeMap<i32, (i32, Vec<i32>)>> {
    common::listing::partitions(bootstrap, TOPIC).filter(|p| p.len() == PARTITIONS as usize)
}

/// Some when `bootstrap` lists `count` brokers and a controller.
fn brokers_listed(bootstrap: &str, count: usize) -> Option<()> {
    let output = run(
        Command::new("kcat").args(["-b", bootstrap, "-L", "-J", "-m", "5"]),
        None,
        Duration::from_secs(20),
    );
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).ok()?;
    (json["brokers"].as_array()?.len() == count && json["controllerid"].as_i64()? > 0).then_some(())
}

/// Three voters with `extra` settings, once each lists all three brokers.
fn three_brokers(extra: &[&str]) -> Cluster {
    let cluster = Cluster::start(3, extra);
    let any = cluster.node(1).broker.bootstrap();
    cluster.wait_for("three brokers listed", || brokers_listed(&any, 3));
    cluster
}

/// Creates `topic` with `partitions` partitions of three replicas (and
/// `configs`, `KEY=VALUE`) through node 1.
fn create_replicated(cluster: &Cluster, topic: &str, partitions: i32, configs: &[&str]) {
    let partitions = partitions.to_string();
    let mut args = vec![
        "topic",
        "create",
        topic,
        "--partitions",
        &partitions,
        "--replication-factor",
        "3",
    ];
    for config in configs {
        args.extend(["--config", config]);
    }
    strom_ok(&cluster.node(1).broker, &args);
}

/// The idempotent acks=all producer of `tests/clients/replication_check.py`
/// writing to `topic` until its stop file exists, with its files in a
/// temporary directory.
struct Producing {
    child: Reaped,
    dir: tempfile::TempDir,
}

impl Producing {
    fn start(bootstrap: &str, topic: &str) -> Producing {
        let dir = tempfile::tempdir().unwrap();
        let child = Command::new("python3")
            .arg(replication_script())
            .args(["produce", bootstrap, topic])
            .arg(dir.path().join("stop"))
            .arg(dir.path().join("acks"))
            .stdout(std::fs::File::create(dir.path().join("producer.log")).unwrap())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 runs");
        Producing {
            child: Reaped(child),
            dir,
        }
    }

    fn acks(&self) -> Vec<Ack> {
        acks(&self.dir.path().join("acks"))
    }

    /// Stops the producer, then reads `topic` back through `bootstrap`:
    /// every acknowledged record must be there once, byte-exact and in
    /// order, and none may have failed. Returns the checker's counts.
    fn stop_and_check(mut self, cluster: &Cluster, bootstrap: &str, topic: &str) -> String {
        let dir = self.dir.path();
        common::acks::stop_and_check(
            &mut self.child,
            &dir.join("stop"),
            &dir.join("producer.log"),
            Command::new("python3")
                .arg(replication_script())
                .args(["check", bootstrap, topic])
                .arg(dir.join("acks")),
            || cluster.logs(),
        )
    }
}

fn median(values: &mut [u64]) -> u64 {
    values.sort_unstable();
    values[values.len() / 2]
}

#[test]
fn killing_leaders_under_acks_all_loses_no_acknowledged_record() {
    let cluster = three_brokers(&["--set", "replica.lag.time.max.ms=5000"]);
    kill_leaders_under_acks_all(cluster, SoakBudget::from_env(3));
}

/// The same where the brokers replicate and forward over SASL_SSL on a
/// listener of their own, and reach the controllers over SASL_SSL.
#[test]
fn killing_leaders_of_a_cluster_secured_between_brokers_loses_no_acknowledged_record() {
    let certificates = test_support::certs::Certificates::make();
    let mut args = certificates.secured_cluster_args();
    args.extend([
        "--set".to_string(),
        "replica.lag.time.max.ms=5000".to_string(),
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let cluster = Cluster::start_secured(3, &args);
    let any = cluster.node(1).broker.bootstrap();
    cluster.wait_for("three brokers listed", || brokers_listed(&any, 3));
    kill_leaders_under_acks_all(cluster, SoakBudget::from_env(2));
    drop(certificates);
}

/// Kills the leader of the busiest partition under an acks=all producer
/// each round, then a follower: every acknowledged record must be read
/// back once, byte-exact and in order.
fn kill_leaders_under_acks_all(mut cluster: Cluster, budget: SoakBudget) {
    let any = cluster.node(1).broker.bootstrap();
    create_replicated(&cluster, TOPIC, PARTITIONS, &["min.insync.replicas=2"]);
    cluster.wait_for("every partition led with three in sync", || {
        partitions(&any).filter(|p| p.values().all(|(l, isr)| *l > 0 && isr.len() == 3))
    });

    let producer = Producing::start(&cluster.bootstrap(), TOPIC);

    let mut unavailable_ms = Vec::new();
    let mut rounds = 0u64;
    while budget.more(rounds) {
        let before = producer.acks().len();
        let progressed = poll_until(ROUND_DEADLINE, || {
            (producer.acks().len() >= before + ACKS_PER_ROUND).then_some(())
        });
        if progressed.is_none() {
            panic!("no progress in round {rounds}\n{}", cluster.logs());
        }
        // The leader of the partition with the most acknowledgements.
        let mut per_partition: BTreeMap<i32, usize> = BTreeMap::new();
        for (_, partition, _, _) in producer.acks() {
            *per_partition.entry(partition).or_default() += 1;
        }
        let busiest = per_partition
            .iter()
            .max_by_key(|(_, n)| **n)
            .map(|(p, _)| *p)
            .unwrap();
        let alive: Vec<i32> = cluster.nodes.iter().map(|n| n.id).collect();
        let listed = cluster.wait_for("the partitions listed", || {
            alive
                .iter()
                .find_map(|&id| partitions(&cluster.node(id).broker.bootstrap()))
        });
        let victim = listed[&busiest].0;
        let survivor = cluster
            .node((1..=3).find(|&n| n != victim).unwrap())
            .broker
            .bootstrap();
        let killed_at = now_ms();
        cluster.node_mut(victim).broker.kill();
        // Unavailability: kill to the first acknowledgement of a record
        // sent after it to the partition the killed broker led (the other
        // partitions keep acknowledging all along, and answers already on
        // their way at the kill do not count).
        let acked_after = cluster.wait_for("an acknowledgement after the kill", || {
            producer
                .acks()
                .iter()
                .filter(|(_, partition, _, sent)| *partition == busiest && *sent > killed_at)
                .map(|(_, _, at, _)| *at)
                .min()
        });
        unavailable_ms.push(acked_after - killed_at);
        cluster.wait_for("another leader for every partition", || {
            partitions(&survivor).filter(|p| p.values().all(|(l, _)| *l > 0 && *l != victim))
        });
        cluster.node_mut(victim).broker.start_again();
        cluster.wait_for("the killed broker back in every ISR", || {
            partitions(&survivor).filter(|p| p.values().all(|(_, isr)| isr.len() == 3))
        });
        rounds += 1;
        println!(
            "round {rounds}: killed broker {victim} (leader of partition {busiest}); \
             unavailable {} ms",
            acked_after - killed_at
        );
    }
    // A follower killed: acks=all goes on with the two left
    // (min.insync.replicas=2), and it catches up when it is back.
    let listed = cluster.wait_for("the partitions listed", || partitions(&any));
    let (leader, isr) = listed[&0].clone();
    let follower = *isr
        .iter()
        .find(|&&r| r != leader)
        .expect("a follower in sync");
    let before = producer.acks().len();
    cluster.node_mut(follower).broker.kill();
    cluster.wait_for("acknowledgements go on without the follower", || {
        (producer.acks().len() >= before + ACKS_PER_ROUND).then_some(())
    });
    cluster.node_mut(follower).broker.start_again();
    cluster.wait_for("the follower back in every ISR", || {
        partitions(&any).filter(|p| p.values().all(|(_, isr)| isr.len() == 3))
    });
    let checked = producer.stop_and_check(&cluster, &cluster.bootstrap(), TOPIC);
    assert!(rounds >= 1, "no kill happened");
    println!(
        "{rounds} rounds: unavailability median {} ms, max {} ms; {checked}",
        median(&mut unavailable_ms.clone()),
        unavailable_ms.iter().max().unwrap()
    );
}

/// Produces one record with `acks=all` over raw Kafka requests; the
/// partition's error code.
fn produce_one(
    broker: &test_support::Broker,
    topic: &str,
    correlation_id: i32,
    value: &[u8],
) -> i16 {
    use bytes::Bytes;
    use protocol::batch::build::{batch, NewRecord};
    use protocol::kafka_protocol::messages::produce_request::{
        PartitionProduceData, TopicProduceData,
    };
    use protocol::kafka_protocol::messages::{ApiKey, ProduceRequest, ProduceResponse, TopicName};
    use protocol::kafka_protocol::protocol::StrBytes;
    let records = Bytes::from(batch(
        1_700_000_000_000,
        &[NewRecord {
            key: None,
            value: Some(value.to_vec()),
            headers: Vec::new(),
            timestamp_delta: 0,
        }],
    ));
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(20_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(records))])]);
    let mut stream = common::raw::connect(broker);
    let response: ProduceResponse = common::raw::call(
        &mut stream,
        ApiKey::Produce,
        9,
        correlation_id,
        "replication-test",
        &request,
    );
    response.responses[0].partition_responses[0].error_code
}

/// The ISR of partition 0 of `topic` as `bootstrap` lists it.
fn isr(bootstrap: &str, topic: &str) -> Option<(i32, Vec<i32>)> {
    let output = run(
        Command::new("kcat").args(["-b", bootstrap, "-L", "-J", "-m", "5", "-t", topic]),
        None,
        Duration::from_secs(20),
    );
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).ok()?;
    let p = &json["topics"].as_array()?.first()?["partitions"]
        .as_array()?
        .first()?
        .clone();
    let mut isr: Vec<i32> = p["isrs"]
        .as_array()?
        .iter()
        .filter_map(|r| r["id"].as_i64())
        .map(|id| id as i32)
        .collect();
    isr.sort_unstable();
    Some((p["leader"].as_i64()? as i32, isr))
}

#[test]
fn a_stopped_follower_leaves_the_isr_and_two_stopped_refuse_acks_all() {
    const NOT_ENOUGH_REPLICAS: i16 = 19;
    // Voters 1-3 and two brokers that are not voters, 4 and 5: the
    // partition lives on 1, 4 and 5, so stopping 4 and 5 leaves the
    // controller quorum whole to take the leader's ISR changes. Sessions
    // long enough that only the replica lag takes a stopped follower out.
    let mut cluster = Cluster::start(
        3,
        &[
            "--set",
            "broker.session.timeout.ms=60000",
            "--set",
            "replica.lag.time.max.ms=2000",
        ],
    );
    cluster.add_broker(4);
    cluster.add_broker(5);
    let any = cluster.node(2).broker.bootstrap();
    cluster.wait_for("five brokers listed", || brokers_listed(&any, 5));
    let created = common::run_python(
        "cluster_check.py",
        &[
            "create_assigned",
            &any,
            "lag",
            "1,4,5",
            "min.insync.replicas=2",
        ],
        Duration::from_secs(120),
    );
    assert!(created.contains("created: lag on [1, 4, 5]"), "{created}");
    cluster.wait_for("three in sync", || {
        isr(&any, "lag").filter(|(l, isr)| *l == 1 && isr.len() == 3)
    });
    let leader = &cluster.node(1).broker;
    // The ISR listed by another broker may be seen before the leader has
    // taken the leadership itself: NOT_LEADER_OR_FOLLOWER is retriable,
    // and a client sends again (a refused batch is not written).
    let first = cluster.wait_for("the leader taking the first record", || {
        let code = produce_one(leader, "lag", 1, b"all three");
        (code != 6).then_some(code)
    });
    assert_eq!(first, 0);
    // Lone records, one at a time: each is answered once both followers
    // report it durable, not when their next fetch (already waiting at the
    // leader while they sync) gives up its 500 ms wait.
    let mut waits = Vec::new();
    for i in 0..9 {
        let started = std::time::Instant::now();
        let value = format!("lone {i}");
        assert_eq!(produce_one(leader, "lag", 10 + i, value.as_bytes()), 0);
        waits.push(started.elapsed().as_millis() as u64);
    }
    let lone = median(&mut waits.clone());
    assert!(
        lone < 250,
        "a lone acks=all record waited for the followers' long polls: {waits:?} ms"
    );
    // The stages of that replicated batch show on /metrics: the leader's
    // own sync, the followers' fetches at it and its wait for the ISR; a
    // follower's append made durable.
    for (node, stages) in [
        (
            1,
            &[
                "leader_local_durable",
                "leader_follower_fetch",
                "leader_isr_wait",
                "answer_after_acks",
            ][..],
        ),
        (4, &["follower_append_durable"][..]),
    ] {
        let n = cluster.node(node);
        let (code, body) =
            common::http_get(&format!("{}:{}", n.host.ip, n.ports.admin), "/metrics");
        assert_eq!(code, 200);
        for stage in stages {
            let count = format!(
                "strom_replication_stage_seconds_count{{shard=\"all\",stage=\"{stage}\"}} "
            );
            let value = body
                .lines()
                .find_map(|l| l.strip_prefix(count.as_str()))
                .and_then(|v| v.trim().parse::<f64>().ok());
            assert!(
                value.is_some_and(|v| v >= 1.0),
                "node {node}: no {stage} counted: {:?}",
                body.lines()
                    .filter(|l| l.contains("replication_stage"))
                    .collect::<Vec<_>>()
            );
        }
    }

    // One follower stopped: it leaves the ISR, acks=all goes on with two.
    cluster.node(4).broker.signal(libc::SIGSTOP);
    cluster.wait_for("the stopped follower out of the ISR", || {
        isr(&any, "lag").filter(|(_, isr)| *isr == [1, 5])
    });
    assert_eq!(produce_one(leader, "lag", 2, b"two in sync"), 0);
    cluster.node(4).broker.signal(libc::SIGCONT);
    cluster.wait_for("the follower back in the ISR", || {
        isr(&any, "lag").filter(|(_, isr)| isr.len() == 3)
    });

    // Two stopped: the ISR is the leader alone, below min.insync.replicas.
    for follower in [4, 5] {
        cluster.node(follower).broker.signal(libc::SIGSTOP);
    }
    cluster.wait_for("the leader alone in the ISR", || {
        isr(&any, "lag").filter(|(_, isr)| *isr == [1])
    });
    assert_eq!(
        produce_one(leader, "lag", 3, b"refused"),
        NOT_ENOUGH_REPLICAS
    );
    for follower in [4, 5] {
        cluster.node(follower).broker.signal(libc::SIGCONT);
    }
    cluster.wait_for("all three back in sync", || {
        isr(&any, "lag").filter(|(_, isr)| isr.len() == 3)
    });
    assert_eq!(produce_one(leader, "lag", 4, b"all three again"), 0);

    // Every acknowledged record is there once, the refused one is not.
    let output = run(
        Command::new("kcat").args(["-b", &any, "-C", "-t", "lag", "-e", "-q", "-f", "%s\n"]),
        None,
        Duration::from_secs(60),
    );
    let values: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    let mut expected = vec!["all three".to_string()];
    expected.extend((0..9).map(|i| format!("lone {i}")));
    expected.extend(["two in sync".to_string(), "all three again".to_string()]);
    assert_eq!(values, expected);
}

#[test]
fn a_group_resumes_from_its_committed_offsets_after_its_coordinator_fails() {
    let mut cluster = three_brokers(&[]);
    create_replicated(&cluster, "failover", 3, &[]);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("group.json");
    let state = state.to_str().unwrap();
    let out = common::run_python(
        "cluster_check.py",
        &[
            "group_phase1",
            &cluster.bootstrap(),
            "failover",
            "resuming",
            "4000",
            state,
        ],
        Duration::from_secs(240),
    );
    let coordinator: i32 = out
        .lines()
        .find_map(|l| l.strip_prefix("coordinator: "))
        .and_then(|id| id.trim().parse().ok())
        .unwrap_or_else(|| panic!("{out}"));
    // The coordinator and every leader on it go; the offsets topic has
    // three replicas, so another broker coordinates with the offsets.
    cluster.node_mut(coordinator).broker.kill();
    let survivor = cluster
        .node((1..=3).find(|&n| n != coordinator).unwrap())
        .broker
        .bootstrap();
    cluster.wait_for("the killed broker fenced", || brokers_listed(&survivor, 2));
    let out = common::run_python(
        "cluster_check.py",
        &[
            "group_phase2",
            &survivor,
            "failover",
            "resuming",
            "4000",
            state,
        ],
        Duration::from_secs(240),
    );
    assert!(
        out.contains("phase2: resumed at the committed offsets, 4000 of 4000 read"),
        "{out}"
    );
}

/// A partition as kcat lists it: leader, replicas (preferred first), ISR size.
type Led = (i32, Vec<i32>, usize);

/// Each partition of `topic` by index.
fn leaders(bootstrap: &str, topic: &str) -> Option<BTreeMap<i32, Led>> {
    let output = run(
        Command::new("kcat").args(["-b", bootstrap, "-L", "-J", "-m", "5", "-t", topic]),
        None,
        Duration::from_secs(20),
    );
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).ok()?;
    let mut out = BTreeMap::new();
    for p in json["topics"].as_array()?.first()?["partitions"].as_array()? {
        let ids = |key: &str| -> Option<Vec<i32>> {
            Some(
                p[key]
                    .as_array()?
                    .iter()
                    .filter_map(|r| r["id"].as_i64())
                    .map(|id| id as i32)
                    .collect(),
            )
        };
        out.insert(
            p["partition"].as_i64()? as i32,
            (
                p["leader"].as_i64()? as i32,
                ids("replicas")?,
                ids("isrs")?.len(),
            ),
        );
    }
    Some(out)
}

/// Kills and restarts the preferred leader of partition 0 of `topic`:
/// afterwards it is back in sync but another broker leads partition 0.
/// Returns the preferred leader.
fn displace_preferred_leader(cluster: &mut Cluster, topic: &str) -> i32 {
    let any = cluster.node(1).broker.bootstrap();
    let before = cluster.wait_for("three in sync", || {
        leaders(&any, topic).filter(|l| l.values().all(|(leader, _, isr)| *leader > 0 && *isr == 3))
    });
    let preferred = before[&0].1[0];
    assert_eq!(before[&0].0, preferred, "{before:?}");
    let other = cluster
        .node((1..=3).find(|&n| n != preferred).unwrap())
        .broker
        .bootstrap();
    cluster.node_mut(preferred).broker.kill();
    cluster.wait_for("partition 0 led elsewhere", || {
        leaders(&other, topic).filter(|l| l[&0].0 > 0 && l[&0].0 != preferred)
    });
    cluster.node_mut(preferred).broker.start_again();
    cluster.wait_for("the broker back in sync", || {
        leaders(&other, topic).filter(|l| l.values().all(|(_, _, isr)| *isr == 3))
    });
    preferred
}

#[test]
fn preferred_leaders_come_back_by_election_and_by_the_controller() {
    // On demand: ElectLeaders through `strom topic elect-leaders`.
    let mut cluster = three_brokers(&["--set", "auto.leader.rebalance.enable=false"]);
    create_replicated(&cluster, "elect", 3, &[]);
    let preferred = displace_preferred_leader(&mut cluster, "elect");
    let any = cluster.node(2).broker.bootstrap();
    assert_ne!(
        leaders(&any, "elect").unwrap()[&0].0,
        preferred,
        "no rebalance by itself"
    );
    let out = strom_ok(
        &cluster.node(2).broker,
        &["topic", "elect-leaders", "elect"],
    );
    assert!(out.contains("elect\t0\telected"), "{out}");
    assert!(out.contains("elect\t1\tunchanged (leads already)"), "{out}");
    cluster.wait_for("partition 0 led by its preferred replica", || {
        leaders(&any, "elect").filter(|l| l[&0].0 == preferred)
    });
    drop(cluster);

    // By the active controller, every leader.imbalance.check.interval.seconds.
    let mut cluster = three_brokers(&["--set", "leader.imbalance.check.interval.seconds=1"]);
    create_replicated(&cluster, "rebalanced", 3, &[]);
    let preferred = displace_preferred_leader(&mut cluster, "rebalanced");
    let any = cluster.node(2).broker.bootstrap();
    cluster.wait_for("partition 0 led by its preferred replica again", || {
        leaders(&any, "rebalanced").filter(|l| l[&0].0 == preferred)
    });
}

/// Partition 0 of `topic` read from its start through `bootstrap`: each
/// record's value by offset.
fn read_partition(bootstrap: &str, topic: &str) -> BTreeMap<usize, String> {
    let read = run(
        Command::new("kcat").args([
            "-b",
            bootstrap,
            "-C",
            "-t",
            topic,
            "-p",
            "0",
            "-o",
            "beginning",
            "-e",
            "-q",
            "-f",
            "%o %s\n",
        ]),
        None,
        Duration::from_secs(60),
    );
    assert!(read.status.success(), "{read:?}");
    String::from_utf8_lossy(&read.stdout)
        .lines()
        .map(|l| {
            let (offset, value) = l.split_once(' ').expect("offset and value");
            (offset.parse().expect("an offset"), value.to_string())
        })
        .collect()
}

/// Runs `strom ARGS` through `bootstrap`; its stdout, or its failure.
fn tool(bootstrap: &str, args: &[&str]) -> Result<String, String> {
    let output = test_support::strom_at(Some(bootstrap), args, None);
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    if output.status.success() {
        Ok(stdout)
    } else {
        Err(format!(
            "{stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

#[test]
fn reassignment_moves_replicas_under_acks_all_load_and_loses_nothing() {
    const MOVING: &str = "moving";
    let mut cluster = three_brokers(&[
        "--set",
        "replica.lag.time.max.ms=5000",
        "--set",
        "log.retention.check.interval.ms=500",
    ]);
    let any = cluster.node(2).broker.bootstrap();
    strom_ok(
        &cluster.node(1).broker,
        &[
            "topic",
            "create",
            MOVING,
            "--partitions",
            "2",
            "--replication-factor",
            "3",
            "--config",
            "min.insync.replicas=2",
        ],
    );
    let before = cluster.wait_for("both partitions led with three in sync", || {
        leaders(&any, MOVING)
            .filter(|l| l.len() == 2 && l.values().all(|(leader, _, isr)| *leader > 0 && *isr == 3))
    });
    cluster.add_broker(4);
    cluster.wait_for("four brokers listed", || brokers_listed(&any, 4));

    let producer = Producing::start(&cluster.bootstrap(), MOVING);
    cluster.wait_for("records acknowledged before the moves", || {
        (producer.acks().len() >= ACKS_PER_ROUND).then_some(())
    });

    // Partition 0: its leader's replica moves to the new broker 4, which
    // leads once it has the log. Partition 1: from three replicas to two,
    // the leader and one more leave, 4 joins.
    let (leader0, replicas0, _) = before[&0].clone();
    let (leader1, replicas1, _) = before[&1].clone();
    let mut target0 = vec![4];
    target0.extend(replicas0.iter().filter(|&&r| r != leader0));
    let kept1 = *replicas1.iter().find(|&&r| r != leader1).unwrap();
    let target1 = vec![kept1, 4];
    let list = |ids: &[i32]| ids.iter().map(i32::to_string).collect::<Vec<_>>().join(",");
    for (partition, target) in [("0", &target0), ("1", &target1)] {
        let moved = tool(
            &any,
            &[
                "topic",
                "reassign",
                MOVING,
                "--partition",
                partition,
                "--replicas",
                &list(target),
            ],
        )
        .unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
        assert_eq!(moved, format!("{MOVING}\t{partition}\tmoving\n"));
    }
    let done = tool(
        &any,
        &[
            "topic",
            "reassign",
            MOVING,
            "--replicas",
            "4",
            "--partition",
            "9",
        ],
    );
    assert!(
        done.as_ref()
            .is_err_and(|e| e.contains("UNKNOWN_TOPIC_OR_PARTITION")),
        "{done:?}"
    );
    // The same target again changes nothing; --wait waits for the move.
    let waited = tool(
        &any,
        &[
            "topic",
            "reassign",
            MOVING,
            "--partition",
            "0",
            "--replicas",
            &list(&target0),
            "--wait",
            "180",
        ],
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
    assert!(waited.ends_with("done\n"), "{waited}");
    let after = cluster.wait_for("both moves complete and in sync", || {
        leaders(&any, MOVING).filter(|l| {
            l[&0].1 == target0
                && l[&1].1 == target1
                && l.values().all(|(_, r, isr)| r.len() == *isr)
        })
    });
    assert_eq!(
        after[&0].0, 4,
        "the new replica leads: it has the whole log"
    );
    assert!(target1.contains(&after[&1].0), "{after:?}");
    assert_eq!(
        tool(&any, &["topic", "reassignments"]).unwrap(),
        "no partition is being reassigned\n"
    );
    // The replicas that left delete their copies; the others keep theirs.
    for (partition, old, new) in [(0, &replicas0, &target0), (1, &replicas1, &target1)] {
        for id in 1..=4 {
            let path = cluster
                .dir(id)
                .join("data")
                .join(format!("{MOVING}-{partition}"));
            let keeps = new.contains(&id);
            cluster.wait_for(
                &format!(
                    "{path:?} present: {keeps} (was a replica: {})",
                    old.contains(&id)
                ),
                || (path.exists() == keeps).then_some(()),
            );
        }
    }

    // A partition whose log no longer starts at 0 (retention removed its
    // head) moves too: the new replica starts empty at the leader's log
    // start and copies from there.
    strom_ok(
        &cluster.node(2).broker,
        &[
            "topic",
            "create",
            "trimmed",
            "--partitions",
            "1",
            "--replication-factor",
            "1",
            "--config",
            "segment.bytes=16384",
            "--config",
            "retention.bytes=65536",
        ],
    );
    let record = |i: usize| format!("t-{i}-{}", "x".repeat(600 + i % 400));
    let lines: String = (0..400).map(|i| record(i) + "\n").collect();
    let produced = run(
        Command::new("kcat").args([
            "-b",
            &any,
            "-P",
            "-t",
            "trimmed",
            "-p",
            "0",
            "-X",
            "acks=all",
            "-X",
            "batch.num.messages=5",
        ]),
        Some(lines.as_bytes()),
        Duration::from_secs(60),
    );
    assert!(produced.status.success(), "{produced:?}");
    let start_of = |text: &str| -> Option<i64> {
        text.lines()
            .find(|l| l.contains("Partition: 0"))?
            .split('\t')
            .find_map(|f| f.trim().strip_prefix("StartOffset: "))?
            .parse()
            .ok()
    };
    let trimmed_start = cluster.wait_for("retention to remove the log's head", || {
        start_of(&tool(&any, &["topic", "describe", "trimmed"]).ok()?).filter(|s| *s > 0)
    });
    let holder = leaders(&any, "trimmed").unwrap()[&0].0;
    let before_move = read_partition(&cluster.node(holder).broker.bootstrap(), "trimmed");
    let held_from = before_move.keys().next().copied().unwrap_or(400);
    assert!(
        held_from as i64 >= trimmed_start && before_move.keys().copied().eq(held_from..400),
        "the holder serves every offset from {held_from}, its start, to 400"
    );
    let mut values: Vec<&String> = before_move.values().collect();
    values.sort();
    values.dedup();
    assert!(
        values.iter().all(|v| (0..400).any(|i| **v == record(i)))
            && values.len() == before_move.len(),
        "every record once"
    );
    let target = if holder == 4 { 2 } else { 4 };
    for replicas in [format!("{holder},{target}"), target.to_string()] {
        let waited = tool(
            &any,
            &[
                "topic",
                "reassign",
                "trimmed",
                "--replicas",
                &replicas,
                "--wait",
                "120",
            ],
        )
        .unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
        assert!(waited.ends_with("done\n"), "{waited}");
    }
    let moved = cluster.wait_for("the new replica leading", || {
        leaders(&any, "trimmed").filter(|l| l[&0].0 == target && l[&0].1 == [target])
    });
    assert_eq!(moved[&0].2, 1);
    let served = read_partition(&cluster.node(target).broker.bootstrap(), "trimmed");
    let first = served.keys().next().copied().unwrap_or(400);
    assert!(
        first as i64 >= trimmed_start && first > 0,
        "from {first}, start was {trimmed_start}"
    );
    assert_eq!(
        served.keys().copied().collect::<Vec<_>>(),
        (first..400).collect::<Vec<_>>(),
        "every offset from the start on"
    );
    for (offset, value) in &served {
        assert_eq!(Some(value), before_move.get(offset), "offset {offset}");
    }

    // A move to a broker that is down stays under way until cancelled.
    // Not broker 2, which the tools talk to.
    let down = *[1, 3].iter().find(|id| !target1.contains(id)).unwrap();
    cluster.node_mut(down).broker.kill();
    let mut stuck = target1.clone();
    stuck.push(down);
    // The killed broker may have been the active controller: until the
    // others elect another, changes get NOT_CONTROLLER (retriable).
    let stuck_list = list(&stuck);
    cluster.wait_for("the move to a stopped broker taken", || {
        tool(
            &any,
            &[
                "topic",
                "reassign",
                MOVING,
                "--partition",
                "1",
                "--replicas",
                &stuck_list,
            ],
        )
        .ok()
    });
    let listed = tool(&any, &["topic", "reassignments", MOVING]).unwrap();
    assert_eq!(
        listed,
        format!(
            "TOPIC\tPARTITION\tREPLICAS\tADDING\tREMOVING\n{MOVING}\t1\t{}\t{down}\t\n",
            list(&stuck)
        ),
    );
    let cancelled = tool(
        &any,
        &["topic", "reassign", MOVING, "--partition", "1", "--cancel"],
    )
    .unwrap();
    assert_eq!(cancelled, format!("{MOVING}\t1\tcancelled\n"));
    assert_eq!(
        tool(&any, &["topic", "reassignments", MOVING]).unwrap(),
        "no partition is being reassigned\n"
    );
    let again = tool(
        &any,
        &["topic", "reassign", MOVING, "--partition", "1", "--cancel"],
    );
    assert!(
        again
            .as_ref()
            .is_err_and(|e| e.contains("NO_REASSIGNMENT_IN_PROGRESS")),
        "{again:?}"
    );
    let unknown = tool(
        &any,
        &[
            "topic",
            "reassign",
            MOVING,
            "--partition",
            "1",
            "--replicas",
            "4,9",
        ],
    );
    assert!(
        unknown
            .as_ref()
            .is_err_and(|e| e.contains("INVALID_REPLICA_ASSIGNMENT") && e.contains("broker 9")),
        "{unknown:?}"
    );

    // Every acknowledged record, read back from the replicas that hold
    // the partitions now, is there once and in order.
    let checked = producer.stop_and_check(&cluster, &any, MOVING);
    println!("reassignments under acks=all load: {checked}");
}

mod returning_coordinator {
    use super::*;
    use protocol::kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use protocol::kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
    use protocol::kafka_protocol::messages::{
        ApiKey, GroupId, OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest,
        OffsetFetchResponse, TopicName,
    };
    use protocol::kafka_protocol::protocol::StrBytes;
    use std::net::TcpStream;
    use test_support::Broker;

    const GROUP: &str = "returning";
    const TOPIC: &str = "returning-offsets";

    fn text(value: &str) -> StrBytes {
        StrBytes::from_string(value.to_string())
    }

    /// The node coordinating `GROUP`, as `broker` answers.
    fn coordinator(broker: &Broker) -> Option<i32> {
        common::raw::find_coordinator(broker, GROUP, 0)
    }

    /// Commits `offset` for partition 0 outside any generation (Kafka's
    /// "simple" commit); the error code.
    fn commit(broker: &Broker, offset: i64) -> i16 {
        let mut stream = common::raw::connect(broker);
        let response: OffsetCommitResponse = common::raw::call(
            &mut stream,
            ApiKey::OffsetCommit,
            8,
            1,
            "returning-test",
            &OffsetCommitRequest::default()
                .with_group_id(GroupId(text(GROUP)))
                .with_generation_id_or_member_epoch(-1)
                .with_member_id(text(""))
                .with_topics(vec![OffsetCommitRequestTopic::default()
                    .with_name(TopicName(text(TOPIC)))
                    .with_partitions(vec![OffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(offset)
                        .with_committed_leader_epoch(-1)])]),
        );
        response.topics[0].partitions[0].error_code
    }

    /// Partition 0's committed offset as `broker` answers, or the error
    /// code; None when the broker does not answer yet.
    fn fetch(broker: &Broker) -> Option<Result<i64, i16>> {
        let mut stream = TcpStream::connect(broker.address()).ok()?;
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .ok()?;
        let response: OffsetFetchResponse = common::raw::call(
            &mut stream,
            ApiKey::OffsetFetch,
            7,
            1,
            "returning-test",
            &OffsetFetchRequest::default()
                .with_group_id(GroupId(text(GROUP)))
                .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                    .with_name(TopicName(text(TOPIC)))
                    .with_partition_indexes(vec![0])])),
        );
        if response.error_code != 0 {
            return Some(Err(response.error_code));
        }
        let partition = &response.topics[0].partitions[0];
        Some(if partition.error_code != 0 {
            Err(partition.error_code)
        } else {
            Ok(partition.committed_offset)
        })
    }

    /// A coordinator killed and brought back while another broker took its
    /// groups must not answer from the offsets its own log had when it
    /// died: until it leads the offsets partition again (and has loaded
    /// what was committed meanwhile) it refuses with a retriable code.
    #[test]
    fn a_returning_coordinator_never_serves_offsets_committed_before_it_died() {
        let mut cluster = three_brokers(&[]);
        create_replicated(&cluster, TOPIC, 1, &[]);
        let first = cluster.wait_for("a coordinator", || coordinator(&cluster.node(1).broker));
        assert_eq!(commit(&cluster.node(first).broker, 10), 0);
        cluster.node_mut(first).broker.kill();
        let survivor = (1..=3).find(|&n| n != first).unwrap();
        let survivor_bootstrap = cluster.node(survivor).broker.bootstrap();
        cluster.wait_for("the killed broker fenced", || {
            brokers_listed(&survivor_bootstrap, 2)
        });
        let second = cluster.wait_for("another coordinator", || {
            coordinator(&cluster.node(survivor).broker).filter(|&n| n != first)
        });
        cluster.wait_for("the commit through the new coordinator", || {
            (commit(&cluster.node(second).broker, 20) == 0).then_some(())
        });
        cluster.node_mut(first).broker.start_again();
        // From the moment it listens, the returning broker answers a
        // retriable error (another broker coordinates now) or the new
        // offset, never the one its log had when it died.
        let answers = poll_returning(&cluster, first, Duration::from_secs(10), false);
        assert!(
            answers.iter().any(|a| matches!(a, Some(Err(16)))),
            "never NOT_COORDINATOR: {answers:?}"
        );
        // Once it leads the offsets partition again (the preferred leader
        // elected), it coordinates with what was committed while it was
        // away.
        cluster.wait_for(
            "the returning broker leads its offsets partitions again",
            || {
                // Partitions whose preferred replica is not back in the ISR
                // yet fail the election; the next try takes them.
                test_support::strom(
                    &cluster.node(second).broker,
                    &["topic", "elect-leaders", "__consumer_offsets"],
                    None,
                );
                (coordinator(&cluster.node(second).broker) == Some(first)).then_some(())
            },
        );
        poll_returning(&cluster, first, Duration::from_secs(60), true);
    }

    /// Asks the returning broker `node` for the committed offset every
    /// 20 ms for `limit`, or (`until_served`) until it answered 20 five
    /// times in a row; panics on any other offset. The answers.
    fn poll_returning(
        cluster: &Cluster,
        node: i32,
        limit: Duration,
        until_served: bool,
    ) -> Vec<Option<Result<i64, i16>>> {
        let mut answers = Vec::new();
        let mut in_a_row = 0;
        // Each poll asks once; it ends early only when `until_served`
        // and the new offset was answered five times in a row.
        test_support::poll_until(limit, || {
            let answer = fetch(&cluster.node(node).broker);
            match answer {
                Some(Ok(20)) => in_a_row += 1,
                Some(Ok(stale)) => panic!(
                    "the returning broker answered offset {stale}, not 20\n{}",
                    cluster.logs()
                ),
                _ => in_a_row = 0,
            }
            answers.push(answer);
            (until_served && in_a_row == 5).then_some(())
        });
        if until_served {
            assert_eq!(in_a_row, 5, "answers: {answers:?}\n{}", cluster.logs());
        }
        answers
    }
}
