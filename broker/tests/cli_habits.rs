//! The `strom` tools meet the habits of Unix and Kafka users: a closed
//! pipe ends them quietly, SIGINT/SIGTERM make `consume --group` leave its
//! group at once, Kafka's flag names and defaults, `reset-offsets` dry runs,
//! a consumer that outlives a broker restart, `config describe --broker`,
//! and Kafka's console layout. Every test runs the real binary.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{poll_until, run, strom_at, strom_ok, wait_deadline, Broker};

const TOOL_DEADLINE: Duration = Duration::from_secs(60);
/// The session timeout of `strom consume --group` members: leaving must be
/// seen well before it.
const SESSION_TIMEOUT: Duration = Duration::from_secs(10);
const LEAVE_DEADLINE: Duration = Duration::from_secs(5);
const _: () = assert!(LEAVE_DEADLINE.as_secs() < SESSION_TIMEOUT.as_secs());
const GROUP_ARGS: &[&str] = &["--set", "group.initial.rebalance.delay.ms=0"];

fn produce(broker: &Broker, topic: &str, lines: &str) {
    let output = strom_at(
        Some(&broker.bootstrap()),
        &["produce", topic, "--partition", "0"],
        Some(lines.as_bytes()),
    );
    assert!(output.status.success(), "{output:?}");
}

fn spawn_strom(broker: &Broker, args: &[&str], stdout: Stdio) -> Child {
    Command::new(env!("CARGO_BIN_EXE_strom"))
        .args(args)
        .args(["--bootstrap", &broker.bootstrap()])
        .env_remove("STROM_BOOTSTRAP")
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn stderr_of(child: &mut Child) -> String {
    let mut text = String::new();
    if let Some(mut stderr) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
    }
    text
}

fn signal(child: &Child, signal: i32) {
    // SAFETY: kill with a pid of our own child process.
    unsafe { libc::kill(child.id() as i32, signal) };
}

/// Waits until `group describe` shows `wanted`; returns the description.
fn describe_until(broker: &Broker, group: &str, wanted: &str, limit: Duration) -> String {
    let mut last = String::new();
    poll_until(limit, || {
        // Before the member joins, the group does not exist (exit 1).
        let output = strom_at(
            Some(&broker.bootstrap()),
            &["group", "describe", group],
            None,
        );
        last = String::from_utf8_lossy(&output.stdout).to_string();
        (output.status.success() && last.contains(wanted)).then_some(())
    })
    .unwrap_or_else(|| panic!("group {group} never showed {wanted:?}:\n{last}"));
    last
}

#[test]
fn a_closed_stdout_ends_every_printing_tool_quietly() {
    let broker = Broker::start(GROUP_ARGS);
    strom_ok(&broker, &["topic", "create", "piped", "--partitions", "2"]);
    produce(&broker, "piped", "a\nb\nc\n");
    strom_ok(
        &broker,
        &[
            "consume",
            "piped",
            "--group",
            "seen",
            "--from-beginning",
            "-e",
        ],
    );
    let bootstrap = broker.bootstrap();
    let cases: &[&[&str]] = &[
        &["topic", "list"],
        &["topic", "describe"],
        &["topic", "create", "made-while-piped"],
        &["topic", "create", "piped", "--if-not-exists"],
        &["topic", "alter", "piped", "--config", "retention.ms=600000"],
        &["group", "list"],
        &["group", "describe", "seen"],
        &[
            "group",
            "reset-offsets",
            "seen",
            "--topic",
            "piped",
            "--to-earliest",
        ],
        &["config", "describe", "--broker"],
        &["consume", "piped", "--from-beginning", "-e"],
        &["consume", "piped", "--group", "piper", "--from-beginning"],
        &["topic", "delete", "made-while-piped"],
    ];
    for args in cases {
        // A pipe whose reader is gone before the tool starts: its first
        // write to stdout fails with EPIPE, as behind `| head -1` once head
        // has exited.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let mut child = Command::new(env!("CARGO_BIN_EXE_strom"))
            .args(*args)
            .args(["--bootstrap", &bootstrap])
            .stdin(Stdio::null())
            .stdout(writer)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let status = wait_deadline(&mut child, TOOL_DEADLINE).unwrap_or_else(|| {
            let _ = child.kill();
            panic!("strom {args:?} kept running with its stdout closed")
        });
        let stderr = stderr_of(&mut child);
        assert!(!stderr.contains("panicked"), "strom {args:?}: {stderr}");
        assert!(
            status.success(),
            "strom {args:?} exited {status} on a closed stdout: {stderr}"
        );
        assert!(stderr.is_empty(), "strom {args:?} said: {stderr}");
    }
    for args in [&["config-reference"][..], &["--help"], &["topic", "--help"]] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let mut child = Command::new(env!("CARGO_BIN_EXE_strom"))
            .args(args)
            .stdout(writer)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_deadline(&mut child, TOOL_DEADLINE).expect("exits");
        let stderr = stderr_of(&mut child);
        assert!(!stderr.contains("panicked"), "strom {args:?}: {stderr}");
    }
    // The group member whose stdout closed left its group on the way out
    // (committing nothing, its group is gone with it).
    let described = strom_at(
        Some(&broker.bootstrap()),
        &["group", "describe", "piper"],
        None,
    );
    let stderr = String::from_utf8_lossy(&described.stderr);
    assert!(
        stderr.contains("consumer group piper does not exist"),
        "{described:?}"
    );
}

#[test]
fn sigterm_and_sigint_make_a_group_consumer_commit_and_leave_at_once() {
    let broker = Broker::start(GROUP_ARGS);
    strom_ok(
        &broker,
        &["topic", "create", "stoppable", "--partitions", "1"],
    );
    produce(&broker, "stoppable", "1\n2\n3\n");
    for (signal_number, name) in [(libc::SIGTERM, "SIGTERM"), (libc::SIGINT, "SIGINT")] {
        let group = format!("stopped-by-{name}");
        let mut member = spawn_strom(
            &broker,
            &[
                "consume",
                "stoppable",
                "--group",
                &group,
                "--from-beginning",
            ],
            Stdio::null(),
        );
        describe_until(&broker, &group, "MEMBERS 1", TOOL_DEADLINE);
        describe_until(&broker, &group, "stoppable\t0\t3\t3\t0\t", TOOL_DEADLINE);
        let signalled = Instant::now();
        signal(&member, signal_number);
        let status = wait_deadline(&mut member, LEAVE_DEADLINE).unwrap_or_else(|| {
            let _ = member.kill();
            panic!("consume did not exit on {name}")
        });
        let stderr = stderr_of(&mut member);
        assert!(status.success(), "{name}: {status}: {stderr}");
        // No waiting for the session timeout: the member is gone now.
        let described = strom_ok(&broker, &["group", "describe", &group]);
        assert!(
            described.contains("MEMBERS 0") && described.contains("stoppable\t0\t3\t3\t0\t-"),
            "{name}: {described}"
        );
        strom_ok(
            &broker,
            &[
                "group",
                "reset-offsets",
                &group,
                "--topic",
                "stoppable",
                "--to-earliest",
                "--execute",
            ],
        );
        assert!(
            signalled.elapsed() < LEAVE_DEADLINE,
            "{name}: leaving took {:?}",
            signalled.elapsed()
        );
    }
}

#[test]
fn kafka_bootstrap_flags_environment_and_default_port() {
    let broker = Broker::start(&[]);
    strom_ok(&broker, &["topic", "create", "habits"]);
    let bootstrap = broker.bootstrap();
    for flag in ["-b", "--bootstrap-server", "--bootstrap"] {
        let output = run(
            Command::new(env!("CARGO_BIN_EXE_strom"))
                .args(["topic", "list", flag, &bootstrap])
                .env_remove("STROM_BOOTSTRAP"),
            None,
            TOOL_DEADLINE,
        );
        assert!(output.status.success(), "{flag}: {output:?}");
        assert_eq!(output.stdout, b"habits\n", "{flag}");
    }
    // STROM_BOOTSTRAP stands in for the flag; the flag wins over it.
    let from_env = run(
        Command::new(env!("CARGO_BIN_EXE_strom"))
            .args(["topic", "list"])
            .env("STROM_BOOTSTRAP", &bootstrap),
        None,
        TOOL_DEADLINE,
    );
    assert!(from_env.status.success(), "{from_env:?}");
    assert_eq!(from_env.stdout, b"habits\n");
    let flag_wins = run(
        Command::new(env!("CARGO_BIN_EXE_strom"))
            .args(["topic", "list", "-b", &bootstrap])
            .env("STROM_BOOTSTRAP", "127.0.0.1:1"),
        None,
        TOOL_DEADLINE,
    );
    assert!(flag_wins.status.success(), "{flag_wins:?}");
    // A host alone means Kafka's port 9092 (whatever answers there, the
    // address must be tried, not refused as malformed).
    let bare = run(
        Command::new(env!("CARGO_BIN_EXE_strom"))
            .args(["topic", "list", "--timeout-ms", "3000"])
            .env("STROM_BOOTSTRAP", "localhost"),
        None,
        TOOL_DEADLINE,
    );
    let stderr = String::from_utf8_lossy(&bare.stderr);
    assert!(
        bare.status.success() || stderr.contains("localhost:9092"),
        "{stderr}"
    );
    assert!(!stderr.contains("resolve"), "{stderr}");
    // A list, as Kafka's tools take: the first broker that answers.
    let dead = format!("127.0.0.1:{}", common::free_port());
    let listed = format!("{dead},{bootstrap}");
    let list = strom_at(None, &["topic", "list", "-b", &listed], None);
    assert!(list.status.success(), "{list:?}");
    assert_eq!(list.stdout, b"habits\n");
    let none = format!("{dead},127.0.0.1:{}", common::free_port());
    let list = strom_at(
        None,
        &["topic", "list", "-b", &none, "--timeout-ms", "1000"],
        None,
    );
    assert_eq!(list.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&list.stderr).contains("no bootstrap broker answered"),
        "{list:?}"
    );
}

#[test]
fn topic_create_if_not_exists_and_describe_shows_partition_offsets() {
    let broker = Broker::start(&[]);
    strom_ok(&broker, &["topic", "create", "kept", "--partitions", "2"]);
    let again = strom_ok(&broker, &["topic", "create", "kept", "--if-not-exists"]);
    assert_eq!(again, "Topic kept already exists.\n");
    let refused = strom_at(
        Some(&broker.bootstrap()),
        &["topic", "create", "kept"],
        None,
    );
    assert_eq!(refused.status.code(), Some(1));
    produce(&broker, "kept", "x\ny\nz\n");
    let described = strom_ok(&broker, &["topic", "describe", "kept"]);
    assert!(
        described.contains(
            "Partition: 0\tLeader: 0\tReplicas: 0\tIsr: 0\tStartOffset: 0\tEndOffset: 3\n"
        ) && described.contains(
            "Partition: 1\tLeader: 0\tReplicas: 0\tIsr: 0\tStartOffset: 0\tEndOffset: 0\n"
        ),
        "{described}"
    );
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn committed(described: &str, topic: &str, partition: i32) -> i64 {
    let prefix = format!("{topic}\t{partition}\t");
    let line = described
        .lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no {topic}-{partition}:\n{described}"));
    line.split('\t').nth(2).unwrap().parse().unwrap()
}

#[test]
fn reset_offsets_dry_runs_unless_executed_and_shifts_by_time_and_topics() {
    let broker = Broker::start(GROUP_ARGS);
    strom_ok(&broker, &["topic", "create", "ra", "--partitions", "1"]);
    strom_ok(&broker, &["topic", "create", "rb", "--partitions", "1"]);
    produce(&broker, "ra", "0\n1\n2\n3\n4\n");
    // Later records get later timestamps: wait out the clock, not a guess.
    let middle = now_ms() + 1;
    poll_until(TOOL_DEADLINE, || (now_ms() > middle).then_some(())).unwrap();
    produce(&broker, "ra", "5\n6\n7\n8\n9\n");
    produce(&broker, "rb", "0\n1\n2\n3\n4\n5\n6\n7\n8\n9\n");
    for topic in ["ra", "rb"] {
        strom_ok(
            &broker,
            &["consume", topic, "--group", "rg", "--from-beginning", "-e"],
        );
    }
    let reset = |extra: &[&str]| -> String {
        let mut args = vec!["group", "reset-offsets", "rg"];
        args.extend_from_slice(extra);
        strom_ok(&broker, &args)
    };
    let state = || strom_ok(&broker, &["group", "describe", "rg"]);

    // Without --execute (or with --dry-run) nothing changes.
    for dry in [
        &["--topic", "ra", "--to-earliest"][..],
        &["--topic", "ra", "--to-earliest", "--dry-run"],
    ] {
        let plan = reset(dry);
        assert_eq!(plan, "GROUP\tTOPIC\tPARTITION\tNEW-OFFSET\nrg\tra\t0\t0\n");
        assert_eq!(committed(&state(), "ra", 0), 10);
    }
    let dry = strom_at(
        Some(&broker.bootstrap()),
        &[
            "group",
            "reset-offsets",
            "rg",
            "--topic",
            "ra",
            "--to-latest",
        ],
        None,
    );
    assert!(
        String::from_utf8_lossy(&dry.stderr).contains("--execute"),
        "a dry run says how to apply it: {dry:?}"
    );
    let conflicting = strom_at(
        Some(&broker.bootstrap()),
        &[
            "group",
            "reset-offsets",
            "rg",
            "--topic",
            "ra",
            "--to-latest",
            "--dry-run",
            "--execute",
        ],
        None,
    );
    assert_eq!(conflicting.status.code(), Some(2));

    reset(&["--topic", "ra", "--shift-by", "-3", "--execute"]);
    assert_eq!(committed(&state(), "ra", 0), 7);
    reset(&["--all-topics", "--to-offset", "2", "--execute"]);
    let described = state();
    assert_eq!(committed(&described, "ra", 0), 2);
    assert_eq!(committed(&described, "rb", 0), 2);
    // Shifts stay within the log.
    reset(&["--all-topics", "--shift-by", "-5", "--execute"]);
    assert_eq!(committed(&state(), "rb", 0), 0);
    reset(&["--topic", "rb", "--shift-by", "50", "--execute"]);
    assert_eq!(committed(&state(), "rb", 0), 10);

    // By time: the first record at or after it (ListOffsets by timestamp).
    let middle_text = middle.to_string();
    reset(&["--topic", "ra", "--to-datetime", &middle_text, "--execute"]);
    assert_eq!(committed(&state(), "ra", 0), 5);
    reset(&[
        "--topic",
        "ra",
        "--to-datetime",
        "2001-01-01T02:00:00+02:00",
        "--execute",
    ]);
    assert_eq!(committed(&state(), "ra", 0), 0);
    reset(&[
        "--topic",
        "ra",
        "--to-datetime",
        "2100-01-01T00:00:00.000Z",
        "--execute",
    ]);
    assert_eq!(committed(&state(), "ra", 0), 10);
    let bad = strom_at(
        Some(&broker.bootstrap()),
        &[
            "group",
            "reset-offsets",
            "rg",
            "--topic",
            "ra",
            "--to-datetime",
            "yesterday",
        ],
        None,
    );
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--to-datetime"));
    // A partition without a committed offset cannot be shifted.
    let unshiftable = strom_at(
        Some(&broker.bootstrap()),
        &[
            "group",
            "reset-offsets",
            "fresh",
            "--topic",
            "ra",
            "--shift-by",
            "1",
        ],
        None,
    );
    assert_eq!(unshiftable.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&unshiftable.stderr).contains("no committed offset"));
}

/// Lines a running tool prints, as they come.
fn lines_of(child: &mut Child) -> mpsc::Receiver<String> {
    let stdout = child.stdout.take().unwrap();
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if sender.send(line).is_err() {
                return;
            }
        }
    });
    receiver
}

fn receive(lines: &mpsc::Receiver<String>, count: usize) -> Vec<String> {
    let deadline = Instant::now() + TOOL_DEADLINE;
    let mut got = Vec::with_capacity(count);
    while got.len() < count {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => got.push(line),
            Err(_) => panic!("only {got:?} of {count} lines arrived"),
        }
    }
    got
}

#[test]
fn consume_reconnects_after_a_broker_restart() {
    let mut broker = Broker::start(GROUP_ARGS);
    strom_ok(
        &broker,
        &["topic", "create", "restarted", "--partitions", "1"],
    );
    produce(&broker, "restarted", "before-1\nbefore-2\n");
    let mut plain = spawn_strom(
        &broker,
        &["consume", "restarted", "--from-beginning"],
        Stdio::piped(),
    );
    let mut member = spawn_strom(
        &broker,
        &[
            "consume",
            "restarted",
            "--group",
            "survivors",
            "--from-beginning",
        ],
        Stdio::piped(),
    );
    let plain_lines = lines_of(&mut plain);
    let member_lines = lines_of(&mut member);
    assert_eq!(receive(&plain_lines, 2), ["before-1", "before-2"]);
    assert_eq!(receive(&member_lines, 2), ["before-1", "before-2"]);
    describe_until(
        &broker,
        "survivors",
        "restarted\t0\t2\t2\t0\t",
        TOOL_DEADLINE,
    );

    broker.restart();
    produce(&broker, "restarted", "after-1\nafter-2\n");
    assert_eq!(receive(&plain_lines, 2), ["after-1", "after-2"]);
    assert_eq!(receive(&member_lines, 2), ["after-1", "after-2"]);
    for (mut child, what) in [(plain, "plain"), (member, "member")] {
        signal(&child, libc::SIGTERM);
        let status = wait_deadline(&mut child, LEAVE_DEADLINE).unwrap_or_else(|| {
            let _ = child.kill();
            panic!("{what} consumer did not stop")
        });
        let stderr = stderr_of(&mut child);
        assert!(status.success(), "{what}: {status}: {stderr}");
        assert!(
            stderr.contains("reconnecting") && stderr.contains("attempt 1 of"),
            "{what} says what it does: {stderr}"
        );
    }
    let described = strom_ok(&broker, &["group", "describe", "survivors"]);
    assert!(
        described.contains("MEMBERS 0") && described.contains("restarted\t0\t4\t4\t0\t-"),
        "{described}"
    );
}

#[test]
fn consume_gives_up_with_a_clear_message_when_the_broker_stays_away() {
    let mut broker = Broker::start(&[]);
    strom_ok(
        &broker,
        &["topic", "create", "abandoned", "--partitions", "1"],
    );
    let mut consumer = spawn_strom(&broker, &["consume", "abandoned"], Stdio::piped());
    // Connected and fetching before the broker goes for good: it printed
    // a record produced after it started.
    let lines = lines_of(&mut consumer);
    let first = poll_until(TOOL_DEADLINE, || {
        produce(&broker, "abandoned", "still-there\n");
        lines.recv_timeout(Duration::from_millis(200)).ok()
    });
    assert_eq!(first.as_deref(), Some("still-there"));
    broker.stop();
    let status = wait_deadline(&mut consumer, Duration::from_secs(120)).unwrap_or_else(|| {
        let _ = consumer.kill();
        panic!("consume never gave up")
    });
    let stderr = stderr_of(&mut consumer);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("gave up after 30 attempts to reconnect"),
        "{stderr}"
    );
}

#[test]
fn config_describe_broker_prints_every_setting_with_its_source() {
    let broker = Broker::start(&["--set", "num.partitions=3"]);
    let described = strom_ok(&broker, &["config", "describe", "--broker"]);
    let mut lines = described.lines();
    assert_eq!(lines.next(), Some("All configs for broker 0 are:"));
    let settings: Vec<&str> = lines.collect();
    for wanted in [
        "  num.partitions=3\tsource=STATIC_BROKER_CONFIG",
        "  broker.id=0\tsource=DEFAULT_CONFIG",
        "  auto.create.topics.enable=",
        "  message.max.bytes=",
        "  log.dirs=",
    ] {
        assert!(
            settings.iter().any(|l| l.starts_with(wanted)),
            "{wanted}:\n{described}"
        );
    }
    assert!(
        settings.iter().all(|l| l.contains("\tsource=")),
        "{described}"
    );
    let by_id = strom_ok(&broker, &["config", "describe", "--broker", "0"]);
    assert_eq!(by_id, described);
    // Without --broker: the broker connected to.
    let connected = strom_ok(&broker, &["config", "describe"]);
    assert_eq!(connected, described);
    let bad = strom_at(
        Some(&broker.bootstrap()),
        &["config", "describe", "--broker", "x"],
        None,
    );
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("node id"));
}

#[test]
fn consume_prints_the_timestamp_first_as_kafkas_console_consumer() {
    let broker = Broker::start(&[]);
    strom_ok(
        &broker,
        &["topic", "create", "stamped", "--partitions", "1"],
    );
    let output = strom_at(
        Some(&broker.bootstrap()),
        &["produce", "stamped", "--key-separator", ":"],
        Some(b"k:v\n"),
    );
    assert!(output.status.success(), "{output:?}");
    let printed = strom_ok(
        &broker,
        &[
            "consume",
            "stamped",
            "--from-beginning",
            "-e",
            "--print-offset",
            "--print-partition",
            "--print-key",
            "--print-timestamp",
        ],
    );
    let fields: Vec<&str> = printed.trim_end().split('\t').collect();
    assert_eq!(fields.len(), 5, "{printed}");
    let millis: i64 = fields[0]
        .strip_prefix("CreateTime:")
        .unwrap_or_else(|| panic!("the timestamp comes first: {printed}"))
        .parse()
        .unwrap();
    assert!(millis > 1_600_000_000_000, "{printed}");
    assert_eq!(fields[1..], ["Partition:0", "Offset:0", "k", "v"]);
}

#[test]
fn group_describe_of_an_unknown_group_says_so_and_fails() {
    let broker = Broker::start(&[]);
    let output = strom_at(
        Some(&broker.bootstrap()),
        &["group", "describe", "nobody-here"],
        None,
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("consumer group nobody-here does not exist"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty());
}

#[test]
fn help_explains_the_kafka_habits() {
    let help = |args: &[&str]| -> String {
        let output = strom_at(None, args, None);
        assert!(output.status.success(), "{args:?}: {output:?}");
        String::from_utf8(output.stdout).unwrap()
    };
    let checks: &[(&[&str], &[&str])] = &[
        (
            &["group", "reset-offsets", "--help"],
            &[
                "--execute",
                "--dry-run",
                "--shift-by",
                "--all-topics",
                "--to-datetime",
                "ISO-8601",
            ],
        ),
        (&["topic", "create", "--help"], &["--if-not-exists"]),
        (&["topic", "describe", "--help"], &["start and end"]),
        (
            &["consume", "--help"],
            &[
                "-b, --bootstrap",
                "--bootstrap-server",
                "STROM_BOOTSTRAP",
                "9092",
                "SIGTERM",
            ],
        ),
        (&["config", "describe", "--help"], &["--broker", "source"]),
    ];
    for (args, wanted) in checks {
        let text = help(args);
        for word in *wanted {
            assert!(text.contains(word), "{args:?} lacks {word}:\n{text}");
        }
    }
}

/// Kills and reaps a child process when the test ends, passed or not.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn group_describe_shows_member_hosts_as_kafka_does() {
    let broker = Broker::start(GROUP_ARGS);
    strom_ok(&broker, &["topic", "create", "hosted", "--partitions", "1"]);
    // A real client as the member: kcat's balanced consumer.
    let member = Command::new("kcat")
        .args(["-b", &broker.bootstrap(), "-G", "hosted-group", "hosted"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("kcat is installed");
    let _member = KillOnDrop(member);
    let described = describe_until(&broker, "hosted-group", "MEMBERS 1", TOOL_DEADLINE);
    // Kafka records the connection's peer as Java prints an InetAddress.
    assert!(
        described.contains("\tCLIENT rdkafka\tHOST /127.0.0.1\t"),
        "{described}"
    );
}
