//! The broker's global allocator: the system allocator, except that very
//! large allocations are reserved with `mmap(MAP_NORESERVE)`.
//!
//! Why: the `kafka-protocol` decoders reserve `Vec` capacity from a
//! request's untrusted array count before reading the elements. A 20-byte
//! request claiming 2^31 entries asks for ~150 GB; the system allocator
//! refuses and the process aborts. Reserved without backing, that address
//! space costs nothing: decoding fails after the frame's few real bytes,
//! and only the pages the elements touched were ever used. Frames are
//! bounded before decoding (`limits`), so touched memory stays bounded.
//! Under `vm.overcommit_memory=2` the kernel refuses such reservations and
//! the abort comes back; a schema-aware count check before decoding is the
//! lasting fix (see docs/broker.md).

use std::alloc::{GlobalAlloc, Layout, System};

/// Allocations from this size on are reserved with mmap.
pub const RESERVE_BYTES_MIN: usize = 1 << 30;
const PAGE_BYTES: usize = 4096;

pub struct BrokerAllocator;

fn reserved(layout: &Layout) -> bool {
    layout.size() >= RESERVE_BYTES_MIN && layout.align() <= PAGE_BYTES
}

// SAFETY: every pointer is released by the allocator that produced it,
// chosen by the same predicate on the layout, which callers must pass back
// unchanged; mmap returns page-aligned, zeroed memory.
unsafe impl GlobalAlloc for BrokerAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !reserved(&layout) {
            return unsafe { System.alloc(layout) };
        }
        let pointer = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                layout.size(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if pointer == libc::MAP_FAILED {
            std::ptr::null_mut()
        } else {
            pointer.cast()
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if reserved(&layout) {
            // Fresh anonymous mappings are zeroed.
            unsafe { self.alloc(layout) }
        } else {
            unsafe { System.alloc_zeroed(layout) }
        }
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        if reserved(&layout) {
            unsafe { libc::munmap(pointer.cast(), layout.size()) };
        } else {
            unsafe { System.dealloc(pointer, layout) }
        }
    }

    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        match (reserved(&layout), reserved(&new_layout)) {
            (false, false) => return unsafe { System.realloc(pointer, layout, new_size) },
            (true, true) => {
                // Move the mapping instead of copying (and so touching) it.
                let moved = unsafe {
                    libc::mremap(
                        pointer.cast(),
                        layout.size(),
                        new_size,
                        libc::MREMAP_MAYMOVE,
                    )
                };
                return if moved == libc::MAP_FAILED {
                    std::ptr::null_mut()
                } else {
                    moved.cast()
                };
            }
            _ => {}
        }
        let new_pointer = unsafe { self.alloc(new_layout) };
        if !new_pointer.is_null() {
            unsafe {
                std::ptr::copy_nonoverlapping(pointer, new_pointer, layout.size().min(new_size));
                self.dealloc(pointer, layout);
            }
        }
        new_pointer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_reservations_succeed_and_release() {
        let layout = Layout::from_size_align(150 << 30, 8).unwrap();
        let allocator = BrokerAllocator;
        unsafe {
            let pointer = allocator.alloc(layout);
            assert!(!pointer.is_null());
            pointer.write(7);
            let grown = allocator.realloc(pointer, layout, 151 << 30);
            assert_eq!(grown.read(), 7);
            allocator.dealloc(grown, Layout::from_size_align(151 << 30, 8).unwrap());
            let small = Layout::from_size_align(64, 8).unwrap();
            let pointer = allocator.alloc(small);
            let pointer = allocator.realloc(pointer, small, RESERVE_BYTES_MIN);
            assert!(!pointer.is_null());
            allocator.dealloc(
                pointer,
                Layout::from_size_align(RESERVE_BYTES_MIN, 8).unwrap(),
            );
        }
    }
}
