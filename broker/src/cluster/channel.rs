//! The request channel between brokers for requests forwarded whole: a
//! request frame sent to another broker's client listener and its whole
//! answer frame read back (`round_trip`), on connections of this core
//! (nothing is shared between cores). `exchange` takes one from a pool per
//! destination, at most [`FORWARD_GROUP_CONNECTIONS_MAX`] in use at once,
//! so a request that waits long at the other broker (a JoinGroup) holds
//! up no other; the admin forwarding to the active controller connects by
//! address (`connect`).

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use glommio::sync::Semaphore;

use crate::limits::{
    FORWARDED_ANSWER_BYTES_MAX, FORWARD_CONNECT_TIMEOUT_MS, FORWARD_GROUP_CONNECTIONS_MAX,
};
use crate::shard::Shard;

/// This core's connections to one broker: idle ones, and the bound
/// on those in use.
struct Pool {
    idle: RefCell<Vec<(String, TcpStream)>>,
    slots: Semaphore,
}

thread_local! {
    static POOLS: RefCell<HashMap<i32, Rc<Pool>>> = RefCell::new(HashMap::new());
}

fn pool(broker: i32) -> Rc<Pool> {
    POOLS.with_borrow_mut(|pools| {
        pools
            .entry(broker)
            .or_insert_with(|| {
                Rc::new(Pool {
                    idle: RefCell::new(Vec::new()),
                    slots: Semaphore::new(FORWARD_GROUP_CONNECTIONS_MAX as u64),
                })
            })
            .clone()
    })
}

/// Sends `frame` to `broker` on a pooled connection and reads its answer.
pub async fn exchange(
    shard: &Rc<Shard>,
    broker: i32,
    frame: Bytes,
    limit: Duration,
) -> Result<Bytes, String> {
    let address = super::broker_address(&shard.metadata.image(), broker)
        .ok_or_else(|| format!("broker {broker} is not registered or is fenced"))?;
    let pool = pool(broker);
    let _slot = pool
        .slots
        .acquire_permit(1)
        .await
        .map_err(|e| e.to_string())?;
    let idle = pool.idle.borrow_mut().pop();
    let mut stream = match idle {
        Some((at, stream)) if at == address => stream,
        _ => connect(&address).await?,
    };
    let answer = glommio::timer::timeout(limit, async {
        round_trip(&mut stream, &frame)
            .await
            .map_err(glommio::GlommioError::<()>::IoError)
    })
    .await
    .map_err(|e| e.to_string())?;
    pool.idle.borrow_mut().push((address, stream));
    Ok(answer)
}

pub async fn connect(address: &str) -> Result<TcpStream, String> {
    let target: std::net::SocketAddr = std::net::ToSocketAddrs::to_socket_addrs(address)
        .map_err(|e| e.to_string())?
        .next()
        .ok_or_else(|| format!("{address} resolves to nothing"))?;
    let stream =
        TcpStream::connect_timeout(target, Duration::from_millis(FORWARD_CONNECT_TIMEOUT_MS))
            .await
            .map_err(|e| e.to_string())?;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// Writes one request frame (with its length prefix) and reads one whole
/// response frame (returned with its length prefix).
pub async fn round_trip(stream: &mut TcpStream, frame: &[u8]) -> std::io::Result<Bytes> {
    let max = FORWARDED_ANSWER_BYTES_MAX;
    let mut request = Vec::with_capacity(frame.len() + 4);
    request.extend_from_slice(&(frame.len() as u32).to_be_bytes());
    request.extend_from_slice(frame);
    stream.write_all(&request).await?;
    let mut head = [0u8; 4];
    stream.read_exact(&mut head).await?;
    let len = u32::from_be_bytes(head) as usize;
    if len > max {
        return Err(std::io::Error::other(format!(
            "an answer of {len} bytes is above the {max}-byte limit"
        )));
    }
    let mut answer = vec![0u8; len + 4];
    answer[..4].copy_from_slice(&head);
    stream.read_exact(&mut answer[4..]).await?;
    Ok(Bytes::from(answer))
}
