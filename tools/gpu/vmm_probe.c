/* vmm_probe.c: what giving memory back costs the CUDA driver, by handle
 * size (a probe of the VMM API itself, not of xseg).  For each handle size
 * S it maps TOTAL bytes as TOTAL/S adjacent handles in one reservation
 * (create + map each, one set_access over the whole) and gives them back
 * four ways, timing each:
 *   each:    cuMemUnmap + cuMemRelease per handle (what xseg's reclaim
 *            worker did until 627a3f5; it now unmaps runs, as `one`);
 *   one:     one cuMemUnmap over the whole range (several mappings), then
 *            cuMemRelease per handle; its return code says whether the
 *            driver takes a range of several mappings at all;
 *   early:   cuMemRelease right after each map (the mapping keeps the
 *            memory), so that giving back is the unmaps alone;
 *   two:     unmap + release per handle on two threads, half each (does
 *            the driver serialise them?).
 * usage: vmm_probe [TOTAL_GIB (8)] [REPS (3)]
 * build: cc -O2 -I$CUDA/include tools/gpu/vmm_probe.c -L$CUDA/lib64/stubs -lcuda -lpthread
 * Prints one line per (size, way, rep): map ms, give-back ms, us per
 * handle, and the first failing call's code. */
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#define CK(call)                                                                   \
    do {                                                                           \
        CUresult rc_ = (call);                                                     \
        if (rc_ != CUDA_SUCCESS) {                                                 \
            fprintf(stderr, "vmm_probe: %s failed: %d (line %d)\n", #call, rc_, __LINE__); \
            return rc_;                                                            \
        }                                                                          \
    } while (0)

enum { WAY_EACH, WAY_ONE, WAY_EARLY, WAY_TWO, WAYS };
static const char *k_way[] = {"each", "one", "early", "two"};

/* Unmap and release handles [i0, i1) of a run at base: one thread's half. */
typedef struct half {
    CUcontext ctx;
    CUdeviceptr base;
    size_t hsize, i0, i1;
    CUmemGenericAllocationHandle *h;
    CUresult rc;
} half;

static void *give_half(void *arg)
{
    half *w = arg;
    w->rc = cuCtxSetCurrent(w->ctx);
    for (size_t i = w->i0; i < w->i1 && w->rc == CUDA_SUCCESS; i++)
        if ((w->rc = cuMemUnmap(w->base + i * w->hsize, w->hsize)) == CUDA_SUCCESS)
            w->rc = cuMemRelease(w->h[i]);
    return NULL;
}

static int probe(CUdevice dev, size_t total, size_t hsize, int way, int rep)
{
    CUmemAllocationProp prop = {0};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, dev}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    size_t n = total / hsize;
    CUmemGenericAllocationHandle *h = calloc(n, sizeof *h);
    CUdeviceptr base;
    CK(cuMemAddressReserve(&base, total, 0, 0, 0));
    double t0 = now();
    for (size_t i = 0; i < n; i++) {
        CK(cuMemCreate(&h[i], hsize, &prop, 0));
        CK(cuMemMap(base + i * hsize, hsize, 0, h[i], 0));
        if (way == WAY_EARLY)
            CK(cuMemRelease(h[i]));
    }
    CK(cuMemSetAccess(base, total, &acc, 1));
    CK(cuMemsetD8(base, 1, total)); /* touched, as allocations in use are */
    CK(cuCtxSynchronize());
    double t1 = now();
    CUresult first = CUDA_SUCCESS;
    if (way == WAY_TWO) {
        CUcontext ctx;
        CK(cuCtxGetCurrent(&ctx));
        half a = {ctx, base, hsize, 0, n / 2, h, 0}, b = {ctx, base, hsize, n / 2, n, h, 0};
        pthread_t t;
        pthread_create(&t, NULL, give_half, &b);
        give_half(&a);
        pthread_join(t, NULL);
        CK(a.rc);
        CK(b.rc);
    } else if (way == WAY_ONE) {
        first = cuMemUnmap(base, total);
        if (first != CUDA_SUCCESS) /* not taken: fall back to one per handle */
            for (size_t i = 0; i < n; i++)
                CK(cuMemUnmap(base + i * hsize, hsize));
        for (size_t i = 0; i < n; i++)
            CK(cuMemRelease(h[i]));
    } else {
        for (size_t i = 0; i < n; i++) {
            CK(cuMemUnmap(base + i * hsize, hsize));
            if (way == WAY_EACH)
                CK(cuMemRelease(h[i]));
        }
    }
    double t2 = now();
    size_t fr, tot;
    CK(cuMemGetInfo(&fr, &tot));
    CK(cuMemAddressFree(base, total));
    printf("size_mib=%zu handles=%zu way=%s rep=%d map_ms=%.2f giveback_ms=%.3f us_per_handle=%.2f "
           "one_unmap_rc=%d free_gib=%.2f\n",
           hsize >> 20, n, k_way[way], rep, (t1 - t0) * 1e3, (t2 - t1) * 1e3,
           (t2 - t1) * 1e6 / (double)n, (int)first, fr / 1073741824.0);
    free(h);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && argv[1][0] == '-') {
        puts("usage: vmm_probe [TOTAL_GIB (8)] [REPS (3)]: unmap/release cost by handle size");
        return 0;
    }
    size_t total = (size_t)(argc > 1 ? atoi(argv[1]) : 8) << 30;
    int reps = argc > 2 ? atoi(argv[2]) : 3;
    static const size_t k_sizes[] = {2, 8, 32, 128, 512, 2048};
    CUdevice dev;
    CUcontext ctx;
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    for (int r = 0; r < reps; r++)
        for (size_t s = 0; s < sizeof k_sizes / sizeof *k_sizes; s++)
            for (int w = 0; w < WAYS; w++)
                if (probe(dev, total, k_sizes[s] << 20, w, r) != 0)
                    return 1;
    return 0;
}
