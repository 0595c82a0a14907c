/* ctl_io: the parts of tetherctl every command uses. tt_ctl_t holds the
 * parsed options and the DEALER to the coordinator (ZMQ_IMMEDIATE, linger
 * 0); a request waits for its reply at most --timeout-ms, so an unreachable
 * coordinator is reported, never waited on forever. Output helpers print
 * JSON strings and aligned tables. Commands live in tetherctl.c and
 * ctl_ckpt.c. Single-threaded: one process, one socket. */
#ifndef TT_CTL_IO_H
#define TT_CTL_IO_H

#include "tt_config.h"
#include "tt_zmq.h"
#include "tt_zreq.h"

#include <stdint.h>
#include <stdio.h>

/* Exit codes: 0 success, 1 the query failed (unreachable, unknown job,
 * coordinator error), 2 bad usage. */
#define TT_CTL_EXIT_OK    0
#define TT_CTL_EXIT_FAIL  1
#define TT_CTL_EXIT_USAGE 2

typedef struct tt_ctl_cfg {
    char coordinator[TT_CFG_STR_MAX];
    char key_file[TT_CFG_STR_MAX];
    int json;
    int wait;
    int now;          /* drain: at once */
    int encrypt_data; /* keygen: data = curve */
    int64_t timeout_ms;
} tt_ctl_cfg_t;

typedef struct tt_ctl {
    tt_ctl_cfg_t cfg;
    tt_zauth_key_t key; /* cfg.key_file, loaded by tt_ctl_connect */
    tt_zreq_t *z;       /* NULL until tt_ctl_connect */
} tt_ctl_t;

/* Opens the DEALER to cfg.coordinator (tt_zreq; connecting happens in the
 * background). TT_OK or an error, reported on stderr. */
int tt_ctl_connect(tt_ctl_t *ctl);
/* Closes what tt_ctl_connect opened; safe to call when it was not. */
void tt_ctl_close(tt_ctl_t *ctl);

/* Milliseconds until a tt_clock_mono_ms deadline (0 when passed). */
long tt_ctl_remaining_ms(uint64_t deadline);

/* Sends `env` and receives the reply with its request id into `rx` within
 * --timeout-ms. TT_CTL_EXIT_OK with rx->env set (release with
 * tt_zmq_rx_close), or TT_CTL_EXIT_FAIL (reported). */
int tt_ctl_request(tt_ctl_t *ctl, const tt_env_t *env, tt_zmq_rx_t *rx);

/* Reports an Error body, or a body other than `want_case`, on stderr
 * (`what` names the job for EJOB). 1 when reported, else 0. */
int tt_ctl_reply_is_error(const tt_env_t *env, int want_case, const char *what);

/* A request about `job` (env, its body set): sends it and receives a reply
 * of body `want` into *rx (TT_CTL_EXIT_OK: release it), or reports why not
 * (TT_CTL_EXIT_USAGE for a job id too long, else TT_CTL_EXIT_FAIL). */
int tt_ctl_job_request(tt_ctl_t *ctl, const char *job, const tt_env_t *env, int want,
                       tt_zmq_rx_t *rx);

typedef void (*tt_ctl_show_fn)(const tt_ctl_t *ctl, const char *job, const tt_env_t *reply);

/* tt_ctl_job_request, then the reply goes to show(). */
int tt_ctl_job_query(tt_ctl_t *ctl, const char *job, tt_env_t *env, int want, tt_ctl_show_fn show);

/* `s` (NULL: "") as a quoted, escaped JSON string. */
void tt_ctl_json_str(FILE *out, const char *s);

#define TT_CTL_TBL_MAX_COLS 8
#define TT_CTL_TBL_CELL     (TT_WIRE_MAX_TEXT + 8) /* a checkpoint dir or failure in full */

/* An aligned table: set ncols, add rows (the first is the header), print. */
typedef struct tt_ctl_tbl {
    int ncols;
    size_t nrows, cap;
    char (*cells)[TT_CTL_TBL_MAX_COLS][TT_CTL_TBL_CELL];
} tt_ctl_tbl_t;

/* Copies ncols cells (NULL: ""). TT_OK or TT_ENOMEM (row dropped). */
int tt_ctl_tbl_row(tt_ctl_tbl_t *t, const char *const *vals);
/* Prints every row, each column as wide as its widest cell, and frees the
 * rows. */
void tt_ctl_tbl_print(tt_ctl_tbl_t *t, FILE *out);

#endif
