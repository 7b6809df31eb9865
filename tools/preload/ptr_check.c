/* ptr_check.c: pointer queries on device memory, a plain C program (no
 * kernels, no nvcc) for the preload proof (gpu_proof.sh; docs/preload.md,
 * "Pointer queries").  It never names an allocator: run it without and
 * with one under it (LD_PRELOAD) and compare the two outputs.
 * It allocates 1 KiB, 3 MiB + 5 bytes and 64 MiB through each of
 * cudaMalloc, cudaMallocAsync (on a stream it creates) and cuMemAlloc_v2,
 * and checks, at each block's start, middle (base + size/2) and last byte:
 *  - rt_*: cudaPointerGetAttributes says device memory of device 0, with
 *    devicePointer the pointer asked;
 *  - attr_*: cuPointerGetAttribute's RANGE_START_ADDR is the block's base,
 *    RANGE_SIZE covers the request, MEMORY_TYPE is device, DEVICE_ORDINAL 0;
 *  - range_*: cuMemGetAddressRange_v2 gives the block's base and a size
 *    covering the request;
 * and per block: disjoint_* (its range, asked at its start, ends at or
 * before the next block this program allocated), data_* (cudaMemset of the
 * block, then cudaMemcpy reads back its first, middle and last byte),
 * alloc_* and free_*.  Compare-only facts (info, never failures):
 * each block's range size; cudaIpcGetMemHandle of the cudaMalloc 3 MiB
 * block and cuIpcGetMemHandle of the cuMemAlloc one (CUDA gives handles; an
 * allocator of VMM memory may refuse them); the three queries on a freed
 * block and on a stack address; the device and versions.
 * usage: ptr_check  (no arguments; device 0)
 * output, one line per fact:
 *   check NAME ok|FAIL DETAIL   an invariant; addresses as base+OFFSET
 *   info NAME VALUE             a fact to compare between runs, no addresses
 * then one JSON line: {"checks": N, "failed": F, "failed_names": [...],
 * "info": {NAME: VALUE, ...}}.  Exit 0: every check ok; 1: some FAIL;
 * 2: no device or context. */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define NSRC 3
#define NSIZE 3
#define NBLOCKS (NSRC * NSIZE)
#define MAX_INFO 64
#define MAX_FAILED 128
#define PRINTF(f, a) __attribute__((format(printf, f, a)))

enum { SRC_RT, SRC_ASYNC, SRC_DRV };
static const char *const src_names[NSRC] = {"cudaMalloc", "cudaMallocAsync", "cuMemAlloc"};
static const size_t sizes[NSIZE] = {1024, (3u << 20) + 5, 64u << 20};
static const char *const size_names[NSIZE] = {"1KiB", "3MiB+5", "64MiB"};
static const char *const point_names[3] = {"start", "mid", "last"};

typedef struct block {
    char name[40]; /* SOURCE_SIZE, e.g. cudaMalloc_3MiB+5 */
    int src;
    size_t size;
    uintptr_t base;    /* 0: not allocated */
    size_t range_size; /* cuMemGetAddressRange at base, 0 when refused */
} block;

static int g_checks, g_failed, g_nfailed, g_ninfo;
static char g_failed_names[MAX_FAILED][64];
static char g_info_names[MAX_INFO][40], g_info_vals[MAX_INFO][200];

/* ---- output ---- */

static PRINTF(3, 4) void check(const char *name, int ok, const char *fmt, ...)
{
    char detail[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    g_checks++;
    if (!ok) {
        g_failed++;
        if (g_nfailed < MAX_FAILED)
            snprintf(g_failed_names[g_nfailed++], sizeof g_failed_names[0], "%s", name);
    }
    printf("check %s %s %s\n", name, ok ? "ok" : "FAIL", detail);
}

static PRINTF(2, 3) void info(const char *name, const char *fmt, ...)
{
    char val[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(val, sizeof val, fmt, ap);
    va_end(ap);
    if (g_ninfo < MAX_INFO) {
        snprintf(g_info_names[g_ninfo], sizeof g_info_names[0], "%s", name);
        snprintf(g_info_vals[g_ninfo++], sizeof g_info_vals[0], "%s", val);
    }
    printf("info %s %s\n", name, val);
}

static void json_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

static void print_json(void)
{
    printf("{\"checks\": %d, \"failed\": %d, \"failed_names\": [", g_checks, g_failed);
    for (int i = 0; i < g_nfailed; i++) {
        if (i)
            printf(", ");
        json_str(g_failed_names[i]);
    }
    printf("], \"info\": {");
    for (int i = 0; i < g_ninfo; i++) {
        if (i)
            printf(", ");
        json_str(g_info_names[i]);
        printf(": ");
        json_str(g_info_vals[i]);
    }
    printf("}}\n");
}

/* v relative to base: "null", "base", "base+N" or "base-N". */
static const char *rel(char *buf, size_t n, uintptr_t v, uintptr_t base)
{
    if (!v)
        snprintf(buf, n, "null");
    else if (v == base)
        snprintf(buf, n, "base");
    else if (v > base)
        snprintf(buf, n, "base+%llu", (unsigned long long)(v - base));
    else
        snprintf(buf, n, "base-%llu", (unsigned long long)(base - v));
    return buf;
}

static const char *drv_name(CUresult r)
{
    const char *s = NULL;
    return cuGetErrorName(r, &s) == CUDA_SUCCESS && s ? s : "?";
}

/* ---- the checks of one pointer inside a block ---- */

static uintptr_t point(const block *b, int i)
{
    return i == 0 ? b->base : i == 1 ? b->base + b->size / 2 : b->base + b->size - 1;
}

static void check_rt(const block *b, const char *pt, uintptr_t p)
{
    struct cudaPointerAttributes a;
    char name[64], dp[32];
    memset(&a, 0, sizeof a);
    cudaError_t rc = cudaPointerGetAttributes(&a, (const void *)p);
    (void)cudaGetLastError();
    snprintf(name, sizeof name, "rt_%s_%s", b->name, pt);
    check(name,
          rc == cudaSuccess && a.type == cudaMemoryTypeDevice && a.device == 0 &&
              (uintptr_t)a.devicePointer == p,
          "rc=%d type=%d device=%d devicePointer=%s (pointer: %s)", (int)rc, (int)a.type, a.device,
          rel(dp, sizeof dp, (uintptr_t)a.devicePointer, b->base), pt);
}

static void check_attr(const block *b, const char *pt, uintptr_t p)
{
    CUdeviceptr start = 0, dp = (CUdeviceptr)p;
    size_t size = 0;
    unsigned type = 0;
    int ordinal = -9;
    char name[64], st[32];
    CUresult r1 = cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, dp);
    CUresult r2 = cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, dp);
    CUresult r3 = cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dp);
    CUresult r4 = cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, dp);
    snprintf(name, sizeof name, "attr_%s_%s", b->name, pt);
    check(name,
          !r1 && !r2 && !r3 && !r4 && start == b->base && size >= b->size &&
              type == CU_MEMORYTYPE_DEVICE && ordinal == 0,
          "rc=%d,%d,%d,%d start=%s size=%zu (requested %zu) type=%u ordinal=%d", (int)r1, (int)r2,
          (int)r3, (int)r4, rel(st, sizeof st, (uintptr_t)start, b->base), size, b->size, type,
          ordinal);
}

/* Returns the range's size, 0 when refused or not at the block's base. */
static size_t check_range(const block *b, const char *pt, uintptr_t p)
{
    CUdeviceptr start = 0;
    size_t size = 0;
    char name[64], st[32];
    CUresult rc = cuMemGetAddressRange_v2(&start, &size, (CUdeviceptr)p);
    int ok = rc == CUDA_SUCCESS && start == b->base && size >= b->size;
    snprintf(name, sizeof name, "range_%s_%s", b->name, pt);
    check(name, ok, "rc=%d start=%s size=%zu (requested %zu)", (int)rc,
          rel(st, sizeof st, (uintptr_t)start, b->base), size, b->size);
    return rc == CUDA_SUCCESS && start == b->base ? size : 0;
}

static void check_block_queries(block *b)
{
    for (int i = 0; i < 3; i++) {
        uintptr_t p = point(b, i);
        check_rt(b, point_names[i], p);
        check_attr(b, point_names[i], p);
        size_t size = check_range(b, point_names[i], p);
        if (i == 0)
            b->range_size = size;
    }
    char name[64];
    snprintf(name, sizeof name, "range_%s", b->name);
    info(name, "requested=%zu range=%zu", b->size, b->range_size);
}

/* ---- per block: disjoint ranges, data ---- */

static void check_disjoint(const block *b, const block *all)
{
    uintptr_t next = 0;
    for (int i = 0; i < NBLOCKS; i++)
        if (all[i].base > b->base && (!next || all[i].base < next))
            next = all[i].base;
    char name[64], nx[32];
    uintptr_t end = b->base + b->range_size;
    snprintf(name, sizeof name, "disjoint_%s", b->name);
    check(name, !next || end <= next, "range end=base+%zu next block=%s%s", b->range_size,
          next ? rel(nx, sizeof nx, next, b->base) : "none",
          next && end > next ? " (the range reaches into it)" : "");
}

static void check_data(const block *b, unsigned char pattern)
{
    unsigned char got[3] = {0, 0, 0};
    char name[64];
    cudaError_t rc = cudaMemset((void *)b->base, pattern, b->size);
    for (int i = 0; i < 3 && rc == cudaSuccess; i++)
        rc = cudaMemcpy(&got[i], (const void *)point(b, i), 1, cudaMemcpyDeviceToHost);
    snprintf(name, sizeof name, "data_%s", b->name);
    check(name, rc == cudaSuccess && got[0] == pattern && got[1] == pattern && got[2] == pattern,
          "rc=%d pattern=0x%02x start=0x%02x mid=0x%02x last=0x%02x", (int)rc, pattern, got[0],
          got[1], got[2]);
}

/* ---- allocation ---- */

static void alloc_block(block *b, cudaStream_t s)
{
    void *p = NULL;
    CUdeviceptr d = 0;
    int rc;
    if (b->src == SRC_RT) {
        rc = (int)cudaMalloc(&p, b->size);
    } else if (b->src == SRC_ASYNC) {
        rc = (int)cudaMallocAsync(&p, b->size, s);
        if (rc == 0)
            rc = (int)cudaStreamSynchronize(s);
    } else {
        rc = (int)cuMemAlloc_v2(&d, b->size);
        p = (void *)(uintptr_t)d;
    }
    b->base = rc == 0 ? (uintptr_t)p : 0;
    char name[64];
    snprintf(name, sizeof name, "alloc_%s", b->name);
    check(name, rc == 0 && p, "rc=%d size=%zu", rc, b->size);
}

static void free_block(block *b, cudaStream_t s)
{
    int rc;
    if (b->src == SRC_RT) {
        rc = (int)cudaFree((void *)b->base);
    } else if (b->src == SRC_ASYNC) {
        rc = (int)cudaFreeAsync((void *)b->base, s);
        if (rc == 0)
            rc = (int)cudaStreamSynchronize(s);
    } else {
        rc = (int)cuMemFree_v2((CUdeviceptr)b->base);
    }
    char name[64];
    snprintf(name, sizeof name, "free_%s", b->name);
    check(name, rc == 0, "rc=%d", rc);
}

/* ---- compare-only facts ---- */

static void ipc_facts(const block *rt, const block *drv)
{
    cudaIpcMemHandle_t h;
    CUipcMemHandle ch;
    if (rt->base) {
        cudaError_t rc = cudaIpcGetMemHandle(&h, (void *)rt->base);
        (void)cudaGetLastError();
        info("ipc_rt_cudaMalloc", "rc=%d %s: %s", (int)rc, cudaGetErrorName(rc),
             cudaGetErrorString(rc));
    }
    if (drv->base) {
        CUresult rc = cuIpcGetMemHandle(&ch, (CUdeviceptr)drv->base);
        info("ipc_drv_cuMemAlloc", "rc=%d %s", (int)rc, drv_name(rc));
    }
}

/* "null", "the pointer" or "other": a pointer field answered for p. */
static const char *which(const void *v, uintptr_t p)
{
    return !v ? "null" : (uintptr_t)v == p ? "the pointer" : "other";
}

/* The runtime's and the driver's answers for p, which is no live block. */
static void ask_facts(const char *tag, uintptr_t p)
{
    struct cudaPointerAttributes a;
    char name[40];
    memset(&a, 0, sizeof a);
    cudaError_t rc = cudaPointerGetAttributes(&a, (const void *)p);
    (void)cudaGetLastError();
    snprintf(name, sizeof name, "%s_rt", tag);
    info(name, "rc=%d %s type=%d device=%d devicePointer=%s hostPointer=%s", (int)rc,
         cudaGetErrorName(rc), (int)a.type, a.device, which(a.devicePointer, p),
         which(a.hostPointer, p));
    unsigned type = 0;
    CUresult r = cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)p);
    snprintf(name, sizeof name, "%s_attr", tag);
    info(name, "rc=%d %s type=%u", (int)r, drv_name(r), type);
    CUdeviceptr start = 0;
    size_t size = 0;
    r = cuMemGetAddressRange_v2(&start, &size, (CUdeviceptr)p);
    snprintf(name, sizeof name, "%s_range", tag);
    info(name, "rc=%d %s size=%zu", (int)r, drv_name(r), size);
}

static void freed_facts(void)
{
    void *p = NULL;
    if (cudaMalloc(&p, 2u << 20) != cudaSuccess || cudaFree(p) != cudaSuccess) {
        (void)cudaGetLastError();
        info("freed", "2 MiB cudaMalloc/cudaFree failed");
        return;
    }
    ask_facts("freed", (uintptr_t)p + 10);
}

static void stack_facts(void)
{
    volatile int local = 0;
    ask_facts("stack", (uintptr_t)&local);
}

/* ---- main ---- */

static int setup(void)
{
    CUcontext ctx = NULL;
    char dev[128] = "?";
    int drv = 0, rt = 0;
    cudaError_t rc = cudaSetDevice(0);
    if (rc == cudaSuccess)
        rc = cudaFree(0); /* the primary context, current for cuMemAlloc */
    CUresult cr = cuCtxGetCurrent(&ctx);
    check("context", rc == cudaSuccess && cr == CUDA_SUCCESS && ctx, "rc=%d %s, cuCtxGetCurrent=%d",
          (int)rc, cudaGetErrorName(rc), (int)cr);
    if (rc != cudaSuccess || !ctx)
        return 0;
    cuDeviceGetName(dev, sizeof dev, 0);
    cuDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    info("device", "%s driver=%d runtime=%d", dev, drv, rt);
    return 1;
}

static void make_blocks(block *bl)
{
    for (int s = 0; s < NSRC; s++)
        for (int z = 0; z < NSIZE; z++) {
            block *b = &bl[s * NSIZE + z];
            memset(b, 0, sizeof *b);
            b->src = s;
            b->size = sizes[z];
            snprintf(b->name, sizeof b->name, "%s_%s", src_names[s], size_names[z]);
        }
}

int main(void)
{
    block bl[NBLOCKS];
    cudaStream_t s = NULL;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!setup() || cudaStreamCreate(&s) != cudaSuccess) {
        print_json();
        return 2;
    }
    make_blocks(bl);
    for (int i = 0; i < NBLOCKS; i++)
        alloc_block(&bl[i], s);
    for (int i = 0; i < NBLOCKS; i++)
        if (bl[i].base)
            check_block_queries(&bl[i]);
    for (int i = 0; i < NBLOCKS; i++)
        if (bl[i].base) {
            check_disjoint(&bl[i], bl);
            check_data(&bl[i], (unsigned char)(0x11 * (i + 1)));
        }
    ipc_facts(&bl[SRC_RT * NSIZE + 1], &bl[SRC_DRV * NSIZE + 1]);
    freed_facts();
    stack_facts();
    for (int i = 0; i < NBLOCKS; i++)
        if (bl[i].base)
            free_block(&bl[i], s);
    cudaStreamDestroy(s);
    print_json();
    return g_failed ? 1 : 0;
}
