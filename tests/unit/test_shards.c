/* Unit tests of the coordinator's shard registry (server/coordinator/
 * shards): registration and liveness by heartbeat age, tensor-table
 * declaration (idempotent; a different table names the difference), the
 * placement recomputed when the live set changes, and the report of a
 * placement that still uses a dead shard. Injected clock. */
#include "shards.h"
#include "tt_cunit.h"
#include "tt_status.h"

#include <stdio.h>
#include <string.h>

static void beat(tt_shards_t *s, const char *id, uint64_t now) {
    tt_shard_info_t hb;
    memset(&hb, 0, sizeof(hb));
    snprintf(hb.id, sizeof(hb.id), "%s", id);
    snprintf(hb.endpoint, sizeof(hb.endpoint), "tcp://127.0.0.1:%d", 7700 + id[1]);
    hb.incarnation = 1;
    CU_ASSERT_EQUAL(tt_shards_heartbeat(s, &hb, now), TT_OK);
}

static void shards_liveness_by_heartbeat_age(void) {
    tt_shards_t *s = NULL;
    CU_ASSERT_EQUAL_FATAL(tt_shards_create(&s, 1000), TT_OK);
    beat(s, "s0", 100);
    beat(s, "s1", 500);
    CU_ASSERT_EQUAL(tt_shards_count(s), 2);
    CU_ASSERT(tt_shards_alive(s, 0, 1099));
    CU_ASSERT_FALSE(tt_shards_alive(s, 0, 1100));
    CU_ASSERT(tt_shards_alive(s, 1, 1100));
    beat(s, "s0", 1200); /* a refresh, not a second entry */
    CU_ASSERT_EQUAL(tt_shards_count(s), 2);
    CU_ASSERT(tt_shards_alive(s, 0, 1300));
    CU_ASSERT_STRING_EQUAL(tt_shards_endpoint(s, "s1"), "tcp://127.0.0.1:7749");
    CU_ASSERT_PTR_NULL(tt_shards_endpoint(s, "s9"));
    tt_shard_info_t bad;
    memset(&bad, 0, sizeof(bad));
    CU_ASSERT_EQUAL(tt_shards_heartbeat(s, &bad, 0), TT_EINVAL);
    tt_shards_destroy(&s);
    CU_ASSERT_PTR_NULL(s);
}

/* The coordinator stood still from 6000 to 14000: s1, dead since 5000,
 * stays dead; s0, alive when the stall began, is not declared dead for
 * heartbeats the stall kept it from reading. */
static void shards_stall_of_the_coordinator_does_not_count(void) {
    tt_shards_t *s = NULL;
    CU_ASSERT_EQUAL_FATAL(tt_shards_create(&s, 5000), TT_OK);
    beat(s, "s0", 5500);
    beat(s, "s1", 0);
    CU_ASSERT_FALSE(tt_shards_alive(s, 0, 14000)); /* judged on the clock alone */
    tt_shards_forgive(s, 8000, 14000);
    CU_ASSERT(tt_shards_alive(s, 0, 14000));
    CU_ASSERT(tt_shards_alive(s, 0, 18499));
    CU_ASSERT_FALSE(tt_shards_alive(s, 0, 18500)); /* 500 ms before + 5000 after */
    CU_ASSERT_FALSE(tt_shards_alive(s, 1, 14000));
    CU_ASSERT_FALSE(tt_shards_alive(s, 1, 6000));
    CU_ASSERT_EQUAL(tt_shards_at(s, 1)->last_seen_ms, 0);
    tt_shards_forgive(NULL, 1, 1); /* no registry yet */
    tt_shards_destroy(&s);
}

static void shards_declaration_conflict_names_difference(void) {
    tt_shards_t *s = NULL;
    CU_ASSERT_EQUAL_FATAL(tt_shards_create(&s, 0), TT_OK);
    tt_tensor_decl_t t[] = {{"w1", 1000}, {"b1", 10}};
    tt_tensor_decl_t other[] = {{"w1", 1000}, {"b1", 11}};
    char err[256] = "";
    CU_ASSERT_EQUAL(tt_shards_declare(s, "job", t, 2, 0, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL(tt_shards_declare(s, "job", t, 2, 0, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL(tt_shards_declare(s, "job", other, 2, 0, err, sizeof(err)), TT_ECONFLICT);
    CU_ASSERT(strstr(err, "tensor 1 was declared as 'b1' x 10, now 'b1' x 11") != NULL);
    CU_ASSERT_EQUAL(tt_shards_declare(s, "job", t, 1, 0, err, sizeof(err)), TT_ECONFLICT);
    CU_ASSERT(strstr(err, "2 tensors, now 1") != NULL);
    CU_ASSERT_EQUAL(tt_shards_declare(s, "job", t, 2, 1 << 20, err, sizeof(err)), TT_ECONFLICT);
    CU_ASSERT(strstr(err, "chunks") != NULL);
    CU_ASSERT_EQUAL(tt_shards_declare(s, "", t, 2, 0, err, sizeof(err)), TT_EINVAL);
    tt_shards_destroy(&s);
}

static void shards_placement_follows_live_set(void) {
    tt_shards_t *s = NULL;
    CU_ASSERT_EQUAL_FATAL(tt_shards_create(&s, 1000), TT_OK);
    const tt_placement_t *p = NULL;
    char err[256] = "";
    tt_tensor_decl_t t[] = {{"x", 10 * 256}}; /* 10 chunks of 1 KiB */
    CU_ASSERT_EQUAL(tt_shards_placement(s, "job", 0, &p, err, sizeof(err)), TT_ENOTFOUND);
    CU_ASSERT(strstr(err, "has not declared") != NULL);
    CU_ASSERT_EQUAL(tt_shards_declare(s, "job", t, 1, 1024, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL(tt_shards_placement(s, "job", 0, &p, err, sizeof(err)), TT_ENOTFOUND);
    CU_ASSERT(strstr(err, "no live shard") != NULL);
    beat(s, "s0", 0);
    beat(s, "s1", 0);
    CU_ASSERT_EQUAL_FATAL(tt_shards_placement(s, "job", 10, &p, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL(p->nshards, 2);
    CU_ASSERT_EQUAL(p->nchunks, 10);
    uint64_t v = p->version;
    beat(s, "s0", 900);
    CU_ASSERT_EQUAL_FATAL(tt_shards_placement(s, "job", 950, &p, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL(p->version, v); /* nothing changed */
    /* s1 falls silent: at 1000 it is dead and its chunks move to s0 */
    CU_ASSERT_EQUAL_FATAL(tt_shards_placement(s, "job", 1000, &p, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL(p->nshards, 1);
    CU_ASSERT_EQUAL(p->version, v + 1);
    CU_ASSERT_STRING_EQUAL(p->shard_ids[0], "s0");
    tt_shards_destroy(&s);
}

/* tt_shards_wait_for: the first placement waits for that many live
 * shards (EAGAIN until then); once placed, a lost shard does not make the
 * job wait: its chunks move to the survivors. */
static void shards_first_placement_waits_for_min(void) {
    tt_shards_t *s = NULL;
    CU_ASSERT_EQUAL_FATAL(tt_shards_create(&s, 1000), TT_OK);
    const tt_placement_t *p = NULL;
    char err[256] = "";
    tt_tensor_decl_t t[] = {{"x", 10 * 256}};
    CU_ASSERT_EQUAL(tt_shards_declare(s, "job", t, 1, 1024, err, sizeof(err)), TT_OK);
    tt_shards_wait_for(s, "job", 2);
    tt_shards_wait_for(s, "job", 1); /* the largest asked for counts */
    tt_shards_wait_for(s, "unknown", 5);
    beat(s, "s0", 0);
    CU_ASSERT_EQUAL(tt_shards_live_count(s, 10), 1);
    CU_ASSERT_EQUAL(tt_shards_placement(s, "job", 10, &p, err, sizeof(err)), TT_EAGAIN);
    CU_ASSERT(strstr(err, "1 of the 2 shard servers job job waits for") != NULL);
    beat(s, "s1", 20);
    CU_ASSERT_EQUAL_FATAL(tt_shards_placement(s, "job", 30, &p, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL(p->nshards, 2);
    beat(s, "s0", 900); /* s1 silent: dead at 1020 */
    CU_ASSERT_EQUAL_FATAL(tt_shards_placement(s, "job", 1020, &p, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL(p->nshards, 1);
    CU_ASSERT_EQUAL(tt_shards_live_count(s, 1020), 1);
    tt_shards_destroy(&s);
}

/* A registry made after a coordinator restart (base of its start) hands
 * out versions above every version of the starts before, and counts on
 * from there. */
static void shards_version_base_after_restart(void) {
    tt_shards_t *s = NULL;
    CU_ASSERT_EQUAL_FATAL(tt_shards_create(&s, 1000), TT_OK);
    tt_shards_set_version_base(s, 2000000);
    const tt_placement_t *p = NULL;
    char err[256] = "";
    tt_tensor_decl_t t[] = {{"x", 10 * 256}};
    CU_ASSERT_EQUAL(tt_shards_declare(s, "job", t, 1, 1024, err, sizeof(err)), TT_OK);
    beat(s, "s0", 0);
    beat(s, "s1", 0);
    CU_ASSERT_EQUAL_FATAL(tt_shards_placement(s, "job", 10, &p, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL(p->version, 2000001);
    beat(s, "s0", 900);
    CU_ASSERT_EQUAL_FATAL(tt_shards_placement(s, "job", 1000, &p, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL(p->version, 2000002); /* s1 lost: one more, not the base again */
    /* forgotten and declared again: above every version the old job had */
    tt_shards_forget(s, "job");
    tt_shards_forget(s, "never-declared");
    CU_ASSERT_EQUAL(tt_shards_placement(s, "job", 1000, &p, err, sizeof(err)), TT_ENOTFOUND);
    CU_ASSERT_EQUAL(tt_shards_declare(s, "job", t, 1, 2048, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL_FATAL(tt_shards_placement(s, "job", 1000, &p, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL(p->version, 2000003);
    CU_ASSERT_EQUAL(p->chunk_bytes, 2048); /* a new table, a new chunk size */
    tt_shards_destroy(&s);
}

/* A placement that still puts chunks on a dead shard is reported (once per
 * version is the caller's business) until it is recomputed without it. */
static void shards_lost_shard_of_placement(void) {
    tt_shards_t *s = NULL;
    CU_ASSERT_EQUAL_FATAL(tt_shards_create(&s, 1000), TT_OK);
    const tt_placement_t *p = NULL;
    char err[256] = "";
    uint64_t v = 99;
    tt_tensor_decl_t t[] = {{"x", 10 * 256}}; /* 10 chunks of 1 KiB */
    CU_ASSERT_PTR_NULL(tt_shards_lost(s, "job", 0, &v));
    CU_ASSERT_EQUAL(v, 0);
    CU_ASSERT_EQUAL(tt_shards_next_expiry(s, 0), UINT64_MAX);
    CU_ASSERT_EQUAL(tt_shards_declare(s, "job", t, 1, 1024, err, sizeof(err)), TT_OK);
    beat(s, "s0", 0);
    beat(s, "s1", 200);
    CU_ASSERT_EQUAL(tt_shards_next_expiry(s, 300), 1000);
    CU_ASSERT_PTR_NULL(tt_shards_lost(s, "job", 1100, &v)); /* never placed */
    CU_ASSERT_EQUAL(v, 0);
    CU_ASSERT_EQUAL_FATAL(tt_shards_placement(s, "job", 10, &p, err, sizeof(err)), TT_OK);
    uint64_t placed = p->version;
    beat(s, "s0", 900);
    CU_ASSERT_PTR_NULL(tt_shards_lost(s, "job", 950, &v));
    CU_ASSERT_EQUAL(v, placed);
    CU_ASSERT_EQUAL(tt_shards_next_expiry(s, 950), 1200); /* s1 first */
    /* s1 stops at 200: dead at 1200, while the placement still uses it */
    const char *lost = tt_shards_lost(s, "job", 1200, &v);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lost);
    CU_ASSERT_STRING_EQUAL(lost, "s1");
    CU_ASSERT_EQUAL(v, placed);
    CU_ASSERT_EQUAL(tt_shards_next_expiry(s, 1200), 1900); /* only s0 left */
    CU_ASSERT_PTR_NULL(tt_shards_lost(s, "other", 1200, NULL));
    /* re-placed on the live set: nothing lost any more */
    CU_ASSERT_EQUAL_FATAL(tt_shards_placement(s, "job", 1200, &p, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL(p->version, placed + 1);
    CU_ASSERT_PTR_NULL(tt_shards_lost(s, "job", 1200, &v));
    CU_ASSERT_EQUAL(v, placed + 1);
    tt_shards_destroy(&s);
}

static const tt_cunit_test_t tests[] = {
    {"shards_liveness_by_heartbeat_age", shards_liveness_by_heartbeat_age},
    {"shards_stall_of_the_coordinator_does_not_count",
     shards_stall_of_the_coordinator_does_not_count},
    {"shards_declaration_conflict_names_difference", shards_declaration_conflict_names_difference},
    {"shards_placement_follows_live_set", shards_placement_follows_live_set},
    {"shards_first_placement_waits_for_min", shards_first_placement_waits_for_min},
    {"shards_lost_shard_of_placement", shards_lost_shard_of_placement},
    {"shards_version_base_after_restart", shards_version_base_after_restart},
    {NULL, NULL},
};

TT_CUNIT_MAIN("shards", tests)
