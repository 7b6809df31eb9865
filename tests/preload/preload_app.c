/* preload_app.c: the application of the preload tests (tests/test_preload.c),
 * linked against the stand-in runtime and driver (libfakecudart.so,
 * libfakecuda.so) and run with and without libxseg_preload.so.  It never
 * names xseg: it allocates and frees through the runtime, the driver, a
 * pointer from cuGetProcAddress, one from dlsym on a dlopen handle and the
 * runtime's table (as a static runtime would), frees foreign, garbage and
 * NULL pointers, allocates in a static constructor, asks for memory info,
 * forks, runs threads on two devices, and asks pointer queries and IPC
 * handles of its own, foreign, freed and garbage pointers through every
 * route (query).  It writes what it saw, one fact
 * a line, and the test compares the two runs:
 *   op NAME rc=R fake=F     a call's result; F: the fake driver owns the
 *                           pointer (1), not (0), no pointer (-1)
 *   check NAME ok|FAIL ...  a check of its own (contents, identity)
 *   meminfo NAME free=F total=T
 *   thread I dev D fake=N of=M errors=E
 *   count NAME N            a counter of the fakes at the end
 *   churn frees=F syncs=S reused_unsynced=R
 *                           the quarantine mode: F frees, S device syncs
 *                           (the stand-in's cuCtxSynchronize counter), R
 *                           allocations that overlapped a block freed with
 *                           no sync since (reuse cudaFree would not allow)
 *   cudachurn iters=N allocs=A frees=F errors=E live_peak=L
 *                           tools/preload/cuda_churn.cu's allocation
 *                           sequence (same generator, sizes, streams,
 *                           async share, ring of 24), without kernels
 *   asyncreuse early=N errors=E
 *                           N of 50 blocks freed by cudaFreeAsync on the
 *                           legacy stream came back on another stream
 *                           before a device sync
 *   q NAME rc=R KEY=VALUE...
 *                           the query mode: a pointer query or IPC call
 *                           and what it answered (base and want: the
 *                           range's start and the allocation asked about)
 * usage: preload_app basic|fork|threads|churn|churnloop|asyncreuse|query|
 *                    cudachurn [ITERS [sync]]
 *        (exit 0 unless a check failed; churnloop: the churn without the
 *        checks after it; cudachurn: ITERS default 8000, as gpu_proof.sh;
 *        sync: every allocation through cudaMalloc, one stream, to see
 *        what the two streams cost) */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fakecuda.h"

static int g_failed;
static void *g_ctor_ptr;
static int g_ctor_rc = -1;

__attribute__((constructor)) static void before_main(void)
{
    g_ctor_rc = cudaMalloc(&g_ctor_ptr, 1 << 20); /* before main, as a C++ static would */
}

static void check(const char *name, int ok, const char *detail)
{
    printf("check %s %s%s%s\n", name, ok ? "ok" : "FAIL", ok ? "" : " ", ok ? "" : detail);
    g_failed |= !ok;
}

static void op(const char *name, int rc, const void *ptr)
{
    printf("op %s rc=%d fake=%d\n", name, rc, ptr ? fake_owns(ptr) : -1);
}

/* Fill with a pattern of `seed` and read it back: the memory is usable. */
static int usable(void *p, size_t n, unsigned seed)
{
    unsigned char *b = p;
    for (size_t i = 0; i < n; i += 61)
        b[i] = (unsigned char)(seed + i);
    b[n - 1] = (unsigned char)seed;
    for (size_t i = 0; i + 1 < n; i += 61)
        if (b[i] != (unsigned char)(seed + i))
            return 0;
    return b[n - 1] == (unsigned char)seed;
}

/* The pattern usable() left is still there: nobody else got the memory. */
static int intact(const void *p, size_t n, unsigned seed)
{
    const unsigned char *b = p;
    for (size_t i = 0; i + 1 < n; i += 61)
        if (b[i] != (unsigned char)(seed + i))
            return 0;
    return b[n - 1] == (unsigned char)seed;
}

static void counts(void)
{
    static const char *const drv[] = {"cuMemAlloc_v2", "cuMemFree_v2", "cuMemAllocAsync",
                                      "cuMemAllocAsync_ptsz", "cuMemFreeAsync",
                                      "cuMemFreeAsync_ptsz", "cuMemGetInfo_v2",
                                      "cuCtxSynchronize", "alloc_dev0", "alloc_dev1",
                                      "cuMemGetAddressRange_v2", "cuPointerGetAttribute",
                                      "cuPointerGetAttributes", "cuIpcGetMemHandle"};
    static const char *const rt[] = {"cudaMalloc", "cudaFree", "cudaMallocAsync",
                                     "cudaFreeAsync", "cudaMemGetInfo",
                                     "cudaPointerGetAttributes", "cudaIpcGetMemHandle"};
    for (size_t i = 0; i < sizeof drv / sizeof drv[0]; i++)
        printf("count fake.%s %ld\n", drv[i], fake_count(drv[i]));
    for (size_t i = 0; i < sizeof rt / sizeof rt[0]; i++)
        printf("count fakert.%s %ld\n", rt[i], fakert_count(rt[i]));
}

static void runtime_api(void)
{
    static const size_t sizes[] = {1, 512, 4096, 1 << 20, (3 << 20) + 5, 64 << 20};
    void *p[6] = {0};
    char name[64];
    for (int i = 0; i < 6; i++) {
        int rc = cudaMalloc(&p[i], sizes[i]);
        snprintf(name, sizeof name, "alloc_rt_%zu", sizes[i]);
        op(name, rc, p[i]);
        check(name, rc == 0 && p[i] && usable(p[i], sizes[i], (unsigned)i), "unusable");
    }
    for (int i = 0; i < 6; i++) {
        snprintf(name, sizeof name, "free_rt_%zu", sizes[i]);
        op(name, cudaFree(p[i]), NULL);
    }
    op("free_rt_double", cudaFree(p[2]), NULL);
    void *z = (void *)1;
    op("alloc_rt_zero", cudaMalloc(&z, 0), z);
    void *a = NULL;
    int rc = cudaMallocAsync(&a, 10000, (void *)0x1234);
    op("alloc_rt_async", rc, a);
    check("alloc_rt_async", rc == 0 && a && usable(a, 10000, 7), "unusable");
    op("free_rt_async", cudaFreeAsync(a, (void *)0x5678), NULL);
}

static void driver_api(void)
{
    fake_devptr d = 0, e = 0, f = 0;
    int rc = cuMemAlloc_v2(&d, 5 << 20);
    op("alloc_drv", rc, (void *)(uintptr_t)d);
    check("alloc_drv", rc == 0 && usable((void *)(uintptr_t)d, 5 << 20, 3), "unusable");
    op("free_drv", cuMemFree_v2(d), NULL);
    rc = cuMemAllocAsync(&e, 777, (void *)0x1);
    op("alloc_drv_async", rc, (void *)(uintptr_t)e);
    op("free_drv_async", cuMemFreeAsync(e, (void *)0x1), NULL);
    rc = cuMemAllocAsync_ptsz(&f, 999, NULL);
    op("alloc_drv_async_ptsz", rc, (void *)(uintptr_t)f);
    op("free_drv_async_ptsz", cuMemFreeAsync_ptsz(f, NULL), NULL);
}

typedef int (*alloc_fn)(fake_devptr *, size_t);
typedef int (*free_fn)(fake_devptr);

static void through(const char *what, void *pa, void *pf)
{
    alloc_fn a;
    free_fn f;
    fake_devptr d = 0;
    char name[64];
    memcpy(&a, &pa, sizeof pa);
    memcpy(&f, &pf, sizeof pf);
    snprintf(name, sizeof name, "alloc_%s", what);
    int rc = a ? a(&d, 1 << 16) : -1;
    op(name, rc, (void *)(uintptr_t)d);
    check(name, rc == 0 && usable((void *)(uintptr_t)d, 1 << 16, 9), "unusable");
    snprintf(name, sizeof name, "free_%s", what);
    op(name, f ? f(d) : -1, NULL);
}

static void lookups(void)
{
    void *pa = NULL, *pf = NULL, *old = NULL;
    int st = -1;
    cuGetProcAddress_v2("cuMemAlloc", &pa, 13000, 0, &st);
    cuGetProcAddress_v2("cuMemFree", &pf, 13000, 0, &st);
    through("getproc_v2", pa, pf);
    cuGetProcAddress("cuMemAlloc", &pa, 12000, 0);
    cuGetProcAddress("cuMemFree", &pf, 12000, 0);
    through("getproc_v1", pa, pf);
    cuGetProcAddress_v2("cuMemAlloc", &old, 3010, 0, &st);
    check("getproc_32bit_untouched", old == fake_v1_alloc_addr(), "cuMemAlloc < 3.2 rerouted");
    const char *lib = getenv("FAKE_LIBCUDA");
    void *h = dlopen(lib && *lib ? lib : "libfakecuda.so", RTLD_NOW | RTLD_LOCAL);
    through("dlsym", h ? dlsym(h, "cuMemAlloc_v2") : NULL, h ? dlsym(h, "cuMemFree_v2") : NULL);
    void *t = NULL;
    int rc = fakert_table_malloc(&t, 1 << 18);
    op("alloc_table", rc, t);
    check("alloc_table", rc == 0 && t && usable(t, 1 << 18, 5), "unusable");
    op("free_table", fakert_table_free(t), NULL);
}

static void foreign(void)
{
    void *p = fake_direct_alloc(4096);
    op("free_foreign_rt", cudaFree(p), NULL);
    p = fake_direct_alloc(4096);
    op("free_foreign_drv", cuMemFree_v2((fake_devptr)(uintptr_t)p), NULL);
    op("free_garbage_rt", cudaFree((void *)(uintptr_t)0xdead0000ull), NULL);
    op("free_garbage_drv", cuMemFree_v2(0xdead0000ull), NULL);
    op("free_null_rt", cudaFree(NULL), NULL);
    op("free_null_drv", cuMemFree_v2(0), NULL);
}

static void meminfo(void)
{
    size_t f = 0, t = 0;
    void *p = NULL;
    cudaMalloc(&p, 32 << 20);
    int rc = cudaMemGetInfo(&f, &t);
    printf("meminfo rt rc=%d free=%zu total=%zu\n", rc, f, t);
    rc = cuMemGetInfo_v2(&f, &t);
    printf("meminfo drv rc=%d free=%zu total=%zu\n", rc, f, t);
    cudaFree(p);
}

static int basic(void)
{
    op("alloc_ctor", g_ctor_rc, g_ctor_ptr);
    check("alloc_ctor", g_ctor_rc == 0 && g_ctor_ptr && usable(g_ctor_ptr, 1 << 20, 1),
          "unusable");
    op("free_ctor", cudaFree(g_ctor_ptr), NULL);
    runtime_api();
    driver_api();
    lookups();
    foreign();
    meminfo();
    counts();
    return g_failed;
}

/* ---- fork ---- */

static int forked(void)
{
    void *p = NULL, *q = NULL;
    int rc = cudaMalloc(&p, 1 << 20);
    op("alloc_parent", rc, p);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        rc = cudaMalloc(&q, 1 << 20);
        op("alloc_child", rc, q);
        check("alloc_child", rc == 0 && q && usable(q, 1 << 20, 2), "unusable");
        op("free_child", cudaFree(q), NULL);
        op("free_child_parents", cudaFree(p), NULL); /* the parent's memory */
        fflush(stdout);
        _exit(g_failed);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    check("child_exit", pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0, "child failed");
    check("parent_memory", usable(p, 1 << 20, 4), "unusable after the fork");
    op("free_parent", cudaFree(p), NULL);
    rc = cudaMalloc(&q, 4096);
    op("alloc_parent_after", rc, q);
    op("free_parent_after", cudaFree(q), NULL);
    cudaFree(g_ctor_ptr);
    return g_failed;
}

/* ---- threads on two devices ---- */

typedef struct job {
    int index, device, fake, of, errors;
} job;

static void *worker(void *arg)
{
    job *j = arg;
    void *live[8] = {0};
    size_t len[8] = {0};
    unsigned seed[8] = {0};
    cudaSetDevice(j->device);
    for (int i = 0; i < 400; i++) {
        int k = i % 8;
        if (live[k]) {
            j->errors += !intact(live[k], len[k], seed[k]); /* handed to no one else */
            j->errors += (k & 1) ? cuMemFree_v2((fake_devptr)(uintptr_t)live[k]) != 0
                                 : cudaFree(live[k]) != 0;
            live[k] = NULL;
        }
        size_t n = 256 + (size_t)((i * 7919 + j->index * 104729) % (3 << 20));
        fake_devptr d = 0;
        int rc = (k & 1) ? cuMemAlloc_v2(&d, n) : cudaMalloc((void **)&d, n);
        if (rc != 0 || !d) {
            j->errors++;
            continue;
        }
        live[k] = (void *)(uintptr_t)d;
        len[k] = n;
        seed[k] = (unsigned)(j->index * 31 + i);
        j->fake += fake_owns(live[k]);
        j->of++;
        j->errors += !usable(live[k], n, seed[k]);
    }
    for (int k = 0; k < 8; k++)
        if (live[k])
            j->errors += cudaFree(live[k]) != 0;
    return NULL;
}

static int threads(void)
{
    enum { N = 8 };
    pthread_t t[N];
    job jobs[N];
    for (int i = 0; i < N; i++) {
        jobs[i] = (job){.index = i, .device = i % 2};
        if (pthread_create(&t[i], NULL, worker, &jobs[i]) != 0)
            return 1;
    }
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        printf("thread %d dev %d fake=%d of=%d errors=%d\n", i, jobs[i].device, jobs[i].fake,
               jobs[i].of, jobs[i].errors);
        g_failed |= jobs[i].errors != 0;
    }
    cudaFree(g_ctor_ptr);
    counts();
    return g_failed;
}

/* ---- churn: frees and what comes back ---- */

typedef struct freed {
    uintptr_t lo, hi;
    long syncs; /* the sync counter when it was freed */
} freed;

enum { RING = 8, FREED_MAX = 4096 };
static freed g_freed[FREED_MAX];
static int g_nfreed;

/* Forget the blocks a sync has released since; 1 when [p, p+n) overlaps
 * one that no sync has. */
static int unsynced_overlap(const void *p, size_t n)
{
    long now = fake_count("cuCtxSynchronize");
    int hit = 0, k = 0;
    for (int i = 0; i < g_nfreed; i++) {
        if (g_freed[i].syncs != now)
            continue;
        hit |= (uintptr_t)p < g_freed[i].hi && (uintptr_t)p + n > g_freed[i].lo;
        g_freed[k++] = g_freed[i];
    }
    g_nfreed = k;
    return hit;
}

/* A block freed when the sync counter read `syncs` (before the free: a sync
 * inside the free call releases it). */
static void note_freed(const void *p, size_t n, long syncs)
{
    if (g_nfreed < FREED_MAX)
        g_freed[g_nfreed++] = (freed){(uintptr_t)p, (uintptr_t)p + n, syncs};
}

static int churn_free(void *p, int driver)
{
    return driver ? cuMemFree_v2((fake_devptr)(uintptr_t)p) : cudaFree(p);
}

/* 3000 allocations of 256 B to 4 MiB, 8 live, freed oldest first through
 * the runtime and the driver in turn; then (unless only_loop) a double free
 * of a freshly freed block, and a large block freed and a larger one taken
 * under the 256 MiB cap (the quarantine must give the first back). */
static int churn(int only_loop)
{
    void *ring[RING] = {0};
    size_t size[RING] = {0};
    unsigned long long s = 88172645463325252ull;
    long frees = 0, syncs0 = fake_count("cuCtxSynchronize");
    int reused = 0, errors = 0;
    for (int i = 0; i < 3000 + RING; i++) {
        int k = i % RING;
        if (ring[k]) {
            long before = fake_count("cuCtxSynchronize");
            errors += churn_free(ring[k], i & 1) != 0;
            note_freed(ring[k], size[k], before);
            frees++;
            ring[k] = NULL;
        }
        if (i >= 3000)
            continue;
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        size[k] = ((size_t)256 << (s % 15)) + (size_t)(s >> 40) % 4096;
        if (cudaMalloc(&ring[k], size[k]) != 0 || !ring[k]) {
            errors++;
            ring[k] = NULL;
            continue;
        }
        reused += unsynced_overlap(ring[k], size[k]);
        errors += !usable(ring[k], size[k], (unsigned)i);
    }
    printf("churn frees=%ld syncs=%ld reused_unsynced=%d errors=%d\n", frees,
           fake_count("cuCtxSynchronize") - syncs0, reused, errors);
    if (only_loop) {
        cudaFree(g_ctor_ptr);
        return g_failed;
    }
    void *p = NULL;
    cudaMalloc(&p, 4096);
    op("free_fresh", cudaFree(p), NULL);
    op("free_fresh_double", cudaFree(p), NULL);
    op("alloc_big", cudaMalloc(&p, 150 << 20), p);
    op("free_big", cudaFree(p), NULL);
    op("alloc_bigger", cudaMalloc(&p, 200 << 20), p);
    op("free_bigger", cudaFree(p), NULL);
    cudaFree(g_ctor_ptr);
    g_failed |= errors != 0;
    return g_failed;
}

/* ---- cudachurn: cuda_churn.cu's sequence, for the host figures ---- */

static uint64_t churn_rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

enum { CC_DEPTH = 24 };

typedef struct cc_slot {
    void *p;
    size_t n;
    int stream, async;
} cc_slot;

static int cc_free(cc_slot *r, void *const st[2])
{
    int rc = r->async ? cudaFreeAsync(r->p, st[r->stream]) : cudaFree(r->p);
    r->p = NULL;
    return rc != 0;
}

/* The loop of cuda_churn.cu with seed 12345: log-uniform 256 B .. 64 MiB,
 * stream 0 or 1, a quarter async (none with all_sync), freed 24
 * iterations later.  Each block's
 * first and last byte are written (host memory: no kernels). */
static int cudachurn(int iters, int all_sync)
{
    uint64_t s = 12345 | 1;
    void *const st[2] = {(void *)0x5100, (void *)0x5200}; /* two streams */
    cc_slot ring[CC_DEPTH] = {0};
    long allocs = 0, frees = 0;
    int errors = 0;
    size_t live = 0, live_peak = 0;
    for (int i = 0; i < iters + CC_DEPTH; i++) {
        cc_slot *r = &ring[i % CC_DEPTH];
        if (r->p) {
            live -= r->n;
            errors += cc_free(r, st);
            frees++;
        }
        if (i >= iters)
            continue;
        int shift = 8 + (int)(churn_rng(&s) % 19);
        size_t n = ((size_t)1 << shift) + (churn_rng(&s) % ((size_t)1 << shift));
        n = (n + 3) / 4 * 4;
        r->stream = (int)(churn_rng(&s) & 1);
        r->async = (churn_rng(&s) % 4) == 0 && !all_sync;
        int rc = r->async ? cudaMallocAsync(&r->p, n, st[r->stream]) : cudaMalloc(&r->p, n);
        if (rc != 0 || !r->p) {
            errors++;
            r->p = NULL;
            continue;
        }
        allocs++;
        r->n = n;
        live += n;
        live_peak = live > live_peak ? live : live_peak;
        ((unsigned char *)r->p)[0] = (unsigned char)i;
        ((unsigned char *)r->p)[n - 1] = (unsigned char)i;
    }
    printf("cudachurn iters=%d allocs=%ld frees=%ld errors=%d live_peak=%zu\n", iters, allocs,
           frees, errors, live_peak);
    cudaFree(g_ctor_ptr);
    return errors != 0;
}

/* ---- asyncreuse: an async free on the legacy stream ---- */

/* 50 times: a block taken on one stream, freed with cudaFreeAsync on the
 * legacy stream, then one of the same size taken on another stream: how
 * often the second is the first with no device sync since the free (a
 * non-blocking stream could then use memory that legacy-stream work
 * queued before the free still reads). */
static int asyncreuse(void)
{
    void *const s1 = (void *)0x5100, *const s2 = (void *)0x5200;
    int early = 0, errors = 0;
    for (int i = 0; i < 50; i++) {
        void *a = NULL, *b = NULL;
        errors += cudaMallocAsync(&a, 1 << 20, s1) != 0 || !a;
        long before = fake_count("cuCtxSynchronize");
        errors += cudaFreeAsync(a, NULL) != 0;
        errors += cudaMallocAsync(&b, 1 << 20, s2) != 0 || !b;
        early += b == a && fake_count("cuCtxSynchronize") == before;
        errors += cudaFreeAsync(b, s2) != 0;
    }
    printf("asyncreuse early=%d errors=%d\n", early, errors);
    cudaFree(g_ctor_ptr);
    return errors != 0;
}

/* ---- query: pointer queries and IPC handles ---- */

typedef int (*range_fn)(fake_devptr *, size_t *, fake_devptr);
typedef int (*attr_fn)(void *, int, fake_devptr);
typedef int (*attrs_fn)(unsigned, int *, void **, fake_devptr);
typedef int (*ipc_fn)(fake_ipc_handle *, fake_devptr);
typedef int (*rt_attrs_fn)(fake_ptr_attrs *, const void *);
typedef int (*rt_ipc_fn)(fake_ipc_handle *, void *);

#define ADDR(p) ((unsigned long long)(uintptr_t)(p))

/* "q NAME rc=R base=B want=W size=S": an address range asked at some
 * pointer of the allocation at `want`. */
static void q_range(const char *name, int rc, fake_devptr base, size_t size, const void *want)
{
    printf("q %s rc=%d base=0x%llx want=0x%llx size=%zu\n", name, rc, base, ADDR(want), size);
}

static void q_range_at(const char *name, const char *at, const void *want)
{
    fake_devptr b = 0;
    size_t n = 0;
    int rc = cuMemGetAddressRange_v2(&b, &n, ADDR(at));
    q_range(name, rc, b, n, want);
}

/* RANGE_START_ADDR and RANGE_SIZE through cuPointerGetAttribute. */
static void q_attr_range(const char *name, attr_fn f, const char *at, const void *want)
{
    fake_devptr b = 0;
    size_t n = 0;
    int rc = f(&b, FA_RANGE_START_ADDR, ADDR(at));
    int rc2 = f(&n, FA_RANGE_SIZE, ADDR(at));
    q_range(name, rc ? rc : rc2, b, n, want);
}

/* Every attribute xseg answers, and BUFFER_ID (passed through), one by one. */
static void q_attr_each(const char *name, const char *at)
{
    unsigned type = 9, managed = 9, mapped = 9, ipc = 9;
    int ordinal = -9;
    fake_devptr dp = 0;
    unsigned long long buf = 0;
    int rc = cuPointerGetAttribute(&type, FA_MEMORY_TYPE, ADDR(at));
    rc |= cuPointerGetAttribute(&dp, FA_DEVICE_POINTER, ADDR(at));
    rc |= cuPointerGetAttribute(&ordinal, FA_DEVICE_ORDINAL, ADDR(at));
    rc |= cuPointerGetAttribute(&managed, FA_IS_MANAGED, ADDR(at));
    rc |= cuPointerGetAttribute(&mapped, FA_MAPPED, ADDR(at));
    rc |= cuPointerGetAttribute(&ipc, FA_IPC_CAPABLE, ADDR(at));
    int brc = cuPointerGetAttribute(&buf, FA_BUFFER_ID, ADDR(at));
    printf("q %s rc=%d type=%u devptr=0x%llx wantptr=0x%llx ordinal=%d managed=%u mapped=%u "
           "ipccap=%u buffer_rc=%d buffer=0x%llx\n", name, rc, type, dp, ADDR(at), ordinal,
           managed, mapped, ipc, brc, buf);
}

/* cuPointerGetAttributes (through f): type, ordinal, range, mapped, buffer. */
static void q_attrs(const char *name, attrs_fn f, const char *at, const void *want)
{
    unsigned type = 9, mapped = 9;
    int ordinal = -9;
    fake_devptr b = 1;
    size_t n = 1;
    unsigned long long buf = 0;
    int at_[6] = {FA_MEMORY_TYPE, FA_DEVICE_ORDINAL, FA_RANGE_START_ADDR, FA_RANGE_SIZE,
                  FA_MAPPED, FA_BUFFER_ID};
    void *data[6] = {&type, &ordinal, &b, &n, &mapped, &buf};
    int rc = f ? f(6, at_, data, ADDR(at)) : -1;
    printf("q %s rc=%d type=%u ordinal=%d base=0x%llx want=0x%llx size=%zu mapped=%u "
           "buffer=0x%llx\n", name, rc, type, ordinal, b, ADDR(want), n, mapped, buf);
}

/* cudaPointerGetAttributes (through f), its reserved words (CUDA 13's)
 * filled first: they must stay as they were (CUDA 12 has none). */
static void q_rt_attrs(const char *name, rt_attrs_fn f, const char *at)
{
    fake_ptr_attrs a;
    memset(&a, 0x55, sizeof a);
    int rc = f ? f(&a, at) : -1, intact = 1;
    for (int i = 0; i < 8; i++)
        intact &= a.reserved[i] == (long)0x5555555555555555ull;
    printf("q %s rc=%d type=%d device=%d devptr=0x%llx wantptr=0x%llx host=0x%llx "
           "reserved_intact=%d\n", name, rc, a.type, a.device, ADDR(a.devicePointer), ADDR(at),
           ADDR(a.hostPointer), intact);
}

/* "q NAME rc=R ptr=P fake=F": an IPC handle, F 1 when the stand-in made it. */
static void q_ipc(const char *name, int rc, const fake_ipc_handle *h, const void *ptr)
{
    printf("q %s rc=%d ptr=%p fake=%d\n", name, rc, ptr,
           rc == 0 && strncmp(h->reserved, "fakeipc", 7) == 0);
}

static void *sym(void *h, const char *name)
{
    return h ? dlsym(h, name) : NULL;
}

/* The same queries through cuGetProcAddress (both versions), dlsym on
 * handles of the driver and the runtime, and the runtime's table. */
static void q_routes(const char *p, const char *foreign)
{
    void *f = NULL;
    int st = 0;
    range_fn range;
    attr_fn attr;
    attrs_fn attrs;
    ipc_fn ipc;
    fake_ipc_handle h;
    fake_devptr b = 0;
    size_t n = 0;
    cuGetProcAddress_v2("cuMemGetAddressRange", &f, 13000, 0, &st);
    memcpy(&range, &f, sizeof f);
    int rc = range ? range(&b, &n, ADDR(p + 7)) : -1;
    q_range("route_getproc_range", rc, b, n, p);
    cuGetProcAddress_v2("cuMemGetAddressRange", &f, 3010, 0, &st);
    check("getproc_range_32bit_untouched", f == fake_v1_range_addr(), "rerouted");
    cuGetProcAddress("cuPointerGetAttribute", &f, 12000, 0);
    memcpy(&attr, &f, sizeof f);
    if (attr)
        q_attr_range("route_getproc_attr", attr, p + 7, p);
    cuGetProcAddress_v2("cuPointerGetAttributes", &f, 13000, 0, &st);
    memcpy(&attrs, &f, sizeof f);
    q_attrs("route_getproc_attrs", attrs, p + 7, p);
    cuGetProcAddress_v2("cuIpcGetMemHandle", &f, 13000, 0, &st);
    memcpy(&ipc, &f, sizeof f);
    q_ipc("route_getproc_ipc", ipc ? ipc(&h, ADDR(p)) : -1, &h, p);
    q_ipc("route_getproc_ipc_foreign", ipc ? ipc(&h, ADDR(foreign)) : -1, &h, foreign);
    const char *lib = getenv("FAKE_LIBCUDA");
    void *drv = dlopen(lib && *lib ? lib : "libfakecuda.so", RTLD_NOW | RTLD_LOCAL);
    f = sym(drv, "cuMemGetAddressRange_v2");
    memcpy(&range, &f, sizeof f);
    b = 0, n = 0;
    rc = range ? range(&b, &n, ADDR(p + 9)) : -1;
    q_range("route_dlsym_range", rc, b, n, p);
    f = sym(drv, "cuPointerGetAttribute");
    memcpy(&attr, &f, sizeof f);
    if (attr)
        q_attr_range("route_dlsym_attr", attr, p + 9, p);
    f = sym(drv, "cuPointerGetAttributes");
    memcpy(&attrs, &f, sizeof f);
    q_attrs("route_dlsym_attrs", attrs, p + 9, p);
    f = sym(drv, "cuIpcGetMemHandle");
    memcpy(&ipc, &f, sizeof f);
    q_ipc("route_dlsym_ipc", ipc ? ipc(&h, ADDR(p)) : -1, &h, p);
    void *rt = dlopen("libfakecudart.so", RTLD_NOW | RTLD_NOLOAD);
    rt_attrs_fn rta;
    rt_ipc_fn rti;
    f = sym(rt, "cudaPointerGetAttributes");
    memcpy(&rta, &f, sizeof f);
    q_rt_attrs("route_dlsym_rt_attrs", rta, p + 11);
    f = sym(rt, "cudaIpcGetMemHandle");
    memcpy(&rti, &f, sizeof f);
    q_ipc("route_dlsym_rt_ipc", rti ? rti(&h, (void *)(uintptr_t)p) : -1, &h, p);
    unsigned type = 9;
    int ordinal = -9;
    b = 0, n = 0;
    rc = fakert_table_attrs(p + 13, &type, &ordinal, &b, &n);
    printf("q route_table_attrs rc=%d type=%u ordinal=%d base=0x%llx want=0x%llx size=%zu\n", rc,
           type, ordinal, b, ADDR(p), n);
}

/* An allocation's start, interior, last requested byte, last byte of its
 * range and one past it; attributes; the runtime's view. */
static void q_block(const char *tag, const char *p, size_t n)
{
    char name[64];
    fake_devptr b = 0;
    size_t size = 0;
    snprintf(name, sizeof name, "%s_start", tag);
    q_range_at(name, p, p);
    cuMemGetAddressRange_v2(&b, &size, ADDR(p));
    snprintf(name, sizeof name, "%s_interior", tag);
    q_range_at(name, p + n / 2 + 3, p);
    snprintf(name, sizeof name, "%s_last", tag);
    q_range_at(name, p + n - 1, p);
    snprintf(name, sizeof name, "%s_end", tag);
    q_range_at(name, p + (size ? size : n) - 1, p);
    snprintf(name, sizeof name, "%s_past", tag);
    q_range_at(name, p + (size ? size : n), p);
    snprintf(name, sizeof name, "%s_attr_range", tag);
    q_attr_range(name, cuPointerGetAttribute, p + n / 2 + 3, p);
    snprintf(name, sizeof name, "%s_attr", tag);
    q_attr_each(name, p + n / 3);
    snprintf(name, sizeof name, "%s_attrs", tag);
    q_attrs(name, cuPointerGetAttributes, p + n / 3, p);
    snprintf(name, sizeof name, "%s_rt", tag);
    q_rt_attrs(name, cudaPointerGetAttributes, p + n / 3);
}

/* A block freed just before: every query says it is no allocation. */
static void q_freed(void)
{
    char *q = NULL;
    unsigned type = 9;
    cudaMalloc((void **)&q, 2 << 20);
    cudaFree(q);
    q_range_at("freed_range", q + 10, q);
    printf("q freed_attr rc=%d\n", cuPointerGetAttribute(&type, FA_MEMORY_TYPE, ADDR(q + 10)));
    q_attrs("freed_attrs", cuPointerGetAttributes, q + 10, q);
    q_rt_attrs("freed_rt", cudaPointerGetAttributes, q + 10);
    fake_ipc_handle h;
    q_ipc("freed_ipc_rt", cudaIpcGetMemHandle(&h, q), &h, q);
}

static int query(void)
{
    static const size_t n = (3 << 20) + 5, small = 1000;
    char *p = NULL, *s = NULL;
    fake_ipc_handle h;
    check("query_alloc", cudaMalloc((void **)&p, n) == 0 && cudaMalloc((void **)&s, small) == 0,
          "allocation failed");
    q_block("big", p, n);
    q_block("small", s, small);
    char *f = fake_direct_alloc(4096);
    q_block("foreign", f, 4096);
    q_range_at("garbage_range", (const char *)(uintptr_t)0xdead0000ull, NULL);
    q_freed();
    q_ipc("ipc_xseg_rt", cudaIpcGetMemHandle(&h, p), &h, p);
    q_ipc("ipc_xseg_drv", cuIpcGetMemHandle(&h, ADDR(p)), &h, p);
    q_ipc("ipc_foreign_rt", cudaIpcGetMemHandle(&h, f), &h, f);
    q_ipc("ipc_foreign_drv", cuIpcGetMemHandle(&h, ADDR(f)), &h, f);
    q_routes(p, f);
    cudaFree(p);
    cudaFree(s);
    cudaFree(f);
    cudaFree(g_ctor_ptr);
    counts();
    return g_failed;
}

/* Four 1 MiB blocks freed fill a quarantine of 4 (XSEG_PRELOAD_QUARANTINE
 * =64m,4): the drain thread takes them and syncs (slowly, with
 * FAKE_SYNC_DELAY_US); a second free of the first meanwhile must be
 * refused, not quarantined again (it would be freed twice, the second time
 * perhaps as a new block of somebody's). */
static int doublefree(void)
{
    void *p[4] = {0};
    for (int i = 0; i < 4; i++)
        check("df_alloc", cudaMalloc(&p[i], 1 << 20) == 0, "allocation failed");
    for (int i = 0; i < 4; i++)
        op("df_free", cudaFree(p[i]), NULL);
    op("df_again", cudaFree(p[0]), NULL);
    void *q = NULL;
    int rc = cudaMalloc(&q, 1 << 20);
    op("df_alloc_after", rc, q);
    op("df_free_after", cudaFree(q), NULL);
    cudaFree(g_ctor_ptr);
    return g_failed;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "basic";
    int rc = strcmp(mode, "fork") == 0      ? forked()
             : strcmp(mode, "threads") == 0 ? threads()
             : strcmp(mode, "churn") == 0   ? churn(0)
             : strcmp(mode, "churnloop") == 0 ? churn(1)
             : strcmp(mode, "asyncreuse") == 0 ? asyncreuse()
             : strcmp(mode, "query") == 0 ? query()
             : strcmp(mode, "doublefree") == 0 ? doublefree()
             : strcmp(mode, "cudachurn") == 0
                 ? cudachurn(argc > 2 ? atoi(argv[2]) : 8000,
                             argc > 3 && strcmp(argv[3], "sync") == 0)
                                            : basic();
    fflush(stdout);
    return rc;
}
