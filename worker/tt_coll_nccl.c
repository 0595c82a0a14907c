/* tt_coll_nccl: NCCL behind the ops table. What it adds to NCCL is what
 * NCCL lacks: deadlines (every collective is tracked by tt_nccl_watchdog,
 * whose thread probes the completion events and ncclCommGetAsyncError), a
 * non-blocking init with its own deadline, per-generation communicators
 * from a relayed unique id (tt_coll_nccl_id.c), and messages that say what
 * failed. In non-blocking mode any NCCL call may return ncclInProgress;
 * `settle` then polls the asynchronous error until the call has taken
 * effect, as the NCCL documentation requires before the next call.
 * ncclCommAbort frees the communicator from the watchdog thread while the
 * caller's thread may be about to use it, so every use of `comm` after
 * create holds a read lock (NCCL calls return at once in non-blocking mode,
 * so it is held only briefly) and the abort takes it for writing. It does
 * not own membership or retries: a failed instance is poisoned and tt_comm
 * builds the next generation's. */
#include "tt_coll_nccl.h"
#include "tt_coll_nccl_int.h"

#include "tt_clock.h"
#include "tt_log.h"
#include "tt_nccl_plan.h"
#include "tt_nccl_watchdog.h"
#include "tt_status.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SUBSYS     "nccl"
#define NSLOT      64 /* device collectives in flight, one event each */
#define DEFAULT_MS 60000
#define INIT_MS    60000
#define ABORT_MS   10000 /* ncclCommAbort joins NCCL's threads: not instant */

typedef struct nccl_inst {
    int rank, world, device, deadline_ms;
    uint64_t generation;
    ncclComm_t comm;
    cudaStream_t stream;
    cudaEvent_t ev[NSLOT];
    uint64_t next_seq; /* of the next collective; seqs start at 1 */
    void *scratch;     /* device staging for host-buffer collectives */
    void *hscratch;    /* its pinned host twin: async copies both ways */
    size_t scratch_bytes;
    double *dcount, *hcount; /* device / pinned example count */
    tt_nccl_wd_t *wd;
    tt_coll_nccl_report_fn report;
    void *report_ctx;
    int settled;         /* the non-blocking init (or shrink) completed */
    atomic_int aborted;  /* ncclCommAbort returned: the comm is gone */
    atomic_int stop;     /* tt_nccl_inst_stop: a settle in progress gives up */
    atomic_int poisoned; /* negative status once failed */
    _Atomic int64_t step;
    pthread_mutex_t emu;
    pthread_rwlock_t cl; /* read: using comm; write: aborting it */
    char err[512];
} nccl_inst_t;

int tt_coll_nccl_compiled(void) {
    return 1;
}

/* ---- errors ---- */

static int set_err(nccl_inst_t *ni, int rc, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&ni->emu);
    if (ni->err[0] == '\0') /* the first failure is the cause; keep it */
        snprintf(ni->err, sizeof(ni->err), "nccl gen=%llu rank %d/%d step %lld: %s",
                 (unsigned long long)ni->generation, ni->rank, ni->world,
                 (long long)atomic_load(&ni->step), buf);
    pthread_mutex_unlock(&ni->emu);
    if (rc < 0 && rc != TT_EINVAL) {
        int expected = 0;
        atomic_compare_exchange_strong(&ni->poisoned, &expected, rc);
    }
    return rc;
}

static int cu_rc(nccl_inst_t *ni, cudaError_t e, const char *what) {
    if (e == cudaSuccess)
        return TT_OK;
    return set_err(ni, TT_ECUDA, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

/* Caller holds the comm lock (ncclGetLastError reads the communicator). */
static int nc_rc(nccl_inst_t *ni, ncclResult_t r, const char *what) {
    if (r == ncclSuccess)
        return TT_OK;
    const char *last = ni->comm != NULL ? ncclGetLastError(ni->comm) : NULL;
    return set_err(ni, TT_ENCCL, "%s: %s%s%s", what, ncclGetErrorString(r),
                   last != NULL && last[0] ? ": " : "", last != NULL ? last : "");
}

/* Takes the comm lock for reading; TT_ECLOSED (lock not held) once the
 * communicator was aborted. */
static int comm_lock(nccl_inst_t *ni) {
    pthread_rwlock_rdlock(&ni->cl);
    if (!atomic_load(&ni->aborted))
        return TT_OK;
    pthread_rwlock_unlock(&ni->cl);
    return set_err(ni, TT_ECLOSED, "the communicator was aborted");
}

static void comm_unlock(nccl_inst_t *ni) {
    pthread_rwlock_unlock(&ni->cl);
}

/* Completes a non-blocking NCCL call: polls the async error while it is
 * ncclInProgress, under a deadline. Called and returns with the comm lock
 * held; drops it between polls so the watchdog can abort meanwhile. */
static int settle_within(nccl_inst_t *ni, ncclResult_t r, const char *what, int ms) {
    uint64_t end = tt_clock_mono_ms() + (uint64_t)ms;
    while (r == ncclInProgress) {
        if (tt_clock_mono_ms() >= end)
            return set_err(ni, TT_ETIMEDOUT, "%s: still in progress after %d ms", what, ms);
        comm_unlock(ni);
        tt_clock_sleep_us(100);
        pthread_rwlock_rdlock(&ni->cl);
        if (atomic_load(&ni->aborted) || atomic_load(&ni->stop))
            return set_err(ni, TT_ECLOSED, "%s: %s", what,
                           atomic_load(&ni->aborted) ? "the communicator was aborted"
                                                     : "given up: the generation ended");
        ncclResult_t q = ncclCommGetAsyncError(ni->comm, &r);
        if (q != ncclSuccess)
            r = q;
    }
    return nc_rc(ni, r, what);
}

static int settle(nccl_inst_t *ni, ncclResult_t r, const char *what) {
    return settle_within(ni, r, what, ni->deadline_ms);
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

/* ---- watchdog callbacks (watchdog / monitor threads) ---- */

static tt_wd_probe_t wd_probe(void *ctx, uint64_t seq) {
    nccl_inst_t *ni = ctx;
    /* The watchdog thread's current device is whatever it was born with. */
    cudaError_t e = cudaSetDevice(ni->device);
    if (e == cudaSuccess)
        e = cudaEventQuery(ni->ev[seq % NSLOT]);
    if (e == cudaSuccess)
        return TT_WD_DONE;
    if (e == cudaErrorNotReady)
        return TT_WD_PENDING;
    return TT_WD_FAILED;
}

static int wd_async(void *ctx, char *why, size_t len) {
    nccl_inst_t *ni = ctx;
    ncclResult_t st = ncclSuccess;
    ncclResult_t q = ncclCommGetAsyncError(ni->comm, &st);
    if (q != ncclSuccess)
        st = q;
    if (st == ncclSuccess || st == ncclInProgress)
        return TT_OK;
    const char *last = ncclGetLastError(ni->comm);
    snprintf(why, len, "NCCL asynchronous error: %s%s%s (a peer failed or left)",
             ncclGetErrorString(st), last != NULL && last[0] ? ": " : "", last != NULL ? last : "");
    return TT_ENCCL;
}

static void wd_report(void *ctx, uint64_t seq, int status, const char *why) {
    nccl_inst_t *ni = ctx;
    (void)seq; /* `why` names it */
    set_err(ni, status, "%s", why);
    if (ni->report != NULL)
        ni->report(ni->report_ctx, -1, status, why);
}

static void wd_abort(void *ctx) {
    nccl_inst_t *ni = ctx;
    pthread_rwlock_wrlock(&ni->cl);
    ncclResult_t r = ncclCommAbort(ni->comm);
    atomic_store(&ni->aborted, 1);
    pthread_rwlock_unlock(&ni->cl);
    if (r != ncclSuccess)
        TT_WARN(SUBSYS, "ncclCommAbort: %s", ncclGetErrorString(r));
}

/* The one place libtether ends the process: a wedged device cannot be
 * recovered from inside it, and a hung rank would stall the whole job. */
static void wd_abort_hung(void *ctx, const char *why) {
    (void)ctx;
    const char *mode = getenv("TETHER_NCCL_ABORT_HANG");
    if (mode != NULL && strcmp(mode, "log") == 0)
        return;
    fprintf(stderr,
            "tether: fatal: %s; ending the process (set TETHER_NCCL_ABORT_HANG=log to "
            "keep it)\n",
            why);
    _exit(70);
}

static int abort_ms(const nccl_inst_t *ni) {
    return ni->deadline_ms > ABORT_MS ? ni->deadline_ms : ABORT_MS;
}

static int start_watchdog(nccl_inst_t *ni) {
    tt_nccl_wd_opts_t o = {.deadline_ms = ni->deadline_ms,
                           .abort_deadline_ms = abort_ms(ni),
                           .poll_ms = 5,
                           .ctx = ni,
                           .probe = wd_probe,
                           .async_error = wd_async,
                           .report = wd_report,
                           .abort = wd_abort,
                           .abort_hung = wd_abort_hung};
    int rc = tt_nccl_wd_create(&ni->wd, &o);
    if (rc == TT_OK)
        rc = tt_nccl_wd_start(ni->wd);
    return rc < 0 ? set_err(ni, rc, "cannot start the watchdog: %s", tt_strerror(rc)) : TT_OK;
}

/* ---- creation ---- */

static int cuda_setup(nccl_inst_t *ni) {
    int rc = cu_rc(ni, cudaGetDevice(&ni->device), "cudaGetDevice");
    if (rc == TT_OK)
        rc = cu_rc(ni, cudaStreamCreateWithFlags(&ni->stream, cudaStreamNonBlocking),
                   "cudaStreamCreate(communication)");
    for (int i = 0; rc == TT_OK && i < NSLOT; i++)
        rc = cu_rc(ni, cudaEventCreateWithFlags(&ni->ev[i], cudaEventDisableTiming),
                   "cudaEventCreate");
    if (rc == TT_OK)
        rc = cu_rc(ni, cudaMalloc((void **)&ni->dcount, sizeof(double)), "cudaMalloc(count)");
    if (rc == TT_OK)
        rc = cu_rc(ni, cudaMallocHost((void **)&ni->hcount, sizeof(double)),
                   "cudaMallocHost(count)");
    return rc;
}

/* Non-blocking init: NCCL returns at once and connects in the background
 * (its own threads); comm_settle waits for it. */
static int comm_start(nccl_inst_t *ni, const ncclUniqueId *id) {
    ncclConfig_t conf = NCCL_CONFIG_INITIALIZER;
    conf.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&ni->comm, ni->world, *id, ni->rank, &conf);
    if (r != ncclSuccess && r != ncclInProgress)
        return nc_rc(ni, r, "ncclCommInitRankConfig");
    return TT_OK;
}

/* The deadline here is what NCCL itself would never give up on. Bootstrap
 * and topology discovery take seconds on big nodes: the init gets at least
 * INIT_MS whatever the collective deadline. */
static int comm_settle(nccl_inst_t *ni, const char *what) {
    int ms = ni->deadline_ms > INIT_MS ? ni->deadline_ms : INIT_MS;
    pthread_rwlock_rdlock(&ni->cl); /* no watchdog yet; settle expects it */
    int rc = settle_within(ni, ncclInProgress, what, ms);
    comm_unlock(ni);
    if (rc != TT_OK && ni->comm != NULL) {
        (void)ncclCommAbort(ni->comm); /* never destroy a half-built comm */
        ni->comm = NULL;
    }
    ni->settled = rc == TT_OK;
    return rc;
}

/* Lets a decided abort run on the watchdog thread (where the monitor sees
 * it) before the instance goes; the state it ended in. */
static tt_wd_state_t settle_abort(nccl_inst_t *ni) {
    if (ni->wd == NULL)
        return TT_WD_RUNNING;
    /* The monitor turns ABORTING into HUNG after the abort deadline. */
    uint64_t end = tt_clock_mono_ms() + 2u * (uint64_t)abort_ms(ni);
    tt_wd_state_t st = tt_nccl_wd_state(ni->wd);
    while (st == TT_WD_ABORTING && tt_clock_mono_ms() < end) {
        tt_clock_sleep_us(1000);
        st = tt_nccl_wd_state(ni->wd);
    }
    return st;
}

static void inst_free(nccl_inst_t *ni) {
    /* Work still in flight finishes or meets its deadline (and the abort)
     * before anything is torn down; a plain stream sync could hang. */
    if (ni->wd != NULL && tt_nccl_wd_state(ni->wd) == TT_WD_RUNNING)
        (void)tt_coll_nccl_wait(ni);
    tt_wd_state_t st = settle_abort(ni);
    tt_nccl_wd_destroy(&ni->wd);
    if (st == TT_WD_HUNG || st == TT_WD_ABORTING)
        return; /* the abort is still running on the watchdog thread: leak */
    if (ni->comm != NULL && comm_lock(ni) == TT_OK) { /* the threads are gone */
        int rc = atomic_load(&ni->poisoned) == 0 && ni->settled
                     ? settle(ni, ncclCommFinalize(ni->comm), "ncclCommFinalize")
                     : TT_ENCCL; /* a broken or half-built comm is aborted */
        if (rc == TT_OK)
            (void)ncclCommDestroy(ni->comm);
        else if (!atomic_load(&ni->aborted))
            (void)ncclCommAbort(ni->comm); /* finalize cannot flush a broken comm */
        comm_unlock(ni);
    }
    if (ni->stream != NULL)
        (void)cudaStreamSynchronize(ni->stream);
    for (int i = 0; i < NSLOT; i++) {
        if (ni->ev[i] != NULL)
            (void)cudaEventDestroy(ni->ev[i]);
    }
    (void)cudaFree(ni->scratch);
    (void)cudaFreeHost(ni->hscratch);
    (void)cudaFree(ni->dcount);
    (void)cudaFreeHost(ni->hcount);
    if (ni->stream != NULL)
        (void)cudaStreamDestroy(ni->stream);
    pthread_rwlock_destroy(&ni->cl);
    pthread_mutex_destroy(&ni->emu);
    free(ni);
}

static void nccl_destroy(void **inst) {
    if (inst == NULL || *inst == NULL)
        return;
    inst_free(*inst);
    *inst = NULL;
}

static nccl_inst_t *inst_alloc(int rank, int world, uint64_t generation, int deadline_ms) {
    nccl_inst_t *ni = calloc(1, sizeof(*ni));
    if (ni == NULL)
        return NULL;
    pthread_mutex_init(&ni->emu, NULL);
    pthread_rwlock_init(&ni->cl, NULL);
    ni->rank = rank, ni->world = world, ni->generation = generation;
    ni->deadline_ms = deadline_ms > 0 ? deadline_ms : DEFAULT_MS;
    ni->next_seq = 1;
    atomic_init(&ni->aborted, 0);
    atomic_init(&ni->stop, 0);
    atomic_init(&ni->poisoned, 0);
    atomic_init(&ni->step, -1);
    return ni;
}

int tt_nccl_have_device(char *err, size_t errlen) {
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) == cudaSuccess && ndev > 0)
        return TT_OK;
    (void)cudaGetLastError();
    snprintf(err, errlen, "nccl: no CUDA device on this host");
    return TT_ENODEV;
}

int tt_nccl_inst_begin(void **inst, const tt_coll_cfg_t *cfg, tt_nccl_bcast_fn bcast, void *ctx,
                       char *err, size_t errlen) {
    ncclUniqueId id;
    int rc = tt_nccl_have_device(err, errlen);
    if (rc == TT_OK)
        rc = tt_nccl_id_relay(cfg, bcast, ctx, &id, err, errlen);
    if (rc != TT_OK)
        return rc;
    nccl_inst_t *ni = inst_alloc(cfg->rank, cfg->world, cfg->generation, cfg->deadline_ms);
    if (ni == NULL)
        return TT_ENOMEM;
    TT_CHECK_GOTO(cuda_setup(ni), rc, fail);
    TT_CHECK_GOTO(comm_start(ni, &id), rc, fail);
    *inst = ni;
    return TT_OK;
fail:
    snprintf(err, errlen, "%s", ni->err);
    inst_free(ni);
    return rc;
}

int tt_nccl_inst_finish(void *inst) {
    nccl_inst_t *ni = inst;
    if (ni->settled)
        return atomic_load(&ni->poisoned);
    int rc = atomic_load(&ni->poisoned);
    if (rc == TT_OK)
        rc = comm_settle(ni, "ncclCommInitRankConfig");
    if (rc == TT_OK)
        rc = start_watchdog(ni);
    if (rc == TT_OK)
        TT_INFO(SUBSYS, "gen=%llu rank %d/%d: communicator ready on device %d",
                (unsigned long long)ni->generation, ni->rank, ni->world, ni->device);
    return rc;
}

void tt_nccl_inst_stop(void *inst) {
    atomic_store(&((nccl_inst_t *)inst)->stop, 1);
}

static int nccl_create(void **inst, const tt_coll_cfg_t *cfg, char *err, size_t errlen) {
    int rc = tt_nccl_inst_begin(inst, cfg, tt_nccl_ring_bcast, (void *)cfg, err, errlen);
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

/* Refuses work on a failed or aborted instance, naming the first cause. */
static int usable(nccl_inst_t *ni) {
    int p = atomic_load(&ni->poisoned);
    if (p < 0)
        return p;
    if (tt_nccl_wd_state(ni->wd) != TT_WD_RUNNING)
        return TT_ECLOSED;
    return TT_OK;
}

/* Waits for collective `seq`: its event, or the watchdog's verdict. The
 * waiter queries the event itself so it does not pay the watchdog's
 * polling period on every collective. */
static int wait_seq(nccl_inst_t *ni, uint64_t seq) {
    for (;;) {
        int r = tt_nccl_wd_result(ni->wd, seq);
        if (r < 0) { /* the watchdog's sentence names the cause */
            char why[512];
            tt_nccl_wd_why(ni->wd, why, sizeof(why));
            return set_err(ni, r, "collective #%llu: %s", (unsigned long long)seq,
                           why[0] ? why : "failed");
        }
        if (r == 1)
            return TT_OK;
        cudaError_t e = cudaEventQuery(ni->ev[seq % NSLOT]);
        if (e == cudaSuccess)
            return TT_OK;
        if (e != cudaErrorNotReady)
            return cu_rc(ni, e, "cudaEventQuery");
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
        rc = cu_rc(ni, cudaStreamWaitEvent(ni->stream, (cudaEvent_t)after, 0),
                   "cudaStreamWaitEvent(compute)");
    return rc;
}

/* Records the completion event of `seq` and hands it to the watchdog. */
static int end(nccl_inst_t *ni, uint64_t seq) {
    int rc = cu_rc(ni, cudaEventRecord(ni->ev[seq % NSLOT], ni->stream), "cudaEventRecord");
    if (rc == TT_OK)
        rc = tt_nccl_wd_track(ni->wd, seq, tt_clock_mono_ms());
    if (rc == TT_OK)
        ni->next_seq = seq + 1;
    return rc < 0 ? set_err(ni, rc, "collective #%llu not tracked", (unsigned long long)seq)
                  : TT_OK;
}

int tt_coll_nccl_allreduce_device(void *inst, void *dbuf, size_t count, tt_dtype_t dt,
                                  tt_redop_t op, void *after) {
    nccl_inst_t *ni = inst;
    ncclDataType_t t;
    ncclRedOp_t o;
    size_t sz;
    uint64_t seq;
    if (map_dt(dt, &t, &sz) < 0 || map_op(op, &o) < 0 || (dbuf == NULL && count > 0))
        return set_err(ni, TT_EINVAL, "allreduce: bad dtype %d / op %d", (int)dt, (int)op);
    int rc = begin(ni, after, &seq);
    if (rc == TT_OK && (rc = comm_lock(ni)) == TT_OK) {
        rc = settle(ni, ncclAllReduce(dbuf, dbuf, count, t, o, ni->comm, ni->stream),
                    "ncclAllReduce");
        comm_unlock(ni);
    }
    return rc == TT_OK ? end(ni, seq) : rc;
}

/* What is left of the gradients and the example count in one NCCL group:
 * one launch, so the count can never pair with another step's gradients. */
static int group_grads_count(nccl_inst_t *ni, float *dgrads, const tt_coll_span_t *rest,
                             int nrest) {
    int rc = comm_lock(ni);
    if (rc != TT_OK)
        return rc;
    rc = nc_rc(ni, ncclGroupStart(), "ncclGroupStart");
    for (int i = 0; i < nrest && rc == TT_OK; i++) {
        float *d = dgrads + rest[i].off;
        rc = nc_rc(ni,
                   ncclAllReduce(d, d, rest[i].count, ncclFloat32, ncclSum, ni->comm, ni->stream),
                   "ncclAllReduce(gradients)");
    }
    if (rc == TT_OK)
        rc = nc_rc(
            ni,
            ncclAllReduce(ni->dcount, ni->dcount, 1, ncclFloat64, ncclSum, ni->comm, ni->stream),
            "ncclAllReduce(count)");
    ncclResult_t r = ncclGroupEnd(); /* always close the group */
    rc = rc == TT_OK ? settle(ni, r, "ncclGroupEnd") : rc;
    comm_unlock(ni);
    return rc;
}

/* What the parts started early left of dgrads[0..count), as slices
 * (room for TT_COLL_EARLY_MAX + 1). Refused parts still write into the buffer the
 * step's redo fills: they are waited for first. */
static int step_rest(nccl_inst_t *ni, size_t count, const tt_coll_span_t *early, int nearly,
                     tt_coll_span_t *rest, int *nrest) {
    if (nearly <= TT_COLL_EARLY_MAX &&
        tt_nccl_rest_plan(early, nearly, count, rest, nrest) == TT_OK)
        return TT_OK;
    (void)tt_coll_nccl_wait(ni);
    return set_err(ni, TT_EINVAL,
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
    int rc = step_rest(ni, count, early, nearly, rest, &nrest);
    if (rc == TT_OK)
        rc = begin(ni, after, &seq);
    if (rc < 0)
        return rc;
    *ni->hcount = local_count;
    rc = cu_rc(
        ni,
        cudaMemcpyAsync(ni->dcount, ni->hcount, sizeof(double), cudaMemcpyHostToDevice, ni->stream),
        "copy count");
    if (rc == TT_OK)
        rc = group_grads_count(ni, dgrads, rest, nrest);
    if (rc == TT_OK)
        rc = cu_rc(ni,
                   cudaMemcpyAsync(ni->hcount, ni->dcount, sizeof(double), cudaMemcpyDeviceToHost,
                                   ni->stream),
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
    rc = cu_rc(ni, cudaMalloc(&ni->scratch, bytes), "cudaMalloc(staging)");
    if (rc == TT_OK)
        rc = cu_rc(ni, cudaMallocHost(&ni->hscratch, bytes), "cudaMallocHost(staging)");
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
    int rc = comm_lock(ni);
    if (rc != TT_OK)
        return rc;
    void *b = ni->scratch;
    if (h->bcast)
        rc = settle(ni, ncclBroadcast(b, b, count, h->t, h->root, ni->comm, ni->stream),
                    "ncclBroadcast");
    else
        rc = settle(ni, ncclAllReduce(b, b, count, h->t, h->o, ni->comm, ni->stream),
                    "ncclAllReduce");
    comm_unlock(ni);
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
        rc = cu_rc(
            ni,
            cudaMemcpyAsync(ni->scratch, ni->hscratch, bytes, cudaMemcpyHostToDevice, ni->stream),
            "stage to device");
    }
    if (rc == TT_OK)
        rc = host_nccl(ni, count, h);
    if (rc == TT_OK && bytes > 0)
        rc = cu_rc(
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
        return set_err(ni, TT_EINVAL, "allreduce: bad dtype %d / op %d", (int)dt, (int)op);
    return host_coll(ni, buf, count * sz, count, &h);
}

static int nccl_broadcast(void *inst, void *buf, size_t count, tt_dtype_t dt, int root) {
    nccl_inst_t *ni = inst;
    host_op_t h = {.bcast = 1, .root = root};
    size_t sz;
    if (map_dt(dt, &h.t, &sz) < 0 || root < 0 || root >= ni->world)
        return set_err(ni, TT_EINVAL, "broadcast: bad dtype %d / root %d", (int)dt, root);
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

static int nccl_suspect(void *inst) {
    (void)inst;
    return -1; /* NCCL reports that a peer failed, not which one */
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

/* ---- shrink ---- */

/* ncclCommShrink of `old` (read-locked so the old watchdog cannot abort it
 * underneath) into ni->comm, non-blocking, with the parent's operations
 * terminated first (NCCL_SHRINK_ABORT: the old generation is over). */
static int shrink_comm(nccl_inst_t *old, nccl_inst_t *ni, int *sorted, int n) {
    int rc = comm_lock(old);
    if (rc != TT_OK)
        return set_err(ni, TT_ECLOSED, "ncclCommShrink: the old communicator was aborted");
    ncclConfig_t conf = NCCL_CONFIG_INITIALIZER;
    conf.blocking = 0;
    ncclResult_t r = ncclCommShrink(old->comm, sorted, n, &ni->comm, &conf, NCCL_SHRINK_ABORT);
    comm_unlock(old);
    if (r != ncclSuccess && r != ncclInProgress)
        return set_err(ni, TT_ENCCL, "ncclCommShrink: %s", ncclGetErrorString(r));
    return comm_settle(ni, "ncclCommShrink");
}

int tt_coll_nccl_shrink(void *inst, const int *exclude, int n, uint64_t generation, void **out,
                        char *err, size_t errlen) {
    nccl_inst_t *old = inst;
    int sorted[256], new_rank, new_world;
    if (n > (int)(sizeof(sorted) / sizeof(sorted[0])))
        return TT_EINVAL;
    int rc = tt_nccl_shrink_plan(old->rank, old->world, exclude, n, sorted, &new_rank, &new_world);
    if (rc != TT_OK) {
        snprintf(err, errlen, "nccl: cannot shrink generation %llu by %d rank(s): %s",
                 (unsigned long long)old->generation, n,
                 rc == TT_EMEMBERSHIP ? "this rank is excluded" : "bad exclude list");
        return rc;
    }
    nccl_inst_t *ni = inst_alloc(new_rank, new_world, generation, old->deadline_ms);
    if (ni == NULL)
        return TT_ENOMEM;
    TT_CHECK_GOTO(cuda_setup(ni), rc, fail);
    TT_CHECK_GOTO(shrink_comm(old, ni, sorted, n), rc, fail);
    TT_CHECK_GOTO(start_watchdog(ni), rc, fail);
    TT_INFO(SUBSYS, "gen=%llu rank %d/%d: communicator shrunk from gen %llu (%d rank(s) excluded)",
            (unsigned long long)generation, new_rank, new_world,
            (unsigned long long)old->generation, n);
    *out = ni;
    return TT_OK;
fail:
    snprintf(err, errlen, "%s", ni->err);
    inst_free(ni);
    return rc;
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
