/* shards: the coordinator's registry of shard servers and of each job's
 * tensor table and placement. Pure state with an injected clock: shards
 * register by heartbeating (id, data endpoint, incarnation, bytes held,
 * chunks); a shard silent for `timeout_ms` is dead. A job declares its
 * tensor table once (name, element count, in order); a later declaration
 * must be identical, else it is refused with a sentence naming the first
 * difference. The placement of a job's flat space over the live shards
 * (common/tt_placement) is computed on demand and recomputed whenever the
 * set of live shards differs from the one it was made for, keeping chunks
 * where they were when it can; its version tells workers that it changed.
 * It also says whether a placement still puts chunks on a dead shard (the
 * coordinator then regroups the job so its workers fetch a new one).
 * It does not talk to anyone: coord_shards.c turns requests into calls.
 * Thread safety: one thread (the coordinator's loop). */
#ifndef TT_SHARDS_H
#define TT_SHARDS_H

#include <stddef.h>
#include <stdint.h>

#include "tt_placement.h"

#define TT_SHARDS_TIMEOUT_DEFAULT_MS 5000u
#define TT_SHARDS_EP_MAX             256

typedef struct tt_shards tt_shards_t;

typedef struct tt_shard_info {
    char id[TT_PLACE_ID_MAX];
    char endpoint[TT_SHARDS_EP_MAX];
    uint64_t incarnation;
    uint64_t bytes_held;
    uint32_t chunks;
    uint64_t last_seen_ms;
} tt_shard_info_t;

typedef struct tt_tensor_decl {
    const char *name;
    uint64_t count; /* float32 elements */
} tt_tensor_decl_t;

/* 0 or TT_ENOMEM. timeout_ms 0: TT_SHARDS_TIMEOUT_DEFAULT_MS. */
int tt_shards_create(tt_shards_t **out, uint32_t timeout_ms);

/* Placement versions of jobs placed from now on start above `base`
 * (a job's first placement is base + 1). The registry lives in memory,
 * so after a coordinator restart versions would start at 1 again while
 * the shard servers hold a newer one and refuse the older as stale; the
 * daemon passes a base that grows with every start. */
void tt_shards_set_version_base(tt_shards_t *s, uint64_t base);

/* Drops job's tensor table and placement (a forgotten job; unknown: no-op).
 * The version base rises past its last placement, so the same id declared
 * again is placed at versions the shards have not seen. */
void tt_shards_forget(tt_shards_t *s, const char *job);
void tt_shards_destroy(tt_shards_t **s);

/* Registers or refreshes a shard. A new incarnation replaces the old
 * record (the shard restarted: it holds nothing any more). TT_OK, TT_EINVAL
 * (empty or over-long id/endpoint), TT_ENOMEM. */
int tt_shards_heartbeat(tt_shards_t *s, const tt_shard_info_t *hb, uint64_t now_ms);

size_t tt_shards_count(const tt_shards_t *s);
/* i < count; the pointer is valid until the next heartbeat call. */
const tt_shard_info_t *tt_shards_at(const tt_shards_t *s, size_t i);
int tt_shards_alive(const tt_shards_t *s, size_t i, uint64_t now_ms);

/* The coordinator's loop stood still for gap_ms up to now_ms: the last
 * heartbeat of every shard alive when it began moves that much later
 * (never past now_ms), as tt_rdzv_forgive does for workers; a shard dead
 * before stays dead. Accepts NULL (no registry yet). */
void tt_shards_forgive(tt_shards_t *s, uint64_t gap_ms, uint64_t now_ms);

/* Declares `job`'s tensor table. chunk_bytes 0: 4 MiB. TT_OK (new, or the
 * same as before), TT_ECONFLICT (differs: `err` names the difference),
 * TT_EINVAL, TT_ENOMEM. */
int tt_shards_declare(tt_shards_t *s, const char *job, const tt_tensor_decl_t *t, size_t n,
                      uint64_t chunk_bytes, char *err, size_t errlen);

/* How many shard servers the declared `job`'s first placement waits for
 * (DeclareTensors.min_shards; the largest asked for counts). Why: workers
 * may start before some shards have registered, and a placement is kept
 * until the live set changes at a regroup, so a job placed early would
 * stay on the first shards up. Later placements (after a shard was lost)
 * go on with fewer: that is failover. Unknown job: nothing. */
void tt_shards_wait_for(tt_shards_t *s, const char *job, uint32_t min_shards);

/* Shard servers alive at now_ms. */
size_t tt_shards_live_count(const tt_shards_t *s, uint64_t now_ms);

/* The job's placement over the shards alive at now_ms (recomputed when
 * that set changed). *out is owned by the registry, valid until the next
 * call. TT_OK, TT_ENOTFOUND (job never declared, or no live shard: `err`
 * says which), TT_EAGAIN (no placement yet and fewer shards alive than
 * tt_shards_wait_for asked for), TT_ENOMEM. */
int tt_shards_placement(tt_shards_t *s, const char *job, uint64_t now_ms,
                        const tt_placement_t **out, char *err, size_t errlen);

/* A shard holding chunks of `job`'s placement as last computed (not
 * recomputed here) that is not alive at now_ms, or NULL (all alive, job
 * unknown or never placed). *version (may be NULL) gets that placement's
 * version (0: never computed), so a caller can act once per placement. */
const char *tt_shards_lost(const tt_shards_t *s, const char *job, uint64_t now_ms,
                           uint64_t *version);

/* Earliest time at which a shard alive at now_ms expires unless it
 * heartbeats again, or UINT64_MAX when none is alive. */
uint64_t tt_shards_next_expiry(const tt_shards_t *s, uint64_t now_ms);

/* Endpoint of a registered shard by id, or NULL. */
const char *tt_shards_endpoint(const tt_shards_t *s, const char *id);

#endif
