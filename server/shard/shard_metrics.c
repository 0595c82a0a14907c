/* shard_metrics: what a shard server's HTTP endpoint (tt_http) answers:
 * /healthz (the loop runs), /readyz (it serves: 503 once it is stopping)
 * and /metrics in the Prometheus text format: the jobs it holds, their
 * chunks and bytes, the last round every chunk of a job completed and the
 * generation it saw, and whether a checkpoint part is being written. It
 * reads state only, on the loop thread. */
#include "shard_internal.h"
#include "tt_http.h"

#include <stdlib.h>
#include <string.h>

static void help(tt_http_reply_t *r, const char *name, const char *text) {
    tt_http_printf(r, "# HELP %s %s\n# TYPE %s gauge\n", name, text, name);
}

#define JOB_GAUGES 5
static const char *const job_gauges[JOB_GAUGES][2] = {
    {"tether_shard_job_chunks", "chunks of the job held here"},
    {"tether_shard_job_state_bytes", "their state and sums"},
    {"tether_shard_job_generation", "newest generation the chunks saw"},
    {"tether_shard_job_last_round", "last round (step) every chunk completed (-1: none)"},
    {"tether_shard_job_checkpoint_writing", "1 while a checkpoint part is being written"},
};

/* One pass over a job's chunks: v[g] for job_gauges[g]. */
static void job_values(const shard_job_t *job, double *v) {
    uint64_t bytes = 0, generation = 0;
    int64_t round = job->nchunks > 0 ? INT64_MAX : -1;
    for (size_t c = 0; c < job->nchunks; c++) {
        const tt_accum_t *a = job->chunks[c]->acc;
        uint64_t done = 0;
        bytes += tt_accum_bytes(a);
        if (tt_accum_generation(a) > generation)
            generation = tt_accum_generation(a);
        int64_t d = tt_accum_done_step(a, &done) ? (int64_t)done : -1;
        if (d < round)
            round = d;
    }
    double vals[JOB_GAUGES] = {(double)job->nchunks, (double)bytes, (double)generation,
                               (double)round, (double)job->writing};
    memcpy(v, vals, sizeof(vals));
}

static void metrics(const tt_shard_t *s, tt_http_reply_t *r) {
    uint32_t chunks = 0;
    uint64_t bytes = shard_bytes_held(s, &chunks);
    char id[2 * TT_WIRE_MAX_ID + 2];
    help(r, "tether_shard_up", "1 while the shard server serves");
    tt_http_printf(r, "tether_shard_up{shard=\"%s\"} 1\n", tt_http_label(s->id, id, sizeof(id)));
    tt_http_printf(r,
                   "# HELP tether_shard_refused_connections_total connections refused: a handshake "
                   "that failed, or a password the ZAP handler refused\n"
                   "# TYPE tether_shard_refused_connections_total counter\n"
                   "tether_shard_refused_connections_total %llu\n",
                   tt_zauth_refused_total(&s->handshakes, s->zap));
    help(r, "tether_shard_jobs", "jobs with chunks here");
    tt_http_printf(r, "tether_shard_jobs %zu\n", s->njobs);
    help(r, "tether_shard_chunks", "chunks held");
    tt_http_printf(r, "tether_shard_chunks %u\n", chunks);
    help(r, "tether_shard_bytes", "memory of the chunks: state, sums and results");
    tt_http_printf(r, "tether_shard_bytes %llu\n", (unsigned long long)bytes);
    double *v = calloc(s->njobs * JOB_GAUGES + 1, sizeof(*v));
    const char **ids = calloc(s->njobs + 1, sizeof(*ids));
    if (v == NULL || ids == NULL) {
        r->oom = 1;
    } else {
        for (size_t j = 0; j < s->njobs; j++) {
            job_values(s->jobs[j], v + j * JOB_GAUGES);
            ids[j] = s->jobs[j]->id;
        }
        tt_http_job_gauges(r, job_gauges, JOB_GAUGES, ids, s->njobs, v);
    }
    free(ids);
    free(v);
}

void tt_shard_http(void *ctx, const char *path, tt_http_reply_t *r) {
    tt_shard_t *s = ctx;
    if (!tt_http_common(path, !s->closing, r))
        metrics(s, r);
}
