/* btl_probe.c -- small MPI programs for ompi/check.sh (component checks).
 *   btl_probe exchange   every pair swaps contiguous and strided messages of
 *                        eager, rendezvous and pipelined sizes; checks bytes
 *   btl_probe recv SEC   rank 0 sleeps SEC then sends; the others wait in
 *                        MPI_Recv and print the CPU share they used
 *   btl_probe compute SEC  like recv, but the waiters compute 200 us between
 *                        MPI_Test calls and print the slowest MPI_Test
 *   btl_probe bigpong N  ranks 0 and 1 swap a 1 MiB message N times (RGET:
 *                        each wait lasts one ~100 us copy), checked
 *   btl_probe empty N    rank 0 calls MPI_Test N times on a receive nobody
 *                        answers yet (N empty progress passes), then rank 1
 *                        answers it (checked); run under callgrind to count
 *                        what an empty pass costs
 *   btl_probe die        rank 0 kills itself (SIGKILL) while the others wait
 *                        in MPI_Recv: the job must end, it must not hang
 * Exit status 0 only if every check passed. */
#define _GNU_SOURCE
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static double cpu_seconds(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

static int exchange(int rank, int size)
{
    /* around the default eager limits (4 KiB to same-node peers, 64 KiB
     * over TCP, minus ob1's headers), the shm rndv_eager limit (32 KiB),
     * max_send (128 KiB) and well past them */
    static const size_t sizes[] = {0,     1,     100,   4000,   4096,    4097,   32769,
                                   65000, 65536, 65537, 100000, 131073, 3 << 20};
    int bad = 0;

    for (int peer = 0; peer < size; ++peer) {
        if (peer == rank) {
            continue;
        }
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); ++i) {
            size_t n = sizes[i];
            unsigned char *s = malloc(n + 1), *r = malloc(n + 1);
            for (size_t k = 0; k < n; ++k) {
                s[k] = (unsigned char) (k * 131 + rank * 7 + i);
            }
            memset(r, 0xee, n + 1);
            MPI_Sendrecv(s, (int) n, MPI_BYTE, peer, (int) i, r, (int) n, MPI_BYTE, peer, (int) i,
                         MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (size_t k = 0; k < n; ++k) {
                if (r[k] != (unsigned char) (k * 131 + peer * 7 + i)) {
                    fprintf(stderr, "rank %d: %zu bytes from %d differ at %zu\n", rank, n, peer, k);
                    ++bad;
                    break;
                }
            }
            free(s);
            free(r);
        }
        /* every other int: the convertor packs (sendi and prepare_src copy paths) */
        for (int count = 1; count <= 100000; count *= 17) {
            int *s = malloc(sizeof(int) * 2 * count), *r = calloc(2 * (size_t) count, sizeof(int));
            MPI_Datatype vec;
            for (int k = 0; k < 2 * count; ++k) {
                s[k] = k * 3 + rank;
            }
            MPI_Type_vector(count, 1, 2, MPI_INT, &vec);
            MPI_Type_commit(&vec);
            MPI_Sendrecv(s, 1, vec, peer, 99, r, 1, vec, peer, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (int k = 0; k < count; ++k) {
                if (r[2 * k] != 2 * k * 3 + peer || r[2 * k + 1] != 0) {
                    fprintf(stderr, "rank %d: strided count %d from %d differs at %d\n", rank,
                            count, peer, k);
                    ++bad;
                    break;
                }
            }
            MPI_Type_free(&vec);
            free(s);
            free(r);
        }
    }
    return bad;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "exchange";
    double secs = argc > 2 ? atof(argv[2]) : 2.0;
    int rank, size, bad = 0, total = 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    if (0 == strcmp(mode, "exchange")) {
        bad = exchange(rank, size);
    } else if (0 == strcmp(mode, "bigpong")) {
        const size_t n = 1 << 20;
        int iters = argc > 2 ? atoi(argv[2]) : 200;
        unsigned char *b = malloc(n);
        for (size_t k = 0; k < n; ++k) {
            b[k] = (unsigned char) (k * 7);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        for (int i = 0; i < iters && rank < 2 && size > 1; ++i) {
            if (0 == rank) {
                MPI_Send(b, (int) n, MPI_BYTE, 1, 3, MPI_COMM_WORLD);
                MPI_Recv(b, (int) n, MPI_BYTE, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                MPI_Recv(b, (int) n, MPI_BYTE, 0, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(b, (int) n, MPI_BYTE, 0, 3, MPI_COMM_WORLD);
            }
        }
        for (size_t k = 0; k < n; ++k) {
            bad |= b[k] != (unsigned char) (k * 7);
        }
        free(b);
        printf("probe bigpong: rank %d %d swaps %s\n", rank, iters, bad ? "CORRUPT" : "ok");
    } else if (0 == strcmp(mode, "empty")) {
        long n = argc > 2 ? atol(argv[2]) : 100000;
        int x = 0, flag = 0;
        /* a real program's peers have talked: vader, for one, then polls
         * a fast box per peer it received from */
        for (int i = 0; i < 20 && size > 1 && rank < 2; ++i) {
            if (0 == rank) {
                MPI_Send(&x, 1, MPI_INT, 1, 10, MPI_COMM_WORLD);
                MPI_Recv(&x, 1, MPI_INT, 1, 10, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                MPI_Recv(&x, 1, MPI_INT, 0, 10, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(&x, 1, MPI_INT, 0, 10, MPI_COMM_WORLD);
            }
        }
        if (0 == rank) {
            MPI_Request req;
            MPI_Irecv(&x, 1, MPI_INT, 1, 8, MPI_COMM_WORLD, &req);
            for (long i = 0; i < n && !flag; ++i) {
                MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
            }
            bad |= flag; /* nobody had answered yet */
            MPI_Send(&x, 1, MPI_INT, 1, 9, MPI_COMM_WORLD);
            MPI_Wait(&req, MPI_STATUS_IGNORE);
            bad |= 43 != x;
            printf("probe empty: rank 0 %ld tests %s\n", n, bad ? "FAIL" : "ok");
        } else if (1 == rank) {
            MPI_Recv(&x, 1, MPI_INT, 0, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            x = 43;
            MPI_Send(&x, 1, MPI_INT, 0, 8, MPI_COMM_WORLD);
        }
    } else if (0 == strcmp(mode, "die")) {
        int x = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        if (0 == rank) {
            usleep(500000);
            raise(SIGKILL);
        }
        MPI_Recv(&x, 1, MPI_INT, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        printf("probe die: rank %d received from a dead rank\n", rank);
        bad = 1;
    } else {
        MPI_Barrier(MPI_COMM_WORLD);
        if (0 == rank) {
            usleep((useconds_t) (secs * 1e6));
            for (int p = 1; p < size; ++p) {
                int x = 42;
                MPI_Send(&x, 1, MPI_INT, p, 7, MPI_COMM_WORLD);
            }
        } else {
            int x = 0;
            long tests = 0;
            double slowest = 0, c0 = cpu_seconds(), t0 = now();
            if (0 == strcmp(mode, "recv")) {
                MPI_Recv(&x, 1, MPI_INT, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                MPI_Request req;
                int flag = 0;
                volatile double acc = 0;
                MPI_Irecv(&x, 1, MPI_INT, 0, 7, MPI_COMM_WORLD, &req);
                while (!flag) {
                    double s = now(), a;
                    while (now() - s < 200e-6) {
                        acc += 1.0;
                    }
                    a = now();
                    MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
                    if (now() - a > slowest) {
                        slowest = now() - a;
                    }
                    ++tests;
                }
            }
            double t = now() - t0, c = cpu_seconds() - c0;
            bad += (42 != x);
            printf("probe rank %d mode %s wait_s %.3f cpu_pct %.1f tests %ld slowest_test_us %.0f\n",
                   rank, mode, t, 100.0 * c / t, tests, slowest * 1e6);
        }
    }
    MPI_Allreduce(&bad, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (0 == rank) {
        printf("probe %s: %s (%d errors, %d ranks)\n", mode, total ? "FAIL" : "OK", total, size);
    }
    MPI_Finalize();
    return total ? 1 : 0;
}
