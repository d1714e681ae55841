//! The C ABI.  Every entry point catches panics and returns a status code
//! (DOORBELL_OK, a count, or a negative DOORBELL_ERR_*); no panic crosses it.
//!
//! The entry points that take pointers are `unsafe extern "C"`: their
//! contract, the header's, is that every pointer is NULL (where a function
//! rejects it with INVALID_ARGUMENT) or valid for what it names (an endpoint
//! from doorbell_endpoint_create not yet destroyed, a writable out-value,
//! `len` readable bytes, a NUL-terminated string).  Rust callers use
//! `Endpoint`; this module is not part of the Rust API.
#![allow(non_camel_case_types)]

use crate::endpoint::address::{ADDRESS_BYTES, ADDRESS_MAX};
use crate::endpoint::config::{Config, WaitMode};
use crate::endpoint::{Endpoint, Woke};
use crate::endpoint::learner::{Ended, Path};
use crate::net::remote_read::{ReadDone, ReadDst};
use crate::net::rma::{AtomicOp, Op};
use crate::shm::shared_bytes::SharedBytes;
pub use crate::sys::counters::doorbell_counters;
use crate::sys::error::{Corrupt, Error, ALL};
use crate::sys::limits::{MAX_PEERS, MAX_TASKS, MAX_WINDOWS};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

pub const DOORBELL_OK: c_int = 0;
/// NULL pointer or bad configuration value.
pub const DOORBELL_ERR_INVALID_ARGUMENT: c_int = -1;
/// The window is not open at the receiver.
pub const DOORBELL_ERR_UNKNOWN_WINDOW: c_int = -2;
/// The task was never connected.
pub const DOORBELL_ERR_UNKNOWN_TASK: c_int = -3;
/// Length larger than max_message (including (size_t)-1).
pub const DOORBELL_ERR_BAD_LENGTH: c_int = -4;
/// Malformed address blob, or another address for a task already connected.
pub const DOORBELL_ERR_BAD_ADDRESS: c_int = -5;
/// Send backlog full: progress, then retry.
pub const DOORBELL_ERR_WOULD_BLOCK: c_int = -6;
/// doorbell_flush timed out.
pub const DOORBELL_ERR_TIMED_OUT: c_int = -7;
/// A peer task exited, was killed or hung up.
pub const DOORBELL_ERR_PEER_LOST: c_int = -8;
/// The shared-memory directory is full.
pub const DOORBELL_ERR_NO_SHM_SPACE: c_int = -9;
/// Another shared-memory failure.
pub const DOORBELL_ERR_SHM: c_int = -10;
/// Socket error, connection refused, ...
pub const DOORBELL_ERR_NETWORK: c_int = -11;
/// No interface matches if_include / if_exclude.
pub const DOORBELL_ERR_NO_INTERFACE: c_int = -12;
/// The address buffer is too small.
pub const DOORBELL_ERR_BUFFER_TOO_SMALL: c_int = -13;
/// A bug (a caught panic); the endpoint stays usable.
pub const DOORBELL_ERR_INTERNAL: c_int = -14;
/// A file in the shared-memory directory where doorbell needs one was
/// refused: a symbolic link, not a regular file, owned by another user, or
/// with group/other permission bits.  stderr names the file and the reason.
pub const DOORBELL_ERR_SHM_REFUSED: c_int = -15;
/// Kept for compatibility; no call returns it now.  (Two live endpoints
/// with the same job key and task once collided on one file; every
/// endpoint now names its files after a random token of its own.)
pub const DOORBELL_ERR_IN_USE: c_int = -16;
/// The endpoint's event thread (the FLIH: TCP wake-ups, lost-peer
/// detection) failed; stderr says why.  Every sleeper is woken with it, and
/// every later doorbell_progress and doorbell_wait returns it: messages
/// might no longer arrive and a lost peer go unreported.  Destroy the
/// endpoint.
pub const DOORBELL_ERR_FLIH_FAILED: c_int = -17;
/// Shared memory broke its format: the header of a window queue, the one
/// of the task in wake->task (found sending to it), or this task's own
/// (its tail moved ahead: every local task that sent to that window is
/// reported, one per call).  The task is dropped, as if lost (its sends
/// fail with PEER_LOST); stderr says what was wrong.
/// Reported once per window, by progress or wait (and by the send that
/// found it).
pub const DOORBELL_ERR_CORRUPT_QUEUE_HEADER: c_int = -18;
/// Shared memory broke its format: a fast box between this task and the
/// task in wake->task (found by its sender or its receiver); that task is
/// dropped as for CORRUPT_QUEUE_HEADER.
pub const DOORBELL_ERR_CORRUPT_FAST_BOX: c_int = -19;
/// Shared memory broke its format: a record in this task's window queue.
/// Every local task that sent to that window is dropped and reported (one
/// per call, wake->task); the window takes no more local messages.
pub const DOORBELL_ERR_CORRUPT_RECORD: c_int = -20;
/// An endpoint of another job could not be given a peer id: this
/// endpoint, or that one, met DOORBELL_MAX_PEERS - DOORBELL_MAX_TASKS
/// (1024) endpoints of other jobs already over its life.
pub const DOORBELL_ERR_TOO_MANY_PEERS: c_int = -21;

/// The endpoint's mode (config, or env DOORBELL_WAIT_MODE).
pub const DOORBELL_WAIT_DEFAULT: u32 = 0;
/// Spin, never sleep.
pub const DOORBELL_WAIT_POLL: u32 = 1;
/// Arm, re-check, sleep on the window's doorbell.
pub const DOORBELL_WAIT_BLOCK: u32 = 2;
/// Spin for up to spin_us, then block.  The window's spin/sleep learner
/// shortens the spin on a path where spinning has not paid lately (see
/// doorbell_spin_begin).
pub const DOORBELL_WAIT_ADAPTIVE: u32 = 3;

/// Messages were delivered.
pub const DOORBELL_WOKE_MESSAGE: u32 = 1;
/// A doorbell_local_notify (or freed queue space for this task's queued
/// sends) since the last report, and no message.  Sticky: a notify that
/// finds the window awake is reported by its next progress or wait.
pub const DOORBELL_WOKE_NOTIFY: u32 = 2;
/// wake.task exited or was killed.
pub const DOORBELL_WOKE_PEER_LOST: u32 = 3;
/// The timeout elapsed with nothing to report.
pub const DOORBELL_WOKE_TIMEOUT: u32 = 4;
/// A peer task closed its endpoint in order (`wake.task`); everything it
/// sent to this window was delivered before.  Reported once per peer and
/// window, with return value 0.  A death is DOORBELL_WOKE_PEER_LOST.
pub const DOORBELL_WOKE_PEER_CLOSED: u32 = 5;
/// Shared memory between this task and wake.task broke its format; the
/// return value (DOORBELL_ERR_CORRUPT_*) says which structure.
pub const DOORBELL_WOKE_PEER_CORRUPT: u32 = 6;

/// A peer reached over shared memory (doorbell_peer_path's answer; a path
/// of doorbell_spin_stats_get).
pub const DOORBELL_PATH_SHM: u32 = 1;
/// A peer reached over TCP (as DOORBELL_PATH_SHM).
pub const DOORBELL_PATH_TCP: u32 = 2;

/// doorbell_spin_end: work arrived while the waiter was awake (during its
/// spin, or between sleeps that timed out).
pub const DOORBELL_SPIN_ENDED_AWAKE: u32 = 1;
/// doorbell_spin_end: work arrived after the waiter's spin, and it slept
/// (or was about to).
pub const DOORBELL_SPIN_ENDED_WOKEN: u32 = 2;
/// doorbell_spin_end flag: the waiter yields the CPU on every pass of its
/// spin (more runnable processes than CPUs): spinning then costs the others
/// little, and a sleeper's wake-up would wait for a CPU, so it keeps
/// spinning, and a wait that ended awake teaches nothing.
pub const DOORBELL_SPIN_YIELDS: u32 = 1;

/// doorbell_expose_rma access: peers may get from the range.
pub const DOORBELL_RMA_READ: u32 = 1;
/// doorbell_expose_rma access: peers may put to the range.
pub const DOORBELL_RMA_WRITE: u32 = 2;
/// doorbell_expose_rma access: peers may run atomics on the range.
pub const DOORBELL_RMA_ATOMIC: u32 = 4;

const _: () = {
    use crate::net::rma;
    assert!(DOORBELL_RMA_READ == rma::ACCESS_READ && DOORBELL_RMA_WRITE == rma::ACCESS_WRITE);
    assert!(DOORBELL_RMA_ATOMIC == rma::ACCESS_ATOMIC);
    assert!(DOORBELL_AOP_ADD == AtomicOp::Add as u32 && DOORBELL_AOP_MAX == AtomicOp::Max as u32);
    assert!(DOORBELL_AOP_SWAP == AtomicOp::Swap as u32 && DOORBELL_AOP_MIN == AtomicOp::Min as u32);
    assert!(DOORBELL_AOP_AND == AtomicOp::And as u32 && DOORBELL_AOP_OR == AtomicOp::Or as u32);
    assert!(DOORBELL_AOP_XOR == AtomicOp::Xor as u32);
};

/// doorbell_rma_atomic operations: `*addr op= operand`, the old value to
/// `result`.  MIN and MAX compare as signed integers.
pub const DOORBELL_AOP_ADD: u32 = 1;
pub const DOORBELL_AOP_AND: u32 = 2;
pub const DOORBELL_AOP_OR: u32 = 3;
pub const DOORBELL_AOP_XOR: u32 = 4;
pub const DOORBELL_AOP_SWAP: u32 = 5;
pub const DOORBELL_AOP_MIN: u32 = 6;
pub const DOORBELL_AOP_MAX: u32 = 7;
/// Compare-and-swap: `*addr = operand` if `*addr == compare`.
pub const DOORBELL_AOP_CSWAP: u32 = 8;

/// Longest address blob doorbell_address() produces.
pub const DOORBELL_ADDRESS_MAX: usize = 64;
/// Largest task id + 1.
pub const DOORBELL_MAX_TASKS: u32 = 16384;
/// Largest peer id + 1.  An endpoint calls a task of its own job (the same
/// job key) by its task id, and an endpoint of another job by an id from
/// DOORBELL_MAX_TASKS up that it gives it (doorbell_connect): at most
/// DOORBELL_MAX_PEERS - DOORBELL_MAX_TASKS (1024) of those over its life.
pub const DOORBELL_MAX_PEERS: u32 = 17408;
/// Windows a task may open.
pub const DOORBELL_MAX_WINDOWS: u32 = 16;

const _: () = assert!(DOORBELL_ADDRESS_MAX == ADDRESS_MAX && DOORBELL_MAX_TASKS == MAX_TASKS && DOORBELL_MAX_PEERS == MAX_PEERS);
const _: () = assert!(DOORBELL_MAX_WINDOWS == MAX_WINDOWS);

/// Bytes of a task's control segment before its queues (its header, window
/// slots, window 0's 8 fast boxes of 4 KiB and its table of the other
/// jobs' endpoints that talk to it).  Creating an endpoint reserves these
/// plus window 0's queue (DOORBELL_QUEUE_HEADER_BYTES plus ring_bytes) in
/// the shared-memory directory; each further window opened reserves one
/// more queue.  Nothing else grows with the peers (bulk buffers for
/// messages over ring_bytes / 4 aside).
pub const DOORBELL_CONTROL_BYTES: usize = 49152;
/// Bytes of a window's inbound queue beyond its ring_bytes.
pub const DOORBELL_QUEUE_HEADER_BYTES: usize = 74368;

const _: () = assert!(DOORBELL_CONTROL_BYTES == crate::shm::control::CONTROL_BYTES);
const _: () = assert!(DOORBELL_QUEUE_HEADER_BYTES == crate::shm::queue::QUEUE_HEADER_BYTES);

/// Opaque per-process endpoint.  Any thread may send; each window should be
/// progressed by one thread at a time (a concurrent progress of the same
/// window returns 0 at once).
pub struct doorbell_endpoint {
    ep: Endpoint,
}

/// Endpoint configuration; fill with doorbell_config_init first.
#[repr(C)]
pub struct doorbell_config {
    /// This task's id, unique in the job, < DOORBELL_MAX_TASKS.
    pub task: u32,
    /// Tasks with equal node_id talk over shared memory.
    pub node_id: u64,
    /// Job key, [A-Za-z0-9_.-]{1,40}; every task of a job uses the same.
    pub job: *const c_char,
    /// NULL: env DOORBELL_SHM_DIR or "/dev/shm".
    pub shm_dir: *const c_char,
    /// Data bytes of each window's inbound queue (all local senders to the
    /// window share it), a power of 2 in 4 KiB..1 GiB; 0: 512 KiB.
    pub ring_bytes: u32,
    /// DOORBELL_WAIT_*; DEFAULT: env DOORBELL_WAIT_MODE (poll|block|adaptive) or adaptive.
    pub wait_mode: u32,
    /// Adaptive mode spins at most this long before sleeping; 0: 50.
    pub spin_us: u32,
    /// Nonzero: TCP even to same-node tasks, and no shared memory at all
    /// (shm_dir is never touched: it may be missing or read-only).  Other
    /// tasks then reach this one over TCP too.
    pub force_tcp: u32,
    /// Comma list of interface names or IPv4 CIDR; NULL or "": any.
    pub if_include: *const c_char,
    /// Comma list; ignored when if_include is set.
    pub if_exclude: *const c_char,
    /// TCP listen port range; 0: an ephemeral port.
    pub port_min: u16,
    pub port_max: u16,
    /// Messages over ring_bytes / 4 and up to this many bytes go through a
    /// per-(sender, receiver, window) double buffer of two message-sized slots (one copy on each
    /// side) instead of queue chunks; 0: 64 MiB; at most 1 GiB; 1: never.
    pub bulk_max_bytes: u32,
    /// Largest message; 0: 1 GiB; at most 4 GiB - 1.
    pub max_message: u64,
    /// Queued unsent bytes per peer before WOULD_BLOCK; 0: 256 MiB.  Also
    /// what TCP messages over 1 MiB being received may hold together (one
    /// is always let in when none is in progress).
    pub max_backlog: u64,
    /// How many other tasks on this node will connect to this one (MPI:
    /// the local peers), or -1 (the default): unknown.  Known, this task's
    /// control file loses its name as soon as that many have mapped it, so
    /// nothing stays behind even if every task is killed; a task that
    /// connects later still reaches it (through /proc/<pid>/fd, same user).
    /// Unknown, the name stays until destroy.  Other values: INVALID_ARGUMENT.
    pub local_peers: i32,
}

/// One piece of a gathered message.
#[repr(C)]
pub struct doorbell_iovec {
    pub base: *const c_void,
    pub len: usize,
}

/// Why a wait returned.
#[repr(C)]
pub struct doorbell_wake {
    /// DOORBELL_WOKE_*.
    pub reason: u32,
    /// With PEER_LOST: the lost task; with PEER_CLOSED: the closed one.
    pub task: u32,
}

/// Called once per complete message, on the thread that called
/// progress/wait.  The callback may call doorbell_send*.
///
/// `data` is valid only during the call: copy what you need before
/// returning.  A local message is handed over in place, in shared memory
/// (its record in this task's queue or fast box, or the sender's bulk
/// buffer), with no copy: the record or buffer is released to its sender
/// only after the callback returns, so a sender that keeps the protocol
/// does not change the bytes during the call.  Any process of the same
/// user can map those files, though, and a broken or hostile one could
/// write them at any time: treat `data` as untrusted input, and read a
/// value once (copy it) before you check and use it.  A message from TCP
/// or one reassembled from chunks is in this process's own memory.
pub type doorbell_recv_fn =
    Option<unsafe extern "C" fn(ctx: *mut c_void, task: u32, window: u32, tag: u8, data: *const u8, len: usize)>;

/// A DOORBELL_WAIT_* code: Some(None) for DEFAULT, None if unknown.
fn wait_mode(code: u32) -> Option<Option<WaitMode>> {
    match code {
        DOORBELL_WAIT_DEFAULT => Some(None),
        DOORBELL_WAIT_POLL => Some(Some(WaitMode::Poll)),
        DOORBELL_WAIT_BLOCK => Some(Some(WaitMode::Block)),
        DOORBELL_WAIT_ADAPTIVE => Some(Some(WaitMode::Adaptive)),
        _ => None,
    }
}

/// An error's status code: the one place the numbers are given out.
impl From<Error> for c_int {
    fn from(e: Error) -> c_int {
        match e {
            Error::InvalidArgument => DOORBELL_ERR_INVALID_ARGUMENT,
            Error::UnknownWindow => DOORBELL_ERR_UNKNOWN_WINDOW,
            Error::UnknownTask => DOORBELL_ERR_UNKNOWN_TASK,
            Error::BadLength => DOORBELL_ERR_BAD_LENGTH,
            Error::BadAddress => DOORBELL_ERR_BAD_ADDRESS,
            Error::WouldBlock => DOORBELL_ERR_WOULD_BLOCK,
            Error::TimedOut => DOORBELL_ERR_TIMED_OUT,
            Error::PeerLost => DOORBELL_ERR_PEER_LOST,
            Error::NoShmSpace => DOORBELL_ERR_NO_SHM_SPACE,
            Error::Shm => DOORBELL_ERR_SHM,
            Error::Network => DOORBELL_ERR_NETWORK,
            Error::NoInterface => DOORBELL_ERR_NO_INTERFACE,
            Error::BufferTooSmall => DOORBELL_ERR_BUFFER_TOO_SMALL,
            Error::Internal => DOORBELL_ERR_INTERNAL,
            Error::ShmRefused => DOORBELL_ERR_SHM_REFUSED,
            Error::InUse => DOORBELL_ERR_IN_USE,
            Error::FlihFailed => DOORBELL_ERR_FLIH_FAILED,
            Error::TooManyPeers => DOORBELL_ERR_TOO_MANY_PEERS,
            Error::Corrupt(Corrupt::QueueHeader) => DOORBELL_ERR_CORRUPT_QUEUE_HEADER,
            Error::Corrupt(Corrupt::FastBox) => DOORBELL_ERR_CORRUPT_FAST_BOX,
            Error::Corrupt(Corrupt::Record) => DOORBELL_ERR_CORRUPT_RECORD,
        }
    }
}

/// The error a status code stands for, if any.
fn error_from_code(code: c_int) -> Option<Error> {
    ALL.iter().copied().find(|&e| c_int::from(e) == code)
}

/// 0 for a success, else the error's code.
fn status(r: Result<(), Error>) -> c_int {
    r.map_or_else(c_int::from, |()| DOORBELL_OK)
}

fn guard(f: impl FnOnce() -> Result<c_int, Error>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(n)) => n,
        Ok(Err(e)) => e.into(),
        Err(_) => DOORBELL_ERR_INTERNAL,
    }
}

/// SAFETY (caller): `p` is NULL or a NUL-terminated string.
unsafe fn opt_str(p: *const c_char) -> Result<Option<String>, Error> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: not NULL (checked above), NUL-terminated (the caller's contract).
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map(|s| Some(s.to_owned())).map_err(|_| Error::InvalidArgument)
}

/// The endpoint behind a handle; NULL is INVALID_ARGUMENT.
///
/// # Safety
/// `ep` is NULL or a pointer from doorbell_endpoint_create that has not
/// been destroyed, and it stays valid for `'a`.
unsafe fn endpoint<'a>(ep: *const doorbell_endpoint) -> Result<&'a Endpoint, Error> {
    // SAFETY: the caller's contract above.
    unsafe { ep.as_ref() }.map(|e| &e.ep).ok_or(Error::InvalidArgument)
}

/// Fill `*cfg` with defaults (task 0, node_id 0, job "doorbell").  The
/// default job key is the same in every program, which does no harm: every
/// endpoint names its shared-memory files after a random token of its own
/// (in its address blob), so programs side by side never share a file.
/// The key labels the files and keys the TCP handshake.
#[no_mangle]
pub unsafe extern "C" fn doorbell_config_init(cfg: *mut doorbell_config) -> c_int {
    guard(|| {
        // SAFETY: the caller passes NULL or a writable doorbell_config.
        let cfg = unsafe { cfg.as_mut() }.ok_or(Error::InvalidArgument)?;
        *cfg = doorbell_config {
            task: 0,
            node_id: 0,
            job: c"doorbell".as_ptr(),
            shm_dir: std::ptr::null(),
            ring_bytes: 0,
            wait_mode: DOORBELL_WAIT_DEFAULT,
            spin_us: 0,
            force_tcp: 0,
            if_include: std::ptr::null(),
            if_exclude: std::ptr::null(),
            port_min: 0,
            port_max: 0,
            bulk_max_bytes: 0,
            max_message: 0,
            max_backlog: 0,
            local_peers: -1,
        };
        Ok(DOORBELL_OK)
    })
}

fn config_from_c(c: &doorbell_config) -> Result<Config, Error> {
    let mut cfg = Config { task: c.task, node_id: c.node_id, force_tcp: c.force_tcp != 0, ..Config::default() };
    // SAFETY: the strings are NULL or NUL-terminated (documented contract).
    unsafe {
        cfg.job = opt_str(c.job)?.ok_or(Error::InvalidArgument)?;
        if let Some(d) = opt_str(c.shm_dir)? {
            cfg.shm_dir = d;
        }
        cfg.if_include = opt_str(c.if_include)?.unwrap_or_default();
        cfg.if_exclude = opt_str(c.if_exclude)?.unwrap_or_default();
    }
    if c.ring_bytes != 0 {
        cfg.ring_bytes = c.ring_bytes;
    }
    if c.bulk_max_bytes != 0 {
        cfg.bulk_max = c.bulk_max_bytes as u64;
    }
    if let Some(m) = wait_mode(c.wait_mode).ok_or(Error::InvalidArgument)? {
        cfg.wait_mode = m;
    }
    if c.spin_us != 0 {
        cfg.spin_us = c.spin_us;
    }
    cfg.port_min = c.port_min;
    cfg.port_max = c.port_max;
    if c.max_message != 0 {
        cfg.max_message = c.max_message;
    }
    if c.max_backlog != 0 {
        cfg.max_backlog = c.max_backlog;
    }
    cfg.local_peers = match c.local_peers {
        -1 => None,
        n => Some(u32::try_from(n).map_err(|_| Error::InvalidArgument)?),
    };
    Ok(cfg)
}

/// Create the endpoint: control segment, TCP listener, FLIH thread; window 0
/// is open.  The control segment's name carries a random token: a name
/// somebody else took costs a fresh one, never the endpoint.  Errors:
/// INVALID_ARGUMENT, NO_SHM_SPACE (no room in the shared-memory directory
/// for the control segment with window 0's queue: DOORBELL_CONTROL_BYTES +
/// DOORBELL_QUEUE_HEADER_BYTES + ring_bytes; with force_tcp set the
/// endpoint needs no room there, so a caller may go on that way), SHM,
/// NO_INTERFACE, NETWORK.
#[no_mangle]
pub unsafe extern "C" fn doorbell_endpoint_create(cfg: *const doorbell_config, out: *mut *mut doorbell_endpoint) -> c_int {
    guard(|| {
        // SAFETY: NULL or a valid config / writable pointer (documented contract).
        let (c, out) = unsafe { (cfg.as_ref(), out.as_mut()) };
        let (c, out) = (c.ok_or(Error::InvalidArgument)?, out.ok_or(Error::InvalidArgument)?);
        let ep = Endpoint::new(config_from_c(c)?)?;
        *out = Box::into_raw(Box::new(doorbell_endpoint { ep }));
        Ok(DOORBELL_OK)
    })
}

/// Deliver what was sent, say goodbye to peers, stop the FLIH thread and
/// unlink every segment this endpoint created.  Delivery waits, however
/// long, for receivers that are busy (a TCP peer's kernel acknowledges
/// every byte; a same-node ring makes room for the sender's backlog); only
/// a receiver that died or closed ends the wait early.  Peers then see
/// PEER_CLOSED after the last message.  NULL is accepted.
#[no_mangle]
pub unsafe extern "C" fn doorbell_endpoint_destroy(ep: *mut doorbell_endpoint) -> c_int {
    guard(|| {
        if !ep.is_null() {
            // SAFETY: `ep` came from doorbell_endpoint_create and is destroyed once.
            drop(unsafe { Box::from_raw(ep) });
        }
        Ok(DOORBELL_OK)
    })
}

/// Write the address blob into `buf`; `*len` is its capacity in, the blob's
/// length out.  BUFFER_TOO_SMALL if the capacity is short.  The blob holds
/// this endpoint's random 128-bit TCP secret: a task may connect over TCP
/// only by proving it knows it (a challenge and a keyed hash; the secret
/// never crosses the network).  Hand the blob only to the job's tasks.  It
/// also holds the random token that names the endpoint's shared-memory
/// files: same-node peers find them through it.
#[no_mangle]
pub unsafe extern "C" fn doorbell_address(ep: *const doorbell_endpoint, buf: *mut u8, len: *mut usize) -> c_int {
    guard(|| {
        // SAFETY: `ep` is NULL or a live handle (the module's contract).
        let ep = unsafe { endpoint(ep) }?;
        // SAFETY: NULL or a writable size_t.
        let len = unsafe { len.as_mut() }.ok_or(Error::InvalidArgument)?;
        if buf.is_null() {
            return Err(Error::InvalidArgument);
        }
        if *len < ADDRESS_BYTES {
            *len = ADDRESS_BYTES;
            return Err(Error::BufferTooSmall);
        }
        let blob = ep.address().encode();
        // SAFETY: `buf` has room for *len >= ADDRESS_BYTES bytes.
        unsafe { std::ptr::copy_nonoverlapping(blob.as_ptr(), buf, ADDRESS_BYTES) };
        *len = ADDRESS_BYTES;
        Ok(DOORBELL_OK)
    })
}

/// Register a peer from its blob; `*task_out` gets its peer id: its task id
/// if it is of this endpoint's job (the same job key), else an id from
/// DOORBELL_MAX_TASKS up that this endpoint gives the other job's endpoint
/// (MPI's spawn, connect/accept, join).  Idempotent; connecting to yourself
/// is allowed.  BAD_ADDRESS for a malformed blob, or another blob for a
/// task already connected; TOO_MANY_PEERS when this endpoint has no peer
/// id left to give (the first send reports it when the other job's
/// endpoint has none left for this one).
#[no_mangle]
pub unsafe extern "C" fn doorbell_connect(ep: *mut doorbell_endpoint, blob: *const u8, len: usize, task_out: *mut u32) -> c_int {
    guard(|| {
        // SAFETY: `ep` is NULL or a live handle (the module's contract).
        let ep = unsafe { endpoint(ep) }?;
        if blob.is_null() {
            return Err(Error::InvalidArgument);
        }
        if len > ADDRESS_MAX {
            return Err(Error::BadAddress);
        }
        // SAFETY: `blob` points at `len` readable bytes (len is bounded above).
        let b = unsafe { std::slice::from_raw_parts(blob, len) };
        let task = ep.connect(b)?;
        // SAFETY: NULL or a writable u32.
        if let Some(t) = unsafe { task_out.as_mut() } {
            *t = task;
        }
        Ok(DOORBELL_OK)
    })
}

/// DOORBELL_PATH_SHM (1) if `task` is reached over shared memory (every
/// same-node task, unless either side has force_tcp set),
/// DOORBELL_PATH_TCP (2) over TCP; UNKNOWN_TASK.
#[no_mangle]
pub unsafe extern "C" fn doorbell_peer_path(ep: *const doorbell_endpoint, task: u32) -> c_int {
    guard(|| {
        // SAFETY: `ep` is NULL or a live handle (the module's contract).
        let ep = unsafe { endpoint(ep) }?;
        Ok(ep.peer_path(task)? as c_int)
    })
}

/// Open another receive window; `*window_out` gets its number.  Its inbound
/// queue (DOORBELL_QUEUE_HEADER_BYTES + ring_bytes) is reserved in the
/// shared-memory directory first.  INVALID_ARGUMENT once
/// DOORBELL_MAX_WINDOWS are open; NO_SHM_SPACE if the queue does not fit.
#[no_mangle]
pub unsafe extern "C" fn doorbell_window_open(ep: *mut doorbell_endpoint, window_out: *mut u32) -> c_int {
    guard(|| {
        // SAFETY: `ep` is NULL or a live handle (the module's contract).
        let ep = unsafe { endpoint(ep) }?;
        // SAFETY: NULL or a writable u32.
        let out = unsafe { window_out.as_mut() }.ok_or(Error::InvalidArgument)?;
        *out = ep.window_open()?;
        Ok(DOORBELL_OK)
    })
}

/// Send one message (up to max_message bytes; `data` may be NULL when `len`
/// is 0) to (task, window).  Returns OK
/// once the bytes are copied (the receiver's queue, a socket or the peer's
/// backlog): the buffer is free at once.  Messages to one (task, window)
/// arrive in order.  A same-node message goes into the receiver's queue for
/// the window, which all its local senders share; a message over a quarter
/// of that queue goes through a bulk buffer this sender makes for the
/// (task, window), or in chunks if there is no room for one.
/// Errors: UNKNOWN_TASK, UNKNOWN_WINDOW, BAD_LENGTH, WOULD_BLOCK, PEER_LOST
/// (the task died, or closed its endpoint: nobody would read it; or its
/// queue is corrupt), SHM, SHM_REFUSED (the peer's control segment is a
/// symlink or a foreign file), NETWORK.
#[no_mangle]
pub unsafe extern "C" fn doorbell_send(
    ep: *mut doorbell_endpoint,
    task: u32,
    window: u32,
    tag: u8,
    data: *const c_void,
    len: usize,
) -> c_int {
    let iov = doorbell_iovec { base: data, len };
    // SAFETY: our caller's contract covers `ep` and `data`; `iov` is one
    // live entry.
    unsafe { doorbell_sendv(ep, task, window, tag, &iov, 1) }
}

/// Same as doorbell_send, the message being `a_len` bytes at `a` followed
/// by `b_len` bytes at `b` (an MPI header and its payload; a piece of
/// length 0 may be NULL): doorbell_sendv of two pieces, without the array.
#[no_mangle]
pub unsafe extern "C" fn doorbell_send2(
    ep: *mut doorbell_endpoint,
    task: u32,
    window: u32,
    tag: u8,
    a: *const c_void,
    a_len: usize,
    b: *const c_void,
    b_len: usize,
) -> c_int {
    guard(|| {
        // SAFETY: `ep` is NULL or a live handle (the module's contract).
        let ep = unsafe { endpoint(ep) }?;
        // SAFETY: each piece is `len` readable bytes at its pointer, or of
        // length 0 (the contract); checked as doorbell_sendv checks them.
        let (a, b) = unsafe { (piece(a, a_len)?, piece(b, b_len)?) };
        ep.send_small(task, window, tag, a, b)?;
        Ok(DOORBELL_OK)
    })
}

/// One piece of a message as a slice: empty for length 0 (any base);
/// INVALID_ARGUMENT for a NULL base with a length; BAD_LENGTH for a length
/// no buffer can have, checked before it becomes a slice.
/// SAFETY (caller): a non-NULL `base` has `len` readable bytes that stay
/// unchanged while the slice lives.
#[inline(always)]
unsafe fn piece<'a>(base: *const c_void, len: usize) -> Result<&'a [u8], Error> {
    match (base.is_null(), len) {
        (_, 0) => Ok(&[]),
        (true, _) => Err(Error::InvalidArgument),
        (false, n) if n > isize::MAX as usize / 2 => Err(Error::BadLength),
        // SAFETY: `len` readable bytes at `base` (the caller's contract).
        (false, n) => Ok(unsafe { std::slice::from_raw_parts(base as *const u8, n) }),
    }
}

/// Same as doorbell_send, gathering the message from `iovcnt` pieces (at
/// most 1024; a piece of length 0 may have a NULL base).
#[no_mangle]
pub unsafe extern "C" fn doorbell_sendv(
    ep: *mut doorbell_endpoint,
    task: u32,
    window: u32,
    tag: u8,
    iov: *const doorbell_iovec,
    iovcnt: usize,
) -> c_int {
    guard(|| {
        // SAFETY: `ep` is NULL or a live handle (the module's contract).
        let ep = unsafe { endpoint(ep) }?;
        if iovcnt > 1024 || (iov.is_null() && iovcnt > 0) {
            return Err(Error::InvalidArgument);
        }
        if iovcnt <= 2 {
            // The common case, an MPI header and its payload: no part array.
            let nth = |i: usize| -> Result<&[u8], Error> {
                if i >= iovcnt {
                    return Ok(&[]);
                }
                // SAFETY: `iov` points at `iovcnt` entries (checked above);
                // each entry's `len` bytes at `base` are readable (contract).
                unsafe {
                    let v = &*iov.add(i);
                    piece(v.base, v.len)
                }
            };
            ep.send_small(task, window, tag, nth(0)?, nth(1)?)?;
            return Ok(DOORBELL_OK);
        }
        // SAFETY: `iov` points at `iovcnt` entries (checked non-null above).
        let iov = if iovcnt == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(iov, iovcnt) } };
        let mut total: u64 = 0;
        for v in iov {
            total = total.saturating_add(v.len as u64);
            if v.base.is_null() && v.len > 0 {
                return Err(Error::InvalidArgument);
            }
        }
        // Check before touching memory: (size_t)-1 must not become a slice.
        if total > isize::MAX as u64 {
            return Err(Error::BadLength);
        }
        // SAFETY: each entry points at `len` readable bytes (contract).
        let slice = |v: &doorbell_iovec| unsafe { std::slice::from_raw_parts(v.base as *const u8, v.len) };
        // The common case (an MPI header + payload) stays off the heap.
        const ON_STACK: usize = 4;
        if iovcnt <= ON_STACK {
            let mut parts: [&[u8]; ON_STACK] = [&[]; ON_STACK];
            for (p, v) in parts.iter_mut().zip(iov) {
                if v.len > 0 {
                    *p = slice(v);
                }
            }
            ep.send(task, window, tag, &parts[..iovcnt])?;
        } else {
            let parts: Vec<&[u8]> = iov.iter().filter(|v| v.len > 0).map(slice).collect();
            ep.send(task, window, tag, &parts)?;
        }
        Ok(DOORBELL_OK)
    })
}

/// The callback as the core calls it: the message's address and length go
/// to C as they are (in shared memory, for a local message: no copy, and
/// no Rust reference over them; see doorbell_recv_fn for what C may assume).
fn call_back(cb: doorbell_recv_fn, ctx: *mut c_void, window: u32) -> impl FnMut(u32, u8, SharedBytes<'_>) {
    move |task, tag, data| {
        if let Some(f) = cb {
            // SAFETY: the caller's callback and context, called as documented.
            unsafe { f(ctx, task, window, tag, data.as_ptr(), data.len()) };
        }
    }
}

fn report(w: Woke, wake: *mut doorbell_wake) -> Result<c_int, Error> {
    let (reason, task, ret) = match w {
        Woke::Message(n) => (DOORBELL_WOKE_MESSAGE, 0, Ok(n.min(c_int::MAX as usize) as c_int)),
        Woke::Notify => (DOORBELL_WOKE_NOTIFY, 0, Ok(0)),
        Woke::Timeout => (DOORBELL_WOKE_TIMEOUT, 0, Ok(0)),
        Woke::PeerLost(t) => (DOORBELL_WOKE_PEER_LOST, t, Err(Error::PeerLost)),
        Woke::PeerClosed(t) => (DOORBELL_WOKE_PEER_CLOSED, t, Ok(0)),
        Woke::PeerCorrupt(t, c) => (DOORBELL_WOKE_PEER_CORRUPT, t, Err(Error::Corrupt(c))),
    };
    // SAFETY: NULL or a writable doorbell_wake.
    if let Some(wk) = unsafe { wake.as_mut() } {
        *wk = doorbell_wake { reason, task };
    }
    ret
}

/// Deliver what has arrived for `window` without sleeping, and push queued
/// sends.  Returns the number of messages delivered, or PEER_LOST once per
/// lost peer (then wake->reason is DOORBELL_WOKE_PEER_LOST and wake->task
/// the lost task; `wake` may be NULL), or a DOORBELL_ERR_CORRUPT_* once per
/// peer whose shared memory broke its format (wake->reason
/// DOORBELL_WOKE_PEER_CORRUPT, wake->task that peer).  `cb` must not be
/// NULL (INVALID_ARGUMENT): a message is never dropped unseen.
/// FLIH_FAILED once the endpoint's event thread failed.
#[no_mangle]
pub unsafe extern "C" fn doorbell_progress(
    ep: *mut doorbell_endpoint,
    window: u32,
    cb: doorbell_recv_fn,
    ctx: *mut c_void,
    wake: *mut doorbell_wake,
) -> c_int {
    guard(|| {
        // SAFETY: `ep` is NULL or a live handle (the module's contract).
        let ep = unsafe { endpoint(ep) }?;
        cb.ok_or(Error::InvalidArgument)?;
        let w = ep.progress_in_place(window, &mut call_back(cb, ctx, window))?;
        report(w, wake)
    })
}

/// Could doorbell_progress(ep, window) find anything now?  Returns 0 if it
/// certainly would not: a caller that polls may skip the progress call (and
/// a send batch around it) then; 2 if what it may find is only messages in
/// the window's shared-memory queue and fast boxes (doorbell_progress_local
/// takes those alone), or a fast box holds a message and nothing else was
/// looked at (at most 8 answers in a row, so a busy box does not hide the
/// rest from a caller that polls); 1 if it may find anything (a notify, a
/// peer event, queued sends to push, TCP connections to poll, messages).
/// Plain loads, no lock, no syscall.  Errors: INVALID_ARGUMENT (NULL ep),
/// UNKNOWN_WINDOW.
#[no_mangle]
pub unsafe extern "C" fn doorbell_work_pending(ep: *const doorbell_endpoint, window: u32) -> c_int {
    guard(|| {
        // SAFETY: `ep` is NULL or a live handle (the module's contract).
        let ep = unsafe { endpoint(ep) }?;
        Ok(match ep.work_kind(window)? {
            crate::endpoint::work_check::Work::None => 0,
            crate::endpoint::work_check::Work::Any => 1,
            crate::endpoint::work_check::Work::Local => 2,
        })
    })
}

/// Deliver what `window`'s shared-memory queue and fast boxes hold, and
/// nothing else (no TCP, no queued sends, no peer events or notifies): the
/// short pass for a caller that doorbell_work_pending answered 2.  Returns
/// the number of messages delivered (0 also when another thread is
/// delivering this window).  Errors: INVALID_ARGUMENT (NULL ep or cb),
/// UNKNOWN_WINDOW.
#[no_mangle]
pub unsafe extern "C" fn doorbell_progress_local(
    ep: *mut doorbell_endpoint,
    window: u32,
    cb: doorbell_recv_fn,
    ctx: *mut c_void,
) -> c_int {
    guard(|| {
        // SAFETY: `ep` is NULL or a live handle (the module's contract).
        let ep = unsafe { endpoint(ep) }?;
        cb.ok_or(Error::InvalidArgument)?;
        let n = ep.progress_local_in_place(window, call_back(cb, ctx, window))?;
        Ok(n.min(c_int::MAX as usize) as c_int)
    })
}

/// Like progress, but if nothing is there wait (mode DOORBELL_WAIT_*) for a
/// message, a notify, a lost peer or `timeout_us` (< 0: no limit), then
/// deliver.  While it sleeps, freed queue space wakes it to push this task's
/// queued sends.  Returns messages delivered (0 with wake->reason NOTIFY,
/// TIMEOUT or PEER_CLOSED), or PEER_LOST (wake->reason PEER_LOST, wake->task
/// the lost task), a DOORBELL_ERR_CORRUPT_* (as for doorbell_progress),
/// UNKNOWN_WINDOW, INVALID_ARGUMENT (also for a NULL `cb`),
/// or FLIH_FAILED (the endpoint's event thread failed: a sleeper is woken
/// with it at once).
#[no_mangle]
pub unsafe extern "C" fn doorbell_wait(
    ep: *mut doorbell_endpoint,
    window: u32,
    mode: u32,
    timeout_us: i64,
    cb: doorbell_recv_fn,
    ctx: *mut c_void,
    wake: *mut doorbell_wake,
) -> c_int {
    guard(|| {
        // SAFETY: `ep` is NULL or a live handle (the module's contract).
        let ep = unsafe { endpoint(ep) }?;
        cb.ok_or(Error::InvalidArgument)?;
        let mode = wait_mode(mode).ok_or(Error::InvalidArgument)?;
        let timeout = (timeout_us >= 0).then(|| Duration::from_micros(timeout_us as u64));
        let w = ep.wait_in_place(window, mode, timeout, &mut call_back(cb, ctx, window))?;
        report(w, wake)
    })
}

/// Wake (task, window) as if a packet had arrived: a futex wake if it
/// sleeps, nothing (no syscall) if it is awake; either way its next
/// progress or wait reports DOORBELL_WOKE_NOTIFY.  `task` may be this task.
/// UNKNOWN_TASK, UNKNOWN_WINDOW; INVALID_ARGUMENT for a task on another
/// node or one created with force_tcp.
#[no_mangle]
pub unsafe extern "C" fn doorbell_local_notify(ep: *mut doorbell_endpoint, task: u32, window: u32) -> c_int {
    guard(|| {
        // SAFETY: `ep` is NULL or a live handle (the module's contract).
        unsafe { endpoint(ep) }?.local_notify(task, window)?;
        Ok(DOORBELL_OK)
    })
}

/// Push queued sends until none remain, or TIMED_OUT after `timeout_us`
/// (< 0: no limit).  A timeout loses nothing: what is queued stays queued,
/// and endpoint_destroy delivers it.
#[no_mangle]
pub unsafe extern "C" fn doorbell_flush(ep: *mut doorbell_endpoint, timeout_us: i64) -> c_int {
    guard(|| {
        let timeout = (timeout_us >= 0).then(|| Duration::from_micros(timeout_us as u64));
        // SAFETY: `ep` is NULL or a live handle (the module's contract).
        unsafe { endpoint(ep) }?.flush(timeout)?;
        Ok(DOORBELL_OK)
    })
}

/// This process is ending the job (an abort): tell every peer now, without
/// waiting for any -- a flag in this task's control segment, a frame ahead
/// of whatever is queued on each TCP connection, and a connection made for
/// it to each same-node TCP peer it has none with (all of it given at most
/// a second, as far as the peers and sockets allow).  A task that hears it
/// passes it on over its own connections; doorbell_abort_announced then
/// returns 1 there.  Call it on the abort path, just before the process
/// exits.  The endpoint stays usable, and endpoint_destroy then delivers
/// nothing and waits for nobody.  DOORBELL_OK.
#[no_mangle]
pub unsafe extern "C" fn doorbell_announce_abort(ep: *mut doorbell_endpoint) -> c_int {
    guard(|| {
        // SAFETY: `ep` is NULL or a live handle (the module's contract).
        unsafe { endpoint(ep) }?.announce_abort();
        Ok(DOORBELL_OK)
    })
}

/// 1 once this task knows the job is ending: a task announced an abort
/// (doorbell_announce_abort), to this task or to a task that passed it on;
/// else 0.  What the TCP connections hold is read first.  A task that gets
/// PEER_LOST while this is 1 lost that peer to the abort (it was killed
/// with the job), not to a crash.
#[no_mangle]
pub unsafe extern "C" fn doorbell_abort_announced(ep: *mut doorbell_endpoint) -> c_int {
    guard(|| {
        // SAFETY: `ep` is NULL or a live handle (the module's contract).
        Ok(unsafe { endpoint(ep) }?.abort_announced() as c_int)
    })
}

/// Open a send batch on the calling thread: until the matching
/// doorbell_batch_end, small TCP frames it sends on any endpoint (under
/// 256 bytes: MPI control messages) are held and leave together, in one
/// write per connection, when the outermost batch ends.  For a progress
/// pass that sends many of them (a read request per RGET, a FIN per
/// finished read).  Batches nest; a wait that sleeps sends the held frames
/// first.  Sends outside a batch go at once.  Always DOORBELL_OK.
#[no_mangle]
pub extern "C" fn doorbell_batch_begin() -> c_int {
    guard(|| {
        crate::net::batch::begin_forever();
        Ok(DOORBELL_OK)
    })
}

/// End the calling thread's innermost send batch; the outermost one sends
/// what it held.  Errors: INVALID_ARGUMENT (no batch open on this thread).
#[no_mangle]
pub extern "C" fn doorbell_batch_end() -> c_int {
    guard(|| {
        if !crate::net::batch::end_one() {
            return Err(Error::InvalidArgument);
        }
        Ok(DOORBELL_OK)
    })
}

/// Let `task` read `len` bytes at `base` of this process's memory
/// (doorbell_read, over TCP) until doorbell_unexpose(*key_out).  The memory
/// must stay valid until then; only `task`, and only inside the range, can
/// read it.  Errors: UNKNOWN_TASK, BAD_LENGTH (the range wraps),
/// INVALID_ARGUMENT (NULL key_out).
#[no_mangle]
pub unsafe extern "C" fn doorbell_expose(
    ep: *mut doorbell_endpoint,
    task: u32,
    base: *const c_void,
    len: usize,
    key_out: *mut u64,
) -> c_int {
    guard(|| {
        // SAFETY: `ep` is NULL or a live handle (the module's contract).
        let ep = unsafe { endpoint(ep) }?;
        // SAFETY: NULL or a writable u64.
        let out = unsafe { key_out.as_mut() }.ok_or(Error::InvalidArgument)?;
        *out = ep.expose(task, base as u64, len as u64)?;
        Ok(DOORBELL_OK)
    })
}

/// End an exposure.  Bytes of it that a socket has not taken yet are
/// copied first, so the memory may be reused as soon as this returns.
/// Errors: INVALID_ARGUMENT (no such key).
#[no_mangle]
pub unsafe extern "C" fn doorbell_unexpose(ep: *mut doorbell_endpoint, key: u64) -> c_int {
    guard(|| {
        // SAFETY: `ep` is NULL or a live handle (the module's contract).
        unsafe { endpoint(ep) }?.unexpose(key)?;
        Ok(DOORBELL_OK)
    })
}

/// Read `len` bytes at address `addr` of `task`, which exposed them to us
/// under `key`, into `dst`, over the TCP connection: the bytes go from the
/// socket straight into `dst`.  `dst` must stay valid, and untouched,
/// until doorbell_reads_done(window) reports `cookie`.  A request outside
/// what `key` exposes makes the owner close the connection (the read then
/// ends with PEER_LOST).
/// Errors: UNKNOWN_TASK, UNKNOWN_WINDOW, BAD_LENGTH (over max_message),
/// PEER_LOST, NETWORK, INVALID_ARGUMENT (NULL dst with len > 0).
#[no_mangle]
pub unsafe extern "C" fn doorbell_read(
    ep: *mut doorbell_endpoint,
    task: u32,
    window: u32,
    dst: *mut c_void,
    len: usize,
    addr: u64,
    key: u64,
    cookie: u64,
) -> c_int {
    guard(|| {
        // SAFETY: `ep` is NULL or a live handle (the module's contract).
        let ep = unsafe { endpoint(ep) }?;
        if dst.is_null() && len > 0 {
            return Err(Error::InvalidArgument);
        }
        // SAFETY: the caller keeps `dst` valid and untouched until the read
        // is reported (this function's contract).
        let dst = unsafe { ReadDst::new(dst as *mut u8, len) };
        ep.read(task, window, dst, addr, key, cookie)?;
        Ok(DOORBELL_OK)
    })
}

/// A read that ended: the cookie given to doorbell_read and its status
/// (DOORBELL_OK: the bytes are in place; PEER_LOST: they never will be).
#[repr(C)]
pub struct doorbell_read_result {
    pub cookie: u64,
    pub status: i32,
}

/// Move up to `max` reads (doorbell_read) and RMA operations
/// (doorbell_rma_*) of `window` that ended into `out`.  Returns how many
/// (>= 0), UNKNOWN_WINDOW, or INVALID_ARGUMENT (NULL out with max > 0).
/// One ending also notifies its window (a doorbell_wait returns).
#[no_mangle]
pub unsafe extern "C" fn doorbell_reads_done(
    ep: *mut doorbell_endpoint,
    window: u32,
    out: *mut doorbell_read_result,
    max: usize,
) -> c_int {
    guard(|| {
        // SAFETY: `ep` is NULL or a live handle (the module's contract).
        let ep = unsafe { endpoint(ep) }?;
        if out.is_null() && max > 0 {
            return Err(Error::InvalidArgument);
        }
        let mut done = [ReadDone { cookie: 0, status: Ok(()) }; 16];
        let want = max.min(done.len());
        let n = ep.reads_done(window, &mut done[..want])?;
        for (i, d) in done[..n].iter().enumerate() {
            // SAFETY: `out` holds `max` >= n writable entries (contract).
            unsafe { out.add(i).write(doorbell_read_result { cookie: d.cookie, status: status(d.status) }) };
        }
        Ok(n as c_int)
    })
}

/// 1 if data of some read arrived since the last call (a read in
/// progress, not yet reported by doorbell_reads_done), else 0; a caller
/// that waits for reads counts it as activity, not idleness.
#[no_mangle]
pub unsafe extern "C" fn doorbell_reads_moved(ep: *mut doorbell_endpoint) -> c_int {
    guard(|| {
        // SAFETY: `ep` is NULL or a live handle (the module's contract).
        Ok(unsafe { endpoint(ep) }?.reads_moved() as c_int)
    })
}

/// Let every task of the job use `len` bytes at `base` of this process's
/// memory with `access` (DOORBELL_RMA_READ | _WRITE | _ATOMIC, at least
/// one) through doorbell_rma_put/get/atomic, until doorbell_unexpose(*key_out).
/// The memory must stay valid until then.  This process's event thread
/// serves those operations, whatever its other threads do.
/// Errors: INVALID_ARGUMENT (NULL key_out, no or unknown access bits),
/// BAD_LENGTH (the range wraps).
#[no_mangle]
pub unsafe extern "C" fn doorbell_expose_rma(
    ep: *mut doorbell_endpoint,
    base: *const c_void,
    len: usize,
    access: u32,
    key_out: *mut u64,
) -> c_int {
    guard(|| {
        // SAFETY: `ep` is NULL or a live handle (the module's contract).
        let ep = unsafe { endpoint(ep) }?;
        // SAFETY: NULL or a writable u64.
        let out = unsafe { key_out.as_mut() }.ok_or(Error::InvalidArgument)?;
        *out = ep.expose_rma(base as u64, len as u64, access)?;
        Ok(DOORBELL_OK)
    })
}

/// Put `len` bytes from `src` at address `addr` of `task`, which exposed
/// it under `key` (doorbell_expose_rma) for writes, over TCP.  `src` may be
/// reused at return; doorbell_reads_done(window) reports `cookie` once the
/// bytes are in the target's memory (DOORBELL_OK), or that they will never
/// be (PEER_LOST; INVALID_ARGUMENT: outside what `key` grants).  The
/// answer is taken in by this endpoint's doorbell_progress or
/// doorbell_wait (on any window), as a read's data is, and rings `window`.
/// Errors: UNKNOWN_TASK, UNKNOWN_WINDOW, BAD_LENGTH (over 512 KiB),
/// PEER_LOST, NETWORK, WOULD_BLOCK (the channel's send queue is full: try
/// again), INVALID_ARGUMENT (NULL src with len > 0).
#[no_mangle]
pub unsafe extern "C" fn doorbell_rma_put(
    ep: *mut doorbell_endpoint,
    task: u32,
    window: u32,
    src: *const c_void,
    len: usize,
    addr: u64,
    key: u64,
    cookie: u64,
) -> c_int {
    guard(|| {
        // SAFETY: `ep` is NULL or a live handle (the module's contract).
        let ep = unsafe { endpoint(ep) }?;
        let data: &[u8] = if len == 0 {
            &[]
        } else if src.is_null() {
            return Err(Error::InvalidArgument);
        } else {
            // SAFETY: the caller's `len` readable bytes at `src`, read here only.
            unsafe { std::slice::from_raw_parts(src as *const u8, len) }
        };
        ep.rma(task, window, Op::Put { len: len as u64 }, addr, key, data, None, cookie)?;
        Ok(DOORBELL_OK)
    })
}

/// Get `len` bytes at address `addr` of `task` (exposed under `key` for
/// reads) into `dst`, over TCP.  `dst` must stay valid, and untouched,
/// until doorbell_reads_done(window) reports `cookie`.  Errors as
/// doorbell_rma_put (NULL dst with len > 0).
#[no_mangle]
pub unsafe extern "C" fn doorbell_rma_get(
    ep: *mut doorbell_endpoint,
    task: u32,
    window: u32,
    dst: *mut c_void,
    len: usize,
    addr: u64,
    key: u64,
    cookie: u64,
) -> c_int {
    guard(|| {
        // SAFETY: `ep` is NULL or a live handle (the module's contract).
        let ep = unsafe { endpoint(ep) }?;
        if dst.is_null() && len > 0 {
            return Err(Error::InvalidArgument);
        }
        // SAFETY: the caller keeps `dst` valid and untouched until the op
        // is reported (this function's contract).
        let dst = unsafe { ReadDst::new(dst as *mut u8, len) };
        ep.rma(task, window, Op::Get { len: len as u64 }, addr, key, &[], Some(dst), cookie)?;
        Ok(DOORBELL_OK)
    })
}

/// Run atomic `op` (DOORBELL_AOP_*) on the `width`-byte (4 or 8, aligned)
/// integer at address `addr` of `task` (exposed under `key` for atomics),
/// in the target's process, with its CPU's atomic instructions: atomic
/// with every other such op and with the target's own atomics there.
/// CSWAP stores `operand` if the value equals `compare`; other ops ignore
/// `compare`.  The old value goes to `result` (`width` bytes, native
/// order; NULL: not wanted), which must stay valid until
/// doorbell_reads_done(window) reports `cookie` (INVALID_ARGUMENT there:
/// misaligned, or outside what `key` grants).  Errors as doorbell_rma_put,
/// and INVALID_ARGUMENT for an unknown op or width.
#[no_mangle]
pub unsafe extern "C" fn doorbell_rma_atomic(
    ep: *mut doorbell_endpoint,
    task: u32,
    window: u32,
    op: u32,
    width: u32,
    operand: u64,
    compare: u64,
    result: *mut c_void,
    addr: u64,
    key: u64,
    cookie: u64,
) -> c_int {
    guard(|| {
        // SAFETY: `ep` is NULL or a live handle (the module's contract).
        let ep = unsafe { endpoint(ep) }?;
        if width != 4 && width != 8 {
            return Err(Error::InvalidArgument);
        }
        let width = width as u8;
        let op = if op == DOORBELL_AOP_CSWAP {
            Op::Cswap { width, compare, value: operand }
        } else {
            let aop = u8::try_from(op).ok().and_then(AtomicOp::from_u8).ok_or(Error::InvalidArgument)?;
            Op::Atomic { op: aop, width, operand }
        };
        // SAFETY: the caller keeps `result` (width bytes) valid and
        // untouched until the op is reported (this function's contract).
        let dst = (!result.is_null()).then(|| unsafe { ReadDst::new(result as *mut u8, width as usize) });
        ep.rma(task, window, op, addr, key, &[], dst, cookie)?;
        Ok(DOORBELL_OK)
    })
}

/// What the spin/sleep learner of a window knows of one path.
#[repr(C)]
pub struct doorbell_spin_stats {
    /// Waits that ended during their full spin: spinning paid.
    pub spins_paid: u64,
    /// Waits that spun their budget in vain (then slept, or spun on too long).
    pub spins_vain: u64,
    /// Full spins tried while spinning did not pay, to re-learn.
    pub probes: u64,
    /// 1: waits predicted for this path spin short now (over TCP not at
    /// all); 0: they spin the full budget.
    pub short_spin: u32,
}

/// The spin/sleep learner of `window`, for a caller that runs its own wait
/// loop (it polls, and sleeps with doorbell_wait(DOORBELL_WAIT_BLOCK)):
/// doorbell_wait in adaptive mode uses the same learner by itself.
///
/// A wait on `window` begins (the caller found nothing to do): `*spin_ns`
/// gets how many nanoseconds to spin before sleeping.  Mode
/// DOORBELL_WAIT_* (DEFAULT: the endpoint's): POLL never sleeps
/// (UINT64_MAX), BLOCK sleeps at once (0), ADAPTIVE spins up to the
/// endpoint's spin_us,
/// less on a path (that of the last message) where spinning has not paid
/// lately, probing now and then.  Call it once per wait, and
/// doorbell_spin_end when work ends the wait.  A window's learner is meant
/// for the one thread that waits on the window; any thread may call it
/// (no lock, no locked instruction, no syscall, no clock read), but waits
/// on one window by several threads at once may lose each other's lessons.
/// Errors: INVALID_ARGUMENT (NULL ep or spin_ns, unknown mode),
/// UNKNOWN_WINDOW.
#[no_mangle]
pub unsafe extern "C" fn doorbell_spin_begin(ep: *mut doorbell_endpoint, window: u32, mode: u32, spin_ns: *mut u64) -> c_int {
    guard(|| {
        // SAFETY: `ep` is NULL or a live handle (the module's contract).
        let ep = unsafe { endpoint(ep) }?;
        // SAFETY: NULL or a writable u64.
        let out = unsafe { spin_ns.as_mut() }.ok_or(Error::InvalidArgument)?;
        let mode = wait_mode(mode).ok_or(Error::InvalidArgument)?;
        *out = ep.spin_begin(window, mode)?;
        Ok(DOORBELL_OK)
    })
}

/// The wait that doorbell_spin_begin began last on `window` ended because
/// work arrived (a message, a completion): `how` is
/// DOORBELL_SPIN_ENDED_AWAKE (then `waited_ns` is the time since the wait
/// began; a recent clock read will do) or DOORBELL_SPIN_ENDED_WOKEN
/// (`waited_ns` is ignored); `flags` 0 or DOORBELL_SPIN_YIELDS.  The
/// learner finds the path that delivered from the endpoint's receive
/// counters, so the call may wait (until the caller is idle again, off the
/// way from the message to its user) but must come before anything else
/// is delivered and before the next doorbell_spin_begin.  A wait that ends
/// for no work (a timeout, a notify, a lost peer) needs no call.  Thread
/// use as doorbell_spin_begin.  Errors: INVALID_ARGUMENT (NULL ep, unknown
/// how or flags), UNKNOWN_WINDOW.
#[no_mangle]
pub unsafe extern "C" fn doorbell_spin_end(ep: *mut doorbell_endpoint, window: u32, how: u32, waited_ns: u64, flags: u32) -> c_int {
    guard(|| {
        // SAFETY: `ep` is NULL or a live handle (the module's contract).
        let ep = unsafe { endpoint(ep) }?;
        let ended = match how {
            DOORBELL_SPIN_ENDED_AWAKE => Ended::Awake { waited_ns },
            DOORBELL_SPIN_ENDED_WOKEN => Ended::Woken,
            _ => return Err(Error::InvalidArgument),
        };
        if flags & !DOORBELL_SPIN_YIELDS != 0 {
            return Err(Error::InvalidArgument);
        }
        ep.spin_end(window, ended, flags & DOORBELL_SPIN_YIELDS != 0)?;
        Ok(DOORBELL_OK)
    })
}

/// doorbell_spin_end and doorbell_spin_begin in one call, for a caller
/// that tells a wait's lesson when its next wait begins: the wait begun
/// last on `window` ended as `how` (0: nothing to tell; else with
/// `waited_ns` and `flags` as for doorbell_spin_end), and a new one begins
/// in `mode`, its spin in `*spin_ns` (as for doorbell_spin_begin).  Every
/// argument is checked before either part takes effect.  Errors: as the
/// two.
#[no_mangle]
pub unsafe extern "C" fn doorbell_spin_next(
    ep: *mut doorbell_endpoint,
    window: u32,
    how: u32,
    waited_ns: u64,
    flags: u32,
    mode: u32,
    spin_ns: *mut u64,
) -> c_int {
    guard(|| {
        // SAFETY: `ep` is NULL or a live handle (the module's contract).
        let ep = unsafe { endpoint(ep) }?;
        // SAFETY: NULL or a writable u64.
        let out = unsafe { spin_ns.as_mut() }.ok_or(Error::InvalidArgument)?;
        let mode = wait_mode(mode).ok_or(Error::InvalidArgument)?;
        let ended = match how {
            0 => None,
            DOORBELL_SPIN_ENDED_AWAKE => Some(Ended::Awake { waited_ns }),
            DOORBELL_SPIN_ENDED_WOKEN => Some(Ended::Woken),
            _ => return Err(Error::InvalidArgument),
        };
        if flags & !DOORBELL_SPIN_YIELDS != 0 {
            return Err(Error::InvalidArgument);
        }
        *out = ep.spin_next(window, ended.map(|e| (e, flags & DOORBELL_SPIN_YIELDS != 0)), mode)?;
        Ok(DOORBELL_OK)
    })
}

/// Copy what `window`'s spin/sleep learner knows of `path`
/// (DOORBELL_PATH_SHM or DOORBELL_PATH_TCP) into `*out`.  Errors:
/// INVALID_ARGUMENT (NULL ep or out, unknown path), UNKNOWN_WINDOW.
#[no_mangle]
pub unsafe extern "C" fn doorbell_spin_stats_get(
    ep: *const doorbell_endpoint,
    window: u32,
    path: u32,
    out: *mut doorbell_spin_stats,
) -> c_int {
    guard(|| {
        // SAFETY: `ep` is NULL or a live handle (the module's contract).
        let ep = unsafe { endpoint(ep) }?;
        // SAFETY: NULL or a writable doorbell_spin_stats.
        let out = unsafe { out.as_mut() }.ok_or(Error::InvalidArgument)?;
        let path = match path {
            DOORBELL_PATH_SHM => Path::Shm,
            DOORBELL_PATH_TCP => Path::Tcp,
            _ => return Err(Error::InvalidArgument),
        };
        let s = ep.spin_stats(window, path)?;
        *out = doorbell_spin_stats {
            spins_paid: s.spins_paid,
            spins_vain: s.spins_vain,
            probes: s.probes,
            short_spin: s.short_spin as u32,
        };
        Ok(DOORBELL_OK)
    })
}

/// Copy the endpoint's counters into `*out`.
#[no_mangle]
pub unsafe extern "C" fn doorbell_counters_get(ep: *const doorbell_endpoint, out: *mut doorbell_counters) -> c_int {
    guard(|| {
        // SAFETY: `ep` is NULL or a live handle (the module's contract).
        let ep = unsafe { endpoint(ep) }?;
        // SAFETY: NULL or a writable doorbell_counters.
        let out = unsafe { out.as_mut() }.ok_or(Error::InvalidArgument)?;
        *out = ep.counters();
        Ok(DOORBELL_OK)
    })
}

/// A static, NUL-terminated description of a status code; never NULL.
#[no_mangle]
pub extern "C" fn doorbell_error_string(code: c_int) -> *const c_char {
    let msg = match code {
        c if c >= 0 => c"success",
        c => error_from_code(c).map_or(c"unknown status code", Error::c_message),
    };
    msg.as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_are_distinct() {
        for e in ALL {
            let code = c_int::from(e);
            assert!(code < 0, "{e:?}");
            assert_eq!(error_from_code(code), Some(e));
        }
        let mut codes: Vec<c_int> = ALL.iter().map(|&e| e.into()).collect();
        codes.sort();
        codes.dedup();
        assert_eq!(codes.len(), ALL.len(), "two errors share a code");
        assert_eq!(error_from_code(DOORBELL_OK), None);
        assert_eq!(status(Ok(())), DOORBELL_OK);
        assert_eq!(status(Err(Error::PeerLost)), DOORBELL_ERR_PEER_LOST);
    }

    #[test]
    fn error_strings_match_the_rust_messages() {
        for e in ALL {
            // SAFETY: doorbell_error_string returns a static C string.
            let s = unsafe { CStr::from_ptr(doorbell_error_string(e.into())) };
            assert_eq!(s.to_str().unwrap(), e.message());
        }
        // SAFETY: as above.
        assert_eq!(unsafe { CStr::from_ptr(doorbell_error_string(-999)) }.to_str().unwrap(), "unknown status code");
    }

    #[test]
    fn spin_learner_calls_check_their_arguments() {
        let job = std::ffi::CString::new(format!("ffispin{}", std::process::id())).unwrap();
        let mut ep = std::ptr::null_mut();
        let mut stats = doorbell_spin_stats { spins_paid: 9, spins_vain: 9, probes: 9, short_spin: 9 };
        let mut spin = 7u64;
        // SAFETY: every pointer is NULL or points at a live local; `ep` comes
        // from doorbell_endpoint_create and is destroyed last.
        unsafe {
            let mut cfg = std::mem::zeroed::<doorbell_config>();
            assert_eq!(doorbell_config_init(&mut cfg), DOORBELL_OK);
            cfg.job = job.as_ptr();
            cfg.spin_us = 20;
            cfg.wait_mode = DOORBELL_WAIT_BLOCK;
            assert_eq!(doorbell_endpoint_create(&cfg, &mut ep), DOORBELL_OK);
            assert_eq!(doorbell_spin_begin(std::ptr::null_mut(), 0, 0, &mut spin), DOORBELL_ERR_INVALID_ARGUMENT);
            assert_eq!(doorbell_spin_begin(ep, 0, 0, std::ptr::null_mut()), DOORBELL_ERR_INVALID_ARGUMENT);
            assert_eq!(doorbell_spin_begin(ep, 0, 9, &mut spin), DOORBELL_ERR_INVALID_ARGUMENT);
            assert_eq!(doorbell_spin_begin(ep, 1, 0, &mut spin), DOORBELL_ERR_UNKNOWN_WINDOW);
            assert_eq!(spin, 7);
            // DEFAULT is the endpoint's mode.
            assert_eq!(doorbell_spin_begin(ep, 0, DOORBELL_WAIT_DEFAULT, &mut spin), DOORBELL_OK);
            assert_eq!(spin, 0);
            assert_eq!(doorbell_spin_begin(ep, 0, DOORBELL_WAIT_POLL, &mut spin), DOORBELL_OK);
            assert_eq!(spin, u64::MAX);
            assert_eq!(doorbell_spin_begin(ep, 0, DOORBELL_WAIT_ADAPTIVE, &mut spin), DOORBELL_OK);
            assert_eq!(spin, 20_000);
            assert_eq!(doorbell_spin_end(ep, 0, 3, 0, 0), DOORBELL_ERR_INVALID_ARGUMENT);
            assert_eq!(doorbell_spin_end(ep, 0, DOORBELL_SPIN_ENDED_WOKEN, 0, 2), DOORBELL_ERR_INVALID_ARGUMENT);
            assert_eq!(doorbell_spin_end(ep, 0, DOORBELL_SPIN_ENDED_WOKEN, 0, DOORBELL_SPIN_YIELDS), DOORBELL_OK);
            // spin_next: nothing left to tell (the wait above was told),
            // and a wait begins.
            assert_eq!(doorbell_spin_next(ep, 0, 0, 0, 0, DOORBELL_WAIT_ADAPTIVE, &mut spin), DOORBELL_OK);
            assert_eq!(spin, 20_000);
            // A bad argument changes nothing, not even the open wait's lesson.
            spin = 7;
            let woken = DOORBELL_SPIN_ENDED_WOKEN;
            assert_eq!(doorbell_spin_next(ep, 0, 3, 0, 0, DOORBELL_WAIT_ADAPTIVE, &mut spin), DOORBELL_ERR_INVALID_ARGUMENT);
            assert_eq!(doorbell_spin_next(ep, 0, woken, 0, 2, DOORBELL_WAIT_ADAPTIVE, &mut spin), DOORBELL_ERR_INVALID_ARGUMENT);
            assert_eq!(doorbell_spin_next(ep, 0, woken, 0, 0, 9, &mut spin), DOORBELL_ERR_INVALID_ARGUMENT);
            assert_eq!(doorbell_spin_next(ep, 0, woken, 0, 0, DOORBELL_WAIT_ADAPTIVE, std::ptr::null_mut()), DOORBELL_ERR_INVALID_ARGUMENT);
            assert_eq!(doorbell_spin_next(ep, 1, woken, 0, 0, DOORBELL_WAIT_ADAPTIVE, &mut spin), DOORBELL_ERR_UNKNOWN_WINDOW);
            assert_eq!(doorbell_spin_next(std::ptr::null_mut(), 0, woken, 0, 0, DOORBELL_WAIT_ADAPTIVE, &mut spin), DOORBELL_ERR_INVALID_ARGUMENT);
            assert_eq!(spin, 7);
            // It ends woken, yielding: one more vain wait; the next begins
            // in the endpoint's mode (BLOCK).
            assert_eq!(doorbell_spin_next(ep, 0, woken, 0, DOORBELL_SPIN_YIELDS, DOORBELL_WAIT_DEFAULT, &mut spin), DOORBELL_OK);
            assert_eq!(spin, 0);
            assert_eq!(doorbell_spin_stats_get(ep, 0, 0, &mut stats), DOORBELL_ERR_INVALID_ARGUMENT);
            assert_eq!(doorbell_spin_stats_get(ep, 0, DOORBELL_PATH_SHM, std::ptr::null_mut()), DOORBELL_ERR_INVALID_ARGUMENT);
            assert_eq!(doorbell_spin_stats_get(ep, 0, DOORBELL_PATH_SHM, &mut stats), DOORBELL_OK);
            // Yielding, the vain waits count and teach nothing.
            assert_eq!((stats.spins_paid, stats.spins_vain, stats.probes, stats.short_spin), (0, 2, 0, 0));
            assert_eq!(doorbell_endpoint_destroy(ep), DOORBELL_OK);
        }
    }
}
