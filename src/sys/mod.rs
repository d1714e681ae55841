//! The ground floor: what every other floor may use and which uses none of
//! them.  System calls (os.rs), the atomics shim that lets loom check the
//! shared-memory protocols (sync.rs), a lock that is only tried
//! (try_lock.rs), event counters, the buffer pool, the core's error type
//! and the fixed limits.

#[cfg(not(loom))]
pub(crate) mod buf_pool;
pub(crate) mod counters;
pub(crate) mod error;
pub(crate) mod limits;
#[cfg(not(loom))]
mod os;
pub(crate) mod sync;
/// `pub` only so that lib.rs can re-export it for its doc tests.
#[cfg(not(loom))]
pub mod try_lock;

#[cfg(not(loom))]
pub(crate) use os::{
    epoll_wait, futex_wait_shared, futex_wake_shared, membarrier_global, membarrier_global_supported, membarrier_register_global, now_ns, pidfd_open,
    poll, process_alive, random, random_nonzero_u64, recv, recv_append, recv_split, send_nosignal, tcp_unacked,
};

/// Under loom no file is named (segment_loom.rs), so nothing draws a
/// random name: asking is an error.
#[cfg(loom)]
pub(crate) fn random<const N: usize>() -> std::io::Result<[u8; N]> {
    Err(std::io::ErrorKind::Unsupported.into())
}
