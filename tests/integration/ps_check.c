/* ps_check: the worker side of the shard integration test
 * (test_shard.py). Modes:
 *   ps_check worker --coordinator EP --rank R --world W [--shards N]
 *       one rank of every PS case: odd sizes (1 element, a table that is not
 *       a multiple of the chunk size, 64 MiB) in default and deterministic
 *       mode with unequal example counts, and 20 optimizer-mode steps
 *       against a single-process reference; prints "OK <case> ..." lines;
 *   ps_check bad --coordinator EP [--shards N]
 *       malformed and out-of-scope requests straight to a shard (each must
 *       be refused with the right code), a round that times out naming the
 *       missing rank, and then a good all-reduce on the same shard;
 *   ps_check layout --coordinator EP --job J [--shards N] [--min-shards M]
 *       prints "LAYOUT version=V shards=N chunks=C" once N shards are live;
 *       with --min-shards, the first placement the coordinator gives
 *       (DeclareTensors.min_shards = M), however many shards it spans;
 *   ps_check redo --coordinator EP [--shards N]
 *       optimizer mode, a regroup in the middle of a step: rank 1 (raw
 *       pushes) reaches chunk 0 only and dies; rank 0's step fails on the
 *       other chunks; the survivor, alone in generation 2, redoes the step:
 *       chunk 0 must replay it, not apply it twice, so the parameters equal
 *       a single-process reference, as after the next step;
 *   ps_check reach --coordinator EP --deadline-ms D
 *       sets a job up on its one shard with a call deadline of D ms and
 *       prints "SETUP <status> <sentence>": for a shard that advertises an
 *       address this process cannot reach, the sentence must name it.
 * Every rank derives every rank's gradients from (case, step, rank, i), so
 * each can compute the exact expected result alone. Exit 0 on success. */
#include "ps_fetch.h"
#include "tt_optim.h"
#include "tt_ps.h"
#include "tt_status.h"
#include "tt_wire.h"
#include "tt_zmq.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB       ((uint64_t)1 << 20)
#define OPT_STEPS 20

typedef struct args {
    const char *mode, *coord, *job;
    int rank, world, shards, min_shards, deadline_ms;
} args_t;

static float grad(uint32_t kase, uint64_t step, int rank, uint64_t i) {
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ (step + 7) * 0xBF58476D1CE4E5B9ull ^
                 (uint64_t)(rank + 3) * 0x94D049BB133111EBull ^ kase;
    x ^= x >> 31;
    x *= 0xD6E8FEB86659FD93ull;
    x ^= x >> 29;
    return (float)((double)(x >> 40) / (double)(1ull << 24) * 2.0 - 1.0) * (float)(rank + 1);
}

static uint64_t count_of(int rank) {
    return 10 + 7 * (uint64_t)rank;
}

/* Declares the table and waits until the placement spans `shards`; with
 * --min-shards, the coordinator's first placement as it is (it waited). */
static int fetch(const args_t *a, const char *job, const tt_ps_tensor_t *t, size_t n,
                 uint64_t chunk_bytes, tt_ps_layout_t *lay) {
    char err[512] = "";
    tt_ps_fetch_opts_t fo = {.coordinator = a->coord,
                             .job_id = job,
                             .sender_id = "ps_check",
                             .tensors = t,
                             .ntensors = n,
                             .chunk_bytes = chunk_bytes,
                             .timeout_ms = a->min_shards > 0 ? 10000 : 5000,
                             .min_shards = (uint32_t)a->min_shards};
    int rc = a->min_shards > 0 ? tt_ps_layout_fetch(&fo, lay, err, sizeof(err))
                               : ps_fetch_spanning(&fo, (size_t)a->shards, lay, err, sizeof(err));
    if (rc != TT_OK)
        fprintf(stderr, "placement of %s: %s\n", job, err);
    return rc;
}

static int make_ps(const args_t *a, const char *job, const tt_ps_layout_t *lay,
                   const tt_ps_opts_t *extra, tt_ps_t **ps) {
    tt_ps_opts_t o = extra ? *extra : (tt_ps_opts_t){0};
    o.rank = a->rank;
    o.world = a->world;
    o.generation = o.generation ? o.generation : 1;
    o.job_id = job;
    o.sender_id = "ps_check";
    o.layout = lay;
    o.deadline_ms = o.deadline_ms ? o.deadline_ms : 60000;
    char err[512] = "";
    int rc = tt_ps_create(ps, &o, err, sizeof(err));
    if (rc != TT_OK)
        fprintf(stderr, "rank %d: tt_ps_create(%s): %s (%s)\n", a->rank, job, err,
                tt_status_name(rc));
    return rc;
}

/* Rank-order float sum / total, the deterministic mode's exact answer. */
static float expected(uint32_t kase, uint64_t step, int world, uint64_t i, uint64_t total) {
    float s = grad(kase, step, 0, i);
    for (int r = 1; r < world; r++)
        s += grad(kase, step, r, i);
    return s / (float)total;
}

/* Default mode sums in arrival order: compare against the size of the
 * terms, not of the (possibly cancelling) result. */
static int compare(const char *name, const float *buf, uint64_t n, uint32_t kase, int world,
                   int exact) {
    uint64_t total = 0, bad = 0;
    double worst = 0;
    for (int r = 0; r < world; r++)
        total += count_of(r);
    for (uint64_t i = 0; i < n; i++) {
        float e = expected(kase, 0, world, i, total);
        double mag = 0;
        for (int r = 0; r < world; r++)
            mag += fabs((double)grad(kase, 0, r, i));
        double rel = fabs((double)buf[i] - e) / (mag / (double)total + 1e-30);
        worst = rel > worst ? rel : worst;
        if (exact ? memcmp(&buf[i], &e, sizeof(float)) != 0 : rel > 1e-6) {
            if (bad++ < 3)
                fprintf(stderr, "%s[%llu] = %.9g, expected %.9g\n", name, (unsigned long long)i,
                        (double)buf[i], (double)e);
        }
    }
    printf("%s %s elems=%llu exact=%d worst_rel=%.3g\n", bad ? "FAIL" : "OK", name,
           (unsigned long long)n, exact, worst);
    fflush(stdout);
    return bad ? TT_EDIVERGED : TT_OK;
}

static int run_sum_case(const args_t *a, const char *job, uint32_t kase, const tt_ps_tensor_t *t,
                        size_t nt, int deterministic) {
    tt_ps_layout_t lay;
    int rc = fetch(a, job, t, nt, 0, &lay);
    if (rc != TT_OK)
        return rc;
    tt_ps_opts_t o = {.deterministic = deterministic};
    tt_ps_t *ps = NULL;
    uint64_t n = lay.place.total_elems, total = 0;
    float *buf = malloc(n * sizeof(float));
    if (buf == NULL || (rc = make_ps(a, job, &lay, &o, &ps)) != TT_OK)
        goto out;
    for (uint64_t i = 0; i < n; i++)
        buf[i] = grad(kase, 0, a->rank, i);
    rc = tt_ps_allreduce(ps, buf, n, count_of(a->rank), &total);
    if (rc != TT_OK) {
        fprintf(stderr, "rank %d %s: %s\n", a->rank, job, tt_ps_last_error(ps));
        goto out;
    }
    rc = compare(job, buf, n, kase, a->world, deterministic);
    uint64_t want = 0;
    for (int r = 0; r < a->world; r++)
        want += count_of(r);
    if (total != want) {
        fprintf(stderr, "%s: total count %llu, expected %llu\n", job, (unsigned long long)total,
                (unsigned long long)want);
        rc = TT_EDIVERGED;
    }
out:
    tt_ps_destroy(&ps);
    tt_ps_layout_free(&lay);
    free(buf);
    return rc;
}

/* Single-process reference of the optimizer case: the same SGD over the
 * whole vector with the rank-order sum of all ranks' gradients. */
static void reference_step(float *p, float *mom, float *g, uint64_t n, uint64_t step, int world,
                           float lr, const tt_optim_sgd_hp_t *hp, uint64_t total) {
    for (uint64_t i = 0; i < n; i++) {
        g[i] = grad(77, step, 0, i);
        for (int r = 1; r < world; r++)
            g[i] += grad(77, step, r, i);
    }
    tt_optim_sgd_step(p, g, mom, n, lr, 1.0f / (float)total, hp);
}

static int opt_loop(const args_t *a, tt_ps_t *ps, float *buf, float *ref, float *mom, float *g,
                    uint64_t n, const tt_optim_sgd_hp_t *hp) {
    uint64_t total = 0, want = 0, bad = 0;
    for (int r = 0; r < a->world; r++)
        want += count_of(r);
    for (uint64_t s = 0; s < OPT_STEPS; s++) {
        float lr = 0.1f / (float)(1 + s);
        for (uint64_t i = 0; i < n; i++)
            buf[i] = grad(77, s, a->rank, i);
        tt_ps_set_step(ps, s);
        tt_ps_set_lr(ps, lr);
        int rc = tt_ps_allreduce(ps, buf, n, count_of(a->rank), &total);
        if (rc != TT_OK) {
            fprintf(stderr, "opt step %llu: %s\n", (unsigned long long)s, tt_ps_last_error(ps));
            return rc;
        }
        reference_step(ref, mom, g, n, s, a->world, lr, hp, want);
    }
    for (uint64_t i = 0; i < n; i++)
        bad += fabs((double)buf[i] - ref[i]) > 1e-6 * (fabs(ref[i]) + 1e-3);
    int bitwise = memcmp(buf, ref, n * sizeof(float)) == 0;
    printf("%s optimizer steps=%d elems=%llu bitwise=%d total=%llu\n", bad ? "FAIL" : "OK",
           OPT_STEPS, (unsigned long long)n, bitwise, (unsigned long long)total);
    fflush(stdout);
    return bad || total != want ? TT_EDIVERGED : TT_OK;
}

static int run_opt_case(const args_t *a) {
    tt_ps_tensor_t t[] = {{"w1", 70001}, {"b1", 33}, {"w2", 30011}};
    tt_ps_layout_t lay;
    int rc = fetch(a, "opt", t, 3, 64 << 10, &lay);
    if (rc != TT_OK)
        return rc;
    tt_optim_sgd_hp_t hp = {.momentum = 0.9f, .weight_decay = 1e-4f, .nesterov = 1};
    tt_ps_opts_t o = {.mode = TT_PS_OPTIMIZER, .optim = TT_PS_SGD, .sgd = hp, .deterministic = 1};
    uint64_t n = lay.place.total_elems;
    float *buf = malloc(n * 4), *ref = malloc(n * 4), *mom = calloc(n, 4), *g = malloc(n * 4);
    tt_ps_t *ps = NULL;
    if (buf == NULL || ref == NULL || mom == NULL || g == NULL ||
        (rc = make_ps(a, "opt", &lay, &o, &ps)) != TT_OK)
        goto out;
    for (uint64_t i = 0; i < n; i++)
        ref[i] = (float)sin((double)i * 0.001);
    /* Every rank puts the same state before its first push: a push to a
     * chunk that holds none is refused, and the ranks share no barrier. */
    if ((rc = tt_ps_set_params(ps, TT_PS_PARAMS, ref, 0, n, 0)) != TT_OK) {
        fprintf(stderr, "set params: %s\n", tt_ps_last_error(ps));
        goto out;
    }
    rc = opt_loop(a, ps, buf, ref, mom, g, n, &hp);
    if (rc == TT_OK && a->rank == 0) { /* the shards hold what the workers got */
        rc = tt_ps_get_params(ps, TT_PS_PARAMS, g, 0, n, NULL);
        if (rc == TT_OK && memcmp(g, buf, n * 4) != 0)
            rc = TT_EDIVERGED;
        printf("%s get_params\n", rc == TT_OK ? "OK" : "FAIL");
    }
out:
    tt_ps_destroy(&ps);
    tt_ps_layout_free(&lay);
    free(buf);
    free(ref);
    free(mom);
    free(g);
    return rc;
}

static int worker(const args_t *a) {
    tt_ps_tensor_t one[] = {{"scalar", 1}};
    tt_ps_tensor_t odd[] = {{"a", 1}, {"b", 1000003}, {"c", 3}, {"d", 1048573}};
    tt_ps_tensor_t big[] = {{"big", 64 * MIB / 4}};
    int rc = run_sum_case(a, "one", 1, one, 1, 0);
    if (rc == TT_OK)
        rc = run_sum_case(a, "odd", 2, odd, 4, 0);
    if (rc == TT_OK)
        rc = run_sum_case(a, "odd_det", 3, odd, 4, 1);
    if (rc == TT_OK)
        rc = run_sum_case(a, "big", 4, big, 1, 0);
    if (rc == TT_OK)
        rc = run_opt_case(a);
    return rc;
}

/* ---- bad requests straight to a shard ---- */

typedef struct raw {
    void *zctx, *sock;
    uint64_t req;
    const char *job;
} raw_t;

/* A DEALER straight to one shard, sending as `job`. */
static int raw_open(raw_t *r, const char *job, const char *endpoint) {
    *r = (raw_t){zmq_ctx_new(), NULL, 0, job};
    tt_zmq_opts_t zo;
    tt_zmq_opts_default(&zo);
    zo.immediate = 0;
    char err[256];
    int rc = tt_zmq_dealer(r->zctx, endpoint, &zo, &r->sock, err, sizeof(err));
    if (rc != TT_OK)
        fprintf(stderr, "dealer to %s: %s\n", endpoint, err);
    return rc;
}

/* Sends one request and returns the error code of the reply, 0 for an
 * Ack/result, TT_ETIMEDOUT for no reply. */
static int raw_call(raw_t *r, uint64_t gen, Tether__PushChunk *push, const void *data, size_t len) {
    tt_env_t env;
    tt_wire_env_init(&env, r->job, "ps_check", gen, ++r->req);
    env.body_case = TETHER__ENVELOPE__BODY_PUSH_CHUNK;
    env.push_chunk = push;
    tt_zmq_payload_t pl = {data, len, NULL, NULL};
    if (tt_zmq_send(r->sock, NULL, 0, &env, &pl, 1, 0) != TT_OK)
        return TT_ESYS;
    zmq_pollitem_t it = {r->sock, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, 3000) <= 0)
        return TT_ETIMEDOUT;
    tt_zmq_rx_t rx;
    char err[256];
    int rc = tt_zmq_recv(r->sock, 0, 0, NULL, &rx, err, sizeof(err));
    if (rc != TT_OK)
        return rc;
    rc = rx.env->body_case == TETHER__ENVELOPE__BODY_ERROR ? rx.env->error->code : TT_OK;
    if (rx.env->body_case == TETHER__ENVELOPE__BODY_ERROR)
        printf("  refused: %s\n", rx.env->error->message);
    tt_zmq_rx_close(&rx);
    return rc;
}

static int raw_garbage(raw_t *r) {
    const char junk[] = "\x08\x01\xff\xff garbage";
    zmq_send(r->sock, junk, sizeof(junk), 0);
    zmq_pollitem_t it = {r->sock, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, 3000) <= 0)
        return TT_ETIMEDOUT;
    tt_zmq_rx_t rx;
    char err[256];
    int rc = tt_zmq_recv(r->sock, 0, 0, NULL, &rx, err, sizeof(err));
    if (rc == TT_OK) {
        rc = rx.env->body_case == TETHER__ENVELOPE__BODY_ERROR ? rx.env->error->code : TT_OK;
        tt_zmq_rx_close(&rx);
    }
    return rc;
}

static int expect(const char *what, int got, int want) {
    printf("%s %s: %s (expected %s)\n", got == want ? "OK" : "FAIL", what, tt_status_name(got),
           tt_status_name(want));
    fflush(stdout);
    return got == want ? TT_OK : TT_EDIVERGED;
}

static int raw_checks(raw_t *r, uint64_t elems, const float *g1) {
    float three[3] = {1, 2, 3};
    Tether__PushChunk p = TETHER__PUSH_CHUNK__INIT;
    p.rank = 1;
    p.world = 2;
    p.examples = count_of(1);
    int rc = expect("garbage envelope", raw_garbage(r), TT_EPROTO);
    rc |= expect("wrong size", raw_call(r, 1, &p, three, sizeof(three)), TT_ESIZE);
    p.chunk = 99;
    rc |= expect("unknown chunk", raw_call(r, 1, &p, g1, elems * 4), TT_ENOTFOUND);
    p.chunk = 0;
    p.rank = 5;
    rc |= expect("rank outside world", raw_call(r, 1, &p, g1, elems * 4), TT_EPROTO);
    p.rank = 1;
    rc |= expect("good push", raw_call(r, 1, &p, g1, elems * 4), TT_OK);
    rc |= expect("duplicate contributor", raw_call(r, 1, &p, g1, elems * 4), TT_EEXIST);
    rc |= expect("stale generation", raw_call(r, 0, &p, g1, elems * 4), TT_ESTALE);
    return rc ? TT_EDIVERGED : TT_OK;
}

/* After the refusals the shard still completes the round with rank 0. */
static int bad_then_serve(const args_t *a, tt_ps_t *ps, raw_t *r, uint64_t n) {
    float *g0 = malloc(n * 4), *g1 = malloc(n * 4);
    int rc = g0 && g1 ? TT_OK : TT_ENOMEM;
    for (uint64_t i = 0; rc == TT_OK && i < n; i++) {
        g0[i] = grad(9, 0, 0, i);
        g1[i] = grad(9, 0, 1, i);
    }
    if (rc == TT_OK)
        rc = raw_checks(r, n, g1);
    uint64_t total = 0;
    if (rc == TT_OK)
        rc = tt_ps_allreduce(ps, g0, n, count_of(0), &total);
    float want = (grad(9, 0, 0, 5) + grad(9, 0, 1, 5)) / (float)(count_of(0) + count_of(1));
    if (rc == TT_OK && (total != count_of(0) + count_of(1) || g0[5] != want))
        rc = TT_EDIVERGED;
    expect("shard keeps serving", rc, TT_OK);
    (void)a;
    free(g0);
    free(g1);
    return rc;
}

static int stall(tt_ps_t *ps, uint64_t n) {
    float *g = calloc(n, 4);
    int rc = g ? tt_ps_allreduce(ps, g, n, 1, NULL) : TT_ENOMEM;
    printf("  stall: %s\n", tt_ps_last_error(ps));
    int ok = expect("deadline names the missing rank", rc, TT_ETIMEDOUT);
    ok |= expect("suspect is rank 1", tt_ps_suspect(ps) == 1 ? TT_OK : TT_EINVAL, TT_OK);
    free(g);
    return ok;
}

/* The survivors regroup: generation 2 with world 1 drops the stalled round
 * of generation 1 and completes at once. */
static int regroup(const args_t *a, const tt_ps_layout_t *lay) {
    args_t solo = *a;
    solo.rank = 0;
    solo.world = 1;
    tt_ps_opts_t o = {.deadline_ms = 5000, .generation = 2, .park_timeout_ms = 300};
    tt_ps_t *ps = NULL;
    uint64_t n = lay->place.total_elems, total = 0;
    float *g = malloc(n * 4);
    int rc = g ? TT_OK : TT_ENOMEM;
    for (uint64_t i = 0; rc == TT_OK && i < n; i++)
        g[i] = 3.0f;
    if (rc == TT_OK) {
        o.first_step = 1;
        rc = make_ps(&solo, "bad", lay, &o, &ps);
    }
    if (rc == TT_OK)
        rc = tt_ps_allreduce(ps, g, n, 2, &total);
    if (rc == TT_OK && (total != 2 || g[0] != 1.5f || g[n - 1] != 1.5f))
        rc = TT_EDIVERGED;
    rc = expect("new generation replaces the stalled round", rc, TT_OK);
    tt_ps_destroy(&ps);
    free(g);
    return rc;
}

static int bad(const args_t *a) {
    tt_ps_tensor_t t[] = {{"x", 1000}};
    tt_ps_layout_t lay;
    int rc = fetch(a, "bad", t, 1, 0, &lay);
    if (rc != TT_OK)
        return rc;
    args_t r0 = *a;
    r0.rank = 0;
    r0.world = 2;
    tt_ps_opts_t o = {.park_timeout_ms = 300, .deadline_ms = 5000};
    tt_ps_t *ps = NULL;
    raw_t r = {0};
    rc = make_ps(&r0, "bad", &lay, &o, &ps);
    if (rc == TT_OK)
        rc = raw_open(&r, "bad", lay.endpoints[lay.place.chunks[0].shard]);
    if (rc == TT_OK)
        rc = bad_then_serve(a, ps, &r, lay.place.total_elems);
    if (rc == TT_OK)
        rc = stall(ps, lay.place.total_elems);
    tt_ps_destroy(&ps);
    if (rc == TT_OK)
        rc = regroup(a, &lay);
    tt_zmq_close(&r.sock);
    zmq_ctx_term(r.zctx);
    tt_ps_layout_free(&lay);
    return rc;
}

/* ---- a step redone after a regroup, optimizer mode ---- */

#define REDO_KASE 55

typedef struct redo {
    tt_ps_layout_t lay;
    uint64_t n;
    float *p, *ref, *mom, *g;
    tt_optim_sgd_hp_t hp;
} redo_t;

static int redo_ps(redo_t *d, const args_t *a, int rank, int world, uint64_t gen, tt_ps_t **ps) {
    args_t who = *a;
    who.rank = rank;
    who.world = world;
    tt_ps_opts_t o = {.mode = TT_PS_OPTIMIZER,
                      .optim = TT_PS_SGD,
                      .sgd = d->hp,
                      .deterministic = 1,
                      .generation = gen,
                      .deadline_ms = 1500,
                      .park_timeout_ms = 300};
    return make_ps(&who, "redo", &d->lay, &o, ps);
}

/* Generation 1, world 2, step 0: rank 1 gets its push to chunk 0 through
 * and no further; rank 0's all-reduce completes chunk 0 and times out on
 * the rest. */
static int redo_broken_step(redo_t *d, const args_t *a) {
    tt_ps_t *ps = NULL;
    raw_t r = {0};
    int rc = redo_ps(d, a, 0, 2, 1, &ps);
    if (rc == TT_OK)
        rc = tt_ps_set_params(ps, TT_PS_PARAMS, d->ref, 0, d->n, 0);
    if (rc == TT_OK)
        rc = raw_open(&r, "redo", d->lay.endpoints[d->lay.place.chunks[0].shard]);
    uint64_t c0 = d->lay.place.chunks[0].count;
    for (uint64_t i = 0; rc == TT_OK && i < c0; i++)
        d->g[i] = grad(REDO_KASE, 0, 1, d->lay.place.chunks[0].offset + i);
    Tether__PushChunk p = TETHER__PUSH_CHUNK__INIT;
    p.chunk = 0;
    p.rank = 1;
    p.world = 2;
    p.examples = count_of(1);
    p.lr = 0.1f;
    if (rc == TT_OK)
        rc = expect("rank 1 reaches chunk 0 only", raw_call(&r, 1, &p, d->g, c0 * 4), TT_OK);
    for (uint64_t i = 0; i < d->n; i++)
        d->p[i] = grad(REDO_KASE, 0, 0, i);
    if (rc == TT_OK) {
        tt_ps_set_step(ps, 0);
        tt_ps_set_lr(ps, 0.1f);
        int got = tt_ps_allreduce(ps, d->p, d->n, count_of(0), NULL);
        printf("  broken step: %s\n", tt_ps_last_error(ps));
        rc = expect("rank 0's step fails on the chunks rank 1 never reached", got, TT_ETIMEDOUT);
    }
    tt_ps_destroy(&ps);
    tt_zmq_close(&r.sock);
    zmq_ctx_term(r.zctx);
    return rc;
}

/* Generation 2: the survivor pushes steps 0 and 1 with the whole batch;
 * after each the parameters must be bitwise the reference's. */
static int redo_survivor(redo_t *d, const args_t *a) {
    tt_ps_t *ps = NULL;
    int rc = redo_ps(d, a, 0, 1, 2, &ps);
    for (uint64_t s = 0; s < 2 && rc == TT_OK; s++) {
        uint64_t total = count_of(0) + (s == 0 ? count_of(1) : 0), got = 0;
        for (uint64_t i = 0; i < d->n; i++) {
            d->g[i] = grad(REDO_KASE, s, 0, i);
            if (s == 0)
                d->g[i] += grad(REDO_KASE, s, 1, i);
            d->p[i] = d->g[i];
        }
        tt_optim_sgd_step(d->ref, d->g, d->mom, d->n, 0.1f, 1.0f / (float)total, &d->hp);
        tt_ps_set_step(ps, s);
        tt_ps_set_lr(ps, 0.1f);
        rc = tt_ps_allreduce(ps, d->p, d->n, total, &got);
        if (rc != TT_OK)
            fprintf(stderr, "redo step %llu: %s\n", (unsigned long long)s, tt_ps_last_error(ps));
        char what[96];
        snprintf(what, sizeof(what), "step %llu in generation 2 equals the reference",
                 (unsigned long long)s);
        int same = rc == TT_OK && got == total && memcmp(d->p, d->ref, d->n * 4) == 0;
        rc = expect(what, same ? TT_OK : TT_EDIVERGED, TT_OK);
    }
    tt_ps_destroy(&ps);
    return rc;
}

static int redo(const args_t *a) {
    /* Three 64 KiB chunks, so that rank 1 can reach one and miss others. */
    tt_ps_tensor_t t[] = {{"w", 40000}};
    redo_t d = {.hp = {.momentum = 0.9f, .weight_decay = 1e-4f, .nesterov = 1}};
    int rc = fetch(a, "redo", t, 1, 64 << 10, &d.lay);
    if (rc != TT_OK)
        return rc;
    d.n = d.lay.place.total_elems;
    d.p = malloc(d.n * 4);
    d.ref = malloc(d.n * 4);
    d.mom = calloc(d.n, 4);
    d.g = malloc(d.n * 4);
    rc = d.p && d.ref && d.mom && d.g && d.lay.place.nchunks >= 2 ? TT_OK : TT_ENOMEM;
    for (uint64_t i = 0; rc == TT_OK && i < d.n; i++)
        d.ref[i] = (float)cos((double)i * 0.002);
    if (rc == TT_OK)
        rc = redo_broken_step(&d, a);
    if (rc == TT_OK)
        rc = redo_survivor(&d, a);
    tt_ps_layout_free(&d.lay);
    free(d.p);
    free(d.ref);
    free(d.mom);
    free(d.g);
    return rc;
}

static int layout(const args_t *a) {
    /* Five 4 MiB chunks: both shards hold some, so losing one moves some. */
    tt_ps_tensor_t t[] = {{"x", 5 << 20}};
    tt_ps_layout_t lay;
    int rc = fetch(a, a->job, t, 1, 0, &lay);
    if (rc != TT_OK)
        return rc;
    printf("LAYOUT version=%llu shards=%zu chunks=%zu\n", (unsigned long long)lay.place.version,
           lay.place.nshards, lay.place.nchunks);
    tt_ps_layout_free(&lay);
    return TT_OK;
}

static int reach(const args_t *a) {
    tt_ps_tensor_t t[] = {{"x", 1000}};
    tt_ps_layout_t lay;
    int rc = fetch(a, a->job, t, 1, 0, &lay);
    if (rc != TT_OK)
        return rc;
    tt_ps_opts_t o = {.rank = 0,
                      .world = 1,
                      .generation = 1,
                      .job_id = a->job,
                      .sender_id = "ps_check",
                      .layout = &lay,
                      .deadline_ms = a->deadline_ms};
    tt_ps_t *ps = NULL;
    char err[512] = "";
    rc = tt_ps_create(&ps, &o, err, sizeof(err));
    printf("SETUP %s %s\n", tt_status_name(rc), err);
    tt_ps_destroy(&ps);
    tt_ps_layout_free(&lay);
    return TT_OK;
}

static int parse(int argc, char **argv, args_t *a) {
    *a = (args_t){.mode = argc > 1 ? argv[1] : "", .job = "odd", .world = 1, .shards = 1};
    for (int i = 2; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--coordinator") == 0)
            a->coord = argv[i + 1];
        else if (strcmp(argv[i], "--rank") == 0)
            a->rank = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--world") == 0)
            a->world = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--shards") == 0)
            a->shards = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--job") == 0)
            a->job = argv[i + 1];
        else if (strcmp(argv[i], "--min-shards") == 0)
            a->min_shards = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--deadline-ms") == 0)
            a->deadline_ms = atoi(argv[i + 1]);
        else
            return TT_EINVAL;
    }
    return a->coord ? TT_OK : TT_EINVAL;
}

int main(int argc, char **argv) {
    args_t a;
    if (parse(argc, argv, &a) != TT_OK) {
        fprintf(stderr, "usage: ps_check worker|bad|layout|redo|reach --coordinator EP [--rank R] "
                        "[--world W] [--shards N] [--job J] [--deadline-ms D]\n");
        return 2;
    }
    int rc = TT_EINVAL;
    if (strcmp(a.mode, "worker") == 0)
        rc = worker(&a);
    else if (strcmp(a.mode, "bad") == 0)
        rc = bad(&a);
    else if (strcmp(a.mode, "layout") == 0)
        rc = layout(&a);
    else if (strcmp(a.mode, "redo") == 0)
        rc = redo(&a);
    else if (strcmp(a.mode, "reach") == 0)
        rc = reach(&a);
    if (rc != TT_OK)
        fprintf(stderr, "ps_check %s failed: %s\n", a.mode, tt_status_name(rc));
    return rc == TT_OK ? 0 : 1;
}
