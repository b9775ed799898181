//! The clean-shutdown marker (Kafka's `.kafka_cleanshutdown`): a file in
//! the data dir written once every log closed cleanly at a stop, and
//! taken away at the next start. A start that finds none follows a crash
//! (kill -9, power loss, a fatal error) or a data dir that is new; a
//! cluster member tells the controller so with its registration, and the
//! controller does not let it lead on its word alone (`placement::register`).

use std::path::Path;

/// The marker's name in the data dir.
pub const FILE_NAME: &str = ".strom-clean-shutdown";

/// Whether the previous process stopped cleanly, leaving the marker in
/// place: a start that is then refused leaves the data dir as it found it.
pub fn found(data_dir: &Path) -> std::io::Result<bool> {
    match std::fs::symlink_metadata(data_dir.join(FILE_NAME)) {
        Ok(_) => Ok(true),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(error) => Err(error),
    }
}

/// Whether the previous process stopped cleanly; removes the marker (and
/// syncs the directory) so that a crash of this process is seen as one.
pub fn take(data_dir: &Path) -> std::io::Result<bool> {
    let path = data_dir.join(FILE_NAME);
    match std::fs::remove_file(&path) {
        Ok(()) => {
            std::fs::File::open(data_dir)?.sync_all()?;
            Ok(true)
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(error) => Err(error),
    }
}

/// Marks the stop clean: called after every log closed.
pub fn mark(data_dir: &Path) -> std::io::Result<()> {
    let path = data_dir.join(FILE_NAME);
    let file = std::fs::File::create(&path)?;
    file.sync_all()?;
    drop(file);
    std::fs::File::open(data_dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marked_stop_is_clean_once() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!take(dir.path()).unwrap(), "a new data dir is not clean");
        mark(dir.path()).unwrap();
        assert!(take(dir.path()).unwrap());
        assert!(
            !take(dir.path()).unwrap(),
            "taken at start: a crash after it is seen"
        );
    }
}
