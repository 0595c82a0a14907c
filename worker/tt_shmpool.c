/* tt_shmpool: shared-memory slots between two ring neighbours on one host
 * (why and the rules: tt_shmpool.h). Layout of the memfd: a header of
 * HDR_BYTES (magic, token, geometry, then one flag per slot, each on its
 * own cache line so the writer filling one slot and the reader releasing
 * another do not share a line; the queue's tail, written by the writer,
 * and its head and the reader's "asleep" flag, on two more lines; the
 * notes), then the slots. The doorbell is a futex on the tail, shared
 * (not FUTEX_PRIVATE) because the two ends are different processes
 * mapping the same memfd. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create */
#endif
#include "tt_shmpool.h"

#include "tt_status.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <linux/futex.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAGIC 0x324c4f50484d5354ull /* "TSMHPOL2": slots and notes */
#define MEMFD "tether-ring"
/* What /proc/<pid>/fd/<fd> of such a memfd reads as. */
#define MEMFD_LINK "/memfd:" MEMFD " "
#define LINE       64
#define NOTE_BYTES 128 /* two lines per note */
#define TAIL_AT    ((size_t)LINE * (1 + TT_SHMPOOL_MAX_SLOTS))
#define HEAD_AT    (TAIL_AT + LINE)
#define NOTES_AT   (HEAD_AT + LINE)
#define HDR_BYTES  (NOTES_AT + (size_t)TT_SHMPOOL_NOTES * NOTE_BYTES)

_Static_assert(sizeof(tt_shmpool_note_t) <= NOTE_BYTES, "a note must fit its two lines");

typedef struct hdr {
    uint64_t magic, token, slot_bytes;
    uint32_t nslots;
} hdr_t;

struct tt_shmpool {
    char *base; /* the whole mapping */
    size_t bytes;
    int fd; /* the memfd of the creator; -1 for a mapped neighbour's pool */
    uint32_t nslots;
    size_t slot_bytes;
    uint64_t token;
};

static atomic_uint *flag(const tt_shmpool_t *p, int slot) {
    return (atomic_uint *)(void *)(p->base + LINE * (size_t)(1 + slot));
}

static atomic_uint *tail(const tt_shmpool_t *p) {
    return (atomic_uint *)(void *)(p->base + TAIL_AT);
}

static atomic_uint *head(const tt_shmpool_t *p) {
    return (atomic_uint *)(void *)(p->base + HEAD_AT);
}

static atomic_uint *asleep(const tt_shmpool_t *p) {
    return (atomic_uint *)(void *)(p->base + HEAD_AT + sizeof(atomic_uint));
}

static char *note_at(const tt_shmpool_t *p, unsigned i) {
    return p->base + NOTES_AT + (size_t)(i % TT_SHMPOOL_NOTES) * NOTE_BYTES;
}

static size_t pool_bytes(uint32_t nslots, size_t slot_bytes) {
    return HDR_BYTES + (size_t)nslots * slot_bytes;
}

static uint64_t random_token(void) {
    uint64_t t = 0;
    if (getrandom(&t, sizeof(t), 0) != (ssize_t)sizeof(t) || t == 0)
        t = ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&t ^ 0x9e3779b97f4a7c15ull;
    return t;
}

int tt_shmpool_create(tt_shmpool_t **out, uint32_t nslots, size_t slot_bytes, char *err,
                      size_t errlen) {
    *out = NULL;
    if (nslots == 0 || nslots > TT_SHMPOOL_MAX_SLOTS || slot_bytes == 0 || slot_bytes % LINE != 0) {
        snprintf(err, errlen, "shared-memory pool: bad geometry (%u x %zu)", nslots, slot_bytes);
        return TT_EINVAL;
    }
    tt_shmpool_t *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return TT_ENOMEM;
    p->bytes = pool_bytes(nslots, slot_bytes);
    p->nslots = nslots;
    p->slot_bytes = slot_bytes;
    p->token = random_token();
    p->base = MAP_FAILED;
    const char *what = "memfd_create";
    p->fd = memfd_create(MEMFD, MFD_CLOEXEC);
    if (p->fd >= 0 && (what = "ftruncate", ftruncate(p->fd, (off_t)p->bytes)) == 0) {
        what = "mmap";
        p->base = mmap(NULL, p->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, p->fd, 0);
    }
    if (p->base == MAP_FAILED) {
        int e = errno;
        snprintf(err, errlen, "shared-memory pool of %zu bytes: %s: %s", p->bytes, what,
                 strerror(e));
        p->base = NULL;
        tt_shmpool_destroy(&p);
        return e == ENOMEM ? TT_ENOMEM : TT_ESYS;
    }
    hdr_t h = {MAGIC, p->token, slot_bytes, nslots};
    memcpy(p->base, &h, sizeof(h));
    for (uint32_t i = 0; i < nslots; i++)
        atomic_init(flag(p, (int)i), 0);
    atomic_init(tail(p), 0);
    atomic_init(head(p), 0);
    atomic_init(asleep(p), 0);
    *out = p;
    return TT_OK;
}

static int map_fail(tt_shmpool_t *p, const tt_shmpool_offer_t *o, const char *why, char *err,
                    size_t errlen) {
    snprintf(err, errlen, "pool of pid %d fd %d: %s", (int)o->pid, (int)o->fd, why);
    tt_shmpool_destroy(&p);
    return TT_ENODEV;
}

int tt_shmpool_map(tt_shmpool_t **out, const tt_shmpool_offer_t *o, char *err, size_t errlen) {
    char path[64];
    struct stat st;
    *out = NULL;
    if (o->nslots == 0 || o->nslots > TT_SHMPOOL_MAX_SLOTS || o->slot_bytes == 0 ||
        o->slot_bytes > ((uint64_t)1 << 34)) {
        snprintf(err, errlen, "pool offer with bad geometry");
        return TT_ENODEV;
    }
    tt_shmpool_t *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return TT_ENOMEM;
    p->fd = -1;
    p->nslots = o->nslots;
    p->slot_bytes = (size_t)o->slot_bytes;
    p->bytes = pool_bytes(o->nslots, p->slot_bytes);
    p->token = o->token;
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)o->pid, (int)o->fd);
    /* Under another pid namespace the pid may be some other process: open
     * nothing that is not one of our memfds (opening a device or a tty has
     * effects of its own); the token check then rules out a stranger's. */
    char link[64] = "";
    ssize_t n = readlink(path, link, sizeof(link) - 1);
    if (n < 0)
        return map_fail(p, o, strerror(errno), err, errlen);
    if (strncmp(link, MEMFD_LINK, strlen(MEMFD_LINK)) != 0)
        return map_fail(p, o, "not a tether ring pool", err, errlen);
    int fd = open(path, O_RDWR | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return map_fail(p, o, strerror(errno), err, errlen);
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_size != p->bytes) {
        close(fd);
        return map_fail(p, o, "not the offered size", err, errlen);
    }
    void *m = mmap(NULL, p->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd); /* the mapping keeps the memory */
    if (m == MAP_FAILED)
        return map_fail(p, o, strerror(errno), err, errlen);
    p->base = m;
    hdr_t h;
    memcpy(&h, p->base, sizeof(h));
    if (h.magic != MAGIC || h.token != o->token || h.nslots != o->nslots ||
        h.slot_bytes != o->slot_bytes)
        return map_fail(p, o, "not the offered pool (token or geometry differ)", err, errlen);
    *out = p;
    return TT_OK;
}

void tt_shmpool_destroy(tt_shmpool_t **pp) {
    if (pp == NULL || *pp == NULL)
        return;
    tt_shmpool_t *p = *pp;
    if (p->base != NULL)
        munmap(p->base, p->bytes);
    if (p->fd >= 0)
        close(p->fd);
    free(p);
    *pp = NULL;
}

void tt_shmpool_offer(const tt_shmpool_t *p, tt_shmpool_offer_t *out) {
    out->pid = (int32_t)getpid();
    out->fd = p->fd;
    out->nslots = p->nslots;
    out->slot_bytes = p->slot_bytes;
    out->token = p->token;
}

int tt_shmpool_is(const tt_shmpool_t *p, const tt_shmpool_offer_t *o) {
    return p != NULL && p->token == o->token && p->nslots == o->nslots &&
           p->slot_bytes == o->slot_bytes;
}

/* Native byte order: an offer is only ever read on the host that made it
 * (elsewhere it cannot be mapped anyway). */
void tt_shmpool_offer_encode(const tt_shmpool_offer_t *o, uint8_t out[TT_SHMPOOL_OFFER_SIZE]) {
    uint32_t pad = 0;
    memcpy(out, &o->pid, 4);
    memcpy(out + 4, &o->fd, 4);
    memcpy(out + 8, &o->nslots, 4);
    memcpy(out + 12, &pad, 4);
    memcpy(out + 16, &o->slot_bytes, 8);
    memcpy(out + 24, &o->token, 8);
}

int tt_shmpool_offer_decode(const void *buf, size_t len, tt_shmpool_offer_t *out) {
    const uint8_t *b = buf;
    if (buf == NULL || len != TT_SHMPOOL_OFFER_SIZE)
        return TT_EPROTO;
    memcpy(&out->pid, b, 4);
    memcpy(&out->fd, b + 4, 4);
    memcpy(&out->nslots, b + 8, 4);
    memcpy(&out->slot_bytes, b + 16, 8);
    memcpy(&out->token, b + 24, 8);
    return TT_OK;
}

size_t tt_shmpool_slot_bytes(const tt_shmpool_t *p) {
    return p->slot_bytes;
}

uint32_t tt_shmpool_nslots(const tt_shmpool_t *p) {
    return p->nslots;
}

int tt_shmpool_acquire(tt_shmpool_t *p) {
    for (uint32_t s = 0; s < p->nslots; s++)
        if (atomic_load_explicit(flag(p, (int)s), memory_order_acquire) == 0)
            return (int)s;
    return -1;
}

void *tt_shmpool_slot(tt_shmpool_t *p, int slot) {
    return p->base + HDR_BYTES + (size_t)slot * p->slot_bytes;
}

void tt_shmpool_publish(tt_shmpool_t *p, int slot) {
    atomic_store_explicit(flag(p, slot), 1, memory_order_release);
}

int tt_shmpool_ready(tt_shmpool_t *p, int slot) {
    if (slot < 0 || (uint32_t)slot >= p->nslots)
        return 0;
    return atomic_load_explicit(flag(p, slot), memory_order_acquire) == 1;
}

void tt_shmpool_release(tt_shmpool_t *p, int slot) {
    atomic_store_explicit(flag(p, slot), 0, memory_order_release);
}

/* The "asleep" flag and the tail form a Dekker pair (both sequentially
 * consistent): either the writer sees the reader asleep and wakes it, or
 * the reader sees the new tail before it sleeps; FUTEX_WAIT's own check of
 * the tail closes the gap between the two. */
int tt_shmpool_post(tt_shmpool_t *p, const tt_shmpool_note_t *n) {
    unsigned t = atomic_load_explicit(tail(p), memory_order_relaxed);
    if (t - atomic_load_explicit(head(p), memory_order_acquire) >= TT_SHMPOOL_NOTES)
        return 0;
    memcpy(note_at(p, t), n, sizeof(*n));
    atomic_store_explicit(tail(p), t + 1, memory_order_seq_cst);
    if (atomic_load_explicit(asleep(p), memory_order_seq_cst))
        syscall(SYS_futex, (unsigned *)(void *)tail(p), FUTEX_WAKE, 1, NULL, NULL, 0);
    return 1;
}

int tt_shmpool_peek(tt_shmpool_t *p, tt_shmpool_note_t *n) {
    unsigned h = atomic_load_explicit(head(p), memory_order_relaxed);
    unsigned t = atomic_load_explicit(tail(p), memory_order_acquire);
    if (t == h)
        return 0;
    if (t - h > TT_SHMPOOL_NOTES)
        return -1;
    memcpy(n, note_at(p, h), sizeof(*n));
    return 1;
}

void tt_shmpool_pop(tt_shmpool_t *p) {
    unsigned h = atomic_load_explicit(head(p), memory_order_relaxed);
    atomic_store_explicit(head(p), h + 1, memory_order_release);
}

void tt_shmpool_wait(tt_shmpool_t *p, int timeout_ms) {
    unsigned h = atomic_load_explicit(head(p), memory_order_relaxed);
    if (timeout_ms <= 0)
        return;
    atomic_store_explicit(asleep(p), 1, memory_order_seq_cst);
    if (atomic_load_explicit(tail(p), memory_order_seq_cst) == h) {
        struct timespec ts = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000L};
        syscall(SYS_futex, (unsigned *)(void *)tail(p), FUTEX_WAIT, h, &ts, NULL, 0);
    }
    atomic_store_explicit(asleep(p), 0, memory_order_relaxed);
}
