//! The writer task: coalesced O_DIRECT writes of unwritten batches, and
//! waiting out a full disk.

use std::rc::Rc;
use std::time::{Duration, Instant};

use tracing::{info, warn};

use crate::cache::BatchCache;
use crate::config::{FlushPolicy, LogConfig};
use crate::context::Context;
use crate::error::{Result, StorageError};
use crate::file::{self, PAGE};
use crate::limits::{PREALLOCATE_STEP_MAX, SPACE_RETRY_MS};

use super::journal_link::{journal_keeps, journal_round, unwritten_is_small, write_end};
use super::shares::cache_bytes_max;
use super::sync::start_sync_round;
use super::*;

/// What the writer should do next: (submit a write, sync, wake-up delay
/// for an interval sync).
pub(super) fn writer_work(
    ctx: &Context,
    state: &State,
    config: &LogConfig,
    now: Instant,
) -> (bool, bool, Option<Duration>) {
    // Under the journal, a few unwritten bytes wait for more (the journal
    // makes them durable) unless something needs them in the file.
    let defer = journal_keeps(ctx, state, config) && unwritten_is_small(ctx, state, config);
    let submittable = !defer
        && state.submitted_position < write_end(ctx, state, config)
        && state.in_flight.len() < config.writes_in_flight_max
        // A write that rewrites the partial page of an earlier write waits
        // until that write completes, so the page is never written twice
        // concurrently.
        && (state.tail.is_empty() || state.in_flight.is_empty());
    let unsynced =
        state.durable_offset < state.written_offset || journal_round(ctx, state, config).is_some();
    let requested = state.sync_requested > state.durable_offset;
    let mut wait = None;
    // A journal round the log asked for makes its bytes durable; while
    // closing the writer syncs whatever the journal does.
    let journaling = (state.journal_wanted || state.journal_capture.is_some()) && !state.closing;
    let sync = !state.sync_running
        && !journaling
        && unsynced
        && (requested
            || match config.flush {
                FlushPolicy::Always => true,
                FlushPolicy::Never => false,
                FlushPolicy::Interval { ms, bytes } => {
                    let by_bytes = bytes.is_some_and(|b| state.unsynced_bytes >= b);
                    let by_time = match (ms, state.unsynced_since) {
                        (Some(ms), Some(since)) => {
                            let due = since + Duration::from_millis(ms);
                            if now >= due {
                                true
                            } else {
                                wait = Some(due - now);
                                false
                            }
                        }
                        _ => false,
                    };
                    by_bytes || by_time
                }
            });
    (submittable, sync, wait)
}

/// The writer task of one log: submits coalesced O_DIRECT writes (up to
/// `strom.writes.inflight` at once) and syncs per the flush policy. It exits
/// when the log closes (after draining) or is fenced.
pub(super) async fn writer_loop(inner: Rc<Inner>) {
    loop {
        let mut timeout = None;
        inner
            .changed
            .wait_until(|| {
                let state = inner.state.borrow();
                if state.failure.is_some() || state.closing {
                    return true;
                }
                let (submit, sync, wait) =
                    writer_work(&inner.ctx, &state, &inner.config.borrow(), Instant::now());
                timeout = wait;
                submit || sync || wait.is_some()
            })
            .await;
        let (submit, sync, wait, closing, failed, drained) = {
            let state = inner.state.borrow();
            let (submit, sync, wait) =
                writer_work(&inner.ctx, &state, &inner.config.borrow(), Instant::now());
            let drained = state.written_offset == state.next_offset
                && state.in_flight.is_empty()
                && !state.sync_running
                && state.sync_requested <= state.durable_offset;
            (
                submit,
                sync,
                wait,
                state.closing,
                state.failure.is_some(),
                drained,
            )
        };
        if failed {
            return;
        }
        if submit {
            match submit_write(&inner).await {
                Ok(()) => {}
                Err(e) if e.is_out_of_space() => {
                    if !wait_for_space(&inner, e.to_string()).await {
                        return;
                    }
                }
                Err(e) => {
                    fence_inner(&inner, e.to_string());
                    return;
                }
            }
            continue;
        }
        if sync {
            start_sync_round(&inner);
            continue;
        }
        if closing && drained {
            return;
        }
        if let (Some(wait), None) = (wait.or(timeout), closing.then_some(())) {
            // Only an interval deadline is pending: sleep until it, or until
            // anything else needs the writer.
            futures_lite::future::or(
                glommio::timer::sleep(wait),
                inner.changed.wait_until(|| {
                    let state = inner.state.borrow();
                    let (submit, sync, _) =
                        writer_work(&inner.ctx, &state, &inner.config.borrow(), Instant::now());
                    submit || sync || state.closing || state.failure.is_some()
                }),
            )
            .await;
        } else if closing {
            // Closing with writes or a sync still in flight: wait for them.
            inner
                .changed
                .wait_until(|| {
                    let state = inner.state.borrow();
                    (state.in_flight.is_empty() && !state.sync_running) || state.failure.is_some()
                })
                .await;
        }
    }
}

/// After a write failed for want of space (nothing of it was submitted):
/// refuses appends and unblocks their waiters, then waits until an append
/// saw room or [`SPACE_RETRY_MS`] passed. Returns false when the writer
/// should stop instead of retrying (the log is closing or fenced): what it
/// could not write was either never acknowledged or is in the journal.
pub(super) async fn wait_for_space(inner: &Rc<Inner>, reason: String) -> bool {
    {
        let mut state = inner.state.borrow_mut();
        if state.no_space.is_none() {
            warn!(dir = %inner.dir.display(), %reason, "log out of space: refusing appends until space returns");
        }
        state.no_space = Some(reason);
    }
    inner.changed.notify_all();
    if inner.state.borrow().closing {
        return false;
    }
    futures_lite::future::or(
        glommio::timer::sleep(Duration::from_millis(SPACE_RETRY_MS)),
        inner.changed.wait_until(|| {
            let state = inner.state.borrow();
            state.no_space.is_none() || state.closing || state.failure.is_some()
        }),
    )
    .await;
    let mut state = inner.state.borrow_mut();
    if state.closing || state.failure.is_some() {
        return false;
    }
    // Retried now: the write's next attempt sets it again if space is
    // still short.
    if state.no_space.take().is_some() {
        info!(dir = %inner.dir.display(), "log retrying a write that failed for space");
    }
    true
}

/// One write in flight, in submission (= file position) order.
pub(super) struct InFlightWrite {
    id: u64,
    /// Data bytes of the segment that are on disk once this write and all
    /// earlier ones complete.
    end_position: u64,
    done: bool,
}

/// Copies the next run of unwritten bytes (after the partial tail page, if
/// any) into an aligned buffer and submits it as one O_DIRECT write. While
/// more data follows, writes end on a page boundary so that concurrent
/// writes never share a page; only the last write of a burst carries a
/// partial page, which the next write rewrites after it completes (none
/// does while the journal keeps the log's last bytes: see [`write_end`]).
pub(super) async fn submit_write(inner: &Rc<Inner>) -> Result<()> {
    let write = prepare_write(inner);
    match allocate_for(inner, &write).await {
        Err(e) => {
            // Nothing of this write went out: the state goes back to before
            // it, so the next attempt writes the same bytes at the same
            // place (and the written frontier never passes what is on disk).
            let mut state = inner.state.borrow_mut();
            state.in_flight.retain(|w| w.id != write.id);
            state.submitted_position = write.undo.submitted_position;
            state.tail = write.undo.tail;
            drop(state);
            inner.changed.notify_all();
            return Err(e);
        }
        Ok(Some(size)) => {
            let mut state = inner.state.borrow_mut();
            let active = state.active_mut();
            active.allocated = active.allocated.max(size);
        }
        Ok(None) => {}
    }
    spawn_write(inner, write);
    Ok(())
}

/// A write copied out and noted in flight, not yet submitted.
struct PreparedWrite {
    file: Rc<glommio::io::DmaFile>,
    path: PathBuf,
    aligned_start: u64,
    buffer: glommio::io::DmaBuffer,
    end: u64,
    id: u64,
    /// The size the file must be allocated to first, if it must grow.
    grow_to: Option<u64>,
    undo: Undo,
}

/// What a write that cannot get its space puts back.
struct Undo {
    tail: Vec<u8>,
    submitted_position: u64,
    allocated: u64,
    write_end: u64,
}

/// Copies the next write's bytes (the partial tail page, then unwritten
/// bytes from the cache) into an aligned buffer and notes it in flight.
fn prepare_write(inner: &Inner) -> PreparedWrite {
    let config = inner.config.borrow();
    let (write_bytes_max, preallocate) = (config.write_bytes_max as u64, config.preallocate_bytes);
    let mut state = inner.state.borrow_mut();
    let start = state.submitted_position;
    let data_end = write_end(&inner.ctx, &state, &config);
    drop(config);
    let aligned_start = start - state.tail.len() as u64;
    assert_eq!(aligned_start % PAGE, 0, "writes start on a page");
    // A write that rewrites the partial tail page covers that page
    // alone: the page is written (not preallocated), so the write is a
    // pure overwrite, and the bytes after it fall in preallocated
    // extents only. A write mixing both kinds of extent needs the
    // inode lock exclusively, which io_uring cannot take without
    // blocking, so the kernel hands it to a worker thread (a context
    // switch per write); two writes of one kind each are issued inline.
    let write_max = if state.tail.is_empty() {
        write_bytes_max
    } else {
        PAGE
    };
    let mut end = data_end.min(aligned_start + write_max);
    if end < data_end {
        // More follows: stop on a page boundary and leave the rest for
        // the next write.
        end = file::align_down(end).max(start.min(end));
    }
    assert!(end > start, "submit_write called with nothing to write");
    let padded = file::align_up(end - aligned_start) as usize;
    let active = state.active();
    let mut buffer = active.file.alloc_dma_buffer(padded);
    let out = buffer.as_bytes_mut();
    let tail_len = state.tail.len();
    out[..tail_len].copy_from_slice(&state.tail);
    let position = copy_cached(
        &state.cache,
        state.written_offset,
        start,
        end,
        &mut out[tail_len..],
    );
    let at = tail_len + (position - start) as usize;
    assert_eq!(position, end, "the cache holds every unwritten byte");
    out[at..].fill(0);
    let new_tail = if end.is_multiple_of(PAGE) {
        Vec::new()
    } else {
        let tail_start = (file::align_down(end) - aligned_start) as usize;
        out[tail_start..at].to_vec()
    };
    let write_end = aligned_start + padded as u64;
    // The step grows with the segment (a quarter of what it holds, up
    // to PREALLOCATE_STEP_MAX), so a busy partition calls fallocate
    // rarely while a small one keeps at most one small step of slack.
    let step = file::align_up(
        (active.written_size / 4).clamp(preallocate, PREALLOCATE_STEP_MAX.max(preallocate)),
    );
    let grow_to = (write_end > active.allocated).then(|| write_end.div_ceil(step) * step);
    let (file, path) = (active.file.clone(), active.path.clone());
    let allocated = active.allocated;
    let undo = Undo {
        tail: std::mem::replace(&mut state.tail, new_tail),
        submitted_position: start,
        allocated,
        write_end,
    };
    state.submitted_position = end;
    let id = state.next_write_id;
    state.next_write_id += 1;
    state.in_flight.push_back(InFlightWrite {
        id,
        end_position: end,
        done: false,
    });
    PreparedWrite {
        file,
        path,
        aligned_start,
        buffer,
        end,
        id,
        grow_to,
        undo,
    }
}

/// Grows the file for `write` when it must: to the size it asks, or less
/// when space is short, down to what the write needs; refused (for want
/// of space) when even that would leave less than the reserve. Returns
/// the new allocated size.
async fn allocate_for(inner: &Inner, write: &PreparedWrite) -> Result<Option<u64>> {
    let (file, path, grow_to, undo) = (&write.file, &write.path, write.grow_to, &write.undo);
    // Sized to the space there is, down to what this write needs.
    let allocated = match grow_to {
        Some(want) => match file::preallocation_size(path, undo.allocated, undo.write_end, want) {
            Some(size) => file::preallocate(file, path, undo.allocated, size)
                .await
                .map(|()| Some(size)),
            None => Err(StorageError::io(
                "fallocate",
                path,
                undo.write_end,
                std::io::Error::new(
                    std::io::ErrorKind::StorageFull,
                    format!(
                        "the write would leave less than {} bytes free",
                        file::SPACE_RESERVE_BYTES
                    ),
                ),
            )),
        },
        None => Ok(None),
    };
    #[cfg(feature = "fault-injection")]
    let allocated = match inner.fail_next_space.replace(false) {
        true => Err(StorageError::io(
            "fallocate",
            path,
            undo.write_end,
            std::io::Error::from_raw_os_error(libc::ENOSPC),
        )),
        false => allocated,
    };
    #[cfg(not(feature = "fault-injection"))]
    let _ = inner;
    allocated
}

/// Submits `write`; its completion advances the written frontier, its
/// failure fences the log.
fn spawn_write(inner: &Rc<Inner>, write: PreparedWrite) {
    let PreparedWrite {
        file,
        path,
        aligned_start,
        buffer,
        end,
        id,
        ..
    } = write;
    let task_inner = inner.clone();
    glommio::spawn_local(async move {
        let padded = buffer.len();
        let result = file.write_at(buffer, aligned_start).await;
        let outcome = match result {
            Ok(written) if written == padded => Ok(()),
            Ok(written) => Err(StorageError::io(
                "write",
                &path,
                aligned_start + written as u64,
                std::io::Error::new(std::io::ErrorKind::WriteZero, "short O_DIRECT write"),
            )),
            Err(e) => Err(StorageError::io("write", &path, aligned_start, e)),
        };
        match outcome {
            Ok(()) => complete_write(&task_inner, id, padded as u64, end),
            Err(e) => fence_inner(&task_inner, e.to_string()),
        }
    })
    .detach();
}

/// Copies the active segment's bytes `[from, to)` out of the cached
/// batches holding them (searched from `first_offset`) into the start of
/// `out`; returns the position the copy reached (`to` unless the cache
/// lacks some).
pub(super) fn copy_cached(
    cache: &BatchCache,
    first_offset: u64,
    from: u64,
    to: u64,
    out: &mut [u8],
) -> u64 {
    let mut at = 0usize;
    let mut position = from;
    for cached in cache.iter_from(first_offset) {
        let batch_end = cached.position + cached.bytes.len() as u64;
        if batch_end <= position {
            continue;
        }
        if cached.position >= to {
            break;
        }
        assert!(
            cached.position <= position,
            "the bytes copied are contiguous in the cache"
        );
        let a = (position - cached.position) as usize;
        let b = (to.min(batch_end) - cached.position) as usize;
        cached.copy_range(&mut out[at..at + b - a], a, b);
        at += b - a;
        position = cached.position + b as u64;
    }
    position
}

/// Marks a write done and advances the written frontier over every write
/// completed in order.
pub(super) fn complete_write(inner: &Inner, id: u64, padded: u64, _end: u64) {
    let mut state = inner.state.borrow_mut();
    if let Some(slot) = state.in_flight.iter_mut().find(|w| w.id == id) {
        slot.done = true;
    }
    state.stats.writes += 1;
    state.stats.bytes_written += padded;
    let mut written_size = state.active().written_size;
    while state.in_flight.front().is_some_and(|w| w.done) {
        let write = state.in_flight.pop_front().expect("front");
        written_size = written_size.max(write.end_position);
    }
    state.active_mut().written_size = written_size;
    // Batches wholly on disk are written.
    let mut written_offset = state.written_offset;
    let mut released = 0usize;
    for cached in state.cache.iter_from(written_offset) {
        if cached.position + cached.bytes.len() as u64 > written_size {
            break;
        }
        written_offset = cached.last_offset + 1;
        released += cached.bytes.len();
    }
    if written_offset > state.written_offset {
        assert!(
            written_offset <= state.next_offset,
            "written offset {written_offset} past the log end {}",
            state.next_offset
        );
        state.written_offset = written_offset;
        state.pending_bytes -= released;
        state.unsynced_bytes += released as u64;
        state.unsynced_since.get_or_insert_with(Instant::now);
        let cache_max = cache_bytes_max(inner.ctx.open_logs(), &inner.config.borrow());
        state.cache.evict(cache_max, written_offset);
    }
    drop(state);
    inner.changed.notify_all();
}
