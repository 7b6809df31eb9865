/* small.c: pooled fixed size classes for small requests.  A slab is one
 * arena block cut into equal slots; each stream keeps a list of its slabs
 * that have free slots per class, so a slot freed on a stream is reused by
 * that stream at once.  Classes: 512 B steps up to 4 KiB, then four per
 * doubling up to small_size. */
#include <stdlib.h>
#include <string.h>

#include "debug.h"
#include "internal.h"

/* A slab: SLAB_SLOTS slots, within [SLAB_MIN, SLAB_MAX].  Few slots: the free
 * slots of slabs in use at a peak are memory nobody else can take
 * (docs/design.md, "Blocks"). */
#define SLAB_MIN (64u << 10)
#define SLAB_MAX (256u << 10)
#define SLAB_SLOTS 4u

static void add_class(xseg_t *xs, uint32_t size)
{
    if (xs->nclasses < XSEG_MAX_CLASSES)
        xs->class_size[xs->nclasses++] = size;
}

int xsmall_init(xseg_t *xs)
{
    uint32_t limit = (uint32_t)((xs->conf.small_size + 511) / 512 * 512);
    xs->nclasses = 0;
    for (uint32_t c = 512; c <= 4096 && c <= limit; c += 512)
        add_class(xs, c);
    for (uint32_t base = 4096; base < limit; base *= 2)
        for (uint32_t q = 1; q <= 4; q++)
            if (base + q * (base / 4) <= limit)
                add_class(xs, base + q * (base / 4));
    if (xs->class_size[xs->nclasses - 1] < limit)
        add_class(xs, limit);
    xs->class_of = malloc((limit >> 9) + 1);
    if (!xs->class_of)
        return -1;
    uint32_t c = 0;
    for (uint32_t i = 0; i <= (limit >> 9); i++) {
        while (c + 1 < xs->nclasses && xs->class_size[c] < i * 512u)
            c++;
        xs->class_of[i] = (uint8_t)c;
    }
    return 0;
}

static void unlink_slab(xslab *sl)
{
    xstream *s = sl->owner;
    if (!sl->listed)
        return;
    xlist_remove(&s->partial[sl->cls], &sl->link);
    sl->listed = 0;
}

static void link_slab(xslab *sl)
{
    xstream *s = sl->owner;
    XSEG_ASSERT(!sl->listed && sl->nfree > 0);
    xlist_push_front(&s->partial[sl->cls], &sl->link);
    sl->listed = 1;
}

/* An empty slab kept for its stream and class goes on xs->kept_slabs, so
 * that growth over the release threshold finds it without a scan
 * (xsmall_drop_kept); it leaves the list when a slot is taken again. */
static void keep_slab(xseg_t *xs, xslab *sl)
{
    xlist_push_back(&xs->kept_slabs, &sl->kept);
    sl->is_kept = 1;
}

static void unkeep_slab(xseg_t *xs, xslab *sl)
{
    if (!sl->is_kept)
        return;
    xlist_remove(&xs->kept_slabs, &sl->kept);
    sl->is_kept = 0;
}

/* Slab metadata of class sl->cls, kept for the next slab of that class. */
static void spare_push(xseg_t *xs, xslab *sl)
{
    sl->spare_next = xs->spare_slabs[sl->cls];
    xs->spare_slabs[sl->cls] = sl;
}

/* The block goes back to the arena; the metadata is kept for reuse, never
 * freed while the allocator lives (thread caches may read its gen words). */
static void slab_destroy(xseg_t *xs, xslab *sl)
{
    XSEG_ASSERT(sl->nfree == sl->nslots && sl->blk->slab == sl);
    unlink_slab(sl);
    unkeep_slab(xs, sl);
    xblock *b = sl->blk;
    b->slab = NULL;
    b->flags &= ~XB_SLAB;
    spare_push(xs, sl);
    xblk_free(xs, b);
}

static xslab *spare_of_class(xseg_t *xs, int cls)
{
    xslab *sl = xs->spare_slabs[cls];
    if (sl)
        xs->spare_slabs[cls] = sl->spare_next;
    return sl;
}

static xseg_status slab_new(xseg_t *xs, xstream *s, int cls, xslab **out)
{
    uint32_t sz = xs->class_size[cls];
    size_t bytes = (size_t)sz * SLAB_SLOTS;
    bytes = bytes < SLAB_MIN ? SLAB_MIN : bytes > SLAB_MAX ? SLAB_MAX : bytes;
    uint32_t n = (uint32_t)(bytes / sz);
    if (!n)
        n = 1; /* a class above SLAB_MAX (small_size up to 1 MiB): one slot */
    xslab *sl = spare_of_class(xs, cls);
    if (!sl) {
        sl = calloc(1, sizeof *sl);
        /* rq and gen are written by thread caches' fast paths */
        uint32_t *nf = malloc(n * sizeof *nf), *rq = xseg_calloc_lines(n * sizeof *rq);
        _Atomic uint64_t *gen = xseg_calloc_lines(n * sizeof *gen);
        if (!sl || !nf || !rq || !gen) {
            free(sl);
            free(nf);
            free(rq);
            free(gen);
            return xseg_fail(xs, XSEG_ERR_OOM, "xseg: no host memory for a slab of %u slots", n);
        }
        *sl = (xslab){.cls = (uint32_t)cls, .next_free = nf, .req = rq, .gen = gen};
    }
    xblock *b = NULL;
    xseg_status st = xblk_alloc(xs, s, (size_t)n * sz, (size_t)n * sz, &b);
    if (st != XSEG_OK) {
        spare_push(xs, sl);
        return st;
    }
    for (uint32_t i = 0; i < n; i++)
        sl->next_free[i] = i + 1;
    sl->blk = b;
    sl->link.prev = sl->link.next = NULL;
    sl->spare_next = NULL;
    sl->owner = s;
    sl->slot_size = sz;
    sl->nslots = sl->nfree = n;
    sl->free_head = 0;
    sl->listed = 0;
    b->flags |= XB_SLAB;
    b->slab = sl;
    link_slab(sl);
    *out = sl;
    return XSEG_OK;
}

/* Slab sl (listed) has every slot free.  Keep one empty slab per class and
 * stream, on xs->kept_slabs; give back the others, and every one of a
 * retired stream (nothing allocates from it again).  So every empty slab
 * is a kept one (xseg_check asserts it), and xsmall_drop_kept finds them
 * all without a scan. */
static void slab_emptied(xseg_t *xs, xslab *sl)
{
    if (sl->link.prev || sl->link.next || sl->owner->retired ||
        xs->conf.release_threshold == XSEG_RELEASE_NOW)
        slab_destroy(xs, sl);
    else
        keep_slab(xs, sl);
}

xseg_status xsmall_alloc(xseg_t *xs, xstream *s, int cls, size_t size, void **out)
{
    xlist_node *first = xlist_first(&s->partial[cls]);
    xslab *sl = first ? XLIST_ENTRY(first, xslab, link) : NULL;
    if (!sl) {
        xseg_status st = slab_new(xs, s, cls, &sl);
        if (st != XSEG_OK)
            return st;
    }
    uint32_t slot = sl->free_head;
    XSEG_ASSERT(sl->listed && sl->nfree > 0 && slot < sl->nslots && !sl->req[slot]);
    uintptr_t addr = sl->blk->addr + (uintptr_t)slot * sl->slot_size;
    if (xseg_ptrmap_put(&xs->live, addr, (uintptr_t)sl | 1) != 0) {
        if (sl->nfree == sl->nslots && !sl->is_kept)
            slab_emptied(xs, sl); /* a new slab nothing took: kept or given back */
        return xseg_fail(xs, XSEG_ERR_OOM, "xseg: no host memory to track an allocation");
    }
    unkeep_slab(xs, sl);
    sl->free_head = sl->next_free[slot];
    sl->req[slot] = (uint32_t)size;
    if (--sl->nfree == 0)
        unlink_slab(sl);
    *out = (void *)addr;
    return XSEG_OK;
}

void xsmall_free(xseg_t *xs, xslab *sl, uintptr_t addr)
{
    uint32_t slot = (uint32_t)((addr - sl->blk->addr) / sl->slot_size);
    XSEG_ASSERT((addr - sl->blk->addr) % sl->slot_size == 0 && slot < sl->nslots);
    XSEG_ASSERT(sl->nfree < sl->nslots && sl->req[slot] != 0);
    sl->req[slot] = 0;
    sl->next_free[slot] = sl->free_head;
    sl->free_head = slot;
    sl->nfree++;
    if (!sl->listed)
        link_slab(sl);
    if (sl->nfree == sl->nslots)
        slab_emptied(xs, sl);
}

uint32_t xsmall_requested(const xslab *sl, uintptr_t addr)
{
    /* atomic: a thread cache may rewrite a live slot's request meanwhile */
    return __atomic_load_n(&sl->req[(addr - sl->blk->addr) / sl->slot_size], __ATOMIC_RELAXED);
}

void xsmall_drop_stream(xseg_t *xs, xstream *s)
{
    for (uint32_t c = 0; c < xs->nclasses; c++) {
        xlist_node *n = xlist_first(&s->partial[c]);
        while (n) {
            xslab *sl = XLIST_ENTRY(n, xslab, link);
            n = xlist_next(n);
            if (sl->nfree == sl->nslots)
                slab_destroy(xs, sl);
        }
    }
}

/* Growth over the release threshold: the empty slabs kept for reuse go
 * back to free space first.  Each holds 64-256 KiB of a page that nothing
 * live may share; on cuda_churn's sequence (log-uniform sizes on three
 * streams) 54 of them held 5 pages mapped at the live peak.  The next
 * request of their class makes a slab again, from cached memory. */
void xsmall_drop_kept(xseg_t *xs)
{
    while (!xlist_empty(&xs->kept_slabs))
        slab_destroy(xs, XLIST_ENTRY(xlist_first(&xs->kept_slabs), xslab, kept));
}

static void free_slab_meta(xslab *sl)
{
    free(sl->next_free);
    free(sl->req);
    free((void *)sl->gen);
    free(sl);
}

/* Frees slab metadata only; the arena itself is torn down by the caller. */
void xsmall_fini(xseg_t *xs)
{
    for (xblock *b = xs->first_block; b; b = b->anext)
        if (b->flags & XB_SLAB)
            free_slab_meta(b->slab);
    for (uint32_t c = 0; c < XSEG_MAX_CLASSES; c++)
        while (xs->spare_slabs[c]) {
            xslab *sl = xs->spare_slabs[c];
            xs->spare_slabs[c] = sl->spare_next;
            free_slab_meta(sl);
        }
    free(xs->class_of);
    xs->class_of = NULL;
}
