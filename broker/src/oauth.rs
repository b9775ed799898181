//! SASL/OAUTHBEARER (KIP-255, RFC 7628): the client's first message
//! carries a bearer token (a JWT), which the listener validates:
//!
//! - with keys (Kafka's `OAuthBearerValidatorCallbackHandler`, KIP-768):
//!   the JWT's signature against the key its `kid` names in the JWKS file
//!   of `sasl.oauthbearer.jwks.endpoint.url` (a `file://` URL; the file is
//!   read again, at most once a second, when a token names a key it does
//!   not hold), its `exp`, `nbf`, `aud` (`sasl.oauthbearer.expected.audience`)
//!   and `iss` (`sasl.oauthbearer.expected.issuer`), within
//!   `sasl.oauthbearer.clock.skew.seconds`;
//! - unsecured (Kafka's default `OAuthBearerUnsecuredValidatorCallbackHandler`,
//!   for development): unsigned tokens (`alg: none`), their `exp` checked,
//!   the options of `oauthbearer.sasl.jaas.config`
//!   (`unsecuredValidatorPrincipalClaimName`,
//!   `unsecuredValidatorScopeClaimName`, `unsecuredValidatorRequiredScope`,
//!   `unsecuredValidatorAllowableClockSkewMs`).
//!
//! The principal is `User:` and the token's subject claim
//! (`sasl.oauthbearer.sub.claim.name`, default `sub`).

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};

/// Kafka's validating server callback handler, the one with keys.
pub const VALIDATOR_CLASS: &str =
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler";
/// Kafka's unsecured server callback handler (its default).
pub const UNSECURED_CLASS: &str = "org.apache.kafka.common.security.oauthbearer.internals.unsecured.OAuthBearerUnsecuredValidatorCallbackHandler";
const UNSECURED_LOGIN_MODULE: &str =
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule";
/// How often an unknown `kid` may make the JWKS file be read again.
const JWKS_REREAD_AFTER: Duration = Duration::from_secs(1);
/// The longest token read (a client's first message is bounded anyway).
const TOKEN_BYTES_MAX: usize = 16 << 10;

/// The settings OAUTHBEARER takes, by Kafka's keys without a listener
/// prefix.
pub const OAUTH_KEYS: &[&str] = &[
    "sasl.oauthbearer.jwks.endpoint.url",
    "sasl.oauthbearer.expected.audience",
    "sasl.oauthbearer.expected.issuer",
    "sasl.oauthbearer.sub.claim.name",
    "sasl.oauthbearer.scope.claim.name",
    "sasl.oauthbearer.clock.skew.seconds",
    "oauthbearer.sasl.server.callback.handler.class",
    "oauthbearer.sasl.jaas.config",
];

/// How a listener validates bearer tokens.
#[derive(Debug)]
pub struct OauthValidator {
    keys: Option<Keys>,
    sub_claim: String,
    scope_claim: String,
    required_scope: Vec<String>,
    skew_s: u64,
    audience: Vec<String>,
    issuer: Option<String>,
}

/// The JWKS file and the keys last read from it.
#[derive(Debug)]
struct Keys {
    path: PathBuf,
    set: Mutex<(JwkSet, Instant)>,
}

/// A token that passed: its principal and when it expires (Unix ms).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validated {
    pub principal: String,
    pub expires_ms: Option<u64>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl OauthValidator {
    /// The validator the settings describe (`get` finds a key's value, the
    /// listener's own first); else the key at fault and why.
    pub fn from_settings(
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<OauthValidator, (String, String)> {
        let refuse = |key: &str, why: String| (key.to_string(), why);
        let class = get("oauthbearer.sasl.server.callback.handler.class");
        let url = get("sasl.oauthbearer.jwks.endpoint.url");
        let validating = match class.as_deref().map(str::trim) {
            None | Some("") => url.is_some(),
            Some(VALIDATOR_CLASS) => true,
            Some(UNSECURED_CLASS) => false,
            Some(other) => {
                return Err(refuse(
                    "oauthbearer.sasl.server.callback.handler.class",
                    format!(
                        "{other} is not served: Strom serves {VALIDATOR_CLASS} (with \
                         sasl.oauthbearer.jwks.endpoint.url) and {UNSECURED_CLASS}"
                    ),
                ))
            }
        };
        let list = |key: &str| -> Vec<String> {
            get(key)
                .map(|v| {
                    v.split(',')
                        .map(|s| s.trim().to_string())
                        .filter(|s| !s.is_empty())
                        .collect()
                })
                .unwrap_or_default()
        };
        let mut validator = OauthValidator {
            keys: None,
            sub_claim: get("sasl.oauthbearer.sub.claim.name").unwrap_or_else(|| "sub".into()),
            scope_claim: get("sasl.oauthbearer.scope.claim.name").unwrap_or_else(|| "scope".into()),
            required_scope: Vec::new(),
            skew_s: match get("sasl.oauthbearer.clock.skew.seconds") {
                None => 30,
                Some(v) => v.trim().parse().map_err(|_| {
                    refuse(
                        "sasl.oauthbearer.clock.skew.seconds",
                        format!("{v:?} is not a count of seconds"),
                    )
                })?,
            },
            audience: list("sasl.oauthbearer.expected.audience"),
            issuer: get("sasl.oauthbearer.expected.issuer").filter(|i| !i.trim().is_empty()),
        };
        if validating {
            let key = "sasl.oauthbearer.jwks.endpoint.url";
            let Some(url) = url else {
                return Err(refuse(
                    key,
                    "the validating handler needs the keys: a file:// URL to a JWKS file".into(),
                ));
            };
            let Some(path) = url.trim().strip_prefix("file://") else {
                return Err(refuse(
                    key,
                    format!(
                        "{url}: only file:// URLs are served (a JWKS file on this host, \
                         kept up to date by whoever rotates the keys)"
                    ),
                ));
            };
            let path = PathBuf::from(path);
            let set = read_jwks(&path).map_err(|why| refuse(key, why))?;
            validator.keys = Some(Keys {
                path,
                set: Mutex::new((set, Instant::now())),
            });
        } else {
            if let Some(jaas) = get("oauthbearer.sasl.jaas.config") {
                let options = protocol::jaas::jaas_options(&jaas, &[UNSECURED_LOGIN_MODULE])
                    .map_err(|why| refuse("oauthbearer.sasl.jaas.config", why))?;
                for (key, value) in options {
                    match key.as_str() {
                        "unsecuredValidatorPrincipalClaimName" => validator.sub_claim = value,
                        "unsecuredValidatorScopeClaimName" => validator.scope_claim = value,
                        "unsecuredValidatorRequiredScope" => {
                            validator.required_scope = value
                                .split([' ', ','])
                                .filter(|s| !s.is_empty())
                                .map(str::to_string)
                                .collect()
                        }
                        "unsecuredValidatorAllowableClockSkewMs" => {
                            let ms: u64 = value.parse().map_err(|_| {
                                refuse(
                                    "oauthbearer.sasl.jaas.config",
                                    format!("unsecuredValidatorAllowableClockSkewMs {value:?} is not a count"),
                                )
                            })?;
                            validator.skew_s = ms.div_ceil(1000);
                        }
                        _ => {}
                    }
                }
            }
        }
        Ok(validator)
    }

    /// Whether this validator checks signatures.
    pub fn checks_signatures(&self) -> bool {
        self.keys.is_some()
    }

    /// The client's first message (RFC 7628's GS2 form) checked and its
    /// token validated; why not, for the log, else.
    pub fn authenticate(&self, message: &[u8]) -> Result<Validated, String> {
        let token = bearer_token(message)?;
        match &self.keys {
            Some(keys) => self.validate_signed(keys, &token),
            None => self.validate_unsecured(&token),
        }
    }

    fn validate_signed(&self, keys: &Keys, token: &str) -> Result<Validated, String> {
        let header = jsonwebtoken::decode_header(token)
            .map_err(|e| format!("the token does not decode: {e}"))?;
        let allowed = [
            Algorithm::RS256,
            Algorithm::RS384,
            Algorithm::RS512,
            Algorithm::PS256,
            Algorithm::PS384,
            Algorithm::PS512,
            Algorithm::ES256,
            Algorithm::ES384,
        ];
        if !allowed.contains(&header.alg) {
            return Err(format!(
                "the token is signed with {:?}, which is not served",
                header.alg
            ));
        }
        let kid = header.kid.clone().ok_or("the token names no key (kid)")?;
        let jwk = {
            let mut set = keys.set.lock().expect("not poisoned");
            if set.0.find(&kid).is_none() && set.1.elapsed() >= JWKS_REREAD_AFTER {
                match read_jwks(&keys.path) {
                    Ok(fresh) => *set = (fresh, Instant::now()),
                    Err(why) => tracing::warn!(reason = %why, "the JWKS file cannot be read again"),
                }
            }
            set.0
                .find(&kid)
                .cloned()
                .ok_or_else(|| format!("the token's key {kid:?} is not in the JWKS file"))?
        };
        let key = DecodingKey::from_jwk(&jwk).map_err(|e| format!("key {kid:?}: {e}"))?;
        let mut validation = Validation::new(header.alg);
        validation.leeway = self.skew_s;
        validation.validate_nbf = true;
        validation.set_required_spec_claims(&["exp"]);
        if self.audience.is_empty() {
            validation.validate_aud = false;
        } else {
            validation.set_audience(&self.audience);
        }
        if let Some(issuer) = &self.issuer {
            validation.set_issuer(&[issuer]);
        }
        let claims = jsonwebtoken::decode::<serde_json::Value>(token, &key, &validation)
            .map_err(|e| format!("the token is refused: {e}"))?
            .claims;
        self.principal_of(&claims)
    }

    fn validate_unsecured(&self, token: &str) -> Result<Validated, String> {
        let mut parts = token.split('.');
        let (Some(header), Some(payload), Some(signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err("the token is not a JWT (header.payload.signature)".into());
        };
        let decode = |part: &str, what: &str| -> Result<serde_json::Value, String> {
            let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(part.trim_end_matches('='))
                .map_err(|_| format!("the token's {what} is not base64url"))?;
            serde_json::from_slice(&bytes).map_err(|_| format!("the token's {what} is not JSON"))
        };
        let header = decode(header, "header")?;
        if header["alg"] != "none" || !signature.is_empty() {
            return Err("the unsecured validator takes unsigned tokens (alg none) only".into());
        }
        let claims = decode(payload, "payload")?;
        let now_s = now_ms() / 1000;
        let exp = claims["exp"]
            .as_f64()
            .ok_or("the token has no expiration (exp)")?;
        if (exp as u64) + self.skew_s < now_s {
            return Err(format!("the token expired at {exp}"));
        }
        if let Some(iat) = claims["iat"].as_f64() {
            if iat as u64 > now_s + self.skew_s {
                return Err(format!("the token is issued in the future ({iat})"));
            }
        }
        if !self.required_scope.is_empty() {
            let scope: Vec<String> = match &claims[&self.scope_claim] {
                serde_json::Value::String(s) => s.split(' ').map(str::to_string).collect(),
                serde_json::Value::Array(a) => a
                    .iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect(),
                _ => Vec::new(),
            };
            if let Some(missing) = self.required_scope.iter().find(|s| !scope.contains(s)) {
                return Err(format!("the token's scope lacks {missing:?}"));
            }
        }
        self.principal_of(&claims)
    }

    fn principal_of(&self, claims: &serde_json::Value) -> Result<Validated, String> {
        let subject = claims[&self.sub_claim]
            .as_str()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| format!("the token has no {} claim", self.sub_claim))?;
        Ok(Validated {
            principal: format!("User:{subject}"),
            expires_ms: claims["exp"].as_f64().map(|exp| (exp * 1000.0) as u64),
        })
    }
}

fn read_jwks(path: &std::path::Path) -> Result<JwkSet, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the JWKS file {}: {e}", path.display()))?;
    let set: JwkSet = serde_json::from_str(&text)
        .map_err(|e| format!("{} is not a JWKS document: {e}", path.display()))?;
    if set.keys.is_empty() {
        return Err(format!("{} holds no key", path.display()));
    }
    Ok(set)
}

/// The bearer token of an OAUTHBEARER client's first message:
/// `n,[a=authzid],` then `\x01`-separated `key=value` pairs ending in
/// `\x01\x01`, one of them `auth=Bearer <token>`.
pub fn bearer_token(message: &[u8]) -> Result<String, String> {
    if message.len() > TOKEN_BYTES_MAX {
        return Err(format!("a client message of {} bytes", message.len()));
    }
    let text =
        std::str::from_utf8(message).map_err(|_| "a client message not UTF-8".to_string())?;
    let Some(rest) = text.strip_prefix("n,") else {
        return Err("a client message without its GS2 header (n,,)".into());
    };
    let Some((_authzid, rest)) = rest.split_once(',') else {
        return Err("a client message without its GS2 header (n,,)".into());
    };
    let Some(pairs) = rest
        .strip_prefix('\x01')
        .and_then(|r| r.strip_suffix("\x01\x01"))
    else {
        return Err("a client message not framed by \\x01 ... \\x01\\x01".into());
    };
    let mut token = None;
    for pair in pairs.split('\x01') {
        let Some((key, value)) = pair.split_once('=') else {
            return Err(format!("a key-value pair without '=': {pair:?}"));
        };
        if key == "auth" {
            let Some(bearer) = value.strip_prefix("Bearer ") else {
                return Err("auth is not a Bearer token".into());
            };
            token = Some(bearer.trim().to_string());
        }
    }
    token
        .filter(|t| !t.is_empty())
        .ok_or_else(|| "no auth=Bearer token".to_string())
}

/// What the server answers a refused token with (RFC 7628 §3.2.2); the
/// client then sends `\x01` and the authentication fails.
pub fn error_challenge() -> Vec<u8> {
    br#"{"status":"invalid_token"}"#.to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unsigned(claims: &str) -> String {
        let e = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        format!("{}.{}.", e(r#"{"alg":"none"}"#), e(claims))
    }

    fn message(token: &str) -> Vec<u8> {
        format!("n,,\x01auth=Bearer {token}\x01\x01").into_bytes()
    }

    #[test]
    fn the_client_message_is_read_strictly() {
        assert_eq!(bearer_token(&message("abc")).unwrap(), "abc");
        assert_eq!(
            bearer_token(b"n,a=alice,\x01host=h\x01auth=Bearer t\x01\x01").unwrap(),
            "t"
        );
        for bad in [
            &b"auth=Bearer t"[..],
            b"n,,auth=Bearer t\x01\x01",
            b"n,,\x01auth=Basic t\x01\x01",
            b"n,,\x01auth=Bearer t\x01",
            b"n,,\x01\x01\x01",
        ] {
            assert!(bearer_token(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_unsecured_validator_takes_unsigned_tokens_until_they_expire() {
        let validator = OauthValidator::from_settings(|_| None).unwrap();
        assert!(!validator.checks_signatures());
        let later = now_ms() / 1000 + 600;
        let ok = validator
            .authenticate(&message(&unsigned(&format!(
                r#"{{"sub":"alice","exp":{later}}}"#
            ))))
            .unwrap();
        assert_eq!(ok.principal, "User:alice");
        assert_eq!(ok.expires_ms, Some(later * 1000));
        let expired = unsigned(r#"{"sub":"alice","exp":1000}"#);
        assert!(validator
            .authenticate(&message(&expired))
            .unwrap_err()
            .contains("expired"));
        let no_exp = unsigned(r#"{"sub":"alice"}"#);
        assert!(validator.authenticate(&message(&no_exp)).is_err());
    }

    #[test]
    fn settings_not_served_are_refused_naming_the_key() {
        let with = |key: &'static str, value: &'static str| {
            OauthValidator::from_settings(move |k| (k == key).then(|| value.to_string()))
                .unwrap_err()
                .0
        };
        assert_eq!(
            with(
                "sasl.oauthbearer.jwks.endpoint.url",
                "https://idp.example/jwks"
            ),
            "sasl.oauthbearer.jwks.endpoint.url"
        );
        assert_eq!(
            with(
                "oauthbearer.sasl.server.callback.handler.class",
                "com.example.Mine"
            ),
            "oauthbearer.sasl.server.callback.handler.class"
        );
        assert_eq!(
            with(
                "oauthbearer.sasl.server.callback.handler.class",
                VALIDATOR_CLASS
            ),
            "sasl.oauthbearer.jwks.endpoint.url"
        );
    }
}
