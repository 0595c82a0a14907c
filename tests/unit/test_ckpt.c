/* Unit tests of tt_ckpt (part files) and tt_ckpt_dir (latest pointer,
 * listing, retention, whole-checkpoint verification), in a temp directory:
 * streaming writes in uneven pieces, read-back, and every fault verify
 * must name: a flipped byte, a truncated part, a missing part, a damaged
 * header, writers that write too much or too little; and tt_fsutil's
 * atomic write with two writers of one path. */
#include "tt_ckpt.h"
#include "tt_ckpt_dir.h"
#include "tt_crc32c.h"
#include "tt_cunit.h"
#include "tt_fsutil.h"
#include "tt_status.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static uint8_t pattern(uint64_t i, uint32_t seed) {
    return (uint8_t)((i * 2654435761u) >> 13 ^ seed);
}

/* Writes a part whose payload byte i is pattern(i, seed), in pieces of
 * `piece` bytes through a writer with a `bufsz` buffer. */
static int write_part(const char *dir, const char *name, const tt_ckpt_range_t *r, uint32_t nr,
                      uint32_t planes, uint64_t payload, uint32_t seed, size_t piece, size_t bufsz,
                      tt_ckpt_part_info_t *info) {
    tt_ckpt_part_opts_t o = {
        dir, name, nr ? TT_CKPT_KIND_SHARD : TT_CKPT_KIND_TRAINER, r, nr, planes, payload, bufsz};
    tt_ckpt_writer_t *w = NULL;
    char err[512] = "";
    int rc = tt_ckpt_writer_create(&w, &o, err, sizeof(err));
    uint8_t *buf = malloc(piece);
    for (uint64_t at = 0; rc == TT_OK && at < payload; at += piece) {
        size_t n = payload - at < piece ? (size_t)(payload - at) : piece;
        for (size_t k = 0; k < n; k++)
            buf[k] = pattern(at + k, seed);
        rc = tt_ckpt_writer_write(w, buf, n);
    }
    if (rc == TT_OK)
        rc = tt_ckpt_writer_finish(w, info);
    if (rc != TT_OK && w != NULL)
        printf("\n    writer: %s\n", tt_ckpt_writer_error(w));
    tt_ckpt_writer_destroy(&w);
    free(buf);
    return rc;
}

static void mk_tmp(char *dir) {
    strcpy(dir, "/tmp/tt_ckpt_XXXXXX");
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
}

static void rm_tree(const char *path) {
    DIR *d = opendir(path);
    struct dirent *de;
    char sub[1024];
    while (d != NULL && (de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name);
        struct stat st;
        if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode))
            rm_tree(sub);
        else
            unlink(sub);
    }
    if (d != NULL)
        closedir(d);
    rmdir(path);
}

static const tt_ckpt_range_t rng[] = {{0, 1000}, {4096, 3000}};

static void ckpt_part_write_and_read_back(void) {
    char dir[64], path[128];
    mk_tmp(dir);
    tt_ckpt_part_info_t info;
    /* Odd piece and buffer sizes cover buffered, direct and straddling writes. */
    CU_ASSERT_EQUAL_FATAL(write_part(dir, "shard-0.bin", rng, 2, 2, 8000, 1, 333, 100, &info),
                          TT_OK);
    CU_ASSERT_EQUAL(info.size, 64 + 32 + 8000 + 8);
    snprintf(path, sizeof(path), "%s/shard-0.bin", dir);
    uint8_t *file = NULL;
    size_t len = 0;
    CU_ASSERT_EQUAL_FATAL(tt_fs_read_all(path, 1 << 20, &file, &len, NULL, 0), TT_OK);
    CU_ASSERT_EQUAL(len, info.size);
    CU_ASSERT_EQUAL(tt_crc32c(0, file, len - 8), info.crc32c); /* incremental == one shot */
    CU_ASSERT(memcmp(file, "TTPART\r\n", 8) == 0);
    free(file);
    tt_ckpt_expect_t exp = {info.size, info.crc32c};
    CU_ASSERT_EQUAL(tt_ckpt_part_verify(path, "shard-0.bin", &exp, NULL, NULL, 0), TT_OK);
    tt_ckpt_reader_t *r = NULL;
    CU_ASSERT_EQUAL_FATAL(tt_ckpt_reader_create(&r, path, NULL, 0), TT_OK);
    CU_ASSERT_EQUAL(tt_ckpt_reader_info(r)->nranges, 2);
    CU_ASSERT_EQUAL(tt_ckpt_reader_ranges(r)[1].offset, 4096);
    uint8_t got[50];
    CU_ASSERT_EQUAL(tt_ckpt_reader_read(r, 7950, got, 50), TT_OK);
    int bad = 0;
    for (int k = 0; k < 50; k++)
        bad += got[k] != pattern(7950 + (uint64_t)k, 1);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(tt_ckpt_reader_read(r, 7951, got, 50), TT_ESIZE);
    tt_ckpt_reader_destroy(&r);
    CU_ASSERT_PTR_NULL(r);
    rm_tree(dir);
}

static void ckpt_writer_rejects_wrong_sizes(void) {
    char dir[64], path[128];
    mk_tmp(dir);
    tt_ckpt_part_opts_t o = {dir, "p.bin", TT_CKPT_KIND_SHARD, rng, 2, 1, 4000, 0};
    tt_ckpt_writer_t *w = NULL;
    uint8_t buf[4001] = {0};
    CU_ASSERT_EQUAL_FATAL(tt_ckpt_writer_create(&w, &o, NULL, 0), TT_OK);
    CU_ASSERT_EQUAL(tt_ckpt_writer_write(w, buf, 3999), TT_OK);
    CU_ASSERT_EQUAL(tt_ckpt_writer_finish(w, NULL), TT_ESIZE); /* one byte short */
    CU_ASSERT_PTR_NOT_NULL(strstr(tt_ckpt_writer_error(w), "3999 payload bytes written"));
    CU_ASSERT_EQUAL(tt_ckpt_writer_write(w, buf, 1), TT_ECLOSED);
    tt_ckpt_writer_destroy(&w);
    CU_ASSERT_EQUAL_FATAL(tt_ckpt_writer_create(&w, &o, NULL, 0), TT_OK);
    CU_ASSERT_EQUAL(tt_ckpt_writer_write(w, buf, 4001), TT_ESIZE);
    tt_ckpt_writer_destroy(&w);
    snprintf(path, sizeof(path), "%s/p.bin", dir);
    CU_ASSERT_EQUAL(access(path, F_OK), -1); /* nothing committed ... */
    snprintf(path, sizeof(path), "%s/p.bin.tmp", dir);
    CU_ASSERT_EQUAL(access(path, F_OK), -1); /* ... and no leftover */
    char err[256] = "";
    o.payload_len = 3000; /* planes x ranges is 4000 */
    CU_ASSERT_EQUAL(tt_ckpt_writer_create(&w, &o, err, sizeof(err)), TT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "1 planes x 4000"));
    o.payload_len = 4000;
    o.name = "../escape";
    CU_ASSERT_EQUAL(tt_ckpt_writer_create(&w, &o, NULL, 0), TT_EINVAL);
    tt_ckpt_writer_destroy(NULL);
    rm_tree(dir);
}

static void flip_byte(const char *path, long off) {
    int fd = open(path, O_RDWR);
    uint8_t b = 0;
    CU_ASSERT_EQUAL_FATAL(pread(fd, &b, 1, off), 1);
    b ^= 0x20;
    CU_ASSERT_EQUAL(pwrite(fd, &b, 1, off), 1);
    close(fd);
}

static void ckpt_verify_names_each_fault(void) {
    char dir[64], path[128], err[512];
    mk_tmp(dir);
    tt_ckpt_part_info_t info;
    CU_ASSERT_EQUAL_FATAL(write_part(dir, "shard-1.bin", rng, 2, 1, 4000, 2, 4096, 0, &info),
                          TT_OK);
    snprintf(path, sizeof(path), "%s/shard-1.bin", dir);
    tt_ckpt_expect_t exp = {info.size, info.crc32c};
    flip_byte(path, 2000); /* payload */
    CU_ASSERT_EQUAL(tt_ckpt_part_verify(path, "shard-1.bin", &exp, NULL, err, sizeof(err)),
                    TT_ECORRUPT);
    char want[128];
    snprintf(want, sizeof(want), ", manifest says 0x%08x", info.crc32c);
    CU_ASSERT(strncmp(err, "part shard-1.bin: CRC 0x", 24) == 0 && strstr(err, want) != NULL);
    CU_ASSERT_EQUAL(tt_ckpt_part_verify(path, "shard-1.bin", NULL, NULL, err, sizeof(err)),
                    TT_ECORRUPT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "its trailer says"));
    flip_byte(path, 2000);
    CU_ASSERT_EQUAL(tt_ckpt_part_verify(path, "shard-1.bin", &exp, NULL, err, sizeof(err)), TT_OK);
    flip_byte(path, 30); /* payload length field of the header */
    CU_ASSERT_EQUAL(tt_ckpt_part_verify(path, "shard-1.bin", NULL, NULL, err, sizeof(err)),
                    TT_ECORRUPT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "header CRC"));
    flip_byte(path, 30);
    CU_ASSERT_EQUAL(truncate(path, (off_t)info.size - 100), 0);
    CU_ASSERT_EQUAL(tt_ckpt_part_verify(path, "shard-1.bin", &exp, NULL, err, sizeof(err)),
                    TT_ECORRUPT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "(truncated)"));
    CU_ASSERT_EQUAL(tt_ckpt_part_verify(path, "shard-1.bin", NULL, NULL, err, sizeof(err)),
                    TT_ECORRUPT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "its header implies"));
    unlink(path);
    CU_ASSERT_EQUAL(tt_ckpt_part_verify(path, "shard-1.bin", &exp, NULL, err, sizeof(err)),
                    TT_ENOTFOUND);
    CU_ASSERT_STRING_EQUAL(err, "part shard-1.bin: missing");
    rm_tree(dir);
}

/* A whole checkpoint as the coordinator would commit it: two shard parts
 * (params + momentum over 32-element chunks of a 26-element space), a
 * trainer part, MANIFEST, latest. */
static void commit_checkpoint(const char *root, const char *id, uint64_t step, uint32_t seed) {
    static const tt_ckpt_range_t a[] = {{0, 32}, {64, 32}}, b[] = {{32, 32}, {96, 8}};
    static const uint32_t kinds[] = {TT_STATE_PARAMS, TT_STATE_MOMENTUM};
    char dir[TT_CKPT_PATH_MAX], err[512] = "";
    CU_ASSERT_EQUAL_FATAL(tt_ckpt_dir_create(root, id, dir, err, sizeof(err)), TT_OK);
    tt_manifest_t m = {.version = TT_MANIFEST_VERSION,
                       .step = step,
                       .epoch = 1,
                       .created_unix_ms = 1000 + step,
                       .duration_ms = 5,
                       .nparts = 3,
                       .ntensors = 2};
    snprintf(m.id, sizeof(m.id), "%s", id);
    snprintf(m.job_id, sizeof(m.job_id), "job");
    m.parts = calloc(3, sizeof(*m.parts));
    m.tensors = calloc(2, sizeof(*m.tensors));
    const char *names[] = {"shard-0.bin", "shard-1.bin", "trainer.bin"};
    const tt_ckpt_range_t *rs[] = {a, b, NULL};
    const uint64_t pay[] = {128, 80, 40};
    for (int i = 0; i < 3; i++) {
        tt_ckpt_part_info_t info;
        uint32_t nr = rs[i] ? 2 : 0;
        CU_ASSERT_EQUAL_FATAL(
            write_part(dir, names[i], rs[i], nr, nr ? 2 : 0, pay[i], seed, 7, 0, &info), TT_OK);
        tt_mf_part_t *p = &m.parts[i];
        snprintf(p->file, sizeof(p->file), "%s", names[i]);
        *p = (tt_mf_part_t){.kind = info.kind,
                            .size = info.size,
                            .crc32c = info.crc32c,
                            .planes = info.planes,
                            .nranges = nr};
        snprintf(p->file, sizeof(p->file), "%s", names[i]);
        p->ranges = nr ? malloc(2 * sizeof(*p->ranges)) : NULL;
        if (nr)
            memcpy(p->ranges, rs[i], 2 * sizeof(*p->ranges));
    }
    m.tensors[0] = (tt_mf_tensor_t){.name = "w", .ndim = 2, .shape = {4, 5}, .dtype = TT_DTYPE_F32};
    m.tensors[1] = (tt_mf_tensor_t){
        .name = "b", .ndim = 1, .shape = {6}, .dtype = TT_DTYPE_F32, .flat_offset = 80};
    CU_ASSERT_EQUAL_FATAL(tt_manifest_fill_extents(&m, kinds, 2, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL_FATAL(tt_manifest_store(dir, &m, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL_FATAL(tt_ckpt_latest_write(root, id, err, sizeof(err)), TT_OK);
    tt_manifest_free(&m);
}

static void ckpt_dir_verify_latest_and_fallback(void) {
    char root[64], dir[128], path[160], id[TT_MF_ID_MAX], err[1024];
    mk_tmp(root);
    CU_ASSERT_EQUAL(tt_ckpt_latest_read(root, id, err, sizeof(err)), TT_ENOTFOUND);
    commit_checkpoint(root, "step-10", 10, 1);
    commit_checkpoint(root, "step-20", 20, 2);
    CU_ASSERT_EQUAL(tt_ckpt_latest_read(root, id, err, sizeof(err)), TT_OK);
    CU_ASSERT_STRING_EQUAL(id, "step-20");
    snprintf(dir, sizeof(dir), "%s/step-20", root);
    tt_ckpt_report_t rep;
    CU_ASSERT_EQUAL(tt_ckpt_verify(dir, &rep), TT_OK);
    CU_ASSERT_EQUAL(rep.nparts, 3);
    CU_ASSERT_EQUAL(rep.parts[2].rc, TT_OK);
    tt_ckpt_report_free(&rep);
    snprintf(path, sizeof(path), "%s/shard-1.bin", dir);
    flip_byte(path, 100);
    CU_ASSERT_EQUAL(tt_ckpt_verify(dir, &rep), TT_ECORRUPT);
    CU_ASSERT_EQUAL(rep.parts[0].rc, TT_OK);
    CU_ASSERT_EQUAL(rep.parts[1].rc, TT_ECORRUPT);
    CU_ASSERT(strncmp(rep.msg, "part shard-1.bin: CRC 0x", 24) == 0);
    tt_ckpt_report_free(&rep);
    CU_ASSERT_EQUAL(tt_ckpt_latest_valid(root, id, err, sizeof(err)), TT_OK);
    CU_ASSERT_STRING_EQUAL(id, "step-10");
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "step-20: part shard-1.bin"));
    snprintf(path, sizeof(path), "%s/trainer.bin", dir);
    unlink(path);
    CU_ASSERT_EQUAL(tt_ckpt_verify(dir, &rep), TT_ECORRUPT); /* first bad part wins */
    CU_ASSERT_EQUAL(rep.parts[2].rc, TT_ENOTFOUND);
    CU_ASSERT_PTR_NOT_NULL(strstr(rep.msg, "(and 1 more bad parts)"));
    tt_ckpt_report_free(&rep);
    snprintf(path, sizeof(path), "%s/MANIFEST", dir);
    unlink(path);
    CU_ASSERT_EQUAL(tt_ckpt_verify(dir, &rep), TT_ENOTFOUND);
    tt_ckpt_report_free(&rep);
    rm_tree(root);
}

static void ckpt_latest_pointer_is_strict(void) {
    char root[64], path[128], id[TT_MF_ID_MAX];
    mk_tmp(root);
    CU_ASSERT_EQUAL(tt_ckpt_latest_write(root, "../x", NULL, 0), TT_EINVAL);
    CU_ASSERT_EQUAL(tt_ckpt_latest_write(root, "ck-1", NULL, 0), TT_OK);
    CU_ASSERT_EQUAL(tt_ckpt_latest_read(root, id, NULL, 0), TT_OK);
    CU_ASSERT_STRING_EQUAL(id, "ck-1");
    snprintf(path, sizeof(path), "%s/latest", root);
    CU_ASSERT_EQUAL(tt_fs_write_atomic(path, "a b\n", 4, NULL, 0), TT_OK);
    CU_ASSERT_EQUAL(tt_ckpt_latest_read(root, id, NULL, 0), TT_ECORRUPT);
    CU_ASSERT_EQUAL(tt_fs_write_atomic(path, "ab\n\n", 4, NULL, 0), TT_OK);
    CU_ASSERT_EQUAL(tt_ckpt_latest_read(root, id, NULL, 0), TT_ECORRUPT);
    CU_ASSERT_EQUAL(tt_fs_write_atomic(path, "", 0, NULL, 0), TT_OK);
    CU_ASSERT_EQUAL(tt_ckpt_latest_read(root, id, NULL, 0), TT_ECORRUPT);
    CU_ASSERT_EQUAL(tt_ckpt_dir_create(root, "ck-1", NULL, NULL, 0), TT_OK);
    CU_ASSERT_EQUAL(tt_ckpt_dir_create(root, "ck-1", NULL, NULL, 0), TT_EEXIST);
    rm_tree(root);
}

static void ckpt_list_and_retention(void) {
    char root[64], path[160];
    mk_tmp(root);
    commit_checkpoint(root, "c-30", 30, 3);
    commit_checkpoint(root, "c-10", 10, 1);
    commit_checkpoint(root, "c-20", 20, 2);
    commit_checkpoint(root, "c-40", 40, 4);
    CU_ASSERT_EQUAL(tt_ckpt_dir_create(root, "c-50", NULL, NULL, 0), TT_OK); /* in flight */
    tt_ckpt_entry_t *v = NULL;
    size_t n = 0, removed = 0;
    CU_ASSERT_EQUAL_FATAL(tt_ckpt_list(root, &v, &n, NULL, 0), TT_OK);
    CU_ASSERT_EQUAL_FATAL(n, 4);
    CU_ASSERT_STRING_EQUAL(v[0].id, "c-10");
    CU_ASSERT_STRING_EQUAL(v[3].id, "c-40");
    CU_ASSERT_EQUAL(v[3].bytes, (64 + 32 + 128 + 8) + (64 + 32 + 80 + 8) + (64 + 40 + 8));
    free(v);
    CU_ASSERT_EQUAL(tt_ckpt_retain(root, 0, &removed, NULL, 0), TT_EINVAL);
    /* latest names c-20 (an operator rolled back): it survives retention. */
    CU_ASSERT_EQUAL(tt_ckpt_latest_write(root, "c-20", NULL, 0), TT_OK);
    CU_ASSERT_EQUAL(tt_ckpt_retain(root, 1, &removed, NULL, 0), TT_OK);
    CU_ASSERT_EQUAL(removed, 2);
    CU_ASSERT_EQUAL_FATAL(tt_ckpt_list(root, &v, &n, NULL, 0), TT_OK);
    CU_ASSERT_EQUAL_FATAL(n, 2);
    CU_ASSERT_STRING_EQUAL(v[0].id, "c-20");
    CU_ASSERT_STRING_EQUAL(v[1].id, "c-40");
    free(v);
    snprintf(path, sizeof(path), "%s/c-10", root);
    CU_ASSERT_EQUAL(access(path, F_OK), -1);
    snprintf(path, sizeof(path), "%s/c-50", root);
    CU_ASSERT_EQUAL(access(path, F_OK), 0); /* uncommitted: not retention's business */
    CU_ASSERT_EQUAL(tt_ckpt_retain(root, 3, &removed, NULL, 0), TT_OK);
    CU_ASSERT_EQUAL(removed, 0);
    snprintf(path, sizeof(path), "%s/none", root);
    CU_ASSERT_EQUAL(tt_ckpt_list(path, &v, &n, NULL, 0), TT_OK);
    CU_ASSERT_EQUAL(n, 0);
    rm_tree(root);
}

/* A directory under root holding one file `file` (NULL: none). */
static void leftover(const char *root, const char *id, const char *file) {
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", root, id);
    CU_ASSERT_EQUAL_FATAL(mkdir(path, 0755), 0);
    snprintf(path, sizeof(path), "%s/%s/%s", root, id, file ? file : "");
    if (file != NULL)
        CU_ASSERT_EQUAL_FATAL(tt_fs_write_atomic(path, "part", 4, NULL, 0), TT_OK);
}

static int exists(const char *root, const char *id) {
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", root, id);
    return access(path, F_OK) == 0;
}

/* Checkpoints that never committed leave their directories; retention
 * removes those below the step `latest` names, and nothing a write in
 * flight (a later step) or an operator (a MANIFEST that does not load, a
 * directory of another name) may still need. */
static void ckpt_retention_removes_uncommitted_leftovers(void) {
    char root[64];
    mk_tmp(root);
    commit_checkpoint(root, "step-000000010", 10, 1);
    commit_checkpoint(root, "step-000000030", 30, 3);
    leftover(root, "step-000000020", "ps-1.bin.tmp");   /* writer killed mid-write */
    leftover(root, "step-000000025", "ps-0.bin");       /* commit refused */
    leftover(root, "step-000000005", NULL);             /* empty */
    leftover(root, "step-000000015", TT_MANIFEST_FILE); /* a manifest that does not load */
    leftover(root, "step-000000040", "shard-0.bin");    /* in flight */
    leftover(root, "step-00000001x", "x");              /* not a trainer name */
    leftover(root, "mine", "x");
    size_t removed = 0;
    /* latest names step 10: only what is below it goes. */
    CU_ASSERT_EQUAL(tt_ckpt_latest_write(root, "step-000000010", NULL, 0), TT_OK);
    CU_ASSERT_EQUAL(tt_ckpt_retain(root, 3, &removed, NULL, 0), TT_OK);
    CU_ASSERT_EQUAL(removed, 1);
    CU_ASSERT(!exists(root, "step-000000005"));
    CU_ASSERT(exists(root, "step-000000020"));
    CU_ASSERT_EQUAL(tt_ckpt_latest_write(root, "step-000000030", NULL, 0), TT_OK);
    CU_ASSERT_EQUAL(tt_ckpt_retain(root, 3, &removed, NULL, 0), TT_OK);
    CU_ASSERT_EQUAL(removed, 2);
    CU_ASSERT(!exists(root, "step-000000020"));
    CU_ASSERT(!exists(root, "step-000000025"));
    CU_ASSERT(exists(root, "step-000000015"));
    CU_ASSERT(exists(root, "step-000000040"));
    CU_ASSERT(exists(root, "step-00000001x"));
    CU_ASSERT(exists(root, "mine"));
    CU_ASSERT(exists(root, "step-000000010") && exists(root, "step-000000030"));
    /* keep 1: the committed step 10 goes as a checkpoint, not a leftover. */
    CU_ASSERT_EQUAL(tt_ckpt_retain(root, 1, &removed, NULL, 0), TT_OK);
    CU_ASSERT_EQUAL(removed, 1);
    CU_ASSERT(!exists(root, "step-000000010") && exists(root, "step-000000030"));
    rm_tree(root);
}

typedef struct {
    const char *path;
    char fill;
    size_t len;
    int failures;
} atomic_writer_t;

static void *write_atomic_often(void *arg) {
    atomic_writer_t *a = arg;
    char *buf = malloc(a->len);
    memset(buf, a->fill, a->len);
    for (int i = 0; i < 40; i++)
        a->failures += tt_fs_write_atomic(a->path, buf, a->len, NULL, 0) != TT_OK;
    free(buf);
    return NULL;
}

/* Two writers of one path in one process (the coordinator's background
 * save and its shutdown save): every write succeeds, the file is always
 * one writer's whole content, no temporary file stays behind, and the
 * umask applies. They once shared one temporary name, and one truncated
 * what the other was about to rename into place. */
static void fs_write_atomic_concurrent_writers(void) {
    char root[64], path[128];
    mk_tmp(root);
    snprintf(path, sizeof(path), "%s/state", root);
    atomic_writer_t w[2] = {{path, 'a', 192 << 10, 0}, {path, 'b', 64 << 10, 0}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        CU_ASSERT_EQUAL_FATAL(pthread_create(&t[i], NULL, write_atomic_often, &w[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    CU_ASSERT_EQUAL(w[0].failures + w[1].failures, 0);
    uint8_t *file = NULL;
    size_t len = 0;
    CU_ASSERT_EQUAL_FATAL(tt_fs_read_all(path, 1 << 20, &file, &len, NULL, 0), TT_OK);
    const atomic_writer_t *last = len == w[0].len ? &w[0] : &w[1];
    CU_ASSERT_EQUAL(len, last->len);
    size_t odd = 0;
    for (size_t i = 0; i < len; i++)
        odd += file[i] != (uint8_t)last->fill;
    CU_ASSERT_EQUAL(odd, 0);
    free(file);
    size_t entries = 0;
    DIR *d = opendir(root);
    for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;)
        entries += e->d_name[0] != '.';
    if (d != NULL)
        closedir(d);
    CU_ASSERT_EQUAL(entries, 1);
    /* The process's umask still applies (0027 under the systemd units). */
    mode_t before = umask(027);
    CU_ASSERT_EQUAL(tt_fs_write_atomic(path, "x", 1, NULL, 0), TT_OK);
    umask(before);
    struct stat st;
    CU_ASSERT(stat(path, &st) == 0 && (st.st_mode & 0777) == 0640);
    rm_tree(root);
}

static mode_t mode_of(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? st.st_mode & 0777 : 0;
}

/* Workers and the daemons that write into their checkpoint root (the
 * coordinator's MANIFEST and `latest`, a shard's ps-<k>.bin, retention)
 * may be different users of one group: with umask 0002 everything a
 * checkpoint is made of is group-writable, with 0022 it is not. */
static void ckpt_modes_follow_the_umask(void) {
    char dir[64], root[128], id_dir[TT_CKPT_PATH_MAX], part[TT_CKPT_PATH_MAX];
    mk_tmp(dir);
    snprintf(root, sizeof(root), "%s/a/root", dir);
    mode_t before = umask(002);
    CU_ASSERT_EQUAL_FATAL(tt_ckpt_dir_create(root, "step-000000010", id_dir, NULL, 0), TT_OK);
    tt_ckpt_part_info_t info;
    CU_ASSERT_EQUAL(write_part(id_dir, "shard-0.bin", rng, 2, 2, 8000, 1, 333, 100, &info), TT_OK);
    CU_ASSERT_EQUAL(tt_ckpt_latest_write(root, "step-000000010", NULL, 0), TT_OK);
    umask(022);
    CU_ASSERT_EQUAL_FATAL(tt_ckpt_dir_create(root, "step-000000020", NULL, NULL, 0), TT_OK);
    umask(before);
    snprintf(part, sizeof(part), "%s/shard-0.bin", id_dir);
    CU_ASSERT_EQUAL(mode_of(root), 0775);
    CU_ASSERT_EQUAL(mode_of(id_dir), 0775);
    CU_ASSERT_EQUAL(mode_of(part), 0664);
    snprintf(part, sizeof(part), "%s/latest", root);
    CU_ASSERT_EQUAL(mode_of(part), 0664);
    snprintf(part, sizeof(part), "%s/step-000000020", root);
    CU_ASSERT_EQUAL(mode_of(part), 0755);
    rm_tree(dir);
}

/* A checkpoint root is checked at start-up: made if missing, refused
 * with a sentence when it is a file, under a file, or not writable, and
 * the probe leaves nothing behind. */
static void fs_check_writable_dir_refuses_what_cannot_take_a_file(void) {
    char dir[64], path[256], err[512] = "";
    mk_tmp(dir);
    snprintf(path, sizeof(path), "%s/a/b", dir);
    CU_ASSERT_EQUAL(tt_fs_check_writable_dir(path, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL(mode_of(path) != 0, 1);
    size_t entries = 0;
    DIR *d = opendir(path);
    for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;)
        entries += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    if (d != NULL)
        closedir(d);
    CU_ASSERT_EQUAL(entries, 0);
    snprintf(path, sizeof(path), "%s/file", dir);
    CU_ASSERT_EQUAL_FATAL(tt_fs_write_atomic(path, "x", 1, NULL, 0), TT_OK);
    CU_ASSERT_EQUAL(tt_fs_check_writable_dir(path, err, sizeof(err)), TT_ESYS);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "not a directory"));
    snprintf(path, sizeof(path), "%s/file/sub", dir);
    CU_ASSERT_EQUAL(tt_fs_check_writable_dir(path, err, sizeof(err)), TT_ESYS);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "Not a directory"));
    if (geteuid() != 0) { /* root writes whatever the mode says */
        snprintf(path, sizeof(path), "%s/ro", dir);
        CU_ASSERT_EQUAL_FATAL(mkdir(path, 0555), 0);
        CU_ASSERT_EQUAL(tt_fs_check_writable_dir(path, err, sizeof(err)), TT_ESYS);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, "Permission denied"));
    }
    rm_tree(dir);
}

static const tt_cunit_test_t tests[] = {
    {"fs_check_writable_dir_refuses_what_cannot_take_a_file",
     fs_check_writable_dir_refuses_what_cannot_take_a_file},
    {"ckpt_modes_follow_the_umask", ckpt_modes_follow_the_umask},
    {"fs_write_atomic_concurrent_writers", fs_write_atomic_concurrent_writers},
    {"ckpt_part_write_and_read_back", ckpt_part_write_and_read_back},
    {"ckpt_writer_rejects_wrong_sizes", ckpt_writer_rejects_wrong_sizes},
    {"ckpt_verify_names_each_fault", ckpt_verify_names_each_fault},
    {"ckpt_dir_verify_latest_and_fallback", ckpt_dir_verify_latest_and_fallback},
    {"ckpt_latest_pointer_is_strict", ckpt_latest_pointer_is_strict},
    {"ckpt_retention_removes_uncommitted_leftovers", ckpt_retention_removes_uncommitted_leftovers},
    {"ckpt_list_and_retention", ckpt_list_and_retention},
    {NULL, NULL},
};

TT_CUNIT_MAIN("ckpt", tests)
