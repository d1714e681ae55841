//! One-sided operations over TCP (net/rma.rs, endpoint/path/rma.rs): what
//! Open MPI's osc rdma runs on with force_tcp.  The target's event thread
//! serves them, so these never let the target progress: its memory
//! changes while its application thread does nothing at all.

mod common;
use common::*;
use doorbell::{AtomicOp, Endpoint, Error, ReadDone, ReadDst, RmaOp, WaitMode, Woke, ACCESS_ATOMIC, ACCESS_READ, ACCESS_WRITE};
use std::time::{Duration, Instant};

/// Wait (asleep: block mode) until `want` ops of `e` ended; returns them
/// by cookie.  A completion must ring the initiator's bell.
fn ended(e: &Endpoint, want: usize) -> Vec<ReadDone> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut done = vec![];
    while done.len() < want {
        let mut out = [ReadDone { cookie: 0, status: Ok(()) }; 16];
        let n = e.reads_done(0, &mut out).unwrap();
        done.extend_from_slice(&out[..n]);
        // A full batch may leave more behind, which rang no new bell.
        if done.len() < want && n < out.len() {
            let r = e.wait(0, Some(WaitMode::Block), Some(Duration::from_secs(10)), &mut |_, _, _| {});
            assert!(matches!(r, Ok(Woke::Notify) | Ok(Woke::Message(_))), "{r:?} after {} of {want}: a completion did not wake the initiator", done.len());
        }
        assert!(Instant::now() < deadline, "{} of {want} ops ended", done.len());
    }
    done.sort_by_key(|d| d.cookie);
    done
}

/// Two initiators put, get and update the target's memory at once while
/// the target's application thread never calls into the endpoint.
#[test]
fn ops_complete_while_the_target_never_progresses() {
    const ADDS: u64 = 500;
    let j = job();
    let (target, a, b) = (ep(&j, 0, 1), ep(&j, 1, 2), ep(&j, 2, 3));
    connect_all(&[&target, &a, &b]);
    // 64 KiB of data, then two counters.
    let mut mem = vec![0u64; 8192 + 2];
    for (i, w) in mem.iter_mut().enumerate().take(8192) {
        *w = i as u64 * 3;
    }
    let base = mem.as_mut_ptr() as u64;
    let key = target.expose_rma(base, (mem.len() * 8) as u64, ACCESS_READ | ACCESS_WRITE | ACCESS_ATOMIC).unwrap();
    let counter = base + 8192 * 8;
    let side = |e: &Endpoint, me: u64| {
        // Get the half that nobody writes, put into the other half.
        let mut got = vec![0u64; 2048];
        // SAFETY: `got` outlives the op (ended() waits for it).
        let dst = unsafe { ReadDst::new(got.as_mut_ptr() as *mut u8, got.len() * 8) };
        e.rma(0, 0, RmaOp::Get { len: 2048 * 8 }, base, key, &[], Some(dst), 0).unwrap();
        let mine: Vec<u8> = (0..2048u64 * 8).map(|k| (k as u8) ^ me as u8).collect();
        let at = base + (4096 + 2048 * (me - 1)) * 8;
        e.rma(0, 0, RmaOp::Put { len: mine.len() as u64 }, at, key, &mine, None, 1).unwrap();
        let mut olds = vec![0u64; ADDS as usize];
        for (i, old) in olds.iter_mut().enumerate() {
            // SAFETY: `olds` outlives the ops.
            let d = unsafe { ReadDst::new(old as *mut u64 as *mut u8, 8) };
            e.rma(0, 0, RmaOp::Atomic { op: AtomicOp::Add, width: 8, operand: 1 }, counter, key, &[], Some(d), 2 + i as u64).unwrap();
        }
        let done = ended(e, ADDS as usize + 2);
        assert!(done.iter().all(|d| d.status == Ok(())), "{:?}", done.iter().find(|d| d.status.is_err()));
        assert!(got.iter().enumerate().all(|(i, w)| *w == i as u64 * 3), "task {me}: the get's data differs");
        let mut sorted = olds.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), ADDS as usize, "task {me}: two fetch-adds saw the same old value");
        mine
    };
    let (ma, mb) = std::thread::scope(|s| {
        let t = s.spawn(|| side(&b, 2));
        (side(&a, 1), t.join().unwrap())
    });
    // Only now does the target look: it never progressed meanwhile.
    // Every op ended (reported under a lock after its write): no write to
    // `mem` is in flight.
    assert_eq!(mem[8192], 2 * ADDS, "every fetch-add landed once");
    let bytes: Vec<u8> = mem[4096..8192].iter().flat_map(|w| w.to_ne_bytes()).collect();
    assert!(bytes[..16384] == ma[..] && bytes[16384..] == mb[..], "the puts' data differs");
    // Compare-and-swap and 4-byte ops on the second counter.
    let c2 = counter + 8;
    let mut old = 0u64;
    let cas = |cmp, val, old: &mut u64, cookie| {
        // SAFETY: `old` outlives the op.
        let d = unsafe { ReadDst::new(old as *mut u64 as *mut u8, 8) };
        a.rma(0, 0, RmaOp::Cswap { width: 8, compare: cmp, value: val }, c2, key, &[], Some(d), cookie).unwrap();
        ended(&a, 1)
    };
    cas(5, 9, &mut old, 10);
    assert_eq!((old, mem[8193]), (0, 0), "no swap: 0 != 5");
    cas(0, 9, &mut old, 11);
    assert_eq!((old, mem[8193]), (0, 9));
    let mut old4 = 0u32;
    // SAFETY: `old4` outlives the op.
    let d = unsafe { ReadDst::new(&mut old4 as *mut u32 as *mut u8, 4) };
    a.rma(0, 0, RmaOp::Atomic { op: AtomicOp::Max, width: 4, operand: 20 }, c2, key, &[], Some(d), 12).unwrap();
    ended(&a, 1);
    assert_eq!((old4, mem[8193]), (9, 20), "a 4-byte max on the low half");
    target.unexpose(key).unwrap();
}

/// Outside what the key grants -- past the end, a stale key, a write to a
/// read-only exposure, a misaligned atomic -- the op fails and memory
/// stays as it was; the channel serves the next good op.
#[test]
fn ops_outside_an_exposure_are_denied() {
    let j = job();
    let (target, a) = (ep(&j, 0, 1), ep(&j, 1, 2));
    connect_all(&[&target, &a]);
    let mut mem = vec![7u64; 16];
    let base = mem.as_mut_ptr() as u64;
    let ro = target.expose_rma(base, 64, ACCESS_READ).unwrap();
    let rw = target.expose_rma(base + 64, 64, ACCESS_READ | ACCESS_WRITE | ACCESS_ATOMIC).unwrap();
    let put = |addr, key| RmaOp::Put { len: 8 }.then_put(&a, addr, key);
    let bad: [(&str, Box<dyn Fn()>); 5] = [
        ("a write to a read-only range", Box::new(|| put(base, ro))),
        ("past the end", Box::new(|| put(base + 64 + 60, rw))),
        ("another range's key", Box::new(|| put(base, rw))),
        ("a stale key", Box::new(|| put(base + 64, rw + 100))),
        (
            "a misaligned atomic",
            Box::new(|| a.rma(0, 0, RmaOp::Atomic { op: AtomicOp::Add, width: 8, operand: 1 }, base + 68, rw, &[], None, 0).unwrap()),
        ),
    ];
    for (what, op) in bad {
        op();
        let d = ended(&a, 1);
        assert_eq!(d[0].status, Err(Error::InvalidArgument), "{what}");
    }
    assert!(mem.iter().all(|w| *w == 7), "a denied op changed memory");
    put(base + 64, rw);
    assert_eq!(ended(&a, 1)[0].status, Ok(()));
    assert_eq!(mem[8], u64::from_ne_bytes([1; 8]), "the good put landed");
    assert_eq!(a.rma(0, 0, RmaOp::Get { len: 1 << 20 }, base, ro, &[], None, 0), Err(Error::BadLength), "over the largest op");
    drop(target);
}

trait ThenPut {
    fn then_put(self, e: &Endpoint, addr: u64, key: u64);
}

impl ThenPut for RmaOp {
    fn then_put(self, e: &Endpoint, addr: u64, key: u64) {
        e.rma(0, 0, self, addr, key, &[1u8; 8], None, 0).unwrap();
    }
}
