/* tt_config: parsing and precedence for the per-program config tables. */
#include "tt_config.h"
#include "tt_log.h"
#include "tt_status.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define CSET_ERR(err, errlen, ...)                                                                 \
    do {                                                                                           \
        if ((err) != NULL && (errlen) > 0)                                                         \
            snprintf((err), (errlen), __VA_ARGS__);                                                \
    } while (0)

static const tt_config_entry_t *find(const tt_config_entry_t *t, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++) {
        if (strcmp(t[i].name, name) == 0)
            return &t[i];
    }
    return NULL;
}

static int parse_bool(const char *v, int *out) {
    static const char *const yes[] = {"1", "true", "yes", "on"};
    static const char *const no[] = {"0", "false", "no", "off"};
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(v, yes[i]) == 0)
            return *out = 1, TT_OK;
        if (strcasecmp(v, no[i]) == 0)
            return *out = 0, TT_OK;
    }
    return TT_EINVAL;
}

static int set_entry(const tt_config_entry_t *e, void *target, const char *v, const char *origin,
                     char *err, size_t errlen) {
    char *field = (char *)target + e->offset;
    if (e->type == TT_CFG_STR) {
        if (strlen(v) >= TT_CFG_STR_MAX) {
            CSET_ERR(err, errlen, "%s: %s is longer than %d bytes", origin, e->name,
                     TT_CFG_STR_MAX - 1);
            return TT_EINVAL;
        }
        snprintf(field, TT_CFG_STR_MAX, "%s", v);
        return TT_OK;
    }
    if (e->type == TT_CFG_BOOL) {
        int b;
        if (parse_bool(v, &b) != TT_OK) {
            CSET_ERR(err, errlen, "%s: %s='%s' is not a boolean (true/false)", origin, e->name, v);
            return TT_EINVAL;
        }
        memcpy(field, &b, sizeof(b));
        return TT_OK;
    }
    char *end = NULL;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || x < e->min || x > e->max) {
        CSET_ERR(err, errlen, "%s: %s='%s' must be an integer in [%" PRId64 ", %" PRId64 "]",
                 origin, e->name, v, e->min, e->max);
        return TT_EINVAL;
    }
    int64_t val = x;
    memcpy(field, &val, sizeof(val));
    return TT_OK;
}

int tt_config_set(const tt_config_entry_t *table, size_t n, void *target, const char *name,
                  const char *value, const char *origin, char *err, size_t errlen) {
    const tt_config_entry_t *e = find(table, n, name);
    if (e == NULL) {
        CSET_ERR(err, errlen, "%s: unknown setting '%s' (see --help)", origin, name);
        return TT_EINVAL;
    }
    return set_entry(e, target, value, origin, err, errlen);
}

static char *trim(char *s) {
    while (isspace((unsigned char)*s))
        s++;
    char *end = s + strlen(s);
    while (end > s && isspace((unsigned char)end[-1]))
        *--end = '\0';
    return s;
}

static int load_file(const tt_config_entry_t *t, size_t n, void *target, const char *path,
                     char *err, size_t errlen) {
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        CSET_ERR(err, errlen, "cannot open config file %s: %s", path, strerror(errno));
        return TT_EINVAL;
    }
    char line[1024];
    int lineno = 0, rc = TT_OK;
    while (rc == TT_OK && fgets(line, sizeof(line), f) != NULL) {
        lineno++;
        char *s = trim(line);
        if (*s == '\0' || *s == '#')
            continue;
        char *eq = strchr(s, '=');
        char origin[600];
        snprintf(origin, sizeof(origin), "%s:%d", path, lineno);
        if (eq == NULL) {
            CSET_ERR(err, errlen, "%s: expected 'name = value'", origin);
            rc = TT_EINVAL;
            break;
        }
        *eq = '\0';
        rc = tt_config_set(t, n, target, trim(s), trim(eq + 1), origin, err, errlen);
    }
    fclose(f);
    return rc;
}

static void env_name(const char *name, char *out, size_t n) {
    size_t j = snprintf(out, n, "TETHER_");
    for (size_t i = 0; name[i] != '\0' && j + 1 < n; i++)
        out[j++] = name[i] == '-' ? '_' : (char)toupper((unsigned char)name[i]);
    out[j] = '\0';
}

static int load_env(const tt_config_entry_t *t, size_t n, void *target, char *err, size_t errlen) {
    for (size_t i = 0; i < n; i++) {
        char var[128];
        env_name(t[i].name, var, sizeof(var));
        const char *v = getenv(var);
        if (v != NULL && set_entry(&t[i], target, v, var, err, errlen) != TT_OK)
            return TT_EINVAL;
    }
    return TT_OK;
}

static int load_defaults(const tt_config_entry_t *t, size_t n, void *target, char *err,
                         size_t errlen) {
    for (size_t i = 0; i < n; i++) {
        if (set_entry(&t[i], target, t[i].def, "default", err, errlen) != TT_OK)
            return TT_EINVAL;
    }
    return TT_OK;
}

/* Finds --config in argv without interpreting anything else. */
static const char *config_path(int argc, char **argv) {
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
            return argv[i + 1];
        if (strncmp(argv[i], "--config=", 9) == 0)
            return argv[i] + 9;
    }
    return getenv("TETHER_CONFIG");
}

static int parse_flag(const tt_config_entry_t *t, size_t n, void *target, int argc, char **argv,
                      int *i, char *err, size_t errlen) {
    char name[128];
    const char *arg = argv[*i] + 2, *value = NULL;
    const char *eq = strchr(arg, '=');
    size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
    if (len >= sizeof(name)) {
        CSET_ERR(err, errlen, "flag too long: %s", argv[*i]);
        return TT_EINVAL;
    }
    memcpy(name, arg, len);
    name[len] = '\0';
    const tt_config_entry_t *e = find(t, n, name);
    if (e == NULL && strcmp(name, "config") != 0) {
        CSET_ERR(err, errlen, "unknown flag --%s (see --help)", name);
        return TT_EINVAL;
    }
    if (eq != NULL)
        value = eq + 1;
    else if (e != NULL && e->type == TT_CFG_BOOL && (*i + 1 >= argc || argv[*i + 1][0] == '-'))
        value = "true";
    else if (*i + 1 < argc)
        value = argv[++*i];
    else {
        CSET_ERR(err, errlen, "flag --%s needs a value", name);
        return TT_EINVAL;
    }
    if (e == NULL)
        return TT_OK; /* --config, already read */
    char origin[160];
    snprintf(origin, sizeof(origin), "flag --%s", name);
    return set_entry(e, target, value, origin, err, errlen);
}

int tt_config_load(const tt_config_entry_t *table, size_t n, void *target, int argc, char **argv,
                   const char *usage, int *first_positional, char *err, size_t errlen) {
    *first_positional = argc;
    if (load_defaults(table, n, target, err, errlen) != TT_OK)
        return TT_EINVAL;
    const char *path = config_path(argc, argv);
    if (path != NULL && load_file(table, n, target, path, err, errlen) != TT_OK)
        return TT_EINVAL;
    if (load_env(table, n, target, err, errlen) != TT_OK)
        return TT_EINVAL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            tt_config_print_help(table, n, usage, stdout);
            return TT_CONFIG_HELP;
        }
        if (strcmp(argv[i], "--") == 0 || strncmp(argv[i], "--", 2) != 0) {
            *first_positional = strcmp(argv[i], "--") == 0 ? i + 1 : i;
            break;
        }
        if (parse_flag(table, n, target, argc, argv, &i, err, errlen) != TT_OK)
            return TT_EINVAL;
    }
    return TT_CONFIG_RUN;
}

static const char *type_name(tt_cfg_type_t t) {
    return t == TT_CFG_INT ? "int" : t == TT_CFG_BOOL ? "bool" : "string";
}

void tt_config_print_help(const tt_config_entry_t *t, size_t n, const char *usage, FILE *out) {
    fprintf(out, "%s\n\nOptions (flag / environment variable / config-file key):\n", usage);
    for (size_t i = 0; i < n; i++) {
        char var[128];
        env_name(t[i].name, var, sizeof(var));
        fprintf(out, "  --%-24s %s (%s, default '%s'%s)\n  %-26s   env %s\n", t[i].name, t[i].help,
                type_name(t[i].type), t[i].def, t[i].runtime ? ", reloadable" : "", "", var);
    }
    fprintf(out, "  --%-24s read settings from FILE (name = value lines); env TETHER_CONFIG\n",
            "config FILE");
    fprintf(out, "\nPrecedence: default < config file < environment < flag.\n");
}

static void value_text(const tt_config_entry_t *e, const void *target, char *out, size_t n) {
    const char *field = (const char *)target + e->offset;
    if (e->type == TT_CFG_STR) {
        snprintf(out, n, "%s", field);
    } else if (e->type == TT_CFG_BOOL) {
        int b;
        memcpy(&b, field, sizeof(b));
        snprintf(out, n, "%s", b ? "true" : "false");
    } else {
        int64_t v;
        memcpy(&v, field, sizeof(v));
        snprintf(out, n, "%" PRId64, v);
    }
}

void tt_config_log_nondefault(const tt_config_entry_t *t, size_t n, const void *target) {
    for (size_t i = 0; i < n; i++) {
        char cur[TT_CFG_STR_MAX + 32];
        value_text(&t[i], target, cur, sizeof(cur));
        int same = strcmp(cur, t[i].def) == 0;
        if (t[i].type == TT_CFG_BOOL) {
            int b = 0;
            parse_bool(t[i].def, &b);
            same = strcmp(cur, b ? "true" : "false") == 0;
        }
        if (!same)
            TT_INFO("config", "%s = %s (default %s)", t[i].name, cur, t[i].def);
    }
}

void tt_config_write_markdown(const tt_config_entry_t *t, size_t n, const char *title, FILE *out) {
    fprintf(out, "## %s\n\n| flag | env | type | default | range | reloadable | meaning |\n",
            title);
    fprintf(out, "|---|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < n; i++) {
        char var[128], range[64] = "";
        env_name(t[i].name, var, sizeof(var));
        if (t[i].type == TT_CFG_INT)
            snprintf(range, sizeof(range), "%" PRId64 "..%" PRId64, t[i].min, t[i].max);
        fprintf(out, "| `--%s` | `%s` | %s | `%s` | %s | %s | %s |\n", t[i].name, var,
                type_name(t[i].type), t[i].def, range, t[i].runtime ? "yes" : "no", t[i].help);
    }
    fprintf(out, "\n");
}
