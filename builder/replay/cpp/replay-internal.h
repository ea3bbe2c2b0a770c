// shared state of the Metal replay: what replay-device.cpp and replay-context.cpp both need

#pragma once

#include "ggml.h"
#include "ggml-metal-device.h"

#include <atomic>
#include <cstdint>
#include <string>

// the MTLBuffer of the replay: host memory (ours, or the caller's for a mapped buffer)
struct replay_mtl_buffer {
    char   * data;
    size_t   length;
    bool     owned;
    uint32_t id;
};

// failed lookups and nil bindings of one graph compute, counted as the fork-only patch 6 (metal : fail the graph
// when a tensor is in no Metal buffer) counts failed lookups: each graph compute owns one, points the thread-local current counter at it while its
// nodes are encoded, and fails when the count rose. a lookup made outside of a graph compute is only logged
struct replay_nil_counter {
    std::atomic<int> n_total{0};
    std::atomic<int> n_nil_lookups{0};
    std::atomic<int> n_nil_dispatches{0};
    std::atomic<int> n_unrun{0}; // dispatches the replay could not run (no model, bad threadgroup size)
    std::string      first;   // written only by the record that took n_total from 0

    void reset() {
        first.clear();
        n_nil_lookups    = 0;
        n_nil_dispatches = 0;
        n_unrun          = 0;
        n_total          = 0;
    }

    // first writer wins
    void record(std::atomic<int> & kind, const std::string & what) {
        kind++;
        if (n_total.fetch_add(1) == 0) {
            first = what;
        }
    }
};

void replay_set_current_counter(replay_nil_counter * counter);
replay_nil_counter * replay_current_counter();

// what the graph compute tells the trace about the node being encoded
void replay_set_current_node(int compute, const ggml_tensor * node);

// patch 6's encoder query (ggml-metal-device.h of the patched tree), defined for every tree: true once a nil buffer
// was bound to the encoder
extern "C" bool ggml_metal_encoder_has_nil_buffer(ggml_metal_encoder_t encoder);

// the host memory behind a tensor of a Metal buffer (through the buffer-id lookup), nullptr if none
char * replay_tensor_host_ptr(ggml_metal_buffer_t buf, const ggml_tensor * t);
