//! `strom start`: configuration errors, defaults, graceful stop.

mod common;

use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{poll_until, run, wait_deadline, Broker, START_DEADLINE, STOP_DEADLINE};

const CLI_DEADLINE: Duration = Duration::from_secs(30);

fn strom(args: &[&str], cwd: &std::path::Path) -> (i32, String) {
    let output = run(
        Command::new(env!("CARGO_BIN_EXE_strom"))
            .args(args)
            .current_dir(cwd),
        None,
        CLI_DEADLINE,
    );
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stderr).to_string(),
    )
}

#[test]
fn config_errors_exit_2_naming_the_key_before_opening_anything() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data_arg = data.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["--set", "no.such.key=1"], "no.such.key"),
        (&["--set", "num.partitions=lots"], "num.partitions"),
        (
            &["--set", "log.retention.hours=soon"],
            "log.retention.hours",
        ),
        (&["--set", "log.segment.bytes=-1"], "log.segment.bytes"),
        (&["--listen", "not-an-address"], "listen"),
        (&["--cores", "0"], "cores"),
        (&["--node-id", "x"], "node.id"),
    ];
    for (args, key) in cases {
        let mut all = vec!["start", "--data-dir", data_arg];
        all.extend_from_slice(args);
        let (code, stderr) = strom(&all, dir.path());
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stderr.contains(key), "{args:?} must name {key}: {stderr}");
    }
    let config = dir.path().join("strom.toml");
    std::fs::write(&config, "num.partitions = 3\n[log]\nretention.weeks = 2\n").unwrap();
    let (code, stderr) = strom(
        &[
            "start",
            "--data-dir",
            data_arg,
            "--config",
            config.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("log.retention.weeks") && stderr.contains("strom.toml"),
        "{stderr}"
    );
    assert!(
        !data.exists(),
        "nothing is created before the config is valid"
    );
}

#[test]
fn no_flags_starts_a_single_node_broker_with_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_strom"))
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let listening = poll_until(START_DEADLINE, || {
        if TcpStream::connect("127.0.0.1:9092").is_ok() {
            return Some(());
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("strom exited with {status} (is port 9092 taken?)");
        }
        None
    });
    assert!(
        listening.is_some(),
        "strom did not listen on 127.0.0.1:9092"
    );
    assert!(dir
        .path()
        .join("strom-data/__metadata/metadata.log")
        .exists());
    // SAFETY: kill with a pid of our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = wait_deadline(&mut child, STOP_DEADLINE).expect("stops on SIGINT");
    assert!(status.success(), "{status}");
}

#[test]
fn sigterm_stops_within_ten_seconds_with_connections_open() {
    let mut broker = Broker::start(&[]);
    let _idle = TcpStream::connect(broker.address()).unwrap();
    let elapsed = broker.stop();
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
    assert!(broker.log().contains("strom stopped"), "{}", broker.log());
}
