//! Kafka APIs answered as a Kafka broker without an authorizer answers
//! them: version negotiation, authorized operations and the admin APIs
//! that describe the broker's own state, through real clients where one
//! sends the request and through raw frames where none does.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use bytes::Buf;
use common::{raw, run_python, Broker};
use protocol::kafka_protocol::messages::describe_topic_partitions_request::{Cursor, TopicRequest};
use protocol::kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use protocol::kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, BrokerId, DescribeClusterRequest,
    DescribeClusterResponse, DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse,
    ListConfigResourcesRequest, ListConfigResourcesResponse, MetadataRequest, MetadataResponse,
    TopicName,
};
use protocol::kafka_protocol::protocol::{Decodable, StrBytes};

const SCRIPT_DEADLINE: Duration = Duration::from_secs(180);

/// Runs one case of `tests/clients/kafka_apis_check.py`; its output.
fn kafka_apis_check(broker: &Broker, case: &str) -> String {
    run_python(
        "kafka_apis_check.py",
        &[&broker.bootstrap(), case],
        SCRIPT_DEADLINE,
    )
}

/// An ApiVersions request frame at `version`, with a flexible (v2) or a
/// plain (v1) request header, as a client probing versions may send it.
fn api_versions_frame(version: i16, correlation_id: i32, flexible_header: bool) -> Vec<u8> {
    let client_id = b"probe";
    let mut payload = Vec::new();
    payload.extend_from_slice(&(ApiKey::ApiVersions as i16).to_be_bytes());
    payload.extend_from_slice(&version.to_be_bytes());
    payload.extend_from_slice(&correlation_id.to_be_bytes());
    payload.extend_from_slice(&(client_id.len() as i16).to_be_bytes());
    payload.extend_from_slice(client_id);
    if flexible_header {
        payload.push(0); // no tagged fields
                         // A v3+ body: client software name and version, no tagged fields.
        payload.extend_from_slice(&[2, b'x', 2, b'1', 0]);
    }
    let mut frame = (payload.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&payload);
    frame
}

#[test]
fn api_versions_at_any_version_it_does_not_serve_gets_the_v0_answer_with_its_own_range() {
    let broker = Broker::start(&[]);
    let mut stream = raw::connect(&broker);
    let probes = [
        (99, true),
        (99, false),
        (i16::MAX, true),
        (-1, false),
        (i16::MIN, false),
    ];
    for (i, &(version, flexible)) in probes.iter().enumerate() {
        let correlation_id = 1000 + i as i32;
        stream
            .write_all(&api_versions_frame(version, correlation_id, flexible))
            .unwrap();
        let mut response = raw::read_frame(&mut stream);
        assert_eq!(
            response.get_i32(),
            correlation_id,
            "v{version}: response header v0, correlation id only"
        );
        let body = ApiVersionsResponse::decode(&mut response, 0).unwrap();
        assert_eq!(body.error_code, 35, "v{version}: UNSUPPORTED_VERSION");
        let listed: Vec<(i16, i16, i16)> = body
            .api_keys
            .iter()
            .map(|k| (k.api_key, k.min_version, k.max_version))
            .collect();
        assert_eq!(
            listed.len(),
            1,
            "v{version}: only its own range: {listed:?}"
        );
        assert_eq!(listed[0].0, ApiKey::ApiVersions as i16);
        assert_eq!(listed[0].1, 0);
        assert!((3..=4).contains(&listed[0].2), "v{version}: {listed:?}");
        assert!(
            response.is_empty(),
            "v{version}: a v0 body and nothing else"
        );
        // The client retries at the version it was told, on the same
        // connection.
        let retried: ApiVersionsResponse = raw::call(
            &mut stream,
            ApiKey::ApiVersions,
            listed[0].2,
            correlation_id,
            "probe",
            &ApiVersionsRequest::default()
                .with_client_software_name(StrBytes::from_static_str("probe"))
                .with_client_software_version(StrBytes::from_static_str("1")),
        );
        assert_eq!(retried.error_code, 0);
        assert!(retried.api_keys.len() > 20, "{:?}", retried.api_keys);
    }
}

#[test]
fn authorized_operations_are_all_a_resource_supports_as_without_an_authorizer() {
    let broker = Broker::start(&[]);
    let out = kafka_apis_check(&broker, "authorized-operations");
    for line in [
        "confluent describe_cluster operations: ok",
        "confluent describe_topics operations: ok",
        "confluent describe_cluster without operations: ok",
        "kafka-python describe_cluster operations: ok",
        "kafka-python describe_topics operations: ok",
    ] {
        assert!(out.contains(line), "{line}\n{out}");
    }
    // Metadata v8-10 carry the cluster's operations as well; the bit
    // fields are Kafka's values (AclOperation codes of the supported
    // operations); not asked for, the schema default.
    let mut stream = raw::connect(&broker);
    for (version, asked, cluster) in [(8, true, 8096), (10, true, 8096), (10, false, i32::MIN)] {
        let response: MetadataResponse = raw::call(
            &mut stream,
            ApiKey::Metadata,
            version,
            7,
            "ops",
            &MetadataRequest::default()
                .with_topics(None)
                .with_include_cluster_authorized_operations(asked)
                .with_include_topic_authorized_operations(asked),
        );
        assert_eq!(
            response.cluster_authorized_operations, cluster,
            "v{version}"
        );
        let topic = &response.topics[0];
        let want = if asked { 3576 } else { i32::MIN };
        assert_eq!(topic.topic_authorized_operations, want, "v{version}");
    }
}

#[test]
fn describe_cluster_answers_as_a_broker_endpoint() {
    let broker = Broker::start(&[]);
    let mut stream = raw::connect(&broker);
    // endpoint type: 1 broker (served), 2 controller (mismatched), 3
    // unknown; v0 cannot name one and means a broker.
    for (version, endpoint_type, error_code) in [(1, 1, 0), (1, 2, 114), (1, 3, 115), (0, 1, 0)] {
        let response: DescribeClusterResponse = raw::call(
            &mut stream,
            ApiKey::DescribeCluster,
            version,
            9,
            "describe-cluster",
            &DescribeClusterRequest::default().with_endpoint_type(endpoint_type),
        );
        assert_eq!(
            response.error_code, error_code,
            "v{version} endpoint type {endpoint_type}: {response:?}"
        );
        if error_code == 0 {
            assert_eq!(response.brokers.len(), 1);
            if version >= 1 {
                assert_eq!(response.endpoint_type, 1);
            }
        }
    }
}

#[test]
fn log_dirs_topic_partitions_config_resources_and_producers_through_kafka_python() {
    let broker = Broker::start(&[]);
    let out = run_python(
        "kafka_apis_check.py",
        &[
            &broker.bootstrap(),
            "admin-apis",
            &broker.data_dir.display().to_string(),
        ],
        SCRIPT_DEADLINE,
    );
    for line in [
        "describe_log_dirs dir: ok",
        "describe_log_dirs sizes: ok",
        "describe_log_dirs filtered: ok",
        "describe_topic_partitions pages: ok",
        "describe_topic_partitions unknown topic: ok",
        "list_config_resources: ok",
        "describe_producers last sequence: ok",
        "describe_producers idle partition: ok",
    ] {
        assert!(out.contains(line), "{line}\n{out}");
    }
    // Advertised at the versions served.
    let mut stream = raw::connect(&broker);
    let versions: ApiVersionsResponse = raw::call(
        &mut stream,
        ApiKey::ApiVersions,
        3,
        1,
        "versions",
        &ApiVersionsRequest::default(),
    );
    for (key, min, max) in [
        (ApiKey::DescribeLogDirs, 1, 4),
        (ApiKey::DescribeProducers, 0, 0),
        (ApiKey::ListConfigResources, 0, 1),
        (ApiKey::DescribeTopicPartitions, 0, 0),
    ] {
        assert!(
            versions
                .api_keys
                .iter()
                .any(|k| k.api_key == key as i16 && (k.min_version, k.max_version) == (min, max)),
            "{key:?} {min}-{max}: {:?}",
            versions.api_keys
        );
    }
}

#[test]
fn describe_topic_partitions_and_list_config_resources_refuse_as_kafka_does() {
    let broker = Broker::start(&[]);
    let mut stream = raw::connect(&broker);
    let topic = |name: &str| TopicName(StrBytes::from_string(name.to_string()));
    // A cursor must name one of the topics asked for.
    let response: DescribeTopicPartitionsResponse = raw::call(
        &mut stream,
        ApiKey::DescribeTopicPartitions,
        0,
        2,
        "dtp",
        &DescribeTopicPartitionsRequest::default()
            .with_topics(vec![TopicRequest::default().with_name(topic("a"))])
            .with_response_partition_limit(10)
            .with_cursor(Some(
                Cursor::default()
                    .with_topic_name(topic("b"))
                    .with_partition_index(0),
            )),
    );
    let codes: Vec<i16> = response.topics.iter().map(|t| t.error_code).collect();
    assert_eq!(codes, vec![42], "INVALID_REQUEST: {response:?}");
    // v1: an unknown resource type is UNSUPPORTED_VERSION; v0 lists client
    // metrics subscriptions, of which there are none.
    let response: ListConfigResourcesResponse = raw::call(
        &mut stream,
        ApiKey::ListConfigResources,
        1,
        3,
        "lcr",
        &ListConfigResourcesRequest::default().with_resource_types(vec![2, 99]),
    );
    assert_eq!(response.error_code, 35, "{response:?}");
    assert!(response.config_resources.is_empty());
    let response: ListConfigResourcesResponse = raw::call(
        &mut stream,
        ApiKey::ListConfigResources,
        0,
        4,
        "lcr",
        &ListConfigResourcesRequest::default(),
    );
    assert_eq!(
        (response.error_code, response.config_resources.len()),
        (0, 0)
    );
}

#[test]
fn every_advertised_version_round_trips_through_kafka_python_which_infers_kafka_4_1() {
    let broker = Broker::start(&[]);
    let out = kafka_apis_check(&broker, "versions");
    // Produce 13 is kafka-python's marker for Kafka 4.1 (ListOffsets 10
    // for 4.0; ListOffsets 11 would make it 4.2).
    assert!(out.contains("inferred broker version: (4, 1)"), "{out}");
    for range in [
        "(0, (0, 13))",
        "(1, (4, 18))",
        "(2, (1, 10))",
        "(3, (0, 13))",
        "(8, (2, 9))",
        "(9, (1, 9))",
        "(10, (0, 6))",
        "(11, (0, 9))",
        "(13, (0, 5))",
        "(15, (0, 6))",
        "(16, (0, 5))",
        "(18, (0, 4))",
        "(21, (0, 2))",
        "(22, (0, 5))",
        "(23, (2, 4))",
        "(60, (0, 2))",
    ] {
        assert!(out.contains(range), "{range}\n{out}");
    }
    for line in [
        "round trip: ok",
        "topic id stable: ok",
        "topic by id: ok",
        "unknown topic id: ok",
        "confluent topic id: ok",
        "earliest local: ok",
        "latest tiered: ok",
        "earliest: ok",
        "latest: ok",
    ] {
        assert!(out.contains(line), "{line}\n{out}");
    }
    assert!(
        out.contains("('metadata.version', {'supported': (7, 25), 'finalized': (25, 25)"),
        "{out}"
    );
    assert!(!out.contains("transaction.version"), "{out}");
}

#[test]
fn features_with_a_zero_minimum_only_from_api_versions_v4() {
    let broker = Broker::start(&[]);
    let mut stream = raw::connect(&broker);
    let names = |response: &ApiVersionsResponse| -> Vec<(String, i16)> {
        response
            .supported_features
            .iter()
            .map(|f| (f.name.to_string(), f.min_version))
            .collect()
    };
    let v3: ApiVersionsResponse = raw::call(
        &mut stream,
        ApiKey::ApiVersions,
        3,
        1,
        "features",
        &ApiVersionsRequest::default(),
    );
    assert_eq!(names(&v3), vec![("metadata.version".to_string(), 7)]);
    let v4: ApiVersionsResponse = raw::call(
        &mut stream,
        ApiKey::ApiVersions,
        4,
        2,
        "features",
        &ApiVersionsRequest::default(),
    );
    let v4_names = names(&v4);
    assert_eq!(v4_names.len(), 5, "{v4_names:?}");
    assert!(v4_names.contains(&("group.version".to_string(), 0)));
    for response in [&v3, &v4] {
        let finalized: Vec<(String, i16)> = response
            .finalized_features
            .iter()
            .map(|f| (f.name.to_string(), f.max_version_level))
            .collect();
        // group.version 1: KIP-848's consumer groups are served.
        assert_eq!(
            finalized,
            vec![
                ("metadata.version".to_string(), 25),
                ("group.version".to_string(), 1),
                ("share.version".to_string(), 1)
            ]
        );
        assert_eq!(response.finalized_features_epoch, 0);
    }
    // Topic ids are asked for from v12 on; earlier versions that use the
    // field are refused, as Kafka refuses them.
    let request = MetadataRequest::default().with_topics(Some(vec![
        MetadataRequestTopic::default().with_topic_id(uuid_of(7)),
    ]));
    let response: MetadataResponse =
        raw::call(&mut stream, ApiKey::Metadata, 11, 3, "ids", &request);
    assert_eq!(response.topics[0].error_code, 42, "{response:?}");
    let response: MetadataResponse =
        raw::call(&mut stream, ApiKey::Metadata, 12, 4, "ids", &request);
    assert_eq!(response.topics[0].error_code, 100, "{response:?}");
    assert_eq!(response.topics[0].name, None);
}

#[test]
fn fetch_from_v13_names_topics_by_id() {
    let broker = Broker::start(&[]);
    let mut stream = raw::connect(&broker);
    // Auto-created by name, then fetched by the id Metadata gives.
    let metadata: MetadataResponse = raw::call(
        &mut stream,
        ApiKey::Metadata,
        12,
        1,
        "ids",
        &MetadataRequest::default()
            .with_topics(Some(vec![MetadataRequestTopic::default()
                .with_name(Some(TopicName(StrBytes::from_static_str("by-id"))))]))
            .with_allow_auto_topic_creation(true),
    );
    let topic_id = metadata.topics[0].topic_id;
    assert!(!topic_id.is_nil(), "{metadata:?}");
    for (id, error_code) in [(topic_id, 0), (uuid_of(7), 100)] {
        let response = fetch_by_id(&mut stream, 2, id);
        let topic = &response.responses[0];
        assert_eq!(topic.topic_id, id);
        assert_eq!(topic.partitions[0].error_code, error_code, "{response:?}");
    }
}

/// A Fetch v13 of partition 0 of the topic with id `id`, from offset 0,
/// answered at once.
fn fetch_by_id(
    stream: &mut TcpStream,
    correlation_id: i32,
    id: uuid::Uuid,
) -> protocol::kafka_protocol::messages::FetchResponse {
    use protocol::kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use protocol::kafka_protocol::messages::FetchRequest;
    raw::call(
        stream,
        ApiKey::Fetch,
        13,
        correlation_id,
        "ids",
        &FetchRequest::default()
            .with_max_wait_ms(0)
            .with_max_bytes(1 << 20)
            .with_topics(vec![FetchTopic::default()
                .with_topic_id(id)
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_partition_max_bytes(1 << 20)])]),
    )
}

fn uuid_of(n: u128) -> uuid::Uuid {
    uuid::Uuid::from_u128(n)
}

#[test]
fn produce_from_v13_names_topics_by_id() {
    use protocol::kafka_protocol::messages::produce_request::{
        PartitionProduceData, TopicProduceData,
    };
    use protocol::kafka_protocol::messages::{ProduceRequest, ProduceResponse};
    let broker = Broker::start(&[]);
    let mut stream = raw::connect(&broker);
    let metadata: MetadataResponse = raw::call(
        &mut stream,
        ApiKey::Metadata,
        12,
        1,
        "ids",
        &MetadataRequest::default()
            .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(
                TopicName(StrBytes::from_static_str("produced-by-id")),
            ))]))
            .with_allow_auto_topic_creation(true),
    );
    let topic_id = metadata.topics[0].topic_id;
    assert!(!topic_id.is_nil(), "{metadata:?}");
    let batch = bytes::Bytes::from(protocol::batch::build::patterned(
        1_700_000_000_000,
        5,
        50,
        7,
    ));
    let topic = |id: uuid::Uuid| {
        TopicProduceData::default()
            .with_topic_id(id)
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(batch.clone()))])
    };
    for (round, base_offset) in [(0, 0), (1, 5)] {
        let response: ProduceResponse = raw::call(
            &mut stream,
            ApiKey::Produce,
            13,
            2 + round,
            "ids",
            &ProduceRequest::default()
                .with_acks(-1)
                .with_timeout_ms(5_000)
                .with_topic_data(vec![
                    topic(topic_id),
                    topic(uuid_of(9)),
                    topic(uuid::Uuid::nil()),
                ]),
        );
        let answers: Vec<(uuid::Uuid, i16, i64)> = response
            .responses
            .iter()
            .map(|t| {
                let p = &t.partition_responses[0];
                (t.topic_id, p.error_code, p.base_offset)
            })
            .collect();
        assert_eq!(
            answers,
            vec![
                (topic_id, 0, base_offset),
                (uuid_of(9), 100, -1),
                (uuid::Uuid::nil(), 100, -1)
            ],
            "UNKNOWN_TOPIC_ID for an id no topic has"
        );
    }
    let fetched = fetch_by_id(&mut stream, 9, topic_id);
    let partition = &fetched.responses[0].partitions[0];
    assert_eq!((partition.error_code, partition.high_watermark), (0, 10));
    assert_eq!(
        partition.records.as_ref().map(|r| r.len()),
        Some(2 * batch.len()),
        "both batches read back"
    );
}

/// The open connections of core `shard`, from the admin listener's metrics.
fn connections_on(admin: &common::admin::Admin, shard: &str) -> Option<u64> {
    let (_, body) = admin.get("/metrics");
    let prefix = format!("strom_connections{{shard=\"{shard}\"}} ");
    body.lines()
        .find_map(|line| line.strip_prefix(&prefix)?.trim().parse::<f64>().ok())
        .map(|n| n as u64)
}

/// CreateTopics answers only once every core's copy of the metadata has the
/// topic: right after the answer, a connection on either core produces to,
/// fetches from and describes both partitions (one per core) without a
/// retry. Auto-creation is off, so a core whose copy lags answers
/// UNKNOWN_TOPIC_OR_PARTITION instead of creating the topic itself.
#[test]
fn a_created_topic_is_served_on_every_core_as_soon_as_create_topics_answers() {
    use protocol::kafka_protocol::messages::create_topics_request::CreatableTopic;
    use protocol::kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use protocol::kafka_protocol::messages::produce_request::{
        PartitionProduceData, TopicProduceData,
    };
    use protocol::kafka_protocol::messages::{
        CreateTopicsRequest, CreateTopicsResponse, FetchRequest, FetchResponse, ProduceRequest,
        ProduceResponse,
    };
    const CONNECTIONS: usize = 16;
    const ROUNDS: usize = 4;
    let (broker, admin) =
        common::admin::Admin::start(&["--set", "auto.create.topics.enable=false"]);
    let mut streams: Vec<_> = (0..CONNECTIONS).map(|_| raw::connect(&broker)).collect();
    // The kernel spreads connections over the cores by their addresses:
    // with 16 of them, both cores hold some but once in 2^15 runs.
    let spread = common::poll_until(Duration::from_secs(10), || {
        let counts = (connections_on(&admin, "0")?, connections_on(&admin, "1")?);
        (counts.0 + counts.1 == CONNECTIONS as u64).then_some(counts)
    });
    let (on_0, on_1) = spread.expect("every connection accepted");
    assert!(on_0 > 0 && on_1 > 0, "connections per core: {on_0}, {on_1}");

    let batch = bytes::Bytes::from(protocol::batch::build::patterned(
        1_700_000_000_000,
        1,
        20,
        3,
    ));
    let mut correlation_id = 0;
    for round in 0..ROUNDS {
        let name = format!("fresh-{round}");
        let topic_name = || TopicName(StrBytes::from_string(name.clone()));
        correlation_id += 1;
        let created: CreateTopicsResponse = raw::call(
            &mut streams[round % CONNECTIONS],
            ApiKey::CreateTopics,
            5,
            correlation_id,
            "creator",
            &CreateTopicsRequest::default()
                .with_timeout_ms(30_000)
                .with_topics(vec![CreatableTopic::default()
                    .with_name(topic_name())
                    .with_num_partitions(2)
                    .with_replication_factor(1)]),
        );
        assert_eq!(created.topics[0].error_code, 0, "{created:?}");
        for (connection, stream) in streams.iter_mut().enumerate() {
            correlation_id += 1;
            let produced: ProduceResponse = raw::call(
                stream,
                ApiKey::Produce,
                9,
                correlation_id,
                "producer",
                &ProduceRequest::default()
                    .with_acks(1)
                    .with_timeout_ms(5_000)
                    .with_topic_data(vec![TopicProduceData::default()
                        .with_name(topic_name())
                        .with_partition_data(
                            (0..2)
                                .map(|index| {
                                    PartitionProduceData::default()
                                        .with_index(index)
                                        .with_records(Some(batch.clone()))
                                })
                                .collect(),
                        )]),
            );
            let answers: Vec<(i16, i64)> = produced.responses[0]
                .partition_responses
                .iter()
                .map(|p| (p.error_code, p.base_offset))
                .collect();
            let offset = connection as i64;
            assert_eq!(
                answers,
                vec![(0, offset), (0, offset)],
                "round {round}, connection {connection}"
            );
            correlation_id += 1;
            let fetched: FetchResponse = raw::call(
                stream,
                ApiKey::Fetch,
                12,
                correlation_id,
                "consumer",
                &FetchRequest::default()
                    .with_max_wait_ms(0)
                    .with_max_bytes(1 << 20)
                    .with_topics(vec![FetchTopic::default()
                        .with_topic(topic_name())
                        .with_partitions(
                            (0..2)
                                .map(|index| {
                                    FetchPartition::default()
                                        .with_partition(index)
                                        .with_fetch_offset(offset)
                                        .with_partition_max_bytes(1 << 20)
                                })
                                .collect(),
                        )]),
            );
            for partition in &fetched.responses[0].partitions {
                assert_eq!(
                    (partition.error_code, partition.high_watermark),
                    (0, offset + 1),
                    "round {round}, connection {connection}"
                );
                assert_eq!(
                    partition.records.as_ref().map(|r| r.len()),
                    Some(batch.len())
                );
            }
            correlation_id += 1;
            let described: MetadataResponse = raw::call(
                stream,
                ApiKey::Metadata,
                12,
                correlation_id,
                "describer",
                &MetadataRequest::default()
                    .with_topics(Some(vec![
                        MetadataRequestTopic::default().with_name(Some(topic_name()))
                    ]))
                    .with_allow_auto_topic_creation(false),
            );
            let topic = &described.topics[0];
            assert_eq!(
                (topic.error_code, topic.partitions.len()),
                (0, 2),
                "{described:?}"
            );
        }
    }
}

/// Metadata at every version and DescribeTopicPartitions report each
/// partition's leader, leader epoch, replicas and ISR from the metadata
/// image — here of a data dir whose metadata log was written before those
/// were recorded (`tests/fixtures/metadata-before-partition-state.log`:
/// topics `manual`, 2 partitions, and `orders`, 5): it opens, and every
/// partition is led by this node at epoch 0.
#[test]
fn metadata_reports_leader_epoch_replicas_and_isr_of_an_older_data_dir() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    std::fs::create_dir_all(data_dir.join("__metadata")).unwrap();
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/metadata-before-partition-state.log"
        ),
        data_dir.join("__metadata").join("metadata.log"),
    )
    .unwrap();
    let broker = Broker::start_in(&data_dir, &temp.path().join("strom.log"), &[]);
    let mut stream = raw::connect(&broker);
    let expected = vec![
        ("manual".to_string(), vec![(0, 0, 0, vec![0], vec![0]); 2]),
        ("orders".to_string(), vec![(0, 0, 0, vec![0], vec![0]); 5]),
    ];
    type Seen = Vec<(String, Vec<(i32, i32, i32, Vec<i32>, Vec<i32>)>)>;
    for version in 0..=13 {
        let response: MetadataResponse = raw::call(
            &mut stream,
            ApiKey::Metadata,
            version,
            version.into(),
            "metadata",
            &MetadataRequest::default().with_topics(if version == 0 {
                Some(Vec::new())
            } else {
                None
            }),
        );
        let mut seen: Seen = response
            .topics
            .iter()
            .map(|t| {
                let partitions = t
                    .partitions
                    .iter()
                    .enumerate()
                    .map(|(i, p)| {
                        assert_eq!(p.partition_index, i as i32);
                        assert!(p.offline_replicas.is_empty(), "{p:?}");
                        // The field exists from v7 on.
                        let epoch = if version >= 7 { p.leader_epoch } else { 0 };
                        let ids = |ids: &[BrokerId]| ids.iter().map(|id| id.0).collect::<Vec<_>>();
                        (
                            p.error_code.into(),
                            p.leader_id.0,
                            epoch,
                            ids(&p.replica_nodes),
                            ids(&p.isr_nodes),
                        )
                    })
                    .collect();
                (
                    t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default(),
                    partitions,
                )
            })
            .collect();
        seen.sort();
        assert_eq!(seen, expected, "Metadata v{version}");
    }
    let response: DescribeTopicPartitionsResponse = raw::call(
        &mut stream,
        ApiKey::DescribeTopicPartitions,
        0,
        20,
        "dtp",
        &DescribeTopicPartitionsRequest::default().with_response_partition_limit(100),
    );
    let seen: Seen = response
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    assert!(p.offline_replicas.is_empty(), "{p:?}");
                    let ids = |ids: &[BrokerId]| ids.iter().map(|id| id.0).collect::<Vec<_>>();
                    (
                        p.error_code.into(),
                        p.leader_id.0,
                        p.leader_epoch,
                        ids(&p.replica_nodes),
                        ids(&p.isr_nodes),
                    )
                })
                .collect();
            (
                t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default(),
                partitions,
            )
        })
        .collect();
    assert_eq!(seen, expected, "DescribeTopicPartitions");
}
