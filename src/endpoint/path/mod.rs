//! The two ways a message travels: shared memory to a task on this node,
//! TCP to one elsewhere (or to a local one whose shm ring found no room);
//! and one-sided operations over TCP, on channels of their own (rma.rs).

pub(crate) mod rma;
pub(crate) mod shm;
pub(crate) mod tcp;
