/* plugin.c: the PyTorch CUDAPluggableAllocator entry points (xseg_torch_*,
 * docs/pytorch.md).  Each device is served by its process-wide allocator
 * (xseg_default).  While a CUDA graph is captured on a device, its
 * allocations go instead to a private allocator for the graph's memory pool
 * (PyTorch's private pools): a graph replays into the addresses it was
 * captured with, so that memory is never unmapped nor handed to anyone else
 * while the graph lives; the pool is destroyed at the first empty_cache
 * (xseg_torch_reset) after its last graph is released and its last block
 * freed.  The hooks that return nothing clear xseg_last_error() on entry:
 * empty after the call means success.  Devices are looked up in the one
 * device registry (process.c): nothing here keeps allocator pointers of its
 * own but the pools.  Nothing here is destroyed at exit: the default
 * allocators live until the process ends (process.c) and so do the pools,
 * so an exit handler or a C++ static destructor that frees a tensor late
 * finds valid allocators.  The pool lock (xproc_pool_lock) lives in
 * process.c, which holds it across fork(). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver_cuda.h"
#include "internal.h"

#define CU_CAPTURE_MODE_RELAXED 2

/* The graph-pool hooks (set_begin_allocate_to_pool, set_end_allocate_to_pool_fn,
 * set_release_pool) and xseg_torch_pool_id are declared in xseg.h. */

typedef struct tpool {
    struct tpool *next;
    xseg_torch_pool_id id;
    int device;
    unsigned refs;  /* captures begun into it and not yet released */
    xseg_t *xs;     /* NULL: creation failed, allocations fail */
    char why[256];  /* why creation failed */
} tpool;

static _Atomic(tpool *) g_capture[XSEG_MAX_DEVICES];
static tpool *g_pools;
static atomic_int g_npools;

/* ---- the CUDA driver, for what the driver table lacks: the thread's
 * stream-capture mode and a device-wide synchronisation ---- */

typedef int (*cu_fn_dev_get)(int *dev, int ordinal);
typedef int (*cu_fn_retain)(void **ctx, int dev);
typedef int (*cu_fn_release)(int dev);
typedef int (*cu_fn_push)(void *ctx);
typedef int (*cu_fn_pop)(void **ctx);
typedef int (*cu_fn_sync)(void);
typedef int (*cu_fn_mode)(int *mode);

static struct {
    cu_fn_dev_get dev_get;
    cu_fn_retain retain;
    cu_fn_release release;
    cu_fn_push push;
    cu_fn_pop pop;
    cu_fn_sync sync;
    cu_fn_mode exchange_mode;
} g_cu;
static pthread_once_t g_cu_once = PTHREAD_ONCE_INIT;

static void cu_sym(const char *name, void *slot)
{
    void *p = xseg_cuda_sym(name);
    memcpy(slot, &p, sizeof p);
}

/* The entry points the CUDA backend loaded (one symbol list, cuda_syms.h,
 * at the ABI versions it names); only used when a pool's allocator is on
 * the CUDA backend, so libcuda is loaded already. */
static void cu_load(void)
{
    cu_sym("cuDeviceGet", &g_cu.dev_get);
    cu_sym("cuDevicePrimaryCtxRetain", &g_cu.retain);
    cu_sym("cuDevicePrimaryCtxRelease", &g_cu.release);
    cu_sym("cuCtxPushCurrent", &g_cu.push);
    cu_sym("cuCtxPopCurrent", &g_cu.pop);
    cu_sym("cuCtxSynchronize", &g_cu.sync);
    cu_sym("cuThreadExchangeStreamCaptureMode", &g_cu.exchange_mode);
}

static int is_cuda(const xseg_t *xs)
{
    return strcmp(xseg_backend_name(xs), "cuda") == 0;
}

/* Switch this thread to relaxed capture mode (mapping is not allowed in
 * global mode); returns the previous mode, -1 when nothing was changed. */
static int relax_capture(const xseg_t *xs)
{
    if (!is_cuda(xs))
        return -1;
    pthread_once(&g_cu_once, cu_load);
    int mode = CU_CAPTURE_MODE_RELAXED;
    if (!g_cu.exchange_mode || g_cu.exchange_mode(&mode) != 0)
        return -1;
    return mode;
}

static void restore_capture(int mode)
{
    if (mode >= 0)
        g_cu.exchange_mode(&mode);
}

/* Wait for all work on the device (replays of released graphs run on
 * streams the pool never saw). */
static void device_sync(int ordinal)
{
    pthread_once(&g_cu_once, cu_load);
    int dev = 0;
    void *ctx = NULL, *old = NULL;
    if (!g_cu.dev_get || !g_cu.retain || !g_cu.release || !g_cu.push || !g_cu.pop ||
        !g_cu.sync || g_cu.dev_get(&dev, ordinal) != 0 || g_cu.retain(&ctx, dev) != 0)
        return;
    if (g_cu.push(ctx) == 0) {
        g_cu.sync();
        g_cu.pop(&old);
    }
    g_cu.release(dev);
}

/* ---- devices ---- */

static int check_device(int device, const char *what)
{
    if (device >= 0 && device < XSEG_MAX_DEVICES)
        return 1;
    xseg_fail(NULL, XSEG_ERR_NO_DEVICE, "%s: device %d out of range 0..%d", what, device,
              XSEG_MAX_DEVICES - 1);
    return 0;
}

/* The default allocator of a device, created on first use. */
static xseg_t *device_xs(int device, const char *what)
{
    xseg_t *xs = NULL;
    if (!check_device(device, what) || xseg_default(device, &xs) != XSEG_OK)
        return NULL;
    return xs;
}

static int owns(const xseg_t *xs, const void *ptr)
{
    uintptr_t a = (uintptr_t)ptr;
    return xs && a >= xs->arena.base && a - xs->arena.base < xs->arena.size;
}

/* ---- the pool lock (process.c), also held across fork() ---- */

static void pool_lock(void)
{
    xproc_pool_lock();
}

static void pool_unlock(void)
{
    xproc_pool_unlock();
}

/* ---- graph pools (g_pool_lock held) ---- */

static int same_id(xseg_torch_pool_id a, xseg_torch_pool_id b)
{
    return a.first == b.first && a.second == b.second;
}

static tpool *pool_find(int device, xseg_torch_pool_id id)
{
    for (tpool *p = g_pools; p; p = p->next)
        if (p->device == device && same_id(p->id, id))
            return p;
    return NULL;
}

static tpool *pool_holding(const void *ptr)
{
    for (tpool *p = g_pools; p; p = p->next)
        if (owns(p->xs, ptr))
            return p;
    return NULL;
}

/* A pool's allocator never gives memory back while its graphs live: no cap,
 * no release, no retry ladder (it reclaims), one-page handles (a partly
 * used large handle would be split, unmapping free space). */
static char *pool_conf(void)
{
    static const char fmt[] = "%s,max_mapped:none,memory_fraction:0,gc_threshold:0,"
                              "release_threshold:unlimited,alloc_retries:1,caching:on,"
                              "stats_shm:off,handle_size:page";
    const char *env = getenv("XSEG_CONF");
    env = env ? env : "";
    size_t len = strlen(env) + sizeof fmt;
    char *text = malloc(len);
    if (text)
        snprintf(text, len, fmt, env);
    return text;
}

static tpool *pool_new(int device, xseg_torch_pool_id id)
{
    tpool *p = calloc(1, sizeof *p);
    if (!p) {
        xseg_fail(NULL, XSEG_ERR_OOM, "xseg_torch_begin_pool: no host memory");
        return NULL;
    }
    char *conf = pool_conf();
    if (!conf)
        snprintf(p->why, sizeof p->why, "no host memory");
    else if (xseg_create(&p->xs, device, conf) != XSEG_OK)
        snprintf(p->why, sizeof p->why, "%s", xseg_last_error());
    else /* its graphs replay into its cached blocks too: they sleep with it */
        p->xs->sleep_whole = 1;
    free(conf); /* without an allocator the pool's allocations fail: safer than
                 * memory that eager code reuses after the capture */
    p->id = id;
    p->device = device;
    p->next = g_pools;
    g_pools = p;
    atomic_fetch_add(&g_npools, 1);
    return p;
}

static int pool_idle(tpool *p)
{
    if (p->refs || atomic_load(&g_capture[p->device]) == p)
        return 0;
    xseg_stats st = {.size = sizeof st};
    return !p->xs || (xseg_get_stats(p->xs, &st) == XSEG_OK && st.active_blocks.current == 0);
}

/* Destroy the pools of `device` (-1: all) that no graph uses and that hold
 * no live block, after the GPU is done with them.  Returns how many. */
static int pools_collect(int device)
{
    tpool *dead = NULL;
    pool_lock();
    for (tpool **pp = &g_pools; *pp;) {
        tpool *p = *pp;
        if ((device < 0 || p->device == device) && pool_idle(p)) {
            *pp = p->next;
            p->next = dead;
            dead = p;
            atomic_fetch_sub(&g_npools, 1);
        } else {
            pp = &p->next;
        }
    }
    pool_unlock();
    int n = 0;
    for (tpool *p = dead; p; n++) {
        tpool *next = p->next;
        if (p->xs && is_cuda(p->xs))
            device_sync(p->device);
        if (p->xs)
            xseg_destroy(p->xs);
        free(p);
        p = next;
    }
    return n;
}

/* ---- allocation ---- */

static void *alloc_from(xseg_t *xs, size_t size, void *stream)
{
    void *p = NULL;
    xseg_status st = xseg_alloc(xs, size, stream, &p);
    return st == XSEG_OK ? p : NULL;
}

/* Allocation while a capture into a pool is under way on the device. */
static void *pool_alloc(int device, size_t size, void *stream, int *routed)
{
    void *ptr = NULL;
    pool_lock();
    tpool *p = atomic_load(&g_capture[device]);
    *routed = p != NULL;
    if (p && !p->xs) {
        xseg_fail(NULL, XSEG_ERR_NO_BACKEND,
                  "xseg_torch_alloc: the allocator of the CUDA graph pool (%llu,%llu) on "
                  "device %d could not be created: %s", (unsigned long long)p->id.first,
                  (unsigned long long)p->id.second, device, p->why);
    } else if (p) {
        int mode = relax_capture(p->xs);
        /* the pool's own allocator, whatever the thread's tag (tags.c) */
        if (xapi_alloc(p->xs, size, stream, &ptr) != XSEG_OK)
            ptr = NULL;
        restore_capture(mode);
    }
    pool_unlock();
    return ptr;
}

void *xseg_torch_alloc(size_t size, int device, void *stream)
{
    if (size == 0) {
        xseg_clear_error();
        return NULL;
    }
    xseg_t *xs = device_xs(device, "xseg_torch_alloc");
    if (!xs)
        return NULL;
    if (atomic_load_explicit(&g_capture[device], memory_order_acquire)) {
        int routed = 0;
        void *p = pool_alloc(device, size, stream, &routed);
        if (routed)
            return p;
    }
    void *p = alloc_from(xs, size, stream);
    if (!p && atomic_load(&g_npools) && pools_collect(device) > 0)
        p = alloc_from(xs, size, stream); /* memory of released graphs came back */
    return p;
}

/* ---- free and record_stream ---- */

static int pool_free(void *ptr)
{
    pool_lock();
    tpool *p = pool_holding(ptr);
    if (p)
        xseg_free(p->xs, ptr);
    pool_unlock();
    return p != NULL;
}

static void not_ours(const char *what, const void *ptr, int device)
{
    xseg_fail(NULL, XSEG_ERR_INVALID_POINTER, "%s: %p (device %d) was not allocated by xseg",
              what, ptr, device);
}

void xseg_torch_free(void *ptr, size_t size, int device, void *stream)
{
    (void)size;
    (void)stream; /* xseg remembers the stream of each block */
    xseg_clear_error();
    if (!ptr)
        return;
    xseg_t *xs = xproc_default_owning(device, ptr);
    if (xs)
        xseg_free(xs, ptr);
    else if (!atomic_load(&g_npools) || !pool_free(ptr))
        not_ours("xseg_torch_free", ptr, device);
}

static int pool_record(void *ptr, void *stream)
{
    pool_lock();
    tpool *p = pool_holding(ptr);
    if (p)
        xseg_record_stream(p->xs, ptr, stream);
    pool_unlock();
    return p != NULL;
}

void xseg_torch_record_stream(void *ptr, void *stream)
{
    xseg_clear_error();
    if (!ptr) {
        xseg_fail(NULL, XSEG_ERR_INVALID_ARG, "xseg_torch_record_stream: pointer is NULL");
        return;
    }
    xseg_t *xs = xproc_default_owning(-1, ptr);
    if (xs)
        xseg_record_stream(xs, ptr, stream);
    else if (!atomic_load(&g_npools) || !pool_record(ptr, stream))
        not_ours("xseg_torch_record_stream", ptr, -1);
}

/* ---- init, empty_cache, memory fraction ---- */

void xseg_torch_init(int device_count)
{
    xseg_clear_error();
    if (device_count < 0 || device_count > XSEG_MAX_DEVICES) {
        xseg_fail(NULL, XSEG_ERR_NO_DEVICE,
                  "xseg_torch_init: %d devices; xseg serves at most %d", device_count,
                  XSEG_MAX_DEVICES);
        return;
    }
    /* nothing else to do: allocators come at first use */
}

void xseg_torch_reset(void)
{
    xseg_clear_error();
    for (int d = 0; d < XSEG_MAX_DEVICES; d++) {
        xseg_t *xs = xproc_default_peek(d);
        if (xs)
            xseg_trim(xs, 0, NULL);
    }
    if (atomic_load(&g_npools))
        pools_collect(-1);
}

/* The cap in force: fraction x device memory, within max_mapped. */
static void set_fraction(xseg_t *xs, double fraction)
{
    xlock_lock(&xs->lock);
    size_t cap = xs->conf.max_mapped ? xs->conf.max_mapped : SIZE_MAX;
    size_t by_fraction = (size_t)(fraction * (double)xs->dev_total);
    if (fraction > 0 && by_fraction < cap)
        cap = by_fraction ? by_fraction : 1; /* a cap, never 0 (= none in the stats) */
    xs->conf.memory_fraction = fraction;
    xs->cap = cap;
    atomic_store(&xs->fam_cap, cap); /* its tags' memory counts too */
    xlock_unlock(&xs->lock);
}

void xseg_torch_memory_fraction(double fraction, int device)
{
    xseg_clear_error();
    if (!(fraction >= 0.0 && fraction <= 1.0)) {
        xseg_fail(NULL, XSEG_ERR_INVALID_ARG,
                  "xseg_torch_memory_fraction: fraction %g is not in [0, 1]", fraction);
        return;
    }
    xseg_t *xs = device_xs(device, "xseg_torch_memory_fraction");
    if (xs)
        set_fraction(xs, fraction);
}

/* ---- CUDA graph pools ---- */

void xseg_torch_begin_pool(int device, xseg_torch_pool_id id, void *filter)
{
    (void)filter;
    xseg_clear_error();
    if (!check_device(device, "xseg_torch_begin_pool"))
        return;
    pool_lock();
    tpool *p = pool_find(device, id);
    if (!p)
        p = pool_new(device, id);
    if (p) {
        p->refs++;
        atomic_store_explicit(&g_capture[device], p, memory_order_release);
    }
    pool_unlock();
}

void xseg_torch_end_pool(int device, xseg_torch_pool_id id)
{
    xseg_clear_error();
    if (!check_device(device, "xseg_torch_end_pool"))
        return;
    pool_lock();
    tpool *p = atomic_load(&g_capture[device]);
    if (p && same_id(p->id, id))
        atomic_store_explicit(&g_capture[device], NULL, memory_order_release);
    pool_unlock();
}

static void pool_add_info(tpool *p, xseg_torch_pools_info *out)
{
    out->pools++;
    if (p->refs || atomic_load(&g_capture[p->device]) == p)
        out->in_use++;
    xseg_stats st = {.size = sizeof st};
    if (!p->xs) {
        out->failed++;
    } else if (xseg_get_stats(p->xs, &st) == XSEG_OK) {
        out->mapped_bytes += st.mapped_bytes.current;
        out->live_blocks += st.active_blocks.current;
        out->live_bytes += st.requested_bytes.current;
    }
}

xseg_status xseg_torch_pools(int device, xseg_torch_pools_info *out)
{
    if (!out)
        return xseg_fail(NULL, XSEG_ERR_INVALID_ARG, "xseg_torch_pools: out is NULL");
    memset(out, 0, sizeof *out);
    if (device != -1 && !check_device(device, "xseg_torch_pools"))
        return XSEG_ERR_NO_DEVICE;
    pool_lock();
    for (tpool *p = g_pools; p; p = p->next)
        if (device < 0 || p->device == device)
            pool_add_info(p, out);
    pool_unlock();
    return XSEG_OK;
}

void xseg_torch_release_pool(int device, xseg_torch_pool_id id)
{
    xseg_clear_error();
    if (!check_device(device, "xseg_torch_release_pool"))
        return;
    pool_lock();
    tpool *p = pool_find(device, id);
    if (p && p->refs)
        p->refs--; /* destroyed at the next empty_cache once idle */
    pool_unlock();
}

/* ---- sleep and wake for PyTorch (docs/sleep.md) ---- */

#define GRAPHS_TAG "graphs"

/* The tag ids of `names` but "graphs" (*graphs set instead). */
static xseg_status tag_ids(const char *const *names, size_t n, int *ids, size_t *nids,
                           int *graphs, const char *what)
{
    *nids = 0;
    *graphs = 0;
    if (!names || n == 0 || n > XSEG_MAX_TAGS)
        return xseg_fail(NULL, XSEG_ERR_INVALID_ARG, "%s: %zu tags given (1 to %d, not NULL)",
                         what, names ? n : 0, XSEG_MAX_TAGS);
    for (size_t i = 0; i < n; i++) {
        if (!names[i])
            return xseg_fail(NULL, XSEG_ERR_INVALID_ARG, "%s: tag name %zu is NULL", what, i);
        if (strcmp(names[i], GRAPHS_TAG) == 0) {
            *graphs = 1;
            continue;
        }
        xseg_status st = xseg_tag_id(names[i], &ids[*nids]);
        if (st != XSEG_OK)
            return st;
        (*nids)++;
    }
    return XSEG_OK;
}

/* Sleep (asleep = 0) or wake (1) the pools of `device` that are in the
 * other state (a pool made since the last sleep is simply awake); all or
 * nothing.  The pool lock is held. */
static xseg_status pools_turn(int device, int asleep, xseg_sleep_mode mode, const char *what)
{
    xseg_status st = XSEG_OK;
    for (tpool *p = g_pools; p; p = p->next) {
        if (p->device != device || !p->xs || atomic_load(&p->xs->asleep) != asleep)
            continue;
        st = asleep ? xsleep_wake(p->xs) : xsleep_sleep(p->xs, mode);
        if (st != XSEG_OK) {
            char keep[512];
            snprintf(keep, sizeof keep, "%s", xseg_last_error());
            for (tpool *q = g_pools; q != p; q = q->next) /* undo the ones turned */
                if (q->device == device && q->xs && atomic_load(&q->xs->asleep) != asleep)
                    (void)(asleep ? xsleep_sleep(q->xs, (xseg_sleep_mode)q->xs->sleep_mode)
                                  : xsleep_wake(q->xs));
            return xseg_fail(NULL, st, "%s: the CUDA graph pool (%llu,%llu): %s", what,
                             (unsigned long long)p->id.first, (unsigned long long)p->id.second,
                             keep);
        }
    }
    return st;
}

static xseg_status torch_turn(int device, const char *const *tags, size_t ntags, int wake,
                              xseg_sleep_mode mode, const char *what)
{
    int ids[XSEG_MAX_TAGS], graphs = 0;
    size_t nids = 0;
    if (!check_device(device, what))
        return XSEG_ERR_NO_DEVICE;
    xseg_status st = tag_ids(tags, ntags, ids, &nids, &graphs, what);
    xseg_t *xs = st == XSEG_OK ? device_xs(device, what) : NULL;
    if (st != XSEG_OK || !xs)
        return st != XSEG_OK ? st : XSEG_ERR_NO_DEVICE;
    pool_lock();
    if (atomic_load(&g_capture[device])) {
        pool_unlock();
        return xseg_fail(NULL, XSEG_ERR_STATE,
                         "%s: a CUDA graph is being captured on device %d; end the capture "
                         "first", what, device);
    }
    if (graphs)
        st = pools_turn(device, wake, mode, what);
    if (st == XSEG_OK && nids) {
        st = wake ? xseg_wake(xs, ids, nids) : xseg_sleep(xs, ids, nids, mode);
        if (st != XSEG_OK && graphs) { /* all or nothing: the pools go back */
            char keep[768];
            snprintf(keep, sizeof keep, "%s", xseg_last_error());
            (void)pools_turn(device, !wake, mode, what);
            xseg_fail(NULL, st, "%s", keep);
        }
    }
    pool_unlock();
    return st;
}

xseg_status xseg_torch_sleep(int device, const char *const *tags, size_t ntags,
                             xseg_sleep_mode mode)
{
    if (mode != XSEG_SLEEP_DISCARD && mode != XSEG_SLEEP_BACKUP)
        return xseg_fail(NULL, XSEG_ERR_INVALID_ARG, "xseg_torch_sleep: mode %d is unknown",
                         (int)mode);
    return torch_turn(device, tags, ntags, 0, mode, "xseg_torch_sleep");
}

xseg_status xseg_torch_wake(int device, const char *const *tags, size_t ntags)
{
    return torch_turn(device, tags, ntags, 1, XSEG_SLEEP_DISCARD, "xseg_torch_wake");
}
