/* ps_ckpt_check: one rank of an optimizer-mode PS job (parameters and SGD
 * momentum live only on the shard servers) for the checkpoint tests of
 * test_shard_ckpt.py:
 *   ps_ckpt_check --coordinator EP --job J --rank R --world W --shards S
 *       --steps M [--save-at N[,N2...] --ckpt ROOT] [--resume DIR]
 *       [--out FILE] [--deadline-ms MS] [--two-phase 1 [--stale-begin 1]]
 *       [--unanswered FILE]
 * runs steps 0..M-1 of a global batch of EXAMPLES examples split over the
 * ranks like a data-parallel sampler (example e's gradient derives from
 * (step, e, i)), so runs of any world size take the same updates (bitwise
 * at the same world size: the shards sum in rank order); after N steps rank 0 has every shard write
 * its chunks (tt_ps_write_checkpoint) and commits ROOT/step-<N>/MANIFEST from the parts they
 * report. --resume DIR: rank 0 loads that checkpoint's parameters and momentum into this run's
 * shards (any number of them: the manifest's layout is resharded) and every rank continues at its
 * step.
 * --out: rank 0 writes the final parameters (M x float32, raw). Prints
 * "CKPT <dir> parts=<n> bytes=<b>" per checkpoint, "FAILED <what>: <why>"
 * when one fails (then exits 3). --two-phase 1: begin, train on, collect
 * the parts later (as tether-train does); --stale-begin 1 first begins one
 * that asks for the state after the wrong round, which begin cannot know
 * (it waits for no answer): the result must refuse it, printed as
 * "REFUSED <status> <why>". --unanswered FILE: after the last step rank 0
 * begins one more two-phase checkpoint, prints "BEGUN", waits for FILE to
 * exist (the test stops a shard first), then asks for the parts until the
 * answer is not TT_EAGAIN and prints "UNANSWERED <status> polls=<n> <why>":
 * a question no shard answers must not hold the caller, only end at the
 * deadline. */
#include "ps_fetch.h"
#include "tt_ckpt_dir.h"
#include "tt_clock.h"
#include "tt_manifest.h"
#include "tt_ps.h"
#include "tt_status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NT       3
#define EXAMPLES 12

typedef struct {
    const char *coord, *job, *ckpt, *resume, *out;
    int rank, world, shards, deadline_ms;
    int two_phase;          /* --two-phase 1: begin, train on, collect the parts later */
    int stale_begin;        /* --stale-begin 1: first a begin the shards must refuse */
    const char *unanswered; /* --unanswered FILE: a question a stopped shard leaves open */
    uint64_t steps, save_at[8];
    size_t nsave;
} args_t;

static const tt_ps_tensor_t tensors[NT] = {{"w1", 70001}, {"b1", 33}, {"w2", 30011}};
static const tt_optim_sgd_hp_t sgd = {.momentum = 0.9f, .weight_decay = 1e-4f, .nesterov = 1};

static float grad(uint64_t step, int example, uint64_t i) {
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ (step + 7) * 0xBF58476D1CE4E5B9ull ^
                 (uint64_t)(example + 3) * 0x94D049BB133111EBull;
    x ^= x >> 31;
    x *= 0xD6E8FEB86659FD93ull;
    x ^= x >> 29;
    return (float)((double)(x >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

static int fail(const char *what, int rc, const char *why) {
    printf("FAILED %s: %s (%s)\n", what, why, tt_status_name(rc));
    fflush(stdout);
    return rc;
}

static int layout(const args_t *a, tt_ps_layout_t *lay) {
    char err[512] = "";
    tt_ps_fetch_opts_t fo = {.coordinator = a->coord,
                             .job_id = a->job,
                             .sender_id = "ps_ckpt_check",
                             .tensors = tensors,
                             .ntensors = NT,
                             .chunk_bytes = 64 << 10,
                             .timeout_ms = 5000};
    int rc = ps_fetch_spanning(&fo, (size_t)a->shards, lay, err, sizeof(err));
    return rc == TT_OK ? TT_OK : fail("placement", rc, err);
}

/* The manifest of a checkpoint after `steps` steps from the shards' parts:
 * three f32 tensors back to back, planes params and momentum. */
static int commit(const args_t *a, const char *dir, uint64_t steps, const tt_ps_written_t *w,
                  size_t nw) {
    static const uint32_t kinds[] = {TT_STATE_PARAMS, TT_STATE_MOMENTUM};
    tt_manifest_t m = {.version = TT_MANIFEST_VERSION, .step = steps, .ntensors = NT};
    tt_mf_part_t parts[16];
    tt_mf_tensor_t t[NT];
    memset(t, 0, sizeof(t));
    memset(parts, 0, sizeof(parts));
    snprintf(m.id, sizeof(m.id), "step-%09llu", (unsigned long long)steps);
    snprintf(m.job_id, sizeof(m.job_id), "%s", a->job);
    m.created_unix_ms = tt_clock_wall_ms();
    for (size_t k = 0; k < nw && k < 16; k++)
        parts[k] = (tt_mf_part_t){.kind = TT_CKPT_KIND_SHARD,
                                  .size = w[k].size,
                                  .crc32c = w[k].crc32c,
                                  .planes = w[k].planes,
                                  .nranges = w[k].nranges,
                                  .ranges = w[k].ranges};
    for (size_t k = 0; k < nw && k < 16; k++)
        snprintf(parts[k].file, sizeof(parts[k].file), "%s", w[k].file);
    uint64_t off = 0;
    for (int i = 0; i < NT; i++) {
        t[i] = (tt_mf_tensor_t){.ndim = 1, .dtype = TT_DTYPE_F32, .flat_offset = off};
        snprintf(t[i].name, sizeof(t[i].name), "%s", tensors[i].name);
        t[i].shape[0] = tensors[i].count;
        off += tensors[i].count * sizeof(float);
    }
    m.nparts = (uint32_t)nw;
    m.parts = parts;
    m.tensors = t;
    char err[512] = "";
    int rc = tt_manifest_fill_extents(&m, kinds, 2, err, sizeof(err));
    if (rc == TT_OK)
        rc = tt_manifest_store(dir, &m, err, sizeof(err)); /* the commit point */
    if (rc == TT_OK)
        rc = tt_ckpt_latest_write(a->ckpt, m.id, err, sizeof(err));
    for (int i = 0; i < NT; i++) {
        for (uint32_t s = 0; s < t[i].nstates; s++)
            free(t[i].states[s].extents);
        free(t[i].states);
    }
    return rc == TT_OK ? TT_OK : fail("manifest", rc, err);
}

/* A two-phase checkpoint asking for the state after round `steps` (the
 * chunks hold the state after steps - 1): begin sends it and returns, and
 * the refusal comes with the result. TT_OK when it was refused that way. */
static int stale_begin(const args_t *a, tt_ps_t *ps, uint64_t steps) {
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/stale-%09llu", a->ckpt, (unsigned long long)steps);
    size_t n = tt_ps_nshards(ps);
    tt_ps_written_t *w = calloc(n, sizeof(*w));
    int rc = w == NULL ? TT_ENOMEM : tt_ps_checkpoint_begin(ps, dir, &steps);
    if (rc != TT_OK) {
        free(w);
        return fail("stale begin", rc, tt_ps_last_error(ps));
    }
    while ((rc = tt_ps_checkpoint_result(ps, dir, w)) == TT_EAGAIN)
        tt_clock_sleep_ms(2);
    tt_ps_written_free(w, n);
    free(w);
    if (rc == TT_OK)
        return fail("stale begin", TT_EINTERNAL, "the shards wrote the state of another round");
    printf("REFUSED %s %s\n", tt_status_name(rc), tt_ps_last_error(ps));
    fflush(stdout);
    return TT_OK;
}

/* The whole checkpoint after `steps` steps (phase < 0), its begin
 * (phase 1: the shards copied) or its parts (phase 2: TT_EAGAIN while they
 * are written). */
static int checkpoint(const args_t *a, tt_ps_t *ps, uint64_t steps, int phase) {
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/step-%09llu", a->ckpt, (unsigned long long)steps);
    size_t n = tt_ps_nshards(ps);
    tt_ps_written_t *w = calloc(n, sizeof(*w));
    uint64_t last = steps - 1; /* the round the state must follow */
    int rc = w == NULL    ? TT_ENOMEM
             : phase == 1 ? tt_ps_checkpoint_begin(ps, dir, &last)
             : phase == 2 ? tt_ps_checkpoint_result(ps, dir, w)
                          : tt_ps_write_checkpoint(ps, dir, &last, w);
    if (rc == TT_EAGAIN || (rc == TT_OK && phase == 1))
        ; /* begun, or not durable yet */
    else if (rc != TT_OK)
        fail("write", rc, w != NULL ? tt_ps_last_error(ps) : "no memory");
    else if ((rc = commit(a, dir, steps, w, n)) == TT_OK) {
        uint64_t bytes = 0;
        for (size_t k = 0; k < n; k++)
            bytes += w[k].size;
        printf("CKPT %s parts=%zu bytes=%llu\n", dir, n, (unsigned long long)bytes);
        fflush(stdout);
    }
    tt_ps_written_free(w, n);
    free(w);
    return rc;
}

/* Every rank of a resumed run (the same bits; a push to a chunk that holds
 * no state is refused, and the ranks share no barrier): both planes of the checkpoint into the
 * shards, the parameters last (their upload also restores the step counter). */
static int restore(const args_t *a, tt_ps_t *ps, const tt_manifest_t *m, uint64_t n) {
    float *buf = malloc(n * sizeof(float));
    char err[512] = "";
    int rc = buf != NULL ? TT_OK : TT_ENOMEM;
    static const uint32_t kinds[] = {TT_STATE_MOMENTUM, TT_STATE_PARAMS};
    static const tt_ps_part_t parts[] = {TT_PS_STATE1, TT_PS_PARAMS};
    for (int k = 0; rc == TT_OK && k < 2; k++) {
        rc = tt_ckpt_read_plane(m, a->resume, kinds[k], buf, n * sizeof(float), err, sizeof(err));
        if (rc == TT_OK && (rc = tt_ps_set_params(ps, parts[k], buf, 0, n, m->step)) != TT_OK)
            snprintf(err, sizeof(err), "%s", tt_ps_last_error(ps));
    }
    free(buf);
    return rc == TT_OK ? TT_OK : fail("restore", rc, err);
}

static int start(const args_t *a, tt_ps_t *ps, uint64_t n, uint64_t *first) {
    *first = 0;
    if (a->resume == NULL) { /* every rank puts it, see restore() */
        float *p = malloc(n * sizeof(float));
        for (uint64_t i = 0; p != NULL && i < n; i++)
            p[i] = (float)((double)(i % 1000) * 0.001 - 0.5);
        int rc = p != NULL ? tt_ps_set_params(ps, TT_PS_PARAMS, p, 0, n, 0) : TT_ENOMEM;
        free(p);
        return rc == TT_OK ? TT_OK : fail("upload", rc, tt_ps_last_error(ps));
    }
    tt_ckpt_report_t rep;
    tt_manifest_t m = {0};
    char err[512] = "";
    int rc = tt_ckpt_verify(a->resume, &rep);
    if (rc != TT_OK)
        fail("verify", rc, rep.msg);
    tt_ckpt_report_free(&rep);
    if (rc == TT_OK && (rc = tt_manifest_load(a->resume, &m, err, sizeof(err))) != TT_OK)
        fail("manifest", rc, err);
    if (rc == TT_OK)
        rc = restore(a, ps, &m, n);
    *first = m.step;
    tt_manifest_free(&m);
    return rc;
}

/* --unanswered: the begin, then (once the test has stopped a shard) the
 * calls a step loop would make between steps, counted. */
static int unanswered(const args_t *a, tt_ps_t *ps, uint64_t steps) {
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/open-%09llu", a->ckpt, (unsigned long long)steps);
    size_t n = tt_ps_nshards(ps);
    tt_ps_written_t *w = calloc(n, sizeof(*w));
    uint64_t last = steps - 1;
    int rc = w == NULL ? TT_ENOMEM : tt_ps_checkpoint_begin(ps, dir, &last);
    if (rc != TT_OK) {
        free(w);
        return fail("unanswered begin", rc, tt_ps_last_error(ps));
    }
    printf("BEGUN %s\n", dir);
    fflush(stdout);
    FILE *f;
    while ((f = fopen(a->unanswered, "r")) == NULL)
        tt_clock_sleep_ms(10);
    fclose(f);
    unsigned long polls = 1;
    while ((rc = tt_ps_checkpoint_result(ps, dir, w)) == TT_EAGAIN) {
        polls++;
        tt_clock_sleep_ms(5);
    }
    printf("UNANSWERED %s polls=%lu %s\n", tt_status_name(rc), polls, tt_ps_last_error(ps));
    fflush(stdout);
    tt_ps_written_free(w, n);
    free(w);
    return TT_OK;
}

static int due(const args_t *a, uint64_t steps) {
    for (size_t k = 0; k < a->nsave; k++)
        if (a->save_at[k] == steps)
            return a->rank == 0 && a->ckpt != NULL;
    return 0;
}

static int train(const args_t *a, tt_ps_t *ps, uint64_t n) {
    float *buf = malloc(n * sizeof(float));
    uint64_t first = 0, total = 0, pending = 0; /* pending: a two-phase checkpoint's step */
    int rc = buf != NULL ? start(a, ps, n, &first) : TT_ENOMEM;
    int lo = a->rank * EXAMPLES / a->world, hi = (a->rank + 1) * EXAMPLES / a->world;
    for (uint64_t s = first; rc == TT_OK && s < a->steps; s++) {
        for (uint64_t i = 0; i < n; i++) {
            buf[i] = 0.0f;
            for (int e = lo; e < hi; e++)
                buf[i] += grad(s, e, i);
        }
        tt_ps_set_step(ps, s);
        tt_ps_set_lr(ps, 0.05f / (float)(1 + s % 7));
        rc = tt_ps_allreduce(ps, buf, n, (uint64_t)(hi - lo), &total);
        if (rc != TT_OK)
            fail("step", rc, tt_ps_last_error(ps));
        if (rc == TT_OK && pending != 0 && (rc = checkpoint(a, ps, pending, 2)) != TT_EAGAIN)
            pending = 0; /* committed, or failed */
        rc = rc == TT_EAGAIN ? TT_OK : rc;
        if (rc == TT_OK && due(a, s + 1) && !a->two_phase)
            rc = checkpoint(a, ps, s + 1, -1);
        if (rc == TT_OK && due(a, s + 1) && a->two_phase && a->stale_begin && pending == 0)
            rc = stale_begin(a, ps, s + 1);
        if (rc == TT_OK && due(a, s + 1) && pending == 0 && a->two_phase &&
            (rc = checkpoint(a, ps, s + 1, 1)) == TT_OK)
            pending = s + 1; /* the shards write while the next steps run */
    }
    while (rc == TT_OK && pending != 0 && (rc = checkpoint(a, ps, pending, 2)) == TT_EAGAIN) {
        rc = TT_OK;
        tt_clock_sleep_ms(2);
    }
    if (rc == TT_OK && a->unanswered != NULL && a->rank == 0 && a->ckpt != NULL)
        rc = unanswered(a, ps, a->steps);
    FILE *f = rc == TT_OK && a->rank == 0 && a->out != NULL ? fopen(a->out, "wb") : NULL;
    if (f != NULL && fwrite(buf, sizeof(float), n, f) != n)
        rc = TT_ESYS;
    if (f != NULL && fclose(f) != 0)
        rc = TT_ESYS;
    free(buf);
    return rc;
}

static int parse(int argc, char **argv, args_t *a) {
    *a = (args_t){.job = "ckpt", .world = 1, .shards = 1, .steps = 10, .deadline_ms = 30000};
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (strcmp(k, "--coordinator") == 0)
            a->coord = v;
        else if (strcmp(k, "--job") == 0)
            a->job = v;
        else if (strcmp(k, "--rank") == 0)
            a->rank = atoi(v);
        else if (strcmp(k, "--world") == 0)
            a->world = atoi(v);
        else if (strcmp(k, "--shards") == 0)
            a->shards = atoi(v);
        else if (strcmp(k, "--steps") == 0)
            a->steps = strtoull(v, NULL, 10);
        else if (strcmp(k, "--ckpt") == 0)
            a->ckpt = v;
        else if (strcmp(k, "--resume") == 0)
            a->resume = v;
        else if (strcmp(k, "--out") == 0)
            a->out = v;
        else if (strcmp(k, "--deadline-ms") == 0)
            a->deadline_ms = atoi(v);
        else if (strcmp(k, "--two-phase") == 0)
            a->two_phase = atoi(v);
        else if (strcmp(k, "--stale-begin") == 0)
            a->stale_begin = atoi(v);
        else if (strcmp(k, "--unanswered") == 0)
            a->unanswered = v;
        else if (strcmp(k, "--save-at") == 0)
            for (char *p = (char *)v; *p != '\0' && a->nsave < 8; p += *p == ',')
                a->save_at[a->nsave++] = strtoull(p, &p, 10);
        else
            return TT_EINVAL;
    }
    return a->coord != NULL && a->rank >= 0 && a->rank < a->world ? TT_OK : TT_EINVAL;
}

int main(int argc, char **argv) {
    args_t a;
    if (parse(argc, argv, &a) != TT_OK) {
        fprintf(stderr, "usage: see the comment at the top of ps_ckpt_check.c\n");
        return 2;
    }
    tt_ps_layout_t lay;
    if (layout(&a, &lay) != TT_OK)
        return 1;
    tt_ps_opts_t o = {.rank = a.rank,
                      .world = a.world,
                      .generation = 1,
                      .job_id = a.job,
                      .sender_id = "ps_ckpt_check",
                      .layout = &lay,
                      .deadline_ms = a.deadline_ms,
                      .mode = TT_PS_OPTIMIZER,
                      .optim = TT_PS_SGD,
                      .sgd = sgd,
                      .deterministic = 1};
    tt_ps_t *ps = NULL;
    char err[512] = "";
    int rc = tt_ps_create(&ps, &o, err, sizeof(err));
    if (rc != TT_OK)
        fail("create", rc, err);
    else
        rc = train(&a, ps, lay.place.total_elems);
    tt_ps_destroy(&ps);
    tt_ps_layout_free(&lay);
    if (rc == TT_OK)
        printf("DONE rank %d\n", a.rank);
    return rc == TT_OK ? 0 : 3;
}
