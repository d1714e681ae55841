//! Shared memory: the segments (segment.rs) and what lies in them.  A
//! task's control segment (control.rs) holds its windows' bells (bell.rs),
//! inbound queues (queue.rs, of records: record.rs) and fast boxes
//! (fbox.rs); large messages go through bulk buffers (bulk.rs).  Builds on
//! `sys` only; knows nothing of TCP, peers or the endpoint.

pub(crate) mod bell;
#[cfg(not(loom))]
pub(crate) mod bulk;
#[cfg(not(loom))]
pub(crate) mod control;
#[cfg(not(loom))]
pub(crate) mod fbox;
#[cfg(not(loom))]
pub(crate) mod queue;
#[cfg(not(loom))]
pub(crate) mod record;
#[cfg(not(loom))]
pub(crate) mod segment;
