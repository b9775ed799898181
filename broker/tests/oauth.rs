//! SASL/OAUTHBEARER (confluent-kafka, kafka-python, aiokafka): tokens signed
//! by a key of a JWKS file the test writes
//! (its keys made with openssl, its tokens signed here) are taken, and
//! their subject is the principal the ACLs decide for; expired tokens,
//! another audience or issuer, and another key's signature are refused
//! with one line each in the log while the broker keeps serving. Without a
//! JWKS file, Kafka's unsecured validator takes librdkafka's unsigned
//! development tokens (kcat's `sasl.oauthbearer.config`).

mod common;

use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use common::{free_port, run, run_python, Broker};

const DEADLINE: Duration = Duration::from_secs(60);

fn openssl(dir: &std::path::Path, args: &[&str]) -> String {
    let output = run(
        Command::new("openssl").args(args).current_dir(dir),
        None,
        DEADLINE,
    );
    assert!(output.status.success(), "openssl {args:?}: {output:?}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A JWT signed with the RSA key in `key_pem`, naming key `kid`.
fn token(key_pem: &[u8], kid: &str, claims: serde_json::Value) -> String {
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
    header.kid = Some(kid.to_string());
    let key = jsonwebtoken::EncodingKey::from_rsa_pem(key_pem).unwrap();
    jsonwebtoken::encode(&header, &claims, &key).unwrap()
}

fn start(dir: &std::path::Path, settings: &[String]) -> Broker {
    let port = free_port();
    let mut args = vec!["--admin-listen".to_string(), "off".to_string()];
    args.extend([
        "--set".to_string(),
        format!("listeners=SASL_PLAINTEXT://127.0.0.1:{port}"),
    ]);
    args.extend([
        "--set".to_string(),
        "sasl.enabled.mechanisms=OAUTHBEARER".to_string(),
    ]);
    for setting in settings {
        args.extend(["--set".to_string(), setting.clone()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Broker::start_at(&dir.join("data"), &dir.join("strom.log"), port, &args)
}

#[test]
fn signed_tokens_authenticate_and_their_subject_is_the_principal() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    openssl(dir, &["genrsa", "-out", "idp.key", "2048"]);
    openssl(dir, &["genrsa", "-out", "other.key", "2048"]);
    // The key's public part as a JWK: its modulus, base64url.
    let modulus = openssl(dir, &["rsa", "-in", "idp.key", "-noout", "-modulus"]);
    let hex = modulus.trim().strip_prefix("Modulus=").unwrap();
    let n: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    let n = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(n);
    let jwks = serde_json::json!({"keys": [{
        "kty": "RSA", "kid": "idp-1", "alg": "RS256", "use": "sig", "n": n, "e": "AQAB"
    }]});
    std::fs::write(dir.join("jwks.json"), jwks.to_string()).unwrap();
    let broker = start(
        dir,
        &[
            format!(
                "sasl.oauthbearer.jwks.endpoint.url=file://{}",
                dir.join("jwks.json").display()
            ),
            "sasl.oauthbearer.expected.audience=strom".to_string(),
            "sasl.oauthbearer.expected.issuer=https://idp.test".to_string(),
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer"
                .to_string(),
            "super.users=User:admin".to_string(),
        ],
    );
    let key = std::fs::read(dir.join("idp.key")).unwrap();
    let other = std::fs::read(dir.join("other.key")).unwrap();
    let claims = |sub: &str, exp: u64, aud: &str, iss: &str| serde_json::json!({"sub": sub, "exp": exp, "iat": now_s(), "aud": aud, "iss": iss});
    let later = now_s() + 600;
    let good = |sub: &str| {
        token(
            &key,
            "idp-1",
            claims(sub, later, "strom", "https://idp.test"),
        )
    };
    let bad = [
        token(
            &key,
            "idp-1",
            claims("alice", now_s() - 3600, "strom", "https://idp.test"),
        ),
        token(
            &key,
            "idp-1",
            claims("alice", later, "elsewhere", "https://idp.test"),
        ),
        token(
            &key,
            "idp-1",
            claims("alice", later, "strom", "https://other.test"),
        ),
        token(
            &other,
            "idp-1",
            claims("alice", later, "strom", "https://idp.test"),
        ),
    ];
    let mut args = vec![
        broker.bootstrap(),
        good("admin"),
        good("alice"),
        good("bob"),
    ];
    args.extend(bad.iter().cloned());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run_python("oauth_check.py", &args, Duration::from_secs(300));
    assert!(out.contains("ok 120 refused 4"), "{out}\n{}", broker.log());
    let log = broker.log();
    for reason in [
        "ExpiredSignature",
        "InvalidAudience",
        "InvalidIssuer",
        "InvalidSignature",
    ] {
        assert!(
            log.lines()
                .any(|l| l.contains("SASL authentication failed") && l.contains(reason)),
            "{reason} not logged:\n{log}"
        );
    }
    assert!(!log.contains(&good("alice")), "a token is never logged");
}

#[test]
fn the_unsecured_validator_takes_librdkafkas_development_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path(), &[]);
    assert!(
        broker.log().contains("OAUTHBEARER takes unsigned tokens"),
        "the start warns:\n{}",
        broker.log()
    );
    let kcat = |principal: &str, args: &[&str], stdin: Option<&[u8]>| {
        let mut command = Command::new("kcat");
        command
            .args(["-b", &broker.bootstrap()])
            .args(args)
            .args(["-X", "security.protocol=SASL_PLAINTEXT"])
            .args(["-X", "sasl.mechanisms=OAUTHBEARER"])
            .args(["-X", "enable.sasl.oauthbearer.unsecure.jwt=true"])
            .args([
                "-X",
                &format!("sasl.oauthbearer.config=principal={principal}"),
            ]);
        run(&mut command, stdin, DEADLINE)
    };
    let written = kcat(
        "alice",
        &["-P", "-t", "dev", "-p", "0"],
        Some(b"unsigned\ntokens\n"),
    );
    assert!(written.status.success(), "{written:?}\n{}", broker.log());
    let read = kcat(
        "alice",
        &["-C", "-t", "dev", "-p", "0", "-o", "beginning", "-e"],
        None,
    );
    assert!(read.status.success(), "{read:?}");
    assert_eq!(read.stdout, b"unsigned\ntokens\n");
}
