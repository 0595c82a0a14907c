/* ps_fetch: what the PS test programs (ps_check, ps_ckpt_check) share: the
 * job's placement, fetched again until it spans as many shard servers as
 * the test started (a shard that just came up is not placed yet). */
#ifndef TT_PS_FETCH_H
#define TT_PS_FETCH_H

#include "tt_ps.h"

/* tt_ps_layout_fetch every 50 ms, for up to 10 s, until the placement has
 * `shards` shards. TT_OK with *lay filled, else TT_ETIMEDOUT (`err` holds
 * the last refusal, if any). */
int ps_fetch_spanning(const tt_ps_fetch_opts_t *fo, size_t shards, tt_ps_layout_t *lay, char *err,
                      size_t errlen);

#endif
