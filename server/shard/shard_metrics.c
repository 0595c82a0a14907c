/* shard_metrics: what a shard server's HTTP endpoint (tt_http) answers:
 * /healthz (the loop runs), /readyz (it serves: 503 once it is stopping)
 * and /metrics in the Prometheus text format: the jobs it holds, their
 * chunks and bytes, the last round every chunk of a job completed and the
 * generation it saw, and whether a checkpoint part is being written. It
 * reads state only, on the loop thread. */
#include "shard_internal.h"
#include "tt_http.h"

#include <string.h>

static void help(tt_http_reply_t *r, const char *name, const char *text) {
    tt_http_printf(r, "# HELP %s %s\n# TYPE %s gauge\n", name, text, name);
}

/* What one job's chunks add up to. */
typedef struct {
    uint64_t bytes, generation;
    int64_t round; /* the last round every chunk completed; -1: none */
} job_sum_t;

static job_sum_t sum_job(const shard_job_t *job) {
    job_sum_t s = {0, 0, job->nchunks > 0 ? INT64_MAX : -1};
    for (size_t c = 0; c < job->nchunks; c++) {
        const tt_accum_t *a = job->chunks[c]->acc;
        uint64_t done = 0;
        s.bytes += tt_accum_bytes(a);
        if (tt_accum_generation(a) > s.generation)
            s.generation = tt_accum_generation(a);
        int64_t d = tt_accum_done_step(a, &done) ? (int64_t)done : -1;
        if (d < s.round)
            s.round = d;
    }
    return s;
}

static void metrics(const tt_shard_t *s, tt_http_reply_t *r) {
    uint32_t chunks = 0;
    uint64_t bytes = shard_bytes_held(s, &chunks);
    char id[2 * TT_WIRE_MAX_ID + 2];
    help(r, "tether_shard_up", "1 while the shard server serves");
    tt_http_printf(r, "tether_shard_up{shard=\"%s\"} 1\n", tt_http_label(s->id, id, sizeof(id)));
    help(r, "tether_shard_jobs", "jobs with chunks here");
    tt_http_printf(r, "tether_shard_jobs %zu\n", s->njobs);
    help(r, "tether_shard_chunks", "chunks held");
    tt_http_printf(r, "tether_shard_chunks %u\n", chunks);
    help(r, "tether_shard_bytes", "memory of the chunks: state, sums and results");
    tt_http_printf(r, "tether_shard_bytes %llu\n", (unsigned long long)bytes);
    static const char *const names[][2] = {
        {"tether_shard_job_chunks", "chunks of the job held here"},
        {"tether_shard_job_state_bytes", "their state and sums"},
        {"tether_shard_job_generation", "newest generation the chunks saw"},
        {"tether_shard_job_last_round", "last round (step) every chunk completed (-1: none)"},
        {"tether_shard_job_checkpoint_writing", "1 while a checkpoint part is being written"},
    };
    for (int g = 0; g < 5; g++) {
        help(r, names[g][0], names[g][1]);
        for (size_t j = 0; j < s->njobs; j++) {
            const shard_job_t *job = s->jobs[j];
            job_sum_t sum = sum_job(job);
            double v = g == 0   ? (double)job->nchunks
                       : g == 1 ? (double)sum.bytes
                       : g == 2 ? (double)sum.generation
                       : g == 3 ? (double)sum.round
                                : (double)job->writing;
            tt_http_printf(r, "%s{job=\"%s\"} %.17g\n", names[g][0],
                           tt_http_label(job->id, id, sizeof(id)), v);
        }
    }
}

void tt_shard_http(void *ctx, const char *path, tt_http_reply_t *r) {
    tt_shard_t *s = ctx;
    if (!tt_http_common(path, !s->closing, r))
        metrics(s, r);
}
