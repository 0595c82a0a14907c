/* tether_ckpt: the exported tether_checkpoint_* functions - what a trainer
 * needs from the coordinator to take coordinated checkpoints: the job's
 * request counters (kept by the client from heartbeat replies), the commit
 * (the coordinator writes the manifest), the report of a part that could
 * not be written, and the list of committed checkpoints (resume after a
 * full restart). Commit and list open a DEALER
 * of their own (tt_zreq), because they run on a trainer's writer thread
 * while the client's thread owns the client's socket. It owns no
 * checkpoint format (common/tt_manifest*) and no schedule (the coordinator
 * and tt_ckpt_sched). */
#include "tether/tether.h"
#include "tether_internal.h"
#include "tt_clock.h"
#include "tt_status.h"
#include "tt_zreq.h"

#include <stdio.h>
#include <string.h>

TETHER_API int tether_checkpoint_requests(tether_t *t, uint64_t *requested, uint64_t *served) {
    if (t == NULL)
        return TT_EINVAL;
    tt_client_view_t v;
    tt_client_view(t->client, &v);
    if (requested != NULL)
        *requested = v.ckpt_requested;
    if (served != NULL)
        *served = v.ckpt_served;
    return TT_OK;
}

/* One call on a fresh DEALER: the reply's body must be `want` (or Error,
 * whose code is returned with its sentence). On TT_OK *reply owns the
 * decoded envelope (tt_wire_free); the frames and the socket are gone. */
static int call_once(tether_t *t, const tt_env_t *env, const tt_zmq_payload_t *pl, size_t npl,
                     int want, uint32_t timeout_ms, tt_env_t **reply, char *err, size_t errlen) {
    const tt_client_opts_t *o = tt_client_opts(t->client);
    tt_zreq_t *z = NULL;
    tt_zmq_rx_t rx;
    int rc = tt_zreq_open(&z, o->coordinator, tt_client_key(t->client), "ckpt", o->worker_id, err,
                          errlen);
    if (rc == TT_OK)
        rc = tt_zreq_call_want(z, env, pl, npl, timeout_ms, want, NULL, &rx, err, errlen);
    *reply = NULL;
    if (rc == TT_OK) { /* the envelope goes to the caller, the frames go */
        *reply = rx.env;
        rx.env = NULL;
        tt_zmq_rx_close(&rx);
    }
    tt_zreq_close(&z);
    return rc;
}

/* Worth asking again: the coordinator restarts, or is busy with this
 * job's previous commit. */
static int transient(int rc) {
    return rc == TT_ETIMEDOUT || rc == TT_EAGAIN || rc == TT_EBUSY;
}

TETHER_API int tether_checkpoint_commit(tether_t *t, const char *root, uint64_t request,
                                        uint64_t generation, const void *manifest, size_t len,
                                        uint32_t timeout_ms, char *err, size_t errlen) {
    if (t == NULL || root == NULL || manifest == NULL || len == 0)
        return TT_EINVAL;
    const tt_client_opts_t *o = tt_client_opts(t->client);
    Tether__CheckpointCommit cc = TETHER__CHECKPOINT_COMMIT__INIT;
    cc.root = (char *)root;
    cc.request = request;
    tt_zmq_payload_t pl = {.data = manifest, .len = len};
    uint64_t end = tt_clock_mono_ms() + timeout_ms;
    int rc = TT_ETIMEDOUT;
    for (uint64_t rid = 1;; rid++) {
        tt_env_t env;
        tt_wire_env_init(&env, o->job_id, o->worker_id, generation, rid);
        env.body_case = TETHER__ENVELOPE__BODY_CHECKPOINT_COMMIT;
        env.checkpoint_commit = &cc;
        uint64_t now = tt_clock_mono_ms();
        uint32_t slice = now >= end ? 0 : (uint32_t)(end - now < 5000 ? end - now : 5000);
        tt_env_t *reply = NULL;
        rc = slice == 0 ? rc
                        : call_once(t, &env, &pl, 1, TETHER__ENVELOPE__BODY_ACK, slice, &reply, err,
                                    errlen);
        tt_wire_free(&reply);
        if (slice == 0 || !transient(rc))
            return rc;
        tt_clock_sleep_ms(200);
    }
}

TETHER_API int tether_checkpoint_failed(tether_t *t, const char *checkpoint_id, uint64_t step,
                                        uint64_t request, uint64_t generation, const char *reason,
                                        uint32_t timeout_ms, char *err, size_t errlen) {
    if (t == NULL || checkpoint_id == NULL || checkpoint_id[0] == '\0' || reason == NULL)
        return TT_EINVAL;
    const tt_client_opts_t *o = tt_client_opts(t->client);
    Tether__CheckpointFailure f = TETHER__CHECKPOINT_FAILURE__INIT;
    char why[TT_WIRE_MAX_TEXT + 1];
    snprintf(why, sizeof(why), "%s", reason); /* the wire's limit, not a refusal */
    f.checkpoint_id = (char *)checkpoint_id;
    f.step = step;
    f.request = request;
    f.reason = why;
    tt_env_t env;
    tt_wire_env_init(&env, o->job_id, o->worker_id, generation, 1);
    env.body_case = TETHER__ENVELOPE__BODY_CHECKPOINT_FAILURE;
    env.checkpoint_failure = &f;
    tt_env_t *reply = NULL;
    int rc =
        call_once(t, &env, NULL, 0, TETHER__ENVELOPE__BODY_ACK, timeout_ms, &reply, err, errlen);
    tt_wire_free(&reply);
    return rc;
}

static void copy_record(const Tether__CheckpointRecord *r, tether_checkpoint_t *out) {
    memset(out, 0, sizeof(*out));
    snprintf(out->id, sizeof(out->id), "%s", r->checkpoint_id ? r->checkpoint_id : "");
    snprintf(out->dir, sizeof(out->dir), "%s", r->dir ? r->dir : "");
    out->step = r->step;
    out->bytes = r->bytes;
    out->created_unix_ms = r->created_unix_ms;
    out->duration_ms = r->duration_ms;
    out->committed_unix_ms = r->committed_unix_ms;
}

TETHER_API int tether_checkpoint_list(tether_t *t, tether_checkpoint_t *out, size_t cap, size_t *n,
                                      uint32_t timeout_ms, char *err, size_t errlen) {
    if (t == NULL || n == NULL || (out == NULL && cap > 0))
        return TT_EINVAL;
    *n = 0;
    const tt_client_opts_t *o = tt_client_opts(t->client);
    Tether__CheckpointsRequest cr = TETHER__CHECKPOINTS_REQUEST__INIT;
    tt_env_t env;
    tt_wire_env_init(&env, o->job_id, o->worker_id, 0, 1);
    env.body_case = TETHER__ENVELOPE__BODY_CHECKPOINTS;
    env.checkpoints = &cr;
    tt_env_t *reply = NULL;
    int rc = call_once(t, &env, NULL, 0, TETHER__ENVELOPE__BODY_CHECKPOINTS_REPLY, timeout_ms,
                       &reply, err, errlen);
    if (rc != TT_OK)
        return rc;
    const Tether__CheckpointsReply *r = reply->checkpoints_reply;
    size_t first = r->n_checkpoints > cap ? r->n_checkpoints - cap : 0;
    for (size_t i = first; i < r->n_checkpoints; i++)
        copy_record(r->checkpoints[i], &out[i - first]);
    *n = r->n_checkpoints - first;
    tt_wire_free(&reply);
    return TT_OK;
}
