//! The bytes of a delivered message, as a receive callback gets them.
//!
//! A message read from shared memory (a queue record, a fast box, a bulk
//! slot) is handed over in place, without a copy: the record or slot is
//! released only after the callback returns, so a sender that keeps the
//! protocol does not change the bytes meanwhile.  But every process of the
//! user can map those files and write them at any time, and a `&[u8]` over
//! bytes that change while it lives is undefined behaviour in Rust.  So no
//! slice is ever made over them: `SharedBytes` holds the address and the
//! length, and its only ways to the bytes copy them out (into the caller's
//! buffer), or hand the address on (to C, which reads it as it likes).
//! Bytes of our own (a TCP frame, a reassembled message) come the same way.

use std::marker::PhantomData;

/// A message's bytes, valid for the callback's duration.  Read them with
/// `copy_to`, `to_vec`, `copy_into`, or a part with `copy_prefix` and
/// `copy_out`; a copy made while another process scribbles over them may
/// hold any bytes (never more or fewer).
#[derive(Clone, Copy)]
pub struct SharedBytes<'a> {
    ptr: *const u8,
    len: usize,
    /// In memory no other process maps: `with_slice` may lend it directly.
    private: bool,
    _life: PhantomData<&'a [u8]>,
}

impl<'a> SharedBytes<'a> {
    /// Bytes this process owns.
    pub fn from_slice(s: &'a [u8]) -> SharedBytes<'a> {
        SharedBytes { ptr: s.as_ptr(), len: s.len(), private: true, _life: PhantomData }
    }

    /// `len` bytes at `ptr` in shared memory.
    ///
    /// # Safety
    /// `ptr` is valid for `len` reads (inside a mapping) for `'a`.  Another
    /// process may write them meanwhile: they are only ever copied.
    pub(crate) unsafe fn shared(ptr: *const u8, len: usize) -> SharedBytes<'a> {
        SharedBytes { ptr, len, private: false, _life: PhantomData }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The address of the first byte, for code that copies them itself (the
    /// C ABI hands it to the callback).  No Rust reference may be made from it.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr
    }

    /// Copy the bytes to `dst`, which must be exactly `len()` long (as
    /// `<[u8]>::copy_from_slice`).
    pub fn copy_to(&self, dst: &mut [u8]) {
        assert_eq!(dst.len(), self.len, "copy_to: destination of another length");
        // SAFETY: `ptr` is valid for `len` reads (constructors), `dst` for
        // `len` writes; `dst` is a unique reference, so it is not the
        // message (which no `&mut` reaches).
        unsafe { std::ptr::copy_nonoverlapping(self.ptr, dst.as_mut_ptr(), self.len) };
    }

    /// Replace `v`'s contents with the bytes (keeping its allocation).
    pub fn copy_into(&self, v: &mut Vec<u8>) {
        v.clear();
        v.reserve(self.len);
        // SAFETY: `v` has capacity for `len` bytes, written here before
        // set_len; the source is valid for `len` reads (constructors).
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr, v.as_mut_ptr(), self.len);
            v.set_len(self.len);
        }
    }

    /// Are these bytes this process's own (`with_slice` lends them)?
    pub fn is_private(&self) -> bool {
        self.private
    }

    /// Copy the first `min(len(), N)` bytes into `dst`: their count.  A
    /// message at least `N` long takes a fixed-size copy (no memcpy call).
    #[inline]
    pub fn copy_prefix<const N: usize>(&self, dst: &mut [u8; N]) -> usize {
        let n = self.len.min(N);
        // SAFETY: `ptr` is valid for `len` >= n reads (constructors), `dst`
        // (a unique reference, so not the message) for N >= n writes.
        unsafe {
            if n == N {
                std::ptr::copy_nonoverlapping(self.ptr, dst.as_mut_ptr(), N);
            } else {
                std::ptr::copy_nonoverlapping(self.ptr, dst.as_mut_ptr(), n);
            }
        }
        n
    }

    /// The bytes after the first `n` (none if `n >= len()`).
    #[inline]
    pub fn skip(&self, n: usize) -> SharedBytes<'a> {
        let n = n.min(self.len);
        SharedBytes { ptr: self.ptr.wrapping_add(n), len: self.len - n, private: self.private, _life: PhantomData }
    }

    /// Copy `n` bytes from offset `at` to `dst`, memory the caller owns
    /// (a receive's buffer): the message is copied once, straight to
    /// where it goes.  Panics if `[at, at + n)` is not within the bytes.
    ///
    /// # Safety
    /// `dst` is valid for `n` writes and no reference covers them; it is
    /// not part of the message.
    #[inline]
    pub unsafe fn copy_out(&self, at: usize, dst: *mut u8, n: usize) {
        assert!(at <= self.len && n <= self.len - at, "copy_out: past the message's end");
        // SAFETY: [at, at + n) is within the `len` bytes valid for reads
        // (checked above, constructors); `dst` per the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(at), dst, n) };
    }

    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.copy_into(&mut v);
        v
    }

    /// `f` over the bytes as a slice: our own bytes directly, shared ones
    /// copied into `buf` first.
    pub fn with_slice<R>(&self, buf: &mut Vec<u8>, f: impl FnOnce(&[u8]) -> R) -> R {
        if self.private {
            // SAFETY: made by from_slice from a `&'a [u8]` that lives for
            // this call.
            f(unsafe { std::slice::from_raw_parts(self.ptr, self.len) })
        } else {
            self.copy_into(buf);
            f(buf)
        }
    }
}

impl std::fmt::Debug for SharedBytes<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedBytes").field("len", &self.len).field("private", &self.private).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_are_the_bytes_and_a_slice_is_lent_only_for_private_bytes() {
        let own = [1u8, 2, 3, 4];
        let shm = [9u8, 8, 7];
        let p = SharedBytes::from_slice(&own);
        // SAFETY: `shm` is valid for 3 reads for the test.
        let s = unsafe { SharedBytes::shared(shm.as_ptr(), shm.len()) };
        assert_eq!((p.len(), s.len()), (4, 3));
        assert_eq!(s.to_vec(), shm);
        let mut dst = [0u8; 3];
        s.copy_to(&mut dst);
        assert_eq!(dst, shm);
        let mut buf = vec![5u8; 100];
        let at = p.with_slice(&mut buf, |b| (b.as_ptr(), b.to_vec()));
        assert_eq!(at, (own.as_ptr(), own.to_vec()), "our own bytes are lent, not copied");
        let at = s.with_slice(&mut buf, |b| (b.as_ptr(), b.to_vec()));
        assert_eq!(at.1, shm);
        assert_ne!(at.0, shm.as_ptr(), "shared bytes are copied first");
        assert_eq!(buf, shm);
    }

    #[test]
    fn a_prefix_and_the_rest_are_copied_out_of_place() {
        let shm = [1u8, 2, 3, 4, 5, 6];
        // SAFETY: `shm` is valid for 6 reads for the test.
        let s = unsafe { SharedBytes::shared(shm.as_ptr(), shm.len()) };
        let mut head = [0u8; 4];
        assert_eq!(s.copy_prefix(&mut head), 4);
        assert_eq!(head, [1, 2, 3, 4]);
        let mut long = [9u8; 8];
        assert_eq!(s.copy_prefix(&mut long), 6, "a short message fills only its length");
        assert_eq!(long, [1, 2, 3, 4, 5, 6, 9, 9]);
        let rest = s.skip(4);
        assert_eq!((rest.len(), rest.is_private()), (2, false));
        assert_eq!(rest.to_vec(), [5, 6]);
        assert!(s.skip(10).is_empty());
        let mut out = [0u8; 3];
        // SAFETY: `out` holds 3 bytes of ours.
        unsafe { s.copy_out(3, out.as_mut_ptr(), 3) };
        assert_eq!(out, [4, 5, 6]);
    }

    #[test]
    #[should_panic(expected = "past the message's end")]
    fn copy_out_past_the_end_panics() {
        let mut out = [0u8; 3];
        // SAFETY: `out` holds 3 bytes of ours; the check fires first.
        unsafe { SharedBytes::from_slice(&[1, 2]).copy_out(1, out.as_mut_ptr(), 2) };
    }

    #[test]
    #[should_panic(expected = "another length")]
    fn copy_to_a_buffer_of_another_length_panics() {
        SharedBytes::from_slice(&[1, 2]).copy_to(&mut [0u8; 3]);
    }
}
