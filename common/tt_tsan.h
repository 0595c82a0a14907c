/* tt_tsan: happens-before annotations for ThreadSanitizer. ZeroMQ is not
 * built with TSan, so when a buffer written by our thread is handed to
 * ZeroMQ (zero-copy send) and freed by its I/O thread, or a received
 * message crosses threads through it, TSan cannot see the ordering ZeroMQ
 * provides and reports a race. TT_TSAN_RELEASE(addr) before handing over
 * and TT_TSAN_ACQUIRE(addr) on the other side make that ordering visible.
 * Both compile to nothing without TSan. */
#ifndef TT_TSAN_H
#define TT_TSAN_H

#if defined(__SANITIZE_THREAD__)
#define TT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TT_TSAN 1
#endif
#endif

#ifdef TT_TSAN
#include <sanitizer/tsan_interface.h>
#define TT_TSAN_RELEASE(addr) __tsan_release((void *)(addr))
#define TT_TSAN_ACQUIRE(addr) __tsan_acquire((void *)(addr))
/* For a bulk loop over memory only the calling thread writes and nobody
 * writes while it reads (a data set's rows converted into a trainer's own
 * batch buffer): TSan would record every element, which costs seconds per
 * process and finds nothing. */
#define TT_TSAN_SKIP __attribute__((no_sanitize("thread")))
#else
#define TT_TSAN_RELEASE(addr) ((void)(addr))
#define TT_TSAN_ACQUIRE(addr) ((void)(addr))
#define TT_TSAN_SKIP
#endif

#endif
