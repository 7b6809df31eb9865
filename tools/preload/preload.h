/* preload.h: shared declarations of libxseg_preload.so (docs/preload.md):
 * the table of the CUDA entry points it interposes or calls (resolve.c),
 * the routing to xseg's process-wide allocators (route.c) and the
 * interposed functions themselves (wrap.c: allocation; ptrquery.c: pointer
 * queries and IPC; resolve.c: lookups).  No CUDA header is needed: the few
 * types are spelled here with the ABI of CUDA 12 and 13. */
#ifndef XSEG_PRELOAD_H
#define XSEG_PRELOAD_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

typedef int pl_result;                  /* CUresult and cudaError_t alike */
typedef unsigned long long pl_devptr;   /* CUdeviceptr (v2) */
typedef void *pl_stream;                /* CUstream, cudaStream_t */

#define PL_SUCCESS 0
#define PL_ERR_INVALID_VALUE 1          /* cudaErrorInvalidValue, CUDA_ERROR_INVALID_VALUE */
#define PL_ERR_OUT_OF_MEMORY 2          /* cudaErrorMemoryAllocation, CUDA_ERROR_OUT_OF_MEMORY */
#define PL_ERR_NOT_INITIALIZED 3        /* cudaErrorInitializationError, ..._NOT_INITIALIZED */
#define PL_ERR_NOT_FOUND 500            /* CUDA_ERROR_NOT_FOUND */
#define PL_STREAM_LEGACY ((pl_stream)0x1)
#define PL_STREAM_PER_THREAD ((pl_stream)0x2)
#define PL_PROC_PER_THREAD 2            /* CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM */
#define PL_MAX_DEVICES 64

/* CUpointer_attribute values (cuda.h) that xseg answers for its memory */
#define PL_ATTR_MEMORY_TYPE 2           /* unsigned int: CU_MEMORYTYPE_* */
#define PL_ATTR_DEVICE_POINTER 3        /* CUdeviceptr */
#define PL_ATTR_IS_MANAGED 8            /* unsigned int (a boolean) */
#define PL_ATTR_DEVICE_ORDINAL 9        /* int */
#define PL_ATTR_IS_LEGACY_CUDA_IPC_CAPABLE 10 /* unsigned int (a boolean) */
#define PL_ATTR_RANGE_START_ADDR 11     /* CUdeviceptr */
#define PL_ATTR_RANGE_SIZE 12           /* size_t */
#define PL_ATTR_MAPPED 13               /* unsigned int (a boolean) */
#define PL_MEMORYTYPE_DEVICE 2          /* CU_MEMORYTYPE_DEVICE, cudaMemoryTypeDevice */
#define PL_MEMORYTYPE_UNREGISTERED 0    /* cudaMemoryTypeUnregistered */
#define PL_INVALID_DEVICE (-2)          /* cudaInvalidDeviceId */

/* struct cudaPointerAttributes: its four fields, the whole struct of CUDA
 * 11 and 12; CUDA 13 adds reserved words after them, never written here. */
typedef struct pl_ptr_attrs {
    int type;                           /* enum cudaMemoryType */
    int device;
    void *devicePointer;
    void *hostPointer;
} pl_ptr_attrs;

/* CUipcMemHandle, cudaIpcMemHandle_t */
typedef struct pl_ipc_handle {
    char reserved[64];
} pl_ipc_handle;

/* Every function of the table: interposed ones first. */
enum pl_slot {
    S_cudaMalloc, S_cudaFree, S_cudaMallocAsync, S_cudaMallocAsync_ptsz, S_cudaFreeAsync,
    S_cudaFreeAsync_ptsz, S_cudaMemGetInfo,
    S_cuMemAlloc_v2, S_cuMemFree_v2, S_cuMemAllocAsync, S_cuMemAllocAsync_ptsz,
    S_cuMemFreeAsync, S_cuMemFreeAsync_ptsz, S_cuMemGetInfo_v2, S_cuGetProcAddress,
    S_cuGetProcAddress_v2,
    S_cuMemGetAddressRange_v2, S_cuPointerGetAttribute, S_cuPointerGetAttributes,
    S_cuIpcGetMemHandle, S_cudaPointerGetAttributes, S_cudaIpcGetMemHandle,
    S_INTERPOSED, /* the ones below are only called */
    S_cudaGetDevice = S_INTERPOSED, S_cuCtxGetDevice, S_cuCtxSynchronize, S_cuDeviceGet,
    S_cuDevicePrimaryCtxRetain, S_cuDevicePrimaryCtxRelease_v2, S_cuCtxPushCurrent_v2,
    S_cuCtxPopCurrent_v2, S_cuCtxGetCurrent, S_cuThreadExchangeStreamCaptureMode,
    S_cuDevicePrimaryCtxGetState,
    S_COUNT
};

/* ---- resolve.c ---- */
/* The real function of a slot (the next definition after this library, or
 * the one found in libcuda / libcudart, or the one the application's own
 * dlsym / cuGetProcAddress was given); NULL when none can be found. */
void *pl_real(enum pl_slot slot);
/* Count a call the application made to interposed function `slot`
 * (calls made while pl_inside is set are this library's own and do not
 * count); pl_count_dlsym the same for dlsym (every call: this library
 * never calls the interposed dlsym).  pl_calls_json writes them as
 * {"cudaMalloc":N,...,"dlsym":N} (every interposed function, 0 included)
 * into buf (cap n). */
void pl_count(enum pl_slot slot);
void pl_count_dlsym(void);
void pl_calls_json(char *buf, size_t n);
/* Set while this thread runs xseg or a real CUDA function for this
 * library: interposed functions then pass straight through. */
extern _Thread_local int pl_inside;

/* Call the real function of `slot` with pl_inside set, and return its
 * result (PL_ERR_NOT_INITIALIZED when there is none). */
#define PASS(slot, type, ...)                       \
    do {                                            \
        void *p_ = pl_real(slot);                   \
        type fn_;                                   \
        if (!p_)                                    \
            return PL_ERR_NOT_INITIALIZED;          \
        memcpy(&fn_, &p_, sizeof p_);               \
        int old_ = pl_inside;                       \
        pl_inside = 1;                              \
        pl_result r_ = fn_(__VA_ARGS__);            \
        pl_inside = old_;                           \
        return r_;                                  \
    } while (0)

/* ---- route.c ---- */
enum { PL_SERVED, PL_PASS, PL_FAILED };
/* Allocate from the allocator of `device`: PL_SERVED (*out set), PL_PASS
 * (xseg does not serve this device: call the real function) or PL_FAILED
 * (out of memory: return the error). */
int pl_alloc(int device, size_t size, pl_stream stream, void **out);
/* Free ptr if xseg handed it out: PL_SERVED, PL_PASS (not xseg's: call the
 * real function) or PL_FAILED (inside xseg's range but not a live block).
 * async: the free is ordered on `stream` (cudaFreeAsync); otherwise it
 * goes into the device's quarantine (or, XSEG_PRELOAD_FREE=sync, the
 * device is synchronised first, as the real cudaFree / cuMemFree do). */
int pl_free(void *ptr, int async, pl_stream stream);
/* The live xseg block holding ptr (its start or any byte inside):
 * PL_SERVED with *base, *size (the block's rounded size) and *device;
 * PL_FAILED when ptr lies in xseg's range but in no live block (freed,
 * quarantined, free space); PL_PASS when it is not xseg's (or a fork
 * parent's): the real function answers. */
int pl_block(const void *ptr, void **base, size_t *size, int *device);
/* 1 when ptr lies in the range of one of this process's allocators (live
 * or not; a fork parent's do not count), with its *device. */
int pl_owned(const void *ptr, int *device);
/* A line on stderr with XSEG_PRELOAD_VERBOSE=1 (prefixed with the pid). */
void pl_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The file of an at-exit variable (XSEG_PRELOAD_STATS, ..._PEAK_SNAPSHOT)
 * opened for appending, "%p" in spec made the pid; NULL, said on stderr,
 * when it cannot be opened. */
FILE *pl_open_at_exit(const char *var, const char *spec);
/* Bring the real figures of cudaMemGetInfo to the cap of `device`'s
 * allocator, when one is set. */
void pl_meminfo(int device, size_t *free_bytes, size_t *total_bytes);
/* Wait for the work queued on device d (its current or primary context),
 * as cudaFree does, through the real cuCtxSynchronize. */
pl_result pl_sync_device(int d);
/* The same in context ctx (pushed for the call; NULL: as pl_sync_device).
 * Both return cuCtxSynchronize's result (PL_SUCCESS when none was made). */
pl_result pl_sync_ctx(int d, void *ctx);
/* This thread's stream capture mode becomes relaxed: its syncs neither
 * invalidate nor are refused by another thread's global-mode capture. */
void pl_capture_relaxed(void);
#define PL_CAPTURE_ERROR(r) ((r) >= 900 && (r) <= 908) /* CUDA_ERROR_STREAM_CAPTURE_* */
/* The calling thread's current device (the real cuCtxGetDevice), or -1. */
int pl_current_device(void);
/* The calling thread's current context when it is device d's, else NULL. */
void *pl_current_ctx(int d);
/* d's primary context, retained, when it is active (NULL: not active, or
 * no driver); released by pl_primary_release. */
void *pl_primary_retain(int d);
void pl_primary_release(int d);

/* ---- quarantine.c: frees released by one device sync per list ---- */
struct xseg;
enum { PL_Q_BOUND, PL_Q_GROWTH, PL_Q_OOM, PL_Q_EXIT, PL_Q_WHY_COUNT }; /* why a drain */
/* Read XSEG_PRELOAD_QUARANTINE (BOUND[,COUNT], BOUND bytes or a percentage
 * of the application's peak live bytes); a bad value writes why and keeps
 * the defaults.  0 when the bound is 0 (no quarantine). */
int pl_q_configure(const char *env, char *why, size_t why_len);
const char *pl_q_spec(void); /* the bound as given ("1%", "64m") */
/* Quarantine a live xseg block of `size` (rounded) bytes, the application's
 * live bytes on the device having peaked at live_peak: PL_SERVED, or
 * PL_FAILED when it is quarantined already (a double free). */
int pl_q_free(int d, struct xseg *xs, void *ptr, size_t size, size_t live_peak);
/* Around an allocation while blocks are quarantined: drain before it when
 * xseg's cached bytes cannot serve it (before returns the mapped bytes to
 * give to after, 0: nothing to check), and after it when xseg grew. */
size_t pl_q_before_alloc(int d, struct xseg *xs, size_t size);
void pl_q_after_alloc(int d, struct xseg *xs, size_t mapped_before);
/* Sync the device and give the list to xseg: the bytes released. */
size_t pl_q_drain(int d, struct xseg *xs, int why);
/* The same, then wait for the list the drain thread has in flight: the
 * bytes released (why PL_Q_EXIT: at most 2 s of waiting). */
size_t pl_q_reclaim(int d, struct xseg *xs, int why);
/* At exit: drain the current device's list (a sync of its current context;
 * never a context made for it).  xs: PL_MAX_DEVICES allocators. */
void pl_q_drain_at_exit(struct xseg *const *xs);
size_t pl_q_held(int d);                   /* bytes quarantined or in flight now */
/* 1 when the block at ptr is quarantined or in flight on device d (freed by
 * the program, not yet given back to xseg). */
int pl_q_holds(int d, const void *ptr);
void pl_q_fork_child(void);
int pl_q_json(int d, char *buf, size_t cap);          /* "key":value,... */

/* ---- peaksnap.c: the allocator at its mapped peak (a diagnostic) ---- */
/* XSEG_PRELOAD_PEAK_SNAPSHOT's value (NULL or empty: off); written at exit. */
void pl_peak_configure(const char *path);
/* After an allocation xseg served: a snapshot if the mapped bytes are at a
 * new high (app_live: the application's live bytes on the device now). */
void pl_peak_after_alloc(int d, struct xseg *xs, size_t app_live);

/* ---- the interposed functions (wrap.c, resolve.c), the only exports ---- */
#define PL_EXPORT __attribute__((visibility("default")))
PL_EXPORT pl_result cudaMalloc(void **ptr, size_t size);
PL_EXPORT pl_result cudaFree(void *ptr);
PL_EXPORT pl_result cudaMallocAsync(void **ptr, size_t size, pl_stream stream);
PL_EXPORT pl_result cudaMallocAsync_ptsz(void **ptr, size_t size, pl_stream stream);
PL_EXPORT pl_result cudaFreeAsync(void *ptr, pl_stream stream);
PL_EXPORT pl_result cudaFreeAsync_ptsz(void *ptr, pl_stream stream);
PL_EXPORT pl_result cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
PL_EXPORT pl_result cuMemAlloc_v2(pl_devptr *ptr, size_t size);
PL_EXPORT pl_result cuMemFree_v2(pl_devptr ptr);
PL_EXPORT pl_result cuMemAllocAsync(pl_devptr *ptr, size_t size, pl_stream stream);
PL_EXPORT pl_result cuMemAllocAsync_ptsz(pl_devptr *ptr, size_t size, pl_stream stream);
PL_EXPORT pl_result cuMemFreeAsync(pl_devptr ptr, pl_stream stream);
PL_EXPORT pl_result cuMemFreeAsync_ptsz(pl_devptr ptr, pl_stream stream);
PL_EXPORT pl_result cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes);
PL_EXPORT pl_result cuGetProcAddress(const char *symbol, void **pfn, int version, uint64_t flags);
PL_EXPORT pl_result cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                        uint64_t flags, int *status);
PL_EXPORT pl_result cuMemGetAddressRange_v2(pl_devptr *base, size_t *size, pl_devptr ptr);
PL_EXPORT pl_result cuPointerGetAttribute(void *data, int attribute, pl_devptr ptr);
PL_EXPORT pl_result cuPointerGetAttributes(unsigned n, int *attributes, void **data,
                                           pl_devptr ptr);
PL_EXPORT pl_result cuIpcGetMemHandle(pl_ipc_handle *handle, pl_devptr ptr);
PL_EXPORT pl_result cudaPointerGetAttributes(pl_ptr_attrs *attributes, const void *ptr);
PL_EXPORT pl_result cudaIpcGetMemHandle(pl_ipc_handle *handle, void *ptr);
/* dlsym is interposed too (resolve.c), with dlfcn.h's declaration. */

#endif /* XSEG_PRELOAD_H */
