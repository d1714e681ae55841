//! The demo: one receiver sleeps on its window; a sender on the same node
//! (shared memory) and a sender on another node id (TCP) take turns waking
//! it.  For every wake-up it prints what woke it and how long it slept.
//!
//! `cargo run --release --example demo` (it starts its own sender processes).

use doorbell::{Config, Endpoint, WaitMode, Woke};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const ROUNDS: u32 = 3;

fn endpoint(job: &str, task: u32, node: u64) -> Endpoint {
    let cfg = Config { task, node_id: node, job: job.into(), if_include: "127.0.0.0/8".into(), ..Config::default() };
    Endpoint::new(cfg).unwrap_or_else(|e| panic!("doorbell endpoint for task {task}: {e}"))
}

/// A sender process: reads the receiver's blob on stdin, prints its own,
/// then sends one message every 300 ms, offset by its task id.
fn sender(job: &str, task: u32, node: u64) {
    let ep = endpoint(job, task, node);
    println!("{}", hex(&ep.address().encode()));
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let rx = ep.connect(&unhex(line.trim())).expect("receiver blob");
    std::thread::sleep(Duration::from_millis(150 * task as u64));
    for i in 0..ROUNDS {
        std::thread::sleep(Duration::from_millis(300));
        let msg = format!("message {i} from task {task}");
        ep.send(rx, 0, task as u8, &[msg.as_bytes()]).unwrap();
    }
    ep.flush(Some(Duration::from_secs(5))).unwrap();
    // Wait for the receiver to close stdin before closing the endpoint.
    let _ = std::io::stdin().read(&mut [0u8; 1]);
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() == 5 && args[1] == "sender" {
        return sender(&args[2], args[3].parse().unwrap(), args[4].parse().unwrap());
    }
    let job = format!("demo{}", std::process::id());
    let rx = endpoint(&job, 0, 1);
    let blob = hex(&rx.address().encode());
    let mut kids = vec![];
    for (task, node, path) in [(1u32, 1u64, "shared memory"), (2, 2, "TCP")] {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["sender", &job, &task.to_string(), &node.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start a sender");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let t = rx.connect(&unhex(line.trim())).unwrap();
        writeln!(child.stdin.as_mut().unwrap(), "{blob}").unwrap();
        println!("receiver: task {t} is on node {node}: reached over {path}");
        kids.push(child);
    }
    println!("receiver: sleeping on window 0 (block mode)");
    let mut got = 0;
    while got < 2 * ROUNDS {
        let before = rx.counters();
        let t0 = Instant::now();
        let cpu0 = cpu_seconds();
        let mut msgs = vec![];
        let r = rx.wait(0, Some(WaitMode::Block), Some(Duration::from_secs(10)), &mut |task, _tag, data| {
            msgs.push((task, String::from_utf8_lossy(data).into_owned()))
        });
        let slept = t0.elapsed();
        let after = rx.counters();
        let via = if after.tcp_wakeups > before.tcp_wakeups {
            "the epoll thread (TCP readable -> window waker)"
        } else if after.shm_wakeups > before.shm_wakeups {
            "local_notify (shared-memory queue -> window waker)"
        } else {
            "no sleep needed (already there)"
        };
        match r {
            Ok(Woke::Message(_)) => {
                for (task, text) in &msgs {
                    println!(
                        "woke after {:>6.1} ms, CPU {:>5.2} ms, by {via}: task {task} says {text:?}",
                        slept.as_secs_f64() * 1e3,
                        (cpu_seconds() - cpu0) * 1e3
                    );
                }
                got += msgs.len() as u32;
            }
            other => panic!("unexpected wake: {other:?}"),
        }
    }
    for mut k in kids {
        drop(k.stdin.take());
        k.wait().unwrap();
    }
    let c = rx.counters();
    println!(
        "receiver: {} wake-ups ({} shared memory, {} TCP), {} spurious; {} messages over shm, {} over TCP",
        c.wakeups, c.shm_wakeups, c.tcp_wakeups, c.spurious_wakeups, c.shm_received, c.tcp_received
    );
}

fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}
