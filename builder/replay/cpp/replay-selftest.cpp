// checks of the Metal replay's kernel models
//
//   patchset-replay-selftest [--tree DIR]
//
// - each model against hand-computed results for small grids, including rows wider than one threadgroup
// - with --tree: each model against the tree's shader text: the .metal file it names defines the kernel (host name)
//   with the template it follows, taking the arguments struct it reads, the struct is in ggml-metal-impl.h, and the
//   template's text is the one the model was written from (a hash), so that a kernel changing under its model is seen
//
// prints one line per check in the format of ggml's test programs ("  NAME(PARAMS): OK|FAIL") and exits 1 on a failure

#include "replay-kernels.h"

#include "ggml.h"
#include "ggml-metal-impl.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

static int g_n_pass = 0;
static int g_n_total = 0;

static void report(const char * name, const std::string & params, bool ok, const std::string & why = "") {
    g_n_total++;
    g_n_pass += ok;
    printf("  %s(%s): %s%s\n", name, params.c_str(), ok ? "" : (why + " ").c_str(), ok ? "OK" : "FAIL");
}

static const float STALE = -7.0f;

struct cpy_case {
    ggml_metal_kargs_cpy args;
    replay_grid          grid;
};

// contiguous f32 -> f32 copy arguments for a [ne00, ne01, 1, 1] tensor
static ggml_metal_kargs_cpy cpy_args(int64_t ne00, int64_t ne01) {
    ggml_metal_kargs_cpy args = {
        /*.nk0  =*/ ne00,
        /*.ne00 =*/ ne00,
        /*.ne01 =*/ ne01,
        /*.ne02 =*/ 1,
        /*.ne03 =*/ 1,
        /*.nb00 =*/ 4,
        /*.nb01 =*/ (uint64_t) (4*ne00),
        /*.nb02 =*/ (uint64_t) (4*ne00*ne01),
        /*.nb03 =*/ (uint64_t) (4*ne00*ne01),
        /*.ne0  =*/ ne00,
        /*.ne1  =*/ ne01,
        /*.ne2  =*/ 1,
        /*.ne3  =*/ 1,
        /*.nb0  =*/ 4,
        /*.nb1  =*/ (uint64_t) (4*ne00),
        /*.nb2  =*/ (uint64_t) (4*ne00*ne01),
        /*.nb3  =*/ (uint64_t) (4*ne00*ne01),
    };
    return args;
}

static replay_grid grid_of(uint32_t x, uint32_t y, uint32_t z, uint16_t tx, uint16_t ty, uint16_t tz) {
    replay_grid g;
    g.tg[0] = x; g.tg[1] = y; g.tg[2] = z;
    g.ntg[0] = tx; g.ntg[1] = ty; g.ntg[2] = tz;
    return g;
}

static bool run(const char * kernel, const void * args, size_t args_size, std::vector<replay_binding> & bufs,
        const replay_fc & fc, const replay_grid & grid, replay_effect & eff) {
    const replay_model * m = replay_model_find(kernel);
    if (!m) {
        return false;
    }
    return m->fn(args, args_size, bufs.data(), (int) bufs.size(), fc, grid, eff);
}

// the dispatch the pin's ACC/SET hand-rolled copy makes: ne01 threadgroups of nth = min(max threads, ne00) threads.
// a 10-wide row with at most 4 threads per threadgroup: columns 0..3 of each row are copied, 4..9 stay stale
static void test_cpy_narrow_dispatch() {
    const int64_t ne00 = 10, ne01 = 2;
    std::vector<float> src(ne00*ne01), dst(ne00*ne01, STALE);
    for (size_t i = 0; i < src.size(); ++i) {
        src[i] = 1.0f + (float) i;
    }
    std::vector<replay_binding> bufs(3);
    bufs[1] = { (char *) src.data(), src.size()*4 };
    bufs[2] = { (char *) dst.data(), dst.size()*4 };

    const ggml_metal_kargs_cpy args = cpy_args(ne00, ne01);
    replay_effect eff;
    const bool ran = run("kernel_cpy_f32_f32", &args, sizeof(args), bufs, replay_fc(), grid_of(2, 1, 1, 4, 1, 1), eff);

    // by hand: thread (x, t) has i01 = x % 2, iw0 = x / 2 = 0, i00 = t: it copies element t of row x
    const float expect[20] = {
         1,  2,  3,  4, STALE, STALE, STALE, STALE, STALE, STALE,
        11, 12, 13, 14, STALE, STALE, STALE, STALE, STALE, STALE,
    };
    bool ok = ran && memcmp(dst.data(), expect, sizeof(expect)) == 0;
    ok = ok && eff.n_threads == 8 && eff.n_writes == 8 && eff.n_expect == 20 && eff.col_min == 0 && eff.col_max == 3;
    report("CPY_MODEL", "kernel=kernel_cpy_f32_f32,grid=2x1x1,threads=4x1x1,row=10", ok,
            "expected columns 0..3 of each row copied and 4..9 stale");
}

// the dispatch of ggml_metal_op_cpy for a 600-wide row: nth = 256, nw0 = 3 column blocks per row, 3*ne01
// threadgroups; the row is wider than one threadgroup and every element is copied
static void test_cpy_wide_row() {
    const int64_t ne00 = 600, ne01 = 2;
    std::vector<float> src(ne00*ne01), dst(ne00*ne01, STALE);
    for (size_t i = 0; i < src.size(); ++i) {
        src[i] = 0.5f*(float) i;
    }
    std::vector<replay_binding> bufs(3);
    bufs[1] = { (char *) src.data(), src.size()*4 };
    bufs[2] = { (char *) dst.data(), dst.size()*4 };

    const ggml_metal_kargs_cpy args = cpy_args(ne00, ne01);
    replay_effect eff;
    const bool ran = run("kernel_cpy_f32_f32", &args, sizeof(args), bufs, replay_fc(), grid_of(6, 1, 1, 256, 1, 1), eff);

    // by hand: thread (x, t) copies element (x/2)*256 + t of row x%2 when it is < 600; 6*256 = 1536 threads,
    // 1200 of them copy
    bool ok = ran && eff.n_threads == 1536 && eff.n_writes == 1200 && eff.col_min == 0 && eff.col_max == 599;
    for (int64_t i = 0; ok && i < ne00*ne01; ++i) {
        ok = dst[i] == 0.5f*(float) i;
    }
    report("CPY_MODEL", "kernel=kernel_cpy_f32_f32,grid=6x1x1,threads=256x1x1,row=600", ok,
            "expected all 1200 elements copied by 1200 of 1536 threads");
}

// rows batched in one threadgroup (nrptg = 3 rows of 4 threads), f32 -> f16
static void test_cpy_rows_per_threadgroup() {
    const int64_t ne00 = 4, ne01 = 3;
    std::vector<float> src(ne00*ne01);
    std::vector<ggml_fp16_t> dst(ne00*ne01, ggml_fp32_to_fp16(STALE));
    for (size_t i = 0; i < src.size(); ++i) {
        src[i] = 0.25f*(float) i - 1.0f;
    }
    std::vector<replay_binding> bufs(3);
    bufs[1] = { (char *) src.data(), src.size()*4 };
    bufs[2] = { (char *) dst.data(), dst.size()*2 };

    ggml_metal_kargs_cpy args = cpy_args(ne00, ne01);
    args.nb0 = 2; args.nb1 = 2*ne00; args.nb2 = 2*ne00*ne01; args.nb3 = args.nb2;

    replay_effect eff;
    const bool ran = run("kernel_cpy_f32_f16", &args, sizeof(args), bufs, replay_fc(), grid_of(1, 1, 1, 4, 3, 1), eff);

    // by hand: ntg[1] = 3, so i01 = 0*3 + tpitg.y and iw0 = 0: thread (tx, ty) copies element tx of row ty
    bool ok = ran && eff.n_writes == 12;
    for (int64_t i = 0; ok && i < ne00*ne01; ++i) {
        ok = ggml_fp16_to_fp32(dst[i]) == 0.25f*(float) i - 1.0f;
    }
    report("CPY_MODEL", "kernel=kernel_cpy_f32_f16,grid=1x1x1,threads=4x3x1,row=4", ok, "expected 12 converted elements");
}

// a source with a stride of 2 elements (a view of every other float)
static void test_cpy_strided_src() {
    const int64_t ne00 = 5;
    std::vector<float> src(2*ne00), dst(ne00, STALE);
    for (size_t i = 0; i < src.size(); ++i) {
        src[i] = (float) (100 + i);
    }
    std::vector<replay_binding> bufs(3);
    bufs[1] = { (char *) src.data(), src.size()*4 };
    bufs[2] = { (char *) dst.data(), dst.size()*4 };

    ggml_metal_kargs_cpy args = cpy_args(ne00, 1);
    args.nb00 = 8; args.nb01 = 8*ne00; args.nb02 = args.nb01; args.nb03 = args.nb01;

    replay_effect eff;
    const bool ran = run("kernel_cpy_f32_f32", &args, sizeof(args), bufs, replay_fc(), grid_of(1, 1, 1, 5, 1, 1), eff);

    const float expect[5] = { 100, 102, 104, 106, 108 };
    const bool ok = ran && memcmp(dst.data(), expect, sizeof(expect)) == 0;
    report("CPY_MODEL", "kernel=kernel_cpy_f32_f32,grid=1x1x1,threads=5x1x1,nb00=8", ok, "expected every other source element");
}

// a grid larger than the destination: the accesses past the buffer are counted, not performed
static void test_cpy_out_of_bounds() {
    std::vector<float> src(8, 1.0f), dst(4, STALE);
    std::vector<replay_binding> bufs(3);
    bufs[1] = { (char *) src.data(), src.size()*4 };
    bufs[2] = { (char *) dst.data(), dst.size()*4 };

    // the arguments claim 8 elements, the destination buffer holds 4
    const ggml_metal_kargs_cpy args = cpy_args(8, 1);
    replay_effect eff;
    const bool ran = run("kernel_cpy_f32_f32", &args, sizeof(args), bufs, replay_fc(), grid_of(1, 1, 1, 8, 1, 1), eff);

    const bool ok = ran && eff.n_writes == 4 && eff.n_oob == 4 && dst[3] == 1.0f;
    report("CPY_MODEL", "kernel=kernel_cpy_f32_f32,grid=1x1x1,threads=8x1x1,dst=4", ok, "expected 4 writes and 4 out-of-bounds accesses");
}

// add arguments for [ne0, ne1, 1, 1] rows: src0 and dst with row stride nb1 bytes, dst at byte offset offs, src1
// with row stride nb11 bytes; with a second fused addend at byte offset o1_1 of src1 when it is not 0
static ggml_metal_kargs_bin bin_args(int64_t ne0, int64_t ne1, uint64_t nb1, uint64_t nb11, uint64_t offs, uint64_t o1_1) {
    ggml_metal_kargs_bin args = {
        /*.ne00 =*/ (int32_t) ne0, /*.ne01 =*/ (int32_t) ne1, /*.ne02 =*/ 1, /*.ne03 =*/ 1,
        /*.nb00 =*/ 4, /*.nb01 =*/ nb1, /*.nb02 =*/ nb1*ne1, /*.nb03 =*/ nb1*ne1,
        /*.ne10 =*/ (int32_t) ne0, /*.ne11 =*/ (int32_t) ne1, /*.ne12 =*/ 1, /*.ne13 =*/ 1,
        /*.nb10 =*/ 4, /*.nb11 =*/ nb11, /*.nb12 =*/ nb11*ne1, /*.nb13 =*/ nb11*ne1,
        /*.ne0  =*/ (int32_t) ne0, /*.ne1  =*/ (int32_t) ne1, /*.ne2  =*/ 1, /*.ne3  =*/ 1,
        /*.nb0  =*/ 4, /*.nb1  =*/ nb1, /*.nb2  =*/ nb1*ne1, /*.nb3  =*/ nb1*ne1,
        /*.offs =*/ offs,
        /*.o1   =*/ { 0, o1_1 },
    };
    return args;
}

// the function constants of kernel_bin_fuse: op add, n_fuse fused src1, no row or column broadcast
static replay_fc bin_fc(int n_fuse) {
    replay_fc fc;
    fc.values = { { FC_BIN + 0, 0 }, { FC_BIN + 1, n_fuse }, { FC_BIN + 2, 0 }, { FC_BIN + 3, 0 } };
    return fc;
}

// the add of ACC: src1 [5, 2] added into a view of dst with row stride pnb1 = 8 floats at offset 2 floats; a
// threadgroup of 4 threads loops over the 5-wide row
static void test_bin_add_acc_view() {
    const int64_t ne10 = 5, ne11 = 2;
    const uint64_t pnb1 = 8*4, offs = 2*4;

    std::vector<float> src0(16), src1(ne10*ne11), dst(16, STALE);
    for (size_t i = 0; i < src0.size(); ++i) {
        src0[i] = (float) i;
    }
    for (size_t i = 0; i < src1.size(); ++i) {
        src1[i] = 100.0f*(float) (i + 1);
    }
    // dst already holds the copy of src0, as after the copy dispatch of ACC
    dst = src0;

    std::vector<replay_binding> bufs(4);
    bufs[1] = { (char *) src0.data(), src0.size()*4 };
    bufs[2] = { (char *) src1.data(), src1.size()*4 };
    bufs[3] = { (char *) dst.data(),  dst.size()*4 };

    const ggml_metal_kargs_bin args = bin_args(ne10, ne11, pnb1, 4*ne10, offs, 0);

    replay_effect eff;
    const bool ran = run("kernel_bin_fuse_f32_f32_f32", &args, sizeof(args), bufs, bin_fc(1), grid_of(2, 1, 1, 4, 1, 1), eff);

    // by hand: rows start at floats 2 and 10; dst[2 + c] = 2 + c + 100*(c + 1), dst[10 + c] = 10 + c + 100*(c + 6)
    const float expect[16] = {
        0, 1, 102, 203, 304, 405, 506, 7,
        8, 9, 610, 711, 812, 913, 1014, 15,
    };
    const bool ok = ran && memcmp(dst.data(), expect, sizeof(expect)) == 0 && eff.n_writes == 10;
    report("BIN_MODEL", "kernel=kernel_bin_fuse_f32_f32_f32,op=add,grid=2x1x1,threads=4x1x1,row=5", ok,
            "expected src1 added into the two 5-wide rows of the view");
}

// a chain of two fused adds on float4 elements (the _4 kernel): one thread loops over the two float4 of the row
static void test_bin_add_chain_float4() {
    std::vector<float> src0(8), src1(16), dst(8, STALE);
    for (int i = 0; i < 8; ++i) {
        src0[i] = (float) i;
        src1[i] = 10.0f*(float) i;     // the first addend at o1[0] = 0
        src1[8 + i] = 100.0f;          // the second addend at o1[1] = 32 bytes
    }
    std::vector<replay_binding> bufs(4);
    bufs[1] = { (char *) src0.data(), src0.size()*4 };
    bufs[2] = { (char *) src1.data(), src1.size()*4 };
    bufs[3] = { (char *) dst.data(),  dst.size()*4 };

    // ne00 = ne10 = ne0 = 8/4 float4 elements, one row
    const ggml_metal_kargs_bin args = bin_args(2, 1, 32, 32, 0, 32);

    replay_effect eff;
    const bool ran = run("kernel_bin_fuse_f32_f32_f32_4", &args, sizeof(args), bufs, bin_fc(2), grid_of(1, 1, 1, 1, 1, 1), eff);

    // by hand: dst[k] = k + 10*k + 100
    bool ok = ran && eff.n_writes == 2;
    for (int k = 0; ok && k < 8; ++k) {
        ok = dst[k] == 11.0f*(float) k + 100.0f;
    }
    report("BIN_MODEL", "kernel=kernel_bin_fuse_f32_f32_f32_4,op=add,n_fuse=2,grid=1x1x1,threads=1x1x1,row=2x4", ok,
            "expected src0 + both addends in every component");
}

static bool read_file(const std::string & path, std::string & out) {
    std::ifstream f(path, std::ios::binary);
    if (!f) {
        return false;
    }
    std::stringstream ss;
    ss << f.rdbuf();
    out = ss.str();
    return true;
}

static void check_tree(const std::string & tree) {
    const std::string metal = tree + "/ggml/src/ggml-metal/";

    std::string impl;
    const bool have_impl = read_file(metal + "ggml-metal-impl.h", impl);

    for (const auto & m : replay_models()) {
        const std::string params = std::string("kernel=") + m.kernel + ",source=" + m.source;

        std::string src;
        if (!read_file(metal + m.source, src)) {
            report("MODEL_SOURCE", params, false, std::string("no file ") + metal + m.source);
            continue;
        }

        std::string why;
        if (src.find(std::string("host_name(\"") + m.kernel + "\")") == std::string::npos) {
            why = std::string("the tree does not define ") + m.kernel + " there";
        }

        const std::string text = replay_kernel_text(src, m.templ);
        if (why.empty() && text.empty()) {
            why = std::string("no kernel template ") + m.templ;
        }
        if (why.empty() && text.find(std::string("constant ") + m.args + " & args") == std::string::npos) {
            why = std::string(m.templ) + " does not take " + m.args;
        }
        if (why.empty() && (!have_impl || impl.find(std::string("} ") + m.args + ";") == std::string::npos)) {
            why = std::string("ggml-metal-impl.h has no ") + m.args;
        }
        if (why.empty() && replay_hash(text) != m.body) {
            char buf[160];
            snprintf(buf, sizeof(buf), "the text of %s changed since the model was written (hash 0x%016" PRIx64 ", model 0x%016" PRIx64 ")",
                    m.templ, replay_hash(text), m.body);
            why = buf;
        }

        report("MODEL_SOURCE", params, why.empty(), why);
    }
}

int main(int argc, char ** argv) {
    std::string tree;
    for (int i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--tree") == 0 && i + 1 < argc) {
            tree = argv[++i];
        } else {
            fprintf(stderr, "usage: %s [--tree DIR]\n", argv[0]);
            return 2;
        }
    }

    printf("Backend 1/1: replay-models\n");

    test_cpy_narrow_dispatch();
    test_cpy_wide_row();
    test_cpy_rows_per_threadgroup();
    test_cpy_strided_src();
    test_cpy_out_of_bounds();
    test_bin_add_acc_view();
    test_bin_add_chain_float4();

    if (!tree.empty()) {
        check_tree(tree);
    }

    printf("  %d/%d tests passed\n", g_n_pass, g_n_total);

    return g_n_pass == g_n_total ? 0 : 1;
}
