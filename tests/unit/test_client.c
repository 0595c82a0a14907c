/* Unit tests of libtether's membership client: the public status codes
 * against tt_status, options from an injected environment and their
 * validation, routing ids and incarnations. The state machine has its own
 * file (test_client_sm.c). The socket/thread part is covered by the
 * integration tests and test_client_live.c; here only create/destroy, a
 * join that cannot connect to anyone and one that a peer never answers. */
#include "tt_client.h"
#include "net_testlib.h"
#include "tt_cunit.h"
#include "tt_status.h"
#include "tt_zmq.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* ---- status codes ---- */

static void client_status_codes_match_internal(void) {
    CU_ASSERT_EQUAL(TETHER_OK, TT_OK);
    CU_ASSERT_EQUAL(TETHER_EINVAL, TT_EINVAL);
    CU_ASSERT_EQUAL(TETHER_ECONFLICT, TT_ECONFLICT);
    CU_ASSERT_EQUAL(TETHER_ECLOSED, TT_ECLOSED);
    CU_ASSERT_EQUAL(TETHER_EBUSY, TT_EBUSY);
    CU_ASSERT_EQUAL(TETHER_ENOMEM, TT_ENOMEM);
    CU_ASSERT_EQUAL(TETHER_ESYS, TT_ESYS);
    CU_ASSERT_EQUAL(TETHER_ESTALE, TT_ESTALE);
    CU_ASSERT_EQUAL(TETHER_ETIMEDOUT, TT_ETIMEDOUT);
    CU_ASSERT_EQUAL(TETHER_EMEMBERSHIP, TT_EMEMBERSHIP);
    CU_ASSERT_EQUAL(TETHER_EFENCED, TT_EFENCED);
    CU_ASSERT_EQUAL(TETHER_EJOBFAILED, TT_EJOBFAILED);
    CU_ASSERT_EQUAL(TETHER_EAGAIN, TT_EAGAIN);
    CU_ASSERT_EQUAL(TETHER_EJOBDONE, TT_EJOBDONE);
    CU_ASSERT_EQUAL(TETHER_EJOBDONE, -55);
    CU_ASSERT_STRING_EQUAL(tether_strerror(TETHER_EJOBDONE), "job already finished");
    CU_ASSERT_EQUAL(TETHER_ENCCL, TT_ENCCL);
    CU_ASSERT_EQUAL(TETHER_EINTERNAL, TT_EINTERNAL);
    /* Every internal code has a public twin with the same name. */
#define X(name, val, msg) CU_ASSERT_STRING_EQUAL(tether_status_name(val), #name);
    TT_STATUS_MAP(X)
#undef X
    CU_ASSERT_STRING_EQUAL(tether_status_name(TETHER_REGROUPED), "REGROUPED");
    CU_ASSERT_STRING_EQUAL(tether_strerror(TETHER_EFENCED), tt_strerror(TT_EFENCED));
}

/* The full public list, checked against the internal map by value and name. */
static void client_public_list_complete(void) {
    static const struct {
        int code;
        const char *name;
    } pub[] = {
        {TETHER_EINVAL, "EINVAL"},
        {TETHER_ENOTFOUND, "ENOTFOUND"},
        {TETHER_EEXIST, "EEXIST"},
        {TETHER_EIO, "EIO"},
        {TETHER_ECORRUPT, "ECORRUPT"},
        {TETHER_EPROTO, "EPROTO"},
        {TETHER_EVERSION, "EVERSION"},
        {TETHER_EJOB, "EJOB"},
        {TETHER_ETOOBIG, "ETOOBIG"},
        {TETHER_ESIZE, "ESIZE"},
        {TETHER_EREMOTE, "EREMOTE"},
        {TETHER_EDESYNC, "EDESYNC"},
        {TETHER_EUNREACHABLE, "EUNREACHABLE"},
        {TETHER_EDIVERGED, "EDIVERGED"},
        {TETHER_ECUDA, "ECUDA"},
        {TETHER_ENODEV, "ENODEV"},
    };
    for (size_t i = 0; i < sizeof(pub) / sizeof(pub[0]); i++)
        CU_ASSERT_STRING_EQUAL(tt_status_name(pub[i].code), pub[i].name);
}

/* ---- options ---- */

typedef struct {
    const char *kv[16][2];
} fake_env_t;

static const char *fake_lookup(void *ctx, const char *name) {
    fake_env_t *e = ctx;
    for (int i = 0; i < 16 && e->kv[i][0] != NULL; i++) {
        if (strcmp(e->kv[i][0], name) == 0)
            return e->kv[i][1];
    }
    return NULL;
}

static void client_env_sets_every_field(void) {
    fake_env_t env = {{{"TETHER_COORDINATOR", "tcp://10.0.0.1:7601"},
                       {"TETHER_JOB", "mnist"},
                       {"TETHER_WORKER_ID", "w7"},
                       {"TETHER_HOST", "node7"},
                       {"TETHER_ENDPOINT", "tcp://10.0.0.7:7800"},
                       {"TETHER_MIN_WORKERS", "2"},
                       {"TETHER_MAX_WORKERS", "4"},
                       {"TETHER_LAST_CALL_MS", "300"},
                       {"TETHER_HEARTBEAT_MS", "100"},
                       {"TETHER_HEARTBEAT_TIMEOUT_MS", "500"},
                       {"TETHER_GLOBAL_BATCH", "64"},
                       {"TETHER_JOIN_TIMEOUT_MS", "9000"}}};
    tether_opts_t o;
    tt_client_opts_default(&o);
    char err[256] = "";
    CU_ASSERT_EQUAL_FATAL(tt_client_opts_from_lookup(&o, fake_lookup, &env, err, sizeof(err)),
                          TT_OK);
    CU_ASSERT_STRING_EQUAL(o.coordinator, "tcp://10.0.0.1:7601");
    CU_ASSERT_STRING_EQUAL(o.job_id, "mnist");
    CU_ASSERT_STRING_EQUAL(o.worker_id, "w7");
    CU_ASSERT_STRING_EQUAL(o.host, "node7");
    CU_ASSERT_STRING_EQUAL(o.endpoint, "tcp://10.0.0.7:7800");
    CU_ASSERT_EQUAL(o.job.min_workers, 2);
    CU_ASSERT_EQUAL(o.job.max_workers, 4);
    CU_ASSERT_EQUAL(o.job.last_call_ms, 300);
    CU_ASSERT_EQUAL(o.job.heartbeat_ms, 100);
    CU_ASSERT_EQUAL(o.job.heartbeat_timeout_ms, 500);
    CU_ASSERT_EQUAL(o.job.global_batch, 64);
    CU_ASSERT_EQUAL(o.job.join_timeout_ms, 9000);
}

static void client_env_defaults_when_unset(void) {
    fake_env_t env = {{{NULL, NULL}}};
    tether_opts_t o;
    tt_client_opts_default(&o);
    CU_ASSERT_EQUAL(tt_client_opts_from_lookup(&o, fake_lookup, &env, NULL, 0), TT_OK);
    CU_ASSERT_STRING_EQUAL(o.coordinator, "tcp://127.0.0.1:7600");
    CU_ASSERT_EQUAL(o.job.heartbeat_ms, 1000);
    char want[64];
    snprintf(want, sizeof(want), "-%ld", (long)getpid());
    size_t n = strlen(o.worker_id), w = strlen(want);
    CU_ASSERT_FATAL(n > w);
    CU_ASSERT_STRING_EQUAL(o.worker_id + n - w, want); /* "<hostname>-<pid>" */
}

static void expect_env_error(const char *var, const char *val) {
    fake_env_t env = {{{var, val}}};
    tether_opts_t o;
    tt_client_opts_default(&o);
    char err[256] = "";
    CU_ASSERT_EQUAL(tt_client_opts_from_lookup(&o, fake_lookup, &env, err, sizeof(err)), TT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, var));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, val));
}

static void client_env_rejects_bad_values(void) {
    expect_env_error("TETHER_MIN_WORKERS", "two");
    expect_env_error("TETHER_MAX_WORKERS", "-3");
    expect_env_error("TETHER_HEARTBEAT_MS", "0");
    expect_env_error("TETHER_GLOBAL_BATCH", "99999999999");
    expect_env_error("TETHER_JOIN_TIMEOUT_MS", "12x");
    expect_env_error("TETHER_LAST_CALL_MS", "");
}

static void expect_invalid(const tether_opts_t *o, const char *needle) {
    char err[256] = "";
    CU_ASSERT_EQUAL(tt_client_opts_validate(o, err, sizeof(err)), TT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, needle));
}

static void client_opts_validation(void) {
    tether_opts_t o;
    tt_client_opts_default(&o);
    CU_ASSERT_EQUAL(tt_client_opts_validate(&o, NULL, 0), TT_OK);
    o.job.min_workers = 3;
    o.job.max_workers = 2;
    expect_invalid(&o, "min_workers=3");
    tt_client_opts_default(&o);
    o.job.heartbeat_timeout_ms = o.job.heartbeat_ms;
    expect_invalid(&o, "heartbeat_timeout_ms");
    tt_client_opts_default(&o);
    o.job.max_workers = 8;
    o.job.global_batch = 4;
    expect_invalid(&o, "global_batch=4");
    tt_client_opts_default(&o);
    snprintf(o.worker_id, sizeof(o.worker_id), "has space");
    expect_invalid(&o, "worker id");
    tt_client_opts_default(&o);
    snprintf(o.coordinator, sizeof(o.coordinator), "localhost:7600");
    expect_invalid(&o, "localhost:7600");
    tt_client_opts_default(&o);
    memset(o.worker_id, 'w', 120);
    o.worker_id[120] = '\0';
    expect_invalid(&o, "routing id");
    CU_ASSERT_EQUAL(tt_client_opts_validate(NULL, NULL, 0), TT_EINVAL);
}

static void client_routing_id_format(void) {
    char buf[160];
    CU_ASSERT_EQUAL(tt_client_routing_id(buf, sizeof(buf), "w1", 42), TT_OK);
    CU_ASSERT_STRING_EQUAL(buf, "worker-w1.42");
    CU_ASSERT_EQUAL(tt_client_routing_id(buf, 8, "w1", 42), TT_EINVAL);
    char id[128];
    memset(id, 'a', 125);
    id[125] = '\0';
    CU_ASSERT_EQUAL(tt_client_routing_id(buf, sizeof(buf), id, 1), TT_EINVAL);
}

static void client_incarnation_always_changes(void) {
    uint64_t a = tt_client_next_incarnation(0, 1000, 77);
    CU_ASSERT_EQUAL(a, (1000ull << 16) | 77);
    /* Same millisecond and pid (a fast re-join): still a new value. */
    uint64_t b = tt_client_next_incarnation(a, 1000, 77);
    CU_ASSERT(b > a);
    /* Wall clock stepped back: never reuse an older value. */
    uint64_t c = tt_client_next_incarnation(b, 5, 77);
    CU_ASSERT(c > b);
    /* Two processes in the same millisecond differ by pid. */
    CU_ASSERT_NOT_EQUAL(tt_client_next_incarnation(0, 1000, 78), a);
}

/* ---- public API without a coordinator ---- */

static void client_api_create_destroy(void) {
    tether_opts_t o;
    tether_opts_default(&o);
    o.job.max_workers = 0;
    tether_t *t = (tether_t *)&o;
    char err[256] = "";
    CU_ASSERT_EQUAL(tether_create(&t, &o, err, sizeof(err)), TETHER_EINVAL);
    CU_ASSERT_PTR_NULL(t);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "max_workers=0"));
    tether_opts_default(&o);
    CU_ASSERT_EQUAL_FATAL(tether_create(&t, &o, err, sizeof(err)), TETHER_OK);
    CU_ASSERT_EQUAL(tether_rank(t), -1);
    CU_ASSERT_EQUAL(tether_world_size(t), 0);
    CU_ASSERT_EQUAL(tether_generation(t), 0);
    CU_ASSERT_EQUAL(tether_poll_generation(t, NULL), 0);
    tether_member_t info;
    CU_ASSERT_EQUAL(tether_member(t, 0, &info), TETHER_ENOTFOUND);
    CU_ASSERT_EQUAL(tether_step_done(t, 0), TETHER_EINVAL);
    CU_ASSERT_EQUAL(tether_leave(t, "x"), TETHER_EINVAL);
    tether_destroy(&t);
    CU_ASSERT_PTR_NULL(t);
    tether_destroy(&t);
    tether_destroy(NULL);
}

static void client_api_join_times_out_without_coordinator(void) {
    tether_opts_t o;
    tether_opts_default(&o);
    /* Port 1 on loopback: nobody listens, the connection is refused. */
    snprintf(o.coordinator, sizeof(o.coordinator), "tcp://127.0.0.1:1");
    tether_t *t = NULL;
    CU_ASSERT_EQUAL_FATAL(tether_create(&t, &o, NULL, 0), TETHER_OK);
    CU_ASSERT_EQUAL(tether_join(t, 150), TETHER_ETIMEDOUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(tether_last_error(t), "could not connect to the coordinator at "
                                                        "tcp://127.0.0.1:1 within 150 ms"));
    CU_ASSERT_EQUAL(tether_rank(t), -1);
    tether_destroy(&t);
}

/* A worker that tries for 400 ms to join at `ep`, which answers nothing:
 * ETIMEDOUT is checked; the caller reads its sentence and destroys it. */
static tether_t *join_in_vain(const char *ep) {
    tether_opts_t o;
    tether_opts_default(&o);
    o.job.heartbeat_ms = 50;
    snprintf(o.coordinator, sizeof(o.coordinator), "%s", ep);
    tether_t *t = NULL;
    CU_ASSERT_EQUAL_FATAL(tether_create(&t, &o, NULL, 0), TETHER_OK);
    CU_ASSERT_EQUAL(tether_join(t, 400), TETHER_ETIMEDOUT);
    return t;
}

/* A peer that takes the connection and never answers (a coordinator whose
 * loop is stuck looks like this): the join says so, not "no generation". */
static void client_api_join_times_out_on_a_silent_peer(void) {
    void *zctx = zmq_ctx_new();
    tt_zmq_opts_t zo;
    tt_zmq_opts_default(&zo);
    void *sock = NULL;
    char ep[256] = "", err[256] = "";
    CU_ASSERT_EQUAL_FATAL(
        tt_zmq_router(zctx, "tcp://127.0.0.1:*", &zo, &sock, ep, sizeof(ep), err, sizeof(err)),
        TT_OK);
    tether_t *t = join_in_vain(ep);
    char want[300];
    snprintf(want, sizeof(want), "the coordinator at %s is connected but answered nothing", ep);
    CU_ASSERT_PTR_NOT_NULL(strstr(tether_last_error(t), want));
    CU_ASSERT(tt_zmq_readable(sock)); /* the join did arrive */
    tether_destroy(&t);
    tt_zmq_close(&sock);
    zmq_ctx_term(zctx);
}

/* A join given an address where something else listens (the
 * coordinator's HTTP port, say) names that, not "could not connect". */
static void client_api_join_names_a_peer_that_is_no_coordinator(void) {
    char ep[64];
    int fd = net_mute_listener(ep, sizeof(ep));
    CU_ASSERT_FATAL(fd >= 0);
    tether_t *t = join_in_vain(ep);
    char want[300];
    snprintf(want, sizeof(want),
             "could not talk to the coordinator within 400 ms (job default): the coordinator at "
             "%s (TETHER_COORDINATOR) took 1 TCP connection(s)",
             ep);
    CU_ASSERT_PTR_NOT_NULL(strstr(tether_last_error(t), want));
    tether_destroy(&t);
    close(fd);
}

static const tt_cunit_test_t tests[] = {
    {"client_status_codes_match_internal", client_status_codes_match_internal},
    {"client_public_list_complete", client_public_list_complete},
    {"client_env_sets_every_field", client_env_sets_every_field},
    {"client_env_defaults_when_unset", client_env_defaults_when_unset},
    {"client_env_rejects_bad_values", client_env_rejects_bad_values},
    {"client_opts_validation", client_opts_validation},
    {"client_routing_id_format", client_routing_id_format},
    {"client_incarnation_always_changes", client_incarnation_always_changes},
    {"client_api_create_destroy", client_api_create_destroy},
    {"client_api_join_times_out_without_coordinator",
     client_api_join_times_out_without_coordinator},
    {"client_api_join_times_out_on_a_silent_peer", client_api_join_times_out_on_a_silent_peer},
    {"client_api_join_names_a_peer_that_is_no_coordinator",
     client_api_join_names_a_peer_that_is_no_coordinator},
    {NULL, NULL},
};

TT_CUNIT_MAIN("client", tests)
