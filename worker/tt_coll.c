/* tt_coll: the backend table (ring, ps, nccl) and the choice between them.
 * The ring entry is a thin adapter over tt_ring that adds what the ring
 * itself does not have: an abort flag other threads may set. The ps entry
 * adapts tt_ps: it fetches the placement of the registered gradients from
 * the coordinator and serves whole-step reductions (rank-order sums, so a
 * shard restarted mid-step is refilled without the replicas drifting
 * apart), with a ring beside it for plain collectives when endpoints
 * exist. The nccl entry is a stub that fails create with TT_ENODEV and a
 * sentence saying why, so a CPU-only build links, `auto` falls through
 * cleanly, and the GPU module only replaces that row (and adds nccl+ps,
 * taken like ring+ps after a regroup). It owns no
 * threads and no membership; see tt_coll.h for what it does not do. */
#include "tt_coll.h"

#include "tt_coll_nccl.h"
#include "tt_collseq.h"
#include "tt_log.h"
#include "tt_ps.h"
#include "tt_ring.h"
#include "tt_status.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SUBSYS "coll"

/* ---- ring ---- */

typedef struct ring_inst {
    tt_ring_t *ring;
    atomic_int aborted;
    char err[256];
} ring_inst_t;

/* The options of a ring for cfg's generation: its members, deadline,
 * segment and recorder sizes, the job's message tag and tcp_only. */
static void ring_opts(const tt_coll_cfg_t *cfg, tt_ring_opts_t *o) {
    *o = (tt_ring_opts_t){.rank = cfg->rank,
                          .world = cfg->world,
                          .generation = cfg->generation,
                          .endpoints = cfg->endpoints,
                          .bind_endpoint = cfg->bind_endpoint,
                          .deadline_ms = cfg->deadline_ms,
                          .segment_bytes = cfg->segment_bytes,
                          .flight_capacity = cfg->flight_capacity,
                          .job_tag = tt_collseq_job_tag(cfg->job_id) ^ cfg->job_nonce,
                          .tcp_only = cfg->ring_tcp_only,
                          .key = cfg->key};
}

/* `idle` (may be NULL): tt_ring_opts_t.idle. */
static int ring_open(void **inst, const tt_coll_cfg_t *cfg, void (*idle)(void *), void *idle_ctx,
                     char *err, size_t errlen) {
    int missing = tt_coll_ring_endpoint_missing(cfg->endpoints, cfg->world);
    if (missing >= 0) {
        snprintf(err, errlen,
                 "ring: rank %d advertised no endpoint (set TETHER_ENDPOINT on every worker)",
                 missing);
        return TT_ENODEV;
    }
    ring_inst_t *ri = calloc(1, sizeof(*ri));
    if (ri == NULL)
        return TT_ENOMEM;
    atomic_init(&ri->aborted, 0);
    tt_ring_opts_t o;
    ring_opts(cfg, &o);
    o.idle = idle;
    o.idle_ctx = idle_ctx;
    int rc = tt_ring_create(&ri->ring, &o, err, errlen);
    if (rc != TT_OK) {
        free(ri);
        return rc;
    }
    *inst = ri;
    return TT_OK;
}

static int ring_create(void **inst, const tt_coll_cfg_t *cfg, char *err, size_t errlen) {
    return ring_open(inst, cfg, NULL, NULL, err, errlen);
}

/* An aborted instance refuses work before touching the sockets. */
static int ring_refused(ring_inst_t *ri) {
    if (!atomic_load(&ri->aborted))
        return 0;
    snprintf(ri->err, sizeof(ri->err), "ring aborted (generation ended)");
    return 1;
}

static int ring_allreduce(void *inst, void *buf, size_t count, tt_dtype_t dt, tt_redop_t op) {
    ring_inst_t *ri = inst;
    return ring_refused(ri) ? TT_ECLOSED : tt_ring_allreduce(ri->ring, buf, count, dt, op);
}

static int ring_allreduce_side(void *inst, void *buf, size_t count, tt_dtype_t dt, tt_redop_t op,
                               int64_t *side) {
    ring_inst_t *ri = inst;
    return ring_refused(ri) ? TT_ECLOSED
                            : tt_ring_allreduce_side(ri->ring, buf, count, dt, op, side);
}

static int ring_broadcast(void *inst, void *buf, size_t count, tt_dtype_t dt, int root) {
    ring_inst_t *ri = inst;
    return ring_refused(ri) ? TT_ECLOSED : tt_ring_broadcast(ri->ring, buf, count, dt, root);
}

static int ring_barrier(void *inst) {
    ring_inst_t *ri = inst;
    return ring_refused(ri) ? TT_ECLOSED : tt_ring_barrier(ri->ring);
}

static void ring_abort(void *inst) {
    ring_inst_t *ri = inst;
    atomic_store(&ri->aborted, 1);
    tt_ring_interrupt(ri->ring); /* ends a collective in flight too */
}

static void ring_destroy(void **inst) {
    if (inst == NULL || *inst == NULL)
        return;
    ring_inst_t *ri = *inst;
    tt_ring_destroy(&ri->ring);
    free(ri);
    *inst = NULL;
}

static const char *ring_last_error(void *inst) {
    ring_inst_t *ri = inst;
    if (atomic_load(&ri->aborted) && tt_ring_status(ri->ring) == 0)
        return ri->err;
    return tt_ring_last_error(ri->ring);
}

static int ring_suspect(void *inst) {
    return tt_ring_suspect(((ring_inst_t *)inst)->ring);
}

static char *ring_dump(void *inst) {
    return tt_ring_dump(((ring_inst_t *)inst)->ring, 0);
}

static void ring_set_step(void *inst, int64_t step) {
    tt_ring_set_step(((ring_inst_t *)inst)->ring, step);
}

static const tt_coll_ops_t ring_ops = {
    .name = "ring",
    .create = ring_create,
    .allreduce = ring_allreduce,
    .allreduce_side = ring_allreduce_side,
    .broadcast = ring_broadcast,
    .barrier = ring_barrier,
    .abort = ring_abort,
    .destroy = ring_destroy,
    .last_error = ring_last_error,
    .suspect = ring_suspect,
    .dump = ring_dump,
    .set_step = ring_set_step,
    .reduce_step = NULL,
};

/* ---- ps ---- */

/* The ps backend is a pair: the shard servers reduce the step's gradients
 * with the example count; plain collectives (metrics, the audit, user
 * all-reduces) are small and go over a ring when the members advertised
 * endpoints, else they return TT_ENODEV. */
typedef struct ps_inst {
    tt_ps_t *ps;       /* NULL: no gradients were registered before create */
    void *ring;        /* ring_inst_t, NULL: no endpoints, or it failed */
    int64_t ring_from; /* "ring+ps": buckets take the ring from this step; 0: ps */
    uint64_t ps_steps; /* steps reduced on the shards, for the switch's log line */
    int switched;      /* that line was written */
    int rank;
    char err[256];      /* why a part is missing */
    char ring_err[256]; /* why the ring could not be set up ("": no endpoints) */
    int no_endpoint;    /* the first rank that advertised none, or -1 */
} ps_inst_t;

/* The gradient table as the coordinator's placement wants it. */
static int ps_fetch(const tt_coll_cfg_t *cfg, tt_ps_layout_t *lay, char *err, size_t errlen) {
    tt_ps_tensor_t *t = calloc(cfg->ntensors, sizeof(*t));
    char(*names)[24] = calloc(cfg->ntensors, sizeof(*names));
    int rc = TT_ENOMEM;
    if (t != NULL && names != NULL) {
        for (size_t i = 0; i < cfg->ntensors; i++) {
            snprintf(names[i], sizeof(names[i]), "grad.%zu", i);
            t[i] = (tt_ps_tensor_t){names[i], cfg->tensor_counts[i]};
        }
        tt_ps_fetch_opts_t fo = {.coordinator = cfg->coordinator,
                                 .key = cfg->key,
                                 .job_id = cfg->job_id,
                                 .sender_id = cfg->worker_id,
                                 .min_shards = cfg->min_shards,
                                 .timeout_ms = (int)cfg->shard_wait_ms,
                                 .tensors = t,
                                 .ntensors = cfg->ntensors,
                                 .gen_over = cfg->gone,
                                 .gen_ctx = cfg->gone_ctx,
                                 .generation = cfg->generation};
        rc = tt_ps_layout_fetch(&fo, lay, err, errlen);
    }
    free(t);
    free(names);
    return rc;
}

/* A dead rank's pushes never come, so the shards never complete its
 * round: the plain ring's neighbours see its connections close and end
 * the step at once (the others learn of it from the next generation). */
static int ps_peer_gone(void *ctx) {
    ps_inst_t *pi = ctx;
    ring_inst_t *ri = pi->ring;
    return ri != NULL ? tt_ring_neighbour_gone(ri->ring) : -1;
}

/* While a plain collective waits on the ring, a shard that restarted
 * after this rank had the last step's result may hold that step open for
 * ranks that did not: they cannot reach this collective until this rank
 * contributes again (tt_ps_tend). Only a waiting rank needs to: one that
 * never waits has every peer's data already. */
static void ps_ring_idle(void *ctx) {
    tt_ps_tend(((ps_inst_t *)ctx)->ps);
}

static int ps_open_shards(ps_inst_t *pi, const tt_coll_cfg_t *cfg, char *err, size_t errlen) {
    tt_ps_layout_t lay;
    memset(&lay, 0, sizeof(lay));
    int rc = ps_fetch(cfg, &lay, err, errlen);
    if (rc != TT_OK)
        return rc;
    tt_ps_opts_t o = {.rank = cfg->rank,
                      .world = cfg->world,
                      .generation = cfg->generation,
                      .job_id = cfg->job_id,
                      .sender_id = cfg->worker_id,
                      .key = cfg->key,
                      .layout = &lay,
                      .deadline_ms = cfg->deadline_ms,
                      .mode = cfg->shard_update ? TT_PS_OPTIMIZER : TT_PS_AGGREGATE,
                      .optim = cfg->optim == 1 ? TT_PS_ADAMW : TT_PS_SGD,
                      .sgd = cfg->sgd,
                      .adamw = cfg->adamw,
                      /* Rank-order sums: a shard restarted mid-step can then be
                       * refilled by the ranks ahead with the very bits they
                       * applied (tt_ps_recover.c), and replicas stay identical. */
                      .deterministic = 1,
                      .peer_gone = ps_peer_gone,
                      .peer_ctx = pi,
                      .gen_over = cfg->gone,
                      .gen_ctx = cfg->gone_ctx};
    rc = tt_ps_create(&pi->ps, &o, err, errlen);
    tt_ps_layout_free(&lay);
    return rc;
}

static void ps_destroy(void **inst) {
    if (inst == NULL || *inst == NULL)
        return;
    ps_inst_t *pi = *inst;
    tt_ps_destroy(&pi->ps);
    ring_destroy(&pi->ring);
    free(pi);
    *inst = NULL;
}

static int ps_create(void **inst, const tt_coll_cfg_t *cfg, char *err, size_t errlen) {
    if (cfg->coordinator == NULL || cfg->coordinator[0] == '\0') {
        snprintf(err, errlen, "ps: no coordinator endpoint to fetch the placement from");
        return TT_ENODEV;
    }
    ps_inst_t *pi = calloc(1, sizeof(*pi));
    if (pi == NULL)
        return TT_ENOMEM;
    int rc = TT_OK;
    if (cfg->ntensors > 0)
        rc = ps_open_shards(pi, cfg, err, errlen);
    else
        snprintf(pi->err, sizeof(pi->err),
                 "ps: no gradients were registered before the first "
                 "collective of this generation");
    char why[256] = "";
    int missing = tt_coll_ring_endpoint_missing(cfg->endpoints, cfg->world);
    pi->no_endpoint = missing; /* said only if a plain collective is asked for */
    if (rc == TT_OK && missing < 0 &&
        ring_open(&pi->ring, cfg, ps_ring_idle, pi, why, sizeof(why)) != TT_OK) {
        /* Gradients still flow; plain collectives will fail naming this. */
        pi->ring = NULL;
        snprintf(pi->ring_err, sizeof(pi->ring_err), "%s", why);
        TT_WARN(SUBSYS, "gen=%llu rank %d: ps backend without a ring for plain collectives: %s",
                (unsigned long long)cfg->generation, cfg->rank, why);
    }
    if (rc == TT_OK && pi->ps == NULL && pi->ring == NULL) {
        snprintf(err, errlen, "%s, and no ring endpoints for plain collectives", pi->err);
        rc = TT_ENODEV;
    }
    if (rc != TT_OK) {
        void *p = pi;
        ps_destroy(&p);
        return rc;
    }
    *inst = pi;
    return TT_OK;
}

int tt_coll_ps_has_ring(const void *ps_inst) {
    return ps_inst != NULL && ((const ps_inst_t *)ps_inst)->ring != NULL;
}

static int ps_no_ring(ps_inst_t *pi) {
    if (pi->ring_err[0] != '\0')
        snprintf(pi->err, sizeof(pi->err),
                 "the ps backend's ring for plain collectives could not be set up: %.160s",
                 pi->ring_err);
    else
        snprintf(pi->err, sizeof(pi->err),
                 "the ps backend reduces only the registered gradients (tether_step_finish); "
                 "plain collectives need a ring, and rank %d advertised no endpoint (set "
                 "TETHER_ENDPOINT on every worker)",
                 pi->no_endpoint);
    return TT_ENODEV;
}

static int ps_allreduce(void *inst, void *buf, size_t count, tt_dtype_t dt, tt_redop_t op) {
    ps_inst_t *pi = inst;
    return pi->ring ? ring_allreduce(pi->ring, buf, count, dt, op) : ps_no_ring(pi);
}
/* After the switch of a ring+ps generation, the buckets run here. */
static int ps_allreduce_side(void *inst, void *buf, size_t count, tt_dtype_t dt, tt_redop_t op,
                             int64_t *side) {
    ps_inst_t *pi = inst;
    return pi->ring ? ring_allreduce_side(pi->ring, buf, count, dt, op, side) : ps_no_ring(pi);
}
static int ps_broadcast(void *inst, void *buf, size_t count, tt_dtype_t dt, int root) {
    ps_inst_t *pi = inst;
    return pi->ring ? ring_broadcast(pi->ring, buf, count, dt, root) : ps_no_ring(pi);
}
static int ps_barrier(void *inst) {
    ps_inst_t *pi = inst;
    return pi->ring ? ring_barrier(pi->ring) : ps_no_ring(pi);
}
static void ps_abort(void *inst) {
    ps_inst_t *pi = inst;
    tt_ps_interrupt(pi->ps); /* a step waiting on a lost shard ends now */
    if (pi->ring != NULL)
        ring_abort(pi->ring);
}
static const char *ps_last_error(void *inst) {
    ps_inst_t *pi = inst;
    if (pi->ps != NULL && tt_ps_status(pi->ps) != 0)
        return tt_ps_last_error(pi->ps);
    if (pi->ring != NULL && ring_last_error(pi->ring)[0] != '\0')
        return ring_last_error(pi->ring);
    return pi->err;
}
static int ps_suspect(void *inst) {
    ps_inst_t *pi = inst;
    if (pi->ps != NULL && tt_ps_status(pi->ps) != 0)
        return tt_ps_suspect(pi->ps);
    return pi->ring != NULL ? ring_suspect(pi->ring) : -1;
}
static char *ps_dump(void *inst) {
    ps_inst_t *pi = inst; /* the shards' part is in tt_comm's API recorder */
    return pi->ring != NULL ? ring_dump(pi->ring) : NULL;
}
static void ps_set_step(void *inst, int64_t step) {
    ps_inst_t *pi = inst; /* reduce_step passes the step to the shards itself */
    if (pi->ring != NULL)
        ring_set_step(pi->ring, step);
}

static int ps_reduce_step(void *inst, float *buf, size_t count, int64_t local_count,
                          int64_t *global_count, int64_t step) {
    ps_inst_t *pi = inst;
    uint64_t total = 0;
    if (pi->ps == NULL)
        return TT_ENODEV; /* pi->err says why */
    tt_ps_set_step(pi->ps, step >= 0 ? (uint64_t)step : 0);
    int rc = tt_ps_allreduce(pi->ps, buf, count, (uint64_t)local_count, &total);
    *global_count = (int64_t)total;
    pi->ps_steps += rc == TT_OK;
    return rc;
}

static int ps_state_io(void *inst, int put, int part, float *buf, size_t count,
                       uint64_t optim_step) {
    ps_inst_t *pi = inst;
    if (pi->ps == NULL)
        return TT_ENODEV;
    return put ? tt_ps_set_params(pi->ps, (tt_ps_part_t)part, buf, 0, count, optim_step)
               : tt_ps_get_params(pi->ps, (tt_ps_part_t)part, buf, 0, count, NULL);
}

static int ps_write_ckpt(void *inst, const char *dir, int phase, int64_t after_round,
                         struct tt_ps_written **out, size_t *n) {
    ps_inst_t *pi = inst;
    if (pi->ps == NULL)
        return TT_ENODEV;
    uint64_t last = after_round >= 0 ? (uint64_t)after_round : 0;
    if (phase == 1) {
        int rc = tt_ps_checkpoint_begin(pi->ps, dir, after_round >= 0 ? &last : NULL);
        if (rc != TT_OK) /* not a poisoning failure: keep its sentence here */
            snprintf(pi->err, sizeof(pi->err), "%s", tt_ps_last_error(pi->ps));
        return rc;
    }
    size_t ns = tt_ps_nshards(pi->ps);
    tt_ps_written_t *w = calloc(ns, sizeof(*w));
    if (w == NULL)
        return TT_ENOMEM;
    int rc = tt_ps_checkpoint_result(pi->ps, dir, w);
    if (rc != TT_OK) {
        snprintf(pi->err, sizeof(pi->err), "%s", tt_ps_last_error(pi->ps));
        tt_ps_written_free(w, ns);
        free(w);
        return rc;
    }
    *out = w;
    *n = ns;
    return TT_OK;
}

static void ps_set_lr(void *inst, float lr) {
    ps_inst_t *pi = inst;
    if (pi->ps != NULL)
        tt_ps_set_lr(pi->ps, lr);
}

/* The rows ps and ring+ps share everything but the name, create and
 * whole_step. */
#define PS_ROW_SHARED                                                                              \
    .allreduce = ps_allreduce, .allreduce_side = ps_allreduce_side, .broadcast = ps_broadcast,     \
    .barrier = ps_barrier, .abort = ps_abort, .destroy = ps_destroy, .last_error = ps_last_error,  \
    .suspect = ps_suspect, .dump = ps_dump, .set_step = ps_set_step,                               \
    .reduce_step = ps_reduce_step, .state_io = ps_state_io, .set_lr = ps_set_lr,                   \
    .write_ckpt = ps_write_ckpt

static const tt_coll_ops_t ps_ops = {.name = "ps", .create = ps_create, PS_ROW_SHARED};

/* ---- ring+ps: the ps row until the announced step, then the ring ---- */

/* Why a ring generation starts on the shard servers: its ring (or, later,
 * its NCCL communicator) is made while the first steps run, and the
 * coordinator fixed the step from which every rank takes the ring, so all
 * ranks use the same backend for the same step. The ring is the one the
 * ps backend already keeps for plain collectives. */
static int fallback_create(void **inst, const tt_coll_cfg_t *cfg, char *err, size_t errlen) {
    int rc = ps_create(inst, cfg, err, errlen);
    if (rc != TT_OK)
        return rc;
    ps_inst_t *pi = *inst;
    if (pi->ring == NULL) {
        snprintf(err, errlen, "ring+ps: %s",
                 pi->ring_err[0] ? pi->ring_err : "no ring endpoints for after the fallback");
        ps_destroy(inst);
        return TT_ENODEV;
    }
    pi->ring_from = cfg->ps_until_step;
    pi->rank = cfg->rank;
    /* A degraded mode an operator wants to see: rank 0 says it (warn). */
    TT_LOG(cfg->rank == 0 ? TT_LOG_WARN : TT_LOG_INFO, SUBSYS,
           "gen=%llu rank %d: gradients go through the shard servers until step %lld, "
           "then over the ring",
           (unsigned long long)cfg->generation, cfg->rank, (long long)pi->ring_from);
    return TT_OK;
}

static int fallback_whole_step(void *inst, int64_t step) {
    ps_inst_t *pi = inst;
    if (pi->ps != NULL && step < pi->ring_from)
        return 1;
    if (!pi->switched) {
        pi->switched = 1;
        TT_LOG(pi->rank == 0 ? TT_LOG_WARN : TT_LOG_INFO, SUBSYS,
               "switched to the ring at step %lld (%llu step(s) of this generation went "
               "through the shard servers)",
               (long long)step, (unsigned long long)pi->ps_steps);
    }
    return 0;
}

static const tt_coll_ops_t fallback_ops = {
    .name = "ring+ps", .create = fallback_create, PS_ROW_SHARED, .whole_step = fallback_whole_step};

/* ---- stubs: backends that are not part of this build ---- */

static int nccl_create(void **inst, const tt_coll_cfg_t *cfg, char *err, size_t errlen) {
    (void)inst;
    (void)cfg;
    snprintf(err, errlen, "nccl: built without NCCL (configure with TETHER_WITH_CUDA=ON)");
    return TT_ENODEV;
}

/* Never reached (create fails), but callers may rely on non-NULL slots. */
static int stub_allreduce(void *inst, void *buf, size_t count, tt_dtype_t dt, tt_redop_t op) {
    (void)inst, (void)buf, (void)count, (void)dt, (void)op;
    return TT_ENODEV;
}
static int stub_broadcast(void *inst, void *buf, size_t count, tt_dtype_t dt, int root) {
    (void)inst, (void)buf, (void)count, (void)dt, (void)root;
    return TT_ENODEV;
}
static int stub_barrier(void *inst) {
    (void)inst;
    return TT_ENODEV;
}
static void stub_abort(void *inst) {
    (void)inst;
}
static void stub_destroy(void **inst) {
    if (inst != NULL)
        *inst = NULL;
}
static const char *stub_last_error(void *inst) {
    (void)inst;
    return "backend not available";
}
static int stub_suspect(void *inst) {
    (void)inst;
    return -1;
}
static char *stub_dump(void *inst) {
    (void)inst;
    return NULL;
}
static void stub_set_step(void *inst, int64_t step) {
    (void)inst, (void)step;
}

#define STUB_OPS(nm, create_fn)                                                                    \
    {                                                                                              \
        .name = nm, .create = create_fn, .allreduce = stub_allreduce, .broadcast = stub_broadcast, \
        .barrier = stub_barrier, .abort = stub_abort, .destroy = stub_destroy,                     \
        .last_error = stub_last_error, .suspect = stub_suspect, .dump = stub_dump,                 \
        .set_step = stub_set_step, .reduce_step = NULL                                             \
    }

static const tt_coll_ops_t nccl_ops = STUB_OPS("nccl", nccl_create);

/* ---- selection ---- */

const tt_coll_ops_t *tt_coll_ops(tt_coll_kind_t kind) {
    switch (kind) {
    case TT_COLL_RING:
        return &ring_ops;
    case TT_COLL_PS:
        return &ps_ops;
    case TT_COLL_NCCL: /* tt_coll_nccl.c where NCCL is built, else the stub row */
        return tt_coll_nccl_compiled() ? tt_coll_nccl_ops() : &nccl_ops;
    default:
        return NULL;
    }
}

static const char *const kind_names[] = {"auto", "ring", "ps", "nccl"};

int tt_coll_parse_kind(const char *s, tt_coll_kind_t *out) {
    for (int i = 0; s != NULL && i < 4; i++) {
        if (strcmp(s, kind_names[i]) == 0) {
            *out = (tt_coll_kind_t)i;
            return TT_OK;
        }
    }
    return TT_EINVAL;
}

const char *tt_coll_kind_name(tt_coll_kind_t kind) {
    return (unsigned)kind < 4 ? kind_names[kind] : "?";
}

int tt_coll_ring_endpoint_missing(const char *const *endpoints, int world) {
    for (int r = 0; world > 1 && r < world; r++) {
        if (endpoints == NULL || endpoints[r] == NULL || endpoints[r][0] == '\0')
            return r;
    }
    return -1;
}

void tt_coll_candidates(tt_coll_kind_t want, int world, int ring_endpoints_ok,
                        tt_coll_kind_t out[3], size_t *n) {
    *n = 0;
    if (want != TT_COLL_AUTO) {
        out[(*n)++] = want;
        return;
    }
    if (world <= 1 || ring_endpoints_ok)
        out[(*n)++] = TT_COLL_RING;
    out[(*n)++] = TT_COLL_PS;
}

const tt_coll_ops_t *tt_coll_row(tt_coll_kind_t kind, const tt_coll_cfg_t *cfg) {
    int window = cfg->ps_until_step > 0 && cfg->world > 1;
    if (window && kind == TT_COLL_RING)
        return &fallback_ops;
    /* Without registered gradients the shards have nothing to take
     * over: the plain row builds its communicator at once. */
    if (window && kind == TT_COLL_NCCL && cfg->ntensors > 0 && tt_coll_nccl_ps_ops() != NULL)
        return tt_coll_nccl_ps_ops();
    return tt_coll_ops(kind);
}

int tt_coll_open(tt_coll_kind_t want, const tt_coll_cfg_t *cfg, const tt_coll_ops_t **ops,
                 void **inst, char *err, size_t errlen) {
    tt_coll_kind_t cand[3];
    size_t n = 0, used = 0;
    int missing = tt_coll_ring_endpoint_missing(cfg->endpoints, cfg->world);
    tt_coll_candidates(want, cfg->world, missing < 0, cand, &n);
    int rc = TT_ENODEV;
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    if (want == TT_COLL_AUTO && missing >= 0 && err != NULL)
        used += (size_t)snprintf(err, errlen, "ring skipped: rank %d advertised no endpoint; ",
                                 missing);
    for (size_t i = 0; i < n; i++) {
        const tt_coll_ops_t *o = tt_coll_row(cand[i], cfg);
        char why[512] = ""; /* a shard's reason runs long (tt_ps_recover.c) */
        if (o == NULL)
            continue;
        rc = o->create(inst, cfg, why, sizeof(why));
        if (rc == TT_OK) {
            *ops = o;
            TT_INFO(SUBSYS, "gen=%llu rank %d/%d: %s backend ready",
                    (unsigned long long)cfg->generation, cfg->rank, cfg->world, o->name);
            return TT_OK;
        }
        TT_INFO(SUBSYS, "%s backend unavailable: %s (%s)", o->name, why, tt_status_name(rc));
        if (err != NULL && used < errlen)
            used += (size_t)snprintf(err + used, errlen - used, "%s%s", i ? "; " : "", why);
        if (rc == TT_EMEMBERSHIP)
            break; /* the generation is over: no other row would serve it */
    }
    return rc;
}
