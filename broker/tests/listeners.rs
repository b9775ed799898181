//! Several client listeners at once, each with its own security protocol
//! and settings (Kafka's `listeners`, `listener.security.protocol.map` and
//! `listener.name.<name>.` prefix): a PLAINTEXT listener on loopback for
//! operators beside a SASL_SSL one for applications. Each listener's
//! clients are told that listener's addresses, records written through one
//! are read back byte for byte through the other, and each refuses what
//! its protocol does not speak; aiokafka works over each protocol.

mod common;

use std::process::Command;
use std::time::Duration;

use common::admin::Admin;
use common::{free_port, run, run_python, strom_at, Broker};
use test_support::certs::Certificates;

const DEADLINE: Duration = Duration::from_secs(60);
const JAAS: &str = "org.apache.kafka.common.security.plain.PlainLoginModule required \
    username=\"admin\" password=\"admin-secret\" user_admin=\"admin-secret\" \
    user_alice=\"alice-secret\";";

/// kcat on `port` of 127.0.0.1, over SASL_SSL as alice when `secured`.
fn kcat(
    port: u16,
    secured: bool,
    certificates: &Certificates,
    args: &[&str],
    stdin: Option<&[u8]>,
) -> std::process::Output {
    let mut command = Command::new("kcat");
    command
        .args(["-b", &format!("127.0.0.1:{port}")])
        .args(args);
    if secured {
        command.args([
            "-X",
            "security.protocol=SASL_SSL",
            "-X",
            "sasl.mechanisms=PLAIN",
            "-X",
            "sasl.username=alice",
            "-X",
            "sasl.password=alice-secret",
            "-X",
            &format!("ssl.ca.location={}", certificates.text("ca.pem")),
        ]);
    }
    run(&mut command, stdin, DEADLINE)
}

/// A broker on `port` with `settings` (`--set` each) and no admin
/// listener, its data and log in `dir`.
fn start_with(dir: &std::path::Path, port: u16, settings: &[String]) -> Broker {
    let mut args = vec!["--admin-listen".to_string(), "off".to_string()];
    for setting in settings {
        args.push("--set".into());
        args.push(setting.clone());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Broker::start_at(&dir.join("data"), &dir.join("strom.log"), port, &args)
}

/// kcat over TLS to 127.0.0.1:`port`, trusting the test authority, showing
/// the client certificate `NAME.pem` (and `NAME.key`) when given.
fn kcat_tls(
    port: u16,
    certificates: &Certificates,
    client: Option<&str>,
    args: &[&str],
    stdin: Option<&[u8]>,
) -> std::process::Output {
    let mut command = Command::new("kcat");
    command
        .args(["-b", &format!("127.0.0.1:{port}")])
        .args(args)
        .args(["-X", "security.protocol=ssl"])
        .args([
            "-X",
            &format!("ssl.ca.location={}", certificates.text("ca.pem")),
        ]);
    if let Some(name) = client {
        command
            .args([
                "-X",
                &format!(
                    "ssl.certificate.location={}",
                    certificates.text(&format!("{name}.pem"))
                ),
            ])
            .args([
                "-X",
                &format!(
                    "ssl.key.location={}",
                    certificates.text(&format!("{name}.key"))
                ),
            ]);
    }
    run(&mut command, stdin, DEADLINE)
}

fn ok(output: std::process::Output, what: &str, broker: &Broker) -> Vec<u8> {
    assert!(
        output.status.success(),
        "{what}: {}\nbroker log:\n{}",
        String::from_utf8_lossy(&output.stderr),
        broker.log()
    );
    output.stdout
}

#[test]
fn each_listener_serves_its_own_protocol_and_addresses() {
    let certificates = Certificates::make();
    let internal = free_port();
    let external = free_port();
    let settings = [
        format!("listeners=INTERNAL://127.0.0.1:{internal},EXTERNAL://127.0.0.1:{external}"),
        "listener.security.protocol.map=INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL,CONTROLLER:PLAINTEXT"
            .to_string(),
        format!(
            "advertised.listeners=INTERNAL://127.0.0.1:{internal},EXTERNAL://localhost:{external}"
        ),
        "listener.name.external.sasl.enabled.mechanisms=PLAIN".to_string(),
        format!("listener.name.external.plain.sasl.jaas.config={JAAS}"),
        format!(
            "listener.name.external.ssl.keystore.location={}",
            certificates.text("server-keystore.pem")
        ),
    ];
    let admin = Admin { port: free_port() };
    let mut args = vec!["--admin-listen".to_string(), admin.address()];
    for setting in &settings {
        args.push("--set".into());
        args.push(setting.clone());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_at(
        &dir.path().join("data"),
        &dir.path().join("strom.log"),
        internal,
        &args,
    );

    // Each listener's clients are told that listener's address.
    let listed = ok(
        kcat(internal, false, &certificates, &["-L", "-J"], None),
        "metadata on INTERNAL",
        &broker,
    );
    let listed = String::from_utf8_lossy(&listed);
    assert!(
        listed.contains(&format!("\"id\":0,\"name\":\"127.0.0.1:{internal}\"")),
        "INTERNAL lists its own address: {listed}"
    );
    let listed = ok(
        kcat(external, true, &certificates, &["-L", "-J"], None),
        "metadata on EXTERNAL",
        &broker,
    );
    let listed = String::from_utf8_lossy(&listed);
    assert!(
        listed.contains(&format!("\"id\":0,\"name\":\"localhost:{external}\"")),
        "EXTERNAL lists its advertised address: {listed}"
    );
    assert!(
        !listed.contains(&format!(":{internal}\"")),
        "EXTERNAL's clients never see INTERNAL: {listed}"
    );

    // Written through the SASL_SSL listener, read through the plaintext one.
    let records: Vec<Vec<u8>> = (0..200)
        .map(|i| format!("record-{i:04}-{}", "x".repeat(i % 37)).into_bytes())
        .collect();
    let mut input = Vec::new();
    for record in &records {
        input.extend_from_slice(record);
        input.push(b'\n');
    }
    ok(
        kcat(
            external,
            true,
            &certificates,
            &[
                "-P",
                "-t",
                "both-ways",
                "-X",
                "topic.partitioner=murmur2_random",
            ],
            Some(&input),
        ),
        "produce on EXTERNAL",
        &broker,
    );
    let read = ok(
        kcat(
            internal,
            false,
            &certificates,
            &[
                "-C",
                "-t",
                "both-ways",
                "-o",
                "beginning",
                "-e",
                "-c",
                "200",
            ],
            None,
        ),
        "consume on INTERNAL",
        &broker,
    );
    let mut got: Vec<Vec<u8>> = read
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    let mut wanted = records.clone();
    got.sort();
    wanted.sort();
    assert_eq!(got, wanted, "every record, byte for byte");

    // A plaintext client on the SASL_SSL listener, and a SASL_SSL one on
    // the plaintext listener, are refused; the broker keeps serving.
    let refused = kcat(external, false, &certificates, &["-L", "-m", "5"], None);
    assert!(!refused.status.success(), "plaintext on EXTERNAL refused");
    let refused = kcat(internal, true, &certificates, &["-L", "-m", "5"], None);
    assert!(!refused.status.success(), "TLS on INTERNAL refused");
    let log = broker.log();
    assert!(
        log.contains("TLS handshake failed"),
        "the plaintext client on EXTERNAL is logged: {log}"
    );
    assert!(
        log.contains("a TLS handshake on a plaintext listener"),
        "the TLS client on INTERNAL is logged: {log}"
    );
    ok(
        kcat(internal, false, &certificates, &["-L"], None),
        "INTERNAL still serves",
        &broker,
    );

    // Authentications are counted by listener and mechanism: every kcat
    // on EXTERNAL authenticated with PLAIN, none failed.
    let (_, metrics) = admin.get("/metrics");
    let counted = |name: &str| -> f64 {
        let wanted = format!("{name}{{shard=\"all\",listener=\"EXTERNAL\",mechanism=\"PLAIN\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&wanted)?.trim().parse().ok())
            .unwrap_or(0.0)
    };
    assert!(
        counted("strom_authentications_total") >= 3.0,
        "EXTERNAL's PLAIN authentications counted:\n{metrics}"
    );
    assert_eq!(
        counted("strom_authentications_failed_total"),
        0.0,
        "{metrics}"
    );
    ok(
        kcat(external, true, &certificates, &["-L"], None),
        "EXTERNAL still serves",
        &broker,
    );
}

/// aiokafka over SSL with a client certificate (mutual TLS), SASL_SSL with
/// SCRAM-SHA-512 and with PLAIN, and SASL_PLAINTEXT: four listeners of one
/// broker, each creating a topic, writing and reading it back byte for
/// byte in a committing group.
#[test]
fn aiokafka_works_over_every_security_protocol() {
    let certificates = Certificates::make();
    certificates.client("aiokafka");
    let ports: Vec<u16> = (0..4).map(|_| free_port()).collect();
    let settings = [
        format!(
            "listeners=TLS://127.0.0.1:{},SECURE://127.0.0.1:{},SASL://127.0.0.1:{},PLAIN://127.0.0.1:{}",
            ports[0], ports[1], ports[2], ports[3]
        ),
        "listener.security.protocol.map=TLS:SSL,SECURE:SASL_SSL,SASL:SASL_PLAINTEXT,PLAIN:PLAINTEXT,CONTROLLER:PLAINTEXT"
            .to_string(),
        format!("ssl.keystore.location={}", certificates.text("server-keystore.pem")),
        format!("listener.name.tls.ssl.truststore.location={}", certificates.text("ca.pem")),
        "listener.name.tls.ssl.client.auth=required".to_string(),
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512".to_string(),
        format!("listener.name.secure.plain.sasl.jaas.config={JAAS}"),
        format!("listener.name.sasl.plain.sasl.jaas.config={JAAS}"),
    ];
    let dir = tempfile::tempdir().unwrap();
    let broker = start_with(dir.path(), ports[0], &settings);
    // A SCRAM user, set over the plaintext listener.
    let password = dir.path().join("bob.pw");
    std::fs::write(&password, "bob-scram\n").unwrap();
    let set = strom_at(
        Some(&format!("127.0.0.1:{}", ports[3])),
        &[
            "user",
            "scram",
            "set",
            "--user",
            "bob",
            "--mechanism",
            "SCRAM-SHA-512",
            "--password-file",
            &password.to_string_lossy(),
        ],
        None,
    );
    ok(set, "strom user scram set", &broker);
    let out = run_python(
        "aiokafka_security_check.py",
        &[
            &certificates.text("ca.pem"),
            &certificates.text("aiokafka.pem"),
            &certificates.text("aiokafka.key"),
            &format!("SSL@127.0.0.1:{}", ports[0]),
            &format!(
                "SASL_SSL@localhost:{}@SCRAM-SHA-512@bob@bob-scram",
                ports[1]
            ),
            &format!("SASL_SSL@localhost:{}@PLAIN@alice@alice-secret", ports[1]),
            &format!(
                "SASL_PLAINTEXT@127.0.0.1:{}@PLAIN@alice@alice-secret",
                ports[2]
            ),
        ],
        Duration::from_secs(300),
    );
    for line in [
        "ssl: ok 150",
        "sasl_ssl-scram-sha-512: ok 150",
        "sasl_ssl-plain: ok 150",
        "sasl_plaintext-plain: ok 150",
    ] {
        assert!(
            out.contains(line),
            "{line:?} not in:\n{out}\n{}",
            broker.log()
        );
    }
}

/// Mutual TLS refuses a client whose certificate expired, and one signed
/// by an authority the listener does not trust, each with one line in the
/// log; a client with a valid certificate is served before and after.
#[test]
fn an_expired_or_untrusted_client_certificate_is_refused() {
    let certificates = Certificates::make();
    certificates.expired_client("expired");
    let port = free_port();
    let settings = [
        format!("listeners=SSL://127.0.0.1:{port}"),
        format!(
            "ssl.keystore.location={}",
            certificates.text("server-keystore.pem")
        ),
        format!("ssl.truststore.location={}", certificates.text("ca.pem")),
        "ssl.client.auth=required".to_string(),
    ];
    let dir = tempfile::tempdir().unwrap();
    let broker = start_with(dir.path(), port, &settings);
    let kcat_as = |name: &str, stdin: Option<&[u8]>, args: &[&str]| {
        kcat_tls(port, &certificates, Some(name), args, stdin)
    };
    ok(
        kcat_as(
            "alice",
            Some(b"kept\n"),
            &["-P", "-t", "certified", "-p", "0"],
        ),
        "a valid certificate writes",
        &broker,
    );
    let failed_before = broker.log().matches("TLS handshake failed").count();
    for name in ["expired", "mallory"] {
        let refused = kcat_as(name, None, &["-L", "-m", "5"]);
        assert!(!refused.status.success(), "{name}'s certificate was served");
    }
    let failed = broker.log().matches("TLS handshake failed").count() - failed_before;
    assert!(
        failed >= 2,
        "two refusals logged, {failed} found:\n{}",
        broker.log()
    );
    let log = broker.log();
    assert!(
        log.contains("Expired") || log.contains("expired"),
        "the expired certificate is named as such:\n{log}"
    );
    let read = ok(
        kcat_as(
            "alice",
            None,
            &["-C", "-t", "certified", "-p", "0", "-o", "beginning", "-e"],
        ),
        "a valid certificate reads",
        &broker,
    );
    assert_eq!(read, b"kept\n", "the record, byte for byte");
}

/// An encrypted PKCS#8 private key (what `openssl pkcs8 -topk8 -v2
/// aes-256-cbc` writes) is served with `ssl.key.password`; a wrong or
/// missing password, and a key in OpenSSL's legacy encrypted form, stop
/// the start naming the setting.
#[test]
fn an_encrypted_private_key_is_served_with_its_password() {
    let certificates = Certificates::make();
    let openssl = |args: &[&str]| {
        let output = run(
            Command::new("openssl")
                .args(args)
                .current_dir(certificates.path("")),
            None,
            DEADLINE,
        );
        assert!(output.status.success(), "openssl {args:?}: {output:?}");
    };
    openssl(&[
        "pkcs8",
        "-topk8",
        "-v2",
        "aes-256-cbc",
        "-in",
        "server.key",
        "-out",
        "server-encrypted.key",
        "-passout",
        "pass:key-secret",
    ]);
    openssl(&[
        "rsa",
        "-in",
        "server.key",
        "-aes256",
        "-traditional",
        "-out",
        "server-legacy.key",
        "-passout",
        "pass:key-secret",
    ]);
    let keystore = |key: &str| {
        let mut pem = std::fs::read(certificates.path(key)).unwrap();
        pem.extend(std::fs::read(certificates.path("server.pem")).unwrap());
        let path = certificates.path(&format!("keystore-{key}.pem"));
        std::fs::write(&path, pem).unwrap();
        path.to_string_lossy().into_owned()
    };
    let encrypted = keystore("server-encrypted.key");
    let legacy = keystore("server-legacy.key");

    // Refused at start, naming the setting.
    for (store, password, key, said) in [
        (
            &encrypted,
            Some("wrong"),
            "ssl.key.password",
            "does not decrypt",
        ),
        (
            &encrypted,
            None,
            "ssl.key.password",
            "is encrypted: give its password",
        ),
        (
            &legacy,
            Some("key-secret"),
            "ssl.keystore.location",
            "legacy PEM form",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut command = Command::new(common::strom_bin());
        command
            .args([
                "start",
                "--cores",
                "1",
                "--admin-listen",
                "off",
                "--data-dir",
            ])
            .arg(dir.path().join("data"))
            .args([
                "--set",
                &format!("listeners=SSL://127.0.0.1:{}", free_port()),
            ])
            .args(["--set", &format!("ssl.keystore.location={store}")]);
        if let Some(password) = password {
            command.args(["--set", &format!("ssl.key.password={password}")]);
        }
        let output = run(&mut command, None, DEADLINE);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains(&format!("`{key}`")) && stderr.contains(said),
            "{stderr}"
        );
        assert!(
            !stderr.contains("key-secret"),
            "the password is never shown: {stderr}"
        );
    }

    // Served with the right password: records round-trip over TLS.
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let settings = [
        format!("listeners=SSL://127.0.0.1:{port}"),
        format!("ssl.keystore.location={encrypted}"),
        "ssl.key.password=key-secret".to_string(),
    ];
    let broker = start_with(dir.path(), port, &settings);
    let kcat_tls =
        |args: &[&str], stdin: Option<&[u8]>| kcat_tls(port, &certificates, None, args, stdin);
    ok(
        kcat_tls(&["-P", "-t", "sealed", "-p", "0"], Some(b"one\ntwo\n")),
        "produce over TLS with the decrypted key",
        &broker,
    );
    let read = ok(
        kcat_tls(
            &["-C", "-t", "sealed", "-p", "0", "-o", "beginning", "-e"],
            None,
        ),
        "consume",
        &broker,
    );
    assert_eq!(read, b"one\ntwo\n");
    assert!(
        !broker.log().contains("key-secret"),
        "the password is not logged"
    );
}

/// The subject of the certificate a TLS listener at `port` serves now.
fn served_subject(port: u16) -> String {
    let output = run(
        Command::new("openssl").args([
            "s_client",
            "-connect",
            &format!("127.0.0.1:{port}"),
            "-servername",
            "localhost",
        ]),
        Some(b""),
        DEADLINE,
    );
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.lines()
        .find_map(|l| l.strip_prefix("subject="))
        .unwrap_or_default()
        .to_string()
}

/// A listener's keystore replaced live, the Kafka way: AlterConfigs on the
/// broker with `listener.name.<name>.ssl.keystore.location` serves new
/// connections the new certificate (the same path set again rereads a
/// replaced file); a keystore that does not serve is refused with
/// INVALID_CONFIG and the one in force keeps serving; the change outlives
/// a restart.
#[test]
fn a_keystore_is_replaced_live_through_alter_configs() {
    let certificates = Certificates::make();
    let dir = certificates.path("");
    let openssl = |args: &[&str]| {
        let output = run(
            Command::new("openssl").args(args).current_dir(&dir),
            None,
            DEADLINE,
        );
        assert!(output.status.success(), "openssl {args:?}: {output:?}");
    };
    // A second certificate for the same address, from the same authority.
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=renewed",
        "-keyout",
        "renewed.key",
        "-out",
        "renewed.csr",
    ]);
    std::fs::write(
        dir.join("renewed.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "renewed.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "renewed.ext",
        "-out",
        "renewed.pem",
    ]);
    let mut renewed = std::fs::read(dir.join("renewed.key")).unwrap();
    renewed.extend(std::fs::read(dir.join("renewed.pem")).unwrap());
    std::fs::write(dir.join("renewed-keystore.pem"), renewed).unwrap();
    std::fs::write(dir.join("broken-keystore.pem"), "not a keystore\n").unwrap();

    let port = free_port();
    let data = tempfile::tempdir().unwrap();
    let settings = [
        format!("listeners=SSL://127.0.0.1:{port}"),
        format!(
            "ssl.keystore.location={}",
            certificates.text("server-keystore.pem")
        ),
    ];
    let mut broker = start_with(data.path(), port, &settings);
    assert!(
        served_subject(port).contains("localhost"),
        "{}",
        served_subject(port)
    );

    let properties = dir.join("client.properties");
    std::fs::write(
        &properties,
        format!(
            "security.protocol=SSL\nssl.truststore.location={}\n",
            certificates.text("ca.pem")
        ),
    )
    .unwrap();
    let alter = |keystore: &str| {
        strom_at(
            Some(&format!("127.0.0.1:{port}")),
            &[
                "config",
                "alter",
                "--broker",
                "0",
                "--add-config",
                &format!(
                    "listener.name.ssl.ssl.keystore.location={}",
                    certificates.text(keystore)
                ),
                "--command-config",
                &properties.to_string_lossy(),
            ],
            None,
        )
    };
    // A keystore that does not serve is refused; the one in force serves.
    let refused = alter("broken-keystore.pem");
    assert!(!refused.status.success(), "a broken keystore was taken");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("INVALID_CONFIG"), "{said}");
    assert!(served_subject(port).contains("localhost"));

    ok(
        alter("renewed-keystore.pem"),
        "the renewed keystore is set",
        &broker,
    );
    assert!(
        served_subject(port).contains("renewed"),
        "{}",
        served_subject(port)
    );
    assert!(
        broker.log().contains("TLS keystore reloaded"),
        "{}",
        broker.log()
    );
    // Records still round-trip over the new certificate.
    let kcat_tls =
        |args: &[&str], stdin: Option<&[u8]>| kcat_tls(port, &certificates, None, args, stdin);
    ok(
        kcat_tls(&["-P", "-t", "renewed", "-p", "0"], Some(b"after\n")),
        "produce",
        &broker,
    );
    let read = ok(
        kcat_tls(
            &["-C", "-t", "renewed", "-p", "0", "-o", "beginning", "-e"],
            None,
        ),
        "consume",
        &broker,
    );
    assert_eq!(read, b"after\n");

    // The same path again, its file replaced: read again.
    std::fs::copy(
        dir.join("server-keystore.pem"),
        dir.join("renewed-keystore.pem"),
    )
    .unwrap();
    ok(
        alter("renewed-keystore.pem"),
        "the same path again",
        &broker,
    );
    assert!(
        served_subject(port).contains("localhost"),
        "{}",
        served_subject(port)
    );

    // Kept in the metadata: a restart serves the file it names.
    let mut pem = std::fs::read(dir.join("renewed.key")).unwrap();
    pem.extend(std::fs::read(dir.join("renewed.pem")).unwrap());
    std::fs::write(dir.join("renewed-keystore.pem"), pem).unwrap();
    broker.restart();
    assert!(
        served_subject(port).contains("renewed"),
        "{}",
        served_subject(port)
    );
}
