//! The address blob a task publishes (the modex payload) and its parsing.
//!
//! 64 bytes, little-endian:
//! `magic u32 | version u16 | flags u16 | task u32 | pid u32 | node_id u64 |
//!  job_hash u64 | ipv4 [4] | port u16 | window u16 | secret [16] | shm_token u64`
//!
//! `window` belongs to a frontend that gives each of its endpoints a
//! window of the task's (the libfabric provider, whose addresses must fit
//! FI_NAME_MAX, 64 bytes): the core writes 0 there and never reads it,
//! since a sender names the window with each message.
//!
//! No flag is defined yet: a blob with one set is refused.
//!
//! The secret keys the TCP handshake (handshake.rs): hand a blob only to
//! the tasks that may talk to this one (its job's, and those of the jobs
//! MPI connects it to).  The shm token names the task's shared-memory files
//! (segment.rs); 0: it has none, reach it over TCP.

use crate::net::handshake::Secret;
use crate::sys::error::{Error, Result};
use crate::sys::limits::MAX_TASKS;
use std::net::{Ipv4Addr, SocketAddrV4};

pub const ADDRESS_BYTES: usize = 64;
pub const ADDRESS_MAX: usize = 64;
/// Where a frontend keeps a window in the blob (u16, little-endian).
pub const ADDRESS_WINDOW: std::ops::Range<usize> = 38..40;
const MAGIC: u32 = u32::from_le_bytes(*b"DBAD");
/// 2 added the secret, 3 the shm token.
const VERSION: u16 = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Address {
    pub task: u32,
    pub pid: u32,
    pub node_id: u64,
    pub job_hash: u64,
    pub tcp: SocketAddrV4,
    pub secret: Secret,
    /// The token of the task's control segment (segment.rs); 0: no shared
    /// memory.
    pub shm_token: u64,
}

impl Address {
    /// What names this endpoint in the guest table of an endpoint of
    /// another job (control.rs, peer ids): its shm token (random, drawn
    /// at create), or, without shared memory, a hash of the whole blob
    /// (its random secret with it).  Never 0.  The endpoint and its
    /// peers compute it from the same blob.
    pub fn key(&self) -> u64 {
        use sha2::{Digest, Sha256};
        if self.shm_token != 0 {
            return self.shm_token;
        }
        let h = Sha256::digest(self.encode());
        u64::from_le_bytes(h[..8].try_into().unwrap()).max(1)
    }

    pub fn encode(&self) -> [u8; ADDRESS_BYTES] {
        let mut b = [0u8; ADDRESS_BYTES];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..6].copy_from_slice(&VERSION.to_le_bytes());
        b[8..12].copy_from_slice(&self.task.to_le_bytes());
        b[12..16].copy_from_slice(&self.pid.to_le_bytes());
        b[16..24].copy_from_slice(&self.node_id.to_le_bytes());
        b[24..32].copy_from_slice(&self.job_hash.to_le_bytes());
        b[32..36].copy_from_slice(&self.tcp.ip().octets());
        b[36..38].copy_from_slice(&self.tcp.port().to_le_bytes());
        b[40..56].copy_from_slice(&self.secret);
        b[56..64].copy_from_slice(&self.shm_token.to_le_bytes());
        b
    }

    /// Parse a blob; anything malformed is BadAddress.
    pub fn decode(b: &[u8]) -> Result<Address> {
        if b.len() != ADDRESS_BYTES {
            return Err(Error::BadAddress);
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
        let version = u16::from_le_bytes([b[4], b[5]]);
        let flags = u16::from_le_bytes([b[6], b[7]]);
        let port = u16::from_le_bytes([b[36], b[37]]);
        let a = Address {
            task: u32_at(8),
            pid: u32_at(12),
            node_id: u64_at(16),
            job_hash: u64_at(24),
            tcp: SocketAddrV4::new(Ipv4Addr::new(b[32], b[33], b[34], b[35]), port),
            secret: b[40..56].try_into().unwrap(),
            shm_token: u64_at(56),
        };
        if u32_at(0) != MAGIC || version != VERSION || flags != 0 || a.task >= MAX_TASKS || a.pid == 0 || port == 0 {
            return Err(Error::BadAddress);
        }
        Ok(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects() {
        let a = Address {
            task: 7,
            pid: 1234,
            node_id: 42,
            job_hash: 99,
            tcp: SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 5000),
            secret: [0x5a; 16],
            shm_token: 0x0123_4567_89ab_cdef,
        };
        let b = a.encode();
        assert_eq!(Address::decode(&b), Ok(a));
        let tcp_only = Address { shm_token: 0, ..a };
        assert_eq!(Address::decode(&tcp_only.encode()), Ok(tcp_only), "no shared memory");
        let mut bad = b;
        bad[6] = 1;
        assert_eq!(Address::decode(&bad), Err(Error::BadAddress), "an unknown flag");
        assert_eq!(Address::decode(&b[..ADDRESS_BYTES - 1]), Err(Error::BadAddress));
        let mut bad = b;
        bad[0] ^= 1;
        assert_eq!(Address::decode(&bad), Err(Error::BadAddress));
        let mut bad = b;
        bad[8..12].copy_from_slice(&MAX_TASKS.to_le_bytes());
        assert_eq!(Address::decode(&bad), Err(Error::BadAddress));
        assert_eq!(Address::decode(&[0u8; ADDRESS_BYTES]), Err(Error::BadAddress));
        assert_eq!(&b[ADDRESS_WINDOW], &[0, 0], "the core writes no window");
        let mut windowed = b;
        windowed[ADDRESS_WINDOW].copy_from_slice(&0xfffeu16.to_le_bytes());
        assert_eq!(Address::decode(&windowed), Ok(a), "a frontend's window is not the core's");
    }

    #[test]
    fn the_key_is_the_token_or_a_hash_of_the_blob() {
        let a = Address {
            task: 7,
            pid: 1234,
            node_id: 42,
            job_hash: 99,
            tcp: SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 5000),
            secret: [0x5a; 16],
            shm_token: 0x0123_4567_89ab_cdef,
        };
        assert_eq!(a.key(), a.shm_token);
        let tcp_only = Address { shm_token: 0, ..a };
        let other = Address { secret: [0x5b; 16], ..tcp_only };
        assert!(tcp_only.key() != 0 && tcp_only.key() != other.key(), "another secret, another key");
        assert_eq!(tcp_only.key(), Address::decode(&tcp_only.encode()).unwrap().key());
    }
}
