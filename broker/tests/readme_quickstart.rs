//! README.md's quickstart, run as written: the shell lines are taken from
//! the README's code blocks (not copied here), pointed at a broker this
//! test started (its loopback port instead of 127.0.0.1:9092, the built
//! binaries instead of `target/release/`), and run with bash in order on
//! a fresh data dir. Every line must succeed, and every consumer must print
//! exactly the records the producers before it wrote. Then every producer
//! line, fed the same keyed records, must put each key on one partition.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The heading the quickstart section starts with.
const QUICKSTART_HEADING: &str = "## Quickstart";
/// Where the README runs the programs from (a release build).
const RELEASE_DIR: &str = "target/release/";
/// The address the README's lines talk to; the test swaps in its broker's.
const README_ADDRESS: &str = "127.0.0.1:9092";
const LINE_DEADLINE: Duration = Duration::from_secs(60);
/// Programs a quickstart line may start, besides those in `RELEASE_DIR`.
const OTHER_PROGRAMS: &[&str] = &["kcat", "printf", "echo"];

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn read(relative: &str) -> String {
    let path = repository().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The README section whose heading starts with `heading`, to the next
/// `## ` heading.
fn section<'a>(readme: &'a str, heading: &str) -> &'a str {
    let start = readme
        .find(&format!("\n{heading}"))
        .unwrap_or_else(|| panic!("README.md has no `{heading}` section"));
    let rest = &readme[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |at| at + 3);
    &rest[..end]
}

/// The command lines of the ```sh blocks of `text`, in order (comments
/// and blank lines left out).
fn shell_lines(text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut in_block = false;
    for line in text.lines() {
        if in_block {
            if line.trim_start().starts_with("```") {
                in_block = false;
            } else if !line.trim().is_empty() && !line.trim_start().starts_with('#') {
                assert!(
                    !line.trim_end().ends_with('\\'),
                    "continued lines are not supported: {line}"
                );
                lines.push(line.trim().to_string());
            }
        } else if line.trim() == "```sh" {
            in_block = true;
        }
    }
    assert!(!in_block, "an unclosed ```sh block");
    lines
}

/// The pipeline's commands (split on `|`; the README's lines quote no `|`).
fn commands(line: &str) -> Vec<&str> {
    line.split('|').map(str::trim).collect()
}

fn program(command: &str) -> &str {
    command.split_whitespace().next().unwrap_or("")
}

#[derive(Debug, PartialEq)]
enum Role {
    /// The right-hand end of a pipeline that writes its stdin to the broker.
    Producer,
    /// Prints records read from the broker.
    Consumer,
    Other,
}

fn role(command: &str) -> Role {
    let words: Vec<&str> = command.split_whitespace().collect();
    let strom = words.first() == Some(&"target/release/strom");
    if (strom && words.get(1) == Some(&"produce")) || (words[0] == "kcat" && words.contains(&"-P"))
    {
        Role::Producer
    } else if (strom && words.get(1) == Some(&"consume"))
        || (words[0] == "kcat" && words.contains(&"-C"))
    {
        Role::Consumer
    } else {
        Role::Other
    }
}

/// Runs `line` with bash (`pipefail`) in `dir`, failing the test unless it
/// succeeds; returns its stdout.
fn bash(line: &str, dir: &Path, shown_as: &str) -> Vec<u8> {
    bash_with_input(line, None, dir, shown_as)
}

/// As [`bash`], feeding `stdin` to the line.
fn bash_with_input(line: &str, stdin: Option<&[u8]>, dir: &Path, shown_as: &str) -> Vec<u8> {
    let out = common::run(
        Command::new("bash")
            .args(["-o", "pipefail", "-c", line])
            .current_dir(dir),
        stdin,
        LINE_DEADLINE,
    );
    assert!(
        out.status.success(),
        "README line `{shown_as}` failed ({}), run as `{line}`:\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Lines of `bytes`, each with its newline, sorted: records of different
/// partitions have no order between them.
fn records(bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut lines: Vec<Vec<u8>> = bytes
        .split_inclusive(|&b| b == b'\n')
        .map(<[u8]>::to_vec)
        .collect();
    lines.sort();
    lines
}

#[test]
fn readme_quickstart_runs_top_to_bottom_against_a_fresh_broker() {
    let readme = read("README.md");
    let lines = shell_lines(section(&readme, QUICKSTART_HEADING));
    assert!(!lines.is_empty(), "no ```sh lines in the quickstart");

    // Built and started the way the README says: a release build, then
    // the broker from it. The test's broker is the same program (the
    // test profile's build) started the same way, on its own port and
    // data dir: `strom start --listen 127.0.0.1:PORT --data-dir DIR`.
    assert_eq!(
        lines[0], "cargo build --release",
        "the quickstart builds first, in release mode"
    );
    let start = format!("{RELEASE_DIR}strom start");
    let start_at = lines
        .iter()
        .position(|l| *l == start)
        .unwrap_or_else(|| panic!("no `{start}` line in the quickstart: {lines:#?}"));
    assert_eq!(start_at, 1, "the broker starts right after the build");
    let steps = &lines[2..];
    assert!(!steps.is_empty());

    for line in steps {
        for command in commands(line) {
            let program = program(command);
            assert!(
                program.starts_with(RELEASE_DIR) || OTHER_PROGRAMS.contains(&program),
                "README line `{line}` runs `{program}`: use the release binaries ({RELEASE_DIR}...) \
                 or one of {OTHER_PROGRAMS:?}"
            );
            if role(command) != Role::Other || program.ends_with("/strom") {
                // Otherwise the line would reach whatever listens on
                // the default port of this machine.
                assert!(
                    command.contains(README_ADDRESS),
                    "README line `{line}` does not name the broker's address {README_ADDRESS}"
                );
            }
        }
    }

    let broker = common::Broker::start(&[]);
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_strom")).parent().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let rewrite = |text: &str| {
        text.replace(README_ADDRESS, &broker.bootstrap())
            .replace(RELEASE_DIR, &format!("{}/", bin_dir.display()))
    };

    let mut produced: Vec<u8> = Vec::new();
    let (mut producers, mut consumers) = (0, 0);
    for line in steps {
        let pipeline = commands(line);
        let last = pipeline.last().unwrap();
        match role(last) {
            Role::Producer => {
                producers += 1;
                assert!(
                    pipeline.len() >= 2,
                    "README line `{line}`: a producer reads its records from a pipe"
                );
                // What the line feeds the producer is what it writes.
                let input = line[..line.rfind('|').unwrap()].trim();
                produced.extend(bash(&rewrite(input), cwd.path(), line));
                bash(&rewrite(line), cwd.path(), line);
            }
            Role::Consumer => {
                consumers += 1;
                let printed = bash(&rewrite(line), cwd.path(), line);
                assert_eq!(
                    records(&printed),
                    records(&produced),
                    "README line `{line}` printed\n{}\nafter the lines before it produced\n{}",
                    String::from_utf8_lossy(&printed),
                    String::from_utf8_lossy(&produced)
                );
            }
            Role::Other => {
                bash(&rewrite(line), cwd.path(), line);
            }
        }
    }
    assert!(
        producers >= 2 && consumers >= 2,
        "the quickstart writes and reads back with strom and with kcat: \
         {producers} producer and {consumers} consumer lines"
    );
    // The lines ran against this broker, and the topic is the one the
    // README created (three partitions), not one a client's first produce
    // created with the default single partition.
    let create: Vec<&str> = steps
        .iter()
        .find(|l| l.contains(" topic create "))
        .expect("the quickstart creates its topic")
        .split_whitespace()
        .collect();
    let word_after = |w: &str| create[create.iter().position(|x| *x == w).unwrap() + 1];
    let (topic, count) = (word_after("create"), word_after("--partitions"));
    let count: usize = count.parse().unwrap();
    assert!(count > 1, "a topic of one partition would not tell");
    producers_agree_on_each_key_s_partition(&broker, steps, topic, &rewrite, cwd.path());
    let mut partitions: Vec<String> = std::fs::read_dir(&broker.data_dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with(&format!("{topic}-")))
        .collect();
    partitions.sort();
    let expected: Vec<String> = (0..count).map(|p| format!("{topic}-{p}")).collect();
    assert_eq!(partitions, expected);
    // Nothing was written where the lines ran: the data is the broker's.
    assert_eq!(std::fs::read_dir(cwd.path()).unwrap().count(), 0);
}

/// Every producer of the quickstart, fed the same keyed records, puts each
/// key on one partition: kcat is shown with the Java client's partitioner
/// (murmur2), the one `strom produce` uses, not its own default.
fn producers_agree_on_each_key_s_partition(
    broker: &common::Broker,
    steps: &[String],
    topic: &str,
    rewrite: &dyn Fn(&str) -> String,
    dir: &Path,
) {
    let producers: Vec<&str> = steps
        .iter()
        .filter_map(|line| commands(line).last().copied())
        .filter(|command| role(command) == Role::Producer)
        .collect();
    let keys: Vec<String> = (0..20).map(|i| format!("same-key-{i}")).collect();
    let input: String = keys.iter().map(|key| format!("{key}:v\n")).collect();
    for producer in &producers {
        bash_with_input(&rewrite(producer), Some(input.as_bytes()), dir, producer);
    }
    let printed = bash(
        &format!(
            "kcat -b {} -C -t {topic} -e -f '%k %p\\n'",
            broker.bootstrap()
        ),
        dir,
        "kcat -C -f '%k %p\\n'",
    );
    let printed = String::from_utf8(printed).unwrap();
    for key in &keys {
        let mut partitions: Vec<&str> = printed
            .lines()
            .filter_map(|line| line.strip_prefix(&format!("{key} ")))
            .collect();
        assert_eq!(partitions.len(), producers.len(), "{key}: {printed}");
        partitions.sort_unstable();
        partitions.dedup();
        assert_eq!(
            partitions.len(),
            1,
            "the README's producers {producers:?} put {key} on different partitions: {partitions:?}"
        );
    }
}

#[test]
fn readme_test_command_is_what_ci_runs() {
    let readme = read("README.md");
    let lines = shell_lines(section(&readme, "## Run all the tests"));
    assert_eq!(lines, ["./scripts/test"]);
    let ci = read(".ci/run");
    assert!(
        ci.lines().any(|l| l.trim() == "exec ./scripts/test"),
        ".ci/run does not run ./scripts/test:\n{ci}"
    );
}
