//! The broker's side of the cluster metadata: topics, their partitions'
//! owning cores (the shard table) and replication state, configs and
//! producer id blocks. Changes are records ([`MetadataRecord`]) appended to
//! the metadata log and synced before they take effect; applying them in
//! order gives the [`MetadataImage`]. The records, the image and its
//! snapshot are plain data in `replication::metadata` (re-exported here);
//! a single node keeps the log in one file of the data dir
//! ([`MetadataLog`]), a cluster in the controller quorum's Raft log.
//!
//! Who holds which image: [`MetadataStore`] keeps the last committed one
//! for threads outside the executors and for cores starting; every core
//! keeps its own copy in a [`MetadataTable`] (`Shard::metadata`), which
//! request handlers read without a lock. The controller replaces the
//! copies on every core before it answers a change (see `controller`).
//!
//! A single node's log and a cluster's carry the same records.

mod log;
#[cfg(test)]
pub mod testing;

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::{Arc, RwLock};

pub use log::{record_at, repair, FileMetadataLog, MetadataLog, MetadataWriter, RepairReport};
pub use replication::metadata::{
    decode_snapshot, encode_snapshot, place_partitions, AclBinding, BrokerMeta, Endpoint,
    MetadataImage, MetadataRecord, NotServed, PartitionState, ScramCredential, TopicMeta,
};

pub const METADATA_DIR: &str = "__metadata";
/// The internal topic that holds committed offsets.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";
/// Topics the broker writes itself: clients may read them, but not write,
/// delete or repartition them (Kafka's `Topic.isInternal`).
pub fn is_internal_topic(name: &str) -> bool {
    name == OFFSETS_TOPIC || name == SHARE_STATE_TOPIC
}
/// The internal topic that holds share partitions' states.
pub const SHARE_STATE_TOPIC: &str = "__share_group_state";

/// Where `strom repair` keeps what it cut from a partition log.
pub const REPAIR_DIR: &str = "__repair";
/// The metadata log's file in [`METADATA_DIR`] (a single node's).
pub const METADATA_FILE: &str = "metadata.log";

#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    #[error("metadata log {path}: {op}: {error}")]
    Io {
        op: &'static str,
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("metadata log {path}: record at byte {position} is not understood: {reason}")]
    Corrupt {
        path: PathBuf,
        position: u64,
        reason: String,
    },
    #[error(
        "metadata log {path}: the record at byte {position} is damaged ({reason}) but valid \
         records follow from byte {next_valid}, so it is not a torn write and committed \
         metadata would be lost by cutting the log there; the broker does not start. \
         To drop only the damaged record (a copy of the file is kept): \
         strom repair metadata --data-dir {data_dir} --drop-damaged-at {position}",
        data_dir = data_dir.display()
    )]
    Damaged {
        path: PathBuf,
        data_dir: PathBuf,
        position: u64,
        next_valid: u64,
        reason: String,
    },
    #[error("metadata log {path}: no damaged record at byte {position}: {reason}")]
    NothingToRepair {
        path: PathBuf,
        position: u64,
        reason: String,
    },
    #[error("the metadata log's writer thread has stopped")]
    WriterStopped,
}

/// A cluster id in Kafka's form: 16 bytes, URL-safe base64 without padding.
pub fn new_cluster_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let seed = nanos ^ (u128::from(std::process::id()) << 64);
    let bytes = topic_id_from(seed).to_be_bytes();
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    let mut bits = 0u32;
    let mut acc = 0u32;
    for byte in bytes {
        acc = (acc << 8) | u32::from(byte);
        bits += 8;
        while bits >= 6 {
            bits -= 6;
            out.push(ALPHABET[((acc >> bits) & 0x3f) as usize] as char);
        }
    }
    if bits > 0 {
        out.push(ALPHABET[((acc << (6 - bits)) & 0x3f) as usize] as char);
    }
    out
}

/// Mixes a seed into a 128-bit id (splitmix-style), for topic and cluster ids.
pub fn topic_id_from(seed: u128) -> u128 {
    let mut x = seed.wrapping_add(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C834);
    x = (x ^ (x >> 67)).wrapping_mul(0xBF58_476D_1CE4_E5B9_94D0_49BB_1331_11EB);
    x ^ (x >> 61)
}

/// Replays `log` into the image of node `node_id`. A log without a
/// cluster id (a new one) gets a fresh one as its first record.
pub fn bootstrap(log: &mut dyn MetadataLog, node_id: i32) -> Result<MetadataImage, MetadataError> {
    let records = log.replay()?;
    let mut image = MetadataImage::replay(node_id, &records);
    if image.cluster_id.is_empty() {
        let record = MetadataRecord::ClusterId(new_cluster_id());
        log.append(std::slice::from_ref(&record))?;
        log.sync()?;
        image.apply(&record);
    }
    Ok(image)
}

/// Opens the metadata log of `data_dir` and replays it (see [`bootstrap`]).
pub fn open(
    data_dir: &Path,
    node_id: i32,
) -> Result<(FileMetadataLog, MetadataImage), MetadataError> {
    let mut log = FileMetadataLog::open(data_dir)?;
    let image = bootstrap(&mut log, node_id)?;
    Ok((log, image))
}

/// The committed metadata every core can reach: on a single node the
/// writer of the local log (used by the controller core only) and the
/// last committed image; in a cluster the image the quorum committed
/// (`cluster::Cluster`, through [`CommittedImage`]). For threads outside
/// the executors (the admin listener) and for cores that start; request
/// handlers read their core's [`MetadataTable`] instead.
pub struct MetadataStore {
    source: Source,
}

enum Source {
    Local {
        writer: MetadataWriter,
        image: RwLock<Arc<MetadataImage>>,
    },
    Replicated(Arc<dyn CommittedImage>),
}

/// Where a cluster member's committed image comes from (the cluster's
/// shared view, which the quorum or the metadata follower publishes).
pub trait CommittedImage: Send + Sync {
    /// The last committed image this node applied.
    fn image(&self) -> Arc<MetadataImage>;
}

/// What the layers below the cluster ask of this node's membership in
/// one: the cluster implements it, a single node has none. The per-core
/// context carries it without knowing the cluster's type.
pub trait Membership: Send + Sync + 'static {
    /// Whether this node may act on the leaderships `image` gives it: once
    /// the image holds this process's registration.
    fn may_lead(&self, image: &MetadataImage) -> bool;

    /// The membership as itself, for the cluster's code to take back its
    /// own type (`cluster::of`).
    fn as_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync>;
}

impl MetadataStore {
    /// A single node's store over its local log.
    pub fn new(writer: MetadataWriter, image: MetadataImage) -> Self {
        Self {
            source: Source::Local {
                writer,
                image: RwLock::new(Arc::new(image)),
            },
        }
    }

    /// A cluster member's store: the quorum's committed image.
    pub fn replicated(committed: Arc<dyn CommittedImage>) -> Self {
        Self {
            source: Source::Replicated(committed),
        }
    }

    /// The last committed image.
    pub fn image(&self) -> Arc<MetadataImage> {
        match &self.source {
            Source::Local { image, .. } => image.read().expect("metadata image lock").clone(),
            Source::Replicated(committed) => committed.image(),
        }
    }

    /// Makes `records` durable in the local log (on the writer thread, the
    /// caller's executor keeps serving meanwhile), then the committed
    /// image. Only a single node's controller calls this, one change at a
    /// time; a cluster proposes through its quorum instead.
    pub async fn commit(
        &self,
        records: Vec<MetadataRecord>,
    ) -> Result<Arc<MetadataImage>, MetadataError> {
        let Source::Local { writer, image } = &self.source else {
            return Err(MetadataError::WriterStopped);
        };
        let next = Arc::new(image.read().expect("metadata image lock").with(&records));
        writer.write(records).await?;
        *image.write().expect("metadata image lock") = next.clone();
        Ok(next)
    }
}

/// One core's copy of the metadata image (a `_table`: a core-local mirror
/// of shared state). Reading it takes no lock and touches no memory other
/// cores write; the controller replaces it on every core (see
/// `reconciler::install`).
pub struct MetadataTable {
    store: Arc<MetadataStore>,
    image: RefCell<Rc<MetadataImage>>,
    /// Held while this core's partitions are made to match an image, so
    /// the start-up pass and a change's pass never open one twice.
    pub(crate) reconciling: glommio::sync::Semaphore,
}

impl MetadataTable {
    /// A core's table, starting from the last committed image.
    pub fn new(store: Arc<MetadataStore>) -> Self {
        let image = Rc::new(store.image().local_copy());
        Self {
            store,
            image: RefCell::new(image),
            reconciling: glommio::sync::Semaphore::new(1),
        }
    }

    /// This core's image.
    pub fn image(&self) -> Rc<MetadataImage> {
        self.image.borrow().clone()
    }

    /// The shared store: the log's writer and the committed image.
    pub fn store(&self) -> &Arc<MetadataStore> {
        &self.store
    }

    /// Takes a copy of `image` if it is newer than this core's; returns
    /// the image it replaced, if it did.
    pub fn install(&self, image: &MetadataImage) -> Option<Rc<MetadataImage>> {
        if image.offset <= self.image.borrow().offset {
            return None;
        }
        let copy = Rc::new(image.local_copy());
        Some(std::mem::replace(&mut *self.image.borrow_mut(), copy))
    }
}

/// Directories of `data_dir` that look like partition directories
/// (`<topic>-<index>`) but that no topic of `image` names: data the
/// metadata does not know, reported at start and never adopted or
/// deleted silently. Names starting with `__` are the broker's own.
pub fn unnamed_partition_dirs(
    data_dir: &Path,
    image: &MetadataImage,
) -> std::io::Result<Vec<PathBuf>> {
    let mut unnamed = Vec::new();
    for entry in std::fs::read_dir(data_dir)? {
        let entry = entry?;
        if !entry.file_type()?.is_dir() {
            continue;
        }
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            unnamed.push(entry.path());
            continue;
        };
        if [METADATA_DIR, storage::journal::DIR_NAME, REPAIR_DIR].contains(&name) {
            continue;
        }
        let named = name.rsplit_once('-').is_some_and(|(topic, index)| {
            index.parse::<usize>().is_ok_and(|index| {
                image
                    .topics
                    .get(topic)
                    .is_some_and(|t| index < t.partition_cores.len())
            })
        });
        if !named {
            unnamed.push(entry.path());
        }
    }
    unnamed.sort();
    Ok(unnamed)
}

/// Whether a partition directory exists and holds any bytes (a topic
/// created over it adopts them).
pub fn partition_dir_holds_data(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.metadata().is_ok_and(|m| m.is_file() && m.len() > 0))
    })
}

/// Checks a topic name the way Kafka does.
pub fn validate_topic_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("topic name is empty".to_string());
    }
    if name == "." || name == ".." {
        return Err(format!("topic name {name:?} is not allowed"));
    }
    if name.len() > 249 {
        return Err(format!(
            "topic name is {} characters, more than 249",
            name.len()
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!("topic name {name:?} contains {bad:?}; only ASCII letters, digits, '.', '_' and '-' are allowed"));
    }
    if name == METADATA_DIR {
        return Err(format!("topic name {name:?} is reserved"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_dirs_the_metadata_does_not_name_are_found() {
        let dir = tempfile::tempdir().unwrap();
        let (_, mut image) = open(dir.path(), 0).unwrap();
        image.apply(&MetadataRecord::TopicCreated(TopicMeta {
            name: "orders".to_string(),
            topic_id: 42,
            partition_cores: vec![0, 1],
            configs: Default::default(),
            partitions: Vec::new(),
        }));
        for name in [
            "orders-0",
            "orders-1",
            "orders-2",
            "gone-0",
            "__journal",
            "__repair",
            "__consumer_offsets-0",
            "odd",
        ] {
            std::fs::create_dir(dir.path().join(name)).unwrap();
        }
        std::fs::write(dir.path().join(crate::exclusive::LOCK_FILE), b"").unwrap();
        let unnamed = unnamed_partition_dirs(dir.path(), &image).unwrap();
        let names: Vec<_> = unnamed
            .iter()
            .map(|p| p.file_name().unwrap().to_str().unwrap())
            .collect();
        assert_eq!(
            names,
            vec!["__consumer_offsets-0", "gone-0", "odd", "orders-2"]
        );
        assert!(!partition_dir_holds_data(&dir.path().join("gone-0")));
        std::fs::write(dir.path().join("gone-0").join("x.log"), b"1").unwrap();
        assert!(partition_dir_holds_data(&dir.path().join("gone-0")));
    }

    #[test]
    fn topic_names_follow_kafka_rules() {
        assert!(validate_topic_name("orders.v1_x-y").is_ok());
        for bad in ["", ".", "..", "a/b", "ä", &"x".repeat(250)] {
            assert!(validate_topic_name(bad).is_err(), "{bad}");
        }
    }
}
