/* rdzv_events: the queue through which a rendezvous tells its daemon whom
 * to answer and what to push. Events are made while the state changes and
 * popped afterwards in order; a popped event's member array stays alive
 * until the next pop so the daemon can encode replies from it without a
 * copy. It decides nothing about when events happen (rdzv.c and
 * rdzv_group.c do). */
#include "rdzv_internal.h"

#include "tt_status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

tt_rdzv_event_t *tt_rdzv_event_push(tt_rdzv_t *r, tt_rdzv_event_kind_t kind) {
    tt_rdzv_queue_t *q = &r->q;
    if (q->head == q->n) {
        q->head = 0;
        q->n = 0;
    }
    if (q->n == q->cap) {
        size_t cap = q->cap ? q->cap * 2 : 16;
        tt_rdzv_event_t *v = realloc(q->v, cap * sizeof(*v));
        if (v == NULL) {
            r->call_rc = TT_ENOMEM;
            return NULL;
        }
        q->v = v;
        q->cap = cap;
    }
    tt_rdzv_event_t *ev = &q->v[q->n++];
    memset(ev, 0, sizeof(*ev));
    ev->kind = kind;
    ev->generation = r->generation;
    ev->step = -1;
    return ev;
}

void tt_rdzv_event_node(tt_rdzv_t *r, tt_rdzv_event_kind_t kind, const tt_rdzv_node_t *n,
                        int status, int64_t step, const char *msg) {
    tt_rdzv_event_t *ev = tt_rdzv_event_push(r, kind);
    if (ev == NULL)
        return;
    memcpy(ev->worker_id, n->worker_id, sizeof(ev->worker_id));
    ev->incarnation = n->incarnation;
    ev->status = status;
    ev->step = step;
    if (msg)
        snprintf(ev->message, sizeof(ev->message), "%s", msg);
}

int tt_rdzv_next_event(tt_rdzv_t *r, tt_rdzv_event_t *ev) {
    tt_rdzv_queue_t *q = &r->q;
    free(q->popped_members);
    q->popped_members = NULL;
    if (q->head == q->n)
        return 0;
    *ev = q->v[q->head++];
    q->popped_members = (tt_rdzv_member_t *)ev->members;
    return 1;
}

void tt_rdzv_queue_free(tt_rdzv_queue_t *q) {
    for (size_t i = q->head; i < q->n; i++)
        free((void *)q->v[i].members);
    free(q->v);
    free(q->popped_members);
    memset(q, 0, sizeof(*q));
}

void tt_rdzv_node_to_member(const tt_rdzv_node_t *n, tt_rdzv_member_t *m) {
    m->rank = n->index;
    memcpy(m->worker_id, n->worker_id, sizeof(m->worker_id));
    memcpy(m->host, n->host, sizeof(m->host));
    memcpy(m->endpoint, n->endpoint, sizeof(m->endpoint));
    m->incarnation = n->incarnation;
    m->last_step = n->last_step;
}
