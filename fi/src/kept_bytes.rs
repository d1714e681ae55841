//! The bytes of a message kept for later (an unexpected message's
//! payload): up to INLINE of them in place, more on the heap.
//!
//! Most unexpected messages of an MPI are small (a small collective's
//! round comes before its receive is posted): a heap block for each cost
//! its allocation and its free, ~100 instructions of a 2-rank 8 B
//! MPI_Allreduce's ~4,500 under Open MPI's `mtl ofi` (callgrind).

use std::ops::Deref;

/// Bytes kept in place: a 0-8 B MPI message with any header the MPI puts
/// before it, and a one-copy message's description (wire.rs `Rndv`).
const INLINE: usize = 46;

#[derive(Clone, PartialEq, Eq)]
pub enum KeptBytes {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Vec<u8>),
}

impl KeptBytes {
    pub fn copy_of(b: &[u8]) -> KeptBytes {
        if b.len() <= INLINE {
            let mut bytes = [0u8; INLINE];
            bytes[..b.len()].copy_from_slice(b);
            KeptBytes::Inline { len: b.len() as u8, bytes }
        } else {
            KeptBytes::Heap(b.to_vec())
        }
    }

    pub fn as_slice(&self) -> &[u8] {
        match self {
            KeptBytes::Inline { len, bytes } => &bytes[..*len as usize],
            KeptBytes::Heap(v) => v,
        }
    }
}

impl Deref for KeptBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::fmt::Debug for KeptBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_slice().fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_bytes_stay_in_place_and_large_ones_go_to_the_heap() {
        for n in [0, 1, 8, INLINE - 1, INLINE, INLINE + 1, 4096] {
            let b: Vec<u8> = (0..n).map(|i| (i * 7 + 3) as u8).collect();
            let k = KeptBytes::copy_of(&b);
            assert_eq!(k.as_slice(), &b[..], "{n} bytes");
            assert_eq!(k.len(), n);
            assert_eq!(matches!(k, KeptBytes::Inline { .. }), n <= INLINE, "{n} bytes");
        }
    }
}
