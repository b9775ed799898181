//! A cluster behind a real TCP load balancer: HAProxy in TCP mode in
//! front of three `strom` brokers in load-balancer mode
//! (`strom.balancer.enable=true`, every broker advertising HAProxy's
//! address), and a topic of six partitions with three replicas. Clients
//! are given only HAProxy's address, so each of their connections to
//! "node X" lands on whichever broker HAProxy picks, and the brokers
//! forward the parts they do not lead.
//!
//! - Every broker listed by its id at the balancer's address, HAProxy
//!   sending every connection to one broker (the worst case):
//!   confluent-kafka (librdkafka 2.16; an idempotent acks=all producer of
//!   keyed records with headers, then a consumer assigned to every
//!   partition, watermarks and offsets by time) reads back every record
//!   byte-exact (tests/clients/balancer_check.py).
//! - One broker listed (`strom.balancer.single.broker`), HAProxy
//!   round-robin: Debian's kcat (librdkafka 2.0.2, one connection per
//!   address) and confluent-kafka both write and read back every record.
//!
//! Both check in `/metrics` that Produce, Fetch and ListOffsets were
//! forwarded.

mod common;

use std::collections::BTreeMap;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use common::raw;
use protocol::batch::build::patterned;
use protocol::kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use protocol::kafka_protocol::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsTopic,
};
use protocol::kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use protocol::kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use protocol::kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use protocol::kafka_protocol::messages::{
    ApiKey, BrokerId, DescribeClusterRequest, DescribeClusterResponse, FetchRequest, FetchResponse,
    FindCoordinatorRequest, FindCoordinatorResponse, ListOffsetsRequest, ListOffsetsResponse,
    MetadataRequest, MetadataResponse, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse,
    ProduceRequest, ProduceResponse, TopicName,
};
use protocol::kafka_protocol::protocol::StrBytes;
use test_support::cluster::Cluster;
use test_support::{free_port, poll_until, run, strom_at, wait_deadline};

const TOPIC: &str = "balanced";
const PARTITIONS: i32 = 6;
const PYTHON_RECORDS: usize = 20_000;
const KCAT_RECORDS: usize = 3_000;
const HAPROXY_START_DEADLINE: Duration = Duration::from_secs(10);
const CLIENT_DEADLINE: Duration = Duration::from_secs(300);

/// How HAProxy picks a broker for each connection.
#[derive(Clone, Copy)]
enum Balance {
    /// In turn, as users run it.
    RoundRobin,
    /// Always the first broker: every part another broker leads is
    /// forwarded, whatever order the client opens its connections in.
    First,
}

impl Balance {
    fn name(self) -> &'static str {
        match self {
            Balance::RoundRobin => "roundrobin",
            Balance::First => "first",
        }
    }
}

/// HAProxy, started on `port` with a generated config in a temp dir,
/// killed and reaped when dropped.
struct HaProxy {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

fn haproxy_bin() -> PathBuf {
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/local/sbin")])
        .map(|dir| dir.join("haproxy"))
        .find(|path| path.is_file());
    found.unwrap_or_else(|| {
        panic!(
            "haproxy is not installed: this test runs a real HAProxy in front of the cluster. \
             Install it with `apt-get install haproxy` (scripts/test does)"
        )
    })
}

impl HaProxy {
    /// TCP mode over `backends` (loopback client ports), choosing a
    /// backend per connection by `balance` (HAProxy's algorithm).
    fn start(port: u16, backends: &[u16], balance: Balance) -> HaProxy {
        let dir = tempfile::tempdir().unwrap();
        let servers: String = backends
            .iter()
            .enumerate()
            // TCP health checks: a broker that is down gets no connections.
            .map(|(i, backend)| {
                format!(
                    "    server broker{} 127.0.0.1:{backend} check inter 500 fall 2 rise 2\n",
                    i + 1
                )
            })
            .collect();
        let config = format!(
            "global\n    maxconn 4096\n\n\
             defaults\n    mode tcp\n    timeout connect 5s\n    timeout client 120s\n    timeout server 120s\n\n\
             frontend kafka\n    bind 127.0.0.1:{port}\n    default_backend brokers\n\n\
             backend brokers\n    balance {}\n{servers}",
            balance.name()
        );
        let config_path = dir.path().join("haproxy.cfg");
        std::fs::write(&config_path, config).unwrap();
        let log = std::fs::File::create(dir.path().join("haproxy.log")).unwrap();
        // -db: stay in the foreground, so the child is HAProxy itself.
        let child = Command::new(haproxy_bin())
            .arg("-db")
            .arg("-f")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("haproxy starts");
        let mut haproxy = HaProxy {
            child,
            port,
            _dir: dir,
        };
        let listening = poll_until(HAPROXY_START_DEADLINE, || {
            if let Some(status) = haproxy.child.try_wait().unwrap() {
                panic!("haproxy exited with {status}:\n{}", haproxy.log());
            }
            TcpStream::connect(("127.0.0.1", port)).ok().map(|_| ())
        });
        assert!(
            listening.is_some(),
            "haproxy did not listen on {port} within {HAPROXY_START_DEADLINE:?}:\n{}",
            haproxy.log()
        );
        haproxy
    }

    fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("haproxy.log")).unwrap_or_default()
    }
}

impl Drop for HaProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The brokers (id -> host:port) and partitions (index -> (leader, ISR
/// size)) of `topic` as kcat lists them through `bootstrap`.
fn metadata(bootstrap: &str, topic: &str) -> Option<Listing> {
    let output = run(
        Command::new("kcat").args(["-b", bootstrap, "-L", "-J", "-m", "5", "-t", topic]),
        None,
        Duration::from_secs(20),
    );
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).ok()?;
    let brokers = json["brokers"]
        .as_array()?
        .iter()
        .filter_map(|b| Some((b["id"].as_i64()?, b["name"].as_str()?.to_string())))
        .collect();
    let topic = json["topics"].as_array()?.first()?;
    let partitions = topic["partitions"]
        .as_array()?
        .iter()
        .filter_map(|p| {
            Some((
                p["partition"].as_i64()?,
                (p["leader"].as_i64()?, p["isrs"].as_array()?.len()),
            ))
        })
        .collect();
    Some((brokers, partitions))
}

/// The sum over `cluster`'s nodes of `strom_forwarded_requests_total` for
/// `api` (all shards).
fn forwarded(cluster: &Cluster, api: &str) -> u64 {
    cluster
        .nodes
        .iter()
        .map(|node| forwarded_by(cluster, node.id, api))
        .sum()
}

/// Node `id`'s `strom_forwarded_requests_total` for `api` (all shards).
fn forwarded_by(cluster: &Cluster, id: i32, api: &str) -> u64 {
    let admin = format!("127.0.0.1:{}", cluster.node(id).ports.admin);
    let (_, body) = common::admin::http_get(&admin, "/metrics");
    body.lines()
        .filter(|line| {
            line.starts_with("strom_forwarded_requests_total{shard=\"all\"")
                && line.contains(&format!("api=\"{api}\""))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

fn kcat(args: &[&str], stdin: Option<&[u8]>) -> Vec<u8> {
    let output = run(Command::new("kcat").args(args), stdin, CLIENT_DEADLINE);
    assert!(
        output.status.success(),
        "kcat {args:?} failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

/// kcat writes keyed lines with a header through the balancer, then reads
/// each partition back (assigned, no group): every record once, byte-exact,
/// each partition in the order written.
fn kcat_roundtrip(bootstrap: &str, topic: &str) {
    let lines: String = (0..KCAT_RECORDS)
        .map(|i| format!("kcat-{i}:value-{i}-{}\n", "x".repeat(i % 97)))
        .collect();
    kcat(
        &[
            "-b",
            bootstrap,
            "-P",
            "-t",
            topic,
            "-K",
            ":",
            "-H",
            "origin=kcat",
            "-X",
            "acks=all",
        ],
        Some(lines.as_bytes()),
    );
    let mut seen = BTreeMap::new();
    for partition in 0..PARTITIONS {
        let partition = partition.to_string();
        let out = kcat(
            &[
                "-b",
                bootstrap,
                "-C",
                "-t",
                topic,
                "-p",
                &partition,
                "-o",
                "beginning",
                "-e",
                "-f",
                "%o %k %s %h\n",
            ],
            None,
        );
        let mut last = -1i64;
        for line in String::from_utf8(out).unwrap().lines() {
            let fields: Vec<&str> = line.splitn(4, ' ').collect();
            let [offset, key, value, headers] = fields[..] else {
                panic!("partition {partition}: unexpected line {line:?}");
            };
            let offset: i64 = offset.parse().unwrap();
            assert!(offset > last, "partition {partition}: offsets go back");
            last = offset;
            let i: usize = key.strip_prefix("kcat-").unwrap().parse().unwrap();
            assert_eq!(value, format!("value-{i}-{}", "x".repeat(i % 97)), "{key}");
            assert_eq!(headers, "origin=kcat", "{key}");
            assert!(seen.insert(i, offset).is_none(), "{key} twice");
        }
    }
    assert_eq!(seen.len(), KCAT_RECORDS, "kcat read back every record once");
}

/// Creates `topic` (`PARTITIONS` partitions of three replicas) with the
/// `strom` tool through the balancer: whichever broker takes the request
/// passes it to the active controller. Asked again until the three
/// brokers have registered (a replication factor above the live brokers
/// is refused).
fn create_topic(cluster: &Cluster, bootstrap: &str, topic: &str) {
    let partitions = PARTITIONS.to_string();
    let args = [
        "topic",
        "create",
        topic,
        "--partitions",
        &partitions,
        "--replication-factor",
        "3",
    ];
    let mut last_error = String::new();
    let created = poll_until(test_support::cluster::SETTLE_DEADLINE, || {
        let output = test_support::strom_at(Some(bootstrap), &args, None);
        let stderr = String::from_utf8_lossy(&output.stderr).to_string();
        let done = output.status.success() || stderr.contains("TOPIC_ALREADY_EXISTS");
        last_error = stderr;
        done.then_some(())
    });
    assert!(
        created.is_some(),
        "strom {args:?} through {bootstrap}: {last_error}\n{}",
        cluster.logs()
    );
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/balancer_check.py")
}

/// The cluster behind its balancer, with a replicated topic.
struct Balanced {
    cluster: Cluster,
    haproxy: HaProxy,
}

/// Three brokers in load-balancer mode (and `extra` settings) behind
/// HAProxy, and `topic` with `PARTITIONS` partitions of three replicas,
/// once every replica is in sync. Returns what kcat lists through the
/// balancer: brokers and partitions.
fn balanced(extra: &[&str], balance: Balance, topic: &str) -> (Balanced, Listing) {
    balanced_on(extra, balance, topic, None)
}

/// [`balanced`], on a cluster whose brokers talk to each other over
/// SASL_SSL with these certificates, when given.
fn balanced_on(
    extra: &[&str],
    balance: Balance,
    topic: &str,
    secured: Option<&test_support::certs::Certificates>,
) -> (Balanced, Listing) {
    let balancer_port = free_port();
    let advertised = format!("advertised.listeners=PLAINTEXT://127.0.0.1:{balancer_port}");
    let mut settings = vec![
        "--set",
        "strom.balancer.enable=true",
        "--set",
        &advertised,
        // Listing a topic must not create it with one partition.
        "--set",
        "auto.create.topics.enable=false",
    ];
    settings.extend_from_slice(extra);
    let secured_args = secured.map(|c| c.secured_cluster_args());
    let cluster = match &secured_args {
        None => Cluster::start(3, &settings),
        Some(args) => {
            settings.extend(args.iter().map(String::as_str));
            Cluster::start_secured(3, &settings)
        }
    };
    let backends: Vec<u16> = cluster.nodes.iter().map(|n| n.ports.client).collect();
    let haproxy = HaProxy::start(balancer_port, &backends, balance);
    create_topic(&cluster, &haproxy.bootstrap(), topic);
    let bootstrap = haproxy.bootstrap();
    let listing = cluster.wait_for("every replica in sync", || {
        let (brokers, partitions) = metadata(&bootstrap, topic)?;
        let settled = partitions.len() == PARTITIONS as usize
            && partitions
                .values()
                .all(|&(leader, isr)| leader > 0 && isr == 3);
        settled.then_some((brokers, partitions))
    });
    (Balanced { cluster, haproxy }, listing)
}

type Listing = (BTreeMap<i64, String>, BTreeMap<i64, (i64, usize)>);

const SINGLE_BROKER: &str = "strom.balancer.single.broker=true";

/// Runs balancer_check.py roundtrip through the balancer.
fn python_roundtrip(balanced: &Balanced, topic: &str, records: usize) {
    let output = run(
        Command::new("python3").arg(script()).args([
            "roundtrip",
            &balanced.haproxy.bootstrap(),
            topic,
            &PARTITIONS.to_string(),
            &records.to_string(),
        ]),
        None,
        CLIENT_DEADLINE,
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "balancer_check.py failed ({}); needs confluent-kafka: run `scripts/python-venv` and put target/test-venv/bin first on PATH (scripts/test does both)\nstdout:\n{stdout}\nstderr:\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr),
        balanced.cluster.logs()
    );
    assert!(
        stdout.contains(&format!("produced {records} consumed {records}")),
        "{stdout}"
    );
}

/// The brokers forwarded: a round-robin balancer sends most connections
/// to a broker that does not lead what they ask for.
fn assert_forwarded(cluster: &Cluster, apis: &[&str]) {
    for api in apis {
        let count = forwarded(cluster, api);
        assert!(count > 0, "no {api} request was forwarded");
        println!("{api} requests forwarded: {count}");
    }
}

/// The partitions of the raw requests, in the order asked: every one of
/// `TOPIC`'s, out of order, partition 0 twice.
const ASKED: [i32; 7] = [5, 0, 3, 0, 1, 4, 2];
const RAW_CLIENT_ID: &str = "balancer-raw";

fn topic_name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_string()))
}

/// Each partition's leader epoch, as broker `node` lists them.
fn leader_epochs(cluster: &Cluster, node: i32, topic: &str) -> BTreeMap<i32, i32> {
    let mut stream = raw::connect(&cluster.node(node).broker);
    let response: MetadataResponse = raw::call(
        &mut stream,
        ApiKey::Metadata,
        9,
        1,
        RAW_CLIENT_ID,
        &MetadataRequest::default().with_topics(Some(vec![
            MetadataRequestTopic::default().with_name(Some(topic_name(topic)))
        ])),
    );
    response.topics[0]
        .partitions
        .iter()
        .map(|p| (p.partition_index, p.leader_epoch))
        .collect()
}

/// ListOffsets (latest) of `partitions` of `topic`, asked of node `node`
/// over a raw connection, answered in the order asked.
fn latest_offsets(
    cluster: &Cluster,
    node: i32,
    topic: &str,
    partitions: &[i32],
) -> ListOffsetsResponse {
    let mut stream = raw::connect(&cluster.node(node).broker);
    let partitions = partitions
        .iter()
        .map(|&p| {
            ListOffsetsPartition::default()
                .with_partition_index(p)
                .with_current_leader_epoch(-1)
                .with_timestamp(-1)
        })
        .collect();
    raw::call(
        &mut stream,
        ApiKey::ListOffsets,
        7,
        2,
        RAW_CLIENT_ID,
        &ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(topic_name(topic))
                .with_partitions(partitions)]),
    )
}

/// Asks each broker directly, for all of `topic`'s partitions at once
/// (each broker leads two of six), what only their leaders know: every
/// broker answers as the leaders do, in the order asked.
/// - Produce (acks=all): each broker writes one batch to every partition;
/// - ListOffsets (latest): the same answers from every broker;
/// - OffsetForLeaderEpoch (a consumer's): the current epoch ends at the
///   log end;
/// - Fetch: each broker's batches come back byte for byte (only the base
///   offset and leader epoch, which the CRC does not cover, rewritten).
fn any_broker_answers_as_the_leader(cluster: &Cluster, topic: &str) {
    let epochs = leader_epochs(cluster, 1, topic);
    // (node, partition) -> (base offset, batch sent).
    let mut sent: BTreeMap<(i32, i32), (i64, Bytes)> = BTreeMap::new();
    for node in [1, 2, 3] {
        let mut stream = raw::connect(&cluster.node(node).broker);
        // Each partition once (a produce names a partition once), in
        // ASKED's order.
        let mut batches: Vec<(i32, Bytes)> = Vec::new();
        for p in ASKED {
            if batches.iter().all(|(q, _)| *q != p) {
                let seed = (node * 100 + p) as u64;
                batches.push((p, Bytes::from(patterned(1_700_000_000_000, 5, 40, seed))));
            }
        }
        let partition_data = batches
            .iter()
            .map(|(p, batch)| {
                PartitionProduceData::default()
                    .with_index(*p)
                    .with_records(Some(batch.clone()))
            })
            .collect();
        let response: ProduceResponse = raw::call(
            &mut stream,
            ApiKey::Produce,
            9,
            1,
            RAW_CLIENT_ID,
            &ProduceRequest::default()
                .with_acks(-1)
                .with_timeout_ms(30_000)
                .with_topic_data(vec![TopicProduceData::default()
                    .with_name(topic_name(topic))
                    .with_partition_data(partition_data)]),
        );
        let answers = &response.responses[0].partition_responses;
        assert_eq!(answers.len(), batches.len(), "{response:?}");
        for ((p, batch), answer) in batches.iter().zip(answers) {
            assert_eq!(answer.index, *p, "answers in the order asked: {response:?}");
            assert_eq!(
                answer.error_code, 0,
                "node {node} partition {p}: {answer:?}"
            );
            sent.insert((node, *p), (answer.base_offset, batch.clone()));
        }
    }
    let mut latest_by_node = Vec::new();
    for node in [1, 2, 3] {
        let response = latest_offsets(cluster, node, topic, &ASKED);
        let latest: Vec<(i32, i16, i64)> = response.topics[0]
            .partitions
            .iter()
            .map(|p| (p.partition_index, p.error_code, p.offset))
            .collect();
        assert_eq!(
            latest.iter().map(|l| l.0).collect::<Vec<_>>(),
            ASKED,
            "node {node}: {latest:?}"
        );
        for &(p, code, offset) in &latest {
            assert_eq!(code, 0, "node {node} partition {p}");
            let last_sent = [1, 2, 3]
                .iter()
                .map(|n| sent[&(*n, p)].0 + 5)
                .max()
                .unwrap();
            assert!(
                offset >= last_sent,
                "node {node} partition {p}: {offset} < {last_sent}"
            );
        }
        latest_by_node.push(latest);
    }
    assert!(
        latest_by_node.windows(2).all(|w| w[0] == w[1]),
        "every broker answers ListOffsets alike: {latest_by_node:?}"
    );
    let latest: BTreeMap<i32, i64> = latest_by_node[0].iter().map(|l| (l.0, l.2)).collect();
    for node in [1, 2, 3] {
        let mut stream = raw::connect(&cluster.node(node).broker);
        let partitions = ASKED
            .iter()
            .map(|&p| {
                OffsetForLeaderPartition::default()
                    .with_partition(p)
                    .with_current_leader_epoch(epochs[&p])
                    .with_leader_epoch(epochs[&p])
            })
            .collect();
        let response: OffsetForLeaderEpochResponse = raw::call(
            &mut stream,
            ApiKey::OffsetForLeaderEpoch,
            4,
            3,
            RAW_CLIENT_ID,
            &OffsetForLeaderEpochRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_topics(vec![OffsetForLeaderTopic::default()
                    .with_topic(topic_name(topic))
                    .with_partitions(partitions)]),
        );
        let answers = &response.topics[0].partitions;
        assert_eq!(answers.len(), ASKED.len(), "{response:?}");
        for (answer, &p) in answers.iter().zip(&ASKED) {
            assert_eq!(answer.partition, p, "node {node}: {response:?}");
            assert_eq!(
                answer.error_code, 0,
                "node {node} partition {p}: {answer:?}"
            );
            assert_eq!(answer.leader_epoch, epochs[&p], "node {node} partition {p}");
            assert_eq!(answer.end_offset, latest[&p], "node {node} partition {p}");
        }
    }
    for node in [1, 2, 3] {
        let mut stream = raw::connect(&cluster.node(node).broker);
        let partitions = ASKED
            .iter()
            .map(|&p| {
                FetchPartition::default()
                    .with_partition(p)
                    .with_current_leader_epoch(epochs[&p])
                    .with_fetch_offset(sent[&(node, p)].0)
                    .with_partition_max_bytes(1 << 20)
            })
            .collect();
        let response: FetchResponse = raw::call(
            &mut stream,
            ApiKey::Fetch,
            12,
            4,
            RAW_CLIENT_ID,
            &FetchRequest::default()
                .with_max_wait_ms(500)
                .with_min_bytes(1)
                .with_max_bytes(16 << 20)
                .with_topics(vec![FetchTopic::default()
                    .with_topic(topic_name(topic))
                    .with_partitions(partitions)]),
        );
        let answers = &response.responses[0].partitions;
        assert_eq!(answers.len(), ASKED.len(), "{response:?}");
        for (answer, &p) in answers.iter().zip(&ASKED) {
            assert_eq!(answer.partition_index, p, "node {node}");
            assert_eq!(
                answer.error_code, 0,
                "node {node} partition {p}: {answer:?}"
            );
            assert_eq!(
                answer.high_watermark, latest[&p],
                "node {node} partition {p}"
            );
            let (base_offset, batch) = &sent[&(node, p)];
            let records = answer.records.clone().unwrap_or_default();
            // The first batch is the one this node produced, whole.
            assert!(
                records.len() >= batch.len(),
                "node {node} partition {p}: short"
            );
            assert_eq!(
                &records[..8],
                &base_offset.to_be_bytes(),
                "node {node} partition {p}: base offset"
            );
            assert_eq!(
                &records[8..12],
                &batch[8..12],
                "node {node} partition {p}: batch length"
            );
            assert_eq!(
                &records[16..batch.len()],
                &batch[16..],
                "node {node} partition {p}: the batch as produced"
            );
        }
    }
}

/// Every broker names the balancer's address for every broker in
/// DescribeCluster, and for a group's coordinator in FindCoordinator.
fn every_answer_names_the_balancer(cluster: &Cluster, balancer: &str) {
    for node in [1, 2, 3] {
        let mut stream = raw::connect(&cluster.node(node).broker);
        let described: DescribeClusterResponse = raw::call(
            &mut stream,
            ApiKey::DescribeCluster,
            0,
            5,
            RAW_CLIENT_ID,
            &DescribeClusterRequest::default(),
        );
        let listed: Vec<(i32, String)> = described
            .brokers
            .iter()
            .map(|b| (b.broker_id.0, format!("{}:{}", b.host.as_str(), b.port)))
            .collect();
        assert_eq!(
            listed,
            [1, 2, 3].map(|id| (id, balancer.to_string())),
            "DescribeCluster from broker {node}"
        );
        // The first ask creates the offsets topic: asked again until its
        // leaders are elected.
        let found = cluster.wait_for("the group's coordinator", || {
            let found: FindCoordinatorResponse = raw::call(
                &mut stream,
                ApiKey::FindCoordinator,
                3,
                6,
                RAW_CLIENT_ID,
                &FindCoordinatorRequest::default()
                    .with_key(StrBytes::from_static_str("balanced-group"))
                    .with_key_type(0),
            );
            (found.error_code == 0).then_some(found)
        });
        assert_eq!(
            format!("{}:{}", found.host.as_str(), found.port),
            balancer,
            "FindCoordinator from broker {node}: {found:?}"
        );
    }
}

/// Kills broker 3, and at once (before the controller fences it) asks
/// broker 1 to produce to a partition broker 3 leads and to one broker 1
/// leads: the first is answered NOT_LEADER_OR_FOLLOWER (retriable) without
/// waiting, the second written; broker 1 counts the failed forward.
fn an_unreachable_leader_is_not_leader(
    cluster: &mut Cluster,
    topic: &str,
    leaders: &BTreeMap<i64, (i64, usize)>,
) {
    let led_by = |node: i64| {
        leaders
            .iter()
            .find(|(_, &(leader, _))| leader == node)
            .map(|(&p, _)| p as i32)
            .unwrap_or_else(|| panic!("broker {node} leads a partition: {leaders:?}"))
    };
    let (elsewhere, here) = (led_by(3), led_by(1));
    let mut stream = raw::connect(&cluster.node(1).broker);
    cluster.node_mut(3).broker.kill();
    let started = std::time::Instant::now();
    let partition_data = [elsewhere, here]
        .iter()
        .map(|&p| {
            PartitionProduceData::default()
                .with_index(p)
                .with_records(Some(Bytes::from(patterned(1_700_000_000_000, 3, 10, 7))))
        })
        .collect();
    let response: ProduceResponse = raw::call(
        &mut stream,
        ApiKey::Produce,
        9,
        9,
        RAW_CLIENT_ID,
        &ProduceRequest::default()
            .with_acks(1)
            .with_timeout_ms(30_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(topic_name(topic))
                .with_partition_data(partition_data)]),
    );
    let answers = &response.responses[0].partition_responses;
    assert_eq!(
        (answers[0].index, answers[0].error_code),
        (elsewhere, NOT_LEADER_OR_FOLLOWER),
        "{response:?}"
    );
    assert_eq!(
        (answers[1].index, answers[1].error_code),
        (here, 0),
        "{response:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "answered after {:?}",
        started.elapsed()
    );
    let admin = format!("127.0.0.1:{}", cluster.node(1).ports.admin);
    let (_, body) = common::admin::http_get(&admin, "/metrics");
    let failed =
        "strom_forwarded_request_failures_total{shard=\"all\",broker=\"3\",api=\"Produce\"} ";
    assert!(
        body.lines()
            .any(|l| l.starts_with(failed) && !l.ends_with(" 0")),
        "broker 1 counts its failed forward to broker 3:\n{body}"
    );
}

const NOT_LEADER_OR_FOLLOWER: i16 = 6;

/// One cluster at a time: each test runs three brokers, HAProxy and the
/// clients.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn every_broker_is_listed_at_the_balancer_and_confluent_kafka_reads_back_every_record() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // Every connection to the first broker: the worst case for
    // forwarding, and what a round-robin balancer does to some of a
    // client's connections.
    every_broker_listed_at_the_balancer(balanced(&[], Balance::First, TOPIC));
}

/// The same where the brokers forward to each other over SASL_SSL on a
/// listener of their own, and reach the controllers over SASL_SSL.
#[test]
fn behind_the_balancer_a_cluster_secured_between_brokers_reads_back_every_record() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let certificates = test_support::certs::Certificates::make();
    every_broker_listed_at_the_balancer(balanced_on(
        &[],
        Balance::First,
        TOPIC,
        Some(&certificates),
    ));
}

/// With the authorizer on, a group request one broker forwards to the
/// group's coordinator travels in an Envelope and is served as the
/// client: behind a balancer that sends every connection to broker 1,
/// consumer groups coordinated by the others work (their requests
/// forwarded), and a group the client is denied is refused with
/// GROUP_AUTHORIZATION_FAILED, whichever broker coordinates it.
#[test]
fn behind_the_balancer_forwarded_group_requests_are_authorized_as_the_client() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let certificates = test_support::certs::Certificates::make();
    let (balanced, _) = balanced_on(
        &[
            "--set",
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "--set",
            "super.users=User:broker",
            // Clients (User:ANONYMOUS through the balancer) may use what no
            // ACL names.
            "--set",
            "allow.everyone.if.no.acl.found=true",
        ],
        Balance::First,
        TOPIC,
        Some(&certificates),
    );
    let bootstrap = balanced.haproxy.bootstrap();
    let cluster = &balanced.cluster;
    let joins_before = forwarded(cluster, "JoinGroup");
    // Groups until one is coordinated by a broker other than the first.
    let lines: String = (0..50).map(|i| format!("record-{i}\n")).collect();
    kcat(
        &["-b", &bootstrap, "-P", "-t", TOPIC, "-p", "0"],
        Some(lines.as_bytes()),
    );
    let consume = |group: &str| {
        strom_at(
            Some(&bootstrap),
            &[
                "consume",
                TOPIC,
                "--group",
                group,
                "--from-beginning",
                "--max-messages",
                "50",
            ],
            None,
        )
    };
    for group in 0..8 {
        let group = format!("allowed-{group}");
        let out = consume(&group);
        assert!(
            out.status.success(),
            "{group}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).lines().count(),
            50,
            "{group}"
        );
        if forwarded(cluster, "JoinGroup") > joins_before {
            break;
        }
    }
    assert!(
        forwarded(cluster, "JoinGroup") > joins_before,
        "no group's requests were forwarded to another coordinator"
    );
    // Denied: a prefix of groups, refused for the client wherever coordinated.
    let denied = strom_at(
        Some(&bootstrap),
        &[
            "acl",
            "add",
            "--deny-principal",
            "User:ANONYMOUS",
            "--operation",
            "Read",
            "--group",
            "denied-",
            "--resource-pattern-type",
            "prefixed",
        ],
        None,
    );
    assert!(
        denied.status.success(),
        "{}",
        String::from_utf8_lossy(&denied.stderr)
    );
    for group in 0..4 {
        let refused = consume(&format!("denied-{group}"));
        let said = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success(), "group denied-{group} consumed");
        assert!(
            said.contains("Group authorization failed"),
            "denied-{group}: {said}"
        );
    }
}

fn every_broker_listed_at_the_balancer((balanced, (brokers, partitions)): (Balanced, Listing)) {
    let bootstrap = balanced.haproxy.bootstrap();
    // Every broker is listed by its own id at the balancer's address.
    assert_eq!(
        brokers.keys().copied().collect::<Vec<_>>(),
        [1, 2, 3],
        "{brokers:?}"
    );
    for (id, name) in &brokers {
        assert_eq!(name, &bootstrap, "broker {id} is listed at {name}");
    }
    let leaders: std::collections::BTreeSet<i64> =
        partitions.values().map(|&(leader, _)| leader).collect();
    assert_eq!(
        leaders.len(),
        3,
        "the partitions' leaders are spread over the brokers: {partitions:?}"
    );
    every_answer_names_the_balancer(&balanced.cluster, &bootstrap);
    python_roundtrip(&balanced, TOPIC, PYTHON_RECORDS);
    any_broker_answers_as_the_leader(&balanced.cluster, TOPIC);
    assert_forwarded(
        &balanced.cluster,
        &["Produce", "Fetch", "ListOffsets", "OffsetForLeaderEpoch"],
    );
    let mut balanced = balanced;
    an_unreachable_leader_is_not_leader(&mut balanced.cluster, TOPIC, &partitions);
}

#[test]
fn with_one_broker_listed_kcat_and_confluent_kafka_read_back_every_record() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (balanced, (brokers, partitions)) =
        balanced(&["--set", SINGLE_BROKER], Balance::RoundRobin, TOPIC);
    let bootstrap = balanced.haproxy.bootstrap();
    // One broker, the lowest id, at the balancer's address, leads all.
    assert_eq!(
        brokers,
        BTreeMap::from([(1, bootstrap.clone())]),
        "one broker listed"
    );
    assert!(
        partitions.values().all(|&(leader, _)| leader == 1),
        "{partitions:?}"
    );
    // Debian's kcat (librdkafka 2.0.2) keeps one connection per address.
    kcat_roundtrip(&bootstrap, TOPIC);
    let python_topic = format!("{TOPIC}-python");
    create_topic(&balanced.cluster, &bootstrap, &python_topic);
    balanced.cluster.wait_for("the python topic in sync", || {
        let (_, partitions) = metadata(&bootstrap, &python_topic)?;
        (partitions.len() == PARTITIONS as usize
            && partitions
                .values()
                .all(|&(leader, isr)| leader > 0 && isr == 3))
        .then_some(())
    });
    python_roundtrip(&balanced, &python_topic, PYTHON_RECORDS);
    assert_forwarded(&balanced.cluster, &["Produce", "Fetch", "ListOffsets"]);
}

/// Share groups behind a balancer that sends every connection to broker
/// 1: the ShareFetch and ShareAcknowledge parts for partitions the other
/// brokers lead are served there (forwarded, the share session staying
/// on broker 1), the heartbeats reach the group's coordinator, and the
/// share check's every rule holds: each record accepted once, released
/// and lock-expired ones delivered again with a higher count, the limit
/// honoured.
#[test]
fn share_consumers_behind_the_balancer_divide_every_record() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (balanced, _) = balanced(
        &[
            "--set",
            "group.share.record.lock.duration.ms=3000",
            "--set",
            "group.share.delivery.count.limit=3",
        ],
        Balance::First,
        TOPIC,
    );
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("members.log");
    let out = common::run_python(
        "share_check.py",
        &[
            "queue",
            &balanced.haproxy.bootstrap(),
            "share-balanced",
            log.to_str().unwrap(),
            "3",
        ],
        CLIENT_DEADLINE,
    );
    assert!(out.contains("queue: ok 300 records"), "{out}");
    println!("{out}");
    assert_forwarded(&balanced.cluster, &["ShareFetch"]);
}

/// Records the group test writes through the balancer.
const GROUP_RECORDS: usize = 100_000;

#[test]
fn a_group_and_a_producer_carry_on_through_a_round_robin_balancer_while_a_broker_is_killed() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (mut balanced, _) = balanced(&[], Balance::RoundRobin, TOPIC);
    let bootstrap = balanced.haproxy.bootstrap();

    // Admin changes through the balancer, whichever broker each lands on.
    let admin = run(
        Command::new("python3")
            .arg(script())
            .args(["admin", &bootstrap, "balanced-admin"]),
        None,
        CLIENT_DEADLINE,
    );
    assert!(
        admin.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&admin.stdout),
        String::from_utf8_lossy(&admin.stderr)
    );

    // kafka-python: a producer and a group member through the balancer,
    // on a topic of their own.
    let kafka_python_topic = format!("{TOPIC}-kafka-python");
    create_topic(&balanced.cluster, &bootstrap, &kafka_python_topic);
    balanced
        .cluster
        .wait_for("the kafka-python topic in sync", || {
            let (_, partitions) = metadata(&bootstrap, &kafka_python_topic)?;
            (partitions.len() == PARTITIONS as usize
                && partitions
                    .values()
                    .all(|&(leader, isr)| leader > 0 && isr == 3))
            .then_some(())
        });
    let python = run(
        Command::new("python3").arg(script()).args([
            "kafka_python",
            &bootstrap,
            &kafka_python_topic,
            "3000",
        ]),
        None,
        CLIENT_DEADLINE,
    );
    let said = String::from_utf8_lossy(&python.stdout).to_string();
    assert!(
        python.status.success() && said.contains("kafka-python produced 3000 consumed 3000"),
        "{said}\n{}",
        String::from_utf8_lossy(&python.stderr)
    );

    // An idempotent acks=all producer and a group of three, all through
    // the balancer; a broker is killed with kill -9 once a fifth is read.
    let dir = tempfile::tempdir().unwrap();
    let progress = dir.path().join("progress");
    let mut client = Command::new("python3")
        .arg(script())
        .args([
            "group",
            &bootstrap,
            TOPIC,
            &PARTITIONS.to_string(),
            &GROUP_RECORDS.to_string(),
        ])
        .arg(&progress)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let read_so_far = || {
        std::fs::read_to_string(&progress)
            .ok()
            .and_then(|s| s.trim().parse::<usize>().ok())
    };
    let started = poll_until(CLIENT_DEADLINE, || {
        if let Some(status) = client.try_wait().unwrap() {
            panic!("the group client ended early ({status})");
        }
        read_so_far().filter(|&n| n >= GROUP_RECORDS / 5)
    });
    assert!(
        started.is_some(),
        "the group read too little\n{}",
        balanced.cluster.logs()
    );
    // What broker 3 forwarded is counted before its counters die with it.
    let forwarded_by_3: Vec<u64> = GROUP_APIS
        .iter()
        .map(|api| forwarded_by(&balanced.cluster, 3, api))
        .collect();
    balanced.cluster.node_mut(3).broker.kill();
    let status = wait_deadline(&mut client, CLIENT_DEADLINE).unwrap_or_else(|| {
        let _ = client.kill();
        panic!(
            "the group client did not finish\n{}",
            balanced.cluster.logs()
        )
    });
    let output = client.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        status.success(),
        "{stdout}\n{}\n{}",
        String::from_utf8_lossy(&output.stderr),
        balanced.cluster.logs()
    );
    assert!(
        stdout.contains(&format!(
            "produced {GROUP_RECORDS} consumed {GROUP_RECORDS} "
        )) && stdout.contains("members 3"),
        "{stdout}"
    );
    println!("through the balancer, broker 3 killed: {stdout}");

    // Each client sends its group requests over one connection to its
    // coordinator, and the balancer may have put every such connection on
    // the coordinator itself. Until a JoinGroup was forwarded, one more
    // member joins a group of its own (a new group id, so most often
    // another coordinator) and leaves: a new connection each time.
    let forwarded = |api: &str| -> u64 {
        [1, 2]
            .iter()
            .map(|&id| forwarded_by(&balanced.cluster, id, api))
            .sum()
    };
    let mut joins = 0;
    while forwarded("JoinGroup") + forwarded_by_3[0] == 0 && joins < EXTRA_JOINS {
        joins += 1;
        let group = format!("balanced-join-{joins}");
        let joined = run(
            Command::new("python3")
                .arg(script())
                .args(["join", &bootstrap, TOPIC, &group]),
            None,
            CLIENT_DEADLINE,
        );
        let said = String::from_utf8_lossy(&joined.stdout).to_string();
        assert!(
            joined.status.success()
                && said.contains(&format!("joined {group} with {PARTITIONS} partitions")),
            "{said}\n{}",
            String::from_utf8_lossy(&joined.stderr)
        );
    }
    println!("extra members that joined until a JoinGroup was forwarded: {joins}");
    for (api, before_kill) in GROUP_APIS.iter().zip(&forwarded_by_3) {
        let count = forwarded(api) + before_kill;
        println!("{api} requests forwarded: {count}");
    }
    assert!(
        forwarded("JoinGroup") + forwarded_by_3[0] > 0,
        "no JoinGroup request was forwarded in {EXTRA_JOINS} extra joins"
    );
    for api in ["Produce", "Fetch"] {
        let count = forwarded(api);
        assert!(count > 0, "no {api} request was forwarded");
        println!("{api} requests forwarded: {count}");
    }
}

/// The group coordination requests the group test counts as forwarded,
/// JoinGroup first.
const GROUP_APIS: [&str; 4] = ["JoinGroup", "SyncGroup", "Heartbeat", "OffsetCommit"];

/// At most this many extra members join until one JoinGroup was forwarded.
const EXTRA_JOINS: usize = 12;

/// Produce requests of about 1 MiB each that a test writes to one broker
/// for a partition another broker leads.
const PRESSED_REQUEST_RECORDS: usize = 1_000;
const PRESSED_CONNECTIONS: usize = 8;
/// How long the test waits for the broker's memory to stop growing.
const PRESSED_SETTLE_DEADLINE: Duration = Duration::from_secs(10);
/// What the writers offer in all, far above the forwarding bound.
const PRESSED_OFFERED_BYTES: usize = 400 << 20;
/// The broker's budget for requests read and not answered yet
/// (`queued.max.request.bytes`), set low for this test: what waits for a
/// stalled leader counts against it.
const PRESSED_QUEUED_BYTES: u64 = 64 << 20;
/// The forwarding broker's memory may grow by at most this while the
/// leader does not answer: the request budget, and as much again for the
/// buffers around it.
const PRESSED_GROWTH_MAX: u64 = 2 * PRESSED_QUEUED_BYTES;

/// One writer's connection: the frames it wrote whole, and where it is
/// in the one it is writing.
struct Writer {
    stream: TcpStream,
    frames: Vec<Vec<u8>>,
    written: usize,
    at: usize,
}

impl Writer {
    /// Writes until the socket blocks for `patience` or `budget` bytes
    /// went; whether it blocked.
    fn write_until_blocked(&mut self, budget: usize, patience: Duration) -> bool {
        use std::io::Write;
        self.stream.set_write_timeout(Some(patience)).unwrap();
        let mut sent = 0;
        while sent < budget {
            if self.written == self.frames.len() {
                let next = self.frames[self.written - 1].clone();
                self.frames.push(next);
            }
            let frame = &self.frames[self.written];
            match self.stream.write(&frame[self.at..]) {
                Ok(n) => {
                    sent += n;
                    self.at += n;
                    if self.at == frame.len() {
                        self.written += 1;
                        self.at = 0;
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return true
                }
                Err(e) => panic!("write: {e}"),
            }
        }
        false
    }
}

#[test]
fn forwarded_produces_to_a_stalled_leader_are_held_back_not_buffered() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let advertised = format!("advertised.listeners=PLAINTEXT://127.0.0.1:{}", free_port());
    let queued = format!("queued.max.request.bytes={PRESSED_QUEUED_BYTES}");
    // A stopped broker stays registered (its session outlives the test's
    // stall), so the others keep forwarding to it.
    let cluster = Cluster::start(
        3,
        &[
            "--set",
            "strom.balancer.enable=true",
            "--set",
            &advertised,
            "--set",
            "broker.session.timeout.ms=60000",
            "--set",
            &queued,
        ],
    );
    let topic = "pressed";
    let first = cluster.node(1).broker.bootstrap();
    let created = poll_until(test_support::cluster::SETTLE_DEADLINE, || {
        let output = test_support::strom_at(
            Some(&first),
            &[
                "topic",
                "create",
                topic,
                "--partitions",
                "1",
                "--replication-factor",
                "1",
            ],
            None,
        );
        output.status.success().then_some(())
    });
    assert!(created.is_some(), "{}", cluster.logs());
    let leader = cluster.wait_for("the partition led", || {
        let (_, partitions) = metadata(&first, topic)?;
        partitions
            .get(&0)
            .map(|&(l, _)| l as i32)
            .filter(|&l| l > 0)
    });
    let forwarder = if leader == 1 { 2 } else { 1 };
    let pid = cluster.node(forwarder).broker.pid();
    let batch = Bytes::from(patterned(
        1_700_000_000_000,
        PRESSED_REQUEST_RECORDS,
        1_000,
        7,
    ));
    let request = ProduceRequest::default()
        .with_acks(1)
        .with_timeout_ms(60_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(topic_name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(batch))])]);
    let mut writers: Vec<Writer> = (0..PRESSED_CONNECTIONS)
        .map(|_| Writer {
            stream: raw::connect(&cluster.node(forwarder).broker),
            frames: vec![raw::frame(ApiKey::Produce, 9, 1, RAW_CLIENT_ID, &request)],
            written: 0,
            at: 0,
        })
        .collect();
    let before = common::hostile::rss_bytes(pid).unwrap();
    cluster.node(leader).broker.signal(libc::SIGSTOP);
    let per_writer = PRESSED_OFFERED_BYTES / PRESSED_CONNECTIONS;
    let mut blocked = 0;
    let mut peak = before;
    for writer in &mut writers {
        if writer.write_until_blocked(per_writer, Duration::from_secs(2)) {
            blocked += 1;
        }
        peak = peak.max(common::hostile::rss_bytes(pid).unwrap());
    }
    // Let the broker take what it will: until its memory stops growing
    // from one look to the next (bounded; the peak counts either way).
    let mut last = 0;
    let _ = poll_until(PRESSED_SETTLE_DEADLINE, || {
        let now = common::hostile::rss_bytes(pid).unwrap();
        peak = peak.max(now);
        let settled = now <= last;
        last = now;
        settled.then_some(())
    });
    let offered: usize = writers
        .iter()
        .map(|w| w.written * w.frames[0].len() + w.at)
        .sum();
    let growth = peak.saturating_sub(before);
    println!(
        "offered {} MiB to broker {forwarder} for broker {leader}, stopped; {blocked} of \
         {PRESSED_CONNECTIONS} connections blocked; memory grew {} MiB",
        offered >> 20,
        growth >> 20
    );
    // Once the budget is taken the broker reads no more: the connections
    // after it are held back (what they wrote waits in socket buffers).
    assert!(
        blocked >= PRESSED_CONNECTIONS / 2 && offered < PRESSED_OFFERED_BYTES,
        "the broker read what was offered instead of holding connections back"
    );
    assert!(
        growth < PRESSED_GROWTH_MAX,
        "memory grew {growth} bytes (bound {PRESSED_GROWTH_MAX})"
    );

    // The leader back: every request written is answered, written or
    // (those that waited past the forwarding timeout) with the retriable
    // NOT_LEADER_OR_FOLLOWER a client retries, as after a direct
    // connection's timeout.
    cluster.node(leader).broker.signal(libc::SIGCONT);
    let (mut answered, mut retriable) = (0usize, 0usize);
    for writer in &mut writers {
        if writer.at > 0 {
            use std::io::Write;
            writer
                .stream
                .set_write_timeout(Some(Duration::from_secs(60)))
                .unwrap();
            let rest = writer.frames[writer.written][writer.at..].to_vec();
            writer.stream.write_all(&rest).unwrap();
            writer.written += 1;
        }
        for _ in 0..writer.written {
            let response: ProduceResponse = raw::read_response(&mut writer.stream, 9, 1);
            let answer = &response.responses[0].partition_responses[0];
            match answer.error_code {
                0 => answered += 1,
                NOT_LEADER_OR_FOLLOWER => retriable += 1,
                _ => panic!("{answer:?}\n{}", cluster.logs()),
            }
        }
    }
    // A leader back from a long stall may take a moment to serve again
    // (its controller session is checked first): asked until it answers.
    let mut last_error = 0;
    let end = poll_until(Duration::from_secs(30), || {
        let response = latest_offsets(&cluster, leader, topic, &[0]);
        let partition = &response.topics[0].partitions[0];
        last_error = partition.error_code;
        (partition.error_code == 0).then_some(partition.offset as usize)
    })
    .unwrap_or_else(|| {
        panic!(
            "the leader answered ListOffsets with error {last_error} for 30 s after it ran again\n{}",
            cluster.logs()
        )
    });
    // Every batch answered as written is in the log; a retriable answer
    // may or may not have reached it (its retry is the client's).
    assert!(
        end.is_multiple_of(PRESSED_REQUEST_RECORDS)
            && (answered..=answered + retriable).contains(&(end / PRESSED_REQUEST_RECORDS)),
        "log end {end}: {answered} written, {retriable} answered NOT_LEADER_OR_FOLLOWER"
    );
    println!(
        "after the leader came back: {answered} forwarded produces written, {retriable} \
         answered NOT_LEADER_OR_FOLLOWER (past the forwarding timeout); log end {end}"
    );
}
