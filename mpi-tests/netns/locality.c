/* locality.c -- what does Open MPI think is "the same node"?
 *
 * Rank 0 prints one line per pair of ranks:
 *   PAIR i j same_host=0|1 shared=0|1
 * same_host: MPI_Get_processor_name() equal (the UTS hostname of the namespace)
 * shared:    both ranks landed in the same MPI_COMM_TYPE_SHARED communicator,
 *            which Open MPI derives from the same locality flags
 *            (OPAL_PROC_ON_LOCAL_NODE) that decide shm vs. network transports.
 * The netns runner asserts on these lines; this program only reports. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    int rank, size, len, node_rank, leader;
    char name[MPI_MAX_PROCESSOR_NAME];
    MPI_Comm node;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    memset(name, 0, sizeof name);
    MPI_Get_processor_name(name, &len);

    /* Identify each shared-memory group by its lowest world rank. */
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &node_rank);
    leader = rank;
    MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, node);

    char *names = rank == 0 ? malloc((size_t)size * MPI_MAX_PROCESSOR_NAME) : NULL;
    int *leaders = rank == 0 ? malloc((size_t)size * sizeof(int)) : NULL;
    MPI_Gather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names, MPI_MAX_PROCESSOR_NAME,
               MPI_CHAR, 0, MPI_COMM_WORLD);
    MPI_Gather(&leader, 1, MPI_INT, leaders, 1, MPI_INT, 0, MPI_COMM_WORLD);

    if (rank == 0) {
        for (int i = 0; i < size; i++)
            printf("RANK %d host=%s\n", i, names + (size_t)i * MPI_MAX_PROCESSOR_NAME);
        for (int i = 0; i < size; i++)
            for (int j = i + 1; j < size; j++)
                printf("PAIR %d %d same_host=%d shared=%d\n", i, j,
                       strcmp(names + (size_t)i * MPI_MAX_PROCESSOR_NAME,
                              names + (size_t)j * MPI_MAX_PROCESSOR_NAME) == 0,
                       leaders[i] == leaders[j]);
        fflush(stdout);
        free(names);
        free(leaders);
    }
    MPI_Comm_free(&node);
    MPI_Finalize();
    return 0;
}
