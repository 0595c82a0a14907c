/* shards: registry arrays (a handful of shards, a handful of jobs: linear
 * scans are the clear choice), the lazy placement recompute, and the check
 * for placements that still use a dead shard. */
#include "shards.h"
#include "tt_status.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SHSET_ERR(err, errlen, ...)                                                                \
    do {                                                                                           \
        if ((err) != NULL && (errlen) > 0)                                                         \
            snprintf((err), (errlen), __VA_ARGS__);                                                \
    } while (0)

typedef struct shards_job {
    char *id;
    char **names;
    uint64_t *counts;
    size_t ntensors;
    uint64_t chunk_bytes, total;
    uint32_t min_shards;  /* tt_shards_wait_for */
    tt_placement_t place; /* version 0: not computed yet */
} shards_job_t;

struct tt_shards {
    uint32_t timeout_ms;
    uint64_t version_base;
    tt_shard_info_t *shards;
    size_t nshards;
    shards_job_t *jobs;
    size_t njobs;
};

int tt_shards_create(tt_shards_t **out, uint32_t timeout_ms) {
    *out = calloc(1, sizeof(**out));
    if (*out == NULL)
        return TT_ENOMEM;
    (*out)->timeout_ms = timeout_ms ? timeout_ms : TT_SHARDS_TIMEOUT_DEFAULT_MS;
    return TT_OK;
}

void tt_shards_set_version_base(tt_shards_t *s, uint64_t base) {
    s->version_base = base;
}

static void job_free(shards_job_t *j) {
    for (size_t i = 0; i < j->ntensors; i++)
        free(j->names[i]);
    free(j->names);
    free(j->counts);
    free(j->id);
    tt_placement_free(&j->place);
}

void tt_shards_destroy(tt_shards_t **sp) {
    if (sp == NULL || *sp == NULL)
        return;
    tt_shards_t *s = *sp;
    *sp = NULL;
    for (size_t i = 0; i < s->njobs; i++)
        job_free(&s->jobs[i]);
    free(s->jobs);
    free(s->shards);
    free(s);
}

void tt_shards_forget(tt_shards_t *s, const char *job) {
    for (size_t i = 0; i < s->njobs; i++) {
        if (strcmp(s->jobs[i].id, job) != 0)
            continue;
        if (s->jobs[i].place.version > s->version_base)
            s->version_base = s->jobs[i].place.version;
        job_free(&s->jobs[i]);
        memmove(&s->jobs[i], &s->jobs[i + 1], (s->njobs - i - 1) * sizeof(s->jobs[0]));
        s->njobs--;
        return;
    }
}

static tt_shard_info_t *find_shard(const tt_shards_t *s, const char *id) {
    for (size_t i = 0; i < s->nshards; i++) {
        if (strcmp(s->shards[i].id, id) == 0)
            return &s->shards[i];
    }
    return NULL;
}

int tt_shards_heartbeat(tt_shards_t *s, const tt_shard_info_t *hb, uint64_t now_ms) {
    if (hb->id[0] == '\0' || hb->endpoint[0] == '\0' ||
        strnlen(hb->id, TT_PLACE_ID_MAX) >= TT_PLACE_ID_MAX ||
        strnlen(hb->endpoint, TT_SHARDS_EP_MAX) >= TT_SHARDS_EP_MAX)
        return TT_EINVAL;
    tt_shard_info_t *e = find_shard(s, hb->id);
    if (e == NULL) {
        tt_shard_info_t *a = realloc(s->shards, (s->nshards + 1) * sizeof(*a));
        if (a == NULL)
            return TT_ENOMEM;
        s->shards = a;
        e = &s->shards[s->nshards++];
    }
    *e = *hb;
    e->last_seen_ms = now_ms;
    return TT_OK;
}

size_t tt_shards_count(const tt_shards_t *s) {
    return s->nshards;
}

const tt_shard_info_t *tt_shards_at(const tt_shards_t *s, size_t i) {
    return i < s->nshards ? &s->shards[i] : NULL;
}

int tt_shards_alive(const tt_shards_t *s, size_t i, uint64_t now_ms) {
    return i < s->nshards && now_ms < s->shards[i].last_seen_ms + s->timeout_ms;
}

void tt_shards_forgive(tt_shards_t *s, uint64_t gap_ms, uint64_t now_ms) {
    if (s == NULL)
        return; /* no shard server has registered yet */
    uint64_t began = now_ms > gap_ms ? now_ms - gap_ms : 0;
    for (size_t i = 0; i < s->nshards; i++) {
        tt_shard_info_t *e = &s->shards[i];
        if (!tt_shards_alive(s, i, began))
            continue; /* dead before the stall: it stays dead */
        uint64_t seen = e->last_seen_ms + gap_ms;
        e->last_seen_ms = seen < now_ms ? seen : now_ms;
    }
}

const char *tt_shards_endpoint(const tt_shards_t *s, const char *id) {
    const tt_shard_info_t *e = find_shard(s, id);
    return e ? e->endpoint : NULL;
}

static shards_job_t *find_job(const tt_shards_t *s, const char *job) {
    for (size_t i = 0; i < s->njobs; i++) {
        if (strcmp(s->jobs[i].id, job) == 0)
            return &s->jobs[i];
    }
    return NULL;
}

/* First difference between a declared table and a new one, or TT_OK. */
static int compare_table(const shards_job_t *j, const tt_tensor_decl_t *t, size_t n,
                         uint64_t chunk_bytes, char *err, size_t errlen) {
    if (chunk_bytes != j->chunk_bytes) {
        SHSET_ERR(err, errlen, "job '%s' was declared with %" PRIu64 "-byte chunks, not %" PRIu64,
                  j->id, j->chunk_bytes, chunk_bytes);
        return TT_ECONFLICT;
    }
    for (size_t i = 0; i < n && i < j->ntensors; i++) {
        const char *name = t[i].name ? t[i].name : "";
        if (strcmp(name, j->names[i]) != 0 || t[i].count != j->counts[i]) {
            SHSET_ERR(err, errlen,
                      "job '%s' tensor %zu was declared as '%s' x %" PRIu64 ", now '%s' x %" PRIu64,
                      j->id, i, j->names[i], j->counts[i], name, t[i].count);
            return TT_ECONFLICT;
        }
    }
    if (n != j->ntensors) {
        SHSET_ERR(err, errlen, "job '%s' was declared with %zu tensors, now %zu", j->id,
                  j->ntensors, n);
        return TT_ECONFLICT;
    }
    return TT_OK;
}

static int fill_job(shards_job_t *j, const char *job, const tt_tensor_decl_t *t, size_t n,
                    uint64_t chunk_bytes) {
    memset(j, 0, sizeof(*j));
    j->id = strdup(job);
    j->names = calloc(n, sizeof(char *));
    j->counts = calloc(n, sizeof(uint64_t));
    if (j->id == NULL || j->names == NULL || j->counts == NULL)
        return TT_ENOMEM;
    j->ntensors = n;
    j->chunk_bytes = chunk_bytes;
    for (size_t i = 0; i < n; i++) {
        if ((j->names[i] = strdup(t[i].name ? t[i].name : "")) == NULL)
            return TT_ENOMEM;
        j->counts[i] = t[i].count;
        j->total += t[i].count;
    }
    return TT_OK;
}

int tt_shards_declare(tt_shards_t *s, const char *job, const tt_tensor_decl_t *t, size_t n,
                      uint64_t chunk_bytes, char *err, size_t errlen) {
    if (job == NULL || job[0] == '\0' || n == 0 || t == NULL) {
        SHSET_ERR(err, errlen, "a tensor table needs a job id and at least one tensor");
        return TT_EINVAL;
    }
    if (chunk_bytes == 0) {
        uint64_t total = 0;
        for (size_t i = 0; i < n; i++)
            total += t[i].count;
        chunk_bytes = tt_placement_auto_chunk_bytes(total);
    }
    shards_job_t *j = find_job(s, job);
    if (j != NULL)
        return compare_table(j, t, n, chunk_bytes, err, errlen);
    shards_job_t *a = realloc(s->jobs, (s->njobs + 1) * sizeof(*a));
    if (a == NULL)
        return TT_ENOMEM;
    s->jobs = a;
    int rc = fill_job(&s->jobs[s->njobs], job, t, n, chunk_bytes);
    if (rc != TT_OK) {
        job_free(&s->jobs[s->njobs]);
        return rc;
    }
    s->njobs++;
    return TT_OK;
}

void tt_shards_wait_for(tt_shards_t *s, const char *job, uint32_t min_shards) {
    shards_job_t *j = find_job(s, job);
    if (j != NULL && min_shards > j->min_shards)
        j->min_shards = min_shards;
}

size_t tt_shards_live_count(const tt_shards_t *s, uint64_t now_ms) {
    size_t n = 0;
    for (size_t i = 0; i < s->nshards; i++)
        n += tt_shards_alive(s, i, now_ms) != 0;
    return n;
}

/* Whether the live set equals the shards the placement was made for. */
static int same_live_set(const tt_placement_t *p, const char *const *ids, size_t n) {
    if (p->version == 0 || p->nshards != n)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (tt_placement_shard_index(p, ids[i]) < 0)
            return 0;
    }
    return 1;
}

int tt_shards_placement(tt_shards_t *s, const char *job, uint64_t now_ms,
                        const tt_placement_t **out, char *err, size_t errlen) {
    *out = NULL;
    shards_job_t *j = find_job(s, job);
    if (j == NULL) {
        SHSET_ERR(err, errlen, "job '%s' has not declared its tensor table", job);
        return TT_ENOTFOUND;
    }
    const char **ids = calloc(s->nshards + 1, sizeof(char *));
    if (ids == NULL)
        return TT_ENOMEM;
    size_t n = 0;
    for (size_t i = 0; i < s->nshards; i++) {
        if (tt_shards_alive(s, i, now_ms))
            ids[n++] = s->shards[i].id;
    }
    int rc = TT_OK;
    if (n == 0) {
        SHSET_ERR(err, errlen, "no live shard server to place job '%s' on", job);
        rc = TT_ENOTFOUND;
    } else if (j->place.version == 0 && n < j->min_shards) {
        SHSET_ERR(err, errlen, "%zu of the %u shard servers job %s waits for are alive", n,
                  j->min_shards, job);
        rc = TT_EAGAIN;
    } else if (!same_live_set(&j->place, ids, n)) {
        tt_placement_t next;
        rc = tt_placement_compute(j->place.version ? &j->place : NULL, ids, n, j->total,
                                  j->chunk_bytes, &next, err, errlen);
        if (rc == TT_OK && j->place.version == 0)
            next.version += s->version_base;
        if (rc == TT_OK) {
            tt_placement_free(&j->place);
            j->place = next;
        }
    }
    free(ids);
    if (rc == TT_OK)
        *out = &j->place;
    return rc;
}

static int shard_has_chunks(const tt_placement_t *p, size_t k) {
    for (size_t i = 0; i < p->nchunks; i++) {
        if (p->chunks[i].shard == k)
            return 1;
    }
    return 0;
}

/* A shard that never heartbeat is as dead as one that stopped. */
static int id_alive(const tt_shards_t *s, const char *id, uint64_t now_ms) {
    const tt_shard_info_t *e = find_shard(s, id);
    return e != NULL && tt_shards_alive(s, (size_t)(e - s->shards), now_ms);
}

const char *tt_shards_lost(const tt_shards_t *s, const char *job, uint64_t now_ms,
                           uint64_t *version) {
    const shards_job_t *j = find_job(s, job);
    if (version != NULL)
        *version = j ? j->place.version : 0;
    if (j == NULL || j->place.version == 0)
        return NULL;
    for (size_t k = 0; k < j->place.nshards; k++) {
        const char *id = j->place.shard_ids[k];
        if (!id_alive(s, id, now_ms) && shard_has_chunks(&j->place, k))
            return id;
    }
    return NULL;
}

uint64_t tt_shards_next_expiry(const tt_shards_t *s, uint64_t now_ms) {
    uint64_t next = UINT64_MAX;
    for (size_t i = 0; i < s->nshards; i++) {
        uint64_t at = s->shards[i].last_seen_ms + s->timeout_ms;
        if (tt_shards_alive(s, i, now_ms) && at < next)
            next = at;
    }
    return next;
}
