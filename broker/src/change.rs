//! A metadata change as it is asked for (a topic to create, a manual
//! replica assignment) and how one is refused: what the controller decides
//! on and what a broker that is not the active controller forwards to it.

use std::collections::BTreeMap;

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
    pub fn new(error_code: i16, message: impl Into<String>) -> Self {
        Self {
            error_code,
            message: message.into(),
        }
    }
}

pub type Outcome = Result<(), Refusal>;
