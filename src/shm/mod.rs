//! Shared memory: the segments (segment.rs) and what lies in them.  A
//! task's control segment (control.rs) holds its windows' bells (bell.rs),
//! inbound queues (queue.rs, of records: record.rs) and fast boxes
//! (fbox.rs); large messages go through bulk buffers (bulk.rs).  A
//! delivered message's bytes are handed out as `SharedBytes`
//! (shared_bytes.rs), never as a slice over memory another process
//! writes.  Builds on `sys` only; knows nothing of TCP, peers or the
//! endpoint.

pub(crate) mod bell;
pub(crate) mod bulk;
#[cfg(not(loom))]
pub(crate) mod control;
pub(crate) mod fbox;
pub(crate) mod queue;
pub(crate) mod record;
#[cfg(not(loom))]
pub(crate) mod segment;
/// Under loom no file is made: a segment cannot be created (bulk.rs's
/// producer falls back to chunks), and queues lie on the heap.
#[cfg(loom)]
pub(crate) mod segment_loom;
#[cfg(loom)]
pub(crate) use segment_loom as segment;
pub(crate) mod shared_bytes;
