// cuda_churn.cu: a plain CUDA C program for the preload proof (gpu_proof.sh):
// many cudaMalloc/cudaFree (and cudaMallocAsync/cudaFreeAsync) of varied
// sizes on two streams, each buffer filled and summed by kernels on its
// stream, freed some iterations later.  It never names xseg; run it with and
// without xseg-run and compare.  Prints one JSON line: the checksum (the same
// with any correct allocator), wall time, the time spent inside the
// allocation calls, and the peak device memory in use per cudaMemGetInfo
// sampled every 32 iterations (minus the use at start).
// MODE tells what runs, to bound what any allocator can reach:
//   churn (the default): the allocations and the kernels, as above;
//   gpu: the same kernels on the same sizes, in buffers allocated once before
//        the clock starts (one per ring slot, of the largest size): the GPU's
//        work and the launches alone, the floor of churn's wall time (a
//        slot's buffer is reused after an event: cudaFree's ordering);
//   alloc: the same allocations and frees without kernels: the allocator's
//        own cost when the GPU is idle.
// usage: cuda_churn [ITERS] [SEED] [churn|gpu|alloc]
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(x)                                                                          \
    do {                                                                               \
        cudaError_t e_ = (x);                                                          \
        if (e_ != cudaSuccess) {                                                       \
            printf("{\"error\":\"%s: %s (line %d)\"}\n", #x, cudaGetErrorString(e_),    \
                   __LINE__);                                                          \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

__device__ __forceinline__ uint32_t mix(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    return x ^ (x >> 16);
}

__global__ void fill(uint32_t *p, size_t n, uint32_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = mix(seed + (uint32_t)i);
}

__global__ void sum(const uint32_t *p, size_t n, unsigned long long *acc)
{
    unsigned long long s = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        s += p[i];
    if (s)
        atomicAdd(acc, s);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

enum { DEPTH = 24 };

typedef struct slot {
    void *p;
    int stream;
    int async;
} slot;

int main(int argc, char **argv)
{
    int iters = argc > 1 ? atoi(argv[1]) : 20000;
    uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 10) : 12345;
    const char *mode = argc > 3 ? argv[3] : "churn";
    int kernels = strcmp(mode, "alloc") != 0, allocs = strcmp(mode, "gpu") != 0;
    if (kernels && allocs && strcmp(mode, "churn") != 0) {
        printf("{\"error\":\"unknown mode %s (churn, gpu or alloc)\"}\n", mode);
        return 2;
    }
    uint64_t s = seed | 1;
    cudaStream_t st[2];
    unsigned long long *acc[2];
    CK(cudaSetDevice(0));
    CK(cudaFree(0));
    CK(cudaStreamCreate(&st[0]));
    CK(cudaStreamCreate(&st[1]));
    CK(cudaMalloc(&acc[0], 8));
    CK(cudaMalloc(&acc[1], 8));
    CK(cudaMemset(acc[0], 0, 8));
    CK(cudaMemset(acc[1], 0, 8));
    size_t free0, total, free_b;
    CK(cudaMemGetInfo(&free0, &total));
    size_t peak_used = 0, bytes = 0;
    slot ring[DEPTH] = {};
    void *fixed[DEPTH] = {};
    cudaEvent_t done[DEPTH] = {}; /* gpu: a slot's last kernels, before its reuse */
    if (!allocs) /* the largest size the generator draws: 2^27 - 1 bytes, rounded */
        for (int k = 0; k < DEPTH; k++) {
            CK(cudaMalloc(&fixed[k], (size_t)1 << 27));
            CK(cudaEventCreateWithFlags(&done[k], cudaEventDisableTiming));
        }
    double alloc_s = 0, t0 = now();
    for (int i = 0; i < iters + DEPTH; i++) {
        slot *r = &ring[i % DEPTH];
        if (r->p && allocs) { /* gpu mode frees nothing: its buffers stay */
            double a = now();
            if (r->async)
                CK(cudaFreeAsync(r->p, st[r->stream]));
            else
                CK(cudaFree(r->p));
            alloc_s += now() - a;
            r->p = NULL;
        }
        if (i >= iters)
            continue;
        // log-uniform 256 B .. 64 MiB, in 4-byte words
        int shift = 8 + (int)(rng(&s) % 19);
        size_t n = ((size_t)1 << shift) + (rng(&s) % ((size_t)1 << shift));
        n = (n + 3) / 4 * 4;
        r->stream = (int)(rng(&s) & 1);
        r->async = (rng(&s) % 4) == 0;
        double a = now();
        if (!allocs) { /* the slot's buffer may still be read on the other stream */
            r->p = fixed[i % DEPTH];
            if (i >= DEPTH)
                CK(cudaStreamWaitEvent(st[r->stream], done[i % DEPTH], 0));
        } else if (r->async)
            CK(cudaMallocAsync(&r->p, n, st[r->stream]));
        else
            CK(cudaMalloc(&r->p, n));
        alloc_s += now() - a;
        bytes += n;
        size_t words = n / 4;
        int blocks = (int)((words + 255) / 256 < 1024 ? (words + 255) / 256 : 1024);
        if (kernels) {
            fill<<<blocks, 256, 0, st[r->stream]>>>((uint32_t *)r->p, words, (uint32_t)i);
            sum<<<blocks, 256, 0, st[r->stream]>>>((const uint32_t *)r->p, words,
                                                   acc[r->stream]);
            CK(cudaGetLastError());
            if (!allocs)
                CK(cudaEventRecord(done[i % DEPTH], st[r->stream]));
        }
        if (i % 32 == 0) {
            CK(cudaMemGetInfo(&free_b, &total));
            size_t used = free0 > free_b ? free0 - free_b : 0;
            if (used > peak_used)
                peak_used = used;
        }
    }
    CK(cudaDeviceSynchronize());
    double wall = now() - t0;
    for (int k = 0; k < DEPTH; k++)
        if (fixed[k]) {
            CK(cudaFree(fixed[k]));
            CK(cudaEventDestroy(done[k]));
        }
    unsigned long long h[2];
    CK(cudaMemcpy(&h[0], acc[0], 8, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(&h[1], acc[1], 8, cudaMemcpyDeviceToHost));
    printf("{\"workload\":\"cuda_churn\",\"mode\":\"%s\",\"iters\":%d,\"seed\":%llu,"
           "\"checksum\":\"%016llx%016llx\","
           "\"wall_s\":%.4f,\"alloc_free_s\":%.4f,\"bytes_allocated\":%zu,"
           "\"peak_used_bytes\":%zu,\"peak_source\":\"cudaMemGetInfo sampled every 32 "
           "iterations, minus the use at start\"}\n",
           mode, iters, (unsigned long long)seed, h[0], h[1], wall, alloc_s, bytes, peak_used);
    return 0;
}
