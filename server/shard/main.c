/* tether-shard: configuration, signals and the loop around the shard
 * daemon (and its HTTP endpoint, when --http asks for one). SIGTERM/SIGINT stop it (aggregations in
 * flight finish first; the shard keeps no durable state yet); SIGHUP reopens the log file. The line
 * "LISTENING <endpoint>" on stdout tells scripts which port was bound. */
#include "shard.h"
#include "tt_config.h"
#include "tt_daemon.h"
#include "tt_http.h"
#include "tt_log.h"
#include "tt_status.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

typedef struct shard_config {
    char listen[TT_CFG_STR_MAX];
    char advertise[TT_CFG_STR_MAX];
    char http[TT_CFG_STR_MAX];
    char coordinator[TT_CFG_STR_MAX];
    char id[TT_CFG_STR_MAX];
    char log_level[TT_CFG_STR_MAX];
    char log_file[TT_CFG_STR_MAX];
    char key_file[TT_CFG_STR_MAX];
    int64_t heartbeat_ms;
    int64_t park_timeout_ms;
    int64_t max_chunk_bytes;
    int64_t threads;
    int64_t io_threads;
    int print_config_md;
} shard_config_t;

#define CFG_OFF(f) offsetof(shard_config_t, f)

static const tt_config_entry_t shard_table[] = {
    {"listen", TT_CFG_STR, "tcp://*:7700", 0, 0, "data endpoint to bind (ZeroMQ ROUTER)", 0,
     CFG_OFF(listen)},
    {"advertise", TT_CFG_STR, "", 0, 0,
     "endpoint workers should connect to (empty: the bound one, wildcard as 127.0.0.1)", 0,
     CFG_OFF(advertise)},
    {"http", TT_CFG_STR, "", 0, 0,
     "HOST:PORT (or :PORT) of /healthz, /readyz and /metrics (Prometheus); empty: none", 0,
     CFG_OFF(http)},
    {"coordinator", TT_CFG_STR, "", 0, 0, "coordinator control endpoint (empty: run alone)", 0,
     CFG_OFF(coordinator)},
    {"id", TT_CFG_STR, "s0", 0, 0, "shard id (registration, logs, routing id)", 0, CFG_OFF(id)},
    {"log-level", TT_CFG_STR, "info", 0, 0, "error|warn|info|debug (TETHER_LOG also works)", 1,
     CFG_OFF(log_level)},
    {"log-file", TT_CFG_STR, "", 0, 0, "append logs to this file instead of stderr", 1,
     CFG_OFF(log_file)},
    {"key-file", TT_CFG_STR, "", 0, 0,
     "the cluster key (tetherctl keygen): only processes given the same file may connect; "
     "empty: no authentication, no encryption",
     0, CFG_OFF(key_file)},
    {"heartbeat-ms", TT_CFG_INT, "1000", 50, 600000, "heartbeat interval to the coordinator", 0,
     CFG_OFF(heartbeat_ms)},
    {"park-timeout-ms", TT_CFG_INT, "30000", 10, 3600000,
     "default deadline of a round and of a parked pull (a job's setup may override)", 0,
     CFG_OFF(park_timeout_ms)},
    {"max-chunk-bytes", TT_CFG_INT, "67108864", 4096, 1 << 30,
     "largest chunk this shard accepts (sets ZMQ_MAXMSGSIZE)", 0, CFG_OFF(max_chunk_bytes)},
    {"threads", TT_CFG_INT, "4", 1, 128, "aggregation threads (libuv pool size)", 0,
     CFG_OFF(threads)},
    {"io-threads", TT_CFG_INT, "2", 1, 64,
     "ZeroMQ I/O threads moving pushes and results (connections are spread over them)", 0,
     CFG_OFF(io_threads)},
    {"print-config-md", TT_CFG_BOOL, "false", 0, 0, "print this table as Markdown and exit", 0,
     CFG_OFF(print_config_md)},
};
#define SHARD_TABLE_N (sizeof(shard_table) / sizeof(shard_table[0]))

typedef struct app {
    uv_loop_t *loop;
    tt_shard_t *shard;
    tt_http_t *http;
    tt_daemon_signals_t sigs;
} app_t;

static void on_stop(void *ctx, int signum) {
    app_t *a = ctx;
    TT_INFO("shard", "signal %d: stopping", signum);
    tt_shard_close(a->shard);
    tt_http_close(&a->http);
}

static void on_hup(void *ctx) {
    (void)ctx;
    if (tt_log_reopen() == TT_OK)
        TT_INFO("shard", "SIGHUP: log file reopened");
}

static const char usage[] =
    "usage: tether-shard [--listen tcp://*:7700] [--coordinator tcp://HOST:7600] [--id s0]\n"
    "A tether shard server: holds chunks of jobs' flat parameter spaces, aggregates\n"
    "gradient pushes from workers and answers pulls (docs/ps.md).";

static int load(shard_config_t *cfg, int argc, char **argv) {
    char err[1024] = "";
    int first;
    int rc = tt_config_load(shard_table, SHARD_TABLE_N, cfg, argc, argv, usage, &first, err,
                            sizeof(err));
    if (rc == TT_CONFIG_HELP)
        return 0;
    if (rc != TT_CONFIG_RUN || first < argc) {
        fprintf(stderr, "tether-shard: %s\n", rc ? err : "unexpected argument");
        return 2;
    }
    if (cfg->print_config_md) {
        tt_config_write_markdown(shard_table, SHARD_TABLE_N, "tether-shard", stdout);
        return 0;
    }
    return tt_daemon_logging("tether-shard", cfg->log_level, cfg->log_file) == TT_OK ? -1 : 2;
}

int main(int argc, char **argv) {
    shard_config_t cfg;
    int rc = load(&cfg, argc, argv);
    if (rc >= 0)
        return rc;
    char threads[32];
    snprintf(threads, sizeof(threads), "%lld", (long long)cfg.threads);
    setenv("UV_THREADPOOL_SIZE", threads, 0); /* before the pool starts */
    tt_log_set_identity("shard", cfg.id);
    tt_config_log_nondefault(shard_table, SHARD_TABLE_N, &cfg);
    app_t a = {.loop = uv_default_loop()};
    tt_zauth_key_t key;
    char err[512] = "";
    if (tt_zauth_load(&key, cfg.key_file, err, sizeof(err)) != TT_OK) {
        fprintf(stderr, "tether-shard: %s\n", err);
        return 2;
    }
    tt_shard_opts_t o = {.key = &key,
                         .listen = cfg.listen,
                         .advertise = cfg.advertise,
                         .coordinator = cfg.coordinator,
                         .id = cfg.id,
                         .heartbeat_ms = (uint32_t)cfg.heartbeat_ms,
                         .park_timeout_ms = (uint32_t)cfg.park_timeout_ms,
                         .max_chunk_bytes = (uint64_t)cfg.max_chunk_bytes,
                         .io_threads = (uint32_t)cfg.io_threads};
    const char *die = getenv("TETHER_SHARD_TEST_DIE"); /* test knob: tt_shard_opts_t */
    if (die != NULL && strchr(die, ':') != NULL) {
        o.die_step = strtoull(die, NULL, 10);
        o.die_once = strchr(die, ':') + 1;
    }
    if (tt_shard_create(&a.shard, a.loop, &o, err, sizeof(err)) != TT_OK) {
        fprintf(stderr, "tether-shard: cannot start: %s\n", err);
        return 1;
    }
    if (cfg.http[0] != '\0' && tt_http_start(&a.http, a.loop, cfg.http, tt_shard_http, a.shard, err,
                                             sizeof(err)) != TT_OK) {
        fprintf(stderr, "tether-shard: cannot start: %s\n", err);
        tt_shard_close(a.shard);
        uv_run(a.loop, UV_RUN_DEFAULT);
        tt_shard_destroy(&a.shard);
        return 1;
    }
    printf("LISTENING %s\n", tt_shard_endpoint(a.shard));
    fflush(stdout);
    TT_INFO("shard", "shard %s listening on %s, security: %s", cfg.id, tt_shard_endpoint(a.shard),
            tt_zauth_describe(&key));
    memset(&key, 0, sizeof(key)); /* the shard keeps its own copy */
    tt_daemon_signals_start(&a.sigs, a.loop, on_stop, on_hup, &a);
    uv_run(a.loop, UV_RUN_DEFAULT);
    tt_shard_destroy(&a.shard);
    uv_loop_close(a.loop);
    TT_INFO("shard", "stopped");
    return 0;
}
