/* rdzv_group: how membership changes - eviction of members, dropping of
 * pending workers, forming a generation (from participants, after a death,
 * at an agreed step boundary, or at once with the same members when the
 * daemon asks, each regroup counted against the guard rail; one at a
 * boundary that only drops drained members is announced as a shrink of the
 * previous generation), the "regroup after step S" protocol (for joiners,
 * and for members the operator drains), and the end of the job (failed, or
 * finished by a worker that completed the run). Every public entry point
 * changes state through these helpers and then calls tt_rdzv_settle()
 * once, so a tick that evicts a thousand silent members forms one
 * generation, not a thousand. Request parsing and return codes live in
 * rdzv.c.
 *
 * Why the step-boundary protocol converges: members run every step through
 * collectives that need all of them, so no member can complete step k+1
 * before every member has completed step k; their completed steps differ
 * by at most one. The announced S = (highest reported step) + 1 is thus at
 * most one step ahead of anyone. A member that learns S late may already
 * be past it: it reports the step it completed, S rises to that step, and
 * everyone is told again. S only rises to a step some member completed,
 * which every other member can reach without anyone passing it (the member
 * that reported is waiting), so the next announcement is met and every
 * member ends up waiting at the same S. Members that stopped at a lower S
 * get CONTINUE and arrive again. */
#include "rdzv_internal.h"

#include "tt_log.h"
#include "tt_status.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tt_rdzv_lower_bound(tt_rdzv_t *r, uint64_t deadline) {
    if (deadline < r->expiry_bound)
        r->expiry_bound = deadline;
}

uint64_t tt_rdzv_suspect_deadline(const tt_rdzv_t *r, const tt_rdzv_node_t *n) {
    uint32_t hb = r->settings.heartbeat_ms;
    return n->last_seen_ms + hb + hb / 2;
}

static void update_committed(tt_rdzv_t *r) {
    if (r->state != TT_RDZV_RUNNING || r->members.n == 0)
        return;
    int64_t lo = INT64_MAX;
    for (uint32_t i = 0; i < r->members.n; i++) {
        if (r->members.v[i]->last_step < lo)
            lo = r->members.v[i]->last_step;
    }
    if (lo > r->committed_step)
        r->committed_step = lo;
}

/* No longer waiting to be drained (evicted, drained, or demoted). */
static void undrain(tt_rdzv_t *r, tt_rdzv_node_t *n) {
    if (n->draining && r->n_draining > 0)
        r->n_draining--;
    n->draining = 0;
}

/* Takes member n out (freed at the next compaction), says so and tells it
 * `status`; 0 when it was not a member any more. */
static int take_out(tt_rdzv_t *r, tt_rdzv_node_t *n, const char *how, int status,
                    const char *reason) {
    if (n->evicted || n->role != TT_RDZV_ROLE_MEMBER)
        return 0;
    undrain(r, n);
    n->evicted = 1;
    r->n_evicted++;
    tt_rdzv_table_remove(&r->table, n);
    TT_INFO(TT_RDZV_SUBSYS,
            "job %s: %s %s (rank %u, incarnation %" PRIu64 ") from generation %" PRIu64 ": %s",
            r->job_id, how, n->worker_id, n->index, n->incarnation, r->generation, reason);
    tt_rdzv_event_node(r, TT_RDZV_EV_MEMBER_EVICTED, n, status, -1, reason);
    return 1;
}

void tt_rdzv_evict(tt_rdzv_t *r, tt_rdzv_node_t *n, const char *reason, uint64_t now_ms) {
    if (take_out(r, n, "evicted", TT_EFENCED, reason))
        tt_rdzv_flap_note(r, n->worker_id, now_ms);
}

int tt_rdzv_was_drained(const tt_rdzv_t *r, const char *worker_id, uint64_t incarnation) {
    for (uint32_t i = 0; i < TT_RDZV_DRAINED_KEEP; i++)
        if (r->drained[i].incarnation == incarnation &&
            strcmp(r->drained[i].worker_id, worker_id) == 0 && worker_id[0] != '\0')
            return 1;
    return 0;
}

/* Why not a plain eviction: a drained worker did nothing wrong, so no
 * flap is counted against it, and it is told TT_EDRAINED so that it ends
 * rather than joins again (its later requests too: tt_rdzv_was_drained). */
static void note_drained(tt_rdzv_t *r, const tt_rdzv_node_t *n) {
    uint32_t k = r->drained_next++ % TT_RDZV_DRAINED_KEEP;
    memcpy(r->drained[k].worker_id, n->worker_id, sizeof(r->drained[k].worker_id));
    r->drained[k].incarnation = n->incarnation;
}

void tt_rdzv_drain_out(tt_rdzv_t *r, tt_rdzv_node_t *n, const char *reason) {
    if (n->role == TT_RDZV_ROLE_PENDING) { /* not admitted yet: its join is refused */
        note_drained(r, n);
        tt_rdzv_drop_pending(r, n, TT_EDRAINED, reason);
        return;
    }
    if (take_out(r, n, "drained", TT_EDRAINED, reason))
        note_drained(r, n);
}

/* `status` 0: the worker itself left, nobody waits for an answer. */
void tt_rdzv_drop_pending(tt_rdzv_t *r, tt_rdzv_node_t *n, int status, const char *msg) {
    if (status != TT_OK) {
        TT_INFO(TT_RDZV_SUBSYS, "job %s: dropped waiting %s: %s", r->job_id, n->worker_id, msg);
        tt_rdzv_event_node(r, TT_RDZV_EV_JOIN_REFUSED, n, status, -1, msg);
    }
    tt_rdzv_table_remove(&r->table, n);
    tt_rdzv_pending_remove(r, n);
    free(n);
}

/* Ends the job for good: waiters are refused with `status`, the end event
 * follows, and every node goes (their requests get the end status now). */
static void end_job(tt_rdzv_t *r, tt_rdzv_state_t state, int status, const char *msg) {
    update_committed(r); /* keeps the step status showed while running */
    r->state = state;
    for (uint32_t i = 0; i < r->pending.n; i++)
        tt_rdzv_event_node(r, TT_RDZV_EV_JOIN_REFUSED, r->pending.v[i], status, -1, msg);
    tt_rdzv_event_t *ev = tt_rdzv_event_push(r, state == TT_RDZV_FAILED ? TT_RDZV_EV_JOB_FAILED
                                                                        : TT_RDZV_EV_JOB_FINISHED);
    if (ev)
        snprintf(ev->message, sizeof(ev->message), "%s", msg);
    tt_rdzv_free_nodes(r);
    r->regroup_step = -1;
    r->n_at_boundary = 0;
    r->last_call_deadline = 0;
    r->below_min_armed = 0;
    r->expiry_bound = UINT64_MAX;
}

void tt_rdzv_fail(tt_rdzv_t *r, const char *reason) {
    snprintf(r->failure_reason, sizeof(r->failure_reason), "%s", reason);
    TT_ERROR(TT_RDZV_SUBSYS, "job %s failed: %s", r->job_id, reason);
    end_job(r, TT_RDZV_FAILED, TT_EJOBFAILED, reason);
}

void tt_rdzv_set_done_msg(tt_rdzv_t *r) {
    snprintf(r->done_msg, sizeof(r->done_msg),
             "job %s has already finished (last committed step %" PRId64 "): nothing left to do",
             r->job_id, r->committed_step);
}

void tt_rdzv_end_finished(tt_rdzv_t *r, const char *who) {
    update_committed(r);
    tt_rdzv_set_done_msg(r);
    TT_INFO(TT_RDZV_SUBSYS,
            "job %s finished: %s completed the run (generation %" PRIu64
            ", last committed step %" PRId64 "); %u waiting refused",
            r->job_id, who, r->generation, r->committed_step, r->pending.n);
    end_job(r, TT_RDZV_FINISHED, TT_EJOBDONE, r->done_msg);
}

/* Moves the first `take` pending workers, by admission priority, into
 * `members` (capacity already reserved). Survivors of a below-min regroup
 * come first: they hold training state. */
static void admit_pending(tt_rdzv_t *r, uint32_t take) {
    tt_rdzv_sort_by_priority(r->pending.v, r->pending.n);
    for (uint32_t i = 0; i < take; i++) {
        tt_rdzv_node_t *n = r->pending.v[i];
        n->role = TT_RDZV_ROLE_MEMBER;
        r->members.v[r->members.n++] = n;
    }
    uint32_t rest = r->pending.n - take;
    if (rest > 0 && take > 0)
        memmove(r->pending.v, r->pending.v + take, (size_t)rest * sizeof(*r->pending.v));
    r->pending.n = rest;
    for (uint32_t i = 0; i < rest; i++)
        r->pending.v[i]->index = i;
}

static int reserve_members(tt_rdzv_t *r, uint32_t k) {
    if (k <= r->members.cap)
        return TT_OK;
    tt_rdzv_node_t **v = realloc(r->members.v, (size_t)k * sizeof(*v));
    if (v == NULL)
        return TT_ENOMEM;
    r->members.v = v;
    r->members.cap = k;
    return TT_OK;
}

/* Ranks by worker_id; resets per-generation marks; returns max last_step. */
static int64_t rank_members(tt_rdzv_t *r) {
    int64_t hi = -1;
    tt_rdzv_sort_by_id(r->members.v, r->members.n);
    for (uint32_t i = 0; i < r->members.n; i++) {
        tt_rdzv_node_t *n = r->members.v[i];
        n->index = i;
        n->boundary_step = -1;
        n->suspected = 0;
        n->suspect_reason[0] = '\0';
        if (n->last_step > hi)
            hi = n->last_step;
    }
    return hi;
}

/* A generation that is the previous one minus some members (see
 * TT_RDZV_EV_GENERATION_FORMED in rdzv.h). of 0: no such relation. */
typedef struct {
    uint64_t of;
    uint32_t n;
    uint32_t ranks[TT_RDZV_SHRINK_MAX]; /* old ranks, ascending */
} shrink_t;

/* The old ranks of the members about to be drained, ascending (the list
 * is in rank order); none beyond what Generation can carry. */
static void note_shrink(const tt_rdzv_t *r, shrink_t *sh) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < r->members.n; i++) {
        const tt_rdzv_node_t *m = r->members.v[i];
        if (!m->draining || m->evicted)
            continue;
        if (n == TT_RDZV_SHRINK_MAX)
            return; /* sh->of stays 0 */
        sh->ranks[n++] = m->index;
    }
    sh->n = n;
    sh->of = n > 0 ? r->generation : 0;
}

static void emit_formed(tt_rdzv_t *r, tt_rdzv_member_t *snap, int64_t resume, const shrink_t *sh) {
    for (uint32_t i = 0; i < r->members.n; i++)
        tt_rdzv_node_to_member(r->members.v[i], &snap[i]);
    tt_rdzv_event_t *ev = tt_rdzv_event_push(r, TT_RDZV_EV_GENERATION_FORMED);
    if (ev == NULL) {
        free(snap);
        return;
    }
    ev->world_size = r->members.n;
    ev->members = snap;
    ev->step = resume;
    if (sh != NULL && sh->of != 0) {
        ev->shrink_of = sh->of;
        ev->n_shrink_exclude = sh->n;
        memcpy(ev->shrink_exclude, sh->ranks, (size_t)sh->n * sizeof(sh->ranks[0]));
    }
    TT_INFO(TT_RDZV_SUBSYS,
            "job %s: generation %" PRIu64 " formed: %u members, resume at step %" PRId64
            ", %u waiting",
            r->job_id, r->generation, r->members.n, resume, r->pending.n);
}

/* Forms the next generation from the current (compacted) members plus up to
 * `take` pending workers. `resume` < 0: start after the highest step any
 * new member holds. `sh` (may be NULL): its shrink relation to the
 * previous one, dropped when a joiner comes in. Every generation after the
 * first is a regroup and counts against max_regroups_per_hour; one too
 * many fails the job. An allocation failure fails the job rather than
 * leave workers without an answer they cannot tell apart from a hang. */
static void form_generation(tt_rdzv_t *r, uint32_t take, int64_t resume, uint64_t now_ms,
                            const shrink_t *sh) {
    char why[TT_RDZV_REASON_MAX];
    if (r->generation > 0 && tt_rdzv_note_regroup(r, now_ms, why, sizeof(why)) != 0) {
        tt_rdzv_fail(r, why);
        return;
    }
    uint32_t k = r->members.n + take;
    tt_rdzv_member_t *snap = malloc((size_t)k * sizeof(*snap));
    if (snap == NULL || reserve_members(r, k) != TT_OK) {
        free(snap);
        r->call_rc = TT_ENOMEM;
        tt_rdzv_fail(r, "out of memory while forming a generation");
        return;
    }
    admit_pending(r, take);
    int64_t hi = rank_members(r);
    r->generation++;
    r->state = TT_RDZV_RUNNING;
    r->regroup_step = -1;
    r->n_at_boundary = 0;
    r->last_call_deadline = 0;
    r->below_min_armed = 0;
    r->max_member_step = hi;
    emit_formed(r, snap, resume >= 0 ? resume : hi + 1, take == 0 ? sh : NULL);
}

void tt_rdzv_form_waiting(tt_rdzv_t *r, uint64_t now_ms) {
    uint32_t take = r->pending.n < r->settings.max_workers ? r->pending.n : r->settings.max_workers;
    form_generation(r, take, -1, now_ms, NULL);
}

static uint32_t free_slots(const tt_rdzv_t *r) {
    uint32_t room = r->settings.max_workers - r->members.n;
    return r->pending.n < room ? r->pending.n : room;
}

/* Drops evicted members from the list, keeping rank order for the rest. */
static void compact_members(tt_rdzv_t *r) {
    uint32_t w = 0;
    for (uint32_t i = 0; i < r->members.n; i++) {
        tt_rdzv_node_t *n = r->members.v[i];
        if (n->evicted)
            free(n);
        else
            r->members.v[w++] = n;
    }
    r->members.n = w;
    r->n_evicted = 0;
}

/* The members set to drain leave now, at a formation. */
static void drop_drained(tt_rdzv_t *r) {
    for (uint32_t i = 0; r->n_draining > 0 && i < r->members.n; i++) {
        tt_rdzv_node_t *n = r->members.v[i];
        if (n->draining && !n->evicted)
            tt_rdzv_drain_out(r, n,
                              "drained at a step boundary (tetherctl drain, or its own request)");
    }
    r->n_draining = 0;
    compact_members(r);
}

/* Survivors below min go back to being participants, first in line. */
static void demote_survivors(tt_rdzv_t *r, uint64_t now_ms) {
    TT_WARN(TT_RDZV_SUBSYS,
            "job %s: %u survivors of generation %" PRIu64
            " are below min_workers %u; waiting up to %u ms for more",
            r->job_id, r->members.n, r->generation, r->settings.min_workers,
            r->settings.join_timeout_ms);
    for (uint32_t i = 0; i < r->members.n; i++) {
        tt_rdzv_node_t *n = r->members.v[i];
        n->prio = 0;
        n->seq = r->next_seq++;
        n->boundary_step = -1;
        n->suspected = 0;
        undrain(r, n);                  /* the drain gives way to waiting for workers */
        r->pending.v[r->pending.n] = n; /* capacity reserved by the caller */
        n->role = TT_RDZV_ROLE_PENDING;
        n->index = r->pending.n++;
    }
    r->members.n = 0;
    r->state = TT_RDZV_WAITING;
    r->regroup_step = -1;
    r->n_at_boundary = 0;
    r->below_min_armed = 1;
    r->below_min_since = now_ms;
}

/* Why a death's generation is no shrink (nor a drain --now's, which
 * evicts): NCCL (2.27-2.28) cannot shrink a communicator whose proxy
 * thread saw the peer go mid-collective. ncclCommShrink checks the parent
 * with ncclCommEnsureReady, which returns the proxy's recorded error, and
 * ncclCommRevoke leaves that error in place. Whether a survivor's proxy
 * saw it is a race, so survivors would split between shrinking and
 * building afresh, and both halves would wait out the init deadline
 * (docs/gpu.md). Every survivor builds afresh instead, during the PS
 * steps where there are shard servers. */
static void regroup_after_death(tt_rdzv_t *r, uint64_t now_ms) {
    update_committed(r);
    compact_members(r);
    if (r->n_draining > 0 && r->members.n - r->n_draining >= r->settings.min_workers)
        drop_drained(r); /* they were leaving anyway: not into this generation */
    if (r->members.n >= r->settings.min_workers) {
        form_generation(r, free_slots(r), -1, now_ms, NULL); /* steps were in flight */
        return;
    }
    uint32_t need = r->pending.n + r->members.n;
    if (need > r->pending.cap) {
        tt_rdzv_node_t **v = realloc(r->pending.v, (size_t)need * sizeof(*v));
        if (v == NULL) {
            r->call_rc = TT_ENOMEM;
            tt_rdzv_fail(r, "out of memory while regrouping below min_workers");
            return;
        }
        r->pending.v = v;
        r->pending.cap = need;
    }
    demote_survivors(r, now_ms);
}

/* The members stay; only the generation (and what hangs on it, like the
 * shard placement workers fetch once per generation) is renewed. */
void tt_rdzv_regroup_same(tt_rdzv_t *r, const char *reason, uint64_t now_ms) {
    TT_INFO(TT_RDZV_SUBSYS, "job %s: regrouping generation %" PRIu64 " with its %u members: %s",
            r->job_id, r->generation, r->members.n, reason);
    update_committed(r);
    form_generation(r, free_slots(r), -1, now_ms, NULL);
}

static void announce(tt_rdzv_t *r) {
    tt_rdzv_event_t *ev = tt_rdzv_event_push(r, TT_RDZV_EV_REGROUP_ANNOUNCED);
    if (ev)
        ev->step = r->regroup_step;
    TT_INFO(TT_RDZV_SUBSYS, "job %s: regroup after step %" PRId64 " (%u waiting)", r->job_id,
            r->regroup_step, r->pending.n);
}

/* Moves S to `step`; members stopped below it are told to go on. */
static void set_regroup_step(tt_rdzv_t *r, int64_t step) {
    r->regroup_step = step;
    r->n_at_boundary = 0;
    announce(r);
    for (uint32_t i = 0; i < r->members.n; i++) {
        tt_rdzv_node_t *n = r->members.v[i];
        if (n->boundary_step < 0)
            continue;
        if (step < 0 || n->boundary_step < step) {
            tt_rdzv_event_node(r, TT_RDZV_EV_CONTINUE, n, TT_OK, step, NULL);
            n->boundary_step = -1;
        } else {
            r->n_at_boundary++;
        }
    }
}

/* Why a running member moves S one past its step: having completed
 * `step` without stopping, it is inside step + 1, which it can only finish
 * together with every other member; left at `step`, the others would
 * wait there for it while it waits for them in that step's collective. */
void tt_rdzv_note_step(tt_rdzv_t *r, tt_rdzv_node_t *n, int64_t step, int running) {
    if (step > n->last_step)
        n->last_step = step;
    if (n->role != TT_RDZV_ROLE_MEMBER)
        return;
    if (step > r->max_member_step)
        r->max_member_step = step;
    if (r->regroup_step < 0)
        return;
    if (running && n->boundary_step < 0 && r->state == TT_RDZV_RUNNING && step >= r->regroup_step)
        set_regroup_step(r, step + 1);
    else if (step > r->regroup_step)
        set_regroup_step(r, step);
}

/* Every member waits at S: the drained leave, waiters come in. Why only
 * here is a generation a shrink: no step is in flight (so no survivor's
 * communicator saw a peer fail, see regroup_after_death) and, when nobody
 * is admitted, the survivors keep their order (ranked by worker id), so an
 * NCCL communicator can be shrunk rather than built again. */
static void form_at_boundary(tt_rdzv_t *r, uint64_t now_ms) {
    shrink_t sh = {0};
    update_committed(r);
    int64_t resume = r->regroup_step + 1;
    if (r->n_draining > 0) {
        note_shrink(r, &sh);
        drop_drained(r);
    }
    form_generation(r, free_slots(r), resume, now_ms, &sh);
}

static void settle_running(tt_rdzv_t *r, uint64_t now_ms) {
    if (r->n_evicted > 0) {
        regroup_after_death(r, now_ms);
        if (r->state != TT_RDZV_RUNNING)
            return;
    }
    if (r->n_draining > 0 && r->members.n - r->n_draining < r->settings.min_workers) {
        TT_WARN(TT_RDZV_SUBSYS,
                "job %s: the %u drain(s) set would now leave fewer than min_workers %u: "
                "cancelled",
                r->job_id, r->n_draining, r->settings.min_workers);
        for (uint32_t i = 0; i < r->members.n; i++)
            undrain(r, r->members.v[i]);
    }
    /* A boundary is wanted for joiners to admit or members to drain. */
    int wanted = free_slots(r) > 0 || r->n_draining > 0;
    if (r->regroup_step >= 0 && !wanted) {
        set_regroup_step(r, -1); /* nobody left to admit: cancel */
    } else if (r->regroup_step < 0 && wanted) {
        set_regroup_step(r, r->max_member_step + 1);
    } else if (r->regroup_step >= 0 && r->n_at_boundary == r->members.n) {
        form_at_boundary(r, now_ms);
    }
}

static void settle_waiting(tt_rdzv_t *r, uint64_t now_ms) {
    const tt_rdzv_settings_t *s = &r->settings;
    if (r->pending.n >= s->max_workers) {
        tt_rdzv_form_waiting(r, now_ms);
    } else if (r->pending.n >= s->min_workers) {
        r->below_min_armed = 0;
        if (r->last_call_deadline == 0)
            r->last_call_deadline = now_ms + s->last_call_ms;
    } else {
        r->last_call_deadline = 0;
        if (!r->below_min_armed) {
            r->below_min_armed = 1;
            r->below_min_since = now_ms;
        }
    }
}

/* Brings the state in line after any change; O(1) when nothing changed. */
void tt_rdzv_settle(tt_rdzv_t *r, uint64_t now_ms) {
    if (r->state == TT_RDZV_RUNNING)
        settle_running(r, now_ms);
    /* A generation formed from participants admits min(pending, max), so
     * it never leaves a waiter with a free slot: no second pass needed. */
    if (r->state == TT_RDZV_WAITING)
        settle_waiting(r, now_ms);
}
