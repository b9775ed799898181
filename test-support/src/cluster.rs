//! Several `strom` processes forming one cluster on loopback: each node
//! with `--cores 1`, its own client and controller ports and data dir.
//! Nodes `1..=voters` are the controller quorum; more nodes join as
//! brokers only. The voters may run on hosts of a test network instead
//! ([`Cluster::start_on`]).

use std::path::PathBuf;
use std::time::Duration;

use crate::{free_port, poll_until, Broker, Host};

/// How long a new cluster may take until every node is a live broker.
const REGISTER_DEADLINE: Duration = Duration::from_secs(30);

/// How long a cluster may take to elect, register and settle.
pub const SETTLE_DEADLINE: Duration = Duration::from_secs(60);

/// Heartbeats and sessions short enough for tests to see fencing soon.
pub const HEARTBEAT_MS: u64 = 250;
pub const SESSION_MS: u64 = 2_000;

pub struct Node {
    pub id: i32,
    pub host: Host,
    pub ports: Ports,
    pub broker: Broker,
}

/// A node's ports: clients, the controller listener (voters only), the
/// admin HTTP listener (`/metrics`) and, in a secured cluster, the
/// listener the brokers talk to each other on.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    pub client: u16,
    pub controller: Option<u16>,
    pub admin: u16,
    pub inter_broker: u16,
}

impl Ports {
    pub fn free(voter: bool) -> Ports {
        Ports {
            client: free_port(),
            controller: voter.then(free_port),
            admin: free_port(),
            inter_broker: free_port(),
        }
    }
}

/// The listener brokers talk to each other on in a secured cluster.
pub const INTER_BROKER_LISTENER: &str = "BROKER";

pub struct Cluster {
    _temp: tempfile::TempDir,
    pub voters: String,
    pub nodes: Vec<Node>,
    extra: Vec<String>,
    /// Where voter `i + 1` runs; other nodes run on loopback.
    hosts: Vec<Host>,
    /// Brokers talk to each other on a listener of their own
    /// ([`INTER_BROKER_LISTENER`]) of this protocol, and the controller
    /// listener is SASL_SSL; clients keep a PLAINTEXT listener.
    secured: Option<String>,
}

impl Cluster {
    /// Starts `voters` nodes that are both broker and controller.
    pub fn start(voters: usize, extra: &[&str]) -> Cluster {
        Self::start_on(vec![Host::loopback(); voters], extra)
    }

    /// Starts one node that is both broker and controller on each of
    /// `hosts` (node `i + 1` on `hosts[i]`).
    pub fn start_on(hosts: Vec<Host>, extra: &[&str]) -> Cluster {
        Self::start_with(hosts, extra, None)
    }

    /// Starts `voters` nodes whose brokers talk to each other over
    /// SASL_SSL on [`INTER_BROKER_LISTENER`], and whose controller
    /// listener is SASL_SSL, beside a PLAINTEXT listener for clients.
    /// `extra` gives those listeners' TLS and SASL settings.
    pub fn start_secured(voters: usize, extra: &[&str]) -> Cluster {
        Self::start_with(vec![Host::loopback(); voters], extra, Some("SASL_SSL"))
    }

    /// [`Cluster::start_secured`] with the brokers' own listener of
    /// `protocol` (SSL: mutual TLS, with `ssl.client.auth=required` in
    /// `extra`).
    pub fn start_secured_over(voters: usize, protocol: &str, extra: &[&str]) -> Cluster {
        Self::start_with(vec![Host::loopback(); voters], extra, Some(protocol))
    }

    fn start_with(hosts: Vec<Host>, extra: &[&str], secured: Option<&str>) -> Cluster {
        let temp = tempfile::tempdir().unwrap();
        let ports: Vec<Ports> = hosts.iter().map(|_| Ports::free(true)).collect();
        let voter_list = ports
            .iter()
            .zip(&hosts)
            .enumerate()
            .map(|(i, (p, host))| {
                let address = std::net::SocketAddr::new(host.ip, p.controller.unwrap());
                format!("{}@{address}", i + 1)
            })
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = Cluster {
            _temp: temp,
            voters: voter_list,
            nodes: Vec::new(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            hosts,
            secured: secured.map(str::to_string),
        };
        // All at once: each waits for the others to elect a controller.
        let handles: Vec<_> = ports
            .into_iter()
            .enumerate()
            .map(|(i, ports)| {
                let id = i as i32 + 1;
                let args = cluster.args(id, ports);
                let dir = cluster.dir(id);
                let host = cluster.host(id);
                std::thread::spawn(move || {
                    let broker = start_node(host.clone(), &dir, ports.client, &args);
                    Node {
                        id,
                        host,
                        ports,
                        broker,
                    }
                })
            })
            .collect();
        for handle in handles {
            cluster.nodes.push(handle.join().unwrap());
        }
        cluster.wait_until_registered();
        cluster
    }

    /// Waits (at most [`REGISTER_DEADLINE`]) until the cluster lists every
    /// node as a live broker, as `strom cluster status` shows it: a topic
    /// of as many replicas as nodes can then be created at once (before,
    /// one broker registering a moment late refuses it with
    /// INVALID_REPLICATION_FACTOR). Best effort: a cluster that does not
    /// get there is left to the test, which says what it waits for.
    fn wait_until_registered(&self) {
        let bootstrap = self.bootstrap();
        let wanted = self.nodes.len();
        let _ = poll_until(REGISTER_DEADLINE, || {
            let output = crate::strom_at(Some(&bootstrap), &["cluster", "status", "--json"], None);
            let text = String::from_utf8_lossy(&output.stdout);
            (output.status.success() && text.matches("\"fenced\": false").count() >= wanted)
                .then_some(())
        });
    }

    /// Adds node `id` as a broker only (not a voter), on loopback: a
    /// cluster of [`Cluster::start_on`] hosts in a test network has no
    /// host for it.
    pub fn add_broker(&mut self, id: i32) -> &mut Node {
        self.add_broker_with(id, &[])
    }

    /// [`Cluster::add_broker`] with `more` arguments after the cluster's
    /// (a later `--set` of a key wins).
    pub fn add_broker_with(&mut self, id: i32, more: &[&str]) -> &mut Node {
        let ports = Ports::free(false);
        let mut args = self.args(id, ports);
        args.extend(more.iter().map(|s| s.to_string()));
        let host = self.host(id);
        let broker = start_node(host.clone(), &self.dir(id), ports.client, &args);
        self.nodes.push(Node {
            id,
            host,
            ports,
            broker,
        });
        self.nodes.last_mut().unwrap()
    }

    /// Where node `id` runs: a voter's host, loopback for the others.
    pub fn host(&self, id: i32) -> Host {
        usize::try_from(id - 1)
            .ok()
            .and_then(|i| self.hosts.get(i))
            .cloned()
            .unwrap_or_else(Host::loopback)
    }

    /// The start arguments of node `id` on `ports` (a voter when they
    /// have a controller port), on its host's address.
    pub fn args(&self, id: i32, ports: Ports) -> Vec<String> {
        let Ports {
            client,
            controller,
            admin,
            inter_broker,
        } = ports;
        let at = |port: u16| std::net::SocketAddr::new(self.host(id).ip, port);
        let mut args: Vec<String> = vec![
            "--node-id".into(),
            id.to_string(),
            "--cores".into(),
            "1".into(),
            "--admin-listen".into(),
            at(admin).to_string(),
        ];
        let mut listeners = format!("PLAINTEXT://{}", at(client));
        if let Some(protocol) = &self.secured {
            listeners.push_str(&format!(",{INTER_BROKER_LISTENER}://{}", at(inter_broker)));
            for setting in [
                format!(
                    "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,\
                     {INTER_BROKER_LISTENER}:{protocol},CONTROLLER:SASL_SSL"
                ),
                format!("inter.broker.listener.name={INTER_BROKER_LISTENER}"),
            ] {
                args.push("--set".into());
                args.push(setting);
            }
        }
        if let Some(c) = controller {
            listeners.push_str(&format!(",CONTROLLER://{}", at(c)));
        }
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

/// Starts one node on `host` in `dir` (its log next to it), serving
/// clients on `client`.
fn start_node(host: Host, dir: &std::path::Path, client: u16, args: &[String]) -> Broker {
    std::fs::create_dir_all(dir).unwrap();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Broker::start_on(
        host,
        &dir.join("data"),
        &dir.join("strom.log"),
        client,
        &args,
    )
}

/// Lines of each node's log a failing test prints.
const LOG_TAIL_LINES: usize = 40;

/// Error lines of each node a failing test prints in its summary.
const ERROR_LINES: usize = 12;

impl Drop for Cluster {
    /// A test that fails with the cluster still up prints the tail of each
    /// node's log, then, last (what a shortened CI output keeps), a summary:
    /// how each node ended and its errors and panics, so a failure seen
    /// only in CI says what the brokers did.
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let mut summary = Vec::new();
        for node in &mut self.nodes {
            let log = node.broker.log();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(LOG_TAIL_LINES)..];
            eprintln!(
                "==== node {} last {} lines ====\n{}",
                node.id,
                tail.len(),
                tail.join("\n")
            );
            let state = if !node.broker.is_running() {
                "stopped by the test".to_string()
            } else {
                node.broker
                    .try_exit()
                    .map_or("running".to_string(), |s| format!("EXITED BY ITSELF: {s}"))
            };
            // A panic's own line and the message after it, not the
            // frames of its backtrace.
            let mut errors: Vec<&str> = Vec::new();
            for (i, line) in lines.iter().enumerate() {
                if line.contains("panicked at") || line.contains("panic at ") {
                    errors.extend(lines.get(i..i + 2).unwrap_or(&lines[i..]));
                } else if line.contains("ERROR") || line.contains("fatal") {
                    errors.push(line);
                }
            }
            let shown = &errors[errors.len().saturating_sub(ERROR_LINES)..];
            summary.push(format!(
                "node {} {state}; {} error lines{}",
                node.id,
                errors.len(),
                shown.iter().map(|l| format!("\n  {l}")).collect::<String>()
            ));
        }
        eprintln!("==== how the nodes ended ====\n{}", summary.join("\n"));
    }
}
