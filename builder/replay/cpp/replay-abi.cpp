// the C ABI of replay-abi.h over replay-kernels.h

#include "replay-abi.h"
#include "replay-kernels.h"

#include <vector>

int patchset_replay_has_model(const char * kernel) {
    return kernel != nullptr && replay_model_find(kernel) != nullptr;
}

int patchset_replay_run(const char * kernel, const void * args, size_t args_size,
                        const struct patchset_replay_binding * bufs, int n_bufs,
                        const int32_t * fc, int n_fc,
                        const uint32_t tg[3], const uint16_t ntg[3],
                        struct patchset_replay_effect * eff) {
    const replay_model * model = kernel ? replay_model_find(kernel) : nullptr;
    if (model == nullptr) {
        return -1;
    }

    std::vector<replay_binding> b((size_t) n_bufs);
    for (int i = 0; i < n_bufs; ++i) {
        b[i].data = bufs[i].data;
        b[i].size = bufs[i].size;
    }

    replay_fc f;
    for (int i = 0; i < n_fc; ++i) {
        f.values.emplace_back(fc[2*i], fc[2*i + 1]);
    }

    const replay_grid grid = { { tg[0], tg[1], tg[2] }, { ntg[0], ntg[1], ntg[2] } };

    replay_effect e;
    const bool ran = model->fn(args, args_size, b.data(), n_bufs, f, grid, e);

    eff->n_threads = e.n_threads;
    eff->n_writes  = e.n_writes;
    eff->n_expect  = e.n_expect;
    eff->n_oob     = e.n_oob;
    eff->n_nil     = e.n_nil;
    eff->col_min   = e.col_min;
    eff->col_max   = e.col_max;
    eff->row_len   = e.row_len;

    return ran ? 1 : 0;
}
