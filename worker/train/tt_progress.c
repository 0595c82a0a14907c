/* tt_progress: presentation of training progress. Kept apart from the loop
 * so the library stays silent and the formats can be tested as pure
 * functions. It does not measure anything itself: every number comes from
 * the trainer's reports. */
#include "tt_progress.h"

#include "tt_status.h"

#include <errno.h>
#include <string.h>

/* 41234 -> "41.2k": rates are easier to read scaled. */
static void fmt_rate(char *buf, size_t len, double v) {
    if (v >= 1e6)
        snprintf(buf, len, "%.2fM", v / 1e6);
    else if (v >= 1e3)
        snprintf(buf, len, "%.1fk", v / 1e3);
    else
        snprintf(buf, len, "%.0f", v);
}

int tt_progress_format(char *buf, size_t len, const tt_step_report_t *r, int bar_width) {
    char bar[128], rate[32];
    if (bar_width < 1 || bar_width > (int)sizeof(bar) - 1)
        bar_width = 20;
    int fill = r->steps ? (int)((double)bar_width * (double)r->step / (double)r->steps) : 0;
    for (int i = 0; i < bar_width; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[bar_width] = '\0';
    fmt_rate(rate, sizeof(rate), r->examples_per_s);
    return snprintf(buf, len,
                    "epoch %llu/%llu [%s] %llu/%llu loss %.4f lr %.4g "
                    "%s ex/s comm %.0f%% eta %.1fs",
                    (unsigned long long)r->epoch + 1, (unsigned long long)r->epochs, bar,
                    (unsigned long long)r->step, (unsigned long long)r->steps, r->loss, r->lr, rate,
                    100.0 * r->comm_share, r->eta_s);
}

void tt_progress_step(void *ctx, const tt_step_report_t *r) {
    tt_progress_t *p = ctx;
    char line[256];
    if (p->tty) {
        /* Redrawing every step would cost more than a small step: only
         * redraw about 50 times per epoch and at the end. */
        uint64_t every = r->steps / 50 ? r->steps / 50 : 1;
        if (r->step % every != 0 && r->step != r->steps)
            return;
        tt_progress_format(line, sizeof(line), r, 24);
        fprintf(p->out, "\r%s\033[K", line);
        fflush(p->out);
        p->bar_open = 1;
        return;
    }
    if (p->log_every == 0 || r->global_step % p->log_every != 0)
        return;
    tt_progress_format(line, sizeof(line), r, 10);
    fprintf(p->out, "%s\n", line);
}

void tt_progress_epoch(tt_progress_t *p, const tt_epoch_stats_t *s, uint64_t epochs) {
    char rate[32];
    if (p->bar_open)
        fputc('\n', p->out);
    p->bar_open = 0;
    fmt_rate(rate, sizeof(rate), s->examples_per_s);
    double busy = s->compute_s + s->comm_exposed_s;
    fprintf(p->out,
            "epoch %llu/%llu: train loss %.4f  test loss %.4f  test acc "
            "%.4f  %s ex/s  %.2fs (comm %.0f%%, eval %.2fs)\n",
            (unsigned long long)s->epoch, (unsigned long long)epochs, s->train_loss, s->test_loss,
            s->test_accuracy, rate, s->wall_s, busy > 0 ? 100.0 * s->comm_exposed_s / busy : 0.0,
            s->eval_s);
    fflush(p->out);
}

int tt_progress_json(char *buf, size_t len, const tt_epoch_stats_t *s) {
    return snprintf(buf, len,
                    "{\"epoch\":%llu,\"step\":%llu,\"train_loss\":%.6f,"
                    "\"test_loss\":%.6f,\"test_accuracy\":%.6f,"
                    "\"examples_per_s\":%.1f,\"wall_s\":%.6f,\"compute_s\":%.6f,"
                    "\"comm_exposed_s\":%.6f,\"world_size\":%d,"
                    "\"generation\":%llu,\"examples\":%.0f}",
                    (unsigned long long)s->epoch, (unsigned long long)s->step, s->train_loss,
                    s->test_loss, s->test_accuracy, s->examples_per_s, s->wall_s, s->compute_s,
                    s->comm_exposed_s, s->world_size, (unsigned long long)s->generation,
                    s->examples);
}

int tt_progress_json_append(const char *path, const tt_epoch_stats_t *s, char *err, size_t errlen) {
    char line[512];
    tt_progress_json(line, sizeof(line), s);
    FILE *f = fopen(path, "a");
    if (f == NULL) {
        snprintf(err, errlen, "%s: cannot open for append: %s", path, strerror(errno));
        return TT_EIO;
    }
    int bad = fprintf(f, "%s\n", line) < 0;
    bad |= fclose(f) != 0;
    if (bad) {
        snprintf(err, errlen, "%s: write failed: %s", path, strerror(errno));
        return TT_EIO;
    }
    return TT_OK;
}
