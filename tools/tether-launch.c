/* tether-launch: the local launcher (the "torchrun --standalone" of
 * tether). It starts a coordinator, M shard servers and N workers running
 * PROGRAM on 127.0.0.1, prefixes every line they print with who printed
 * it, restarts what dies and stops everything on SIGINT/SIGTERM, leaving
 * no process behind. This file owns the command line (one tt_config table:
 * flags, TETHER_* variables, --help), finding the executables and the
 * state directory; tools/launch/launch_app.c owns the supervision.
 * Executables: tether-coordinator and tether-shard are looked up, in this
 * order, at --coordinator-bin/--shard-bin (or TETHER_COORDINATOR_BIN /
 * TETHER_SHARD_BIN), in the build tree relative to this executable
 * (../server/coordinator, ../server/shard), next to it (an installed
 * bin/), then on PATH. PROGRAM is a path when it contains '/', else it is
 * looked up on PATH; "tether-train" (and any other tether program) is
 * first looked up in the build tree (../worker/train) and next to us.
 * TETHER_CONFIG names the launcher's own config file and is removed from
 * the children's environment (their tables would refuse its keys).
 * Internal: when started as "tether-launch --tether-launch-exec PPID PROGRAM
 * ARGS..." it is the trampoline of launch_proc.h, not the launcher. */
#include "launch/launch_app.h"
#include "launch/launch_env.h"
#include "launch/launch_proc.h"
#include "tt_config.h"
#include "tt_fsutil.h"
#include "tt_log.h"
#include "tt_status.h"
#include "tt_zauth.h"

#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#define CFG_OFF(f) offsetof(tt_launch_cfg_t, f)

static const tt_config_entry_t launch_table[] = {
    {"workers", TT_CFG_INT, "1", 1, 1024, "number of worker processes (N)", 0, CFG_OFF(workers)},
    {"shards", TT_CFG_INT, "0", 0, 256, "number of shard servers (M)", 0, CFG_OFF(shards)},
    {"job", TT_CFG_STR, "launch", 0, 0, "job id the workers join", 0, CFG_OFF(job)},
    {"min-workers", TT_CFG_INT, "0", 0, 1024,
     "smallest world the job may shrink to (0: N, no shrinking)", 0, CFG_OFF(min_workers)},
    {"max-restarts", TT_CFG_INT, "3", 0, 1000000,
     "worker restarts allowed in total, all workers together", 0, CFG_OFF(max_restarts)},
    {"no-restart-code", TT_CFG_INT, "2", 0, 255,
     "a worker or daemon that exits with this code fails for good, unrestarted: 2 is the usage "
     "error of getopt, argparse and tether's programs, which a restart would repeat (0: restart "
     "any failure)",
     0, CFG_OFF(no_restart_code)},
    {"state-dir", TT_CFG_STR, "", 0, 0,
     "daemons' state under DIR/coordinator, DIR/shard-K, kept (empty: a temp dir, removed)", 0,
     CFG_OFF(state_dir)},
    {"grace-ms", TT_CFG_INT, "10000", 0, 3600000,
     "after SIGTERM to the children, wait this long before SIGKILL", 0, CFG_OFF(grace_ms)},
    {"ready-timeout-ms", TT_CFG_INT, "30000", 100, 3600000,
     "how long a daemon may take to accept connections", 0, CFG_OFF(ready_timeout_ms)},
    {"coordinator-port", TT_CFG_INT, "0", 0, 65535, "coordinator port (0: a free port)", 0,
     CFG_OFF(coordinator_port)},
    {"http-port", TT_CFG_INT, "0", 0, 65535,
     "serve the coordinator's /healthz, /readyz and /metrics on 127.0.0.1:PORT, and each "
     "shard's on a free port (in its 'started' line); 0: none",
     0, CFG_OFF(http_port)},
    {"coordinator-bin", TT_CFG_STR, "", 0, 0, "tether-coordinator executable (empty: search)", 0,
     CFG_OFF(coordinator_bin)},
    {"shard-bin", TT_CFG_STR, "", 0, 0, "tether-shard executable (empty: search)", 0,
     CFG_OFF(shard_bin)},
    {"daemon-log-level", TT_CFG_STR, "warn", 0, 0,
     "--log-level passed to the coordinator and the shards", 0, CFG_OFF(daemon_log_level)},
    {"bind", TT_CFG_STR, "cores", 0, 0,
     "cores: bind worker I to its block of the CPUs this launcher may use (workers share a "
     "CPU when there are more workers than CPUs); none: leave placement to the kernel",
     0, CFG_OFF(bind)},
    {"key-file", TT_CFG_STR, "", 0, 0,
     "the cluster key every daemon and worker gets (TETHER_KEY_FILE): only they may connect; "
     "auto: a new key in the state dir; empty: none",
     0, CFG_OFF(key_file)},
};
#define LAUNCH_NCFG (sizeof(launch_table) / sizeof(launch_table[0]))

static const char usage[] =
    "usage: tether-launch --workers N [--shards M] [options] -- PROGRAM [ARGS...]\n"
    "Starts a tether coordinator, M shard servers and N workers running PROGRAM on\n"
    "127.0.0.1, prefixes their output ([coord], [shard K], [worker I]), restarts what\n"
    "dies and exits with the job's status. Each worker gets TETHER_COORDINATOR,\n"
    "TETHER_JOB, TETHER_WORKER_ID=worker-I, TETHER_ENDPOINT (a free port),\n"
    "TETHER_MIN_WORKERS, TETHER_MAX_WORKERS=N, TETHER_LOCAL_RANK=I and\n"
    "TETHER_LAUNCH_RESTART (0, then 1, 2, ... after restarts), and is bound to its\n"
    "share of the CPUs (--bind). SIGINT/SIGTERM stop the workers, then the daemons\n"
    "(SIGTERM, SIGKILL after --grace-ms).";

/* Build-tree and installed locations of tether programs, relative to us. */
static const char *const rel_dirs[] = {"../server/coordinator", "../server/shard",
                                       "../worker/train", "."};
#define N_REL_DIRS (sizeof(rel_dirs) / sizeof(rel_dirs[0]))

static int find_tool(char *out, size_t n, const char *override, const char *name,
                     const char *self_dir) {
    char dirs[N_REL_DIRS][PATH_MAX];
    const char *dp[N_REL_DIRS];
    for (size_t i = 0; i < N_REL_DIRS; i++) {
        snprintf(dirs[i], sizeof(dirs[i]), "%s/%s", self_dir, rel_dirs[i]);
        dp[i] = dirs[i];
    }
    if (override != NULL && override[0] != '\0')
        return tt_launch_find_exe(out, n, override, NULL, 0, getenv("PATH"));
    /* A tether program is ours: prefer the build tree's, then PATH. */
    int ours = strncmp(name, "tether-", 7) == 0;
    return tt_launch_find_exe(out, n, name, ours ? dp : NULL, ours ? N_REL_DIRS : 0,
                              getenv("PATH"));
}

typedef struct paths {
    char self[PATH_MAX], self_dir[PATH_MAX];
    char coord[PATH_MAX], shard[PATH_MAX], prog[PATH_MAX];
    char state[PATH_MAX];
    char key[PATH_MAX]; /* the cluster key file; "": none */
    int temp_state;
} paths_t;

static int resolve(paths_t *p, const tt_launch_cfg_t *cfg, const char *prog) {
    size_t len = sizeof(p->self);
    if (uv_exepath(p->self, &len) != 0) {
        fprintf(stderr, "tether-launch: cannot find my own executable\n");
        return TT_ESYS;
    }
    tt_launch_dirname(p->self_dir, sizeof(p->self_dir), p->self);
    const char *what = "tether-coordinator";
    int rc = find_tool(p->coord, sizeof(p->coord), cfg->coordinator_bin, what, p->self_dir);
    if (rc == TT_OK && cfg->shards > 0) {
        what = "tether-shard";
        rc = find_tool(p->shard, sizeof(p->shard), cfg->shard_bin, what, p->self_dir);
    }
    if (rc == TT_OK) {
        what = prog;
        rc = find_tool(p->prog, sizeof(p->prog), NULL, prog, p->self_dir);
    }
    if (rc != TT_OK)
        fprintf(stderr,
                "tether-launch: cannot find an executable %s (looked in the build tree next to "
                "%s and on PATH; see --coordinator-bin/--shard-bin)\n",
                what, p->self);
    return rc;
}

/* The key file the children get, made in the state dir for "auto" (kept
 * with a kept --state-dir, so a second launch reuses it), and read once
 * here so that a bad one stops the launch before any child starts. */
static int resolve_key(paths_t *p, const tt_launch_cfg_t *cfg) {
    char err[768] = "";
    if (cfg->key_file[0] == '\0')
        return TT_OK;
    if (strcmp(cfg->key_file, "auto") == 0) {
        snprintf(p->key, sizeof(p->key), "%s/cluster.key", p->state);
        if (access(p->key, F_OK) != 0 && tt_zauth_generate(p->key, 0, err, sizeof(err)) != TT_OK) {
            fprintf(stderr, "tether-launch: %s\n", err);
            return TT_EIO;
        }
    } else {
        snprintf(p->key, sizeof(p->key), "%s", cfg->key_file);
    }
    tt_zauth_key_t k;
    if (tt_zauth_load(&k, p->key, err, sizeof(err)) != TT_OK) {
        fprintf(stderr, "tether-launch: %s\n", err);
        return TT_EINVAL;
    }
    fprintf(stderr, "[launch] cluster key %s (security: %s): tetherctl needs --key-file %s\n",
            p->key, tt_zauth_describe(&k), p->key);
    memset(&k, 0, sizeof(k));
    return TT_OK;
}

static int make_state_dir(paths_t *p, const tt_launch_cfg_t *cfg) {
    char err[512] = "";
    if (cfg->state_dir[0] != '\0') {
        snprintf(p->state, sizeof(p->state), "%s", cfg->state_dir);
        if (tt_fs_mkdirs(p->state, err, sizeof(err)) == TT_OK)
            return TT_OK;
        fprintf(stderr, "tether-launch: state dir %s: %s\n", p->state, err);
        return TT_EIO;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(p->state, sizeof(p->state), "%s/tether-launch-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (mkdtemp(p->state) == NULL) {
        perror("tether-launch: cannot create a temporary state dir");
        return TT_EIO;
    }
    p->temp_state = 1;
    return TT_OK;
}

/* Parses argv; returns -1 to go on, else the exit status. */
static int load_config(tt_launch_cfg_t *cfg, int argc, char **argv, int *first) {
    char err[1024] = "";
    int rc =
        tt_config_load(launch_table, LAUNCH_NCFG, cfg, argc, argv, usage, first, err, sizeof(err));
    if (rc == TT_CONFIG_HELP)
        return 0;
    if (rc != TT_CONFIG_RUN) {
        fprintf(stderr, "tether-launch: %s\n", err);
        return 2;
    }
    if (*first >= argc) {
        fprintf(stderr, "tether-launch: no PROGRAM given (... -- PROGRAM ARGS; see --help)\n");
        return 2;
    }
    if (strcmp(cfg->bind, "cores") != 0 && strcmp(cfg->bind, "none") != 0) {
        fprintf(stderr, "tether-launch: --bind '%s' is neither cores nor none\n", cfg->bind);
        return 2;
    }
    tt_log_level_t level;
    if (tt_log_parse_level(cfg->daemon_log_level, &level) != 0) {
        /* Refused here: the daemons would refuse it at every restart. */
        fprintf(stderr, "tether-launch: --daemon-log-level '%s' is not error|warn|info|debug\n",
                cfg->daemon_log_level);
        return 2;
    }
    if (cfg->min_workers > cfg->workers) {
        fprintf(stderr, "tether-launch: --min-workers %lld is more than --workers %lld\n",
                (long long)cfg->min_workers, (long long)cfg->workers);
        return 2;
    }
    return -1;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], TT_LAUNCH_TRAMPOLINE_ARG) == 0)
        return tt_launch_proc_trampoline(argc, argv);
    tt_launch_cfg_t cfg;
    int first = argc;
    int rc = load_config(&cfg, argc, argv, &first);
    if (rc >= 0)
        return rc;
    static paths_t p;
    if (resolve(&p, &cfg, argv[first]) != TT_OK)
        return 2;
    if (make_state_dir(&p, &cfg) != TT_OK)
        return 1;
    if (resolve_key(&p, &cfg) != TT_OK) {
        if (p.temp_state)
            tt_launch_rmtree(p.state);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    argv[first] = p.prog;
    tt_launch_app_opts_t o = {.cfg = &cfg,
                              .self_exe = p.self,
                              .coord_exe = p.coord,
                              .shard_exe = cfg.shards > 0 ? p.shard : NULL,
                              .prog_argv = &argv[first],
                              .state_root = p.state,
                              .key_path = p.key,
                              .tty = isatty(STDOUT_FILENO)};
    rc = tt_launch_app_run(&o);
    if (p.temp_state && tt_launch_rmtree(p.state) != TT_OK)
        fprintf(stderr, "[launch] could not remove the temporary state dir %s\n", p.state);
    return rc;
}
