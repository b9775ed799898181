//! Load-balancer mode: a group coordinator request (JoinGroup, SyncGroup,
//! Heartbeat, LeaveGroup, OffsetCommit, TxnOffsetCommit, OffsetFetch,
//! OffsetDelete, DescribeGroups, DeleteGroups) or a transaction
//! coordinator request (InitProducerId with a transactional id,
//! AddPartitionsToTxn up to v3, AddOffsetsToTxn, EndTxn,
//! DescribeTransactions) that reaches a broker which does not coordinate
//! its key goes, as the client framed it, to the broker that
//! does; its answer comes back unchanged (the correlation id is the
//! client's). Only the header's client id changes on the way: it becomes
//! `strom-forward-<this node>/<client host>/<client id>`, so the
//! coordinator never forwards it again and records the member's own
//! client id and host ([`forwarded_client`]).
//!
//! Each forwarded request takes a connection of its own from a pool per
//! destination on this core (JoinGroup and SyncGroup wait at the
//! coordinator for the whole group, minutes at worst, and must not hold
//! up a heartbeat), at most `FORWARD_GROUP_CONNECTIONS_MAX` at once (`cluster::channel`):
//! beyond, the client's connection waits. When the coordinator cannot be
//! reached the request is answered here, by a broker that does not
//! coordinate the group: NOT_COORDINATOR, which sends the client back to
//! FindCoordinator, as a direct connection to a former coordinator would.

use std::net::IpAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::RequestKind;
use protocol::codec::RequestFrame;

use crate::cluster::links::{Origin, FORWARDED_CLIENT_ID_PREFIX};
use crate::cluster::transport::exchange;
use crate::limits::FORWARD_TIMEOUT_MS;
use crate::shard::Shard;

/// What a coordinator request is keyed by.
#[derive(Debug, Clone, Copy)]
enum Key<'a> {
    Group(&'a str),
    Transaction(&'a str),
}

/// The keys a request is for, if it is a coordinator request.
fn keys(body: &RequestKind) -> Vec<Key<'_>> {
    fn group(id: &kafka_protocol::messages::GroupId) -> Key<'_> {
        Key::Group(id.0.as_str())
    }
    match body {
        RequestKind::JoinGroup(r) => vec![group(&r.group_id)],
        RequestKind::SyncGroup(r) => vec![group(&r.group_id)],
        RequestKind::Heartbeat(r) => vec![group(&r.group_id)],
        RequestKind::ConsumerGroupHeartbeat(r) => vec![group(&r.group_id)],
        RequestKind::ShareGroupHeartbeat(r) => vec![group(&r.group_id)],
        RequestKind::ConsumerGroupDescribe(r) => r.group_ids.iter().map(group).collect(),
        RequestKind::ShareGroupDescribe(r) => r.group_ids.iter().map(group).collect(),
        RequestKind::DescribeShareGroupOffsets(r) => {
            r.groups.iter().map(|g| group(&g.group_id)).collect()
        }
        RequestKind::AlterShareGroupOffsets(r) => vec![group(&r.group_id)],
        RequestKind::DeleteShareGroupOffsets(r) => vec![group(&r.group_id)],
        RequestKind::LeaveGroup(r) => vec![group(&r.group_id)],
        RequestKind::OffsetCommit(r) => vec![group(&r.group_id)],
        RequestKind::TxnOffsetCommit(r) => vec![group(&r.group_id)],
        RequestKind::OffsetDelete(r) => vec![group(&r.group_id)],
        RequestKind::OffsetFetch(r) if r.groups.is_empty() => vec![group(&r.group_id)],
        RequestKind::OffsetFetch(r) => r.groups.iter().map(|g| group(&g.group_id)).collect(),
        RequestKind::DescribeGroups(r) => r.groups.iter().map(group).collect(),
        RequestKind::DeleteGroups(r) => r.groups_names.iter().map(group).collect(),
        RequestKind::InitProducerId(r) => r
            .transactional_id
            .iter()
            .map(|id| Key::Transaction(id.0.as_str()))
            .collect(),
        RequestKind::AddPartitionsToTxn(r) if !r.v3_and_below_transactional_id.0.is_empty() => {
            vec![Key::Transaction(r.v3_and_below_transactional_id.0.as_str())]
        }
        RequestKind::AddOffsetsToTxn(r) => vec![Key::Transaction(r.transactional_id.0.as_str())],
        RequestKind::EndTxn(r) => vec![Key::Transaction(r.transactional_id.0.as_str())],
        RequestKind::DescribeTransactions(r) => r
            .transactional_ids
            .iter()
            .map(|id| Key::Transaction(id.0.as_str()))
            .collect(),
        _ => Vec::new(),
    }
}

/// How long a forwarded SyncGroup may wait for the leader's assignment:
/// Kafka's default rebalance timeout (`max.poll.interval.ms`).
const SYNC_WAIT_MS: u64 = 300_000;

/// How long the coordinator may take: a JoinGroup waits up to the
/// group's rebalance timeout for the other members, a SyncGroup for the
/// leader's assignment; the rest answer at once.
fn timeout(body: &RequestKind) -> Duration {
    let wait_ms = match body {
        RequestKind::JoinGroup(r) => {
            u64::try_from(r.rebalance_timeout_ms.max(r.session_timeout_ms)).unwrap_or(0)
        }
        RequestKind::SyncGroup(_) => SYNC_WAIT_MS,
        _ => 0,
    };
    Duration::from_millis(wait_ms + FORWARD_TIMEOUT_MS)
}

/// Forwards `frame` (the whole request, without its length prefix) to
/// the coordinator of its group when that is another live broker and
/// this one is in load-balancer mode; the coordinator's answer (a whole
/// response frame with its length prefix). `None`: answered here.
pub async fn forward(
    shard: &Rc<Shard>,
    request: &RequestFrame,
    body: &RequestKind,
    frame: &Bytes,
    peer: Option<IpAddr>,
    session: Option<&crate::authorizer::Session>,
) -> Option<Bytes> {
    if !shard.config.balancer_enable
        || !shard.in_cluster()
        || Origin::of(request.client_id.as_deref()) == Origin::Forwarded
    {
        return None;
    }
    let keys = keys(body);
    let mut coordinator = None;
    for key in keys {
        let found = match key {
            Key::Group(id) => crate::group::manager::coordinator(shard, id).await.ok()?,
            Key::Transaction(id) => crate::txn::manager::coordinator(shard, id).await.ok()?,
        };
        if coordinator.is_some_and(|c| c != found) {
            // Keys of several coordinators: each answered here (the ones
            // coordinated elsewhere NOT_COORDINATOR).
            return None;
        }
        coordinator = Some(found);
    }
    let coordinator = coordinator?;
    if coordinator == shard.config.node_id || !shard.metadata.image().is_live(coordinator) {
        return None;
    }
    // The host without its leading '/', which stands between the parts.
    let host = peer.map(crate::group::client_host).unwrap_or_default();
    let host = host.trim_start_matches('/');
    let marked = format!(
        "{FORWARDED_CLIENT_ID_PREFIX}{}/{host}/{}",
        shard.config.node_id,
        request.client_id.as_deref().unwrap_or("")
    );
    let framed = with_client_id(frame, &marked)?;
    // While the authorizer is on, in an Envelope: the coordinator
    // authorizes the client, not this broker.
    let enveloped = session.filter(|_| shard.config.authorizer.is_some());
    let framed = match enveloped {
        Some(session) => {
            crate::cluster::envelope::wrap(&framed, session, peer, shard.config.node_id)?
        }
        None => framed,
    };
    let started = Instant::now();
    let bytes_out = framed.len() as u64;
    let answer = exchange(shard, coordinator, framed, timeout(body)).await;
    let answer = match (answer, enveloped) {
        (Ok(answer), Some(_)) => crate::cluster::envelope::unwrap(&answer),
        (answer, _) => answer,
    };
    crate::metrics::record_forward(crate::metrics::Forwarded {
        broker: coordinator,
        api_key: request.api_key as i16,
        bytes_out,
        bytes_in: answer.as_ref().map_or(0, |a| a.len() as u64),
        latency_us: started.elapsed().as_micros() as u64,
        failed: answer.is_err(),
    });
    match answer {
        Ok(answer) => Some(answer),
        Err(error) => {
            tracing::info!(
                coordinator,
                api = ?request.api_key,
                %error,
                "cannot forward a group request to its coordinator: answered here"
            );
            None
        }
    }
}

/// The client host and id a forwarded request carries for its client
/// (see the module documentation); `None` for a request from a client.
pub fn forwarded_client(client_id: Option<&str>) -> Option<(String, String)> {
    let marked = client_id?.strip_prefix(FORWARDED_CLIENT_ID_PREFIX)?;
    let (_node, rest) = marked.split_once('/')?;
    let (host, client) = rest.split_once('/')?;
    Some((format!("/{host}"), client.to_string()))
}

/// `frame` with its header's client id replaced by `client_id` (every
/// request header version has it at the same place, as a nullable
/// string); `None` for a frame too short to hold one.
fn with_client_id(frame: &Bytes, client_id: &str) -> Option<Bytes> {
    let len_at = 8;
    let old = i16::from_be_bytes(frame.get(len_at..len_at + 2)?.try_into().ok()?);
    let rest_at = len_at + 2 + usize::try_from(old.max(0)).ok()?;
    let rest = frame.get(rest_at..)?;
    let new_len = i16::try_from(client_id.len()).ok()?;
    let mut out = Vec::with_capacity(rest_at + client_id.len() + rest.len());
    out.extend_from_slice(&frame[..len_at]);
    out.extend_from_slice(&new_len.to_be_bytes());
    out.extend_from_slice(client_id.as_bytes());
    out.extend_from_slice(rest);
    Some(Bytes::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_id_is_replaced_and_read_back() {
        // api key 12, version 4, correlation id 7, client id "app", body.
        let mut frame = vec![0, 12, 0, 4, 0, 0, 0, 7, 0, 3];
        frame.extend_from_slice(b"app");
        frame.extend_from_slice(b"\x00body");
        let marked = with_client_id(&Bytes::from(frame), "strom-forward-2/10.0.0.1/app/x").unwrap();
        assert_eq!(&marked[..8], &[0, 12, 0, 4, 0, 0, 0, 7]);
        let len = i16::from_be_bytes([marked[8], marked[9]]) as usize;
        let id = std::str::from_utf8(&marked[10..10 + len]).unwrap();
        assert_eq!(id, "strom-forward-2/10.0.0.1/app/x");
        assert_eq!(&marked[10 + len..], b"\x00body");
        assert_eq!(Origin::of(Some(id)), Origin::Forwarded);
        assert_eq!(
            forwarded_client(Some(id)),
            Some(("/10.0.0.1".to_string(), "app/x".to_string()))
        );
        assert_eq!(forwarded_client(Some("app")), None);
        // A null client id, and a frame cut inside the header.
        let null = Bytes::from(vec![0, 12, 0, 4, 0, 0, 0, 7, 0xff, 0xff, 9]);
        let marked = with_client_id(&null, "m").unwrap();
        assert_eq!(&marked[8..], &[0, 1, b'm', 9]);
        assert!(with_client_id(
            &Bytes::from_static(&[0, 12, 0, 4, 0, 0, 0, 7, 0, 9, 1]),
            "m"
        )
        .is_none());
    }
}
