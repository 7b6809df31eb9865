/* foreign.c: entry points for frameworks other than PyTorch (issue 17).
 * CuPy's CFunctionAllocator takes two C functions,
 *   void *malloc(void *param, size_t size, int device)
 *   void free(void *param, void *ptr, int device),
 * served here by the process-wide allocator of the device (xseg_default),
 * as the PyTorch hooks of plugin.c are; param is the stream the memory is
 * used on (NULL: the legacy default stream, CuPy's default).  They cannot
 * return a status: they clear xseg_last_error() on entry, and a failure
 * returns NULL / does nothing and leaves the message there.
 * xseg_default_owner answers, without creating anything and without taking
 * a lock, which process-wide allocator's reserved range holds a pointer: the
 * preload library (tools/preload) asks it to tell xseg's pointers from the
 * ones it must pass through to the CUDA runtime or driver. */
#include "internal.h"

void *xseg_cupy_malloc(void *param, size_t size, int device)
{
    xseg_clear_error();
    if (size == 0)
        return NULL;
    xseg_t *xs = NULL;
    if (xseg_default(device, &xs) != XSEG_OK)
        return NULL;
    void *p = NULL;
    return xseg_alloc(xs, size, param, &p) == XSEG_OK ? p : NULL;
}

void xseg_cupy_free(void *param, void *ptr, int device)
{
    (void)param; /* xseg remembers the stream of each block */
    xseg_clear_error();
    if (!ptr)
        return;
    xseg_t *xs = xproc_default_owning(device, ptr);
    if (xs)
        xseg_free(xs, ptr);
    else
        xseg_fail(NULL, XSEG_ERR_INVALID_POINTER,
                  "xseg_cupy_free: %p (device %d) was not allocated by xseg", ptr, device);
}

xseg_status xseg_default_owner(const void *ptr, xseg_t **out, int *device)
{
    if (!out)
        return xseg_fail(NULL, XSEG_ERR_INVALID_ARG, "xseg_default_owner: out is NULL");
    *out = ptr ? xproc_default_owning(-1, ptr) : NULL;
    if (!*out)
        return xseg_fail(NULL, XSEG_ERR_INVALID_POINTER,
                         "xseg_default_owner: %p lies in no process-wide allocator's range",
                         ptr);
    if (device)
        *device = xproc_default_device(*out);
    return XSEG_OK;
}
