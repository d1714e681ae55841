//! A target's event thread that shares its CPU with a spinning thread (an
//! oversubscribed rank polling, another job) blocks between RMA requests
//! instead of lingering: a lingering FLIH yields when it finds nothing,
//! and each yield that ran the spinner waited out the spinner's time slice
//! (three initiators on two CPUs waited 7-16 ms per compare-and-swap).  A
//! blocked FLIH is woken by the next request, ahead of the spinner.
//!
//! Its own test binary: it counts the involuntary context switches of
//! every FLIH thread of this process (a yield that runs another thread is
//! one; blocking is a voluntary one).

mod common;
use common::*;
use doorbell::{Endpoint, ReadDone, ReadDst, RmaOp, ACCESS_READ};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One get of `dst.len()` bytes, its completion polled for.
fn get(e: &Endpoint, addr: u64, key: u64, dst: &mut [u8]) {
    // SAFETY: `dst` outlives the op: we poll until it is reported.
    let d = unsafe { ReadDst::new(dst.as_mut_ptr(), dst.len()) };
    e.rma(0, 0, RmaOp::Get { len: dst.len() as u64 }, addr, key, &[], Some(d), 7).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut out = [ReadDone { cookie: 0, status: Ok(()) }; 1];
    loop {
        e.progress(0, &mut |_, _, _| {}).unwrap();
        if e.reads_done(0, &mut out).unwrap() == 1 {
            assert_eq!(out[0].status, Ok(()));
            return;
        }
        assert!(Instant::now() < deadline, "a get did not end");
    }
}

/// Involuntary context switches of thread `tid` of this process so far.
fn thread_preemptions(tid: libc::pid_t) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap_or_default();
    let line = status.lines().find(|l| l.starts_with("nonvoluntary_ctxt_switches:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn a_flih_sharing_its_cpu_with_a_spinner_blocks_between_requests() {
    const GETS: u64 = 300;
    let j = job();
    let (target, a) = (ep(&j, 0, 1), ep(&j, 1, 2));
    connect_all(&[&target, &a]);
    let (initiator_cpu, flih_cpu) = two_cpus();
    pin(0, initiator_cpu);
    let flihs = flih_tids();
    assert!(!flihs.is_empty(), "no doorbell-flih thread found");
    for &t in &flihs {
        pin(t, flih_cpu);
    }
    let mem: Vec<u8> = (0..4096u32).map(|i| i as u8).collect();
    let base = mem.as_ptr() as u64;
    let key = target.expose_rma(base, mem.len() as u64, ACCESS_READ).unwrap();
    let mut got = vec![0u8; 4096];
    // The channel opens with the first op.
    get(&a, base, key, &mut got);
    assert!(got == mem, "the get's data differs");

    // A thread that never blocks, on the FLIHs' CPU.
    let stop = Arc::new(AtomicBool::new(false));
    let spinner = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            pin(0, flih_cpu);
            while !stop.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        })
    };
    std::thread::sleep(Duration::from_millis(20));
    let preemptions = || flihs.iter().map(|&t| thread_preemptions(t)).sum::<u64>();
    let before = preemptions();
    let t0 = Instant::now();
    for _ in 0..GETS {
        get(&a, base, key, &mut got);
    }
    let preempted = preemptions() - before;
    let took = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    spinner.join().unwrap();
    assert!(got == mem, "the gets' data differs");
    println!("{GETS} gets served beside a spinner: the FLIHs were preempted {preempted} times, {took:?}");
    // Lingering, the FLIH yielded to the spinner after about every request.
    assert!(preempted < GETS / 4, "the FLIHs were preempted {preempted} times in {GETS} gets: they yielded to the spinner per request");
    target.unexpose(key).unwrap();
}
