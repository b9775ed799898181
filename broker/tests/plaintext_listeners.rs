//! Strom serves PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL client
//! listeners (see tests/tls.rs and tests/sasl.rs) and says what it cannot
//! start: a TLS listener without its key and certificate, a SASL one
//! without a served mechanism, an inter-broker listener that is not one of
//! the listeners, a secured scheme on a bare address stop `strom start` with a configuration error naming
//! the setting; a TLS client that reaches a plaintext listener is logged
//! as that, not as a malformed frame.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{free_port, poll_until, run, strom_bin, strom_ok, Broker};

const RUN_DEADLINE: Duration = Duration::from_secs(30);
/// `strom start`'s exit code for a configuration error.
const EXIT_CONFIG: i32 = 2;
/// What the broker logs for a TLS client on a plaintext listener.
const TLS_LINE: &str = "a TLS handshake on a plaintext listener";

#[test]
fn listeners_not_served_are_refused_at_start() {
    let port = free_port();
    let plaintext = format!("PLAINTEXT://127.0.0.1:{port}");
    let no_keystore = "a TLS listener needs its key and certificate chain".to_string();
    // (settings, the key named, what is said)
    let cases: Vec<(Vec<String>, &str, String)> = vec![
        (
            vec![format!("listeners=SSL://127.0.0.1:{port}")],
            "ssl.keystore.location",
            no_keystore.clone(),
        ),
        (
            vec![format!("listeners=SASL_SSL://127.0.0.1:{port}")],
            "ssl.keystore.location",
            no_keystore.clone(),
        ),
        (
            vec![format!("listeners=SASL_PLAINTEXT://127.0.0.1:{port}")],
            "sasl.enabled.mechanisms",
            "a SASL listener needs sasl.enabled.mechanisms: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"
                .to_string(),
        ),
        (
            vec![
                format!("listeners={plaintext}"),
                "inter.broker.listener.name=EXTERNAL".into(),
            ],
            "inter.broker.listener.name",
            "no listener EXTERNAL in listeners (PLAINTEXT)".to_string(),
        ),
        (
            vec![format!("listen=SSL://127.0.0.1:{port}")],
            "listen",
            "a bare client address is a PLAINTEXT listener".to_string(),
        ),
        (
            vec![
                format!("listeners={plaintext}"),
                "listener.security.protocol.map=PLAINTEXT:SSL".into(),
            ],
            "ssl.keystore.location",
            no_keystore.clone(),
        ),
        (
            vec![
                format!("listeners=CLIENTS://127.0.0.1:{port}"),
                "listener.security.protocol.map=CLIENTS:SASL_SSL,CONTROLLER:PLAINTEXT".into(),
            ],
            "ssl.keystore.location",
            no_keystore.clone(),
        ),
    ];
    for (settings, key, said) in &cases {
        let dir = tempfile::tempdir().unwrap();
        let data_dir = dir.path().join("data");
        let mut command = Command::new(strom_bin());
        command
            .args(["start", "--cores", "1", "--admin-listen", "off"])
            .arg("--data-dir")
            .arg(&data_dir);
        for setting in settings {
            command.args(["--set", setting]);
        }
        let output = run(&mut command, None, RUN_DEADLINE);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(EXIT_CONFIG),
            "{settings:?}: {stderr}"
        );
        for wanted in [
            "configuration error".to_string(),
            format!("`{key}`"),
            said.clone(),
        ] {
            assert!(
                stderr.contains(&wanted),
                "{settings:?}: {wanted:?} not in {stderr}"
            );
        }
        assert!(
            !data_dir.exists(),
            "{settings:?}: a refused start created the data dir"
        );
    }
}

#[test]
fn a_map_of_plaintext_listeners_starts_and_is_described() {
    let broker = Broker::start(&[
        "--set",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
    ]);
    strom_ok(&broker, &["topic", "create", "served", "--partitions", "1"]);
    let described = strom_ok(&broker, &["config", "describe", "--broker", "0"]);
    let line = described
        .lines()
        .find(|l| l.contains("listener.security.protocol.map"))
        .unwrap_or_else(|| panic!("no listener.security.protocol.map in:\n{described}"));
    assert!(line.contains("PLAINTEXT:PLAINTEXT"), "{line}");
}

#[test]
fn a_tls_client_on_the_plaintext_listener_is_logged_as_such() {
    let broker = Broker::start(&[]);
    // A real TLS client (Python's ssl): its ClientHello is the first thing
    // the broker reads; the broker closes the connection, so the
    // handshake fails.
    let script = "import socket, ssl, sys\n\
        context = ssl.create_default_context()\n\
        context.check_hostname = False\n\
        context.verify_mode = ssl.CERT_NONE\n\
        sock = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=20)\n\
        try:\n    context.wrap_socket(sock)\nexcept (ssl.SSLError, OSError) as error:\n    print('handshake failed:', error)\n    sys.exit(0)\n\
        sys.exit('the handshake succeeded')\n";
    let output = run(
        Command::new("python3").args([
            "-c",
            script,
            &broker.host.ip.to_string(),
            &broker.port.to_string(),
        ]),
        None,
        RUN_DEADLINE,
    );
    assert!(
        output.status.success(),
        "the TLS client: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let logged = poll_until(RUN_DEADLINE, || {
        broker.log().contains(TLS_LINE).then_some(())
    });
    assert!(logged.is_some(), "no {TLS_LINE:?} in:\n{}", broker.log());
    assert!(
        !broker.log().contains("bad frame"),
        "the handshake was taken for a frame:\n{}",
        broker.log()
    );
    // The listener serves Kafka clients as before.
    strom_ok(
        &broker,
        &["topic", "create", "after-tls", "--partitions", "1"],
    );
}
