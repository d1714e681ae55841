/* dynproc.c -- dynamic processes: ranks of two jobs exchange data.
 *
 *   dynproc spawn NCHILD ROUNDS   MPI_Comm_spawn NCHILD children, ROUNDS
 *                                 times (each round a new job)
 *   dynproc child                 (what spawn starts)
 *   dynproc server PORTFILE       MPI_Open_port, write the port to
 *                                 PORTFILE, MPI_Comm_accept
 *   dynproc client PORTFILE       read the port, MPI_Comm_connect
 *   dynproc join-server PORTFILE  listen on 127.0.0.1, write the TCP port
 *                                 to PORTFILE, accept, MPI_Comm_join
 *   dynproc join-client PORTFILE  connect to that TCP port, MPI_Comm_join
 *
 * Over each intercommunicator every rank of one side exchanges messages
 * of every size below (eager, rendezvous, several MiB) with every rank
 * of the other, both ways at once, each payload a pattern of (round,
 * sender side and rank, receiver rank, size) checked byte for byte; then
 * the two sides merge and check an Allreduce and a Bcast over both jobs,
 * and disconnect.  Each job ends with "<mode>: OK" from its rank 0. */
#include "common.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

static const size_t sizes[] = {0, 1, 8, 255, 4000, 4097, 65537, 1 << 20, (4 << 20) + 3};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static uint64_t seed_of(int round, int side, int from, int to, size_t k)
{
    return ((uint64_t) round << 28) ^ ((uint64_t) side << 24) ^ ((uint64_t) from << 16) ^
           ((uint64_t) to << 8) ^ k;
}

/* side: 0 for the parent / server / join-server job, 1 for the other */
static void exchange(MPI_Comm inter, int side, int round)
{
    int me, nremote;
    MPI_Comm_rank(inter, &me);
    MPI_Comm_remote_size(inter, &nremote);

    size_t n = (size_t) nremote * NSIZES;
    unsigned char **out = t_malloc(n * sizeof(*out)), **in = t_malloc(n * sizeof(*in));
    MPI_Request *reqs = t_malloc(2 * n * sizeof(*reqs));
    size_t r = 0;
    for (int peer = 0; peer < nremote; ++peer) {
        for (size_t k = 0; k < NSIZES; ++k) {
            size_t i = (size_t) peer * NSIZES + k;
            out[i] = t_malloc(sizes[k]);
            in[i] = t_malloc(sizes[k] + 8);
            memset(in[i], 0xee, sizes[k] + 8);
            t_fill(out[i], sizes[k], seed_of(round, side, me, peer, k));
            MPI_Irecv(in[i], (int) sizes[k] + 8, MPI_BYTE, peer, (int) k, inter, &reqs[r++]);
            MPI_Isend(out[i], (int) sizes[k], MPI_BYTE, peer, (int) k, inter, &reqs[r++]);
        }
    }
    MPI_Status *st = t_malloc(2 * n * sizeof(*st));
    MPI_Waitall((int) r, reqs, st);
    for (int peer = 0; peer < nremote; ++peer) {
        for (size_t k = 0; k < NSIZES; ++k) {
            size_t i = (size_t) peer * NSIZES + k;
            int count = -1;
            MPI_Get_count(&st[2 * i], MPI_BYTE, &count);
            CHECK(count == (int) sizes[k], "round %d: %d bytes from remote rank %d, expected %zu",
                  round, count, peer, sizes[k]);
            CHECK(st[2 * i].MPI_SOURCE == peer && st[2 * i].MPI_TAG == (int) k,
                  "round %d: source %d tag %d, expected %d %zu", round, st[2 * i].MPI_SOURCE,
                  st[2 * i].MPI_TAG, peer, k);
            CHECK_PATTERN(in[i], sizes[k], seed_of(round, 1 - side, peer, me, k),
                          "round %d, %zu bytes from remote rank %d", round, sizes[k], peer);
            free(out[i]);
            free(in[i]);
        }
    }
    free(st);
    free(reqs);
    free(out);
    free(in);

    /* both jobs in one communicator: the parent side first */
    MPI_Comm merged;
    int mrank, msize, sum = 0, want, token = 0;
    MPI_Intercomm_merge(inter, side, &merged);
    MPI_Comm_rank(merged, &mrank);
    MPI_Comm_size(merged, &msize);
    MPI_Allreduce(&mrank, &sum, 1, MPI_INT, MPI_SUM, merged);
    want = msize * (msize - 1) / 2;
    CHECK(sum == want, "round %d: Allreduce over both jobs gave %d, expected %d", round, sum, want);
    if (mrank == msize - 1)
        token = 4242 + round;
    MPI_Bcast(&token, 1, MPI_INT, msize - 1, merged);
    CHECK(token == 4242 + round, "round %d: Bcast from the last rank gave %d", round, token);
    MPI_Comm_free(&merged);
}

static void write_file(const char *path, const char *text)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0 || rename(tmp, path) != 0) {
        perror(path);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
}

/* wait up to 60 s for the other job to write `path` */
static void read_file(const char *path, char *out, size_t len)
{
    for (int i = 0; i < 600; ++i) {
        FILE *f = fopen(path, "r");
        if (f) {
            size_t n = fread(out, 1, len - 1, f);
            fclose(f);
            out[n] = 0;
            if (n > 0)
                return;
        }
        t_sleep_ms(100);
    }
    fprintf(stderr, "no %s after 60 s\n", path);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

static int join_socket(int server, const char *portfile)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    int s = socket(AF_INET, SOCK_STREAM, 0), fd;
    if (s < 0) {
        perror("socket");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (server) {
        char port[32];
        if (bind(s, (struct sockaddr *) &a, sizeof a) != 0 || listen(s, 1) != 0 ||
            getsockname(s, (struct sockaddr *) &a, &alen) != 0) {
            perror("listen");
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        snprintf(port, sizeof port, "%d\n", ntohs(a.sin_port));
        write_file(portfile, port);
        fd = accept(s, NULL, NULL);
        close(s);
    } else {
        char port[32];
        read_file(portfile, port, sizeof port);
        a.sin_port = htons((uint16_t) atoi(port));
        fd = connect(s, (struct sockaddr *) &a, sizeof a) == 0 ? s : -1;
    }
    if (fd < 0) {
        perror("join socket");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return fd;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    MPI_Comm inter;

    t_init(&argc, &argv);
    if (!strcmp(mode, "spawn") && argc == 4) {
        int nchild = atoi(argv[2]), rounds = atoi(argv[3]);
        for (int round = 0; round < rounds; ++round) {
            char rs[16];
            snprintf(rs, sizeof rs, "%d", round);
            char *args[] = {"child", rs, NULL};
            int errs[64];
            MPI_Comm_spawn(argv[0], args, nchild, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter, errs);
            for (int i = 0; i < nchild && i < 64; ++i)
                CHECK(errs[i] == MPI_SUCCESS, "round %d: child %d: spawn error %d", round, i, errs[i]);
            exchange(inter, 0, round);
            MPI_Comm_disconnect(&inter);
        }
    } else if (!strcmp(mode, "child") && argc == 3) {
        MPI_Comm_get_parent(&inter);
        CHECK(inter != MPI_COMM_NULL, "no parent");
        if (inter != MPI_COMM_NULL) {
            exchange(inter, 1, atoi(argv[2]));
            MPI_Comm_disconnect(&inter);
        }
    } else if ((!strcmp(mode, "server") || !strcmp(mode, "client")) && argc == 3) {
        char port[MPI_MAX_PORT_NAME] = "";
        int server = !strcmp(mode, "server");
        if (server) {
            if (t_rank == 0) {
                MPI_Open_port(MPI_INFO_NULL, port);
                write_file(argv[2], port);
            }
            MPI_Comm_accept(port, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter);
        } else {
            if (t_rank == 0)
                read_file(argv[2], port, sizeof port);
            MPI_Comm_connect(port, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter);
        }
        exchange(inter, server ? 0 : 1, 0);
        MPI_Comm_disconnect(&inter);
        if (server && t_rank == 0)
            MPI_Close_port(port);
    } else if ((!strcmp(mode, "join-server") || !strcmp(mode, "join-client")) && argc == 3) {
        int server = !strcmp(mode, "join-server");
        CHECK(t_size == 1, "join runs one rank per job, not %d", t_size);
        int fd = join_socket(server, argv[2]);
        MPI_Comm_join(fd, &inter);
        close(fd);
        exchange(inter, server ? 0 : 1, 0);
        MPI_Comm_disconnect(&inter);
    } else {
        if (t_rank == 0)
            fprintf(stderr, "usage: dynproc spawn NCHILD ROUNDS | server|client|join-server|join-client FILE\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return t_finish(mode);
}
