//! The core's errors: one enum for every floor, at the bottom so that each
//! can use it.  The C ABI gives each its status code (abi/ffi.rs); nothing
//! below it knows the numbers.

use std::fmt;
use std::io;

/// A shared-memory structure that broke its format: written wrong by a
/// broken or hostile process.  The peer it came from is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Corrupt {
    /// The header of a window queue (its tail, head or lock): found by a
    /// sender, or by the queue's receiver (a tail moved ahead, which drops
    /// every local sender to that window).
    QueueHeader,
    /// A fast box (a record in it, or its header), found by its receiver
    /// or by its sender.
    FastBox,
    /// A record in a window queue (or the bulk buffer it names), found by
    /// the receiver.
    Record,
}

impl Corrupt {
    /// What broke, as a phrase ("a fast box").
    pub fn what(self) -> &'static str {
        match self {
            Corrupt::QueueHeader => "a window queue's header",
            Corrupt::FastBox => "a fast box",
            Corrupt::Record => "a record in a window queue",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    InvalidArgument,
    UnknownWindow,
    UnknownTask,
    BadLength,
    BadAddress,
    WouldBlock,
    TimedOut,
    PeerLost,
    NoShmSpace,
    Shm,
    Network,
    NoInterface,
    BufferTooSmall,
    Internal,
    ShmRefused,
    InUse,
    FlihFailed,
    /// Every slot of a guest table (control.rs) is taken: this endpoint,
    /// or the peer, met MAX_GUESTS endpoints of other jobs already.
    TooManyPeers,
    /// Shared memory from a peer broke its format (`Woke::PeerCorrupt`
    /// names the peer).
    Corrupt(Corrupt),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn message(self) -> &'static str {
        self.c_message().to_str().expect("messages are ASCII")
    }

    /// The message as a C string, for doorbell_error_string.
    pub(crate) fn c_message(self) -> &'static std::ffi::CStr {
        match self {
            Error::InvalidArgument => c"invalid argument (null pointer or bad configuration value)",
            Error::UnknownWindow => c"unknown window: not open at the receiver",
            Error::UnknownTask => c"unknown task: never connected",
            Error::BadLength => c"bad length: larger than max_message",
            Error::BadAddress => c"malformed address blob, or another address for a task already connected",
            Error::WouldBlock => c"send backlog full: progress, then retry",
            Error::TimedOut => c"timed out",
            Error::PeerLost => c"peer task lost (exited, killed or hung up)",
            Error::NoShmSpace => c"no space left in the shared-memory directory",
            Error::Shm => c"shared-memory failure",
            Error::Network => c"network failure",
            Error::NoInterface => c"no network interface matches if_include/if_exclude",
            Error::BufferTooSmall => c"buffer too small",
            Error::Internal => c"internal error (a bug; please report)",
            Error::ShmRefused => {
                c"refused a file in the shared-memory directory: a symbolic link, not this user's, or open to group/other (named on stderr)"
            }
            Error::InUse => {
                c"job key and task in use by a live endpoint on this node: pass a job key of your own (the file is named on stderr)"
            }
            Error::FlihFailed => {
                c"the endpoint's event thread failed (reason on stderr): TCP wake-ups and lost-peer reports stopped; destroy the endpoint"
            }
            Error::TooManyPeers => {
                c"too many peers of other jobs: an endpoint meets at most 1024 endpoints of other jobs over its life"
            }
            Error::Corrupt(Corrupt::QueueHeader) => {
                c"shared memory corrupt: the header of a window queue broke its format; the peer is dropped"
            }
            Error::Corrupt(Corrupt::FastBox) => {
                c"shared memory corrupt: a peer's fast box broke its format; the peer is dropped"
            }
            Error::Corrupt(Corrupt::Record) => {
                c"shared memory corrupt: a record in a window queue broke its format; its senders are dropped"
            }
        }
    }

    /// Map a shared-memory I/O error: ENOSPC is its own code.
    pub(crate) fn shm(e: io::Error) -> Error {
        match e.raw_os_error() {
            Some(libc::ENOSPC) | Some(libc::ENOMEM) => Error::NoShmSpace,
            _ => Error::Shm,
        }
    }
}

/// Every error, for the C ABI's table of codes and its tests.
pub const ALL: [Error; 21] = [
    Error::InvalidArgument,
    Error::UnknownWindow,
    Error::UnknownTask,
    Error::BadLength,
    Error::BadAddress,
    Error::WouldBlock,
    Error::TimedOut,
    Error::PeerLost,
    Error::NoShmSpace,
    Error::Shm,
    Error::Network,
    Error::NoInterface,
    Error::BufferTooSmall,
    Error::Internal,
    Error::ShmRefused,
    Error::InUse,
    Error::FlihFailed,
    Error::TooManyPeers,
    Error::Corrupt(Corrupt::QueueHeader),
    Error::Corrupt(Corrupt::FastBox),
    Error::Corrupt(Corrupt::Record),
];

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for Error {}
