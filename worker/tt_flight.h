/* tt_flight: the flight recorder of one worker's collectives: a fixed-size
 * ring of the last N records (generation, seq, op, dtype, bytes, peer, times
 * queued/started/finished, status), overwritten oldest first, and a dump to
 * text that is written to the log on timeout, desync or abort and returned
 * on request (tetherctl dump). Comparing the last seq across ranks' dumps
 * shows which rank fell behind. It records; it does not decide anything and
 * does not log by itself.
 * Thread safety: one writer (the thread that runs collectives) and any
 * number of readers (snapshot/dump) may call concurrently; a mutex guards
 * the ring, which costs nothing next to a collective. */
#ifndef TT_FLIGHT_H
#define TT_FLIGHT_H

#include <stddef.h>
#include <stdint.h>

typedef struct tt_flight tt_flight_t;

typedef enum {
    TT_FLIGHT_QUEUED = 0,
    TT_FLIGHT_STARTED = 1,
    TT_FLIGHT_FINISHED = 2,
} tt_flight_state_t;

typedef struct tt_flight_rec {
    uint64_t id; /* position in the recorder's history, from 0 */
    uint64_t generation;
    uint64_t seq;
    uint8_t op;    /* tt_coll_op_t */
    uint8_t dtype; /* tt_dtype_t */
    uint8_t redop; /* tt_redop_t */
    uint8_t state; /* tt_flight_state_t */
    uint64_t bytes;
    int32_t peer;   /* rank waited on (ring: left neighbour) or -1 */
    int32_t status; /* tt_status_t once finished */
    uint64_t t_queued_ns, t_started_ns, t_finished_ns; /* tt_clock_mono_ns */
} tt_flight_rec_t;

/* Capacity 0 means the default of 256 records. TT_ENOMEM, TT_EINVAL. */
int tt_flight_create(tt_flight_t **out, size_t capacity);

/* Accepts NULL and *f == NULL; sets *f = NULL. */
void tt_flight_destroy(tt_flight_t **f);

/* Appends a record (its id, state and finish fields are set here) and
 * returns its id. Writer thread only. */
uint64_t tt_flight_begin(tt_flight_t *f, const tt_flight_rec_t *rec);

/* Marks record `id` started / finished; ignored when it has already been
 * overwritten. Writer thread only. */
void tt_flight_started(tt_flight_t *f, uint64_t id, uint64_t now_ns);
void tt_flight_finish(tt_flight_t *f, uint64_t id, uint64_t now_ns, int status);

/* Copies up to `max` of the newest records, oldest first, into out; returns
 * how many. Any thread. */
size_t tt_flight_snapshot(tt_flight_t *f, tt_flight_rec_t *out, size_t max);

/* Text dump, one line per record, oldest first, with durations relative to
 * now_ns for unfinished records: the newest `max` records (0: all), the
 * first line saying how many were left out. Returns a malloc'd string the
 * caller frees (NULL only when out of memory). `who` names the process in
 * the first line (may be NULL). Any thread. */
char *tt_flight_dump(tt_flight_t *f, const char *who, uint64_t now_ns, size_t max);

/* How many records a failure writes to the log: the failing step's
 * collectives and several steps before it. All of them would be 256 lines
 * per rank per failure; `tetherctl dump JOB` shows them on a live job. */
#define TT_FLIGHT_LOG_RECORDS 24

#endif
