/* tt_nccl_inst: the life of one NCCL instance. What it adds to NCCL is
 * what NCCL lacks: a non-blocking init with its own deadline, a
 * communicator per generation from a relayed unique id
 * (tt_coll_nccl_id.c) or shrunk from the one before, a watchdog
 * (tt_nccl_watchdog) whose thread probes the completion events and
 * ncclCommGetAsyncError and performs the abort (a revoke first, which
 * keeps the communicator for a shrink), and messages that say what
 * failed. In non-blocking mode any NCCL call may return ncclInProgress;
 * `settle` then polls the asynchronous error until the call has taken
 * effect, as the NCCL documentation requires before the next call.
 * ncclCommAbort frees the communicator from the watchdog thread while the
 * caller's thread may be about to use it, so every use of `comm` after
 * create holds a read lock (NCCL calls return at once in non-blocking mode,
 * so it is held only briefly) and the abort takes it for writing. The
 * collectives themselves are tt_coll_nccl.c's. */
#include "tt_nccl_inst.h"

#include "tt_clock.h"
#include "tt_coll_nccl_int.h"
#include "tt_log.h"
#include "tt_nccl_plan.h"
#include "tt_status.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SUBSYS     "nccl"
#define DEFAULT_MS 60000
#define ABORT_MS   10000 /* ncclCommAbort joins NCCL's threads: not instant */

/* ---- errors ---- */

int tt_nccl_set_err(nccl_inst_t *ni, int rc, const char *fmt, ...) {
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

int tt_nccl_cu_rc(nccl_inst_t *ni, cudaError_t e, const char *what) {
    if (e == cudaSuccess)
        return TT_OK;
    return tt_nccl_set_err(ni, TT_ECUDA, "%s: %s (%s)", what, cudaGetErrorString(e),
                           cudaGetErrorName(e));
}

/* NCCL's last message, labelled as what it is. Why not as this
 * communicator's: ncclGetLastError ignores its argument and returns one
 * string for the whole process, the last any communicator wrote, so with
 * two alive (a generation's and the next one's being built, or a drained
 * one's) it may be the other's, or an older failure's. */
static void last_message(nccl_inst_t *ni, char *out, size_t n) {
    const char *last = ncclGetLastError(ni->comm);
    out[0] = '\0';
    if (last != NULL && last[0] != '\0')
        snprintf(out, n, " (NCCL's last message in this process: %s)", last);
}

/* Caller holds the comm lock. */
int tt_nccl_nc_rc(nccl_inst_t *ni, ncclResult_t r, const char *what) {
    if (r == ncclSuccess)
        return TT_OK;
    char last[320];
    last_message(ni, last, sizeof(last));
    return tt_nccl_set_err(ni, TT_ENCCL, "%s: %s%s", what, ncclGetErrorString(r), last);
}

/* Takes the comm lock for reading; TT_ECLOSED (lock not held) once the
 * communicator was aborted. */
int tt_nccl_comm_lock(nccl_inst_t *ni) {
    pthread_rwlock_rdlock(&ni->cl);
    if (!atomic_load(&ni->aborted))
        return TT_OK;
    pthread_rwlock_unlock(&ni->cl);
    return tt_nccl_set_err(ni, TT_ECLOSED, "the communicator was aborted");
}

void tt_nccl_comm_unlock(nccl_inst_t *ni) {
    pthread_rwlock_unlock(&ni->cl);
}

/* Completes a non-blocking NCCL call: polls the async error while it is
 * ncclInProgress, under a deadline. Called and returns with the comm lock
 * held; drops it between polls so the watchdog can abort meanwhile. */
/* A communicator still being built (init or shrink) whose generation is
 * over will never be used, and its peers may be gone: waiting out the
 * init deadline would only hold up the next generation. A settled one
 * finalizes whatever the generation. */
static int outdated(nccl_inst_t *ni) {
    return !ni->settled && ni->gone != NULL && ni->gone(ni->gone_ctx, ni->generation);
}

/* The communicator's asynchronous state; a failure to read it counts as
 * that state. */
static ncclResult_t async_state(ncclComm_t comm) {
    ncclResult_t r = ncclSuccess;
    ncclResult_t q = ncclCommGetAsyncError(comm, &r);
    return q != ncclSuccess ? q : r;
}

static int settle_within(nccl_inst_t *ni, ncclResult_t r, const char *what, int ms) {
    uint64_t end = tt_clock_mono_ms() + (uint64_t)ms;
    while (r == ncclInProgress) {
        if (tt_clock_mono_ms() >= end)
            return tt_nccl_set_err(ni, TT_ETIMEDOUT, "%s: still in progress after %d ms", what, ms);
        tt_nccl_comm_unlock(ni);
        tt_clock_sleep_us(100);
        pthread_rwlock_rdlock(&ni->cl);
        if (atomic_load(&ni->aborted) || atomic_load(&ni->stop) || outdated(ni))
            return tt_nccl_set_err(ni, TT_ECLOSED, "%s: %s", what,
                                   atomic_load(&ni->aborted) ? "the communicator was aborted"
                                                             : "given up: the generation ended");
        r = async_state(ni->comm);
    }
    return tt_nccl_nc_rc(ni, r, what);
}

int tt_nccl_settle(nccl_inst_t *ni, ncclResult_t r, const char *what) {
    return settle_within(ni, r, what, ni->deadline_ms);
}

/* ---- watchdog callbacks (watchdog / monitor threads) ---- */

static tt_wd_probe_t wd_probe(void *ctx, uint64_t seq) {
    nccl_inst_t *ni = ctx;
    if (seq <= atomic_load(&ni->seen_done))
        return TT_WD_DONE; /* its slot may be recorded again already */
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
    ncclResult_t st = async_state(ni->comm);
    if (st == ncclSuccess || st == ncclInProgress)
        return TT_OK;
    char last[320];
    last_message(ni, last, sizeof(last));
    snprintf(why, len, "NCCL asynchronous error: %s (a peer failed or left)%s",
             ncclGetErrorString(st), last);
    return TT_ENCCL;
}

static void wd_report(void *ctx, uint64_t seq, int status, const char *why) {
    nccl_inst_t *ni = ctx;
    (void)seq; /* `why` names it */
    tt_nccl_set_err(ni, status, "%s", why);
    if (ni->report != NULL)
        ni->report(ni->report_ctx, -1, status, why);
}

#if TT_NCCL_HAS_REVOKE
/* Why revoke before abort: both stop the kernels a dead peer left
 * spinning, but a revoked communicator stays valid as the parent of
 * ncclCommShrink. A drain's survivors shrink it; a death's do not (the
 * coordinator announces no shrink: NCCL 2.28 refuses one when the proxy
 * saw the peer fail, and revoke keeps that error; docs/gpu.md), so there
 * the revoke only ends the work. It is non-blocking here and must
 * quiesce within `ms`; anything else (an error, a revoke that does not
 * settle) falls back to ncclCommAbort. Caller holds the comm lock for
 * writing. */
static int revoke_within(nccl_inst_t *ni, int ms) {
    uint64_t end = tt_clock_mono_ms() + (uint64_t)ms;
    ncclResult_t r = ncclCommRevoke(ni->comm, NCCL_REVOKE_DEFAULT);
    while (r == ncclInProgress && tt_clock_mono_ms() < end) {
        tt_clock_sleep_us(200);
        r = async_state(ni->comm);
    }
    if (r == ncclSuccess)
        return 1;
    TT_WARN(SUBSYS, "gen=%llu rank %d/%d: ncclCommRevoke: %s; aborting instead",
            (unsigned long long)ni->generation, ni->rank, ni->world,
            r == ncclInProgress ? "not quiescent in time" : ncclGetErrorString(r));
    return 0;
}
#else
static int revoke_within(nccl_inst_t *ni, int ms) {
    (void)ni, (void)ms;
    return 0; /* no ncclCommRevoke before NCCL 2.28.7 */
}
#endif

static int abort_ms(const nccl_inst_t *ni) {
    return ni->deadline_ms > ABORT_MS ? ni->deadline_ms : ABORT_MS;
}

/* The revoke gets a quarter of the abort's deadline, so the abort that
 * may follow still has the monitor's time. */
static void wd_abort(void *ctx) {
    nccl_inst_t *ni = ctx;
    pthread_rwlock_wrlock(&ni->cl);
    if (revoke_within(ni, abort_ms(ni) / 4)) {
        atomic_store(&ni->revoked, 1);
        pthread_rwlock_unlock(&ni->cl);
        TT_INFO(SUBSYS, "gen=%llu rank %d/%d: communicator revoked",
                (unsigned long long)ni->generation, ni->rank, ni->world);
        return;
    }
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
    return rc < 0 ? tt_nccl_set_err(ni, rc, "cannot start the watchdog: %s", tt_strerror(rc))
                  : TT_OK;
}

/* ---- creation ---- */

/* The thread that builds the communicator runs its collectives: the device
 * set here stays current for them. */
static int use_device(nccl_inst_t *ni) {
    if (ni->want_device < 0)
        return TT_OK;
    cudaError_t e = cudaSetDevice(ni->want_device);
    if (e == cudaSuccess)
        return TT_OK;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess)
        n = 0;
    (void)cudaGetLastError();
    return tt_nccl_set_err(ni, e == cudaErrorInvalidDevice ? TT_ENODEV : TT_ECUDA,
                           "CUDA device %d: %s (this process sees %d device(s), numbered from 0 "
                           "after CUDA_VISIBLE_DEVICES)",
                           ni->want_device, cudaGetErrorString(e), n);
}

static int cuda_setup(nccl_inst_t *ni) {
    int rc = use_device(ni);
    if (rc == TT_OK)
        rc = tt_nccl_cu_rc(ni, cudaGetDevice(&ni->device), "cudaGetDevice");
    if (rc == TT_OK)
        rc = tt_nccl_cu_rc(ni, cudaStreamCreateWithFlags(&ni->stream, cudaStreamNonBlocking),
                           "cudaStreamCreate(communication)");
    for (int i = 0; rc == TT_OK && i < NSLOT; i++)
        rc = tt_nccl_cu_rc(ni, cudaEventCreateWithFlags(&ni->ev[i], cudaEventDisableTiming),
                           "cudaEventCreate");
    if (rc == TT_OK)
        rc = tt_nccl_cu_rc(ni, cudaMalloc((void **)&ni->dcount, sizeof(double)),
                           "cudaMalloc(count)");
    if (rc == TT_OK)
        rc = tt_nccl_cu_rc(ni, cudaMallocHost((void **)&ni->hcount, sizeof(double)),
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
        return tt_nccl_nc_rc(ni, r, "ncclCommInitRankConfig");
    return TT_OK;
}

/* The deadline here is what NCCL itself would never give up on. Bootstrap
 * and topology discovery take seconds on big nodes: the init gets at least
 * TT_NCCL_INIT_MS whatever the collective deadline. */
static int shrink_wait(nccl_inst_t *ni, int ms);

static int comm_settle(nccl_inst_t *ni, const char *what) {
    int ms = ni->deadline_ms > TT_NCCL_INIT_MS ? ni->deadline_ms : TT_NCCL_INIT_MS;
    uint64_t t0 = tt_clock_mono_ms();
    int rc = ni->parent != NULL ? shrink_wait(ni, ms) : TT_OK;
    int left = ms - (int)(tt_clock_mono_ms() - t0);
    if (rc == TT_OK) {
        pthread_rwlock_rdlock(&ni->cl); /* no watchdog yet; settle expects it */
        rc = settle_within(ni, ncclInProgress, what, left > 1 ? left : 1);
        tt_nccl_comm_unlock(ni);
    }
    /* A shrink given up on may still be running and write the handle
     * later: read it atomically here; if it comes later, teardown aborts
     * the parent first and then finds it. */
    ncclComm_t half = __atomic_load_n(&ni->comm, __ATOMIC_ACQUIRE);
    if (rc != TT_OK && half != NULL) {
        (void)ncclCommAbort(half); /* never destroy a half-built comm */
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

/* Teardown may run on any thread (a new generation closes the old
 * backend from the membership thread): the instance's device is made
 * current for it and the caller's put back. Returns the caller's, or -1
 * when nothing was changed. */
static int enter_device(const nccl_inst_t *ni) {
    int prev = -1;
    if (ni->device < 0)
        return -1; /* nothing was made on a device */
    if (cudaGetDevice(&prev) == cudaSuccess && prev != ni->device &&
        cudaSetDevice(ni->device) == cudaSuccess)
        return prev;
    (void)cudaGetLastError();
    return -1;
}

static void leave_device(int prev) {
    if (prev >= 0)
        (void)cudaSetDevice(prev);
}

void tt_nccl_inst_free(nccl_inst_t *ni) {
    /* Work still in flight finishes or meets its deadline (and the abort)
     * before anything is torn down; a plain stream sync could hang. */
    if (ni->wd != NULL && tt_nccl_wd_state(ni->wd) == TT_WD_RUNNING)
        (void)tt_coll_nccl_wait(ni);
    tt_wd_state_t st = settle_abort(ni);
    if (tt_nccl_wd_destroy(&ni->wd) || st == TT_WD_HUNG || st == TT_WD_ABORTING)
        return; /* the abort is still running on the watchdog thread: leak */
    int prev = enter_device(ni);
    /* A shrink still in flight is a job NCCL runs on the parent, and it
     * writes the child's handle only as it ends: aborting the parent ends
     * it (NCCL joins it first), and only then is the handle final. */
    tt_coll_nccl_parent_free(ni->parent);
    ni->parent = NULL;
    ni->comm = __atomic_load_n(&ni->comm, __ATOMIC_ACQUIRE);
    if (ni->comm != NULL && tt_nccl_comm_lock(ni) == TT_OK) { /* the threads are gone */
        int rc = atomic_load(&ni->poisoned) == 0 && !atomic_load(&ni->revoked) && ni->settled
                     ? tt_nccl_settle(ni, ncclCommFinalize(ni->comm), "ncclCommFinalize")
                     : TT_ENCCL; /* a broken or half-built comm is aborted */
        if (rc == TT_OK)
            (void)ncclCommDestroy(ni->comm);
        else if (!atomic_load(&ni->aborted))
            (void)ncclCommAbort(ni->comm); /* finalize cannot flush a broken comm */
        tt_nccl_comm_unlock(ni);
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
    leave_device(prev);
    pthread_rwlock_destroy(&ni->cl);
    pthread_mutex_destroy(&ni->emu);
    free(ni);
}

static nccl_inst_t *inst_alloc(const tt_coll_cfg_t *cfg) {
    nccl_inst_t *ni = calloc(1, sizeof(*ni));
    if (ni == NULL)
        return NULL;
    pthread_mutex_init(&ni->emu, NULL);
    pthread_rwlock_init(&ni->cl, NULL);
    ni->rank = cfg->rank, ni->world = cfg->world, ni->generation = cfg->generation;
    ni->want_device = cfg->device;
    ni->device = -1; /* until cuda_setup */
    ni->deadline_ms = cfg->deadline_ms > 0 ? cfg->deadline_ms : DEFAULT_MS;
    ni->gone = cfg->gone;
    ni->gone_ctx = cfg->gone_ctx;
    ni->next_seq = 1;
    atomic_init(&ni->aborted, 0);
    atomic_init(&ni->revoked, 0);
    atomic_init(&ni->stop, 0);
    atomic_init(&ni->poisoned, 0);
    atomic_init(&ni->step, -1);
    atomic_init(&ni->seen_done, 0);
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

static int begin_shrink(void **inst, const tt_coll_cfg_t *cfg, char *err, size_t errlen);

/* Why a fresh communicator when a shrink was announced but there is
 * nothing to shrink: ranks are in that state together (a drain during the
 * PS steps after a regroup, before anyone's communicator was ready), and
 * then all of them build one afresh, which works; a lone rank in it
 * leaves the others in their shrink until its init fails and the job
 * regroups. */
static void log_no_parent(const tt_coll_cfg_t *cfg) {
    TT_WARN(SUBSYS,
            "gen=%llu rank %d/%d: announced as a shrink of generation %llu, but this rank holds "
            "no healthy communicator of it: building a fresh one",
            (unsigned long long)cfg->generation, cfg->rank, cfg->world,
            (unsigned long long)cfg->shrink->of);
}

int tt_nccl_inst_begin(void **inst, const tt_coll_cfg_t *cfg, char *err, size_t errlen) {
    int shrink = cfg->shrink != NULL && cfg->shrink->of != 0;
    if (shrink && cfg->parent != NULL)
        return begin_shrink(inst, cfg, err, errlen);
    if (shrink)
        log_no_parent(cfg);
    tt_coll_nccl_parent_free(cfg->parent); /* only a shrink has a use for one */
    ncclUniqueId id;
    int rc = tt_nccl_have_device(err, errlen);
    if (rc == TT_OK)
        rc = tt_nccl_id_relay(cfg, &id, err, errlen);
    if (rc != TT_OK)
        return rc;
    nccl_inst_t *ni = inst_alloc(cfg);
    if (ni == NULL)
        return TT_ENOMEM;
    TT_CHECK_GOTO(cuda_setup(ni), rc, fail);
    TT_CHECK_GOTO(comm_start(ni, &id), rc, fail);
    *inst = ni;
    return TT_OK;
fail:
    snprintf(err, errlen, "%s", ni->err);
    tt_nccl_inst_free(ni);
    return rc;
}

int tt_nccl_inst_finish(void *inst) {
    nccl_inst_t *ni = inst;
    if (ni->settled)
        return atomic_load(&ni->poisoned);
    int rc = atomic_load(&ni->poisoned);
    if (rc == TT_OK)
        rc = comm_settle(ni, ni->parent != NULL ? "ncclCommShrink" : "ncclCommInitRankConfig");
    tt_coll_nccl_parent_free(ni->parent); /* settled or given up: its part is over */
    ni->parent = NULL;
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

/* ---- shrink ---- */

/* A parent is aborted, never finalized: a finalize could wait for the
 * rank that left. */
void tt_coll_nccl_parent_free(void *parent) {
    nccl_inst_t *p = parent;
    if (p == NULL)
        return;
    int expected = 0;
    atomic_compare_exchange_strong(&p->poisoned, &expected, TT_ECLOSED);
    tt_nccl_inst_free(p);
}

/* From here on the old generation's instance is only the source of the
 * new one: its watchdog goes, since nothing runs on it any more and a
 * verdict about the peer that left must neither abort it under the
 * shrink nor be reported. Where NCCL revokes, the communicator is revoked
 * here unless that already happened (the generation change, the
 * watchdog): a collective still in flight on the rank that left would
 * otherwise be waited for until its deadline, and a revoked communicator
 * is fit whatever cut it short (the step is redone on the next
 * generation). An abort still running is waited for, since it may end in
 * either. */
void *tt_nccl_inst_take_parent(void *inst) {
    nccl_inst_t *ni = inst;
    const char *why = NULL;
    if (ni->wd != NULL && TT_NCCL_HAS_REVOKE)
        (void)tt_nccl_wd_fail(ni->wd, TT_ECLOSED, "revoked: the next generation shrinks it",
                              tt_clock_mono_ms());
    tt_wd_state_t st = settle_abort(ni);
    if (!ni->settled)
        why = "its communicator was never built";
    else if (atomic_load(&ni->aborted) || st == TT_WD_ABORTING || st == TT_WD_HUNG)
        why = "it was aborted";
    else if (atomic_load(&ni->revoked))
        why = NULL;
    else if (st != TT_WD_RUNNING || atomic_load(&ni->poisoned) < 0 ||
             tt_coll_nccl_wait(ni) != TT_OK)
        why = "it failed";
    if (why != NULL) {
        TT_INFO(SUBSYS, "gen=%llu rank %d/%d: communicator not kept for a shrink: %s",
                (unsigned long long)ni->generation, ni->rank, ni->world, why);
        tt_nccl_inst_free(ni);
        return NULL;
    }
    tt_nccl_wd_destroy(&ni->wd);
    return ni;
}

/* Checks that the announced shrink turns the parent's (rank, world) into
 * this generation's; an excluded rank or a mismatch is refused before any
 * NCCL call, so no survivor waits on a rank that will not shrink. */
static int shrink_check(const nccl_inst_t *old, const tt_coll_cfg_t *cfg, int *sorted, char *err,
                        size_t errlen) {
    const tt_coll_shrink_t *s = cfg->shrink;
    int new_rank = -1, new_world = 0, rc = TT_EINVAL;
    if (s->n >= 1 && s->n <= TT_COLL_SHRINK_MAX)
        rc = tt_nccl_shrink_plan(old->rank, old->world, s->exclude, s->n, sorted, &new_rank,
                                 &new_world);
    if (rc == TT_OK &&
        (old->generation != s->of || new_rank != cfg->rank || new_world != cfg->world))
        rc = TT_EMEMBERSHIP;
    if (rc != TT_OK)
        snprintf(err, errlen,
                 "nccl: generation %llu (rank %d/%d) is announced as generation %llu minus %d "
                 "rank(s), which this rank (%d/%d of generation %llu) cannot shrink to: %s",
                 (unsigned long long)cfg->generation, cfg->rank, cfg->world,
                 (unsigned long long)s->of, s->n, old->rank, old->world,
                 (unsigned long long)old->generation,
                 rc == TT_EINVAL ? "bad exclude list" : "the ranks do not match");
    return rc;
}

/* ncclCommShrink of the parent (NCCL_SHRINK_ABORT: whatever the parent
 * still had is terminated first; the ranks that left take no part),
 * non-blocking: `finish` settles it like an init. */
static int shrink_start(nccl_inst_t *ni, int *sorted, int n) {
    nccl_inst_t *old = ni->parent;
    int rc = tt_nccl_comm_lock(old);
    if (rc != TT_OK)
        return tt_nccl_set_err(ni, TT_ECLOSED, "ncclCommShrink: the old communicator was aborted");
    ncclConfig_t conf = NCCL_CONFIG_INITIALIZER;
    conf.blocking = 0;
    ncclResult_t r = ncclCommShrink(old->comm, sorted, n, &ni->comm, &conf, NCCL_SHRINK_ABORT);
    tt_nccl_comm_unlock(old);
    if (r != ncclSuccess && r != ncclInProgress)
        return tt_nccl_set_err(ni, TT_ENCCL, "ncclCommShrink: %s", ncclGetErrorString(r));
    return TT_OK;
}

/* A shrink runs as a job of the parent, and NCCL writes the child's
 * handle only as the job ends (it is NULL until then): its progress is
 * the parent's asynchronous state, not the child's. Nothing else uses the
 * parent now (take_parent removed its watchdog). */
static int shrink_wait(nccl_inst_t *ni, int ms) {
    nccl_inst_t *p = ni->parent;
    uint64_t end = tt_clock_mono_ms() + (uint64_t)ms;
    ncclResult_t r = ncclInProgress;
    while (r == ncclInProgress) {
        if (atomic_load(&ni->stop) || outdated(ni))
            return tt_nccl_set_err(ni, TT_ECLOSED,
                                   "ncclCommShrink: given up: the generation ended");
        if (tt_clock_mono_ms() >= end)
            return tt_nccl_set_err(ni, TT_ETIMEDOUT,
                                   "ncclCommShrink: still in progress after %d ms", ms);
        tt_clock_sleep_us(100);
        if (tt_nccl_comm_lock(p) != TT_OK)
            return tt_nccl_set_err(ni, TT_ECLOSED,
                                   "ncclCommShrink: the old communicator was aborted");
        r = async_state(p->comm);
        tt_nccl_comm_unlock(p);
    }
    ncclComm_t child = __atomic_load_n(&ni->comm, __ATOMIC_ACQUIRE);
    if (r != ncclSuccess)
        return tt_nccl_set_err(ni, TT_ENCCL, "ncclCommShrink: %s", ncclGetErrorString(r));
    if (child == NULL)
        return tt_nccl_set_err(ni, TT_ENCCL, "ncclCommShrink ended without a communicator");
    return TT_OK;
}

/* The first half of a shrunk instance; owns cfg->parent from the call. */
static int begin_shrink(void **inst, const tt_coll_cfg_t *cfg, char *err, size_t errlen) {
    nccl_inst_t *old = cfg->parent;
    int sorted[TT_COLL_SHRINK_MAX];
    int rc = shrink_check(old, cfg, sorted, err, errlen);
    nccl_inst_t *ni = NULL;
    if (rc == TT_OK && (ni = inst_alloc(cfg)) == NULL)
        rc = TT_ENOMEM;
    if (rc != TT_OK) {
        tt_coll_nccl_parent_free(old);
        return rc;
    }
    ni->parent = old;
    TT_CHECK_GOTO(cuda_setup(ni), rc, fail);
    TT_CHECK_GOTO(shrink_start(ni, sorted, cfg->shrink->n), rc, fail);
    TT_INFO(SUBSYS, "gen=%llu rank %d/%d: shrinking the communicator of gen %llu by %d rank(s)",
            (unsigned long long)cfg->generation, cfg->rank, cfg->world,
            (unsigned long long)old->generation, cfg->shrink->n);
    *inst = ni;
    return TT_OK;
fail:
    snprintf(err, errlen, "%s", ni->err);
    tt_nccl_inst_free(ni);
    return rc;
}
