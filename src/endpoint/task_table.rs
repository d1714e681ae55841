//! An insert-only map from peer id (endpoint/mod.rs) to a record, read on
//! every send.
//!
//! A lookup is one `OnceLock` load for tasks below `CHUNK` (two above)
//! and takes no lock: a read-write lock costs two locked instructions per
//! send even uncontended, which on the 8-byte shared-memory path was a
//! measurable share of the latency.
//! Records are never removed (a lost peer is marked, not forgotten), so a
//! `&T` handed out lives as long as the table.  Storage grows by chunks of
//! `CHUNK` entries, made on the first insert in them (the first chunk with
//! the table).

use crate::sys::limits::MAX_PEERS;
use crate::sys::sync::lock;
use std::sync::{Arc, Mutex, OnceLock};

const CHUNK: usize = 128;
const CHUNKS: usize = (MAX_PEERS as usize).div_ceil(CHUNK);

type Chunk<T> = Box<[OnceLock<Arc<T>>]>;

fn new_chunk<T>() -> Chunk<T> {
    (0..CHUNK).map(|_| OnceLock::new()).collect()
}

pub(crate) struct TaskTable<T> {
    /// Tasks 0..CHUNK, made with the table: a lookup there is one load of
    /// the slot, not the chunk array's line first (after a context switch
    /// each was a miss on the way to every send).
    first: Chunk<T>,
    /// The chunks of the other tasks (the first one unused).
    chunks: Box<[OnceLock<Chunk<T>>]>,
    /// Every record, in insertion order, for passes over all of them.
    all: Mutex<Vec<Arc<T>>>,
}

impl<T> Default for TaskTable<T> {
    fn default() -> Self {
        TaskTable {
            first: new_chunk(),
            chunks: (0..CHUNKS).map(|_| OnceLock::new()).collect(),
            all: Mutex::new(Vec::new()),
        }
    }
}

impl<T> TaskTable<T> {
    #[inline]
    pub fn get(&self, task: u32) -> Option<&Arc<T>> {
        let t = task as usize;
        if t < CHUNK {
            return self.first[t].get();
        }
        self.chunks.get(t / CHUNK)?.get()?[t % CHUNK].get()
    }

    /// The record of `task`, made by `make` if there is none yet (exactly
    /// one `make` wins a race; the others' results are not built).
    /// `task` must be below MAX_PEERS (callers validate peer ids first).
    pub fn get_or_insert_with(&self, task: u32, make: impl FnOnce() -> T) -> &Arc<T> {
        let t = task as usize;
        let chunk = if t < CHUNK {
            &self.first
        } else {
            self.chunks[t / CHUNK].get_or_init(new_chunk)
        };
        chunk[t % CHUNK].get_or_init(|| {
            let rec = Arc::new(make());
            lock(&self.all).push(rec.clone());
            rec
        })
    }

    /// The records now in the table, for passes that may take other locks.
    pub fn snapshot(&self) -> Vec<Arc<T>> {
        lock(&self.all).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_get_and_snapshot() {
        let t: TaskTable<u32> = TaskTable::default();
        assert!(t.get(5).is_none());
        assert_eq!(**t.get_or_insert_with(5, || 50), 50);
        // A second insert keeps the first record.
        assert_eq!(**t.get_or_insert_with(5, || 51), 50);
        assert_eq!(**t.get_or_insert_with(MAX_PEERS - 1, || 7), 7);
        assert_eq!(t.get(5).map(|v| **v), Some(50));
        assert!(t.get(4).is_none() && t.get(MAX_PEERS).is_none() && t.get(u32::MAX).is_none());
        let mut all: Vec<u32> = t.snapshot().iter().map(|v| **v).collect();
        all.sort();
        assert_eq!(all, vec![7, 50]);
    }

    #[test]
    fn racing_inserts_make_one_record() {
        let t: TaskTable<u32> = TaskTable::default();
        std::thread::scope(|s| {
            for i in 0..4 {
                let t = &t;
                s.spawn(move || {
                    for task in 0..1000 {
                        t.get_or_insert_with(task, || task * 10 + i);
                    }
                });
            }
        });
        assert_eq!(t.snapshot().len(), 1000);
        for task in 0..1000 {
            assert_eq!(**t.get(task).unwrap() / 10, task);
        }
    }
}
