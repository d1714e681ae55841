//! The two ways a message travels: shared memory to a task on this node,
//! TCP to one elsewhere (or to a local one whose shm ring found no room).

pub(crate) mod shm;
pub(crate) mod tcp;
