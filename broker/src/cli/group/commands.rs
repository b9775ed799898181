//! The group admin commands: `strom group list`, `describe` (members,
//! assignments, committed offsets and lag), `reset-offsets` and `delete`.

use std::collections::BTreeMap;

use anyhow::{bail, Context};
use kafka_protocol::messages::{
    ApiKey, DeleteGroupsRequest, DescribeGroupsRequest, ListGroupsRequest,
};
use protocol::admin::{list_topic_offsets, partitions, EARLIEST, LATEST};
use protocol::client::{check_error, error_name, Connection, ERROR_NONE};
use protocol::consumer_protocol::{self, assignment_partitions};
use protocol::kafka_protocol::error::ResponseError;

use super::datetime::parse_datetime;
use super::{
    commit, committed, coordinator, group_id, ConnectArgs, ResetArgs, ResetTarget,
    DELETE_GROUPS_VERSIONS, DESCRIBE_GROUPS_VERSIONS, LIST_GROUPS_VERSIONS,
};

pub(super) async fn list(connect: &ConnectArgs) -> anyhow::Result<()> {
    let mut connection = connect.connect().await?;
    let version = connection.version::<ListGroupsRequest>(LIST_GROUPS_VERSIONS)?;
    let response = connection
        .call(&ListGroupsRequest::default(), version)
        .await?;
    check_error(ApiKey::ListGroups, response.error_code, None)?;
    let mut groups: Vec<(String, String, String)> = response
        .groups
        .iter()
        .map(|g| {
            (
                g.group_id.0.to_string(),
                g.group_state.to_string(),
                g.protocol_type.to_string(),
            )
        })
        .collect();
    groups.sort();
    for (name, state, protocol_type) in groups {
        let state = if state.is_empty() { "-" } else { &state };
        let protocol_type = if protocol_type.is_empty() {
            "-"
        } else {
            &protocol_type
        };
        outln!("{name}\t{state}\t{protocol_type}");
    }
    Ok(())
}

/// Topic → partitions of one member's assignment.
type Assignment = BTreeMap<String, Vec<i32>>;

/// A group as DescribeGroups shows it.
struct Described {
    state: String,
    protocol_type: String,
    protocol: String,
    /// member id, client id, host, assignment (topic → partitions).
    members: Vec<(String, String, String, Assignment)>,
}

async fn describe_group(connection: &mut Connection, group: &str) -> anyhow::Result<Described> {
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
        protocol_type: found.protocol_type.to_string(),
        protocol: found.protocol_data.to_string(),
        members: found
            .members
            .iter()
            .map(|m| {
                let assignment = if consumer {
                    assignment_partitions(&m.member_assignment).unwrap_or_default()
                } else {
                    BTreeMap::new()
                };
                (
                    m.member_id.to_string(),
                    m.client_id.to_string(),
                    m.client_host.to_string(),
                    assignment,
                )
            })
            .collect(),
    })
}

pub(super) async fn describe(connect: &ConnectArgs, group: &str) -> anyhow::Result<()> {
    let mut coordinator = coordinator(connect, group).await?;
    let described = describe_group(&mut coordinator, group).await?;
    let offsets = committed(&mut coordinator, group, None).await?;
    if described.state == "Dead" && described.members.is_empty() && offsets.is_empty() {
        bail!("consumer group {group} does not exist (no members, no committed offsets)");
    }
    outln!(
        "GROUP {group}\tSTATE {}\tPROTOCOL {}/{}\tMEMBERS {}",
        described.state,
        if described.protocol_type.is_empty() {
            "-"
        } else {
            &described.protocol_type
        },
        if described.protocol.is_empty() {
            "-"
        } else {
            &described.protocol
        },
        described.members.len()
    );
    let owners = print_members(&described);
    let mut rows: BTreeMap<(String, i32), i64> = BTreeMap::new();
    for (t, ps) in &offsets {
        for (p, offset) in ps {
            rows.insert((t.clone(), *p), *offset);
        }
    }
    for key in owners.keys() {
        rows.entry(key.clone()).or_insert(-1);
    }
    let mut bootstrap = connect.connect().await?;
    print_lag(&mut bootstrap, &rows, &owners).await
}

/// Prints a `MEMBER` line per member; returns each assigned partition's
/// member.
fn print_members(described: &Described) -> BTreeMap<(String, i32), String> {
    let mut owners: BTreeMap<(String, i32), String> = BTreeMap::new();
    for (member_id, client_id, host, assignment) in &described.members {
        let parts: Vec<String> = assignment
            .iter()
            .map(|(t, ps)| {
                let list: Vec<String> = ps.iter().map(i32::to_string).collect();
                format!("{t}:{}", list.join(","))
            })
            .collect();
        outln!(
            "MEMBER {member_id}\tCLIENT {client_id}\tHOST {}\tASSIGNED {}",
            kafka_host(host),
            if parts.is_empty() {
                "-".to_string()
            } else {
                parts.join(" ")
            }
        );
        for (t, ps) in assignment {
            for p in ps {
                owners.insert((t.clone(), *p), member_id.clone());
            }
        }
    }
    owners
}

/// Prints the committed offset (-1: none), log end and lag of every
/// partition in `rows`, with its member.
async fn print_lag(
    bootstrap: &mut Connection,
    rows: &BTreeMap<(String, i32), i64>,
    owners: &BTreeMap<(String, i32), String>,
) -> anyhow::Result<()> {
    outln!("TOPIC\tPARTITION\tCOMMITTED\tLOG-END\tLAG\tMEMBER");
    let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for (t, p) in rows.keys() {
        by_topic.entry(t.clone()).or_default().push(*p);
    }
    for (t, ps) in by_topic {
        let ends = list_topic_offsets(bootstrap, &t, &ps, LATEST).await?;
        for p in ps {
            let committed = rows[&(t.clone(), p)];
            let end = ends[&p];
            let (shown, lag) = if committed >= 0 {
                (committed.to_string(), (end - committed).max(0).to_string())
            } else {
                ("-".to_string(), "-".to_string())
            };
            let owner = owners.get(&(t.clone(), p)).map_or("-", String::as_str);
            outln!("{t}\t{p}\t{shown}\t{end}\t{lag}\t{owner}");
        }
    }
    Ok(())
}

/// Where `reset-offsets` moves one topic's offsets from.
struct Placement<'a> {
    group: &'a str,
    topic: &'a str,
    /// The group's committed offsets of the topic, if any.
    committed: Option<&'a BTreeMap<i32, i64>>,
}

/// The offsets `target` names for every partition of one topic, within
/// each partition's earliest and latest.
async fn new_offsets(
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
