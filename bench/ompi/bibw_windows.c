/* bibw_windows.c -- osu_bibw's pattern, each window timed on its own.
 *
 *   bibw_windows WINDOWS [distinct]
 *
 * Two ranks; each window both post WINDOW receives of 1 MiB, then WINDOW
 * sends, then MPI_Waitall (osu_bibw's loop, whose 1 MiB row is a stock
 * target).  osu_bibw prints one bandwidth per size; this program prints,
 * per rank, the median, 90th percentile and largest window time, the time
 * of the loop of MPI_Irecv calls (a rank that reads its peer's messages
 * inside MPI_Irecv shows here: two-way reads then run one after the other,
 * and the window takes up to twice as long), and the bandwidth of all
 * windows.  With `distinct`, every message has buffers of its own (64 MiB a
 * side, memory-bound); without, all use one buffer each way, as osu_bibw
 * does.  Every received byte of the last window is checked.
 *
 * Output: "RESULT <metric> 1048576 <value>" lines of rank 0 (window_ms,
 * window_p90_ms, window_max_ms, irecv_p90_ms, irecv_max_ms, MBps).
 */
#include "bench_common.h"

#define WINDOW 64
#define SIZE (1u << 20)

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2 || argc < 2 || atoi(argv[1]) < 1) {
        if (rank == 0)
            fprintf(stderr, "usage: mpirun -np 2 bibw_windows WINDOWS [distinct]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int n = atoi(argv[1]), distinct = argc > 2 && strcmp(argv[2], "distinct") == 0;
    size_t span = distinct ? (size_t)WINDOW * SIZE : SIZE;
    unsigned char *s = malloc(span), *d = malloc(span);
    double *win = malloc(n * sizeof(double)), *post = malloc(n * sizeof(double));
    if (!s || !d || !win || !post)
        MPI_Abort(MPI_COMM_WORLD, 1);
    int peer = 1 - rank;
    MPI_Request q[2 * WINDOW];
    double total = 0;
    for (int k = -10; k < n; k++) {
        /* the last window carries a pattern, checked below */
        if (k == n - 1)
            for (size_t i = 0; i < span; i++)
                s[i] = (unsigned char)(i * 7 + rank);
        double t0 = now_s();
        for (int i = 0; i < WINDOW; i++)
            MPI_Irecv(d + (distinct ? (size_t)i * SIZE : 0), SIZE, MPI_BYTE, peer, 100, MPI_COMM_WORLD, &q[i]);
        double t1 = now_s();
        for (int i = 0; i < WINDOW; i++)
            MPI_Isend(s + (distinct ? (size_t)i * SIZE : 0), SIZE, MPI_BYTE, peer, 100, MPI_COMM_WORLD, &q[WINDOW + i]);
        MPI_Waitall(2 * WINDOW, q, MPI_STATUSES_IGNORE);
        double t2 = now_s();
        if (k >= 0) {
            win[k] = (t2 - t0) * 1e3;
            post[k] = (t1 - t0) * 1e3;
            total += t2 - t0;
        }
    }
    for (size_t i = 0; i < span; i++)
        if (d[i] != (unsigned char)(i * 7 + peer)) {
            fprintf(stderr, "rank %d: byte %zu of the last window is wrong\n", rank, i);
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
    qsort(win, n, sizeof(double), cmp_double);
    qsort(post, n, sizeof(double), cmp_double);
    double mbps = 2.0 * WINDOW * (double)n * SIZE / 1e6 / total;
    if (rank == 0) {
        printf("RESULT window_ms %u %.3f\n", SIZE, win[n / 2]);
        printf("RESULT window_p90_ms %u %.3f\n", SIZE, win[n * 9 / 10]);
        printf("RESULT window_max_ms %u %.3f\n", SIZE, win[n - 1]);
        printf("RESULT irecv_p90_ms %u %.3f\n", SIZE, post[n * 9 / 10]);
        printf("RESULT irecv_max_ms %u %.3f\n", SIZE, post[n - 1]);
        printf("RESULT MBps %u %.0f\n", SIZE, mbps);
    }
    free(s);
    free(d);
    free(win);
    free(post);
    MPI_Finalize();
    return 0;
}
