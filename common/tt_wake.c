/* tt_wake: see tt_wake.h. */
#include "tt_wake.h"

#include "tt_status.h"

#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

void tt_wake_init(tt_wake_t *w) {
    atomic_init(&w->raised, 0);
    w->fd = -1;
}

int tt_wake_open(tt_wake_t *w) {
    w->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    return w->fd < 0 ? TT_ESYS : TT_OK;
}

void tt_wake_raise(tt_wake_t *w) {
    atomic_store(&w->raised, 1);
    uint64_t one = 1;
    if (w->fd >= 0 && write(w->fd, &one, sizeof(one)) < 0) {
        /* EAGAIN only at a saturated counter: the fd is readable anyway */
    }
}

int tt_wake_raised(tt_wake_t *w) {
    return atomic_load(&w->raised);
}

int tt_wake_fd(const tt_wake_t *w) {
    return w->fd;
}

void tt_wake_close(tt_wake_t *w) {
    if (w->fd >= 0)
        close(w->fd);
    w->fd = -1;
}
