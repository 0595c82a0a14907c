/* GPU test of the NCCL watchdog: a collective that cannot complete (its
 * stream is held by a host function until released) is reported with
 * TT_ETIMEDOUT within the deadline, the communicator is revoked or
 * aborted (never destroyed), the waiting caller gets the verdict instead
 * of hanging, new collectives are refused, and destroy returns. Where
 * NCCL revokes, the communicator cut short that way is then fit to be
 * the parent of a shrink (the survivors of a failure derive the next
 * one from it), and freeing it as such returns. Exits 77 (skipped)
 * without NCCL support or a GPU, and says so. */
#include "tt_clock.h"
#include "tt_coll.h"
#include "tt_coll_nccl.h"
#include "tt_cuda.h"
#include "tt_status.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef TT_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#define DEADLINE_MS 500

typedef struct {
    atomic_int release, reports, status;
    atomic_ullong report_ms;
} gate_t;

static int failures;

#ifdef TT_HAVE_CUDA
static void check(int ok, const char *what) {
    printf("%s: %s\n", ok ? "ok  " : "FAIL", what);
    failures += !ok;
}

/* Runs on a CUDA host thread and holds the stream (at most 30 s). */
static void CUDART_CB hold_stream(void *arg) {
    gate_t *g = arg;
    uint64_t end = tt_clock_mono_ms() + 30000;
    struct timespec ts = {0, 1000000};
    while (!atomic_load(&g->release) && tt_clock_mono_ms() < end)
        nanosleep(&ts, NULL);
}

/* The reporter frees the stream so the abort that follows can complete. */
static void on_report(void *ctx, int suspect, int status, const char *why) {
    gate_t *g = ctx;
    (void)suspect;
    printf("  reported: %s (%s)\n", why, tt_status_name(status));
    atomic_store(&g->report_ms, (unsigned long long)tt_clock_mono_ms());
    atomic_store(&g->status, status);
    atomic_fetch_add(&g->reports, 1);
    atomic_store(&g->release, 1);
}

static void induce(const tt_coll_ops_t *ops, void *inst, gate_t *g) {
    float *d = NULL;
    check(cudaMalloc((void **)&d, 1024 * sizeof(float)) == cudaSuccess, "cudaMalloc");
    cudaStream_t s = (cudaStream_t)tt_coll_nccl_stream(inst);
    check(cudaLaunchHostFunc(s, hold_stream, g) == cudaSuccess, "hold the stream");
    uint64_t t0 = tt_clock_mono_ms();
    check(tt_coll_nccl_allreduce_device(inst, d, 1024, TT_DT_FLOAT32, TT_RED_SUM, NULL) == 0,
          "collective enqueued");
    int rc = tt_coll_nccl_wait(inst);
    uint64_t waited = tt_clock_mono_ms() - t0;
    printf("  wait returned %s after %llu ms\n", tt_status_name(rc), (unsigned long long)waited);
    check(rc == TT_ETIMEDOUT, "the waiter gets TT_ETIMEDOUT instead of hanging");
    /* The waiter sees the verdict as soon as it is decided; the report
     * follows on the watchdog thread, outside its lock. */
    for (int i = 0; i < 2000 && atomic_load(&g->reports) == 0; i++)
        tt_clock_sleep_us(1000);
    check(atomic_load(&g->reports) == 1 && atomic_load(&g->status) == TT_ETIMEDOUT,
          "reported once, as a timeout");
    uint64_t at = (uint64_t)atomic_load(&g->report_ms) - t0;
    check(at >= DEADLINE_MS - 5 && at < DEADLINE_MS + 500, "reported within the deadline");
    check(strstr(ops->last_error(inst), "has not completed within") != NULL,
          "last_error says what timed out");
    float f = 1.0f;
    check(ops->allreduce(inst, &f, 1, TT_DT_FLOAT32, TT_RED_SUM) < 0, "new collectives refused");
    atomic_store(&g->release, 1);
    cudaFree(d);
}

static void *run(const tt_coll_ops_t *ops, gate_t *g, uint64_t generation) {
    char err[512] = "";
    tt_coll_cfg_t cfg = {
        .rank = 0, .world = 1, .generation = generation, .deadline_ms = DEADLINE_MS};
    void *inst = NULL;
    int rc = ops->create(&inst, &cfg, err, sizeof(err));
    check(rc == 0, "create");
    if (rc != 0) {
        printf("  create: %s (%s)\n", err, tt_status_name(rc));
        return NULL;
    }
    tt_coll_nccl_set_reporter(inst, on_report, g);
    induce(ops, inst, g);
    return inst;
}

/* The waiter has the verdict before the revoke runs: take_parent waits
 * for it, and then hands over a revoked communicator, never an aborted
 * one. */
static void revoked_parent(const tt_coll_ops_t *ops) {
    gate_t *g = calloc(1, sizeof(*g));
    void *inst = run(ops, g, 2);
    if (inst == NULL) {
        free(g);
        return;
    }
    void *parent = tt_coll_nccl_take_parent(ops, &inst);
    printf("  after the timeout: %s (NCCL %s ncclCommRevoke)\n",
           parent != NULL ? "kept for a shrink" : "not kept",
           tt_coll_nccl_revokes() ? "has" : "lacks");
    check(inst == NULL && (parent != NULL) == (tt_coll_nccl_revokes() != 0),
          "a revoked communicator is kept for a shrink, an aborted one is not");
    uint64_t t0 = tt_clock_mono_ms();
    tt_coll_nccl_parent_free(parent);
    printf("  freeing it took %llu ms\n", (unsigned long long)(tt_clock_mono_ms() - t0));
    free(g);
}
#endif

int main(void) {
    char err[512] = "";
    int n = 0;
    if (!tt_coll_nccl_compiled() || tt_cuda_device_count(&n, err, sizeof(err)) != TT_OK) {
        printf("SKIPPED: %s\n", tt_coll_nccl_compiled() ? err : "built without NCCL");
        return 77;
    }
#ifdef TT_HAVE_CUDA
    setenv("TETHER_NCCL_ABORT_HANG", "log", 1); /* report a hung abort, keep the test alive */
    const tt_coll_ops_t *ops = tt_coll_ops(TT_COLL_NCCL);
    gate_t *g = calloc(1, sizeof(*g));
    void *inst = run(ops, g, 1);
    if (inst == NULL)
        return 1;
    uint64_t t0 = tt_clock_mono_ms();
    ops->destroy(&inst);
    printf("  destroy took %llu ms\n", (unsigned long long)(tt_clock_mono_ms() - t0));
    check(inst == NULL, "destroy returns and clears the pointer");
    free(g);
    revoked_parent(ops);
#endif
    printf("%s: %d failure(s)\n", failures ? "FAILED" : "PASSED", failures);
    return failures ? 1 : 0;
}
