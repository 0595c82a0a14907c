/* tt_ckpt_dir: a job's checkpoint root directory. It owns the layout
 * (<root>/<checkpoint id>/ holds the part files and MANIFEST; <root>/latest
 * names the newest committed checkpoint), the `latest` pointer, listing of
 * committed checkpoints, retention, and whole-checkpoint verification. A
 * checkpoint is committed exactly when its MANIFEST exists and decodes
 * (tt_manifest validates it); a directory without one is an unfinished or
 * abandoned attempt and is never listed or loaded. It does not decide when
 * to checkpoint or who writes which part (the coordinator does).
 * All functions block on disk I/O (call them off the event loop) and are
 * reentrant; two processes must not run retention on one root at once. */
#ifndef TT_CKPT_DIR_H
#define TT_CKPT_DIR_H

#include "tt_manifest.h"

#include <stddef.h>
#include <stdint.h>

#define TT_CKPT_LATEST_FILE "latest"
#define TT_CKPT_PATH_MAX    4096u

/* Creates "<root>/<id>" (and root) and fsyncs root so the directory entry
 * survives a crash; `path` (TT_CKPT_PATH_MAX bytes, may be NULL) receives
 * the directory. 0, TT_EINVAL (bad id), TT_EEXIST (already there: ids are
 * never reused), TT_ESYS. */
int tt_ckpt_dir_create(const char *root, const char *id, char *path, char *err, size_t errlen);

/* Points "<root>/latest" at `id` (tmp + fsync + rename). Call only after
 * the manifest of `id` is stored. 0, TT_EINVAL, TT_ESYS. */
int tt_ckpt_latest_write(const char *root, const char *id, char *err, size_t errlen);

/* Reads the id "<root>/latest" names into `id` (TT_MF_ID_MAX bytes).
 * 0, TT_ENOTFOUND (no pointer yet), TT_ECORRUPT (not one valid id). It
 * does not check that the checkpoint exists. */
int tt_ckpt_latest_read(const char *root, char *id, char *err, size_t errlen);

typedef struct tt_ckpt_entry {
    char id[TT_MF_ID_MAX];
    uint64_t step;
    uint64_t epoch;
    uint64_t created_unix_ms;
    uint64_t duration_ms;
    uint64_t bytes; /* sum of the part sizes the manifest lists */
} tt_ckpt_entry_t;

/* Committed checkpoints under root, oldest first (by step, then creation
 * time, then id). *out is malloc'd (owned by the caller; NULL when *n is
 * 0). Directories whose manifest is missing or invalid are skipped and
 * logged at debug level. 0 (also for a missing root: no checkpoints),
 * TT_ESYS, TT_ENOMEM. */
int tt_ckpt_list(const char *root, tt_ckpt_entry_t **out, size_t *n, char *err, size_t errlen);

/* Retention: keeps the newest `keep` (>= 1) committed checkpoints and the
 * one `latest` names, removes the other committed ones. Each removal
 * deletes MANIFEST first (un-committing it atomically), then the parts and
 * the directory, so a crash midway leaves an uncommitted leftover, never a
 * committed checkpoint with missing parts. Then the leftovers of
 * checkpoints that never committed: "step-<digits>" directories without a
 * MANIFEST file whose step is below that of the checkpoint `latest` names
 * (tt_ckpt_dir.c says why no write in flight is among them). Because only
 * checkpoints older than `keep` committed ones go, run it after each
 * commit, once `latest` names the new one. *removed (may be NULL) counts
 * both. 0, TT_EINVAL (keep 0), TT_ESYS, TT_ENOMEM. */
int tt_ckpt_retain(const char *root, size_t keep, size_t *removed, char *err, size_t errlen);

/* Result of verifying one part. */
typedef struct tt_ckpt_part_check {
    char file[TT_CKPT_NAME_MAX];
    int rc;          /* 0 valid, else TT_ENOTFOUND / TT_ECORRUPT / TT_ESYS */
    uint64_t size;   /* on disk (0 when missing) */
    uint32_t crc32c; /* computed (0 when not computed) */
    char msg[512];   /* why it failed; "" when valid */
} tt_ckpt_part_check_t;

typedef struct tt_ckpt_report {
    tt_manifest_t manifest; /* zeroed when the manifest did not load */
    uint32_t nparts;
    tt_ckpt_part_check_t *parts; /* one per manifest part, in manifest order */
    int rc;                      /* 0 valid; else the first failure */
    char msg[600];               /* verdict sentence naming the first bad part */
} tt_ckpt_report_t;

/* Re-reads every part DIR's manifest lists and checks size, CRC and that
 * each header agrees with the manifest (kind, planes, ranges). Fills *rep
 * (release with tt_ckpt_report_free) and returns rep->rc: 0, TT_ENOTFOUND
 * (no manifest, or a part missing), TT_ECORRUPT, TT_ESYS, TT_ENOMEM. */
int tt_ckpt_verify(const char *dir, tt_ckpt_report_t *rep);
void tt_ckpt_report_free(tt_ckpt_report_t *rep);

/* Reads the whole logical plane of state kind `state` (tt_state_kind_t) of
 * the checkpoint in `dir`, described by `m`, into dst (`bytes` = the flat
 * space's size): the reads tt_manifest_layout + tt_reshard_plan give, from
 * whichever parts hold them, so any writer layout loads into any reader.
 * 0, TT_ENOTFOUND (a byte of the range is in no part, or a part file is
 * missing), TT_ECORRUPT, TT_ESYS, TT_ENOMEM; `err` says which. Does not
 * verify CRCs (tt_ckpt_verify does). Blocking I/O. */
int tt_ckpt_read_plane(const tt_manifest_t *m, const char *dir, uint32_t state, void *dst,
                       uint64_t bytes, char *err, size_t errlen);

/* The newest committed checkpoint under root that verifies: its id into
 * `id` (TT_MF_ID_MAX bytes). `err` lists why newer ones were skipped.
 * 0, TT_ENOTFOUND (none verifies), TT_ESYS, TT_ENOMEM. */
int tt_ckpt_latest_valid(const char *root, char *id, char *err, size_t errlen);

#endif
