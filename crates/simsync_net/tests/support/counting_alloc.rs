//! A global allocator for test binaries that records the largest single allocation (or
//! reallocation) made on an armed thread, and the bytes an armed thread left allocated; every
//! call is forwarded to the system allocator.
//! Included by path (`#[path = …] mod counting_alloc;`) into the one module of a test binary
//! that measures decoders (`simsync_net`'s `tests/alloc_bound.rs`, `simsync_deterministic`'s
//! `src/alloc_bound.rs`), so each binary has one instance.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicIsize, Ordering};

/// Bytes allocated and not freed, all threads together.
static ALL_LIVE: AtomicIsize = AtomicIsize::new(0);

/// The system allocator, recording the largest allocation of an armed thread.
struct Counting;

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
    static LIVE: Cell<isize> = const { Cell::new(0) };
}

/// Adds `delta` bytes to the armed thread's live count.
fn live(delta: isize) {
    ALL_LIVE.fetch_add(delta, Ordering::Relaxed);
    let _ = ARMED.try_with(|armed| {
        if armed.get() {
            LIVE.with(|live| live.set(live.get() + delta));
        }
    });
}

fn note(size: usize) {
    let _ = ARMED.try_with(|armed| {
        if armed.get() {
            LARGEST.with(|largest| largest.set(largest.get().max(size)));
        }
    });
}

// SAFETY: every call is forwarded unchanged to the system allocator; `note` only touches
// const-initialized thread locals without destructors, so it never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        live(layout.size() as isize);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        live(layout.size() as isize);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        live(new_size as isize - layout.size() as isize);
        // SAFETY: forwarded with the caller's pointer, layout and size.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        live(-(layout.size() as isize));
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `f` and returns its result with the largest single allocation it made, in bytes.
pub fn largest_allocation<R>(f: impl FnOnce() -> R) -> (R, usize) {
    LARGEST.with(|largest| largest.set(0));
    ARMED.with(|armed| armed.set(true));
    let result = f();
    ARMED.with(|armed| armed.set(false));
    (result, LARGEST.with(Cell::get))
}

/// Runs `f` and returns its result with the bytes it left allocated: what this thread
/// allocated minus what it freed while `f` ran (frees of older memory count too; allocations
/// of other threads do not, so run `f` on single-threaded schedules).
#[allow(dead_code)]
pub fn bytes_left<R>(f: impl FnOnce() -> R) -> (R, isize) {
    LIVE.with(|live| live.set(0));
    ARMED.with(|armed| armed.set(true));
    let result = f();
    ARMED.with(|armed| armed.set(false));
    (result, LIVE.with(Cell::get))
}

/// Bytes allocated and not freed by the whole process (every thread) since it started: exact
/// when one test runs alone in its process.
#[allow(dead_code)]
pub fn process_live_bytes() -> isize {
    ALL_LIVE.load(Ordering::Relaxed)
}
