/* bench_ckpt_io: checkpoint part-writer throughput against the disk's
 * sequential write bandwidth, measured in the same run on the same
 * directory and size:
 *   direct   : O_DIRECT writes of 4 MiB aligned blocks, then fsync (what
 *              `dd oflag=direct bs=4M` measures);
 *   buffered : plain 4 MiB write()s, then fsync;
 *   spread   : the same O_DIRECT writes, each from the next
 *              4 MiB of a snapshot-sized buffer instead of the same
 *              4 MiB again (on a VM whose virtual disk copies guest
 *              memory, cold pages write measurably slower);
 *   part     : tt_ckpt writer (CRC-32C, O_DIRECT through tt_ckpt_sink),
 *              fed the trainer's 16 MiB pieces of a snapshot-sized buffer
 *              placed like the trainer's (congruent to the payload's file
 *              offset modulo 4 KiB, so written in place), through finish
 *              (fsync + rename + dir fsync) into a new file.
 * Each is run `rounds` times interleaved; the best of each is reported,
 * with the part writer as a share of the best baseline (target for the
 * full system: >= 80%). It then commits a one-part manifest and times
 * `tt_ckpt_verify` (re-read + CRC; page cache is likely warm) and CRC-32C
 * in memory. Usage: bench_ckpt_io [DIR] [MiB] [rounds] [--keep]; DIR
 * defaults to the current directory (use a real disk, not tmpfs). This is
 * a benchmark, not a test: it asserts nothing. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* O_DIRECT */
#endif
#include "tt_ckpt.h"
#include "tt_ckpt_dir.h"
#include "tt_clock.h"
#include "tt_crc32c.h"
#include "tt_status.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLOCK ((size_t)4 << 20)

typedef struct bench {
    char dir[4096];
    uint64_t bytes;
    uint8_t *buf; /* BLOCK bytes, 4 KiB aligned */
    uint8_t *src; /* `bytes` at the shard payload's offset modulo 4 KiB */
    void *src_mem;
} bench_t;

#define PIECE ((size_t)16 << 20) /* the trainer's writer call */

static double secs_since(uint64_t t0) {
    return (double)(tt_clock_mono_ns() - t0) / 1e9;
}

/* Writes b->bytes with write() in BLOCK pieces and fsyncs; seconds or -1.
 * spread: each piece from the next BLOCK of src's pages instead of the same
 * BLOCK again (what dd does). */
static double raw_write(const bench_t *b, int direct, int spread) {
    char path[4200];
    snprintf(path, sizeof(path), "%s/raw.bin", b->dir);
    uint64_t t0 = tt_clock_mono_ns();
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | (direct ? O_DIRECT : 0), 0644);
    if (fd < 0)
        return -1;
    double s = -1;
    uint64_t done = 0;
    while (done < b->bytes) {
        const uint8_t *p = spread ? (const uint8_t *)b->src_mem + done : b->buf;
        ssize_t w = write(fd, p, BLOCK);
        if (w != (ssize_t)BLOCK)
            break;
        done += BLOCK;
    }
    if (done == b->bytes && fsync(fd) == 0)
        s = secs_since(t0);
    close(fd);
    unlink(path);
    return s;
}

static double part_write(const bench_t *b, tt_ckpt_part_info_t *info) {
    tt_ckpt_range_t r = {0, b->bytes};
    tt_ckpt_part_opts_t o = {b->dir, "shard-0.bin", TT_CKPT_KIND_SHARD, &r, 1, 1, b->bytes, 0};
    tt_ckpt_writer_t *w = NULL;
    char err[512] = "", path[4200];
    /* The last round's part goes first, untimed: renaming over it would
     * free its blocks inside the timed rename (about 8 ms for 44 MiB on
     * ext4), a cost a checkpoint into a new directory never pays. */
    snprintf(path, sizeof(path), "%s/shard-0.bin", b->dir);
    unlink(path);
    uint64_t t0 = tt_clock_mono_ns();
    int rc = tt_ckpt_writer_create(&w, &o, err, sizeof(err));
    for (uint64_t off = 0; rc == TT_OK && off < b->bytes; off += PIECE)
        rc = tt_ckpt_writer_write(w, b->src + off,
                                  b->bytes - off < PIECE ? (size_t)(b->bytes - off) : PIECE);
    if (rc == TT_OK)
        rc = tt_ckpt_writer_finish(w, info);
    double s = secs_since(t0);
    if (rc != TT_OK)
        fprintf(stderr, "bench_ckpt_io: %s\n", w ? tt_ckpt_writer_error(w) : err);
    tt_ckpt_writer_destroy(&w);
    return rc == TT_OK ? s : -1;
}

static int commit(const bench_t *b, const tt_ckpt_part_info_t *info) {
    static const uint32_t kinds[] = {TT_STATE_PARAMS};
    tt_manifest_t m = {.version = TT_MANIFEST_VERSION, .step = 1, .nparts = 1, .ntensors = 1};
    tt_ckpt_range_t r = {0, b->bytes};
    tt_mf_part_t p = {.file = "shard-0.bin",
                      .kind = info->kind,
                      .size = info->size,
                      .crc32c = info->crc32c,
                      .planes = 1,
                      .nranges = 1,
                      .ranges = &r};
    tt_mf_tensor_t t = {.name = "flat", .ndim = 1, .shape = {b->bytes / 4}, .dtype = TT_DTYPE_F32};
    snprintf(m.id, sizeof(m.id), "bench");
    snprintf(m.job_id, sizeof(m.job_id), "bench");
    m.parts = &p;
    m.tensors = &t;
    char err[512] = "";
    int rc = tt_manifest_fill_extents(&m, kinds, 1, err, sizeof(err));
    if (rc == TT_OK)
        rc = tt_manifest_store(b->dir, &m, err, sizeof(err));
    if (rc != TT_OK)
        fprintf(stderr, "bench_ckpt_io: manifest: %s\n", err);
    for (uint32_t s = 0; s < t.nstates; s++)
        free(t.states[s].extents);
    free(t.states);
    return rc;
}

static double mbs(uint64_t bytes, double s) {
    return s > 0 ? (double)bytes / s / 1e6 : 0;
}

static void row(const char *what, uint64_t bytes, double s, double ref) {
    if (s <= 0) {
        printf("| %-28s | %10s | %9s | %8s |\n", what, "n/a", "-", "-");
        return;
    }
    if (ref > 0)
        printf("| %-28s | %10.1f | %9.3f | %7.1f%% |\n", what, mbs(bytes, s), s,
               100.0 * mbs(bytes, s) / ref);
    else
        printf("| %-28s | %10.1f | %9.3f | %8s |\n", what, mbs(bytes, s), s, "-");
}

static double best(double a, double b) {
    return a <= 0 ? b : (b <= 0 || a < b ? a : b);
}

static void run(bench_t *b, int rounds) {
    double dio = -1, buf = -1, spread = -1, part = -1;
    tt_ckpt_part_info_t info = {0};
    for (int i = 0; i < rounds; i++) {
        dio = best(dio, raw_write(b, 1, 0));
        buf = best(buf, raw_write(b, 0, 0));
        spread = best(spread, raw_write(b, 1, 1));
        part = best(part, part_write(b, &info));
    }
    double ref = mbs(b->bytes, best(dio, buf) > 0 ? best(dio, buf) : 0);
    printf("\n%llu MiB in %s, best of %d, crc32c via %s\n\n", (unsigned long long)(b->bytes >> 20),
           b->dir, rounds, tt_crc32c_impl_name());
    printf("| %-28s | %10s | %9s | %8s |\n", "write path", "MB/s", "seconds", "of disk");
    printf("|------------------------------|------------|-----------|----------|\n");
    row("disk: O_DIRECT 4 MiB + fsync", b->bytes, dio, ref);
    row("disk: buffered 4 MiB + fsync", b->bytes, buf, ref);
    row("disk: O_DIRECT, spread memory", b->bytes, spread, ref);
    row("tt_ckpt part writer", b->bytes, part, ref);
    if (part > 0 && commit(b, &info) == TT_OK) {
        tt_ckpt_report_t rep;
        uint64_t t0 = tt_clock_mono_ns();
        int rc = tt_ckpt_verify(b->dir, &rep);
        row(rc == TT_OK ? "verify (re-read + CRC)" : "verify FAILED", b->bytes, secs_since(t0), 0);
        tt_ckpt_report_free(&rep);
    }
    uint64_t t0 = tt_clock_mono_ns();
    uint32_t c = 0;
    for (uint64_t done = 0; done < b->bytes; done += BLOCK)
        c = tt_crc32c(c, b->buf, BLOCK);
    row("crc32c in memory", b->bytes, secs_since(t0), 0);
    printf("\n(crc 0x%08x)\n", c);
}

int main(int argc, char **argv) {
    bench_t b = {.bytes = (uint64_t)256 << 20};
    int rounds = 2, keep = 0, npos = 0;
    const char *parent = ".";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--keep") == 0)
            keep = 1;
        else if (npos++ == 0)
            parent = argv[i];
        else if (npos == 2)
            b.bytes = (uint64_t)strtoull(argv[i], NULL, 10) << 20;
        else
            rounds = atoi(argv[i]);
    }
    b.bytes = (b.bytes + BLOCK - 1) / BLOCK * BLOCK;
    if (b.bytes == 0 || rounds < 1 || posix_memalign((void **)&b.buf, 4096, BLOCK) != 0)
        return 2;
    size_t skew = (size_t)(tt_ckpt_payload_offset(1) % 4096);
    if (posix_memalign(&b.src_mem, 4096, b.bytes + skew) != 0)
        return 2;
    b.src = (uint8_t *)b.src_mem + skew;
    for (size_t i = 0; i < BLOCK; i++)
        b.buf[i] = (uint8_t)(i * 2654435761u >> 11);
    for (uint64_t i = 0; i < b.bytes + skew; i++) /* faulted in, like a live snapshot */
        ((uint8_t *)b.src_mem)[i] = (uint8_t)(i * 2654435761u >> 11);
    snprintf(b.dir, sizeof(b.dir), "%s/bench-ckpt-XXXXXX", parent);
    if (mkdtemp(b.dir) == NULL) {
        fprintf(stderr, "bench_ckpt_io: cannot create a directory in %s: %s\n", parent,
                strerror(errno));
        return 1;
    }
    run(&b, rounds);
    if (keep) {
        printf("kept %s\n", b.dir);
    } else {
        char path[4200];
        snprintf(path, sizeof(path), "%s/shard-0.bin", b.dir);
        unlink(path);
        snprintf(path, sizeof(path), "%s/MANIFEST", b.dir);
        unlink(path);
        rmdir(b.dir);
    }
    free(b.buf);
    free(b.src_mem);
    return 0;
}
