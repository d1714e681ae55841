/* abort.c -- rank 0 calls MPI_Abort(MPI_COMM_WORLD, 3) while every other
 * rank waits in MPI_Recv for a message from it that never comes.
 * force_tcp.sh runs it and checks that no rank takes the abort for a lost
 * peer.  An Allreduce first: the ranks have talked (over TCP, their
 * connections are open) before the abort. */
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int rank, sum = 0, x = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (0 == rank) {
        usleep(200000); /* the others are in MPI_Recv by now */
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    MPI_Recv(&x, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    printf("abort: rank %d received from an aborted rank\n", rank);
    MPI_Finalize();
    return 1;
}
