//! DescribeUserScramCredentials (50) and AlterUserScramCredentials (51),
//! version 0 each: the SCRAM credentials SASL/SCRAM authenticates with,
//! kept in the replicated metadata as Kafka keeps them (the salt, the
//! iteration count, StoredKey and ServerKey derived from the salted
//! password the client sends: never a password).
//!
//! Alter is decided by the active controller (other brokers forward it):
//! each user's changes apply together or not at all, one result per user.
//! A user's result is UNSUPPORTED_SASL_MECHANISM for an unknown
//! mechanism, UNACCEPTABLE_CREDENTIAL for an empty name, salt or salted
//! password or an iteration count outside 4096–16384, DUPLICATE_RESOURCE
//! when the request names the same user and mechanism twice, and
//! RESOURCE_NOT_FOUND when it deletes a credential that does not exist.
//! Describe answers from any broker's metadata: every user with a
//! credential (no list given), or the users asked for (RESOURCE_NOT_FOUND
//! for one without any, DUPLICATE_RESOURCE for one asked twice).

use std::collections::BTreeMap;
use std::rc::Rc;

use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};
use kafka_protocol::protocol::StrBytes;

use crate::controller;
use crate::credentials::Change;
use crate::errors;
use crate::shard::Shard;

pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 0;

pub async fn alter(
    shard: &Rc<Shard>,
    request: AlterUserScramCredentialsRequest,
) -> AlterUserScramCredentialsResponse {
    let deletions = request.deletions.into_iter().map(|d| Change {
        user: d.name.to_string(),
        mechanism: d.mechanism,
        upsert: None,
    });
    let upsertions = request.upsertions.into_iter().map(|u| Change {
        user: u.name.to_string(),
        mechanism: u.mechanism,
        upsert: Some((u.salt.to_vec(), u.iterations, u.salted_password.to_vec())),
    });
    let changes: Vec<Change> = deletions.chain(upsertions).collect();
    let results = controller::alter_scram_credentials(shard, changes).await;
    AlterUserScramCredentialsResponse::default().with_results(
        results
            .into_iter()
            .map(|(user, code, message)| {
                AlterUserScramCredentialsResult::default()
                    .with_user(StrBytes::from_string(user))
                    .with_error_code(code)
                    .with_error_message(message.map(StrBytes::from_string))
            })
            .collect(),
    )
}

pub fn describe(
    shard: &Shard,
    request: DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    let image = shard.metadata.image();
    let mut by_user: BTreeMap<&str, Vec<CredentialInfo>> = BTreeMap::new();
    for ((user, mechanism), credential) in &image.scram {
        by_user.entry(user).or_default().push(
            CredentialInfo::default()
                .with_mechanism(*mechanism)
                .with_iterations(credential.iterations),
        );
    }
    let asked: Option<Vec<String>> = request
        .users
        .filter(|users| !users.is_empty())
        .map(|users| users.into_iter().map(|u| u.name.to_string()).collect());
    let results = match asked {
        None => by_user
            .iter()
            .map(|(user, infos)| found(user, infos.clone()))
            .collect(),
        Some(asked) => asked
            .iter()
            .enumerate()
            .filter(|(i, user)| !asked[..*i].contains(user))
            .map(|(_, user)| {
                if asked.iter().filter(|u| *u == user).count() > 1 {
                    refused(
                        user,
                        errors::DUPLICATE_RESOURCE,
                        "the user is asked for twice",
                    )
                } else {
                    match by_user.get(user.as_str()) {
                        Some(infos) => found(user, infos.clone()),
                        None => refused(
                            user,
                            errors::RESOURCE_NOT_FOUND,
                            "the user has no SCRAM credential",
                        ),
                    }
                }
            })
            .collect(),
    };
    DescribeUserScramCredentialsResponse::default().with_results(results)
}

fn found(user: &str, infos: Vec<CredentialInfo>) -> DescribeUserScramCredentialsResult {
    DescribeUserScramCredentialsResult::default()
        .with_user(StrBytes::from_string(user.to_string()))
        .with_credential_infos(infos)
}

fn refused(user: &str, code: i16, why: &str) -> DescribeUserScramCredentialsResult {
    DescribeUserScramCredentialsResult::default()
        .with_user(StrBytes::from_string(user.to_string()))
        .with_error_code(code)
        .with_error_message(Some(StrBytes::from_string(format!("{why}: {user:?}"))))
}
