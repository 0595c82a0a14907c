/* tt_wake: a one-way "stop waiting" signal from any thread to a thread that
 * sleeps in zmq_poll: a sticky flag plus an eventfd to put among its poll
 * items. Raising it is async-signal-light (an atomic store and a write);
 * the eventfd stays readable once raised, so every later wait ends at once
 * too, which is what a generation that has ended wants. Used by the ring
 * and the PS engine to end a collective when its generation is over. */
#ifndef TT_WAKE_H
#define TT_WAKE_H

#include <stdatomic.h>

typedef struct tt_wake {
    atomic_int raised;
    int fd; /* -1 before tt_wake_open succeeds and after tt_wake_close */
} tt_wake_t;

/* Not raised, no eventfd yet: safe to close. */
void tt_wake_init(tt_wake_t *w);

/* Creates the eventfd. TT_OK or TT_ESYS (errno says why). */
int tt_wake_open(tt_wake_t *w);

/* Any thread: sets the flag and wakes a poll on tt_wake_fd. */
void tt_wake_raise(tt_wake_t *w);

/* 1 once raised. */
int tt_wake_raised(tt_wake_t *w);

/* The eventfd for a zmq_pollitem_t (-1 when not open). */
int tt_wake_fd(const tt_wake_t *w);

void tt_wake_close(tt_wake_t *w);

#endif
