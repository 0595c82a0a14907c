/* tt_log: NCCL-style leveled logging. Lines look like
 *   2026-11-29T23:10:00.123Z INFO coordinator[c0] gen=3 coord rdzv.c:120 msg
 * The logger's settings are the one piece of process-wide mutable state
 * tether allows: level, subsystem filter, role, id, current generation, the
 * output file and an optional sink callback (the worker library routes its
 * lines to the host program that way and never prints to stdout).
 * Suppressed levels cost one comparison: the macro checks before it formats.
 * Thread safety: every function may be called from any thread. */
#ifndef TT_LOG_H
#define TT_LOG_H

#include <stdarg.h>
#include <stdint.h>

typedef enum {
    TT_LOG_ERROR = 0,
    TT_LOG_WARN = 1,
    TT_LOG_INFO = 2,
    TT_LOG_DEBUG = 3,
} tt_log_level_t;

/* Receives each formatted line (without trailing newline). */
typedef void (*tt_log_sink_fn)(void *ctx, int level, const char *line);

/* Set from TETHER_LOG (error|warn|info|debug) and TETHER_LOG_SUBSYS
 * (comma-separated list, or "all"); unknown values keep the defaults
 * (warn, all). Returns 0, or TT_EINVAL when a value was not understood. */
int tt_log_init_from_env(void);

void tt_log_set_level(tt_log_level_t level);
int tt_log_parse_level(const char *s, tt_log_level_t *out);
int tt_log_set_subsys(const char *csv);
void tt_log_set_identity(const char *role, const char *id);
void tt_log_set_generation(uint64_t gen);
void tt_log_set_sink(tt_log_sink_fn fn, void *ctx);

/* Send lines to `path` (append) instead of stderr; NULL goes back to
 * stderr. Called again with the same path it reopens the file (SIGHUP). */
int tt_log_set_file(const char *path);
int tt_log_reopen(void);

int tt_log_enabled(int level, const char *subsys);
void tt_log_write(int level, const char *subsys, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

#define TT_LOG(level, subsys, ...)                                                                 \
    do {                                                                                           \
        if (tt_log_enabled((level), (subsys)))                                                     \
            tt_log_write((level), (subsys), __FILE__, __LINE__, __VA_ARGS__);                      \
    } while (0)

#define TT_ERROR(subsys, ...) TT_LOG(TT_LOG_ERROR, subsys, __VA_ARGS__)
#define TT_WARN(subsys, ...)  TT_LOG(TT_LOG_WARN, subsys, __VA_ARGS__)
#define TT_INFO(subsys, ...)  TT_LOG(TT_LOG_INFO, subsys, __VA_ARGS__)
#define TT_DEBUG(subsys, ...) TT_LOG(TT_LOG_DEBUG, subsys, __VA_ARGS__)

#endif
