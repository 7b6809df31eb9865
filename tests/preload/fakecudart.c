/* fakecudart.c: libfakecudart.so, a stand-in for libcudart in the preload
 * tests.  Like the real runtime it never links the driver: it dlopens it
 * (FAKE_LIBCUDA, default libfakecuda.so), takes cuGetProcAddress_v2 with
 * dlsym and every other driver function through it, and its cudaMalloc &
 * co. (and cudaPointerGetAttributes, cudaIpcGetMemHandle) call the driver
 * through that table.  Calls are counted (fakert_count).
 * fakert_table_malloc/free/attrs reach the table without going through an
 * exported runtime function, as a statically linked runtime does. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"

enum { RC_cudaMalloc, RC_cudaFree, RC_cudaMallocAsync, RC_cudaFreeAsync, RC_cudaMemGetInfo,
       RC_cudaPointerGetAttributes, RC_cudaIpcGetMemHandle, RC_COUNT };
static const char *const g_names[RC_COUNT] = {"cudaMalloc", "cudaFree", "cudaMallocAsync",
                                              "cudaFreeAsync", "cudaMemGetInfo",
                                              "cudaPointerGetAttributes",
                                              "cudaIpcGetMemHandle"};
static atomic_long g_counts[RC_COUNT];

typedef int (*getproc_fn)(const char *, void **, int, uint64_t, int *);
static struct {
    int (*alloc)(fake_devptr *, size_t);
    int (*free)(fake_devptr);
    int (*alloc_async)(fake_devptr *, size_t, void *);
    int (*free_async)(fake_devptr, void *);
    int (*info)(size_t *, size_t *);
    int (*get_device)(int *);
    int (*attrs)(unsigned, int *, void **, fake_devptr);
    int (*ipc)(fake_ipc_handle *, fake_devptr);
    void (*set_device)(int);
} T;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_ok;

static void take(getproc_fn gp, const char *name, void *slot)
{
    void *p = NULL;
    int st = 0;
    if (gp(name, &p, 13000, 0, &st) != 0)
        p = NULL;
    memcpy(slot, &p, sizeof p);
}

static void load(void)
{
    const char *name = getenv("FAKE_LIBCUDA");
    void *h = dlopen(name && *name ? name : "libfakecuda.so", RTLD_NOW | RTLD_LOCAL);
    void *p = h ? dlsym(h, "cuGetProcAddress_v2") : NULL;
    void *s = h ? dlsym(h, "fake_set_device") : NULL;
    getproc_fn gp;
    if (!p || !s)
        return;
    memcpy(&gp, &p, sizeof p);
    memcpy(&T.set_device, &s, sizeof s);
    take(gp, "cuMemAlloc", &T.alloc);
    take(gp, "cuMemFree", &T.free);
    take(gp, "cuMemAllocAsync", &T.alloc_async);
    take(gp, "cuMemFreeAsync", &T.free_async);
    take(gp, "cuMemGetInfo", &T.info);
    take(gp, "cuCtxGetDevice", &T.get_device);
    take(gp, "cuPointerGetAttributes", &T.attrs);
    take(gp, "cuIpcGetMemHandle", &T.ipc);
    g_ok = T.alloc && T.free && T.alloc_async && T.free_async && T.info && T.get_device &&
           T.attrs && T.ipc;
}

static int ready(int c)
{
    if (c >= 0)
        atomic_fetch_add(&g_counts[c], 1);
    pthread_once(&g_once, load);
    return g_ok;
}

long fakert_count(const char *name)
{
    for (int i = 0; i < RC_COUNT; i++)
        if (strcmp(name, g_names[i]) == 0)
            return atomic_load(&g_counts[i]);
    return -1;
}

static int rt_error(int cu)
{
    return cu == 0 ? 0 : cu == FAKE_OUT_OF_MEMORY ? 2 : 1;
}

int cudaMalloc(void **ptr, size_t size)
{
    fake_devptr d = 0;
    if (!ready(RC_cudaMalloc))
        return 3;
    if (!ptr)
        return 1;
    if (size == 0) {
        *ptr = NULL;
        return 0;
    }
    int rc = T.alloc(&d, size);
    *ptr = rc ? NULL : (void *)(uintptr_t)d;
    return rt_error(rc);
}

int cudaFree(void *ptr)
{
    if (!ready(RC_cudaFree))
        return 3;
    return ptr ? rt_error(T.free((fake_devptr)(uintptr_t)ptr)) : 0;
}

int cudaMallocAsync(void **ptr, size_t size, void *stream)
{
    fake_devptr d = 0;
    if (!ready(RC_cudaMallocAsync))
        return 3;
    if (!ptr)
        return 1;
    int rc = T.alloc_async(&d, size, stream);
    *ptr = rc ? NULL : (void *)(uintptr_t)d;
    return rt_error(rc);
}

int cudaFreeAsync(void *ptr, void *stream)
{
    if (!ready(RC_cudaFreeAsync))
        return 3;
    return ptr ? rt_error(T.free_async((fake_devptr)(uintptr_t)ptr, stream)) : 0;
}

int cudaMemGetInfo(size_t *f, size_t *t)
{
    return ready(RC_cudaMemGetInfo) ? rt_error(T.info(f, t)) : 3;
}

int cudaGetDevice(int *device)
{
    return ready(-1) ? rt_error(T.get_device(device)) : 3;
}

int cudaSetDevice(int device)
{
    if (!ready(-1))
        return 3;
    T.set_device(device);
    return 0;
}

int fakert_table_malloc(void **ptr, size_t size)
{
    fake_devptr d = 0;
    if (!ready(-1))
        return 3;
    int rc = T.alloc(&d, size);
    *ptr = rc ? NULL : (void *)(uintptr_t)d;
    return rt_error(rc);
}

int fakert_table_free(void *ptr)
{
    return ready(-1) ? rt_error(T.free((fake_devptr)(uintptr_t)ptr)) : 3;
}

/* As the real runtime: the driver's cuPointerGetAttributes, and what it
 * does not know is unregistered host memory (cudaSuccess). */
int cudaPointerGetAttributes(fake_ptr_attrs *a, const void *ptr)
{
    unsigned type = 0;
    int ordinal = -2;
    fake_devptr dp = 0;
    int at[3] = {FA_MEMORY_TYPE, FA_DEVICE_ORDINAL, FA_DEVICE_POINTER};
    void *data[3] = {&type, &ordinal, &dp};
    if (!ready(RC_cudaPointerGetAttributes))
        return 3;
    if (!a)
        return 1;
    int rc = T.attrs(3, at, data, (fake_devptr)(uintptr_t)ptr);
    if (rc)
        return rt_error(rc);
    int dev = type == 2;
    a->type = dev ? 2 : 0;
    a->device = dev ? ordinal : -2;
    a->devicePointer = dev ? (void *)(uintptr_t)dp : NULL;
    a->hostPointer = dev ? NULL : (void *)(uintptr_t)ptr;
    return 0;
}

int cudaIpcGetMemHandle(fake_ipc_handle *h, void *ptr)
{
    if (!ready(RC_cudaIpcGetMemHandle))
        return 3;
    return rt_error(T.ipc(h, (fake_devptr)(uintptr_t)ptr));
}

int fakert_table_attrs(const void *ptr, unsigned *type, int *ordinal, fake_devptr *start,
                       size_t *size)
{
    int at[4] = {FA_MEMORY_TYPE, FA_DEVICE_ORDINAL, FA_RANGE_START_ADDR, FA_RANGE_SIZE};
    void *data[4] = {type, ordinal, start, size};
    if (!ready(-1))
        return 3;
    return T.attrs(4, at, data, (fake_devptr)(uintptr_t)ptr);
}
