/* tt_sampler: which examples each rank trains on, step by step (DESIGN.md
 * §3). It owns the epoch permutation perm(seed, epoch) and the slicing of a
 * step's global batch over the current world; it does not own the data, the
 * membership (callers pass rank and world per step) or micro-batch buffers.
 *
 * Positions and slices: step s of an epoch covers permutation positions
 * [s*B, min((s+1)*B, N)). Rank r of W takes a contiguous slice of that global
 * batch; with n examples in the batch the first n % W ranks get one more.
 * Because slicing is of the global batch, not of the dataset, changing W
 * between steps can never drop or repeat an example.
 *
 * Permutation: Fisher-Yates (Durstenfeld, from the end) driven by tt_rng
 * (splitmix64) seeded with tt_rng_derive(seed, epoch) and unbiased bounded
 * draws (tt_rng_below), so every rank computes the same permutation alone. */
#ifndef TT_SAMPLER_H
#define TT_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t begin, end; /* half-open [begin, end) */
} tt_range_t;

/* Steps in an epoch of n examples at global batch `batch`: ceil(n / batch);
 * the last step may be short. 0 when n == 0 or batch == 0. Pure. */
uint64_t tt_sampler_steps_per_epoch(uint64_t n, uint64_t batch);

/* Permutation positions of the global batch of step `step`; empty
 * (begin == end) when step is past the epoch. Pure. */
tt_range_t tt_sampler_batch(uint64_t n, uint64_t batch, uint64_t step);

/* Positions of rank `rank`'s slice of step `step` in a world of `world`
 * ranks; empty when the slice has no examples or arguments are out of
 * range (world < 1, rank >= world). Pure. */
tt_range_t tt_sampler_slice(uint64_t n, uint64_t batch, uint64_t step, int rank, int world);

/* Number of micro-batches of at most `micro` examples that `slice` splits
 * into (0 for an empty slice; micro == 0 means "one micro-batch"). Pure. */
uint64_t tt_sampler_micro_count(tt_range_t slice, uint64_t micro);

/* The i-th micro-batch of `slice`: [begin + i*micro, min(.., end)). Pure. */
tt_range_t tt_sampler_micro(tt_range_t slice, uint64_t micro, uint64_t i);

/* Fills perm[0..n) with the permutation of 0..n-1 for (seed, epoch).
 * Pure apart from writing perm (caller-owned, n entries). n < 2^32. */
void tt_sampler_permute(uint32_t *perm, uint64_t n, uint64_t seed, uint64_t epoch);

typedef struct tt_sampler tt_sampler_t;

typedef struct {
    uint64_t n;     /* dataset size, 1 .. UINT32_MAX */
    uint64_t batch; /* global batch, >= 1 */
    uint64_t seed;
} tt_sampler_opts_t;

/* Creates a sampler positioned at epoch 0. Returns 0, TT_EINVAL for a bad
 * option, TT_ENOMEM. *out is owned by the caller (tt_sampler_destroy). */
int tt_sampler_create(tt_sampler_t **out, const tt_sampler_opts_t *opts);

/* Accepts NULL; sets *s = NULL. */
void tt_sampler_destroy(tt_sampler_t **s);

/* Recomputes the permutation for `epoch` (O(n)); a no-op when it is the
 * current one. */
void tt_sampler_set_epoch(tt_sampler_t *s, uint64_t epoch);

/* Example id at permutation position `pos` (< n) of the current epoch. */
uint32_t tt_sampler_index(const tt_sampler_t *s, uint64_t pos);

uint64_t tt_sampler_epoch(const tt_sampler_t *s);
uint64_t tt_sampler_steps(const tt_sampler_t *s);

/* Thread safety: the pure functions are reentrant; a tt_sampler_t may be
 * read from several threads but set_epoch needs exclusive access. */

#endif
