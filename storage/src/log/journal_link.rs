//! How a log makes small appends durable through its core's journal.

use std::rc::Rc;
use std::time::Instant;

use crate::config::{FlushPolicy, LogConfig};
use crate::context::Context;
use crate::error::{IoContext, Result, StorageError};
use crate::file::{self, PAGE};
use crate::journal::{self, Journal, Record};

use super::shares::journal_keep_bytes;
use super::sync::{assert_durable_within_log, held_by_test, record_sync};
use super::writer::copy_cached;
use super::*;

/// Whether the log makes small appends durable through its core's journal
/// now: it is configured to, and the journal's next write has room.
pub(super) fn journal_on(ctx: &Context, config: &LogConfig) -> bool {
    config.flush == FlushPolicy::Always
        && config.journal_bytes > 0
        && ctx.shared().journals.has_room()
}

/// Whether the active segment's bytes not yet submitted for writing stay
/// below the journal threshold: the writer defers them, the journal takes
/// them.
pub(super) fn unwritten_is_small(ctx: &Context, state: &State, config: &LogConfig) -> bool {
    state.active().size - state.submitted_position < journal_keep_bytes(ctx.open_logs(), config)
}

/// Whether every byte of the active segment not yet durable fits in one
/// journal record, so a journal round can make them all durable.
pub(super) fn journal_can_take(ctx: &Context, state: &State, config: &LogConfig) -> bool {
    state.active().size.saturating_sub(state.durable_position)
        <= (2 * config.journal_bytes).min(ctx.shared().journals.record_bytes_max())
}

/// Whether the writer may leave unwritten bytes in memory for the journal
/// to make durable: nothing needs them in the file (closing, a write-out
/// request) and the next journal round can take all the log's bytes that
/// are not durable yet. Without the last condition a deferred tail could
/// wait forever: no journal round would take it and no sync round would
/// cover it.
pub(super) fn journal_keeps(ctx: &Context, state: &State, config: &LogConfig) -> bool {
    journal_on(ctx, config)
        && !state.closing
        && state.write_out_to <= state.written_offset
        && journal_can_take(ctx, state, config)
}

/// The position up to which the writer may write the active segment now.
/// While the journal keeps the log's last bytes, writes end on a page
/// boundary: the partial last page stays in memory (the journal makes it
/// durable) instead of going out as a write of its own now and being
/// rewritten, as a second write, when the page fills. With 1,000
/// partitions that second write was half of all segment writes.
pub(super) fn write_end(ctx: &Context, state: &State, config: &LogConfig) -> u64 {
    let size = state.active().size;
    if config.journal_bytes >= PAGE && journal_keeps(ctx, state, config) {
        file::align_down(size)
    } else {
        size
    }
}

/// The byte range of the active segment a sync round would hand to the
/// journal, if it can go that way: appends wait to be made durable, no
/// write is in flight (its bytes would be neither on disk nor in the
/// record), the bytes are few, and the cache still holds them all.
pub(super) fn journal_round(
    ctx: &Context,
    state: &State,
    config: &LogConfig,
) -> Option<(u64, u64)> {
    if !journal_on(ctx, config)
        || state.durable_offset >= state.next_offset
        || !state.in_flight.is_empty()
        || state.failure.is_some()
        || state.truncating
    {
        return None;
    }
    let (from, to) = (state.durable_position, state.active().size);
    let few = unwritten_is_small(ctx, state, config) && journal_can_take(ctx, state, config);
    if !few || from >= to {
        return None;
    }
    let first = state
        .cache
        .iter_from(state.durable_offset)
        .find(|c| c.position + c.bytes.len() as u64 > from)?;
    (first.position <= from).then_some((from, to))
}

/// Asks the writer to write out everything up to `offset`, journal or not.
pub(super) fn request_write_out(inner: &Inner, offset: u64) {
    let mut state = inner.state.borrow_mut();
    if offset > state.write_out_to {
        state.write_out_to = offset;
        drop(state);
        inner.changed.notify_all();
    }
}

impl journal::Participant for Inner {
    fn capture(self: Rc<Self>, journal: &Journal) -> bool {
        let range = {
            let mut state = self.state.borrow_mut();
            state.journal_wanted = false;
            let range = journal_round(&self.ctx, &state, &self.config.borrow());
            range.filter(|_| !state.closing && state.journal_capture.is_none())
        };
        let captured = match range {
            Some((from, to)) => match enqueue_journal_record(&self, journal, from, to) {
                Ok((_, capture)) => {
                    self.state.borrow_mut().journal_capture = Some(capture);
                    true
                }
                Err(_) => false,
            },
            None => false,
        };
        if !captured {
            // A full round: the log writes its segment file, as a log does
            // whose record would find the next write full (see
            // `Registry::has_room`). Otherwise the writer syncs it its own way.
            if !self.ctx.shared().journals.has_room() {
                let next = self.state.borrow().next_offset;
                request_write_out(&self, next);
            }
            self.changed.notify_all();
        }
        captured
    }

    fn round_ended(&self, outcome: std::result::Result<(), &str>) {
        let capture = {
            let mut state = self.state.borrow_mut();
            state.journal_wanted = false;
            state.journal_capture.take()
        };
        match outcome {
            Ok(()) => {
                if let Some(capture) = capture {
                    apply_journaled(self, capture);
                }
                self.changed.notify_all();
            }
            Err(message) => fence_inner(self, format!("journal write failed: {message}")),
        }
    }

    fn write_out(self: Rc<Self>, offset: u64) -> futures_lite::future::BoxedLocal<()> {
        // Asked now, not on first poll: a retiring chunk asks all its logs
        // before it waits for any.
        request_write_out(&self, offset);
        Box::pin(async move {
            let truncations = self.truncations.get();
            self.changed
                .wait_until(|| {
                    let s = self.state.borrow();
                    s.written_offset >= offset.min(s.next_offset)
                        || s.failure.is_some()
                        || s.closed
                        || self.truncations.get() != truncations
                })
                .await;
        })
    }
}

/// The context's journal for this log's data directory.
pub(super) async fn journal_of(inner: &Inner) -> Result<Rc<Journal>> {
    if let Some(journal) = inner.journal.get() {
        return Ok(journal.clone());
    }
    let data_dir = inner.dir.parent().unwrap_or(&inner.dir);
    let journal = inner.ctx.shared().journals.for_data_dir(data_dir).await?;
    Ok(inner.journal.get_or_init(|| journal).clone())
}

/// Voids this log's earlier journal records (before a truncation or a
/// delete) once the tombstone is durable.
pub(super) async fn journal_tombstone(inner: &Inner) -> Result<()> {
    let journal = journal_of(inner).await?;
    let Some(dir) = journal.relative(&inner.dir) else {
        return Ok(());
    };
    let write =
        journal
            .enqueue(Record::tombstone(dir), None)
            .ctx("journal write", &inner.dir, 0)?;
    journal
        .durable(write)
        .await
        .ctx("journal write", &inner.dir, 0)
}

/// Asks the journal's next round to take this log's bytes not yet durable,
/// when a round can: right after an append, so that a round starting while
/// the produce request waits takes them.
pub(super) fn want_journal(inner: &Rc<Inner>) {
    let journal = match inner.journal.get() {
        Some(journal) => journal,
        None => {
            // The context's first sync round through a journal creates it.
            let data_dir = inner.dir.parent().unwrap_or(&inner.dir);
            let Some(journal) = inner.ctx.shared().journals.existing(data_dir) else {
                return;
            };
            inner.journal.get_or_init(|| journal)
        }
    };
    {
        let mut state = inner.state.borrow_mut();
        if state.journal_wanted
            || journal_round(&inner.ctx, &state, &inner.config.borrow()).is_none()
        {
            return;
        }
        // Rounds a test holds or fails are the log's own sync rounds.
        #[cfg(feature = "fault-injection")]
        if inner.fail_next_sync.get() || inner.sync_hold.borrow().holding {
            return;
        }
        state.journal_wanted = true;
    }
    let participant: std::rc::Weak<dyn journal::Participant> = Rc::downgrade(inner) as _;
    if journal.want(participant).is_err() {
        // The journal failed; the log's own sync round reports it.
        inner.state.borrow_mut().journal_wanted = false;
    }
}

/// What a journal record of a log's bytes makes durable once its round
/// ends.
pub(super) struct JournalCapture {
    /// Every offset below this was appended when the bytes were taken.
    target: u64,
    /// The active segment's bytes below this position were taken.
    to: u64,
    /// The active segment then, and the truncations made before.
    base: u64,
    truncations: u64,
    started: Instant,
}

/// Puts the active segment's bytes `from..to`, straight from the cache,
/// into the journal's next write as one record; returns the write's round.
pub(super) fn enqueue_journal_record(
    inner: &Rc<Inner>,
    journal: &Journal,
    from: u64,
    to: u64,
) -> Result<(u64, JournalCapture)> {
    let started = Instant::now();
    let state = inner.state.borrow();
    let active = state.active();
    let Some(relative) = journal.relative(&active.path) else {
        return Err(StorageError::io(
            "journal",
            &active.path,
            from,
            std::io::Error::other("segment file outside the data directory"),
        ));
    };
    let participant: std::rc::Weak<dyn journal::Participant> = Rc::downgrade(inner) as _;
    let fill = |out: &mut [u8]| {
        let position = copy_cached(&state.cache, state.durable_offset, from, to, out);
        assert_eq!(
            position, to,
            "the cache holds every byte a journal round needs"
        );
    };
    let record = Record::Data {
        path: relative,
        position: from,
        len: (to - from) as usize,
        fill,
    };
    let write = journal
        .enqueue(record, Some((participant, state.next_offset)))
        .ctx("journal write", &active.path, from)?;
    let capture = JournalCapture {
        target: state.next_offset,
        to,
        base: active.base_offset,
        truncations: inner.truncations.get(),
        started,
    };
    Ok((write, capture))
}

/// Makes what a journal round took durable in the log's state, unless a
/// truncation or a roll has come between.
pub(super) fn apply_journaled(inner: &Inner, capture: JournalCapture) {
    let mut state = inner.state.borrow_mut();
    if inner.truncations.get() == capture.truncations && state.active().base_offset == capture.base
    {
        state.durable_offset = state.durable_offset.max(capture.target);
        state.durable_position = state.durable_position.max(capture.to);
        assert_durable_within_log(&state);
    }
    record_sync(&mut state, capture.started.elapsed().as_micros() as u64);
    if state.durable_offset >= state.written_offset {
        state.unsynced_since = None;
    }
}

/// A sync round through the journal: the bytes of the active segment not
/// yet durable go into one record of the core's next journal write.
pub(super) async fn journal_sync_round(
    inner: &Rc<Inner>,
    journal: &Rc<Journal>,
    from: u64,
    to: u64,
) -> Result<()> {
    let path = inner.state.borrow().active().path.clone();
    let (write, capture) = enqueue_journal_record(inner, journal, from, to)?;
    journal
        .durable(write)
        .await
        .ctx("journal write", &path, from)?;
    held_by_test(inner).await;
    apply_journaled(inner, capture);
    Ok(())
}
