/* shm_usage.c -- shared memory a transport holds once every pair has talked.
 *
 * Every rank exchanges messages with every other rank (an 8-byte
 * MPI_Alltoall, then a 64 KiB one, so eager and large paths both set up),
 * and then, while nobody has finalized, rank 0 reads how much of the
 * shm file system is in use.  Mapped-but-unlinked files (doorbell unlinks a
 * ring once both sides have mapped it) still count there, so statvfs, not
 * a directory listing, is the measure.  shm_usage.sh subtracts the figure
 * taken before mpirun started.
 *
 * Usage: shm_usage [dir]   (default /dev/shm)
 * Prints: RESULT shm_used_bytes - <bytes in use while the job runs>
 */
#include "bench_common.h"

#include <stdint.h>
#include <sys/statvfs.h>

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "/dev/shm";
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    report_placement();

    for (size_t each = 8; each <= 65536; each *= 8192) {
        uint8_t *out = malloc(each * (size_t)size), *in = malloc(each * (size_t)size);
        if (!out || !in)
            bench_fail("out of memory");
        for (int p = 0; p < size; p++)
            memset(out + (size_t)p * each, (rank * 31 + p) & 0xff, each);
        MPI_Alltoall(out, (int)each, MPI_BYTE, in, (int)each, MPI_BYTE, MPI_COMM_WORLD);
        for (int p = 0; p < size; p++)
            if (in[(size_t)p * each] != (uint8_t)((p * 31 + rank) & 0xff)
                || in[(size_t)p * each + each - 1] != (uint8_t)((p * 31 + rank) & 0xff))
                bench_fail("alltoall of %zu bytes: wrong data from rank %d", each, p);
        free(out);
        free(in);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        struct statvfs s;
        if (statvfs(dir, &s) != 0)
            bench_fail("statvfs(%s) failed", dir);
        unsigned long long used = (unsigned long long)(s.f_blocks - s.f_bfree) * s.f_frsize;
        printf("RESULT shm_used_bytes - %llu\n", used);
        fflush(stdout);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
