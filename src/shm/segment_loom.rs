//! The shared-memory segment under `--cfg loom`: no files.  The queue's
//! model-checked tests put their queues on the heap (queue.rs
//! `QueueRef::on_heap`), and bulk buffers, the only other segments built
//! under loom, cannot be made: `Segment` has no value, and `create` and
//! `open` fail.

use crate::sys::error::{Error, Result};

/// As segment.rs: a type that may lie in shared memory.
///
/// # Safety
/// As segment.rs's `ShmSafe`.
pub unsafe trait ShmSafe {}

pub enum Owner {
    Unlocked,
}

/// A segment that cannot exist.
pub enum Segment {}

impl Segment {
    pub fn create(_dir: &str, _name: &str, _len: usize, _owner: Owner) -> Result<Option<Segment>> {
        Err(Error::Shm)
    }

    pub fn open(_dir: &str, _name: &str, _min_len: usize) -> Result<Segment> {
        Err(Error::Shm)
    }

    pub fn base(&self) -> *mut u8 {
        match *self {}
    }

    pub fn len(&self) -> usize {
        match *self {}
    }

    pub fn at<T: ShmSafe>(&self, _offset: usize) -> &T {
        match *self {}
    }

    pub fn unlink(&mut self) {
        match *self {}
    }

    pub fn set_unlink_on_drop(&mut self, _unlink: bool) {
        match *self {}
    }
}

pub fn bulk_name(job: &str, token: u64, src: u32, window: u32, generation: u32) -> String {
    format!("doorbell-{job}-{token:016x}-r{src}-w{window}-b{generation}")
}
