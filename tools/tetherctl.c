/* tetherctl: the operator's command line. It sends one query to the
 * coordinator over a DEALER (ZMQ_IMMEDIATE, linger 0) and prints the reply
 * as an aligned table or, with --json, as JSON. Every wait is bounded by
 * --timeout-ms, so an unreachable coordinator is reported, never waited
 * on forever. Subcommands live in one dispatch table; new ones are a row
 * and a function each. This file holds the options, the dispatch and the
 * status, members, shards and dump commands; tools/ctl/ holds the shared
 * request and output helpers (ctl_io) and the checkpoint commands
 * (ctl_ckpt). It owns presentation only: the coordinator owns every answer.
 * Exit codes: 0 success, 1 the query failed (unreachable, unknown job,
 * coordinator error), 2 bad usage. */
#include "ctl_ckpt.h"
#include "ctl_io.h"
#include "tt_clock.h"
#include "tt_log.h"
#include "tt_status.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const tt_config_entry_t ctl_table[] = {
    {"coordinator", TT_CFG_STR, "tcp://127.0.0.1:7600", 0, 0, "coordinator control endpoint", 0,
     offsetof(tt_ctl_cfg_t, coordinator)},
    {"key-file", TT_CFG_STR, "", 0, 0, "the cluster key the coordinator was given (empty: none)", 0,
     offsetof(tt_ctl_cfg_t, key_file)},
    {"json", TT_CFG_BOOL, "false", 0, 1, "print JSON instead of a table", 0,
     offsetof(tt_ctl_cfg_t, json)},
    {"encrypt-data", TT_CFG_BOOL, "false", 0, 1,
     "keygen: the new key asks for encrypted bulk data too (data = curve; slower)", 0,
     offsetof(tt_ctl_cfg_t, encrypt_data)},
    {"wait", TT_CFG_BOOL, "false", 0, 1,
     "checkpoint JOB: wait (up to --timeout-ms) until a checkpoint serving the request "
     "committed; drain: until the worker is no longer a member",
     0, offsetof(tt_ctl_cfg_t, wait)},
    {"now", TT_CFG_BOOL, "false", 0, 1,
     "drain: evict at once, for a worker that will never reach a step boundary (the others "
     "redo their step in flight)",
     0, offsetof(tt_ctl_cfg_t, now)},
    {"timeout-ms", TT_CFG_INT, "3000", 1, 600000,
     "how long to wait for the coordinator's reply (checkpoint --wait: for the whole wait)", 0,
     offsetof(tt_ctl_cfg_t, timeout_ms)},
};
#define CTL_NCFG (sizeof(ctl_table) / sizeof(ctl_table[0]))

typedef int (*ctl_run_fn)(tt_ctl_t *ctl, char **args);

typedef struct ctl_cmd {
    const char *name;
    int nargs;
    const char *synopsis;
    const char *help;
    ctl_run_fn run;
    int offline; /* 1: main does not connect (local files, or it connects itself) */
} ctl_cmd_t;

static const char *job_state_name(uint32_t s) {
    static const char *const names[] = {"waiting", "running", "regrouping", "failed", "finished"};
    return s < sizeof(names) / sizeof(names[0]) ? names[s] : "unknown";
}

/* ---- status ---- */

static void shards_json_array(const Tether__ShardInfo *const *sh, size_t n);

static void status_json(const tt_ctl_t *ctl, const Tether__StatusReply *r) {
    printf("{\"coordinator\":");
    tt_ctl_json_str(stdout, ctl->cfg.coordinator);
    printf(",\"jobs\":[");
    for (size_t i = 0; i < r->n_jobs; i++) {
        const Tether__JobStatus *j = r->jobs[i];
        printf("%s{\"job_id\":", i ? "," : "");
        tt_ctl_json_str(stdout, j->job_id);
        printf(",\"state\":\"%s\",\"generation\":%" PRIu64 ",\"members\":%u,\"waiting\":%u,"
               "\"last_step\":%" PRId64 ",\"reached_step\":%" PRId64 ",\"failure\":",
               job_state_name(j->state), j->generation, j->members, j->waiting, j->last_step,
               j->reached_step);
        tt_ctl_json_str(stdout, j->failure);
        printf(",\"epoch\":%" PRIu64 ",\"epoch_examples\":%" PRIu64 ",\"epoch_size\":%" PRIu64,
               j->epoch, j->epoch_examples, j->epoch_size);
        printf(",\"comm_id_waiting\":%u,\"comm_id_wait_ms\":%" PRIu64 ",\"comm_id_from\":",
               j->comm_id_waiting, j->comm_id_wait_ms);
        tt_ctl_json_str(stdout, j->comm_id_from);
        printf(",\"checkpoint_failures\":%" PRIu64, j->checkpoint_failures);
        if (j->checkpoint_failure != NULL) {
            printf(",\"checkpoint_failure\":");
            tt_ctl_ckpt_failure_json(j->checkpoint_failure);
        }
        const Tether__JobSettings *s = j->settings;
        if (s != NULL)
            printf(",\"settings\":{\"min_workers\":%u,\"max_workers\":%u,\"last_call_ms\":%u,"
                   "\"heartbeat_ms\":%u,\"heartbeat_timeout_ms\":%u,\"global_batch\":%u,"
                   "\"join_timeout_ms\":%u,\"checkpoint_every_steps\":%u,"
                   "\"checkpoint_every_ms\":%u,\"checkpoint_keep\":%u,"
                   "\"max_regroups_per_hour\":%u,\"flap_cooldown_ms\":%u}",
                   s->min_workers, s->max_workers, s->last_call_ms, s->heartbeat_ms,
                   s->heartbeat_timeout_ms, s->global_batch, s->join_timeout_ms,
                   s->checkpoint_every_steps, s->checkpoint_every_ms, s->checkpoint_keep,
                   s->max_regroups_per_hour, s->flap_cooldown_ms);
        printf("}");
    }
    printf("],\"shards\":");
    shards_json_array((const Tether__ShardInfo *const *)r->shards, r->n_shards);
    printf("}\n");
}

/* "3 41%": the epoch and how much of it is done; "-" before any report. */
static void progress_cell(const Tether__JobStatus *j, char *buf, size_t n) {
    if (j->epoch == 0)
        snprintf(buf, n, "-");
    else if (j->epoch_size == 0)
        snprintf(buf, n, "%" PRIu64, j->epoch);
    else
        snprintf(buf, n, "%" PRIu64 " %.0f%%", j->epoch,
                 100.0 * (double)j->epoch_examples / (double)j->epoch_size);
}

static void status_table(const Tether__StatusReply *r) {
    tt_ctl_tbl_t t = {.ncols = 8};
    const char *hdr[] = {"JOB",     "STATE",     "GEN",   "MEMBERS",
                         "WAITING", "LAST_STEP", "EPOCH", "FAILURE"};
    tt_ctl_tbl_row(&t, hdr);
    for (size_t i = 0; i < r->n_jobs; i++) {
        const Tether__JobStatus *j = r->jobs[i];
        char gen[24], mem[16], wait[16], step[24], epoch[40];
        snprintf(gen, sizeof(gen), "%" PRIu64, j->generation);
        snprintf(mem, sizeof(mem), "%u", j->members);
        snprintf(wait, sizeof(wait), "%u", j->waiting);
        snprintf(step, sizeof(step), "%" PRId64, j->last_step);
        progress_cell(j, epoch, sizeof(epoch));
        const char *failure = j->failure && j->failure[0] ? j->failure : "-";
        const char *row[] = {j->job_id, job_state_name(j->state), gen, mem, wait, step, epoch,
                             failure};
        tt_ctl_tbl_row(&t, row);
    }
    tt_ctl_tbl_print(&t, stdout);
    if (r->n_jobs == 0)
        printf("(no jobs)\n");
    for (size_t i = 0; i < r->n_jobs; i++) {
        const Tether__JobStatus *j = r->jobs[i];
        if (j->comm_id_waiting > 0)
            printf("job %s: %u member(s) waiting %.1f s for generation %" PRIu64
                   "'s collective id from rank 0 (%s), which has not offered it\n",
                   j->job_id, j->comm_id_waiting, (double)j->comm_id_wait_ms / 1e3, j->generation,
                   j->comm_id_from && j->comm_id_from[0] ? j->comm_id_from : "?");
        /* Only a running generation's step is below the mark; last_step -1
         * with reached_step 0 is a coordinator that predates the field. */
        if (j->last_step >= 0 && j->reached_step > j->last_step)
            printf("job %s: generation %" PRIu64 " trains steps again: its members are at step "
                   "%" PRId64 ", the job had completed step %" PRId64
                   " (resumed from a checkpoint, or started over)\n",
                   j->job_id, j->generation, j->last_step, j->reached_step);
        const Tether__CheckpointFailure *f = j->checkpoint_failure;
        if (j->checkpoint_failures > 0 && f != NULL)
            printf("job %s: %" PRIu64 " checkpoint attempt(s) failed since the newest commit; "
                   "the newest, %s on %s: %s (see 'tetherctl checkpoints %s')\n",
                   j->job_id, j->checkpoint_failures, f->checkpoint_id,
                   f->worker_id ? f->worker_id : "?", f->reason ? f->reason : "", j->job_id);
    }
    size_t alive = 0;
    for (size_t i = 0; i < r->n_shards; i++)
        alive += r->shards[i]->alive;
    if (r->n_shards > 0)
        printf("shard servers: %zu registered, %zu alive (see 'tetherctl shards')\n", r->n_shards,
               alive);
}

static int cmd_status(tt_ctl_t *ctl, char **args) {
    (void)args;
    Tether__StatusRequest req = TETHER__STATUS_REQUEST__INIT;
    tt_env_t env;
    tt_wire_env_init(&env, "", "tetherctl", 0, 1);
    env.body_case = TETHER__ENVELOPE__BODY_STATUS;
    env.status = &req;
    tt_zmq_rx_t rx;
    int rc = tt_ctl_request(ctl, &env, &rx);
    if (rc != TT_CTL_EXIT_OK)
        return rc;
    if (tt_ctl_reply_is_error(rx.env, TETHER__ENVELOPE__BODY_STATUS_REPLY, "")) {
        rc = TT_CTL_EXIT_FAIL;
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
    tt_ctl_json_str(stdout, job);
    printf(",\"generation\":%" PRIu64 ",\"members\":[", r->generation);
    for (size_t i = 0; i < r->n_members; i++) {
        const Tether__MemberStatus *m = r->members[i];
        printf("%s{\"rank\":%u,\"worker_id\":", i ? "," : "", m->rank);
        tt_ctl_json_str(stdout, m->worker_id);
        printf(",\"host\":");
        tt_ctl_json_str(stdout, m->host);
        printf(",\"endpoint\":");
        tt_ctl_json_str(stdout, m->endpoint);
        printf(",\"heartbeat_age_ms\":%" PRIu64 ",\"last_step\":%" PRId64
               ",\"incarnation\":%" PRIu64 ",\"step_ms\":%.3f,\"wait_ms\":%.3f,"
               "\"straggler\":%s,\"draining\":%s}",
               m->heartbeat_age_ms, m->last_step, m->incarnation, m->step_ms, m->wait_ms,
               m->straggler ? "true" : "false", m->draining ? "true" : "false");
    }
    printf("]}\n");
}

static void members_table(const char *job, const Tether__MembersReply *r) {
    printf("job %s, generation %" PRIu64 ", %zu members\n", job, r->generation, r->n_members);
    tt_ctl_tbl_t t = {.ncols = 8};
    const char *hdr[] = {"RANK",          "WORKER",    "HOST",    "ENDPOINT",
                         "HEARTBEAT_AGE", "LAST_STEP", "STEP_MS", "WAIT_MS"};
    tt_ctl_tbl_row(&t, hdr);
    const Tether__MemberStatus *slow = NULL;
    for (size_t i = 0; i < r->n_members; i++) {
        const Tether__MemberStatus *m = r->members[i];
        char rank[16], age[32], step[24], st[24] = "-", wt[32] = "-";
        snprintf(rank, sizeof(rank), "%u", m->rank);
        snprintf(age, sizeof(age), "%" PRIu64 " ms", m->heartbeat_age_ms);
        snprintf(step, sizeof(step), "%" PRId64, m->last_step);
        if (m->step_ms > 0) {
            snprintf(st, sizeof(st), "%.1f", m->step_ms);
            snprintf(wt, sizeof(wt), "%.1f%s", m->wait_ms, m->straggler ? " <- slowest" : "");
        }
        slow = m->straggler ? m : slow;
        const char *ep = m->endpoint && m->endpoint[0] ? m->endpoint : "-";
        char who[TT_CTL_TBL_CELL];
        snprintf(who, sizeof(who), "%s%s", m->worker_id, m->draining ? " (draining)" : "");
        const char *row[] = {rank, who, m->host, ep, age, step, st, wt};
        tt_ctl_tbl_row(&t, row);
    }
    tt_ctl_tbl_print(&t, stdout);
    if (slow != NULL)
        printf("rank %u (%s) is the straggler: the others wait for it %s\n", slow->rank,
               slow->worker_id,
               "(STEP_MS: mean step, WAIT_MS: mean time blocked on communication)");
}

static void show_members(const tt_ctl_t *ctl, const char *job, const tt_env_t *reply) {
    if (ctl->cfg.json)
        members_json(job, reply->members_reply);
    else
        members_table(job, reply->members_reply);
}

static int cmd_members(tt_ctl_t *ctl, char **args) {
    Tether__MembersRequest req = TETHER__MEMBERS_REQUEST__INIT;
    tt_env_t env;
    tt_wire_env_init(&env, args[0], "tetherctl", 0, 1);
    env.body_case = TETHER__ENVELOPE__BODY_MEMBERS;
    env.members = &req;
    return tt_ctl_job_query(ctl, args[0], &env, TETHER__ENVELOPE__BODY_MEMBERS_REPLY, show_members);
}

/* ---- shards ---- */

static void shards_json_array(const Tether__ShardInfo *const *sh, size_t n) {
    printf("[");
    for (size_t i = 0; i < n; i++) {
        printf("%s{\"shard_id\":", i ? "," : "");
        tt_ctl_json_str(stdout, sh[i]->shard_id);
        printf(",\"endpoint\":");
        tt_ctl_json_str(stdout, sh[i]->endpoint);
        printf(",\"bytes_held\":%" PRIu64 ",\"chunks\":%u,\"heartbeat_age_ms\":%" PRIu64
               ",\"alive\":%s,\"incarnation\":%" PRIu64 "}",
               sh[i]->bytes_held, sh[i]->chunks, sh[i]->heartbeat_age_ms,
               sh[i]->alive ? "true" : "false", sh[i]->incarnation);
    }
    printf("]");
}

static void shards_table(const Tether__ShardsReply *r) {
    tt_ctl_tbl_t t = {.ncols = 6};
    const char *hdr[] = {"SHARD", "ENDPOINT", "BYTES_HELD", "CHUNKS", "HEARTBEAT_AGE", "STATE"};
    tt_ctl_tbl_row(&t, hdr);
    for (size_t i = 0; i < r->n_shards; i++) {
        const Tether__ShardInfo *sh = r->shards[i];
        char bytes[24], chunks[16], age[32];
        snprintf(bytes, sizeof(bytes), "%" PRIu64, sh->bytes_held);
        snprintf(chunks, sizeof(chunks), "%u", sh->chunks);
        snprintf(age, sizeof(age), "%" PRIu64 " ms", sh->heartbeat_age_ms);
        const char *state = sh->alive ? "alive" : "dead";
        const char *row[] = {sh->shard_id, sh->endpoint, bytes, chunks, age, state};
        tt_ctl_tbl_row(&t, row);
    }
    tt_ctl_tbl_print(&t, stdout);
    if (r->n_shards == 0)
        printf("(no shard servers registered)\n");
}

static int cmd_shards(tt_ctl_t *ctl, char **args) {
    (void)args;
    Tether__ShardsRequest req = TETHER__SHARDS_REQUEST__INIT;
    tt_env_t env;
    tt_wire_env_init(&env, "", "tetherctl", 0, 1);
    env.body_case = TETHER__ENVELOPE__BODY_SHARDS;
    env.shards = &req;
    tt_zmq_rx_t rx;
    int rc = tt_ctl_request(ctl, &env, &rx);
    if (rc != TT_CTL_EXIT_OK)
        return rc;
    if (tt_ctl_reply_is_error(rx.env, TETHER__ENVELOPE__BODY_SHARDS_REPLY, "")) {
        rc = TT_CTL_EXIT_FAIL;
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
    tt_ctl_json_str(stdout, job);
    printf(",\"generation\":%" PRIu64 ",\"sections\":[", r->generation);
    for (size_t i = 0; i < r->n_sections; i++) {
        const Tether__DumpSection *s = r->sections[i];
        printf("%s{\"rank\":%u,\"worker_id\":", i ? "," : "", s->rank);
        tt_ctl_json_str(stdout, s->worker_id);
        printf(",\"answered\":%s,\"text\":", s->answered ? "true" : "false");
        tt_ctl_json_str(stdout, s->text);
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
static void show_dump(const tt_ctl_t *ctl, const char *job, const tt_env_t *reply) {
    if (ctl->cfg.json)
        dump_json(job, reply->dump_reply);
    else
        dump_text(job, reply->dump_reply);
}

static int cmd_dump(tt_ctl_t *ctl, char **args) {
    if (ctl->cfg.timeout_ms < 4000)
        ctl->cfg.timeout_ms = 4000;
    Tether__DumpRequest req = TETHER__DUMP_REQUEST__INIT;
    tt_env_t env;
    tt_wire_env_init(&env, args[0], "tetherctl", 0, 1);
    env.body_case = TETHER__ENVELOPE__BODY_DUMP;
    env.dump = &req;
    return tt_ctl_job_query(ctl, args[0], &env, TETHER__ENVELOPE__BODY_DUMP_REPLY, show_dump);
}

/* ---- forget ---- */

static void show_forgotten(const tt_ctl_t *ctl, const char *job, const tt_env_t *reply) {
    (void)reply;
    if (ctl->cfg.json) {
        printf("{\"job_id\":");
        tt_ctl_json_str(stdout, job);
        printf(",\"forgotten\":true}\n");
    } else {
        printf("job %s forgotten: its id can start a new run (its checkpoints stay on disk)\n",
               job);
    }
}

static int cmd_forget(tt_ctl_t *ctl, char **args) {
    Tether__ForgetJob req = TETHER__FORGET_JOB__INIT;
    tt_env_t env;
    tt_wire_env_init(&env, args[0], "tetherctl", 0, 1);
    env.body_case = TETHER__ENVELOPE__BODY_FORGET;
    env.forget = &req;
    return tt_ctl_job_query(ctl, args[0], &env, TETHER__ENVELOPE__BODY_ACK, show_forgotten);
}

/* ---- drain ---- */

/* Whether `worker` is still a member of `job`: 1, 0, or -1 (asked in vain).
 * *world and *gen: the generation's. */
static int still_member(tt_ctl_t *ctl, const char *job, const char *worker, size_t *world,
                        uint64_t *gen) {
    Tether__MembersRequest req = TETHER__MEMBERS_REQUEST__INIT;
    tt_env_t env;
    tt_zmq_rx_t rx;
    tt_wire_env_init(&env, job, "tetherctl", 0, 1);
    env.body_case = TETHER__ENVELOPE__BODY_MEMBERS;
    env.members = &req;
    if (tt_ctl_job_request(ctl, job, &env, TETHER__ENVELOPE__BODY_MEMBERS_REPLY, &rx) != 0)
        return -1;
    const Tether__MembersReply *r = rx.env->members_reply;
    int in = 0;
    for (size_t i = 0; i < r->n_members; i++)
        in |= strcmp(r->members[i]->worker_id, worker) == 0;
    *world = r->n_members;
    *gen = r->generation;
    tt_zmq_rx_close(&rx);
    return in;
}

/* --wait: every 100 ms until the worker is gone, within --timeout-ms. */
static int wait_drained(tt_ctl_t *ctl, const char *job, const char *worker) {
    uint64_t deadline = tt_clock_mono_ms() + (uint64_t)ctl->cfg.timeout_ms;
    size_t world = 0;
    uint64_t gen = 0;
    int in;
    while ((in = still_member(ctl, job, worker, &world, &gen)) == 1 &&
           tt_ctl_remaining_ms(deadline) > 0)
        tt_clock_sleep_ms(100);
    if (in != 0) {
        if (in == 1)
            fprintf(stderr, "tetherctl: %s is still a member of job %s after %lld ms\n", worker,
                    job, (long long)ctl->cfg.timeout_ms);
        return TT_CTL_EXIT_FAIL;
    }
    if (ctl->cfg.json) {
        printf("{\"job_id\":");
        tt_ctl_json_str(stdout, job);
        printf(",\"drained\":");
        tt_ctl_json_str(stdout, worker);
        printf(",\"generation\":%" PRIu64 ",\"members\":%zu}\n", gen, world);
    } else {
        printf("%s left job %s: generation %" PRIu64 " goes on with %zu member(s)\n", worker, job,
               gen, world);
    }
    return TT_CTL_EXIT_OK;
}

static int cmd_drain(tt_ctl_t *ctl, char **args) {
    Tether__DrainWorker req = TETHER__DRAIN_WORKER__INIT;
    req.worker_id = args[1];
    req.now = ctl->cfg.now != 0;
    tt_env_t env;
    tt_zmq_rx_t rx;
    tt_wire_env_init(&env, args[0], "tetherctl", 0, 1);
    env.body_case = TETHER__ENVELOPE__BODY_DRAIN;
    env.drain = &req;
    int rc = tt_ctl_job_request(ctl, args[0], &env, TETHER__ENVELOPE__BODY_ACK, &rx);
    if (rc != TT_CTL_EXIT_OK)
        return rc;
    tt_zmq_rx_close(&rx);
    if (ctl->cfg.wait)
        return wait_drained(ctl, args[0], args[1]);
    if (ctl->cfg.json) {
        printf("{\"job_id\":");
        tt_ctl_json_str(stdout, args[0]);
        printf(",\"draining\":");
        tt_ctl_json_str(stdout, args[1]);
        printf(",\"now\":%s}\n", req.now ? "true" : "false");
    } else {
        printf("%s leaves job %s %s\n", args[1], args[0],
               req.now ? "now (evicted; the others redo their step in flight)"
                       : "at the next step boundary every member reaches");
    }
    return TT_CTL_EXIT_OK;
}

/* Offline: a new cluster key file, never over an existing one. */
static int cmd_keygen(tt_ctl_t *ctl, char **args) {
    char err[512] = "";
    if (tt_zauth_generate(args[0], ctl->cfg.encrypt_data, err, sizeof(err)) != TT_OK) {
        fprintf(stderr, "tetherctl: %s\n", err);
        return TT_CTL_EXIT_FAIL;
    }
    printf("wrote a new cluster key to %s (mode 0600; bulk data %s): give it to every "
           "process of the cluster (--key-file, TETHER_KEY_FILE)\n",
           args[0], ctl->cfg.encrypt_data ? "authenticated and encrypted" : "authenticated");
    return TT_CTL_EXIT_OK;
}

/* ---- dispatch ---- */

static const ctl_cmd_t ctl_cmds[] = {
    {"status", 0, "status",
     "jobs: id, state, generation, members, waiting, last step, epoch and share done, failure; "
     "the rank 0 an NCCL init waits for",
     cmd_status, 0},
    {"members", 1, "members JOB",
     "members of JOB: rank, worker id, host, endpoint, heartbeat age, last step, mean step and "
     "wait times, the straggler",
     cmd_members, 0},
    {"shards", 0, "shards",
     "shard servers: id, endpoint, bytes held, chunks, heartbeat age, alive/dead", cmd_shards, 0},
    {"dump", 1, "dump JOB", "flight recorders of every member of JOB (collectives, newest last)",
     cmd_dump, 0},
    {"forget", 1, "forget JOB",
     "drop a finished or failed JOB's record so its id can start a new run", cmd_forget, 0},
    {"drain", 2, "drain JOB WORKER",
     "WORKER leaves JOB at the next step boundary (no step fails) and ends cleanly; --now: at "
     "once; --wait: until it is gone",
     cmd_drain, 0},
    {"checkpoint", 1, "checkpoint JOB",
     "ask JOB for a checkpoint at its next step boundary; --wait: until one is committed (exit "
     "1 at once if an attempt fails, with the reason)",
     tt_ctl_cmd_checkpoint, 0},
    {"checkpoint", 2, "checkpoint verify DIR",
     "offline: re-read every part DIR's manifest lists, check sizes and CRCs",
     tt_ctl_cmd_checkpoint_verify, 1},
    /* Offline for a DIR; for a JOB it connects itself (tt_ctl_cmd_checkpoints). */
    {"checkpoints", 1, "checkpoints JOB|DIR",
     "JOB: committed checkpoints (id, step, bytes, created, duration, dir) and the newest "
     "failed attempt; "
     "DIR (with a '/'): offline, from the manifests under that root",
     tt_ctl_cmd_checkpoints, 1},
    {"keygen", 1, "keygen FILE",
     "offline: write a new cluster key to FILE (mode 0600, never over a file); "
     "--encrypt-data: bulk data encrypted too",
     cmd_keygen, 1},
};
#define CTL_NCMDS (sizeof(ctl_cmds) / sizeof(ctl_cmds[0]))

static const char ctl_usage_head[] = "usage: tetherctl [options] COMMAND [args] [options]";

static void usage(FILE *out) {
    fprintf(out, "%s\n\nCommands:\n", ctl_usage_head);
    for (size_t i = 0; i < CTL_NCMDS; i++)
        fprintf(out, "  %-21s %s\n", ctl_cmds[i].synopsis, ctl_cmds[i].help);
    fprintf(out, "\nExit status: 0 success, 1 query failed, 2 bad usage.\n\n");
    tt_config_print_help(ctl_table, CTL_NCFG, "Options may come before or after the command.", out);
}

static int is_bool_flag(const char *name) {
    for (size_t i = 0; i < CTL_NCFG; i++) {
        if (strcmp(ctl_table[i].name, name) == 0)
            return ctl_table[i].type == TT_CFG_BOOL;
    }
    return 0;
}

/* Flags after the command ("tetherctl status --json"): tt_config_load
 * stops at the first positional argument, so the rest is parsed here with
 * the same table. Positionals are compacted into `pos`. */
static int late_flags(tt_ctl_cfg_t *cfg, int argc, char **argv, int first, char **pos, int *npos) {
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
        if (val == NULL && is_bool_flag(name))
            val = "true"; /* a bool flag after the command takes no separate value */
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
static int parse_args(tt_ctl_t *ctl, int argc, char **argv, const ctl_cmd_t **cmd, char **pos,
                      int *npos) {
    char err[512] = "";
    int first = argc;
    int rc = tt_config_load(ctl_table, CTL_NCFG, &ctl->cfg, argc, argv, ctl_usage_head, &first, err,
                            sizeof(err));
    if (rc == TT_CONFIG_HELP)
        return TT_CTL_EXIT_OK; /* tt_config printed the options */
    if (rc != TT_OK) {
        fprintf(stderr, "tetherctl: %s\n", err);
        usage(stderr);
        return TT_CTL_EXIT_USAGE;
    }
    rc = late_flags(&ctl->cfg, argc, argv, first, pos, npos);
    if (rc == TT_CONFIG_HELP) {
        usage(stdout);
        return TT_CTL_EXIT_OK;
    }
    if (rc != TT_OK || *npos == 0) {
        usage(stderr);
        return TT_CTL_EXIT_USAGE;
    }
    *cmd = find_cmd(pos[0], *npos - 1);
    if (*cmd == NULL || *npos - 1 != (*cmd)->nargs) {
        if (*cmd == NULL)
            fprintf(stderr, "tetherctl: unknown command '%s'\n", pos[0]);
        else
            fprintf(stderr, "tetherctl: usage: tetherctl %s\n", (*cmd)->synopsis);
        usage(stderr);
        return TT_CTL_EXIT_USAGE;
    }
    return -1;
}

int main(int argc, char **argv) {
    tt_log_init_from_env();
    tt_log_set_identity("tetherctl", "");
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return TT_CTL_EXIT_OK;
        }
    }
    tt_ctl_t ctl = {0};
    const ctl_cmd_t *cmd = NULL;
    char **pos = calloc((size_t)argc + 1, sizeof(*pos));
    int npos = 0;
    if (pos == NULL)
        return TT_CTL_EXIT_FAIL;
    int rc = parse_args(&ctl, argc, argv, &cmd, pos, &npos);
    if (rc < 0) {
        rc = cmd->offline || tt_ctl_connect(&ctl) == TT_OK ? cmd->run(&ctl, pos + 1)
                                                           : TT_CTL_EXIT_FAIL;
        tt_ctl_close(&ctl);
    }
    free(pos);
    return rc;
}
