/* ps_fetch: see ps_fetch.h. */
#include "ps_fetch.h"
#include "tt_clock.h"
#include "tt_status.h"

int ps_fetch_spanning(const tt_ps_fetch_opts_t *fo, size_t shards, tt_ps_layout_t *lay, char *err,
                      size_t errlen) {
    for (int tries = 0; tries < 200; tries++) {
        int rc = tt_ps_layout_fetch(fo, lay, err, errlen);
        if (rc == TT_OK && lay->place.nshards == shards)
            return TT_OK;
        if (rc == TT_OK)
            tt_ps_layout_free(lay);
        tt_clock_sleep_ms(50);
    }
    return TT_ETIMEDOUT;
}
