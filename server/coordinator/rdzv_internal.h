/* rdzv_internal: the private layout of tt_rdzv_t and the helpers shared by the
 * rdzv_*.c files (id table, node lists, event queue, generation forming, guard
 * rails). Nothing outside server/coordinator/rdzv*.c includes it; the public
 * contract is rdzv.h. Not thread safe, like the object itself. */
#ifndef TT_RDZV_INTERNAL_H
#define TT_RDZV_INTERNAL_H

#include "rdzv.h"

#define TT_RDZV_SUBSYS "coord"

typedef enum {
    TT_RDZV_ROLE_PENDING = 0, /* participant (WAITING) or wait list */
    TT_RDZV_ROLE_MEMBER = 1,  /* member of the running generation */
} tt_rdzv_role_t;

/* One known worker process. Heap-allocated and owned by `members` or
 * `pending`; an evicted member leaves the id table at once but stays in
 * `members` (flagged) until settle compacts the list and frees it. */
#define TT_RDZV_DRAINED_KEEP 16

typedef struct tt_rdzv_node {
    struct tt_rdzv_node *chain; /* id table bucket chain */
    uint32_t hash;
    tt_rdzv_role_t role;
    uint32_t index; /* rank when a member, position in `pending` otherwise */
    uint32_t prio;  /* pending order: 0 = survivor holding state, 1 = joiner */
    uint64_t seq;   /* pending order within a priority: arrival */
    int evicted;
    int draining; /* tt_rdzv_drain: leaves at the next boundary */
    int disconnected;
    int suspected;
    int64_t boundary_step; /* step it waits at (tt_rdzv_at_boundary), -1 none */
    int64_t last_step;
    uint64_t last_seen_ms;
    uint64_t incarnation;
    char worker_id[TT_RDZV_ID_MAX];
    char host[TT_RDZV_HOST_MAX];
    char endpoint[TT_RDZV_ENDPOINT_MAX];
    char suspect_reason[TT_RDZV_REASON_MAX];
    uint64_t tm_steps, tm_step_us, tm_wait_us; /* the last timing report's totals */
    double step_ms, wait_ms;                   /* tt_rdzv_step_times */
} tt_rdzv_node_t;

typedef struct {
    tt_rdzv_node_t **v;
    uint32_t n;
    uint32_t cap;
} tt_rdzv_vec_t;

typedef struct {
    tt_rdzv_node_t **buckets;
    uint32_t nbuckets; /* power of two */
    uint32_t count;
} tt_rdzv_table_t;

/* Evictions of one worker id, kept after its node is gone (rdzv_guard.c):
 * the newest TT_RDZV_FLAP_KEEP times, oldest first. More are never needed:
 * with k >= 32 the cool-down (base * 2^(k-2)) is past any cap. */
typedef struct tt_rdzv_flap {
    struct tt_rdzv_flap *chain;
    uint32_t hash;
    uint32_t n;
    uint64_t at[TT_RDZV_FLAP_KEEP];
    char worker_id[TT_RDZV_ID_MAX];
} tt_rdzv_flap_t;

typedef struct {
    tt_rdzv_flap_t **buckets; /* NULL until the first eviction */
    uint32_t nbuckets;        /* power of two */
    uint32_t count;
    uint32_t sweep_at; /* drop records older than an hour at this count */
} tt_rdzv_flaps_t;

typedef struct {
    tt_rdzv_event_t *v;
    size_t head;
    size_t n;
    size_t cap;
    tt_rdzv_member_t *popped_members; /* of the last popped event */
} tt_rdzv_queue_t;

struct tt_rdzv {
    char job_id[TT_RDZV_ID_MAX];
    tt_rdzv_settings_t settings;
    tt_rdzv_state_t state;
    uint64_t generation;
    char failure_reason[TT_RDZV_REASON_MAX];
    tt_rdzv_table_t table;
    tt_rdzv_vec_t members; /* sorted by worker_id; index == rank */
    tt_rdzv_vec_t pending;
    uint32_t n_evicted; /* evicted members still in `members` */
    uint64_t next_seq;
    uint64_t expiry_bound;       /* no expiry happens before this */
    uint64_t last_call_deadline; /* 0 = not armed */
    uint64_t below_min_since;    /* WAITING below min since; 0 = not */
    int below_min_armed;
    int64_t regroup_step;    /* S, -1 = none */
    uint32_t n_at_boundary;  /* members waiting at exactly S */
    int64_t max_member_step; /* max last_step over members */
    int64_t committed_step;  /* high-water of min over members */
    int call_rc;             /* sticky TT_ENOMEM of the current call */
    tt_rdzv_queue_t q;
    char done_msg[TT_RDZV_REASON_MAX]; /* FINISHED: what requests are told */
    tt_rdzv_guard_t guard;
    uint64_t *regroup_at; /* ring of the last max_regroups_per_hour regroups */
    uint32_t regroup_head, regroup_n;
    tt_rdzv_flaps_t flaps;
    uint32_t n_draining; /* members with `draining` set */
    /* The last drained workers, so that their later requests are told
     * TT_EDRAINED rather than "fenced: join again" (memory only). */
    struct {
        char worker_id[TT_RDZV_ID_MAX];
        uint64_t incarnation;
    } drained[TT_RDZV_DRAINED_KEEP];
    uint32_t drained_next;
};

/* rdzv_table.c: id table and node lists. */
int tt_rdzv_table_init(tt_rdzv_table_t *t);
void tt_rdzv_table_free(tt_rdzv_table_t *t);
tt_rdzv_node_t *tt_rdzv_table_find(const tt_rdzv_table_t *t, const char *id);
int tt_rdzv_table_insert(tt_rdzv_table_t *t, tt_rdzv_node_t *n);
uint32_t tt_rdzv_hash_id(const char *id);
void tt_rdzv_table_remove(tt_rdzv_table_t *t, tt_rdzv_node_t *n);
int tt_rdzv_vec_push(tt_rdzv_vec_t *v, tt_rdzv_node_t *n);
void tt_rdzv_vec_free(tt_rdzv_vec_t *v);
int tt_rdzv_pending_add(tt_rdzv_t *r, tt_rdzv_node_t *n);
void tt_rdzv_pending_remove(tt_rdzv_t *r, tt_rdzv_node_t *n);
void tt_rdzv_sort_by_id(tt_rdzv_node_t **v, uint32_t n);
void tt_rdzv_sort_by_priority(tt_rdzv_node_t **v, uint32_t n);
void tt_rdzv_free_nodes(tt_rdzv_t *r);

/* rdzv_events.c: the event queue. Failures set r->call_rc = TT_ENOMEM. */
tt_rdzv_event_t *tt_rdzv_event_push(tt_rdzv_t *r, tt_rdzv_event_kind_t kind);
void tt_rdzv_event_node(tt_rdzv_t *r, tt_rdzv_event_kind_t kind, const tt_rdzv_node_t *n,
                        int status, int64_t step, const char *msg);
void tt_rdzv_queue_free(tt_rdzv_queue_t *q);
void tt_rdzv_node_to_member(const tt_rdzv_node_t *n, tt_rdzv_member_t *m);

/* rdzv_group.c: membership changes. */
void tt_rdzv_evict(tt_rdzv_t *r, tt_rdzv_node_t *n, const char *reason, uint64_t now_ms);
/* A drained member leaves now: evicted, remembered as drained, told
 * TT_EDRAINED (rdzv_group.c); a worker waiting to be admitted is dropped,
 * its join refused with TT_EDRAINED. */
void tt_rdzv_drain_out(tt_rdzv_t *r, tt_rdzv_node_t *n, const char *reason);
/* Whether `worker_id` of that incarnation was drained (recently). */
int tt_rdzv_was_drained(const tt_rdzv_t *r, const char *worker_id, uint64_t incarnation);
void tt_rdzv_drop_pending(tt_rdzv_t *r, tt_rdzv_node_t *n, int status, const char *msg);
void tt_rdzv_settle(tt_rdzv_t *r, uint64_t now_ms);
void tt_rdzv_fail(tt_rdzv_t *r, const char *reason);
void tt_rdzv_end_finished(tt_rdzv_t *r, const char *who);
void tt_rdzv_set_done_msg(tt_rdzv_t *r);
/* A member's completed step; `running`: it did not stop at a boundary
 * (rdzv_group.c says what that changes). */
void tt_rdzv_note_step(tt_rdzv_t *r, tt_rdzv_node_t *n, int64_t step, int running);
void tt_rdzv_regroup_same(tt_rdzv_t *r, const char *reason, uint64_t now_ms);
void tt_rdzv_form_waiting(tt_rdzv_t *r, uint64_t now_ms);
void tt_rdzv_lower_bound(tt_rdzv_t *r, uint64_t deadline);
uint64_t tt_rdzv_suspect_deadline(const tt_rdzv_t *r, const tt_rdzv_node_t *n);

/* rdzv_guard.c: guard rails against flapping. note_regroup records a
 * regroup at now_ms and returns 0, or returns -1 with the failure reason
 * in `why` when it would exceed max_regroups_per_hour. flap_check returns
 * TT_OK or TT_EBUSY with a sentence when `id` is cooling down. */
int tt_rdzv_note_regroup(tt_rdzv_t *r, uint64_t now_ms, char *why, size_t len);
void tt_rdzv_flap_note(tt_rdzv_t *r, const char *id, uint64_t now_ms);
int tt_rdzv_flap_check(const tt_rdzv_t *r, const char *id, uint64_t now_ms, char *err,
                       size_t errlen);
void tt_rdzv_guard_free(tt_rdzv_t *r);

/* Bounded copy; returns 0, or -1 when `src` (NULL = "") does not fit. */
int tt_rdzv_copy(char *dst, size_t cap, const char *src);

#endif
