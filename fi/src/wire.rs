//! The provider's header, carried at the front of each core message, and
//! the bodies of its two control messages.
//!
//! 12 to 20 bytes, little-endian:
//! `first u8 | source window u24 | tag u64 | data (none, u32 or u64)`
//! where `first` is `body (bits 0-1) | tagged (bit 2) | data size (bits
//! 3-4: none, 4 or 8 bytes) | version (bits 5-7)`.  The source task is
//! the core's (it comes with every delivered message).  After the header:
//! the message's bytes (eager), or with the RNDV body a `Rndv` that names
//! them in the sender's memory, or with FIN the receiver's `Fin` for one
//! of those (ep.rs, one-copy messages).
//!
//! Short because a record's size decides the cache lines a message moves
//! (the core's record.rs): with the core's 8-byte record header, an 8-byte
//! message whose data fits 32 bits (Open MPI's `mtl ofi` sends the source
//! rank there) fills exactly 32 bytes, two to a line.  The fixed 24-byte
//! header this replaced made it 48, and every other message then had its
//! payload in the next line: a second cache miss, in series, for the
//! receiver.

use crate::matching::Kind;

/// The longest header: with 8 bytes of data.
pub const HEADER_MAX: usize = 20;
/// 3: the compact header above.
const VERSION: u8 = 3;
const BODY_RNDV: u8 = 1;
const BODY_FIN: u8 = 2;
const TAGGED: u8 = 1 << 2;
const DATA_SHIFT: u8 = 3;
const DATA_U32: u8 = 1;
const DATA_U64: u8 = 2;
const VERSION_SHIFT: u8 = 5;
/// The core tag of every provider message.
pub const CORE_TAG: u8 = 0x46;

/// Source windows fit in the header's 24 bits.
const _WINDOWS_FIT: () = assert!(doorbell::MAX_WINDOWS <= 1 << 24);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub src_window: u32,
    pub tag: u64,
    pub data: Option<u64>,
    pub body: Body,
}

/// What follows the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// The message's bytes.
    Eager,
    /// A `Rndv`: the receiver reads the bytes from the sender.
    Rendezvous,
    /// A `Fin`: the receiver is done with a `Rndv`'s bytes.
    Fin,
}

/// An encoded header: its first `len` bytes.
pub struct Encoded {
    b: [u8; HEADER_MAX],
    len: u8,
}

impl Encoded {
    pub fn bytes(&self) -> &[u8] {
        &self.b[..self.len as usize]
    }
}

impl Header {
    pub fn encode(&self) -> Encoded {
        let mut b = [0u8; HEADER_MAX];
        let body = match self.body {
            Body::Eager => 0,
            Body::Rendezvous => BODY_RNDV,
            Body::Fin => BODY_FIN,
        };
        let (size, n) = match self.data {
            None => (0, 0),
            Some(d) if d <= u64::from(u32::MAX) => (DATA_U32, 4),
            Some(_) => (DATA_U64, 8),
        };
        let tagged = if self.kind == Kind::Tagged { TAGGED } else { 0 };
        b[0] = body | tagged | size << DATA_SHIFT | VERSION << VERSION_SHIFT;
        // Windows are below MAX_WINDOWS (checked at compile time above).
        b[1..4].copy_from_slice(&self.src_window.to_le_bytes()[..3]);
        b[4..12].copy_from_slice(&self.tag.to_le_bytes());
        // All 8 bytes, whatever `n`: a fixed-size copy, where one of `n`
        // bytes was a memcpy call on every send; the bytes past `len` are
        // never sent.
        b[12..20].copy_from_slice(&self.data.unwrap_or(0).to_le_bytes());
        Encoded { b, len: (12 + n) as u8 }
    }

    /// The header and the payload after it; None if malformed.
    pub fn decode(b: &[u8]) -> Option<(Header, &[u8])> {
        let (h, rest) = b.split_first_chunk::<12>()?;
        if h[0] >> VERSION_SHIFT != VERSION {
            return None;
        }
        let body = match h[0] & 3 {
            0 => Body::Eager,
            BODY_RNDV => Body::Rendezvous,
            BODY_FIN => Body::Fin,
            _ => return None,
        };
        let kind = if h[0] & TAGGED != 0 { Kind::Tagged } else { Kind::Msg };
        let (data, payload) = match (h[0] >> DATA_SHIFT) & 3 {
            0 => (None, rest),
            DATA_U32 => {
                let (d, p) = rest.split_first_chunk::<4>()?;
                (Some(u64::from(u32::from_le_bytes(*d))), p)
            }
            DATA_U64 => {
                let (d, p) = rest.split_first_chunk::<8>()?;
                (Some(u64::from_le_bytes(*d)), p)
            }
            _ => return None,
        };
        let src_window = u32::from_le_bytes([h[1], h[2], h[3], 0]);
        let tag = u64::from_le_bytes(h[4..12].try_into().expect("8 bytes"));
        Some((Header { kind, src_window, tag, data, body }, payload))
    }
}

/// A message left in the sender's memory: `len` bytes at `addr` in process
/// `pid`, exposed to the receiver under `key` (core `expose`, for a read
/// over TCP when process_vm_readv cannot reach it).  32 bytes:
/// `addr u64 | len u64 | key u64 | pid u32 | 0 u32`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rndv {
    pub addr: u64,
    pub len: u64,
    pub key: u64,
    pub pid: u32,
}

pub const RNDV_BYTES: usize = 32;

impl Rndv {
    pub fn encode(&self) -> [u8; RNDV_BYTES] {
        let mut b = [0u8; RNDV_BYTES];
        b[0..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..16].copy_from_slice(&self.len.to_le_bytes());
        b[16..24].copy_from_slice(&self.key.to_le_bytes());
        b[24..28].copy_from_slice(&self.pid.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Option<Rndv> {
        let b: &[u8; RNDV_BYTES] = b.try_into().ok()?;
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        if b[28..32] != [0; 4] {
            return None;
        }
        Some(Rndv { addr: u64_at(0), len: u64_at(8), key: u64_at(16), pid: u32::from_le_bytes(b[24..28].try_into().expect("4 bytes")) })
    }
}

/// The receiver is done with the `Rndv` sent under `key`: it read the
/// bytes (`ok`), or could not (the send fails with FI_EIO).  16 bytes:
/// `key u64 | ok u32 | 0 u32`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fin {
    pub key: u64,
    pub ok: bool,
}

pub const FIN_BYTES: usize = 16;

impl Fin {
    pub fn encode(&self) -> [u8; FIN_BYTES] {
        let mut b = [0u8; FIN_BYTES];
        b[0..8].copy_from_slice(&self.key.to_le_bytes());
        b[8..12].copy_from_slice(&u32::from(self.ok).to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Option<Fin> {
        let b: &[u8; FIN_BYTES] = b.try_into().ok()?;
        let ok = match u32::from_le_bytes(b[8..12].try_into().expect("4 bytes")) {
            0 => false,
            1 => true,
            _ => return None,
        };
        (b[12..16] == [0; 4]).then(|| Fin { key: u64::from_le_bytes(b[0..8].try_into().expect("8 bytes")), ok })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects() {
        let h = Header { kind: Kind::Tagged, src_window: 3, tag: 0xdead_beef_0000_0001, data: Some(42), body: Body::Eager };
        let mut m = h.encode().bytes().to_vec();
        assert_eq!(m.len(), 16, "data that fits 32 bits takes 4 bytes");
        m.extend_from_slice(b"payload");
        assert_eq!(Header::decode(&m), Some((h, &b"payload"[..])));
        let h2 = Header { kind: Kind::Msg, src_window: 0, tag: 0, data: None, body: Body::Eager };
        assert_eq!(h2.encode().bytes().len(), 12);
        assert_eq!(Header::decode(h2.encode().bytes()), Some((h2, &b""[..])));
        let h3 = Header { data: Some(u64::MAX - 5), src_window: 15, ..h };
        assert_eq!(h3.encode().bytes().len(), HEADER_MAX);
        assert_eq!(Header::decode(h3.encode().bytes()), Some((h3, &b""[..])));
        assert_eq!(Header::decode(&m[..11]), None, "short");
        assert_eq!(Header::decode(&m[..15]), None, "short of its data");
        let mut bad = m.clone();
        bad[0] = 2;
        assert_eq!(Header::decode(&bad), None, "the fixed 24-byte header of version 2");
        let mut bad = m.clone();
        bad[0] |= 3;
        assert_eq!(Header::decode(&bad), None, "unknown body");
        let mut bad = m;
        bad[0] |= 3 << DATA_SHIFT;
        assert_eq!(Header::decode(&bad), None, "unknown data size");
    }

    /// An 8-byte message with Open MPI's 32-bit data fills a 32-byte
    /// record with the core's 8-byte record header: never split over two
    /// cache lines.
    #[test]
    fn small_message_fills_half_a_line() {
        let h = Header { kind: Kind::Tagged, src_window: 1, tag: u64::MAX, data: Some(u64::from(u32::MAX)), body: Body::Eager };
        assert_eq!(8 + h.encode().bytes().len() + 8, 32);
    }

    #[test]
    fn control_bodies_round_trip_and_reject() {
        for body in [Body::Rendezvous, Body::Fin] {
            let h = Header { kind: Kind::Tagged, src_window: 1, tag: 9, data: None, body };
            assert_eq!(Header::decode(h.encode().bytes()), Some((h, &b""[..])));
        }
        let r = Rndv { addr: 0x7fff_0000_1000, len: 1 << 20, key: 0x1234_5678_9abc_def0, pid: 4242 };
        assert_eq!(Rndv::decode(&r.encode()), Some(r));
        assert_eq!(Rndv::decode(&r.encode()[..RNDV_BYTES - 1]), None, "short");
        let mut bad = r.encode();
        bad[30] = 1;
        assert_eq!(Rndv::decode(&bad), None, "reserved bytes");
        for ok in [true, false] {
            let f = Fin { key: 77, ok };
            assert_eq!(Fin::decode(&f.encode()), Some(f));
        }
        let mut bad = Fin { key: 1, ok: true }.encode();
        bad[8] = 2;
        assert_eq!(Fin::decode(&bad), None, "status");
        assert_eq!(Fin::decode(&[0; FIN_BYTES + 1]), None, "long");
    }
}
