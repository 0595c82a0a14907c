/* tt_shmpool: a pool of fixed-size slots in shared memory that one ring
 * rank fills and its right neighbour on the same host reads, so that the
 * bulk of a ring message skips the kernel's TCP path (two copies and the
 * loopback stack per byte); the small header still travels over ZeroMQ and
 * names the slot. It owns the memory (a memfd, never a name in /dev/shm, so
 * a killed rank leaves nothing behind), the offer that tells a neighbour
 * how to map it (pid, descriptor, size, a random token written into the
 * pool) and the per-slot flags of the one-writer/one-reader hand-over.
 * Mapping goes through /proc/<pid>/fd/<fd>: it fails where the two ranks do
 * not share a kernel and a process table (other hosts, other containers),
 * and the token proves that what was opened is the offered pool and not
 * another process's file under a reused pid. It does no I/O of its own.
 * Thread safety: one writer thread and one reader thread (in another
 * process) per pool; the slot flags and the queue's two indices are the
 * only shared state. */
#ifndef TT_SHMPOOL_H
#define TT_SHMPOOL_H

#include <stddef.h>
#include <stdint.h>

typedef struct tt_shmpool tt_shmpool_t;

#define TT_SHMPOOL_MAX_SLOTS 64
/* Notes the queue holds; the ring's algorithms keep far fewer in flight
 * on one link (a few per rank), so a full queue means a stalled reader. */
#define TT_SHMPOOL_NOTES    1024
#define TT_SHMPOOL_NOTE_HDR 64

/* One unit as the writer posted it: the ring's encoded header, the
 * payload's length, the int64 a unit may carry, and the slot that holds
 * the payload (-1: the payload travels over the socket instead; the note
 * keeps the order). The reader checks all of it: the writer is another
 * process. */
typedef struct tt_shmpool_note {
    uint8_t hdr[TT_SHMPOOL_NOTE_HDR];
    uint64_t len;
    int64_t side;
    int32_t slot;
    uint32_t pad;
} tt_shmpool_note_t;

/* What a neighbour needs to map a pool: a fixed wire form of
 * TT_SHMPOOL_OFFER_SIZE bytes (host byte order) rides in the ring's
 * handshake. */
typedef struct tt_shmpool_offer {
    int32_t pid, fd;
    uint32_t nslots;
    uint64_t slot_bytes;
    uint64_t token;
} tt_shmpool_offer_t;

#define TT_SHMPOOL_OFFER_SIZE 32

/* Creates this process's pool of `nslots` slots of `slot_bytes`. Memory is
 * used as slots are first written (a memfd has no size limit of its own,
 * unlike /dev/shm, whose 64 MiB in a default container would turn a full
 * pool into SIGBUS). TT_OK, TT_EINVAL, TT_ENOMEM or TT_ESYS with a
 * sentence in err. */
int tt_shmpool_create(tt_shmpool_t **out, uint32_t nslots, size_t slot_bytes, char *err,
                      size_t errlen);

/* Maps a neighbour's pool from its offer. TT_OK; TT_ENODEV when it cannot
 * be reached from here (no such process, /proc refused, not the offered
 * pool: the token, size or slot count differ), with the reason in err. */
int tt_shmpool_map(tt_shmpool_t **out, const tt_shmpool_offer_t *offer, char *err, size_t errlen);

void tt_shmpool_destroy(tt_shmpool_t **p);

void tt_shmpool_offer(const tt_shmpool_t *p, tt_shmpool_offer_t *out);

/* 1 when *p was mapped from exactly this offer (same token). */
int tt_shmpool_is(const tt_shmpool_t *p, const tt_shmpool_offer_t *offer);

void tt_shmpool_offer_encode(const tt_shmpool_offer_t *o, uint8_t out[TT_SHMPOOL_OFFER_SIZE]);
/* TT_OK or TT_EPROTO (wrong length). */
int tt_shmpool_offer_decode(const void *buf, size_t len, tt_shmpool_offer_t *out);

size_t tt_shmpool_slot_bytes(const tt_shmpool_t *p);
uint32_t tt_shmpool_nslots(const tt_shmpool_t *p);

/* Writer: the lowest free slot (so a link touches only as many slots as
 * it ever had in flight, and they stay warm in cache), or -1 when every
 * slot is still being read. */
int tt_shmpool_acquire(tt_shmpool_t *p);

/* The slot's memory (slot_bytes of it). */
void *tt_shmpool_slot(tt_shmpool_t *p, int slot);

/* Writer: the slot's bytes are written; the reader may take them. */
void tt_shmpool_publish(tt_shmpool_t *p, int slot);

/* Reader: 1 when the writer has published `slot` (and its bytes are
 * visible), 0 when not (a slot number out of range included). */
int tt_shmpool_ready(tt_shmpool_t *p, int slot);

/* Reader: done with the slot; the writer may fill it again. */
void tt_shmpool_release(tt_shmpool_t *p, int slot);

/* Writer: appends a note and rings the doorbell if the reader sleeps on
 * it (one futex wake; none while the reader is busy). 1 posted, 0 the
 * queue is full. */
int tt_shmpool_post(tt_shmpool_t *p, const tt_shmpool_note_t *n);

/* Reader: copies the oldest note into *n without taking it: 1, 0 when the
 * queue is empty, -1 when its indices are impossible (a corrupt pool). */
int tt_shmpool_peek(tt_shmpool_t *p, tt_shmpool_note_t *n);

/* Reader: takes the note peek returned. */
void tt_shmpool_pop(tt_shmpool_t *p);

/* Reader: sleeps until a note is posted or `timeout_ms` passed (at once
 * when one is queued). The caller polls its sockets between waits. */
void tt_shmpool_wait(tt_shmpool_t *p, int timeout_ms);

#endif
