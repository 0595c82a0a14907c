/* tt_coll_nccl: NCCL behind the ops table: the collectives an instance
 * (tt_nccl_inst.c) runs. Device buffers are reduced in place on the
 * communication stream, behind the compute stream's event; host buffers
 * are staged through pinned memory. Every collective gets a sequence
 * number and a completion event that the watchdog tracks against the
 * deadline, so no wait here can outlast it. It does not own membership or
 * retries: a failed instance is poisoned and tt_comm builds the next
 * generation's. */
#include "tt_coll_nccl.h"
#include "tt_coll_nccl_int.h"
#include "tt_nccl_inst.h"

#include "tt_clock.h"
#include "tt_nccl_plan.h"
#include "tt_status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tt_coll_nccl_compiled(void) {
    return 1;
}

static int map_dt(tt_dtype_t dt, ncclDataType_t *out, size_t *size) {
    switch (dt) {
    case TT_DT_FLOAT32:
        *out = ncclFloat32, *size = 4;
        return TT_OK;
    case TT_DT_FLOAT64:
        *out = ncclFloat64, *size = 8;
        return TT_OK;
    case TT_DT_INT64:
        *out = ncclInt64, *size = 8;
        return TT_OK;
    default:
        return TT_EINVAL;
    }
}

static int map_op(tt_redop_t op, ncclRedOp_t *out) {
    if (op == TT_RED_SUM)
        *out = ncclSum;
    else if (op == TT_RED_MIN)
        *out = ncclMin;
    else if (op == TT_RED_MAX)
        *out = ncclMax;
    else
        return TT_EINVAL;
    return TT_OK;
}

static void nccl_destroy(void **inst) {
    if (inst == NULL || *inst == NULL)
        return;
    tt_nccl_inst_free(*inst);
    *inst = NULL;
}

static int nccl_create(void **inst, const tt_coll_cfg_t *cfg, char *err, size_t errlen) {
    int rc = tt_nccl_inst_begin(inst, cfg, err, errlen);
    if (rc == TT_OK && (rc = tt_nccl_inst_finish(*inst)) != TT_OK) {
        snprintf(err, errlen, "%s", ((nccl_inst_t *)*inst)->err);
        nccl_destroy(inst);
    }
    return rc;
}

void tt_coll_nccl_set_reporter(void *inst, tt_coll_nccl_report_fn fn, void *ctx) {
    nccl_inst_t *ni = inst;
    ni->report = fn;
    ni->report_ctx = ctx;
}

void *tt_coll_nccl_stream(void *inst) {
    return ((nccl_inst_t *)inst)->stream;
}

/* ---- enqueue and wait ---- */

int tt_coll_nccl_revokes(void) {
    return TT_NCCL_HAS_REVOKE;
}

/* Refuses work on a failed or aborted instance, naming the first cause. */
static int usable(nccl_inst_t *ni) {
    int p = atomic_load(&ni->poisoned);
    if (p < 0)
        return p;
    if (tt_nccl_wd_state(ni->wd) != TT_WD_RUNNING)
        return TT_ECLOSED;
    return TT_OK;
}

static int verdict_err(nccl_inst_t *ni, uint64_t seq, int r) {
    char why[512]; /* the watchdog's sentence names the cause */
    tt_nccl_wd_why(ni->wd, why, sizeof(why));
    return tt_nccl_set_err(ni, r, "collective #%llu: %s", (unsigned long long)seq,
                           why[0] ? why : "failed");
}

/* Waits for collective `seq`: its event, or the watchdog's verdict. The
 * waiter queries the event itself so it does not pay the watchdog's
 * polling period on every collective. Why the verdict is read again once
 * the event completed: a revoke or an abort ends the kernels it cuts
 * short, and their events then complete too, with undefined sums. */
static int wait_seq(nccl_inst_t *ni, uint64_t seq) {
    for (;;) {
        int r = tt_nccl_wd_result(ni->wd, seq);
        if (r < 0)
            return verdict_err(ni, seq, r);
        if (r == 1)
            return TT_OK;
        cudaError_t e = cudaEventQuery(ni->ev[seq % NSLOT]);
        if (e == cudaSuccess && (r = tt_nccl_wd_result(ni->wd, seq)) < 0)
            return verdict_err(ni, seq, r);
        if (e == cudaSuccess) {
            if (seq > atomic_load(&ni->seen_done)) /* one stream: all before it too */
                atomic_store(&ni->seen_done, seq);
            return TT_OK;
        }
        if (e != cudaErrorNotReady)
            return tt_nccl_cu_rc(ni, e, "cudaEventQuery");
        tt_clock_sleep_us(20);
    }
}

int tt_coll_nccl_wait(void *inst) {
    nccl_inst_t *ni = inst;
    return ni->next_seq > 1 ? wait_seq(ni, ni->next_seq - 1) : TT_OK;
}

/* Seq for the next collective; waits for the one that last used its slot. */
static int begin(nccl_inst_t *ni, void *after, uint64_t *seq) {
    int rc = usable(ni);
    if (rc < 0)
        return rc;
    *seq = ni->next_seq;
    if (*seq > NSLOT && (rc = wait_seq(ni, *seq - NSLOT)) < 0)
        return rc;
    if (after != NULL)
        rc = tt_nccl_cu_rc(ni, cudaStreamWaitEvent(ni->stream, (cudaEvent_t)after, 0),
                           "cudaStreamWaitEvent(compute)");
    return rc;
}

/* Records the completion event of `seq` and hands it to the watchdog. */
static int end(nccl_inst_t *ni, uint64_t seq) {
    int rc = tt_nccl_cu_rc(ni, cudaEventRecord(ni->ev[seq % NSLOT], ni->stream), "cudaEventRecord");
    if (rc == TT_OK)
        rc = tt_nccl_wd_track(ni->wd, seq, tt_clock_mono_ms());
    if (rc == TT_OK)
        ni->next_seq = seq + 1;
    return rc < 0 ? tt_nccl_set_err(ni, rc, "collective #%llu not tracked", (unsigned long long)seq)
                  : TT_OK;
}

/* Gradients on another device than the communicator's (two workers of a
 * host left on device 0, or a model moved after tether_create) would fail
 * inside NCCL with an error that names neither; checked once per
 * instance, refused (not poisoned) with both devices named. */
static int on_our_device(nccl_inst_t *ni, const void *dbuf) {
    if (ni->buf_checked || dbuf == NULL)
        return TT_OK;
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, dbuf) != cudaSuccess) {
        (void)cudaGetLastError(); /* NCCL will say what is wrong with it */
        return TT_OK;
    }
    int dev = a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
    if (dev && a.device != ni->device)
        return tt_nccl_set_err(ni, TT_EINVAL,
                               "the gradients are on CUDA device %d, this worker's communicator "
                               "on device %d: set the collective options' cuda_device "
                               "(TETHER_CUDA_DEVICE; tether-train --cuda-device) to theirs",
                               a.device, ni->device);
    ni->buf_checked = 1;
    return TT_OK;
}

int tt_coll_nccl_allreduce_device(void *inst, void *dbuf, size_t count, tt_dtype_t dt,
                                  tt_redop_t op, void *after) {
    nccl_inst_t *ni = inst;
    ncclDataType_t t;
    ncclRedOp_t o;
    size_t sz;
    uint64_t seq;
    if (map_dt(dt, &t, &sz) < 0 || map_op(op, &o) < 0 || (dbuf == NULL && count > 0))
        return tt_nccl_set_err(ni, TT_EINVAL, "allreduce: bad dtype %d / op %d", (int)dt, (int)op);
    int rc = on_our_device(ni, dbuf);
    if (rc == TT_OK)
        rc = begin(ni, after, &seq);
    if (rc == TT_OK && (rc = tt_nccl_comm_lock(ni)) == TT_OK) {
        rc = tt_nccl_settle(ni, ncclAllReduce(dbuf, dbuf, count, t, o, ni->comm, ni->stream),
                            "ncclAllReduce");
        tt_nccl_comm_unlock(ni);
    }
    return rc == TT_OK ? end(ni, seq) : rc;
}

/* What is left of the gradients and the example count in one NCCL group:
 * one launch, so the count can never pair with another step's gradients. */
static int group_grads_count(nccl_inst_t *ni, float *dgrads, const tt_coll_span_t *rest,
                             int nrest) {
    int rc = tt_nccl_comm_lock(ni);
    if (rc != TT_OK)
        return rc;
    rc = tt_nccl_nc_rc(ni, ncclGroupStart(), "ncclGroupStart");
    for (int i = 0; i < nrest && rc == TT_OK; i++) {
        float *d = dgrads + rest[i].off;
        rc = tt_nccl_nc_rc(
            ni, ncclAllReduce(d, d, rest[i].count, ncclFloat32, ncclSum, ni->comm, ni->stream),
            "ncclAllReduce(gradients)");
    }
    if (rc == TT_OK)
        rc = tt_nccl_nc_rc(
            ni,
            ncclAllReduce(ni->dcount, ni->dcount, 1, ncclFloat64, ncclSum, ni->comm, ni->stream),
            "ncclAllReduce(count)");
    ncclResult_t r = ncclGroupEnd(); /* always close the group */
    rc = rc == TT_OK ? tt_nccl_settle(ni, r, "ncclGroupEnd") : rc;
    tt_nccl_comm_unlock(ni);
    return rc;
}

/* What the parts started early left of dgrads[0..count), as slices
 * (room for TT_COLL_EARLY_MAX + 1). Refused parts still write into the buffer the
 * step's redo fills: they are waited for first. */
static int step_rest(nccl_inst_t *ni, size_t count, const tt_coll_span_t *early, int nearly,
                     tt_coll_span_t *rest, int *nrest) {
    if (tt_nccl_rest_plan(early, nearly, count, rest, nrest) == TT_OK)
        return TT_OK;
    (void)tt_coll_nccl_wait(ni);
    return tt_nccl_set_err(
        ni, TT_EINVAL,
        "the step's %d part(s) reduced early overlap or lie outside its buffer of "
        "%zu floats",
        nearly, count);
}

int tt_coll_nccl_reduce_step_device(void *inst, float *dgrads, size_t count,
                                    const tt_coll_span_t *early, int nearly, double local_count,
                                    double *global_count, void *after) {
    nccl_inst_t *ni = inst;
    tt_coll_span_t rest[TT_COLL_EARLY_MAX + 1];
    int nrest = 0;
    uint64_t seq;
    int rc = on_our_device(ni, dgrads);
    if (rc == TT_OK)
        rc = step_rest(ni, count, early, nearly, rest, &nrest);
    if (rc == TT_OK)
        rc = begin(ni, after, &seq);
    if (rc < 0)
        return rc;
    *ni->hcount = local_count;
    rc = tt_nccl_cu_rc(
        ni,
        cudaMemcpyAsync(ni->dcount, ni->hcount, sizeof(double), cudaMemcpyHostToDevice, ni->stream),
        "copy count");
    if (rc == TT_OK)
        rc = group_grads_count(ni, dgrads, rest, nrest);
    if (rc == TT_OK)
        rc = tt_nccl_cu_rc(ni,
                           cudaMemcpyAsync(ni->hcount, ni->dcount, sizeof(double),
                                           cudaMemcpyDeviceToHost, ni->stream),
                           "copy count back");
    if (rc == TT_OK)
        rc = end(ni, seq);
    if (rc == TT_OK)
        rc = wait_seq(ni, seq);
    if (rc == TT_OK)
        *global_count = *ni->hcount;
    return rc;
}

/* ---- host-buffer collectives (the ops table) ---- */

/* Pinned host memory keeps both copies asynchronous: a pageable
 * device-to-host copy would block in the driver until the collective
 * before it finished, outside any deadline. */
static int ensure_scratch(nccl_inst_t *ni, size_t bytes) {
    if (bytes <= ni->scratch_bytes)
        return TT_OK;
    int rc = tt_coll_nccl_wait(ni); /* under the deadline, unlike a stream sync */
    if (rc < 0)
        return rc;
    (void)cudaFree(ni->scratch);
    (void)cudaFreeHost(ni->hscratch);
    ni->scratch = ni->hscratch = NULL;
    ni->scratch_bytes = 0;
    rc = tt_nccl_cu_rc(ni, cudaMalloc(&ni->scratch, bytes), "cudaMalloc(staging)");
    if (rc == TT_OK)
        rc = tt_nccl_cu_rc(ni, cudaMallocHost(&ni->hscratch, bytes), "cudaMallocHost(staging)");
    if (rc == TT_OK)
        ni->scratch_bytes = bytes;
    return rc;
}

typedef struct {
    int bcast, root;
    ncclDataType_t t;
    ncclRedOp_t o;
} host_op_t;

/* The NCCL call of a host collective, on the scratch buffer. */
static int host_nccl(nccl_inst_t *ni, size_t count, const host_op_t *h) {
    int rc = tt_nccl_comm_lock(ni);
    if (rc != TT_OK)
        return rc;
    void *b = ni->scratch;
    if (h->bcast)
        rc = tt_nccl_settle(ni, ncclBroadcast(b, b, count, h->t, h->root, ni->comm, ni->stream),
                            "ncclBroadcast");
    else
        rc = tt_nccl_settle(ni, ncclAllReduce(b, b, count, h->t, h->o, ni->comm, ni->stream),
                            "ncclAllReduce");
    tt_nccl_comm_unlock(ni);
    return rc;
}

/* Host buffer -> pinned -> device scratch -> NCCL -> pinned -> host
 * buffer; the completion event follows the last copy. */
static int host_coll(nccl_inst_t *ni, void *buf, size_t bytes, size_t count, const host_op_t *h) {
    uint64_t seq;
    int rc = begin(ni, NULL, &seq);
    if (rc == TT_OK)
        rc = ensure_scratch(ni, bytes > 0 ? bytes : 8);
    if (rc == TT_OK && bytes > 0) {
        memcpy(ni->hscratch, buf, bytes); /* the previous collective has completed */
        rc = tt_nccl_cu_rc(
            ni,
            cudaMemcpyAsync(ni->scratch, ni->hscratch, bytes, cudaMemcpyHostToDevice, ni->stream),
            "stage to device");
    }
    if (rc == TT_OK)
        rc = host_nccl(ni, count, h);
    if (rc == TT_OK && bytes > 0)
        rc = tt_nccl_cu_rc(
            ni,
            cudaMemcpyAsync(ni->hscratch, ni->scratch, bytes, cudaMemcpyDeviceToHost, ni->stream),
            "stage to host");
    if (rc == TT_OK)
        rc = end(ni, seq);
    if (rc == TT_OK)
        rc = wait_seq(ni, seq);
    if (rc == TT_OK && bytes > 0)
        memcpy(buf, ni->hscratch, bytes);
    return rc;
}

static int nccl_allreduce(void *inst, void *buf, size_t count, tt_dtype_t dt, tt_redop_t op) {
    nccl_inst_t *ni = inst;
    host_op_t h = {0};
    size_t sz;
    if (map_dt(dt, &h.t, &sz) < 0 || map_op(op, &h.o) < 0)
        return tt_nccl_set_err(ni, TT_EINVAL, "allreduce: bad dtype %d / op %d", (int)dt, (int)op);
    return host_coll(ni, buf, count * sz, count, &h);
}

static int nccl_broadcast(void *inst, void *buf, size_t count, tt_dtype_t dt, int root) {
    nccl_inst_t *ni = inst;
    host_op_t h = {.bcast = 1, .root = root};
    size_t sz;
    if (map_dt(dt, &h.t, &sz) < 0 || root < 0 || root >= ni->world)
        return tt_nccl_set_err(ni, TT_EINVAL, "broadcast: bad dtype %d / root %d", (int)dt, root);
    return host_coll(ni, buf, count * sz, count, &h);
}

static int nccl_barrier(void *inst) {
    float one = 1.0f;
    return nccl_allreduce(inst, &one, 1, TT_DT_FLOAT32, TT_RED_SUM);
}

/* Any thread: the watchdog thread performs the abort (it may hang there,
 * where the monitor can see it, instead of in the caller). */
static void nccl_abort(void *inst) {
    nccl_inst_t *ni = inst;
    tt_nccl_wd_fail(ni->wd, TT_ECLOSED, "aborted: the generation ended", tt_clock_mono_ms());
}

static const char *nccl_last_error(void *inst) {
    return ((nccl_inst_t *)inst)->err;
}

/* NCCL reports that a peer failed, not which one. A failure of our own
 * device (TT_ECUDA) or a refused call blames nobody. */
static int nccl_suspect(void *inst) {
    int p = atomic_load(&((nccl_inst_t *)inst)->poisoned);
    return p == TT_ENCCL || p == TT_ETIMEDOUT ? TT_COLL_SUSPECT_ANY : -1;
}

static char *nccl_dump(void *inst) {
    nccl_inst_t *ni = inst;
    char why[512];
    tt_nccl_wd_why(ni->wd, why, sizeof(why));
    char *s = malloc(1024);
    if (s != NULL)
        snprintf(s, 1024, "nccl gen=%llu rank %d/%d device %d: next #%llu, %zu in flight%s%s\n",
                 (unsigned long long)ni->generation, ni->rank, ni->world, ni->device,
                 (unsigned long long)ni->next_seq, tt_nccl_wd_inflight(ni->wd),
                 why[0] ? ", verdict: " : "", why);
    return s;
}

static void nccl_set_step(void *inst, int64_t step) {
    atomic_store(&((nccl_inst_t *)inst)->step, step);
}

static int nccl_step_device(void *inst, float *dgrads, size_t count, const tt_coll_span_t *early,
                            int nearly, double local_count, double *global_count, void *after,
                            int64_t step) {
    (void)step; /* set_step named it already */
    return tt_coll_nccl_reduce_step_device(inst, dgrads, count, early, nearly, local_count,
                                           global_count, after);
}

static int nccl_part_device(void *inst, float *dpart, size_t count, void *after, int64_t step) {
    (void)step; /* set_step named it already */
    return tt_coll_nccl_allreduce_device(inst, dpart, count, TT_DT_FLOAT32, TT_RED_SUM, after);
}

static const tt_coll_ops_t nccl_ops = {
    .name = "nccl",
    .create = nccl_create,
    .allreduce = nccl_allreduce,
    .broadcast = nccl_broadcast,
    .barrier = nccl_barrier,
    .abort = nccl_abort,
    .destroy = nccl_destroy,
    .last_error = nccl_last_error,
    .suspect = nccl_suspect,
    .dump = nccl_dump,
    .set_step = nccl_set_step,
    .reduce_step = NULL,
    .reduce_step_device = nccl_step_device,
    .reduce_part_device = nccl_part_device,
};

const tt_coll_ops_t *tt_coll_nccl_ops(void) {
    return &nccl_ops;
}

int tt_coll_nccl_row(const tt_coll_ops_t *ops) {
    return ops != NULL && (ops == &nccl_ops || ops == tt_coll_nccl_ps_ops());
}

void *tt_coll_nccl_take_parent(const tt_coll_ops_t *ops, void **inst) {
    void *ni = NULL;
    if (inst == NULL || *inst == NULL)
        return NULL;
    if (ops == &nccl_ops) {
        ni = *inst;
        *inst = NULL;
    } else if (ops == tt_coll_nccl_ps_ops()) {
        ni = tt_nccl_ps_detach(*inst);
    }
    if (*inst != NULL)
        ops->destroy(inst);
    return ni != NULL ? tt_nccl_inst_take_parent(ni) : NULL;
}
