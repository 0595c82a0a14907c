/* tt_train_ckpt_thread: the one thread that runs a trainer checkpoint's
 * background work (a part writer, rank 0's commit), started before the
 * first checkpoint and kept for the object's life, at SCHED_BATCH, and
 * when the hand-over of a job happens.
 *
 * On a host whose CPUs the workers and shard servers keep busy, the step
 * loop lost its CPU at the boundary that handed a job over, and then
 * waited behind whatever else was queued on that CPU (a shard server's
 * 23 MB copy); with the update on the shards this was most of a
 * checkpoint's stall. Three causes, measured inside the boundary: a new
 * thread per job is owed CPU time and runs in place of its creator
 * (pthread_create returned after 0.5-6 ms); a woken thread of the normal
 * policy does the same (hence SCHED_BATCH, which the scheduler never runs
 * in place of the thread that wakes it, while it keeps its normal share
 * of the CPU); and any system call lets the kernel act on a preemption
 * already due (the step loop has used its time slice and others wait),
 * so even the futex wake of a SCHED_BATCH thread returned after 1-5 ms
 * now and then. So a job that need not start at once (one that copies no
 * snapshot: the trainer part with the update on the shards, a commit) is
 * handed over with tt_tc_thread_flush, which the collective gate calls
 * just before the step loop wakes its communication thread and sleeps
 * for the step's reduction, a system call it makes anyway; a job with a
 * snapshot to copy, or without a gate, goes at once. */
#include "tt_train_ckpt_int.h"

#include "tt_log.h"
#include "tt_status.h"

#include <pthread.h>
#include <sched.h>
#include <string.h>

static void *thread_main(void *arg) {
    tt_train_ckpt_t *c = arg;
    struct sched_param sp;
    memset(&sp, 0, sizeof(sp));
    int e = pthread_setschedparam(pthread_self(), SCHED_BATCH, &sp);
    if (e != 0)
        TT_WARN("ckpt", "checkpoint thread stays at the normal policy: %s", strerror(e));
    pthread_mutex_lock(&c->run_mu);
    for (;;) {
        while (c->run_fn == NULL && !c->run_stop)
            pthread_cond_wait(&c->run_cv, &c->run_mu);
        if (c->run_fn == NULL)
            break;
        void *(*fn)(void *) = c->run_fn;
        void *fn_arg = c->run_arg;
        pthread_mutex_unlock(&c->run_mu);
        fn(fn_arg);
        pthread_mutex_lock(&c->run_mu);
        c->run_fn = NULL;
        pthread_cond_broadcast(&c->run_cv);
    }
    pthread_mutex_unlock(&c->run_mu);
    return NULL;
}

int tt_tc_thread_start(tt_train_ckpt_t *c) {
    if (c->thr_started)
        return TT_OK;
    if (pthread_create(&c->thr, NULL, thread_main, c) != 0)
        return TT_ESYS;
    c->thr_started = 1;
    return TT_OK;
}

static void hand_over(tt_train_ckpt_t *c, void *(*fn)(void *), void *arg) {
    pthread_mutex_lock(&c->run_mu);
    c->run_fn = fn;
    c->run_arg = arg;
    pthread_cond_signal(&c->run_cv);
    pthread_mutex_unlock(&c->run_mu);
}

int tt_tc_thread_run(tt_train_ckpt_t *c, void *(*fn)(void *), void *arg, int later) {
    if (tt_tc_thread_start(c) != TT_OK)
        return TT_ESYS;
    c->thr_live = 1;
    if (later && c->gated) {
        c->later_fn = fn;
        c->later_arg = arg;
    } else {
        hand_over(c, fn, arg);
    }
    return TT_OK;
}

void tt_tc_thread_flush(tt_train_ckpt_t *c) {
    if (c->later_fn == NULL)
        return;
    hand_over(c, c->later_fn, c->later_arg);
    c->later_fn = NULL;
}

void tt_tc_thread_wait(tt_train_ckpt_t *c) {
    if (!c->thr_live)
        return;
    tt_tc_thread_flush(c);
    pthread_mutex_lock(&c->run_mu);
    while (c->run_fn != NULL)
        pthread_cond_wait(&c->run_cv, &c->run_mu);
    pthread_mutex_unlock(&c->run_mu);
    c->thr_live = 0;
}

void tt_tc_thread_stop(tt_train_ckpt_t *c) {
    tt_tc_thread_wait(c);
    if (!c->thr_started)
        return;
    pthread_mutex_lock(&c->run_mu);
    c->run_stop = 1;
    pthread_cond_signal(&c->run_cv);
    pthread_mutex_unlock(&c->run_mu);
    pthread_join(c->thr, NULL);
    c->thr_started = 0;
}
