/* tt_ps_ckpt: the PS backend's checkpoint calls in optimizer mode, where
 * the parameters and optimizer state live only on the shard servers: one
 * WriteChunks per shard (its chunks and their flat offsets, from the
 * placement) through the request engine of tt_ps.c, and the parts the
 * shards report back (ChunksWritten) for the manifest. Writing is the
 * shards' work (shard_ckpt.c); this only asks and collects.
 * The phase-2 question (tt_ps_checkpoint_result) goes outside the engine:
 * its request ids carry PS_SIDE_SEQ, which no operation reaches, so the
 * answers are taken whenever a socket is read (by the steps' own
 * operations, or the next call here) and no call waits for a shard's loop
 * to be scheduled, which on a busy host had cost the asker milliseconds a
 * checkpoint. */
#include "tt_ps_internal.h"
#include "tt_status.h"

#include "tt_clock.h"

#include <stdlib.h>
#include <string.h>

int ps_build_write(tt_ps_t *p, const ps_op_t *op, size_t s, const char *file, ps_msg_t *m) {
    size_t n = p->lay.place.nchunks, k = 0;
    m->offsets = calloc(n ? n : 1, sizeof(*m->offsets));
    m->offset_ptrs = calloc(n ? n : 1, sizeof(*m->offset_ptrs));
    if (m->offsets == NULL || m->offset_ptrs == NULL)
        return TT_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        if (ps_chunk(p, i)->shard != s)
            continue;
        tether__chunk_offset__init(&m->offsets[k]);
        m->offsets[k].chunk = (uint32_t)i;
        m->offsets[k].offset = ps_chunk(p, i)->offset;
        m->offset_ptrs[k] = &m->offsets[k];
        k++;
    }
    Tether__WriteChunks *w = &m->b.write;
    tether__write_chunks__init(w);
    w->dir = (char *)op->dir;
    w->file = (char *)file; /* only read */
    w->step = op->step;
    w->check_step = op->check_step;
    w->phase = op->phase;
    w->n_chunks = k;
    w->chunks = m->offset_ptrs;
    m->env.body_case = TETHER__ENVELOPE__BODY_WRITE_CHUNKS;
    m->env.write_chunks = w;
    return TT_OK;
}

/* The part shard s writes: ps-<s>.bin in the checkpoint's directory. */
static void part_name(tt_ps_written_t *w, size_t s) {
    snprintf(w->file, sizeof(w->file), "ps-%zu.bin", s);
}

int ps_on_written(tt_ps_t *p, tt_ps_written_t *w, size_t s, const tt_zmq_rx_t *rx) {
    const Tether__CkptPart *part = rx->env->chunks_written->part;
    if (strcmp(part->file, w->file) != 0 || part->kind != TT_CKPT_KIND_SHARD ||
        part->n_ranges == 0) {
        PS_ERR(p, "shard %s reported part '%s' (kind %u, %zu ranges) for %s",
               p->lay.place.shard_ids[s], part->file, part->kind, part->n_ranges, w->file);
        return TT_EPROTO;
    }
    free(w->ranges);
    w->ranges = calloc(part->n_ranges, sizeof(*w->ranges));
    if (w->ranges == NULL)
        return TT_ENOMEM;
    for (size_t i = 0; i < part->n_ranges; i++)
        w->ranges[i] = (tt_ckpt_range_t){part->ranges[i]->offset, part->ranges[i]->length};
    w->nranges = (uint32_t)part->n_ranges;
    w->size = part->size;
    w->crc32c = part->crc32c;
    w->planes = part->planes;
    return TT_OK;
}

static int write_op(tt_ps_t *p, const char *dir, const uint64_t *after_round, uint32_t phase,
                    tt_ps_written_t *out) {
    if (p == NULL || dir == NULL || dir[0] != '/' || out == NULL || p->o.mode != TT_PS_OPTIMIZER) {
        if (p != NULL)
            PS_ERR(p, "a checkpoint through the shards needs optimizer mode and an absolute dir");
        return TT_EINVAL;
    }
    if (p->failed)
        return p->failed;
    size_t n = p->lay.place.nshards;
    memset(out, 0, n * sizeof(*out));
    for (size_t s = 0; s < n; s++)
        part_name(&out[s], s);
    ps_op_t op = {.kind = PS_OP_WRITE,
                  .nitems = n,
                  .dir = dir,
                  .step = after_round != NULL ? *after_round : 0,
                  .check_step = after_round != NULL,
                  .phase = phase,
                  .no_reply = phase == 1, /* tt_ps_checkpoint_begin: why, in tt_ps.h */
                  .written = out};
    return ps_run_op(p, &op);
}

int tt_ps_write_checkpoint(tt_ps_t *p, const char *dir, const uint64_t *after_round,
                           tt_ps_written_t *out) {
    return write_op(p, dir, after_round, 0, out);
}

/* ---- the phase-2 question outside the engine ---- */

/* Forgets the questions and answers of the checkpoint before; the next
 * ones are about `dir`. */
static int side_reset(tt_ps_t *p, const char *dir) {
    size_t n = p->lay.place.nshards;
    if (p->side == NULL && (p->side = calloc(n, sizeof(*p->side))) == NULL)
        return TT_ENOMEM;
    char *d = strdup(dir);
    if (d == NULL)
        return TT_ENOMEM;
    free(p->side_dir);
    p->side_dir = d;
    p->side_ckpt = (p->side_ckpt + 1) % PS_SIDE_SEQ;
    for (size_t k = 0; k < n; k++) {
        tt_ps_written_free(&p->side[k].w, 1);
        memset(&p->side[k], 0, sizeof(p->side[k]));
        part_name(&p->side[k].w, k);
    }
    p->side_rc = TT_OK;
    return TT_OK;
}

void ps_side_free(tt_ps_t *p) {
    for (size_t k = 0; p->side != NULL && k < p->lay.place.nshards; k++)
        tt_ps_written_free(&p->side[k].w, 1);
    free(p->side);
    free(p->side_dir);
    p->side = NULL;
    p->side_dir = NULL;
}

static void side_fail(tt_ps_t *p, size_t s, int rc, const char *fmt, const char *what) {
    p->side[s].state = PS_SIDE_FAILED;
    if (p->side_rc == TT_OK) {
        p->side_rc = rc;
        snprintf(p->side_msg, sizeof(p->side_msg), fmt, p->lay.place.shard_ids[s], what);
    }
}

int ps_side_reply(tt_ps_t *p, size_t s, const tt_zmq_rx_t *rx) {
    uint64_t req = rx->env->request_id;
    if (p->side == NULL || (req >> PS_ITEM_BITS) != (PS_SIDE_SEQ | p->side_ckpt) ||
        (size_t)(req & PS_SETUP_ITEM) != s || p->side[s].state != PS_SIDE_ASKED)
        return TT_OK; /* an answer about a checkpoint given up */
    const tt_env_t *e = rx->env;
    if (e->body_case == TETHER__ENVELOPE__BODY_ERROR && e->error->code == TT_EAGAIN) {
        p->side[s].state = PS_SIDE_AGAIN;
    } else if (e->body_case == TETHER__ENVELOPE__BODY_ERROR) {
        int code = e->error->code;
        side_fail(p, s, code == TT_ESTALE || code == TT_ENOTFOUND ? TT_ESTALE : TT_EIO,
                  "shard %s: %s", e->error->message != NULL ? e->error->message : "");
    } else if (e->body_case != TETHER__ENVELOPE__BODY_CHUNKS_WRITTEN) {
        side_fail(p, s, TT_EPROTO, "shard %s answered the checkpoint question with '%s'",
                  tt_wire_body_name(e->body_case));
    } else if (ps_on_written(p, &p->side[s].w, s, rx) != TT_OK) {
        side_fail(p, s, TT_EPROTO, "shard %s: %s", p->err);
    } else {
        p->side[s].state = PS_SIDE_DONE;
    }
    return TT_OK; /* the operation it arrived in is not the checkpoint's */
}

/* The question to shard s, with no operation behind it. */
static int side_ask(tt_ps_t *p, size_t s, uint64_t now) {
    ps_msg_t m;
    memset(&m, 0, sizeof(m));
    ps_op_t op = {.kind = PS_OP_WRITE, .dir = p->side_dir, .phase = 2};
    tt_wire_env_init(&m.env, p->job, p->sender, p->o.generation,
                     ((PS_SIDE_SEQ | p->side_ckpt) << PS_ITEM_BITS) | (uint64_t)s);
    int rc = ps_build_write(p, &op, s, p->side[s].w.file, &m);
    if (rc == TT_OK)
        rc = tt_zmq_send(p->socks[s], NULL, 0, &m.env, NULL, 0, 1);
    free(m.offsets);
    free(m.offset_ptrs);
    if (rc == TT_OK) {
        p->side[s].state = PS_SIDE_ASKED;
        p->side[s].asked_ms = now;
    }
    return rc == TT_EAGAIN ? TT_OK : rc; /* not connected now: asked again next call */
}

int tt_ps_checkpoint_begin(tt_ps_t *p, const char *dir, const uint64_t *after_round) {
    size_t n = p != NULL ? p->lay.place.nshards : 0;
    tt_ps_written_t *names = calloc(n ? n : 1, sizeof(*names));
    int rc = names != NULL ? write_op(p, dir, after_round, 1, names) : TT_ENOMEM;
    free(names);
    if (rc == TT_OK)
        rc = side_reset(p, dir);
    return rc;
}

/* Every shard's part durable: out[] takes them over. */
static int side_collect(tt_ps_t *p, tt_ps_written_t *out) {
    size_t n = p->lay.place.nshards;
    for (size_t s = 0; s < n; s++)
        if (p->side[s].state != PS_SIDE_DONE)
            return TT_EAGAIN;
    for (size_t s = 0; s < n; s++) {
        out[s] = p->side[s].w; /* the ranges go with it; the name stays */
        p->side[s].w.ranges = NULL;
        p->side[s].w.nranges = 0;
        p->side[s].state = PS_SIDE_NONE; /* asking again asks anew */
    }
    return TT_OK;
}

int tt_ps_checkpoint_result(tt_ps_t *p, const char *dir, tt_ps_written_t *out) {
    if (p == NULL || dir == NULL || dir[0] != '/' || out == NULL || p->o.mode != TT_PS_OPTIMIZER)
        return TT_EINVAL;
    if (p->failed)
        return p->failed;
    if ((p->side_dir == NULL || strcmp(p->side_dir, dir) != 0) && side_reset(p, dir) != TT_OK)
        return TT_ENOMEM;
    size_t n = p->lay.place.nshards;
    uint64_t now = tt_clock_mono_ms();
    ps_op_t none = {.kind = PS_OP_WRITE}; /* no items: other replies are dropped */
    int rc = TT_OK;
    for (size_t s = 0; rc == TT_OK && s < n; s++)
        rc = ps_drain(p, &none, s, now);
    if (rc != TT_OK)
        return rc;
    if (p->side_rc != TT_OK) {
        PS_ERR(p, "%s", p->side_msg);
        return p->side_rc;
    }
    if (side_collect(p, out) == TT_OK)
        return TT_OK;
    for (size_t s = 0; rc == TT_OK && s < n; s++) {
        ps_side_t *q = &p->side[s];
        if (q->state == PS_SIDE_NONE || q->state == PS_SIDE_AGAIN)
            rc = side_ask(p, s, now);
        else if (q->state == PS_SIDE_ASKED && now - q->asked_ms > (uint64_t)p->o.deadline_ms) {
            PS_ERR(p, "shard %s did not answer whether part %s/%s is written within %d ms",
                   p->lay.place.shard_ids[s], dir, q->w.file, p->o.deadline_ms);
            rc = TT_ETIMEDOUT;
        }
    }
    return rc == TT_OK ? TT_EAGAIN : rc;
}

void tt_ps_written_free(tt_ps_written_t *w, size_t n) {
    for (size_t i = 0; w != NULL && i < n; i++) {
        free(w[i].ranges);
        w[i].ranges = NULL;
    }
}

size_t tt_ps_nshards(const tt_ps_t *p) {
    return p->lay.place.nshards;
}
