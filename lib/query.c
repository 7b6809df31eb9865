/* query.c: pointer queries (xseg_block_range): which live allocation holds
 * a pointer, given its first byte, its last or any byte between, and that
 * allocation's start and sizes.  The preload library answers
 * cuMemGetAddressRange and cuPointerGetAttribute with it
 * (docs/preload.md).
 *  - A start is a key of the live map (api.c, small.c): O(1).
 *  - An interior pointer: binary search in a snapshot of the arena's
 *    allocated blocks in address order (slabs with their slot size),
 *    O(log blocks).  The snapshot is taken from the block list on demand
 *    (O(blocks)) and kept; it may be stale, so every answer it gives is
 *    checked against the live map and the block record there, and a
 *    snapshot that fails the check (or holds no block for the pointer) is
 *    taken again before the answer is "none".  A stale snapshot therefore
 *    costs a walk, never a wrong answer: a "none" always comes from a
 *    snapshot taken under the same hold of the lock.
 *  - A dedicated block (share.c) outside the arena: share.c walks them.
 * Called without xs->lock; takes it (the owner's in a tag family) as
 * xseg_block_size does. */
#include <stdlib.h>

#include "internal.h"

typedef struct xq_ent {
    uintptr_t addr;
    size_t size;
    uint32_t slot; /* a slab's slot size; 0: one allocation */
} xq_ent;

struct xqsnap {
    size_t n;
    xq_ent e[];
};

/* What a snapshot entry says about p, checked against the live map. */
enum { Q_STALE = -1, Q_FREED = 0, Q_LIVE = 1 };

/* ---- the snapshot ---- */

static size_t count_allocated(const xseg_t *xs)
{
    size_t n = 0;
    for (const xblock *b = xs->first_block; b; b = b->anext)
        n += !(b->flags & XB_FREE);
    return n;
}

/* Take the snapshot again; 0 when there is no memory for it (the old one
 * is dropped: the walk of find_walk answers instead). */
static int snap_take(xseg_t *xs)
{
    size_t n = count_allocated(xs), i = 0;
    free(xs->qsnap);
    xs->qsnap = malloc(sizeof *xs->qsnap + (n ? n : 1) * sizeof(xq_ent));
    if (!xs->qsnap)
        return 0;
    for (const xblock *b = xs->first_block; b && i < n; b = b->anext) {
        if (b->flags & XB_FREE)
            continue;
        uint32_t slot = (b->flags & XB_SLAB) && b->slab ? b->slab->slot_size : 0;
        xs->qsnap->e[i++] = (xq_ent){b->addr, b->size, slot};
    }
    xs->qsnap->n = i;
    return 1;
}

/* The entry whose range holds p (the last one starting at or below p), or
 * NULL. */
static const xq_ent *snap_find(const struct xqsnap *s, uintptr_t p)
{
    size_t lo = 0, hi = s ? s->n : 0;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->e[mid].addr <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (!lo || p - s->e[lo - 1].addr >= s->e[lo - 1].size)
        return NULL;
    return &s->e[lo - 1];
}

/* ---- checking an entry against the live map ---- */

static int live_or_freed(xseg_t *xs, uintptr_t start, uintptr_t *tag)
{
    return xseg_live_tag(xs, start, tag) ? Q_LIVE : Q_FREED;
}

/* A block entry: its start must still be a live-map key whose block holds
 * p.  Held in a thread cache: freed by the program. */
static int check_block(xseg_t *xs, const xq_ent *e, uintptr_t p, uintptr_t *start,
                       uintptr_t *tag)
{
    uintptr_t t;
    if (!xseg_ptrmap_get(&xs->live, e->addr, &t) || (t & 1) ||
        p - e->addr >= ((const xblock *)t)->size)
        return Q_STALE;
    *start = e->addr;
    return live_or_freed(xs, e->addr, tag);
}

/* A slab entry: the slot holding p must be a live-map key of the same slab
 * (same place, same slot size). */
static int check_slot(xseg_t *xs, const xq_ent *e, uintptr_t p, uintptr_t *start,
                      uintptr_t *tag)
{
    uintptr_t k = e->addr + (p - e->addr) / e->slot * e->slot, t;
    if (!xseg_ptrmap_get(&xs->live, k, &t) || !(t & 1))
        return Q_STALE;
    const xslab *sl = (const xslab *)(t & ~(uintptr_t)1);
    if (sl->blk->addr != e->addr || sl->slot_size != e->slot)
        return Q_STALE;
    *start = k;
    return live_or_freed(xs, k, tag);
}

static int check(xseg_t *xs, const xq_ent *e, uintptr_t p, uintptr_t *start, uintptr_t *tag)
{
    if (!e)
        return Q_STALE;
    return e->slot ? check_slot(xs, e, p, start, tag) : check_block(xs, e, p, start, tag);
}

/* No memory for a snapshot: the block list itself, walked. */
static int find_walk(xseg_t *xs, uintptr_t p, uintptr_t *start, uintptr_t *tag)
{
    const xblock *b = xs->first_block;
    while (b && p - b->addr >= b->size)
        b = b->anext;
    if (!b || (b->flags & XB_FREE))
        return Q_FREED;
    xq_ent e = {b->addr, b->size, (b->flags & XB_SLAB) && b->slab ? b->slab->slot_size : 0};
    int r = check(xs, &e, p, start, tag);
    return r == Q_STALE ? Q_FREED : r;
}

/* The live allocation holding p (xs->lock held): Q_LIVE with *start and
 * *tag, or Q_FREED (none). */
static int find_locked(xseg_t *xs, uintptr_t p, uintptr_t *start, uintptr_t *tag)
{
    if (xseg_ptrmap_get(&xs->live, p, tag)) { /* a start */
        *start = p;
        return live_or_freed(xs, p, tag);
    }
    int r = check(xs, snap_find(xs->qsnap, p), p, start, tag);
    if (r != Q_STALE)
        return r;
    if (!snap_take(xs))
        return find_walk(xs, p, start, tag);
    r = check(xs, snap_find(xs->qsnap, p), p, start, tag);
    return r == Q_STALE ? Q_FREED : r; /* the snapshot is current: none */
}

/* ---- the entry point ---- */

static void put(void **base, size_t *rounded, size_t *requested, uintptr_t b, size_t r,
                size_t q)
{
    if (base)
        *base = (void *)b;
    if (rounded)
        *rounded = r;
    if (requested)
        *requested = q;
}

/* ptr outside xs's range: a dedicated block of its family, or nobody's. */
static xseg_status outside(xseg_t *xs, const void *ptr, void **base, size_t *rounded,
                           size_t *requested)
{
    uintptr_t b = 0;
    size_t r = 0, q = 0;
    if (xfam(xs)->share && xshare_block_range(xs, ptr, &b, &r, &q)) {
        put(base, rounded, requested, b, r, q);
        return XSEG_OK;
    }
    return xseg_fail(xs, XSEG_ERR_INVALID_POINTER,
                     "xseg_block_range: %p was not allocated by this allocator (device %d)",
                     ptr, xs->device);
}

xseg_status xseg_block_range(xseg_t *xs, const void *ptr, void **base, size_t *rounded,
                             size_t *requested)
{
    if (!xs)
        return xseg_fail(NULL, XSEG_ERR_INVALID_ARG, "xseg_block_range: allocator is NULL");
    if (xseg_forked(xs))
        return xseg_check_fork(xs, "xseg_block_range");
    if (!ptr)
        return xseg_fail(xs, XSEG_ERR_INVALID_ARG, "xseg_block_range: pointer is NULL");
    xseg_t *o = xseg_range_owner(xs->parent ? xs->parent : xs, (uintptr_t)ptr);
    if (!o)
        return outside(xs, ptr, base, rounded, requested);
    uintptr_t start = 0, tag = 0;
    xlock_lock(&o->lock);
    int r = find_locked(o, (uintptr_t)ptr, &start, &tag);
    size_t b = 0, q = 0;
    if (r == Q_LIVE)
        xseg_sizes_of(start, tag, &b, &q);
    xlock_unlock(&o->lock);
    if (r == Q_LIVE) {
        put(base, rounded, requested, start, b, q);
        return XSEG_OK;
    }
    return xseg_fail(o, XSEG_ERR_INVALID_POINTER,
                     "xseg_block_range: %p lies in no live allocation of the allocator of "
                     "device %d (freed, or never handed out)", ptr, o->device);
}
