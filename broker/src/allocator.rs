//! The broker's global allocator: small allocations from mimalloc, large
//! ones from the system allocator.
//!
//! Per request and per batch the broker allocates and frees many small
//! objects (request structs, tasks, wakers, cache entries) on one thread per
//! core; glibc's free-list coalescing (`unlink_chunk`, `malloc_consolidate`)
//! was 8–11% of the broker's samples with 1,000 partitions, and mimalloc
//! serves the same work in a quarter less user CPU. Large buffers (request
//! frames, read windows, aligned I/O buffers) stay with glibc, whose heap
//! keeps them mapped (see `runtime::keep_large_buffers_in_the_heap`):
//! mimalloc gives freed large blocks back to the kernel, and every new one
//! was faulted in and zeroed again (a quarter of the broker's samples in a
//! cold consume).
//!
//! [`configure`] sets two things at start:
//! - mimalloc keeps freed pages mapped: by default it gives pages idle for
//!   a second back to the kernel, and the 4–64 KiB O_DIRECT buffers of
//!   small segment writes, allocated and freed at tens of thousands a
//!   second with 1,000 partitions, then faulted in (and zeroed) whole huge
//!   pages again: 6% of the broker's samples.
//! - No transparent huge pages for the process. mimalloc asks for them on
//!   its arenas (`MADV_HUGEPAGE`), so each first touch of a 2 MiB region
//!   faulted in and cleared all of it inside whatever allocation asked,
//!   on the core's only thread: runs of 10–26 ms without a switch, 85% of
//!   them clearing pages, while mimalloc's footprint grew to its peak. In
//!   (d) (50 MB/s end to end) publish p99 fell from 37 to 9–14 ms and
//!   end-to-end p99 from 30 to 4–7 ms without them (docs/benchmarks.md).
//!
//! `dealloc` and `realloc` are told the layout the block was allocated
//! with, so the size alone says which allocator owns a block.

use std::alloc::{GlobalAlloc, Layout, System};

use mimalloc::MiMalloc;

/// Blocks of this size or more come from the system allocator.
pub const LARGE_BYTES: usize = 64 << 10;

pub struct Split;

/// Tells mimalloc never to return freed pages to the kernel, and turns
/// transparent huge pages off for the process (see the module's
/// documentation), each unless the environment chose otherwise
/// (`MIMALLOC_PURGE_DELAY`, `MIMALLOC_ALLOW_THP`). mimalloc's footprint is
/// then the high-water mark of small blocks in use, which the broker
/// bounds (batch cache, in-flight writes, connections). Returns whether
/// huge pages are off.
pub fn configure() -> bool {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets an allocator option; safe at any time.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
    }
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_some() {
        // mimalloc read it at its start and acted on it.
        return thp_disabled();
    }
    // SAFETY: sets an allocator option; safe at any time. Arenas reserved
    // from now on are not advised as huge.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_ALLOW_THP, 0) };
    // Arenas reserved before (mimalloc starts with the process) were; the
    // process flag is checked at every fault, so it covers them too.
    // SAFETY: prctl with integer arguments changes only this process's flag.
    unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    thp_disabled()
}

/// Whether transparent huge pages are off for this process.
pub fn thp_disabled() -> bool {
    // SAFETY: prctl with integer arguments only reads this process's flag.
    unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) == 1 }
}

/// mimalloc options `libmimalloc-sys` does not name: `purge_delay`
/// (milliseconds; -1: never purge) and `allow_thp` (0: never advise huge
/// pages), by their place in `mi_option_t` (mimalloc v3; a test reads
/// their defaults back, so a reordered enum fails it).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
const MI_OPTION_ALLOW_THP: libmimalloc_sys::mi_option_t = 43;

fn is_large(size: usize) -> bool {
    size >= LARGE_BYTES
}

// SAFETY: every block is freed (or resized) by the allocator that made it,
// chosen by the size of the layout it was made with, which Rust passes back
// unchanged to `dealloc` and `realloc`.
unsafe impl GlobalAlloc for Split {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if is_large(layout.size()) {
            unsafe { System.alloc(layout) }
        } else {
            unsafe { MiMalloc.alloc(layout) }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if is_large(layout.size()) {
            unsafe { System.alloc_zeroed(layout) }
        } else {
            unsafe { MiMalloc.alloc_zeroed(layout) }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if is_large(layout.size()) {
            unsafe { System.dealloc(ptr, layout) }
        } else {
            unsafe { MiMalloc.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        match (is_large(layout.size()), is_large(new_size)) {
            (true, true) => unsafe { System.realloc(ptr, layout, new_size) },
            (false, false) => unsafe { MiMalloc.realloc(ptr, layout, new_size) },
            _ => {
                // Crossing the threshold moves the block to the other
                // allocator.
                // SAFETY: the caller guarantees `new_size`, rounded to the
                // alignment, does not overflow `isize`.
                let new_layout =
                    unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
                let new_ptr = unsafe { self.alloc(new_layout) };
                if !new_ptr.is_null() {
                    let keep = layout.size().min(new_size);
                    // SAFETY: both blocks are valid for `keep` bytes and
                    // are distinct allocations.
                    unsafe {
                        std::ptr::copy_nonoverlapping(ptr, new_ptr, keep);
                        self.dealloc(ptr, layout);
                    }
                }
                new_ptr
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The option numbers name the options meant: their defaults (purge
    /// delay 1000 ms, huge pages allowed) differ from their neighbours'
    /// (1 and 0 around the first, 32 and 0 around the second).
    #[test]
    fn the_option_numbers_are_mimallocs_purge_delay_and_allow_thp() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some()
            || std::env::var_os("MIMALLOC_ALLOW_THP").is_some()
        {
            return;
        }
        // SAFETY: reads allocator options.
        let (purge_delay, allow_thp) = unsafe {
            (
                libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY),
                libmimalloc_sys::mi_option_get(MI_OPTION_ALLOW_THP),
            )
        };
        assert_eq!(purge_delay, 1000);
        assert_eq!(allow_thp, 1);
    }

    /// Blocks grown and shrunk across the threshold keep their bytes and
    /// are freed by the allocator that owns them (a mismatch would crash).
    #[test]
    fn blocks_crossing_the_threshold_keep_their_bytes() {
        let split = Split;
        for align in [1usize, 8, 4096] {
            let small = Layout::from_size_align(1000, align).unwrap();
            unsafe {
                let ptr = split.alloc(small);
                assert!(!ptr.is_null());
                for i in 0..1000 {
                    *ptr.add(i) = (i % 251) as u8;
                }
                let grown = split.realloc(ptr, small, LARGE_BYTES * 3);
                assert!(!grown.is_null());
                for i in 0..1000 {
                    assert_eq!(*grown.add(i), (i % 251) as u8);
                }
                let large = Layout::from_size_align(LARGE_BYTES * 3, align).unwrap();
                let shrunk = split.realloc(grown, large, 500);
                assert!(!shrunk.is_null());
                for i in 0..500 {
                    assert_eq!(*shrunk.add(i), (i % 251) as u8);
                }
                split.dealloc(shrunk, Layout::from_size_align(500, align).unwrap());

                let zeroed = split.alloc_zeroed(large);
                assert!((0..large.size()).all(|i| *zeroed.add(i) == 0));
                split.dealloc(zeroed, large);
            }
        }
        let mut v: Vec<u8> = Vec::new();
        for i in 0..(LARGE_BYTES * 2) {
            v.push(i as u8);
        }
        v.truncate(10);
        v.shrink_to_fit();
        assert_eq!(v, (0..10u8).collect::<Vec<_>>());
    }
}
