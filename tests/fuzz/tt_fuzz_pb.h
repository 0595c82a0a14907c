/* tt_fuzz_pb: protobuf-c helpers shared by the fuzz targets of protobuf
 * decoders. Header-only; no state. */
#ifndef TT_FUZZ_PB_H
#define TT_FUZZ_PB_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

/* Returns 1 when `m` or any message nested in it kept unknown fields.
 * Why it matters: protobuf-c keeps unknown fields and writes them back, but
 * it accepts a field number 0 in a multi-byte tag and then rejects its own
 * one-byte re-encoding of it, so a decode/encode/decode round trip is only
 * promised for messages made of known fields. */
static inline int tt_fuzz_pb_has_unknown(const ProtobufCMessage *m) {
    if (m->n_unknown_fields > 0)
        return 1;
    const ProtobufCMessageDescriptor *d = m->descriptor;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if (f->type != PROTOBUF_C_TYPE_MESSAGE)
            continue;
        const char *slot = (const char *)m + f->offset;
        /* Oneof members share one union slot: only the active one is valid. */
        if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
            *(const uint32_t *)((const char *)m + f->quantifier_offset) != f->id)
            continue;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)((const char *)m + f->quantifier_offset);
            ProtobufCMessage *const *items = *(ProtobufCMessage *const *const *)slot;
            for (size_t k = 0; k < n; k++)
                if (items[k] != NULL && tt_fuzz_pb_has_unknown(items[k]))
                    return 1;
        } else {
            const ProtobufCMessage *sub = *(const ProtobufCMessage *const *)slot;
            if (sub != NULL && tt_fuzz_pb_has_unknown(sub))
                return 1;
        }
    }
    return 0;
}

#endif
