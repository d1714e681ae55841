//! The network: the TCP frame format (frame.rs), the handshake that
//! admits a connection (handshake.rs), a connection's send and receive
//! sides (tcp.rs), send batches (batch.rs), congestion control
//! (congestion.rs), single-copy remote reads (remote_read.rs) and
//! one-sided put, get and atomics (rma.rs).  Builds
//! on `sys` only; knows nothing of shared memory, peers or the endpoint.

pub(crate) mod batch;
pub(crate) mod congestion;
pub(crate) mod frame;
pub(crate) mod handshake;
pub(crate) mod remote_read;
pub(crate) mod rma;
pub(crate) mod tcp;
