/* tt_testclient: a worker process for the integration tests. It uses the
 * public libtether API (include/tether/tether.h) to join a job, report
 * steps or just stay a member (two modes below reach further: the id
 * relay an NCCL worker uses, and a raw socket), and prints one
 * machine-readable line per event on stdout (line-buffered) for the test
 * scripts to parse:
 *   JOINED gen=G rank=R world=W      after the first join
 *   GENERATION gen=G rank=R world=W  on every later generation change
 *   STEP s                           after tether_step_done(s) returned
 *   FENCED                           declared dead by the coordinator
 *   REJOINED gen=G rank=R world=W    joined again (--rejoin-on-fence)
 *   ERROR <code name> <message>      then exit 1
 *   DONE                             then exit 0
 * Without --steps it idles, but like any worker it honours an announced
 * regroup: it reports the regroup step as completed and waits at the
 * boundary, so joiners can be admitted. SIGTERM/SIGINT: leave and exit 0.
 * --fetch-comm-id MS: after joining, a member other than rank 0 asks the
 * coordinator for the generation's collective id (tt_commid, as an NCCL
 * worker does) for up to MS ms and prints
 *   COMMID <status name> ms=T <sentence>
 * then goes on idling; rank 0 never offers one, so this is a job whose
 * NCCL init would wait for its rank 0.
 * SIGUSR1 (idle mode): report a failure that names no peer
 * (tether_report_failure with TETHER_SUSPECT_ANY, as an NCCL worker does)
 * and print
 *   REPORTED <status name>
 * --send-oversized N is a separate mode: one well-formed message with an
 * N-byte payload frame sent straight through the socket factory (to check
 * that the coordinator's ZMQ_MAXMSGSIZE holds), then exit. */
#include "tether/tether.h"
#include "tt_clock.h"
#include "tt_commid.h"
#include "tt_config.h"
#include "tt_status.h"
#include "tt_zmq.h"

#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Set by the signal handlers; a signal handler can reach nothing else. */
static volatile sig_atomic_t tc_stop, tc_report;

static void on_signal(int sig) {
    if (sig == SIGUSR1)
        tc_report = 1;
    else
        tc_stop = 1;
}

typedef struct tc_cfg {
    int64_t steps;
    int64_t step_ms;
    int64_t run_ms;
    int print;
    int rejoin_on_fence;
    int64_t send_oversized;
    int64_t fetch_comm_id;
} tc_cfg_t;

static const tt_config_entry_t tc_table[] = {
    {"steps", TT_CFG_INT, "-1", -1, INT64_MAX / 2, "report steps 0..N-1 (-1: idle)", 0,
     offsetof(tc_cfg_t, steps)},
    {"step-ms", TT_CFG_INT, "100", 0, 3600000, "time per step", 0, offsetof(tc_cfg_t, step_ms)},
    {"run-ms", TT_CFG_INT, "0", 0, INT64_MAX / 2, "idle this long without --steps", 0,
     offsetof(tc_cfg_t, run_ms)},
    {"print", TT_CFG_BOOL, "false", 0, 1, "print event lines on stdout", 0,
     offsetof(tc_cfg_t, print)},
    {"rejoin-on-fence", TT_CFG_BOOL, "false", 0, 1, "join again after being fenced", 0,
     offsetof(tc_cfg_t, rejoin_on_fence)},
    {"send-oversized", TT_CFG_INT, "0", 0, 1 << 30, "send one N-byte payload and exit", 0,
     offsetof(tc_cfg_t, send_oversized)},
    {"fetch-comm-id", TT_CFG_INT, "0", 0, 3600000,
     "not rank 0: ask for the collective id this long after joining", 0,
     offsetof(tc_cfg_t, fetch_comm_id)},
};
#define TC_NCFG (sizeof(tc_table) / sizeof(tc_table[0]))

typedef struct tc {
    tc_cfg_t cfg;
    tether_t *t;
} tc_t;

static void say(const tc_t *tc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const tc_t *tc, const char *fmt, ...) {
    if (!tc->cfg.print)
        return;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

static void say_gen(const tc_t *tc, const char *what) {
    say(tc, "%s gen=%" PRIu64 " rank=%d world=%u", what, tether_generation(tc->t),
        tether_rank(tc->t), tether_world_size(tc->t));
}

static int fail(const tc_t *tc, int rc) {
    const char *msg = tc->t ? tether_last_error(tc->t) : "";
    say(tc, "ERROR %s %s", tether_status_name(rc), msg);
    fprintf(stderr, "tt_testclient: %s: %s\n", tether_strerror(rc), msg);
    return 1;
}

static void nap_ms(int64_t ms) {
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Fenced: print it, then join again (new incarnation) or give up. */
static int on_fenced(tc_t *tc) {
    say(tc, "FENCED");
    if (!tc->cfg.rejoin_on_fence)
        return fail(tc, TETHER_EFENCED);
    int rc = tether_join(tc->t, 0);
    if (rc != TETHER_OK)
        return fail(tc, rc);
    tether_poll_generation(tc->t, NULL);
    say_gen(tc, "REJOINED");
    return 0;
}

/* Reacts to the outcome of tether_step_done; 0 to go on. */
static int after_step(tc_t *tc, int rc) {
    if (rc == TETHER_OK)
        return 0;
    if (rc == TETHER_REGROUPED) {
        /* The idle loop may have printed this generation already. */
        if (tether_poll_generation(tc->t, NULL))
            say_gen(tc, "GENERATION");
        return 0;
    }
    if (rc == TETHER_EFENCED)
        return on_fenced(tc);
    return fail(tc, rc);
}

static int run_steps(tc_t *tc) {
    for (int64_t s = 0; s < tc->cfg.steps && !tc_stop; s++) {
        for (int64_t left = tc->cfg.step_ms; left > 0 && !tc_stop; left -= 10)
            nap_ms(left < 10 ? left : 10);
        int rc = tether_step_done(tc->t, s);
        say(tc, "STEP %" PRId64, s);
        if (after_step(tc, rc) != 0)
            return 1;
    }
    return 0;
}

/* Idles, printing generation changes and honouring regroups and fences. */
static int run_idle(tc_t *tc) {
    for (int64_t left = tc->cfg.run_ms; left > 0 && !tc_stop; left -= 10) {
        nap_ms(10);
        int rc = tether_check(tc->t);
        if (rc == TETHER_EFENCED) {
            if (on_fenced(tc) != 0)
                return 1;
            continue;
        }
        if (rc != TETHER_OK)
            return fail(tc, rc);
        if (tc_report) {
            tc_report = 0;
            rc = tether_report_failure(tc->t, TETHER_SUSPECT_ANY,
                                       "test: a collective failed and names no peer");
            say(tc, "REPORTED %s", tether_status_name(rc));
        }
        if (tether_poll_generation(tc->t, NULL))
            say_gen(tc, "GENERATION");
        int64_t s = tether_regroup_step(tc->t);
        if (s >= 0 && after_step(tc, tether_step_done(tc->t, s)) != 0)
            return 1;
    }
    return 0;
}

static int send_oversized(const tether_opts_t *o, size_t n) {
    void *zctx = zmq_ctx_new();
    void *sock = NULL;
    char err[256] = "";
    int rc = tt_zmq_dealer(zctx, o->coordinator, NULL, &sock, err, sizeof(err));
    uint8_t *blob = calloc(n ? n : 1, 1);
    if (rc == TT_OK && blob != NULL) {
        Tether__Heartbeat hb = TETHER__HEARTBEAT__INIT;
        tt_env_t env;
        tt_wire_env_init(&env, o->job_id, o->worker_id, 0, 1);
        env.body_case = TETHER__ENVELOPE__BODY_HEARTBEAT;
        env.heartbeat = &hb;
        tt_zmq_payload_t p = {.data = blob, .len = n};
        for (int i = 0; i < 100 && (rc = tt_zmq_send(sock, NULL, 0, &env, &p, 1, 1)) == TT_EAGAIN;
             i++)
            nap_ms(20);
        nap_ms(300); /* let ZeroMQ put it on the wire (linger is 0) */
    }
    if (rc != TT_OK)
        fprintf(stderr, "tt_testclient: oversized send: %s %s\n", tt_strerror(rc), err);
    free(blob);
    tt_zmq_close(&sock);
    zmq_ctx_term(zctx);
    return rc == TT_OK ? 0 : 1;
}

/* What a non-zero rank of an NCCL job does before its init. */
static void fetch_comm_id(const tc_t *tc, const tether_opts_t *o) {
    if (tether_rank(tc->t) == 0)
        return;
    tt_zauth_key_t key; /* the worker's own was checked by tether_create */
    char err[512] = "";
    tt_zauth_load(&key, o->key_file, err, sizeof(err));
    tt_commid_opts_t co = {.coordinator = o->coordinator,
                           .key = &key,
                           .job_id = o->job_id,
                           .worker_id = o->worker_id,
                           .generation = tether_generation(tc->t),
                           .timeout_ms = (int)tc->cfg.fetch_comm_id};
    uint8_t id[128];
    uint64_t t0 = tt_clock_mono_ms();
    int rc = tt_commid_fetch(&co, id, sizeof(id), err, sizeof(err));
    say(tc, "COMMID %s ms=%" PRIu64 " %s", tt_status_name(rc), tt_clock_mono_ms() - t0, err);
}

static int load(tc_t *tc, tether_opts_t *o, int argc, char **argv) {
    char err[512] = "";
    int first = argc;
    int rc = tt_config_load(tc_table, TC_NCFG, &tc->cfg, argc, argv,
                            "usage: tt_testclient [options]   (TETHER_* env: see tether.h)", &first,
                            err, sizeof(err));
    if (rc == TT_CONFIG_HELP)
        return -1;
    if (rc == TT_OK && first < argc) {
        snprintf(err, sizeof(err), "unexpected argument '%s'", argv[first]);
        rc = TT_EINVAL;
    }
    tether_opts_default(o);
    if (rc == TT_OK)
        rc = tether_opts_from_env(o, err, sizeof(err));
    if (rc != TT_OK) {
        say(tc, "ERROR %s %s", tether_status_name(rc), err);
        fprintf(stderr, "tt_testclient: %s\n", err);
        return 2;
    }
    return 0;
}

int main(int argc, char **argv) {
    tc_t tc = {0};
    tether_opts_t o;
    int rc = load(&tc, &o, argc, argv);
    if (rc != 0)
        return rc < 0 ? 0 : rc;
    if (tc.cfg.send_oversized > 0)
        return send_oversized(&o, (size_t)tc.cfg.send_oversized);
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    char err[512] = "";
    rc = tether_create(&tc.t, &o, err, sizeof(err));
    if (rc != TETHER_OK) {
        say(&tc, "ERROR %s %s", tether_status_name(rc), err);
        return 1;
    }
    rc = tether_join(tc.t, 0);
    if (rc != TETHER_OK) {
        rc = fail(&tc, rc);
    } else {
        tether_poll_generation(tc.t, NULL);
        say_gen(&tc, "JOINED");
        if (tc.cfg.fetch_comm_id > 0)
            fetch_comm_id(&tc, &o);
        rc = tc.cfg.steps >= 0 ? run_steps(&tc) : run_idle(&tc);
    }
    if (rc == 0)
        say(&tc, "DONE");
    tether_destroy(&tc.t);
    return rc;
}
