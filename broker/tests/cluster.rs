//! A cluster of real `strom` processes on loopback (each `--cores 1`, its
//! own ports and data dir), with real clients: kcat for metadata, and
//! confluent-kafka and kafka-python (tests/clients/cluster_check.py) for
//! topics, records and groups across brokers.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::run_python;
use test_support::cluster::Cluster;
use test_support::{run, strom_ok};

const SCRIPT_DEADLINE: Duration = Duration::from_secs(240);
/// A new active controller is expected within about two election
/// timeouts (1-2 s each, 1 s default); this bound has margin for a
/// loaded test machine.
const ELECTION_BOUND: Duration = Duration::from_secs(10);

/// What kcat's metadata says: the controller, the brokers and each
/// partition's (leader, replicas).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Listed {
    controller: i32,
    brokers: Vec<i32>,
    partitions: BTreeMap<(String, i32), (i32, Vec<i32>)>,
}

fn listed(bootstrap: &str) -> Option<Listed> {
    let output = run(
        std::process::Command::new("kcat").args(["-b", bootstrap, "-L", "-J", "-m", "5"]),
        None,
        Duration::from_secs(20),
    );
    if !output.status.success() {
        return None;
    }
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).ok()?;
    let mut partitions = BTreeMap::new();
    for topic in json["topics"].as_array()? {
        let name = topic["topic"].as_str()?.to_string();
        for p in topic["partitions"].as_array()? {
            let replicas = p["replicas"]
                .as_array()?
                .iter()
                .map(|r| r["id"].as_i64().unwrap() as i32)
                .collect();
            partitions.insert(
                (name.clone(), p["partition"].as_i64()? as i32),
                (p["leader"].as_i64()? as i32, replicas),
            );
        }
    }
    let mut brokers: Vec<i32> = json["brokers"]
        .as_array()?
        .iter()
        .map(|b| b["id"].as_i64().unwrap() as i32)
        .collect();
    brokers.sort_unstable();
    Some(Listed {
        controller: json["controllerid"].as_i64()? as i32,
        brokers,
        partitions,
    })
}

/// Waits until `node`'s metadata lists exactly `brokers` and a controller.
fn settled(cluster: &Cluster, node: i32, brokers: &[i32]) -> Listed {
    let bootstrap = cluster.node(node).broker.bootstrap();
    cluster.wait_for(&format!("node {node} lists brokers {brokers:?}"), || {
        listed(&bootstrap).filter(|l| l.brokers == brokers && l.controller > 0)
    })
}

fn python(args: &[&str]) -> String {
    run_python("cluster_check.py", args, SCRIPT_DEADLINE)
}

#[test]
fn three_brokers_spread_partitions_serve_clients_and_share_a_group() {
    let cluster = Cluster::start(3, &[]);
    for node in 1..=3 {
        settled(&cluster, node, &[1, 2, 3]);
    }
    // Created through a broker that may not be the controller, read
    // through another.
    let out = python(&[
        "spread",
        &cluster.node(2).broker.bootstrap(),
        "spread",
        "10",
    ]);
    assert!(out.contains("leaders: 4-3-3"), "{out}");
    let listed = listed(&cluster.node(3).broker.bootstrap()).unwrap();
    let leaders: Vec<i32> = (0..10)
        .map(|p| listed.partitions[&("spread".to_string(), p)].0)
        .collect();
    assert!(leaders.iter().all(|l| [1, 2, 3].contains(l)), "{leaders:?}");

    let out = python(&["roundtrip", &cluster.bootstrap(), "spread", "2000"]);
    assert!(
        out.contains("confluent read: 4000 ok over 10 partitions"),
        "{out}"
    );
    assert!(out.contains("kafka-python read: 4000 ok"), "{out}");

    let out = python(&[
        "spread",
        &cluster.node(1).broker.bootstrap(),
        "grouped",
        "6",
    ]);
    assert!(out.contains("leaders: 2-2-2"), "{out}");
    let out = python(&[
        "group",
        &cluster.node(1).broker.bootstrap(),
        &cluster.node(3).broker.bootstrap(),
        "grouped",
        "3000",
    ]);
    assert!(out.contains("group: 3000 ok"), "{out}");
}

#[test]
fn admin_changes_through_any_broker_and_refusals() {
    let cluster = Cluster::start(3, &[]);
    let listed = settled(&cluster, 1, &[1, 2, 3]);
    let other = (1..=3).find(|&n| n != listed.controller).unwrap();
    let out = python(&[
        "admin",
        &cluster.node(other).broker.bootstrap(),
        &listed.controller.to_string(),
    ]);
    assert!(out.contains("admin: ok"), "{out}");
    let out = test_support::strom_fails(
        &cluster.node(1).broker,
        &[
            "topic",
            "create",
            "wide",
            "--partitions",
            "1",
            "--replication-factor",
            "4",
        ],
        None,
    );
    assert!(out.contains("INVALID_REPLICATION_FACTOR"), "{out}");
    assert!(out.contains("3 live brokers"), "{out}");
}

#[test]
fn killing_the_active_controller_elects_another_which_takes_changes() {
    let mut cluster = Cluster::start(3, &[]);
    let before = settled(&cluster, 1, &[1, 2, 3]);
    let old = before.controller;
    let survivor = (1..=3).find(|&n| n != old).unwrap();
    let survivor_bootstrap = cluster.node(survivor).broker.bootstrap();
    // Led by every broker, the killed one too.
    strom_ok(
        &cluster.node(survivor).broker,
        &["topic", "create", "before", "--partitions", "3"],
    );
    cluster.wait_for("every partition led", || {
        listed(&survivor_bootstrap).filter(|l| {
            (0..3).all(|p| {
                l.partitions
                    .get(&("before".to_string(), p))
                    .is_some_and(|(leader, _)| *leader > 0)
            })
        })
    });

    cluster.node_mut(old).broker.kill();
    let killed = Instant::now();
    let new = cluster.wait_for("another active controller", || {
        listed(&survivor_bootstrap)
            .map(|l| l.controller)
            .filter(|&c| c > 0 && c != old)
    });
    let elected = killed.elapsed();
    // Topic creation through the new controller works again.
    strom_ok(
        &cluster.node(survivor).broker,
        &["topic", "create", "after", "--partitions", "4"],
    );
    let writable = killed.elapsed();
    println!(
        "re-election: new controller {new} seen {} ms after kill -9 of {old}; topic created after {} ms",
        elected.as_millis(),
        writable.as_millis()
    );
    assert!(
        elected < ELECTION_BOUND,
        "re-election took {elected:?}\n{}",
        cluster.logs()
    );

    // Past the session timeout the killed broker is fenced: no longer listed.
    let others: Vec<i32> = (1..=3).filter(|&n| n != old).collect();
    let fenced = settled(&cluster, survivor, &others);
    // The killed broker's partitions have no leader now (one replica each).
    let offline = fenced
        .partitions
        .values()
        .filter(|(leader, _)| *leader == -1)
        .count();
    assert!(offline >= 1, "{fenced:?}");
    let admin = format!("127.0.0.1:{}", cluster.node(new).ports.admin);
    let metrics = cluster.wait_for(
        "the new controller's metrics show the fenced broker",
        || {
            let (_, body) = common::admin::http_get(&admin, "/metrics");
            body.contains("strom_brokers{state=\"fenced\"} 1")
                .then_some(body)
        },
    );
    for line in [
        "strom_quorum_role{role=\"leader\"} 1",
        "strom_brokers{state=\"live\"} 2",
        &format!("strom_offline_partitions {offline}"),
        &format!("strom_quorum_active_controller {new}"),
    ] {
        assert!(metrics.contains(line), "{line} not in\n{metrics}");
    }

    // The killed node rejoins and catches up on what it missed.
    cluster.node_mut(old).broker.start_again();
    let rejoined = cluster.node(old).broker.bootstrap();
    cluster.wait_for(
        "the restarted node knows the topic created without it",
        || {
            listed(&rejoined).filter(|l| {
                l.brokers == [1, 2, 3]
                    && (0..4).all(|p| l.partitions.contains_key(&("after".to_string(), p)))
            })
        },
    );
    let out = python(&["roundtrip", &cluster.bootstrap(), "after", "300"]);
    assert!(out.contains("kafka-python read: 600 ok"), "{out}");
}

#[test]
fn all_nodes_killed_and_restarted_keep_the_metadata_and_a_fourth_broker_joins() {
    let mut cluster = Cluster::start(3, &[]);
    settled(&cluster, 1, &[1, 2, 3]);
    for (topic, partitions) in [("a", "5"), ("b", "7")] {
        strom_ok(
            &cluster.node(1).broker,
            &["topic", "create", topic, "--partitions", partitions],
        );
    }
    let before = cluster.wait_for("every partition led", || {
        listed(&cluster.node(2).broker.bootstrap()).filter(|l| {
            l.partitions.len() == 12 && l.partitions.values().all(|(leader, _)| *leader > 0)
        })
    });
    for node in 1..=3 {
        cluster.node_mut(node).broker.kill();
    }
    for node in 1..=3 {
        cluster.node_mut(node).broker.start_again();
    }
    for node in 1..=3 {
        let after = cluster.wait_for(&format!("node {node} has the metadata back"), || {
            listed(&cluster.node(node).broker.bootstrap()).filter(|l| {
                l.brokers == [1, 2, 3] && l.partitions.values().all(|(leader, _)| *leader > 0)
            })
        });
        assert_eq!(after.partitions, before.partitions, "node {node}");
    }

    // A fourth node, a broker only, joins and leads its share of the next
    // topic: striped, one partition per broker, its own first.
    cluster.add_broker(4);
    settled(&cluster, 4, &[1, 2, 3, 4]);
    let out = python(&["spread", &cluster.node(4).broker.bootstrap(), "fourth", "4"]);
    assert!(out.contains("leaders: 1-1-1-1"), "{out}");
    let listed = listed(&cluster.node(1).broker.bootstrap()).unwrap();
    assert_eq!(
        listed.partitions[&("fourth".to_string(), 0)].0,
        4,
        "{listed:?}"
    );
    let out = python(&[
        "roundtrip",
        &cluster.node(4).broker.bootstrap(),
        "fourth",
        "200",
    ]);
    assert!(out.contains("confluent read: 400 ok"), "{out}");
}

#[test]
fn a_node_of_another_cluster_is_refused_and_stays_out() {
    let cluster = Cluster::start(3, &[]);
    settled(&cluster, 1, &[1, 2, 3]);
    // A data dir that another cluster wrote.
    let dir = cluster.dir(4).join("data");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("meta.properties"),
        "version=1\nnode.id=4\ncluster.id=AnotherClusterAaaaaaaaa\n",
    )
    .unwrap();
    let args = cluster.args(4, test_support::cluster::Ports::free(false));
    let output = run(
        std::process::Command::new(test_support::strom_bin())
            .arg("start")
            .arg("--data-dir")
            .arg(&dir)
            .args(&args),
        None,
        Duration::from_secs(60),
    );
    let log = String::from_utf8_lossy(&output.stdout).to_string()
        + &String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{log}");
    assert!(
        log.contains("belongs to cluster AnotherClusterAaaaaaaaa"),
        "{log}"
    );
    // Refused at its first heartbeat, before any registration.
    let listed = listed(&cluster.node(1).broker.bootstrap()).unwrap();
    assert_eq!(listed.brokers, vec![1, 2, 3]);
}

/// A broker-only node given `controller.quorum.bootstrap.servers` instead
/// of the voters finds the active controller through them and joins.
#[test]
fn a_broker_finds_the_controllers_from_bootstrap_servers() {
    let cluster = Cluster::start(3, &[]);
    settled(&cluster, 1, &[1, 2, 3]);
    let servers: Vec<String> = cluster
        .nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.ports.controller.unwrap()))
        .collect();
    let ports = test_support::cluster::Ports::free(false);
    let mut args: Vec<String> = cluster
        .args(4, ports)
        .into_iter()
        .filter(|a| !a.starts_with("controller.quorum.voters="))
        .collect();
    // `--set` before the dropped voter list is dropped too.
    let dangling = args
        .windows(2)
        .position(|w| w[0] == "--set" && w[1] == "--set");
    if let Some(at) = dangling {
        args.remove(at);
    }
    args.push("--set".to_string());
    args.push(format!(
        "controller.quorum.bootstrap.servers={}",
        servers.join(",")
    ));
    let dir = cluster.dir(4);
    std::fs::create_dir_all(&dir).unwrap();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let broker = test_support::Broker::start_at(
        &dir.join("data"),
        &dir.join("strom.log"),
        ports.client,
        &args,
    );
    let bootstrap = broker.bootstrap();
    cluster.wait_for("the new broker registered and listed", || {
        listed(&bootstrap).filter(|l| l.brokers == [1, 2, 3, 4] && l.controller > 0)
    });
    assert!(broker
        .log()
        .contains("controller.quorum.bootstrap.servers=127.0.0.1:"));
    assert!(
        !broker.log().contains("controller.quorum.voters=1@"),
        "{}",
        broker.log()
    );
}

#[test]
fn a_voter_and_a_broker_far_behind_catch_up_from_a_snapshot() {
    // Snapshots after every KiB of metadata log: a few topics take several.
    let mut cluster = Cluster::start(3, &["--set", "strom.metadata.snapshot.bytes=1024"]);
    settled(&cluster, 1, &[1, 2, 3]);
    cluster.node_mut(3).broker.kill();
    let bootstrap = cluster.node(1).broker.bootstrap();
    cluster.wait_for("an active controller among the live voters", || {
        listed(&bootstrap).filter(|l| [1, 2].contains(&l.controller))
    });
    for i in 0..20 {
        let topic = format!("snap-{i}");
        strom_ok(
            &cluster.node(1).broker,
            &["topic", "create", &topic, "--partitions", "2"],
        );
    }
    let expected = cluster.wait_for("20 topics listed", || {
        listed(&bootstrap).filter(|l| l.partitions.len() == 40)
    });
    let leader_log = cluster.node(expected.controller).broker.log();
    assert!(
        leader_log.contains("metadata snapshot taken"),
        "{leader_log}"
    );

    cluster.node_mut(3).broker.start_again();
    let rejoined = cluster.node(3).broker.bootstrap();
    cluster.wait_for("the restarted voter has every topic", || {
        listed(&rejoined).filter(|l| {
            l.partitions.keys().collect::<Vec<_>>()
                == expected.partitions.keys().collect::<Vec<_>>()
        })
    });
    let log = cluster.node(3).broker.log();
    assert!(
        log.contains("metadata snapshot installed from the leader"),
        "{log}"
    );

    cluster.add_broker(4);
    let fourth = cluster.node(4).broker.bootstrap();
    cluster.wait_for("the new broker has every topic", || {
        listed(&fourth).filter(|l| l.partitions.len() == 40 && l.brokers == [1, 2, 3, 4])
    });
    let log = cluster.node(4).broker.log();
    assert!(
        log.contains("metadata snapshot loaded from the controller"),
        "{log}"
    );
}

#[test]
fn a_broker_stopped_cleanly_is_fenced_by_the_controller_before_it_exits() {
    // A session long enough that only the controlled shutdown can fence
    // the broker within the wait below.
    let mut cluster = Cluster::start(3, &["--set", "broker.session.timeout.ms=60000"]);
    let listed_before = settled(&cluster, 1, &[1, 2, 3]);
    let stopping = (1..=3).find(|&n| n != listed_before.controller).unwrap();
    strom_ok(
        &cluster.node(1).broker,
        &["topic", "create", "clean", "--partitions", "3"],
    );
    let bootstrap = cluster.node(listed_before.controller).broker.bootstrap();
    cluster.wait_for("every partition led", || {
        listed(&bootstrap).filter(|l| l.partitions.values().all(|(leader, _)| *leader > 0))
    });
    let stopped = Instant::now();
    cluster.node_mut(stopping).broker.stop();
    let log = cluster.node(stopping).broker.log();
    assert!(
        log.contains("the controller fenced this broker for its shutdown"),
        "{log}"
    );
    let others: Vec<i32> = (1..=3).filter(|&n| n != stopping).collect();
    let after = settled(&cluster, listed_before.controller, &others);
    assert!(
        stopped.elapsed() < Duration::from_secs(30),
        "fenced only after {:?}",
        stopped.elapsed()
    );
    // Its partition (one replica) has no leader until it is back.
    let offline: Vec<_> = after
        .partitions
        .iter()
        .filter(|(_, (leader, _))| *leader == -1)
        .collect();
    assert_eq!(offline.len(), 1, "{after:?}");
    cluster.node_mut(stopping).broker.start_again();
    cluster.wait_for("the broker leads its partition again", || {
        listed(&bootstrap).filter(|l| {
            l.brokers == [1, 2, 3] && l.partitions.values().all(|(leader, _)| *leader > 0)
        })
    });
}

/// A Produce (v12) and a Fetch (v16) sent to a broker that does not lead
/// the partition answer NOT_LEADER_OR_FOLLOWER with the leader, its epoch
/// and its endpoint (KIP-951), so clients go there without a Metadata
/// round trip.
#[test]
fn a_partition_led_elsewhere_answers_not_leader_with_the_leader() {
    use bytes::Bytes;
    use protocol::batch::build::{batch, NewRecord};
    use protocol::kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use protocol::kafka_protocol::messages::produce_request::{
        PartitionProduceData, TopicProduceData,
    };
    use protocol::kafka_protocol::messages::{
        ApiKey, BrokerId, FetchRequest, FetchResponse, ProduceRequest, ProduceResponse, TopicName,
    };
    use protocol::kafka_protocol::protocol::StrBytes;

    const NOT_LEADER_OR_FOLLOWER: i16 = 6;
    let cluster = Cluster::start(3, &[]);
    settled(&cluster, 1, &[1, 2, 3]);
    strom_ok(
        &cluster.node(1).broker,
        &["topic", "create", "hints", "--partitions", "1"],
    );
    let listed = cluster.wait_for("the partition led", || {
        listed(&cluster.node(1).broker.bootstrap()).filter(|l| {
            l.partitions
                .get(&("hints".to_string(), 0))
                .is_some_and(|p| p.0 > 0)
        })
    });
    let leader = listed.partitions[&("hints".to_string(), 0)].0;
    let other = (1..=3).find(|&n| n != leader).unwrap();
    let leader_port = i32::from(cluster.node(leader).broker.port);
    let mut stream = common::raw::connect(&cluster.node(other).broker);

    let records = Bytes::from(batch(
        1_700_000_000_000,
        &[NewRecord {
            key: Some(b"k".to_vec()),
            value: Some(b"v".to_vec()),
            headers: Vec::new(),
            timestamp_delta: 0,
        }],
    ));
    let produce = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str("hints")))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(records))])]);
    let response: ProduceResponse =
        common::raw::call(&mut stream, ApiKey::Produce, 12, 1, "hints-test", &produce);
    let partition = &response.responses[0].partition_responses[0];
    assert_eq!(partition.error_code, NOT_LEADER_OR_FOLLOWER);
    assert_eq!(partition.current_leader.leader_id, BrokerId(leader));
    assert_eq!(partition.current_leader.leader_epoch, 0);
    assert_eq!(response.node_endpoints.len(), 1, "{response:?}");
    assert_eq!(response.node_endpoints[0].node_id, BrokerId(leader));
    assert_eq!(response.node_endpoints[0].port, leader_port);

    let fetch = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_static_str("hints")))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(0)
                .with_partition_max_bytes(1 << 20)])]);
    // v16 names topics by id: ask by name at v12, the last by-name version
    // that carries the current leader, then by id at v16 for the endpoints.
    let response: FetchResponse =
        common::raw::call(&mut stream, ApiKey::Fetch, 12, 2, "hints-test", &fetch);
    let partition = &response.responses[0].partitions[0];
    assert_eq!(partition.error_code, NOT_LEADER_OR_FOLLOWER);
    assert_eq!(partition.current_leader.leader_id, BrokerId(leader));
    // The leader itself serves it.
    let mut direct = common::raw::connect(&cluster.node(leader).broker);
    let response: FetchResponse =
        common::raw::call(&mut direct, ApiKey::Fetch, 12, 3, "hints-test", &fetch);
    assert_eq!(response.responses[0].partitions[0].error_code, 0);
}

/// How long a client that asks as the nodes start may wait for its
/// answer: the election (1–2 s) and the registrations take a few seconds
/// on a loaded machine. A client that heard of no brokers and no
/// controller stalled for about 40 s.
const STARTUP_BOUND: Duration = Duration::from_secs(15);

/// A cluster whose nodes were just started: clients that ask at once (a
/// script that starts the nodes and creates a topic) are served as soon as
/// the broker they reach is registered and caught up, and never hear of
/// no brokers and no controller; `/ready` turns 200 only then.
#[test]
fn clients_asking_as_the_cluster_starts_get_brokers_and_a_controller() {
    let cluster = Cluster::start(3, &[]);
    let started = Instant::now();
    // At once, from two clients at two brokers: nothing waited for.
    let kcat_bootstrap = cluster.node(1).broker.bootstrap();
    let kcat = std::thread::spawn(move || {
        let output = run(
            std::process::Command::new("kcat").args([
                "-b",
                &kcat_bootstrap,
                "-L",
                "-J",
                "-m",
                "60",
            ]),
            None,
            Duration::from_secs(90),
        );
        (started.elapsed(), output)
    });
    let create_bootstrap = cluster.node(2).broker.bootstrap();
    let create = std::thread::spawn(move || {
        run_python(
            "startup_check.py",
            &["create", &create_bootstrap, "early", "3"],
            SCRIPT_DEADLINE,
        )
    });
    // The third broker's /ready turns 200 only once it serves: a client
    // then hears of it and of a controller at once.
    let admin = format!("127.0.0.1:{}", cluster.node(3).ports.admin);
    cluster.wait_for("node 3 ready", || {
        let (status, _) = common::admin::http_get(&admin, "/ready");
        (status == 200).then_some(())
    });
    let ready_after = started.elapsed();
    let at_ready = listed(&cluster.node(3).broker.bootstrap());
    assert!(
        at_ready
            .as_ref()
            .is_some_and(|l| l.brokers.contains(&3) && l.controller > 0),
        "node 3 was ready but answered {at_ready:?}\n{}",
        cluster.logs()
    );

    let (kcat_took, output) = kcat.join().unwrap();
    assert!(
        output.status.success(),
        "kcat -L at start: {}\n{}",
        String::from_utf8_lossy(&output.stderr),
        cluster.logs()
    );
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let brokers = json["brokers"].as_array().map_or(0, Vec::len);
    let controller = json["controllerid"].as_i64().unwrap_or(-1);
    assert!(
        brokers > 0 && controller > 0,
        "kcat's first answer named {brokers} brokers and controller {controller}: {json}"
    );
    let out = create.join().unwrap();
    let created_ms: u64 = out
        .lines()
        .find_map(|l| {
            l.strip_prefix("created in ")?
                .strip_suffix(" ms")?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no creation time in {out}"));
    println!(
        "as the cluster starts: kcat -L answered after {} ms ({brokers} brokers, controller {controller}); \
         create_topics took {created_ms} ms; node 3 ready after {} ms",
        kcat_took.as_millis(),
        ready_after.as_millis()
    );
    assert!(kcat_took < STARTUP_BOUND, "kcat -L took {kcat_took:?}");
    assert!(
        Duration::from_millis(created_ms) < STARTUP_BOUND,
        "create_topics took {created_ms} ms\n{out}"
    );
    assert!(!out.contains("brokers: 0 "), "{out}");
}

/// A created topic is served by a broker that is not a voter within this
/// of the CreateTopics answer: it follows the metadata log as it commits
/// (tens of milliseconds on loopback); the bound has margin for a loaded
/// 2-core machine. A broker that learned of changes at its heartbeats
/// (Kafka's 2 s interval, which the test sets) took up to 2 s.
const PROPAGATION_BOUND: Duration = Duration::from_millis(500);
/// Topics created, one after another, each measured.
const PROPAGATION_ROUNDS: usize = 10;
/// How long node 4 is asked before the round fails outright, and how many
/// times at most (each answer paces the next: about a millisecond each).
const SERVED_DEADLINE: Duration = Duration::from_secs(20);
const SERVED_ASKS_MAX: i32 = 200_000;

/// A fourth node, a broker only, leads every partition of topics created
/// through a voter, and serves them (ListOffsets answered) right after
/// CreateTopics answered; its metrics show how long the changes took to
/// reach it.
#[test]
fn a_broker_only_node_serves_a_new_topic_right_after_create_topics_answers() {
    use protocol::kafka_protocol::messages::create_topics_request::{
        CreatableReplicaAssignment, CreatableTopic,
    };
    use protocol::kafka_protocol::messages::list_offsets_request::{
        ListOffsetsPartition, ListOffsetsTopic,
    };
    use protocol::kafka_protocol::messages::{
        ApiKey, BrokerId, CreateTopicsRequest, CreateTopicsResponse, ListOffsetsRequest,
        ListOffsetsResponse, TopicName,
    };
    use protocol::kafka_protocol::protocol::StrBytes;

    const PARTITIONS: i32 = 3;
    // Kafka's defaults: a broker that learned metadata only at its
    // heartbeats would miss the bound by far.
    let mut cluster = Cluster::start(
        3,
        &[
            "--set",
            "broker.heartbeat.interval.ms=2000",
            "--set",
            "broker.session.timeout.ms=9000",
        ],
    );
    cluster.add_broker(4);
    settled(&cluster, 4, &[1, 2, 3, 4]);
    let mut creating = common::raw::connect(&cluster.node(1).broker);
    let mut asking = common::raw::connect(&cluster.node(4).broker);
    let mut took = Vec::with_capacity(PROPAGATION_ROUNDS);
    for round in 0..PROPAGATION_ROUNDS {
        let topic = format!("follow-{round}");
        let name = || TopicName(StrBytes::from_string(topic.clone()));
        // Led by node 4, followed by two voters.
        let assignments = (0..PARTITIONS)
            .map(|p| {
                CreatableReplicaAssignment::default()
                    .with_partition_index(p)
                    .with_broker_ids(vec![
                        BrokerId(4),
                        BrokerId(p % 3 + 1),
                        BrokerId((p + 1) % 3 + 1),
                    ])
            })
            .collect();
        let correlation = round as i32 * (SERVED_ASKS_MAX + 1);
        let created: CreateTopicsResponse = common::raw::call(
            &mut creating,
            ApiKey::CreateTopics,
            7,
            correlation,
            "follow-test",
            &CreateTopicsRequest::default()
                .with_timeout_ms(30_000)
                .with_topics(vec![CreatableTopic::default()
                    .with_name(name())
                    .with_num_partitions(-1)
                    .with_replication_factor(-1)
                    .with_assignments(assignments)]),
        );
        let answered = Instant::now();
        assert_eq!(created.topics[0].error_code, 0, "{created:?}");
        let request = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(name())
                .with_partitions(
                    (0..PARTITIONS)
                        .map(|p| {
                            ListOffsetsPartition::default()
                                .with_partition_index(p)
                                .with_current_leader_epoch(-1)
                                .with_timestamp(-1)
                        })
                        .collect(),
                )]);
        // Asked back to back (each answer paces the next), to the
        // deadline: the first all-served answer is the measurement.
        let deadline = answered + SERVED_DEADLINE;
        for attempt in 1..=SERVED_ASKS_MAX {
            let response: ListOffsetsResponse = common::raw::call(
                &mut asking,
                ApiKey::ListOffsets,
                7,
                correlation + attempt,
                "follow-test",
                &request,
            );
            let last: Vec<i16> = response.topics[0]
                .partitions
                .iter()
                .map(|p| p.error_code)
                .collect();
            if last.len() == PARTITIONS as usize && last.iter().all(|&code| code == 0) {
                break;
            }
            assert!(
                Instant::now() < deadline && attempt < SERVED_ASKS_MAX,
                "node 4 does not serve {topic}: {last:?}\n{}",
                cluster.logs()
            );
        }
        took.push(answered.elapsed());
    }
    took.sort_unstable();
    let median = took[took.len() / 2];
    let worst = *took.last().unwrap();
    println!(
        "broker-only node 4 served a new topic after CreateTopics answered: median {} ms, worst {} ms of {PROPAGATION_ROUNDS}",
        median.as_millis(),
        worst.as_millis(),
    );
    assert!(
        worst < PROPAGATION_BOUND,
        "node 4 served a new topic only {worst:?} after CreateTopics answered: {took:?}\n{}",
        cluster.logs()
    );
    let admin = format!("127.0.0.1:{}", cluster.node(4).ports.admin);
    let (_, metrics) = common::admin::http_get(&admin, "/metrics");
    let figure = |name: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("{name} not in\n{metrics}"))
    };
    let count = figure("strom_metadata_propagation_seconds_count");
    let sum = figure("strom_metadata_propagation_seconds_sum");
    println!(
        "strom_metadata_propagation_seconds on node 4: {count} changes, mean {:.2} ms",
        sum * 1000.0 / count.max(1.0)
    );
    assert!(
        count >= PROPAGATION_ROUNDS as f64,
        "{count} propagations measured for {PROPAGATION_ROUNDS} topics\n{metrics}"
    );
}
