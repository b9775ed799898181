//! The controller's placement decisions, as plain functions of the image:
//! where a new partition's replicas go, and who leads a partition when its
//! leader is fenced or comes back. No I/O, so they are tested directly.

use std::collections::BTreeMap;

use crate::metadata::{BrokerMeta, MetadataImage, MetadataRecord, PartitionState};

/// Why the controller refuses a change; the broker answers each with the
/// Kafka error of the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    ElectionNotNeeded,
    EligibleLeadersNotAvailable,
    FencedLeaderEpoch,
    IneligibleReplica,
    InvalidReplicaAssignment,
    InvalidRequest,
    InvalidUpdateVersion,
    NoReassignmentInProgress,
    PreferredLeaderNotAvailable,
    UnknownTopicOrPartition,
}

/// A leader's ISR change for one partition (Kafka's AlterPartition
/// shape): taken only when the leader and both epochs are still current.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterPartition {
    pub topic: String,
    pub partition: i32,
    pub leader: i32,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub isr: Vec<i32>,
}

/// Replica and leader counts of each live broker.
#[derive(Debug, Clone, Default)]
struct Load {
    replicas: usize,
    leaders: usize,
}

/// Picks replicas for `count` new partitions with `replication_factor`
/// replicas each among the live brokers, striped as Kafka stripes them:
/// the leader (first replica) on the broker leading fewest of these
/// partitions, then fewest in the cluster; the others on the brokers
/// holding fewest of these partitions' replicas, then fewest in the
/// cluster, a rack not used yet by this partition first (when racks are
/// given); ties go to the lower broker id. So 10 partitions with one
/// replica on 3 empty brokers lead 4-3-3, a topic's leaders go round the
/// brokers, and a broker that joins leads its share of each new topic
/// first but not all of it. `None` when fewer live brokers than replicas
/// exist.
pub fn place_replicas(
    image: &MetadataImage,
    count: usize,
    replication_factor: usize,
) -> Option<Vec<Vec<i32>>> {
    let mut load: BTreeMap<i32, Load> = image
        .live_brokers()
        .map(|b| (b.id, Load::default()))
        .collect();
    if replication_factor == 0 || load.len() < replication_factor {
        return None;
    }
    for topic in image.topics.values() {
        for partition in &topic.partitions {
            if let Some(l) = load.get_mut(&partition.leader) {
                l.leaders += 1;
            }
            for replica in &partition.replicas {
                if let Some(l) = load.get_mut(replica) {
                    l.replicas += 1;
                }
            }
        }
    }
    let rack = |id: i32| image.brokers.get(&id).and_then(|b| b.rack.clone());
    // This topic's own load: what stripes its partitions over the brokers.
    let mut own: BTreeMap<i32, Load> = load.keys().map(|&id| (id, Load::default())).collect();
    let mut placed = Vec::with_capacity(count);
    for _ in 0..count {
        let leader = *load
            .iter()
            .min_by_key(|(&id, l)| {
                (
                    own[&id].leaders,
                    l.leaders,
                    own[&id].replicas,
                    l.replicas,
                    id,
                )
            })
            .map(|(id, _)| id)
            .expect("at least one live broker");
        let mut replicas = vec![leader];
        while replicas.len() < replication_factor {
            let used_racks: Vec<Option<String>> = replicas.iter().map(|&r| rack(r)).collect();
            let next = *load
                .iter()
                .filter(|(id, _)| !replicas.contains(id))
                .min_by_key(|(&id, l)| {
                    let rack = rack(id);
                    let rack_used = rack.is_some() && used_racks.contains(&rack);
                    (rack_used, own[&id].replicas, l.replicas, id)
                })
                .map(|(id, _)| id)
                .expect("enough live brokers");
            replicas.push(next);
        }
        for (i, replica) in replicas.iter().enumerate() {
            for l in [
                load.get_mut(replica).expect("placed on a live broker"),
                own.get_mut(replica).expect("placed on a live broker"),
            ] {
                l.replicas += 1;
                if i == 0 {
                    l.leaders += 1;
                }
            }
        }
        placed.push(replicas);
    }
    Some(placed)
}

/// A partition's state after a leader change to `leader` (-1: none).
fn led_by(state: &PartitionState, leader: i32, isr: Vec<i32>) -> PartitionState {
    checked(
        state,
        PartitionState {
            leader,
            leader_epoch: state.leader_epoch + i32::from(leader != state.leader),
            isr,
            partition_epoch: state.partition_epoch + 1,
            ..state.clone()
        },
    )
}

/// `after`, once the rules every change of a partition keeps hold (in
/// release builds too: a broken one would lose acknowledged records): the
/// partition epoch grows; the leader epoch never goes back and grows with
/// every change of leader; the ISR holds only replicas; a leader is an
/// in-sync replica.
fn checked(before: &PartitionState, after: PartitionState) -> PartitionState {
    assert!(
        after.partition_epoch > before.partition_epoch,
        "partition epoch not grown: {before:?} -> {after:?}"
    );
    assert!(
        after.leader_epoch >= before.leader_epoch
            && (after.leader == before.leader || after.leader_epoch > before.leader_epoch),
        "leader changed without a new leader epoch: {before:?} -> {after:?}"
    );
    assert!(
        after.isr.iter().all(|r| after.replicas.contains(r)),
        "an ISR member that is no replica: {after:?}"
    );
    assert!(
        after.leader == -1 || after.isr.contains(&after.leader),
        "a leader out of the ISR: {after:?}"
    );
    after
}

/// The records that fence broker `id`: it leaves every ISR it is in
/// with other members, and each partition it leads moves to a live ISR
/// member (the first in replica order), or has no leader when none is
/// left (the last ISR member stays in the ISR, as in Kafka, so that it
/// can lead again when it returns).
pub fn fence(image: &MetadataImage, id: i32, unclean_default: bool) -> Vec<MetadataRecord> {
    let mut records = vec![MetadataRecord::BrokerFencing { id, fenced: true }];
    for topic in image.topics.values() {
        for (index, state) in topic.partitions.iter().enumerate() {
            if !state.replicas.contains(&id) {
                continue;
            }
            let others: Vec<i32> = state.isr.iter().copied().filter(|&r| r != id).collect();
            let live_other = state
                .replicas
                .iter()
                .copied()
                .find(|r| others.contains(r) && *r != id && image.is_live(*r));
            let unclean = unclean_allowed(topic, unclean_default)
                .then(|| {
                    state
                        .replicas
                        .iter()
                        .copied()
                        .find(|&r| r != id && image.is_live(r))
                })
                .flatten();
            let changed = match (state.leader == id, live_other) {
                (true, Some(next)) => led_by(state, next, others),
                (true, None) => match unclean {
                    Some(next) => {
                        tracing::warn!(topic = %topic.name, partition = index, leader = next, "unclean leader election: a replica out of sync leads");
                        led_by(state, next, vec![next])
                    }
                    None => led_by(state, -1, state.isr.clone()),
                },
                (false, _) if state.isr.contains(&id) && !others.is_empty() => {
                    led_by(state, state.leader, others)
                }
                _ => continue,
            };
            records.push(MetadataRecord::PartitionChanged {
                name: topic.name.clone(),
                index: index as i32,
                state: changed,
            });
        }
    }
    records
}

/// The records for broker `id` whose data dir refuses writes (Kafka's
/// offline log dir): it leaves every ISR that has another member, and a
/// live in-sync member takes each of its leaderships; where it is the
/// last ISR member it stays (it holds everything committed, and serves
/// reads). It stays registered and unfenced: it goes on following, and
/// rejoins each ISR once its data dir takes writes and it caught up.
pub fn storage_full(image: &MetadataImage, id: i32) -> Vec<MetadataRecord> {
    let mut records = Vec::new();
    for topic in image.topics.values() {
        for (index, state) in topic.partitions.iter().enumerate() {
            if !state.isr.contains(&id) || state.isr.len() == 1 {
                continue;
            }
            let others: Vec<i32> = state.isr.iter().copied().filter(|&r| r != id).collect();
            let changed = if state.leader == id {
                let Some(next) = state
                    .replicas
                    .iter()
                    .copied()
                    .find(|r| others.contains(r) && image.is_live(*r))
                else {
                    // No live member to take over: it keeps leading (and
                    // refusing produces) rather than leave none.
                    continue;
                };
                led_by(state, next, others)
            } else {
                led_by(state, state.leader, others)
            };
            records.push(MetadataRecord::PartitionChanged {
                name: topic.name.clone(),
                index: index as i32,
                state: changed,
            });
        }
    }
    records
}

/// Whether `topic` allows an unclean leader election: its own
/// `unclean.leader.election.enable`, else the broker default.
pub fn unclean_allowed(topic: &crate::metadata::TopicMeta, default: bool) -> bool {
    topic
        .configs
        .get("unclean.leader.election.enable")
        .map_or(default, |v| v == "true")
}

/// The records that unfence broker `id`: partitions without a leader
/// whose ISR names it get it as leader (or, where unclean elections are
/// allowed, any partition without a leader it holds a replica of).
pub fn unfence(image: &MetadataImage, id: i32, unclean_default: bool) -> Vec<MetadataRecord> {
    let mut records = vec![MetadataRecord::BrokerFencing { id, fenced: false }];
    for topic in image.topics.values() {
        for (index, state) in topic.partitions.iter().enumerate() {
            if state.leader != -1 || !state.replicas.contains(&id) {
                continue;
            }
            let state = if state.isr.contains(&id) {
                led_by(state, id, state.isr.clone())
            } else if unclean_allowed(topic, unclean_default) {
                led_by(state, id, vec![id])
            } else {
                continue;
            };
            records.push(MetadataRecord::PartitionChanged {
                name: topic.name.clone(),
                index: index as i32,
                state,
            });
        }
    }
    records
}

/// What a broker's heartbeat says of it, beside its registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    /// Its process found the data dir as a clean stop left it.
    pub clean: bool,
    /// Its process found the data dir new (emptied or replaced).
    pub new_directory: bool,
    /// It is stopping (SIGTERM): fence it and move its leaderships now.
    pub shutting_down: bool,
    /// Its data dir refuses writes for want of space.
    pub storage_full: bool,
}

/// Whether the process of `node_id` started as `incarnation` may act on
/// the leaderships `image` gives that node: only once the image holds this
/// incarnation's registration, unfenced. Before that the image's
/// leaderships are an earlier process's, decided before the controller
/// knew how this one found its data dir (it may have lost what that one
/// held): leading on them could make the followers cut their logs to an
/// empty one.
pub fn may_lead(image: &MetadataImage, node_id: i32, incarnation: u64) -> bool {
    image
        .brokers
        .get(&node_id)
        .is_some_and(|b| b.incarnation == incarnation && !b.fenced)
}

/// Whether the process of `node_id` started as `incarnation` may record
/// its data dir as the cluster's (`meta.properties`), which makes its next
/// start no longer a new directory: only once `image` holds this
/// incarnation's registration. Until then the controller may not know the
/// directory is new (its registration not decided yet: a paused or
/// unreachable controller), and a crash and restart would then register as
/// a crash with its data intact, in sync and even leading, with nothing.
pub fn may_record_directory(image: &MetadataImage, node_id: i32, incarnation: u64) -> bool {
    image
        .brokers
        .get(&node_id)
        .is_some_and(|b| b.incarnation == incarnation)
}

/// What identifies a broker's registration apart from its incarnation.
fn same_registration(a: &BrokerMeta, b: &BrokerMeta) -> bool {
    (&a.host, a.port, &a.rack, &a.controller_address)
        == (&b.host, b.port, &b.rack, &b.controller_address)
}

/// The controller's decision on a heartbeat of `broker`, on `image`: a
/// new incarnation (or changed address) registers, returning as its
/// start-up found its data dir ([`register`]; a broker never seen has
/// nothing to lose); a registered one that stops is fenced ([`fence`]),
/// one fenced that heartbeats again is unfenced ([`unfence`]), one whose
/// disk is full leaves the ISRs ([`storage_full`]); else nothing.
pub fn heartbeat(
    image: &MetadataImage,
    broker: &BrokerMeta,
    arrival: Arrival,
    unclean_default: bool,
) -> Vec<MetadataRecord> {
    let id = broker.id;
    let known = image.brokers.get(&id);
    let registered =
        known.is_some_and(|b| same_registration(b, broker) && b.incarnation == broker.incarnation);
    let fenced = known.is_none_or(|b| b.fenced);
    if !registered {
        let how = match known {
            None => Return::Clean,
            Some(_) if arrival.new_directory => Return::EmptyDirectory,
            Some(_) if !arrival.clean => Return::Crashed,
            Some(_) => Return::Clean,
        };
        tracing::info!(broker = id, host = %broker.host, port = broker.port, returns = ?how, "broker registers");
        let mut records = vec![MetadataRecord::BrokerRegistered(broker.clone())];
        let registered = image.with(&records);
        records.extend(register(&registered, id, how, unclean_default));
        records
    } else if arrival.shutting_down && !fenced {
        tracing::info!(broker = id, "broker stops: fenced, its leaderships move");
        fence(image, id, unclean_default)
    } else if fenced && !arrival.shutting_down {
        tracing::info!(broker = id, "broker heartbeats again: unfenced");
        unfence(image, id, unclean_default)
    } else if arrival.storage_full {
        storage_full(image, id)
    } else {
        Vec::new()
    }
}

/// How a broker returns with a new incarnation, as its registration says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Return {
    /// Its previous process stopped cleanly (or it was never registered):
    /// its logs hold all it acknowledged.
    Clean,
    /// Its previous process crashed: its logs hold what was durable, which
    /// is all it acknowledged under acks=all, but it may lack what the
    /// other in-sync replicas took meanwhile.
    Crashed,
    /// Its data dir is new: whatever the earlier incarnation held is gone.
    EmptyDirectory,
}

/// The records that register broker `id` returning as `how`, decided on
/// `image` that already holds its registration. A broker that crashed or
/// lost its disk never leads or stays in sync on the word of its earlier
/// incarnation: it leaves every ISR that has another member (and hands
/// its leaderships to a live one of them; with none live the partition
/// waits without a leader for one to return), and rejoins each ISR once
/// it caught up, as any follower does. Where it is the last ISR member,
/// a crashed broker holds everything acknowledged (acks=all waits until
/// it is durable on every ISR member) and leads, at a new leader epoch;
/// one that lost its disk holds nothing, so the partition is left
/// without a leader and with an empty ISR (only an unclean election,
/// where the topic allows it, brings it back). A clean return is
/// [`unfence`]'s: leaderless partitions whose ISR names it get it back.
/// Every leadership this broker holds after the registration is at a new
/// leader epoch, even the same one it held before.
pub fn register(
    image: &MetadataImage,
    id: i32,
    how: Return,
    unclean_default: bool,
) -> Vec<MetadataRecord> {
    let mut records = Vec::new();
    for topic in image.topics.values() {
        let unclean = unclean_allowed(topic, unclean_default);
        for (index, state) in topic.partitions.iter().enumerate() {
            if !state.replicas.contains(&id) {
                continue;
            }
            let in_sync = state.isr.contains(&id);
            let others: Vec<i32> = state.isr.iter().copied().filter(|&r| r != id).collect();
            let changed = match how {
                _ if state.leader == -1 && !in_sync && unclean => {
                    tracing::warn!(topic = %topic.name, partition = index, leader = id, "unclean leader election: a replica out of sync leads");
                    lead(state, id, vec![id])
                }
                Return::Clean if in_sync && (state.leader == -1 || state.leader == id) => {
                    lead(state, id, state.isr.clone())
                }
                Return::Clean => continue,
                Return::Crashed | Return::EmptyDirectory if in_sync && !others.is_empty() => {
                    if state.leader == id || state.leader == -1 {
                        let next = state
                            .replicas
                            .iter()
                            .copied()
                            .find(|r| others.contains(r) && image.is_live(*r))
                            .unwrap_or(-1);
                        led_by(state, next, others)
                    } else {
                        led_by(state, state.leader, others)
                    }
                }
                Return::Crashed if in_sync => lead(state, id, state.isr.clone()),
                Return::EmptyDirectory if in_sync => {
                    if unclean {
                        tracing::warn!(topic = %topic.name, partition = index, leader = id, "unclean leader election: a replica whose data dir was emptied leads");
                        lead(state, id, vec![id])
                    } else {
                        tracing::error!(topic = %topic.name, partition = index, broker = id, "the only in-sync replica returned with an emptied data dir: the partition has no leader until an unclean election");
                        led_by(state, -1, Vec::new())
                    }
                }
                Return::Crashed | Return::EmptyDirectory => continue,
            };
            records.push(MetadataRecord::PartitionChanged {
                name: topic.name.clone(),
                index: index as i32,
                state: changed,
            });
        }
    }
    records
}

/// `id` leads at the next leader epoch, with `isr`: a new incarnation's
/// leadership is never the old one's, even where `id` led before.
fn lead(state: &PartitionState, id: i32, isr: Vec<i32>) -> PartitionState {
    checked(
        state,
        PartitionState {
            leader: id,
            leader_epoch: state.leader_epoch + 1,
            isr,
            partition_epoch: state.partition_epoch + 1,
            ..state.clone()
        },
    )
}

/// An election for one partition (ElectLeaders, or the controller's own
/// preferred-leader rebalance): the record moving leadership, or the
/// Kafka error code. `preferred`: to the first replica, if it is live and
/// in sync (ELECTION_NOT_NEEDED when it leads already,
/// PREFERRED_LEADER_NOT_AVAILABLE otherwise); else unclean: a partition
/// without a leader gets a live replica even out of sync
/// (ELECTION_NOT_NEEDED when it has a leader).
pub fn elect(
    image: &MetadataImage,
    topic: &str,
    partition: i32,
    preferred: bool,
) -> Result<MetadataRecord, Refused> {
    let state = image
        .topics
        .get(topic)
        .and_then(|t| t.partition(partition))
        .ok_or(Refused::UnknownTopicOrPartition)?;
    let changed = if preferred {
        let first = *state
            .replicas
            .first()
            .ok_or(Refused::PreferredLeaderNotAvailable)?;
        if state.leader == first {
            return Err(Refused::ElectionNotNeeded);
        }
        if !image.is_live(first) || !state.isr.contains(&first) {
            return Err(Refused::PreferredLeaderNotAvailable);
        }
        led_by(state, first, state.isr.clone())
    } else {
        if state.leader >= 0 {
            return Err(Refused::ElectionNotNeeded);
        }
        let next = state
            .replicas
            .iter()
            .copied()
            .find(|&r| image.is_live(r))
            .ok_or(Refused::EligibleLeadersNotAvailable)?;
        let isr = if state.isr.contains(&next) {
            state.isr.clone()
        } else {
            vec![next]
        };
        led_by(state, next, isr)
    };
    Ok(MetadataRecord::PartitionChanged {
        name: topic.to_string(),
        index: partition,
        state: changed,
    })
}

/// The controller's preferred-leader rebalance
/// (`auto.leader.rebalance.enable`): every partition whose first replica
/// is live and in sync but does not lead moves back to it.
pub fn preferred_leaders(image: &MetadataImage) -> Vec<MetadataRecord> {
    image
        .topics
        .values()
        .flat_map(|topic| {
            (0..topic.partitions.len() as i32)
                .filter_map(move |p| elect(image, &topic.name, p, true).ok())
        })
        .collect()
}

/// The record of a leader's ISR change, if the controller takes it
/// (Kafka's AlterPartition checks): the sender still leads at the leader
/// epoch it names, the partition epoch is current (else another change
/// came first), the new ISR holds the leader and only replicas, and every
/// member it adds is a live broker. Else the Kafka error code.
pub fn alter_partition(
    image: &MetadataImage,
    alter: &AlterPartition,
) -> Result<MetadataRecord, Refused> {
    let state = image
        .topics
        .get(&alter.topic)
        .and_then(|t| t.partition(alter.partition))
        .ok_or(Refused::UnknownTopicOrPartition)?;
    if state.leader != alter.leader || state.leader_epoch != alter.leader_epoch {
        return Err(Refused::FencedLeaderEpoch);
    }
    if state.partition_epoch != alter.partition_epoch {
        return Err(Refused::InvalidUpdateVersion);
    }
    if !alter.isr.contains(&alter.leader) || !alter.isr.iter().all(|r| state.replicas.contains(r)) {
        return Err(Refused::InvalidRequest);
    }
    if alter
        .isr
        .iter()
        .any(|r| !state.isr.contains(r) && !image.is_live(*r))
    {
        return Err(Refused::IneligibleReplica);
    }
    let mut isr = alter.isr.clone();
    isr.sort_unstable();
    isr.dedup();
    let changed = checked(
        state,
        PartitionState {
            isr,
            partition_epoch: state.partition_epoch + 1,
            ..state.clone()
        },
    );
    Ok(MetadataRecord::PartitionChanged {
        name: alter.topic.clone(),
        index: alter.partition,
        state: completed(image, changed),
    })
}

/// A reassignment request refused: the Kafka error code and why.
pub type ReassignRefusal = (Refused, String);

/// AlterPartitionReassignments for one partition, decided on `image`:
/// the record that starts moving the partition to `target` (its replicas,
/// the preferred leader first; the caller has checked them: registered
/// brokers, none twice), or with `target` `None` cancels the move
/// under way; `None` when nothing changes (the partition has those
/// replicas already, or is moving to them).
///
/// Kafka's way (KIP-455): while it moves, the partition's replicas are
/// the target's followed by the current ones not in it; `adding` are the
/// target's new replicas (they fetch the whole log from the leader) and
/// `removing` the replicas that leave. It completes — replicas become the
/// target, the ISR keeps only target members and a leader outside the
/// target hands over to an in-sync target replica — when every target
/// replica is in the ISR: at once if they all are, else when the leader's
/// AlterPartition adds the last one ([`alter_partition`]). A broker that
/// is no longer a replica then deletes its copy. A new target for a
/// partition still moving replaces the old one (its added replicas the
/// new one drops leave at completion). Cancelling goes back to the
/// replicas before the move (the added ones leave the ISR and the
/// replicas at once; a leader among them hands over).
pub fn reassign(
    image: &MetadataImage,
    topic: &str,
    partition: i32,
    target: Option<&[i32]>,
) -> Result<Option<MetadataRecord>, ReassignRefusal> {
    let state = image
        .topics
        .get(topic)
        .and_then(|t| t.partition(partition))
        .ok_or_else(|| {
            (
                Refused::UnknownTopicOrPartition,
                format!("partition {partition} of topic {topic:?} does not exist"),
            )
        })?;
    let changed = match target {
        None => {
            if !state.reassigning() {
                return Err((
                    Refused::NoReassignmentInProgress,
                    format!("partition {partition} of {topic:?} is not being reassigned"),
                ));
            }
            cancelled(image, state).ok_or_else(|| {
                (
                    Refused::InvalidReplicaAssignment,
                    format!(
                        "cancelling would leave partition {partition} of {topic:?} without \
                         an in-sync replica: only the replicas being added are in sync"
                    ),
                )
            })?
        }
        Some(target) => {
            if target == state.target_replicas().as_slice() {
                return Ok(None);
            }
            let original = state.original_replicas();
            let mut replicas = target.to_vec();
            replicas.extend(state.replicas.iter().filter(|r| !target.contains(r)));
            let started = PartitionState {
                adding: target
                    .iter()
                    .copied()
                    .filter(|r| !original.contains(r))
                    .collect(),
                removing: replicas
                    .iter()
                    .copied()
                    .filter(|r| !target.contains(r))
                    .collect(),
                replicas,
                partition_epoch: state.partition_epoch + 1,
                ..state.clone()
            };
            completed(image, started)
        }
    };
    Ok(Some(MetadataRecord::PartitionChanged {
        name: topic.to_string(),
        index: partition,
        state: changed,
    }))
}

/// `state` with its reassignment completed if every target replica is in
/// sync (else unchanged): the target's replicas, an ISR of target members,
/// and a leader among them (the current one if it stays, else the first
/// live in-sync target replica; the leader epoch bumps).
fn completed(image: &MetadataImage, state: PartitionState) -> PartitionState {
    if !state.reassigning() {
        return state;
    }
    let target = state.target_replicas();
    if !target.iter().all(|r| state.isr.contains(r)) {
        return state;
    }
    let isr: Vec<i32> = state
        .isr
        .iter()
        .copied()
        .filter(|r| target.contains(r))
        .collect();
    let leader = if target.contains(&state.leader) {
        state.leader
    } else {
        target
            .iter()
            .copied()
            .find(|&r| image.is_live(r))
            .unwrap_or(-1)
    };
    PartitionState {
        replicas: target,
        leader,
        leader_epoch: state.leader_epoch + i32::from(leader != state.leader),
        isr,
        partition_epoch: state.partition_epoch,
        adding: Vec::new(),
        removing: Vec::new(),
    }
}

/// `state` with its reassignment cancelled: the replicas before it, the
/// added ones out of the ISR, a leader among the original in-sync
/// replicas (the current one if it stays). `None` when no original
/// replica is in sync.
fn cancelled(image: &MetadataImage, state: &PartitionState) -> Option<PartitionState> {
    let replicas = state.original_replicas();
    let isr: Vec<i32> = state
        .isr
        .iter()
        .copied()
        .filter(|r| replicas.contains(r))
        .collect();
    if isr.is_empty() {
        return None;
    }
    let leader = if replicas.contains(&state.leader) {
        state.leader
    } else {
        replicas
            .iter()
            .copied()
            .find(|&r| isr.contains(&r) && image.is_live(r))
            .unwrap_or(-1)
    };
    Some(PartitionState {
        replicas,
        leader,
        leader_epoch: state.leader_epoch + i32::from(leader != state.leader),
        isr,
        partition_epoch: state.partition_epoch + 1,
        adding: Vec::new(),
        removing: Vec::new(),
    })
}

/// The partitions being reassigned, with their state: all of them, or
/// those of `wanted` (ListPartitionReassignments).
pub fn reassignments(
    image: &MetadataImage,
    wanted: Option<&[(String, i32)]>,
) -> Vec<(String, i32, PartitionState)> {
    image
        .partition_states()
        .filter(|(topic, index, state)| {
            state.reassigning()
                && wanted.is_none_or(|w| w.iter().any(|(t, p)| *t == topic.name && p == index))
        })
        .map(|(topic, index, state)| (topic.name.clone(), index, state.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::testing::topic_meta;
    use crate::metadata::{BrokerMeta, TopicMeta};

    fn broker(id: i32, rack: Option<&str>) -> MetadataRecord {
        MetadataRecord::BrokerRegistered(BrokerMeta {
            id,
            incarnation: 1,
            host: "127.0.0.1".to_string(),
            port: 9000 + id as u16,
            rack: rack.map(str::to_string),
            controller_address: String::new(),
            fenced: false,
            endpoints: Vec::new(),
        })
    }

    fn cluster(brokers: &[(i32, Option<&str>)]) -> MetadataImage {
        let records: Vec<MetadataRecord> = brokers.iter().map(|&(id, r)| broker(id, r)).collect();
        MetadataImage::replay(1, &records)
    }

    fn create(image: &mut MetadataImage, name: &str, replicas: Vec<Vec<i32>>) {
        let cores = vec![0; replicas.len()];
        image.apply(&MetadataRecord::TopicCreated(TopicMeta {
            partitions: replicas.into_iter().map(PartitionState::new).collect(),
            ..topic_meta(name, &cores)
        }));
    }

    fn leaders_per_broker(image: &MetadataImage) -> BTreeMap<i32, usize> {
        let mut counts = BTreeMap::new();
        for topic in image.topics.values() {
            for p in &topic.partitions {
                *counts.entry(p.leader).or_default() += 1;
            }
        }
        counts
    }

    #[test]
    fn ten_partitions_on_three_brokers_lead_four_three_three() {
        let mut image = cluster(&[(1, None), (2, None), (3, None)]);
        let placed = place_replicas(&image, 10, 1).unwrap();
        create(&mut image, "t", placed);
        assert_eq!(
            leaders_per_broker(&image),
            BTreeMap::from([(1, 4), (2, 3), (3, 3)])
        );
    }

    #[test]
    fn replicas_spread_and_leaders_balance_with_three_replicas() {
        let mut image = cluster(&[(1, None), (2, None), (3, None)]);
        let placed = place_replicas(&image, 6, 3).unwrap();
        for replicas in &placed {
            let mut sorted = replicas.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, vec![1, 2, 3], "{placed:?}");
        }
        create(&mut image, "t", placed);
        assert_eq!(
            leaders_per_broker(&image),
            BTreeMap::from([(1, 2), (2, 2), (3, 2)])
        );
    }

    #[test]
    fn topics_created_after_a_join_stripe_their_leaders() {
        let mut image = cluster(&[(1, None), (2, None), (3, None)]);
        let placed = place_replicas(&image, 9, 1).unwrap();
        create(&mut image, "a", placed);
        image.apply(&broker(4, None));
        // The new broker leads first, but a topic's leaders go round the
        // brokers: not every partition lands on the one leading least.
        let placed = place_replicas(&image, 3, 1).unwrap();
        assert_eq!(placed, vec![vec![4], vec![1], vec![2]]);
        create(&mut image, "b", placed);
        for (name, count, replication) in [("c", 4, 1), ("d", 8, 2), ("e", 6, 3)] {
            let placed = place_replicas(&image, count, replication).unwrap();
            let mut leaders: BTreeMap<i32, usize> = BTreeMap::new();
            for replicas in &placed {
                *leaders.entry(replicas[0]).or_default() += 1;
                let mut distinct = replicas.clone();
                distinct.sort_unstable();
                distinct.dedup();
                assert_eq!(distinct.len(), replication, "{placed:?}");
            }
            let (min, max) = (
                leaders.values().min().unwrap(),
                leaders.values().max().unwrap(),
            );
            assert_eq!(leaders.len(), 4.min(count), "topic {name}: {placed:?}");
            assert!(max - min <= 1, "topic {name} leaders striped: {leaders:?}");
            create(&mut image, name, placed);
        }
        let counts = leaders_per_broker(&image);
        let (min, max) = (counts.values().min(), counts.values().max());
        assert!(max.unwrap() - min.unwrap() <= 2, "{counts:?}");
    }

    #[test]
    fn racks_are_spread_before_brokers_are_reused() {
        let image = cluster(&[
            (1, Some("a")),
            (2, Some("a")),
            (3, Some("b")),
            (4, Some("b")),
        ]);
        for replicas in place_replicas(&image, 8, 2).unwrap() {
            let racks: Vec<_> = replicas
                .iter()
                .map(|r| image.brokers[r].rack.clone())
                .collect();
            assert_ne!(racks[0], racks[1], "{replicas:?}");
        }
    }

    #[test]
    fn more_replicas_than_live_brokers_cannot_be_placed() {
        let mut image = cluster(&[(1, None), (2, None), (3, None)]);
        assert!(place_replicas(&image, 1, 4).is_none());
        image.apply(&MetadataRecord::BrokerFencing {
            id: 3,
            fenced: true,
        });
        assert!(place_replicas(&image, 1, 3).is_none());
        assert!(place_replicas(&image, 1, 2).is_some());
        assert!(place_replicas(&image, 1, 0).is_none());
    }

    #[test]
    fn an_unclean_election_lets_a_replica_out_of_sync_lead_only_when_allowed() {
        let mut image = cluster(&[(1, None), (2, None), (3, None)]);
        create(&mut image, "t", vec![vec![1, 2]]);
        // The ISR shrank to the leader alone, then the leader is fenced.
        image.apply(&MetadataRecord::PartitionChanged {
            name: "t".to_string(),
            index: 0,
            state: PartitionState {
                isr: vec![1],
                partition_epoch: 1,
                ..PartitionState::new(vec![1, 2])
            },
        });
        let clean = image.with(&fence(&image, 1, false));
        assert_eq!(clean.topics["t"].partitions[0].leader, -1);
        let unclean = image.with(&fence(&image, 1, true));
        let state = &unclean.topics["t"].partitions[0];
        assert_eq!(
            (state.leader, state.isr.clone(), state.leader_epoch),
            (2, vec![2], 1)
        );
        // A topic's own setting wins over the default.
        image.apply(&MetadataRecord::TopicConfigsSet {
            name: "t".to_string(),
            configs: BTreeMap::from([(
                "unclean.leader.election.enable".to_string(),
                "true".to_string(),
            )]),
        });
        assert_eq!(
            image.with(&fence(&image, 1, false)).topics["t"].partitions[0].leader,
            2
        );
        // Left without a leader, it gets one when an out-of-sync replica
        // comes back, if allowed.
        let offline = clean.with(&[MetadataRecord::BrokerFencing {
            id: 2,
            fenced: true,
        }]);
        assert_eq!(
            offline.with(&unfence(&offline, 2, false)).topics["t"].partitions[0].leader,
            -1
        );
        assert_eq!(
            offline.with(&unfence(&offline, 2, true)).topics["t"].partitions[0].leader,
            2
        );
    }

    #[test]
    fn preferred_leaders_come_back_once_in_sync() {
        let mut image = cluster(&[(1, None), (2, None), (3, None)]);
        create(&mut image, "t", vec![vec![1, 2, 3], vec![2, 3, 1]]);
        assert!(preferred_leaders(&image).is_empty(), "all lead already");
        assert_eq!(
            elect(&image, "t", 0, true).unwrap_err(),
            Refused::ElectionNotNeeded
        );
        // Broker 1 is fenced: partition 0 moves to 2; back when 1 returns
        // (unfenced, not in the ISR yet: not available until it catches up).
        image = image.with(&fence(&image, 1, false));
        image = image.with(&unfence(&image, 1, false));
        assert_eq!(image.topics["t"].partitions[0].leader, 2);
        assert_eq!(
            elect(&image, "t", 0, true).unwrap_err(),
            Refused::PreferredLeaderNotAvailable
        );
        let caught_up = alter_partition(
            &image,
            &AlterPartition {
                topic: "t".to_string(),
                partition: 0,
                leader: 2,
                leader_epoch: 1,
                partition_epoch: image.topics["t"].partitions[0].partition_epoch,
                isr: vec![1, 2, 3],
            },
        )
        .unwrap();
        image.apply(&caught_up);
        let moves = preferred_leaders(&image);
        assert_eq!(moves.len(), 1, "{moves:?}");
        image = image.with(&moves);
        let state = &image.topics["t"].partitions[0];
        assert_eq!((state.leader, state.leader_epoch), (1, 2));
        assert!(preferred_leaders(&image).is_empty());
        assert_eq!(
            elect(&image, "t", 9, true).unwrap_err(),
            Refused::UnknownTopicOrPartition
        );
    }

    #[test]
    fn isr_changes_are_taken_only_from_the_current_leader_at_current_epochs() {
        use AlterPartition;
        let mut image = cluster(&[(1, None), (2, None), (3, None)]);
        create(&mut image, "t", vec![vec![1, 2, 3]]);
        let alter = |leader, leader_epoch, partition_epoch, isr: &[i32]| AlterPartition {
            topic: "t".to_string(),
            partition: 0,
            leader,
            leader_epoch,
            partition_epoch,
            isr: isr.to_vec(),
        };
        let shrunk = alter_partition(&image, &alter(1, 0, 0, &[1, 3])).unwrap();
        image.apply(&shrunk);
        let state = &image.topics["t"].partitions[0];
        assert_eq!((state.isr.clone(), state.partition_epoch), (vec![1, 3], 1));
        // The same change again: the partition epoch moved on.
        assert_eq!(
            alter_partition(&image, &alter(1, 0, 0, &[1])).unwrap_err(),
            Refused::InvalidUpdateVersion
        );
        // Not the leader, or a stale leader epoch.
        assert_eq!(
            alter_partition(&image, &alter(2, 0, 1, &[2, 3])).unwrap_err(),
            Refused::FencedLeaderEpoch
        );
        assert_eq!(
            alter_partition(&image, &alter(1, 1, 1, &[1])).unwrap_err(),
            Refused::FencedLeaderEpoch
        );
        // Without the leader, or naming a broker that holds no replica.
        assert_eq!(
            alter_partition(&image, &alter(1, 0, 1, &[3])).unwrap_err(),
            Refused::InvalidRequest
        );
        assert_eq!(
            alter_partition(&image, &alter(1, 0, 1, &[1, 4])).unwrap_err(),
            Refused::InvalidRequest
        );
        // A fenced broker does not come back into the ISR.
        image.apply(&MetadataRecord::BrokerFencing {
            id: 2,
            fenced: true,
        });
        assert_eq!(
            alter_partition(&image, &alter(1, 0, 1, &[1, 2, 3])).unwrap_err(),
            Refused::IneligibleReplica
        );
        image.apply(&MetadataRecord::BrokerFencing {
            id: 2,
            fenced: false,
        });
        assert!(alter_partition(&image, &alter(1, 0, 1, &[1, 2, 3])).is_ok());
    }

    #[test]
    fn fencing_moves_leadership_to_a_live_isr_member_and_back() {
        let mut image = cluster(&[(1, None), (2, None), (3, None)]);
        create(&mut image, "r3", vec![vec![1, 2, 3]]);
        create(&mut image, "r1", vec![vec![1]]);
        let records = fence(&image, 1, false);
        for record in &records {
            image.apply(record);
        }
        let r3 = &image.topics["r3"].partitions[0];
        assert_eq!((r3.leader, r3.leader_epoch, r3.partition_epoch), (2, 1, 1));
        assert_eq!(r3.isr, vec![2, 3]);
        let r1 = &image.topics["r1"].partitions[0];
        assert_eq!((r1.leader, r1.leader_epoch), (-1, 1), "offline");
        assert_eq!(r1.isr, vec![1], "the last ISR member stays");
        assert!(!image.is_live(1));

        for record in unfence(&image, 1, false) {
            image.apply(&record);
        }
        let r1 = &image.topics["r1"].partitions[0];
        assert_eq!((r1.leader, r1.leader_epoch), (1, 2));
        assert_eq!(image.topics["r3"].partitions[0].leader, 2, "led elsewhere");
        assert!(image.is_live(1));
    }

    /// The partition states after broker `id` registers returning `how`
    /// (its registration record is what the image holds already).
    fn after_return(image: &MetadataImage, id: i32, how: Return, unclean: bool) -> MetadataImage {
        let mut image = image.clone();
        for record in register(&image, id, how, unclean) {
            image.apply(&record);
        }
        image
    }

    #[test]
    fn a_returning_broker_leads_only_what_it_can_hold() {
        let mut image = cluster(&[(1, None), (2, None), (3, None)]);
        create(&mut image, "r3", vec![vec![1, 2, 3]]);
        create(&mut image, "r3f", vec![vec![2, 1, 3]]);
        create(&mut image, "r1", vec![vec![1]]);
        let r3 = state(&image, "r3");
        let r3f = state(&image, "r3f");
        let r1 = state(&image, "r1");
        let check = |how: Return, unclean: bool| {
            let image = after_return(&image, 1, how, unclean);
            (
                state(&image, "r3"),
                state(&image, "r3f"),
                state(&image, "r1"),
            )
        };

        // Crashed: out of every ISR with others; leaderships move to a
        // live in-sync member; the last ISR member leads at a new epoch.
        let (a, b, c) = check(Return::Crashed, false);
        assert_eq!(
            (a.leader, a.leader_epoch, a.isr.clone()),
            (2, r3.leader_epoch + 1, vec![2, 3])
        );
        assert_eq!(
            (b.leader, b.leader_epoch, b.isr.clone()),
            (2, r3f.leader_epoch, vec![2, 3])
        );
        assert_eq!(
            (c.leader, c.leader_epoch, c.isr.clone()),
            (1, r1.leader_epoch + 1, vec![1])
        );

        // An emptied data dir: the same, but the last ISR member holds
        // nothing: no leader, no ISR, unless unclean elections are on.
        let (a, _, c) = check(Return::EmptyDirectory, false);
        assert_eq!((a.leader, a.isr.clone()), (2, vec![2, 3]));
        assert_eq!((c.leader, c.isr.clone()), (-1, Vec::<i32>::new()));
        assert!(c.leader_epoch >= r1.leader_epoch);
        let (_, _, c) = check(Return::EmptyDirectory, true);
        assert_eq!(
            (c.leader, c.leader_epoch, c.isr.clone()),
            (1, r1.leader_epoch + 1, vec![1])
        );

        // Clean: keeps its ISR places, re-elected at a new epoch.
        let (a, b, c) = check(Return::Clean, false);
        assert_eq!(
            (a.leader, a.leader_epoch, a.isr.clone()),
            (1, r3.leader_epoch + 1, vec![1, 2, 3])
        );
        assert_eq!(b, r3f);
        assert_eq!((c.leader, c.leader_epoch), (1, r1.leader_epoch + 1));

        // With the other in-sync members not live, a crashed leader hands
        // over to none: the partition waits for one of them.
        let mut fenced = image.clone();
        for id in [2, 3] {
            fenced.apply(&MetadataRecord::BrokerFencing { id, fenced: true });
        }
        let a = state(&after_return(&fenced, 1, Return::Crashed, false), "r3");
        assert_eq!((a.leader, a.isr.clone()), (-1, vec![2, 3]));
        // Every change is one partition epoch on: the image takes it.
        for how in [Return::Clean, Return::Crashed, Return::EmptyDirectory] {
            for record in register(&image, 1, how, false) {
                let MetadataRecord::PartitionChanged { name, state: s, .. } = &record else {
                    panic!("{record:?}")
                };
                assert_eq!(s.partition_epoch, state(&image, name).partition_epoch + 1);
            }
        }
    }

    /// A broker back with an emptied data dir records its directory only
    /// once its registration is in the image: a crash before that keeps
    /// the next start a new directory, which never leads the partition it
    /// alone was in sync for.
    #[test]
    fn a_new_directory_is_recorded_only_once_its_registration_is_in_the_image() {
        let mut image = cluster(&[(1, None), (2, None), (3, None)]);
        create(&mut image, "r1", vec![vec![1]]);
        let second = BrokerMeta {
            incarnation: 2,
            ..image.brokers[&1].clone()
        };
        // Before the controller decided on the second incarnation.
        assert!(!may_record_directory(&image, 1, 2));
        let arrival = |new_directory| Arrival {
            clean: false,
            new_directory,
            shutting_down: false,
            storage_full: false,
        };
        let registered = image.with(&heartbeat(&image, &second, arrival(true), false));
        assert!(may_record_directory(&registered, 1, 2));
        assert_eq!(state(&registered, "r1").leader, -1);
        // Had it recorded the directory early and crashed, its third
        // incarnation would return as a crash and lead with nothing:
        // what the rule prevents.
        let third = BrokerMeta {
            incarnation: 3,
            ..second
        };
        let early = image.with(&heartbeat(&image, &third, arrival(false), false));
        assert_eq!(state(&early, "r1").leader, 1);
        let kept_new = image.with(&heartbeat(&image, &third, arrival(true), false));
        assert_eq!(state(&kept_new, "r1").leader, -1);
    }

    fn state(image: &MetadataImage, topic: &str) -> PartitionState {
        image.topics[topic].partitions[0].clone()
    }

    /// The leader's AlterPartition for the partition's ISR `isr`.
    fn isr_of(image: &MetadataImage, topic: &str, isr: &[i32]) -> MetadataRecord {
        let s = state(image, topic);
        let alter = AlterPartition {
            topic: topic.to_string(),
            partition: 0,
            leader: s.leader,
            leader_epoch: s.leader_epoch,
            partition_epoch: s.partition_epoch,
            isr: isr.to_vec(),
        };
        alter_partition(image, &alter).unwrap()
    }

    #[test]
    fn a_reassignment_adds_first_and_removes_once_the_target_is_in_sync() {
        let mut image = cluster(&[(1, None), (2, None), (3, None), (4, None)]);
        create(&mut image, "t", vec![vec![1, 2, 3]]);
        // Broker 1 (the leader) moves to 4.
        let start = reassign(&image, "t", 0, Some(&[4, 2, 3])).unwrap().unwrap();
        image.apply(&start);
        let moving = state(&image, "t");
        assert_eq!(moving.replicas, vec![4, 2, 3, 1]);
        assert_eq!(
            (moving.adding.clone(), moving.removing.clone()),
            (vec![4], vec![1])
        );
        assert_eq!(
            (moving.leader, moving.leader_epoch, moving.partition_epoch),
            (1, 0, 1)
        );
        assert_eq!(
            moving.isr,
            vec![1, 2, 3],
            "nothing leaves before 4 is in sync"
        );
        assert_eq!(reassignments(&image, None).len(), 1);
        assert_eq!(
            reassign(&image, "t", 0, Some(&[4, 2, 3])).unwrap(),
            None,
            "the same target again"
        );

        // 4 catches up: the leader adds it to the ISR, which completes the move.
        image.apply(&isr_of(&image, "t", &[1, 2, 3, 4]));
        let done = state(&image, "t");
        assert_eq!(done.replicas, vec![4, 2, 3]);
        assert_eq!(done.isr, vec![2, 3, 4]);
        assert_eq!(
            (done.leader, done.leader_epoch),
            (4, 1),
            "1 hands over to 4"
        );
        assert!(!done.reassigning());
        assert!(reassignments(&image, None).is_empty());
        assert_eq!(
            image.owner_core(&image.topics["t"], 0, 1),
            None,
            "this node (1) holds no replica any more: it deletes its copy"
        );
    }

    #[test]
    fn a_smaller_or_reordered_target_in_sync_completes_at_once() {
        let mut image = cluster(&[(1, None), (2, None), (3, None)]);
        create(&mut image, "t", vec![vec![1, 2, 3]]);
        image.apply(&reassign(&image, "t", 0, Some(&[2, 3])).unwrap().unwrap());
        let s = state(&image, "t");
        assert_eq!(
            (s.replicas.clone(), s.isr.clone(), s.leader),
            (vec![2, 3], vec![2, 3], 2)
        );
        assert!(!s.reassigning());
        assert_eq!(
            reassign(&image, "t", 0, Some(&[2, 3])).unwrap(),
            None,
            "nothing to do"
        );
        image.apply(&reassign(&image, "t", 0, Some(&[3, 2])).unwrap().unwrap());
        let s = state(&image, "t");
        assert_eq!(
            (s.replicas.clone(), s.leader),
            (vec![3, 2], 2),
            "the leader stays"
        );
    }

    #[test]
    fn a_reassignment_is_cancelled_back_to_the_replicas_before_it() {
        let mut image = cluster(&[(1, None), (2, None), (3, None), (4, None), (5, None)]);
        create(&mut image, "t", vec![vec![1, 2]]);
        image.apply(&reassign(&image, "t", 0, Some(&[4, 5])).unwrap().unwrap());
        // 4 catches up, 5 does not yet.
        image.apply(&isr_of(&image, "t", &[1, 2, 4]));
        assert!(state(&image, "t").reassigning());
        image.apply(&reassign(&image, "t", 0, None).unwrap().unwrap());
        let s = state(&image, "t");
        assert_eq!(
            (s.replicas.clone(), s.isr.clone(), s.leader),
            (vec![1, 2], vec![1, 2], 1)
        );
        assert!(!s.reassigning());
        assert_eq!(
            reassign(&image, "t", 0, None).unwrap_err().0,
            Refused::NoReassignmentInProgress
        );
    }

    #[test]
    fn a_new_target_replaces_the_move_under_way() {
        let mut image = cluster(&[(1, None), (2, None), (3, None), (4, None)]);
        create(&mut image, "t", vec![vec![1, 2]]);
        image.apply(&reassign(&image, "t", 0, Some(&[1, 3])).unwrap().unwrap());
        image.apply(&reassign(&image, "t", 0, Some(&[1, 4])).unwrap().unwrap());
        let s = state(&image, "t");
        assert_eq!(s.replicas, vec![1, 4, 3, 2]);
        assert_eq!(
            (s.adding.clone(), s.removing.clone()),
            (vec![4], vec![3, 2])
        );
        image.apply(&isr_of(&image, "t", &[1, 2, 4]));
        let s = state(&image, "t");
        assert_eq!(
            (s.replicas.clone(), s.isr.clone()),
            (vec![1, 4], vec![1, 4])
        );
    }

    #[test]
    fn a_partition_not_there_is_refused() {
        let mut image = cluster(&[(1, None), (2, None)]);
        create(&mut image, "t", vec![vec![1, 2]]);
        for (topic, partition) in [("t", 1), ("t", -1), ("u", 0)] {
            let refusal = reassign(&image, topic, partition, Some(&[1])).unwrap_err();
            assert_eq!(refusal.0, Refused::UnknownTopicOrPartition, "{refusal:?}");
        }
    }
}
