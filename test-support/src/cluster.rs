//! Several `strom` processes forming one cluster on loopback: each node
//! with `--cores 1`, its own client and controller ports and data dir.
//! Nodes `1..=voters` are the controller quorum; more nodes join as
//! brokers only.

use std::path::PathBuf;
use std::time::Duration;

use crate::{free_port, poll_until, Broker};

/// How long a cluster may take to elect, register and settle.
pub const SETTLE_DEADLINE: Duration = Duration::from_secs(60);

/// Heartbeats and sessions short enough for tests to see fencing soon.
pub const HEARTBEAT_MS: u64 = 250;
pub const SESSION_MS: u64 = 2_000;

pub struct Node {
    pub id: i32,
    pub ports: Ports,
    pub broker: Broker,
}

/// A node's ports: clients, the controller listener (voters only) and the
/// admin HTTP listener (`/metrics`).
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    pub client: u16,
    pub controller: Option<u16>,
    pub admin: u16,
}

impl Ports {
    pub fn free(voter: bool) -> Ports {
        Ports {
            client: free_port(),
            controller: voter.then(free_port),
            admin: free_port(),
        }
    }
}

pub struct Cluster {
    _temp: tempfile::TempDir,
    pub voters: String,
    pub nodes: Vec<Node>,
    extra: Vec<String>,
}

impl Cluster {
    /// Starts `voters` nodes that are both broker and controller.
    pub fn start(voters: usize, extra: &[&str]) -> Cluster {
        let temp = tempfile::tempdir().unwrap();
        let ports: Vec<Ports> = (0..voters).map(|_| Ports::free(true)).collect();
        let voter_list = ports
            .iter()
            .enumerate()
            .map(|(i, p)| format!("{}@127.0.0.1:{}", i + 1, p.controller.unwrap()))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = Cluster {
            _temp: temp,
            voters: voter_list,
            nodes: Vec::new(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        // All at once: each waits for the others to elect a controller.
        let handles: Vec<_> = ports
            .into_iter()
            .enumerate()
            .map(|(i, ports)| {
                let args = cluster.args(i as i32 + 1, ports);
                let dir = cluster.dir(i as i32 + 1);
                std::thread::spawn(move || {
                    let broker = start_node(&dir, ports.client, &args);
                    (i as i32 + 1, ports, broker)
                })
            })
            .collect();
        for handle in handles {
            let (id, ports, broker) = handle.join().unwrap();
            cluster.nodes.push(Node { id, ports, broker });
        }
        cluster
    }

    /// Adds node `id` as a broker only (not a voter).
    pub fn add_broker(&mut self, id: i32) -> &mut Node {
        let ports = Ports::free(false);
        let args = self.args(id, ports);
        let broker = start_node(&self.dir(id), ports.client, &args);
        self.nodes.push(Node { id, ports, broker });
        self.nodes.last_mut().unwrap()
    }

    /// The start arguments of node `id` on `ports` (a voter when they
    /// have a controller port).
    pub fn args(&self, id: i32, ports: Ports) -> Vec<String> {
        let Ports {
            client,
            controller,
            admin,
        } = ports;
        let mut args: Vec<String> = vec![
            "--node-id".into(),
            id.to_string(),
            "--cores".into(),
            "1".into(),
            "--admin-listen".into(),
            format!("127.0.0.1:{admin}"),
        ];
        let listeners = match controller {
            Some(c) => format!("PLAINTEXT://127.0.0.1:{client},CONTROLLER://127.0.0.1:{c}"),
            None => format!("PLAINTEXT://127.0.0.1:{client}"),
        };
        for setting in [
            format!("listeners={listeners}"),
            "controller.listener.names=CONTROLLER".to_string(),
            format!("controller.quorum.voters={}", self.voters),
            format!(
                "process.roles={}",
                if controller.is_some() {
                    "broker,controller"
                } else {
                    "broker"
                }
            ),
            format!("broker.heartbeat.interval.ms={HEARTBEAT_MS}"),
            format!("broker.session.timeout.ms={SESSION_MS}"),
        ] {
            args.push("--set".into());
            args.push(setting);
        }
        args.extend(self.extra.iter().cloned());
        args
    }

    /// Node `id`'s data dir.
    pub fn dir(&self, id: i32) -> PathBuf {
        self._temp.path().join(format!("node-{id}"))
    }

    pub fn node(&self, id: i32) -> &Node {
        self.nodes.iter().find(|n| n.id == id).expect("node exists")
    }

    pub fn node_mut(&mut self, id: i32) -> &mut Node {
        self.nodes
            .iter_mut()
            .find(|n| n.id == id)
            .expect("node exists")
    }

    /// Every node's client address, comma-separated (a bootstrap list).
    pub fn bootstrap(&self) -> String {
        self.nodes
            .iter()
            .map(|n| n.broker.bootstrap())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Waits until `check` holds (polled), or panics with every log.
    pub fn wait_for<T>(&self, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
        poll_until(SETTLE_DEADLINE, &mut check)
            .unwrap_or_else(|| panic!("{what}: not within {SETTLE_DEADLINE:?}\n{}", self.logs()))
    }

    /// Every node's log, headed by its id.
    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("==== node {} ====\n{}", n.id, n.broker.log()))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Starts one node in `dir` (its log next to it), serving clients on `client`.
fn start_node(dir: &std::path::Path, client: u16, args: &[String]) -> Broker {
    std::fs::create_dir_all(dir).unwrap();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Broker::start_at(&dir.join("data"), &dir.join("strom.log"), client, &args)
}
