/* tt_wire_int: what tt_wire.c and tt_wire_ps.c share: the error macro and
 * the small checks every body validator uses. Private to common/. */
#ifndef TT_WIRE_INT_H
#define TT_WIRE_INT_H

#include "tt_wire.h"

#include <stddef.h>
#include <stdio.h>

#define WIRE_SET_ERR(err, errlen, ...)                                                             \
    do {                                                                                           \
        if ((err) != NULL && (errlen) > 0)                                                         \
            snprintf((err), (errlen), __VA_ARGS__);                                                \
    } while (0)

/* NULL counts as empty: protobuf-c leaves unset submessage strings NULL. */
int tt_wire_str_ok(const char *s, size_t max);
/* TT_OK, or TT_EPROTO naming `what` when s is longer than max. */
int tt_wire_check_str(const char *what, const char *s, size_t max, char *err, size_t errlen);
/* Bodies that carry a tensor announce exactly one frame of whole float32s. */
int tt_wire_check_one_float_frame(const tt_env_t *e, const char *what, int allow_empty, char *err,
                                  size_t errlen);
int tt_wire_check_no_frames(const tt_env_t *e, const char *what, char *err, size_t errlen);

/* tt_wire_ps.c: the shard and parameter-server bodies. */
int tt_wire_check_ps_body(const tt_env_t *e, const tt_wire_limits_t *lim, char *err, size_t errlen);

#endif
