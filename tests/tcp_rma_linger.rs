//! A target's event thread serving back-to-back RMA requests (osc rdma's
//! accumulate over force_tcp: a blocking 4 KiB get per piece) keeps
//! polling between them instead of blocking and taking a wake-up per
//! request, and goes back to blocking once they stop: an idle target uses
//! no CPU.
//!
//! Its own test binary: it counts the context switches of every FLIH
//! thread of this process and the process's CPU time.
//!
//! The linger holds only while the FLIH has a CPU to itself (a yield that
//! runs another thread ends it), so the test places the threads: the
//! initiator on one CPU, the FLIHs on the other.

mod common;
use common::*;
use std::time::{Duration, Instant};

#[test]
fn a_served_stream_takes_no_wakeup_per_request_and_an_idle_target_no_cpu() {
    const GETS: u64 = 400;
    let page = ServedPage::new();
    let mut got = vec![0u8; 4096];
    std::thread::sleep(Duration::from_millis(20));

    // Blocking after each request was one sleep (and one wake-up) each.
    // The linger ends when its CPU is wanted by another thread (another
    // job's, on a loaded machine), and an initiator preempted for longer
    // ends it too: a round may block often then, so the best of a few
    // rounds counts.
    let mut best = u64::MAX;
    for _ in 0..5 {
        let before = flih_sleeps();
        for _ in 0..GETS {
            page.get(&mut got);
        }
        let sleeps = flih_sleeps() - before;
        println!("{GETS} back-to-back 4 KiB gets: the FLIHs blocked {sleeps} times");
        best = best.min(sleeps);
        if best < GETS / 4 {
            break;
        }
        // A yield that waited out another thread's slice stops lingering
        // for a while (flih.rs RMA_CONTENDED_NS): the next round starts
        // past it.
        std::thread::sleep(Duration::from_millis(150));
    }
    assert!(got == page.mem, "the gets' data differs");
    assert!(best < GETS / 4, "the FLIHs blocked at least {best} times in {GETS} gets: a wake-up per request");

    // Past the linger, the target's FLIH blocks again.
    std::thread::sleep(Duration::from_millis(20));
    let (cpu0, t0) = (cpu_time(), Instant::now());
    std::thread::sleep(Duration::from_millis(500));
    let share = (cpu_time() - cpu0).as_secs_f64() / t0.elapsed().as_secs_f64();
    println!("then idle: process CPU {:.1}% over 500 ms", share * 100.0);
    assert!(share < 0.05, "the process used {:.1}% CPU once the gets stopped", share * 100.0);
}
