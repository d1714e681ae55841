//! One place that chooses the atomics: std normally, loom under `--cfg loom`,
//! so the doorbell protocol in `bell.rs` can be model-checked unchanged.

#[cfg(loom)]
pub use loom::sync::atomic::{fence, AtomicU32, Ordering};
#[cfg(not(loom))]
pub use std::sync::atomic::{fence, AtomicU32, Ordering};
