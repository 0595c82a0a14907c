/* ctl_io: what every tetherctl command shares: the DEALER to the
 * coordinator and its bounded request/reply, the error report of a reply,
 * and the output helpers (JSON strings, aligned tables). It owns no command
 * and no answer: tetherctl.c and ctl_ckpt.c do. */
#include "ctl_io.h"
#include "tt_clock.h"
#include "tt_status.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- talking to the coordinator ---- */

int tt_ctl_connect(tt_ctl_t *ctl) {
    char pid[32], err[256] = "";
    snprintf(pid, sizeof(pid), "%ld", (long)getpid());
    int rc = tt_zauth_load(&ctl->key, ctl->cfg.key_file, err, sizeof(err));
    if (rc != TT_OK) {
        fprintf(stderr, "tetherctl: %s\n", err);
        return rc;
    }
    rc = tt_zreq_open(&ctl->z, ctl->cfg.coordinator, &ctl->key, "ctl", pid, err, sizeof(err));
    if (rc != TT_OK)
        fprintf(stderr, "tetherctl: %s\n", err);
    else /* a refused port is said at once, not after --timeout-ms */
        tt_zreq_give_up_after(ctl->z, 3);
    return rc;
}

void tt_ctl_close(tt_ctl_t *ctl) {
    tt_zreq_close(&ctl->z);
}

long tt_ctl_remaining_ms(uint64_t deadline) {
    uint64_t now = tt_clock_mono_ms();
    return now >= deadline ? 0 : (long)(deadline - now);
}

/* Sends `env` and receives the reply into `rx` within --timeout-ms.
 * Returns TT_CTL_EXIT_OK with rx->env set, or TT_CTL_EXIT_FAIL (reported). */
int tt_ctl_request(tt_ctl_t *ctl, const tt_env_t *env, tt_zmq_rx_t *rx) {
    char err[512] = "";
    if (tt_zreq_call(ctl->z, env, NULL, 0, (uint32_t)ctl->cfg.timeout_ms, rx, err, sizeof(err)) ==
        TT_OK)
        return TT_CTL_EXIT_OK;
    fprintf(stderr, "tetherctl: cannot reach the coordinator: %s\n", err);
    return TT_CTL_EXIT_FAIL;
}

/* Reports an Error body, or a body of the wrong kind. 1 when reported. */
int tt_ctl_reply_is_error(const tt_env_t *env, int want_case, const char *what) {
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

void tt_ctl_json_str(FILE *out, const char *s) {
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

int tt_ctl_tbl_row(tt_ctl_tbl_t *t, const char *const *vals) {
    if (t->nrows == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 16;
        void *p = realloc(t->cells, cap * sizeof(*t->cells));
        if (p == NULL)
            return TT_ENOMEM;
        t->cells = p;
        t->cap = cap;
    }
    for (int i = 0; i < t->ncols; i++)
        snprintf(t->cells[t->nrows][i], TT_CTL_TBL_CELL, "%s", vals[i] ? vals[i] : "");
    t->nrows++;
    return TT_OK;
}

/* Prints the rows with each column as wide as its widest cell. */
void tt_ctl_tbl_print(tt_ctl_tbl_t *t, FILE *out) {
    size_t w[TT_CTL_TBL_MAX_COLS] = {0};
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

/* A request about `job` (env, its body set): sends it and receives a reply
 * of body `want` into *rx (TT_CTL_EXIT_OK: release it), or reports why not. */
int tt_ctl_job_request(tt_ctl_t *ctl, const char *job, const tt_env_t *env, int want,
                       tt_zmq_rx_t *rx) {
    if (strlen(job) > TT_WIRE_MAX_ID) {
        fprintf(stderr, "tetherctl: job id longer than %u bytes\n", TT_WIRE_MAX_ID);
        return TT_CTL_EXIT_USAGE;
    }
    int rc = tt_ctl_request(ctl, env, rx);
    if (rc == TT_CTL_EXIT_OK && tt_ctl_reply_is_error(rx->env, want, job)) {
        tt_zmq_rx_close(rx);
        rc = TT_CTL_EXIT_FAIL;
    }
    return rc;
}

/* tt_ctl_job_request, then the reply goes to show(). */
int tt_ctl_job_query(tt_ctl_t *ctl, const char *job, tt_env_t *env, int want, tt_ctl_show_fn show) {
    tt_zmq_rx_t rx;
    int rc = tt_ctl_job_request(ctl, job, env, want, &rx);
    if (rc == TT_CTL_EXIT_OK) {
        show(ctl, job, rx.env);
        tt_zmq_rx_close(&rx);
    }
    return rc;
}
