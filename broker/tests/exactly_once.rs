//! Exactly-once consume-transform-produce against a three-broker cluster:
//! a confluent-kafka application (`tests/clients/eos_app.py`) reads
//! `eos-in` in a consumer group with read_committed and writes one
//! `eos-out` record per input record in transactions that also commit
//! the group's offsets. The application is killed with SIGKILL at random
//! moments and started again (its transactional id fences the killed
//! one), or the brokers under it are killed one after another; at the
//! end `eos-out`, read with read_committed, holds exactly one output of
//! each input record, byte-exact, none missing and none twice.
//! Rounds: `STROM_SOAK_ROUNDS` (`scripts/soak` runs many); the kill
//! moments come from `STROM_SOAK_SEED` (else a seed of the clock, printed).

mod common;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::rng::Rng;
use common::{poll_until, raw, run_python, wait_deadline, SoakBudget};
use protocol::kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use protocol::kafka_protocol::messages::{ApiKey, MetadataRequest, MetadataResponse, TopicName};
use protocol::kafka_protocol::protocol::StrBytes;
use test_support::cluster::Cluster;

/// Input records of each scenario, over `PARTITIONS` partitions.
const INPUT_RECORDS: u64 = 100_000;
const PARTITIONS: u32 = 4;
const REPLICAS: u32 = 3;
/// The application's instance: its static group member and its
/// transactional id are `eos-app-0`.
const INSTANCE: &str = "0";
const TRANSACTIONAL_ID: &str = "eos-app-0";
const GROUP: &str = "eos-app";
/// How long producing the input, a verification or the last
/// application run may take.
const SCRIPT_DEADLINE: Duration = Duration::from_secs(600);
/// How long an application run may go without reaching the moment it is
/// to be killed at (it joins the group and commits in seconds).
const PROGRESS_DEADLINE: Duration = Duration::from_secs(120);
const RAW_CLIENT_ID: &str = "exactly-once-raw";

/// Where one application run stands, as its progress file says.
#[derive(Debug, Clone, PartialEq)]
struct Progress {
    phase: String,
    txns: u64,
}

/// A run of the application, its output in `dir/app-RUN.{out,err}`.
struct App {
    child: Child,
    progress: PathBuf,
    out: PathBuf,
    err: PathBuf,
}

impl App {
    fn start(bootstrap: &str, dir: &Path, run: u64, batch_max: u32) -> App {
        let progress = dir.join("progress");
        let _ = std::fs::remove_file(&progress);
        let out = dir.join(format!("app-{run}.out"));
        let err = dir.join(format!("app-{run}.err"));
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/eos_app.py");
        let child = Command::new("python3")
            .arg(&script)
            .args([bootstrap, "app", INSTANCE])
            .arg(INPUT_RECORDS.to_string())
            .arg(batch_max.to_string())
            .arg(&progress)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .expect("python3 runs eos_app.py");
        App {
            child,
            progress,
            out,
            err,
        }
    }

    fn progress(&self) -> Option<Progress> {
        let text = std::fs::read_to_string(&self.progress).ok()?;
        let mut fields = text.split_whitespace();
        let phase = fields.next()?.to_string();
        let txns = fields.next()?.parse().ok()?;
        Some(Progress { phase, txns })
    }

    /// Polls until `at` holds for the run's progress (`Some(true)`), the
    /// run exits (`Some(false)`), or the deadline passes (`None`).
    fn wait_for(&mut self, at: impl Fn(&Progress) -> bool) -> Option<bool> {
        poll_until(PROGRESS_DEADLINE, || {
            if self.child.try_wait().unwrap().is_some() {
                return Some(false);
            }
            self.progress().filter(|p| at(p)).map(|_| true)
        })
    }

    fn kill(&mut self) {
        self.child.kill().expect("SIGKILL the application");
        wait_deadline(&mut self.child, Duration::from_secs(30))
            .expect("a killed application exits");
    }

    /// The run's stdout and the tail of its stderr, for a failure message.
    fn output(&self) -> String {
        let out = std::fs::read_to_string(&self.out).unwrap_or_default();
        let err = std::fs::read_to_string(&self.err).unwrap_or_default();
        let tail: Vec<&str> = err.lines().rev().take(60).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        format!(
            "stdout:\n{out}\nstderr (last 60 lines):\n{}",
            tail.join("\n")
        )
    }

    /// Waits for the run to finish all input; panics unless it exits 0
    /// saying so. Returns its stdout.
    fn finish(mut self) -> String {
        let status = wait_deadline(&mut self.child, SCRIPT_DEADLINE).unwrap_or_else(|| {
            let _ = self.child.kill();
            panic!(
                "the application did not finish within {SCRIPT_DEADLINE:?}\n{}",
                self.output()
            )
        });
        let out = std::fs::read_to_string(&self.out).unwrap_or_default();
        assert!(
            status.success() && out.contains("app: ok"),
            "the application ended with {status}\n{}",
            self.output()
        );
        out
    }
}

fn start_cluster() -> Cluster {
    let cluster = Cluster::start(
        3,
        &[
            // A transaction whose producer died unrestarted is aborted
            // within seconds of its timeout.
            "--set",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms=1000",
        ],
    );
    // Topics of three replicas need all three registered.
    let bootstrap = cluster.bootstrap();
    cluster.wait_for("three brokers registered", || {
        common::listing::brokers(&bootstrap).filter(|(ids, _)| ids.len() == 3)
    });
    cluster
}

/// Creates `eos-in` and `eos-out` (three replicas, min.insync.replicas
/// 2) and writes the input.
fn produce_input(bootstrap: &str) {
    let out = run_python(
        "eos_app.py",
        &[
            bootstrap,
            "produce",
            &PARTITIONS.to_string(),
            &REPLICAS.to_string(),
            &INPUT_RECORDS.to_string(),
        ],
        SCRIPT_DEADLINE,
    );
    assert!(
        out.contains(&format!(
            "produce: ok {INPUT_RECORDS} records over {PARTITIONS} partitions"
        )),
        "{out}"
    );
}

/// Reads `eos-in` and `eos-out` back and checks one output per input;
/// returns the checker's line.
fn verify(bootstrap: &str) -> String {
    let out = run_python(
        "eos_app.py",
        &[
            bootstrap,
            "verify",
            &PARTITIONS.to_string(),
            &INPUT_RECORDS.to_string(),
        ],
        SCRIPT_DEADLINE,
    );
    let line = out
        .lines()
        .find(|l| l.starts_with("verify: ok"))
        .unwrap_or_else(|| panic!("no verify line: {out}"));
    assert!(
        line.starts_with(&format!("verify: ok {INPUT_RECORDS} records")),
        "{out}"
    );
    line.to_string()
}

/// Where the application was killed in a round.
#[derive(Debug, Clone, Copy)]
enum KillAt {
    /// Right after it was started, before it did anything.
    Start,
    /// Once its transactional producer is initialized (the consumer is
    /// joining the group and fetching its offsets).
    Init,
    /// Once the records of its `n`th transaction of this run are in the
    /// log, before their offsets join the transaction.
    Written(u64),
    /// While it commits its `n`th transaction of this run (EndTxn sent or
    /// about to be).
    Committing(u64),
    /// Once it committed `n` transactions this run: in the middle of
    /// writing the next one.
    AfterCommits(u64),
}

impl KillAt {
    fn pick(rng: &mut Rng) -> KillAt {
        match rng.below(10) {
            0 => KillAt::Start,
            1 => KillAt::Init,
            2..=4 => KillAt::Written(1 + rng.below(4)),
            5..=6 => KillAt::Committing(1 + rng.below(4)),
            _ => KillAt::AfterCommits(1 + rng.below(4)),
        }
    }

    fn reached(self, progress: &Progress) -> bool {
        match self {
            KillAt::Start => true,
            KillAt::Init => true,
            KillAt::Written(n) => progress.phase == "written" && progress.txns + 1 >= n,
            KillAt::Committing(n) => progress.phase == "committing" && progress.txns + 1 >= n,
            KillAt::AfterCommits(n) => progress.txns >= n,
        }
    }

    fn name(self) -> &'static str {
        match self {
            KillAt::Start => "at start",
            KillAt::Init => "after init",
            KillAt::Written(_) => "once written",
            KillAt::Committing(_) => "while committing",
            KillAt::AfterCommits(_) => "mid-transaction",
        }
    }
}

/// The application killed (SIGKILL) at random moments and started again
/// with the same transactional id and static group member, each round:
/// right after its start, once its producer is initialized, once the
/// records of its first to fourth transaction are written (not yet
/// committed), while it commits its first to fourth transaction, or in
/// the middle of the transaction after its first to fourth commit. The last run finishes
/// the input, and every input record has exactly one output.
#[test]
fn the_output_holds_each_input_once_while_the_app_is_killed() {
    let started = Instant::now();
    let budget = SoakBudget::from_env(10);
    let mut rng = Rng::from_env();
    let cluster = start_cluster();
    let bootstrap = cluster.bootstrap();
    produce_input(&bootstrap);
    let dir = tempfile::tempdir().unwrap();
    let mut kills: Vec<&'static str> = Vec::new();
    let mut committed_before_kills = 0u64;
    let mut run = 0u64;
    while budget.more(kills.len() as u64) {
        let at = KillAt::pick(&mut rng);
        let mut app = App::start(&bootstrap, dir.path(), run, 500);
        run += 1;
        let reached = match at {
            KillAt::Start => Some(true),
            _ => app.wait_for(|p| at.reached(p)),
        };
        match reached {
            Some(true) => {
                app.kill();
                let txns = app.progress().map_or(0, |p| p.txns);
                committed_before_kills += txns;
                println!(
                    "round {}: killed {} ({at:?}; {txns} transactions committed in this run)",
                    kills.len() + 1,
                    at.name()
                );
                kills.push(at.name());
            }
            Some(false) => {
                // It finished the input first: the last run below must
                // then find nothing left to do.
                let status = app.child.try_wait().unwrap().unwrap();
                assert!(
                    status.success(),
                    "the application exited ({status}) before it was killed {at:?}\n{}",
                    app.output()
                );
                break;
            }
            None => {
                let progress = app.progress();
                app.kill();
                panic!(
                    "the application did not reach {at:?} within {PROGRESS_DEADLINE:?} (at {progress:?})\n{}",
                    app.output()
                );
            }
        }
    }
    assert!(!kills.is_empty(), "no round ran");
    let last = App::start(&bootstrap, dir.path(), run, 500);
    let finished = last.finish();
    let line = verify(&bootstrap);
    let mut moments = String::new();
    for name in [
        "at start",
        "after init",
        "once written",
        "while committing",
        "mid-transaction",
    ] {
        let n = kills.iter().filter(|k| **k == name).count();
        let _ = write!(moments, "{n} {name}, ");
    }
    println!(
        "soak app_is_killed: {} kills ({}{} transactions known committed by killed runs), last run: {}; {INPUT_RECORDS} records; {line}; {:.0} s",
        kills.len(),
        moments,
        committed_before_kills,
        finished.trim(),
        started.elapsed().as_secs_f64()
    );
}

/// The node a FindCoordinator of `key` (`key_type` 0: group, 1:
/// transactional id) names, asked of node `asked` until it answers.
fn coordinator(cluster: &Cluster, asked: i32, key: &str, key_type: i8) -> i32 {
    cluster.wait_for(&format!("the coordinator of {key}"), || {
        raw::find_coordinator(&cluster.node(asked).broker, key, key_type).filter(|&n| n > 0)
    })
}

/// The leader of `eos-out`'s partition `partition`, as node `asked`
/// lists it.
fn output_leader(cluster: &Cluster, asked: i32, partition: i32) -> i32 {
    cluster.wait_for("a leader of eos-out", || {
        let mut stream = raw::connect(&cluster.node(asked).broker);
        let response: MetadataResponse = raw::call(
            &mut stream,
            ApiKey::Metadata,
            9,
            1,
            RAW_CLIENT_ID,
            &MetadataRequest::default().with_topics(Some(vec![MetadataRequestTopic::default()
                .with_name(Some(TopicName(StrBytes::from_static_str("eos-out"))))])),
        );
        let topic = response.topics.first()?;
        let leader = topic
            .partitions
            .iter()
            .find(|p| p.partition_index == partition)?
            .leader_id
            .0;
        (leader > 0).then_some(leader)
    })
}

/// The brokers of the cluster killed (SIGKILL) and restarted one after
/// another while the application runs, each after it committed a few more
/// transactions, once the records of the next one are written or while
/// it commits: in turn the broker leading the application's
/// `__transaction_state` partition (its transaction coordinator), the
/// leader of a partition of `eos-out`, and the group's coordinator. The
/// application aborts and rewinds after abortable errors and makes its
/// producer anew after fatal ones; every input record still has exactly
/// one output.
#[test]
fn the_output_holds_each_input_once_while_brokers_under_the_app_are_killed() {
    let started = Instant::now();
    let budget = SoakBudget::from_env(3);
    let mut rng = Rng::from_env();
    let mut cluster = start_cluster();
    let bootstrap = cluster.bootstrap();
    produce_input(&bootstrap);
    let dir = tempfile::tempdir().unwrap();
    // Batches of 250: 400 transactions, enough for many kills.
    let mut app = App::start(&bootstrap, dir.path(), 0, 250);
    let mut round = 0u64;
    let mut killed = [0u64; 3];
    while budget.more(round) {
        let done = app.progress().map_or(0, |p| p.txns);
        let target = done + 2 + rng.below(4);
        // Killed with the transaction's records in the log and its
        // offsets not yet sent, or with its EndTxn on the way.
        let phase = ["written", "committing"][rng.below(2) as usize];
        match app.wait_for(|p| p.txns >= target && p.phase == phase) {
            Some(true) => {}
            Some(false) => break,
            None => panic!(
                "the application committed no transaction within {PROGRESS_DEADLINE:?} of round {round}\n{}",
                app.output()
            ),
        }
        let asked = 1 + (round % 3) as i32;
        let (victim, role) = match round % 3 {
            0 => (
                coordinator(&cluster, asked, TRANSACTIONAL_ID, 1),
                "the transaction coordinator",
            ),
            1 => (
                output_leader(&cluster, asked, ((round / 3) % PARTITIONS as u64) as i32),
                "an eos-out leader",
            ),
            _ => (
                coordinator(&cluster, asked, GROUP, 0),
                "the group coordinator",
            ),
        };
        cluster.node_mut(victim).broker.crash_and_restart();
        killed[(round % 3) as usize] += 1;
        round += 1;
        println!(
            "round {round}: killed broker {victim} ({role}) once transaction {} was {phase}",
            target + 1
        );
    }
    assert!(
        round > 0,
        "no broker was killed: the application finished first"
    );
    let finished = app.finish();
    let line = verify(&bootstrap);
    println!(
        "soak brokers_under_the_app: {round} brokers killed ({} transaction coordinators, {} eos-out leaders, {} group coordinators); {INPUT_RECORDS} records; {}; {line}; {:.0} s",
        killed[0],
        killed[1],
        killed[2],
        finished.trim(),
        started.elapsed().as_secs_f64()
    );
}
