//! Synchronisation helpers every module shares.
//!
//! The atomics: std normally, loom under `--cfg loom`, so the bell
//! (bell.rs), the queue (queue.rs) and the fast boxes (fbox.rs) are
//! model-checked unchanged.  Atomics of theirs that are only hints and
//! no part of a protocol (counters, statics) stay std's.

#[cfg(loom)]
pub use loom::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub use std::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Bytes of a shared-memory layout that nobody reads or writes (padding).
/// In an UnsafeCell, so that a reference to the struct around them claims
/// nothing about bytes another process may write.
#[repr(transparent)]
pub struct Pad<const N: usize>(std::cell::UnsafeCell<[u8; N]>);

// SAFETY: the bytes are never accessed, from any thread.
unsafe impl<const N: usize> Sync for Pad<N> {}

impl<const N: usize> Default for Pad<N> {
    fn default() -> Self {
        Pad(std::cell::UnsafeCell::new([0; N]))
    }
}

/// Lock a mutex, and carry on if a holder panicked: every critical section
/// in the crate leaves its data whole, and a panic caught at the C ABI must
/// not turn every later call into a second panic.
#[cfg(not(loom))]
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
