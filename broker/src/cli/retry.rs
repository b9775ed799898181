//! Retries of requests a broker answered with an error Kafka calls
//! retriable (a new partition whose leader does not know it yet, a
//! controller being elected, a coordinator loading), within the tool's
//! `--timeout-ms`, pausing between attempts as Kafka's clients do.

use std::time::{Duration, Instant};

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{bail, Context};

use kafka_protocol::protocol::Request;
use protocol::admin::{metadata, OffsetAnswers, OffsetFailure, Router, TopicPartition};
use protocol::client::{is_retriable_code, ClientError, Connection};
use protocol::kafka_protocol::error::ResponseError;

use super::ConnectArgs;

/// The first pause before a request answered with a retriable error is
/// sent again; each pause doubles up to [`RETRY_BACKOFF_MS_MAX`], as the
/// Java client's `retry.backoff.ms` and `retry.backoff.max.ms` do.
const RETRY_BACKOFF_MS_MIN: u64 = 100;
const RETRY_BACKOFF_MS_MAX: u64 = 1_000;
/// Pauses one tool run makes at most, however long `--timeout-ms` is.
const RETRY_PAUSES_MAX: u32 = 1_000;
const _: () = assert!(RETRY_BACKOFF_MS_MIN <= RETRY_BACKOFF_MS_MAX);

/// The retries one tool run may make: until `--timeout-ms` after it
/// started, at most [`RETRY_PAUSES_MAX`] pauses, each waited out before
/// the next attempt.
pub struct Retry {
    connect: ConnectArgs,
    deadline: Instant,
    pauses: u32,
    backoff: Duration,
}

impl Retry {
    /// Retries until `--timeout-ms` from now.
    pub fn new(connect: &ConnectArgs) -> Retry {
        Retry {
            connect: connect.clone(),
            deadline: Instant::now() + Duration::from_millis(connect.timeout_ms),
            pauses: 0,
            backoff: Duration::from_millis(RETRY_BACKOFF_MS_MIN),
        }
    }

    /// Whether to send again after `error`: it is [`retriable`] and time
    /// is left, in which case the pause has been waited.
    pub async fn again(&mut self, error: &anyhow::Error) -> bool {
        retriable(error) && self.pause().await
    }

    /// The value of an attempt that succeeded; `None` when it failed with
    /// an error worth sending again and the pause before that has been
    /// waited ([`Self::again`]); the error when it is not, or retries are
    /// used up.
    pub async fn settle<T, E: Into<anyhow::Error>>(
        &mut self,
        attempt: Result<T, E>,
    ) -> anyhow::Result<Option<T>> {
        match attempt {
            Ok(value) => Ok(Some(value)),
            Err(error) => {
                let error = error.into();
                if self.again(&error).await {
                    Ok(None)
                } else {
                    Err(error)
                }
            }
        }
    }

    /// Replaces `connection` by a new one to the bootstrap brokers when an
    /// earlier failure (a response that timed out) left it unusable.
    pub async fn usable(&self, connection: &mut Connection) -> anyhow::Result<()> {
        if connection.is_broken() {
            *connection = self.connect.connect().await?;
        }
        Ok(())
    }

    /// Waits the next pause and returns true, or returns false at once
    /// when the time or the pauses are used up.
    pub async fn pause(&mut self) -> bool {
        let now = Instant::now();
        if self.pauses >= RETRY_PAUSES_MAX || now >= self.deadline {
            return false;
        }
        glommio::timer::sleep(self.backoff.min(self.deadline - now)).await;
        self.pauses += 1;
        self.backoff = (self.backoff * 2).min(Duration::from_millis(RETRY_BACKOFF_MS_MAX));
        true
    }
}

/// Whether a failed request may succeed if sent again: the broker
/// answered an error Kafka calls retriable ([`ClientError::is_retriable`]).
pub fn retriable(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<ClientError>()
            .is_some_and(ClientError::is_retriable)
    })
}

/// Whether an admin request answered `code` may be sent again:
/// retriable, except UNKNOWN_TOPIC_OR_PARTITION, the controller's word
/// that a topic does not exist (Kafka's admin client takes it so too).
pub fn admin_retriable(code: i16) -> bool {
    is_retriable_code(code) && code != ResponseError::UnknownTopicOrPartition.code()
}

/// Sends an admin request until no error its answer holds (`codes`) is
/// [`admin_retriable`], or `retry` is used up; the last answer, whose
/// errors the caller reports.
pub async fn call_admin<R: Request>(
    connection: &mut Connection,
    request: &R,
    version: i16,
    retry: &mut Retry,
    mut codes: impl FnMut(&R::Response) -> Vec<i16>,
) -> anyhow::Result<R::Response> {
    loop {
        let Some(response) = retry
            .settle(connection.call(request, version).await)
            .await?
        else {
            continue;
        };
        if codes(&response).into_iter().any(admin_retriable) && retry.pause().await {
            continue;
        }
        return Ok(response);
    }
}

/// ListOffsets of `partitions` at `timestamp`, each asked of its leader
/// as Metadata names it, and asked again with a fresh Metadata while a
/// partition's leader answers a retriable error or cannot be reached and
/// `retry` allows. Each partition gets its own answer: one failing fails
/// no other.
pub async fn settled_offsets(
    bootstrap: &mut Connection,
    partitions: &[TopicPartition],
    timestamp: i64,
    retry: &mut Retry,
) -> anyhow::Result<OffsetAnswers> {
    let topics: Vec<String> = partitions
        .iter()
        .map(|(topic, _)| topic.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    loop {
        retry.usable(bootstrap).await?;
        let Some(mut router) = retry
            .settle(Router::discover(bootstrap, &topics).await)
            .await?
        else {
            continue;
        };
        let answers = router
            .list_offsets_each(bootstrap, partitions, timestamp)
            .await;
        let unsettled = answers
            .values()
            .any(|answer| answer.as_ref().is_err_and(OffsetFailure::is_retriable));
        if unsettled && retry.pause().await {
            continue;
        }
        return Ok(answers);
    }
}

/// What every broker Metadata names listed (each lists only what its own
/// coordinators hold: groups, transactions), merged by `key` (the first
/// broker's entry kept), and the brokers that did not answer, with why.
/// `ask` lists one broker, sending again within `retry` itself; `what`
/// names the listing ("groups") and `tool` the command, for the warning
/// when brokers share one address (a load balancer: "each" broker asked
/// through it is whichever the balancer picks).
pub async fn list_on_every_broker<T, K: Ord>(
    connect: &ConnectArgs,
    tool: &str,
    what: &str,
    key: impl Fn(&T) -> K,
    mut ask: impl AsyncFnMut(&mut Router, &mut Connection, i32, &mut Retry) -> anyhow::Result<Vec<T>>,
) -> anyhow::Result<(BTreeMap<K, T>, Vec<String>)> {
    let mut bootstrap = connect.connect().await?;
    let mut retry = Retry::new(connect);
    let response = loop {
        let attempt = retry.settle(metadata(&mut bootstrap, Some(&[]), false).await);
        if let Some(response) = attempt.await.context("cannot list the cluster's brokers")? {
            break response;
        }
    };
    let mut router = Router::from_metadata(&bootstrap, &response);
    warn_of_shared_addresses(tool, what, router.brokers());
    let brokers = router.brokers().clone();
    let mut listed = BTreeMap::new();
    let mut failures = Vec::new();
    for (id, address) in brokers {
        match ask(&mut router, &mut bootstrap, id, &mut retry).await {
            Ok(entries) => {
                for entry in entries {
                    listed.entry(key(&entry)).or_insert(entry);
                }
            }
            Err(error) => failures.push(format!("broker {id} ({address}): {error:#}")),
        }
    }
    Ok((listed, failures))
}

/// Fails naming the brokers that did not answer a cluster-wide listing
/// of `what`.
pub fn incomplete(what: &str, failures: &[String]) -> anyhow::Result<()> {
    if failures.is_empty() {
        return Ok(());
    }
    bail!(
        "the listing lacks the {what} of {} broker(s) that did not answer: {}",
        failures.len(),
        failures.join("; ")
    )
}

/// Brokers that Metadata lists at one address are behind a load
/// balancer: a connection to "each" reaches whichever the balancer picks,
/// so what the others hold may be missing from a listing. Says so.
fn warn_of_shared_addresses(tool: &str, what: &str, brokers: &BTreeMap<i32, String>) {
    let mut by_address: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (id, address) in brokers {
        by_address.entry(address).or_default().push(id.to_string());
    }
    for (address, ids) in by_address.into_iter().filter(|(_, ids)| ids.len() > 1) {
        eprintln!(
            "{tool}: brokers {} share the address {address} (a load balancer): each is asked \
             through it, so the {what} of a broker the balancer does not pick may be missing",
            ids.join(", ")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafkas_retriable_errors_are_retried_and_a_missing_topic_is_not() {
        for error in [
            ResponseError::NotController,
            ResponseError::RequestTimedOut,
            ResponseError::LeaderNotAvailable,
            ResponseError::NotLeaderOrFollower,
            ResponseError::CoordinatorLoadInProgress,
        ] {
            assert!(admin_retriable(error.code()), "{error:?}");
        }
        for error in [
            ResponseError::UnknownTopicOrPartition,
            ResponseError::TopicAlreadyExists,
            ResponseError::InvalidPartitions,
            ResponseError::InvalidRequest,
        ] {
            assert!(!admin_retriable(error.code()), "{error:?}");
        }
        assert!(!admin_retriable(0));
    }
}
