//! One broker per client address and per data dir: a second `strom start`
//! on either is refused with a clear message and a non-zero exit, and the
//! first broker keeps serving with its data intact.

mod common;

use std::net::TcpListener;
use std::process::Command;
use std::time::Duration;

use common::{free_port, kcat, run, Broker};

/// How long a refused start may take to exit.
const REFUSAL_DEADLINE: Duration = Duration::from_secs(30);

/// Runs `strom start` with `args` (a second broker); its exit status and
/// stderr.
fn start_second(args: &[&str]) -> (std::process::ExitStatus, String) {
    let output = run(
        Command::new(env!("CARGO_BIN_EXE_strom"))
            .args(["start", "--cores", "1", "--admin-listen", "off"])
            .args(args),
        None,
        REFUSAL_DEADLINE,
    );
    (
        output.status,
        String::from_utf8_lossy(&output.stderr).to_string(),
    )
}

/// Produces `count` numbered records to `topic` and reads them back.
fn round_trip(broker: &Broker, topic: &str, count: usize) {
    let lines: String = (0..count).map(|i| format!("record-{i}\n")).collect();
    kcat(
        broker,
        &["-P", "-t", topic, "-X", "acks=all"],
        Some(lines.as_bytes()),
    );
    let read = kcat(broker, &["-C", "-t", topic, "-e", "-o", "beginning"], None);
    assert_eq!(String::from_utf8(read).unwrap(), lines);
}

#[test]
fn a_second_broker_on_an_address_in_use_is_refused() {
    let broker = Broker::start(&["--admin-listen", "off"]);
    round_trip(&broker, "first", 10);
    let other_dir = tempfile::tempdir().unwrap();
    let (status, stderr) = start_second(&[
        "--listen",
        &broker.bootstrap(),
        "--data-dir",
        other_dir.path().to_str().unwrap(),
    ]);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "cannot listen on {}: address already in use",
            broker.bootstrap()
        )),
        "{stderr}"
    );
    // Every connection still reaches the first broker and its data.
    for _ in 0..10 {
        let read = kcat(&broker, &["-C", "-t", "first", "-e", "-c", "1"], None);
        assert_eq!(read, b"record-0\n");
    }
}

#[test]
fn an_address_another_program_listens_on_is_refused() {
    let taken = TcpListener::bind(("127.0.0.1", free_port())).unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let (status, stderr) = start_second(&[
        "--listen",
        &address,
        "--data-dir",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("address already in use by another process"),
        "{stderr}"
    );
}

#[test]
fn a_second_broker_on_a_data_dir_in_use_is_refused_naming_the_holder() {
    let mut broker = Broker::start(&["--admin-listen", "off"]);
    round_trip(&broker, "kept", 100);
    let port = free_port().to_string();
    let (status, stderr) = start_second(&[
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--data-dir",
        broker.data_dir.to_str().unwrap(),
    ]);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("is in use by process {}", broker.pid())),
        "{stderr}"
    );
    // The refused start touched nothing: after a restart the topic and
    // its 100 records are all there.
    broker.restart();
    let read = kcat(
        &broker,
        &["-C", "-t", "kept", "-e", "-o", "beginning"],
        None,
    );
    let expected: String = (0..100).map(|i| format!("record-{i}\n")).collect();
    assert_eq!(String::from_utf8(read).unwrap(), expected);
}

#[test]
fn repair_is_refused_while_a_broker_holds_the_data_dir() {
    let broker = Broker::start(&["--admin-listen", "off"]);
    let output = run(
        Command::new(env!("CARGO_BIN_EXE_strom")).args([
            "repair",
            "metadata",
            "--data-dir",
            broker.data_dir.to_str().unwrap(),
            "--drop-damaged-at",
            "0",
        ]),
        None,
        REFUSAL_DEADLINE,
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("is in use by process {}", broker.pid())),
        "{stderr}"
    );
}

/// A client still connected when the broker stops leaves the broker's end
/// of its connection behind (FIN_WAIT2) for up to a minute; the next start
/// on the same address must not take it for another listener.
#[test]
fn a_restart_with_clients_still_connected_takes_its_address_again() {
    let mut broker = Broker::start(&["--admin-listen", "off"]);
    round_trip(&broker, "before", 5);
    let lingering: Vec<_> = (0..3)
        .map(|_| std::net::TcpStream::connect(broker.address()).unwrap())
        .collect();
    broker.restart();
    round_trip(&broker, "after", 5);
    drop(lingering);
}
