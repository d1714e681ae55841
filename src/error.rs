//! Errors of the core and their C status codes (one table, both directions).

#[cfg(not(loom))]
use crate::ffi;
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
    /// The C status code: the header's DOORBELL_ERR_* (ffi.rs; not built
    /// under loom).
    #[cfg(not(loom))]
    pub fn code(self) -> i32 {
        match self {
            Error::InvalidArgument => ffi::DOORBELL_ERR_INVALID_ARGUMENT,
            Error::UnknownWindow => ffi::DOORBELL_ERR_UNKNOWN_WINDOW,
            Error::UnknownTask => ffi::DOORBELL_ERR_UNKNOWN_TASK,
            Error::BadLength => ffi::DOORBELL_ERR_BAD_LENGTH,
            Error::BadAddress => ffi::DOORBELL_ERR_BAD_ADDRESS,
            Error::WouldBlock => ffi::DOORBELL_ERR_WOULD_BLOCK,
            Error::TimedOut => ffi::DOORBELL_ERR_TIMED_OUT,
            Error::PeerLost => ffi::DOORBELL_ERR_PEER_LOST,
            Error::NoShmSpace => ffi::DOORBELL_ERR_NO_SHM_SPACE,
            Error::Shm => ffi::DOORBELL_ERR_SHM,
            Error::Network => ffi::DOORBELL_ERR_NETWORK,
            Error::NoInterface => ffi::DOORBELL_ERR_NO_INTERFACE,
            Error::BufferTooSmall => ffi::DOORBELL_ERR_BUFFER_TOO_SMALL,
            Error::Internal => ffi::DOORBELL_ERR_INTERNAL,
            Error::ShmRefused => ffi::DOORBELL_ERR_SHM_REFUSED,
            Error::InUse => ffi::DOORBELL_ERR_IN_USE,
            Error::FlihFailed => ffi::DOORBELL_ERR_FLIH_FAILED,
        }
    }

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

    #[cfg(not(loom))]
    pub(crate) fn from_code(code: i32) -> Option<Error> {
        ALL.iter().copied().find(|e| e.code() == code)
    }

    /// Map a shared-memory I/O error: ENOSPC is its own code.
    pub(crate) fn shm(e: io::Error) -> Error {
        match e.raw_os_error() {
            Some(libc::ENOSPC) | Some(libc::ENOMEM) => Error::NoShmSpace,
            _ => Error::Shm,
        }
    }
}

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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_are_distinct() {
        for e in ALL {
            assert!(e.code() < 0);
            assert_eq!(Error::from_code(e.code()), Some(e));
        }
        assert_eq!(Error::from_code(0), None);
    }
}
