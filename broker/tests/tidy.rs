//! House rules of the whole workspace, checked: every Rust file says what
//! it is for in a `//!` line first, and the crates depend on each other
//! exactly as the design's table says (`protocol` on nothing, `storage` on
//! `protocol`, `loadgen` on `protocol` only so it works against any Kafka
//! broker, `tuning` on nothing; `broker` and `benches` may use the rest),
//! and `test-support`, on nothing, only ever as a dev-dependency; the
//! docs name no path outside the repository; release builds are
//! documented as the workspace's; and no crate's modules import each other
//! in a circle (the broker's one known circle may only shrink).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("broker/ sits in the workspace root")
        .to_path_buf()
}

/// Every `.rs` file below `dir`, skipping build output.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if path.is_dir() {
            if name != "target" && name != ".git" {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_rust_file_starts_with_what_it_is_for() {
    let root = workspace_root();
    let mut files = Vec::new();
    for krate in [
        "protocol",
        "storage",
        "broker",
        "loadgen",
        "tuning",
        "benches",
        "fuzz",
        "test-support",
    ] {
        rust_files(&root.join(krate), &mut files);
    }
    assert!(files.len() > 100, "found only {} files", files.len());
    let missing: Vec<_> = files
        .iter()
        .filter(|f| {
            !std::fs::read_to_string(f)
                .unwrap()
                .lines()
                .next()
                .is_some_and(|l| l.starts_with("//!"))
        })
        .map(|f| f.strip_prefix(&root).unwrap().display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "files without a leading //! line: {missing:?}"
    );
}

#[test]
fn crates_depend_on_each_other_as_the_design_says() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let output = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(workspace_root())
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let packages = metadata["packages"].as_array().unwrap();
    let ours: BTreeSet<String> = packages
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect();
    // Normal dependencies between the workspace's crates (dev-dependencies
    // of a crate on itself are its tests').
    let edges: BTreeMap<String, BTreeSet<String>> = packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["kind"].is_null())
                .map(|d| d["name"].as_str().unwrap().to_string())
                .filter(|d| ours.contains(d))
                .collect();
            (p["name"].as_str().unwrap().to_string(), deps)
        })
        .collect();
    let allowed: BTreeMap<&str, &[&str]> = BTreeMap::from([
        ("strom-protocol", &[][..]),
        ("strom-storage", &["strom-protocol"][..]),
        (
            "strom-replication",
            &["strom-storage", "strom-protocol"][..],
        ),
        // The group coordinator's state machine and offsets records: plain
        // code the broker drives and the simulator runs.
        ("strom-groups", &["strom-protocol"][..]),
        ("strom-txn", &["strom-protocol"][..]),
        (
            "strom-broker",
            &[
                "strom-protocol",
                "strom-storage",
                "strom-replication",
                "strom-groups",
                "strom-txn",
            ][..],
        ),
        ("strom-loadgen", &["strom-protocol"][..]),
        ("strom-tuning", &[][..]),
        // Tests' helpers: depends on no crate of ours, and no crate
        // depends on it but as a dev-dependency (checked below).
        ("strom-test-support", &[][..]),
        // The whole-cluster simulator: anything below the broker; nothing
        // depends on it (checked below).
        (
            "strom-sim",
            &[
                "strom-protocol",
                "strom-storage",
                "strom-replication",
                "strom-groups",
                "strom-txn",
            ][..],
        ),
        (
            "strom-benches",
            &[
                "strom-protocol",
                "strom-storage",
                "strom-replication",
                "strom-groups",
                "strom-broker",
                "strom-loadgen",
                "strom-tuning",
            ][..],
        ),
    ]);
    for (krate, deps) in &edges {
        let may = allowed
            .get(krate.as_str())
            .unwrap_or_else(|| panic!("{krate} is not in the design's crate table"));
        let extra: Vec<_> = deps.iter().filter(|d| !may.contains(&d.as_str())).collect();
        assert!(extra.is_empty(), "{krate} may not depend on {extra:?}");
    }
    // The tests' helpers never reach a product crate's build: only tests
    // (dev-dependencies) use them.
    for package in packages {
        let name = package["name"].as_str().unwrap();
        for dependency in package["dependencies"].as_array().unwrap() {
            if dependency["name"] == "strom-test-support" {
                assert_eq!(
                    dependency["kind"], "dev",
                    "{name} depends on strom-test-support outside its tests"
                );
            }
        }
    }
    // Nothing depends on the simulator, and the deciding code it drives
    // runs on no executor: the replication crate knows no glommio.
    for package in packages {
        let name = package["name"].as_str().unwrap();
        for dependency in package["dependencies"].as_array().unwrap() {
            assert_ne!(
                dependency["name"], "strom-sim",
                "{name} depends on the simulator"
            );
            if name == "strom-replication" || name == "strom-groups" || name == "strom-txn" {
                assert_ne!(
                    dependency["name"], "glommio",
                    "{name}'s decisions must run without an executor"
                );
            }
        }
    }
    // broker uses both crates below it; storage reads batches through protocol.
    assert!(edges["strom-broker"].contains("strom-storage"));
    assert!(edges["strom-storage"].contains("strom-protocol"));
}

/// Every Markdown file of the repository (build output and `.git` aside).
fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if path.is_dir() {
            if name != "target" && name != ".git" {
                markdown_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
}

/// The docs speak of the repository only: a relative path that climbs
/// (`../x`) must land on something the repository holds, never outside
/// it or on a file a reader of the repository does not have.
#[test]
fn docs_name_no_path_outside_the_repository() {
    let root = workspace_root();
    let mut files = Vec::new();
    markdown_files(&root, &mut files);
    assert!(
        files.len() >= 5,
        "the docs were not found under {}",
        root.display()
    );
    let path_char = |c: char| c.is_ascii_alphanumeric() || "._-/".contains(c);
    let mut outside = Vec::new();
    for file in &files {
        let dir = file.parent().unwrap();
        let text = std::fs::read_to_string(file).unwrap();
        for (number, line) in text.lines().enumerate() {
            let mut rest = line;
            while let Some(at) = rest.find("../") {
                let starts_path = at == 0 || !path_char(rest[..at].chars().last().unwrap());
                let len = rest[at..]
                    .find(|c: char| !path_char(c))
                    .unwrap_or(rest.len() - at);
                let token = &rest[at..at + len];
                rest = &rest[at + len..];
                if !starts_path {
                    continue;
                }
                // Resolve it lexically from the file's directory.
                let mut resolved = dir.to_path_buf();
                for part in token.trim_end_matches('/').split('/') {
                    match part {
                        ".." => {
                            resolved.pop();
                        }
                        "." | "" => {}
                        part => resolved.push(part),
                    }
                }
                if !resolved.starts_with(&root) || !resolved.exists() {
                    outside.push(format!(
                        "{}:{}: {token}",
                        file.strip_prefix(&root).unwrap().display(),
                        number + 1
                    ));
                }
            }
        }
    }
    assert!(
        outside.is_empty(),
        "docs name paths outside the repository (or not in it):\n{}",
        outside.join("\n")
    );
}

/// A release build of one package (`cargo build --release -p X`) unifies
/// its dependencies' features differently from the workspace's, so after
/// `cargo build --release` (README's quickstart) it compiles them all
/// again, and the next workspace build once more. The docs, the scripts and
/// the doc comments of the binaries build the workspace and run the
/// binary from `target/release/`.
#[test]
fn release_builds_are_documented_as_the_workspace_s() {
    let root = workspace_root();
    let mut files = Vec::new();
    markdown_files(&root, &mut files);
    rust_files(&root, &mut files);
    for script in std::fs::read_dir(root.join("scripts")).unwrap().flatten() {
        files.push(script.path());
    }
    let one_package = |line: &str| {
        let words: Vec<&str> = line.split_whitespace().collect();
        words
            .windows(2)
            .any(|w| w == ["cargo", "build"] || w == ["cargo", "run"])
            && words.contains(&"--release")
            && words.iter().any(|w| *w == "-p" || *w == "--package")
    };
    let mut found = Vec::new();
    for file in &files {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for (number, line) in text.lines().enumerate() {
            if one_package(line) {
                found.push(format!(
                    "{}:{}: {}",
                    file.strip_prefix(&root).unwrap().display(),
                    number + 1,
                    line.trim()
                ));
            }
        }
    }
    assert!(
        found.is_empty(),
        "use `cargo build --release` and target/release/NAME instead of a one-package \
         release build:\n{}",
        found.join("\n")
    );
    let loadgen = std::fs::read_to_string(root.join("docs/loadgen.md")).unwrap();
    let block = loadgen
        .split("```sh\n")
        .nth(1)
        .expect("docs/loadgen.md starts with a ```sh block");
    assert!(
        block.starts_with("cargo build --release\ntarget/release/strom-loadgen "),
        "docs/loadgen.md's first commands: {block}"
    );
}

/// The top-level module a file of `src` belongs to (`crate` for the root).
fn top_module(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).unwrap();
    let first = relative
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy()
        .to_string();
    match first.trim_end_matches(".rs") {
        "lib" | "main" | "mod" => "crate".to_string(),
        name => name.to_string(),
    }
}

/// The modules each top-level module of the crate at `src` names through
/// `crate::` (grouped imports too), comments and test modules left out.
fn module_imports(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut imports: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let from = top_module(src, file);
        let text = std::fs::read_to_string(file).unwrap();
        let code = text.split("#[cfg(test)]\nmod tests").next().unwrap();
        let names = imports.entry(from.clone()).or_default();
        for line in code.lines() {
            let line = line.trim_start();
            if line.starts_with("//") {
                continue;
            }
            let mut rest = line;
            while let Some(at) = rest.find("crate::") {
                rest = &rest[at + "crate::".len()..];
                let group = rest.strip_prefix('{');
                let listed: Vec<&str> = match group {
                    // `crate::{a, b::C}`: the first segment of each item.
                    Some(inner) => inner
                        .split('}')
                        .next()
                        .unwrap()
                        .split(',')
                        .map(|item| item.trim().split("::").next().unwrap().trim())
                        .collect(),
                    None => vec![rest
                        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .next()
                        .unwrap()],
                };
                for name in listed {
                    if !name.is_empty() && name != from {
                        names.insert(name.to_string());
                    }
                }
            }
        }
    }
    let modules: BTreeSet<String> = imports.keys().cloned().collect();
    for names in imports.values_mut() {
        names.retain(|n| modules.contains(n));
    }
    imports
}

/// The circles (strongly connected sets of more than one module).
fn circles(imports: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    // Two modules share a circle when each reaches the other.
    let reach = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut pending = vec![from.clone()];
        while let Some(at) = pending.pop() {
            for next in imports.get(&at).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    pending.push(next.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&String, BTreeSet<String>> =
        imports.keys().map(|m| (m, reach(m))).collect();
    let mut found: Vec<BTreeSet<String>> = Vec::new();
    for (module, reaches) in &reached {
        if found.iter().any(|c| c.contains(*module)) {
            continue;
        }
        let circle: BTreeSet<String> = reaches
            .iter()
            .filter(|other| reached[other].contains(*module))
            .cloned()
            .collect();
        if circle.len() > 1 {
            found.push(circle);
        }
    }
    found
}

/// Lower layers never import higher ones: no crate's modules import each
/// other in a circle (the broker's included); the broker's metadata,
/// partitions, errors, metrics and cluster code never reach up into the
/// request handlers or the server (nor the metrics into the per-core
/// context or the groups, nor the cluster into the groups); the per-core
/// context knows none of the services it carries, and the reconciler
/// none of the cluster, controller or groups that drive it.
#[test]
fn modules_import_no_circle_and_lower_layers_nothing_above() {
    let root = workspace_root();
    for krate in [
        "protocol",
        "storage",
        "replication",
        "groups",
        "txn",
        "loadgen",
        "tuning",
        "benches",
        "test-support",
        "sim",
    ] {
        let found = circles(&module_imports(&root.join(krate).join("src")));
        assert!(
            found.is_empty(),
            "{krate}'s modules import each other in circles: {found:?}"
        );
    }
    let broker = module_imports(&root.join("broker/src"));
    let found = circles(&broker);
    assert!(
        found.is_empty(),
        "broker's modules import each other in circles: {found:?}"
    );
    // What sits above the lowest layers.
    const ABOVE_THE_DATA: &[&str] = &[
        "cluster",
        "group",
        "shard",
        "metrics",
        "controller",
        "handlers",
        "server",
    ];
    let forbidden: [(&str, &[&str]); 8] = [
        ("metadata", ABOVE_THE_DATA),
        ("partition", ABOVE_THE_DATA),
        (
            "errors",
            &["cluster", "group", "shard", "metrics", "handlers", "server"],
        ),
        (
            "metrics",
            &["shard", "group", "cluster", "handlers", "server"],
        ),
        ("cluster", &["handlers", "server", "group", "txn"]),
        // Groups know nothing of transactions (the transaction edge
        // calls into groups for the offsets a marker completes).
        ("group", &["txn", "handlers"]),
        // The per-core context carries services it knows nothing of.
        (
            "shard",
            &[
                "cluster",
                "group",
                "txn",
                "controller",
                "reconciler",
                "handlers",
                "server",
            ],
        ),
        (
            "reconciler",
            &["cluster", "controller", "group", "handlers"],
        ),
    ];
    for (lower, higher) in forbidden {
        let names = &broker[lower];
        let reached: Vec<&&str> = higher.iter().filter(|h| names.contains(**h)).collect();
        assert!(
            reached.is_empty(),
            "broker's {lower} imports {reached:?}, which sit above it"
        );
    }
}

/// The circle finder finds what it should, so the test above can fail.
#[test]
fn the_circle_finder_finds_circles() {
    let graph = |edges: &[(&str, &str)]| {
        let mut imports: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (from, to) in edges {
            imports
                .entry(from.to_string())
                .or_default()
                .insert(to.to_string());
            imports.entry(to.to_string()).or_default();
        }
        imports
    };
    assert!(circles(&graph(&[("a", "b"), ("b", "c")])).is_empty());
    let found = circles(&graph(&[("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")]));
    assert_eq!(found.len(), 1);
    assert_eq!(
        found[0],
        ["a", "b", "c"].iter().map(|s| s.to_string()).collect()
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("lib.rs"), "//! x\nmod a;\nmod b;\n").unwrap();
    std::fs::write(
        dir.path().join("a.rs"),
        "//! a\n// crate::c in a comment\nuse crate::{b::Thing, lib_free};\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("b.rs"),
        "//! b\nfn f() { crate::a::g() }\n#[cfg(test)]\nmod tests {\n    use crate::c;\n}\n",
    )
    .unwrap();
    let imports = module_imports(dir.path());
    assert_eq!(imports["a"], ["b"].iter().map(|s| s.to_string()).collect());
    assert_eq!(imports["b"], ["a"].iter().map(|s| s.to_string()).collect());
    assert_eq!(circles(&imports).len(), 1);
}

/// Where a source file of the broker opens a network connection: the
/// calls that do, found by their text (comments excluded).
fn connects(text: &str) -> Vec<String> {
    const OPENERS: [&str; 3] = [
        "Connection::connect(",
        "TcpStream::connect",
        ".connect_timeout(",
    ];
    text.lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .filter(|line| OPENERS.iter().any(|opener| line.contains(opener)))
        .map(|line| line.trim().to_string())
        .collect()
}

/// Every connection from one node to another leaves through the one
/// inter-broker channel (`cluster/transport.rs`): no other file of the
/// broker process opens a connection. The operator commands (`cli/`)
/// connect to brokers as clients do, and the listen-address check
/// (`exclusive.rs`) probes this node's own address.
#[test]
fn every_inter_broker_connection_goes_through_the_one_channel() {
    let src = workspace_root().join("broker/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let channel = src.join("cluster/transport.rs");
    assert!(
        !connects(&std::fs::read_to_string(&channel).unwrap()).is_empty(),
        "the channel itself opens connections: the search finds them"
    );
    let mut elsewhere = Vec::new();
    for file in files {
        let relative = file.strip_prefix(&src).unwrap();
        if file == channel || relative.starts_with("cli") || relative == Path::new("exclusive.rs") {
            continue;
        }
        for call in connects(&std::fs::read_to_string(&file).unwrap()) {
            elsewhere.push(format!("{}: {call}", relative.display()));
        }
    }
    assert!(
        elsewhere.is_empty(),
        "connections opened outside cluster/transport.rs: {elsewhere:#?}"
    );
}
