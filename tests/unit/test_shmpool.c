/* Unit tests of tt_shmpool: the offer's wire form, a pool mapped a second
 * time from its offer (through /proc, as a neighbour does) sharing bytes
 * and slot flags with its creator, the writer taking the lowest free slot
 * and finding none while every slot is being read, and the offers a
 * neighbour must refuse: another token or geometry, a process that no
 * longer exists, a descriptor that is not the pool; the note queue (order,
 * a full queue, wrap-around) and its doorbell waking a reader in another
 * process. */
#include "tt_cunit.h"
#include "tt_shmpool.h"
#include "tt_status.h"

#include <fcntl.h>
#include <stdint.h>
#include <time.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SLOT 4096

static void shmpool_offer_round_trip(void) {
    tt_shmpool_offer_t o = {.pid = 4242,
                            .fd = 17,
                            .nslots = 32,
                            .slot_bytes = (uint64_t)1 << 33,
                            .token = 0x0123456789abcdefull},
                       back;
    uint8_t b[TT_SHMPOOL_OFFER_SIZE];
    tt_shmpool_offer_encode(&o, b);
    CU_ASSERT_EQUAL(tt_shmpool_offer_decode(b, sizeof(b), &back), TT_OK);
    CU_ASSERT(back.pid == o.pid && back.fd == o.fd && back.nslots == o.nslots &&
              back.slot_bytes == o.slot_bytes && back.token == o.token);
    CU_ASSERT_EQUAL(tt_shmpool_offer_decode(b, sizeof(b) - 1, &back), TT_EPROTO);
    CU_ASSERT_EQUAL(tt_shmpool_offer_decode(NULL, sizeof(b), &back), TT_EPROTO);
}

static void shmpool_bad_geometry(void) {
    tt_shmpool_t *p = NULL;
    char err[256] = "";
    CU_ASSERT_EQUAL(tt_shmpool_create(&p, 0, SLOT, err, sizeof(err)), TT_EINVAL);
    CU_ASSERT_EQUAL(tt_shmpool_create(&p, TT_SHMPOOL_MAX_SLOTS + 1, SLOT, err, sizeof(err)),
                    TT_EINVAL);
    CU_ASSERT_EQUAL(tt_shmpool_create(&p, 4, 100, err, sizeof(err)), TT_EINVAL);
    CU_ASSERT_PTR_NULL(p);
    CU_ASSERT(strstr(err, "geometry") != NULL);
}

/* The neighbour's mapping sees what the writer published, and the
 * writer sees the neighbour's release. */
static void shmpool_map_shares_slots(void) {
    tt_shmpool_t *w = NULL, *r = NULL;
    tt_shmpool_offer_t o;
    char err[256] = "";
    CU_ASSERT_EQUAL_FATAL(tt_shmpool_create(&w, 4, SLOT, err, sizeof(err)), TT_OK);
    tt_shmpool_offer(w, &o);
    CU_ASSERT_EQUAL(o.pid, getpid());
    CU_ASSERT(o.nslots == 4 && o.slot_bytes == SLOT && o.token != 0);
    CU_ASSERT_EQUAL_FATAL(tt_shmpool_map(&r, &o, err, sizeof(err)), TT_OK);
    CU_ASSERT(tt_shmpool_is(r, &o));
    CU_ASSERT(tt_shmpool_slot(w, 0) != tt_shmpool_slot(r, 0)); /* two mappings */
    int s = tt_shmpool_acquire(w);
    CU_ASSERT_EQUAL(s, 0);
    CU_ASSERT_FALSE(tt_shmpool_ready(r, s));
    memset(tt_shmpool_slot(w, s), 0xab, SLOT);
    tt_shmpool_publish(w, s);
    CU_ASSERT_TRUE(tt_shmpool_ready(r, s));
    CU_ASSERT_EQUAL(((unsigned char *)tt_shmpool_slot(r, s))[SLOT - 1], 0xab);
    CU_ASSERT_EQUAL(tt_shmpool_acquire(w), 1); /* slot 0 is being read */
    tt_shmpool_release(r, s);
    CU_ASSERT_EQUAL(tt_shmpool_acquire(w), 0); /* the lowest free one again */
    CU_ASSERT_FALSE(tt_shmpool_ready(r, -1));
    CU_ASSERT_FALSE(tt_shmpool_ready(r, 4));
    tt_shmpool_destroy(&r);
    tt_shmpool_destroy(&w);
    CU_ASSERT_PTR_NULL(w);
    tt_shmpool_destroy(&w); /* NULL is fine */
}

static void shmpool_full_pool_has_no_slot(void) {
    tt_shmpool_t *w = NULL;
    char err[256] = "";
    CU_ASSERT_EQUAL_FATAL(tt_shmpool_create(&w, 3, SLOT, err, sizeof(err)), TT_OK);
    for (int i = 0; i < 3; i++) {
        int s = tt_shmpool_acquire(w);
        CU_ASSERT_EQUAL(s, i);
        tt_shmpool_publish(w, s);
    }
    CU_ASSERT_EQUAL(tt_shmpool_acquire(w), -1);
    tt_shmpool_release(w, 1);
    CU_ASSERT_EQUAL(tt_shmpool_acquire(w), 1);
    tt_shmpool_destroy(&w);
}

/* What a rank on another host or in another container would see. */
static void shmpool_refuses_what_is_not_the_offer(void) {
    tt_shmpool_t *w = NULL, *r = NULL;
    tt_shmpool_offer_t o, bad;
    char err[256] = "";
    CU_ASSERT_EQUAL_FATAL(tt_shmpool_create(&w, 2, SLOT, err, sizeof(err)), TT_OK);
    tt_shmpool_offer(w, &o);
    bad = o;
    bad.token ^= 1; /* a pid reused by another process's file */
    CU_ASSERT_EQUAL(tt_shmpool_map(&r, &bad, err, sizeof(err)), TT_ENODEV);
    CU_ASSERT(strstr(err, "token") != NULL);
    bad = o;
    bad.nslots = 3;
    CU_ASSERT_EQUAL(tt_shmpool_map(&r, &bad, err, sizeof(err)), TT_ENODEV);
    bad = o;
    bad.nslots = 0;
    CU_ASSERT_EQUAL(tt_shmpool_map(&r, &bad, err, sizeof(err)), TT_ENODEV);
    int fd = open("/dev/null", O_RDONLY);
    bad = o;
    bad.fd = fd; /* a descriptor of this process that is no pool: never opened */
    CU_ASSERT_EQUAL(tt_shmpool_map(&r, &bad, err, sizeof(err)), TT_ENODEV);
    CU_ASSERT(strstr(err, "not a tether ring pool") != NULL);
    close(fd);
    pid_t child = fork();
    if (child == 0)
        _exit(0);
    waitpid(child, NULL, 0);
    bad = o;
    bad.pid = child; /* gone: nothing under /proc */
    CU_ASSERT_EQUAL(tt_shmpool_map(&r, &bad, err, sizeof(err)), TT_ENODEV);
    CU_ASSERT(strstr(err, "No such file") != NULL);
    CU_ASSERT_PTR_NULL(r);
    tt_shmpool_destroy(&w);
}

static tt_shmpool_note_t note_of(uint64_t len) {
    tt_shmpool_note_t n;
    memset(&n, 0, sizeof(n));
    n.len = len;
    n.side = -(int64_t)len;
    n.slot = (int32_t)(len % 3) - 1;
    n.hdr[0] = (uint8_t)len;
    n.hdr[63] = (uint8_t)(len >> 8);
    return n;
}

/* Notes come out of the neighbour's mapping in order and whole; a full
 * queue refuses until the reader takes one; indices wrap. */
static void shmpool_notes_in_order(void) {
    tt_shmpool_t *w = NULL, *r = NULL;
    tt_shmpool_offer_t o;
    tt_shmpool_note_t n;
    char err[256] = "";
    CU_ASSERT_EQUAL_FATAL(tt_shmpool_create(&w, 2, SLOT, err, sizeof(err)), TT_OK);
    tt_shmpool_offer(w, &o);
    CU_ASSERT_EQUAL_FATAL(tt_shmpool_map(&r, &o, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL(tt_shmpool_peek(r, &n), 0);
    uint64_t next = 0, taken = 0;
    for (int round = 0; round < 3; round++) {
        size_t posted = 0;
        for (;;) {
            tt_shmpool_note_t in = note_of(next);
            if (!tt_shmpool_post(w, &in))
                break;
            next++;
            posted++;
        }
        CU_ASSERT(posted > 0);
        CU_ASSERT_EQUAL(next - taken, TT_SHMPOOL_NOTES); /* full */
        for (size_t k = 0; k < TT_SHMPOOL_NOTES / 2 + 7; k++) {
            tt_shmpool_note_t want = note_of(taken);
            CU_ASSERT_EQUAL_FATAL(tt_shmpool_peek(r, &n), 1);
            CU_ASSERT(memcmp(&n, &want, sizeof(n)) == 0);
            tt_shmpool_pop(r);
            taken++;
        }
    }
    while (tt_shmpool_peek(r, &n) == 1) {
        tt_shmpool_note_t want = note_of(taken++);
        CU_ASSERT(memcmp(&n, &want, sizeof(n)) == 0);
        tt_shmpool_pop(r);
    }
    CU_ASSERT_EQUAL(taken, next);
    tt_shmpool_wait(r, 20); /* nothing posted: returns after the timeout */
    CU_ASSERT_EQUAL(tt_shmpool_peek(r, &n), 0);
    tt_shmpool_destroy(&r);
    tt_shmpool_destroy(&w);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A reader in another process asleep on the doorbell wakes when a note is
 * posted, not when its 10 s timeout ends. */
static void shmpool_doorbell_wakes_another_process(void) {
    tt_shmpool_t *w = NULL;
    tt_shmpool_offer_t o;
    char err[256] = "";
    CU_ASSERT_EQUAL_FATAL(tt_shmpool_create(&w, 2, SLOT, err, sizeof(err)), TT_OK);
    tt_shmpool_offer(w, &o);
    pid_t child = fork();
    if (child == 0) {
        tt_shmpool_t *r = NULL;
        tt_shmpool_note_t n;
        if (tt_shmpool_map(&r, &o, err, sizeof(err)) != TT_OK)
            _exit(2);
        tt_shmpool_wait(r, 10000);
        _exit(tt_shmpool_peek(r, &n) == 1 && n.len == 42 ? 0 : 3);
    }
    CU_ASSERT_FATAL(child > 0);
    struct timespec pause = {0, 100 * 1000 * 1000}; /* let the child fall asleep */
    nanosleep(&pause, NULL);
    double t0 = now_s();
    tt_shmpool_note_t n = note_of(42);
    CU_ASSERT(tt_shmpool_post(w, &n));
    int st = 0;
    waitpid(child, &st, 0);
    CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CU_ASSERT(now_s() - t0 < 5.0);
    tt_shmpool_destroy(&w);
}

static const tt_cunit_test_t tests[] = {
    {"shmpool_offer_round_trip", shmpool_offer_round_trip},
    {"shmpool_bad_geometry", shmpool_bad_geometry},
    {"shmpool_map_shares_slots", shmpool_map_shares_slots},
    {"shmpool_full_pool_has_no_slot", shmpool_full_pool_has_no_slot},
    {"shmpool_refuses_what_is_not_the_offer", shmpool_refuses_what_is_not_the_offer},
    {"shmpool_notes_in_order", shmpool_notes_in_order},
    {"shmpool_doorbell_wakes_another_process", shmpool_doorbell_wakes_another_process},
    {NULL, NULL},
};

TT_CUNIT_MAIN("shmpool", tests)
