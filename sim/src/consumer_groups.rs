//! Consumer-protocol groups (KIP-848) under seeded faults: the broker's
//! coordinator (`groups::coordinator`) driven by simulated members over a
//! simulated network that delays and loses messages, with a simulated
//! `__consumer_offsets` log whose unsynced tail a coordinator failover
//! loses, members that crash, and topics that grow.
//!
//! Members behave as librdkafka's consumer does: they heartbeat every
//! interval (at once after giving partitions up), own what each answer
//! assigns and give up what it leaves out, and on FENCED_MEMBER_EPOCH or
//! UNKNOWN_MEMBER_ID give up everything and join again. A heartbeat that
//! gets no answer is sent again with the same epoch.
//!
//! The rules checked after every step:
//! - the coordinator never forgets an epoch it gave a member (a member
//!   fenced for an epoch above the one the coordinator knows);
//! - no partition is owned by two members of the group at once, by what
//!   the members themselves believe they own (that is what they consume
//!   and commit); a member the coordinator removed (its session or its
//!   time to revoke ran out) may not know it yet, but its commits are
//!   refused and its next heartbeat fences it;
//! - the coordinator never records a partition for two members;
//! - once faults stop, the group settles within a bound: every partition
//!   owned by exactly one member, each member at the target epoch.
//!
//! The coordinator answers a heartbeat only once the records it wrote are
//! durable, as the broker does; [`GroupMutation::AnswerBeforeDurable`]
//! breaks that on purpose, and the seeds must catch it.

use std::collections::{BTreeMap, BTreeSet};

use groups::coordinator::{
    ConsumerHeartbeat, ConsumerRecord, Coordinator, GroupConfig, Partitions, TopicInfo, Topics,
};
use groups::error::GroupError;
use groups::load;

use crate::group_net::{heartbeat_due, GroupNet};

const GROUP: &str = "sim-group";
const HEARTBEAT_MS: u64 = 500;
const SESSION_MS: u64 = 6_000;
/// A member's wait for an answer before it sends the heartbeat again.
const REQUEST_TIMEOUT_MS: u64 = 2_000;
/// Steps of simulated time.
const TICK_MS: u64 = 10;
/// How long faults go on; then the group must settle within
/// [`SETTLE_MS`].
const FAULTS_MS: u64 = 40_000;
const SETTLE_MS: u64 = 30_000;

/// A rule broken on purpose, to show the checks catch it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupMutation {
    None,
    /// Heartbeats answered before their records are durable: a failover
    /// then loses what members were told.
    AnswerBeforeDurable,
}

/// What one seed did.
#[derive(Debug, Default, Clone)]
pub struct GroupReport {
    pub heartbeats: u64,
    pub failovers: u64,
    pub crashes: u64,
    pub fenced: u64,
    pub lost_messages: u64,
    pub topic_growths: u64,
    pub final_epoch: i32,
}

#[derive(Debug)]
struct Member {
    id: String,
    epoch: i32,
    owned: Partitions,
    alive: bool,
    /// When the next heartbeat goes.
    next_ms: u64,
    /// A heartbeat in flight: when it gives up waiting.
    waiting_until: Option<u64>,
    /// Incarnation: an answer for an earlier one is dropped.
    incarnation: u64,
    /// When the heartbeat in flight was sent.
    sent_ms: u64,
    /// When the last heartbeat that was answered was sent: past a session
    /// from it the member counts its partitions lost, as the coordinator
    /// may have expired it by then.
    answered_sent_ms: u64,
    subscription_sent: bool,
}

impl Member {
    /// A crashed member's process started again: a new member id, joining.
    fn restart(&mut self, index: usize, now: u64) {
        self.alive = true;
        self.incarnation += 1;
        self.id = format!("m{index}-{}", self.incarnation);
        self.epoch = 0;
        self.subscription_sent = false;
        self.waiting_until = None;
        self.answered_sent_ms = now;
        self.next_ms = now;
    }
}

/// A message on the way, delivered at `at_ms`.
#[derive(Debug)]
enum Message {
    Request {
        member: usize,
        incarnation: u64,
        request: Box<ConsumerHeartbeat>,
    },
    Answer {
        member: usize,
        incarnation: u64,
        outcome: Result<groups::coordinator::ConsumerHeartbeatAnswer, GroupError>,
    },
}

struct Sim {
    rng: fastrand::Rng,
    now: u64,
    coordinator: Coordinator,
    /// The log: records, and how many of them are durable.
    log: Vec<ConsumerRecord>,
    durable: usize,
    net: GroupNet<Message>,
    members: Vec<Member>,
    topics: Topics,
    mutation: GroupMutation,
    report: GroupReport,
}

fn config() -> GroupConfig {
    let mut config = GroupConfig::default();
    config.consumer.session_timeout_ms = SESSION_MS;
    config.consumer.min_session_timeout_ms = SESSION_MS;
    config.consumer.heartbeat_interval_ms = HEARTBEAT_MS;
    config.consumer.min_heartbeat_interval_ms = HEARTBEAT_MS;
    config
}

impl Sim {
    fn names(&self) -> impl Fn(u128) -> Option<String> + '_ {
        |id| {
            self.topics
                .iter()
                .find(|(_, t)| t.id == id)
                .map(|(n, _)| n.clone())
        }
    }

    fn send(&mut self, message: Message) {
        let faults = self.now < FAULTS_MS;
        self.net.send(&mut self.rng, self.now, faults, message);
    }

    fn heartbeat_of(&self, index: usize) -> ConsumerHeartbeat {
        let m = &self.members[index];
        let joining = m.epoch == 0;
        ConsumerHeartbeat {
            group_id: GROUP.into(),
            member_id: m.id.clone(),
            member_epoch: m.epoch,
            rebalance_timeout_ms: if joining { 5_000 } else { -1 },
            subscribed_topic_names: (joining || !m.subscription_sent)
                .then(|| self.topics.keys().cloned().collect()),
            owned: Some(m.owned.clone()),
            ..Default::default()
        }
    }

    /// The coordinator takes a heartbeat: its records go to the log, the
    /// answer waits until they are durable.
    fn serve(
        &mut self,
        member: usize,
        incarnation: u64,
        request: ConsumerHeartbeat,
    ) -> Result<(), String> {
        self.report.heartbeats += 1;
        let known_epoch = self
            .coordinator
            .consumer_group(GROUP)
            .and_then(|g| g.members.get(&request.member_id))
            .map(|m| m.member_epoch);
        let asked_epoch = request.member_epoch;
        let member_id = request.member_id.clone();
        let outcome = self
            .coordinator
            .consumer_heartbeat(self.now, request, &self.topics);
        // A member's epoch comes only from the coordinator's answers: one
        // above what the coordinator knows is an epoch it forgot.
        if let (Err(GroupError::FencedMemberEpoch), Some(known)) = (&outcome, known_epoch) {
            if asked_epoch > known {
                return Err(format!(
                    "at {} ms member {member_id} heartbeats at epoch {asked_epoch}, which the coordinator gave it and forgot (it knows {known})",
                    self.now
                ));
            }
        }
        self.log
            .extend(self.coordinator.take_consumer_records(|_| true));
        let answer = Message::Answer {
            member,
            incarnation,
            outcome,
        };
        let (faults, before_durable) = (
            self.now < FAULTS_MS,
            self.mutation == GroupMutation::AnswerBeforeDurable,
        );
        let upto = self.log.len();
        self.net.answer(
            &mut self.rng,
            self.now,
            faults,
            before_durable,
            upto,
            answer,
        );
        Ok(())
    }

    /// The log syncs: answers whose records are durable go out.
    fn sync(&mut self) {
        self.durable = self.log.len();
        let faults = self.now < FAULTS_MS;
        self.net
            .release(&mut self.rng, self.now, faults, self.durable);
    }

    /// The coordinator's broker dies: the unsynced tail is lost with the
    /// answers waiting on it; a new coordinator replays the durable log.
    fn failover(&mut self) {
        if std::env::var("STROM_SIM_TRACE").is_ok() {
            eprintln!(
                "{} failover, durable {} of {}",
                self.now,
                self.durable,
                self.log.len()
            );
        }
        self.report.failovers += 1;
        self.log.truncate(self.durable);
        self.net.drop_held();
        let mut coordinator = Coordinator::new(config(), self.rng.u64(..));
        {
            let names = self.names();
            for (key, value) in &self.log {
                let replayed = load::replay_with_topics(
                    &mut coordinator,
                    key,
                    value.as_deref(),
                    self.now,
                    &names,
                );
                assert_eq!(
                    replayed,
                    load::Replayed::GroupMetadata,
                    "a record written here replays"
                );
            }
        }
        self.coordinator = coordinator;
    }

    fn deliver(&mut self, message: Message) -> Result<(), String> {
        if std::env::var("STROM_SIM_TRACE").is_ok() {
            eprintln!("{} deliver {message:?}", self.now);
        }
        match message {
            Message::Request {
                member,
                incarnation,
                request,
            } => return self.serve(member, incarnation, *request),
            Message::Answer {
                member,
                incarnation,
                outcome,
            } => {
                let m = &mut self.members[member];
                if !m.alive || m.incarnation != incarnation || m.waiting_until.is_none() {
                    return Ok(());
                }
                m.waiting_until = None;
                m.next_ms = self.now + HEARTBEAT_MS;
                match outcome {
                    Ok(answer) => {
                        m.answered_sent_ms = m.sent_ms;
                        m.subscription_sent = true;
                        m.epoch = answer.member_epoch;
                        if let Some(assigned) = answer.assignment {
                            let gave_up = m.owned.iter().any(|(t, ps)| {
                                ps.iter()
                                    .any(|p| !assigned.get(t).is_some_and(|a| a.contains(p)))
                            });
                            m.owned = assigned;
                            if gave_up {
                                // Acknowledges the revocation at once.
                                m.next_ms = self.now;
                            }
                        }
                    }
                    Err(GroupError::FencedMemberEpoch | GroupError::UnknownMemberId) => {
                        self.report.fenced += 1;
                        m.owned.clear();
                        m.epoch = 0;
                        m.subscription_sent = false;
                        m.next_ms = self.now;
                    }
                    Err(_) => {}
                }
            }
        }
        Ok(())
    }

    fn step(&mut self) -> Result<(), String> {
        self.now += TICK_MS;
        for message in self.net.due(self.now) {
            self.deliver(message)?;
        }
        if self.rng.u32(0..100) < 10 {
            self.sync();
        }
        // Members heartbeat.
        for index in 0..self.members.len() {
            let m = &mut self.members[index];
            if !heartbeat_due(m.alive, m.waiting_until, m.next_ms, self.now) {
                continue;
            }
            if self.now >= m.answered_sent_ms + SESSION_MS && !m.owned.is_empty() {
                // No answer for a session: the partitions are lost.
                m.owned.clear();
            }
            m.waiting_until = Some(self.now + REQUEST_TIMEOUT_MS);
            m.sent_ms = self.now;
            let incarnation = m.incarnation;
            let request = Box::new(self.heartbeat_of(index));
            self.send(Message::Request {
                member: index,
                incarnation,
                request,
            });
        }
        self.coordinator.tick(self.now, &mut Vec::new());
        self.log
            .extend(self.coordinator.take_consumer_records(|_| true));
        if self.now < FAULTS_MS {
            self.faults();
        }
        self.check()
    }

    fn faults(&mut self) {
        let roll = self.rng.u32(0..10_000);
        if roll < 8 {
            self.failover();
        } else if roll < 20 {
            // A member crashes (owns nothing from then on) and, as a new
            // process, joins again later.
            let index = self.rng.usize(0..self.members.len());
            let m = &mut self.members[index];
            if m.alive {
                self.report.crashes += 1;
                m.alive = false;
                m.owned.clear();
            } else {
                m.restart(index, self.now);
            }
        } else if roll < 24 {
            // A topic gets more partitions.
            if let Some(topic) = self.topics.values_mut().next() {
                if topic.partitions < 12 {
                    topic.partitions += 1;
                    self.report.topic_growths += 1;
                }
            }
        }
    }

    fn check(&self) -> Result<(), String> {
        // A member the coordinator has removed (its session or its time
        // to revoke ran out) may not know yet; its commits are refused
        // (UNKNOWN_MEMBER_ID) and its next heartbeat fences it. The rule
        // is over the members the coordinator knows.
        let known = |id: &str| {
            self.coordinator
                .consumer_group(GROUP)
                .is_some_and(|g| g.members.contains_key(id))
        };
        let mut owner: BTreeMap<(String, i32), &str> = BTreeMap::new();
        for m in self.members.iter().filter(|m| m.alive && known(&m.id)) {
            for (topic, ps) in &m.owned {
                for p in ps {
                    if let Some(other) = owner.insert((topic.clone(), *p), &m.id) {
                        return Err(format!(
                            "at {} ms {topic}-{p} is owned by {other} and {}",
                            self.now, m.id
                        ));
                    }
                }
            }
        }
        if let Some(group) = self.coordinator.consumer_group(GROUP) {
            let twice = group.double_owned();
            if !twice.is_empty() {
                return Err(format!(
                    "at {} ms the coordinator records {twice:?} for two members",
                    self.now
                ));
            }
        }
        Ok(())
    }

    /// Every partition owned by one live member, each at the target
    /// epoch.
    fn settled(&self) -> bool {
        let Some(group) = self.coordinator.consumer_group(GROUP) else {
            return false;
        };
        let live: Vec<&Member> = self.members.iter().filter(|m| m.alive).collect();
        let owned: usize = live
            .iter()
            .map(|m| m.owned.values().map(BTreeSet::len).sum::<usize>())
            .sum();
        let total: usize = self.topics.values().map(|t| t.partitions as usize).sum();
        owned == total
            && live
                .iter()
                .all(|m| m.epoch == group.assignment_epoch && group.members.contains_key(&m.id))
            && group.members.len() == live.len()
    }
}

/// Runs one seed: members join, faults for a while, then the group must
/// settle.
pub fn run_group_seed(seed: u64, mutation: GroupMutation) -> Result<GroupReport, String> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let member_count = 2 + rng.usize(0..4);
    let mut topics = Topics::new();
    topics.insert(
        "orders".into(),
        TopicInfo {
            id: 11,
            partitions: 2 + rng.i32(0..6),
        },
    );
    topics.insert(
        "payments".into(),
        TopicInfo {
            id: 12,
            partitions: 1 + rng.i32(0..4),
        },
    );
    let members = (0..member_count)
        .map(|i| Member {
            id: format!("m{i}-0"),
            epoch: 0,
            owned: Partitions::new(),
            alive: true,
            next_ms: rng.u64(0..1_000),
            waiting_until: None,
            incarnation: 0,
            sent_ms: 0,
            answered_sent_ms: 0,
            subscription_sent: false,
        })
        .collect();
    let mut sim = Sim {
        coordinator: Coordinator::new(config(), seed),
        rng,
        now: 0,
        log: Vec::new(),
        durable: 0,
        net: GroupNet::new(),
        members,
        topics,
        mutation,
        report: GroupReport::default(),
    };
    while sim.now < FAULTS_MS {
        sim.step()?;
    }
    // Faults stop: crashed members come back, and the group settles.
    for index in 0..sim.members.len() {
        let m = &mut sim.members[index];
        if !m.alive {
            m.restart(index, sim.now);
        }
    }
    let deadline = sim.now + SETTLE_MS;
    while !sim.settled() {
        if sim.now >= deadline {
            return Err(format!(
                "not settled {SETTLE_MS} ms after the faults stopped: members {:?}, coordinator {:?}",
                sim.members,
                sim.coordinator.consumer_group(GROUP)
            ));
        }
        sim.step()?;
    }
    sim.report.final_epoch = sim
        .coordinator
        .consumer_group(GROUP)
        .map_or(0, |g| g.group_epoch);
    // The log holds only the group's own records.
    if let Some((key, _)) = sim.log.iter().find(|(key, _)| {
        !matches!(
            groups::records::parse_key(key),
            Some(groups::records::OffsetsKey::Consumer(ref k)) if k.group_id() == GROUP
        )
    }) {
        return Err(format!("a record that is not the group's: {key:?}"));
    }
    sim.report.lost_messages = sim.net.lost;
    Ok(sim.report)
}
