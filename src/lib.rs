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
//! Under `--cfg loom` only the bell protocol and the atomics shim are
//! built, for the model checker.

#![deny(unsafe_op_in_unsafe_fn)]

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
// errors, and the two values it hands out (its address blob, its counters).
// Everything else is crate-private; the C ABI (`abi`) is exported by symbol.
#[cfg(not(loom))]
pub use endpoint::address::Address;
#[cfg(not(loom))]
pub use endpoint::config::{Config, WaitMode};
#[cfg(not(loom))]
pub use endpoint::work_check::Work;
#[cfg(not(loom))]
pub use endpoint::{Endpoint, Woke};
#[cfg(not(loom))]
pub use net::remote_read::{ReadDone, ReadDst};
#[cfg(not(loom))]
pub use sys::counters::doorbell_counters;
#[cfg(not(loom))]
pub use sys::error::{Error, Result};
