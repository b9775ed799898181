//! Loopback ports for brokers under test, never handed out twice in one
//! test process.

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::sync::Mutex;

/// How many ports the kernel is asked for before giving up.
const TRIES_MAX: usize = 1_000;

/// Ports handed out in this test process.
static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// A loopback port no listener holds and no other test of this process was
/// given. The broker binds with `SO_REUSEPORT`, so two brokers given the
/// same port (the kernel may hand a just-released port out again) would
/// both start and split its connections, and one stopping would refuse
/// the other's clients.
pub fn free_port() -> u16 {
    for _ in 0..TRIES_MAX {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if HANDED_OUT.lock().unwrap().insert(port) {
            return port;
        }
    }
    panic!("no port that was not handed out already after {TRIES_MAX} tries");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_port_is_handed_out_twice() {
        let ports: BTreeSet<u16> = (0..200).map(|_| free_port()).collect();
        assert_eq!(ports.len(), 200);
    }
}
