//! The provider's header, carried at the front of each core message, and
//! the bodies of its two control messages.
//!
//! 24 bytes, little-endian:
//! `version u8 | kind u8 | flags u16 | source window u32 | tag u64 | data u64`
//! The source task is the core's (it comes with every delivered message).
//! After the header: the message's bytes (eager), or, with the RNDV flag,
//! a `Rndv` that names them in the sender's memory, or, with FIN, the
//! receiver's `Fin` for one of those (ep.rs, one-copy messages).

use crate::matching::Kind;

pub const HEADER_BYTES: usize = 24;
/// 2: the RNDV and FIN flags.
const VERSION: u8 = 2;
const HAS_DATA: u16 = 1;
const RNDV: u16 = 2;
const FIN: u16 = 4;
/// The core tag of every provider message.
pub const CORE_TAG: u8 = 0x46;

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

impl Header {
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut b = [0u8; HEADER_BYTES];
        b[0] = VERSION;
        b[1] = self.kind as u8;
        let body = match self.body {
            Body::Eager => 0,
            Body::Rendezvous => RNDV,
            Body::Fin => FIN,
        };
        let flags = if self.data.is_some() { HAS_DATA } else { 0 } | body;
        b[2..4].copy_from_slice(&flags.to_le_bytes());
        b[4..8].copy_from_slice(&self.src_window.to_le_bytes());
        b[8..16].copy_from_slice(&self.tag.to_le_bytes());
        b[16..24].copy_from_slice(&self.data.unwrap_or(0).to_le_bytes());
        b
    }

    /// The header and the payload after it; None if malformed.
    pub fn decode(b: &[u8]) -> Option<(Header, &[u8])> {
        let (h, payload) = b.split_first_chunk::<HEADER_BYTES>()?;
        let kind = match h[1] {
            0 => Kind::Msg,
            1 => Kind::Tagged,
            _ => return None,
        };
        let flags = u16::from_le_bytes([h[2], h[3]]);
        if h[0] != VERSION || flags & !(HAS_DATA | RNDV | FIN) != 0 {
            return None;
        }
        let body = match flags & (RNDV | FIN) {
            0 => Body::Eager,
            RNDV => Body::Rendezvous,
            FIN => Body::Fin,
            _ => return None,
        };
        let u64_at = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().expect("8 bytes"));
        let data = (flags & HAS_DATA != 0).then(|| u64_at(16));
        let src_window = u32::from_le_bytes(h[4..8].try_into().expect("4 bytes"));
        Some((Header { kind, src_window, tag: u64_at(8), data, body }, payload))
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
        let mut m = h.encode().to_vec();
        m.extend_from_slice(b"payload");
        assert_eq!(Header::decode(&m), Some((h, &b"payload"[..])));
        let h2 = Header { kind: Kind::Msg, src_window: 0, tag: 0, data: None, body: Body::Eager };
        assert_eq!(Header::decode(&h2.encode()), Some((h2, &b""[..])));
        assert_eq!(Header::decode(&m[..HEADER_BYTES - 1]), None, "short");
        let mut bad = m.clone();
        bad[0] = 9;
        assert_eq!(Header::decode(&bad), None, "version");
        let mut bad = m.clone();
        bad[1] = 2;
        assert_eq!(Header::decode(&bad), None, "kind");
        let mut bad = m.clone();
        bad[3] = 1;
        assert_eq!(Header::decode(&bad), None, "unknown flag");
        let mut bad = m;
        bad[2] |= (RNDV | FIN) as u8;
        assert_eq!(Header::decode(&bad), None, "rendezvous and fin at once");
    }

    #[test]
    fn control_bodies_round_trip_and_reject() {
        for body in [Body::Rendezvous, Body::Fin] {
            let h = Header { kind: Kind::Tagged, src_window: 1, tag: 9, data: None, body };
            assert_eq!(Header::decode(&h.encode()), Some((h, &b""[..])));
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
