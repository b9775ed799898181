//! Consumer groups against a real strom process: confluent-kafka,
//! kafka-python and kcat group consumers (scripts in
//! `tests/clients/groups_check.py`), and raw requests for Kafka's error
//! codes on bad input.

mod common;

use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use bytes::Bytes;
use common::{poll_until, run, run_python, strom, strom_ok, Broker};
use protocol::kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use protocol::kafka_protocol::messages::leave_group_request::MemberIdentity;
use protocol::kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use protocol::kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use protocol::kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup;
use protocol::kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use protocol::kafka_protocol::messages::{
    ApiKey, DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest,
    DescribeGroupsResponse, FindCoordinatorRequest, FindCoordinatorResponse, GroupId,
    HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest,
    LeaveGroupResponse, ListGroupsRequest, ListGroupsResponse, MetadataRequest, MetadataResponse,
    OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse,
    SyncGroupRequest, SyncGroupResponse, TopicName,
};
use protocol::kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};

const SCRIPT_DEADLINE: Duration = Duration::from_secs(180);
/// A parked JoinGroup may wait out a 10 s rebalance timeout; the bound
/// leaves room for a loaded 2-core machine (a run once took 26 s at 20).
const IO_TIMEOUT: Duration = Duration::from_secs(45);

/// Short rebalances: no initial delay; tests use 6 s sessions. Small
/// preallocation: these tests write little and share the disk.
const BROKER_ARGS: &[&str] = &[
    "--set",
    "group.initial.rebalance.delay.ms=0",
    "--set",
    "strom.preallocate.bytes=1048576",
];

fn groups(broker: &Broker, args: &[&str]) -> String {
    let mut all = vec![broker.bootstrap()];
    all.extend(args.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    run_python("groups_check.py", &refs, SCRIPT_DEADLINE)
}

#[test]
fn confluent_three_members_split_six_partitions_and_consume_every_message_once() {
    let broker = Broker::start(BROKER_ARGS);
    let out = groups(&broker, &["balance"]);
    assert!(out.contains("balance: ok"), "{out}");
}

#[test]
fn confluent_cooperative_sticky_assignor() {
    let broker = Broker::start(BROKER_ARGS);
    let out = groups(&broker, &["cooperative"]);
    assert!(out.contains("cooperative: ok"), "{out}");
}

#[test]
fn confluent_member_killed_without_leaving_loses_its_partitions_after_the_session_timeout() {
    let broker = Broker::start(BROKER_ARGS);
    let out = groups(&broker, &["kill"]);
    assert!(out.contains("kill: ok"), "{out}");
}

#[test]
fn confluent_static_member_restarted_within_the_session_timeout_causes_no_rebalance() {
    let broker = Broker::start(BROKER_ARGS);
    let out = groups(&broker, &["static"]);
    assert!(out.contains("static: ok"), "{out}");
}

#[test]
fn committed_offsets_survive_a_broker_restart() {
    let mut broker = Broker::start(BROKER_ARGS);
    let out = groups(&broker, &["restart-write"]);
    assert!(out.contains("restart-write: ok"), "{out}");
    broker.restart();
    let out = groups(&broker, &["restart-read"]);
    assert!(out.contains("restart-read: ok"), "{out}");
    assert!(
        broker.log().contains("loaded __consumer_offsets partition"),
        "{}",
        broker.log()
    );
}

#[test]
fn kafka_python_group_consumers_split_partitions_and_commit() {
    let broker = Broker::start(BROKER_ARGS);
    let out = groups(&broker, &["kafka-python"]);
    assert!(out.contains("kafka-python: ok"), "{out}");
}

#[test]
fn kcat_balanced_consumer_reads_everything_and_commits() {
    let broker = Broker::start(BROKER_ARGS);
    groups(&broker, &["produce", "kcat-topic", "4", "25"]);
    let output = run(
        Command::new("kcat")
            .args(["-b", &broker.bootstrap(), "-G", "kcat-group"])
            .args(["-X", "auto.offset.reset=earliest", "-c", "100"])
            .args(["-f", "%p %o %k %s\n", "kcat-topic"]),
        None,
        SCRIPT_DEADLINE,
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "kcat: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut seen = std::collections::BTreeSet::new();
    for line in stdout.lines() {
        let fields: Vec<&str> = line.splitn(4, ' ').collect();
        let (partition, offset): (i32, i64) =
            (fields[0].parse().unwrap(), fields[1].parse().unwrap());
        assert_eq!(fields[2], format!("{partition}-{offset}"), "{line}");
        // groups_check.py's value_of(partition, index).
        let value = format!("value-{partition}-{offset}-").repeat(1 + offset as usize % 7);
        assert_eq!(fields[3], value, "{line}");
        assert!(seen.insert((partition, offset)), "{line} twice");
    }
    assert_eq!(seen.len(), 100, "{stdout}");
    // kcat commits what it consumed when it closes.
    groups(
        &broker,
        &["committed", "kcat-group", "kcat-topic", "4", "25"],
    );
}

struct Connection {
    stream: TcpStream,
    correlation_id: i32,
}

impl Connection {
    fn open(broker: &Broker) -> Self {
        let stream = TcpStream::connect(broker.address()).unwrap();
        stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        stream.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
        Self {
            stream,
            correlation_id: 0,
        }
    }

    fn call<Req: Encodable, Resp: Decodable + HeaderVersion>(
        &mut self,
        api_key: ApiKey,
        version: i16,
        body: &Req,
    ) -> Resp {
        self.correlation_id += 1;
        common::raw::call(
            &mut self.stream,
            api_key,
            version,
            self.correlation_id,
            "groups-test",
            body,
        )
    }
}

fn text(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_string())
}

fn join_request(group: &str, member_id: &str, metadata: Bytes) -> JoinGroupRequest {
    JoinGroupRequest::default()
        .with_group_id(GroupId(text(group)))
        .with_session_timeout_ms(6_000)
        .with_rebalance_timeout_ms(10_000)
        .with_member_id(text(member_id))
        .with_protocol_type(text("consumer"))
        .with_protocols(vec![JoinGroupRequestProtocol::default()
            .with_name(text("range"))
            .with_metadata(metadata)])
}

fn join(conn: &mut Connection, group: &str, member_id: &str) -> JoinGroupResponse {
    conn.call(
        ApiKey::JoinGroup,
        7,
        &join_request(group, member_id, Bytes::from_static(b"meta")),
    )
}

fn heartbeat(conn: &mut Connection, group: &str, generation: i32, member: &str) -> i16 {
    let response: HeartbeatResponse = conn.call(
        ApiKey::Heartbeat,
        4,
        &HeartbeatRequest::default()
            .with_group_id(GroupId(text(group)))
            .with_generation_id(generation)
            .with_member_id(text(member)),
    );
    response.error_code
}

fn sync(
    conn: &mut Connection,
    generation: i32,
    member: &str,
    assignment: Bytes,
) -> SyncGroupResponse {
    conn.call(
        ApiKey::SyncGroup,
        5,
        &SyncGroupRequest::default()
            .with_group_id(GroupId(text("bad")))
            .with_generation_id(generation)
            .with_member_id(text(member))
            .with_protocol_type(Some(text("consumer")))
            .with_protocol_name(Some(text("range")))
            .with_assignments(vec![SyncGroupRequestAssignment::default()
                .with_member_id(text(member))
                .with_assignment(assignment)]),
    )
}

fn commit(
    conn: &mut Connection,
    generation: i32,
    member: &str,
    topic: &str,
    metadata: &str,
) -> i16 {
    let response: OffsetCommitResponse = conn.call(
        ApiKey::OffsetCommit,
        8,
        &OffsetCommitRequest::default()
            .with_group_id(GroupId(text("bad")))
            .with_generation_id_or_member_epoch(generation)
            .with_member_id(text(member))
            .with_topics(vec![OffsetCommitRequestTopic::default()
                .with_name(TopicName(text(topic)))
                .with_partitions(vec![OffsetCommitRequestPartition::default()
                    .with_partition_index(0)
                    .with_committed_offset(7)
                    .with_committed_leader_epoch(-1)
                    .with_committed_metadata(Some(text(metadata)))])]),
    );
    response.topics[0].partitions[0].error_code
}

#[test]
fn bad_group_input_gets_kafkas_error_codes_and_limits_hold() {
    let broker = Broker::start(&[
        "--set",
        "group.initial.rebalance.delay.ms=0",
        "--set",
        "group.max.size=3",
        "--set",
        "strom.preallocate.bytes=1048576",
    ]);
    let mut conn = Connection::open(&broker);

    // Batched FindCoordinator names this node for every key.
    let found: FindCoordinatorResponse = conn.call(
        ApiKey::FindCoordinator,
        4,
        &FindCoordinatorRequest::default().with_coordinator_keys(vec![text("a"), text("bad")]),
    );
    assert_eq!(found.coordinators.len(), 2);
    for c in &found.coordinators {
        assert_eq!(
            (c.error_code, c.node_id.0, c.port),
            (0, 0, broker.port as i32),
            "{c:?}"
        );
    }
    let refused: FindCoordinatorResponse = conn.call(
        ApiKey::FindCoordinator,
        3,
        &FindCoordinatorRequest::default()
            .with_key(text("a"))
            .with_key_type(7),
    );
    assert_eq!(
        refused.error_code, 42,
        "INVALID_REQUEST for an unknown key type"
    );

    // A topic to commit to.
    let _: MetadataResponse = conn.call(
        ApiKey::Metadata,
        9,
        &MetadataRequest::default()
            .with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(TopicName(text("commits"))))
            ]))
            .with_allow_auto_topic_creation(true),
    );

    assert_eq!(join(&mut conn, "", "").error_code, 24, "INVALID_GROUP_ID");
    let first = join(&mut conn, "bad", "");
    assert_eq!(first.error_code, 79, "MEMBER_ID_REQUIRED");
    let member = first.member_id.to_string();
    assert!(member.starts_with("groups-test-"), "{member}");
    let joined = join(&mut conn, "bad", &member);
    assert_eq!((joined.error_code, joined.generation_id), (0, 1));
    assert_eq!(joined.leader.to_string(), member);
    assert_eq!(
        joined.protocol_name.as_ref().map(|p| p.to_string()),
        Some("range".into())
    );
    assert_eq!(joined.members.len(), 1);
    assert_eq!(
        join(&mut conn, "bad", "ghost").error_code,
        25,
        "UNKNOWN_MEMBER_ID"
    );

    let assignment = Bytes::from_static(b"\x00\x01assignment");
    assert_eq!(
        sync(&mut conn, 9, &member, assignment.clone()).error_code,
        22,
        "ILLEGAL_GENERATION"
    );
    assert_eq!(
        sync(&mut conn, 1, "ghost", assignment.clone()).error_code,
        25
    );
    let synced = sync(&mut conn, 1, &member, assignment.clone());
    assert_eq!((synced.error_code, synced.assignment), (0, assignment));

    assert_eq!(heartbeat(&mut conn, "bad", 1, "ghost"), 25);
    assert_eq!(heartbeat(&mut conn, "bad", 2, &member), 22);
    assert_eq!(heartbeat(&mut conn, "bad", 1, &member), 0);
    assert_eq!(heartbeat(&mut conn, "", 1, &member), 24);

    assert_eq!(commit(&mut conn, 1, "ghost", "commits", ""), 25);
    assert_eq!(commit(&mut conn, 0, &member, "commits", ""), 22);
    assert_eq!(commit(&mut conn, 1, &member, "no-such-topic", ""), 3);
    assert_eq!(
        commit(&mut conn, 1, &member, "commits", &"m".repeat(4097)),
        12,
        "OFFSET_METADATA_TOO_LARGE"
    );
    assert_eq!(commit(&mut conn, 1, &member, "commits", "kept"), 0);
    let fetched: OffsetFetchResponse = conn.call(
        ApiKey::OffsetFetch,
        8,
        &OffsetFetchRequest::default().with_groups(vec![
            OffsetFetchRequestGroup::default()
                .with_group_id(GroupId(text("bad")))
                .with_topics(None),
            OffsetFetchRequestGroup::default()
                .with_group_id(GroupId(text("never")))
                .with_topics(None),
        ]),
    );
    let bad = &fetched.groups[0];
    assert_eq!(bad.topics.len(), 1);
    let p = &bad.topics[0].partitions[0];
    assert_eq!(
        (
            p.committed_offset,
            p.metadata.as_ref().map(|m| m.to_string())
        ),
        (7, Some("kept".into()))
    );
    assert!(fetched.groups[1].topics.is_empty());

    // Oversized member metadata is refused before anything is kept.
    let oversized = Bytes::from(vec![7u8; (1 << 20) + 1]);
    let response: JoinGroupResponse =
        conn.call(ApiKey::JoinGroup, 7, &join_request("big", "", oversized));
    assert_eq!(response.error_code, 42, "INVALID_REQUEST");

    // group.max.size bounds a flood of new members (pending ids count).
    let mut codes = Vec::new();
    for _ in 0..200 {
        codes.push(join(&mut conn, "flood", "").error_code);
    }
    assert!(codes[..3].iter().all(|&c| c == 79), "{codes:?}");
    assert!(
        codes[3..].iter().all(|&c| c == 81),
        "GROUP_MAX_SIZE_REACHED: {codes:?}"
    );

    let deleted: DeleteGroupsResponse = conn.call(
        ApiKey::DeleteGroups,
        2,
        &DeleteGroupsRequest::default()
            .with_groups_names(vec![GroupId(text("bad")), GroupId(text("nope"))]),
    );
    let codes: Vec<i16> = deleted.results.iter().map(|r| r.error_code).collect();
    assert_eq!(codes, vec![68, 69], "NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND");

    let described: DescribeGroupsResponse = conn.call(
        ApiKey::DescribeGroups,
        5,
        &DescribeGroupsRequest::default()
            .with_groups(vec![GroupId(text("bad")), GroupId(text("nope"))]),
    );
    assert_eq!(described.groups[0].group_state.to_string(), "Stable");
    assert_eq!(described.groups[0].members.len(), 1);
    assert_eq!(
        described.groups[0].members[0].client_id.to_string(),
        "groups-test"
    );
    assert_eq!(described.groups[1].group_state.to_string(), "Dead");

    let listed: ListGroupsResponse =
        conn.call(ApiKey::ListGroups, 4, &ListGroupsRequest::default());
    let mut names: Vec<String> = listed
        .groups
        .iter()
        .map(|g| g.group_id.0.to_string())
        .collect();
    names.sort();
    assert_eq!(names, vec!["bad", "flood"]);

    let left: LeaveGroupResponse = conn.call(
        ApiKey::LeaveGroup,
        4,
        &LeaveGroupRequest::default()
            .with_group_id(GroupId(text("bad")))
            .with_members(vec![
                MemberIdentity::default().with_member_id(text(&member)),
                MemberIdentity::default().with_member_id(text("ghost")),
            ]),
    );
    let codes: Vec<i16> = left.members.iter().map(|m| m.error_code).collect();
    assert_eq!((left.error_code, codes), (0, vec![0, 25]));
    let deleted: DeleteGroupsResponse = conn.call(
        ApiKey::DeleteGroups,
        2,
        &DeleteGroupsRequest::default().with_groups_names(vec![GroupId(text("bad"))]),
    );
    assert_eq!(deleted.results[0].error_code, 0);
    let fetched: OffsetFetchResponse = conn.call(
        ApiKey::OffsetFetch,
        7,
        &OffsetFetchRequest::default()
            .with_group_id(GroupId(text("bad")))
            .with_topics(None),
    );
    assert!(
        fetched.topics.is_empty(),
        "offsets deleted with the group: {fetched:?}"
    );
}

/// Kafka 4's additions to the group APIs, as a Kafka 4 broker answers
/// them.
#[test]
fn kafka_4_group_api_versions_answer_as_kafka_4_does() {
    let broker = Broker::start(BROKER_ARGS);
    let mut conn = Connection::open(&broker);

    // FindCoordinator v6: consumer groups name this node; share
    // partitions (key type 2, `group:topicId:partition`) their share
    // coordinator, a key of another form INVALID_REQUEST.
    for (key_type, keys, want) in [
        (0i8, ["v4", "v4:topic:0"], [0i16, 0]),
        (2, ["v4", "v4:AAAAAAAAAAAAAAAAAAAAAA:0"], [42, 0]),
    ] {
        let found: FindCoordinatorResponse = conn.call(
            ApiKey::FindCoordinator,
            6,
            &FindCoordinatorRequest::default()
                .with_key_type(key_type)
                .with_coordinator_keys(keys.iter().map(|k| text(k)).collect()),
        );
        let codes: Vec<i16> = found.coordinators.iter().map(|c| c.error_code).collect();
        assert_eq!(codes, want, "key type {key_type}: {found:?}");
    }
    let _: MetadataResponse = conn.call(
        ApiKey::Metadata,
        9,
        &MetadataRequest::default()
            .with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(TopicName(text("v4-commits"))))
            ]))
            .with_allow_auto_topic_creation(true),
    );

    // A commit with a generation to a group that does not exist:
    // GROUP_ID_NOT_FOUND from v9, ILLEGAL_GENERATION before.
    let commit_to =
        |conn: &mut Connection, version: i16, group: &str, generation: i32, member: &str| {
            let response: OffsetCommitResponse = conn.call(
                ApiKey::OffsetCommit,
                version,
                &OffsetCommitRequest::default()
                    .with_group_id(GroupId(text(group)))
                    .with_generation_id_or_member_epoch(generation)
                    .with_member_id(text(member))
                    .with_topics(vec![OffsetCommitRequestTopic::default()
                        .with_name(TopicName(text("v4-commits")))
                        .with_partitions(vec![OffsetCommitRequestPartition::default()
                            .with_partition_index(0)
                            .with_committed_offset(11)])]),
            );
            response.topics[0].partitions[0].error_code
        };
    assert_eq!(commit_to(&mut conn, 9, "v4-none", 1, "m"), 69);
    assert_eq!(commit_to(&mut conn, 8, "v4-none", 1, "m"), 22);

    // JoinGroup v9 with a reason: MEMBER_ID_REQUIRED, then the join.
    let join_v9 = |conn: &mut Connection, member: &str| -> JoinGroupResponse {
        conn.call(
            ApiKey::JoinGroup,
            9,
            &join_request("v4", member, Bytes::from_static(b"meta"))
                .with_reason(Some(text("rebalance test"))),
        )
    };
    let first = join_v9(&mut conn, "");
    assert_eq!(first.error_code, 79, "MEMBER_ID_REQUIRED");
    let member = first.member_id.to_string();
    let joined = join_v9(&mut conn, &member);
    assert_eq!((joined.error_code, joined.generation_id), (0, 1));
    assert!(!joined.skip_assignment);
    let synced: SyncGroupResponse = conn.call(
        ApiKey::SyncGroup,
        5,
        &SyncGroupRequest::default()
            .with_group_id(GroupId(text("v4")))
            .with_generation_id(1)
            .with_member_id(text(&member))
            .with_assignments(vec![SyncGroupRequestAssignment::default()
                .with_member_id(text(&member))
                .with_assignment(Bytes::from_static(b"a"))]),
    );
    assert_eq!(synced.error_code, 0);

    // OffsetCommit v9: a classic group's member epoch is its generation.
    assert_eq!(commit_to(&mut conn, 9, "v4", 2, &member), 22);
    assert_eq!(commit_to(&mut conn, 9, "v4", 1, &member), 0);
    // OffsetFetch v9: member id and epoch are ignored for a classic group.
    let fetched: OffsetFetchResponse = conn.call(
        ApiKey::OffsetFetch,
        9,
        &OffsetFetchRequest::default().with_groups(vec![OffsetFetchRequestGroup::default()
            .with_group_id(GroupId(text("v4")))
            .with_member_id(Some(text("someone")))
            .with_member_epoch(7)
            .with_topics(None)]),
    );
    let group = &fetched.groups[0];
    assert_eq!(group.error_code, 0);
    assert_eq!(group.topics[0].partitions[0].committed_offset, 11);

    // DescribeGroups v6: all a group's operations (no authorizer: 3400,
    // READ, DESCRIBE, DELETE, DESCRIBE_CONFIGS, ALTER_CONFIGS); an unknown
    // group is GROUP_ID_NOT_FOUND with Kafka's message, only from v6.
    let describe = |conn: &mut Connection, version: i16| -> DescribeGroupsResponse {
        conn.call(
            ApiKey::DescribeGroups,
            version,
            &DescribeGroupsRequest::default()
                .with_groups(vec![GroupId(text("v4")), GroupId(text("nope"))])
                .with_include_authorized_operations(true),
        )
    };
    let v6 = describe(&mut conn, 6);
    let (found, missing) = (&v6.groups[0], &v6.groups[1]);
    assert_eq!(
        (
            found.error_code,
            found.group_state.to_string(),
            found.authorized_operations
        ),
        (0, "Stable".to_string(), 3400)
    );
    assert_eq!(found.error_message, None);
    assert_eq!(
        (missing.error_code, missing.group_state.to_string()),
        (69, "Dead".to_string())
    );
    assert_eq!(
        missing.error_message.as_ref().map(|m| m.to_string()),
        Some("Group nope not found.".to_string())
    );
    assert_eq!(missing.authorized_operations, i32::MIN);
    let v5 = describe(&mut conn, 5);
    assert_eq!(
        (
            v5.groups[1].error_code,
            v5.groups[1].group_state.to_string()
        ),
        (0, "Dead".to_string())
    );

    // ListGroups v5: every group is classic.
    let list = |conn: &mut Connection, types: &[&str]| -> Vec<(String, String)> {
        let listed: ListGroupsResponse = conn.call(
            ApiKey::ListGroups,
            5,
            &ListGroupsRequest::default()
                .with_types_filter(types.iter().map(|t| text(t)).collect()),
        );
        listed
            .groups
            .iter()
            .map(|g| (g.group_id.0.to_string(), g.group_type.to_string()))
            .collect()
    };
    let classic = vec![("v4".to_string(), "classic".to_string())];
    assert_eq!(list(&mut conn, &[]), classic);
    assert_eq!(list(&mut conn, &["Classic"]), classic);
    assert_eq!(list(&mut conn, &["consumer"]), vec![]);
    assert_eq!(list(&mut conn, &["share", "unknown-type"]), vec![]);

    // LeaveGroup v5 with a reason.
    let left: LeaveGroupResponse = conn.call(
        ApiKey::LeaveGroup,
        5,
        &LeaveGroupRequest::default()
            .with_group_id(GroupId(text("v4")))
            .with_members(vec![MemberIdentity::default()
                .with_member_id(text(&member))
                .with_reason(Some(text("closing")))]),
    );
    let codes: Vec<i16> = left.members.iter().map(|m| m.error_code).collect();
    assert_eq!((left.error_code, codes), (0, vec![0]));
}

/// `Partition:P\tOffset:O\tVALUE` lines of `strom consume`, checked
/// against groups_check.py's values.
fn consumed(stdout: &str) -> Vec<(i32, i64)> {
    stdout
        .lines()
        .map(|line| {
            let fields: Vec<&str> = line.splitn(3, '\t').collect();
            let p: i32 = fields[0]
                .strip_prefix("Partition:")
                .unwrap()
                .parse()
                .unwrap();
            let o: i64 = fields[1].strip_prefix("Offset:").unwrap().parse().unwrap();
            let value = format!("value-{p}-{o}-").repeat(1 + o as usize % 7);
            assert_eq!(fields[2], value, "{line}");
            (p, o)
        })
        .collect()
}

#[test]
fn strom_consume_group_and_group_admin_commands() {
    let broker = Broker::start(BROKER_ARGS);
    groups(&broker, &["produce", "cli-topic", "3", "10"]);
    let print = ["--print-partition", "--print-offset"];
    let first = strom_ok(
        &broker,
        &[
            &[
                "consume",
                "cli-topic",
                "--group",
                "cli-g",
                "--from-beginning",
                "--max-messages",
                "12",
            ][..],
            &print,
        ]
        .concat(),
    );
    let second = strom_ok(
        &broker,
        &[
            &["consume", "cli-topic", "--group", "cli-g", "-e"][..],
            &print,
        ]
        .concat(),
    );
    let mut all = consumed(&first);
    assert_eq!(all.len(), 12);
    all.extend(consumed(&second));
    all.sort();
    let expected: Vec<(i32, i64)> = (0..3).flat_map(|p| (0..10).map(move |o| (p, o))).collect();
    assert_eq!(
        all, expected,
        "the second member resumed at the committed offsets"
    );

    let listed = strom_ok(&broker, &["group", "list"]);
    assert!(listed.contains("cli-g\tEmpty"), "{listed}");
    let described = strom_ok(&broker, &["group", "describe", "cli-g"]);
    assert!(described.contains("STATE Empty"), "{described}");
    for p in 0..3 {
        assert!(
            described.contains(&format!("cli-topic\t{p}\t10\t10\t0\t-")),
            "{described}"
        );
    }

    let reset = strom_ok(
        &broker,
        &[
            "group",
            "reset-offsets",
            "--execute",
            "cli-g",
            "--topic",
            "cli-topic",
            "--to-offset",
            "4",
        ],
    );
    assert!(reset.contains("cli-topic\t2\t4"), "{reset}");
    strom_ok(
        &broker,
        &[
            "group",
            "reset-offsets",
            "--execute",
            "cli-g",
            "--topic",
            "cli-topic",
            "--to-earliest",
        ],
    );
    let described = strom_ok(&broker, &["group", "describe", "cli-g"]);
    assert!(
        described.contains("cli-topic\t1\t0\t10\t10\t-"),
        "{described}"
    );
    strom_ok(
        &broker,
        &[
            "group",
            "reset-offsets",
            "--execute",
            "cli-g",
            "--topic",
            "cli-topic",
            "--to-datetime",
            "2100-01-01T00:00:00",
        ],
    );
    let described = strom_ok(&broker, &["group", "describe", "cli-g"]);
    assert!(
        described.contains("cli-topic\t1\t10\t10\t0\t-"),
        "no record that late: latest\n{described}"
    );

    // A running member: reset and delete are refused with a clear message.
    let mut member = Command::new(env!("CARGO_BIN_EXE_strom"))
        .args([
            "consume",
            "cli-topic",
            "--group",
            "cli-g",
            "--bootstrap",
            &broker.bootstrap(),
        ])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let joined = poll_until(Duration::from_secs(30), || {
        strom_ok(&broker, &["group", "describe", "cli-g"])
            .contains("MEMBERS 1")
            .then_some(())
    });
    assert!(joined.is_some(), "the member never joined");
    let refused = strom(
        &broker,
        &[
            "group",
            "reset-offsets",
            "--execute",
            "cli-g",
            "--topic",
            "cli-topic",
            "--to-earliest",
        ],
        None,
    );
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr.contains("group cli-g has 1 active member(s)")
            && stderr.contains("stop its consumers"),
        "{stderr}"
    );
    let refused = strom(&broker, &["group", "delete", "cli-g"], None);
    assert!(String::from_utf8_lossy(&refused.stderr).contains("has active members"));
    member.kill().unwrap();
    member.wait().unwrap();

    strom_ok(
        &broker,
        &[
            "consume",
            "cli-topic",
            "--group",
            "other",
            "-e",
            "--from-beginning",
        ],
    );
    assert!(strom_ok(&broker, &["group", "list"]).contains("other\tEmpty"));
    assert!(strom_ok(&broker, &["group", "delete", "other"]).contains("deleted group other"));
    assert!(!strom_ok(&broker, &["group", "list"]).contains("other"));
    let missing = strom(&broker, &["group", "delete", "other"], None);
    assert!(String::from_utf8_lossy(&missing.stderr).contains("there is no group other"));
}

fn commit_all(conn: &mut Connection, topic: &str, partitions: i32, offset: i64) {
    let response: OffsetCommitResponse = conn.call(
        ApiKey::OffsetCommit,
        8,
        &OffsetCommitRequest::default()
            .with_group_id(GroupId(text("compacted")))
            .with_generation_id_or_member_epoch(-1)
            .with_topics(vec![OffsetCommitRequestTopic::default()
                .with_name(TopicName(text(topic)))
                .with_partitions(
                    (0..partitions)
                        .map(|p| {
                            OffsetCommitRequestPartition::default()
                                .with_partition_index(p)
                                .with_committed_offset(offset + i64::from(p))
                                .with_committed_leader_epoch(-1)
                                .with_committed_metadata(Some(text("x")))
                        })
                        .collect(),
                )]),
    );
    for p in &response.topics[0].partitions {
        assert_eq!(p.error_code, 0, "{p:?}");
    }
}

fn loaded_records(log: &str) -> Vec<u64> {
    log.lines()
        .filter(|l| l.contains("loaded __consumer_offsets partition"))
        .filter_map(|l| l.split("records=").nth(1))
        .map(|n| n.trim().parse().unwrap())
        .collect()
}

#[test]
fn offsets_log_is_compacted_to_live_offsets_and_reloads_after_restart() {
    // One offsets partition, so every commit lands in the same log.
    let mut broker = Broker::start(&[
        "--set",
        "offsets.topic.num.partitions=1",
        "--set",
        "num.partitions=100",
        "--set",
        "strom.preallocate.bytes=4096",
    ]);
    let mut conn = Connection::open(&broker);
    let _: MetadataResponse = conn.call(
        ApiKey::Metadata,
        9,
        &MetadataRequest::default()
            .with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(TopicName(text("wide"))))
            ]))
            .with_allow_auto_topic_creation(true),
    );
    // 110 commits of 100 partitions: 11,000 records, more than twice the
    // 100 live offsets plus the 10,000 slack.
    for round in 0..110 {
        commit_all(&mut conn, "wide", 100, round * 1000);
    }
    let compacted = poll_until(Duration::from_secs(30), || {
        broker.log().contains("compacted offsets").then_some(())
    });
    assert!(compacted.is_some(), "{}", broker.log());
    drop(conn);
    broker.restart();
    let loaded = loaded_records(&broker.log());
    let mut conn = Connection::open(&broker);
    let fetched: OffsetFetchResponse = conn.call(
        ApiKey::OffsetFetch,
        7,
        &OffsetFetchRequest::default()
            .with_group_id(GroupId(text("compacted")))
            .with_topics(None),
    );
    let partitions = &fetched.topics[0].partitions;
    assert_eq!(partitions.len(), 100);
    for p in partitions {
        assert_eq!(
            p.committed_offset,
            109_000 + i64::from(p.partition_index),
            "{p:?}"
        );
        assert_eq!(p.metadata.as_ref().map(|m| m.to_string()), Some("x".into()));
    }
    let after_restart = loaded_records(&broker.log())[loaded.len()..].to_vec();
    assert_eq!(after_restart.len(), 1, "{}", broker.log());
    assert!(
        after_restart[0] < 2_000,
        "the reload reads the snapshot and what followed, not all 11,000 records: {after_restart:?}"
    );
}

/// A new member of `group` through JoinGroup v7 (MEMBER_ID_REQUIRED, then
/// the join) and its SyncGroup as the sole member: (member id, generation).
fn join_alone(conn: &mut Connection, group: &str) -> (String, i32) {
    let first = join(conn, group, "");
    assert_eq!(first.error_code, 79, "MEMBER_ID_REQUIRED: {first:?}");
    let member = first.member_id.to_string();
    let joined = join(conn, group, &member);
    assert_eq!(joined.error_code, 0, "{joined:?}");
    assert_eq!(joined.leader.to_string(), member, "alone, it leads");
    let synced: SyncGroupResponse = conn.call(
        ApiKey::SyncGroup,
        5,
        &SyncGroupRequest::default()
            .with_group_id(GroupId(text(group)))
            .with_generation_id(joined.generation_id)
            .with_member_id(text(&member))
            .with_protocol_type(Some(text("consumer")))
            .with_protocol_name(Some(text("range")))
            .with_assignments(vec![SyncGroupRequestAssignment::default()
                .with_member_id(text(&member))
                .with_assignment(Bytes::from_static(b"assigned"))]),
    );
    assert_eq!(synced.error_code, 0, "{synced:?}");
    (member, joined.generation_id)
}

fn leave(conn: &mut Connection, group: &str, member: &str) {
    let left: LeaveGroupResponse = conn.call(
        ApiKey::LeaveGroup,
        5,
        &LeaveGroupRequest::default()
            .with_group_id(GroupId(text(group)))
            .with_members(vec![MemberIdentity::default().with_member_id(text(member))]),
    );
    let codes: Vec<i16> = left.members.iter().map(|m| m.error_code).collect();
    assert_eq!((left.error_code, codes), (0, vec![0]), "{left:?}");
}

/// DescribeGroups v5 of one group: (state, protocol type, member ids).
fn described(conn: &mut Connection, group: &str) -> (String, String, Vec<String>) {
    let response: DescribeGroupsResponse = conn.call(
        ApiKey::DescribeGroups,
        5,
        &DescribeGroupsRequest::default().with_groups(vec![GroupId(text(group))]),
    );
    let found = &response.groups[0];
    assert_eq!(found.error_code, 0, "{found:?}");
    (
        found.group_state.to_string(),
        found.protocol_type.to_string(),
        found
            .members
            .iter()
            .map(|m| m.member_id.to_string())
            .collect(),
    )
}

#[test]
fn group_protocol_types_generations_and_members_survive_a_broker_restart() {
    let mut broker = Broker::start(BROKER_ARGS);
    // confluent-kafka: a subscribed member commits and closes (the group
    // is Empty, protocol type `consumer`); an assign() consumer commits
    // (a group without a protocol type).
    let out = groups(&broker, &["restart-write"]);
    assert!(out.contains("restart-write: ok"), "{out}");
    let mut conn = Connection::open(&broker);
    // A raw member joins the emptied group and leaves it again: the
    // generation it had, and the group is Empty in the next one.
    let (member, generation) = join_alone(&mut conn, "restart-group");
    leave(&mut conn, "restart-group", &member);
    // Another group keeps a member (Stable) through the restart.
    let (kept, kept_generation) = join_alone(&mut conn, "restart-kept");
    let listed = strom_ok(&broker, &["group", "list"]);
    for line in [
        "restart-group\tEmpty\tconsumer\tclassic\n",
        "restart-assign\tEmpty\t-\tclassic\n",
        "restart-kept\tStable\tconsumer\tclassic\n",
    ] {
        assert!(listed.contains(line), "{line:?} in {listed}");
    }
    drop(conn);

    broker.restart();
    assert_eq!(strom_ok(&broker, &["group", "list"]), listed);
    let mut conn = Connection::open(&broker);
    assert_eq!(
        described(&mut conn, "restart-group"),
        ("Empty".into(), "consumer".into(), vec![])
    );
    // The member kept its membership: it heartbeats in its generation
    // (a member that did not would expire after its session, as after a
    // coordinator change in Kafka).
    assert_eq!(
        described(&mut conn, "restart-kept"),
        ("Stable".into(), "consumer".into(), vec![kept.clone()])
    );
    assert_eq!(
        heartbeat(&mut conn, "restart-kept", kept_generation, &kept),
        0
    );
    leave(&mut conn, "restart-kept", &kept);
    // The generation was kept: the next member gets the one after the
    // Empty group's (generation + 1), not 1.
    let (member, generation_after) = join_alone(&mut conn, "restart-group");
    assert_eq!(generation_after, generation + 2, "{}", broker.log());
    leave(&mut conn, "restart-group", &member);
    // The member's committed offsets are there too.
    let fetched: OffsetFetchResponse = conn.call(
        ApiKey::OffsetFetch,
        7,
        &OffsetFetchRequest::default()
            .with_group_id(GroupId(text("restart-group")))
            .with_topics(None),
    );
    let mut offsets: Vec<(i32, i64)> = fetched.topics[0]
        .partitions
        .iter()
        .map(|p| (p.partition_index, p.committed_offset))
        .collect();
    offsets.sort();
    assert_eq!(offsets, vec![(0, 5), (1, 6), (2, 7)]);
}
