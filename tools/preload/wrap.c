/* wrap.c: the interposed allocation functions of the CUDA runtime and
 * driver (docs/preload.md).  Each one serves the calling thread's current
 * device (cudaGetDevice / cuCtxGetDevice, the real ones) from xseg, and
 * passes everything else through to the real function, which then gives
 * its own result and error: a size of 0, a NULL out-pointer, a pointer
 * xseg did not hand out (NULL included), a device xseg cannot serve, a call
 * made while this library is itself inside a real CUDA function (the
 * runtime's cudaMalloc calls the driver's cuMemAlloc: pl_inside), or no
 * current device.  Streams: the legacy handle (0x1) is NULL for xseg; the
 * per-thread variants (_ptsz) turn NULL into the per-thread stream (0x2).
 * Errors of xseg's own: out of memory (the cap, the device) is
 * cudaErrorMemoryAllocation / CUDA_ERROR_OUT_OF_MEMORY; a free inside xseg's
 * range of something that is not a live block (a double or interior free)
 * is cudaErrorInvalidValue / CUDA_ERROR_INVALID_VALUE, as the real ones
 * answer for a pointer they never handed out. */
#include <string.h>

#include "preload.h"

typedef pl_result (*fn_dev_p)(int *);
typedef pl_result (*fn_malloc)(void **, size_t);
typedef pl_result (*fn_malloc_async)(void **, size_t, pl_stream);
typedef pl_result (*fn_free)(void *);
typedef pl_result (*fn_free_async)(void *, pl_stream);
typedef pl_result (*fn_info)(size_t *, size_t *);
typedef pl_result (*fn_cu_alloc)(pl_devptr *, size_t);
typedef pl_result (*fn_cu_alloc_async)(pl_devptr *, size_t, pl_stream);
typedef pl_result (*fn_cu_free)(pl_devptr);
typedef pl_result (*fn_cu_free_async)(pl_devptr, pl_stream);

static int device_of(enum pl_slot slot, int *device)
{
    void *p = pl_real(slot);
    fn_dev_p fn;
    if (!p)
        return 0;
    memcpy(&fn, &p, sizeof p);
    int old = pl_inside;
    pl_inside = 1;
    pl_result rc = fn(device);
    pl_inside = old;
    return rc == PL_SUCCESS;
}

static pl_stream legacy(pl_stream s)
{
    return s == PL_STREAM_LEGACY ? NULL : s;
}

static pl_stream per_thread(pl_stream s)
{
    return s ? s : PL_STREAM_PER_THREAD;
}

/* PL_SERVED / PL_FAILED: answered; PL_PASS: the real function must. */
static int try_alloc(enum pl_slot dev_slot, size_t size, pl_stream s, void **out)
{
    int d = 0;
    if (pl_inside || !out || size == 0 || !device_of(dev_slot, &d))
        return PL_PASS;
    return pl_alloc(d, size, s, out);
}

static int try_free(void *ptr, int async, pl_stream s)
{
    return pl_inside || !ptr ? PL_PASS : pl_free(ptr, async, s);
}

static pl_result answer(int r)
{
    return r == PL_SERVED ? PL_SUCCESS : r == PL_FAILED ? PL_ERR_OUT_OF_MEMORY
                                                        : PL_ERR_INVALID_VALUE;
}

#define FREE_ANSWER(r) ((r) == PL_SERVED ? PL_SUCCESS : PL_ERR_INVALID_VALUE)

/* ---- the runtime ---- */

pl_result cudaMalloc(void **ptr, size_t size)
{
    pl_count(S_cudaMalloc);
    int r = try_alloc(S_cudaGetDevice, size, NULL, ptr);
    if (r != PL_PASS)
        return answer(r);
    PASS(S_cudaMalloc, fn_malloc, ptr, size);
}

pl_result cudaMallocAsync(void **ptr, size_t size, pl_stream stream)
{
    pl_count(S_cudaMallocAsync);
    int r = try_alloc(S_cudaGetDevice, size, legacy(stream), ptr);
    if (r != PL_PASS)
        return answer(r);
    PASS(S_cudaMallocAsync, fn_malloc_async, ptr, size, stream);
}

pl_result cudaMallocAsync_ptsz(void **ptr, size_t size, pl_stream stream)
{
    pl_count(S_cudaMallocAsync_ptsz);
    int r = try_alloc(S_cudaGetDevice, size, per_thread(stream), ptr);
    if (r != PL_PASS)
        return answer(r);
    PASS(S_cudaMallocAsync_ptsz, fn_malloc_async, ptr, size, stream);
}

pl_result cudaFree(void *ptr)
{
    pl_count(S_cudaFree);
    int r = try_free(ptr, 0, NULL);
    if (r != PL_PASS)
        return FREE_ANSWER(r);
    PASS(S_cudaFree, fn_free, ptr);
}

pl_result cudaFreeAsync(void *ptr, pl_stream stream)
{
    pl_count(S_cudaFreeAsync);
    int r = try_free(ptr, 1, legacy(stream));
    if (r != PL_PASS)
        return FREE_ANSWER(r);
    PASS(S_cudaFreeAsync, fn_free_async, ptr, stream);
}

pl_result cudaFreeAsync_ptsz(void *ptr, pl_stream stream)
{
    pl_count(S_cudaFreeAsync_ptsz);
    int r = try_free(ptr, 1, per_thread(stream));
    if (r != PL_PASS)
        return FREE_ANSWER(r);
    PASS(S_cudaFreeAsync_ptsz, fn_free_async, ptr, stream);
}

/* The real figures, then the cap of the current device's allocator. */
static pl_result meminfo(enum pl_slot slot, enum pl_slot dev_slot, size_t *free_bytes,
                         size_t *total_bytes)
{
    void *p = pl_real(slot);
    fn_info fn;
    int d = 0, outer = pl_inside;
    if (!p)
        return PL_ERR_NOT_INITIALIZED;
    memcpy(&fn, &p, sizeof p);
    pl_inside = 1;
    pl_result rc = fn(free_bytes, total_bytes);
    pl_inside = outer;
    if (rc == PL_SUCCESS && !outer && free_bytes && total_bytes && device_of(dev_slot, &d))
        pl_meminfo(d, free_bytes, total_bytes);
    return rc;
}

pl_result cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
    pl_count(S_cudaMemGetInfo);
    return meminfo(S_cudaMemGetInfo, S_cudaGetDevice, free_bytes, total_bytes);
}

/* ---- the driver ---- */

static pl_result cu_alloc(size_t size, pl_stream s, pl_devptr *ptr, int *passed)
{
    void *p = NULL;
    int r = try_alloc(S_cuCtxGetDevice, size, s, ptr ? &p : NULL);
    *passed = r == PL_PASS;
    if (r == PL_SERVED)
        *ptr = (pl_devptr)(uintptr_t)p;
    return answer(r);
}

pl_result cuMemAlloc_v2(pl_devptr *ptr, size_t size)
{
    pl_count(S_cuMemAlloc_v2);
    int passed;
    pl_result rc = cu_alloc(size, NULL, ptr, &passed);
    if (!passed)
        return rc;
    PASS(S_cuMemAlloc_v2, fn_cu_alloc, ptr, size);
}

pl_result cuMemAllocAsync(pl_devptr *ptr, size_t size, pl_stream stream)
{
    pl_count(S_cuMemAllocAsync);
    int passed;
    pl_result rc = cu_alloc(size, legacy(stream), ptr, &passed);
    if (!passed)
        return rc;
    PASS(S_cuMemAllocAsync, fn_cu_alloc_async, ptr, size, stream);
}

pl_result cuMemAllocAsync_ptsz(pl_devptr *ptr, size_t size, pl_stream stream)
{
    pl_count(S_cuMemAllocAsync_ptsz);
    int passed;
    pl_result rc = cu_alloc(size, per_thread(stream), ptr, &passed);
    if (!passed)
        return rc;
    PASS(S_cuMemAllocAsync_ptsz, fn_cu_alloc_async, ptr, size, stream);
}

pl_result cuMemFree_v2(pl_devptr ptr)
{
    pl_count(S_cuMemFree_v2);
    int r = try_free((void *)(uintptr_t)ptr, 0, NULL);
    if (r != PL_PASS)
        return FREE_ANSWER(r);
    PASS(S_cuMemFree_v2, fn_cu_free, ptr);
}

pl_result cuMemFreeAsync(pl_devptr ptr, pl_stream stream)
{
    pl_count(S_cuMemFreeAsync);
    int r = try_free((void *)(uintptr_t)ptr, 1, legacy(stream));
    if (r != PL_PASS)
        return FREE_ANSWER(r);
    PASS(S_cuMemFreeAsync, fn_cu_free_async, ptr, stream);
}

pl_result cuMemFreeAsync_ptsz(pl_devptr ptr, pl_stream stream)
{
    pl_count(S_cuMemFreeAsync_ptsz);
    int r = try_free((void *)(uintptr_t)ptr, 1, per_thread(stream));
    if (r != PL_PASS)
        return FREE_ANSWER(r);
    PASS(S_cuMemFreeAsync_ptsz, fn_cu_free_async, ptr, stream);
}

pl_result cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes)
{
    pl_count(S_cuMemGetInfo_v2);
    return meminfo(S_cuMemGetInfo_v2, S_cuCtxGetDevice, free_bytes, total_bytes);
}
