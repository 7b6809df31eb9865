/* test_gpu.c: the allocator on a real GPU, checked with real kernels
 * (tests/gpu_kernels.h, PTX JIT-compiled by the driver): memory is usable
 * by kernels after growth, shrink, re-map and trim; random allocs and frees
 * keep every live pattern; a block freed while a kernel on another stream
 * (record_stream) still writes it is not handed out until that kernel is
 * done (and a control without record_stream shows the check catches a
 * violation); out of memory at the device's real capacity leaks nothing; the
 * max_mapped / memory_fraction caps hold and trim gives memory back
 * (cuMemGetInfo); two allocators and the default allocator coexist; a tag's
 * memory sleeps (device memory comes back, cuMemGetInfo) and wakes at the
 * same addresses with its contents (backup) and a CUDA graph captured
 * before the sleep replays into it after the wake.
 *
 * libcuda.so.1 is opened here with dlopen (as the library does), so the
 * suite needs neither nvcc nor cuda.h.  Without a usable GPU it exits 77,
 * which ctest reports as skipped (SKIP_RETURN_CODE 77).  It runs CK_NOFORK:
 * CUDA cannot be used in a child forked after cuInit. */
#include <check.h>
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"
#include "gpu_kernels.h"
#include "xseg.h"

#define SKIP_RC 77
#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)
#define GIB ((size_t)1 << 30)
#define SLACK (64 * MIB) /* cuMemGetInfo tolerance: driver bookkeeping */
#define MAX_XS 4

/* ---- the CUDA driver API, loaded at run time ------------------------- */

typedef int cures;
typedef unsigned long long cudptr;

typedef struct gcu {
    cures (*Init)(unsigned);
    cures (*DeviceGet)(int *, int);
    cures (*DevicePrimaryCtxRetain)(void **, int);
    cures (*CtxSetCurrent)(void *);
    cures (*CtxSynchronize)(void);
    cures (*ModuleLoadData)(void **, const void *);
    cures (*ModuleGetFunction)(void **, void *, const char *);
    cures (*LaunchKernel)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                          unsigned, void *, void **, void **);
    cures (*StreamCreate)(void **, unsigned);
    cures (*StreamSynchronize)(void *);
    cures (*MemcpyDtoH)(void *, cudptr, size_t);
    cures (*MemGetInfo)(size_t *, size_t *);
    cures (*MemAlloc)(cudptr *, size_t);
    cures (*MemsetD32)(cudptr, unsigned, size_t);
    cures (*EventCreate)(void **, unsigned);
    cures (*EventRecord)(void *, void *);
    cures (*EventQuery)(void *);
    cures (*EventDestroy)(void *);
    cures (*StreamWaitEvent)(void *, void *, unsigned);
    cures (*StreamBeginCapture)(void *, int);
    cures (*StreamEndCapture)(void *, void **);
    cures (*GraphInstantiateWithFlags)(void **, void *, unsigned long long);
    cures (*GraphLaunch)(void *, void *);
    cures (*GraphExecDestroy)(void *);
    cures (*GraphDestroy)(void *);
} gcu;

#define ENTRY(f) { "cu" #f, offsetof(gcu, f) }
static const struct {
    const char *name;
    size_t off;
} k_entries[] = {
    ENTRY(Init), ENTRY(DeviceGet), ENTRY(DevicePrimaryCtxRetain), ENTRY(CtxSetCurrent),
    ENTRY(CtxSynchronize), ENTRY(ModuleLoadData), ENTRY(ModuleGetFunction),
    ENTRY(LaunchKernel), ENTRY(StreamCreate), ENTRY(StreamSynchronize), ENTRY(MemcpyDtoH),
    ENTRY(MemGetInfo), ENTRY(MemAlloc), ENTRY(MemsetD32), ENTRY(EventCreate),
    ENTRY(EventRecord), ENTRY(EventQuery), ENTRY(EventDestroy), ENTRY(StreamWaitEvent),
    ENTRY(StreamBeginCapture), ENTRY(StreamEndCapture), ENTRY(GraphInstantiateWithFlags),
    ENTRY(GraphLaunch), ENTRY(GraphExecDestroy), ENTRY(GraphDestroy),
};
#undef ENTRY

typedef cures (*getproc_fn)(const char *, void **, int, unsigned long long, int *);

#define CU_NOT_READY 600
#define CU_STREAM_NON_BLOCKING 1u
#define CU_EVENT_DISABLE_TIMING 2u

static gcu G;
static void *g_fill, *g_check, *g_spin; /* kernels */
static cudptr g_bad;                    /* mismatch counter (4 bytes) */
static void *S1, *S2;                   /* non-blocking streams */
static size_t g_total;                  /* device memory */

static int load_entries(getproc_fn getproc, char *err, size_t len)
{
    for (size_t i = 0; i < sizeof k_entries / sizeof k_entries[0]; i++) {
        void *fn = NULL;
        int st = 0;
        cures rc = getproc(k_entries[i].name, &fn, 12000, 0, &st);

        if (rc != 0 || fn == NULL) {
            snprintf(err, len, "cuGetProcAddress(%s): code %d, status %d", k_entries[i].name,
                     rc, st);
            return -1;
        }
        memcpy((char *)&G + k_entries[i].off, &fn, sizeof fn);
    }
    return 0;
}

static int load_cuda(char *err, size_t len)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    void *sym = lib ? dlsym(lib, "cuGetProcAddress_v2") : NULL;
    getproc_fn getproc;

    if (sym == NULL) {
        snprintf(err, len, "libcuda.so.1 / cuGetProcAddress_v2 not found");
        return -1;
    }
    memcpy(&getproc, &sym, sizeof sym);
    return load_entries(getproc, err, len);
}

/* Primary context current on this thread, kernels loaded, counter, streams. */
static int open_gpu(char *err, size_t len)
{
    void *ctx = NULL, *mod = NULL;
    int dev = 0;
    size_t fr = 0;
    cures rc;

    if (load_cuda(err, len) != 0)
        return -1;
    if ((rc = G.Init(0)) || (rc = G.DeviceGet(&dev, 0)) ||
        (rc = G.DevicePrimaryCtxRetain(&ctx, dev)) || (rc = G.CtxSetCurrent(ctx)) ||
        (rc = G.ModuleLoadData(&mod, xg_ptx)) ||
        (rc = G.ModuleGetFunction(&g_fill, mod, "xg_fill")) ||
        (rc = G.ModuleGetFunction(&g_check, mod, "xg_check")) ||
        (rc = G.ModuleGetFunction(&g_spin, mod, "xg_spin_fill")) ||
        (rc = G.MemAlloc(&g_bad, 4)) || (rc = G.StreamCreate(&S1, CU_STREAM_NON_BLOCKING)) ||
        (rc = G.StreamCreate(&S2, CU_STREAM_NON_BLOCKING)) || (rc = G.MemGetInfo(&fr, &g_total))) {
        snprintf(err, len, "CUDA setup failed with code %d", rc);
        return -1;
    }
    return 0;
}

/* ---- kernel helpers -------------------------------------------------- */

#define CU(call) cu_ok((call), #call)

static void cu_ok(cures rc, const char *what)
{
    ck_assert_msg(rc == 0, "%s failed: CUDA error %d", what, rc);
}

static void launch(void *fn, unsigned grid, void *stream, void **args)
{
    CU(G.LaunchKernel(fn, grid, 1, 1, 256, 1, 1, 0, stream, args, NULL));
}

static unsigned grid_for(size_t nwords)
{
    size_t g = (nwords + 255) / 256;

    return (unsigned)(g == 0 ? 1 : g > 4096 ? 4096 : g);
}

static void fill(void *p, size_t bytes, unsigned seed, void *stream)
{
    cudptr d = (cudptr)(uintptr_t)p;
    unsigned long long n = bytes / 4;
    void *args[] = {&d, &n, &seed};

    launch(g_fill, grid_for(n), stream, args);
}

/* Words of p[0, bytes) that differ from the pattern of `seed` (waits). */
static unsigned mismatches(void *p, size_t bytes, unsigned seed, void *stream)
{
    cudptr d = (cudptr)(uintptr_t)p;
    unsigned long long n = bytes / 4;
    unsigned bad = 0;
    void *args[] = {&d, &n, &seed, &g_bad};

    CU(G.StreamSynchronize(stream));
    CU(G.MemsetD32(g_bad, 0, 1));
    CU(G.CtxSynchronize());
    launch(g_check, grid_for(n), stream, args);
    CU(G.StreamSynchronize(stream));
    CU(G.MemcpyDtoH(&bad, g_bad, 4));
    return bad;
}

static void expect_pattern(void *p, size_t bytes, unsigned seed, void *stream)
{
    unsigned bad = mismatches(p, bytes, seed, stream);

    ck_assert_msg(bad == 0, "block %p (%zu B, seed %u): %u of %zu words corrupted", p, bytes,
                  seed, bad, bytes / 4);
}

/* Few blocks, so a kernel that writes late leaves the GPU free for others. */
static void spin_fill(void *p, size_t bytes, unsigned seed, unsigned long long ns, void *stream)
{
    cudptr d = (cudptr)(uintptr_t)p;
    unsigned long long n = bytes / 4;
    void *args[] = {&d, &n, &seed, &ns};

    launch(g_spin, 8, stream, args);
}

static size_t dev_free(void)
{
    size_t fr = 0, total = 0;

    CU(G.CtxSynchronize());
    CU(G.MemGetInfo(&fr, &total));
    return fr;
}

/* ---- allocators: created per test, destroyed by the fixture ----------- */

static xseg_t *g_xs[MAX_XS];

static xseg_t *make(const char *conf)
{
    for (int i = 0; i < MAX_XS; i++) {
        if (g_xs[i] != NULL)
            continue;
        xseg_status st = xseg_create(&g_xs[i], 0, conf);
        ck_assert_msg(st == XSEG_OK, "xseg_create(\"%s\"): %s: %s", conf, xseg_strerror(st),
                      xseg_last_error());
        return g_xs[i];
    }
    ck_abort_msg("too many allocators in one test");
    return NULL;
}

static void setup(void)
{
    memset(g_xs, 0, sizeof g_xs);
}

static void teardown(void)
{
    (void)G.CtxSynchronize();
    for (int i = 0; i < MAX_XS; i++)
        if (g_xs[i] != NULL)
            xseg_destroy(g_xs[i]);
    memset(g_xs, 0, sizeof g_xs);
}

/* Destroy now (not in the fixture). */
static void destroy(xseg_t *xs)
{
    for (int i = 0; i < MAX_XS; i++)
        if (g_xs[i] == xs)
            g_xs[i] = NULL;
    ck_assert_int_eq(xseg_destroy(xs), XSEG_OK);
}

static void *xalloc(xseg_t *xs, size_t n, void *stream)
{
    void *p = NULL;
    xseg_status st = xseg_alloc(xs, n, stream, &p);

    ck_assert_msg(st == XSEG_OK, "xseg_alloc(%zu): %s: %s", n, xseg_strerror(st),
                  xseg_last_error());
    ck_assert_ptr_nonnull(p);
    return p;
}

static void xfree(xseg_t *xs, void *p)
{
    xseg_status st = xseg_free(xs, p);

    ck_assert_msg(st == XSEG_OK, "xseg_free(%p): %s: %s", p, xseg_strerror(st),
                  xseg_last_error());
}

static xseg_stats stats_of(xseg_t *xs)
{
    xseg_stats s;

    memset(&s, 0, sizeof s);
    s.size = sizeof s;
    ck_assert_int_eq(xseg_get_stats(xs, &s), XSEG_OK);
    return s;
}

static int overlaps(const void *a, size_t na, const void *b, size_t nb)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;

    return x < y + nb && y < x + na;
}

/* ---- growth, shrink and re-map, trim --------------------------------- */

static const size_t k_sizes[] = {512,      4 * KIB,   60 * KIB,  1 * MIB,      3 * MIB + 100,
                                 17 * MIB, 100 * MIB, 700 * MIB, 2 * GIB + 4 * KIB};
#define NSIZES (sizeof k_sizes / sizeof k_sizes[0])

static void fill_all(void **p, unsigned base)
{
    for (size_t i = 0; i < NSIZES; i++)
        if (p[i] != NULL)
            fill(p[i], k_sizes[i], base + (unsigned)i, S1);
}

static void check_all(void **p, const unsigned *seed)
{
    for (size_t i = 0; i < NSIZES; i++)
        if (p[i] != NULL)
            expect_pattern(p[i], k_sizes[i], seed[i], S1);
}

START_TEST(test_growth_shrink_trim)
{
    xseg_t *xs = make("backend:cuda");
    void *p[NSIZES] = {0};
    unsigned seed[NSIZES];
    size_t released = 0;
    uint64_t left;

    for (size_t i = 0; i < NSIZES; i++) { /* growth */
        p[i] = xalloc(xs, k_sizes[i], S1);
        seed[i] = 1000 + (unsigned)i;
    }
    fill_all(p, 1000);
    check_all(p, seed);
    for (size_t i = 1; i < NSIZES; i += 2) { /* shrink: unmap the odd ones */
        xfree(xs, p[i]);
        p[i] = NULL;
    }
    ck_assert_int_eq(xseg_trim(xs, 0, &released), XSEG_OK);
    ck_assert_uint_gt(released, 0);
    check_all(p, seed);
    for (size_t i = 1; i < NSIZES; i += 2) { /* re-map */
        p[i] = xalloc(xs, k_sizes[i], S1);
        fill(p[i], k_sizes[i], seed[i] = 2000 + (unsigned)i, S1);
    }
    check_all(p, seed);
    for (size_t i = 0; i < NSIZES; i++)
        xfree(xs, p[i]);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK);
    left = stats_of(xs).mapped_bytes.current; /* checked last: go on meanwhile */
    for (size_t i = 0; i < NSIZES; i++) /* after trim */
        p[i] = xalloc(xs, k_sizes[i], S1);
    fill_all(p, 3000);
    for (size_t i = 0; i < NSIZES; i++)
        seed[i] = 3000 + (unsigned)i;
    check_all(p, seed);
    ck_assert_msg(left == 0, "%llu bytes still mapped after freeing all and trim(0)",
                  (unsigned long long)left);
}
END_TEST

/* ---- random allocs and frees: every live block keeps its pattern ----- */

#define RSLOTS 256
#define ROPS 4000

typedef struct rslot {
    void *p;
    size_t n;
    unsigned seed;
    void *stream;
} rslot;

static uint64_t g_rng = 0x2545F4914F6CDD1DULL;

static uint64_t rnd(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

/* Log-uniform from 256 B to 256 MiB, at times an exact power of two. */
static size_t rnd_size(void)
{
    unsigned sh = 8 + (unsigned)(rnd() % 21);
    size_t base = (size_t)1 << sh;

    return (rnd() % 4 == 0) ? base : base + (size_t)(rnd() % base);
}

static void check_slots(const rslot *s)
{
    for (int i = 0; i < RSLOTS; i++)
        if (s[i].p != NULL)
            expect_pattern(s[i].p, s[i].n, s[i].seed, s[i].stream);
}

static void random_step(xseg_t *xs, rslot *s, size_t *live, unsigned op)
{
    rslot *r = &s[rnd() % RSLOTS];

    if (r->p != NULL) {
        if (rnd() % 8 == 0)
            expect_pattern(r->p, r->n, r->seed, r->stream);
        xfree(xs, r->p);
        *live -= r->n;
        r->p = NULL;
        return;
    }
    r->n = rnd_size();
    if (*live + r->n > 12 * GIB)
        return;
    r->stream = (op & 1) ? S1 : S2;
    r->p = xalloc(xs, r->n, r->stream);
    r->seed = op * 7919u + 1;
    fill(r->p, r->n, r->seed, r->stream);
    *live += r->n;
}

START_TEST(test_random_patterns)
{
    xseg_t *xs = make("backend:cuda");
    rslot *s = calloc(RSLOTS, sizeof *s);
    size_t live = 0;

    ck_assert_ptr_nonnull(s);
    for (unsigned op = 1; op <= ROPS; op++) {
        random_step(xs, s, &live, op);
        if (op % 1000 == 0)
            check_slots(s);
    }
    check_slots(s);
    for (int i = 0; i < RSLOTS; i++)
        if (s[i].p != NULL)
            xfree(xs, s[i].p);
    free(s);
}
END_TEST

/* ---- cross-stream safety: record_stream holds a freed block ----------- */

#define SPIN_NS 600000000ULL /* 0.6 s */
#define NQ 48

typedef struct qblock {
    void *p;
    int overlap;   /* shares bytes with the block still being written */
    int was_done;  /* the writer had finished when it was handed out */
} qblock;

static void check_reuse(const qblock *q, void *p, size_t size, unsigned seed, int record);

/* The block p is freed while a kernel on S2 will write it 0.6 s later;
 * nq blocks of its size are then allocated and filled on S1.  With
 * record_stream (`record`) none may share bytes with p before the writer
 * is done, and every one must keep its pattern.  Without it (the control)
 * the allocator may reuse p at once, and such a reuse must then show the
 * late write: proof that the data check catches a violation. */
static void cross_stream(size_t size, int nq, int record)
{
    xseg_t *xs = make("backend:cuda");
    void *ev = NULL, *p = xalloc(xs, size, S1);
    qblock q[NQ];
    int reused = 0;

    CU(G.EventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    fill(p, size, 1, S1);
    CU(G.StreamSynchronize(S1));
    spin_fill(p, size, 0xBADBAD, SPIN_NS, S2); /* writes p in 0.6 s */
    CU(G.EventRecord(ev, S2));
    if (record)
        ck_assert_int_eq(xseg_record_stream(xs, p, S2), XSEG_OK);
    xfree(xs, p);
    for (int i = 0; i < nq; i++) {
        q[i].p = xalloc(xs, size, S1);
        q[i].was_done = G.EventQuery(ev) == 0;
        q[i].overlap = overlaps(q[i].p, size, p, size);
        reused += q[i].overlap;
        fill(q[i].p, size, 500 + (unsigned)i, S1);
    }
    CU(G.StreamSynchronize(S1));
    ck_assert_msg(G.EventQuery(ev) == CU_NOT_READY,
                  "the writer ended before the reuses were filled: inconclusive");
    CU(G.CtxSynchronize());
    fprintf(stderr, "test_gpu: cross-stream %zu B, %s: %d of %d allocations reused the "
            "freed block\n", size, record ? "record_stream" : "control", reused, nq);
    for (int i = 0; i < nq; i++)
        check_reuse(&q[i], p, size, 500 + (unsigned)i, record);
    CU(G.EventDestroy(ev));
}

static void check_reuse(const qblock *q, void *p, size_t size, unsigned seed, int record)
{
    unsigned bad = mismatches(q->p, size, seed, S1);

    if (record) {
        ck_assert_msg(!q->overlap || q->was_done,
                      "block %p (%zu B) handed out at %p while a kernel on another stream "
                      "still wrote it", p, size, q->p);
        ck_assert_msg(bad == 0, "block %p (%zu B): %u words overwritten", q->p, size, bad);
    } else if (q->overlap) {
        ck_assert_msg(bad > 0, "control: %p reused the written block but shows no late "
                      "write: the data check would miss a violation", q->p);
    } else {
        ck_assert_msg(bad == 0, "control: block %p (%zu B): %u words overwritten", q->p,
                      size, bad);
    }
}

START_TEST(test_cross_stream_small)
{
    cross_stream(4 * KIB, NQ, 1);
}
END_TEST

START_TEST(test_cross_stream_large)
{
    cross_stream(256 * MIB, 8, 1);
}
END_TEST

START_TEST(test_cross_stream_control)
{
    cross_stream(256 * MIB, 8, 0);
}
END_TEST

/* ---- out of memory at the real capacity ------------------------------ */

#define MAXP 8192

/* Allocate `step` blocks until OOM; returns how many were added. */
static size_t fill_up(xseg_t *xs, size_t step, void **p, size_t have)
{
    size_t n = have;
    xseg_status st = XSEG_OK;

    while (n < MAXP && (st = xseg_alloc(xs, step, S1, &p[n])) == XSEG_OK)
        n++;
    ck_assert_msg(n < MAXP, "no OOM after %d allocations of %zu B", MAXP, step);
    ck_assert_msg(st == XSEG_ERR_OOM, "expected XSEG_ERR_OOM at capacity, got %s: %s",
                  xseg_strerror(st), xseg_last_error());
    ck_assert_msg(strstr(xseg_last_error(), "out of memory") != NULL, "OOM message: %s",
                  xseg_last_error());
    return n - have;
}

START_TEST(test_oom_real_capacity)
{
    size_t free0 = dev_free(), n = 0, got = 0, free1, free2;
    xseg_t *xs = make("backend:cuda");
    void **p = calloc(MAXP, sizeof *p);
    const size_t steps[] = {GIB, 64 * MIB, 2 * MIB};

    ck_assert_ptr_nonnull(p);
    for (size_t i = 0; i < 3; i++) {
        size_t k = fill_up(xs, steps[i], p, n);
        got += k * steps[i];
        n += k;
    }
    fprintf(stderr, "test_gpu: OOM after %zu blocks, %.2f GiB of %.2f GiB free: %s\n", n,
            (double)got / GIB, (double)free0 / GIB, xseg_last_error());
    ck_assert_uint_ge(got, free0 / 10 * 9);
    ck_assert_uint_ge(stats_of(xs).ooms, 3);
    xfree(xs, p[0]); /* room for whatever a launch needs, then the last block works */
    fill(p[n - 1], 2 * MIB, 77, S1);
    expect_pattern(p[n - 1], 2 * MIB, 77, S1);
    for (size_t i = 1; i < n; i++)
        xfree(xs, p[i]);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK);
    free1 = dev_free();
    ck_assert_msg(free1 + SLACK >= free0, "after free + trim: %zu B free, %zu B at start",
                  free1, free0);
    destroy(xs);
    free2 = dev_free();
    ck_assert_msg(free2 + SLACK >= free0, "after destroy: %zu B free, %zu B at start", free2,
                  free0);
    free(p);
}
END_TEST

/* ---- caps and trim --------------------------------------------------- */

/* Allocate `step` blocks under `conf` until OOM; mapped and the device's
 * drop stay within `cap`. */
static void cap_holds(const char *conf, size_t cap, size_t step)
{
    size_t free0 = dev_free(), n = 0, drop;
    xseg_t *xs = make(conf);
    void *p[512];
    xseg_status st = XSEG_OK;

    while (n < 512 && (st = xseg_alloc(xs, step, S1, &p[n])) == XSEG_OK)
        n++;
    ck_assert_msg(st == XSEG_ERR_OOM, "%s: expected OOM at the cap, got %s: %s", conf,
                  xseg_strerror(st), xseg_last_error());
    ck_assert_msg(n * step <= cap && (n + 2) * step > cap / 2,
                  "%s: %zu blocks of %zu B under a cap of %zu B", conf, n, step, cap);
    ck_assert_uint_le(stats_of(xs).mapped_bytes.peak, cap);
    drop = free0 - (free0 < dev_free() ? free0 : dev_free());
    ck_assert_msg(drop <= cap + SLACK / 2, "%s: device drop %zu B > cap %zu", conf, drop, cap);
    for (size_t i = 0; i < n; i++)
        fill(p[i], step, 40 + (unsigned)i, S1);
    for (size_t i = 0; i < n; i++)
        expect_pattern(p[i], step, 40 + (unsigned)i, S1);
}

START_TEST(test_cap_max_mapped)
{
    cap_holds("backend:cuda,max_mapped:1GB", GIB, 64 * MIB);
}
END_TEST

START_TEST(test_cap_memory_fraction)
{
    cap_holds("backend:cuda,memory_fraction:0.02", (size_t)(0.02 * (double)g_total), 128 * MIB);
}
END_TEST

START_TEST(test_trim_gives_back)
{
    size_t free0 = dev_free(), released = 0, before, after;
    xseg_t *xs = make("backend:cuda");
    void *p[8];
    uint64_t mapped;

    for (int i = 0; i < 8; i++) {
        p[i] = xalloc(xs, 512 * MIB, S1);
        fill(p[i], 512 * MIB, 9 + (unsigned)i, S1);
    }
    for (int i = 0; i < 8; i++)
        xfree(xs, p[i]);
    before = dev_free();
    mapped = stats_of(xs).mapped_bytes.current;
    ck_assert_int_eq(xseg_trim(xs, 0, &released), XSEG_OK);
    after = dev_free();
    ck_assert_uint_eq(released, mapped - stats_of(xs).mapped_bytes.current);
    ck_assert_msg(after + SLACK / 2 >= before + released,
                  "trim released %zu B but free memory went %zu -> %zu", released, before,
                  after);
    ck_assert_msg(after + SLACK >= free0, "after trim %zu B free, %zu B at start", after,
                  free0);
}
END_TEST

/* ---- two allocators and the default one on one device ----------------- */

static const size_t k_co_sizes[] = {4 * KIB, 8 * MIB, 300 * MIB};

START_TEST(test_coexist)
{
    xseg_t *a[3], *d = NULL;
    void *p[9];
    size_t n[9];

    (void)xseg_set_default_conf("backend:cuda");
    a[0] = make("backend:cuda");
    a[1] = make("backend:cuda,max_mapped:4GB");
    ck_assert_int_eq(xseg_default(0, &d), XSEG_OK);
    a[2] = d;
    ck_assert_str_eq(xseg_backend_name(d), "cuda");
    for (int i = 0; i < 9; i++) { /* interleaved: size-major, allocator-minor */
        n[i] = k_co_sizes[i / 3];
        p[i] = xalloc(a[i % 3], n[i], (i & 1) ? S1 : S2);
        fill(p[i], n[i], 70 + (unsigned)i, (i & 1) ? S1 : S2);
    }
    for (int i = 0; i < 9; i++)
        for (int j = i + 1; j < 9; j++)
            ck_assert_msg(!overlaps(p[i], n[i], p[j], n[j]), "blocks %d and %d overlap", i, j);
    for (int i = 0; i < 9; i++)
        expect_pattern(p[i], n[i], 70 + (unsigned)i, (i & 1) ? S1 : S2);
    ck_assert_int_eq(xseg_free(a[0], p[1]), XSEG_ERR_INVALID_POINTER);
    ck_assert_int_eq(xseg_free(a[2], p[0]), XSEG_ERR_INVALID_POINTER);
    for (int i = 0; i < 9; i++)
        xfree(a[i % 3], p[i]);
    ck_assert_int_eq(xseg_trim(d, 0, NULL), XSEG_OK);
}
END_TEST

/* ---- stress: a million random operations across four streams -------- */

#define STRESS_OPS 1000000
#define STRESS_SLOTS 512

/* Launch a check of s on `stream` without waiting: mismatches accumulate in
 * the device counter g_bad, read once at the end. */
static void check_async(const rslot *r, void *stream)
{
    cudptr d = (cudptr)(uintptr_t)r->p;
    unsigned long long n = r->n / 4;
    unsigned seed = r->seed;
    void *args[] = {&d, &n, &seed, &g_bad};

    launch(g_check, grid_for(n) > 64 ? 64 : grid_for(n), stream, args);
}

/* Mostly small and medium blocks, at times a large one. */
static size_t stress_size(void)
{
    uint64_t r = rnd();
    if (r % 64 == 0)
        return (size_t)(16 + rnd() % 48) * MIB;
    if (r % 4 == 0)
        return (size_t)(1 + rnd() % (4 * MIB));
    return (size_t)(4 + rnd() % 65536) & ~(size_t)3;
}

/* Free a slot: checked on its own stream, or (one in four) on another
 * stream with record_stream, so that its reuse must wait for that check. */
static void *g_order_ev; /* orders a fill on one stream before a check on another */

static void stress_free(xseg_t *xs, rslot *r, void **streams, unsigned *cross)
{
    void *t = r->stream;
    if (rnd() % 4 == 0) {
        t = streams[rnd() % 4];
        if (t != r->stream) {
            CU(G.EventRecord(g_order_ev, r->stream));
            CU(G.StreamWaitEvent(t, g_order_ev, 0));
            ck_assert_int_eq(xseg_record_stream(xs, r->p, t), XSEG_OK);
            (*cross)++;
        }
    }
    check_async(r, t);
    xfree(xs, r->p);
    r->p = NULL;
}

START_TEST(test_stress_million)
{
    void *streams[4] = {S1, S2, NULL, NULL};
    CU(G.StreamCreate(&streams[2], CU_STREAM_NON_BLOCKING));
    CU(G.StreamCreate(&streams[3], CU_STREAM_NON_BLOCKING));
    if (!g_order_ev)
        CU(G.EventCreate(&g_order_ev, CU_EVENT_DISABLE_TIMING));
    size_t free0 = dev_free();
    xseg_t *xs = make("backend:cuda");
    rslot *slots = calloc(STRESS_SLOTS, sizeof *slots);
    unsigned cross = 0, bad = 0;
    ck_assert_ptr_nonnull(slots);
    CU(G.MemsetD32(g_bad, 0, 1));
    CU(G.CtxSynchronize());
    for (unsigned op = 1; op <= STRESS_OPS; op++) {
        rslot *r = &slots[rnd() % STRESS_SLOTS];
        if (r->p) {
            stress_free(xs, r, streams, &cross);
            continue;
        }
        r->n = stress_size();
        r->stream = streams[rnd() % 4];
        r->p = xalloc(xs, r->n, r->stream);
        r->seed = op;
        fill(r->p, r->n, r->seed, r->stream);
    }
    for (int i = 0; i < STRESS_SLOTS; i++)
        if (slots[i].p)
            stress_free(xs, &slots[i], streams, &cross);
    CU(G.CtxSynchronize());
    CU(G.MemcpyDtoH(&bad, g_bad, 4));
    xseg_stats st = stats_of(xs);
    printf("test_gpu: stress: %u operations on 4 streams, %u cross-stream frees, %llu deferred, "
           "peak mapped %.1f MiB, %u corrupted words\n", STRESS_OPS, cross,
           (unsigned long long)st.deferred_frees, st.mapped_bytes.peak / 1048576.0, bad);
    ck_assert_uint_eq(bad, 0);
    ck_assert_uint_eq(st.active_blocks.current, 0);
    destroy(xs);
    size_t free1 = dev_free();
    ck_assert_msg(free1 + SLACK >= free0, "device memory not back: %zu B free, %zu at start",
                  free1, free0);
    free(slots);
}
END_TEST

/* ---- sleep and wake of a tag (docs/sleep.md) ------------------------- */

static int tag_of(const char *name)
{
    int t = -1;
    ck_assert_int_eq(xseg_tag_id(name, &t), XSEG_OK);
    return t;
}

static const size_t k_sleep_sizes[] = {512, 60 * KIB, 3 * MIB + 100, 64 * MIB, 700 * MIB};
#define NSLEEP (sizeof k_sleep_sizes / sizeof k_sleep_sizes[0])

START_TEST(test_sleep_backup_restores)
{
    xseg_t *xs = make("backend:cuda");
    int w = tag_of("gpu_weights");
    void *p[NSLEEP], *u = xalloc(xs, 32 * MIB, S1); /* untagged: stays */
    fill(u, 32 * MIB, 500, S1);
    for (size_t i = 0; i < NSLEEP; i++) {
        ck_assert_int_eq(xseg_alloc_tagged(xs, k_sleep_sizes[i], S1, w, &p[i]), XSEG_OK);
        fill(p[i], k_sleep_sizes[i], 510 + (unsigned)i, S1);
    }
    size_t free0 = dev_free();
    xseg_tag_stats ts = {.size = sizeof ts};
    ck_assert_int_eq(xseg_tag_stats_get(xs, w, &ts), XSEG_OK);
    uint64_t mapped = ts.mapped_bytes.current;
    for (int cycle = 0; cycle < 3; cycle++) {
        ck_assert_msg(xseg_sleep(xs, &w, 1, XSEG_SLEEP_BACKUP) == XSEG_OK, "%s",
                      xseg_last_error());
        size_t asleep = dev_free();
        ck_assert_msg(asleep + SLACK >= free0 + mapped,
                      "sleep gave %zu B back of %llu B mapped", asleep - free0,
                      (unsigned long long)mapped);
        void *q = NULL;
        ck_assert_int_eq(xseg_alloc_tagged(xs, 4096, S1, w, &q), XSEG_ERR_ASLEEP);
        ck_assert_msg(xseg_wake(xs, &w, 1) == XSEG_OK, "%s", xseg_last_error());
        for (size_t i = 0; i < NSLEEP; i++)
            expect_pattern(p[i], k_sleep_sizes[i], 510 + (unsigned)i, S1);
        expect_pattern(u, 32 * MIB, 500, S1);
    }
    for (size_t i = 0; i < NSLEEP; i++)
        xfree(xs, p[i]);
    xfree(xs, u);
}
END_TEST

START_TEST(test_sleep_discard_gives_back)
{
    xseg_t *xs = make("backend:cuda");
    int kv = tag_of("gpu_kv");
    void *p[4];
    size_t free0 = dev_free();
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(xseg_alloc_tagged(xs, GIB, S1, kv, &p[i]), XSEG_OK);
        fill(p[i], GIB, 600 + (unsigned)i, S1);
    }
    size_t loaded = dev_free();
    ck_assert_msg(xseg_sleep(xs, &kv, 1, XSEG_SLEEP_DISCARD) == XSEG_OK, "%s",
                  xseg_last_error());
    size_t asleep = dev_free();
    ck_assert_msg(asleep + SLACK >= free0, "asleep: %zu B free, %zu before the 4 GiB", asleep,
                  free0);
    ck_assert_msg(xseg_wake(xs, &kv, 1) == XSEG_OK, "%s", xseg_last_error());
    ck_assert_msg(dev_free() <= loaded + SLACK, "wake mapped too little");
    for (int i = 0; i < 4; i++) { /* usable again (contents were discarded) */
        fill(p[i], GIB, 700 + (unsigned)i, S1);
        expect_pattern(p[i], GIB, 700 + (unsigned)i, S1);
        xfree(xs, p[i]);
    }
}
END_TEST

#define CU_STREAM_CAPTURE_MODE_RELAXED 2

START_TEST(test_sleep_graph_replays)
{
    xseg_t *xs = make("backend:cuda");
    int g = tag_of("gpu_graph");
    void *p = NULL, *graph = NULL, *exec = NULL;
    ck_assert_int_eq(xseg_alloc_tagged(xs, 256 * MIB, S1, g, &p), XSEG_OK);
    CU(G.StreamBeginCapture(S1, CU_STREAM_CAPTURE_MODE_RELAXED));
    fill(p, 256 * MIB, 800, S1);
    CU(G.StreamEndCapture(S1, &graph));
    CU(G.GraphInstantiateWithFlags(&exec, graph, 0));
    CU(G.GraphLaunch(exec, S1));
    expect_pattern(p, 256 * MIB, 800, S1);
    ck_assert_msg(xseg_sleep(xs, &g, 1, XSEG_SLEEP_DISCARD) == XSEG_OK, "%s", xseg_last_error());
    ck_assert_msg(xseg_wake(xs, &g, 1) == XSEG_OK, "%s", xseg_last_error());
    CU(G.GraphLaunch(exec, S1)); /* no re-capture: same addresses */
    expect_pattern(p, 256 * MIB, 800, S1);
    CU(G.GraphExecDestroy(exec));
    CU(G.GraphDestroy(graph));
    xfree(xs, p);
}
END_TEST

/* ---- suite ----------------------------------------------------------- */

static TCase *tc(const char *name)
{
    TCase *t = tcase_create(name);

    tcase_add_checked_fixture(t, setup, teardown);
    tcase_set_timeout(t, 600);
    return t;
}

static Suite *gpu_suite(void)
{
    Suite *s = suite_create("gpu");
    TCase *t = tc("kernels");

    tcase_add_test(t, test_growth_shrink_trim);
    tcase_add_test(t, test_random_patterns);
    tcase_add_test(t, test_cross_stream_small);
    tcase_add_test(t, test_cross_stream_large);
    tcase_add_test(t, test_cross_stream_control);
    suite_add_tcase(s, t);
    t = tc("capacity");
    tcase_add_test(t, test_oom_real_capacity);
    tcase_add_test(t, test_cap_max_mapped);
    tcase_add_test(t, test_cap_memory_fraction);
    tcase_add_test(t, test_trim_gives_back);
    suite_add_tcase(s, t);
    t = tc("sleep");
    tcase_add_test(t, test_sleep_backup_restores);
    tcase_add_test(t, test_sleep_discard_gives_back);
    tcase_add_test(t, test_sleep_graph_replays);
    suite_add_tcase(s, t);
    t = tc("stress");
    tcase_add_test(t, test_stress_million);
    suite_add_tcase(s, t);
    t = tc("coexist"); /* last: the default allocator lives on */
    tcase_add_test(t, test_coexist);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    char err[256] = "";
    SRunner *sr;
    int failed;

    if (!xseg_cuda_available()) {
        printf("test_gpu: no usable CUDA device: skipped\n");
        return SKIP_RC;
    }
    if (open_gpu(err, sizeof err) != 0) {
        printf("test_gpu: a device is present but the test kernels could not be set up: %s\n",
               err);
        return EXIT_FAILURE;
    }
    sr = srunner_create(gpu_suite());
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_ENV);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
