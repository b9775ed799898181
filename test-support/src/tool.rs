//! The `strom` tools (`strom topic`, `produce`, `consume`, `group`, ...)
//! run against a test's broker with a deadline, as a user runs them.

use std::process::{Command, Output};
use std::time::Duration;

use crate::broker::{strom_bin, Broker};
use crate::process::run;

/// How long one tool run may take.
pub const TOOL_DEADLINE: Duration = Duration::from_secs(120);

/// Runs `strom ARGS --bootstrap BOOTSTRAP` (no `--bootstrap` when `None`)
/// with `stdin`; `STROM_BOOTSTRAP` is not passed on, so only the flag
/// names a broker.
pub fn strom_at(bootstrap: Option<&str>, args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut command = Command::new(strom_bin());
    command.args(args).env_remove("STROM_BOOTSTRAP");
    if let Some(bootstrap) = bootstrap {
        command.args(["--bootstrap", bootstrap]);
    }
    run(&mut command, stdin, TOOL_DEADLINE)
}

/// Runs `strom ARGS` against `broker`.
pub fn strom(broker: &Broker, args: &[&str], stdin: Option<&[u8]>) -> Output {
    strom_at(Some(&broker.bootstrap()), args, stdin)
}

/// Runs a tool that must succeed; returns its stdout.
pub fn strom_bytes(broker: &Broker, args: &[&str], stdin: Option<&[u8]>) -> Vec<u8> {
    let output = strom(broker, args, stdin);
    assert!(
        output.status.success(),
        "strom {args:?} failed ({}): {}\nbroker log:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr),
        broker.log()
    );
    output.stdout
}

/// Runs a tool that must succeed without input; returns its stdout as text.
pub fn strom_ok(broker: &Broker, args: &[&str]) -> String {
    String::from_utf8(strom_bytes(broker, args, None)).expect("the tool prints UTF-8")
}

/// Runs a tool that must fail with exit code 1; returns its stderr.
pub fn strom_fails(broker: &Broker, args: &[&str], stdin: Option<&[u8]>) -> String {
    let output = strom(broker, args, stdin);
    assert_eq!(
        output.status.code(),
        Some(1),
        "strom {args:?} should fail; stdout: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    String::from_utf8(output.stderr).expect("the tool prints UTF-8")
}
