/* tt_daemon: shared main() plumbing of tether-coordinator and tether-shard. */
#include "tt_daemon.h"
#include "tt_log.h"
#include "tt_status.h"

#include <signal.h>
#include <stdio.h>
#include <sys/resource.h>

int tt_daemon_logging(const char *prog, const char *level, const char *file) {
    tt_log_level_t lv;
    if (tt_log_parse_level(level, &lv) != TT_OK) {
        fprintf(stderr, "%s: log-level '%s' is not error|warn|info|debug\n", prog, level);
        return TT_EINVAL;
    }
    tt_log_set_level(lv);
    tt_log_init_from_env();
    return tt_log_set_file(file[0] ? file : NULL);
}

void tt_daemon_raise_fd_limit(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

static void on_stop(uv_signal_t *h, int signum) {
    tt_daemon_signals_t *s = h->data;
    s->on_stop(s->ctx, signum);
    uv_close((uv_handle_t *)&s->term, NULL);
    uv_close((uv_handle_t *)&s->intr, NULL);
    uv_close((uv_handle_t *)&s->hup, NULL);
}

static void on_hup(uv_signal_t *h, int signum) {
    tt_daemon_signals_t *s = h->data;
    (void)signum;
    s->on_hup(s->ctx);
}

void tt_daemon_signals_start(tt_daemon_signals_t *s, uv_loop_t *loop,
                             void (*stop)(void *ctx, int signum), void (*hup)(void *ctx),
                             void *ctx) {
    uv_signal_t *hs[3] = {&s->term, &s->intr, &s->hup};
    int nums[3] = {SIGTERM, SIGINT, SIGHUP};
    s->on_stop = stop;
    s->on_hup = hup;
    s->ctx = ctx;
    signal(SIGPIPE, SIG_IGN);
    for (int i = 0; i < 3; i++) {
        uv_signal_init(loop, hs[i]);
        hs[i]->data = s;
        uv_signal_start(hs[i], i == 2 ? on_hup : on_stop, nums[i]);
    }
}
