//! Synchronisation helpers every module shares.
//!
//! The atomics: std normally, loom under `--cfg loom`, so the doorbell
//! protocol in `bell.rs` can be model-checked unchanged.

#[cfg(loom)]
pub use loom::sync::atomic::{fence, AtomicU32, Ordering};
#[cfg(not(loom))]
pub use std::sync::atomic::{fence, AtomicU32, Ordering};

/// Lock a mutex, and carry on if a holder panicked: every critical section
/// in the crate leaves its data whole, and a panic caught at the C ABI must
/// not turn every later call into a second panic.
#[cfg(not(loom))]
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
