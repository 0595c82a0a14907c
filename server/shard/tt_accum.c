/* tt_accum: bookkeeping and math of one chunk. The inner loops are plain
 * restrict-qualified passes (this file is built with -O3 so gcc vectorises
 * them whatever the build type); they are memory-bound. The bookkeeping
 * keeps a bitmap of the ranks seen in the open round, so a duplicate is one
 * bit test and the missing list is a scan of `world` bits. */
#include "tt_accum.h"
#include "tt_status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ASET_ERR(err, errlen, ...)                                                                 \
    do {                                                                                           \
        if ((err) != NULL && (errlen) > 0)                                                         \
            snprintf((err), (errlen), __VA_ARGS__);                                                \
    } while (0)

#define DEFAULT_TIMEOUT_MS 30000u

struct tt_accum {
    tt_accum_opts_t o;
    float *params, *state1, *state2; /* state: SGD momentum, AdamW m and v */
    float *sum;                      /* arrival-order sum of the open round */
    float **slots;                   /* deterministic: one copy per rank */
    uint64_t optim_t;                /* AdamW updates applied so far */
    int params_set;

    uint64_t gen;
    int active, reported;
    uint64_t step, total, deadline;
    uint32_t world, nseen;
    float lr;
    uint64_t *seen; /* world bits */

    int have_done;
    uint64_t done_step, done_total, done_gen;
};

static float *zeros(size_t n) {
    return calloc(n, sizeof(float));
}

static int needs_state1(const tt_accum_opts_t *o) {
    return o->mode == TT_ACCUM_OPTIMIZER && (o->optim == TT_ACCUM_ADAMW || o->sgd.momentum != 0.0f);
}

static int needs_state2(const tt_accum_opts_t *o) {
    return o->mode == TT_ACCUM_OPTIMIZER && o->optim == TT_ACCUM_ADAMW;
}

int tt_accum_create(tt_accum_t **out, const tt_accum_opts_t *o) {
    *out = NULL;
    if (o == NULL || o->elems == 0 || o->mode > TT_ACCUM_OPTIMIZER || o->optim > TT_ACCUM_ADAMW)
        return TT_EINVAL;
    tt_accum_t *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return TT_ENOMEM;
    a->o = *o;
    if (a->o.timeout_ms == 0)
        a->o.timeout_ms = DEFAULT_TIMEOUT_MS;
    a->sum = o->deterministic ? NULL : zeros(o->elems);
    if (o->mode == TT_ACCUM_OPTIMIZER)
        a->params = zeros(o->elems);
    if (needs_state1(o))
        a->state1 = zeros(o->elems);
    if (needs_state2(o))
        a->state2 = zeros(o->elems);
    int bad = (!o->deterministic && a->sum == NULL) ||
              (o->mode == TT_ACCUM_OPTIMIZER && a->params == NULL) ||
              (needs_state1(o) && a->state1 == NULL) || (needs_state2(o) && a->state2 == NULL);
    if (bad) {
        tt_accum_destroy(&a);
        return TT_ENOMEM;
    }
    *out = a;
    return TT_OK;
}

static void drop_round(tt_accum_t *a) {
    if (a->slots != NULL) {
        for (uint32_t r = 0; r < a->world; r++)
            free(a->slots[r]);
        free(a->slots);
        a->slots = NULL;
    }
    free(a->seen);
    a->seen = NULL;
    a->active = 0;
    a->reported = 0;
    a->nseen = 0;
    a->total = 0;
}

void tt_accum_destroy(tt_accum_t **ap) {
    if (ap == NULL || *ap == NULL)
        return;
    tt_accum_t *a = *ap;
    *ap = NULL;
    drop_round(a);
    free(a->params);
    free(a->state1);
    free(a->state2);
    free(a->sum);
    free(a);
}

int tt_accum_new_generation(tt_accum_t *a, uint64_t gen) {
    if (gen <= a->gen)
        return 0;
    int dropped = a->active;
    drop_round(a);
    a->gen = gen;
    /* Aggregate mode: steps restart their meaning in a new generation.
     * Optimizer mode: the state is after done_step whatever the
     * generation; a regroup may redo that step (see check_redo). */
    if (a->o.mode != TT_ACCUM_OPTIMIZER)
        a->have_done = 0;
    return dropped;
}

int tt_accum_abandon(tt_accum_t *a) {
    int open = a->active;
    drop_round(a);
    return open;
}

static int seen(const tt_accum_t *a, uint32_t r) {
    return (a->seen[r / 64] >> (r % 64)) & 1u;
}

static int open_round(tt_accum_t *a, const tt_accum_push_t *p, uint64_t now_ms) {
    a->seen = calloc((p->world + 63) / 64, sizeof(uint64_t));
    if (a->seen == NULL)
        return TT_ENOMEM;
    if (a->o.deterministic) {
        a->slots = calloc(p->world, sizeof(float *));
        if (a->slots == NULL) {
            free(a->seen);
            a->seen = NULL;
            return TT_ENOMEM;
        }
    }
    a->active = 1;
    a->reported = 0;
    a->step = p->step;
    a->world = p->world;
    a->lr = p->lr;
    a->nseen = 0;
    a->total = 0;
    a->deadline = now_ms + a->o.timeout_ms;
    return TT_OK;
}

/* The checks that need no state change; `err` names the rule broken. */
/* Optimizer mode, a step at or before the last final one: the generation
 * that finished it may not push it again, a newer one gets a replay of
 * that step (TT_OK, *replay) and nothing earlier, which would roll the
 * state back. A step past the next one is refused too: the state follows
 * from every step in turn, and a gap means the ranks number their steps
 * differently from the chunk (a skipped update, never silently). TT_EAGAIN:
 * not such a step, go on checking. */
static int check_redo(const tt_accum_t *a, const tt_accum_push_t *p, int *replay, char *err,
                      size_t errlen) {
    if (a->o.mode != TT_ACCUM_OPTIMIZER || !a->have_done ||
        (a->active && p->generation == a->gen && p->step == a->step))
        return TT_EAGAIN;
    if (p->step == a->done_step + 1)
        return TT_EAGAIN;
    if (p->step > a->done_step) {
        ASET_ERR(err, errlen,
                 "step %llu would skip step %llu: this chunk's state is after step %llu",
                 (unsigned long long)p->step, (unsigned long long)a->done_step + 1,
                 (unsigned long long)a->done_step);
        return TT_ESTALE;
    }
    if (p->step == a->done_step && p->generation > a->done_gen) {
        *replay = 1;
        return TT_OK;
    }
    if (p->step == a->done_step)
        ASET_ERR(err, errlen, "step %llu is already final (last final step %llu)",
                 (unsigned long long)p->step, (unsigned long long)a->done_step);
    else
        ASET_ERR(err, errlen,
                 "step %llu cannot be redone: this chunk's state is after step %llu already",
                 (unsigned long long)p->step, (unsigned long long)a->done_step);
    return TT_ESTALE;
}

static int check_push(const tt_accum_t *a, const tt_accum_push_t *p, char *err, size_t errlen) {
    if (p->elems != a->o.elems) {
        ASET_ERR(err, errlen, "push of %zu elements, the chunk holds %zu", p->elems, a->o.elems);
        return TT_ESIZE;
    }
    if (p->world == 0 || p->world > TT_ACCUM_MAX_WORLD || p->rank >= p->world) {
        ASET_ERR(err, errlen, "rank %u of world %u is not valid", p->rank, p->world);
        return TT_EINVAL;
    }
    if (a->o.mode == TT_ACCUM_OPTIMIZER && !a->params_set) {
        /* Zeros would train on silently: refuse, so the job stops. */
        ASET_ERR(err, errlen,
                 "this chunk holds no parameters: in optimizer mode the state is put before "
                 "the first step (a shard server that restarted lost it; resume from a "
                 "checkpoint)");
        return TT_ESTALE;
    }
    if (p->generation < a->gen) {
        ASET_ERR(err, errlen, "generation %llu is stale, the chunk is at generation %llu",
                 (unsigned long long)p->generation, (unsigned long long)a->gen);
        return TT_ESTALE;
    }
    if (p->generation > a->gen || a->o.mode == TT_ACCUM_OPTIMIZER)
        return TT_OK; /* a new generation: nothing of the old one applies;
                       * optimizer mode: check_redo decides */
    if (a->have_done && p->step <= a->done_step && !(a->active && p->step == a->step)) {
        ASET_ERR(err, errlen, "step %llu is already final (last final step %llu)",
                 (unsigned long long)p->step, (unsigned long long)a->done_step);
        return TT_ESTALE;
    }
    return TT_OK;
}

static int check_round(const tt_accum_t *a, const tt_accum_push_t *p, char *err, size_t errlen) {
    if (p->step != a->step) {
        ASET_ERR(err, errlen, "push for step %llu while step %llu is in progress",
                 (unsigned long long)p->step, (unsigned long long)a->step);
        return TT_EDESYNC;
    }
    if (p->world != a->world) {
        ASET_ERR(err, errlen, "rank %u says world %u, the round has world %u", p->rank, p->world,
                 a->world);
        return TT_EDESYNC;
    }
    if (a->o.mode == TT_ACCUM_OPTIMIZER && p->lr != a->lr) {
        ASET_ERR(err, errlen, "rank %u sent lr %g, the round uses %g", p->rank, (double)p->lr,
                 (double)a->lr);
        return TT_EDESYNC;
    }
    if (seen(a, p->rank)) {
        ASET_ERR(err, errlen, "rank %u already contributed to step %llu", p->rank,
                 (unsigned long long)p->step);
        return TT_EEXIST;
    }
    return TT_OK;
}

int tt_accum_admit(tt_accum_t *a, const tt_accum_push_t *p, uint64_t now_ms, tt_accum_ticket_t *t,
                   char *err, size_t errlen) {
    memset(t, 0, sizeof(*t));
    int rc = check_push(a, p, err, errlen);
    int redo = rc == TT_OK ? check_redo(a, p, &t->replay, err, errlen) : TT_EAGAIN;
    if (redo != TT_EAGAIN) {
        if (redo == TT_OK)
            t->dropped_gen = tt_accum_new_generation(a, p->generation);
        return redo;
    }
    if (rc == TT_OK && p->generation == a->gen && a->active)
        rc = check_round(a, p, err, errlen);
    if (rc != TT_OK)
        return rc;
    float *slot = NULL;
    if (a->o.deterministic && (slot = malloc(a->o.elems * sizeof(float))) == NULL)
        return TT_ENOMEM;
    t->dropped_gen = tt_accum_new_generation(a, p->generation);
    if (!a->active && (rc = open_round(a, p, now_ms)) != TT_OK) {
        free(slot);
        return rc;
    }
    if (slot != NULL)
        a->slots[p->rank] = slot;
    a->seen[p->rank / 64] |= (uint64_t)1 << (p->rank % 64);
    t->first = a->nseen == 0;
    a->nseen++;
    a->total += p->examples;
    t->complete = a->nseen == a->world;
    return TT_OK;
}

static void add_into(float *restrict d, const float *restrict s, size_t n) {
    for (size_t i = 0; i < n; i++)
        d[i] += s[i];
}

void tt_accum_add(tt_accum_t *a, uint32_t rank, const float *data, int first) {
    size_t n = a->o.elems;
    if (a->o.deterministic)
        memcpy(a->slots[rank], data, n * sizeof(float));
    else if (first)
        memcpy(a->sum, data, n * sizeof(float));
    else
        add_into(a->sum, data, n);
}

static void scale_into(float *restrict d, const float *restrict s, size_t n, float total) {
    for (size_t i = 0; i < n; i++)
        d[i] = s[i] / total;
}

/* The gradient sum of the round: in deterministic mode rank 0 + rank 1 +
 * ... in that order, written to `scratch`. */
static const float *round_sum(tt_accum_t *a, float *scratch) {
    if (!a->o.deterministic)
        return a->sum;
    size_t n = a->o.elems;
    memcpy(scratch, a->slots[0], n * sizeof(float));
    for (uint32_t r = 1; r < a->world; r++)
        add_into(scratch, a->slots[r], n);
    return scratch;
}

static void optimizer_step(tt_accum_t *a, const float *g, float scale) {
    size_t n = a->o.elems;
    if (a->o.optim == TT_ACCUM_ADAMW) {
        a->optim_t++;
        tt_optim_adamw_step(a->params, g, a->state1, a->state2, n, a->lr, scale, a->optim_t,
                            &a->o.adamw);
    } else {
        tt_optim_sgd_step(a->params, g, a->state1, n, a->lr, scale, &a->o.sgd);
    }
}

uint64_t tt_accum_finish(tt_accum_t *a, float *out) {
    size_t n = a->o.elems;
    const float *g = round_sum(a, out);
    if (a->o.mode == TT_ACCUM_AGGREGATE) {
        if (a->total == 0)
            memset(out, 0, n * sizeof(float));
        else
            scale_into(out, g, n, (float)a->total);
        return a->total;
    }
    /* In deterministic mode g aliases out: the update reads it first. */
    optimizer_step(a, g, a->total == 0 ? 0.0f : 1.0f / (float)a->total);
    memcpy(out, a->params, n * sizeof(float));
    return a->total;
}

static void add_scale_into(float *restrict d, const float *restrict s, const float *restrict x,
                           size_t n, float total) {
    for (size_t i = 0; i < n; i++)
        d[i] = (s[i] + x[i]) / total;
}

uint64_t tt_accum_add_finish(tt_accum_t *a, uint32_t rank, const float *data, int first,
                             float *out) {
    if (a->o.deterministic || a->o.mode != TT_ACCUM_AGGREGATE || a->total == 0) {
        tt_accum_add(a, rank, data, first);
        return tt_accum_finish(a, out);
    }
    if (first)
        scale_into(out, data, a->o.elems, (float)a->total);
    else
        add_scale_into(out, a->sum, data, a->o.elems, (float)a->total);
    return a->total;
}

void tt_accum_mark_done(tt_accum_t *a) {
    if (!a->active)
        return;
    a->have_done = 1;
    a->done_step = a->step;
    a->done_total = a->total;
    a->done_gen = a->gen;
    drop_round(a);
}

int tt_accum_active(const tt_accum_t *a) {
    return a->active;
}

uint64_t tt_accum_generation(const tt_accum_t *a) {
    return a->gen;
}

uint64_t tt_accum_round_step(const tt_accum_t *a) {
    return a->step;
}

uint32_t tt_accum_round_world(const tt_accum_t *a) {
    return a->world;
}

int tt_accum_done_step(const tt_accum_t *a, uint64_t *step) {
    if (a->have_done && step != NULL)
        *step = a->done_step;
    return a->have_done;
}

uint64_t tt_accum_done_total(const tt_accum_t *a) {
    return a->done_total;
}

uint64_t tt_accum_deadline(const tt_accum_t *a) {
    return a->active && !a->reported && a->nseen < a->world ? a->deadline : UINT64_MAX;
}

size_t tt_accum_missing(const tt_accum_t *a, uint32_t *ranks, size_t cap) {
    if (!a->active)
        return 0;
    size_t n = 0;
    for (uint32_t r = 0; r < a->world; r++) {
        if (!seen(a, r)) {
            if (n < cap)
                ranks[n] = r;
            n++;
        }
    }
    return n;
}

int tt_accum_take_expiry(tt_accum_t *a, uint64_t now_ms) {
    if (!a->active || a->reported || a->nseen == a->world || now_ms < a->deadline)
        return 0;
    a->reported = 1;
    return 1;
}

static float **part_slot(tt_accum_t *a, tt_accum_part_t part) {
    switch (part) {
    case TT_ACCUM_PARAMS:
        return &a->params;
    case TT_ACCUM_STATE1:
        return &a->state1;
    case TT_ACCUM_STATE2:
        return &a->state2;
    }
    return NULL;
}

static float *part_buf(const tt_accum_t *a, tt_accum_part_t part) {
    float **slot = part_slot((tt_accum_t *)a, part);
    return slot != NULL ? *slot : NULL;
}

int tt_accum_set(tt_accum_t *a, tt_accum_part_t part, size_t offset, const float *src, size_t n,
                 uint64_t optim_step) {
    if (offset > a->o.elems || n > a->o.elems - offset || part > TT_ACCUM_STATE2)
        return TT_EINVAL;
    /* Parameters are made on first use; in aggregate mode so are the
     * optimizer parts: a holding area for the authoritative state a regroup
     * moves through the shards. In optimizer mode the optimizer decides
     * which of its buffers exist. */
    float **slot = part_slot(a, part);
    int make = part == TT_ACCUM_PARAMS || a->o.mode == TT_ACCUM_AGGREGATE;
    if (make && *slot == NULL && (*slot = zeros(a->o.elems)) == NULL)
        return TT_ENOMEM;
    float *buf = *slot;
    if (buf == NULL)
        return TT_EINVAL;
    memcpy(buf + offset, src, n * sizeof(float));
    if (a->o.mode == TT_ACCUM_OPTIMIZER)
        a->have_done = 0; /* the state no longer follows from the last round */
    if (part == TT_ACCUM_PARAMS) {
        a->params_set = 1;
        a->optim_t = optim_step;
    }
    return TT_OK;
}

int tt_accum_get(const tt_accum_t *a, tt_accum_part_t part, size_t offset, float *dst, size_t n,
                 uint64_t *optim_step) {
    if (offset > a->o.elems || n > a->o.elems - offset || part > TT_ACCUM_STATE2)
        return TT_EINVAL;
    const float *buf = part_buf(a, part);
    if (buf == NULL ||
        (part == TT_ACCUM_PARAMS && a->o.mode == TT_ACCUM_AGGREGATE && !a->params_set))
        return TT_EINVAL;
    memcpy(dst, buf + offset, n * sizeof(float));
    if (optim_step != NULL)
        *optim_step = a->optim_t;
    return TT_OK;
}

size_t tt_accum_elems(const tt_accum_t *a) {
    return a->o.elems;
}

uint32_t tt_accum_planes(const tt_accum_t *a) {
    if (a->o.mode != TT_ACCUM_OPTIMIZER)
        return 0;
    return 1u + (uint32_t)needs_state1(&a->o) + (uint32_t)needs_state2(&a->o);
}

uint64_t tt_accum_bytes(const tt_accum_t *a) {
    uint64_t per = a->o.elems * sizeof(float);
    uint64_t n = (a->params != NULL) + (a->state1 != NULL) + (a->state2 != NULL) + (a->sum != NULL);
    for (uint32_t r = 0; a->slots != NULL && r < a->world; r++)
        n += a->slots[r] != NULL;
    return n * per;
}

int tt_accum_same_opts(const tt_accum_t *a, const tt_accum_opts_t *o) {
    const tt_accum_opts_t *m = &a->o;
    uint32_t tmo = o->timeout_ms ? o->timeout_ms : DEFAULT_TIMEOUT_MS;
    return m->elems == o->elems && m->mode == o->mode && m->deterministic == o->deterministic &&
           m->timeout_ms == tmo &&
           (m->mode == TT_ACCUM_AGGREGATE ||
            (m->optim == o->optim && memcmp(&m->sgd, &o->sgd, sizeof(m->sgd)) == 0 &&
             memcmp(&m->adamw, &o->adamw, sizeof(m->adamw)) == 0));
}
