// the metal-linux backend's C++ glue: the registration of the tree's Metal backend, and its supported ops narrowed to
// the kernels the stand-in can run

#include "ggml.h"
#include "ggml-backend-impl.h"
#include "ggml-metal.h"
#include "ggml-metal-device.h"

#include "replay-kernels.h"

extern "C" bool __real_ggml_metal_device_supports_op(ggml_metal_device_t dev, const struct ggml_tensor * op);

// linked with -Wl,--wrap=ggml_metal_device_supports_op: the tree's ggml-metal.cpp asks the tree's ggml-metal-device.m
// through this; an op the models do not cover is reported as not supported (test-backend-ops then skips it) instead
// of failing its pipeline
extern "C" bool __wrap_ggml_metal_device_supports_op(ggml_metal_device_t dev, const struct ggml_tensor * op) {
    return __real_ggml_metal_device_supports_op(dev, op) && replay_models_cover_op(op);
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
