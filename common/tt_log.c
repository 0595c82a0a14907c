/* tt_log: formatting and routing of log lines. The settings below are
 * process-wide by design (see tt_log.h); they are atomics or guarded by one
 * mutex so that the worker library's threads and a daemon's loop may log
 * concurrently. */
#include "tt_log.h"
#include "tt_status.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>

#define TT_LOG_MAX_SUBSYS 16

static struct {
    atomic_int level;
    atomic_ullong generation;
    pthread_mutex_t mu;
    char role[32];
    char id[64];
    char subsys[TT_LOG_MAX_SUBSYS][16];
    int nsubsys; /* 0: all */
    tt_log_sink_fn sink;
    void *sink_ctx;
    FILE *file;
    char path[512];
} g_log = {
    .level = TT_LOG_WARN,
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .role = "tether",
};

static const char *const level_names[] = {"ERROR", "WARN", "INFO", "DEBUG"};

int tt_log_parse_level(const char *s, tt_log_level_t *out) {
    static const char *const names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(s, names[i]) == 0) {
            *out = (tt_log_level_t)i;
            return TT_OK;
        }
    }
    return TT_EINVAL;
}

void tt_log_set_level(tt_log_level_t level) {
    atomic_store(&g_log.level, level);
}

int tt_log_set_subsys(const char *csv) {
    pthread_mutex_lock(&g_log.mu);
    g_log.nsubsys = 0;
    if (csv != NULL && strcasecmp(csv, "all") != 0 && csv[0] != '\0') {
        const char *p = csv;
        while (*p != '\0' && g_log.nsubsys < TT_LOG_MAX_SUBSYS) {
            size_t n = strcspn(p, ",");
            if (n > 0 && n < sizeof(g_log.subsys[0])) {
                memcpy(g_log.subsys[g_log.nsubsys], p, n);
                g_log.subsys[g_log.nsubsys][n] = '\0';
                g_log.nsubsys++;
            }
            p += n;
            if (*p == ',')
                p++;
        }
    }
    pthread_mutex_unlock(&g_log.mu);
    return TT_OK;
}

int tt_log_init_from_env(void) {
    int rc = TT_OK;
    const char *lv = getenv("TETHER_LOG");
    if (lv != NULL && lv[0] != '\0') {
        tt_log_level_t level;
        if (tt_log_parse_level(lv, &level) == TT_OK)
            tt_log_set_level(level);
        else
            rc = TT_EINVAL;
    }
    const char *ss = getenv("TETHER_LOG_SUBSYS");
    if (ss != NULL)
        tt_log_set_subsys(ss);
    return rc;
}

void tt_log_set_identity(const char *role, const char *id) {
    pthread_mutex_lock(&g_log.mu);
    snprintf(g_log.role, sizeof(g_log.role), "%s", role ? role : "tether");
    snprintf(g_log.id, sizeof(g_log.id), "%s", id ? id : "");
    pthread_mutex_unlock(&g_log.mu);
}

void tt_log_set_generation(uint64_t gen) {
    atomic_store(&g_log.generation, gen);
}

void tt_log_set_sink(tt_log_sink_fn fn, void *ctx) {
    pthread_mutex_lock(&g_log.mu);
    g_log.sink = fn;
    g_log.sink_ctx = ctx;
    pthread_mutex_unlock(&g_log.mu);
}

static int open_locked(void) {
    if (g_log.file != NULL)
        fclose(g_log.file);
    g_log.file = NULL;
    if (g_log.path[0] == '\0')
        return TT_OK;
    g_log.file = fopen(g_log.path, "a");
    if (g_log.file == NULL)
        return TT_ESYS;
    setvbuf(g_log.file, NULL, _IOLBF, 0);
    return TT_OK;
}

int tt_log_set_file(const char *path) {
    pthread_mutex_lock(&g_log.mu);
    snprintf(g_log.path, sizeof(g_log.path), "%s", path ? path : "");
    int rc = open_locked();
    pthread_mutex_unlock(&g_log.mu);
    return rc;
}

int tt_log_reopen(void) {
    pthread_mutex_lock(&g_log.mu);
    int rc = open_locked();
    pthread_mutex_unlock(&g_log.mu);
    return rc;
}

int tt_log_enabled(int level, const char *subsys) {
    if (level > atomic_load_explicit(&g_log.level, memory_order_relaxed))
        return 0;
    if (level <= TT_LOG_WARN || subsys == NULL)
        return 1;
    pthread_mutex_lock(&g_log.mu);
    int ok = g_log.nsubsys == 0;
    for (int i = 0; i < g_log.nsubsys && !ok; i++)
        ok = strcmp(g_log.subsys[i], subsys) == 0;
    pthread_mutex_unlock(&g_log.mu);
    return ok;
}

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* A message longer than the stack buffer (a flight recorder's dump, a long
 * path in an error) is formatted again on the heap: a log line that loses
 * its end loses the newest, most telling part. Returns msg or a malloc'd
 * copy the caller frees; on out of memory, the truncated stack text. */
static char *format_msg(char *msg, size_t cap, const char *fmt, va_list ap) {
    va_list again;
    va_copy(again, ap);
    int need = vsnprintf(msg, cap, fmt, ap);
    char *big = need >= 0 && (size_t)need >= cap ? malloc((size_t)need + 1) : NULL;
    if (big != NULL)
        vsnprintf(big, (size_t)need + 1, fmt, again);
    va_end(again);
    return big != NULL ? big : msg;
}

void tt_log_write(int level, const char *subsys, const char *file, int line, const char *fmt, ...) {
    char stack_msg[1024];
    va_list ap;
    va_start(ap, fmt);
    char *msg = format_msg(stack_msg, sizeof(stack_msg), fmt, ap);
    va_end(ap);
    size_t mlen = strlen(msg);
    while (mlen > 0 && msg[mlen - 1] == '\n') /* a text's last newline: the line's end is ours */
        msg[--mlen] = '\0';

    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    char ts[32];
    strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);

    if (level < 0 || level > TT_LOG_DEBUG)
        level = TT_LOG_ERROR;
    char head[256];
    pthread_mutex_lock(&g_log.mu);
    snprintf(head, sizeof(head), "%s.%03dZ %s %s[%s] gen=%llu %s %s:%d ", ts,
             (int)(tv.tv_usec / 1000), level_names[level], g_log.role, g_log.id,
             (unsigned long long)atomic_load(&g_log.generation), subsys ? subsys : "-",
             base_name(file), line);
    size_t hlen = strlen(head);
    char stack_out[1400];
    size_t len = hlen + mlen + 1;
    char *out = len <= sizeof(stack_out) ? NULL : malloc(len);
    if (out == NULL) { /* fits, or out of memory: then the line cut short, not none */
        out = stack_out;
        len = len < sizeof(stack_out) ? len : sizeof(stack_out);
    }
    snprintf(out, len, "%s%s", head, msg);
    if (g_log.sink != NULL) {
        g_log.sink(g_log.sink_ctx, level, out);
    } else {
        FILE *f = g_log.file ? g_log.file : stderr;
        fprintf(f, "%s\n", out);
        fflush(f);
    }
    pthread_mutex_unlock(&g_log.mu);
    if (out != stack_out)
        free(out);
    if (msg != stack_msg)
        free(msg);
}
