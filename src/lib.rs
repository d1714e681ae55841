//! doorbell: a transport core for MPI whose waiting receivers sleep.
//!
//! Local messages travel through per-pair shared-memory rings (`ring`),
//! remote ones over TCP (`tcp`, `frame`); both end in one receive path, and
//! a receiver that found nothing sleeps on its window's bell (`bell`) until
//! a sender (`local_notify`) or the epoll thread (`flih`) rings it.
//! The C ABI is in `ffi`; `include/doorbell.h` is generated from it.

pub mod address;
pub mod bell;
pub mod config;
pub mod control;
pub mod counters;
pub mod endpoint;
pub mod error;
pub mod ffi;
mod flih;
mod frame;
mod preload;
pub mod ring;
pub mod shm;
mod sync;
mod sys;
mod tcp;

pub use config::{Config, WaitMode};
pub use endpoint::{Endpoint, Woke};
pub use error::{Error, Result};
