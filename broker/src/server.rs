//! The client listener of one core and the connections it accepts.
//!
//! Each connection is served on the core that accepted it: a reader task
//! decodes frames and spawns one handler task per request; a writer task
//! awaits those tasks in request order and writes their responses, so a
//! slow request (a long-polling Fetch) is never overtaken. At most
//! [`CONNECTION_IN_FLIGHT_MAX`] requests are in flight; beyond that the
//! reader stops reading the socket.

use std::net::SocketAddr;
use std::rc::Rc;

use bytes::{Bytes, BytesMut};
use futures_lite::io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use glommio::channels::local_channel;
use glommio::net::{TcpListener, TcpStream};
use glommio::task::JoinHandle;
use protocol::codec::Encoded;
use protocol::frame::{request_frame_length, LENGTH_PREFIX_BYTES};

use crate::handlers;
use crate::limits::CONNECTION_IN_FLIGHT_MAX;
use crate::shard::Shard;

const SOCKET_BUFFER_BYTES: usize = 64 << 10;

/// Why a connection was closed by the broker.
#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    #[error("bad frame: {0}")]
    Frame(#[from] protocol::frame::FrameError),
    #[error("bad request: {0}")]
    Codec(#[from] protocol::codec::CodecError),
    #[error("{api_key:?} v{api_version} is not supported")]
    UnsupportedVersion {
        api_key: kafka_protocol::messages::ApiKey,
        api_version: i16,
    },
    #[error("{api_key:?} is not supported")]
    UnsupportedApi {
        api_key: kafka_protocol::messages::ApiKey,
    },
    #[error(
        "{api_key:?} request of {frame_bytes} bytes exceeds the limit for non-produce requests"
    )]
    RequestTooLarge {
        api_key: kafka_protocol::messages::ApiKey,
        frame_bytes: usize,
    },
    #[error("request handler failed")]
    HandlerGone,
}

/// Binds this core's listener (`SO_REUSEPORT`, so every core binds the
/// same address) and accepts until the shard is stopping.
pub fn bind(address: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(address).map_err(|e| std::io::Error::other(e.to_string()))
}

pub async fn accept_loop(shard: Rc<Shard>, listener: TcpListener) {
    loop {
        let accepted = futures_lite::future::or(async { Some(listener.accept().await) }, async {
            shard.stopping.wait().await;
            None
        })
        .await;
        let stream = match accepted {
            None => break,
            Some(Ok(stream)) => stream,
            Some(Err(error)) => {
                tracing::warn!(core = shard.id, %error, "accept failed");
                continue;
            }
        };
        let peer = stream.peer_addr().ok();
        let _ = stream.set_nodelay(true);
        let guard = shard.connections.enter();
        let shard = shard.clone();
        glommio::spawn_local(async move {
            serve(shard.clone(), stream, peer).await;
            drop(guard);
        })
        .detach();
    }
    tracing::debug!(core = shard.id, "listener closed");
}

type Outcome = Result<Option<Encoded>, ConnectionError>;
type Pending = JoinHandle<Outcome>;

async fn serve(shard: Rc<Shard>, stream: TcpStream, peer: Option<SocketAddr>) {
    let (read_half, write_half) = futures_lite::io::split(stream);
    let (queue_tx, queue_rx) = local_channel::new_bounded::<Pending>(CONNECTION_IN_FLIGHT_MAX);
    let peer_text = peer
        .map(|p| p.to_string())
        .unwrap_or_else(|| "unknown".to_string());
    // Raised when the writer stops, so the reader stops waiting for frames.
    let writer_done = Rc::new(crate::sync::Notify::default());

    let writer = glommio::spawn_local({
        let peer_text = peer_text.clone();
        let writer_done = writer_done.clone();
        async move {
            let _done = RaiseOnDrop(writer_done);
            let mut writer = BufWriter::with_capacity(SOCKET_BUFFER_BYTES, write_half);
            // A response already finished, to be written without waiting.
            let mut done: Option<Outcome> = None;
            loop {
                let outcome = match done.take() {
                    Some(outcome) => outcome,
                    None => match queue_rx.recv().await {
                        Some(pending) => pending.await.unwrap_or(Err(ConnectionError::HandlerGone)),
                        None => break,
                    },
                };
                match outcome {
                    Ok(Some(response)) => {
                        for part in response.parts() {
                            if let Err(error) = writer.write_all(part).await {
                                tracing::debug!(peer = %peer_text, %error, "write failed");
                                return;
                            }
                        }
                    }
                    Ok(None) => {}
                    Err(error) => {
                        tracing::warn!(peer = %peer_text, %error, "closing connection");
                        let _ = writer.flush().await;
                        return;
                    }
                }
                // The next response shares this write only if it is already
                // done. Otherwise this one is flushed now: an answer must not
                // sit in the buffer while a request behind it still runs
                // (with five produce requests in flight the queue was rarely
                // empty, and answers went out in bursts when the last of
                // them was done).
                let mut waiting = None;
                if let Some(Some(mut pending)) =
                    futures_lite::future::poll_once(queue_rx.recv()).await
                {
                    match futures_lite::future::poll_once(&mut pending).await {
                        Some(outcome) => {
                            done = Some(outcome.unwrap_or(Err(ConnectionError::HandlerGone)));
                            continue;
                        }
                        None => waiting = Some(pending),
                    }
                }
                if let Err(error) = writer.flush().await {
                    tracing::debug!(peer = %peer_text, %error, "flush failed");
                    return;
                }
                if let Some(pending) = waiting {
                    done = Some(pending.await.unwrap_or(Err(ConnectionError::HandlerGone)));
                }
            }
            let _ = writer.flush().await;
            let _ = writer.close().await;
        }
    });

    let mut reader = BufReader::with_capacity(SOCKET_BUFFER_BYTES, read_half);
    loop {
        let stop = async {
            futures_lite::future::or(shard.stopping.wait(), writer_done.wait()).await;
            Ok(None)
        };
        let next =
            futures_lite::future::or(read_frame(&mut reader, shard.config.frame_bytes_max), stop)
                .await;
        let frame = match next {
            Ok(Some(frame)) => frame,
            Ok(None) => break,
            Err(ReadError::Io(error)) => {
                tracing::debug!(peer = %peer_text, %error, "connection closed");
                break;
            }
            Err(ReadError::Frame(error)) => {
                tracing::warn!(peer = %peer_text, %error, "closing connection: bad frame");
                break;
            }
        };
        let request = crate::metrics::RequestStart::of(&frame);
        let task =
            glommio::spawn_local(request.observe(handlers::handle(shard.clone(), frame))).detach();
        if queue_tx.send(task).await.is_err() {
            // The writer stopped (client gone or a request closed the connection).
            break;
        }
    }
    drop(queue_tx);
    writer.await;
}

struct RaiseOnDrop(Rc<crate::sync::Notify>);

impl Drop for RaiseOnDrop {
    fn drop(&mut self) {
        self.0.raise();
    }
}

enum ReadError {
    Io(std::io::Error),
    Frame(protocol::frame::FrameError),
}

/// Reads one frame; `Ok(None)` at a clean end of stream between frames.
async fn read_frame<R: futures_lite::AsyncRead + Unpin>(
    reader: &mut R,
    frame_bytes_max: usize,
) -> Result<Option<Bytes>, ReadError> {
    let mut prefix = [0u8; LENGTH_PREFIX_BYTES];
    let first = reader.read(&mut prefix[..1]).await.map_err(ReadError::Io)?;
    if first == 0 {
        return Ok(None);
    }
    reader
        .read_exact(&mut prefix[1..])
        .await
        .map_err(ReadError::Io)?;
    let length = request_frame_length(prefix, frame_bytes_max).map_err(ReadError::Frame)?;
    let mut frame = BytesMut::zeroed(length);
    reader.read_exact(&mut frame).await.map_err(ReadError::Io)?;
    Ok(Some(frame.freeze()))
}
