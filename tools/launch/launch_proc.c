/* launch_proc: spawning, output pumping and reaping of one child. */
#include "launch_proc.h"
#include "tt_status.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#define PROC_READ_BUF 16384
/* How long a child's pipes may outlive it (a grandchild holding them). */
#define PROC_LINGER_MS 1000

struct tt_launch_proc {
    uv_process_t proc;
    uv_pipe_t pipes[2]; /* child's stdout, stderr */
    uv_timer_t linger;
    tt_launch_lines_t *lines[2];
    char rbuf[2][PROC_READ_BUF];
    int pid;
    int exited, reported, closing;
    int eof[2];
    int open_handles;
    int64_t exit_status;
    int term_signal;
    tt_launch_exit_fn on_exit;
    void *ctx;
};

static void on_closed(uv_handle_t *h) {
    tt_launch_proc_t *p = h->data;
    if (--p->open_handles > 0)
        return;
    tt_launch_lines_destroy(&p->lines[0]);
    tt_launch_lines_destroy(&p->lines[1]);
    free(p);
}

static void close_handles(tt_launch_proc_t *p) {
    p->closing = 1;
    uv_close((uv_handle_t *)&p->proc, on_closed);
    uv_close((uv_handle_t *)&p->pipes[0], on_closed);
    uv_close((uv_handle_t *)&p->pipes[1], on_closed);
    uv_close((uv_handle_t *)&p->linger, on_closed);
}

static void maybe_report(tt_launch_proc_t *p) {
    if (!p->exited || !p->eof[0] || !p->eof[1] || p->reported || p->closing)
        return;
    p->reported = 1;
    uv_timer_stop(&p->linger);
    p->on_exit(p, p->exit_status, p->term_signal, p->ctx);
}

static void end_stream(tt_launch_proc_t *p, int i) {
    if (p->eof[i])
        return;
    p->eof[i] = 1;
    uv_read_stop((uv_stream_t *)&p->pipes[i]);
    tt_launch_lines_flush(p->lines[i]);
}

static int pipe_index(const tt_launch_proc_t *p, const uv_stream_t *s) {
    return s == (const uv_stream_t *)&p->pipes[0] ? 0 : 1;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
    tt_launch_proc_t *p = h->data;
    int i = pipe_index(p, (uv_stream_t *)h);
    (void)suggested;
    *buf = uv_buf_init(p->rbuf[i], PROC_READ_BUF);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
    tt_launch_proc_t *p = s->data;
    int i = pipe_index(p, s);
    if (nread > 0) {
        tt_launch_lines_feed(p->lines[i], buf->base, (size_t)nread);
    } else if (nread < 0) {
        end_stream(p, i);
        maybe_report(p);
    }
}

static void on_linger(uv_timer_t *t) {
    tt_launch_proc_t *p = t->data;
    /* The child is gone but something of its group still holds a pipe. */
    kill(-p->pid, SIGKILL);
    end_stream(p, 0);
    end_stream(p, 1);
    maybe_report(p);
}

static void on_proc_exit(uv_process_t *h, int64_t exit_status, int term_signal) {
    tt_launch_proc_t *p = h->data;
    p->exited = 1;
    p->exit_status = exit_status;
    p->term_signal = term_signal;
    uv_timer_start(&p->linger, on_linger, PROC_LINGER_MS, 0);
    maybe_report(p);
}

static int make_lines(tt_launch_proc_t *p, const tt_launch_proc_opts_t *o) {
    for (int i = 0; i < 2; i++) {
        tt_launch_lines_opts_t lo = {.prefix = o->prefix,
                                     .tty = o->tty,
                                     .emit = i == 0 ? o->out : o->err,
                                     .ctx = o->emit_ctx};
        int rc = tt_launch_lines_create(&p->lines[i], &lo);
        if (rc != TT_OK)
            return rc;
    }
    return TT_OK;
}

static void init_handles(tt_launch_proc_t *p, uv_loop_t *loop) {
    uv_pipe_init(loop, &p->pipes[0], 0);
    uv_pipe_init(loop, &p->pipes[1], 0);
    uv_timer_init(loop, &p->linger);
    p->proc.data = p->pipes[0].data = p->pipes[1].data = p->linger.data = p;
    p->open_handles = 3; /* the process handle counts once spawned */
}

/* {self, TRAMPOLINE_ARG, ppid, cpus, argv..., NULL}; the caller frees it. */
static char **trampoline_args(const tt_launch_proc_opts_t *o, char *ppid, size_t n) {
    size_t argc = 0;
    while (o->argv[argc] != NULL)
        argc++;
    char **args = calloc(argc + 5, sizeof(*args));
    if (args == NULL)
        return NULL;
    snprintf(ppid, n, "%ld", (long)getpid());
    args[0] = (char *)o->self_exe;
    args[1] = (char *)TT_LAUNCH_TRAMPOLINE_ARG;
    args[2] = ppid;
    args[3] = (char *)(o->cpus != NULL && o->cpus[0] != '\0' ? o->cpus : "-");
    memcpy(&args[4], o->argv, argc * sizeof(*args));
    return args;
}

static int do_spawn(tt_launch_proc_t *p, const tt_launch_proc_opts_t *o, char *err, size_t errlen) {
    char ppid[32];
    char **args = trampoline_args(o, ppid, sizeof(ppid));
    if (args == NULL)
        return TT_ENOMEM;
    uv_stdio_container_t stdio[3] = {
        {.flags = UV_IGNORE},
        {.flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE, .data.stream = (uv_stream_t *)&p->pipes[0]},
        {.flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE, .data.stream = (uv_stream_t *)&p->pipes[1]},
    };
    uv_process_options_t po = {.exit_cb = on_proc_exit,
                               .file = o->self_exe,
                               .args = args,
                               .env = (char **)o->env,
                               .flags = UV_PROCESS_DETACHED,
                               .stdio_count = 3,
                               .stdio = stdio};
    int uvrc = uv_spawn(o->loop, &p->proc, &po);
    free(args);
    p->open_handles++; /* closable whether or not the spawn worked */
    if (uvrc != 0) {
        snprintf(err, errlen, "cannot start %s: %s", o->argv[0], uv_strerror(uvrc));
        return TT_ESYS;
    }
    p->pid = p->proc.pid;
    return TT_OK;
}

int tt_launch_proc_spawn(tt_launch_proc_t **out, const tt_launch_proc_opts_t *o, char *err,
                         size_t errlen) {
    *out = NULL;
    tt_launch_proc_t *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return TT_ENOMEM;
    p->on_exit = o->on_exit;
    p->ctx = o->ctx;
    int rc = make_lines(p, o);
    if (rc != TT_OK) {
        tt_launch_lines_destroy(&p->lines[0]);
        free(p);
        return rc;
    }
    init_handles(p, o->loop);
    rc = do_spawn(p, o, err, errlen);
    if (rc != TT_OK) {
        close_handles(p);
        return rc;
    }
    uv_read_start((uv_stream_t *)&p->pipes[0], on_alloc, on_read);
    uv_read_start((uv_stream_t *)&p->pipes[1], on_alloc, on_read);
    *out = p;
    return TT_OK;
}

int tt_launch_proc_pid(const tt_launch_proc_t *p) {
    return p->pid;
}

int tt_launch_proc_alive(const tt_launch_proc_t *p) {
    return !p->exited;
}

int tt_launch_proc_kill(tt_launch_proc_t *p, int signum) {
    if (p->pid <= 0)
        return TT_ESYS;
    return kill(-p->pid, signum) == 0 ? TT_OK : TT_ESYS;
}

void tt_launch_proc_close(tt_launch_proc_t **pp) {
    if (pp == NULL || *pp == NULL)
        return;
    tt_launch_proc_t *p = *pp;
    *pp = NULL;
    if (p->closing)
        return;
    if (!p->exited || !p->reported)
        kill(-p->pid, SIGKILL);
    close_handles(p);
}

/* One CPU number at s; -1 when there is none or it is out of range. */
static long cpu_at(const char *s, char **end) {
    errno = 0;
    long c = strtol(s, end, 10);
    return *end == s || errno != 0 || c < 0 || c >= CPU_SETSIZE ? -1 : c;
}

/* "0-3,8" into a CPU set; 0 when the list is malformed. */
static int parse_cpus(const char *s, cpu_set_t *set) {
    CPU_ZERO(set);
    while (*s != '\0') {
        char *end;
        long lo = cpu_at(s, &end), hi = lo;
        if (lo >= 0 && *end == '-')
            hi = cpu_at(end + 1, &end);
        if (lo < 0 || hi < lo || (*end != ',' && *end != '\0'))
            return 0;
        for (long c = lo; c <= hi; c++)
            CPU_SET((int)c, set);
        s = *end == ',' ? end + 1 : end;
    }
    return CPU_COUNT(set) > 0;
}

int tt_launch_proc_trampoline(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "tether-launch: %s is internal (PARENT_PID CPUS PROGRAM ARGS...)\n",
                TT_LAUNCH_TRAMPOLINE_ARG);
        return 127;
    }
    long parent = strtol(argv[2], NULL, 10);
    /* Dies with the launcher, even when the launcher is SIGKILLed. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != (pid_t)parent)
        return 127; /* the launcher died before the line above took hold */
    if (strcmp(argv[3], "-") != 0) {
        cpu_set_t set;
        if (!parse_cpus(argv[3], &set)) {
            fprintf(stderr, "tether-launch: bad CPU list '%s'\n", argv[3]);
            return 127;
        }
        if (sched_setaffinity(0, sizeof(set), &set) != 0)
            fprintf(stderr, "tether-launch: cannot bind %s to CPUs %s (%s); running unbound\n",
                    argv[4], argv[3], strerror(errno));
    }
    execvp(argv[4], &argv[4]);
    fprintf(stderr, "tether-launch: cannot execute %s: %s\n", argv[4], strerror(errno));
    return 127;
}
