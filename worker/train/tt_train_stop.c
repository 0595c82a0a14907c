/* tt_train_stop: the signal handler, and the stop thread that bounds the
 * wait for the step boundary (tt_train_stop.h says why). The handler only
 * records the signal, or ends the process on a second one; everything that
 * is not async-signal-safe happens in the stop thread or the step loop. */
#include "tt_train_stop.h"

#include "tt_clock.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define STOP_POLL_MS 20

_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "a signal handler needs a lock-free int");

/* A handler reaches nothing but statics; the rest is set before any
 * signal can arrive and read by the stop thread. */
static atomic_int stop_sig; /* lock-free, so the handler may use it */
static atomic_int stop_stepping;
static uint64_t stop_grace_ms;

const char *tt_train_stop_name(int sig) {
    return sig == SIGINT ? "SIGINT" : "SIGTERM";
}

static void on_signal(int sig) {
    if (atomic_exchange(&stop_sig, sig) == 0)
        return;
    static const char msg[] = "tether-train: a second stop signal: stopping now\n";
    ssize_t w = write(STDERR_FILENO, msg, sizeof(msg) - 1);
    (void)w;
    _exit(128 + sig);
}

static void end_now(int sig, const char *why) {
    fflush(stdout);
    fprintf(stderr, "tether-train: %s %s: stopping now\n", tt_train_stop_name(sig), why);
    _exit(128 + sig);
}

static void *stop_main(void *arg) {
    (void)arg;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    uint64_t deadline = 0;
    for (;;) {
        tt_clock_sleep_ms(STOP_POLL_MS);
        int sig = atomic_load(&stop_sig);
        if (sig == 0)
            continue;
        if (!atomic_load(&stop_stepping))
            end_now(sig, "before the first step, so there is no step boundary to leave at");
        uint64_t now = tt_clock_mono_ms();
        if (deadline == 0)
            deadline = now + stop_grace_ms;
        else if (now >= deadline)
            end_now(sig, "and no step boundary within --stop-grace-s");
    }
    return NULL;
}

int tt_train_stop_install(double grace_s) {
    stop_grace_ms = grace_s > 0 ? (uint64_t)(grace_s * 1000.0) : 0;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    int rc = pthread_sigmask(SIG_BLOCK, &set, NULL);
    pthread_t thr;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (rc == 0 && (rc = pthread_create(&thr, &attr, stop_main, NULL)) != 0)
        pthread_sigmask(SIG_UNBLOCK, &set, NULL); /* nobody would take them */
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        errno = rc;
        return -1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART; /* a BLAS thread may run it: its calls go on */
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGTERM, &sa, NULL) != 0 || sigaction(SIGINT, &sa, NULL) != 0)
        return -1;
    return 0;
}

int tt_train_stop_signal(void) {
    return atomic_load(&stop_sig);
}

void tt_train_stop_stepping(void) {
    atomic_store(&stop_stepping, 1);
}
