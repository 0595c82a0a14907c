/* coord_ckpt: the coordinator's side of coordinated checkpoints
 * (docs/checkpoints.md). It answers CheckpointRequest (tetherctl asks for
 * one), CheckpointCommit (rank 0 reports every part durable),
 * CheckpointFailure (a worker could not write its part) and
 * CheckpointsRequest (the committed list and the newest failure), fires each running job's timer
 * schedule, pushes new requests to the members, and commits: checks the
 * parts, stores the manifest (the commit point), moves `latest` and applies
 * retention on the libuv pool, then records the checkpoint in the job's
 * book (ckpt_book.c) and makes it durable before the Ack goes out. It does
 * not write parts (workers do) or decide the step (workers agree on it at a
 * boundary). */
#include "coord_internal.h"
#include "tt_ckpt_dir.h"
#include "tt_clock.h"
#include "tt_log.h"
#include "tt_status.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* One commit on its way through the pool. Everything the reply needs is
 * copied: the request's frames are gone by the time the work finishes, and
 * the job table may have been reallocated (so the job is found by id). */
typedef struct ckpt_commit {
    uv_work_t work;
    tt_coord_t *c;
    char job_id[TT_RDZV_ID_MAX];
    char root[TT_WIRE_MAX_TEXT + 1];
    char dir[TT_CKPT_BOOK_DIR_MAX];
    tt_manifest_t m;
    uint64_t request; /* the checkpoint request it serves */
    uint32_t keep;
    uint8_t peer[TT_ZMQ_MAX_PEER];
    size_t peer_len;
    uint64_t request_id; /* of the envelope, for the reply */
    char sender[TT_RDZV_ID_MAX];
    int rc;
    char err[768];
} ckpt_commit_t;

/* ---- conversions ---- */

void coord_ckpt_rec_to_pb(const tt_ckpt_rec_t *r, Tether__CheckpointRecord *p) {
    tether__checkpoint_record__init(p);
    p->checkpoint_id = (char *)r->id;
    p->dir = (char *)r->dir;
    p->step = r->step;
    p->bytes = r->bytes;
    p->created_unix_ms = r->created_unix_ms;
    p->duration_ms = r->duration_ms;
    p->committed_unix_ms = r->committed_unix_ms;
}

int coord_ckpt_rec_from_pb(const Tether__CheckpointRecord *p, tt_ckpt_rec_t *r) {
    memset(r, 0, sizeof(*r));
    if (p->checkpoint_id == NULL || p->dir == NULL || strlen(p->checkpoint_id) >= sizeof(r->id) ||
        strlen(p->dir) >= sizeof(r->dir))
        return TT_ECORRUPT;
    memcpy(r->id, p->checkpoint_id, strlen(p->checkpoint_id) + 1);
    memcpy(r->dir, p->dir, strlen(p->dir) + 1);
    r->step = p->step;
    r->bytes = p->bytes;
    r->created_unix_ms = p->created_unix_ms;
    r->duration_ms = p->duration_ms;
    r->committed_unix_ms = p->committed_unix_ms;
    return TT_OK;
}

void coord_ckpt_fail_to_pb(const tt_ckpt_fail_t *f, Tether__CheckpointFailure *p) {
    tether__checkpoint_failure__init(p);
    p->checkpoint_id = (char *)f->id;
    p->step = f->step;
    p->request = f->request;
    p->reason = (char *)f->reason;
    p->worker_id = (char *)f->worker;
    p->unix_ms = f->unix_ms;
}

/* ---- CheckpointRequest ---- */

/* Members of a running job hear of a new request at once, in a pushed
 * HeartbeatReply, instead of at their next heartbeat. */
static void push_counters(tt_coord_t *c, const coord_job_t *job, uint64_t now) {
    if (tt_rdzv_state(job->rdzv) != TT_RDZV_RUNNING)
        return;
    size_t cap = tt_rdzv_member_count(job->rdzv), n = 0;
    tt_rdzv_member_info_t *info = calloc(cap + 1, sizeof(*info));
    if (info == NULL)
        return;
    tt_rdzv_members(job->rdzv, now, info, cap, &n);
    tt_rdzv_hb_reply_t hr = {.generation = tt_rdzv_generation(job->rdzv),
                             .state = tt_rdzv_state(job->rdzv),
                             .regroup_after_step = tt_rdzv_regroup_after_step(job->rdzv)};
    for (size_t i = 0; i < n && i < cap; i++) {
        uint8_t peer[TT_ZMQ_MAX_PEER];
        size_t len;
        if (coord_worker_peer(info[i].m.worker_id, info[i].m.incarnation, peer, &len) == TT_OK)
            coord_send_heartbeat_reply(c, peer, len, job, &hr, 0);
    }
    free(info);
}

/* The envelope's job, or NULL after answering Error{EJOB}. */
static coord_job_t *known_job(const coord_req_t *q) {
    coord_job_t *job = coord_find_job(q->c, q->env->job_id);
    if (job == NULL) {
        char msg[256];
        snprintf(msg, sizeof(msg), "unknown job '%s' (see 'tetherctl status')", q->env->job_id);
        coord_reply_error(q, TT_EJOB, msg);
    }
    return job;
}

/* The job, or NULL after answering the error that says why it takes no
 * checkpoints (unknown, keep 0, or ended when !ended_ok). */
static coord_job_t *job_taking_checkpoints(const coord_req_t *q, int ended_ok) {
    char msg[320];
    coord_job_t *job = known_job(q);
    if (job == NULL)
        return NULL;
    if (tt_rdzv_settings(job->rdzv)->checkpoint_keep == 0) {
        snprintf(msg, sizeof(msg),
                 "job '%s' takes no checkpoints: start its workers with --checkpoint-dir",
                 q->env->job_id);
        coord_reply_error(q, TT_EINVAL, msg);
        return NULL;
    }
    tt_rdzv_state_t st = tt_rdzv_state(job->rdzv);
    if (!ended_ok && (st == TT_RDZV_FAILED || st == TT_RDZV_FINISHED)) {
        coord_reply_error(q, st == TT_RDZV_FAILED ? TT_EJOBFAILED : TT_EJOBDONE,
                          tt_rdzv_end_reason(job->rdzv));
        return NULL;
    }
    return job;
}

void coord_on_checkpoint_request(const coord_req_t *q) {
    coord_job_t *job = job_taking_checkpoints(q, 0);
    if (job == NULL)
        return;
    uint64_t n = tt_ckpt_book_request(&job->ckpt, q->now);
    TT_INFO("coord", "job %s: checkpoint request %" PRIu64 " from %s", q->env->job_id, n,
            q->env->sender_id);
    coord_request_save(q->c);
    push_counters(q->c, job, q->now);
    Tether__CheckpointRequestReply r = TETHER__CHECKPOINT_REQUEST_REPLY__INIT;
    r.request = n;
    tt_env_t env;
    coord_init_reply(q, &env, 0);
    env.body_case = TETHER__ENVELOPE__BODY_CHECKPOINT_REQUEST_REPLY;
    env.checkpoint_request_reply = &r;
    coord_send(q->c, q->rx->peer, q->rx->peer_len, &env, 1);
}

/* ---- CheckpointsRequest ---- */

void coord_on_checkpoints(const coord_req_t *q) {
    coord_job_t *job = known_job(q);
    if (job == NULL)
        return;
    const tt_ckpt_book_t *b = &job->ckpt;
    Tether__CheckpointRecord *recs = calloc(b->n + 1, sizeof(*recs));
    Tether__CheckpointRecord **ptrs = calloc(b->n + 1, sizeof(*ptrs));
    if (recs == NULL || ptrs == NULL) {
        coord_reply_error(q, TT_ENOMEM, "out of memory");
    } else {
        for (size_t i = 0; i < b->n; i++) {
            coord_ckpt_rec_to_pb(&b->recs[i], &recs[i]);
            ptrs[i] = &recs[i];
        }
        Tether__JobSettings set;
        coord_settings_to_pb(tt_rdzv_settings(job->rdzv), &set);
        Tether__CheckpointsReply r = TETHER__CHECKPOINTS_REPLY__INIT;
        r.n_checkpoints = b->n;
        r.checkpoints = ptrs;
        r.requested = b->requested;
        r.served = b->served;
        r.settings = &set;
        r.failures = b->failures;
        r.failures_since_commit = b->failures_since_commit;
        Tether__CheckpointFailure last;
        if (b->failures > 0) {
            coord_ckpt_fail_to_pb(&b->last_fail, &last);
            r.last_failure = &last;
        }
        tt_env_t env;
        coord_init_reply(q, &env, 0);
        env.body_case = TETHER__ENVELOPE__BODY_CHECKPOINTS_REPLY;
        env.checkpoints_reply = &r;
        coord_reply(q, &env);
    }
    free(recs);
    free(ptrs);
}

/* ---- CheckpointFailure ---- */

/* Any member, of this generation or an older one (its disk failed all the
 * same), may report; a stranger to the job may not. */
static int failure_sender_ok(const coord_req_t *q, coord_job_t *job) {
    int rc = tt_rdzv_may_commit(job->rdzv, q->env->sender_id, q->env->generation);
    if (rc == TT_OK || rc == TT_ESTALE)
        return 1;
    char msg[320];
    snprintf(msg, sizeof(msg), "checkpoint failure report from %s: not a member of job '%s'",
             q->env->sender_id, q->env->job_id);
    coord_reply_error(q, TT_EFENCED, msg);
    return 0;
}

void coord_on_checkpoint_failure(const coord_req_t *q) {
    coord_job_t *job = job_taking_checkpoints(q, 1);
    if (job == NULL || !failure_sender_ok(q, job))
        return;
    const Tether__CheckpointFailure *p = q->env->checkpoint_failure;
    tt_ckpt_fail_t f = {.step = p->step, .request = p->request, .unix_ms = tt_clock_wall_ms()};
    snprintf(f.id, sizeof(f.id), "%s", p->checkpoint_id);
    snprintf(f.worker, sizeof(f.worker), "%s", q->env->sender_id);
    snprintf(f.reason, sizeof(f.reason), "%s", p->reason ? p->reason : "");
    const tt_ckpt_book_t *b = &job->ckpt;
    if (tt_ckpt_book_failed(&job->ckpt, &f) == 1) {
        const tt_ckpt_rec_t *newest = tt_ckpt_book_newest(b);
        char since[TT_CKPT_BOOK_ID_MAX + 32] = "no checkpoint committed yet";
        if (newest != NULL)
            snprintf(since, sizeof(since), "the newest committed is %s", newest->id);
        TT_WARN("coord",
                "job %s: checkpoint %s (step %" PRIu64 ") failed on %s: %s (%" PRIu64
                " failed attempt(s) in a row; %s)",
                q->env->job_id, f.id, f.step, f.worker, f.reason, b->failures_since_commit, since);
    }
    coord_reply_ack(q);
}

/* ---- CheckpointCommit: on the pool ---- */

/* Every part the manifest lists must be in the directory with exactly its
 * listed size: a manifest naming a part that is not durable would commit a
 * checkpoint that cannot load. Sizes only: CRCs are re-read by verify. */
static int check_parts(const ckpt_commit_t *k, char *err, size_t errlen) {
    struct stat st;
    char path[TT_CKPT_BOOK_DIR_MAX + TT_CKPT_NAME_MAX + 1];
    if (stat(k->dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "checkpoint %s: directory %s does not exist", k->m.id, k->dir);
        return TT_ENOTFOUND;
    }
    for (uint32_t i = 0; i < k->m.nparts; i++) {
        const tt_mf_part_t *p = &k->m.parts[i];
        snprintf(path, sizeof(path), "%s/%s", k->dir, p->file);
        if (stat(path, &st) != 0) {
            snprintf(err, errlen, "checkpoint %s: part %s is missing (%s): %s", k->m.id, p->file,
                     path, strerror(errno));
            return TT_ENOTFOUND;
        }
        if ((uint64_t)st.st_size != p->size) {
            snprintf(err, errlen,
                     "checkpoint %s: part %s is %" PRIu64 " bytes, the manifest says %" PRIu64,
                     k->m.id, p->file, (uint64_t)st.st_size, p->size);
            return TT_ECORRUPT;
        }
    }
    return TT_OK;
}

static void commit_work(uv_work_t *w) {
    ckpt_commit_t *k = w->data;
    k->rc = check_parts(k, k->err, sizeof(k->err));
    if (k->rc == TT_OK)
        k->rc = tt_manifest_store(k->dir, &k->m, k->err, sizeof(k->err));
    if (k->rc == TT_OK)
        k->rc = tt_ckpt_latest_write(k->root, k->m.id, k->err, sizeof(k->err));
    if (k->rc != TT_OK)
        return;
    /* Committed: a retention failure leaves an old checkpoint too many on
     * disk, which the next commit retries; it does not undo this one. */
    char err[512] = "";
    size_t removed = 0;
    if (tt_ckpt_retain(k->root, k->keep, &removed, err, sizeof(err)) != TT_OK)
        TT_WARN("coord", "job %s: retention under %s failed: %s", k->job_id, k->root, err);
}

/* ---- CheckpointCommit: back on the loop ---- */

static void commit_free(ckpt_commit_t *k) {
    tt_manifest_free(&k->m);
    free(k);
}

static uint64_t parts_bytes(const tt_manifest_t *m) {
    uint64_t sum = 0;
    for (uint32_t i = 0; i < m->nparts; i++)
        sum += m->parts[i].size;
    return sum;
}

static void record_commit(tt_coord_t *c, coord_job_t *job, const ckpt_commit_t *k) {
    tt_ckpt_rec_t rec = {.step = k->m.step,
                         .bytes = parts_bytes(&k->m),
                         .created_unix_ms = k->m.created_unix_ms,
                         .duration_ms = k->m.duration_ms,
                         .committed_unix_ms = tt_clock_wall_ms()};
    snprintf(rec.id, sizeof(rec.id), "%s", k->m.id);
    snprintf(rec.dir, sizeof(rec.dir), "%s", k->dir);
    int rc = tt_ckpt_book_commit(&job->ckpt, &rec, k->request, k->keep, tt_clock_mono_ms());
    if (rc != TT_OK && rc != TT_EEXIST)
        TT_ERROR("coord", "job %s: checkpoint %s committed on disk but not recorded: %s", k->job_id,
                 rec.id, tt_strerror(rc));
    else
        TT_INFO("coord", "committed checkpoint %s of job %s (step %" PRIu64 ", %" PRIu64 " bytes)",
                rec.id, k->job_id, rec.step, rec.bytes);
    coord_request_save(c);
}

/* A commit refused after its parts were written is a failed attempt as
 * much as a part that could not be written. */
static void record_refusal(coord_job_t *job, const ckpt_commit_t *k) {
    tt_ckpt_fail_t f = {.step = k->m.step, .request = k->request, .unix_ms = tt_clock_wall_ms()};
    snprintf(f.id, sizeof(f.id), "%s", k->m.id);
    snprintf(f.worker, sizeof(f.worker), "%s", k->sender);
    snprintf(f.reason, sizeof(f.reason), "commit refused: %s", k->err);
    tt_ckpt_book_failed(&job->ckpt, &f);
}

static void commit_done(uv_work_t *w, int status) {
    ckpt_commit_t *k = w->data;
    tt_coord_t *c = k->c;
    /* forget refuses a job with a commit in flight: still there */
    coord_job_t *job = coord_find_job(c, k->job_id);
    if (job != NULL)
        job->commit_busy = 0;
    if (status != 0 && k->rc == TT_OK) {
        k->rc = TT_EINTERNAL;
        snprintf(k->err, sizeof(k->err), "commit of %s was cancelled", k->m.id);
    }
    if (k->rc == TT_OK && job == NULL) {
        k->rc = TT_EJOB;
        snprintf(k->err, sizeof(k->err), "job %s vanished during the commit", k->job_id);
    }
    if (k->rc == TT_OK) {
        record_commit(c, job, k);
        /* Held behind the state write that records it. */
        coord_send_ack(c, k->peer, k->peer_len, k->job_id, k->request_id, 1);
    } else {
        TT_WARN("coord", "job %s: commit of checkpoint %s refused: %s", k->job_id, k->m.id, k->err);
        if (job != NULL)
            record_refusal(job, k);
        coord_send_error(c, k->peer, k->peer_len, k->job_id, k->request_id, k->rc, k->err);
    }
    commit_free(k);
    coord_rearm(c);
}

/* ---- CheckpointCommit: on the loop, before the pool ---- */

/* A plain directory name that is not the `latest` pointer: the id becomes
 * a path under the root, and retention deletes what lies there. */
static int id_plain(const char *id) {
    return id[0] != '\0' && strchr(id, '/') == NULL && strcmp(id, ".") != 0 &&
           strcmp(id, "..") != 0 && strcmp(id, TT_CKPT_LATEST_FILE) != 0;
}

/* Decodes and checks what can be checked without the disk. TT_OK with k
 * filled, or an error with `err`. */
static int commit_prepare(const coord_req_t *q, uint32_t keep, ckpt_commit_t *k, char *err,
                          size_t errlen) {
    const zmq_msg_t *frame = &q->rx->payload[0];
    int rc = tt_manifest_decode(zmq_msg_data((zmq_msg_t *)frame), zmq_msg_size((zmq_msg_t *)frame),
                                &k->m, err, errlen);
    if (rc != TT_OK)
        return rc;
    const char *root = q->env->checkpoint_commit->root;
    if (!id_plain(k->m.id)) {
        snprintf(err, errlen, "checkpoint id '%s' is not a plain directory name", k->m.id);
        return TT_EINVAL;
    }
    if (strlen(root) + 1 + strlen(k->m.id) >= sizeof(k->dir)) {
        snprintf(err, errlen, "checkpoint directory %s/%s is longer than %u bytes", root, k->m.id,
                 TT_CKPT_BOOK_DIR_MAX - 1);
        return TT_EINVAL;
    }
    snprintf(k->root, sizeof(k->root), "%s", root);
    snprintf(k->dir, sizeof(k->dir), "%s/%s", root, k->m.id);
    snprintf(k->job_id, sizeof(k->job_id), "%s", q->env->job_id);
    k->c = q->c;
    k->request = q->env->checkpoint_commit->request;
    k->keep = keep;
    k->peer_len = q->rx->peer_len;
    memcpy(k->peer, q->rx->peer, q->rx->peer_len);
    k->request_id = q->env->request_id;
    snprintf(k->sender, sizeof(k->sender), "%s", q->env->sender_id);
    return TT_OK;
}

/* tt_rdzv_may_commit, with the sentence the refused sender logs. */
static int commit_sender_ok(const coord_req_t *q, coord_job_t *job, const char *id, char *err,
                            size_t errlen) {
    uint64_t gen = tt_rdzv_generation(job->rdzv);
    int rc = tt_rdzv_may_commit(job->rdzv, q->env->sender_id, q->env->generation);
    if (rc == TT_ESTALE)
        snprintf(err, errlen,
                 "commit of %s sent at generation %" PRIu64 " but the job is at generation %" PRIu64
                 ": a process that fell behind or was fenced may not move `latest`",
                 id, q->env->generation, gen);
    else if (rc == TT_EFENCED)
        snprintf(err, errlen, "commit of %s: %s is not a member of generation %" PRIu64, id,
                 q->env->sender_id, gen);
    return rc;
}

void coord_on_checkpoint_commit(const coord_req_t *q) {
    coord_job_t *job = job_taking_checkpoints(q, 1);
    if (job == NULL)
        return;
    char err[768] = "";
    ckpt_commit_t *k = calloc(1, sizeof(*k));
    int rc = k == NULL ? TT_ENOMEM
                       : commit_prepare(q, tt_rdzv_settings(job->rdzv)->checkpoint_keep, k, err,
                                        sizeof(err));
    if (rc == TT_OK && tt_ckpt_book_find(&job->ckpt, k->m.id) != NULL) {
        coord_reply_ack(q); /* a retry of a commit that went through */
        commit_free(k);
        return;
    }
    if (rc == TT_OK)
        rc = commit_sender_ok(q, job, k->m.id, err, sizeof(err));
    if (rc == TT_OK && job->commit_busy) {
        snprintf(err, sizeof(err), "commit of %s in progress (job %s): send it again", k->m.id,
                 q->env->job_id);
        coord_reply_error(q, TT_EAGAIN, err);
    } else if (rc == TT_OK) {
        k->work.data = k;
        if (uv_queue_work(q->c->loop, &k->work, commit_work, commit_done) == 0) {
            job->commit_busy = 1;
            return; /* commit_done answers and frees */
        }
        coord_reply_error(q, TT_ESYS, "cannot queue the commit on the thread pool");
    } else {
        TT_WARN("coord", "job %s: commit from %s refused: %s", q->env->job_id, q->env->sender_id,
                err[0] ? err : tt_strerror(rc));
        coord_reply_error(q, rc, err[0] ? err : tt_strerror(rc));
    }
    if (k != NULL)
        commit_free(k);
}

/* ---- the timer schedule ---- */

static int job_running(const coord_job_t *job) {
    return tt_rdzv_state(job->rdzv) == TT_RDZV_RUNNING;
}

void coord_ckpt_tick(tt_coord_t *c, uint64_t now) {
    for (size_t i = 0; i < c->njobs; i++) {
        coord_job_t *job = &c->jobs[i];
        uint32_t every = tt_rdzv_settings(job->rdzv)->checkpoint_every_ms;
        if (tt_rdzv_settings(job->rdzv)->checkpoint_keep == 0 ||
            !tt_ckpt_book_timer(&job->ckpt, now, every, job_running(job)))
            continue;
        TT_INFO("coord", "job %s: checkpoint request %" PRIu64 " (every %u ms)",
                tt_rdzv_job_id(job->rdzv), job->ckpt.requested, every);
        /* Heartbeat replies carry it at once; durability can be lazy, as a
         * commit never lets served pass requested. */
        if (c->dirty_since_ms == 0 && c->state_path[0] != '\0')
            c->dirty_since_ms = now;
        push_counters(c, job, now);
    }
}

uint64_t coord_ckpt_deadline(const tt_coord_t *c, uint64_t now) {
    uint64_t next = UINT64_MAX;
    for (size_t i = 0; i < c->njobs; i++) {
        const coord_job_t *job = &c->jobs[i];
        const tt_rdzv_settings_t *s = tt_rdzv_settings(job->rdzv);
        if (s->checkpoint_keep == 0 || !job_running(job))
            continue;
        uint64_t d = tt_ckpt_book_deadline(&job->ckpt, now, s->checkpoint_every_ms);
        next = d < next ? d : next;
    }
    return next;
}
