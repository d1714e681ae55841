/* corrupt_header.c -- corrupted shared memory ends the job with an error
 * that names the peer and the structure, instead of a hang.
 *
 * Usage: corrupt_header header|record|tail_shift|box_lock
 *        (2 ranks, one node, btl doorbell)
 *
 * Two ranks exchange messages (rank 0's fast box at rank 1 is claimed on
 * the way).  Then rank 0, playing a broken process of the user, writes
 * into rank 1's window queue through its own mapping of rank 1's control
 * segment (found in /proc/self/maps):
 *   header: a tail off the 16-byte grid into the queue's header, then it
 *           sends rank 1 an eager message too large for a fast box (over
 *           1 KiB), which must go into that queue: the sender finds it;
 *   record: while rank 1 is away from MPI, it sends that message, then
 *           writes a bad header word over the record rank 1 reads next:
 *           the receiver finds it (instead of waiting for it for ever);
 *   tail_shift: the queue's tail moved ahead by 48 bytes, on the 16-byte
 *           grid, then that message: over bytes no record reached, the
 *           record goes in where rank 1 never reads, and rank 1 finds the
 *           tail past its head with nothing there (over stale bytes, rank
 *           0 would find them);
 *   box_lock: the lock of rank 0's own fast box at rank 1 set to a pid
 *           that is not rank 0's, then a message small enough for the
 *           box: the sender finds it.
 * The job must end with doorbell's "shared memory corrupt" error; if the
 * message gets through, the program says so and exits 0 (a failure for
 * mpi-tests/run.sh, which also stops a job that hangs).
 */
#include "common.h"

#include <inttypes.h>

#include "doorbell.h"

/* The start of rank 1's control segment in this process, or NULL. */
static unsigned char *peer_control(int peer)
{
    char suffix[32], line[1024];
    unsigned char *found = NULL;
    FILE *f = fopen("/proc/self/maps", "r");

    if (!f)
        return NULL;
    snprintf(suffix, sizeof suffix, "-c%d", peer);
    while (!found && fgets(line, sizeof line, f)) {
        uintptr_t lo, hi;
        unsigned long long off;
        char path[900] = "";
        if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %*s %llx %*s %*s %899s", &lo, &hi, &off, path) != 4)
            continue;
        size_t n = strlen(path), s = strlen(suffix);
        if (off == 0 && strstr(path, "/doorbell-") && n > s && strcmp(path + n - s, suffix) == 0 &&
            hi - lo >= DOORBELL_CONTROL_BYTES + DOORBELL_QUEUE_HEADER_BYTES)
            found = (unsigned char *) lo;
    }
    fclose(f);
    return found;
}

int main(int argc, char **argv)
{
    enum { ROUNDS = 64, BIG = 2048 };
    static unsigned char buf[BIG];
    int i, record, shift, box;

    t_init(&argc, &argv);
    record = argc > 1 && strcmp(argv[1], "record") == 0;
    shift = argc > 1 && strcmp(argv[1], "tail_shift") == 0;
    box = argc > 1 && strcmp(argv[1], "box_lock") == 0;
    if (t_size != 2 || argc < 2 || (!record && !shift && !box && strcmp(argv[1], "header") != 0)) {
        if (t_rank == 0)
            fprintf(stderr, "usage: corrupt_header header|record|tail_shift|box_lock (2 ranks)\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    for (i = 0; i < ROUNDS; i++) {
        if (t_rank == 0) {
            t_fill(buf, 8, i);
            MPI_Send(buf, 8, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
            MPI_Recv(buf, 8, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(buf, 8, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            CHECK(t_verify(buf, 8, i) == -1, "round %d", i);
            MPI_Send(buf, 8, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
        }
    }
    printf("corrupt_header: rank %d exchanged %d rounds (%ld failed checks)\n", t_rank, ROUNDS, t_errors);
    fflush(stdout);
    if (t_rank == 0) {
        unsigned char *ctl = peer_control(1);
        if (!ctl) {
            fprintf(stderr, "corrupt_header: rank 1's control segment is not mapped here\n");
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
        /* window 0's queue: its header (the lock and a pad, 8 B, then the
         * tail; the head at 128), then its data (queue_bytes, offset 36 of
         * the control header) */
        unsigned char *queue = ctl + DOORBELL_CONTROL_BYTES;
        uint64_t *tail = (uint64_t *) (queue + 8), *head = (uint64_t *) (queue + 128);
        uint32_t cap = __atomic_load_n((uint32_t *) (ctl + 36), __ATOMIC_ACQUIRE);
        t_fill(buf, BIG, 99);
        if (box) {
            /* window 0's fast boxes follow the control segment's first
             * page, each a 384-byte ring header (the lock first) and 4096
             * bytes of records; rank 0 claimed box 0 during the rounds */
            uint32_t *lock = (uint32_t *) (ctl + 4096);
            __atomic_store_n(lock, 0x7ffffff0u, __ATOMIC_SEQ_CST);
            printf("corrupt_header: rank 0 corrupted its fast box's lock at rank 1\n");
            fflush(stdout);
            MPI_Send(buf, 8, MPI_BYTE, 1, 2, MPI_COMM_WORLD);
            printf("corrupt_header: the send went through a corrupt fast box\n");
        } else if (!record) {
            __atomic_fetch_add(tail, shift ? 48 : 8, __ATOMIC_SEQ_CST);
            printf("corrupt_header: rank 0 corrupted rank 1's queue header (%s)\n", shift ? "tail moved by 48" : "tail off the grid");
            fflush(stdout);
            MPI_Send(buf, BIG, MPI_BYTE, 1, 2, MPI_COMM_WORLD);
            if (!shift)
                printf("corrupt_header: the send went through a corrupt queue header\n");
        } else {
            MPI_Send(buf, BIG, MPI_BYTE, 1, 2, MPI_COMM_WORLD);
            /* the header word of the record at rank 1's head: a stamp
             * (low 16 bits) no record at that position has */
            uint64_t at = __atomic_load_n(head, __ATOMIC_ACQUIRE) & (cap - 1);
            uint64_t *word = (uint64_t *) (queue + DOORBELL_QUEUE_HEADER_BYTES + at);
            CHECK(__atomic_load_n(word, __ATOMIC_ACQUIRE) != 0, "no record at rank 1's head");
            __atomic_store_n(word, 0x5a5a5a5a5a5a0002ull, __ATOMIC_RELEASE);
            printf("corrupt_header: rank 0 corrupted the record rank 1 reads next\n");
            fflush(stdout);
        }
        MPI_Send(buf, 1, MPI_BYTE, 1, 3, MPI_COMM_WORLD);
    } else {
        if (record)
            t_sleep_ms(500); /* away from MPI while rank 0 writes */
        MPI_Recv(buf, BIG, MPI_BYTE, 0, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        printf("corrupt_header: rank 1 received through a corrupt queue\n");
        MPI_Recv(buf, 1, MPI_BYTE, 0, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    fflush(stdout);
    MPI_Finalize();
    return 0;
}
