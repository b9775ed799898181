//! Share groups' membership (KIP-932) under seeded faults: the broker's
//! group coordinator (`groups::coordinator`) taking ShareGroupHeartbeats
//! from simulated members over a network that delays and loses messages,
//! with a simulated `__consumer_offsets` log whose unsynced tail a
//! coordinator failover loses; members crash (silent until their session
//! ends), leave, and come back as new members.
//!
//! Members behave as librdkafka's share consumer does: they heartbeat
//! every interval, take the epoch each answer gives, and on
//! FENCED_MEMBER_EPOCH or UNKNOWN_MEMBER_ID join again with epoch 0. A
//! heartbeat that gets no answer is sent again with the same epoch.
//!
//! The rules checked at every heartbeat the coordinator takes, and at the
//! end:
//! - the coordinator never forgets an epoch it gave a member (a member
//!   fenced for an epoch above the one the coordinator knows);
//! - it never forgets a member whose session cannot have ended (unknown
//!   to it although the member's last answered heartbeat was sent less
//!   than a session ago);
//! - once faults stop, the coordinator's members are exactly the live
//!   members, each at the epoch it holds.
//!
//! The coordinator answers a heartbeat only once the records it wrote are
//! durable, as the broker does; [`GroupMutation::AnswerBeforeDurable`]
//! breaks that on purpose, and the seeds must catch it.

use std::collections::{BTreeMap, BTreeSet};

use groups::coordinator::{Coordinator, GroupConfig};
use groups::error::GroupError;
use groups::load;

use crate::group_net::{heartbeat_due, GroupNet};
use groups::share::{ShareGroupRecord, ShareHeartbeat, ShareHeartbeatAnswer};

pub use crate::consumer_groups::GroupMutation;

const GROUP: &str = "sim-share-group";
const HEARTBEAT_MS: u64 = 500;
const SESSION_MS: u64 = 6_000;
const REQUEST_TIMEOUT_MS: u64 = 2_000;
const TICK_MS: u64 = 10;
const FAULTS_MS: u64 = 40_000;
const SETTLE_MS: u64 = 30_000;

/// What one seed did.
#[derive(Debug, Default, Clone)]
pub struct MembershipReport {
    pub heartbeats: u64,
    pub failovers: u64,
    pub crashes: u64,
    pub leaves: u64,
    /// Members told to join again (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID):
    /// those whose session ended, or that left.
    pub rejoins: u64,
    pub lost_messages: u64,
    /// Members the coordinator removed when their session ended.
    pub expired: u64,
    pub final_epoch: i32,
}

#[derive(Debug)]
struct Member {
    id: String,
    epoch: i32,
    alive: bool,
    next_ms: u64,
    waiting_until: Option<u64>,
    incarnation: u64,
    sent_ms: u64,
    /// When the last heartbeat that was answered was sent (`None`: none
    /// since it joined last).
    answered_sent_ms: Option<u64>,
}

impl Member {
    fn restart(&mut self, index: usize, now: u64) {
        self.alive = true;
        self.incarnation += 1;
        self.id = format!("s{index}-{}", self.incarnation);
        self.epoch = 0;
        self.waiting_until = None;
        self.answered_sent_ms = None;
        self.next_ms = now;
    }
}

#[derive(Debug)]
enum Message {
    Request {
        member: usize,
        incarnation: u64,
        request: Box<ShareHeartbeat>,
    },
    Answer {
        member: usize,
        incarnation: u64,
        outcome: Result<ShareHeartbeatAnswer, GroupError>,
    },
}

struct Sim {
    rng: fastrand::Rng,
    now: u64,
    coordinator: Coordinator,
    log: Vec<ShareGroupRecord>,
    durable: usize,
    net: GroupNet<Message>,
    members: Vec<Member>,
    topics: BTreeMap<String, i32>,
    mutation: GroupMutation,
    report: MembershipReport,
}

fn config() -> GroupConfig {
    let mut config = GroupConfig::default();
    config.share.session_timeout_ms = SESSION_MS;
    config.share.heartbeat_interval_ms = HEARTBEAT_MS;
    config
}

fn trace(what: impl FnOnce() -> String) {
    if std::env::var("STROM_SIM_TRACE").is_ok() {
        eprintln!("{}", what());
    }
}

impl Sim {
    fn send(&mut self, message: Message) {
        let faults = self.now < FAULTS_MS;
        self.net.send(&mut self.rng, self.now, faults, message);
    }

    /// Member `index` sends a heartbeat at `epoch` (0 joins with the
    /// subscription, -1 leaves).
    fn heartbeat(&mut self, index: usize, epoch: i32) {
        let m = &self.members[index];
        let request = Box::new(ShareHeartbeat {
            group_id: GROUP.into(),
            member_id: m.id.clone(),
            member_epoch: epoch,
            subscribed_topic_names: (epoch == 0).then(|| self.topics.keys().cloned().collect()),
            client_id: format!("sim-{index}"),
            client_host: "/127.0.0.1".into(),
            ..Default::default()
        });
        let incarnation = m.incarnation;
        self.send(Message::Request {
            member: index,
            incarnation,
            request,
        });
    }

    fn known(&self, member_id: &str) -> Option<i32> {
        self.coordinator
            .share_group(GROUP)
            .and_then(|g| g.members.get(member_id))
            .map(|m| m.member_epoch)
    }

    /// The coordinator takes a heartbeat: its records go to the log, the
    /// answer waits until they are durable.
    fn serve(
        &mut self,
        member: usize,
        incarnation: u64,
        request: ShareHeartbeat,
    ) -> Result<(), String> {
        self.report.heartbeats += 1;
        let known_epoch = self.known(&request.member_id);
        let asked_epoch = request.member_epoch;
        let member_id = request.member_id.clone();
        let outcome = self
            .coordinator
            .share_heartbeat(self.now, request, &self.topics);
        let m = &self.members[member];
        let current = m.alive && m.incarnation == incarnation;
        match (&outcome, known_epoch) {
            (Err(GroupError::FencedMemberEpoch), Some(known)) if asked_epoch > known => {
                return Err(format!(
                    "at {} ms member {member_id} heartbeats at epoch {asked_epoch}, which the coordinator gave it and forgot (it knows {known})",
                    self.now
                ));
            }
            (Err(GroupError::UnknownMemberId), None)
                if current
                    && asked_epoch > 0
                    && m.answered_sent_ms
                        .is_some_and(|sent| self.now < sent + SESSION_MS) =>
            {
                return Err(format!(
                    "at {} ms the coordinator forgot member {member_id} (epoch {asked_epoch}), whose last answered heartbeat went at {:?} ms, within a session",
                    self.now, m.answered_sent_ms
                ));
            }
            _ => {}
        }
        self.log
            .extend(self.coordinator.take_share_records(|_| true));
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

    fn sync(&mut self) {
        self.durable = self.log.len();
        let faults = self.now < FAULTS_MS;
        self.net
            .release(&mut self.rng, self.now, faults, self.durable);
    }

    /// The coordinator's broker dies: the unsynced tail is lost with the
    /// answers waiting on it; a new coordinator replays the durable log.
    fn failover(&mut self) {
        trace(|| {
            format!(
                "{} failover, durable {} of {}",
                self.now,
                self.durable,
                self.log.len()
            )
        });
        self.report.failovers += 1;
        self.log.truncate(self.durable);
        self.net.drop_held();
        let mut coordinator = Coordinator::new(config(), self.rng.u64(..));
        for (key, value) in &self.log {
            let replayed = load::replay(&mut coordinator, key, value.as_deref(), self.now);
            assert_eq!(
                replayed,
                load::Replayed::GroupMetadata,
                "a record written here replays"
            );
        }
        self.coordinator = coordinator;
    }

    fn deliver(&mut self, message: Message) -> Result<(), String> {
        trace(|| format!("{} deliver {message:?}", self.now));
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
                        m.answered_sent_ms = Some(m.sent_ms);
                        m.epoch = answer.member_epoch;
                    }
                    Err(GroupError::FencedMemberEpoch | GroupError::UnknownMemberId) => {
                        self.report.rejoins += 1;
                        m.epoch = 0;
                        m.answered_sent_ms = None;
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
        for index in 0..self.members.len() {
            let m = &mut self.members[index];
            if !heartbeat_due(m.alive, m.waiting_until, m.next_ms, self.now) {
                continue;
            }
            m.waiting_until = Some(self.now + REQUEST_TIMEOUT_MS);
            m.sent_ms = self.now;
            let epoch = m.epoch;
            self.heartbeat(index, epoch);
        }
        self.report.expired += self.coordinator.expire_share_members(self.now).len() as u64;
        self.log
            .extend(self.coordinator.take_share_records(|_| true));
        if self.now < FAULTS_MS {
            self.faults();
        }
        Ok(())
    }

    fn faults(&mut self) {
        let roll = self.rng.u32(0..10_000);
        if roll < 8 {
            self.failover();
        } else if roll < 20 {
            // A member crashes (silent from then on) or, as a new
            // process, joins again.
            let index = self.rng.usize(0..self.members.len());
            let now = self.now;
            let m = &mut self.members[index];
            if m.alive {
                self.report.crashes += 1;
                m.alive = false;
            } else {
                m.restart(index, now);
            }
        } else if roll < 26 {
            // A member leaves (epoch -1) and is gone until it restarts.
            let index = self.rng.usize(0..self.members.len());
            let m = &mut self.members[index];
            if m.alive && m.epoch > 0 {
                self.report.leaves += 1;
                m.alive = false;
                self.heartbeat(index, -1);
            }
        }
    }

    /// The coordinator's members are the live ones, each at its epoch.
    fn settled(&self) -> bool {
        let Some(group) = self.coordinator.share_group(GROUP) else {
            return false;
        };
        let live: BTreeSet<&str> = self
            .members
            .iter()
            .filter(|m| m.alive)
            .map(|m| m.id.as_str())
            .collect();
        let known: BTreeSet<&str> = group.members.keys().map(String::as_str).collect();
        live == known
            && self
                .members
                .iter()
                .filter(|m| m.alive)
                .all(|m| m.epoch > 0 && group.members[&m.id].member_epoch == m.epoch)
    }
}

/// Runs one seed: members join, faults for a while, then the group must
/// settle.
pub fn run_share_membership_seed(
    seed: u64,
    mutation: GroupMutation,
) -> Result<MembershipReport, String> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let member_count = 2 + rng.usize(0..4);
    let topics: BTreeMap<String, i32> = [
        ("orders".to_string(), 1 + rng.i32(0..6)),
        ("payments".to_string(), 1 + rng.i32(0..4)),
    ]
    .into_iter()
    .collect();
    let members = (0..member_count)
        .map(|i| Member {
            id: format!("s{i}-0"),
            epoch: 0,
            alive: true,
            next_ms: rng.u64(0..1_000),
            waiting_until: None,
            incarnation: 0,
            sent_ms: 0,
            answered_sent_ms: None,
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
        report: MembershipReport::default(),
    };
    while sim.now < FAULTS_MS {
        sim.step()?;
    }
    for index in 0..sim.members.len() {
        let now = sim.now;
        let m = &mut sim.members[index];
        if !m.alive {
            m.restart(index, now);
        }
    }
    let deadline = sim.now + SETTLE_MS;
    while !sim.settled() {
        if sim.now >= deadline {
            return Err(format!(
                "not settled {SETTLE_MS} ms after the faults stopped: members {:?}, coordinator {:?}",
                sim.members,
                sim.coordinator.share_group(GROUP)
            ));
        }
        sim.step()?;
    }
    sim.report.final_epoch = sim
        .coordinator
        .share_group(GROUP)
        .map_or(0, |g| g.group_epoch);
    // The log holds only the group's own records, and replays to the
    // membership the coordinator has once synced.
    sim.sync();
    if let Some((key, _)) = sim.log.iter().find(|(key, _)| {
        !matches!(
            groups::records::parse_key(key),
            Some(groups::records::OffsetsKey::Share(ref k)) if k.group_id() == GROUP
        )
    }) {
        return Err(format!("a record that is not the group's: {key:?}"));
    }
    let mut replayed = Coordinator::new(config(), 0);
    for (key, value) in &sim.log {
        load::replay(&mut replayed, key, value.as_deref(), sim.now);
    }
    let epochs = |c: &Coordinator| -> BTreeMap<String, i32> {
        c.share_group(GROUP)
            .map(|g| {
                g.members
                    .values()
                    .map(|m| (m.member_id.clone(), m.member_epoch))
                    .collect()
            })
            .unwrap_or_default()
    };
    if epochs(&replayed) != epochs(&sim.coordinator) {
        return Err(format!(
            "the log replays to members {:?}, the coordinator has {:?}",
            epochs(&replayed),
            epochs(&sim.coordinator)
        ));
    }
    sim.report.lost_messages = sim.net.lost;
    Ok(sim.report)
}
