/* tt_comm_ckpt: the shard servers' checkpoint (optimizer on the shards)
 * as the step loop asks for it: through one job of tt_comm's own, queued
 * without waking the communication thread, so it runs ahead of this
 * rank's next collective and the caller never waits for it. Phase 1 (the
 * request) needs nothing more: the FIFO keeps it ahead of the next push,
 * which is all the shards' copy needs. A phase-2 call reads what the job
 * before it found and queues the next look (tt_ps_checkpoint_result
 * takes the shards' answers and asks again without waiting for any).
 * Why not wake the thread: on a host whose CPUs the workers and shards
 * share, waking it at the boundary handed it the step loop's CPU, and a
 * synchronous question waited for a shard's loop to be scheduled; either
 * had cost rank 0 0.5-16 ms a checkpoint (docs/checkpoints.md, "Stall").
 * The price is a step of latency on each answer; a job still queued at
 * the next call (no collective came in between: the run is ending) is
 * run at once. */
#include "tt_comm_internal.h"

#include "tt_ps.h"
#include "tt_status.h"

#include <stdlib.h>
#include <string.h>

static void drop_results(tt_comm_t *c) {
    tt_ps_written_free(c->ckpt_w, c->ckpt_n);
    free(c->ckpt_w);
    c->ckpt_w = NULL;
    c->ckpt_n = 0;
}

/* A question of an earlier checkpoint (or one asked about another
 * directory) still queued: wait it out, its answer is nobody's. */
static void settle(tt_comm_t *c) {
    if (c->ckpt_busy) {
        tt_comm_kick(c);
        tt_comm_wait(c, &c->ckpt_job);
    }
    c->ckpt_busy = 0;
    drop_results(c);
}

/* Membership gate, then the job in the queue; not waited for. */
static int ask(tt_comm_t *c, const char *dir, int phase) {
    tt_comm_view_t v;
    int rc = tt_comm_view_gated(c, &v);
    if (rc != TT_OK)
        return rc;
    tt_comm_job_t *j = &c->ckpt_job;
    memset(j, 0, sizeof(*j));
    memcpy(c->ckpt_dir, dir, strlen(dir) + 1);
    j->kind = TT_COLL_BARRIER;
    j->role = TT_COMM_JOB_CKPT;
    j->buf = c->ckpt_dir;
    j->dt = TT_DT_FLOAT32;
    j->op = TT_RED_NONE;
    j->root = -1;
    j->phase = phase;
    j->written = &c->ckpt_w;
    j->nwritten = &c->ckpt_n;
    j->gen = v.generation;
    j->step = c->step_index; /* the shards' state must follow the step before */
    c->ckpt_busy = 1;
    tt_comm_enqueue_quiet(c, j);
    return TT_OK;
}

/* Phase 2: the previous question's answer, or TT_EAGAIN (and the next
 * question queued) while there is none yet or the parts are still being
 * written. */
static int answer(tt_comm_t *c, const char *dir, struct tt_ps_written **out, size_t *n) {
    tt_comm_job_t *j = &c->ckpt_job;
    if (!c->ckpt_busy || strcmp(c->ckpt_dir, dir) != 0) {
        settle(c);
        int rc = ask(c, dir, 2);
        return rc == TT_OK ? TT_EAGAIN : rc;
    }
    pthread_mutex_lock(&c->mu);
    int done = j->done, rc = j->status;
    pthread_mutex_unlock(&c->mu);
    if (!done) {
        tt_comm_kick(c); /* no collective since: nothing else will run it */
        return TT_EAGAIN;
    }
    c->ckpt_busy = 0;
    if (rc == TT_OK && j->phase == 2) {
        *out = c->ckpt_w;
        *n = c->ckpt_n;
        c->ckpt_w = NULL;
        c->ckpt_n = 0;
        return TT_OK;
    }
    drop_results(c);
    if (rc != TT_OK && rc != TT_EAGAIN)
        return rc; /* the request or the write failed: tt_comm's sentence says which */
    rc = ask(c, dir, 2);
    return rc == TT_OK ? TT_EAGAIN : rc;
}

int tt_comm_write_ckpt(tt_comm_t *c, const char *dir, int phase, struct tt_ps_written **out,
                       size_t *n) {
    if (c == NULL || dir == NULL || dir[0] != '/' || strlen(dir) >= sizeof(c->ckpt_dir) ||
        phase < 1 || phase > 2 || (phase == 2 && (out == NULL || n == NULL)))
        return TT_EINVAL;
    if (!c->opts.shard_update) {
        tt_comm_set_error(c, "the shard servers write checkpoints only with the update on the "
                             "shards (they hold no state otherwise)");
        return TT_EINVAL;
    }
    if (phase == 1) {
        settle(c);
        return ask(c, dir, 1);
    }
    *out = NULL;
    *n = 0;
    return answer(c, dir, out, n);
}

void tt_comm_ckpt_release(tt_comm_t *c) {
    drop_results(c);
}
