/* tt_comm_plan: the pure decisions of the communication layer, kept apart
 * from its thread so that they are tested without sockets or sleeps: the
 * collective options and their environment variables, the membership gate
 * every collective passes, the in-order bucket launch plan of a step, and
 * the verdict of the divergence audit. Nothing here blocks, allocates
 * beyond the plan's flags, or reads a clock. */
#include "tt_comm.h"

#include "tt_status.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SET_ERR(err, errlen, ...)                                                                  \
    do {                                                                                           \
        if ((err) != NULL && (errlen) > 0)                                                         \
            snprintf((err), (errlen), __VA_ARGS__);                                                \
    } while (0)

void tt_comm_opts_default(tt_comm_opts_t *o) {
    memset(o, 0, sizeof(*o));
    o->backend = TT_COLL_AUTO;
    o->deadline_ms = 60000;
    o->audit_every = TT_COMM_AUDIT_DEFAULT;
    o->average = 1;
    o->cuda_device = -1;
    o->adamw = (tt_optim_adamw_hp_t){.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
}

/* Strict unsigned parse: digits only, within [lo, hi]. */
static int parse_u64(const char *v, uint64_t lo, uint64_t hi, uint64_t *out) {
    if (v == NULL || v[0] < '0' || v[0] > '9')
        return TT_EINVAL;
    errno = 0;
    char *end = NULL;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno != 0 || end == NULL || *end != '\0' || x < lo || x > hi)
        return TT_EINVAL;
    *out = x;
    return TT_OK;
}

typedef struct {
    const char *var;
    uint64_t lo, hi;
} num_var_t;

static const num_var_t num_vars[] = {
    {"TETHER_COLL_DEADLINE_MS", 1, 86400000},
    {"TETHER_BUCKET_BYTES", 4, (uint64_t)1 << 34},
    {"TETHER_FIRST_BUCKET_BYTES", 4, (uint64_t)1 << 34},
    {"TETHER_AUDIT_EVERY", 0, UINT32_MAX},
    {"TETHER_MIN_SHARDS", 0, 100000},
    {"TETHER_SHARD_WAIT_MS", 1, 86400000},
    {"TETHER_RING_SHM", 0, 1},
    {"TETHER_CUDA_DEVICE", 0, 1023},
};

static void store_num(tt_comm_opts_t *o, size_t i, uint64_t x) {
    if (i == 0)
        o->deadline_ms = (int)x;
    else if (i == 1)
        o->bucket_bytes = (size_t)x;
    else if (i == 2)
        o->first_bucket_bytes = (size_t)x;
    else if (i == 3)
        o->audit_every = (uint32_t)x;
    else if (i == 4)
        o->min_shards = (uint32_t)x;
    else if (i == 5)
        o->shard_wait_ms = (uint32_t)x;
    else if (i == 6)
        o->ring_tcp_only = x == 0;
    else
        o->cuda_device = (int)x;
}

int tt_comm_opts_from_lookup(tt_comm_opts_t *o, tt_comm_lookup_fn lookup, void *ctx, char *err,
                             size_t errlen) {
    const char *v = lookup(ctx, "TETHER_BACKEND");
    if (v != NULL && tt_coll_parse_kind(v, &o->backend) != TT_OK) {
        SET_ERR(err, errlen, "TETHER_BACKEND='%.40s': not ring, ps, nccl or auto", v);
        return TT_EINVAL;
    }
    for (size_t i = 0; i < sizeof(num_vars) / sizeof(num_vars[0]); i++) {
        uint64_t x;
        v = lookup(ctx, num_vars[i].var);
        if (v == NULL)
            continue;
        if (parse_u64(v, num_vars[i].lo, num_vars[i].hi, &x) != TT_OK) {
            SET_ERR(err, errlen, "%s='%.40s': not an integer in [%" PRIu64 ", %" PRIu64 "]",
                    num_vars[i].var, v, num_vars[i].lo, num_vars[i].hi);
            return TT_EINVAL;
        }
        store_num(o, i, x);
    }
    v = lookup(ctx, "TETHER_RING_BIND");
    if (v != NULL && strlen(v) >= sizeof(o->bind_endpoint)) {
        SET_ERR(err, errlen, "TETHER_RING_BIND is longer than %zu bytes",
                sizeof(o->bind_endpoint) - 1);
        return TT_EINVAL;
    }
    if (v != NULL)
        snprintf(o->bind_endpoint, sizeof(o->bind_endpoint), "%s", v);
    return TT_OK;
}

static int finite_nonneg(float x) {
    return x >= 0.0f && x <= 1e30f;
}

/* The update on the shards: only the ps backend has shards that are
 * always there, and the shards check the rest when the job is set up. */
static int validate_update(const tt_comm_opts_t *o, char *err, size_t errlen) {
    if (o->shard_update != 0 && o->shard_update != 1) {
        SET_ERR(err, errlen, "update %d is not local (0) or on the shards (1)", o->shard_update);
        return TT_EINVAL;
    }
    if (!o->shard_update)
        return TT_OK;
    if (o->backend != TT_COLL_PS) {
        SET_ERR(err, errlen, "the update on the shard servers needs the ps backend (backend %s)",
                tt_coll_kind_name(o->backend));
        return TT_EINVAL;
    }
    if (o->optim != 0 && o->optim != 1) {
        SET_ERR(err, errlen, "optimizer %d is not SGD (0) or AdamW (1)", o->optim);
        return TT_EINVAL;
    }
    const tt_optim_sgd_hp_t *s = &o->sgd;
    const tt_optim_adamw_hp_t *a = &o->adamw;
    if (!finite_nonneg(s->momentum) || !finite_nonneg(s->weight_decay) ||
        !finite_nonneg(a->weight_decay) || !(a->beta1 >= 0.0f && a->beta1 < 1.0f) ||
        !(a->beta2 >= 0.0f && a->beta2 < 1.0f) || !(a->eps > 0.0f && a->eps <= 1e30f)) {
        SET_ERR(err, errlen,
                "optimizer settings out of range: momentum %g, weight decay %g/%g, betas "
                "%g/%g (need [0, 1)), eps %g (need > 0)",
                (double)s->momentum, (double)s->weight_decay, (double)a->weight_decay,
                (double)a->beta1, (double)a->beta2, (double)a->eps);
        return TT_EINVAL;
    }
    return TT_OK;
}

int tt_comm_opts_validate(const tt_comm_opts_t *o, char *err, size_t errlen) {
    size_t bb = o->bucket_bytes ? o->bucket_bytes : ((size_t)25 << 20);
    size_t fb = o->first_bucket_bytes;
    if (o->backend < TT_COLL_AUTO || o->backend > TT_COLL_NCCL) {
        SET_ERR(err, errlen, "backend %d is not auto, ring, ps or nccl", (int)o->backend);
        return TT_EINVAL;
    }
    if (o->cuda_device < -1) {
        SET_ERR(err, errlen, "CUDA device %d: a device number, or -1 for the current one",
                o->cuda_device);
        return TT_EINVAL;
    }
    if (o->deadline_ms < 0) {
        SET_ERR(err, errlen, "negative collective deadline %d ms", o->deadline_ms);
        return TT_EINVAL;
    }
    if (bb < sizeof(float) || (fb != 0 && (fb < sizeof(float) || fb > bb))) {
        SET_ERR(err, errlen, "bucket sizes %zu / first %zu bytes: need 4 <= first <= bucket bytes",
                bb, fb);
        return TT_EINVAL;
    }
    return validate_update(o, err, errlen);
}

int tt_comm_gate(const tt_comm_view_t *v, char *err, size_t errlen) {
    if (v->status != TT_OK) {
        SET_ERR(err, errlen, "not a member of the job (%s): no collectives",
                tt_status_name(v->status));
        return v->status;
    }
    if (v->generation == 0) {
        SET_ERR(err, errlen, "no generation yet: call tether_join before collectives");
        return TT_EINVAL;
    }
    if (v->generation != v->app_generation) {
        SET_ERR(err, errlen,
                "generation %" PRIu64 " formed (rank %d of %d) while this process runs "
                "generation %" PRIu64 ": call tether_step_done to acknowledge it, then resume "
                "at tether_resume_step",
                v->generation, v->rank, v->world, v->app_generation);
        return TT_EMEMBERSHIP;
    }
    return TT_OK;
}

int tt_comm_plan_init(tt_comm_plan_t *p, size_t nbuckets) {
    memset(p, 0, sizeof(*p));
    p->complete = calloc(nbuckets ? nbuckets : 1, 1);
    if (p->complete == NULL)
        return TT_ENOMEM;
    p->nbuckets = nbuckets;
    return TT_OK;
}

void tt_comm_plan_release(tt_comm_plan_t *p) {
    free(p->complete);
    memset(p, 0, sizeof(*p));
}

void tt_comm_plan_reset(tt_comm_plan_t *p) {
    if (p->complete != NULL)
        memset(p->complete, 0, p->nbuckets ? p->nbuckets : 1);
    p->next = 0;
}

void tt_comm_plan_complete(tt_comm_plan_t *p, const size_t *done, size_t ndone, size_t *launch,
                           size_t *nlaunch) {
    *nlaunch = 0;
    for (size_t i = 0; i < ndone; i++)
        if (done[i] < p->nbuckets)
            p->complete[done[i]] = 1;
    while (p->next + 1 < p->nbuckets && p->complete[p->next])
        launch[(*nlaunch)++] = p->next++;
}

void tt_comm_plan_rest(tt_comm_plan_t *p, size_t *launch, size_t *nlaunch) {
    *nlaunch = 0;
    while (p->next < p->nbuckets) {
        p->complete[p->next] = 1;
        launch[(*nlaunch)++] = p->next++;
    }
}

int tt_comm_audit_verdict(const int64_t maxes[2], int64_t step, char *err, size_t errlen) {
    /* maxes[1] is max(~cs) = ~min(cs): equal extremes mean equal values. */
    uint64_t hi = (uint64_t)maxes[0], lo = (uint64_t)~maxes[1];
    if (hi == lo)
        return TT_OK;
    SET_ERR(err, errlen,
            "replicas diverged at step %" PRId64 ": parameter checksums range from %016" PRIx64
            " to %016" PRIx64 " across ranks (an update was not applied identically)",
            step, lo, hi);
    return TT_EDIVERGED;
}

int tt_comm_audit_due(uint32_t every, int64_t step) {
    return every > 0 && step >= 0 && step % (int64_t)every == 0;
}

/* Only the coordinator knows that a regroup only removed members (a
 * drain at a step boundary) and admitted nobody: every survivor is then
 * told the same relation and shrinks together. A rank that decided on its own
 * could shrink while another builds afresh, and both would wait out the
 * init deadline. */
int tt_comm_plan_keeps_parent(uint64_t inst_gen, int nccl_row, uint64_t shrink_of) {
    return nccl_row && shrink_of != 0 && shrink_of == inst_gen;
}

/* Why not abort a kept parent on an NCCL without revoke: ncclCommAbort
 * frees the communicator, and every survivor would then build afresh
 * while the announcement says shrink. A drain leaves nothing in flight
 * to cut short (docs/gpu.md). */
int tt_comm_plan_cuts_short(int keeps, int revokes) {
    return !keeps || revokes;
}

int tt_comm_plan_gone(uint64_t notified_gen, const tt_comm_view_t *v, uint64_t gen) {
    return notified_gen > gen || v->status != TT_OK || v->generation != gen;
}

int tt_comm_plan_report(int rc, int suspect, int my_rank) {
    if (suspect == TT_COLL_SUSPECT_ANY) /* NCCL's remote errors are TT_ENCCL */
        return rc == TT_ETIMEDOUT || rc == TT_EUNREACHABLE || rc == TT_ENCCL ? suspect : -1;
    if (rc != TT_ETIMEDOUT && rc != TT_EUNREACHABLE)
        return -1;
    return suspect >= 0 && suspect != my_rank ? suspect : -1;
}
