/* tt_fuzz: the contract every fuzz target (tests/fuzz/fuzz_<target>.c)
 * fulfils. A target feeds one input to one decoder through
 * LLVMFuzzerTestOneInput() and describes valid inputs through
 * tt_fuzz_seeds(), which builds them with the project's own encoders so the
 * seed corpus follows the protocol as it evolves. The same file links either
 * with libFuzzer (the fuzz build) or with fuzz_main.c, a plain-C driver that
 * replays files and seeds under any compiler. This header owns no state and
 * knows nothing about any particular decoder. */
#ifndef TT_FUZZ_H
#define TT_FUZZ_H

#include <stddef.h>
#include <stdint.h>

/* Receives one seed: `name` is a short file name ([a-z0-9_-]), `data` is
 * borrowed for the duration of the call. Returns 0, or a negative tt_status
 * code that makes tt_fuzz_seeds() stop and return it. */
typedef int (*tt_fuzz_emit_fn)(void *ctx, const char *name, const void *data, size_t len);

/* Runs the target's decoder over one input. Must never crash, leak, hang or
 * abort on any input; it aborts on purpose only when an invariant of the
 * decoder is broken (e.g. a re-encoded message no longer decodes).
 * Always returns 0 (libFuzzer's convention). Not thread-safe. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Builds every seed input of the target with the project's encoders and
 * hands each to `emit`. Returns 0, the first negative code `emit` returned,
 * or TT_ENOMEM / TT_EINTERNAL when an encoder failed. Not thread-safe. */
int tt_fuzz_seeds(tt_fuzz_emit_fn emit, void *ctx);

#endif
