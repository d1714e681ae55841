//! TCP wire format after the handshake (handshake.rs): length-framed
//! messages.
//!
//! Frame header (16 B): `len u64 | window u32 | tag u8 | kind u8 | pad u16`,
//! then `len` payload bytes.  kind 0 is a message, 1 is a goodbye (FIN),
//! 2 a read request and 3 its data (remote_read.rs): for those two the
//! window field carries the read's id and the tag is 0; a request's body
//! is READ_REQUEST bytes, `addr u64 | len u64 | key u64`.  kind 4 says the
//! sender is ending the job (an abort); it has no body, window or tag.

use crate::sys::limits::MAX_WINDOWS;

pub const FRAME_HEADER: usize = 16;
pub const KIND_MESSAGE: u8 = 0;
pub const KIND_GOODBYE: u8 = 1;
pub const KIND_READ_REQUEST: u8 = 2;
pub const KIND_READ_DATA: u8 = 3;
pub const KIND_ABORT: u8 = 4;
/// The body of a read request.
pub const READ_REQUEST: usize = 24;

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
        let kind_ok = match h.kind {
            KIND_MESSAGE | KIND_GOODBYE => h.window < MAX_WINDOWS,
            KIND_READ_REQUEST => h.tag == 0 && h.len == READ_REQUEST as u64,
            KIND_READ_DATA => h.tag == 0,
            KIND_ABORT => h.len == 0 && h.window == 0 && h.tag == 0,
            _ => false,
        };
        let ok = h.len <= max_message && kind_ok && b[14] == 0 && b[15] == 0;
        ok.then_some(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip() {
        let f = FrameHeader { len: 1 << 20, window: 3, tag: 65, kind: KIND_MESSAGE };
        assert_eq!(FrameHeader::decode(&f.encode(), 1 << 30), Some(f));
        assert_eq!(FrameHeader::decode(&f.encode(), 1000), None, "oversize");
        let bad = FrameHeader { window: MAX_WINDOWS, ..f };
        assert_eq!(FrameHeader::decode(&bad.encode(), 1 << 30), None);
        // A read's frames carry its id in the window field, and no tag.
        let data = FrameHeader { window: u32::MAX, tag: 0, kind: KIND_READ_DATA, ..f };
        assert_eq!(FrameHeader::decode(&data.encode(), 1 << 30), Some(data));
        assert_eq!(FrameHeader::decode(&FrameHeader { tag: 1, ..data }.encode(), 1 << 30), None);
        let req = FrameHeader { len: READ_REQUEST as u64, window: 7, tag: 0, kind: KIND_READ_REQUEST };
        assert_eq!(FrameHeader::decode(&req.encode(), 1 << 30), Some(req));
        assert_eq!(FrameHeader::decode(&FrameHeader { len: 25, ..req }.encode(), 1 << 30), None);
        let abort = FrameHeader { len: 0, window: 0, tag: 0, kind: KIND_ABORT };
        assert_eq!(FrameHeader::decode(&abort.encode(), 1 << 30), Some(abort));
        assert_eq!(FrameHeader::decode(&FrameHeader { len: 1, ..abort }.encode(), 1 << 30), None, "an abort has no body");
        assert_eq!(FrameHeader::decode(&FrameHeader { kind: 5, ..f }.encode(), 1 << 30), None);
    }
}
