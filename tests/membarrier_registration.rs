//! An endpoint's creation does not wait for this process's membarrier
//! registration (bell.rs, light rings): in a process with threads the
//! kernel makes the registering thread wait out an RCU grace period,
//! 10-15 ms of every rank's MPI_Init when the creating thread did it.
//!
//! Its own test binary: registration happens once per process, and this
//! must be the first.  Registering on the creating thread puts it to
//! sleep (the grace period) and starts no thread for it.  Registering in
//! the background starts a thread that lives at least that grace period,
//! so it is still listed right after the creation, beside the FLIH; and the creating thread
//! usually does not sleep at all (it may, rarely, wait for the address
//! space's lock while that thread starts).  The old code fails both looks.

mod common;

use doorbell::{Config, Endpoint};

#[test]
fn creating_an_endpoint_leaves_the_registration_to_another_thread() {
    // SAFETY: gettid has no preconditions.
    let me = unsafe { libc::gettid() };
    let job = format!("mbr{}", std::process::id());
    let cfg = Config { task: 0, node_id: 1, job, if_include: "127.0.0.1/8".into(), ..Config::default() };
    let threads_before = common::thread_tids();
    let sleeps_before = common::thread_sleeps(me);
    let e = Endpoint::new(cfg).unwrap();
    let slept = common::thread_sleeps(me) - sleeps_before;
    // Endpoint::new starts one thread of its own, the FLIH; a second one
    // is the registration's (named once it runs, so counted, not named).
    let started = common::thread_tids().into_iter().filter(|t| !threads_before.contains(t)).count();
    let registering = started >= 2;
    assert!(
        registering || slept == 0,
        "no registration thread, and the creating thread slept {slept} times: it registered for membarrier itself"
    );
    drop(e);
}
