//! SASL PLAIN on the client listener, over SASL_PLAINTEXT and SASL_SSL,
//! with the users of Kafka's `listener.name.<name>.plain.sasl.jaas.config`:
//! kcat, confluent-kafka and kafka-python authenticate, produce and read
//! back byte for byte with consumer groups and the admin API; a wrong
//! password, an unknown user, a mechanism not enabled and a request before
//! authenticating are each refused with one line in the broker's log and
//! counted, and the broker keeps serving.

mod common;

use std::process::Command;
use std::time::Duration;

use common::admin::Admin;
use common::certs::Certificates;
use common::{free_port, poll_until, run, run_python, Broker};

const DEADLINE: Duration = Duration::from_secs(60);
const SCRIPT_DEADLINE: Duration = Duration::from_secs(300);
const JAAS: &str = "org.apache.kafka.common.security.plain.PlainLoginModule required \
    username=\"admin\" password=\"admin-secret\" user_admin=\"admin-secret\" \
    user_alice=\"alice-secret\";";
const REFUSED_LINE: &str = "closing connection: SASL authentication failed";

/// A broker whose client listener is `protocol` (SASL_PLAINTEXT or
/// SASL_SSL) with PLAIN enabled, and its admin listener.
fn sasl_broker(protocol: &str, certificates: &Certificates) -> (Broker, Admin) {
    let port = free_port();
    let admin = Admin { port: free_port() };
    let name = protocol.to_ascii_lowercase();
    let mut settings = vec![
        format!("listeners={protocol}://127.0.0.1:{port}"),
        format!("listener.name.{name}.sasl.enabled.mechanisms=PLAIN"),
        format!("listener.name.{name}.plain.sasl.jaas.config={JAAS}"),
    ];
    if protocol == "SASL_SSL" {
        settings.push(format!(
            "ssl.keystore.location={}",
            certificates.text("server-keystore.pem")
        ));
    }
    let mut args = vec!["--admin-listen".to_string(), admin.address()];
    for setting in settings {
        args.push("--set".into());
        args.push(setting);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let dir = tempfile::tempdir().unwrap().keep();
    let broker = Broker::start_at(&dir.join("data"), &dir.join("strom.log"), port, &args);
    (broker, admin)
}

fn kcat(
    broker: &Broker,
    protocol: &str,
    certificates: &Certificates,
    extra: &[&str],
    user: &str,
    password: &str,
) -> std::process::Output {
    let mut command = Command::new("kcat");
    command
        .args(["-b", &broker.bootstrap()])
        .args(extra)
        .args(["-X", &format!("security.protocol={protocol}")])
        .args(["-X", "sasl.mechanisms=PLAIN"])
        .args(["-X", &format!("sasl.username={user}")])
        .args(["-X", &format!("sasl.password={password}")]);
    if protocol == "SASL_SSL" {
        command.args([
            "-X",
            &format!("ssl.ca.location={}", certificates.text("ca.pem")),
        ]);
    }
    run(&mut command, None, DEADLINE)
}

fn metric(admin: &Admin, name: &str) -> f64 {
    let (_, body) = admin.get("/metrics");
    body.lines()
        .filter(|l| {
            l.starts_with(name)
                && l[name.len()..].starts_with([' ', '{'])
                && l.contains("shard=\"all\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn refusals_logged(broker: &Broker) -> usize {
    broker.log().matches(REFUSED_LINE).count()
}

fn clients_authenticate_and_bad_credentials_are_refused(protocol: &str) {
    let certificates = Certificates::make();
    let (broker, admin) = sasl_broker(protocol, &certificates);
    let ca = certificates.text("ca.pem");
    let mut args = vec![
        broker.bootstrap(),
        protocol.to_string(),
        "alice".into(),
        "alice-secret".into(),
    ];
    if protocol == "SASL_SSL" {
        args.push(ca.clone());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run_python("sasl_check.py", &args, SCRIPT_DEADLINE);
    for wanted in [
        "confluent-kafka: ok 100",
        "kafka-python: ok 100",
        "confluent-kafka refused:",
        "kafka-python refused:",
    ] {
        assert!(
            out.contains(wanted),
            "{wanted:?} not in {out}\n{}",
            broker.log()
        );
    }

    // kcat: produce and read back as admin.
    let lines = "one\ntwo\nthree\n";
    let produced = {
        let mut command = Command::new("kcat");
        command
            .args([
                "-b",
                &broker.bootstrap(),
                "-P",
                "-t",
                "sasl-kcat",
                "-p",
                "0",
            ])
            .args([
                "-X",
                &format!("security.protocol={protocol}"),
                "-X",
                "sasl.mechanisms=PLAIN",
            ])
            .args([
                "-X",
                "sasl.username=admin",
                "-X",
                "sasl.password=admin-secret",
            ]);
        if protocol == "SASL_SSL" {
            command.args(["-X", &format!("ssl.ca.location={ca}")]);
        }
        run(&mut command, Some(lines.as_bytes()), DEADLINE)
    };
    assert!(
        produced.status.success(),
        "kcat -P: {}",
        String::from_utf8_lossy(&produced.stderr)
    );
    let consumed = kcat(
        &broker,
        protocol,
        &certificates,
        &["-C", "-t", "sasl-kcat", "-p", "0", "-o", "beginning", "-e"],
        "admin",
        "admin-secret",
    );
    assert_eq!(
        String::from_utf8_lossy(&consumed.stdout),
        lines,
        "{}",
        String::from_utf8_lossy(&consumed.stderr)
    );

    // Refusals: each closes its connection, is logged once and counted.
    let before = refusals_logged(&broker);
    let failed_before = metric(&admin, "strom_authentications_failed_total");
    for (user, password) in [("alice", "wrong"), ("nobody", "alice-secret")] {
        let refused = kcat(
            &broker,
            protocol,
            &certificates,
            &["-L", "-m", "5"],
            user,
            password,
        );
        assert!(!refused.status.success(), "{user}/{password} was served");
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(
            stderr.contains("Authentication failed")
                || stderr.contains("SASL authentication error"),
            "{stderr}"
        );
    }
    // A mechanism not enabled.
    let mut scram = Command::new("kcat");
    scram
        .args(["-b", &broker.bootstrap(), "-L", "-m", "5"])
        .args([
            "-X",
            &format!("security.protocol={protocol}"),
            "-X",
            "sasl.mechanisms=SCRAM-SHA-256",
        ])
        .args([
            "-X",
            "sasl.username=alice",
            "-X",
            "sasl.password=alice-secret",
        ]);
    if protocol == "SASL_SSL" {
        scram.args(["-X", &format!("ssl.ca.location={ca}")]);
    }
    assert!(
        !run(&mut scram, None, DEADLINE).status.success(),
        "SCRAM was served"
    );
    let logged = poll_until(DEADLINE, || {
        (refusals_logged(&broker) >= before + 3).then_some(())
    });
    assert!(logged.is_some(), "not 3 refusals logged:\n{}", broker.log());
    assert!(metric(&admin, "strom_authentications_failed_total") >= failed_before + 3.0);
    assert!(metric(&admin, "strom_authentications_total") >= 3.0);
    // Still serving.
    let listed = kcat(
        &broker,
        protocol,
        &certificates,
        &["-L", "-m", "5"],
        "alice",
        "alice-secret",
    );
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
}

#[test]
fn sasl_plaintext_clients_authenticate_with_plain_and_bad_credentials_are_refused() {
    clients_authenticate_and_bad_credentials_are_refused("SASL_PLAINTEXT");
}

#[test]
fn sasl_ssl_clients_authenticate_with_plain_over_tls() {
    clients_authenticate_and_bad_credentials_are_refused("SASL_SSL");
}

/// A client that skips authentication (a plaintext client) is closed at
/// its first request other than ApiVersions.
#[test]
fn a_request_before_authenticating_closes_the_connection() {
    let certificates = Certificates::make();
    let (broker, _admin) = sasl_broker("SASL_PLAINTEXT", &certificates);
    let before = refusals_logged(&broker);
    let plain = run(
        Command::new("kcat").args(["-b", &broker.bootstrap(), "-L", "-m", "5"]),
        None,
        DEADLINE,
    );
    assert!(
        !plain.status.success(),
        "a client without SASL got metadata"
    );
    let logged = poll_until(DEADLINE, || {
        let log = broker.log();
        (refusals_logged(&broker) > before && log.contains("before SASL authentication"))
            .then_some(())
    });
    assert!(logged.is_some(), "{}", broker.log());

    // A frame larger than Kafka's sasl.server.max.receive.size (512 KiB)
    // before authenticating is refused from its length alone.
    use std::io::{Read, Write};
    let mut raw = std::net::TcpStream::connect(broker.address()).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut header = (4u32 << 20).to_be_bytes().to_vec();
    header.extend_from_slice(&0i16.to_be_bytes()); // Produce
    header.extend_from_slice(&9i16.to_be_bytes());
    raw.write_all(&header).unwrap();
    let mut byte = [0u8; 1];
    // Closed by the broker: end of stream or a reset, not a read that
    // timed out waiting.
    let read = raw.read(&mut byte);
    let closed = match &read {
        Ok(0) => true,
        Err(error) => !matches!(
            error.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
        Ok(_) => false,
    };
    assert!(
        closed,
        "a 4 MiB frame before authenticating was taken: {read:?}"
    );
    let logged = poll_until(DEADLINE, || {
        broker.log().contains("closing connection").then_some(())
    });
    assert!(logged.is_some(), "{}", broker.log());
}

/// `strom` with `--command-config` holding `properties`.
fn strom_with(
    broker: &Broker,
    dir: &std::path::Path,
    properties: &str,
    args: &[&str],
    stdin: Option<&[u8]>,
) -> std::process::Output {
    let config = dir.join(format!("client-{}.properties", properties.len()));
    std::fs::write(&config, properties).unwrap();
    let config = config.to_string_lossy().into_owned();
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--command-config", &config]);
    common::strom(broker, &all, stdin)
}

#[test]
fn the_tools_authenticate_with_a_command_config() {
    let certificates = Certificates::make();
    for protocol in ["SASL_PLAINTEXT", "SASL_SSL"] {
        let (broker, _admin) = sasl_broker(protocol, &certificates);
        let dir = tempfile::tempdir().unwrap();
        // Java's JAAS line over SASL_PLAINTEXT; librdkafka's names over
        // SASL_SSL.
        let properties = if protocol == "SASL_PLAINTEXT" {
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n\
             sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \
             username=\"alice\" password=\"alice-secret\";\n"
                .to_string()
        } else {
            format!(
                "security.protocol=SASL_SSL\nsasl.mechanisms=PLAIN\nsasl.username=alice\n\
                 sasl.password=alice-secret\nssl.ca.location={}\n",
                certificates.text("ca.pem")
            )
        };
        let ok = |args: &[&str], stdin: Option<&[u8]>| {
            let output = strom_with(&broker, dir.path(), &properties, args, stdin);
            assert!(
                output.status.success(),
                "{protocol}: strom {args:?}: {}\n{}",
                String::from_utf8_lossy(&output.stderr),
                broker.log()
            );
            String::from_utf8(output.stdout).unwrap()
        };
        ok(
            &["topic", "create", "sasl-tools", "--partitions", "1"],
            None,
        );
        let lines: String = (0..30).map(|i| format!("sasl-line-{i}\n")).collect();
        ok(&["produce", "sasl-tools"], Some(lines.as_bytes()));
        let read = ok(
            &[
                "consume",
                "sasl-tools",
                "--from-beginning",
                "--max-messages",
                "30",
            ],
            None,
        );
        assert_eq!(read, lines, "{protocol}");
        let wrong = properties.replace("alice-secret", "wrong");
        let refused = strom_with(&broker, dir.path(), &wrong, &["topic", "list"], None);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(
            !refused.status.success(),
            "{protocol}: a wrong password was served"
        );
        assert!(
            stderr.contains("SASL_AUTHENTICATION_FAILED"),
            "{protocol}: {stderr}"
        );
    }
}
