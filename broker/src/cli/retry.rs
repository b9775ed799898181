//! Retries of requests a broker answered with an error Kafka calls
//! retriable (a new partition whose leader does not know it yet, a
//! controller being elected, a coordinator loading), within the tool's
//! `--timeout-ms`, pausing between attempts as Kafka's clients do.

use std::time::{Duration, Instant};

use std::collections::BTreeSet;

use kafka_protocol::protocol::Request;
use protocol::admin::{OffsetAnswers, OffsetFailure, Router, TopicPartition};
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
        let response = match connection.call(request, version).await {
            Ok(response) => response,
            Err(error) => {
                let error = anyhow::Error::from(error);
                if retry.again(&error).await {
                    continue;
                }
                return Err(error);
            }
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
        let mut router = match Router::discover(bootstrap, &topics).await {
            Ok(router) => router,
            Err(error) => {
                let error = anyhow::Error::from(error);
                if retry.again(&error).await {
                    continue;
                }
                return Err(error);
            }
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
