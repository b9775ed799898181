//! What one broker process holds alone for its whole life: its data dir
//! (an `flock` on `<data_dir>/.lock`, as Kafka does) and its client
//! address. Every core of the process listens on that address with
//! `SO_REUSEPORT`, which the kernel grants to any process of the same user:
//! without these checks a second `strom start` on the same port would
//! silently split the clients, and one on the same data dir would
//! overwrite the first one's metadata log.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

use anyhow::bail;

/// The lock file in the data dir (Kafka's name).
pub const LOCK_FILE: &str = ".lock";

/// Held while the broker runs; the kernel releases the lock when the
/// process ends, however it ends.
#[derive(Debug)]
pub struct DataDirLock {
    _file: File,
    path: PathBuf,
}

impl DataDirLock {
    /// Takes the data dir's lock, or says which process holds it.
    pub fn acquire(data_dir: &Path) -> anyhow::Result<DataDirLock> {
        let path = data_dir.join(LOCK_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| anyhow::anyhow!("cannot open the lock file {}: {e}", path.display()))?;
        // SAFETY: flock on a descriptor this function owns; no memory is passed.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let error = std::io::Error::last_os_error();
            if error.raw_os_error() == Some(libc::EWOULDBLOCK) {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = match holder.trim() {
                    "" => "another process".to_string(),
                    pid => format!("process {pid}"),
                };
                bail!(
                    "data dir {} is in use by {holder} (it holds {}); two brokers on one data \
                     dir would overwrite each other's logs: stop the other broker or choose \
                     another --data-dir",
                    data_dir.display(),
                    path.display()
                );
            }
            bail!("cannot lock {}: {error}", path.display());
        }
        // The pid only serves the message above; the lock is the flock. A
        // full disk may refuse it, and a full disk is no reason to stay down.
        let written = file
            .set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| writeln!(file, "{}", std::process::id()));
        if let Err(error) = written {
            tracing::warn!(path = %path.display(), %error, "cannot write the pid into the lock file");
        }
        Ok(DataDirLock { _file: file, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// How long the probe for another listener waits for an answer.
const LISTEN_PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);
/// How long a listener found on the address may take to go away before
/// the address counts as in use.
const LISTEN_RELEASE_GRACE: std::time::Duration = std::time::Duration::from_secs(3);
const LISTEN_PROBE_INTERVAL: std::time::Duration = std::time::Duration::from_millis(50);

/// Whether a connection to `probe` (the address, or loopback for a
/// wildcard address) is accepted by someone.
fn someone_listens(address: SocketAddr, probe: SocketAddr) -> bool {
    match std::net::TcpStream::connect_timeout(&probe, LISTEN_PROBE_TIMEOUT) {
        // With nobody listening, a connection from an ephemeral port equal
        // to the port asked for reaches itself (TCP's simultaneous open):
        // that is no listener.
        Ok(stream) => stream.local_addr().ok() != stream.peer_addr().ok(),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => false,
        Err(e) => {
            tracing::debug!(%address, error = %e, "listen probe inconclusive");
            false
        }
    }
}

/// Held while the broker runs: an abstract Unix socket named after the
/// client address, which only one process of a network namespace can
/// bind. It closes the window in which two brokers starting at the same
/// moment could both find the port free.
#[derive(Debug)]
pub struct AddressGuard {
    _socket: UnixListener,
}

/// Refuses an address that another process listens on (any process: a
/// Kafka broker, another strom) or that another strom is starting on.
pub fn claim_listen_address(address: SocketAddr) -> anyhow::Result<Option<AddressGuard>> {
    use std::os::linux::net::SocketAddrExt;
    let in_use = |holder: &str| {
        anyhow::anyhow!(
            "cannot listen on {address}: address already in use by {holder}; stop it or \
             choose another --listen address"
        )
    };
    // A port of 0 asks the kernel for a free port: nothing to guard.
    let guard = if address.port() == 0 {
        None
    } else {
        let name = format!("strom-listen-{address}");
        let unix = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
        match UnixListener::bind_addr(&unix) {
            Ok(socket) => Some(AddressGuard { _socket: socket }),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                return Err(in_use("another strom broker"))
            }
            Err(e) => bail!("cannot guard listen address {address}: {e}"),
        }
    };
    // Anyone accepting a connection there listens already. (A probe bind
    // would also trip over the connections a just-stopped broker left in
    // FIN_WAIT, which glommio's listeners, without SO_REUSEADDR, pass on.)
    let probe = match address.ip() {
        std::net::IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, address.port()))
        }
        std::net::IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, address.port()))
        }
        _ => address,
    };
    if address.port() != 0 {
        // A listener of a process that just died may linger while the
        // kernel tears its io_uring down (in-flight accepts hold the
        // socket): only one that is still there after a grace is in use.
        let deadline = std::time::Instant::now() + LISTEN_RELEASE_GRACE;
        while someone_listens(address, probe) {
            if std::time::Instant::now() >= deadline {
                return Err(in_use("another process"));
            }
            std::thread::sleep(LISTEN_PROBE_INTERVAL);
        }
    }
    Ok(guard)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_one_data_dir_is_refused_naming_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let held = DataDirLock::acquire(dir.path()).unwrap();
        let refused = DataDirLock::acquire(dir.path()).unwrap_err().to_string();
        assert!(
            refused.contains(&format!("in use by process {}", std::process::id())),
            "{refused}"
        );
        drop(held);
        DataDirLock::acquire(dir.path()).expect("free again once the holder is gone");
    }

    /// A killed broker's listener lingers for some milliseconds while the
    /// kernel tears its io_uring down, and accepts connections meanwhile.
    #[test]
    fn a_listener_that_goes_away_within_the_grace_does_not_count() {
        let lingering = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = lingering.local_addr().unwrap();
        let gone = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(300));
            drop(lingering);
        });
        let started = std::time::Instant::now();
        claim_listen_address(address).expect("free once the listener is gone");
        assert!(started.elapsed() >= std::time::Duration::from_millis(250));
        gone.join().unwrap();
    }

    #[test]
    fn an_address_someone_listens_on_is_refused() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = taken.local_addr().unwrap();
        let refused = claim_listen_address(address).unwrap_err().to_string();
        assert!(refused.contains("already in use"), "{refused}");
        drop(taken);
        // Connections a stopped listener left behind do not count.
        let guard = claim_listen_address(address).unwrap();
        let refused = claim_listen_address(address).unwrap_err().to_string();
        assert!(refused.contains("another strom broker"), "{refused}");
        drop(guard);
        claim_listen_address(address).unwrap();
    }
}
