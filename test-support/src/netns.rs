//! A small network of Linux network namespaces for partition tests: one
//! namespace per host, each with one interface on a bridge that lives in a
//! namespace of its own, so this process's namespace gets no interface,
//! address or route. Hosts are cut from each other with blackhole routes
//! (no iptables needed) and healed by deleting them. Everything is removed
//! when the [`Network`] is dropped, also on panic.
//!
//! Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and `ip` (iproute2);
//! [`Network::create`] says why when it cannot build the network, so a
//! test can report itself skipped loudly.

use std::ffi::OsStr;
use std::net::{IpAddr, Ipv4Addr, TcpStream};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::process::run;

/// Every namespace a test network creates starts with this, then the
/// creating process's pid: `strom-t<pid>-<network>-<host>`.
const NAME_PREFIX: &str = "strom-t";
/// Hosts get 10.213.7.1, .2, ... in the order given; the range exists only
/// inside the network's namespaces, so networks of parallel tests do not
/// clash.
const SUBNET: [u8; 3] = [10, 213, 7];
const SUBNET_PREFIX_LEN: u8 = 24;
const HOSTS_MAX: usize = 200;
/// How long one `ip` command may take.
const IP_DEADLINE: Duration = Duration::from_secs(20);
/// Where `ip netns` keeps its namespaces.
const NETNS_DIR: &str = "/run/netns";

/// Networks created by this process so far (for unique names).
static CREATED: AtomicUsize = AtomicUsize::new(0);

pub struct Network {
    /// `strom-t<pid>-<n>`: the namespaces are `<name>-<host>` and `<name>-br`.
    name: String,
    hosts: Vec<String>,
    /// Namespaces created so far (removed on drop).
    created: Vec<String>,
}

impl Network {
    /// Creates one namespace per host in `hosts`, all on one bridge; `Err`
    /// says why namespaces are not available here (not root, no `ip`).
    pub fn create(hosts: &[&str]) -> Result<Network, String> {
        assert!(hosts.len() <= HOSTS_MAX, "at most {HOSTS_MAX} hosts");
        match Command::new("ip").arg("-V").output() {
            Ok(output) if output.status.success() => {}
            Ok(output) => return Err(format!("`ip -V` failed: {}", output.status)),
            Err(error) => return Err(format!("no `ip` command (iproute2): {error}")),
        }
        remove_leftovers();
        let mut network = Network {
            name: format!(
                "{NAME_PREFIX}{}-{}",
                std::process::id(),
                CREATED.fetch_add(1, Ordering::Relaxed)
            ),
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            created: Vec::new(),
        };
        let bridge = format!("{}-br", network.name);
        // The first step tells whether namespaces can be made here at all.
        ip(&["netns", "add", &bridge])?;
        network.created.push(bridge.clone());
        // Once one namespace could be made, the rest must work: a failure
        // here fails the test (the drop removes what was made).
        if let Err(error) = network.build(&bridge) {
            panic!("building the test network failed: {error}");
        }
        Ok(network)
    }

    fn build(&mut self, bridge: &str) -> Result<(), String> {
        ip(&["-n", bridge, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", bridge, "link", "set", "br0", "up"])?;
        for (index, host) in self.hosts.clone().iter().enumerate() {
            let namespace = self.namespace(host);
            ip(&["netns", "add", &namespace])?;
            self.created.push(namespace.clone());
            ip(&["-n", &namespace, "link", "set", "lo", "up"])?;
            // Both ends are created in their namespaces: none ever exists
            // in this process's namespace.
            let port = format!("p{index}");
            ip(&[
                "-n", &namespace, "link", "add", "eth0", "type", "veth", "peer", "name", &port,
                "netns", bridge,
            ])?;
            ip(&["-n", bridge, "link", "set", &port, "master", "br0"])?;
            ip(&["-n", bridge, "link", "set", &port, "up"])?;
            let address = format!("{}/{SUBNET_PREFIX_LEN}", self.address(host));
            ip(&["-n", &namespace, "addr", "add", &address, "dev", "eth0"])?;
            ip(&["-n", &namespace, "link", "set", "eth0", "up"])?;
        }
        Ok(())
    }

    fn index(&self, host: &str) -> usize {
        self.hosts
            .iter()
            .position(|h| h == host)
            .unwrap_or_else(|| panic!("no host {host} in the test network"))
    }

    /// The namespace `host` runs in.
    pub fn namespace(&self, host: &str) -> String {
        self.index(host);
        format!("{}-{host}", self.name)
    }

    /// `host`'s address on the bridge.
    pub fn address(&self, host: &str) -> IpAddr {
        let [a, b, c] = SUBNET;
        IpAddr::V4(Ipv4Addr::new(a, b, c, self.index(host) as u8 + 1))
    }

    /// Where a broker on `host` runs: its address, in its namespace.
    pub fn host(&self, host: &str) -> Host {
        Host {
            ip: self.address(host),
            netns: Some(self.namespace(host)),
        }
    }

    /// `program` to be run in `host`'s namespace (add its arguments).
    pub fn command(&self, host: &str, program: impl AsRef<OsStr>) -> Command {
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &self.namespace(host)])
            .arg(program);
        command
    }

    /// Cuts `a` and `b` apart, both ways: each drops what it would send
    /// to the other. Connections between them stall; their other
    /// connections are untouched.
    pub fn cut(&self, a: &str, b: &str) {
        self.blackhole("add", a, b);
        self.blackhole("add", b, a);
    }

    /// Undoes [`Network::cut`].
    pub fn heal(&self, a: &str, b: &str) {
        self.blackhole("del", a, b);
        self.blackhole("del", b, a);
    }

    fn blackhole(&self, op: &str, from: &str, to: &str) {
        let to = format!("{}/32", self.address(to));
        ip(&["-n", &self.namespace(from), "route", op, "blackhole", &to])
            .unwrap_or_else(|error| panic!("{error}"));
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        // Hosts first, the bridge last. A namespace whose processes still
        // run lives on without its name until they exit.
        for namespace in self.created.iter().rev() {
            if let Err(error) = ip(&["netns", "del", namespace]) {
                eprintln!("test network: {error}");
            }
        }
    }
}

/// Runs `f` on a thread of its own that has entered network namespace
/// `namespace` (the rest of the process stays where it is).
pub fn in_namespace<T: Send>(namespace: &str, f: impl FnOnce() -> T + Send) -> T {
    let path = format!("{NETNS_DIR}/{namespace}");
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let file = std::fs::File::open(&path)
                    .unwrap_or_else(|e| panic!("network namespace {path}: {e}"));
                // SAFETY: setns on a valid fd, for this thread only; the
                // thread ends with the scope.
                let entered = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
                assert_eq!(
                    entered,
                    0,
                    "setns into {path}: {}",
                    std::io::Error::last_os_error()
                );
                f()
            })
            .join()
            .expect("the thread in the namespace ran")
    })
}

/// Whether a TCP connection to `address` opens from `namespace`.
pub fn connects_from(namespace: &str, address: std::net::SocketAddr) -> bool {
    in_namespace(namespace, || {
        TcpStream::connect_timeout(&address, Duration::from_secs(1)).is_ok()
    })
}

/// Runs `ip ARGS`; `Err` with its message when it fails.
fn ip(args: &[&str]) -> Result<(), String> {
    let output = run(Command::new("ip").args(args), None, IP_DEADLINE);
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`ip {}` failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// Removes the namespaces of test networks whose process is gone (a test
/// run killed before its drop ran).
fn remove_leftovers() {
    let Ok(entries) = std::fs::read_dir(NETNS_DIR) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        let Some(pid) = name
            .strip_prefix(NAME_PREFIX)
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            match ip(&["netns", "del", &name]) {
                Ok(()) => eprintln!("test network: removed {name}, left by a run that is gone"),
                Err(error) => eprintln!("test network: {error}"),
            }
        }
    }
}

/// Where a broker runs: the address it listens on, and the network
/// namespace it runs in (`None`: this process's, on loopback).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    pub ip: IpAddr,
    pub netns: Option<String>,
}

impl Host {
    pub fn loopback() -> Host {
        Host {
            ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            netns: None,
        }
    }
}
