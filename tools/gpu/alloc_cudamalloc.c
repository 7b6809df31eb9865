/* alloc_cudamalloc.c: the benchmark's plain cudaMalloc / cudaFree
 * contender: no caching, so release has nothing to do. */
#include <cuda_runtime_api.h>
#include <stdio.h>

#include "bench.h"

static _Thread_local char t_err[160];

static int m_init(char *err, size_t len)
{
    (void)err;
    (void)len;
    return 0;
}

static void *m_alloc(size_t n, bench_stream s)
{
    void *p = NULL;
    cudaError_t rc = cudaMalloc(&p, n);

    (void)s;
    if (rc != cudaSuccess) {
        snprintf(t_err, sizeof t_err, "cudaMalloc(%zu): %s", n, cudaGetErrorString(rc));
        (void)cudaGetLastError();
        return NULL;
    }
    return p;
}

static void m_free(void *p, size_t n, bench_stream s)
{
    (void)n;
    (void)s;
    (void)cudaFree(p);
}

static int m_release(void)
{
    return 0;
}

static const char *m_error(void)
{
    return t_err;
}

static uint64_t m_peak(void)
{
    return 0;
}

const bench_alloc bench_cudamalloc = {
    .name = "cudamalloc",
    .desc = "cudaMalloc / cudaFree",
    .init = m_init,
    .alloc = m_alloc,
    .free = m_free,
    .release = m_release,
    .last_error = m_error,
    .own_peak = m_peak,
};
