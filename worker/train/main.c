/* tether-train: the reference trainer (an MLP on Fashion-MNIST). This file
 * owns the command line (one option table drives parsing and --help), the
 * choice of backend, and the wiring of loader, trainer and progress output;
 * exit codes are 0 (trained, or the job had already finished: one line
 * says so), 1 (runtime failure: data, I/O) and 2 (bad arguments or an
 * unavailable backend). A completed run tells the coordinator, so that the
 * job is FINISHED for workers that come later. The training itself lives in
 * tt_trainer; with a backend other than "local" the collectives are
 * libtether's (tt_train_tether), configured by the TETHER_* environment
 * that tether-launch, systemd or Kubernetes provide. Rank 0 prints the
 * progress and writes the metrics; the other ranks only report errors. */
#include "tt_idx.h"
#include "tt_clock.h"
#include "tt_cuda.h"
#include "tt_fsutil.h"
#include "tt_log.h"
#include "tt_manifest.h"
#include "tt_mlp_cuda.h"
#include "tt_progress.h"
#include "tt_status.h"
#include "tt_train_ckpt.h"
#include "tt_train_dev.h"
#include "tt_train_ft.h"
#include "tt_train_stop.h"
#include "tt_train_tether.h"
#include "tt_trainer.h"

#include <tether/tether.h>

#include <cblas.h>
#include <errno.h>
#include <getopt.h>
#include <stddef.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_DATA "/usr/share/datasets/fashion-mnist" /* dataset-fashion-mnist */

typedef struct {
    char layers[256];
    uint64_t epochs, batch, micro, warmup, seed, train_limit, max_steps, log_every, threads;
    double lr, min_lr, momentum, weight_decay, beta1, beta2, eps;
    int nesterov, scale_lr, tf32, help;
    char optimizer[16], schedule[16], backend[16], device[16], update[16], cuda_device[16];
    char data[1024], metrics[1024], dump[1024];
    char ckpt_dir[1024], resume[1024]; /* checkpoints: tt_train_ckpt */
    uint64_t ckpt_every, ckpt_keep;
    double ckpt_every_s;
    uint64_t pace_ms;
    double stop_grace_s;
} cli_t;

typedef enum { K_U64, K_F64, K_FLAG, K_STR } kind_t;

typedef struct {
    const char *name;
    kind_t kind;
    size_t off, size; /* size: string capacity */
    double lo, hi;    /* numeric bounds */
    const char *help;
} opt_t;

#define U64(n, f, lo, hi, h)                                                                       \
    { n, K_U64, offsetof(cli_t, f), 0, lo, hi, h }
#define F64(n, f, lo, hi, h)                                                                       \
    { n, K_F64, offsetof(cli_t, f), 0, lo, hi, h }
#define FLAG(n, f, h)                                                                              \
    { n, K_FLAG, offsetof(cli_t, f), 0, 0, 1, h }
#define STR(n, f, h)                                                                               \
    { n, K_STR, offsetof(cli_t, f), sizeof(((cli_t *)0)->f), 0, 0, h }

static const opt_t OPTS[] = {
    STR("layers", layers, "layer widths, input first (784,256,256,10)"),
    U64("epochs", epochs, 1, 1e6, "passes over the training set (10)"),
    U64("batch", batch, 1, 1e7, "global batch over all ranks (256)"),
    U64("micro-batch", micro, 0, 1e7, "max rows per forward/backward, 0 = batch (0)"),
    F64("lr", lr, 0, 1e3, "peak learning rate (sgd 0.15, adamw 0.001)"),
    F64("min-lr", min_lr, 0, 1e3, "floor of the cosine schedule (0)"),
    STR("optimizer", optimizer, "sgd | adamw (sgd)"),
    F64("momentum", momentum, 0, 1, "SGD momentum (0.9)"),
    FLAG("nesterov", nesterov, "Nesterov momentum (on)"),
    FLAG("no-nesterov", nesterov, "plain momentum"),
    F64("weight-decay", weight_decay, 0, 10, "sgd L2 (1e-4) / adamw decoupled (0.01)"),
    F64("beta1", beta1, 0, 1, "AdamW beta1 (0.9)"),
    F64("beta2", beta2, 0, 1, "AdamW beta2 (0.999)"),
    U64("warmup-steps", warmup, 0, 1e9, "linear warmup steps (100)"),
    STR("schedule", schedule, "const | cosine (cosine)"),
    FLAG("lr-scale-with-batch", scale_lr, "lr *= batch / 256 (linear scaling rule)"),
    U64("seed", seed, 0, 1.8e19, "seed of init and sampling (0)"),
    STR("data", data, "Fashion-MNIST dir (/usr/share/datasets/fashion-mnist)"),
    U64("train-limit", train_limit, 0, 1e9, "use only the first N training examples (0 = all)"),
    U64("max-steps", max_steps, 0, 1e12, "stop after N global steps (0 = run all epochs)"),
    STR("dump-params", dump, "rank 0 writes the final parameters (raw float32) to FILE"),
    STR("metrics-json", metrics, "append one JSON object per epoch to FILE"),
    U64("log-every", log_every, 0, 1e9, "log line every N steps when not a terminal (50)"),
    F64("stop-grace-s", stop_grace_s, 0, 3600,
        "on SIGTERM/SIGINT leave the job at the next step boundary, or end after V s (8)"),
    U64("pace-ms", pace_ms, 0, 600000,
        "stretch every step to at least N ms: a slower model for failover drills (0)"),
    STR("backend", backend,
        "local | ring | ps | nccl | auto (auto: ring, local when TETHER_COORDINATOR is unset)"),
    U64("threads", threads, 1, 256, "BLAS threads (1)"),
    STR("device", device, "cpu | cuda: where forward/backward/update run (cpu)"),
    STR("cuda-device", cuda_device,
        "cuda: device number; auto: TETHER_CUDA_DEVICE, else TETHER_LOCAL_RANK modulo the "
        "devices this process sees (tether-launch sets it), else 0 (auto)"),
    FLAG("tf32", tf32,
         "cuda: products on TF32 tensor cores; faster for wide layers, not the CPU's FP32 (off)"),
    STR("update", update,
        "local | shards: who applies the optimizer; shards needs --backend ps (local)"),
    STR("checkpoint-dir", ckpt_dir, "checkpoint root shared by all ranks (none)"),
    U64("checkpoint-every-steps", ckpt_every, 0, 4294967295.0,
        "checkpoint every N global steps (0)"),
    F64("checkpoint-every-s", ckpt_every_s, 0, 86400,
        "checkpoint every T seconds: the coordinator's timer, rank 0's without one (0)"),
    U64("checkpoint-keep", ckpt_keep, 1, 1e6, "committed checkpoints kept (3)"),
    STR("resume", resume,
        "job | auto | latest-valid | none | DIR; job: with --checkpoint-dir, the newest "
        "checkpoint the coordinator recorded for this job, if any (job)"),
    FLAG("help", help, "this text"),
};
#define NOPTS (sizeof(OPTS) / sizeof(OPTS[0]))

static void cli_defaults(cli_t *c) {
    memset(c, 0, sizeof(*c));
    snprintf(c->layers, sizeof(c->layers), "784,256,256,10");
    c->epochs = 10;
    c->batch = 256;
    c->lr = -1.0;           /* resolved per optimizer */
    c->weight_decay = -1.0; /* resolved per optimizer */
    c->momentum = 0.9;
    c->nesterov = 1;
    c->beta1 = 0.9;
    c->beta2 = 0.999;
    c->eps = 1e-8;
    c->warmup = 100;
    c->log_every = 50;
    c->threads = 1;
    c->ckpt_keep = 3;
    c->stop_grace_s = 8.0; /* under the 10 s of tether-launch's and Docker's SIGKILL */
    snprintf(c->resume, sizeof(c->resume), "job");
    snprintf(c->optimizer, sizeof(c->optimizer), "sgd");
    snprintf(c->schedule, sizeof(c->schedule), "cosine");
    snprintf(c->backend, sizeof(c->backend), "auto");
    snprintf(c->device, sizeof(c->device), "cpu");
    snprintf(c->cuda_device, sizeof(c->cuda_device), "auto");
    snprintf(c->update, sizeof(c->update), "local");
    snprintf(c->data, sizeof(c->data), "%s", DEFAULT_DATA);
}

static void usage(FILE *f) {
    fprintf(f, "usage: tether-train [options]\n"
               "Trains an MLP on Fashion-MNIST, data-parallel over tether "
               "workers.\n\noptions:\n");
    for (size_t i = 0; i < NOPTS; i++) {
        const char *arg = OPTS[i].kind == K_FLAG ? "" : " V";
        fprintf(f, "  --%s%-*s %s\n", OPTS[i].name, (int)(22 - strlen(OPTS[i].name)), arg,
                OPTS[i].help);
    }
    /* Supervisors act on the code: tether-launch, the systemd units and
     * the Kubernetes manifest restart 1 and never 2. */
    fprintf(f, "\nExit status: 0 trained (or this worker's part of the job is over), 1 failed "
               "(a restart may help), 2 bad usage or a configuration this host cannot run "
               "(a restart would repeat it), 128+N stopped by signal N (143: SIGTERM, 130: "
               "SIGINT; a job's worker leaves it at a step boundary first).\n");
}

static int set_opt(cli_t *c, const opt_t *o, const char *arg) {
    char *base = (char *)c + o->off, *end = NULL;
    errno = 0;
    if (o->kind == K_FLAG) {
        *(int *)base = strncmp(o->name, "no-", 3) != 0;
        return 0;
    }
    if (o->kind == K_STR) {
        if (strlen(arg) >= o->size)
            return -1;
        memcpy(base, arg, strlen(arg) + 1);
        return 0;
    }
    double v = o->kind == K_U64 ? (double)strtoull(arg, &end, 10) : strtod(arg, &end);
    if (errno != 0 || end == arg || *end != '\0' || v < o->lo || v > o->hi ||
        (o->kind == K_U64 && arg[0] == '-'))
        return -1;
    if (o->kind == K_U64) {
        uint64_t u = strtoull(arg, NULL, 10);
        memcpy(base, &u, sizeof(u));
    } else {
        memcpy(base, &v, sizeof(v));
    }
    return 0;
}

static int parse_args(cli_t *c, int argc, char **argv) {
    struct option lo[NOPTS + 1];
    for (size_t i = 0; i < NOPTS; i++) {
        lo[i] =
            (struct option){OPTS[i].name, OPTS[i].kind == K_FLAG ? no_argument : required_argument,
                            NULL, (int)i + 256};
    }
    lo[NOPTS] = (struct option){0};
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        if (ch == 'h') {
            c->help = 1;
            continue;
        }
        if (ch < 256) {
            fprintf(stderr,
                    "tether-train: unknown or incomplete option '%s' "
                    "(see --help)\n",
                    argv[optind - 1]);
            return -1;
        }
        const opt_t *o = &OPTS[ch - 256];
        if (set_opt(c, o, optarg) < 0) {
            fprintf(stderr, "tether-train: bad value '%s' for --%s (%s)\n", optarg, o->name,
                    o->help);
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "tether-train: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    return 0;
}

static int parse_layers(const char *s, tt_trainer_opts_t *o) {
    int n = 0;
    const char *p = s;
    while (*p != '\0') {
        char *end = NULL;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno != 0 || end == p || v < 1 || v > (1 << 20) || n > TT_MLP_MAX_LAYERS ||
            (*end != ',' && *end != '\0'))
            return -1;
        o->dims[n++] = (int)v;
        p = *end == ',' ? end + 1 : end;
    }
    o->nlayers = n - 1;
    return n >= 2 ? 0 : -1;
}

/* Turns the command line into trainer options; messages go to stderr. */
/* The device of this worker's model, and so of its NCCL communicator.
 * No device seen (ndev 0): creating the model says why. */
static int pick_device(const cli_t *c, tt_trainer_opts_t *o) {
    char err[256];
    int ndev = 0;
    (void)tt_cuda_device_count(&ndev, err, sizeof(err));
    int rc = tt_train_pick_device(
        c->cuda_device, getenv("TETHER_CUDA_DEVICE"), getenv("TETHER_LOCAL_RANK"), ndev,
        strcmp(c->backend, "nccl") == 0, &o->cuda_device, err, sizeof(err));
    if (rc != TT_OK)
        fprintf(stderr, "tether-train: %s\n", err);
    return rc == TT_OK ? 0 : -1;
}

static int build_opts(const cli_t *c, tt_trainer_opts_t *o) {
    memset(o, 0, sizeof(*o));
    if (parse_layers(c->layers, o) < 0) {
        fprintf(stderr,
                "tether-train: bad --layers '%s': expected 2..%d "
                "positive widths like 784,256,256,10\n",
                c->layers, TT_MLP_MAX_LAYERS + 1);
        return -1;
    }
    int adam = strcmp(c->optimizer, "adamw") == 0;
    if (!adam && strcmp(c->optimizer, "sgd") != 0) {
        fprintf(stderr, "tether-train: bad --optimizer '%s': sgd or adamw\n", c->optimizer);
        return -1;
    }
    int cosine = strcmp(c->schedule, "cosine") == 0;
    if (!cosine && strcmp(c->schedule, "const") != 0) {
        fprintf(stderr, "tether-train: bad --schedule '%s': const or cosine\n", c->schedule);
        return -1;
    }
    o->epochs = c->epochs;
    o->batch = c->batch;
    o->micro = c->micro;
    o->seed = c->seed;
    o->train_limit = c->train_limit;
    o->max_steps = c->max_steps;
    o->opt = adam ? TT_OPT_ADAMW : TT_OPT_SGD;
    double wd = c->weight_decay >= 0 ? c->weight_decay : (adam ? 0.01 : 1e-4);
    o->sgd = (tt_optim_sgd_hp_t){(float)c->momentum, (float)wd, c->nesterov};
    o->adamw = (tt_optim_adamw_hp_t){(float)c->beta1, (float)c->beta2, (float)c->eps, (float)wd};
    double lr = c->lr >= 0 ? c->lr : (adam ? 1e-3 : 0.15);
    if (c->scale_lr)
        lr = tt_lr_scale_for_batch(lr, c->batch);
    o->sched = (tt_lr_sched_t){cosine ? TT_LR_COSINE : TT_LR_CONST, lr, c->min_lr, c->warmup, 0};
    o->device = strcmp(c->device, "cuda") == 0;
    if (!o->device && strcmp(c->device, "cpu") != 0) {
        fprintf(stderr, "tether-train: bad --device '%s': cpu or cuda\n", c->device);
        return -1;
    }
    if (c->tf32 && !o->device) {
        fprintf(stderr, "tether-train: --tf32 is for --device cuda (the CPU computes in FP32)\n");
        return -1;
    }
    if (strcmp(c->cuda_device, "auto") != 0 && !o->device) {
        fprintf(stderr, "tether-train: --cuda-device is for --device cuda\n");
        return -1;
    }
    o->cuda_math = c->tf32 ? TT_MLP_CUDA_TF32 : TT_MLP_CUDA_FP32;
    return o->device ? pick_device(c, o) : 0;
}

/* Internal code (not an exit code): the job had finished already. */
#define CODE_JOB_DONE (-1)

/* The job finished before or while this worker took part (TT_EJOBDONE),
 * or the operator drained this worker from it (TT_EDRAINED, tetherctl
 * drain): nothing is wrong and nothing is left to do here, so the exit
 * status is 0 and a launcher does not restart it. Returns CODE_JOB_DONE. */
static int job_done(int rc) {
    const char *job = getenv("TETHER_JOB"), *me = getenv("TETHER_WORKER_ID");
    job = job != NULL && job[0] != '\0' ? job : "default";
    int sig = tt_train_stop_signal();
    if (rc == TT_EDRAINED && sig != 0) { /* its own drain: a supervisor restarts it */
        printf("tether-train: worker '%s' left job '%s' at a step boundary on %s; the others go "
               "on without it\n",
               me != NULL ? me : "?", job, tt_train_stop_name(sig));
        fflush(stdout);
        return 128 + sig;
    }
    if (rc == TT_EDRAINED)
        printf("tether-train: worker '%s' was drained from job '%s' by the operator; the "
               "others go on without it\n",
               me != NULL ? me : "?", job);
    else
        printf("tether-train: job '%s' has already finished; nothing left to do\n", job);
    fflush(stdout);
    return CODE_JOB_DONE;
}

/* The statuses that end this worker's part without a failure. */
static int part_over(int rc) {
    return rc == TT_EJOBDONE || rc == TT_EDRAINED;
}

/* "auto" without a coordinator to join means a single local process. */
static int check_backend(cli_t *c) {
    const char *b = c->backend;
    if (strcmp(b, "auto") == 0 && getenv("TETHER_COORDINATOR") == NULL)
        snprintf(c->backend, sizeof(c->backend), "local");
    if (strcmp(b, "local") == 0 || strcmp(b, "ring") == 0 || strcmp(b, "ps") == 0 ||
        strcmp(b, "auto") == 0 || strcmp(b, "nccl") == 0)
        return 0;
    fprintf(stderr, "tether-train: bad --backend '%s': local, ring, ps, nccl or auto\n", b);
    return -1;
}

/* --update shards: the shard servers run the optimizer, so only the ps
 * backend (whose shards are always there) can carry it. */
static int check_update(const cli_t *c) {
    if (strcmp(c->update, "local") == 0)
        return 0;
    if (strcmp(c->update, "shards") != 0) {
        fprintf(stderr, "tether-train: bad --update '%s': local or shards\n", c->update);
        return -1;
    }
    if (strcmp(c->backend, "ps") != 0) {
        fprintf(stderr,
                "tether-train: --update shards needs --backend ps (the shard servers "
                "apply the optimizer), not '%s'\n",
                c->backend);
        return -1;
    }
    return 0;
}

static int load_data(const cli_t *c, tt_idx_set_t *train, tt_idx_set_t *test) {
    char err[512];
    if (tt_idx_load(c->data, "train", c->train_limit, train, err, sizeof(err)) < 0 ||
        tt_idx_load(c->data, "t10k", 0, test, err, sizeof(err)) < 0) {
        fprintf(stderr,
                "tether-train: cannot load Fashion-MNIST: %s (Debian's dataset-fashion-mnist "
                "package puts it in %s; --data DIR names another folder)\n",
                err, DEFAULT_DATA);
        return -1;
    }
    return 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Writes the parameters as raw little-endian float32 (for equivalence
 * tests and offline inspection). */
static int dump_params(const char *path, tt_trainer_t *t) {
    tt_mlp_t *m = tt_trainer_model(t);
    FILE *f = fopen(path, "wb");
    size_t n = tt_mlp_param_count(m);
    if (f == NULL || fwrite(tt_mlp_params(m), sizeof(float), n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "tether-train: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* The step callback: progress on rank 0, the checkpoint hook on every
 * rank (it may run a collective, so all ranks must call it). */
typedef struct {
    tt_progress_t *prog;
    int quiet;
    tt_train_ckpt_t *ck;
    uint64_t pace_ms, last_ms;
    struct tether *handle; /* NULL: --backend local */
    double stop_grace_s;
    int stop_asked; /* a stop signal was acted on */
} step_ctx_t;

/* Leaving at once, which the others notice sooner than a death. */
static void leave_now(struct tether *h, int sig, const char *why) {
    fprintf(stderr, "tether-train: %s: %s: leaving at once\n", tt_train_stop_name(sig), why);
    tether_leave(h, "stopped by a signal");
    fflush(stdout);
    _exit(128 + sig);
}

/* SIGTERM/SIGINT (tt_train_stop): leave at the next step boundary, where
 * no step fails; when the coordinator refuses (the job would fall below
 * min_workers, as when the whole job is being stopped), leave at once. */
static void leave_on_signal(step_ctx_t *sc, int sig) {
    sc->stop_asked = 1;
    if (tether_drain(sc->handle) == TETHER_OK) {
        printf("tether-train: %s: leaving the job at the next step boundary (within %.0f s; a "
               "second signal ends at once)\n",
               tt_train_stop_name(sig), sc->stop_grace_s);
        fflush(stdout);
        return;
    }
    char why[600];
    snprintf(why, sizeof(why), "cannot leave at a step boundary (%s)",
             tether_last_error(sc->handle));
    leave_now(sc->handle, sig, why);
}

/* A step of a worker told to stop failed before its boundary: the others
 * left or were stopped too (the whole job is being stopped), or a rank was
 * lost. The failover loop gave up the regroup (tt_train_ft_opts_t.leaving):
 * waiting for a boundary would hold the rest for --stop-grace-s. */
static void leave_after_failure(struct tether *h, int rc) {
    char why[200];
    snprintf(why, sizeof(why),
             "a step failed (%s) before this worker's step boundary: other workers stopped or "
             "were lost too",
             tt_status_name(rc));
    leave_now(h, tt_train_stop_signal(), why);
}

static int stop_pending(void *ctx) {
    (void)ctx;
    return tt_train_stop_signal() != 0;
}

/* --pace-ms: sleeps the rest of the step's time budget. Every rank does,
 * so the ranks stay in step; the training itself is unchanged. */
static void pace(step_ctx_t *sc) {
    uint64_t now = tt_clock_mono_ms();
    if (sc->last_ms != 0 && now < sc->last_ms + sc->pace_ms)
        tt_clock_sleep_ms(sc->last_ms + sc->pace_ms - now);
    sc->last_ms = tt_clock_mono_ms();
}

static void on_step(void *ctx, const tt_step_report_t *r) {
    step_ctx_t *sc = ctx;
    if (sc->handle != NULL) {
        tt_train_stop_stepping();
        int sig = tt_train_stop_signal();
        if (sig != 0 && !sc->stop_asked)
            leave_on_signal(sc, sig);
    }
    if (!sc->quiet)
        tt_progress_step(sc->prog, r);
    if (sc->handle != NULL) /* for tetherctl status; rides on the heartbeats */
        tether_progress(sc->handle, r->epoch + 1, r->examples, r->epoch_size);
    if (sc->ck != NULL)
        tt_train_ckpt_boundary(sc->ck, tt_clock_mono_ms());
    if (sc->pace_ms > 0)
        pace(sc);
}

/* What the checkpoints cost the step loop, beside the run's summary: the
 * worst and the median stall of one checkpoint against the mean step. */
static void print_ckpt_stats(tt_train_ckpt_t *ck, double train_s, uint64_t steps) {
    tt_train_ckpt_stats_t st;
    tt_train_ckpt_stats(ck, &st);
    if (st.started == 0)
        return;
    double step_s = steps > 0 ? train_s / (double)steps : 0.0;
    double worst_s = (double)st.stall_ns_max * 1e-9, med_s = (double)st.stall_ns_median * 1e-9;
    double pct = step_s > 0 ? 100.0 / step_s : 0.0;
    printf("checkpoints: %llu committed, %llu aborted; worst stall of one %.1f ms (%.1f%% of "
           "a mean step of %.1f ms), median %.1f ms (%.1f%%) over %llu, %.1f MB written by this "
           "rank last time\n",
           (unsigned long long)st.committed, (unsigned long long)st.aborted, worst_s * 1e3,
           worst_s * pct, step_s * 1e3, med_s * 1e3, med_s * pct,
           (unsigned long long)st.stall_samples, (double)st.last_bytes / 1e6);
    if (st.idle_boundaries > 0)
        printf("checkpoints: between them the hook took %.3f ms a step\n",
               (double)st.idle_ns / (double)st.idle_boundaries * 1e-6);
    if (st.committed == 0 && st.aborted > 0) /* the run's end is where it is read */
        TT_WARN("ckpt",
                "none of this run's %llu checkpoint(s) committed (the errors above say why): no "
                "state this run trained is in a checkpoint",
                (unsigned long long)st.aborted);
}

/* Runs all epochs (from the resumed one); returns 0, 1 (runtime failure,
 * already reported) or CODE_JOB_DONE. Ranks other than 0 print nothing
 * but errors. tt is NULL with --backend local. */
static int train(const cli_t *c, tt_trainer_t *t, tt_train_ckpt_t *ck, tt_train_ft_t *ft,
                 tt_train_tether_t *tt, uint64_t epochs) {
    int quiet = tt != NULL && tt_train_tether_rank(tt) != 0;
    tt_progress_t prog = {.out = stderr, .tty = isatty(STDERR_FILENO), .log_every = c->log_every};
    tt_epoch_stats_t st = {0};
    double t0 = now_s(), train_s = 0.0, examples = 0.0;
    char err[512];
    step_ctx_t sc = {.prog = &prog,
                     .quiet = quiet,
                     .ck = ck,
                     .pace_ms = c->pace_ms,
                     .handle = tt ? tt_train_tether_handle(tt) : NULL,
                     .stop_grace_s = c->stop_grace_s};
    tt_trainer_state_t s0;
    tt_trainer_get_state(t, &s0);
    for (uint64_t e = s0.epoch; e < epochs; e++) {
        if (ft != NULL) /* a failover may hand rank 0 to another worker */
            sc.quiet = quiet = tt_train_ft_rank(ft) != 0;
        int rc = ft != NULL ? tt_train_ft_run_epoch(ft, on_step, &sc, &st)
                            : tt_trainer_run_epoch(t, on_step, &sc, &st);
        if (rc > 0) { /* the agreed state closed this epoch: its reporter was another rank */
            tt_trainer_get_state(t, &s0);
            e = s0.epoch - 1;
            if (c->max_steps != 0 && tt_trainer_global_step(t) >= c->max_steps)
                break;
            continue;
        }
        if (rc < 0 && sc.handle != NULL && !part_over(rc) && tt_train_stop_signal() != 0)
            leave_after_failure(sc.handle, rc);
        if (ft != NULL)
            quiet = sc.quiet = tt_train_ft_rank(ft) != 0;
        if (rc == TT_OK && ck != NULL && tt_train_ckpt_error(ck)[0] != '\0')
            rc = TT_EIO;
        if (part_over(rc)) /* another rank completed the run, or a drain */
            return job_done(rc);
        if (rc < 0) {
            fprintf(stderr, "tether-train: epoch %llu failed: %s\n", (unsigned long long)e + 1,
                    tt_strerror(rc));
            return 1;
        }
        train_s += st.wall_s;
        examples += st.examples_per_s * st.wall_s;
        int last = c->max_steps != 0 && tt_trainer_global_step(t) >= c->max_steps;
        if (!quiet) {
            tt_progress_epoch(&prog, &st, epochs);
            if (c->metrics[0] != '\0' &&
                tt_progress_json_append(c->metrics, &st, err, sizeof(err)) < 0) {
                fprintf(stderr, "tether-train: %s\n", err);
                return 1;
            }
        }
        if (last)
            break;
    }
    if (ck != NULL && tt_train_ckpt_finish(ck) < 0) {
        fprintf(stderr, "tether-train: %s\n", tt_train_ckpt_error(ck));
        return 1;
    }
    if (ft != NULL)
        quiet = tt_train_ft_rank(ft) != 0;
    if (!quiet && c->dump[0] != '\0' && dump_params(c->dump, t) < 0)
        return 1;
    if (!quiet && ck != NULL)
        print_ckpt_stats(ck, train_s, tt_trainer_global_step(t) - s0.global_step);
    if (!quiet)
        printf("done: test accuracy %.4f  test loss %.4f  train %.0f examples/s "
               "over %llu steps on %d worker(s)  wall %.2fs (training %.2fs)\n",
               st.test_accuracy, st.test_loss, train_s > 0 ? examples / train_s : 0,
               (unsigned long long)tt_trainer_global_step(t), st.world_size, now_s() - t0, train_s);
    return 0;
}

/* A root that cannot take a checkpoint is refused before the job is
 * joined: found at the first checkpoint, it would leave a run of hours
 * with none (every rank writes its own part, so each checks its view). */
static int check_ckpt_dir(const cli_t *c) {
    char err[1024];
    if (c->ckpt_dir[0] == '\0' || tt_fs_check_writable_dir(c->ckpt_dir, err, sizeof(err)) == 0)
        return 0;
    fprintf(stderr, "tether-train: --checkpoint-dir cannot take checkpoints: %s\n", err);
    return -1;
}

/* Joins the job (non-local backends) and builds the trainer on top.
 * 0, an exit code, or CODE_JOB_DONE. */
static int setup(cli_t *c, const tt_trainer_opts_t *o, const tt_idx_set_t *train_set,
                 const tt_idx_set_t *test_set, tt_train_ckpt_gate_t *gate, tt_train_tether_t **tt,
                 tt_trainer_t **t) {
    char err[512] = "";
    tt_train_coll_t coll;
    tt_train_coll_local(&coll);
    if (strcmp(c->backend, "local") != 0) {
        /* The checkpoint schedule becomes the job's settings: the
         * coordinator keeps it, and ranks started differently conflict. */
        int on = c->ckpt_dir[0] != '\0';
        tt_train_tether_ckpt_t ck = {on ? (uint32_t)c->ckpt_every : 0,
                                     on ? (uint32_t)(c->ckpt_every_s * 1000.0) : 0,
                                     on ? (uint32_t)c->ckpt_keep : 0};
        tt_train_tether_update_t up = {strcmp(c->update, "shards") == 0, o};
        int rc = tt_train_tether_create(tt, c->backend, &ck, &up, err, sizeof(err));
        if (part_over(rc))
            return job_done(rc);
        if (rc < 0) {
            fprintf(stderr, "tether-train: %s\n", err);
            return rc == TT_EINVAL ? 2 : 1;
        }
        tt_train_tether_coll(*tt, &coll);
    }
    /* The gate lets a checkpoint's snapshot overlap the next step. */
    tt_train_ckpt_gate_init(gate, &coll);
    int rc = tt_trainer_create(t, o, train_set, test_set, &gate->coll, err, sizeof(err));
    if (rc == TT_OK && *tt != NULL)
        rc = tt_train_tether_register(*tt, tt_trainer_model(*t), err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "tether-train: %s\n", err);
        return rc == TT_EINVAL ? 2 : 1;
    }
    return 0;
}

/* Test knob only: TETHER_TRAIN_TEST_DIE_BEFORE_AGREE=<worker id> ends that
 * worker once it is a member, before the first agreement, as a crash at
 * start-up would. */
static void die_for_test(void) {
    const char *who = getenv("TETHER_TRAIN_TEST_DIE_BEFORE_AGREE");
    const char *me = getenv("TETHER_WORKER_ID");
    if (who == NULL || me == NULL || strcmp(who, me) != 0)
        return;
    fprintf(stderr, "tether-train: test knob: %s ends before the first agreement\n", me);
    _exit(3);
}

/* The failover loop of a libtether run, from its first agreement
 * (tt_train_ft_begin). */
static int failover_start(tt_train_tether_t *tt, tt_trainer_t *t, tt_train_ft_t **ft) {
    char err[768] = "";
    tt_train_ft_opts_t fo;
    int rc = tt_train_ft_opts_from_env(&fo, err, sizeof(err));
    fo.leaving = stop_pending;
    if (rc == TT_OK)
        rc = tt_train_ft_create(ft, &fo, tt, t);
    die_for_test();
    if (rc == TT_OK && (rc = tt_train_ft_begin(*ft)) != TT_OK) {
        /* The library's sentence says why (a backend that cannot serve the
         * agreement, a peer that never came); the status alone would not. */
        const char *why = tether_last_error(tt_train_tether_handle(tt));
        snprintf(err, sizeof(err), "agreeing on the state with the job's members: %s (%s)",
                 why != NULL && why[0] != '\0' ? why : tt_strerror(rc), tt_status_name(rc));
    }
    if (part_over(rc))
        return job_done(rc);
    if (rc != TT_OK)
        fprintf(stderr, "tether-train: %s\n", err);
    return rc == TT_OK ? 0 : rc == TT_EINVAL ? 2 : 1;
}

/* Checkpoints and resume (tt_train_ckpt), after setup joined the job. */
static int ckpt_setup(const cli_t *c, const tt_trainer_opts_t *o, tt_train_ckpt_gate_t *gate,
                      tt_trainer_t *t, tt_train_tether_t *tt, tt_train_ckpt_t **ck) {
    if (c->ckpt_dir[0] == '\0' && (strcmp(c->resume, "none") == 0 || strcmp(c->resume, "job") == 0))
        return 0;
    tt_train_ckpt_opts_t co = {.root = c->ckpt_dir,
                               .every_steps = c->ckpt_every,
                               .every_s = c->ckpt_every_s,
                               .keep = (size_t)c->ckpt_keep,
                               .job_id = getenv("TETHER_JOB"),
                               .topts = o,
                               .tether = tt != NULL ? tt_train_tether_handle(tt) : NULL};
    if (tt != NULL)
        tt_train_tether_on_shards(tt, &co.shard_planes);
    char err[1024] = "", id[TT_MF_ID_MAX] = "";
    int rc = tt_train_ckpt_create(ck, &co, t, &gate->inner, err, sizeof(err));
    if (rc == TT_OK)
        rc = tt_train_ckpt_resume(*ck, c->resume, id, err, sizeof(err));
    /* Asked for, the resume is no warning (--resume job's is), but which
     * checkpoint `auto` or `latest-valid` found is what the operator
     * wants to read first. */
    if (rc == TT_OK && id[0] != '\0' && strcmp(c->resume, "job") != 0 &&
        (tt == NULL || tt_train_tether_rank(tt) == 0)) {
        tt_trainer_state_t s;
        tt_trainer_get_state(t, &s);
        printf("resumed from checkpoint %s (--resume %s): global step %llu, epoch %llu at step "
               "%llu\n",
               id, c->resume, (unsigned long long)s.global_step, (unsigned long long)s.epoch + 1,
               (unsigned long long)s.step_in_epoch);
        fflush(stdout);
    }
    if (rc >= 0)
        tt_train_ckpt_gate_attach(gate, *ck);
    if (rc < 0)
        fprintf(stderr, "tether-train: %s\n", err);
    return rc < 0 ? (rc == TT_EINVAL ? 2 : 1) : 0;
}

int main(int argc, char **argv) {
    cli_t c;
    cli_defaults(&c);
    tt_log_init_from_env();
    if (parse_args(&c, argc, argv) < 0)
        return 2;
    if (c.help) {
        usage(stdout);
        return 0;
    }
    tt_trainer_opts_t o;
    if (build_opts(&c, &o) < 0 || check_backend(&c) < 0 || check_update(&c) < 0 ||
        check_ckpt_dir(&c) < 0)
        return 2;
    openblas_set_num_threads((int)c.threads);
    tt_idx_set_t train_set = {0}, test_set = {0};
    if (load_data(&c, &train_set, &test_set) < 0) {
        tt_idx_free(&train_set);
        return 1;
    }
    tt_train_tether_t *tt = NULL;
    tt_trainer_t *t = NULL;
    tt_train_ckpt_t *ck = NULL;
    tt_train_ft_t *ft = NULL;
    tt_train_ckpt_gate_t gate = {0}; /* attach(NULL) at the end must be safe */
    if (strcmp(c.backend, "local") != 0 && tt_train_stop_install(c.stop_grace_s) != 0)
        fprintf(stderr, "tether-train: no stop-signal handling (%s): SIGTERM ends at once\n",
                strerror(errno));
    int code = setup(&c, &o, &train_set, &test_set, &gate, &tt, &t);
    if (code == 0)
        code = ckpt_setup(&c, &o, &gate, t, tt, &ck);
    if (code == 0 && tt != NULL)
        code = failover_start(tt, t, &ft);
    if (code == 0)
        code = train(&c, t, ck, ft, tt, c.epochs);
    if (code == 0 && tt != NULL)
        tt_train_tether_finish(tt);
    tt_train_ft_destroy(&ft);
    tt_train_ckpt_gate_attach(&gate, NULL);
    tt_train_ckpt_destroy(&ck);
    tt_trainer_destroy(&t);
    tt_train_tether_destroy(&tt);
    tt_idx_free(&train_set);
    tt_idx_free(&test_set);
    return code == CODE_JOB_DONE ? 0 : code;
}
