/* Unit tests of ckpt_book (server/coordinator): request numbering, the
 * timer schedule's rules (not running, outstanding request, every_ms 0,
 * base moved by fire and commit, not by an on-demand request), the
 * deadline the daemon arms, idempotent commits, served never going back or
 * past requested, keep trimming, export/import, failed attempts counted
 * once per checkpoint whoever reports them. Time is the injected clock
 * of every call. */
#include "ckpt_book.h"
#include "tt_cunit.h"
#include "tt_status.h"

#include <stdio.h>
#include <string.h>

static tt_ckpt_rec_t rec(const char *id, uint64_t step) {
    tt_ckpt_rec_t r = {.step = step,
                       .bytes = 1000 + step,
                       .created_unix_ms = 1700000000000ull + step,
                       .duration_ms = 7,
                       .committed_unix_ms = 1700000000500ull + step};
    snprintf(r.id, sizeof(r.id), "%s", id);
    snprintf(r.dir, sizeof(r.dir), "/ckpt/%s", id);
    return r;
}

static void ckpt_book_numbers_requests(void) {
    tt_ckpt_book_t b;
    tt_ckpt_book_init(&b, 100);
    CU_ASSERT_EQUAL(b.requested, 0);
    CU_ASSERT_EQUAL(b.served, 0);
    CU_ASSERT_EQUAL(tt_ckpt_book_request(&b, 200), 1);
    CU_ASSERT_EQUAL(tt_ckpt_book_request(&b, 300), 2);
    CU_ASSERT_EQUAL(b.base_ms, 100); /* on-demand requests leave the timer alone */
    /* The timer shares the numbering: the next request is 4. */
    tt_ckpt_rec_t r = rec("step-1", 1);
    CU_ASSERT_EQUAL(tt_ckpt_book_commit(&b, &r, 2, 3, 400), TT_OK);
    CU_ASSERT_EQUAL(tt_ckpt_book_timer(&b, 1400, 1000, 1), 1);
    CU_ASSERT_EQUAL(b.requested, 3);
    CU_ASSERT_EQUAL(tt_ckpt_book_request(&b, 1500), 4);
    tt_ckpt_book_free(&b);
    CU_ASSERT_PTR_NULL(b.recs);
    tt_ckpt_book_free(NULL);
}

static void ckpt_book_timer_needs_every_running_and_nothing_outstanding(void) {
    tt_ckpt_book_t b;
    tt_ckpt_book_init(&b, 1000);
    CU_ASSERT_EQUAL(tt_ckpt_book_timer(&b, 1000000, 0, 1), 0); /* every_ms 0: off */
    CU_ASSERT_EQUAL(tt_ckpt_book_timer(&b, 1999, 1000, 1), 0); /* not due yet */
    CU_ASSERT_EQUAL(tt_ckpt_book_timer(&b, 5000, 1000, 0), 0); /* job not running */
    CU_ASSERT_EQUAL(b.requested, 0);
    CU_ASSERT_EQUAL(tt_ckpt_book_timer(&b, 2000, 1000, 1), 1);
    CU_ASSERT_EQUAL(b.requested, 1);
    CU_ASSERT_EQUAL(b.base_ms, 2000);
    /* Request 1 is outstanding: no second one however long it takes. */
    CU_ASSERT_EQUAL(tt_ckpt_book_timer(&b, 3000, 1000, 1), 0);
    CU_ASSERT_EQUAL(tt_ckpt_book_timer(&b, 60000, 1000, 1), 0);
    CU_ASSERT_EQUAL(b.requested, 1);
    /* The commit serves it and restarts the period from the commit. */
    tt_ckpt_rec_t r = rec("step-10", 10);
    CU_ASSERT_EQUAL(tt_ckpt_book_commit(&b, &r, 1, 3, 61000), TT_OK);
    CU_ASSERT_EQUAL(b.served, 1);
    CU_ASSERT_EQUAL(tt_ckpt_book_timer(&b, 61999, 1000, 1), 0);
    CU_ASSERT_EQUAL(tt_ckpt_book_timer(&b, 62000, 1000, 1), 1);
    CU_ASSERT_EQUAL(b.requested, 2);
    /* An on-demand request outstanding blocks the timer too. */
    tt_ckpt_book_t d;
    tt_ckpt_book_init(&d, 0);
    tt_ckpt_book_request(&d, 10);
    CU_ASSERT_EQUAL(tt_ckpt_book_timer(&d, 5000, 1000, 1), 0);
    tt_ckpt_book_free(&d);
    tt_ckpt_book_free(&b);
}

static void ckpt_book_deadline_follows_the_rules(void) {
    tt_ckpt_book_t b;
    tt_ckpt_book_init(&b, 1000);
    CU_ASSERT_EQUAL(tt_ckpt_book_deadline(&b, 1000, 0), UINT64_MAX);
    CU_ASSERT_EQUAL(tt_ckpt_book_deadline(&b, 1200, 500), 1500);
    CU_ASSERT_EQUAL(tt_ckpt_book_deadline(&b, 9000, 500), 9000); /* overdue: now, not the past */
    CU_ASSERT_EQUAL(tt_ckpt_book_timer(&b, 9000, 500, 1), 1);
    CU_ASSERT_EQUAL(tt_ckpt_book_deadline(&b, 9000, 500), UINT64_MAX); /* outstanding */
    tt_ckpt_rec_t r = rec("a", 1);
    CU_ASSERT_EQUAL(tt_ckpt_book_commit(&b, &r, 1, 1, 9300), TT_OK);
    CU_ASSERT_EQUAL(tt_ckpt_book_deadline(&b, 9300, 500), 9800);
    tt_ckpt_book_free(&b);
}

static void ckpt_book_commit_is_idempotent(void) {
    tt_ckpt_book_t b;
    tt_ckpt_book_init(&b, 0);
    tt_ckpt_book_request(&b, 0);
    tt_ckpt_book_request(&b, 0);
    tt_ckpt_rec_t r = rec("step-5", 5);
    CU_ASSERT_EQUAL(tt_ckpt_book_commit(&b, &r, 1, 3, 100), TT_OK);
    tt_ckpt_rec_t again = rec("step-5", 6); /* same id: a retry, whatever else it says */
    CU_ASSERT_EQUAL(tt_ckpt_book_commit(&b, &again, 2, 3, 200), TT_EEXIST);
    CU_ASSERT_EQUAL(b.n, 1);
    CU_ASSERT_EQUAL(b.served, 1);
    CU_ASSERT_EQUAL(b.base_ms, 100);
    const tt_ckpt_rec_t *f = tt_ckpt_book_find(&b, "step-5");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(f->step, 5);
    CU_ASSERT_STRING_EQUAL(f->dir, "/ckpt/step-5");
    CU_ASSERT_PTR_NULL(tt_ckpt_book_find(&b, "step-6"));
    tt_ckpt_rec_t empty = rec("", 1);
    CU_ASSERT_EQUAL(tt_ckpt_book_commit(&b, &empty, 2, 3, 300), TT_EINVAL);
    tt_ckpt_rec_t nodir = rec("x", 1);
    nodir.dir[0] = '\0';
    CU_ASSERT_EQUAL(tt_ckpt_book_commit(&b, &nodir, 2, 3, 300), TT_EINVAL);
    CU_ASSERT_EQUAL(b.n, 1);
    tt_ckpt_book_free(&b);
}

static void ckpt_book_served_only_grows_and_never_passes_requested(void) {
    tt_ckpt_book_t b;
    tt_ckpt_book_init(&b, 0);
    for (int i = 0; i < 3; i++)
        tt_ckpt_book_request(&b, 0);
    tt_ckpt_rec_t a = rec("a", 1), c = rec("c", 3), s = rec("s", 4), z = rec("z", 9);
    CU_ASSERT_EQUAL(tt_ckpt_book_commit(&b, &c, 3, 10, 0), TT_OK);
    CU_ASSERT_EQUAL(b.served, 3);
    CU_ASSERT_EQUAL(tt_ckpt_book_commit(&b, &a, 2, 10, 0), TT_OK); /* a late, older one */
    CU_ASSERT_EQUAL(b.served, 3);
    CU_ASSERT_EQUAL(tt_ckpt_book_commit(&b, &s, 0, 10, 0), TT_OK); /* step schedule */
    CU_ASSERT_EQUAL(b.served, 3);
    /* Request 9 was never made (state lost): served stops at requested. */
    CU_ASSERT_EQUAL(tt_ckpt_book_commit(&b, &z, 9, 10, 0), TT_OK);
    CU_ASSERT_EQUAL(b.served, 3);
    CU_ASSERT_EQUAL(b.requested, 3);
    CU_ASSERT_EQUAL(tt_ckpt_book_timer(&b, 100000, 10, 1), 1); /* not stuck */
    tt_ckpt_book_free(&b);
}

static void ckpt_book_keeps_the_newest(void) {
    tt_ckpt_book_t b;
    tt_ckpt_book_init(&b, 0);
    CU_ASSERT_PTR_NULL(tt_ckpt_book_newest(&b));
    char id[16];
    for (int i = 1; i <= 5; i++) {
        snprintf(id, sizeof(id), "step-%d", i);
        tt_ckpt_rec_t r = rec(id, (uint64_t)i);
        CU_ASSERT_EQUAL(tt_ckpt_book_commit(&b, &r, 0, 3, 0), TT_OK);
    }
    CU_ASSERT_EQUAL(b.n, 3);
    CU_ASSERT_STRING_EQUAL(b.recs[0].id, "step-3"); /* oldest first */
    CU_ASSERT_STRING_EQUAL(b.recs[2].id, "step-5");
    CU_ASSERT_STRING_EQUAL(tt_ckpt_book_newest(&b)->id, "step-5");
    CU_ASSERT_PTR_NULL(tt_ckpt_book_find(&b, "step-2"));
    /* keep shrinks: the next commit trims to it; 0 counts as 1. */
    tt_ckpt_rec_t r6 = rec("step-6", 6), r7 = rec("step-7", 7);
    CU_ASSERT_EQUAL(tt_ckpt_book_commit(&b, &r6, 0, 2, 0), TT_OK);
    CU_ASSERT_EQUAL(b.n, 2);
    CU_ASSERT_STRING_EQUAL(b.recs[0].id, "step-5");
    CU_ASSERT_EQUAL(tt_ckpt_book_commit(&b, &r7, 0, 0, 0), TT_OK);
    CU_ASSERT_EQUAL(b.n, 1);
    CU_ASSERT_STRING_EQUAL(b.recs[0].id, "step-7");
    /* A huge keep is bounded: the state file and replies stay small. */
    for (unsigned i = 0; i < TT_CKPT_BOOK_MAX_RECORDS + 10; i++) {
        snprintf(id, sizeof(id), "many-%u", i);
        tt_ckpt_rec_t r = rec(id, 100 + i);
        CU_ASSERT_EQUAL_FATAL(tt_ckpt_book_commit(&b, &r, 0, 1000000, 0), TT_OK);
    }
    CU_ASSERT_EQUAL(b.n, TT_CKPT_BOOK_MAX_RECORDS);
    CU_ASSERT_STRING_EQUAL(b.recs[0].id, "many-10");
    tt_ckpt_book_free(&b);
}

static void ckpt_book_export_import_round_trip(void) {
    tt_ckpt_book_t b, c;
    tt_ckpt_book_init(&b, 0);
    tt_ckpt_book_init(&c, 0);
    for (int i = 0; i < 4; i++)
        tt_ckpt_book_request(&b, 0);
    tt_ckpt_rec_t r1 = rec("step-10", 10), r2 = rec("step-20", 20);
    tt_ckpt_book_commit(&b, &r1, 2, 5, 0);
    tt_ckpt_book_commit(&b, &r2, 3, 5, 0);
    tt_ckpt_book_saved_t s;
    tt_ckpt_book_export(&b, &s);
    CU_ASSERT_EQUAL(s.requested, 4);
    CU_ASSERT_EQUAL(s.served, 3);
    CU_ASSERT_EQUAL_FATAL(s.n, 2);
    CU_ASSERT_EQUAL(tt_ckpt_book_import(&c, &s, 7777), TT_OK);
    CU_ASSERT_EQUAL(c.requested, 4);
    CU_ASSERT_EQUAL(c.served, 3);
    CU_ASSERT_EQUAL(c.base_ms, 7777); /* the timer counts from the restore */
    CU_ASSERT_EQUAL_FATAL(c.n, 2);
    CU_ASSERT_EQUAL(memcmp(c.recs, b.recs, 2 * sizeof(*c.recs)), 0);
    CU_ASSERT_PTR_NOT_EQUAL(c.recs, b.recs); /* a copy */
    /* Inconsistent saved books are refused and leave an empty book. */
    tt_ckpt_rec_t dup[2] = {rec("x", 1), rec("x", 2)};
    tt_ckpt_book_saved_t bad = {.requested = 1, .served = 2, .n = 0};
    CU_ASSERT_EQUAL(tt_ckpt_book_import(&c, &bad, 0), TT_ECORRUPT);
    CU_ASSERT_EQUAL(c.n, 0);
    CU_ASSERT_EQUAL(c.requested, 0);
    bad = (tt_ckpt_book_saved_t){.requested = 2, .served = 2, .n = 2, .recs = dup};
    CU_ASSERT_EQUAL(tt_ckpt_book_import(&c, &bad, 0), TT_ECORRUPT);
    dup[1] = rec("", 2);
    CU_ASSERT_EQUAL(tt_ckpt_book_import(&c, &bad, 0), TT_ECORRUPT);
    tt_ckpt_book_free(&c);
    tt_ckpt_book_free(&b);
}

static tt_ckpt_fail_t fail(const char *id, const char *worker, uint64_t request,
                           const char *reason) {
    tt_ckpt_fail_t f = {.step = 40, .request = request, .unix_ms = 1700000001000ull};
    snprintf(f.id, sizeof(f.id), "%s", id);
    snprintf(f.worker, sizeof(f.worker), "%s", worker);
    snprintf(f.reason, sizeof(f.reason), "%s", reason);
    return f;
}

static void ckpt_book_counts_each_failed_attempt_once(void) {
    tt_ckpt_book_t b;
    tt_ckpt_book_init(&b, 0);
    tt_ckpt_fail_t f = fail("step-40", "w1", 0, "No space left on device");
    CU_ASSERT_EQUAL(tt_ckpt_book_failed(&b, &f), 1);
    /* rank 0 reports the same attempt with the request it served: counted
     * once, the first reason stays, the request is the one rank 0 knew */
    f = fail("step-40", "w0", 3, "Input/output error");
    CU_ASSERT_EQUAL(tt_ckpt_book_failed(&b, &f), 0);
    CU_ASSERT_EQUAL(b.failures, 1);
    CU_ASSERT_EQUAL(b.failures_since_commit, 1);
    CU_ASSERT_STRING_EQUAL(b.last_fail.worker, "w1");
    CU_ASSERT_STRING_EQUAL(b.last_fail.reason, "No space left on device");
    CU_ASSERT_EQUAL(b.last_fail.request, 3);
    f = fail("step-40", "w2", 1, "x");
    CU_ASSERT_EQUAL(tt_ckpt_book_failed(&b, &f), 0);
    CU_ASSERT_EQUAL(b.last_fail.request, 3);
    f = fail("step-56", "w0", 3, "Not a directory");
    CU_ASSERT_EQUAL(tt_ckpt_book_failed(&b, &f), 1);
    CU_ASSERT_EQUAL(b.failures, 2);
    CU_ASSERT_STRING_EQUAL(b.last_fail.id, "step-56");
    /* a commit ends the streak, not the history */
    tt_ckpt_rec_t r = rec("step-72", 72);
    CU_ASSERT_EQUAL(tt_ckpt_book_commit(&b, &r, 3, 3, 10), TT_OK);
    CU_ASSERT_EQUAL(b.failures_since_commit, 0);
    CU_ASSERT_EQUAL(b.failures, 2);
    CU_ASSERT_STRING_EQUAL(b.last_fail.id, "step-56");
    f = fail("", "w0", 0, "x");
    CU_ASSERT_EQUAL(tt_ckpt_book_failed(&b, &f), TT_EINVAL);
    CU_ASSERT_EQUAL(b.failures, 2);
    tt_ckpt_book_free(&b);
}

static const tt_cunit_test_t tests[] = {
    {"ckpt_book_counts_each_failed_attempt_once", ckpt_book_counts_each_failed_attempt_once},
    {"ckpt_book_numbers_requests", ckpt_book_numbers_requests},
    {"ckpt_book_timer_needs_every_running_and_nothing_outstanding",
     ckpt_book_timer_needs_every_running_and_nothing_outstanding},
    {"ckpt_book_deadline_follows_the_rules", ckpt_book_deadline_follows_the_rules},
    {"ckpt_book_commit_is_idempotent", ckpt_book_commit_is_idempotent},
    {"ckpt_book_served_only_grows_and_never_passes_requested",
     ckpt_book_served_only_grows_and_never_passes_requested},
    {"ckpt_book_keeps_the_newest", ckpt_book_keeps_the_newest},
    {"ckpt_book_export_import_round_trip", ckpt_book_export_import_round_trip},
    {NULL, NULL},
};

TT_CUNIT_MAIN("ckpt_book", tests)
