/* tt_client_sm: the membership client's state machine. It decides how a message
 * from the coordinator or a completed step changes what the worker believes
 * (state, generation, rank, announced regroup step), when the blocking call in
 * flight has its answer, when a join refused as busy is due again, and when the
 * worker stopped being a member (ENDED). It is pure: no sockets, no locks, no
 * clock (now_ms comes in). It does not send anything: the client (tt_client.c)
 * turns its decisions into messages.
 * Rules that matter: a fenced worker stays fenced until the application
 * joins again (never a silent rejoin), generations only move forward, and
 * an ESTALE answer is not an outcome: the coordinator follows it with the
 * current JoinReply, nor is an EBUSY answer to a join (a flap cool-down or
 * a full wait list): it is asked again, within the join's deadline. A job
 * that finished closes the client for good (CLOSED, reading TT_EJOBDONE), and
 * so does a drain by the operator (TT_EDRAINED). */
#include "tt_client.h"
#include "tt_log.h"
#include "tt_status.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *tt_client_state_name(tt_client_state_t s) {
    static const char *const names[] = {"idle",   "joining", "member", "boundary",
                                        "fenced", "failed",  "closed"};
    return (unsigned)s < sizeof(names) / sizeof(names[0]) ? names[s] : "unknown";
}

int tt_client_state_status(tt_client_state_t s) {
    switch (s) {
    case TT_CLIENT_JOINING:
    case TT_CLIENT_MEMBER:
    case TT_CLIENT_BOUNDARY:
        return TT_OK;
    case TT_CLIENT_FENCED:
        return TT_EFENCED;
    case TT_CLIENT_FAILED:
        return TT_EJOBFAILED;
    case TT_CLIENT_CLOSED:
        return TT_ECLOSED;
    default:
        return TT_EINVAL;
    }
}

int tt_client_sm_status(const tt_client_sm_t *sm) {
    return sm->state == TT_CLIENT_CLOSED ? sm->closed_rc : tt_client_state_status(sm->state);
}

void tt_client_sm_init(tt_client_sm_t *sm, uint32_t heartbeat_ms) {
    memset(sm, 0, sizeof(*sm));
    sm->state = TT_CLIENT_IDLE;
    sm->heartbeat_ms = heartbeat_ms;
    sm->rank = -1;
    sm->resume_step = -1;
    sm->job_steps = 0;
    sm->ps_until_step = 0;
    sm->completed_step = -1;
    sm->regroup_after_step = -1;
    sm->closed_rc = TT_ECLOSED;
}

void tt_client_sm_release(tt_client_sm_t *sm) {
    free(sm->members);
    sm->members = NULL;
    sm->nmembers = 0;
    sm->world_size = 0;
}

int tt_client_sm_begin(tt_client_sm_t *sm, tt_client_op_t op, uint64_t rid) {
    if (sm->op != TT_CLIENT_OP_NONE)
        return TT_EBUSY;
    sm->op = op;
    sm->op_rid = rid;
    sm->op_done = 0;
    sm->op_rc = TT_OK;
    if (op == TT_CLIENT_OP_JOIN) {
        /* A join starts from nothing: whatever generation we had is gone. */
        tt_client_sm_release(sm);
        sm->state = TT_CLIENT_JOINING;
        sm->generation = 0;
        sm->rank = -1;
        sm->resume_step = -1;
        sm->job_steps = 0;
        sm->ps_until_step = 0;
        sm->job_nonce = 0;
        sm->shrink_of = 0;
        sm->nshrink = 0;
        sm->regroup_after_step = -1;
        sm->retry_at_ms = 0;
        sm->busy_refusals = 0;
    } else if (op == TT_CLIENT_OP_BOUNDARY) {
        sm->state = TT_CLIENT_BOUNDARY;
    }
    return TT_OK;
}

int tt_client_sm_finish(tt_client_sm_t *sm, int timed_out) {
    int rc = sm->op_rc;
    if (timed_out && !sm->op_done) {
        rc = TT_ETIMEDOUT;
        if (sm->state == TT_CLIENT_JOINING)
            sm->state = TT_CLIENT_IDLE;
        else if (sm->state == TT_CLIENT_BOUNDARY)
            sm->state = TT_CLIENT_MEMBER;
    }
    sm->op = TT_CLIENT_OP_NONE;
    sm->op_rid = 0;
    sm->op_done = 0;
    sm->retry_at_ms = 0;
    return rc;
}

/* Records the outcome of the op in flight, if it is of one of the kinds
 * in `mask` (bits 1 << op). Returns TT_CLIENT_EV_OP_DONE when it did. */
static int complete_op(tt_client_sm_t *sm, unsigned mask, int rc) {
    if (sm->op == TT_CLIENT_OP_NONE || sm->op_done || !(mask & (1u << sm->op)))
        return 0;
    sm->op_done = 1;
    sm->op_rc = rc;
    return TT_CLIENT_EV_OP_DONE;
}

#define ALL_OPS                                                                                    \
    ((1u << TT_CLIENT_OP_JOIN) | (1u << TT_CLIENT_OP_BOUNDARY) | (1u << TT_CLIENT_OP_LEAVE) |      \
     (1u << TT_CLIENT_OP_REPORT) | (1u << TT_CLIENT_OP_DRAIN))

/* The ops a plain Ack completes. */
#define ACKED_OPS                                                                                  \
    ((1u << TT_CLIENT_OP_LEAVE) | (1u << TT_CLIENT_OP_REPORT) | (1u << TT_CLIENT_OP_DRAIN))

static int install_generation(tt_client_sm_t *sm, const Tether__JoinReply *jr) {
    const Tether__Generation *g = jr->generation;
    tether_member_t *m = calloc(g->n_members ? g->n_members : 1, sizeof(*m));
    if (m == NULL)
        return TT_ENOMEM;
    for (size_t i = 0; i < g->n_members; i++) {
        const Tether__Member *src = g->members[i];
        m[i].rank = src->rank;
        snprintf(m[i].worker_id, sizeof(m[i].worker_id), "%s",
                 src->worker_id ? src->worker_id : "");
        snprintf(m[i].host, sizeof(m[i].host), "%s", src->host ? src->host : "");
        snprintf(m[i].endpoint, sizeof(m[i].endpoint), "%s", src->endpoint ? src->endpoint : "");
        m[i].last_step = src->last_step;
    }
    free(sm->members);
    sm->members = m;
    sm->nmembers = (uint32_t)g->n_members;
    sm->generation = g->generation;
    /* Above 256 ranks the table lists only neighbours: the world size is
     * the generation's, not the table's length. */
    sm->world_size = g->world_size > g->n_members ? g->world_size : (uint32_t)g->n_members;
    sm->rank = (int32_t)jr->rank;
    sm->resume_step = g->resume_step;
    sm->job_steps = g->job_steps > 0 ? g->job_steps : 0;
    sm->ps_until_step = g->ps_until_step;
    sm->job_nonce = g->job_nonce;
    /* The wire check bounds the list (tt_wire_shrink_ok). */
    sm->shrink_of = g->shrink_of;
    sm->nshrink = (uint32_t)g->n_shrink_exclude;
    if (g->n_shrink_exclude > 0)
        memcpy(sm->shrink_exclude, g->shrink_exclude,
               g->n_shrink_exclude * sizeof(*g->shrink_exclude));
    sm->regroup_after_step = -1;
    sm->state = TT_CLIENT_MEMBER;
    return TT_OK;
}

static int on_join_reply(tt_client_sm_t *sm, const Tether__JoinReply *jr) {
    int waiting = sm->state == TT_CLIENT_JOINING || sm->state == TT_CLIENT_BOUNDARY;
    if (!waiting && sm->state != TT_CLIENT_MEMBER)
        return 0; /* fenced, failed, closed or idle: a join must come first */
    if (jr->generation->generation <= sm->generation)
        return 0; /* a repeat of what we have (or older) */
    uint32_t world = jr->generation->world_size > jr->generation->n_members
                         ? jr->generation->world_size
                         : (uint32_t)jr->generation->n_members;
    if (jr->rank >= world) {
        snprintf(sm->last_error, sizeof(sm->last_error),
                 "coordinator sent rank %u for a world of %zu; ignored", jr->rank,
                 jr->generation->n_members);
        return 0;
    }
    tt_client_state_t was = sm->state;
    if (install_generation(sm, jr) != TT_OK)
        return TT_ENOMEM;
    TT_INFO("client", "generation %" PRIu64 ": rank %d of %u, resume at step %" PRId64,
            sm->generation, sm->rank, sm->world_size, sm->resume_step);
    int ev = TT_CLIENT_EV_GENERATION;
    if (was == TT_CLIENT_JOINING)
        ev |= complete_op(sm, 1u << TT_CLIENT_OP_JOIN, TT_OK);
    else if (was == TT_CLIENT_BOUNDARY)
        ev |= complete_op(sm, 1u << TT_CLIENT_OP_BOUNDARY, TETHER_REGROUPED);
    if (ev & TT_CLIENT_EV_OP_DONE)
        sm->app_generation = sm->generation;
    return ev;
}

/* TT_CLIENT_EV_ENDED when leaving `was`, a state that took part in the job. */
static int ended_from(tt_client_state_t was) {
    int active = was == TT_CLIENT_JOINING || was == TT_CLIENT_MEMBER || was == TT_CLIENT_BOUNDARY;
    return active ? TT_CLIENT_EV_ENDED : 0;
}

static int on_job_failed(tt_client_sm_t *sm) {
    tt_client_state_t was = sm->state;
    if (sm->state != TT_CLIENT_CLOSED)
        sm->state = TT_CLIENT_FAILED;
    return ended_from(was) | complete_op(sm, ALL_OPS, TT_EJOBFAILED);
}

/* The job finished (TT_EJOBDONE), or the operator drained this worker
 * from it (TT_EDRAINED): nothing will ever be asked of this worker again. */
static int on_job_done(tt_client_sm_t *sm, int code) {
    tt_client_state_t was = sm->state;
    if (sm->state == TT_CLIENT_FAILED)
        return 0; /* it failed first; that is its outcome */
    sm->state = TT_CLIENT_CLOSED;
    sm->closed_rc = code;
    sm->regroup_after_step = -1;
    if (ended_from(was))
        TT_INFO("client", "%s: %s", code == TT_EDRAINED ? "drained" : "the job finished",
                sm->last_error);
    return ended_from(was) | complete_op(sm, ALL_OPS, code);
}

static int on_heartbeat_reply(tt_client_sm_t *sm, const Tether__HeartbeatReply *hr) {
    int finished = hr->job_state == TETHER__JOB_STATE__JOB_FINISHED;
    if (finished || hr->job_state == TETHER__JOB_STATE__JOB_FAILED) {
        if (sm->state == TT_CLIENT_CLOSED || sm->state == TT_CLIENT_FAILED)
            return 0;
        snprintf(sm->last_error, sizeof(sm->last_error), "the coordinator reports the job %s",
                 finished ? "finished" : "failed");
        return finished ? on_job_done(sm, TT_EJOBDONE) : on_job_failed(sm);
    }
    /* The coordinator's word as it stands: after a restart that lost an
     * unsaved timer request its counters may be lower than before. */
    sm->ckpt_requested = hr->checkpoint_requested;
    sm->ckpt_served = hr->checkpoint_served;
    /* Only a member acts on the announced step; the value refers to the
     * job's current generation, so one from a newer generation waits for
     * its JoinReply. */
    if (sm->state == TT_CLIENT_MEMBER && hr->generation == sm->generation)
        sm->regroup_after_step = hr->regroup_after_step;
    return 0;
}

static int on_continue(tt_client_sm_t *sm, const Tether__Continue *c) {
    if (sm->state != TT_CLIENT_BOUNDARY)
        return 0;
    sm->state = TT_CLIENT_MEMBER;
    sm->regroup_after_step = c->until_step;
    TT_INFO("client", "continue: next regroup after step %" PRId64, c->until_step);
    return complete_op(sm, 1u << TT_CLIENT_OP_BOUNDARY, TT_OK);
}

static int on_ack(tt_client_sm_t *sm, uint64_t rid) {
    if (sm->op == TT_CLIENT_OP_NONE || !(ACKED_OPS & (1u << sm->op)) || rid != sm->op_rid)
        return 0;
    if (sm->op == TT_CLIENT_OP_LEAVE)
        sm->state = TT_CLIENT_CLOSED;
    return complete_op(sm, ACKED_OPS, TT_OK);
}

static int on_fenced(tt_client_sm_t *sm) {
    if (sm->state == TT_CLIENT_IDLE || sm->state == TT_CLIENT_CLOSED ||
        sm->state == TT_CLIENT_FAILED)
        return complete_op(sm, ALL_OPS, TT_EFENCED);
    if (sm->state != TT_CLIENT_FENCED)
        TT_WARN("client", "fenced by the coordinator in state %s: %s",
                tt_client_state_name(sm->state), sm->last_error);
    tt_client_state_t was = sm->state;
    sm->state = sm->op == TT_CLIENT_OP_LEAVE ? TT_CLIENT_CLOSED : TT_CLIENT_FENCED;
    sm->regroup_after_step = -1;
    return ended_from(was) | complete_op(sm, ALL_OPS, TT_EFENCED);
}

/* The answer to the join in flight is "busy": ask again a heartbeat later
 * (the coordinator's sentence says how long the cool-down lasts; the join's
 * deadline bounds the whole wait). */
static int retry_join(tt_client_sm_t *sm, const char *msg, uint64_t now_ms) {
    sm->busy_refusals++;
    sm->retry_at_ms = now_ms + (sm->heartbeat_ms ? sm->heartbeat_ms : 1);
    snprintf(sm->last_error, sizeof(sm->last_error), "coordinator: %s (EBUSY)", msg);
    if (sm->busy_refusals == 1)
        TT_WARN("client", "join refused for now, asking again every %u ms: %s", sm->heartbeat_ms,
                msg);
    return 0;
}

static int on_error(tt_client_sm_t *sm, const Tether__Error *e, uint64_t rid, uint64_t now_ms) {
    const char *msg = e->message ? e->message : "";
    if (e->code == TT_ESTALE) {
        /* Our generation is behind; the current JoinReply follows. */
        TT_DEBUG("client", "coordinator: stale generation %" PRIu64 ": %s", sm->generation, msg);
        return 0;
    }
    if (e->code == TT_EFENCED && rid != sm->op_rid &&
        (sm->state == TT_CLIENT_JOINING || sm->state == TT_CLIENT_IDLE)) {
        /* The answer to a heartbeat sent before or during this join (a
         * fenced worker joining again; a join the coordinator refused,
         * whose heartbeats are answered "not a member" after the refusal):
         * only the join's own answer decides, and its sentence stays the
         * last error. */
        TT_DEBUG("client", "fence answer to request %" PRIu64 " ignored while %s", rid,
                 tt_client_state_name(sm->state));
        return 0;
    }
    if (e->code == TT_EBUSY && sm->op == TT_CLIENT_OP_JOIN && !sm->op_done && rid == sm->op_rid &&
        rid != 0)
        return retry_join(sm, msg, now_ms);
    snprintf(sm->last_error, sizeof(sm->last_error), "coordinator: %s (%s)", msg,
             tt_status_name(e->code));
    if (e->code == TT_EFENCED)
        return on_fenced(sm);
    if (e->code == TT_EJOBFAILED)
        return on_job_failed(sm);
    if (e->code == TT_EJOBDONE || e->code == TT_EDRAINED)
        return on_job_done(sm, e->code);
    if (sm->op == TT_CLIENT_OP_NONE || rid != sm->op_rid || rid == 0) {
        TT_WARN("client", "coordinator error %s: %s", tt_status_name(e->code), msg);
        return 0;
    }
    int rc = e->code < 0 ? e->code : TT_EREMOTE;
    if (sm->op == TT_CLIENT_OP_JOIN)
        sm->state = TT_CLIENT_IDLE;
    else if (sm->op == TT_CLIENT_OP_BOUNDARY)
        sm->state = TT_CLIENT_MEMBER;
    return complete_op(sm, ALL_OPS, rc);
}

/* Notes replies after a silence (a coordinator restart, a network gap):
 * the DEALER reconnects by itself, nothing else is needed. */
static int note_reply(tt_client_sm_t *sm, uint64_t now_ms) {
    int ev = 0;
    uint64_t gap_limit = 2ull * sm->heartbeat_ms;
    if (sm->last_reply_ms != 0 && now_ms > sm->last_reply_ms + gap_limit) {
        sm->silence_ms = now_ms - sm->last_reply_ms;
        ev = TT_CLIENT_EV_RESUMED;
    }
    sm->last_reply_ms = now_ms;
    return ev;
}

int tt_client_sm_on_message(tt_client_sm_t *sm, const tt_env_t *env, uint64_t now_ms) {
    int ev = note_reply(sm, now_ms);
    int rc = 0;
    switch (env->body_case) {
    case TETHER__ENVELOPE__BODY_JOIN_REPLY:
        rc = on_join_reply(sm, env->join_reply);
        break;
    case TETHER__ENVELOPE__BODY_HEARTBEAT_REPLY:
        rc = on_heartbeat_reply(sm, env->heartbeat_reply);
        break;
    case TETHER__ENVELOPE__BODY_REGROUP_NOTICE:
        if (sm->state == TT_CLIENT_MEMBER)
            sm->regroup_after_step = env->regroup_notice->regroup_after_step;
        break;
    case TETHER__ENVELOPE__BODY_CONTINUE_:
        rc = on_continue(sm, env->continue_);
        break;
    case TETHER__ENVELOPE__BODY_ACK:
        rc = on_ack(sm, env->request_id);
        break;
    case TETHER__ENVELOPE__BODY_ERROR:
        rc = on_error(sm, env->error, env->request_id, now_ms);
        break;
    default:
        TT_DEBUG("client", "ignoring %s from the coordinator", tt_wire_body_name(env->body_case));
        break;
    }
    return rc < 0 ? rc : (rc | ev);
}

int tt_client_sm_step(tt_client_sm_t *sm, int64_t step) {
    switch (sm->state) {
    case TT_CLIENT_FENCED:
        return TT_EFENCED;
    case TT_CLIENT_FAILED:
        return TT_EJOBFAILED;
    case TT_CLIENT_CLOSED:
        return sm->closed_rc;
    case TT_CLIENT_MEMBER:
        break;
    default:
        return TT_EINVAL;
    }
    sm->completed_step = step;
    if (sm->generation != sm->app_generation) {
        sm->app_generation = sm->generation;
        return TETHER_REGROUPED;
    }
    if (sm->regroup_after_step >= 0 && step >= sm->regroup_after_step)
        return TT_CLIENT_STEP_BOUNDARY;
    return TT_OK;
}

int tt_client_sm_wants_heartbeat(const tt_client_sm_t *sm) {
    return sm->state == TT_CLIENT_JOINING || sm->state == TT_CLIENT_MEMBER ||
           sm->state == TT_CLIENT_BOUNDARY;
}
