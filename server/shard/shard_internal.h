/* shard_internal: the daemon's private structs, shared by shard.c (life
 * cycle, coordinator link, timer), shard_data.c (data-plane requests) and
 * shard_chunk.c (per-chunk work queue, results, parked pulls). Not used
 * outside server/shard/. */
#ifndef TT_SHARD_INTERNAL_H
#define TT_SHARD_INTERNAL_H

#include "shard.h"
#include "tt_accum.h"
#include "tt_uvzmq.h"
#include "tt_wire.h"
#include "tt_zmq.h"

#include <stdatomic.h>
#include <uv.h>

/* ZeroMQ hands zero-copy frames to its I/O thread through lock-free pipes
 * TSan cannot see (tests/sanitizers/tsan.supp): release a frame's address
 * before sending it and acquire it in the free callback. */
#include "tt_tsan.h"

/* A final result, shared by every reply that sends it without a copy; the
 * last reference (the chunk's or a ZeroMQ frame's) frees it. */
typedef struct shard_blob {
    atomic_int refs;
    size_t n;
    float data[];
} shard_blob_t;

/* A pull (or a push with want_result) waiting for its round. */
typedef struct shard_park {
    struct shard_park *next;
    uint8_t peer[TT_ZMQ_MAX_PEER];
    size_t peer_len;
    uint64_t req, gen, step, deadline;
} shard_park_t;

/* An admitted contribution whose data still has to be folded in. */
typedef struct shard_contrib {
    zmq_msg_t msg;
    uint32_t rank;
    int first;
} shard_contrib_t;

struct shard_job;

typedef struct shard_chunk {
    struct shard_job *job;
    uint32_t id;
    tt_accum_t *acc;
    shard_contrib_t *pending; /* admitted, not yet handed to the pool */
    size_t npending, cappending;
    int complete_pending; /* the round is complete: the next work finishes it */
    int busy;             /* a work item runs in the pool */
    shard_blob_t *result; /* last final result, or NULL */
    shard_blob_t *spare;  /* a result nobody references any more, for reuse */
    uint64_t result_gen, result_step, result_total;
    shard_park_t *parks;
} shard_chunk_t;

typedef struct shard_job {
    struct tt_shard *s;
    char id[TT_WIRE_MAX_ID + 1];
    uint64_t placement_version;
    tt_accum_opts_t base;   /* options of every chunk, elems aside */
    shard_chunk_t **chunks; /* sorted by id */
    size_t nchunks;
    int writing; /* a checkpoint part is being written (shard_ckpt.c) */
    /* Two-phase writes (WriteChunks.phase 1): the one in flight and the
     * last one finished, kept for the phase-2 question (shard_ckpt.c). */
    struct ckpt_work *ckpt_cur, *ckpt_last;
    void *snap_mem; /* the last write's snapshot buffer, for the next */
    size_t snap_cap;
} shard_job_t;

struct tt_shard {
    uv_loop_t *loop;
    void *zctx, *router, *dealer;
    tt_zauth_key_t key;
    tt_zauth_zap_t *zap; /* admits holders of `key` to the router */
    void *router_mon;    /* the router's failed handshakes, read on the tick */
    tt_zauth_watch_t handshakes;
    tt_uvzmq_t *router_w, *dealer_w;
    /* The dealer's way to the coordinator (watch_coordinator in shard.c):
     * a coordinator this shard cannot reach, or no longer reaches, is
     * named once in the log rather than heartbeated at in silence. */
    void *dealer_mon;
    tt_zmq_reach_t coord_reach;
    uint64_t coord_down_ms; /* the reached coordinator's connection dropped then; 0: up */
    int coord_warned;
    char coordinator[256];
    uv_timer_t timer;
    char endpoint[256], advertise[256], id[TT_WIRE_MAX_ID + 1];
    uint64_t incarnation;
    uint32_t hb_ms, park_ms;
    uint64_t max_chunk, last_hb_ms;
    shard_job_t **jobs;
    size_t njobs;
    int closing;
    tt_wire_limits_t lim;
    uint64_t die_step; /* tt_shard_opts_t's test knob */
    char die_once[256];
};

/* shard.c */
void shard_send(tt_shard_t *s, const uint8_t *peer, size_t peer_len, const tt_env_t *env,
                const tt_zmq_payload_t *pl, size_t npl);
void shard_send_error(tt_shard_t *s, const uint8_t *peer, size_t peer_len, const char *job,
                      uint64_t gen, uint64_t req, int code, const char *msg);
void shard_report_stall(tt_shard_t *s, shard_job_t *job, shard_chunk_t *ch);
uint64_t shard_bytes_held(const tt_shard_t *s, uint32_t *chunks);

/* shard_data.c: one decoded request on the data socket. */
void shard_on_data(void *sock, void *arg);
void shard_job_free(shard_job_t **job);
shard_job_t *shard_find_job(tt_shard_t *s, const char *id); /* NULL when not set up */
shard_chunk_t *shard_find_chunk(const shard_job_t *job, uint32_t id);

/* shard_ckpt.c: WriteChunks: snapshot now, write on the pool, answer
 * ChunksWritten or an Error to `peer` when the part is durable. */
void shard_ckpt_write(tt_shard_t *s, const uint8_t *peer, size_t peer_len, const tt_env_t *env);
/* Frees what a job keeps of its checkpoint writes (shard_job_free). */
void shard_ckpt_forget(shard_job_t *job);

/* shard_chunk.c */
int shard_chunk_new(shard_job_t *job, uint32_t id, size_t elems, shard_chunk_t **out);
void shard_chunk_free(shard_chunk_t **ch);
/* Queue an admitted contribution (moves the frame) and start work. */
int shard_chunk_enqueue(shard_chunk_t *ch, zmq_msg_t *frame, uint32_t rank,
                        const tt_accum_ticket_t *t);
/* Answers at once when the result of (gen, step) is held, else parks the
 * request until it is (or its deadline). */
int shard_chunk_park(shard_chunk_t *ch, const uint8_t *peer, size_t peer_len, uint64_t req,
                     uint64_t gen, uint64_t step, uint64_t now);
/* Optimizer mode, a replay ticket (tt_accum.h): holds the chunk's current
 * parameters as the result of (gen, step) unless it already does. 0 or
 * TT_ENOMEM. */
int shard_chunk_replay(shard_chunk_t *ch, uint64_t gen, uint64_t step);
/* Answers a request for (gen, step) at once when its result is held;
 * returns 1 when it did. */
int shard_chunk_answer(shard_chunk_t *ch, const uint8_t *peer, size_t peer_len, uint64_t req,
                       uint64_t gen, uint64_t step);
/* Generation moved on: fail parks of older generations, drop old result. */
void shard_chunk_new_gen(shard_chunk_t *ch, uint64_t gen);
/* Drops the open round unfinished; its parks are answered `code` with
 * `msg`. Only while the chunk is idle (not busy). */
void shard_chunk_abandon(shard_chunk_t *ch, int code, const char *msg);
/* Deadlines: report stalls, fail expired parks with the missing ranks. */
void shard_chunk_tick(shard_chunk_t *ch, uint64_t now);

#endif
