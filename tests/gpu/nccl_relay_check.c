/* nccl_relay_check: the NCCL unique id's relay through a real coordinator
 * (gpu_nccl_fallback.py starts it) for two ranks of one generation, one
 * thread each: two libtether clients join job "relay", then each thread
 * opens the plain nccl row for its rank on device rank % devices. Rank 0's
 * ncclGetUniqueId goes to the coordinator, rank 1 fetches it, and both
 * call ncclCommInitRankConfig. With two GPUs the communicator forms and an
 * all-reduce of 1 and 2 gives 3 on both ranks. With one, NCCL refuses two
 * ranks on one device ("Duplicate GPU", invalid usage), but only after its
 * bootstrap, which joins the two ranks only when they hold the same id: a
 * refusal well before the init deadline shows the relay worked too. A
 * relay error or a timeout fails. Usage: nccl_relay_check --coordinator
 * EP. Exits 77 without a GPU or NCCL, 0 on success. */
#include "tether/tether.h"
#include "../unit/pair_testlib.h"
#include "nccl_check.h"
#include "tt_clock.h"
#include "tt_coll.h"
#include "tt_status.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#ifdef TT_HAVE_CUDA

typedef struct rank_run {
    const char *coord, *worker;
    int rank, ndev, rc, sum_ok;
    uint64_t generation, ms;
    char err[640];
} rank_run_t;

/* Two clients of job "relay" joined into one generation; 0 on success. */
static int form_job(const char *coord, tether_t *t[2], uint64_t *gen) {
    static const char *ids[2] = {"r0", "r1"}; /* ranked by id: r0 is rank 0 */
    for (int i = 0; i < 2; i++) {
        tether_opts_t o;
        tether_opts_default(&o);
        snprintf(o.coordinator, sizeof(o.coordinator), "%s", coord);
        snprintf(o.job_id, sizeof(o.job_id), "relay");
        snprintf(o.worker_id, sizeof(o.worker_id), "%s", ids[i]);
        o.job.min_workers = o.job.max_workers = 2;
        o.job.global_batch = 8;
        if (tether_create(&t[i], &o, NULL, 0) != TETHER_OK)
            return -1;
    }
    *gen = pair_join(t);
    printf("job formed: generation %llu (%s)\n", (unsigned long long)*gen,
           *gen != 0 ? "r0 rank 0, r1 rank 1" : tether_last_error(t[1]));
    return *gen != 0 ? 0 : -1;
}

static void *open_rank(void *arg) {
    rank_run_t *r = arg;
    /* the device travels in the config, as tt_comm passes the worker's */
    tt_coll_cfg_t cfg = {.rank = r->rank,
                         .world = 2,
                         .device = r->rank % r->ndev,
                         .generation = r->generation,
                         .deadline_ms = 20000,
                         .coordinator = r->coord,
                         .job_id = "relay",
                         .worker_id = r->worker};
    const tt_coll_ops_t *ops = NULL;
    void *inst = NULL;
    uint64_t t0 = tt_clock_mono_ms();
    r->rc = tt_coll_open(TT_COLL_NCCL, &cfg, &ops, &inst, r->err, sizeof(r->err));
    r->ms = tt_clock_mono_ms() - t0;
    if (r->rc == TT_OK) {
        float v = (float)(r->rank + 1);
        int rc = ops->allreduce(inst, &v, 1, TT_DT_FLOAT32, TT_RED_SUM);
        r->sum_ok = rc == TT_OK && v == 3.0f;
        if (rc != TT_OK)
            snprintf(r->err, sizeof(r->err), "%s", ops->last_error(inst));
        ops->destroy(&inst);
    }
    return NULL;
}

/* Refused by NCCL itself, after the bootstrap the shared id made possible. */
static int refused_after_bootstrap(const rank_run_t *r) {
    return r->rc == TT_ENCCL && strstr(r->err, "unique id") == NULL &&
           (strstr(r->err, "Duplicate GPU") != NULL || strstr(r->err, "invalid usage") != NULL);
}

static int run(const char *coord, int ndev) {
    tether_t *t[2] = {NULL, NULL};
    uint64_t gen = 0;
    int failed = form_job(coord, t, &gen) != 0;
    rank_run_t r[2];
    pthread_t th[2];
    for (int i = 0; !failed && i < 2; i++) {
        r[i] = (rank_run_t){.coord = coord, .worker = i ? "r1" : "r0", .rank = i, .ndev = ndev};
        r[i].generation = gen;
        pthread_create(&th[i], NULL, open_rank, &r[i]);
    }
    for (int i = 0; !failed && i < 2; i++) {
        pthread_join(th[i], NULL);
        int ok = (r[i].rc == TT_OK && r[i].sum_ok) ||
                 (ndev == 1 && refused_after_bootstrap(&r[i]) && r[i].ms < 50000);
        printf("%s: rank %d after %llu ms: %s\n", ok ? "ok  " : "FAIL", i,
               (unsigned long long)r[i].ms,
               r[i].rc == TT_OK ? (r[i].sum_ok ? "1 + 2 = 3 over NCCL" : r[i].err) : r[i].err);
        failed |= !ok;
    }
    if (!failed && r[0].rc != TT_OK)
        printf("one GPU: NCCL refused the two ranks after its bootstrap, so both held the "
               "id rank 0 drew (the two-rank all-reduce needs two GPUs)\n");
    tether_destroy(&t[1]);
    tether_destroy(&t[0]);
    return failed;
}
#endif

int main(int argc, char **argv) {
    int n = 0, rc = nccl_check_start(argc, argv, "nccl_relay_check", &n);
    if (rc != 0)
        return rc;
    int failed = 1;
#ifdef TT_HAVE_CUDA
    failed = run(argv[2], n);
#endif
    printf("%s\n", failed ? "FAILED" : "PASSED");
    return failed;
}
