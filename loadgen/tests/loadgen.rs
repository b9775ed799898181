//! strom-loadgen against a real `strom` process: an end-to-end run counts
//! every record with nothing lost, duplicated, reordered or corrupt;
//! topics are created and deleted (or kept); consume mode reads kept data
//! back; bad input gets a clear error and exit code 2.
//!
//! The `strom` binary comes from the same target directory (built by
//! `cargo test --workspace`, which builds the broker's integration tests).

use std::process::{Command, Output};
use std::time::Duration;

use test_support::{free_port, poll_until, run, strom_at, Broker};

const LOADGEN: &str = env!("CARGO_BIN_EXE_strom-loadgen");
/// How long a run's topic may take to appear and take its first records.
const RUN_START_DEADLINE: Duration = Duration::from_secs(30);
/// How long the stalled broker stops answering.
const STALL: Duration = Duration::from_secs(1);

/// A broker on one core, as the load generator's runs expect.
fn broker() -> Broker {
    Broker::start(&["--cores", "1"])
}

fn loadgen(args: &[&str]) -> Output {
    run(
        Command::new(LOADGEN).args(args),
        None,
        Duration::from_secs(120),
    )
}

fn json(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn topics_on(broker: &Broker) -> String {
    strom(broker, &["topic", "list"], None)
}

/// Runs a `strom` tool against `broker` that must succeed; its stdout.
fn strom(broker: &Broker, args: &[&str], stdin: Option<&[u8]>) -> String {
    let out = strom_at(Some(&broker.bootstrap()), args, stdin);
    assert!(
        out.status.success(),
        "strom {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The records the broker holds in the run's topic (its partition
/// directories are `loadgen-…-P`), summed over its partitions as `strom
/// topic describe` shows them; `None` before the topic exists.
fn records_in_run_topic(broker: &Broker) -> Option<u64> {
    let topic = std::fs::read_dir(&broker.data_dir)
        .ok()?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .find(|name| name.starts_with("loadgen-"))?
        .rsplit_once('-')?
        .0
        .to_string();
    let out = strom_at(
        Some(&broker.bootstrap()),
        &["topic", "describe", &topic],
        None,
    );
    out.status.success().then(|| {
        String::from_utf8_lossy(&out.stdout)
            .split("EndOffset: ")
            .skip(1)
            .filter_map(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
            .sum()
    })
}

/// Waits until the run's topic holds records: setup is over and the run
/// is producing, whatever the machine's speed.
fn wait_for_the_run_to_produce(broker: &Broker) {
    let producing = poll_until(RUN_START_DEADLINE, || {
        records_in_run_topic(broker).filter(|&records| records > 0)
    });
    assert!(
        producing.is_some(),
        "the run produced nothing within {RUN_START_DEADLINE:?}:\n{}",
        broker.log()
    );
}

#[test]
fn e2e_counts_every_record_and_cleans_up() {
    let broker = broker();
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.json");
    let plot = dir.path().join("plot.svg");
    let hdr = dir.path().join("latency.hlog");
    // A bootstrap list, as Kafka's tools take it: the first entry has no
    // broker, the second is tried next.
    let bootstrap = format!("127.0.0.1:{},{}", free_port(), broker.bootstrap());
    let out = loadgen(&[
        "e2e",
        "--bootstrap",
        &bootstrap,
        "--partitions",
        "4",
        "--message-size",
        "300",
        "--rate",
        "3000",
        "--duration",
        "3",
        "--cores",
        "2",
        "--key-distributor",
        "KEY_ROUND_ROBIN",
        "--strict",
        "--json",
        report.to_str().unwrap(),
        "--plot",
        plot.to_str().unwrap(),
        "--hdr-log",
        hdr.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stderr.contains("produce") && stderr.contains("p99"),
        "progress lines: {stderr}"
    );
    assert!(
        stdout.contains("| publish |") && stdout.contains("p99.99"),
        "{stdout}"
    );

    let r = json(&report);
    let produced = r["produce"]["records"].as_u64().unwrap();
    let integrity = &r["integrity"];
    // 3 s at 3000 records/s, open loop: the schedule, not the broker, sets it.
    assert!((8_000..=10_000).contains(&produced), "produced {produced}");
    assert_eq!(
        integrity["received"].as_u64(),
        Some(produced),
        "{integrity}"
    );
    for field in ["lost", "duplicates", "reordered", "corrupt", "foreign"] {
        assert_eq!(integrity[field].as_u64(), Some(0), "{field}: {integrity}");
    }
    assert_eq!(r["consume"]["bytes"].as_u64(), Some(produced * 300));
    assert!(
        r["publish_latency"]["percentiles_ms"]["p99"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    assert!(r["end_to_end_latency"]["count"].as_u64().unwrap() == produced);
    assert!(r["series"].as_array().unwrap().len() >= 3);
    assert!(r["errors"].as_object().unwrap().is_empty());
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("polyline") && svg.trim_end().ends_with("</svg>")
    );
    let log = std::fs::read_to_string(&hdr).unwrap();
    assert!(
        log.contains("Tag=publish") && log.contains("Tag=e2e"),
        "{log}"
    );
    // The run's topic is gone afterwards.
    assert!(
        !topics_on(&broker).contains("loadgen-"),
        "{}",
        topics_on(&broker)
    );
}

#[test]
fn kept_topics_are_consumed_back_in_consume_mode() {
    let broker = broker();
    let out = loadgen(&[
        "produce",
        "--bootstrap",
        &broker.bootstrap(),
        "--partitions",
        "2",
        "--message-size",
        "1000",
        "--rate",
        "0",
        "--duration",
        "1",
        "--cores",
        "1",
        "--keep",
        "--strict",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // Produce mode shows what it ran: no consume or end-to-end figures.
    let stdout = String::from_utf8_lossy(&out.stdout);
    for row in [
        "| produced (acknowledged) |",
        "| publish |",
        "| send delay |",
    ] {
        assert!(stdout.contains(row), "no `{row}` row:\n{stdout}");
    }
    for row in ["| consumed |", "| end-to-end |"] {
        assert!(
            !stdout.contains(row),
            "a `{row}` row in produce mode:\n{stdout}"
        );
    }
    let progress: Vec<&str> = stderr.lines().filter(|l| l.contains(" rec/s ")).collect();
    assert!(!progress.is_empty(), "no progress line: {stderr}");
    for line in progress {
        assert!(
            line.contains("produce ") && !line.contains("consume ") && !line.contains("e2e "),
            "{line}"
        );
    }
    let topic = stderr
        .lines()
        .find_map(|l| l.strip_prefix("kept topics: "))
        .unwrap_or_else(|| panic!("no kept topic in {stderr}"))
        .trim()
        .to_string();
    assert!(topics_on(&broker).contains(&topic));
    let produced: u64 = String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.starts_with("| produced"))
        .and_then(|l| l.split('|').nth(4))
        .and_then(|v| v.trim().parse().ok())
        .expect("produced count in the table");
    assert!(produced > 0);

    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("consume.json");
    let out = loadgen(&[
        "consume",
        "--bootstrap",
        &broker.bootstrap(),
        "--topic",
        &topic,
        "--duration",
        "30",
        "--cores",
        "1",
        "--json",
        report.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = json(&report);
    assert_eq!(r["consume"]["records"].as_u64(), Some(produced));
    assert_eq!(r["consume"]["bytes"].as_u64(), Some(produced * 1000));
    // Consume mode shows what it ran: no produce rows, no latencies.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("| consumed |"), "{stdout}");
    for row in [
        "| produced",
        "| publish |",
        "| end-to-end |",
        "| send delay |",
    ] {
        assert!(
            !stdout.contains(row),
            "a `{row}` row in consume mode:\n{stdout}"
        );
    }
    // An existing topic is never deleted.
    assert!(topics_on(&broker).contains(&topic));
}

/// A broker that stops answering for a second: the producer keeps each
/// partition's open batch growing instead of queueing a batch per send
/// loop behind the full in-flight window, so it keeps taking records on
/// schedule (send delay stays small) while the stall shows in full in the
/// publish latency, counted from each record's due time. (This test once
/// hung: glommio parked the broker's core with the produce requests
/// runnable after the SIGCONT, until the client gave up 30 s later; the
/// core's watchdog now wakes it.)
#[test]
fn a_stalled_broker_shows_in_publish_latency_not_in_late_sends() {
    let broker = broker();
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.json");
    let bootstrap = broker.bootstrap();
    let args = [
        "produce",
        "--bootstrap",
        &bootstrap,
        "--partitions",
        "2",
        "--message-size",
        "100",
        "--rate",
        "5000",
        "--duration",
        "5",
        "--warmup",
        "0",
        "--linger-ms",
        "0",
        "--batch-size",
        "1048576",
        "--in-flight",
        "2",
        "--acks",
        "all",
        "--cores",
        "1",
        "--strict",
        "--json",
        report.to_str().unwrap(),
    ];
    let run = std::thread::spawn({
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        move || loadgen(&args.iter().map(String::as_str).collect::<Vec<_>>())
    });
    // Mid-run: once the run's records arrive, so setup is over whatever
    // the machine's speed. The stall lasts a second: that sleep is the
    // fault's length, not a wait for a condition.
    wait_for_the_run_to_produce(&broker);
    broker.signal(libc::SIGSTOP);
    std::thread::sleep(STALL);
    broker.signal(libc::SIGCONT);
    let out = run.join().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let broker_log = || broker.log();
    assert!(
        out.status.success(),
        "{stderr}\nstdout:\n{}\nbroker log:\n{}",
        String::from_utf8_lossy(&out.stdout),
        broker_log()
    );

    let r = json(&report);
    assert!(
        r["errors"].as_object().unwrap().is_empty(),
        "{}",
        r["errors"]
    );
    let produced = r["produce"]["records"].as_u64().unwrap();
    assert!((23_000..=26_000).contains(&produced), "produced {produced}");
    // The second without answers is in the publish latency...
    let publish_max = r["publish_latency"]["max_ms"].as_f64().unwrap();
    assert!(publish_max >= 900.0, "publish max {publish_max} ms");
    // ...but the producer did not fall behind its schedule: records kept
    // joining the open batches while the window was full. Queued batches
    // of a record or two each would have stopped it for the whole second
    // (5% of the run's records late by up to 1 s).
    let send_delay_p99 = r["send_delay"]["percentiles_ms"]["p99"].as_f64().unwrap();
    assert!(
        send_delay_p99 < 200.0,
        "send delay p99 {send_delay_p99} ms: {}",
        r["send_delay"]
    );
    // The broker's core says it did not run while it was stopped (its
    // watchdog; operations.rs checks the count and length).
    let log = broker_log();
    assert!(
        log.contains("executor did not run for a while"),
        "no stall logged:\n{log}"
    );
}

#[test]
fn bad_input_gets_a_clear_error() {
    let broker = broker();
    let dir = tempfile::tempdir().unwrap();
    let workload = dir.path().join("w.yaml");
    std::fs::write(&workload, "topics: 1\npartitionsPerTopc: 3\n").unwrap();
    // A port handed out to no broker: nothing listens there.
    let unreachable = format!("127.0.0.1:{}", free_port());
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![
                "produce".into(),
                "--bootstrap".into(),
                unreachable.clone(),
                "--duration".into(),
                "1".into(),
            ],
            unreachable.as_str(),
        ),
        (
            vec![
                "produce".into(),
                "--workload".into(),
                workload.to_str().unwrap().into(),
                "--bootstrap".into(),
                broker.bootstrap(),
            ],
            "partitionsPerTopc",
        ),
        (
            vec![
                "produce".into(),
                "--bootstrap".into(),
                broker.bootstrap(),
                "--topic-config".into(),
                "retention.ms=soon".into(),
                "--duration".into(),
                "1".into(),
            ],
            "refused to create topic",
        ),
        (
            vec![
                "produce".into(),
                "--bootstrap".into(),
                format!("{},,{unreachable}", broker.bootstrap()),
                "--duration".into(),
                "1".into(),
            ],
            "the broker address is empty",
        ),
        (vec!["e2e".into(), "--acks".into(), "most".into()], "acks"),
        (
            vec!["produce".into(), "--spin-us".into(), "1000000".into()],
            "--spin-us",
        ),
    ];
    for (args, needle) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = loadgen(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(needle),
            "{args:?}: expected `{needle}` in: {stderr}"
        );
    }
}

/// A consume of 37 records ends within milliseconds of its start: no rate
/// over such a window means anything (it once said 37,000,000,000
/// records/s), so the report says so and gives the counts.
#[test]
fn a_run_too_short_to_measure_says_so_instead_of_a_rate() {
    let broker = broker();
    let bootstrap = broker.bootstrap();
    strom(
        &broker,
        &["topic", "create", "small", "--partitions", "1"],
        None,
    );
    let records: String = (0..37).map(|i| format!("record {i:02}\n")).collect();
    strom(&broker, &["produce", "small"], Some(records.as_bytes()));

    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("consume.json");
    let out = loadgen(&[
        "consume",
        "--bootstrap",
        &bootstrap,
        "--topic",
        "small",
        "--cores",
        "1",
        "--json",
        report.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = json(&report);
    let measured = r["measured_seconds"].as_f64().unwrap();
    assert!(measured < 0.1, "measured {measured} s: {stdout}");
    assert_eq!(r["consume"]["records"].as_u64(), Some(37), "{r}");
    assert_eq!(r["consume"]["bytes"].as_u64(), Some(37 * 9), "{r}");
    assert!(r["consume"]["records_per_s"].is_null(), "{}", r["consume"]);
    assert!(r["consume"]["mb_per_s"].is_null(), "{}", r["consume"]);
    let row = stdout
        .lines()
        .find(|l| l.starts_with("| consumed |"))
        .unwrap_or_else(|| panic!("no consumed row: {stdout}"));
    assert_eq!(
        row, "| consumed | too short to measure | too short to measure | 37 | 333 |",
        "{stdout}"
    );
    assert!(stdout.contains("too short to measure rates"), "{stdout}");
}

/// Errors are counted by their whole text: a broker that goes away shows
/// its full address and the cause, not the text up to the address's colon
/// (`connection to broker 127.0.0.1`).
#[test]
fn error_kinds_keep_the_whole_error_text() {
    let mut broker = broker();
    let bootstrap = broker.bootstrap();
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.json");
    let run = std::thread::spawn({
        let args: Vec<String> = [
            "produce",
            "--bootstrap",
            &bootstrap,
            "--partitions",
            "1",
            "--message-size",
            "100",
            "--rate",
            "2000",
            "--duration",
            "4",
            "--cores",
            "1",
            "--json",
            report.to_str().unwrap(),
        ]
        .iter()
        .map(|a| a.to_string())
        .collect();
        move || loadgen(&args.iter().map(String::as_str).collect::<Vec<_>>())
    });
    // Mid-run, as in the stalled-broker test: once the run's records
    // arrive, the broker dies.
    wait_for_the_run_to_produce(&broker);
    broker.kill();
    let out = run.join().unwrap();
    let r = json(&report);
    let errors = r["errors"].as_object().unwrap();
    assert!(
        !errors.is_empty(),
        "no errors after the broker died: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for kind in errors.keys() {
        assert!(kind.starts_with("produce: "), "{kind}");
        if kind.contains("broker ") {
            assert!(
                kind.contains(&bootstrap),
                "`{kind}` lost the address {bootstrap}"
            );
        }
    }
    assert!(
        errors.keys().any(|k| k.contains(&bootstrap)),
        "no error names the broker: {errors:?}"
    );
}

/// With `--command-config`, every connection of the run uses the client
/// properties' TLS and SASL: an end-to-end run against a SASL_SSL-only
/// broker counts every record; a protocol not served and a wrong password
/// are clear errors (exit 2).
#[test]
fn e2e_runs_over_sasl_ssl_with_command_config() {
    let certificates = test_support::certs::Certificates::make();
    let tls = certificates.path("");
    let tls = tls.as_path();
    let port = free_port();
    let settings = [
        format!("listeners=SASL_SSL://127.0.0.1:{port}"),
        format!("ssl.keystore.location={}", certificates.text("server-keystore.pem")),
        "sasl.enabled.mechanisms=PLAIN".to_string(),
        "listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_alice=\"alice-secret\";".to_string(),
    ];
    let mut args = vec!["--cores".to_string(), "1".to_string()];
    for setting in &settings {
        args.extend(["--set".to_string(), setting.clone()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let broker = Broker::start_at(&tls.join("data"), &tls.join("strom.log"), port, &args);
    let properties = |password: &str, protocol: &str| {
        let path = tls.join(format!("client-{password}-{protocol}.properties"));
        std::fs::write(
            &path,
            format!(
                "security.protocol={protocol}\nsasl.mechanism=PLAIN\nsasl.username=alice\n\
                 sasl.password={password}\nssl.truststore.location={}\n",
                tls.join("ca.pem").display()
            ),
        )
        .unwrap();
        path.to_string_lossy().into_owned()
    };
    let report = tls.join("report.json");
    let run_with = |config: &str| {
        loadgen(&[
            "e2e",
            "--bootstrap",
            &broker.bootstrap(),
            "--command-config",
            config,
            "--partitions",
            "2",
            "--message-size",
            "200",
            "--rate",
            "1000",
            "--duration",
            "2",
            "--cores",
            "1",
            "--strict",
            "--json",
            report.to_str().unwrap(),
        ])
    };
    let out = run_with(&properties("alice-secret", "SASL_SSL"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}\n{}", broker.log());
    let r = json(&report);
    let produced = r["produce"]["records"].as_u64().unwrap();
    assert!(produced >= 1_000, "produced {produced}");
    let integrity = &r["integrity"];
    assert_eq!(
        integrity["received"].as_u64(),
        Some(produced),
        "{integrity}"
    );
    for field in ["lost", "duplicates", "reordered", "corrupt", "foreign"] {
        assert_eq!(integrity[field].as_u64(), Some(0), "{field}: {integrity}");
    }
    assert!(
        r["errors"].as_object().unwrap().is_empty(),
        "{}",
        r["errors"]
    );

    let refused = run_with(&properties("alice-secret", "KERBEROS"));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("security.protocol KERBEROS is not one of"),
        "{stderr}"
    );
    let wrong = run_with(&properties("not-alice", "SASL_SSL"));
    let stderr = String::from_utf8_lossy(&wrong.stderr);
    assert_eq!(wrong.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("SASL_AUTHENTICATION_FAILED") || stderr.contains("authentication"),
        "{stderr}"
    );
}
