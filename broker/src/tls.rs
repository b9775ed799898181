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

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, SupportedCipherSuite, SupportedProtocolVersion};

/// The TLS settings Strom serves, by Kafka's keys (without a listener
/// prefix).
pub const SSL_KEYS: &[&str] = &[
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.certificate.chain",
    "ssl.keystore.key",
    "ssl.key.password",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.certificates",
    "ssl.client.auth",
    "ssl.enabled.protocols",
    "ssl.cipher.suites",
    "ssl.principal.mapping.rules",
];

/// Whether a client must, may or may not show a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    None,
    Requested,
    Required,
}

impl ClientAuth {
    fn parse(value: &str) -> Result<ClientAuth, String> {
        match value.trim().to_ascii_lowercase().as_str() {
            "" | "none" => Ok(ClientAuth::None),
            "requested" => Ok(ClientAuth::Requested),
            "required" => Ok(ClientAuth::Required),
            other => Err(format!("{other:?}: expected none, requested or required")),
        }
    }
}

/// A listener's TLS settings: `(key, value)` pairs by Kafka's plain keys,
/// the listener's own (prefixed) ones already put over the plain ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsSettings {
    pub values: Vec<(String, String)>,
}

impl TlsSettings {
    fn get(&self, key: &str) -> Option<&str> {
        self.values
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.trim())
            .filter(|v| !v.is_empty())
    }

    /// The client authentication asked for.
    pub fn client_auth(&self) -> Result<ClientAuth, (String, String)> {
        ClientAuth::parse(self.get("ssl.client.auth").unwrap_or("none"))
            .map_err(|why| ("ssl.client.auth".to_string(), why))
    }
}

/// Why a listener's TLS settings cannot be served: the setting and why.
pub type TlsError = (String, String);

fn refused(key: &str, why: impl Into<String>) -> TlsError {
    (key.to_string(), why.into())
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

/// A client's TLS configuration (the tools' `--command-config` with
/// `security.protocol=SSL`): the broker's certificate checked against the
/// authorities of `ssl.truststore.location` (or
/// `ssl.truststore.certificates`) and its host name; the client's own key
/// and certificate, from the keystore settings, when given.
pub fn client_config(settings: &TlsSettings) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    for key in ["ssl.keystore.type", "ssl.truststore.type"] {
        if let Some(kind) = settings.get(key) {
            if !kind.eq_ignore_ascii_case("PEM") {
                return Err(refused(key, format!("{kind}: PEM only")));
            }
        }
    }
    if let Some(algorithm) = settings.get("ssl.endpoint.identification.algorithm") {
        if !algorithm.eq_ignore_ascii_case("https") {
            return Err(refused(
                "ssl.endpoint.identification.algorithm",
                format!("{algorithm}: the broker's host name is always checked (https)"),
            ));
        }
    }
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let versions = protocols(settings)?;
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&versions)
        .map_err(|error| refused("ssl.enabled.protocols", error.to_string()))?
        .with_root_certificates(truststore(settings)?);
    let has_keystore = settings.get("ssl.keystore.location").is_some()
        || settings.get("ssl.keystore.certificate.chain").is_some();
    let config = if has_keystore {
        let (chain, key) = keystore(settings)?;
        builder.with_client_auth_cert(chain, key).map_err(|error| {
            refused(
                "ssl.keystore.location",
                format!("the key and certificate chain do not serve: {error}"),
            )
        })?
    } else {
        builder.with_no_client_auth()
    };
    Ok(Arc::new(config))
}

/// The certificate chain and private key: from `ssl.keystore.location`,
/// or from `ssl.keystore.certificate.chain` and `ssl.keystore.key`.
fn keystore(
    settings: &TlsSettings,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
    let (chain_key, key_key, chain_pem, key_pem) = match settings.get("ssl.keystore.location") {
        Some(path) => {
            let pem = read_pem("ssl.keystore.location", Path::new(path))?;
            (
                "ssl.keystore.location",
                "ssl.keystore.location",
                pem.clone(),
                pem,
            )
        }
        None => {
            let chain = settings.get("ssl.keystore.certificate.chain");
            let key = settings.get("ssl.keystore.key");
            match (chain, key) {
                (Some(chain), Some(key)) => (
                    "ssl.keystore.certificate.chain",
                    "ssl.keystore.key",
                    chain.as_bytes().to_vec(),
                    key.as_bytes().to_vec(),
                ),
                _ => {
                    return Err(refused(
                        "ssl.keystore.location",
                        "a TLS listener needs its key and certificate chain: \
                         ssl.keystore.location (a PEM file with both), or \
                         ssl.keystore.certificate.chain and ssl.keystore.key",
                    ))
                }
            }
        }
    };
    let contains = |text: &[u8], what: &str| text.windows(what.len()).any(|w| w == what.as_bytes());
    if contains(&key_pem, "Proc-Type: 4,ENCRYPTED") {
        return Err(refused(
            key_key,
            "the private key is encrypted in OpenSSL's legacy PEM form, which is not read: \
             convert it to encrypted PKCS#8 (`openssl pkcs8 -topk8 -v2 aes-256-cbc`)",
        ));
    }
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&chain_pem)
        .collect::<Result<_, _>>()
        .map_err(|error| refused(chain_key, format!("not a PEM certificate chain: {error}")))?;
    if chain.is_empty() {
        return Err(refused(
            chain_key,
            "holds no certificate (-----BEGIN CERTIFICATE-----)",
        ));
    }
    let key = if contains(&key_pem, "-----BEGIN ENCRYPTED PRIVATE KEY-----") {
        decrypt_key(&key_pem, settings.get("ssl.key.password"), key_key)?
    } else {
        PrivateKeyDer::from_pem_slice(&key_pem)
            .map_err(|error| refused(key_key, format!("holds no readable private key: {error}")))?
    };
    Ok((chain, key))
}

/// The PKCS#8 key of an `ENCRYPTED PRIVATE KEY` block (PBES2: PBKDF2 or
/// scrypt with AES, what `openssl pkcs8 -topk8 -v2` and `openssl genpkey
/// -aes256` write), decrypted with `ssl.key.password`.
fn decrypt_key(
    pem: &[u8],
    password: Option<&str>,
    key_key: &str,
) -> Result<PrivateKeyDer<'static>, TlsError> {
    const BEGIN: &str = "-----BEGIN ENCRYPTED PRIVATE KEY-----";
    const END: &str = "-----END ENCRYPTED PRIVATE KEY-----";
    let Some(password) = password else {
        return Err(refused(
            "ssl.key.password",
            format!("the private key of {key_key} is encrypted: give its password"),
        ));
    };
    let text = String::from_utf8_lossy(pem);
    let block = text
        .find(BEGIN)
        .and_then(|start| {
            let end = text[start..].find(END)? + start + END.len();
            Some(&text[start..end])
        })
        .ok_or_else(|| refused(key_key, "an ENCRYPTED PRIVATE KEY block without its end"))?;
    let (_, der) = pkcs8::der::pem::decode_vec(block.as_bytes()).map_err(|error| {
        refused(
            key_key,
            format!("the encrypted private key does not decode: {error}"),
        )
    })?;
    let encrypted =
        pkcs8::EncryptedPrivateKeyInfoRef::try_from(der.as_slice()).map_err(|error| {
            refused(
                key_key,
                format!("the encrypted private key does not decode: {error}"),
            )
        })?;
    let decrypted = encrypted.decrypt(password).map_err(|_| {
        refused(
            "ssl.key.password",
            format!("does not decrypt the private key of {key_key} (a wrong password, or a cipher not served)"),
        )
    })?;
    Ok(PrivateKeyDer::Pkcs8(
        rustls::pki_types::PrivatePkcs8KeyDer::from(decrypted.as_bytes().to_vec()),
    ))
}

/// The authorities clients' certificates must chain to.
fn truststore(settings: &TlsSettings) -> Result<RootCertStore, TlsError> {
    let (key, pem) = match (
        settings.get("ssl.truststore.location"),
        settings.get("ssl.truststore.certificates"),
    ) {
        (Some(path), _) => (
            "ssl.truststore.location",
            read_pem("ssl.truststore.location", Path::new(path))?,
        ),
        (None, Some(text)) => ("ssl.truststore.certificates", text.as_bytes().to_vec()),
        (None, None) => {
            return Err(refused(
                "ssl.truststore.location",
                "name the certificate authorities to trust (ssl.truststore.location, a PEM \
                 file)",
            ))
        }
    };
    let mut roots = RootCertStore::empty();
    for certificate in CertificateDer::pem_slice_iter(&pem) {
        let certificate =
            certificate.map_err(|error| refused(key, format!("not a PEM certificate: {error}")))?;
        roots
            .add(certificate)
            .map_err(|error| refused(key, format!("a certificate cannot be trusted: {error}")))?;
    }
    if roots.is_empty() {
        return Err(refused(key, "holds no certificate"));
    }
    Ok(roots)
}

fn read_pem(key: &str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path)
        .map_err(|error| refused(key, format!("cannot read {}: {error}", path.display())))
}

/// `ssl.enabled.protocols` (default TLSv1.2,TLSv1.3).
fn protocols(settings: &TlsSettings) -> Result<Vec<&'static SupportedProtocolVersion>, TlsError> {
    let Some(value) = settings.get("ssl.enabled.protocols") else {
        return Ok(vec![&rustls::version::TLS13, &rustls::version::TLS12]);
    };
    let mut versions = Vec::new();
    for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let version = match name {
            "TLSv1.3" => &rustls::version::TLS13,
            "TLSv1.2" => &rustls::version::TLS12,
            other => {
                return Err(refused(
                    "ssl.enabled.protocols",
                    format!("{other}: Strom serves TLSv1.2 and TLSv1.3"),
                ))
            }
        };
        if !versions.contains(&version) {
            versions.push(version);
        }
    }
    if versions.is_empty() {
        return Err(refused("ssl.enabled.protocols", "names no protocol"));
    }
    Ok(versions)
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
