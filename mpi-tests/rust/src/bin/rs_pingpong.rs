//! Ping-pong over rsmpi between rank pairs (r, r + n/2), sizes 0 B .. 4 MiB,
//! each direction with its own byte pattern; source, tag, count and every
//! byte are checked.  Exit status 1 if any check failed on any rank.

use mpi::collective::SystemOperation;
use mpi::traits::*;

/// Byte `i` of the pattern for `seed` (cheap, position- and seed-dependent).
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            // xorshift64: every byte depends on seed and position
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn main() {
    let universe = mpi::initialize().expect("MPI init");
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    let half = size / 2;
    let partner = if rank >= 2 * half { None } else if rank < half { Some(rank + half) } else { Some(rank - half) };

    let mut sizes: Vec<usize> = vec![0, 1, 7, 8, 4095, 4096, 4097, 65535, 65536, 65537, 131073];
    sizes.extend((0..=22).map(|k| 1usize << k));
    sizes.sort_unstable();
    sizes.dedup();

    let mut failures: i64 = 0;
    if let Some(p) = partner {
        let peer = world.process_at_rank(p);
        let initiator = rank < p;
        let lo = rank.min(p) as u64;
        for (i, &len) in sizes.iter().enumerate() {
            let tag = i as i32;
            let ping = pattern((lo << 32) | (i as u64) << 1, len);
            let pong = pattern((lo << 32) | (i as u64) << 1 | 1, len);
            let (send, expect) = if initiator { (&ping, &pong) } else { (&pong, &ping) };
            if initiator {
                peer.send_with_tag(&send[..], tag);
            }
            let (got, status) = peer.receive_vec_with_tag::<u8>(tag);
            if got.len() != len || status.source_rank() != p || status.tag() != tag {
                eprintln!("rank {rank}: size {len}: got {} bytes from {} tag {}", got.len(), status.source_rank(), status.tag());
                failures += 1;
            } else if let Some(off) = got.iter().zip(expect.iter()).position(|(a, b)| a != b) {
                eprintln!("rank {rank}: size {len}: first bad byte at {off}");
                failures += 1;
            }
            if !initiator {
                peer.send_with_tag(&send[..], tag);
            }
        }
    }
    let mut total: i64 = 0;
    world.all_reduce_into(&failures, &mut total, SystemOperation::sum());
    if rank == 0 {
        if total == 0 {
            println!("rs_pingpong: OK ({size} ranks, {} sizes)", sizes.len());
        } else {
            println!("rs_pingpong: {total} failed checks");
        }
    }
    drop(universe); // MPI_Finalize before exiting
    std::process::exit(if total == 0 { 0 } else { 1 });
}
