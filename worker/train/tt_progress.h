/* tt_progress: how tether-train shows progress and records metrics. It owns
 * the formatting of the live progress bar (redrawn with '\r' on a terminal),
 * the periodic plain log lines (when output is not a terminal), the epoch
 * and final summaries, and the per-epoch JSON lines of --metrics-json. It
 * writes only to the FILE* / path the caller gives; it does not decide what
 * is a terminal or run any training.
 * Thread safety: one tt_progress_t per thread. */
#ifndef TT_PROGRESS_H
#define TT_PROGRESS_H

#include "tt_trainer.h"

#include <stdio.h>

typedef struct {
    FILE *out;          /* borrowed; stderr for tether-train */
    int tty;            /* 1: redraw a bar with '\r'; 0: plain lines */
    uint64_t log_every; /* plain mode: one line every N steps (0: none) */
    int bar_open;       /* a bar is drawn and needs a newline */
} tt_progress_t;

/* Formats the bar line (no '\r' or newline) for report r into buf; pure.
 * Example: "epoch 3/10 [#######.....] 120/235 loss 0.4123 41.2k ex/s
 * comm 0% eta 1.2s". Returns the snprintf length. */
int tt_progress_format(char *buf, size_t len, const tt_step_report_t *r, int bar_width);

/* Step callback (matches tt_trainer_step_fn with ctx = tt_progress_t *). */
void tt_progress_step(void *ctx, const tt_step_report_t *r);

/* Ends the bar and prints the epoch line (losses, accuracy, rates). */
void tt_progress_epoch(tt_progress_t *p, const tt_epoch_stats_t *s, uint64_t epochs);

/* Formats one metrics JSON object (one line, no newline) into buf; pure.
 * Returns the snprintf length. */
int tt_progress_json(char *buf, size_t len, const tt_epoch_stats_t *s);

/* Appends the JSON object of s and a newline to `path`. Returns 0 or
 * TT_EIO (message in err). */
int tt_progress_json_append(const char *path, const tt_epoch_stats_t *s, char *err, size_t errlen);

#endif
