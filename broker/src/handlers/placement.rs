//! Where one partition's part of a request is answered: at the broker that
//! leads it (load-balancer mode), at the core here that leads it, or at
//! once with the Kafka error code saying why neither can.

use crate::cluster::links::{self, Origin};
use crate::errors;
use crate::metadata::MetadataImage;
use crate::shard::Shard;

/// Where a partition's part of a request goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// Forwarded to the broker (node id) that leads the partition.
    Broker(i32),
    /// Run on the core here that leads the partition.
    Core(usize),
    /// Answered at once with this error code.
    Refused(i16),
}

/// Where a client's request for `topic`/`partition` goes: to the broker
/// that leads it when [`links::leader_elsewhere`] says so, else as
/// [`place_here`].
pub fn place(
    shard: &Shard,
    image: &MetadataImage,
    origin: Origin,
    topic: &str,
    partition: i32,
) -> Place {
    match links::leader_elsewhere(shard, image, origin, topic, partition) {
        Some(broker) => Place::Broker(broker),
        None => place_here(shard, image, topic, partition),
    }
}

/// Where `topic`/`partition` is answered on this broker: the core that
/// leads it, or refused with why it is not served here.
pub fn place_here(shard: &Shard, image: &MetadataImage, topic: &str, partition: i32) -> Place {
    match image.leader_core_by_name(topic, partition, shard.cores) {
        Ok(core) => Place::Core(core),
        Err(why) => Place::Refused(errors::not_served(why)),
    }
}
