//! docs/operations.md's three-node cluster, run as written: the command
//! blocks of "Three nodes on one host" are taken from the document (not
//! copied here) and run with bash in a fresh directory, with the built
//! `strom` first on `PATH`, on the document's own ports. The nodes must
//! start, and every command after them must succeed: the cluster status,
//! a topic created right away (clients wait until a broker serves, they
//! are not refused), and its description listing its 10 partitions. "A
//! secured three-node cluster" runs the same way, from its certificates to
//! a SCRAM user's records read back over SASL_SSL.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const SECTION: &str = "### Three nodes on one host";
/// The ports the document's nodes take: clients, controllers, admin.
const PORTS: [u16; 9] = [9091, 9092, 9093, 9191, 9192, 9193, 9651, 9652, 9653];
const BLOCK_DEADLINE: Duration = Duration::from_secs(120);

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The section of `doc` under `heading`, to the next heading of its level
/// or above.
fn section<'a>(doc: &'a str, heading: &str) -> &'a str {
    let start = doc
        .find(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("docs/operations.md has no `{heading}` section"));
    let rest = &doc[start + 1 + heading.len()..];
    let end = ["\n### ", "\n## "]
        .iter()
        .filter_map(|h| rest.find(h))
        .min()
        .unwrap_or(rest.len());
    &rest[..end]
}

/// Runs `script` with bash in a fresh directory, the built `strom` first
/// on `PATH`: the directory (kept for the logs) and the output.
fn run_script(script: &str) -> (tempfile::TempDir, std::process::Output) {
    let dir = tempfile::tempdir().unwrap();
    let bin = test_support::strom_bin();
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let output = common::run(
        Command::new("bash")
            .args(["-c", script])
            .env("PATH", path)
            .current_dir(dir.path()),
        None,
        BLOCK_DEADLINE,
    );
    (dir, output)
}

/// `output`'s stdout, once the guide's script succeeded; else a panic
/// with the script, its output and the logs of the nodes in `cluster`.
fn succeeded(
    dir: &tempfile::TempDir,
    cluster: &str,
    script: &str,
    output: &std::process::Output,
) -> String {
    let logs: String = (1..=3)
        .map(|id| {
            let log = std::fs::read_to_string(dir.path().join(format!("{cluster}/node-{id}.log")))
                .unwrap_or_default();
            format!("==== node {id} ====\n{log}\n")
        })
        .collect();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "the guide's commands failed ({}):\n{script}\nstdout:\n{stdout}\nstderr:\n{}\n{logs}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// The fenced code blocks of `text`, in order.
fn blocks(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in text.lines() {
        match current.as_mut() {
            Some(lines) if line.trim_start().starts_with("```") => {
                out.push(lines.join("\n"));
                current = None;
            }
            Some(lines) => lines.push(line),
            None if line.trim_start().starts_with("```") => current = Some(Vec::new()),
            None => {}
        }
    }
    assert!(current.is_none(), "an unclosed code block");
    out
}

#[test]
fn the_three_node_cluster_of_the_operations_guide_runs_as_written() {
    let doc = std::fs::read_to_string(repository().join("docs/operations.md")).unwrap();
    let blocks = blocks(section(&doc, SECTION));
    // The start loop, the commands through it, the same node as TOML.
    assert!(blocks.len() >= 2, "{blocks:?}");
    let (start, commands) = (&blocks[0], &blocks[1]);
    assert!(start.contains("strom start"), "{start}");
    for port in PORTS {
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_err() {
            panic!(
                "port {port} of the guide's cluster is taken on this machine: the guide's commands \
                 cannot run as written"
            );
        }
    }
    // The guide says to make the directory first; the nodes are killed
    // whatever happens (they were started in the background).
    let script = format!(
        "set -euo pipefail\ntrap 'kill -9 $(jobs -p) 2>/dev/null; wait' EXIT\n\
         mkdir -p cluster\n{start}\n{commands}\n"
    );
    let (dir, output) = run_script(&script);
    let stdout = succeeded(&dir, "cluster", &script, &output);
    // The description lists all 10 partitions of the topic it created.
    let described = stdout.lines().filter(|l| l.contains("orders")).count();
    assert!(
        described >= 10,
        "topic describe listed {described} rows:\n{stdout}"
    );
}

const SECURED_SECTION: &str = "### A secured three-node cluster";
/// The ports of the guide's secured cluster: clients and brokers,
/// controllers, admin.
const SECURED_PORTS: [u16; 9] = [9291, 9292, 9293, 9391, 9392, 9393, 9751, 9752, 9753];

/// docs/operations.md's secured cluster, run as written: its certificates
/// made with openssl, three nodes with SASL_SSL between brokers and on the
/// controller listener and ACLs on, then the administrator's commands
/// and alice's records written and read back with kcat over SCRAM.
#[test]
fn the_secured_three_node_cluster_of_the_operations_guide_runs_as_written() {
    let doc = std::fs::read_to_string(repository().join("docs/operations.md")).unwrap();
    let blocks = blocks(section(&doc, SECURED_SECTION));
    // Certificates and settings, the start loop, the commands; then the
    // clients' properties (not commands).
    assert!(blocks.len() >= 3, "{blocks:?}");
    let (setup, start, commands) = (&blocks[0], &blocks[1], &blocks[2]);
    assert!(setup.contains("openssl"), "{setup}");
    assert!(start.contains("strom start"), "{start}");
    for port in SECURED_PORTS {
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_err() {
            panic!(
                "port {port} of the guide's secured cluster is taken on this machine: the \
                 guide's commands cannot run as written"
            );
        }
    }
    let script = format!(
        "set -euo pipefail\ntrap 'kill -9 $(jobs -p) 2>/dev/null; wait' EXIT\n\
         {setup}\n{start}\n{commands}\n"
    );
    let (dir, output) = run_script(&script);
    let stdout = succeeded(&dir, "cluster-secure", &script, &output);
    for id in 1..=3 {
        for row in [
            format!("EXTERNAL\t{id}\tSASL_SSL\t127.0.0.1:929{id}\tclients, inter-broker"),
            format!("CONTROLLER\t{id}\tSASL_SSL\t127.0.0.1:939{id}\tcontroller"),
        ] {
            assert!(stdout.contains(&row), "{row:?} not in:\n{stdout}");
        }
    }
    let read: Vec<&str> = stdout.lines().filter(|l| l.ends_with(" order")).collect();
    assert_eq!(read, ["first order", "second order"], "{stdout}");
}
