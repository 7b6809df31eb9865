/* diag.c: diagnostics that walk the block list, next to it: why a pointer
 * is not live (interior pointer, double free, foreign pointer) and the
 * out-of-memory report (message, hint and callback; the caller fills the
 * stats it quotes).  Error paths only: a linear walk is fine here.  Below
 * the free core, which classifies bad frees here.  Called with xs->lock
 * held. */
#include <stdint.h>

#include <stdio.h>
#include <string.h>

#include "internal.h"

static xblock *block_containing(const xseg_t *xs, uintptr_t p)
{
    for (xblock *b = xs->first_block; b; b = b->anext)
        if (p >= b->addr && p < b->addr + b->size)
            return b;
    return NULL;
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

/* Why is p not live?  Inside a live allocation it is an interior pointer;
 * anywhere else in the arena, including blocks freed but still held (thread
 * caches, deferred frees), it was freed. */
xseg_status xdiag_bad_pointer(xseg_t *xs, const void *ptr, const char *what)
{
    uintptr_t p = (uintptr_t)ptr, tag;
    const xarena *ar = &xs->arena;
    if (p < ar->base || p >= ar->base + ar->size)
        return xseg_fail(xs, XSEG_ERR_INVALID_POINTER,
                         "%s: %p was not allocated by this allocator (device %d)", what, ptr,
                         xs->device);
    uintptr_t start = allocation_start(block_containing(xs, p), p);
    if (start && start != p && xseg_live_tag(xs, start, &tag))
        return xseg_fail(xs, XSEG_ERR_INTERIOR_POINTER,
                         "%s: %p points inside a live allocation, not at its start", what, ptr);
    return xseg_fail(xs, XSEG_ERR_DOUBLE_FREE,
                     "%s: %p is not a live allocation: already freed (double free)", what, ptr);
}

/* The config key or action that would help, by the limit that was hit: the
 * cap when the request, rounded as the allocator maps it (block rounding,
 * then whole pages), does not fit in what the cap leaves. */
static const char *oom_hint(xseg_t *xs, size_t size, const char *cause)
{
    if (cause && strstr(cause, "no host memory"))
        return "free host memory (xseg's bookkeeping could not grow: malloc failed), "
               "not device memory";
    size_t page = xs->arena.page, r = xseg_round_size(xs, size);
    size_t cap = xfam_cap(xs), mapped = xfam_mapped(xs); /* every tag's memory */
    r = r > SIZE_MAX - page ? SIZE_MAX : (r + page - 1) / page * page;
    if (cap != SIZE_MAX && (mapped >= cap || r > cap - mapped))
        return "raise max_mapped or memory_fraction (the cap is the limit: the request, "
               "rounded up to whole pages, does not fit under it), or free memory";
    return "free memory (the device is full): xseg_trim other allocators, or lower "
           "release_threshold / set gc_threshold in other processes using xseg";
}

static void oom_notify(xseg_t *xs, size_t size, const xseg_stats *st, size_t device_free,
                       const char *hint)
{
    xseg_hist(xs, XEV_OOM, 0, size, NULL);
    if (!xs->oom_cb)
        return;
    xseg_oom_info info = {xs->device, size, xs->allocated.cur, xs->mapped.cur,
                          st->cached_bytes.current, xs->cap == SIZE_MAX ? 0 : xs->cap,
                          st->largest_free_block, device_free, hint, xseg_last_error()};
    xs->oom_cb(&info, xs->oom_user);
}

xseg_status xdiag_oom_report(xseg_t *xs, size_t size, const xseg_stats *stats,
                             const char *cause)
{
    char why[256] = "";
    if (cause && *cause) /* copied: it is the message about to be rewritten */
        snprintf(why, sizeof why, "; cause: %s", cause);
    const char *hint = oom_hint(xs, size, why);
    char r[32], a[32], m[32], c[32], cp[32], l[32], f[32], fm[32], fam[96] = "";
    size_t fr = 0, total = 0, cap = xfam_cap(xs);
    xdrv_mem_info(xs, &fr, &total); /* counted (drv.c) */
    xs->ooms++;
    if (xs->parent) /* a tag's allocator: the cap counts every tag's memory */
        snprintf(fam, sizeof fam, " (tag %d; every tag: %s)", xs->tag,
                 xseg_fmt_size(xfam_mapped(xs), fm, sizeof fm));
    xseg_fail(xs, XSEG_ERR_OOM,
              "xseg: out of memory on device %d: requested %s (%zu B); in use %s, "
              "mapped %s%s, cached %s, cap %s, largest free block %s, device free %s; hint: %s%s",
              xs->device, xseg_fmt_size(size, r, sizeof r), size,
              xseg_fmt_size(xs->allocated.cur, a, sizeof a),
              xseg_fmt_size(xs->mapped.cur, m, sizeof m), fam,
              xseg_fmt_size(stats->cached_bytes.current, c, sizeof c),
              cap == SIZE_MAX ? "none" : xseg_fmt_size(cap, cp, sizeof cp),
              xseg_fmt_size(stats->largest_free_block, l, sizeof l), xseg_fmt_size(fr, f, sizeof f),
              hint, why);
    oom_notify(xs, size, stats, fr, hint);
    return XSEG_ERR_OOM;
}
