/* Rank 0 streams windows of 64 messages of SIZE bytes to rank 1, which
 * acknowledges each window with an empty message: the windowed pattern of
 * bench/ompi/pingpong.c's bandwidth at small sizes (the message rate).
 * Usage: stream WINDOWS [SIZE]; bench/fi/instr.sh runs it at two window
 * counts and divides the difference of their instruction counts by the
 * messages between them, so start-up and teardown cancel. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define WINDOW 64
#define MAX_SIZE 4096

int main(int argc, char **argv)
{
    int rank, windows = argc > 1 ? atoi(argv[1]) : 1000;
    int size = argc > 2 ? atoi(argv[2]) : 8;
    static char buf[WINDOW][MAX_SIZE];
    MPI_Request req[WINDOW];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (size < 0 || size > MAX_SIZE) {
        fprintf(stderr, "stream: SIZE must be 0..%d\n", MAX_SIZE);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    for (int it = 0; it < windows; it++) {
        for (int w = 0; w < WINDOW; w++) {
            if (rank == 0)
                MPI_Isend(buf[w], size, MPI_BYTE, 1, 1, MPI_COMM_WORLD, &req[w]);
            else if (rank == 1)
                MPI_Irecv(buf[w], size, MPI_BYTE, 0, 1, MPI_COMM_WORLD, &req[w]);
        }
        if (rank > 1)
            continue;
        MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
        if (rank == 0)
            MPI_Recv(buf[0], 0, MPI_BYTE, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        else
            MPI_Send(buf[0], 0, MPI_BYTE, 0, 2, MPI_COMM_WORLD);
    }
    if (rank == 0)
        printf("RESULT stream %d windows of %d x %d B\n", windows, WINDOW, size);
    MPI_Finalize();
    return 0;
}
