/* kill_ranks.c -- ranks killed after they exchanged messages.  run.sh runs it with a private DOORBELL_SHM_DIR and then checks
 * that the directory is empty: no rank may leave a file behind, whether it
 * was the one killed or a survivor that mpirun then ended.
 *
 *   kill_ranks one   rank 1 SIGKILLs itself while the others compute
 *                    (outside MPI, so they never see it die: mpirun ends
 *                    them as it does any job with a killed rank)
 *   kill_ranks all   every rank SIGKILLs itself
 *
 * Before the kill every pair exchanges data (Alltoall, checked), so every
 * ring the job uses exists.  Rank 0 prints "kill_ranks: exchanged" then. */
#include "common.h"

#include <signal.h>

#define INTS (16 * 1024) /* 64 KiB to each peer */

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int all = argc > 1 && 0 == strcmp(argv[1], "all");
    int *out = malloc((size_t) t_size * INTS * sizeof(int));
    int *in = malloc((size_t) t_size * INTS * sizeof(int));
    for (int p = 0; p < t_size; p++)
        for (int i = 0; i < INTS; i++)
            out[p * INTS + i] = t_rank * 1000003 + p * 7919 + i;
    MPI_Alltoall(out, INTS, MPI_INT, in, INTS, MPI_INT, MPI_COMM_WORLD);
    for (int p = 0; p < t_size; p++)
        for (int i = 0; i < INTS; i++)
            CHECK(in[p * INTS + i] == p * 1000003 + t_rank * 7919 + i, "from %d at %d", p, i);
    long errors = 0;
    MPI_Allreduce(&t_errors, &errors, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (0 == t_rank) {
        printf("kill_ranks: exchanged (%ld failed checks)\n", errors);
        fflush(stdout);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (all || 1 == t_rank) {
        raise(SIGKILL);
    }
    sleep(60);
    printf("kill_ranks: rank %d outlived the job\n", t_rank);
    return 1;
}
