/* Unit tests of tether-launch's pure parts: output line prefixing
 * (launch_lines), restart and exit-status policy with an injected clock
 * (launch_policy), and environment blocks / executable lookup
 * (launch_env). The process supervision itself is exercised by
 * tests/integration/test_launch.py. */
#include "launch_env.h"
#include "launch_lines.h"
#include "launch_policy.h"
#include "tt_cunit.h"
#include "tt_status.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct sink {
    char buf[4096];
    size_t len;
    int pieces;
} sink_t;

static void sink_emit(void *ctx, const char *data, size_t len) {
    sink_t *s = ctx;
    if (s->len + len < sizeof(s->buf)) {
        memcpy(s->buf + s->len, data, len);
        s->len += len;
        s->buf[s->len] = '\0';
    }
    s->pieces++;
}

static tt_launch_lines_t *mk_lines(sink_t *s, int tty, size_t max_line) {
    memset(s, 0, sizeof(*s));
    tt_launch_lines_opts_t o = {
        .prefix = "[w 1] ", .tty = tty, .max_line = max_line, .emit = sink_emit, .ctx = s};
    tt_launch_lines_t *l = NULL;
    CU_ASSERT_EQUAL_FATAL(tt_launch_lines_create(&l, &o), TT_OK);
    return l;
}

static void feed(tt_launch_lines_t *l, const char *text) {
    tt_launch_lines_feed(l, text, strlen(text));
}

static void launch_lines_prefix_each_line_across_chunks(void) {
    sink_t s;
    tt_launch_lines_t *l = mk_lines(&s, 0, 0);
    feed(l, "hel");
    CU_ASSERT_EQUAL(s.pieces, 0); /* no partial line goes out */
    feed(l, "lo\nwor");
    feed(l, "ld\n\nlast");
    CU_ASSERT_STRING_EQUAL(s.buf, "[w 1] hello\n[w 1] world\n[w 1] \n");
    tt_launch_lines_flush(l);
    tt_launch_lines_flush(l); /* idempotent */
    CU_ASSERT_STRING_EQUAL(s.buf, "[w 1] hello\n[w 1] world\n[w 1] \n[w 1] last\n");
    CU_ASSERT_EQUAL(s.pieces, 4); /* one emit per line: lines stay whole */
    tt_launch_lines_destroy(&l);
    CU_ASSERT_PTR_NULL(l);
    tt_launch_lines_destroy(&l);
}

static void launch_lines_crlf_is_one_line(void) {
    sink_t s;
    tt_launch_lines_t *l = mk_lines(&s, 0, 0);
    feed(l, "a\r");
    feed(l, "\nb\r\n");
    CU_ASSERT_STRING_EQUAL(s.buf, "[w 1] a\n[w 1] b\n");
    tt_launch_lines_destroy(&l);
}

static void launch_lines_progress_keeps_last_update_when_not_tty(void) {
    sink_t s;
    tt_launch_lines_t *l = mk_lines(&s, 0, 0);
    feed(l, "\rstep 1/3\rstep 2/3\rstep 3/3\ndone\n\rtail 1\rtail 2\r");
    tt_launch_lines_flush(l);
    CU_ASSERT_STRING_EQUAL(s.buf, "[w 1] step 3/3\n[w 1] done\n[w 1] tail 2\n");
    tt_launch_lines_destroy(&l);
}

static void launch_lines_progress_passes_through_on_tty(void) {
    sink_t s;
    tt_launch_lines_t *l = mk_lines(&s, 1, 0);
    feed(l, "\rstep 1/2\rstep 2/2\n");
    CU_ASSERT_STRING_EQUAL(s.buf, "[w 1] step 1/2\r[w 1] step 2/2\n");
    tt_launch_lines_destroy(&l);
}

static void launch_lines_long_line_split(void) {
    sink_t s;
    tt_launch_lines_t *l = mk_lines(&s, 0, 4);
    feed(l, "abcdefghij\n");
    CU_ASSERT_STRING_EQUAL(s.buf, "[w 1] abcd\n[w 1] efgh\n[w 1] ij\n");
    tt_launch_lines_destroy(&l);
}

static void launch_lines_create_needs_emit(void) {
    tt_launch_lines_opts_t o = {.prefix = "x"};
    tt_launch_lines_t *l = (tt_launch_lines_t *)&o;
    CU_ASSERT_EQUAL(tt_launch_lines_create(&l, &o), TT_EINVAL);
    CU_ASSERT_PTR_NULL(l);
}

static void launch_policy_restart_budget_is_shared(void) {
    tt_launch_policy_t p;
    tt_launch_policy_init(&p, 3, 0, 2, 0);
    CU_ASSERT_EQUAL(p.min_workers, 1); /* clamped */
    CU_ASSERT_EQUAL(tt_launch_policy_worker_exit(&p, 0, 1, 0, 0), TT_LAUNCH_RESTART);
    CU_ASSERT_EQUAL(tt_launch_policy_worker_exit(&p, 2, 0, SIGKILL, 0), TT_LAUNCH_RESTART);
    CU_ASSERT_EQUAL(p.restarts, 2);
    CU_ASSERT_EQUAL(p.exit_code, 0);
    CU_ASSERT_EQUAL(tt_launch_policy_worker_exit(&p, 1, 0, SIGSEGV, 0), TT_LAUNCH_FAILED);
    CU_ASSERT_EQUAL(p.exit_code, 128 + SIGSEGV);
    CU_ASSERT_PTR_NOT_NULL(strstr(p.reason, "worker 1 failed: killed by signal 11 (SIGSEGV)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(p.reason, "restart budget of 2 used up"));
    /* a later failure does not replace the first one */
    CU_ASSERT_EQUAL(tt_launch_policy_worker_exit(&p, 0, 7, 0, 0), TT_LAUNCH_FAILED);
    CU_ASSERT_EQUAL(p.exit_code, 128 + SIGSEGV);
    CU_ASSERT_EQUAL(tt_launch_policy_worker_exit(&p, 2, 0, 0, 0), TT_LAUNCH_DONE);
    CU_ASSERT(tt_launch_policy_all_exited(&p));
}

static void launch_policy_zero_exit_is_done_and_job_succeeds(void) {
    tt_launch_policy_t p;
    tt_launch_policy_init(&p, 2, 2, 0, 2);
    CU_ASSERT_EQUAL(tt_launch_policy_worker_exit(&p, 0, 0, 0, 0), TT_LAUNCH_DONE);
    CU_ASSERT_FALSE(tt_launch_policy_all_exited(&p));
    CU_ASSERT_EQUAL(tt_launch_policy_worker_exit(&p, 1, 0, 0, 0), TT_LAUNCH_DONE);
    CU_ASSERT(tt_launch_policy_all_exited(&p));
    CU_ASSERT_EQUAL(p.exit_code, 0);
    CU_ASSERT_EQUAL(p.finished, 2);
}

static void launch_policy_stopping_never_restarts_nor_blames(void) {
    tt_launch_policy_t p;
    tt_launch_policy_init(&p, 2, 2, 5, 2);
    CU_ASSERT_EQUAL(tt_launch_policy_worker_exit(&p, 0, 0, SIGTERM, 1), TT_LAUNCH_FAILED);
    CU_ASSERT_EQUAL(p.restarts, 0);
    CU_ASSERT_EQUAL(p.exit_code, 0);
    CU_ASSERT_FALSE(tt_launch_policy_hopeless(&p));
}

static void launch_policy_hopeless_below_min_workers(void) {
    tt_launch_policy_t p;
    tt_launch_policy_init(&p, 4, 3, 0, 0);
    CU_ASSERT_EQUAL(tt_launch_policy_worker_exit(&p, 0, 2, 0, 0), TT_LAUNCH_FAILED);
    CU_ASSERT_FALSE(tt_launch_policy_hopeless(&p)); /* 3 left, min 3 */
    CU_ASSERT_EQUAL(p.exit_code, 2);
    CU_ASSERT_EQUAL(tt_launch_policy_worker_exit(&p, 1, 2, 0, 0), TT_LAUNCH_FAILED);
    CU_ASSERT(tt_launch_policy_hopeless(&p));
}

static void launch_policy_final_code_is_never_restarted(void) {
    tt_launch_policy_t p;
    tt_launch_policy_init(&p, 3, 2, 5, 2);
    CU_ASSERT_EQUAL(tt_launch_policy_worker_exit(&p, 1, 2, 0, 0), TT_LAUNCH_FAILED);
    CU_ASSERT_EQUAL(p.restarts, 0); /* the budget is kept for real crashes */
    CU_ASSERT_EQUAL(p.exit_code, 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(p.reason, "worker 1 failed: exit code 2 (a usage or"));
    CU_ASSERT_FALSE(tt_launch_policy_hopeless(&p)); /* 2 left, min 2 */
    /* another code, or signal 2, is an ordinary failure and restarted */
    CU_ASSERT_EQUAL(tt_launch_policy_worker_exit(&p, 0, 3, 0, 0), TT_LAUNCH_RESTART);
    CU_ASSERT_EQUAL(tt_launch_policy_worker_exit(&p, 0, 0, SIGINT, 0), TT_LAUNCH_RESTART);
    CU_ASSERT_EQUAL(p.restarts, 2);
    CU_ASSERT_FALSE(tt_launch_policy_final(&p, 0, 2));
    CU_ASSERT(tt_launch_policy_final(&p, 2, 0));
    /* while stopping, exit 2 is not the job's failure either */
    CU_ASSERT_EQUAL(tt_launch_policy_worker_exit(&p, 2, 2, 0, 1), TT_LAUNCH_FAILED);
    CU_ASSERT_EQUAL(p.exit_code, 2);
    CU_ASSERT(tt_launch_policy_hopeless(&p));

    tt_launch_policy_init(&p, 1, 1, 1, 0); /* 0: every failure is restarted */
    CU_ASSERT_EQUAL(tt_launch_policy_worker_exit(&p, 0, 2, 0, 0), TT_LAUNCH_RESTART);
    CU_ASSERT_FALSE(tt_launch_policy_final(&p, 2, 0));
    tt_launch_policy_init(&p, 1, 1, 1, 256); /* out of range: none */
    CU_ASSERT_EQUAL(p.final_code, 0);
}

static void launch_exit_code_shell_convention(void) {
    char how[96];
    CU_ASSERT_EQUAL(tt_launch_exit_code(0, 0), 0);
    CU_ASSERT_EQUAL(tt_launch_exit_code(3, 0), 3);
    CU_ASSERT_EQUAL(tt_launch_exit_code(0, SIGKILL), 137);
    tt_launch_describe_exit(how, sizeof(how), 0, SIGTERM);
    CU_ASSERT_STRING_EQUAL(how, "killed by signal 15 (SIGTERM)");
    tt_launch_describe_exit(how, sizeof(how), 4, 0);
    CU_ASSERT_STRING_EQUAL(how, "exit code 4");
}

static void launch_backoff_doubles_then_gives_up(void) {
    tt_launch_backoff_t b;
    tt_launch_backoff_init(&b, 100, 500, 10000, 5);
    int64_t now = 1000, want[] = {100, 200, 400, 500, 500};
    for (int i = 0; i < 5; i++) {
        tt_launch_backoff_started(&b, now);
        now += 50; /* dies quickly */
        CU_ASSERT_EQUAL(tt_launch_backoff_died(&b, now), want[i]);
    }
    tt_launch_backoff_started(&b, now);
    CU_ASSERT_EQUAL(tt_launch_backoff_died(&b, now + 10), -1);
}

static void launch_backoff_resets_after_stable_run(void) {
    tt_launch_backoff_t b;
    tt_launch_backoff_init(&b, 100, 5000, 10000, 3);
    tt_launch_backoff_started(&b, 0);
    CU_ASSERT_EQUAL(tt_launch_backoff_died(&b, 10), 100);
    tt_launch_backoff_started(&b, 110);
    CU_ASSERT_EQUAL(tt_launch_backoff_died(&b, 120), 200);
    tt_launch_backoff_started(&b, 320);
    CU_ASSERT_EQUAL(tt_launch_backoff_died(&b, 320 + 10000), 100); /* ran long: fresh */
}

static const char *env_get(char **env, const char *key) {
    size_t k = strlen(key);
    const char *found = NULL;
    for (; *env != NULL; env++) {
        if (strncmp(*env, key, k) == 0 && (*env)[k] == '=') {
            CU_ASSERT_PTR_NULL(found); /* each key once */
            found = *env + k + 1;
        }
    }
    return found;
}

static void launch_env_overrides_removes_and_keeps_the_rest(void) {
    char *base[] = {"PATH=/bin", "TETHER_JOB=old", "HOME=/root", "TETHER_CONFIG=/x", NULL};
    const char *sets[] = {"TETHER_JOB=new", "TETHER_LOCAL_RANK=1", "TETHER_LOCAL_RANK=2",
                          "TETHER_CONFIG"};
    char **env = NULL;
    CU_ASSERT_EQUAL_FATAL(tt_launch_env_build(&env, base, sets, 4), TT_OK);
    CU_ASSERT_PTR_NULL(env_get(env, "TETHER_CONFIG")); /* a bare KEY removes it */
    CU_ASSERT_STRING_EQUAL(env_get(env, "PATH"), "/bin");
    CU_ASSERT_STRING_EQUAL(env_get(env, "HOME"), "/root");
    CU_ASSERT_STRING_EQUAL(env_get(env, "TETHER_JOB"), "new");
    CU_ASSERT_STRING_EQUAL(env_get(env, "TETHER_LOCAL_RANK"), "2");
    int n = 0;
    while (env[n] != NULL)
        n++;
    CU_ASSERT_EQUAL(n, 4);
    tt_launch_env_free(&env);
    CU_ASSERT_PTR_NULL(env);
    const char *bad[] = {"=VALUE"};
    CU_ASSERT_EQUAL(tt_launch_env_build(&env, base, bad, 1), TT_EINVAL);
    CU_ASSERT_PTR_NULL(env);
}

static void touch(const char *path, mode_t mode) {
    FILE *f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fclose(f);
    chmod(path, mode);
}

static void launch_find_exe_order_and_exec_bit(void) {
    char root[] = "/tmp/tt-launch-unit-XXXXXX", a[300], b[300], out[512], path[700];
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(root));
    snprintf(a, sizeof(a), "%s/a", root);
    snprintf(b, sizeof(b), "%s/b", root);
    mkdir(a, 0755);
    mkdir(b, 0755);
    snprintf(path, sizeof(path), "%s/prog", a);
    touch(path, 0644); /* not executable: skipped */
    snprintf(path, sizeof(path), "%s/prog", b);
    touch(path, 0755);
    const char *dirs[] = {NULL, a};
    CU_ASSERT_EQUAL(tt_launch_find_exe(out, sizeof(out), "prog", dirs, 2, NULL), TT_ENOTFOUND);
    snprintf(path, sizeof(path), "/nonexistent:%s", b);
    CU_ASSERT_EQUAL(tt_launch_find_exe(out, sizeof(out), "prog", dirs, 2, path), TT_OK);
    snprintf(path, sizeof(path), "%s/prog", b);
    CU_ASSERT_STRING_EQUAL(out, path);
    /* a name with '/' is a path and is only checked */
    CU_ASSERT_EQUAL(tt_launch_find_exe(out, sizeof(out), path, NULL, 0, NULL), TT_OK);
    CU_ASSERT_EQUAL(tt_launch_find_exe(out, 8, "prog", dirs, 2, b), TT_ENOTFOUND);
    CU_ASSERT_EQUAL(tt_launch_rmtree(root), TT_OK);
    CU_ASSERT_NOT_EQUAL(access(root, F_OK), 0);
    CU_ASSERT_EQUAL(tt_launch_rmtree(root), TT_OK); /* already gone */
}

static void launch_dirname_cases(void) {
    char out[64];
    tt_launch_dirname(out, sizeof(out), "/usr/local/bin/tether-launch");
    CU_ASSERT_STRING_EQUAL(out, "/usr/local/bin");
    tt_launch_dirname(out, sizeof(out), "tether-launch");
    CU_ASSERT_STRING_EQUAL(out, ".");
    tt_launch_dirname(out, sizeof(out), "/tether-launch");
    CU_ASSERT_STRING_EQUAL(out, "/");
}

static void launch_free_port_is_bindable(void) {
    int port = 0;
    char err[128] = "";
    CU_ASSERT_EQUAL(tt_launch_free_port("127.0.0.1", &port, NULL, err, sizeof(err)), TT_OK);
    CU_ASSERT(port > 0 && port < 65536);
    int lo = 0, hi = 0; /* below the kernel's auto-assigned range, which starts >= 10000 here */
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f != NULL && fscanf(f, "%d %d", &lo, &hi) == 2 && lo > 11000)
        CU_ASSERT(port < lo);
    if (f != NULL)
        fclose(f);
    CU_ASSERT_EQUAL(tt_launch_free_port("not-an-ip", &port, NULL, err, sizeof(err)), TT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "not-an-ip"));
}

static int claim_file_exists(int port) {
    const char *tmp = getenv("TMPDIR");
    char path[600];
    struct stat st;
    snprintf(path, sizeof(path), "%s/tether-ports/%d", tmp != NULL && tmp[0] == '/' ? tmp : "/tmp",
             port);
    return stat(path, &st) == 0;
}

/* While a claim is held no launcher gets the port: 200 ports taken in a
 * row, each claim kept, are all different (200 random picks from the
 * 8192-port range would repeat one with probability 0.91 without claims),
 * and after the claims are given up the ports are free again and their
 * files gone (they used to pile up in /tmp, one per port ever used). */
static void launch_free_port_claims_are_exclusive(void) {
    enum { N = 200 };
    int port[N], claim[N], dup = 0, claimed = 0;
    char err[128] = "";
    for (int i = 0; i < N; i++) {
        CU_ASSERT_EQUAL_FATAL(
            tt_launch_free_port("127.0.0.1", &port[i], &claim[i], err, sizeof(err)), TT_OK);
        claimed += claim[i] >= 0;
        for (int k = 0; k < i; k++)
            dup += port[k] == port[i];
    }
    if (claimed < N)
        printf("\n    only %d of %d ports could be claimed here (no writable /tmp?)\n", claimed, N);
    CU_ASSERT_EQUAL(claimed, N);
    CU_ASSERT_EQUAL(dup, 0);
    int files = 0, left = 0;
    for (int i = 0; i < N; i++) {
        files += claim[i] >= 0 && claim_file_exists(port[i]);
        tt_launch_release_port(port[i], claim[i]);
        left += claim[i] >= 0 && claim_file_exists(port[i]);
    }
    CU_ASSERT_EQUAL(files, claimed);
    CU_ASSERT_EQUAL(left, 0);
    tt_launch_release_port(port[0], -1); /* nothing held: nothing done */
}

/* torchrun's rule: a worker's share when bound, 1 when several workers
 * share the host unbound, nothing for a lone unbound worker. */
static void launch_omp_threads_follow_the_share(void) {
    CU_ASSERT_EQUAL(tt_launch_omp_threads(2, 2), 2);
    CU_ASSERT_EQUAL(tt_launch_omp_threads(1, 4), 1);
    CU_ASSERT_EQUAL(tt_launch_omp_threads(8, 1), 8);
    CU_ASSERT_EQUAL(tt_launch_omp_threads(0, 2), 1);
    CU_ASSERT_EQUAL(tt_launch_omp_threads(0, 1), 0);
}

static void launch_cpu_share_blocks(void) {
    const int two[] = {0, 1}, mask[] = {2, 3, 6, 7}; /* a cpuset of 4 CPUs */
    int out[8];
    char buf[64];
    /* fewer workers than CPUs: contiguous blocks, every CPU used once */
    CU_ASSERT(tt_launch_cpu_share(mask, 4, 0, 2, out) == 2 && out[0] == 2 && out[1] == 3);
    CU_ASSERT(tt_launch_cpu_share(mask, 4, 1, 2, out) == 2 && out[0] == 6 && out[1] == 7);
    CU_ASSERT(tt_launch_cpus_format(buf, sizeof(buf), out, 2) == 3 && strcmp(buf, "6-7") == 0);
    /* 3 workers on 4 CPUs: 1, 1, 2 */
    CU_ASSERT(tt_launch_cpu_share(mask, 4, 0, 3, out) == 1 && out[0] == 2);
    CU_ASSERT(tt_launch_cpu_share(mask, 4, 1, 3, out) == 1 && out[0] == 3);
    CU_ASSERT(tt_launch_cpu_share(mask, 4, 2, 3, out) == 2 && out[0] == 6 && out[1] == 7);
    /* more workers than CPUs: ring neighbours 0,1 and 2,3 share a CPU */
    int cpu_of[4];
    for (int i = 0; i < 4; i++) {
        CU_ASSERT(tt_launch_cpu_share(two, 2, i, 4, out) == 1);
        cpu_of[i] = out[0];
    }
    CU_ASSERT(cpu_of[0] == 0 && cpu_of[1] == 0 && cpu_of[2] == 1 && cpu_of[3] == 1);
    /* 5 workers on 2 CPUs: every worker gets one, both CPUs used */
    int used[2] = {0, 0};
    for (int i = 0; i < 5; i++) {
        CU_ASSERT(tt_launch_cpu_share(two, 2, i, 5, out) == 1);
        used[out[0]]++;
    }
    CU_ASSERT(used[0] == 3 && used[1] == 2);
    CU_ASSERT(tt_launch_cpu_share(two, 0, 0, 2, out) == 0);
    CU_ASSERT(tt_launch_cpu_share(two, 2, 0, 0, out) == 0);
    CU_ASSERT(tt_launch_cpus_format(buf, sizeof(buf), out, 0) == 0 && buf[0] == '\0');
    /* the kernel's notation: runs become ranges, however many CPUs */
    const int odd[] = {0, 1, 2, 3, 5, 8, 9};
    CU_ASSERT(tt_launch_cpus_format(buf, sizeof(buf), odd, 7) == 9);
    CU_ASSERT(strcmp(buf, "0-3,5,8-9") == 0);
    int many[1024];
    for (int i = 0; i < 1024; i++)
        many[i] = i;
    CU_ASSERT(tt_launch_cpus_format(buf, sizeof(buf), many, 1024) == 6 && !strcmp(buf, "0-1023"));
    /* too small: the length it needs, and nothing half-written to use */
    CU_ASSERT(tt_launch_cpus_format(buf, 4, mask, 4) == 7);
}

static const tt_cunit_test_t tests[] = {
    {"launch_lines_prefix_each_line_across_chunks", launch_lines_prefix_each_line_across_chunks},
    {"launch_free_port_claims_are_exclusive", launch_free_port_claims_are_exclusive},
    {"launch_lines_crlf_is_one_line", launch_lines_crlf_is_one_line},
    {"launch_lines_progress_keeps_last_update_when_not_tty",
     launch_lines_progress_keeps_last_update_when_not_tty},
    {"launch_lines_progress_passes_through_on_tty", launch_lines_progress_passes_through_on_tty},
    {"launch_lines_long_line_split", launch_lines_long_line_split},
    {"launch_lines_create_needs_emit", launch_lines_create_needs_emit},
    {"launch_policy_restart_budget_is_shared", launch_policy_restart_budget_is_shared},
    {"launch_policy_zero_exit_is_done_and_job_succeeds",
     launch_policy_zero_exit_is_done_and_job_succeeds},
    {"launch_policy_stopping_never_restarts_nor_blames",
     launch_policy_stopping_never_restarts_nor_blames},
    {"launch_policy_hopeless_below_min_workers", launch_policy_hopeless_below_min_workers},
    {"launch_policy_final_code_is_never_restarted", launch_policy_final_code_is_never_restarted},
    {"launch_exit_code_shell_convention", launch_exit_code_shell_convention},
    {"launch_backoff_doubles_then_gives_up", launch_backoff_doubles_then_gives_up},
    {"launch_backoff_resets_after_stable_run", launch_backoff_resets_after_stable_run},
    {"launch_env_overrides_removes_and_keeps_the_rest",
     launch_env_overrides_removes_and_keeps_the_rest},
    {"launch_find_exe_order_and_exec_bit", launch_find_exe_order_and_exec_bit},
    {"launch_dirname_cases", launch_dirname_cases},
    {"launch_free_port_is_bindable", launch_free_port_is_bindable},
    {"launch_cpu_share_blocks", launch_cpu_share_blocks},
    {"launch_omp_threads_follow_the_share", launch_omp_threads_follow_the_share},
    {NULL, NULL},
};

TT_CUNIT_MAIN("launch", tests)
