/* tt_daemon: the plumbing every tether daemon's main() shares: turning
 * the log-level/log-file settings into logger state, the SIGTERM/SIGINT/
 * SIGHUP watchers on the loop, and raising the open-file limit. It owns
 * no daemon logic: the callbacks say what stop and reload mean.
 * Thread safety: main thread / loop thread only. */
#ifndef TT_DAEMON_H
#define TT_DAEMON_H

#include <uv.h>

/* Applies a level name (error|warn|info|debug; TETHER_LOG overrides) and a
 * log file ("" = stderr). TT_EINVAL with a message on stderr naming `prog`
 * when the level is not understood. */
int tt_daemon_logging(const char *prog, const char *level, const char *file);

/* Raises the soft RLIMIT_NOFILE to the hard limit (one fd per peer). */
void tt_daemon_raise_fd_limit(void);

typedef struct tt_daemon_signals {
    uv_signal_t term, intr, hup;
    void (*on_stop)(void *ctx, int signum);
    void (*on_hup)(void *ctx);
    void *ctx;
} tt_daemon_signals_t;

/* Watches SIGTERM and SIGINT (on_stop, after which the watchers close
 * themselves so the loop can end) and SIGHUP (on_hup). Ignores SIGPIPE. */
void tt_daemon_signals_start(tt_daemon_signals_t *s, uv_loop_t *loop,
                             void (*on_stop)(void *ctx, int signum), void (*on_hup)(void *ctx),
                             void *ctx);

#endif
