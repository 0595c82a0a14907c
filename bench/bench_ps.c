/* bench_ps: push+pull throughput of the PS backend (worker/tt_ps against
 * tether-shard daemons run in this process, one loop thread each) for 1,
 * 16 and 64 MiB buffers with 1, 2, 4 workers and 1, 2 shards, next to the
 * limit: raw ZeroMQ moving the same chunk-sized messages over loopback in
 * the same topology (each worker thread sends its buffer in chunks to a
 * ROUTER echo thread per "shard", with the same credit window, and copies
 * the echoes back into its buffer), measured in the same run.
 * GB/s = buffer bytes / time of one call, per worker (every worker pushes
 * its whole buffer and receives the whole result: the gradient in, result
 * out figure). ps/raw is the share of the transport limit the PS backend
 * reaches. Each cell is the median of its iterations.
 * Usage: bench_ps [-i iter_scale_percent] [-c credits] [-k chunk_bytes] [-m MiB]
 * (-m: only the rows of that buffer size, e.g. to repeat one noisy cell) */
#include "shard.h"
#include "tt_clock.h"
#include "tt_log.h"
#include "tt_placement.h"
#include "tt_ps.h"
#include "tt_status.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>
#include <zmq.h>

#define MAXW  4
#define MAXS  2
#define MAXIT 512
#define MAXR  15
#define MIB   ((size_t)1 << 20)

static const size_t sizes[] = {1 * MIB, 16 * MIB, 64 * MIB};
static const int base_iters[] = {400, 20, 5};
static const int base_rounds[] = {5, 3, 1}; /* fresh servers each: instances differ */
static const int worlds[] = {1, 2, 4};
static const int nshards_list[] = {1, 2};

typedef struct bench_cfg {
    int iter_pct, credits, io_threads, rounds;
    size_t chunk_bytes;
} bench_cfg_t;

/* One cell: median call times and the median of the paired ratios. */
typedef struct cell {
    double ps_ms, raw_ms, paired;
} cell_t;

/* ---- shard daemons in threads ---- */

typedef struct shard_thr {
    pthread_t th;
    uv_loop_t loop;
    uv_async_t stop;
    tt_shard_t *shard;
    char endpoint[256];
    int ready, rc, io_threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} shard_thr_t;

static void on_stop(uv_async_t *a) {
    shard_thr_t *t = a->data;
    tt_shard_close(t->shard);
    uv_close((uv_handle_t *)&t->stop, NULL);
}

static void *shard_main(void *arg) {
    shard_thr_t *t = arg;
    char id[16], err[256] = "";
    snprintf(id, sizeof(id), "b%p", (void *)t);
    uv_loop_init(&t->loop);
    tt_shard_opts_t o = {.listen = "tcp://127.0.0.1:0",
                         .id = id,
                         .park_timeout_ms = 60000,
                         .io_threads = (uint32_t)t->io_threads};
    t->rc = tt_shard_create(&t->shard, &t->loop, &o, err, sizeof(err));
    if (t->rc == TT_OK) {
        snprintf(t->endpoint, sizeof(t->endpoint), "%s", tt_shard_endpoint(t->shard));
        uv_async_init(&t->loop, &t->stop, on_stop);
        t->stop.data = t;
    } else {
        fprintf(stderr, "bench_ps: shard: %s\n", err);
    }
    pthread_mutex_lock(&t->mu);
    t->ready = 1;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    if (t->rc == TT_OK) {
        uv_run(&t->loop, UV_RUN_DEFAULT);
        tt_shard_destroy(&t->shard);
    }
    uv_loop_close(&t->loop);
    return NULL;
}

static int shard_start(shard_thr_t *t, int io_threads) {
    memset(t, 0, sizeof(*t));
    t->io_threads = io_threads;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    if (pthread_create(&t->th, NULL, shard_main, t) != 0)
        return TT_ESYS;
    pthread_mutex_lock(&t->mu);
    while (!t->ready)
        pthread_cond_wait(&t->cv, &t->mu);
    pthread_mutex_unlock(&t->mu);
    return t->rc;
}

static void shard_stop(shard_thr_t *t) {
    if (t->rc == TT_OK)
        uv_async_send(&t->stop);
    pthread_join(t->th, NULL);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
}

/* ---- worker threads ---- */

/* One table row: PS and raw iterations alternate, so both see the same
 * background load on a shared machine. */
typedef struct run {
    const bench_cfg_t *cfg;
    const tt_ps_layout_t *lay, *raw_lay;
    int world, iters;
    pthread_barrier_t bar;
    double ms[2][MAXW][MAXIT]; /* [0] PS, [1] raw */
    int rc[MAXW];
} run_t;

static int raw_round(void **socks, const tt_placement_t *pl, float *buf, int credits);

typedef struct worker_arg {
    run_t *run;
    int rank;
} worker_arg_t;

static int ps_open(run_t *r, int rank, tt_ps_t **ps) {
    tt_ps_opts_t o = {.rank = rank,
                      .world = r->world,
                      .generation = 1,
                      .job_id = "bench",
                      .sender_id = "bench",
                      .layout = r->lay,
                      .credits = r->cfg->credits,
                      .deadline_ms = 120000};
    char err[256] = "";
    int rc = tt_ps_create(ps, &o, err, sizeof(err));
    if (rc != TT_OK)
        fprintf(stderr, "bench_ps: rank %d: %s\n", rank, err);
    return rc;
}

static int raw_open(run_t *r, void **zctx, void **socks) {
    const tt_placement_t *pl = &r->raw_lay->place;
    *zctx = zmq_ctx_new();
    zmq_ctx_set(*zctx, ZMQ_IO_THREADS, (int)pl->nshards);
    int rc = TT_OK, zero = 0;
    for (size_t s = 0; s < pl->nshards; s++) {
        socks[s] = zmq_socket(*zctx, ZMQ_DEALER);
        zmq_setsockopt(socks[s], ZMQ_LINGER, &zero, sizeof(zero));
        if (zmq_connect(socks[s], r->raw_lay->endpoints[s]) != 0)
            rc = TT_ESYS;
    }
    return rc;
}

/* Every rank reaches every barrier, also after a failure, so one failing
 * rank cannot leave the others waiting forever. */
static int iterate(run_t *r, int rank, tt_ps_t *ps, void **socks, float *buf, size_t n) {
    int rc = TT_OK;
    for (int it = -1; it < r->iters; it++) {
        for (int kind = 0; kind < 2; kind++) {
            pthread_barrier_wait(&r->bar);
            uint64_t t0 = tt_clock_mono_ns();
            if (rc == TT_OK && kind == 0)
                rc = tt_ps_allreduce(ps, buf, n, 1, NULL);
            else if (rc == TT_OK)
                rc = raw_round(socks, &r->raw_lay->place, buf, r->cfg->credits);
            if (it >= 0)
                r->ms[kind][rank][it] = (double)(tt_clock_mono_ns() - t0) / 1e6;
        }
    }
    if (rc != TT_OK)
        fprintf(stderr, "bench_ps: rank %d: %s\n", rank, ps ? tt_ps_last_error(ps) : "");
    return rc;
}

/* ---- the raw ZeroMQ limit: echo servers and clients ---- */

typedef struct echo_thr {
    pthread_t th;
    void *zctx, *sock;
    char endpoint[256];
} echo_thr_t;

static void *echo_main(void *arg) {
    echo_thr_t *e = arg;
    for (;;) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, e->sock, 0) < 0) {
            zmq_msg_close(&m);
            break;
        }
        int more = zmq_msg_more(&m);
        if (zmq_msg_send(&m, e->sock, more ? ZMQ_SNDMORE : 0) < 0)
            zmq_msg_close(&m);
    }
    zmq_close(e->sock);
    return NULL;
}

static int echo_start(echo_thr_t *e, void *zctx, size_t max_msg) {
    memset(e, 0, sizeof(*e));
    e->zctx = zctx;
    e->sock = zmq_socket(zctx, ZMQ_ROUTER);
    int64_t mm = (int64_t)max_msg;
    int hwm = 100000, zero = 0;
    zmq_setsockopt(e->sock, ZMQ_MAXMSGSIZE, &mm, sizeof(mm));
    zmq_setsockopt(e->sock, ZMQ_SNDHWM, &hwm, sizeof(hwm));
    zmq_setsockopt(e->sock, ZMQ_RCVHWM, &hwm, sizeof(hwm));
    zmq_setsockopt(e->sock, ZMQ_LINGER, &zero, sizeof(zero));
    size_t len = sizeof(e->endpoint);
    if (zmq_bind(e->sock, "tcp://127.0.0.1:0") != 0 ||
        zmq_getsockopt(e->sock, ZMQ_LAST_ENDPOINT, e->endpoint, &len) != 0)
        return TT_ESYS;
    return pthread_create(&e->th, NULL, echo_main, e) == 0 ? TT_OK : TT_ESYS;
}

static void no_free(void *data, void *hint) {
    (void)data;
    (void)hint;
}

static int raw_send(void *sock, uint32_t chunk, const float *data, size_t n) {
    zmq_msg_t m;
    if (zmq_send(sock, &chunk, sizeof(chunk), ZMQ_SNDMORE) < 0)
        return TT_ESYS;
    zmq_msg_init_data(&m, (void *)data, n * sizeof(float), no_free, NULL);
    if (zmq_msg_send(&m, sock, 0) < 0) {
        zmq_msg_close(&m);
        return TT_ESYS;
    }
    return TT_OK;
}

/* Receives one echo on `sock` and copies it into place. */
static int raw_recv(void *sock, const tt_placement_t *pl, float *buf) {
    uint32_t chunk = 0;
    zmq_msg_t m;
    if (zmq_recv(sock, &chunk, sizeof(chunk), 0) != sizeof(chunk) || chunk >= pl->nchunks)
        return TT_EPROTO;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, sock, 0) < 0) {
        zmq_msg_close(&m);
        return TT_ESYS;
    }
    memcpy(buf + pl->chunks[chunk].offset, zmq_msg_data(&m), zmq_msg_size(&m));
    zmq_msg_close(&m);
    return TT_OK;
}

/* One raw "all-reduce": every chunk out and back, `credits` per shard. */
static int raw_round(void **socks, const tt_placement_t *pl, float *buf, int credits) {
    size_t inflight[MAXS] = {0}, next[MAXS] = {0}, done = 0;
    zmq_pollitem_t items[MAXS];
    while (done < pl->nchunks) {
        for (size_t s = 0; s < pl->nshards; s++) {
            for (; next[s] < pl->nchunks && inflight[s] < (size_t)credits; next[s]++) {
                const tt_place_chunk_t *c = &pl->chunks[next[s]];
                if (c->shard != s)
                    continue;
                if (raw_send(socks[s], (uint32_t)next[s], buf + c->offset, c->count) != TT_OK)
                    return TT_ESYS;
                inflight[s]++;
            }
            items[s] = (zmq_pollitem_t){socks[s], 0, ZMQ_POLLIN, 0};
        }
        if (zmq_poll(items, (int)pl->nshards, 10000) <= 0)
            return TT_ETIMEDOUT;
        for (size_t s = 0; s < pl->nshards; s++) {
            while (items[s].revents & ZMQ_POLLIN) {
                if (raw_recv(socks[s], pl, buf) != TT_OK)
                    return TT_EPROTO;
                inflight[s]--;
                done++;
                int ev = 0;
                size_t len = sizeof(ev);
                zmq_getsockopt(socks[s], ZMQ_EVENTS, &ev, &len);
                items[s].revents = (short)(ev & ZMQ_POLLIN);
            }
        }
    }
    return TT_OK;
}

static void *worker_main(void *arg) {
    worker_arg_t *w = arg;
    run_t *r = w->run;
    size_t n = (size_t)r->lay->place.total_elems;
    float *buf = calloc(n, sizeof(float));
    tt_ps_t *ps = NULL;
    void *zctx = NULL, *socks[MAXS] = {NULL};
    int rc = buf ? TT_OK : TT_ENOMEM;
    for (size_t i = 0; buf != NULL && i < n; i++)
        buf[i] = (float)(i % 1000) * 1e-3f;
    if (rc == TT_OK)
        rc = ps_open(r, w->rank, &ps);
    if (rc == TT_OK)
        rc = raw_open(r, &zctx, socks);
    r->rc[w->rank] = iterate(r, w->rank, rc == TT_OK ? ps : NULL, socks, buf, n);
    if (rc != TT_OK)
        r->rc[w->rank] = rc;
    tt_ps_destroy(&ps);
    for (size_t s = 0; s < MAXS; s++)
        zmq_close(socks[s]);
    if (zctx != NULL)
        zmq_ctx_term(zctx);
    free(buf);
    return NULL;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_n(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return v[n / 2];
}

/* The slowest rank's time of iteration `it`: the call's time for the job. */
static double slowest(const run_t *r, int kind, int it) {
    double t = 0;
    for (int k = 0; k < r->world; k++)
        t = r->ms[kind][k][it] > t ? r->ms[kind][k][it] : t;
    return t;
}

static double median_of(run_t *r, int kind) {
    double per_it[MAXIT] = {0};
    for (int it = 0; it < r->iters; it++)
        per_it[it] = slowest(r, kind, it);
    return median_n(per_it, r->iters);
}

/* Median of raw/PS over the iterations, each pair measured back to back:
 * on a shared 2-CPU box the scheduler's mood changes within a cell, and a
 * ratio of two medians taken over different moments mixes that in. */
static double paired_ratio(run_t *r) {
    double q[MAXIT] = {0};
    for (int it = 0; it < r->iters; it++)
        q[it] = slowest(r, 1, it) / slowest(r, 0, it);
    return median_n(q, r->iters);
}

/* Median over iterations of the slowest rank's time, PS and raw. */
static int run_workers(run_t *r, cell_t *out) {
    pthread_t th[MAXW];
    worker_arg_t args[MAXW];
    pthread_barrier_init(&r->bar, NULL, (unsigned)r->world);
    for (int k = 0; k < r->world; k++) {
        args[k] = (worker_arg_t){r, k};
        pthread_create(&th[k], NULL, worker_main, &args[k]);
    }
    for (int k = 0; k < r->world; k++)
        pthread_join(th[k], NULL);
    pthread_barrier_destroy(&r->bar);
    for (int k = 0; k < r->world; k++) {
        if (r->rc[k] != TT_OK)
            return r->rc[k];
    }
    out->ps_ms = median_of(r, 0);
    out->raw_ms = median_of(r, 1);
    out->paired = paired_ratio(r);
    return TT_OK;
}

/* ---- one table row ---- */

static int make_layout(char eps[][256], int nshards, size_t bytes, size_t chunk_bytes,
                       tt_ps_layout_t *lay) {
    const char *ids[MAXS] = {"b0", "b1"};
    memset(lay, 0, sizeof(*lay));
    int rc = tt_placement_compute(NULL, ids, (size_t)nshards, bytes / sizeof(float), chunk_bytes,
                                  &lay->place, NULL, 0);
    lay->endpoints = calloc(MAXS, sizeof(char *));
    for (int s = 0; rc == TT_OK && lay->endpoints && s < nshards; s++)
        lay->endpoints[s] = eps[s];
    return rc == TT_OK && lay->endpoints ? TT_OK : TT_ENOMEM;
}

typedef struct servers {
    shard_thr_t shards[MAXS];
    echo_thr_t echos[MAXS];
    char eps[MAXS][256], raw_eps[MAXS][256];
    void *zctx;
    int nshards, started, echoed;
} servers_t;

static int servers_start(servers_t *v, const bench_cfg_t *cfg, int nshards) {
    v->nshards = nshards;
    v->zctx = zmq_ctx_new();
    zmq_ctx_set(v->zctx, ZMQ_IO_THREADS, nshards * cfg->io_threads); /* as many as the shards */
    int rc = TT_OK;
    for (; rc == TT_OK && v->started < nshards; v->started++) {
        rc = shard_start(&v->shards[v->started], cfg->io_threads);
        memcpy(v->eps[v->started], v->shards[v->started].endpoint, 256);
    }
    for (; rc == TT_OK && v->echoed < nshards; v->echoed++) {
        rc =
            echo_start(&v->echos[v->echoed], v->zctx,
                       (cfg->chunk_bytes ? cfg->chunk_bytes : TT_PLACE_CHUNK_BYTES_DEFAULT) + 4096);
        memcpy(v->raw_eps[v->echoed], v->echos[v->echoed].endpoint, 256);
    }
    return rc;
}

static void servers_stop(servers_t *v) {
    for (int s = 0; s < v->started; s++)
        shard_stop(&v->shards[s]);
    zmq_ctx_shutdown(v->zctx);
    for (int s = 0; s < v->echoed; s++)
        pthread_join(v->echos[s].th, NULL);
    zmq_ctx_term(v->zctx);
}

static int measure(const bench_cfg_t *cfg, int nshards, int world, size_t bytes, int iters,
                   cell_t *out) {
    servers_t *v = calloc(1, sizeof(*v));
    run_t *r = calloc(1, sizeof(*r));
    tt_ps_layout_t lay, raw_lay;
    memset(&lay, 0, sizeof(lay));
    memset(&raw_lay, 0, sizeof(raw_lay));
    int rc = v && r ? servers_start(v, cfg, nshards) : TT_ENOMEM;
    if (rc == TT_OK)
        rc = make_layout(v->eps, nshards, bytes, cfg->chunk_bytes, &lay);
    if (rc == TT_OK)
        rc = make_layout(v->raw_eps, nshards, bytes, cfg->chunk_bytes, &raw_lay);
    if (rc == TT_OK) {
        *r = (run_t){.cfg = cfg, .lay = &lay, .raw_lay = &raw_lay, .world = world, .iters = iters};
        rc = run_workers(r, out);
    }
    free(lay.endpoints); /* the strings live in v */
    free(raw_lay.endpoints);
    tt_placement_free(&lay.place);
    tt_placement_free(&raw_lay.place);
    if (v != NULL)
        servers_stop(v);
    free(v);
    free(r);
    return rc;
}

/* A cell is the median over `rounds` instances (fresh servers and workers
 * each) of the per-instance medians: on a shared 2-CPU box one instance
 * can land its threads badly for all its iterations. */
static void row(const bench_cfg_t *cfg, size_t bytes, int iters, int rounds, int world,
                int nshards) {
    double ps[MAXR] = {0}, raw[MAXR] = {0}, q[MAXR] = {0}, qlo = 1e9, qhi = 0;
    for (int i = 0; i < rounds; i++) {
        cell_t c = {-1, -1, -1};
        if (measure(cfg, nshards, world, bytes, iters, &c) != TT_OK) {
            printf("%6zu %6s %7d %6d   (failed)\n", bytes / MIB, "", world, nshards);
            return;
        }
        ps[i] = c.ps_ms, raw[i] = c.raw_ms, q[i] = c.paired;
        qlo = c.paired < qlo ? c.paired : qlo;
        qhi = c.paired > qhi ? c.paired : qhi;
    }
    double p = median_n(ps, rounds), r = median_n(raw, rounds), gb = (double)bytes / 1e9;
    uint64_t chunk = cfg->chunk_bytes ? cfg->chunk_bytes : tt_placement_auto_chunk_bytes(bytes / 4);
    printf("%6zu %5lluK %7d %6d %10.2f %9.2f %10.2f %9.2f %7.0f%% %7.0f%%  %3.0f-%.0f%%\n",
           bytes / MIB, (unsigned long long)(chunk >> 10), world, nshards, p, gb / (p / 1e3), r,
           gb / (r / 1e3), 100.0 * r / p, 100.0 * median_n(q, rounds), 100.0 * qlo, 100.0 * qhi);
    fflush(stdout);
}

int main(int argc, char **argv) {
    bench_cfg_t cfg = {.iter_pct = 100,
                       .credits = TT_PS_CREDITS_DEFAULT,
                       .chunk_bytes = 0, /* the size a job gets by default */
                       .io_threads = 2};
    int opt;
    size_t only_mib = 0;
    while ((opt = getopt(argc, argv, "i:c:k:m:r:t:")) != -1) {
        if (opt == 'i')
            cfg.iter_pct = atoi(optarg);
        else if (opt == 'c')
            cfg.credits = atoi(optarg);
        else if (opt == 'k')
            cfg.chunk_bytes = (size_t)strtoull(optarg, NULL, 10);
        else if (opt == 'r')
            cfg.rounds = atoi(optarg);
        else if (opt == 't')
            cfg.io_threads = atoi(optarg);
        else if (opt == 'm')
            only_mib = (size_t)strtoull(optarg, NULL, 10);
        else {
            fprintf(
                stderr,
                "usage: bench_ps [-i iter_pct] [-c credits] [-k chunk_bytes] [-m MiB] [-r rounds] "
                "[-t io_threads]\n");
            return 2;
        }
    }
    tt_log_set_level(TT_LOG_ERROR);
    printf("# PS backend push+pull vs raw ZeroMQ echo of the same chunks, loopback, %s chunks, "
           "%d credits/shard, %d I/O threads/shard, %ld CPUs\n",
           cfg.chunk_bytes ? "fixed" : "default-size", cfg.credits, cfg.io_threads,
           sysconf(_SC_NPROCESSORS_ONLN));
    printf("# GB/s = buffer bytes / call time, per worker; median over iterations\n");
    printf("# ps/raw = ratio of the medians; paired = median of the per-iteration ratios\n");
    printf("# each cell: median over rounds (fresh servers each); range = paired, all rounds\n");
    printf("%6s %6s %7s %6s %10s %9s %10s %9s %8s %8s  %s\n", "MiB", "chunk", "workers", "shards",
           "ps_ms", "ps_GB/s", "raw_ms", "raw_GB/s", "ps/raw", "paired", "range");
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        if (only_mib != 0 && sizes[i] != only_mib * MIB)
            continue;
        int iters = base_iters[i] * cfg.iter_pct / 100;
        iters = iters < 1 ? 1 : iters > MAXIT ? MAXIT : iters;
        int rounds = cfg.rounds > 0 ? cfg.rounds : base_rounds[i];
        rounds = rounds < 1 ? 1 : rounds > MAXR ? MAXR : rounds;
        for (size_t s = 0; s < 2; s++) {
            for (size_t w = 0; w < 3; w++)
                row(&cfg, sizes[i], iters, rounds, worlds[w], nshards_list[s]);
        }
    }
    return 0;
}
