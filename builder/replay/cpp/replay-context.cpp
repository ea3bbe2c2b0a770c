// host-side replay of ggml-metal-context.m: the backend context of ggml-metal-context.h, and the registration of the
// tree's Metal backend (ggml-metal.cpp, unchanged) with the ggml backend registry
//
// a graph compute encodes the nodes with the tree's ggml_metal_op_* (ggml-metal-ops.cpp) in the blocks the real
// context uses (the first n_main nodes, then n_cb blocks), one block after another on the calling thread; every
// dispatch runs on the CPU as it is encoded (replay-device.cpp). failed buffer lookups, dispatches that bind one and
// kernels that access a nil buffer are counted per graph compute and fail it, as the fork-only patch 6 (metal : fail
// the graph when a tensor is in no Metal buffer) does

#include "replay-internal.h"

#include "ggml-impl.h"
#include "ggml-backend-impl.h"
#include "ggml-metal.h"
#include "ggml-metal-common.h"
#include "ggml-metal-context.h"
#include "ggml-metal-fusion.h"
#include "ggml-metal-ops.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

#define GGML_METAL_MAX_COMMAND_BUFFERS 8

struct ggml_metal {
    ggml_metal_device_t  dev;
    ggml_metal_library_t lib;

    ggml_metal_event_t ev_cpy;
    ggml_metal_event_t ev_sync;

    char name[128];

    int n_cb;

    bool use_concurrency;
    bool use_graph_optimize;

    int debug_graph;
    int capture_compute;

    struct ggml_metal_fusion_info * finfo;

    ggml_abort_callback abort_callback;
    void *              abort_callback_data;

    replay_nil_counter counter;
};

static std::atomic<int> g_n_compute{0};

ggml_metal_t ggml_metal_init(ggml_metal_device_t dev) {
    ggml_metal_t res = new ggml_metal();

    res->dev = dev;
    res->lib = ggml_metal_device_get_library(dev);

    res->ev_cpy  = ggml_metal_device_event_init(dev);
    res->ev_sync = ggml_metal_device_event_init(dev);

    snprintf(res->name, sizeof(res->name), "%s", ggml_metal_device_get_props(dev)->name);

    res->n_cb = 1;

    res->use_concurrency    = getenv("GGML_METAL_CONCURRENCY_DISABLE") == NULL;
    res->use_graph_optimize = getenv("GGML_METAL_GRAPH_OPTIMIZE_DISABLE") == NULL;

    {
        const char * val = getenv("GGML_METAL_GRAPH_DEBUG");
        res->debug_graph = val ? atoi(val) : 0;
    }

    res->capture_compute = -1;

    res->finfo = ggml_metal_device_get_fusion_info(dev);
    if (ggml_metal_fusion_info_stats(res->finfo)) {
        ggml_metal_fusion_info_labels_init(res->finfo);
        res->n_cb = 0;
    }

    res->abort_callback      = NULL;
    res->abort_callback_data = NULL;

    return res;
}

void ggml_metal_free(ggml_metal_t ctx) {
    ggml_metal_device_event_free(ctx->dev, ctx->ev_cpy);
    ggml_metal_device_event_free(ctx->dev, ctx->ev_sync);
    delete ctx;
}

const char * ggml_metal_get_name(ggml_metal_t ctx) {
    return ctx->name;
}

void ggml_metal_synchronize(ggml_metal_t ctx) {
    // every dispatch ran when it was encoded
    GGML_UNUSED(ctx);
}

static char * replay_tensor_ptr(const struct ggml_tensor * tensor) {
    ggml_backend_buffer_t buffer = tensor->view_src ? tensor->view_src->buffer : tensor->buffer;
    return replay_tensor_host_ptr((ggml_metal_buffer_t) buffer->context, tensor);
}

void ggml_metal_set_tensor_async(ggml_metal_t ctx, struct ggml_tensor * tensor, const void * data, size_t offset, size_t size) {
    GGML_UNUSED(ctx);

    char * p = replay_tensor_ptr(tensor);
    GGML_ASSERT(p != nullptr);
    memcpy(p + offset, data, size);
}

void ggml_metal_get_tensor_async(ggml_metal_t ctx, const struct ggml_tensor * tensor, void * data, size_t offset, size_t size) {
    GGML_UNUSED(ctx);

    const char * p = replay_tensor_ptr(tensor);
    GGML_ASSERT(p != nullptr);
    memcpy(data, p + offset, size);
}

bool ggml_metal_cpy_tensor_async(ggml_metal_t ctx_src, ggml_metal_t ctx_dst, const struct ggml_tensor * src, struct ggml_tensor * dst) {
    GGML_UNUSED(ctx_src);
    GGML_UNUSED(ctx_dst);

    const char * ps = replay_tensor_ptr(src);
    char       * pd = replay_tensor_ptr(dst);
    if (ps == nullptr || pd == nullptr) {
        return false;
    }
    memcpy(pd, ps, ggml_nbytes(src));

    return true;
}

// encode the nodes [idx_start, idx_end) of the graph, as the encode_async block of ggml-metal-context.m does
static void replay_encode_block(ggml_metal_t ctx, struct ggml_cgraph * gf, int compute, int idx_start, int idx_end) {
    // the nodes the op context keeps (ggml_metal_op filters the empty ones): to name them in the trace
    std::vector<ggml_tensor *> nodes;
    for (int i = idx_start; i < idx_end; i++) {
        if (!ggml_op_is_empty(gf->nodes[i]->op) && !ggml_is_empty(gf->nodes[i])) {
            nodes.push_back(gf->nodes[i]);
        }
    }

    // any non-null command buffer: the replay's encoder does not use it
    ggml_metal_cmd_buf_t cmd_buf = (ggml_metal_cmd_buf_t) ctx;

    ggml_metal_op_t ctx_op = ggml_metal_op_init(
        ctx->dev,
        cmd_buf,
        gf,
        ctx->finfo,
        idx_start,
        idx_end,
        ctx->use_concurrency,
        ctx->capture_compute == 0,
        ctx->debug_graph);

    const int n = ggml_metal_op_n_nodes(ctx_op);

    for (int idx = 0; idx < n; ++idx) {
        replay_set_current_node(compute, n == (int) nodes.size() ? nodes[idx] : nullptr);

        const int res = ggml_metal_op_encode(ctx_op, idx);
        if (res == 0) {
            break;
        }

        idx += res - 1;
    }

    replay_set_current_node(compute, nullptr);

    ggml_metal_op_free(ctx_op);
}

enum ggml_status ggml_metal_graph_compute(ggml_metal_t ctx, struct ggml_cgraph * gf) {
    if (gf->n_nodes == 0) {
        return GGML_STATUS_SUCCESS;
    }

    const int compute = g_n_compute++;

    // number of nodes encoded by the main thread, as in ggml-metal-context.m
    const int n_main = std::max(64, (int) (0.1*gf->n_nodes));

    const int n_cb = ctx->n_cb;

    int n_nodes_0      = gf->n_nodes;
    int n_nodes_1      = 0;
    int n_nodes_per_cb = 0;

    if (n_cb > 0) {
        n_nodes_0      = std::min(n_main, gf->n_nodes);
        n_nodes_1      = gf->n_nodes - n_nodes_0;
        n_nodes_per_cb = (n_nodes_1 + n_cb - 1) / n_cb;
    }

    // count the failed lookups and nil dispatches of this graph only
    ctx->counter.reset();
    replay_set_current_counter(&ctx->counter);

    // the calling thread's block first (its command buffer is enqueued first), then the n_cb blocks in queue order
    replay_encode_block(ctx, gf, compute, 0, n_nodes_0);

    for (int cb_idx = 0; cb_idx < n_cb; ++cb_idx) {
        const int idx_start = n_nodes_0 + cb_idx*n_nodes_per_cb;
        const int idx_end   = n_nodes_0 + std::min(cb_idx == n_cb - 1 ? n_nodes_1 : (cb_idx + 1)*n_nodes_per_cb, n_nodes_1);

        if (idx_start < idx_end) {
            replay_encode_block(ctx, gf, compute, idx_start, idx_end);
        }
    }

    replay_set_current_counter(nullptr);

    if (ctx->counter.n_total > 0) {
        GGML_LOG_ERROR("%s: error: %d failed buffer lookup(s), %d dispatch(es) with a nil buffer, %d dispatch(es) not run "
                "while encoding the graph (first: %s) - the graph result is not valid\n", __func__,
                ctx->counter.n_nil_lookups.load(), ctx->counter.n_nil_dispatches.load(), ctx->counter.n_unrun.load(),
                ctx->counter.first.c_str());

        return GGML_STATUS_FAILED;
    }

    return GGML_STATUS_SUCCESS;
}

void ggml_metal_graph_optimize(ggml_metal_t ctx, struct ggml_cgraph * gf) {
    if (ctx->use_graph_optimize) {
        ggml_graph_optimize(gf);
    }
}

void ggml_metal_event_record(ggml_metal_t ctx, ggml_metal_event_t ev) {
    GGML_UNUSED(ctx);
    ggml_metal_event_encode_signal(ev, nullptr);
}

void ggml_metal_event_wait(ggml_metal_t ctx, ggml_metal_event_t ev) {
    GGML_UNUSED(ctx);
    ggml_metal_event_encode_wait(ev, nullptr);
}

ggml_metal_event_t ggml_metal_get_ev_cpy(ggml_metal_t ctx) {
    return ctx->ev_cpy;
}

void ggml_metal_set_n_cb(ggml_metal_t ctx, int n_cb) {
    if (ggml_metal_fusion_info_stats(ctx->finfo)) {
        n_cb = 0;
    }

    ctx->n_cb = std::min(n_cb, GGML_METAL_MAX_COMMAND_BUFFERS);
}

void ggml_metal_set_abort_callback(ggml_metal_t ctx, ggml_abort_callback abort_callback, void * user_data) {
    ctx->abort_callback      = abort_callback;
    ctx->abort_callback_data = user_data;
}

bool ggml_metal_supports_family(ggml_metal_t ctx, int family) {
    return family <= ggml_metal_device_get_props(ctx->dev)->gpu_family;
}

void ggml_metal_capture_next_compute(ggml_metal_t ctx) {
    GGML_UNUSED(ctx);
}

// the tree's ggml-backend-reg.cpp registers the Metal backend only when ggml is built with GGML_METAL; the replay is
// linked into a program instead, and registers it when the program starts
namespace {
struct replay_registrar {
    replay_registrar() {
        ggml_backend_register(ggml_backend_metal_reg());
    }
};

replay_registrar g_replay_registrar;
} // namespace
