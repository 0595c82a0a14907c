/* fuzz_zauth: fuzzes tt_zauth_parse(), the reader of the cluster key file,
 * which an operator writes or edits by hand and every daemon reads at
 * start: a damaged file must be refused with a sentence, never crash or
 * yield a half-set key. Whatever it accepts must be a whole key: on, both
 * halves 40 characters of Z85, and the public half the one ZeroMQ derives
 * from the secret.
 * fuzz-requires: common/tt_zauth.c */
#include "tt_fuzz.h"
#include "tt_status.h"
#include "tt_zauth.h"

#include <stdlib.h>
#include <string.h>
#include <zmq.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (text == NULL)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0'; /* a NUL inside ends the text, as in the file reader */
    tt_zauth_key_t k;
    memset(&k, 0x5a, sizeof(k));
    char err[256];
    int rc = tt_zauth_parse(&k, text, err, sizeof(err));
    free(text);
    if (rc != TT_OK) {
        if (rc != TT_EINVAL || k.on || memchr(err, '\0', sizeof(err)) == NULL)
            abort();
        return 0;
    }
    char pub[TT_ZAUTH_Z85];
    if (!k.on || (k.data_curve != 0 && k.data_curve != 1) || strlen(k.sec) != 40 ||
        strlen(k.pub) != 40 || zmq_curve_public(pub, k.sec) != 0 || strcmp(pub, k.pub) != 0)
        abort();
    return 0;
}

int tt_fuzz_seeds(tt_fuzz_emit_fn emit, void *ctx) {
    char text[512], err[256];
    int rc = TT_OK;
    for (int curve = 0; rc == TT_OK && curve < 2; curve++) {
        if (tt_zauth_format(text, sizeof(text), curve, err, sizeof(err)) != TT_OK)
            return TT_EINTERNAL;
        rc = emit(ctx, curve ? "keygen-curve" : "keygen-plain", text, strlen(text));
    }
    static const char *const seeds[][2] = {
        {"crlf", "key = rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7\r\ndata = plain\r\n"},
        {"no-key", "# nothing\ndata = curve\n"},
        {"short", "key = abc\n"},
    };
    for (size_t i = 0; rc == TT_OK && i < sizeof(seeds) / sizeof(seeds[0]); i++)
        rc = emit(ctx, seeds[i][0], seeds[i][1], strlen(seeds[i][1]));
    return rc;
}
