/* tether-coordinator: configuration, signals and the loop around coord
 * (and its HTTP endpoint, when --http asks for one).
 * SIGTERM/SIGINT persist the state and exit 0; SIGHUP reopens the log file
 * and re-reads the log level (from the config file and environment). */
#include "coord.h"
#include "tt_config.h"
#include "tt_daemon.h"
#include "tt_http.h"
#include "tt_zauth.h"
#include "tt_log.h"
#include "tt_status.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

typedef struct coord_config {
    char listen[TT_CFG_STR_MAX];
    char http[TT_CFG_STR_MAX];
    char state_dir[TT_CFG_STR_MAX];
    char id[TT_CFG_STR_MAX];
    char log_level[TT_CFG_STR_MAX];
    char log_file[TT_CFG_STR_MAX];
    char key_file[TT_CFG_STR_MAX];
    int64_t max_msg_bytes;
    int64_t max_regroups_per_hour;
    int64_t flap_cooldown_ms;
    int64_t flap_cooldown_max_ms;
    int64_t shard_timeout_ms;
    int64_t ps_fallback_steps;
    int print_config_md;
} coord_config_t;

#define CFG_OFF(f) offsetof(coord_config_t, f)

static const tt_config_entry_t coord_table[] = {
    {"listen", TT_CFG_STR, "tcp://*:7600", 0, 0, "control endpoint to bind (ZeroMQ ROUTER)", 0,
     CFG_OFF(listen)},
    {"http", TT_CFG_STR, "", 0, 0,
     "HOST:PORT (or :PORT) of /healthz, /readyz and /metrics (Prometheus); empty: none", 0,
     CFG_OFF(http)},
    {"state-dir", TT_CFG_STR, "", 0, 0,
     "directory of the durable state file (empty: state is not kept)", 0, CFG_OFF(state_dir)},
    {"id", TT_CFG_STR, "coordinator", 0, 0, "name used in logs and as sender id", 0, CFG_OFF(id)},
    {"log-level", TT_CFG_STR, "info", 0, 0, "error|warn|info|debug (TETHER_LOG also works)", 1,
     CFG_OFF(log_level)},
    {"log-file", TT_CFG_STR, "", 0, 0, "append logs to this file instead of stderr", 1,
     CFG_OFF(log_file)},
    {"key-file", TT_CFG_STR, "", 0, 0,
     "the cluster key (tetherctl keygen): only processes given the same file may connect; "
     "empty: no authentication, no encryption",
     0, CFG_OFF(key_file)},
    {"max-msg-bytes", TT_CFG_INT, "1048576", 1024, 1 << 30,
     "largest control frame accepted (ZMQ_MAXMSGSIZE)", 0, CFG_OFF(max_msg_bytes)},
    {"max-regroups-per-hour", TT_CFG_INT, "60", 0, TT_RDZV_REGROUPS_LIMIT,
     "regroups a job may make within an hour; one more fails it (0: no bound)", 0,
     CFG_OFF(max_regroups_per_hour)},
    {"flap-cooldown-ms", TT_CFG_INT, "1000", 0, TT_RDZV_MS_LIMIT,
     "a worker evicted k >= 2 times within an hour may re-join this * 2^(k-2) ms after its "
     "last eviction (0: no cool-down)",
     0, CFG_OFF(flap_cooldown_ms)},
    {"flap-cooldown-max-ms", TT_CFG_INT, "300000", 0, TT_RDZV_MS_LIMIT, "cap of that cool-down", 0,
     CFG_OFF(flap_cooldown_max_ms)},
    {"shard-timeout-ms", TT_CFG_INT, "5000", 100, TT_RDZV_MS_LIMIT,
     "a shard server silent this long is dead: its chunks are re-placed and the jobs using "
     "them regroup",
     0, CFG_OFF(shard_timeout_ms)},
    {"ps-fallback-steps", TT_CFG_INT, "8", 0, 1000000,
     "after a regroup of a job with shard servers, its first this many steps run on them "
     "while the new ring is made (0: never)",
     0, CFG_OFF(ps_fallback_steps)},
    {"print-config-md", TT_CFG_BOOL, "false", 0, 0, "print this table as Markdown and exit", 0,
     CFG_OFF(print_config_md)},
};
#define COORD_TABLE_N (sizeof(coord_table) / sizeof(coord_table[0]))

typedef struct app {
    uv_loop_t *loop;
    tt_coord_t *coord;
    tt_http_t *http;
    tt_daemon_signals_t sigs;
    int argc;
    char **argv;
} app_t;

static void on_stop(void *ctx, int signum) {
    app_t *a = ctx;
    TT_INFO("coord", "signal %d: saving state and stopping", signum);
    tt_coord_save_now(a->coord);
    tt_coord_close(a->coord);
    tt_http_close(&a->http);
}

static void on_hup(void *ctx) {
    app_t *a = ctx;
    coord_config_t cfg;
    char err[512] = "";
    int first;
    if (tt_config_load(coord_table, COORD_TABLE_N, &cfg, a->argc, a->argv, "", &first, err,
                       sizeof(err)) == TT_CONFIG_RUN &&
        tt_daemon_logging("tether-coordinator", cfg.log_level, cfg.log_file) == TT_OK)
        TT_INFO("coord", "SIGHUP: log file reopened, level %s", cfg.log_level);
    else
        TT_WARN("coord", "SIGHUP: configuration not reloaded: %s", err);
}

static const char usage[] =
    "usage: tether-coordinator [--listen tcp://*:7600] [--state-dir DIR] [options]\n"
    "The tether coordinator: rendezvous, membership, failure detection and durable\n"
    "job state for workers that link libtether.";

int main(int argc, char **argv) {
    coord_config_t cfg;
    char err[1024] = "";
    int first;
    int rc = tt_config_load(coord_table, COORD_TABLE_N, &cfg, argc, argv, usage, &first, err,
                            sizeof(err));
    if (rc == TT_CONFIG_HELP)
        return 0;
    if (rc != TT_CONFIG_RUN || first < argc) {
        fprintf(stderr, "tether-coordinator: %s\n", rc ? err : "unexpected argument");
        return 2;
    }
    if (cfg.print_config_md) {
        tt_config_write_markdown(coord_table, COORD_TABLE_N, "tether-coordinator", stdout);
        return 0;
    }
    if (tt_daemon_logging("tether-coordinator", cfg.log_level, cfg.log_file) != TT_OK)
        return 2;
    tt_log_set_identity("coordinator", cfg.id);
    tt_config_log_nondefault(coord_table, COORD_TABLE_N, &cfg);
    tt_daemon_raise_fd_limit();

    app_t a = {.loop = uv_default_loop(), .argc = argc, .argv = argv};
    tt_rdzv_guard_t guard = {.max_regroups_per_hour = (uint32_t)cfg.max_regroups_per_hour,
                             .flap_cooldown_ms = (uint32_t)cfg.flap_cooldown_ms,
                             .flap_cooldown_max_ms = (uint32_t)cfg.flap_cooldown_max_ms};
    tt_zauth_key_t key;
    if (tt_zauth_load(&key, cfg.key_file, err, sizeof(err)) != TT_OK) {
        fprintf(stderr, "tether-coordinator: %s\n", err);
        return 2;
    }
    tt_coord_opts_t o = {.key = &key,
                         .listen = cfg.listen,
                         .state_dir = cfg.state_dir,
                         .id = cfg.id,
                         .max_msg_bytes = cfg.max_msg_bytes,
                         .guard = &guard,
                         .shard_timeout_ms = (uint32_t)cfg.shard_timeout_ms,
                         .ps_fallback_steps = (uint32_t)cfg.ps_fallback_steps};
    rc = tt_coord_create(&a.coord, a.loop, &o, err, sizeof(err));
    if (rc != TT_OK) {
        TT_ERROR("coord", "cannot start: %s", err);
        fprintf(stderr, "tether-coordinator: cannot start: %s\n", err);
        return 1;
    }
    TT_INFO("coord", "listening on %s, state in %s, security: %s", tt_coord_endpoint(a.coord),
            cfg.state_dir[0] ? cfg.state_dir : "(none)", tt_zauth_describe(&key));
    memset(&key, 0, sizeof(key)); /* the coordinator keeps its own copy */
    if (cfg.http[0] != '\0' && tt_http_start(&a.http, a.loop, cfg.http, tt_coord_http, a.coord, err,
                                             sizeof(err)) != TT_OK) {
        TT_ERROR("coord", "cannot start: %s", err);
        fprintf(stderr, "tether-coordinator: cannot start: %s\n", err);
        tt_coord_close(a.coord);
        uv_run(a.loop, UV_RUN_DEFAULT);
        tt_coord_destroy(&a.coord);
        return 1;
    }
    tt_daemon_signals_start(&a.sigs, a.loop, on_stop, on_hup, &a);
    uv_run(a.loop, UV_RUN_DEFAULT);
    tt_coord_destroy(&a.coord);
    uv_loop_close(a.loop);
    TT_INFO("coord", "stopped");
    return 0;
}
