/* tt_train_stop: SIGTERM and SIGINT for a worker of a tether job. A pod
 * eviction, a node drain or a supervisor sends SIGTERM to one worker; dying
 * at once makes every other rank fail its step in flight and redo it. With
 * these handlers the step loop asks the coordinator to take the worker out
 * at the next step boundary (tether_drain), as `tetherctl drain` does, and
 * the worker ends there. A stop thread bounds the wait: before the first
 * step, after a second signal, or once `grace_s` has passed, it ends the
 * process at once with 128 + the signal's number, the status a shell gives
 * a process killed by it, so supervisors restart it as before.
 * The signal's number is the one piece of process-wide state: a handler
 * can reach nothing else. */
#ifndef TT_TRAIN_STOP_H
#define TT_TRAIN_STOP_H

/* Blocks SIGTERM and SIGINT in the calling thread (and so in every thread
 * it starts afterwards: no system call of ours sees EINTR), installs the
 * handler, and starts the stop thread, which alone takes them (and any
 * thread started before, e.g. a BLAS pool, may run the handler). Call once
 * from main() before starting other threads. 0, or -1 with errno. */
int tt_train_stop_install(double grace_s);

/* The signal received (SIGTERM or SIGINT), 0 when none. */
int tt_train_stop_signal(void);

/* "SIGINT" or "SIGTERM", for the lines that say why a worker left. */
const char *tt_train_stop_name(int sig);

/* The step loop runs: a signal from now on waits for the step boundary
 * (up to grace_s) instead of ending the process at once. */
void tt_train_stop_stepping(void);

#endif
