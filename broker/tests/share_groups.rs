//! Share groups (KIP-932) against a real `strom` process: confluent-kafka
//! ShareConsumers, each a process of its own, in explicit acknowledgement
//! mode (tests/clients/share_check.py).

mod common;

use std::time::Duration;

use common::{run_python, Broker};
use common::{strom_fails, strom_ok};
use protocol::kafka_protocol::messages::alter_share_group_offsets_request::{
    AlterShareGroupOffsetsRequestPartition, AlterShareGroupOffsetsRequestTopic,
};
use protocol::kafka_protocol::messages::delete_share_group_offsets_request::DeleteShareGroupOffsetsRequestTopic;
use protocol::kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use protocol::kafka_protocol::messages::{
    AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse, ApiKey,
    DeleteShareGroupOffsetsRequest, DeleteShareGroupOffsetsResponse, GroupId, MetadataRequest,
    MetadataResponse, ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse, TopicName,
};
use protocol::kafka_protocol::protocol::StrBytes;

/// Three members share one topic after a member that acquired records
/// was killed holding them: every record delivered, each accepted once
/// (by one member), rejected ones never again, released and lock-expired
/// ones delivered again with a higher delivery count, and records
/// released at every delivery archived at `group.share.delivery.count.limit`.
/// Then the group, without members, through `strom share-group` and the
/// share admin APIs: described with its start offsets, reset to the
/// earliest offset (every record delivered again), refused while a member
/// is in, deleted; its delivery metrics; its share coordinator found.
#[test]
fn share_consumers_divide_records_accept_each_once_and_redeliver_what_was_not_accepted() {
    let (mut broker, admin) = common::admin::Admin::start(&[
        "--set",
        "group.share.record.lock.duration.ms=3000",
        "--set",
        "group.share.delivery.count.limit=3",
        "--set",
        "group.share.session.timeout.ms=5000",
        "--set",
        "group.share.heartbeat.interval.ms=1000",
    ]);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("members.log");
    let out = run_python(
        "share_check.py",
        &[
            "queue",
            &broker.bootstrap(),
            "share-topic",
            log.to_str().unwrap(),
            "3",
        ],
        Duration::from_secs(300),
    );
    assert!(out.contains("queue: ok 300 records"), "{out}");
    println!("{out}");
    let group = "share-share-topic";

    // Its figures: deliveries, redeliveries, expired locks (the killed member's).
    let (status, metrics) = admin.get("/metrics");
    assert_eq!(status, 200);
    for family in [
        "strom_share_group_deliveries_total",
        "strom_share_group_redeliveries_total",
        "strom_share_group_lock_expiries_total",
    ] {
        let line = metrics
            .lines()
            .find(|l| l.starts_with(&format!("{family}{{group=\"{group}\"}}")))
            .unwrap_or_else(|| panic!("no {family} in\n{metrics}"));
        let value: u64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        assert!(value > 0, "{line}");
    }

    // Done with everything: each partition's start offset past its 100
    // records. Without members once the killed one's session ended.
    let described = common::poll_until(Duration::from_secs(30), || {
        let described = strom_ok(&broker, &["share-group", "describe", group]);
        described.contains("STATE Empty").then_some(described)
    })
    .expect("the killed member's session never ended");
    assert!(
        described.contains(&format!("GROUP {group} STATE Empty")),
        "{described}"
    );
    for p in 0..3 {
        assert!(
            described.contains(&format!("share-topic\t{p}\t100")),
            "{described}"
        );
    }
    // A dry run changes nothing; --execute sets the start offsets.
    let dry = strom_ok(
        &broker,
        &[
            "share-group",
            "reset-offsets",
            group,
            "--topic",
            "share-topic",
            "--to-earliest",
        ],
    );
    assert!(
        dry.contains(&format!("{group}\tshare-topic\t0\t0")),
        "{dry}"
    );
    assert_eq!(
        strom_ok(&broker, &["share-group", "describe", group]),
        described
    );
    strom_ok(
        &broker,
        &[
            "share-group",
            "reset-offsets",
            group,
            "--topic",
            "share-topic",
            "--to-earliest",
            "--execute",
        ],
    );
    let reset = strom_ok(&broker, &["share-group", "describe", group]);
    for p in 0..3 {
        assert!(reset.contains(&format!("share-topic\t{p}\t0")), "{reset}");
    }
    // Every record comes again, the archived ones too.
    let drained = run_python(
        "share_check.py",
        &["drain", &broker.bootstrap(), group, "share-topic", "300"],
        Duration::from_secs(120),
    );
    assert!(drained.contains("drain: ok 300 records"), "{drained}");
    // Another group starting at the records at most an hour old: all of them.
    assert_eq!(
        common::raw::alter_group_config(
            &broker,
            "recent",
            "share.auto.offset.reset",
            "by_duration:PT1H"
        ),
        0
    );
    let recent = run_python(
        "share_check.py",
        &["drain", &broker.bootstrap(), "recent", "share-topic", "300"],
        Duration::from_secs(120),
    );
    assert!(recent.contains("drain: ok 300 records"), "{recent}");
    // A member closing while it holds records gives them back at once.
    for (key, value) in [
        ("share.auto.offset.reset", "earliest"),
        ("share.record.lock.duration.ms", "60000"),
    ] {
        assert_eq!(
            common::raw::alter_group_config(&broker, "closing", key, value),
            0
        );
    }
    let closing = run_python(
        "share_check.py",
        &["close", &broker.bootstrap(), "closing", "share-topic"],
        Duration::from_secs(120),
    );
    assert!(closing.contains("close: ok"), "{closing}");
    println!("{closing}");
    // share.isolation.level=read_committed: committed transactions only.
    let committed = run_python(
        "share_check.py",
        &["committed", &broker.bootstrap(), "txn-share"],
        Duration::from_secs(180),
    );
    assert!(committed.contains("committed: ok"), "{committed}");
    println!("{committed}");

    // A member in: its offsets may not change, nor the group go.
    let key = format!("{group}:{}:0", topic_id_text(&broker, "share-topic"));
    let node = common::raw::find_coordinator(&broker, group, 0);
    assert!(node.is_some());
    assert_eq!(common::raw::find_coordinator(&broker, &key, 2), node);
    assert_eq!(
        common::raw::find_coordinator(&broker, "not-a-share-key", 2),
        None
    );
    // The group's own heartbeat interval (a group config) is the one its
    // members are told.
    assert_eq!(
        common::raw::alter_group_config(&broker, group, "share.heartbeat.interval.ms", "7000"),
        0
    );
    let mut stream = common::raw::connect(&broker);
    let joined = share_heartbeat(&mut stream, group, 0, Some("share-topic"));
    assert_eq!(joined.error_code, 0, "{joined:?}");
    assert_eq!(joined.heartbeat_interval_ms, 7000);
    let refused: AlterShareGroupOffsetsResponse = common::raw::call(
        &mut stream,
        ApiKey::AlterShareGroupOffsets,
        0,
        2,
        "share-test",
        &AlterShareGroupOffsetsRequest::default()
            .with_group_id(GroupId(text(group)))
            .with_topics(vec![AlterShareGroupOffsetsRequestTopic::default()
                .with_topic_name(TopicName(text("share-topic")))
                .with_partitions(vec![
                    AlterShareGroupOffsetsRequestPartition::default()
                        .with_partition_index(0)
                        .with_start_offset(0),
                ])]),
    );
    assert_eq!(
        refused.error_code,
        protocol::error_codes::NON_EMPTY_GROUP,
        "{refused:?}"
    );
    let refused = delete_share_offsets(&mut stream, group, &["share-topic"]);
    assert_eq!(
        refused.error_code,
        protocol::error_codes::NON_EMPTY_GROUP,
        "{refused:?}"
    );
    let busy = strom_fails(&broker, &["share-group", "delete", group], None);
    assert!(busy.contains("active members"), "{busy}");
    let listed = strom_ok(&broker, &["share-group", "list"]);
    assert!(listed.contains(group), "{listed}");
    let described = strom_ok(&broker, &["share-group", "describe", group]);
    assert!(
        described.contains("STATE Stable") && described.contains("MEMBER raw-member-0000000000"),
        "{described}"
    );
    // The coordinator crashes: the member and the epoch it was told were
    // written before it was answered, so the broker back knows both and
    // the member's next heartbeat is accepted, not fenced.
    drop(stream);
    broker.crash_and_restart();
    let (mut stream, carried_on) = common::poll_until(Duration::from_secs(60), || {
        let mut stream = common::raw::connect(&broker);
        let beat = share_heartbeat(&mut stream, group, joined.member_epoch, None);
        let loading = [
            protocol::error_codes::COORDINATOR_LOAD_IN_PROGRESS,
            protocol::error_codes::COORDINATOR_NOT_AVAILABLE,
            protocol::error_codes::NOT_COORDINATOR,
        ];
        (!loading.contains(&beat.error_code)).then_some((stream, beat))
    })
    .expect("the coordinator never came back");
    assert_eq!(carried_on.error_code, 0, "{carried_on:?}");
    assert_eq!(carried_on.member_epoch, joined.member_epoch);
    let described = strom_ok(&broker, &["share-group", "describe", group]);
    assert!(
        described.contains("STATE Stable") && described.contains("MEMBER raw-member-0000000000"),
        "{described}"
    );
    let left = share_heartbeat(&mut stream, group, -1, None);
    assert_eq!(left.error_code, 0, "{left:?}");
    // Without members the group is still there, listed Empty, also after
    // another crash.
    broker.crash_and_restart();
    let listed = common::poll_until(Duration::from_secs(60), || {
        let listed = strom_ok(&broker, &["share-group", "list"]);
        listed
            .lines()
            .any(|l| l == format!("{group}\tEmpty"))
            .then_some(listed)
    })
    .expect("the group without members is not listed Empty after a restart");
    println!("{listed}");

    // Gone with its states; then unknown.
    let deleted = strom_ok(&broker, &["share-group", "delete", group]);
    assert!(
        deleted.contains(&format!("deleted group {group}")),
        "{deleted}"
    );
    // Its tombstone keeps it gone after a crash.
    broker.crash_and_restart();
    let gone = common::poll_until(Duration::from_secs(60), || {
        let gone = strom_fails(&broker, &["share-group", "describe", group], None);
        (gone.contains("GROUP_ID_NOT_FOUND") || gone.contains("not found")).then_some(gone)
    })
    .expect("the deleted group is described after a restart");
    println!("{gone}");
    let listed = strom_ok(&broker, &["share-group", "list"]);
    assert!(
        !listed.lines().any(|l| l.starts_with(&format!("{group}\t"))),
        "{listed}"
    );
    let mut stream = common::raw::connect(&broker);
    let deleted = delete_share_offsets(&mut stream, group, &["share-topic", "no-such-topic"]);
    assert_eq!(deleted.error_code, 0, "{deleted:?}");
    let codes: Vec<i16> = deleted.responses.iter().map(|r| r.error_code).collect();
    assert_eq!(
        codes,
        [0, protocol::error_codes::UNKNOWN_TOPIC_OR_PARTITION],
        "{deleted:?}"
    );
}

/// A raw member of `group` (`epoch` 0 joins subscribed to `topic`, -1 leaves).
fn share_heartbeat(
    stream: &mut std::net::TcpStream,
    group: &str,
    epoch: i32,
    topic: Option<&str>,
) -> ShareGroupHeartbeatResponse {
    common::raw::call(
        stream,
        ApiKey::ShareGroupHeartbeat,
        1,
        1,
        "share-test",
        &ShareGroupHeartbeatRequest::default()
            .with_group_id(GroupId(text(group)))
            .with_member_id(text("raw-member-0000000000"))
            .with_member_epoch(epoch)
            .with_subscribed_topic_names(topic.map(|t| vec![TopicName(text(t))])),
    )
}

fn delete_share_offsets(
    stream: &mut std::net::TcpStream,
    group: &str,
    topics: &[&str],
) -> DeleteShareGroupOffsetsResponse {
    common::raw::call(
        stream,
        ApiKey::DeleteShareGroupOffsets,
        0,
        2,
        "share-test",
        &DeleteShareGroupOffsetsRequest::default()
            .with_group_id(GroupId(text(group)))
            .with_topics(
                topics
                    .iter()
                    .map(|t| {
                        DeleteShareGroupOffsetsRequestTopic::default()
                            .with_topic_name(TopicName(text(t)))
                    })
                    .collect(),
            ),
    )
}

fn text(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_string())
}

/// A topic's id as Kafka prints it, from Metadata.
fn topic_id_text(broker: &Broker, topic: &str) -> String {
    let mut stream = common::raw::connect(broker);
    let metadata: MetadataResponse = common::raw::call(
        &mut stream,
        ApiKey::Metadata,
        12,
        1,
        "share-test",
        &MetadataRequest::default().with_topics(Some(vec![
            MetadataRequestTopic::default().with_name(Some(TopicName(text(topic))))
        ])),
    );
    let id = metadata.topics[0].topic_id.as_u128();
    groups::share_records::topic_id_text(id)
}

/// One round: three ShareConsumers on a new replicated topic, the leader
/// of one of its partitions (even rounds) or the group's coordinator (odd
/// rounds) killed once they have acknowledged some records; the members'
/// script checks the rest. The killed node, started again.
fn share_leader_killed_round(cluster: &mut test_support::cluster::Cluster, round: u64) -> String {
    let topic = format!("shared-replicated-{round}");
    // Each even round another partition's leader.
    let victim_kind = if round % 2 == 1 {
        "coordinator".to_string()
    } else {
        (round / 2 % 3).to_string()
    };
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("members.log");
    let mut members = common::Script::start(
        "share_check.py",
        &[
            "failover",
            &cluster.bootstrap(),
            &topic,
            log.to_str().unwrap(),
            dir.path().to_str().unwrap(),
            "3",
            &victim_kind,
        ],
    );
    let kill = dir.path().join("kill");
    let named = members.wait_for(Duration::from_secs(180), || {
        std::fs::read_to_string(&kill).ok()
    });
    let victim = match named.trim() {
        "coordinator" => {
            common::raw::find_coordinator(&cluster.node(1).broker, &format!("share-{topic}"), 0)
                .expect("the share group has a coordinator")
        }
        leader => leader.parse::<i32>().expect("a node id"),
    };
    cluster.node_mut(victim).broker.kill();
    std::fs::write(dir.path().join("killed"), victim.to_string()).unwrap();
    let (ok, stdout, stderr) = members.finish(Duration::from_secs(300));
    assert!(
        ok && stdout.contains("failover: ok 450 records"),
        "round {round}: {stdout}\n{stderr}\n{}",
        cluster.logs()
    );
    // Every record done with (accepted, rejected or archived): each
    // partition's start offset at its end, nothing left in flight (an
    // acceptance whose answer was lost was applied, not dropped).
    let survivor = (1..=3).find(|&n| n != victim).unwrap();
    let described = strom_ok(
        &cluster.node(survivor).broker,
        &["share-group", "describe", &format!("share-{topic}")],
    );
    for p in 0..3 {
        assert!(
            described.contains(&format!("{topic}\t{p}\t150")),
            "round {round}: {described}"
        );
    }
    common::restart_killed(cluster, victim);
    format!("round {}: node {victim}: {}", round + 1, stdout.trim())
}

/// A share partition's leader, or the share group's coordinator, killed
/// (SIGKILL) in a three-node cluster while three ShareConsumers work
/// through a replicated topic, round after round (`STROM_SOAK_ROUNDS`;
/// `scripts/soak share_partition_leader` runs many): the new leader reads
/// the share partition's state from its share coordinator
/// (`__share_group_state`, replicated), and the new group coordinator the
/// membership from `__consumer_offsets`, so no record acknowledged before
/// the kill is delivered again, every record acquired but not
/// acknowledged is delivered again with a higher count, and each record
/// is accepted once.
#[test]
fn a_share_partition_leader_killed_loses_no_acknowledgement_and_no_acquired_record() {
    let started = std::time::Instant::now();
    let budget = common::SoakBudget::from_env(2);
    let mut cluster = test_support::cluster::Cluster::start(
        3,
        &[
            "--set",
            "group.share.record.lock.duration.ms=3000",
            "--set",
            "group.share.delivery.count.limit=3",
        ],
    );
    let mut round = 0;
    while budget.more(round) {
        println!("{}", share_leader_killed_round(&mut cluster, round));
        round += 1;
    }
    assert!(round > 0, "no round ran");
    println!(
        "soak share_partition_leader_killed: {round} rounds, {:.0} s",
        started.elapsed().as_secs_f64()
    );
}
