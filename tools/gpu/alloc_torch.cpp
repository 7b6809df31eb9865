/* alloc_torch.cpp: the benchmark's PyTorch contenders: c10's CUDA caching
 * allocator called from C++ (raw_alloc_with_stream / raw_delete /
 * emptyCache), native and with expandable_segments:True.  The allocator
 * reads its settings from PYTORCH_CUDA_ALLOC_CONF at first use, so each
 * contender runs in its own process with that variable set by the caller
 * (tools/gpu-check); init refuses to run under the wrong setting.
 * This is the only C++ file: if it does not build, alloc_torch_none.c
 * stands in and the other contenders still run. */
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "bench.h"

namespace {

namespace CA = c10::cuda::CUDACachingAllocator;

thread_local char t_err[256];

int conf_matches(const char *want, char *err, size_t len)
{
    const char *have = std::getenv("PYTORCH_CUDA_ALLOC_CONF");
    bool ok = want == nullptr ? (have == nullptr || *have == '\0')
                              : (have != nullptr && std::strcmp(want, have) == 0);

    if (!ok)
        std::snprintf(err, len, "run with PYTORCH_CUDA_ALLOC_CONF=%s (it is %s)",
                      want ? want : "(unset)", have ? have : "(unset)");
    return ok ? 0 : -1;
}

int init_with(const char *want, char *err, size_t len)
{
    if (conf_matches(want, err, len) != 0)
        return -1;
    try {
        CA::init(c10::cuda::device_count());
    } catch (const std::exception &e) {
        std::snprintf(err, len, "CUDACachingAllocator::init: %s", e.what());
        return -1;
    }
    return 0;
}

int t_init_native(char *err, size_t len)
{
    return init_with(nullptr, err, len);
}

int t_init_exp(char *err, size_t len)
{
    return init_with("expandable_segments:True", err, len);
}

void *t_alloc(size_t n, bench_stream s)
{
    try {
        return CA::raw_alloc_with_stream(n, static_cast<cudaStream_t>(s));
    } catch (const std::exception &e) {
        std::snprintf(t_err, sizeof t_err, "raw_alloc_with_stream(%zu): %.200s", n, e.what());
        return nullptr;
    }
}

void t_free(void *p, size_t n, bench_stream s)
{
    (void)n;
    (void)s;
    try {
        CA::raw_delete(p);
    } catch (const std::exception &e) {
        std::snprintf(t_err, sizeof t_err, "raw_delete: %.200s", e.what());
    }
}

int t_release(void)
{
    try {
        CA::emptyCache();
    } catch (const std::exception &e) {
        std::snprintf(t_err, sizeof t_err, "emptyCache: %.200s", e.what());
        return -1;
    }
    return 0;
}

const char *t_error(void)
{
    return t_err;
}

uint64_t t_peak(void)
{
#ifdef BENCH_TORCH_NO_STATS
    return 0;
#else
    try {
        return static_cast<uint64_t>(CA::getDeviceStats(0).reserved_bytes[0].peak);
    } catch (const std::exception &) {
        return 0;
    }
#endif
}

} // namespace

extern "C" const bench_alloc bench_torch = {
    "torch", "PyTorch CUDACachingAllocator (native)", t_init_native, t_alloc, t_free,
    t_release, t_error, t_peak, nullptr,
};

extern "C" const bench_alloc bench_torch_exp = {
    "torch-exp", "PyTorch CUDACachingAllocator (expandable_segments:True)", t_init_exp,
    t_alloc, t_free, t_release, t_error, t_peak, nullptr,
};
