/* alloc_async.c: the benchmark's cudaMallocAsync contender: the device's
 * default memory pool with its release threshold at the maximum (nothing
 * goes back to the device at a synchronisation); release = cudaMemPoolTrimTo
 * after a device synchronisation. */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>

#include "bench.h"

static cudaMemPool_t g_pool;
static _Thread_local char t_err[160];

static int a_init(char *err, size_t len)
{
    uint64_t max = UINT64_MAX;
    cudaError_t rc = cudaDeviceGetDefaultMemPool(&g_pool, 0);

    if (rc == cudaSuccess)
        rc = cudaMemPoolSetAttribute(g_pool, cudaMemPoolAttrReleaseThreshold, &max);
    if (rc != cudaSuccess) {
        snprintf(err, len, "default memory pool: %s", cudaGetErrorString(rc));
        return -1;
    }
    return 0;
}

static void *a_alloc(size_t n, bench_stream s)
{
    void *p = NULL;
    cudaError_t rc = cudaMallocAsync(&p, n, (cudaStream_t)s);

    if (rc != cudaSuccess) {
        snprintf(t_err, sizeof t_err, "cudaMallocAsync(%zu): %s", n, cudaGetErrorString(rc));
        (void)cudaGetLastError();
        return NULL;
    }
    return p;
}

static void a_free(void *p, size_t n, bench_stream s)
{
    (void)n;
    (void)cudaFreeAsync(p, (cudaStream_t)s);
}

static int a_release(void)
{
    if (cudaDeviceSynchronize() != cudaSuccess)
        return -1;
    return cudaMemPoolTrimTo(g_pool, 0) == cudaSuccess ? 0 : -1;
}

static const char *a_error(void)
{
    return t_err;
}

static uint64_t a_peak(void)
{
    uint64_t v = 0;

    return cudaMemPoolGetAttribute(g_pool, cudaMemPoolAttrReservedMemHigh, &v) == cudaSuccess
               ? v : 0;
}

const bench_alloc bench_async = {
    .name = "async",
    .desc = "cudaMallocAsync (default pool, release threshold max)",
    .init = a_init,
    .alloc = a_alloc,
    .free = a_free,
    .release = a_release,
    .last_error = a_error,
    .own_peak = a_peak,
};
