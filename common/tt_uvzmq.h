/* tt_uvzmq: runs a ZeroMQ socket inside a libuv loop. ZMQ_FD is
 * edge-triggered and shared by both directions, and a readable fd does not
 * mean a message is waiting, so the fd is used only to wake the loop: the
 * watcher then drains while ZMQ_EVENTS shows POLLIN. Because a send can make
 * a message readable without another edge, every send done outside the
 * callback must be followed by tt_uvzmq_kick(), which re-checks on the next
 * loop iteration. A budget per wake-up keeps one busy socket from starving
 * the loop's timers and other sockets.
 * Thread safety: loop thread only. */
#ifndef TT_UVZMQ_H
#define TT_UVZMQ_H

#include <uv.h>

typedef struct tt_uvzmq tt_uvzmq_t;

/* Called once per ready message: it must receive exactly one message (or
 * more; the watcher re-checks ZMQ_EVENTS after every call). */
typedef void (*tt_uvzmq_cb)(void *sock, void *arg);

/* Watch `sock` (borrowed: the caller closes it after tt_uvzmq_stop). */
int tt_uvzmq_start(uv_loop_t *loop, void *sock, tt_uvzmq_cb cb, void *arg, tt_uvzmq_t **out);

/* Re-check readiness on the next loop iteration (call after sends). */
void tt_uvzmq_kick(tt_uvzmq_t *w);

/* Stop watching; the handles are closed through libuv and freed in their
 * close callbacks, so this is safe from inside the callback. *w = NULL. */
void tt_uvzmq_stop(tt_uvzmq_t **w);

#endif
