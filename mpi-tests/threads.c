/* threads.c -- MPI_THREAD_MULTIPLE: one thread sends while another sleeps in a receive.
 *
 * Pairs (r, r + n/2), both sides alike.  Phase 1: a second thread blocks in
 * MPI_Recv from the partner while the main thread first sleeps (so the
 * receiver is truly idle inside MPI) and then sends N messages.  Phase 2: the
 * roles of the threads swap.  Sizes include eager and rendezvous ones, so the
 * sending thread's transfer needs progress while the other thread is parked
 * in a receive.  Every message is checked.
 */
#include "common.h"
#include <pthread.h>

#define N 24
#define SLEEP_MS 300

static int partner;

static size_t msg_len(int i)
{
    static const size_t sz[] = { 8, 3000, 70000, (1u << 20) + 5, 0, 40000 };
    return sz[i % 6];
}

static uint64_t seed(int src, int phase, int i)
{
    return ((uint64_t)src << 20) | ((uint64_t)phase << 16) | (uint64_t)i;
}

static void do_recv(int phase)
{
    unsigned char *buf = t_malloc((1u << 20) + 5);
    int i;
    for (i = 0; i < N; i++) {
        MPI_Status st;
        int count = -1;
        MPI_Recv(buf, (1 << 20) + 5, MPI_BYTE, partner, phase, MPI_COMM_WORLD, &st);
        MPI_Get_count(&st, MPI_BYTE, &count);
        CHECK(count == (int)msg_len(i), "phase %d msg %d: count %d expected %zu", phase, i, count,
              msg_len(i));
        CHECK_PATTERN(buf, msg_len(i), seed(partner, phase, i), "phase %d msg %d", phase, i);
    }
    free(buf);
}

static void do_send(int phase)
{
    unsigned char *buf = t_malloc((1u << 20) + 5);
    int i;
    t_sleep_ms(SLEEP_MS); /* the other thread is now asleep in MPI_Recv */
    for (i = 0; i < N; i++) {
        t_fill(buf, msg_len(i), seed(t_rank, phase, i));
        /* alternate blocking and nonblocking sends */
        if (i % 2) {
            MPI_Send(buf, (int)msg_len(i), MPI_BYTE, partner, phase, MPI_COMM_WORLD);
        } else {
            MPI_Request r;
            MPI_Isend(buf, (int)msg_len(i), MPI_BYTE, partner, phase, MPI_COMM_WORLD, &r);
            MPI_Wait(&r, MPI_STATUS_IGNORE);
        }
    }
    free(buf);
}

static void *thread_main(void *arg)
{
    int phase = (int)(long)arg;
    if (phase == 1)
        do_recv(1);
    else
        do_send(2);
    return NULL;
}

int main(int argc, char **argv)
{
    int provided = -1, phase;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &t_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &t_size);
    CHECK(provided == MPI_THREAD_MULTIPLE, "MPI_Init_thread provided %d, not MPI_THREAD_MULTIPLE", provided);
    partner = t_partner(t_rank, t_size);
    if (provided == MPI_THREAD_MULTIPLE && partner >= 0) {
        for (phase = 1; phase <= 2; phase++) {
            pthread_t th;
            double t0 = t_now();
            if (pthread_create(&th, NULL, thread_main, (void *)(long)phase) != 0) {
                CHECK(0, "pthread_create failed");
                break;
            }
            if (phase == 1)
                do_send(1);
            else
                do_recv(2);
            pthread_join(th, NULL);
            if (t_rank == 0)
                printf("threads: phase %d took %.3f s\n", phase, t_now() - t0);
        }
    }
    return t_finish("threads");
}
