//! Recovery never loses silently: a corrupt sealed segment or a corrupt
//! record in the middle of the metadata log stops the real `strom` binary
//! at start with the file, the position and what to do (exit 1, quickly),
//! and the repair command named does what it says. Partition directories
//! the metadata does not name are reported, never adopted silently.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{free_port, run, strom_bin, strom_bytes, Broker, TOOL_DEADLINE};

/// A failed start must end well before the shutdown deadline (10 s) a
/// stuck core would take.
const FAIL_DEADLINE: Duration = Duration::from_secs(8);

/// Starts `strom` on `data_dir`, which must exit 1 within the deadline;
/// returns its stderr.
fn start_fails(data_dir: &Path) -> String {
    let started = std::time::Instant::now();
    let output = run(
        Command::new(strom_bin())
            .arg("start")
            .arg("--data-dir")
            .arg(data_dir)
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", free_port()))
            .arg("--admin-listen")
            .arg("off")
            .arg("--cores")
            .arg("2"),
        None,
        FAIL_DEADLINE + Duration::from_secs(5),
    );
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    assert_eq!(
        output.status.code(),
        Some(1),
        "exit status; stderr:\n{stderr}"
    );
    assert!(
        started.elapsed() < FAIL_DEADLINE,
        "took {:?} to fail; stderr:\n{stderr}",
        started.elapsed()
    );
    stderr
}

/// A broker started again on a data dir that already exists (the first
/// broker's, stopped), logging to `log_path`.
fn restarted(data_dir: &Path, log_path: PathBuf) -> Broker {
    Broker::start_in(data_dir, &log_path, &["--admin-listen", "off"])
}

/// The number after `flag` in `text`.
fn number_after(text: &str, flag: &str) -> u64 {
    let at = text
        .find(flag)
        .unwrap_or_else(|| panic!("{flag} in {text}"))
        + flag.len();
    text[at..]
        .trim_start()
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|_| panic!("a number after {flag} in {text}"))
}

/// Produces `count` distinct lines to partition 0 of `topic`.
fn produce(broker: &Broker, topic: &str, round: usize, count: usize) -> Vec<String> {
    let lines: Vec<String> = (0..count)
        .map(|i| format!("{topic}-{round}-record-{i:05}-{}", "x".repeat(200)))
        .collect();
    let input = lines.join("\n") + "\n";
    strom_bytes(
        broker,
        &["produce", topic, "--partition", "0"],
        Some(input.as_bytes()),
    );
    lines
}

/// Every record of partition 0 of `topic`, as lines.
fn consume(broker: &Broker, topic: &str) -> Vec<String> {
    let out = strom_bytes(
        broker,
        &[
            "consume",
            topic,
            "--partition",
            "0",
            "--from-beginning",
            "-e",
        ],
        None,
    );
    String::from_utf8(out)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

fn create_topic(broker: &Broker, topic: &str, partitions: u32) {
    strom_bytes(
        broker,
        &[
            "topic",
            "create",
            topic,
            "--partitions",
            &partitions.to_string(),
        ],
        None,
    );
}

/// Segment files of a partition directory, oldest first.
fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .filter(|p| std::fs::metadata(p).unwrap().len() > 0)
        .collect();
    files.sort();
    files
}

fn flip_byte(path: &Path, position: u64) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[position as usize] ^= 0x5a;
    std::fs::write(path, bytes).unwrap();
}

/// Kafka, on an unclean start, truncates a log at its first corrupt
/// batch and drops everything after it, sealed segments too. Strom keeps
/// acknowledged records: it refuses to start, naming the segment, the
/// offset and byte of the corruption and the repair command, and that
/// command cuts the log there and keeps a copy of everything it cut.
#[test]
fn a_flipped_byte_in_a_sealed_segment_stops_start_up_naming_the_file_and_the_repair() {
    let mut broker = Broker::start(&["--set", "log.segment.bytes=65536"]);
    let topic = "sealed";
    create_topic(&broker, topic, 1);
    // One produce run sends one batch per request: several runs make
    // several batches, and segments roll between them.
    let mut lines = Vec::new();
    for round in 0..5 {
        lines.extend(produce(&broker, topic, round, 400));
    }
    assert_eq!(consume(&broker, topic), lines);
    // A start replays the journal into the segments (and removes it), so
    // that the byte flipped below is only in the segment.
    broker.restart();
    assert_eq!(consume(&broker, topic), lines);
    broker.stop();
    assert!(
        !broker.data_dir.join("__journal").exists()
            || std::fs::read_dir(broker.data_dir.join("__journal"))
                .unwrap()
                .next()
                .is_none(),
        "no journal left to put the segment's bytes back"
    );
    let partition = broker.data_dir.join(format!("{topic}-0"));
    let files = segments(&partition);
    assert!(files.len() >= 3, "several segments: {files:?}");
    // An unclean stop before any recovery point was recorded: start-up
    // scans every segment.
    std::fs::remove_file(partition.join("strom.checkpoint")).unwrap();
    let sealed = &files[1];
    let sealed_base: usize = sealed
        .file_stem()
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(sealed_base > 0 && sealed_base < lines.len());
    // Inside the segment's first batch, past its 61-byte header.
    flip_byte(sealed, 100);
    let corrupted = std::fs::read(sealed).unwrap();
    let before: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(f).unwrap()).collect();

    let stderr = start_fails(&broker.data_dir);
    let repair = format!(
        "strom repair segment --file {} --truncate-at ",
        sealed.display()
    );
    assert!(
        stderr.contains(&repair),
        "names the file and the repair: {stderr}"
    );
    assert!(
        stderr.contains(&format!("(offset {sealed_base})")),
        "names the offset: {stderr}"
    );
    assert!(
        !stderr.contains("did not stop"),
        "the cause, not a consequence: {stderr}"
    );
    let position = number_after(&stderr, "--truncate-at");
    assert_eq!(position, 0, "the segment's first batch is the corrupt one");
    for (file, bytes) in files.iter().zip(&before) {
        assert_eq!(
            &std::fs::read(file).unwrap(),
            bytes,
            "{} untouched",
            file.display()
        );
    }

    let output = run(
        Command::new(strom_bin())
            .args(["repair", "segment", "--file"])
            .arg(sealed)
            .arg("--truncate-at")
            .arg(position.to_string()),
        None,
        TOOL_DEADLINE,
    );
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let backups: Vec<PathBuf> = std::fs::read_dir(broker.data_dir.join("__repair"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(backups.len(), 1, "{backups:?}");
    assert!(
        stdout.contains(&backups[0].display().to_string()),
        "{stdout}"
    );
    for (file, bytes) in files.iter().zip(&before).skip(1) {
        let copy = backups[0].join(file.file_name().unwrap());
        assert_eq!(
            &std::fs::read(&copy).unwrap(),
            bytes,
            "copy of {}",
            file.display()
        );
    }
    assert_eq!(
        std::fs::read(backups[0].join(sealed.file_name().unwrap())).unwrap(),
        corrupted
    );

    let restarted = restarted(
        &broker.data_dir,
        broker.data_dir.with_file_name("restarted.log"),
    );
    assert_eq!(
        consume(&restarted, topic),
        lines[..sealed_base].to_vec(),
        "the records before the corruption, every byte"
    );
    // The partition takes new records after the cut.
    let more = produce(&restarted, topic, 9, 10);
    let mut expected = lines[..sealed_base].to_vec();
    expected.extend(more);
    assert_eq!(consume(&restarted, topic), expected);
    drop(restarted);
}

/// One flipped byte in the middle of `__metadata/metadata.log` once made
/// every topic vanish (the whole log was cut as a torn tail). Now start-up
/// refuses with the byte position and the repair command; the repair drops
/// only the damaged record, and start-up then names the partition
/// directory the metadata no longer knows instead of adopting it.
#[test]
fn a_damaged_metadata_record_in_the_middle_stops_start_up_and_is_repaired() {
    let mut broker = Broker::start(&[]);
    let topics = ["meta-a", "meta-b", "meta-c"];
    let mut lines = Vec::new();
    for topic in topics {
        create_topic(&broker, topic, 1);
        lines.push(produce(&broker, topic, 0, 50));
    }
    broker.stop();
    let path = broker.data_dir.join("__metadata").join("metadata.log");
    let original = std::fs::read(&path).unwrap();
    let flip = original
        .windows(topics[1].len())
        .position(|w| w == topics[1].as_bytes())
        .expect("topic b's record");
    let mut damaged = original.clone();
    damaged[flip] ^= 0x20;
    std::fs::write(&path, &damaged).unwrap();

    let stderr = start_fails(&broker.data_dir);
    let position = number_after(&stderr, "--drop-damaged-at");
    assert!(
        position < flip as u64,
        "the record's start: {position} {stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "strom repair metadata --data-dir {} --drop-damaged-at {position}",
            broker.data_dir.display()
        )),
        "{stderr}"
    );
    assert!(stderr.contains(&format!("byte {position}")), "{stderr}");
    assert!(!stderr.contains("did not stop"), "{stderr}");
    assert_eq!(std::fs::read(&path).unwrap(), damaged, "nothing touched");

    let output = run(
        Command::new(strom_bin())
            .args(["repair", "metadata", "--data-dir"])
            .arg(&broker.data_dir)
            .arg("--drop-damaged-at")
            .arg(position.to_string()),
        None,
        TOOL_DEADLINE,
    );
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let backup = std::fs::read_dir(broker.data_dir.join("__metadata"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".before-repair"))
        .expect("a copy of the damaged log");
    assert_eq!(std::fs::read(&backup).unwrap(), damaged);
    assert!(stdout.contains(&backup.display().to_string()), "{stdout}");

    let log_path = broker.data_dir.with_file_name("after-repair.log");
    let restarted = restarted(&broker.data_dir, log_path);
    assert_eq!(consume(&restarted, topics[0]), lines[0]);
    assert_eq!(consume(&restarted, topics[2]), lines[2]);
    let orphan = broker.data_dir.join(format!("{}-0", topics[1]));
    let log = restarted.log();
    assert!(
        log.lines().any(|l| l.contains("WARN")
            && l.contains("names no partition")
            && l.contains(&orphan.display().to_string())),
        "start-up names the directory the metadata lost:\n{log}"
    );
    // Creating the topic again takes the directory over, with a warning,
    // and keeps its records.
    create_topic(&restarted, topics[1], 1);
    assert_eq!(consume(&restarted, topics[1]), lines[1]);
    assert!(
        restarted
            .log()
            .lines()
            .any(|l| l.contains("takes over a directory that already holds data")),
        "{}",
        restarted.log()
    );
    assert!(orphan.is_dir());
    drop(restarted);
}

/// The repair commands refuse what they cannot do, with a message and
/// exit 1, and change nothing.
#[test]
fn repairs_refuse_positions_that_are_not_damaged() {
    let mut broker = Broker::start(&[]);
    create_topic(&broker, "healthy", 1);
    let lines = produce(&broker, "healthy", 0, 20);
    broker.stop();
    let path = broker.data_dir.join("__metadata").join("metadata.log");
    let before = std::fs::read(&path).unwrap();
    let segment = segments(&broker.data_dir.join("healthy-0")).remove(0);
    let segment_before = std::fs::read(&segment).unwrap();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![
                "metadata".into(),
                "--data-dir".into(),
                broker.data_dir.display().to_string(),
                "--drop-damaged-at".into(),
                "0".into(),
            ],
            "every record",
        ),
        (
            vec![
                "segment".into(),
                "--file".into(),
                path.display().to_string(),
                "--truncate-at".into(),
                "0".into(),
            ],
            "is not a segment file",
        ),
        (
            vec![
                "segment".into(),
                "--file".into(),
                segment.display().to_string(),
                "--truncate-at".into(),
                (1u64 << 40).to_string(),
            ],
            "nothing at byte",
        ),
    ];
    for (args, expected) in cases {
        let output = run(
            Command::new(strom_bin()).arg("repair").args(&args),
            None,
            TOOL_DEADLINE,
        );
        let stderr = String::from_utf8_lossy(&output.stderr).to_string();
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("strom repair: ") && stderr.contains(expected),
            "{args:?}: {stderr}"
        );
    }
    assert_eq!(std::fs::read(&path).unwrap(), before);
    assert_eq!(std::fs::read(&segment).unwrap(), segment_before);
    assert!(!broker.data_dir.join("__repair").exists());
    let restarted = restarted(
        &broker.data_dir,
        broker.data_dir.with_file_name("after.log"),
    );
    assert_eq!(consume(&restarted, "healthy"), lines);
}
