/* tt_config: one table per program drives its configuration file, its
 * --flags, its TETHER_* environment variables, its --help text and
 * docs/config.md, so the four can never disagree. Precedence is
 * default < file < environment < flag. A value out of bounds or of the
 * wrong type is refused with a message naming the setting, where it came
 * from, the value and the allowed range.
 * Names are kebab-case ("heartbeat-ms"): the flag is --heartbeat-ms, the
 * variable TETHER_HEARTBEAT_MS, the file key heartbeat-ms.
 * Thread safety: call from main() before threads start. */
#ifndef TT_CONFIG_H
#define TT_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define TT_CFG_STR_MAX 256

typedef enum {
    TT_CFG_INT,  /* int64_t field */
    TT_CFG_BOOL, /* int field, 0/1; "true/false/yes/no/on/off/1/0" */
    TT_CFG_STR,  /* char[TT_CFG_STR_MAX] field */
} tt_cfg_type_t;

typedef struct tt_config_entry {
    const char *name;
    tt_cfg_type_t type;
    const char *def; /* default, as text */
    int64_t min, max;
    const char *help;
    int runtime; /* may change at run time (re-read on SIGHUP) */
    size_t offset;
} tt_config_entry_t;

/* Outcome of tt_config_load when it did not fail. */
enum { TT_CONFIG_RUN = 0, TT_CONFIG_HELP = 1 };

/* Fill `target` from defaults, the file named by --config FILE or
 * TETHER_CONFIG, the environment, then argv. `--help` prints the help to
 * stdout and returns TT_CONFIG_HELP. Positional arguments (and anything
 * after "--") are left for the caller: their indices are returned through
 * `first_positional` (argc when none). Errors: TT_EINVAL with `err`. */
int tt_config_load(const tt_config_entry_t *table, size_t n, void *target, int argc, char **argv,
                   const char *usage, int *first_positional, char *err, size_t errlen);

/* Set one entry by name from text; `origin` names the source in errors. */
int tt_config_set(const tt_config_entry_t *table, size_t n, void *target, const char *name,
                  const char *value, const char *origin, char *err, size_t errlen);

void tt_config_print_help(const tt_config_entry_t *table, size_t n, const char *usage, FILE *out);

/* Log (INFO) every setting whose value differs from its default. */
void tt_config_log_nondefault(const tt_config_entry_t *table, size_t n, const void *target);

/* Write the table as a Markdown section (for docs/config.md). */
void tt_config_write_markdown(const tt_config_entry_t *table, size_t n, const char *title,
                              FILE *out);

#endif
