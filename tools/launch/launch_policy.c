/* launch_policy: restart, exit-status and CPU-binding decisions of
 * tether-launch. */
#include "launch_policy.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

void tt_launch_policy_init(tt_launch_policy_t *p, int workers, int min_workers,
                           int64_t max_restarts, int final_code) {
    memset(p, 0, sizeof(*p));
    p->final_code = final_code > 0 && final_code < 256 ? final_code : 0;
    p->workers = workers < 1 ? 1 : workers;
    p->min_workers = min_workers < 1 ? 1 : min_workers > p->workers ? p->workers : min_workers;
    p->max_restarts = max_restarts < 0 ? 0 : max_restarts;
}

int tt_launch_exit_code(int64_t exit_status, int term_signal) {
    if (term_signal > 0)
        return 128 + term_signal;
    return (int)(exit_status & 0xff);
}

void tt_launch_describe_exit(char *out, size_t n, int64_t exit_status, int term_signal) {
    if (term_signal > 0) {
        const char *name = sigabbrev_np(term_signal);
        snprintf(out, n, "killed by signal %d (SIG%s)", term_signal, name ? name : "?");
    } else {
        snprintf(out, n, "exit code %d", (int)exit_status);
    }
}

static void record_failure(tt_launch_policy_t *p, int index, int64_t exit_status, int term_signal,
                           const char *why) {
    p->failed++;
    if (p->exit_code != 0)
        return; /* the first failure names the job's outcome */
    char how[96];
    tt_launch_describe_exit(how, sizeof(how), exit_status, term_signal);
    p->exit_code = tt_launch_exit_code(exit_status, term_signal);
    if (p->exit_code == 0)
        p->exit_code = 1;
    snprintf(p->reason, sizeof(p->reason), "worker %d failed: %s (%s)", index, how, why);
}

tt_launch_verdict_t tt_launch_policy_worker_exit(tt_launch_policy_t *p, int index,
                                                 int64_t exit_status, int term_signal,
                                                 int stopping) {
    if (exit_status == 0 && term_signal == 0) {
        p->finished++;
        return TT_LAUNCH_DONE;
    }
    if (stopping) {
        /* Killed by our own shutdown: not the job's failure. */
        p->failed++;
        return TT_LAUNCH_FAILED;
    }
    if (tt_launch_policy_final(p, exit_status, term_signal)) {
        record_failure(p, index, exit_status, term_signal,
                       "a usage or configuration error, which a restart would repeat");
        return TT_LAUNCH_FAILED;
    }
    if (p->restarts < p->max_restarts) {
        p->restarts++;
        return TT_LAUNCH_RESTART;
    }
    char why[96];
    snprintf(why, sizeof(why), "restart budget of %lld used up", (long long)p->max_restarts);
    record_failure(p, index, exit_status, term_signal, why);
    return TT_LAUNCH_FAILED;
}

int tt_launch_policy_final(const tt_launch_policy_t *p, int64_t exit_status, int term_signal) {
    return term_signal == 0 && p->final_code != 0 && exit_status == p->final_code;
}

int tt_launch_policy_hopeless(const tt_launch_policy_t *p) {
    return p->exit_code != 0 && p->workers - p->failed < p->min_workers;
}

int tt_launch_policy_all_exited(const tt_launch_policy_t *p) {
    return p->finished + p->failed >= p->workers;
}

void tt_launch_backoff_init(tt_launch_backoff_t *b, int64_t base_ms, int64_t cap_ms,
                            int64_t stable_ms, int max_quick) {
    memset(b, 0, sizeof(*b));
    b->base_ms = base_ms;
    b->cap_ms = cap_ms < base_ms ? base_ms : cap_ms;
    b->stable_ms = stable_ms;
    b->max_quick = max_quick;
}

void tt_launch_backoff_started(tt_launch_backoff_t *b, int64_t now_ms) {
    b->started_ms = now_ms;
}

int64_t tt_launch_backoff_died(tt_launch_backoff_t *b, int64_t now_ms) {
    if (now_ms - b->started_ms >= b->stable_ms)
        b->quick = 0;
    if (b->quick >= b->max_quick)
        return -1;
    int64_t delay = b->base_ms;
    for (int i = 0; i < b->quick && delay < b->cap_ms; i++)
        delay *= 2;
    b->quick++;
    return delay < b->cap_ms ? delay : b->cap_ms;
}

int tt_launch_cpu_share(const int *allowed, int nallowed, int index, int workers, int *out) {
    if (nallowed <= 0 || workers <= 0 || index < 0)
        return 0;
    index %= workers;
    int64_t lo = (int64_t)index * nallowed / workers;
    int64_t hi = (int64_t)(index + 1) * nallowed / workers;
    if (hi <= lo)
        hi = lo + 1;
    int n = 0;
    for (int64_t i = lo; i < hi; i++)
        out[n++] = allowed[i];
    return n;
}

int tt_launch_omp_threads(int bound_cpus, int workers) {
    if (bound_cpus > 0)
        return bound_cpus;
    return workers > 1 ? 1 : 0;
}

size_t tt_launch_cpus_format(char *buf, size_t n, const int *cpus, int ncpus) {
    size_t used = 0;
    if (n > 0)
        buf[0] = '\0';
    for (int i = 0; i < ncpus;) {
        int j = i;
        while (j + 1 < ncpus && cpus[j + 1] == cpus[j] + 1)
            j++;
        char run[32];
        int w = j > i ? snprintf(run, sizeof(run), "%s%d-%d", i ? "," : "", cpus[i], cpus[j])
                      : snprintf(run, sizeof(run), "%s%d", i ? "," : "", cpus[i]);
        if (used + (size_t)w < n)
            memcpy(buf + used, run, (size_t)w + 1);
        used += (size_t)w;
        i = j + 1;
    }
    return used;
}
