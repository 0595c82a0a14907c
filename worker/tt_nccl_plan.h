/* tt_nccl_plan: the pure decisions of NCCL membership changes, compiled in
 * every build so they are unit-tested without a GPU. When the coordinator
 * announces a generation as the previous one minus some ranks
 * (Generation.shrink_of, a drain at a step boundary), the survivors derive
 * the new communicator from the old one with ncclCommShrink instead of a
 * fresh unique id; the plan checks the exclude list and says where each
 * survivor lands. NCCL sorts the exclude list in place and
 * an excluded rank must not call ncclCommShrink: the plan hands out a
 * private sorted copy and refuses an excluded caller. It also plans the
 * rest of a step whose parts were reduced early (bucket overlap on the
 * device), and where the "nccl+ps" row sends each collective. It owns no
 * state.
 * Thread safety: reentrant. */
#ifndef TT_NCCL_PLAN_H
#define TT_NCCL_PLAN_H

#include "tt_coll.h"

#include <stddef.h>
#include <stdint.h>

/* Checks `exclude[0..n)` against a communicator of `world` ranks and
 * writes a sorted copy into sorted[0..n) (the caller's list is never
 * touched), this rank's rank in the shrunk communicator into *new_rank and
 * its size into *new_world. Returns 0, TT_EINVAL (a rank out of range or
 * listed twice, n < 1, or nobody left) or TT_EMEMBERSHIP (`rank` itself is
 * excluded: it must not call ncclCommShrink). */
int tt_nccl_shrink_plan(int rank, int world, const int *exclude, int n, int *sorted, int *new_rank,
                        int *new_world);

/* The step's buffer has `total` elements, of which parts[0..n) (any order,
 * any count of zero is ignored) were reduced early: writes the slices not
 * covered, in buffer order, into rest[0..*nrest) (room for n + 1). 0, or
 * TT_EINVAL when a part leaves the buffer or two parts overlap (the same
 * elements would be summed twice) or n is over TT_COLL_EARLY_MAX. Sorts
 * nothing of the caller's; allocates nothing (it runs every step). */
int tt_nccl_rest_plan(const tt_coll_span_t *parts, int n, size_t total, tt_coll_span_t *rest,
                      int *nrest);

/* Where the "nccl+ps" row (tt_coll_nccl_ps.c) sends a collective. */
typedef enum {
    TT_NCCL_VIA_SHARDS, /* the step's gradients, before the switch */
    TT_NCCL_VIA_RING,   /* a plain collective before the switch: the ps row's ring */
    TT_NCCL_VIA_NCCL,   /* the communicator, waited for once */
} tt_nccl_via_t;

/* The route of a collective of `step` (the job's next step, -1: none yet)
 * when NCCL takes over at `from` (Generation.ps_until_step): gradients
 * (plain == 0) go to the shards before it, plain collectives to the ps
 * row's ring when it has one (ring != 0), else to NCCL (an NCCL job needs
 * no TETHER_ENDPOINT). Nothing but `from` depends on the step: members
 * may be at different steps when a generation starts (a joiner has none),
 * so a switch moved by one rank's step would split the ranks between two
 * backends. */
tt_nccl_via_t tt_nccl_ps_route(int64_t step, int64_t from, int plain, int ring);

#endif
