//! The controller's back end, on every core: makes the partitions the core
//! has open match a metadata image. It opens the partitions the core owns
//! and has not open, installs the image as the core's copy (applying
//! changed configs to open partitions), and closes — deleting their data —
//! the partitions the image no longer has. Start-up opens with it; after
//! each change the controller runs its steps on every core in turn (see
//! `controller::propose`), so a change is visible everywhere before the
//! client hears of it.
//!
//! Each step runs under the core's `MetadataTable::reconciling` permit, so
//! the start-up pass and a change's pass never open one partition twice.

use std::rc::Rc;

use crate::metadata::MetadataImage;
use crate::partition::Partition;
use crate::shard::Shard;

/// A partition this core could not open.
#[derive(Debug, Clone)]
pub struct OpenFailure {
    pub topic: String,
    pub partition: i32,
    /// The storage error, with the command that repairs it if there is one.
    pub message: String,
}

impl std::fmt::Display for OpenFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cannot open partition {}-{}: {}",
            self.topic, self.partition, self.message
        )
    }
}

/// What happens to the data of a partition the image no longer has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    /// Its topic or partition was deleted: the data goes.
    Delete,
    /// A change was not committed: the partitions it opened close, their
    /// directories stay (a topic created over them later adopts them).
    Close,
}

async fn turn(shard: &Shard) -> glommio::sync::Permit<'_> {
    shard
        .metadata
        .reconciling
        .acquire_permit(1)
        .await
        .expect("the reconcile permit is never closed")
}

/// Opens the partitions of `image` that this core owns and has not open;
/// returns how many it opened. Stops at the first that fails.
pub async fn open_missing(shard: &Rc<Shard>, image: &MetadataImage) -> Result<usize, OpenFailure> {
    let _turn = turn(shard).await;
    let defaults = crate::config::dynamic::topic_defaults(&shard.config, image);
    let mut opened = 0;
    for topic in image.topics.values() {
        let mut effective = None;
        for index in 0..topic.partition_cores.len() as i32 {
            if image.owner_core(topic, index, shard.cores) != Some(shard.id)
                || shard.partition(&topic.name, index).is_some()
            {
                continue;
            }
            let effective = effective.get_or_insert_with(|| defaults.effective(&topic.configs));
            let partition = open_one(shard, &topic.name, index, effective).await?;
            shard
                .partitions
                .borrow_mut()
                .entry(topic.name.clone())
                .or_default()
                .insert(index, partition);
            opened += 1;
        }
    }
    Ok(opened)
}

/// Opens partition `index` of `topic` on this core with `effective`
/// settings.
async fn open_one(
    shard: &Rc<Shard>,
    topic: &str,
    index: i32,
    effective: &crate::topic_config::EffectiveConfig,
) -> Result<Rc<Partition>, OpenFailure> {
    Partition::open(
        &shard.storage,
        &shard.config.data_dir,
        topic,
        index,
        effective,
        crate::partition::BrokerSide {
            producer_id_expiration_ms: shard.config.producer_id_expiration_ms,
            node_id: shard.config.node_id,
            replica_lag_time_max_ms: shard.config.cluster_timing.replica_lag_time_max_ms,
            led_alone: !shard.in_cluster(),
        },
    )
    .await
    .map_err(|error| OpenFailure {
        topic: topic.to_string(),
        partition: index,
        message: format!("{error}{}", repair_hint(&error)),
    })
}

/// Replaces a follower's copy of a partition whose whole log lies below
/// its leader's log start (retention or DeleteRecords removed the head
/// there; a replica just added has nothing yet) with an empty log that
/// starts at `start`, the leader's log start (Kafka's
/// `truncateFullyAndStartAt`): the old copy and its directory go, a new
/// one opens with a checkpoint naming `start`, and takes the replication
/// state the image records. Returns the new partition. A crash in between leaves
/// no directory or an empty one at `start`; either is opened at the next
/// start and fetched again.
pub async fn restart_empty_at(
    shard: &Rc<Shard>,
    old: &Rc<Partition>,
    start: u64,
) -> Result<Rc<Partition>, OpenFailure> {
    let _turn = turn(shard).await;
    let (topic, index) = (old.topic().to_string(), old.index());
    let current = shard.partition(&topic, index);
    if !current.is_some_and(|p| Rc::ptr_eq(&p, old)) {
        return Err(OpenFailure {
            topic,
            partition: index,
            message: "the partition was closed or replaced meanwhile".to_string(),
        });
    }
    let image = shard.metadata.image();
    let defaults = crate::config::dynamic::topic_defaults(&shard.config, &image);
    let configs = image
        .topics
        .get(&topic)
        .map(|t| t.configs.clone())
        .unwrap_or_default();
    let effective = defaults.effective(&configs);
    old.delete().await;
    let dir = crate::partition::partition_dir(&shard.config.data_dir, &topic, index);
    let fail = |message: String| OpenFailure {
        topic: topic.clone(),
        partition: index,
        message,
    };
    std::fs::create_dir_all(&dir).map_err(|e| fail(format!("create {}: {e}", dir.display())))?;
    storage::checkpoint::Checkpoint {
        recovery_point: start,
        log_start_offset: start,
        next_offset: start,
        clean: false,
    }
    .write(&dir)
    .await
    .map_err(|e| fail(e.to_string()))?;
    let partition = open_one(shard, &topic, index, &effective).await?;
    // Its replication state before anything can reach it: a log just
    // opened counts itself the leader.
    if let Some(state) = shard
        .metadata
        .image()
        .topics
        .get(&topic)
        .and_then(|t| t.partition(index))
    {
        partition.assign(
            state,
            shard.config.node_id,
            shard.may_lead(&shard.metadata.image()),
        );
    }
    shard
        .partitions
        .borrow_mut()
        .entry(topic.clone())
        .or_default()
        .insert(index, partition.clone());
    tracing::info!(%topic, partition = index, start, "follower copy restarted empty at the leader's log start");
    Ok(partition)
}

/// Makes `image` this core's copy if it is newer, and gives the open
/// partitions of every topic whose effective configs changed their new
/// settings.
pub fn install(shard: &Rc<Shard>, image: &MetadataImage) {
    let Some(before) = shard.metadata.install(image) else {
        return;
    };
    let after = shard.metadata.image();
    let broker_changed = before.broker_configs != after.broker_configs;
    if broker_changed && shard.id == 0 {
        crate::config::apply_keystores(&shard.config, &after, false, &[]);
    }
    let defaults = crate::config::dynamic::topic_defaults(&shard.config, &after);
    for topic in after.topics.values() {
        let changed = broker_changed
            || before.topics.get(&topic.name).map(|t| &t.configs) != Some(&topic.configs);
        if !changed {
            continue;
        }
        let partitions = shard.partitions.borrow();
        let Some(open) = partitions.get(&topic.name) else {
            continue;
        };
        let effective = defaults.effective(&topic.configs);
        for partition in open.values() {
            partition.apply_config(&effective);
        }
    }
}

/// Closes the open partitions that this core's image does not give it;
/// returns how many.
pub async fn remove_gone(shard: &Rc<Shard>, removal: Removal) -> usize {
    let _turn = turn(shard).await;
    let image = shard.metadata.image();
    let gone: Vec<(String, i32)> = shard
        .partitions
        .borrow()
        .iter()
        .flat_map(|(name, by_index)| by_index.keys().map(move |&index| (name.clone(), index)))
        .filter(|(name, index)| {
            image
                .topics
                .get(name)
                .and_then(|topic| image.owner_core(topic, *index, shard.cores))
                != Some(shard.id)
        })
        .collect();
    for (name, index) in &gone {
        let partition = {
            let mut partitions = shard.partitions.borrow_mut();
            let Some(by_index) = partitions.get_mut(name) else {
                continue;
            };
            let partition = by_index.remove(index);
            if by_index.is_empty() {
                partitions.remove(name);
            }
            partition
        };
        let Some(partition) = partition else {
            continue;
        };
        if partition.is_leader() {
            shard.leadership_lost(name, *index);
        }
        match removal {
            Removal::Delete => {
                crate::metrics::add_log_counters(
                    &mut shard.retired_logs.borrow_mut(),
                    &partition.log().stats(),
                );
                partition.delete().await;
            }
            Removal::Close => partition.close().await,
        }
    }
    gone.len()
}

/// The command that repairs what a partition's open refused to, if any.
fn repair_hint(error: &storage::StorageError) -> String {
    match error {
        storage::StorageError::CorruptSealed { path, position, .. } => format!(
            ". The broker does not start rather than drop acknowledged records. To cut the \
             log at the corruption (everything cut is kept in the data dir's __repair \
             directory): strom repair segment --file {} --truncate-at {position}",
            path.display()
        ),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::metadata::testing::{topic_meta, MemoryMetadataLog};
    use crate::metadata::{MetadataRecord, MetadataStore, MetadataWriter};

    fn topic(name: &str, cores: &[u32]) -> MetadataRecord {
        MetadataRecord::TopicCreated(topic_meta(name, cores))
    }

    fn open_names(shard: &Shard) -> Vec<String> {
        let mut names: Vec<String> = shard
            .partitions
            .borrow()
            .iter()
            .flat_map(|(name, by_index)| by_index.keys().map(move |i| format!("{name}-{i}")))
            .collect();
        names.sort();
        names
    }

    /// Core 1 of 2: it opens only the partitions placed on it, never one
    /// twice, deletes the data of a deleted topic's partitions, and only
    /// closes (keeps the directory of) what a withdrawn change opened.
    #[test]
    fn a_core_opens_what_it_owns_and_removes_what_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let mut flags = crate::config::flags_with(&[]);
        flags.data_dir = Some(dir.path().to_path_buf());
        flags.cores = Some("2".to_string());
        let config = Arc::new(crate::config::load(&flags).unwrap());
        let data_dir = dir.path().to_path_buf();
        glommio::LocalExecutorBuilder::default()
            .spawn(move || async move {
                let writer = MetadataWriter::start(Box::new(MemoryMetadataLog::default())).unwrap();
                let store = Arc::new(MetadataStore::new(writer, MetadataImage::new(0)));
                let shard = Shard::new(1, 2, config, store, None);
                let created =
                    MetadataImage::new(0).with(&[topic("a", &[0, 1, 1]), topic("b", &[1])]);
                assert_eq!(open_missing(&shard, &created).await.unwrap(), 3);
                assert_eq!(open_missing(&shard, &created).await.unwrap(), 0);
                assert_eq!(open_names(&shard), vec!["a-1", "a-2", "b-0"]);
                install(&shard, &created);
                assert_eq!(remove_gone(&shard, Removal::Delete).await, 0);

                let deleted = created.with(&[MetadataRecord::TopicDeleted {
                    name: "a".to_string(),
                }]);
                install(&shard, &deleted);
                assert_eq!(remove_gone(&shard, Removal::Delete).await, 2);
                assert_eq!(open_names(&shard), vec!["b-0"]);
                assert!(
                    !data_dir.join("a-1").exists(),
                    "a deleted topic's data goes"
                );

                let proposed = deleted.with(&[topic("c", &[1])]);
                assert_eq!(open_missing(&shard, &proposed).await.unwrap(), 1);
                assert_eq!(remove_gone(&shard, Removal::Close).await, 1);
                assert_eq!(open_names(&shard), vec!["b-0"]);
                assert!(
                    data_dir.join("c-0").exists(),
                    "a withdrawn change's directory stays"
                );
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
