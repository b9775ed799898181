//! The controller's front end: the only writer of the metadata log. It
//! runs on core 0 (other cores hop there), validates a change (CreateTopics,
//! DeleteTopics, CreatePartitions, config changes, producer id blocks) and
//! proposes its records ([`propose`]); the back end on every core (the
//! `reconciler`) makes that core's partitions and image match. One change
//! at a time, under `Shard::controller_lock`.

use std::collections::BTreeMap;
use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;

use crate::errors;
use crate::limits::{PRODUCER_ID_BLOCK, TOPIC_PARTITIONS_MAX};
use crate::metadata::{
    is_internal_topic, place_partitions, topic_id_from, validate_topic_name, MetadataImage,
    MetadataRecord, PartitionState, TopicMeta,
};
use crate::reconciler::{self, Removal};
use crate::shard::Shard;
use crate::topic_config;

pub const CONTROLLER_CORE: usize = 0;

pub use crate::change::{Assignment, Outcome, Refusal, TopicSpec};

/// Warns of each new partition `first..first + count` of `topic` whose
/// directory already holds data: left from a topic the metadata lost (or
/// deleted while the broker was down), it is served as this partition's
/// log from now on, so the operator must hear of it.
fn warn_adopted_dirs(controller: &Shard, topic: &str, first: i32, count: usize) {
    for index in first..first + count as i32 {
        let dir = controller.config.data_dir.join(format!("{topic}-{index}"));
        if crate::metadata::partition_dir_holds_data(&dir) {
            tracing::warn!(
                dir = %dir.display(),
                topic = %topic,
                partition = index,
                "a new partition takes over a directory that already holds data"
            );
        }
    }
}

/// Runs `step` on every core in turn, stopping at the first error.
async fn on_every_core<E, F, Fut>(controller: &Rc<Shard>, step: F) -> Result<(), E>
where
    E: Send + 'static,
    F: Fn(Rc<Shard>) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<(), E>> + 'static,
{
    for core in 0..controller.cores {
        controller.run_on(core, step.clone()).await?;
    }
    Ok(())
}

/// Makes `records` the next change of the metadata, everywhere, before
/// returning: every core first opens the partitions it owns in the
/// proposed image (a core that cannot refuses the change, and nothing of
/// it stays), the log makes the records durable, every core installs the
/// committed image, and last every core deletes the partitions the change
/// removed. Opening before the commit keeps a topic that cannot be opened
/// out of the metadata; installing everywhere before any delete keeps a
/// core from routing to a partition already gone.
async fn propose(
    controller: &Rc<Shard>,
    records: Vec<MetadataRecord>,
) -> Result<Arc<MetadataImage>, Refusal> {
    if let Some(cluster) = crate::cluster::of(controller) {
        cluster.propose(records).await.map_err(|error| {
            tracing::warn!(%error, "a metadata change was not committed");
            Refusal::new(errors::NOT_CONTROLLER, error.to_string())
        })?;
        let image = cluster.image();
        crate::cluster::reconcile_everywhere(controller, &image).await;
        return Ok(image);
    }
    let store = controller.metadata.store().clone();
    let proposed = Arc::new(store.image().with(&records));
    let opened = on_every_core(controller, move |shard| {
        let proposed = proposed.clone();
        async move {
            reconciler::open_missing(&shard, &proposed)
                .await
                .map(|_| ())
        }
    })
    .await;
    if let Err(failure) = opened {
        tracing::error!(%failure, "a change's partitions cannot be opened; it is refused");
        withdraw(controller).await;
        return Err(Refusal::new(errors::KAFKA_STORAGE_ERROR, failure.message));
    }
    let image = match store.commit(records).await {
        Ok(image) => image,
        Err(error) => {
            tracing::error!(%error, "metadata log append failed");
            withdraw(controller).await;
            return Err(Refusal::new(errors::KAFKA_STORAGE_ERROR, error.to_string()));
        }
    };
    let installed = image.clone();
    let _ = on_every_core(controller, move |shard| {
        let image = installed.clone();
        async move {
            reconciler::install(&shard, &image);
            Ok::<(), ()>(())
        }
    })
    .await;
    let _ = on_every_core(controller, |shard| async move {
        reconciler::remove_gone(&shard, Removal::Delete).await;
        Ok::<(), ()>(())
    })
    .await;
    Ok(image)
}

/// Closes, on every core, the partitions a refused change opened.
async fn withdraw(controller: &Rc<Shard>) {
    let _ = on_every_core(controller, |shard| async move {
        reconciler::remove_gone(&shard, Removal::Close).await;
        Ok::<(), ()>(())
    })
    .await;
}

/// Checks one partition's manual replica list as Kafka does: not empty,
/// only known brokers, none twice, and `replication_factor` replicas when
/// earlier partitions set it.
fn check_replicas(replicas: &[i32], brokers: &[i32], replication_factor: Option<usize>) -> Outcome {
    let refuse = |message: String| Err(Refusal::new(errors::INVALID_REPLICA_ASSIGNMENT, message));
    if replicas.is_empty() {
        return refuse("a partition of the manual assignment has no replicas".to_string());
    }
    let mut sorted = replicas.to_vec();
    sorted.sort_unstable();
    for (i, broker) in sorted.iter().enumerate() {
        if !brokers.contains(broker) {
            return refuse(format!(
                "the manual assignment names broker {broker}, which is not a broker of this cluster (known: {brokers:?})"
            ));
        }
        if i > 0 && sorted[i - 1] == *broker {
            return refuse(format!(
                "the manual assignment names broker {broker} more than once for one partition"
            ));
        }
    }
    if let Some(expected) = replication_factor {
        if replicas.len() != expected {
            return refuse(format!(
                "a partition of the manual assignment has {} replicas, but the others have {expected}",
                replicas.len()
            ));
        }
    }
    Ok(())
}

/// Validates a CreateTopics manual assignment as Kafka does and returns the
/// replicas by partition index (0..n-1, each index once).
pub fn check_assignment(
    assignments: &[(i32, Vec<i32>)],
    brokers: &[i32],
) -> Result<Vec<Vec<i32>>, Refusal> {
    let mut by_partition: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    let mut replication_factor = None;
    for (partition, replicas) in assignments {
        if by_partition.contains_key(partition) {
            return Err(Refusal::new(
                errors::INVALID_REPLICA_ASSIGNMENT,
                format!("partition {partition} is assigned more than once"),
            ));
        }
        check_replicas(replicas, brokers, replication_factor)?;
        replication_factor = Some(replicas.len());
        by_partition.insert(*partition, replicas.clone());
    }
    if by_partition
        .keys()
        .enumerate()
        .any(|(i, &partition)| i64::from(partition) != i as i64)
    {
        return Err(Refusal::new(
            errors::INVALID_REPLICA_ASSIGNMENT,
            format!(
                "the manual assignment's partitions must be 0 to {} without gaps, got {:?}",
                by_partition.len().saturating_sub(1),
                by_partition.keys().collect::<Vec<_>>()
            ),
        ));
    }
    Ok(by_partition.into_values().collect())
}

fn check_configs(configs: &BTreeMap<String, String>) -> Outcome {
    for (key, value) in configs {
        topic_config::validate(key, value)
            .map_err(|message| Refusal::new(errors::INVALID_CONFIG, message))?;
    }
    Ok(())
}

/// The topic named `name`, or the refusal every change to a missing topic gets.
fn existing_topic(image: &MetadataImage, name: &str) -> Result<Arc<TopicMeta>, Refusal> {
    image.topics.get(name).cloned().ok_or_else(|| {
        Refusal::new(
            errors::UNKNOWN_TOPIC_OR_PARTITION,
            format!("topic {name} does not exist"),
        )
    })
}

/// Internal topics keep the shape the broker gave them: deleting
/// `__consumer_offsets` loses every group's offsets, and changing its
/// partition count moves groups to partitions that do not hold them.
fn refuse_internal(name: &str, what: &str) -> Outcome {
    if is_internal_topic(name) {
        return Err(Refusal::new(
            errors::INVALID_TOPIC_EXCEPTION,
            format!("{name} is an internal topic and cannot be {what}"),
        ));
    }
    Ok(())
}

/// Runs `work` on the controller core while holding the controller lock, so
/// that metadata changes are applied one at a time.
async fn on_controller<R, F, Fut>(shard: &Rc<Shard>, work: F) -> R
where
    R: Send + 'static,
    F: FnOnce(Rc<Shard>) -> Fut + Send + 'static,
    Fut: Future<Output = R> + 'static,
{
    shard
        .run_on(CONTROLLER_CORE, move |controller| async move {
            let _lock = controller
                .controller_lock
                .acquire_permit(1)
                .await
                .expect("controller lock is never closed");
            work(controller.clone()).await
        })
        .await
}

/// In a cluster, the refusal a change gets on a broker that is not the
/// active controller (admin requests are forwarded before they get
/// here; this is what a client hears when that failed: retry).
fn not_controller(shard: &Shard) -> Option<Refusal> {
    let cluster = crate::cluster::of(shard)?;
    if cluster.is_active_controller() {
        return None;
    }
    Some(Refusal::new(
        errors::NOT_CONTROLLER,
        format!(
            "this broker is not the active controller (the active one is {})",
            cluster.active_controller()
        ),
    ))
}

/// The brokers a manual assignment may name: this node alone, or every
/// registered broker of the cluster.
fn known_brokers(controller: &Shard, image: &MetadataImage) -> Vec<i32> {
    if controller.in_cluster() {
        image.brokers.keys().copied().collect()
    } else {
        vec![controller.config.node_id]
    }
}

/// Replicas for `count` new partitions with `replication_factor` replicas
/// (-1: the default), or INVALID_REPLICATION_FACTOR.
fn place(
    controller: &Shard,
    image: &MetadataImage,
    count: usize,
    replication_factor: i16,
) -> Result<Vec<Vec<i32>>, Refusal> {
    let factor = if replication_factor == -1 {
        controller.config.default_replication_factor
    } else {
        replication_factor
    };
    if !controller.in_cluster() {
        if factor != 1 {
            return Err(Refusal::new(
                errors::INVALID_REPLICATION_FACTOR,
                format!("replication factor {factor} is larger than the 1 available broker"),
            ));
        }
        return Ok(vec![vec![controller.config.node_id]; count]);
    }
    let live = image.live_brokers().count();
    let factor_usize = usize::try_from(factor).unwrap_or(0);
    crate::cluster::placement::place_replicas(image, count, factor_usize).ok_or_else(|| {
        Refusal::new(
            errors::INVALID_REPLICATION_FACTOR,
            format!(
                "replication factor {factor} is larger than the {live} live brokers, or below 1"
            ),
        )
    })
}

/// Creates topics (or only validates them); one outcome per spec, in order.
pub async fn create_topics(
    shard: &Rc<Shard>,
    specs: Vec<TopicSpec>,
    validate_only: bool,
) -> Vec<Outcome> {
    let specs = specs.into_iter().map(|spec| (spec, Vec::new())).collect();
    create_assigned_topics(shard, specs, validate_only).await
}

/// Creates topics, each with its manual assignment (or none); one outcome
/// per spec, in order.
pub async fn create_assigned_topics(
    shard: &Rc<Shard>,
    specs: Vec<(TopicSpec, Assignment)>,
    validate_only: bool,
) -> Vec<Outcome> {
    if not_controller(shard).is_some() {
        return crate::cluster::forward::create_topics(shard, specs, validate_only).await;
    }
    on_controller(shard, move |controller| async move {
        let mut outcomes = Vec::with_capacity(specs.len());
        for (spec, assignment) in specs {
            outcomes.push(create_topic(&controller, spec, &assignment, validate_only).await);
        }
        outcomes
    })
    .await
}

async fn create_topic(
    controller: &Rc<Shard>,
    spec: TopicSpec,
    assignment: &[(i32, Vec<i32>)],
    validate_only: bool,
) -> Outcome {
    validate_topic_name(&spec.name)
        .map_err(|m| Refusal::new(errors::INVALID_TOPIC_EXCEPTION, m))?;
    let image = controller.metadata.store().image();
    if image.topics.contains_key(&spec.name) {
        return Err(Refusal::new(
            errors::TOPIC_ALREADY_EXISTS,
            format!("topic {} already exists", spec.name),
        ));
    }
    if let Some(refusal) = not_controller(controller) {
        return Err(refusal);
    }
    let brokers = known_brokers(controller, &image);
    let assigned = if assignment.is_empty() {
        None
    } else {
        Some(check_assignment(assignment, &brokers)?)
    };
    let partitions = match &assigned {
        Some(replicas) => i32::try_from(replicas.len()).unwrap_or(i32::MAX),
        None if spec.partitions == -1 => controller.config.num_partitions,
        None => spec.partitions,
    };
    if !(1..=TOPIC_PARTITIONS_MAX).contains(&partitions) {
        return Err(Refusal::new(
            errors::INVALID_PARTITIONS,
            format!("partition count {partitions} is not between 1 and {TOPIC_PARTITIONS_MAX}"),
        ));
    }
    let replicas = match assigned {
        Some(replicas) => replicas,
        None => place(
            controller,
            &image,
            partitions as usize,
            spec.replication_factor,
        )?,
    };
    check_configs(&spec.configs)?;
    if validate_only {
        return Ok(());
    }
    let mut counts = image.partitions_per_core(controller.cores);
    let cores = place_partitions(&mut counts, partitions as usize);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let topic = TopicMeta {
        name: spec.name.clone(),
        topic_id: topic_id_from(seed ^ (spec.name.len() as u128) << 100),
        partition_cores: cores,
        configs: spec.configs,
        partitions: replicas.into_iter().map(PartitionState::new).collect(),
    };
    warn_adopted_dirs(controller, &spec.name, 0, partitions as usize);
    propose(controller, vec![MetadataRecord::TopicCreated(topic)]).await?;
    tracing::info!(topic = %spec.name, partitions, "topic created");
    Ok(())
}

/// Deletes topics by name; one outcome per name, in order.
pub async fn delete_topics(shard: &Rc<Shard>, names: Vec<String>) -> Vec<Outcome> {
    on_controller(shard, move |controller| async move {
        let mut outcomes = Vec::with_capacity(names.len());
        for name in names {
            outcomes.push(delete_topic(&controller, name).await);
        }
        outcomes
    })
    .await
}

async fn delete_topic(controller: &Rc<Shard>, name: String) -> Outcome {
    if !controller.config.delete_topic_enable {
        return Err(Refusal::new(
            errors::TOPIC_DELETION_DISABLED,
            "delete.topic.enable is false",
        ));
    }
    existing_topic(&controller.metadata.store().image(), &name)?;
    refuse_internal(&name, "deleted")?;
    propose(
        controller,
        vec![MetadataRecord::TopicDeleted { name: name.clone() }],
    )
    .await?;
    tracing::info!(topic = %name, "topic deleted");
    Ok(())
}

/// Grows a topic to `count` partitions; `assignments`, when given, lists
/// the new partitions' replicas in order.
pub async fn create_partitions(
    shard: &Rc<Shard>,
    name: String,
    count: i32,
    assignments: Option<Vec<Vec<i32>>>,
    validate_only: bool,
) -> Outcome {
    on_controller(shard, move |controller| async move {
        let image = controller.metadata.store().image();
        let topic = existing_topic(&image, &name)?;
        refuse_internal(&name, "repartitioned")?;
        let current = topic.partition_cores.len() as i32;
        if count <= current {
            return Err(Refusal::new(errors::INVALID_PARTITIONS, format!("topic {name} has {current} partitions; the new count must be larger, not {count}")));
        }
        if count > TOPIC_PARTITIONS_MAX {
            return Err(Refusal::new(errors::INVALID_PARTITIONS, format!("partition count {count} is above {TOPIC_PARTITIONS_MAX}")));
        }
        if let Some(refusal) = not_controller(&controller) {
            return Err(refusal);
        }
        let added = (count - current) as usize;
        let replication_factor = topic.partition(0).map_or(1, |p| p.replicas.len());
        let replicas = match assignments {
            None => place(&controller, &image, added, replication_factor as i16)?,
            Some(assignments) => {
                if assignments.len() != added {
                    return Err(Refusal::new(errors::INVALID_REPLICA_ASSIGNMENT, format!("{added} partitions are added but the manual assignment lists {}", assignments.len())));
                }
                let brokers = known_brokers(&controller, &image);
                for replicas in &assignments {
                    check_replicas(replicas, &brokers, Some(replication_factor))?;
                }
                assignments
            }
        };
        if validate_only {
            return Ok(());
        }
        let mut counts = image.partitions_per_core(controller.cores);
        let cores = place_partitions(&mut counts, added);
        warn_adopted_dirs(&controller, &name, current, added);
        let partitions = replicas.into_iter().map(PartitionState::new).collect();
        propose(&controller, vec![MetadataRecord::PartitionsAdded { name: name.clone(), cores, partitions }]).await?;
        tracing::info!(topic = %name, partitions = count, "partitions added");
        Ok(())
    })
    .await
}

/// Replaces a topic's config overrides and applies them live.
pub async fn set_topic_configs(
    shard: &Rc<Shard>,
    name: String,
    configs: BTreeMap<String, String>,
    validate_only: bool,
) -> Outcome {
    on_controller(shard, move |controller| async move {
        existing_topic(&controller.metadata.store().image(), &name)?;
        check_configs(&configs)?;
        if validate_only {
            return Ok(());
        }
        // The reconciler gives the open partitions their new settings.
        propose(
            &controller,
            vec![MetadataRecord::TopicConfigsSet {
                name: name.clone(),
                configs,
            }],
        )
        .await?;
        tracing::info!(topic = %name, "topic configs changed");
        Ok(())
    })
    .await
}

/// Replaces the dynamic settings of a broker resource (`""`: the
/// cluster-wide default, else a node id), keeps them in the metadata log
/// and applies them live: every topic's partitions get their effective
/// settings again.
pub async fn set_broker_configs(
    shard: &Rc<Shard>,
    resource: String,
    configs: BTreeMap<String, String>,
    validate_only: bool,
) -> Outcome {
    on_controller(shard, move |controller| async move {
        for (key, value) in &configs {
            if !crate::config::dynamic::is_dynamic(key) {
                return Err(Refusal::new(
                    errors::INVALID_REQUEST,
                    format!("{key} is read-only: it cannot be changed while the broker runs (set it in the configuration file and restart)"),
                ));
            }
            crate::config::dynamic::validate_broker(key, value)
                .map_err(|message| Refusal::new(errors::INVALID_CONFIG, message))?;
        }
        if validate_only {
            return Ok(());
        }
        // The reconciler gives every open partition its new settings.
        propose(
            &controller,
            vec![MetadataRecord::BrokerConfigsSet {
                resource: resource.clone(),
                configs,
            }],
        )
        .await?;
        tracing::info!(resource = %resource, "dynamic broker configs changed");
        Ok(())
    })
    .await
}

/// Sets and deletes users' SCRAM credentials (each user's changes
/// together or not at all) and keeps them in the metadata log: one
/// result per user.
pub async fn alter_scram_credentials(
    shard: &Rc<Shard>,
    changes: Vec<crate::credentials::Change>,
) -> Vec<crate::credentials::UserResult> {
    on_controller(shard, move |controller| async move {
        let image = controller.metadata.store().image();
        let (mut results, records) = crate::credentials::decide(&image, &changes);
        let refusal = match not_controller(&controller) {
            Some(refusal) => Some(refusal),
            None if records.is_empty() => None,
            None => propose(&controller, records).await.err(),
        };
        for (user, code, message) in &mut results {
            if *code != errors::NONE {
                continue;
            }
            match &refusal {
                Some(refusal) => {
                    *code = refusal.error_code;
                    *message = Some(refusal.message.clone());
                }
                None => tracing::info!(user = %user, "SCRAM credentials changed"),
            }
        }
        results
    })
    .await
}

/// Adds ACLs (those already there change nothing) to the metadata log.
pub async fn create_acls(shard: &Rc<Shard>, acls: Vec<crate::metadata::AclBinding>) -> Outcome {
    on_controller(shard, move |controller| async move {
        if let Some(refusal) = not_controller(&controller) {
            return Err(refusal);
        }
        let image = controller.metadata.store().image();
        let mut records = Vec::new();
        for acl in acls {
            let record = MetadataRecord::AclCreated(acl.clone());
            if !image.acls.contains(&acl) && !records.contains(&record) {
                records.push(record);
            }
        }
        if !records.is_empty() {
            let count = records.len();
            propose(&controller, records).await?;
            tracing::info!(count, "ACLs created");
        }
        Ok(())
    })
    .await
}

/// Removes the ACLs each filter matches; the ACLs removed, per filter.
pub async fn delete_acls(
    shard: &Rc<Shard>,
    filters: Vec<crate::authorizer::AclFilter>,
) -> Result<Vec<Vec<crate::metadata::AclBinding>>, Refusal> {
    on_controller(shard, move |controller| async move {
        if let Some(refusal) = not_controller(&controller) {
            return Err(refusal);
        }
        let image = controller.metadata.store().image();
        let matched: Vec<Vec<crate::metadata::AclBinding>> = filters
            .iter()
            .map(|f| {
                image
                    .acls
                    .iter()
                    .filter(|a| f.matches(a))
                    .cloned()
                    .collect()
            })
            .collect();
        let gone: std::collections::BTreeSet<&crate::metadata::AclBinding> =
            matched.iter().flatten().collect();
        if !gone.is_empty() {
            let count = gone.len();
            let records = gone
                .into_iter()
                .map(|acl| MetadataRecord::AclDeleted(acl.clone()))
                .collect();
            propose(&controller, records).await?;
            tracing::info!(count, "ACLs deleted");
        }
        Ok(matched)
    })
    .await
}

/// Replaces a consumer group's settings and keeps them in the metadata log.
pub async fn set_group_configs(
    shard: &Rc<Shard>,
    group: String,
    configs: BTreeMap<String, String>,
    validate_only: bool,
) -> Outcome {
    on_controller(shard, move |controller| async move {
        if group.is_empty() {
            return Err(Refusal::new(
                errors::INVALID_GROUP_ID,
                "the group id is empty",
            ));
        }
        crate::config::dynamic::validate_group(&configs)
            .map_err(|message| Refusal::new(errors::INVALID_CONFIG, message))?;
        if validate_only {
            return Ok(());
        }
        propose(
            &controller,
            vec![MetadataRecord::GroupConfigsSet {
                group: group.clone(),
                configs,
            }],
        )
        .await?;
        tracing::info!(group = %group, "group configs changed");
        Ok(())
    })
    .await
}

/// Elects leaders for `partitions` (None: every partition): the preferred
/// replica, or (not `preferred`) any live replica for a partition without
/// a leader. One result per partition: NONE when elected, else why not.
pub async fn elect_leaders(
    shard: &Rc<Shard>,
    preferred: bool,
    partitions: Option<Vec<(String, i32)>>,
) -> Vec<((String, i32), i16)> {
    let wanted = move |image: &MetadataImage| -> Vec<(String, i32)> {
        partitions.clone().unwrap_or_else(|| {
            image
                .topics
                .values()
                .flat_map(|t| (0..t.partitions.len() as i32).map(move |p| (t.name.clone(), p)))
                .collect()
        })
    };
    if !shard.in_cluster() {
        // A single node leads every partition it has.
        let image = shard.metadata.image();
        return wanted(&image)
            .into_iter()
            .map(|(topic, p)| {
                let known = image
                    .topics
                    .get(&topic)
                    .and_then(|t| t.partition(p))
                    .is_some();
                let code = if known {
                    errors::ELECTION_NOT_NEEDED
                } else {
                    errors::UNKNOWN_TOPIC_OR_PARTITION
                };
                ((topic, p), code)
            })
            .collect();
    }
    if let Some(refusal) = not_controller(shard) {
        let image = shard.metadata.image();
        return wanted(&image)
            .into_iter()
            .map(|tp| (tp, refusal.error_code))
            .collect();
    }
    let wanted = wanted.clone();
    on_controller(shard, move |controller| async move {
        let image = controller.metadata.store().image();
        let mut records = Vec::new();
        let mut results = Vec::new();
        for (topic, p) in wanted(&image) {
            match crate::cluster::placement::elect(&image, &topic, p, preferred) {
                Ok(record) => {
                    records.push(record);
                    results.push(((topic, p), errors::NONE));
                }
                Err(why) => results.push(((topic, p), errors::refused(why))),
            }
        }
        if !records.is_empty() {
            let elected = records.len();
            if let Err(refusal) = propose(&controller, records).await {
                for (_, code) in results.iter_mut().filter(|(_, c)| *c == errors::NONE) {
                    *code = refusal.error_code;
                }
            } else {
                tracing::info!(elected, preferred, "leaders elected");
            }
        }
        results
    })
    .await
}

/// One partition's part of AlterPartitionReassignments: the target
/// replicas, or `None` to cancel the move under way.
#[derive(Debug, Clone)]
pub struct Reassignment {
    pub topic: String,
    pub partition: i32,
    pub target: Option<Vec<i32>>,
}

/// Starts or cancels the reassignments (see
/// [`crate::cluster::placement::reassign`]); each partition's outcome in
/// request order. Without `allow_replication_factor_change` a target with
/// another count of replicas than the partition has gets
/// INVALID_REPLICATION_FACTOR.
pub async fn alter_reassignments(
    shard: &Rc<Shard>,
    wanted: Vec<Reassignment>,
    allow_replication_factor_change: bool,
) -> Vec<Outcome> {
    if let Some(refusal) = not_controller(shard) {
        return wanted.iter().map(|_| Err(refusal.clone())).collect();
    }
    on_controller(shard, move |controller| async move {
        let image = controller.metadata.store().image();
        let brokers = known_brokers(&controller, &image);
        let mut outcomes = Vec::with_capacity(wanted.len());
        let mut records = Vec::new();
        let mut decided = image.as_ref().clone();
        for change in &wanted {
            let outcome =
                reassignment_record(&decided, &brokers, change, allow_replication_factor_change)
                    .map(|record| {
                        if let Some(record) = record {
                            // Later parts of the request see this one's change.
                            decided.apply(&record);
                            records.push(record);
                        }
                    });
            outcomes.push(outcome);
        }
        if !records.is_empty() {
            let changed = records.len();
            if let Err(refusal) = propose(&controller, records).await {
                for outcome in outcomes.iter_mut().filter(|o| o.is_ok()) {
                    *outcome = Err(refusal.clone());
                }
            } else {
                tracing::info!(changed, "partition reassignments started or cancelled");
            }
        }
        outcomes
    })
    .await
}

/// The record of one part of AlterPartitionReassignments, if it changes
/// anything, or why it is refused.
fn reassignment_record(
    image: &MetadataImage,
    brokers: &[i32],
    change: &Reassignment,
    allow_replication_factor_change: bool,
) -> Result<Option<MetadataRecord>, Refusal> {
    if let Some(target) = &change.target {
        check_replicas(target, brokers, None)?;
        let current = image
            .topics
            .get(&change.topic)
            .and_then(|t| t.partition(change.partition))
            .map(|p| p.original_replicas().len());
        if let Some(current) = current {
            if !allow_replication_factor_change && current != target.len() {
                return Err(Refusal::new(
                    errors::INVALID_REPLICATION_FACTOR,
                    format!(
                        "the target has {} replicas and the partition {current}; the request \
                         does not allow a replication factor change",
                        target.len()
                    ),
                ));
            }
        }
    }
    crate::cluster::placement::reassign(
        image,
        &change.topic,
        change.partition,
        change.target.as_deref(),
    )
    .map_err(|(code, message)| Refusal::new(errors::refused(code), message))
}

/// Hands out a new producer id, taking a new block from the metadata log
/// when the current one is used up.
pub async fn allocate_producer_id(shard: &Rc<Shard>) -> Result<i64, Refusal> {
    on_controller(shard, move |controller| async move {
        let (next, end) = controller.producer_ids.get();
        let (next, end) = if next < end {
            (next, end)
        } else {
            let start = controller
                .metadata
                .store()
                .image()
                .producer_ids_end
                .max(next);
            let end = start + PRODUCER_ID_BLOCK;
            propose(
                &controller,
                vec![MetadataRecord::ProducerIdsAllocated { end }],
            )
            .await?;
            (start, end)
        };
        controller.producer_ids.set((next + 1, end));
        Ok(next)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks a CreateTopics assignment against brokers `[0]`: the replicas
    /// by partition, or the refusal's code.
    fn check(assignments: &[(i32, &[i32])], expected: Result<Vec<Vec<i32>>, i16>) {
        let assignments: Vec<(i32, Vec<i32>)> =
            assignments.iter().map(|(p, r)| (*p, r.to_vec())).collect();
        let got = check_assignment(&assignments, &[0]).map_err(|r| r.error_code);
        assert_eq!(got, expected, "{assignments:?}");
    }

    #[test]
    fn manual_assignments_are_checked_as_kafka_checks_them() {
        let bad = Err(errors::INVALID_REPLICA_ASSIGNMENT);
        check(&[(0, &[0]), (1, &[0]), (2, &[0])], Ok(vec![vec![0]; 3]));
        check(&[(1, &[0]), (0, &[0])], Ok(vec![vec![0]; 2]));
        check(&[(0, &[0]), (2, &[0])], bad.clone());
        check(&[(1, &[0])], bad.clone());
        check(&[(0, &[0]), (0, &[0])], bad.clone());
        check(&[(0, &[0, 0])], bad.clone());
        check(&[(0, &[1])], bad.clone());
        check(&[(0, &[])], bad.clone());
        check(&[(-1, &[0])], bad);
    }

    #[test]
    fn every_partition_has_as_many_replicas_as_the_first() {
        let assignments = vec![(0, vec![0]), (1, vec![0, 1])];
        let refusal = check_assignment(&assignments, &[0, 1]).unwrap_err();
        assert_eq!(refusal.error_code, errors::INVALID_REPLICA_ASSIGNMENT);
        assert!(
            refusal.message.contains("2 replicas"),
            "{}",
            refusal.message
        );
    }
}
