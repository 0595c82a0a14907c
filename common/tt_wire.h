/* tt_wire: the one seam between tether and protobuf-c. It packs and
 * unpacks the envelope that heads every message (proto/tether.proto) and is
 * the single decoder through which every byte from the network passes: it
 * rejects, with a sentence in `err` and without side effects, an oversized or
 * truncated envelope, a wrong protocol version, a missing body, payload frames
 * whose number or sizes disagree with the header, over-long strings and
 * bodies that are internally inconsistent. Job and generation scoping is a
 * second, explicit check (tt_wire_check_scope) because only the receiver
 * knows which jobs exist and which generation is current.
 * The generated struct types are visible to callers (they are plain C
 * data); the protobuf-c functions are called only here.
 * Thread safety: all functions are reentrant. */
#ifndef TT_WIRE_H
#define TT_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "tether.pb-c.h"

#define TT_WIRE_VERSION     1u
#define TT_WIRE_MAX_ID      127u  /* job ids, worker ids, sender ids */
#define TT_WIRE_MAX_TEXT    1024u /* reasons, error messages, endpoints */
#define TT_WIRE_MAX_COMM_ID 512u  /* CommIdOffer / CommIdReply id bytes */
#define TT_WIRE_MAX_SHRINK  64u   /* Generation.shrink_exclude ranks */

typedef Tether__Envelope tt_env_t;

typedef struct tt_wire_limits {
    size_t max_envelope;       /* bytes of the envelope frame */
    size_t max_payload_frames; /* raw frames after the envelope */
    size_t max_payload_bytes;  /* sum of all payload frames */
    size_t max_members;        /* list lengths inside bodies */
} tt_wire_limits_t;

/* Defaults: 1 MiB envelope, 64 payload frames, 1 GiB of payload, 65536
 * members. */
void tt_wire_limits_default(tt_wire_limits_t *lim);

/* Decode and validate one envelope frame of `len` bytes followed by
 * `npayloads` payload frames of the given sizes. On success *out owns a new
 * envelope (free with tt_wire_free) and 0 is returned. Errors: TT_ETOOBIG,
 * TT_EPROTO, TT_EVERSION, TT_ESIZE; `err` (may be NULL) gets a sentence.
 * `lim` may be NULL for the defaults. */
int tt_wire_decode(const void *data, size_t len, const size_t *payload_lens, size_t npayloads,
                   const tt_wire_limits_t *lim, tt_env_t **out, char *err, size_t errlen);

/* Receiver-side scope check: the job must be `job_id` (NULL: any) and the
 * generation must not be older than `current_gen`. TT_EJOB or TT_ESTALE with
 * a sentence; 0 when in scope. */
int tt_wire_check_scope(const tt_env_t *env, const char *job_id, uint64_t current_gen, char *err,
                        size_t errlen);

void tt_wire_free(tt_env_t **env);

/* A generation's shrink relation (Generation.shrink_of / shrink_exclude)
 * is well formed: none (0, no ranks), or an older generation with 1 to
 * TT_WIRE_MAX_SHRINK strictly ascending old ranks. 1 or 0. */
int tt_wire_shrink_ok(uint64_t generation, uint64_t shrink_of, const uint32_t *exclude, size_t n);

/* Initialise a stack envelope for sending. Strings are borrowed: they must
 * outlive the tt_wire_encode call. The caller then sets body_case and the
 * body pointer. */
void tt_wire_env_init(tt_env_t *env, const char *job_id, const char *sender_id, uint64_t generation,
                      uint64_t request_id);

/* Serialise to a new malloc'd buffer (*out, owned by the caller). */
int tt_wire_encode(const tt_env_t *env, uint8_t **out, size_t *outlen);

/* Name of the body kind, for logs ("join", "heartbeat", ...). */
const char *tt_wire_body_name(int body_case);

/* The coordinator's durable state file (CoordState). Same rules as the
 * envelope decoder. */
typedef Tether__CoordState tt_coord_state_pb_t;
int tt_wire_state_decode(const void *data, size_t len, tt_coord_state_pb_t **out, char *err,
                         size_t errlen);
int tt_wire_state_encode(const tt_coord_state_pb_t *st, uint8_t **out, size_t *outlen);
void tt_wire_state_free(tt_coord_state_pb_t **st);

/* The checkpoint manifest file (CkptManifest). This layer only parses and
 * bounds the bytes (at most TT_WIRE_MAX_MANIFEST, must parse); every
 * semantic rule (ranges, sizes, dtypes, counts) is tt_manifest's, which is
 * the only caller. TT_ETOOBIG or TT_ECORRUPT with a sentence in `err`. */
#define TT_WIRE_MAX_MANIFEST ((size_t)64 << 20)
typedef Tether__CkptManifest tt_manifest_pb_t;
int tt_wire_manifest_decode(const void *data, size_t len, tt_manifest_pb_t **out, char *err,
                            size_t errlen);
int tt_wire_manifest_encode(const tt_manifest_pb_t *m, uint8_t **out, size_t *outlen);
void tt_wire_manifest_free(tt_manifest_pb_t **m);

#endif
