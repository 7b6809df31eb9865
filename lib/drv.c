/* drv.c: the driver layer (drv.h): every call of the driver table goes
 * through here, counted, timed per side, checked against the contract's
 * preconditions in XSEG_DEBUG builds, and open to one fault hook.
 * Called with xs->lock held, as the driver contract requires. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bitmap.h"
#include "drv.h"
#include "internal.h"

static _Thread_local xdrv_side t_side = XDRV_SIDE_CALLER;

static struct {
    _Atomic(xdrv_fault_hook) hook;
    void *_Atomic user;
} g_fault;

xdrv_side xdrv_side_set(xdrv_side side)
{
    xdrv_side old = t_side;
    t_side = side;
    return old;
}

xdrv_side xdrv_side_get(void) { return t_side; }

void xdrv_set_fault_hook(xdrv_fault_hook hook, void *user)
{
    atomic_store(&g_fault.user, user);
    atomic_store(&g_fault.hook, hook);
}

/* ---- counting and timing ---- */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Time spent in op: the worker's own counter, or the shared one. */
static void add_ns(xseg_t *xs, xseg_op op, uint64_t ns)
{
    if (t_side == XDRV_SIDE_WORKER)
        xs->drvb.wk.ns[op] += ns;
    else
        xs->drvb.ns[t_side][op] += ns;
}

/* Count a finished call of op (XDRV_NOT_READY is an answer, not a failure). */
static int count_call(xseg_t *xs, xseg_op op, int rc)
{
    if (t_side == XDRV_SIDE_WORKER) {
        xs->drvb.wk.calls[op]++;
        if (rc != XDRV_SUCCESS && rc != XDRV_NOT_READY) {
            xs->drvb.wk.errors++;
            xs->drvb.wk.last_rc = rc;
        }
        return rc;
    }
    xs->drv_calls[op]++;
    xs->drvb.calls_side[t_side]++;
    if (rc != XDRV_SUCCESS && rc != XDRV_NOT_READY) {
        xs->drv_errors++;
        xs->last_drv_rc = rc;
    }
    return rc;
}

/* An injected code for op, or XDRV_SUCCESS. */
static int fault_code(xseg_op op)
{
    xdrv_fault_hook hook = atomic_load_explicit(&g_fault.hook, memory_order_acquire);
    return hook ? hook(atomic_load(&g_fault.user), (int)op) : XDRV_SUCCESS;
}

/* Run `call` as operation op of xs: hook, time, count. */
#define XDRV_CALL(xs, op, call)                                     \
    do {                                                            \
        int rc_ = fault_code(op);                                   \
        if (rc_ == XDRV_SUCCESS) {                                  \
            uint64_t t0_ = now_ns();                                \
            rc_ = (call);                                           \
            add_ns((xs), (op), now_ns() - t0_);                     \
        }                                                           \
        return count_call((xs), (op), rc_);                     \
    } while (0)

/* ---- debug checks: a shadow of the driver's mapped pages ---- */

#ifdef XSEG_DEBUG
static int aligned(const xseg_t *xs, uintptr_t va, size_t size)
{
    size_t g = xs->drvb.gran;
    return g && size && size % g == 0 && va % g == 0;
}

/* [va, va + size) lies inside the reservation; its granule range. */
static int granules(const xseg_t *xs, uintptr_t va, size_t size, size_t *g0, size_t *g1)
{
    const xdrv_book *b = &xs->drvb;
    if (!b->shadow || va < b->base || size > b->size || va - b->base > b->size - size)
        return 0;
    *g0 = (va - b->base) / b->gran;
    *g1 = *g0 + size / b->gran;
    return 1;
}

/* The shadow is shared with the worker thread: its own mutex. */
static void shadow_lock(const xseg_t *xs, int take)
{
    pthread_mutex_t *m = xs->drvb.shadow_mu;
    if (m)
        (take ? pthread_mutex_lock : pthread_mutex_unlock)(m);
}

/* The range lies wholly outside the shadowed reservation (another one:
 * share.c's dedicated and imported blocks), so the shadow says nothing. */
static int unshadowed(const xseg_t *xs, uintptr_t va, size_t size)
{
    const xdrv_book *b = &xs->drvb;
    return b->shadow && size && (va + size <= b->base || va >= b->base + b->size);
}

/* Every granule of the range is mapped (want 1) or unmapped (want 0). */
static int shadow_all(const xseg_t *xs, uintptr_t va, size_t size, int want)
{
    size_t g0, g1;
    if (aligned(xs, va, size) && unshadowed(xs, va, size))
        return 1;
    if (!aligned(xs, va, size) || !granules(xs, va, size, &g0, &g1))
        return 0;
    shadow_lock(xs, 1);
    int ok = xbm_next(xs->drvb.shadow, g0, g1, !want) == g1;
    shadow_lock(xs, 0);
    return ok;
}

static void shadow_set(xseg_t *xs, uintptr_t va, size_t size, int v)
{
    size_t g0, g1;
    if (!granules(xs, va, size, &g0, &g1))
        return;
    shadow_lock(xs, 1);
    xbm_set(xs->drvb.shadow, g0, g1, v);
    shadow_lock(xs, 0);
}

static void shadow_open(xseg_t *xs, uintptr_t va, size_t size)
{
    xdrv_book *b = &xs->drvb;
    if (b->shadow || !b->gran)
        return; /* one reservation per allocator is shadowed */
    size_t n = size / b->gran;
    b->shadow = calloc((n + 63) / 64 + 1, sizeof(uint64_t));
    b->shadow_mu = malloc(sizeof(pthread_mutex_t));
    if (b->shadow_mu)
        pthread_mutex_init(b->shadow_mu, NULL);
    b->base = va;
    b->size = size;
}

static void shadow_close(xseg_t *xs)
{
    if (xs->drvb.shadow_mu) {
        pthread_mutex_destroy(xs->drvb.shadow_mu);
        free(xs->drvb.shadow_mu);
        xs->drvb.shadow_mu = NULL;
    }
    free(xs->drvb.shadow);
    xs->drvb.shadow = NULL;
    xs->drvb.base = 0;
    xs->drvb.size = 0;
}
#define CHECK(c) XSEG_ASSERT(c)
#else
#define CHECK(c) ((void)0)
#define shadow_set(xs, va, size, v) ((void)0)
#define shadow_open(xs, va, size) ((void)0)
#define shadow_close(xs) ((void)0)
#endif

/* ---- lifecycle ---- */

int xdrv_init(xseg_t *xs, int device, size_t capacity, char *err, size_t errlen)
{
    memset(&xs->drvb, 0, sizeof xs->drvb);
    return xs->drv->init(&xs->dctx, device, capacity, err, errlen);
}

void xdrv_fini(xseg_t *xs)
{
    CHECK(xs->drv_errors || !xs->drvb.shadow || xbm_next(xs->drvb.shadow, 0, xs->drvb.size / xs->drvb.gran, 1) ==
                                  xs->drvb.size / xs->drvb.gran);
    shadow_close(xs);
    if (!xs->drv_shared)
        xs->drv->fini(xs->dctx);
    xs->dctx = NULL;
}

/* ---- operations ---- */

int xdrv_granularity(xseg_t *xs, size_t *bytes)
{
    int rc = xs->drv->granularity(xs->dctx, bytes);
    if (rc == XDRV_SUCCESS)
        xs->drvb.gran = *bytes;
    return rc;
}

int xdrv_mem_info(xseg_t *xs, size_t *free_bytes, size_t *total_bytes)
{
    XDRV_CALL(xs, XSEG_OP_MEM_INFO, xs->drv->mem_info(xs->dctx, free_bytes, total_bytes));
}

int xdrv_reserve(xseg_t *xs, size_t size, uintptr_t *va)
{
    CHECK(xs->drvb.gran && size && size % xs->drvb.gran == 0);
    int rc = fault_code(XSEG_OP_RESERVE);
    if (rc == XDRV_SUCCESS) {
        uint64_t t0 = now_ns();
        rc = xs->drv->reserve(xs->dctx, size, va);
        add_ns(xs, XSEG_OP_RESERVE, now_ns() - t0);
        if (rc == XDRV_SUCCESS)
            shadow_open(xs, *va, size);
    }
    return count_call(xs, XSEG_OP_RESERVE, rc);
}

/* After a failed call the allocator tears down what it can, so the
 * nothing-left-mapped checks hold only while no call has failed. */
int xdrv_address_free(xseg_t *xs, uintptr_t va, size_t size)
{
    CHECK(xs->drv_errors || shadow_all(xs, va, size, 0));
    int rc = fault_code(XSEG_OP_ADDRESS_FREE);
    if (rc == XDRV_SUCCESS) {
        uint64_t t0 = now_ns();
        rc = xs->drv->address_free(xs->dctx, va, size);
        add_ns(xs, XSEG_OP_ADDRESS_FREE, now_ns() - t0);
#ifdef XSEG_DEBUG
        if (rc == XDRV_SUCCESS && va == xs->drvb.base)
            shadow_close(xs);
#endif
    }
    return count_call(xs, XSEG_OP_ADDRESS_FREE, rc);
}

int xdrv_create(xseg_t *xs, size_t size, uint64_t *handle)
{
    CHECK(xs->drvb.gran && size && size % xs->drvb.gran == 0);
    XDRV_CALL(xs, XSEG_OP_CREATE, xs->drv->create(xs->dctx, size, handle));
}

int xdrv_release(xseg_t *xs, uint64_t handle)
{
    XDRV_CALL(xs, XSEG_OP_RELEASE, xs->drv->release(xs->dctx, handle));
}

/* map, unmap and set_access: the call, then the shadow follows success. */
static int mapping_call(xseg_t *xs, xseg_op op, uintptr_t va, size_t size, uint64_t handle)
{
    int rc = fault_code(op);
    if (rc == XDRV_SUCCESS) {
        uint64_t t0 = now_ns();
        if (op == XSEG_OP_MAP)
            rc = xs->drv->map(xs->dctx, va, size, handle);
        else if (op == XSEG_OP_UNMAP)
            rc = xs->drv->unmap(xs->dctx, va, size);
        else
            rc = xs->drv->set_access(xs->dctx, va, size);
        add_ns(xs, op, now_ns() - t0);
        if (rc == XDRV_SUCCESS && op != XSEG_OP_SET_ACCESS)
            shadow_set(xs, va, size, op == XSEG_OP_MAP);
    }
    return count_call(xs, op, rc);
}

int xdrv_map(xseg_t *xs, uintptr_t va, size_t size, uint64_t handle)
{
    CHECK(shadow_all(xs, va, size, 0));
    return mapping_call(xs, XSEG_OP_MAP, va, size, handle);
}

int xdrv_unmap(xseg_t *xs, uintptr_t va, size_t size)
{
    CHECK(shadow_all(xs, va, size, 1));
    return mapping_call(xs, XSEG_OP_UNMAP, va, size, 0);
}

int xdrv_set_access(xseg_t *xs, uintptr_t va, size_t size)
{
    CHECK(shadow_all(xs, va, size, 1));
    return mapping_call(xs, XSEG_OP_SET_ACCESS, va, size, 0);
}

int xdrv_event_create(xseg_t *xs, void **event)
{
    XDRV_CALL(xs, XSEG_OP_EVENT_CREATE, xs->drv->event_create(xs->dctx, event));
}

int xdrv_event_record(xseg_t *xs, void *event, void *stream)
{
    CHECK(event != NULL);
    XDRV_CALL(xs, XSEG_OP_EVENT_RECORD, xs->drv->event_record(xs->dctx, event, stream));
}

int xdrv_event_query(xseg_t *xs, void *event)
{
    CHECK(event != NULL);
    XDRV_CALL(xs, XSEG_OP_EVENT_QUERY, xs->drv->event_query(xs->dctx, event));
}

int xdrv_event_sync(xseg_t *xs, void *event)
{
    CHECK(event != NULL);
    XDRV_CALL(xs, XSEG_OP_EVENT_SYNC, xs->drv->event_sync(xs->dctx, event));
}

int xdrv_event_destroy(xseg_t *xs, void *event)
{
    CHECK(event != NULL);
    XDRV_CALL(xs, XSEG_OP_EVENT_DESTROY, xs->drv->event_destroy(xs->dctx, event));
}

int xdrv_stream_sync(xseg_t *xs, void *stream)
{
    XDRV_CALL(xs, XSEG_OP_STREAM_SYNC, xs->drv->stream_sync(xs->dctx, stream));
}

/* ---- copies (sleep and wake); a table without them: not supported ---- */

int xdrv_host_alloc(xseg_t *xs, size_t size, void **host)
{
    XDRV_CALL(xs, XSEG_OP_HOST_ALLOC,
              xs->drv->host_alloc ? xs->drv->host_alloc(xs->dctx, size, host) : XDRV_NOT_SUPPORTED);
}

int xdrv_host_free(xseg_t *xs, void *host)
{
    XDRV_CALL(xs, XSEG_OP_HOST_FREE,
              xs->drv->host_free ? xs->drv->host_free(xs->dctx, host) : XDRV_NOT_SUPPORTED);
}

/* The device range must be mapped with access (checked on the shadow). */
int xdrv_copy(xseg_t *xs, void *dst, const void *src, size_t size, int to_device)
{
    xseg_op op = to_device ? XSEG_OP_COPY_TO_DEVICE : XSEG_OP_COPY_TO_HOST;
    XDRV_CALL(xs, op,
              xs->drv->copy ? xs->drv->copy(xs->dctx, dst, src, size, to_device)
                            : XDRV_NOT_SUPPORTED);
}

int xdrv_copy_wait(xseg_t *xs)
{
    XDRV_CALL(xs, XSEG_OP_COPY_WAIT,
              xs->drv->copy_wait ? xs->drv->copy_wait(xs->dctx) : XDRV_NOT_SUPPORTED);
}

/* ---- sharing ---- */

unsigned xdrv_share_types(xseg_t *xs)
{
    return xs->drv->share_types ? xs->drv->share_types(xs->dctx) : 0;
}

int xdrv_create_as(xseg_t *xs, size_t size, unsigned types, uint64_t *handle)
{
    CHECK(xs->drvb.gran && size && size % xs->drvb.gran == 0);
    if (!types)
        return xdrv_create(xs, size, handle);
    XDRV_CALL(xs, XSEG_OP_CREATE,
              xs->drv->create_as ? xs->drv->create_as(xs->dctx, size, types, handle)
                                 : XDRV_NOT_SUPPORTED);
}

int xdrv_export_fd(xseg_t *xs, uint64_t handle, int *fd)
{
    XDRV_CALL(xs, XSEG_OP_EXPORT,
              xs->drv->export_fd ? xs->drv->export_fd(xs->dctx, handle, fd) : XDRV_NOT_SUPPORTED);
}

int xdrv_import_fd(xseg_t *xs, int fd, size_t size, uint64_t *handle)
{
    XDRV_CALL(xs, XSEG_OP_IMPORT,
              xs->drv->import_fd ? xs->drv->import_fd(xs->dctx, fd, size, handle)
                                 : XDRV_NOT_SUPPORTED);
}

int xdrv_set_peers(xseg_t *xs, const int *devices, int n)
{
    return xs->drv->set_peers ? xs->drv->set_peers(xs->dctx, devices, n) : XDRV_NOT_SUPPORTED;
}

int xdrv_reg_granularity(xseg_t *xs, size_t *bytes)
{
    if (!xs->drv->reg_granularity)
        return xdrv_granularity(xs, bytes);
    return xs->drv->reg_granularity(xs->dctx, bytes);
}

int xdrv_device_uuid(xseg_t *xs, unsigned char uuid[16])
{
    return xs->drv->device_uuid ? xs->drv->device_uuid(xs->dctx, uuid) : XDRV_NOT_SUPPORTED;
}

/* A tag's allocator uses its parent's open driver: same table and context,
 * a book of its own; xdrv_fini of a shared context frees the book only. */
void xdrv_share(xseg_t *xs, const xseg_t *from)
{
    memset(&xs->drvb, 0, sizeof xs->drvb);
    xs->drv = from->drv;
    xs->dctx = from->dctx;
    xs->drv_shared = 1;
}

/* ---- names, capabilities, time ---- */

const char *xdrv_name(const xseg_t *xs) { return xs->drv->name; }

const char *xdrv_error_name(const xseg_t *xs, int rc) { return xs->drv->error_name(rc); }

unsigned xdrv_caps(const xseg_t *xs) { return xs->drv->caps; }

void xdrv_fold_worker(xseg_t *xs)
{
    for (int i = 0; i < XSEG_OP_COUNT; i++) {
        xs->drv_calls[i] += xs->drvb.wk.calls[i];
        xs->drvb.calls_side[XDRV_SIDE_WORKER] += xs->drvb.wk.calls[i];
        xs->drvb.ns[XDRV_SIDE_WORKER][i] += xs->drvb.wk.ns[i];
    }
    xs->drv_errors += xs->drvb.wk.errors;
    if (xs->drvb.wk.errors)
        xs->last_drv_rc = xs->drvb.wk.last_rc;
    memset(&xs->drvb.wk, 0, sizeof xs->drvb.wk);
}

uint64_t xdrv_ns(const xseg_t *xs, xdrv_side side, int op)
{
    if ((unsigned)side >= XDRV_SIDES)
        return 0;
    if (op >= 0 && op < XSEG_OP_COUNT)
        return xs->drvb.ns[side][op];
    uint64_t sum = 0;
    for (int i = 0; i < XSEG_OP_COUNT; i++)
        sum += xs->drvb.ns[side][i];
    return sum;
}
