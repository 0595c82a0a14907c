/* Unit tests of tt_nccl_watchdog's state machine: collectives retire in
 * order, a deadline, an asynchronous error or a failed probe each yield
 * one verdict (reported once, then every unfinished collective fails and
 * new ones are refused), and an abort that overruns its own deadline is
 * flagged once. Time is injected there; the last tests run the real
 * threads against an abort that takes its time or never returns, since
 * teardown during an abort is where a hang would hide. */
#include "tt_clock.h"
#include "tt_cunit.h"
#include "tt_nccl_watchdog.h"
#include "tt_status.h"

#include <stdatomic.h>
#include <string.h>

typedef struct {
    tt_wd_probe_t st[16]; /* by seq */
    int async_rc;
    int reports, report_status;
    uint64_t report_seq;
    char report_why[256];
} fake_t;

static tt_wd_probe_t fake_probe(void *ctx, uint64_t seq) {
    fake_t *f = ctx;
    return seq < 16 ? f->st[seq] : TT_WD_PENDING;
}

static int fake_async(void *ctx, char *why, size_t len) {
    fake_t *f = ctx;
    if (f->async_rc < 0)
        snprintf(why, len, "ncclRemoteError: peer rank 2 closed its connection");
    return f->async_rc;
}

static void fake_report(void *ctx, uint64_t seq, int status, const char *why) {
    fake_t *f = ctx;
    f->reports++;
    f->report_seq = seq;
    f->report_status = status;
    snprintf(f->report_why, sizeof(f->report_why), "%s", why);
}

static tt_nccl_wd_t *make(fake_t *f) {
    memset(f, 0, sizeof(*f));
    tt_nccl_wd_opts_t o = {.deadline_ms = 100,
                           .abort_deadline_ms = 50,
                           .ctx = f,
                           .probe = fake_probe,
                           .async_error = fake_async,
                           .report = fake_report};
    tt_nccl_wd_t *wd = NULL;
    CU_ASSERT_EQUAL_FATAL(tt_nccl_wd_create(&wd, &o), TT_OK);
    return wd;
}

static void nccl_wd_rejects_bad_options(void) {
    tt_nccl_wd_t *wd = NULL;
    tt_nccl_wd_opts_t o = {.deadline_ms = 0, .abort_deadline_ms = 10, .probe = fake_probe};
    CU_ASSERT_EQUAL(tt_nccl_wd_create(&wd, &o), TT_EINVAL);
    o.deadline_ms = 10;
    o.probe = NULL;
    CU_ASSERT_EQUAL(tt_nccl_wd_create(&wd, &o), TT_EINVAL);
    CU_ASSERT_PTR_NULL(wd);
    tt_nccl_wd_destroy(&wd); /* accepts NULL */
}

static void nccl_wd_retires_in_order(void) {
    fake_t f;
    tt_nccl_wd_t *wd = make(&f);
    for (uint64_t s = 1; s <= 3; s++)
        CU_ASSERT_EQUAL(tt_nccl_wd_track(wd, s, 0), TT_OK);
    f.st[1] = TT_WD_DONE;
    f.st[3] = TT_WD_DONE; /* done, but behind the pending #2 */
    CU_ASSERT_EQUAL(tt_nccl_wd_poll(wd, 10), 0);
    CU_ASSERT_EQUAL(tt_nccl_wd_inflight(wd), 2);
    CU_ASSERT_EQUAL(tt_nccl_wd_result(wd, 1), 1);
    CU_ASSERT_EQUAL(tt_nccl_wd_result(wd, 2), 0);
    CU_ASSERT_EQUAL(tt_nccl_wd_result(wd, 9), TT_EINVAL);
    f.st[2] = TT_WD_DONE;
    CU_ASSERT_EQUAL(tt_nccl_wd_poll(wd, 20), 0);
    CU_ASSERT_EQUAL(tt_nccl_wd_inflight(wd), 0);
    CU_ASSERT_EQUAL(tt_nccl_wd_result(wd, 3), 1);
    CU_ASSERT_EQUAL(f.reports, 0);
    tt_nccl_wd_destroy(&wd);
    CU_ASSERT_PTR_NULL(wd);
}

static void nccl_wd_track_rejects_reuse_and_overflow(void) {
    fake_t f;
    tt_nccl_wd_t *wd = make(&f);
    CU_ASSERT_EQUAL(tt_nccl_wd_track(wd, 5, 0), TT_OK);
    CU_ASSERT_EQUAL(tt_nccl_wd_track(wd, 5, 0), TT_EINVAL);
    CU_ASSERT_EQUAL(tt_nccl_wd_track(wd, 4, 0), TT_EINVAL);
    for (uint64_t s = 6; s < 5 + TT_NCCL_WD_MAX_INFLIGHT; s++)
        CU_ASSERT_EQUAL(tt_nccl_wd_track(wd, s, 0), TT_OK);
    CU_ASSERT_EQUAL(tt_nccl_wd_track(wd, 1000, 0), TT_EBUSY);
    tt_nccl_wd_destroy(&wd);
}

static void nccl_wd_deadline_expiry_aborts_once(void) {
    fake_t f;
    tt_nccl_wd_t *wd = make(&f);
    CU_ASSERT_EQUAL(tt_nccl_wd_track(wd, 1, 1000), TT_OK);
    CU_ASSERT_EQUAL(tt_nccl_wd_poll(wd, 1099), 0);
    CU_ASSERT_EQUAL(tt_nccl_wd_state(wd), TT_WD_RUNNING);
    CU_ASSERT_EQUAL(tt_nccl_wd_poll(wd, 1100), 1);
    CU_ASSERT_EQUAL(tt_nccl_wd_state(wd), TT_WD_ABORTING);
    CU_ASSERT_EQUAL(f.reports, 1);
    CU_ASSERT_EQUAL(f.report_seq, 1);
    CU_ASSERT_EQUAL(f.report_status, TT_ETIMEDOUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(f.report_why, "#1 has not completed within 100 ms"));
    CU_ASSERT_EQUAL(tt_nccl_wd_result(wd, 1), TT_ETIMEDOUT);
    CU_ASSERT_EQUAL(tt_nccl_wd_track(wd, 2, 1100), TT_ECLOSED);
    /* Still due until the abort begins; reported only once. */
    CU_ASSERT_EQUAL(tt_nccl_wd_poll(wd, 1200), 1);
    tt_nccl_wd_abort_begin(wd, 1200);
    CU_ASSERT_EQUAL(tt_nccl_wd_poll(wd, 1201), 0);
    CU_ASSERT_EQUAL(f.reports, 1);
    tt_nccl_wd_abort_end(wd);
    CU_ASSERT_EQUAL(tt_nccl_wd_state(wd), TT_WD_ABORTED);
    CU_ASSERT_EQUAL(tt_nccl_wd_abort_overdue(wd, 99999), 0);
    tt_nccl_wd_destroy(&wd);
}

static void nccl_wd_async_error_aborts(void) {
    fake_t f;
    tt_nccl_wd_t *wd = make(&f);
    CU_ASSERT_EQUAL(tt_nccl_wd_track(wd, 7, 0), TT_OK);
    CU_ASSERT_EQUAL(tt_nccl_wd_poll(wd, 1), 0);
    f.async_rc = TT_ENCCL;
    CU_ASSERT_EQUAL(tt_nccl_wd_poll(wd, 2), 1);
    CU_ASSERT_EQUAL(f.report_status, TT_ENCCL);
    CU_ASSERT_EQUAL(f.report_seq, 7);
    CU_ASSERT_PTR_NOT_NULL(strstr(f.report_why, "peer rank 2"));
    char why[256];
    tt_nccl_wd_why(wd, why, sizeof(why));
    CU_ASSERT_STRING_EQUAL(why, f.report_why);
    CU_ASSERT_EQUAL(tt_nccl_wd_result(wd, 7), TT_ENCCL);
    tt_nccl_wd_destroy(&wd);
}

static void nccl_wd_failed_probe_aborts(void) {
    fake_t f;
    tt_nccl_wd_t *wd = make(&f);
    CU_ASSERT_EQUAL(tt_nccl_wd_track(wd, 1, 0), TT_OK);
    f.st[1] = TT_WD_FAILED;
    CU_ASSERT_EQUAL(tt_nccl_wd_poll(wd, 1), 1);
    CU_ASSERT_EQUAL(f.report_status, TT_ECUDA);
    tt_nccl_wd_destroy(&wd);
}

static void nccl_wd_external_fail_decides_once(void) {
    fake_t f;
    tt_nccl_wd_t *wd = make(&f);
    CU_ASSERT_EQUAL(tt_nccl_wd_track(wd, 3, 0), TT_OK);
    CU_ASSERT_EQUAL(tt_nccl_wd_fail(wd, TT_EMEMBERSHIP, "rank 1 left", 5), 1);
    CU_ASSERT_EQUAL(tt_nccl_wd_fail(wd, TT_ENCCL, "later", 6), 0);
    CU_ASSERT_EQUAL(f.reports, 1);
    CU_ASSERT_EQUAL(f.report_status, TT_EMEMBERSHIP);
    CU_ASSERT_EQUAL(tt_nccl_wd_result(wd, 3), TT_EMEMBERSHIP);
    CU_ASSERT_EQUAL(tt_nccl_wd_poll(wd, 7), 1); /* the thread must now abort */
    tt_nccl_wd_destroy(&wd);
}

static void nccl_wd_abort_overdue_flags_hang_once(void) {
    fake_t f;
    tt_nccl_wd_t *wd = make(&f);
    CU_ASSERT_EQUAL(tt_nccl_wd_abort_overdue(wd, 10), 0); /* no abort yet */
    CU_ASSERT_EQUAL(tt_nccl_wd_fail(wd, TT_ENCCL, "x", 0), 1);
    CU_ASSERT_EQUAL(tt_nccl_wd_abort_overdue(wd, 10), 0); /* decided, not begun */
    tt_nccl_wd_abort_begin(wd, 200);
    CU_ASSERT_EQUAL(tt_nccl_wd_abort_overdue(wd, 249), 0);
    CU_ASSERT_EQUAL(tt_nccl_wd_abort_overdue(wd, 250), 1);
    CU_ASSERT_EQUAL(tt_nccl_wd_state(wd), TT_WD_HUNG);
    CU_ASSERT_EQUAL(tt_nccl_wd_abort_overdue(wd, 300), 0);
    tt_nccl_wd_destroy(&wd);
}

static void nccl_wd_threads_start_and_stop(void) {
    fake_t f;
    tt_nccl_wd_t *wd = make(&f);
    CU_ASSERT_EQUAL(tt_nccl_wd_start(wd), TT_OK);
    CU_ASSERT_EQUAL(tt_nccl_wd_state(wd), TT_WD_RUNNING);
    tt_nccl_wd_destroy(&wd); /* joins both threads promptly */
    CU_ASSERT_PTR_NULL(wd);
}

static void nccl_wd_track_retires_when_full(void) {
    fake_t f;
    tt_nccl_wd_t *wd = make(&f);
    for (uint64_t s = 1; s <= TT_NCCL_WD_MAX_INFLIGHT; s++)
        CU_ASSERT_EQUAL(tt_nccl_wd_track(wd, s, 0), TT_OK);
    for (int s = 1; s <= 10; s++)
        f.st[s] = TT_WD_DONE; /* finished before the thread came round */
    CU_ASSERT_EQUAL(tt_nccl_wd_track(wd, TT_NCCL_WD_MAX_INFLIGHT + 1, 0), TT_OK);
    CU_ASSERT_EQUAL(tt_nccl_wd_inflight(wd), TT_NCCL_WD_MAX_INFLIGHT - 9);
    CU_ASSERT_EQUAL(tt_nccl_wd_result(wd, 10), 1);
    CU_ASSERT_EQUAL(f.reports, 0);
    tt_nccl_wd_destroy(&wd);
}

/* ---- with the threads ---- */

typedef struct {
    atomic_int in_abort, abort_done, release, hung;
    int hold_ms; /* the abort returns after this long, or on release when < 0 */
} slow_t;

static tt_wd_probe_t slow_probe(void *ctx, uint64_t seq) {
    (void)ctx, (void)seq;
    return TT_WD_PENDING;
}

static void slow_abort(void *ctx) {
    slow_t *s = ctx;
    atomic_store(&s->in_abort, 1);
    if (s->hold_ms >= 0)
        tt_clock_sleep_ms((uint64_t)s->hold_ms);
    while (s->hold_ms < 0 && !atomic_load(&s->release))
        tt_clock_sleep_ms(1);
    atomic_store(&s->abort_done, 1);
}

static void slow_hung(void *ctx, const char *why) {
    (void)why; /* the backend's handler would end the process here */
    atomic_store(&((slow_t *)ctx)->hung, 1);
}

static tt_nccl_wd_t *start_aborting(slow_t *s, int abort_deadline_ms) {
    tt_nccl_wd_opts_t o = {.deadline_ms = 1000,
                           .abort_deadline_ms = abort_deadline_ms,
                           .poll_ms = 2,
                           .ctx = s,
                           .probe = slow_probe,
                           .abort = slow_abort,
                           .abort_hung = slow_hung};
    tt_nccl_wd_t *wd = NULL;
    CU_ASSERT_EQUAL_FATAL(tt_nccl_wd_create(&wd, &o), TT_OK);
    CU_ASSERT_EQUAL_FATAL(tt_nccl_wd_start(wd), TT_OK);
    CU_ASSERT_EQUAL(tt_nccl_wd_fail(wd, TT_ENCCL, "a peer left", tt_clock_mono_ms()), 1);
    for (int i = 0; i < 2000 && !atomic_load(&s->in_abort); i++)
        tt_clock_sleep_ms(1);
    CU_ASSERT_EQUAL_FATAL(atomic_load(&s->in_abort), 1);
    return wd;
}

/* Torn down mid-abort: destroy returns only once the abort has, and the
 * object is freed, not leaked. */
static void nccl_wd_destroy_waits_for_a_running_abort(void) {
    slow_t s = {.hold_ms = 150};
    tt_nccl_wd_t *wd = start_aborting(&s, 5000);
    CU_ASSERT_EQUAL(tt_nccl_wd_destroy(&wd), 0);
    CU_ASSERT_EQUAL(atomic_load(&s.abort_done), 1);
    CU_ASSERT_EQUAL(atomic_load(&s.hung), 0);
    CU_ASSERT_PTR_NULL(wd);
}

/* An abort that never returns: the monitor still fires while destroy
 * waits (with a handler that returns, as TETHER_NCCL_ABORT_HANG=log),
 * and destroy says the object was left to the stuck thread. */
static void nccl_wd_destroy_leaves_a_hung_abort_to_its_monitor(void) {
    static slow_t s = {.hold_ms = -1}; /* the stuck thread outlives this test */
    static tt_nccl_wd_t *kept;         /* reachable: the leak is deliberate */
    tt_nccl_wd_t *wd = start_aborting(&s, 40);
    kept = wd;
    uint64_t t0 = tt_clock_mono_ms();
    CU_ASSERT_EQUAL(tt_nccl_wd_destroy(&wd), 1);
    CU_ASSERT_EQUAL(atomic_load(&s.hung), 1);
    CU_ASSERT(tt_clock_mono_ms() - t0 < 2000);
    CU_ASSERT_EQUAL(tt_nccl_wd_state(kept), TT_WD_HUNG);
    atomic_store(&s.release, 1); /* the thread finishes and ends on its own */
    for (int i = 0; i < 2000 && !atomic_load(&s.abort_done); i++)
        tt_clock_sleep_ms(1);
    CU_ASSERT_EQUAL(atomic_load(&s.abort_done), 1);
    tt_clock_sleep_ms(20);
}

static const tt_cunit_test_t tests[] = {
    {"nccl_wd_rejects_bad_options", nccl_wd_rejects_bad_options},
    {"nccl_wd_retires_in_order", nccl_wd_retires_in_order},
    {"nccl_wd_track_rejects_reuse_and_overflow", nccl_wd_track_rejects_reuse_and_overflow},
    {"nccl_wd_deadline_expiry_aborts_once", nccl_wd_deadline_expiry_aborts_once},
    {"nccl_wd_async_error_aborts", nccl_wd_async_error_aborts},
    {"nccl_wd_failed_probe_aborts", nccl_wd_failed_probe_aborts},
    {"nccl_wd_external_fail_decides_once", nccl_wd_external_fail_decides_once},
    {"nccl_wd_abort_overdue_flags_hang_once", nccl_wd_abort_overdue_flags_hang_once},
    {"nccl_wd_threads_start_and_stop", nccl_wd_threads_start_and_stop},
    {"nccl_wd_track_retires_when_full", nccl_wd_track_retires_when_full},
    {"nccl_wd_destroy_waits_for_a_running_abort", nccl_wd_destroy_waits_for_a_running_abort},
    {"nccl_wd_destroy_leaves_a_hung_abort_to_its_monitor",
     nccl_wd_destroy_leaves_a_hung_abort_to_its_monitor},
    {NULL, NULL},
};

TT_CUNIT_MAIN("nccl_watchdog", tests)
