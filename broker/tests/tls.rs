//! TLS on the client listener (security protocol SSL), with certificates
//! the test makes with `openssl`: a test authority, the broker's
//! certificate for 127.0.0.1 signed by it, a client certificate signed by
//! it, and one signed by an authority the broker does not trust.
//!
//! - kcat, confluent-kafka and kafka-python produce and read back byte for
//!   byte over TLS, with a consumer group and the admin API.
//! - With `ssl.client.auth=required` a client showing a trusted
//!   certificate is served; one without a certificate, or with an
//!   untrusted one, fails its handshake.
//! - A plaintext client on the SSL listener fails, with one line in the
//!   broker's log, and the broker keeps serving.
//! - Connections that never finish their handshake are closed within
//!   `strom.request.receive.timeout.ms` and cost the broker little memory.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::admin::Admin;
use common::{free_port, poll_until, run, run_python, Broker};
use test_support::certs::Certificates;

const DEADLINE: Duration = Duration::from_secs(60);
const SCRIPT_DEADLINE: Duration = Duration::from_secs(300);
const HANDSHAKE_FAILED: &str = "TLS handshake failed";

/// A broker whose client listener is SSL, with `extra` settings.
fn tls_broker(certificates: &Certificates, extra: &[String]) -> Broker {
    tls_broker_with(certificates, extra, Vec::new())
}

/// [`tls_broker`] with more command line arguments.
fn tls_broker_with(certificates: &Certificates, extra: &[String], mut args: Vec<String>) -> Broker {
    let port = free_port();
    args.extend([
        "--set".into(),
        format!("listeners=SSL://127.0.0.1:{port}"),
        "--set".into(),
        format!(
            "ssl.keystore.location={}",
            certificates.text("server-keystore.pem")
        ),
    ]);
    for setting in extra {
        args.push("--set".into());
        args.push(setting.clone());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let dir = tempfile::tempdir().unwrap().keep();
    Broker::start_at(&dir.join("data"), &dir.join("strom.log"), port, &args)
}

/// kcat over TLS: produces `lines` to `topic` and reads them back.
fn kcat_round_trip(broker: &Broker, certificates: &Certificates, topic: &str, lines: &[String]) {
    let tls = ["-X", "security.protocol=ssl", "-X"];
    let ca = format!("ssl.ca.location={}", certificates.text("ca.pem"));
    let mut producer = Command::new("kcat")
        .args(["-b", &broker.bootstrap(), "-P", "-t", topic, "-p", "0"])
        .args(tls)
        .arg(&ca)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kcat runs");
    {
        let mut stdin = producer.stdin.take().unwrap();
        for line in lines {
            writeln!(stdin, "{line}").unwrap();
        }
    }
    let produced = producer.wait_with_output().unwrap();
    assert!(
        produced.status.success(),
        "kcat -P over TLS: {}\n{}",
        String::from_utf8_lossy(&produced.stderr),
        broker.log()
    );
    let consumed = run(
        Command::new("kcat")
            .args([
                "-b",
                &broker.bootstrap(),
                "-C",
                "-t",
                topic,
                "-p",
                "0",
                "-o",
                "beginning",
                "-e",
            ])
            .args(tls)
            .arg(&ca),
        None,
        DEADLINE,
    );
    let read: Vec<String> = String::from_utf8_lossy(&consumed.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(
        read,
        lines,
        "kcat read back over TLS: {}",
        String::from_utf8_lossy(&consumed.stderr)
    );
}

/// Lines of the broker's log saying a TLS handshake failed.
fn failed_handshakes(broker: &Broker) -> usize {
    broker.log().matches(HANDSHAKE_FAILED).count()
}

/// Waits until the broker logged `more` failed handshakes beyond `before`.
fn wait_for_failures(broker: &Broker, before: usize, more: usize) {
    let logged = poll_until(DEADLINE, || {
        (failed_handshakes(broker) >= before + more).then_some(())
    });
    assert!(
        logged.is_some(),
        "not {more} failed handshakes logged:\n{}",
        broker.log()
    );
}

#[test]
fn clients_produce_and_consume_over_tls_and_a_plaintext_client_is_refused() {
    let certificates = Certificates::make();
    let broker = tls_broker(&certificates, &[]);
    assert!(
        broker.log().contains("(SSL, advertised 127.0.0.1:"),
        "the start line names the listener's protocol:\n{}",
        broker.log()
    );
    let lines: Vec<String> = (0..100)
        .map(|i| format!("tls-record-{i}-{}", "x".repeat(i)))
        .collect();
    kcat_round_trip(&broker, &certificates, "tls-kcat", &lines);
    let out = run_python(
        "tls_check.py",
        &[&broker.bootstrap(), &certificates.text("ca.pem")],
        SCRIPT_DEADLINE,
    );
    assert!(out.contains("confluent-kafka: ok 200"), "{out}");
    assert!(out.contains("kafka-python: ok 200"), "{out}");

    // A plaintext client on the SSL listener: refused, one line logged.
    let before = failed_handshakes(&broker);
    let plain = run(
        Command::new("kcat").args(["-b", &broker.bootstrap(), "-L", "-m", "5"]),
        None,
        DEADLINE,
    );
    assert!(
        !plain.status.success(),
        "a plaintext kcat got metadata from the SSL listener"
    );
    wait_for_failures(&broker, before, 1);
    // The broker keeps serving TLS clients.
    kcat_round_trip(&broker, &certificates, "tls-after-plaintext", &lines[..10]);
}

#[test]
fn with_client_auth_required_only_a_trusted_certificate_is_served() {
    let certificates = Certificates::make();
    let broker = tls_broker(
        &certificates,
        &[
            "ssl.client.auth=required".to_string(),
            format!("ssl.truststore.location={}", certificates.text("ca.pem")),
        ],
    );
    let out = run_python(
        "tls_check.py",
        &[
            &broker.bootstrap(),
            &certificates.text("ca.pem"),
            &certificates.text("alice.pem"),
            &certificates.text("alice.key"),
        ],
        SCRIPT_DEADLINE,
    );
    assert!(
        out.contains("confluent-kafka: ok 200") && out.contains("kafka-python: ok 200"),
        "{out}"
    );

    let metadata = |extra: &[String]| {
        let mut command = Command::new("kcat");
        command
            .args(["-b", &broker.bootstrap(), "-L", "-m", "5"])
            .args(["-X", "security.protocol=ssl", "-X"])
            .arg(format!("ssl.ca.location={}", certificates.text("ca.pem")));
        for setting in extra {
            command.args(["-X", setting]);
        }
        run(&mut command, None, DEADLINE)
    };
    let before = failed_handshakes(&broker);
    // No certificate, then one from an authority the broker does not trust.
    assert!(
        !metadata(&[]).status.success(),
        "a client without a certificate was served"
    );
    let stranger = [
        format!(
            "ssl.certificate.location={}",
            certificates.text("mallory.pem")
        ),
        format!("ssl.key.location={}", certificates.text("mallory.key")),
    ];
    assert!(
        !metadata(&stranger).status.success(),
        "an untrusted certificate was served"
    );
    wait_for_failures(&broker, before, 2);
    let trusted = [
        format!(
            "ssl.certificate.location={}",
            certificates.text("alice.pem")
        ),
        format!("ssl.key.location={}", certificates.text("alice.key")),
    ];
    let served = metadata(&trusted);
    assert!(
        served.status.success(),
        "alice's certificate: {}",
        String::from_utf8_lossy(&served.stderr)
    );
}

#[test]
fn connections_that_never_finish_their_handshake_are_closed_and_cost_little() {
    const SILENT: usize = 1_000;
    let certificates = Certificates::make();
    let admin = Admin { port: free_port() };
    let broker = tls_broker_with(
        &certificates,
        &["strom.request.receive.timeout.ms=3000".to_string()],
        vec!["--admin-listen".into(), admin.address()],
    );
    let rss_before = rss_kib(broker.pid());
    let silent: Vec<TcpStream> = (0..SILENT)
        .map(|_| TcpStream::connect(broker.address()).expect("connect"))
        .collect();
    let closed = poll_until(DEADLINE, || {
        let (_, body) = admin.get("/metrics");
        let failed = metric(&body, "strom_tls_handshakes_failed_total");
        (failed >= SILENT as f64).then_some(())
    });
    assert!(
        closed.is_some(),
        "{SILENT} silent connections not closed:\n{}",
        admin.get("/metrics").1
    );
    let grown_kib = rss_kib(broker.pid()).saturating_sub(rss_before);
    assert!(
        grown_kib < 64 * 1024,
        "{SILENT} unfinished handshakes grew the broker by {grown_kib} KiB"
    );
    drop(silent);
    // Served as before.
    kcat_round_trip(
        &broker,
        &certificates,
        "tls-after-silence",
        &["after".to_string()],
    );
    // Each timeout is one line of the log.
    let logged = poll_until(DEADLINE, || {
        let lines = broker
            .log()
            .matches("TLS handshake not finished in time")
            .count();
        (lines >= SILENT).then_some(())
    });
    assert!(logged.is_some(), "not {SILENT} timeouts logged");
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// A metric's value over the broker's cores (its `shard="all"` sample) in
/// a /metrics body.
fn metric(body: &str, name: &str) -> f64 {
    body.lines()
        .filter(|l| l.starts_with(&format!("{name}{{shard=\"all\"}}")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Runs `strom` with `--command-config` written from `properties`.
fn strom_tls(
    broker: &Broker,
    certificates: &Certificates,
    properties: &str,
    args: &[&str],
    stdin: Option<&[u8]>,
) -> std::process::Output {
    let config = certificates.path(&format!("client-{}.properties", properties.len()));
    std::fs::write(&config, properties).unwrap();
    let mut all: Vec<&str> = args.to_vec();
    let config_text = config.to_string_lossy().into_owned();
    all.extend(["--command-config", &config_text]);
    common::strom(broker, &all, stdin)
}

#[test]
fn the_tools_speak_tls_with_a_command_config() {
    let certificates = Certificates::make();
    let broker = tls_broker(
        &certificates,
        &[
            "ssl.client.auth=required".to_string(),
            format!("ssl.truststore.location={}", certificates.text("ca.pem")),
        ],
    );
    // Mutual TLS, librdkafka's names for the files.
    let properties = format!(
        "# the tools' client settings\nsecurity.protocol=SSL\nssl.ca.location={}\n\
         ssl.certificate.location={}\nssl.key.location={}\n",
        certificates.text("ca.pem"),
        certificates.text("alice.pem"),
        certificates.text("alice.key"),
    );
    let ok = |args: &[&str], stdin: Option<&[u8]>| {
        let output = strom_tls(&broker, &certificates, &properties, args, stdin);
        common::succeeded(output, &format!("strom {args:?}"), &broker)
    };
    ok(&["topic", "create", "tls-tools", "--partitions", "2"], None);
    assert!(ok(&["topic", "list"], None).contains("tls-tools"));
    let lines: String = (0..50)
        .map(|i| format!("line-{i}-{}\n", "y".repeat(i)))
        .collect();
    ok(
        &["produce", "tls-tools", "--partition", "1"],
        Some(lines.as_bytes()),
    );
    let read = ok(
        &[
            "consume",
            "tls-tools",
            "--partition",
            "1",
            "--from-beginning",
            "--max-messages",
            "50",
        ],
        None,
    );
    assert_eq!(read, lines);

    // What cannot work is said before any request, naming the setting.
    let refused = |properties: &str, wanted: &str| {
        let output = strom_tls(&broker, &certificates, properties, &["topic", "list"], None);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{properties}: served");
        assert!(
            stderr.contains(wanted),
            "{properties}: {wanted:?} not in {stderr}"
        );
    };
    refused(
        &format!(
            "security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\nssl.truststore.location={}\n",
            certificates.text("ca.pem")
        ),
        "sasl.mechanism GSSAPI is not served by strom's tools",
    );
    refused(
        "security.protocol=SASL_SCRAM\n",
        "security.protocol SASL_SCRAM is not one of",
    );
    refused("security.protocol=SSL\n", "ssl.truststore.location");
    // Without a client certificate the broker refuses the handshake.
    refused(
        &format!(
            "security.protocol=SSL\nssl.truststore.location={}\n",
            certificates.text("ca.pem")
        ),
        "CertificateRequired",
    );
}
