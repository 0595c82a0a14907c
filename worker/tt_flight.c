/* tt_flight: ring of collective records (see the header). Records live in a
 * preallocated array indexed by id % capacity, so recording never
 * allocates; the dump formats a snapshot taken under the lock so a reader
 * never holds the writer up while it formats text. */
#include "tt_flight.h"

#include "tt_collseq.h"
#include "tt_status.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tt_flight {
    pthread_mutex_t mu;
    size_t cap;
    uint64_t next_id;
    tt_flight_rec_t *recs;
};

int tt_flight_create(tt_flight_t **out, size_t capacity) {
    if (out == NULL)
        return TT_EINVAL;
    *out = NULL;
    tt_flight_t *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return TT_ENOMEM;
    f->cap = capacity == 0 ? 256 : capacity;
    f->recs = calloc(f->cap, sizeof(*f->recs));
    if (f->recs == NULL || pthread_mutex_init(&f->mu, NULL) != 0) {
        free(f->recs);
        free(f);
        return TT_ENOMEM;
    }
    *out = f;
    return TT_OK;
}

void tt_flight_destroy(tt_flight_t **f) {
    if (f == NULL || *f == NULL)
        return;
    pthread_mutex_destroy(&(*f)->mu);
    free((*f)->recs);
    free(*f);
    *f = NULL;
}

uint64_t tt_flight_begin(tt_flight_t *f, const tt_flight_rec_t *rec) {
    pthread_mutex_lock(&f->mu);
    uint64_t id = f->next_id++;
    tt_flight_rec_t *r = &f->recs[id % f->cap];
    *r = *rec;
    r->id = id;
    r->state = TT_FLIGHT_QUEUED;
    r->status = TT_OK;
    r->t_started_ns = 0;
    r->t_finished_ns = 0;
    pthread_mutex_unlock(&f->mu);
    return id;
}

/* The slot still holds `id` unless the ring wrapped past it. */
static tt_flight_rec_t *slot_of(tt_flight_t *f, uint64_t id) {
    if (id >= f->next_id || f->next_id - id > f->cap)
        return NULL;
    return &f->recs[id % f->cap];
}

void tt_flight_started(tt_flight_t *f, uint64_t id, uint64_t now_ns) {
    pthread_mutex_lock(&f->mu);
    tt_flight_rec_t *r = slot_of(f, id);
    if (r != NULL) {
        r->state = TT_FLIGHT_STARTED;
        r->t_started_ns = now_ns;
    }
    pthread_mutex_unlock(&f->mu);
}

void tt_flight_finish(tt_flight_t *f, uint64_t id, uint64_t now_ns, int status) {
    pthread_mutex_lock(&f->mu);
    tt_flight_rec_t *r = slot_of(f, id);
    if (r != NULL) {
        if (r->t_started_ns == 0) /* never got going: all of it was running time */
            r->t_started_ns = r->t_queued_ns;
        r->state = TT_FLIGHT_FINISHED;
        r->t_finished_ns = now_ns;
        r->status = status;
    }
    pthread_mutex_unlock(&f->mu);
}

size_t tt_flight_snapshot(tt_flight_t *f, tt_flight_rec_t *out, size_t max) {
    pthread_mutex_lock(&f->mu);
    size_t n = f->next_id < f->cap ? (size_t)f->next_id : f->cap;
    if (n > max)
        n = max;
    for (size_t i = 0; i < n; i++)
        out[i] = f->recs[(f->next_id - n + i) % f->cap];
    pthread_mutex_unlock(&f->mu);
    return n;
}

static const char *state_name(int state) {
    static const char *const names[] = {"queued", "started", "finished"};
    return state >= 0 && state <= 2 ? names[state] : "?";
}

static int format_rec(char *buf, size_t len, const tt_flight_rec_t *r, uint64_t now_ns) {
    uint64_t end = r->state == TT_FLIGHT_FINISHED ? r->t_finished_ns : now_ns;
    uint64_t start = r->t_started_ns != 0 ? r->t_started_ns : r->t_queued_ns;
    double wait_ms = (double)(start - r->t_queued_ns) / 1e6;
    double run_ms = end >= start ? (double)(end - start) / 1e6 : 0.0;
    return snprintf(buf, len,
                    "  #%llu gen=%llu %s %s/%s bytes=%llu peer=%d %s queued_wait=%.3fms "
                    "%s=%.3fms status=%s\n",
                    (unsigned long long)r->seq, (unsigned long long)r->generation,
                    tt_collseq_op_name(r->op), tt_collseq_dtype_name(r->dtype),
                    tt_collseq_redop_name(r->redop), (unsigned long long)r->bytes, (int)r->peer,
                    state_name(r->state), wait_ms,
                    r->state == TT_FLIGHT_FINISHED ? "took" : "running_for", run_ms,
                    r->state == TT_FLIGHT_FINISHED ? tt_status_name(r->status) : "-");
}

char *tt_flight_dump(tt_flight_t *f, const char *who, uint64_t now_ns, size_t max) {
    size_t cap = f->cap;
    tt_flight_rec_t *snap = malloc(cap * sizeof(*snap));
    size_t line = 256;
    if (snap == NULL)
        return NULL;
    size_t n = tt_flight_snapshot(f, snap, cap);
    size_t first = max != 0 && n > max ? n - max : 0;
    size_t len = (n - first + 1) * line;
    char *text = malloc(len);
    if (text != NULL) {
        char cut[64] = "";
        if (first > 0)
            snprintf(cut, sizeof(cut), "newest %zu of ", n - first);
        size_t used = (size_t)snprintf(text, len, "flight recorder%s%s: %s%zu record(s)\n",
                                       who ? " of " : "", who ? who : "", cut, n);
        for (size_t i = first; i < n && used < len; i++)
            used += (size_t)format_rec(text + used, len - used, &snap[i], now_ns);
    }
    free(snap);
    return text;
}
