/* api.c: the public entry points: argument checks, the fork check, the
 * per-allocator lock, and the retry ladder on out-of-memory.  Below it:
 * lifecycle.c (create / destroy), process.c (default allocators, fork),
 * tcache.c (thread caches), free.c (the free core), diag.c (bad-pointer and
 * out-of-memory reports), then the allocator proper. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "textbuf.h"

const char *xseg_backend_name(const xseg_t *xs)
{
    return xs ? xdrv_name(xs) : "none";
}

#define CHECK_XS(xs)                                                                 \
    do {                                                                             \
        if (!(xs))                                                                   \
            return xseg_fail(NULL, XSEG_ERR_INVALID_ARG, "xseg: allocator is NULL"); \
        if (xseg_forked(xs))                                                         \
            return xseg_check_fork(xs, __func__);                                    \
    } while (0)

/* ---- create / destroy (lifecycle.c does the work) ---- */

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
    return xlife_create(out, device, conf, drv, atomic_load(&xseg_fork_gen_now));
}

xseg_status xseg_destroy(xseg_t *xs)
{
    if (!xs)
        return xseg_fail(NULL, XSEG_ERR_INVALID_ARG, "xseg_destroy: allocator is NULL");
    int def = xproc_default_device(xs);
    if (def >= 0)
        return xseg_fail(NULL, XSEG_ERR_INVALID_ARG,
                         "xseg_destroy: %p is the process-wide default allocator of device %d "
                         "(xseg_default), which lives until the process ends; destroy only "
                         "allocators made with xseg_create", (void *)xs, def);
    /* In a forked child the parent's memory must not be touched: free the
     * bookkeeping only, no driver call. */
    int child = xseg_forked(xs);
    if (!child) { /* a child must not wait: a parent's thread may have held it */
        xlock_lock(&xs->lock);
        xlock_unlock(&xs->lock);
    }
    if (!child) {
        (void)xseg_set_oom_handler(xs, NULL, NULL); /* its slot is free again */
        xtc_detach_all(xs);
        for (int t = 1; t < XSEG_MAX_TAGS; t++) {
            xseg_t *c = atomic_load(&xs->tags[t]);
            if (c)
                xtc_detach_all(c);
        }
    }
    return xlife_destroy(xs, !child);
}

/* ---- allocation ---- */

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
    xseg_drop_empty_slabs(xs);
    xseg_reclaim(xs, SIZE_MAX, 1);
    xworker_drain_locked(xs); /* what the worker still holds is released too */
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
    if (xseg_tls_tag && !xs->parent) { /* the thread's tag has its own allocator */
        xseg_t *c = NULL;
        if (out)
            *out = NULL;
        xseg_status st = xtag_get(xs, xseg_tls_tag, 1, &c, "xseg_alloc");
        return st == XSEG_OK ? xapi_alloc(c, size, stream, out) : st;
    }
    return xapi_alloc(xs, size, stream, out);
}

static xseg_status oom_handled(xseg_t *xs, size_t size, void *stream, void **out);

xseg_status xapi_alloc(xseg_t *xs, size_t size, void *stream, void **out)
{
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
    if (xs->conf.registrable_min && size >= xs->conf.registrable_min) {
        xseg_status st = xshare_alloc(xs, size, stream, out); /* a dedicated block */
        return refused(xs, &xs->alloc_calls, st);
    }
    size_t rounded = xseg_round_size(xs, size), block = 0;
    int cls = xsmall_class(xs, rounded);
    if (cls >= 0)
        rounded = xs->class_size[cls];
    /* No cache hit while asleep: the cached blocks' pages are given back. */
    if (xs->tc_on && !atomic_load_explicit(&xs->asleep, memory_order_relaxed)) {
        if (xtc_alloc(xs, rounded, size, stream, out))
            return XSEG_OK;
        xtc_attach(xs);
    }
    uintptr_t tag = 0;
    xlock_lock(&xs->lock);
    xs->alloc_calls++;
    if (atomic_load_explicit(&xs->asleep, memory_order_relaxed)) {
        char b1[32];
        xseg_status st = xseg_fail(xs, XSEG_ERR_ASLEEP,
                                   "xseg_alloc: request of %zu bytes for tag %d (\"%s\"), whose "
                                   "memory is asleep (%s live, given back); xseg_wake it first",
                                   size, xs->tag, xseg_tag_name(xs->tag),
                                   xseg_fmt_size(xs->allocated.cur, b1, sizeof b1));
        xlock_unlock(&xs->lock);
        return st;
    }
    if (xs->tc_on)
        xtc_flush_own(xs); /* held blocks go back before anything is chosen */
    xstream *s = xstream_get(xs, stream);
    xseg_status st = XSEG_ERR_OOM;
    unsigned gen = xseg_error_gen();
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
        xseg_stats full = {.size = sizeof full};
        xseg_fill_stats(xs, &full); /* quoted by the report */
        xdiag_oom_report(xs, size, &full, xseg_error_gen() != gen ? xseg_last_error() : NULL);
        return oom_handled(xs, size, stream, out); /* unlocks */
    }
    xlock_unlock(&xs->lock);
    return st;
}

/* ---- free ---- */

/* A pointer outside xs's range may be a dedicated block (share.c): free,
 * record_stream and block_size ask share.c first. */
static int maybe_dedicated(xseg_t *xs, const void *ptr)
{
    return xfam(xs)->share && !xseg_in_range(xs, (uintptr_t)ptr);
}

/* The allocator of xs's family that serves ptr (xs when none does: its
 * own checks then name the bad pointer). */
static xseg_t *owner_of(xseg_t *xs, const void *ptr)
{
    if (xseg_in_range(xs, (uintptr_t)ptr))
        return xs;
    xseg_t *o = xseg_range_owner(xs->parent ? xs->parent : xs, (uintptr_t)ptr);
    return o ? o : xs;
}

xseg_status xseg_free(xseg_t *xs, void *ptr)
{
    CHECK_XS(xs);
    if (!ptr)
        return refused(xs, &xs->free_calls,
                       xseg_fail(xs, XSEG_ERR_INVALID_ARG, "xseg_free: pointer is NULL"));
    xs = owner_of(xs, ptr); /* a tag's memory is freed by its allocator */
    xseg_status st;
    if (maybe_dedicated(xs, ptr) && xshare_free(xs, ptr, &st))
        return refused(xs, &xs->free_calls, st); /* a dedicated block (share.c) */
    /* While asleep a free drops the block at once (not into a cache that
     * wake would map again). */
    if (xs->tc_on && !atomic_load_explicit(&xs->asleep, memory_order_relaxed) &&
        xtc_free(xs, ptr))
        return XSEG_OK;
    xlock_lock(&xs->lock);
    xs->free_calls++;
    st = xseg_free_locked(xs, (uintptr_t)ptr);
    if (st == XSEG_OK)
        xseg_shm(xs);
    xlock_unlock(&xs->lock);
    return st;
}

xseg_status xseg_record_stream(xseg_t *xs, void *ptr, void *stream)
{
    CHECK_XS(xs);
    if (!ptr)
        return xseg_fail(xs, XSEG_ERR_INVALID_ARG, "xseg_record_stream: pointer is NULL");
    xs = owner_of(xs, ptr);
    uintptr_t tag;
    xseg_status st = XSEG_OK;
    if (maybe_dedicated(xs, ptr) && xshare_record_stream(xs, ptr, stream, &st))
        return st;
    xlock_lock(&xs->lock);
    if (!xseg_live_tag(xs, (uintptr_t)ptr, &tag)) {
        st = xdiag_bad_pointer(xs, ptr, "xseg_record_stream");
    } else {
        xstream *owner = xseg_owner_of(tag);
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
        xseg_retire_stream(xs, (xstream *)v);
    xlock_unlock(&xs->lock);
    return XSEG_OK;
}

xseg_status xseg_block_size(xseg_t *xs, const void *ptr, size_t *rounded, size_t *requested)
{
    CHECK_XS(xs);
    if (!ptr)
        return xseg_fail(xs, XSEG_ERR_INVALID_ARG, "xseg_block_size: pointer is NULL");
    xs = owner_of(xs, ptr);
    uintptr_t tag;
    xseg_status st = XSEG_OK;
    if (maybe_dedicated(xs, ptr) && xshare_block_size(xs, ptr, rounded, requested, &st))
        return st;
    xlock_lock(&xs->lock);
    if (!xseg_live_tag(xs, (uintptr_t)ptr, &tag)) {
        st = xdiag_bad_pointer(xs, ptr, "xseg_block_size");
    } else {
        size_t b, r;
        xseg_sizes_of((uintptr_t)ptr, tag, &b, &r);
        if (rounded)
            *rounded = b;
        if (requested)
            *requested = r;
    }
    xlock_unlock(&xs->lock);
    return st;
}

/* ---- trim and stats ---- */

/* Cached bytes that trim may give back: mapped, not allocated, not
 * already on their way back through the worker. */
static size_t trim_cached(const xseg_t *xs)
{
    size_t cached = xs->mapped.cur > xs->allocated.cur ? xs->mapped.cur - xs->allocated.cur : 0;
    return xs->releasing_bytes < cached ? cached - xs->releasing_bytes : 0;
}

/* A trim gives memory back on purpose: the release threshold's budget
 * (alloc.c xblk_release_limit, release_threshold:auto) restarts from the bytes
 * allocated now plus what the trim keeps cached, so that a later, smaller
 * workload releases at its own peak instead of caching up to an earlier
 * one's (docs/config.md, release_threshold). */
static void restart_budget(xseg_t *xs, size_t keep)
{
    size_t cached = trim_cached(xs);
    xs->budget_peak = xs->arena_used + (cached < keep ? cached : keep);
    xslack_reset(xs);
}

/* xseg_trim (wait: the caller releases) and xseg_trim_start (no wait, the
 * worker unbounded). */
static xseg_status trim(xseg_t *xs, size_t keep, size_t *released, int wait)
{
    CHECK_XS(xs);
    xlock_lock(&xs->lock);
    uint64_t before = xs->released;
    xs->trims++;
    xtc_flush_all(xs);
    xpending_process(xs, 1);
    xblk_moved_process(xs, 1);
    xseg_drop_empty_slabs(xs);
    xarena_release_orphans(xs); /* handles whose release failed before */
    size_t handed = 0;
    restart_budget(xs, keep);
    if (wait) {
        /* The caller waits for the memory anyway: the worker's queue is
         * finished first, then the rest is released here, on one thread,
         * in runs of handles (one unmap each).  Two threads in the driver
         * at once gave memory back 1.2-1.6x slower than one on an H100
         * (tools/gpu/vmm_probe.c, docs/performance.md). */
        xworker_drain_locked(xs);
        size_t cached = trim_cached(xs);
        if (cached > keep) /* queues nothing: its moved unmaps run here too */
            (void)xseg_reclaim(xs, cached - keep, 1);
    } else {
        size_t cached = trim_cached(xs);
        if (cached > keep)
            handed = xseg_reclaim_async(xs, cached - keep, 1, 1);
    }
    if (released)
        *released = wait ? (size_t)(xs->released - before) : handed;
    xseg_status st = XSEG_OK;
    if (xs->wk_failed) {
        char b1[32];
        st = xseg_fail(xs, XSEG_ERR_DRIVER,
                       "%s: the reclaim worker's driver calls failed (%s); the handles "
                       "concerned stay mapped (or are released again later); mapped %s",
                       wait ? "xseg_trim" : "xseg_trim_start", xdrv_error_name(xs, xs->wk_failed),
                       xseg_fmt_size(xs->mapped.cur, b1, sizeof b1));
        xs->wk_failed = 0;
    }
    xseg_hist(xs, XEV_TRIM, 0, (size_t)(xs->released - before), NULL);
    xseg_shm(xs);
    xlock_unlock(&xs->lock);
    for (int t = 1; t < XSEG_MAX_TAGS; t++) { /* its tags' allocators, each keeping `keep` */
        xseg_t *c = atomic_load(&xs->tags[t]);
        size_t r = 0;
        if (!c)
            continue;
        xseg_status ct = trim(c, keep, &r, wait);
        if (released)
            *released += r;
        if (st == XSEG_OK)
            st = ct;
    }
    return st;
}

xseg_status xseg_trim(xseg_t *xs, size_t keep, size_t *released)
{
    return trim(xs, keep, released, 1);
}

xseg_status xseg_trim_start(xseg_t *xs, size_t keep, size_t *queued)
{
    return trim(xs, keep, queued, 0);
}

/* An allocator's stats with its tags' added (tags.c). */
static void family_stats(xseg_t *xs, xseg_stats *out)
{
    xseg_stats s = {.size = sizeof s};
    xlock_lock(&xs->lock);
    xseg_fill_stats(xs, &s);
    xlock_unlock(&xs->lock);
    xtag_stats_add(xs, &s);
    xseg_share_stats sh = {.size = sizeof sh}; /* outside the arena (share.c) */
    if (xshare_stats(xs, &sh) == XSEG_OK) {
        s.dedicated_bytes = sh.dedicated_bytes;
        s.imported_bytes = sh.imported_bytes;
    }
    size_t n = out->size < sizeof s ? out->size : sizeof s;
    memcpy(out, &s, n);
    out->size = (uint32_t)n;
}

xseg_status xseg_get_stats(xseg_t *xs, xseg_stats *out)
{
    CHECK_XS(xs);
    if (!out || out->size < 2 * sizeof(uint32_t))
        return xseg_fail(xs, XSEG_ERR_INVALID_ARG,
                         "xseg_get_stats: out is NULL or out->size (%u) is not set to "
                         "sizeof(xseg_stats) (%zu)", out ? out->size : 0, sizeof(xseg_stats));
    family_stats(xs, out);
    return XSEG_OK;
}

xseg_status xseg_driver_time(xseg_t *xs, xseg_side side, xseg_op op, uint64_t *ns)
{
    CHECK_XS(xs);
    if (!ns || (side != XSEG_SIDE_CALLER && side != XSEG_SIDE_WORKER) || (unsigned)op > XSEG_OP_COUNT)
        return xseg_fail(xs, XSEG_ERR_INVALID_ARG,
                         "xseg_driver_time: ns is NULL, or side %d (0 or 1) or op %d (0 to %d) "
                         "is out of range", (int)side, (int)op, (int)XSEG_OP_COUNT);
    xlock_lock(&xs->lock);
    *ns = xdrv_ns(xs, side == XSEG_SIDE_CALLER ? XDRV_SIDE_CALLER : XDRV_SIDE_WORKER, (int)op);
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
    for (int t = 1; t < XSEG_MAX_TAGS; t++) {
        xseg_t *c = atomic_load(&xs->tags[t]);
        if (c)
            xseg_reset_peak(c);
    }
    if (!xs->parent) /* the dedicated and imported counters' peaks */
        xshare_reset_peak(xs);
    return XSEG_OK;
}

xseg_status xseg_set_expected_peak(xseg_t *xs, size_t bytes)
{
    CHECK_XS(xs);
    xseg_t *root = xfam(xs); /* the hint is the default tag's (xseg_budget) */
    xlock_lock(&root->lock);
    root->conf.expected_peak = bytes;
    xlock_unlock(&root->lock);
    return XSEG_OK;
}

xseg_status xseg_stats_json(xseg_t *xs, char *buf, size_t cap, size_t *len)
{
    CHECK_XS(xs);
    if (!buf && cap)
        return xseg_fail(xs, XSEG_ERR_INVALID_ARG, "xseg_stats_json: buf is NULL");
    /* tagstats.c (lib/tag_fields.h): the stats and the "tags" array of the
     * family's tags, docs/stats.md; declared here, in the one function of
     * this file that uses it */
    size_t xtags_stats_json(xseg_t *, const xseg_stats *, char *, size_t);
    xseg_stats st = {.size = sizeof st};
    family_stats(xs, &st);
    size_t n = xtags_stats_json(xs, &st, buf, cap);
    if (len)
        *len = n;
    if (n + 1 > cap)
        return xseg_fail(xs, XSEG_ERR_BUFFER_TOO_SMALL,
                         "xseg_stats_json: %zu bytes needed, buffer has %zu", n + 1, cap);
    return XSEG_OK;
}

xseg_status xseg_history_json(xseg_t *xs, char *buf, size_t cap, size_t *len)
{
    CHECK_XS(xs);
    if (!buf && cap)
        return xseg_fail(xs, XSEG_ERR_INVALID_ARG, "xseg_history_json: buf is NULL");
    if (!xs->hist)
        return xseg_fail(xs, XSEG_ERR_INVALID_ARG,
                         "xseg_history_json: history is off for device %d; "
                         "create the allocator with history:N", xs->device);
    xtb b = {buf, cap, 0};
    xlock_lock(&xs->lock);
    xseg_hist_render(xs, xdrv_name(xs), &b);
    xlock_unlock(&xs->lock);
    if (len)
        *len = b.len;
    if (b.len + 1 > cap)
        return xseg_fail(xs, XSEG_ERR_BUFFER_TOO_SMALL,
                         "xseg_history_json: %zu bytes needed, buffer has %zu", b.len + 1, cap);
    return XSEG_OK;
}

/* ---- out-of-memory handler (xseg_set_oom_handler, issue 16) ----
 * The table of handlers is process-wide state (process.c).  The handler
 * runs without the allocator's lock and is not re-entered on the same
 * thread (oom_in_handler). */

static _Thread_local int oom_in_handler;

xseg_status xseg_set_oom_handler(xseg_t *xs, xseg_oom_handler fn, void *user)
{
    CHECK_XS(xs);
    if (!xproc_oom_set(xs, fn, user))
        return xseg_fail(xs, XSEG_ERR_INVALID_ARG,
                         "xseg_set_oom_handler: %d allocators have a handler already; "
                         "remove one (fn NULL) first", XPROC_OOM_HANDLERS);
    return XSEG_OK;
}

/* xapi_alloc's out-of-memory end, xs locked: without a handler (or inside
 * one) the failure stands; else the lock is dropped around the handler and
 * one more attempt follows if it asks for it. */
static xseg_status oom_handled(xseg_t *xs, size_t size, void *stream, void **out)
{
    xproc_oom h;
    int have = !oom_in_handler && xproc_oom_find(xs, &h);
    xlock_unlock(&xs->lock);
    if (!have)
        return XSEG_ERR_OOM;
    char first[512];
    snprintf(first, sizeof first, "%s", xseg_last_error());
    oom_in_handler = 1;
    int again = h.fn(h.xs, size, h.user);
    xseg_status st = again ? xapi_alloc(xs, size, stream, out) : XSEG_ERR_OOM;
    oom_in_handler = 0;
    if (!again)
        xseg_fail(NULL, XSEG_ERR_OOM, "%s (the out-of-memory handler did not ask for a "
                  "retry)", first);
    return st;
}

/* ---- sharing (share.c does the work; docs/sharing.md) ---- */

xseg_status xseg_alloc_registrable(xseg_t *xs, size_t size, void *stream, void **out)
{
    CHECK_XS(xs);
    return refused(xs, &xs->alloc_calls, xshare_alloc(xs, size, stream, out));
}

xseg_status xseg_export(xseg_t *xs, const void *ptr, xseg_export_desc *desc)
{
    CHECK_XS(xs);
    return xshare_export(xs, ptr, desc);
}

xseg_status xseg_import(xseg_t *xs, const xseg_export_desc *desc, void **out)
{
    CHECK_XS(xs);
    return xshare_import(xs, desc, out);
}

xseg_status xseg_unimport(xseg_t *xs, void *ptr)
{
    CHECK_XS(xs);
    return xshare_unimport(xs, ptr);
}

xseg_status xseg_enable_peer(xseg_t *xs, int device)
{
    CHECK_XS(xs);
    return xshare_enable_peer(xs, device);
}

xseg_status xseg_share_stats_get(xseg_t *xs, xseg_share_stats *out)
{
    CHECK_XS(xs);
    return xshare_stats(xs, out);
}
