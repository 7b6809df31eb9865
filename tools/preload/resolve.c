/* resolve.c: how libxseg_preload.so finds the real CUDA functions and how
 * it makes sure the application, the CUDA runtime and frameworks that load
 * libcuda themselves reach its own versions (docs/preload.md, "Routing"):
 *  - a plain call binds to this library first (LD_PRELOAD);
 *  - dlsym is interposed: a lookup of an interposed name, in any handle,
 *    returns this library's function and remembers the real one (the CUDA
 *    runtime dlopens libcuda and takes cuGetProcAddress_v2 with dlsym; XLA
 *    takes every driver function so);
 *  - cuGetProcAddress(_v2) is interposed: the runtime finds every driver
 *    function through it, so an alloc function (or pointer query, or
 *    cuIpcGetMemHandle) it asks for comes back as this library's, at the
 *    ABI version asked (cuMemAlloc and cuMemGetAddressRange below 3.2 are
 *    the 32-bit ones and are left alone).
 * The real function of a slot: the one a dlsym / cuGetProcAddress of the
 * application was given, else the next definition after this library
 * (RTLD_NEXT), else the one in libcuda / libcudart opened by name
 * (XSEG_PRELOAD_LIBCUDA, XSEG_PRELOAD_LIBCUDART override the names).
 * Routing holds whatever the thread is doing (a runtime that initialises
 * inside a call this library passes through must still build its table of
 * driver functions with ours); only xseg's own lookups, made from inside
 * this library, get the real functions. */
#include <dlfcn.h>
#include <link.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "preload.h"

_Thread_local int pl_inside;

typedef struct slot {
    const char *name;
    int driver;           /* 1: libcuda, 0: libcudart */
    void *ours;           /* NULL: called, not interposed */
    _Atomic(void *) real;
} slot;

#define OURS(f) {#f, 0, (void *)f, NULL}
#define OURS_DRV(f) {#f, 1, (void *)f, NULL}
#define CALLED(f, drv) {#f, drv, NULL, NULL}

static slot g_slots[S_COUNT] = {
    [S_cudaMalloc] = OURS(cudaMalloc),
    [S_cudaFree] = OURS(cudaFree),
    [S_cudaMallocAsync] = OURS(cudaMallocAsync),
    [S_cudaMallocAsync_ptsz] = OURS(cudaMallocAsync_ptsz),
    [S_cudaFreeAsync] = OURS(cudaFreeAsync),
    [S_cudaFreeAsync_ptsz] = OURS(cudaFreeAsync_ptsz),
    [S_cudaMemGetInfo] = OURS(cudaMemGetInfo),
    [S_cuMemAlloc_v2] = OURS_DRV(cuMemAlloc_v2),
    [S_cuMemFree_v2] = OURS_DRV(cuMemFree_v2),
    [S_cuMemAllocAsync] = OURS_DRV(cuMemAllocAsync),
    [S_cuMemAllocAsync_ptsz] = OURS_DRV(cuMemAllocAsync_ptsz),
    [S_cuMemFreeAsync] = OURS_DRV(cuMemFreeAsync),
    [S_cuMemFreeAsync_ptsz] = OURS_DRV(cuMemFreeAsync_ptsz),
    [S_cuMemGetInfo_v2] = OURS_DRV(cuMemGetInfo_v2),
    [S_cuGetProcAddress] = OURS_DRV(cuGetProcAddress),
    [S_cuGetProcAddress_v2] = OURS_DRV(cuGetProcAddress_v2),
    [S_cuMemGetAddressRange_v2] = OURS_DRV(cuMemGetAddressRange_v2),
    [S_cuPointerGetAttribute] = OURS_DRV(cuPointerGetAttribute),
    [S_cuPointerGetAttributes] = OURS_DRV(cuPointerGetAttributes),
    [S_cuIpcGetMemHandle] = OURS_DRV(cuIpcGetMemHandle),
    [S_cudaPointerGetAttributes] = OURS(cudaPointerGetAttributes),
    [S_cudaIpcGetMemHandle] = OURS(cudaIpcGetMemHandle),
    [S_cudaGetDevice] = CALLED(cudaGetDevice, 0),
    [S_cuCtxGetDevice] = CALLED(cuCtxGetDevice, 1),
    [S_cuCtxSynchronize] = CALLED(cuCtxSynchronize, 1),
    [S_cuDeviceGet] = CALLED(cuDeviceGet, 1),
    [S_cuDevicePrimaryCtxRetain] = CALLED(cuDevicePrimaryCtxRetain, 1),
    [S_cuDevicePrimaryCtxRelease_v2] = CALLED(cuDevicePrimaryCtxRelease_v2, 1),
    [S_cuCtxPushCurrent_v2] = CALLED(cuCtxPushCurrent_v2, 1),
    [S_cuCtxPopCurrent_v2] = CALLED(cuCtxPopCurrent_v2, 1),
    [S_cuCtxGetCurrent] = CALLED(cuCtxGetCurrent, 1),
    [S_cuThreadExchangeStreamCaptureMode] = CALLED(cuThreadExchangeStreamCaptureMode, 1),
    [S_cuDevicePrimaryCtxGetState] = CALLED(cuDevicePrimaryCtxGetState, 1),
};

/* ---- what the application called (XSEG_PRELOAD_STATS "calls") ----
 * One counter per cache line: the allocation calls of many threads would
 * otherwise share lines. */
typedef struct pl_counter {
    _Alignas(64) _Atomic unsigned long n;
} pl_counter;

static pl_counter g_calls[S_INTERPOSED + 1]; /* the last one: dlsym */

void pl_count(enum pl_slot s)
{
    if (!pl_inside && s < S_INTERPOSED)
        atomic_fetch_add_explicit(&g_calls[s].n, 1, memory_order_relaxed);
}

/* No pl_inside test here: dlsym may run where this thread's TLS block is
 * not there yet (a malloc that calls dlsym while glibc sets it up), and
 * this library never calls the interposed dlsym itself (real_dlsym). */
void pl_count_dlsym(void)
{
    atomic_fetch_add_explicit(&g_calls[S_INTERPOSED].n, 1, memory_order_relaxed);
}

void pl_calls_json(char *buf, size_t n)
{
    size_t len = 0;
    for (int s = 0; s <= S_INTERPOSED && len < n; s++) {
        int w = snprintf(buf + len, n - len, "%s\"%s\":%lu", s ? "," : "{",
                         s < S_INTERPOSED ? g_slots[s].name : "dlsym",
                         atomic_load_explicit(&g_calls[s].n, memory_order_relaxed));
        if (w < 0)
            break;
        len += (size_t)w;
    }
    if (len + 2 <= n)
        memcpy(buf + len, "}", 2);
    else if (n >= 3)
        memcpy(buf, "{}", 3); /* too small a buffer: valid JSON all the same */
}

/* ---- the real dlsym (glibc 2.34 moved it into libc: two versions) ---- */

typedef void *(*dlsym_fn)(void *, const char *);

static dlsym_fn real_dlsym(void)
{
    static _Atomic(dlsym_fn) fn;
    static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};
    dlsym_fn f = atomic_load_explicit(&fn, memory_order_acquire);
    for (size_t i = 0; !f && i < sizeof versions / sizeof versions[0]; i++) {
        void *p = dlvsym(RTLD_NEXT, "dlsym", versions[i]);
        memcpy(&f, &p, sizeof p);
    }
    if (f)
        atomic_store_explicit(&fn, f, memory_order_release);
    return f;
}

/* ---- the libraries by name ---- */

static void *open_lib(int driver)
{
    static _Atomic(void *) handles[2];
    static const char *const runtimes[] = {"libcudart.so.13", "libcudart.so.12",
                                           "libcudart.so"};
    void *h = atomic_load(&handles[driver]);
    if (h)
        return h;
    const char *env = getenv(driver ? "XSEG_PRELOAD_LIBCUDA" : "XSEG_PRELOAD_LIBCUDART");
    if (env && *env)
        h = dlopen(env, RTLD_LAZY | (driver ? 0 : RTLD_NOLOAD));
    else if (driver)
        h = dlopen("libcuda.so.1", RTLD_LAZY); /* what the runtime would load */
    for (size_t i = 0; !h && !driver && !(env && *env) && i < 3; i++)
        h = dlopen(runtimes[i], RTLD_LAZY | RTLD_NOLOAD); /* never a runtime of our own */
    if (h)
        atomic_store(&handles[driver], h);
    return h;
}

/* ---- slots ---- */

static void note_real(enum pl_slot s, void *p)
{
    void *none = NULL;
    if (p && p != g_slots[s].ours)
        atomic_compare_exchange_strong(&g_slots[s].real, &none, p);
}

void *pl_real(enum pl_slot s)
{
    void *p = atomic_load_explicit(&g_slots[s].real, memory_order_acquire);
    if (p)
        return p;
    dlsym_fn look = real_dlsym();
    if (!look)
        return NULL;
    p = look(RTLD_NEXT, g_slots[s].name);
    if (!p || p == g_slots[s].ours) {
        void *h = open_lib(g_slots[s].driver);
        p = h ? look(h, g_slots[s].name) : NULL;
    }
    note_real(s, p);
    return atomic_load_explicit(&g_slots[s].real, memory_order_acquire);
}

static int slot_of(const char *name)
{
    if (!name || name[0] != 'c' || name[1] != 'u')
        return -1;
    for (int s = 0; s < S_INTERPOSED; s++)
        if (strcmp(name, g_slots[s].name) == 0)
            return s;
    return -1;
}

/* ---- dlsym ---- */

static int from_self(const void *caller)
{
    Dl_info me, them;
    return dladdr((void *)pl_real, &me) && dladdr(caller, &them) &&
           me.dli_fbase == them.dli_fbase;
}

static struct link_map *map_of(const void *addr)
{
    Dl_info info;
    struct link_map *lm = NULL;
    if (!dladdr1(addr, &info, (void **)&lm, RTLD_DL_LINKMAP))
        return NULL;
    return lm;
}

/* RTLD_NEXT for the caller: glibc tells "next" by the return address, which
 * is ours in here, so the objects after the caller's are searched one by
 * one, each for a definition of its own. */
static void *next_after(const void *caller, const char *name, dlsym_fn look)
{
    struct link_map *lm = map_of(caller);
    if (!lm)
        return look(RTLD_DEFAULT, name);
    for (struct link_map *l = lm->l_next; l; l = l->l_next) {
        if (!l->l_name || !*l->l_name)
            continue;
        void *h = dlopen(l->l_name, RTLD_LAZY | RTLD_NOLOAD);
        void *p = h ? look(h, name) : NULL;
        if (h)
            dlclose(h);
        if (p && map_of(p) == l)
            return p;
    }
    return NULL;
}

PL_EXPORT void *dlsym(void *handle, const char *name)
{
    pl_count_dlsym();
    const void *caller = __builtin_return_address(0);
    dlsym_fn look = real_dlsym();
    if (!look)
        return NULL;
    void *p = handle == RTLD_NEXT ? next_after(caller, name, look) : look(handle, name);
    int s = slot_of(name);
    if (s < 0 || !p || from_self(caller))
        return p;
    note_real((enum pl_slot)s, p);
    return g_slots[s].ours;
}

/* ---- cuGetProcAddress ---- */

/* The slot that stands for driver function `sym` at ABI `version`, or -1. */
static int proc_slot(const char *sym, int version, uint64_t flags, void *got)
{
    int ptds = (flags & PL_PROC_PER_THREAD) != 0;
    if (!sym || !got)
        return -1;
    if (strcmp(sym, "cuMemAlloc") == 0)
        return version >= 3020 ? S_cuMemAlloc_v2 : -1;
    if (strcmp(sym, "cuMemFree") == 0)
        return version >= 3020 ? S_cuMemFree_v2 : -1;
    if (strcmp(sym, "cuMemGetInfo") == 0)
        return version >= 3020 ? S_cuMemGetInfo_v2 : -1;
    if (strcmp(sym, "cuMemAllocAsync") == 0)
        return ptds ? S_cuMemAllocAsync_ptsz : S_cuMemAllocAsync;
    if (strcmp(sym, "cuMemFreeAsync") == 0)
        return ptds ? S_cuMemFreeAsync_ptsz : S_cuMemFreeAsync;
    if (strcmp(sym, "cuMemGetAddressRange") == 0)
        return version >= 3020 ? S_cuMemGetAddressRange_v2 : -1;
    if (strcmp(sym, "cuPointerGetAttribute") == 0)
        return S_cuPointerGetAttribute;
    if (strcmp(sym, "cuPointerGetAttributes") == 0)
        return S_cuPointerGetAttributes;
    if (strcmp(sym, "cuIpcGetMemHandle") == 0)
        return S_cuIpcGetMemHandle;
    if (strcmp(sym, "cuGetProcAddress") == 0) { /* by identity: the two differ in arity */
        if (got == pl_real(S_cuGetProcAddress_v2))
            return S_cuGetProcAddress_v2;
        if (got == pl_real(S_cuGetProcAddress))
            return S_cuGetProcAddress;
    }
    return -1;
}

static void route_proc(const char *sym, void **pfn, int version, uint64_t flags)
{
    if (!pfn)
        return;
    int s = proc_slot(sym, version, flags, *pfn);
    if (s < 0 || *pfn == g_slots[s].ours)
        return;
    note_real((enum pl_slot)s, *pfn);
    *pfn = g_slots[s].ours;
}

typedef pl_result (*getproc1_fn)(const char *, void **, int, uint64_t);
typedef pl_result (*getproc2_fn)(const char *, void **, int, uint64_t, int *);

pl_result cuGetProcAddress_v2(const char *symbol, void **pfn, int version, uint64_t flags,
                              int *status)
{
    pl_count(S_cuGetProcAddress_v2);
    void *p = pl_real(S_cuGetProcAddress_v2);
    getproc2_fn fn;
    if (!p)
        return PL_ERR_NOT_INITIALIZED;
    memcpy(&fn, &p, sizeof p);
    pl_result rc = fn(symbol, pfn, version, flags, status);
    if (rc == PL_SUCCESS)
        route_proc(symbol, pfn, version, flags);
    return rc;
}

pl_result cuGetProcAddress(const char *symbol, void **pfn, int version, uint64_t flags)
{
    pl_count(S_cuGetProcAddress);
    void *p = pl_real(S_cuGetProcAddress);
    pl_result rc;
    if (p) {
        getproc1_fn fn;
        memcpy(&fn, &p, sizeof p);
        rc = fn(symbol, pfn, version, flags);
    } else if ((p = pl_real(S_cuGetProcAddress_v2)) != NULL) {
        getproc2_fn fn;
        memcpy(&fn, &p, sizeof p);
        rc = fn(symbol, pfn, version, flags, NULL);
    } else {
        return PL_ERR_NOT_INITIALIZED;
    }
    if (rc == PL_SUCCESS)
        route_proc(symbol, pfn, version, flags);
    return rc;
}
