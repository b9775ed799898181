//! Tests of the group state machine: rebalances, static members, errors
//! as Kafka answers them, offsets and memory bounds.

use std::collections::HashMap;

use super::*;
use crate::limits::{MEMBER_BYTES_MAX, OFFSET_METADATA_BYTES_MAX};

const SESSION: i32 = 10_000;
const REBALANCE: i32 = 30_000;

fn config(delay_ms: u64) -> GroupConfig {
    GroupConfig {
        initial_rebalance_delay_ms: delay_ms,
        ..GroupConfig::default()
    }
}

fn join_request(member_id: &str, instance: Option<&str>, protocols: &[&str]) -> JoinRequest {
    JoinRequest {
        group_id: "g".to_string(),
        member_id: member_id.to_string(),
        group_instance_id: instance.map(str::to_string),
        client_id: "client".to_string(),
        client_host: "/127.0.0.1".to_string(),
        session_timeout_ms: SESSION,
        rebalance_timeout_ms: REBALANCE,
        protocol_type: "consumer".to_string(),
        protocols: protocols
            .iter()
            .map(|p| (p.to_string(), Bytes::from(format!("meta-{p}-{member_id}"))))
            .collect(),
        require_known_member_id: true,
        supports_skip_assignment: false,
        topics: None,
    }
}

/// Drives a coordinator and remembers every reply by waiter.
struct Harness {
    coordinator: Coordinator,
    now_ms: u64,
    next_waiter: WaiterId,
    replies: HashMap<WaiterId, Reply>,
}

impl Harness {
    fn new(delay_ms: u64) -> Self {
        Self {
            coordinator: Coordinator::new(config(delay_ms), 7),
            now_ms: 1_000_000,
            next_waiter: 0,
            replies: HashMap::new(),
        }
    }

    fn absorb(&mut self, replies: Replies) {
        for (waiter, reply) in replies {
            assert!(
                self.replies.insert(waiter, reply).is_none(),
                "answered twice"
            );
        }
    }

    fn join(&mut self, request: JoinRequest) -> (WaiterId, Answer<JoinResponse>) {
        self.next_waiter += 1;
        let mut replies = Vec::new();
        let answer = self
            .coordinator
            .join(self.now_ms, request, self.next_waiter, &mut replies);
        self.absorb(replies);
        (self.next_waiter, answer)
    }

    /// A new dynamic member: MEMBER_ID_REQUIRED, then the real join.
    fn join_new(&mut self, protocols: &[&str]) -> (String, WaiterId) {
        let (_, first) = self.join(join_request("", None, protocols));
        let Answer::Now(response) = first else {
            panic!("a new member is answered at once")
        };
        assert_eq!(response.error, Some(GroupError::MemberIdRequired));
        assert!(!response.member_id.is_empty());
        let (waiter, _) = self.join(join_request(&response.member_id, None, protocols));
        (response.member_id, waiter)
    }

    fn sync(
        &mut self,
        member_id: &str,
        generation: i32,
        assignments: &[(&str, &str)],
    ) -> (WaiterId, Answer<SyncResponse>) {
        self.next_waiter += 1;
        let mut replies = Vec::new();
        let request = SyncRequest {
            group_id: "g".to_string(),
            generation_id: generation,
            member_id: member_id.to_string(),
            group_instance_id: None,
            protocol_type: Some("consumer".to_string()),
            protocol_name: None,
            assignments: assignments
                .iter()
                .map(|(m, a)| (m.to_string(), Bytes::from(a.to_string())))
                .collect(),
        };
        let answer = self
            .coordinator
            .sync(self.now_ms, request, self.next_waiter, &mut replies);
        self.absorb(replies);
        (self.next_waiter, answer)
    }

    fn tick(&mut self, advance_ms: u64) -> Vec<DroppedOffset> {
        self.now_ms += advance_ms;
        let mut replies = Vec::new();
        self.coordinator.tick(self.now_ms, &mut replies);
        self.absorb(replies);
        self.coordinator.expire_offsets(self.now_ms)
    }

    fn join_reply(&self, waiter: WaiterId) -> JoinResponse {
        match self.replies.get(&waiter) {
            Some(Reply::Join(response)) => response.clone(),
            other => panic!("waiter {waiter}: {other:?}"),
        }
    }

    fn sync_reply(&self, waiter: WaiterId) -> SyncResponse {
        match self.replies.get(&waiter) {
            Some(Reply::Sync(response)) => response.clone(),
            other => panic!("waiter {waiter}: {other:?}"),
        }
    }

    fn state(&self) -> GroupState {
        self.coordinator
            .group("g")
            .map(|g| g.state())
            .unwrap_or(GroupState::Dead)
    }

    fn heartbeat(&mut self, member_id: &str, generation: i32) -> Result<(), GroupError> {
        self.coordinator
            .heartbeat(self.now_ms, "g", generation, member_id, None)
    }
}

/// Two members join, the leader assigns, both get their share.
fn stable_pair(h: &mut Harness) -> (String, String, i32) {
    // Without an initial delay the first member gets generation 1 alone.
    let (a, first) = h.join_new(&["range", "roundrobin"]);
    assert_eq!(h.join_reply(first).generation_id, 1);
    assert_eq!(h.join_reply(first).members.len(), 1);
    let (b, wb) = h.join_new(&["roundrobin", "range"]);
    assert_eq!(h.state(), GroupState::PreparingRebalance);
    let (wa, _) = h.join(join_request(&a, None, &["range", "roundrobin"]));
    let ra = h.join_reply(wa);
    let rb = h.join_reply(wb);
    assert_eq!(ra.error, None);
    assert_eq!(ra.generation_id, rb.generation_id);
    assert_eq!(h.state(), GroupState::CompletingRebalance);
    let (leader, follower, leader_reply) = if ra.leader == a {
        (a.clone(), b.clone(), ra.clone())
    } else {
        (b.clone(), a.clone(), rb.clone())
    };
    assert_eq!(
        leader_reply.members.len(),
        2,
        "the leader gets every member"
    );
    let follower_reply = if ra.leader == a { rb } else { ra };
    assert!(follower_reply.members.is_empty());
    let generation = leader_reply.generation_id;
    let (wf, early) = h.sync(&follower, generation, &[]);
    assert_eq!(early, Answer::Parked, "a follower waits for the leader");
    let (wl, _) = h.sync(&leader, generation, &[(&leader, "L"), (&follower, "F")]);
    assert_eq!(h.state(), GroupState::Stable);
    assert_eq!(h.sync_reply(wf).assignment, Bytes::from("F"));
    assert_eq!(h.sync_reply(wl).assignment, Bytes::from("L"));
    (leader, follower, generation)
}

#[test]
fn two_members_rebalance_to_stable_with_their_assignments() {
    let mut h = Harness::new(0);
    let (leader, follower, generation) = stable_pair(&mut h);
    assert_eq!(h.heartbeat(&leader, generation), Ok(()));
    assert_eq!(h.heartbeat(&follower, generation), Ok(()));
    assert_eq!(
        h.heartbeat(&follower, generation - 1),
        Err(GroupError::IllegalGeneration)
    );
    assert_eq!(
        h.heartbeat("stranger", generation),
        Err(GroupError::UnknownMemberId)
    );
    // A late sync in Stable gets the stored assignment, never empty.
    let (_, late) = h.sync(&follower, generation, &[]);
    let Answer::Now(late) = late else { panic!() };
    assert_eq!(late.assignment, Bytes::from("F"));
}

#[test]
fn protocol_selection_takes_the_most_preferred_common_protocol() {
    let mut h = Harness::new(100);
    let (a, wa) = h.join_new(&["cooperative-sticky", "range"]);
    let (_, _) = h.join_new(&["range", "cooperative-sticky", "roundrobin"]);
    let (_, _) = h.join_new(&["cooperative-sticky"]);
    assert!(
        !h.replies.contains_key(&wa),
        "the initial delay holds the join"
    );
    h.tick(200);
    let reply = h.join_reply(wa);
    assert_eq!(reply.protocol_name.as_deref(), Some("cooperative-sticky"));
    let _ = a;
    // A member with nothing in common is refused.
    let (_, answer) = h.join(join_request("", None, &["other"]));
    let Answer::Now(refused) = answer else {
        panic!()
    };
    assert_eq!(refused.error, Some(GroupError::InconsistentGroupProtocol));
}

#[test]
fn heartbeat_tells_members_to_rejoin_when_a_member_joins() {
    let mut h = Harness::new(0);
    let (leader, follower, generation) = stable_pair(&mut h);
    let (_, wc) = h.join_new(&["range"]);
    assert_eq!(h.state(), GroupState::PreparingRebalance);
    assert_eq!(
        h.heartbeat(&leader, generation),
        Err(GroupError::RebalanceInProgress)
    );
    let (wl, _) = h.join(join_request(&leader, None, &["range", "roundrobin"]));
    assert!(!h.replies.contains_key(&wl), "waits for the others");
    let (wf, _) = h.join(join_request(&follower, None, &["roundrobin", "range"]));
    for w in [wl, wf, wc] {
        let reply = h.join_reply(w);
        assert_eq!(reply.error, None);
        assert_eq!(reply.generation_id, generation + 1);
        assert_eq!(reply.protocol_name.as_deref(), Some("range"));
    }
}

#[test]
fn a_member_that_misses_its_session_is_removed_and_the_rest_rebalance() {
    let mut h = Harness::new(0);
    let (leader, follower, generation) = stable_pair(&mut h);
    for _ in 0..3 {
        h.tick(SESSION as u64 / 4);
        assert_eq!(h.heartbeat(&leader, generation), Ok(()));
    }
    assert_eq!(h.state(), GroupState::Stable);
    h.tick(SESSION as u64 / 4);
    assert_eq!(
        h.state(),
        GroupState::PreparingRebalance,
        "the follower expired"
    );
    assert_eq!(
        h.heartbeat(&follower, generation),
        Err(GroupError::UnknownMemberId)
    );
    assert_eq!(
        h.heartbeat(&leader, generation),
        Err(GroupError::RebalanceInProgress)
    );
    let (w, _) = h.join(join_request(&leader, None, &["range"]));
    let reply = h.join_reply(w);
    assert_eq!(reply.generation_id, generation + 1);
    assert_eq!(reply.members.len(), 1);
    assert_eq!(reply.leader, leader);
}

#[test]
fn members_that_do_not_rejoin_are_dropped_at_the_rebalance_timeout() {
    let mut h = Harness::new(0);
    let (leader, follower, generation) = stable_pair(&mut h);
    let (_, wc) = h.join_new(&["range"]);
    let (wl, _) = h.join(join_request(&leader, None, &["range"]));
    // The follower keeps heartbeating but never rejoins.
    let mut waited = 0;
    while !h.replies.contains_key(&wl) {
        h.tick(1_000);
        waited += 1_000;
        // The follower keeps its session while the group rebalances,
        // and is out once the join phase ended without it.
        let expected = if h.replies.contains_key(&wl) {
            GroupError::UnknownMemberId
        } else {
            GroupError::RebalanceInProgress
        };
        assert_eq!(h.heartbeat(&follower, generation), Err(expected));
        assert!(waited <= REBALANCE as u64 + 1_000, "join phase never ended");
    }
    assert!(waited >= REBALANCE as u64 - 1_000);
    assert_eq!(
        h.join_reply(wl).members.len() + h.join_reply(wc).members.len(),
        2
    );
    assert_eq!(
        h.heartbeat(&follower, generation + 1),
        Err(GroupError::UnknownMemberId)
    );
}

#[test]
fn leave_group_batches_and_empties_the_group() {
    let mut h = Harness::new(0);
    let (leader, follower, _) = stable_pair(&mut h);
    let mut replies = Vec::new();
    let codes = h
        .coordinator
        .leave(
            h.now_ms,
            "g",
            &[
                (leader.clone(), None),
                ("nobody".to_string(), None),
                (follower.clone(), None),
            ],
            &mut replies,
        )
        .unwrap();
    assert_eq!(
        codes,
        vec![Ok(()), Err(GroupError::UnknownMemberId), Ok(())]
    );
    assert!(
        h.coordinator.group("g").is_none(),
        "empty with no offsets: gone"
    );
    let codes = h
        .coordinator
        .leave(h.now_ms, "g", &[(leader, None)], &mut replies);
    assert_eq!(codes, Ok(vec![Err(GroupError::UnknownMemberId)]));
    assert_eq!(
        h.coordinator.leave(h.now_ms, "", &[], &mut replies),
        Err(GroupError::InvalidGroupId)
    );
}

#[test]
fn initial_rebalance_delay_waits_for_more_members() {
    let mut h = Harness::new(3_000);
    let (_, wa) = h.join_new(&["range"]);
    h.tick(1_000);
    assert!(!h.replies.contains_key(&wa));
    let (_, wb) = h.join_new(&["range"]);
    h.tick(2_500);
    assert!(
        !h.replies.contains_key(&wa),
        "the delay restarted with the second member"
    );
    h.tick(600);
    assert_eq!(h.join_reply(wa).generation_id, 1);
    assert_eq!(h.join_reply(wb).generation_id, 1);
}

#[test]
fn static_member_restart_within_the_session_keeps_the_generation() {
    let mut h = Harness::new(100);
    let (w1, _) = h.join(join_request("", Some("inst-1"), &["range"]));
    let (w2, _) = h.join(join_request("", Some("inst-2"), &["range"]));
    h.tick(200);
    let r1 = h.join_reply(w1);
    let r2 = h.join_reply(w2);
    let generation = r1.generation_id;
    let leader = r1.leader.clone();
    for r in [&r1, &r2] {
        let assignments: Vec<(String, String)> = if r.member_id == leader {
            vec![
                (r1.member_id.clone(), "A1".into()),
                (r2.member_id.clone(), "A2".into()),
            ]
        } else {
            vec![]
        };
        let refs: Vec<(&str, &str)> = assignments
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        h.sync(&r.member_id, generation, &refs);
    }
    assert_eq!(h.state(), GroupState::Stable);
    // inst-2 restarts: new process, no member id, same instance id.
    let (_, answer) = h.join(join_request("", Some("inst-2"), &["range"]));
    let Answer::Now(rejoined) = answer else {
        panic!("no rebalance for a static rejoin")
    };
    assert_eq!(rejoined.error, None);
    assert_eq!(rejoined.generation_id, generation);
    assert_ne!(rejoined.member_id, r2.member_id);
    assert_eq!(h.state(), GroupState::Stable);
    let (_, synced) = h.sync(&rejoined.member_id, generation, &[]);
    let Answer::Now(synced) = synced else {
        panic!()
    };
    assert_eq!(synced.assignment, Bytes::from("A2"), "keeps its partitions");
    // The old process is fenced.
    let code = h
        .coordinator
        .heartbeat(h.now_ms, "g", generation, &r2.member_id, Some("inst-2"));
    assert_eq!(code, Err(GroupError::FencedInstanceId));
    assert_eq!(h.heartbeat(&r1.member_id, generation), Ok(()));
}

#[test]
fn a_restarted_static_leader_follows_before_v9_and_skips_assignment_from_v9() {
    let mut h = Harness::new(100);
    let (w1, _) = h.join(join_request("", Some("inst-1"), &["range"]));
    let (w2, _) = h.join(join_request("", Some("inst-2"), &["range"]));
    h.tick(200);
    let r1 = h.join_reply(w1);
    let r2 = h.join_reply(w2);
    let generation = r1.generation_id;
    let leader = r1.leader.clone();
    let instance = if leader == r1.member_id {
        "inst-1"
    } else {
        "inst-2"
    };
    h.sync(&r1.member_id, generation, &[]);
    h.sync(&r2.member_id, generation, &[]);
    assert_eq!(h.state(), GroupState::Stable);
    // v8: the leader named is the one before the restart.
    let (_, answer) = h.join(join_request("", Some(instance), &["range"]));
    let Answer::Now(old) = answer else {
        panic!("no rebalance for a static rejoin")
    };
    assert_eq!((old.error, old.generation_id), (None, generation));
    assert_eq!(old.leader, leader);
    assert_ne!(old.member_id, leader);
    assert!(old.members.is_empty() && !old.skip_assignment);
    // v9: it leads, gets the members, and keeps the assignment.
    let mut request = join_request("", Some(instance), &["range"]);
    request.supports_skip_assignment = true;
    let (_, answer) = h.join(request);
    let Answer::Now(new) = answer else {
        panic!("no rebalance for a static rejoin")
    };
    assert_eq!(new.leader, new.member_id);
    assert_eq!(new.members.len(), 2);
    assert!(new.skip_assignment);
    assert_eq!(h.state(), GroupState::Stable);
}

#[test]
fn join_errors_follow_kafka() {
    let mut h = Harness::new(0);
    let mut bad = join_request("", None, &["range"]);
    bad.group_id = String::new();
    assert!(matches!(h.join(bad).1, Answer::Now(r) if r.error == Some(GroupError::InvalidGroupId)));
    let mut bad = join_request("", None, &["range"]);
    bad.session_timeout_ms = 10;
    assert!(
        matches!(h.join(bad).1, Answer::Now(r) if r.error == Some(GroupError::InvalidSessionTimeout))
    );
    let bad = join_request("made-up", None, &["range"]);
    assert!(
        matches!(h.join(bad).1, Answer::Now(r) if r.error == Some(GroupError::UnknownMemberId))
    );
    let mut bad = join_request("", None, &["range"]);
    bad.protocols = vec![("range".into(), Bytes::from(vec![0u8; MEMBER_BYTES_MAX + 1]))];
    assert!(matches!(h.join(bad).1, Answer::Now(r) if r.error == Some(GroupError::InvalidRequest)));
    let bad = join_request("", None, &[]);
    assert!(
        matches!(h.join(bad).1, Answer::Now(r) if r.error == Some(GroupError::InconsistentGroupProtocol))
    );
    assert_eq!(h.coordinator.member_bytes(), 0);
}

#[test]
fn group_max_size_counts_members_waiting_for_their_id() {
    let mut h = Harness::new(0);
    h.coordinator.config.max_size = 2;
    h.join_new(&["range"]);
    h.join_new(&["range"]);
    let (_, answer) = h.join(join_request("", None, &["range"]));
    assert!(matches!(answer, Answer::Now(r) if r.error == Some(GroupError::GroupMaxSizeReached)));
    // Pending ids expire after a session.
    h.tick(0);
    let mut h = Harness::new(0);
    h.coordinator.config.max_size = 1;
    let (_, first) = h.join(join_request("", None, &["range"]));
    assert!(matches!(first, Answer::Now(r) if r.error == Some(GroupError::MemberIdRequired)));
    h.tick(SESSION as u64 + 1);
    let (_, again) = h.join(join_request("", None, &["range"]));
    assert!(matches!(again, Answer::Now(r) if r.error == Some(GroupError::MemberIdRequired)));
}

#[test]
fn sync_errors_follow_kafka() {
    let mut h = Harness::new(0);
    let (leader, _, generation) = stable_pair(&mut h);
    let (_, a) = h.sync("stranger", generation, &[]);
    assert_eq!(
        a,
        Answer::Now(SyncResponse::error(GroupError::UnknownMemberId))
    );
    let (_, a) = h.sync(&leader, generation + 5, &[]);
    assert_eq!(
        a,
        Answer::Now(SyncResponse::error(GroupError::IllegalGeneration))
    );
    // During a rebalance a sync is refused.
    h.join_new(&["range"]);
    let (_, a) = h.sync(&leader, generation, &[]);
    assert_eq!(
        a,
        Answer::Now(SyncResponse::error(GroupError::RebalanceInProgress))
    );
}

#[test]
fn commits_check_the_member_and_assign_consumers_commit_with_generation_minus_one() {
    let mut h = Harness::new(0);
    let offset = |o: i64| CommittedOffset {
        offset: o,
        leader_epoch: -1,
        metadata: "m".into(),
        commit_timestamp_ms: 5,
    };
    let simple = Committer {
        group_id: "g".into(),
        generation_id: -1,
        member_id: String::new(),
        group_instance_id: None,
    };
    let parts = vec![CommitPartition {
        topic: "t".into(),
        partition: 0,
        offset: offset(10),
    }];
    assert_eq!(
        h.coordinator.commit(h.now_ms, &simple, &parts),
        Ok(vec![Ok(())])
    );
    assert_eq!(
        h.coordinator.fetch_offsets("g", None),
        vec![(("t".to_string(), 0), Some(offset(10)))]
    );
    let (leader, _, generation) = stable_pair(&mut h);
    assert_eq!(
        h.coordinator.commit(h.now_ms, &simple, &parts),
        Err(GroupError::UnknownMemberId)
    );
    let member = Committer {
        member_id: leader.clone(),
        generation_id: generation - 1,
        ..simple.clone()
    };
    assert_eq!(
        h.coordinator.commit(h.now_ms, &member, &parts),
        Err(GroupError::IllegalGeneration)
    );
    let member = Committer {
        generation_id: generation,
        ..member
    };
    let parts = vec![CommitPartition {
        topic: "t".into(),
        partition: 0,
        offset: offset(20),
    }];
    assert_eq!(
        h.coordinator.commit(h.now_ms, &member, &parts),
        Ok(vec![Ok(())])
    );
    let fetched = h
        .coordinator
        .fetch_offsets("g", Some(&[("t".into(), 0), ("t".into(), 1)]));
    assert_eq!(fetched[0].1.as_ref().unwrap().offset, 20);
    assert_eq!(fetched[1].1, None);
    let mut big = offset(1);
    big.metadata = "x".repeat(OFFSET_METADATA_BYTES_MAX + 1);
    let parts = vec![CommitPartition {
        topic: "t".into(),
        partition: 1,
        offset: big,
    }];
    assert_eq!(
        h.coordinator.commit(h.now_ms, &member, &parts),
        Ok(vec![Err(GroupError::OffsetMetadataTooLarge)])
    );
    let unknown_group = Committer {
        group_id: "other".into(),
        ..member
    };
    assert_eq!(
        h.coordinator.commit(h.now_ms, &unknown_group, &[]),
        Err(GroupError::GroupIdNotFound)
    );
}

#[test]
fn offsets_of_an_empty_group_expire_after_retention() {
    let mut h = Harness::new(0);
    h.coordinator.config.offsets_retention_ms = 60_000;
    let simple = Committer {
        group_id: "g".into(),
        generation_id: -1,
        member_id: String::new(),
        group_instance_id: None,
    };
    let parts = vec![CommitPartition {
        topic: "t".into(),
        partition: 3,
        offset: CommittedOffset {
            offset: 1,
            leader_epoch: -1,
            metadata: String::new(),
            commit_timestamp_ms: h.now_ms as i64,
        },
    }];
    h.coordinator.commit(h.now_ms, &simple, &parts).unwrap();
    assert!(h.tick(59_000).is_empty());
    let dropped = h.tick(2_000);
    assert_eq!(
        dropped,
        vec![DroppedOffset {
            group_id: "g".into(),
            topic: "t".into(),
            partition: 3
        }]
    );
    assert!(h.coordinator.group("g").is_none());
    assert_eq!(h.coordinator.offsets_count(), 0);
}

#[test]
fn delete_group_and_offsets_refuse_active_groups() {
    let mut h = Harness::new(0);
    let mut dropped = Vec::new();
    assert_eq!(
        h.coordinator.delete_group("g", &mut dropped),
        Err(GroupError::GroupIdNotFound)
    );
    let (leader, _, generation) = stable_pair(&mut h);
    assert_eq!(
        h.coordinator.delete_group("g", &mut dropped),
        Err(GroupError::NonEmptyGroup)
    );
    let member = Committer {
        group_id: "g".into(),
        generation_id: generation,
        member_id: leader,
        group_instance_id: None,
    };
    let offset = CommittedOffset {
        offset: 1,
        leader_epoch: -1,
        metadata: String::new(),
        commit_timestamp_ms: 0,
    };
    let parts = vec![CommitPartition {
        topic: "t".into(),
        partition: 0,
        offset,
    }];
    h.coordinator.commit(h.now_ms, &member, &parts).unwrap();
    // Test metadata is not a consumer subscription: refuse.
    assert_eq!(
        h.coordinator
            .delete_offsets("g", &[("t".into(), 0)], &mut dropped),
        Err(GroupError::NonEmptyGroup)
    );
    assert_eq!(h.coordinator.describe("g").state, GroupState::Stable);
    assert_eq!(h.coordinator.describe("nope").state, GroupState::Dead);
}

#[test]
fn an_emptied_group_keeps_its_protocol_type_as_kafka_does() {
    let mut h = Harness::new(0);
    let (leader, follower, generation) = stable_pair(&mut h);
    let member = Committer {
        group_id: "g".into(),
        generation_id: generation,
        member_id: leader.clone(),
        group_instance_id: None,
    };
    let parts = vec![CommitPartition {
        topic: "t".into(),
        partition: 0,
        offset: CommittedOffset {
            offset: 1,
            leader_epoch: -1,
            metadata: String::new(),
            commit_timestamp_ms: 0,
        },
    }];
    h.coordinator.commit(h.now_ms, &member, &parts).unwrap();
    let mut replies = Vec::new();
    let leaving = [(leader, None), (follower, None)];
    h.coordinator
        .leave(h.now_ms, "g", &leaving, &mut replies)
        .unwrap();
    h.absorb(replies);
    assert_eq!(h.state(), GroupState::Empty);
    let listed = h.coordinator.list();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].protocol_type, "consumer");
    assert_eq!(h.coordinator.describe("g").protocol_type, "consumer");
}

#[test]
fn without_initial_delay_consumers_starting_together_share_the_first_generation() {
    let mut h = Harness::new(0);
    let protocols = ["range"];
    let id_of = |answer: Answer<JoinResponse>| match answer {
        Answer::Now(response) => {
            assert_eq!(response.error, Some(GroupError::MemberIdRequired));
            response.member_id
        }
        Answer::Parked => panic!("a new member is answered at once"),
    };
    let (_, first) = h.join(join_request("", None, &protocols));
    let a = id_of(first);
    let (_, first) = h.join(join_request("", None, &protocols));
    let b = id_of(first);
    // `a` joins with its id while `b` holds one: the join phase waits
    // for `b` instead of giving `a` a generation alone, which `b`'s
    // join would end at once with a rebalance (a revoke for `a`).
    let (wa, answer) = h.join(join_request(&a, None, &protocols));
    assert!(matches!(answer, Answer::Parked));
    assert!(!h.replies.contains_key(&wa));
    let (wb, _) = h.join(join_request(&b, None, &protocols));
    let (ra, rb) = (h.join_reply(wa), h.join_reply(wb));
    assert_eq!((ra.error, rb.error), (None, None));
    assert_eq!((ra.generation_id, rb.generation_id), (1, 1));
    assert_eq!(
        ra.members.len() + rb.members.len(),
        2,
        "the leader sees both"
    );
    // A consumer that arrives after the first generation formed starts
    // the next one, as in Kafka, where a 0 ms initial delay ends at once.
    let (c, wc) = h.join_new(&protocols);
    assert!(
        !h.replies.contains_key(&wc),
        "{c} waits for the others to rejoin"
    );
    assert_eq!(h.state(), GroupState::PreparingRebalance);
}

#[test]
fn consumer_subscriptions_decode() {
    let mut meta = vec![0u8, 1];
    meta.extend_from_slice(&2i32.to_be_bytes());
    for t in ["ab", "c"] {
        meta.extend_from_slice(&(t.len() as i16).to_be_bytes());
        meta.extend_from_slice(t.as_bytes());
    }
    meta.extend_from_slice(&(-1i32).to_be_bytes());
    assert_eq!(
        consumer_subscription_topics(&meta),
        Some(vec!["ab".into(), "c".into()])
    );
    assert_eq!(consumer_subscription_topics(&meta[..5]), None);
    assert_eq!(
        consumer_subscription_topics(&[0, 1, 0x7f, 0xff, 0xff, 0xff]),
        None
    );
}

#[test]
fn memory_stays_bounded_under_a_flood_of_joins() {
    let mut h = Harness::new(0);
    h.coordinator.config.max_size = 50;
    for _ in 0..10_000 {
        let (_, answer) = h.join(join_request("", None, &["range"]));
        if let Answer::Now(r) = answer {
            assert!(
                r.error == Some(GroupError::MemberIdRequired)
                    || r.error == Some(GroupError::GroupMaxSizeReached)
            );
        }
    }
    assert!(h.coordinator.group("g").unwrap().pending.len() <= 50);
    h.tick(SESSION as u64 + 1);
    assert!(
        h.coordinator.group("g").is_none(),
        "every pending id expired"
    );
}

/// The membership records the coordinator queued, drained.
fn recorded(h: &mut Harness) -> Vec<(String, Option<GroupMetadata>)> {
    h.coordinator
        .take_metadata_changes(|_| true)
        .into_iter()
        .map(|(id, m)| (id, m.map(|m| (*m).clone())))
        .collect()
}

/// The one record queued for group "g".
fn recorded_one(h: &mut Harness) -> GroupMetadata {
    let mut taken = recorded(h);
    assert_eq!(taken.len(), 1, "{taken:?}");
    let (id, metadata) = taken.pop().unwrap();
    assert_eq!(id, "g");
    metadata.expect("a record, not a tombstone")
}

fn commit_as(h: &mut Harness, member_id: &str, generation: i32) -> CommittedOffset {
    let offset = CommittedOffset {
        offset: 42,
        leader_epoch: -1,
        metadata: String::new(),
        commit_timestamp_ms: h.now_ms as i64,
    };
    let committer = Committer {
        group_id: "g".into(),
        generation_id: generation,
        member_id: member_id.into(),
        group_instance_id: None,
    };
    let parts = vec![CommitPartition {
        topic: "t".into(),
        partition: 0,
        offset: offset.clone(),
    }];
    assert_eq!(
        h.coordinator.commit(h.now_ms, &committer, &parts),
        Ok(vec![Ok(())])
    );
    offset
}

fn leave_all(h: &mut Harness, members: &[&str]) {
    let leaving: Vec<(String, Option<String>)> =
        members.iter().map(|m| (m.to_string(), None)).collect();
    let mut replies = Vec::new();
    h.coordinator
        .leave(h.now_ms, "g", &leaving, &mut replies)
        .unwrap();
    h.absorb(replies);
}

#[test]
fn membership_is_recorded_when_a_rebalance_completes_and_when_the_group_empties() {
    let mut h = Harness::new(0);
    let (leader, follower, generation) = stable_pair(&mut h);
    let stable = recorded_one(&mut h);
    let protocol = h.coordinator.describe("g").protocol_name;
    assert_eq!(stable.protocol_type, "consumer");
    assert_eq!(stable.generation_id, generation);
    assert_eq!(stable.protocol_name.as_deref(), Some(protocol.as_str()));
    assert_eq!(stable.leader_id.as_deref(), Some(leader.as_str()));
    assert_eq!(stable.state_timestamp_ms, h.now_ms as i64);
    let mut members: Vec<(&str, &[u8], Bytes)> = stable
        .members
        .iter()
        .map(|m| {
            assert_eq!(m.session_timeout_ms, SESSION);
            assert_eq!(m.rebalance_timeout_ms, REBALANCE);
            assert_eq!(m.client_host, "/127.0.0.1");
            (
                m.member_id.as_str(),
                &m.assignment[..],
                m.subscription.clone(),
            )
        })
        .collect();
    members.sort();
    let mut expected = vec![
        (
            leader.as_str(),
            &b"L"[..],
            Bytes::from(format!("meta-{protocol}-{leader}")),
        ),
        (
            follower.as_str(),
            &b"F"[..],
            Bytes::from(format!("meta-{protocol}-{follower}")),
        ),
    ];
    expected.sort();
    assert_eq!(members, expected);

    // Heartbeats and commits change no membership: nothing is recorded.
    assert_eq!(h.heartbeat(&follower, generation), Ok(()));
    commit_as(&mut h, &leader, generation);
    assert!(recorded(&mut h).is_empty());

    h.now_ms += 1_000;
    leave_all(&mut h, &[&leader, &follower]);
    let empty = recorded_one(&mut h);
    assert_eq!(
        empty,
        GroupMetadata {
            protocol_type: "consumer".into(),
            generation_id: generation + 1,
            protocol_name: None,
            leader_id: None,
            state_timestamp_ms: h.now_ms as i64,
            members: Vec::new(),
        }
    );

    let mut dropped = Vec::new();
    assert_eq!(h.coordinator.delete_group("g", &mut dropped), Ok(()));
    assert_eq!(recorded(&mut h), vec![("g".to_string(), None)]);
}

#[test]
fn a_dropped_group_leaves_a_tombstone_and_a_moved_group_leaves_nothing() {
    let mut h = Harness::new(0);
    let (leader, follower, _) = stable_pair(&mut h);
    recorded_one(&mut h);
    // Empty with nothing committed: the group goes, and so does its record.
    leave_all(&mut h, &[&leader, &follower]);
    assert!(h.coordinator.group("g").is_none());
    assert_eq!(recorded(&mut h), vec![("g".to_string(), None)]);

    // A group whose offsets partition another broker leads now: its
    // records are that broker's to write.
    let mut h = Harness::new(0);
    stable_pair(&mut h);
    assert!(h.coordinator.has_metadata_changes());
    let mut replies = Vec::new();
    h.coordinator
        .forget(|_| true, GroupError::NotCoordinator, &mut replies);
    assert!(recorded(&mut h).is_empty());
}

#[test]
fn a_loaded_empty_group_keeps_its_protocol_type_generation_and_empty_time() {
    let mut h = Harness::new(0);
    let (leader, follower, generation) = stable_pair(&mut h);
    let stable = recorded_one(&mut h);
    let offset = commit_as(&mut h, &leader, generation);
    h.now_ms += 1_000;
    let emptied_at = h.now_ms;
    leave_all(&mut h, &[&leader, &follower]);
    let empty = recorded_one(&mut h);

    // A restart replays the log in order: the Stable record, the commit,
    // the Empty record.
    let mut restarted = Harness::new(0);
    restarted.now_ms = h.now_ms + 60_000;
    let now = restarted.now_ms;
    let c = &mut restarted.coordinator;
    c.load_group_metadata("g", Some(stable), now);
    c.load_offset("g", "t", 0, Some(offset.clone()));
    c.load_group_metadata("g", Some(empty.clone()), now);
    assert!(
        recorded(&mut restarted).is_empty(),
        "loading writes nothing"
    );
    assert_eq!(restarted.state(), GroupState::Empty);
    assert_eq!(
        restarted.coordinator.list(),
        vec![ListedGroup {
            group_id: "g".to_string(),
            protocol_type: "consumer".to_string(),
            state: "Empty",
            group_type: "classic",
        }]
    );
    let described = restarted.coordinator.describe("g");
    assert_eq!(described.protocol_type, "consumer");
    assert_eq!(described.generation_id, empty.generation_id);
    assert!(described.members.is_empty());
    assert_eq!(
        restarted.coordinator.fetch_offsets("g", None),
        vec![(("t".to_string(), 0), Some(offset))]
    );
    // Offset retention counts from when the group became empty.
    assert_eq!(
        restarted.coordinator.group("g").unwrap().empty_since_ms,
        Some(emptied_at)
    );
    // The next member starts the generation after the restored one.
    let (_, waiter) = restarted.join_new(&["range"]);
    assert_eq!(
        restarted.join_reply(waiter).generation_id,
        empty.generation_id + 1
    );
}

#[test]
fn loaded_members_stay_until_their_sessions_expire_as_after_a_kafka_coordinator_change() {
    let mut h = Harness::new(0);
    let (leader, follower, generation) = stable_pair(&mut h);
    let stable = recorded_one(&mut h);

    let mut restarted = Harness::new(0);
    restarted.now_ms = h.now_ms + 60_000;
    let now = restarted.now_ms;
    restarted
        .coordinator
        .load_group_metadata("g", Some(stable.clone()), now);
    assert!(recorded(&mut restarted).is_empty());
    assert_eq!(restarted.state(), GroupState::Stable);
    // The members carry on in their generation with their assignments.
    assert_eq!(restarted.heartbeat(&leader, generation), Ok(()));
    assert_eq!(restarted.heartbeat(&follower, generation), Ok(()));
    let (_, answer) = restarted.sync(&follower, generation, &[]);
    let Answer::Now(response) = answer else {
        panic!("a Stable group answers SyncGroup at once")
    };
    assert_eq!(response.assignment, Bytes::from("F"));
    let described = restarted.coordinator.describe("g");
    assert_eq!(described.members.len(), 2);

    // Nobody heartbeats: both sessions end and the group is Empty in the
    // next generation, which is recorded.
    restarted.tick(SESSION as u64 + 1);
    assert_eq!(restarted.state(), GroupState::Dead, "no offsets: gone");
    assert_eq!(recorded(&mut restarted), vec![("g".to_string(), None)]);

    // With an offset the group stays, Empty, recorded at the next generation.
    let mut restarted = Harness::new(0);
    let now = restarted.now_ms;
    restarted
        .coordinator
        .load_group_metadata("g", Some(stable), now);
    commit_as(&mut restarted, &leader, generation);
    restarted.tick(SESSION as u64 + 1);
    assert_eq!(restarted.state(), GroupState::Empty);
    let empty = recorded_one(&mut restarted);
    assert_eq!(empty.generation_id, generation + 1);
    assert_eq!(empty.protocol_type, "consumer");
    assert!(empty.members.is_empty());
}

#[test]
fn a_loaded_tombstone_undoes_the_groups_record_but_not_its_offsets() {
    let mut h = Harness::new(0);
    let (leader, _, generation) = stable_pair(&mut h);
    let stable = recorded_one(&mut h);
    let offset = commit_as(&mut h, &leader, generation);

    let mut restarted = Harness::new(0);
    let now = restarted.now_ms;
    let c = &mut restarted.coordinator;
    c.load_group_metadata("g", Some(stable.clone()), now);
    c.load_group_metadata("g", None, now);
    assert!(c.group("g").is_none(), "nothing committed: gone");
    c.load_group_metadata("g", Some(stable), now);
    c.load_offset("g", "t", 0, Some(offset));
    c.load_group_metadata("g", None, now);
    assert_eq!(restarted.state(), GroupState::Empty);
    assert_eq!(restarted.coordinator.describe("g").protocol_type, "");
    assert_eq!(restarted.coordinator.member_bytes(), 0);
    assert!(recorded(&mut restarted).is_empty());
}

pub(crate) fn share_join(
    coordinator: &mut Coordinator,
    now_ms: u64,
    member: &str,
    topics: &[&str],
) -> i32 {
    let topic_counts: BTreeMap<String, i32> = [("a".to_string(), 3), ("b".to_string(), 1)]
        .into_iter()
        .collect();
    let answer = coordinator
        .share_heartbeat(
            now_ms,
            crate::share::ShareHeartbeat {
                group_id: "sg".to_string(),
                member_id: member.to_string(),
                member_epoch: 0,
                rack_id: None,
                subscribed_topic_names: Some(topics.iter().map(|t| t.to_string()).collect()),
                client_id: format!("client-{member}"),
                client_host: "/127.0.0.1".to_string(),
                session_timeout_ms: None,
            },
            &topic_counts,
        )
        .expect("joins");
    answer.member_epoch
}

#[test]
fn a_share_group_with_members_is_not_deleted_and_a_refused_first_heartbeat_leaves_no_group() {
    let mut coordinator = Coordinator::new(GroupConfig::default(), 1);
    share_join(&mut coordinator, 1_000, "m1", &["a"]);
    assert_eq!(
        coordinator.delete_share_group("sg"),
        Err(GroupError::NonEmptyGroup)
    );
    let refused = coordinator.share_heartbeat(
        1_000,
        crate::share::ShareHeartbeat {
            group_id: "other".to_string(),
            member_id: "m".to_string(),
            member_epoch: 0,
            subscribed_topic_names: None,
            ..Default::default()
        },
        &BTreeMap::new(),
    );
    assert_eq!(
        refused.map(|a| a.member_epoch),
        Err(GroupError::InvalidRequest)
    );
    assert!(coordinator.share_group("other").is_none());
    assert!(!coordinator.metadata_changes().any(|g| g == "other"));
}
