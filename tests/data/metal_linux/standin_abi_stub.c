/* A stand-in for replay-abi.cpp in the stand-in's own test: one kernel, kernel_fill (argument: a float; binding 1:
   the destination; every thread of the grid stores the value at its index, accesses outside of the binding counted,
   not performed), so that the Metal stand-in is tested without ggml. */
#include "replay-abi.h"

#include <string.h>

int patchset_replay_has_model(const char * kernel) {
    return kernel != NULL && strcmp(kernel, "kernel_fill") == 0;
}

int patchset_replay_run(const char * kernel, const void * args, size_t args_size,
                        const struct patchset_replay_binding * bufs, int n_bufs,
                        const int32_t * fc, int n_fc,
                        const uint32_t tg[3], const uint16_t ntg[3],
                        struct patchset_replay_effect * eff) {
    (void) fc;
    (void) n_fc;
    if (!patchset_replay_has_model(kernel)) {
        return -1;
    }
    if (args_size != sizeof(float) || n_bufs < 2) {
        return 0;
    }
    float v;
    memcpy(&v, args, sizeof(v));
    const uint64_t n = (uint64_t) tg[0]*tg[1]*tg[2]*ntg[0]*ntg[1]*ntg[2];
    for (uint64_t i = 0; i < n; ++i) {
        eff->n_threads++;
        if (bufs[1].data == NULL || (i + 1)*sizeof(float) > bufs[1].size) {
            eff->n_oob++;
            eff->n_nil += bufs[1].data == NULL;
            continue;
        }
        memcpy(bufs[1].data + i*sizeof(float), &v, sizeof(v));
        eff->n_writes++;
    }
    return 1;
}
