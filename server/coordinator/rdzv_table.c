/* rdzv_table: the containers behind a rendezvous - a chained hash table
 * from worker_id to node (heartbeats from 10,000 workers a second must not
 * scan a list), growable node vectors, the pending list with O(1) removal,
 * and the two orders a generation needs (ranks by worker_id, admission by
 * priority then arrival). It knows nothing of states or protocol. */
#include "rdzv_internal.h"

#include "tt_status.h"

#include <stdlib.h>
#include <string.h>

#define TT_RDZV_TABLE_MIN 64u

uint32_t tt_rdzv_hash_id(const char *s) {
    /* FNV-1a: ids are short, and the table only needs a decent spread. */
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        h ^= *p;
        h *= 16777619u;
    }
    return h;
}

int tt_rdzv_table_init(tt_rdzv_table_t *t) {
    t->buckets = calloc(TT_RDZV_TABLE_MIN, sizeof(*t->buckets));
    t->nbuckets = TT_RDZV_TABLE_MIN;
    t->count = 0;
    return t->buckets ? TT_OK : TT_ENOMEM;
}

void tt_rdzv_table_free(tt_rdzv_table_t *t) {
    free(t->buckets);
    t->buckets = NULL;
    t->nbuckets = 0;
    t->count = 0;
}

tt_rdzv_node_t *tt_rdzv_table_find(const tt_rdzv_table_t *t, const char *id) {
    uint32_t h = tt_rdzv_hash_id(id);
    for (tt_rdzv_node_t *n = t->buckets[h & (t->nbuckets - 1)]; n; n = n->chain) {
        if (n->hash == h && strcmp(n->worker_id, id) == 0)
            return n;
    }
    return NULL;
}

static int table_grow(tt_rdzv_table_t *t) {
    uint32_t nb = t->nbuckets * 2;
    tt_rdzv_node_t **b = calloc(nb, sizeof(*b));
    if (b == NULL)
        return TT_ENOMEM;
    for (uint32_t i = 0; i < t->nbuckets; i++) {
        tt_rdzv_node_t *n = t->buckets[i];
        while (n) {
            tt_rdzv_node_t *next = n->chain;
            n->chain = b[n->hash & (nb - 1)];
            b[n->hash & (nb - 1)] = n;
            n = next;
        }
    }
    free(t->buckets);
    t->buckets = b;
    t->nbuckets = nb;
    return TT_OK;
}

/* The caller has checked that the id is not present. */
int tt_rdzv_table_insert(tt_rdzv_table_t *t, tt_rdzv_node_t *n) {
    /* A failed grow only lengthens chains; the insert itself cannot fail. */
    if (t->count >= t->nbuckets)
        (void)table_grow(t);
    n->hash = tt_rdzv_hash_id(n->worker_id);
    uint32_t b = n->hash & (t->nbuckets - 1);
    n->chain = t->buckets[b];
    t->buckets[b] = n;
    t->count++;
    return TT_OK;
}

void tt_rdzv_table_remove(tt_rdzv_table_t *t, tt_rdzv_node_t *n) {
    tt_rdzv_node_t **pp = &t->buckets[n->hash & (t->nbuckets - 1)];
    while (*pp && *pp != n)
        pp = &(*pp)->chain;
    if (*pp) {
        *pp = n->chain;
        n->chain = NULL;
        t->count--;
    }
}

int tt_rdzv_vec_push(tt_rdzv_vec_t *v, tt_rdzv_node_t *n) {
    if (v->n == v->cap) {
        uint32_t cap = v->cap ? v->cap * 2 : 16;
        tt_rdzv_node_t **nv = realloc(v->v, (size_t)cap * sizeof(*nv));
        if (nv == NULL)
            return TT_ENOMEM;
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = n;
    return TT_OK;
}

void tt_rdzv_vec_free(tt_rdzv_vec_t *v) {
    free(v->v);
    v->v = NULL;
    v->n = 0;
    v->cap = 0;
}

int tt_rdzv_pending_add(tt_rdzv_t *r, tt_rdzv_node_t *n) {
    int rc = tt_rdzv_vec_push(&r->pending, n);
    if (rc == TT_OK) {
        n->role = TT_RDZV_ROLE_PENDING;
        n->index = r->pending.n - 1;
    }
    return rc;
}

/* Swap-remove: pending order lives in prio/seq, not in the array. */
void tt_rdzv_pending_remove(tt_rdzv_t *r, tt_rdzv_node_t *n) {
    uint32_t i = n->index;
    if (i >= r->pending.n || r->pending.v[i] != n)
        return;
    r->pending.v[i] = r->pending.v[r->pending.n - 1];
    r->pending.v[i]->index = i;
    r->pending.n--;
}

static int cmp_id(const void *a, const void *b) {
    const tt_rdzv_node_t *x = *(tt_rdzv_node_t *const *)a;
    const tt_rdzv_node_t *y = *(tt_rdzv_node_t *const *)b;
    return strcmp(x->worker_id, y->worker_id);
}

static int cmp_priority(const void *a, const void *b) {
    const tt_rdzv_node_t *x = *(tt_rdzv_node_t *const *)a;
    const tt_rdzv_node_t *y = *(tt_rdzv_node_t *const *)b;
    if (x->prio != y->prio)
        return x->prio < y->prio ? -1 : 1;
    return x->seq < y->seq ? -1 : (x->seq > y->seq);
}

void tt_rdzv_sort_by_id(tt_rdzv_node_t **v, uint32_t n) {
    if (n > 1)
        qsort(v, n, sizeof(*v), cmp_id);
}

void tt_rdzv_sort_by_priority(tt_rdzv_node_t **v, uint32_t n) {
    if (n > 1)
        qsort(v, n, sizeof(*v), cmp_priority);
}

void tt_rdzv_free_nodes(tt_rdzv_t *r) {
    for (uint32_t i = 0; i < r->members.n; i++)
        free(r->members.v[i]);
    for (uint32_t i = 0; i < r->pending.n; i++)
        free(r->pending.v[i]);
    r->members.n = r->pending.n = 0;
    r->n_evicted = 0;
    memset(r->table.buckets, 0, (size_t)r->table.nbuckets * sizeof(*r->table.buckets));
    r->table.count = 0;
}

int tt_rdzv_copy(char *dst, size_t cap, const char *src) {
    if (src == NULL)
        src = "";
    size_t len = strlen(src);
    if (len >= cap)
        return -1;
    memcpy(dst, src, len + 1);
    return 0;
}
