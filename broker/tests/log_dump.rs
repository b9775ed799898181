//! `strom log dump` on the files a real broker wrote: records produced by
//! a real client (confluent-kafka, `tests/clients/log_dump_produce.py`) in
//! every codec are printed as produced from the live segment and from a
//! copy after a clean stop; the indexes check out against their segments;
//! damage to a copy (a flipped byte, a cut, garbage, a bad magic byte, a
//! wrong index entry) is reported with its byte position and a status of
//! 1; the metadata log, and a cluster member's Raft entries, hard state
//! and snapshot, print their records.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::{poll_until, run, run_python, strom_bin, strom_ok, Broker, TOOL_DEADLINE};
use serde_json::Value;
use test_support::cluster::Cluster;

const SCRIPT_DEADLINE: Duration = Duration::from_secs(240);
const CODECS: [&str; 5] = ["none", "gzip", "snappy", "lz4", "zstd"];
/// What the script produces: 23 records, then 10.
const PRODUCED: usize = 33;
const FIRST_SEGMENT: &str = "00000000000000000000";

/// Runs `strom log dump ARGS`.
fn dump(args: &[&str]) -> Output {
    run(
        Command::new(strom_bin()).args(["log", "dump"]).args(args),
        None,
        TOOL_DEADLINE,
    )
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).expect("the dump prints UTF-8")
}

/// Runs a dump that must succeed (exit 0, nothing on stderr); its stdout.
fn dump_ok(args: &[&str]) -> String {
    let output = dump(args);
    assert!(
        output.status.success() && output.stderr.is_empty(),
        "strom log dump {args:?}: {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        stdout(&output),
        String::from_utf8_lossy(&output.stderr)
    );
    stdout(&output)
}

/// Runs a dump that must find problems (exit 1); its stdout.
fn dump_damaged(args: &[&str]) -> String {
    let output = dump(args);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(1),
        "strom log dump {args:?} should find damage\nstdout:\n{}\nstderr:\n{stderr}",
        stdout(&output)
    );
    assert!(
        stderr.contains("found (see the `problem` lines)"),
        "{stderr}"
    );
    stdout(&output)
}

/// The JSON lines of a `--json` dump.
fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

fn of_type<'a>(lines: &'a [Value], kind: &str) -> Vec<&'a Value> {
    lines.iter().filter(|l| l["type"] == kind).collect()
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("UTF-8 paths")
}

/// A record as the producer and the dump both describe it.
type Described = (i64, i64, Value, Value, Value, Value);

fn described(record: &Value) -> Described {
    let headers = record["headers"]
        .as_array()
        .expect("headers")
        .iter()
        .map(|h| match h {
            // The producer's [key, size]; the dump's {key, value_bytes}.
            Value::Array(pair) => Value::Array(pair.clone()),
            object => Value::Array(vec![object["key"].clone(), object["value_bytes"].clone()]),
        })
        .collect();
    (
        record["offset"].as_i64().expect("offset"),
        record["timestamp"].as_i64().expect("timestamp"),
        record["key"].clone(),
        record.get("key_hex").cloned().unwrap_or(Value::Null),
        record["value_bytes"].clone(),
        Value::Array(headers),
    )
}

/// Produces the script's records into `topic` with `codec`; what the
/// client was acknowledged, by offset.
fn produce(broker: &Broker, topic: &str, codec: &str) -> Vec<Described> {
    let out = run_python(
        "log_dump_produce.py",
        &[&broker.bootstrap(), topic, codec],
        SCRIPT_DEADLINE,
    );
    let produced: Vec<Described> = json_lines(&out).iter().map(described).collect();
    assert_eq!(produced.len(), PRODUCED, "{out}");
    produced
}

/// Checks a `--records --json` dump of a segment against what was
/// produced with `codec`; returns the batches' positions.
fn check_dump(lines: &[Value], codec: &str, produced: &[Described]) -> Vec<u64> {
    let batches = of_type(lines, "batch");
    assert!(
        batches.len() >= 2,
        "two flushes, two batches at least: {lines:?}"
    );
    let mut counted = 0;
    for batch in &batches {
        assert_eq!(batch["codec"], codec, "{batch}");
        assert_eq!(batch["crc_valid"], true, "{batch}");
        assert_eq!(batch["transactional"], false, "{batch}");
        // An idempotent producer's batches carry its id and sequences.
        assert!(batch["producer_id"].as_i64().unwrap() >= 0, "{batch}");
        assert!(batch["base_sequence"].as_i64().unwrap() >= 0, "{batch}");
        counted += batch["records"].as_u64().unwrap() as usize;
    }
    assert_eq!(counted, PRODUCED);
    assert_eq!(batches[0]["base_offset"], 0);
    assert_eq!(
        batches.last().unwrap()["last_offset"],
        (PRODUCED - 1) as u64
    );
    let records: Vec<Described> = of_type(lines, "record")
        .into_iter()
        .map(described)
        .collect();
    assert_eq!(records, produced, "the dump's records are the client's");
    let summary = of_type(lines, "summary");
    assert_eq!(summary.len(), 1);
    assert_eq!(summary[0]["problems"], 0);
    assert_eq!(summary[0]["records"], PRODUCED as u64);
    batches
        .iter()
        .map(|b| b["position"].as_u64().unwrap())
        .collect()
}

/// Copies a segment and its indexes into `to`, under the same names.
fn copy_segment(partition_dir: &Path, to: &Path) -> PathBuf {
    for extension in ["log", "index", "timeindex"] {
        let name = format!("{FIRST_SEGMENT}.{extension}");
        std::fs::copy(partition_dir.join(&name), to.join(&name)).unwrap();
    }
    to.join(format!("{FIRST_SEGMENT}.log"))
}

fn problems(lines: &[Value]) -> Vec<(Option<u64>, String)> {
    of_type(lines, "problem")
        .into_iter()
        .map(|p| {
            (
                p["position"].as_u64(),
                p["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn batch_positions(lines: &[Value]) -> Vec<u64> {
    of_type(lines, "batch")
        .into_iter()
        .map(|b| b["position"].as_u64().unwrap())
        .collect()
}

/// Damage to a copy of a good segment whose batches start at `at`.
fn check_damage(segment: &Path, at: &[u64]) {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(segment).unwrap();
    let path = dir.path().join(format!("{FIRST_SEGMENT}.log"));
    let write = |bytes: &[u8]| std::fs::write(&path, bytes).unwrap();
    let damaged = || json_lines(&dump_damaged(&["--json", "--records", path_str(&path)]));
    let last = *at.last().unwrap();

    // A flipped byte inside the second batch: its CRC fails, it is still
    // listed (without records), and every other batch follows.
    let mut flipped = bytes.clone();
    flipped[at[1] as usize + 70] ^= 0x10;
    write(&flipped);
    let lines = damaged();
    assert_eq!(batch_positions(&lines), at, "{lines:?}");
    let found = problems(&lines);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, Some(at[1]));
    assert!(found[0].1.contains("CRC mismatch"), "{found:?}");
    let second = of_type(&lines, "batch")[1];
    assert_eq!(second["crc_valid"], false);

    // Cut in the middle of the last batch.
    write(&bytes[..last as usize + 40]);
    let lines = damaged();
    assert_eq!(batch_positions(&lines), &at[..at.len() - 1]);
    let found = problems(&lines);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, Some(last));
    assert!(found[0].1.contains("truncated batch"), "{found:?}");

    // Garbage bytes before the second batch: reported where they start,
    // the batches after them found where they moved.
    let mut garbage = bytes[..at[1] as usize].to_vec();
    garbage.extend_from_slice(&[0xab; 13]);
    garbage.extend_from_slice(&bytes[at[1] as usize..]);
    write(&garbage);
    let lines = damaged();
    let moved: Vec<u64> = at
        .iter()
        .map(|&p| if p == 0 { 0 } else { p + 13 })
        .collect();
    assert_eq!(batch_positions(&lines), moved);
    let found = problems(&lines);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, Some(at[1]));
    assert!(found[0].1.contains("13 bytes skipped"), "{found:?}");
    assert!(!of_type(&lines, "record").is_empty());

    // A bad magic byte in the first batch.
    let mut magic = bytes.clone();
    magic[16] = 7;
    write(&magic);
    let lines = damaged();
    assert_eq!(batch_positions(&lines), &at[1..]);
    let found = problems(&lines);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, Some(0));
    assert!(found[0].1.contains("magic 7"), "{found:?}");

    // In text, too: the position and the status.
    write(&flipped);
    let text = dump_damaged(&[path_str(&path)]);
    assert!(
        text.contains(&format!("problem position={}: CRC mismatch", at[1])),
        "{text}"
    );
}

/// Index entries changed in a copy are reported, entry by entry.
fn check_index_damage(partition_dir: &Path) {
    let dir = tempfile::tempdir().unwrap();
    let segment = copy_segment(partition_dir, dir.path());
    let index = segment.with_extension("index");
    let time_index = segment.with_extension("timeindex");
    let good = json_lines(&dump_ok(&["--json", "--verify-index", path_str(&segment)]));
    let offset_index = of_type(&good, "offset_index");
    assert_eq!(offset_index.len(), 1, "{good:?}");
    assert_eq!(offset_index[0]["mismatches"], 0);
    // index.interval.bytes=1: an entry for every batch.
    assert_eq!(
        offset_index[0]["entries"].as_u64().unwrap(),
        of_type(&good, "batch").len() as u64
    );
    assert_eq!(of_type(&good, "time_index")[0]["mismatches"], 0);

    // The second offset index entry names a position one byte off.
    let mut bytes = std::fs::read(&index).unwrap();
    let position = u32::from_be_bytes(bytes[12..16].try_into().unwrap());
    bytes[12..16].copy_from_slice(&(position + 1).to_be_bytes());
    std::fs::write(&index, &bytes).unwrap();
    // The first time index entry names another timestamp.
    let mut times = std::fs::read(&time_index).unwrap();
    let timestamp = i64::from_be_bytes(times[..8].try_into().unwrap());
    times[..8].copy_from_slice(&(timestamp - 5).to_be_bytes());
    std::fs::write(&time_index, &times).unwrap();
    let lines = json_lines(&dump_damaged(&[
        "--json",
        "--verify-index",
        path_str(&segment),
    ]));
    let found: Vec<(String, u64, String)> = of_type(&lines, "problem")
        .into_iter()
        .map(|p| {
            (
                p["file"].as_str().unwrap().to_string(),
                p["entry"].as_u64().unwrap(),
                p["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!((found[0].0.as_str(), found[0].1), (path_str(&index), 1));
    assert!(found[0].2.contains("where no batch starts"), "{found:?}");
    assert_eq!(
        (found[1].0.as_str(), found[1].1),
        (path_str(&time_index), 0)
    );
    assert!(found[1].2.contains("max timestamp"), "{found:?}");
    assert_eq!(of_type(&lines, "offset_index")[0]["mismatches"], 1);
    // The index dumped on its own, checked against its segment.
    let text = dump_damaged(&["--verify-index", path_str(&index)]);
    assert!(text.contains("problem file="), "{text}");
    assert!(
        text.contains(&format!("position={}", position + 1)),
        "{text}"
    );
}

#[test]
fn segments_show_what_a_client_produced_in_every_codec_and_their_damage() {
    // Appends straight to the segment file (no journal), an index entry
    // for every batch.
    let mut broker = Broker::start(&["--cores", "1"]);
    let mut produced = BTreeMap::new();
    for codec in CODECS {
        let topic = format!("dump-{codec}");
        strom_ok(
            &broker,
            &[
                "topic",
                "create",
                &topic,
                "--config",
                "strom.journal.bytes=0",
                "--config",
                "index.interval.bytes=1",
            ],
        );
        produced.insert(codec, produce(&broker, &topic, codec));
    }
    let segment_of = |codec: &str| {
        broker
            .data_dir
            .join(format!("dump-{codec}-0"))
            .join(format!("{FIRST_SEGMENT}.log"))
    };

    // Live: the files of the running broker, their preallocated end
    // included.
    for codec in CODECS {
        let segment = segment_of(codec);
        let lines = poll_until(Duration::from_secs(30), || {
            let output = dump(&["--records", "--json", path_str(&segment)]);
            let lines = json_lines(&stdout(&output));
            let records = of_type(&lines, "record").len();
            (output.status.success() && records == PRODUCED).then_some(lines)
        })
        .unwrap_or_else(|| {
            panic!(
                "{codec}: the live segment never showed {PRODUCED} records:\n{}",
                stdout(&dump(&["--records", path_str(&segment)]))
            )
        });
        check_dump(&lines, codec, &produced[codec]);
        assert_eq!(of_type(&lines, "tail").len(), 1, "preallocated: {lines:?}");
    }

    // The text layout of the records.
    let text = dump_ok(&["--records", path_str(&segment_of("gzip"))]);
    for expected in [
        "codec=gzip",
        "  record offset=0 timestamp=1700000000000 sequence=0 key=\"key-0\" value_bytes=160 \
         headers=[\"index\":1,\"empty\":0,\"none\":null]",
        "key=\"tomb\" value_bytes=null tombstone=true headers=[\"why\":7]",
        "key=null value_bytes=210",
        "key=hex:00ff1080 value_bytes=330",
        "summary batches=2 records=33 first_offset=0 last_offset=32 problems=0",
    ] {
        assert!(text.contains(expected), "{expected:?} not in:\n{text}");
    }
    let values = dump_ok(&["--values", path_str(&segment_of("zstd"))]);
    assert!(
        values.contains("value_bytes=160 value=\"value-0 value-0 "),
        "{values}"
    );

    // Stopped: the segment cut to its batches and its indexes written;
    // copies of them.
    broker.stop();
    for codec in CODECS {
        let dir = tempfile::tempdir().unwrap();
        let copy = copy_segment(&broker.data_dir.join(format!("dump-{codec}-0")), dir.path());
        let lines = json_lines(&dump_ok(&[
            "--records",
            "--json",
            "--verify-index",
            path_str(&copy),
        ]));
        let at = check_dump(&lines, codec, &produced[codec]);
        assert!(of_type(&lines, "tail").is_empty(), "sealed: {lines:?}");
        assert_eq!(of_type(&lines, "offset_index")[0]["mismatches"], 0);
        assert_eq!(of_type(&lines, "time_index")[0]["mismatches"], 0);
        check_damage(&copy, &at);
    }
    check_index_damage(&broker.data_dir.join("dump-lz4-0"));
}

#[test]
fn the_metadata_log_prints_its_records_and_their_damage() {
    let broker = Broker::start(&["--cores", "1"]);
    for topic in ["meta-a", "meta-b"] {
        strom_ok(&broker, &["topic", "create", topic, "--partitions", "2"]);
    }
    strom_ok(&broker, &["topic", "delete", "meta-a"]);
    let log = broker.data_dir.join("__metadata/metadata.log");
    let lines = json_lines(&dump_ok(&["--json", path_str(&log)]));
    let records = of_type(&lines, "metadata_record");
    let types: Vec<&str> = records
        .iter()
        .map(|r| r["record_type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        ["ClusterId", "TopicCreated", "TopicCreated", "TopicDeleted"],
        "{lines:?}"
    );
    assert!(records[1]["record"]
        .as_str()
        .unwrap()
        .contains("name: \"meta-a\""));
    assert!(records[3]["record"].as_str().unwrap().contains("meta-a"));

    // A flipped byte in the second record of a copy: reported at its
    // position, the records after it still printed.
    let second = records[1]["position"].as_u64().unwrap() as usize;
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("metadata.log");
    let mut bytes = std::fs::read(&log).unwrap();
    bytes[second + 20] ^= 0x01;
    std::fs::write(&copy, &bytes).unwrap();
    let lines = json_lines(&dump_damaged(&["--json", path_str(&copy)]));
    let found = problems(&lines);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, Some(second as u64));
    assert!(found[0].1.contains("CRC mismatch"), "{found:?}");
    assert_eq!(of_type(&lines, "metadata_record").len(), 3);
}

#[test]
fn a_cluster_members_raft_files_print_entries_state_and_snapshot() {
    // Two voters (one alone keeps a single node's metadata log), each
    // snapshotting after 1 KiB of metadata log.
    let cluster = Cluster::start(2, &["--set", "strom.metadata.snapshot.bytes=1024"]);
    let node = &cluster.node(1).broker;
    let raft = node.data_dir.join("__metadata/raft");
    let snapshot = raft.join("raft-snapshot");
    let entries_file = raft.join("raft-entries.log");
    // Topics until a snapshot was taken and the entries file holds topics
    // created after it (the entries a snapshot covers are dropped), read
    // live.
    let mut created = Vec::new();
    let mut entries = None;
    for round in 0..200 {
        let topic = format!("raft-{round}");
        strom_ok(node, &["topic", "create", &topic, "--partitions", "3"]);
        created.push(topic);
        if snapshot.exists() {
            let lines = json_lines(&dump_ok(&["--json", path_str(&entries_file)]));
            if of_type(&lines, "metadata_record")
                .iter()
                .any(|r| r["record_type"] == "TopicCreated")
            {
                entries = Some(lines);
                break;
            }
        }
    }
    let entries = entries.expect("a snapshot and topics after it within 200 topics");
    assert!(!of_type(&entries, "raft_entry").is_empty(), "{entries:?}");
    let in_entries: Vec<&str> = of_type(&entries, "metadata_record")
        .into_iter()
        .filter(|r| r["record_type"] == "TopicCreated")
        .map(|r| r["record"].as_str().unwrap())
        .collect();
    // Then the snapshot: every topic is in the one or the other.
    let snapshot_lines = json_lines(&dump_ok(&["--json", path_str(&snapshot)]));
    let head = of_type(&snapshot_lines, "raft_snapshot");
    assert_eq!(head.len(), 1, "{snapshot_lines:?}");
    assert!(head[0]["index"].as_u64().unwrap() > 0);
    assert_eq!(head[0]["voters"], serde_json::json!([1, 2]));
    assert_eq!(of_type(&snapshot_lines, "image").len(), 1);
    let brokers: Vec<&Value> = of_type(&snapshot_lines, "broker")
        .into_iter()
        .map(|b| &b["id"])
        .collect();
    assert_eq!(brokers, [1, 2], "{snapshot_lines:?}");
    let in_snapshot: Vec<&str> = of_type(&snapshot_lines, "topic")
        .into_iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        in_snapshot.contains(&created[0].as_str()),
        "{in_snapshot:?}"
    );
    for topic in &created {
        let named = format!("name: \"{topic}\"");
        assert!(
            in_snapshot.contains(&topic.as_str()) || in_entries.iter().any(|r| r.contains(&named)),
            "{topic} is neither in the snapshot {in_snapshot:?} nor in the entries {in_entries:?}"
        );
    }
    let partitions = of_type(&snapshot_lines, "partition");
    assert!(!partitions.is_empty());
    for partition in partitions {
        let leader = &partition["leader"];
        assert!(leader == 1 || leader == 2, "{partition}");
        assert_eq!(partition["isr"], serde_json::json!([leader]), "{partition}");
        assert_eq!(
            partition["replicas"],
            serde_json::json!([leader]),
            "{partition}"
        );
    }

    let hard_state = json_lines(&dump_ok(&[
        "--json",
        path_str(&raft.join("raft-hard-state")),
    ]));
    let state = of_type(&hard_state, "raft_hard_state");
    assert!(state[0]["term"].as_u64().unwrap() >= 1, "{hard_state:?}");
    let vote = &state[0]["vote"];
    assert!(vote == 1 || vote == 2, "{hard_state:?}");
    assert!(state[0]["commit"].as_u64().unwrap() >= 1, "{hard_state:?}");

    // A damaged copy of the entries file: a flipped byte in its last
    // frame, reported where that frame starts.
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("raft-entries.log");
    std::fs::copy(&entries_file, &copy).unwrap();
    let good = json_lines(&dump_ok(&["--json", path_str(&copy)]));
    let frames: Vec<u64> = of_type(&good, "raft_entry")
        .iter()
        .map(|e| e["position"].as_u64().unwrap())
        .collect();
    let last = *frames.last().expect("entries after the snapshot");
    let mut bytes = std::fs::read(&copy).unwrap();
    bytes[last as usize + 9] ^= 0x01;
    std::fs::write(&copy, &bytes).unwrap();
    let lines = json_lines(&dump_damaged(&["--json", path_str(&copy)]));
    let found = problems(&lines);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, Some(last));
    assert!(found[0].1.contains("CRC mismatch"), "{found:?}");
    assert_eq!(of_type(&lines, "raft_entry").len(), frames.len() - 1);

    // A damaged copy of the snapshot.
    let copy = dir.path().join("raft-snapshot");
    let mut bytes = std::fs::read(&snapshot).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    std::fs::write(&copy, &bytes).unwrap();
    let lines = json_lines(&dump_damaged(&["--json", path_str(&copy)]));
    let found = problems(&lines);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, Some(0));
    assert!(found[0].1.contains("CRC mismatch"), "{found:?}");
}

#[test]
fn what_cannot_be_read_is_one_line_and_status_1() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("00000000000000000000.log");
    let unknown = dir.path().join("strom.checkpoint");
    std::fs::write(&unknown, b"x").unwrap();
    for (path, expected) in [
        (missing.as_path(), "No such file or directory"),
        (dir.path(), "is a directory"),
        (unknown.as_path(), "cannot tell what"),
    ] {
        let output = dump(&[path_str(path)]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{path:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
    }
    // --type names what the name does not say: an empty segment is valid.
    std::fs::write(&unknown, b"").unwrap();
    let text = dump_ok(&["--type", "segment", path_str(&unknown)]);
    assert!(text.contains("summary batches=0 records=0"), "{text}");
}
