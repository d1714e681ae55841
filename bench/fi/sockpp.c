/* sockpp.c -- the floor of a ping-pong between two hosts: a blocking TCP
 * socket (TCP_NODELAY), one process per host, the kernel waking the reader
 * when bytes arrive.  That is the work a sleeping transport does per
 * message, without the transport.
 *
 * Usage: sockpp -s PORT            serve one client, echo what it sends
 *        sockpp -c HOST PORT [-q]  measure (-q: about 10x fewer iterations)
 * Prints (client): RESULT lat <bytes> <microseconds, half a round trip>
 * Each round trip carries its iteration number, checked by both sides.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const size_t sizes[] = { 8, 64, 1024, 4096 };
#define NSIZES (sizeof sizes / sizeof sizes[0])
#define MAX_SIZE 4096
/* Each size: about this long, after a warm-up of a tenth as many. */
#define SIZE_BUDGET_S 0.5

static void die(const char *what)
{
    fprintf(stderr, "sockpp: %s: %s\n", what, errno ? strerror(errno) : "protocol error");
    exit(1);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void put_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            die("write");
        p += n;
        len -= (size_t)n;
    }
}

/* 0 at a clean end of stream before the first byte; dies on a short one. */
static int get_all(int fd, void *buf, size_t len)
{
    char *p = buf;
    size_t got = 0;
    while (got < len) {
        ssize_t n = read(fd, p + got, len - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n == 0 && got == 0)
            return 0;
        if (n <= 0)
            die("read");
        got += (size_t)n;
    }
    return 1;
}

static void nodelay(int fd)
{
    int one = 1;
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one))
        die("TCP_NODELAY");
}

/* Each message is [u32 size][size bytes]: the server echoes it whole. */
static void serve(const char *port)
{
    int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port)) };
    if (l < 0 || setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
        bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 1))
        die("listen");
    int fd = accept(l, NULL, NULL);
    if (fd < 0)
        die("accept");
    nodelay(fd);
    static char buf[4 + MAX_SIZE];
    uint32_t size;
    while (get_all(fd, &size, sizeof size)) {
        if (size > MAX_SIZE)
            die("message size");
        memcpy(buf, &size, sizeof size);
        if (!get_all(fd, buf + 4, size))
            die("read");
        put_all(fd, buf, 4 + size);
    }
    close(fd);
    close(l);
}

static int dial(const char *host, const char *port)
{
    struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *ai;
    if (getaddrinfo(host, port, &hints, &ai))
        die("getaddrinfo");
    /* The server may not listen yet: retry for 10 s. */
    for (int tries = 0; tries < 1000; tries++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0)
            die("socket");
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
            freeaddrinfo(ai);
            nodelay(fd);
            return fd;
        }
        close(fd);
        usleep(10000);
    }
    die("connect");
    return -1;
}

static void round_trip(int fd, char *out, char *in, uint32_t size, uint64_t i)
{
    memcpy(out, &size, 4);
    memcpy(out + 4, &i, size < 8 ? size : 8);
    put_all(fd, out, 4 + size);
    if (!get_all(fd, in, 4 + size) || memcmp(in, out, 4 + size) != 0)
        die("echo differs from what was sent");
}

static void measure(const char *host, const char *port, int quick)
{
    int fd = dial(host, port);
    static char out[4 + MAX_SIZE], in[4 + MAX_SIZE];
    uint64_t i = 0;
    for (size_t s = 0; s < NSIZES; s++) {
        uint32_t size = (uint32_t)sizes[s];
        size_t warm = quick ? 20 : 200;
        double w0 = now_s();
        for (size_t k = 0; k < warm; k++)
            round_trip(fd, out, in, size, i++);
        double per = (now_s() - w0) / (double)warm;
        size_t iters = (size_t)(SIZE_BUDGET_S / (per > 0 ? per : 1e-6));
        if (quick)
            iters /= 10;
        if (iters < 10)
            iters = 10;
        double t0 = now_s();
        for (size_t k = 0; k < iters; k++)
            round_trip(fd, out, in, size, i++);
        printf("RESULT lat %u %.3f\n", size, (now_s() - t0) / (double)iters / 2 * 1e6);
        fflush(stdout);
    }
    close(fd);
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "-s")) {
        serve(argv[2]);
        return 0;
    }
    if ((argc == 4 || argc == 5) && !strcmp(argv[1], "-c")) {
        measure(argv[2], argv[3], argc == 5 && !strcmp(argv[4], "-q"));
        return 0;
    }
    fprintf(stderr, "usage: sockpp -s PORT | sockpp -c HOST PORT [-q]\n");
    return 2;
}
