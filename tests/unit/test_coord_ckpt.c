/* Tests of the coordinator's checkpoint handlers (coord_ckpt.c) against a
 * real tt_coord over TCP on 127.0.0.1, its loop pumped by this thread
 * between socket reads. The clients are raw DEALERs: a worker (join,
 * heartbeat, commit with a real manifest frame) and a tetherctl-like one;
 * checkpoints are real part files written with tt_ckpt in a temp dir.
 * Covered: requests refused (unknown job, keep 0), counted, pushed to the
 * member and shown in heartbeats and lists; a commit stored (MANIFEST,
 * `latest`, retention), recorded, retried idempotently and kept across a
 * restart; commits with a missing or short part refused; a second commit
 * while one runs (EAGAIN); the timer schedule; a shutdown while a commit
 * runs; the real tetherctl (checkpoint --wait, checkpoints JOB, --json,
 * the offline DIR form). The fixture is coord_testlib.h. */
#include "coord.h"
#include "coord_testlib.h"
#include "coord_internal.h" /* white box: whether a commit is in the pool */
#include "tt_ckpt.h"
#include "tt_ckpt_dir.h"
#include "tt_clock.h"
#include "tt_cunit.h"
#include "tt_manifest.h"
#include "tt_status.h"
#include "tt_zmq.h"

#include <fcntl.h>
#include <ftw.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* A heartbeat of w0; *req and *served from the HeartbeatReply. */
static void heartbeat(fx_t *f, cli_t *w, const char *job, uint64_t gen, uint64_t *req,
                      uint64_t *served) {
    Tether__Heartbeat hb = TETHER__HEARTBEAT__INIT;
    hb.incarnation = 1;
    tt_env_t env;
    tt_wire_env_init(&env, job, w->sender, gen, 0);
    env.body_case = TETHER__ENVELOPE__BODY_HEARTBEAT;
    env.heartbeat = &hb;
    tt_zmq_rx_t rx;
    *req = *served = UINT64_MAX;
    if (cli_call(f, w, &env, NULL, 0, -1, &rx, NULL, 0) != 0)
        return;
    CU_ASSERT_EQUAL_FATAL(rx.env->body_case, TETHER__ENVELOPE__BODY_HEARTBEAT_REPLY);
    *req = rx.env->heartbeat_reply->checkpoint_requested;
    *served = rx.env->heartbeat_reply->checkpoint_served;
    tt_zmq_rx_close(&rx);
}

/* CheckpointRequest: the error code (0: *n is the request number). */
static int request(fx_t *f, cli_t *ctl, const char *job, uint64_t *n, char *msg, size_t cap) {
    Tether__CheckpointRequest r = TETHER__CHECKPOINT_REQUEST__INIT;
    tt_env_t env;
    tt_wire_env_init(&env, job, "tetherctl", 0, 0);
    env.body_case = TETHER__ENVELOPE__BODY_CHECKPOINT_REQUEST;
    env.checkpoint_request = &r;
    tt_zmq_rx_t rx;
    int code = cli_call(f, ctl, &env, NULL, 0, -1, &rx, msg, cap);
    if (code == 0) {
        CU_ASSERT_EQUAL_FATAL(rx.env->body_case, TETHER__ENVELOPE__BODY_CHECKPOINT_REQUEST_REPLY);
        *n = rx.env->checkpoint_request_reply->request;
        tt_zmq_rx_close(&rx);
    }
    return code;
}

/* CheckpointsRequest: the error code; the reply stays in *rx on 0. */
static int list(fx_t *f, cli_t *ctl, const char *job, tt_zmq_rx_t *rx) {
    Tether__CheckpointsRequest r = TETHER__CHECKPOINTS_REQUEST__INIT;
    tt_env_t env;
    tt_wire_env_init(&env, job, "tetherctl", 0, 0);
    env.body_case = TETHER__ENVELOPE__BODY_CHECKPOINTS;
    env.checkpoints = &r;
    int code = cli_call(f, ctl, &env, NULL, 0, -1, rx, NULL, 0);
    if (code == 0)
        CU_ASSERT_EQUAL_FATAL(rx->env->body_case, TETHER__ENVELOPE__BODY_CHECKPOINTS_REPLY);
    return code;
}

/* Sends a CheckpointCommit with `mf` as its frame; its request id. */
static uint64_t send_commit(fx_t *f, cli_t *w, const char *job, uint64_t req, const uint8_t *mf,
                            size_t len) {
    Tether__CheckpointCommit cc = TETHER__CHECKPOINT_COMMIT__INIT;
    cc.root = f->root;
    cc.request = req;
    tt_env_t env;
    tt_wire_env_init(&env, job, w->sender, 1, 0);
    env.body_case = TETHER__ENVELOPE__BODY_CHECKPOINT_COMMIT;
    env.checkpoint_commit = &cc;
    return cli_send(f, w, &env, mf, len);
}

/* The reply to commit `id`: its error code (0: Ack). */
static int commit_reply(fx_t *f, cli_t *w, uint64_t id, char *msg, size_t cap) {
    tt_zmq_rx_t rx;
    int code = cli_wait(f, w, id, -1, &rx, msg, cap);
    if (code == 0) {
        CU_ASSERT_EQUAL(rx.env->body_case, TETHER__ENVELOPE__BODY_ACK);
        tt_zmq_rx_close(&rx);
    }
    return code;
}

/* CheckpointCommit: the error code (0: Ack). */
static int commit(fx_t *f, cli_t *w, const char *job, uint64_t req, const uint8_t *mf, size_t len,
                  char *msg, size_t cap) {
    return commit_reply(f, w, send_commit(f, w, job, req, mf, len), msg, cap);
}

/* ---- checkpoints on disk, written as workers write them ---- */

#define TENSOR_BYTES  64u /* "w": 4 x 4 f32 */
#define TRAINER_BYTES 24u

static void write_part(const char *dir, const char *name, uint32_t kind, uint64_t payload,
                       tt_mf_part_t *p) {
    static const tt_ckpt_range_t all = {0, TENSOR_BYTES};
    int shard = kind == TT_CKPT_KIND_SHARD;
    tt_ckpt_part_opts_t o = {.dir = dir,
                             .name = name,
                             .kind = kind,
                             .ranges = shard ? &all : NULL,
                             .nranges = shard ? 1 : 0,
                             .planes = shard ? 1 : 0,
                             .payload_len = payload};
    uint8_t bytes[TENSOR_BYTES];
    for (size_t i = 0; i < sizeof(bytes); i++)
        bytes[i] = (uint8_t)(i * 7 + payload);
    tt_ckpt_writer_t *w = NULL;
    tt_ckpt_part_info_t info;
    char err[512] = "";
    CU_ASSERT_EQUAL_FATAL(tt_ckpt_writer_create(&w, &o, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL_FATAL(tt_ckpt_writer_write(w, bytes, payload), TT_OK);
    CU_ASSERT_EQUAL_FATAL(tt_ckpt_writer_finish(w, &info), TT_OK);
    tt_ckpt_writer_destroy(&w);
    snprintf(p->file, sizeof(p->file), "%s", name);
    p->kind = kind;
    p->size = info.size;
    p->crc32c = info.crc32c;
    p->planes = info.planes;
    p->nranges = o.nranges;
    p->ranges = shard ? malloc(sizeof(all)) : NULL;
    if (shard)
        *p->ranges = all;
}

/* Writes checkpoint `id` (a params part and a trainer part) under the
 * root and returns its encoded manifest (malloc'd); *bytes: the parts. */
static uint8_t *write_checkpoint(const fx_t *f, const char *id, uint64_t step, size_t *len,
                                 uint64_t *bytes) {
    static const uint32_t kinds[] = {TT_STATE_PARAMS};
    char dir[TT_CKPT_PATH_MAX], err[512] = "";
    CU_ASSERT_EQUAL_FATAL(tt_ckpt_dir_create(f->root, id, dir, err, sizeof(err)), TT_OK);
    tt_manifest_t m = {.version = TT_MANIFEST_VERSION,
                       .step = step,
                       .created_unix_ms = 1700000000000ull + step,
                       .duration_ms = 12,
                       .nparts = 2,
                       .ntensors = 1};
    snprintf(m.id, sizeof(m.id), "%s", id);
    snprintf(m.job_id, sizeof(m.job_id), "ck");
    m.parts = calloc(2, sizeof(*m.parts));
    m.tensors = calloc(1, sizeof(*m.tensors));
    write_part(dir, "shard-0.bin", TT_CKPT_KIND_SHARD, TENSOR_BYTES, &m.parts[0]);
    write_part(dir, "trainer.bin", TT_CKPT_KIND_TRAINER, TRAINER_BYTES, &m.parts[1]);
    m.tensors[0] = (tt_mf_tensor_t){.name = "w", .ndim = 2, .shape = {4, 4}, .dtype = TT_DTYPE_F32};
    CU_ASSERT_EQUAL_FATAL(tt_manifest_fill_extents(&m, kinds, 1, err, sizeof(err)), TT_OK);
    uint8_t *buf = NULL;
    CU_ASSERT_EQUAL_FATAL(tt_manifest_encode(&m, &buf, len, err, sizeof(err)), TT_OK);
    *bytes = m.parts[0].size + m.parts[1].size;
    tt_manifest_free(&m);
    return buf;
}

static int exists(const fx_t *f, const char *id, const char *file) {
    char path[512];
    snprintf(path, sizeof(path), "%s/%s%s%s", f->root, id, file ? "/" : "", file ? file : "");
    return access(path, F_OK) == 0;
}

static void latest_is(const fx_t *f, const char *want) {
    char id[TT_MF_ID_MAX] = "", err[512];
    int rc = tt_ckpt_latest_read(f->root, id, err, sizeof(err));
    CU_ASSERT_EQUAL(rc, want ? TT_OK : TT_ENOTFOUND);
    if (want != NULL)
        CU_ASSERT_STRING_EQUAL(id, want);
}

/* Writes and commits checkpoint `id`, expecting an Ack. */
static uint64_t commit_ok(fx_t *f, cli_t *w, const char *job, const char *id, uint64_t step,
                          uint64_t req) {
    size_t len;
    uint64_t bytes;
    char msg[512];
    uint8_t *mf = write_checkpoint(f, id, step, &len, &bytes);
    int code = commit(f, w, job, req, mf, len, msg, sizeof(msg));
    if (code != 0)
        printf("\n  commit of %s: %s\n", id, msg);
    CU_ASSERT_EQUAL(code, 0);
    free(mf);
    return bytes;
}

/* ---- tests ---- */

/* A coordinator, worker w0 joined to `job`, and a tetherctl-like client. */
static uint64_t setup(fx_t *f, cli_t *w, cli_t *ctl, const char *job, uint32_t keep) {
    fx_start(f);
    cli_open(f, w, "worker", "w0");
    cli_open(f, ctl, "ctl", "t");
    return join(f, w, job, keep, 0);
}

static void teardown(fx_t *f, cli_t *w, cli_t *ctl) {
    tt_zmq_close(&w->sock);
    tt_zmq_close(&ctl->sock);
    fx_stop(f);
}

static void coord_ckpt_refuses_unknown_job_and_keep_0(void) {
    fx_t f;
    cli_t w, ctl;
    char msg[512];
    uint64_t n = 0, req, served, bytes;
    uint64_t gen = setup(&f, &w, &ctl, "nokeep", 0);
    CU_ASSERT_EQUAL(request(&f, &ctl, "nokeep", &n, msg, sizeof(msg)), TT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "job 'nokeep' takes no checkpoints"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "--checkpoint-dir"));
    CU_ASSERT_EQUAL(request(&f, &ctl, "ghost", &n, msg, sizeof(msg)), TT_EJOB);
    tt_zmq_rx_t rx;
    CU_ASSERT_EQUAL(list(&f, &ctl, "ghost", &rx), TT_EJOB);
    size_t len;
    uint8_t *mf = write_checkpoint(&f, "step-1", 1, &len, &bytes);
    CU_ASSERT_EQUAL(commit(&f, &w, "nokeep", 0, mf, len, msg, sizeof(msg)), TT_EINVAL);
    CU_ASSERT(!exists(&f, "step-1", TT_MANIFEST_FILE));
    heartbeat(&f, &w, "nokeep", gen, &req, &served);
    CU_ASSERT_EQUAL(req, 0); /* the refusals counted nothing */
    CU_ASSERT_EQUAL(served, 0);
    free(mf);
    teardown(&f, &w, &ctl);
}

static void coord_ckpt_requests_show_in_heartbeats_and_list(void) {
    fx_t f;
    cli_t w, ctl;
    char msg[512];
    uint64_t n = 0, req, served;
    uint64_t gen = setup(&f, &w, &ctl, "ck", 2);
    heartbeat(&f, &w, "ck", gen, &req, &served);
    CU_ASSERT_EQUAL(req, 0);
    CU_ASSERT_EQUAL(request(&f, &ctl, "ck", &n, msg, sizeof(msg)), 0);
    CU_ASSERT_EQUAL(n, 1);
    /* The member hears of it at once, before its next heartbeat. */
    tt_zmq_rx_t rx;
    CU_ASSERT_EQUAL_FATAL(
        cli_wait(&f, &w, UINT64_MAX, TETHER__ENVELOPE__BODY_HEARTBEAT_REPLY, &rx, NULL, 0), 0);
    CU_ASSERT_EQUAL(rx.env->request_id, 0);
    CU_ASSERT_EQUAL(rx.env->heartbeat_reply->checkpoint_requested, 1);
    CU_ASSERT_EQUAL(rx.env->heartbeat_reply->generation, gen);
    CU_ASSERT_EQUAL(rx.env->heartbeat_reply->job_state, TETHER__JOB_STATE__JOB_RUNNING);
    tt_zmq_rx_close(&rx);
    CU_ASSERT_EQUAL(request(&f, &ctl, "ck", &n, msg, sizeof(msg)), 0);
    CU_ASSERT_EQUAL(n, 2);
    heartbeat(&f, &w, "ck", gen, &req, &served);
    CU_ASSERT_EQUAL(req, 2);
    CU_ASSERT_EQUAL(served, 0);
    CU_ASSERT_EQUAL_FATAL(list(&f, &ctl, "ck", &rx), 0);
    const Tether__CheckpointsReply *r = rx.env->checkpoints_reply;
    CU_ASSERT_EQUAL(r->requested, 2);
    CU_ASSERT_EQUAL(r->served, 0);
    CU_ASSERT_EQUAL(r->n_checkpoints, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r->settings);
    CU_ASSERT_EQUAL(r->settings->checkpoint_keep, 2);
    tt_zmq_rx_close(&rx);
    teardown(&f, &w, &ctl);
}

/* The records of a CheckpointsReply, by id, oldest first, "a,b". */
static void ids_of(const Tether__CheckpointsReply *r, char *out, size_t cap) {
    out[0] = '\0';
    for (size_t i = 0; i < r->n_checkpoints; i++)
        snprintf(out + strlen(out), cap - strlen(out), "%s%s", i ? "," : "",
                 r->checkpoints[i]->checkpoint_id);
}

static void coord_ckpt_commit_stores_records_and_survives_restart(void) {
    fx_t f;
    cli_t w, ctl;
    char msg[512], ids[256], dir[256];
    uint64_t n = 0, req, served;
    uint64_t gen = setup(&f, &w, &ctl, "ck", 2);
    CU_ASSERT_EQUAL(request(&f, &ctl, "ck", &n, msg, sizeof(msg)), 0);
    uint64_t t0 = tt_clock_wall_ms();
    uint64_t bytes = commit_ok(&f, &w, "ck", "step-10", 10, n);
    CU_ASSERT(exists(&f, "step-10", TT_MANIFEST_FILE));
    snprintf(dir, sizeof(dir), "%s/step-10", f.root);
    tt_manifest_t m;
    CU_ASSERT_EQUAL(tt_manifest_load(dir, &m, msg, sizeof(msg)), TT_OK);
    CU_ASSERT_EQUAL(m.step, 10);
    tt_manifest_free(&m);
    latest_is(&f, "step-10");
    heartbeat(&f, &w, "ck", gen, &req, &served);
    CU_ASSERT_EQUAL(served, 1);
    tt_zmq_rx_t rx;
    CU_ASSERT_EQUAL_FATAL(list(&f, &ctl, "ck", &rx), 0);
    CU_ASSERT_EQUAL_FATAL(rx.env->checkpoints_reply->n_checkpoints, 1);
    const Tether__CheckpointRecord *c = rx.env->checkpoints_reply->checkpoints[0];
    CU_ASSERT_STRING_EQUAL(c->checkpoint_id, "step-10");
    CU_ASSERT_STRING_EQUAL(c->dir, dir);
    CU_ASSERT_EQUAL(c->step, 10);
    CU_ASSERT_EQUAL(c->bytes, bytes);
    CU_ASSERT_EQUAL(c->created_unix_ms, 1700000000010ull);
    CU_ASSERT_EQUAL(c->duration_ms, 12);
    CU_ASSERT(c->committed_unix_ms >= t0 && c->committed_unix_ms <= tt_clock_wall_ms());
    CU_ASSERT_EQUAL(rx.env->checkpoints_reply->served, 1);
    tt_zmq_rx_close(&rx);

    /* A retried commit of a recorded id: Ack, nothing new. */
    size_t len;
    uint8_t *mf = write_checkpoint(&f, "step-11", 11, &len, &bytes);
    CU_ASSERT_EQUAL(commit(&f, &w, "ck", 1, mf, len, msg, sizeof(msg)), 0);
    CU_ASSERT_EQUAL(commit(&f, &w, "ck", 1, mf, len, msg, sizeof(msg)), 0);
    free(mf);
    commit_ok(&f, &w, "ck", "step-20", 20, 0);
    /* keep 2: retention removed step-10 on disk and in the book. */
    CU_ASSERT(!exists(&f, "step-10", NULL));
    CU_ASSERT(exists(&f, "step-11", TT_MANIFEST_FILE));
    latest_is(&f, "step-20");
    CU_ASSERT_EQUAL_FATAL(list(&f, &ctl, "ck", &rx), 0);
    ids_of(rx.env->checkpoints_reply, ids, sizeof(ids));
    CU_ASSERT_STRING_EQUAL(ids, "step-11,step-20");
    tt_zmq_rx_close(&rx);

    /* Restart: the same list from the state file. */
    tt_zmq_close(&w.sock);
    tt_zmq_close(&ctl.sock);
    fx_down(&f);
    fx_up(&f);
    cli_open(&f, &ctl, "ctl", "t2");
    CU_ASSERT_EQUAL_FATAL(list(&f, &ctl, "ck", &rx), 0);
    ids_of(rx.env->checkpoints_reply, ids, sizeof(ids));
    CU_ASSERT_STRING_EQUAL(ids, "step-11,step-20");
    CU_ASSERT_EQUAL(rx.env->checkpoints_reply->requested, 1);
    CU_ASSERT_EQUAL(rx.env->checkpoints_reply->served, 1);
    CU_ASSERT_EQUAL(rx.env->checkpoints_reply->checkpoints[1]->step, 20);
    tt_zmq_rx_close(&rx);
    CU_ASSERT_EQUAL(request(&f, &ctl, "ck", &n, msg, sizeof(msg)), 0);
    CU_ASSERT_EQUAL(n, 2); /* numbering continues */
    tt_zmq_close(&ctl.sock);
    fx_stop(&f);
}

static void coord_ckpt_commit_refuses_missing_or_short_parts(void) {
    fx_t f;
    cli_t w, ctl;
    char msg[512], path[512];
    size_t len;
    uint64_t bytes;
    setup(&f, &w, &ctl, "ck", 2);
    uint8_t *mf = write_checkpoint(&f, "step-5", 5, &len, &bytes);
    snprintf(path, sizeof(path), "%s/step-5/trainer.bin", f.root);
    CU_ASSERT_EQUAL(unlink(path), 0);
    CU_ASSERT_EQUAL(commit(&f, &w, "ck", 0, mf, len, msg, sizeof(msg)), TT_ENOTFOUND);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "part trainer.bin is missing"));
    CU_ASSERT(!exists(&f, "step-5", TT_MANIFEST_FILE));
    latest_is(&f, NULL);
    free(mf);

    mf = write_checkpoint(&f, "step-6", 6, &len, &bytes);
    snprintf(path, sizeof(path), "%s/step-6/shard-0.bin", f.root);
    struct stat st;
    CU_ASSERT_EQUAL(stat(path, &st), 0);
    CU_ASSERT_EQUAL(truncate(path, st.st_size - 1), 0);
    CU_ASSERT_EQUAL(commit(&f, &w, "ck", 0, mf, len, msg, sizeof(msg)), TT_ECORRUPT);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "part shard-0.bin is"));
    CU_ASSERT(!exists(&f, "step-6", TT_MANIFEST_FILE));
    /* The directory itself gone. */
    char moved[512];
    snprintf(path, sizeof(path), "%s/step-6", f.root);
    snprintf(moved, sizeof(moved), "%s/moved", f.root);
    CU_ASSERT_EQUAL(rename(path, moved), 0);
    CU_ASSERT_EQUAL(commit(&f, &w, "ck", 0, mf, len, msg, sizeof(msg)), TT_ENOTFOUND);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "does not exist"));
    free(mf);
    /* Bytes that are no manifest. */
    uint8_t junk[32];
    memset(junk, 0xA5, sizeof(junk));
    CU_ASSERT_EQUAL(commit(&f, &w, "ck", 0, junk, sizeof(junk), msg, sizeof(msg)), TT_ECORRUPT);
    tt_zmq_rx_t rx;
    CU_ASSERT_EQUAL_FATAL(list(&f, &ctl, "ck", &rx), 0);
    const Tether__CheckpointsReply *r = rx.env->checkpoints_reply;
    CU_ASSERT_EQUAL(r->n_checkpoints, 0);
    /* Refused after the pool looked at the parts: failed attempts, step-6
     * counted once for its two refusals; bytes that are no manifest name
     * no attempt. */
    CU_ASSERT_EQUAL(r->failures, 2);
    CU_ASSERT_EQUAL(r->failures_since_commit, 2);
    if (r->last_failure != NULL) {
        CU_ASSERT_STRING_EQUAL(r->last_failure->checkpoint_id, "step-6");
        CU_ASSERT_STRING_EQUAL(r->last_failure->worker_id, "w0");
        CU_ASSERT_PTR_NOT_NULL(strstr(r->last_failure->reason, "commit refused: "));
    } else {
        CU_FAIL("no last failure");
    }
    tt_zmq_rx_close(&rx);
    teardown(&f, &w, &ctl);
}

/* CheckpointFailure from `w`: the error code (0: Ack). */
static int report_failure(fx_t *f, cli_t *w, const char *job, const char *id, uint64_t request,
                          const char *reason) {
    Tether__CheckpointFailure cf = TETHER__CHECKPOINT_FAILURE__INIT;
    cf.checkpoint_id = (char *)id;
    cf.step = 40;
    cf.request = request;
    cf.reason = (char *)reason;
    tt_env_t env;
    tt_wire_env_init(&env, job, w->sender, 1, 0);
    env.body_case = TETHER__ENVELOPE__BODY_CHECKPOINT_FAILURE;
    env.checkpoint_failure = &cf;
    return cli_call_ack(f, w, &env);
}

static void coord_ckpt_failure_reports_are_counted_then_cleared_by_a_commit(void) {
    fx_t f;
    cli_t w, ctl, stranger;
    char msg[512];
    size_t len;
    uint64_t bytes;
    setup(&f, &w, &ctl, "ck", 2);
    cli_open(&f, &stranger, "worker", "w9");
    CU_ASSERT_EQUAL(report_failure(&f, &w, "ck", "step-40", 0, "rank 1: No space left on device"),
                    0);
    CU_ASSERT_EQUAL(report_failure(&f, &w, "ck", "step-40", 2, "rank 0: No space left"), 0);
    CU_ASSERT_EQUAL(report_failure(&f, &stranger, "ck", "step-41", 2, "x"), TT_EFENCED);
    CU_ASSERT_EQUAL(report_failure(&f, &w, "nojob", "step-41", 2, "x"), TT_EJOB);
    tt_zmq_rx_t rx;
    CU_ASSERT_EQUAL_FATAL(list(&f, &ctl, "ck", &rx), 0);
    const Tether__CheckpointsReply *r = rx.env->checkpoints_reply;
    CU_ASSERT_EQUAL(r->failures, 1);
    if (r->last_failure != NULL) {
        CU_ASSERT_STRING_EQUAL(r->last_failure->checkpoint_id, "step-40");
        CU_ASSERT_STRING_EQUAL(r->last_failure->reason, "rank 1: No space left on device");
        CU_ASSERT_EQUAL(r->last_failure->request, 2);
        CU_ASSERT_EQUAL(r->last_failure->step, 40);
        CU_ASSERT(r->last_failure->unix_ms > 0);
    } else {
        CU_FAIL("no last failure");
    }
    tt_zmq_rx_close(&rx);
    uint8_t *mf = write_checkpoint(&f, "step-48", 48, &len, &bytes);
    CU_ASSERT_EQUAL(commit(&f, &w, "ck", 0, mf, len, msg, sizeof(msg)), 0);
    free(mf);
    CU_ASSERT_EQUAL_FATAL(list(&f, &ctl, "ck", &rx), 0);
    CU_ASSERT_EQUAL(rx.env->checkpoints_reply->failures, 1);
    CU_ASSERT_EQUAL(rx.env->checkpoints_reply->failures_since_commit, 0);
    tt_zmq_rx_close(&rx);
    tt_zmq_close(&stranger.sock);
    teardown(&f, &w, &ctl);
}

/* Both commits reach the coordinator before its loop runs: the router
 * drains them in one go, so the second finds the first in the pool. */
static void coord_ckpt_second_commit_waits_for_the_first(void) {
    fx_t f;
    cli_t w, ctl;
    char msg[512], ids[128];
    size_t l1, l2;
    uint64_t bytes;
    setup(&f, &w, &ctl, "ck", 3);
    uint8_t *m1 = write_checkpoint(&f, "step-60", 60, &l1, &bytes);
    uint8_t *m2 = write_checkpoint(&f, "step-61", 61, &l2, &bytes);
    uint64_t id1 = send_commit(&f, &w, "ck", 0, m1, l1);
    uint64_t id2 = send_commit(&f, &w, "ck", 0, m2, l2);
    tt_clock_sleep_ms(200); /* both are queued at the ROUTER now */
    CU_ASSERT_EQUAL(commit_reply(&f, &w, id2, msg, sizeof(msg)), TT_EAGAIN);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "commit of step-61 in progress"));
    CU_ASSERT_EQUAL(commit_reply(&f, &w, id1, msg, sizeof(msg)), 0);
    CU_ASSERT_EQUAL(commit(&f, &w, "ck", 0, m2, l2, msg, sizeof(msg)), 0); /* the retry */
    tt_zmq_rx_t rx;
    CU_ASSERT_EQUAL_FATAL(list(&f, &ctl, "ck", &rx), 0);
    ids_of(rx.env->checkpoints_reply, ids, sizeof(ids));
    CU_ASSERT_STRING_EQUAL(ids, "step-60,step-61");
    tt_zmq_rx_close(&rx);
    latest_is(&f, "step-61");
    free(m1);
    free(m2);
    teardown(&f, &w, &ctl);
}

static void coord_ckpt_timer_requests_every_ms_while_running(void) {
    fx_t f;
    cli_t w, v;
    uint64_t req, served;
    fx_start(&f);
    cli_open(&f, &w, "worker", "w0");
    cli_open(&f, &v, "worker", "v0");
    uint64_t gen = join(&f, &w, "tm", 2, 150);
    uint64_t genv = join(&f, &v, "off", 0, 150); /* keep 0: the timer stays off */
    fx_pump_for(&f, 500);
    heartbeat(&f, &w, "tm", gen, &req, &served);
    CU_ASSERT_EQUAL(req, 1); /* fired once; the outstanding request holds the next */
    CU_ASSERT_EQUAL(served, 0);
    heartbeat(&f, &v, "off", genv, &req, &served);
    CU_ASSERT_EQUAL(req, 0);
    commit_ok(&f, &w, "tm", "step-3", 3, 1);
    heartbeat(&f, &w, "tm", gen, &req, &served);
    CU_ASSERT_EQUAL(req, 1);
    CU_ASSERT_EQUAL(served, 1);
    fx_pump_for(&f, 500);
    heartbeat(&f, &w, "tm", gen, &req, &served);
    CU_ASSERT_EQUAL(req, 2);
    tt_zmq_close(&w.sock);
    tt_zmq_close(&v.sock);
    fx_stop(&f);
}

static void coord_ckpt_close_while_commit_runs(void) {
    fx_t f;
    cli_t w, ctl;
    size_t len;
    uint64_t bytes;
    fx_start(&f);
    cli_open(&f, &w, "worker", "w0");
    join(&f, &w, "ck", 2, 0);
    uint8_t *mf = write_checkpoint(&f, "step-50", 50, &len, &bytes);
    send_commit(&f, &w, "ck", 0, mf, len);
    int busy = 0;
    uint64_t end = tt_clock_mono_ms() + CALL_MS;
    while (!busy && !exists(&f, "step-50", TT_MANIFEST_FILE) && tt_clock_mono_ms() < end) {
        fx_pump(&f);
        busy = coord_find_job(f.coord, "ck")->commit_busy;
    }
    printf("\n  closing with the commit %s\n", busy ? "in the pool" : "already done");
    tt_zmq_close(&w.sock);
    fx_down(&f); /* waits for the work, records it, writes the state */
    free(mf);
    fx_up(&f);
    cli_open(&f, &ctl, "ctl", "t");
    tt_zmq_rx_t rx;
    CU_ASSERT_EQUAL_FATAL(list(&f, &ctl, "ck", &rx), 0);
    CU_ASSERT_EQUAL_FATAL(rx.env->checkpoints_reply->n_checkpoints, 1);
    CU_ASSERT_STRING_EQUAL(rx.env->checkpoints_reply->checkpoints[0]->checkpoint_id, "step-50");
    tt_zmq_rx_close(&rx);
    CU_ASSERT(exists(&f, "step-50", TT_MANIFEST_FILE));
    tt_zmq_close(&ctl.sock);
    fx_stop(&f);
}

/* ---- the real tetherctl ---- */

typedef struct proc {
    pid_t pid;
    int fd;
    char out[16384];
    size_t len;
    int code; /* exit code once done */
    int done;
} proc_t;

/* tetherctl of this build tree (tests/unit/ -> tools/), stdout and stderr
 * into one pipe. */
static void ctl_start(proc_t *p, const fx_t *f, const char *const *args) {
    char self[1024] = "", exe[1200], *argv[16];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    self[n > 0 ? n : 0] = '\0';
    snprintf(exe, sizeof(exe), "%s/../../tools/tetherctl", dirname(self));
    int fds[2];
    CU_ASSERT_EQUAL_FATAL(pipe(fds), 0);
    int k = 0;
    argv[k++] = exe;
    argv[k++] = "--coordinator";
    argv[k++] = (char *)tt_coord_endpoint(f->coord);
    for (const char *const *a = args; *a != NULL && k < 15; a++)
        argv[k++] = (char *)*a;
    argv[k] = NULL;
    memset(p, 0, sizeof(*p));
    p->pid = fork();
    if (p->pid == 0) {
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        execv(exe, argv);
        _exit(127);
    }
    close(fds[1]);
    p->fd = fds[0];
    fcntl(p->fd, F_SETFL, O_NONBLOCK);
}

/* Pumps the coordinator until the process exits; its exit code. */
static int ctl_finish(fx_t *f, proc_t *p) {
    uint64_t end = tt_clock_mono_ms() + 20000;
    while (!p->done && tt_clock_mono_ms() < end) {
        fx_pump(f);
        ssize_t n = read(p->fd, p->out + p->len, sizeof(p->out) - 1 - p->len);
        if (n > 0) {
            p->len += (size_t)n;
        } else if (n == 0) {
            int status = 0;
            waitpid(p->pid, &status, 0);
            p->code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
            p->done = 1;
        } else {
            tt_clock_sleep_ms(2);
        }
    }
    p->out[p->len] = '\0';
    close(p->fd);
    CU_ASSERT_FATAL(p->done);
    return p->code;
}

static int ctl_run(fx_t *f, proc_t *p, const char *const *args) {
    ctl_start(p, f, args);
    return ctl_finish(f, p);
}

static void coord_ckpt_tetherctl_checkpoint_and_checkpoints(void) {
    fx_t f;
    cli_t w, ctl;
    proc_t p;
    setup(&f, &w, &ctl, "ck", 3);
    /* --wait: the commit serving request 1 lets it print the checkpoint. */
    const char *wait[] = {"checkpoint", "ck", "--wait", "--timeout-ms", "15000", NULL};
    ctl_start(&p, &f, wait);
    tt_zmq_rx_t rx;
    uint64_t requested = 0, end = tt_clock_mono_ms() + CALL_MS;
    while (requested == 0 && tt_clock_mono_ms() < end && list(&f, &ctl, "ck", &rx) == 0) {
        requested = rx.env->checkpoints_reply->requested;
        tt_zmq_rx_close(&rx);
    }
    CU_ASSERT_EQUAL(requested, 1);
    commit_ok(&f, &w, "ck", "step-40", 40, 1);
    CU_ASSERT_EQUAL(ctl_finish(&f, &p), 0);
    printf("\n%s", p.out);
    CU_ASSERT_PTR_NOT_NULL(strstr(p.out, "checkpoint of job 'ck' requested (request 1)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(p.out, "checkpoint step-40 of job 'ck' committed: step 40, "));
    CU_ASSERT_PTR_NOT_NULL(strstr(p.out, f.root));

    const char *table[] = {"checkpoints", "ck", NULL};
    CU_ASSERT_EQUAL(ctl_run(&f, &p, table), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(p.out, "CREATED (UTC)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(p.out, "step-40"));
    CU_ASSERT_PTR_NOT_NULL(strstr(p.out, "2023-11-14T22:13:20Z")); /* 1700000000040 ms */
    CU_ASSERT_PTR_NOT_NULL(strstr(p.out, "requests: 1 made, 1 served"));
    const char *json[] = {"checkpoints", "ck", "--json", NULL};
    CU_ASSERT_EQUAL(ctl_run(&f, &p, json), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(p.out, "\"requested\":1,\"served\":1,\"keep\":3"));
    CU_ASSERT_PTR_NOT_NULL(strstr(p.out, "\"id\":\"step-40\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(p.out, "\"step\":40"));
    CU_ASSERT_PTR_NOT_NULL(strstr(p.out, "\"newest\":true"));
    const char *req_json[] = {"checkpoint", "ck", "--json", NULL};
    CU_ASSERT_EQUAL(ctl_run(&f, &p, req_json), 0);
    CU_ASSERT_STRING_EQUAL(p.out, "{\"job\":\"ck\",\"request\":2}\n");
    /* Nobody serves request 3: a clear timeout, exit 1. */
    const char *late[] = {"checkpoint", "ck", "--wait", "--timeout-ms", "600", NULL};
    CU_ASSERT_EQUAL(ctl_run(&f, &p, late), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(p.out, "request 3 of job 'ck' not served within 600 ms"));
    const char *unknown[] = {"checkpoint", "ghost", NULL};
    CU_ASSERT_EQUAL(ctl_run(&f, &p, unknown), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(p.out, "unknown job 'ghost'"));
    /* The offline form of a root directory is unchanged. */
    const char *offline[] = {"checkpoints", f.root, "--json", NULL};
    CU_ASSERT_EQUAL(ctl_run(&f, &p, offline), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(p.out, "\"id\":\"step-40\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(p.out, "\"latest\":true"));
    teardown(&f, &w, &ctl);
}

static const tt_cunit_test_t tests[] = {
    {"coord_ckpt_refuses_unknown_job_and_keep_0", coord_ckpt_refuses_unknown_job_and_keep_0},
    {"coord_ckpt_requests_show_in_heartbeats_and_list",
     coord_ckpt_requests_show_in_heartbeats_and_list},
    {"coord_ckpt_commit_stores_records_and_survives_restart",
     coord_ckpt_commit_stores_records_and_survives_restart},
    {"coord_ckpt_commit_refuses_missing_or_short_parts",
     coord_ckpt_commit_refuses_missing_or_short_parts},
    {"coord_ckpt_failure_reports_are_counted_then_cleared_by_a_commit",
     coord_ckpt_failure_reports_are_counted_then_cleared_by_a_commit},
    {"coord_ckpt_second_commit_waits_for_the_first", coord_ckpt_second_commit_waits_for_the_first},
    {"coord_ckpt_timer_requests_every_ms_while_running",
     coord_ckpt_timer_requests_every_ms_while_running},
    {"coord_ckpt_close_while_commit_runs", coord_ckpt_close_while_commit_runs},
    {"coord_ckpt_tetherctl_checkpoint_and_checkpoints",
     coord_ckpt_tetherctl_checkpoint_and_checkpoints},
    {NULL, NULL},
};

TT_CUNIT_MAIN("coord_ckpt", tests)
