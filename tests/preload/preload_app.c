/* preload_app.c: the application of the preload tests (tests/test_preload.c),
 * linked against the stand-in runtime and driver (libfakecudart.so,
 * libfakecuda.so) and run with and without libxseg_preload.so.  It never
 * names xseg: it allocates and frees through the runtime, the driver, a
 * pointer from cuGetProcAddress, one from dlsym on a dlopen handle and the
 * runtime's table (as a static runtime would), frees foreign, garbage and
 * NULL pointers, allocates in a static constructor, asks for memory info,
 * forks, and runs threads on two devices.  It writes what it saw, one fact
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
 * usage: preload_app basic|fork|threads|churn|churnloop|asyncreuse|
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
                                      "cuCtxSynchronize", "alloc_dev0", "alloc_dev1"};
    static const char *const rt[] = {"cudaMalloc", "cudaFree", "cudaMallocAsync",
                                     "cudaFreeAsync", "cudaMemGetInfo"};
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

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "basic";
    int rc = strcmp(mode, "fork") == 0      ? forked()
             : strcmp(mode, "threads") == 0 ? threads()
             : strcmp(mode, "churn") == 0   ? churn(0)
             : strcmp(mode, "churnloop") == 0 ? churn(1)
             : strcmp(mode, "asyncreuse") == 0 ? asyncreuse()
             : strcmp(mode, "cudachurn") == 0
                 ? cudachurn(argc > 2 ? atoi(argv[2]) : 8000,
                             argc > 3 && strcmp(argv[3], "sync") == 0)
                                            : basic();
    fflush(stdout);
    return rc;
}
