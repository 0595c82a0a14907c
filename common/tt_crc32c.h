/* tt_crc32c: CRC-32C (Castagnoli, reflected polynomial 0x82F63B78, the
 * checksum of iSCSI, ext4 and RocksDB) over byte buffers. It owns two
 * implementations that must agree bit for bit: portable slicing-by-8 and
 * the SSE4.2 `crc32` instruction, picked at run time on x86 when the CPU
 * has it. It knows nothing about files; tt_ckpt feeds it part bytes.
 *
 * The value is incremental: start from 0 and pass the previous result to
 * continue, so tt_crc32c(tt_crc32c(0, a, n), b, m) is the CRC of a||b. The
 * pre- and post-inversion are applied inside each call.
 * Thread safety: every function is reentrant; no state. */
#ifndef TT_CRC32C_H
#define TT_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* CRC of `len` bytes at `data` (may be NULL when len is 0) continuing
 * `crc` (0 to start). Uses the fastest implementation this CPU runs. */
uint32_t tt_crc32c(uint32_t crc, const void *data, size_t len);

/* Portable slicing-by-8; same contract as tt_crc32c. */
uint32_t tt_crc32c_sw(uint32_t crc, const void *data, size_t len);

/* 1 when the SSE4.2 path exists in this build and the CPU supports it. */
int tt_crc32c_hw_available(void);

/* The SSE4.2 path; same contract as tt_crc32c. Falls back to the portable
 * code when tt_crc32c_hw_available() is 0, so it is always safe to call. */
uint32_t tt_crc32c_hw(uint32_t crc, const void *data, size_t len);

/* "sse4.2" or "slicing-by-8": what tt_crc32c uses here (static storage). */
const char *tt_crc32c_impl_name(void);

#endif
