/* tt_buckets: the gradient bucket layout of the step API. Tensors are
 * registered once, in model order, with their element counts; they are laid
 * out back to back in one flat contiguous buffer (tensor 0 at offset 0).
 * The buffer is then cut into buckets of at most bucket_bytes (default
 * 25 MiB). Backward produces gradients last layer first, so bucket 0 covers
 * the END of the buffer (the last registered tensors) and is smaller
 * (first_bucket_bytes, default 1 MiB) so that its all-reduce starts early;
 * bucket 1 is the range just before it, and so on. Buckets end at tensor
 * boundaries (a bucket ending inside a tensor would wait for that whole
 * tensor anyway, and cost one more collective); only a tensor larger than
 * an empty bucket is cut, into bucket-sized pieces from its end. A bucket
 * is complete when every tensor overlapping it is ready.
 * grad_ready(tensor) reports the bucket(s) that just became complete, each
 * exactly once per step. It owns the layout and the per-step readiness, not
 * the buffer memory and not the communication.
 * Thread safety: none; one thread (the one calling grad_ready) owns it. */
#ifndef TT_BUCKETS_H
#define TT_BUCKETS_H

#include <stddef.h>

typedef struct tt_buckets tt_buckets_t;

#define TT_BUCKETS_DEFAULT_BYTES       ((size_t)25 << 20)
#define TT_BUCKETS_DEFAULT_FIRST_BYTES ((size_t)1 << 20)

typedef struct tt_buckets_opts {
    size_t elem_size;          /* bytes per element, 0: 4 (float32) */
    size_t bucket_bytes;       /* 0: TT_BUCKETS_DEFAULT_BYTES */
    size_t first_bucket_bytes; /* 0: min(default first, bucket_bytes) */
} tt_buckets_opts_t;

/* opts may be NULL for the defaults. TT_EINVAL when a limit is smaller than
 * one element or first > bucket_bytes; TT_ENOMEM. */
int tt_buckets_create(tt_buckets_t **out, const tt_buckets_opts_t *opts);

/* Accepts NULL and *b == NULL; sets *b = NULL. */
void tt_buckets_destroy(tt_buckets_t **b);

/* Registers the next tensor (count >= 1 elements) and returns its index in
 * *tensor. Only before tt_buckets_finalize; TT_EBUSY after, TT_EINVAL for
 * count 0. */
int tt_buckets_add(tt_buckets_t *b, size_t count, size_t *tensor);

/* Computes the layout. Call once after the last add; TT_EBUSY when called
 * twice, TT_ENOMEM. With no tensors there are no buckets. */
int tt_buckets_finalize(tt_buckets_t *b);

/* Layout queries (after finalize). */
size_t tt_buckets_total(const tt_buckets_t *b); /* elements in the flat buffer */
size_t tt_buckets_count(const tt_buckets_t *b); /* number of buckets */
size_t tt_buckets_ntensors(const tt_buckets_t *b);
/* Element offset/count of a tensor or bucket; TT_ENOTFOUND for bad index. */
int tt_buckets_tensor_span(const tt_buckets_t *b, size_t tensor, size_t *off, size_t *count);
int tt_buckets_bucket_span(const tt_buckets_t *b, size_t bucket, size_t *off, size_t *count);

/* Marks `tensor` ready for this step. Writes the indices of the buckets that
 * just became complete (ascending) to done[0..*ndone) - at most
 * tt_buckets_count() of them, so a done array of that size always fits.
 * TT_EEXIST when the tensor was already marked this step, TT_ENOTFOUND for
 * a bad index, TT_EBUSY before finalize. */
int tt_buckets_grad_ready(tt_buckets_t *b, size_t tensor, size_t *done, size_t *ndone);

/* Starts a new step: nothing is ready. */
void tt_buckets_reset(tt_buckets_t *b);

#endif
