//! What an operator sees of a running broker: its log lines (no false stall
//! at start, plain values, the effective configuration, JSON lines, one
//! line for opening the partitions, tmpfs), the per-topic and consumer
//! group series of `/metrics`, an admin listener that a slow client cannot
//! hold up, the Grafana dashboard in `dist/` against a live broker and a
//! live cluster, and a cluster's ISR changes, elections and failovers
//! each counted once.

mod common;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::admin::{Admin, READY_DEADLINE};
use common::{free_port, poll_until, run, Broker};
use protocol::kafka_protocol::messages::create_topics_request::{
    CreatableReplicaAssignment, CreatableTopic,
};
use protocol::kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use protocol::kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use protocol::kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use protocol::kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use protocol::kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, BrokerId, CreateTopicsRequest,
    CreateTopicsResponse, FetchRequest, FetchResponse, FindCoordinatorRequest,
    FindCoordinatorResponse, GroupId, JoinGroupRequest, JoinGroupResponse, OffsetCommitRequest,
    OffsetCommitResponse, ProduceRequest, ProduceResponse, TopicName,
};
use protocol::kafka_protocol::protocol::StrBytes;
use test_support::cluster::Cluster;

/// What a Kubernetes probe waits by default.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
const STALL_LINE: &str = "executor did not run for a while";

/// /metrics as text, for these tests.
trait Scrape {
    fn metrics(&self) -> Metrics;
}

impl Scrape for Admin {
    fn metrics(&self) -> Metrics {
        let (code, body) = self
            .try_get("/metrics", Duration::from_secs(20))
            .expect("a /metrics answer");
        assert_eq!(code, 200, "{body}");
        Metrics { body }
    }
}

struct Metrics {
    body: String,
}

impl Metrics {
    /// The value of the sample exposed exactly as `name{labels}`.
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let inner: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
        let key = if labels.is_empty() {
            name.to_string()
        } else {
            format!("{name}{{{}}}", inner.join(","))
        };
        self.body.lines().find_map(|line| {
            let (sample, value) = line.rsplit_once(' ')?;
            (sample == key).then(|| value.parse().unwrap())
        })
    }

    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.get(name, labels)
            .unwrap_or_else(|| panic!("no {name}{labels:?} in:\n{}", self.body))
    }

    /// Names of every sample (histograms' `_bucket`, `_sum`, `_count` too).
    fn names(&self) -> BTreeSet<String> {
        self.body
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .map(|l| {
                l.split(['{', ' '])
                    .next()
                    .expect("a sample name")
                    .to_string()
            })
            .collect()
    }
}

fn text(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_string())
}

fn call<Req, Resp>(stream: &mut TcpStream, key: ApiKey, version: i16, request: &Req) -> Resp
where
    Req: protocol::kafka_protocol::protocol::Encodable,
    Resp: protocol::kafka_protocol::protocol::Decodable
        + protocol::kafka_protocol::protocol::HeaderVersion,
{
    common::raw::call(stream, key, version, 1, "observability-test", request)
}

/// Produces `batch` to each of `partitions` of `topic` (acks=all).
fn produce(stream: &mut TcpStream, topic: &str, partitions: &[i32], batch: &Bytes) {
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(text(topic)))
            .with_partition_data(
                partitions
                    .iter()
                    .map(|p| {
                        PartitionProduceData::default()
                            .with_index(*p)
                            .with_records(Some(batch.clone()))
                    })
                    .collect(),
            )]);
    let response: ProduceResponse = call(stream, ApiKey::Produce, 9, &request);
    for topic in &response.responses {
        for partition in &topic.partition_responses {
            assert_eq!(partition.error_code, 0, "produce to {topic:?}");
        }
    }
}

/// Fetches `partition` of `topic` from offset 0: the record bytes.
fn fetch(stream: &mut TcpStream, topic: &str, partition: i32) -> Bytes {
    let request = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(16 << 20)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(text(topic)))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(partition)
                .with_fetch_offset(0)
                .with_partition_max_bytes(16 << 20)])]);
    let response: FetchResponse = call(stream, ApiKey::Fetch, 11, &request);
    let data = &response.responses[0].partitions[0];
    assert_eq!(data.error_code, 0);
    data.records.clone().unwrap_or_default()
}

/// Commits offsets for `group` as an `assign()` consumer (no generation).
fn commit(stream: &mut TcpStream, group: &str, topic: &str, offsets: &[(i32, i64)]) {
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(text(group)))
        .with_generation_id_or_member_epoch(-1)
        .with_member_id(text(""))
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(TopicName(text(topic)))
            .with_partitions(
                offsets
                    .iter()
                    .map(|(p, o)| {
                        OffsetCommitRequestPartition::default()
                            .with_partition_index(*p)
                            .with_committed_offset(*o)
                    })
                    .collect(),
            )]);
    let response: OffsetCommitResponse = call(stream, ApiKey::OffsetCommit, 8, &request);
    for partition in &response.topics[0].partitions {
        assert_eq!(partition.error_code, 0, "commit for {group}");
    }
}

/// A JoinGroup (v7) with no member id: the broker answers
/// MEMBER_ID_REQUIRED with the id to join again with.
fn join_without_member_id(stream: &mut TcpStream, group: &str) -> i16 {
    let request = JoinGroupRequest::default()
        .with_group_id(GroupId(text(group)))
        .with_session_timeout_ms(10_000)
        .with_rebalance_timeout_ms(10_000)
        .with_member_id(text(""))
        .with_protocol_type(text("consumer"))
        .with_protocols(vec![JoinGroupRequestProtocol::default()
            .with_name(text("range"))
            .with_metadata(Bytes::from_static(b"meta"))]);
    let response: JoinGroupResponse = call(stream, ApiKey::JoinGroup, 7, &request);
    response.error_code
}

/// Traffic every series needs to exist: 3 batches of 10 records to both
/// partitions of `orders` (2 partitions), a fetch of partition 0, offsets
/// committed by `billing` (12 on partition 0, 30 on partition 1), a join
/// that is asked for its member id. Returns one batch's size.
fn traffic(broker: &Broker) -> usize {
    let batch = Bytes::from(protocol::batch::build::patterned(
        1_700_000_000_000,
        10,
        100,
        7,
    ));
    let mut stream = common::raw::connect(broker);
    for _ in 0..3 {
        produce(&mut stream, "orders", &[0, 1], &batch);
    }
    let fetched = fetch(&mut stream, "orders", 0);
    assert_eq!(fetched.len(), 3 * batch.len());
    commit(&mut stream, "billing", "orders", &[(0, 12), (1, 30)]);
    assert_eq!(
        join_without_member_id(&mut stream, "joiners"),
        protocol::kafka_protocol::error::ResponseError::MemberIdRequired.code()
    );
    batch.len()
}

#[test]
fn metrics_have_per_topic_series_and_consumer_group_lag() {
    let (broker, admin) = Admin::start(&["--set", "num.partitions=2"]);
    let batch_bytes = traffic(&broker) as f64;
    let m = admin.metrics();
    let orders = [("topic", "orders")];
    assert_eq!(m.value("strom_topic_records_in_total", &orders), 60.0);
    assert_eq!(
        m.value("strom_topic_bytes_in_total", &orders),
        6.0 * batch_bytes
    );
    assert_eq!(m.value("strom_topic_records_out_total", &orders), 30.0);
    assert_eq!(
        m.value("strom_topic_bytes_out_total", &orders),
        3.0 * batch_bytes
    );
    // Summed over the two partitions: 30 records each.
    assert_eq!(m.value("strom_topic_high_watermark", &orders), 60.0);
    assert_eq!(m.value("strom_topic_log_end_offset", &orders), 60.0);
    assert_eq!(m.value("strom_topic_log_start_offset", &orders), 0.0);
    assert!(m.value("strom_topic_log_size_bytes", &orders) >= 6.0 * batch_bytes);
    let billing = [("group", "billing"), ("topic", "orders")];
    // (30 - 12) + (30 - 30).
    assert_eq!(m.value("strom_consumer_group_lag", &billing), 18.0);
    assert_eq!(
        m.value("strom_consumer_group_committed_offset", &billing),
        42.0
    );
    // No partition label unless asked for.
    assert!(
        !m.body.contains("partition=\""),
        "per-partition series by default:\n{}",
        m.body
    );
    // The join's MEMBER_ID_REQUIRED is the protocol's first step, not an error.
    assert!(
        !m.body
            .lines()
            .any(|l| l.starts_with("strom_request_errors_total") && l.contains("JoinGroup")),
        "JoinGroup counted as an error:\n{}",
        m.body
    );
    assert!(
        m.value(
            "strom_requests_total",
            &[("shard", "all"), ("api", "JoinGroup")]
        ) >= 1.0
    );
}

#[test]
fn partition_labels_split_the_topic_series_when_asked() {
    let (broker, admin) = Admin::start(&[
        "--set",
        "num.partitions=2",
        "--set",
        "strom.metrics.partition.labels=true",
    ]);
    let batch_bytes = traffic(&broker) as f64;
    let m = admin.metrics();
    for partition in ["0", "1"] {
        let labels = [("topic", "orders"), ("partition", partition)];
        assert_eq!(m.value("strom_topic_high_watermark", &labels), 30.0);
        assert_eq!(m.value("strom_topic_records_in_total", &labels), 30.0);
        assert_eq!(
            m.value("strom_topic_bytes_in_total", &labels),
            3.0 * batch_bytes
        );
    }
    let lag = |p: &str| {
        m.value(
            "strom_consumer_group_lag",
            &[("group", "billing"), ("topic", "orders"), ("partition", p)],
        )
    };
    assert_eq!((lag("0"), lag("1")), (18.0, 0.0));
    assert_eq!(
        m.value(
            "strom_topic_records_out_total",
            &[("topic", "orders"), ("partition", "0")]
        ),
        30.0
    );
}

/// The metrics only a cluster member exposes (its quorum, brokers and
/// their failovers): the dashboard's cluster panels stay empty on a
/// single node.
const CLUSTER_ONLY: &[&str] = &[
    "strom_quorum_active_controller",
    "strom_quorum_term",
    "strom_quorum_commit_index",
    "strom_quorum_applied_index",
    "strom_quorum_follower_lag_entries",
    "strom_brokers",
    "strom_isr_shrinks_total",
    "strom_isr_expands_total",
    "strom_leader_elections_total",
    "strom_unclean_leader_elections_total",
    "strom_failover_partitions_total",
    "strom_failover_unheard_seconds_bucket",
    "strom_failover_unheard_seconds_sum",
    "strom_failover_unheard_seconds_count",
    "strom_partition_offline_seconds_sum",
    "strom_partition_offline_seconds_count",
];

/// Every metric name the dashboard in `dist/` queries.
fn dashboard_metrics() -> BTreeSet<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../dist/grafana/strom.json");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).expect("dashboard JSON");
    let mut queried = BTreeSet::new();
    let mut panels = 0;
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("a query");
            let mut rest = expr;
            while let Some(at) = rest.find("strom_") {
                let name: String = rest[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                rest = &rest[at + name.len()..];
                queried.insert(name);
            }
        }
        panels += 1;
    }
    assert!(panels >= 10 && queried.len() >= 15, "{queried:?}");
    queried
}

/// Every metric the dashboard in `dist/` queries exists on a live broker
/// that has seen produce, fetch and group traffic (but those of its
/// cluster panels), and on a three-node cluster that has; there, the
/// per-topic figures of a topic with three replicas summed over the
/// brokers are its leader's, not three times them.
#[test]
fn the_grafana_dashboard_queries_only_metrics_the_broker_exposes() {
    let queried = dashboard_metrics();
    for family in [
        "strom_topic_bytes_in_total",
        "strom_consumer_group_lag",
        "strom_request_latency_seconds_bucket",
        "strom_quorum_term",
        "strom_brokers",
        "strom_under_replicated_partitions",
        "strom_offline_partitions",
        "strom_isr_shrinks_total",
        "strom_isr_expands_total",
        "strom_failover_unheard_seconds_bucket",
    ] {
        assert!(queried.contains(family), "the dashboard shows no {family}");
    }
    let (broker, admin) = Admin::start(&["--set", "num.partitions=2"]);
    traffic(&broker);
    // And one error, for the error series.
    let mut stream = common::raw::connect(&broker);
    assert_ne!(fetch_error(&mut stream, "orders", 9), 0);
    let exposed = admin.metrics().names();
    let missing: Vec<&String> = queried
        .difference(&exposed)
        .filter(|name| !CLUSTER_ONLY.contains(&name.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "the dashboard queries metrics a broker does not expose: {missing:?}"
    );

    let cluster = Cluster::start(3, &["--set", "offsets.topic.num.partitions=1"]);
    all_ready(&cluster);
    create_assigned(&cluster, 1, "replicated", &[&[2, 3, 1]]);
    let batch = Bytes::from(protocol::batch::build::patterned(
        1_700_000_000_000,
        10,
        100,
        7,
    ));
    let leader = &cluster.node(2).broker;
    let mut stream = common::raw::connect(leader);
    for _ in 0..3 {
        produce_when_led(&cluster, &mut stream, "replicated", 0, &batch);
    }
    assert_eq!(fetch(&mut stream, "replicated", 0).len(), 3 * batch.len());
    assert_ne!(fetch_error(&mut stream, "replicated", 9), 0);
    commit_in_cluster(&cluster, "billing", "replicated", 12);

    let scrapes: Vec<Metrics> = (1..=3).map(|id| scrape(&cluster, id)).collect();
    let exposed: BTreeSet<String> = scrapes.iter().flat_map(Metrics::names).collect();
    let missing: Vec<&String> = queried.difference(&exposed).collect();
    assert!(
        missing.is_empty(),
        "the dashboard queries metrics no node of a cluster exposes: {missing:?}"
    );
    let replicated = [("topic", "replicated")];
    let on_leader = |name: &str| scrapes[1].value(name, &replicated);
    for name in queried.iter().filter(|n| n.starts_with("strom_topic_")) {
        let summed: f64 = scrapes
            .iter()
            .filter_map(|m| m.get(name, &replicated))
            .sum();
        assert_eq!(
            summed,
            on_leader(name),
            "{name} summed over the brokers is not the leader's:\n{}\n{}\n{}",
            scrapes[0].body,
            scrapes[1].body,
            scrapes[2].body
        );
    }
    // The leader's figures are the topic's: 30 records in, 30 fetched by
    // the consumer (the followers' fetches are replication, not counted).
    for (name, expected) in [
        ("strom_topic_records_in_total", 30.0),
        ("strom_topic_records_out_total", 30.0),
        ("strom_topic_high_watermark", 30.0),
        ("strom_topic_log_end_offset", 30.0),
        ("strom_topic_bytes_out_total", 3.0 * batch.len() as f64),
    ] {
        assert_eq!(on_leader(name), expected, "{name}");
    }
}

/// A three-node cluster with topics `replicated` (two partitions, three
/// replicas, the first led by node V) and `alone` (one replica, on V);
/// V (not the active controller) is killed, then started again. Each
/// ISR change, election and failover is counted by one broker: their
/// sums over the brokers are the changes made.
#[test]
fn isr_changes_elections_and_failovers_are_counted_once_over_the_brokers() {
    let mut cluster = Cluster::start(3, &[]);
    all_ready(&cluster);
    let controller = scrape(&cluster, 1).value("strom_quorum_active_controller", &[]) as i32;
    let victim = if controller == 1 { 2 } else { 1 };
    let others: Vec<i32> = (1..=3).filter(|&id| id != victim).collect();
    let (a, b) = (others[0], others[1]);
    create_assigned(
        &cluster,
        controller,
        "replicated",
        &[&[victim, a, b], &[a, victim, b]],
    );
    create_assigned(&cluster, controller, "alone", &[&[victim]]);
    let sum = |cluster: &Cluster, ids: &[i32], name: &str| -> f64 {
        ids.iter()
            .map(|&id| scrape(cluster, id).get(name, &[]).unwrap_or(0.0))
            .sum()
    };
    let all = [1, 2, 3];
    let events = [
        "strom_isr_shrinks_total",
        "strom_isr_expands_total",
        "strom_leader_elections_total",
        "strom_unclean_leader_elections_total",
        "strom_failover_partitions_total",
        "strom_failover_unheard_seconds_count",
        "strom_partition_offline_seconds_count",
    ];
    let before: Vec<f64> = events.iter().map(|e| sum(&cluster, &all, e)).collect();
    assert_eq!(before, vec![0.0; events.len()], "{}", cluster.logs());

    cluster.node_mut(victim).broker.kill();
    // Fenced: `replicated` loses it from both ISRs and partition 0 moves
    // to the next in-sync replica; `alone` has no leader.
    let expected = [2.0, 0.0, 1.0, 0.0, 2.0, 1.0, 0.0];
    let counted = cluster.wait_for("the fence counted", || {
        let views_settled = others.iter().all(|&id| {
            let m = scrape(&cluster, id);
            m.get("strom_brokers", &[("state", "fenced")]) == Some(1.0)
                && m.get("strom_offline_partitions", &[]) == Some(1.0)
                && m.get("strom_under_replicated_partitions", &[]) == Some(2.0)
        });
        let counted: Vec<f64> = events.iter().map(|e| sum(&cluster, &others, e)).collect();
        let reached = counted.iter().zip(&expected).all(|(c, e)| c >= e);
        (views_settled && reached).then_some(counted)
    });
    let offline_seen = Instant::now();
    assert_eq!(counted, expected, "{events:?}\n{}", cluster.logs());
    let unheard_s = sum(&cluster, &others, "strom_failover_unheard_seconds_sum");
    assert!(
        unheard_s > 0.0 && unheard_s < 30.0,
        "unheard for {unheard_s} s"
    );

    // Back: it rejoins both ISRs and leads `alone` again.
    let restarted = Instant::now();
    cluster.node_mut(victim).broker.start_again();
    cluster.wait_for("every partition led and in sync", || {
        all.iter()
            .all(|&id| {
                let m = scrape(&cluster, id);
                m.get("strom_offline_partitions", &[]) == Some(0.0)
                    && m.get("strom_under_replicated_partitions", &[]) == Some(0.0)
            })
            .then_some(())
    });
    let back = cluster.wait_for("the return counted", || {
        let expands = sum(&cluster, &all, "strom_isr_expands_total");
        let offline = sum(&cluster, &all, "strom_partition_offline_seconds_count");
        (expands >= 2.0 && offline >= 1.0).then_some((expands, offline))
    });
    assert_eq!(back, (2.0, 1.0), "{}", cluster.logs());
    // The restarted broker counted none of the changes it replayed.
    assert_eq!(sum(&cluster, &all, "strom_isr_shrinks_total"), 2.0);
    assert_eq!(
        sum(&cluster, &all, "strom_unclean_leader_elections_total"),
        0.0
    );
    let offline_s = sum(&cluster, &all, "strom_partition_offline_seconds_sum");
    let down = restarted.duration_since(offline_seen).as_secs_f64();
    assert!(
        offline_s >= down,
        "offline for {offline_s} s, down {down} s"
    );
}

/// Node `id`'s `/metrics`.
fn scrape(cluster: &Cluster, id: i32) -> Metrics {
    let node = cluster.node(id);
    let address = std::net::SocketAddr::new(node.host.ip, node.ports.admin).to_string();
    let (code, body) = common::admin::http_get(&address, "/metrics");
    assert_eq!(code, 200, "{body}");
    Metrics { body }
}

/// Waits until every node of `cluster` answers `/ready` with 200.
fn all_ready(cluster: &Cluster) {
    for node in &cluster.nodes {
        let address = std::net::SocketAddr::new(node.host.ip, node.ports.admin).to_string();
        cluster.wait_for(&format!("node {} ready", node.id), || {
            let (code, _) = common::admin::try_get(&address, "/ready", PROBE_TIMEOUT * 5).ok()?;
            (code == 200).then_some(())
        });
    }
}

/// Creates `topic` through node `via` with one partition per entry of
/// `replicas` (its first replica leads), and waits until every node
/// lists each partition led by that replica with every replica in sync.
fn create_assigned(cluster: &Cluster, via: i32, topic: &str, replicas: &[&[i32]]) {
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(TopicName(text(topic)))
            .with_num_partitions(-1)
            .with_replication_factor(-1)
            .with_assignments(
                replicas
                    .iter()
                    .enumerate()
                    .map(|(index, brokers)| {
                        CreatableReplicaAssignment::default()
                            .with_partition_index(index as i32)
                            .with_broker_ids(brokers.iter().map(|&b| BrokerId(b)).collect())
                    })
                    .collect(),
            )]);
    cluster.wait_for(&format!("{topic} created"), || {
        let mut stream = common::raw::connect(&cluster.node(via).broker);
        let created: CreateTopicsResponse = call(&mut stream, ApiKey::CreateTopics, 7, &request);
        // Already there: an earlier attempt made it.
        matches!(created.topics[0].error_code, 0 | 36).then_some(())
    });
    for node in &cluster.nodes {
        cluster.wait_for(&format!("{topic} settled on node {}", node.id), || {
            let listed = common::listing::partitions(&node.broker.bootstrap(), topic)?;
            let settled = listed.len() == replicas.len()
                && listed.iter().all(|(index, (leader, isr))| {
                    let assigned = replicas[*index as usize];
                    *leader == assigned[0] && isr.len() == assigned.len()
                });
            settled.then_some(())
        });
    }
}

/// Produces `batch` to `partition` of `topic` (acks=all) on `stream`,
/// asked again while the broker does not lead it yet (nothing appended).
fn produce_when_led(
    cluster: &Cluster,
    stream: &mut TcpStream,
    topic: &str,
    partition: i32,
    batch: &Bytes,
) {
    const NOT_LED_YET: [i16; 3] = [3, 5, 6];
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(text(topic)))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(batch.clone()))])]);
    cluster.wait_for(&format!("a produce to {topic}-{partition}"), || {
        let response: ProduceResponse = call(stream, ApiKey::Produce, 9, &request);
        let code = response.responses[0].partition_responses[0].error_code;
        assert!(
            code == 0 || NOT_LED_YET.contains(&code),
            "produce to {topic}-{partition}: error {code}"
        );
        (code == 0).then_some(())
    });
}

/// A consumer's fetch of a partition of `topic`: its error code.
fn fetch_error(stream: &mut TcpStream, topic: &str, partition: i32) -> i16 {
    let request = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(text(topic)))
            .with_partitions(vec![
                FetchPartition::default().with_partition(partition)
            ])]);
    let response: FetchResponse = call(stream, ApiKey::Fetch, 11, &request);
    response.responses[0].partitions[0].error_code
}

/// Commits `offset` for partition 0 of `topic` by `group` at its
/// coordinator, found and asked again until it has loaded.
fn commit_in_cluster(cluster: &Cluster, group: &str, topic: &str, offset: i64) {
    let find = FindCoordinatorRequest::default()
        .with_key(text(group))
        .with_key_type(0);
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(text(group)))
        .with_generation_id_or_member_epoch(-1)
        .with_member_id(text(""))
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(TopicName(text(topic)))
            .with_partitions(vec![OffsetCommitRequestPartition::default()
                .with_partition_index(0)
                .with_committed_offset(offset)])]);
    cluster.wait_for(&format!("{group}'s commit"), || {
        let mut any = common::raw::connect(&cluster.node(1).broker);
        let found: FindCoordinatorResponse = call(&mut any, ApiKey::FindCoordinator, 3, &find);
        if found.error_code != 0 {
            return None;
        }
        let coordinator = &cluster.node(found.node_id.0).broker;
        let mut stream = common::raw::connect(coordinator);
        let response: OffsetCommitResponse = call(&mut stream, ApiKey::OffsetCommit, 8, &request);
        (response.topics[0].partitions[0].error_code == 0).then_some(())
    });
}

/// A client that sent half a request holds no one up: `/health` answers
/// within a probe's timeout.
#[test]
fn a_half_sent_admin_request_does_not_hold_up_health() {
    let (broker, admin) = Admin::start(&[]);
    let mut held = TcpStream::connect(admin.address()).unwrap();
    held.write_all(b"GET /hea").unwrap();
    let started = Instant::now();
    let answer = admin.try_get("/health", PROBE_TIMEOUT);
    let took = started.elapsed();
    assert!(
        matches!(answer, Ok((200, _))) && took < PROBE_TIMEOUT,
        "/health: {answer:?} after {took:?}\n{}",
        broker.log()
    );
    // The half-sent one is closed once its head is overdue.
    held.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut rest = Vec::new();
    let closed_after = Instant::now();
    let _ = held.read_to_end(&mut rest);
    assert!(
        closed_after.elapsed()
            < Duration::from_millis(broker::admin_http::REQUEST_HEAD_MS_MAX + 2_000),
        "the half-sent request was kept open"
    );
}

/// More idle connections than the admin listener serves at once: it stays
/// healthy (probes answered, threads bounded) and so does the broker.
#[test]
fn more_admin_connections_than_the_bound_leave_the_broker_healthy() {
    let (broker, admin) = Admin::start(&[]);
    let bound = broker::admin_http::ADMIN_CONNECTIONS_MAX;
    let held: Vec<TcpStream> = (0..bound + 8)
        .map(|_| {
            let mut stream = TcpStream::connect(admin.address()).unwrap();
            stream.write_all(b"GET /metr").unwrap();
            stream
        })
        .collect();
    for _ in 0..3 {
        let started = Instant::now();
        let answer = admin.try_get("/health", PROBE_TIMEOUT);
        assert!(
            matches!(answer, Ok((200, _))) && started.elapsed() < PROBE_TIMEOUT,
            "/health with {} idle connections: {answer:?} after {:?}",
            held.len(),
            started.elapsed()
        );
    }
    let count_threads = || {
        std::fs::read_dir(format!("/proc/{}/task", broker.pid()))
            .unwrap()
            .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
            .filter(|name| name.trim() == "strom-admin-req")
            .count()
    };
    // A thread that answered a probe gives its place back before it has
    // exited, so /proc may list it a moment longer: the count must settle
    // at the bound.
    let settled = common::poll_until(Duration::from_secs(5), || {
        (count_threads() <= bound).then_some(())
    });
    assert!(
        settled.is_some(),
        "{} admin connection threads (bound {bound})",
        count_threads()
    );
    let mut kafka = common::raw::connect(&broker);
    let versions: ApiVersionsResponse = call(
        &mut kafka,
        ApiKey::ApiVersions,
        3,
        &ApiVersionsRequest::default(),
    );
    assert_eq!(versions.error_code, 0);
    let (code, _) = admin.try_get("/ready", Duration::from_secs(5)).unwrap();
    assert_eq!(code, 200);
    drop(held);
}

/// Start-up work (opening partitions) is no stall: nothing logged, nothing
/// counted, on a start with partitions to open.
#[test]
fn a_start_reports_no_stall() {
    let (mut broker, admin) = Admin::start(&["--set", "num.partitions=16"]);
    let mut stream = common::raw::connect(&broker);
    let batch = Bytes::from(protocol::batch::build::patterned(1, 10, 100, 1));
    produce(&mut stream, "many", &(0..16).collect::<Vec<_>>(), &batch);
    drop(stream);
    broker.restart();
    let ready = poll_until(READY_DEADLINE, || {
        let (code, _) = admin.try_get("/ready", Duration::from_secs(5)).ok()?;
        (code == 200).then_some(())
    });
    assert!(ready.is_some());
    let m = admin.metrics();
    assert_eq!(
        m.value("strom_core_stalls_total", &[("shard", "all")]),
        0.0,
        "{}",
        broker.log()
    );
    let log = broker.log();
    assert!(!log.contains(STALL_LINE), "{log}");
}

/// Log lines carry plain values, the effective configuration once, and
/// one line for the partitions opened.
#[test]
fn start_up_logs_are_plain_and_complete() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    std::fs::create_dir_all(&data_dir).unwrap();
    std::fs::write(
        data_dir.join("io-properties.toml"),
        "[io]\n\"strom.write.bytes\" = 131072\n",
    )
    .unwrap();
    let config = temp.path().join("strom.toml");
    std::fs::write(&config, "\"log.retention.hours\" = 2\n").unwrap();
    let log_path = temp.path().join("strom.log");
    let admin_port = free_port();
    let admin_address = format!("127.0.0.1:{admin_port}");
    let config_arg = config.display().to_string();
    let args = [
        "--admin-listen",
        &admin_address,
        "--config",
        &config_arg,
        "--set",
        "num.partitions=12",
    ];
    let mut broker = Broker::start_in(&data_dir, &log_path, &args);
    let mut stream = common::raw::connect(&broker);
    let batch = Bytes::from(protocol::batch::build::patterned(1, 10, 100, 1));
    produce(&mut stream, "twelve", &(0..12).collect::<Vec<_>>(), &batch);
    drop(stream);
    let before_restart = broker.log().len();
    broker.restart();
    let log = broker.log();
    let restart_log = &log[before_restart..];

    for leak in ["Some(", "None", "[(\"", "(\""] {
        assert!(!log.contains(leak), "debug formatting ({leak}) in:\n{log}");
    }
    assert!(log.contains(&format!("address={admin_address}")), "{log}");
    assert!(log.contains("used=strom.write.bytes=131072"), "{log}");

    let effective: Vec<&str> = restart_log
        .lines()
        .filter(|l| l.contains("effective configuration"))
        .collect();
    assert_eq!(effective.len(), 1, "{restart_log}");
    let line = effective[0];
    for setting in [
        "num.partitions=12 (flag)".to_string(),
        format!("log.retention.ms=7200000 ({config_arg})"),
        format!(
            "strom.write.bytes=131072 ({})",
            data_dir.join("io-properties.toml").display()
        ),
        format!("admin.listen={admin_address} (flag)"),
        "delete.topic.enable=true (default)".to_string(),
        "log.format=text (default)".to_string(),
        "group.max.size=1000 (default)".to_string(),
        "log.segment.bytes=1073741824 (default)".to_string(),
    ] {
        assert!(line.contains(&setting), "no {setting} in {line}");
    }

    // One line for opening the 12 partitions, none per partition.
    assert!(
        restart_log.contains("opened 12 partitions"),
        "{restart_log}"
    );
    let per_partition = restart_log
        .lines()
        .filter(|l| l.contains("twelve-") || l.contains("producer state rebuilt"))
        .count();
    assert_eq!(per_partition, 0, "{restart_log}");
    assert!(
        restart_log.lines().count() < 15,
        "a start of 12 partitions logs {} lines:\n{restart_log}",
        restart_log.lines().count()
    );
}

/// `--log-format json` and `log.format = "json"`: every line is one JSON
/// object with a level and a message; a bad format stops the start.
#[test]
fn json_logs_are_one_object_per_line() {
    let check = |broker: &Broker| {
        let log = broker.log();
        let mut started = false;
        for line in log.lines() {
            let event: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {line}\n{log}"));
            assert!(event["level"].is_string(), "{line}");
            let message = event["message"].as_str().expect("a message");
            if message == "strom started" {
                started = true;
                assert_eq!(event["cores"], 2, "{line}");
            }
        }
        assert!(started, "{log}");
    };
    let mut broker = Broker::start(&["--log-format", "json"]);
    check(&broker);
    broker.stop();

    let temp = tempfile::tempdir().unwrap();
    let config = temp.path().join("strom.toml");
    std::fs::write(&config, "log.format = \"json\"\n").unwrap();
    let broker = Broker::start(&["--config", config.to_str().unwrap()]);
    check(&broker);

    let output = run(
        Command::new(env!("CARGO_BIN_EXE_strom"))
            .args(["start", "--log-format", "xml", "--data-dir"])
            .arg(temp.path().join("unused")),
        None,
        Duration::from_secs(20),
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("log.format") && stderr.contains("xml"),
        "{stderr}"
    );
}

/// A data dir on tmpfs starts, with a warning that its data lives in memory.
#[test]
fn a_data_dir_on_tmpfs_is_warned_about() {
    let shm = std::path::Path::new("/dev/shm");
    let temp = tempfile::tempdir_in(shm).expect("a directory in /dev/shm");
    let log_path = temp.path().join("strom.log");
    let broker = Broker::start_in(&temp.path().join("data"), &log_path, &[]);
    let log = broker.log();
    assert!(
        log.lines()
            .any(|l| l.contains("WARN") && l.contains("data dir is on tmpfs")),
        "{log}"
    );
    // And none on the usual disk.
    let disk = Broker::start(&[]);
    assert!(!disk.log().contains("tmpfs"), "{}", disk.log());
}
