/* tt_nccl_plan: shrink planning. Worlds are small (ranks of one job), so
 * the quadratic checks below are clearer than anything cleverer. */
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

static int find(const char *const *ids, int n, const char *id) {
    for (int i = 0; i < n; i++) {
        if (ids[i] != NULL && id != NULL && strcmp(ids[i], id) == 0)
            return i;
    }
    return -1;
}

int tt_nccl_shrink_applies(const char *const *prev, int prev_world, const char *const *next,
                           int next_world, int *exclude, int *n) {
    *n = 0;
    if (prev == NULL || next == NULL || next_world < 1 || next_world >= prev_world)
        return 0;
    int last = -1;
    for (int j = 0; j < next_world; j++) { /* survivors only, in old order */
        int at = find(prev, prev_world, next[j]);
        if (at <= last)
            return 0;
        last = at;
    }
    for (int i = 0; i < prev_world; i++) {
        if (find(next, next_world, prev[i]) < 0)
            exclude[(*n)++] = i;
    }
    return *n == prev_world - next_world;
}
