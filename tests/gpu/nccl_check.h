/* nccl_check: how the NCCL checks that gpu_nccl_fallback.py runs against
 * its daemons start: skipped (77, with the reason) without NCCL or a GPU,
 * usage error (2) without "--coordinator EP". */
#ifndef NCCL_CHECK_H
#define NCCL_CHECK_H

#include "tt_coll_nccl.h"
#include "tt_cuda.h"
#include "tt_status.h"

#include <stdio.h>
#include <string.h>

/* 0 to go on with *ndev devices; else the exit status. */
static inline int nccl_check_start(int argc, char **argv, const char *name, int *ndev) {
    char err[512] = "";
    *ndev = 0;
    if (!tt_coll_nccl_compiled() || tt_cuda_device_count(ndev, err, sizeof(err)) != TT_OK) {
        printf("SKIPPED: %s\n", tt_coll_nccl_compiled() ? err : "built without NCCL");
        return 77;
    }
    if (argc != 3 || strcmp(argv[1], "--coordinator") != 0) {
        fprintf(stderr, "usage: %s --coordinator EP\n", name);
        return 2;
    }
    return 0;
}

#endif
