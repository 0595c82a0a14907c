/* tt_client_opts: the membership client's options: defaults, the TETHER_*
 * environment variables (read through an injected lookup so tests need no
 * setenv), validation, routing ids and incarnations. Everything here is
 * pure; it does not own the client, its socket or the job rules the
 * coordinator enforces (those are re-checked there). */
#include "tt_client.h"
#include "tt_status.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define OPT_ERR(err, errlen, ...)                                                                  \
    do {                                                                                           \
        if ((err) != NULL && (errlen) > 0)                                                         \
            snprintf((err), (errlen), __VA_ARGS__);                                                \
    } while (0)

#define MS_LIMIT      86400000u /* one day, as the coordinator allows */
#define WORKERS_LIMIT 65536u

void tt_client_opts_default(tt_client_opts_t *o) {
    memset(o, 0, sizeof(*o));
    snprintf(o->coordinator, sizeof(o->coordinator), "tcp://127.0.0.1:7600");
    snprintf(o->job_id, sizeof(o->job_id), "default");
    if (gethostname(o->host, sizeof(o->host) - 1) != 0 || o->host[0] == '\0')
        snprintf(o->host, sizeof(o->host), "localhost");
    char host[64];
    snprintf(host, sizeof(host), "%.*s", 48, o->host);
    snprintf(o->worker_id, sizeof(o->worker_id), "%s-%ld", host, (long)getpid());
    o->job.min_workers = 1;
    o->job.max_workers = 1;
    o->job.last_call_ms = 2000;
    o->job.heartbeat_ms = 1000;
    o->job.heartbeat_timeout_ms = 5000;
    o->job.global_batch = 256;
    o->job.join_timeout_ms = 60000;
    o->request_timeout_ms = 3000;
}

typedef struct {
    const char *var;
    size_t offset; /* into tt_client_opts_t */
    size_t size;   /* string capacity; 0 for a uint32_t */
    uint32_t min, max;
} env_entry_t;

#define ENV_STR(var, field)                                                                        \
    { var, offsetof(tt_client_opts_t, field), TETHER_ID_MAX, 0, 0 }
#define ENV_STR_N(var, field, n)                                                                   \
    { var, offsetof(tt_client_opts_t, field), n, 0, 0 }
#define ENV_U32(var, field, lo, hi)                                                                \
    { var, offsetof(tt_client_opts_t, job.field), 0, lo, hi }

static const env_entry_t env_table[] = {
    ENV_STR_N("TETHER_COORDINATOR", coordinator, TETHER_ENDPOINT_MAX),
    ENV_STR("TETHER_JOB", job_id),
    ENV_STR("TETHER_WORKER_ID", worker_id),
    ENV_STR_N("TETHER_HOST", host, TETHER_HOST_MAX),
    ENV_STR_N("TETHER_ENDPOINT", endpoint, TETHER_ENDPOINT_MAX),
    ENV_STR_N("TETHER_KEY_FILE", key_file, TETHER_PATH_MAX),
    ENV_U32("TETHER_MIN_WORKERS", min_workers, 1, WORKERS_LIMIT),
    ENV_U32("TETHER_MAX_WORKERS", max_workers, 1, WORKERS_LIMIT),
    ENV_U32("TETHER_LAST_CALL_MS", last_call_ms, 1, MS_LIMIT),
    ENV_U32("TETHER_HEARTBEAT_MS", heartbeat_ms, 1, MS_LIMIT),
    ENV_U32("TETHER_HEARTBEAT_TIMEOUT_MS", heartbeat_timeout_ms, 1, MS_LIMIT),
    ENV_U32("TETHER_GLOBAL_BATCH", global_batch, 1, UINT32_MAX),
    ENV_U32("TETHER_JOIN_TIMEOUT_MS", join_timeout_ms, 1, MS_LIMIT),
    ENV_U32("TETHER_CHECKPOINT_EVERY_STEPS", checkpoint_every_steps, 0, UINT32_MAX),
    ENV_U32("TETHER_CHECKPOINT_EVERY_MS", checkpoint_every_ms, 0, MS_LIMIT),
    ENV_U32("TETHER_CHECKPOINT_KEEP", checkpoint_keep, 0, 1000000),
    ENV_U32("TETHER_JOB_MAX_REGROUPS_PER_HOUR", max_regroups_per_hour, 0, 100000),
    ENV_U32("TETHER_JOB_FLAP_COOLDOWN_MS", flap_cooldown_ms, 0, MS_LIMIT),
};

static int apply_env(tt_client_opts_t *o, const env_entry_t *e, const char *v, char *err,
                     size_t errlen) {
    char *field = (char *)o + e->offset;
    if (e->size > 0) {
        if (strlen(v) >= e->size) {
            OPT_ERR(err, errlen, "%s='%.40s...' is longer than %zu bytes", e->var, v, e->size - 1);
            return TT_EINVAL;
        }
        memcpy(field, v, strlen(v) + 1);
        return TT_OK;
    }
    char *end = NULL;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (v[0] == '-' || v[0] == '\0' || errno != 0 || *end != '\0' || x < e->min || x > e->max) {
        OPT_ERR(err, errlen, "%s='%s' must be an integer in [%" PRIu32 ", %" PRIu32 "]", e->var, v,
                e->min, e->max);
        return TT_EINVAL;
    }
    uint32_t val = (uint32_t)x;
    memcpy(field, &val, sizeof(val));
    return TT_OK;
}

int tt_client_opts_from_lookup(tt_client_opts_t *o, tt_client_lookup_fn lookup, void *ctx,
                               char *err, size_t errlen) {
    for (size_t i = 0; i < sizeof(env_table) / sizeof(env_table[0]); i++) {
        const char *v = lookup(ctx, env_table[i].var);
        if (v != NULL && apply_env(o, &env_table[i], v, err, errlen) != TT_OK)
            return TT_EINVAL;
    }
    return tt_client_opts_validate(o, err, errlen);
}

static int valid_id(const char *what, const char *s, char *err, size_t errlen) {
    size_t n = strnlen(s, TETHER_ID_MAX);
    if (n == 0 || n >= TETHER_ID_MAX) {
        OPT_ERR(err, errlen, "%s must be 1..%d bytes", what, TETHER_ID_MAX - 1);
        return TT_EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch <= ' ' || ch == 0x7f) {
            OPT_ERR(err, errlen, "%s '%s' contains a space or control character", what, s);
            return TT_EINVAL;
        }
    }
    return TT_OK;
}

static int validate_job(const tether_job_settings_t *j, char *err, size_t errlen) {
    if (j->min_workers < 1 || j->min_workers > j->max_workers || j->max_workers > WORKERS_LIMIT) {
        OPT_ERR(err, errlen, "min_workers=%u, max_workers=%u: need 1 <= min <= max <= %u",
                j->min_workers, j->max_workers, WORKERS_LIMIT);
        return TT_EINVAL;
    }
    const uint32_t ms[] = {j->last_call_ms, j->heartbeat_ms, j->heartbeat_timeout_ms,
                           j->join_timeout_ms};
    const char *names[] = {"last_call_ms", "heartbeat_ms", "heartbeat_timeout_ms",
                           "join_timeout_ms"};
    for (int i = 0; i < 4; i++) {
        if (ms[i] < 1 || ms[i] > MS_LIMIT) {
            OPT_ERR(err, errlen, "%s=%u must be in [1, %u]", names[i], ms[i], MS_LIMIT);
            return TT_EINVAL;
        }
    }
    if (j->heartbeat_timeout_ms <= j->heartbeat_ms) {
        OPT_ERR(err, errlen, "heartbeat_timeout_ms=%u must exceed heartbeat_ms=%u",
                j->heartbeat_timeout_ms, j->heartbeat_ms);
        return TT_EINVAL;
    }
    if (j->global_batch < j->max_workers) {
        OPT_ERR(err, errlen, "global_batch=%u must be at least max_workers=%u", j->global_batch,
                j->max_workers);
        return TT_EINVAL;
    }
    return TT_OK;
}

int tt_client_opts_validate(const tt_client_opts_t *o, char *err, size_t errlen) {
    if (o == NULL) {
        OPT_ERR(err, errlen, "options are NULL");
        return TT_EINVAL;
    }
    if (strnlen(o->coordinator, TETHER_ENDPOINT_MAX) == 0 ||
        strstr(o->coordinator, "://") == NULL) {
        OPT_ERR(err, errlen, "coordinator endpoint '%.200s' is not like tcp://host:port",
                o->coordinator);
        return TT_EINVAL;
    }
    int rc = valid_id("job id", o->job_id, err, errlen);
    if (rc == TT_OK)
        rc = valid_id("worker id", o->worker_id, err, errlen);
    if (rc == TT_OK && o->request_timeout_ms == 0) {
        OPT_ERR(err, errlen, "request_timeout_ms must be > 0");
        rc = TT_EINVAL;
    }
    if (rc == TT_OK)
        rc = validate_job(&o->job, err, errlen);
    /* "worker-<id>.<20 digits>" must fit the wire's id limit. */
    char rid[TETHER_ID_MAX + 32];
    if (rc == TT_OK && tt_client_routing_id(rid, sizeof(rid), o->worker_id, UINT64_MAX) != TT_OK) {
        OPT_ERR(err, errlen,
                "worker id '%s' is too long for a routing id (max %u bytes with "
                "the 'worker-' prefix and incarnation)",
                o->worker_id, TT_WIRE_MAX_ID);
        rc = TT_EINVAL;
    }
    return rc;
}

int tt_client_routing_id(char *out, size_t n, const char *worker_id, uint64_t incarnation) {
    int w = snprintf(out, n, "worker-%s.%" PRIu64, worker_id, incarnation);
    return (w < 0 || (size_t)w >= n || (size_t)w > TT_WIRE_MAX_ID) ? TT_EINVAL : TT_OK;
}

uint64_t tt_client_next_incarnation(uint64_t prev, uint64_t wall_ms, uint32_t pid) {
    uint64_t fresh = (wall_ms << 16) | (pid & 0xffffu);
    return fresh > prev ? fresh : prev + 1;
}
