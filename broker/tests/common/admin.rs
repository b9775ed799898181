//! A broker with its admin HTTP listener on a free loopback port, and
//! plain HTTP GETs against it.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use super::{free_port, poll_until, Broker};

/// How long a broker may take to answer `/ready` with 200.
pub const READY_DEADLINE: Duration = Duration::from_secs(30);
/// How long one whole answer may take.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(20);

pub struct Admin {
    pub port: u16,
}

impl Admin {
    /// Starts a broker with its admin listener on a free loopback port and
    /// waits until it is ready.
    pub fn start(extra: &[&str]) -> (Broker, Admin) {
        let port = free_port();
        let address = format!("127.0.0.1:{port}");
        let mut args = vec!["--admin-listen", &address];
        args.extend_from_slice(extra);
        let broker = Broker::start(&args);
        let admin = Admin { port };
        let ready = poll_until(READY_DEADLINE, || {
            let (code, _) = admin.try_get("/ready", Duration::from_secs(5)).ok()?;
            (code == 200).then_some(())
        });
        assert!(
            ready.is_some(),
            "not ready within {READY_DEADLINE:?}:\n{}",
            broker.log()
        );
        (broker, admin)
    }

    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// GET `path` with `timeout` for the whole answer: (code, body).
    pub fn try_get(&self, path: &str, timeout: Duration) -> std::io::Result<(u16, String)> {
        try_get(&self.address(), path, timeout)
    }

    /// GET `path`: (code, body); fails the test when no answer comes.
    pub fn get(&self, path: &str) -> (u16, String) {
        http_get(&self.address(), path)
    }
}

/// GET `path` from the HTTP listener at `address` with `timeout` for the
/// whole answer: (code, body).
pub fn try_get(address: &str, path: &str, timeout: Duration) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(address)?;
    stream.set_read_timeout(Some(timeout))?;
    write!(stream, "GET {path} HTTP/1.1\r\nHost: test\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or(std::io::ErrorKind::InvalidData)?;
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or(std::io::ErrorKind::InvalidData)?;
    Ok((code, body.to_string()))
}

/// GET `path` from the HTTP listener at `address`: (code, body); fails the
/// test when no answer comes within [`ANSWER_TIMEOUT`].
pub fn http_get(address: &str, path: &str) -> (u16, String) {
    try_get(address, path, ANSWER_TIMEOUT)
        .unwrap_or_else(|e| panic!("GET {path} from {address}: {e}"))
}
