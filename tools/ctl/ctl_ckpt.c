/* ctl_ckpt: tetherctl's checkpoint commands. Through the coordinator:
 * `checkpoint JOB [--wait]` (ask for one at the job's next step boundary,
 * and optionally poll until a committed checkpoint served the request or
 * an attempt serving it failed) and `checkpoints JOB` (what the
 * coordinator committed and recorded, and the newest failed attempt). Offline,
 * on local files: `checkpoint verify DIR` and `checkpoints DIR` (a root's
 * committed checkpoints, read from their manifests). Presentation only:
 * the coordinator and the manifests own every answer. */
#include "ctl_ckpt.h"
#include "tt_ckpt_dir.h"
#include "tt_clock.h"
#include "tt_status.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* ---- checkpoint verify DIR (offline) ---- */

static void verify_json(const char *dir, const tt_ckpt_report_t *rep) {
    printf("{\"dir\":");
    tt_ctl_json_str(stdout, dir);
    printf(",\"valid\":%s,\"checkpoint_id\":", rep->rc == TT_OK ? "true" : "false");
    tt_ctl_json_str(stdout, rep->manifest.id);
    printf(",\"step\":%" PRIu64 ",\"parts\":[", rep->manifest.step);
    for (uint32_t i = 0; i < rep->nparts; i++) {
        const tt_ckpt_part_check_t *c = &rep->parts[i];
        printf("%s{\"file\":", i ? "," : "");
        tt_ctl_json_str(stdout, c->file);
        printf(",\"ok\":%s,\"size\":%" PRIu64 ",\"crc32c\":\"0x%08x\",\"error\":",
               c->rc == TT_OK ? "true" : "false", c->size, c->crc32c);
        tt_ctl_json_str(stdout, c->msg);
        printf("}");
    }
    printf("],\"verdict\":");
    tt_ctl_json_str(stdout, rep->rc == TT_OK ? "valid" : rep->msg);
    printf("}\n");
}

static void verify_text(const char *dir, const tt_ckpt_report_t *rep) {
    for (uint32_t i = 0; i < rep->nparts; i++) {
        const tt_ckpt_part_check_t *c = &rep->parts[i];
        if (c->rc == TT_OK)
            printf("ok   %s  %" PRIu64 " bytes  crc32c 0x%08x\n", c->file, c->size, c->crc32c);
        else
            printf("BAD  %s\n", c->msg);
    }
    if (rep->rc == TT_OK)
        printf("checkpoint %s (step %" PRIu64 ", %u parts) in %s: valid\n", rep->manifest.id,
               rep->manifest.step, rep->nparts, dir);
    else
        printf("checkpoint in %s: INVALID: %s\n", dir, rep->msg);
}

int tt_ctl_cmd_checkpoint_verify(tt_ctl_t *ctl, char **args) {
    if (strcmp(args[0], "verify") != 0) {
        fprintf(stderr, "tetherctl: usage: tetherctl checkpoint verify DIR\n");
        return TT_CTL_EXIT_USAGE;
    }
    tt_ckpt_report_t rep;
    int rc = tt_ckpt_verify(args[1], &rep);
    if (ctl->cfg.json)
        verify_json(args[1], &rep);
    else
        verify_text(args[1], &rep);
    tt_ckpt_report_free(&rep);
    return rc == TT_OK ? TT_CTL_EXIT_OK : TT_CTL_EXIT_FAIL;
}

/* ---- checkpoints DIR (offline): committed checkpoints under a root ---- */

static void utc_time(uint64_t unix_ms, char *out, size_t cap) {
    time_t t = (time_t)(unix_ms / 1000);
    struct tm tm;
    if (unix_ms == 0 || gmtime_r(&t, &tm) == NULL || strftime(out, cap, "%FT%TZ", &tm) == 0)
        snprintf(out, cap, "-");
}

static void checkpoints_dir_json(const tt_ckpt_entry_t *v, size_t n, const char *latest) {
    printf("[");
    for (size_t i = 0; i < n; i++) {
        printf("%s{\"id\":", i ? "," : "");
        tt_ctl_json_str(stdout, v[i].id);
        printf(",\"step\":%" PRIu64 ",\"epoch\":%" PRIu64 ",\"bytes\":%" PRIu64
               ",\"created_unix_ms\":%" PRIu64 ",\"duration_ms\":%" PRIu64 ",\"latest\":%s}",
               v[i].step, v[i].epoch, v[i].bytes, v[i].created_unix_ms, v[i].duration_ms,
               strcmp(v[i].id, latest) == 0 ? "true" : "false");
    }
    printf("]\n");
}

/* The same columns as `checkpoints JOB`, where the files know them. */
static void checkpoints_dir_table(const char *root, const tt_ckpt_entry_t *v, size_t n,
                                  const char *latest) {
    printf("%s: %zu committed checkpoint%s; latest names %s\n", root, n, n == 1 ? "" : "s",
           latest[0] != '\0' ? latest : "none");
    if (n == 0)
        return;
    tt_ctl_tbl_t t = {.ncols = 6};
    const char *hdr[] = {"ID", "STEP", "BYTES", "CREATED (UTC)", "DURATION_MS", "LATEST"};
    tt_ctl_tbl_row(&t, hdr);
    for (size_t i = 0; i < n; i++) {
        char step[24], bytes[24], created[32], dur[24];
        snprintf(step, sizeof(step), "%" PRIu64, v[i].step);
        snprintf(bytes, sizeof(bytes), "%" PRIu64, v[i].bytes);
        utc_time(v[i].created_unix_ms, created, sizeof(created));
        snprintf(dur, sizeof(dur), "%" PRIu64, v[i].duration_ms);
        const char *mark = strcmp(v[i].id, latest) == 0 ? "*" : "";
        const char *row[] = {v[i].id, step, bytes, created, dur, mark};
        tt_ctl_tbl_row(&t, row);
    }
    tt_ctl_tbl_print(&t, stdout);
}

/* A root that does not exist is an error here: the trainer treats it as
 * "no checkpoints yet", but an operator who mistyped the path must not
 * read an empty list as the answer. */
static int checkpoints_dir(tt_ctl_t *ctl, char **args) {
    tt_ckpt_entry_t *v = NULL;
    size_t n = 0;
    char err[512] = "", latest[TT_MF_ID_MAX] = "";
    struct stat st;
    if (stat(args[0], &st) != 0) {
        fprintf(stderr, "tetherctl: cannot read the checkpoint root %s: %s\n", args[0],
                strerror(errno));
        return TT_CTL_EXIT_FAIL;
    }
    if (!S_ISDIR(st.st_mode)) {
        fprintf(stderr, "tetherctl: %s is not a directory (a checkpoint root is)\n", args[0]);
        return TT_CTL_EXIT_FAIL;
    }
    int rc = tt_ckpt_list(args[0], &v, &n, err, sizeof(err));
    if (rc != TT_OK) {
        fprintf(stderr, "tetherctl: %s\n", err);
        return TT_CTL_EXIT_FAIL;
    }
    if (tt_ckpt_latest_read(args[0], latest, NULL, 0) != TT_OK)
        latest[0] = '\0';
    if (ctl->cfg.json)
        checkpoints_dir_json(v, n, latest);
    else
        checkpoints_dir_table(args[0], v, n, latest);
    free(v);
    return TT_CTL_EXIT_OK;
}

/* ---- checkpoint JOB [--wait], checkpoints JOB: through the coordinator ---- */

static void record_json(const Tether__CheckpointRecord *r, int newest) {
    char created[32];
    utc_time(r->created_unix_ms, created, sizeof(created));
    printf("{\"id\":");
    tt_ctl_json_str(stdout, r->checkpoint_id);
    printf(",\"dir\":");
    tt_ctl_json_str(stdout, r->dir);
    printf(",\"step\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"created_unix_ms\":%" PRIu64
           ",\"created\":\"%s\",\"duration_ms\":%" PRIu64 ",\"committed_unix_ms\":%" PRIu64
           ",\"newest\":%s}",
           r->step, r->bytes, r->created_unix_ms, created, r->duration_ms, r->committed_unix_ms,
           newest ? "true" : "false");
}

void tt_ctl_ckpt_failure_json(const Tether__CheckpointFailure *f) {
    char at[32];
    utc_time(f->unix_ms, at, sizeof(at));
    printf("{\"id\":");
    tt_ctl_json_str(stdout, f->checkpoint_id);
    printf(",\"step\":%" PRIu64 ",\"request\":%" PRIu64 ",\"worker\":", f->step, f->request);
    tt_ctl_json_str(stdout, f->worker_id ? f->worker_id : "");
    printf(",\"reason\":");
    tt_ctl_json_str(stdout, f->reason ? f->reason : "");
    printf(",\"unix_ms\":%" PRIu64 ",\"at\":\"%s\"}", f->unix_ms, at);
}

static void checkpoints_json(const char *job, const Tether__CheckpointsReply *r) {
    const Tether__JobSettings *s = r->settings;
    printf("{\"job\":");
    tt_ctl_json_str(stdout, job);
    printf(",\"requested\":%" PRIu64 ",\"served\":%" PRIu64
           ",\"keep\":%u,\"every_steps\":%u,\"every_ms\":%u,\"failures\":%" PRIu64
           ",\"failures_since_commit\":%" PRIu64,
           r->requested, r->served, s ? s->checkpoint_keep : 0, s ? s->checkpoint_every_steps : 0,
           s ? s->checkpoint_every_ms : 0, r->failures, r->failures_since_commit);
    if (r->last_failure != NULL) {
        printf(",\"last_failure\":");
        tt_ctl_ckpt_failure_json(r->last_failure);
    }
    printf(",\"checkpoints\":[");
    for (size_t i = 0; i < r->n_checkpoints; i++) {
        printf("%s", i ? "," : "");
        record_json(r->checkpoints[i], i + 1 == r->n_checkpoints);
    }
    printf("]}\n");
}

/* "every 100 steps, every 60000 ms", or "on request only". */
static void schedule_text(const Tether__JobSettings *s, char *out, size_t cap) {
    uint32_t steps = s ? s->checkpoint_every_steps : 0, ms = s ? s->checkpoint_every_ms : 0;
    out[0] = '\0';
    if (steps > 0)
        snprintf(out, cap, "every %u steps", steps);
    if (ms > 0)
        snprintf(out + strlen(out), cap - strlen(out), "%severy %u ms", steps ? ", " : "", ms);
    if (steps == 0 && ms == 0)
        snprintf(out, cap, "on request only");
}

static void checkpoints_table(const char *job, const Tether__CheckpointsReply *r) {
    char sched[64];
    schedule_text(r->settings, sched, sizeof(sched));
    printf("job %s: %zu committed checkpoints (keep %u, %s); requests: %" PRIu64 " made, %" PRIu64
           " served\n",
           job, r->n_checkpoints, r->settings ? r->settings->checkpoint_keep : 0, sched,
           r->requested, r->served);
    tt_ctl_tbl_t t = {.ncols = 7};
    const char *hdr[] = {"ID", "STEP", "BYTES", "CREATED (UTC)", "DURATION_MS", "DIR", "NEWEST"};
    tt_ctl_tbl_row(&t, hdr);
    for (size_t i = 0; i < r->n_checkpoints; i++) {
        const Tether__CheckpointRecord *c = r->checkpoints[i];
        char step[24], bytes[24], created[32], dur[24];
        snprintf(step, sizeof(step), "%" PRIu64, c->step);
        snprintf(bytes, sizeof(bytes), "%" PRIu64, c->bytes);
        utc_time(c->created_unix_ms, created, sizeof(created));
        snprintf(dur, sizeof(dur), "%" PRIu64, c->duration_ms);
        const char *newest = i + 1 == r->n_checkpoints ? "*" : "";
        const char *row[] = {c->checkpoint_id, step, bytes, created, dur, c->dir, newest};
        tt_ctl_tbl_row(&t, row);
    }
    tt_ctl_tbl_print(&t, stdout);
    const Tether__CheckpointFailure *f = r->last_failure;
    if (f != NULL) {
        char at[32];
        utc_time(f->unix_ms, at, sizeof(at));
        printf("failed attempts: %" PRIu64 " since the newest commit, %" PRIu64
               " since the coordinator started; the newest: %s (step %" PRIu64
               ") at %s on %s: %s\n",
               r->failures_since_commit, r->failures, f->checkpoint_id, f->step, at,
               f->worker_id ? f->worker_id : "?", f->reason ? f->reason : "");
    }
}

static void show_checkpoints(const tt_ctl_t *ctl, const char *job, const tt_env_t *reply) {
    if (ctl->cfg.json)
        checkpoints_json(job, reply->checkpoints_reply);
    else
        checkpoints_table(job, reply->checkpoints_reply);
}

static void checkpoints_env(tt_env_t *env, Tether__CheckpointsRequest *req, const char *job,
                            uint64_t id) {
    tether__checkpoints_request__init(req);
    tt_wire_env_init(env, job, "tetherctl", 0, id);
    env->body_case = TETHER__ENVELOPE__BODY_CHECKPOINTS;
    env->checkpoints = req;
}

/* A root directory is listed offline from its manifests, as before there
 * was a coordinator side; anything else names a job. */
int tt_ctl_cmd_checkpoints(tt_ctl_t *ctl, char **args) {
    struct stat st;
    if (strchr(args[0], '/') != NULL || (stat(args[0], &st) == 0 && S_ISDIR(st.st_mode)))
        return checkpoints_dir(ctl, args);
    if (tt_ctl_connect(ctl) != TT_OK)
        return TT_CTL_EXIT_FAIL;
    Tether__CheckpointsRequest req;
    tt_env_t env;
    checkpoints_env(&env, &req, args[0], 1);
    return tt_ctl_job_query(ctl, args[0], &env, TETHER__ENVELOPE__BODY_CHECKPOINTS_REPLY,
                            show_checkpoints);
}

/* {"job":..,"request":N} and, after --wait, "checkpoint": the newest. */
static void request_json(const char *job, uint64_t n, const Tether__CheckpointsReply *r) {
    printf("{\"job\":");
    tt_ctl_json_str(stdout, job);
    printf(",\"request\":%" PRIu64, n);
    if (r != NULL && r->n_checkpoints > 0) {
        printf(",\"checkpoint\":");
        record_json(r->checkpoints[r->n_checkpoints - 1], 1);
    }
    printf("}\n");
}

static void show_served(const tt_ctl_t *ctl, const char *job, uint64_t n,
                        const Tether__CheckpointsReply *r) {
    const Tether__CheckpointRecord *c =
        r->n_checkpoints ? r->checkpoints[r->n_checkpoints - 1] : NULL;
    if (ctl->cfg.json) {
        request_json(job, n, r);
    } else if (c != NULL) {
        printf("checkpoint %s of job '%s' committed: step %" PRIu64 ", %s\n", c->checkpoint_id, job,
               c->step, c->dir);
    }
}

/* An attempt that served request n (or a later one) failed: the wait is
 * over, with the reason, rather than at --timeout-ms. The job takes the
 * request up again after a pause (docs/checkpoints.md). 1 when so. */
static int show_failed(const tt_ctl_t *ctl, const char *job, uint64_t n,
                       const Tether__CheckpointsReply *r) {
    const Tether__CheckpointFailure *f = r->last_failure;
    if (f == NULL || f->request < n)
        return 0;
    if (ctl->cfg.json) {
        printf("{\"job\":");
        tt_ctl_json_str(stdout, job);
        printf(",\"request\":%" PRIu64 ",\"failed\":", n);
        tt_ctl_ckpt_failure_json(f);
        printf("}\n");
    }
    fprintf(stderr,
            "tetherctl: checkpoint request %" PRIu64 " of job '%s' failed: %s (step %" PRIu64
            ") on %s: %s; %s and the job tries again after a pause (see 'tetherctl "
            "checkpoints %s')\n",
            n, job, f->checkpoint_id, f->step, f->worker_id ? f->worker_id : "?",
            f->reason ? f->reason : "",
            r->n_checkpoints > 0 ? "the previous checkpoint stays valid"
                                 : "the job has no committed checkpoint yet",
            job);
    return 1;
}

/* Polls the committed list every 200 ms until a checkpoint served request
 * n, all within --timeout-ms (each poll gets what is left of it). */
static int wait_served(tt_ctl_t *ctl, const char *job, uint64_t n) {
    int64_t total = ctl->cfg.timeout_ms;
    uint64_t deadline = tt_clock_mono_ms() + (uint64_t)total;
    for (uint64_t id = 2;; id++) {
        long left = tt_ctl_remaining_ms(deadline);
        ctl->cfg.timeout_ms = left > 0 ? left : 1;
        Tether__CheckpointsRequest req;
        tt_env_t env;
        tt_zmq_rx_t rx;
        checkpoints_env(&env, &req, job, id);
        int rc = tt_ctl_job_request(ctl, job, &env, TETHER__ENVELOPE__BODY_CHECKPOINTS_REPLY, &rx);
        if (rc != TT_CTL_EXIT_OK)
            return rc;
        uint64_t served = rx.env->checkpoints_reply->served;
        if (served >= n)
            show_served(ctl, job, n, rx.env->checkpoints_reply);
        int failed = served < n && show_failed(ctl, job, n, rx.env->checkpoints_reply);
        tt_zmq_rx_close(&rx);
        if (served >= n)
            return TT_CTL_EXIT_OK;
        if (failed)
            return TT_CTL_EXIT_FAIL;
        if (tt_ctl_remaining_ms(deadline) <= 200) {
            fprintf(stderr,
                    "tetherctl: checkpoint request %" PRIu64
                    " of job '%s' not served within %" PRId64 " ms (newest served: %" PRIu64
                    "); the job may still take it: see "
                    "'tetherctl checkpoints %s', or wait longer with --timeout-ms\n",
                    n, job, total, served, job);
            return TT_CTL_EXIT_FAIL;
        }
        tt_clock_sleep_ms(200);
    }
}

int tt_ctl_cmd_checkpoint(tt_ctl_t *ctl, char **args) {
    Tether__CheckpointRequest req = TETHER__CHECKPOINT_REQUEST__INIT;
    tt_env_t env;
    tt_zmq_rx_t rx;
    tt_wire_env_init(&env, args[0], "tetherctl", 0, 1);
    env.body_case = TETHER__ENVELOPE__BODY_CHECKPOINT_REQUEST;
    env.checkpoint_request = &req;
    int rc = tt_ctl_job_request(ctl, args[0], &env, TETHER__ENVELOPE__BODY_CHECKPOINT_REQUEST_REPLY,
                                &rx);
    if (rc != TT_CTL_EXIT_OK)
        return rc;
    uint64_t n = rx.env->checkpoint_request_reply->request;
    tt_zmq_rx_close(&rx);
    if (!ctl->cfg.json)
        printf("checkpoint of job '%s' requested (request %" PRIu64 ")\n", args[0], n);
    else if (!ctl->cfg.wait)
        request_json(args[0], n, NULL);
    fflush(stdout);
    return ctl->cfg.wait ? wait_served(ctl, args[0], n) : TT_CTL_EXIT_OK;
}
