/* Unit tests of tt_train_ckpt in one process (the single-rank collective):
 * the trainer-state payload codec, save then resume continuing bit for bit,
 * a corrupted part refused by name with latest-valid falling back, a model
 * mismatch refused, "auto" without a checkpoint starting fresh, and the
 * checkpoint thread (one for all jobs, SCHED_BATCH, a job kept for the
 * gate's flush). The multi-rank paths (slices, reshard, a killed writer)
 * are exercised by tests/integration/test_checkpoint.py. */
#include "tt_ckpt_dir.h"
#include "train_testlib.h"
#include "tt_clock.h"
#include "tt_cunit.h"
#include "tt_status.h"
#include "tt_train_ckpt.h"
#include "tt_train_ckpt_int.h"
#include "tt_trainer.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NEX 96
#define NIN 6

static float xs[NEX * NIN];
static uint8_t ys[NEX];

static tt_idx_set_t make_set(void) {
    return tt_test_argmax_set(xs, ys, NEX, NIN, 777);
}

static tt_trainer_opts_t opts(uint64_t max_steps, int hidden, tt_opt_kind_t opt) {
    tt_trainer_opts_t o = {.nlayers = 2,
                           .dims = {NIN, hidden, 10},
                           .epochs = 3,
                           .batch = 8,
                           .seed = 3,
                           .max_steps = max_steps,
                           .opt = opt};
    o.sgd = (tt_optim_sgd_hp_t){0.9f, 1e-4f, 1};
    o.adamw = (tt_optim_adamw_hp_t){0.9f, 0.999f, 1e-8f, 0.01f};
    o.sched = (tt_lr_sched_t){TT_LR_COSINE, 0.05, 0.0, 2, 0};
    return o;
}

typedef struct {
    tt_trainer_t *t;
    tt_train_ckpt_t *ck;
} run_t;

static void on_step(void *ctx, const tt_step_report_t *r) {
    (void)r;
    run_t *run = ctx;
    CU_ASSERT_EQUAL(tt_train_ckpt_boundary(run->ck, 0), TT_OK);
}

/* A checkpoint's stall counts the boundaries from its start to its
 * resolution only; the others are the hook's idle cost. One started at
 * the run's end (finish) is not a training stall and is not kept. */
static void check_stats(tt_train_ckpt_t *ck, uint64_t every) {
    tt_train_ckpt_stats_t cs;
    tt_train_ckpt_stats(ck, &cs);
    CU_ASSERT(cs.stall_samples <= cs.started && cs.stall_samples + 1 >= cs.started);
    CU_ASSERT(cs.stall_ns_median <= cs.stall_ns_max);
    CU_ASSERT(cs.idle_ns <= cs.stall_ns_total);
    int none = every == 0;
    CU_ASSERT(none ? cs.started == 0 : cs.started > 0);
    CU_ASSERT(none ? cs.idle_boundaries == cs.boundaries : cs.idle_boundaries < cs.boundaries);
}

/* Builds a trainer + checkpoint hook, optionally resumes, trains to
 * max_steps, finishes; returns the resume status and copies parameters. */
static int run_g(const char *root, const tt_trainer_opts_t *o, uint64_t every, const char *mode,
                 int gated, float *params, char *id, char *err) {
    static tt_idx_set_t set;
    set = make_set();
    tt_train_coll_t coll;
    tt_train_coll_local(&coll);
    run_t r = {0};
    char e[256];
    tt_train_ckpt_gate_t gate;
    tt_train_ckpt_gate_init(&gate, &coll);
    CU_ASSERT_FATAL(
        tt_trainer_create(&r.t, o, &set, &set, gated ? &gate.coll : &coll, e, sizeof(e)) == TT_OK);
    tt_train_ckpt_opts_t co = {root, every, 0.0, 2, "unit-job", o, NULL, 0};
    CU_ASSERT_FATAL(tt_train_ckpt_create(&r.ck, &co, r.t, &coll, e, sizeof(e)) == TT_OK);
    if (gated)
        tt_train_ckpt_gate_attach(&gate, r.ck);
    int rc = tt_train_ckpt_resume(r.ck, mode, id, err, 512);
    tt_epoch_stats_t st;
    while (rc >= 0 && tt_trainer_global_step(r.t) < o->max_steps)
        CU_ASSERT_EQUAL_FATAL(tt_trainer_run_epoch(r.t, on_step, &r, &st), TT_OK);
    if (rc >= 0)
        CU_ASSERT_EQUAL(tt_train_ckpt_finish(r.ck), TT_OK);
    check_stats(r.ck, every);
    tt_mlp_t *m = tt_trainer_model(r.t);
    if (params != NULL)
        memcpy(params, tt_mlp_params(m), tt_mlp_param_count(m) * sizeof(float));
    tt_train_ckpt_gate_attach(&gate, NULL);
    tt_train_ckpt_destroy(&r.ck);
    CU_ASSERT_PTR_NULL(r.ck);
    tt_trainer_destroy(&r.t);
    return rc;
}

static int run(const char *root, const tt_trainer_opts_t *o, uint64_t every, const char *mode,
               float *params, char *id, char *err) {
    return run_g(root, o, every, mode, 0, params, id, err);
}

static char *tmp_root(void) {
    static char tmpl[64];
    snprintf(tmpl, sizeof(tmpl), "/tmp/tt-train-ckpt-XXXXXX");
    char *d = mkdtemp(tmpl);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    return d;
}

static void rm_root(const char *root) {
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    CU_ASSERT_EQUAL(system(cmd), 0);
}

static void train_ckpt_state_codec_round_trip(void) {
    /* Zeroed whole, padding included, so memcmp compares only the fields. */
    tt_trainer_state_t s, back;
    memset(&s, 0, sizeof(s));
    memset(&back, 0, sizeof(back));
    s.epoch = 4, s.step_in_epoch = 7, s.global_step = 4 * 12 + 7, s.in_epoch = 1;
    s.loss_sum = 12.5, s.count = 56.0, s.examples = 56.0;
    uint64_t cfg[5] = {8, 3, 1234, 1, 12}, cfg2[5];
    uint8_t buf[TT_TRAIN_CKPT_STATE_BYTES];
    tt_train_ckpt_state_encode(&s, cfg, buf);
    CU_ASSERT_EQUAL(tt_train_ckpt_state_decode(buf, sizeof(buf), &back, cfg2), TT_OK);
    CU_ASSERT_EQUAL(memcmp(&s, &back, sizeof(s)), 0);
    CU_ASSERT_EQUAL(memcmp(cfg, cfg2, sizeof(cfg)), 0);
    CU_ASSERT_EQUAL(tt_train_ckpt_state_decode(buf, sizeof(buf) - 1, &back, cfg2), TT_ECORRUPT);
    buf[0] ^= 1;
    CU_ASSERT_EQUAL(tt_train_ckpt_state_decode(buf, sizeof(buf), &back, cfg2), TT_ECORRUPT);
}

static void train_ckpt_resume_continues_bit_for_bit(void) {
    /* SGD and AdamW, each with the snapshot at the boundary and gated (the
     * writer thread copies while the next step computes). */
    tt_opt_kind_t kinds[2] = {TT_OPT_SGD, TT_OPT_ADAMW};
    for (int k = 0; k < 4; k++) {
        char *root = tmp_root();
        tt_trainer_opts_t o = opts(20, 16, kinds[k % 2]);
        float ref[512], got[512];
        char id[TT_MF_ID_MAX], err[512];
        /* 20 steps, checkpoint at 6 (and 12, 18): crosses the epoch end (12 steps) */
        CU_ASSERT_EQUAL(run_g(root, &o, 6, "none", k / 2, ref, id, err), 1);
        CU_ASSERT_EQUAL(run_g(root, &o, 0, "auto", k / 2, got, id, err), TT_OK);
        /* 18, or 19/20 when deferred behind a slow write of 12 */
        CU_ASSERT(strcmp(id, "step-000000018") >= 0 && strcmp(id, "step-000000020") <= 0);
        CU_ASSERT_EQUAL(memcmp(ref, got, (NIN * 16 + 16 + 16 * 10 + 10) * sizeof(float)), 0);
        tt_ckpt_entry_t *v = NULL;
        size_t n = 0;
        CU_ASSERT_EQUAL(tt_ckpt_list(root, &v, &n, NULL, 0), TT_OK);
        CU_ASSERT_EQUAL(n, 2); /* keep = 2: 6 was removed after 18 committed */
        free(v);
        rm_root(root);
    }
}

static void train_ckpt_refuses_corrupt_part_latest_valid_falls_back(void) {
    char *root = tmp_root();
    tt_trainer_opts_t o = opts(12, 16, TT_OPT_SGD);
    char id[TT_MF_ID_MAX], err[512], path[512];
    CU_ASSERT_EQUAL(run(root, &o, 6, "none", NULL, id, err), 1);
    snprintf(path, sizeof(path), "%s/step-000000012/shard-0.bin", root);
    FILE *f = fopen(path, "r+b");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fseek(f, 200, SEEK_SET);
    int c = fgetc(f);
    fseek(f, 200, SEEK_SET);
    fputc(c ^ 0x10, f);
    fclose(f);
    CU_ASSERT_EQUAL(run(root, &o, 0, "auto", NULL, id, err), TT_ECORRUPT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "shard-0.bin"));
    CU_ASSERT_EQUAL(run(root, &o, 0, "latest-valid", NULL, id, err), TT_OK);
    CU_ASSERT_STRING_EQUAL(id, "step-000000006");
    rm_root(root);
}

static void train_ckpt_refuses_other_model_and_starts_fresh_without_one(void) {
    char *root = tmp_root();
    char id[TT_MF_ID_MAX], err[512];
    tt_trainer_opts_t o = opts(6, 16, TT_OPT_SGD);
    CU_ASSERT_EQUAL(run(root, &o, 0, "auto", NULL, id, err), 1); /* nothing yet */
    CU_ASSERT_EQUAL(run(root, &o, 3, "none", NULL, id, err), 1);
    tt_trainer_opts_t other = opts(6, 17, TT_OPT_SGD);
    CU_ASSERT_EQUAL(run(root, &other, 0, "auto", NULL, id, err), TT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "--layers"));
    tt_trainer_opts_t adam = opts(6, 16, TT_OPT_ADAMW);
    CU_ASSERT_EQUAL(run(root, &adam, 0, "auto", NULL, id, err), TT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "--optimizer"));
    rm_root(root);
}

/* ---- the checkpoint thread (tt_train_ckpt_thread.c) ---- */

typedef struct {
    atomic_int ran;
    int policy;
} probe_t;

static void *probe_job(void *arg) {
    probe_t *p = arg;
    p->policy = sched_getscheduler(0);
    atomic_fetch_add(&p->ran, 1);
    return NULL;
}

/* A bare object with only what the thread uses. */
static tt_train_ckpt_t *thread_obj(int gated) {
    tt_train_ckpt_t *c = calloc(1, sizeof(*c));
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    pthread_mutex_init(&c->run_mu, NULL);
    pthread_cond_init(&c->run_cv, NULL);
    c->gated = gated;
    return c;
}

static void thread_obj_free(tt_train_ckpt_t *c) {
    tt_tc_thread_stop(c);
    pthread_mutex_destroy(&c->run_mu);
    pthread_cond_destroy(&c->run_cv);
    free(c);
}

static void train_ckpt_thread_runs_jobs_at_batch_policy(void) {
    tt_train_ckpt_t *c = thread_obj(0);
    probe_t p = {0};
    for (int k = 0; k < 3; k++) { /* one thread, job after job */
        CU_ASSERT_EQUAL(tt_tc_thread_run(c, probe_job, &p, k == 2), TT_OK);
        tt_tc_thread_wait(c); /* without a gate `later` changes nothing */
        CU_ASSERT_EQUAL(atomic_load(&p.ran), k + 1);
    }
    CU_ASSERT_EQUAL(p.policy, SCHED_BATCH);
    thread_obj_free(c);
}

/* With a gate, a job given for later waits for the flush (the gate's,
 * before the step's reduction) or for a wait on it, never for less. */
static void train_ckpt_thread_keeps_a_later_job_for_the_flush(void) {
    tt_train_ckpt_t *c = thread_obj(1);
    probe_t p = {0};
    CU_ASSERT_EQUAL(tt_tc_thread_run(c, probe_job, &p, 1), TT_OK);
    tt_clock_sleep_ms(50);
    CU_ASSERT_EQUAL(atomic_load(&p.ran), 0);
    tt_tc_thread_flush(c);
    tt_tc_thread_wait(c);
    CU_ASSERT_EQUAL(atomic_load(&p.ran), 1);
    CU_ASSERT_EQUAL(tt_tc_thread_run(c, probe_job, &p, 1), TT_OK);
    tt_tc_thread_wait(c); /* hands it over itself */
    CU_ASSERT_EQUAL(atomic_load(&p.ran), 2);
    CU_ASSERT_EQUAL(tt_tc_thread_run(c, probe_job, &p, 1), TT_OK);
    thread_obj_free(c); /* and so does the end */
    CU_ASSERT_EQUAL(atomic_load(&p.ran), 3);
}

static const tt_cunit_test_t tests[] = {
    {"train_ckpt_state_codec_round_trip", train_ckpt_state_codec_round_trip},
    {"train_ckpt_resume_continues_bit_for_bit", train_ckpt_resume_continues_bit_for_bit},
    {"train_ckpt_refuses_corrupt_part_latest_valid_falls_back",
     train_ckpt_refuses_corrupt_part_latest_valid_falls_back},
    {"train_ckpt_refuses_other_model_and_starts_fresh_without_one",
     train_ckpt_refuses_other_model_and_starts_fresh_without_one},
    {"train_ckpt_thread_runs_jobs_at_batch_policy", train_ckpt_thread_runs_jobs_at_batch_policy},
    {"train_ckpt_thread_keeps_a_later_job_for_the_flush",
     train_ckpt_thread_keeps_a_later_job_for_the_flush},
    {NULL, NULL},
};

TT_CUNIT_MAIN("train_ckpt", tests)
