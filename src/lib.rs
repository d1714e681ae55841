//! doorbell: a transport core for MPI whose waiting receivers sleep.
//!
//! Local messages travel through per-pair shared-memory rings (`ring`),
//! remote ones over TCP (`tcp`, `frame`); both end in one receive path, and
//! a receiver that found nothing sleeps on its window's bell (`bell`) until
//! a sender (`local_notify`) or the epoll thread (`flih`) rings it.
//! The C ABI is in `ffi`; `include/doorbell.h` is generated from it.

//! Under `--cfg loom` only the bell protocol is built, for the model checker.

#![deny(unsafe_op_in_unsafe_fn)]

#[cfg(not(loom))]
mod address;
#[cfg(not(loom))]
mod batch;
mod bell;
#[cfg(not(loom))]
mod bulk;
#[cfg(not(loom))]
mod buf_pool;
#[cfg(not(loom))]
mod config;
#[cfg(not(loom))]
mod congestion;
#[cfg(not(loom))]
mod control;
#[cfg(not(loom))]
mod counters;
#[cfg(not(loom))]
mod endpoint;
#[cfg(not(loom))]
mod error;
#[cfg(not(loom))]
mod fbox;
#[cfg(not(loom))]
mod ffi;
#[cfg(not(loom))]
mod flih;
#[cfg(not(loom))]
mod frame;
/// Decoders of untrusted bytes, for the fuzz targets in fuzz/ only.
#[cfg(all(not(loom), any(test, feature = "fuzzing")))]
#[doc(hidden)]
pub mod fuzzing;
#[cfg(not(loom))]
mod handshake;
#[cfg(not(loom))]
mod path;
#[cfg(not(loom))]
mod peers;
#[cfg(not(loom))]
mod pending;
#[cfg(not(loom))]
mod queue;
#[cfg(not(loom))]
mod preload;
#[cfg(not(loom))]
mod record;
#[cfg(not(loom))]
mod remote_read;
#[cfg(not(loom))]
mod shared_bytes;
#[cfg(not(loom))]
mod shm;
mod sync;
#[cfg(not(loom))]
mod sys;
#[cfg(not(loom))]
mod task_table;
#[cfg(not(loom))]
mod tcp;
/// Public, hidden, only so that its doc tests (the guard's `compile_fail`
/// test) can reach it; not part of the API.
#[cfg(not(loom))]
#[doc(hidden)]
pub mod try_lock;
#[cfg(not(loom))]
mod wait;
#[cfg(not(loom))]
mod work_check;
// The public Rust API: an endpoint, its configuration, what a wait reports,
// errors, and the two values it hands out (its address blob, its counters).
// Everything else is crate-private; the C ABI (`ffi`) is exported by symbol.
#[cfg(not(loom))]
pub use address::Address;
#[cfg(not(loom))]
pub use config::{Config, WaitMode};
#[cfg(not(loom))]
pub use counters::doorbell_counters;
#[cfg(not(loom))]
pub use endpoint::{Endpoint, Woke};
#[cfg(not(loom))]
pub use shared_bytes::SharedBytes;
#[cfg(not(loom))]
pub use work_check::Work;
#[cfg(not(loom))]
pub use remote_read::{ReadDone, ReadDst};
#[cfg(not(loom))]
pub use error::{Error, Result};
