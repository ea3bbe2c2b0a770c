// the metal-linux backend's C++ glue: the registration of the tree's Metal backend, and its supported ops narrowed to
// the kernels the stand-in can run

#include "ggml.h"
#include "ggml-backend-impl.h"
#include "ggml-metal.h"
#include "ggml-metal-device.h"

#include "replay-abi.h"

#include <cstdio>

extern "C" bool __real_ggml_metal_device_supports_op(ggml_metal_device_t dev, const struct ggml_tensor * op);

static bool has_cpy(ggml_type tsrc, ggml_type tdst) {
    char name[256];
    snprintf(name, sizeof(name), "kernel_cpy_%s_%s", ggml_type_name(tsrc), ggml_type_name(tdst));
    return patchset_replay_has_model(name) != 0;
}

static bool all_f32(const ggml_tensor * op) {
    return op->type == GGML_TYPE_F32 && op->src[0]->type == GGML_TYPE_F32 && op->src[1]->type == GGML_TYPE_F32;
}

// the ops whose kernels, as the tree's encoders pick them, have a CPU model
static bool models_cover(const ggml_tensor * op) {
    switch (op->op) {
        case GGML_OP_NONE:
        case GGML_OP_RESHAPE:
        case GGML_OP_VIEW:
        case GGML_OP_TRANSPOSE:
        case GGML_OP_PERMUTE:
            return true;
        case GGML_OP_ADD:
            return all_f32(op) && patchset_replay_has_model("kernel_bin_fuse_f32_f32_f32");
        case GGML_OP_ACC:
            return op->src[0]->type == GGML_TYPE_F32 && has_cpy(op->src[0]->type, op->type) &&
                patchset_replay_has_model("kernel_bin_fuse_f32_f32_f32");
        case GGML_OP_SET:
            return has_cpy(op->src[0]->type, op->type) && has_cpy(op->src[1]->type, op->type);
        case GGML_OP_CONCAT:
            return all_f32(op) && patchset_replay_has_model("kernel_concat_f32");
        case GGML_OP_CPY:
        case GGML_OP_DUP:
        case GGML_OP_CONT:
            return has_cpy(op->src[0]->type, op->type);
        default:
            return false;
    }
}

// linked with -Wl,--wrap=ggml_metal_device_supports_op: the tree's ggml-metal.cpp asks the tree's ggml-metal-device.m
// through this; an op the models do not cover is reported as not supported (test-backend-ops then skips it) instead
// of failing its pipeline
extern "C" bool __wrap_ggml_metal_device_supports_op(ggml_metal_device_t dev, const struct ggml_tensor * op) {
    return __real_ggml_metal_device_supports_op(dev, op) && models_cover(op);
}

// the tree's ggml-backend-reg.cpp registers the Metal backend only when ggml is built with GGML_METAL; this object is
// linked into the programs instead, and registers it when the program starts
namespace {
struct metal_linux_registrar {
    metal_linux_registrar() {
        ggml_backend_register(ggml_backend_metal_reg());
    }
};

metal_linux_registrar g_registrar;
} // namespace
