//! What the workspace's integration tests share, as a dev-dependency:
//! start the real `strom` binary on a free loopback port ([`Broker`],
//! [`free_port`]), run its tools against it ([`strom`], [`strom_ok`], ...),
//! run any program and poll any condition with a deadline ([`run`],
//! [`poll_until`], [`wait_deadline`]), mount a small filesystem of its
//! own ([`mount`]), build a network of namespaces to cut brokers apart
//! ([`netns`]).
//!
//! The `strom` binary is the one in the target directory of the test
//! binary (`cargo test` builds it for the broker's tests; see
//! [`strom_bin`]). Nothing here sleeps to wait for a condition: every wait
//! polls it with a deadline.

mod broker;
pub mod certs;
pub mod cluster;
pub mod mount;
pub mod netns;
mod port;
mod process;
mod tool;

pub use broker::{strom_bin, Broker, Host, STARTED_LINE, START_DEADLINE, STOP_DEADLINE};
pub use port::free_port;
pub use process::{poll_until, run, wait_deadline};
pub use tool::{strom, strom_at, strom_bytes, strom_fails, strom_ok, TOOL_DEADLINE};
