/* tt_ps_ckpt: the PS backend's checkpoint call in optimizer mode, where the
 * parameters and optimizer state live only on the shard servers: one
 * WriteChunks per shard (its chunks and their flat offsets, from the
 * placement) through the request engine of tt_ps.c, and the parts the
 * shards report back (ChunksWritten) for the manifest. Writing is the
 * shards' work (shard_ckpt.c); this only asks and collects. */
#include "tt_ps_internal.h"
#include "tt_status.h"

#include <stdlib.h>
#include <string.h>

int ps_build_write(tt_ps_t *p, const ps_op_t *op, size_t s, ps_msg_t *m) {
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
    w->file = op->written[s].file;
    w->step = op->step;
    w->check_step = op->check_step;
    w->phase = op->phase;
    w->n_chunks = k;
    w->chunks = m->offset_ptrs;
    m->env.body_case = TETHER__ENVELOPE__BODY_WRITE_CHUNKS;
    m->env.write_chunks = w;
    return TT_OK;
}

int ps_on_written(tt_ps_t *p, ps_op_t *op, size_t s, const tt_zmq_rx_t *rx) {
    const Tether__CkptPart *part = rx->env->chunks_written->part;
    tt_ps_written_t *w = &op->written[s];
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
        snprintf(out[s].file, sizeof(out[s].file), "ps-%zu.bin", s);
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

int tt_ps_checkpoint_begin(tt_ps_t *p, const char *dir, const uint64_t *after_round) {
    size_t n = p != NULL ? p->lay.place.nshards : 0;
    tt_ps_written_t *names = calloc(n ? n : 1, sizeof(*names));
    int rc = names != NULL ? write_op(p, dir, after_round, 1, names) : TT_ENOMEM;
    free(names);
    return rc;
}

int tt_ps_checkpoint_result(tt_ps_t *p, const char *dir, tt_ps_written_t *out) {
    return write_op(p, dir, NULL, 2, out);
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
