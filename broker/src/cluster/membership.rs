//! Whether a voter may take part in the quorum, and with which log.
//!
//! A voter is its node id and the directory its Raft log lives in (Kafka's
//! KIP-853 voter key: id plus directory id). The directory id is made when
//! the directory is (`__metadata/raft/directory.id`): an emptied or
//! replaced disk is a new directory. Each voter keeps, durably, the
//! directory it knows each other voter by (`voter-directories`): learned
//! when that voter first asks ([`Directories::answer`]) or when a voter
//! change that adds it commits, forgotten when one that removes it does.
//!
//! A voter whose Raft store is empty asks every other voter before it
//! takes part ([`check_empty_start`]): rejoining with an empty log a
//! quorum that counted on what it had acknowledged or voted breaks Raft's
//! safety (raft-rs also panics on it). The answers decide ([`decide`]):
//! - a voter that knows this node by another directory: its log is gone,
//!   and start-up refuses, naming the way back (remove the old voter, add
//!   this node as a new one);
//! - a quorum that has committed entries without this node as a member:
//!   it was removed, and it starts outside the quorum, waiting to be added
//!   (`strom cluster add-voter`);
//! - every other voter answered and none knows another directory: a first
//!   start, it takes part;
//! - a majority answered, none has committed anything: a new quorum, it
//!   takes part;
//! - otherwise it asks again (saying every [`WAITING_REPORT_EVERY`] whom
//!   it waits for) until [`PROBE_DEADLINE`], then refuses.
//!
//! The asking runs on the quorum thread before the quorum starts, so a
//! voter of a new cluster started before the others waits for them while
//! its broker starts (it serves clients once registered).
//!
//! A voter whose store is not empty tells the others its directory in the
//! background ([`announce`]), so that voters of a quorum formed before
//! directory ids existed learn them too.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::transport::{Lane, IO_TIMEOUT};
use super::wire::{Frame, VoterProbeReply};
use super::Cluster;

/// The directory id's file in the Raft store's directory.
pub const DIRECTORY_ID_FILE: &str = "directory.id";
/// The directories this voter knows the others by.
pub const KNOWN_FILE: &str = "voter-directories";
/// How long a voter with an empty log asks the others before it refuses.
pub const PROBE_DEADLINE: Duration = Duration::from_secs(600);
/// How often a voter waiting for the others says whom it waits for.
pub const WAITING_REPORT_EVERY: Duration = Duration::from_secs(10);
/// Between two rounds of asking.
const PROBE_PAUSE: Duration = Duration::from_millis(250);
/// How long [`announce`] keeps trying a voter that does not answer.
const ANNOUNCE_DEADLINE: Duration = Duration::from_secs(600);
const _: () = assert!(PROBE_PAUSE.as_millis() * 10 < PROBE_DEADLINE.as_millis());

/// This voter's directory and what it knows of the others'.
pub struct Directories {
    dir: PathBuf,
    own: String,
    known: Mutex<BTreeMap<i32, String>>,
    /// The commit index the store held at start: a voter answers that its
    /// quorum has committed entries before its quorum thread says so.
    stored_commit: u64,
}

impl Directories {
    /// Loads (or makes) the directory id and the known directories of the
    /// store in `dir`.
    pub fn load(dir: &Path, stored_commit: u64) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let id_path = dir.join(DIRECTORY_ID_FILE);
        let own = match std::fs::read_to_string(&id_path) {
            Ok(text) if !text.trim().is_empty() => text.trim().to_string(),
            Ok(_) => anyhow::bail!("{} is empty", id_path.display()),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                let id = new_directory_id();
                write_atomically(dir, DIRECTORY_ID_FILE, &format!("{id}\n"))?;
                tracing::info!(directory_id = %id, dir = %dir.display(), "a new directory for the controller quorum's log");
                id
            }
            Err(error) => anyhow::bail!("cannot read {}: {error}", id_path.display()),
        };
        let known_path = dir.join(KNOWN_FILE);
        let known = match std::fs::read_to_string(&known_path) {
            Ok(text) => parse_known(&text)
                .map_err(|reason| anyhow::anyhow!("{}: {reason}", known_path.display()))?,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(error) => anyhow::bail!("cannot read {}: {error}", known_path.display()),
        };
        Ok(Directories {
            dir: dir.to_path_buf(),
            own,
            known: Mutex::new(known),
            stored_commit,
        })
    }

    /// This voter's directory id.
    pub fn own(&self) -> &str {
        &self.own
    }

    /// The directory `node` is known by here.
    pub fn known(&self, node: i32) -> Option<String> {
        self.known
            .lock()
            .expect("directories lock")
            .get(&node)
            .cloned()
    }

    /// Answers a voter that asks whether it may take part: what this
    /// voter knows of it, learning its directory if it knew none.
    pub fn answer(&self, cluster: &Cluster, node: i32, directory: &str) -> VoterProbeReply {
        let status = cluster.quorum_status();
        let member = if status.voters.is_empty() {
            // The quorum thread has not said yet: the configured voters.
            cluster.voters.iter().any(|v| v.id == node)
        } else {
            status.voters.contains(&node) || status.learners.contains(&node)
        };
        let mut known = self.known.lock().expect("directories lock");
        if !known.contains_key(&node) && !directory.is_empty() {
            let mut learned = known.clone();
            learned.insert(node, directory.to_string());
            match self.persist(&learned) {
                Ok(()) => *known = learned,
                Err(error) => {
                    tracing::warn!(%error, "cannot record a voter's directory")
                }
            }
        }
        let mut directories: Vec<(i32, String)> =
            known.iter().map(|(n, d)| (*n, d.clone())).collect();
        directories.retain(|(n, _)| *n != cluster.node_id);
        directories.push((cluster.node_id, self.own.clone()));
        VoterProbeReply {
            formed: status.commit_index.max(self.stored_commit) > 0,
            member,
            known: known.get(&node).cloned().unwrap_or_default(),
            directories,
        }
    }

    /// Learns the directories another voter told (`(node, directory)`):
    /// those of nodes this voter knows none for. A voter back with a new
    /// disk knows no other; this is how it learns them, so that it too
    /// can tell when another comes back without its log.
    pub fn learn(&self, node_id: i32, told: &[(i32, String)]) {
        let mut known = self.known.lock().expect("directories lock");
        let mut next = known.clone();
        for (node, directory) in told {
            if *node != node_id && !directory.is_empty() {
                next.entry(*node).or_insert_with(|| directory.clone());
            }
        }
        if next == *known {
            return;
        }
        match self.persist(&next) {
            Ok(()) => *known = next,
            Err(error) => tracing::warn!(%error, "cannot record the voters' directories"),
        }
    }

    /// A committed voter change: an added node is known by the directory
    /// the change names, a removed one is forgotten.
    pub fn applied(&self, change: replication::quorum::VoterChange, context: &[u8]) {
        use replication::quorum::VoterChange;
        let mut known = self.known.lock().expect("directories lock");
        let mut next = known.clone();
        match change {
            VoterChange::AddLearner(node) => {
                let directory = String::from_utf8_lossy(context).to_string();
                if directory.is_empty() {
                    return;
                }
                next.insert(node as i32, directory);
            }
            VoterChange::Promote(_) => return,
            VoterChange::Remove(node) => {
                next.remove(&(node as i32));
            }
        }
        if next == *known {
            return;
        }
        match self.persist(&next) {
            Ok(()) => *known = next,
            Err(error) => crate::fatal::exit(&format!(
                "cannot record the voters' directories in {}: {error}",
                self.dir.display()
            )),
        }
    }

    fn persist(&self, known: &BTreeMap<i32, String>) -> std::io::Result<()> {
        let mut text = String::from("# node.id directory.id: the directory each voter's log lives in, as this voter knows it\n");
        for (node, directory) in known {
            text.push_str(&format!("{node} {directory}\n"));
        }
        write_atomically(&self.dir, KNOWN_FILE, &text)
    }
}

fn parse_known(text: &str) -> Result<BTreeMap<i32, String>, String> {
    let mut known = BTreeMap::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (node, directory) = line
            .split_once(' ')
            .ok_or_else(|| format!("line {line:?} is not NODE DIRECTORY"))?;
        let node: i32 = node
            .parse()
            .map_err(|_| format!("line {line:?}: {node:?} is not a node id"))?;
        known.insert(node, directory.trim().to_string());
    }
    Ok(known)
}

/// Writes `name` in `dir`: a temporary file, synced, renamed over, and
/// the directory synced.
fn write_atomically(dir: &Path, name: &str, text: &str) -> std::io::Result<()> {
    let temporary = dir.join(format!("{name}.tmp"));
    let mut file = std::fs::File::create(&temporary)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&temporary, dir.join(name))?;
    std::fs::File::open(dir)?.sync_all()
}

/// A new directory id: 128 random bits in Kafka's Uuid text (URL-safe
/// base64, no padding).
pub fn new_directory_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let bits = fastrand::u128(..) ^ nanos ^ (u128::from(std::process::id()) << 96);
    uuid_text(bits)
}

/// Kafka's text form of a Uuid.
pub fn uuid_text(bits: u128) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(22);
    let (mut acc, mut held) = (0u32, 0u32);
    for byte in bits.to_be_bytes() {
        acc = (acc << 8) | u32::from(byte);
        held += 8;
        while held >= 6 {
            held -= 6;
            out.push(ALPHABET[((acc >> held) & 63) as usize] as char);
        }
    }
    out.push(ALPHABET[((acc << (6 - held)) & 63) as usize] as char);
    out
}

/// The bits of Kafka's text form of a Uuid, if it is one.
pub fn uuid_bits(text: &str) -> Option<u128> {
    if text.len() != 22 {
        return None;
    }
    let mut bits = 0u128;
    for (i, c) in text.bytes().enumerate() {
        let value = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' => 62,
            b'_' => 63,
            _ => return None,
        } as u128;
        if i < 21 {
            bits = (bits << 6) | value;
        } else {
            // The last character carries 2 bits, then 4 zero bits.
            if value & 15 != 0 {
                return None;
            }
            bits = (bits << 2) | (value >> 4);
        }
    }
    Some(bits)
}

/// How a voter whose store is empty starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// A member of the configured quorum (a new quorum, or a first start).
    Voter,
    /// Outside the quorum, until a voter change adds it.
    Join,
}

/// What the answers so far decide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Start(Start),
    Refuse(String),
    /// Not enough answers yet.
    Ask,
}

/// Decides for `node`, whose store is empty and whose directory is
/// `own`, on the `answers` of the other voters so far (by id), in a
/// configured quorum of `voters` (this node included).
pub fn decide(
    node: i32,
    own: &str,
    voters: usize,
    answers: &BTreeMap<i32, VoterProbeReply>,
) -> Decision {
    if answers.values().any(|a| a.formed && !a.member) {
        return Decision::Start(Start::Join);
    }
    if let Some((peer, answer)) = answers
        .iter()
        .find(|(_, a)| a.member && !a.known.is_empty() && a.known != own)
    {
        return Decision::Refuse(lost_log_message(node, own, *peer, &answer.known));
    }
    if answers.len() + 1 >= voters {
        return Decision::Start(Start::Voter);
    }
    if answers.values().all(|a| !a.formed) && (answers.len() + 1) * 2 > voters {
        return Decision::Start(Start::Voter);
    }
    Decision::Ask
}

fn lost_log_message(node: i32, own: &str, peer: i32, known: &str) -> String {
    format!(
        "this node (node.id {node}) is a voter of the controller quorum, but its Raft log is gone: \
         its data dir is a new directory ({own}) while voter {peer} knows node {node} by \
         directory {known}. A voter must not rejoin with an empty log (the quorum counted on \
         what it had). To bring it back: on a running node, `strom cluster remove-voter \
         --node-id {node}`, then start this node again (it starts outside the quorum), then \
         `strom cluster add-voter --node-id {node}` (see docs/operations.md, Replacing a voter)"
    )
}

/// Asks the other voters until they decide how this node, whose Raft
/// store is empty, may start; an error with the reason when it may not.
pub fn check_empty_start(cluster: &Cluster, directories: &Directories) -> anyhow::Result<Start> {
    let node = cluster.node_id;
    let peers: Vec<(i32, String)> = cluster
        .voters
        .iter()
        .filter(|v| v.id != node)
        .map(|v| (v.id, format!("{}:{}", v.host, v.port)))
        .collect();
    let mut answers = BTreeMap::new();
    let deadline = Instant::now() + PROBE_DEADLINE;
    let rounds_max = (PROBE_DEADLINE.as_millis() / PROBE_PAUSE.as_millis()) as usize + 1;
    let mut next_report = Instant::now() + WAITING_REPORT_EVERY;
    for _ in 0..rounds_max {
        for (peer, address) in &peers {
            if answers.contains_key(peer) {
                continue;
            }
            match probe(cluster, address, node, directories.own()) {
                Ok(answer) => {
                    directories.learn(node, &answer.directories);
                    answers.insert(*peer, answer);
                }
                Err(error) => tracing::debug!(peer, %address, %error, "voter did not answer"),
            }
        }
        match decide(node, directories.own(), cluster.voters.len(), &answers) {
            Decision::Start(start) => {
                tracing::info!(
                    ?start,
                    directory_id = directories.own(),
                    answered = ?answers.keys().collect::<Vec<_>>(),
                    "this voter's Raft log is empty: the other voters agree it may start"
                );
                return Ok(start);
            }
            Decision::Refuse(reason) => anyhow::bail!(reason),
            Decision::Ask => {}
        }
        if Instant::now() >= deadline {
            break;
        }
        if Instant::now() >= next_report {
            next_report += WAITING_REPORT_EVERY;
            tracing::info!(
                waiting_for = ?silent(&peers, &answers),
                answered = ?answers.keys().collect::<Vec<_>>(),
                "this voter's Raft log is empty: it waits for the other voters to say whether the quorum counts on it"
            );
        }
        std::thread::sleep(PROBE_PAUSE);
    }
    let silent = silent(&peers, &answers);
    anyhow::bail!(
        "this node (node.id {node}) is a voter whose Raft log is empty, and within {PROBE_DEADLINE:?} \
         voters {silent:?} did not answer whether the quorum already counts on this node's log \
         (answered: {answered:?}): it does not start as a voter on an empty log it cannot vouch \
         for. Start it again once those voters are up; if its log was lost, replace it as \
         docs/operations.md (Replacing a voter) says",
        answered = answers.keys().collect::<Vec<_>>()
    )
}

/// The voters among `peers` that have not answered.
fn silent(peers: &[(i32, String)], answers: &BTreeMap<i32, VoterProbeReply>) -> Vec<i32> {
    peers
        .iter()
        .map(|(id, _)| *id)
        .filter(|id| !answers.contains_key(id))
        .collect()
}

/// Tells every other voter this node's directory, in the background,
/// until each has answered once (or [`ANNOUNCE_DEADLINE`]).
pub fn announce(cluster: Arc<Cluster>, directories: Arc<Directories>) {
    let node = cluster.node_id;
    let mut peers: Vec<(i32, String)> = cluster
        .voters
        .iter()
        .filter(|v| v.id != node)
        .map(|v| (v.id, format!("{}:{}", v.host, v.port)))
        .collect();
    let spawned = std::thread::Builder::new()
        .name("strom-voter-announce".to_string())
        .spawn(move || {
            let deadline = Instant::now() + ANNOUNCE_DEADLINE;
            let rounds_max = (ANNOUNCE_DEADLINE.as_millis() / PROBE_PAUSE.as_millis()) as usize;
            for _ in 0..rounds_max {
                peers.retain(|(peer, address)| {
                    match probe(&cluster, address, node, directories.own()) {
                        Ok(answer) => {
                            directories.learn(node, &answer.directories);
                            if answer.member
                                && !answer.known.is_empty()
                                && answer.known != directories.own()
                            {
                                tracing::warn!(
                                    peer,
                                    known = %answer.known,
                                    own = directories.own(),
                                    "another voter knows this node by another directory"
                                );
                            }
                            false
                        }
                        Err(_) => true,
                    }
                });
                if peers.is_empty() || Instant::now() >= deadline {
                    return;
                }
                std::thread::sleep(PROBE_PAUSE * 4);
            }
        });
    if let Err(error) = spawned {
        tracing::warn!(%error, "cannot start the thread that tells the voters this node's directory");
    }
}

fn probe(
    cluster: &Cluster,
    address: &str,
    node: i32,
    directory: &str,
) -> std::io::Result<VoterProbeReply> {
    let frame = Frame::VoterProbe {
        node_id: node,
        directory: directory.to_string(),
    };
    let answer = cluster
        .channel
        .call(Lane::Probe, address, "", frame, IO_TIMEOUT)?;
    match answer.frame {
        Frame::VoterProbeReply(reply) => Ok(reply),
        _ => Err(std::io::Error::other(
            "an unexpected answer to a voter probe",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(formed: bool, member: bool, known: &str) -> VoterProbeReply {
        VoterProbeReply {
            formed,
            member,
            known: known.to_string(),
            directories: Vec::new(),
        }
    }

    fn check(answers: &[(i32, VoterProbeReply)], voters: usize, expected: &str) {
        let answers: BTreeMap<i32, VoterProbeReply> = answers.iter().cloned().collect();
        let decision = match decide(3, "new", voters, &answers) {
            Decision::Start(Start::Voter) => "voter",
            Decision::Start(Start::Join) => "join",
            Decision::Refuse(_) => "refuse",
            Decision::Ask => "ask",
        };
        assert_eq!(decision, expected, "{answers:?}");
    }

    #[test]
    fn an_empty_log_starts_only_where_no_voter_counts_on_it() {
        // A new quorum: every other voter answers, or a majority with
        // nothing committed.
        check(
            &[
                (1, answer(false, true, "new")),
                (2, answer(false, true, "new")),
            ],
            3,
            "voter",
        );
        check(&[(1, answer(false, true, "new"))], 3, "voter");
        check(&[], 3, "ask");
        // A first start into a quorum that formed without it.
        check(
            &[
                (1, answer(true, true, "new")),
                (2, answer(true, true, "new")),
            ],
            3,
            "voter",
        );
        // A quorum that formed, one voter silent: it may know this node.
        check(&[(1, answer(true, true, "new"))], 3, "ask");
        check(&[(1, answer(false, true, "new"))], 5, "ask");
        check(
            &[
                (1, answer(false, true, "new")),
                (2, answer(false, true, "")),
            ],
            5,
            "voter",
        );
        // The log is gone: a voter knows this node by another directory.
        check(
            &[
                (1, answer(true, true, "old")),
                (2, answer(true, true, "new")),
            ],
            3,
            "refuse",
        );
        check(&[(1, answer(true, true, "old"))], 3, "refuse");
        check(&[(1, answer(false, true, "old"))], 3, "refuse");
        // Removed: it joins, whatever a voter that has not applied the
        // removal yet still knows.
        check(
            &[(1, answer(true, false, "")), (2, answer(true, true, "old"))],
            3,
            "join",
        );
        check(&[(1, answer(true, false, ""))], 3, "join");
    }

    #[test]
    fn directory_ids_are_kafka_uuids_and_read_back() {
        for bits in [
            0u128,
            1,
            u128::MAX,
            0x0123_4567_89ab_cdef_0011_2233_4455_6677,
        ] {
            let text = uuid_text(bits);
            assert_eq!(text.len(), 22);
            assert_eq!(uuid_bits(&text), Some(bits), "{text}");
        }
        assert_ne!(new_directory_id(), new_directory_id());
        assert_eq!(uuid_bits("short"), None);
        assert_eq!(uuid_bits("AAAAAAAAAAAAAAAAAAAAAB"), None);
    }

    #[test]
    fn the_directory_id_and_known_directories_survive_a_reload() {
        let temp = tempfile::tempdir().unwrap();
        let first = Directories::load(temp.path(), 0).unwrap();
        let own = first.own().to_string();
        first.applied(replication::quorum::VoterChange::AddLearner(4), b"dir-4");
        first.applied(replication::quorum::VoterChange::AddLearner(5), b"dir-5");
        first.applied(replication::quorum::VoterChange::Remove(5), b"");
        // Told by another voter: only what it knew nothing of.
        first.learn(1, &[(4, "other-4".to_string()), (6, "dir-6".to_string())]);
        let again = Directories::load(temp.path(), 0).unwrap();
        assert_eq!(again.own(), own);
        assert_eq!(again.known(4).as_deref(), Some("dir-4"));
        assert_eq!(again.known(5), None);
        assert_eq!(again.known(6).as_deref(), Some("dir-6"));
        // An emptied directory is a new one.
        std::fs::remove_dir_all(temp.path()).unwrap();
        let emptied = Directories::load(temp.path(), 0).unwrap();
        assert_ne!(emptied.own(), own);
        assert_eq!(emptied.known(4), None);
    }
}
