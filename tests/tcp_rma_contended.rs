//! A target's event thread that shares its CPU with a spinning thread (an
//! oversubscribed rank polling, another job) blocks between RMA requests
//! instead of lingering: a lingering FLIH yields when it finds nothing,
//! and each yield that ran the spinner waited out the spinner's time slice
//! (three initiators on two CPUs waited 6-16 ms per compare-and-swap).  A
//! blocked FLIH is woken by the next request, ahead of the spinner.
//!
//! Its own test binary: it counts the involuntary context switches of
//! every FLIH thread of this process (a yield that runs another thread is
//! one; blocking is a voluntary one).

mod common;
use common::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[test]
fn a_flih_sharing_its_cpu_with_a_spinner_blocks_between_requests() {
    const GETS: u64 = 300;
    let page = ServedPage::new();
    let mut got = vec![0u8; 4096];

    // A thread that never blocks, on the FLIHs' CPU.
    let stop = Arc::new(AtomicBool::new(false));
    let spinner = {
        let (stop, cpu) = (stop.clone(), page.flih_cpu);
        std::thread::spawn(move || {
            pin(0, cpu);
            while !stop.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        })
    };
    std::thread::sleep(Duration::from_millis(20));
    let preemptions = || page.flihs.iter().map(|&t| thread_preemptions(t)).sum::<u64>();
    let before = preemptions();
    let t0 = Instant::now();
    for _ in 0..GETS {
        page.get(&mut got);
    }
    let preempted = preemptions() - before;
    let took = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    spinner.join().unwrap();
    assert!(got == page.mem, "the gets' data differs");
    println!("{GETS} gets served beside a spinner: the FLIHs were preempted {preempted} times, {took:?}");
    // Lingering, the FLIH yielded to the spinner after about every request.
    assert!(preempted < GETS / 4, "the FLIHs were preempted {preempted} times in {GETS} gets: they yielded to the spinner per request");
}
