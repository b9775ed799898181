//! `meta.properties` in the data dir, Kafka's way: which cluster and which
//! node the directory belongs to (`version=1`, `cluster.id`, `node.id`).
//! Written once, at the first start (or the first start of a data dir from
//! before the file existed), with the cluster id of the metadata log. At
//! every later start a different configured `node.id`, or a metadata log of
//! another cluster, stops the broker before it changes anything: a data dir
//! started under the wrong id would hand its partitions to the wrong node.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The file's name in the data dir (Kafka's).
pub const FILE_NAME: &str = "meta.properties";
/// The only version written and read (KRaft's).
pub const VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaProperties {
    pub cluster_id: String,
    pub node_id: i32,
}

#[derive(Debug, thiserror::Error)]
pub enum MetaPropertiesError {
    #[error("cannot {op} {path}: {error}")]
    Io {
        op: &'static str,
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{path} is not a valid meta.properties: {reason}")]
    Invalid { path: PathBuf, reason: String },
    #[error(
        "{path} says this data dir belongs to node.id {stored}, but the broker is \
         configured with node.id {configured}: start it with node.id {stored}, or \
         give node {configured} its own data dir"
    )]
    NodeIdMismatch {
        path: PathBuf,
        stored: i32,
        configured: i32,
    },
    #[error(
        "{path} says this data dir belongs to cluster {stored}, but its metadata log \
         is of cluster {log}: the data dir mixes files of two clusters"
    )]
    ClusterIdMismatch {
        path: PathBuf,
        stored: String,
        log: String,
    },
}

fn io(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> MetaPropertiesError {
    let path = path.to_path_buf();
    move |error| MetaPropertiesError::Io { op, path, error }
}

/// Parses the file's text: Java properties (`key=value` or `key:value`,
/// `#`/`!` comments). Kafka's version 0 (`broker.id`) is read too.
pub fn parse(text: &str) -> Result<MetaProperties, String> {
    let mut version = None;
    let mut cluster_id = None;
    let mut node_id = None;
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let Some((key, value)) = line.split_once(['=', ':']) else {
            return Err(format!("line {line:?} is not KEY=VALUE"));
        };
        let (key, value) = (key.trim(), value.trim());
        match key {
            "version" => version = Some(value.to_string()),
            "cluster.id" => cluster_id = Some(value.to_string()),
            "node.id" | "broker.id" => {
                node_id = Some(
                    value
                        .parse::<i32>()
                        .map_err(|_| format!("{key}={value} is not a node id"))?,
                )
            }
            _ => {}
        }
    }
    match version.as_deref() {
        Some("0") | Some("1") => {}
        Some(other) => return Err(format!("version={other} is not 0 or 1")),
        None => return Err("no version".to_string()),
    }
    Ok(MetaProperties {
        cluster_id: cluster_id
            .filter(|id| !id.is_empty())
            .ok_or("no cluster.id")?,
        node_id: node_id.ok_or("no node.id")?,
    })
}

pub fn render(meta: &MetaProperties) -> String {
    format!(
        "# The cluster and node this data dir belongs to; written by Strom at the first start.\n\
         version={VERSION}\ncluster.id={}\nnode.id={}\n",
        meta.cluster_id, meta.node_id
    )
}

/// Reads `<data_dir>/meta.properties`, `None` when there is none.
pub fn read(data_dir: &Path) -> Result<Option<MetaProperties>, MetaPropertiesError> {
    let path = data_dir.join(FILE_NAME);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(io("read", &path)(error)),
    };
    parse(&text)
        .map(Some)
        .map_err(|reason| MetaPropertiesError::Invalid { path, reason })
}

/// Writes the file atomically: a temporary file, synced, renamed over, and
/// the directory synced, so a crash leaves the old file or the new one.
pub fn write(data_dir: &Path, meta: &MetaProperties) -> Result<(), MetaPropertiesError> {
    let path = data_dir.join(FILE_NAME);
    let temporary = data_dir.join(format!("{FILE_NAME}.tmp"));
    let mut file = std::fs::File::create(&temporary).map_err(io("create", &temporary))?;
    file.write_all(render(meta).as_bytes())
        .map_err(io("write", &temporary))?;
    file.sync_all().map_err(io("sync", &temporary))?;
    drop(file);
    std::fs::rename(&temporary, &path).map_err(io("rename over", &path))?;
    std::fs::File::open(data_dir)
        .and_then(|dir| dir.sync_all())
        .map_err(io("sync the directory", data_dir))
}

/// Before the metadata log is opened: refuses a data dir that belongs to
/// another node. Returns what the file holds, if there is one.
pub fn check_node(
    data_dir: &Path,
    configured_node_id: i32,
) -> Result<Option<MetaProperties>, MetaPropertiesError> {
    let stored = read(data_dir)?;
    if let Some(meta) = &stored {
        if meta.node_id != configured_node_id {
            return Err(MetaPropertiesError::NodeIdMismatch {
                path: data_dir.join(FILE_NAME),
                stored: meta.node_id,
                configured: configured_node_id,
            });
        }
    }
    Ok(stored)
}

/// After the metadata log is opened: refuses a file of another cluster
/// than the log's, and writes the file when there was none.
pub fn check_cluster_or_write(
    data_dir: &Path,
    stored: Option<&MetaProperties>,
    node_id: i32,
    log_cluster_id: &str,
) -> Result<(), MetaPropertiesError> {
    match stored {
        Some(meta) if meta.cluster_id != log_cluster_id => {
            Err(MetaPropertiesError::ClusterIdMismatch {
                path: data_dir.join(FILE_NAME),
                stored: meta.cluster_id.clone(),
                log: log_cluster_id.to_string(),
            })
        }
        Some(_) => Ok(()),
        None => write(
            data_dir,
            &MetaProperties {
                cluster_id: log_cluster_id.to_string(),
                node_id,
            },
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_kafka_files() {
        let meta = MetaProperties {
            cluster_id: "q1Sh-9_ISia_zwGINzRvyQ".to_string(),
            node_id: 3,
        };
        assert_eq!(parse(&render(&meta)).unwrap(), meta);
        let kafka = "#\n#Wed Dec 02 08:00:00 UTC 2026\nnode.id=3\nversion=1\n\
                     cluster.id=q1Sh-9_ISia_zwGINzRvyQ\ndirectory.id=abc\n";
        assert_eq!(parse(kafka).unwrap(), meta);
        assert!(parse("version=2\ncluster.id=a\nnode.id=1").is_err());
        assert!(parse("version=1\nnode.id=1")
            .unwrap_err()
            .contains("cluster.id"));
        assert!(parse("version=1\ncluster.id=a\nnode.id=x").is_err());
    }

    #[test]
    fn written_once_then_checked() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(check_node(dir.path(), 1).unwrap(), None);
        check_cluster_or_write(dir.path(), None, 1, "cluster-a").unwrap();
        assert!(!dir.path().join("meta.properties.tmp").exists());
        let stored = check_node(dir.path(), 1).unwrap().unwrap();
        assert_eq!(stored.cluster_id, "cluster-a");
        let error = check_node(dir.path(), 2).unwrap_err().to_string();
        assert!(
            error.contains("node.id 1") && error.contains("node.id 2"),
            "{error}"
        );
        let error = check_cluster_or_write(dir.path(), Some(&stored), 1, "cluster-b")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("cluster-a") && error.contains("cluster-b"),
            "{error}"
        );
    }
}
