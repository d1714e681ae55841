//! Allreduce over rsmpi: sum, max and min of i64 vectors (small and 1 MiB+)
//! and an f64 sum, compared with closed forms every rank computes itself.
//! Exit status 1 if any check failed on any rank.

use mpi::collective::SystemOperation;
use mpi::traits::*;

fn main() {
    let universe = mpi::initialize().expect("MPI init");
    let world = universe.world();
    let (rank, size) = (world.rank() as i64, world.size() as i64);
    let mut failures: i64 = 0;
    let tri = size * (size - 1) / 2;

    for &n in &[1usize, 1000, 200_000] {
        // element i on rank r: r * i + 1
        let v: Vec<i64> = (0..n as i64).map(|i| rank * i + 1).collect();
        let mut sum = vec![0i64; n];
        let mut max = vec![0i64; n];
        let mut min = vec![0i64; n];
        world.all_reduce_into(&v[..], &mut sum[..], SystemOperation::sum());
        world.all_reduce_into(&v[..], &mut max[..], SystemOperation::max());
        world.all_reduce_into(&v[..], &mut min[..], SystemOperation::min());
        let bad = (0..n)
            .filter(|&i| {
                let i64i = i as i64;
                sum[i] != tri * i64i + size || max[i] != (size - 1) * i64i + 1 || min[i] != 1
            })
            .count();
        if bad != 0 {
            eprintln!("rank {rank}: allreduce of {n} elements: {bad} wrong");
            failures += 1;
        }
        // doubles with exactly representable sums: r + 0.25 + i
        let d: Vec<f64> = (0..n).map(|i| rank as f64 + 0.25 + i as f64).collect();
        let mut ds = vec![0f64; n];
        world.all_reduce_into(&d[..], &mut ds[..], SystemOperation::sum());
        let dbad = (0..n)
            .filter(|&i| ds[i] != tri as f64 + 0.25 * size as f64 + (size as f64) * i as f64)
            .count();
        if dbad != 0 {
            eprintln!("rank {rank}: f64 allreduce of {n} elements: {dbad} wrong");
            failures += 1;
        }
    }

    let mut total: i64 = 0;
    world.all_reduce_into(&failures, &mut total, SystemOperation::sum());
    if rank == 0 {
        if total == 0 {
            println!("rs_allreduce: OK ({size} ranks)");
        } else {
            println!("rs_allreduce: {total} failed checks");
        }
    }
    drop(universe);
    std::process::exit(if total == 0 { 0 } else { 1 });
}
