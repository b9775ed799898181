//! The controller listener and the connections to the other voters, on
//! plain threads (the quorum thread's peers, not the executors').
//!
//! - [`Peers`]: one sender thread per other voter with a bounded queue;
//!   it connects on demand and drops what it cannot deliver (Raft resends).
//! - [`serve`]: accepts on the controller listener; each connection gets a
//!   thread (at most [`CONNECTIONS_MAX`]) that reads frames: Raft messages
//!   go to the quorum thread, heartbeats and fetches are answered (a
//!   fetch once the quorum thread has something newer, a long poll).

use std::collections::HashMap;
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::voter::Input;
use super::wire::{self, Envelope, Frame};
use super::Cluster;

/// Raft messages queued for one voter; more are dropped.
const PEER_QUEUE: usize = 1024;
/// Controller-listener connections served at once.
pub const CONNECTIONS_MAX: usize = 64;
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// A failed connection is tried again after this.
const RECONNECT_AFTER: Duration = Duration::from_millis(100);

/// Senders to the other voters, by id.
pub struct Peers {
    senders: HashMap<u64, flume::Sender<Vec<u8>>>,
}

impl Peers {
    /// Starts a sender thread for each voter in `peers` (id, address).
    pub fn start(peers: &[(i32, String)]) -> std::io::Result<Self> {
        let mut senders = HashMap::new();
        for (id, address) in peers {
            let (tx, rx) = flume::bounded::<Vec<u8>>(PEER_QUEUE);
            let address = address.clone();
            std::thread::Builder::new()
                .name(format!("strom-peer-{id}"))
                .spawn(move || send_loop(&address, &rx))?;
            senders.insert(*id as u64, tx);
        }
        Ok(Peers { senders })
    }

    /// Queues `message` for voter `to`; dropped when its queue is full.
    /// Whether it was queued.
    pub fn send(&self, to: u64, cluster_id: &str, message: replication::Message) -> bool {
        let Some(sender) = self.senders.get(&to) else {
            return false;
        };
        let frame = Envelope {
            cluster_id: cluster_id.to_string(),
            frame: Frame::Raft(Box::new(message)),
        }
        .encode();
        sender.try_send(frame).is_ok()
    }
}

/// Connects to `address` (the first of its resolved addresses answering).
pub fn connect(address: &str) -> std::io::Result<TcpStream> {
    let mut last = None;
    for candidate in address.to_socket_addrs()? {
        match TcpStream::connect_timeout(&candidate, CONNECT_TIMEOUT) {
            Ok(stream) => {
                stream.set_nodelay(true)?;
                stream.set_read_timeout(Some(IO_TIMEOUT))?;
                stream.set_write_timeout(Some(IO_TIMEOUT))?;
                return Ok(stream);
            }
            Err(error) => last = Some(error),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other(format!("{address} resolves to nothing"))))
}

fn send_loop(address: &str, queue: &flume::Receiver<Vec<u8>>) {
    let mut stream: Option<TcpStream> = None;
    while let Ok(frame) = queue.recv() {
        if stream.is_none() {
            match connect(address) {
                Ok(connected) => stream = Some(connected),
                Err(error) => {
                    tracing::debug!(%address, %error, "voter unreachable");
                    // What is queued is stale by the time it is back.
                    std::thread::sleep(RECONNECT_AFTER);
                    queue.drain();
                    continue;
                }
            }
        }
        let written = stream
            .as_mut()
            .map(|s| s.write_all(&frame))
            .expect("connected");
        if let Err(error) = written {
            tracing::debug!(%address, %error, "connection to voter lost");
            stream = None;
        }
    }
}

/// Binds the controller listener.
pub fn bind(address: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(address).map_err(|error| {
        anyhow::anyhow!("cannot listen on the controller listener {address}: {error}")
    })
}

/// Serves the controller listener until the process ends.
pub fn serve(listener: TcpListener, cluster: Arc<Cluster>) -> std::io::Result<()> {
    let open = Arc::new(AtomicUsize::new(0));
    std::thread::Builder::new()
        .name("strom-controller-listener".to_string())
        .spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                if open.fetch_add(1, Ordering::SeqCst) >= CONNECTIONS_MAX {
                    open.fetch_sub(1, Ordering::SeqCst);
                    tracing::warn!(
                        limit = CONNECTIONS_MAX,
                        "controller listener full: a connection is refused"
                    );
                    continue;
                }
                let (cluster, open) = (cluster.clone(), open.clone());
                let spawned = std::thread::Builder::new()
                    .name("strom-controller-conn".to_string())
                    .spawn(move || {
                        let peer = stream.peer_addr().ok();
                        if let Err(error) = serve_connection(stream, &cluster) {
                            tracing::debug!(?peer, %error, "controller connection closed");
                        }
                        open.fetch_sub(1, Ordering::SeqCst);
                    });
                if spawned.is_err() {
                    tracing::warn!("cannot start a thread for a controller connection");
                }
            }
        })?;
    Ok(())
}

/// Serves one connection; when a broker's heartbeat connection ends, the
/// quorum thread hears of it (a killed broker's kernel closes it at once).
fn serve_connection(stream: TcpStream, cluster: &Cluster) -> std::io::Result<()> {
    let mut heartbeats_of = None;
    let served = serve_frames(stream, cluster, &mut heartbeats_of);
    if let (Some(broker), Some(inbox)) = (heartbeats_of, cluster.inbox.as_ref()) {
        let _ = inbox.try_send(Input::ConnectionLost(broker));
    }
    served
}

fn serve_frames(
    mut stream: TcpStream,
    cluster: &Cluster,
    heartbeats_of: &mut Option<i32>,
) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    // Voters keep their connections open between messages: no read timeout.
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let Some(inbox) = cluster.inbox.as_ref() else {
        return Ok(());
    };
    let mut reader = std::io::BufReader::new(stream.try_clone()?);
    while let Some(envelope) = wire::read_frame(&mut reader)? {
        let ours = cluster.cluster_id();
        if !ours.is_empty() && !envelope.cluster_id.is_empty() && envelope.cluster_id != ours {
            // Answered (below) with our id, so the other side learns it is
            // in the wrong cluster; its Raft messages are never stepped.
            if matches!(envelope.frame, Frame::Raft(_)) {
                tracing::warn!(
                    theirs = %envelope.cluster_id,
                    ours = %ours,
                    "a voter of another cluster sends Raft messages here: ignored"
                );
                continue;
            }
        }
        let foreign =
            !ours.is_empty() && !envelope.cluster_id.is_empty() && envelope.cluster_id != ours;
        let reply = match envelope.frame {
            Frame::Raft(message) => {
                if message.to != cluster.node_id as u64 {
                    continue;
                }
                let _ = inbox.try_send(Input::Raft(message));
                continue;
            }
            Frame::Heartbeat(heartbeat) if !foreign => {
                *heartbeats_of = Some(heartbeat.broker.id);
                let (tx, rx) = flume::bounded(1);
                if inbox.send(Input::Heartbeat(heartbeat, tx)).is_err() {
                    return Ok(());
                }
                match rx.recv_timeout(IO_TIMEOUT) {
                    Ok(reply) => Frame::HeartbeatReply(reply),
                    Err(_) => continue,
                }
            }
            Frame::Heartbeat(_) => Frame::HeartbeatReply(wire::HeartbeatReply {
                status: wire::HeartbeatStatus::NotController,
                leader: -1,
                applied: 0,
            }),
            Frame::Fetch { after, wait_ms } if !foreign => {
                let (tx, rx) = flume::bounded(1);
                let fetch = Input::Fetch {
                    after,
                    wait: Duration::from_millis(u64::from(wait_ms)),
                    reply: tx,
                };
                if inbox.send(fetch).is_err() {
                    return Ok(());
                }
                // The quorum thread holds it at most `voter::FETCH_WAIT_MAX`.
                match rx.recv_timeout(IO_TIMEOUT) {
                    Ok(Some(reply)) => Frame::FetchReply(reply),
                    _ => continue,
                }
            }
            Frame::AlterPartition(alter) if !foreign => {
                let (tx, rx) = flume::bounded(1);
                if inbox.send(Input::AlterPartition(alter, tx)).is_err() {
                    return Ok(());
                }
                match rx.recv_timeout(IO_TIMEOUT) {
                    Ok(error_code) => Frame::AlterPartitionReply { error_code },
                    Err(_) => Frame::AlterPartitionReply {
                        error_code: crate::errors::REQUEST_TIMED_OUT,
                    },
                }
            }
            Frame::VoterProbe { node_id, directory } if !foreign => {
                let Some(directories) = cluster.directories.get() else {
                    return Ok(());
                };
                Frame::VoterProbeReply(directories.answer(cluster, node_id, &directory))
            }
            other => {
                tracing::debug!(frame = ?std::mem::discriminant(&other), "unexpected frame on the controller listener");
                return Ok(());
            }
        };
        wire::write_frame(
            &mut stream,
            &Envelope {
                cluster_id: ours,
                frame: reply,
            },
        )?;
    }
    Ok(())
}

/// One kept connection to a controller, opened on first use and again
/// when the address changes; dropped when a call fails.
#[derive(Default)]
pub struct Link {
    connection: Option<(String, TcpStream)>,
}

impl Link {
    /// Sends `frame` to `address` and waits up to `timeout` for the
    /// answer; the connection is dropped when the call fails.
    pub fn call(
        &mut self,
        address: &str,
        cluster_id: &str,
        frame: Frame,
        timeout: Duration,
    ) -> std::io::Result<Envelope> {
        if self.connection.as_ref().is_none_or(|(to, _)| to != address) {
            self.connection = Some((address.to_string(), connect(address)?));
        }
        let (_, stream) = self.connection.as_mut().expect("connected");
        let result = stream
            .set_read_timeout(Some(timeout))
            .and_then(|()| call(stream, cluster_id, frame));
        if result.is_err() {
            self.connection = None;
        }
        result
    }

    /// Drops the connection: the next call opens a new one.
    pub fn reset(&mut self) {
        self.connection = None;
    }
}

/// Sends `frame` on `stream` and reads the answer.
pub fn call(stream: &mut TcpStream, cluster_id: &str, frame: Frame) -> std::io::Result<Envelope> {
    wire::write_frame(
        stream,
        &Envelope {
            cluster_id: cluster_id.to_string(),
            frame,
        },
    )?;
    wire::read_frame(stream)?.ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "the controller closed the connection",
        )
    })
}
