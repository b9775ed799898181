//! Failures the broker does not survive: a panic on any thread (an
//! executor's state is then half-changed, and the other cores would keep
//! serving around it), and a log that storage fenced because it can no
//! longer trust what it wrote (a failed fdatasync, write or journal write).
//! Each is logged at error level with where it happened (thread and core,
//! the partition's directory), stderr is flushed, and the process exits at
//! once with [`EXIT_FATAL`]: it does not wait for the other executors, which
//! could hang on the very failure. The next start recovers every log from
//! what reached the disk, as after a crash.
//!
//! [`install`] is called once by `runtime::run`, before any executor
//! starts; the CLI tools and tests that open logs in-process keep the
//! default behaviour (a panic unwinds, a fenced log refuses writes).

use std::io::Write;
use std::path::Path;

/// The exit status after a fatal failure while running.
pub const EXIT_FATAL: i32 = 3;

/// Installs the panic hook and storage's fence action for this process.
pub fn install() {
    std::panic::set_hook(Box::new(|info| {
        let message = panic_message(info.payload());
        let location = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let backtrace = std::backtrace::Backtrace::capture();
        exit(&format!("panic at {location}: {message}\n{backtrace}"));
    }));
    storage::fence::on_fence(|dir, reason| {
        let partition = dir
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        exit_for_log(&partition, dir, reason);
    });
}

fn exit_for_log(partition: &str, dir: &Path, reason: &str) -> ! {
    exit(&format!(
        "log of partition {partition} ({}) can no longer be trusted: {reason}",
        dir.display()
    ))
}

/// The core of an executor thread: runtime names them `strom-core-N`, and
/// glommio adds `-<executor id>`.
fn current_core() -> Option<usize> {
    std::thread::current()
        .name()?
        .strip_prefix("strom-core-")?
        .split('-')
        .next()?
        .parse()
        .ok()
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    if let Some(message) = payload.downcast_ref::<&str>() {
        message
    } else if let Some(message) = payload.downcast_ref::<String>() {
        message
    } else {
        "(not a string)"
    }
}

/// Logs `cause` with the thread it happened on and exits the process with
/// [`EXIT_FATAL`], skipping destructors, exit handlers and every other
/// thread.
pub fn exit(cause: &str) -> ! {
    let thread = std::thread::current();
    let thread = thread.name().unwrap_or("unnamed");
    let core = current_core();
    if !tracing::dispatcher::has_been_set() {
        eprintln!("strom: fatal on thread {thread}, exiting at once: {cause}");
    } else if let Some(core) = core {
        tracing::error!(core, thread, "fatal, exiting at once: {cause}");
    } else {
        tracing::error!(thread, "fatal, exiting at once: {cause}");
    }
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: `_exit` ends the process without running any Rust code
    // after it; nothing here relies on destructors (logs recover at the
    // next start as after a crash).
    unsafe { libc::_exit(EXIT_FATAL) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// Set in the child process the test below starts (itself, this test
    /// binary): the child installs the hook and panics on an executor.
    const CHILD_ENV: &str = "STROM_TEST_FATAL_CHILD";
    const TEST_NAME: &str = "fatal::tests::a_panic_on_an_executor_exits_the_process_at_once";

    #[test]
    fn a_panic_on_an_executor_exits_the_process_at_once() {
        if std::env::var_os(CHILD_ENV).is_some() {
            install();
            // Another executor that never ends: the exit must not wait for it.
            let _idle = glommio::LocalExecutorBuilder::default()
                .name("strom-core-0")
                .spawn(|| async { futures_lite::future::pending::<()>().await })
                .unwrap();
            let failing = glommio::LocalExecutorBuilder::default()
                .name("strom-core-1")
                .spawn(|| async { panic!("boom in a handler") })
                .unwrap();
            let _ = failing.join();
            unreachable!("the panic hook exits the process");
        }
        let output = Command::new(std::env::current_exe().unwrap())
            .args([TEST_NAME, "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, "1")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(EXIT_FATAL), "{stderr}");
        assert!(
            stderr.contains("fatal on thread strom-core-1")
                && stderr.contains("boom in a handler")
                && stderr.contains("src/fatal.rs"),
            "{stderr}"
        );
        assert!(!stderr.contains("unreachable"), "{stderr}");
    }

    #[test]
    fn the_core_comes_from_the_executor_thread_name() {
        let core = std::thread::Builder::new()
            .name("strom-core-7-2".into())
            .spawn(current_core)
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(core, Some(7));
        let core = std::thread::Builder::new()
            .name("strom-signals".into())
            .spawn(current_core)
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(core, None);
    }
}
