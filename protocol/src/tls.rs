//! TLS settings shared by the broker and the clients: Kafka's `ssl.*`
//! keys with PEM keystores and truststores, read and checked into rustls
//! configurations. The broker builds its listeners' server side from them
//! (with what only a server needs); the tools and the load generator
//! build their client side with [`client_config`].

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{RootCertStore, SupportedProtocolVersion};

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
    /// The value of `key` (the last given), if it is not empty.
    pub fn get(&self, key: &str) -> Option<&str> {
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

pub fn refused(key: &str, why: impl Into<String>) -> TlsError {
    (key.to_string(), why.into())
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
pub fn keystore(
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
pub fn decrypt_key(
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
pub fn truststore(settings: &TlsSettings) -> Result<RootCertStore, TlsError> {
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

pub fn read_pem(key: &str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path)
        .map_err(|error| refused(key, format!("cannot read {}: {error}", path.display())))
}

/// `ssl.enabled.protocols` (default TLSv1.2,TLSv1.3).
pub fn protocols(
    settings: &TlsSettings,
) -> Result<Vec<&'static SupportedProtocolVersion>, TlsError> {
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
