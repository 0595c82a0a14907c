/* tt_ckpt_sched: the pure trigger/commit state machine (see the header).
 * Kept free of I/O and threads so that every transition is unit-tested
 * with an injected clock and scripted reduce results. */
#include "tt_ckpt_sched.h"

#include <string.h>

void tt_ckpt_sched_init(tt_ckpt_sched_t *s, const tt_ckpt_sched_opts_t *o, uint64_t step,
                        uint64_t now_ms) {
    memset(s, 0, sizeof(*s));
    s->o = *o;
    s->last_step = step;
    s->last_ms = now_ms;
}

int tt_ckpt_sched_needs_reduce(const tt_ckpt_sched_t *s) {
    return s->o.every_ms != 0 || s->phase == TT_CKPT_PHASE_WRITING;
}

int tt_ckpt_sched_time_due(const tt_ckpt_sched_t *s, uint64_t now_ms) {
    return s->o.every_ms != 0 && now_ms >= s->last_ms + s->o.every_ms;
}

void tt_ckpt_sched_request(tt_ckpt_sched_t *s) {
    s->pending = 1;
}

/* A writer failure or a new generation aborts: parts of two memberships
 * are never combined into one checkpoint. */
int tt_ckpt_sched_resolve(tt_ckpt_sched_t *s, const tt_ckpt_tick_t *t) {
    if (s->phase != TT_CKPT_PHASE_WRITING)
        return 0;
    if (t->failed > 0 || t->generation != s->inflight_gen) {
        s->phase = TT_CKPT_PHASE_IDLE;
        s->aborted++;
        return t->generation != s->inflight_gen ? TT_CKPT_ACT_ABORT
                                                : TT_CKPT_ACT_ABORT | TT_CKPT_ACT_FAILED;
    }
    if (t->writers > 0 && t->done >= t->writers) {
        s->phase = TT_CKPT_PHASE_IDLE;
        s->committed++;
        return TT_CKPT_ACT_COMMIT;
    }
    return 0;
}

int tt_ckpt_sched_generation(tt_ckpt_sched_t *s, uint64_t generation) {
    if (s->phase != TT_CKPT_PHASE_WRITING || generation == s->inflight_gen)
        return 0;
    s->phase = TT_CKPT_PHASE_IDLE;
    s->pending = 0;
    s->aborted++;
    return TT_CKPT_ACT_ABORT;
}

static int due(const tt_ckpt_sched_t *s, const tt_ckpt_tick_t *t) {
    if (t->step == s->last_step)
        return 0; /* one checkpoint per step at most (and none at the resumed step) */
    if (s->pending || t->time_due)
        return 1;
    return s->o.every_steps != 0 && t->step % s->o.every_steps == 0;
}

int tt_ckpt_sched_boundary(tt_ckpt_sched_t *s, const tt_ckpt_tick_t *tick, uint64_t now_ms) {
    int act = tt_ckpt_sched_resolve(s, tick);
    if (!due(s, tick))
        return act;
    if (s->phase == TT_CKPT_PHASE_WRITING) {
        s->pending = 1; /* at most one in flight: take it at the next free boundary */
        return act;
    }
    s->phase = TT_CKPT_PHASE_WRITING;
    s->pending = 0;
    s->inflight = tick->step;
    s->inflight_gen = tick->generation;
    s->last_step = tick->step;
    s->last_ms = now_ms;
    s->started++;
    return act | TT_CKPT_ACT_START;
}

uint64_t tt_ckpt_retry_failed(tt_ckpt_retry_t *r, uint64_t requested, uint64_t now_ms) {
    uint64_t d = r->delay_ms == 0 ? TT_CKPT_RETRY_FIRST_MS : 2 * r->delay_ms;
    r->delay_ms = d < TT_CKPT_RETRY_MAX_MS ? d : TT_CKPT_RETRY_MAX_MS;
    r->until_ms = now_ms + r->delay_ms;
    r->requested = requested;
    return r->delay_ms;
}

int tt_ckpt_retry_holds(const tt_ckpt_retry_t *r, uint64_t requested, uint64_t now_ms) {
    return r->delay_ms != 0 && now_ms < r->until_ms && requested <= r->requested;
}

void tt_ckpt_retry_served(tt_ckpt_retry_t *r, uint64_t served) {
    if (r->delay_ms != 0 && served >= r->requested)
        *r = (tt_ckpt_retry_t){0};
}
