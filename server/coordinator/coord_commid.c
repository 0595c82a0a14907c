/* coord_commid: the relay of a generation's collective bootstrap id (the
 * NCCL unique id). Rank 0 of the generation offers it, every other member
 * asks for it; the id is checked against the generation on both sides, so
 * a member never builds a communicator with the id of another generation.
 * The coordinator keeps one id per job, the current generation's, in
 * memory and in its state file (so a restart loses it for nobody still
 * asking), and forgets it when the next generation's rank 0 offers; it
 * never reads the bytes. A request made before the offer may be held (a
 * long poll, CommIdRequest.wait_ms): this file owns those held requests
 * and answers each exactly once, when the id comes, when the generation
 * ends, or when its wait is over. */
#include "coord_internal.h"
#include "tt_log.h"
#include "tt_status.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The longest a request is held: a worker whose coordinator died holding
 * it asks the next one after this (and its own margin). */
#define COMMID_WAIT_MAX_MS 10000
/* Members waiting this long for rank 0 are logged (again every as long):
 * one line naming rank 0, where each member's log only says it waits. */
#define COMMID_NOTE_MS 10000

typedef struct coord_commid_wait {
    struct coord_commid_wait *next;
    char worker_id[TT_RDZV_ID_MAX];
    uint64_t req_id, deadline;
    size_t peer_len;
    uint8_t peer[TT_ZMQ_MAX_PEER];
} coord_commid_wait_t;

/* Who may take part: a member of the job's current generation (TT_OK with
 * its rank), else the status and a sentence for the Error. */
static int verdict(const coord_job_t *job, const char *job_id, const char *worker, uint64_t gen,
                   uint32_t *rank, char *msg, size_t msglen) {
    int rc = tt_rdzv_member_rank(job->rdzv, worker, gen, rank);
    if (rc == TT_ESTALE)
        snprintf(msg, msglen,
                 "generation %" PRIu64 " is not running (job %s: %s, generation %" PRIu64 ")", gen,
                 job_id, tt_rdzv_state_name(tt_rdzv_state(job->rdzv)),
                 tt_rdzv_generation(job->rdzv));
    else if (rc != TT_OK)
        snprintf(msg, msglen, "'%s' is not a member of generation %" PRIu64 " of job %s", worker,
                 gen, job_id);
    return rc;
}

/* As verdict, the Error sent here. */
static int member_or_error(const coord_req_t *q, coord_job_t *job, uint64_t gen, uint32_t *rank) {
    char msg[320];
    int rc = verdict(job, q->env->job_id, q->env->sender_id, gen, rank, msg, sizeof(msg));
    if (rc != TT_OK)
        coord_reply_error(q, rc, msg);
    return rc;
}

/* The running generation's rank 0 ("" when there is none). */
static void rank0_of(const coord_job_t *job, uint64_t now, tt_rdzv_member_info_t *out) {
    size_t total = 0;
    if (tt_rdzv_members(job->rdzv, now, out, 1, &total) != TT_OK || total == 0)
        memset(out, 0, sizeof(*out));
}

/* A CommIdReply for generation `gen`: the id once rank 0 offered it, else
 * who rank 0 is. */
static void send_reply(tt_coord_t *c, const coord_job_t *job, const uint8_t *peer, size_t peer_len,
                       uint64_t req, uint64_t gen, uint64_t now, int hold) {
    Tether__CommIdReply r = TETHER__COMM_ID_REPLY__INIT;
    tt_rdzv_member_info_t rank0;
    r.generation = gen;
    r.ready = job->comm_id_gen == gen;
    if (r.ready) {
        r.id.len = job->comm_id_len;
        r.id.data = (uint8_t *)job->comm_id;
    } else {
        rank0_of(job, now, &rank0);
        r.rank0_worker = rank0.m.worker_id;
        r.rank0_host = rank0.m.host;
    }
    tt_env_t env;
    tt_wire_env_init(&env, tt_rdzv_job_id(job->rdzv), c->id, gen, req);
    env.body_case = TETHER__ENVELOPE__BODY_COMM_ID_REPLY;
    env.comm_id_reply = &r;
    coord_send(c, peer, peer_len, &env, hold);
}

/* One held request's answer: what a request made now would get. */
static void answer(tt_coord_t *c, coord_job_t *job, const coord_commid_wait_t *w, uint64_t now,
                   int hold) {
    const char *job_id = tt_rdzv_job_id(job->rdzv);
    char msg[320];
    uint32_t rank;
    int rc = verdict(job, job_id, w->worker_id, job->comm_wait_gen, &rank, msg, sizeof(msg));
    if (rc == TT_OK)
        send_reply(c, job, w->peer, w->peer_len, w->req_id, job->comm_wait_gen, now, hold);
    else
        coord_send_error(c, w->peer, w->peer_len, job_id, w->req_id, rc, msg);
}

/* Answers the held requests (`all`, or those whose wait ended by `now`)
 * and recomputes comm_wait_next. */
static void answer_held(tt_coord_t *c, coord_job_t *job, int all, uint64_t now, int hold) {
    uint64_t next = UINT64_MAX;
    for (coord_commid_wait_t **pp = &job->comm_waits; *pp != NULL;) {
        coord_commid_wait_t *w = *pp;
        if (!all && w->deadline > now) {
            next = w->deadline < next ? w->deadline : next;
            pp = &w->next;
            continue;
        }
        answer(c, job, w, now, hold);
        *pp = w->next;
        free(w);
    }
    job->comm_wait_next = next;
}

/* Whether the held requests still wait: their generation runs and rank 0
 * has not offered its id. Else every one of them is due an answer. */
static int still_waiting(const coord_job_t *job) {
    return job->comm_waits != NULL && tt_rdzv_generation(job->rdzv) == job->comm_wait_gen &&
           tt_rdzv_state(job->rdzv) == TT_RDZV_RUNNING && job->comm_id_gen != job->comm_wait_gen;
}

void coord_commid_waiting(const coord_job_t *job, uint64_t now, coord_commid_waiting_t *out) {
    memset(out, 0, sizeof(*out));
    if (!still_waiting(job))
        return;
    for (const coord_commid_wait_t *w = job->comm_waits; w != NULL; w = w->next)
        out->n++;
    out->wait_ms = now > job->comm_wait_since ? now - job->comm_wait_since : 0;
    tt_rdzv_member_info_t rank0;
    rank0_of(job, now, &rank0);
    snprintf(out->from, sizeof(out->from), "%s", rank0.m.worker_id);
    snprintf(out->host, sizeof(out->host), "%s", rank0.m.host);
}

/* The one line that says who holds an NCCL init up. */
static void note_wait(coord_job_t *job, uint64_t now) {
    coord_commid_waiting_t w;
    coord_commid_waiting(job, now, &w);
    if (w.n == 0)
        return;
    TT_WARN("coord",
            "job %s: %u member(s) of generation %" PRIu64 " have waited %" PRIu64
            " s for its collective id: rank 0 (%s on %s) has not offered it",
            tt_rdzv_job_id(job->rdzv), w.n, job->comm_wait_gen, w.wait_ms / 1000, w.from, w.host);
}

void coord_commid_settle(tt_coord_t *c, coord_job_t *job, uint64_t now) {
    if (job->comm_waits == NULL)
        return;
    int over = !still_waiting(job);
    if (!over && now >= job->comm_wait_note) {
        note_wait(job, now);
        job->comm_wait_note = now + COMMID_NOTE_MS;
    }
    if (over || job->comm_wait_next <= now)
        answer_held(c, job, over, now, 0);
}

uint64_t coord_commid_deadline(const tt_coord_t *c) {
    uint64_t next = UINT64_MAX;
    for (size_t i = 0; i < c->njobs; i++) {
        const coord_job_t *job = &c->jobs[i];
        if (job->comm_waits != NULL && job->comm_wait_next < next)
            next = job->comm_wait_next;
    }
    return next;
}

void coord_commid_drop(coord_job_t *job) {
    while (job->comm_waits != NULL) {
        coord_commid_wait_t *w = job->comm_waits;
        job->comm_waits = w->next;
        free(w);
    }
}

/* Holds a request of a member of the running generation until the id
 * comes, the generation ends or `wait_ms` (capped) passes; a member
 * asking again replaces its earlier request, whose reply it no longer
 * waits for. TT_ENOMEM: answer now instead. */
static int hold_request(const coord_req_t *q, coord_job_t *job, uint64_t gen, uint32_t wait_ms) {
    coord_commid_settle(q->c, job, q->now); /* a list of an older generation goes first */
    coord_commid_wait_t *w = NULL, **pp = &job->comm_waits;
    for (; *pp != NULL; pp = &(*pp)->next) {
        if (strcmp((*pp)->worker_id, q->env->sender_id) == 0) {
            w = *pp;
            *pp = w->next;
            break;
        }
    }
    if (w == NULL && (w = calloc(1, sizeof(*w))) == NULL)
        return TT_ENOMEM;
    snprintf(w->worker_id, sizeof(w->worker_id), "%s", q->env->sender_id);
    w->req_id = q->env->request_id;
    w->deadline = q->now + (wait_ms < COMMID_WAIT_MAX_MS ? wait_ms : COMMID_WAIT_MAX_MS);
    w->peer_len = q->rx->peer_len;
    memcpy(w->peer, q->rx->peer, q->rx->peer_len);
    if (job->comm_waits == NULL)
        job->comm_wait_next = UINT64_MAX;
    if (job->comm_wait_gen != gen) { /* the generation's first request held */
        job->comm_wait_since = q->now;
        job->comm_wait_note = q->now + COMMID_NOTE_MS;
    }
    w->next = job->comm_waits;
    job->comm_waits = w;
    job->comm_wait_gen = gen;
    if (w->deadline < job->comm_wait_next)
        job->comm_wait_next = w->deadline;
    return TT_OK;
}

void coord_on_comm_id_offer(const coord_req_t *q) {
    coord_job_t *job = coord_job_or_error(q, TT_EFENCED);
    const Tether__CommIdOffer *o = q->env->comm_id_offer;
    uint32_t rank = 0;
    if (job == NULL || member_or_error(q, job, o->generation, &rank) != TT_OK)
        return;
    char msg[256];
    if (rank != 0) {
        snprintf(msg, sizeof(msg), "rank %u offered the id of generation %" PRIu64 ": rank 0 does",
                 rank, o->generation);
        coord_reply_error(q, TT_EFENCED, msg);
        return;
    }
    if (o->id.len == 0) {
        coord_reply_error(q, TT_EINVAL, "an empty id");
        return;
    }
    if (job->comm_id_gen == o->generation &&
        (job->comm_id_len != o->id.len || memcmp(job->comm_id, o->id.data, o->id.len) != 0)) {
        snprintf(msg, sizeof(msg),
                 "generation %" PRIu64 " already has another id: a communicator may be "
                 "building with it",
                 o->generation);
        coord_reply_error(q, TT_EINVAL, msg);
        return;
    }
    if (job->comm_id_gen != o->generation) { /* else a retried offer, stored already */
        job->comm_id_gen = o->generation;
        job->comm_id_len = o->id.len;
        memcpy(job->comm_id, o->id.data, o->id.len);
        TT_INFO("coord", "job %s: generation %" PRIu64 "'s collective id offered by %s (%zu bytes)",
                q->env->job_id, o->generation, q->env->sender_id, o->id.len);
        coord_request_save(q->c);
        /* Behind the same state write as the Ack (below). */
        if (job->comm_wait_gen == o->generation)
            answer_held(q->c, job, 1, q->now, 1);
    }
    /* Held behind the state write: acknowledged once a restarted
     * coordinator would still have it for the members yet to ask. */
    coord_send_ack(q->c, q->rx->peer, q->rx->peer_len, q->env->job_id, q->env->request_id, 1);
}

void coord_on_comm_id_request(const coord_req_t *q) {
    coord_job_t *job = coord_job_or_error(q, TT_EFENCED);
    const Tether__CommIdRequest *m = q->env->comm_id_request;
    uint32_t rank = 0;
    if (job == NULL || member_or_error(q, job, m->generation, &rank) != TT_OK)
        return;
    if (job->comm_id_gen != m->generation && m->wait_ms > 0 &&
        hold_request(q, job, m->generation, m->wait_ms) == TT_OK)
        return;
    send_reply(q->c, job, q->rx->peer, q->rx->peer_len, q->env->request_id, m->generation, q->now,
               0);
}
