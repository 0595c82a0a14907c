/* bench_allreduce: nccl-tests style table for the ring all-reduce (float32
 * sum, in place) with W processes on this host over loopback TCP. Per size:
 * each iteration runs a barrier and times one call; the iteration's time is
 * the max over ranks (reduced with a max all-reduce outside the timing); the
 * table shows the median. algbw = bytes/time, busbw = algbw * 2(W-1)/W.
 * Beside it: the ideal ring time 2(W-1)/W * bytes / B, where B is the
 * loopback TCP stream bandwidth measured in the same run with a plain
 * socket, and the Gloo busbw anchors measured on this class of machine.
 * For the side-by-side comparison with Gloo, bench/allreduce_compare.py runs
 * this with -q (one "tether W bytes us busbw" line per size, no TCP probe)
 * interleaved with torch.distributed/gloo runs of the same method.
 * -z: instead of the ring, a raw ZeroMQ PUSH/PULL stream next to a raw TCP
 * stream of the same bytes, to tell the transport's limit from the ring's.
 * The ranks share this host, so the ring's payloads go through shared
 * memory (docs/collectives.md); -T 1 keeps them on TCP, as the ring runs
 * between hosts.
 * -k FILE: the ring's links use that cluster key (tt_zauth: PLAIN or,
 * with "data = curve", CURVE), to measure what authentication and
 * encryption cost; bench/security_compare.py runs the three side by side.
 * Usage: bench_allreduce [-w 2,4] [-s maxbytes] [-m minbytes]
 *                        [-i iter_scale_percent] [-g segment_bytes]
 *                        [-t io_threads] [-T 1] [-q 1] [-z 1] [-k keyfile] */
#include "tt_clock.h"
#include "tt_log.h"
#include "tt_ring.h"
#include "tt_zauth.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#define MAXW 8
static const size_t sizes[] = {4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20};
static const int iters[] = {200, 200, 50, 20, 10};
#define NSIZES 5

typedef struct cfg {
    int worlds[4], nworlds, iter_pct, io_threads, quiet, raw, tcp_only;
    size_t min_bytes, max_bytes, seg_bytes;
    double tcp_gbs;
    tt_zauth_key_t key;
} cfg_t;

/* Gloo busbw anchors (GB/s), shared/peers/RESULTS.md; 0 = not given. */
static double gloo_anchor(int w, size_t bytes) {
    if (bytes == (1u << 20))
        return w == 2 ? 0.30 : 0.20;
    if (bytes == (16u << 20))
        return w == 2 ? 0.84 : 0.57;
    if (bytes == (64u << 20))
        return w == 4 ? 0.57 : 0;
    return 0;
}

static int listen_any(int *port) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) || listen(fd, 8) ||
        getsockname(fd, (struct sockaddr *)&a, &len))
        return -1;
    *port = ntohs(a.sin_port);
    return fd;
}

/* One sender process streams `total` bytes in 1 MiB writes; GB/s read. */
static double tcp_stream_once(size_t total) {
    int port, lfd = listen_any(&port);
    if (lfd < 0)
        return 0;
    pid_t pid = fork();
    if (pid == 0) {
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_port = htons((uint16_t)port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        static char buf[1 << 20];
        if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0)
            _exit(1);
        for (size_t sent = 0; sent < total;) {
            ssize_t n = write(fd, buf, sizeof(buf));
            if (n <= 0)
                _exit(1);
            sent += (size_t)n;
        }
        _exit(0);
    }
    int fd = accept(lfd, NULL, NULL);
    static char rbuf[1 << 20];
    uint64_t t0 = tt_clock_mono_ns();
    size_t got = 0;
    for (ssize_t n; got < total && (n = read(fd, rbuf, sizeof(rbuf))) > 0;)
        got += (size_t)n;
    double s = (double)(tt_clock_mono_ns() - t0) / 1e9;
    close(fd);
    close(lfd);
    waitpid(pid, NULL, 0);
    return got == total ? (double)total / s / 1e9 : 0;
}

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double tcp_bandwidth(void) {
    double v[5];
    for (int i = 0; i < 5; i++)
        v[i] = tcp_stream_once((size_t)512 << 20);
    qsort(v, 5, sizeof(double), cmp_dbl);
    return v[2];
}

/* Median over iterations of the per-iteration max over ranks (rank 0). */
static int time_size(tt_ring_t *r, int rank, int w, size_t bytes, int n, double *median_us) {
    size_t count = bytes / sizeof(float);
    float *buf = malloc(bytes);
    double *t = calloc((size_t)n, sizeof(double));
    int rc = buf && t ? 0 : -1;
    for (size_t i = 0; i < count; i++)
        buf[i] = (float)(rank + 1);
    if (rc == 0)
        rc = tt_ring_allreduce(r, buf, count, TT_DT_FLOAT32, TT_RED_SUM);
    for (size_t i = 0; rc == 0 && i < count; i++)
        if (buf[i] != (float)(w * (w + 1) / 2))
            rc = -2;
    for (int i = 0; rc == 0 && i < 5; i++) /* warm-up */
        rc = tt_ring_allreduce(r, buf, count, TT_DT_FLOAT32, TT_RED_SUM);
    for (int i = 0; rc == 0 && i < n; i++) {
        if ((rc = tt_ring_barrier(r)) != 0)
            break;
        uint64_t t0 = tt_clock_mono_ns();
        rc = tt_ring_allreduce(r, buf, count, TT_DT_FLOAT32, TT_RED_SUM);
        t[i] = (double)(tt_clock_mono_ns() - t0) / 1e3;
    }
    if (rc == 0)
        rc = tt_ring_allreduce(r, t, (size_t)n, TT_DT_FLOAT64, TT_RED_MAX) == 0 ? 0 : -3;
    if (rc == 0) {
        qsort(t, (size_t)n, sizeof(double), cmp_dbl);
        *median_us = t[n / 2];
    }
    if (rc != 0)
        fprintf(stderr, "bench rank %d: size %zu failed (%d): %s\n", rank, bytes, rc,
                tt_ring_last_error(r));
    free(buf);
    free(t);
    return rc;
}

static void print_row(const cfg_t *c, int w, size_t bytes, double us) {
    double alg = (double)bytes / us / 1e3, bus = alg * 2.0 * (w - 1) / w;
    if (c->quiet) {
        printf("tether %d %zu %.1f %.4f\n", w, bytes, us, bus);
        fflush(stdout);
        return;
    }
    double ideal = 2.0 * (w - 1) / w * (double)bytes / (c->tcp_gbs * 1e9) * 1e6;
    double g = gloo_anchor(w, bytes);
    char gs[48] = "      -";
    if (g > 0)
        snprintf(gs, sizeof(gs), "%7.2f %6.2fx", g, bus / g);
    printf("%2d %10zu %12.1f %8.3f %8.3f %12.1f %7.0f%%   %s\n", w, bytes, us, alg, bus, ideal,
           100.0 * ideal / us, gs);
    fflush(stdout);
}

static int rank_main(int rank, int w, const char *const *eps, const cfg_t *c) {
    tt_ring_opts_t o = {.rank = rank,
                        .world = w,
                        .generation = 1,
                        .endpoints = eps,
                        .segment_bytes = c->seg_bytes,
                        .io_threads = c->io_threads,
                        .tcp_only = c->tcp_only,
                        .key = &c->key};
    tt_ring_t *r = NULL;
    char err[256] = "";
    if (tt_ring_create(&r, &o, err, sizeof(err)) != 0) {
        fprintf(stderr, "bench rank %d: %s\n", rank, err);
        return 1;
    }
    int rc = 0;
    for (int k = 0; k < NSIZES && rc == 0 && sizes[k] <= c->max_bytes; k++) {
        double us = 0;
        if (sizes[k] < c->min_bytes)
            continue;
        int n = iters[k] * c->iter_pct / 100;
        rc = time_size(r, rank, w, sizes[k], n < 3 ? 3 : n, &us);
        if (rc == 0 && rank == 0)
            print_row(c, w, sizes[k], us);
    }
    tt_ring_destroy(&r);
    return rc != 0;
}

static int run_world(int w, const cfg_t *c) {
    char eps[MAXW][64];
    const char *ep[MAXW];
    int fds[MAXW], port, bad = 0, st;
    pid_t pids[MAXW];
    for (int i = 0; i < w; i++) {
        fds[i] = listen_any(&port);
        snprintf(eps[i], sizeof(eps[i]), "tcp://127.0.0.1:%d", port);
        ep[i] = eps[i];
    }
    for (int i = 0; i < w; i++)
        close(fds[i]);
    fflush(stdout); /* or the children would print the buffered header again */
    for (int i = 0; i < w; i++)
        if ((pids[i] = fork()) == 0)
            _exit(rank_main(i, w, ep, c));
    for (int i = 0; i < w; i++) {
        waitpid(pids[i], &st, 0);
        bad += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    return bad;
}

/* Raw ZeroMQ stream: a child PUSHes `total` bytes as `msg`-byte zero-copy
 * frames to our PULL; GB/s as received. This is the ring's transport with
 * nothing of the ring: no header frames, no reduction, one direction. */
static void zmq_sender(const char *ep, size_t total, size_t msg) {
    void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, ZMQ_PUSH);
    char *buf = calloc(1, msg);
    int zero = 0;
    zmq_setsockopt(s, ZMQ_SNDHWM, &zero, sizeof(zero));
    if (buf == NULL || zmq_connect(s, ep) != 0)
        _exit(1);
    for (size_t sent = 0; sent < total; sent += msg) {
        zmq_msg_t m;
        zmq_msg_init_data(&m, buf, msg, NULL, NULL); /* buf outlives the sends */
        if (zmq_msg_send(&m, s, 0) < 0)
            _exit(1);
    }
    zmq_close(s); /* default linger: flushes */
    zmq_ctx_term(ctx);
    _exit(0);
}

static double zmq_stream_once(size_t total, size_t msg) {
    void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, ZMQ_PULL);
    char ep[64];
    size_t len = sizeof(ep), got = 0;
    int zero = 0;
    zmq_setsockopt(s, ZMQ_RCVHWM, &zero, sizeof(zero));
    if (zmq_bind(s, "tcp://127.0.0.1:*") != 0 || zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, ep, &len))
        return 0;
    pid_t pid = fork();
    if (pid == 0)
        zmq_sender(ep, total, msg);
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, s, 0) >= 0) /* the clock starts at the first frame */
        got += zmq_msg_size(&m);
    uint64_t t0 = tt_clock_mono_ns();
    while (got < total && zmq_msg_recv(&m, s, 0) >= 0)
        got += zmq_msg_size(&m);
    double sec = (double)(tt_clock_mono_ns() - t0) / 1e9;
    zmq_msg_close(&m);
    waitpid(pid, NULL, 0);
    zmq_close(s);
    zmq_ctx_term(ctx);
    return got == total ? (double)(total - msg) / sec / 1e9 : 0;
}

static int raw_streams(const cfg_t *c) {
    size_t msg = c->seg_bytes ? c->seg_bytes : (size_t)1 << 20, total = (size_t)512 << 20;
    double z[5], t[5];
    for (int i = 0; i < 5; i++) {
        t[i] = tcp_stream_once(total);
        z[i] = zmq_stream_once(total, msg);
    }
    qsort(z, 5, sizeof(double), cmp_dbl);
    qsort(t, 5, sizeof(double), cmp_dbl);
    printf("# one-way loopback stream of %zu MiB, median of 5 alternating runs\n", total >> 20);
    printf("raw TCP, 1 MiB writes        %6.2f GB/s  [%.2f-%.2f]\n", t[2], t[0], t[4]);
    printf("ZeroMQ PUSH/PULL, %7zu B  %6.2f GB/s  [%.2f-%.2f]\n", msg, z[2], z[0], z[4]);
    return z[2] > 0 && t[2] > 0 ? 0 : 1;
}

static void parse(int argc, char **argv, cfg_t *c) {
    *c = (cfg_t){.worlds = {2, 4}, .nworlds = 2, .iter_pct = 100, .max_bytes = 64u << 20};
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-w")) {
            c->nworlds = 0;
            for (char *p = strtok(argv[i + 1], ","); p && c->nworlds < 4; p = strtok(NULL, ","))
                c->worlds[c->nworlds++] = atoi(p);
        } else if (!strcmp(argv[i], "-s")) {
            c->max_bytes = (size_t)strtoull(argv[i + 1], NULL, 0);
        } else if (!strcmp(argv[i], "-i")) {
            c->iter_pct = atoi(argv[i + 1]);
        } else if (!strcmp(argv[i], "-g")) {
            c->seg_bytes = (size_t)strtoull(argv[i + 1], NULL, 0);
        } else if (!strcmp(argv[i], "-t")) {
            c->io_threads = atoi(argv[i + 1]);
        } else if (!strcmp(argv[i], "-m")) {
            c->min_bytes = (size_t)strtoull(argv[i + 1], NULL, 0);
        } else if (!strcmp(argv[i], "-q")) {
            c->quiet = atoi(argv[i + 1]);
        } else if (!strcmp(argv[i], "-z")) {
            c->raw = atoi(argv[i + 1]);
        } else if (!strcmp(argv[i], "-T")) {
            c->tcp_only = atoi(argv[i + 1]);
        } else if (!strcmp(argv[i], "-k")) {
            char err[512];
            if (tt_zauth_load(&c->key, argv[i + 1], err, sizeof(err)) != 0) {
                fprintf(stderr, "bench_allreduce: %s\n", err);
                exit(2);
            }
        }
    }
}

int main(int argc, char **argv) {
    cfg_t c;
    int bad = 0;
    parse(argc, argv, &c);
    tt_log_init_from_env();
    if (c.raw)
        return raw_streams(&c);
    if (c.quiet) {
        for (int i = 0; i < c.nworlds; i++)
            if (c.worlds[i] >= 2 && c.worlds[i] <= MAXW)
                bad += run_world(c.worlds[i], &c);
        return bad ? 1 : 0;
    }
    c.tcp_gbs = tcp_bandwidth();
    printf("# tether ring all-reduce, float32 sum, in place, payloads %s; loopback TCP stream "
           "%.2f GB/s\n",
           c.tcp_only ? "over TCP (-T 1)" : "through shared memory", c.tcp_gbs);
    printf("# time = median over iterations of max over ranks; GB = 1e9 B\n");
    printf("%2s %10s %12s %8s %8s %12s %8s   %s\n", "W", "bytes", "time(us)", "algbw", "busbw",
           "ideal(us)", "ideal%", "gloo-busbw  ratio");
    for (int i = 0; i < c.nworlds; i++)
        if (c.worlds[i] >= 1 && c.worlds[i] <= MAXW)
            bad += run_world(c.worlds[i], &c);
    return bad ? 1 : 0;
}
