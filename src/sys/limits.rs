//! The fixed limits that the layouts in shared memory and on the wire are
//! sized by: both ends of a pair must agree on them.

/// Largest task id + 1: the tasks of one job.
pub const MAX_TASKS: u32 = 16384;
/// Endpoints of other jobs (MPI's spawned or connected jobs) one endpoint
/// may meet over its life: slots of its guest table (control.rs).
pub const MAX_GUESTS: u32 = 1024;
/// Largest peer id + 1.  An endpoint calls a task of its own job by its
/// task id, and an endpoint of another job MAX_TASKS + its guest slot.
/// Peer ids index bitmaps in the queues (queue.rs) and travel in 16 bits
/// in record headers (record.rs).
pub const MAX_PEERS: u32 = MAX_TASKS + MAX_GUESTS;
/// Windows a task may open: each has a bell and a queue in its control
/// segment (control.rs).
pub const MAX_WINDOWS: u32 = 16;
