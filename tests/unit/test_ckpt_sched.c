/* Unit tests of tt_ckpt_sched: the checkpoint trigger/commit state machine
 * driven with an injected clock and scripted (agreed) reduce results. */
#include "tt_ckpt_sched.h"
#include "tt_cunit.h"

static tt_ckpt_sched_t make(uint64_t every_steps, uint64_t every_ms, uint64_t step) {
    tt_ckpt_sched_t s;
    tt_ckpt_sched_opts_t o = {every_steps, every_ms};
    tt_ckpt_sched_init(&s, &o, step, 1000);
    return s;
}

static int tick(tt_ckpt_sched_t *s, uint64_t step, uint32_t done, uint32_t failed) {
    tt_ckpt_tick_t t = {
        .step = step, .generation = 1, .writers = 2, .done = done, .failed = failed};
    return tt_ckpt_sched_boundary(s, &t, 5000 + step);
}

static void ckpt_sched_every_steps_starts_on_multiples(void) {
    tt_ckpt_sched_t s = make(5, 0, 0);
    for (uint64_t step = 1; step < 5; step++)
        CU_ASSERT_EQUAL(tick(&s, step, 0, 0), 0);
    CU_ASSERT_EQUAL(tick(&s, 5, 0, 0), TT_CKPT_ACT_START);
    CU_ASSERT_EQUAL(s.inflight, 5);
    CU_ASSERT_EQUAL(s.phase, TT_CKPT_PHASE_WRITING);
    CU_ASSERT_EQUAL(tick(&s, 6, 2, 0), TT_CKPT_ACT_COMMIT);
    CU_ASSERT_EQUAL(s.phase, TT_CKPT_PHASE_IDLE);
    CU_ASSERT_EQUAL(tick(&s, 10, 0, 0), TT_CKPT_ACT_START);
    CU_ASSERT_EQUAL(s.inflight, 10);
    CU_ASSERT_EQUAL(s.started, 2);
    CU_ASSERT_EQUAL(s.committed, 1);
}

static void ckpt_sched_commits_only_when_every_writer_reported(void) {
    tt_ckpt_sched_t s = make(5, 0, 0);
    CU_ASSERT_EQUAL(tick(&s, 5, 0, 0), TT_CKPT_ACT_START);
    CU_ASSERT_EQUAL(tick(&s, 6, 0, 0), 0);
    CU_ASSERT_EQUAL(tick(&s, 7, 1, 0), 0);
    CU_ASSERT_EQUAL(s.phase, TT_CKPT_PHASE_WRITING);
    CU_ASSERT_EQUAL(tick(&s, 8, 2, 0), TT_CKPT_ACT_COMMIT);
    CU_ASSERT_EQUAL(s.committed, 1);
}

static void ckpt_sched_defers_while_one_is_in_flight(void) {
    tt_ckpt_sched_t s = make(5, 0, 0);
    CU_ASSERT_EQUAL(tick(&s, 5, 0, 0), TT_CKPT_ACT_START);
    CU_ASSERT_EQUAL(tick(&s, 10, 1, 0), 0); /* due, but step 5's is still writing */
    CU_ASSERT_EQUAL(s.pending, 1);
    CU_ASSERT_EQUAL(s.inflight, 5);
    CU_ASSERT_EQUAL(tick(&s, 11, 2, 0), TT_CKPT_ACT_COMMIT | TT_CKPT_ACT_START);
    CU_ASSERT_EQUAL(s.inflight, 11);
    CU_ASSERT_EQUAL(s.pending, 0);
}

static void ckpt_sched_aborts_on_failure_or_new_generation(void) {
    tt_ckpt_sched_t s = make(5, 0, 0);
    CU_ASSERT_EQUAL(tick(&s, 5, 0, 0), TT_CKPT_ACT_START);
    CU_ASSERT_EQUAL(tick(&s, 6, 1, 1), TT_CKPT_ACT_ABORT | TT_CKPT_ACT_FAILED);
    CU_ASSERT_EQUAL(s.phase, TT_CKPT_PHASE_IDLE);
    CU_ASSERT_EQUAL(tick(&s, 10, 0, 0), TT_CKPT_ACT_START);
    tt_ckpt_tick_t t = {.step = 11, .generation = 2, .writers = 2, .done = 2};
    CU_ASSERT_EQUAL(tt_ckpt_sched_boundary(&s, &t, 0), TT_CKPT_ACT_ABORT);
    CU_ASSERT_EQUAL(s.aborted, 2);
    CU_ASSERT_EQUAL(s.committed, 0);
}

static void ckpt_sched_timer_follows_injected_clock(void) {
    tt_ckpt_sched_t s = make(0, 2000, 0); /* init at 1000 ms */
    CU_ASSERT_EQUAL(tt_ckpt_sched_needs_reduce(&s), 1);
    CU_ASSERT_EQUAL(tt_ckpt_sched_time_due(&s, 2999), 0);
    CU_ASSERT_EQUAL(tt_ckpt_sched_time_due(&s, 3000), 1);
    tt_ckpt_tick_t t = {.step = 3, .generation = 1, .time_due = 1};
    CU_ASSERT_EQUAL(tt_ckpt_sched_boundary(&s, &t, 3000), TT_CKPT_ACT_START);
    CU_ASSERT_EQUAL(s.last_ms, 3000);
    CU_ASSERT_EQUAL(tt_ckpt_sched_time_due(&s, 4999), 0);
    CU_ASSERT_EQUAL(tt_ckpt_sched_time_due(&s, 5000), 1);
    t = (tt_ckpt_tick_t){.step = 4, .generation = 1, .time_due = 0};
    CU_ASSERT_EQUAL(tt_ckpt_sched_boundary(&s, &t, 3100), 0);
}

static void ckpt_sched_never_repeats_the_resumed_step(void) {
    tt_ckpt_sched_t s = make(5, 0, 10);
    CU_ASSERT_EQUAL(tick(&s, 10, 0, 0), 0);
    CU_ASSERT_EQUAL(tick(&s, 15, 0, 0), TT_CKPT_ACT_START);
    CU_ASSERT_EQUAL(tick(&s, 15, 2, 0), TT_CKPT_ACT_COMMIT); /* same step: no second one */
}

static void ckpt_sched_request_starts_at_next_free_boundary(void) {
    tt_ckpt_sched_t s = make(0, 0, 0);
    CU_ASSERT_EQUAL(tt_ckpt_sched_needs_reduce(&s), 0);
    CU_ASSERT_EQUAL(tick(&s, 1, 0, 0), 0);
    tt_ckpt_sched_request(&s);
    CU_ASSERT_EQUAL(tick(&s, 2, 0, 0), TT_CKPT_ACT_START);
    CU_ASSERT_EQUAL(tt_ckpt_sched_needs_reduce(&s), 1);
    CU_ASSERT_EQUAL(tick(&s, 3, 0, 0), 0);
}

static void ckpt_sched_resolve_never_starts(void) {
    tt_ckpt_sched_t s = make(1, 0, 0);
    CU_ASSERT_EQUAL(tick(&s, 1, 0, 0), TT_CKPT_ACT_START);
    tt_ckpt_tick_t t = {.step = 2, .generation = 1, .writers = 2, .done = 1};
    CU_ASSERT_EQUAL(tt_ckpt_sched_resolve(&s, &t), 0);
    t.done = 2;
    CU_ASSERT_EQUAL(tt_ckpt_sched_resolve(&s, &t), TT_CKPT_ACT_COMMIT);
    CU_ASSERT_EQUAL(tt_ckpt_sched_resolve(&s, &t), 0); /* nothing in flight any more */
    CU_ASSERT_EQUAL(s.started, 1);
}

static void ckpt_sched_new_generation_aborts_locally_and_drops_deferred(void) {
    tt_ckpt_sched_t s = make(5, 0, 0);
    CU_ASSERT_EQUAL(tt_ckpt_sched_generation(&s, 1), 0); /* nothing in flight */
    CU_ASSERT_EQUAL(tick(&s, 5, 0, 0), TT_CKPT_ACT_START);
    CU_ASSERT_EQUAL(tick(&s, 10, 0, 0), 0); /* deferred behind step 5's */
    CU_ASSERT_EQUAL(s.pending, 1);
    CU_ASSERT_EQUAL(tt_ckpt_sched_generation(&s, 1), 0); /* same generation: keeps going */
    CU_ASSERT_EQUAL(tt_ckpt_sched_generation(&s, 2), TT_CKPT_ACT_ABORT);
    CU_ASSERT_EQUAL(s.phase, TT_CKPT_PHASE_IDLE);
    CU_ASSERT_EQUAL(s.pending, 0);
    CU_ASSERT_EQUAL(tt_ckpt_sched_needs_reduce(&s), 0); /* like a rank that just joined */
    tt_ckpt_tick_t t = {.step = 11, .generation = 2};
    CU_ASSERT_EQUAL(tt_ckpt_sched_boundary(&s, &t, 0), 0);
    t.step = 15;
    CU_ASSERT_EQUAL(tt_ckpt_sched_boundary(&s, &t, 0), TT_CKPT_ACT_START);
    CU_ASSERT_EQUAL(s.inflight_gen, 2);
}

static void ckpt_retry_backs_off_and_lets_new_requests_through(void) {
    tt_ckpt_retry_t r = {0};
    CU_ASSERT_FALSE(tt_ckpt_retry_holds(&r, 1, 0));
    CU_ASSERT_EQUAL(tt_ckpt_retry_failed(&r, 2, 1000), TT_CKPT_RETRY_FIRST_MS);
    CU_ASSERT_TRUE(tt_ckpt_retry_holds(&r, 2, 1000));
    CU_ASSERT_TRUE(tt_ckpt_retry_holds(&r, 2, 1000 + TT_CKPT_RETRY_FIRST_MS - 1));
    CU_ASSERT_FALSE(tt_ckpt_retry_holds(&r, 2, 1000 + TT_CKPT_RETRY_FIRST_MS));
    /* an operator's new request is taken at once */
    CU_ASSERT_FALSE(tt_ckpt_retry_holds(&r, 3, 1001));
    /* failures in a row double the pause, up to the cap */
    uint64_t now = 10000, d = 0;
    for (int i = 0; i < 12; i++)
        d = tt_ckpt_retry_failed(&r, 2, now);
    CU_ASSERT_EQUAL(d, TT_CKPT_RETRY_MAX_MS);
    CU_ASSERT_EQUAL(tt_ckpt_retry_failed(&r, 2, now), TT_CKPT_RETRY_MAX_MS);
    CU_ASSERT_TRUE(tt_ckpt_retry_holds(&r, 2, now + TT_CKPT_RETRY_MAX_MS - 1));
    /* served requests older than the failure do not end the streak */
    tt_ckpt_retry_served(&r, 1);
    CU_ASSERT_TRUE(tt_ckpt_retry_holds(&r, 2, now));
    /* serving what failed does, and the next failure starts small again */
    tt_ckpt_retry_served(&r, 2);
    CU_ASSERT_FALSE(tt_ckpt_retry_holds(&r, 2, now));
    CU_ASSERT_EQUAL(tt_ckpt_retry_failed(&r, 4, now), TT_CKPT_RETRY_FIRST_MS);
}

static const tt_cunit_test_t tests[] = {
    {"ckpt_retry_backs_off_and_lets_new_requests_through",
     ckpt_retry_backs_off_and_lets_new_requests_through},
    {"ckpt_sched_every_steps_starts_on_multiples", ckpt_sched_every_steps_starts_on_multiples},
    {"ckpt_sched_commits_only_when_every_writer_reported",
     ckpt_sched_commits_only_when_every_writer_reported},
    {"ckpt_sched_defers_while_one_is_in_flight", ckpt_sched_defers_while_one_is_in_flight},
    {"ckpt_sched_aborts_on_failure_or_new_generation",
     ckpt_sched_aborts_on_failure_or_new_generation},
    {"ckpt_sched_timer_follows_injected_clock", ckpt_sched_timer_follows_injected_clock},
    {"ckpt_sched_never_repeats_the_resumed_step", ckpt_sched_never_repeats_the_resumed_step},
    {"ckpt_sched_request_starts_at_next_free_boundary",
     ckpt_sched_request_starts_at_next_free_boundary},
    {"ckpt_sched_resolve_never_starts", ckpt_sched_resolve_never_starts},
    {"ckpt_sched_new_generation_aborts_locally_and_drops_deferred",
     ckpt_sched_new_generation_aborts_locally_and_drops_deferred},
    {NULL, NULL},
};

TT_CUNIT_MAIN("ckpt_sched", tests)
