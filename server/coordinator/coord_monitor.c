/* coord_monitor: turns the control socket's TCP disconnects into
 * "peer disconnected" marks on the worker that used that connection.
 * ZeroMQ never names the peer in a monitor event, only the file
 * descriptor, so every received message's ZMQ_SRCFD is remembered against
 * its sender. A mark alone evicts nobody (ZeroMQ reconnects); it confirms a
 * failure report at once instead of waiting for overdue heartbeats. */
#include "coord_internal.h"
#include "tt_clock.h"
#include "tt_log.h"
#include "tt_status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void coord_conn_note(tt_coord_t *c, int fd, const char *job, const char *worker_id,
                     uint64_t incarnation) {
    if (fd < 0 || fd > (1 << 22))
        return;
    if ((size_t)fd >= c->nconns) {
        size_t n = (size_t)fd * 2 + 64;
        coord_conn_t *p = realloc(c->conns, n * sizeof(*p));
        if (p == NULL)
            return;
        memset(p + c->nconns, 0, (n - c->nconns) * sizeof(*p));
        c->conns = p;
        c->nconns = n;
    }
    coord_conn_t *cn = &c->conns[fd];
    snprintf(cn->job_id, sizeof(cn->job_id), "%s", job);
    snprintf(cn->worker_id, sizeof(cn->worker_id), "%s", worker_id);
    cn->incarnation = incarnation;
    cn->used = 1;
}

static void on_disconnect(tt_coord_t *c, int fd) {
    if (fd < 0 || (size_t)fd >= c->nconns || !c->conns[fd].used)
        return;
    coord_conn_t *cn = &c->conns[fd];
    cn->used = 0;
    coord_job_t *job = coord_find_job(c, cn->job_id);
    if (job == NULL)
        return;
    TT_INFO("coord", "connection of %s (job %s) closed", cn->worker_id, cn->job_id);
    tt_rdzv_peer_disconnected(job->rdzv, cn->worker_id, cn->incarnation, tt_clock_mono_ms());
    coord_drain_events(c, job);
    coord_rearm(c);
}

static void on_monitor(void *sock, void *arg) {
    tt_coord_t *c = arg;
    uint16_t event;
    int32_t value;
    if (tt_zmq_monitor_read(sock, &event, &value) != TT_OK)
        return;
    if (event == ZMQ_EVENT_DISCONNECTED)
        on_disconnect(c, value);
    else /* a process with another key or none (ZAP logs those it refuses) */
        tt_zauth_watch(&c->handshakes, &c->key, TT_ZAUTH_CONTROL, c->endpoint, event, value,
                       tt_clock_mono_ms());
}

int coord_monitor_start(tt_coord_t *c, char *err, size_t errlen) {
    int rc =
        tt_zmq_monitor_open(c->zctx, c->router, ZMQ_EVENT_DISCONNECTED | TT_ZAUTH_FAILURE_EVENTS,
                            &c->monitor, err, errlen);
    if (rc != TT_OK)
        return rc;
    return tt_uvzmq_start(c->loop, c->monitor, on_monitor, c, &c->monitor_w);
}
