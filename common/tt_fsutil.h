/* tt_fsutil: durable file operations. A file written with
 * tt_fs_write_atomic is either the old or the new content after any crash:
 * write to a temporary in the same directory, fsync it, rename over the
 * target, fsync the directory. Readers never see a torn file.
 * Thread safety: reentrant, also for writers of one path (each renames a
 * whole file of its own; the last rename wins); blocking I/O (daemons call these off the loop
 * or where a short stall is acceptable, e.g. the small coordinator state). */
#ifndef TT_FSUTIL_H
#define TT_FSUTIL_H

#include <stddef.h>
#include <stdint.h>

/* Modes files and directories are created with: the process's umask
 * decides, as for mkdir(1) and touch(1). A checkpoint root shared by
 * workers and the daemons that write into it (MANIFEST and `latest` by
 * the coordinator, ps-<k>.bin by shard servers, retention) as members of
 * one group needs umask 0002 and a setgid root; fixed 0755/0644 made
 * that impossible (deploy/systemd/README.md, "Checkpoints"). */
#define TT_FS_FILE_MODE 0666
#define TT_FS_DIR_MODE  0777

/* Returns 0, TT_ESYS (errno preserved) with `err` describing the step. */
int tt_fs_write_atomic(const char *path, const void *data, size_t len, char *err, size_t errlen);

/* Reads a whole file of at most `max` bytes into a malloc'd buffer (*out,
 * owned by the caller). TT_ENOTFOUND when it does not exist, TT_ETOOBIG,
 * TT_ESYS. */
int tt_fs_read_all(const char *path, size_t max, uint8_t **out, size_t *len, char *err,
                   size_t errlen);

/* mkdir -p. */
int tt_fs_mkdirs(const char *path, char *err, size_t errlen);

/* mkdir -p, then proves this process can create a file in the directory
 * (a probe file, removed at once): a root that cannot take a checkpoint
 * is refused at start-up instead of after hours of training. TT_ESYS
 * (errno preserved) with `err` naming the step: a parent that is a file,
 * a path that is not a directory, no permission, a read-only file system. */
int tt_fs_check_writable_dir(const char *path, char *err, size_t errlen);

#endif
