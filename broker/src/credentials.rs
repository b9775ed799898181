//! Users' SCRAM credentials as the controller changes them: what an
//! AlterUserScramCredentials request does to the metadata, decided as a
//! plain function of the image (each user's changes together or not at
//! all, one result per user) so that it is tested without a broker.

use std::collections::{BTreeMap, BTreeSet};

use protocol::scram::{Mechanism, ITERATIONS_MAX, ITERATIONS_MIN};

use crate::errors;
use crate::metadata::{MetadataImage, MetadataRecord, ScramCredential};

/// One change a request asks for: a user's credential for a mechanism
/// set (salt, iterations, salted password) or deleted (None).
#[derive(Debug, Clone)]
pub struct Change {
    pub user: String,
    pub mechanism: i8,
    pub upsert: Option<(Vec<u8>, i32, Vec<u8>)>,
}

/// A user's outcome: Kafka's code and, when it failed, why.
pub type UserResult = (String, i16, Option<String>);

/// What `changes` do to `image`: one result per user (in the order the
/// users first appear) and the records of the users whose changes all hold.
pub fn decide(image: &MetadataImage, changes: &[Change]) -> (Vec<UserResult>, Vec<MetadataRecord>) {
    let mut order: Vec<&str> = Vec::new();
    let mut failed: BTreeMap<&str, (i16, String)> = BTreeMap::new();
    let mut seen: BTreeSet<(&str, i8)> = BTreeSet::new();
    for change in changes {
        let user = change.user.as_str();
        if !order.contains(&user) {
            order.push(user);
        }
        if failed.contains_key(user) {
            continue;
        }
        if let Err(refusal) = check(image, change, &mut seen) {
            failed.insert(user, refusal);
        }
    }
    let mut records = Vec::new();
    for change in changes {
        if failed.contains_key(change.user.as_str()) {
            continue;
        }
        let mechanism = Mechanism::from_type_id(change.mechanism).expect("checked");
        records.push(match &change.upsert {
            Some((salt, iterations, salted_password)) => {
                let keys = mechanism.keys(salted_password);
                MetadataRecord::ScramCredentialSet {
                    user: change.user.clone(),
                    mechanism: change.mechanism,
                    credential: ScramCredential {
                        salt: salt.clone(),
                        iterations: *iterations,
                        stored_key: keys.stored_key,
                        server_key: keys.server_key,
                    },
                }
            }
            None => MetadataRecord::ScramCredentialDeleted {
                user: change.user.clone(),
                mechanism: change.mechanism,
            },
        });
    }
    let results = order
        .into_iter()
        .map(|user| match failed.remove(user) {
            Some((code, why)) => (user.to_string(), code, Some(why)),
            None => (user.to_string(), errors::NONE, None),
        })
        .collect();
    (results, records)
}

fn check<'a>(
    image: &MetadataImage,
    change: &'a Change,
    seen: &mut BTreeSet<(&'a str, i8)>,
) -> Result<(), (i16, String)> {
    let user = change.user.as_str();
    if user.is_empty() {
        return Err((
            errors::UNACCEPTABLE_CREDENTIAL,
            "the user name is empty".to_string(),
        ));
    }
    let Some(mechanism) = Mechanism::from_type_id(change.mechanism) else {
        return Err((
            errors::UNSUPPORTED_SASL_MECHANISM,
            format!(
                "unknown SCRAM mechanism type {} (1 SCRAM-SHA-256, 2 SCRAM-SHA-512)",
                change.mechanism
            ),
        ));
    };
    if !seen.insert((user, change.mechanism)) {
        return Err((
            errors::DUPLICATE_RESOURCE,
            format!(
                "the request changes the {} credential of user {user:?} twice",
                mechanism.name()
            ),
        ));
    }
    match &change.upsert {
        Some((salt, iterations, salted_password)) => {
            if !(ITERATIONS_MIN..=ITERATIONS_MAX).contains(iterations) {
                return Err((
                    errors::UNACCEPTABLE_CREDENTIAL,
                    format!(
                        "{iterations} iterations: {} needs {ITERATIONS_MIN} to {ITERATIONS_MAX}",
                        mechanism.name()
                    ),
                ));
            }
            if salt.is_empty() || salted_password.is_empty() {
                return Err((
                    errors::UNACCEPTABLE_CREDENTIAL,
                    "the salt and the salted password must not be empty".to_string(),
                ));
            }
        }
        None => {
            if !image
                .scram
                .contains_key(&(user.to_string(), change.mechanism))
            {
                return Err((
                    errors::RESOURCE_NOT_FOUND,
                    format!(
                        "user {user:?} has no {} credential to delete",
                        mechanism.name()
                    ),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upsert(user: &str, mechanism: i8, iterations: i32) -> Change {
        Change {
            user: user.to_string(),
            mechanism,
            upsert: Some((b"salt".to_vec(), iterations, vec![7; 32])),
        }
    }

    fn delete(user: &str, mechanism: i8) -> Change {
        Change {
            user: user.to_string(),
            mechanism,
            upsert: None,
        }
    }

    #[test]
    fn each_users_changes_apply_together_or_not_at_all() {
        let image = MetadataImage::new(1);
        let (results, records) = decide(
            &image,
            &[
                upsert("alice", 1, 4096),
                upsert("alice", 2, 8192),
                upsert("bob", 2, 4096),
                // bob's second change is refused: none of bob's apply.
                upsert("bob", 2, 4096),
                upsert("carol", 3, 4096),
                upsert("dave", 1, 100),
                upsert("", 1, 4096),
                delete("erin", 1),
            ],
        );
        let codes: Vec<(&str, i16)> = results.iter().map(|(u, c, _)| (u.as_str(), *c)).collect();
        assert_eq!(
            codes,
            [
                ("alice", errors::NONE),
                ("bob", errors::DUPLICATE_RESOURCE),
                ("carol", errors::UNSUPPORTED_SASL_MECHANISM),
                ("dave", errors::UNACCEPTABLE_CREDENTIAL),
                ("", errors::UNACCEPTABLE_CREDENTIAL),
                ("erin", errors::RESOURCE_NOT_FOUND),
            ]
        );
        assert!(results
            .iter()
            .all(|(_, c, m)| (*c == errors::NONE) == m.is_none()));
        assert_eq!(records.len(), 2, "{records:?}");
        let image = image.with(&records);
        let keys = Mechanism::Sha512.keys(&[7; 32]);
        let alice = &image.scram[&("alice".to_string(), 2)];
        assert_eq!(alice.iterations, 8192);
        assert_eq!(alice.stored_key, keys.stored_key);
        assert_eq!(alice.server_key, keys.server_key);

        let (results, records) = decide(&image, &[delete("alice", 1)]);
        assert_eq!(results, [("alice".to_string(), errors::NONE, None)]);
        let image = image.with(&records);
        assert!(!image.scram.contains_key(&("alice".to_string(), 1)));
        assert!(image.scram.contains_key(&("alice".to_string(), 2)));
    }
}
