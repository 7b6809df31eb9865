/* cuda_syms.h: the one list of the libcuda entry points xseg uses, each
 * with the ABI version of the signature xseg calls it by.  The CUDA backend
 * (driver_cuda.c) expands the list into its table of function pointers,
 * typed PFN_cu<name>_v<version> from cudaTypedefs.h, and loads every entry
 * through cuGetProcAddress; the rest of the library (plugin.c) asks for an
 * entry by name with xseg_cuda_sym (driver_cuda.h) instead of opening
 * libcuda a second time.  No CUDA header is needed to read the list.
 *
 * X(name, version): the symbol is "cu" #name; version is the ABI of the
 * signature (the suffix of its PFN typedef).  cuGetProcAddress is asked at
 * one ABI for all of them (XSEG_CU_ABI in driver_cuda.c), which must not
 * be lower than any version here, and selects for instance the
 * CUDA 12 cuCtxSynchronize(void), not CUDA 13's cuCtxSynchronize(ctx). */
#ifndef XSEG_CUDA_SYMS_H
#define XSEG_CUDA_SYMS_H

#define XSEG_CUDA_SYMS(X)                       \
    X(Init, 2000)                               \
    X(DeviceGetCount, 2000)                     \
    X(DeviceGet, 2000)                          \
    X(DeviceGetAttribute, 2000)                 \
    X(DevicePrimaryCtxRetain, 7000)             \
    X(DevicePrimaryCtxRelease, 11000)           \
    X(CtxGetCurrent, 4000)                      \
    X(CtxSetCurrent, 4000)                      \
    X(CtxPushCurrent, 4000)                     \
    X(CtxPopCurrent, 4000)                      \
    X(CtxSynchronize, 2000)                     \
    X(ThreadExchangeStreamCaptureMode, 10010)   \
    X(MemGetAllocationGranularity, 10020)       \
    X(MemGetInfo, 3020)                         \
    X(MemAddressReserve, 10020)                 \
    X(MemAddressFree, 10020)                    \
    X(MemCreate, 10020)                         \
    X(MemRelease, 10020)                        \
    X(MemMap, 10020)                            \
    X(MemUnmap, 10020)                          \
    X(MemSetAccess, 10020)                      \
    X(EventCreate, 2000)                        \
    X(EventRecord, 2000)                        \
    X(EventQuery, 2000)                         \
    X(EventSynchronize, 2000)                   \
    X(EventDestroy, 4000)                       \
    X(StreamSynchronize, 2000)                  \
    X(StreamCreate, 2000)                       \
    X(StreamDestroy, 4000)                      \
    X(MemHostAlloc, 2020)                       \
    X(MemFreeHost, 2000)                        \
    X(MemcpyDtoHAsync, 3020)                    \
    X(MemcpyHtoDAsync, 3020)                    \
    X(GetErrorName, 6000)                       \
    X(MemExportToShareableHandle, 10020)        \
    X(MemImportFromShareableHandle, 10020)      \
    X(DeviceCanAccessPeer, 4000)                \
    X(DeviceGetUuid, 9020)

#endif /* XSEG_CUDA_SYMS_H */
