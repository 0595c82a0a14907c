/* tt_collseq: what makes a collective identifiable across ranks: its
 * sequence number within a generation and its fingerprint (operation,
 * reduction, dtype, element count, root); the fixed little-endian binary
 * header that heads every ring message; and the check a receiver runs on it,
 * which produces the one error sentence every rank reports on a desync:
 *   rank 2 sent allreduce #812 (float32 x 269322) but rank 1 expected
 *   broadcast #812 (float32 x 269322, root 0)
 * It does no I/O and holds no state beyond what the caller passes in. The
 * ring header is binary, not the protobuf envelope of tt_wire: it rides on
 * every 1 MiB segment, so it must cost a memcpy, not an allocation.
 * Thread safety: every function is reentrant. */
#ifndef TT_COLLSEQ_H
#define TT_COLLSEQ_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    TT_COLL_ALLREDUCE = 1,
    TT_COLL_BROADCAST = 2,
    TT_COLL_BARRIER = 3,
} tt_coll_op_t;

typedef enum {
    TT_DT_FLOAT32 = 1,
    TT_DT_FLOAT64 = 2,
    TT_DT_INT64 = 3,
} tt_dtype_t;

typedef enum {
    TT_RED_NONE = 0, /* broadcast, barrier */
    TT_RED_SUM = 1,
    TT_RED_MIN = 2,
    TT_RED_MAX = 3,
} tt_redop_t;

/* What every rank must agree on for one collective. */
typedef struct tt_coll_fp {
    uint8_t op;    /* tt_coll_op_t */
    uint8_t dtype; /* tt_dtype_t; 0 for barrier */
    uint8_t redop; /* tt_redop_t */
    int32_t root;  /* broadcast root, -1 otherwise */
    uint64_t count;
} tt_coll_fp_t;

/* Kinds of ring message. */
typedef enum {
    TT_COLLSEQ_DATA = 1,  /* one unit (segment) of a collective */
    TT_COLLSEQ_WAIT = 2,  /* "I am blocked in seq, my suspect is `aux`" */
    TT_COLLSEQ_ABORT = 3, /* failure; a text frame follows; aux = suspect */
    TT_COLLSEQ_HELLO = 4, /* handshake probe, rank 0 around the ring (tt_ring.c) */
    TT_COLLSEQ_READY = 5, /* handshake done: DATA may follow */
} tt_collseq_kind_t;

#define TT_COLLSEQ_MAGIC    0x47525454u /* "TTRG" */
#define TT_COLLSEQ_VERSION  2u
#define TT_COLLSEQ_HDR_SIZE 64u

/* tt_collseq_hdr_t.flags */
#define TT_COLLSEQ_F_SIDE 1u /* DATA: an 8-byte int64 frame follows the body */

typedef struct tt_collseq_hdr {
    uint8_t kind;   /* tt_collseq_kind_t */
    uint8_t flags;  /* TT_COLLSEQ_F_* */
    int32_t src;    /* sending rank */
    int32_t aux;    /* ABORT/WAIT: suspect rank or -1; ABORT also origin in status */
    int32_t status; /* ABORT: the tt_status_t of the failure */
    uint64_t generation;
    uint64_t seq;
    uint32_t unit; /* DATA: unit index within the collective */
    tt_coll_fp_t fp;
    /* tt_collseq_job_tag of the sender's job: the generation number alone
     * does not tell two jobs apart, and a rank of another job can reach
     * this endpoint (a port reused on the host) */
    uint64_t job;
} tt_collseq_hdr_t;

/* A 64-bit tag of a job id (FNV-1a; 0 for NULL or ""). */
uint64_t tt_collseq_job_tag(const char *job_id);

/* Returns the next sequence number from *counter (first call on a zeroed
 * counter gives 1). */
uint64_t tt_collseq_next(uint64_t *counter);

/* Element size of a dtype in bytes, 0 for an unknown one. */
size_t tt_collseq_dtype_size(int dtype);

/* Static names: "float32", "allreduce", "sum"; "?" when unknown. */
const char *tt_collseq_dtype_name(int dtype);
const char *tt_collseq_op_name(int op);
const char *tt_collseq_redop_name(int redop);

/* Writes exactly TT_COLLSEQ_HDR_SIZE bytes to `out`. */
void tt_collseq_encode(const tt_collseq_hdr_t *h, uint8_t out[TT_COLLSEQ_HDR_SIZE]);

/* Parses a header frame. TT_EPROTO (wrong length, magic, kind, op or dtype)
 * or TT_EVERSION, with a sentence in err (may be NULL); 0 on success. */
int tt_collseq_decode(const void *buf, size_t len, tt_collseq_hdr_t *out, char *err, size_t errlen);

/* Formats "allreduce #812 (float32 x 269322)" (", max" for non-sum
 * reductions, ", root 0" for broadcast, bare "barrier #3") into buf and
 * returns buf. */
char *tt_collseq_describe(const tt_coll_fp_t *fp, uint64_t seq, char *buf, size_t len);

/* Receiver check of a DATA or WAIT header against what this rank expects:
 * the same seq and fingerprint. 0 when they match; TT_EDESYNC otherwise with
 * "rank <src> sent <got> but rank <self> expected <expected>" in err. */
int tt_collseq_check(const tt_collseq_hdr_t *got, int self_rank, uint64_t expect_seq,
                     const tt_coll_fp_t *expect, char *err, size_t errlen);

#endif
