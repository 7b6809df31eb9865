/* drv.h: the driver layer: the one way the allocator calls its driver
 * table (driver.h).  Every call goes through an xdrv_* function here,
 * which
 *  - counts it (xs->drv_calls[op]; a failure other than XDRV_NOT_READY
 *    also bumps xs->drv_errors and sets xs->last_drv_rc),
 *  - times it: nanoseconds accumulated per operation and per side (the
 *    calling thread's role, xdrv_side_set: the caller of an entry point,
 *    or a worker thread),
 *  - checks the contract's preconditions when XSEG_DEBUG is defined
 *    (granularity multiples, map onto unmapped space, unmap / set_access
 *    over mapped space, address_free with nothing mapped: a shadow map of
 *    what the driver has mapped, kept by this layer, for the allocator's
 *    arena; ranges wholly outside it, such as share.c's dedicated and
 *    imported blocks, are not shadowed),
 *  - is the one place fault injection hooks (xdrv_set_fault_hook; tests
 *    may also wrap the table itself, tests/support_fault.c).
 * Locking: calls on one allocator are made under xs->lock, except those
 * of its reclaim worker (worker.c: unmap and release of handles already
 * taken out of the allocator's tables), which the backends serialise
 * themselves; the worker's counts stay its own until folded under the
 * lock.  xdrv_granularity, xdrv_error_name, xdrv_name and xdrv_caps need
 * no lock.  No other lib/ file dereferences xs->drv. */
#ifndef XSEG_DRV_H
#define XSEG_DRV_H

#include <stddef.h>
#include <stdint.h>

#include "driver.h"
#include "xseg.h"

/* ---- debug assertions (replaced by lib/debug.h when it exists) ---- */
#if defined(__has_include)
#if __has_include("debug.h")
#include "debug.h"
#endif
#endif
#ifndef XSEG_ASSERT
#ifdef XSEG_DEBUG
#include <stdio.h>
#include <stdlib.h>
#define XSEG_ASSERT(c)                                                              \
    do {                                                                            \
        if (!(c)) {                                                                 \
            fprintf(stderr, "xseg: assertion failed: %s (%s:%d)\n", #c, __FILE__, \
                    __LINE__);                                                      \
            abort();                                                                \
        }                                                                           \
    } while (0)
#else
#define XSEG_ASSERT(c) ((void)0)
#endif
#endif

/* Who is calling: the thread of an entry point, or a worker thread. */
typedef enum xdrv_side { XDRV_SIDE_CALLER = 0, XDRV_SIDE_WORKER = 1, XDRV_SIDES } xdrv_side;

/* Per-allocator bookkeeping of the layer (a field of xseg_t). */
typedef struct xdrv_book {
    uint64_t ns[XDRV_SIDES][XSEG_OP_COUNT]; /* time spent in each op */
    uint64_t calls_side[XDRV_SIDES];        /* calls made from each side */
    /* The worker thread's counts since the last fold: written by it alone,
     * without xs->lock, and added to the shared ones under the lock
     * (xdrv_fold_worker). */
    struct {
        uint64_t calls[XSEG_OP_COUNT], ns[XSEG_OP_COUNT], errors;
        int last_rc;
    } wk;
    void *shadow_mu;                        /* XSEG_DEBUG: guards shadow */
    size_t gran;                            /* granularity, once read */
    uintptr_t base;                         /* the reservation (debug checks) */
    size_t size;
    uint64_t *shadow;                       /* XSEG_DEBUG: pages the driver maps */
} xdrv_book;

/* ---- lifecycle ---- */
/* init writes xs->dctx; fini clears it and frees the layer's state. */
int xdrv_init(xseg_t *xs, int device, size_t capacity, char *err, size_t errlen);
void xdrv_fini(xseg_t *xs);

/* ---- the contract's operations, counted and timed ---- */
int xdrv_granularity(xseg_t *xs, size_t *bytes); /* not counted: no XSEG_OP */
int xdrv_mem_info(xseg_t *xs, size_t *free_bytes, size_t *total_bytes);
int xdrv_reserve(xseg_t *xs, size_t size, uintptr_t *va);
int xdrv_address_free(xseg_t *xs, uintptr_t va, size_t size);
int xdrv_create(xseg_t *xs, size_t size, uint64_t *handle);
int xdrv_release(xseg_t *xs, uint64_t handle);
int xdrv_map(xseg_t *xs, uintptr_t va, size_t size, uint64_t handle);
int xdrv_unmap(xseg_t *xs, uintptr_t va, size_t size);
int xdrv_set_access(xseg_t *xs, uintptr_t va, size_t size);
int xdrv_event_create(xseg_t *xs, void **event);
int xdrv_event_record(xseg_t *xs, void *event, void *stream);
int xdrv_event_query(xseg_t *xs, void *event);
int xdrv_event_sync(xseg_t *xs, void *event);
int xdrv_event_destroy(xseg_t *xs, void *event);
int xdrv_stream_sync(xseg_t *xs, void *stream);
int xdrv_host_alloc(xseg_t *xs, size_t size, void **host);
int xdrv_host_free(xseg_t *xs, void *host);
int xdrv_copy(xseg_t *xs, void *dst, const void *src, size_t size, int to_device);
int xdrv_copy_wait(xseg_t *xs);
/* Sharing (driver.h); a table without them: XDRV_NOT_SUPPORTED (share
 * types 0).  create_as counts as XSEG_OP_CREATE; export_fd and import_fd
 * as XSEG_OP_EXPORT and XSEG_OP_IMPORT; the others are not counted. */
unsigned xdrv_share_types(xseg_t *xs);
int xdrv_create_as(xseg_t *xs, size_t size, unsigned types, uint64_t *handle);
int xdrv_export_fd(xseg_t *xs, uint64_t handle, int *fd);
int xdrv_import_fd(xseg_t *xs, int fd, size_t size, uint64_t *handle);
int xdrv_set_peers(xseg_t *xs, const int *devices, int n);
int xdrv_reg_granularity(xseg_t *xs, size_t *bytes);
int xdrv_device_uuid(xseg_t *xs, unsigned char uuid[16]);
/* Use `from`'s open driver (a tag's allocator, tags.c): no init, and
 * xdrv_fini leaves the context open. */
void xdrv_share(xseg_t *xs, const xseg_t *from);

/* ---- names and capabilities ---- */
const char *xdrv_name(const xseg_t *xs);            /* "host", "cuda", ... */
const char *xdrv_error_name(const xseg_t *xs, int rc);
unsigned xdrv_caps(const xseg_t *xs);               /* XDRV_CAP_* bits */
static inline int xdrv_has(const xseg_t *xs, unsigned cap) { return (xdrv_caps(xs) & cap) != 0; }

/* ---- time and sides ---- */
/* The calling thread's side; returns the previous one. */
xdrv_side xdrv_side_set(xdrv_side side);
xdrv_side xdrv_side_get(void);
/* Add the worker thread's counts to the allocator's (xs->lock held, by
 * the worker thread itself). */
void xdrv_fold_worker(xseg_t *xs);
/* Nanoseconds spent in op from side (XSEG_OP_COUNT: all ops). */
uint64_t xdrv_ns(const xseg_t *xs, xdrv_side side, int op);

/* ---- fault injection ---- */
/* hook(user, op) runs before every counted call; a nonzero XDRV_* code
 * makes the call fail with it, counted, without reaching the driver.
 * Process-wide; NULL removes it. */
typedef int (*xdrv_fault_hook)(void *user, int op);
void xdrv_set_fault_hook(xdrv_fault_hook hook, void *user);

#endif /* XSEG_DRV_H */
