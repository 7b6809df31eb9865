/* fakecuda.c: libfakecuda.so, a stand-in for libcuda.so.1 in the preload
 * tests (tests/test_preload.c).  Device memory is host memory from
 * aligned_alloc, every live allocation is remembered (a free of anything
 * else is CUDA_ERROR_INVALID_VALUE, as the real driver answers), every call
 * is counted (fake_count), and cuGetProcAddress hands out the addresses of
 * internal functions, not of the exported symbols, as the real driver does:
 * so only cuGetProcAddress routing can bring a caller of the table to the
 * preload library.  The current device is a per-thread number
 * (fake_set_device; cuCtxPushCurrent takes a primary context of
 * cuDevicePrimaryCtxRetain).  Pointer queries and IPC handles answer for
 * its own allocations, interior pointers too, with values the tests
 * recognise (device ordinal FAKE_ORDINAL, sizes rounded to 256 bytes, a
 * "fakeipc" handle); BUFFER_ID for any pointer; CUDA_ERROR_NOT_FOUND /
 * INVALID_VALUE, or zeros from cuPointerGetAttributes, for the others. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fakecuda.h"

#define FAKE_TOTAL (80ull << 30)

static const char *const g_names[FC_COUNT] = {
    "cuMemAlloc_v2", "cuMemAlloc", "cuMemFree_v2", "cuMemAllocAsync", "cuMemAllocAsync_ptsz",
    "cuMemFreeAsync", "cuMemFreeAsync_ptsz", "cuMemGetInfo_v2", "cuCtxSynchronize",
    "cuGetProcAddress", "alloc_dev0", "alloc_dev1", "cuMemGetAddressRange_v2",
    "cuPointerGetAttribute", "cuPointerGetAttributes", "cuIpcGetMemHandle"};
static atomic_long g_counts[FC_COUNT];

typedef struct live {
    struct live *next;
    uintptr_t ptr;
    size_t size;
} live;
static live *g_live;
static size_t g_live_bytes;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local int t_dev, t_saved;

long fake_count(const char *name)
{
    for (int i = 0; i < FC_COUNT; i++)
        if (strcmp(name, g_names[i]) == 0)
            return atomic_load(&g_counts[i]);
    return -1;
}

void fake_set_device(int device)
{
    t_dev = device;
}

static void count(int c)
{
    atomic_fetch_add(&g_counts[c], 1);
}

int fake_owns(const void *ptr)
{
    pthread_mutex_lock(&g_lock);
    live *l = g_live;
    while (l && l->ptr != (uintptr_t)ptr)
        l = l->next;
    pthread_mutex_unlock(&g_lock);
    return l != NULL;
}

/* The live allocation holding p (its start or any byte inside): 1, with
 * its start and size. */
static int fake_range_of(uintptr_t p, uintptr_t *base, size_t *size)
{
    pthread_mutex_lock(&g_lock);
    live *l = g_live;
    while (l && p - l->ptr >= l->size)
        l = l->next;
    if (l) {
        *base = l->ptr;
        *size = l->size;
    }
    pthread_mutex_unlock(&g_lock);
    return l != NULL;
}

void *fake_direct_alloc(size_t size)
{
    size_t n = (size + 255) / 256 * 256;
    live *l = malloc(sizeof *l);
    void *p = aligned_alloc(256, n);
    if (!l || !p) {
        free(l);
        free(p);
        return NULL;
    }
    l->ptr = (uintptr_t)p;
    l->size = n;
    pthread_mutex_lock(&g_lock);
    l->next = g_live;
    g_live = l;
    g_live_bytes += n;
    pthread_mutex_unlock(&g_lock);
    return p;
}

static int fake_release(uintptr_t ptr)
{
    pthread_mutex_lock(&g_lock);
    live **pp = &g_live;
    while (*pp && (*pp)->ptr != ptr)
        pp = &(*pp)->next;
    live *l = *pp;
    if (l) {
        *pp = l->next;
        g_live_bytes -= l->size;
    }
    pthread_mutex_unlock(&g_lock);
    if (!l)
        return FAKE_INVALID_VALUE;
    free((void *)l->ptr);
    free(l);
    return 0;
}

/* ---- the internal functions (what cuGetProcAddress hands out) ---- */

static int do_alloc(int which, fake_devptr *dptr, size_t size)
{
    count(which);
    if (!dptr || size == 0)
        return FAKE_INVALID_VALUE;
    void *p = fake_direct_alloc(size);
    if (!p)
        return FAKE_OUT_OF_MEMORY;
    count(t_dev == 0 ? FC_ALLOC_DEV0 : FC_ALLOC_DEV1);
    *dptr = (fake_devptr)(uintptr_t)p;
    return 0;
}

static int i_alloc(fake_devptr *d, size_t n) { return do_alloc(FC_cuMemAlloc_v2, d, n); }
static int i_alloc_v1(unsigned *d, unsigned n)
{
    (void)d;
    (void)n;
    count(FC_cuMemAlloc);
    return FAKE_INVALID_VALUE; /* 32-bit pointers: never used here */
}
static int i_free(fake_devptr p)
{
    count(FC_cuMemFree_v2);
    return fake_release((uintptr_t)p);
}
static int i_alloc_async(fake_devptr *d, size_t n, void *s)
{
    (void)s;
    return do_alloc(FC_cuMemAllocAsync, d, n);
}
static int i_alloc_async_ptsz(fake_devptr *d, size_t n, void *s)
{
    (void)s;
    return do_alloc(FC_cuMemAllocAsync_ptsz, d, n);
}
static int i_free_async(fake_devptr p, void *s)
{
    (void)s;
    count(FC_cuMemFreeAsync);
    return fake_release((uintptr_t)p);
}
static int i_free_async_ptsz(fake_devptr p, void *s)
{
    (void)s;
    count(FC_cuMemFreeAsync_ptsz);
    return fake_release((uintptr_t)p);
}
static int i_info(size_t *f, size_t *t)
{
    count(FC_cuMemGetInfo_v2);
    if (!f || !t)
        return FAKE_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    *f = FAKE_TOTAL - g_live_bytes;
    pthread_mutex_unlock(&g_lock);
    *t = FAKE_TOTAL;
    return 0;
}
static int i_range(fake_devptr *base, size_t *size, fake_devptr p)
{
    uintptr_t b = 0;
    size_t n = 0;
    count(FC_cuMemGetAddressRange_v2);
    if (!fake_range_of((uintptr_t)p, &b, &n))
        return FAKE_NOT_FOUND;
    if (base)
        *base = b;
    if (size)
        *size = n;
    return 0;
}
static int i_range_v1(unsigned *base, unsigned *size, unsigned p)
{
    (void)base;
    (void)size;
    (void)p;
    return FAKE_INVALID_VALUE; /* 32-bit pointers: never used here */
}

static void put32(void *data, unsigned v) { memcpy(data, &v, sizeof v); }
static void put64(void *data, unsigned long long v) { memcpy(data, &v, sizeof v); }

/* The bytes an attribute's value takes (CUdeviceptr, pointers, ids,
 * size_t: 8; the rest 4). */
static size_t attr_bytes(int attr)
{
    return attr == FA_MEMORY_TYPE || attr == FA_IS_MANAGED || attr == FA_DEVICE_ORDINAL ||
                   attr == FA_IPC_CAPABLE || attr == FA_MAPPED || attr == 6
               ? 4
               : 8;
}

/* One attribute: BUFFER_ID for any pointer (a driver knows every mapping),
 * the others for its own allocations only. */
static int attr_of(void *data, int attr, fake_devptr p)
{
    uintptr_t b = 0;
    size_t n = 0;
    if (attr == FA_BUFFER_ID) {
        put64(data, FAKE_BUFFER_ID);
        return 0;
    }
    if (!fake_range_of((uintptr_t)p, &b, &n))
        return FAKE_INVALID_VALUE;
    switch (attr) {
    case FA_MEMORY_TYPE: put32(data, 2); return 0;
    case FA_DEVICE_POINTER: put64(data, p); return 0;
    case FA_IS_MANAGED: put32(data, 0); return 0;
    case FA_DEVICE_ORDINAL: put32(data, FAKE_ORDINAL); return 0;
    case FA_IPC_CAPABLE: put32(data, 1); return 0;
    case FA_RANGE_START_ADDR: put64(data, b); return 0;
    case FA_RANGE_SIZE: put64(data, n); return 0;
    case FA_MAPPED: put32(data, 1); return 0;
    default: return FAKE_INVALID_VALUE;
    }
}
static int i_attr(void *data, int attr, fake_devptr p)
{
    count(FC_cuPointerGetAttribute);
    return data ? attr_of(data, attr, p) : FAKE_INVALID_VALUE;
}
/* As the driver's: no error for a pointer it does not know, zeros. */
static int i_attrs(unsigned n, int *attrs, void **data, fake_devptr p)
{
    count(FC_cuPointerGetAttributes);
    if (!attrs || !data)
        return FAKE_INVALID_VALUE;
    for (unsigned i = 0; i < n; i++)
        if (data[i] && attr_of(data[i], attrs[i], p) != 0)
            memset(data[i], 0, attr_bytes(attrs[i]));
    return 0;
}
/* A handle for the start of a live allocation: "fakeipc" and the address. */
static int i_ipc(fake_ipc_handle *h, fake_devptr p)
{
    uintptr_t b = 0;
    size_t n = 0;
    count(FC_cuIpcGetMemHandle);
    if (!h || !fake_range_of((uintptr_t)p, &b, &n) || b != p)
        return FAKE_INVALID_VALUE;
    memset(h, 0, sizeof *h);
    snprintf(h->reserved, sizeof h->reserved, "fakeipc %llx", p);
    return 0;
}

static int i_ctx_get_device(int *d)
{
    *d = t_dev;
    return 0;
}
/* FAKE_SYNC_CAPTURE=N: the first N syncs on threads whose capture mode is
 * not relaxed answer CUDA_ERROR_STREAM_CAPTURE_IMPLICIT (906), as during
 * another thread's global-mode capture. */
static atomic_long g_refuse = -1;
static _Thread_local int t_relaxed;

static int refused(void)
{
    long n = atomic_load(&g_refuse);
    if (n < 0) {
        const char *e = getenv("FAKE_SYNC_CAPTURE");
        long v = e ? atol(e) : 0;
        atomic_compare_exchange_strong(&g_refuse, &n, v);
    }
    if (t_relaxed)
        return 0;
    for (n = atomic_load(&g_refuse); n > 0;)
        if (atomic_compare_exchange_weak(&g_refuse, &n, n - 1))
            return 1;
    return 0;
}

/* FAKE_SYNC_DELAY_US=N: each sync takes N microseconds (the GPU's queued
 * work), so that a drain stays in flight for a while. */
static long sync_delay_us(void)
{
    static atomic_long us = -1;
    long v = atomic_load(&us);
    if (v < 0) {
        const char *e = getenv("FAKE_SYNC_DELAY_US");
        v = e ? atol(e) : 0;
        atomic_store(&us, v);
    }
    return v;
}

static int i_sync(void)
{
    if (refused())
        return 906;
    long us = sync_delay_us();
    if (us > 0)
        nanosleep(&(struct timespec){us / 1000000, us % 1000000 * 1000}, NULL);
    count(FC_cuCtxSynchronize);
    return 0;
}
static int i_getproc2(const char *sym, void **pfn, int version, uint64_t flags, int *status);
static int i_getproc1(const char *sym, void **pfn, int version, uint64_t flags)
{
    return i_getproc2(sym, pfn, version, flags, NULL);
}

#define FN(f) ((void *)(f))

void *fake_v1_alloc_addr(void)
{
    return FN(i_alloc_v1);
}

void *fake_v1_range_addr(void)
{
    return FN(i_range_v1);
}

static void *lookup(const char *sym, int version, uint64_t flags)
{
    int ptds = (flags & 2) != 0;
    if (strcmp(sym, "cuMemAlloc") == 0)
        return version >= 3020 ? FN(i_alloc) : FN(i_alloc_v1);
    if (strcmp(sym, "cuMemFree") == 0)
        return FN(i_free);
    if (strcmp(sym, "cuMemGetInfo") == 0)
        return FN(i_info);
    if (strcmp(sym, "cuMemAllocAsync") == 0)
        return ptds ? FN(i_alloc_async_ptsz) : FN(i_alloc_async);
    if (strcmp(sym, "cuMemFreeAsync") == 0)
        return ptds ? FN(i_free_async_ptsz) : FN(i_free_async);
    if (strcmp(sym, "cuMemGetAddressRange") == 0)
        return version >= 3020 ? FN(i_range) : FN(i_range_v1);
    if (strcmp(sym, "cuPointerGetAttribute") == 0)
        return FN(i_attr);
    if (strcmp(sym, "cuPointerGetAttributes") == 0)
        return FN(i_attrs);
    if (strcmp(sym, "cuIpcGetMemHandle") == 0)
        return FN(i_ipc);
    if (strcmp(sym, "cuCtxGetDevice") == 0)
        return FN(i_ctx_get_device);
    if (strcmp(sym, "cuCtxSynchronize") == 0)
        return FN(i_sync);
    if (strcmp(sym, "cuGetProcAddress") == 0)
        return version >= 12000 ? FN(i_getproc2) : FN(i_getproc1);
    return NULL;
}

static int i_getproc2(const char *sym, void **pfn, int version, uint64_t flags, int *status)
{
    count(FC_cuGetProcAddress);
    if (!sym || !pfn)
        return FAKE_INVALID_VALUE;
    *pfn = lookup(sym, version, flags);
    if (status)
        *status = *pfn ? 0 : 1;
    return 0;
}

/* ---- the exported entry points ---- */

int cuMemAlloc_v2(fake_devptr *d, size_t n) { return i_alloc(d, n); }
int cuMemAlloc(unsigned *d, unsigned n) { return i_alloc_v1(d, n); }
int cuMemFree_v2(fake_devptr p) { return i_free(p); }
int cuMemAllocAsync(fake_devptr *d, size_t n, void *s) { return i_alloc_async(d, n, s); }
int cuMemAllocAsync_ptsz(fake_devptr *d, size_t n, void *s) { return i_alloc_async_ptsz(d, n, s); }
int cuMemFreeAsync(fake_devptr p, void *s) { return i_free_async(p, s); }
int cuMemFreeAsync_ptsz(fake_devptr p, void *s) { return i_free_async_ptsz(p, s); }
int cuMemGetInfo_v2(size_t *f, size_t *t) { return i_info(f, t); }
int cuMemGetAddressRange_v2(fake_devptr *base, size_t *size, fake_devptr p)
{
    return i_range(base, size, p);
}
int cuPointerGetAttribute(void *data, int attr, fake_devptr p) { return i_attr(data, attr, p); }
int cuPointerGetAttributes(unsigned n, int *attrs, void **data, fake_devptr p)
{
    return i_attrs(n, attrs, data, p);
}
int cuIpcGetMemHandle(fake_ipc_handle *h, fake_devptr p) { return i_ipc(h, p); }
int cuCtxGetDevice(int *d) { return i_ctx_get_device(d); }
int cuCtxSynchronize(void) { return i_sync(); }
int cuDeviceGet(int *dev, int ordinal)
{
    *dev = ordinal;
    return 0;
}
int cuDevicePrimaryCtxRetain(void **ctx, int dev)
{
    *ctx = (void *)(intptr_t)(dev + 1);
    return 0;
}
int cuDevicePrimaryCtxGetState(int dev, unsigned *flags, int *active)
{
    (void)dev;
    *flags = 0;
    *active = 1;
    return 0;
}
int cuDevicePrimaryCtxRelease_v2(int dev)
{
    (void)dev;
    return 0;
}
int cuCtxPushCurrent_v2(void *ctx)
{
    t_saved = t_dev;
    t_dev = (int)(intptr_t)ctx - 1;
    return 0;
}
int cuThreadExchangeStreamCaptureMode(int *mode)
{
    int old = t_relaxed ? 2 : 0;
    t_relaxed = *mode == 2;
    *mode = old;
    return 0;
}
int cuCtxGetCurrent(void **ctx)
{
    *ctx = (void *)(intptr_t)(t_dev + 1); /* as a primary context of cuDevicePrimaryCtxRetain */
    return 0;
}
int cuCtxPopCurrent_v2(void **ctx)
{
    if (ctx)
        *ctx = (void *)(intptr_t)(t_dev + 1);
    t_dev = t_saved;
    return 0;
}
int cuGetProcAddress_v2(const char *sym, void **pfn, int version, uint64_t flags, int *status)
{
    return i_getproc2(sym, pfn, version, flags, status);
}
int cuGetProcAddress(const char *sym, void **pfn, int version, uint64_t flags)
{
    return i_getproc1(sym, pfn, version, flags);
}
