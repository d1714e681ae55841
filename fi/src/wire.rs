//! The provider's header, carried at the front of each core message.
//!
//! 24 bytes, little-endian:
//! `version u8 | kind u8 | flags u16 | source window u32 | tag u64 | data u64`
//! The source task is the core's (it comes with every delivered message).

use crate::matching::Kind;

pub const HEADER_BYTES: usize = 24;
const VERSION: u8 = 1;
const HAS_DATA: u16 = 1;
/// The core tag of every provider message.
pub const CORE_TAG: u8 = 0x46;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub src_window: u32,
    pub tag: u64,
    pub data: Option<u64>,
}

impl Header {
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut b = [0u8; HEADER_BYTES];
        b[0] = VERSION;
        b[1] = self.kind as u8;
        let flags = if self.data.is_some() { HAS_DATA } else { 0 };
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
        if h[0] != VERSION || flags & !HAS_DATA != 0 {
            return None;
        }
        let u64_at = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().expect("8 bytes"));
        let data = (flags & HAS_DATA != 0).then(|| u64_at(16));
        let src_window = u32::from_le_bytes(h[4..8].try_into().expect("4 bytes"));
        Some((Header { kind, src_window, tag: u64_at(8), data }, payload))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects() {
        let h = Header { kind: Kind::Tagged, src_window: 3, tag: 0xdead_beef_0000_0001, data: Some(42) };
        let mut m = h.encode().to_vec();
        m.extend_from_slice(b"payload");
        assert_eq!(Header::decode(&m), Some((h, &b"payload"[..])));
        let h2 = Header { kind: Kind::Msg, src_window: 0, tag: 0, data: None };
        assert_eq!(Header::decode(&h2.encode()), Some((h2, &b""[..])));
        assert_eq!(Header::decode(&m[..HEADER_BYTES - 1]), None, "short");
        let mut bad = m.clone();
        bad[0] = 9;
        assert_eq!(Header::decode(&bad), None, "version");
        let mut bad = m.clone();
        bad[1] = 2;
        assert_eq!(Header::decode(&bad), None, "kind");
        let mut bad = m;
        bad[3] = 1;
        assert_eq!(Header::decode(&bad), None, "unknown flag");
    }
}
