/* fuzz_main: a plain-C stand-in for libFuzzer's main(), linked with one fuzz
 * target into fuzz_<target>_replay. It lets the committed regression corpus
 * run as an ordinary ctest test under gcc and the sanitizer builds, and it
 * writes the generated seed corpus for the fuzz gate. It does not mutate
 * inputs or measure coverage: that is libFuzzer's job in the fuzz build.
 *
 *   fuzz_<t>_replay [--seeds] [PATH...]     replay seeds and files/dirs
 *   fuzz_<t>_replay --write-seeds DIR       write the seeds as files
 *
 * Exit status: 0 when every input ran (a decoder bug crashes or aborts the
 * process instead), 2 on a usage or I/O error. */
#include "tt_fuzz.h"
#include "tt_status.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    const char *dir; /* NULL: feed seeds to the target instead of writing */
    size_t count;
} seed_sink_t;

static int emit_seed(void *ctx, const char *name, const void *data, size_t len) {
    seed_sink_t *sink = ctx;
    sink->count++;
    if (sink->dir == NULL) {
        LLVMFuzzerTestOneInput(data, len);
        return TT_OK;
    }
    char path[4096];
    snprintf(path, sizeof(path), "%s/seed-%s", sink->dir, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL) {
        fprintf(stderr, "fuzz_main: cannot write %s: %s\n", path, strerror(errno));
        return TT_EIO;
    }
    size_t put = len ? fwrite(data, 1, len, f) : 0;
    int rc = (fclose(f) == 0 && put == len) ? TT_OK : TT_EIO;
    if (rc != TT_OK)
        fprintf(stderr, "fuzz_main: short write to %s\n", path);
    return rc;
}

/* Reads a whole file into a malloc'd buffer (at least one byte long so an
 * empty file still gets a valid, distinct pointer). */
static int read_file(const char *path, uint8_t **out, size_t *outlen) {
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return TT_EIO;
    size_t cap = 4096, len = 0;
    uint8_t *buf = malloc(cap);
    while (buf != NULL) {
        len += fread(buf + len, 1, cap - len, f);
        if (len < cap)
            break;
        uint8_t *bigger = realloc(buf, cap * 2);
        if (bigger == NULL) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = bigger;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (buf == NULL || bad) {
        free(buf);
        return buf == NULL ? TT_ENOMEM : TT_EIO;
    }
    *out = buf;
    *outlen = len;
    return TT_OK;
}

static int replay_file(const char *path, size_t *count) {
    uint8_t *data = NULL;
    size_t len = 0;
    int rc = read_file(path, &data, &len);
    if (rc != TT_OK) {
        fprintf(stderr, "fuzz_main: cannot read %s: %s\n", path, tt_strerror(rc));
        return rc;
    }
    /* A private copy of exactly `len` bytes lets ASan catch any read past
     * the end of the input, as libFuzzer does. */
    uint8_t *exact = malloc(len ? len : 1);
    if (exact == NULL) {
        free(data);
        return TT_ENOMEM;
    }
    if (len)
        memcpy(exact, data, len);
    free(data);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    (*count)++;
    return TT_OK;
}

static int replay_dir(const char *dir, size_t *count) {
    DIR *d = opendir(dir);
    if (d == NULL)
        return TT_EIO;
    int rc = TT_OK;
    struct dirent *e;
    while (rc == TT_OK && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue; /* ".", "..", and hidden notes such as .gitkeep */
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
            rc = replay_file(path, count);
    }
    closedir(d);
    return rc;
}

static int replay_path(const char *path, size_t *count) {
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "fuzz_main: %s: %s\n", path, strerror(errno));
        return TT_EIO;
    }
    return S_ISDIR(st.st_mode) ? replay_dir(path, count) : replay_file(path, count);
}

static int usage(const char *argv0) {
    fprintf(stderr, "usage: %s [--seeds] [PATH...] | --write-seeds DIR\n", argv0);
    return 2;
}

int main(int argc, char **argv) {
    seed_sink_t sink = {NULL, 0};
    if (argc == 3 && strcmp(argv[1], "--write-seeds") == 0) {
        sink.dir = argv[2];
        if (mkdir(argv[2], 0777) != 0 && errno != EEXIST) {
            fprintf(stderr, "fuzz_main: cannot create %s: %s\n", argv[2], strerror(errno));
            return 2;
        }
        int rc = tt_fuzz_seeds(emit_seed, &sink);
        printf("fuzz_main: wrote %zu seeds to %s\n", sink.count, argv[2]);
        return rc == TT_OK ? 0 : 2;
    }
    size_t files = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--seeds") == 0) {
            /* A target without seeds would fuzz from nothing: refuse it. */
            if (tt_fuzz_seeds(emit_seed, &sink) != TT_OK || sink.count == 0) {
                fprintf(stderr, "fuzz_main: the target produced no seeds\n");
                return 2;
            }
        } else if (argv[i][0] == '-') {
            return usage(argv[0]);
        } else if (replay_path(argv[i], &files) != TT_OK) {
            return 2;
        }
    }
    printf("fuzz_main: replayed %zu seeds and %zu files without a failure\n", sink.count, files);
    return 0;
}
