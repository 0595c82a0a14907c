/* bench_checkpoint: trainer-side checkpoints (tt_train_ckpt) of the
 * 784-2048-2048-10 MLP (5.8M parameters, SGD with momentum: two state
 * planes, 46.6 MB) against the disk, measured in the same run, same
 * directory, same byte count:
 *   disk direct   : O_DIRECT writes of 4 MiB aligned blocks, then fsync
 *                   (what `dd oflag=direct bs=4M` measures);
 *   disk buffered : plain 4 MiB write()s, then fsync;
 *   ckpt idle     : one checkpoint with the step loop waiting for it: the
 *                   part writes (CRC-32C, fsync, rename, directory fsync)
 *                   after the snapshot — write throughput;
 *   ckpt training : checkpoints every K steps while training continues;
 *                   the write overlaps the steps.
 * and the training stall per checkpoint: the time the step loop spends in
 * the boundary hook when it starts one (the snapshot memcpy), against the
 * mean step time without checkpoints (batch 256, synthetic data, 1 BLAS
 * thread, single rank: every rank of a W-rank job snapshots 1/W of it).
 * The disk and idle rows are `rounds` alternations (default 5); they print
 * medians, the idle one as a share of the disk's median and the range of
 * the same share round by round. Every run writes into an empty root.
 * Usage: bench_checkpoint [DIR] [steps] [rounds]; DIR defaults to "." (use
 * a real disk, not tmpfs). A benchmark, not a test: it asserts nothing. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* O_DIRECT */
#endif
#include "tt_clock.h"
#include "tt_status.h"
#include "tt_train_ckpt.h"
#include "tt_trainer.h"

#include <cblas.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLOCK ((size_t)4 << 20)
#define NEX   4096

typedef struct {
    char dir[4096];
    tt_idx_set_t set;
    tt_trainer_opts_t o;
    tt_train_coll_t coll;
} bench_t;

static double secs_since(uint64_t t0) {
    return (double)(tt_clock_mono_ns() - t0) / 1e9;
}

/* bytes (rounded up to BLOCK) written with write() and fsync; seconds. */
static double disk_write(const char *dir, uint64_t bytes, int direct) {
    char path[4200];
    snprintf(path, sizeof(path), "%s/bench-raw.bin", dir);
    void *buf = NULL;
    if (posix_memalign(&buf, 4096, BLOCK) != 0)
        return -1;
    memset(buf, 0x5a, BLOCK);
    uint64_t t0 = tt_clock_mono_ns();
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | (direct ? O_DIRECT : 0), 0644);
    double s = -1;
    uint64_t done = 0;
    while (fd >= 0 && done < bytes && write(fd, buf, BLOCK) == (ssize_t)BLOCK)
        done += BLOCK;
    if (fd >= 0 && done >= bytes && fsync(fd) == 0)
        s = secs_since(t0);
    if (fd >= 0)
        close(fd);
    unlink(path);
    free(buf);
    return s;
}

static int bench_init(bench_t *b, const char *dir, uint64_t steps) {
    snprintf(b->dir, sizeof(b->dir), "%s/bench-ckpt-%d", dir, (int)getpid());
    float *x = malloc((size_t)NEX * 784 * sizeof(float));
    uint8_t *y = malloc(NEX);
    if (x == NULL || y == NULL) {
        free(x);
        free(y);
        return -1;
    }
    uint64_t s = 99;
    for (size_t i = 0; i < (size_t)NEX * 784; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (float)(s >> 40) / 16777216.0f;
    }
    for (int i = 0; i < NEX; i++)
        y[i] = (uint8_t)(i % 10);
    b->set = (tt_idx_set_t){x, y, NEX, 28, 28, NEX, NULL};
    b->o = (tt_trainer_opts_t){.nlayers = 3,
                               .dims = {784, 2048, 2048, 10},
                               .epochs = 100,
                               .batch = 256,
                               .seed = 1,
                               .max_steps = steps,
                               .opt = TT_OPT_SGD};
    b->o.sgd = (tt_optim_sgd_hp_t){0.9f, 1e-4f, 1};
    b->o.sched = (tt_lr_sched_t){TT_LR_CONST, 0.01, 0.0, 0, 0};
    tt_train_coll_local(&b->coll);
    return 0;
}

typedef struct {
    tt_train_ckpt_t *ck;
    uint64_t last_ns, step_ns_total, steps;
} loop_t;

static void on_step(void *ctx, const tt_step_report_t *r) {
    (void)r;
    loop_t *l = ctx;
    uint64_t now = tt_clock_mono_ns();
    l->step_ns_total += now - l->last_ns;
    l->steps++;
    if (l->ck != NULL)
        tt_train_ckpt_boundary(l->ck, tt_clock_mono_ms());
    l->last_ns = tt_clock_mono_ns();
}

typedef struct {
    double step_s;   /* mean step time (hook excluded) */
    double finish_s; /* waiting for the last checkpoint at the end */
    tt_train_ckpt_stats_t st;
} result_t;

/* Every run starts from an empty root: a checkpoint written over the last
 * run's same-named one would free the old part's blocks inside its timed
 * rename (about 8 ms for 46 MB on ext4), which a job never pays (a step is
 * checkpointed once; retention deletes later, off the write path). */
static void clear_root(const bench_t *b) {
    char cmd[4200];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", b->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_checkpoint: could not remove %s\n", b->dir);
}

/* Trains `steps` steps, checkpointing every `every` (0: none). */
static int run(bench_t *b, uint64_t steps, uint64_t every, int gated, result_t *res) {
    memset(res, 0, sizeof(*res));
    clear_root(b);
    b->o.max_steps = steps;
    tt_trainer_t *t = NULL;
    loop_t l = {0};
    char err[512] = "";
    tt_idx_set_t test = b->set;
    test.count = 256; /* evaluation at the end of a run must not hide the write */
    tt_train_ckpt_gate_t gate;
    tt_train_ckpt_gate_init(&gate, &b->coll);
    int rc = tt_trainer_create(&t, &b->o, &b->set, &test, gated ? &gate.coll : &b->coll, err,
                               sizeof(err));
    tt_train_ckpt_opts_t co = {b->dir, every, 0.0, 2, "bench", &b->o, NULL, 0};
    if (rc == TT_OK && every > 0)
        rc = tt_train_ckpt_create(&l.ck, &co, t, &b->coll, err, sizeof(err));
    if (rc == TT_OK && gated)
        tt_train_ckpt_gate_attach(&gate, l.ck);
    tt_epoch_stats_t es;
    l.last_ns = tt_clock_mono_ns();
    while (rc == TT_OK && tt_trainer_global_step(t) < steps)
        rc = tt_trainer_run_epoch(t, on_step, &l, &es);
    uint64_t f0 = tt_clock_mono_ns();
    if (rc == TT_OK && l.ck != NULL && (rc = tt_train_ckpt_finish(l.ck)) < 0)
        snprintf(err, sizeof(err), "%s", tt_train_ckpt_error(l.ck));
    res->finish_s = secs_since(f0);
    res->step_s = l.steps ? (double)l.step_ns_total / 1e9 / (double)l.steps : 0.0;
    if (l.ck != NULL)
        tt_train_ckpt_stats(l.ck, &res->st);
    tt_train_ckpt_gate_attach(&gate, NULL);
    if (rc < 0)
        fprintf(stderr, "bench_checkpoint: %s (%s)\n", err, tt_strerror(rc));
    tt_train_ckpt_destroy(&l.ck);
    tt_trainer_destroy(&t);
    return rc;
}

static double pct(double part, double whole) {
    return whole > 0 ? 100.0 * part / whole : 0.0;
}

/* The stall rows: the gated hook (snapshot on the writer thread) against
 * the copy at the boundary, both against a step without checkpoints. */
static void print_stall(const result_t *plain, const result_t *busy, const result_t *sync,
                        uint64_t steps) {
    double stall = (double)busy->st.stall_ns_max / 1e9;
    double sstall = (double)sync->st.stall_ns_max / 1e9;
    double snap = (double)busy->st.snapshot_ns_max / 1e9;
    printf("\nstep time without checkpoints      %9.3f s (mean of %llu steps)\n", plain->step_s,
           (unsigned long long)steps);
    printf("step time with checkpoints         %9.3f s (hook excluded)\n", busy->step_s);
    printf("stall per checkpoint (gated)       %9.4f s = %.2f %% of a step (%llu checkpoints, "
           "%llu committed)\n",
           stall, pct(stall, plain->step_s), (unsigned long long)busy->st.started,
           (unsigned long long)busy->st.committed);
    printf("  snapshot memcpy (writer thread)  %9.4f s = %.2f %% of a step\n", snap,
           pct(snap, plain->step_s));
    printf("stall with the copy at the boundary %8.4f s = %.2f %% of a step (no gate)\n", sstall,
           pct(sstall, plain->step_s));
    printf("mean hook time per step            %9.6f s\n",
           busy->st.boundaries ? (double)busy->st.stall_ns_total / 1e9 / (double)busy->st.boundaries
                               : 0.0);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *v, int n) {
    double t[64];
    memcpy(t, v, (size_t)n * sizeof(double));
    qsort(t, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

/* Idle checkpoints and the disk, interleaved round by round so that a
 * noisy spell hits both alike: seconds per round. */
typedef struct {
    int n;
    double direct[32], buffered[32], ckpt[32];
    uint64_t bytes;
} idle_t;

static int run_idle(bench_t *b, idle_t *r) {
    for (int i = 0; i < r->n; i++) {
        result_t c;
        int rc = run(b, 1, 1, 0, &c); /* one step, then a checkpoint nobody overlaps */
        if (rc != TT_OK)
            return rc;
        r->bytes = c.st.last_bytes;
        r->ckpt[i] = (double)c.st.last_write_ns / 1e9;
        r->direct[i] = disk_write(b->dir, r->bytes, 1);
        r->buffered[i] = disk_write(b->dir, r->bytes, 0);
    }
    return TT_OK;
}

/* Median throughput as a share of the disk's median, and the spread of
 * the same share round by round. */
static void idle_row(const char *what, const idle_t *r, const double *t) {
    double ratio[32] = {0};
    for (int i = 0; i < r->n; i++)
        ratio[i] = t[i] > 0 ? 100.0 * r->direct[i] / t[i] : 0;
    double lo = ratio[0], hi = ratio[0];
    for (int i = 1; i < r->n; i++) {
        lo = ratio[i] < lo ? ratio[i] : lo;
        hi = ratio[i] > hi ? ratio[i] : hi;
    }
    double s = median(t, r->n), d = median(r->direct, r->n);
    printf("%-34s %9.1f MB %9.3f s %9.1f MB/s %7.0f %% %8.0f-%.0f %%\n", what,
           (double)r->bytes / 1e6, s, (double)r->bytes / s / 1e6, 100.0 * d / s, lo, hi);
}

static void print_io(const char *dir, const idle_t *r, const result_t *busy) {
    double d = median(r->direct, r->n);
    printf("bench_checkpoint: 784-2048-2048-10 MLP, SGD+momentum, %llu bytes per checkpoint, "
           "dir %s, %d rounds\n\n",
           (unsigned long long)r->bytes, dir, r->n);
    printf("%-34s %12s %11s %14s %9s %11s\n", "what (median of the rounds)", "bytes", "time",
           "throughput", "of direct", "per round");
    printf("%-34s %9.1f MB %9.3f s %9.1f MB/s\n", "disk direct (O_DIRECT+fsync)",
           (double)r->bytes / 1e6, d, (double)r->bytes / d / 1e6);
    double bf = median(r->buffered, r->n);
    printf("%-34s %9.1f MB %9.3f s %9.1f MB/s %7.0f %%\n", "disk buffered (write+fsync)",
           (double)r->bytes / 1e6, bf, (double)r->bytes / bf / 1e6, 100.0 * d / bf);
    idle_row("ckpt idle: part write (thread)", r, r->ckpt);
    double s = (double)busy->st.last_write_ns / 1e9;
    printf("%-34s %9.1f MB %9.3f s %9.1f MB/s %7.0f %%\n", "ckpt while training (last one)",
           (double)busy->st.last_bytes / 1e6, s, (double)busy->st.last_bytes / s / 1e6,
           100.0 * d / s);
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : ".";
    uint64_t steps = argc > 2 ? strtoull(argv[2], NULL, 10) : 12;
    int rounds = argc > 3 ? atoi(argv[3]) : 5;
    openblas_set_num_threads(1);
    bench_t b;
    if (steps < 4 || rounds < 1 || rounds > 32 || bench_init(&b, dir, steps) < 0) {
        fprintf(stderr, "usage: bench_checkpoint [DIR] [steps >= 4] [rounds 1..32]\n");
        return 2;
    }
    idle_t idle = {.n = rounds};
    result_t plain = {0}, busy = {0}, sync = {0};
    int rc = run_idle(&b, &idle);
    if (rc == TT_OK)
        rc = run(&b, steps, 0, 0, &plain);
    if (rc == TT_OK)
        rc = run(&b, steps, steps / 4, 1, &busy);
    if (rc == TT_OK)
        rc = run(&b, steps, steps / 4, 0, &sync);
    if (rc == TT_OK) {
        print_io(dir, &idle, &busy);
        print_stall(&plain, &busy, &sync, steps);
    }
    clear_root(&b);
    free(b.set.images);
    free(b.set.labels);
    return rc < 0 ? 1 : 0;
}
