//! doorbell: a transport core for MPI whose waiting receivers sleep.
//!
//! Local messages travel through per-pair shared-memory rings (`ring`),
//! remote ones over TCP (`tcp`, `frame`); both end in one receive path, and
//! a receiver that found nothing sleeps on its window's bell (`bell`) until
//! a sender (`local_notify`) or the epoll thread (`flih`) rings it.
//! The C ABI is in `ffi`; `include/doorbell.h` is generated from it.

//! Under `--cfg loom` only the bell, the queue and the fast boxes are built
//! (with what they use), for the model checker: their atomics are loom's
//! (`sync`), and a queue lies in a heap buffer standing in for shared
//! memory (queue.rs `QueueRef::on_heap`).

#![deny(unsafe_op_in_unsafe_fn)]
// Under loom only part of the crate is built, and only its model tests use it.
#![cfg_attr(loom, allow(dead_code, unused_imports))]

#[cfg(not(loom))]
mod address;
#[cfg(not(loom))]
mod batch;
mod bell;
mod bulk;
#[cfg(not(loom))]
mod buf_pool;
mod config;
#[cfg(not(loom))]
mod congestion;
#[cfg(not(loom))]
mod control;
mod counters;
#[cfg(not(loom))]
mod endpoint;
mod error;
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
mod queue;
#[cfg(not(loom))]
mod preload;
mod record;
#[cfg(not(loom))]
mod remote_read;
mod shared_bytes;
#[cfg(not(loom))]
mod shm;
/// Under loom no file is made: a segment cannot be created (bulk.rs's
/// producer falls back to chunks), and queues lie on the heap.
#[cfg(loom)]
#[path = "shm_loom.rs"]
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
pub use error::{Corrupt, Error, Result};
