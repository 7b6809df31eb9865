/* alloc_torch_none.c: stands in for alloc_torch.cpp when PyTorch's C++
 * headers or libraries are missing: both PyTorch contenders refuse to
 * start, with the reason, and the other contenders run as usual. */
#include <stdio.h>

#include "bench.h"

static int n_init(char *err, size_t len)
{
    snprintf(err, len, "this benchmark was built without PyTorch (see the build log)");
    return -1;
}

static void *n_alloc(size_t n, bench_stream s)
{
    (void)n;
    (void)s;
    return NULL;
}

static void n_free(void *p, size_t n, bench_stream s)
{
    (void)p;
    (void)n;
    (void)s;
}

static int n_release(void)
{
    return -1;
}

static const char *n_error(void)
{
    return "built without PyTorch";
}

static uint64_t n_peak(void)
{
    return 0;
}

const bench_alloc bench_torch = {
    "torch", "PyTorch CUDACachingAllocator (native)", n_init, n_alloc, n_free, n_release,
    n_error, n_peak, NULL,
};

const bench_alloc bench_torch_exp = {
    "torch-exp", "PyTorch CUDACachingAllocator (expandable_segments:True)", n_init, n_alloc,
    n_free, n_release, n_error, n_peak, NULL,
};
