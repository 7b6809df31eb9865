/* ptrquery.c: the interposed pointer queries and IPC-handle calls of the
 * CUDA driver and runtime (docs/preload.md, "Pointer queries").  For a
 * pointer inside a live xseg block (its start or any byte inside) they
 * answer from the block, found by xseg_block_range (route.c's pl_block):
 *  - cuMemGetAddressRange_v2: the block's start and rounded size, every
 *    byte of which is the allocation's own and mapped;
 *  - cuPointerGetAttribute(s): the range (RANGE_START_ADDR, RANGE_SIZE, the
 *    same as cuMemGetAddressRange), MEMORY_TYPE device, DEVICE_POINTER the
 *    pointer, DEVICE_ORDINAL xseg's device, IS_MANAGED 0, MAPPED 1 and
 *    IS_LEGACY_CUDA_IPC_CAPABLE 0; every other attribute goes to the real
 *    function (xseg's memory is real VMM memory: the driver knows it);
 *  - cudaPointerGetAttributes: device memory of xseg's device.
 * A pointer in xseg's range that no live block holds (freed, quarantined,
 * never handed out) gets what CUDA gives for memory it does not know:
 * CUDA_ERROR_NOT_FOUND from cuMemGetAddressRange, CUDA_ERROR_INVALID_VALUE
 * from cuPointerGetAttribute, NULL defaults from cuPointerGetAttributes,
 * and unregistered memory from cudaPointerGetAttributes.
 * cuIpcGetMemHandle / cudaIpcGetMemHandle refuse any pointer in xseg's
 * range with CUDA_ERROR_INVALID_VALUE / cudaErrorInvalidValue (legacy IPC
 * cannot export VMM memory, and xseg reuses a freed block's pages), said
 * with XSEG_PRELOAD_VERBOSE=1.  Anything else passes through, as do the
 * calls made while this library is inside a real function (pl_inside). */
#include <string.h>

#include "preload.h"

typedef pl_result (*fn_range)(pl_devptr *, size_t *, pl_devptr);
typedef pl_result (*fn_attr)(void *, int, pl_devptr);
typedef pl_result (*fn_attrs)(unsigned, int *, void **, pl_devptr);
typedef pl_result (*fn_rt_attrs)(pl_ptr_attrs *, const void *);
typedef pl_result (*fn_ipc)(pl_ipc_handle *, pl_devptr);
typedef pl_result (*fn_rt_ipc)(pl_ipc_handle *, void *);

typedef struct blk {
    void *base;
    size_t size;
    int device;
} blk;

/* PL_SERVED (b filled), PL_FAILED (xseg's range, no live block), PL_PASS. */
static int lookup(pl_devptr ptr, blk *b)
{
    *b = (blk){NULL, 0, PL_INVALID_DEVICE};
    if (pl_inside || !ptr)
        return PL_PASS;
    return pl_block((const void *)(uintptr_t)ptr, &b->base, &b->size, &b->device);
}

/* ---- attributes ---- */

static void put_u32(void *data, unsigned v)
{
    memcpy(data, &v, sizeof v);
}

static void put_ptr(void *data, pl_devptr v)
{
    memcpy(data, &v, sizeof v);
}

/* Write xseg's value of `attr` into data: 1, or 0 when xseg does not
 * answer it (the real function does).  live 0: the NULL defaults of a
 * pointer that is no allocation. */
static int answer(int attr, const blk *b, pl_devptr ptr, int live, void *data)
{
    int ordinal = live ? b->device : PL_INVALID_DEVICE;
    size_t size = live ? b->size : 0;
    switch (attr) {
    case PL_ATTR_MEMORY_TYPE:
        put_u32(data, live ? PL_MEMORYTYPE_DEVICE : 0);
        return 1;
    case PL_ATTR_DEVICE_POINTER:
        put_ptr(data, live ? ptr : 0);
        return 1;
    case PL_ATTR_IS_MANAGED:
    case PL_ATTR_IS_LEGACY_CUDA_IPC_CAPABLE:
        put_u32(data, 0);
        return 1;
    case PL_ATTR_DEVICE_ORDINAL:
        memcpy(data, &ordinal, sizeof ordinal);
        return 1;
    case PL_ATTR_RANGE_START_ADDR:
        put_ptr(data, live ? (pl_devptr)(uintptr_t)b->base : 0);
        return 1;
    case PL_ATTR_RANGE_SIZE:
        memcpy(data, &size, sizeof size);
        return 1;
    case PL_ATTR_MAPPED:
        put_u32(data, live ? 1 : 0);
        return 1;
    default:
        return 0;
    }
}

pl_result cuPointerGetAttribute(void *data, int attribute, pl_devptr ptr)
{
    pl_count(S_cuPointerGetAttribute);
    blk b;
    int r = data ? lookup(ptr, &b) : PL_PASS;
    if (r == PL_FAILED)
        return PL_ERR_INVALID_VALUE;
    if (r == PL_SERVED && answer(attribute, &b, ptr, 1, data))
        return PL_SUCCESS;
    PASS(S_cuPointerGetAttribute, fn_attr, data, attribute, ptr);
}

static pl_result real_attrs(unsigned n, int *attributes, void **data, pl_devptr ptr)
{
    PASS(S_cuPointerGetAttributes, fn_attrs, n, attributes, data, ptr);
}

/* The real function fills every attribute, then xseg's own overwrite it. */
pl_result cuPointerGetAttributes(unsigned n, int *attributes, void **data, pl_devptr ptr)
{
    pl_count(S_cuPointerGetAttributes);
    blk b;
    int r = attributes && data ? lookup(ptr, &b) : PL_PASS;
    pl_result rc = real_attrs(n, attributes, data, ptr);
    if (r == PL_PASS || rc != PL_SUCCESS)
        return rc;
    for (unsigned i = 0; i < n; i++)
        if (data[i])
            (void)answer(attributes[i], &b, ptr, r == PL_SERVED, data[i]);
    return PL_SUCCESS;
}

pl_result cudaPointerGetAttributes(pl_ptr_attrs *attributes, const void *ptr)
{
    pl_count(S_cudaPointerGetAttributes);
    blk b;
    int r = attributes ? lookup((pl_devptr)(uintptr_t)ptr, &b) : PL_PASS;
    if (r == PL_PASS)
        PASS(S_cudaPointerGetAttributes, fn_rt_attrs, attributes, ptr);
    int live = r == PL_SERVED;
    attributes->type = live ? PL_MEMORYTYPE_DEVICE : PL_MEMORYTYPE_UNREGISTERED;
    attributes->device = live ? b.device : PL_INVALID_DEVICE;
    attributes->devicePointer = live ? (void *)(uintptr_t)ptr : NULL;
    attributes->hostPointer = live ? NULL : (void *)(uintptr_t)ptr; /* CUDA: host memory */
    return PL_SUCCESS;
}

/* ---- address range ---- */

pl_result cuMemGetAddressRange_v2(pl_devptr *base, size_t *size, pl_devptr ptr)
{
    pl_count(S_cuMemGetAddressRange_v2);
    blk b;
    int r = lookup(ptr, &b);
    if (r == PL_FAILED)
        return PL_ERR_NOT_FOUND;
    if (r == PL_SERVED) {
        if (base)
            *base = (pl_devptr)(uintptr_t)b.base;
        if (size)
            *size = b.size;
        return PL_SUCCESS;
    }
    PASS(S_cuMemGetAddressRange_v2, fn_range, base, size, ptr);
}

/* ---- IPC handles ---- */

/* 1 when ptr is xseg's: the call is refused, and said why. */
static int refuse_ipc(const char *fn, const char *code, const void *ptr)
{
    int d = -1;
    if (pl_inside || !pl_owned(ptr, &d))
        return 0;
    pl_say("%s(%p) refused with %s: %p is xseg memory (device %d). CUDA IPC handles cannot be "
           "made for it: xseg maps VMM memory (cuMemCreate/cuMemMap), which legacy IPC does not "
           "export, and reuses a freed block's pages. Share it through xseg's export instead "
           "(xseg_export / xseg_import of a dedicated block: xseg_alloc_registrable, or "
           "registrable_min and shareable in XSEG_CONF; docs/sharing.md), or run this program "
           "without libxseg_preload.so", fn, ptr, code, ptr, d);
    return 1;
}

pl_result cuIpcGetMemHandle(pl_ipc_handle *handle, pl_devptr ptr)
{
    pl_count(S_cuIpcGetMemHandle);
    if (refuse_ipc("cuIpcGetMemHandle", "CUDA_ERROR_INVALID_VALUE", (void *)(uintptr_t)ptr))
        return PL_ERR_INVALID_VALUE;
    PASS(S_cuIpcGetMemHandle, fn_ipc, handle, ptr);
}

pl_result cudaIpcGetMemHandle(pl_ipc_handle *handle, void *ptr)
{
    pl_count(S_cudaIpcGetMemHandle);
    if (refuse_ipc("cudaIpcGetMemHandle", "cudaErrorInvalidValue", ptr))
        return PL_ERR_INVALID_VALUE;
    PASS(S_cudaIpcGetMemHandle, fn_rt_ipc, handle, ptr);
}
