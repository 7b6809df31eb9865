/* sleep.c: sleep and wake of one allocator's memory (docs/sleep.md).  Each
 * tag's memory is an allocator of its own (tags.c), so a tag sleeps as a
 * whole allocator: its live blocks keep their addresses and their records,
 * every physical handle under them (and under its cache) is unmapped and
 * released, and wake maps fresh memory under the live blocks again.
 *
 * Sleep, under xs->lock: the allocator is marked asleep first (thread
 * caches then miss, and allocations fail with XSEG_ERR_ASLEEP); the thread
 * caches, deferred frees and moved handles are settled, and the worker
 * drained; every live stream that used the memory is waited for (its own
 * stream synchronisation: no device-wide sync); in backup mode the live
 * blocks are copied into one pinned host buffer, kept for the next sleep;
 * then everything mapped is released.  A failure before the release
 * leaves the allocator as it was; a failure during it (something still
 * mapped, or a handle whose release failed twice) wakes the allocator
 * again (contents restored in backup mode), or, when that mapping fails
 * too, leaves it asleep with nothing mapped; so the state is always one of
 * the two, and a failed wake leaves nothing mapped: both can be retried.
 * A release that fails once and works when tried again is no failure.
 *
 * Wake maps the union of the pages under live blocks as runs (large runs
 * get large handles: one create and map per GiB, one set_access per run),
 * then copies back the backups of blocks still live.  A block freed while
 * asleep is dropped: its backup is skipped.  An allocator marked
 * sleep_whole (a CUDA-graph pool, plugin.c) keeps every page mapped at
 * sleep instead of only the live blocks': backed up and mapped again. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bitmap.h"
#include "internal.h"

/* A live block's contents in the backup buffer. */
struct xbackup {
    uintptr_t addr;
    size_t size;
    size_t off;
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A block holding live memory: allocated, or a slab. */
static int in_use(const xblock *b)
{
    return !(b->flags & (XB_FREE | XB_MOVED | XB_RELEASING));
}

/* Driver failures read as a status: capture makes a wait impossible. */
static xseg_status drv_status(int rc)
{
    if (rc == 900 || rc == 901) /* CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED / _INVALIDATED */
        return XSEG_ERR_STATE;
    return rc == XDRV_OUT_OF_MEMORY ? XSEG_ERR_OOM : XSEG_ERR_DRIVER;
}

/* Everything that holds the allocator's memory on the way in or out is
 * settled, so that only live blocks and free (cached) blocks remain. */
static void settle(xseg_t *xs)
{
    xtc_flush_all(xs);
    xpending_process(xs, 1);
    xblk_moved_process(xs, 1);
    xworker_drain_locked(xs);
    xseg_drop_empty_slabs(xs);
}

/* Wait for the work queued on every stream this allocator served. */
static xseg_status wait_streams(xseg_t *xs)
{
    for (xstream *s = xs->all_streams; s; s = s->next_all) {
        if (s->gone || s->retired)
            continue;
        int rc = xdrv_stream_sync(xs, s->handle);
        xs->syncs++;
        if (rc != XDRV_SUCCESS)
            return xseg_fail(xs, drv_status(rc),
                             "xseg_sleep: waiting for stream %p failed (%s)%s; nothing was "
                             "given back", s->handle, xdrv_error_name(xs, rc),
                             drv_status(rc) == XSEG_ERR_STATE
                                 ? ": a CUDA graph is being captured on it" : "");
    }
    return XSEG_OK;
}

static size_t live_bytes(const xseg_t *xs)
{
    size_t n = 0;
    for (const xblock *b = xs->first_block; b; b = b->anext)
        if (in_use(b))
            n += b->size;
    return n;
}

/* The pinned buffer holds at least `bytes` (kept from the last sleep when
 * it is large enough; grown in 64 MiB steps otherwise). */
static xseg_status backup_room(xseg_t *xs, size_t bytes)
{
    if (xs->bk_host && xs->bk_host_cap >= bytes)
        return XSEG_OK;
    size_t step = (size_t)64 << 20;
    size_t cap = (bytes + step - 1) / step * step;
    if (xs->bk_host) {
        int rc = xdrv_host_free(xs, xs->bk_host);
        if (rc != XDRV_SUCCESS)
            return xseg_fail(xs, XSEG_ERR_DRIVER,
                             "xseg_sleep: freeing the old pinned backup buffer of %zu bytes "
                             "failed (%s)", xs->bk_host_cap, xdrv_error_name(xs, rc));
        xs->bk_host = NULL;
        xs->bk_host_cap = 0;
    }
    void *p = NULL;
    int rc = xdrv_host_alloc(xs, cap, &p);
    if (rc != XDRV_SUCCESS) {
        char b1[32];
        return xseg_fail(xs, rc == XDRV_OUT_OF_MEMORY ? XSEG_ERR_OOM : XSEG_ERR_DRIVER,
                         "xseg_sleep: pinned host memory of %s for the backup failed (%s); "
                         "nothing was given back",
                         xseg_fmt_size(cap, b1, sizeof b1), xdrv_error_name(xs, rc));
    }
    xs->bk_host = p;
    xs->bk_host_cap = cap;
    return XSEG_OK;
}

static xseg_status backup_records(xseg_t *xs, size_t n)
{
    if (n <= xs->bk_cap)
        return XSEG_OK;
    struct xbackup *r = realloc(xs->bk, n * sizeof *r);
    if (!r)
        return xseg_fail(xs, XSEG_ERR_OOM, "xseg_sleep: no host memory for %zu backup records",
                         n);
    xs->bk = r;
    xs->bk_cap = n;
    return XSEG_OK;
}

/* ---- what sleep keeps ---- */

typedef xseg_status (*run_fn)(xseg_t *xs, uintptr_t a, uintptr_t b, void *ctx);

/* An allocator whose cached memory is in use too sleeps whole (a CUDA
 * graph pool: its graphs replay into blocks freed during the capture):
 * the pages mapped at sleep are recorded, and they are what is backed up
 * and mapped again. */
static xseg_status save_mapped(xseg_t *xs)
{
    size_t bytes = (xs->arena.npages + 63) / 64 * sizeof(uint64_t);
    if (!xs->sl_bits)
        xs->sl_bits = malloc(bytes);
    if (!xs->sl_bits)
        return xseg_fail(xs, XSEG_ERR_OOM, "xseg_sleep: no host memory for the %zu-byte map "
                         "of the pages to keep; nothing was given back", bytes);
    memcpy(xs->sl_bits, xs->arena.mapped_bits, bytes);
    return XSEG_OK;
}

/* The runs of pages recorded by save_mapped, in address order. */
static xseg_status each_saved_run(xseg_t *xs, run_fn fn, void *ctx)
{
    const xarena *ar = &xs->arena;
    for (size_t p = 0, n = ar->npages; (p = xbm_next(xs->sl_bits, p, n, 1)) < n;) {
        size_t e = xbm_next(xs->sl_bits, p, n, 0);
        xseg_status st = fn(xs, ar->base + (p << ar->shift), ar->base + (e << ar->shift), ctx);
        if (st != XSEG_OK)
            return st;
        p = e;
    }
    return XSEG_OK;
}

/* What a backup holds: each live block, or each saved run when whole. */
static xseg_status each_kept(xseg_t *xs, run_fn fn, void *ctx)
{
    if (xs->sleep_whole)
        return each_saved_run(xs, fn, ctx);
    for (const xblock *b = xs->first_block; b; b = b->anext) {
        xseg_status st = in_use(b) ? fn(xs, b->addr, b->addr + b->size, ctx) : XSEG_OK;
        if (st != XSEG_OK)
            return st;
    }
    return XSEG_OK;
}

struct tally {
    size_t n, bytes;
};

static xseg_status tally_one(xseg_t *xs, uintptr_t a, uintptr_t b, void *ctx)
{
    (void)xs;
    struct tally *t = ctx;
    t->n++;
    t->bytes += b - a;
    return XSEG_OK;
}

/* Issue the copy of [a, b) to the buffer; the first failure stops. */
static xseg_status copy_one(xseg_t *xs, uintptr_t a, uintptr_t b, void *ctx)
{
    int *rc = ctx;
    *rc = xdrv_copy(xs, (char *)xs->bk_host + xs->bk_bytes, (const void *)a, b - a, 0);
    xs->bk[xs->bk_n++] = (struct xbackup){a, b - a, xs->bk_bytes};
    xs->bk_bytes += b - a;
    return *rc == XDRV_SUCCESS ? XSEG_OK : XSEG_ERR_DRIVER;
}

/* Copy what is kept into the pinned buffer, then wait for the copies. */
static xseg_status backup(xseg_t *xs)
{
    struct tally t = {0, 0};
    xs->bk_n = 0;
    xs->bk_bytes = 0;
    each_kept(xs, tally_one, &t);
    if (!t.n)
        return XSEG_OK;
    xseg_status st = backup_records(xs, t.n);
    if (st == XSEG_OK)
        st = backup_room(xs, t.bytes);
    if (st != XSEG_OK)
        return st;
    int rc = XDRV_SUCCESS;
    each_kept(xs, copy_one, &rc);
    int wrc = xdrv_copy_wait(xs);
    if (rc == XDRV_SUCCESS)
        rc = wrc;
    if (rc != XDRV_SUCCESS) {
        xs->bk_n = 0;
        xs->bk_bytes = 0;
        char b1[32];
        return xseg_fail(xs, drv_status(rc),
                         "xseg_sleep: copying %s of live memory to host failed (%s); nothing "
                         "was given back", xseg_fmt_size(t.bytes, b1, sizeof b1),
                         xdrv_error_name(xs, rc));
    }
    return XSEG_OK;
}

/* Unmap and release every handle (cache and live blocks alike); a
 * release that failed is tried once more at once (its handle kept as an
 * orphan).  0 when nothing is left, else the last driver code. */
static int release_all(xseg_t *xs)
{
    int err = 0;
    xarena_release_inside(xs, xs->arena.base, xs->arena.base + xs->arena.size, SIZE_MAX, &err);
    xarena_release_orphans(xs);
    if (!xs->mapped.cur && !xs->arena.norphans)
        return 0; /* a failed release that worked the second time */
    return err ? err : XDRV_INVALID_VALUE;
}

/* ---- wake ---- */

/* The page-aligned union of the live blocks, run by run: calls fn on each
 * maximal run [a, b); stops at the first failure. */
static xseg_status each_live_run(xseg_t *xs, run_fn fn, void *acc)
{
    size_t page = xs->arena.page;
    uintptr_t ra = 0, rb = 0;
    for (const xblock *b = xs->first_block; b; b = b->anext) {
        if (!in_use(b))
            continue;
        uintptr_t a = b->addr & ~(uintptr_t)(page - 1);
        uintptr_t e = (b->addr + b->size + page - 1) & ~(uintptr_t)(page - 1);
        if (rb && a <= rb) {
            if (e > rb)
                rb = e;
            continue;
        }
        if (rb) {
            xseg_status st = fn(xs, ra, rb, acc);
            if (st != XSEG_OK)
                return st;
        }
        ra = a;
        rb = e;
    }
    return rb ? fn(xs, ra, rb, acc) : XSEG_OK;
}

/* The runs wake maps: the live blocks' pages, or the saved ones when whole. */
static xseg_status each_wake_run(xseg_t *xs, run_fn fn, void *ctx)
{
    return xs->sleep_whole ? each_saved_run(xs, fn, ctx) : each_live_run(xs, fn, ctx);
}

static xseg_status count_run(xseg_t *xs, uintptr_t a, uintptr_t b, void *acc)
{
    *(size_t *)acc += xarena_unmapped_bytes(xs, a, b);
    return XSEG_OK;
}

static xseg_status map_live_run(xseg_t *xs, uintptr_t a, uintptr_t b, void *acc)
{
    (void)acc;
    return xarena_ensure_wake(xs, a, b);
}

/* Copy back the backups of blocks still live (address order on both). */
static int restore(xseg_t *xs)
{
    const xblock *b = xs->first_block;
    int rc = XDRV_SUCCESS;
    for (size_t i = 0; i < xs->bk_n && rc == XDRV_SUCCESS; i++) {
        const struct xbackup *r = &xs->bk[i];
        if (xs->sleep_whole) { /* runs: all of them come back */
            rc = xdrv_copy(xs, (void *)r->addr, (const char *)xs->bk_host + r->off, r->size, 1);
            continue;
        }
        while (b && b->addr < r->addr)
            b = b->anext;
        if (!b || b->addr != r->addr || b->size != r->size || !in_use(b))
            continue; /* freed while asleep */
        rc = xdrv_copy(xs, (void *)b->addr, (const char *)xs->bk_host + r->off, r->size, 1);
    }
    int wrc = xdrv_copy_wait(xs);
    return rc != XDRV_SUCCESS ? rc : wrc;
}

/* Map and restore; on failure release what was mapped (still asleep). */
static xseg_status wake_locked(xseg_t *xs, const char *what)
{
    size_t need = 0;
    each_wake_run(xs, count_run, &need);
    if (xfam_over_cap(xs, need)) {
        char b1[32], b2[32], b3[32];
        return xseg_fail(xs, XSEG_ERR_OOM,
                         "%s: waking needs %s mapped for the live blocks; mapped (every tag) "
                         "%s, cap %s; the memory stays asleep", what,
                         xseg_fmt_size(need, b1, sizeof b1),
                         xseg_fmt_size(xfam_mapped(xs), b2, sizeof b2),
                         xseg_fmt_size(xfam_cap(xs), b3, sizeof b3));
    }
    xseg_status st = each_wake_run(xs, map_live_run, NULL);
    int rc = XDRV_SUCCESS;
    if (st == XSEG_OK && xs->sleep_mode == XSEG_SLEEP_BACKUP)
        rc = restore(xs);
    if (st == XSEG_OK && rc == XDRV_SUCCESS)
        return XSEG_OK;
    char keep[512];
    snprintf(keep, sizeof keep, "%s", xseg_last_error());
    if (release_all(xs) && xs->mapped.cur) /* nothing mapped for it while asleep */
        (void)release_all(xs);
    char b1[32];
    if (st != XSEG_OK)
        return xseg_fail(xs, st, "%s: mapping %s for the live blocks failed; the memory stays "
                         "asleep (%s)", what, xseg_fmt_size(need, b1, sizeof b1), keep);
    return xseg_fail(xs, drv_status(rc),
                     "%s: copying the backup of %s back failed (%s); the memory stays asleep",
                     what, xseg_fmt_size(xs->bk_bytes, b1, sizeof b1), xdrv_error_name(xs, rc));
}

/* ---- entry points (tags.c), xs->lock not held ---- */

xseg_status xsleep_sleep(xseg_t *xs, xseg_sleep_mode mode)
{
    uint64_t t0 = now_ns();
    xlock_lock(&xs->lock);
    if (atomic_load(&xs->asleep)) {
        xlock_unlock(&xs->lock);
        return xseg_fail(xs, XSEG_ERR_STATE, "xseg_sleep: tag %d is asleep already", xs->tag);
    }
    atomic_store(&xs->asleep, 1); /* thread caches miss from now on */
    settle(xs);
    xseg_status st = wait_streams(xs);
    xs->bk_n = 0;
    xs->bk_bytes = 0;
    if (st == XSEG_OK && xs->sleep_whole)
        st = save_mapped(xs);
    if (st == XSEG_OK && mode == XSEG_SLEEP_BACKUP)
        st = backup(xs);
    if (st != XSEG_OK) {
        atomic_store(&xs->asleep, 0);
        xlock_unlock(&xs->lock);
        return st;
    }
    xs->sleep_mode = mode;
    size_t live = live_bytes(xs);
    int err = release_all(xs);
    if (err) {
        char b1[32], keep[512];
        size_t left = xs->mapped.cur;
        unsigned kept = xs->arena.norphans;
        st = wake_locked(xs, "xseg_sleep");
        if (st == XSEG_OK) {
            atomic_store(&xs->asleep, 0);
            st = xseg_fail(xs, XSEG_ERR_DRIVER,
                           "xseg_sleep: releasing failed (%s) with %s still mapped and %u "
                           "handles kept for a later release; the memory was mapped again "
                           "and is awake%s", xdrv_error_name(xs, err),
                           xseg_fmt_size(left, b1, sizeof b1), kept,
                           mode == XSEG_SLEEP_BACKUP ? ", contents restored"
                                                     : " (discard: contents lost)");
        } else { /* asleep after all, nothing mapped: xseg_wake can be retried */
            snprintf(keep, sizeof keep, "%s", xseg_last_error());
            xs->sleeps++;
            st = xseg_fail(xs, st, "xseg_sleep: releasing failed (%s), and mapping the "
                           "memory again failed too: it is asleep with nothing mapped "
                           "(xseg_wake may be retried): %s", xdrv_error_name(xs, err), keep);
        }
        xlock_unlock(&xs->lock);
        return st;
    }
    xs->sleeps++;
    xs->last_sleep_ns = now_ns() - t0;
    xseg_hist(xs, XEV_TRIM, 0, live, NULL);
    xseg_shm(xs);
    xlock_unlock(&xs->lock);
    return XSEG_OK;
}

xseg_status xsleep_wake(xseg_t *xs)
{
    uint64_t t0 = now_ns();
    xlock_lock(&xs->lock);
    if (!atomic_load(&xs->asleep)) {
        xlock_unlock(&xs->lock);
        return xseg_fail(xs, XSEG_ERR_STATE, "xseg_wake: tag %d is not asleep", xs->tag);
    }
    xseg_status st = wake_locked(xs, "xseg_wake");
    if (st == XSEG_OK) {
        atomic_store(&xs->asleep, 0);
        xs->wakes++;
        xs->last_wake_ns = now_ns() - t0;
        xseg_shm(xs);
    }
    xlock_unlock(&xs->lock);
    return st;
}

void xsleep_fill(xseg_t *xs, xseg_tag_stats *out)
{
    xlock_lock(&xs->lock);
    out->asleep = atomic_load(&xs->asleep);
    out->mode = xs->sleep_mode;
    xseg_stats st = {.size = sizeof st};
    xseg_fill_stats(xs, &st); /* blocks held by thread caches are not live */
    out->live_bytes = st.allocated_bytes;
    out->mapped_bytes = st.mapped_bytes;
    out->sleeping_bytes = out->asleep ? live_bytes(xs) : 0;
    out->backup_bytes = out->asleep && xs->sleep_mode == XSEG_SLEEP_BACKUP ? xs->bk_bytes : 0;
    out->sleeps = xs->sleeps;
    out->wakes = xs->wakes;
    out->last_sleep_ns = xs->last_sleep_ns;
    out->last_wake_ns = xs->last_wake_ns;
    xlock_unlock(&xs->lock);
}

void xsleep_fini(xseg_t *xs, int call_driver)
{
    if (xs->bk_host && call_driver)
        (void)xdrv_host_free(xs, xs->bk_host);
    xs->bk_host = NULL;
    xs->bk_host_cap = 0;
    free(xs->bk);
    xs->bk = NULL;
    free(xs->sl_bits);
    xs->sl_bits = NULL;
    xs->bk_n = xs->bk_cap = 0;
}
