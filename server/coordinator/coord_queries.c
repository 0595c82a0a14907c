/* coord_queries: answers to operator queries (tetherctl status, members).
 * They read rendezvous accessors only and never change state. */
#include "coord_internal.h"
#include "tt_status.h"

#include <stdlib.h>
#include <string.h>

/* js borrows strings from the job and from cw and fail (filled here). */
static void job_status(const coord_job_t *job, uint64_t now, Tether__JobStatus *js,
                       Tether__JobSettings *set, coord_commid_waiting_t *cw,
                       Tether__CheckpointFailure *fail) {
    const tt_rdzv_t *r = job->rdzv;
    coord_settings_to_pb(tt_rdzv_settings(r), set);
    tether__job_status__init(js);
    js->job_id = (char *)tt_rdzv_job_id(r);
    js->state = tt_rdzv_state(r);
    if (js->state == TT_RDZV_RUNNING && tt_rdzv_regroup_after_step(r) >= 0)
        js->state = TETHER__JOB_STATE__JOB_REGROUPING;
    js->generation = tt_rdzv_generation(r);
    js->members = tt_rdzv_member_count(r);
    js->waiting = tt_rdzv_waiter_count(r);
    js->failure = (char *)tt_rdzv_failure_reason(r);
    js->last_step = tt_rdzv_current_step(r);
    js->reached_step = tt_rdzv_last_committed_step(r);
    js->settings = set;
    js->epoch = job->epoch;
    js->epoch_examples = job->epoch_examples;
    js->epoch_size = job->epoch_size;
    coord_commid_waiting(job, now, cw);
    js->comm_id_waiting = cw->n;
    js->comm_id_wait_ms = cw->wait_ms;
    js->comm_id_from = cw->from;
    js->checkpoint_failures = job->ckpt.failures_since_commit;
    if (job->ckpt.failures_since_commit > 0) {
        coord_ckpt_fail_to_pb(&job->ckpt.last_fail, fail);
        js->checkpoint_failure = fail;
    }
}

void coord_on_status(const coord_req_t *q) {
    size_t n = q->c->njobs;
    Tether__JobStatus *js = calloc(n + 1, sizeof(*js));
    Tether__JobStatus **ptrs = calloc(n + 1, sizeof(*ptrs));
    Tether__JobSettings *set = calloc(n + 1, sizeof(*set));
    coord_commid_waiting_t *cw = calloc(n + 1, sizeof(*cw));
    Tether__CheckpointFailure *fail = calloc(n + 1, sizeof(*fail));
    if (js == NULL || ptrs == NULL || set == NULL || cw == NULL || fail == NULL) {
        coord_reply_error(q, TT_ENOMEM, "out of memory");
    } else {
        for (size_t i = 0; i < n; i++) {
            job_status(&q->c->jobs[i], q->now, &js[i], &set[i], &cw[i], &fail[i]);
            ptrs[i] = &js[i];
        }
        Tether__StatusReply r = TETHER__STATUS_REPLY__INIT;
        r.n_jobs = n;
        r.jobs = ptrs;
        Tether__ShardInfo *shards = NULL, **shard_ptrs = NULL;
        if (coord_shard_infos(q->c, q->now, &shards, &shard_ptrs, &r.n_shards) == TT_OK)
            r.shards = shard_ptrs;
        tt_env_t env;
        coord_init_reply(q, &env, 0);
        env.body_case = TETHER__ENVELOPE__BODY_STATUS_REPLY;
        env.status_reply = &r;
        coord_reply(q, &env);
        free(shards);
        free(shard_ptrs);
    }
    free(js);
    free(ptrs);
    free(set);
    free(cw);
    free(fail);
}

static void fill_members(const tt_rdzv_member_info_t *info, size_t n, Tether__MemberStatus *ms,
                         Tether__MemberStatus **ptrs) {
    for (size_t i = 0; i < n; i++) {
        tether__member_status__init(&ms[i]);
        ms[i].rank = info[i].m.rank;
        ms[i].worker_id = (char *)info[i].m.worker_id;
        ms[i].host = (char *)info[i].m.host;
        ms[i].endpoint = (char *)info[i].m.endpoint;
        ms[i].heartbeat_age_ms = info[i].heartbeat_age_ms;
        ms[i].last_step = info[i].m.last_step;
        ms[i].incarnation = info[i].m.incarnation;
        ms[i].step_ms = info[i].step_ms;
        ms[i].wait_ms = info[i].wait_ms;
        ms[i].straggler = info[i].straggler;
        ms[i].draining = info[i].draining;
        ptrs[i] = &ms[i];
    }
}

void coord_on_members(const coord_req_t *q) {
    coord_job_t *job = coord_find_job(q->c, q->env->job_id);
    if (job == NULL) {
        coord_reply_error(q, TT_EJOB, "no such job");
        return;
    }
    size_t cap = tt_rdzv_member_count(job->rdzv), n = 0;
    tt_rdzv_member_info_t *info = calloc(cap + 1, sizeof(*info));
    Tether__MemberStatus *ms = calloc(cap + 1, sizeof(*ms));
    Tether__MemberStatus **ptrs = calloc(cap + 1, sizeof(*ptrs));
    if (info == NULL || ms == NULL || ptrs == NULL) {
        coord_reply_error(q, TT_ENOMEM, "out of memory");
    } else {
        tt_rdzv_members(job->rdzv, q->now, info, cap, &n);
        n = n < cap ? n : cap;
        fill_members(info, n, ms, ptrs);
        Tether__MembersReply r = TETHER__MEMBERS_REPLY__INIT;
        r.generation = tt_rdzv_generation(job->rdzv);
        r.n_members = n;
        r.members = ptrs;
        tt_env_t env;
        coord_init_reply(q, &env, r.generation);
        env.body_case = TETHER__ENVELOPE__BODY_MEMBERS_REPLY;
        env.members_reply = &r;
        coord_reply(q, &env);
    }
    free(info);
    free(ms);
    free(ptrs);
}
