/* shard_ckpt: a shard server's half of an optimizer-mode checkpoint
 * (WriteChunks, docs/checkpoints.md). In optimizer mode the parameters and
 * optimizer state live only here, so the shard writes them itself: it
 * copies the listed chunks on the loop (so later rounds cannot tear the
 * snapshot, and no round is held up for longer than the copy), writes the
 * copy as one part file (docs/checkpoint-format.md: the chunks' flat byte
 * ranges, one plane per state kind, CRC-32C, fsync, rename) on the thread
 * pool, and answers ChunksWritten once the part is durable. At most one
 * part per job is in flight; a shard killed meanwhile leaves only a .tmp
 * file, so the checkpoint never commits.
 * Two phases (WriteChunks.phase): why nobody waits for the write. Waiting
 * for the fsync made the step loop wait for the disk, waiting for the copy
 * made it wait for memory bandwidth, and waiting for even an Ack made it
 * wait for this loop to be scheduled on a host whose CPUs the workers
 * keep busy (0.4-12 ms at the start of a checkpoint on 2 CPUs). So phase 1 is
 * answered (Ack, or the refusal) but the asker does not wait for it; the
 * copy follows on the loop at once (see shard_ckpt_write for why nothing
 * can tear it), the job keeps the finished write's result or the refusal,
 * and a phase-2 question, asked between later steps, gets it (EAGAIN
 * until then). */
#include "shard_internal.h"
#include "tt_ckpt.h"
#include "tt_clock.h"
#include "tt_fsutil.h"
#include "tt_log.h"
#include "tt_status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ckpt_work {
    uv_work_t req;
    uint32_t phase; /* WriteChunks.phase: 0 or 1 */
    tt_shard_t *s;
    uint8_t peer[TT_ZMQ_MAX_PEER];
    size_t peer_len;
    char job[TT_WIRE_MAX_ID + 1];
    uint64_t gen, req_id;
    char dir[4096], file[TT_CKPT_NAME_MAX];
    tt_ckpt_range_t *ranges; /* sorted by offset, bytes */
    uint32_t nranges, planes;
    float *data;     /* planes x (sum of the ranges), plane-major */
    void *data_mem;  /* data's allocation: placed for an in-place write */
    size_t data_cap; /* its bytes */
    uint64_t payload;
    uint32_t stall_ms; /* test knob */
    tt_ckpt_part_info_t info;
    int rc;
    char msg[700];
} ckpt_work_t;

typedef struct {
    const Tether__ChunkOffset *req;
    shard_chunk_t *ch;
} ckpt_pick_t;

static void work_free(ckpt_work_t *w) {
    free(w->ranges);
    free(w->data_mem);
    free(w);
}

static int by_offset(const void *a, const void *b) {
    uint64_t x = ((const ckpt_pick_t *)a)->req->offset, y = ((const ckpt_pick_t *)b)->req->offset;
    return x < y ? -1 : x > y;
}

/* Every chunk is between rounds, its last completed round is `step` (when
 * checked), all keep the same planes, and their ranges do not overlap.
 * Fills msg on refusal. */
static int check_picks(ckpt_pick_t *p, size_t n, const Tether__WriteChunks *r, uint32_t *planes,
                       char *msg, size_t len) {
    uint64_t step = r->step;
    qsort(p, n, sizeof(*p), by_offset);
    for (size_t i = 0; i < n; i++) {
        shard_chunk_t *ch = p[i].ch;
        uint64_t done = 0;
        int have = tt_accum_done_step(ch->acc, &done);
        if (ch->busy || ch->complete_pending) {
            snprintf(msg, len, "chunk %u is applying an update: retry", ch->id);
            return TT_EBUSY;
        }
        if (r->check_step && (!have || done != step)) {
            snprintf(msg, len, "chunk %u holds the state after %s%llu, not after step %llu", ch->id,
                     have ? "step " : "no round (restarted?) ", (unsigned long long)done,
                     (unsigned long long)step);
            return TT_ESTALE;
        }
        uint32_t pl = tt_accum_planes(ch->acc);
        if (pl == 0 || (i > 0 && pl != *planes)) {
            snprintf(msg, len, "chunk %u: %s", ch->id,
                     pl == 0 ? "the job is in aggregate mode: the workers hold its state"
                             : "chunks keep different optimizer state");
            return TT_EINVAL;
        }
        *planes = pl;
        uint64_t end = p[i].req->offset + tt_accum_elems(ch->acc);
        if (i + 1 < n && end > p[i + 1].req->offset) {
            snprintf(msg, len, "chunks %u and %u overlap in the flat space", ch->id,
                     p[i + 1].ch->id);
            return TT_EINVAL;
        }
    }
    return TT_OK;
}

/* The snapshot buffer of the job's last write, taken when big enough: a
 * fresh one would fault its pages in during the copy, which the step loop
 * waits for (about as long as the copy itself). */
static int take_buffer(ckpt_work_t *w, shard_job_t *job, size_t bytes) {
    if (job->snap_mem != NULL && job->snap_cap >= bytes) {
        w->data_mem = job->snap_mem;
        w->data_cap = job->snap_cap;
        job->snap_mem = NULL;
        return TT_OK;
    }
    free(job->snap_mem);
    job->snap_mem = NULL;
    if (posix_memalign(&w->data_mem, 4096, bytes) != 0)
        return TT_ENOMEM;
    w->data_cap = bytes;
    return TT_OK;
}

/* The write is over: its buffer goes back to the job for the next one. */
static void return_buffer(ckpt_work_t *w, shard_job_t *job) {
    if (job == NULL || job->snap_mem != NULL)
        return;
    job->snap_mem = w->data_mem;
    job->snap_cap = w->data_cap;
    w->data_mem = NULL;
    w->data = NULL;
}

/* The copy on the loop: plane-major, ranges in offset order. */
static int snapshot(ckpt_work_t *w, shard_job_t *job, const ckpt_pick_t *p, size_t n) {
    uint64_t floats = 0;
    w->ranges = calloc(n, sizeof(*w->ranges));
    for (size_t i = 0; w->ranges != NULL && i < n; i++) {
        size_t elems = tt_accum_elems(p[i].ch->acc);
        w->ranges[i] = (tt_ckpt_range_t){p[i].req->offset * sizeof(float), elems * sizeof(float)};
        floats += elems;
    }
    w->nranges = (uint32_t)n;
    w->payload = floats * w->planes * sizeof(float);
    /* At the payload's file offset modulo 4 KiB, so the part writer sends
     * it to the disk from here (tt_ckpt_payload_offset). */
    size_t skew = (size_t)(tt_ckpt_payload_offset((uint32_t)n) % 4096);
    if (w->ranges == NULL || take_buffer(w, job, w->payload + skew) != TT_OK)
        return TT_ENOMEM;
    w->data = (float *)w->data_mem + skew / sizeof(float); /* headers: multiples of 16 bytes */
    float *out = w->data;
    for (uint32_t k = 0; k < w->planes; k++) {
        for (size_t i = 0; i < n; i++) {
            size_t elems = tt_accum_elems(p[i].ch->acc);
            int rc = tt_accum_get(p[i].ch->acc, (tt_accum_part_t)k, 0, out, elems, NULL);
            if (rc == TT_EINVAL && k == TT_ACCUM_PARAMS)
                return TT_ESTALE; /* never set: nothing to save */
            out += elems;
        }
    }
    return TT_OK;
}

static void work_run(uv_work_t *req) {
    ckpt_work_t *w = req->data;
    w->rc = tt_fs_mkdirs(w->dir, w->msg, sizeof(w->msg));
    tt_ckpt_part_opts_t o = {w->dir,     w->file,   TT_CKPT_KIND_SHARD, w->ranges,
                             w->nranges, w->planes, w->payload,         0};
    tt_ckpt_writer_t *wr = NULL;
    if (w->rc == TT_OK)
        w->rc = tt_ckpt_writer_create(&wr, &o, w->msg, sizeof(w->msg));
    if (w->rc == TT_OK)
        w->rc = tt_ckpt_writer_write(wr, w->data, (size_t)w->payload);
    if (w->rc == TT_OK && w->stall_ms > 0) {
        TT_WARN("shard", "test knob: part %s/%s stalls %u ms before its fsync", w->dir, w->file,
                w->stall_ms);
        tt_clock_sleep_ms(w->stall_ms);
    }
    if (w->rc == TT_OK)
        w->rc = tt_ckpt_writer_finish(wr, &w->info);
    if (w->rc != TT_OK && wr != NULL)
        snprintf(w->msg, sizeof(w->msg), "%s", tt_ckpt_writer_error(wr));
    tt_ckpt_writer_destroy(&wr);
}

/* The part `w` wrote, to whoever asks (the writer's peer, or a phase-2
 * question's). */
static void reply_written(const ckpt_work_t *w, const uint8_t *peer, size_t peer_len, uint64_t gen,
                          uint64_t req_id) {
    Tether__CkptRange *r = calloc(w->nranges ? w->nranges : 1, sizeof(*r));
    Tether__CkptRange **rp = calloc(w->nranges ? w->nranges : 1, sizeof(*rp));
    if (r == NULL || rp == NULL) {
        free(r);
        free(rp);
        shard_send_error(w->s, peer, peer_len, w->job, gen, req_id, TT_ENOMEM,
                         "out of memory answering a written part");
        return;
    }
    for (uint32_t i = 0; i < w->nranges; i++) {
        tether__ckpt_range__init(&r[i]);
        r[i].offset = w->ranges[i].offset;
        r[i].length = w->ranges[i].length;
        rp[i] = &r[i];
    }
    Tether__CkptPart part = TETHER__CKPT_PART__INIT;
    part.file = (char *)w->file; /* only read */
    part.kind = w->info.kind;
    part.size = w->info.size;
    part.crc32c = w->info.crc32c;
    part.n_ranges = w->nranges;
    part.ranges = rp;
    part.planes = w->planes;
    Tether__ChunksWritten cw = TETHER__CHUNKS_WRITTEN__INIT;
    cw.part = &part;
    tt_env_t env;
    tt_wire_env_init(&env, w->job, w->s->id, gen, req_id);
    env.body_case = TETHER__ENVELOPE__BODY_CHUNKS_WRITTEN;
    env.chunks_written = &cw;
    shard_send(w->s, peer, peer_len, &env, NULL, 0);
    free(r);
    free(rp);
}

/* A phase-1 write that ended (or failed before its write): kept for the
 * phase-2 question in place of the one before. */
static void keep_last(shard_job_t *job, ckpt_work_t *w) {
    if (job->ckpt_last != NULL)
        work_free(job->ckpt_last);
    job->ckpt_last = w;
}

static void work_done(uv_work_t *req, int status) {
    ckpt_work_t *w = req->data;
    shard_job_t *job = shard_find_job(w->s, w->job);
    if (job != NULL) {
        job->writing = 0;
        job->ckpt_cur = job->ckpt_cur == w ? NULL : job->ckpt_cur;
        return_buffer(w, job);
    }
    if (status != 0 && w->rc == TT_OK) {
        w->rc = TT_EINTERNAL;
        snprintf(w->msg, sizeof(w->msg), "the write was cancelled");
    }
    if (w->rc == TT_OK)
        TT_INFO("shard", "job %s: wrote checkpoint part %s/%s (%llu bytes, %u chunks)", w->job,
                w->dir, w->file, (unsigned long long)w->info.size, w->nranges);
    else
        TT_ERROR("shard", "job %s: checkpoint part %s/%s not written: %s", w->job, w->dir, w->file,
                 w->msg);
    if (w->phase == 1 && job != NULL) {
        keep_last(job, w);
        return;
    }
    if (w->s->closing || w->phase == 1) {
        /* the sockets are gone (the worker's call fails on its deadline),
         * or the job with the result: a phase-2 question is refused */
    } else if (w->rc == TT_OK) {
        reply_written(w, w->peer, w->peer_len, w->gen, w->req_id);
    } else {
        shard_send_error(w->s, w->peer, w->peer_len, w->job, w->gen, w->req_id, TT_EIO, w->msg);
    }
    work_free(w);
}

void shard_ckpt_forget(shard_job_t *job) {
    if (job->ckpt_last != NULL)
        work_free(job->ckpt_last); /* ckpt_cur is its write's own, freed there */
    job->ckpt_last = job->ckpt_cur = NULL;
    free(job->snap_mem);
    job->snap_mem = NULL;
}

static int same_part(const ckpt_work_t *w, const Tether__WriteChunks *r) {
    return w != NULL && strcmp(w->dir, r->dir) == 0 && strcmp(w->file, r->file) == 0;
}

/* Phase 2: the result of a part begun with phase 1. */
static void answer_result(tt_shard_t *s, const uint8_t *peer, size_t peer_len,
                          const tt_env_t *env) {
    const Tether__WriteChunks *r = env->write_chunks;
    shard_job_t *job = shard_find_job(s, env->job_id);
    char msg[4400];
    int rc = TT_ESTALE;
    if (job == NULL) {
        rc = TT_ENOTFOUND; /* the client's word for "restarted" */
        snprintf(msg, sizeof(msg), "job %s is not set up on this shard", env->job_id);
    } else if (same_part(job->ckpt_cur, r)) {
        rc = TT_EAGAIN;
        snprintf(msg, sizeof(msg), "part %s/%s is still being written", r->dir, r->file);
    } else if (same_part(job->ckpt_last, r) && job->ckpt_last->rc == TT_OK) {
        reply_written(job->ckpt_last, peer, peer_len, env->generation, env->request_id);
        return;
    } else if (same_part(job->ckpt_last, r)) {
        /* ESTALE (the state does not follow the step) as it was refused;
         * any other failure is the part's EIO, never a code the asker
         * would retry. */
        rc = job->ckpt_last->rc == TT_ESTALE ? TT_ESTALE : TT_EIO;
        snprintf(msg, sizeof(msg), "%s", job->ckpt_last->msg);
    } else {
        snprintf(msg, sizeof(msg), "no part %s/%s was begun here", r->dir, r->file);
    }
    shard_send_error(s, peer, peer_len, env->job_id, env->generation, env->request_id, rc, msg);
}

static void reply_ack(tt_shard_t *s, const uint8_t *peer, size_t peer_len, const tt_env_t *env) {
    Tether__Ack a = TETHER__ACK__INIT;
    tt_env_t out;
    tt_wire_env_init(&out, env->job_id, s->id, env->generation, env->request_id);
    out.body_case = TETHER__ENVELOPE__BODY_ACK;
    out.ack = &a;
    shard_send(s, peer, peer_len, &out, NULL, 0);
}

/* Test knob only: TETHER_SHARD_TEST_CKPT_STALL=MS@ROUND makes a part whose
 * state follows round ROUND or later wait MS ms before its fsync, so a test
 * can kill the shard mid-write. */
static uint32_t stall_for_test(const Tether__WriteChunks *r) {
    const char *knob = getenv("TETHER_SHARD_TEST_CKPT_STALL");
    char *at = NULL;
    unsigned long ms = knob != NULL ? strtoul(knob, &at, 10) : 0;
    if (ms == 0 || at == NULL || *at != '@' || r->step < strtoull(at + 1, NULL, 10))
        return 0;
    return (uint32_t)(ms > 600000 ? 600000 : ms);
}

/* Picks the requested chunks of `job`; 0 or a refusal with msg. */
static int pick(shard_job_t *job, const Tether__WriteChunks *r, ckpt_pick_t *p, char *msg,
                size_t len) {
    for (size_t i = 0; i < r->n_chunks; i++) {
        p[i].req = r->chunks[i];
        p[i].ch = shard_find_chunk(job, r->chunks[i]->chunk);
        if (p[i].ch == NULL) {
            snprintf(msg, len, "chunk %u is not held here", r->chunks[i]->chunk);
            return TT_ENOTFOUND;
        }
    }
    if (r->n_chunks != job->nchunks) {
        snprintf(msg, len, "asked for %zu chunks, this shard holds %zu of the job", r->n_chunks,
                 job->nchunks);
        return TT_EINVAL;
    }
    return TT_OK;
}

/* The checks a request must pass before anything is copied; *picks (on
 * success): the chunks, sorted by offset, for copy_and_queue. */
static int prepare(tt_shard_t *s, const tt_env_t *env, ckpt_work_t *w, shard_job_t **jobp,
                   ckpt_pick_t **picks) {
    const Tether__WriteChunks *r = env->write_chunks;
    shard_job_t *job = shard_find_job(s, env->job_id);
    *jobp = job;
    if (job == NULL) {
        snprintf(w->msg, sizeof(w->msg), "job %s is not set up on this shard", env->job_id);
        return TT_EJOB;
    }
    if (job->writing) {
        snprintf(w->msg, sizeof(w->msg), "a checkpoint part of the job is being written");
        return TT_EBUSY;
    }
    if (!tt_ckpt_name_ok(r->file) || strlen(r->dir) >= sizeof(w->dir)) {
        snprintf(w->msg, sizeof(w->msg), "part name '%s' or its directory is not acceptable",
                 r->file);
        return TT_EINVAL;
    }
    ckpt_pick_t *p = calloc(r->n_chunks, sizeof(*p));
    if (p == NULL)
        return TT_ENOMEM;
    int rc = pick(job, r, p, w->msg, sizeof(w->msg));
    if (rc == TT_OK)
        rc = check_picks(p, r->n_chunks, r, &w->planes, w->msg, sizeof(w->msg));
    if (rc == TT_OK)
        *picks = p;
    else
        free(p);
    return rc;
}

/* The copy, then the write on the pool. 0, or a failure with w->msg. */
static int copy_and_queue(tt_shard_t *s, ckpt_work_t *w, shard_job_t *job, ckpt_pick_t *p,
                          size_t n) {
    int rc = snapshot(w, job, p, n);
    free(p);
    if (rc != TT_OK)
        snprintf(w->msg, sizeof(w->msg),
                 rc == TT_ENOMEM ? "out of memory for the snapshot" : "parameters never set");
    if (rc == TT_OK && uv_queue_work(s->loop, &w->req, work_run, work_done) != 0) {
        rc = TT_ESYS;
        snprintf(w->msg, sizeof(w->msg), "could not queue the write");
    }
    if (rc == TT_OK)
        job->writing = 1;
    return rc;
}

/* Phase 1. Why the asker need not wait for this answer: the copy runs in
 * this callback, before the loop reads another message; the asker's next
 * push to this shard travels on the same connection after the request
 * (ZeroMQ keeps a connection's order), and the step after it cannot
 * complete without that push. So no later round reaches the chunks before
 * the copy, however long the answer takes. A refusal (`rc`) or a failed
 * copy is kept for the phase-2 question, which is where the asker learns
 * it. */
static void begin_part(tt_shard_t *s, ckpt_work_t *w, shard_job_t *job, ckpt_pick_t *p, int rc,
                       const tt_env_t *env) {
    if (rc == TT_OK) {
        reply_ack(s, w->peer, w->peer_len, env);
        rc = copy_and_queue(s, w, job, p, env->write_chunks->n_chunks);
        if (rc == TT_OK) {
            job->ckpt_cur = w;
            return;
        }
        w->rc = TT_EIO;
    } else {
        shard_send_error(s, w->peer, w->peer_len, env->job_id, env->generation, env->request_id, rc,
                         w->msg);
        w->rc = rc;
    }
    TT_WARN("shard", "job %s: checkpoint part %s/%s not begun: %s", w->job, w->dir, w->file,
            w->msg);
    keep_last(job, w);
}

void shard_ckpt_write(tt_shard_t *s, const uint8_t *peer, size_t peer_len, const tt_env_t *env) {
    if (env->write_chunks->phase == 2) {
        answer_result(s, peer, peer_len, env);
        return;
    }
    ckpt_work_t *w = calloc(1, sizeof(*w));
    if (w == NULL) {
        shard_send_error(s, peer, peer_len, env->job_id, env->generation, env->request_id,
                         TT_ENOMEM, "out of memory");
        return;
    }
    w->req.data = w;
    w->s = s;
    memcpy(w->peer, peer, peer_len);
    w->peer_len = peer_len;
    snprintf(w->job, sizeof(w->job), "%s", env->job_id);
    w->gen = env->generation;
    w->req_id = env->request_id;
    snprintf(w->dir, sizeof(w->dir), "%s", env->write_chunks->dir);
    snprintf(w->file, sizeof(w->file), "%s", env->write_chunks->file);
    w->stall_ms = stall_for_test(env->write_chunks);
    w->phase = env->write_chunks->phase;
    shard_job_t *job = NULL;
    ckpt_pick_t *p = NULL;
    int rc = prepare(s, env, w, &job, &p);
    if (w->phase == 1 && job != NULL) {
        begin_part(s, w, job, p, rc, env);
        return;
    }
    if (rc == TT_OK)
        rc = copy_and_queue(s, w, job, p, env->write_chunks->n_chunks);
    if (rc != TT_OK) {
        TT_DEBUG("shard", "write chunks for %s refused: %s", env->job_id, w->msg);
        shard_send_error(s, peer, peer_len, env->job_id, env->generation, env->request_id, rc,
                         w->msg);
        work_free(w);
    }
}
