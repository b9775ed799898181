//! Kafka's KRaft settings and `meta.properties`, through the real binary:
//! bad quorum and listener settings stop `strom start` with a configuration
//! error naming the key and the value; a voter of three started alone
//! starts its broker, logs what it was given and serves no client until the
//! other voters are up, then describes what it was given; the data dir remembers
//! its cluster and node, refusing a start under another node id or with a
//! metadata log of another cluster, and touching nothing when it refuses.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{free_port, poll_until, raw, run, strom_bin, strom_ok, Broker};
use protocol::kafka_protocol::messages::{ApiKey, MetadataRequest, MetadataResponse};

const RUN_DEADLINE: Duration = Duration::from_secs(30);
/// `strom start`'s exit code for a configuration error.
const EXIT_CONFIG: i32 = 2;
const VOTERS: &str = "1@127.0.0.1:9093,2@127.0.0.1:19093,3@127.0.0.1:29093";

/// Runs `strom start` on a fresh data dir with `settings` (`--set`) and
/// expects it to fail with `code`; returns stderr and the data dir.
fn start_fails(node_id: &str, settings: &[&str], code: i32) -> (String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(strom_bin());
    command
        .args([
            "start",
            "--cores",
            "1",
            "--admin-listen",
            "off",
            "--node-id",
            node_id,
        ])
        .arg("--data-dir")
        .arg(dir.path().join("data"));
    for setting in settings {
        command.args(["--set", setting]);
    }
    let output = run(&mut command, None, RUN_DEADLINE);
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    assert_eq!(output.status.code(), Some(code), "{settings:?}: {stderr}");
    (stderr, dir)
}

#[test]
fn bad_kraft_settings_are_configuration_errors_naming_key_and_value() {
    let port = free_port();
    let client = format!("PLAINTEXT://127.0.0.1:{port}");
    let both = format!("listeners={client},CONTROLLER://127.0.0.1:{}", free_port());
    let cases: Vec<(&str, Vec<String>, Vec<&str>)> = vec![
        (
            "1",
            vec!["process.roles=controller".into()],
            vec!["process.roles", "\"controller\"", "not supported yet"],
        ),
        (
            "1",
            vec!["process.roles=broker,router".into()],
            vec!["process.roles", "router"],
        ),
        (
            "1",
            vec!["controller.quorum.voters=1@127.0.0.1:9093,1@127.0.0.1:19093".into()],
            vec![
                "controller.quorum.voters",
                "1@127.0.0.1:19093",
                "given twice",
            ],
        ),
        (
            "1",
            vec!["controller.quorum.voters=1@127.0.0.1:9093,two@127.0.0.1:19093".into()],
            vec!["controller.quorum.voters", "two@127.0.0.1:19093"],
        ),
        (
            "1",
            vec!["controller.quorum.voters=1@127.0.0.1:9093,127.0.0.1:19093".into()],
            vec![
                "controller.quorum.voters",
                "\"127.0.0.1:19093\"",
                "ID@HOST:PORT",
            ],
        ),
        (
            "4",
            vec![format!("controller.quorum.voters={VOTERS}"), both.clone()],
            vec!["controller.quorum.voters", VOTERS, "node.id 4"],
        ),
        (
            "1",
            vec![
                format!("controller.quorum.voters={VOTERS}"),
                format!("listeners={client}"),
            ],
            vec!["listeners", &client, "no controller listener"],
        ),
        (
            "1",
            vec![format!("listeners={client},CONTROLLER://127.0.0.1:{port}")],
            vec!["listeners", "both on 127.0.0.1"],
        ),
        (
            "1",
            vec![
                both.clone(),
                "advertised.listeners=INTERNAL://127.0.0.1:1".into(),
            ],
            vec!["advertised.listeners", "INTERNAL"],
        ),
        (
            "1",
            vec!["process.roles=broker".into()],
            vec!["process.roles", "controller.quorum.voters"],
        ),
        (
            "1",
            vec!["controller.quorum.bootstrap.servers=127.0.0.1".into()],
            vec!["controller.quorum.bootstrap.servers", "127.0.0.1"],
        ),
    ];
    for (node_id, settings, wanted) in &cases {
        let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
        let (stderr, dir) = start_fails(node_id, &settings, EXIT_CONFIG);
        assert!(
            stderr.contains("configuration error"),
            "{settings:?}: {stderr}"
        );
        for text in wanted {
            assert!(
                stderr.contains(text),
                "{settings:?}: {text:?} not in {stderr}"
            );
        }
        assert!(
            !dir.path().join("data").exists(),
            "{settings:?}: a refused start created the data dir"
        );
    }
}

/// A voter's configuration file in `dir`: its id, the quorum, a client
/// listener the harness's `--listen` moves, its controller listener.
fn voter_file(dir: &Path, id: i32, voters: &str, controller_port: u16) -> PathBuf {
    let file = dir.join(format!("strom-{id}.toml"));
    std::fs::write(
        &file,
        format!(
            "\"node.id\" = {id}\n\"process.roles\" = \"broker,controller\"\n\
             \"controller.quorum.voters\" = \"{voters}\"\n\
             listeners = \"PLAINTEXT://127.0.0.1:1,CONTROLLER://127.0.0.1:{controller_port}\"\n\
             \"controller.listener.names\" = \"CONTROLLER\"\n\"broker.rack\" = \"rack-{id}\"\n"
        ),
    )
    .unwrap();
    file
}

#[test]
fn a_voter_of_three_starts_and_reports_its_kraft_settings() {
    // The files name the listeners; `--listen` (the harness's) then moves
    // the client listener to the port the test connects to. Voter 2 starts
    // first, alone: its broker starts while it waits for the other voters,
    // and it serves clients only once the quorum has registered it.
    let dir = tempfile::tempdir().unwrap();
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let voters = format!(
        "1@127.0.0.1:{},2@127.0.0.1:{},3@127.0.0.1:{}",
        ports[0], ports[1], ports[2]
    );
    let controller = format!("CONTROLLER://127.0.0.1:{}", ports[1]);
    let file = voter_file(dir.path(), 2, &voters, ports[1]);
    let broker = Broker::start(&["--config", file.to_str().unwrap()]);
    let client = format!("PLAINTEXT://127.0.0.1:{}", broker.port);
    let log = broker.log();
    for wanted in [
        format!("controller.quorum.voters={voters} ("),
        format!("listeners={client},{controller} ("),
        "process.roles=broker,controller (".to_string(),
        "broker.rack=rack-2 (".to_string(),
        format!("advertised.listeners={client} (flag)"),
    ] {
        assert!(
            log.contains(&wanted),
            "{wanted:?} not in the effective configuration:\n{log}"
        );
    }
    assert!(
        log.contains("controller quorum member started node_id=2"),
        "{log}"
    );
    // Alone it is not served: a client waits (Kafka opens the client
    // listener only once the broker is registered).
    let mut waiting = std::net::TcpStream::connect(("127.0.0.1", broker.port)).unwrap();
    waiting
        .set_read_timeout(Some(Duration::from_millis(1_500)))
        .unwrap();
    let mut byte = [0u8; 1];
    waiting.write_all(&[0, 0, 0, 0]).unwrap();
    assert!(
        waiting.read(&mut byte).is_err(),
        "a voter without a quorum answered a client"
    );
    let others: Vec<Broker> = [1, 3]
        .into_iter()
        .map(|id| {
            let port = ports[(id - 1) as usize];
            let file = voter_file(dir.path(), id, &voters, port);
            Broker::start(&["--config", file.to_str().unwrap()])
        })
        .collect();
    // Every broker registered and live, as `strom cluster status --json`
    // through voter 2 reports them.
    let served = poll_until(RUN_DEADLINE * 2, || {
        let output = common::strom(&broker, &["cluster", "status", "--json"], None);
        let json: serde_json::Value = serde_json::from_slice(&output.stdout).ok()?;
        let live = json["brokers"]
            .as_array()?
            .iter()
            .filter(|b| b["fenced"] == false)
            .count();
        (live == 3).then_some(())
    });
    assert!(
        served.is_some(),
        "the three voters did not form a cluster with every broker registered\n{}\n{}",
        broker.log(),
        others
            .iter()
            .map(|b| b.log())
            .collect::<Vec<_>>()
            .join("\n")
    );
    let mut stream = raw::connect(&broker);
    let metadata: MetadataResponse = raw::call(
        &mut stream,
        ApiKey::Metadata,
        12,
        1,
        "kraft-config-test",
        &MetadataRequest::default(),
    );
    let mut ids: Vec<i32> = metadata.brokers.iter().map(|b| b.node_id.0).collect();
    ids.sort_unstable();
    assert_eq!(ids, vec![1, 2, 3], "{metadata:?}");
    assert!((1..=3).contains(&metadata.controller_id.0), "{metadata:?}");
    let rack = metadata
        .brokers
        .iter()
        .find(|b| b.node_id.0 == 2)
        .and_then(|b| b.rack.as_ref().map(|r| r.to_string()));
    assert_eq!(rack.as_deref(), Some("rack-2"), "{metadata:?}");
    let described = strom_ok(&broker, &["config", "describe", "--broker", "2"]);
    for wanted in [
        format!("  controller.quorum.voters={voters}\tsource=STATIC_BROKER_CONFIG"),
        "  broker.rack=rack-2\tsource=STATIC_BROKER_CONFIG".to_string(),
        "  controller.listener.names=CONTROLLER\tsource=STATIC_BROKER_CONFIG".to_string(),
        "  process.roles=broker,controller\tsource=STATIC_BROKER_CONFIG".to_string(),
    ] {
        assert!(
            described.lines().any(|l| l == wanted),
            "{wanted:?} in:\n{described}"
        );
    }
}

/// Every file under `dir` but the lock (whose content is the holder's
/// pid) with its bytes.
fn contents(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(at) = pending.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else if path.file_name().is_some_and(|n| n != ".lock") {
                out.insert(path.clone(), std::fs::read(&path).unwrap());
            }
        }
    }
    out
}

fn meta_properties(data_dir: &Path) -> BTreeMap<String, String> {
    std::fs::read_to_string(data_dir.join("meta.properties"))
        .expect("meta.properties written")
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// `strom start` on `data_dir` with `node_id`, expected to be refused.
fn refused_start(data_dir: &Path, node_id: &str) -> String {
    let output = run(
        Command::new(strom_bin())
            .args(["start", "--cores", "1", "--admin-listen", "off"])
            .args(["--listen", &format!("127.0.0.1:{}", free_port())])
            .args(["--node-id", node_id])
            .arg("--data-dir")
            .arg(data_dir),
        None,
        RUN_DEADLINE,
    );
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    assert!(
        !output.status.success(),
        "a refused start succeeded: {stderr}"
    );
    stderr
}

#[test]
fn the_data_dir_remembers_its_node_and_refuses_another_node_id() {
    let mut broker = Broker::start(&["--node-id", "5"]);
    common::strom_ok(&broker, &["topic", "create", "kept", "--partitions", "2"]);
    broker.stop();
    let meta = meta_properties(&broker.data_dir);
    assert_eq!(meta.get("version").map(String::as_str), Some("1"));
    assert_eq!(meta.get("node.id").map(String::as_str), Some("5"));
    let cluster_id = meta.get("cluster.id").cloned().unwrap();
    assert_eq!(cluster_id.len(), 22, "a Kafka cluster id: {cluster_id}");
    let before = contents(&broker.data_dir);

    let stderr = refused_start(&broker.data_dir, "6");
    assert!(
        stderr.contains("node.id 5") && stderr.contains("node.id 6"),
        "the error names both ids: {stderr}"
    );
    assert_eq!(
        contents(&broker.data_dir),
        before,
        "a refused start changed the data dir"
    );

    // The same id starts, and the cluster id is the one the file recorded.
    broker.start_again();
    let mut stream = raw::connect(&broker);
    let metadata: MetadataResponse = raw::call(
        &mut stream,
        ApiKey::Metadata,
        12,
        1,
        "kraft-config-test",
        &MetadataRequest::default(),
    );
    assert_eq!(
        metadata.cluster_id.map(|id| id.to_string()),
        Some(cluster_id)
    );
}

#[test]
fn a_data_dir_mixing_two_clusters_is_refused() {
    let mut first = Broker::start(&[]);
    first.stop();
    let mut second = Broker::start(&[]);
    second.stop();
    let first_id = meta_properties(&first.data_dir)["cluster.id"].clone();
    let second_id = meta_properties(&second.data_dir)["cluster.id"].clone();
    assert_ne!(first_id, second_id, "two brokers made two clusters");
    std::fs::copy(
        second.data_dir.join("meta.properties"),
        first.data_dir.join("meta.properties"),
    )
    .unwrap();
    let before = contents(&first.data_dir);
    let stderr = refused_start(&first.data_dir, "0");
    assert!(
        stderr.contains(&first_id) && stderr.contains(&second_id),
        "the error names both cluster ids: {stderr}"
    );
    assert_eq!(
        contents(&first.data_dir),
        before,
        "a refused start changed the data dir"
    );
}

#[test]
fn a_data_dir_from_before_meta_properties_gets_one() {
    let mut broker = Broker::start(&[]);
    broker.stop();
    let written = meta_properties(&broker.data_dir);
    std::fs::remove_file(broker.data_dir.join("meta.properties")).unwrap();
    broker.start_again();
    broker.stop();
    assert_eq!(meta_properties(&broker.data_dir), written);
}
