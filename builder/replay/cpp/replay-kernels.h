// CPU models of Metal kernels, for the host-side replay of the Metal backend
//
// each model takes the kernel's arguments struct (ggml-metal-impl.h of the tree being replayed), the buffers bound to
// it and the dispatch grid, and runs the kernel's index arithmetic as written in the tree's kernels/*.metal for every
// threadgroup and every thread of the grid, one thread after another. the models are what a dispatch executes in
// place of the GPU; the encoding that chose the grid, the arguments and the bindings is the tree's own code
//
// every model names the .metal file, the kernel template and the arguments struct it follows (replay_models()):
// the harness's tests check that they still exist in the tree, so a model silently drifting from the tree is noticed

#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

// a buffer bound to a kernel: the bytes from the binding's offset to the end of its Metal buffer
struct replay_binding {
    char   * data = nullptr; // nullptr: a nil buffer was bound
    size_t   size = 0;
};

// what one dispatch did, as seen by the model
struct replay_effect {
    uint64_t n_threads = 0; // threads of the grid
    uint64_t n_writes  = 0; // elements written to the destination
    uint64_t n_expect  = 0; // elements the arguments say the dispatch must write (0: not known)
    uint64_t n_oob     = 0; // accesses outside of a bound buffer (not performed)
    uint64_t n_nil     = 0; // of those, accesses through a nil buffer

    // for kernels that write rows: the lowest and highest column written, and the row width
    int64_t col_min = -1;
    int64_t col_max = -1;
    int64_t row_len = 0;
};

struct replay_grid {
    uint32_t tg[3];   // threadgroups per grid
    uint16_t ntg[3];  // threads per threadgroup
};

// function constants of a pipeline (ggml_metal_cv), by index; absent constants read as 0/false
struct replay_fc {
    std::vector<std::pair<int32_t, int32_t>> values;

    int32_t get(int32_t idx) const {
        for (const auto & v : values) {
            if (v.first == idx) {
                return v.second;
            }
        }
        return 0;
    }
};

typedef bool (*replay_model_fn)(
        const void * args, size_t args_size,
        const replay_binding * bufs, int n_bufs,
        const replay_fc & fc,
        const replay_grid & grid,
        replay_effect & eff);

struct replay_model {
    const char * kernel;   // host name of the kernel (the pipeline base name), e.g. kernel_cpy_f32_f32
    const char * source;   // the .metal file of the tree that defines it, relative to ggml/src/ggml-metal
    const char * templ;    // the kernel template the model follows, as spelled in the .metal source
    const char * args;     // the arguments struct (ggml-metal-impl.h)
    uint64_t     body;     // FNV-1a hash of the kernel template's text (whitespace collapsed) the model was written from
    replay_model_fn fn;
};

// the text of `kernel void <templ>(...) { ... }` in a .metal source, whitespace runs collapsed to one space; empty
// when the source does not define it
std::string replay_kernel_text(const std::string & source, const char * templ);

uint64_t replay_hash(const std::string & text);

// every modelled kernel
const std::vector<replay_model> & replay_models();

// the model of a kernel, by host name; nullptr when there is none
const replay_model * replay_model_find(const char * kernel);

struct ggml_tensor;

// whether the kernels the tree's encoders pick for an op have models (types and fusions only: the tree's own rules of
// which ops the device supports are the caller's), for the replay's and metal-linux's supports_op
bool replay_models_cover_op(const ggml_tensor * op);
