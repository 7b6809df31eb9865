/* fakecuda.h: the stand-in CUDA runtime and driver of the preload tests
 * (fakecuda.c, fakecudart.c): their entry points with the real ABI, and
 * the helpers the test application uses to look inside them. */
#ifndef XSEG_FAKECUDA_H
#define XSEG_FAKECUDA_H

#include <stddef.h>
#include <stdint.h>

typedef unsigned long long fake_devptr;
#define FAKE_INVALID_VALUE 1
#define FAKE_OUT_OF_MEMORY 2

/* counters of libfakecuda.so, by name (fake_count) */
enum { FC_cuMemAlloc_v2, FC_cuMemAlloc, FC_cuMemFree_v2, FC_cuMemAllocAsync,
       FC_cuMemAllocAsync_ptsz, FC_cuMemFreeAsync, FC_cuMemFreeAsync_ptsz, FC_cuMemGetInfo_v2,
       FC_cuCtxSynchronize, FC_cuGetProcAddress, FC_ALLOC_DEV0, FC_ALLOC_DEV1, FC_COUNT };

/* libfakecuda.so */
long fake_count(const char *name);   /* -1: no such counter */
void fake_set_device(int device);    /* this thread's current device */
int fake_owns(const void *ptr);      /* a live allocation of the fake driver */
void *fake_direct_alloc(size_t size);/* one, without any counted call */
void *fake_v1_alloc_addr(void);      /* what cuGetProcAddress gives for cuMemAlloc < 3.2 */
int cuMemAlloc_v2(fake_devptr *d, size_t n);
int cuMemAlloc(unsigned *d, unsigned n);
int cuMemFree_v2(fake_devptr p);
int cuMemAllocAsync(fake_devptr *d, size_t n, void *s);
int cuMemAllocAsync_ptsz(fake_devptr *d, size_t n, void *s);
int cuMemFreeAsync(fake_devptr p, void *s);
int cuMemFreeAsync_ptsz(fake_devptr p, void *s);
int cuMemGetInfo_v2(size_t *f, size_t *t);
int cuCtxGetDevice(int *d);
int cuCtxSynchronize(void);
int cuDeviceGet(int *dev, int ordinal);
int cuDevicePrimaryCtxRetain(void **ctx, int dev);
int cuDevicePrimaryCtxGetState(int dev, unsigned *flags, int *active);
int cuDevicePrimaryCtxRelease_v2(int dev);
int cuCtxPushCurrent_v2(void *ctx);
int cuCtxPopCurrent_v2(void **ctx);
int cuCtxGetCurrent(void **ctx);
int cuThreadExchangeStreamCaptureMode(int *mode);
int cuGetProcAddress_v2(const char *sym, void **pfn, int version, uint64_t flags, int *status);
int cuGetProcAddress(const char *sym, void **pfn, int version, uint64_t flags);

/* libfakecudart.so */
long fakert_count(const char *name);
int fakert_table_malloc(void **ptr, size_t size); /* the driver table, as a static runtime */
int fakert_table_free(void *ptr);
int cudaMalloc(void **ptr, size_t size);
int cudaFree(void *ptr);
int cudaMallocAsync(void **ptr, size_t size, void *stream);
int cudaFreeAsync(void *ptr, void *stream);
int cudaMemGetInfo(size_t *f, size_t *t);
int cudaGetDevice(int *device);
int cudaSetDevice(int device);

#endif /* XSEG_FAKECUDA_H */
