/* coll_check: one rank of the collectives integration test. It joins a job
 * through a real tether-coordinator with the public libtether API only,
 * runs a scenario and prints one machine-readable line per check on
 * stdout (line-buffered), for test_collectives.py:
 *   JOINED gen=G rank=R world=W
 *   OK <check> [details]          a check passed
 *   FAIL <check> <why>            a check failed (exit status 1 at the end)
 *   RESULT status=<NAME> ms=<elapsed> msg=<last error>   (desync, stop)
 *   READY                          (stop: the test may now SIGSTOP a rank)
 *   DONE                           then, with --idle, waits for SIGTERM
 * Every rank derives every other rank's input from (salt, rank, index), so
 * it checks its result against a reference it computes itself.
 * Scenarios: "all" (all-reduce sum/min/max for float32, float64, int64 at
 * sizes 1, W-1, 1000003 and with --big 64 MiB; broadcast; barrier; three
 * bucketed steps with grad_ready in reverse order and compute-like delays,
 * compared with one big all-reduce; the divergence audit), "desync" (rank
 * --odd-rank broadcasts while the others all-reduce), "stop" (an all-reduce
 * after READY, while the test holds one rank stopped), "steps" (only the
 * bucketed steps, checked against the local reference: for the ps
 * backend, whose result comes from the shard servers), "regroup" (a collective after
 * the test killed a rank fails; tether_step_done then reports the new
 * generation and the next all-reduce runs on the rebuilt ring). */
#include "tether/tether.h"
#include "tt_rng.h"

#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t cc_stop; /* set by SIGTERM; nothing else reachable */

static void on_signal(int sig) {
    (void)sig;
    cc_stop = 1;
}

typedef struct cc {
    tether_t *t;
    int rank, world, failures, big, odd_rank, idle;
    int audit; /* audit_every is on (TETHER_AUDIT_EVERY=0 turns it off) */
    const char *scenario;
} cc_t;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static uint64_t draw(uint64_t salt, int rank, size_t i) {
    uint64_t s = (salt * 0x9E3779B97F4A7C15ULL) ^ ((uint64_t)rank << 48) ^ (uint64_t)i;
    return tt_rng_next(&s);
}

/* float32: [0.5, 1.5) on a 2^-23 grid; float64: multiples of 2^-10 below
 * 2^10 (sums of a few are exact in any order); int64: wide signed values. */
static float val_f32(uint64_t salt, int rank, size_t i) {
    return 0.5f + (float)(draw(salt, rank, i) >> 41) / 8388608.0f;
}
static double val_f64(uint64_t salt, int rank, size_t i) {
    return (double)(draw(salt, rank, i) >> 44) / 1024.0;
}
static int64_t val_i64(uint64_t salt, int rank, size_t i) {
    return (int64_t)(draw(salt, rank, i) >> 4) - ((int64_t)1 << 59);
}

static void fail(cc_t *c, const char *check, const char *fmt, size_t i, double got, double want) {
    printf("FAIL %s ", check);
    printf(fmt, i, got, want);
    printf("\n");
    c->failures++;
}

static void coll_error(cc_t *c, const char *check, int rc) {
    printf("FAIL %s %s: %s\n", check, tether_status_name(rc), tether_last_error(c->t));
    c->failures++;
}

/* ---- all-reduce ---- */

static int check_f32(cc_t *c, const float *b, size_t n, uint64_t salt, int op, const char *name) {
    for (size_t i = 0; i < n; i++) {
        double ref = op == TETHER_SUM ? 0.0 : val_f32(salt, 0, i);
        for (int r = 0; r < c->world; r++) {
            double v = val_f32(salt, r, i);
            ref = op == TETHER_SUM ? ref + v : op == TETHER_MIN ? fmin(ref, v) : fmax(ref, v);
        }
        double tol = op == TETHER_SUM ? 1e-6 * ref : 0.0;
        if (fabs(b[i] - ref) > tol) {
            fail(c, name, "element %zu is %.9g, expected %.9g", i, b[i], ref);
            return -1;
        }
    }
    return 0;
}

static int run_f32(cc_t *c, size_t n, int op, uint64_t salt) {
    char name[64];
    snprintf(name, sizeof(name), "allreduce_f32_%s_%zu",
             op == TETHER_SUM   ? "sum"
             : op == TETHER_MIN ? "min"
                                : "max",
             n);
    float *b = malloc((n ? n : 1) * sizeof(*b));
    for (size_t i = 0; i < n; i++)
        b[i] = val_f32(salt, c->rank, i);
    double t0 = now_ms();
    int rc = tether_allreduce(c->t, b, n, TETHER_FLOAT32, op);
    double ms = now_ms() - t0;
    if (rc != TETHER_OK)
        coll_error(c, name, rc);
    else if (check_f32(c, b, n, salt, op, name) == 0)
        printf("OK %s %.1f ms\n", name, ms);
    free(b);
    return rc;
}

static void run_f64_sum(cc_t *c, size_t n, uint64_t salt) {
    char name[64];
    snprintf(name, sizeof(name), "allreduce_f64_sum_%zu", n);
    double *b = malloc((n ? n : 1) * sizeof(*b));
    for (size_t i = 0; i < n; i++)
        b[i] = val_f64(salt, c->rank, i);
    int rc = tether_allreduce(c->t, b, n, TETHER_FLOAT64, TETHER_SUM);
    size_t bad = n;
    for (size_t i = 0; rc == TETHER_OK && i < n && bad == n; i++) {
        double ref = 0;
        for (int r = 0; r < c->world; r++)
            ref += val_f64(salt, r, i);
        if (b[i] != ref) /* exact: every partial sum is representable */
            fail(c, name, "element %zu is %.17g, expected %.17g", bad = i, b[i], ref);
    }
    if (rc != TETHER_OK)
        coll_error(c, name, rc);
    else if (bad == n)
        printf("OK %s\n", name);
    free(b);
}

static void run_i64(cc_t *c, size_t n, int op, uint64_t salt) {
    char name[64];
    snprintf(name, sizeof(name), "allreduce_i64_%s_%zu", op == TETHER_SUM ? "sum" : "min", n);
    int64_t *b = malloc((n ? n : 1) * sizeof(*b));
    for (size_t i = 0; i < n; i++)
        b[i] = val_i64(salt, c->rank, i);
    int rc = tether_allreduce(c->t, b, n, TETHER_INT64, op);
    size_t bad = n;
    for (size_t i = 0; rc == TETHER_OK && i < n && bad == n; i++) {
        int64_t ref = op == TETHER_SUM ? 0 : INT64_MAX;
        for (int r = 0; r < c->world; r++) {
            int64_t v = val_i64(salt, r, i);
            ref = op == TETHER_SUM ? ref + v : (v < ref ? v : ref);
        }
        if (b[i] != ref)
            fail(c, name, "element %zu is %.0f, expected %.0f", bad = i, (double)b[i], (double)ref);
    }
    if (rc != TETHER_OK)
        coll_error(c, name, rc);
    else if (bad == n)
        printf("OK %s\n", name);
    free(b);
}

static void run_allreduces(cc_t *c) {
    size_t sizes[4] = {1, (size_t)(c->world - 1), 1000003, (size_t)16 << 20};
    size_t nsizes = c->big ? 4 : 3;
    for (size_t k = 0; k < nsizes; k++) {
        if (k == 1 && c->world == 1)
            continue; /* W-1 = 0 elements: covered by the ring's own tests */
        run_f32(c, sizes[k], TETHER_SUM, 100 + k);
        if (k < 3) {
            run_f64_sum(c, sizes[k], 200 + k);
            run_i64(c, sizes[k], TETHER_SUM, 300 + k);
        }
    }
    run_f32(c, 1000003, TETHER_MIN, 400);
    run_f32(c, 1000003, TETHER_MAX, 401);
    run_i64(c, 4097, TETHER_MIN, 402);
}

/* ---- broadcast, barrier ---- */

static void run_broadcast(cc_t *c) {
    size_t n = 1000003;
    int root = c->world - 1;
    double *b = malloc(n * sizeof(*b));
    for (size_t i = 0; i < n; i++)
        b[i] = c->rank == root ? val_f64(500, root, i) : -1.0;
    int rc = tether_broadcast(c->t, b, n, TETHER_FLOAT64, root);
    size_t bad = n;
    for (size_t i = 0; rc == TETHER_OK && i < n && bad == n; i++)
        if (b[i] != val_f64(500, root, i))
            fail(c, "broadcast", "element %zu is %.17g, expected %.17g", bad = i, b[i],
                 val_f64(500, root, i));
    if (rc != TETHER_OK)
        coll_error(c, "broadcast", rc);
    else if (bad == n)
        printf("OK broadcast root=%d\n", root);
    free(b);
    for (int i = 0; i < 3; i++) {
        rc = tether_barrier(c->t);
        if (rc != TETHER_OK) {
            coll_error(c, "barrier", rc);
            return;
        }
    }
    printf("OK barrier x3\n");
}

/* ---- bucketed steps ---- */

#define NT 6
static const size_t tensor_sizes[NT] = {1000, 300000, 7, 250000, 123457, 40000};

/* Every gradient against the reference sum over ranks / global count. */
static int compare_reference(cc_t *c, const float *grads, size_t total, uint64_t salt,
                             int64_t global) {
    for (size_t i = 0; i < total; i++) {
        double want = 0;
        for (int r = 0; r < c->world; r++)
            want += val_f32(salt, r, i);
        want /= (double)global;
        if (fabs(grads[i] - want) > 2e-6 * want) {
            fail(c, "steps", "element %zu is %.9g, expected %.9g", i, grads[i], want);
            return -1;
        }
    }
    return 0;
}

/* Compares every gradient with (one big all-reduce of the inputs) / count. */
static int compare_steps(cc_t *c, const float *grads, size_t total, uint64_t salt, int64_t global) {
    if (strcmp(c->scenario, "steps") == 0) /* ps: the result comes from the shards */
        return compare_reference(c, grads, total, salt, global);
    float *big = malloc(total * sizeof(*big));
    for (size_t i = 0; i < total; i++)
        big[i] = val_f32(salt, c->rank, i);
    int rc = tether_allreduce(c->t, big, total, TETHER_FLOAT32, TETHER_SUM);
    if (rc != TETHER_OK) {
        coll_error(c, "buckets_reference", rc);
        free(big);
        return -1;
    }
    for (size_t i = 0; i < total; i++) {
        double want = (double)big[i] / (double)global;
        if (fabs(grads[i] - want) > 1e-6 * want) {
            fail(c, "buckets", "element %zu is %.9g, one big all-reduce gives %.9g", i, grads[i],
                 want);
            free(big);
            return -1;
        }
    }
    free(big);
    return 0;
}

static int one_step(cc_t *c, float *grads, size_t total, const size_t *ids, uint64_t salt,
                    int64_t *global) {
    for (size_t i = 0; i < total; i++)
        grads[i] = val_f32(salt, c->rank, i);
    for (int k = NT - 1; k >= 0; k--) { /* backward: last layer first */
        usleep(2000);                   /* the compute of the layer below */
        int rc = tether_grad_ready(c->t, ids[k]);
        if (rc != TETHER_OK) {
            coll_error(c, "grad_ready", rc);
            return rc;
        }
    }
    int rc = tether_step_finish(c->t, c->rank + 1, global);
    if (rc != TETHER_OK)
        coll_error(c, "step_finish", rc);
    return rc;
}

static void run_steps(cc_t *c) {
    size_t total = 0, ids[NT];
    for (int k = 0; k < NT; k++)
        total += tensor_sizes[k];
    float *grads = malloc(total * sizeof(*grads)), params[64];
    for (int i = 0; i < 64; i++)
        params[i] = (float)i * 0.25f;
    size_t off = 0;
    for (int k = 0; k < NT; k++) { /* back to back: the zero-copy path */
        tether_grad_register(c->t, grads + off, tensor_sizes[k], &ids[k]);
        off += tensor_sizes[k];
    }
    tether_audit_params(c->t, params, 64);
    int64_t want = (int64_t)c->world * (c->world + 1) / 2, global = 0;
    int ok = 1;
    for (int s = 0; s < 3 && ok; s++) {
        ok = one_step(c, grads, total, ids, 600 + (uint64_t)s, &global) == TETHER_OK;
        if (ok && global != want) {
            fail(c, "buckets_count", "step %zu: global count %.0f, expected %.0f", (size_t)s,
                 (double)global, (double)want);
            ok = 0;
        }
        ok = ok && compare_steps(c, grads, total, 600 + (uint64_t)s, global) == 0;
    }
    tether_step_stats_t st;
    tether_step_stats(c->t, &st);
    /* steps 0 and 2 with audit_every 2 (ps: over its side ring) */
    uint64_t audits = c->audit ? 2 : 0;
    if (ok && st.audits != audits)
        fail(c, "audit", "%zu: %.0f audits, expected %.0f", 0, (double)st.audits, (double)audits);
    else if (ok)
        printf("OK buckets steps=%" PRIu64 " buckets=%" PRIu64 " wait_share=%.3f audits=%" PRIu64
               " backend=%s\n",
               st.steps, st.buckets, st.total_step_s > 0 ? st.total_wait_s / st.total_step_s : 0,
               st.audits, st.backend);
    free(grads);
}

/* ---- failure scenarios ---- */

static void result_line(cc_t *c, int rc, double t0) {
    printf("RESULT status=%s ms=%.0f msg=%s\n", tether_status_name(rc), now_ms() - t0,
           tether_last_error(c->t));
}

static void run_desync(cc_t *c) {
    size_t n = 269322;
    float *b = calloc(n, sizeof(*b));
    tether_barrier(c->t); /* everyone is connected before the clock starts */
    double t0 = now_ms();
    int rc = c->rank == c->odd_rank ? tether_broadcast(c->t, b, n, TETHER_FLOAT32, 0)
                                    : tether_allreduce(c->t, b, n, TETHER_FLOAT32, TETHER_SUM);
    result_line(c, rc, t0);
    free(b);
}

static void run_stop(cc_t *c) {
    int rc = tether_barrier(c->t);
    if (rc != TETHER_OK) {
        coll_error(c, "barrier", rc);
        return;
    }
    printf("READY\n");
    usleep(1500 * 1000); /* the test stops a rank meanwhile */
    float v = 1.0f;
    double t0 = now_ms();
    rc = tether_allreduce(c->t, &v, 1, TETHER_FLOAT32, TETHER_SUM);
    result_line(c, rc, t0);
}

/* After READY the test kills a rank: the next collective fails, then
 * tether_step_done learns of the new generation and the collective after
 * that runs on a ring rebuilt for it. */
static void run_regroup(cc_t *c) {
    int rc = tether_barrier(c->t);
    if (rc != TETHER_OK) {
        coll_error(c, "barrier", rc);
        return;
    }
    printf("READY\n");
    usleep(800 * 1000); /* the test kills a rank meanwhile */
    int64_t v = 1;
    double t0 = now_ms();
    rc = tether_allreduce(c->t, &v, 1, TETHER_INT64, TETHER_SUM);
    result_line(c, rc, t0);
    for (int i = 0; i < 300 && rc != TETHER_REGROUPED; i++) {
        rc = tether_step_done(c->t, 0);
        if (rc != TETHER_REGROUPED)
            usleep(50 * 1000);
    }
    printf("REGROUPED status=%s gen=%" PRIu64 " rank=%d world=%u\n", tether_status_name(rc),
           tether_generation(c->t), tether_rank(c->t), tether_world_size(c->t));
    v = tether_rank(c->t) + 1;
    rc = tether_allreduce(c->t, &v, 1, TETHER_INT64, TETHER_SUM);
    printf("SUM status=%s value=%" PRId64 " msg=%s\n", tether_status_name(rc), v,
           rc == TETHER_OK ? "" : tether_last_error(c->t));
}

/* ---- main ---- */

static int parse_args(cc_t *c, int argc, char **argv) {
    c->scenario = "all";
    c->odd_rank = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--scenario") == 0 && i + 1 < argc)
            c->scenario = argv[++i];
        else if (strcmp(argv[i], "--odd-rank") == 0 && i + 1 < argc)
            c->odd_rank = atoi(argv[++i]);
        else if (strcmp(argv[i], "--big") == 0)
            c->big = 1;
        else if (strcmp(argv[i], "--idle") == 0)
            c->idle = 1;
        else {
            fprintf(stderr,
                    "usage: coll_check [--scenario all|desync|stop|steps|regroup] [--odd-rank R] "
                    "[--big] [--idle]\n");
            return -1;
        }
    }
    return 0;
}

static int start(cc_t *c) {
    tether_opts_t o;
    tether_coll_opts_t co;
    char err[512] = "";
    tether_opts_default(&o);
    int rc = tether_opts_from_env(&o, err, sizeof(err));
    if (rc == TETHER_OK)
        rc = tether_create(&c->t, &o, err, sizeof(err));
    tether_coll_opts_default(&co);
    co.bucket_bytes = 256 << 10; /* many buckets for the step check */
    co.first_bucket_bytes = 64 << 10;
    co.audit_every = 2;
    if (rc == TETHER_OK)
        rc = tether_coll_opts_from_env(&co, err, sizeof(err));
    c->audit = co.audit_every != 0;
    if (rc == TETHER_OK)
        rc = tether_coll_configure(c->t, &co, err, sizeof(err));
    if (rc == TETHER_OK && (rc = tether_join(c->t, 0)) != TETHER_OK)
        snprintf(err, sizeof(err), "%s", tether_last_error(c->t));
    if (rc != TETHER_OK) {
        printf("FAIL start %s: %s\n", tether_status_name(rc), err);
        return -1;
    }
    c->rank = tether_rank(c->t);
    c->world = (int)tether_world_size(c->t);
    printf("JOINED gen=%" PRIu64 " rank=%d world=%d\n", tether_generation(c->t), c->rank, c->world);
    return 0;
}

int main(int argc, char **argv) {
    cc_t c = {0};
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    if (parse_args(&c, argc, argv) != 0)
        return 2;
    if (start(&c) != 0) {
        tether_destroy(&c.t);
        return 1;
    }
    if (strcmp(c.scenario, "desync") == 0) {
        run_desync(&c);
    } else if (strcmp(c.scenario, "stop") == 0) {
        run_stop(&c);
    } else if (strcmp(c.scenario, "steps") == 0) {
        run_steps(&c);
    } else if (strcmp(c.scenario, "regroup") == 0) {
        run_regroup(&c);
    } else {
        run_allreduces(&c);
        run_broadcast(&c);
        run_steps(&c);
    }
    printf("DONE failures=%d\n", c.failures);
    while (c.idle && !cc_stop)
        usleep(20 * 1000);
    tether_destroy(&c.t);
    return c.failures ? 1 : 0;
}
