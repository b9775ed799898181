//! `strom topic`, `strom produce` and `strom consume` against a real strom
//! process: topic administration, byte-exact round trips, offsets and
//! partitions, headers per line, starting from a time, listings as JSON
//! and without internal topics, failures, and cross-checks with kcat
//! (needs `apt-get install -y kcat`).

mod common;

use std::collections::{BTreeMap, HashMap};
use std::process::Command;
use std::time::Duration;

use common::{free_port, run, strom_bytes, strom_fails, strom_ok, Broker};

const TOOL_DEADLINE: Duration = Duration::from_secs(60);

#[test]
fn topic_create_list_describe_alter_delete() {
    let broker = Broker::start(&["--set", "num.partitions=2"]);
    let created = strom_ok(
        &broker,
        &[
            "topic",
            "create",
            "orders",
            "--partitions",
            "3",
            "--config",
            "retention.ms=60000",
            "--config",
            "cleanup.policy=delete",
        ],
    );
    assert_eq!(created, "Created topic orders.\n");
    strom_ok(&broker, &["topic", "create", "audit"]);
    let checked = strom_ok(&broker, &["topic", "create", "dry", "--validate-only"]);
    assert_eq!(checked, "Topic dry would be created.\n");
    assert_eq!(strom_ok(&broker, &["topic", "list"]), "audit\norders\n");

    let described = strom_ok(&broker, &["topic", "describe", "orders"]);
    let mut expected = String::from(
        "Topic: orders\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: cleanup.policy=delete,retention.ms=60000\n",
    );
    for p in 0..3 {
        expected.push_str(&format!(
            "\tTopic: orders\tPartition: {p}\tLeader: 0\tReplicas: 0\tIsr: 0\tStartOffset: 0\tEndOffset: 0\n"
        ));
    }
    assert_eq!(described, expected);
    // The broker default partition count applies without --partitions.
    let audit = strom_ok(&broker, &["topic", "describe", "audit"]);
    assert!(
        audit.starts_with("Topic: audit\tPartitionCount: 2\tReplicationFactor: 1\tConfigs: \n"),
        "{audit}"
    );
    let all = strom_ok(&broker, &["topic", "describe", "audit", "--all-configs"]);
    assert!(all.contains("retention.ms="), "{all}");

    let altered = strom_ok(
        &broker,
        &[
            "topic",
            "alter",
            "orders",
            "--config",
            "segment.bytes=1048576",
            "--delete-config",
            "retention.ms",
            "--partitions",
            "5",
        ],
    );
    assert_eq!(
        altered,
        "Updated configs of topic orders.\nTopic orders now has 5 partitions.\n"
    );
    let described = strom_ok(&broker, &["topic", "describe", "orders"]);
    assert!(
        described.starts_with(
            "Topic: orders\tPartitionCount: 5\tReplicationFactor: 1\tConfigs: cleanup.policy=delete,segment.bytes=1048576\n"
        ),
        "{described}"
    );
    assert_eq!(described.lines().count(), 6, "{described}");

    // Failures name Kafka's error and exit 1.
    let again = strom_fails(&broker, &["topic", "create", "orders"], None);
    assert!(again.contains("TOPIC_ALREADY_EXISTS"), "{again}");
    let shrink = strom_fails(
        &broker,
        &["topic", "alter", "orders", "--partitions", "2"],
        None,
    );
    assert!(shrink.contains("INVALID_PARTITIONS"), "{shrink}");
    let bad_config = strom_fails(
        &broker,
        &["topic", "alter", "orders", "--config", "no.such.key=1"],
        None,
    );
    assert!(bad_config.contains("cannot change configs"), "{bad_config}");
    let bad_name = strom_fails(&broker, &["topic", "create", "bad/name"], None);
    assert!(bad_name.contains("INVALID_TOPIC_EXCEPTION"), "{bad_name}");
    let missing = strom_fails(&broker, &["topic", "describe", "missing"], None);
    assert!(missing.contains("UNKNOWN_TOPIC_OR_PARTITION"), "{missing}");

    let deleted = strom_ok(&broker, &["topic", "delete", "orders", "audit"]);
    assert_eq!(deleted, "Deleted topic orders.\nDeleted topic audit.\n");
    assert_eq!(strom_ok(&broker, &["topic", "list"]), "");
    let gone = strom_fails(&broker, &["topic", "delete", "orders"], None);
    assert!(gone.contains("UNKNOWN_TOPIC_OR_PARTITION"), "{gone}");
}

/// Any bytes but `\n`, so every line is one record.
fn value_bytes(i: usize) -> Vec<u8> {
    let mut value = format!("value-{i}:").into_bytes();
    value.extend(
        protocol::batch::build::pattern(i as u64, i % 300)
            .into_iter()
            .map(|b| if b == b'\n' { 0xff } else { b }),
    );
    value
}

/// Splits a consumed line `Partition:P\tOffset:O\tKEY\tVALUE` (keys have no
/// tab; values may).
fn parse_line(line: &[u8]) -> (i32, i64, Vec<u8>, Vec<u8>) {
    let mut fields = line.splitn(4, |&b| b == b'\t');
    let mut next = || fields.next().expect("four fields").to_vec();
    let partition = String::from_utf8(next()).unwrap();
    let offset = String::from_utf8(next()).unwrap();
    let key = next();
    let value = next();
    (
        partition
            .strip_prefix("Partition:")
            .unwrap()
            .parse()
            .unwrap(),
        offset.strip_prefix("Offset:").unwrap().parse().unwrap(),
        key,
        value,
    )
}

fn lines(output: &[u8]) -> Vec<&[u8]> {
    let mut lines: Vec<&[u8]> = output.split(|&b| b == b'\n').collect();
    assert_eq!(lines.pop(), Some(&b""[..]), "output ends with a newline");
    lines
}

#[test]
fn produced_lines_consume_back_byte_exact() {
    const COUNT: usize = 3_000;
    let broker = Broker::start(&[]);
    strom_bytes(
        &broker,
        &["topic", "create", "exact", "--partitions", "3"],
        None,
    );
    let mut input = Vec::new();
    for i in 0..COUNT {
        input.extend_from_slice(format!("key-{}", i % 50).as_bytes());
        input.extend_from_slice(b"=>");
        input.extend_from_slice(&value_bytes(i));
        input.push(b'\n');
    }
    strom_bytes(
        &broker,
        &["produce", "exact", "--key-separator", "=>", "--acks", "all"],
        Some(&input),
    );
    let output = strom_bytes(
        &broker,
        &[
            "consume",
            "exact",
            "--from-beginning",
            "--exit-at-end",
            "--print-partition",
            "--print-offset",
            "--print-key",
        ],
        None,
    );
    let mut partition_of_key: HashMap<Vec<u8>, i32> = HashMap::new();
    let mut per_partition: BTreeMap<i32, Vec<(i64, usize)>> = BTreeMap::new();
    let mut seen = vec![false; COUNT];
    for line in lines(&output) {
        let (partition, offset, key, value) = parse_line(line);
        let text = String::from_utf8_lossy(&value);
        let i: usize = text
            .strip_prefix("value-")
            .and_then(|rest| rest.split(':').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("value shape: {text}"));
        assert_eq!(value, value_bytes(i), "value {i} byte-exact");
        assert_eq!(key, format!("key-{}", i % 50).into_bytes(), "key of {i}");
        assert!(!seen[i], "record {i} twice");
        seen[i] = true;
        let owner = *partition_of_key.entry(key).or_insert(partition);
        assert_eq!(owner, partition, "a key always lands in one partition");
        per_partition
            .entry(partition)
            .or_default()
            .push((offset, i));
    }
    assert!(seen.iter().all(|&s| s), "every record consumed");
    assert!(per_partition.len() > 1, "keys spread over partitions");
    for (partition, records) in &per_partition {
        for (n, pair) in records.windows(2).enumerate() {
            assert_eq!(
                pair[1].0,
                pair[0].0 + 1,
                "partition {partition} offsets at {n}"
            );
            assert!(
                pair[0].1 < pair[1].1,
                "partition {partition} keeps input order"
            );
        }
    }

    // acks=1 and acks=0 deliver too; a line without the separator has a null key.
    strom_bytes(
        &broker,
        &["produce", "acks", "--acks", "1", "--key-separator", "|"],
        Some(b"k|one\nno separator\n"),
    );
    strom_bytes(
        &broker,
        &["produce", "acks", "--acks", "0", "--partition", "0"],
        Some(b"three"),
    );
    let output = strom_bytes(
        &broker,
        &[
            "consume",
            "acks",
            "--from-beginning",
            "--max-messages",
            "3",
            "--print-key",
        ],
        None,
    );
    assert_eq!(output, b"k\tone\nnull\tno separator\nnull\tthree\n");
}

#[test]
fn consume_from_an_offset_of_one_partition() {
    let broker = Broker::start(&[]);
    strom_bytes(
        &broker,
        &["topic", "create", "seek", "--partitions", "2"],
        None,
    );
    let input: String = (0..10).map(|i| format!("record-{i}\n")).collect();
    strom_bytes(
        &broker,
        &[
            "produce",
            "seek",
            "--partition",
            "1",
            "--header",
            "origin=cli",
            "--header",
            "n=2",
        ],
        Some(input.as_bytes()),
    );
    let output = strom_bytes(
        &broker,
        &[
            "consume",
            "seek",
            "--partition",
            "1",
            "--offset",
            "4",
            "--max-messages",
            "3",
            "--print-offset",
            "--print-headers",
        ],
        None,
    );
    assert_eq!(
        String::from_utf8(output).unwrap(),
        "Offset:4\torigin:cli,n:2\trecord-4\n\
         Offset:5\torigin:cli,n:2\trecord-5\n\
         Offset:6\torigin:cli,n:2\trecord-6\n"
    );
    let empty = strom_bytes(
        &broker,
        &[
            "consume",
            "seek",
            "--partition",
            "0",
            "--from-beginning",
            "-e",
        ],
        None,
    );
    assert!(empty.is_empty());
    // Without --from-beginning only new records are read.
    let latest = strom_bytes(&broker, &["consume", "seek", "-e"], None);
    assert!(latest.is_empty());
    let stamped = String::from_utf8(strom_bytes(
        &broker,
        &[
            "consume",
            "seek",
            "--partition",
            "1",
            "--offset",
            "9",
            "-e",
            "--print-timestamp",
            "--field-separator",
            " | ",
        ],
        None,
    ))
    .unwrap();
    let (time, value) = stamped.trim_end().split_once(" | ").unwrap();
    let millis: i64 = time.strip_prefix("CreateTime:").unwrap().parse().unwrap();
    assert!(millis > 1_600_000_000_000, "{stamped}");
    assert_eq!(value, "record-9");
    let past_end = strom_fails(
        &broker,
        &[
            "consume",
            "seek",
            "--partition",
            "1",
            "--offset",
            "99",
            "-e",
        ],
        None,
    );
    assert!(past_end.contains("OFFSET_OUT_OF_RANGE"), "{past_end}");
    let no_partition = strom_fails(&broker, &["consume", "seek", "--partition", "5"], None);
    assert!(no_partition.contains("no partition 5"), "{no_partition}");
}

#[test]
fn unreachable_broker_and_failed_requests_exit_non_zero() {
    let broker = Broker::start(&["--set", "auto.create.topics.enable=false"]);
    let closed = format!("127.0.0.1:{}", free_port());
    for args in [
        &["topic", "list"][..],
        &["produce", "t"],
        &["consume", "t", "-e"],
    ] {
        let output = run(
            Command::new(env!("CARGO_BIN_EXE_strom")).args(args).args([
                "--bootstrap",
                &closed,
                "--timeout-ms",
                "1000",
            ]),
            Some(b"x\n"),
            TOOL_DEADLINE,
        );
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert!(
            stderr.contains(&format!("broker {closed} is unreachable")),
            "{args:?}: {stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    }
    let unknown = strom_fails(&broker, &["consume", "nowhere", "-e"], None);
    assert!(unknown.contains("UNKNOWN_TOPIC_OR_PARTITION"), "{unknown}");
    let unknown = strom_fails(&broker, &["produce", "nowhere"], Some(b"x\n"));
    assert!(unknown.contains("UNKNOWN_TOPIC_OR_PARTITION"), "{unknown}");
    strom_bytes(
        &broker,
        &["topic", "create", "one", "--partitions", "1"],
        None,
    );
    let bad_partition = strom_fails(
        &broker,
        &["produce", "one", "--partition", "7"],
        Some(b"x\n"),
    );
    assert!(bad_partition.contains("no partition 7"), "{bad_partition}");
    strom_bytes(
        &broker,
        &["topic", "alter", "one", "--config", "max.message.bytes=200"],
        None,
    );
    let mut big = vec![b'x'; 1000];
    big.push(b'\n');
    let too_large = strom_fails(&broker, &["produce", "one"], Some(&big));
    assert!(too_large.contains("MESSAGE_TOO_LARGE"), "{too_large}");
}

#[test]
fn help_explains_every_flag() {
    let help = |args: &[&str]| {
        let output = run(
            Command::new(env!("CARGO_BIN_EXE_strom")).args(args),
            None,
            TOOL_DEADLINE,
        );
        assert!(output.status.success(), "{args:?}");
        String::from_utf8(output.stdout).unwrap()
    };
    let produce = help(&["produce", "--help"]);
    for flag in [
        "--key-separator",
        "--acks",
        "--partition",
        "--header",
        "--header-separator",
        "NO_HEADERS",
        "--bootstrap",
    ] {
        assert!(
            produce.contains(flag),
            "produce --help lacks {flag}:\n{produce}"
        );
    }
    let consume = help(&["consume", "--help"]);
    for flag in [
        "--from-beginning",
        "--partition",
        "--offset",
        "--max-messages",
        "--exit-at-end",
        "--print-key",
        "--print-headers",
        "--print-timestamp",
        "--print-partition",
        "--print-offset",
        "--from-timestamp",
        "--bootstrap",
    ] {
        assert!(
            consume.contains(flag),
            "consume --help lacks {flag}:\n{consume}"
        );
    }
    let topic = help(&["topic", "--help"]);
    for command in ["create", "list", "describe", "alter", "delete"] {
        assert!(topic.contains(command), "{topic}");
    }
    let create = help(&["topic", "create", "--help"]);
    assert!(
        create.contains("--partitions") && create.contains("--config"),
        "{create}"
    );
    let checks: &[(&[&str], &[&str])] = &[
        (
            &["topic", "describe", "--help"],
            &[
                "--under-replicated-partitions",
                "--unavailable-partitions",
                "--under-min-isr-partitions",
                "--at-min-isr-partitions",
                "--exclude-internal",
                "--format",
                "retriable",
            ],
        ),
        (
            &["topic", "list", "--help"],
            &["--exclude-internal", "--format"],
        ),
        (&["group", "list", "--help"], &["--format", "every broker"]),
        (
            &["group", "describe", "--help"],
            &["--all-groups", "--format"],
        ),
        (&["config", "describe", "--help"], &["--format", "--broker"]),
    ];
    for (args, wanted) in checks {
        let text = help(args);
        for word in *wanted {
            assert!(text.contains(word), "{args:?} lacks {word}:\n{text}");
        }
    }
}

#[test]
fn strom_and_kcat_read_each_others_records() {
    let broker = Broker::start(&[]);
    strom_bytes(
        &broker,
        &["topic", "create", "cross", "--partitions", "4"],
        None,
    );
    // strom writes, kcat reads.
    let input: String = (0..500)
        .map(|i| format!("k{i}\tv{i} with spaces\n"))
        .collect();
    strom_bytes(
        &broker,
        &[
            "produce",
            "cross",
            "--key-separator",
            "\t",
            "--header",
            "from=strom",
        ],
        Some(input.as_bytes()),
    );
    let read = common::kcat(
        &broker,
        &["-C", "-t", "cross", "-e", "-q", "-f", "%p|%k|%s|%h\n"],
        None,
    );
    let mut strom_partition: HashMap<String, i32> = HashMap::new();
    for line in String::from_utf8(read).unwrap().lines() {
        let fields: Vec<&str> = line.split('|').collect();
        assert_eq!(fields.len(), 4, "{line}");
        let i: usize = fields[1].strip_prefix('k').unwrap().parse().unwrap();
        assert_eq!(fields[2], format!("v{i} with spaces"));
        assert_eq!(fields[3], "from=strom");
        strom_partition.insert(fields[1].to_string(), fields[0].parse().unwrap());
    }
    assert_eq!(strom_partition.len(), 500);

    // kcat writes with the Java-compatible murmur2 partitioner, strom reads:
    // every key lands where strom put it.
    let input: String = (0..500).map(|i| format!("k{i}:kcat-{i}\n")).collect();
    strom_bytes(
        &broker,
        &["topic", "create", "back", "--partitions", "4"],
        None,
    );
    common::kcat(
        &broker,
        &[
            "-P",
            "-t",
            "back",
            "-K",
            ":",
            "-H",
            "from=kcat",
            "-X",
            "topic.partitioner=murmur2_random",
        ],
        Some(input.as_bytes()),
    );
    let output = strom_bytes(
        &broker,
        &[
            "consume",
            "back",
            "--from-beginning",
            "-e",
            "--print-partition",
            "--print-offset",
            "--print-headers",
            "--print-key",
        ],
        None,
    );
    let mut count = 0;
    for line in String::from_utf8(output).unwrap().lines() {
        let fields: Vec<&str> = line.split('\t').collect();
        assert_eq!(fields.len(), 5, "{line}");
        let partition: i32 = fields[0]
            .strip_prefix("Partition:")
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(fields[2], "from:kcat");
        let i: usize = fields[3].strip_prefix('k').unwrap().parse().unwrap();
        assert_eq!(fields[4], format!("kcat-{i}"));
        assert_eq!(
            strom_partition[fields[3]], partition,
            "kcat's murmur2 partition of {} equals strom's",
            fields[3]
        );
        count += 1;
    }
    assert_eq!(count, 500);
}

#[test]
fn produce_reads_each_lines_headers_and_consume_prints_them_back() {
    let broker = Broker::start(&[]);
    for topic in ["headed", "again"] {
        strom_ok(&broker, &["topic", "create", topic, "--partitions", "1"]);
    }
    let input = "trace:1,source:web|k1:v1\n\
                 NO_HEADERS|k2:v2\n\
                 |k3:v3\n\
                 flag|k4:v4\n\
                 no header separator here:v5\n\
                 a:x:y,b:|k6:v6|with a bar\n";
    strom_bytes(
        &broker,
        &[
            "produce",
            "headed",
            "--header-separator",
            "|",
            "--key-separator",
            ":",
            "--header",
            "from=strom",
        ],
        Some(input.as_bytes()),
    );
    let consume = |topic: &str| {
        String::from_utf8(strom_bytes(
            &broker,
            &[
                "consume",
                topic,
                "--from-beginning",
                "-e",
                "--print-headers",
                "--print-key",
            ],
            None,
        ))
        .unwrap()
    };
    let printed = consume("headed");
    assert_eq!(
        printed,
        "from:strom,trace:1,source:web\tk1\tv1\n\
         from:strom\tk2\tv2\n\
         from:strom\tk3\tv3\n\
         from:strom,flag:null\tk4\tv4\n\
         from:strom\tno header separator here\tv5\n\
         from:strom,a:x:y,b:\tk6\tv6|with a bar\n"
    );
    // What consume prints, produce reads back: the same records.
    strom_bytes(
        &broker,
        &[
            "produce",
            "again",
            "--header-separator",
            "\t",
            "--key-separator",
            "\t",
        ],
        Some(printed.as_bytes()),
    );
    assert_eq!(consume("again"), printed);
    let empty = strom_fails(
        &broker,
        &["produce", "again", "--header-separator", ""],
        Some(b"x\n"),
    );
    assert!(empty.contains("--header-separator"), "{empty}");
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[test]
fn consume_starts_at_the_first_record_of_a_time() {
    let broker = Broker::start(&[]);
    strom_ok(&broker, &["topic", "create", "times", "--partitions", "3"]);
    let batch =
        |prefix: &str| -> String { (0..12).map(|i| format!("k{i}:{prefix}-{i}\n")).collect() };
    let produce = |text: &str| {
        strom_bytes(
            &broker,
            &["produce", "times", "--key-separator", ":"],
            Some(text.as_bytes()),
        );
    };
    produce(&batch("early"));
    // Every early record is stamped before `from`, every late one at or
    // after it (the producer stamps records with this clock as it reads them).
    let from = now_ms() + 1;
    common::poll_until(Duration::from_secs(5), || (now_ms() > from).then_some(()))
        .expect("the clock moves on");
    produce(&batch("late"));
    let read = |from: &str| -> Vec<String> {
        let output = strom_bytes(
            &broker,
            &["consume", "times", "--from-timestamp", from, "-e"],
            None,
        );
        let mut values: Vec<String> = String::from_utf8(output)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect();
        values.sort();
        values
    };
    let sorted = |text: String| -> Vec<String> {
        let mut values: Vec<String> = text
            .lines()
            .map(|l| l.split_once(':').unwrap().1.to_string())
            .collect();
        values.sort();
        values
    };
    assert_eq!(read(&from.to_string()), sorted(batch("late")));
    let mut everything = sorted(batch("early"));
    everything.extend(sorted(batch("late")));
    everything.sort();
    assert_eq!(read("1970-01-01T00:00:00Z"), everything);
    // Nothing that late: every partition starts at its end.
    assert_eq!(read("2200-01-01T00:00:00+02:00"), Vec::<String>::new());
    let bad = strom_fails(
        &broker,
        &["consume", "times", "--from-timestamp", "yesterday"],
        None,
    );
    assert!(bad.contains("bad --from-timestamp"), "{bad}");
    let both = common::strom(
        &broker,
        &[
            "consume",
            "times",
            "--from-timestamp",
            "0",
            "--from-beginning",
        ],
        None,
    );
    assert_eq!(both.status.code(), Some(2), "{both:?}");
}

#[test]
fn listings_print_json_and_leave_out_internal_topics() {
    let broker = Broker::start(&["--set", "group.initial.rebalance.delay.ms=0"]);
    strom_ok(
        &broker,
        &[
            "topic",
            "create",
            "alpha",
            "--partitions",
            "2",
            "--config",
            "retention.ms=60000",
        ],
    );
    strom_bytes(
        &broker,
        &["produce", "alpha", "--partition", "1"],
        Some(b"one\ntwo\nthree\n"),
    );
    strom_bytes(
        &broker,
        &[
            "consume",
            "alpha",
            "--group",
            "readers",
            "--from-beginning",
            "-e",
        ],
        None,
    );
    let json = |args: &[&str]| -> serde_json::Value {
        let mut all = args.to_vec();
        all.extend(["--format", "json"]);
        serde_json::from_str(&strom_ok(&broker, &all)).expect("--format json prints JSON")
    };

    // The group's commits made the offsets topic, an internal one.
    assert_eq!(
        strom_ok(&broker, &["topic", "list"]),
        "__consumer_offsets\nalpha\n"
    );
    assert_eq!(
        strom_ok(&broker, &["topic", "list", "--exclude-internal"]),
        "alpha\n"
    );
    assert_eq!(
        json(&["topic", "list"]),
        serde_json::json!({"topics": ["__consumer_offsets", "alpha"]})
    );
    assert_eq!(
        json(&["topic", "list", "--exclude-internal"]),
        serde_json::json!({"topics": ["alpha"]})
    );
    let described = strom_ok(&broker, &["topic", "describe", "--exclude-internal"]);
    assert!(described.starts_with("Topic: alpha\t"), "{described}");
    assert!(!described.contains("__consumer_offsets"), "{described}");
    let partition = |index: i64, end: i64| {
        serde_json::json!({
            "partition": index,
            "leader": 0,
            "replicas": [0],
            "isr": [0],
            "offline": [],
            "start_offset": 0,
            "end_offset": end,
            "error": null,
        })
    };
    assert_eq!(
        json(&["topic", "describe", "alpha"]),
        serde_json::json!({"topics": [{
            "name": "alpha",
            "internal": false,
            "partition_count": 2,
            "replication_factor": 1,
            "configs": {"retention.ms": "60000"},
            "partitions": [partition(0, 0), partition(1, 3)],
        }]})
    );
    let internal = json(&["topic", "describe"]);
    assert_eq!(internal["topics"][0]["name"], "__consumer_offsets");
    assert_eq!(internal["topics"][0]["internal"], true);

    assert_eq!(
        json(&["group", "list"]),
        serde_json::json!({"groups": [{
            "group": "readers",
            "state": "Empty",
            "protocol_type": "consumer",
            "group_type": "classic",
            "coordinator": 0,
        }]})
    );
    let row = |index: i64, end: i64| {
        serde_json::json!({
            "topic": "alpha",
            "partition": index,
            "committed": end,
            "log_end": end,
            "lag": 0,
            "member": null,
            "error": null,
        })
    };
    assert_eq!(
        json(&["group", "describe", "readers"]),
        serde_json::json!({"groups": [{
            "group": "readers",
            "state": "Empty",
            "group_type": "classic",
            "protocol_type": "consumer",
            "protocol": null,
            "members": [],
            "offsets": [row(0, 0), row(1, 3)],
        }]})
    );
    assert_eq!(
        json(&["group", "describe", "--all-groups"]),
        json(&["group", "describe", "readers"])
    );
    let neither = common::strom(&broker, &["group", "describe"], None);
    assert_eq!(neither.status.code(), Some(2), "{neither:?}");

    let configs = json(&["config", "describe"]);
    assert_eq!(configs["broker"], 0, "{configs}");
    let partitions = configs["configs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "num.partitions")
        .expect("num.partitions described");
    assert_eq!(
        partitions,
        &serde_json::json!({
            "name": "num.partitions",
            "value": "1",
            "source": "DEFAULT_CONFIG",
            "sensitive": false,
        })
    );
}
