/* tt_train_ckpt_coord: the coordinator's part of trainer checkpoints, used
 * when the run joined a job (tt_train_ckpt_opts_t.tether). The coordinator
 * keeps the schedule: it counts checkpoint requests (its timer, `tetherctl
 * checkpoint JOB`) and hands the counters out with every heartbeat reply;
 * rank 0 turns "requested > served" into its wish in the control reduce,
 * exactly where its own timer used to go, so every rank still agrees on
 * the boundary. Once every part is durable, rank 0 sends the manifest and
 * the coordinator commits it (writes MANIFEST, moves `latest`, applies
 * retention, records it durably). Resume asks the coordinator which
 * checkpoint the job committed last, so a full cluster restart resumes from
 * the coordinator's record rather than whatever a `latest` file says. */
#include "tt_train_ckpt_int.h"

#include "tether/tether.h"
#include "tt_clock.h"
#include "tt_log.h"
#include "tt_status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Long enough to ride out a coordinator restart (its state reload). */
#define TC_COMMIT_TIMEOUT_MS 60000u
#define TC_LIST_TIMEOUT_MS   5000u
#define TC_LIST_MAX          64u

/* Rank 0 pauses before it takes the open requests up again (tt_ckpt_retry):
 * says so once per failure, so an operator reading the log knows why a
 * request waits. */
static void back_off(tt_train_ckpt_t *c, uint64_t requested, uint64_t now_ms, const char *what) {
    uint64_t d = tt_ckpt_retry_failed(&c->retry, requested, now_ms);
    TT_WARN("ckpt",
            "%s: the coordinator's open checkpoint request(s) are taken up again in %llu s, or "
            "at once on a new request",
            what, (unsigned long long)(d / 1000));
}

int tt_tc_coord_wanted(tt_train_ckpt_t *c, uint64_t now_ms) {
    uint64_t requested = 0, served = 0;
    tether_checkpoint_requests(c->tether, &requested, &served);
    if (atomic_exchange_explicit(&c->commit_failed, 0, memory_order_acq_rel)) {
        c->req_taken = 0; /* its request is still open: take it up again */
        back_off(c, requested, now_ms, "the commit failed");
    }
    tt_ckpt_retry_served(&c->retry, served);
    uint64_t done = served > c->req_taken ? served : c->req_taken;
    return requested > done && !tt_ckpt_retry_holds(&c->retry, requested, now_ms);
}

void tt_tc_coord_started(tt_train_ckpt_t *c, int wanted) {
    uint64_t requested = 0;
    tether_checkpoint_requests(c->tether, &requested, NULL);
    c->req_serving = wanted ? requested : 0;
    if (wanted)
        c->req_taken = requested;
}

void tt_tc_coord_aborted(tt_train_ckpt_t *c, int writer_failed, uint64_t now_ms) {
    uint64_t requested = 0;
    tether_checkpoint_requests(c->tether, &requested, NULL);
    if (writer_failed && c->req_serving != 0)
        back_off(c, requested, now_ms, "a part of the checkpoint was not written");
    c->req_taken = 0;
    c->req_serving = 0;
}

/* Test knob TETHER_TRAIN_TEST_COMMIT_HOLD_MS: the commit thread waits that
 * long before it sends the commit, so a test can stop this process with
 * its commit in flight (the fenced-rank-0 case tt_rdzv_may_commit is
 * for). */
static void hold_for_test(const tt_train_ckpt_t *c) {
    const char *v = getenv("TETHER_TRAIN_TEST_COMMIT_HOLD_MS");
    unsigned long long ms = v != NULL ? strtoull(v, NULL, 10) : 0;
    if (ms == 0)
        return;
    TT_WARN("ckpt", "test knob: commit of %s (generation %llu) held %llu ms", c->commit.id,
            (unsigned long long)c->commit_gen, ms);
    tt_clock_sleep_ms(ms);
}

int tt_tc_coord_commit(tt_train_ckpt_t *c, char *err, size_t errlen) {
    uint8_t *buf = NULL;
    size_t len = 0;
    hold_for_test(c);
    int rc = tt_manifest_encode(&c->commit, &buf, &len, err, errlen);
    if (rc == TT_OK)
        rc = tether_checkpoint_commit(c->tether, c->root, c->commit_request, c->commit_gen, buf,
                                      len, TC_COMMIT_TIMEOUT_MS, err, errlen);
    free(buf);
    if (rc != TT_OK)
        atomic_store_explicit(&c->commit_failed, 1, memory_order_release);
    return rc;
}

/* latest-valid: the newest recorded checkpoint that verifies. */
static int pick_valid(const tether_checkpoint_t *v, size_t n, char *dir, char *err, size_t errlen) {
    for (size_t i = n; i-- > 0;) {
        tt_ckpt_report_t rep;
        int rc = tt_ckpt_verify(v[i].dir, &rep);
        if (rc == TT_OK) {
            tt_ckpt_report_free(&rep);
            snprintf(dir, TT_CKPT_PATH_MAX, "%s", v[i].dir);
            return TT_OK;
        }
        TT_WARN("ckpt", "checkpoint %s recorded by the coordinator does not verify: %s", v[i].id,
                rep.msg);
        tt_ckpt_report_free(&rep);
    }
    snprintf(err, errlen, "none of the %zu checkpoints the coordinator recorded verifies", n);
    return TT_ECORRUPT;
}

int tt_tc_coord_pick(tt_train_ckpt_t *c, const char *mode, char *dir, int *verify, char *err,
                     size_t errlen) {
    tether_checkpoint_t *v = calloc(TC_LIST_MAX, sizeof(*v));
    size_t n = 0;
    char why[512] = "";
    int rc = v == NULL ? TT_ENOMEM
                       : tether_checkpoint_list(c->tether, v, TC_LIST_MAX, &n, TC_LIST_TIMEOUT_MS,
                                                why, sizeof(why));
    int job = strcmp(mode, "job") == 0;
    if (rc != TT_OK || n == 0) {
        if (rc != TT_OK)
            TT_WARN("ckpt", "cannot list the job's checkpoints at the coordinator (%s): %s%s", why,
                    job ? "starting from scratch" : "looking under ", job ? "" : c->root);
        free(v);
        return rc == TT_ENOMEM ? rc : 1;
    }
    if (strcmp(mode, "auto") == 0) {
        *verify = 1; /* a missing or damaged one is refused, naming the part */
        snprintf(dir, TT_CKPT_PATH_MAX, "%s", v[n - 1].dir);
        rc = TT_OK;
    } else {
        *verify = 0;
        rc = pick_valid(v, n, dir, err, errlen);
    }
    if (rc == TT_OK)
        TT_INFO("ckpt", "the coordinator's record names %s for --resume %s", dir, mode);
    free(v);
    return rc;
}
