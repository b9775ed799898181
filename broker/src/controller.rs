//! The controller: the only writer of the metadata log. It runs on core 0
//! (other cores hop there), validates a change, opens or removes the
//! partitions on their owning cores, then commits the change so every core
//! sees it. One change at a time, under `Shard::controller_lock`.

use std::collections::BTreeMap;
use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;

use crate::errors;
use crate::limits::{PRODUCER_ID_BLOCK, TOPIC_PARTITIONS_MAX};
use crate::metadata::{
    is_internal_topic, place_partitions, topic_id_from, validate_topic_name, MetadataImage,
    MetadataRecord, TopicMeta,
};
use crate::partition::Partition;
use crate::shard::Shard;
use crate::topic_config;

pub const CONTROLLER_CORE: usize = 0;

/// A topic to create.
#[derive(Debug, Clone)]
pub struct TopicSpec {
    pub name: String,
    pub partitions: i32,
    pub replication_factor: i16,
    pub configs: BTreeMap<String, String>,
}

/// A manual assignment: (partition index, replica broker ids), as a
/// CreateTopics request lists them; empty when the broker places the
/// partitions.
pub type Assignment = Vec<(i32, Vec<i32>)>;

/// A refused change: Kafka error code and a message for the client.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub error_code: i16,
    pub message: String,
}

impl Refusal {
    fn new(error_code: i16, message: impl Into<String>) -> Self {
        Self {
            error_code,
            message: message.into(),
        }
    }
}

pub type Outcome = Result<(), Refusal>;

/// Opens partitions `first..first + cores.len()` of `topic` on their owners.
async fn open_partitions(
    shard: &Rc<Shard>,
    topic: &str,
    first: i32,
    cores: &[u32],
    configs: &BTreeMap<String, String>,
) -> Outcome {
    let effective = crate::dynamic_config::topic_defaults(&shard.config, &shard.metadata.image())
        .effective(configs);
    for (offset, &core) in cores.iter().enumerate() {
        let index = first + offset as i32;
        let dir = shard.config.data_dir.join(format!("{topic}-{index}"));
        if crate::metadata::partition_dir_holds_data(&dir) {
            // Left from a topic the metadata lost (or deleted while the
            // broker was down): served as this partition's log from now
            // on, so the operator must hear of it.
            tracing::warn!(
                dir = %dir.display(),
                topic = %topic,
                partition = index,
                "a new partition takes over a directory that already holds data"
            );
        }
        let topic_name = topic.to_string();
        let effective = effective.clone();
        let result = shard
            .run_on(core as usize % shard.cores, move |owner| async move {
                let partition = Partition::open(
                    &owner.storage,
                    &owner.config.data_dir,
                    &topic_name,
                    index,
                    &effective,
                    owner.config.producer_id_expiration_ms,
                )
                .await
                .map_err(|e| e.to_string())?;
                owner
                    .partitions
                    .borrow_mut()
                    .entry(topic_name)
                    .or_default()
                    .insert(index, partition);
                Ok::<(), String>(())
            })
            .await;
        if let Err(message) = result {
            tracing::error!(topic = %topic, partition = index, error = %message, "opening partition failed");
            return Err(Refusal::new(errors::KAFKA_STORAGE_ERROR, message));
        }
    }
    Ok(())
}

/// Removes partitions of `topic` from their owners and deletes their data.
async fn delete_partitions(shard: &Rc<Shard>, topic: &str, cores: &[u32]) {
    let mut owners: Vec<usize> = cores.iter().map(|&c| c as usize % shard.cores).collect();
    owners.sort_unstable();
    owners.dedup();
    for core in owners {
        let topic_name = topic.to_string();
        shard
            .run_on(core, move |owner| async move {
                let removed = owner.partitions.borrow_mut().remove(&topic_name);
                for (_, partition) in removed.into_iter().flatten() {
                    crate::metrics::add_log_counters(
                        &mut owner.retired_logs.borrow_mut(),
                        &partition.log().stats(),
                    );
                    partition.delete().await;
                }
            })
            .await;
    }
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
    let image = controller.metadata.image();
    if image.topics.contains_key(&spec.name) {
        return Err(Refusal::new(
            errors::TOPIC_ALREADY_EXISTS,
            format!("topic {} already exists", spec.name),
        ));
    }
    let brokers = [controller.config.node_id];
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
    if assigned.is_none() && spec.replication_factor != -1 && spec.replication_factor != 1 {
        return Err(Refusal::new(
            errors::INVALID_REPLICATION_FACTOR,
            format!(
                "replication factor {} is larger than the 1 available broker",
                spec.replication_factor
            ),
        ));
    }
    check_configs(&spec.configs)?;
    if validate_only {
        return Ok(());
    }
    let mut counts = image.partitions_per_core(controller.cores);
    let cores = place_partitions(&mut counts, partitions as usize);
    open_partitions(controller, &spec.name, 0, &cores, &spec.configs).await?;
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let replicas = assigned.unwrap_or_else(|| vec![brokers.to_vec(); partitions as usize]);
    let topic = TopicMeta {
        name: spec.name.clone(),
        topic_id: topic_id_from(seed ^ (spec.name.len() as u128) << 100),
        partition_cores: cores.clone(),
        configs: spec.configs,
        replicas,
    };
    if let Err(error) = controller
        .metadata
        .commit(&[MetadataRecord::TopicCreated(topic)])
    {
        tracing::error!(%error, "metadata log append failed");
        delete_partitions(controller, &spec.name, &cores).await;
        return Err(Refusal::new(errors::KAFKA_STORAGE_ERROR, error.to_string()));
    }
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
    let image = controller.metadata.image();
    let topic = existing_topic(&image, &name)?;
    refuse_internal(&name, "deleted")?;
    controller
        .metadata
        .commit(&[MetadataRecord::TopicDeleted { name: name.clone() }])
        .map_err(|e| Refusal::new(errors::KAFKA_STORAGE_ERROR, e.to_string()))?;
    delete_partitions(controller, &name, &topic.partition_cores).await;
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
        let image = controller.metadata.image();
        let topic = existing_topic(&image, &name)?;
        refuse_internal(&name, "repartitioned")?;
        let current = topic.partition_cores.len() as i32;
        if count <= current {
            return Err(Refusal::new(errors::INVALID_PARTITIONS, format!("topic {name} has {current} partitions; the new count must be larger, not {count}")));
        }
        if count > TOPIC_PARTITIONS_MAX {
            return Err(Refusal::new(errors::INVALID_PARTITIONS, format!("partition count {count} is above {TOPIC_PARTITIONS_MAX}")));
        }
        let node_id = controller.config.node_id;
        let added = (count - current) as usize;
        let replicas = match assignments {
            None => vec![vec![node_id]; added],
            Some(assignments) => {
                if assignments.len() != added {
                    return Err(Refusal::new(errors::INVALID_REPLICA_ASSIGNMENT, format!("{added} partitions are added but the manual assignment lists {}", assignments.len())));
                }
                let replication_factor = topic.replicas(0, node_id).len();
                for replicas in &assignments {
                    check_replicas(replicas, &[node_id], Some(replication_factor))?;
                }
                assignments
            }
        };
        if validate_only {
            return Ok(());
        }
        let mut counts = image.partitions_per_core(controller.cores);
        let cores = place_partitions(&mut counts, added);
        open_partitions(&controller, &name, current, &cores, &topic.configs).await?;
        controller
            .metadata
            .commit(&[MetadataRecord::PartitionsAdded { name: name.clone(), cores, replicas }])
            .map_err(|e| Refusal::new(errors::KAFKA_STORAGE_ERROR, e.to_string()))?;
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
        let image = controller.metadata.image();
        let topic = existing_topic(&image, &name)?;
        check_configs(&configs)?;
        if validate_only {
            return Ok(());
        }
        controller
            .metadata
            .commit(&[MetadataRecord::TopicConfigsSet {
                name: name.clone(),
                configs: configs.clone(),
            }])
            .map_err(|e| Refusal::new(errors::KAFKA_STORAGE_ERROR, e.to_string()))?;
        let defaults =
            crate::dynamic_config::topic_defaults(&controller.config, &controller.metadata.image());
        apply_effective(&controller, &topic, defaults.effective(&configs)).await;
        tracing::info!(topic = %name, "topic configs changed");
        Ok(())
    })
    .await
}

/// Applies `effective` to every partition of `topic`, on their owners.
async fn apply_effective(
    controller: &Rc<Shard>,
    topic: &TopicMeta,
    effective: crate::topic_config::EffectiveConfig,
) {
    let mut owners: Vec<usize> = topic
        .partition_cores
        .iter()
        .map(|&c| c as usize % controller.cores)
        .collect();
    owners.sort_unstable();
    owners.dedup();
    for core in owners {
        let effective = effective.clone();
        let name = topic.name.clone();
        controller
            .run_on(core, move |owner| async move {
                for partition in owner
                    .partitions
                    .borrow()
                    .get(&name)
                    .into_iter()
                    .flat_map(|p| p.values())
                {
                    partition.apply_config(&effective);
                }
            })
            .await;
    }
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
            if !crate::dynamic_config::is_dynamic(key) {
                return Err(Refusal::new(
                    errors::INVALID_REQUEST,
                    format!("{key} is read-only: it cannot be changed while the broker runs (set it in the configuration file and restart)"),
                ));
            }
            crate::dynamic_config::validate_broker(key, value)
                .map_err(|message| Refusal::new(errors::INVALID_CONFIG, message))?;
        }
        if validate_only {
            return Ok(());
        }
        let image = controller
            .metadata
            .commit(&[MetadataRecord::BrokerConfigsSet {
                resource: resource.clone(),
                configs,
            }])
            .map_err(|e| Refusal::new(errors::KAFKA_STORAGE_ERROR, e.to_string()))?;
        let defaults = crate::dynamic_config::topic_defaults(&controller.config, &image);
        for topic in image.topics.values() {
            apply_effective(&controller, topic, defaults.effective(&topic.configs)).await;
        }
        tracing::info!(resource = %resource, "dynamic broker configs changed");
        Ok(())
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
        crate::dynamic_config::validate_group(&configs)
            .map_err(|message| Refusal::new(errors::INVALID_CONFIG, message))?;
        if validate_only {
            return Ok(());
        }
        controller
            .metadata
            .commit(&[MetadataRecord::GroupConfigsSet {
                group: group.clone(),
                configs,
            }])
            .map_err(|e| Refusal::new(errors::KAFKA_STORAGE_ERROR, e.to_string()))?;
        tracing::info!(group = %group, "group configs changed");
        Ok(())
    })
    .await
}

/// Hands out a new producer id, taking a new block from the metadata log
/// when the current one is used up.
pub async fn allocate_producer_id(shard: &Rc<Shard>) -> Result<i64, Refusal> {
    on_controller(shard, move |controller| async move {
        let (next, end) = controller.producer_ids.get();
        let (next, end) = if next < end {
            (next, end)
        } else {
            let start = controller.metadata.image().producer_ids_end.max(next);
            let end = start + PRODUCER_ID_BLOCK;
            controller
                .metadata
                .commit(&[MetadataRecord::ProducerIdsAllocated { end }])
                .map_err(|e| Refusal::new(errors::KAFKA_STORAGE_ERROR, e.to_string()))?;
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
