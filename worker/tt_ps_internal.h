/* tt_ps_internal: the PS backend's private state, shared by tt_ps.c (the
 * request engine, its messages and the public calls) and tt_ps_recover.c
 * (refusals a shard answers after a restart, lost connections, and the
 * copy of this rank's inputs that refills a restarted shard). Not used
 * outside worker/tt_ps*.c. Thread safety: that of tt_ps.h (one thread at a
 * time per object). */
#ifndef TT_PS_INTERNAL_H
#define TT_PS_INTERNAL_H

#include "tt_ps.h"
#include "tt_wake.h"
#include "tt_wire.h"
#include "tt_zmq.h"

#include <stdatomic.h>
#include <stdio.h>

#define PS_SUBSYS     "ps"
#define PS_ERRLEN     512
#define PS_ITEM_BITS  24
#define PS_SETUP_ITEM (((size_t)1 << PS_ITEM_BITS) - 1) /* request id of a re-setup */
#define PS_RETRY_MS   2                                 /* a shard asked us to come back */

/* Item states, and flags of items that go again after a refusal or a lost
 * connection (tt_ps_recover.c says when each is set). */
enum { PS_SEND = 0, PS_FLIGHT = 1, PS_DONE = 2 };
enum {
    PS_F_RESENT = 1,   /* sent again: copy the payload; a duplicate is no error */
    PS_F_PULL = 2,     /* the shard holds our push: ask for the result */
    PS_F_REFILL = 4,   /* push our saved input of the previous step first */
    PS_F_REFILLED = 8, /* that is done: this step's push may wait its turn */
};

/* SETUP and WRITE have one item per shard, the others one per chunk. */
typedef enum { PS_OP_SETUP, PS_OP_PUSH, PS_OP_SET, PS_OP_GET, PS_OP_WRITE } ps_op_kind_t;

typedef struct ps_op {
    ps_op_kind_t kind;
    float *buf;       /* push: the flat buffer; get: the destination */
    const float *src; /* set */
    size_t offset, count;
    uint64_t local_count, step, optim_step;
    tt_ps_part_t part;
    size_t first, nitems; /* items first .. first + nitems - 1 */
    uint8_t *state;       /* per item: PS_SEND, PS_FLIGHT, PS_DONE */
    uint8_t *flags;       /* per item: PS_F_* */
    size_t remaining, recoveries;
    uint64_t total, got_optim_step;
    int have_total, have_optim_step;
    uint64_t retry_at;        /* a shard asked to come back */
    const char *dir;          /* write: the checkpoint directory */
    int check_step;           /* write: the shards' last round must be `step` */
    uint32_t phase;           /* write: WriteChunks.phase (0 whole, 1 begin, 2 result) */
    int no_reply;             /* an item is done once sent (its answer is not read) */
    tt_ps_written_t *written; /* write: one per shard */
} ps_op_t;

/* One request being built; the arrays are freed once it is sent. */
typedef struct ps_msg {
    tt_env_t env;
    union {
        Tether__PsSetup setup;
        Tether__PushChunk push;
        Tether__PullChunk pull;
        Tether__SetParams set;
        Tether__GetParams get;
        Tether__WriteChunks write;
    } b;
    Tether__PsChunkSpec *specs;
    Tether__PsChunkSpec **spec_ptrs;
    Tether__ChunkOffset *offsets;
    Tether__ChunkOffset **offset_ptrs;
    tt_zmq_payload_t pl;
    size_t npl;
} ps_msg_t;

/* A phase-2 checkpoint question to one shard (tt_ps_ckpt.c), asked
 * outside the engine: its request id's sequence is PS_SIDE_SEQ | the
 * checkpoint's number (so an answer about an earlier checkpoint is told
 * apart: a part's name does not say its directory), its item the shard. */
#define PS_SIDE_SEQ ((uint64_t)1 << 39) /* op_seq of operations never gets here */
enum { PS_SIDE_NONE, PS_SIDE_ASKED, PS_SIDE_AGAIN, PS_SIDE_DONE, PS_SIDE_FAILED };
typedef struct ps_side {
    int state;         /* PS_SIDE_* */
    uint64_t asked_ms; /* when the question in flight was sent */
    tt_ps_written_t w; /* the file asked about; the part once DONE */
} ps_side_t;

/* What the engine knows of its connection to one shard. Until a ZeroMQ
 * handshake with it completes (`reach.met`), a dropped connection lost nothing
 * (ZMQ_IMMEDIATE queues nothing before) and is only counted, so that a
 * shard this rank cannot reach is named rather than reported as lost. */
typedef struct ps_link {
    void *mon;             /* the DEALER's monitor PAIR */
    uint8_t down;          /* dropped and not connected again yet */
    uint8_t resetup;       /* send PsSetup before the next request */
    uint8_t setup_pending; /* that PsSetup is not answered yet */
    uint8_t refill_due;    /* dropped since the last push call began: tt_ps_tend refills */
    uint8_t warned;        /* ps_check_links said it cannot connect */
    tt_zmq_reach_t reach;  /* reach.met: a handshake with the shard completed */
} ps_link_t;

struct tt_ps {
    tt_ps_opts_t o;
    tt_ps_layout_t lay;
    char job[TT_WIRE_MAX_ID + 1], sender[TT_WIRE_MAX_ID + 1];
    void *zctx;
    void **socks;
    ps_link_t *link; /* per shard */
    size_t *inflight, *cursor;
    zmq_pollitem_t *polls;
    uint64_t seq, op_seq;
    float lr;
    atomic_long zc_out;
    tt_wake_t wake; /* tt_ps_interrupt: the generation ended; polled in waits */
    int failed, suspect;
    /* Deterministic aggregate mode: each chunk's last pushed input, its
     * step and example count (saved_step UINT64_MAX: none). NULL else. */
    float *saved;
    uint64_t *saved_step, *saved_examples;
    /* The phase-2 checkpoint questions (tt_ps_ckpt.c): per shard, about
     * side_dir; the first failure's status and sentence. */
    ps_side_t *side;
    uint64_t side_ckpt; /* the checkpoint's number, below PS_SIDE_SEQ */
    char *side_dir;
    int side_rc;
    char side_msg[PS_ERRLEN];
    char err[PS_ERRLEN];
};

#define PS_ERR(p, ...) snprintf((p)->err, sizeof((p)->err), __VA_ARGS__)

/* tt_ps.c */
const tt_place_chunk_t *ps_chunk(const tt_ps_t *p, size_t i);
/* Sends the op's items and waits for every answer (or the deadline). */
int ps_run_op(tt_ps_t *p, ps_op_t *op);
size_t ps_item_shard(const tt_ps_t *p, const ps_op_t *op, size_t i);
/* Takes every reply queued on shard s's socket. */
int ps_drain(tt_ps_t *p, ps_op_t *op, size_t s, uint64_t now);
/* Outside a call: queues the PsSetup shard s needs (when it does) and the
 * saved input of every chunk it holds as a refill. TT_OK, TT_EAGAIN (not
 * connected), or a send failure. */
int ps_send_refills(tt_ps_t *p, size_t s, size_t *sent);

/* tt_ps_ckpt.c: the WriteChunks request to shard s and its answer (into
 * *w, whose file names the part asked for); an answer to a phase-2
 * question (request id of PS_SIDE_SEQ), never an operation's failure; the
 * questions' state, freed with the object. */
int ps_build_write(tt_ps_t *p, const ps_op_t *op, size_t s, const char *file, ps_msg_t *m);
int ps_on_written(tt_ps_t *p, tt_ps_written_t *w, size_t s, const tt_zmq_rx_t *rx);
int ps_side_reply(tt_ps_t *p, size_t s, const tt_zmq_rx_t *rx);
void ps_side_free(tt_ps_t *p);

/* tt_ps_recover.c */
/* Allocates the saved inputs when the mode needs them; TT_OK or TT_ENOMEM. */
int ps_keep_inputs(tt_ps_t *p);
/* A push's result arrived: saves the input it replaces (when kept). */
void ps_save_input(tt_ps_t *p, const ps_op_t *op, size_t i);
/* Reads shard s's monitor and handles a lost connection. */
int ps_watch_link(tt_ps_t *p, ps_op_t *op, size_t s, uint64_t now);
/* Warns once of each shard this rank has not reached within
 * tt_zmq_reach_warn_after(the call's deadline). */
void ps_check_links(tt_ps_t *p, uint64_t now);
/* Why shard s cannot be reached, into buf ("" once it was reached). */
void ps_link_why(const tt_ps_t *p, size_t s, uint64_t now, char *buf, size_t len);
/* An error reply to item i the engine can answer by sending it again: 1
 * with *rc (TT_OK, or why the call must end), 0 when it is not one. */
int ps_recover_error(tt_ps_t *p, ps_op_t *op, size_t i, size_t s, const Tether__Error *e,
                     uint64_t now, int *rc);
/* The reply to a re-setup (request item PS_SETUP_ITEM). */
int ps_resetup_reply(tt_ps_t *p, size_t s, const tt_zmq_rx_t *rx);
/* The result of a refill (item i carries PS_F_REFILL). */
int ps_refill_result(tt_ps_t *p, ps_op_t *op, size_t i, size_t s, const tt_zmq_rx_t *rx);

#endif
