//! AddRaftVoter (80) and RemoveRaftVoter (81), version 0 each: changes of
//! the controller quorum's voters (Kafka's KIP-853 dynamic quorum).
//! Decided by the active controller (other brokers forward both, see
//! `cluster::forward`), one node at a time: an added node must be running
//! outside the quorum (a voter that lost its log starts so once removed);
//! it becomes a learner, gets a snapshot, catches up and is then promoted,
//! and the answer comes once it votes or `timeout_ms` ran out. A removal
//! is answered once committed. A directory id, when not zero, must be the
//! one the node's log is known by. The voter's listeners are not taken:
//! its controller address is the one `controller.quorum.voters` names.
//! Errors: DUPLICATE_VOTER, VOTER_NOT_FOUND, INVALID_REQUEST (with the
//! reason), NOT_CONTROLLER, REQUEST_TIMED_OUT; a single node has no
//! quorum to change (INVALID_REQUEST).

use std::rc::Rc;
use std::time::Duration;

use kafka_protocol::messages::{
    AddRaftVoterRequest, AddRaftVoterResponse, RemoveRaftVoterRequest, RemoveRaftVoterResponse,
};
use kafka_protocol::protocol::StrBytes;

use crate::cluster::voter::{VoterOutcome, VoterRequest};
use crate::errors;
use crate::shard::Shard;

pub const ADD_VERSION_MIN: i16 = 0;
pub const ADD_VERSION_MAX: i16 = 0;
pub const REMOVE_VERSION_MIN: i16 = 0;
pub const REMOVE_VERSION_MAX: i16 = 0;

/// A removal is one committed entry: answered within this.
const REMOVE_TIMEOUT: Duration = Duration::from_secs(30);
/// Bounds on an addition's wait (catching up may take a snapshot).
const ADD_TIMEOUT_DEFAULT: Duration = Duration::from_secs(60);
const ADD_TIMEOUT_MAX: Duration = Duration::from_secs(600);

pub async fn add(shard: &Rc<Shard>, request: AddRaftVoterRequest) -> AddRaftVoterResponse {
    let timeout = match u64::try_from(request.timeout_ms) {
        Ok(ms) if ms > 0 => Duration::from_millis(ms).min(ADD_TIMEOUT_MAX),
        _ => ADD_TIMEOUT_DEFAULT,
    };
    let outcome = change(
        shard,
        VoterRequest::Add {
            node: request.voter_id,
            directory: directory(request.voter_directory_id),
        },
        timeout,
    )
    .await;
    let (code, message) = split(outcome);
    AddRaftVoterResponse::default()
        .with_error_code(code)
        .with_error_message(message)
}

pub async fn remove(shard: &Rc<Shard>, request: RemoveRaftVoterRequest) -> RemoveRaftVoterResponse {
    let outcome = change(
        shard,
        VoterRequest::Remove {
            node: request.voter_id,
            directory: directory(request.voter_directory_id),
        },
        REMOVE_TIMEOUT,
    )
    .await;
    let (code, message) = split(outcome);
    RemoveRaftVoterResponse::default()
        .with_error_code(code)
        .with_error_message(message)
}

async fn change(shard: &Rc<Shard>, request: VoterRequest, timeout: Duration) -> VoterOutcome {
    match crate::cluster::of(shard) {
        Some(cluster) => cluster.change_voters(request, timeout).await,
        None => Err((
            errors::INVALID_REQUEST,
            "a single node has no controller quorum to change".to_string(),
        )),
    }
}

/// The directory a request names, in Kafka's Uuid text; the zero Uuid
/// names none.
fn directory(id: uuid::Uuid) -> Option<String> {
    let bits = id.as_u128();
    (bits != 0).then(|| crate::cluster::membership::uuid_text(bits))
}

fn split(outcome: VoterOutcome) -> (i16, Option<StrBytes>) {
    match outcome {
        Ok(()) => (errors::NONE, None),
        Err((code, message)) => (code, Some(StrBytes::from_string(message))),
    }
}
