/* coord_commid: the relay of a generation's collective bootstrap id (the
 * NCCL unique id). Rank 0 of the generation offers it, every other member
 * asks for it until it is there; the id is checked against the generation
 * on both sides, so a member never builds a communicator with the id of
 * another generation. The coordinator keeps one id per job, the current
 * generation's, in memory and in its state file (so a restart loses it
 * for nobody still asking), and forgets it when the next generation's
 * rank 0 offers; it never reads the bytes. */
#include "coord_internal.h"
#include "tt_log.h"
#include "tt_status.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* Who may take part: a member of the job's current generation (TT_OK with
 * its rank), else the Error is sent here and the status returned. */
static int member_or_error(const coord_req_t *q, coord_job_t *job, uint64_t gen, uint32_t *rank) {
    int rc = tt_rdzv_member_rank(job->rdzv, q->env->sender_id, gen, rank);
    if (rc == TT_OK)
        return TT_OK;
    char msg[320];
    if (rc == TT_ESTALE)
        snprintf(msg, sizeof(msg),
                 "generation %" PRIu64 " is not running (job %s: %s, generation %" PRIu64 ")", gen,
                 q->env->job_id, tt_rdzv_state_name(tt_rdzv_state(job->rdzv)),
                 tt_rdzv_generation(job->rdzv));
    else
        snprintf(msg, sizeof(msg), "'%s' is not a member of generation %" PRIu64 " of job %s",
                 q->env->sender_id, gen, q->env->job_id);
    coord_reply_error(q, rc, msg);
    return rc;
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
    }
    /* Held behind the state write: acknowledged once a restarted
     * coordinator would still have it for the members yet to ask. */
    coord_send_ack(q->c, q->rx->peer, q->rx->peer_len, q->env->job_id, q->env->request_id, 1);
}

void coord_on_comm_id_request(const coord_req_t *q) {
    coord_job_t *job = coord_job_or_error(q, TT_EFENCED);
    uint64_t gen = q->env->comm_id_request->generation;
    uint32_t rank = 0;
    if (job == NULL || member_or_error(q, job, gen, &rank) != TT_OK)
        return;
    Tether__CommIdReply r = TETHER__COMM_ID_REPLY__INIT;
    r.generation = gen;
    r.ready = job->comm_id_gen == gen;
    if (r.ready) {
        r.id.len = job->comm_id_len;
        r.id.data = job->comm_id;
    }
    tt_env_t env;
    coord_init_reply(q, &env, gen);
    env.body_case = TETHER__ENVELOPE__BODY_COMM_ID_REPLY;
    env.comm_id_reply = &r;
    coord_reply(q, &env);
}
