//! A core's answer to the admin thread's scrape: its counters (`metrics`)
//! plus what it owns (partitions and their logs, connections, hops in
//! flight, memory pools, the committed offsets of the groups it
//! coordinates, its transaction coordinators), as one [`ShardSnapshot`].

use std::rc::Rc;

use crate::metrics::{
    add_log_counters, core_counters, traffic_counters, CommittedSnapshot, PartitionLogSnapshot,
    ShardSnapshot,
};
use crate::shard::Shard;

/// This core's snapshot; runs on the core.
pub fn snapshot(shard: &Shard) -> ShardSnapshot {
    let counters = core_counters();
    let image = shard.metadata.image();
    let traffic = traffic_counters(|topic| image.topics.contains_key(topic));
    // Counters start from the logs this core deleted, so they never go
    // back when a topic goes (Prometheus would read that as a reset).
    let mut storage = shard.retired_logs.borrow().clone();
    let mut partitions = 0u64;
    let mut leaders = 0u64;
    let mut partition_logs = Vec::new();
    for by_index in shard.partitions.borrow().values() {
        for partition in by_index.values() {
            partitions += 1;
            let leader = partition.is_leader();
            leaders += u64::from(leader);
            let log = partition.log();
            let stats = log.stats();
            partition_logs.push(PartitionLogSnapshot {
                topic: partition.topic.clone(),
                partition: partition.index,
                log_start_offset: partition.log_start_offset(),
                log_end_offset: log.next_offset() as i64,
                high_watermark: partition.high_watermark(),
                last_stable_offset: partition.last_stable_offset(),
                size_bytes: log.size_bytes(),
                leader,
            });
            storage.log_size_bytes += log.size_bytes();
            storage.pending_bytes += stats.pending_bytes as u64;
            add_log_counters(&mut storage, &stats);
        }
    }
    let journal = shard.storage.journal_counts();
    storage.journal_writes = journal.writes;
    storage.journal_records = journal.records;
    storage.journal_bytes = journal.bytes;
    ShardSnapshot {
        shard: shard.id,
        apis: counters.apis,
        errors: counters.errors,
        hops: counters.hops,
        hops_in_flight: shard.hops_in_flight() as u64,
        connections: shard.connections.count() as u64,
        partitions,
        leaders,
        storage,
        stalls: protocol::watchdog::this_thread_stalls(),
        queued_request_bytes: shard.request_pool.used() as u64,
        queued_request_bytes_peak: shard.request_pool.peak() as u64,
        queued_response_bytes: shard.response_pool.used() as u64,
        queued_response_bytes_peak: shard.response_pool.peak() as u64,
        connections_closed_idle: counters.connections_closed_idle,
        connections_closed_receive_timeout: counters.connections_closed_receive_timeout,
        tls_handshakes: counters.tls_handshakes,
        tls_handshakes_failed: counters.tls_handshakes_failed,
        authentications: counters.authentications,
        denials: counters.denials,
        partition_logs,
        traffic,
        committed: committed_snapshot(shard),
        consumer_groups: consumer_groups_snapshot(shard),
        share_groups: share_groups_snapshot(shard),
        forwarded: counters.forwarded,
        stages: crate::stages::snapshot(),
        cleaner: crate::compaction::stats(),
        cleaner_logs: crate::compaction::logs(),
        txn_coordinators: shard.transactions.figures(shard.now_ms()),
        txn_ends: counters.txn_ends,
    }
}

/// The committed offsets this core's coordinator holds.
fn committed_snapshot(shard: &Shard) -> Vec<CommittedSnapshot> {
    crate::group::manager::with_loaded_coordinator(shard, |coordinator| {
        coordinator
            .groups()
            .flat_map(|group| {
                group
                    .offsets()
                    .iter()
                    .map(|((topic, partition), committed)| CommittedSnapshot {
                        group: group.id().to_string(),
                        topic: topic.clone(),
                        partition: *partition,
                        offset: committed.offset,
                    })
            })
            .collect()
    })
    .unwrap_or_default()
}

/// The share groups' records on this core's share partitions, with the
/// core's delivery counters.
fn share_groups_snapshot(shard: &Shard) -> Vec<crate::metrics::ShareGroupFigures> {
    let mut figures: std::collections::BTreeMap<String, crate::metrics::ShareGroupFigures> =
        crate::metrics::share_counters()
            .into_iter()
            .map(|(group, counters)| {
                let figures = crate::metrics::ShareGroupFigures {
                    group: group.clone(),
                    counters,
                    ..Default::default()
                };
                (group, figures)
            })
            .collect();
    for ((group, _, _), held) in shard.groups.share_partitions.borrow().iter() {
        let f = figures
            .entry(group.clone())
            .or_insert_with(|| crate::metrics::ShareGroupFigures {
                group: group.clone(),
                ..Default::default()
            });
        f.in_flight += held.partition.pending_count() as u64;
        f.acquired += held.partition.acquired_count() as u64;
    }
    figures.into_values().collect()
}

/// The consumer-protocol groups this core's coordinator holds.
fn consumer_groups_snapshot(shard: &Shard) -> Vec<crate::metrics::ConsumerGroupSnapshot> {
    use groups::coordinator::MemberState;
    crate::group::manager::with_loaded_coordinator(shard, |coordinator| {
        coordinator
            .groups()
            .filter_map(|group| {
                let consumer = group.consumer()?;
                Some(crate::metrics::ConsumerGroupSnapshot {
                    group: group.id().to_string(),
                    epoch: consumer.group_epoch,
                    members: consumer.members.len() as u64,
                    reconciling: consumer
                        .members
                        .values()
                        .filter(|m| {
                            m.member_epoch != consumer.assignment_epoch
                                || m.state != MemberState::Stable
                        })
                        .count() as u64,
                })
            })
            .collect()
    })
    .unwrap_or_default()
}

/// A scrape request from the admin thread to one core.
pub struct ScrapeRequest {
    pub reply: flume::Sender<ShardSnapshot>,
}

/// Answers scrape requests on this core until the admin side goes away.
pub async fn serve_scrapes(shard: Rc<Shard>, requests: flume::Receiver<ScrapeRequest>) {
    while let Ok(request) = requests.recv_async().await {
        let _ = request.reply.try_send(snapshot(&shard));
    }
}
