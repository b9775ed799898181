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
//! mimalloc itself is told to keep freed pages mapped
//! ([`keep_small_blocks_mapped`]): by default it gives pages idle for a
//! second back to the kernel, and the 4–64 KiB O_DIRECT buffers of small
//! segment writes, allocated and freed at tens of thousands a second with
//! 1,000 partitions, then faulted in (and zeroed) whole huge pages again:
//! 6% of the broker's samples.
//!
//! `dealloc` and `realloc` are told the layout the block was allocated
//! with, so the size alone says which allocator owns a block.

use std::alloc::{GlobalAlloc, Layout, System};

use mimalloc::MiMalloc;

/// Blocks of this size or more come from the system allocator.
pub const LARGE_BYTES: usize = 64 << 10;

pub struct Split;

/// Tells mimalloc never to return freed pages to the kernel, unless the
/// environment chose (`MIMALLOC_PURGE_DELAY`). Its footprint is then the
/// high-water mark of small blocks in use, which the broker bounds (batch
/// cache, in-flight writes, connections).
pub fn keep_small_blocks_mapped() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets an allocator option; safe at any time.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
    }
}

/// `mi_option_purge_delay` (milliseconds; -1: never purge), which
/// `libmimalloc-sys` does not name.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

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
