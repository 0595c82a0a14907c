/* Unit tests of tt_comm: the pure rules (environment options, membership
 * gate, in-order bucket launch, audit verdict) and the step API end to end
 * on a one-rank world through a fake membership (the communication thread
 * runs, but no socket is opened and nothing sleeps). */
#include "tt_comm.h"
#include "tt_cuda.h"
#include "tt_cunit.h"
#include "tt_status.h"

#include <tether/tether.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- pure ---- */

typedef struct {
    const char *names[8], *vals[8];
} env_t;

static const char *lookup(void *ctx, const char *name) {
    env_t *e = ctx;
    for (int i = 0; i < 8 && e->names[i]; i++)
        if (strcmp(e->names[i], name) == 0)
            return e->vals[i];
    return NULL;
}

static void comm_opts_from_env(void) {
    tt_comm_opts_t o;
    tt_comm_opts_default(&o);
    CU_ASSERT_EQUAL(o.backend, TT_COLL_AUTO);
    CU_ASSERT_EQUAL(o.audit_every, 100);
    CU_ASSERT_EQUAL(o.ring_tcp_only, 0); /* shared memory where the host allows */
    CU_ASSERT_EQUAL(o.cuda_device, -1);  /* the creating thread's device */
    env_t e = {{"TETHER_BACKEND", "TETHER_BUCKET_BYTES", "TETHER_AUDIT_EVERY", "TETHER_RING_BIND",
                "TETHER_MIN_SHARDS", "TETHER_SHARD_WAIT_MS", "TETHER_RING_SHM",
                "TETHER_CUDA_DEVICE"},
               {"ps", "4096", "0", "tcp://0.0.0.0:7800", "3", "600000", "0", "3"}};
    char err[256] = "";
    CU_ASSERT_EQUAL(tt_comm_opts_from_lookup(&o, lookup, &e, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL(o.backend, TT_COLL_PS);
    CU_ASSERT_EQUAL(o.bucket_bytes, 4096);
    CU_ASSERT_EQUAL(o.audit_every, 0);
    CU_ASSERT_STRING_EQUAL(o.bind_endpoint, "tcp://0.0.0.0:7800");
    CU_ASSERT_EQUAL(o.min_shards, 3);
    CU_ASSERT_EQUAL(o.shard_wait_ms, 600000);
    CU_ASSERT_EQUAL(o.ring_tcp_only, 1);
    CU_ASSERT_EQUAL(o.cuda_device, 3);
    env_t dev = {{"TETHER_CUDA_DEVICE"}, {"gpu1"}};
    CU_ASSERT_EQUAL(tt_comm_opts_from_lookup(&o, lookup, &dev, err, sizeof(err)), TT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "TETHER_CUDA_DEVICE='gpu1'"));
    CU_ASSERT_EQUAL(o.cuda_device, 3);
    o.cuda_device = -2;
    CU_ASSERT_EQUAL(tt_comm_opts_validate(&o, err, sizeof(err)), TT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "CUDA device -2"));
    o.cuda_device = 3;
    env_t shm = {{"TETHER_RING_SHM"}, {"1"}}, two = {{"TETHER_RING_SHM"}, {"2"}};
    CU_ASSERT_EQUAL(tt_comm_opts_from_lookup(&o, lookup, &shm, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL(o.ring_tcp_only, 0);
    CU_ASSERT_EQUAL(tt_comm_opts_from_lookup(&o, lookup, &two, err, sizeof(err)), TT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "TETHER_RING_SHM='2'"));
    env_t zero = {{"TETHER_SHARD_WAIT_MS"}, {"0"}};
    CU_ASSERT_EQUAL(tt_comm_opts_from_lookup(&o, lookup, &zero, err, sizeof(err)), TT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "TETHER_SHARD_WAIT_MS='0'"));
    env_t bad = {{"TETHER_BACKEND"}, {"mpi"}};
    CU_ASSERT_EQUAL(tt_comm_opts_from_lookup(&o, lookup, &bad, err, sizeof(err)), TT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "TETHER_BACKEND='mpi'"));
    env_t neg = {{"TETHER_COLL_DEADLINE_MS"}, {"-5"}};
    CU_ASSERT_EQUAL(tt_comm_opts_from_lookup(&o, lookup, &neg, err, sizeof(err)), TT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "TETHER_COLL_DEADLINE_MS"));
    o.first_bucket_bytes = 8192; /* larger than the 4096-byte buckets */
    CU_ASSERT_EQUAL(tt_comm_opts_validate(&o, err, sizeof(err)), TT_EINVAL);
}

/* The public options carry the device through: -1 (the configuring
 * thread's) unless TETHER_CUDA_DEVICE says which. */
static void comm_public_cuda_device(void) {
    tether_coll_opts_t co;
    char err[256] = "";
    tether_coll_opts_default(&co);
    CU_ASSERT_EQUAL(co.cuda_device, -1);
    CU_ASSERT_EQUAL_FATAL(setenv("TETHER_CUDA_DEVICE", "2", 1), 0);
    CU_ASSERT_EQUAL(tether_coll_opts_from_env(&co, err, sizeof(err)), TETHER_OK);
    CU_ASSERT_EQUAL(co.cuda_device, 2);
    CU_ASSERT_EQUAL_FATAL(setenv("TETHER_CUDA_DEVICE", "cuda:2", 1), 0);
    CU_ASSERT_EQUAL(tether_coll_opts_from_env(&co, err, sizeof(err)), TETHER_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "TETHER_CUDA_DEVICE='cuda:2'"));
    unsetenv("TETHER_CUDA_DEVICE");
}

/* The update on the shards needs shards that are always there (the ps
 * backend) and an optimizer the shards can run. */
static void comm_opts_shard_update(void) {
    tt_comm_opts_t o;
    char err[256] = "";
    tt_comm_opts_default(&o);
    o.shard_update = 1;
    CU_ASSERT_EQUAL(tt_comm_opts_validate(&o, err, sizeof(err)), TT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "needs the ps backend"));
    o.backend = TT_COLL_PS;
    o.sgd.momentum = 0.9f;
    CU_ASSERT_EQUAL(tt_comm_opts_validate(&o, err, sizeof(err)), TT_OK);
    o.optim = 1;
    o.adamw.beta2 = 1.0f;
    CU_ASSERT_EQUAL(tt_comm_opts_validate(&o, err, sizeof(err)), TT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "betas"));
    o.adamw.beta2 = 0.999f;
    o.optim = 2;
    CU_ASSERT_EQUAL(tt_comm_opts_validate(&o, err, sizeof(err)), TT_EINVAL);
    o.optim = 1;
    o.shard_update = -1; /* tether_coll_opts_t.update out of range */
    CU_ASSERT_EQUAL(tt_comm_opts_validate(&o, err, sizeof(err)), TT_EINVAL);
}

/* The old backend survives a generation change only as what the
 * announced shrink starts from: an NCCL row, of exactly the generation
 * named. Anything else is aborted and closed as before. */
static void comm_plan_keeps_parent_only_when_announced(void) {
    CU_ASSERT_TRUE(tt_comm_plan_keeps_parent(4, 1, 4));
    CU_ASSERT_FALSE(tt_comm_plan_keeps_parent(4, 1, 0)); /* a fresh communicator */
    CU_ASSERT_FALSE(tt_comm_plan_keeps_parent(4, 1, 3)); /* another generation's */
    CU_ASSERT_FALSE(tt_comm_plan_keeps_parent(4, 0, 4)); /* a ring or ps backend */
    CU_ASSERT_FALSE(tt_comm_plan_keeps_parent(0, 1, 0)); /* nothing open yet */
    CU_ASSERT_TRUE(tt_comm_plan_cuts_short(0, 0));       /* not kept: aborted */
    CU_ASSERT_TRUE(tt_comm_plan_cuts_short(0, 1));
    CU_ASSERT_TRUE(tt_comm_plan_cuts_short(1, 1));  /* kept: revoked */
    CU_ASSERT_FALSE(tt_comm_plan_cuts_short(1, 0)); /* kept, no revoke: left alone */
}

/* A communicator being built gives up as soon as its generation cannot
 * use it, instead of at the init deadline. */
static void comm_plan_gone_ends_a_build(void) {
    tt_comm_view_t v = {.status = TT_OK, .generation = 5, .rank = 0, .world = 2};
    CU_ASSERT_FALSE(tt_comm_plan_gone(5, &v, 5));
    CU_ASSERT_TRUE(tt_comm_plan_gone(6, &v, 5)); /* notified before the client installed it */
    v.generation = 6;
    CU_ASSERT_TRUE(tt_comm_plan_gone(5, &v, 5));
    v.generation = 5;
    v.status = TT_EFENCED;
    CU_ASSERT_TRUE(tt_comm_plan_gone(5, &v, 5));
    v.status = TT_EJOBFAILED;
    CU_ASSERT_TRUE(tt_comm_plan_gone(0, &v, 5));
}

/* Only a peer's silence or loss is reported, against the rank the backend
 * names, or against every other rank when it names none (NCCL). */
static void comm_plan_report_whom(void) {
    CU_ASSERT_EQUAL(tt_comm_plan_report(TT_ETIMEDOUT, 2, 0), 2);
    CU_ASSERT_EQUAL(tt_comm_plan_report(TT_EUNREACHABLE, 1, 0), 1);
    CU_ASSERT_EQUAL(tt_comm_plan_report(TT_ETIMEDOUT, 0, 0), -1);  /* never oneself */
    CU_ASSERT_EQUAL(tt_comm_plan_report(TT_ETIMEDOUT, -1, 0), -1); /* nobody blamed */
    CU_ASSERT_EQUAL(tt_comm_plan_report(TT_ENCCL, 2, 0), -1);      /* a ring names its peer */
    CU_ASSERT_EQUAL(tt_comm_plan_report(TT_EMEMBERSHIP, 2, 0), -1);
    CU_ASSERT_EQUAL(tt_comm_plan_report(TT_ECLOSED, 2, 0), -1);
    int any = TT_COLL_SUSPECT_ANY;
    CU_ASSERT_EQUAL(tt_comm_plan_report(TT_ENCCL, any, 0), any);
    CU_ASSERT_EQUAL(tt_comm_plan_report(TT_ETIMEDOUT, any, 3), any);
    CU_ASSERT_EQUAL(tt_comm_plan_report(TT_EUNREACHABLE, any, 1), any);
    CU_ASSERT_EQUAL(tt_comm_plan_report(TT_ECUDA, any, 0), -1); /* our own device */
    CU_ASSERT_EQUAL(tt_comm_plan_report(TT_ECLOSED, any, 0), -1);
    CU_ASSERT_EQUAL(tt_comm_plan_report(TT_EINVAL, any, 0), -1);
}

static void comm_gate_membership(void) {
    char err[512];
    tt_comm_view_t v = {
        .status = TT_OK, .generation = 4, .app_generation = 4, .rank = 1, .world = 3};
    CU_ASSERT_EQUAL(tt_comm_gate(&v, err, sizeof(err)), TT_OK);
    v.generation = 5; /* formed, not acknowledged yet */
    CU_ASSERT_EQUAL(tt_comm_gate(&v, err, sizeof(err)), TT_EMEMBERSHIP);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "generation 5"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "tether_step_done"));
    v.status = TT_EFENCED;
    CU_ASSERT_EQUAL(tt_comm_gate(&v, err, sizeof(err)), TT_EFENCED);
    tt_comm_view_t none = {.status = TT_OK};
    CU_ASSERT_EQUAL(tt_comm_gate(&none, err, sizeof(err)), TT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "tether_join"));
}

static void comm_plan_launches_in_order(void) {
    tt_comm_plan_t p;
    size_t launch[4], n = 9;
    CU_ASSERT_EQUAL_FATAL(tt_comm_plan_init(&p, 4), TT_OK);
    size_t d2[] = {2};
    tt_comm_plan_complete(&p, d2, 1, launch, &n); /* 2 before 0 and 1: held */
    CU_ASSERT_EQUAL(n, 0);
    size_t d0[] = {0};
    tt_comm_plan_complete(&p, d0, 1, launch, &n);
    CU_ASSERT_EQUAL(n, 1);
    CU_ASSERT_EQUAL(launch[0], 0);
    size_t d1[] = {1};
    tt_comm_plan_complete(&p, d1, 1, launch, &n); /* releases 1 and the held 2 */
    CU_ASSERT_EQUAL(n, 2);
    CU_ASSERT_EQUAL(launch[0], 1);
    CU_ASSERT_EQUAL(launch[1], 2);
    size_t d3[] = {3};
    tt_comm_plan_complete(&p, d3, 1, launch, &n); /* the last waits for the count */
    CU_ASSERT_EQUAL(n, 0);
    tt_comm_plan_rest(&p, launch, &n);
    CU_ASSERT_EQUAL(n, 1);
    CU_ASSERT_EQUAL(launch[0], 3);
    tt_comm_plan_rest(&p, launch, &n);
    CU_ASSERT_EQUAL(n, 0);
    tt_comm_plan_reset(&p);
    tt_comm_plan_rest(&p, launch, &n);
    CU_ASSERT_EQUAL(n, 4);
    tt_comm_plan_release(&p);
}

static void comm_audit_verdict(void) {
    char err[400];
    uint64_t a = 0x8000000000000001ull, b = 0x7fffffffffffffffull; /* both signs */
    int64_t same[2] = {(int64_t)a, (int64_t)~a};
    CU_ASSERT_EQUAL(tt_comm_audit_verdict(same, 10, err, sizeof(err)), TT_OK);
    /* ranks with a and b: max(cs) = b (signed), max(~cs) = ~a */
    int64_t diff[2] = {(int64_t)b, (int64_t)~a};
    CU_ASSERT_EQUAL(tt_comm_audit_verdict(diff, 300, err, sizeof(err)), TT_EDIVERGED);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "step 300"));
    CU_ASSERT_EQUAL(tt_comm_audit_due(100, 300), 1);
    CU_ASSERT_EQUAL(tt_comm_audit_due(100, 301), 0);
    CU_ASSERT_EQUAL(tt_comm_audit_due(0, 0), 0);
}

/* ---- the step on one rank, through a fake membership ---- */

typedef struct {
    pthread_mutex_t mu;
    tt_comm_view_t v;
    int reports;
} fake_t;

static void fake_view(void *ctx, tt_comm_view_t *v) {
    fake_t *f = ctx;
    pthread_mutex_lock(&f->mu);
    *v = f->v;
    pthread_mutex_unlock(&f->mu);
}

static int fake_endpoint(void *ctx, uint64_t gen, int rank, char *buf, size_t len) {
    (void)ctx, (void)gen, (void)rank;
    buf[0] = len > 0 ? '\0' : buf[0];
    return TT_OK;
}

static int fake_report(void *ctx, int rank, const char *reason) {
    fake_t *f = ctx;
    (void)rank, (void)reason;
    f->reports++;
    return TT_OK;
}

static void fake_set_gen(fake_t *f, uint64_t gen, uint64_t app) {
    pthread_mutex_lock(&f->mu);
    f->v.generation = gen;
    f->v.app_generation = app;
    pthread_mutex_unlock(&f->mu);
}

static tt_comm_t *make_comm(fake_t *f, size_t bucket_bytes) {
    pthread_mutex_init(&f->mu, NULL);
    f->v = (tt_comm_view_t){.status = TT_OK,
                            .generation = 1,
                            .app_generation = 1,
                            .rank = 0,
                            .world = 1,
                            .resume_step = 0};
    f->reports = 0;
    tt_comm_opts_t o;
    tt_comm_opts_default(&o);
    o.bucket_bytes = bucket_bytes;
    o.first_bucket_bytes = 8;
    tt_comm_hooks_t h = {f, fake_view, fake_endpoint, fake_report};
    tt_comm_t *c = NULL;
    CU_ASSERT_EQUAL(tt_comm_create(&c, &o, &h), TT_OK);
    return c;
}

static void comm_step_copy_path_averages(void) {
    fake_t f;
    tt_comm_t *c = make_comm(&f, 16);
    float a[5] = {2, 4, 6, 8, 10}, b[3] = {1, 2, 3}; /* not adjacent: copy path */
    size_t ia, ib;
    CU_ASSERT_EQUAL(tt_comm_grad_register(c, a, 5, &ia), TT_OK);
    CU_ASSERT_EQUAL(tt_comm_grad_register(c, NULL, 2, &ib), TT_OK); /* lives in the flat buffer */
    CU_ASSERT_EQUAL(tt_comm_grad_register(c, b, 3, &ib), TT_OK);
    float *mid = tt_comm_grad_buffer(c, 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(mid);
    mid[0] = 20, mid[1] = 40;
    CU_ASSERT_EQUAL(tt_comm_grad_register(c, b, 3, &ib), TT_EBUSY); /* layout fixed */
    CU_ASSERT_EQUAL(tt_comm_grad_ready(c, 2), TT_OK);
    CU_ASSERT_EQUAL(tt_comm_grad_ready(c, 2), TT_EEXIST);
    CU_ASSERT_EQUAL(tt_comm_grad_ready(c, 9), TT_ENOTFOUND);
    int64_t global = 0;
    CU_ASSERT_EQUAL(tt_comm_step_finish(c, 2, &global), TT_OK); /* tensors 0, 1 unmarked */
    CU_ASSERT_EQUAL(global, 2);
    CU_ASSERT_DOUBLE_EQUAL(a[4], 5.0, 0.0);
    CU_ASSERT_DOUBLE_EQUAL(b[0], 0.5, 0.0);
    CU_ASSERT_DOUBLE_EQUAL(mid[1], 20.0, 0.0);
    tt_comm_stats_t s;
    tt_comm_step_stats(c, &s);
    CU_ASSERT_EQUAL(s.steps, 1);
    CU_ASSERT_EQUAL(s.bytes_per_step, 40);
    CU_ASSERT(s.buckets >= 3); /* 40 bytes in buckets of 16 (first 8) */
    CU_ASSERT_STRING_EQUAL(s.backend, "ring");
    tt_comm_destroy(&c);
    CU_ASSERT_PTR_NULL(c);
}

static void comm_step_zero_copy_and_exact_count(void) {
    fake_t f;
    tt_comm_t *c = make_comm(&f, 0);
    float grads[6] = {3, 3, 3, 3, 3, 3};
    size_t id;
    CU_ASSERT_EQUAL(tt_comm_grad_register(c, grads, 4, &id), TT_OK);
    CU_ASSERT_EQUAL(tt_comm_grad_register(c, grads + 4, 2, &id), TT_OK);
    CU_ASSERT_PTR_EQUAL(tt_comm_grad_buffer(c, 1), grads + 4); /* the caller's own memory */
    int64_t big = ((int64_t)1 << 40) + 3, global = 0;          /* beyond float32's exact range */
    CU_ASSERT_EQUAL(tt_comm_grad_ready(c, 1), TT_OK);
    CU_ASSERT_EQUAL(tt_comm_grad_ready(c, 0), TT_OK);
    CU_ASSERT_EQUAL(tt_comm_step_finish(c, big, &global), TT_OK);
    CU_ASSERT_EQUAL(global, big);
    CU_ASSERT(grads[0] > 0.0f && grads[0] < 1e-11f);
    CU_ASSERT_EQUAL(tt_comm_step_finish(c, -1, &global), TT_EINVAL);
    tt_comm_destroy(&c);
}

/* The device step is offered only on the NCCL backend: elsewhere it says
 * TT_ENODEV before issuing anything, and the host step works as before. */
static void comm_device_step_needs_nccl(void) {
    fake_t f;
    tt_comm_t *c = make_comm(&f, 0);
    float grads[4] = {2, 2, 2, 2};
    size_t id;
    int64_t global = -1;
    CU_ASSERT_EQUAL(tt_comm_grad_register(c, grads, 4, &id), TT_OK);
    CU_ASSERT_EQUAL(tt_comm_step_finish_device(c, NULL, 4, 2, &global, NULL), TT_EINVAL);
    CU_ASSERT_EQUAL(tt_comm_step_finish_device(c, grads, 4, -1, &global, NULL), TT_EINVAL);
    CU_ASSERT_EQUAL(tt_comm_step_finish_device(c, grads, 4, 2, &global, NULL), TT_ENODEV);
    CU_ASSERT_EQUAL(global, -1);
    CU_ASSERT_EQUAL(tt_comm_step_part_device(c, NULL, 2, NULL), TT_EINVAL);
    CU_ASSERT_EQUAL(tt_comm_step_part_device(c, grads, 0, NULL), TT_EINVAL);
    CU_ASSERT_EQUAL(tt_comm_step_part_device(c, grads + 2, 2, NULL), TT_ENODEV);
    tt_comm_stats_t s;
    tt_comm_step_stats(c, &s);
    CU_ASSERT_EQUAL(s.steps, 0);
    CU_ASSERT_EQUAL(tt_comm_step_finish(c, 2, &global), TT_OK);
    CU_ASSERT_EQUAL(global, 2);
    CU_ASSERT_DOUBLE_EQUAL(grads[3], 1.0, 0.0);
    tt_comm_step_stats(c, &s);
    CU_ASSERT_EQUAL(s.steps, 1);
    tt_comm_destroy(&c);
}

/* The parts of a device step, through the real communication thread on a
 * host whose NCCL backend cannot open (no GPU): the parts queue without
 * waiting, the host step is refused while they are open, the step's end
 * waits for them and reports the backend's sentence, and a part given
 * again starts the step over. On a host with a GPU the backend would open
 * and need device memory: not this test's business. */
static void comm_device_parts_end_with_the_step(void) {
    int ndev = 0;
    char why[256] = "";
    if (tt_cuda_device_count(&ndev, why, sizeof(why)) == TT_OK && ndev > 0) {
        printf("\n    (a CUDA device is present: the no-GPU half is not run here) ");
        return;
    }
    fake_t f;
    pthread_mutex_init(&f.mu, NULL);
    f.v = (tt_comm_view_t){.status = TT_OK, .generation = 1, .app_generation = 1, .world = 1};
    tt_comm_opts_t o;
    tt_comm_opts_default(&o);
    o.backend = TT_COLL_NCCL;
    tt_comm_hooks_t h = {&f, fake_view, fake_endpoint, fake_report};
    tt_comm_t *c = NULL;
    CU_ASSERT_EQUAL_FATAL(tt_comm_create(&c, &o, &h), TT_OK);
    float grads[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    size_t id;
    int64_t global = -1;
    CU_ASSERT_EQUAL(tt_comm_grad_register(c, grads, 8, &id), TT_OK);
    CU_ASSERT_EQUAL(tt_comm_step_part_device(c, grads + 4, 4, NULL), TT_OK);
    CU_ASSERT_EQUAL(tt_comm_step_part_device(c, grads, 2, NULL), TT_OK);
    CU_ASSERT_EQUAL(tt_comm_grad_ready(c, id), TT_EBUSY);
    CU_ASSERT_EQUAL(tt_comm_step_finish(c, 2, &global), TT_EBUSY);
    char err[640];
    tt_comm_last_error(c, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "step_finish_device"));
    int rc = tt_comm_step_finish_device(c, grads, 8, 2, &global, NULL);
    CU_ASSERT(rc != TT_OK && rc != TT_EBUSY);
    CU_ASSERT_EQUAL(global, -1);
    tt_comm_last_error(c, err, sizeof(err));
    CU_ASSERT(strstr(err, "no CUDA device") != NULL || strstr(err, "without NCCL") != NULL);
    /* A new attempt; the same part again gives it up and starts over. */
    CU_ASSERT_EQUAL(tt_comm_step_part_device(c, grads + 4, 4, NULL), TT_OK);
    CU_ASSERT_EQUAL(tt_comm_step_part_device(c, grads + 5, 1, NULL), TT_OK);
    CU_ASSERT_NOT_EQUAL(tt_comm_step_finish_device(c, grads, 8, 2, &global, NULL), TT_OK);
    tt_comm_stats_t s;
    tt_comm_step_stats(c, &s);
    CU_ASSERT_EQUAL(s.steps, 0);
    CU_ASSERT_DOUBLE_EQUAL(grads[7], 8.0, 0.0); /* nothing touched host memory */
    tt_comm_destroy(&c);
    pthread_mutex_destroy(&f.mu);
}

static void comm_new_generation_fails_once_acknowledged(void) {
    fake_t f;
    tt_comm_t *c = make_comm(&f, 0);
    int64_t v = 7;
    CU_ASSERT_EQUAL(tt_comm_allreduce(c, &v, 1, TT_DT_INT64, TT_RED_SUM), TT_OK);
    fake_set_gen(&f, 2, 1); /* the client installed generation 2 */
    CU_ASSERT_EQUAL(tt_comm_allreduce(c, &v, 1, TT_DT_INT64, TT_RED_SUM), TT_EMEMBERSHIP);
    CU_ASSERT_EQUAL(tt_comm_barrier(c), TT_EMEMBERSHIP);
    char err[640];
    tt_comm_last_error(c, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "generation 2"));
    fake_set_gen(&f, 2, 2); /* tether_step_done acknowledged it */
    CU_ASSERT_EQUAL(tt_comm_barrier(c), TT_OK);
    CU_ASSERT_EQUAL(f.reports, 0);
    char *dump = tt_comm_dump(c, "rank 0");
    CU_ASSERT_PTR_NOT_NULL_FATAL(dump);
    CU_ASSERT_PTR_NOT_NULL(strstr(dump, "gen=2 barrier"));
    CU_ASSERT_PTR_NOT_NULL(strstr(dump, "backend ring"));
    free(dump);
    tt_comm_destroy(&c);
}

static void comm_audit_single_rank_passes(void) {
    fake_t f;
    tt_comm_t *c = make_comm(&f, 0);
    float params[3] = {1, 2, 3}, g[2] = {0, 0};
    size_t id;
    CU_ASSERT_EQUAL(tt_comm_audit(c, params, 3, 0), TT_OK);
    CU_ASSERT_EQUAL(tt_comm_grad_register(c, g, 2, &id), TT_OK);
    CU_ASSERT_EQUAL(tt_comm_audit_params(c, params, 3), TT_OK);
    tt_comm_stats_t s;
    for (int i = 0; i < 3; i++) /* steps 0, 1, 2 with audit_every 100: one audit */
        CU_ASSERT_EQUAL(tt_comm_step_finish(c, 1, NULL), TT_OK);
    tt_comm_step_stats(c, &s);
    CU_ASSERT_EQUAL(s.audits, 2);
    CU_ASSERT_EQUAL(s.steps, 3);
    tt_comm_destroy(&c);
}

/* After an agreement the generation's steps are numbered from the agreed
 * step, not the coordinator's resume step (here the audits show the
 * number: every 100th step is audited). */
static void comm_resume_at_numbers_the_next_step(void) {
    fake_t f;
    tt_comm_t *c = make_comm(&f, 0);
    f.v.resume_step = 5;
    float params[3] = {1, 2, 3}, g[2] = {0, 0};
    size_t id;
    tt_comm_stats_t s;
    CU_ASSERT_EQUAL(tt_comm_grad_register(c, g, 2, &id), TT_OK);
    CU_ASSERT_EQUAL(tt_comm_audit_params(c, params, 3), TT_OK);
    CU_ASSERT_EQUAL(tt_comm_resume_at(c, -1), TT_EINVAL);
    CU_ASSERT_EQUAL(tt_comm_step_finish(c, 1, NULL), TT_OK); /* step 5 */
    tt_comm_step_stats(c, &s);
    CU_ASSERT_EQUAL(s.audits, 0);
    CU_ASSERT_EQUAL(tt_comm_resume_at(c, 100), TT_OK);
    CU_ASSERT_EQUAL(tt_comm_step_finish(c, 1, NULL), TT_OK); /* step 100 */
    tt_comm_step_stats(c, &s);
    CU_ASSERT_EQUAL(s.audits, 1);
    CU_ASSERT_EQUAL(tt_comm_grad_ready(c, 0), TT_OK); /* step 101 is open */
    CU_ASSERT_EQUAL(tt_comm_resume_at(c, 200), TT_EBUSY);
    CU_ASSERT_EQUAL(tt_comm_step_finish(c, 1, NULL), TT_OK);
    tt_comm_step_stats(c, &s);
    CU_ASSERT_EQUAL(s.audits, 1);
    fake_set_gen(&f, 0, 0);
    CU_ASSERT_EQUAL(tt_comm_resume_at(c, 200), TT_EINVAL); /* no generation */
    tt_comm_destroy(&c);
}

static void comm_bad_arguments_are_refused(void) {
    fake_t f;
    tt_comm_t *c = make_comm(&f, 0);
    int64_t v = 1;
    CU_ASSERT_EQUAL(tt_comm_allreduce(c, &v, 1, (tt_dtype_t)9, TT_RED_SUM), TT_EINVAL);
    CU_ASSERT_EQUAL(tt_comm_allreduce(c, &v, 1, TT_DT_INT64, (tt_redop_t)0), TT_EINVAL);
    CU_ASSERT_EQUAL(tt_comm_broadcast(c, &v, 1, TT_DT_INT64, 1), TT_EINVAL); /* world 1 */
    char err[640];
    tt_comm_last_error(c, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "root 1"));
    pthread_mutex_lock(&f.mu);
    f.v.status = TT_EFENCED;
    pthread_mutex_unlock(&f.mu);
    CU_ASSERT_EQUAL(tt_comm_barrier(c), TT_EFENCED);
    tt_comm_destroy(&c);
}

static const tt_cunit_test_t tests[] = {
    {"comm_public_cuda_device", comm_public_cuda_device},
    {"comm_opts_from_env", comm_opts_from_env},
    {"comm_opts_shard_update", comm_opts_shard_update},
    {"comm_gate_membership", comm_gate_membership},
    {"comm_plan_keeps_parent_only_when_announced", comm_plan_keeps_parent_only_when_announced},
    {"comm_plan_gone_ends_a_build", comm_plan_gone_ends_a_build},
    {"comm_plan_report_whom", comm_plan_report_whom},
    {"comm_plan_launches_in_order", comm_plan_launches_in_order},
    {"comm_audit_verdict", comm_audit_verdict},
    {"comm_step_copy_path_averages", comm_step_copy_path_averages},
    {"comm_step_zero_copy_and_exact_count", comm_step_zero_copy_and_exact_count},
    {"comm_device_step_needs_nccl", comm_device_step_needs_nccl},
    {"comm_device_parts_end_with_the_step", comm_device_parts_end_with_the_step},
    {"comm_new_generation_fails_once_acknowledged", comm_new_generation_fails_once_acknowledged},
    {"comm_audit_single_rank_passes", comm_audit_single_rank_passes},
    {"comm_resume_at_numbers_the_next_step", comm_resume_at_numbers_the_next_step},
    {"comm_bad_arguments_are_refused", comm_bad_arguments_are_refused},
    {NULL, NULL},
};

TT_CUNIT_MAIN("comm", tests)
