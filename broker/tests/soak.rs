//! Fault rounds against the real broker, each ending in a count of what was
//! acknowledged and what was read back: kill -9 under idempotent acks=all
//! load, torn segment tails after kill -9, hostile clients (the full-disk
//! rounds are in `disk_full.rs`, which needs a loop mount). The default
//! test run does a few rounds of each; `scripts/soak` runs many
//! (`STROM_SOAK_ROUNDS`, `STROM_SOAK_MINUTES`: whichever ends first).
//! Every scenario prints one `soak <scenario>:` line of counts.

mod common;

use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use common::hostile::*;
use common::rng::Rng;
use common::{poll_until, raw, wait_deadline, Broker, SoakBudget};
use protocol::kafka_protocol::messages::{ApiKey, FetchResponse};

/// Rounds each scenario runs when the environment does not say.
const DEFAULT_ROUNDS: u64 = 3;

fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

#[test]
fn kill_9_under_idempotent_acks_all_load() {
    let budget = SoakBudget::from_env(DEFAULT_ROUNDS);
    let mut broker = Broker::start(&["--set", "num.partitions=4"]);
    let topic = "soak-kill";
    let partitions = 4;
    let stop = broker.data_dir.with_file_name("stop-producing");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/soak_producer.py");
    let mut producer = Command::new("python3")
        .arg(&script)
        .arg(broker.bootstrap())
        .arg(topic)
        .arg(partitions.to_string())
        .arg(&stop)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(stop.with_file_name("soak-producer.err")).unwrap())
        .spawn()
        .expect("python3 runs the soak producer");
    let mut rng = Rng::new(0x5eed_0001);
    let mut rounds = 0;
    let mut rss_peak = 0u64;
    while budget.more(rounds) {
        std::thread::sleep(Duration::from_millis(700 + rng.below(1_300)));
        rss_peak = rss_peak.max(peak_rss(broker.pid()));
        broker.crash_and_restart();
        rounds += 1;
    }
    std::thread::sleep(Duration::from_millis(500));
    std::fs::write(&stop, b"").unwrap();
    let finished = wait_deadline(&mut producer, Duration::from_secs(600));
    assert!(finished.is_some(), "the soak producer did not finish");
    let output = producer.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "soak producer failed: {stdout}\n{}",
        std::fs::read_to_string(stop.with_file_name("soak-producer.err")).unwrap_or_default()
    );
    let counts: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
    rss_peak = rss_peak.max(peak_rss(broker.pid()));
    println!(
        "soak kill-9: rounds={rounds} acknowledged={} read_back={} lost={} duplicated={} out_of_order={} corrupt={} peak_rss_mib={}",
        counts["acknowledged"],
        counts["read_back"],
        counts["lost"],
        counts["duplicated"],
        counts["out_of_order"],
        counts["corrupt"],
        rss_peak >> 20
    );
    let fails = |what: &str| {
        format!(
            "{what}: {counts}\nbroker log tail:\n{}",
            tail(&broker.log(), 40)
        )
    };
    assert!(
        counts["acknowledged"].as_u64().unwrap() > 0,
        "{}",
        fails("nothing acknowledged")
    );
    for field in ["lost", "duplicated", "out_of_order", "corrupt", "unflushed"] {
        assert_eq!(counts[field], 0, "{}", fails(field));
    }
    assert_eq!(counts["read_complete"], true, "{}", fails("read back"));
    assert_eq!(counts["fatal"], serde_json::json!([]), "{}", fails("fatal"));
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The newest segment file of a partition directory.
fn newest_segment(dir: &Path) -> PathBuf {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    logs.pop().expect("a segment")
}

/// Where the valid batches of a segment end: batches are walked by their
/// length fields until one is cut or zero (the preallocated rest).
fn valid_end(segment: &Path) -> u64 {
    let bytes = std::fs::read(segment).unwrap();
    let mut at = 0usize;
    while at + 61 <= bytes.len() {
        let length = i32::from_be_bytes(bytes[at + 8..at + 12].try_into().unwrap());
        if length <= 0 || at + 12 + length as usize > bytes.len() || bytes[at + 16] != 2 {
            break;
        }
        at += 12 + length as usize;
    }
    at as u64
}

/// Writes a torn tail after the valid batches: a kind chosen by `rng`.
fn tear(segment: &Path, rng: &mut Rng) -> &'static str {
    let end = valid_end(segment);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(segment)
        .unwrap();
    file.seek(SeekFrom::Start(end)).unwrap();
    let length = 1 + rng.below(16_384) as usize;
    let (kind, bytes): (&str, Vec<u8>) = match rng.below(3) {
        0 => (
            "random bytes",
            (0..length).map(|_| rng.next() as u8).collect(),
        ),
        1 => {
            // A batch header claiming more bytes than follow.
            let mut head = vec![0u8; 61];
            head[8..12].copy_from_slice(&((length as i32) + 1_000).to_be_bytes());
            head[16] = 2;
            ("cut batch", head)
        }
        _ => {
            // A whole-looking batch whose CRC is wrong.
            let mut batch = protocol::batch::build::patterned(1, 3, 40, rng.next());
            let last = batch.len() - 1;
            batch[last] ^= 0xff;
            ("bad CRC", batch)
        }
    };
    file.write_all(&bytes).unwrap();
    file.sync_all().unwrap();
    kind
}

#[test]
fn torn_tails_after_kill_9_lose_no_acknowledged_record() {
    let budget = SoakBudget::from_env(DEFAULT_ROUNDS);
    let mut broker = Broker::start(&[]);
    let topic = "soak-torn";
    let mut stream = raw::connect(&broker);
    let mut sent: Vec<Vec<u8>> = Vec::new();
    let mut rng = Rng::new(0x5eed_0002);
    let mut rounds = 0;
    let mut kinds = std::collections::BTreeMap::new();
    while budget.more(rounds) {
        for _ in 0..1 + rng.below(20) {
            let batch = protocol::batch::build::patterned(
                1_700_000_000_000,
                1 + rng.below(50) as usize,
                1 + rng.below(2_000) as usize,
                rng.next(),
            );
            let offset = produce(&mut stream, topic, &batch, sent.len() as i32);
            let expected: i64 = sent.iter().map(|b| batch_records(b)).sum();
            assert_eq!(offset, expected, "each batch lands after the last");
            sent.push(batch);
        }
        broker.crash_and_restart_with(|data_dir| {
            let segment = newest_segment(&data_dir.join(format!("{topic}-0")));
            *kinds.entry(tear(&segment, &mut rng)).or_insert(0u64) += 1;
        });
        stream = raw::connect(&broker);
        rounds += 1;
    }
    // Everything acknowledged is there, in order, byte for byte; nothing
    // of the torn tails is.
    let mut offset = 0i64;
    let mut read_back = 0usize;
    let mut correlation_id = 10_000;
    for batch in &sent {
        correlation_id += 1;
        let fetched: FetchResponse = raw::call(
            &mut stream,
            ApiKey::Fetch,
            12,
            correlation_id,
            "soak",
            &fetch_request(topic, offset, batch.len() as i32),
        );
        let partition = &fetched.responses[0].partitions[0];
        assert_eq!(partition.error_code, 0);
        let records: Bytes = partition.records.clone().unwrap_or_default();
        assert!(records.len() >= batch.len(), "batch at {offset} missing");
        assert_stored_as_sent(&records[..batch.len()], batch, offset);
        offset += batch_records(batch);
        read_back += 1;
    }
    let partition_end = {
        let fetched: FetchResponse = raw::call(
            &mut stream,
            ApiKey::Fetch,
            12,
            1,
            "soak",
            &fetch_request(topic, offset, 1 << 20),
        );
        fetched.responses[0].partitions[0].high_watermark
    };
    println!(
        "soak torn-tail: rounds={rounds} acknowledged={} read_back={read_back} lost={} tails={kinds:?} peak_rss_mib={}",
        sent.len(),
        sent.len() - read_back,
        peak_rss(broker.pid()) >> 20
    );
    assert_eq!(
        partition_end, offset,
        "the log ends where the acknowledged records end"
    );
}

fn batch_records(batch: &[u8]) -> i64 {
    i32::from_be_bytes(batch[57..61].try_into().unwrap()) as i64
}

#[test]
fn hostile_clients_round_after_round() {
    let budget = SoakBudget::from_env(DEFAULT_ROUNDS);
    let broker = start_budgeted(&[]);
    let mut setup = raw::connect(&broker);
    for i in 0..8 {
        let batch = protocol::batch::build::patterned(1_700_000_000_000, 1_000, 1_000, i);
        produce(&mut setup, "data", &batch, i as i32);
    }
    produce(
        &mut setup,
        "good",
        &protocol::batch::build::patterned(1, 1, 1, 1),
        99,
    );
    let baseline = rss_bytes(broker.pid()).unwrap();
    let bound = BUDGET_BOUND;
    let mut rounds = 0;
    let mut answered = 0;
    let mut peak = 0u64;
    let mut slowest = Duration::ZERO;
    while budget.more(rounds) {
        let watch = RssWatch::start(broker.pid(), baseline + 2 * bound);
        let release = Release::new();
        let mut fetches = Vec::new();
        for i in 0..100 {
            fetches.extend(raw::frame(
                ApiKey::Fetch,
                12,
                i,
                "never-reads",
                &fetch_request("data", 0, 50_000_000),
            ));
        }
        let mut header = ((8u32 << 20) as i32).to_be_bytes().to_vec();
        header.extend_from_slice(&(ApiKey::Metadata as i16).to_be_bytes());
        let mut threads = hostile(&broker, 5, fetches, release.clone());
        threads.extend(hostile(&broker, 100, header, release.clone()));
        let (slow, done) = well_behaved(&broker, "good", 2);
        slowest = slowest.max(slow);
        answered += done;
        end(release, threads);
        let (round_peak, killed) = watch.finish();
        assert!(!killed, "round {rounds}: RSS passed twice the bound");
        peak = peak.max(round_peak);
        // Round by round (in the soak's log): a leak climbs, memory the
        // allocator keeps for reuse levels off.
        eprintln!(
            "hostile round {rounds}: peak_rss_mib={} rss_after_mib={}",
            round_peak >> 20,
            rss_bytes(broker.pid()).unwrap_or(0) >> 20
        );
        rounds += 1;
    }
    println!(
        "soak hostile: rounds={rounds} well_behaved_rounds={answered} slowest_answer_ms={} rss_growth_mib={} bound_mib={} peak_rss_mib={}",
        slowest.as_millis(),
        peak.saturating_sub(baseline) >> 20,
        bound >> 20,
        peak >> 20
    );
    assert!(peak.saturating_sub(baseline) <= bound);
    // Every connection of the attacks was closed or released: the broker
    // answers as before.
    let closed = poll_until(Duration::from_secs(10), || {
        let mut stream = raw::connect(&broker);
        Some(produce(
            &mut stream,
            "good",
            &protocol::batch::build::patterned(2, 1, 1, 2),
            5,
        ))
    });
    assert!(closed.is_some());
}
