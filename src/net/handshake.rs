//! Who may open a TCP connection: the challenge / keyed-hash handshake.
//!
//! Every endpoint draws a 128-bit secret from the OS RNG at creation and
//! publishes it in its address blob (address.rs).  The blob reaches only the
//! tasks of the job (Open MPI's modex; the C API's caller), so knowing a
//! listener's secret is what makes a connector one of the job's tasks.
//! A per-endpoint secret proves exactly what one secret per job would
//! (every task holds every blob), and needs no agreement between ranks.
//!
//! ```text
//! listener -> connector  challenge (32 B): "DOORBELL" | version u32 | listener task u32 | nonce_l [16]
//! connector -> listener  hello     (64 B): "DOORBELL" | version u32 | connector task u32 | nonce_c [16] | mac [32]
//! listener -> connector  ack       (32 B): mac'
//! mac  = HMAC-SHA256(listener secret, "doorbell-hello" | job_hash | listener | connector | nonce_l | nonce_c)
//! mac' = the same with "doorbell-ack"
//! ```
//!
//! The secret never crosses the wire.  The MAC covers both tasks and both
//! fresh nonces, so a hello is good for one connection to one listener as
//! one task: it cannot be replayed, or re-targeted at another task.  The
//! ack proves the listener is the owner of the blob the connector used.
//! The connector's task may carry CHANNEL_RMA: the connection is then an
//! RMA channel (rma.rs), served by the listener's event thread; the MAC
//! covers the bit like the rest of the task.
//! Frames follow the ack unauthenticated (frame.rs): the fast path is not
//! touched, and, as with Open MPI's btl tcp, someone who can inject into an
//! established TCP stream is outside what this defends against.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

pub(crate) const SECRET_BYTES: usize = 16;
pub(crate) const NONCE_BYTES: usize = 16;
pub(crate) const CHALLENGE_BYTES: usize = 32;
pub(crate) const HELLO_BYTES: usize = 64;
pub(crate) const ACK_BYTES: usize = 32;
const MAGIC: &[u8; 8] = b"DOORBELL";
/// 1 was the unauthenticated hello (an FNV hash of the job key).
const VERSION: u32 = 2;

/// In the hello's connector task: this connection is an RMA channel.
pub(crate) const CHANNEL_RMA: u32 = 1 << 31;

pub(crate) type Secret = [u8; SECRET_BYTES];
pub(crate) type Nonce = [u8; NONCE_BYTES];

pub(crate) use crate::sys::random;

pub(crate) fn challenge(listener: u32, nonce: &Nonce) -> [u8; CHALLENGE_BYTES] {
    let mut b = [0u8; CHALLENGE_BYTES];
    b[0..8].copy_from_slice(MAGIC);
    b[8..12].copy_from_slice(&VERSION.to_le_bytes());
    b[12..16].copy_from_slice(&listener.to_le_bytes());
    b[16..32].copy_from_slice(nonce);
    b
}

/// The listener's task and nonce, if this is a challenge of our version.
pub(crate) fn parse_challenge(b: &[u8; CHALLENGE_BYTES]) -> Option<(u32, Nonce)> {
    let ok = &b[0..8] == MAGIC && u32::from_le_bytes(b[8..12].try_into().unwrap()) == VERSION;
    ok.then(|| (u32::from_le_bytes(b[12..16].try_into().unwrap()), b[16..32].try_into().unwrap()))
}

/// What both sides of one handshake know once the hello is sent.
pub(crate) struct Transcript {
    pub job_hash: u64,
    pub listener: u32,
    pub connector: u32,
    pub nonce_l: Nonce,
    pub nonce_c: Nonce,
}

impl Transcript {
    fn mac(&self, key: &Secret, label: &[u8]) -> Hmac<Sha256> {
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
        m.update(label);
        m.update(&self.job_hash.to_le_bytes());
        m.update(&self.listener.to_le_bytes());
        m.update(&self.connector.to_le_bytes());
        m.update(&self.nonce_l);
        m.update(&self.nonce_c);
        m
    }

    /// The connector's hello, keyed with the listener's secret.
    pub fn hello(&self, key: &Secret) -> [u8; HELLO_BYTES] {
        let mut b = [0u8; HELLO_BYTES];
        b[0..8].copy_from_slice(MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.connector.to_le_bytes());
        b[16..32].copy_from_slice(&self.nonce_c);
        b[32..64].copy_from_slice(&self.mac(key, b"doorbell-hello").finalize().into_bytes());
        b
    }

    pub fn ack(&self, key: &Secret) -> [u8; ACK_BYTES] {
        self.mac(key, b"doorbell-ack").finalize().into_bytes().into()
    }

    /// Constant-time check of an ack the connector received.
    pub fn ack_ok(&self, key: &Secret, ack: &[u8; ACK_BYTES]) -> bool {
        self.mac(key, b"doorbell-ack").verify_slice(ack).is_ok()
    }
}

/// Could these first bytes of a hello (any length) start a valid one?
pub(crate) fn hello_prefix_ok(b: &[u8]) -> bool {
    let mut head = [0u8; 12];
    head[..8].copy_from_slice(MAGIC);
    head[8..].copy_from_slice(&VERSION.to_le_bytes());
    let n = b.len().min(head.len());
    b[..n] == head[..n]
}

/// The listener's check of a hello: the connector's task if the hello is
/// one only a holder of `key` could have made for this challenge.
pub(crate) fn verify_hello(
    b: &[u8; HELLO_BYTES],
    key: &Secret,
    job_hash: u64,
    listener: u32,
    nonce_l: &Nonce,
    max_tasks: u32,
) -> Option<Transcript> {
    if &b[0..8] != MAGIC || u32::from_le_bytes(b[8..12].try_into().unwrap()) != VERSION {
        return None;
    }
    let connector = u32::from_le_bytes(b[12..16].try_into().unwrap());
    if connector & !CHANNEL_RMA >= max_tasks {
        return None;
    }
    let t = Transcript { job_hash, listener, connector, nonce_l: *nonce_l, nonce_c: b[16..32].try_into().unwrap() };
    t.mac(key, b"doorbell-hello").verify_slice(&b[32..64]).is_ok().then_some(t)
}

/// How long a connector waits for the challenge, and then for the ack.
/// The listener's epoll thread answers both, so this is the time its
/// process may be stopped (SIGSTOP, a debugger) while we connect.
pub(crate) const CONNECT_STEP_TIMEOUT: Duration = Duration::from_secs(30);

/// The connector's side, on a fresh blocking stream to `listener` (the
/// task its blob names): read the challenge, send the hello, check the ack.
/// Only the listener's FLIH answers, never its application threads, so a
/// listener busy computing still completes this at once.
pub(crate) fn greet(s: &mut TcpStream, job_hash: u64, me: u32, listener: u32, key: &Secret) -> io::Result<()> {
    greet_within(s, job_hash, me, listener, key, CONNECT_STEP_TIMEOUT)
}

/// `greet`, each step waiting at most `step` (an abort notice has little
/// time to spend on a connection).
pub(crate) fn greet_within(s: &mut TcpStream, job_hash: u64, me: u32, listener: u32, key: &Secret, step: Duration) -> io::Result<()> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
    s.set_read_timeout(Some(step))?;
    s.set_write_timeout(Some(step))?;
    let mut ch = [0u8; CHALLENGE_BYTES];
    s.read_exact(&mut ch)?;
    let (task, nonce_l) = parse_challenge(&ch).ok_or_else(|| bad("not a doorbell challenge"))?;
    if task != listener {
        return Err(bad("the listener is another task"));
    }
    let t = Transcript { job_hash, listener, connector: me, nonce_l, nonce_c: random()? };
    s.write_all(&t.hello(key))?;
    let mut ack = [0u8; ACK_BYTES];
    s.read_exact(&mut ack)?;
    if !t.ack_ok(key, &ack) {
        return Err(bad("the listener does not hold the secret of the address"));
    }
    s.set_read_timeout(None)?;
    s.set_write_timeout(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transcript() -> Transcript {
        Transcript { job_hash: 77, listener: 1, connector: 5, nonce_l: [3; 16], nonce_c: [4; 16] }
    }

    #[test]
    fn hello_verifies_only_with_the_secret_and_the_challenge() {
        let key = [9u8; 16];
        let t = transcript();
        let h = t.hello(&key);
        assert_eq!(verify_hello(&h, &key, 77, 1, &[3; 16], 100).map(|t| t.connector), Some(5));
        assert!(verify_hello(&h, &[8; 16], 77, 1, &[3; 16], 100).is_none(), "another secret");
        assert!(verify_hello(&h, &key, 78, 1, &[3; 16], 100).is_none(), "another job");
        assert!(verify_hello(&h, &key, 77, 2, &[3; 16], 100).is_none(), "another listener");
        assert!(verify_hello(&h, &key, 77, 1, &[6; 16], 100).is_none(), "replayed to a new challenge");
        assert!(verify_hello(&h, &key, 77, 1, &[3; 16], 5).is_none(), "task out of range");
        let rma = Transcript { connector: 5 | CHANNEL_RMA, ..transcript() };
        let hr = rma.hello(&key);
        assert_eq!(verify_hello(&hr, &key, 77, 1, &[3; 16], 100).map(|t| t.connector), Some(5 | CHANNEL_RMA));
        let mut stripped = hr;
        stripped[15] &= 0x7f;
        assert!(verify_hello(&stripped, &key, 77, 1, &[3; 16], 100).is_none(), "the RMA bit is under the MAC");
        let mut other_task = h;
        other_task[12] = 6;
        assert!(verify_hello(&other_task, &key, 77, 1, &[3; 16], 100).is_none(), "task changed");
        assert!(t.ack_ok(&key, &t.ack(&key)));
        assert!(!t.ack_ok(&key, &t.hello(&key)[32..].try_into().unwrap()), "a hello's mac is not an ack");
        assert_eq!(parse_challenge(&challenge(1, &[3; 16])), Some((1, [3; 16])));
        assert_eq!(parse_challenge(&[0; CHALLENGE_BYTES]), None);
        assert!(hello_prefix_ok(&h[..5]) && hello_prefix_ok(&h[..12]) && hello_prefix_ok(&h));
        let mut v1 = h;
        v1[8] = 1;
        assert!(!hello_prefix_ok(&v1[..12]), "the old hello's version");
        assert!(!hello_prefix_ok(b"GET /"));
    }

    /// Every byte of a secret is random: over 32 draws each position
    /// takes more than one value (a fill that left a part of the buffer
    /// alone keeps it 0: the chance that a random position repeats one
    /// value 32 times is 2^-248).
    #[test]
    fn every_byte_of_a_draw_is_random() {
        let draws: Vec<[u8; 16]> = (0..32).map(|_| random::<16>().unwrap()).collect();
        for i in 0..16 {
            assert!(draws.iter().any(|d| d[i] != draws[0][i]), "byte {i} is {} in every draw", draws[0][i]);
        }
    }
}
