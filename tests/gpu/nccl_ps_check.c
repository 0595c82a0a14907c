/* nccl_ps_check: the "nccl+ps" row on one GPU, against a real coordinator
 * and shard server that gpu_nccl_fallback.py starts. One rank: NCCL
 * refuses two ranks on one device, and the coordinator announces the
 * fallback only to worlds of two or more, so the row is created directly
 * with ps_until_step = 3. Checks:
 *   - steps 0-2 are whole steps on the shards, and a device step comes
 *     back as the sum (the shards' mean times the count) with the count;
 *   - step 3 switches to NCCL (the device data of a one-rank sum is the
 *     input, bit for bit) and so do plain collectives from then on;
 *   - an abort makes the next device step fail;
 *   - a second generation destroyed before its switch (its communicator
 *     never waited for) goes away promptly, the half-built one aborted.
 * Usage: nccl_ps_check --coordinator EP. Exits 77 without a GPU or NCCL,
 * 0 on success. */
#include "nccl_check.h"
#include "tt_clock.h"
#include "tt_coll.h"
#include "tt_status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef TT_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#define N    10000
#define FROM 3

static int failures;

#ifdef TT_HAVE_CUDA
static void check(int ok, const char *what) {
    printf("%s: %s\n", ok ? "ok  " : "FAIL", what);
    fflush(stdout);
    failures += !ok;
}

static tt_coll_cfg_t config(const char *coord, uint64_t gen, const size_t *count) {
    tt_coll_cfg_t cfg = {.rank = 0,
                         .world = 1,
                         .generation = gen,
                         .deadline_ms = 20000,
                         .coordinator = coord,
                         .job_id = "nccl-ps",
                         .worker_id = "w0",
                         .min_shards = 1,
                         .shard_wait_ms = 10000,
                         .tensor_counts = count,
                         .ntensors = 1,
                         .ps_until_step = FROM};
    return cfg;
}

/* One device step of `step`: uploads h, reduces, downloads into back. */
static int device_step(const tt_coll_ops_t *ops, void *inst, float *dg, const float *h, float *back,
                       int64_t step, double *global) {
    ops->set_step(inst, step);
    if (cudaMemcpy(dg, h, N * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess)
        return TT_ECUDA;
    int rc = ops->reduce_step_device(inst, dg, N, NULL, 0, 37.0, global, NULL, step);
    if (rc == TT_OK && cudaMemcpy(back, dg, N * sizeof(float), cudaMemcpyDeviceToHost))
        rc = TT_ECUDA;
    return rc;
}

static double max_rel(const float *a, const float *b) {
    double worst = 0.0;
    for (int i = 0; i < N; i++) {
        double d = fabs((double)a[i] - b[i]) / (fabs((double)b[i]) + 1e-30);
        worst = d > worst ? d : worst;
    }
    return worst;
}

static void steps(const tt_coll_ops_t *ops, void *inst, float *dg) {
    static float h[N], back[N];
    for (int i = 0; i < N; i++)
        h[i] = (float)(i % 17) * 0.25f - 1.0f + 1e-3f;
    for (int64_t s = 0; s < FROM + 3; s++) {
        double global = 0.0;
        int whole = ops->whole_step(inst, s);
        int rc = device_step(ops, inst, dg, h, back, s, &global);
        double e = rc == TT_OK ? max_rel(back, h) : 1.0;
        printf("  step %lld: %s, rc %s, count %.0f, largest relative change %.3g\n", (long long)s,
               whole ? "shards" : "nccl", tt_status_name(rc), global, e);
        check(whole == (s < FROM), "whole steps exactly before the announced step");
        check(rc == TT_OK && global == 37.0, "device step with its count");
        /* shards: mean x count is the sum up to rounding; NCCL: the input */
        check(s < FROM ? e < 1e-6 : e == 0.0, "one rank's sum is its gradients");
    }
    char *dump = ops->dump(inst);
    check(dump != NULL && strstr(dump, "nccl gen=1") != NULL, "NCCL serves after the switch");
    free(dump);
    float f[3] = {1.5f, -2.0f, 4.0f};
    ops->set_step(inst, FROM + 3);
    check(ops->allreduce(inst, f, 3, TT_DT_FLOAT32, TT_RED_SUM) == TT_OK && f[1] == -2.0f,
          "plain all-reduce on NCCL");
}

static int run(const char *coord) {
    size_t count = N;
    tt_coll_cfg_t cfg = config(coord, 1, &count);
    const tt_coll_ops_t *ops = tt_coll_nccl_ps_ops();
    void *inst = NULL;
    char err[512] = "";
    float *dg = NULL;
    int rc = ops->create(&inst, &cfg, err, sizeof(err));
    check(rc == TT_OK && strcmp(ops->name, "nccl+ps") == 0, "nccl+ps created");
    if (rc != TT_OK) {
        printf("  create: %s (%s)\n", err, tt_status_name(rc));
        return 1;
    }
    check(cudaMalloc((void **)&dg, N * sizeof(float)) == cudaSuccess, "cudaMalloc");
    if (dg != NULL)
        steps(ops, inst, dg);
    ops->abort(inst);
    double global = 0.0;
    check(dg != NULL &&
              ops->reduce_step_device(inst, dg, N, NULL, 0, 1.0, &global, NULL, FROM + 4) < 0,
          "a device step after the abort fails");
    ops->destroy(&inst);
    check(inst == NULL, "destroy clears the pointer");
    /* A generation that ends before its switch. */
    cfg = config(coord, 2, &count);
    rc = ops->create(&inst, &cfg, err, sizeof(err));
    check(rc == TT_OK, "a second generation created");
    uint64_t t0 = tt_clock_mono_ms();
    if (rc == TT_OK) {
        ops->abort(inst);
        ops->destroy(&inst);
    }
    uint64_t ms = tt_clock_mono_ms() - t0;
    printf("  destroyed before its switch in %llu ms\n", (unsigned long long)ms);
    check(ms < 15000, "a communicator never waited for goes away promptly");
    cudaFree(dg);
    return 0;
}
#endif

int main(int argc, char **argv) {
    int n = 0, rc = nccl_check_start(argc, argv, "nccl_ps_check", &n);
    if (rc != 0)
        return rc;
#ifdef TT_HAVE_CUDA
    if (run(argv[2]) != 0)
        failures++;
#endif
    printf("%s: %d failure(s)\n", failures ? "FAILED" : "PASSED", failures);
    return failures ? 1 : 0;
}
