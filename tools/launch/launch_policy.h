/* launch_policy: the decisions tether-launch makes about its children, as
 * pure functions of exit statuses and an injected clock: whether a dead
 * worker is restarted, done or failed; when the job can no longer go on;
 * the job's exit status; how fast a daemon that keeps dying is restarted;
 * and which CPUs each worker is bound to. It owns no process and no handle; tether-launch applies
 * the verdicts. The structs are plain values (the launcher embeds them and the tests read them);
 * callers change them only through these functions. Thread safety: none needed (one loop thread).
 */
#ifndef TT_LAUNCH_POLICY_H
#define TT_LAUNCH_POLICY_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    TT_LAUNCH_DONE = 0,    /* exited 0: this worker finished */
    TT_LAUNCH_RESTART = 1, /* start it again (same id and rank, new port) */
    TT_LAUNCH_FAILED = 2,  /* failed for good: restarts exhausted or stopping */
} tt_launch_verdict_t;

#define TT_LAUNCH_REASON_MAX 256

typedef struct tt_launch_policy {
    int workers;                       /* N */
    int min_workers;                   /* below this many the job cannot go on */
    int64_t max_restarts;              /* worker restarts allowed, all workers together */
    int64_t restarts;                  /* worker restarts made so far */
    int final_code;                    /* an exit code never restarted; 0: none */
    int finished;                      /* workers that exited 0 */
    int failed;                        /* workers that failed for good */
    int exit_code;                     /* the first permanent failure's code, else 0 */
    char reason[TT_LAUNCH_REASON_MAX]; /* "worker 2 exited with code 1 ..." */
} tt_launch_policy_t;

/* workers >= 1, 1 <= min_workers <= workers (clamped), max_restarts >= 0.
 * final_code (1-255; 0: none) is an exit code a restart would only repeat:
 * by convention 2, the usage error of getopt, argparse and tether-train
 * (bad flags, or a configuration the host cannot run, such as an nccl
 * worker without a GPU of its own). A worker that exits with it fails for
 * good at once, whatever budget is left, as the Kubernetes manifest's
 * podFailurePolicy fails the Job; restarting it would spend the budget
 * other workers' real crashes need and print the same refusal each time.
 * The launcher applies it to its daemons too (tt_launch_policy_final). */
void tt_launch_policy_init(tt_launch_policy_t *p, int workers, int min_workers,
                           int64_t max_restarts, int final_code);

/* The shell convention: the exit code, or 128 + signal when killed. */
int tt_launch_exit_code(int64_t exit_status, int term_signal);

/* "exit code 3" or "killed by signal 9 (SIGKILL)" into out. */
void tt_launch_describe_exit(char *out, size_t n, int64_t exit_status, int term_signal);

/* Worker `index` exited. `stopping`: the launcher is shutting down, so
 * nothing is restarted and a death caused by our own SIGTERM/SIGKILL does
 * not count as the job's failure. Records the first permanent failure (code
 * and reason) and counts restarts. */
tt_launch_verdict_t tt_launch_policy_worker_exit(tt_launch_policy_t *p, int index,
                                                 int64_t exit_status, int term_signal,
                                                 int stopping);

/* 1 when this exit is the final code: failed for good, not restarted. */
int tt_launch_policy_final(const tt_launch_policy_t *p, int64_t exit_status, int term_signal);

/* 1 when so many workers failed for good that the survivors can never
 * reach min_workers again: the launcher should stop the rest. */
int tt_launch_policy_hopeless(const tt_launch_policy_t *p);

/* 1 when every worker finished or failed. */
int tt_launch_policy_all_exited(const tt_launch_policy_t *p);

/* Restart pacing for a daemon: each death within `stable_ms` of its start
 * doubles the delay (base_ms .. cap_ms); a daemon that ran longer than
 * stable_ms starts again at base_ms. After max_quick quick deaths in a row
 * it gives up. */
typedef struct tt_launch_backoff {
    int64_t base_ms, cap_ms, stable_ms;
    int max_quick;
    int quick; /* quick deaths in a row */
    int64_t started_ms;
} tt_launch_backoff_t;

void tt_launch_backoff_init(tt_launch_backoff_t *b, int64_t base_ms, int64_t cap_ms,
                            int64_t stable_ms, int max_quick);

/* Record a start at now_ms. */
void tt_launch_backoff_started(tt_launch_backoff_t *b, int64_t now_ms);

/* The daemon died at now_ms: the delay before restarting it, or -1 when it
 * keeps dying and should not be restarted any more. */
int64_t tt_launch_backoff_died(tt_launch_backoff_t *b, int64_t now_ms);

/* The CPUs worker `index` of `workers` is bound to, as a share of the
 * `nallowed` CPUs the launcher may use (allowed[], its affinity mask in
 * order): contiguous blocks, so with fewer workers than CPUs each gets
 * nallowed / workers of them (BLAS threads included), and with more, ring
 * neighbours index and index + 1 share a CPU and talk without a migration.
 * Binding matters on a small host: two workers on two CPUs, left to the
 * scheduler, ran the reference model at 64-67k examples/s; bound, at
 * 96-104k (bench/train/NOTES.md). Writes the CPU numbers to out (room for
 * nallowed) and returns how many (>= 1), or 0 when nothing is allowed. */
int tt_launch_cpu_share(const int *allowed, int nallowed, int index, int workers, int *out);

/* The OMP_NUM_THREADS a worker gets when its environment has none, as
 * torchrun does: its CPU share when bound (bound_cpus > 0), else 1 when
 * several workers share the host, else 0 (leave it unset). Without it an
 * OpenMP or BLAS library sizes its pool by the whole host in every worker
 * (W times the CPUs there are); OpenBLAS reads the variable too, so a
 * tether-train worker also starts no BLAS thread it would not use. */
int tt_launch_omp_threads(int bound_cpus, int workers);

/* The CPU list in the kernel's notation ("0-3,8,10-11": ascending runs
 * become ranges) into buf. Returns the length it needs (snprintf-like):
 * >= n means it did not fit and buf holds a cut list that must not be
 * used. */
size_t tt_launch_cpus_format(char *buf, size_t n, const int *cpus, int ncpus);

#endif
