/* rdzv_settings: a job's rendezvous settings - defaults, validation with a
 * sentence that names the field and the rule, and the comparison that turns
 * a join with different settings into a refusal naming the first field that
 * differs. It does not know where settings come from (config, wire). */
#include "rdzv_internal.h"

#include "tt_status.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

tt_rdzv_settings_t tt_rdzv_settings_default(void) {
    tt_rdzv_settings_t s = {
        .min_workers = 1,
        .max_workers = 1,
        .last_call_ms = 2000,
        .heartbeat_ms = 1000,
        .heartbeat_timeout_ms = 5000,
        .global_batch = 256,
        .join_timeout_ms = 60000,
    };
    return s;
}

/* The one table both validation and comparison walk, so a new field cannot
 * be compared but not checked, or the reverse. */
typedef struct {
    const char *name;
    size_t offset;
    int is_ms; /* 1: 1..TT_RDZV_MS_LIMIT; 2: 0 (off) or that */
} settings_field_t;

#define FIELD(f, ms)                                                                               \
    { #f, offsetof(tt_rdzv_settings_t, f), ms }
static const settings_field_t settings_fields[] = {
    FIELD(min_workers, 0),           FIELD(max_workers, 0),
    FIELD(last_call_ms, 1),          FIELD(heartbeat_ms, 1),
    FIELD(heartbeat_timeout_ms, 1),  FIELD(global_batch, 0),
    FIELD(join_timeout_ms, 1),       FIELD(checkpoint_every_steps, 0),
    FIELD(checkpoint_every_ms, 2),   FIELD(checkpoint_keep, 0),
    FIELD(max_regroups_per_hour, 0), FIELD(flap_cooldown_ms, 2),
};
#undef FIELD
#define N_FIELDS (sizeof(settings_fields) / sizeof(settings_fields[0]))

static uint32_t field_value(const tt_rdzv_settings_t *s, size_t i) {
    return *(const uint32_t *)((const char *)s + settings_fields[i].offset);
}

static int invalid(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int invalid(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return TT_EINVAL;
}

int tt_rdzv_settings_validate(const tt_rdzv_settings_t *s, char *err, size_t errlen) {
    for (size_t i = 0; i < N_FIELDS; i++) {
        uint32_t v = field_value(s, i);
        int kind = settings_fields[i].is_ms;
        if (kind != 0 && (v > TT_RDZV_MS_LIMIT || (v == 0 && kind == 1))) {
            if (err && errlen)
                snprintf(err, errlen, "%s: %u is out of range %u..%u ms", settings_fields[i].name,
                         v, kind == 1 ? 1u : 0u, TT_RDZV_MS_LIMIT);
            return TT_EINVAL;
        }
    }
    if (s->min_workers < 1)
        return invalid(err, errlen, "min_workers: %u, must be at least %u", s->min_workers, 1);
    if (s->max_workers < s->min_workers)
        return invalid(err, errlen, "max_workers: %u is below min_workers %u", s->max_workers,
                       s->min_workers);
    if (s->max_workers > TT_RDZV_WORKERS_LIMIT)
        return invalid(err, errlen, "max_workers: %u is above the limit %u", s->max_workers,
                       TT_RDZV_WORKERS_LIMIT);
    if (s->max_regroups_per_hour > TT_RDZV_REGROUPS_LIMIT)
        return invalid(err, errlen, "max_regroups_per_hour: %u is above the limit %u",
                       s->max_regroups_per_hour, TT_RDZV_REGROUPS_LIMIT);
    if (s->heartbeat_timeout_ms <= s->heartbeat_ms)
        return invalid(err, errlen,
                       "heartbeat_timeout_ms: %u must exceed heartbeat_ms %u (a timeout "
                       "shorter than one interval evicts healthy workers)",
                       s->heartbeat_timeout_ms, s->heartbeat_ms);
    if (s->global_batch < s->max_workers)
        return invalid(err, errlen,
                       "global_batch: %u is below max_workers %u (some ranks would get no "
                       "examples)",
                       s->global_batch, s->max_workers);
    return TT_OK;
}

int tt_rdzv_settings_diff(const tt_rdzv_settings_t *job, const tt_rdzv_settings_t *join, char *msg,
                          size_t msglen) {
    for (size_t i = 0; i < N_FIELDS; i++) {
        uint32_t a = field_value(job, i), b = field_value(join, i);
        if (a != b) {
            if (msg && msglen)
                snprintf(msg, msglen, "%s: job has %u, join asked %u", settings_fields[i].name, a,
                         b);
            return 1;
        }
    }
    return 0;
}

int tt_rdzv_settings_equal(const tt_rdzv_settings_t *a, const tt_rdzv_settings_t *b) {
    return !tt_rdzv_settings_diff(a, b, NULL, 0);
}
