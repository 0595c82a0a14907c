/* launch_app: phases, restarts and orderly shutdown of tether-launch.
 * Children are one array: [0] the coordinator, [1..M] the shards, then the
 * workers. A daemon keeps its port and state directory across restarts so
 * clients reconnect to the same endpoint and it reloads its own state; a
 * worker keeps its id, local rank and CPUs but gets a fresh ring port,
 * because its old port may still be in TIME_WAIT and its successor is a
 * new incarnation to the coordinator anyway. Workers are bound to their
 * share of the launcher's CPUs (launch_policy) unless --bind none; the
 * daemons are not bound: they idle while the ring carries the steps. */
#include "launch_app.h"
#include "launch_env.h"
#include "launch_policy.h"
#include "launch_proc.h"
#include "tt_clock.h"
#include "tt_status.h"

#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#define APP_HOST           "127.0.0.1"
#define APP_PROBE_RETRY_MS 50

typedef enum { KIND_COORD, KIND_SHARD, KIND_WORKER } kind_t;
typedef enum { CH_IDLE, CH_RUNNING, CH_DONE } ch_state_t;

typedef struct app app_t;

typedef struct child {
    app_t *app;
    kind_t kind;
    int index; /* shard id or local rank */
    char label[32];
    char prefix[40];
    tt_launch_proc_t *proc;
    ch_state_t state;
    int port;       /* daemons: listen port; workers: ring port of this run */
    int port_claim; /* tt_launch_free_port's claim on it, -1: none */
    int http_port;  /* daemons with --http-port: their HTTP port; 0: none */
    int http_claim; /* its claim, -1: none */
    int restarts;
    tt_launch_backoff_t backoff;
    uv_timer_t restart_timer;
    char state_dir[PATH_MAX];
    char cpus[1024]; /* workers: "0-3" when bound, else "" */
    int ncpus;       /* workers: how many CPUs cpus names; 0 when unbound */
} child_t;

struct app {
    uv_loop_t loop;
    const tt_launch_app_opts_t *o;
    const tt_launch_cfg_t *cfg;
    child_t *ch;
    int nch, first_worker;
    tt_launch_policy_t policy;
    uv_signal_t sigs[2];
    uv_timer_t grace, probe_timer;
    uv_tcp_t probe;
    uv_connect_t probe_req;
    int probe_target, probe_ok;
    uint64_t probe_deadline, start_ms;
    int stopping, daemons_signalled, stop_signal, finished;
    int interrupted; /* a signal came before every worker was done */
    int loop_ready;
    int daemon_restarts;
    char fatal[512];
    char coord_endpoint[64];
    int *cpus, ncpus; /* the CPUs workers are bound within (--bind cores) */
};

/* ---- output ---- */

static void emit_to(FILE *f, const char *data, size_t len) {
    fwrite(data, 1, len, f);
    fflush(f);
}

static void emit_out(void *ctx, const char *data, size_t len) {
    (void)ctx;
    emit_to(stdout, data, len);
}

static void emit_err(void *ctx, const char *data, size_t len) {
    (void)ctx;
    emit_to(stderr, data, len);
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    size_t len = (size_t)n < sizeof(line) - 1 ? (size_t)n : sizeof(line) - 2;
    line[len++] = '\n';
    fputs("[launch] ", stderr);
    emit_to(stderr, line, len);
}

/* ---- counting ---- */

static int running(const app_t *a, int from, int to) {
    int n = 0;
    for (int i = from; i < to; i++)
        n += a->ch[i].state == CH_RUNNING;
    return n;
}

static void begin_stop(app_t *a);
static void progress_stop(app_t *a);
static void spawn_child(child_t *c);
static void start_probe(app_t *a, int target);

/* ---- argv and environment of each kind ---- */

/* The launcher's own config file (TETHER_CONFIG) is not its children's:
 * their tables would refuse its keys. */
#define APP_UNSET "TETHER_CONFIG"

/* "TETHER_KEY_FILE=PATH" into buf when the cluster has a key: the
 * daemons' tables and the workers' library both read it. 0 when none. */
static int key_env(const app_t *a, char *buf, size_t len) {
    const char *k = a->o->key_path;
    if (k == NULL || k[0] == '\0')
        return 0;
    snprintf(buf, len, "TETHER_KEY_FILE=%s", k);
    return 1;
}

static int worker_env(child_t *c, char ***env) {
    const tt_launch_cfg_t *cfg = c->app->cfg;
    char s[12][TT_CFG_STR_MAX + 64];
    int64_t minw = cfg->min_workers > 0 ? cfg->min_workers : cfg->workers;
    snprintf(s[0], sizeof(s[0]), "TETHER_COORDINATOR=%s", c->app->coord_endpoint);
    snprintf(s[1], sizeof(s[1]), "TETHER_JOB=%s", cfg->job);
    snprintf(s[2], sizeof(s[2]), "TETHER_WORKER_ID=worker-%d", c->index);
    snprintf(s[3], sizeof(s[3]), "TETHER_ENDPOINT=tcp://%s:%d", APP_HOST, c->port);
    snprintf(s[4], sizeof(s[4]), "TETHER_MIN_WORKERS=%lld", (long long)minw);
    snprintf(s[5], sizeof(s[5]), "TETHER_MAX_WORKERS=%lld", (long long)cfg->workers);
    snprintf(s[6], sizeof(s[6]), "TETHER_LOCAL_RANK=%d", c->index);
    snprintf(s[7], sizeof(s[7]), "TETHER_LAUNCH_RESTART=%d", c->restarts);
    snprintf(s[8], sizeof(s[8]), "TETHER_LAUNCH_PID=%ld", (long)getpid());
    /* A shard accepting TCP is not yet registered with the coordinator:
     * without this a job could be placed on the shards that were first. */
    snprintf(s[9], sizeof(s[9]), "TETHER_MIN_SHARDS=%lld", (long long)cfg->shards);
    const char *sets[13] = {APP_UNSET};
    for (int i = 0; i < 10; i++)
        sets[i + 1] = s[i];
    size_t n = 11;
    if (key_env(c->app, s[11], sizeof(s[11])))
        sets[n++] = s[11];
    int omp = tt_launch_omp_threads(c->ncpus, (int)cfg->workers);
    if (getenv("OMP_NUM_THREADS") == NULL && omp > 0) {
        snprintf(s[10], sizeof(s[10]), "OMP_NUM_THREADS=%d", omp);
        sets[n++] = s[10];
    }
    extern char **environ;
    return tt_launch_env_build(env, environ, sets, n);
}

/* Fills argv (pointers into bufs) for a daemon; NULL-terminated. The
 * shard keeps no durable state yet and has no --state-dir flag: its
 * directory (DIR/shard-K) is reserved and will be passed once it has one. */
static void daemon_argv(child_t *c, char *argv[12], char bufs[3][PATH_MAX]) {
    const tt_launch_app_opts_t *o = c->app->o;
    int n = 0;
    snprintf(bufs[0], PATH_MAX, "tcp://%s:%d", APP_HOST, c->port);
    argv[n++] = (char *)(c->kind == KIND_COORD ? o->coord_exe : o->shard_exe);
    argv[n++] = "--listen";
    argv[n++] = bufs[0];
    argv[n++] = "--log-level";
    argv[n++] = (char *)c->app->cfg->daemon_log_level;
    if (c->kind == KIND_COORD) {
        argv[n++] = "--state-dir";
        argv[n++] = c->state_dir;
    } else {
        snprintf(bufs[1], PATH_MAX, "s%d", c->index);
        argv[n++] = "--coordinator";
        argv[n++] = c->app->coord_endpoint;
        argv[n++] = "--id";
        argv[n++] = bufs[1];
    }
    if (c->http_port > 0) {
        snprintf(bufs[2], PATH_MAX, "%s:%d", APP_HOST, c->http_port);
        argv[n++] = "--http";
        argv[n++] = bufs[2];
    }
    argv[n] = NULL;
}

/* ---- exits ---- */

static void on_restart_timer(uv_timer_t *t) {
    child_t *c = t->data;
    if (!c->app->stopping)
        spawn_child(c);
}

static void daemon_exited(child_t *c, int64_t status, int sig, const char *how) {
    app_t *a = c->app;
    if (a->stopping) {
        say("%s stopped (%s)", c->label, how);
        return;
    }
    if (tt_launch_policy_final(&a->policy, status, sig)) {
        snprintf(a->fatal, sizeof(a->fatal),
                 "%s failed (%s): not restarted, since a restart would only repeat a usage or "
                 "configuration error",
                 c->label, how);
        begin_stop(a);
        return;
    }
    int64_t delay = tt_launch_backoff_died(&c->backoff, (int64_t)tt_clock_mono_ms());
    if (delay < 0) {
        snprintf(a->fatal, sizeof(a->fatal), "%s keeps dying (last: %s); giving up", c->label, how);
        begin_stop(a);
        return;
    }
    say("%s died (%s); restarting it in %lld ms on the same port", c->label, how, (long long)delay);
    a->daemon_restarts++;
    uv_timer_start(&c->restart_timer, on_restart_timer, (uint64_t)delay, 0);
}

static void worker_exited(child_t *c, int64_t status, int sig, const char *how) {
    app_t *a = c->app;
    tt_launch_verdict_t v =
        tt_launch_policy_worker_exit(&a->policy, c->index, status, sig, a->stopping);
    if (v == TT_LAUNCH_RESTART) {
        c->restarts++;
        say("%s exited (%s); restart %d (%lld of %lld used)", c->label, how, c->restarts,
            (long long)a->policy.restarts, (long long)a->policy.max_restarts);
        uv_timer_start(&c->restart_timer, on_restart_timer, 0, 0);
        return;
    }
    if (v == TT_LAUNCH_FAILED && !a->stopping && tt_launch_policy_final(&a->policy, status, sig))
        say("%s failed (%s): not restarted, since a restart would only repeat a usage or "
            "configuration error (--no-restart-code %d)",
            c->label, how, a->policy.final_code);
    else
        say("%s %s (%s)", c->label, v == TT_LAUNCH_DONE ? "finished" : "failed", how);
    if (!a->stopping && tt_launch_policy_hopeless(&a->policy)) {
        say("only %d of %d workers can still run, fewer than min-workers %d: stopping the job",
            a->policy.workers - a->policy.failed, a->policy.workers, a->policy.min_workers);
        begin_stop(a);
    } else if (!a->stopping && tt_launch_policy_all_exited(&a->policy)) {
        begin_stop(a); /* every worker is done: stop the daemons */
    }
}

static void on_child_exit(tt_launch_proc_t *p, int64_t status, int sig, void *ctx) {
    child_t *c = ctx;
    char how[96];
    tt_launch_describe_exit(how, sizeof(how), status, sig);
    tt_launch_proc_close(&p);
    c->proc = NULL;
    c->state = CH_DONE;
    if (c->kind == KIND_WORKER)
        worker_exited(c, status, sig, how);
    else
        daemon_exited(c, status, sig, how);
    progress_stop(c->app);
}

/* ---- spawning ---- */

static int spawn_with(child_t *c, char *const *argv, char *const *env) {
    app_t *a = c->app;
    char err[512] = "";
    tt_launch_proc_opts_t po = {.loop = &a->loop,
                                .self_exe = a->o->self_exe,
                                .prefix = c->prefix,
                                .argv = argv,
                                .env = env,
                                .cpus = c->cpus,
                                .tty = a->o->tty,
                                .out = emit_out,
                                .err = emit_err,
                                .on_exit = on_child_exit,
                                .ctx = c};
    int rc = tt_launch_proc_spawn(&c->proc, &po, err, sizeof(err));
    if (rc != TT_OK) {
        snprintf(a->fatal, sizeof(a->fatal), "%s: %s", c->label, err);
        return rc;
    }
    c->state = CH_RUNNING;
    tt_launch_backoff_started(&c->backoff, (int64_t)tt_clock_mono_ms());
    char http[64] = "";
    if (c->http_port > 0)
        snprintf(http, sizeof(http), ", metrics http://%s:%d/metrics", APP_HOST, c->http_port);
    say("started %s: pid %d, port %d, restart %d%s%s%s", c->label, tt_launch_proc_pid(c->proc),
        c->port, c->restarts, c->cpus[0] ? ", CPUs " : "", c->cpus, http);
    return TT_OK;
}

static int spawn_worker(child_t *c) {
    char err[256] = "";
    char **env = NULL;
    tt_launch_release_port(c->port, c->port_claim); /* a restart takes a new port */
    c->port_claim = -1;
    int rc = tt_launch_free_port(APP_HOST, &c->port, &c->port_claim, err, sizeof(err));
    if (rc != TT_OK) {
        snprintf(c->app->fatal, sizeof(c->app->fatal), "%s: %s", c->label, err);
        return rc;
    }
    TT_CHECK_GOTO(worker_env(c, &env), rc, done);
    rc = spawn_with(c, c->app->o->prog_argv, env);
done:
    if (rc == TT_ENOMEM)
        snprintf(c->app->fatal, sizeof(c->app->fatal), "%s: out of memory", c->label);
    tt_launch_env_free(&env);
    return rc;
}

static void spawn_child(child_t *c) {
    int rc;
    if (c->kind == KIND_WORKER) {
        rc = spawn_worker(c);
    } else {
        char *argv[12], bufs[3][PATH_MAX], **env = NULL, key[PATH_MAX + 32];
        const char *sets[] = {APP_UNSET, key};
        extern char **environ;
        daemon_argv(c, argv, bufs);
        rc = tt_launch_env_build(&env, environ, sets, key_env(c->app, key, sizeof(key)) ? 2 : 1);
        if (rc == TT_OK)
            rc = spawn_with(c, argv, env);
        else
            snprintf(c->app->fatal, sizeof(c->app->fatal), "%s: out of memory", c->label);
        tt_launch_env_free(&env);
    }
    if (rc != TT_OK)
        begin_stop(c->app);
}

static void start_workers(app_t *a) {
    say("%d worker(s) joining job '%s' at %s", a->nch - a->first_worker, a->cfg->job,
        a->coord_endpoint);
    for (int i = a->first_worker; i < a->nch && !a->stopping; i++)
        spawn_child(&a->ch[i]);
}

/* ---- readiness probes: a TCP connect to each daemon's port ---- */

static void probe_next(app_t *a) {
    int t = a->probe_target;
    say("%s is accepting connections on port %d", a->ch[t].label, a->ch[t].port);
    for (int i = 1; t == 0 && i < a->first_worker && !a->stopping; i++)
        spawn_child(&a->ch[i]); /* shards, once the coordinator is there */
    if (a->stopping)
        return;
    if (t + 1 < a->first_worker)
        start_probe(a, t + 1);
    else
        start_workers(a);
}

static void on_probe_timer(uv_timer_t *t) {
    app_t *a = t->data;
    start_probe(a, a->probe_target);
}

static void on_probe_closed(uv_handle_t *h) {
    app_t *a = h->data;
    if (a->stopping)
        return;
    if (a->probe_ok) {
        probe_next(a);
    } else if (tt_clock_mono_ms() >= a->probe_deadline) {
        child_t *c = &a->ch[a->probe_target];
        snprintf(a->fatal, sizeof(a->fatal),
                 "%s did not accept connections on port %d within %lld ms", c->label, c->port,
                 (long long)a->cfg->ready_timeout_ms);
        begin_stop(a);
    } else {
        uv_timer_start(&a->probe_timer, on_probe_timer, APP_PROBE_RETRY_MS, 0);
    }
}

static void on_probe_connect(uv_connect_t *req, int status) {
    app_t *a = req->data;
    if (uv_is_closing((uv_handle_t *)&a->probe))
        return; /* cancelled by the teardown */
    a->probe_ok = status == 0;
    uv_close((uv_handle_t *)&a->probe, on_probe_closed);
}

static void start_probe(app_t *a, int target) {
    struct sockaddr_in sa;
    if (a->probe_target != target || a->probe_deadline == 0)
        a->probe_deadline = tt_clock_mono_ms() + (uint64_t)a->cfg->ready_timeout_ms;
    a->probe_target = target;
    a->probe_ok = 0;
    uv_ip4_addr(APP_HOST, a->ch[target].port, &sa);
    uv_tcp_init(&a->loop, &a->probe);
    a->probe.data = a;
    a->probe_req.data = a;
    if (uv_tcp_connect(&a->probe_req, &a->probe, (struct sockaddr *)&sa, on_probe_connect) != 0)
        uv_close((uv_handle_t *)&a->probe, on_probe_closed);
}

/* ---- shutdown: workers first, then daemons; SIGKILL after the grace ---- */

static void signal_range(app_t *a, int from, int to, int signum) {
    for (int i = from; i < to; i++) {
        uv_timer_stop(&a->ch[i].restart_timer);
        if (a->ch[i].state == CH_RUNNING)
            tt_launch_proc_kill(a->ch[i].proc, signum);
    }
}

/* The grace period runs twice: once for the workers, then afresh for the
 * daemons, so a coordinator still gets its SIGTERM (and saves its state)
 * after workers that had to be SIGKILLed. */
static void on_grace(uv_timer_t *t) {
    app_t *a = t->data;
    int from = a->daemons_signalled ? 0 : a->first_worker;
    say("grace period of %lld ms over: killing %d remaining %s", (long long)a->cfg->grace_ms,
        running(a, from, a->nch), a->daemons_signalled ? "daemon(s)" : "worker(s)");
    signal_range(a, from, a->nch, SIGKILL);
}

static void finish(app_t *a) {
    if (a->finished)
        return;
    a->finished = 1;
    uv_timer_stop(&a->grace);
    uv_timer_stop(&a->probe_timer);
    for (int i = 0; i < 2; i++)
        uv_signal_stop(&a->sigs[i]);
    uv_stop(&a->loop);
}

/* Advances an orderly stop as far as the children allow. */
static void progress_stop(app_t *a) {
    if (!a->stopping || a->finished)
        return;
    if (running(a, a->first_worker, a->nch) > 0)
        return;
    if (!a->daemons_signalled) {
        a->daemons_signalled = 1;
        signal_range(a, 0, a->first_worker, SIGTERM);
        uv_timer_start(&a->grace, on_grace, (uint64_t)a->cfg->grace_ms, 0);
    }
    if (running(a, 0, a->first_worker) == 0)
        finish(a);
}

static void begin_stop(app_t *a) {
    if (a->stopping)
        return;
    a->stopping = 1;
    uv_timer_stop(&a->probe_timer);
    int n = running(a, a->first_worker, a->nch);
    if (n > 0)
        say("stopping %d worker(s) with SIGTERM (grace %lld ms)", n, (long long)a->cfg->grace_ms);
    signal_range(a, a->first_worker, a->nch, SIGTERM);
    uv_timer_start(&a->grace, on_grace, (uint64_t)a->cfg->grace_ms, 0);
    progress_stop(a);
}

static void on_signal(uv_signal_t *s, int signum) {
    app_t *a = s->data;
    if (a->stopping && a->stop_signal != 0) {
        say("second signal %d: killing everything now", signum);
        signal_range(a, 0, a->nch, SIGKILL);
        return;
    }
    say("signal %d: stopping the job", signum);
    if (a->stop_signal == 0)
        a->stop_signal = signum;
    a->interrupted = !tt_launch_policy_all_exited(&a->policy);
    begin_stop(a);
}

/* ---- setup and teardown ---- */

/* The CPUs this launcher may use, in order, read once (--bind cores);
 * a->ncpus stays 0 when unknown. */
static int load_allowed_cpus(app_t *a) {
    cpu_set_t set;
    if (strcmp(a->cfg->bind, "none") == 0 || sched_getaffinity(0, sizeof(set), &set) != 0)
        return TT_OK;
    a->cpus = calloc((size_t)CPU_COUNT(&set) + 1, sizeof(int));
    if (a->cpus == NULL)
        return TT_ENOMEM;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set))
            a->cpus[a->ncpus++] = c;
    return TT_OK;
}

/* Fills c->cpus with the worker's share ("" when not binding: --bind
 * none, or a single CPU, where binding changes nothing). */
static int bind_worker(app_t *a, child_t *c) {
    c->cpus[0] = '\0';
    c->ncpus = 0;
    if (a->ncpus < 2)
        return TT_OK;
    int *mine = calloc((size_t)a->ncpus, sizeof(int));
    if (mine == NULL)
        return TT_ENOMEM;
    int k = tt_launch_cpu_share(a->cpus, a->ncpus, c->index, (int)a->cfg->workers, mine);
    c->ncpus = k;
    if (tt_launch_cpus_format(c->cpus, sizeof(c->cpus), mine, k) >= sizeof(c->cpus)) {
        say("%s: its CPU list is too long to pass on; not binding it", c->label);
        c->cpus[0] = '\0';
        c->ncpus = 0;
    }
    free(mine);
    return TT_OK;
}

static int init_child(app_t *a, int i) {
    child_t *c = &a->ch[i];
    c->app = a;
    c->kind = i == 0 ? KIND_COORD : i < a->first_worker ? KIND_SHARD : KIND_WORKER;
    c->index = c->kind == KIND_SHARD ? i - 1 : c->kind == KIND_WORKER ? i - a->first_worker : 0;
    if (c->kind == KIND_COORD)
        snprintf(c->label, sizeof(c->label), "coordinator");
    else
        snprintf(c->label, sizeof(c->label), "%s %d", c->kind == KIND_SHARD ? "shard" : "worker",
                 c->index);
    snprintf(c->prefix, sizeof(c->prefix), "[%s] ", c->kind == KIND_COORD ? "coord" : c->label);
    tt_launch_backoff_init(&c->backoff, 100, 5000, 10000, 5);
    uv_timer_init(&a->loop, &c->restart_timer);
    c->restart_timer.data = c;
    c->port_claim = c->http_claim = -1;
    if (c->kind == KIND_WORKER)
        return bind_worker(a, c);
    if (c->kind == KIND_COORD)
        snprintf(c->state_dir, sizeof(c->state_dir), "%s/coordinator", a->o->state_root);
    else
        snprintf(c->state_dir, sizeof(c->state_dir), "%s/shard-%d", a->o->state_root, c->index);
    char err[256];
    int rc = TT_OK;
    if (c->kind == KIND_COORD && a->cfg->coordinator_port > 0)
        c->port = (int)a->cfg->coordinator_port;
    else
        rc = tt_launch_free_port(APP_HOST, &c->port, &c->port_claim, err, sizeof(err));
    /* The coordinator's HTTP port is the operator's; a shard's is free. */
    if (rc == TT_OK && a->cfg->http_port > 0 && c->kind == KIND_COORD)
        c->http_port = (int)a->cfg->http_port;
    else if (rc == TT_OK && a->cfg->http_port > 0)
        rc = tt_launch_free_port(APP_HOST, &c->http_port, &c->http_claim, err, sizeof(err));
    if (rc != TT_OK) {
        snprintf(a->fatal, sizeof(a->fatal), "%s", err);
        return TT_ESYS;
    }
    return TT_OK;
}

static int app_init(app_t *a, const tt_launch_app_opts_t *o) {
    memset(a, 0, sizeof(*a));
    a->o = o;
    a->cfg = o->cfg;
    a->first_worker = 1 + (int)o->cfg->shards;
    a->nch = a->first_worker + (int)o->cfg->workers;
    a->start_ms = tt_clock_mono_ms();
    tt_launch_policy_init(&a->policy, (int)o->cfg->workers,
                          (int)(o->cfg->min_workers > 0 ? o->cfg->min_workers : o->cfg->workers),
                          o->cfg->max_restarts, (int)o->cfg->no_restart_code);
    if (uv_loop_init(&a->loop) != 0)
        return TT_ESYS; /* nothing to tear down yet */
    a->loop_ready = 1;
    uv_timer_init(&a->loop, &a->grace);
    uv_timer_init(&a->loop, &a->probe_timer);
    a->grace.data = a->probe_timer.data = a;
    int nums[2] = {SIGINT, SIGTERM};
    for (int i = 0; i < 2; i++) {
        uv_signal_init(&a->loop, &a->sigs[i]);
        a->sigs[i].data = a;
        uv_signal_start(&a->sigs[i], on_signal, nums[i]);
    }
    a->ch = calloc((size_t)a->nch, sizeof(*a->ch));
    return a->ch == NULL ? TT_ENOMEM : load_allowed_cpus(a);
}

static void close_walk(uv_handle_t *h, void *arg) {
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

static void app_teardown(app_t *a) {
    if (!a->loop_ready)
        return;
    for (int i = 0; a->ch != NULL && i < a->nch; i++) {
        tt_launch_proc_close(&a->ch[i].proc);
        tt_launch_release_port(a->ch[i].port, a->ch[i].port_claim);
        tt_launch_release_port(a->ch[i].http_port, a->ch[i].http_claim);
    }
    uv_walk(&a->loop, close_walk, NULL);
    uv_run(&a->loop, UV_RUN_DEFAULT);
    uv_loop_close(&a->loop);
    free(a->ch);
    free(a->cpus);
}

static int exit_status(const app_t *a) {
    if (a->policy.exit_code != 0)
        return a->policy.exit_code;
    if (a->fatal[0] != '\0')
        return 1;
    if (a->interrupted)
        return 128 + a->stop_signal;
    return a->policy.finished == a->policy.workers ? 0 : 1;
}

static void report(const app_t *a, int rc) {
    if (a->policy.exit_code != 0)
        say("job failed: %s", a->policy.reason);
    else if (a->fatal[0] != '\0')
        say("job failed: %s", a->fatal);
    else if (rc != 0)
        say("job stopped by signal %d before the workers finished", a->stop_signal);
    double wall = (double)(tt_clock_mono_ms() - a->start_ms) / 1000.0;
    say("summary: workers=%d finished=%d failed=%d restarts=%lld daemon-restarts=%d exit=%d "
        "wall=%.2fs",
        a->policy.workers, a->policy.finished, a->policy.failed, (long long)a->policy.restarts,
        a->daemon_restarts, rc, wall);
}

int tt_launch_app_run(const tt_launch_app_opts_t *o) {
    app_t *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return 1;
    int rc = app_init(a, o);
    for (int i = 0; rc == TT_OK && i < a->nch; i++)
        rc = init_child(a, i);
    if (rc == TT_OK) {
        snprintf(a->coord_endpoint, sizeof(a->coord_endpoint), "tcp://%s:%d", APP_HOST,
                 a->ch[0].port);
        spawn_child(&a->ch[0]);
        if (!a->stopping)
            start_probe(a, 0);
        uv_run(&a->loop, UV_RUN_DEFAULT);
    } else if (a->fatal[0] == '\0') {
        snprintf(a->fatal, sizeof(a->fatal), "cannot set up: %s", tt_strerror(rc));
    }
    int status = exit_status(a);
    report(a, status);
    app_teardown(a);
    free(a);
    return status;
}
