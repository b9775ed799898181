//! Start-up explains environment problems plainly and exits 1: a data dir
//! that cannot be written, a filesystem without O_DIRECT (ramfs, mounted in
//! a private mount namespace), a memlock limit below the io memory asked
//! for without CAP_IPC_LOCK; and with a low memlock limit and no io memory
//! asked for, it picks one that fits and serves. Uses util-linux's
//! `setpriv`, `unshare` and `prlimit`, and needs root (to drop
//! capabilities and mount).

mod common;

use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{free_port, poll_until, run, strom_bin, wait_deadline, START_DEADLINE, STOP_DEADLINE};

const RUN_DEADLINE: Duration = Duration::from_secs(30);

fn start_args(data_dir: &Path, port: u16) -> Vec<String> {
    vec![
        "start".into(),
        "--data-dir".into(),
        data_dir.display().to_string(),
        "--listen".into(),
        format!("127.0.0.1:{port}"),
        "--cores".into(),
        "2".into(),
    ]
}

/// Runs `command`, which must exit 1 within the deadline; returns stderr.
fn fails(command: &mut Command) -> String {
    let output = run(command, None, RUN_DEADLINE);
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(output.status.code(), Some(1), "{command:?}: {stderr}");
    stderr
}

/// A directory on the real filesystem (not /tmp, which may be tmpfs).
fn temp_dir() -> tempfile::TempDir {
    let parent = Path::new(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(parent).unwrap();
    tempfile::tempdir_in(parent).unwrap()
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn unwritable_data_dir_is_explained() {
    assert!(
        is_root(),
        "this test drops root's capabilities: run it as root"
    );
    let temp = temp_dir();
    let read_only = temp.path().join("read-only");
    std::fs::create_dir(&read_only).unwrap();
    std::fs::set_permissions(
        &read_only,
        std::os::unix::fs::PermissionsExt::from_mode(0o555),
    )
    .unwrap();
    // Without CAP_DAC_OVERRIDE root obeys the permissions like anyone.
    let drop_dac = "-dac_override,-dac_read_search,-fowner";
    let stderr = fails(
        Command::new("setpriv")
            .args(["--bounding-set", drop_dac, "--inh-caps", drop_dac])
            .arg(strom_bin())
            .args(start_args(&read_only, free_port())),
    );
    assert!(
        stderr.contains(&format!(
            "data dir {} is not writable: Permission denied",
            read_only.display()
        )),
        "{stderr}"
    );
    let stderr = fails(
        Command::new("setpriv")
            .args(["--bounding-set", drop_dac, "--inh-caps", drop_dac])
            .arg(strom_bin())
            .args(start_args(&read_only.join("data"), free_port())),
    );
    assert!(stderr.contains("cannot create data dir"), "{stderr}");
    assert!(stderr.contains("Permission denied"), "{stderr}");
    // A path through a regular file cannot be a directory, even for root.
    let file = temp.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let stderr = fails(Command::new(strom_bin()).args(start_args(&file.join("data"), free_port())));
    assert!(stderr.contains("cannot create data dir"), "{stderr}");
}

#[test]
fn filesystem_without_o_direct_is_explained() {
    assert!(is_root(), "this test mounts a ramfs: run it as root");
    let temp = temp_dir();
    let mount_point = temp.path().join("ramfs");
    std::fs::create_dir(&mount_point).unwrap();
    let data_dir = mount_point.join("data");
    // The mount lives only in the test's private mount namespace.
    let script = format!(
        "mount -t ramfs none {} && exec {} {}",
        mount_point.display(),
        strom_bin().display(),
        start_args(&data_dir, free_port()).join(" ")
    );
    let stderr = fails(Command::new("unshare").args(["-m", "sh", "-c", &script]));
    assert!(
        stderr.contains(&format!(
            "data dir {} is on a filesystem without O_DIRECT (ramfs)",
            data_dir.display()
        )),
        "{stderr}"
    );
    assert!(stderr.contains("ext4 or xfs"), "{stderr}");
}

#[test]
fn memlock_below_the_io_memory_asked_for_is_explained() {
    assert!(is_root(), "this test drops CAP_IPC_LOCK: run it as root");
    let temp = temp_dir();
    let stderr = fails(
        Command::new("prlimit")
            .arg("--memlock=1048576:1048576")
            .args([
                "setpriv",
                "--bounding-set",
                "-ipc_lock",
                "--inh-caps",
                "-ipc_lock",
            ])
            .arg(strom_bin())
            .args(start_args(&temp.path().join("data"), free_port()))
            .args(["--set", "strom.io.memory.bytes=8388608"]),
    );
    assert!(
        stderr.contains("the memlock limit (1048576 bytes, `ulimit -l`) is below the io memory asked for (8388608 bytes per executor x 2 executors"),
        "{stderr}"
    );
    assert!(stderr.contains("CAP_IPC_LOCK"), "{stderr}");
}

#[test]
fn low_memlock_without_io_memory_asked_picks_one_that_fits() {
    assert!(is_root(), "this test drops CAP_IPC_LOCK: run it as root");
    let temp = temp_dir();
    let port = free_port();
    let log_path = temp.path().join("strom.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut child = Command::new("prlimit")
        .arg("--memlock=8388608:8388608")
        .args([
            "setpriv",
            "--bounding-set",
            "-ipc_lock",
            "--inh-caps",
            "-ipc_lock",
        ])
        .arg(strom_bin())
        .args(start_args(&temp.path().join("data"), port))
        .env("STROM_LOG", "info")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    // Started once it says so and listens (a port handed out again to
    // another program on this machine would accept before it).
    let started = poll_until(START_DEADLINE, || {
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        if log.contains(common::STARTED_LINE) && TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Some(());
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("strom exited with {status}:\n{log}");
        }
        None
    });
    assert!(started.is_some(), "strom did not listen");
    // SAFETY: kill with the pid of our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = wait_deadline(&mut child, STOP_DEADLINE).expect("stops");
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(status.success(), "{log}");
    assert!(
        log.contains("using a smaller io memory per executor")
            && log.contains("io_memory_bytes=1048576"),
        "{log}"
    );
}
