//! Acknowledged means kept, under the faults that once lost acknowledged
//! records: real `strom` processes (each `--cores 1` on loopback), a topic
//! with three replicas and `min.insync.replicas=2`, an idempotent
//! `acks=all` confluent-kafka producer writing self-checking records
//! (tests/clients/replication_check.py), and after each run every
//! acknowledged record checked twice: read back by a consumer, and found
//! at its offset in every replica's segment files with the brokers
//! stopped.
//!
//! - A leader whose followers are both paused (SIGSTOP) while the client
//!   resends: a resent batch is acknowledged only once replicated, so
//!   nothing is acknowledged during the pause, and nothing is lost when
//!   the leader is then killed.
//! - A broker restarted with an emptied data dir, at once and after its
//!   session ran out: it never leads on its earlier incarnation's word,
//!   and no follower cuts its log to it.
//! - An active controller paused for three sessions: once it runs again
//!   it fences no live broker.
//! - A leader's ISR change left unanswered (the controller quorum paused
//!   while a follower comes back): the change stays proposed and is sent
//!   again until the controller answers.
//!
//! Each runs one round by default; `scripts/soak` runs many
//! (`STROM_SOAK_ROUNDS`).

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::acks::{acks, now_ms, replication_script, Ack, Reaped};
use common::SoakBudget;
use test_support::cluster::{Cluster, SESSION_MS};
use test_support::{poll_until, run};

/// Acknowledgements to wait for before a fault, so it lands mid-stream.
const ACKS_BEFORE_FAULT: usize = 1_000;
const PROGRESS_DEADLINE: Duration = Duration::from_secs(90);

/// (leader, ISR) of each partition of `topic`, as kcat lists them.
fn partitions(bootstrap: &str, topic: &str) -> Option<BTreeMap<i32, (i32, Vec<i32>)>> {
    common::listing::partitions(bootstrap, topic)
}

/// The brokers `bootstrap` lists and its active controller.
fn brokers(bootstrap: &str) -> Option<(Vec<i32>, i32)> {
    common::listing::brokers(bootstrap)
}

/// Creates `topic` through `bootstrap` with the replica lists given
/// (preferred leader first) and `min.insync.replicas=2`, with
/// confluent-kafka's admin client.
fn create(bootstrap: &str, topic: &str, replicas: &[&[i32]]) {
    create_with(bootstrap, topic, replicas, &[]);
}

/// [`create`] with more topic configs.
fn create_with(bootstrap: &str, topic: &str, replicas: &[&[i32]], configs: &[(&str, &str)]) {
    let assignment = format!("{replicas:?}");
    let count = replicas.len();
    let configs: String = configs
        .iter()
        .map(|(key, value)| format!(", '{key}': '{value}'"))
        .collect();
    let script = format!(
        "from confluent_kafka.admin import AdminClient, NewTopic\n\
         admin = AdminClient({{'bootstrap.servers': '{bootstrap}'}})\n\
         topic = NewTopic('{topic}', num_partitions={count}, replica_assignment={assignment}, \
         config={{'min.insync.replicas': '2'{configs}}})\n\
         admin.create_topics([topic], request_timeout=30)['{topic}'].result(60)\n"
    );
    let output = run(
        Command::new("python3").args(["-c", &script]),
        None,
        Duration::from_secs(90),
    );
    assert!(
        output.status.success(),
        "create {topic}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The producer of `replication_check.py`, writing until stopped.
struct Producing {
    child: Reaped,
    dir: tempfile::TempDir,
    topic: String,
}

impl Producing {
    fn start(bootstrap: &str, topic: &str, settings: &[&str]) -> Producing {
        let dir = tempfile::tempdir().unwrap();
        let child = Command::new("python3")
            .arg(replication_script())
            .args(["produce", bootstrap, topic])
            .arg(dir.path().join("stop"))
            .arg(dir.path().join("acks"))
            .args(settings)
            .stdout(std::fs::File::create(dir.path().join("producer.log")).unwrap())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 runs");
        Producing {
            child: Reaped(child),
            dir,
            topic: topic.to_string(),
        }
    }

    fn acks(&self) -> Vec<Ack> {
        acks(&self.dir.path().join("acks"))
    }

    /// Waits for `more` acknowledgements beyond those so far.
    fn wait_for_more(&self, cluster: &Cluster, more: usize, what: &str) {
        let before = self.acks().len();
        if poll_until(PROGRESS_DEADLINE, || {
            (self.acks().len() >= before + more).then_some(())
        })
        .is_none()
        {
            panic!("no acknowledgements {what}\n{}", cluster.logs());
        }
    }

    /// Stops the producer, reads the topic back through a consumer, waits
    /// until every replica of every partition is in sync (each then holds
    /// every acknowledged record), stops every broker cleanly (what the
    /// journal holds is then in the segment files) and checks each
    /// replica's segment files. Prints the counts.
    fn stop_and_check_every_replica(mut self, cluster: &mut Cluster, replicas: &[i32]) {
        let dir = self.dir.path().to_path_buf();
        let read_back = common::acks::stop_and_check(
            &mut self.child,
            &dir.join("stop"),
            &dir.join("producer.log"),
            Command::new("python3")
                .arg(replication_script())
                .args(["check", &cluster.bootstrap(), &self.topic])
                .arg(dir.join("acks")),
            || cluster.logs(),
        );
        println!("read back: {}", read_back.trim());
        let any = cluster.bootstrap();
        cluster.wait_for("every replica in sync", || {
            partitions(&any, &self.topic)
                .filter(|p| p.values().all(|(_, isr)| isr.len() == replicas.len()))
        });
        let ids: Vec<i32> = cluster.nodes.iter().map(|n| n.id).collect();
        for id in ids {
            cluster.node_mut(id).broker.stop();
        }
        let dirs: Vec<PathBuf> = replicas.iter().map(|&id| data_dir(cluster, id)).collect();
        let output = run(
            Command::new("python3")
                .arg(replication_script())
                .args(["check-replicas", &self.topic])
                .arg(dir.join("acks"))
                .args(&dirs),
            None,
            Duration::from_secs(120),
        );
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "replicas differ from what was acknowledged:\n{stdout}{}\n{}",
            String::from_utf8_lossy(&output.stderr),
            cluster.logs()
        );
        print!("{stdout}");
    }
}

/// Node `id`'s data dir.
fn data_dir(cluster: &Cluster, id: i32) -> PathBuf {
    cluster.dir(id).join("data")
}

/// A leader whose two followers are paused cannot have a batch
/// replicated; the client times out and resends. Each resend must wait as
/// its original does (acknowledged once in the ISR), not be answered at
/// once because the leader has it: then killing the leader lost it.
#[test]
fn a_resent_batch_is_acknowledged_only_once_replicated() {
    let budget = SoakBudget::from_env(1);
    let mut cluster = Cluster::start(3, &[]);
    let any = cluster.node(1).broker.bootstrap();
    cluster.wait_for("three brokers", || {
        brokers(&any).filter(|(ids, c)| ids.len() == 3 && *c > 0)
    });
    let topic = "resent";
    create(&any, topic, &[&[1, 2, 3]]);
    cluster.wait_for("three in sync", || {
        partitions(&any, topic).filter(|p| p[&0].1.len() == 3)
    });
    // A request answered later than this is sent again: librdkafka
    // resends an idempotent batch only on a new connection, which it opens
    // once the socket timed out.
    let producer = Producing::start(
        &cluster.bootstrap(),
        topic,
        &["request.timeout.ms=1500", "socket.timeout.ms=1500"],
    );
    let pause = Duration::from_millis(SESSION_MS * 3);
    let mut rounds = 0;
    while budget.more(rounds) {
        producer.wait_for_more(&cluster, ACKS_BEFORE_FAULT, "before the pause");
        let (leader, _) = cluster.wait_for("a leader", || {
            partitions(&cluster.bootstrap(), topic).map(|p| p[&0].clone())
        });
        let followers: Vec<i32> = (1..=3).filter(|&id| id != leader).collect();
        let paused_at = now_ms();
        for &id in &followers {
            cluster.node(id).broker.signal(libc::SIGSTOP);
        }
        // The fault itself lasts this long: several of the client's
        // request timeouts, so that it resends.
        std::thread::sleep(pause);
        let resumed_at = now_ms();
        let acknowledged_while_paused: Vec<Ack> = producer
            .acks()
            .into_iter()
            .filter(|(_, _, at, sent)| *sent > paused_at && *at < resumed_at)
            .collect();
        // The leader is killed before the followers run again: what it
        // alone held is gone.
        cluster.node_mut(leader).broker.kill();
        for &id in &followers {
            cluster.node(id).broker.signal(libc::SIGCONT);
        }
        assert!(
            acknowledged_while_paused.is_empty(),
            "{} records sent after both followers were paused were acknowledged before they \
             ran again, e.g. {:?}",
            acknowledged_while_paused.len(),
            &acknowledged_while_paused[..acknowledged_while_paused.len().min(5)]
        );
        let survivor = cluster.node(followers[0]).broker.bootstrap();
        cluster.wait_for("a follower leads", || {
            partitions(&survivor, topic).filter(|p| followers.contains(&p[&0].0))
        });
        cluster.node_mut(leader).broker.start_again();
        producer.wait_for_more(&cluster, ACKS_BEFORE_FAULT, "after the failover");
        cluster.wait_for("the old leader back in sync", || {
            partitions(&survivor, topic).filter(|p| p[&0].1.len() == 3)
        });
        rounds += 1;
        println!("round {rounds}: followers {followers:?} of leader {leader} paused {pause:?}, none acknowledged meanwhile; leader killed");
    }
    producer.stop_and_check_every_replica(&mut cluster, &[1, 2, 3]);
}

/// A broker that lost its disk and returns (a replaced disk, an emptied
/// data dir) holds nothing of what it acknowledged. It must not lead
/// again on its earlier incarnation's leadership, nor make the followers
/// cut their logs to its empty one: once at a restart within its session,
/// once after its session ran out and it was fenced.
#[test]
fn a_broker_back_with_an_emptied_data_dir_never_leads_on_its_old_word() {
    let budget = SoakBudget::from_env(1);
    let mut cluster = Cluster::start(3, &[]);
    cluster.add_broker(4);
    let any = cluster.node(1).broker.bootstrap();
    cluster.wait_for("four brokers", || {
        brokers(&any).filter(|(ids, c)| ids.len() == 4 && *c > 0)
    });
    let topic = "emptied";
    // Broker 4 (not a voter: an emptied voter is refused at start) leads.
    create(&any, topic, &[&[4, 1, 2], &[4, 2, 1]]);
    cluster.wait_for("broker 4 leads, all in sync", || {
        partitions(&any, topic).filter(|p| p.values().all(|(l, isr)| *l == 4 && isr.len() == 3))
    });
    let producer = Producing::start(&cluster.bootstrap(), topic, &[]);
    let mut rounds = 0;
    while budget.more(rounds) {
        for after_session in [false, true] {
            producer.wait_for_more(&cluster, ACKS_BEFORE_FAULT, "before the kill");
            cluster.node_mut(4).broker.kill();
            let dir = data_dir(&cluster, 4);
            std::fs::remove_dir_all(&dir).unwrap();
            std::fs::create_dir_all(&dir).unwrap();
            if after_session {
                cluster.wait_for("broker 4's leaderships moved", || {
                    partitions(&any, topic).filter(|p| {
                        p.values()
                            .all(|(l, isr)| *l > 0 && *l != 4 && !isr.contains(&4))
                    })
                });
            }
            cluster.node_mut(4).broker.start_again();
            // Until it has caught up it is no ISR member and leads nothing.
            let back = poll_until(PROGRESS_DEADLINE, || {
                let listed = partitions(&any, topic)?;
                for (index, (leader, isr)) in &listed {
                    assert!(
                        *leader != 4 || isr.len() == 3,
                        "partition {index}: broker 4 leads with an emptied log, ISR {isr:?}\n{}",
                        cluster.logs()
                    );
                }
                listed
                    .values()
                    .all(|(_, isr)| isr.contains(&4))
                    .then_some(())
            });
            assert!(
                back.is_some(),
                "broker 4 not back in sync\n{}",
                cluster.logs()
            );
            producer.wait_for_more(&cluster, ACKS_BEFORE_FAULT, "after broker 4 returned");
            println!(
                "round {}: broker 4 back with an emptied data dir {} its session ran out: \
                 it caught up as a follower",
                rounds + 1,
                if after_session { "after" } else { "before" }
            );
        }
        rounds += 1;
    }
    // A follower ahead of the new leader when broker 4 is killed cuts
    // what no one acknowledged; none may cut its log to broker 4's.
    let log = cluster.logs();
    let cut_to_broker_4: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("follower log cut where it diverges") && l.contains(" leader=4 "))
        .collect();
    assert!(
        cut_to_broker_4.is_empty(),
        "a follower cut its log to broker 4's: {cut_to_broker_4:?}\n{log}"
    );
    producer.stop_and_check_every_replica(&mut cluster, &[4, 1, 2]);
}

/// The fencing lines a controller logs.
fn fences_logged(log: &str) -> usize {
    log.lines()
        .filter(|l| l.contains("fenced, its leaderships move") && !l.contains("broker stops"))
        .count()
}

/// An active controller stopped for longer than a session (a long GC
/// pause, a stalled VM) comes back to sessions that ran out while it
/// could hear nothing: it must fence no live broker for that.
#[test]
fn a_paused_controller_fences_no_live_broker() {
    let budget = SoakBudget::from_env(1);
    let mut cluster = Cluster::start(3, &[]);
    let any = cluster.node(1).broker.bootstrap();
    cluster.wait_for("three brokers", || {
        brokers(&any).filter(|(ids, c)| ids.len() == 3 && *c > 0)
    });
    let topic = "paused";
    create(&any, topic, &[&[1, 2, 3], &[2, 3, 1], &[3, 1, 2]]);
    cluster.wait_for("all in sync", || {
        partitions(&any, topic).filter(|p| p.values().all(|(_, isr)| isr.len() == 3))
    });
    let producer = Producing::start(&cluster.bootstrap(), topic, &[]);
    let pause = Duration::from_millis(SESSION_MS * 3);
    let mut rounds = 0;
    while budget.more(rounds) {
        producer.wait_for_more(&cluster, ACKS_BEFORE_FAULT, "before the pause");
        let (_, controller) = cluster.wait_for("a controller", || {
            brokers(&any).filter(|(ids, c)| ids.len() == 3 && *c > 0)
        });
        let others: Vec<i32> = (1..=3).filter(|&id| id != controller).collect();
        let fences_before = fences_logged(&cluster.node(controller).broker.log());
        // Each node's log so far: only what it logs from here on counts.
        let logged_before: Vec<usize> = (1..=3)
            .map(|id| cluster.node(id).broker.log().lines().count())
            .collect();
        cluster.node(controller).broker.signal(libc::SIGSTOP);
        // The fault itself lasts this long: three sessions.
        std::thread::sleep(pause);
        let other = cluster.node(others[0]).broker.bootstrap();
        cluster.node(controller).broker.signal(libc::SIGCONT);
        // Back: it rejoins and every broker stays listed (unfenced).
        cluster.wait_for("the paused node back in every ISR", || {
            partitions(&other, topic)
                .filter(|p| p.values().all(|(l, isr)| *l > 0 && isr.len() == 3))
        });
        producer.wait_for_more(&cluster, ACKS_BEFORE_FAULT, "after the pause");
        let log = cluster.node(controller).broker.log();
        assert_eq!(
            fences_logged(&log),
            fences_before,
            "the paused controller fenced brokers once it ran again\n{}",
            cluster.logs()
        );
        // The others fence the paused node (it was silent); no node
        // fences a live one.
        for id in 1..=3 {
            let log = cluster.node(id).broker.log();
            let fenced_live: Vec<&str> = log
                .lines()
                .skip(logged_before[id as usize - 1])
                .filter(|l| {
                    l.contains("fenced, its leaderships move")
                        && !l.contains("broker stops")
                        && others.iter().any(|o| l.contains(&format!(" broker={o} ")))
                })
                .collect();
            assert!(
                fenced_live.is_empty(),
                "node {id} fenced a live broker: {fenced_live:?}\n{}",
                cluster.logs()
            );
        }
        rounds += 1;
        println!("round {rounds}: active controller {controller} paused {pause:?}: no live broker fenced");
    }
    producer.stop_and_check_every_replica(&mut cluster, &[1, 2, 3]);
}

/// The lines of `log` saying an ISR change went unanswered and stays
/// proposed.
fn unanswered_isr_changes(log: &str) -> usize {
    log.lines()
        .filter(|l| l.contains("ISR change not answered; it stays proposed"))
        .count()
}

/// A leader whose AlterPartition request goes unanswered cannot know
/// whether the controller took the change: it must keep the change
/// proposed (its members counted for the high watermark) and send it
/// again, never give it up and count over the smaller ISR. Broker 4 (no
/// voter) leads, broker 5 (no voter) and voter 1 follow; 5 is paused until
/// it leaves the ISR, then voters 2 and 3 are paused (no quorum) and 5
/// runs again, catches up and is proposed back in. The
/// change goes unanswered while the quorum is gone; once the voters run
/// again it is taken and 5 is back in the ISR, with every acknowledged
/// record in every replica.
#[test]
fn an_unanswered_isr_change_stays_proposed_and_is_sent_again() {
    let budget = SoakBudget::from_env(1);
    // A follower leaves the ISR well before its session runs out.
    let lag_ms = SESSION_MS / 2;
    let lag = format!("replica.lag.time.max.ms={lag_ms}");
    let mut cluster = Cluster::start(3, &["--set", &lag]);
    cluster.add_broker(4);
    cluster.add_broker(5);
    let any = cluster.node(1).broker.bootstrap();
    cluster.wait_for("five brokers", || {
        brokers(&any).filter(|(ids, c)| ids.len() == 5 && *c > 0)
    });
    let topic = "unanswered";
    create(&any, topic, &[&[4, 5, 1]]);
    cluster.wait_for("broker 4 leads, all in sync", || {
        partitions(&any, topic).filter(|p| p[&0].0 == 4 && p[&0].1.len() == 3)
    });
    let producer = Producing::start(&cluster.bootstrap(), topic, &[]);
    let leader = cluster.node(4).broker.bootstrap();
    // The quorum stays away this long: several AlterPartition timeouts.
    let quorum_away = Duration::from_secs(12);
    let mut rounds = 0;
    while budget.more(rounds) {
        producer.wait_for_more(&cluster, ACKS_BEFORE_FAULT, "before the pause");
        let unanswered_before = unanswered_isr_changes(&cluster.node(4).broker.log());
        cluster.node(5).broker.signal(libc::SIGSTOP);
        cluster.wait_for("broker 5 out of the ISR", || {
            partitions(&leader, topic).filter(|p| p[&0].0 == 4 && !p[&0].1.contains(&5))
        });
        // Voters 2 and 3 paused: no quorum. When voter 1 is the active
        // controller it may still log the change without committing it,
        // and commit it once the others return, long after the leader's
        // request timed out: the case where the answer is lost.
        let paused = [2, 3];
        let quorum_left = std::time::Instant::now();
        for &id in &paused {
            cluster.node(id).broker.signal(libc::SIGSTOP);
        }
        cluster.node(5).broker.signal(libc::SIGCONT);
        let resends = poll_until(quorum_away, || {
            let seen = unanswered_isr_changes(&cluster.node(4).broker.log());
            (seen > unanswered_before).then_some(seen)
        });
        // The fault lasts `quorum_away` in every round, however soon the
        // poll saw the resend.
        std::thread::sleep(quorum_away.saturating_sub(quorum_left.elapsed()));
        for &id in &paused {
            cluster.node(id).broker.signal(libc::SIGCONT);
        }
        assert!(
            resends.is_some(),
            "broker 4 never logged an unanswered ISR change while the quorum was paused\n{}",
            cluster.logs()
        );
        cluster.wait_for("broker 5 back in the ISR", || {
            partitions(&leader, topic).filter(|p| p[&0].0 == 4 && p[&0].1.len() == 3)
        });
        producer.wait_for_more(&cluster, ACKS_BEFORE_FAULT, "after the quorum returned");
        rounds += 1;
        println!(
            "round {rounds}: voters {paused:?} paused {quorum_away:?} while broker 5 caught up: \
             the ISR change stayed proposed, was sent again and taken"
        );
    }
    producer.stop_and_check_every_replica(&mut cluster, &[4, 5, 1]);
}

/// A loop-mounted ext4 filesystem made for a node's data dir, unmounted
/// (lazily, if a process still holds it) when dropped.
struct SmallDisk {
    mount_point: PathBuf,
    bytes: u64,
    _image_dir: tempfile::TempDir,
}

impl SmallDisk {
    /// Room for the broker's logs of a round: the producer keeps writing
    /// to the same topic (about 0.5 MB/s), and every acknowledged record
    /// is kept to the end, so each round leaves about 10 MiB more.
    const BYTES_PER_ROUND: u64 = 16 << 20;
    const BYTES_MIN: u64 = 96 << 20;

    /// A disk for `rounds` rounds of filling and freeing.
    fn mount(mount_point: PathBuf, rounds: u64) -> Result<SmallDisk, String> {
        let bytes = Self::BYTES_MIN.max((64 << 20) + rounds * Self::BYTES_PER_ROUND);
        let image_dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let image = image_dir.path().join("disk.img");
        std::fs::create_dir_all(&mount_point).map_err(|e| e.to_string())?;
        test_support::mount::ext4_image(&image, bytes, &[])?;
        test_support::mount::mount_loop(&image, &mount_point)?;
        Ok(SmallDisk {
            mount_point,
            bytes,
            _image_dir: image_dir,
        })
    }

    /// Fills the filesystem up to `left` free bytes with a file of its own.
    fn fill(&self, left: u64) -> PathBuf {
        use std::io::Write;
        let path = self.mount_point.join("ballast");
        let mut file = std::fs::File::create(&path).unwrap();
        let chunk = vec![0x5a_u8; 1 << 20];
        for _ in 0..(self.bytes >> 20) {
            let free = storage::free_bytes(&self.mount_point).unwrap();
            if free <= left {
                break;
            }
            let n = ((free - left) as usize).min(chunk.len());
            if file.write_all(&chunk[..n]).is_err() {
                break;
            }
            let _ = file.sync_data();
        }
        path
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        test_support::mount::unmount(&self.mount_point);
    }
}

/// When (ms since the Unix epoch, by the log's timestamps) each refusal of
/// a write for want of space was logged.
fn refusals(log: &str) -> Vec<u64> {
    log.lines()
        .filter(|l| l.contains("the data dir refuses writes for want of space"))
        .filter_map(log_time_ms)
        .collect()
}

/// The time a log line starts with (`2026-12-03T09:07:14.178533Z`), in ms
/// since the Unix epoch.
fn log_time_ms(line: &str) -> Option<u64> {
    let stamp = line.split_whitespace().next()?.strip_suffix('Z')?;
    let (date, time) = stamp.split_once('T')?;
    let mut ymd = date.split('-').map(|v| v.parse::<i64>().ok());
    let (y, m, d) = (ymd.next()??, ymd.next()??, ymd.next()??);
    let mut hms = time.split(':');
    let (h, min) = (
        hms.next()?.parse::<i64>().ok()?,
        hms.next()?.parse::<i64>().ok()?,
    );
    let seconds: f64 = hms.next()?.parse().ok()?;
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let ms = ((days * 24 + h) * 60 + min) * 60_000 + (seconds * 1000.0) as i64;
    u64::try_from(ms).ok()
}

#[test]
fn log_times_read_as_the_clock_reads() {
    let line = "2026-12-03T09:07:14.178533Z ERROR broker::storage_health: ...";
    assert_eq!(log_time_ms(line), Some(1_796_288_834_178));
    assert_eq!(log_time_ms("1970-01-01T00:00:01.5Z x"), Some(1_500));
    assert_eq!(log_time_ms("not a time"), None);
}

/// Warnings and errors in a log.
fn warnings(log: &str) -> usize {
    log.lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .count()
}

/// A broker whose data dir fills up (here: a follower of one partition
/// and the leader of another) leaves the ISRs and hands over its
/// leadership at once, not after `replica.lag.time.max.ms`, so acks=all
/// goes on with the others; it logs the repeated refusals a few times,
/// not thousands; and once space returns it rejoins every ISR by itself.
#[test]
fn a_broker_whose_disk_fills_leaves_the_isrs_at_once_and_returns() {
    let budget = SoakBudget::from_env(1);
    // A lag bound far beyond the test's: leaving the ISR must not wait for it.
    let mut cluster = Cluster::start(3, &["--set", "replica.lag.time.max.ms=120000"]);
    let disk = match SmallDisk::mount(data_dir(&cluster, 4), budget.rounds()) {
        Ok(disk) => disk,
        Err(reason) => {
            eprintln!("SKIPPED: cannot mount a loop filesystem for the full-disk broker: {reason}");
            return;
        }
    };
    cluster.add_broker(4);
    let any = cluster.node(1).broker.bootstrap();
    cluster.wait_for("four brokers", || {
        brokers(&any).filter(|(ids, c)| ids.len() == 4 && *c > 0)
    });
    let topic = "full";
    // Small segments keep the space a log takes ahead small (a quarter of
    // the active segment's size), so the disk fills within seconds of the
    // ballast every round, however long the run.
    create_with(
        &any,
        topic,
        &[&[4, 1, 2], &[1, 4, 2]],
        &[("segment.bytes", "8388608")],
    );
    cluster.wait_for("all in sync, broker 4 leading partition 0", || {
        partitions(&any, topic)
            .filter(|p| p[&0].0 == 4 && p.values().all(|(_, isr)| isr.len() == 3))
    });
    let producer = Producing::start(&cluster.bootstrap(), topic, &[]);
    let mut rounds = 0;
    while budget.more(rounds) {
        producer.wait_for_more(&cluster, ACKS_BEFORE_FAULT, "before the disk fills");
        let log = cluster.node(4).broker.log();
        let warnings_before = warnings(&log);
        let refusals_before = refusals(&log).len();
        let ballast = disk.fill(1 << 20);
        let filled_at = now_ms();
        // Writes go on into space the broker had taken ahead (segment
        // preallocation, its journal chunk) until that is used up: the
        // refusal comes then, and leaving the ISRs must follow it at once,
        // long before the lag bound.
        let left_at = poll_until(Duration::from_secs(100), || {
            partitions(&any, topic)
                .filter(|p| {
                    p.values()
                        .all(|(l, isr)| *l > 0 && *l != 4 && !isr.contains(&4))
                })
                .map(|_| now_ms())
        })
        .unwrap_or_else(|| {
            panic!(
                "broker 4 still in an ISR or leading 100 s after its disk filled\n{}",
                cluster.logs()
            )
        });
        let refused_at = *refusals(&cluster.node(4).broker.log())
            .get(refusals_before)
            .unwrap_or_else(|| panic!("broker 4 left the ISRs without a refused write logged"));
        let left = left_at.saturating_sub(refused_at);
        assert!(
            left < 5_000,
            "broker 4 left the ISRs {left} ms after its first refused write\n{}",
            cluster.logs()
        );
        producer.wait_for_more(&cluster, ACKS_BEFORE_FAULT, "while broker 4's disk is full");
        let logged = warnings(&cluster.node(4).broker.log()) - warnings_before;
        std::fs::remove_file(&ballast).unwrap();
        let freed_at = now_ms();
        let rejoined = cluster.wait_for("broker 4 back in every ISR", || {
            partitions(&any, topic)
                .filter(|p| p.values().all(|(_, isr)| isr.contains(&4)))
                .map(|_| now_ms() - freed_at)
        });
        assert!(
            logged < 100,
            "broker 4 logged {logged} warnings while its disk was full\n{}",
            cluster.node(4).broker.log()
        );
        rounds += 1;
        println!(
            "round {rounds}: broker 4's disk full: first write refused {} ms after the fill, out of \
             the ISRs and leading nothing {left} ms after that, {logged} warnings logged; back in \
             every ISR {rejoined} ms after space returned",
            refused_at.saturating_sub(filled_at)
        );
    }
    producer.stop_and_check_every_replica(&mut cluster, &[4, 1, 2]);
    drop(disk);
}
