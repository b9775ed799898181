//! What a small broker takes on disk: a data dir holding 4 KB of records
//! once took 513 MB (two 128 MiB journal chunks per core, 8 MiB
//! preallocated per segment) while `strom status` said 3.9 KiB. Now the
//! footprint follows the data, and `/status`, `strom status` and
//! `/metrics` report the bytes actually allocated, by kind.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{free_port, http_get, kcat, run, Broker};

/// What a 2-core broker with a few KB of records over 3 topics may take:
/// two 4 MiB journal chunks per core and a little more.
const SMALL_FOOTPRINT_BYTES_MAX: u64 = 24 << 20;

/// Bytes allocated under `dir`, as du counts them.
fn du_bytes(dir: &std::path::Path) -> u64 {
    let output = run(
        Command::new("du").args(["-s", "--block-size=1"]).arg(dir),
        None,
        Duration::from_secs(30),
    );
    assert!(output.status.success());
    String::from_utf8(output.stdout)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn a_small_broker_takes_little_disk_and_reports_what_it_takes() {
    let admin = format!("127.0.0.1:{}", free_port());
    let broker = Broker::start(&["--admin-listen", &admin]);
    let mut sent = 0;
    for topic in ["small-a", "small-b", "small-c"] {
        // acks=all: durable appends, which go through the core's journal.
        let lines: String = (0..50)
            .map(|i| format!("{topic}-record-{i:04}-{}\n", "x".repeat(20)))
            .collect();
        sent += lines.len();
        kcat(
            &broker,
            &["-P", "-t", topic, "-X", "acks=all"],
            Some(lines.as_bytes()),
        );
        let read = kcat(&broker, &["-C", "-t", topic, "-e", "-o", "beginning"], None);
        assert_eq!(String::from_utf8(read).unwrap(), lines);
    }
    assert!(sent > 4_000, "{sent}");

    let on_disk = du_bytes(&broker.data_dir);
    assert!(
        on_disk < SMALL_FOOTPRINT_BYTES_MAX,
        "{on_disk} bytes on disk for {sent} bytes of records:\n{}",
        String::from_utf8_lossy(
            &run(
                Command::new("du").arg("-ab").arg(&broker.data_dir),
                None,
                Duration::from_secs(30)
            )
            .stdout
        )
    );

    // /status counts the same blocks as du (the idle broker writes
    // nothing between the two readings but the metrics scrape itself).
    let (code, body) = http_get(&admin, "/status");
    assert_eq!(code, 200, "{body}");
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    let kinds = &status["disk"]["on_disk"];
    let reported: u64 = ["segments", "indexes", "journal", "metadata", "other"]
        .iter()
        .map(|k| kinds[k].as_u64().unwrap_or_else(|| panic!("{k} in {body}")))
        .sum();
    let tolerance = 64 << 10;
    assert!(
        reported.abs_diff(on_disk) <= tolerance,
        "/status says {reported} bytes on disk, du {on_disk}: {body}"
    );
    assert!(
        kinds["journal"].as_u64().unwrap() > 0,
        "acks=all appends made a journal: {body}"
    );

    // /metrics has the same figures by kind.
    let (code, metrics) = http_get(&admin, "/metrics");
    assert_eq!(code, 200);
    let from_metrics: u64 = metrics
        .lines()
        .filter(|l| l.starts_with("strom_data_dir_disk_bytes{"))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert!(
        from_metrics.abs_diff(on_disk) <= tolerance,
        "/metrics says {from_metrics} bytes on disk, du {on_disk}"
    );

    // strom status prints it.
    let output = run(
        Command::new(env!("CARGO_BIN_EXE_strom")).args([
            "status",
            "--admin",
            &admin,
            "--interval-ms",
            "100",
        ]),
        None,
        Duration::from_secs(30),
    );
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(printed.contains(" on disk (segments "), "{printed}");
}
