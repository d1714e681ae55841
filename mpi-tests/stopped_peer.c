/* stopped_peer.c -- ranks stopped (SIGSTOP) before the first message to
 * them are slow, not dead.
 *
 * Usage: stopped_peer SECONDS PIDDIR [flood]
 * Every rank writes its pid to PIDDIR/rank.N (rank 0 reads them there, and
 * so can a flood of strangers looking for their ports); all but rank 0 stop
 * themselves right after MPI_Init,
 * before any message reached it.  Rank 0 waits until all are stopped (and,
 * with "flood", until flood.py says it has reached every rank's ports:
 * PIDDIR/flood.ready, so the stopped ranks' accept queues are full), resumes
 * them SECONDS later from another thread, and meanwhile sends each
 * a 100 B and a 1 MiB message: over TCP its first send waits in the
 * handshake with the stopped rank, over shared memory in a full ring.
 * Every rank then answers with its own pair, checked at rank 0, and
 * rank 0 prints "stopped_peer: OK" through t_finish.  A stopped rank is
 * never a lost one: no timer may end the job. */
#include "common.h"

#include <pthread.h>
#include <signal.h>

#define BIG (1 << 20)
#define SMALL 100

static double stop_s;
static pid_t *pids;

static char proc_state(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int) pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    return p && p[1] ? p[2] : 0;
}

static void *resume_later(void *arg)
{
    (void) arg;
    t_sleep_ms((long) (stop_s * 1000));
    for (int r = 1; r < t_size; r++)
        kill(pids[r], SIGCONT);
    return NULL;
}

/* Each rank's pid through a file: no message may reach a rank before it
 * stops. */
static pid_t read_pid(const char *dir, int rank)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/rank.%d", dir, rank);
    for (int i = 0; i < 6000; i++) {
        FILE *f = fopen(path, "r");
        int pid = 0;
        if (f) {
            int ok = fscanf(f, "%d", &pid) == 1;
            fclose(f);
            if (ok && pid > 0)
                return pid;
        }
        t_sleep_ms(10);
    }
    return 0;
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    stop_s = argc > 1 ? atof(argv[1]) : 8;
    if (argc < 3) {
        fprintf(stderr, "usage: stopped_peer SECONDS PIDDIR [flood]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const char *dir = argv[2];
    char *buf = t_malloc(BIG), *in = t_malloc(BIG);
    char path[4096];
    snprintf(path, sizeof path, "%s/rank.%d", dir, t_rank);
    FILE *f = fopen(path, "w");
    if (f) {
        fprintf(f, "%d\n", (int) getpid());
        fclose(f);
    }
    if (t_rank != 0) {
        raise(SIGSTOP); /* rank 0 resumes us */
        for (int k = 0; k < 2; k++) {
            size_t len = k ? BIG : SMALL;
            MPI_Status st;
            MPI_Recv(in, (int) len, MPI_BYTE, 0, k, MPI_COMM_WORLD, &st);
            CHECK_PATTERN(in, len, (uint64_t) t_rank * 2 + k, "message %d from rank 0", k);
            t_fill(buf, len, 1000 + (uint64_t) t_rank * 2 + k);
            MPI_Send(buf, (int) len, MPI_BYTE, 0, k, MPI_COMM_WORLD);
        }
    } else {
        pids = calloc((size_t) t_size, sizeof *pids);
        int stopped = 1;
        for (int r = 1; r < t_size; r++) {
            pids[r] = read_pid(dir, r);
            int i = 0;
            while (pids[r] && proc_state(pids[r]) != 'T' && i++ < 6000)
                t_sleep_ms(10);
            stopped &= pids[r] && proc_state(pids[r]) == 'T';
        }
        CHECK(stopped, "every other rank stopped before the first message to it");
        if (argc > 3 && !strcmp(argv[3], "flood")) {
            char ready[4096];
            snprintf(ready, sizeof ready, "%s/flood.ready", dir);
            int i = 0;
            while (access(ready, F_OK) != 0 && i++ < 3000)
                t_sleep_ms(10);
            CHECK(access(ready, F_OK) == 0, "the flood reached every rank before the first message");
        }
        pthread_t th;
        pthread_create(&th, NULL, resume_later, NULL);
        double t0 = t_now();
        MPI_Request req[64];
        char *big[64];
        int nreq = 0;
        for (int r = 1; r < t_size && r <= 64; r++) {
            for (int k = 0; k < 2; k++) {
                size_t len = k ? BIG : SMALL;
                char *b = t_malloc(len);
                t_fill(b, len, (uint64_t) r * 2 + k);
                /* Blocking for the small one: the first send meets the
                 * stopped rank; the big ones go out together. */
                if (k == 0)
                    MPI_Send(b, (int) len, MPI_BYTE, r, k, MPI_COMM_WORLD), free(b);
                else
                    big[nreq] = b, MPI_Isend(b, (int) len, MPI_BYTE, r, k, MPI_COMM_WORLD, &req[nreq++]);
            }
        }
        for (int r = 1; r < t_size; r++) {
            for (int k = 0; k < 2; k++) {
                size_t len = k ? BIG : SMALL;
                MPI_Status st;
                MPI_Recv(in, (int) len, MPI_BYTE, r, k, MPI_COMM_WORLD, &st);
                CHECK_PATTERN(in, len, 1000 + (uint64_t) r * 2 + k, "answer %d from rank %d", k, r);
            }
        }
        MPI_Waitall(nreq, req, MPI_STATUSES_IGNORE);
        for (int i = 0; i < nreq; i++)
            free(big[i]);
        printf("stopped_peer: %d ranks stopped %.0f s; the exchange took %.1f s\n", t_size - 1, stop_s,
               t_now() - t0);
        pthread_join(th, NULL);
    }
    free(buf);
    free(in);
    return t_finish("stopped_peer");
}
