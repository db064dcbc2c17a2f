//! A counting global allocator: the largest single allocation (or reallocation) since
//! the last [`reset`], so the harness can hold each parser to a bound in the input's
//! length.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};

pub struct Counting;

static LARGEST: AtomicUsize = AtomicUsize::new(0);
static TOTAL: AtomicUsize = AtomicUsize::new(0);
static ON: AtomicBool = AtomicBool::new(false);

fn note(size: usize) {
    if ON.load(Relaxed) {
        LARGEST.fetch_max(size, Relaxed);
        TOTAL.fetch_add(size, Relaxed);
    }
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        note(l.size());
        System.alloc(l)
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        note(l.size());
        System.alloc_zeroed(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        note(new);
        System.realloc(p, l, new)
    }
}

/// Starts counting from zero.
pub fn reset() {
    LARGEST.store(0, Relaxed);
    TOTAL.store(0, Relaxed);
    ON.store(true, Relaxed);
}

/// Stops counting; returns (largest single allocation, sum of all allocations).
pub fn stop() -> (usize, usize) {
    ON.store(false, Relaxed);
    (LARGEST.load(Relaxed), TOTAL.load(Relaxed))
}
