//! KIP-848 consumer-protocol groups against real `strom` processes:
//! confluent-kafka members with `group.protocol=consumer`, each a process
//! of its own (tests/clients/consumer_protocol_check.py), and raw
//! ConsumerGroupHeartbeat requests for Kafka's error codes on bad input.

mod common;

use std::time::Duration;

use common::{run_python, strom_ok, Broker};
use protocol::kafka_protocol::messages::{
    ApiKey, ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, GroupId, ListGroupsRequest,
    ListGroupsResponse, TopicName,
};
use protocol::kafka_protocol::protocol::StrBytes;

const SCRIPT_DEADLINE: Duration = Duration::from_secs(300);

/// Sessions of 6 s and heartbeats every 500 ms: a killed member's
/// partitions come back within seconds.
const BROKER_ARGS: &[&str] = &[
    "--set",
    "group.consumer.session.timeout.ms=6000",
    "--set",
    "group.consumer.min.session.timeout.ms=6000",
    "--set",
    "group.consumer.heartbeat.interval.ms=500",
    "--set",
    "group.consumer.min.heartbeat.interval.ms=500",
    "--set",
    "strom.preallocate.bytes=1048576",
];

fn check(broker: &Broker, mode: &str, name: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("members.log");
    let out = run_python(
        "consumer_protocol_check.py",
        &[mode, &broker.bootstrap(), name, log.to_str().unwrap()],
        SCRIPT_DEADLINE,
    );
    assert!(out.contains(&format!("{mode}: ok")), "{out}");
    out
}

#[test]
fn members_join_leave_die_and_join_late_and_each_record_is_consumed_once() {
    let broker = Broker::start(BROKER_ARGS);
    let out = check(&broker, "membership", "kip848-topic");
    println!("{out}");
    // The group is listed as a consumer-protocol group, and described
    // with its epochs once its members have left.
    let described = strom_ok(&broker, &["group", "describe", "kip848-members"]);
    assert!(described.contains("consumer"), "{described}");
}

#[test]
fn a_static_member_restarted_within_its_session_keeps_its_partitions() {
    let broker = Broker::start(BROKER_ARGS);
    check(&broker, "static", "kip848-static");
}

#[test]
fn a_regex_subscription_picks_up_a_topic_created_later() {
    let broker = Broker::start(BROKER_ARGS);
    check(&broker, "regex", "kip848-rx");
}

fn text(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_string())
}

fn heartbeat(
    broker: &Broker,
    request: ConsumerGroupHeartbeatRequest,
) -> ConsumerGroupHeartbeatResponse {
    let mut stream = common::raw::connect(broker);
    common::raw::call(
        &mut stream,
        ApiKey::ConsumerGroupHeartbeat,
        1,
        1,
        "kip848-test",
        &request,
    )
}

fn join(group: &str, member: &str) -> ConsumerGroupHeartbeatRequest {
    ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(text(group)))
        .with_member_id(text(member))
        .with_member_epoch(0)
        .with_rebalance_timeout_ms(30_000)
        .with_subscribed_topic_names(Some(vec![TopicName(text("raw-topic"))]))
        .with_topic_partitions(Some(Vec::new()))
}

#[test]
fn bad_heartbeats_get_kafkas_error_codes_and_the_broker_keeps_serving() {
    let (broker, admin) = common::admin::Admin::start(BROKER_ARGS);
    strom_ok(
        &broker,
        &["topic", "create", "raw-topic", "--partitions", "4"],
    );
    let codes = |request| heartbeat(&broker, request).error_code;
    // INVALID_REQUEST: no member id; a join without a subscription.
    assert_eq!(codes(join("raw", "")), 42);
    assert_eq!(
        codes(join("raw", "m1").with_subscribed_topic_names(None)),
        42
    );
    // UNSUPPORTED_ASSIGNOR, INVALID_REGULAR_EXPRESSION.
    assert_eq!(
        codes(join("raw", "m1").with_server_assignor(Some(text("sticky")))),
        112
    );
    assert_eq!(
        codes(join("raw", "m1").with_subscribed_topic_regex(Some(text("(")))),
        128
    );
    // UNKNOWN_MEMBER_ID for a member that never joined.
    assert_eq!(codes(join("raw", "ghost").with_member_epoch(3)), 25);
    // The group's own heartbeat interval (a group config) is the one
    // its members are told.
    assert_eq!(
        common::raw::alter_group_config(&broker, "raw", "consumer.heartbeat.interval.ms", "7000"),
        0
    );
    // A member joins and gets the four partitions at epoch 1.
    let joined = heartbeat(&broker, join("raw", "m1"));
    assert_eq!(joined.error_code, 0, "{joined:?}");
    assert_eq!(joined.member_epoch, 1);
    assert_eq!(joined.heartbeat_interval_ms, 7000);
    let assignment = joined.assignment.expect("an assignment");
    assert_eq!(assignment.topic_partitions.len(), 1);
    assert_eq!(assignment.topic_partitions[0].partitions.len(), 4);
    // FENCED_MEMBER_EPOCH for an epoch ahead of the member's.
    assert_eq!(
        codes(
            ConsumerGroupHeartbeatRequest::default()
                .with_group_id(GroupId(text("raw")))
                .with_member_id(text("m1"))
                .with_member_epoch(9)
                .with_rebalance_timeout_ms(-1)
        ),
        110
    );
    // Described with its epochs, its member and its assignment.
    let mut stream = common::raw::connect(&broker);
    let described: ConsumerGroupDescribeResponse = common::raw::call(
        &mut stream,
        ApiKey::ConsumerGroupDescribe,
        0,
        2,
        "kip848-test",
        &ConsumerGroupDescribeRequest::default()
            .with_group_ids(vec![GroupId(text("raw")), GroupId(text("nope"))]),
    );
    let group = &described.groups[0];
    assert_eq!(
        (
            group.error_code,
            group.group_state.as_str(),
            group.group_epoch
        ),
        (0, "Stable", 1),
        "{group:?}"
    );
    assert_eq!(group.members.len(), 1);
    assert_eq!(
        group.members[0].assignment.topic_partitions[0]
            .partitions
            .len(),
        4
    );
    assert_eq!(described.groups[1].error_code, 69, "GROUP_ID_NOT_FOUND");
    // DescribeGroups describes it as Kafka does: type `consumer`, the
    // assignor, the epoch, the member's assignment in the consumer
    // protocol's encoding.
    let classic_view: protocol::kafka_protocol::messages::DescribeGroupsResponse =
        common::raw::call(
            &mut stream,
            ApiKey::DescribeGroups,
            5,
            5,
            "kip848-test",
            &protocol::kafka_protocol::messages::DescribeGroupsRequest::default()
                .with_groups(vec![GroupId(text("raw"))]),
        );
    let group = &classic_view.groups[0];
    assert_eq!(
        (
            group.error_code,
            group.group_state.as_str(),
            group.protocol_type.as_str(),
            group.protocol_data.as_str()
        ),
        (0, "Stable", "consumer", "uniform"),
        "{group:?}"
    );
    let assigned =
        protocol::consumer_protocol::assignment_partitions(&group.members[0].member_assignment)
            .expect("an assignment");
    assert_eq!(assigned["raw-topic"], vec![0, 1, 2, 3]);
    // ListGroups v5 with a type filter.
    let listed: ListGroupsResponse = common::raw::call(
        &mut stream,
        ApiKey::ListGroups,
        5,
        3,
        "kip848-test",
        &ListGroupsRequest::default().with_types_filter(vec![text("consumer")]),
    );
    assert_eq!(listed.groups.len(), 1, "{listed:?}");
    assert_eq!(listed.groups[0].group_type.as_str(), "consumer");
    let classic: ListGroupsResponse = common::raw::call(
        &mut stream,
        ApiKey::ListGroups,
        5,
        4,
        "kip848-test",
        &ListGroupsRequest::default().with_types_filter(vec![text("classic")]),
    );
    assert!(classic.groups.is_empty(), "{classic:?}");
    // The coordinator's figures for the group.
    let (status, metrics) = admin.get("/metrics");
    assert_eq!(status, 200);
    for line in [
        "strom_consumer_group_epoch{group=\"raw\"} 1",
        "strom_consumer_group_members{group=\"raw\"} 1",
        "strom_consumer_group_reconciling_members{group=\"raw\"} 0",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
    // It leaves: epoch -1 answered.
    let left = heartbeat(
        &broker,
        ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(text("raw")))
            .with_member_id(text("m1"))
            .with_member_epoch(-1)
            .with_rebalance_timeout_ms(-1),
    );
    assert_eq!((left.error_code, left.member_epoch), (0, -1));
}

/// One round: a group of three members on a new topic, a fourth joining,
/// the group's coordinator killed while it reconciles; the members'
/// script checks the rest. The killed node, started again.
fn coordinator_killed_round(cluster: &mut test_support::cluster::Cluster, round: u64) -> String {
    let topic = format!("kip848-replicated-{round}");
    let group = format!("kip848-failover-{round}");
    strom_ok(
        &cluster.node(1).broker,
        &[
            "topic",
            "create",
            &topic,
            "--partitions",
            "6",
            "--replication-factor",
            "3",
            "--config",
            "min.insync.replicas=2",
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("members.log");
    let signals = dir.path().to_path_buf();
    let mut members = common::Script::start(
        "consumer_protocol_check.py",
        &[
            "failover",
            &cluster.bootstrap(),
            &topic,
            log.to_str().unwrap(),
            signals.to_str().unwrap(),
            &group,
        ],
    );
    // The members' script says when the fourth member joined.
    let rebalancing = signals.join("rebalancing");
    members.wait_for(SCRIPT_DEADLINE, || rebalancing.exists().then_some(()));
    let any = (1..=3)
        .find(|&n| cluster.node(n).broker.is_running())
        .unwrap();
    let victim = cluster.wait_for("the group's coordinator", || {
        common::raw::find_coordinator(&cluster.node(any).broker, &group, 0)
    });
    cluster.node_mut(victim).broker.kill();
    std::fs::write(signals.join("killed"), victim.to_string()).unwrap();
    let (ok, stdout, stderr) = members.finish(SCRIPT_DEADLINE);
    assert!(
        ok && stdout.contains("failover: ok"),
        "round {round}: {stdout}\n{stderr}\n{}",
        cluster.logs()
    );
    let survivor = (1..=3).find(|&n| n != victim).unwrap();
    let after = cluster.wait_for("a new coordinator", || {
        common::raw::find_coordinator(&cluster.node(survivor).broker, &group, 0)
    });
    assert_ne!(after, victim);
    // Back before the next round kills again: listed by a survivor.
    common::restart_killed(cluster, victim);
    format!(
        "round {}: killed node {victim} ({})",
        round + 1,
        stdout.trim()
    )
}

/// The group's coordinator killed (SIGKILL) in a three-node cluster while
/// the group reconciles a member's join, round after round
/// (`STROM_SOAK_ROUNDS`; `scripts/soak` runs many): the members carry on
/// with the new coordinator, every record consumed, none twice, no
/// partition owned by two members at once.
#[test]
fn the_coordinator_killed_while_the_group_reconciles_loses_no_assignment_in_a_cluster() {
    let started = std::time::Instant::now();
    let budget = common::SoakBudget::from_env(2);
    let mut cluster = test_support::cluster::Cluster::start(3, BROKER_ARGS);
    let mut round = 0;
    while budget.more(round) {
        println!("{}", coordinator_killed_round(&mut cluster, round));
        round += 1;
    }
    assert!(round > 0, "no round ran");
    println!(
        "soak consumer_group_coordinator_killed: {round} rounds, {:.0} s",
        started.elapsed().as_secs_f64()
    );
}

/// A classic group turned consumer-protocol online by a member of the
/// new protocol joining it, its classic members staying, and classic
/// again once that member leaves (`group.consumer.migration.policy`,
/// bidirectional by default).
#[test]
fn a_classic_group_migrates_online_to_the_consumer_protocol_and_back() {
    let broker = Broker::start(BROKER_ARGS);
    check(&broker, "migration", "kip848-migration");
}
