/* api.c: the public entry points: argument checks, the per-allocator lock,
 * create/destroy, the retry ladder on out-of-memory, error classification
 * of bad frees, the process-wide default allocators (never destroyed, so
 * that exit handlers may still use them) and the locks held across fork(). */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver_host.h"
#include "internal.h"


#define XSEG_MAX_DEVICES 64
#define XSEG_DEFAULT_MAX_HANDLE ((size_t)1 << 30)

static atomic_uint g_fork_gen;
static atomic_ullong g_next_id;
static pthread_once_t g_fork_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_default_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- fork(): every process-wide lock is held across it ----
 * A child inherits each lock in the state the parent's threads left it, but
 * not those threads: a lock held at the fork would stay held forever in the
 * child.  So the library's process-wide locks are taken before fork() and
 * given back after it, in the parent and in the child, outermost first (the
 * order in which the library nests them, so that taking them cannot
 * deadlock against a thread that holds an outer one and waits for an inner
 * one):
 *   1. g_default_lock (here): xseg_default / xseg_set_default_conf; held
 *      across the creation of a default allocator, so around 3 and 5;
 *   2. the graph-pool lock (plugin.c, xplugin_fork_lock): held across a
 *      pool's create, alloc and free, so around 4 and 5;
 *   3. the stats_shm file lock (shm.c, xshm_fork_lock): taken by create and
 *      destroy;
 *   4. g_tc_lock (tcache.c): taken around an allocator lock; its own
 *      pthread_atfork handler;
 *   5. the host backend's counter lock g_lock (driver_host.c): a leaf; its
 *      own pthread_atfork handler.
 * pthread_atfork runs prepare handlers in the reverse order of their
 * registration (parent and child handlers in order), so fork_register makes
 * sure 5 is registered first, then 4, then this module's handler for 1-3.
 * Allocator locks (xs->lock) are not taken: an allocator created in the
 * parent fails with XSEG_ERR_FORKED in the child, and its destroy there does
 * not wait for its lock. */
static void fork_prepare(void)
{
    pthread_mutex_lock(&g_default_lock);
    xplugin_fork_lock(1);
    xshm_fork_lock(1);
}

static void fork_parent(void)
{
    xshm_fork_lock(0);
    xplugin_fork_lock(0);
    pthread_mutex_unlock(&g_default_lock);
}

static void fork_child(void)
{
    atomic_fetch_add(&g_fork_gen, 1);
    fork_parent();
}

static void fork_register(void)
{
    xhost_fork_init();
    xtc_fork_init();
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

void xseg_fork_init(void)
{
    pthread_once(&g_fork_once, fork_register);
}

const char *xseg_version(void)
{
    return XSEG_VERSION_STRING;
}

const char *xseg_backend_name(const xseg_t *xs)
{
    return xs ? xs->drv->name : "none";
}

static int forked(const xseg_t *xs)
{
    return xs->fork_gen != atomic_load_explicit(&g_fork_gen, memory_order_relaxed);
}

xseg_status xseg_check_fork(xseg_t *xs, const char *what)
{
    if (!forked(xs))
        return XSEG_OK;
    return xseg_fail(xs, XSEG_ERR_FORKED,
                     "%s: allocator of device %d used in a child after fork(); "
                     "create a new one in the child", what, xs->device);
}

#define CHECK_XS(xs)                                                                 \
    do {                                                                             \
        if (!(xs))                                                                   \
            return xseg_fail(NULL, XSEG_ERR_INVALID_ARG, "xseg: allocator is NULL"); \
        if (forked(xs))                                                              \
            return xseg_check_fork(xs, __func__);                                    \
    } while (0)

/* ---- create / destroy ---- */

static xseg_status pick_driver(xseg_t *xs, const xseg_driver *forced)
{
    xseg_backend_kind k = xs->conf.backend;
    if (forced) {
        xs->drv = forced;
        return XSEG_OK;
    }
    if (k == XSEG_BACKEND_AUTO)
        k = (xseg_driver_cuda_ptr && xseg_cuda_available()) ? XSEG_BACKEND_CUDA : XSEG_BACKEND_HOST;
    if (k == XSEG_BACKEND_HOST) {
        xs->drv = &xseg_driver_host;
        return XSEG_OK;
    }
    if (!xseg_driver_cuda_ptr)
        return xseg_fail(xs, XSEG_ERR_NO_BACKEND,
                         "xseg: backend:cuda requested but this build has no CUDA backend "
                         "(no cuda.h at build time); use backend:host or auto");
    if (!xseg_cuda_available())
        return xseg_fail(xs, XSEG_ERR_NO_BACKEND,
                         "xseg: backend:cuda requested but libcuda.so.1 did not load or "
                         "reports no device; use backend:host or auto");
    xs->drv = xseg_driver_cuda_ptr;
    return XSEG_OK;
}

static xseg_status open_driver(xseg_t *xs, int device)
{
    char err[256] = "";
    int rc = xs->drv->init(&xs->dctx, device, xs->conf.host_capacity, err, sizeof err);
    if (rc != XDRV_SUCCESS) {
        xs->dctx = NULL;
        int nodev = rc == XDRV_INVALID_DEVICE || rc == XDRV_NO_DEVICE;
        return xseg_fail(xs, nodev ? XSEG_ERR_NO_DEVICE : XSEG_ERR_DRIVER,
                         "xseg: opening device %d on the %s backend failed (%s): %s", device,
                         xs->drv->name, xs->drv->error_name(rc), err);
    }
    if (xs->conf.host_event_lag && xs->drv == &xseg_driver_host)
        xseg_host_set_event_lag(xs->dctx, xs->conf.host_event_lag);
    size_t fr = 0, total = 0;
    rc = xseg_drv_count(xs, XSEG_OP_MEM_INFO, xs->drv->mem_info(xs->dctx, &fr, &total));
    if (rc != XDRV_SUCCESS || total == 0)
        return xseg_fail(xs, XSEG_ERR_DRIVER, "xseg: reading device %d memory size failed (%s)",
                         device, xs->drv->error_name(rc));
    xs->dev_total = total;
    return XSEG_OK;
}

static xseg_status set_caps(xseg_t *xs)
{
    char err[512] = "";
    xs->max_handle = xs->conf.handle_size ? xs->conf.handle_size : XSEG_DEFAULT_MAX_HANDLE;
    if (xseg_conf_cap(&xs->conf, xs->dev_total, &xs->cap, err, sizeof err) != XSEG_OK)
        return xseg_fail(xs, XSEG_ERR_CONFIG, "%s", err); /* a cap of 0 would read as none */
    return XSEG_OK;
}

static xseg_status init_arena(xseg_t *xs)
{
    size_t va = xs->conf.va_size ? xs->conf.va_size
                                 : (xs->dev_total > SIZE_MAX / 4 ? SIZE_MAX / 4 : xs->dev_total) * 4;
    xseg_status st = xarena_init(xs, va);
    if (st != XSEG_OK)
        return st;
    xblock *b = xblock_new(xs);
    if (!b)
        return xseg_fail(xs, XSEG_ERR_OOM, "xseg: no host memory");
    b->addr = xs->arena.base;
    b->size = xs->arena.size;
    b->flags = XB_FREE;
    xfi_insert(&xs->neutral, b);
    xs->first_block = b;
    return XSEG_OK;
}

static xseg_status init_maps(xseg_t *xs)
{
    if (xseg_ptrmap_init(&xs->live, 1024) || xseg_ptrmap_init(&xs->streams, 16) ||
        xseg_ptrmap_init(&xs->uses, 16) || xsmall_init(xs))
        return xseg_fail(xs, XSEG_ERR_OOM, "xseg: no host memory for the allocator's tables");
    return XSEG_OK;
}

static uint64_t teardown(xseg_t *xs, int call_driver, const char **last);
static int default_device(const xseg_t *xs);

xseg_status xseg_create(xseg_t **out, int device, const char *conf)
{
    return xseg_create_with_driver(out, device, conf, NULL);
}

xseg_status xseg_create_with_driver(xseg_t **out, int device, const char *conf,
                                    const xseg_driver *drv)
{
    if (!out)
        return xseg_fail(NULL, XSEG_ERR_INVALID_ARG, "xseg_create: out is NULL");
    *out = NULL;
    xseg_fork_init();
    xseg_t *xs = calloc(1, sizeof *xs);
    if (!xs)
        return xseg_fail(NULL, XSEG_ERR_OOM, "xseg_create: no host memory");
    xs->device = device;
    xs->fork_gen = atomic_load(&g_fork_gen);
    xlock_init(&xs->lock);
    xseg_conf_defaults(&xs->conf);
    char err[512] = "";
    const char *text = conf ? conf : getenv("XSEG_CONF");
    xseg_status st = xseg_conf_parse(&xs->conf, text, err, sizeof err);
    if (st != XSEG_OK)
        xseg_fail(NULL, st, "%s%s", err, conf ? "" : " (from the XSEG_CONF environment variable)");
    if (st == XSEG_OK && device < 0)
        st = xseg_fail(xs, XSEG_ERR_NO_DEVICE, "xseg_create: device %d is negative", device);
    if (st == XSEG_OK)
        st = pick_driver(xs, drv);
    if (st == XSEG_OK)
        st = open_driver(xs, device);
    if (st == XSEG_OK)
        st = set_caps(xs);
    if (st == XSEG_OK)
        st = init_maps(xs);
    if (st == XSEG_OK)
        st = init_arena(xs);
    if (st == XSEG_OK)
        st = xseg_monitor_init(xs);
    xs->id = atomic_fetch_add(&g_next_id, 1) + 1;
    /* Thread caches bypass history and live publication: off with those. */
    xs->tc_on = xs->conf.thread_cache && xs->conf.caching && !xs->conf.history &&
                !xs->conf.stats_shm && xs->conf.release_threshold != XSEG_RELEASE_NOW;
    if (st != XSEG_OK) {
        char keep[768];
        snprintf(keep, sizeof keep, "%s", xseg_last_error());
        teardown(xs, 1, NULL);
        xseg_fail(NULL, st, "%s", keep);
        return st;
    }
    xseg_clear_error();
    *out = xs;
    return XSEG_OK;
}

static void free_uses(uintptr_t k, uintptr_t v, void *arg)
{
    (void)k;
    (void)arg;
    free((void *)v);
}

/* Frees everything; returns how many driver calls failed on the way. */
static uint64_t teardown(xseg_t *xs, int call_driver, const char **last)
{
    uint64_t errors0 = xs->drv_errors;
    xseg_monitor_fini(xs);
    xstreams_fini(xs, call_driver && xs->dctx);
    if (xs->class_of)
        xsmall_fini(xs);
    xblk_moved_fini(xs, call_driver && xs->dctx);
    for (xblock *b = xs->first_block; b;) {
        xblock *n = b->anext;
        free(b);
        b = n;
    }
    for (xblock *b = xs->spare_blocks; b;) {
        xblock *n = b->fnext;
        free(b);
        b = n;
    }
    if (xs->dctx)
        xarena_fini(xs, call_driver);
    if (xs->uses.keys)
        xseg_ptrmap_each(&xs->uses, free_uses, NULL);
    xseg_ptrmap_fini(&xs->uses);
    xseg_ptrmap_fini(&xs->live);
    xseg_ptrmap_fini(&xs->streams);
    uint64_t failed = xs->drv_errors - errors0;
    if (last)
        *last = failed ? xs->drv->error_name(xs->last_drv_rc) : "";
    if (xs->dctx && call_driver)
        xs->drv->fini(xs->dctx);
    free(xs);
    return failed;
}

xseg_status xseg_destroy(xseg_t *xs)
{
    if (!xs)
        return xseg_fail(NULL, XSEG_ERR_INVALID_ARG, "xseg_destroy: allocator is NULL");
    int def = default_device(xs);
    if (def >= 0)
        return xseg_fail(NULL, XSEG_ERR_INVALID_ARG,
                         "xseg_destroy: %p is the process-wide default allocator of device %d "
                         "(xseg_default), which lives until the process ends; destroy only "
                         "allocators made with xseg_create", (void *)xs, def);
    /* In a forked child the parent's memory must not be touched: free the
     * bookkeeping only, no driver call. */
    int child = forked(xs);
    if (!child) { /* a child must not wait: a parent's thread may have held it */
        xlock_lock(&xs->lock);
        xlock_unlock(&xs->lock);
    }
    if (!child)
        xtc_detach_all(xs);
    int device = xs->device;
    const char *last = "";
    uint64_t failed = teardown(xs, !child, &last);
    if (failed)
        return xseg_fail(NULL, XSEG_ERR_DRIVER,
                         "xseg_destroy: %llu driver calls failed (last: %s) while giving "
                         "device %d's memory back; the backend's own shutdown released what "
                         "was left", (unsigned long long)failed, last, device);
    return XSEG_OK;
}

/* ---- allocation ---- */

static size_t round_size(const xseg_t *xs, size_t size)
{
    size_t r = (size + XSEG_MIN_BLOCK - 1) & ~(size_t)(XSEG_MIN_BLOCK - 1);
    unsigned div = xs->conf.roundup_power2_divisions;
    if (div > 1 && r > xs->conf.small_size) {
        size_t p = (size_t)1 << (63 - __builtin_clzll((unsigned long long)r));
        size_t step = p / div;
        if (step >= XSEG_MIN_BLOCK)
            r = (r + step - 1) / step * step;
    }
    return r;
}

static xseg_status alloc_once(xseg_t *xs, xstream *s, size_t rounded, size_t size, void **out,
                              size_t *block, uintptr_t *tag)
{
    int cls = xsmall_class(xs, rounded);
    if (cls >= 0) {
        *block = xs->class_size[cls];
        xseg_status st = xsmall_alloc(xs, s, cls, size, out);
        if (st == XSEG_OK)
            xseg_ptrmap_get(&xs->live, (uintptr_t)*out, tag);
        return st;
    }
    xblock *b = NULL;
    xseg_status st = xblk_alloc(xs, s, rounded, size, &b);
    if (st != XSEG_OK)
        return st;
    if (xseg_ptrmap_put(&xs->live, b->addr, (uintptr_t)b) != 0) {
        xblk_free(xs, b);
        return xseg_fail(xs, XSEG_ERR_OOM, "xseg: no host memory to track an allocation");
    }
    b->requested = size;
    *block = b->size;
    *tag = (uintptr_t)b;
    *out = (void *)b->addr;
    return XSEG_OK;
}

/* Each further attempt reclaims more: first everything cached that the
 * GPU is done with (waiting on events), then every deferred free too. */
static void escalate(xseg_t *xs, unsigned attempt)
{
    xs->retries++;
    xtc_flush_all(xs);
    xpending_process(xs, attempt >= 2);
    xsmall_drop_empty(xs);
    xseg_reclaim(xs, SIZE_MAX, 1);
}

/* The config key or action that would help, by the limit that was hit: the
 * cap when the request, rounded as the allocator maps it (block rounding,
 * then whole pages), does not fit in what the cap leaves. */
static const char *oom_hint(const xseg_t *xs, size_t size)
{
    size_t page = xs->arena.page, r = round_size(xs, size);
    r = r > SIZE_MAX - page ? SIZE_MAX : (r + page - 1) / page * page;
    if (xs->cap != SIZE_MAX && (xs->mapped.cur >= xs->cap || r > xs->cap - xs->mapped.cur))
        return "raise max_mapped or memory_fraction (the cap is the limit: the request, "
               "rounded up to whole pages, does not fit under it), or free memory";
    return "free memory (the device is full): xseg_trim other allocators, or lower "
           "release_threshold / set gc_threshold in other processes using xseg";
}

static void oom_notify(xseg_t *xs, size_t size, const xseg_stats *st, size_t device_free)
{
    xseg_hist(xs, XEV_OOM, 0, size, NULL);
    if (!xs->oom_cb)
        return;
    xseg_oom_info info = {xs->device, size, xs->allocated.cur, xs->mapped.cur,
                          st->cached_bytes.current, xs->cap == SIZE_MAX ? 0 : xs->cap,
                          st->largest_free_block, device_free, oom_hint(xs, size),
                          xseg_last_error()};
    xs->oom_cb(&info, xs->oom_user);
}

static xseg_status oom_report(xseg_t *xs, size_t size)
{
    char r[32], a[32], m[32], c[32], cp[32], l[32], f[32];
    size_t fr = 0, total = 0;
    xseg_stats st = {.size = sizeof st};
    xseg_fill_stats(xs, &st);
    xs->drv->mem_info(xs->dctx, &fr, &total);
    xs->ooms++;
    xseg_fail(xs, XSEG_ERR_OOM,
              "xseg: out of memory on device %d: requested %s (%zu B); in use %s, "
              "mapped %s, cached %s, cap %s, largest free block %s, device free %s; hint: %s",
              xs->device, xseg_fmt_size(size, r, sizeof r), size,
              xseg_fmt_size(xs->allocated.cur, a, sizeof a),
              xseg_fmt_size(xs->mapped.cur, m, sizeof m),
              xseg_fmt_size(st.cached_bytes.current, c, sizeof c),
              xs->cap == SIZE_MAX ? "none" : xseg_fmt_size(xs->cap, cp, sizeof cp),
              xseg_fmt_size(st.largest_free_block, l, sizeof l), xseg_fmt_size(fr, f, sizeof f),
              oom_hint(xs, size));
    oom_notify(xs, size, &st, fr);
    return XSEG_ERR_OOM;
}

xseg_status xseg_set_oom_callback(xseg_t *xs, xseg_oom_callback cb, void *user)
{
    CHECK_XS(xs);
    xlock_lock(&xs->lock);
    xs->oom_cb = cb;
    xs->oom_user = user;
    xlock_unlock(&xs->lock);
    return XSEG_OK;
}

/* A call refused before the locked path still counts in alloc_calls /
 * free_calls: docs/stats.md counts every call, failed ones included. */
static xseg_status refused(xseg_t *xs, uint64_t *calls, xseg_status st)
{
    xlock_lock(&xs->lock);
    (*calls)++;
    xlock_unlock(&xs->lock);
    return st;
}

static void count_alloc(xseg_t *xs, size_t block, size_t size)
{
    xcnt_add(&xs->allocated, block);
    xcnt_add(&xs->requested, size);
    xcnt_add(&xs->active, 1);
}

/* A new allocation gets a fresh generation; the calling thread remembers it
 * so that its free can take the thread-cache path. */
static void stamp(xseg_t *xs, uintptr_t addr, uintptr_t tag, size_t block, size_t size,
                  void *stream)
{
    _Atomic uint64_t *genp = xseg_gen_of(addr, tag);
    xs->gen_next += 2;
    atomic_store_explicit(genp, xs->gen_next, memory_order_relaxed);
    if (xs->tc_on)
        xtc_note(xs, addr, tag, genp, xs->gen_next, block, size, stream);
}

xseg_status xseg_alloc(xseg_t *xs, size_t size, void *stream, void **out)
{
    CHECK_XS(xs);
    if (!out)
        return refused(xs, &xs->alloc_calls,
                       xseg_fail(xs, XSEG_ERR_INVALID_ARG, "xseg_alloc: out is NULL"));
    *out = NULL;
    if (size == 0)
        return refused(xs, &xs->alloc_calls,
                       xseg_fail(xs, XSEG_ERR_INVALID_ARG, "xseg_alloc: size is 0"));
    if (size > xs->arena.size - xs->arena.page)
        return refused(xs, &xs->alloc_calls,
                       xseg_fail(xs, XSEG_ERR_SIZE,
                                 "xseg_alloc: request of %zu bytes exceeds %zu bytes, the largest "
                                 "va_size allows (its virtual range of %zu bytes less one page "
                                 "of %zu); raise va_size", size,
                                 xs->arena.size - xs->arena.page, xs->arena.size,
                                 xs->arena.page));
    size_t rounded = round_size(xs, size), block = 0;
    int cls = xsmall_class(xs, rounded);
    if (cls >= 0)
        rounded = xs->class_size[cls];
    if (xs->tc_on) {
        if (xtc_alloc(xs, rounded, size, stream, out))
            return XSEG_OK;
        xtc_attach(xs);
    }
    uintptr_t tag = 0;
    xlock_lock(&xs->lock);
    xs->alloc_calls++;
    if (xs->tc_on)
        xtc_flush_own(xs); /* held blocks go back before anything is chosen */
    xstream *s = xstream_get(xs, stream);
    xseg_status st = XSEG_ERR_OOM;
    if (s) {
        if (xs->pend_head)
            xpending_process(xs, 0);
        for (unsigned attempt = 0;; attempt++) {
            st = alloc_once(xs, s, rounded, size, out, &block, &tag);
            if ((st != XSEG_ERR_OOM && st != XSEG_ERR_VA_EXHAUSTED) ||
                attempt + 1 >= xs->conf.alloc_retries)
                break;
            escalate(xs, attempt + 1);
        }
    }
    if (st == XSEG_OK) {
        count_alloc(xs, block, size);
        stamp(xs, (uintptr_t)*out, tag, block, size, stream);
        xseg_hist(xs, XEV_ALLOC, (uintptr_t)*out, size, stream);
        xseg_shm(xs);
    } else if (st == XSEG_ERR_OOM) {
        oom_report(xs, size);
    }
    xlock_unlock(&xs->lock);
    return st;
}

/* ---- free ---- */

static xblock *block_containing(const xseg_t *xs, uintptr_t p)
{
    for (xblock *b = xs->first_block; b; b = b->anext)
        if (p >= b->addr && p < b->addr + b->size)
            return b;
    return NULL;
}

/* Error path only (a linear walk is fine here): why is p not live? */
static xstream *owner_of(uintptr_t tag)
{
    return (tag & 1) ? ((xslab *)(tag & ~(uintptr_t)1))->owner : ((xblock *)tag)->owner;
}

static void sizes_of(uintptr_t addr, uintptr_t tag, size_t *block, size_t *req)
{
    *block = (tag & 1) ? ((const xslab *)(tag & ~(uintptr_t)1))->slot_size
                       : ((const xblock *)tag)->size;
    *req = xseg_requested_of(addr, tag);
}

/* The live-map value of addr, unless it is free or held in a thread cache. */
static int live_tag(xseg_t *xs, uintptr_t addr, uintptr_t *tag)
{
    if (!xseg_ptrmap_get(&xs->live, addr, tag))
        return 0;
    return !(atomic_load_explicit(xseg_gen_of(addr, *tag), memory_order_relaxed) & 1);
}

/* Start of the allocation (block or slot) that contains p, or 0 when p
 * lies in free space. */
static uintptr_t allocation_start(const xblock *b, uintptr_t p)
{
    if (!b || (b->flags & XB_FREE))
        return 0;
    if (!(b->flags & XB_SLAB))
        return b->addr;
    const xslab *sl = b->slab;
    uintptr_t slot = (p - b->addr) / sl->slot_size;
    return slot < sl->nslots ? b->addr + slot * sl->slot_size : 0;
}

/* Error path only (a linear walk is fine here): why is p not live?  Inside
 * a live allocation it is an interior pointer; anywhere else in the arena,
 * including blocks freed but still held (thread caches, deferred frees), it
 * was freed. */
static xseg_status bad_pointer(xseg_t *xs, const void *ptr, const char *what)
{
    uintptr_t p = (uintptr_t)ptr, tag;
    const xarena *ar = &xs->arena;
    if (p < ar->base || p >= ar->base + ar->size)
        return xseg_fail(xs, XSEG_ERR_INVALID_POINTER,
                         "%s: %p was not allocated by this allocator (device %d)", what, ptr,
                         xs->device);
    uintptr_t start = allocation_start(block_containing(xs, p), p);
    if (start && start != p && live_tag(xs, start, &tag))
        return xseg_fail(xs, XSEG_ERR_INTERIOR_POINTER,
                         "%s: %p points inside a live allocation, not at its start", what, ptr);
    return xseg_fail(xs, XSEG_ERR_DOUBLE_FREE,
                     "%s: %p is not a live allocation: already freed (double free)", what, ptr);
}

xseg_status xseg_free_locked(xseg_t *xs, uintptr_t addr)
{
    uintptr_t tag = 0, u = 0;
    if (!live_tag(xs, addr, &tag))
        return bad_pointer(xs, (void *)addr, "xseg_free");
    xseg_ptrmap_del(&xs->live, addr, NULL);
    atomic_store_explicit(xseg_gen_of(addr, tag), 0, memory_order_relaxed);
    size_t block, req;
    sizes_of(addr, tag, &block, &req);
    xcnt_sub(&xs->allocated, block);
    xcnt_sub(&xs->requested, req);
    xcnt_sub(&xs->active, 1);
    if (xs->uses.count && xseg_ptrmap_del(&xs->uses, addr, &u)) {
        atomic_store_explicit(&xs->nuses, (int)xs->uses.count, memory_order_relaxed);
        if (xpending_add(xs, addr, tag, (xuses *)u) != XSEG_OK) {
            for (uint32_t i = 0; i < ((xuses *)u)->n; i++) /* no memory: wait now */
                xstream_done(xs, ((xuses *)u)->u[i].s, ((xuses *)u)->u[i].s->epoch, 1);
            free((void *)u);
            u = 0;
        }
    }
    void *stream = owner_of(tag)->handle;
    if (!u)
        xseg_release_user(xs, addr, tag);
    xseg_hist(xs, XEV_FREE, addr, req, stream);
    xseg_shm(xs);
    return XSEG_OK;
}

xseg_status xseg_free(xseg_t *xs, void *ptr)
{
    CHECK_XS(xs);
    if (!ptr)
        return refused(xs, &xs->free_calls,
                       xseg_fail(xs, XSEG_ERR_INVALID_ARG, "xseg_free: pointer is NULL"));
    if (xs->tc_on && xtc_free(xs, ptr))
        return XSEG_OK;
    xlock_lock(&xs->lock);
    xs->free_calls++;
    xseg_status st = xseg_free_locked(xs, (uintptr_t)ptr);
    xlock_unlock(&xs->lock);
    return st;
}

xseg_status xseg_record_stream(xseg_t *xs, void *ptr, void *stream)
{
    CHECK_XS(xs);
    if (!ptr)
        return xseg_fail(xs, XSEG_ERR_INVALID_ARG, "xseg_record_stream: pointer is NULL");
    uintptr_t tag;
    xseg_status st = XSEG_OK;
    xlock_lock(&xs->lock);
    if (!live_tag(xs, (uintptr_t)ptr, &tag)) {
        st = bad_pointer(xs, ptr, "xseg_record_stream");
    } else {
        xstream *owner = owner_of(tag);
        xstream *s = xstream_get(xs, stream);
        if (!s)
            st = xseg_fail(xs, XSEG_ERR_OOM, "xseg: no host memory for a stream");
        else if (s != owner)
            st = xuses_add(xs, (uintptr_t)ptr, s);
        atomic_store_explicit(&xs->nuses, (int)xs->uses.count, memory_order_relaxed);
    }
    xlock_unlock(&xs->lock);
    return st;
}

xseg_status xseg_stream_retire(xseg_t *xs, void *stream)
{
    CHECK_XS(xs);
    uintptr_t v;
    xlock_lock(&xs->lock);
    if (xseg_ptrmap_get(&xs->streams, (uintptr_t)stream, &v))
        xstream_retire(xs, (xstream *)v);
    xlock_unlock(&xs->lock);
    return XSEG_OK;
}

xseg_status xseg_block_size(xseg_t *xs, const void *ptr, size_t *rounded, size_t *requested)
{
    CHECK_XS(xs);
    if (!ptr)
        return xseg_fail(xs, XSEG_ERR_INVALID_ARG, "xseg_block_size: pointer is NULL");
    uintptr_t tag;
    xseg_status st = XSEG_OK;
    xlock_lock(&xs->lock);
    if (!live_tag(xs, (uintptr_t)ptr, &tag)) {
        st = bad_pointer(xs, ptr, "xseg_block_size");
    } else {
        size_t b, r;
        sizes_of((uintptr_t)ptr, tag, &b, &r);
        if (rounded)
            *rounded = b;
        if (requested)
            *requested = r;
    }
    xlock_unlock(&xs->lock);
    return st;
}

/* ---- trim and stats ---- */

xseg_status xseg_trim(xseg_t *xs, size_t keep, size_t *released)
{
    CHECK_XS(xs);
    xlock_lock(&xs->lock);
    uint64_t before = xs->released;
    xs->trims++;
    xtc_flush_all(xs);
    xpending_process(xs, 1);
    xblk_moved_process(xs, 1);
    xsmall_drop_empty(xs);
    xarena_release_orphans(xs); /* handles whose release failed before */
    size_t cached = xs->mapped.cur > xs->allocated.cur ? xs->mapped.cur - xs->allocated.cur : 0;
    if (cached > keep)
        xseg_reclaim(xs, cached - keep, 1);
    if (released)
        *released = (size_t)(xs->released - before);
    xseg_hist(xs, XEV_TRIM, 0, (size_t)(xs->released - before), NULL);
    xseg_shm(xs);
    xlock_unlock(&xs->lock);
    return XSEG_OK;
}

xseg_status xseg_get_stats(xseg_t *xs, xseg_stats *out)
{
    CHECK_XS(xs);
    if (!out || out->size < 2 * sizeof(uint32_t))
        return xseg_fail(xs, XSEG_ERR_INVALID_ARG,
                         "xseg_get_stats: out is NULL or out->size (%u) is not set to "
                         "sizeof(xseg_stats) (%zu)", out ? out->size : 0, sizeof(xseg_stats));
    xlock_lock(&xs->lock);
    xseg_fill_stats(xs, out);
    xlock_unlock(&xs->lock);
    return XSEG_OK;
}

xseg_status xseg_reset_peak(xseg_t *xs)
{
    CHECK_XS(xs);
    xlock_lock(&xs->lock);
    xtc_flush_all(xs); /* peaks restart from exact values */
    xcnt *all[] = {&xs->allocated, &xs->requested, &xs->active, &xs->mapped,
                   &xs->handles, &xs->segments, &xs->va};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        all[i]->peak = all[i]->cur;
    xs->cached_peak = xs->mapped.cur > xs->allocated.cur ? xs->mapped.cur - xs->allocated.cur : 0;
    xseg_shm(xs);
    xlock_unlock(&xs->lock);
    return XSEG_OK;
}

xseg_status xseg_stats_json(xseg_t *xs, char *buf, size_t cap, size_t *len)
{
    CHECK_XS(xs);
    if (!buf && cap)
        return xseg_fail(xs, XSEG_ERR_INVALID_ARG, "xseg_stats_json: buf is NULL");
    xseg_stats st = {.size = sizeof st};
    xlock_lock(&xs->lock);
    xseg_fill_stats(xs, &st);
    xlock_unlock(&xs->lock);
    size_t n = xseg_render_json(&st, xs->drv->name, buf, cap);
    if (len)
        *len = n;
    if (n + 1 > cap)
        return xseg_fail(xs, XSEG_ERR_BUFFER_TOO_SMALL,
                         "xseg_stats_json: %zu bytes needed, buffer has %zu", n + 1, cap);
    return XSEG_OK;
}

/* ---- process-wide default allocators ----
 * Created on first use and never destroyed: they live until the process
 * ends, and the system takes their memory back then.  An exit handler or a
 * C++ static destructor runs at exit in an order xseg does not control
 * (before or after any handler of xseg's), and may still allocate or free
 * through xseg_default, the PyTorch entry points or an allocator pointer it
 * kept: each finds a valid allocator.  Nothing else may destroy one either
 * (xseg_destroy refuses), so the PyTorch entry points' per-device cache
 * (plugin.c) never points at a destroyed allocator.  The stats_shm file is
 * unlinked at exit by shm.c. */

static _Atomic(xseg_t *) g_defaults[XSEG_MAX_DEVICES];
static char *g_default_conf;

/* The device whose default allocator xs is, or -1. */
static int default_device(const xseg_t *xs)
{
    for (int d = 0; d < XSEG_MAX_DEVICES; d++)
        if (atomic_load_explicit(&g_defaults[d], memory_order_acquire) == xs)
            return d;
    return -1;
}

xseg_status xseg_default(int device, xseg_t **out)
{
    if (!out)
        return xseg_fail(NULL, XSEG_ERR_INVALID_ARG, "xseg_default: out is NULL");
    if (device < 0 || device >= XSEG_MAX_DEVICES)
        return xseg_fail(NULL, XSEG_ERR_NO_DEVICE, "xseg_default: device %d out of range 0..%d",
                         device, XSEG_MAX_DEVICES - 1);
    xseg_t *xs = atomic_load_explicit(&g_defaults[device], memory_order_acquire);
    xseg_status st = XSEG_OK;
    if (!xs) {
        xseg_fork_init(); /* before the first g_default_lock */
        pthread_mutex_lock(&g_default_lock);
        xs = atomic_load(&g_defaults[device]);
        if (!xs && (st = xseg_create(&xs, device, g_default_conf)) == XSEG_OK)
            atomic_store_explicit(&g_defaults[device], xs, memory_order_release);
        pthread_mutex_unlock(&g_default_lock);
    }
    *out = xs;
    return st;
}

xseg_status xseg_set_default_conf(const char *conf)
{
    xseg_fork_init();
    pthread_mutex_lock(&g_default_lock);
    for (int d = 0; d < XSEG_MAX_DEVICES; d++)
        if (atomic_load(&g_defaults[d])) {
            pthread_mutex_unlock(&g_default_lock);
            return xseg_fail(NULL, XSEG_ERR_INVALID_ARG,
                             "xseg_set_default_conf: the default allocator of device %d already "
                             "exists; set the conf before the first allocation", d);
        }
    xseg_conf probe;
    char err[512] = "";
    xseg_conf_defaults(&probe);
    xseg_status st = conf ? xseg_conf_parse(&probe, conf, err, sizeof err) : XSEG_OK;
    if (st == XSEG_OK) {
        char *copy = conf ? strdup(conf) : NULL;
        if (conf && !copy)
            st = xseg_fail(NULL, XSEG_ERR_OOM, "xseg_set_default_conf: no host memory");
        else {
            free(g_default_conf);
            g_default_conf = copy;
        }
    } else {
        xseg_fail(NULL, st, "%s", err);
    }
    pthread_mutex_unlock(&g_default_lock);
    return st;
}
