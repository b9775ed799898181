//! A partition leader checks with the transaction coordinator before a
//! producer's first transactional batch opens a transaction on the
//! partition: a batch of a partition never added to the transaction, or
//! the late write of a transaction already committed or aborted, is
//! refused (INVALID_TXN_STATE, or TRANSACTION_ABORTABLE from Produce v11)
//! and appends nothing, so no transaction is left hanging. Requests are
//! sent as a producer sends them, at fixed versions, over the wire; on a
//! three-broker cluster the leader asks a coordinator on another broker
//! (AddPartitionsToTxn v4, verify-only). Offsets committed in a
//! transaction (TxnOffsetCommit) are checked the same way: without
//! AddOffsetsToTxn, or after the transaction ended, INVALID_TXN_STATE,
//! and nothing is left pending.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use protocol::batch::build::{self, NewRecord};
use protocol::client::{ClientConfig, Connection};
use protocol::error_codes as codes;
use protocol::kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use protocol::kafka_protocol::messages::create_topics_request::CreatableTopic;
use protocol::kafka_protocol::messages::describe_producers_request::TopicRequest;
use protocol::kafka_protocol::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsTopic,
};
use protocol::kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use protocol::kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use protocol::kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use protocol::kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use protocol::kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, BrokerId, CreateTopicsRequest,
    DescribeProducersRequest, EndTxnRequest, FindCoordinatorRequest, GroupId,
    InitProducerIdRequest, ListOffsetsRequest, MetadataRequest, OffsetFetchRequest, ProduceRequest,
    ProducerId, TopicName, TransactionalId, TxnOffsetCommitRequest,
};
use protocol::kafka_protocol::protocol::StrBytes;
use test_support::cluster::Cluster;

const TOPIC: &str = "verified";
const TXN_ID: &str = "verified-producer";
const GROUP: &str = "verified-group";
const DEADLINE: Duration = Duration::from_secs(60);

fn name(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_string())
}

async fn connect(address: &str) -> Connection {
    Connection::connect(address, ClientConfig::default())
        .await
        .unwrap_or_else(|e| panic!("connect {address}: {e}"))
}

/// One record's transactional batch of the producer from `sequence`.
fn batch(producer_id: i64, epoch: i16, sequence: i32, value: &str) -> Bytes {
    let mut bytes = build::batch(
        1_700_000_000_000,
        &[NewRecord {
            key: Some(b"k".to_vec()),
            value: Some(value.as_bytes().to_vec()),
            ..NewRecord::default()
        }],
    );
    protocol::batch::set_producer_sequence(&mut bytes, producer_id, epoch, sequence, true);
    Bytes::from(bytes)
}

fn produce_request(partition: i32, records: Bytes) -> ProduceRequest {
    ProduceRequest::default()
        .with_transactional_id(Some(TransactionalId(name(TXN_ID))))
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(name(TOPIC)))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(records))])])
}

/// The error code and base offset of a one-partition produce.
async fn produce(
    connection: &mut Connection,
    partition: i32,
    records: Bytes,
    version: i16,
) -> (i16, i64) {
    let response = connection
        .call(&produce_request(partition, records), version)
        .await
        .expect("produce answered");
    let answer = &response.responses[0].partition_responses[0];
    (answer.error_code, answer.base_offset)
}

/// (high watermark, last stable offset) of the partition.
async fn offsets(connection: &mut Connection, partition: i32) -> (i64, i64) {
    let mut found = [0i64; 2];
    for (isolation, slot) in [(0i8, 0usize), (1, 1)] {
        let request = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_isolation_level(isolation)
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(TopicName(name(TOPIC)))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(partition)
                    .with_timestamp(-1)])]);
        let response = connection.call(&request, 5).await.expect("list offsets");
        let answer = &response.topics[0].partitions[0];
        assert_eq!(answer.error_code, codes::NONE, "list offsets");
        found[slot] = answer.offset;
    }
    (found[0], found[1])
}

/// The first offset of the producer's open transaction on the partition
/// (-1: none), as DescribeProducers shows it.
async fn open_transaction(connection: &mut Connection, partition: i32, producer_id: i64) -> i64 {
    let request = DescribeProducersRequest::default().with_topics(vec![TopicRequest::default()
        .with_name(TopicName(name(TOPIC)))
        .with_partition_indexes(vec![partition])]);
    let response = connection
        .call(&request, 0)
        .await
        .expect("describe producers");
    let answer = &response.topics[0].partitions[0];
    assert_eq!(answer.error_code, codes::NONE, "describe producers");
    answer
        .active_producers
        .iter()
        .find(|p| p.producer_id.0 == producer_id)
        .map_or(-1, |p| p.current_txn_start_offset)
}

async fn add_partition(coordinator: &mut Connection, producer_id: i64, epoch: i16, partition: i32) {
    let request = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(TransactionalId(name(TXN_ID)))
        .with_v3_and_below_producer_id(ProducerId(producer_id))
        .with_v3_and_below_producer_epoch(epoch)
        .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
            .with_name(TopicName(name(TOPIC)))
            .with_partitions(vec![partition])]);
    let deadline = Instant::now() + DEADLINE;
    loop {
        let response = coordinator.call(&request, 3).await.expect("add partitions");
        let code =
            response.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code;
        // The markers of the previous transaction may still be on their way.
        if code == codes::CONCURRENT_TRANSACTIONS && Instant::now() < deadline {
            glommio::timer::sleep(Duration::from_millis(20)).await;
            continue;
        }
        assert_eq!(code, codes::NONE, "add partition");
        return;
    }
}

async fn end_txn(coordinator: &mut Connection, producer_id: i64, epoch: i16, commit: bool) {
    let request = EndTxnRequest::default()
        .with_transactional_id(TransactionalId(name(TXN_ID)))
        .with_producer_id(ProducerId(producer_id))
        .with_producer_epoch(epoch)
        .with_committed(commit);
    let response = coordinator.call(&request, 3).await.expect("end txn");
    assert_eq!(
        response.error_code,
        codes::NONE,
        "end txn (commit: {commit})"
    );
}

/// TxnOffsetCommit of `offset` for partition 0 of the topic: its code.
async fn txn_offset_commit(
    group: &mut Connection,
    producer_id: i64,
    epoch: i16,
    offset: i64,
) -> i16 {
    let request = TxnOffsetCommitRequest::default()
        .with_transactional_id(TransactionalId(name(TXN_ID)))
        .with_group_id(GroupId(name(GROUP)))
        .with_producer_id(ProducerId(producer_id))
        .with_producer_epoch(epoch)
        .with_topics(vec![TxnOffsetCommitRequestTopic::default()
            .with_name(TopicName(name(TOPIC)))
            .with_partitions(vec![TxnOffsetCommitRequestPartition::default()
                .with_partition_index(0)
                .with_committed_offset(offset)])]);
    let response = group.call(&request, 3).await.expect("txn offset commit");
    response.topics[0].partitions[0].error_code
}

/// The group's committed offset of partition 0 as OffsetFetch with
/// `require_stable` answers it: (error code, offset).
async fn stable_offset(group: &mut Connection) -> (i16, i64) {
    let request = OffsetFetchRequest::default()
        .with_group_id(GroupId(name(GROUP)))
        .with_require_stable(true)
        .with_topics(Some(vec![OffsetFetchRequestTopic::default()
            .with_name(TopicName(name(TOPIC)))
            .with_partition_indexes(vec![0])]));
    let response = group.call(&request, 7).await.expect("offset fetch");
    let partition = &response.topics[0].partitions[0];
    (partition.error_code, partition.committed_offset)
}

/// The group's coordinator.
async fn group_coordinator(bootstrap: &str) -> String {
    let mut any = connect(bootstrap.split(',').next().unwrap()).await;
    let deadline = Instant::now() + DEADLINE;
    loop {
        let found = any
            .call(
                &FindCoordinatorRequest::default()
                    .with_key(name(GROUP))
                    .with_key_type(0),
                3,
            )
            .await
            .expect("find coordinator");
        if found.error_code == codes::NONE {
            return format!("{}:{}", found.host, found.port);
        }
        assert!(Instant::now() < deadline, "no group coordinator found");
        glommio::timer::sleep(Duration::from_millis(100)).await;
    }
}

/// The partition's leader and the transactional id's coordinator.
async fn find_roles(bootstrap: &str, partition: i32) -> (String, String) {
    let mut any = connect(bootstrap.split(',').next().unwrap()).await;
    let deadline = Instant::now() + DEADLINE;
    loop {
        let request = MetadataRequest::default().with_topics(Some(vec![
            MetadataRequestTopic::default().with_name(Some(TopicName(name(TOPIC)))),
        ]));
        let metadata = any.call(&request, 9).await.expect("metadata");
        let coordinator = any
            .call(
                &FindCoordinatorRequest::default()
                    .with_key(name(TXN_ID))
                    .with_key_type(1),
                3,
            )
            .await
            .expect("find coordinator");
        let leader = metadata.topics[0]
            .partitions
            .iter()
            .find(|p| p.partition_index == partition)
            .map(|p| p.leader_id.0);
        let address = |id: i32| {
            metadata
                .brokers
                .iter()
                .find(|b| b.node_id.0 == id)
                .map(|b| format!("{}:{}", b.host, b.port))
        };
        if coordinator.error_code == codes::NONE {
            if let (Some(leader), Some(found)) =
                (leader.and_then(address), address(coordinator.node_id.0))
            {
                return (leader, found);
            }
        }
        assert!(Instant::now() < deadline, "no leader or coordinator found");
        glommio::timer::sleep(Duration::from_millis(100)).await;
    }
}

/// The whole scenario; `elsewhere`: pick a partition that a broker other
/// than the coordinator's leads.
async fn scenario(bootstrap: String, partitions: i32, elsewhere: bool) -> String {
    let first = bootstrap.split(',').next().unwrap().to_string();
    let mut admin = connect(&first).await;
    let created = admin
        .call(
            &CreateTopicsRequest::default()
                .with_timeout_ms(30_000)
                .with_topics(vec![CreatableTopic::default()
                    .with_name(TopicName(name(TOPIC)))
                    .with_num_partitions(partitions)
                    .with_replication_factor(1)]),
            5,
        )
        .await
        .expect("create topic");
    assert_eq!(created.topics[0].error_code, codes::NONE, "create topic");
    // Creates `__transaction_state` too (its first FindCoordinator).
    let mut roles = Vec::new();
    for partition in 0..partitions {
        roles.push((partition, find_roles(&bootstrap, partition).await));
    }
    let (partition, (leader, coordinator)) = roles
        .into_iter()
        .find(|(_, (leader, coordinator))| (leader != coordinator) == elsewhere)
        .expect("a partition led where the scenario needs it");
    let mut leader = connect(&leader).await;
    let mut coordinator = connect(&coordinator).await;
    let init = coordinator
        .call(
            &InitProducerIdRequest::default()
                .with_transactional_id(Some(TransactionalId(name(TXN_ID))))
                .with_transaction_timeout_ms(60_000)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
            3,
        )
        .await
        .expect("init producer id");
    assert_eq!(init.error_code, codes::NONE, "init producer id");
    let (pid, epoch) = (init.producer_id.0, init.producer_epoch);

    // A partition never added to the transaction.
    let refused = produce(
        &mut leader,
        partition,
        batch(pid, epoch, 0, "never-added"),
        9,
    )
    .await;
    assert_eq!(refused.0, codes::INVALID_TXN_STATE, "v9, not added");
    let refused = produce(
        &mut leader,
        partition,
        batch(pid, epoch, 0, "never-added"),
        11,
    )
    .await;
    assert_eq!(refused.0, codes::TRANSACTION_ABORTABLE, "v11, not added");
    assert_eq!(offsets(&mut leader, partition).await, (0, 0));
    assert_eq!(open_transaction(&mut leader, partition, pid).await, -1);

    // Offsets committed in the transaction without AddOffsetsToTxn are
    // refused, and leave nothing pending; once added, they are taken.
    let mut group = connect(&group_coordinator(&bootstrap).await).await;
    assert_eq!(
        txn_offset_commit(&mut group, pid, epoch, 7).await,
        codes::INVALID_TXN_STATE,
        "offsets of a group never added"
    );
    assert_eq!(stable_offset(&mut group).await, (codes::NONE, -1));
    let added = coordinator
        .call(
            &AddOffsetsToTxnRequest::default()
                .with_transactional_id(TransactionalId(name(TXN_ID)))
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch)
                .with_group_id(GroupId(name(GROUP))),
            3,
        )
        .await
        .expect("add offsets");
    assert_eq!(added.error_code, codes::NONE, "add offsets");
    assert_eq!(
        txn_offset_commit(&mut group, pid, epoch, 3).await,
        codes::NONE
    );

    // Added: three batches sent back to back all land, in order (the
    // second and third wait for the first one's check).
    add_partition(&mut coordinator, pid, epoch, partition).await;
    let mut pending = Vec::new();
    for sequence in 0..3 {
        let request = produce_request(partition, batch(pid, epoch, sequence, "committed"));
        pending.push(leader.send(&request, 9).await.expect("send produce"));
    }
    for (sequence, pending) in pending.into_iter().enumerate() {
        let response = leader.receive(pending).await.expect("produce answered");
        let answer = &response.responses[0].partition_responses[0];
        assert_eq!(
            (answer.error_code, answer.base_offset),
            (codes::NONE, sequence as i64),
            "pipelined batch {sequence}"
        );
    }
    assert_eq!(open_transaction(&mut leader, partition, pid).await, 0);
    end_txn(&mut coordinator, pid, epoch, true).await;
    // Three records and the commit marker; the offsets committed with it.
    assert_eq!(offsets(&mut leader, partition).await, (4, 4));
    let deadline = Instant::now() + DEADLINE;
    loop {
        let fetched = stable_offset(&mut group).await;
        if fetched == (codes::NONE, 3) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "committed offsets not stable: {fetched:?}"
        );
        glommio::timer::sleep(Duration::from_millis(20)).await;
    }
    // The late offsets of the committed transaction are refused too.
    assert_eq!(
        txn_offset_commit(&mut group, pid, epoch, 9).await,
        codes::INVALID_TXN_STATE,
        "late offsets after commit"
    );
    assert_eq!(stable_offset(&mut group).await, (codes::NONE, 3));

    // The late write of the committed transaction opens none.
    let late = produce(
        &mut leader,
        partition,
        batch(pid, epoch, 3, "late-after-commit"),
        9,
    )
    .await;
    assert_eq!(late.0, codes::INVALID_TXN_STATE, "late write after commit");
    assert_eq!(offsets(&mut leader, partition).await, (4, 4));

    // An aborted transaction's late write neither.
    add_partition(&mut coordinator, pid, epoch, partition).await;
    let appended = produce(&mut leader, partition, batch(pid, epoch, 3, "aborted"), 9).await;
    assert_eq!(
        appended,
        (codes::NONE, 4),
        "write of the second transaction"
    );
    end_txn(&mut coordinator, pid, epoch, false).await;
    assert_eq!(offsets(&mut leader, partition).await, (6, 6));
    let late = produce(
        &mut leader,
        partition,
        batch(pid, epoch, 4, "late-after-abort"),
        11,
    )
    .await;
    assert_eq!(
        late.0,
        codes::TRANSACTION_ABORTABLE,
        "late write after abort"
    );
    assert_eq!(offsets(&mut leader, partition).await, (6, 6));
    assert_eq!(open_transaction(&mut leader, partition, pid).await, -1);
    format!("partition {partition} refused 4 unverified writes and 2 unverified offset commits, appended 4 verified ones")
}

fn run(bootstrap: String, partitions: i32, elsewhere: bool) -> String {
    glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .name("txn-verification")
        .make()
        .expect("an io_uring executor")
        .run(scenario(bootstrap, partitions, elsewhere))
}

#[test]
fn a_write_outside_the_transaction_is_refused_and_appends_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let broker = common::Broker::start_in(&dir.path().join("data"), &dir.path().join("log"), &[]);
    let outcome = run(broker.bootstrap(), 1, false);
    assert!(outcome.contains("refused 4"), "{outcome}");
}

#[test]
fn a_leader_checks_with_a_coordinator_on_another_broker() {
    let cluster = Cluster::start(3, &[]);
    // Six partitions over three brokers: some led away from the
    // coordinator.
    let outcome = run(cluster.bootstrap(), 6, true);
    assert!(outcome.contains("refused 4"), "{outcome}");
}
