/* bench_util.c: timing, device memory readings, streams, medians and the
 * JSON-lines output of the GPU benchmark. */
#include <cuda_runtime_api.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

double bench_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

size_t bench_dev_free(void)
{
    size_t fr = 0, total = 0;

    if (cudaMemGetInfo(&fr, &total) != cudaSuccess)
        return 0;
    return fr;
}

int bench_sync(void)
{
    return cudaDeviceSynchronize() == cudaSuccess ? 0 : -1;
}

bench_stream bench_stream_new(void)
{
    cudaStream_t s = NULL;

    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
        return NULL;
    return (bench_stream)s;
}

void bench_stream_free(const bench_alloc *a, bench_stream s)
{
    if (s != NULL && a && a->stream_retire)
        a->stream_retire(s);
    if (s != NULL)
        (void)cudaStreamDestroy((cudaStream_t)s);
}

int bench_stream_sync(bench_stream s)
{
    return cudaStreamSynchronize((cudaStream_t)s) == cudaSuccess ? 0 : -1;
}

const char *bench_cuda_error(void)
{
    return cudaGetErrorString(cudaGetLastError());
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

double bench_median(double *v, size_t n)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void bench_emit(const bench_alloc *a, const char *test, const char *fmt, ...)
{
    va_list ap;

    printf("{\"alloc\":\"%s\",\"test\":\"%s\",", a->name, test);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("}\n");
    fflush(stdout);
}

void bench_log(const char *fmt, ...)
{
    va_list ap;

    fputs("bench: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

void bench_env(void)
{
    struct cudaDeviceProp p;
    int drv = 0, rt = 0;
    size_t fr = 0, total = 0;

    memset(&p, 0, sizeof p);
    (void)cudaGetDeviceProperties(&p, 0);
    (void)cudaDriverGetVersion(&drv);
    (void)cudaRuntimeGetVersion(&rt);
    (void)cudaMemGetInfo(&fr, &total);
    printf("{\"alloc\":\"-\",\"test\":\"env\",\"gpu\":\"%s\",\"cc\":\"%d.%d\","
           "\"sms\":%d,\"driver_api\":%d,\"runtime\":%d,\"total_bytes\":%zu,"
           "\"free_bytes\":%zu}\n", p.name, p.major, p.minor, p.multiProcessorCount, drv, rt,
           total, fr);
    fflush(stdout);
}

const char *bench_drv_delta(const bench_alloc *a, uint64_t *since, char *buf, size_t len)
{
    uint64_t now[BENCH_MAX_OPS];
    const char *name[BENCH_MAX_OPS];
    size_t n = a->drv_calls ? a->drv_calls(now, name, BENCH_MAX_OPS) : 0, used = 0;

    buf[0] = '\0';
    for (size_t i = 0; i < n && used < len; i++) {
        int w = snprintf(buf + used, len - used, ",\"drv_%s\":%llu", name[i],
                         (unsigned long long)(now[i] - since[i]));
        used += w > 0 ? (size_t)w : 0;
        since[i] = now[i];
    }
    return buf;
}
