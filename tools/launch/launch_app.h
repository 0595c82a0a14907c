/* launch_app: the supervisor behind tether-launch. On one libuv loop it
 * starts the coordinator, waits until its control port accepts a TCP
 * connection, starts the shard servers and waits for each the same way,
 * then starts the workers; it restarts dead workers within the restart
 * budget (launch_policy) and dead daemons with backoff on the same port
 * and state directory; and on SIGINT/SIGTERM, on a hopeless job or when
 * every worker is done it stops the workers first, then the daemons, with
 * SIGTERM and after the grace period SIGKILL. It owns every child process
 * and handle it creates, and nothing it was given: the configuration is
 * parsed, the executables resolved and the state directory created by the
 * caller (tether-launch.c). Its own messages are lines prefixed "[launch] "
 * on stderr. Thread safety: call from one thread; it runs its own loop. */
#ifndef TT_LAUNCH_APP_H
#define TT_LAUNCH_APP_H

#include "tt_config.h"

#include <stdint.h>

typedef struct tt_launch_cfg {
    int64_t workers;
    int64_t shards;
    int64_t max_restarts;
    int64_t min_workers;     /* 0: workers */
    int64_t no_restart_code; /* an exit code never restarted; 0: none */
    int64_t grace_ms;
    int64_t ready_timeout_ms;
    int64_t coordinator_port; /* 0: a free port */
    int64_t http_port;        /* coordinator's /metrics; 0: no HTTP endpoints */
    char job[TT_CFG_STR_MAX];
    char state_dir[TT_CFG_STR_MAX];
    char coordinator_bin[TT_CFG_STR_MAX];
    char shard_bin[TT_CFG_STR_MAX];
    char daemon_log_level[TT_CFG_STR_MAX];
    char bind[TT_CFG_STR_MAX];     /* "cores" | "none" */
    char key_file[TT_CFG_STR_MAX]; /* "" none, "auto", or a key file */
} tt_launch_cfg_t;

typedef struct tt_launch_app_opts {
    const tt_launch_cfg_t *cfg;
    const char *self_exe;   /* for the trampoline (launch_proc) */
    const char *coord_exe;  /* resolved tether-coordinator */
    const char *shard_exe;  /* resolved tether-shard; NULL when shards == 0 */
    char *const *prog_argv; /* resolved program path first; NULL-terminated */
    const char *state_root; /* existing directory for the daemons' state */
    const char *key_path;   /* the cluster key every child gets; "" or NULL: none */
    int tty;                /* stdout is a terminal (progress bars) */
} tt_launch_app_opts_t;

/* Runs the whole job and returns the launcher's exit status: 0 when every
 * worker exited 0; the first permanent worker failure's code (exit code,
 * or 128 + signal); 128 + signal when stopped by SIGINT/SIGTERM before the
 * workers finished; 1 when a daemon could not be started or kept dying.
 * The last two lines on stderr say why and summarise the run. */
int tt_launch_app_run(const tt_launch_app_opts_t *opts);

#endif
