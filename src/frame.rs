//! TCP wire format: a hello on connect, then length-framed messages.
//!
//! Hello (24 B): `magic "DOORBELL" | version u32 | task u32 | job_hash u64`.
//! Frame header (16 B): `len u64 | window u32 | tag u8 | kind u8 | pad u16`,
//! then `len` payload bytes.  kind 0 is a message, 1 is a goodbye (FIN).

use crate::config::MAX_WINDOWS;

pub const HELLO_BYTES: usize = 24;
pub const FRAME_HEADER: usize = 16;
const HELLO_MAGIC: &[u8; 8] = b"DOORBELL";
const VERSION: u32 = 1;
pub const KIND_MESSAGE: u8 = 0;
pub const KIND_GOODBYE: u8 = 1;

pub fn hello(task: u32, job_hash: u64) -> [u8; HELLO_BYTES] {
    let mut b = [0u8; HELLO_BYTES];
    b[0..8].copy_from_slice(HELLO_MAGIC);
    b[8..12].copy_from_slice(&VERSION.to_le_bytes());
    b[12..16].copy_from_slice(&task.to_le_bytes());
    b[16..24].copy_from_slice(&job_hash.to_le_bytes());
    b
}

/// The task of a valid hello for our job, or None for a stranger.
pub fn parse_hello(b: &[u8; HELLO_BYTES], job_hash: u64, max_tasks: u32) -> Option<u32> {
    let task = u32::from_le_bytes(b[12..16].try_into().unwrap());
    let ok = &b[0..8] == HELLO_MAGIC
        && u32::from_le_bytes(b[8..12].try_into().unwrap()) == VERSION
        && u64::from_le_bytes(b[16..24].try_into().unwrap()) == job_hash
        && task < max_tasks;
    ok.then_some(task)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub len: u64,
    pub window: u32,
    pub tag: u8,
    pub kind: u8,
}

impl FrameHeader {
    pub fn encode(&self) -> [u8; FRAME_HEADER] {
        let mut b = [0u8; FRAME_HEADER];
        b[0..8].copy_from_slice(&self.len.to_le_bytes());
        b[8..12].copy_from_slice(&self.window.to_le_bytes());
        b[12] = self.tag;
        b[13] = self.kind;
        b
    }

    /// None if the header is not one we could have sent.
    pub fn decode(b: &[u8; FRAME_HEADER], max_message: u64) -> Option<FrameHeader> {
        let h = FrameHeader {
            len: u64::from_le_bytes(b[0..8].try_into().unwrap()),
            window: u32::from_le_bytes(b[8..12].try_into().unwrap()),
            tag: b[12],
            kind: b[13],
        };
        let ok = h.len <= max_message && h.window < MAX_WINDOWS && h.kind <= KIND_GOODBYE && b[14] == 0 && b[15] == 0;
        ok.then_some(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_and_header_round_trip() {
        let h = hello(5, 77);
        assert_eq!(parse_hello(&h, 77, 100), Some(5));
        assert_eq!(parse_hello(&h, 78, 100), None, "another job");
        assert_eq!(parse_hello(&[b'x'; HELLO_BYTES], 77, 100), None, "garbage");
        let f = FrameHeader { len: 1 << 20, window: 3, tag: 65, kind: KIND_MESSAGE };
        assert_eq!(FrameHeader::decode(&f.encode(), 1 << 30), Some(f));
        assert_eq!(FrameHeader::decode(&f.encode(), 1000), None, "oversize");
        let bad = FrameHeader { window: MAX_WINDOWS, ..f };
        assert_eq!(FrameHeader::decode(&bad.encode(), 1 << 30), None);
    }
}
