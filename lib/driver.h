/* driver.h: the driver contract: the only way the allocator reaches memory.
 *
 * Two implementations: driver_cuda.c (CUDA driver API loaded at run time)
 * and driver_host.c (Linux virtual memory, memfd + mmap, simulated capacity).
 * Tests wrap a table to inject faults (tests/support_fault.c); the
 * allocator calls a table only through the driver layer (drv.h, drv.c),
 * which counts, times and, in XSEG_DEBUG builds, checks these
 * preconditions.
 *
 * Preconditions, stated once for every operation:
 *  - `ctx` is the value init() produced and fini() has not been called.
 *  - Sizes and addresses given to reserve/create/map/unmap/set_access are
 *    multiples of the granularity that granularity() reports.
 *  - map() maps a whole handle at offset 0 into reserved, currently unmapped
 *    space; unmap() covers exactly one or more whole earlier maps.
 *  - set_access() covers a fully mapped range; until it is called a fresh
 *    mapping is inaccessible (host: PROT_NONE).
 *  - release() may be called while the handle is still mapped is NOT used by
 *    xseg: it always unmaps first, then releases.  Free order: unmap,
 *    release, address_free.
 *  - Events: event_query returns XDRV_SUCCESS when complete, XDRV_NOT_READY
 *    while pending; event_sync waits.  An event may be recorded many times.
 *  - Every operation returns an XDRV_* code (CUresult values) and has no
 *    effect when it fails.  None may abort or print.
 *  - Calls on one ctx are serialised by the caller (the allocator's lock),
 *    except granularity() and mem_info(), which may be called at any time.
 *  - Copies (sleep and wake, docs/sleep.md): host_alloc gives pinned host
 *    memory (page-locked: the device copies to and from it at full speed);
 *    copy() queues an asynchronous copy between device memory mapped with
 *    access and such host memory, on one copy stream of the context, in
 *    order; copy_wait() returns once every copy queued has completed (or
 *    the first failure of any).  host: memcpy, done at once.  A table may
 *    leave these NULL: the layer answers XDRV_NOT_SUPPORTED.
 *  - Sharing (docs/sharing.md; a table may leave these NULL: the layer
 *    answers XDRV_NOT_SUPPORTED, share_types 0):
 *    share_types() says which XDRV_HT_* types create_as() accepts on this
 *    device.  create_as() is create() with those types requested (0: as
 *    create); a handle made so can be given to export_fd(), which returns
 *    a new descriptor the caller owns (close it; it keeps the memory alive
 *    while open, as the handle does).  import_fd() makes a handle of the
 *    `size` bytes behind a descriptor another process exported (the
 *    descriptor stays the caller's); it is mapped, given access and
 *    released as any handle, and its memory lives until the last handle
 *    or mapping of it, in any process, is gone.  set_peers() sets the
 *    devices that every later set_access() gives read-write access to, as
 *    well as the context's own (n = 0: its own only); it checks each can
 *    reach the context's device and changes nothing on failure.
 *    reg_granularity() is the recommended granularity of a handle that
 *    registration (NCCL, dmabuf) asks for; device_uuid() the device's
 *    identity across processes (16 bytes).  granularity, share_types,
 *    set_peers, reg_granularity and device_uuid are not counted.
 */
#ifndef XSEG_DRIVER_H
#define XSEG_DRIVER_H

#include <stddef.h>
#include <stdint.h>

/* CUresult-compatible codes (same numbers as cuda.h). */
enum {
    XDRV_SUCCESS = 0,
    XDRV_INVALID_VALUE = 1,
    XDRV_OUT_OF_MEMORY = 2,
    XDRV_NOT_INITIALIZED = 3,
    XDRV_NO_DEVICE = 100,
    XDRV_INVALID_DEVICE = 101,
    XDRV_INVALID_HANDLE = 400,
    XDRV_NOT_READY = 600,
    XDRV_ILLEGAL_ADDRESS = 700,
    XDRV_NOT_PERMITTED = 800,
    XDRV_NOT_SUPPORTED = 801,
    XDRV_UNKNOWN = 999
};

/* Capabilities (xseg_driver.caps): what a backend does beyond the
 * contract, asked for by bit instead of by the table's identity. */
enum {
    XDRV_CAP_EVENT_LAG = 1u << 0,           /* events can be made to lag (conf host_event_lag) */
    XDRV_CAP_SIMULATED_CAPACITY = 1u << 1,  /* init's capacity is simulated memory */
    XDRV_CAP_LATENCY_MODEL = 1u << 2        /* calls can be made to take modelled time
                                               (conf host_driver_latency) */
};

/* Shareable handle types (create_as, share_types): bits. */
enum {
    XDRV_HT_FD = 1u << 0,     /* CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR; host: memfd */
    XDRV_HT_FABRIC = 1u << 1  /* CU_MEM_HANDLE_TYPE_FABRIC */
};

/* Most peer devices set_peers takes. */
#define XDRV_MAX_PEERS 63

typedef struct xseg_driver {
    const char *name;
    /* Open `device`.  capacity: host backend's simulated memory (ignored
     * by cuda).  On failure writes a message into err. */
    int (*init)(void **ctx, int device, size_t capacity, char *err, size_t errlen);
    void (*fini)(void *ctx);
    int (*granularity)(void *ctx, size_t *bytes);
    int (*mem_info)(void *ctx, size_t *free_bytes, size_t *total_bytes);
    int (*reserve)(void *ctx, size_t size, uintptr_t *va);
    int (*address_free)(void *ctx, uintptr_t va, size_t size);
    int (*create)(void *ctx, size_t size, uint64_t *handle);
    int (*release)(void *ctx, uint64_t handle);
    int (*map)(void *ctx, uintptr_t va, size_t size, uint64_t handle);
    int (*unmap)(void *ctx, uintptr_t va, size_t size);
    int (*set_access)(void *ctx, uintptr_t va, size_t size);
    int (*event_create)(void *ctx, void **event);
    int (*event_record)(void *ctx, void *event, void *stream);
    int (*event_query)(void *ctx, void *event);
    int (*event_sync)(void *ctx, void *event);
    int (*event_destroy)(void *ctx, void *event);
    int (*stream_sync)(void *ctx, void *stream);
    int (*host_alloc)(void *ctx, size_t size, void **host);
    int (*host_free)(void *ctx, void *host);
    int (*copy)(void *ctx, void *dst, const void *src, size_t size, int to_device);
    int (*copy_wait)(void *ctx);
    /* Short name of a code, e.g. "CUDA_ERROR_OUT_OF_MEMORY". */
    const char *(*error_name)(int code);
    /* XDRV_CAP_* bits (last, so tables written before it read 0). */
    unsigned caps;
    /* Sharing (after caps: tables written before them read NULL). */
    unsigned (*share_types)(void *ctx);
    int (*create_as)(void *ctx, size_t size, unsigned types, uint64_t *handle);
    int (*export_fd)(void *ctx, uint64_t handle, int *fd);
    int (*import_fd)(void *ctx, int fd, size_t size, uint64_t *handle);
    int (*set_peers)(void *ctx, const int *devices, int n);
    int (*reg_granularity)(void *ctx, size_t *bytes);
    int (*device_uuid)(void *ctx, unsigned char uuid[16]);
} xseg_driver;

extern const xseg_driver xseg_driver_host;
/* NULL when the library was built without the CUDA toolkit. */
extern const xseg_driver *const xseg_driver_cuda_ptr;

/* True when libcuda.so.1 loads and reports at least one device. */
int xseg_cuda_available(void);

/* Name of an XDRV code independent of the backend. */
const char *xseg_drv_code_name(int code);

#endif /* XSEG_DRIVER_H */
