/* Unit tests of libtether against a real coordinator (tt_coord) run on a
 * thread of this process, over TCP on 127.0.0.1: the end of a finished job
 * (a join refused, a collective in flight ended), a join refused during
 * a flap cool-down that the client retries until it is admitted, a
 * member's warning when the coordinator goes silent, and the relay of a
 * generation's collective bootstrap id (tt_commid). The pure parts of the
 * client are test_client.c's. */
#include "coord.h"
#include "pair_testlib.h"
#include "tt_client.h"
#include "tt_commid.h"
#include "tt_clock.h"
#include "tt_cunit.h"
#include "tt_log.h"
#include "tt_status.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    uv_loop_t loop;
    uv_async_t stop;
    tt_coord_t *coord;
    pthread_t thread;
} coord_fx_t;

static void coord_fx_on_stop(uv_async_t *a) {
    coord_fx_t *f = a->data;
    tt_coord_close(f->coord);
    uv_close((uv_handle_t *)a, NULL);
}

static void *coord_fx_main(void *arg) {
    coord_fx_t *f = arg;
    uv_run(&f->loop, UV_RUN_DEFAULT);
    return NULL;
}

/* A coordinator on 127.0.0.1 (any port) with `guard`, its loop on a thread;
 * the async handle is the only way in (libuv is not thread safe). */
static int coord_fx_start(coord_fx_t *f, const tt_rdzv_guard_t *guard) {
    char err[256] = "";
    uv_loop_init(&f->loop);
    tt_coord_opts_t o = {.listen = "tcp://127.0.0.1:*",
                         .id = "coord-test",
                         .max_msg_bytes = 1 << 20,
                         .guard = guard};
    if (tt_coord_create(&f->coord, &f->loop, &o, err, sizeof(err)) != TT_OK) {
        fprintf(stderr, "coordinator: %s\n", err);
        return -1;
    }
    uv_async_init(&f->loop, &f->stop, coord_fx_on_stop);
    f->stop.data = f;
    return pthread_create(&f->thread, NULL, coord_fx_main, f) == 0 ? 0 : -1;
}

static void coord_fx_stop(coord_fx_t *f) {
    uv_async_send(&f->stop);
    pthread_join(f->thread, NULL);
    tt_coord_destroy(&f->coord);
    uv_loop_close(&f->loop);
}

static int free_tcp_port(void) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int port = -1;
    if (s >= 0 && bind(s, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(s, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (s >= 0)
        close(s);
    return port;
}

/* Options of worker `id` of job `job` (min..max workers) at `f`, with fast
 * heartbeats and a ring endpoint on a free port. */
static void fx_opts(tether_opts_t *o, const coord_fx_t *f, const char *job, const char *id,
                    uint32_t min, uint32_t max) {
    tether_opts_default(o);
    snprintf(o->coordinator, sizeof(o->coordinator), "%s", tt_coord_endpoint(f->coord));
    snprintf(o->job_id, sizeof(o->job_id), "%s", job);
    snprintf(o->worker_id, sizeof(o->worker_id), "%s", id);
    snprintf(o->endpoint, sizeof(o->endpoint), "tcp://127.0.0.1:%d", free_tcp_port());
    o->job.min_workers = min;
    o->job.max_workers = max;
    o->job.global_batch = 8;
    o->job.heartbeat_ms = 50;
    o->job.heartbeat_timeout_ms = 1000;
    o->job.last_call_ms = 50;
    o->job.join_timeout_ms = 10000;
}

typedef struct {
    tether_t *t;
    int rc;
    uint64_t ms; /* how long the call took */
} call_t;

static void *join_thread(void *arg) {
    call_t *c = arg;
    c->rc = tether_join(c->t, 5000);
    return NULL;
}

static void *allreduce_thread(void *arg) {
    call_t *c = arg;
    float v[4] = {1, 2, 3, 4};
    uint64_t t0 = tt_clock_mono_ms();
    c->rc = tether_allreduce(c->t, v, 4, TETHER_FLOAT32, TETHER_SUM);
    c->ms = tt_clock_mono_ms() - t0;
    return NULL;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* w1 and w2 form the job; w1 blocks in an all-reduce w2 never joins; w2
 * completes its run. w1's collective ends with EJOBDONE long before its
 * 20 s deadline, and a worker that comes later is refused at once. */
static void client_api_job_done_ends_collective_and_joins(void) {
    coord_fx_t f;
    CU_ASSERT_EQUAL_FATAL(coord_fx_start(&f, NULL), 0);
    tether_opts_t o1, o2, o3;
    fx_opts(&o1, &f, "fin", "w1", 2, 2);
    fx_opts(&o2, &f, "fin", "w2", 2, 2);
    fx_opts(&o3, &f, "fin", "w3", 2, 2);
    tether_t *w1 = NULL, *w2 = NULL, *w3 = NULL;
    CU_ASSERT_EQUAL_FATAL(tether_create(&w1, &o1, NULL, 0), TETHER_OK);
    CU_ASSERT_EQUAL_FATAL(tether_create(&w2, &o2, NULL, 0), TETHER_OK);
    /* progress for tetherctl status: epochs count from 1, within the epoch */
    CU_ASSERT_EQUAL(tether_progress(NULL, 1, 0, 10), TETHER_EINVAL);
    CU_ASSERT_EQUAL(tether_progress(w1, 0, 0, 10), TETHER_EINVAL);
    CU_ASSERT_EQUAL(tether_progress(w1, 1, 11, 10), TETHER_EINVAL);
    CU_ASSERT_EQUAL(tether_progress(w1, 1, 10, 10), TETHER_OK);
    tether_coll_opts_t co;
    tether_coll_opts_default(&co);
    co.backend = TETHER_BACKEND_RING;
    co.deadline_ms = 20000;
    CU_ASSERT_EQUAL(tether_coll_configure(w1, &co, NULL, 0), TETHER_OK);
    call_t j1 = {.t = w1}, a1 = {.t = w1};
    pthread_t th;
    pthread_create(&th, NULL, join_thread, &j1);
    CU_ASSERT_EQUAL(tether_join(w2, 5000), TETHER_OK);
    pthread_join(th, NULL);
    CU_ASSERT_EQUAL_FATAL(j1.rc, TETHER_OK);
    CU_ASSERT_EQUAL(tether_world_size(w1), 2);

    pthread_create(&th, NULL, allreduce_thread, &a1);
    sleep_ms(300); /* w1 is inside the ring's handshake now */
    CU_ASSERT_EQUAL(tether_leave(w2, "finished"), TETHER_OK);
    pthread_join(th, NULL);
    printf("\n  all-reduce ended %llu ms after it began: %s\n", (unsigned long long)a1.ms,
           tether_last_error(w1));
    CU_ASSERT_EQUAL(a1.rc, TETHER_EJOBDONE);
    CU_ASSERT(a1.ms < 5000);
    CU_ASSERT_EQUAL(tether_check(w1), TETHER_EJOBDONE);
    CU_ASSERT_EQUAL(tether_step_done(w1, 0), TETHER_EJOBDONE);
    CU_ASSERT_EQUAL(tether_join(w1, 1000), TETHER_EJOBDONE); /* closed for good */

    CU_ASSERT_EQUAL_FATAL(tether_create(&w3, &o3, NULL, 0), TETHER_OK);
    uint64_t t0 = tt_clock_mono_ms();
    CU_ASSERT_EQUAL(tether_join(w3, 5000), TETHER_EJOBDONE);
    CU_ASSERT(tt_clock_mono_ms() - t0 < 2000);
    CU_ASSERT_PTR_NOT_NULL(strstr(tether_last_error(w3), "job fin has already finished"));
    CU_ASSERT_EQUAL(tether_check(w3), TETHER_EJOBDONE);
    tether_destroy(&w3);
    tether_destroy(&w2);
    tether_destroy(&w1);
    coord_fx_stop(&f);
}

/* w1 leaves (an eviction), comes back (one eviction costs nothing), leaves
 * again and comes straight back: the coordinator refuses it with EBUSY
 * during the 400 ms cool-down; tether_join keeps asking and returns once
 * it is admitted, not with the refusal. */
static void client_api_join_retried_through_cooldown(void) {
    coord_fx_t f;
    tt_rdzv_guard_t g = {
        .max_regroups_per_hour = 60, .flap_cooldown_ms = 400, .flap_cooldown_max_ms = 5000};
    CU_ASSERT_EQUAL_FATAL(coord_fx_start(&f, &g), 0);
    tether_opts_t o;
    fx_opts(&o, &f, "flap", "w1", 1, 1);
    tether_t *w[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 2; i++) {
        CU_ASSERT_EQUAL_FATAL(tether_create(&w[i], &o, NULL, 0), TETHER_OK);
        CU_ASSERT_EQUAL_FATAL(tether_join(w[i], 5000), TETHER_OK);
        CU_ASSERT_EQUAL(tether_leave(w[i], "shutdown"), TETHER_OK);
    }
    uint64_t left = tt_clock_mono_ms();
    CU_ASSERT_EQUAL_FATAL(tether_create(&w[2], &o, NULL, 0), TETHER_OK);
    /* Too short a wait: the timeout says why the worker was not taken. */
    CU_ASSERT_EQUAL(tether_join(w[2], 150), TETHER_ETIMEDOUT);
    const char *why = tether_last_error(w[2]);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "last refusal"));
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "evicted 2 times"));
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "flap cool-down of 400 ms"));
    CU_ASSERT_EQUAL(tether_join(w[2], 5000), TETHER_OK);
    uint64_t waited = tt_clock_mono_ms() - left;
    printf("\n  re-joined %llu ms after leaving (cool-down 400 ms)\n", (unsigned long long)waited);
    CU_ASSERT(waited >= 390);
    CU_ASSERT(waited < 3000);
    CU_ASSERT_EQUAL(tether_world_size(w[2]), 1);
    for (int i = 2; i >= 0; i--)
        tether_destroy(&w[i]);
    coord_fx_stop(&f);
}

/* Counts the log lines that contain `needle` (the sink runs on the
 * client's thread). */
typedef struct {
    pthread_mutex_t mu;
    const char *needle;
    int hits;
    char line[512];
} log_catch_t;

static void catch_line(void *ctx, int level, const char *line) {
    log_catch_t *lc = ctx;
    (void)level;
    pthread_mutex_lock(&lc->mu);
    if (strstr(line, lc->needle) != NULL && lc->hits++ == 0)
        snprintf(lc->line, sizeof(lc->line), "%s", line);
    pthread_mutex_unlock(&lc->mu);
}

static int caught(log_catch_t *lc) {
    pthread_mutex_lock(&lc->mu);
    int n = lc->hits;
    pthread_mutex_unlock(&lc->mu);
    return n;
}

/* A member whose coordinator goes away says so once, after its heartbeat
 * timeout (1000 ms here), instead of training on in silence. */
static void client_warns_when_the_coordinator_goes_silent(void) {
    coord_fx_t f;
    CU_ASSERT_EQUAL_FATAL(coord_fx_start(&f, NULL), 0);
    tether_opts_t o;
    fx_opts(&o, &f, "quiet", "w1", 1, 1);
    tether_t *w = NULL;
    CU_ASSERT_EQUAL_FATAL(tether_create(&w, &o, NULL, 0), TETHER_OK);
    CU_ASSERT_EQUAL_FATAL(tether_join(w, 5000), TETHER_OK);
    log_catch_t lc = {.mu = PTHREAD_MUTEX_INITIALIZER, .needle = "no answer from the coordinator"};
    tt_log_set_sink(catch_line, &lc);
    coord_fx_stop(&f);
    uint64_t t0 = tt_clock_mono_ms();
    while (caught(&lc) == 0 && tt_clock_mono_ms() - t0 < 5000)
        sleep_ms(20);
    uint64_t waited = tt_clock_mono_ms() - t0;
    sleep_ms(1200); /* a second heartbeat timeout: still one line */
    tt_log_set_sink(NULL, NULL);
    CU_ASSERT_EQUAL(caught(&lc), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(lc.line, "WARN"));
    CU_ASSERT_PTR_NOT_NULL(strstr(lc.line, o.coordinator));
    printf("\n  warned %llu ms after the coordinator stopped: %s\n", (unsigned long long)waited,
           strstr(lc.line, "no answer"));
    CU_ASSERT(waited < 3000);
    tether_destroy(&w);
}

/* A coordinator and two workers of job `job` joined into one generation;
 * w[0] ("wa") is rank 0. Returns the generation, 0 on failure. */
static uint64_t start_pair(coord_fx_t *f, const char *job, tether_t *w[2], const char *ids[2]) {
    static const char *names[2] = {"wa", "wb"};
    w[0] = w[1] = NULL;
    if (coord_fx_start(f, NULL) != 0)
        return 0;
    tether_opts_t o;
    for (int i = 0; i < 2; i++) {
        ids[i] = names[i];
        fx_opts(&o, f, job, names[i], 2, 2);
        if (tether_create(&w[i], &o, NULL, 0) != TETHER_OK)
            return 0;
    }
    return pair_join(w);
}

static void stop_pair(coord_fx_t *f, tether_t *w[2]) {
    tether_destroy(&w[1]);
    tether_destroy(&w[0]);
    coord_fx_stop(f);
}

typedef struct {
    tt_commid_opts_t o;
    size_t len;
    uint8_t id[128];
    int rc;
    uint64_t ms, done; /* how long it took; when it ended (monotonic) */
    char err[512];
} fetch_t;

static void *fetch_thread(void *arg) {
    fetch_t *x = arg;
    uint64_t t0 = tt_clock_mono_ms();
    x->rc = tt_commid_fetch(&x->o, x->id, x->len, x->err, sizeof(x->err));
    x->done = tt_clock_mono_ms();
    x->ms = x->done - t0;
    return NULL;
}

static void commid_opts(tt_commid_opts_t *o, const coord_fx_t *f, const char *job, const char *id,
                        uint64_t gen, int timeout_ms) {
    *o = (tt_commid_opts_t){.coordinator = tt_coord_endpoint(f->coord),
                            .job_id = job,
                            .worker_id = id,
                            .generation = gen,
                            .timeout_ms = timeout_ms};
}

/* Worker `id` asks for generation `gen`'s id on a thread, for up to
 * `timeout_ms`; the test goes on after `lead_ms`. */
static void start_fetch(fetch_t *x, pthread_t *th, const coord_fx_t *f, const char *job,
                        const char *id, uint64_t gen, int timeout_ms, long lead_ms) {
    x->len = sizeof(x->id);
    commid_opts(&x->o, f, job, id, gen, timeout_ms);
    pthread_create(th, NULL, fetch_thread, x);
    sleep_ms(lead_ms);
}

/* Rank 1 asks before rank 0 offers and gets the id once it is there;
 * only rank 0 of the current generation may offer, and only one id; a
 * stranger, another generation and another size are refused. */
static void commid_relayed_with_the_generation(void) {
    coord_fx_t f;
    tether_t *w[2];
    const char *ids[2];
    uint64_t gen = start_pair(&f, "cid", w, ids);
    CU_ASSERT_NOT_EQUAL_FATAL(gen, 0);
    uint8_t id[128], other[128];
    for (int i = 0; i < 128; i++) {
        id[i] = (uint8_t)(i * 7 + 1);
        other[i] = (uint8_t)(i * 7 + 2);
    }
    fetch_t x;
    pthread_t th;
    start_fetch(&x, &th, &f, "cid", ids[1], gen, 5000, 300);

    char err[512] = "";
    tt_commid_opts_t o;
    commid_opts(&o, &f, "cid", ids[1], gen, 2000);
    CU_ASSERT_EQUAL(tt_commid_offer(&o, other, sizeof(other), err, sizeof(err)), TT_EFENCED);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "rank 0 does"));
    commid_opts(&o, &f, "cid", ids[0], gen + 1, 2000);
    CU_ASSERT_EQUAL(tt_commid_offer(&o, other, sizeof(other), err, sizeof(err)), TT_ESTALE);
    printf("\n  stale offer: %s\n", err);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "is not running"));
    commid_opts(&o, &f, "cid", ids[0], gen, 2000);
    CU_ASSERT_EQUAL(tt_commid_offer(&o, id, 0, err, sizeof(err)), TT_EINVAL);
    CU_ASSERT_EQUAL(tt_commid_offer(&o, id, sizeof(id), err, sizeof(err)), TT_OK);
    uint64_t offered = tt_clock_mono_ms();
    pthread_join(th, NULL);
    /* Its request was held (CommIdRequest.wait_ms), so no pause between
     * asks delays it: a figure to read, not a timed assertion. */
    printf("  rank 1 got the id after %llu ms, %lld ms after the offer's Ack: %s\n",
           (unsigned long long)x.ms, (long long)x.done - (long long)offered,
           x.rc == TT_OK ? "ok" : x.err);
    CU_ASSERT_EQUAL(x.rc, TT_OK);
    CU_ASSERT(x.ms >= 250);
    CU_ASSERT_EQUAL(memcmp(x.id, id, sizeof(id)), 0);

    /* The same id again is an offer retried; another one is refused. */
    CU_ASSERT_EQUAL(tt_commid_offer(&o, id, sizeof(id), err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL(tt_commid_offer(&o, other, sizeof(other), err, sizeof(err)), TT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "already has another id"));

    uint8_t got[128];
    commid_opts(&o, &f, "cid", "stranger", gen, 2000);
    CU_ASSERT_EQUAL(tt_commid_fetch(&o, got, sizeof(got), err, sizeof(err)), TT_EFENCED);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "not a member"));
    commid_opts(&o, &f, "cid", ids[1], gen + 1, 2000);
    CU_ASSERT_EQUAL(tt_commid_fetch(&o, got, sizeof(got), err, sizeof(err)), TT_ESTALE);
    commid_opts(&o, &f, "cid", ids[1], gen, 2000);
    CU_ASSERT_EQUAL(tt_commid_fetch(&o, got, 64, err, sizeof(err)), TT_EPROTO);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "128 bytes"));
    commid_opts(&o, &f, "no-such-job", ids[1], gen, 2000);
    CU_ASSERT_EQUAL(tt_commid_fetch(&o, got, sizeof(got), err, sizeof(err)), TT_EFENCED);
    stop_pair(&f, w);
}

/* Nobody offers: a member's wait ends with the generation (rank 0 leaves)
 * rather than at its 20 s deadline; and with a short deadline it says who
 * did not offer: rank 0 by worker id and host. */
static void commid_wait_ends_with_the_generation(void) {
    coord_fx_t f;
    tether_t *w[2];
    const char *ids[2];
    uint64_t gen = start_pair(&f, "cid-end", w, ids);
    CU_ASSERT_NOT_EQUAL_FATAL(gen, 0);
    uint8_t got[128];
    char err[512] = "";
    tt_commid_opts_t o;
    commid_opts(&o, &f, "cid-end", ids[1], gen, 300);
    CU_ASSERT_EQUAL(tt_commid_fetch(&o, got, sizeof(got), err, sizeof(err)), TT_ETIMEDOUT);
    printf("\n  %s\n", err);
    /* rank 0 named, as the coordinator told it: worker id and host */
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "rank 0 (wa on "));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, ") of generation"));

    fetch_t x;
    pthread_t th;
    start_fetch(&x, &th, &f, "cid-end", ids[1], gen, 20000, 200);
    CU_ASSERT_EQUAL(tether_leave(w[0], "shutdown"), TETHER_OK);
    pthread_join(th, NULL);
    printf("\n  the wait ended %llu ms after it began: %s\n", (unsigned long long)x.ms, x.err);
    CU_ASSERT_EQUAL(x.rc, TT_ESTALE);
    CU_ASSERT(x.ms < 5000);
    stop_pair(&f, w);
}

static const tt_cunit_test_t tests[] = {
    {"client_api_job_done_ends_collective_and_joins",
     client_api_job_done_ends_collective_and_joins},
    {"client_api_join_retried_through_cooldown", client_api_join_retried_through_cooldown},
    {"client_warns_when_the_coordinator_goes_silent",
     client_warns_when_the_coordinator_goes_silent},
    {"commid_relayed_with_the_generation", commid_relayed_with_the_generation},
    {"commid_wait_ends_with_the_generation", commid_wait_ends_with_the_generation},
    {NULL, NULL},
};

TT_CUNIT_MAIN("client_live", tests)
