//! `io-properties.toml`, written by `strom-tune iotune`: the disk's
//! measured sweet spot for write size and writes in flight. Its `[io]`
//! table holds storage settings in their config names; they become the
//! broker-wide defaults unless the config file or a flag sets the same key.
//! Precedence: embedded defaults < io-properties.toml < config file < flags.

use std::path::{Path, PathBuf};

/// The file `strom start` looks for in the data directory.
pub const FILE_NAME: &str = "io-properties.toml";

/// The config key naming another file instead.
pub const PATH_KEY: &str = "strom.io.properties";

/// The settings the `[io]` table may hold.
pub const KEYS: &[&str] = &["strom.write.bytes", "strom.writes.inflight"];

/// What the broker took from an io properties file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub path: PathBuf,
    /// Settings used, in file order.
    pub used: Vec<(String, String)>,
    /// Settings in the file that the config overrode.
    pub overridden: Vec<String>,
}

/// Reads the `[io]` table of an io properties file as `(key, value)`
/// pairs. Unknown keys are an error: the file is machine-written, so one is
/// a version mismatch worth hearing about.
pub fn read(path: &Path) -> Result<Vec<(String, String)>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read it: {e}"))?;
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| format!("not valid TOML: {e}"))?;
    let Some(io) = table.get("io") else {
        return Err("it has no [io] table".to_string());
    };
    let Some(io) = io.as_table() else {
        return Err("[io] is not a table".to_string());
    };
    let mut settings = Vec::new();
    for (key, value) in io {
        if !KEYS.contains(&key.as_str()) {
            return Err(format!(
                "unknown key `{key}` in [io] (expected {})",
                KEYS.join(", ")
            ));
        }
        let Some(value) = value.as_integer() else {
            return Err(format!("`{key}` must be an integer"));
        };
        settings.push((key.clone(), value.to_string()));
    }
    Ok(settings)
}

/// The file to use: the configured path (which must exist), else the data
/// directory's `io-properties.toml` if there is one.
pub fn locate(configured: Option<&Path>, data_dir: &Path) -> Option<PathBuf> {
    if let Some(path) = configured {
        return Some(path.to_path_buf());
    }
    let default = data_dir.join(FILE_NAME);
    default.is_file().then_some(default)
}

/// Logs what the broker uses for the io settings and where it came from.
pub fn log_use(config: &crate::config::BrokerConfig) {
    let write_bytes = config.topic_defaults.get("strom.write.bytes");
    let writes_inflight = config.topic_defaults.get("strom.writes.inflight");
    let write_bytes = write_bytes.as_deref().unwrap_or("?");
    let writes_inflight = writes_inflight.as_deref().unwrap_or("?");
    match &config.io_properties {
        Some(applied) => tracing::info!(
            path = %applied.path.display(),
            used = %applied
                .used
                .iter()
                .map(|(key, value)| format!("{key}={value}"))
                .collect::<Vec<_>>()
                .join(","),
            overridden_by_config = %applied.overridden.join(","),
            strom.write.bytes = %write_bytes,
            strom.writes.inflight = %writes_inflight,
            "io properties"
        ),
        None => tracing::info!(
            strom.write.bytes = %write_bytes,
            strom.writes.inflight = %writes_inflight,
            "no {FILE_NAME} in the data dir: storage defaults (run `strom-tune iotune --dir {}` to measure the disk)",
            config.data_dir.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, expected: Result<&[(&str, &str)], &str>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        std::fs::write(&path, text).unwrap();
        match (read(&path), expected) {
            (Ok(got), Ok(want)) => {
                let want: Vec<(String, String)> = want
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                assert_eq!(got, want, "{text}");
            }
            (Err(got), Err(want)) => assert!(got.contains(want), "{got} should say {want}"),
            (got, want) => panic!("{text}: got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn the_io_table_is_read_in_config_names() {
        check(
            "[io]\n\"strom.write.bytes\" = 262144\n\"strom.writes.inflight\" = 4\n[measured]\nx = 1\n",
            Ok(&[
                ("strom.write.bytes", "262144"),
                ("strom.writes.inflight", "4"),
            ]),
        );
        check("[io]\n", Ok(&[]));
        check("[measured]\n", Err("no [io] table"));
        check("[io]\n\"strom.cache.bytes\" = 1\n", Err("unknown key"));
        check("[io]\n\"strom.write.bytes\" = \"big\"\n", Err("integer"));
        check("[io\n", Err("not valid TOML"));
    }

    fn load_with(
        dir: &Path,
        settings: &[(&str, &str)],
    ) -> Result<crate::config::BrokerConfig, String> {
        let flags = crate::config::Flags {
            data_dir: Some(dir.to_path_buf()),
            settings: settings
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        };
        crate::config::load(&flags).map_err(|e| e.to_string())
    }

    #[test]
    fn io_properties_set_defaults_below_the_config() {
        let dir = tempfile::tempdir().unwrap();
        // No file: storage defaults, nothing recorded.
        let config = load_with(dir.path(), &[]).unwrap();
        assert_eq!(config.io_properties, None);
        assert_eq!(
            config.topic_defaults.get("strom.write.bytes").as_deref(),
            Some("1048576")
        );
        std::fs::write(
            dir.path().join(FILE_NAME),
            "[io]\n\"strom.write.bytes\" = 262144\n\"strom.writes.inflight\" = 8\n",
        )
        .unwrap();
        let config = load_with(dir.path(), &[]).unwrap();
        assert_eq!(
            config.topic_defaults.get("strom.write.bytes").as_deref(),
            Some("262144")
        );
        assert_eq!(
            config
                .topic_defaults
                .get("strom.writes.inflight")
                .as_deref(),
            Some("8")
        );
        let applied = config.io_properties.unwrap();
        assert_eq!(applied.path, dir.path().join(FILE_NAME));
        assert_eq!(applied.used.len(), 2);
        // A flag wins over the file.
        let config = load_with(dir.path(), &[("strom.writes.inflight", "2")]).unwrap();
        assert_eq!(
            config
                .topic_defaults
                .get("strom.writes.inflight")
                .as_deref(),
            Some("2")
        );
        assert_eq!(
            config.io_properties.unwrap().overridden,
            ["strom.writes.inflight"]
        );
        // A path given in the config is used and must exist.
        let other = dir.path().join("elsewhere.toml");
        std::fs::write(&other, "[io]\n\"strom.write.bytes\" = 131072\n").unwrap();
        let config = load_with(dir.path(), &[(PATH_KEY, other.to_str().unwrap())]).unwrap();
        assert_eq!(
            config.topic_defaults.get("strom.write.bytes").as_deref(),
            Some("131072")
        );
        let missing = dir.path().join("missing.toml");
        let error = load_with(dir.path(), &[(PATH_KEY, missing.to_str().unwrap())]).unwrap_err();
        assert!(
            error.contains(PATH_KEY) && error.contains("missing.toml"),
            "{error}"
        );
        // A value storage refuses names the key and the file.
        std::fs::write(&other, "[io]\n\"strom.write.bytes\" = 1000\n").unwrap();
        let error = load_with(dir.path(), &[(PATH_KEY, other.to_str().unwrap())]).unwrap_err();
        assert!(
            error.contains("strom.write.bytes") && error.contains("elsewhere.toml"),
            "{error}"
        );
    }
}
