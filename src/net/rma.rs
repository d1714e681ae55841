//! One-sided operations over TCP: put, get and atomics on memory a peer
//! exposed, carried on an *RMA channel* (a connection of its own, opened
//! with the handshake's RMA bit) and served by the owner's event thread,
//! whatever its application threads do: compute, sleep or progress.
//!
//! Each request and reply is one message frame (frame.rs, window 0) whose
//! tag says what it is and whose body starts with a fixed header:
//!
//! ```text
//! request (REQUEST bytes): id u32 | op u8 | width u8 | pad u16 | addr u64 | key u64 | a u64 | b u64
//!                          then, for a put, the data
//!   get: a = length;  atomic: a = operand;  compare-and-swap: a = compare, b = value
//! reply   (REPLY bytes):   id u32 | status u32 | result u64
//!                          then, for a get, the data
//! ```
//!
//! Atomics run as the CPU's own atomic instructions on the owner's memory,
//! so they are atomic with each other (from any channel) and with the
//! owner's own atomics on that memory.

use crate::sys::error::{Error, Result};
use std::sync::atomic::{AtomicI32, AtomicI64, Ordering};

pub const TAG_PUT: u8 = 1;
pub const TAG_GET: u8 = 2;
pub const TAG_ATOMIC: u8 = 3;
pub const TAG_CSWAP: u8 = 4;
pub const TAG_REPLY: u8 = 5;
pub const REQUEST: usize = 40;
pub const REPLY: usize = 16;

/// Reply statuses.
pub const STATUS_OK: u32 = 0;
/// Outside what the key exposes, or without the access it needs.
pub const STATUS_DENIED: u32 = 1;
/// A misaligned atomic, an unknown op or width.
pub const STATUS_INVALID: u32 = 2;

/// The atomic operations (the C ABI's DOORBELL_AOP_*).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum AtomicOp {
    Add = 1,
    And = 2,
    Or = 3,
    Xor = 4,
    Swap = 5,
    /// Signed minimum and maximum.
    Min = 6,
    Max = 7,
}

impl AtomicOp {
    pub fn from_u8(v: u8) -> Option<AtomicOp> {
        use AtomicOp::*;
        [Add, And, Or, Xor, Swap, Min, Max].into_iter().find(|o| *o as u8 == v)
    }
}

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Put { len: u64 },
    Get { len: u64 },
    Atomic { op: AtomicOp, width: u8, operand: u64 },
    Cswap { width: u8, compare: u64, value: u64 },
}

/// The access an exposure must grant for each kind of request.
pub const ACCESS_READ: u32 = 1;
pub const ACCESS_WRITE: u32 = 2;
pub const ACCESS_ATOMIC: u32 = 4;

impl Op {
    pub fn tag(&self) -> u8 {
        match self {
            Op::Put { .. } => TAG_PUT,
            Op::Get { .. } => TAG_GET,
            Op::Atomic { .. } => TAG_ATOMIC,
            Op::Cswap { .. } => TAG_CSWAP,
        }
    }

    /// Bytes of the owner's memory it touches.
    pub fn span(&self) -> u64 {
        match *self {
            Op::Put { len } | Op::Get { len } => len,
            Op::Atomic { width, .. } | Op::Cswap { width, .. } => width as u64,
        }
    }

    pub fn access(&self) -> u32 {
        match self {
            Op::Put { .. } => ACCESS_WRITE,
            Op::Get { .. } => ACCESS_READ,
            Op::Atomic { .. } | Op::Cswap { .. } => ACCESS_ATOMIC,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub id: u32,
    pub addr: u64,
    pub key: u64,
    pub op: Op,
}

impl Request {
    pub fn header(&self) -> [u8; REQUEST] {
        let mut b = [0u8; REQUEST];
        b[0..4].copy_from_slice(&self.id.to_le_bytes());
        let (code, width, a, c) = match self.op {
            Op::Put { len } => (0, 0, len, 0),
            Op::Get { len } => (0, 0, len, 0),
            Op::Atomic { op, width, operand } => (op as u8, width, operand, 0),
            Op::Cswap { width, compare, value } => (0, width, compare, value),
        };
        b[4] = code;
        b[5] = width;
        b[8..16].copy_from_slice(&self.addr.to_le_bytes());
        b[16..24].copy_from_slice(&self.key.to_le_bytes());
        b[24..32].copy_from_slice(&a.to_le_bytes());
        b[32..40].copy_from_slice(&c.to_le_bytes());
        b
    }

    /// A request frame's (tag, body): the request and, for a put, its
    /// data.  None for anything we could not have sent.
    pub fn decode(tag: u8, body: &[u8]) -> Option<(Request, &[u8])> {
        let (h, data) = (body.get(..REQUEST)?, &body[REQUEST..]);
        let word = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().unwrap());
        let id = u32::from_le_bytes(h[0..4].try_into().unwrap());
        let (code, width) = (h[4], h[5]);
        let width_ok = width == 4 || width == 8;
        let op = match tag {
            TAG_PUT if word(24) == data.len() as u64 => Op::Put { len: word(24) },
            TAG_GET if data.is_empty() => Op::Get { len: word(24) },
            TAG_ATOMIC if data.is_empty() && width_ok => {
                Op::Atomic { op: AtomicOp::from_u8(code)?, width, operand: word(24) }
            }
            TAG_CSWAP if data.is_empty() && width_ok => Op::Cswap { width, compare: word(24), value: word(32) },
            _ => return None,
        };
        if h[6] != 0 || h[7] != 0 {
            return None;
        }
        Some((Request { id, addr: word(8), key: word(16), op }, data))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    pub id: u32,
    pub status: u32,
    pub result: u64,
}

impl Reply {
    pub fn header(&self) -> [u8; REPLY] {
        let mut b = [0u8; REPLY];
        b[0..4].copy_from_slice(&self.id.to_le_bytes());
        b[4..8].copy_from_slice(&self.status.to_le_bytes());
        b[8..16].copy_from_slice(&self.result.to_le_bytes());
        b
    }

    /// A reply's header and, for a get, its data.
    pub fn decode(body: &[u8]) -> Option<(Reply, &[u8])> {
        let h = body.get(..REPLY)?;
        let r = Reply {
            id: u32::from_le_bytes(h[0..4].try_into().unwrap()),
            status: u32::from_le_bytes(h[4..8].try_into().unwrap()),
            result: u64::from_le_bytes(h[8..16].try_into().unwrap()),
        };
        Some((r, &body[REPLY..]))
    }
}

/// Run an atomic on this process's memory at `addr`; returns the value it
/// held before (zero-extended for 4 bytes).  A compare-and-swap is `Cswap`.
///
/// # Safety
/// `addr` must be valid for atomic reads and writes of `width` bytes for
/// the call, as memory this process exposed for atomics (remote_read.rs
/// `Region`).  Concurrent plain accesses to it are the exposing program's
/// business (MPI forbids them against an atomic in the same epoch).
pub unsafe fn apply_atomic(addr: u64, op: &Op) -> Result<u64> {
    let width = match *op {
        Op::Atomic { width, .. } | Op::Cswap { width, .. } => width,
        _ => return Err(Error::InvalidArgument),
    };
    if addr % width as u64 != 0 {
        return Err(Error::InvalidArgument);
    }
    const O: Ordering = Ordering::SeqCst;
    if width == 8 {
        // SAFETY: valid, 8-byte aligned (checked) and ours to modify
        // atomically (this function's contract).
        let a = unsafe { AtomicI64::from_ptr(addr as *mut i64) };
        let old = match *op {
            Op::Cswap { compare, value, .. } => match a.compare_exchange(compare as i64, value as i64, O, O) {
                Ok(v) | Err(v) => v,
            },
            Op::Atomic { op, operand, .. } => {
                let v = operand as i64;
                match op {
                    AtomicOp::Add => a.fetch_add(v, O),
                    AtomicOp::And => a.fetch_and(v, O),
                    AtomicOp::Or => a.fetch_or(v, O),
                    AtomicOp::Xor => a.fetch_xor(v, O),
                    AtomicOp::Swap => a.swap(v, O),
                    AtomicOp::Min => a.fetch_min(v, O),
                    AtomicOp::Max => a.fetch_max(v, O),
                }
            }
            _ => unreachable!(),
        };
        return Ok(old as u64);
    }
    // SAFETY: as above, for 4 bytes.
    let a = unsafe { AtomicI32::from_ptr(addr as *mut i32) };
    let old = match *op {
        Op::Cswap { compare, value, .. } => match a.compare_exchange(compare as i32, value as i32, O, O) {
            Ok(v) | Err(v) => v,
        },
        Op::Atomic { op, operand, .. } => {
            let v = operand as i32;
            match op {
                AtomicOp::Add => a.fetch_add(v, O),
                AtomicOp::And => a.fetch_and(v, O),
                AtomicOp::Or => a.fetch_or(v, O),
                AtomicOp::Xor => a.fetch_xor(v, O),
                AtomicOp::Swap => a.swap(v, O),
                AtomicOp::Min => a.fetch_min(v, O),
                AtomicOp::Max => a.fetch_max(v, O),
            }
        }
        _ => unreachable!(),
    };
    Ok(old as u32 as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_and_reject_what_we_never_send() {
        let put = Request { id: 7, addr: 0x1000, key: 3, op: Op::Put { len: 5 } };
        let mut body = put.header().to_vec();
        body.extend_from_slice(b"hello");
        assert_eq!(Request::decode(TAG_PUT, &body), Some((put, &b"hello"[..])));
        assert_eq!(Request::decode(TAG_PUT, &body[..body.len() - 1]), None, "data shorter than its length");
        assert_eq!(Request::decode(TAG_GET, &body), None, "a get has no data");
        let fop = Request { id: 1, addr: 8, key: 2, op: Op::Atomic { op: AtomicOp::Max, width: 4, operand: 9 } };
        assert_eq!(Request::decode(TAG_ATOMIC, &fop.header()), Some((fop, &[][..])));
        let mut bad = fop.header();
        bad[5] = 2;
        assert_eq!(Request::decode(TAG_ATOMIC, &bad), None, "width 2");
        bad = fop.header();
        bad[4] = 99;
        assert_eq!(Request::decode(TAG_ATOMIC, &bad), None, "unknown op");
        let cas = Request { id: 2, addr: 16, key: 2, op: Op::Cswap { width: 8, compare: 1, value: 2 } };
        assert_eq!(Request::decode(TAG_CSWAP, &cas.header()), Some((cas, &[][..])));
        assert_eq!(Request::decode(TAG_REPLY, &cas.header()), None);
        assert_eq!(Request::decode(TAG_CSWAP, &cas.header()[..REQUEST - 1]), None);
        let r = Reply { id: 4, status: STATUS_DENIED, result: u64::MAX };
        assert_eq!(Reply::decode(&r.header()), Some((r, &[][..])));
    }

    #[test]
    fn atomics_do_what_they_say_at_both_widths() {
        let mut w: i64 = 10;
        let a = &mut w as *mut i64 as u64;
        let at = |op, operand| Op::Atomic { op, width: 8, operand };
        // SAFETY: `w` is a live, aligned local for every call below.
        unsafe {
            assert_eq!(apply_atomic(a, &at(AtomicOp::Add, 5)), Ok(10));
            assert_eq!(apply_atomic(a, &at(AtomicOp::Min, (-3i64) as u64)), Ok(15));
            assert_eq!(apply_atomic(a, &at(AtomicOp::Max, 7)), Ok((-3i64) as u64));
            assert_eq!(apply_atomic(a, &at(AtomicOp::Xor, 1)), Ok(7));
            assert_eq!(apply_atomic(a, &Op::Cswap { width: 8, compare: 5, value: 1 }), Ok(6), "no swap: 6 != 5");
            assert_eq!(apply_atomic(a, &Op::Cswap { width: 8, compare: 6, value: 42 }), Ok(6));
            assert_eq!(apply_atomic(a + 1, &at(AtomicOp::Add, 1)), Err(Error::InvalidArgument), "misaligned");
        }
        assert_eq!(w, 42);
        let mut pair: [i32; 2] = [-1, 100];
        let b = &mut pair[1] as *mut i32 as u64;
        // SAFETY: `pair` is a live, aligned local.
        unsafe {
            assert_eq!(apply_atomic(b, &Op::Atomic { op: AtomicOp::Add, width: 4, operand: (-1i32) as u32 as u64 }), Ok(100));
            assert_eq!(apply_atomic(b, &Op::Atomic { op: AtomicOp::Min, width: 4, operand: (-5i32) as u32 as u64 }), Ok(99));
        }
        assert_eq!(pair, [-1, -5], "4-byte ops leave the neighbour alone");
    }
}
