//! The core's errors: one enum for every floor, at the bottom so that each
//! can use it.  The C ABI gives each its status code (abi/ffi.rs); nothing
//! below it knows the numbers.

use std::fmt;
use std::io;

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
            Error::BadAddress => c"malformed or foreign address blob",
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
pub const ALL: [Error; 17] = [
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
];

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for Error {}
