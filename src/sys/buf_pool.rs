//! Reusable byte buffers for TCP frame bodies and send queues, and for the
//! shared-memory send backlog.
//!
//! A frame body or a queued send of a large message is a large allocation;
//! glibc serves those with a fresh mmap, so every frame paid page faults
//! for its pages and an munmap on free (~10% of a TCP stream's time in the
//! profile; in a two-way MPI stream, which backlogs most 128 KiB fragments,
//! page faults were a quarter of the time).  Buffers come back here after
//! use and go out again, their pages already mapped.
//!
//! Medium buffers (4-64 KiB: eager MPI fragments) come from here too.
//! malloc serves them from its heap, but a batch of them freed together
//! merges into the heap's top, which free() then trims back to the kernel
//! (brk), and the next batch faults its pages in again: a two-way stream of
//! 32 KiB messages over TCP ran at 0.3-0.45x btl tcp, and at 0.9-0.95x
//! with the trim turned off.  Only tiny buffers (below MIN) skip the pool.
//! A request takes the smallest kept buffer that fits, so small requests
//! do not use up the large buffers.  The pool is bounded in count, in the
//! size of a buffer it keeps and in the bytes it holds, so an idle endpoint
//! holds at most KEEP_BYTES (32 MiB).

use crate::sys::sync::lock;
use std::sync::Mutex;

const KEEP: usize = 256;
const KEEP_MAX: usize = 4 << 20;
const KEEP_BYTES: usize = 32 << 20;
const MIN: usize = 4 << 10;

#[derive(Default)]
pub struct BufPool(Mutex<Pool>);

#[derive(Default)]
struct Pool {
    bufs: Vec<Vec<u8>>,
    /// Sum of the kept buffers' capacities.
    bytes: usize,
}

impl BufPool {
    /// An empty buffer with room for `len` bytes.
    pub fn take(&self, len: usize) -> Vec<u8> {
        if len < MIN {
            return Vec::with_capacity(len);
        }
        let mut pool = lock(&self.0);
        let fit = pool.bufs.iter().enumerate().filter(|(_, b)| b.capacity() >= len).min_by_key(|(_, b)| b.capacity());
        let v = match fit.map(|(i, _)| i) {
            Some(i) => pool.bufs.swap_remove(i),
            None => pool.bufs.pop().unwrap_or_default(),
        };
        pool.bytes -= v.capacity();
        drop(pool);
        let mut v = v;
        v.clear();
        v.reserve(len);
        v
    }

    /// Return a buffer for reuse (dropped if the pool is full or it is huge).
    pub fn give(&self, v: Vec<u8>) {
        if v.capacity() < MIN || v.capacity() > KEEP_MAX {
            return;
        }
        let mut pool = lock(&self.0);
        if pool.bufs.len() < KEEP && pool.bytes + v.capacity() <= KEEP_BYTES {
            pool.bytes += v.capacity();
            pool.bufs.push(v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_reused_and_bounded() {
        let pool = BufPool::default();
        let a = pool.take(1 << 20);
        let ptr = a.as_ptr();
        assert!(a.capacity() >= 1 << 20 && a.is_empty());
        pool.give(a);
        let b = pool.take(MIN);
        assert_eq!(b.as_ptr(), ptr, "the big buffer serves a smaller request");
        assert!(b.is_empty());
        // The smallest buffer that fits goes out: the big one stays for a big request.
        let small = Vec::with_capacity(2 * MIN);
        let small_ptr = small.as_ptr();
        pool.give(b);
        pool.give(small);
        let fit = pool.take(MIN + 1);
        assert_eq!(fit.as_ptr(), small_ptr, "best fit");
        let big = pool.take(1 << 20);
        assert_eq!(big.as_ptr(), ptr, "the big buffer is still there");
        drop((fit, big));
        pool.give(vec![0; KEEP_MAX + 1]);
        pool.give(Vec::with_capacity(MIN - 1));
        assert!(lock(&pool.0).bufs.is_empty(), "too big and too small are not kept");
        for _ in 0..KEEP + 3 {
            pool.give(Vec::with_capacity(MIN));
        }
        assert_eq!(lock(&pool.0).bufs.len(), KEEP);
        assert_eq!(lock(&pool.0).bytes, KEEP * MIN);
        let big = std::iter::repeat_with(|| pool.take(MIN)).take(KEEP).collect::<Vec<_>>();
        assert_eq!(lock(&pool.0).bytes, 0);
        drop(big);
        for _ in 0..KEEP {
            pool.give(Vec::with_capacity(KEEP_MAX));
        }
        assert_eq!(lock(&pool.0).bytes, KEEP_BYTES, "bounded in bytes");
    }
}
