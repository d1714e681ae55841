//! doorbell: a transport core for MPI whose waiting receivers sleep.
//!
//! Local messages travel through shared-memory queues, remote ones over
//! TCP; both end in one receive path, and a receiver that found nothing
//! sleeps on its window's bell until a sender or the event thread rings
//! it.
//!
//! The crate is built in floors, each of which imports only from the
//! floors below it (tests/layering.rs checks this):
//!
//! ```text
//!   abi        the C ABI (include/doorbell.h is generated from it)
//!   endpoint   the endpoint: peers, the event thread (FLIH), waiting, progress
//!   shm | net  shared memory | the network: side by side, neither uses the other
//!   sys        system calls, atomics shim, counters, buffer pool, errors, limits
//! ```
//!
//! Under `--cfg loom` only the bell, the queue and the fast boxes are built
//! (with what they use), for the model checker: their atomics are loom's
//! (sys/sync.rs), and a queue lies in a heap buffer standing in for shared
//! memory (shm/queue.rs `QueueRef::on_heap`).

#![deny(unsafe_op_in_unsafe_fn)]
// Under loom only part of the crate is built, and only its model tests use it.
#![cfg_attr(loom, allow(dead_code, unused_imports))]

#[cfg(not(loom))]
mod abi;
#[cfg(not(loom))]
mod endpoint;
#[cfg(not(loom))]
mod net;
mod shm;
mod sys;

/// Decoders of untrusted bytes, for the fuzz targets in fuzz/ only.
#[cfg(all(not(loom), any(test, feature = "fuzzing")))]
#[doc(hidden)]
pub mod fuzzing;

// The public Rust API: an endpoint, its configuration, what a wait reports,
// errors, and the values it hands out (its address blob, its counters, a
// message's bytes).
// Everything else is crate-private; the C ABI (`abi`) is exported by symbol.
#[cfg(not(loom))]
pub use endpoint::address::{Address, ADDRESS_WINDOW};
#[cfg(not(loom))]
pub use endpoint::config::{Config, WaitMode};
#[cfg(not(loom))]
pub use endpoint::learner::Ended as SpinEnded;
#[cfg(not(loom))]
pub use endpoint::work_check::Work;
#[cfg(not(loom))]
pub use endpoint::{Endpoint, Woke};
#[cfg(not(loom))]
pub use net::remote_read::{ReadDone, ReadDst};
#[cfg(not(loom))]
pub use net::rma::{AtomicOp, Op as RmaOp, ACCESS_ATOMIC, ACCESS_READ, ACCESS_WRITE};
#[cfg(not(loom))]
pub use shm::shared_bytes::SharedBytes;
#[cfg(not(loom))]
pub use sys::counters::doorbell_counters;
#[cfg(not(loom))]
pub use sys::error::{Corrupt, Error, Result};
/// Windows per endpoint: window numbers are below this.
#[cfg(not(loom))]
pub use sys::limits::MAX_WINDOWS;
/// Public, hidden, only so that its doc tests (the guard's `compile_fail`
/// test) can reach it; not part of the API.
#[cfg(not(loom))]
#[doc(hidden)]
pub use sys::try_lock;
