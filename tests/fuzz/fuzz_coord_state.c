/* fuzz_coord_state: fuzzes tt_wire_state_decode(), the loader of the
 * coordinator's durable state file, which is read back from disk at start-up
 * where a torn or corrupt file must be rejected, never crash the daemon.
 * Whatever the decoder accepts must encode and decode again (the coordinator
 * rewrites the file it loaded), so a round-trip failure aborts on purpose.
 * fuzz-requires: common/tt_wire.c */
#include "tt_fuzz.h"
#include "tt_fuzz_pb.h"
#include "tt_status.h"
#include "tt_wire.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[256];
    tt_coord_state_pb_t *st = NULL;
    if (tt_wire_state_decode(data, size, &st, err, sizeof(err)) != TT_OK) {
        if (st != NULL)
            abort(); /* a rejected file must leave nothing behind */
        return 0;
    }
    if (tt_fuzz_pb_has_unknown(&st->base)) {
        tt_wire_state_free(&st);
        return 0;
    }
    uint8_t *buf = NULL;
    size_t len = 0;
    if (tt_wire_state_encode(st, &buf, &len) != TT_OK)
        abort();
    tt_coord_state_pb_t *again = NULL;
    if (tt_wire_state_decode(buf, len, &again, err, sizeof(err)) != TT_OK ||
        again->n_jobs != st->n_jobs)
        abort();
    tt_wire_state_free(&again);
    tt_wire_state_free(&st);
    free(buf);
    return 0;
}

static int emit_state(tt_fuzz_emit_fn emit, void *ctx, const char *name,
                      const tt_coord_state_pb_t *st) {
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = tt_wire_state_encode(st, &buf, &len);
    if (rc == TT_OK)
        rc = emit(ctx, name, buf, len);
    free(buf);
    return rc;
}

/* One running job with two members: exercises every nested message. */
static void fill_running_job(Tether__CoordJobRecord *job, Tether__JobSettings *set,
                             Tether__Member *m, Tether__Member **mp) {
    tether__job_settings__init(set);
    set->min_workers = 2;
    set->max_workers = 8;
    set->heartbeat_ms = 500;
    set->heartbeat_timeout_ms = 3000;
    set->global_batch = 256;
    for (int i = 0; i < 2; i++) {
        tether__member__init(&m[i]);
        m[i].rank = (uint32_t)i;
        m[i].worker_id = i ? "w-beta" : "w-alpha";
        m[i].host = "127.0.0.1";
        m[i].endpoint = i ? "tcp://127.0.0.1:7801" : "tcp://127.0.0.1:7800";
        m[i].last_step = 41 + i;
        m[i].incarnation = 7;
        mp[i] = &m[i];
    }
    tether__coord_job_record__init(job);
    job->job_id = "mnist";
    job->settings = set;
    job->generation = 3;
    job->n_members = 2;
    job->members = mp;
    job->last_committed_step = 40;
    job->state = TETHER__JOB_STATE__JOB_RUNNING;
}

int tt_fuzz_seeds(tt_fuzz_emit_fn emit, void *ctx) {
    tt_coord_state_pb_t st;
    tether__coord_state__init(&st);
    st.version = TT_WIRE_VERSION;
    int rc = emit_state(emit, ctx, "empty", &st);

    Tether__CoordJobRecord jobs[2];
    Tether__CoordJobRecord *jp[2] = {&jobs[0], &jobs[1]};
    Tether__JobSettings set;
    Tether__Member m[2];
    Tether__Member *mp[2];
    fill_running_job(&jobs[0], &set, m, mp);
    jobs[1] = jobs[0];
    jobs[1].job_id = "failed-job";
    jobs[1].n_members = 0;
    jobs[1].state = TETHER__JOB_STATE__JOB_FAILED;
    jobs[1].failure = "below min_workers for 30000 ms";
    jobs[1].last_committed_step = -1;
    st.jobs = jp;
    st.n_jobs = 1;
    if (rc == TT_OK)
        rc = emit_state(emit, ctx, "one-job", &st);
    st.n_jobs = 2;
    if (rc == TT_OK)
        rc = emit_state(emit, ctx, "two-jobs", &st);
    return rc;
}
