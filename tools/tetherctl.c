/* tetherctl: the operator's command line. It sends one query to the
 * coordinator over a DEALER (ZMQ_IMMEDIATE, linger 0) and prints the reply
 * as an aligned table or, with --json, as JSON. Every wait is bounded by
 * --timeout-ms, so an unreachable coordinator is reported, never waited
 * on forever. Subcommands live in one dispatch table; new ones (shards,
 * dump JOB, checkpoint JOB, checkpoints JOB) are a row and a function each.
 * It owns presentation only: the coordinator owns every answer.
 * Exit codes: 0 success, 1 the query failed (unreachable, unknown job,
 * coordinator error), 2 bad usage. */
#include "tt_ckpt_dir.h"
#include "tt_clock.h"
#include "tt_config.h"
#include "tt_log.h"
#include "tt_rng.h"
#include "tt_status.h"
#include "tt_zmq.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CTL_EXIT_OK    0
#define CTL_EXIT_FAIL  1
#define CTL_EXIT_USAGE 2

typedef struct ctl_cfg {
    char coordinator[TT_CFG_STR_MAX];
    int json;
    int64_t timeout_ms;
} ctl_cfg_t;

static const tt_config_entry_t ctl_table[] = {
    {"coordinator", TT_CFG_STR, "tcp://127.0.0.1:7600", 0, 0, "coordinator control endpoint", 0,
     offsetof(ctl_cfg_t, coordinator)},
    {"json", TT_CFG_BOOL, "false", 0, 1, "print JSON instead of a table", 0,
     offsetof(ctl_cfg_t, json)},
    {"timeout-ms", TT_CFG_INT, "3000", 1, 600000, "how long to wait for the coordinator's reply", 0,
     offsetof(ctl_cfg_t, timeout_ms)},
};
#define CTL_NCFG (sizeof(ctl_table) / sizeof(ctl_table[0]))

typedef struct ctl {
    ctl_cfg_t cfg;
    void *zctx;
    void *sock;
} ctl_t;

typedef int (*ctl_run_fn)(ctl_t *ctl, char **args);

typedef struct ctl_cmd {
    const char *name;
    int nargs;
    const char *synopsis;
    const char *help;
    ctl_run_fn run;
    int offline; /* 1: works on local files, never talks to the coordinator */
} ctl_cmd_t;

/* ---- talking to the coordinator ---- */

static int ctl_connect(ctl_t *ctl) {
    char pid[32], rid[TT_WIRE_MAX_ID + 1], err[256] = "";
    uint64_t seed = tt_clock_mono_ns() ^ ((uint64_t)getpid() << 32);
    snprintf(pid, sizeof(pid), "%ld", (long)getpid());
    tt_zmq_routing_id(rid, sizeof(rid), "ctl", pid, tt_rng_next(&seed) & 0xffffffffu);
    tt_zmq_opts_t zo;
    tt_zmq_opts_default(&zo);
    zo.routing_id = rid;
    ctl->zctx = zmq_ctx_new();
    if (ctl->zctx == NULL)
        return TT_ESYS;
    int rc = tt_zmq_dealer(ctl->zctx, ctl->cfg.coordinator, &zo, &ctl->sock, err, sizeof(err));
    if (rc != TT_OK)
        fprintf(stderr, "tetherctl: %s\n", err);
    return rc;
}

static void ctl_close(ctl_t *ctl) {
    tt_zmq_close(&ctl->sock);
    if (ctl->zctx != NULL)
        zmq_ctx_term(ctl->zctx);
    ctl->zctx = NULL;
}

static long remaining_ms(uint64_t deadline) {
    uint64_t now = tt_clock_mono_ms();
    return now >= deadline ? 0 : (long)(deadline - now);
}

/* Waits for `events` on the socket until the deadline; 1 when ready. */
static int wait_for(void *sock, short events, uint64_t deadline) {
    for (;;) {
        zmq_pollitem_t it = {.socket = sock, .fd = -1, .events = events};
        long left = remaining_ms(deadline);
        int rc = zmq_poll(&it, 1, left);
        if (rc > 0)
            return 1;
        if (left == 0 || (rc < 0 && zmq_errno() != EINTR))
            return 0;
    }
}

static void unreachable(const ctl_t *ctl) {
    fprintf(stderr, "tetherctl: cannot reach coordinator at %s: no reply within %" PRId64 " ms\n",
            ctl->cfg.coordinator, ctl->cfg.timeout_ms);
}

/* Sends `env` and receives the reply into `rx` within the deadline.
 * Returns CTL_EXIT_OK with rx->env set, or CTL_EXIT_FAIL (reported). */
static int ctl_request(ctl_t *ctl, const tt_env_t *env, tt_zmq_rx_t *rx) {
    uint64_t deadline = tt_clock_mono_ms() + (uint64_t)ctl->cfg.timeout_ms;
    /* ZMQ_IMMEDIATE: the send can only be queued once TCP is connected. */
    int rc = TT_EAGAIN;
    while (rc == TT_EAGAIN && wait_for(ctl->sock, ZMQ_POLLOUT, deadline))
        rc = tt_zmq_send(ctl->sock, NULL, 0, env, NULL, 0, 1);
    if (rc != TT_OK) {
        unreachable(ctl);
        return CTL_EXIT_FAIL;
    }
    for (;;) {
        if (!wait_for(ctl->sock, ZMQ_POLLIN, deadline)) {
            unreachable(ctl);
            return CTL_EXIT_FAIL;
        }
        char err[256] = "";
        rc = tt_zmq_recv(ctl->sock, 0, 1, NULL, rx, err, sizeof(err));
        if (rc == TT_OK && rx->env->request_id == env->request_id)
            return CTL_EXIT_OK;
        if (rc == TT_OK)
            tt_zmq_rx_close(rx); /* not ours: keep waiting */
        else if (rc != TT_EAGAIN)
            fprintf(stderr, "tetherctl: ignoring a bad reply: %s\n", err);
    }
}

/* Reports an Error body, or a body of the wrong kind. 1 when reported. */
static int reply_is_error(const tt_env_t *env, int want_case, const char *what) {
    if (env->body_case == TETHER__ENVELOPE__BODY_ERROR) {
        const Tether__Error *e = env->error;
        if (e->code == TT_EJOB)
            fprintf(stderr, "tetherctl: unknown job '%s' (see 'tetherctl status')\n", what);
        else
            fprintf(stderr, "tetherctl: coordinator refused: %s (%s)\n",
                    e->message ? e->message : "", tt_status_name(e->code));
        return 1;
    }
    if ((int)env->body_case != want_case) {
        fprintf(stderr, "tetherctl: unexpected '%s' reply from the coordinator\n",
                tt_wire_body_name(env->body_case));
        return 1;
    }
    return 0;
}

/* ---- output helpers ---- */

static void json_str(FILE *out, const char *s) {
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(out, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", out);
        else if (*p == '\t')
            fputs("\\t", out);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(out, "\\u%04x", *p);
        else
            fputc(*p, out);
    }
    fputc('"', out);
}

#define TBL_MAX_COLS 8
#define TBL_CELL     160

typedef struct tbl {
    int ncols;
    size_t nrows, cap;
    char (*cells)[TBL_MAX_COLS][TBL_CELL];
} tbl_t;

static int tbl_row(tbl_t *t, const char *const *vals) {
    if (t->nrows == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 16;
        void *p = realloc(t->cells, cap * sizeof(*t->cells));
        if (p == NULL)
            return TT_ENOMEM;
        t->cells = p;
        t->cap = cap;
    }
    for (int i = 0; i < t->ncols; i++)
        snprintf(t->cells[t->nrows][i], TBL_CELL, "%s", vals[i] ? vals[i] : "");
    t->nrows++;
    return TT_OK;
}

/* Prints the rows with each column as wide as its widest cell. */
static void tbl_print(tbl_t *t, FILE *out) {
    size_t w[TBL_MAX_COLS] = {0};
    for (size_t r = 0; r < t->nrows; r++) {
        for (int i = 0; i < t->ncols; i++) {
            size_t n = strlen(t->cells[r][i]);
            w[i] = n > w[i] ? n : w[i];
        }
    }
    for (size_t r = 0; r < t->nrows; r++) {
        for (int i = 0; i < t->ncols; i++) {
            if (i + 1 == t->ncols)
                fprintf(out, "%s\n", t->cells[r][i]);
            else
                fprintf(out, "%-*s  ", (int)w[i], t->cells[r][i]);
        }
    }
    free(t->cells);
    t->cells = NULL;
}

static const char *job_state_name(uint32_t s) {
    static const char *const names[] = {"waiting", "running", "regrouping", "failed", "finished"};
    return s < sizeof(names) / sizeof(names[0]) ? names[s] : "unknown";
}

/* ---- status ---- */

static void shards_json_array(const Tether__ShardInfo *const *sh, size_t n);

static void status_json(const ctl_t *ctl, const Tether__StatusReply *r) {
    printf("{\"coordinator\":");
    json_str(stdout, ctl->cfg.coordinator);
    printf(",\"jobs\":[");
    for (size_t i = 0; i < r->n_jobs; i++) {
        const Tether__JobStatus *j = r->jobs[i];
        printf("%s{\"job_id\":", i ? "," : "");
        json_str(stdout, j->job_id);
        printf(",\"state\":\"%s\",\"generation\":%" PRIu64 ",\"members\":%u,\"waiting\":%u,"
               "\"last_step\":%" PRId64 ",\"failure\":",
               job_state_name(j->state), j->generation, j->members, j->waiting, j->last_step);
        json_str(stdout, j->failure);
        const Tether__JobSettings *s = j->settings;
        if (s != NULL)
            printf(",\"settings\":{\"min_workers\":%u,\"max_workers\":%u,\"last_call_ms\":%u,"
                   "\"heartbeat_ms\":%u,\"heartbeat_timeout_ms\":%u,\"global_batch\":%u,"
                   "\"join_timeout_ms\":%u}",
                   s->min_workers, s->max_workers, s->last_call_ms, s->heartbeat_ms,
                   s->heartbeat_timeout_ms, s->global_batch, s->join_timeout_ms);
        printf("}");
    }
    printf("],\"shards\":");
    shards_json_array((const Tether__ShardInfo *const *)r->shards, r->n_shards);
    printf("}\n");
}

static void status_table(const Tether__StatusReply *r) {
    tbl_t t = {.ncols = 7};
    const char *hdr[] = {"JOB", "STATE", "GEN", "MEMBERS", "WAITING", "LAST_STEP", "FAILURE"};
    tbl_row(&t, hdr);
    for (size_t i = 0; i < r->n_jobs; i++) {
        const Tether__JobStatus *j = r->jobs[i];
        char gen[24], mem[16], wait[16], step[24];
        snprintf(gen, sizeof(gen), "%" PRIu64, j->generation);
        snprintf(mem, sizeof(mem), "%u", j->members);
        snprintf(wait, sizeof(wait), "%u", j->waiting);
        snprintf(step, sizeof(step), "%" PRId64, j->last_step);
        const char *failure = j->failure && j->failure[0] ? j->failure : "-";
        const char *row[] = {j->job_id, job_state_name(j->state), gen, mem, wait, step, failure};
        tbl_row(&t, row);
    }
    tbl_print(&t, stdout);
    if (r->n_jobs == 0)
        printf("(no jobs)\n");
    size_t alive = 0;
    for (size_t i = 0; i < r->n_shards; i++)
        alive += r->shards[i]->alive;
    if (r->n_shards > 0)
        printf("shard servers: %zu registered, %zu alive (see 'tetherctl shards')\n", r->n_shards,
               alive);
}

static int cmd_status(ctl_t *ctl, char **args) {
    (void)args;
    Tether__StatusRequest req = TETHER__STATUS_REQUEST__INIT;
    tt_env_t env;
    tt_wire_env_init(&env, "", "tetherctl", 0, 1);
    env.body_case = TETHER__ENVELOPE__BODY_STATUS;
    env.status = &req;
    tt_zmq_rx_t rx;
    int rc = ctl_request(ctl, &env, &rx);
    if (rc != CTL_EXIT_OK)
        return rc;
    if (reply_is_error(rx.env, TETHER__ENVELOPE__BODY_STATUS_REPLY, "")) {
        rc = CTL_EXIT_FAIL;
    } else if (ctl->cfg.json) {
        status_json(ctl, rx.env->status_reply);
    } else {
        status_table(rx.env->status_reply);
    }
    tt_zmq_rx_close(&rx);
    return rc;
}

/* ---- members ---- */

static void members_json(const char *job, const Tether__MembersReply *r) {
    printf("{\"job_id\":");
    json_str(stdout, job);
    printf(",\"generation\":%" PRIu64 ",\"members\":[", r->generation);
    for (size_t i = 0; i < r->n_members; i++) {
        const Tether__MemberStatus *m = r->members[i];
        printf("%s{\"rank\":%u,\"worker_id\":", i ? "," : "", m->rank);
        json_str(stdout, m->worker_id);
        printf(",\"host\":");
        json_str(stdout, m->host);
        printf(",\"endpoint\":");
        json_str(stdout, m->endpoint);
        printf(",\"heartbeat_age_ms\":%" PRIu64 ",\"last_step\":%" PRId64
               ",\"incarnation\":%" PRIu64 "}",
               m->heartbeat_age_ms, m->last_step, m->incarnation);
    }
    printf("]}\n");
}

static void members_table(const char *job, const Tether__MembersReply *r) {
    printf("job %s, generation %" PRIu64 ", %zu members\n", job, r->generation, r->n_members);
    tbl_t t = {.ncols = 6};
    const char *hdr[] = {"RANK", "WORKER", "HOST", "ENDPOINT", "HEARTBEAT_AGE", "LAST_STEP"};
    tbl_row(&t, hdr);
    for (size_t i = 0; i < r->n_members; i++) {
        const Tether__MemberStatus *m = r->members[i];
        char rank[16], age[32], step[24];
        snprintf(rank, sizeof(rank), "%u", m->rank);
        snprintf(age, sizeof(age), "%" PRIu64 " ms", m->heartbeat_age_ms);
        snprintf(step, sizeof(step), "%" PRId64, m->last_step);
        const char *ep = m->endpoint && m->endpoint[0] ? m->endpoint : "-";
        const char *row[] = {rank, m->worker_id, m->host, ep, age, step};
        tbl_row(&t, row);
    }
    tbl_print(&t, stdout);
}

typedef void (*ctl_show_fn)(const ctl_t *ctl, const char *job, const tt_env_t *reply);

/* A request about `job` (env, its body set): sends it and hands a reply of
 * body `want` to show(); an error reply is printed by reply_is_error. */
static int job_query(ctl_t *ctl, const char *job, tt_env_t *env, int want, ctl_show_fn show) {
    if (strlen(job) > TT_WIRE_MAX_ID) {
        fprintf(stderr, "tetherctl: job id longer than %u bytes\n", TT_WIRE_MAX_ID);
        return CTL_EXIT_USAGE;
    }
    tt_zmq_rx_t rx;
    int rc = ctl_request(ctl, env, &rx);
    if (rc != CTL_EXIT_OK)
        return rc;
    if (reply_is_error(rx.env, want, job))
        rc = CTL_EXIT_FAIL;
    else
        show(ctl, job, rx.env);
    tt_zmq_rx_close(&rx);
    return rc;
}

static void show_members(const ctl_t *ctl, const char *job, const tt_env_t *reply) {
    if (ctl->cfg.json)
        members_json(job, reply->members_reply);
    else
        members_table(job, reply->members_reply);
}

static int cmd_members(ctl_t *ctl, char **args) {
    Tether__MembersRequest req = TETHER__MEMBERS_REQUEST__INIT;
    tt_env_t env;
    tt_wire_env_init(&env, args[0], "tetherctl", 0, 1);
    env.body_case = TETHER__ENVELOPE__BODY_MEMBERS;
    env.members = &req;
    return job_query(ctl, args[0], &env, TETHER__ENVELOPE__BODY_MEMBERS_REPLY, show_members);
}

/* ---- shards ---- */

static void shards_json_array(const Tether__ShardInfo *const *sh, size_t n) {
    printf("[");
    for (size_t i = 0; i < n; i++) {
        printf("%s{\"shard_id\":", i ? "," : "");
        json_str(stdout, sh[i]->shard_id);
        printf(",\"endpoint\":");
        json_str(stdout, sh[i]->endpoint);
        printf(",\"bytes_held\":%" PRIu64 ",\"chunks\":%u,\"heartbeat_age_ms\":%" PRIu64
               ",\"alive\":%s,\"incarnation\":%" PRIu64 "}",
               sh[i]->bytes_held, sh[i]->chunks, sh[i]->heartbeat_age_ms,
               sh[i]->alive ? "true" : "false", sh[i]->incarnation);
    }
    printf("]");
}

static void shards_table(const Tether__ShardsReply *r) {
    tbl_t t = {.ncols = 6};
    const char *hdr[] = {"SHARD", "ENDPOINT", "BYTES_HELD", "CHUNKS", "HEARTBEAT_AGE", "STATE"};
    tbl_row(&t, hdr);
    for (size_t i = 0; i < r->n_shards; i++) {
        const Tether__ShardInfo *sh = r->shards[i];
        char bytes[24], chunks[16], age[32];
        snprintf(bytes, sizeof(bytes), "%" PRIu64, sh->bytes_held);
        snprintf(chunks, sizeof(chunks), "%u", sh->chunks);
        snprintf(age, sizeof(age), "%" PRIu64 " ms", sh->heartbeat_age_ms);
        const char *state = sh->alive ? "alive" : "dead";
        const char *row[] = {sh->shard_id, sh->endpoint, bytes, chunks, age, state};
        tbl_row(&t, row);
    }
    tbl_print(&t, stdout);
    if (r->n_shards == 0)
        printf("(no shard servers registered)\n");
}

static int cmd_shards(ctl_t *ctl, char **args) {
    (void)args;
    Tether__ShardsRequest req = TETHER__SHARDS_REQUEST__INIT;
    tt_env_t env;
    tt_wire_env_init(&env, "", "tetherctl", 0, 1);
    env.body_case = TETHER__ENVELOPE__BODY_SHARDS;
    env.shards = &req;
    tt_zmq_rx_t rx;
    int rc = ctl_request(ctl, &env, &rx);
    if (rc != CTL_EXIT_OK)
        return rc;
    if (reply_is_error(rx.env, TETHER__ENVELOPE__BODY_SHARDS_REPLY, "")) {
        rc = CTL_EXIT_FAIL;
    } else if (ctl->cfg.json) {
        printf("{\"shards\":");
        shards_json_array((const Tether__ShardInfo *const *)rx.env->shards_reply->shards,
                          rx.env->shards_reply->n_shards);
        printf("}\n");
    } else {
        shards_table(rx.env->shards_reply);
    }
    tt_zmq_rx_close(&rx);
    return rc;
}

/* ---- dump ---- */

static size_t dump_answered(const Tether__DumpReply *r) {
    size_t n = 0;
    for (size_t i = 0; i < r->n_sections; i++)
        n += r->sections[i]->answered ? 1 : 0;
    return n;
}

static void dump_json(const char *job, const Tether__DumpReply *r) {
    printf("{\"job_id\":");
    json_str(stdout, job);
    printf(",\"generation\":%" PRIu64 ",\"sections\":[", r->generation);
    for (size_t i = 0; i < r->n_sections; i++) {
        const Tether__DumpSection *s = r->sections[i];
        printf("%s{\"rank\":%u,\"worker_id\":", i ? "," : "", s->rank);
        json_str(stdout, s->worker_id);
        printf(",\"answered\":%s,\"text\":", s->answered ? "true" : "false");
        json_str(stdout, s->text);
        printf("}");
    }
    printf("]}\n");
}

static void dump_text(const char *job, const Tether__DumpReply *r) {
    printf("job %s, generation %" PRIu64 ", %zu members (%zu answered)\n", job, r->generation,
           r->n_sections, dump_answered(r));
    for (size_t i = 0; i < r->n_sections; i++) {
        const Tether__DumpSection *s = r->sections[i];
        if (!s->answered) {
            printf("=== rank %u (%s): no answer within 2 s ===\n", s->rank, s->worker_id);
            continue;
        }
        size_t len = s->text ? strlen(s->text) : 0;
        printf("=== rank %u (%s) ===\n%s%s", s->rank, s->worker_id, s->text ? s->text : "",
               len > 0 && s->text[len - 1] != '\n' ? "\n" : "");
    }
}

/* The coordinator collects for up to 2 s, so the wait is at least 4 s. */
static void show_dump(const ctl_t *ctl, const char *job, const tt_env_t *reply) {
    if (ctl->cfg.json)
        dump_json(job, reply->dump_reply);
    else
        dump_text(job, reply->dump_reply);
}

static int cmd_dump(ctl_t *ctl, char **args) {
    if (ctl->cfg.timeout_ms < 4000)
        ctl->cfg.timeout_ms = 4000;
    Tether__DumpRequest req = TETHER__DUMP_REQUEST__INIT;
    tt_env_t env;
    tt_wire_env_init(&env, args[0], "tetherctl", 0, 1);
    env.body_case = TETHER__ENVELOPE__BODY_DUMP;
    env.dump = &req;
    return job_query(ctl, args[0], &env, TETHER__ENVELOPE__BODY_DUMP_REPLY, show_dump);
}

/* ---- checkpoint verify DIR (offline) ---- */

static void verify_json(const char *dir, const tt_ckpt_report_t *rep) {
    printf("{\"dir\":");
    json_str(stdout, dir);
    printf(",\"valid\":%s,\"checkpoint_id\":", rep->rc == TT_OK ? "true" : "false");
    json_str(stdout, rep->manifest.id);
    printf(",\"step\":%" PRIu64 ",\"parts\":[", rep->manifest.step);
    for (uint32_t i = 0; i < rep->nparts; i++) {
        const tt_ckpt_part_check_t *c = &rep->parts[i];
        printf("%s{\"file\":", i ? "," : "");
        json_str(stdout, c->file);
        printf(",\"ok\":%s,\"size\":%" PRIu64 ",\"crc32c\":\"0x%08x\",\"error\":",
               c->rc == TT_OK ? "true" : "false", c->size, c->crc32c);
        json_str(stdout, c->msg);
        printf("}");
    }
    printf("],\"verdict\":");
    json_str(stdout, rep->rc == TT_OK ? "valid" : rep->msg);
    printf("}\n");
}

static void verify_text(const char *dir, const tt_ckpt_report_t *rep) {
    for (uint32_t i = 0; i < rep->nparts; i++) {
        const tt_ckpt_part_check_t *c = &rep->parts[i];
        if (c->rc == TT_OK)
            printf("ok   %s  %" PRIu64 " bytes  crc32c 0x%08x\n", c->file, c->size, c->crc32c);
        else
            printf("BAD  %s\n", c->msg);
    }
    if (rep->rc == TT_OK)
        printf("checkpoint %s (step %" PRIu64 ", %u parts) in %s: valid\n", rep->manifest.id,
               rep->manifest.step, rep->nparts, dir);
    else
        printf("checkpoint in %s: INVALID: %s\n", dir, rep->msg);
}

static int cmd_checkpoint_verify(ctl_t *ctl, char **args) {
    if (strcmp(args[0], "verify") != 0) {
        fprintf(stderr, "tetherctl: usage: tetherctl checkpoint verify DIR\n");
        return CTL_EXIT_USAGE;
    }
    tt_ckpt_report_t rep;
    int rc = tt_ckpt_verify(args[1], &rep);
    if (ctl->cfg.json)
        verify_json(args[1], &rep);
    else
        verify_text(args[1], &rep);
    tt_ckpt_report_free(&rep);
    return rc == TT_OK ? CTL_EXIT_OK : CTL_EXIT_FAIL;
}

/* ---- checkpoints DIR (offline): committed checkpoints under a root ---- */

static void checkpoints_print(ctl_t *ctl, const tt_ckpt_entry_t *v, size_t n, const char *latest) {
    if (ctl->cfg.json)
        printf("[");
    else
        printf("%-20s %10s %12s %15s %11s %s\n", "id", "step", "bytes", "created_unix_ms",
               "duration_ms", "latest");
    for (size_t i = 0; i < n; i++) {
        int is_latest = strcmp(v[i].id, latest) == 0;
        if (!ctl->cfg.json) {
            printf("%-20s %10" PRIu64 " %12" PRIu64 " %15" PRIu64 " %11" PRIu64 " %s\n", v[i].id,
                   v[i].step, v[i].bytes, v[i].created_unix_ms, v[i].duration_ms,
                   is_latest ? "*" : "");
            continue;
        }
        printf("%s{\"id\":", i ? "," : "");
        json_str(stdout, v[i].id);
        printf(",\"step\":%" PRIu64 ",\"epoch\":%" PRIu64 ",\"bytes\":%" PRIu64
               ",\"created_unix_ms\":%" PRIu64 ",\"duration_ms\":%" PRIu64 ",\"latest\":%s}",
               v[i].step, v[i].epoch, v[i].bytes, v[i].created_unix_ms, v[i].duration_ms,
               is_latest ? "true" : "false");
    }
    if (ctl->cfg.json)
        printf("]\n");
}

static int cmd_checkpoints(ctl_t *ctl, char **args) {
    tt_ckpt_entry_t *v = NULL;
    size_t n = 0;
    char err[512] = "", latest[TT_MF_ID_MAX] = "";
    int rc = tt_ckpt_list(args[0], &v, &n, err, sizeof(err));
    if (rc != TT_OK) {
        fprintf(stderr, "tetherctl: %s\n", err);
        return CTL_EXIT_FAIL;
    }
    if (tt_ckpt_latest_read(args[0], latest, NULL, 0) != TT_OK)
        latest[0] = '\0';
    checkpoints_print(ctl, v, n, latest);
    free(v);
    return CTL_EXIT_OK;
}

/* ---- dispatch ---- */

static const ctl_cmd_t ctl_cmds[] = {
    {"status", 0, "status", "jobs: id, state, generation, members, waiting, last step, failure",
     cmd_status, 0},
    {"members", 1, "members JOB",
     "members of JOB: rank, worker id, host, endpoint, heartbeat age, last step", cmd_members, 0},
    {"shards", 0, "shards",
     "shard servers: id, endpoint, bytes held, chunks, heartbeat age, alive/dead", cmd_shards, 0},
    {"dump", 1, "dump JOB", "flight recorders of every member of JOB (collectives, newest last)",
     cmd_dump, 0},
    {"checkpoint", 2, "checkpoint verify DIR",
     "offline: re-read every part DIR's manifest lists, check sizes and CRCs",
     cmd_checkpoint_verify, 1},
    {"checkpoints", 1, "checkpoints DIR",
     "offline: committed checkpoints under the root DIR: id, step, bytes, time, duration",
     cmd_checkpoints, 1},
};
#define CTL_NCMDS (sizeof(ctl_cmds) / sizeof(ctl_cmds[0]))

static const char ctl_usage_head[] = "usage: tetherctl [options] COMMAND [args] [options]";

static void usage(FILE *out) {
    fprintf(out, "%s\n\nCommands:\n", ctl_usage_head);
    for (size_t i = 0; i < CTL_NCMDS; i++)
        fprintf(out, "  %-14s %s\n", ctl_cmds[i].synopsis, ctl_cmds[i].help);
    fprintf(out, "\nExit status: 0 success, 1 query failed, 2 bad usage.\n\n");
    tt_config_print_help(ctl_table, CTL_NCFG, "Options may come before or after the command.", out);
}

/* Flags after the command ("tetherctl status --json"): tt_config_load
 * stops at the first positional argument, so the rest is parsed here with
 * the same table. Positionals are compacted into `pos`. */
static int late_flags(ctl_cfg_t *cfg, int argc, char **argv, int first, char **pos, int *npos) {
    char err[256] = "";
    for (int i = first; i < argc; i++) {
        if (strncmp(argv[i], "--", 2) != 0 || argv[i][2] == '\0') {
            pos[(*npos)++] = argv[i];
            continue;
        }
        if (strcmp(argv[i], "--help") == 0)
            return TT_CONFIG_HELP;
        char name[64];
        const char *eq = strchr(argv[i] + 2, '=');
        size_t len = eq ? (size_t)(eq - argv[i] - 2) : strlen(argv[i] + 2);
        snprintf(name, sizeof(name), "%.*s", (int)len, argv[i] + 2);
        const char *val = eq ? eq + 1 : NULL;
        if (val == NULL && strcmp(name, "json") == 0)
            val = "true";
        else if (val == NULL && i + 1 < argc)
            val = argv[++i];
        if (val == NULL ||
            tt_config_set(ctl_table, CTL_NCFG, cfg, name, val, "flag", err, sizeof(err)) != TT_OK) {
            fprintf(stderr, "tetherctl: %s\n", val ? err : "flag needs a value");
            return TT_EINVAL;
        }
    }
    return TT_OK;
}

/* A name may have rows with different argument counts ("checkpoint JOB",
 * "checkpoint verify DIR"): the row with the count given wins, else the
 * first with the name (for its usage line). */
static const ctl_cmd_t *find_cmd(const char *name, int nargs) {
    const ctl_cmd_t *any = NULL;
    for (size_t i = 0; i < CTL_NCMDS; i++) {
        if (strcmp(ctl_cmds[i].name, name) != 0)
            continue;
        if (ctl_cmds[i].nargs == nargs)
            return &ctl_cmds[i];
        any = any ? any : &ctl_cmds[i];
    }
    return any;
}

/* Parses everything; returns -1 to run *cmd with `pos`, else an exit code. */
static int parse_args(ctl_t *ctl, int argc, char **argv, const ctl_cmd_t **cmd, char **pos,
                      int *npos) {
    char err[512] = "";
    int first = argc;
    int rc = tt_config_load(ctl_table, CTL_NCFG, &ctl->cfg, argc, argv, ctl_usage_head, &first, err,
                            sizeof(err));
    if (rc == TT_CONFIG_HELP)
        return CTL_EXIT_OK; /* tt_config printed the options */
    if (rc != TT_OK) {
        fprintf(stderr, "tetherctl: %s\n", err);
        usage(stderr);
        return CTL_EXIT_USAGE;
    }
    rc = late_flags(&ctl->cfg, argc, argv, first, pos, npos);
    if (rc == TT_CONFIG_HELP) {
        usage(stdout);
        return CTL_EXIT_OK;
    }
    if (rc != TT_OK || *npos == 0) {
        usage(stderr);
        return CTL_EXIT_USAGE;
    }
    *cmd = find_cmd(pos[0], *npos - 1);
    if (*cmd == NULL || *npos - 1 != (*cmd)->nargs) {
        if (*cmd == NULL)
            fprintf(stderr, "tetherctl: unknown command '%s'\n", pos[0]);
        else
            fprintf(stderr, "tetherctl: usage: tetherctl %s\n", (*cmd)->synopsis);
        usage(stderr);
        return CTL_EXIT_USAGE;
    }
    return -1;
}

int main(int argc, char **argv) {
    tt_log_init_from_env();
    tt_log_set_identity("tetherctl", "");
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return CTL_EXIT_OK;
        }
    }
    ctl_t ctl = {0};
    const ctl_cmd_t *cmd = NULL;
    char **pos = calloc((size_t)argc + 1, sizeof(*pos));
    int npos = 0;
    if (pos == NULL)
        return CTL_EXIT_FAIL;
    int rc = parse_args(&ctl, argc, argv, &cmd, pos, &npos);
    if (rc < 0) {
        rc = cmd->offline || ctl_connect(&ctl) == TT_OK ? cmd->run(&ctl, pos + 1) : CTL_EXIT_FAIL;
        ctl_close(&ctl);
    }
    free(pos);
    return rc;
}
