/* tt_nccl_watchdog: deadline state machine plus the two threads that drive
 * it. Collectives on one stream complete in order, so the in-flight list is
 * a FIFO and a pass probes from the oldest until one is still pending: the
 * oldest unfinished collective carries the earliest deadline. The verdict
 * is taken once; afterwards every unfinished collective reports it and new
 * ones are refused, because an aborted communicator is never reused. */
#include "tt_nccl_watchdog.h"

#include "tt_clock.h"
#include "tt_log.h"
#include "tt_status.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SUBSYS "nccl"

struct tt_nccl_wd {
    tt_nccl_wd_opts_t o;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t seq[TT_NCCL_WD_MAX_INFLIGHT], due[TT_NCCL_WD_MAX_INFLIGHT];
    size_t head, count;
    uint64_t last_seq, done_upto; /* every seq <= done_upto finished */
    int has_seq;
    tt_wd_state_t state;
    int verdict;            /* negative status once decided */
    int abort_begun, stop;  /* abort called; threads must end */
    int closing;            /* destroy began: no abort may begin any more */
    uint64_t abort_started; /* ms */
    int threads;            /* started */
    pthread_t wd_thread, mon_thread;
    char why[512];
};

int tt_nccl_wd_create(tt_nccl_wd_t **out, const tt_nccl_wd_opts_t *opts) {
    if (out == NULL || opts == NULL || opts->deadline_ms <= 0 || opts->abort_deadline_ms <= 0 ||
        opts->probe == NULL || opts->poll_ms < 0)
        return TT_EINVAL;
    tt_nccl_wd_t *wd = calloc(1, sizeof(*wd));
    if (wd == NULL)
        return TT_ENOMEM;
    wd->o = *opts;
    if (wd->o.poll_ms == 0)
        wd->o.poll_ms = 5;
    pthread_mutex_init(&wd->mu, NULL);
    /* The naps are timed on the monotonic clock: a wall clock stepped
     * back would stall the deadlines and the hung-abort exit with it. */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&wd->cv, &ca);
    pthread_condattr_destroy(&ca);
    *out = wd;
    return TT_OK;
}

static int retire(tt_nccl_wd_t *wd, char *why, size_t len);

int tt_nccl_wd_track(tt_nccl_wd_t *wd, uint64_t seq, uint64_t now_ms) {
    int rc = TT_OK;
    char why[160];
    pthread_mutex_lock(&wd->mu);
    /* A burst of short collectives can outrun the thread's period: the
     * finished ones are retired here rather than the new one refused (a
     * failed probe is left for the next pass to judge). */
    if (wd->state == TT_WD_RUNNING && wd->count == TT_NCCL_WD_MAX_INFLIGHT)
        (void)retire(wd, why, sizeof(why));
    if (wd->state != TT_WD_RUNNING)
        rc = TT_ECLOSED;
    else if (wd->has_seq && seq <= wd->last_seq)
        rc = TT_EINVAL;
    else if (wd->count == TT_NCCL_WD_MAX_INFLIGHT)
        rc = TT_EBUSY;
    if (rc == TT_OK) {
        size_t i = (wd->head + wd->count) % TT_NCCL_WD_MAX_INFLIGHT;
        wd->seq[i] = seq;
        wd->due[i] = now_ms + (uint64_t)wd->o.deadline_ms;
        wd->count++;
        wd->last_seq = seq;
        wd->has_seq = 1;
    }
    pthread_mutex_unlock(&wd->mu);
    return rc;
}

/* Whether seq is still in the FIFO (caller holds the mutex). */
static int tracked(const tt_nccl_wd_t *wd, uint64_t seq) {
    for (size_t k = 0; k < wd->count; k++) {
        if (wd->seq[(wd->head + k) % TT_NCCL_WD_MAX_INFLIGHT] == seq)
            return 1;
    }
    return 0;
}

int tt_nccl_wd_result(tt_nccl_wd_t *wd, uint64_t seq) {
    pthread_mutex_lock(&wd->mu);
    int r;
    if (tracked(wd, seq))
        r = wd->state == TT_WD_RUNNING ? 0 : wd->verdict;
    else if (wd->has_seq && seq <= wd->last_seq)
        r = 1; /* retired */
    else
        r = TT_EINVAL; /* never tracked */
    pthread_mutex_unlock(&wd->mu);
    return r;
}

/* Takes the verdict (caller holds the mutex). 1 when this call took it. */
static int decide(tt_nccl_wd_t *wd, int status, const char *why) {
    if (wd->state != TT_WD_RUNNING)
        return 0;
    wd->state = TT_WD_ABORTING;
    wd->verdict = status;
    snprintf(wd->why, sizeof(wd->why), "%s", why);
    return 1;
}

/* Retires finished collectives from the front; a failed probe is a verdict. */
static int retire(tt_nccl_wd_t *wd, char *why, size_t len) {
    while (wd->count > 0) {
        uint64_t s = wd->seq[wd->head];
        tt_wd_probe_t p = wd->o.probe(wd->o.ctx, s);
        if (p == TT_WD_PENDING)
            return TT_OK;
        if (p == TT_WD_FAILED) {
            snprintf(why, len, "collective #%llu failed on the device", (unsigned long long)s);
            return TT_ECUDA;
        }
        wd->done_upto = s;
        wd->head = (wd->head + 1) % TT_NCCL_WD_MAX_INFLIGHT;
        wd->count--;
    }
    return TT_OK;
}

/* One pass under the mutex: the status of the verdict it reached (0: none). */
static int pass(tt_nccl_wd_t *wd, uint64_t now_ms, char *why, size_t len) {
    int rc = retire(wd, why, len);
    if (rc < 0)
        return rc;
    if (wd->o.async_error != NULL) {
        rc = wd->o.async_error(wd->o.ctx, why, len);
        if (rc < 0)
            return rc;
    }
    if (wd->count > 0 && now_ms >= wd->due[wd->head]) {
        snprintf(why, len, "collective #%llu has not completed within %d ms",
                 (unsigned long long)wd->seq[wd->head], wd->o.deadline_ms);
        return TT_ETIMEDOUT;
    }
    return TT_OK;
}

int tt_nccl_wd_poll(tt_nccl_wd_t *wd, uint64_t now_ms) {
    char why[512] = "";
    uint64_t oldest = 0;
    int took = 0, due;
    pthread_mutex_lock(&wd->mu);
    if (wd->state == TT_WD_RUNNING) {
        int rc = pass(wd, now_ms, why, sizeof(why));
        oldest = wd->count > 0 ? wd->seq[wd->head] : wd->last_seq;
        took = rc < 0 && decide(wd, rc, why);
    }
    due = wd->state == TT_WD_ABORTING && !wd->abort_begun;
    int verdict = wd->verdict;
    pthread_mutex_unlock(&wd->mu);
    if (took) {
        TT_ERROR(SUBSYS, "watchdog: %s (%s): aborting the communicator", why,
                 tt_status_name(verdict));
        if (wd->o.report != NULL)
            wd->o.report(wd->o.ctx, oldest, verdict, why);
    }
    return due;
}

int tt_nccl_wd_fail(tt_nccl_wd_t *wd, int status, const char *why, uint64_t now_ms) {
    (void)now_ms;
    pthread_mutex_lock(&wd->mu);
    uint64_t oldest = wd->count > 0 ? wd->seq[wd->head] : wd->last_seq;
    int took = decide(wd, status < 0 ? status : TT_EINTERNAL, why);
    pthread_mutex_unlock(&wd->mu);
    if (took) {
        pthread_cond_broadcast(&wd->cv);
        if (wd->o.report != NULL)
            wd->o.report(wd->o.ctx, oldest, status, why);
    }
    return took;
}

int tt_nccl_wd_abort_begin(tt_nccl_wd_t *wd, uint64_t now_ms) {
    pthread_mutex_lock(&wd->mu);
    int go = !wd->closing;
    if (go) {
        wd->abort_begun = 1;
        wd->abort_started = now_ms;
    }
    pthread_mutex_unlock(&wd->mu);
    return go;
}

void tt_nccl_wd_abort_end(tt_nccl_wd_t *wd) {
    pthread_mutex_lock(&wd->mu);
    if (wd->state == TT_WD_ABORTING)
        wd->state = TT_WD_ABORTED;
    pthread_mutex_unlock(&wd->mu);
}

int tt_nccl_wd_abort_overdue(tt_nccl_wd_t *wd, uint64_t now_ms) {
    int overdue = 0;
    pthread_mutex_lock(&wd->mu);
    if (wd->state == TT_WD_ABORTING && wd->abort_begun &&
        now_ms >= wd->abort_started + (uint64_t)wd->o.abort_deadline_ms) {
        wd->state = TT_WD_HUNG;
        overdue = 1;
    }
    pthread_mutex_unlock(&wd->mu);
    return overdue;
}

tt_wd_state_t tt_nccl_wd_state(tt_nccl_wd_t *wd) {
    pthread_mutex_lock(&wd->mu);
    tt_wd_state_t s = wd->state;
    pthread_mutex_unlock(&wd->mu);
    return s;
}

size_t tt_nccl_wd_inflight(tt_nccl_wd_t *wd) {
    pthread_mutex_lock(&wd->mu);
    size_t n = wd->count;
    pthread_mutex_unlock(&wd->mu);
    return n;
}

void tt_nccl_wd_why(tt_nccl_wd_t *wd, char *buf, size_t len) {
    pthread_mutex_lock(&wd->mu);
    snprintf(buf, len, "%s", wd->why);
    pthread_mutex_unlock(&wd->mu);
}

/* ---- threads ---- */

/* Sleeps up to poll_ms or until woken; returns 1 when the threads must end. */
static int nap(tt_nccl_wd_t *wd) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long ns = ts.tv_nsec + (long)wd->o.poll_ms * 1000000L;
    ts.tv_sec += ns / 1000000000L;
    ts.tv_nsec = ns % 1000000000L;
    pthread_mutex_lock(&wd->mu);
    if (!wd->stop)
        pthread_cond_timedwait(&wd->cv, &wd->mu, &ts);
    int stop = wd->stop;
    pthread_mutex_unlock(&wd->mu);
    return stop;
}

static void *wd_main(void *arg) {
    tt_nccl_wd_t *wd = arg;
    while (!nap(wd)) {
        if (tt_nccl_wd_poll(wd, tt_clock_mono_ms()) != 1)
            continue;
        if (!tt_nccl_wd_abort_begin(wd, tt_clock_mono_ms()))
            break; /* the owner tears down and aborts where it stands */
        if (wd->o.abort != NULL)
            wd->o.abort(wd->o.ctx);
        tt_nccl_wd_abort_end(wd);
        TT_WARN(SUBSYS, "watchdog: communicator aborted");
    }
    return NULL;
}

static void *mon_main(void *arg) {
    tt_nccl_wd_t *wd = arg;
    while (!nap(wd)) {
        if (!tt_nccl_wd_abort_overdue(wd, tt_clock_mono_ms()))
            continue;
        char cause[512], why[640];
        tt_nccl_wd_why(wd, cause, sizeof(cause));
        snprintf(why, sizeof(why),
                 "the abort (revoke or ncclCommAbort) has not returned within %d ms after: %s; the "
                 "device is wedged",
                 wd->o.abort_deadline_ms, cause);
        TT_ERROR(SUBSYS, "monitor: %s", why);
        if (wd->o.abort_hung != NULL)
            wd->o.abort_hung(wd->o.ctx, why);
    }
    return NULL;
}

int tt_nccl_wd_start(tt_nccl_wd_t *wd) {
    if (wd->threads)
        return TT_OK;
    if (pthread_create(&wd->wd_thread, NULL, wd_main, wd) != 0)
        return TT_ESYS;
    if (pthread_create(&wd->mon_thread, NULL, mon_main, wd) != 0) {
        pthread_mutex_lock(&wd->mu);
        wd->stop = 1;
        pthread_mutex_unlock(&wd->mu);
        pthread_cond_broadcast(&wd->cv);
        pthread_join(wd->wd_thread, NULL);
        return TT_ESYS;
    }
    wd->threads = 1;
    return TT_OK;
}

/* An abort that began is waited out with the monitor still watching it,
 * so a hung one still ends the process; none can begin after `closing`,
 * so the watchdog thread can then be joined. */
int tt_nccl_wd_destroy(tt_nccl_wd_t **wdp) {
    if (wdp == NULL || *wdp == NULL)
        return 0;
    tt_nccl_wd_t *wd = *wdp;
    *wdp = NULL;
    if (wd->threads) {
        pthread_mutex_lock(&wd->mu);
        wd->closing = 1;
        while (wd->state == TT_WD_ABORTING && wd->abort_begun) {
            pthread_mutex_unlock(&wd->mu);
            tt_clock_sleep_ms(1);
            pthread_mutex_lock(&wd->mu);
        }
        wd->stop = 1;
        int stuck = wd->state == TT_WD_HUNG;
        pthread_mutex_unlock(&wd->mu);
        pthread_cond_broadcast(&wd->cv);
        pthread_join(wd->mon_thread, NULL);
        if (stuck) {
            /* The watchdog thread is inside an abort that may never return
             * and still uses wd: leak it rather than free it under that. */
            pthread_detach(wd->wd_thread);
            return 1;
        }
        pthread_join(wd->wd_thread, NULL);
    }
    pthread_cond_destroy(&wd->cv);
    pthread_mutex_destroy(&wd->mu);
    free(wd);
    return 0;
}
