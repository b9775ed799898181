//! DescribeLogDirs (35), versions 1–4: the one data dir, each partition's
//! size on disk and an offset lag of 0 (every partition here is its own
//! leader), as `kafka-log-dirs.sh --describe` shows them; v4 adds the
//! filesystem's total and usable bytes.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::rc::Rc;

use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::shard::Shard;
use crate::sync::join_all;

pub const VERSION_MIN: i16 = 1;
pub const VERSION_MAX: i16 = 4;

type BoxFuture<'a, T> = Pin<Box<dyn std::future::Future<Output = T> + 'a>>;

pub async fn handle(shard: &Rc<Shard>, request: DescribeLogDirsRequest) -> DescribeLogDirsResponse {
    let image = shard.metadata.image();
    // Null asks for every partition; a list for those it names.
    let wanted: Option<BTreeMap<String, Vec<i32>>> = request.topics.map(|topics| {
        let mut wanted: BTreeMap<String, Vec<i32>> = BTreeMap::new();
        for topic in topics {
            wanted
                .entry(topic.topic.0.to_string())
                .or_default()
                .extend(topic.partitions);
        }
        wanted
    });
    let mut by_core: BTreeMap<usize, Vec<(String, i32)>> = BTreeMap::new();
    for topic in image.topics.values() {
        let count = topic.partition_cores.len() as i32;
        let indexes: Vec<i32> = match &wanted {
            None => (0..count).collect(),
            Some(wanted) => wanted
                .get(&topic.name)
                .map(|indexes| {
                    indexes
                        .iter()
                        .copied()
                        .filter(|i| (0..count).contains(i))
                        .collect()
                })
                .unwrap_or_default(),
        };
        for index in indexes {
            if let Some(core) = image.owner_core(topic, index, shard.cores) {
                by_core
                    .entry(core)
                    .or_default()
                    .push((topic.name.clone(), index));
            }
        }
    }
    let hops: Vec<BoxFuture<'_, Vec<(String, i32, u64)>>> = by_core
        .into_iter()
        .map(|(core, partitions)| {
            Box::pin(shard.run_on(core, move |owner| async move {
                partitions
                    .into_iter()
                    .filter_map(|(topic, index)| {
                        let size = owner.partition(&topic, index)?.log().size_bytes();
                        Some((topic, index, size))
                    })
                    .collect()
            })) as BoxFuture<'_, _>
        })
        .collect();
    let mut sizes: BTreeMap<String, Vec<(i32, u64)>> = BTreeMap::new();
    for (topic, index, size) in join_all(hops).await.into_iter().flatten() {
        sizes.entry(topic).or_default().push((index, size));
    }
    // As Kafka does, every topic with a log in the dir is listed, with the
    // partitions asked for (none when the topic was not asked for).
    let topics = image
        .topics
        .values()
        .filter(|topic| !topic.partition_cores.is_empty())
        .map(|topic| {
            let mut partitions = sizes.remove(&topic.name).unwrap_or_default();
            partitions.sort_unstable();
            DescribeLogDirsTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.name.clone())))
                .with_partitions(
                    partitions
                        .into_iter()
                        .map(|(index, size)| {
                            DescribeLogDirsPartition::default()
                                .with_partition_index(index)
                                .with_partition_size(i64::try_from(size).unwrap_or(i64::MAX))
                                .with_offset_lag(0)
                                .with_is_future_key(false)
                        })
                        .collect(),
                )
        })
        .collect();
    let data_dir = &shard.config.data_dir;
    let log_dir = std::path::absolute(data_dir).unwrap_or_else(|_| data_dir.clone());
    let (total_bytes, usable_bytes) = match crate::admin_http::filesystem(data_dir) {
        (0, _) => (-1, -1),
        (total, usable) => (
            i64::try_from(total).unwrap_or(i64::MAX),
            i64::try_from(usable).unwrap_or(i64::MAX),
        ),
    };
    DescribeLogDirsResponse::default().with_results(vec![DescribeLogDirsResult::default()
        .with_log_dir(StrBytes::from_string(log_dir.display().to_string()))
        .with_topics(topics)
        .with_total_bytes(total_bytes)
        .with_usable_bytes(usable_bytes)])
}
