/* ctl_ckpt: tetherctl's checkpoint commands (see ctl_ckpt.c). Each takes
 * the command's positional arguments and returns a TT_CTL_EXIT_* code;
 * output goes to stdout (table or --json), errors to stderr. */
#ifndef TT_CTL_CKPT_H
#define TT_CTL_CKPT_H

#include "ctl_io.h"

/* checkpoint JOB [--wait]: args[0] = JOB. Needs a connected ctl. */
int tt_ctl_cmd_checkpoint(tt_ctl_t *ctl, char **args);
/* checkpoint verify DIR: args = {"verify", DIR}. Offline. */
int tt_ctl_cmd_checkpoint_verify(tt_ctl_t *ctl, char **args);
/* checkpoints JOB|DIR: args[0] with a '/' or naming an existing directory
 * is listed offline; otherwise it connects and asks the coordinator. */
int tt_ctl_cmd_checkpoints(tt_ctl_t *ctl, char **args);

/* A failed checkpoint attempt as a JSON object (no newline): `status` and
 * `checkpoints` print the same fields. */
void tt_ctl_ckpt_failure_json(const Tether__CheckpointFailure *f);

#endif
