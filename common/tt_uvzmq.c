/* tt_uvzmq: uv_poll on ZMQ_FD to wake, uv_idle to continue a drain that
 * ran out of budget or to re-check after a send. */
#include "tt_uvzmq.h"
#include "tt_status.h"

#include <stdlib.h>
#include <zmq.h>

#define TT_UVZMQ_BUDGET 256

struct tt_uvzmq {
    uv_poll_t poll;
    uv_idle_t idle;
    void *sock;
    tt_uvzmq_cb cb;
    void *arg;
    int open_handles;
    int stopping;
};

static int sock_readable(void *sock) {
    int events = 0;
    size_t len = sizeof(events);
    if (zmq_getsockopt(sock, ZMQ_EVENTS, &events, &len) != 0)
        return 0;
    return (events & ZMQ_POLLIN) != 0;
}

static void on_idle(uv_idle_t *h);

static void drain(tt_uvzmq_t *w) {
    int n = 0;
    while (!w->stopping && sock_readable(w->sock)) {
        if (n++ == TT_UVZMQ_BUDGET) {
            uv_idle_start(&w->idle, on_idle); /* continue next iteration */
            break;
        }
        w->cb(w->sock, w->arg);
    }
}

static void on_idle(uv_idle_t *h) {
    tt_uvzmq_t *w = h->data;
    uv_idle_stop(&w->idle);
    drain(w);
}

static void on_poll(uv_poll_t *h, int status, int events) {
    (void)status;
    (void)events;
    drain(h->data);
}

int tt_uvzmq_start(uv_loop_t *loop, void *sock, tt_uvzmq_cb cb, void *arg, tt_uvzmq_t **out) {
    *out = NULL;
    int fd;
    size_t len = sizeof(fd);
    if (zmq_getsockopt(sock, ZMQ_FD, &fd, &len) != 0)
        return TT_ESYS;
    tt_uvzmq_t *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return TT_ENOMEM;
    w->sock = sock;
    w->cb = cb;
    w->arg = arg;
    if (uv_poll_init(loop, &w->poll, fd) != 0) {
        free(w);
        return TT_ESYS;
    }
    uv_idle_init(loop, &w->idle);
    w->poll.data = w;
    w->idle.data = w;
    w->open_handles = 2;
    uv_poll_start(&w->poll, UV_READABLE, on_poll);
    tt_uvzmq_kick(w); /* messages may already be queued */
    *out = w;
    return TT_OK;
}

void tt_uvzmq_kick(tt_uvzmq_t *w) {
    if (w != NULL && !w->stopping)
        uv_idle_start(&w->idle, on_idle);
}

static void on_close(uv_handle_t *h) {
    tt_uvzmq_t *w = h->data;
    if (--w->open_handles == 0)
        free(w);
}

void tt_uvzmq_stop(tt_uvzmq_t **wp) {
    if (wp == NULL || *wp == NULL)
        return;
    tt_uvzmq_t *w = *wp;
    *wp = NULL;
    w->stopping = 1;
    uv_poll_stop(&w->poll);
    uv_idle_stop(&w->idle);
    uv_close((uv_handle_t *)&w->poll, on_close);
    uv_close((uv_handle_t *)&w->idle, on_close);
}
