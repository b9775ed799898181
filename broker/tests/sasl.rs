//! SASL on the client listener, over SASL_PLAINTEXT and SASL_SSL: PLAIN
//! with the users of Kafka's `listener.name.<name>.plain.sasl.jaas.config`,
//! and SCRAM-SHA-256 and SCRAM-SHA-512 with credentials set through
//! `strom user scram` and confluent-kafka's admin API (kept in the
//! metadata, across a restart). kcat, confluent-kafka, kafka-python and
//! the tools authenticate, produce and read back byte for byte with
//! consumer groups and the admin API; a wrong password, an unknown user, a
//! deleted credential, a mechanism not enabled and a request before
//! authenticating are each refused with one line in the broker's log and
//! counted, and the broker keeps serving.

mod common;

use std::process::Command;
use std::time::Duration;

use common::admin::Admin;
use common::{free_port, poll_until, run, run_python, Broker};
use test_support::certs::Certificates;

const DEADLINE: Duration = Duration::from_secs(60);
const SCRIPT_DEADLINE: Duration = Duration::from_secs(300);
const JAAS: &str = "org.apache.kafka.common.security.plain.PlainLoginModule required \
    username=\"admin\" password=\"admin-secret\" user_admin=\"admin-secret\" \
    user_alice=\"alice-secret\";";
const REFUSED_LINE: &str = "closing connection: SASL authentication failed";

const ALL_MECHANISMS: &str = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512";

/// A broker whose client listener is `protocol` (SASL_PLAINTEXT or
/// SASL_SSL) with PLAIN enabled, and its admin listener.
fn sasl_broker(protocol: &str, certificates: &Certificates) -> (Broker, Admin) {
    sasl_broker_with(protocol, "PLAIN", certificates)
}

/// The same with `mechanisms` enabled.
fn sasl_broker_with(
    protocol: &str,
    mechanisms: &str,
    certificates: &Certificates,
) -> (Broker, Admin) {
    let port = free_port();
    let admin = Admin { port: free_port() };
    let name = protocol.to_ascii_lowercase();
    let mut settings = vec![
        format!("listeners={protocol}://127.0.0.1:{port}"),
        format!("listener.name.{name}.sasl.enabled.mechanisms={mechanisms}"),
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
    kcat_as(
        broker,
        protocol,
        certificates,
        ("PLAIN", user, password),
        extra,
        None,
    )
}

/// kcat authenticating with `(mechanism, user, password)`.
fn kcat_as(
    broker: &Broker,
    protocol: &str,
    certificates: &Certificates,
    (mechanism, user, password): (&str, &str, &str),
    extra: &[&str],
    stdin: Option<&[u8]>,
) -> std::process::Output {
    let mut command = Command::new("kcat");
    command
        .args(["-b", &broker.bootstrap()])
        .args(extra)
        .args(["-X", &format!("security.protocol={protocol}")])
        .args(["-X", &format!("sasl.mechanisms={mechanism}")])
        .args(["-X", &format!("sasl.username={user}")])
        .args(["-X", &format!("sasl.password={password}")]);
    if protocol == "SASL_SSL" {
        command.args([
            "-X",
            &format!("ssl.ca.location={}", certificates.text("ca.pem")),
        ]);
    }
    run(&mut command, stdin, DEADLINE)
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

/// confluent-kafka and kafka-python authenticate as `login`, round-trip
/// records, and are refused with a wrong password (sasl_check.py).
fn python_clients_authenticate(
    broker: &Broker,
    protocol: &str,
    certificates: &Certificates,
    (mechanism, user, password): (&str, &str, &str),
) {
    let mut args = vec![
        broker.bootstrap(),
        protocol.to_string(),
        mechanism.to_string(),
        user.to_string(),
        password.to_string(),
    ];
    if protocol == "SASL_SSL" {
        args.push(certificates.text("ca.pem"));
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
            "{mechanism}: {wanted:?} not in {out}\n{}",
            broker.log()
        );
    }
}

fn clients_authenticate_and_bad_credentials_are_refused(protocol: &str) {
    let certificates = Certificates::make();
    let (broker, admin) = sasl_broker(protocol, &certificates);
    let ca = certificates.text("ca.pem");
    python_clients_authenticate(
        &broker,
        protocol,
        &certificates,
        ("PLAIN", "alice", "alice-secret"),
    );

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
            common::succeeded(output, &format!("{protocol}: strom {args:?}"), &broker)
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

/// The admin's client properties: PLAIN over `protocol`.
fn admin_properties(protocol: &str, certificates: &Certificates) -> String {
    let mut properties = format!(
        "security.protocol={protocol}\nsasl.mechanism=PLAIN\nsasl.username=admin\n\
         sasl.password=admin-secret\n"
    );
    if protocol == "SASL_SSL" {
        properties.push_str(&format!(
            "ssl.ca.location={}\n",
            certificates.text("ca.pem")
        ));
    }
    properties
}

/// `strom ARGS` with `properties`, which must succeed: its stdout.
fn strom_ok(broker: &Broker, dir: &std::path::Path, properties: &str, args: &[&str]) -> String {
    let output = strom_with(broker, dir, properties, args, None);
    common::succeeded(output, &format!("strom {args:?}"), broker)
}

/// SCRAM users set with `strom user scram` and with confluent-kafka's
/// admin API authenticate kcat, confluent-kafka, kafka-python and the
/// tools; a wrong password and a deleted credential are refused; the
/// credentials are in the metadata, so they outlive a restart.
#[test]
fn scram_users_set_with_the_tools_authenticate_and_outlive_a_restart() {
    let protocol = "SASL_PLAINTEXT";
    let certificates = Certificates::make();
    let (mut broker, admin) = sasl_broker_with(protocol, ALL_MECHANISMS, &certificates);
    let dir = tempfile::tempdir().unwrap();
    let admin_config = admin_properties(protocol, &certificates);
    let password_file = dir.path().join("alice.pw");
    std::fs::write(&password_file, "alice-scram\n").unwrap();
    strom_ok(
        &broker,
        dir.path(),
        &admin_config,
        &[
            "user",
            "scram",
            "set",
            "--user",
            "alice",
            "--mechanism",
            "SCRAM-SHA-512",
            "--password-file",
            &password_file.to_string_lossy(),
        ],
    );
    strom_ok(
        &broker,
        dir.path(),
        &admin_config,
        &[
            "user",
            "scram",
            "set",
            "--user",
            "carol",
            "--mechanism",
            "SCRAM-SHA-256",
            "--password",
            "carol-scram",
            "--iterations",
            "8192",
        ],
    );
    let listed = strom_ok(
        &broker,
        dir.path(),
        &admin_config,
        &["user", "scram", "describe"],
    );
    assert_eq!(
        listed,
        "USER\tMECHANISM\tITERATIONS\nalice\tSCRAM-SHA-512\t4096\ncarol\tSCRAM-SHA-256\t8192\n"
    );
    let too_few = strom_with(
        &broker,
        dir.path(),
        &admin_config,
        &[
            "user",
            "scram",
            "set",
            "--user",
            "x",
            "--mechanism",
            "SCRAM-SHA-256",
            "--password",
            "p",
            "--iterations",
            "100",
        ],
        None,
    );
    assert!(!too_few.status.success(), "100 iterations were taken");

    // confluent-kafka and kafka-python as alice (SCRAM-SHA-512); the
    // admin API sets, describes and deletes dave's credentials.
    python_clients_authenticate(
        &broker,
        protocol,
        &certificates,
        ("SCRAM-SHA-512", "alice", "alice-scram"),
    );
    let out = run_python(
        "sasl_check.py",
        &[
            "scram-admin",
            &broker.bootstrap(),
            protocol,
            "PLAIN",
            "admin",
            "admin-secret",
        ],
        SCRIPT_DEADLINE,
    );
    for wanted in [
        "scram-admin: described [('SCRAM_SHA_256', 8192), ('SCRAM_SHA_512', 4096)]",
        "scram-admin: refused UNACCEPTABLE_CREDENTIAL",
        "scram-admin: refused RESOURCE_NOT_FOUND",
        "scram-admin: after delete [('SCRAM_SHA_512', 4096)]",
        "confluent-kafka: ok 100",
    ] {
        assert!(
            out.contains(wanted),
            "{wanted:?} not in {out}\n{}",
            broker.log()
        );
    }

    // kcat as carol (SCRAM-SHA-256), byte for byte.
    let carol = ("SCRAM-SHA-256", "carol", "carol-scram");
    let lines = "scram-one\nscram-two\nscram-three\n";
    let produced = kcat_as(
        &broker,
        protocol,
        &certificates,
        carol,
        &["-P", "-t", "scram-kcat", "-p", "0"],
        Some(lines.as_bytes()),
    );
    assert!(
        produced.status.success(),
        "{}",
        String::from_utf8_lossy(&produced.stderr)
    );
    let consumed = kcat_as(
        &broker,
        protocol,
        &certificates,
        carol,
        &["-C", "-t", "scram-kcat", "-p", "0", "-o", "beginning", "-e"],
        None,
    );
    assert_eq!(String::from_utf8_lossy(&consumed.stdout), lines);

    // The tools as carol, with Java's ScramLoginModule line.
    let carol_config = "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n\
        sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \
        username=\"carol\" password=\"carol-scram\";\n";
    let topics = strom_ok(&broker, dir.path(), carol_config, &["topic", "list"]);
    assert!(topics.contains("scram-kcat"), "{topics}");

    // Refusals: a wrong password, a mechanism the user has no credential
    // for, then carol's deleted credential.
    let before = refusals_logged(&broker);
    for login in [
        ("SCRAM-SHA-256", "carol", "wrong"),
        ("SCRAM-SHA-512", "carol", "carol-scram"),
    ] {
        let refused = kcat_as(
            &broker,
            protocol,
            &certificates,
            login,
            &["-L", "-m", "5"],
            None,
        );
        assert!(!refused.status.success(), "{login:?} was served");
    }
    strom_ok(
        &broker,
        dir.path(),
        &admin_config,
        &[
            "user",
            "scram",
            "delete",
            "--user",
            "carol",
            "--mechanism",
            "SCRAM-SHA-256",
        ],
    );
    let gone = strom_with(
        &broker,
        dir.path(),
        &admin_config,
        &["user", "scram", "describe", "--user", "carol"],
        None,
    );
    assert!(!gone.status.success());
    assert!(
        String::from_utf8_lossy(&gone.stderr).contains("RESOURCE_NOT_FOUND"),
        "{}",
        String::from_utf8_lossy(&gone.stderr)
    );
    let refused = kcat_as(
        &broker,
        protocol,
        &certificates,
        carol,
        &["-L", "-m", "5"],
        None,
    );
    assert!(!refused.status.success(), "a deleted credential was served");
    let logged = poll_until(DEADLINE, || {
        (refusals_logged(&broker) >= before + 3).then_some(())
    });
    assert!(logged.is_some(), "not 3 refusals logged:\n{}", broker.log());
    assert!(metric(&admin, "strom_authentications_failed_total") >= 3.0);

    // After a restart: the same credentials, from the metadata log.
    broker.restart();
    let listed = strom_ok(
        &broker,
        dir.path(),
        &admin_config,
        &["user", "scram", "describe"],
    );
    assert_eq!(
        listed,
        "USER\tMECHANISM\tITERATIONS\nalice\tSCRAM-SHA-512\t4096\ndave\tSCRAM-SHA-512\t4096\n"
    );
    let alice = kcat_as(
        &broker,
        protocol,
        &certificates,
        ("SCRAM-SHA-512", "alice", "alice-scram"),
        &["-C", "-t", "scram-kcat", "-p", "0", "-o", "beginning", "-e"],
        None,
    );
    assert_eq!(String::from_utf8_lossy(&alice.stdout), lines);
    let refused = kcat_as(
        &broker,
        protocol,
        &certificates,
        carol,
        &["-L", "-m", "5"],
        None,
    );
    assert!(!refused.status.success(), "a deleted credential came back");
}

/// SCRAM over TLS: the tools set a credential through the SASL_SSL
/// listener and confluent-kafka and kafka-python authenticate with it.
#[test]
fn sasl_ssl_clients_authenticate_with_scram() {
    let protocol = "SASL_SSL";
    let certificates = Certificates::make();
    let (broker, _admin) = sasl_broker_with(protocol, ALL_MECHANISMS, &certificates);
    let dir = tempfile::tempdir().unwrap();
    strom_ok(
        &broker,
        dir.path(),
        &admin_properties(protocol, &certificates),
        &[
            "user",
            "scram",
            "set",
            "--user",
            "bob",
            "--mechanism",
            "SCRAM-SHA-256",
            "--password",
            "bob-scram",
        ],
    );
    python_clients_authenticate(
        &broker,
        protocol,
        &certificates,
        ("SCRAM-SHA-256", "bob", "bob-scram"),
    );
}

/// 1,000 connections that handshake (SaslHandshake PLAIN) and never
/// authenticate cost the broker little memory, and a client that does
/// authenticate is served meanwhile; once they close, the broker is as
/// before.
#[test]
fn a_thousand_connections_that_never_authenticate_hold_little_memory() {
    use kafka_protocol::messages::{ApiKey, SaslHandshakeRequest, SaslHandshakeResponse};
    use kafka_protocol::protocol::StrBytes;

    const CONNECTIONS: usize = 1_000;
    /// What the stalled connections may add to the broker's resident
    /// memory, all together (64 KiB each at most).
    const GROWTH_MAX: u64 = 64 << 20;
    raise_open_files(CONNECTIONS as u64 + 256);
    let certificates = Certificates::make();
    let (broker, _admin) = sasl_broker("SASL_PLAINTEXT", &certificates);
    let pid = broker.pid();
    let before = common::hostile::rss_bytes(pid).unwrap();
    let mut stalled = Vec::with_capacity(CONNECTIONS);
    for i in 0..CONNECTIONS {
        let mut stream = common::raw::connect(&broker);
        let handshake =
            SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN"));
        let answer: SaslHandshakeResponse = common::raw::call(
            &mut stream,
            ApiKey::SaslHandshake,
            1,
            i as i32,
            "stalled",
            &handshake,
        );
        assert_eq!(answer.error_code, 0, "connection {i}");
        stalled.push(stream);
    }
    let during = common::hostile::rss_bytes(pid).unwrap();
    assert!(
        during.saturating_sub(before) < GROWTH_MAX,
        "{CONNECTIONS} stalled connections grew the broker from {before} to {during} bytes"
    );
    // A client that authenticates is served while they wait.
    let listed = kcat(
        &broker,
        "SASL_PLAINTEXT",
        &certificates,
        &["-L", "-m", "10"],
        "alice",
        "alice-secret",
    );
    assert!(listed.status.success(), "{}", stderr_of(&listed));
    drop(stalled);
    let listed = kcat(
        &broker,
        "SASL_PLAINTEXT",
        &certificates,
        &["-L", "-m", "10"],
        "alice",
        "alice-secret",
    );
    assert!(listed.status.success(), "{}", stderr_of(&listed));
    println!(
        "{CONNECTIONS} stalled connections: broker RSS {} MiB before, {} MiB during",
        before >> 20,
        during >> 20
    );
}

fn stderr_of(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Raises this process's open-file limit to `wanted` (or its hard limit).
fn raise_open_files(wanted: u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit with a valid pointer to our struct.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        if limit.rlim_cur < wanted {
            limit.rlim_cur = wanted.min(limit.rlim_max);
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
        }
    }
    assert!(
        limit.rlim_cur >= wanted,
        "the open-file limit {} is below the {wanted} this test needs",
        limit.rlim_cur
    );
}

/// KIP-368: with `connections.max.reauth.ms` a session lasts that long
/// (SaslAuthenticate tells the client); confluent-kafka authenticates
/// again on its connections and loses nothing, a client that does not is
/// closed at its next request, and authenticating again as another
/// principal closes the connection.
#[test]
fn sessions_expire_unless_the_client_authenticates_again() {
    use kafka_protocol::messages::{
        ApiKey, MetadataRequest, MetadataResponse, SaslAuthenticateRequest,
        SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
    };
    use kafka_protocol::protocol::StrBytes;
    use std::io::{Read, Write};

    const REAUTH_MS: u64 = 2_000;
    let port = free_port();
    let admin = Admin { port: free_port() };
    let settings = [
        format!("listeners=SASL_PLAINTEXT://127.0.0.1:{port}"),
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN".to_string(),
        format!("listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}"),
        format!("connections.max.reauth.ms={REAUTH_MS}"),
    ];
    let admin_address = admin.address();
    let mut args = vec!["--admin-listen", admin_address.as_str()];
    for setting in &settings {
        args.extend(["--set", setting.as_str()]);
    }
    let dir = tempfile::tempdir().unwrap().keep();
    let broker = Broker::start_at(&dir.join("data"), &dir.join("strom.log"), port, &args);

    let authenticate = |stream: &mut std::net::TcpStream, user: &str, password: &str, id: i32| {
        let handshake: SaslHandshakeResponse = common::raw::call(
            stream,
            ApiKey::SaslHandshake,
            1,
            id,
            "raw",
            &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")),
        );
        assert_eq!(handshake.error_code, 0);
        let message = format!("\0{user}\0{password}");
        let answer: SaslAuthenticateResponse = common::raw::call(
            stream,
            ApiKey::SaslAuthenticate,
            2,
            id + 1,
            "raw",
            &SaslAuthenticateRequest::default().with_auth_bytes(message.into_bytes().into()),
        );
        answer
    };
    let closed = |stream: &mut std::net::TcpStream| {
        let mut byte = [0u8; 1];
        match stream.read(&mut byte) {
            Ok(0) => true,
            Ok(_) => false,
            Err(error) => !matches!(
                error.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
        }
    };

    // The session's lifetime is told, and a request after it closes.
    let mut stream = common::raw::connect(&broker);
    let answer = authenticate(&mut stream, "alice", "alice-secret", 1);
    assert_eq!(answer.error_code, 0);
    assert_eq!(answer.session_lifetime_ms, REAUTH_MS as i64);
    let metadata: MetadataResponse = common::raw::call(
        &mut stream,
        ApiKey::Metadata,
        12,
        3,
        "raw",
        &MetadataRequest::default().with_topics(Some(Vec::new())),
    );
    assert!(!metadata.brokers.is_empty());
    std::thread::sleep(Duration::from_millis(REAUTH_MS + 500));
    stream
        .write_all(&common::raw::frame(
            ApiKey::Metadata,
            12,
            4,
            "raw",
            &MetadataRequest::default().with_topics(Some(Vec::new())),
        ))
        .unwrap();
    assert!(closed(&mut stream), "an expired session was served");
    let logged = poll_until(DEADLINE, || broker.log().contains("expired").then_some(()));
    assert!(logged.is_some(), "{}", broker.log());

    // Authenticating again before it expires keeps the connection; as
    // another principal closes it.
    let mut stream = common::raw::connect(&broker);
    assert_eq!(
        authenticate(&mut stream, "alice", "alice-secret", 1).error_code,
        0
    );
    let again = authenticate(&mut stream, "alice", "alice-secret", 3);
    assert_eq!(again.error_code, 0);
    assert_eq!(again.session_lifetime_ms, REAUTH_MS as i64);
    let mut other = common::raw::connect(&broker);
    assert_eq!(
        authenticate(&mut other, "alice", "alice-secret", 1).error_code,
        0
    );
    other
        .write_all(&common::raw::frame(
            ApiKey::SaslHandshake,
            1,
            3,
            "raw",
            &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")),
        ))
        .unwrap();
    let _: SaslHandshakeResponse = common::raw::read_response(&mut other, 1, 3);
    other
        .write_all(&common::raw::frame(
            ApiKey::SaslAuthenticate,
            2,
            4,
            "raw",
            &SaslAuthenticateRequest::default()
                .with_auth_bytes(b"\0admin\0admin-secret".to_vec().into()),
        ))
        .unwrap();
    assert!(closed(&mut other), "a session changed its principal");

    // confluent-kafka authenticates again on its own and loses nothing.
    let before = metric(&admin, "strom_authentications_total");
    let out = run_python(
        "sasl_check.py",
        &[
            "reauth",
            &broker.bootstrap(),
            "SASL_PLAINTEXT",
            "PLAIN",
            "alice",
            "alice-secret",
        ],
        SCRIPT_DEADLINE,
    );
    assert!(out.contains("reauth: ok"), "{out}\n{}", broker.log());
    let authentications = metric(&admin, "strom_authentications_total") - before;
    // Each client connection authenticated once and again every 2 s of
    // the 7 it produced.
    assert!(
        authentications >= 6.0,
        "only {authentications} authentications: the client did not authenticate again"
    );
    // ... on its open connections: none of them expired (the one expiry
    // logged is the raw client's).
    let expired = broker
        .log()
        .matches("expired (connections.max.reauth.ms")
        .count();
    assert_eq!(expired, 1, "{}", broker.log());
}
