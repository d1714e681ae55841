//! Who may open a TCP connection: the challenge / keyed-hash handshake.
//!
//! Every endpoint draws a 128-bit secret from the OS RNG at creation and
//! publishes it in its address blob (address.rs).  The blob reaches only the
//! tasks that may talk to it -- its job's, through Open MPI's modex, and
//! those of the jobs MPI connects it to (spawn, connect/accept, join), to
//! which MPI hands the same modex entry; the C API's caller otherwise -- so
//! knowing a listener's secret is what lets a connector in.
//! A per-endpoint secret proves exactly what one secret per job would
//! (every task holds every blob), and needs no agreement between ranks,
//! nor between jobs: each job keeps its own.
//!
//! ```text
//! listener -> connector  challenge (32 B): "DOORBELL" | version u32 | listener task u32 | nonce_l [16]
//! connector -> listener  hello     (80 B): "DOORBELL" | version u32 | connector task u32 | nonce_c [16]
//!                                          | connector job_hash u64 | connector key u64 | mac [32]
//! listener -> connector  ack       (32 B): mac'
//! mac  = HMAC-SHA256(listener secret, "doorbell-hello" | listener job_hash | listener task
//!                    | connector job_hash | connector task | connector key | nonce_l | nonce_c)
//! mac' = the same with "doorbell-ack"
//! ```
//!
//! The secret never crosses the wire.  The MAC covers both ends' identity
//! and both fresh nonces, so a hello is good for one connection to one
//! listener as one task: it cannot be replayed, or re-targeted at another
//! task.  The connector's job and key (address.rs `Address::key`) tell the
//! listener which peer it is: a task of its own job, or an endpoint of
//! another job, known by its key (control.rs, peer ids).  The ack proves
//! the listener is the owner of the blob the connector used.
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
pub(crate) const HELLO_BYTES: usize = 80;
pub(crate) const ACK_BYTES: usize = 32;
const MAGIC: &[u8; 8] = b"DOORBELL";
/// 1 was the unauthenticated hello (an FNV hash of the job key), 2 the
/// hello without the connector's job and key (one job only).
const VERSION: u32 = 3;

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

/// Who a connector is: its job's hash, its task there, its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Connector {
    pub job_hash: u64,
    pub task: u32,
    pub key: u64,
}

/// What both sides of one handshake know once the hello is sent.
pub(crate) struct Transcript {
    pub listener_job: u64,
    pub listener: u32,
    pub connector: Connector,
    pub nonce_l: Nonce,
    pub nonce_c: Nonce,
}

impl Transcript {
    fn mac(&self, key: &Secret, label: &[u8]) -> Hmac<Sha256> {
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
        m.update(label);
        m.update(&self.listener_job.to_le_bytes());
        m.update(&self.listener.to_le_bytes());
        m.update(&self.connector.job_hash.to_le_bytes());
        m.update(&self.connector.task.to_le_bytes());
        m.update(&self.connector.key.to_le_bytes());
        m.update(&self.nonce_l);
        m.update(&self.nonce_c);
        m
    }

    /// The connector's hello, keyed with the listener's secret.
    pub fn hello(&self, key: &Secret) -> [u8; HELLO_BYTES] {
        let mut b = [0u8; HELLO_BYTES];
        b[0..8].copy_from_slice(MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.connector.task.to_le_bytes());
        b[16..32].copy_from_slice(&self.nonce_c);
        b[32..40].copy_from_slice(&self.connector.job_hash.to_le_bytes());
        b[40..48].copy_from_slice(&self.connector.key.to_le_bytes());
        b[48..80].copy_from_slice(&self.mac(key, b"doorbell-hello").finalize().into_bytes());
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

/// The listener's check of a hello: who the connector is if the hello is
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
    let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
    let connector = Connector { task: u32::from_le_bytes(b[12..16].try_into().unwrap()), job_hash: u64_at(32), key: u64_at(40) };
    if connector.task & !CHANNEL_RMA >= max_tasks || connector.key == 0 {
        return None;
    }
    let t = Transcript { listener_job: job_hash, listener, connector, nonce_l: *nonce_l, nonce_c: b[16..32].try_into().unwrap() };
    t.mac(key, b"doorbell-hello").verify_slice(&b[48..80]).is_ok().then_some(t)
}

/// How long a connector waits at most for the challenge, and then for the
/// ack, before it asks whether to wait on (`greet`'s `patience`).  The
/// listener's epoll thread answers both, so a longer wait means its
/// process is stopped (SIGSTOP, a debugger) or gone.
pub(crate) const CONNECT_STEP: Duration = Duration::from_secs(1);

/// The connector's side, on a fresh blocking stream to `listener` (the
/// task its blob names, of the job `listener_job`): read the challenge,
/// send the hello as `me`, check the ack.
/// Only the listener's FLIH answers, never its application threads, so a
/// listener busy computing still completes this at once.  While an answer
/// is missing, `patience` is asked every `step`: true waits on (the
/// listener still runs, or nothing says it died), false gives up
/// (TimedOut).  The bytes read so far are kept across the asks.
///
/// A connection closed (EOF or reset) after its challenge came is
/// ConnectionAborted: a listener of the right task accepted it, then
/// dropped it as a stranger (a flood pushed it out, or we were stopped
/// past its hello deadline), so trying again is worth it.  Closed before
/// the challenge, it is UnexpectedEof or ConnectionReset: nobody accepted
/// it (the listener closed, or its process died).
pub(crate) fn greet(
    s: &mut TcpStream,
    me: Connector,
    listener_job: u64,
    listener: u32,
    key: &Secret,
    step: Duration,
    patience: &mut dyn FnMut() -> bool,
) -> io::Result<()> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
    s.set_read_timeout(Some(step))?;
    s.set_write_timeout(Some(step))?;
    let mut ch = [0u8; CHALLENGE_BYTES];
    read_patiently(s, &mut ch, patience)?;
    let (task, nonce_l) = parse_challenge(&ch).ok_or_else(|| bad("not a doorbell challenge"))?;
    if task != listener {
        return Err(bad("the listener is another task"));
    }
    let t = Transcript { listener_job, listener, connector: me, nonce_l, nonce_c: random()? };
    // A fresh socket's send buffer takes the 64 bytes whole.
    let closed = |e: io::Error| match e.kind() {
        io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe => {
            io::Error::from(io::ErrorKind::ConnectionAborted)
        }
        _ => e,
    };
    s.write_all(&t.hello(key)).map_err(closed)?;
    let mut ack = [0u8; ACK_BYTES];
    read_patiently(s, &mut ack, patience).map_err(closed)?;
    if !t.ack_ok(key, &ack) {
        return Err(bad("the listener does not hold the secret of the address"));
    }
    s.set_read_timeout(None)?;
    s.set_write_timeout(None)
}

/// Fill `buf`; on each read timeout ask `patience` whether to go on.
fn read_patiently(s: &mut TcpStream, buf: &mut [u8], patience: &mut dyn FnMut() -> bool) -> io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // SO_RCVTIMEO ran out (EAGAIN); ETIMEDOUT is the kernel's
            // verdict (keepalive found the peer's host gone), an error.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if !patience() {
                    return Err(io::ErrorKind::TimedOut.into());
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: Connector = Connector { job_hash: 66, task: 5, key: 0xfeed };

    fn transcript() -> Transcript {
        Transcript { listener_job: 77, listener: 1, connector: ME, nonce_l: [3; 16], nonce_c: [4; 16] }
    }

    #[test]
    fn hello_verifies_only_with_the_secret_and_the_challenge() {
        let key = [9u8; 16];
        let t = transcript();
        let h = t.hello(&key);
        assert_eq!(verify_hello(&h, &key, 77, 1, &[3; 16], 100).map(|t| t.connector), Some(ME));
        assert!(verify_hello(&h, &[8; 16], 77, 1, &[3; 16], 100).is_none(), "another secret");
        assert!(verify_hello(&h, &key, 78, 1, &[3; 16], 100).is_none(), "another job");
        assert!(verify_hello(&h, &key, 77, 2, &[3; 16], 100).is_none(), "another listener");
        assert!(verify_hello(&h, &key, 77, 1, &[6; 16], 100).is_none(), "replayed to a new challenge");
        assert!(verify_hello(&h, &key, 77, 1, &[3; 16], 5).is_none(), "task out of range");
        for (at, what) in [(12, "task"), (32, "connector job"), (40, "connector key")] {
            let mut changed = h;
            changed[at] ^= 1;
            assert!(verify_hello(&changed, &key, 77, 1, &[3; 16], 100).is_none(), "{what} changed");
        }
        let no_key = Transcript { connector: Connector { key: 0, ..ME }, ..transcript() };
        assert!(verify_hello(&no_key.hello(&key), &key, 77, 1, &[3; 16], 100).is_none(), "key 0");
        let rma = Transcript { connector: Connector { task: 5 | CHANNEL_RMA, ..ME }, ..transcript() };
        let hr = rma.hello(&key);
        assert_eq!(verify_hello(&hr, &key, 77, 1, &[3; 16], 100).map(|t| t.connector.task), Some(5 | CHANNEL_RMA));
        let mut stripped = hr;
        stripped[15] &= 0x7f;
        assert!(verify_hello(&stripped, &key, 77, 1, &[3; 16], 100).is_none(), "the RMA bit is under the MAC");
        assert!(t.ack_ok(&key, &t.ack(&key)));
        assert!(!t.ack_ok(&key, &t.hello(&key)[48..].try_into().unwrap()), "a hello's mac is not an ack");
        assert_eq!(parse_challenge(&challenge(1, &[3; 16])), Some((1, [3; 16])));
        assert_eq!(parse_challenge(&[0; CHALLENGE_BYTES]), None);
        assert!(hello_prefix_ok(&h[..5]) && hello_prefix_ok(&h[..12]) && hello_prefix_ok(&h));
        for old in [1u8, 2] {
            let mut v = h;
            v[8] = old;
            assert!(!hello_prefix_ok(&v[..12]), "the hello of version {old}");
        }
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
