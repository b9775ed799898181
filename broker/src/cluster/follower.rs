//! The metadata follower (`strom-metadata-follower` thread), on a broker
//! that is not a voter: it follows the committed metadata log as it
//! commits, as Kafka's brokers do. It sends the active controller a
//! metadata fetch that the controller holds until it has applied
//! something newer (or [`FOLLOW_WAIT`] passes), applies what comes back
//! to its own copy of the image and publishes it, then asks again at
//! once. A committed change so reaches this broker's cores a network
//! round trip after the controller applied it, not at the next heartbeat.
//!
//! It is the only thread that publishes images on such a broker. While it
//! is behind (a new broker, or one that was away) it publishes nothing
//! until it has what the controller had applied: never a state between,
//! which could make the cores open or delete partitions for states long
//! gone. Each publish records how long the change took to arrive
//! ([`super::Cluster::propagation`]).

use std::sync::Arc;
use std::time::Duration;

use super::transport::{Lane, IO_TIMEOUT};
use super::wire::{FetchReply, Frame};
use super::Cluster;
use crate::metadata::MetadataImage;

/// How long the controller may hold a fetch while nothing newer is
/// applied (Kafka's brokers wait 500 ms, `replica.fetch.wait.max.ms`).
pub const FOLLOW_WAIT: Duration = Duration::from_millis(500);
const _: () = assert!(FOLLOW_WAIT.as_millis() <= super::voter::FETCH_WAIT_MAX.as_millis());
/// A fetch that failed (no controller reachable) is tried again after
/// this, at another voter unless the agent heard of the active one.
const RETRY_AFTER: Duration = Duration::from_millis(100);

pub struct Follower {
    cluster: Arc<Cluster>,
    /// This broker's image: what it applied, published once caught up.
    image: MetadataImage,
    /// The offset last published.
    published: u64,
    /// The voter tried next when the active controller is not known.
    rotation: usize,
}

impl Follower {
    /// Starts the follower thread of a broker that is not a voter.
    pub fn start(cluster: Arc<Cluster>) -> std::io::Result<()> {
        assert!(
            !cluster.is_voter(),
            "a voter has the metadata log itself: it follows through Raft"
        );
        let image = (*cluster.image()).clone();
        let follower = Follower {
            published: image.offset,
            image,
            cluster,
            rotation: 0,
        };
        std::thread::Builder::new()
            .name("strom-metadata-follower".to_string())
            .spawn(move || follower.run())?;
        Ok(())
    }

    /// Fetches until the process ends. Each round is bounded in time: the
    /// controller holds a fetch at most [`FOLLOW_WAIT`] (a fetch while
    /// behind is not held), and the answer must arrive within
    /// [`IO_TIMEOUT`] more.
    fn run(mut self) {
        let mut caught_up = false;
        loop {
            let wait = if caught_up {
                FOLLOW_WAIT
            } else {
                Duration::ZERO
            };
            match self.fetch(wait) {
                Ok(now_caught_up) => caught_up = now_caught_up,
                Err(error) => {
                    tracing::debug!(%error, "metadata fetch failed: tried again");
                    self.cluster.channel.reset(Lane::Follower);
                    caught_up = false;
                    std::thread::sleep(RETRY_AFTER);
                }
            }
        }
    }

    /// One fetch from the controller to ask; whether this broker now has
    /// everything the voter that answered had applied.
    fn fetch(&mut self, wait: Duration) -> std::io::Result<bool> {
        let Some((id, address)) = self.cluster.controller_to_ask(&mut self.rotation) else {
            return Err(std::io::Error::other("no controller to ask"));
        };
        let frame = Frame::Fetch {
            after: self.image.offset,
            wait_ms: wait.as_millis() as u32,
        };
        let before = self.image.offset;
        let reply = self.call(&address, frame, wait + IO_TIMEOUT)?;
        let ours = self.cluster.cluster_id();
        if !ours.is_empty() && !reply.cluster_id.is_empty() && reply.cluster_id != ours {
            // The agent stops the broker when it hears this too.
            return Err(std::io::Error::other(format!(
                "controller {id} at {address} is of cluster {}, this broker of {ours}",
                reply.cluster_id
            )));
        }
        let (applied, applied_at_us) = match reply.frame {
            Frame::FetchReply(FetchReply::Entries {
                entries,
                applied,
                applied_at_us,
            }) => {
                for (index, records) in entries {
                    if index <= self.image.offset {
                        continue;
                    }
                    for record in &records {
                        self.image.apply(record);
                    }
                    self.image.offset = index;
                }
                (applied, applied_at_us)
            }
            Frame::FetchReply(FetchReply::Snapshot { index, image }) => {
                match crate::metadata::decode_snapshot(&image, self.cluster.node_id) {
                    Ok(mut loaded) => {
                        loaded.offset = index;
                        tracing::info!(
                            offset = index,
                            "metadata snapshot loaded from the controller"
                        );
                        self.image = loaded;
                        // The snapshot is what the voter had applied; its
                        // time is not carried.
                        (index, 0)
                    }
                    Err(error) => {
                        return Err(std::io::Error::other(format!(
                            "the metadata snapshot of controller {id} does not decode: {error}"
                        )))
                    }
                }
            }
            _ => {
                return Err(std::io::Error::other(format!(
                    "controller {id} answered a metadata fetch with another frame"
                )))
            }
        };
        let caught_up = self.image.offset >= applied;
        if !caught_up && self.image.offset == before {
            // Behind, and the answer brought nothing: not asked again at once.
            return Err(std::io::Error::other(format!(
                "controller {id} has applied {applied} but sent nothing after {before}"
            )));
        }
        if caught_up && self.image.offset > self.published {
            self.cluster.publish(&self.image);
            self.published = self.image.offset;
            // Only for a change that arrived while this broker was caught
            // up (a held fetch), and that the voter applied last: catching
            // up after a start or an absence, or from a snapshot, says
            // nothing about how fast a change travels.
            if !wait.is_zero() && self.image.offset == applied && applied_at_us > 0 {
                let delay_us = super::unix_time_us().saturating_sub(applied_at_us);
                self.cluster.propagation.record(delay_us);
            }
        }
        Ok(caught_up)
    }

    /// Sends `frame` to `address` and waits up to `timeout` for the
    /// answer; the connection is dropped when the call fails.
    fn call(
        &mut self,
        address: &str,
        frame: Frame,
        timeout: Duration,
    ) -> std::io::Result<super::wire::Envelope> {
        let cluster_id = self.cluster.cluster_id();
        self.cluster
            .channel
            .call(Lane::Follower, address, &cluster_id, frame, timeout)
    }
}
