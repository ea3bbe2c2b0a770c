// CPU models of the Metal kernels that the ACC, SET and CPY encoders dispatch
//
// the bodies below are the kernels of the tree's kernels/*.metal, line for line, with Metal's vector types spelled as
// arrays (tgpig[0] for tgpig.x, ...) and every device memory access going through a bounds check against the buffer
// that is bound; keep them that way when the tree's kernels change

#include "replay-kernels.h"

#include "ggml.h"
#include "ggml-metal-impl.h"

#include <cstdio>
#include <cstring>

namespace {

// Metal's element types as stored in device memory, and the conversions of `(T1) x`
struct m_float { typedef float       storage; };
struct m_half  { typedef ggml_fp16_t storage; };
struct m_bf16  { typedef ggml_bf16_t storage; };
struct m_i32   { typedef int32_t     storage; };

static float m_to_float(float v)       { return v; }
static float m_to_float(ggml_fp16_t v) { return ggml_fp16_to_fp32(v); }
static float m_to_float(ggml_bf16_t v) { return ggml_bf16_to_fp32(v); }

template <typename T> struct m_from;
template <> struct m_from<m_float> { static float       conv(float v) { return v; } };
template <> struct m_from<m_half>  { static ggml_fp16_t conv(float v) { return ggml_fp32_to_fp16(v); } };
template <> struct m_from<m_bf16>  { static ggml_bf16_t conv(float v) { return ggml_fp32_to_bf16(v); } };

// (T1) x for a value x of type T0
template <typename T0, typename T1> struct m_cast {
    static typename T1::storage conv(typename T0::storage v) { return m_from<T1>::conv(m_to_float(v)); }
};
template <typename T> struct m_cast<T, T> {
    static typename T::storage conv(typename T::storage v) { return v; }
};
template <> struct m_cast<m_float, m_i32> { static int32_t conv(float   v) { return (int32_t) v; } };
template <> struct m_cast<m_i32, m_float> { static float   conv(int32_t v) { return (float)   v; } };

// a device pointer: a bound buffer and a byte offset into it (uint64_t, as Metal's pointer arithmetic with the
// uint64_t strides of the arguments structs); element accesses outside of the buffer are counted and not performed
template <typename T>
struct dev_ptr {
    const replay_binding * buf;
    uint64_t               offs;
    replay_effect        * eff;

    bool in_bounds(int64_t i) const {
        const uint64_t o = offs + (uint64_t) i*sizeof(T);
        return buf->data != nullptr && o <= buf->size && buf->size - o >= sizeof(T);
    }

    T load(int64_t i) const {
        T v;
        if (!in_bounds(i)) {
            eff->n_oob++;
            eff->n_nil += buf->data == nullptr;
            memset(&v, 0, sizeof(v));
            return v;
        }
        memcpy(&v, buf->data + offs + (uint64_t) i*sizeof(T), sizeof(T));
        return v;
    }

    void store(int64_t i, T v) const {
        if (!in_bounds(i)) {
            eff->n_oob++;
            eff->n_nil += buf->data == nullptr;
            return;
        }
        memcpy(buf->data + offs + (uint64_t) i*sizeof(T), &v, sizeof(T));
        eff->n_writes++;
    }
};

template <typename T>
static dev_ptr<T> dptr(const replay_binding & buf, uint64_t offs, replay_effect & eff) {
    return dev_ptr<T>{ &buf, offs, &eff };
}

// every thread of the grid, one after another: threadgroups in x, y, z order, threads likewise within each
template <typename F>
static void for_each_thread(const replay_grid & grid, replay_effect & eff, F && body) {
    uint32_t tgpig[3];
    uint16_t tpitg[3];
    for (tgpig[2] = 0; tgpig[2] < grid.tg[2]; ++tgpig[2]) {
    for (tgpig[1] = 0; tgpig[1] < grid.tg[1]; ++tgpig[1]) {
    for (tgpig[0] = 0; tgpig[0] < grid.tg[0]; ++tgpig[0]) {
        for (tpitg[2] = 0; tpitg[2] < grid.ntg[2]; ++tpitg[2]) {
        for (tpitg[1] = 0; tpitg[1] < grid.ntg[1]; ++tpitg[1]) {
        for (tpitg[0] = 0; tpitg[0] < grid.ntg[0]; ++tpitg[0]) {
            eff.n_threads++;
            body(tgpig, tpitg, grid.ntg);
        }
        }
        }
    }
    }
    }
}

static void note_col(replay_effect & eff, int64_t col) {
    if (eff.col_min < 0 || col < eff.col_min) {
        eff.col_min = col;
    }
    if (col > eff.col_max) {
        eff.col_max = col;
    }
}

//
// kernels/quantize.metal: kernel_cpy_t_t<T0, T1>, constant ggml_metal_kargs_cpy & args,
//   buffer(1) src0, buffer(2) dst; one element per thread
//
template <typename T0, typename T1>
static bool model_cpy_t_t(
        const void * args_p, size_t args_size,
        const replay_binding * bufs, int n_bufs,
        const replay_fc & fc,
        const replay_grid & grid,
        replay_effect & eff) {
    (void) fc;
    if (args_size != sizeof(ggml_metal_kargs_cpy) || n_bufs < 3) {
        return false;
    }

    ggml_metal_kargs_cpy args;
    memcpy(&args, args_p, sizeof(args));

    const replay_binding & src0 = bufs[1];
    const replay_binding & dst  = bufs[2];

    typedef typename T0::storage S0;
    typedef typename T1::storage S1;

    eff.n_expect = (uint64_t) (args.ne00*args.ne01*args.ne02*args.ne03);
    eff.row_len  = args.ne00;

    for_each_thread(grid, eff, [&](const uint32_t * tgpig, const uint16_t * tpitg, const uint16_t * ntg) {
        const int32_t i03 = tgpig[2];
        const int32_t i02 = tgpig[1];
        const int32_t i01 = ntg[1] == 1 ? tgpig[0]%args.ne01 : tgpig[0]*ntg[1] + tpitg[1];
        const int32_t iw0 = ntg[1] == 1 ? tgpig[0]/args.ne01 : 0;

        if (i01 >= args.ne01) {
            return;
        }

        const int64_t n = i03*args.ne02*args.ne01*args.ne00 + i02*args.ne01*args.ne00 + i01*args.ne00;

        const int32_t i3 = n/(args.ne2*args.ne1*args.ne0);
        const int32_t i2 = (n - i3*args.ne2*args.ne1*args.ne0)/(args.ne1*args.ne0);
        const int32_t i1 = (n - i3*args.ne2*args.ne1*args.ne0 - i2*args.ne1*args.ne0)/args.ne0;
        const int32_t i0 = (n - i3*args.ne2*args.ne1*args.ne0 - i2*args.ne1*args.ne0 - i1*args.ne0);

        const dev_ptr<S1> dst_data = dptr<S1>(dst, i3*args.nb3 + i2*args.nb2 + i1*args.nb1 + i0*args.nb0, eff);

        for (int32_t i00 = iw0*ntg[0] + tpitg[0]; i00 < args.ne00;) {
            const dev_ptr<S0> src = dptr<S0>(src0, i03*args.nb03 + i02*args.nb02 + i01*args.nb01 + i00*args.nb00, eff);
            dst_data.store(i00, m_cast<T0, T1>::conv(src.load(0)));
            note_col(eff, i00);
            break;
        }
    });

    return true;
}

// Metal's float4: four floats, component-wise arithmetic
template <int W>
struct m_vec {
    float v[W];

    m_vec & operator+=(const m_vec & o) { for (int k = 0; k < W; ++k) { v[k] += o.v[k]; } return *this; }
    m_vec & operator-=(const m_vec & o) { for (int k = 0; k < W; ++k) { v[k] -= o.v[k]; } return *this; }
    m_vec & operator*=(const m_vec & o) { for (int k = 0; k < W; ++k) { v[k] *= o.v[k]; } return *this; }
    m_vec & operator/=(const m_vec & o) { for (int k = 0; k < W; ++k) { v[k] /= o.v[k]; } return *this; }
};

//
// kernels/binbcast.metal: kernel_bin_fuse_impl<T0, T1, T> with T0 = T1 = T = float (W = 1) or float4 (W = 4),
//   constant ggml_metal_kargs_bin & args, buffer(1) src0, buffer(2) src1, buffer(3) dst; function constants
//   FC_BIN + 0..3 (op, number of fused src1, row broadcast, column broadcast). the FC_F == 1 branches of the kernel
//   compute what the general loop computes with one src1, so the model runs the general loop
//
template <int W>
static bool model_bin_fuse_f32(
        const void * args_p, size_t args_size,
        const replay_binding * bufs, int n_bufs,
        const replay_fc & fc,
        const replay_grid & grid,
        replay_effect & eff) {
    if (args_size != sizeof(ggml_metal_kargs_bin) || n_bufs < 4) {
        return false;
    }

    ggml_metal_kargs_bin args;
    memcpy(&args, args_p, sizeof(args));

    const replay_binding & src0 = bufs[1];
    const replay_binding & src1 = bufs[2];
    const replay_binding & dst  = bufs[3];

    const int16_t FC_OP = (int16_t) fc.get(FC_BIN + 0);
    const int16_t FC_F  = (int16_t) fc.get(FC_BIN + 1);
    const bool    FC_RB = fc.get(FC_BIN + 2) != 0;
    const bool    FC_CB = fc.get(FC_BIN + 3) != 0;

    if (FC_F < 1 || FC_F > 8) {
        return false;
    }

    typedef m_vec<W> T0;
    typedef m_vec<W> T1;
    typedef m_vec<W> T;

    auto apply = [&](T & res, const T1 & v) {
        if (FC_OP == 0) { res += v; }
        if (FC_OP == 1) { res -= v; }
        if (FC_OP == 2) { res *= v; }
        if (FC_OP == 3) { res /= v; }
    };

    eff.row_len  = args.ne0;
    eff.n_expect = (uint64_t) ((int64_t) args.ne0*args.ne01*args.ne02*args.ne03);

    for_each_thread(grid, eff, [&](const uint32_t * tgpig, const uint16_t * tpitg, const uint16_t * ntg) {
        if (FC_RB) {
            // row broadcast
            const uint32_t i0 = tgpig[1]*args.ne00 + tgpig[0];
            const uint32_t i1 = FC_CB ? tgpig[0]%args.ne10 : tgpig[0];

            const dev_ptr<T0> src0_row = dptr<T0>(src0, 0, eff);
            const dev_ptr<T>  dst_row  = dptr<T> (dst,  0, eff);

            T res = src0_row.load(i0);
            for (short j = 0; j < FC_F; ++j) {
                apply(res, dptr<T1>(src1, args.o1[j], eff).load(i1));
            }
            dst_row.store(i0, res);
            note_col(eff, i0 % args.ne0);
            return;
        }

        const int i03 = tgpig[2];
        const int i02 = tgpig[1];
        const int i01 = tgpig[0];

        if (i01 >= args.ne01) {
            return;
        }

        const int i13 = i03%args.ne13;
        const int i12 = i02%args.ne12;
        const int i11 = i01%args.ne11;

        const dev_ptr<T0> src0_ptr = dptr<T0>(src0, i03*args.nb03 + i02*args.nb02 + i01*args.nb01 + args.offs, eff);
        const dev_ptr<T>  dst_ptr  = dptr<T> (dst,  i03*args.nb3  + i02*args.nb2  + i01*args.nb1  + args.offs, eff);

        for (int i0 = tpitg[0]; i0 < args.ne0; i0 += ntg[0]) {
            const int i10 = FC_CB ? i0%args.ne10 : i0;

            T res = src0_ptr.load(i0);
            for (short j = 0; j < FC_F; ++j) {
                apply(res, dptr<T1>(src1, args.o1[j] + i13*args.nb13 + i12*args.nb12 + i11*args.nb11, eff).load(i10));
            }
            dst_ptr.store(i0, res);
            note_col(eff, i0);
        }
    });

    return true;
}

//
// kernels/quantize.metal: kernel_concat<T>, constant ggml_metal_kargs_concat & args, buffer(1) src0, buffer(2) src1,
//   buffer(3) dst; a threadgroup per row (or per ntg.y rows), its threads along the row
//
template <typename T>
static bool model_concat(
        const void * args_p, size_t args_size,
        const replay_binding * bufs, int n_bufs,
        const replay_fc & fc,
        const replay_grid & grid,
        replay_effect & eff) {
    (void) fc;
    if (args_size != sizeof(ggml_metal_kargs_concat) || n_bufs < 4) {
        return false;
    }

    ggml_metal_kargs_concat args;
    memcpy(&args, args_p, sizeof(args));

    const replay_binding & src0 = bufs[1];
    const replay_binding & src1 = bufs[2];
    const replay_binding & dst  = bufs[3];

    typedef typename T::storage S;

    eff.n_expect = (uint64_t) ((int64_t) args.ne0*args.ne1*args.ne2*args.ne3);
    eff.row_len  = args.ne0;

    for_each_thread(grid, eff, [&](const uint32_t * tgpig, const uint16_t * tpitg, const uint16_t * ntg) {
        const int i3 = tgpig[2];
        const int i2 = tgpig[1];
        const int i1 = ntg[1] == 1 ? tgpig[0] : tgpig[0]*ntg[1] + tpitg[1];

        if (i1 >= args.ne1) {
            return;
        }

        int o[4] = {0, 0, 0, 0};
        o[args.dim] = args.dim == 0 ? args.ne00 : (args.dim == 1 ? args.ne01 : (args.dim == 2 ? args.ne02 : args.ne03));

        for (int i0 = tpitg[0]; i0 < args.ne0; i0 += ntg[0]) {
            dev_ptr<S> x = (i0 < args.ne00 && i1 < args.ne01 && i2 < args.ne02 && i3 < args.ne03)
                ? dptr<S>(src0, (uint64_t) (i3)*args.nb03 + (uint64_t) (i2)*args.nb02 + (uint64_t) (i1)*args.nb01 +
                                (uint64_t) (i0)*args.nb00, eff)
                : dptr<S>(src1, (uint64_t) (i3 - o[3])*args.nb13 + (uint64_t) (i2 - o[2])*args.nb12 +
                                (uint64_t) (i1 - o[1])*args.nb11 + (uint64_t) (i0 - o[0])*args.nb10, eff);

            const dev_ptr<S> y = dptr<S>(dst, (uint64_t) i3*args.nb3 + (uint64_t) i2*args.nb2 + (uint64_t) i1*args.nb1 +
                                              (uint64_t) i0*args.nb0, eff);

            y.store(0, x.load(0));
            note_col(eff, i0);
        }
    });

    return true;
}

} // namespace

// the text of the kernels as of the tree the models were written from (llama.cpp b11312); when the tree's text
// changes, the selftest says so and the model must be read against the new text and its hash updated
#define BODY_CPY_T_T       0x720a7ca713b8e2b7ULL
#define BODY_BIN_FUSE_IMPL 0xbe9b901ef3c3e688ULL
#define BODY_CONCAT        0x9d4f6046bca5fed6ULL

#define CPY_MODEL(name, t0, t1) \
    { "kernel_cpy_" name, "kernels/quantize.metal", "kernel_cpy_t_t", "ggml_metal_kargs_cpy", BODY_CPY_T_T, model_cpy_t_t<t0, t1> }

const std::vector<replay_model> & replay_models() {
    static const std::vector<replay_model> models = {
        CPY_MODEL("f32_f32",   m_float, m_float),
        CPY_MODEL("f32_f16",   m_float, m_half),
        CPY_MODEL("f32_i32",   m_float, m_i32),
        CPY_MODEL("i32_f32",   m_i32,   m_float),
        CPY_MODEL("i32_i32",   m_i32,   m_i32),
        CPY_MODEL("f32_bf16",  m_float, m_bf16),
        CPY_MODEL("f16_f32",   m_half,  m_float),
        CPY_MODEL("f16_f16",   m_half,  m_half),
        CPY_MODEL("bf16_f32",  m_bf16,  m_float),
        CPY_MODEL("bf16_bf16", m_bf16,  m_bf16),
        { "kernel_bin_fuse_f32_f32_f32",   "kernels/binbcast.metal", "kernel_bin_fuse_impl", "ggml_metal_kargs_bin",
          BODY_BIN_FUSE_IMPL, model_bin_fuse_f32<1> },
        { "kernel_bin_fuse_f32_f32_f32_4", "kernels/binbcast.metal", "kernel_bin_fuse_impl", "ggml_metal_kargs_bin",
          BODY_BIN_FUSE_IMPL, model_bin_fuse_f32<4> },
        { "kernel_concat_f32", "kernels/quantize.metal", "kernel_concat", "ggml_metal_kargs_concat", BODY_CONCAT,
          model_concat<m_float> },
    };
    return models;
}

const replay_model * replay_model_find(const char * kernel) {
    for (const auto & m : replay_models()) {
        if (strcmp(m.kernel, kernel) == 0) {
            return &m;
        }
    }
    return nullptr;
}

static bool has_cpy_model(ggml_type tsrc, ggml_type tdst) {
    char name[256];
    snprintf(name, sizeof(name), "kernel_cpy_%s_%s", ggml_type_name(tsrc), ggml_type_name(tdst));
    return replay_model_find(name) != nullptr;
}

static bool all_f32(const ggml_tensor * op) {
    return op->type == GGML_TYPE_F32 && op->src[0]->type == GGML_TYPE_F32 && op->src[1]->type == GGML_TYPE_F32;
}

bool replay_models_cover_op(const ggml_tensor * op) {
    switch (op->op) {
        case GGML_OP_NONE:
        case GGML_OP_RESHAPE:
        case GGML_OP_VIEW:
        case GGML_OP_TRANSPOSE:
        case GGML_OP_PERMUTE:
            return true;
        case GGML_OP_ADD:
            // SUB, MUL and DIV start fusions (snake, MoE reduce) whose kernels have no model; ADD alone fuses only into
            // the chain of adds that kernel_bin_fuse_impl computes
            return all_f32(op) && replay_model_find("kernel_bin_fuse_f32_f32_f32") != nullptr;
        case GGML_OP_ACC:
            return op->src[0]->type == GGML_TYPE_F32 && has_cpy_model(op->src[0]->type, op->type) &&
                replay_model_find("kernel_bin_fuse_f32_f32_f32") != nullptr;
        case GGML_OP_SET:
            return has_cpy_model(op->src[0]->type, op->type) && has_cpy_model(op->src[1]->type, op->type);
        case GGML_OP_CONCAT:
            // the real device takes more types; the model is of kernel_concat_f32
            return all_f32(op) && replay_model_find("kernel_concat_f32") != nullptr;
        case GGML_OP_CPY:
        case GGML_OP_DUP:
        case GGML_OP_CONT:
            return has_cpy_model(op->src[0]->type, op->type);
        default:
            return false;
    }
}

std::string replay_kernel_text(const std::string & source, const char * templ) {
    const std::string head = std::string("kernel void ") + templ + "(";

    const size_t start = source.find(head);
    if (start == std::string::npos) {
        return "";
    }

    size_t pos = source.find('{', start);
    if (pos == std::string::npos) {
        return "";
    }

    int depth = 0;
    size_t end = pos;
    for (; end < source.size(); ++end) {
        if (source[end] == '{') {
            depth++;
        } else if (source[end] == '}') {
            if (--depth == 0) {
                break;
            }
        }
    }
    if (depth != 0) {
        return "";
    }

    std::string out;
    bool space = false;
    for (size_t i = start; i <= end; ++i) {
        const char c = source[i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            space = true;
            continue;
        }
        if (space && !out.empty()) {
            out += ' ';
        }
        space = false;
        out += c;
    }
    return out;
}

uint64_t replay_hash(const std::string & text) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (unsigned char c : text) {
        h ^= c;
        h *= 0x100000001b3ULL;
    }
    return h;
}
