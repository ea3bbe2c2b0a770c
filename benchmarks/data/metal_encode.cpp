// benchmarks/metal_encode.py's program: the host-side cost of computing a graph with a llama-sized node count on
// the Metal backend (ggml_backend_graph_compute: the tree's encode of every node and the dispatch of its command
// buffers). Built against one tree's ggml as one of its test programs (tests/<name>.cpp) by the metal-linux backend,
// where the kernels are CPU models: the tensors are tiny so that the kernels take little of the time.
//
// The graph: LAYERS layers of 30 nodes (9 x [CPY f32->f16, CPY f16->f32, ADD], then SET, CONT, ADD) on 32x4 f32
// tensors, every tensor in one Metal buffer. Usage: PROGRAM [ITERATIONS]; prints one line, key=value words:
//   nodes=N iterations=K min_graph_ns=... p10_graph_ns=... median_graph_ns=... mean_graph_ns=...
// (over K computes of the graph, each timed on its own, after 20 untimed ones)
// and exits non-zero when a compute fails or the result is not what the graph computes.

#include "ggml.h"
#include "ggml-backend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

static const int LAYERS = 32;
static const int STEPS = 9;
static const int NE0 = 32;
static const int NE1 = 4;

int main(int argc, char ** argv) {
    const int iterations = argc > 1 ? atoi(argv[1]) : 200;
    if (iterations <= 0) {
        fprintf(stderr, "usage: %s [ITERATIONS > 0]\n", argv[0]);
        return 2;
    }
    ggml_backend_t backend = ggml_backend_init_by_name("MTL0", nullptr);
    if (backend == nullptr) {
        fprintf(stderr, "no Metal backend (MTL0)\n");
        return 1;
    }

    const size_t n_tensors = (size_t) LAYERS * (5 * STEPS + 8) + 16;  // a CPY makes its destination and a view of it
    ggml_init_params params = {ggml_tensor_overhead() * n_tensors + ggml_graph_overhead_custom(4096, false), nullptr,
                               true};
    ggml_context * ctx = ggml_init(params);

    ggml_tensor * x0 = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, NE0, NE1);
    ggml_tensor * w = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, NE0, NE1);    // added at every ADD
    ggml_tensor * v = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, NE0);         // SET into the first row
    ggml_set_input(x0);

    ggml_tensor * x = x0;
    for (int l = 0; l < LAYERS; ++l) {
        for (int s = 0; s < STEPS; ++s) {
            ggml_tensor * h = ggml_cpy(ctx, x, ggml_new_tensor_2d(ctx, GGML_TYPE_F16, NE0, NE1));
            ggml_tensor * f = ggml_cpy(ctx, h, ggml_new_tensor_2d(ctx, GGML_TYPE_F32, NE0, NE1));
            x = ggml_add(ctx, f, w);
        }
        ggml_tensor * set = ggml_set(ctx, x, v, x->nb[1], x->nb[2], x->nb[3], 0);
        x = ggml_add(ctx, ggml_cont(ctx, set), w);
    }
    ggml_set_output(x);

    ggml_cgraph * gf = ggml_new_graph_custom(ctx, 4096, false);
    ggml_build_forward_expand(gf, x);
    const int n_nodes = ggml_graph_n_nodes(gf);

    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, backend);
    if (buf == nullptr) {
        fprintf(stderr, "could not allocate the tensors in a Metal buffer\n");
        return 1;
    }
    // values exact in f16: x0 = 0, w = 1/8, v = 1; every layer adds 10/8 and then sets the first row to 1 + 1/8
    std::vector<float> zeros(NE0 * NE1, 0.0f), eighth(NE0 * NE1, 0.125f), ones(NE0, 1.0f);
    ggml_backend_tensor_set(x0, zeros.data(), 0, ggml_nbytes(x0));
    ggml_backend_tensor_set(w, eighth.data(), 0, ggml_nbytes(w));
    ggml_backend_tensor_set(v, ones.data(), 0, ggml_nbytes(v));

    for (int i = 0; i < 20; ++i) {
        if (ggml_backend_graph_compute(backend, gf) != GGML_STATUS_SUCCESS) {
            fprintf(stderr, "graph compute failed\n");
            return 1;
        }
    }
    std::vector<float> out(NE0 * NE1);
    ggml_backend_tensor_get(x, out.data(), 0, ggml_nbytes(x));
    const float row0 = 1.125f, rest = LAYERS * 10 * 0.125f;
    for (int i = 0; i < NE0 * NE1; ++i) {
        const float want = i < NE0 ? row0 : rest;
        if (std::fabs(out[i] - want) > 1e-3f) {
            fprintf(stderr, "wrong result at %d: %g, want %g\n", i, out[i], want);
            return 1;
        }
    }

    // each compute timed on its own: on a shared machine another process's burst slows some computes; the fastest
    // (min) is the one least disturbed, the figure benchmarks/metal_encode.py compares
    std::vector<double> times(iterations);
    double total = 0.0;
    for (int i = 0; i < iterations; ++i) {
        const auto start = std::chrono::steady_clock::now();
        const ggml_status status = ggml_backend_graph_compute(backend, gf);
        times[i] = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
        total += times[i];
        if (status != GGML_STATUS_SUCCESS) {
            fprintf(stderr, "graph compute failed\n");
            return 1;
        }
    }
    std::sort(times.begin(), times.end());
    const double median = iterations % 2 ? times[iterations / 2] : (times[iterations / 2 - 1] + times[iterations / 2]) / 2;
    printf("nodes=%d iterations=%d min_graph_ns=%.0f p10_graph_ns=%.0f median_graph_ns=%.0f mean_graph_ns=%.0f\n",
           n_nodes, iterations, times[0], times[iterations / 10], median, total / iterations);

    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
    ggml_backend_free(backend);
    return 0;
}
