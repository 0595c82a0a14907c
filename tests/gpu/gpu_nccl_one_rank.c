/* GPU test of the NCCL backend with one rank: create through the ops table
 * (non-blocking init, unique id drawn locally), host-buffer all-reduce /
 * broadcast / barrier, a device all-reduce ordered after an event, the
 * step reduction that carries the example count, a device the process
 * does not see refused with a sentence, and abort: afterwards
 * every collective is refused and destroy returns cleanly. Exits 77
 * (skipped) without NCCL support or a GPU, and says so. */
#include "tt_coll.h"
#include "tt_coll_nccl.h"
#include "tt_cuda.h"
#include "tt_status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef TT_HAVE_CUDA
#include <cuda_runtime.h>
#endif

static int failures;

#ifdef TT_HAVE_CUDA
static void check(int ok, const char *what) {
    printf("%s: %s\n", ok ? "ok  " : "FAIL", what);
    failures += !ok;
}

static void host_collectives(const tt_coll_ops_t *ops, void *inst) {
    float f[1000];
    for (int i = 0; i < 1000; i++)
        f[i] = (float)i * 0.5f;
    check(ops->allreduce(inst, f, 1000, TT_DT_FLOAT32, TT_RED_SUM) == 0, "host allreduce");
    check(f[0] == 0.0f && f[999] == 499.5f, "one rank: the sum is the input");
    int64_t l[3] = {5, -7, 1LL << 40};
    check(ops->allreduce(inst, l, 3, TT_DT_INT64, TT_RED_MAX) == 0 && l[2] == (1LL << 40),
          "int64 max");
    double d[2] = {1.25, 2.5};
    check(ops->broadcast(inst, d, 2, TT_DT_FLOAT64, 0) == 0 && d[1] == 2.5, "broadcast");
    check(ops->broadcast(inst, d, 2, TT_DT_FLOAT64, 3) == TT_EINVAL, "bad root refused");
    check(ops->barrier(inst) == 0, "barrier");
}

#define NDEV 4096

/* A device copy of h[0..NDEV) and an event recorded after it. */
static float *upload(const float *h, cudaEvent_t *ev) {
    float *dbuf = NULL;
    check(cudaMalloc((void **)&dbuf, NDEV * sizeof(float)) == cudaSuccess, "cudaMalloc");
    check(cudaEventCreate(ev) == cudaSuccess, "cudaEventCreate");
    check(cudaMemcpy(dbuf, h, NDEV * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess,
          "upload");
    check(cudaEventRecord(*ev, 0) == cudaSuccess, "record producer event");
    return dbuf;
}

/* A one-rank sum leaves the data as it was. */
static int unchanged(const float *dbuf, const float *h) {
    float back[NDEV];
    return cudaMemcpy(back, dbuf, sizeof(back), cudaMemcpyDeviceToHost) == cudaSuccess &&
           memcmp(back, h, sizeof(back)) == 0;
}

static void device_collectives(void *inst) {
    float h[NDEV];
    cudaEvent_t ev = NULL;
    for (int i = 0; i < NDEV; i++)
        h[i] = (float)(i % 13);
    float *dbuf = upload(h, &ev);
    check(tt_coll_nccl_allreduce_device(inst, dbuf, 2048, TT_DT_FLOAT32, TT_RED_SUM, ev) == 0,
          "device allreduce enqueued");
    double global = 0.0;
    check(tt_coll_nccl_reduce_step_device(inst, dbuf, NDEV, NULL, 0, 37.0, &global, ev) == 0,
          "device step reduction");
    check(global == 37.0, "example count travels with the gradients");
    check(unchanged(dbuf, h), "device data unchanged by a one-rank sum");
    cudaEventDestroy(ev);
    cudaFree(dbuf);
}

/* Bucket overlap: two layers handed over early behind the producer's
 * event, the step's end reduces what they left; overlapping parts are
 * refused at the end and do not poison the communicator. */
static void device_parts(const tt_coll_ops_t *ops, void *inst) {
    float h[NDEV];
    cudaEvent_t ev = NULL;
    for (int i = 0; i < NDEV; i++)
        h[i] = (float)(i % 29) - 7.0f;
    float *dbuf = upload(h, &ev);
    ops->set_step(inst, 11);
    check(ops->reduce_part_device(inst, dbuf + 3000, 1096, ev, 11) == 0,
          "last layer enqueued early");
    check(ops->reduce_part_device(inst, dbuf, 1000, ev, 11) == 0, "first layer enqueued early");
    double global = 0.0;
    tt_coll_span_t early[2] = {{3000, 1096}, {0, 1000}};
    check(ops->reduce_step_device(inst, dbuf, NDEV, early, 2, 5.0, &global, NULL, 11) == 0,
          "the step's end reduces the rest");
    check(global == 5.0, "example count after early parts");
    check(unchanged(dbuf, h), "parts and rest leave a one-rank sum unchanged");
    ops->set_step(inst, 12);
    check(ops->reduce_part_device(inst, dbuf + 100, 50, NULL, 12) == 0, "part of step 12");
    check(ops->reduce_part_device(inst, dbuf + 120, 50, NULL, 12) == 0, "overlapping part");
    tt_coll_span_t overlap[2] = {{100, 50}, {120, 50}};
    /* The instance keeps the first error's sentence (the bad root above),
     * so only the status tells this refusal. */
    check(ops->reduce_step_device(inst, dbuf, NDEV, overlap, 2, 1.0, &global, NULL, 12) ==
              TT_EINVAL,
          "overlapping parts refused at the step's end");
    check(ops->reduce_step_device(inst, dbuf, NDEV, NULL, 0, 2.0, &global, NULL, 12) == 0 &&
              global == 2.0,
          "the communicator still works after the refusal");
    cudaEventDestroy(ev);
    cudaFree(dbuf);
}

/* A shrink needs a second rank to survive, which one GPU cannot hold (NCCL
 * refuses two ranks on a device); what runs here is the hand-over of a
 * healthy communicator, the refusal of a list that leaves nobody, and a
 * fresh communicator when there is nothing to shrink. */
static void shrink_refusals(const tt_coll_ops_t *ops) {
    char err[512] = "";
    tt_coll_cfg_t cfg = {.rank = 0, .world = 1, .generation = 7, .deadline_ms = 20000};
    void *old = NULL, *shrunk = NULL;
    if (ops->create(&old, &cfg, err, sizeof(err)) != 0) {
        check(0, "a second instance for the shrink checks");
        return;
    }
    void *parent = tt_coll_nccl_take_parent(ops, &old);
    check(parent != NULL && old == NULL, "a healthy communicator is handed over for a shrink");
    tt_coll_shrink_t s = {.of = 7, .n = 1, .exclude = {0}};
    tt_coll_cfg_t next = {.rank = 0,
                          .world = 1,
                          .generation = 8,
                          .deadline_ms = 20000,
                          .shrink = &s,
                          .parent = parent};
    check(ops->create(&shrunk, &next, err, sizeof(err)) == TT_EINVAL && shrunk == NULL &&
              strstr(err, "bad exclude list") != NULL,
          "a shrink that leaves nobody is refused before any NCCL call");
    next.parent = NULL;
    check(ops->create(&shrunk, &next, err, sizeof(err)) == TT_OK && shrunk != NULL,
          "an announced shrink without a communicator to shrink builds a fresh one");
    ops->destroy(&shrunk);
}

/* The communicator's device is the worker's (tt_coll_cfg_t.device), set
 * on the creating thread: one this process does not see is refused
 * before any NCCL call, naming it and the count. */
static void device_choice(const tt_coll_ops_t *ops, int ndev) {
    char err[512] = "";
    tt_coll_cfg_t cfg = {.rank = 0, .world = 1, .generation = 9, .deadline_ms = 20000};
    cfg.device = ndev;
    void *inst = NULL;
    int rc = ops->create(&inst, &cfg, err, sizeof(err));
    char want[64];
    snprintf(want, sizeof(want), "CUDA device %d", ndev);
    printf("  device %d of %d: %s (%s)\n", ndev, ndev, err, tt_status_name(rc));
    check(rc == TT_ENODEV && inst == NULL && strstr(err, want) != NULL,
          "a device the process does not see is refused");
    int cur = -1;
    check(cudaGetDevice(&cur) == cudaSuccess && cur == 0, "the caller's device is left alone");
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
    const tt_coll_ops_t *ops = tt_coll_ops(TT_COLL_NCCL);
    tt_coll_cfg_t cfg = {.rank = 0, .world = 1, .generation = 3, .deadline_ms = 20000};
    void *inst = NULL;
    int rc = ops->create(&inst, &cfg, err, sizeof(err));
    if (rc != 0) {
        printf("FAILED: create: %s (%s)\n", err, tt_status_name(rc));
        return 1;
    }
    check(strcmp(ops->name, "nccl") == 0, "ops table row is the NCCL backend");
    host_collectives(ops, inst);
    device_collectives(inst);
    device_parts(ops, inst);
    char *dump = ops->dump(inst);
    check(dump != NULL && strstr(dump, "gen=3") != NULL, "dump names the generation");
    free(dump);
    shrink_refusals(ops);
    device_choice(ops, n);
    ops->abort(inst);
    float f = 1.0f;
    rc = ops->allreduce(inst, &f, 1, TT_DT_FLOAT32, TT_RED_SUM);
    check(rc == TT_ECLOSED || rc < 0, "collectives refused after abort");
    ops->destroy(&inst);
    check(inst == NULL, "destroy clears the pointer");
#endif
    printf("%s: %d failure(s)\n", failures ? "FAILED" : "PASSED", failures);
    return failures ? 1 : 0;
}
