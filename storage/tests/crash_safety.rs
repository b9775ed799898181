//! Crash safety: a child process appends with `flush=always` from several
//! concurrent tasks and prints every offset the log reported durable; the
//! parent SIGKILLs it at a random moment, reopens the log, and checks that
//! every reported batch is present with identical bytes and that offsets
//! are contiguous. Repeated on the same directory, so each round also
//! recovers from the previous crash.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{read_all, run, Spec};
use rand::Rng;
use storage::{AppendOptions, Log, LogConfig};

const CHILD_ENV: &str = "STROM_CRASH_CHILD_DIR";
const ROUNDS: usize = 24;
const APPENDERS: u64 = 4;

fn crash_config() -> LogConfig {
    let mut config = common::config(256 << 10);
    config.preallocate_bytes = 128 << 10;
    config
}

/// The child's body: `kill_9_loses_no_durable_batch` runs itself again in
/// a process of its own, with `CHILD_ENV` naming the log's directory, and
/// that process appends here until it is killed.
fn crash_child(dir: String) {
    let round: u64 = std::env::var("STROM_CRASH_ROUND").unwrap().parse().unwrap();
    run(move || async move {
        let log = Log::open(&common::ctx(), &dir, crash_config())
            .await
            .expect("child open");
        let tasks: Vec<_> = (0..APPENDERS)
            .map(|task| {
                let log = log.clone();
                glommio::spawn_local(async move {
                    for i in 0u64.. {
                        // Seeds are unique per round, task and sequence.
                        let seed = round << 40 | task << 32 | i;
                        let spec =
                            Spec::new(seed, 1 + (i % 7) as usize, 50 + ((i * 37) % 900) as usize);
                        let info = log
                            .append(spec.bytes(), AppendOptions::default())
                            .await
                            .unwrap();
                        log.wait_durable(info.last_offset).await.unwrap();
                        println!(
                            "durable {} {} {} {} {}",
                            info.base_offset,
                            info.last_offset,
                            spec.seed,
                            spec.count,
                            spec.value_len
                        );
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await;
        }
    });
}

#[test]
fn kill_9_loses_no_durable_batch() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        return crash_child(dir);
    }
    let dir = common::tempdir().unwrap();
    let path = dir.path().join("crash-0");
    let mut acknowledged: Vec<(u64, Spec)> = Vec::new();
    let mut rng = rand::thread_rng();
    for round in 0..ROUNDS {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "kill_9_loses_no_durable_batch",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, &path)
            .env("STROM_CRASH_ROUND", round.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let kill_after = rng.gen_range(1..400usize);
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut lines = BufReader::new(stdout).lines();
        let mut seen = 0;
        // Read acknowledgements until a random count, then kill mid-flight.
        while seen < kill_after && Instant::now() < deadline {
            let Some(Ok(line)) = lines.next() else { break };
            if let Some(ack) = parse_ack(&line) {
                acknowledged.push(ack);
                seen += 1;
            }
        }
        assert!(seen > 0, "round {round}: the child acknowledged nothing");
        child.kill().unwrap();
        // Lines written before the kill are acknowledgements too.
        for line in lines.map_while(Result::ok) {
            if let Some(ack) = parse_ack(&line) {
                acknowledged.push(ack);
            }
        }
        child.wait().unwrap();

        let expected = acknowledged.clone();
        let path = path.clone();
        run(move || async move {
            let log = Log::open(&common::ctx(), &path, crash_config())
                .await
                .expect("reopen after kill");
            let stored = read_all(&log, 1 << 20).await;
            let by_base: std::collections::HashMap<u64, &Vec<u8>> =
                stored.iter().map(|(base, bytes)| (*base, bytes)).collect();
            assert_eq!(stored.first().map(|(b, _)| *b), Some(0), "log starts at 0");
            for (base, spec) in &expected {
                let bytes = by_base
                    .get(base)
                    .unwrap_or_else(|| panic!("round {round}: durable batch at {base} lost"));
                assert_eq!(
                    **bytes,
                    spec.stored(*base),
                    "round {round}: bytes at {base}"
                );
            }
            // Every other round leaves the log unclosed, so the next child
            // recovers from two crashes in a row.
            if round % 2 == 0 {
                log.close().await.unwrap();
            }
        });
    }
    assert!(
        acknowledged.len() > ROUNDS,
        "too few acknowledgements to mean anything"
    );
}

fn parse_ack(line: &str) -> Option<(u64, Spec)> {
    let rest = line.strip_prefix("durable ")?;
    let fields: Vec<u64> = rest
        .split(' ')
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    let [base, last, seed, count, value_len] = fields[..] else {
        return None;
    };
    assert_eq!(last - base + 1, count);
    Some((base, Spec::new(seed, count as usize, value_len as usize)))
}
