//! Where /proc and /sys are read from: `/` on a real host, a fixture tree
//! in tests. Every path is given as the absolute path on a real host.

use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub struct Host {
    root: PathBuf,
}

impl Host {
    /// The running host.
    pub fn real() -> Self {
        Self {
            root: PathBuf::from("/"),
        }
    }

    /// A tree laid out like `/` (`<root>/proc/...`, `<root>/sys/...`).
    pub fn at(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn is_real(&self) -> bool {
        self.root == Path::new("/")
    }

    /// The file behind a host path.
    pub fn path(&self, host_path: &str) -> PathBuf {
        self.root.join(host_path.trim_start_matches('/'))
    }

    /// A file's text, `None` if it is missing or unreadable.
    pub fn read(&self, host_path: &str) -> Option<String> {
        std::fs::read_to_string(self.path(host_path)).ok()
    }

    /// A file's text without surrounding white space.
    pub fn read_trimmed(&self, host_path: &str) -> Option<String> {
        self.read(host_path).map(|t| t.trim().to_string())
    }

    /// Names in a directory, sorted; empty if it is missing.
    pub fn list(&self, host_path: &str) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.path(host_path))
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    /// A symlink's target as text, `None` if it is not a link.
    pub fn read_link(&self, host_path: &str) -> Option<String> {
        std::fs::read_link(self.path(host_path))
            .ok()
            .map(|t| t.to_string_lossy().into_owned())
    }

    /// Whether a file exists.
    pub fn exists(&self, host_path: &str) -> bool {
        self.path(host_path).exists()
    }

    /// Writes a value, as `echo value > file` would.
    pub fn write(&self, host_path: &str, value: &str) -> std::io::Result<()> {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(self.path(host_path))?;
        file.write_all(value.as_bytes())?;
        file.write_all(b"\n")
    }

    /// The sysfs directory of the block device `major:minor` whose queue
    /// settings apply: the device itself, or for a partition its disk.
    pub fn block_queue_dir(&self, major: u32, minor: u32) -> Option<String> {
        let device = format!("/sys/dev/block/{major}:{minor}");
        if !self.exists(&device) {
            return None;
        }
        if self.exists(&format!("{device}/queue")) {
            return Some(device);
        }
        // A partition: its queue is its parent disk's.
        let target = self.read_link(&device)?;
        let parent = Path::new(&target).parent()?.to_string_lossy().into_owned();
        let parent = format!("/sys/dev/block/{parent}");
        self.exists(&format!("{parent}/queue")).then_some(parent)
    }
}
