/* tt_status: the one list of status codes used across tether. The list
 * drives the enum, tt_strerror() and tt_status_name(), so a code, its name
 * and its sentence never drift apart. 0 is success and every error is
 * negative, grouped by who has to act: the caller, the system, a peer, the
 * GPU, or us (a bug). Details belong in log lines and last-error strings,
 * not in more codes. */
#ifndef TT_STATUS_H
#define TT_STATUS_H

#define TT_STATUS_MAP(XX)                                                                          \
    XX(OK, 0, "success")                                                                           \
    /* caller must act */                                                                          \
    XX(EINVAL, -1, "invalid argument")                                                             \
    XX(ECONFLICT, -2, "conflicts with existing settings")                                          \
    XX(ENOTFOUND, -3, "not found")                                                                 \
    XX(EEXIST, -4, "already exists")                                                               \
    XX(ECLOSED, -5, "closed")                                                                      \
    XX(EBUSY, -6, "busy")                                                                          \
    /* system */                                                                                   \
    XX(ENOMEM, -20, "out of memory")                                                               \
    XX(ESYS, -21, "system call failed")                                                            \
    XX(EIO, -22, "input/output error")                                                             \
    XX(ECORRUPT, -23, "data is corrupt")                                                           \
    /* peer or wire */                                                                             \
    XX(EPROTO, -40, "malformed message")                                                           \
    XX(EVERSION, -41, "unsupported protocol version")                                              \
    XX(EJOB, -42, "unknown job")                                                                   \
    XX(ESTALE, -43, "stale generation")                                                            \
    XX(ETOOBIG, -44, "message too large")                                                          \
    XX(ESIZE, -45, "payload size does not match its header")                                       \
    XX(EREMOTE, -46, "peer reported an error")                                                     \
    XX(ETIMEDOUT, -47, "timed out")                                                                \
    XX(EMEMBERSHIP, -48, "membership changed")                                                     \
    XX(EFENCED, -49, "fenced: declared dead, must re-join")                                        \
    XX(EDESYNC, -50, "collective desync between ranks")                                            \
    XX(EUNREACHABLE, -51, "peer unreachable")                                                      \
    XX(EJOBFAILED, -52, "job failed")                                                              \
    XX(EDIVERGED, -53, "replicas diverged")                                                        \
    XX(EAGAIN, -54, "try again")                                                                   \
    XX(EJOBDONE, -55, "job already finished")                                                      \
    XX(EDRAINED, -56, "drained: removed from the job by the operator")                             \
    /* GPU */                                                                                      \
    XX(ECUDA, -60, "CUDA error")                                                                   \
    XX(ENCCL, -61, "NCCL error")                                                                   \
    XX(ENODEV, -62, "no usable device")                                                            \
    /* bug */                                                                                      \
    XX(EINTERNAL, -99, "internal error")

typedef enum {
#define TT_STATUS_ENUM(name, val, msg) TT_##name = (val),
    TT_STATUS_MAP(TT_STATUS_ENUM)
#undef TT_STATUS_ENUM
} tt_status_t;

/* Human sentence for a status; never NULL, static storage. */
const char *tt_strerror(int status);

/* Symbolic name ("EINVAL"); never NULL, static storage. */
const char *tt_status_name(int status);

/* Acquire-then-cleanup helper: run `call`, store the status in `rc`, and
 * jump to `label` when it failed. */
#define TT_CHECK_GOTO(call, rc, label)                                                             \
    do {                                                                                           \
        (rc) = (call);                                                                             \
        if ((rc) < 0)                                                                              \
            goto label;                                                                            \
    } while (0)

#endif
