//! Errors of the core and their C status codes (one table, both directions).

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
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// The C status code (DOORBELL_ERR_* in doorbell.h).
    pub fn code(self) -> i32 {
        match self {
            Error::InvalidArgument => -1,
            Error::UnknownWindow => -2,
            Error::UnknownTask => -3,
            Error::BadLength => -4,
            Error::BadAddress => -5,
            Error::WouldBlock => -6,
            Error::TimedOut => -7,
            Error::PeerLost => -8,
            Error::NoShmSpace => -9,
            Error::Shm => -10,
            Error::Network => -11,
            Error::NoInterface => -12,
            Error::BufferTooSmall => -13,
            Error::Internal => -14,
        }
    }

    pub fn message(self) -> &'static str {
        match self {
            Error::InvalidArgument => "invalid argument (null pointer or bad configuration value)",
            Error::UnknownWindow => "unknown window: not open at the receiver",
            Error::UnknownTask => "unknown task: never connected",
            Error::BadLength => "bad length: larger than max_message",
            Error::BadAddress => "malformed or foreign address blob",
            Error::WouldBlock => "send backlog full: progress, then retry",
            Error::TimedOut => "timed out",
            Error::PeerLost => "peer task lost (exited, killed or hung up)",
            Error::NoShmSpace => "no space left in the shared-memory directory",
            Error::Shm => "shared-memory failure",
            Error::Network => "network failure",
            Error::NoInterface => "no network interface matches if_include/if_exclude",
            Error::BufferTooSmall => "buffer too small",
            Error::Internal => "internal error (a bug; please report)",
        }
    }

    pub fn from_code(code: i32) -> Option<Error> {
        ALL.iter().copied().find(|e| e.code() == code)
    }

    /// Map a shared-memory I/O error: ENOSPC is its own code.
    pub fn shm(e: io::Error) -> Error {
        match e.raw_os_error() {
            Some(libc::ENOSPC) | Some(libc::ENOMEM) => Error::NoShmSpace,
            _ => Error::Shm,
        }
    }
}

pub const ALL: [Error; 14] = [
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
];

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
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
