//! The group admin commands: `strom group list`, `describe` (members,
//! assignments, committed offsets and lag), `reset-offsets` and `delete`.

use std::collections::BTreeMap;

use anyhow::{bail, Context};
use kafka_protocol::messages::{
    consumer_group_describe_response, ApiKey, ConsumerGroupDescribeRequest, DeleteGroupsRequest,
    DescribeGroupsRequest, ListGroupsRequest,
};
use protocol::admin::{list_topic_offsets, partitions, Router, EARLIEST, LATEST};
use protocol::client::{check_error, error_name, is_retriable_code, Connection, ERROR_NONE};
use protocol::consumer_protocol::{self, assignment_partitions};
use protocol::kafka_protocol::error::ResponseError;
use serde::Serialize;

use super::super::format::{print_json_object, Format};
use super::super::retry::{list_on_every_broker, settled_offsets, Retry};
use super::datetime::parse_datetime;
use super::{
    commit, committed, coordinator, group_id, ConnectArgs, DescribeArgs, ResetArgs, ResetTarget,
    CONSUMER_GROUP_DESCRIBE_VERSIONS, DELETE_GROUPS_VERSIONS, DESCRIBE_GROUPS_VERSIONS,
    LIST_GROUPS_VERSIONS,
};

/// A group as ListGroups lists it.
#[derive(Debug, Serialize)]
pub(super) struct ListedGroup {
    pub(super) group: String,
    pub(super) state: Option<String>,
    protocol_type: Option<String>,
    /// `classic`, `consumer` (KIP-848) or `share`, from brokers that say.
    pub(super) group_type: Option<String>,
    /// The broker that listed it: its coordinator.
    coordinator: i32,
}

/// `Some(text)`, or `None` for an empty text (a field the broker left
/// empty, e.g. the state before ListGroups v4).
fn non_empty(text: &str) -> Option<String> {
    (!text.is_empty()).then(|| text.to_string())
}

/// The groups of every broker Metadata names (each lists only the groups
/// it coordinates), by group id, and the brokers that did not answer,
/// with why. A broker answering a retriable error (a coordinator still
/// loading) is asked again within `--timeout-ms`.
pub(super) async fn list_everywhere(
    connect: &ConnectArgs,
) -> anyhow::Result<(BTreeMap<String, ListedGroup>, Vec<String>)> {
    list_on_every_broker(
        connect,
        "strom group",
        "groups",
        |group: &ListedGroup| group.group.clone(),
        async |router, bootstrap, id, retry| list_groups_of(router, bootstrap, id, retry).await,
    )
    .await
}

/// ListGroups of broker `id`, asked again while it answers a retriable
/// error and `retry` allows.
async fn list_groups_of(
    router: &mut Router,
    bootstrap: &mut Connection,
    id: i32,
    retry: &mut Retry,
) -> anyhow::Result<Vec<ListedGroup>> {
    loop {
        let connection = router.connection(bootstrap, id).await?;
        let version = connection.version::<ListGroupsRequest>(LIST_GROUPS_VERSIONS)?;
        let response = connection
            .call(&ListGroupsRequest::default(), version)
            .await?;
        if is_retriable_code(response.error_code) && retry.pause().await {
            continue;
        }
        check_error(ApiKey::ListGroups, response.error_code, None)?;
        return Ok(response
            .groups
            .iter()
            .map(|g| ListedGroup {
                group: g.group_id.0.to_string(),
                state: non_empty(&g.group_state),
                protocol_type: non_empty(&g.protocol_type),
                group_type: non_empty(&g.group_type),
                coordinator: id,
            })
            .collect());
    }
}

fn incomplete(failures: &[String]) -> anyhow::Result<()> {
    super::super::retry::incomplete("groups", failures)
}

pub(super) async fn list(connect: &ConnectArgs, format: Format) -> anyhow::Result<()> {
    let (groups, failures) = list_everywhere(connect).await?;
    if format == Format::Json {
        let groups: Vec<&ListedGroup> = groups.values().collect();
        print_json_object("groups", &groups)?;
        return incomplete(&failures);
    }
    let mut text = String::new();
    for group in groups.values() {
        text.push_str(&format!(
            "{}\t{}\t{}\t{}\n",
            group.group,
            group.state.as_deref().unwrap_or("-"),
            group.protocol_type.as_deref().unwrap_or("-"),
            group.group_type.as_deref().unwrap_or("-")
        ));
    }
    out!("{text}");
    incomplete(&failures)
}

/// Topic → partitions of one member's assignment.
type Assignment = BTreeMap<String, Vec<i32>>;

/// A group as DescribeGroups (or, for a consumer-protocol group,
/// ConsumerGroupDescribe) shows it.
struct Described {
    state: String,
    group_type: &'static str,
    protocol_type: String,
    protocol: String,
    /// Consumer-protocol groups: the group and target assignment epochs.
    epochs: Option<(i32, i32)>,
    members: Vec<DescribedMember>,
}

struct DescribedMember {
    member_id: String,
    client_id: String,
    host: String,
    assignment: Assignment,
    /// Consumer-protocol members: their epoch and target assignment.
    reconciling: Option<(i32, Assignment)>,
}

fn assignment_of(assignment: &consumer_group_describe_response::Assignment) -> Assignment {
    assignment
        .topic_partitions
        .iter()
        .map(|t| (t.topic_name.0.to_string(), t.partitions.clone()))
        .collect()
}

/// ConsumerGroupDescribe of `group`: `None` when it is not a
/// consumer-protocol group (or the broker does not know the API).
async fn describe_consumer_group(
    connection: &mut Connection,
    group: &str,
) -> anyhow::Result<Option<Described>> {
    let Ok(version) =
        connection.version::<ConsumerGroupDescribeRequest>(CONSUMER_GROUP_DESCRIBE_VERSIONS)
    else {
        return Ok(None);
    };
    let response = connection
        .call(
            &ConsumerGroupDescribeRequest::default().with_group_ids(vec![group_id(group)]),
            version,
        )
        .await?;
    let Some(found) = response.groups.first() else {
        bail!("the broker described no group");
    };
    if found.error_code == ResponseError::GroupIdNotFound.code() {
        return Ok(None);
    }
    check_error(
        ApiKey::ConsumerGroupDescribe,
        found.error_code,
        found.error_message.as_deref(),
    )
    .with_context(|| format!("cannot describe group {group}"))?;
    Ok(Some(Described {
        state: found.group_state.to_string(),
        group_type: "consumer",
        protocol_type: consumer_protocol::PROTOCOL_TYPE.to_string(),
        protocol: found.assignor_name.to_string(),
        epochs: Some((found.group_epoch, found.assignment_epoch)),
        members: found
            .members
            .iter()
            .map(|m| DescribedMember {
                member_id: m.member_id.to_string(),
                client_id: m.client_id.to_string(),
                host: m.client_host.to_string(),
                assignment: assignment_of(&m.assignment),
                reconciling: Some((m.member_epoch, assignment_of(&m.target_assignment))),
            })
            .collect(),
    }))
}

async fn describe_group(connection: &mut Connection, group: &str) -> anyhow::Result<Described> {
    if let Some(described) = describe_consumer_group(connection, group).await? {
        return Ok(described);
    }
    let version = connection.version::<DescribeGroupsRequest>(DESCRIBE_GROUPS_VERSIONS)?;
    let response = connection
        .call(
            &DescribeGroupsRequest::default().with_groups(vec![group_id(group)]),
            version,
        )
        .await?;
    let Some(found) = response.groups.first() else {
        bail!("the broker described no group");
    };
    check_error(
        ApiKey::DescribeGroups,
        found.error_code,
        found.error_message.as_deref(),
    )
    .with_context(|| format!("cannot describe group {group}"))?;
    let consumer = found.protocol_type.as_str() == consumer_protocol::PROTOCOL_TYPE;
    Ok(Described {
        state: found.group_state.to_string(),
        group_type: "classic",
        protocol_type: found.protocol_type.to_string(),
        protocol: found.protocol_data.to_string(),
        epochs: None,
        members: found
            .members
            .iter()
            .map(|m| {
                let assignment = if consumer {
                    assignment_partitions(&m.member_assignment).unwrap_or_default()
                } else {
                    BTreeMap::new()
                };
                DescribedMember {
                    member_id: m.member_id.to_string(),
                    client_id: m.client_id.to_string(),
                    host: m.client_host.to_string(),
                    assignment,
                    reconciling: None,
                }
            })
            .collect(),
    })
}

/// A group as `group describe` shows it.
#[derive(Debug, Serialize)]
struct GroupView {
    group: String,
    state: String,
    /// `classic` or `consumer` (KIP-848).
    group_type: &'static str,
    /// Consumer-protocol groups: the group epoch.
    #[serde(skip_serializing_if = "Option::is_none")]
    group_epoch: Option<i32>,
    /// Consumer-protocol groups: the epoch of the target assignment.
    #[serde(skip_serializing_if = "Option::is_none")]
    assignment_epoch: Option<i32>,
    protocol_type: Option<String>,
    protocol: Option<String>,
    members: Vec<MemberView>,
    offsets: Vec<OffsetRow>,
}

#[derive(Debug, Serialize)]
struct MemberView {
    member_id: String,
    client_id: String,
    /// As Kafka's tools show it: `/ADDRESS`.
    host: String,
    assignment: Assignment,
    /// Consumer-protocol members: the member's epoch.
    #[serde(skip_serializing_if = "Option::is_none")]
    member_epoch: Option<i32>,
    /// Consumer-protocol members: what the coordinator means it to own
    /// once reconciled.
    #[serde(skip_serializing_if = "Option::is_none")]
    target_assignment: Option<Assignment>,
}

/// One partition the group committed an offset for or is assigned.
#[derive(Debug, Serialize)]
struct OffsetRow {
    topic: String,
    partition: i32,
    committed: Option<i64>,
    log_end: Option<i64>,
    lag: Option<i64>,
    member: Option<String>,
    /// Why the log end is not known (its leader's error).
    error: Option<String>,
}

pub(super) async fn describe(args: &DescribeArgs) -> anyhow::Result<()> {
    let connect = &args.connect;
    let (names, failures) = match &args.group {
        Some(group) => (vec![group.clone()], Vec::new()),
        None => {
            let (groups, failures) = list_everywhere(connect).await?;
            (groups.into_keys().collect(), failures)
        }
    };
    let mut bootstrap = connect.connect().await?;
    let mut retry = Retry::new(connect);
    let mut views = Vec::with_capacity(names.len());
    for group in &names {
        let view = describe_one(connect, &mut bootstrap, &mut retry, group).await;
        match view {
            Ok(view) => views.push(view),
            // A group listed a moment ago may be gone now.
            Err(error) if args.all_groups => eprintln!("strom group: {error:#}"),
            Err(error) => return Err(error),
        }
    }
    if args.format == Format::Json {
        print_json_object("groups", &views)?;
    } else {
        let blocks: Vec<String> = views.iter().map(describe_text).collect();
        out!("{}", blocks.join("\n"));
    }
    incomplete(&failures)
}

/// One group: DescribeGroups and OffsetFetch at its coordinator, the log
/// end of each of its partitions from their leaders.
async fn describe_one(
    connect: &ConnectArgs,
    bootstrap: &mut Connection,
    retry: &mut Retry,
    group: &str,
) -> anyhow::Result<GroupView> {
    let mut coordinator = coordinator(connect, group).await?;
    let described = describe_group(&mut coordinator, group).await?;
    let offsets = committed(&mut coordinator, group, None).await?;
    if described.state == "Dead" && described.members.is_empty() && offsets.is_empty() {
        bail!("consumer group {group} does not exist (no members, no committed offsets)");
    }
    let mut owners: BTreeMap<(String, i32), String> = BTreeMap::new();
    for member in &described.members {
        for (t, ps) in &member.assignment {
            for p in ps {
                owners.insert((t.clone(), *p), member.member_id.clone());
            }
        }
    }
    let mut rows: BTreeMap<(String, i32), i64> = BTreeMap::new();
    for (t, ps) in &offsets {
        for (p, offset) in ps {
            rows.insert((t.clone(), *p), *offset);
        }
    }
    for key in owners.keys() {
        rows.entry(key.clone()).or_insert(-1);
    }
    let wanted: Vec<(String, i32)> = rows.keys().cloned().collect();
    let ends = if wanted.is_empty() {
        BTreeMap::new()
    } else {
        settled_offsets(bootstrap, &wanted, LATEST, retry).await?
    };
    let offsets = rows
        .into_iter()
        .map(|(key, committed)| {
            let committed = (committed >= 0).then_some(committed);
            let (log_end, error) = match ends.get(&key) {
                Some(Ok(end)) => (Some(*end), None),
                Some(Err(failure)) => (None, Some(failure.to_string())),
                None => (None, None),
            };
            let lag = committed.zip(log_end).map(|(c, e)| (e - c).max(0));
            OffsetRow {
                member: owners.get(&key).cloned(),
                topic: key.0,
                partition: key.1,
                committed,
                log_end,
                lag,
                error,
            }
        })
        .collect();
    Ok(GroupView {
        group: group.to_string(),
        state: described.state,
        group_type: described.group_type,
        group_epoch: described.epochs.map(|(group, _)| group),
        assignment_epoch: described.epochs.map(|(_, target)| target),
        protocol_type: non_empty(&described.protocol_type),
        protocol: non_empty(&described.protocol),
        members: described
            .members
            .into_iter()
            .map(|m| MemberView {
                member_id: m.member_id,
                client_id: m.client_id,
                host: kafka_host(&m.host),
                assignment: m.assignment,
                member_epoch: m.reconciling.as_ref().map(|(epoch, _)| *epoch),
                target_assignment: m.reconciling.map(|(_, target)| target),
            })
            .collect(),
        offsets,
    })
}

/// A group's text block: the GROUP line, a MEMBER line per member, and
/// the committed offset, log end and lag of each partition.
fn describe_text(view: &GroupView) -> String {
    let dash = |value: Option<&str>| value.unwrap_or("-").to_string();
    let mut text = format!(
        "GROUP {}\tTYPE {}\tSTATE {}\tPROTOCOL {}/{}\tMEMBERS {}",
        view.group,
        view.group_type,
        view.state,
        dash(view.protocol_type.as_deref()),
        dash(view.protocol.as_deref()),
        view.members.len()
    );
    if let (Some(group), Some(target)) = (view.group_epoch, view.assignment_epoch) {
        text.push_str(&format!("\tEPOCH {group}\tTARGET-EPOCH {target}"));
    }
    text.push('\n');
    let listed = |assignment: &Assignment| -> String {
        let parts: Vec<String> = assignment
            .iter()
            .map(|(t, ps)| {
                let list: Vec<String> = ps.iter().map(i32::to_string).collect();
                format!("{t}:{}", list.join(","))
            })
            .collect();
        if parts.is_empty() {
            "-".to_string()
        } else {
            parts.join(" ")
        }
    };
    for member in &view.members {
        text.push_str(&format!(
            "MEMBER {}\tCLIENT {}\tHOST {}\tASSIGNED {}",
            member.member_id,
            member.client_id,
            member.host,
            listed(&member.assignment)
        ));
        if let (Some(epoch), Some(target)) = (member.member_epoch, &member.target_assignment) {
            text.push_str(&format!("\tEPOCH {epoch}\tTARGET {}", listed(target)));
        }
        text.push('\n');
    }
    text.push_str("TOPIC\tPARTITION\tCOMMITTED\tLOG-END\tLAG\tMEMBER\n");
    let number = |value: Option<i64>| value.map_or_else(|| "-".to_string(), |v| v.to_string());
    for row in &view.offsets {
        text.push_str(&format!(
            "{}\t{}\t{}\t{}\t{}\t{}",
            row.topic,
            row.partition,
            number(row.committed),
            number(row.log_end),
            number(row.lag),
            dash(row.member.as_deref())
        ));
        if let Some(error) = &row.error {
            text.push_str(&format!("\tError: {error}"));
        }
        text.push('\n');
    }
    text
}

/// Where `reset-offsets` moves one topic's offsets from.
pub(super) struct Placement<'a> {
    pub(super) group: &'a str,
    pub(super) topic: &'a str,
    /// The group's committed offsets of the topic (a share group's start
    /// offsets), if any.
    pub(super) committed: Option<&'a BTreeMap<i32, i64>>,
}

/// The offsets `target` names for every partition of one topic, within
/// each partition's earliest and latest.
pub(super) async fn new_offsets(
    bootstrap: &mut Connection,
    place: &Placement<'_>,
    target: &ResetTarget,
    timestamp: Option<i64>,
) -> anyhow::Result<BTreeMap<i32, i64>> {
    let Placement {
        group,
        topic,
        committed,
    } = place;
    let ids = partitions(bootstrap, topic, false).await?;
    let earliest = list_topic_offsets(bootstrap, topic, &ids, EARLIEST).await?;
    let latest = list_topic_offsets(bootstrap, topic, &ids, LATEST).await?;
    let within = |p: &i32, offset: i64| offset.clamp(earliest[p], latest[p]);
    if target.to_earliest {
        return Ok(earliest.clone());
    }
    if target.to_latest {
        return Ok(latest.clone());
    }
    if let Some(offset) = target.to_offset {
        return Ok(ids.iter().map(|p| (*p, within(p, offset))).collect());
    }
    if let Some(shift) = target.shift_by {
        let mut shifted = BTreeMap::new();
        for p in &ids {
            let Some(&now) = committed.and_then(|m| m.get(p)).filter(|o| **o >= 0) else {
                bail!(
                    "cannot shift {topic}-{p}: group {group} has no committed offset there \
                     (use --to-earliest, --to-latest, --to-offset or --to-datetime)"
                );
            };
            shifted.insert(*p, within(p, now.saturating_add(shift)));
        }
        return Ok(shifted);
    }
    let timestamp = timestamp.expect("clap requires one target");
    Ok(list_topic_offsets(bootstrap, topic, &ids, timestamp)
        .await?
        .into_iter()
        .map(|(p, offset)| (p, if offset < 0 { latest[&p] } else { offset }))
        .collect())
}

/// A member's host as Kafka's tools show it: `/ADDRESS` (Java's
/// `InetAddress` text, which Kafka brokers report as is); `-` when the
/// broker reports none.
fn kafka_host(host: &str) -> String {
    match host.trim() {
        "" => "-".to_string(),
        host if host.starts_with('/') => host.to_string(),
        host => format!("/{host}"),
    }
}

pub(super) async fn reset_offsets(args: ResetArgs) -> anyhow::Result<()> {
    let group = &args.group;
    let mut coordinator = coordinator(&args.connect, group).await?;
    let described = describe_group(&mut coordinator, group).await?;
    let active = !described.members.is_empty();
    if active && args.execute {
        bail!(
            "group {group} has {} active member(s) (state {}); stop its consumers before resetting offsets",
            described.members.len(),
            described.state
        );
    }
    let current = committed(&mut coordinator, group, None).await?;
    let topics: Vec<String> = if args.all_topics {
        if current.is_empty() {
            bail!("group {group} has no committed offsets: name the topics with --topic");
        }
        current.keys().cloned().collect()
    } else {
        args.topic.clone()
    };
    let timestamp = match &args.target.to_datetime {
        Some(text) => Some(parse_datetime(text).context("bad --to-datetime")?),
        None => None,
    };
    let mut bootstrap = args.connect.connect().await?;
    let mut plan: Vec<(String, BTreeMap<i32, i64>)> = Vec::with_capacity(topics.len());
    for topic in &topics {
        let place = Placement {
            group,
            topic,
            committed: current.get(topic),
        };
        let wanted = new_offsets(&mut bootstrap, &place, &args.target, timestamp).await?;
        plan.push((topic.clone(), wanted));
    }
    let execute = args.execute && !args.dry_run;
    if execute {
        for (topic, wanted) in &plan {
            commit(&mut coordinator, group, -1, "", topic, wanted)
                .await
                .with_context(|| format!("cannot reset the offsets of group {group}"))?;
        }
    }
    let mut text = String::from("GROUP\tTOPIC\tPARTITION\tNEW-OFFSET\n");
    for (topic, wanted) in &plan {
        for (p, offset) in wanted {
            text.push_str(&format!("{group}\t{topic}\t{p}\t{offset}\n"));
        }
    }
    out!("{text}");
    if !execute {
        eprintln!(
            "Dry run: nothing changed. Add --execute to commit these offsets{}.",
            if active {
                " (refused while the group has members)"
            } else {
                ""
            }
        );
    }
    Ok(())
}

pub(super) async fn delete(connect: &ConnectArgs, group: &str) -> anyhow::Result<()> {
    let mut coordinator = coordinator(connect, group).await?;
    let version = coordinator.version::<DeleteGroupsRequest>(DELETE_GROUPS_VERSIONS)?;
    let response = coordinator
        .call(
            &DeleteGroupsRequest::default().with_groups_names(vec![group_id(group)]),
            version,
        )
        .await?;
    let code = response
        .results
        .first()
        .map_or(ERROR_NONE, |r| r.error_code);
    match ResponseError::try_from_code(code) {
        None => {
            outln!("deleted group {group}");
            Ok(())
        }
        Some(ResponseError::NonEmptyGroup) => {
            bail!("group {group} has active members; stop its consumers before deleting it")
        }
        Some(ResponseError::GroupIdNotFound) => bail!("there is no group {group}"),
        Some(_) => bail!("cannot delete group {group}: {}", error_name(code)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_show_as_kafka_shows_them() {
        assert_eq!(kafka_host("127.0.0.1"), "/127.0.0.1");
        assert_eq!(kafka_host("/127.0.0.1"), "/127.0.0.1");
        assert_eq!(kafka_host(""), "-");
    }
}
