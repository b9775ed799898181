//! SASL authentication on the client listener (the SASL_PLAINTEXT and
//! SASL_SSL security protocols), Kafka's way: after the connection opens
//! (and, for SASL_SSL, its TLS handshake ends) a client may send only
//! ApiVersions, SaslHandshake (v1) naming a mechanism
//! `sasl.enabled.mechanisms` enables, then SaslAuthenticate with the
//! mechanism's bytes. Until it authenticates, any other request closes the
//! connection; a failed authentication is answered with
//! SASL_AUTHENTICATION_FAILED and the connection closed.
//!
//! Mechanisms served: PLAIN, with the users of Kafka's
//! `listener.name.<name>.plain.sasl.jaas.config`
//! (`org.apache.kafka.common.security.plain.PlainLoginModule required
//! user_alice="alice-secret";`), and SCRAM-SHA-256 and SCRAM-SHA-512 with
//! the credentials of the replicated metadata (set with
//! AlterUserScramCredentials: salted keys, never a password). The work
//! before authentication is bounded: each request is decoded within the
//! listener's frame limits and checked at once, on the connection's own
//! reader, one at a time; a SCRAM exchange costs the broker two HMACs and
//! a hash (the salting is the client's).

use std::collections::BTreeMap;

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, RequestKind, SaslAuthenticateResponse, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use protocol::codec;
use protocol::scram::{self, Mechanism, ServerExchange};

use crate::errors;

/// The versions served (SaslHandshake v0 is advertised, as librdkafka
/// needs it listed, and refused: raw SASL tokens follow it).
pub const HANDSHAKE_VERSIONS: (i16, i16) = (0, 1);
pub const AUTHENTICATE_VERSIONS: (i16, i16) = (0, 2);

/// The mechanisms Strom serves.
pub const MECHANISMS_SERVED: &[&str] = &["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"];

/// The label an authentication with `mechanism` is counted under: the
/// mechanism when it is one served, else "none" (not yet named, or a name
/// a client made up: the labels stay bounded).
pub fn mechanism_label(mechanism: Option<&str>) -> &'static str {
    MECHANISMS_SERVED
        .iter()
        .copied()
        .find(|m| Some(*m) == mechanism)
        .unwrap_or("none")
}
/// Mechanisms Kafka knows that Strom does not serve yet.
const MECHANISMS_KNOWN: &[&str] = &[
    "GSSAPI",
    "PLAIN",
    "SCRAM-SHA-256",
    "SCRAM-SHA-512",
    "OAUTHBEARER",
];

/// A SASL listener's settings, checked at start.
#[derive(Clone)]
pub struct SaslConfig {
    pub mechanisms: Vec<String>,
    /// PLAIN's users: name → password.
    plain_users: BTreeMap<String, String>,
    /// `connections.max.reauth.ms` (KIP-368): how long an authentication
    /// holds before the client must authenticate again on its connection
    /// (0: for the connection's life).
    pub reauth_ms: u64,
    /// How OAUTHBEARER's tokens are validated, when it is enabled.
    pub oauth: Option<std::sync::Arc<crate::oauth::OauthValidator>>,
}

impl std::fmt::Debug for SaslConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslConfig")
            .field("mechanisms", &self.mechanisms)
            .field("plain_users", &self.plain_users.keys().collect::<Vec<_>>())
            .field("reauth_ms", &self.reauth_ms)
            .finish()
    }
}

impl SaslConfig {
    /// The config of `sasl.enabled.mechanisms` (`None`: not given) and the
    /// PLAIN JAAS config; else the setting at fault and why.
    pub fn new(
        mechanisms: Option<&str>,
        plain_jaas: Option<&str>,
        reauth_ms: Option<&str>,
    ) -> Result<SaslConfig, (&'static str, String)> {
        let reauth_ms = match reauth_ms {
            None => 0,
            Some(ms) => ms.trim().parse::<u64>().map_err(|_| {
                (
                    "connections.max.reauth.ms",
                    format!("{ms:?} is not a count of milliseconds (0: never)"),
                )
            })?,
        };
        let Some(mechanisms) = mechanisms else {
            return Err((
                "sasl.enabled.mechanisms",
                "a SASL listener needs sasl.enabled.mechanisms: PLAIN, SCRAM-SHA-256 or \
                 SCRAM-SHA-512 (Kafka's default, GSSAPI, is not served)"
                    .to_string(),
            ));
        };
        let mut enabled = Vec::new();
        for name in mechanisms
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
        {
            let name = name.to_ascii_uppercase();
            if !MECHANISMS_SERVED.contains(&name.as_str()) {
                let why = if MECHANISMS_KNOWN.contains(&name.as_str()) {
                    format!(
                        "{name} is not served yet; Strom serves {}",
                        MECHANISMS_SERVED.join(", ")
                    )
                } else {
                    format!("{name} is no SASL mechanism Kafka knows")
                };
                return Err(("sasl.enabled.mechanisms", why));
            }
            if !enabled.contains(&name) {
                enabled.push(name);
            }
        }
        if enabled.is_empty() {
            return Err(("sasl.enabled.mechanisms", "names no mechanism".to_string()));
        }
        let plain_users = match plain_jaas {
            Some(jaas) => plain_users(jaas)
                .map_err(|why| ("listener.name.<name>.plain.sasl.jaas.config", why))?,
            None => BTreeMap::new(),
        };
        if enabled.iter().any(|m| m == "PLAIN") && plain_users.is_empty() {
            return Err((
                "listener.name.<name>.plain.sasl.jaas.config",
                "PLAIN is enabled but no user is configured: give \
                 org.apache.kafka.common.security.plain.PlainLoginModule required \
                 user_NAME=\"PASSWORD\";"
                    .to_string(),
            ));
        }
        Ok(SaslConfig {
            mechanisms: enabled,
            plain_users,
            reauth_ms,
            oauth: None,
        })
    }

    /// Whether `user` has `password` (compared in time independent of
    /// where they differ).
    fn plain_valid(&self, user: &str, password: &[u8]) -> bool {
        match self.plain_users.get(user) {
            Some(expected) => scram::constant_time_eq(expected.as_bytes(), password),
            None => {
                // The same work for an unknown user.
                let _ = scram::constant_time_eq(password, password);
                false
            }
        }
    }
}

/// The users of a PLAIN JAAS config:
/// `org.apache.kafka.common.security.plain.PlainLoginModule required
/// username="admin" password="admin-secret" user_admin="admin-secret"
/// user_alice="alice-secret";` (`username`/`password` are the broker's own
/// and are skipped).
pub fn plain_users(jaas: &str) -> Result<BTreeMap<String, String>, String> {
    let mut users = BTreeMap::new();
    for (key, value) in jaas_options(jaas, &[PLAIN_LOGIN_MODULE])? {
        if let Some(user) = key.strip_prefix("user_") {
            if user.is_empty() {
                return Err("user_ names no user".to_string());
            }
            users.insert(user.to_string(), value);
        } else if key != "username" && key != "password" {
            return Err(format!(
                "{key} is not a PLAIN option (user_NAME, username, password)"
            ));
        }
    }
    Ok(users)
}

pub use protocol::jaas::client_login;
use protocol::jaas::{jaas_options, PLAIN_LOGIN_MODULE};

/// Where a connection stands in its authentication.
pub enum SaslState {
    /// Nothing yet: ApiVersions and SaslHandshake are served.
    Start,
    /// SaslHandshake chose this mechanism: SaslAuthenticate next.
    Handshaken(String),
    /// A SCRAM exchange answered the client's first message: its final
    /// one comes next.
    Scram(Box<ServerExchange>),
    /// Authenticated as this principal (`User:name`), until `expires`
    /// (`connections.max.reauth.ms`) when the client must authenticate
    /// again (KIP-368).
    Authenticated {
        principal: String,
        expires: Option<std::time::Instant>,
    },
    /// OAUTHBEARER refused the client's token (why, for the log): its
    /// answer carried the error; the client's next message ends it.
    OauthRefused(String),
    /// Authenticated as `principal` and authenticating again: `next` is
    /// where the new authentication stands (Handshaken or Scram); it must
    /// end with the same principal.
    Reauthenticating {
        principal: String,
        next: Box<SaslState>,
    },
}

impl SaslState {
    /// The mechanism an authentication under way uses, once the handshake
    /// named it.
    pub fn mechanism(&self) -> Option<&str> {
        match self {
            SaslState::Handshaken(mechanism) => Some(mechanism),
            SaslState::Scram(exchange) => Some(exchange.mechanism().name()),
            SaslState::Reauthenticating { next, .. } => next.mechanism(),
            _ => None,
        }
    }

    /// The principal a connection authenticated as, if it did.
    pub fn principal(&self) -> Option<&str> {
        match self {
            SaslState::Authenticated { principal, .. }
            | SaslState::Reauthenticating { principal, .. } => Some(principal),
            _ => None,
        }
    }
}

/// Looks up a user's SCRAM credential for a mechanism.
pub type ScramCredentials<'a> = &'a dyn Fn(&str, Mechanism) -> Option<scram::Credential>;

/// What the connection does with a request frame before authentication.
#[derive(Debug)]
pub enum Step {
    /// Handled as any request (ApiVersions, or the connection is
    /// authenticated).
    Serve,
    /// This answer, then go on.
    Answer(Bytes),
    /// This answer, then close the connection: why, for the log.
    AnswerAndClose(Bytes, String),
    /// Close the connection at once: why.
    Close(String),
}

/// Takes `frame` (a request, header first) on a SASL listener's
/// connection in `state`; SCRAM's credentials come from `credentials`.
pub fn step(
    config: &SaslConfig,
    state: &mut SaslState,
    frame: &Bytes,
    credentials: ScramCredentials<'_>,
) -> Step {
    let is = |key: ApiKey| frame.len() >= 2 && frame[..2] == (key as i16).to_be_bytes();
    match state {
        SaslState::Authenticated { principal, expires } => {
            if is(ApiKey::SaslHandshake) {
                // KIP-368: authenticating again, as the same principal.
                let principal = principal.clone();
                let mut next = SaslState::Start;
                let step = step(config, &mut next, frame, credentials);
                if matches!(next, SaslState::Handshaken(_)) {
                    *state = SaslState::Reauthenticating {
                        principal,
                        next: Box::new(next),
                    };
                }
                return step;
            }
            if expires.is_some_and(|at| std::time::Instant::now() >= at) {
                return Step::Close(format!(
                    "the session of {principal} expired (connections.max.reauth.ms {} ms) and \
                     the client did not authenticate again",
                    config.reauth_ms
                ));
            }
            return Step::Serve;
        }
        SaslState::Reauthenticating { principal, next } => {
            if !is(ApiKey::SaslAuthenticate) {
                return Step::Close(format!(
                    "a request other than SaslAuthenticate while {principal} authenticates again"
                ));
            }
            let principal = principal.clone();
            let mut inner = std::mem::replace(next.as_mut(), SaslState::Start);
            let step = step(config, &mut inner, frame, credentials);
            *state = match inner {
                SaslState::Authenticated {
                    principal: again,
                    expires,
                } => {
                    if again != principal {
                        return Step::Close(format!(
                            "{principal} authenticated again as another principal, {again}"
                        ));
                    }
                    tracing::debug!(%principal, "authenticated again");
                    SaslState::Authenticated { principal, expires }
                }
                other => SaslState::Reauthenticating {
                    principal,
                    next: Box::new(other),
                },
            };
            return step;
        }
        _ => {}
    }
    if frame.len() >= 2 && frame[..2] == (ApiKey::ApiVersions as i16).to_be_bytes() {
        return Step::Serve;
    }
    let request = match codec::decode_header(frame.clone()) {
        Ok(request) => request,
        Err(error) => {
            return Step::Close(format!(
                "a malformed request before authentication: {error}"
            ))
        }
    };
    let (key, version, id) = (request.api_key, request.api_version, request.correlation_id);
    if !matches!(key, ApiKey::SaslHandshake | ApiKey::SaslAuthenticate) {
        return Step::Close(format!("{key:?} before SASL authentication"));
    }
    if key == ApiKey::SaslHandshake && version == 0 {
        return Step::Close(
            "SaslHandshake v0 (raw SASL tokens after it) is not served: the client must send v1 \
             and SaslAuthenticate"
                .to_string(),
        );
    }
    let (min, max) = if key == ApiKey::SaslHandshake {
        HANDSHAKE_VERSIONS
    } else {
        AUTHENTICATE_VERSIONS
    };
    if !(min..=max).contains(&version) {
        return Step::Close(format!("{key:?} v{version} is not served"));
    }
    let body = match codec::decode_body(&request) {
        Ok(body) => body,
        Err(error) => return Step::Close(format!("a malformed {key:?}: {error}")),
    };
    match (body, &*state) {
        (RequestKind::SaslHandshake(handshake), SaslState::Start) => {
            let mechanism = handshake.mechanism.to_string();
            let enabled = config.mechanisms.contains(&mechanism);
            let code = if enabled {
                errors::NONE
            } else {
                errors::UNSUPPORTED_SASL_MECHANISM
            };
            let response = SaslHandshakeResponse::default()
                .with_error_code(code)
                .with_mechanisms(
                    config
                        .mechanisms
                        .iter()
                        .map(|m| StrBytes::from_string(m.clone()))
                        .collect(),
                );
            let Some(answer) = encode(id, version, &response, key, code) else {
                return Step::Close("cannot encode SaslHandshake's answer".to_string());
            };
            if enabled {
                *state = SaslState::Handshaken(mechanism);
                Step::Answer(answer)
            } else {
                Step::AnswerAndClose(
                    answer,
                    format!(
                        "SASL mechanism {mechanism:?} not enabled (enabled: {})",
                        config.mechanisms.join(", ")
                    ),
                )
            }
        }
        (RequestKind::SaslAuthenticate(authenticate), SaslState::Handshaken(_))
        | (RequestKind::SaslAuthenticate(authenticate), SaslState::Scram(_))
        | (RequestKind::SaslAuthenticate(authenticate), SaslState::OauthRefused(_)) => {
            let taken = std::mem::replace(state, SaslState::Start);
            let outcome = authenticate_step(config, taken, &authenticate.auth_bytes, credentials);
            let (code, message, reply) = match &outcome {
                Ok((_, reply, _)) => (errors::NONE, None, reply.clone()),
                Err(_) => (
                    errors::SASL_AUTHENTICATION_FAILED,
                    Some(StrBytes::from_static_str(
                        "Authentication failed: Invalid username or password",
                    )),
                    Bytes::new(),
                ),
            };
            // KIP-368: from v1 the client learns when to authenticate again.
            let lifetime = match &outcome {
                Ok((SaslState::Authenticated { .. }, _, lifetime)) => *lifetime,
                _ => 0,
            };
            let response = SaslAuthenticateResponse::default()
                .with_error_code(code)
                .with_error_message(message)
                .with_auth_bytes(reply)
                .with_session_lifetime_ms(lifetime);
            let Some(answer) = encode(id, version, &response, key, code) else {
                return Step::Close("cannot encode SaslAuthenticate's answer".to_string());
            };
            match outcome {
                Ok((next, _, _)) => {
                    *state = next;
                    Step::Answer(answer)
                }
                Err(why) => Step::AnswerAndClose(answer, why),
            }
        }
        (_, _) => {
            let response_code = errors::ILLEGAL_SASL_STATE;
            let answer = if key == ApiKey::SaslHandshake {
                encode(
                    id,
                    version,
                    &SaslHandshakeResponse::default().with_error_code(response_code),
                    key,
                    response_code,
                )
            } else {
                encode(
                    id,
                    version,
                    &SaslAuthenticateResponse::default().with_error_code(response_code),
                    key,
                    response_code,
                )
            };
            match answer {
                Some(answer) => Step::AnswerAndClose(
                    answer,
                    format!("{key:?} out of order (ILLEGAL_SASL_STATE)"),
                ),
                None => Step::Close(format!("{key:?} out of order")),
            }
        }
    }
}

/// One SaslAuthenticate of a connection in `state`: its next state, the
/// bytes to answer and the session's lifetime in ms (KIP-368; 0: none), or
/// why the authentication fails (for the log).
fn authenticate_step(
    config: &SaslConfig,
    state: SaslState,
    bytes: &[u8],
    credentials: ScramCredentials<'_>,
) -> Result<(SaslState, Bytes, i64), String> {
    match state {
        SaslState::Handshaken(mechanism) if mechanism == "PLAIN" => {
            let principal = plain(config, bytes)?;
            let (state, lifetime) = authenticated(config, principal, None);
            Ok((state, Bytes::new(), lifetime))
        }
        SaslState::Handshaken(mechanism) if mechanism == "OAUTHBEARER" => {
            let oauth = config
                .oauth
                .as_ref()
                .ok_or("OAUTHBEARER has no validator on this listener")?;
            match oauth.authenticate(bytes) {
                Ok(valid) => {
                    let (state, lifetime) =
                        authenticated(config, valid.principal, valid.expires_ms);
                    Ok((state, Bytes::new(), lifetime))
                }
                Err(why) => Ok((
                    SaslState::OauthRefused(why),
                    Bytes::from(crate::oauth::error_challenge()),
                    0,
                )),
            }
        }
        SaslState::OauthRefused(why) => Err(format!("OAUTHBEARER token refused: {why}")),
        SaslState::Handshaken(name) => {
            let Some(mechanism) = Mechanism::from_name(&name) else {
                return Err(format!("mechanism {name} is not served"));
            };
            let (exchange, reply) =
                ServerExchange::start(mechanism, bytes, |user| credentials(user, mechanism))?;
            Ok((SaslState::Scram(Box::new(exchange)), Bytes::from(reply), 0))
        }
        SaslState::Scram(exchange) => {
            let principal = format!("User:{}", exchange.user());
            let reply = exchange.finish(bytes)?;
            let (state, lifetime) = authenticated(config, principal, None);
            Ok((state, Bytes::from(reply), lifetime))
        }
        SaslState::Start | SaslState::Authenticated { .. } | SaslState::Reauthenticating { .. } => {
            Err("SaslAuthenticate out of order".to_string())
        }
    }
}

/// Authenticated as `principal`, until `connections.max.reauth.ms` from now
/// (or the credential's own expiry, Unix ms, when earlier: KIP-368), and
/// that lifetime in ms (0: none).
fn authenticated(
    config: &SaslConfig,
    principal: String,
    credential_expires_ms: Option<u64>,
) -> (SaslState, i64) {
    if config.reauth_ms == 0 {
        return (
            SaslState::Authenticated {
                principal,
                expires: None,
            },
            0,
        );
    }
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let lifetime = credential_expires_ms
        .map_or(config.reauth_ms, |at| at.saturating_sub(now_ms))
        .min(config.reauth_ms);
    let expires = std::time::Instant::now() + std::time::Duration::from_millis(lifetime);
    (
        SaslState::Authenticated {
            principal,
            expires: Some(expires),
        },
        lifetime as i64,
    )
}

/// PLAIN's message: `authzid NUL authcid NUL password`; the principal, or
/// why it fails (for the log, never for the client).
pub fn plain(config: &SaslConfig, bytes: &[u8]) -> Result<String, String> {
    let mut parts = bytes.split(|&b| b == 0);
    let (Some(authzid), Some(user), Some(password), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("a malformed PLAIN message".to_string());
    };
    let user = std::str::from_utf8(user).map_err(|_| "a user name not UTF-8".to_string())?;
    if !authzid.is_empty() && authzid != user.as_bytes() {
        return Err(format!("user {user:?} asked to act as another"));
    }
    if config.plain_valid(user, password) {
        Ok(format!("User:{user}"))
    } else {
        Err(format!("wrong password or unknown user {user:?}"))
    }
}

fn encode<T>(id: i32, version: i16, response: &T, key: ApiKey, code: i16) -> Option<Bytes>
where
    T: kafka_protocol::protocol::Encodable + kafka_protocol::protocol::HeaderVersion,
{
    crate::metrics::record_error_code(key as i16, code);
    codec::encode_response(id, version, response).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const JAAS: &str = "org.apache.kafka.common.security.plain.PlainLoginModule required \
        username=\"admin\" password=\"admin-secret\" user_admin=\"admin-secret\" \
        user_alice=\"alice-secret\";";

    #[test]
    fn a_plain_jaas_config_gives_its_users_and_bad_ones_say_why() {
        let users = plain_users(JAAS).unwrap();
        assert_eq!(
            users.into_iter().collect::<Vec<_>>(),
            [
                ("admin".to_string(), "admin-secret".to_string()),
                ("alice".to_string(), "alice-secret".to_string())
            ]
        );
        for bad in [
            "PlainLoginModule required user_a=\"b\";",
            "org.apache.kafka.common.security.plain.PlainLoginModule optional user_a=\"b\";",
            "org.apache.kafka.common.security.plain.PlainLoginModule required user_a=\"b\"",
            "org.apache.kafka.common.security.plain.PlainLoginModule required user_a=b;",
            "org.apache.kafka.common.security.plain.PlainLoginModule required other=\"b\";",
        ] {
            assert!(plain_users(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_clients_jaas_config_gives_its_login() {
        assert_eq!(
            client_login(JAAS),
            Ok(("admin".to_string(), "admin-secret".to_string()))
        );
        let scram = "org.apache.kafka.common.security.scram.ScramLoginModule required \
            username=\"alice\" password=\"pw\";";
        assert_eq!(
            client_login(scram),
            Ok(("alice".to_string(), "pw".to_string()))
        );
        let no_password = "org.apache.kafka.common.security.plain.PlainLoginModule required \
            username=\"alice\";";
        assert_eq!(
            client_login(no_password),
            Err("no password=\"...\"".to_string())
        );
    }

    #[test]
    fn mechanisms_not_served_are_refused_naming_the_setting() {
        assert!(SaslConfig::new(Some("PLAIN"), Some(JAAS), None).is_ok());
        assert_eq!(
            SaslConfig::new(None, Some(JAAS), None).unwrap_err().0,
            "sasl.enabled.mechanisms"
        );
        let scram = SaslConfig::new(Some("scram-sha-512,SCRAM-SHA-256"), None, None).unwrap();
        assert_eq!(scram.mechanisms, ["SCRAM-SHA-512", "SCRAM-SHA-256"]);
        let gssapi = SaslConfig::new(Some("GSSAPI"), Some(JAAS), None).unwrap_err();
        assert!(gssapi.1.contains("not served yet"), "{gssapi:?}");
        assert!(SaslConfig::new(Some("OAUTHBEARER"), None, None).is_ok());
        assert!(SaslConfig::new(Some("PLAIN"), None, None).is_err());
        assert!(SaslConfig::new(Some("MAGIC"), Some(JAAS), None)
            .unwrap_err()
            .1
            .contains("no SASL mechanism"));
    }

    #[test]
    fn a_credentials_expiry_bounds_the_session_when_sessions_expire() {
        let mut config = SaslConfig::new(Some("PLAIN"), Some(JAAS), Some("60000")).unwrap();
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let (_, lifetime) = authenticated(&config, "User:a".into(), Some(now_ms + 5_000));
        assert!((4_000..=5_000).contains(&lifetime), "{lifetime}");
        let (_, lifetime) = authenticated(&config, "User:a".into(), Some(now_ms + 600_000));
        assert_eq!(lifetime, 60_000);
        assert_eq!(authenticated(&config, "User:a".into(), None).1, 60_000);
        config.reauth_ms = 0;
        let (state, lifetime) = authenticated(&config, "User:a".into(), Some(now_ms + 5_000));
        assert_eq!(lifetime, 0);
        assert!(matches!(
            state,
            SaslState::Authenticated { expires: None, .. }
        ));
    }

    #[test]
    fn plain_takes_the_right_password_only() {
        let config = SaslConfig::new(Some("PLAIN"), Some(JAAS), None).unwrap();
        assert_eq!(
            plain(&config, b"\0alice\0alice-secret"),
            Ok("User:alice".to_string())
        );
        assert_eq!(
            plain(&config, b"alice\0alice\0alice-secret"),
            Ok("User:alice".to_string())
        );
        assert!(plain(&config, b"\0alice\0admin-secret").is_err());
        assert!(plain(&config, b"\0mallory\0alice-secret").is_err());
        assert!(plain(&config, b"admin\0alice\0alice-secret").is_err());
        assert!(plain(&config, b"\0alice").is_err());
        assert!(plain(&config, b"\0alice\0alice-secret\0more").is_err());
    }
}
