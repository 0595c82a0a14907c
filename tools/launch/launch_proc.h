/* launch_proc: one child process of tether-launch on the launcher's libuv
 * loop. It owns the uv_process_t, the two pipes that carry the child's
 * stdout and stderr into launch_lines prefixers, and a timer that bounds
 * how long the pipes may stay open after the child exited. It does not
 * decide anything about restarts (launch_policy does).
 * Every child is started through the launcher's own executable in its
 * hidden trampoline mode (tt_launch_proc_trampoline): that sets
 * PR_SET_PDEATHSIG=SIGKILL and then execs the real program, because libuv
 * runs no code of ours between fork and exec; it also binds the child to
 * its CPUs (sched_setaffinity, inherited by every thread the program
 * starts) when the launcher gave it some. The child also gets its own
 * session and process group (UV_PROCESS_DETACHED), so signals go to the
 * whole group and a terminal's Ctrl-C reaches only the launcher, which
 * then stops the children in order.
 * The exit callback runs once, after the child exited and both pipes
 * reached end of stream (or 1 s after the exit, when a straggler of its
 * group still held them: the group is then SIGKILLed), so the child's last
 * lines are always printed before the launcher reports its exit.
 * Thread safety: loop thread only. */
#ifndef TT_LAUNCH_PROC_H
#define TT_LAUNCH_PROC_H

#include "launch_lines.h"

#include <stdint.h>
#include <uv.h>

typedef struct tt_launch_proc tt_launch_proc_t;

/* The child is gone and its output flushed. `p` stays valid until the
 * caller passes it to tt_launch_proc_close (which it may do here). */
typedef void (*tt_launch_exit_fn)(tt_launch_proc_t *p, int64_t exit_status, int term_signal,
                                  void *ctx);

typedef struct tt_launch_proc_opts {
    uv_loop_t *loop;
    const char *self_exe;  /* the launcher's executable (trampoline) */
    const char *prefix;    /* "[worker 2] " */
    char *const *argv;     /* program and arguments; copied by the exec */
    char *const *env;      /* NULL-terminated environment */
    const char *cpus;      /* "0-3,8": bind the child to these CPUs; NULL: don't */
    int tty;               /* launch_lines tty mode */
    tt_launch_emit_fn out; /* where stdout lines go */
    tt_launch_emit_fn err; /* where stderr lines go */
    void *emit_ctx;
    tt_launch_exit_fn on_exit;
    void *ctx;
} tt_launch_proc_opts_t;

/* Spawns the child. Returns TT_OK with *out owned by the caller, or
 * TT_ESYS / TT_ENOMEM with a sentence in err (nothing left running). */
int tt_launch_proc_spawn(tt_launch_proc_t **out, const tt_launch_proc_opts_t *opts, char *err,
                         size_t errlen);

/* The child's pid (also its process group id). */
int tt_launch_proc_pid(const tt_launch_proc_t *p);

/* 1 until the child has exited. */
int tt_launch_proc_alive(const tt_launch_proc_t *p);

/* Sends `signum` to the child's process group (the child and whatever it
 * started that stayed in its group). Returns TT_OK, or TT_ESYS when there
 * was nobody left to signal. */
int tt_launch_proc_kill(tt_launch_proc_t *p, int signum);

/* Closes the handles and frees the object once libuv has released them.
 * A child still running is SIGKILLed (group) first. Accepts NULL, sets
 * *p = NULL. Its callbacks are not called after this. */
void tt_launch_proc_close(tt_launch_proc_t **p);

/* The trampoline mode: argv = {self, TT_LAUNCH_TRAMPOLINE_ARG, PARENT_PID,
 * CPUS, PROGRAM, ARGS...}, CPUS a list like "0-3,8" or "-" for no binding.
 * Never returns on success (exec); returns 127 when the launcher is
 * already gone, CPUS is malformed or the program cannot be executed (after
 * printing why on stderr). A binding the kernel refuses (a CPU taken away
 * since) is reported and the program runs unbound. */
#define TT_LAUNCH_TRAMPOLINE_ARG "--tether-launch-exec"
int tt_launch_proc_trampoline(int argc, char **argv);

#endif
