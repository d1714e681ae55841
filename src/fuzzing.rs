//! Entry points for the fuzz targets in `fuzz/` (cargo fuzz): each decoder
//! of bytes that another process or a stranger controls, fed arbitrary
//! input, with the checks a target asserts.  Built only with the `fuzzing`
//! feature (and for the unit test that replays the committed corpora), so
//! the library exposes nothing more in a normal build.
//!
//! - `frame`: the TCP frame header (frame.rs);
//! - `handshake`: the challenge and the hello (handshake.rs), and a
//!   listener's pending connection (pending.rs) reading a stranger's bytes
//!   over a real loopback socket, in pieces;
//! - `tcp_rx`: an accepted connection's receive parser (tcp.rs) over a real
//!   loopback socket, the input cut into pieces, checked against a straight
//!   reading of the same bytes;
//! - `address`: the address blob (address.rs);
//! - `queue`: a window queue's consumer (queue.rs) over a queue whose
//!   header lines and records are arbitrary, with a bulk segment (bulk.rs)
//!   whose header and slots are arbitrary too.

use crate::endpoint::address::{Address, ADDRESS_BYTES};
use crate::endpoint::config::Config;
use crate::endpoint::pending::{Listener, PendingSet, Step};
use crate::net::frame::{self, FrameHeader, FRAME_HEADER};
use crate::net::handshake::{self, Connector, Nonce, Secret, Transcript, CHALLENGE_BYTES, HELLO_BYTES};
use crate::net::tcp::{Conn, RxBudget, RxEnd, RxEvent};
use crate::shm::queue::{BulkId, QueueConsumer, QueueProducer, QueueRef, QUEUE_HEADER_BYTES};
use crate::shm::record::Gather;
use crate::shm::segment::{bulk_name, Owner, Segment};
use crate::shm::shared_bytes::SharedBytes;
use crate::sys::buf_pool::BufPool;
use crate::sys::limits::{MAX_PEERS, MAX_TASKS};
use nix::sys::epoll::{Epoll, EpollCreateFlags};
use std::io::Write;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::{Arc, OnceLock};

/// What the handshake target's listener is: its job, task, secret, and the
/// nonce of the challenge it sent.
const JOB_HASH: u64 = 0x5eed_d00b_e11f_u64;
const LISTENER: u32 = 1;
const KEY: Secret = [0x5a; 16];
const NONCE_L: Nonce = [0x11; 16];

/// Frame header: a decoded value encodes back to the same bytes.
pub fn frame(data: &[u8]) {
    for max_message in [0, 1 << 20, u64::MAX] {
        for w in data.chunks_exact(FRAME_HEADER) {
            let w: &[u8; FRAME_HEADER] = w.try_into().unwrap();
            if let Some(f) = FrameHeader::decode(w, max_message) {
                assert!(f.len <= max_message);
                assert_eq!(&f.encode(), w, "an accepted header is the one we would send");
            }
        }
    }
}

/// What a connection reports, as a value to compare.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    Frame(u32, u8, Vec<u8>),
    Goodbye,
    Abort,
    ReadRequest(crate::net::remote_read::ReadRequest),
}

/// The events and the end a straight reading of the whole stream gives.
fn rx_reference(mut s: &[u8], max_message: u64) -> (Vec<Seen>, RxEnd) {
    let mut seen = vec![];
    while let Some(h) = s.get(..FRAME_HEADER) {
        let Some(f) = FrameHeader::decode(h.try_into().unwrap(), max_message) else {
            return (seen, RxEnd::Garbage);
        };
        s = &s[FRAME_HEADER..];
        if f.kind == frame::KIND_GOODBYE {
            seen.push(Seen::Goodbye);
            continue;
        }
        if f.kind == frame::KIND_ABORT {
            seen.push(Seen::Abort);
            continue;
        }
        if f.kind == frame::KIND_READ_DATA {
            // This connection asked for no read: data is garbage.
            return (seen, RxEnd::Garbage);
        }
        if (s.len() as u64) < f.len {
            break;
        }
        let body = &s[..f.len as usize];
        if f.kind == frame::KIND_READ_REQUEST {
            seen.push(Seen::ReadRequest(crate::net::remote_read::ReadRequest::decode(f.window, body).unwrap()));
        } else {
            seen.push(Seen::Frame(f.window, f.tag, body.to_vec()));
        }
        s = &s[f.len as usize..];
    }
    (seen, RxEnd::Closed)
}

/// The epoll set a connection is told it lives in (reading never uses it).
fn conn_set() -> Arc<Epoll> {
    static SET: OnceLock<Arc<Epoll>> = OnceLock::new();
    SET.get_or_init(|| Arc::new(Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).expect("an epoll set"))).clone()
}

fn listener() -> &'static TcpListener {
    static L: OnceLock<TcpListener> = OnceLock::new();
    L.get_or_init(|| TcpListener::bind("127.0.0.1:0").expect("a loopback listener"))
}

/// Close with RST (SO_LINGER 0): thousands of connections a second would
/// otherwise fill the port range with TIME_WAIT.
fn reset_on_close(s: &TcpStream) {
    let l = libc::linger { l_onoff: 1, l_linger: 0 };
    // SAFETY: setsockopt reads size_of::<linger>() bytes from a live local.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &l as *const libc::linger as *const libc::c_void,
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

/// A loopback connection: (the sender's end, the receiver's end).
fn loopback() -> (TcpStream, TcpStream) {
    let l = listener();
    let tx = TcpStream::connect(l.local_addr().unwrap()).expect("connect to loopback");
    let (rx, _) = l.accept().expect("accept");
    reset_on_close(&tx);
    reset_on_close(&rx);
    (tx, rx)
}

/// Write `stream` in pieces of `piece` bytes, calling `read` after each
/// until it says stop; then shut the sender down and call `read` until it
/// says stop (the FIN is on its way through loopback).
fn feed(mut tx: TcpStream, stream: &[u8], piece: usize, read: &mut dyn FnMut(bool) -> bool) {
    for p in stream.chunks(piece) {
        // A connection the reader gave up on may be reset: stop writing.
        if tx.write_all(p).is_err() || !read(false) {
            return;
        }
    }
    let _ = tx.shutdown(Shutdown::Write);
    for _ in 0..1_000_000 {
        if !read(true) {
            return;
        }
        std::thread::yield_now();
    }
    panic!("the reader never saw the end of the stream");
}

/// Handshake: the challenge and hello decoders, then `data[0]` picks a
/// piece size (1..=256 bytes) and the rest is what a connector sends a
/// listener's pending connection.  It is greeted exactly when the first
/// HELLO_BYTES are a hello only the holder of the listener's secret could
/// have made for its challenge; anything else is a stranger, and every
/// connection ends one way or the other.
pub fn handshake(data: &[u8]) {
    if let Some(c) = data.get(..CHALLENGE_BYTES) {
        let c: &[u8; CHALLENGE_BYTES] = c.try_into().unwrap();
        if let Some((task, nonce)) = handshake::parse_challenge(c) {
            assert_eq!(&handshake::challenge(task, &nonce), c, "an accepted challenge is the one we would send");
        }
    }
    let Some((&cut, stream)) = data.split_first() else { return };
    let verified = stream.get(..HELLO_BYTES).and_then(|h| {
        let h: &[u8; HELLO_BYTES] = h.try_into().unwrap();
        handshake::verify_hello(h, &KEY, JOB_HASH, LISTENER, &NONCE_L, MAX_TASKS).inspect(|t| {
            assert!(t.connector.task & !crate::net::handshake::CHANNEL_RMA < MAX_TASKS && t.connector.key != 0);
            assert_eq!(&t.hello(&KEY), h, "an accepted hello is the one the connector would send");
        })
    });
    let (tx, rx) = loopback();
    rx.set_nonblocking(true).unwrap();
    let mut set = PendingSet::default();
    assert!(set.insert(7, rx, NONCE_L, 0).is_none());
    let me = Listener { secret: &KEY, job_hash: JOB_HASH, task: LISTENER, max_tasks: MAX_TASKS };
    let mut outcome: Option<Option<Transcript>> = None;
    feed(tx, stream, cut as usize + 1, &mut |_| {
        match set.readable(7, &me) {
            Step::More => return true,
            Step::Greeted(_, t) => outcome = Some(Some(t)),
            Step::Stranger(_) => outcome = Some(None),
        }
        false
    });
    let outcome = outcome.expect("the connection ended greeted or a stranger");
    assert_eq!(set.len(), 0, "nothing stays pending");
    match (&outcome, &verified) {
        (Some(t), Some(v)) => assert_eq!((t.connector, t.nonce_c), (v.connector, v.nonce_c)),
        (None, None) => {}
        _ => panic!("greeted: {}, a valid hello: {}", outcome.is_some(), verified.is_some()),
    }
}

/// Receive parser: `data[0]` picks the piece size (1..=256 bytes), the rest
/// is the byte stream a connected peer sends after the handshake.  Each
/// piece is written, then read as the FLIH would; at the end the sender
/// shuts down.  Whatever the cuts, the frames and the end match
/// `rx_reference`.
pub fn tcp_rx(data: &[u8]) {
    let Some((&cut, stream)) = data.split_first() else { return };
    let max_message = Config::default().max_message;
    let budget = RxBudget::new(Config::default().max_backlog);
    let (tx, rx) = loopback();
    let conn = Conn::new(rx, 0, 1, Arc::new(BufPool::default()), conn_set()).expect("a connection");
    let mut seen = vec![];
    let mut end = RxEnd::Drained;
    feed(tx, stream, cut as usize + 1, &mut |to_eof| {
        end = conn.read_ready(to_eof, max_message, &budget, &|_, _| None, &mut |ev| match ev {
            RxEvent::Frame { window, tag, data } => {
                assert!(data.len() as u64 <= max_message);
                seen.push(Seen::Frame(window, tag, data))
            }
            RxEvent::Goodbye => seen.push(Seen::Goodbye),
            RxEvent::Abort => seen.push(Seen::Abort),
            RxEvent::Released => {}
            RxEvent::ReadRequest(r) => seen.push(Seen::ReadRequest(r)),
            RxEvent::ReadDone { .. } | RxEvent::ReadMoved => panic!("no read was asked for"),
        });
        assert_ne!(end, RxEnd::Throttled, "one connection's body is always admitted");
        end == RxEnd::Drained
    });
    let (want, want_end) = rx_reference(stream, max_message);
    assert_eq!(end, want_end, "how the connection ended");
    assert_eq!(seen, want, "what the connection delivered");
}

/// Address blob: a decoded address encodes back to the blob, up to the
/// bytes decode ignores (flags and pad); the secret comes through whole.
pub fn address(data: &[u8]) {
    if let Ok(a) = Address::decode(data) {
        assert_eq!(data.len(), ADDRESS_BYTES);
        assert!(a.task < MAX_TASKS && a.pid != 0 && a.tcp.port() != 0);
        let mut b = a.encode();
        b[6..8].copy_from_slice(&data[6..8]);
        b[38..40].copy_from_slice(&data[38..40]);
        assert_eq!(&b[..], data);
        assert_eq!(Address::decode(&a.encode()), Ok(a));
    }
}

/// The queue the `queue` target maps: 4 KiB of records.  Its input
/// gives the header's first QUEUE_HEAD bytes (lock, tail, head,
/// any_waiting and the first 512 senders' waiting bits: what the consumer
/// reads) and the records; the rest of the sender sets and the pid table
/// stay zero.
const QUEUE_CAPACITY: u64 = 4096;
const QUEUE_HEAD: usize = 448;
const QUEUE_INPUT: usize = QUEUE_HEAD + QUEUE_CAPACITY as usize;
const QUEUE_FILE: usize = QUEUE_HEADER_BYTES + QUEUE_CAPACITY as usize;
/// Its sender SRC's bulk generation 0: the header page and two 4 KiB slots.
const BULK_SLOT: usize = 4096;
const BULK_FILE: usize = crate::shm::bulk::DATA_OFFSET + crate::shm::bulk::SLOTS * BULK_SLOT;
const SRC: u32 = 1;
const DST: u32 = 2;

fn fuzz_job() -> String {
    format!("fuzz{}", std::process::id())
}

/// Copy `bytes` (zero-padded) to `at` in a segment.
fn fill(seg: &Segment, at: usize, bytes: &[u8]) {
    let n = bytes.len().min(seg.len() - at);
    // SAFETY: at + n bytes fit in the mapping; nothing else in this
    // process reads or writes it yet.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), seg.base().add(at), n) };
}

/// The token of the receiver whose queue the fuzzer feeds (its bulk files
/// are named after it and carry it).
const TOKEN: u64 = 0x5eed_0000_0000_0001;

/// A new segment `dir/name`, in place of what an earlier run that crashed
/// may have left there.
fn fresh(dir: &str, name: &str, len: usize) -> Segment {
    let _ = std::fs::remove_file(format!("{dir}/{name}"));
    Segment::create(dir, name, len, Owner::Unlocked).ok().flatten().expect("a segment file")
}

fn queue_file(job: &str) -> String {
    format!("doorbell-{job}-queue")
}

/// Queue reader: `data` is the queue's first header bytes and its records
/// (QUEUE_INPUT bytes), then the file of SRC's bulk generation 0
/// (BULK_FILE bytes); missing bytes are zero.  The consumer polls and
/// takes the waiting set.  It may refuse them (an error), but what it
/// delivers lies in the queue's data area, in a bulk slot, or in a buffer
/// of its own -- never elsewhere in a mapping.
pub fn queue(data: &[u8]) -> usize {
    let (dir, job) = ("/dev/shm", fuzz_job());
    let (q_bytes, bulk_bytes) = data.split_at(data.len().min(QUEUE_INPUT));
    let (head, records) = q_bytes.split_at(q_bytes.len().min(QUEUE_HEAD));
    let seg = Arc::new(fresh(dir, &queue_file(&job), QUEUE_FILE));
    fill(&seg, 0, head);
    fill(&seg, QUEUE_HEADER_BYTES, records);
    let bulk_seg = fresh(dir, &bulk_name(&job, TOKEN, SRC, 0, 0), BULK_FILE);
    fill(&bulk_seg, 0, bulk_bytes);
    let q = QueueRef::new(seg, 0, QUEUE_CAPACITY).expect("the queue fits its file");
    let id = BulkId { dir: dir.into(), job: job.clone(), token: TOKEN, src: 0, dst: DST, window: 0 };
    let Ok(mut c) = QueueConsumer::new(q, id, Config::default().max_message) else { return 0 };
    let mut got: Vec<(usize, usize)> = vec![];
    for _ in 0..4 {
        let mut deliver = |src: u32, _tag: u8, d: SharedBytes<'_>| {
            assert!(src < MAX_PEERS, "a sender past MAX_PEERS");
            // Copy every byte: a message past a mapping faults here.
            std::hint::black_box(d.to_vec().iter().fold(0u8, |a, &b| a ^ b));
            got.push((d.as_ptr() as usize, d.len()));
        };
        if c.poll(64, &mut deliver).is_err() {
            break;
        }
    }
    c.take_waiting(&mut |t| assert!(t < MAX_PEERS));
    let inside = |(p, n): (usize, usize), (lo, hi): (usize, usize)| p >= lo && p + n <= hi;
    let overlaps = |(p, n): (usize, usize), (lo, hi): (usize, usize)| p < hi && p + n > lo;
    let (maps, allowed) = c.fuzz_ranges();
    for &m in &got {
        if maps.iter().any(|&r| overlaps(m, r)) {
            assert!(allowed.iter().any(|&r| inside(m, r)), "a message at {m:x?} outside the data areas {allowed:x?}");
        }
    }
    got.len()
}

/// A `queue` input made by a real producer (task SRC): the queue's first
/// header bytes and records, then bulk generation 0 (its slots cut to
/// BULK_SLOT), after sending `messages`.  Bulk messages must fit in
/// BULK_SLOT.  For the committed seeds.
pub fn queue_seed(messages: &[&[u8]]) -> Vec<u8> {
    let (dir, job) = ("/dev/shm", format!("{}seed", fuzz_job()));
    let seg = Arc::new(fresh(dir, &queue_file(&job), QUEUE_FILE));
    let q = QueueRef::new(seg.clone(), 0, QUEUE_CAPACITY).expect("the queue fits its file");
    let id = BulkId { dir: dir.into(), job: job.clone(), token: TOKEN, src: SRC, dst: DST, window: 0 };
    let mut p = QueueProducer::new(q, id, std::process::id(), BULK_SLOT as u64).expect("a producer");
    for m in messages {
        let parts = [*m];
        let mut off = 0;
        assert_eq!(p.write(7, &Gather::new(&parts), &mut off), Ok(true), "the seed's messages fit in the queue");
    }
    let file = std::fs::read(format!("{dir}/{}", queue_file(&job))).expect("the queue file");
    let mut out = file[..QUEUE_HEAD].to_vec();
    out.extend_from_slice(&file[QUEUE_HEADER_BYTES..]);
    let bulk_path = format!("{dir}/{}", bulk_name(&job, TOKEN, SRC, 0, 0));
    if let Ok(b) = std::fs::read(&bulk_path) {
        let full_slot = (b.len() - crate::shm::bulk::DATA_OFFSET) / crate::shm::bulk::SLOTS;
        let mut cut = b[..crate::shm::bulk::DATA_OFFSET].to_vec();
        // The header's slot_bytes (after magic u64 and version u32).
        cut[12..16].copy_from_slice(&(BULK_SLOT as u32).to_le_bytes());
        for s in 0..crate::shm::bulk::SLOTS {
            let at = crate::shm::bulk::DATA_OFFSET + s * full_slot;
            cut.extend_from_slice(&b[at..at + BULK_SLOT]);
        }
        out.extend_from_slice(&cut);
    }
    drop(p);
    let _ = std::fs::remove_file(&bulk_path);
    out
}

/// The committed seeds, as (target, file name, bytes): valid traffic of
/// each kind, for the fuzzer to mutate from (fuzz/src/make_seeds.rs).
pub fn seeds() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let msg = |len: u64, window: u32, tag: u8| FrameHeader { len, window, tag, kind: frame::KIND_MESSAGE }.encode();
    let bye = FrameHeader { len: 0, window: 0, tag: 0, kind: frame::KIND_GOODBYE }.encode();
    let mut talk = msg(5, 1, 65).to_vec();
    talk.extend_from_slice(b"hello");
    talk.extend_from_slice(&msg(0, 15, 0));
    talk.extend_from_slice(&msg(300, 0, 9));
    talk.extend((0..300u32).map(|i| i as u8));
    talk.extend_from_slice(&bye);
    let cut = |c: u8, s: &[u8]| [&[c][..], s].concat();
    let mut garbage = msg(5, 1, 65).to_vec();
    garbage.extend_from_slice(b"hello");
    garbage.extend_from_slice(&msg(5, 16, 65));
    let who = Connector { job_hash: JOB_HASH, task: 3, key: 0x5eed };
    let t = Transcript { listener_job: JOB_HASH, listener: LISTENER, connector: who, nonce_l: NONCE_L, nonce_c: [7; 16] };
    let hello = t.hello(&KEY);
    let wrong_key = t.hello(&[0x5b; 16]);
    let a = Address {
        task: 7,
        pid: 4242,
        node_id: 0x1234_5678,
        job_hash: JOB_HASH,
        tcp: std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 40000),
        secret: KEY,
        shm_token: 0x5eed,
    };
    let small: Vec<u8> = (0..100u8).collect();
    let bulk2: Vec<u8> = (0..2500u32).map(|i| (i % 251) as u8).collect();
    let bulk: Vec<u8> = (0..3000u32).map(|i| (i % 241) as u8).collect();
    vec![
        ("frame", "message-goodbye", [&msg(5, 1, 65)[..], &bye].concat()),
        ("frame", "oversize-and-bad-window", [&msg(1 << 40, 0, 0)[..], &msg(1, 16, 0)].concat()),
        ("handshake", "challenge-then-hello", [&handshake::challenge(LISTENER, &NONCE_L)[..], &hello].concat()),
        ("handshake", "hello-whole", cut(255, &hello)),
        ("handshake", "hello-bytewise", cut(0, &hello)),
        ("handshake", "hello-then-frames", cut(9, &[&hello[..], &talk].concat())),
        ("handshake", "wrong-key", cut(255, &wrong_key)),
        ("handshake", "old-protocol", cut(255, b"DOORBELL\x01\0\0\0\x03\0\0\0\x1f\xe1\x0b\xd0\xed\x5e\0\0")),
        ("tcp_rx", "talk-whole", cut(255, &talk)),
        ("tcp_rx", "talk-bytewise", cut(0, &talk)),
        ("tcp_rx", "talk-in-7s", cut(6, &talk)),
        ("tcp_rx", "bad-window", cut(10, &garbage)),
        ("tcp_rx", "large-frame", cut(255, &[&msg(3 << 20, 2, 1)[..], &[0xab; 4000]].concat())),
        ("address", "valid", a.encode().to_vec()),
        ("queue", "empty", queue_seed(&[])),
        ("queue", "small-and-two-bulk", queue_seed(&[&small, &bulk2, &bulk])),
        ("queue", "full", queue_seed(&[&[1u8; 900], &[2u8; 900], &[3u8; 900], &[4u8; 900]])),
    ]
}

#[cfg(test)]
mod tests {
    //! Replays the committed corpora (fuzz/corpus/<target>/) through the
    //! targets, so the entry points build and pass with every `cargo test`.
    use super::*;

    fn replay(target: &str, run: fn(&[u8])) -> usize {
        let dir = format!("{}/fuzz/corpus/{target}", env!("CARGO_MANIFEST_DIR"));
        let mut n = 0;
        for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{dir}: {e}")) {
            run(&std::fs::read(e.unwrap().path()).unwrap());
            n += 1;
        }
        assert!(n > 0, "{dir} has seeds");
        n
    }

    #[test]
    fn committed_fuzz_corpora_replay_clean() {
        let n = replay("frame", frame) + replay("handshake", handshake) + replay("tcp_rx", tcp_rx) + replay("address", address) + replay("queue", |d| {
            queue(d);
        });
        println!("replayed {n} corpus files");
    }

    #[test]
    fn queue_seed_is_read_back_whole() {
        let small = [3u8; 100];
        let big = [9u8; 3000];
        let seed = queue_seed(&[&small, &big]);
        assert_eq!(seed.len(), QUEUE_INPUT + BULK_FILE);
        assert_eq!(queue(&seed), 2, "the queue message and the bulk one");
    }
}
