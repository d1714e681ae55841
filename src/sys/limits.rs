//! The fixed limits that the layouts in shared memory and on the wire are
//! sized by: both ends of a pair must agree on them.

/// Largest task id + 1.  Task ids index bitmaps in the queues (queue.rs)
/// and travel in 16 bits in record headers (record.rs).
pub const MAX_TASKS: u32 = 16384;
/// Windows a task may open: each has a bell and a queue in its control
/// segment (control.rs).
pub const MAX_WINDOWS: u32 = 16;
