//! TLS on the client listener: Kafka's SSL security protocol, served with
//! rustls (no OpenSSL in the broker). The settings are Kafka's, with PEM
//! keystores and truststores (`ssl.keystore.type=PEM`): the broker's key
//! and certificate chain from `ssl.keystore.location` (one PEM file holding
//! both, as Kafka's PEM keystore) or from `ssl.keystore.key` and
//! `ssl.keystore.certificate.chain` (PEM text), the certificate
//! authorities clients' certificates must chain to from
//! `ssl.truststore.location` or `ssl.truststore.certificates`, and
//! `ssl.client.auth` (none, requested, required), `ssl.enabled.protocols`
//! and `ssl.cipher.suites`. Each may be given for the listener alone with
//! Kafka's `listener.name.<name>.` prefix, which wins over the plain key.
//!
//! The rustls server configuration is built once at start, checked (a
//! key that does not match its certificate, an empty truststore with
//! client authentication, an unknown protocol or suite are refused with
//! the setting named) and shared by every core; each connection's
//! handshake runs on the core that accepted it.

use std::sync::Arc;

use rustls::server::WebPkiClientVerifier;
use rustls::{ServerConfig, SupportedCipherSuite};

pub use protocol::tls::{client_config, ClientAuth, TlsError, TlsSettings, SSL_KEYS};
use protocol::tls::{keystore, protocols, refused, truststore};

/// The keystore setting a listener's TLS takes while the broker runs
/// (Kafka's dynamic `listener.name.<name>.ssl.keystore.location` update
/// through AlterConfigs on the broker). The key's text and password are
/// not taken: the metadata log would keep them as given; an encrypted key
/// in the new file must open with the listener's `ssl.key.password`.
pub const RELOADABLE_KEYS: &[&str] = &["ssl.keystore.location"];

/// The listener and keystore key a dynamic broker setting
/// `listener.name.<name>.<key>` names, when `<key>` is reloadable.
pub fn reloadable(key: &str) -> Option<(String, &str)> {
    let rest = key.strip_prefix("listener.name.")?;
    let (name, key) = rest.split_once('.')?;
    RELOADABLE_KEYS
        .contains(&key)
        .then(|| (name.to_ascii_uppercase(), key))
}

/// A listener's TLS server configuration, replaced live when its keystore
/// settings change: each new connection takes the current one, existing
/// connections keep theirs.
pub struct ServerTls {
    /// The listener's settings as started.
    base: TlsSettings,
    /// The dynamic keystore settings in force and the configuration they
    /// gave.
    current: std::sync::RwLock<InForce>,
}

/// Dynamic keystore settings and the configuration they gave.
type InForce = (Vec<(String, String)>, Arc<ServerConfig>);

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls").finish_non_exhaustive()
    }
}

impl ServerTls {
    pub fn new(base: TlsSettings) -> Result<ServerTls, TlsError> {
        let config = server_config(&base)?;
        Ok(ServerTls {
            base,
            current: std::sync::RwLock::new((Vec::new(), config)),
        })
    }

    /// The configuration a new connection is served with.
    pub fn current(&self) -> Arc<ServerConfig> {
        self.current.read().expect("not poisoned").1.clone()
    }

    /// The configuration `overrides` (dynamic keystore settings) give over
    /// the listener's own, checked; the files are read again.
    pub fn build(&self, overrides: &[(String, String)]) -> Result<Arc<ServerConfig>, TlsError> {
        let mut settings = self.base.clone();
        settings.values.extend(overrides.iter().cloned());
        server_config(&settings)
    }

    /// Serves new connections with `overrides` from now on, rereading the
    /// files even when the settings are the ones in force (`force`: a
    /// keystore file replaced under the same name); unchanged settings
    /// without `force` change nothing. Whether it changed, or why not.
    pub fn apply(&self, overrides: Vec<(String, String)>, force: bool) -> Result<bool, TlsError> {
        if !force && self.current.read().expect("not poisoned").0 == overrides {
            return Ok(false);
        }
        let config = self.build(&overrides)?;
        *self.current.write().expect("not poisoned") = (overrides, config);
        Ok(true)
    }
}

/// The dynamic keystore settings `image` holds for `node_id`'s listener
/// `name`, as plain keys.
pub fn overrides_for(
    image: &crate::metadata::MetadataImage,
    node_id: i32,
    name: &str,
) -> Vec<(String, String)> {
    image
        .broker_configs
        .get(&node_id.to_string())
        .into_iter()
        .flatten()
        .filter_map(|(key, value)| {
            let (listener, key) = reloadable(key)?;
            (listener == name).then(|| (key.to_string(), value.clone()))
        })
        .collect()
}

/// The rustls server configuration of `settings`, checked.
pub fn server_config(settings: &TlsSettings) -> Result<Arc<ServerConfig>, TlsError> {
    for key in ["ssl.keystore.type", "ssl.truststore.type"] {
        if let Some(kind) = settings.get(key) {
            if !kind.eq_ignore_ascii_case("PEM") {
                return Err(refused(
                    key,
                    format!("{kind}: Strom reads PEM keystores and truststores only (ssl.keystore.type=PEM)"),
                ));
            }
        }
    }
    let (chain, key) = keystore(settings)?;
    // ring builds with the Rust toolchain alone (aws-lc-rs, rustls's
    // default, needs CMake); it offers no post-quantum key exchange, which
    // rustls marks by deprecating its constructor.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let provider = Arc::new(rustls::crypto::CryptoProvider {
        cipher_suites: cipher_suites(settings, &provider.cipher_suites)?,
        ..(*provider).clone()
    });
    let versions = protocols(settings)?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|error| {
            refused(
                "ssl.cipher.suites",
                format!("no suite left for the enabled protocols: {error}"),
            )
        })?;
    let client_auth = settings.client_auth()?;
    let builder = match client_auth {
        ClientAuth::None => builder.with_no_client_auth(),
        ClientAuth::Requested | ClientAuth::Required => {
            let roots = Arc::new(truststore(settings)?);
            let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider);
            let verifier = if client_auth == ClientAuth::Requested {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            let verifier = verifier.build().map_err(|error| {
                refused(
                    "ssl.truststore.location",
                    format!("cannot verify clients: {error}"),
                )
            })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder.with_single_cert(chain, key).map_err(|error| {
        refused(
            "ssl.keystore.location",
            format!("the key and certificate chain do not serve: {error}"),
        )
    })?;
    Ok(Arc::new(config))
}

/// `ssl.cipher.suites` by their IANA names (as Java's and OpenSSL's
/// clients name them, e.g. TLS_AES_128_GCM_SHA256 or
/// TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384); empty: every suite rustls
/// offers.
fn cipher_suites(
    settings: &TlsSettings,
    offered: &[SupportedCipherSuite],
) -> Result<Vec<SupportedCipherSuite>, TlsError> {
    let Some(value) = settings.get("ssl.cipher.suites") else {
        return Ok(offered.to_vec());
    };
    let mut suites = Vec::new();
    for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let found = offered
            .iter()
            .find(|s| iana_name(s) == name)
            .ok_or_else(|| {
                let known: Vec<String> = offered.iter().map(iana_name).collect();
                refused(
                    "ssl.cipher.suites",
                    format!("{name} is not served; the suites are {}", known.join(", ")),
                )
            })?;
        suites.push(*found);
    }
    if suites.is_empty() {
        return Err(refused("ssl.cipher.suites", "names no suite"));
    }
    Ok(suites)
}

/// A suite's IANA name (rustls calls the TLS 1.3 ones `TLS13_...`).
fn iana_name(suite: &SupportedCipherSuite) -> String {
    let name = format!("{:?}", suite.suite());
    match name.strip_prefix("TLS13_") {
        Some(rest) => format!("TLS_{rest}"),
        None => name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(pairs: &[(&str, &str)]) -> TlsSettings {
        TlsSettings {
            values: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    fn refusal(pairs: &[(&str, &str)]) -> TlsError {
        server_config(&settings(pairs)).expect_err("refused")
    }

    #[test]
    fn what_cannot_be_served_is_refused_naming_the_setting() {
        assert_eq!(refusal(&[]).0, "ssl.keystore.location");
        assert_eq!(
            refusal(&[("ssl.keystore.type", "JKS")]).0,
            "ssl.keystore.type"
        );
        let missing = refusal(&[("ssl.keystore.location", "/nonexistent/key.pem")]);
        assert_eq!(missing.0, "ssl.keystore.location");
        assert!(missing.1.contains("/nonexistent/key.pem"), "{missing:?}");
        assert_eq!(
            refusal(&[
                ("ssl.keystore.certificate.chain", "no pem here"),
                ("ssl.keystore.key", "nor here"),
            ])
            .0,
            "ssl.keystore.certificate.chain"
        );
        assert_eq!(
            settings(&[("ssl.client.auth", "sometimes")]).client_auth(),
            Err((
                "ssl.client.auth".to_string(),
                "\"sometimes\": expected none, requested or required".to_string()
            ))
        );
    }

    #[test]
    fn protocols_and_suites_go_by_kafkas_and_ianas_names() {
        #[allow(deprecated)]
        let all = rustls::crypto::ring::default_provider().cipher_suites;
        assert_eq!(
            protocols(&settings(&[("ssl.enabled.protocols", "TLSv1.3")])).unwrap(),
            vec![&rustls::version::TLS13]
        );
        assert_eq!(
            protocols(&settings(&[("ssl.enabled.protocols", "TLSv1.1")]))
                .unwrap_err()
                .0,
            "ssl.enabled.protocols"
        );
        let chosen = cipher_suites(
            &settings(&[(
                "ssl.cipher.suites",
                "TLS_AES_128_GCM_SHA256, TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
            )]),
            &all,
        )
        .unwrap();
        let names: Vec<String> = chosen.iter().map(iana_name).collect();
        assert_eq!(
            names,
            [
                "TLS_AES_128_GCM_SHA256",
                "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"
            ]
        );
        let unknown = cipher_suites(
            &settings(&[("ssl.cipher.suites", "TLS_RSA_WITH_RC4_128_MD5")]),
            &all,
        )
        .unwrap_err();
        assert!(unknown.1.contains("TLS_AES_256_GCM_SHA384"), "{unknown:?}");
    }
}
