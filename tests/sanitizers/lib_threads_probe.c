/* lib_threads_probe: exercises the cross-thread hand-offs of the two
 * uninstrumented libraries tether's daemons rely on, so the TSan gate proves
 * that tsan.supp hides their false positives and nothing more. It sends
 * copied and zero-copy ZeroMQ messages from one thread to another over
 * inproc and loopback tcp, runs libuv thread-pool work and async wake-ups,
 * and checks every byte that arrived. Any build runs it (ctest
 * sanitizers_lib_threads, label "threads"); it owns no tether code.
 * Exit status: 0 when everything arrived intact, 1 otherwise. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>
#include <zmq.h>

/* What tt_zmq's send and receive wrappers must do under TSan: over inproc
 * the receiver reads the very buffer the sender filled, and the hand-off in
 * between happens in libzmq's uninstrumented lock-free pipe. Releasing the
 * data address before zmq_msg_send and acquiring it after zmq_msg_recv
 * tells TSan about that edge; no suppression can, because the racing
 * accesses are in our code. */
#if defined(__SANITIZE_THREAD__)
#define PROBE_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PROBE_TSAN 1
#endif
#endif
#ifdef PROBE_TSAN
#include <sanitizer/tsan_interface.h>
#define PROBE_RELEASE(addr) __tsan_release(addr)
#define PROBE_ACQUIRE(addr) __tsan_acquire(addr)
#else
#define PROBE_RELEASE(addr) ((void)(addr))
#define PROBE_ACQUIRE(addr) ((void)(addr))
#endif

#define PROBE_MSGS  500
#define PROBE_WORK  16
#define PROBE_ASYNC 100

typedef struct {
    void *ctx;
    const char *endpoint;
} probe_zmq_t;

static void free_buf(void *data, void *hint) {
    (void)hint;
    PROBE_ACQUIRE(data); /* runs on a libzmq thread: same hand-off as recv */
    free(data);
}

/* Odd messages are copied into libzmq's buffer, even ones handed over
 * zero-copy: libzmq then frees our buffer on whichever thread it likes. */
static void *zmq_sender(void *arg) {
    probe_zmq_t *p = arg;
    void *s = zmq_socket(p->ctx, ZMQ_PAIR);
    if (s == NULL || zmq_connect(s, p->endpoint) != 0)
        return (void *)1;
    for (int i = 0; i < PROBE_MSGS; i++) {
        zmq_msg_t m;
        size_t len = i % 2 ? 64 : 4096;
        unsigned char *buf = malloc(len);
        if (buf == NULL)
            abort();
        memset(buf, i & 0xff, len);
        if (i % 2) {
            zmq_msg_init_size(&m, len);
            memcpy(zmq_msg_data(&m), buf, len);
            free(buf);
        } else {
            zmq_msg_init_data(&m, buf, len, free_buf, NULL);
        }
        PROBE_RELEASE(zmq_msg_data(&m));
        zmq_msg_send(&m, s, 0);
    }
    zmq_close(s);
    return NULL;
}

static int zmq_receive_all(void *r) {
    int bad = 0;
    for (int i = 0; i < PROBE_MSGS; i++) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, r, 0) < 0)
            return 1;
        PROBE_ACQUIRE(zmq_msg_data(&m));
        const unsigned char *d = zmq_msg_data(&m);
        size_t len = zmq_msg_size(&m);
        bad |= len != (i % 2 ? 64u : 4096u) || d[0] != (i & 0xff) || d[len - 1] != (i & 0xff);
        zmq_msg_close(&m);
    }
    return bad;
}

static int probe_zmq(void *ctx, const char *endpoint) {
    probe_zmq_t p = {ctx, endpoint};
    void *r = zmq_socket(ctx, ZMQ_PAIR);
    char bound[256];
    size_t blen = sizeof(bound);
    if (r == NULL || zmq_bind(r, endpoint) != 0 ||
        zmq_getsockopt(r, ZMQ_LAST_ENDPOINT, bound, &blen) != 0)
        return 1;
    p.endpoint = bound; /* tcp://127.0.0.1:* picks a free port */
    pthread_t t;
    void *ret = NULL;
    if (pthread_create(&t, NULL, zmq_sender, &p) != 0)
        return 1;
    int bad = zmq_receive_all(r);
    pthread_join(t, &ret);
    zmq_close(r);
    return bad || ret != NULL;
}

typedef struct {
    uv_work_t req;
    int in, out; /* written by a pool thread, read back on the loop */
} probe_work_t;

typedef struct {
    uv_async_t async;
    uv_mutex_t mu;
    int posted, seen;
    int after_sum;
    probe_work_t work[PROBE_WORK];
} probe_uv_t;

static void on_work(uv_work_t *w) {
    probe_work_t *item = w->data;
    item->out = item->in * 2;
}

static void on_after_work(uv_work_t *w, int status) {
    probe_uv_t *p = w->loop->data;
    p->after_sum += status == 0 ? ((probe_work_t *)w->data)->out : -100000;
}

static void on_async(uv_async_t *h) {
    probe_uv_t *p = h->data;
    uv_mutex_lock(&p->mu);
    p->seen = p->posted;
    uv_mutex_unlock(&p->mu);
    if (p->seen == PROBE_ASYNC)
        uv_close((uv_handle_t *)h, NULL);
}

static void *uv_poster(void *arg) {
    probe_uv_t *p = arg;
    for (int i = 1; i <= PROBE_ASYNC; i++) {
        uv_mutex_lock(&p->mu);
        p->posted = i;
        uv_mutex_unlock(&p->mu);
        uv_async_send(&p->async);
    }
    return NULL;
}

static int probe_uv(void) {
    uv_loop_t loop;
    probe_uv_t p;
    memset(&p, 0, sizeof(p));
    if (uv_loop_init(&loop) != 0 || uv_mutex_init(&p.mu) != 0)
        return 1;
    loop.data = &p;
    int want = 0;
    for (int i = 0; i < PROBE_WORK; i++) {
        p.work[i].in = i;
        want += 2 * i;
        p.work[i].req.data = &p.work[i];
        uv_queue_work(&loop, &p.work[i].req, on_work, on_after_work);
    }
    uv_async_init(&loop, &p.async, on_async);
    p.async.data = &p;
    pthread_t t;
    if (pthread_create(&t, NULL, uv_poster, &p) != 0)
        return 1;
    uv_run(&loop, UV_RUN_DEFAULT);
    pthread_join(t, NULL);
    int bad = uv_loop_close(&loop) != 0 || p.after_sum != want || p.seen != PROBE_ASYNC;
    uv_mutex_destroy(&p.mu);
    return bad;
}

int main(void) {
    void *ctx = zmq_ctx_new();
    int bad_inproc = probe_zmq(ctx, "inproc://lib-threads-probe");
    int bad_tcp = probe_zmq(ctx, "tcp://127.0.0.1:*");
    zmq_ctx_term(ctx);
    int bad_uv = probe_uv();
    printf("lib_threads_probe: zmq inproc %s, zmq tcp %s, libuv %s\n", bad_inproc ? "FAIL" : "ok",
           bad_tcp ? "FAIL" : "ok", bad_uv ? "FAIL" : "ok");
    return bad_inproc || bad_tcp || bad_uv;
}
