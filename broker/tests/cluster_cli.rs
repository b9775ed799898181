//! The `strom` tools against a cluster of three real strom processes
//! (voters and brokers): topic describe, produce and consume reach each
//! partition's leader whichever broker they bootstrap from; `strom cluster
//! status` shows the brokers, the metadata quorum (DescribeQuorum) and the
//! partitions' health, and a killed broker as fenced with its partitions
//! offline. A single node answers as a quorum of one. Listings of groups
//! ask every broker; a broker's configs are asked of that broker; the
//! tools retry what Kafka calls retriable (a new partition's leader that
//! does not know it yet, a controller being elected) and a partition that
//! still fails is shown on its own line.

mod common;

use std::collections::BTreeMap;

use common::{free_port, strom_at, Broker};
use test_support::cluster::Cluster;

const TOPIC: &str = "t";
const PARTITIONS: usize = 10;

/// Runs a tool through `bootstrap`; its stdout, or the test fails with
/// every node's log.
fn tool(cluster: &Cluster, bootstrap: &str, args: &[&str], stdin: Option<&[u8]>) -> Vec<u8> {
    let output = strom_at(Some(bootstrap), args, stdin);
    assert!(
        output.status.success(),
        "strom {args:?} through {bootstrap} failed ({}): {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr),
        cluster.logs()
    );
    output.stdout
}

fn tool_text(cluster: &Cluster, bootstrap: &str, args: &[&str]) -> String {
    String::from_utf8(tool(cluster, bootstrap, args, None)).expect("the tool prints UTF-8")
}

/// One `Key: value` field of a tab-separated line.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split('\t')
        .find_map(|part| part.trim().strip_prefix(key)?.strip_prefix(": "))
}

/// A partition line of `strom topic describe`.
#[derive(Debug, Clone, PartialEq)]
struct PartitionRow {
    leader: String,
    replicas: String,
    isr: String,
    offline: Option<String>,
    end: Option<i64>,
}

/// `strom topic describe` of every topic: each partition line by topic
/// and partition.
fn describe_all(cluster: &Cluster, bootstrap: &str) -> BTreeMap<(String, i32), PartitionRow> {
    let text = tool_text(cluster, bootstrap, &["topic", "describe"]);
    text.lines()
        .filter_map(|line| {
            let topic = field(line, "Topic")?.to_string();
            let partition = field(line, "Partition")?.parse().ok()?;
            let row = PartitionRow {
                leader: field(line, "Leader")?.to_string(),
                replicas: field(line, "Replicas")?.to_string(),
                isr: field(line, "Isr")?.to_string(),
                offline: field(line, "Offline").map(str::to_string),
                end: field(line, "EndOffset").map(|e| e.parse().unwrap()),
            };
            if row.end.is_some() {
                assert_eq!(field(line, "StartOffset"), Some("0"), "{line}");
            }
            Some(((topic, partition), row))
        })
        .collect()
}

/// `strom topic describe` of the test's topic, by partition.
fn describe(cluster: &Cluster, bootstrap: &str) -> BTreeMap<i32, PartitionRow> {
    describe_all(cluster, bootstrap)
        .into_iter()
        .filter(|((topic, _), _)| topic == TOPIC)
        .map(|((_, partition), row)| (partition, row))
        .collect()
}

/// `strom cluster status` as text, in parts.
struct Status {
    controller: String,
    brokers: BTreeMap<i32, Vec<String>>,
    quorum: String,
    voters: BTreeMap<i32, Vec<String>>,
    observers: String,
    partitions: String,
}

fn status(cluster: &Cluster, bootstrap: &str) -> Status {
    let text = tool_text(cluster, bootstrap, &["cluster", "status"]);
    let mut parsed = Status {
        controller: String::new(),
        brokers: BTreeMap::new(),
        quorum: String::new(),
        voters: BTreeMap::new(),
        observers: String::new(),
        partitions: String::new(),
    };
    let mut table = "";
    for line in text.lines() {
        if let Some(id) = line.strip_prefix("Controller: ") {
            parsed.controller = id.to_string();
        } else if line.starts_with("BROKER\t") {
            table = "brokers";
        } else if line.starts_with("VOTER\t") {
            table = "voters";
        } else if line.starts_with("QuorumLeader:") {
            parsed.quorum = line.to_string();
        } else if let Some(ids) = line.strip_prefix("Observers: ") {
            parsed.observers = ids.to_string();
        } else if line.starts_with("Partitions:") {
            parsed.partitions = line.to_string();
        } else if let Some(Ok(id)) = line.split('\t').next().map(str::parse::<i32>) {
            let cells: Vec<String> = line.split('\t').skip(1).map(str::to_string).collect();
            match table {
                "brokers" => parsed.brokers.insert(id, cells),
                "voters" => parsed.voters.insert(id, cells),
                _ => panic!("a row outside a table: {line}\n{text}"),
            };
        }
    }
    assert!(text.starts_with("ClusterId: "), "{text}");
    parsed
}

/// DescribeQuorum at `version`, asked of node `asked` (forwarded to the
/// controller unless it is one): the quorum of voters 1-3 led by
/// `controller`, broker 4 an observer; another topic is unknown.
fn check_describe_quorum(cluster: &Cluster, asked: i32, version: i16, controller: i32) {
    use protocol::kafka_protocol::messages::describe_quorum_request::{PartitionData, TopicData};
    use protocol::kafka_protocol::messages::{
        ApiKey, DescribeQuorumRequest, DescribeQuorumResponse, TopicName,
    };
    use protocol::kafka_protocol::protocol::StrBytes;

    let topic = |name: &'static str| {
        TopicData::default()
            .with_topic_name(TopicName(StrBytes::from_static_str(name)))
            .with_partitions(vec![PartitionData::default().with_partition_index(0)])
    };
    let request = DescribeQuorumRequest::default()
        .with_topics(vec![topic("__cluster_metadata"), topic("other")]);
    let mut stream = common::raw::connect(&cluster.node(asked).broker);
    let response: DescribeQuorumResponse = common::raw::call(
        &mut stream,
        ApiKey::DescribeQuorum,
        version,
        7,
        "dq",
        &request,
    );
    let context = format!("v{version}: {response:?}");
    assert_eq!(response.error_code, 0, "{context}");
    assert_eq!(response.topics.len(), 2, "{context}");
    let quorum = &response.topics[0].partitions[0];
    assert_eq!(quorum.error_code, 0, "{context}");
    assert_eq!(quorum.leader_id.0, controller, "{context}");
    assert!(quorum.leader_epoch > 0, "{context}");
    assert!(quorum.high_watermark > 0, "{context}");
    let voters: Vec<i32> = quorum
        .current_voters
        .iter()
        .map(|v| v.replica_id.0)
        .collect();
    assert_eq!(voters, [1, 2, 3], "{context}");
    for voter in &quorum.current_voters {
        assert!(
            (0..=quorum.high_watermark + 1).contains(&voter.log_end_offset),
            "{context}"
        );
    }
    let observers: Vec<(i32, i64)> = quorum
        .observers
        .iter()
        .map(|o| (o.replica_id.0, o.log_end_offset))
        .collect();
    assert_eq!(observers, [(4, -1)], "{context}");
    let other = &response.topics[1].partitions[0];
    assert_eq!(other.error_code, 3, "UNKNOWN_TOPIC_OR_PARTITION; {context}");
    let endpoints: Vec<(i32, u16)> = response
        .nodes
        .iter()
        .map(|n| (n.node_id.0, n.listeners[0].port))
        .collect();
    if version >= 2 {
        let expected: Vec<(i32, u16)> = (1..=3)
            .map(|id| (id, cluster.node(id).ports.controller.expect("a voter")))
            .collect();
        assert_eq!(endpoints, expected, "{context}");
    } else {
        assert!(endpoints.is_empty(), "{context}");
    }
}

#[test]
fn tools_reach_each_partitions_leader_and_cluster_status_shows_fencing() {
    let mut cluster = Cluster::start(3, &[]);
    let via = |id: i32, cluster: &Cluster| cluster.node(id).broker.bootstrap();

    // Every broker registered and a controller elected.
    cluster.wait_for("three live brokers and a controller", || {
        let output = strom_at(Some(&via(1, &cluster)), &["cluster", "status"], None);
        let text = String::from_utf8_lossy(&output.stdout).to_string();
        let live = text.lines().filter(|l| l.contains("\tlive\tyes")).count();
        (output.status.success() && live == 3 && !text.contains("Controller: none")).then_some(())
    });

    let created = tool_text(
        &cluster,
        &via(2, &cluster),
        &[
            "topic",
            "create",
            TOPIC,
            "--partitions",
            &PARTITIONS.to_string(),
            "--replication-factor",
            "1",
        ],
    );
    assert_eq!(created, format!("Created topic {TOPIC}.\n"));

    // Through node 3, offsets come from each partition's leader.
    let rows = cluster.wait_for("every partition has a leader", || {
        let rows = describe(&cluster, &via(3, &cluster));
        (rows.len() == PARTITIONS && rows.values().all(|r| r.end.is_some())).then_some(rows)
    });
    let mut led: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    for (partition, row) in &rows {
        assert_eq!(row.replicas, row.leader, "partition {partition}: {row:?}");
        assert_eq!(row.isr, row.leader, "partition {partition}: {row:?}");
        assert_eq!(row.offline, None);
        assert_eq!(row.end, Some(0));
        led.entry(row.leader.parse().unwrap())
            .or_default()
            .push(*partition);
    }
    let mut spread: Vec<usize> = led.values().map(Vec::len).collect();
    spread.sort_unstable();
    assert_eq!(spread, [3, 3, 4], "leaders: {led:?}");

    // Records for partitions nodes 1 and 2 lead, produced through node 1
    // and read back byte for byte through node 3, which leads neither.
    let p1 = led[&1][0];
    let p2 = led[&2][0];
    let records: [&[u8]; 2] = [
        b"first\tline \xff\xfe raw bytes\n\nthird after an empty one\n",
        b"{\"json\": true}\n\x00\x01 binary\n",
    ];
    for (partition, bytes) in [p1, p2].iter().zip(records) {
        tool(
            &cluster,
            &via(1, &cluster),
            &["produce", TOPIC, "--partition", &partition.to_string()],
            Some(bytes),
        );
    }
    for (partition, bytes) in [p1, p2].iter().zip(records) {
        let consumed = tool(
            &cluster,
            &via(3, &cluster),
            &[
                "consume",
                TOPIC,
                "--partition",
                &partition.to_string(),
                "--from-beginning",
                "--exit-at-end",
            ],
            None,
        );
        assert_eq!(consumed, bytes, "partition {partition}");
    }
    // Every partition at once (one fetch per leader), keyed records
    // produced through node 3 to whichever partitions their keys hash to.
    let keyed: String = (0..30).map(|i| format!("key-{i}:value-{i}\n")).collect();
    tool(
        &cluster,
        &via(3, &cluster),
        &["produce", TOPIC, "--key-separator", ":"],
        Some(keyed.as_bytes()),
    );
    let all = tool(
        &cluster,
        &via(2, &cluster),
        &[
            "consume",
            TOPIC,
            "--from-beginning",
            "--exit-at-end",
            "--print-key",
        ],
        None,
    );
    let mut values: Vec<&[u8]> = all
        .split(|b| *b == b'\n')
        .filter(|l| l.starts_with(b"key-"))
        .collect();
    values.sort_unstable();
    let mut expected: Vec<Vec<u8>> = (0..30)
        .map(|i| format!("key-{i}\tvalue-{i}").into_bytes())
        .collect();
    expected.sort_unstable();
    assert_eq!(values, expected);
    let ends = describe(&cluster, &via(1, &cluster));
    let total: i64 = ends.values().map(|r| r.end.unwrap()).sum();
    assert_eq!(total, 3 + 2 + 30, "{ends:?}");

    // A group member reads everything (its coordinator found with
    // FindCoordinator, offsets from the leaders); the group's lag,
    // described through another broker, is 0 everywhere.
    let read = tool(
        &cluster,
        &via(3, &cluster),
        &[
            "consume",
            TOPIC,
            "--group",
            "g",
            "--from-beginning",
            "--exit-at-end",
        ],
        None,
    );
    assert_eq!(read.iter().filter(|b| **b == b'\n').count(), 5 + 30);
    let described = tool_text(&cluster, &via(1, &cluster), &["group", "describe", "g"]);
    let lag_rows: Vec<Vec<&str>> = described
        .lines()
        .filter(|l| l.starts_with(&format!("{TOPIC}\t")))
        .map(|l| l.split('\t').collect())
        .collect();
    assert_eq!(lag_rows.len(), PARTITIONS, "{described}");
    for row in &lag_rows {
        let end = ends[&row[1].parse::<i32>().unwrap()]
            .end
            .unwrap()
            .to_string();
        assert_eq!(row[2..5], [end.as_str(), end.as_str(), "0"], "{described}");
    }
    let all_partitions = describe_all(&cluster, &via(2, &cluster));

    // The cluster and its quorum, asked of a broker that may not be the
    // controller (DescribeQuorum is forwarded).
    let healthy = status(&cluster, &via(2, &cluster));
    let controller: i32 = healthy.controller.parse().expect("a controller");
    assert_eq!(healthy.brokers.len(), 3);
    for (id, cells) in &healthy.brokers {
        assert_eq!(cells[0], via(*id, &cluster));
        assert_eq!(cells[2..], ["live", "yes"], "broker {id}");
    }
    assert_eq!(
        field(&healthy.quorum, "QuorumLeader"),
        Some(healthy.controller.as_str())
    );
    let high_watermark: i64 = field(&healthy.quorum, "HighWatermark")
        .unwrap()
        .parse()
        .unwrap();
    assert!(high_watermark > 0, "{}", healthy.quorum);
    assert!(
        field(&healthy.quorum, "LeaderEpoch")
            .unwrap()
            .parse::<i32>()
            .unwrap()
            > 0
    );
    assert_eq!(
        healthy.voters.keys().copied().collect::<Vec<_>>(),
        [1, 2, 3]
    );
    for (id, cells) in &healthy.voters {
        let log_end: i64 = cells[0]
            .parse()
            .unwrap_or_else(|_| panic!("voter {id}: {cells:?}"));
        let lag: i64 = cells[1].parse().unwrap();
        assert_eq!(lag, (high_watermark - log_end).max(0), "voter {id}");
        assert!(log_end <= high_watermark + 1, "voter {id}: {cells:?}");
    }
    assert_eq!(healthy.observers, "-");
    assert_eq!(
        healthy.partitions,
        format!(
            "Partitions: {}\tUnderReplicated: 0\tOffline: 0",
            all_partitions.len()
        )
    );

    // A broker that is not a voter is an observer of the quorum, and
    // forwards DescribeQuorum too.
    let observer = cluster.add_broker(4).broker.bootstrap();
    let joined = cluster.wait_for("broker 4 live", || {
        let now = status(&cluster, &observer);
        let state = now.brokers.get(&4).map(|cells| cells[2..].join(" "));
        (state.as_deref() == Some("live no")).then_some(now)
    });
    assert_eq!(joined.observers, "4");
    assert_eq!(joined.voters.len(), 3);
    assert_eq!(joined.controller, healthy.controller);
    for version in 0..=2 {
        check_describe_quorum(&cluster, 4, version, controller);
    }

    // A broker that is not the controller dies: once its session expires
    // it is fenced and the partitions it alone held are offline.
    let victim = (1..=3).rev().find(|&id| id != controller).unwrap();
    let asked = (1..=3).find(|&id| id != victim).unwrap();
    cluster.node_mut(victim).broker.kill();
    // What the victim alone held goes offline; the offsets topic's
    // partitions (three replicas) lose one and are under-replicated.
    let victim_id = victim.to_string();
    let holds = |row: &PartitionRow| row.replicas.split(',').any(|r| r == victim_id);
    let lost = all_partitions
        .values()
        .filter(|row| holds(row) && !row.replicas.contains(','))
        .count();
    let under = all_partitions
        .values()
        .filter(|row| holds(row) && row.replicas.contains(','))
        .count();
    let fenced = cluster.wait_for("the killed broker fenced", || {
        let now = status(&cluster, &via(asked, &cluster));
        (now.brokers.get(&victim).map(|c| c[2].as_str()) == Some("fenced")).then_some(now)
    });
    assert_eq!(fenced.brokers.len(), 4);
    assert_eq!(
        fenced.partitions,
        format!(
            "Partitions: {}\tUnderReplicated: {under}\tOffline: {lost}",
            all_partitions.len()
        )
    );
    let rows = describe(&cluster, &via(asked, &cluster));
    for (partition, row) in &rows {
        if led[&victim].contains(partition) {
            assert_eq!(row.leader, "none", "partition {partition}: {row:?}");
            assert_eq!(row.offline.as_deref(), Some(victim.to_string().as_str()));
            assert_eq!(row.end, None);
        } else {
            assert!(row.end.is_some(), "partition {partition}: {row:?}");
        }
    }
}

#[test]
fn a_single_node_is_a_quorum_of_one_and_no_broker_is_an_error() {
    let broker = Broker::start(&["--set", "num.partitions=2"]);
    common::strom_ok(&broker, &["topic", "create", "solo"]);
    let text = common::strom_ok(&broker, &["cluster", "status"]);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("ClusterId: "), "{text}");
    assert_eq!(lines[1], "Controller: 0", "{text}");
    assert_eq!(lines[2], "BROKER\tADDRESS\tRACK\tSTATE\tVOTER");
    assert_eq!(lines[3], format!("0\t{}\t-\tlive\tyes", broker.bootstrap()));
    assert!(
        lines[4].starts_with("QuorumLeader: 0\tLeaderEpoch: 0\tHighWatermark: "),
        "{text}"
    );
    let high_watermark = field(lines[4], "HighWatermark").unwrap();
    assert_eq!(lines[5], "VOTER\tLOG-END\tLAG");
    assert_eq!(lines[6], format!("0\t{high_watermark}\t0"));
    assert_eq!(lines[7], "Observers: -");
    assert_eq!(lines[8], "Partitions: 2\tUnderReplicated: 0\tOffline: 0");
    // Its listeners: the one clients use, and the controller's (not opened
    // by a quorum of one).
    assert_eq!(lines[9], "LISTENER\tBROKER\tPROTOCOL\tADDRESS\tFOR");
    assert_eq!(
        lines[10],
        format!(
            "PLAINTEXT\t0\tPLAINTEXT\t{}\tclients, inter-broker",
            broker.bootstrap()
        )
    );
    assert_eq!(lines.len(), 11, "{text}");

    let json: serde_json::Value =
        serde_json::from_str(&common::strom_ok(&broker, &["cluster", "status", "--json"]))
            .expect("--json prints JSON");
    let high_watermark: i64 = high_watermark.parse().unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "cluster_id": lines[0].strip_prefix("ClusterId: ").unwrap(),
            "controller": 0,
            "brokers": [{
                "id": 0,
                "address": broker.bootstrap(),
                "rack": null,
                "fenced": false,
                "voter": true,
            }],
            "quorum": {
                "leader": 0,
                "leader_epoch": 0,
                "high_watermark": high_watermark,
                "voters": [{"id": 0, "log_end_offset": high_watermark, "lag": 0}],
                "observers": [],
            },
            "partitions": {"total": 2, "under_replicated": 0, "offline": 0},
            "listeners": [{
                "broker": 0,
                "name": "PLAINTEXT",
                "security_protocol": "PLAINTEXT",
                "address": broker.bootstrap(),
                "role": "clients, inter-broker",
            }],
        })
    );

    let nobody = format!("127.0.0.1:{}", free_port());
    let output = strom_at(
        Some(&nobody),
        &["cluster", "status", "--timeout-ms", "2000"],
        None,
    );
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.starts_with("strom cluster: ") && stderr.contains(&nobody),
        "{stderr}"
    );
}

/// Starts three voters and waits until every broker is registered and a
/// controller elected.
fn ready_cluster() -> Cluster {
    let cluster = Cluster::start(3, &[]);
    cluster.wait_for("three live brokers and a controller", || {
        let output = strom_at(
            Some(&cluster.node(1).broker.bootstrap()),
            &["cluster", "status"],
            None,
        );
        let text = String::from_utf8_lossy(&output.stdout).to_string();
        let live = text.lines().filter(|l| l.contains("\tlive\t")).count();
        (output.status.success() && live == 3 && !text.contains("Controller: none")).then_some(())
    });
    cluster
}

/// The settings `strom config describe` prints, by name: (value, source).
fn broker_configs(text: &str) -> BTreeMap<String, (String, String)> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let (setting, source) = line.trim().split_once("\tsource=")?;
            let (name, value) = setting.split_once('=')?;
            Some((name.to_string(), (value.to_string(), source.to_string())))
        })
        .collect()
}

#[test]
fn group_listings_ask_every_broker_and_broker_configs_are_asked_of_that_broker() {
    let cluster = ready_cluster();
    let via = |id: i32| cluster.node(id).broker.bootstrap();
    tool(
        &cluster,
        &via(1),
        &["topic", "create", "orders", "--partitions", "3"],
        None,
    );
    let lines: String = (0..30).map(|i| format!("k{i}:v{i}\n")).collect();
    tool(
        &cluster,
        &via(1),
        &["produce", "orders", "--key-separator", ":"],
        Some(lines.as_bytes()),
    );
    // Groups with committed offsets, coordinated by the leaders of their
    // offsets partitions, which the three brokers share.
    let groups: Vec<String> = (0..9).map(|i| format!("group-{i}")).collect();
    for (i, group) in groups.iter().enumerate() {
        let through = via(i as i32 % 3 + 1);
        tool(
            &cluster,
            &through,
            &[
                "group",
                "reset-offsets",
                group,
                "--topic",
                "orders",
                "--to-offset",
                &i.to_string(),
                "--execute",
            ],
            None,
        );
    }
    let listed: serde_json::Value = serde_json::from_str(&tool_text(
        &cluster,
        &via(1),
        &["group", "list", "--format", "json"],
    ))
    .expect("--format json prints JSON");
    let coordinators: std::collections::BTreeSet<i64> = listed["groups"]
        .as_array()
        .expect("a groups array")
        .iter()
        .map(|g| g["coordinator"].as_i64().expect("a coordinator id"))
        .collect();
    assert!(
        coordinators.len() > 1,
        "the groups should be coordinated by more than one broker: {listed}"
    );
    // Whichever broker is asked, every group of the cluster is listed.
    for id in 1..=3 {
        let text = tool_text(&cluster, &via(id), &["group", "list"]);
        let names: Vec<&str> = text
            .lines()
            .map(|l| l.split('\t').next().unwrap())
            .collect();
        assert_eq!(names, groups, "through broker {id}:\n{text}");
    }
    // --all-groups describes each at its coordinator, lag from the leaders.
    let described = tool_text(&cluster, &via(2), &["group", "describe", "--all-groups"]);
    let headed: Vec<&str> = described
        .lines()
        .filter_map(|l| l.strip_prefix("GROUP ")?.split('\t').next())
        .collect();
    assert_eq!(headed, groups, "{described}");
    let json: serde_json::Value = serde_json::from_str(&tool_text(
        &cluster,
        &via(3),
        &["group", "describe", "--all-groups", "--format", "json"],
    ))
    .unwrap();
    let all = json["groups"].as_array().unwrap();
    assert_eq!(all.len(), groups.len(), "{json}");
    let ends = describe_all(&cluster, &via(3));
    for (i, group) in all.iter().enumerate() {
        assert_eq!(group["group"], groups[i]);
        let rows = group["offsets"].as_array().unwrap();
        assert_eq!(rows.len(), 3, "{group}");
        for row in rows {
            let partition = row["partition"].as_i64().unwrap() as i32;
            let end = ends[&("orders".to_string(), partition)].end.unwrap();
            let committed = (i as i64).min(end);
            assert_eq!(row["committed"], committed, "{group}");
            assert_eq!(row["log_end"], end, "{group}");
            assert_eq!(row["lag"], end - committed, "{group}");
        }
    }

    // A broker's configs come from that broker, whichever one is the
    // bootstrap; without --broker, from the one connected to.
    for (asked, through) in [(2, 1), (3, 1), (1, 3)] {
        let text = tool_text(
            &cluster,
            &via(through),
            &["config", "describe", "--broker", &asked.to_string()],
        );
        assert!(
            text.starts_with(&format!("All configs for broker {asked} are:\n")),
            "{text}"
        );
        let configs = broker_configs(&text);
        let listeners = &configs["listeners"].0;
        assert!(
            listeners.contains(&via(asked)),
            "broker {asked}: {listeners}"
        );
    }
    let own = tool_text(&cluster, &via(2), &["config", "describe"]);
    assert!(own.starts_with("All configs for broker 2 are:\n"), "{own}");
    let json: serde_json::Value = serde_json::from_str(&tool_text(
        &cluster,
        &via(1),
        &["config", "describe", "--broker", "3", "--format", "json"],
    ))
    .unwrap();
    assert_eq!(json["broker"], 3, "{json}");
    let listeners = json["configs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "listeners")
        .expect("listeners described");
    assert!(
        listeners["value"].as_str().unwrap().contains(&via(3)),
        "{listeners}"
    );
    let unknown = strom_at(
        Some(&via(1)),
        &["config", "describe", "--broker", "7"],
        None,
    );
    assert_eq!(unknown.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    assert!(
        stderr.contains("broker 7 is not in the cluster"),
        "{stderr}"
    );

    // A broker's dynamic settings change whichever broker the tool
    // reached and whichever is the controller: the change is that
    // broker's, as it then describes it.
    for (asked, through) in [(2, 1), (3, 2), (1, 3)] {
        let value = (5_000_000 + asked).to_string();
        let done = tool_text(
            &cluster,
            &via(through),
            &[
                "config",
                "alter",
                "--broker",
                &asked.to_string(),
                "--add-config",
                &format!("log.retention.bytes={value}"),
            ],
        );
        assert!(done.contains(&format!("broker {asked}")), "{done}");
        cluster.wait_for("the change described by its broker", || {
            let text = String::from_utf8_lossy(
                &strom_at(
                    Some(&via(through)),
                    &["config", "describe", "--broker", &asked.to_string()],
                    None,
                )
                .stdout,
            )
            .to_string();
            let configs = broker_configs(&text);
            (configs.get("log.retention.bytes")
                == Some(&(value.clone(), "DYNAMIC_BROKER_CONFIG".to_string())))
            .then_some(())
        });
    }
}

/// `strom topic describe ARGS` as JSON: (topic, partition) → partition.
fn describe_json(
    cluster: &Cluster,
    bootstrap: &str,
    args: &[&str],
) -> BTreeMap<(String, i64), serde_json::Value> {
    let mut all = vec!["topic", "describe", "--format", "json"];
    all.extend_from_slice(args);
    let json: serde_json::Value =
        serde_json::from_str(&tool_text(cluster, bootstrap, &all)).expect("JSON");
    let mut partitions = BTreeMap::new();
    for topic in json["topics"].as_array().unwrap() {
        for partition in topic["partitions"].as_array().unwrap() {
            let key = (
                topic["name"].as_str().unwrap().to_string(),
                partition["partition"].as_i64().unwrap(),
            );
            partitions.insert(key, partition.clone());
        }
    }
    partitions
}

/// The (topic, partition) of each partition line of a text listing.
fn partition_lines(text: &str) -> Vec<(String, i32)> {
    text.lines()
        .filter_map(|line| {
            Some((
                field(line, "Topic")?.to_string(),
                field(line, "Partition")?.parse().ok()?,
            ))
        })
        .collect()
}

#[test]
fn describe_right_after_create_and_create_right_after_the_controller_dies_retry() {
    let mut cluster = ready_cluster();
    let via = |cluster: &Cluster, id: i32| cluster.node(id).broker.bootstrap();

    // Described at once through another broker, with no arguments too:
    // every partition with its offsets, none failing.
    for (i, (created, asked)) in [(1, 2), (2, 3), (3, 1)].into_iter().enumerate() {
        let topic = format!("fresh-{i}");
        tool(
            &cluster,
            &via(&cluster, created),
            &[
                "topic",
                "create",
                &topic,
                "--partitions",
                "6",
                "--replication-factor",
                "3",
            ],
            None,
        );
        let args: &[&str] = if i == 0 { &[&topic] } else { &[] };
        let mut all = vec!["topic", "describe"];
        all.extend_from_slice(args);
        let text = tool_text(&cluster, &via(&cluster, asked), &all);
        let rows: Vec<&str> = text
            .lines()
            .filter(|l| {
                field(l, "Topic") == Some(topic.as_str()) && field(l, "Partition").is_some()
            })
            .collect();
        assert_eq!(rows.len(), 6, "{text}");
        for row in rows {
            assert_eq!(field(row, "EndOffset"), Some("0"), "{text}");
        }
        assert!(!text.contains("Error:"), "{text}");
    }
    tool(
        &cluster,
        &via(&cluster, 1),
        &["topic", "alter", "fresh-0", "--partitions", "9"],
        None,
    );
    // Another broker lists the new partitions once its metadata has the
    // change (as in Kafka, a moment after the controller committed it).
    let grown = common::poll_until(test_support::cluster::SETTLE_DEADLINE, || {
        let described = describe_json(&cluster, &via(&cluster, 3), &["fresh-0"]);
        (described.len() == 9).then_some(described)
    })
    .unwrap_or_else(|| describe_json(&cluster, &via(&cluster, 3), &["fresh-0"]));
    assert_eq!(grown.len(), 9, "{grown:?}");
    for (key, partition) in &grown {
        assert_eq!(partition["end_offset"], 0, "{key:?}: {partition}");
        assert_eq!(partition["error"], serde_json::Value::Null, "{key:?}");
    }

    // What the filters will see once a broker is gone: three replicas
    // with min.insync.replicas=2, and single replicas.
    tool(
        &cluster,
        &via(&cluster, 1),
        &[
            "topic",
            "create",
            "replicated",
            "--partitions",
            "3",
            "--replication-factor",
            "3",
            "--config",
            "min.insync.replicas=2",
        ],
        None,
    );
    tool(
        &cluster,
        &via(&cluster, 1),
        &[
            "topic",
            "create",
            "single",
            "--partitions",
            "6",
            "--replication-factor",
            "1",
        ],
        None,
    );
    let before = describe_json(&cluster, &via(&cluster, 1), &["--exclude-internal"]);
    assert!(
        before.keys().all(|(topic, _)| !topic.starts_with("__")),
        "{before:?}"
    );
    let controller: i32 = status(&cluster, &via(&cluster, 1))
        .controller
        .parse()
        .expect("a controller");
    let survivors: Vec<i32> = (1..=3).filter(|&id| id != controller).collect();
    let through = survivors
        .iter()
        .map(|&id| via(&cluster, id))
        .collect::<Vec<_>>()
        .join(",");
    let led_by_victim: Vec<(String, i64)> = before
        .iter()
        .filter(|(_, p)| p["leader"] == controller)
        .map(|(key, _)| key.clone())
        .collect();
    assert!(!led_by_victim.is_empty(), "{before:?}");
    cluster.node_mut(controller).broker.kill();

    // At once, before the dead broker is fenced: its partitions fail on
    // their own lines (or show no leader once it is fenced), the others
    // are listed with their offsets, and the listing succeeds.
    let early = tool_text(
        &cluster,
        &through,
        &[
            "topic",
            "describe",
            "--exclude-internal",
            "--timeout-ms",
            "1000",
        ],
    );
    let lines: Vec<&str> = early
        .lines()
        .filter(|l| field(l, "Partition").is_some())
        .collect();
    assert_eq!(lines.len(), before.len(), "{early}");
    for line in lines {
        let key = (
            field(line, "Topic").unwrap().to_string(),
            field(line, "Partition").unwrap().parse::<i64>().unwrap(),
        );
        if led_by_victim.contains(&key) {
            assert!(
                line.contains("\tError: ")
                    || field(line, "Leader") != Some(&controller.to_string()),
                "{line}\n{early}"
            );
        } else {
            assert!(field(line, "EndOffset").is_some(), "{line}\n{early}");
            assert!(!line.contains("Error:"), "{line}");
        }
    }
    // A topic created while the quorum elects another controller: the
    // NOT_CONTROLLER answers are retried until one is elected.
    let created = tool_text(
        &cluster,
        &through,
        &[
            "topic",
            "create",
            "after-failover",
            "--partitions",
            "2",
            "--replication-factor",
            "2",
        ],
    );
    assert_eq!(created, "Created topic after-failover.\n");
    // Every replica as placed (the new topic's too: placed before the
    // dead broker was fenced, it may hold a replica there).
    let placed = describe_json(&cluster, &through, &["--exclude-internal"]);
    assert_eq!(placed.len(), before.len() + 2, "{placed:?}");

    // Once the dead broker is fenced and out of the ISRs, kafka-topics.sh's
    // filters pick the partitions by their replicas.
    let victim = controller as i64;
    let holds = |p: &serde_json::Value| p["replicas"].as_array().unwrap().contains(&victim.into());
    let mut under_expected: Vec<(String, i32)> = placed
        .iter()
        .filter(|(_, p)| holds(p) && p["replicas"].as_array().unwrap().len() > 1)
        .map(|((t, p), _)| (t.clone(), *p as i32))
        .collect();
    under_expected.sort();
    let mut under = String::new();
    let settled = common::poll_until(test_support::cluster::SETTLE_DEADLINE, || {
        under = tool_text(
            &cluster,
            &through,
            &[
                "topic",
                "describe",
                "--under-replicated-partitions",
                "--exclude-internal",
            ],
        );
        let mut lines = partition_lines(&under);
        lines.sort();
        (lines == under_expected).then_some(())
    });
    assert!(
        settled.is_some(),
        "under-replicated: expected {under_expected:?}, last listed:\n{under}\nall:\n{}",
        tool_text(&cluster, &through, &["topic", "describe"])
    );
    assert!(
        !under.contains("PartitionCount"),
        "no topic lines:\n{under}"
    );
    let mut unavailable_expected: Vec<(String, i32)> = placed
        .iter()
        .filter(|(_, p)| {
            p["replicas"].as_array().unwrap() == &vec![serde_json::Value::from(victim)]
        })
        .map(|((t, p), _)| (t.clone(), *p as i32))
        .collect();
    unavailable_expected.sort();
    assert!(!unavailable_expected.is_empty(), "{placed:?}");
    let unavailable = tool_text(
        &cluster,
        &through,
        &["topic", "describe", "--unavailable-partitions"],
    );
    let mut lines = partition_lines(&unavailable);
    lines.sort();
    assert_eq!(lines, unavailable_expected, "{unavailable}");
    for line in unavailable.lines() {
        assert_eq!(field(line, "Leader"), Some("none"), "{line}");
    }
    // At min ISR: the replicated topic (two of three in sync, two
    // needed) and each single replica that lives (one of one, one needed).
    let at_min = tool_text(
        &cluster,
        &through,
        &[
            "topic",
            "describe",
            "replicated",
            "single",
            "--at-min-isr-partitions",
        ],
    );
    let mut lines = partition_lines(&at_min);
    lines.sort();
    let mut at_min_expected: Vec<(String, i32)> = placed
        .iter()
        .filter(|((t, _), p)| t == "replicated" || (t == "single" && !holds(p)))
        .map(|((t, p), _)| (t.clone(), *p as i32))
        .collect();
    at_min_expected.sort();
    assert_eq!(lines, at_min_expected, "{at_min}");
    let under_min = tool_text(
        &cluster,
        &through,
        &[
            "topic",
            "describe",
            "replicated",
            "single",
            "--under-min-isr-partitions",
        ],
    );
    let mut lines = partition_lines(&under_min);
    lines.sort();
    assert_eq!(lines, unavailable_expected, "{under_min}");
}
