/* launch_env: what a child of tether-launch needs from the host before it
 * can start: its environment block (the launcher's own, with TETHER_*
 * variables set on top), the path of its executable, free TCP ports, and a
 * state directory that can be removed again. It owns none of the children
 * and no libuv handle. Thread safety: none needed (one thread). */
#ifndef TT_LAUNCH_ENV_H
#define TT_LAUNCH_ENV_H

#include <stddef.h>

/* Builds a NULL-terminated environment: every "KEY=VALUE" of `base` whose
 * KEY is not named by `sets`, then every "KEY=VALUE" entry of `sets` (a
 * later entry for the same KEY wins). A bare "KEY" in `sets` removes KEY.
 * Returns TT_OK with *out owned by the caller (free with
 * tt_launch_env_free), TT_EINVAL for an empty KEY, TT_ENOMEM. */
int tt_launch_env_build(char ***out, char *const *base, const char *const *sets, size_t nsets);

/* Frees a block from tt_launch_env_build; accepts NULL, sets *env = NULL. */
void tt_launch_env_free(char ***env);

/* Finds an executable. A `name` containing '/' is taken as a path (relative
 * to the working directory) and only checked. Otherwise each of `dirs`
 * (NULL entries are skipped) is tried in order, then each directory of
 * `path_env` (a PATH value; may be NULL). Writes the path found to `out`.
 * Returns TT_OK, TT_ENOTFOUND (nothing executable), TT_EINVAL (does not
 * fit in `n`). */
int tt_launch_find_exe(char *out, size_t n, const char *name, const char *const *dirs, size_t ndirs,
                       const char *path_env);

/* The directory part of `path` ("." when it has none) into out. */
void tt_launch_dirname(char *out, size_t n, const char *path);

/* Finds a port on `host` (an IPv4 address) that binds now, preferring
 * ports below the kernel's ephemeral range, and that no other tether-launch
 * of this host has claimed; claims it (launch_env.c says why and how) and
 * closes the socket again. *claim (may be NULL) gets the claim's file
 * descriptor, -1 when none could be taken: keep it open while the port is
 * the child's, and give it to tt_launch_release_port when the port is given
 * up (the claim also ends when this process exits, however it exits, but
 * then its file stays behind). A process that is not a
 * tether-launch may still take the port before the child binds it;
 * callers pass it on at once. Returns TT_OK or TT_ESYS (err says why). */
int tt_launch_free_port(const char *host, int *port, int *claim, char *err, size_t errlen);

/* Ends the claim tt_launch_free_port took on `port` (claim >= 0: its
 * descriptor; -1: nothing to do) and removes its file. */
void tt_launch_release_port(int port, int claim);

/* Removes `path` and everything below it (does not follow symlinks).
 * Returns TT_OK (also when it did not exist) or TT_EIO. */
int tt_launch_rmtree(const char *path);

#endif
