/* fakecuda.h: the stand-in CUDA runtime and driver of the preload tests
 * (fakecuda.c, fakecudart.c): their entry points with the real ABI (the
 * few types and values spelled as cuda.h / driver_types.h have them), and
 * the helpers the test application uses to look inside them. */
#ifndef XSEG_FAKECUDA_H
#define XSEG_FAKECUDA_H

#include <stddef.h>
#include <stdint.h>

typedef unsigned long long fake_devptr;
#define FAKE_INVALID_VALUE 1
#define FAKE_OUT_OF_MEMORY 2
#define FAKE_NOT_FOUND 500          /* CUDA_ERROR_NOT_FOUND */
#define FAKE_ORDINAL 5              /* the device ordinal of every stand-in allocation */
#define FAKE_BUFFER_ID 0x5eedull    /* its BUFFER_ID, for any pointer */

/* CUpointer_attribute values (cuda.h) */
enum { FA_MEMORY_TYPE = 2, FA_DEVICE_POINTER = 3, FA_BUFFER_ID = 7, FA_IS_MANAGED = 8,
       FA_DEVICE_ORDINAL = 9, FA_IPC_CAPABLE = 10, FA_RANGE_START_ADDR = 11,
       FA_RANGE_SIZE = 12, FA_MAPPED = 13 };

/* struct cudaPointerAttributes of CUDA 13 (CUDA 12's lacks `reserved`) */
typedef struct fake_ptr_attrs {
    int type;
    int device;
    void *devicePointer;
    void *hostPointer;
    long reserved[8];
} fake_ptr_attrs;

/* CUipcMemHandle, cudaIpcMemHandle_t */
typedef struct fake_ipc_handle {
    char reserved[64];
} fake_ipc_handle;

/* counters of libfakecuda.so, by name (fake_count) */
enum { FC_cuMemAlloc_v2, FC_cuMemAlloc, FC_cuMemFree_v2, FC_cuMemAllocAsync,
       FC_cuMemAllocAsync_ptsz, FC_cuMemFreeAsync, FC_cuMemFreeAsync_ptsz, FC_cuMemGetInfo_v2,
       FC_cuCtxSynchronize, FC_cuGetProcAddress, FC_ALLOC_DEV0, FC_ALLOC_DEV1,
       FC_cuMemGetAddressRange_v2, FC_cuPointerGetAttribute, FC_cuPointerGetAttributes,
       FC_cuIpcGetMemHandle, FC_COUNT };

/* libfakecuda.so */
long fake_count(const char *name);   /* -1: no such counter */
void fake_set_device(int device);    /* this thread's current device */
int fake_owns(const void *ptr);      /* a live allocation of the fake driver */
void *fake_direct_alloc(size_t size);/* one, without any counted call */
void *fake_v1_alloc_addr(void);      /* what cuGetProcAddress gives for cuMemAlloc < 3.2 */
void *fake_v1_range_addr(void);      /* and for cuMemGetAddressRange < 3.2 */
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
int cuMemGetAddressRange_v2(fake_devptr *base, size_t *size, fake_devptr p);
int cuPointerGetAttribute(void *data, int attr, fake_devptr p);
int cuPointerGetAttributes(unsigned n, int *attrs, void **data, fake_devptr p);
int cuIpcGetMemHandle(fake_ipc_handle *h, fake_devptr p);

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
int cudaPointerGetAttributes(fake_ptr_attrs *a, const void *ptr);
int cudaIpcGetMemHandle(fake_ipc_handle *h, void *ptr);
/* MEMORY_TYPE, DEVICE_ORDINAL, RANGE_START_ADDR, RANGE_SIZE through the
 * runtime's table (cuPointerGetAttributes), as a static runtime asks them */
int fakert_table_attrs(const void *ptr, unsigned *type, int *ordinal, fake_devptr *start,
                       size_t *size);

#endif /* XSEG_FAKECUDA_H */
