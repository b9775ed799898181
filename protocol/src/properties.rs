//! Kafka's client properties (`key=value` lines, as `--command-config`
//! of Kafka's tools takes them): the security they ask for, shared by
//! `strom`'s tools and `strom-loadgen`.

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context};

use crate::client::SaslLogin;
use crate::tls::{client_config, TlsSettings, SSL_KEYS};

/// What a properties file asks for: TLS (SSL, SASL_SSL) and a SASL login
/// (SASL_PLAINTEXT, SASL_SSL).
pub type Security = (Option<Arc<rustls::ClientConfig>>, Option<SaslLogin>);

/// The security the properties file at `path` asks for (none for
/// PLAINTEXT), for `program` (which names itself on stderr) and `users`
/// (how what it says names the programs reading it). A key no client
/// setting here uses is named on stderr; a bad value or something not
/// served is an error naming the file and the key.
pub fn security(path: &Path, program: &str, users: &str) -> anyhow::Result<Security> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read --command-config {}", path.display()))?;
    let file = path.display();
    let mut protocol = "PLAINTEXT".to_string();
    let mut mechanism = "GSSAPI".to_string();
    let (mut user, mut password) = (None, None);
    let mut settings = TlsSettings::default();
    let read = |key: &str, name: &str| {
        std::fs::read_to_string(name)
            .with_context(|| format!("--command-config {file}: {key}: cannot read {name}"))
    };
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let Some((key, value)) = line.split_once(['=', ':']) else {
            bail!(
                "--command-config {file} line {}: expected key=value, got {line:?}",
                number + 1
            );
        };
        let (key, value) = (key.trim(), value.trim());
        match key {
            "security.protocol" => protocol = value.to_ascii_uppercase(),
            "sasl.mechanism" | "sasl.mechanisms" => mechanism = value.to_ascii_uppercase(),
            "sasl.username" => user = Some(value.to_string()),
            "sasl.password" => password = Some(value.to_string()),
            "sasl.jaas.config" => {
                let (u, p) = crate::jaas::client_login(value).map_err(|why| {
                    anyhow::anyhow!("--command-config {file}: sasl.jaas.config: {why}")
                })?;
                (user, password) = (Some(u), Some(p));
            }
            "ssl.ca.location" => settings
                .values
                .push(("ssl.truststore.location".into(), value.into())),
            "ssl.certificate.location" => settings
                .values
                .push(("ssl.keystore.certificate.chain".into(), read(key, value)?)),
            "ssl.key.location" => settings
                .values
                .push(("ssl.keystore.key".into(), read(key, value)?)),
            "ssl.endpoint.identification.algorithm" => {
                settings.values.push((key.into(), value.into()))
            }
            _ if SSL_KEYS.contains(&key) => settings.values.push((key.into(), value.into())),
            _ => eprintln!("{program}: --command-config {file}: {key} is not used by {users}"),
        }
    }
    let tls = || {
        client_config(&settings)
            .map(Some)
            .map_err(|(key, why)| anyhow::anyhow!("--command-config {file}: {key}: {why}"))
    };
    let sasl = || -> anyhow::Result<Option<SaslLogin>> {
        if mechanism != "PLAIN" && crate::scram::Mechanism::from_name(&mechanism).is_none() {
            bail!(
                "--command-config {file}: sasl.mechanism {mechanism} is not served by {users} \
                 (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)"
            );
        }
        match (user.clone(), password.clone()) {
            (Some(user), Some(password)) => Ok(Some(SaslLogin {
                mechanism: mechanism.clone(),
                user,
                password,
            })),
            _ => bail!(
                "--command-config {file}: SASL {mechanism} needs sasl.jaas.config \
                 (PlainLoginModule or ScramLoginModule required username=\"...\" \
                 password=\"...\";) or sasl.username and sasl.password"
            ),
        }
    };
    match protocol.as_str() {
        "PLAINTEXT" => Ok((None, None)),
        "SSL" => Ok((tls()?, None)),
        "SASL_PLAINTEXT" => Ok((None, sasl()?)),
        "SASL_SSL" => Ok((tls()?, sasl()?)),
        other => bail!(
            "--command-config {file}: security.protocol {other} is not one of PLAINTEXT, SSL, \
             SASL_PLAINTEXT, SASL_SSL"
        ),
    }
}
