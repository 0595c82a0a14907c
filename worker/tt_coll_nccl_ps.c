/* tt_coll_nccl_ps: the "nccl+ps" row of tt_coll's table, the NCCL side of
 * DESIGN §4.5. After a regroup the coordinator announces the step from
 * which a generation's own backend takes over (Generation.ps_until_step);
 * an NCCL communicator takes seconds to build, so until then the step's
 * gradients are summed on the shard servers and the communicator is built
 * in the background: create relays its unique id through the coordinator
 * and starts the non-blocking init, and the first step at or after
 * the announced one waits for it (every member does: the init is
 * collective) and then uses it, as every rank does for the same step.
 * Device steps before the switch are staged through pinned host memory on
 * the communicator's stream: device -> host, the shards' whole-step sum
 * (means, with the count), back to sums as tt_comm's host path does, host
 * -> device; so the trainer's update is the one it would make on the host.
 * Plain collectives take the shards' ring before the switch and NCCL from
 * it; with no ring (NCCL needs no TETHER_ENDPOINT) they take NCCL before
 * it too, the first one waiting for the communicator, while gradients
 * keep the announced step (tt_nccl_ps_route). It owns the pair and the
 * staging buffer; the ps row (tt_coll.c) and the NCCL instance
 * (tt_coll_nccl.c) own everything else. Compiled only where NCCL is. */
#include "tt_coll_nccl.h"
#include "tt_coll_nccl_int.h"

#include "tt_clock.h"
#include "tt_log.h"
#include "tt_nccl_plan.h"
#include "tt_status.h"

#include <cuda_runtime.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SUBSYS "coll"

typedef struct fb_inst {
    const tt_coll_ops_t *pso, *nco; /* the ps and nccl rows */
    void *ps, *nccl;
    int64_t from;         /* Generation.ps_until_step */
    _Atomic int64_t step; /* of the job being run (set_step) */
    atomic_int aborted;
    atomic_int ready; /* 1: the communicator is ready; < 0: it failed (sticky) */
    uint64_t built_ms, ps_steps;
    int switched, plain_noted; /* the log lines of route were written */
    int rank;
    float *hbuf; /* pinned staging of device steps before the switch */
    size_t hcap;
    char err[512];
} fb_inst_t;

static int fb_set_err(fb_inst_t *fi, int rc, const char *fmt, const char *detail) {
    if (fi->err[0] == '\0')
        snprintf(fi->err, sizeof(fi->err), fmt, detail);
    return rc;
}

static void fb_destroy(void **inst) {
    if (inst == NULL || *inst == NULL)
        return;
    fb_inst_t *fi = *inst;
    if (fi->nccl != NULL)
        fi->nco->destroy(&fi->nccl); /* aborts a communicator still being built */
    if (fi->ps != NULL)
        fi->pso->destroy(&fi->ps);
    if (fi->hbuf != NULL)
        (void)cudaFreeHost(fi->hbuf);
    free(fi);
    *inst = NULL;
}

static int fb_create(void **inst, const tt_coll_cfg_t *cfg, char *err, size_t errlen) {
    fb_inst_t *fi = calloc(1, sizeof(*fi));
    if (fi == NULL)
        return TT_ENOMEM;
    fi->pso = tt_coll_ops(TT_COLL_PS);
    fi->nco = tt_coll_nccl_ops();
    fi->from = cfg->ps_until_step;
    fi->rank = cfg->rank;
    atomic_init(&fi->step, -1);
    atomic_init(&fi->aborted, 0);
    atomic_init(&fi->ready, 0);
    /* No device: say so before the shards are asked for a placement. */
    int rc = tt_nccl_have_device(err, errlen);
    if (rc == TT_OK)
        rc = fi->pso->create(&fi->ps, cfg, err, errlen);
    if (rc == TT_OK)
        rc = tt_nccl_inst_begin(&fi->nccl, cfg, err, errlen); /* owns cfg->parent */
    else
        tt_coll_nccl_parent_free(cfg->parent);
    if (rc != TT_OK) {
        void *p = fi;
        fb_destroy(&p);
        return rc;
    }
    fi->built_ms = tt_clock_mono_ms();
    TT_LOG(cfg->rank == 0 ? TT_LOG_WARN : TT_LOG_INFO, SUBSYS,
           "gen=%llu rank %d: gradients go through the shard servers until step %lld while "
           "the NCCL communicator is built, then over NCCL",
           (unsigned long long)cfg->generation, cfg->rank, (long long)fi->from);
    *inst = fi;
    return TT_OK;
}

/* Waits for the communicator once. A failure is sticky and is what every
 * later collective returns (tt_comm then regroups); after an abort,
 * TT_ECLOSED with its sentence whatever the route. */
static int comm_ready(fb_inst_t *fi) {
    if (atomic_load(&fi->aborted))
        return fb_set_err(fi, TT_ECLOSED, "%s", "nccl+ps: aborted (the generation ended)");
    int r = atomic_load(&fi->ready);
    if (r != 0)
        return r > 0 ? TT_OK : r;
    int rc = tt_nccl_inst_finish(fi->nccl);
    if (rc != TT_OK) {
        atomic_store(&fi->ready, rc);
        return fb_set_err(fi, rc, "nccl+ps: the communicator could not be built: %s",
                          fi->nco->last_error(fi->nccl));
    }
    atomic_store(&fi->ready, 1);
    /* An abort that saw ready == 0 a moment ago only stopped the build,
     * which had just ended: the watchdog must hear of it now. */
    if (atomic_load(&fi->aborted)) {
        fi->nco->abort(fi->nccl);
        return fb_set_err(fi, TT_ECLOSED, "%s", "nccl+ps: aborted (the generation ended)");
    }
    fi->nco->set_step(fi->nccl, atomic_load(&fi->step));
    return TT_OK;
}

/* Both ends of the window are worth an operator's eye: rank 0 warns. */
static void note_nccl(fb_inst_t *fi, int64_t step, uint64_t t0) {
    int lvl = fi->rank == 0 ? TT_LOG_WARN : TT_LOG_INFO;
    if (step >= fi->from && !fi->switched) {
        fi->switched = 1;
        TT_LOG(lvl, SUBSYS,
               "switched to NCCL at step %lld (%llu step(s) of this generation went through the "
               "shard servers in %.1f s; the switch waited %.1f s more for the communicator)",
               (long long)step, (unsigned long long)fi->ps_steps,
               (double)(t0 - fi->built_ms) / 1000.0, (double)(tt_clock_mono_ms() - t0) / 1000.0);
    } else if (step < fi->from && !fi->plain_noted) {
        fi->plain_noted = 1;
        TT_LOG(lvl, SUBSYS,
               "plain collectives before step %lld take the NCCL communicator (waited %.1f s "
               "for it): there is no ring for them (no TETHER_ENDPOINT); "
               "gradients stay on the shards until then",
               (long long)fi->from, (double)(tt_clock_mono_ms() - t0) / 1000.0);
    }
}

/* The row that serves a collective of `step` (tt_nccl_ps_route): the
 * shards, or the ps row's ring, before the switch; NCCL, waited for once,
 * from it. Collectives run on tt_comm's thread, one at a time. */
static int route(fb_inst_t *fi, int64_t step, int plain, const tt_coll_ops_t **ops, void **inst) {
    tt_nccl_via_t via = tt_nccl_ps_route(step, fi->from, plain, tt_coll_ps_has_ring(fi->ps));
    *ops = via == TT_NCCL_VIA_NCCL ? fi->nco : fi->pso;
    *inst = via == TT_NCCL_VIA_NCCL ? fi->nccl : fi->ps;
    if (via != TT_NCCL_VIA_NCCL && !atomic_load(&fi->aborted))
        return TT_OK;
    uint64_t t0 = tt_clock_mono_ms();
    int rc = comm_ready(fi);
    if (rc == TT_OK)
        note_nccl(fi, step, t0);
    return rc;
}

static int fb_whole_step(void *inst, int64_t step) {
    fb_inst_t *fi = inst;
    /* Past the announced step a failed switch answers "not whole": the
     * buckets then meet the sticky failure. */
    return step < fi->from;
}

static int fb_allreduce(void *inst, void *buf, size_t count, tt_dtype_t dt, tt_redop_t op) {
    fb_inst_t *fi = inst;
    const tt_coll_ops_t *o;
    void *i;
    int rc = route(fi, atomic_load(&fi->step), 1, &o, &i);
    return rc == TT_OK ? o->allreduce(i, buf, count, dt, op) : rc;
}

static int fb_broadcast(void *inst, void *buf, size_t count, tt_dtype_t dt, int root) {
    fb_inst_t *fi = inst;
    const tt_coll_ops_t *o;
    void *i;
    int rc = route(fi, atomic_load(&fi->step), 1, &o, &i);
    return rc == TT_OK ? o->broadcast(i, buf, count, dt, root) : rc;
}

static int fb_barrier(void *inst) {
    fb_inst_t *fi = inst;
    const tt_coll_ops_t *o;
    void *i;
    int rc = route(fi, atomic_load(&fi->step), 1, &o, &i);
    return rc == TT_OK ? o->barrier(i) : rc;
}

/* Any thread. A communicator still being built is given up (its destroy
 * aborts it); a ready one is aborted by its watchdog. */
static void fb_abort(void *inst) {
    fb_inst_t *fi = inst;
    atomic_store(&fi->aborted, 1);
    fi->pso->abort(fi->ps);
    tt_nccl_inst_stop(fi->nccl);
    if (atomic_load(&fi->ready) > 0)
        fi->nco->abort(fi->nccl);
}

static const char *fb_last_error(void *inst) {
    fb_inst_t *fi = inst;
    if (fi->err[0] != '\0')
        return fi->err;
    const char *n = fi->nco->last_error(fi->nccl);
    return n != NULL && n[0] != '\0' ? n : fi->pso->last_error(fi->ps);
}

/* The shards' exchange names its late rank; a failure of the communicator
 * (its build or a collective) names none: TT_COLL_SUSPECT_ANY, as the nccl
 * row says. The instance lives as long as this one, built or not. */
static int fb_suspect(void *inst) {
    fb_inst_t *fi = inst;
    int s = fi->pso->suspect(fi->ps);
    return s >= 0 ? s : fi->nco->suspect(fi->nccl);
}

static char *fb_dump(void *inst) {
    fb_inst_t *fi = inst;
    return atomic_load(&fi->ready) > 0 ? fi->nco->dump(fi->nccl) : fi->pso->dump(fi->ps);
}

static void fb_set_step(void *inst, int64_t step) {
    fb_inst_t *fi = inst;
    atomic_store(&fi->step, step);
    fi->pso->set_step(fi->ps, step);
    if (atomic_load(&fi->ready) > 0)
        fi->nco->set_step(fi->nccl, step);
}

static int fb_reduce_step(void *inst, float *buf, size_t count, int64_t local_count,
                          int64_t *global_count, int64_t step) {
    fb_inst_t *fi = inst;
    int rc = fi->pso->reduce_step(fi->ps, buf, count, local_count, global_count, step);
    fi->ps_steps += rc == TT_OK;
    return rc;
}

static int fb_state_io(void *inst, int put, int part, float *buf, size_t count,
                       uint64_t optim_step) {
    fb_inst_t *fi = inst;
    return fi->pso->state_io(fi->ps, put, part, buf, count, optim_step);
}

static void fb_set_lr(void *inst, float lr) {
    fb_inst_t *fi = inst;
    fi->pso->set_lr(fi->ps, lr);
}

static int fb_write_ckpt(void *inst, const char *dir, int phase, int64_t after_round,
                         struct tt_ps_written **out, size_t *n) {
    fb_inst_t *fi = inst;
    return fi->pso->write_ckpt(fi->ps, dir, phase, after_round, out, n);
}

/* ---- device steps ---- */

static int cu_fail(fb_inst_t *fi, cudaError_t e, const char *what) {
    char why[256];
    snprintf(why, sizeof(why), "%s: %s", what, cudaGetErrorString(e));
    return fb_set_err(fi, TT_ECUDA, "nccl+ps: staging a device step: %s", why);
}

static int ensure_hbuf(fb_inst_t *fi, size_t count) {
    if (count <= fi->hcap)
        return TT_OK;
    if (fi->hbuf != NULL)
        (void)cudaFreeHost(fi->hbuf);
    fi->hbuf = NULL;
    fi->hcap = 0;
    cudaError_t e = cudaMallocHost((void **)&fi->hbuf, count * sizeof(float));
    if (e != cudaSuccess)
        return cu_fail(fi, e, "cudaMallocHost");
    fi->hcap = count;
    return TT_OK;
}

/* One synchronous copy on the communicator's stream (ours, idle before the
 * switch), after `after` when given. */
static int stage_copy(fb_inst_t *fi, void *dst, const void *src, size_t bytes,
                      enum cudaMemcpyKind kind, void *after) {
    cudaStream_t s = (cudaStream_t)tt_coll_nccl_stream(fi->nccl);
    cudaError_t e = after != NULL ? cudaStreamWaitEvent(s, (cudaEvent_t)after, 0) : cudaSuccess;
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(dst, src, bytes, kind, s);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(s);
    return e == cudaSuccess ? TT_OK : cu_fail(fi, e, "cudaMemcpyAsync");
}

static int staged_step(fb_inst_t *fi, float *dgrads, size_t count, double local_count,
                       double *global_count, void *after, int64_t step) {
    size_t bytes = count * sizeof(float);
    int64_t global = 0;
    int rc = ensure_hbuf(fi, count);
    if (rc == TT_OK)
        rc = stage_copy(fi, fi->hbuf, dgrads, bytes, cudaMemcpyDeviceToHost, after);
    if (rc == TT_OK)
        rc = fb_reduce_step(fi, fi->hbuf, count, (int64_t)local_count, &global, step);
    if (rc != TT_OK)
        return rc;
    float n = (float)global; /* the shards left means: sums again, as on the host */
    for (size_t i = 0; i < count; i++)
        fi->hbuf[i] *= n;
    rc = stage_copy(fi, dgrads, fi->hbuf, bytes, cudaMemcpyHostToDevice, NULL);
    if (rc == TT_OK)
        *global_count = (double)global;
    return rc;
}

/* Before the switch no part started early (fb_part_device): the shards
 * take the whole buffer. */
static int fb_step_device(void *inst, float *dgrads, size_t count, const tt_coll_span_t *early,
                          int nearly, double local_count, double *global_count, void *after,
                          int64_t step) {
    fb_inst_t *fi = inst;
    const tt_coll_ops_t *o;
    void *i;
    int rc = route(fi, step, 0, &o, &i);
    if (rc != TT_OK)
        return rc;
    if (o == fi->pso) /* the shards read host memory */
        return staged_step(fi, dgrads, count, local_count, global_count, after, step);
    return o->reduce_step_device(i, dgrads, count, early, nearly, local_count, global_count, after,
                                 step);
}

/* Before the switch the shards take the step whole at its end: a part
 * has nothing to start early. */
static int fb_part_device(void *inst, float *dpart, size_t count, void *after, int64_t step) {
    fb_inst_t *fi = inst;
    const tt_coll_ops_t *o;
    void *i;
    int rc = route(fi, step, 0, &o, &i);
    if (rc != TT_OK || o == fi->pso)
        return rc;
    return o->reduce_part_device(i, dpart, count, after, step);
}

static const tt_coll_ops_t fb_ops = {
    .name = "nccl+ps",
    .create = fb_create,
    .allreduce = fb_allreduce,
    .allreduce_side = NULL, /* the count job reduces the count on its own */
    .broadcast = fb_broadcast,
    .barrier = fb_barrier,
    .abort = fb_abort,
    .destroy = fb_destroy,
    .last_error = fb_last_error,
    .suspect = fb_suspect,
    .dump = fb_dump,
    .set_step = fb_set_step,
    .reduce_step = fb_reduce_step,
    .state_io = fb_state_io,
    .set_lr = fb_set_lr,
    .write_ckpt = fb_write_ckpt,
    .whole_step = fb_whole_step,
    .reduce_step_device = fb_step_device,
    .reduce_part_device = fb_part_device,
};

void *tt_nccl_ps_detach(void *inst) {
    fb_inst_t *fi = inst;
    if (atomic_load(&fi->ready) != 1)
        return NULL;
    void *ni = fi->nccl;
    fi->nccl = NULL;
    return ni;
}

const tt_coll_ops_t *tt_coll_nccl_ps_ops(void) {
    return &fb_ops;
}
