//! The real `strom` binary as a test's broker: started on a free
//! loopback port with a temporary data dir (or a given one), ready once it
//! logs its start line and accepts; stopped, restarted, crashed, signalled.
//! A broker may also run on another [`Host`]: an address in a network
//! namespace of a test network (see [`crate::netns`]).

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::port::free_port;
use crate::process::{poll_until, wait_deadline};

/// How long a broker may take to start listening.
pub const START_DEADLINE: Duration = Duration::from_secs(30);
/// How long a graceful stop may take (the broker promises 10 s).
pub const STOP_DEADLINE: Duration = Duration::from_secs(10);

/// What the broker logs once every core is ready (and listening).
pub const STARTED_LINE: &str = "strom started";

/// Cores a test broker runs on unless the test says `--cores`.
const CORES_DEFAULT: &str = "2";

/// The `strom` binary of this build: in the target directory's profile
/// directory, which holds the test binary's `deps/` directory. `cargo
/// test` builds it for the broker's tests; other crates' tests need it
/// built (`cargo build -p strom-broker --bin strom`).
pub fn strom_bin() -> PathBuf {
    let test_binary = std::env::current_exe().expect("the test binary's path");
    let profile_dir = test_binary
        .parent()
        .and_then(Path::parent)
        .expect("the test binary sits in <target>/<profile>/deps");
    let path = profile_dir.join("strom");
    assert!(
        path.exists(),
        "{} is missing: run `cargo build -p strom-broker --bin strom` (cargo test --workspace does)",
        path.display()
    );
    path
}

pub use crate::netns::Host;

pub struct Broker {
    pub host: Host,
    pub port: u16,
    pub data_dir: PathBuf,
    _temp: Option<tempfile::TempDir>,
    log_path: PathBuf,
    extra_args: Vec<String>,
    /// Environment variables the broker is started with (e.g. `STROM_LOG`).
    env: Vec<(String, String)>,
    child: Option<Child>,
}

impl Broker {
    /// Starts a broker with `extra_args` (e.g. `--set k=v`) on 2 cores,
    /// unless they give `--cores`.
    pub fn start(extra_args: &[&str]) -> Broker {
        Self::start_with_env(extra_args, &[])
    }

    /// Starts a broker with `extra_args` and environment
    /// variables `env` (kept for restarts), e.g. `STROM_LOG` for debug lines.
    pub fn start_with_env(extra_args: &[&str], env: &[(&str, &str)]) -> Broker {
        let temp = tempfile::tempdir().unwrap();
        let data_dir = temp.path().join("data");
        let log_path = temp.path().join("strom.log");
        let mut broker = Broker {
            host: Host::loopback(),
            port: free_port(),
            data_dir,
            _temp: Some(temp),
            log_path,
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            child: None,
        };
        broker.spawn();
        broker
    }

    /// The value given after `flag` at start, if it was given.
    pub fn arg(&self, flag: &str) -> Option<&str> {
        let at = self.extra_args.iter().position(|a| a == flag)?;
        self.extra_args.get(at + 1).map(String::as_str)
    }

    /// Starts a broker with 2 cores whose data dir is `data_dir` (which
    /// the caller owns), logging to `log_path`.
    pub fn start_in(data_dir: &Path, log_path: &Path, extra_args: &[&str]) -> Broker {
        Self::start_at(data_dir, log_path, free_port(), extra_args)
    }

    /// As [`Broker::start_in`], listening for clients on `port` (which
    /// the arguments may also name, e.g. in `listeners`).
    pub fn start_at(data_dir: &Path, log_path: &Path, port: u16, extra_args: &[&str]) -> Broker {
        Self::start_on(Host::loopback(), data_dir, log_path, port, extra_args)
    }

    /// As [`Broker::start_at`], on `host`: listening on its address and
    /// run in its network namespace (with `ip netns exec`, which execs, so
    /// the child is `strom` itself and signals reach it).
    pub fn start_on(
        host: Host,
        data_dir: &Path,
        log_path: &Path,
        port: u16,
        extra_args: &[&str],
    ) -> Broker {
        let mut broker = Broker {
            host,
            port,
            data_dir: data_dir.to_path_buf(),
            _temp: None,
            log_path: log_path.to_path_buf(),
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
            env: Vec::new(),
            child: None,
        };
        broker.spawn();
        broker
    }

    pub fn bootstrap(&self) -> String {
        self.address().to_string()
    }

    pub fn address(&self) -> SocketAddr {
        SocketAddr::new(self.host.ip, self.port)
    }

    /// Whether a client connection opens, from the broker's namespace.
    fn accepts(&self) -> bool {
        match &self.host.netns {
            None => TcpStream::connect(self.address()).is_ok(),
            Some(namespace) => crate::netns::connects_from(namespace, self.address()),
        }
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .unwrap();
        let started_before = self.log().matches(STARTED_LINE).count();
        let mut command = match &self.host.netns {
            None => Command::new(strom_bin()),
            Some(namespace) => {
                let mut command = Command::new("ip");
                command.args(["netns", "exec", namespace]).arg(strom_bin());
                command
            }
        };
        let child = command
            .arg("start")
            .arg("--listen")
            .arg(self.bootstrap())
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(self.default_cores())
            .args(&self.extra_args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("strom binary starts");
        self.child = Some(child);
        let listening = poll_until(START_DEADLINE, || {
            // Ready once every core listens: the first core's listener can
            // accept while the broker is still starting, and a client that
            // connected then was refused moments later (seen in CI, not
            // understood yet), so the start line must be logged as well.
            if self.log().matches(STARTED_LINE).count() > started_before && self.accepts() {
                return Some(());
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!(
                    "strom exited with {status} before listening:\n{}",
                    self.log()
                );
            }
            None
        });
        assert!(
            listening.is_some(),
            "strom did not log its start line and listen within {START_DEADLINE:?}:\n{}",
            self.log()
        );
    }

    /// `--cores 2` unless the test gave `--cores`.
    fn default_cores(&self) -> &'static [&'static str] {
        if self.arg("--cores").is_some() {
            &[]
        } else {
            &["--cores", CORES_DEFAULT]
        }
    }

    /// The running broker's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("broker running").id()
    }

    /// Whether the test started this broker and has not stopped or
    /// killed it (it may still have exited by itself).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// The broker's exit status if it has exited by itself (it is then
    /// no longer running); `None` while it runs.
    pub fn try_exit(&mut self) -> Option<std::process::ExitStatus> {
        let status = self
            .child
            .as_mut()
            .expect("broker running")
            .try_wait()
            .unwrap()?;
        self.child = None;
        Some(status)
    }

    /// Sends SIGTERM and waits for a clean exit within the stop deadline.
    pub fn stop(&mut self) -> Duration {
        let mut child = self.child.take().expect("broker running");
        let started = Instant::now();
        // SAFETY: kill with a pid of our own child process.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let status = wait_deadline(&mut child, STOP_DEADLINE).unwrap_or_else(|| {
            let _ = child.kill();
            panic!(
                "strom did not stop within {STOP_DEADLINE:?}:\n{}",
                self.log()
            )
        });
        assert!(
            status.success(),
            "strom exited with {status}:\n{}",
            self.log()
        );
        started.elapsed()
    }

    /// Starts again, after [`Broker::stop`], on the same port and data dir.
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "the broker is stopped");
        self.spawn();
    }

    /// Stops cleanly and starts again on the same port and data dir.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    /// Sends `signal` (SIGSTOP, SIGCONT, ...) to the running broker.
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill with the pid of our own child process.
        let sent = unsafe { libc::kill(self.pid() as i32, signal) };
        assert_eq!(sent, 0, "signal {signal} to the broker");
    }

    /// Kills the broker with SIGKILL and waits for it to exit; it stays
    /// down (see [`Broker::start_again`]).
    pub fn kill(&mut self) {
        let mut child = self.child.take().expect("broker running");
        child.kill().expect("SIGKILL the broker");
        wait_deadline(&mut child, STOP_DEADLINE).expect("a killed broker exits");
    }

    /// Kills the broker with SIGKILL (a crash: nothing closed, nothing
    /// flushed beyond what was acknowledged) and starts it again on the
    /// same port and data dir.
    pub fn crash_and_restart(&mut self) {
        self.crash_and_restart_with(|_| {});
    }

    /// SIGKILLs the broker, does `damage` to its data dir, starts it again.
    pub fn crash_and_restart_with(&mut self, damage: impl FnOnce(&Path)) {
        self.kill();
        damage(&self.data_dir);
        self.spawn();
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
