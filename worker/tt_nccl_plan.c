/* tt_nccl_plan: shrink and rest-of-step planning. Exclude lists and part
 * lists are short (drained ranks, one part per layer), so plain sorts and
 * scans are clearer than anything cleverer. */
#include "tt_nccl_plan.h"

#include "tt_status.h"

#include <stdlib.h>
#include <string.h>

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

int tt_nccl_shrink_plan(int rank, int world, const int *exclude, int n, int *sorted, int *new_rank,
                        int *new_world) {
    if (exclude == NULL || sorted == NULL || n < 1 || n >= world || rank < 0 || rank >= world)
        return TT_EINVAL;
    memcpy(sorted, exclude, (size_t)n * sizeof(int));
    qsort(sorted, (size_t)n, sizeof(int), cmp_int);
    int below = 0;
    for (int i = 0; i < n; i++) {
        if (sorted[i] < 0 || sorted[i] >= world || (i > 0 && sorted[i] == sorted[i - 1]))
            return TT_EINVAL;
        if (sorted[i] == rank)
            return TT_EMEMBERSHIP;
        below += sorted[i] < rank;
    }
    *new_rank = rank - below;
    *new_world = world - n;
    return TT_OK;
}

/* Parts are few (one per layer): an insertion sort of their order. */
static void order_parts(const tt_coll_span_t *parts, int n, int *idx) {
    for (int i = 0; i < n; i++) {
        int k = i;
        while (k > 0 && parts[idx[k - 1]].off > parts[i].off) {
            idx[k] = idx[k - 1];
            k--;
        }
        idx[k] = i;
    }
}

int tt_nccl_rest_plan(const tt_coll_span_t *parts, int n, size_t total, tt_coll_span_t *rest,
                      int *nrest) {
    int idx[TT_COLL_EARLY_MAX];
    if (n < 0 || n > TT_COLL_EARLY_MAX || (n > 0 && parts == NULL) || rest == NULL || nrest == NULL)
        return TT_EINVAL;
    order_parts(parts, n, idx);
    size_t at = 0;
    int k = 0, rc = TT_OK;
    for (int i = 0; i < n && rc == TT_OK; i++) {
        const tt_coll_span_t *p = &parts[idx[i]];
        if (p->count == 0)
            continue;
        if (p->off > total || p->count > total - p->off || p->off < at) {
            rc = TT_EINVAL;
            break;
        }
        if (p->off > at)
            rest[k++] = (tt_coll_span_t){at, p->off - at};
        at = p->off + p->count;
    }
    if (rc == TT_OK && at < total)
        rest[k++] = (tt_coll_span_t){at, total - at};
    *nrest = rc == TT_OK ? k : 0;
    return rc;
}

tt_nccl_via_t tt_nccl_ps_route(int64_t step, int64_t from, int plain, int ring) {
    if (step >= from)
        return TT_NCCL_VIA_NCCL;
    if (!plain)
        return TT_NCCL_VIA_SHARDS;
    return ring ? TT_NCCL_VIA_RING : TT_NCCL_VIA_NCCL;
}
