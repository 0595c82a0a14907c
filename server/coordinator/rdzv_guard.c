/* rdzv_guard: the guard rails that stop a flapping job from regrouping
 * forever - the count of regroups within the last hour (a ring of their
 * times, failing the job once one more would exceed
 * max_regroups_per_hour) and, per worker id, the times of its recent
 * evictions, from which the exponential cool-down before its next join is
 * computed. Eviction records outlive the worker's node (a flapping worker
 * is evicted, then comes back as a new node) and are dropped once older
 * than an hour. Both memories go to the coordinator's state file as ages
 * (tt_rdzv_history_*), so a restart does not reset them. It decides nothing else: rdzv_group.c asks
 * before forming a generation, rdzv.c before admitting a join, and the eviction path records. Pure:
 * time is the caller's now_ms. */
#include "rdzv_internal.h"

#include "tt_log.h"
#include "tt_status.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FLAP_TABLE_MIN 64u

tt_rdzv_guard_t tt_rdzv_guard_default(void) {
    tt_rdzv_guard_t g = {
        .max_regroups_per_hour = 60,
        .flap_cooldown_ms = 1000,
        .flap_cooldown_max_ms = 300000,
    };
    return g;
}

tt_rdzv_guard_t tt_rdzv_guard_for_job(const tt_rdzv_guard_t *daemon, const tt_rdzv_settings_t *s) {
    tt_rdzv_guard_t g = *daemon;
    if (s->max_regroups_per_hour != 0)
        g.max_regroups_per_hour = s->max_regroups_per_hour;
    if (s->flap_cooldown_ms != 0)
        g.flap_cooldown_ms = s->flap_cooldown_ms;
    if (g.flap_cooldown_max_ms < g.flap_cooldown_ms)
        g.flap_cooldown_max_ms = g.flap_cooldown_ms;
    return g;
}

int tt_rdzv_guard_validate(const tt_rdzv_guard_t *g, char *err, size_t errlen) {
    const char *bad = NULL;
    if (g->max_regroups_per_hour > TT_RDZV_REGROUPS_LIMIT)
        bad = "max_regroups_per_hour";
    else if (g->flap_cooldown_ms > TT_RDZV_MS_LIMIT)
        bad = "flap_cooldown_ms";
    else if (g->flap_cooldown_max_ms > TT_RDZV_MS_LIMIT)
        bad = "flap_cooldown_max_ms";
    if (bad != NULL) {
        if (err && errlen)
            snprintf(err, errlen, "%s is out of range (regroups at most %u, times at most %u ms)",
                     bad, TT_RDZV_REGROUPS_LIMIT, TT_RDZV_MS_LIMIT);
        return TT_EINVAL;
    }
    if (g->flap_cooldown_max_ms < g->flap_cooldown_ms) {
        if (err && errlen)
            snprintf(err, errlen, "flap_cooldown_max_ms: %u is below flap_cooldown_ms %u",
                     g->flap_cooldown_max_ms, g->flap_cooldown_ms);
        return TT_EINVAL;
    }
    return TT_OK;
}

int tt_rdzv_set_guard(tt_rdzv_t *r, const tt_rdzv_guard_t *g, char *err, size_t errlen) {
    if (r == NULL || g == NULL)
        return TT_EINVAL;
    int rc = tt_rdzv_guard_validate(g, err, errlen);
    if (rc != TT_OK)
        return rc;
    uint64_t *ring = NULL;
    if (g->max_regroups_per_hour > 0) {
        ring = calloc(g->max_regroups_per_hour, sizeof(*ring));
        if (ring == NULL)
            return TT_ENOMEM;
    }
    free(r->regroup_at);
    r->regroup_at = ring;
    r->regroup_head = r->regroup_n = 0;
    r->guard = *g;
    return TT_OK;
}

const tt_rdzv_guard_t *tt_rdzv_guard(const tt_rdzv_t *r) {
    return &r->guard;
}

static int within_hour(uint64_t t, uint64_t now_ms) {
    return t + TT_RDZV_HOUR_MS > now_ms;
}

uint32_t tt_rdzv_regroups_last_hour(const tt_rdzv_t *r, uint64_t now_ms) {
    uint32_t k = 0, cap = r->guard.max_regroups_per_hour;
    for (uint32_t i = 0; i < r->regroup_n; i++)
        k += within_hour(r->regroup_at[(r->regroup_head + i) % cap], now_ms);
    return k;
}

/* The ring keeps the newest `cap` regroups, oldest at head: one more is
 * allowed unless the ring is full and its oldest is still within the hour
 * (then this one would be number cap + 1). */
int tt_rdzv_note_regroup(tt_rdzv_t *r, uint64_t now_ms, char *why, size_t len) {
    uint32_t cap = r->guard.max_regroups_per_hour;
    if (cap == 0 || r->regroup_at == NULL)
        return 0;
    if (r->regroup_n == cap && within_hour(r->regroup_at[r->regroup_head], now_ms)) {
        snprintf(why, len,
                 "%u regroups within the last hour exceed max_regroups_per_hour %u (workers keep "
                 "dying or re-joining): job failed",
                 cap + 1, cap);
        return -1;
    }
    if (r->regroup_n == cap) { /* the oldest left the window: reuse its slot */
        r->regroup_at[r->regroup_head] = now_ms;
        r->regroup_head = (r->regroup_head + 1) % cap;
    } else {
        r->regroup_at[(r->regroup_head + r->regroup_n) % cap] = now_ms;
        r->regroup_n++;
    }
    return 0;
}

/* ---- eviction history per worker id ---- */

static tt_rdzv_flap_t *flap_find(const tt_rdzv_flaps_t *f, const char *id) {
    if (f->buckets == NULL)
        return NULL;
    uint32_t h = tt_rdzv_hash_id(id);
    for (tt_rdzv_flap_t *e = f->buckets[h & (f->nbuckets - 1)]; e; e = e->chain) {
        if (e->hash == h && strcmp(e->worker_id, id) == 0)
            return e;
    }
    return NULL;
}

/* Rehashes into `nb` buckets; on failure the table stays as it was. */
static int flap_rehash(tt_rdzv_flaps_t *f, uint32_t nb) {
    tt_rdzv_flap_t **b = calloc(nb, sizeof(*b));
    if (b == NULL)
        return TT_ENOMEM;
    for (uint32_t i = 0; f->buckets != NULL && i < f->nbuckets; i++) {
        for (tt_rdzv_flap_t *e = f->buckets[i], *next; e; e = next) {
            next = e->chain;
            e->chain = b[e->hash & (nb - 1)];
            b[e->hash & (nb - 1)] = e;
        }
    }
    free(f->buckets);
    f->buckets = b;
    f->nbuckets = nb;
    return TT_OK;
}

/* Drops the records whose newest eviction is older than an hour, so that
 * worker ids that never come back (e.g. "<host>-<pid>") cost nothing for
 * long. Run when the count doubled since the last sweep: amortised O(1). */
static void flap_sweep(tt_rdzv_flaps_t *f, uint64_t now_ms) {
    for (uint32_t i = 0; i < f->nbuckets; i++) {
        tt_rdzv_flap_t **pp = &f->buckets[i];
        while (*pp) {
            tt_rdzv_flap_t *e = *pp;
            if (within_hour(e->at[e->n - 1], now_ms)) {
                pp = &e->chain;
                continue;
            }
            *pp = e->chain;
            free(e);
            f->count--;
        }
    }
    f->sweep_at = f->count * 2 > FLAP_TABLE_MIN ? f->count * 2 : FLAP_TABLE_MIN;
}

static tt_rdzv_flap_t *flap_add(tt_rdzv_flaps_t *f, const char *id, uint64_t now_ms) {
    if (f->buckets == NULL && flap_rehash(f, FLAP_TABLE_MIN) != TT_OK)
        return NULL;
    if (f->count >= f->sweep_at)
        flap_sweep(f, now_ms);
    if (f->count >= f->nbuckets)
        (void)flap_rehash(f, f->nbuckets * 2); /* failing only lengthens chains */
    tt_rdzv_flap_t *e = calloc(1, sizeof(*e));
    if (e == NULL)
        return NULL;
    (void)tt_rdzv_copy(e->worker_id, sizeof(e->worker_id), id);
    e->hash = tt_rdzv_hash_id(id);
    e->chain = f->buckets[e->hash & (f->nbuckets - 1)];
    f->buckets[e->hash & (f->nbuckets - 1)] = e;
    f->count++;
    return e;
}

static void flap_push(tt_rdzv_flap_t *e, uint64_t t) {
    if (e->n == TT_RDZV_FLAP_KEEP) {
        memmove(e->at, e->at + 1, (TT_RDZV_FLAP_KEEP - 1) * sizeof(e->at[0]));
        e->n--;
    }
    e->at[e->n++] = t;
}

void tt_rdzv_flap_note(tt_rdzv_t *r, const char *id, uint64_t now_ms) {
    tt_rdzv_flap_t *e = flap_find(&r->flaps, id);
    if (e == NULL && (e = flap_add(&r->flaps, id, now_ms)) == NULL) {
        /* Losing one record only shortens a cool-down: not worth failing. */
        TT_WARN(TT_RDZV_SUBSYS, "job %s: eviction of %s not recorded (out of memory)", r->job_id,
                id);
        return;
    }
    flap_push(e, now_ms);
}

/* Cool-down after k >= 2 evictions: base * 2^(k-2), capped (rdzv.h says
 * why the first one is free). */
static uint64_t cooldown_ms(const tt_rdzv_guard_t *g, uint32_t k) {
    uint32_t shift = k - 2 < 32 ? k - 2 : 32; /* base < 2^27: no overflow */
    uint64_t c = (uint64_t)g->flap_cooldown_ms << shift;
    return c < g->flap_cooldown_max_ms ? c : g->flap_cooldown_max_ms;
}

int tt_rdzv_flap_check(const tt_rdzv_t *r, const char *id, uint64_t now_ms, char *err,
                       size_t errlen) {
    const tt_rdzv_flap_t *e = r->guard.flap_cooldown_ms ? flap_find(&r->flaps, id) : NULL;
    if (e == NULL)
        return TT_OK;
    uint32_t k = 0;
    for (uint32_t i = e->n; i-- > 0 && within_hour(e->at[i], now_ms);)
        k++;
    if (k < 2)
        return TT_OK;
    uint64_t last = e->at[e->n - 1], cool = cooldown_ms(&r->guard, k);
    if (now_ms >= last + cool)
        return TT_OK;
    if (err && errlen)
        snprintf(err, errlen,
                 "worker %s was evicted %u times within the last hour (last %" PRIu64
                 " ms ago): flap cool-down of %" PRIu64 " ms, it may re-join in %" PRIu64 " ms",
                 id, k, now_ms - last, cool, last + cool - now_ms);
    return TT_EBUSY;
}

void tt_rdzv_guard_free(tt_rdzv_t *r) {
    tt_rdzv_flaps_t *f = &r->flaps;
    for (uint32_t i = 0; f->buckets != NULL && i < f->nbuckets; i++) {
        for (tt_rdzv_flap_t *e = f->buckets[i], *next; e; e = next) {
            next = e->chain;
            free(e);
        }
    }
    free(f->buckets);
    memset(f, 0, sizeof(*f));
    free(r->regroup_at);
    r->regroup_at = NULL;
    r->regroup_n = r->regroup_head = 0;
}

/* ---- the memory in the state file ---- */

/* now_ms - x, or 0 where x lies past now_ms: the age of an event at x
 * going out, and the time of an event x ms old coming in (0 when the
 * caller's clock is younger than that, rdzv.h). */
static uint64_t ms_before(uint64_t now_ms, uint64_t x) {
    return x < now_ms ? now_ms - x : 0;
}

static int export_regroups(const tt_rdzv_t *r, uint64_t now_ms, tt_rdzv_history_t *h) {
    uint32_t cap = r->guard.max_regroups_per_hour;
    h->regroup_age_ms = calloc(r->regroup_n + 1, sizeof(uint64_t));
    if (h->regroup_age_ms == NULL)
        return TT_ENOMEM;
    for (uint32_t i = 0; i < r->regroup_n; i++) {
        uint64_t t = r->regroup_at[(r->regroup_head + i) % cap];
        if (within_hour(t, now_ms))
            h->regroup_age_ms[h->n_regroups++] = ms_before(now_ms, t);
    }
    return TT_OK;
}

static void export_flap(const tt_rdzv_flap_t *e, uint64_t now_ms, tt_rdzv_flap_saved_t *d) {
    memset(d, 0, sizeof(*d));
    memcpy(d->worker_id, e->worker_id, sizeof(d->worker_id));
    for (uint32_t i = 0; i < e->n; i++) {
        if (within_hour(e->at[i], now_ms))
            d->age_ms[d->n++] = ms_before(now_ms, e->at[i]);
    }
}

int tt_rdzv_history_export(const tt_rdzv_t *r, uint64_t now_ms, tt_rdzv_history_t *out) {
    memset(out, 0, sizeof(*out));
    const tt_rdzv_flaps_t *f = &r->flaps;
    int rc = export_regroups(r, now_ms, out);
    if (rc == TT_OK && (out->flaps = calloc(f->count + 1, sizeof(*out->flaps))) == NULL)
        rc = TT_ENOMEM;
    for (uint32_t i = 0; rc == TT_OK && f->buckets != NULL && i < f->nbuckets; i++) {
        for (const tt_rdzv_flap_t *e = f->buckets[i]; e; e = e->chain) {
            export_flap(e, now_ms, &out->flaps[out->n_flaps]);
            out->n_flaps += out->flaps[out->n_flaps].n > 0;
        }
    }
    if (rc != TT_OK)
        tt_rdzv_history_free(out);
    return rc;
}

/* Appends to the ring, oldest first; a full ring drops its oldest. */
static void import_regroup(tt_rdzv_t *r, uint64_t t) {
    uint32_t cap = r->guard.max_regroups_per_hour;
    if (r->regroup_n == cap) {
        r->regroup_at[r->regroup_head] = t;
        r->regroup_head = (r->regroup_head + 1) % cap;
    } else {
        r->regroup_at[(r->regroup_head + r->regroup_n++) % cap] = t;
    }
}

void tt_rdzv_history_import(tt_rdzv_t *r, const tt_rdzv_history_t *h, uint64_t now_ms) {
    for (uint32_t i = 0; r->regroup_at != NULL && i < h->n_regroups; i++) {
        if (h->regroup_age_ms[i] < TT_RDZV_HOUR_MS)
            import_regroup(r, ms_before(now_ms, h->regroup_age_ms[i]));
    }
    for (uint32_t i = 0; i < h->n_flaps; i++) {
        const tt_rdzv_flap_saved_t *s = &h->flaps[i];
        tt_rdzv_flap_t *e = NULL;
        for (uint32_t k = 0; k < s->n && k < TT_RDZV_FLAP_KEEP; k++) {
            if (s->age_ms[k] >= TT_RDZV_HOUR_MS)
                continue;
            if (e == NULL && (e = flap_find(&r->flaps, s->worker_id)) == NULL &&
                (e = flap_add(&r->flaps, s->worker_id, now_ms)) == NULL)
                break; /* only a shorter cool-down */
            flap_push(e, ms_before(now_ms, s->age_ms[k]));
        }
    }
}

void tt_rdzv_history_free(tt_rdzv_history_t *h) {
    if (h == NULL)
        return;
    free(h->regroup_age_ms);
    free(h->flaps);
    memset(h, 0, sizeof(*h));
}
