/* ring_check: integration test of the ring collectives with real processes
 * over loopback TCP. The parent picks free ports, forks one child per rank
 * and checks exit codes; each child builds a tt_ring and verifies its own
 * results against a reference it recomputes from every rank's seed.
 * Scenarios: correctness for W = 1..4 (sizes 1, W-1, 1000003, and 64 MiB of
 * float32; sum exact for int64 and float64, 1e-6 relative for float32;
 * min/max; broadcast; barrier), a desync (one rank broadcasts while the
 * others all-reduce: every rank fails with TT_EDESYNC in < 5 s naming both),
 * a SIGSTOPped rank (the others time out naming it) and a SIGKILLed rank
 * (the others fail fast), a rank advertised at an address where nothing
 * listens (its left neighbour names it and the address: "unreached"), and
 * a rank on an older generation (its messages are dropped, never mixed
 * in). A regroup where one rank keeps its old ring a while (the new ring's
 * handshake keeps the first frames from being lost) and an interrupted
 * ring; a rank of another job that reaches a rank's endpoint with an ABORT
 * of the same generation number (dropped as foreign). Between ranks of one
 * host the payloads go through shared memory unless the ring is told
 * otherwise: "sum" checks that they did, "sum-tcp" runs the same over TCP
 * only, and "sum-mixed" with rank 2 of 4 on TCP (as a rank on another host
 * would be): its two links carry TCP, the other two shared memory;
 * "sum-fewslots" gives every rank a pool of one slot, so that on every
 * link units through shared memory and over TCP alternate, in order. "sum"
 * also sums an int64 per rank riding with float32 sums (the step's example
 * count), and "desync" includes a rank that leaves it out. Usage:
 * ring_check [all|sum|sum-tcp|sum-mixed|sum-fewslots|desync|stale|regroup|
 * foreign|stop|kill|unreached]. */
#include "tt_clock.h"
#include "tt_collseq.h"
#include "tt_log.h"
#include "tt_ring.h"
#include "tt_rng.h"
#include "tt_status.h"

#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#define MAXW    8
#define BIG_F32 ((size_t)16 << 20) /* 64 MiB of float32 */

typedef struct world {
    int w, deadline_ms;
    int tcp_only;  /* tt_ring_opts_t.tcp_only of every rank */
    int tcp_rank;  /* ... of this one rank only (-1: none) */
    int shm_slots; /* tt_ring_opts_t.shm_slots of every rank */
    char eps[MAXW][64];
    const char *ep[MAXW];
    /* "unreached": the last rank binds eps[w-1] and is advertised to the
     * others at `wrong`, where nothing listens. */
    int unreached;
    char wrong[64];
    const char *told[MAXW];
    int notify[2]; /* child -> parent: "ready to be stopped/killed" */
    /* Desync scenarios: each rank says it is done (done[1]) and keeps its
     * ring until the parent closes hold[1], i.e. until every rank is done. */
    int lingers;
    int done[2], hold[2];
} world_t;

typedef int (*scenario_fn)(tt_ring_t *r, int rank, const world_t *wd);

static int pick_ports(world_t *wd) {
    int fds[MAXW];
    for (int i = 0; i < wd->w; i++) {
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t len = sizeof(a);
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        if (fds[i] < 0 || bind(fds[i], (struct sockaddr *)&a, sizeof(a)) != 0 ||
            getsockname(fds[i], (struct sockaddr *)&a, &len) != 0)
            return -1;
        snprintf(wd->eps[i], sizeof(wd->eps[i]), "tcp://127.0.0.1:%d", ntohs(a.sin_port));
        wd->ep[i] = wd->eps[i];
    }
    for (int i = 0; i < wd->w; i++)
        close(fds[i]);
    return 0;
}

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "ring_check rank %d: ", rank);                                             \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fprintf(stderr, "\n");                                                                     \
        return 1;                                                                                  \
    } while (0)

/* Element i of rank r's data: a pure function of (seed, r, i). */
static uint64_t draw(int r, size_t i, uint64_t salt) {
    uint64_t s = tt_rng_derive(salt * 1000003u + (uint64_t)r, i);
    return tt_rng_next(&s);
}
static float f32_of(int r, size_t i) {
    return 0.5f + (float)(draw(r, i, 1) >> 40) / 16777216.0f;
}
/* multiples of 2^-20 below 2^12: every partial sum is exact in any order */
static double f64_of(int r, size_t i) {
    return (double)(draw(r, i, 2) >> 32) / 1048576.0;
}
static int64_t i64_of(int r, size_t i) {
    return (int64_t)draw(r, i, 3);
}

/* A float32 sum (1e-6 relative); with_count: each rank's int64 rides
 * along (the step's example count) and must come out exact. */
static int check_sum(tt_ring_t *r, int rank, int w, size_t n, int with_count) {
    float *buf = malloc((n ? n : 1) * sizeof(float));
    if (buf == NULL)
        FAIL("out of memory");
    for (size_t i = 0; i < n; i++)
        buf[i] = f32_of(rank, i);
    int64_t side = i64_of(rank, 77) >> 8, want = 0;
    for (int q = 0; q < w; q++)
        want += i64_of(q, 77) >> 8;
    int rc = with_count ? tt_ring_allreduce_side(r, buf, n, TT_DT_FLOAT32, TT_RED_SUM, &side)
                        : tt_ring_allreduce(r, buf, n, TT_DT_FLOAT32, TT_RED_SUM);
    size_t bad = n;
    for (size_t i = 0; rc == 0 && i < n && bad == n; i++) {
        double ref = 0;
        for (int q = 0; q < w; q++)
            ref += f32_of(q, i);
        if (fabs(buf[i] - ref) > 1e-6 * ref)
            bad = i;
    }
    free(buf);
    if (rc != 0)
        FAIL("f32 sum n=%zu%s: %s: %s", n, with_count ? " with count" : "", tt_status_name(rc),
             tt_ring_last_error(r));
    if (bad != n)
        FAIL("f32 sum n=%zu wrong at %zu", n, bad);
    if (with_count && side != want)
        FAIL("count riding with n=%zu: %lld, want %lld", n, (long long)side, (long long)want);
    return 0;
}

static int check_f32(tt_ring_t *r, int rank, int w, size_t n) {
    return check_sum(r, rank, w, n, 0);
}

static int check_exact(tt_ring_t *r, int rank, int w, size_t n, tt_dtype_t dt, tt_redop_t op) {
    int64_t *buf = malloc((n ? n : 1) * 8);
    if (buf == NULL)
        FAIL("out of memory");
    for (size_t i = 0; i < n; i++) {
        double d = f64_of(rank, i);
        if (dt == TT_DT_INT64)
            buf[i] = i64_of(rank, i);
        else
            memcpy(&buf[i], &d, 8);
    }
    int rc = tt_ring_allreduce(r, buf, n, dt, op);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        int64_t ri = i64_of(0, i);
        double rd = f64_of(0, i), got;
        for (int q = 1; q < w; q++) {
            int64_t vi = i64_of(q, i);
            double vd = f64_of(q, i);
            ri = op == TT_RED_SUM   ? (int64_t)((uint64_t)ri + (uint64_t)vi)
                 : op == TT_RED_MIN ? (vi < ri ? vi : ri)
                                    : (vi > ri ? vi : ri);
            rd = op == TT_RED_SUM ? rd + vd : op == TT_RED_MIN ? fmin(rd, vd) : fmax(rd, vd);
        }
        memcpy(&got, &buf[i], 8);
        if (dt == TT_DT_INT64 ? buf[i] != ri : got != rd) {
            free(buf);
            FAIL("%s op %d n=%zu wrong at %zu", dt == TT_DT_INT64 ? "i64" : "f64", op, n, i);
        }
    }
    free(buf);
    if (rc != 0)
        FAIL("exact dt %d op %d n=%zu: %s: %s", dt, op, n, tt_status_name(rc),
             tt_ring_last_error(r));
    return 0;
}

static int check_bcast(tt_ring_t *r, int rank, int w, size_t n) {
    int root = w - 1;
    int64_t *buf = malloc((n ? n : 1) * 8);
    if (buf == NULL)
        FAIL("out of memory");
    for (size_t i = 0; i < n; i++)
        buf[i] = i64_of(rank, i);
    int rc = tt_ring_broadcast(r, buf, n, TT_DT_INT64, root);
    size_t bad = n;
    for (size_t i = 0; rc == 0 && i < n && bad == n; i++)
        if (buf[i] != i64_of(root, i))
            bad = i;
    free(buf);
    if (rc != 0)
        FAIL("bcast n=%zu: %s: %s", n, tt_status_name(rc), tt_ring_last_error(r));
    if (bad != n)
        FAIL("bcast n=%zu wrong at %zu", n, bad);
    return 0;
}

/* Rank 0 arrives 300 ms late: nobody may leave the barrier before that. */
static int check_barrier(tt_ring_t *r, int rank, int w) {
    if (w == 1)
        return tt_ring_barrier(r) == 0 ? 0 : 1;
    if (tt_ring_barrier(r) != 0)
        FAIL("barrier: %s", tt_ring_last_error(r));
    uint64_t t0 = tt_clock_mono_ms();
    if (rank == 0)
        usleep(300 * 1000);
    if (tt_ring_barrier(r) != 0)
        FAIL("barrier: %s", tt_ring_last_error(r));
    if (tt_clock_mono_ms() - t0 < 250)
        FAIL("left the barrier after %llu ms, before rank 0 entered",
             (unsigned long long)(tt_clock_mono_ms() - t0));
    return 0;
}

static int scen_sum(tt_ring_t *r, int rank, const world_t *wd) {
    int w = wd->w;
    size_t sizes[] = {1, (size_t)(w - 1), 1000003};
    static const tt_redop_t ops[] = {TT_RED_SUM, TT_RED_MIN, TT_RED_MAX};
    for (size_t k = 0; k < 3; k++) {
        if (check_f32(r, rank, w, sizes[k]) || check_exact(r, rank, w, sizes[k], TT_DT_INT64, 1) ||
            check_exact(r, rank, w, sizes[k], TT_DT_FLOAT64, TT_RED_SUM))
            return 1;
    }
    for (size_t k = 1; k < 3; k++)
        if (check_exact(r, rank, w, 100003, TT_DT_INT64, ops[k]) ||
            check_exact(r, rank, w, 100003, TT_DT_FLOAT64, ops[k]))
            return 1;
    if (check_bcast(r, rank, w, 1) || check_bcast(r, rank, w, 1000003) ||
        check_bcast(r, rank, w, 0) || check_barrier(r, rank, w))
        return 1;
    /* shared memory to the right unless either end keeps to TCP */
    int shm = w > 1 && !wd->tcp_only && rank != wd->tcp_rank && (rank + 1) % w != wd->tcp_rank;
    if (check_sum(r, rank, w, 1, 1) || check_sum(r, rank, w, (size_t)(w - 1), 1) ||
        check_sum(r, rank, w, 1000003, 1) || check_sum(r, rank, w, (size_t)3 << 20, 1))
        return 1;
    if (tt_ring_uses_shm(r) != shm)
        FAIL("payloads to the right %s shared memory",
             tt_ring_uses_shm(r) ? "went through" : "did not use");
    if (check_f32(r, rank, w, BIG_F32))
        return 1;
    uint64_t nshm = 0, ntcp = 0;
    tt_ring_units(r, &nshm, &ntcp);
    if (w > 1 && (shm ? nshm == 0 : nshm != 0))
        FAIL("%llu unit(s) through shared memory", (unsigned long long)nshm);
    if (wd->shm_slots == 1 && ntcp == 0)
        FAIL("one slot, yet no unit went over TCP (%llu through shared memory)",
             (unsigned long long)nshm);
    return 0;
}

/* Rank 1 leaves out the example count the others send with their sums. */
static int scen_side_desync(tt_ring_t *r, int rank, const world_t *wd) {
    static float buf[1000];
    int64_t n = 5;
    (void)wd;
    int rc = rank == 1 ? tt_ring_allreduce(r, buf, 1000, TT_DT_FLOAT32, TT_RED_SUM)
                       : tt_ring_allreduce_side(r, buf, 1000, TT_DT_FLOAT32, TT_RED_SUM, &n);
    if (rc != TT_EDESYNC || strstr(tt_ring_last_error(r), "example count") == NULL)
        FAIL("count desync: got %s (%s)", tt_status_name(rc), tt_ring_last_error(r));
    return 0;
}

static int scen_desync(tt_ring_t *r, int rank, const world_t *wd) {
    static float buf[269322];
    uint64_t t0 = tt_clock_mono_ms();
    int rc = rank == 1 ? tt_ring_broadcast(r, buf, 269322, TT_DT_FLOAT32, 0)
                       : tt_ring_allreduce(r, buf, 269322, TT_DT_FLOAT32, TT_RED_SUM);
    uint64_t took = tt_clock_mono_ms() - t0;
    const char *e = tt_ring_last_error(r);
    if (rc != TT_EDESYNC)
        FAIL("desync: got %s (%s)", tt_status_name(rc), e);
    if (took > 5000)
        FAIL("desync took %llu ms", (unsigned long long)took);
    if (strstr(e, "rank 0 sent allreduce #1 (float32 x 269322) but rank 1 expected "
                  "broadcast #1 (float32 x 269322, root 0)") == NULL)
        FAIL("desync text: %s", e);
    if (tt_ring_allreduce(r, buf, 1, TT_DT_FLOAT32, TT_RED_SUM) != TT_EDESYNC)
        FAIL("ring not poisoned after desync");
    return 0;
}

/* The victim tells the parent it is ready and then idles: the parent stops
 * or kills it while the others are inside an all-reduce. */
static int victim_or_check(tt_ring_t *r, int rank, const world_t *wd, int want, int max_ms) {
    static float buf[300000];
    if (tt_ring_barrier(r) != 0)
        FAIL("warm-up barrier: %s", tt_ring_last_error(r));
    if (rank == wd->w - 1) {
        /* our last barrier frame may still sit in the I/O thread's batch:
         * let it reach rank 0 before the parent stops or kills us */
        usleep(300 * 1000);
        if (write(wd->notify[1], "x", 1) != 1)
            FAIL("notify");
        for (;;)
            pause();
    }
    uint64_t t0 = tt_clock_mono_ms();
    int rc = tt_ring_allreduce(r, buf, 300000, TT_DT_FLOAT32, TT_RED_SUM);
    uint64_t took = tt_clock_mono_ms() - t0;
    if (rc == 0 || (want != 0 && rc != want))
        FAIL("got %s (%s), want %s", tt_status_name(rc), tt_ring_last_error(r),
             tt_status_name(want));
    if ((int)took > max_ms)
        FAIL("failing took %llu ms", (unsigned long long)took);
    if (want == TT_ETIMEDOUT && tt_ring_suspect(r) != wd->w - 1)
        FAIL("suspect %d, not rank %d: %s", tt_ring_suspect(r), wd->w - 1, tt_ring_last_error(r));
    fprintf(stderr, "ring_check rank %d: failed as expected after %llu ms: %s\n", rank,
            (unsigned long long)took, tt_ring_last_error(r));
    return 0;
}

static int scen_stop(tt_ring_t *r, int rank, const world_t *wd) {
    return victim_or_check(r, rank, wd, TT_ETIMEDOUT, wd->deadline_ms + 2000);
}

static int scen_kill(tt_ring_t *r, int rank, const world_t *wd) {
    return victim_or_check(r, rank, wd, 0, 5000);
}

/* Rank 0 is still on generation 8 while rank 1 runs generation 7: rank 1
 * must drop (and count) what rank 0 sends instead of using it, and both
 * time out rather than mixing generations. */
static int scen_stale(tt_ring_t *r, int rank, const world_t *wd) {
    float buf[4] = {1, 2, 3, 4};
    int rc = tt_ring_allreduce(r, buf, 4, TT_DT_FLOAT32, TT_RED_SUM);
    if (rc != TT_ETIMEDOUT)
        FAIL("stale: got %s (%s)", tt_status_name(rc), tt_ring_last_error(r));
    if (rank == 1 && tt_ring_dropped_stale(r) == 0)
        FAIL("stale: rank 0's generation-8 messages were not dropped");
    if (buf[0] != 1 && rank == 1)
        FAIL("stale: a stale message changed the buffer");
    return 0;
}

/* A rank of another job whose member list names rank 1's endpoint (a port
 * the host handed to both jobs) sends it an ABORT of the same generation
 * number before the ring's first all-reduce. Rank 1 must drop it as
 * foreign (and count it), and the all-reduce must complete. */
static int intrude(const char *endpoint) {
    void *ctx = zmq_ctx_new(), *s = ctx ? zmq_socket(ctx, ZMQ_PUSH) : NULL;
    tt_collseq_hdr_t h;
    memset(&h, 0, sizeof(h));
    h.kind = TT_COLLSEQ_ABORT;
    h.aux = -1;
    h.status = TT_EMEMBERSHIP;
    h.generation = 7;
    h.seq = 1;
    h.fp = (tt_coll_fp_t){TT_COLL_ALLREDUCE, TT_DT_FLOAT32, TT_RED_SUM, -1, 1};
    h.job = tt_collseq_job_tag("another-job");
    uint8_t hb[TT_COLLSEQ_HDR_SIZE];
    tt_collseq_encode(&h, hb);
    const char *text = "generation 7 ended while rank 0 was in allreduce #1";
    int linger = 2000, ok = s != NULL &&
                            zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger)) == 0 &&
                            zmq_connect(s, endpoint) == 0 &&
                            zmq_send(s, hb, sizeof(hb), ZMQ_SNDMORE) == (int)sizeof(hb) &&
                            zmq_send(s, text, strlen(text), 0) == (int)strlen(text);
    if (s != NULL)
        zmq_close(s); /* lingers until the frames are out */
    if (ctx != NULL)
        zmq_ctx_term(ctx);
    return ok ? 0 : 1;
}

static int scen_foreign(tt_ring_t *r, int rank, const world_t *wd) {
    if (rank == 0 && intrude(wd->ep[1]) != 0)
        FAIL("foreign: could not send the intruder's frames");
    if (rank == 0)
        usleep(200 * 1000); /* rank 1 waits for the handshake meanwhile */
    int bad = check_f32(r, rank, wd->w, 1000);
    if (rank == 1 && tt_ring_dropped_foreign(r) == 0)
        FAIL("foreign: the other job's ABORT was not dropped as foreign");
    return bad;
}

/* The last rank advertises an address where nothing listens: its left
 * neighbour must fail naming it and that address, not only "timed out
 * waiting"; the others time out (no HELLO comes round). They wait 1 s
 * longer: timing out first, rank 0 would ABORT into rank 1, which would
 * then fail with rank 0's relayed sentence (its warning at half the
 * deadline has named the address by then). */
static int scen_unreached(tt_ring_t *r, int rank, const world_t *wd) {
    float x = 1;
    uint64_t t0 = tt_clock_mono_ms();
    int rc = tt_ring_allreduce(r, &x, 1, TT_DT_FLOAT32, TT_RED_SUM);
    const char *msg = tt_ring_last_error(r);
    if (rc != TT_ETIMEDOUT)
        FAIL("got %s (%s), want ETIMEDOUT", tt_status_name(rc), msg);
    if (rank == wd->w - 2) {
        char want[128];
        snprintf(want, sizeof(want), "cannot connect to rank %d at %s", wd->w - 1, wd->wrong);
        if (strstr(msg, want) == NULL || tt_ring_suspect(r) != wd->w - 1)
            FAIL("suspect %d, and not '%s' in: %s", tt_ring_suspect(r), want, msg);
    }
    fprintf(stderr, "ring_check rank %d: failed as expected after %llu ms: %s\n", rank,
            (unsigned long long)(tt_clock_mono_ms() - t0), msg);
    return 0;
}

static tt_ring_t *make_ring(int rank, const world_t *wd, uint64_t gen) {
    int last = wd->w - 1;
    tt_ring_opts_t o = {.rank = rank,
                        .world = wd->w,
                        .generation = gen,
                        .endpoints = wd->unreached ? wd->told : wd->ep,
                        .bind_endpoint = wd->unreached && rank == last ? wd->ep[last] : NULL,
                        .deadline_ms = wd->deadline_ms + (wd->unreached && rank != last - 1
                                                              ? 1000 /* see scen_unreached */
                                                              : 0),
                        .job_tag = tt_collseq_job_tag("ring_check"),
                        .tcp_only = wd->tcp_only || rank == wd->tcp_rank,
                        .shm_slots = wd->shm_slots};
    tt_ring_t *r = NULL;
    char err[256] = "";
    if (tt_ring_create(&r, &o, err, sizeof(err)) != 0)
        fprintf(stderr, "ring_check rank %d: create gen %llu: %s\n", rank, (unsigned long long)gen,
                err);
    return r;
}

/* A regroup where the last rank keeps its generation-7 ring (bound to the
 * same endpoint) for 400 ms after the others built generation 8 and
 * started their first all-reduce: their first frames reach its old socket.
 * Every rank must still get the right sum on generation 8, and an
 * interrupted collective must end with TT_EMEMBERSHIP, not its deadline. */
static int scen_regroup(tt_ring_t *r, int rank, const world_t *wd) {
    int bad = check_f32(r, rank, wd->w, 1000003); /* links of gen 7 up */
    if (rank == wd->w - 1)
        usleep(400 * 1000);
    tt_ring_destroy(&r);
    tt_ring_t *r8 = make_ring(rank, wd, 8);
    if (r8 == NULL)
        return 1;
    uint64_t t0 = tt_clock_mono_ms();
    bad += check_f32(r8, rank, wd->w, 1000003);
    bad += check_barrier(r8, rank, wd->w);
    uint64_t took = tt_clock_mono_ms() - t0;
    if (took > 3000)
        FAIL("regroup: generation 8's first all-reduce took %llu ms", (unsigned long long)took);
    tt_ring_interrupt(r8); /* as the comm layer does on generation 9 */
    float x = 1;
    int rc = tt_ring_allreduce(r8, &x, 1, TT_DT_FLOAT32, TT_RED_SUM);
    if (rc != TT_EMEMBERSHIP && rc != TT_EREMOTE)
        FAIL("regroup: an interrupted ring answered %s", tt_status_name(rc));
    tt_ring_destroy(&r8);
    return bad;
}

/* Why desync scenarios linger: the rank that finds the desync first
 * passes its ABORT to the right, and it reaches its left neighbour only
 * after going round the ring. If that rank's process ended at once, its
 * left neighbour would see it disconnect first and, past
 * TT_RING_GONE_GRACE_MS (meant for an ABORT the neighbour queued itself),
 * report "rank 1 disconnected" instead of the desync the test checks for:
 * seen once under ThreadSanitizer with three ranks. */
static void linger(const world_t *wd) {
    char c = 'd';
    if (write(wd->done[1], &c, 1) != 1)
        return;
    while (read(wd->hold[0], &c, 1) > 0)
        ;
}

static int child(int rank, const world_t *wd, scenario_fn fn) {
    if (wd->lingers)
        close(wd->hold[1]); /* the parent's copy is the last: EOF when it closes */
    tt_ring_t *r = make_ring(rank, wd, fn == scen_stale && rank == 0 ? 8 : 7);
    if (r == NULL)
        return 1;
    if (fn == scen_regroup)
        return fn(r, rank, wd); /* destroys r itself */
    int bad = fn(r, rank, wd);
    if (wd->lingers)
        linger(wd);
    tt_ring_destroy(&r);
    return bad;
}

/* The parent's half: every rank done, or `ms` passed (a rank that died
 * before saying so), then the ranks may end. */
static void release_when_done(world_t *wd, int ms) {
    char c;
    uint64_t end = tt_clock_mono_ms() + (uint64_t)ms;
    for (int n = 0; n < wd->w && tt_clock_mono_ms() < end;) {
        struct pollfd p = {.fd = wd->done[0], .events = POLLIN};
        if (poll(&p, 1, 100) == 1 && read(wd->done[0], &c, 1) == 1)
            n++;
    }
    close(wd->hold[1]);
}

/* Runs one world; victim_sig (SIGSTOP/SIGKILL) is sent to the last rank
 * once it reports ready. Returns the number of ranks that failed. */
static int run_world(int w, int deadline_ms, scenario_fn fn, int victim_sig, const char *name) {
    world_t wd = {.w = w,
                  .deadline_ms = deadline_ms,
                  .tcp_only = !strcmp(name, "sum-tcp"),
                  .tcp_rank = !strcmp(name, "sum-mixed") ? 2 : -1,
                  .shm_slots = !strcmp(name, "sum-fewslots") ? 1 : 0};
    pid_t pids[MAXW];
    int bad = 0, status;
    uint64_t t0 = tt_clock_mono_ms();
    wd.lingers = fn == scen_desync || fn == scen_side_desync;
    if (pick_ports(&wd) != 0 || pipe(wd.notify) != 0 || pipe(wd.done) != 0 || pipe(wd.hold) != 0)
        return w;
    if (fn == scen_unreached) {
        /* Port 1: refused, and never some process's port by chance. A free
         * port of the ephemeral range, closed again, can become the source
         * port of the PUSH's own connect, which then meets itself. */
        wd.unreached = 1;
        snprintf(wd.wrong, sizeof(wd.wrong), "tcp://127.0.0.1:1");
        for (int i = 0; i < w; i++)
            wd.told[i] = i == w - 1 ? wd.wrong : wd.ep[i];
    }
    fflush(NULL);
    for (int i = 0; i < w; i++) {
        pids[i] = fork();
        if (pids[i] == 0)
            exit(child(i, &wd, fn)); /* exit, not _exit: LeakSanitizer runs at exit */
    }
    if (wd.lingers)
        release_when_done(&wd, deadline_ms);
    else
        close(wd.hold[1]);
    if (victim_sig != 0) {
        char c;
        if (read(wd.notify[0], &c, 1) == 1)
            kill(pids[w - 1], victim_sig);
    }
    for (int i = 0; i < w; i++) {
        if (victim_sig != 0 && i == w - 1) {
            kill(pids[i], SIGKILL);
            waitpid(pids[i], &status, 0);
            continue;
        }
        waitpid(pids[i], &status, 0);
        bad += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    close(wd.notify[0]);
    close(wd.notify[1]);
    close(wd.done[0]);
    close(wd.done[1]);
    close(wd.hold[0]);
    printf("%-8s W=%d: %s (%llu ms)\n", name, w, bad ? "FAILED" : "ok",
           (unsigned long long)(tt_clock_mono_ms() - t0));
    fflush(stdout);
    return bad;
}

int main(int argc, char **argv) {
    const char *which = argc > 1 ? argv[1] : "all";
    int all = strcmp(which, "all") == 0, bad = 0;
    tt_log_init_from_env();
    alarm(170); /* a hang must end the test, not CI */
    for (int w = 1; w <= 4 && (all || !strcmp(which, "sum")); w++)
        bad += run_world(w, 30000, scen_sum, 0, "sum");
    for (int w = 2; w <= 4 && (all || !strcmp(which, "sum-tcp")); w++)
        bad += run_world(w, 30000, scen_sum, 0, "sum-tcp");
    if (all || !strcmp(which, "sum-mixed"))
        bad += run_world(4, 30000, scen_sum, 0, "sum-mixed");
    for (int w = 2; w <= 3 && (all || !strcmp(which, "sum-fewslots")); w++)
        bad += run_world(w, 30000, scen_sum, 0, "sum-fewslots");
    for (int w = 2; w <= 4 && (all || !strcmp(which, "desync")); w++)
        bad += run_world(w, 60000, scen_desync, 0, "desync");
    for (int w = 2; w <= 3 && (all || !strcmp(which, "desync")); w++)
        bad += run_world(w, 5000, scen_side_desync, 0, "desync-count");
    if (all || !strcmp(which, "stale"))
        bad += run_world(2, 1000, scen_stale, 0, "stale");
    if (all || !strcmp(which, "regroup"))
        bad += run_world(3, 10000, scen_regroup, 0, "regroup");
    if (all || !strcmp(which, "foreign"))
        bad += run_world(2, 10000, scen_foreign, 0, "foreign");
    if (all || !strcmp(which, "stop"))
        bad += run_world(3, 2000, scen_stop, SIGSTOP, "sigstop");
    if (all || !strcmp(which, "kill"))
        bad += run_world(3, 30000, scen_kill, SIGKILL, "sigkill");
    if (all || !strcmp(which, "unreached"))
        bad += run_world(3, 2000, scen_unreached, 0, "unreached");
    printf("ring_check: %s\n", bad ? "FAILED" : "all ok");
    return bad ? 1 : 0;
}
