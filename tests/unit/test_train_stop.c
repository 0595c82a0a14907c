/* Unit tests of tt_train_stop. Its handlers and stop thread are
 * process-wide, so each case runs in a child process and the parent reads
 * its exit status and timing: a signal before the first step ends the
 * child at once with 128 + the signal's number; after the first step the
 * child lives on and sees the signal until the grace period ends it; a
 * second signal ends it at once whatever the grace. Leaving at the step
 * boundary itself needs a coordinator: tests/integration/test_failover.py
 * test_sigterm_leaves_at_a_step_boundary. */
#include "tt_clock.h"
#include "tt_cunit.h"
#include "tt_train_stop.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
    double grace_s;
    int stepping;  /* the step loop has started */
    int second;    /* signal sent once the first was seen (0: none) */
    int saw_first; /* parent: the child reported seeing the first signal */
    int status;    /* parent: waitpid's */
    uint64_t took_ms;
} stop_case_t;

/* The child: installs, sends itself SIGTERM, reports through `fd` when it
 * sees the signal, and outlives any expected end by far. */
static void child(const stop_case_t *k, int fd) {
    if (tt_train_stop_install(k->grace_s) != 0)
        _exit(90);
    if (k->stepping)
        tt_train_stop_stepping();
    kill(getpid(), SIGTERM);
    for (int i = 0; i < 200 && tt_train_stop_signal() == 0; i++)
        tt_clock_sleep_ms(5);
    if (tt_train_stop_signal() == SIGTERM && write(fd, "s", 1) != 1)
        _exit(91);
    if (k->second != 0)
        kill(getpid(), k->second);
    tt_clock_sleep_ms(20000);
    _exit(0);
}

static void run_case(stop_case_t *k) {
    int fds[2];
    CU_ASSERT_EQUAL_FATAL(pipe(fds), 0);
    uint64_t t0 = tt_clock_mono_ms();
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        child(k, fds[1]);
    }
    close(fds[1]);
    CU_ASSERT_EQUAL(waitpid(pid, &k->status, 0), pid);
    k->took_ms = tt_clock_mono_ms() - t0;
    char b;
    k->saw_first = read(fds[0], &b, 1) == 1;
    close(fds[0]);
}

static int exit_code(const stop_case_t *k) {
    return WIFEXITED(k->status) ? WEXITSTATUS(k->status) : -WTERMSIG(k->status);
}

/* Before the first step there is no boundary to leave at: at once. */
static void train_stop_before_the_first_step_ends_at_once(void) {
    stop_case_t k = {.grace_s = 30.0};
    run_case(&k);
    CU_ASSERT_EQUAL(exit_code(&k), 128 + SIGTERM);
    CU_ASSERT(k.took_ms < 10000);
}

/* In the step loop the process lives on (the loop asks to leave at the
 * boundary) for the grace period, then ends with the same status. */
static void train_stop_waits_for_the_boundary_up_to_the_grace(void) {
    stop_case_t k = {.grace_s = 0.5, .stepping = 1};
    run_case(&k);
    CU_ASSERT_EQUAL(exit_code(&k), 128 + SIGTERM);
    CU_ASSERT_EQUAL(k.saw_first, 1);
    CU_ASSERT(k.took_ms >= 500 && k.took_ms < 15000);
}

/* A second signal does not wait for the grace. */
static void train_stop_second_signal_ends_at_once(void) {
    stop_case_t k = {.grace_s = 60.0, .stepping = 1, .second = SIGINT};
    run_case(&k);
    CU_ASSERT_EQUAL(exit_code(&k), 128 + SIGINT);
    CU_ASSERT_EQUAL(k.saw_first, 1);
    CU_ASSERT(k.took_ms < 15000);
}

static const tt_cunit_test_t tests[] = {
    {"train_stop_before_the_first_step_ends_at_once",
     train_stop_before_the_first_step_ends_at_once},
    {"train_stop_waits_for_the_boundary_up_to_the_grace",
     train_stop_waits_for_the_boundary_up_to_the_grace},
    {"train_stop_second_signal_ends_at_once", train_stop_second_signal_ends_at_once},
    {NULL, NULL},
};

TT_CUNIT_MAIN("train_stop", tests)
