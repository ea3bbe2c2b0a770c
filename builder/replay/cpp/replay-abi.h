/* A C ABI over the CPU models of the Metal kernels (replay-kernels.h), for callers that are not C++: the Metal
   stand-in of the metal-linux backend (builder/metal_linux) runs a compute dispatch through it. One set of models,
   shared with the replay: this file only converts the arguments. */
#ifndef PATCHSET_REPLAY_ABI_H
#define PATCHSET_REPLAY_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* a buffer bound to a kernel: the bytes from the binding's offset to the end of its buffer (data NULL: nil) */
struct patchset_replay_binding {
    char * data;
    size_t size;
};

/* what one dispatch did (replay_effect) */
struct patchset_replay_effect {
    uint64_t n_threads;
    uint64_t n_writes;
    uint64_t n_expect;
    uint64_t n_oob;
    uint64_t n_nil;
    int64_t  col_min;
    int64_t  col_max;
    int64_t  row_len;
};

/* 1 when the kernel (host name, e.g. kernel_cpy_f32_f32) has a CPU model */
int patchset_replay_has_model(const char * kernel);

/* runs the kernel's model on a grid of tg[] threadgroups of ntg[] threads; fc holds n_fc (index, value) pairs of
   function constants. 1: the model ran; 0: it rejected the dispatch (arguments it does not describe); -1: no model */
int patchset_replay_run(const char * kernel, const void * args, size_t args_size,
                        const struct patchset_replay_binding * bufs, int n_bufs,
                        const int32_t * fc, int n_fc,
                        const uint32_t tg[3], const uint16_t ntg[3],
                        struct patchset_replay_effect * eff);

#ifdef __cplusplus
}
#endif

#endif
