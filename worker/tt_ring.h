/* tt_ring: the ring collective backend's transport and algorithms for one
 * generation: all-reduce (sum, min, max over float32, float64, int64) as a
 * pipelined reduce-scatter + all-gather, broadcast from a root, and barrier,
 * over ZeroMQ TCP between the ranks of that generation (with the payloads
 * in shared memory where every rank shares the host). It also carries the
 * "never a silent hang" machinery: every message is tagged with (generation,
 * seq, fingerprint); a mismatch fails every rank with TT_EDESYNC naming both
 * sides; every wait has a deadline and names the rank not heard from; a peer
 * that disconnects fails the collective with TT_EUNREACHABLE; every call is
 * recorded in a flight recorder that is logged on failure.
 * It does not know about membership, the coordinator or the step API: the
 * library creates one ring per generation, destroys it when the generation
 * ends, and reports tt_ring_suspect() to the coordinator.
 * Thread safety: a ring's collectives must be called by one thread at a
 * time (ZeroMQ sockets are single-threaded); that may be a thread other
 * than the creator's (e.g. the library's communication thread) as long as
 * the hand-over is synchronised (a mutex or thread start). tt_ring_dump,
 * tt_ring_last_error and tt_ring_suspect may be called from any thread but
 * the last two return values that change only inside a collective. */
#ifndef TT_RING_H
#define TT_RING_H

#include <stddef.h>
#include <stdint.h>

#include "tt_collseq.h"
#include "tt_zauth.h"

typedef struct tt_ring tt_ring_t;

#define TT_RING_DEADLINE_DEFAULT_MS 60000
/* Two: one receives, one sends, so a ring step's two kernel copies run in
 * parallel (bench/README.md has the measurements against one). */
#define TT_RING_IO_THREADS_DEFAULT 2

typedef struct tt_ring_opts {
    int rank;  /* 0 <= rank < world */
    int world; /* >= 1 */
    uint64_t generation;
    /* world entries, "tcp://127.0.0.1:PORT": where each rank can be reached.
     * Borrowed; only read during create. May be NULL when world == 1. */
    const char *const *endpoints;
    /* what this rank binds (e.g. "tcp://0.0.0.0:7800"); NULL: endpoints[rank] */
    const char *bind_endpoint;
    int deadline_ms;        /* per collective; 0: 60000 */
    size_t segment_bytes;   /* pipelining unit, must match on all ranks; 0: 1 MiB */
    size_t flight_capacity; /* records kept; 0: 256 */
    int io_threads;         /* ZeroMQ I/O threads of the ring's context; 0: 2 */
    /* 0 (default): tt_ring_create pins glibc's malloc thresholds (see
     * tt_ring_create); 1: leave the process's malloc settings alone. */
    int keep_malloc_settings;
    /* Called on the collective's thread, at least every TT_RING_IDLE_MS,
     * while a collective waits for its peers: something else this thread
     * owns (the PS backend's links to the shards) may need tending for the
     * peers to get here at all. NULL: none. */
    void (*idle)(void *ctx);
    void *idle_ctx;
    /* tt_collseq_job_tag of the job: messages carrying another tag are
     * dropped (counted by tt_ring_dropped_foreign), never taken for this
     * ring's, however equal their generation. 0 is a tag like any other. */
    uint64_t job_tag;
    /* 0 (default): on each link whose receiver can map the sender's pool
     * of shared memory (both on one host; the first collective's
     * handshake finds out, see tt_ring.c), DATA payloads go through it and
     * only the headers over TCP. 1: everything over TCP. */
    int tcp_only;
    /* Slots in this rank's pool (payloads in flight to the right through
     * shared memory; a unit that finds none free goes over TCP, its place
     * kept); 0: 32, at most 64. Tests use 1 to mix the two on every link. */
    int shm_slots;
    /* The cluster key (copied; tt_zauth.h): this rank's endpoint admits
     * only its holders, and links to the right use it. NULL or off: none. */
    const tt_zauth_key_t *key;
} tt_ring_opts_t;

#define TT_RING_IDLE_MS 20

/* Binds this rank's endpoint and connects to the right neighbour (it does
 * not wait for peers: the first collective does, under its deadline).
 * Process-wide side effect, unless opts->keep_malloc_settings: with glibc it
 * sets M_MMAP_THRESHOLD to 32 MiB and M_TRIM_THRESHOLD to 64 MiB, the values
 * at the ceiling of glibc's own dynamic thresholds. ZeroMQ
 * mallocs every received segment on its I/O thread and the ring frees it,
 * and with the defaults the arena is trimmed (madvise) after each burst, so
 * every received byte was page-faulted in again: 20% of the CPU at 16 MiB.
 * The cost is up to 64 MiB of freed memory kept per malloc arena.
 * Returns 0 with *out owned by the caller (tt_ring_destroy), TT_EINVAL for
 * bad options, TT_ESYS when the endpoint cannot be bound (address in use),
 * TT_ENOMEM. `err` (may be NULL) gets a sentence. */
int tt_ring_create(tt_ring_t **out, const tt_ring_opts_t *opts, char *err, size_t errlen);

/* Closes the sockets and frees the ring. It waits up to 2 s (0.5 s after a
 * failure) for frames still queued to the right neighbour, then drops them.
 * Accepts NULL and *r == NULL; sets *r = NULL. Not concurrently with a
 * collective. */
void tt_ring_destroy(tt_ring_t **r);

/* In-place all-reduce of `count` elements of `dtype` at `buf` (aligned to
 * the element size) with `op` (TT_RED_SUM, MIN or MAX). When it returns,
 * the ring holds no reference to `buf`. Returns 0, or:
 *   TT_EINVAL     bad arguments (nothing was sent; the ring stays usable)
 *   TT_EDESYNC    ranks disagree on seq/operation (text names both sides)
 *   TT_ETIMEDOUT  the deadline passed (text and tt_ring_suspect name the
 *                 rank not heard from)
 *   TT_EUNREACHABLE a neighbour disconnected
 *   TT_EPROTO/TT_ESIZE a malformed message from a peer
 * Any error except TT_EINVAL poisons the ring: every later call returns the
 * same status and text; the library must build a new generation. The
 * contents of `buf` are unspecified after an error. */
int tt_ring_allreduce(tt_ring_t *r, void *buf, size_t count, tt_dtype_t dtype, tt_redop_t op);

/* tt_ring_allreduce that also sums one int64 per rank (*side: this rank's
 * value in, the sum over ranks out; wraps like int64 arithmetic) with no
 * message of its own: the sum rides on the first unit of each
 * reduce-scatter step. The step's example count travels this way with the
 * last gradient bucket. Every rank must call the same function; a rank
 * that calls tt_ring_allreduce instead is a desync. Same return codes. */
int tt_ring_allreduce_side(tt_ring_t *r, void *buf, size_t count, tt_dtype_t dtype, tt_redop_t op,
                           int64_t *side);

/* Copies `count` elements from `root`'s buf into every rank's buf. Same
 * return codes as tt_ring_allreduce. */
int tt_ring_broadcast(tt_ring_t *r, void *buf, size_t count, tt_dtype_t dtype, int root);

/* Returns on any rank only after every rank has entered it. Same return
 * codes. */
int tt_ring_barrier(tt_ring_t *r);

/* Ends the collective in flight (and every later one) with TT_EMEMBERSHIP
 * and an ABORT to the neighbours: the generation is over. The only
 * function another thread may call while a collective runs. */
void tt_ring_interrupt(tt_ring_t *r);

/* The training step named in timeout messages (-1: none, the default). */
void tt_ring_set_step(tt_ring_t *r, int64_t step);

/* 1 when this rank's payloads to its right neighbour go through shared
 * memory (known after the first collective), 0 when over TCP. */
int tt_ring_uses_shm(const tt_ring_t *r);

/* DATA units this rank sent to its right so far: through shared memory
 * (*shm) and over TCP (*tcp). */
void tt_ring_units(const tt_ring_t *r, uint64_t *shm, uint64_t *tcp);

/* Sticky status of a poisoned ring, 0 while healthy. */
int tt_ring_status(const tt_ring_t *r);

/* Sentence of the last failure ("" when none). Owned by the ring, valid
 * until the next collective or destroy. */
const char *tt_ring_last_error(const tt_ring_t *r);

/* Rank the last failure blames (the silent or disconnected rank), -1 when
 * none (e.g. a desync, where nobody is dead). */
int tt_ring_suspect(const tt_ring_t *r);

/* Between collectives, for a backend that waits elsewhere (the PS backend
 * waiting on the shards): reads the sockets' connection events without
 * blocking and returns the rank of a neighbour whose connection has been
 * gone for longer than the grace an ABORT gets to overtake a disconnect,
 * or -1. Only the thread that runs the collectives may call it. */
int tt_ring_neighbour_gone(tt_ring_t *r);

/* Messages of another generation that were received and dropped. */
uint64_t tt_ring_dropped_stale(const tt_ring_t *r);

/* Messages of another job (another tag) that were received and dropped. */
uint64_t tt_ring_dropped_foreign(const tt_ring_t *r);

/* Flight-recorder text of the newest `max` records, 0: all (malloc'd,
 * caller frees; NULL when out of memory). Any thread. */
char *tt_ring_dump(tt_ring_t *r, size_t max);

#endif
