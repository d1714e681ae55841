//! The address vector's lookups without its lock.
//!
//! Every send turns its `fi_addr_t` into a (task, window), and every
//! receive its sender back into an `fi_addr_t`.  Through the AV's RwLock
//! each took two locked instructions, under the endpoint's binding lock
//! two more.  `AvIndex` keeps both maps in atomic words, written only under
//! the AV's write lock (insert, remove) and read with one load each:
//! - forward: `fi_addr_t` -> (task, window), for the first
//!   `CHUNKS * CHUNK` addresses;
//! - reverse: task -> the `fi_addr_t` its window 0 was first inserted as,
//!   for the first `CHUNKS * CHUNK` tasks (other windows: the table).
//!
//! A word is 0 when empty.  A reader may see an insert or a remove a
//! moment late, as it could have read the table just before the lock was
//! taken.

use crate::matching::Source;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

const CHUNK: usize = 4096;
const CHUNKS: usize = 256;

/// Words allocated a chunk at a time, on first use.
struct Words {
    chunks: [OnceLock<Box<[AtomicU64]>>; CHUNKS],
}

impl Default for Words {
    fn default() -> Words {
        Words { chunks: std::array::from_fn(|_| OnceLock::new()) }
    }
}

impl Words {
    #[inline]
    fn get(&self, i: usize) -> u64 {
        match self.chunks.get(i / CHUNK).and_then(OnceLock::get) {
            Some(c) => c[i % CHUNK].load(Ordering::Acquire),
            None => 0,
        }
    }

    /// False if `i` is past what the words cover.
    fn set(&self, i: usize, v: u64) -> bool {
        let Some(slot) = self.chunks.get(i / CHUNK) else { return false };
        let c = slot.get_or_init(|| (0..CHUNK).map(|_| AtomicU64::new(0)).collect());
        c[i % CHUNK].store(v, Ordering::Release);
        true
    }
}

#[derive(Default)]
pub struct AvIndex {
    forward: Words,
    reverse: Words,
}

fn pack(s: Source) -> u64 {
    (u64::from(s.task) + 1) << 32 | u64::from(s.window)
}

impl AvIndex {
    /// Where `addr` goes: Some(Some(src)) if known here, Some(None) if
    /// surely not inserted (or removed), None if past the index (ask the
    /// table).
    #[inline]
    pub fn source_of(&self, addr: u64) -> Option<Option<Source>> {
        let i = usize::try_from(addr).ok().filter(|&i| i < CHUNK * CHUNKS)?;
        let w = self.forward.get(i);
        // A task above u32::MAX - 1 is never packed (`inserted`).
        Some((w != 0).then(|| Source { task: ((w >> 32) - 1) as u32, window: w as u32 }))
    }

    /// The `fi_addr_t` a message from `src` reports, if known here.
    pub fn addr_of(&self, src: Source) -> Option<u64> {
        if src.window != 0 {
            return None;
        }
        let w = self.reverse.get(src.task as usize);
        (w != 0).then(|| w - 1)
    }

    /// `src` was inserted as `index` (under the AV's write lock), and is
    /// the first insertion of its (task, window) if `first`.
    pub fn inserted(&self, src: Source, index: u64, first: bool) {
        if src.task == u32::MAX {
            return;
        }
        if let Ok(i) = usize::try_from(index) {
            self.forward.set(i, pack(src));
        }
        if first && src.window == 0 {
            self.reverse.set(src.task as usize, index + 1);
        }
    }

    /// `index` (which named `src`) was removed; the table now reports
    /// `src` as `next`.  Under the AV's write lock.
    pub fn removed(&self, src: Source, index: u64, next: Option<u64>) {
        if let Ok(i) = usize::try_from(index) {
            self.forward.set(i, 0);
        }
        if src.window == 0 && src.task != u32::MAX {
            self.reverse.set(src.task as usize, next.map_or(0, |n| n + 1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inserts_and_removes_show_in_both_directions() {
        let x = AvIndex::default();
        let a = Source { task: 7, window: 0 };
        let b = Source { task: 7, window: 3 };
        assert_eq!(x.source_of(0), Some(None));
        x.inserted(a, 0, true);
        x.inserted(b, 1, true);
        x.inserted(a, 5000, false);
        assert_eq!(x.source_of(0), Some(Some(a)));
        assert_eq!(x.source_of(1), Some(Some(b)));
        assert_eq!(x.source_of(5000), Some(Some(a)), "a second chunk");
        assert_eq!(x.addr_of(a), Some(0), "the first insertion");
        assert_eq!(x.addr_of(b), None, "other windows: the table");
        x.removed(a, 0, Some(5000));
        assert_eq!(x.source_of(0), Some(None));
        assert_eq!(x.addr_of(a), Some(5000));
        x.removed(a, 5000, None);
        assert_eq!(x.addr_of(a), None);
        assert_eq!(x.source_of((CHUNK * CHUNKS) as u64), None, "past the index");
        assert_eq!(x.source_of(u64::MAX), None);
    }
}
