/* coord_handlers: one handler per request body. Each validates what the
 * wire decoder cannot know (job exists, routing id matches the worker),
 * calls the rendezvous, answers or leaves the answer to the events it
 * produced, and never lets a bad message change state. */
#include "coord_internal.h"
#include "shards.h"
#include "tt_clock.h"
#include "tt_log.h"
#include "tt_status.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void coord_reply_error(const coord_req_t *q, int code, const char *msg) {
    coord_send_error(q->c, q->rx->peer, q->rx->peer_len, q->env->job_id, q->env->request_id, code,
                     msg);
}

void coord_reply(const coord_req_t *q, tt_env_t *env) {
    coord_send(q->c, q->rx->peer, q->rx->peer_len, env, 0);
}

void coord_init_reply(const coord_req_t *q, tt_env_t *env, uint64_t gen) {
    tt_wire_env_init(env, q->env->job_id, q->c->id, gen, q->env->request_id);
}

/* Workers are addressed by "worker-<id>.<incarnation>": parse it back so
 * requests that do not carry the incarnation can name the process. */
static int peer_incarnation(const coord_req_t *q, uint64_t *inc) {
    char want[TT_ZMQ_MAX_PEER + 1];
    size_t n = q->rx->peer_len;
    memcpy(want, q->rx->peer, n);
    want[n] = '\0';
    const char *dot = strrchr(want, '.');
    size_t idlen = strlen(q->env->sender_id);
    if (dot == NULL || strncmp(want, "worker-", 7) != 0 || (size_t)(dot - want) != 7 + idlen ||
        strncmp(want + 7, q->env->sender_id, idlen) != 0)
        return TT_EINVAL;
    char *end = NULL;
    *inc = strtoull(dot + 1, &end, 10);
    return (end != NULL && *end == '\0') ? TT_OK : TT_EINVAL;
}

coord_job_t *coord_job_or_error(const coord_req_t *q, int code) {
    coord_job_t *job = coord_find_job(q->c, q->env->job_id);
    if (job == NULL) {
        char msg[256];
        snprintf(msg, sizeof(msg),
                 "unknown job '%s' (not created, or coordinator state lost): "
                 "join again",
                 q->env->job_id);
        coord_reply_error(q, code, msg);
    }
    return job;
}

static void settings_from_pb(const Tether__JobSettings *p, tt_rdzv_settings_t *s) {
    *s = tt_rdzv_settings_default();
    if (p->min_workers)
        s->min_workers = p->min_workers;
    if (p->max_workers)
        s->max_workers = p->max_workers;
    if (p->last_call_ms)
        s->last_call_ms = p->last_call_ms;
    if (p->heartbeat_ms)
        s->heartbeat_ms = p->heartbeat_ms;
    if (p->heartbeat_timeout_ms)
        s->heartbeat_timeout_ms = p->heartbeat_timeout_ms;
    if (p->global_batch)
        s->global_batch = p->global_batch;
    if (p->join_timeout_ms)
        s->join_timeout_ms = p->join_timeout_ms;
    /* 0 means "off" for these, so they are taken as sent. */
    s->checkpoint_every_steps = p->checkpoint_every_steps;
    s->checkpoint_every_ms = p->checkpoint_every_ms;
    s->checkpoint_keep = p->checkpoint_keep;
    s->max_regroups_per_hour = p->max_regroups_per_hour;
    s->flap_cooldown_ms = p->flap_cooldown_ms;
}

static coord_job_t *create_job(const coord_req_t *q, const tt_rdzv_settings_t *s, char *err,
                               size_t errlen, int *rc) {
    tt_rdzv_opts_t o = {.job_id = q->env->job_id,
                        .settings = *s,
                        .now_ms = q->now,
                        .after_generation = coord_forgotten_generation(q->c, q->env->job_id)};
    tt_rdzv_t *r = NULL;
    *rc = tt_rdzv_create(&r, &o, err, errlen);
    if (*rc == TT_OK)
        *rc = coord_add_job(q->c, &r);
    tt_rdzv_destroy(&r);
    if (*rc != TT_OK)
        return NULL;
    coord_unforget(q->c, q->env->job_id); /* the new record carries the generations on */
    TT_INFO("coord", "job %s created: min %u max %u workers, last call %u ms, heartbeat %u/%u ms",
            q->env->job_id, s->min_workers, s->max_workers, s->last_call_ms, s->heartbeat_ms,
            s->heartbeat_timeout_ms);
    coord_request_save(q->c);
    return coord_find_job(q->c, q->env->job_id);
}

static void on_join(const coord_req_t *q) {
    const Tether__JoinRequest *j = q->env->join;
    char err[512] = "";
    uint64_t inc;
    if (q->env->job_id[0] == '\0' || strcmp(q->env->sender_id, j->worker_id) != 0 ||
        peer_incarnation(q, &inc) != TT_OK || inc != j->incarnation) {
        coord_reply_error(q, TT_EINVAL,
                          "join needs a job id, sender id = worker id, and the routing id "
                          "worker-<worker_id>.<incarnation>");
        return;
    }
    tt_rdzv_settings_t s;
    settings_from_pb(j->settings, &s);
    int rc = TT_OK;
    coord_job_t *job = coord_find_job(q->c, q->env->job_id);
    if (job == NULL)
        job = create_job(q, &s, err, sizeof(err), &rc);
    if (job != NULL) {
        tt_rdzv_join_t jr = {.worker_id = j->worker_id,
                             .incarnation = j->incarnation,
                             .host = j->host,
                             .endpoint = j->endpoint,
                             .last_step = j->last_step,
                             .settings = &s};
        rc = tt_rdzv_join(job->rdzv, &jr, q->now, err, sizeof(err));
    }
    if (rc != TT_OK) {
        /* A cool-down refusal is routine (the client retries), not a fault. */
        if (rc == TT_EBUSY || rc == TT_EJOBDONE)
            TT_INFO("coord", "join of %s to job %s refused: %s", j->worker_id, q->env->job_id, err);
        else
            TT_WARN("coord", "join of %s to job %s refused: %s", j->worker_id, q->env->job_id, err);
        coord_reply_error(q, rc, err[0] ? err : tt_strerror(rc));
        return;
    }
    coord_conn_note(q->c, q->rx->src_fd, q->env->job_id, j->worker_id, j->incarnation);
    coord_drain_events(q->c, job);
}

void coord_send_heartbeat_reply(tt_coord_t *c, const uint8_t *peer, size_t peer_len,
                                const coord_job_t *job, const tt_rdzv_hb_reply_t *hr,
                                uint64_t req) {
    Tether__HeartbeatReply r = TETHER__HEARTBEAT_REPLY__INIT;
    r.generation = hr->generation;
    r.regroup_after_step = hr->regroup_after_step;
    r.job_state = hr->state;
    /* How workers learn of checkpoint requests (timer and tetherctl). */
    r.checkpoint_requested = job->ckpt.requested;
    r.checkpoint_served = job->ckpt.served;
    tt_env_t env;
    tt_wire_env_init(&env, tt_rdzv_job_id(job->rdzv), c->id, hr->generation, req);
    env.body_case = TETHER__ENVELOPE__BODY_HEARTBEAT_REPLY;
    env.heartbeat_reply = &r;
    coord_send(c, peer, peer_len, &env, 0);
}

static void on_heartbeat(const coord_req_t *q) {
    coord_job_t *job = coord_job_or_error(q, TT_EFENCED);
    if (job == NULL)
        return;
    const Tether__Heartbeat *h = q->env->heartbeat;
    /* Only the running generation's members say where the job is: after
     * a regroup (progress_step reset) the first of them may be behind. */
    int current = q->env->generation == tt_rdzv_generation(job->rdzv);
    if (h->epoch > 0 && current && (h->completed_step >= job->progress_step || job->epoch == 0)) {
        job->progress_step = h->completed_step;
        job->epoch = h->epoch;
        job->epoch_examples = h->epoch_examples;
        job->epoch_size = h->epoch_size;
    }
    tt_rdzv_hb_reply_t hr;
    int rc = tt_rdzv_heartbeat(job->rdzv, q->env->sender_id, h->incarnation, q->env->generation,
                               h->completed_step, !h->stopped, q->now, &hr);
    coord_conn_note(q->c, q->rx->src_fd, q->env->job_id, q->env->sender_id, h->incarnation);
    if (rc == TT_OK || rc == TT_ESTALE)
        tt_rdzv_step_times(job->rdzv, q->env->sender_id, h->incarnation, h->steps, h->step_us,
                           h->wait_us);
    if (rc == TT_OK || rc == TT_ESTALE || rc == TT_EPROTO)
        coord_send_heartbeat_reply(q->c, q->rx->peer, q->rx->peer_len, job, &hr,
                                   q->env->request_id);
    if (rc == TT_ESTALE)
        coord_send_generation(q->c, job, q->env->sender_id, h->incarnation, 0, 0);
    else if (rc == TT_EFENCED)
        coord_reply_error(q, rc,
                          "not a member of this job (declared dead or never joined): join again");
    else if (rc == TT_EDRAINED)
        coord_reply_error(q, rc, "drained from this job by the operator: not to join again");
    else if (rc == TT_EJOBFAILED || rc == TT_EJOBDONE)
        coord_reply_error(q, rc, tt_rdzv_end_reason(job->rdzv));
    if (q->c->dirty_since_ms == 0 && q->c->state_path[0] != '\0')
        q->c->dirty_since_ms = q->now;
    coord_drain_events(q->c, job);
}

static void on_boundary(const coord_req_t *q) {
    coord_job_t *job = coord_job_or_error(q, TT_EFENCED);
    if (job == NULL)
        return;
    int rc = tt_rdzv_at_boundary(job->rdzv, q->env->sender_id, q->env->generation,
                                 q->env->boundary->completed_step, q->now);
    if (rc != TT_OK)
        coord_reply_error(q, rc, tt_strerror(rc));
    coord_drain_events(q->c, job);
}

void coord_reply_ack(const coord_req_t *q) {
    coord_send_ack(q->c, q->rx->peer, q->rx->peer_len, q->env->job_id, q->env->request_id, 0);
}

static void on_report(const coord_req_t *q) {
    coord_job_t *job = coord_job_or_error(q, TT_EJOB);
    if (job == NULL)
        return;
    const Tether__ReportFailure *f = q->env->report_failure;
    tt_rdzv_report_t rep = {.reporter_id = q->env->sender_id,
                            .generation = q->env->generation,
                            .suspect_rank = f->suspect_rank,
                            .reason = f->reason};
    int confirmed = 0;
    int rc = tt_rdzv_report_failure(job->rdzv, &rep, q->now, &confirmed);
    char who[32] = "every other rank";
    if (f->suspect_rank != TT_RDZV_SUSPECT_ANY)
        snprintf(who, sizeof(who), "rank %u", f->suspect_rank);
    TT_INFO("coord", "job %s: %s reports %s (%s): %s, %d confirmed", q->env->job_id,
            q->env->sender_id, who, f->reason, tt_status_name(rc), confirmed);
    if (rc == TT_OK)
        coord_reply_ack(q);
    else
        coord_reply_error(q, rc, tt_strerror(rc));
    coord_drain_events(q->c, job);
}

/* The Leave reason of a worker that completed the job's run. */
#define COORD_LEAVE_FINISHED "finished"

static void on_leave(const coord_req_t *q) {
    coord_job_t *job = coord_job_or_error(q, TT_EJOB);
    uint64_t inc;
    if (job == NULL)
        return;
    if (peer_incarnation(q, &inc) != TT_OK) {
        coord_reply_error(q, TT_EINVAL,
                          "leave from a routing id that is not worker-<id>.<incarnation>");
        return;
    }
    /* "finished": the worker completed the run, so the job has (docs/protocol.md). */
    const char *why = q->env->leave->reason ? q->env->leave->reason : "";
    int rc = strcmp(why, COORD_LEAVE_FINISHED) == 0
                 ? tt_rdzv_finish(job->rdzv, q->env->sender_id, inc, q->now)
                 : tt_rdzv_leave(job->rdzv, q->env->sender_id, inc, q->now);
    TT_INFO("coord", "job %s: %s leaves (%s): %s", q->env->job_id, q->env->sender_id, why,
            tt_status_name(rc));
    /* Gone is gone: a leave from a job that ended needs no error. */
    if (rc == TT_OK || rc == TT_ENOTFOUND || rc == TT_EJOBDONE)
        coord_reply_ack(q);
    else
        coord_reply_error(q, rc, tt_strerror(rc));
    coord_drain_events(q->c, job);
}

/* tetherctl forget JOB: a finished or failed job's record goes, so that its
 * id can start a new run (a FINISHED job refuses every join). Its
 * checkpoints stay on disk. The Ack waits for the state write without it. */
static void on_forget(const coord_req_t *q) {
    char msg[320];
    coord_job_t *job = coord_find_job(q->c, q->env->job_id);
    tt_rdzv_state_t st = job ? tt_rdzv_state(job->rdzv) : TT_RDZV_WAITING;
    if (job == NULL) {
        snprintf(msg, sizeof(msg), "unknown job '%s' (see 'tetherctl status')", q->env->job_id);
        coord_reply_error(q, TT_EJOB, msg);
    } else if (st != TT_RDZV_FINISHED && st != TT_RDZV_FAILED) {
        snprintf(msg, sizeof(msg),
                 "job '%s' is %s (generation %" PRIu64 ", %u members): only a finished or failed "
                 "job can be forgotten",
                 q->env->job_id, tt_rdzv_state_name(st), tt_rdzv_generation(job->rdzv),
                 tt_rdzv_member_count(job->rdzv));
        coord_reply_error(q, TT_EBUSY, msg);
    } else if (job->commit_busy) {
        coord_reply_error(q, TT_EAGAIN,
                          "a checkpoint commit of this job is in progress: try again");
    } else if (coord_note_forgotten(q->c, q->env->job_id, tt_rdzv_generation(job->rdzv)) != TT_OK) {
        coord_reply_error(q, TT_ENOMEM, "out of memory");
    } else {
        TT_INFO("coord", "job %s forgotten (%s, last step %" PRId64 ") at the request of %s",
                q->env->job_id, tt_rdzv_state_name(st), tt_rdzv_last_committed_step(job->rdzv),
                q->env->sender_id);
        if (q->c->shards != NULL)
            tt_shards_forget(q->c->shards, q->env->job_id);
        coord_remove_job(q->c, job);
        coord_request_save(q->c);
        coord_send_ack(q->c, q->rx->peer, q->rx->peer_len, q->env->job_id, q->env->request_id, 1);
    }
}

/* tetherctl drain JOB WORKER [--now]: tt_rdzv_drain; the Ack says the
 * drain is set, not done (tetherctl --wait watches the members). */
static void on_drain(const coord_req_t *q) {
    char msg[512] = "";
    coord_job_t *job = coord_find_job(q->c, q->env->job_id);
    const Tether__DrainWorker *d = q->env->drain;
    if (job == NULL) {
        snprintf(msg, sizeof(msg), "unknown job '%s' (see 'tetherctl status')", q->env->job_id);
        coord_reply_error(q, TT_EJOB, msg);
        return;
    }
    int rc = tt_rdzv_drain(job->rdzv, d->worker_id, d->now, q->now, msg, sizeof(msg));
    if (rc != TT_OK) {
        coord_reply_error(q, rc, msg[0] ? msg : tt_strerror(rc));
        return;
    }
    TT_INFO("coord", "job %s: drain of %s (%s) asked by %s", q->env->job_id, d->worker_id,
            d->now ? "at once" : "at the next step boundary", q->env->sender_id);
    coord_reply_ack(q);
    coord_drain_events(q->c, job);
}

typedef void (*handler_fn)(const coord_req_t *q);

static handler_fn handler_for(int body) {
    switch (body) {
    case TETHER__ENVELOPE__BODY_JOIN:
        return on_join;
    case TETHER__ENVELOPE__BODY_HEARTBEAT:
        return on_heartbeat;
    case TETHER__ENVELOPE__BODY_BOUNDARY:
        return on_boundary;
    case TETHER__ENVELOPE__BODY_REPORT_FAILURE:
        return on_report;
    case TETHER__ENVELOPE__BODY_LEAVE:
        return on_leave;
    case TETHER__ENVELOPE__BODY_STATUS:
        return coord_on_status;
    case TETHER__ENVELOPE__BODY_MEMBERS:
        return coord_on_members;
    case TETHER__ENVELOPE__BODY_FORGET:
        return on_forget;
    case TETHER__ENVELOPE__BODY_DRAIN:
        return on_drain;
    case TETHER__ENVELOPE__BODY_COMM_ID_OFFER:
        return coord_on_comm_id_offer;
    case TETHER__ENVELOPE__BODY_COMM_ID_REQUEST:
        return coord_on_comm_id_request;
    case TETHER__ENVELOPE__BODY_DUMP:
        return coord_on_dump;
    case TETHER__ENVELOPE__BODY_DUMP_REPORT:
        return coord_on_dump_report;
    case TETHER__ENVELOPE__BODY_SHARD_HEARTBEAT:
        return coord_on_shard_heartbeat;
    case TETHER__ENVELOPE__BODY_SHARDS:
        return coord_on_shards;
    case TETHER__ENVELOPE__BODY_DECLARE_TENSORS:
        return coord_on_declare;
    case TETHER__ENVELOPE__BODY_PLACEMENT:
        return coord_on_placement;
    case TETHER__ENVELOPE__BODY_SHARD_STALL:
        return coord_on_shard_stall;
    case TETHER__ENVELOPE__BODY_CHECKPOINT_REQUEST:
        return coord_on_checkpoint_request;
    case TETHER__ENVELOPE__BODY_CHECKPOINT_COMMIT:
        return coord_on_checkpoint_commit;
    case TETHER__ENVELOPE__BODY_CHECKPOINT_FAILURE:
        return coord_on_checkpoint_failure;
    case TETHER__ENVELOPE__BODY_CHECKPOINTS:
        return coord_on_checkpoints;
    default:
        return NULL;
    }
}

void coord_on_router(void *sock, void *arg) {
    tt_coord_t *c = arg;
    tt_zmq_rx_t rx;
    char err[256] = "";
    int rc = tt_zmq_recv(sock, 1, 1, NULL, &rx, err, sizeof(err));
    if (rc == TT_EAGAIN || rc == TT_ESYS)
        return;
    if (rc != TT_OK) {
        char who[TT_ZMQ_PEER_NAME_MAX];
        TT_WARN("coord", "rejected message from %s: %s (%s)",
                tt_zmq_peer_name(rx.peer, rx.peer_len, who, sizeof(who)), err, tt_status_name(rc));
        coord_send_error(c, rx.peer, rx.peer_len, "", 0, rc, err);
        return;
    }
    coord_req_t q = {.c = c, .rx = &rx, .env = rx.env, .now = tt_clock_mono_ms()};
    (void)coord_check_stall(c, q.now); /* rearmed below */
    handler_fn h = handler_for(rx.env->body_case);
    if (h != NULL) {
        h(&q);
    } else {
        snprintf(err, sizeof(err), "the coordinator does not accept '%s' messages",
                 tt_wire_body_name(rx.env->body_case));
        coord_reply_error(&q, TT_EPROTO, err);
    }
    tt_zmq_rx_close(&rx);
    coord_rearm(c);
}
