/* bench_coord: coordinator scale. Starts a real tether-coordinator, then
 * simulates workers as many DEALER sockets spread over a few processes:
 *   1. rendezvous: N workers join one job (min = max = N); time from the
 *      last join sent to the last JoinReply received;
 *   2. steady state: every worker heartbeats at 1 Hz for D seconds; the
 *      coordinator's CPU share (from /proc/PID/stat) and the heartbeat
 *      round-trip latency p50/p99 as the simulated workers see it.
 * Prints one table row per worker count. This is a benchmark, not a test:
 * it asserts nothing and prints the figures next to the targets. */
#include "tt_clock.h"
#include "tt_status.h"
#include "tt_wire.h"
#include "tt_zmq.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <unistd.h>

typedef struct bench_cfg {
    int workers, procs, seconds;
    char endpoint[128];
    char job[64];
} bench_cfg_t;

/* What each simulated-worker process reports back through its pipe. */
typedef struct child_report {
    uint64_t last_join_sent_ns, last_reply_ns;
    int joined;
    int errors;
    int nlat;
    float lat_us[200000];
} child_report_t;

static int send_join(void *s, const bench_cfg_t *cfg, const char *wid) {
    Tether__JobSettings set = TETHER__JOB_SETTINGS__INIT;
    set.min_workers = set.max_workers = (uint32_t)cfg->workers;
    set.last_call_ms = 1000;
    set.heartbeat_ms = 1000;
    set.heartbeat_timeout_ms = 30000;
    set.global_batch = (uint32_t)cfg->workers;
    set.join_timeout_ms = 600000;
    Tether__JoinRequest j = TETHER__JOIN_REQUEST__INIT;
    j.settings = &set;
    j.worker_id = (char *)wid;
    j.host = "127.0.0.1";
    j.endpoint = "";
    j.incarnation = 1;
    j.last_step = -1;
    tt_env_t env;
    tt_wire_env_init(&env, cfg->job, wid, 0, 1);
    env.body_case = TETHER__ENVELOPE__BODY_JOIN;
    env.join = &j;
    return tt_zmq_send(s, NULL, 0, &env, NULL, 0, 0);
}

static int send_heartbeat(void *s, const bench_cfg_t *cfg, const char *wid, uint64_t gen,
                          uint64_t req) {
    Tether__Heartbeat hb = TETHER__HEARTBEAT__INIT;
    hb.completed_step = (int64_t)req;
    hb.incarnation = 1;
    tt_env_t env;
    tt_wire_env_init(&env, cfg->job, wid, gen, req);
    env.body_case = TETHER__ENVELOPE__BODY_HEARTBEAT;
    env.heartbeat = &hb;
    return tt_zmq_send(s, NULL, 0, &env, NULL, 0, 1);
}

typedef struct sim {
    void *zctx;
    void **socks;
    char (*ids)[32];
    uint64_t *sent_ns; /* send time of the outstanding heartbeat, 0 if none */
    zmq_pollitem_t *items;
    int n;
    uint64_t gen;
} sim_t;

static int sim_open(sim_t *s, const bench_cfg_t *cfg, int first, int n) {
    s->n = n;
    s->zctx = zmq_ctx_new();
    zmq_ctx_set(s->zctx, ZMQ_MAX_SOCKETS, n + 16);
    s->socks = calloc((size_t)n, sizeof(void *));
    s->ids = calloc((size_t)n, sizeof(*s->ids));
    s->sent_ns = calloc((size_t)n, sizeof(uint64_t));
    s->items = calloc((size_t)n, sizeof(zmq_pollitem_t));
    if (!s->socks || !s->ids || !s->sent_ns || !s->items)
        return TT_ENOMEM;
    for (int i = 0; i < n; i++) {
        char rid[64];
        snprintf(s->ids[i], sizeof(s->ids[i]), "sim%06d", first + i);
        tt_zmq_routing_id(rid, sizeof(rid), "worker", s->ids[i], 1);
        tt_zmq_opts_t o;
        tt_zmq_opts_default(&o);
        o.routing_id = rid;
        o.heartbeat_ivl_ms = 0; /* the coordinator's own ZMTP pings suffice */
        char err[256];
        if (tt_zmq_dealer(s->zctx, cfg->endpoint, &o, &s->socks[i], err, sizeof(err)) != TT_OK) {
            fprintf(stderr, "bench_coord: %s\n", err);
            return TT_ESYS;
        }
        s->items[i].socket = s->socks[i];
        s->items[i].events = ZMQ_POLLIN;
    }
    return TT_OK;
}

/* Receives whatever is ready; returns how many JoinReplies arrived and
 * records heartbeat latencies. */
static int sim_poll(sim_t *s, long timeout_ms, child_report_t *rep) {
    int joins = 0;
    if (zmq_poll(s->items, s->n, timeout_ms) <= 0)
        return 0;
    uint64_t now = tt_clock_mono_ns();
    for (int i = 0; i < s->n; i++) {
        if (!(s->items[i].revents & ZMQ_POLLIN))
            continue;
        tt_zmq_rx_t rx;
        while (tt_zmq_recv(s->socks[i], 0, 1, NULL, &rx, NULL, 0) == TT_OK) {
            if (rx.env->body_case == TETHER__ENVELOPE__BODY_JOIN_REPLY) {
                joins++;
                s->gen = rx.env->join_reply->generation->generation;
                rep->last_reply_ns = now;
            } else if (rx.env->body_case == TETHER__ENVELOPE__BODY_HEARTBEAT_REPLY &&
                       s->sent_ns[i] != 0 && rep->nlat < 200000) {
                rep->lat_us[rep->nlat++] = (float)(now - s->sent_ns[i]) / 1000.0f;
                s->sent_ns[i] = 0;
            } else if (rx.env->body_case == TETHER__ENVELOPE__BODY_ERROR && rep->errors++ < 3)
                fprintf(stderr, "bench_coord: %s: %s\n", s->ids[i], rx.env->error->message);
            tt_zmq_rx_close(&rx);
        }
    }
    return joins;
}

static void sim_heartbeats(sim_t *s, const bench_cfg_t *cfg, child_report_t *rep,
                           uint64_t start_ns) {
    uint64_t period = 1000000000ull, end = start_ns + (uint64_t)cfg->seconds * period;
    uint64_t *due = calloc((size_t)s->n, sizeof(uint64_t));
    for (int i = 0; i < s->n; i++) /* spread the workers over the second */
        due[i] = start_ns + period * (uint64_t)i / (uint64_t)s->n;
    uint64_t req = 1;
    while (tt_clock_mono_ns() < end) {
        uint64_t now = tt_clock_mono_ns();
        for (int i = 0; i < s->n; i++) {
            if (due[i] > now)
                continue;
            s->sent_ns[i] = tt_clock_mono_ns();
            send_heartbeat(s->socks[i], cfg, s->ids[i], s->gen, req++);
            due[i] += period;
        }
        sim_poll(s, 2, rep);
    }
    free(due);
}

static void child_main(const bench_cfg_t *cfg, int first, int n, int fd, uint64_t hb_start_ns) {
    static child_report_t rep;
    sim_t s = {0};
    if (sim_open(&s, cfg, first, n) != TT_OK)
        _exit(1);
    usleep(300000); /* let connections complete (ZMQ_IMMEDIATE) */
    for (int i = 0; i < n; i++)
        send_join(s.socks[i], cfg, s.ids[i]);
    rep.last_join_sent_ns = tt_clock_mono_ns();
    uint64_t give_up = rep.last_join_sent_ns + 60000000000ull;
    while (rep.joined < n && tt_clock_mono_ns() < give_up)
        rep.joined += sim_poll(&s, 50, &rep);
    while (tt_clock_mono_ns() < hb_start_ns)
        sim_poll(&s, 20, &rep);
    sim_heartbeats(&s, cfg, &rep, hb_start_ns);
    size_t len = offsetof(child_report_t, lat_us) + (size_t)rep.nlat * sizeof(float);
    for (size_t off = 0; off < len;) {
        ssize_t w = write(fd, (char *)&rep + off, len - off);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    for (int i = 0; i < n; i++)
        tt_zmq_close(&s.socks[i]);
    zmq_ctx_term(s.zctx);
    _exit(0);
}

static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    bind(fd, (struct sockaddr *)&a, sizeof(a));
    getsockname(fd, (struct sockaddr *)&a, &len);
    close(fd);
    return ntohs(a.sin_port);
}

static pid_t start_coordinator(const char *bin, int port, const char *dir) {
    pid_t pid = fork();
    if (pid == 0) {
        char listen[64];
        snprintf(listen, sizeof(listen), "tcp://127.0.0.1:%d", port);
        char logf[300];
        snprintf(logf, sizeof(logf), "/tmp/bench_coord_%d.log", port);
        execl(bin, bin, "--listen", listen, "--state-dir", dir, "--log-level", "warn", "--log-file",
              logf, (char *)NULL);
        _exit(127);
    }
    usleep(300000);
    return pid;
}

static double proc_cpu_s(pid_t pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    unsigned long ut = 0, st = 0;
    if (p != NULL)
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st);
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

typedef struct result {
    double rdzv_ms, cpu_pct, p50_us, p99_us;
    int joined, samples;
} result_t;

static int read_all(int fd, void *buf, size_t cap) {
    size_t got = 0;
    for (;;) {
        ssize_t r = read(fd, (char *)buf + got, cap - got);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    return (int)got;
}

static void collect(bench_cfg_t *cfg, int *fds, pid_t *kids, result_t *r) {
    static child_report_t rep;
    float *lat = malloc(sizeof(float) * 200000 * (size_t)cfg->procs);
    uint64_t last_sent = 0, last_reply = 0;
    for (int p = 0; p < cfg->procs; p++) {
        int got = read_all(fds[p], &rep, sizeof(rep));
        waitpid(kids[p], NULL, 0);
        if (got < (int)offsetof(child_report_t, lat_us))
            continue;
        last_sent = rep.last_join_sent_ns > last_sent ? rep.last_join_sent_ns : last_sent;
        last_reply = rep.last_reply_ns > last_reply ? rep.last_reply_ns : last_reply;
        r->joined += rep.joined;
        memcpy(lat + r->samples, rep.lat_us, (size_t)rep.nlat * sizeof(float));
        r->samples += rep.nlat;
    }
    r->rdzv_ms = last_reply > last_sent ? (double)(last_reply - last_sent) / 1e6 : 0;
    qsort(lat, (size_t)r->samples, sizeof(float), cmp_float);
    if (r->samples > 0) {
        r->p50_us = lat[r->samples / 2];
        r->p99_us = lat[(size_t)((double)r->samples * 0.99)];
    }
    free(lat);
}

static void run_one(bench_cfg_t *cfg, const char *coord_bin, result_t *r) {
    char dir[] = "/tmp/tether-bench-coord-XXXXXX";
    mkdtemp(dir);
    int port = free_port();
    snprintf(cfg->endpoint, sizeof(cfg->endpoint), "tcp://127.0.0.1:%d", port);
    snprintf(cfg->job, sizeof(cfg->job), "bench-%d", cfg->workers);
    pid_t coord = start_coordinator(coord_bin, port, dir);
    int fds[64];
    pid_t kids[64];
    /* Heartbeats start after the rendezvous had time to settle. */
    uint64_t hb_start = tt_clock_mono_ns() + 5000000000ull + (uint64_t)cfg->workers * 1000000ull;
    int per = cfg->workers / cfg->procs;
    for (int p = 0; p < cfg->procs; p++) {
        int pipefd[2];
        if (pipe(pipefd) != 0)
            return;
        int n = p == cfg->procs - 1 ? cfg->workers - per * p : per;
        kids[p] = fork();
        if (kids[p] == 0) {
            close(pipefd[0]);
            child_main(cfg, per * p, n, pipefd[1], hb_start);
        }
        close(pipefd[1]);
        fds[p] = pipefd[0];
    }
    while (tt_clock_mono_ns() < hb_start + 1000000000ull)
        usleep(10000);
    double cpu0 = proc_cpu_s(coord);
    uint64_t t0 = tt_clock_mono_ns();
    while (tt_clock_mono_ns() < hb_start + (uint64_t)cfg->seconds * 1000000000ull)
        usleep(10000);
    double cpu1 = proc_cpu_s(coord);
    r->cpu_pct = 100.0 * (cpu1 - cpu0) / ((double)(tt_clock_mono_ns() - t0) / 1e9);
    collect(cfg, fds, kids, r);
    for (int p = 0; p < cfg->procs; p++)
        close(fds[p]);
    kill(coord, SIGTERM);
    waitpid(coord, NULL, 0);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_coord: could not remove %s\n", dir);
}

static void coordinator_path(const char *argv0, char *out, size_t n) {
    char self[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    self[len > 0 ? len : 0] = '\0';
    char *slash = strrchr(self, '/');
    if (slash != NULL)
        *slash = '\0';
    snprintf(out, n, "%s/../server/coordinator/tether-coordinator", self);
    (void)argv0;
}

int main(int argc, char **argv) {
    int counts[8] = {1000, 10000}, ncounts = 2, procs = 4, seconds = 10;
    char bin[PATH_MAX + 64];
    coordinator_path(argv[0], bin, sizeof(bin));
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--workers") == 0 && i + 1 < argc) {
            ncounts = 0;
            for (char *t = strtok(argv[++i], ","); t && ncounts < 8; t = strtok(NULL, ","))
                counts[ncounts++] = atoi(t);
        } else if (strcmp(argv[i], "--procs") == 0 && i + 1 < argc) {
            procs = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
            seconds = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--coordinator-bin") == 0 && i + 1 < argc) {
            snprintf(bin, sizeof(bin), "%s", argv[++i]);
        } else {
            fprintf(stderr, "usage: bench_coord [--workers 1000,10000] [--procs 4] "
                            "[--seconds 10] [--coordinator-bin PATH]\n");
            return 2;
        }
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    printf("coordinator scale (%d simulated-worker processes, heartbeats at 1 Hz for %d s)\n",
           procs, seconds);
    printf("| workers | joined | rendezvous after last join (ms) | coordinator CPU %% of one core "
           "| heartbeat RTT p50 (us) | p99 (us) | samples |\n|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < ncounts; i++) {
        bench_cfg_t cfg = {.workers = counts[i], .procs = procs, .seconds = seconds};
        result_t r = {0};
        run_one(&cfg, bin, &r);
        printf("| %d | %d | %.1f | %.1f | %.0f | %.0f | %d |\n", cfg.workers, r.joined, r.rdzv_ms,
               r.cpu_pct, r.p50_us, r.p99_us, r.samples);
        fflush(stdout);
    }
    printf("targets: 10,000 workers under 25%% of one core; 1,000-worker rendezvous under 1 s "
           "after the last join\n");
    return 0;
}
