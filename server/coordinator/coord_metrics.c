/* coord_metrics: what the coordinator's HTTP endpoint (tt_http) answers:
 * /healthz (the loop runs), /readyz (it serves: 503 once it is stopping)
 * and /metrics, in the Prometheus text format (0.0.4), what `tetherctl
 * status`, `members` and `checkpoints` show: every job's state,
 * generation, members, progress, regroups and checkpoints, and every
 * member's step, heartbeat age, step and wait times and straggler mark, so
 * a scraper sees a hang or a slow rank without a CLI. It reads state only,
 * on the loop thread, like the operator queries. */
#include "coord_internal.h"
#include "shards.h"
#include "tt_clock.h"
#include "tt_http.h"

#include <stdlib.h>
#include <string.h>

static void help(tt_http_reply_t *r, const char *name, const char *type, const char *text) {
    tt_http_printf(r, "# HELP %s %s\n# TYPE %s %s\n", name, text, name, type);
}

static const char *job_state(const tt_rdzv_t *rd) {
    tt_rdzv_state_t s = tt_rdzv_state(rd);
    if (s == TT_RDZV_RUNNING && tt_rdzv_regroup_after_step(rd) >= 0)
        return "regrouping";
    return s == TT_RDZV_WAITING   ? "waiting"
           : s == TT_RDZV_RUNNING ? "running"
           : s == TT_RDZV_FAILED  ? "failed"
                                  : "finished";
}

static void daemon_metrics(const tt_coord_t *c, tt_http_reply_t *r, uint64_t now) {
    static const char *const states[] = {"waiting", "running", "regrouping", "failed", "finished"};
    help(r, "tether_coordinator_up", "gauge", "1 while the coordinator serves");
    tt_http_printf(r, "tether_coordinator_up 1\n");
    help(r, "tether_coordinator_boots", "gauge", "starts on this state file, this one included");
    tt_http_printf(r, "tether_coordinator_boots %llu\n", (unsigned long long)c->boots);
    help(r, "tether_coordinator_refused_connections_total", "counter",
         "connections refused: a handshake that failed, or a key the ZAP handler refused");
    tt_http_printf(r, "tether_coordinator_refused_connections_total %llu\n",
                   tt_zauth_refused_total(&c->handshakes, c->zap));
    help(r, "tether_coordinator_jobs", "gauge", "jobs known, by state");
    for (size_t k = 0; k < sizeof(states) / sizeof(states[0]); k++) {
        size_t n = 0;
        for (size_t i = 0; i < c->njobs; i++)
            n += strcmp(job_state(c->jobs[i].rdzv), states[k]) == 0;
        tt_http_printf(r, "tether_coordinator_jobs{state=\"%s\"} %zu\n", states[k], n);
    }
    size_t shards = c->shards != NULL ? tt_shards_count(c->shards) : 0;
    size_t live = c->shards != NULL ? tt_shards_live_count(c->shards, now) : 0;
    help(r, "tether_coordinator_shard_servers", "gauge", "registered shard servers, by liveness");
    tt_http_printf(r, "tether_coordinator_shard_servers{state=\"alive\"} %zu\n", live);
    tt_http_printf(r, "tether_coordinator_shard_servers{state=\"dead\"} %zu\n", shards - live);
}

/* The per-job gauges, in the order job_values fills them. */
static const char *const job_gauges[][2] = {
    {"tether_job_generation", "latest generation formed (0: none yet)"},
    {"tether_job_members", "members of the current generation"},
    {"tether_job_waiting_workers", "workers waiting for a generation"},
    {"tether_job_min_workers", "fewest members the job runs with"},
    {"tether_job_last_step", "lowest step the running generation's members completed (-1: none)"},
    {"tether_job_reached_step",
     "highest step every member of a generation completed; above last_step while steps are "
     "trained again"},
    {"tether_job_epoch", "epoch the workers last reported"},
    {"tether_job_epoch_examples", "examples consumed in that epoch"},
    {"tether_job_regroups_last_hour", "regroups within the last hour (the guard rail counts them)"},
    {"tether_job_checkpoints", "committed checkpoints the coordinator records"},
    {"tether_job_last_checkpoint_step", "step of the newest one (-1: none)"},
    {"tether_job_last_checkpoint_bytes", "its size"},
    {"tether_job_last_checkpoint_timestamp_seconds", "when it was committed (Unix time)"},
    {"tether_job_checkpoint_failures_since_commit",
     "checkpoint attempts that failed since the newest commit (a part not written, a commit "
     "refused; counted afresh when the coordinator restarts)"},
    {"tether_job_last_checkpoint_failure_timestamp_seconds",
     "when the newest failed attempt was reported (Unix time; 0: none)"},
    {"tether_job_comm_id_waiting",
     "members waiting for the running generation's collective id (rank 0 has not offered it)"},
    {"tether_job_comm_id_wait_seconds", "how long they have been asking for it"},
};
#define JOB_GAUGES (sizeof(job_gauges) / sizeof(job_gauges[0]))

static void job_values(const coord_job_t *j, uint64_t now, double *v) {
    const tt_rdzv_t *r = j->rdzv;
    const tt_ckpt_rec_t *k = tt_ckpt_book_newest(&j->ckpt);
    coord_commid_waiting_t cw;
    coord_commid_waiting(j, now, &cw);
    double vals[JOB_GAUGES] = {(double)tt_rdzv_generation(r),
                               (double)tt_rdzv_member_count(r),
                               (double)tt_rdzv_waiter_count(r),
                               (double)tt_rdzv_settings(r)->min_workers,
                               (double)tt_rdzv_current_step(r),
                               (double)tt_rdzv_last_committed_step(r),
                               (double)j->epoch,
                               (double)j->epoch_examples,
                               (double)tt_rdzv_regroups_last_hour(r, now),
                               (double)j->ckpt.n,
                               k != NULL ? (double)k->step : -1.0,
                               k != NULL ? (double)k->bytes : 0.0,
                               k != NULL ? (double)k->committed_unix_ms / 1e3 : 0.0,
                               (double)j->ckpt.failures_since_commit,
                               j->ckpt.failures > 0 ? (double)j->ckpt.last_fail.unix_ms / 1e3 : 0.0,
                               (double)cw.n,
                               (double)cw.wait_ms / 1e3};
    memcpy(v, vals, sizeof(vals));
}

static void job_metrics(const tt_coord_t *c, tt_http_reply_t *r, uint64_t now) {
    char id[2 * TT_RDZV_ID_MAX];
    double *v = calloc(c->njobs * JOB_GAUGES + 1, sizeof(*v));
    const char **ids = calloc(c->njobs + 1, sizeof(*ids));
    if (v == NULL || ids == NULL) {
        r->oom = 1;
        free(ids);
        free(v);
        return;
    }
    help(r, "tether_job_state", "gauge", "1 for the job's current state");
    for (size_t i = 0; i < c->njobs; i++) {
        ids[i] = tt_rdzv_job_id(c->jobs[i].rdzv);
        tt_http_printf(r, "tether_job_state{job=\"%s\",state=\"%s\"} 1\n",
                       tt_http_label(ids[i], id, sizeof(id)), job_state(c->jobs[i].rdzv));
        job_values(&c->jobs[i], now, v + i * JOB_GAUGES);
    }
    tt_http_job_gauges(r, job_gauges, JOB_GAUGES, ids, c->njobs, v);
    free(ids);
    free(v);
}

/* The per-member lines of one gauge; `which` picks the field. */
static void member_lines(tt_http_reply_t *r, const char *name, const char *job,
                         const tt_rdzv_member_info_t *m, size_t n, int which) {
    char w[2 * TT_RDZV_ID_MAX], num[TT_HTTP_NUM_MAX];
    for (size_t k = 0; k < n; k++) {
        double v = which == 0   ? (double)m[k].m.last_step
                   : which == 1 ? (double)m[k].heartbeat_age_ms / 1e3
                   : which == 2 ? m[k].step_ms / 1e3
                   : which == 3 ? m[k].wait_ms / 1e3
                   : which == 4 ? (double)m[k].straggler
                   : which == 5 ? (double)m[k].suspected
                                : (double)m[k].draining;
        tt_http_printf(r, "%s{job=\"%s\",worker=\"%s\",rank=\"%u\"} %s\n", name, job,
                       tt_http_label(m[k].m.worker_id, w, sizeof(w)), m[k].m.rank,
                       tt_http_num(v, num));
    }
}

static const char *const member_gauges[][2] = {
    {"tether_worker_last_step", "last step the member reported complete (-1: none)"},
    {"tether_worker_heartbeat_age_seconds", "time since its last heartbeat"},
    {"tether_worker_step_seconds", "its mean step time over its last window (0: none yet)"},
    {"tether_worker_wait_seconds", "of which waiting for the others"},
    {"tether_worker_straggler", "1 for the rank the others wait for"},
    {"tether_worker_suspected", "1 while a failure report about it awaits confirmation"},
    {"tether_worker_draining", "1 while it waits to leave at the next step boundary (drain)"},
};

static void member_metrics(const tt_coord_t *c, tt_http_reply_t *r, uint64_t now) {
    size_t total = 0;
    for (size_t i = 0; i < c->njobs; i++)
        total += tt_rdzv_member_count(c->jobs[i].rdzv);
    tt_rdzv_member_info_t *m = calloc(total + 1, sizeof(*m));
    size_t *count = calloc(c->njobs + 1, sizeof(*count));
    if (m == NULL || count == NULL) {
        r->oom = 1;
        free(m);
        free(count);
        return;
    }
    tt_rdzv_member_info_t *at = m;
    for (size_t i = 0; i < c->njobs; i++) {
        size_t cap = tt_rdzv_member_count(c->jobs[i].rdzv), n = 0;
        tt_rdzv_members(c->jobs[i].rdzv, now, at, cap, &n);
        count[i] = n < cap ? n : cap;
        at += count[i];
    }
    char id[2 * TT_RDZV_ID_MAX];
    for (int g = 0; g < 7; g++) {
        help(r, member_gauges[g][0], "gauge", member_gauges[g][1]);
        at = m;
        for (size_t i = 0; i < c->njobs; i++) {
            tt_http_label(tt_rdzv_job_id(c->jobs[i].rdzv), id, sizeof(id));
            member_lines(r, member_gauges[g][0], id, at, count[i], g);
            at += count[i];
        }
    }
    free(m);
    free(count);
}

void tt_coord_http(void *ctx, const char *path, tt_http_reply_t *r) {
    tt_coord_t *c = ctx;
    if (tt_http_common(path, !c->closing, r))
        return;
    uint64_t now = tt_clock_mono_ms();
    daemon_metrics(c, r, now);
    job_metrics(c, r, now);
    member_metrics(c, r, now);
}
