/* check.c: xseg_check, the walker over the allocator's invariants.  Where
 * two structures hold the same fact (a block's flag and the list it is on,
 * a counter and the blocks it sums, the page bitmap and the handle table),
 * it compares them, under the allocator's lock.  One small function per
 * invariant; the first broken one is reported as XSEG_ERR_INTERNAL with its
 * name and the block (address, size) in xseg_last_error().  It changes
 * nothing but mark bits in xblock.flags, set and cleared again under the
 * lock.  Available in every build; linear in blocks, slabs, live
 * allocations and pages (a bitmap scan), so tests may call it after every
 * operation.
 *
 * What may change without xs->lock (thread caches, tcache.c) is checked
 * only where it is stable: a held bit (generation's low bit) may flip
 * under the walk, but only on a live allocation; requested sizes are
 * compared with the counter only while no thread cache is registered. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bitmap.h"
#include "internal.h"

/* Marks set by the walk (bits above every XB_ flag), cleared at the end. */
#define CK_LISTED (1u << 28)  /* in the address-ordered block list */
#define CK_INDEXED (1u << 29) /* found in a free index */
#define CK_LRU (1u << 30)     /* found in the LRU */
#define CK_LIVE (1u << 31)    /* in the live map or the pending frees */
#define CK_MARKS (CK_LISTED | CK_INDEXED | CK_LRU | CK_LIVE)
#define CK_FLAGS (XB_FREE | XB_LRU | XB_SLAB | XB_MOVED | XB_RELEASING)
/* Blocks out of use that hold no allocation: free, moved, being released. */
#define CK_OUT (XB_FREE | XB_MOVED | XB_RELEASING)
#define CK_MAX_SLOTS 4096u    /* a slab holds at most 2 MiB / 512 B slots */
#define CK_LIMIT ((size_t)1 << 40) /* longer lists are cycles */

typedef struct ck {
    xseg_t *xs;
    int failed;
    xseg_status st;            /* XSEG_ERR_INTERNAL, or OOM for the walk's own memory */
    size_t nblocks, nfree, nlru, nmoved, nlisted_slabs, nkept_slabs;
    size_t used;               /* bytes of blocks in use (arena_used) */
    size_t live, live_bytes;   /* live map: entries, their block/slot bytes */
    uint64_t live_req;         /* their requested bytes */
    xstream **streams;         /* live and gone stream states, sorted */
    size_t nstreams;
} ck;

/* Report the first broken invariant; returns 0 (callers `return bad(...)`). */
__attribute__((format(printf, 4, 5)))
static int bad(ck *c, const char *inv, const xblock *b, const char *fmt, ...)
{
    if (c->failed++)
        return 0;
    char detail[400], where[96] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    if (b)
        snprintf(where, sizeof where, " at block %#lx (%zu bytes)", (unsigned long)b->addr,
                 b->size);
    xseg_fail(c->xs, XSEG_ERR_INTERNAL, "xseg_check: invariant \"%s\" broken%s: %s", inv, where,
              detail);
    return 0;
}

/* ---- stream states ---- */

static int ptr_cmp(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t) * (xstream *const *)a, y = (uintptr_t) * (xstream *const *)b;
    return x < y ? -1 : x > y;
}

static int known_stream(const ck *c, const xstream *s)
{
    return bsearch(&s, c->streams, c->nstreams, sizeof *c->streams, ptr_cmp) != NULL;
}

static size_t list_len(const xstream *s)
{
    size_t n = 0;
    for (; s && n < CK_LIMIT; s = s->next_all)
        n++;
    return n;
}

/* Live streams are in the stream map and not gone; gone ones are counted
 * in ngone; no stream has completed past its own epoch. */
static int ck_streams(ck *c)
{
    xseg_t *xs = c->xs;
    size_t nlive = list_len(xs->all_streams), ngone = list_len(xs->gone_streams);
    if (nlive == CK_LIMIT || ngone == CK_LIMIT)
        return bad(c, "stream lists end", NULL, "a stream list has a cycle");
    if (ngone != xs->ngone)
        return bad(c, "gone streams counted", NULL, "%zu gone stream states, ngone %zu", ngone,
                   xs->ngone);
    size_t mapped = xs->streams.count + !!xs->streams.has_zero; /* key 0: the NULL stream */
    if (nlive != mapped)
        return bad(c, "live streams mapped", NULL, "%zu live streams, %zu in the stream map",
                   nlive, mapped);
    c->streams = malloc((nlive + ngone + 1) * sizeof *c->streams);
    if (!c->streams) {
        c->failed++;
        c->st = xseg_fail(xs, XSEG_ERR_OOM, "xseg_check: no host memory for %zu stream "
                          "pointers", nlive + ngone);
        return 0;
    }
    for (int gone = 0; gone < 2; gone++)
        for (xstream *s = gone ? xs->gone_streams : xs->all_streams; s; s = s->next_all) {
            uintptr_t v = 0;
            if (s->gone != gone)
                return bad(c, "gone flag matches list", NULL, "stream %p: gone %d on the %s list",
                           s->handle, s->gone, gone ? "gone" : "live");
            if (!gone && (!xseg_ptrmap_get(&xs->streams, (uintptr_t)s->handle, &v) ||
                          v != (uintptr_t)s))
                return bad(c, "live streams mapped", NULL, "stream %p not in the stream map",
                           s->handle);
            if (s->done > s->epoch)
                return bad(c, "stream epochs", NULL, "stream %p: done %llu > epoch %llu",
                           s->handle, (unsigned long long)s->done,
                           (unsigned long long)s->epoch);
            c->streams[c->nstreams++] = s;
        }
    qsort(c->streams, c->nstreams, sizeof *c->streams, ptr_cmp);
    return 1;
}

/* ---- the address-ordered block list ---- */

/* One block's own flags, owner and epoch. */
static int ck_block_flags(ck *c, const xblock *b)
{
    uint32_t f = b->flags;
    if (f & ~(uint32_t)CK_FLAGS)
        return bad(c, "known flags", b, "flags %#x", f);
    if ((f & XB_FREE) && (f & (XB_SLAB | XB_MOVED)))
        return bad(c, "free blocks hold no slab and no moved mapping", b, "flags %#x", f);
    if ((f & XB_LRU) && !(f & XB_FREE))
        return bad(c, "LRU blocks are free", b, "flags %#x", f);
    if ((f & XB_SLAB) && (f & XB_MOVED))
        return bad(c, "slab blocks are not moved", b, "flags %#x", f);
    if ((f & XB_RELEASING) && f != XB_RELEASING + (f & CK_MARKS))
        return bad(c, "blocks being released are nothing else", b, "flags %#x", f);
    if (b->owner && !known_stream(c, b->owner))
        return bad(c, "owner is a stream state", b, "owner %p unknown", (void *)b->owner);
    if ((f & XB_FREE) && !b->owner && b->epoch)
        return bad(c, "neutral free blocks carry epoch 0", b, "epoch %llu",
                   (unsigned long long)b->epoch);
    if ((f & XB_FREE) && b->owner && b->epoch > b->owner->epoch)
        return bad(c, "free epochs not ahead of their stream", b, "epoch %llu, stream's %llu",
                   (unsigned long long)b->epoch, (unsigned long long)b->owner->epoch);
    return 1;
}

/* Two free neighbours of the same owner would have been merged (coalesce). */
static int ck_coalesced(ck *c, const xblock *b)
{
    const xblock *n = b->anext;
    if (n && (b->flags & XB_FREE) && (n->flags & XB_FREE) && b->owner == n->owner)
        return bad(c, "free neighbours of one owner are merged", b,
                   "next block %#lx (%zu bytes) is free with the same owner",
                   (unsigned long)n->addr, n->size);
    return 1;
}

/* Contiguous from the arena's base to its end, links both ways. */
static int ck_block_list(ck *c)
{
    xseg_t *xs = c->xs;
    const xarena *ar = &xs->arena;
    xblock *b = xs->first_block;
    if (!b || b->addr != ar->base || b->aprev)
        return bad(c, "block list starts at the arena's base", b, "arena base %#lx",
                   (unsigned long)ar->base);
    for (; b; b = b->anext) {
        if (!b->size || b->addr + b->size > ar->base + ar->size)
            return bad(c, "blocks lie inside the arena", b, "arena ends at %#lx",
                       (unsigned long)(ar->base + ar->size));
        if (b->anext && (b->anext->aprev != b || b->anext->addr != b->addr + b->size))
            return bad(c, "block list contiguous", b, "next block at %#lx, its aprev %p",
                       (unsigned long)b->anext->addr, (void *)b->anext->aprev);
        if (!b->anext && b->addr + b->size != ar->base + ar->size)
            return bad(c, "block list covers the arena", b, "last block ends before %#lx",
                       (unsigned long)(ar->base + ar->size));
        if (!ck_block_flags(c, b) || !ck_coalesced(c, b))
            return 0;
        b->flags |= CK_LISTED;
        c->nblocks++;
        c->nfree += !!(b->flags & XB_FREE);
        c->nlru += !!(b->flags & XB_LRU);
        c->nmoved += !!(b->flags & XB_MOVED);
        if (!(b->flags & CK_OUT))
            c->used += b->size;
    }
    return 1;
}

/* ---- free indexes ---- */

/* Any bucket of a level not empty?  (No early exit: vectorizes.) */
static uintptr_t any_head(xblock *const *heads)
{
    uintptr_t x = 0;
    for (unsigned sl = 0; sl < XSEG_SL_COUNT; sl++)
        x |= (uintptr_t)heads[sl];
    return x;
}

/* One bucket: each block is listed, free, of this owner and bucket, once. */
static int ck_bucket(ck *c, xblock *h, const xstream *owner, unsigned fl, unsigned sl,
                     size_t *n, size_t *bytes)
{
    const xblock *prev = NULL;
    for (xblock *b = h; b; prev = b, b = b->fnext) {
        unsigned f, s;
        xfi_bucket(b->size, &f, &s);
        if (b->fprev != prev)
            return bad(c, "free index links", b, "fprev %p, expected %p", (void *)b->fprev,
                       (void *)prev);
        if (!(b->flags & CK_LISTED) || !(b->flags & XB_FREE))
            return bad(c, "indexed blocks are listed free blocks", b, "flags %#x", b->flags);
        if (b->flags & CK_INDEXED)
            return bad(c, "a free block is indexed once", b, "found again in bucket %u/%u", fl,
                       sl);
        if (b->owner != owner)
            return bad(c, "free block in its owner's index", b, "owner %p, index of %p",
                       (void *)b->owner, (const void *)owner);
        if (f != fl || s != sl)
            return bad(c, "bucket matches size", b, "in bucket %u/%u, size says %u/%u", fl, sl,
                       f, s);
        b->flags |= CK_INDEXED;
        ++*n;
        *bytes += b->size;
    }
    return 1;
}

/* Bitmaps match the buckets; count and bytes match the blocks. */
static int ck_index(ck *c, xfreeidx *f, const xstream *owner)
{
    size_t n = 0, bytes = 0;
    for (unsigned fl = 0; fl < XSEG_FL_COUNT; fl++) {
        if (!!(f->fl_bits & (1ull << fl)) != !!f->sl_bits[fl])
            return bad(c, "free index bitmaps", NULL, "index of %p: level %u bit %d, sl bits %#x",
                       (const void *)owner, fl, !!(f->fl_bits & (1ull << fl)), f->sl_bits[fl]);
        if (!f->sl_bits[fl] && !any_head(f->heads[fl]))
            continue; /* the common case: an empty level */
        for (unsigned sl = 0; sl < XSEG_SL_COUNT; sl++) {
            xblock *h = f->heads[fl][sl];
            if (!!(f->sl_bits[fl] & (1u << sl)) != !!h)
                return bad(c, "free index bitmaps", h, "index of %p: bucket %u/%u bit %d",
                           (const void *)owner, fl, sl, !!(f->sl_bits[fl] & (1u << sl)));
            if (!ck_bucket(c, h, owner, fl, sl, &n, &bytes))
                return 0;
        }
    }
    if (n != f->count || bytes != f->bytes)
        return bad(c, "free index counts", NULL, "index of %p: %zu blocks of %zu bytes, "
                   "counted %zu of %zu", (const void *)owner, n, bytes, f->count, f->bytes);
    return 1;
}

/* XB_FREE blocks are exactly the ones in the free indexes. */
static int ck_indexes(ck *c)
{
    if (!ck_index(c, &c->xs->neutral, NULL))
        return 0;
    for (size_t i = 0; i < c->nstreams; i++)
        if (!ck_index(c, &c->streams[i]->idx, c->streams[i]))
            return 0;
    for (const xblock *b = c->xs->first_block; b; b = b->anext)
        if ((b->flags & XB_FREE) && !(b->flags & CK_INDEXED))
            return bad(c, "free blocks are indexed", b, "owner %p", (void *)b->owner);
    return 1;
}

/* ---- LRU and moved mappings ---- */

/* The LRU holds exactly the XB_LRU blocks, each once, linked both ways. */
static int ck_lru(ck *c)
{
    xseg_t *xs = c->xs;
    size_t n = 0;
    xlist_node *prev = NULL;
    for (xlist_node *l = xlist_first(&xs->lru); l; prev = l, l = l->next) {
        xblock *b = xblk_of_lru(l);
        if (l->prev != prev || !(b->flags & CK_LISTED) || !(b->flags & XB_LRU) ||
            (b->flags & CK_LRU))
            return bad(c, "LRU holds listed XB_LRU blocks once", b, "flags %#x, lprev %p",
                       b->flags, (void *)l->prev);
        b->flags |= CK_LRU;
        n++;
    }
    if (xs->lru.last != prev)
        return bad(c, "LRU tail", xblk_of_lru(prev), "tail %p", (void *)xs->lru.last);
    if (n != c->nlru)
        return bad(c, "XB_LRU blocks are in the LRU", NULL, "%zu flagged, %zu in the LRU",
                   c->nlru, n);
    return 1;
}

/* Moved blocks are on xs->moved; unmapping_bytes sums their old mappings. */
static int ck_moved(ck *c)
{
    xseg_t *xs = c->xs;
    size_t n = 0, bytes = 0;
    for (const xlist_node *l = xlist_first(&xs->moved); l && n <= c->nmoved; l = l->next, n++) {
        const xblock *z = xblk_of_lru(l);
        if (!(z->flags & CK_LISTED) || (z->flags & ~CK_MARKS) != XB_MOVED || z->requested > z->size)
            return bad(c, "moved list holds XB_MOVED blocks", z, "flags %#x, old mapping %zu",
                       z->flags, z->requested);
        bytes += z->requested;
    }
    if (n != c->nmoved || bytes != xs->unmapping_bytes)
        return bad(c, "moved blocks counted", NULL, "%zu flagged, %zu listed, %zu bytes, "
                   "unmapping_bytes %zu", c->nmoved, n, bytes, xs->unmapping_bytes);
    return 1;
}

/* ---- live allocations and pending frees ---- */

/* The slab behind a slot tag, if the tag and address make sense. */
static xslab *slot_of(ck *c, uintptr_t addr, uintptr_t tag, uint32_t *slot)
{
    xslab *sl = (xslab *)(tag & ~(uintptr_t)1);
    const xblock *b = sl ? sl->blk : NULL;
    if (!b || !(b->flags & CK_LISTED) || !(b->flags & XB_SLAB) || b->slab != sl) {
        bad(c, "slot tags name listed slabs", b, "address %#lx", (unsigned long)addr);
        return NULL;
    }
    if (addr < b->addr || (addr - b->addr) % sl->slot_size ||
        (addr - b->addr) / sl->slot_size >= sl->nslots) {
        bad(c, "slot addresses start slots", b, "address %#lx, slots of %u", (unsigned long)addr,
            sl->slot_size);
        return NULL;
    }
    *slot = (uint32_t)((addr - b->addr) / sl->slot_size);
    return sl;
}

/* A block tag: a listed block in use, at that address, counted once. */
static int ck_block_tag(ck *c, uintptr_t addr, xblock *b, const char *what)
{
    if (!b || !(b->flags & CK_LISTED) || (b->flags & (XB_FREE | XB_SLAB | XB_MOVED)) ||
        b->addr != addr || (b->flags & CK_LIVE))
        return bad(c, what, b, "address %#lx, flags %#x", (unsigned long)addr,
                   b ? b->flags : 0);
    b->flags |= CK_LIVE;
    return 1;
}

/* Generation of a live allocation: stamped, not ahead of gen_next; a held
 * one (low bit) only with thread caches registered. */
static int ck_gen(ck *c, const xblock *b, uintptr_t addr, uint64_t gen)
{
    if (!gen || (gen & ~1ull) > c->xs->gen_next)
        return bad(c, "live allocations carry a generation", b, "address %#lx, generation "
                   "%llu, last handed out %llu", (unsigned long)addr, (unsigned long long)gen,
                   (unsigned long long)c->xs->gen_next);
    if ((gen & 1) && (!c->xs->tc_on || !c->xs->tcs))
        return bad(c, "held bits only with thread caches", b, "address %#lx held",
                   (unsigned long)addr);
    return 1;
}

/* The recorded request fits the allocation (a slot's is never 0: 0 marks
 * a free slot).  Read only while no thread cache is registered: a cache
 * hit rewrites it without xs->lock. */
static int ck_request(ck *c, const xblock *b, uintptr_t addr, uintptr_t tag, size_t bytes)
{
    size_t req = xseg_requested_of(addr, tag);
    if (req > bytes || ((tag & 1) && !req))
        return bad(c, "live requests fit their allocation", b, "address %#lx, request %zu of "
                   "%zu", (unsigned long)addr, req, bytes);
    c->live_req += req;
    return 1;
}

static void live_one(uintptr_t addr, uintptr_t tag, void *arg)
{
    ck *c = arg;
    if (c->failed)
        return;
    const xblock *b;
    size_t bytes;
    if (tag & 1) {
        uint32_t slot;
        const xslab *sl = slot_of(c, addr, tag, &slot);
        if (!sl)
            return;
        b = sl->blk;
        bytes = sl->slot_size;
    } else {
        if (!ck_block_tag(c, addr, (xblock *)tag, "live blocks are listed, in use, once"))
            return;
        b = (const xblock *)tag;
        bytes = b->size;
    }
    if (!c->xs->tcs && !ck_request(c, b, addr, tag, bytes))
        return;
    if (!ck_gen(c, b, addr, atomic_load_explicit(xseg_gen_of(addr, tag), memory_order_relaxed)))
        return;
    c->live++;
    c->live_bytes += bytes;
}

/* Pending frees: out of the live map, generation 0, each once. */
static int ck_pending(ck *c)
{
    xseg_t *xs = c->xs;
    const xpending *last = NULL;
    for (const xpending *p = xs->pend_head; p; last = p, p = p->next) {
        uintptr_t v;
        const xblock *b = (p->tag & 1) ? NULL : (const xblock *)p->tag;
        uint32_t slot;
        if (!p->uses || xseg_ptrmap_get(&xs->live, p->addr, &v))
            return bad(c, "pending frees are not live", b, "address %#lx", (unsigned long)p->addr);
        if ((p->tag & 1) ? !slot_of(c, p->addr, p->tag, &slot)
                         : !ck_block_tag(c, p->addr, (xblock *)p->tag,
                                         "pending blocks are listed, in use, once"))
            return 0;
        if (atomic_load_explicit(xseg_gen_of(p->addr, p->tag), memory_order_relaxed))
            return bad(c, "pending frees carry generation 0", b, "address %#lx",
                       (unsigned long)p->addr);
    }
    if (xs->pend_tail != last)
        return bad(c, "pending tail", NULL, "tail %p, last %p", (void *)xs->pend_tail,
                   (const void *)last);
    return 1;
}

static int ck_live(ck *c)
{
    xseg_ptrmap_each(&c->xs->live, live_one, c);
    return !c->failed && ck_pending(c);
}

/* Blocks in use (not free, not moved, not slabs) are live or pending;
 * every other block record has generation 0. */
static int ck_in_use(ck *c)
{
    for (const xblock *b = c->xs->first_block; b; b = b->anext) {
        int user = !(b->flags & (CK_OUT | XB_SLAB));
        if (user && !(b->flags & CK_LIVE))
            return bad(c, "blocks in use are live or pending", b, "flags %#x", b->flags);
        if (!user && atomic_load_explicit(&b->gen, memory_order_relaxed))
            return bad(c, "only live blocks carry a generation", b, "flags %#x, generation %llu",
                       b->flags, (unsigned long long)atomic_load(&b->gen));
    }
    return 1;
}

/* ---- slabs ---- */

static int pending_has(const xseg_t *xs, uintptr_t addr, uintptr_t tag)
{
    for (const xpending *p = xs->pend_head; p; p = p->next)
        if (p->addr == addr && p->tag == tag)
            return 1;
    return 0;
}

/* Free list: nfree distinct slots, request and generation 0, then the end. */
static int ck_slab_free_list(ck *c, const xslab *sl, uint64_t *seen)
{
    uint32_t i = sl->free_head;
    for (uint32_t k = 0; k < sl->nfree; k++, i = sl->next_free[i]) {
        if (i >= sl->nslots || (seen[i / 64] >> (i % 64) & 1))
            return bad(c, "slab free list", sl->blk, "slot %u of %u, %u free", i, sl->nslots,
                       sl->nfree);
        if (sl->req[i] || atomic_load_explicit(&sl->gen[i], memory_order_relaxed))
            return bad(c, "free slots carry no request or generation", sl->blk, "slot %u", i);
        seen[i / 64] |= 1ull << (i % 64);
    }
    if (i != sl->nslots)
        return bad(c, "slab free counts match their free lists", sl->blk,
                   "%u free, the list goes on at slot %u", sl->nfree, i);
    return 1;
}

/* Slots not on the free list are live or pending. */
static int ck_slab_used(ck *c, const xslab *sl, const uint64_t *seen)
{
    uintptr_t tag = (uintptr_t)sl | 1, v;
    for (uint32_t i = 0; i < sl->nslots; i++) {
        if (seen[i / 64] >> (i % 64) & 1)
            continue;
        uintptr_t addr = sl->blk->addr + (uintptr_t)i * sl->slot_size;
        if (!(xseg_ptrmap_get(&c->xs->live, addr, &v) && v == tag) &&
            !pending_has(c->xs, addr, tag))
            return bad(c, "used slots are live or pending", sl->blk, "slot %u at %#lx", i,
                       (unsigned long)addr);
    }
    return 1;
}

static int ck_slab(ck *c, const xblock *b)
{
    const xslab *sl = b->slab;
    xseg_t *xs = c->xs;
    if (!sl || sl->blk != b || sl->owner != b->owner || !sl->owner)
        return bad(c, "slab blocks and slabs point at each other", b, "slab %p",
                   (const void *)sl);
    if (sl->cls >= xs->nclasses || sl->slot_size != xs->class_size[sl->cls] || !sl->nslots ||
        sl->nslots > CK_MAX_SLOTS || (size_t)sl->nslots * sl->slot_size > b->size ||
        sl->nfree > sl->nslots)
        return bad(c, "slab geometry", b, "class %u, %u slots of %u, %u free", sl->cls,
                   sl->nslots, sl->slot_size, sl->nfree);
    if (sl->listed != (sl->nfree > 0))
        return bad(c, "slabs with free slots are listed", b, "listed %d, %u free", sl->listed,
                   sl->nfree);
    if (sl->is_kept != (sl->nfree == sl->nslots))
        return bad(c, "kept slabs are the empty ones", b, "kept %d, %u of %u slots free",
                   sl->is_kept, sl->nfree, sl->nslots);
    uint64_t seen[CK_MAX_SLOTS / 64] = {0};
    c->nlisted_slabs += !!sl->listed;
    c->nkept_slabs += !!sl->is_kept;
    return ck_slab_free_list(c, sl, seen) && ck_slab_used(c, sl, seen);
}

/* Each stream's partial lists hold its listed slabs of that class. */
static int ck_partials(ck *c)
{
    size_t n = 0;
    for (size_t i = 0; i < c->nstreams; i++) {
        const xstream *s = c->streams[i];
        for (uint32_t k = 0; k < XSEG_MAX_CLASSES; k++) {
            const xlist_node *prev = NULL;
            for (const xlist_node *l = xlist_first(&s->partial[k]); l; prev = l, l = l->next, n++) {
                const xslab *sl = XLIST_ENTRY(l, const xslab, link);
                if (k >= c->xs->nclasses || l->prev != prev || !sl->listed || sl->owner != s ||
                    sl->cls != k || !sl->blk || sl->blk->slab != sl || n > c->nlisted_slabs)
                    return bad(c, "partial lists hold listed slabs of their stream and class",
                               sl->blk, "stream %p, class %u", s->handle, k);
            }
            if (s->partial[k].last != prev)
                return bad(c, "partial lists hold listed slabs of their stream and class", NULL,
                           "stream %p, class %u: last is not the list's end", s->handle, k);
        }
    }
    if (n != c->nlisted_slabs)
        return bad(c, "listed slabs are on partial lists", NULL, "%zu listed, %zu on lists",
                   c->nlisted_slabs, n);
    return 1;
}

/* xs->kept_slabs holds the kept slabs, each once (growth drops them). */
static int ck_kept(ck *c)
{
    size_t n = 0;
    const xlist_node *prev = NULL;
    for (const xlist_node *l = xlist_first(&c->xs->kept_slabs); l; prev = l, l = l->next, n++) {
        const xslab *sl = XLIST_ENTRY(l, const xslab, kept);
        if (l->prev != prev || !sl->is_kept || !sl->blk || sl->blk->slab != sl ||
            n >= c->nkept_slabs)
            return bad(c, "the kept list holds kept slabs", sl->blk, "%zu kept, entry %zu",
                       c->nkept_slabs, n);
    }
    if (c->xs->kept_slabs.last != prev || n != c->nkept_slabs)
        return bad(c, "kept slabs are on the kept list", NULL, "%zu kept, %zu on the list",
                   c->nkept_slabs, n);
    return 1;
}

static int ck_slabs(ck *c)
{
    for (const xblock *b = c->xs->first_block; b; b = b->anext)
        if ((b->flags & XB_SLAB) && !ck_slab(c, b))
            return 0;
    return ck_partials(c) && ck_kept(c);
}

/* ---- pages and handles ---- */

/* Any nonzero word in a[p, q)?  No early exit, so that it vectorizes: the
 * page table of a large arena is most of the walk's cost. */
static uint32_t any_set(const uint32_t *a, size_t p, size_t q)
{
    uint32_t x = 0;
    for (; p + 16 <= q; p += 16)
        for (unsigned i = 0; i < 16; i++) /* a fixed count: vectorized at -O2 */
            x |= a[p + i];
    for (; p < q; p++)
        x |= a[p];
    return x;
}

/* The handle starting at mapped page p covers pages all mapped to it. */
static int ck_handle_at(ck *c, size_t p, size_t *npages)
{
    const xarena *ar = &c->xs->arena;
    uint32_t h = ar->page_handle[p];
    const xhandle *hd = h && h <= ar->nhandles ? &ar->handles[h] : NULL;
    if (!hd || hd->first_page != p || !hd->npages || p + hd->npages > ar->npages)
        return bad(c, "mapped pages start handles", NULL, "page %zu: handle %u", p, h);
    for (size_t i = p; i < p + hd->npages; i++)
        if (ar->page_handle[i] != h || !(ar->mapped_bits[i / 64] >> (i % 64) & 1))
            return bad(c, "a handle's pages are mapped to it", NULL, "handle %u, page %zu", h, i);
    *npages = hd->npages;
    return 1;
}

/* Page bitmap vs handle table vs the mapped and handle counters. */
static int ck_pages(ck *c)
{
    xseg_t *xs = c->xs;
    const xarena *ar = &xs->arena;
    size_t p = 0, nh = 0, mapped = 0;
    while (p < ar->npages) {
        size_t q = xbm_next(ar->mapped_bits, p, ar->npages, 1);
        if (any_set(ar->page_handle, p, q))
            for (; p < q; p++)
                if (ar->page_handle[p])
                    return bad(c, "unmapped pages have no handle", NULL, "page %zu: handle %u",
                               p, ar->page_handle[p]);
        p = q;
        if (p == ar->npages)
            break;
        size_t n = 0;
        if (!ck_handle_at(c, p, &n))
            return 0;
        nh++;
        mapped += n;
        p += n;
    }
    if (nh != (size_t)ar->nhandles - ar->nfree_handles ||
        xs->handles.cur != nh + ar->norphans + xs->releasing_handles)
        return bad(c, "handles counted", NULL, "%zu mapped, %u slots, %u free, %u orphans, "
                   "counter %llu", nh, ar->nhandles, ar->nfree_handles, ar->norphans,
                   (unsigned long long)xs->handles.cur);
    if (xs->mapped.cur != ((uint64_t)mapped << ar->shift) + xs->releasing_bytes)
        return bad(c, "mapped bytes match the page bitmap", NULL, "%zu pages mapped, counter %llu",
                   mapped, (unsigned long long)xs->mapped.cur);
    return 1;
}

/* Every page under a block in use (slabs included) is mapped; while the
 * memory sleeps (sleep.c), no page is. */
static int ck_block_pages(ck *c)
{
    if (atomic_load(&c->xs->asleep)) {
        if (c->xs->mapped.cur || !xarena_all_unmapped(c->xs, c->xs->arena.base,
                                                      c->xs->arena.base + c->xs->arena.size))
            return bad(c, "nothing is mapped while asleep", NULL, "mapped %llu",
                       (unsigned long long)c->xs->mapped.cur);
        return 1;
    }
    for (const xblock *b = c->xs->first_block; b; b = b->anext)
        if (!(b->flags & CK_OUT) &&
            !xarena_all_mapped(c->xs, b->addr, b->addr + b->size))
            return bad(c, "pages under blocks in use are mapped", b, "%zu bytes unmapped",
                       xarena_unmapped_bytes(c->xs, b->addr, b->addr + b->size));
    return 1;
}

/* ---- counters ---- */

static int ck_counters(ck *c)
{
    xseg_t *xs = c->xs;
    if (xs->arena_used != c->used)
        return bad(c, "arena_used sums the blocks in use", NULL, "counter %zu, blocks %zu",
                   xs->arena_used, c->used);
    if (xs->allocated.cur != c->live_bytes || xs->active.cur != c->live ||
        xs->live.count != c->live)
        return bad(c, "allocated bytes and active blocks sum the live allocations", NULL,
                   "counters %llu bytes, %llu blocks; live %zu bytes, %zu allocations",
                   (unsigned long long)xs->allocated.cur, (unsigned long long)xs->active.cur,
                   c->live_bytes, c->live);
    if (!xs->tcs && xs->requested.cur != c->live_req)
        return bad(c, "requested bytes sum the live requests", NULL, "counter %llu, live %llu",
                   (unsigned long long)xs->requested.cur, (unsigned long long)c->live_req);
    return 1;
}

/* ---- the walk ---- */

static void clear_marks(xseg_t *xs)
{
    for (xblock *b = xs->first_block; b; b = b->anext) {
        b->flags &= ~CK_MARKS;
        if (b->anext && b->anext->addr <= b->addr)
            break; /* a broken list (reported): no cycle here */
    }
}

static xseg_status walk(xseg_t *xs)
{
    ck c = {.xs = xs, .st = XSEG_ERR_INTERNAL};
    int ok = ck_streams(&c) && ck_block_list(&c) && ck_indexes(&c) && ck_lru(&c) &&
             ck_moved(&c) && ck_live(&c) && ck_in_use(&c) && ck_slabs(&c) &&
             ck_block_pages(&c) && ck_pages(&c) && ck_counters(&c);
    clear_marks(xs);
    free(c.streams);
    return ok && !c.failed ? XSEG_OK : c.st;
}

xseg_status xseg_check(xseg_t *xs)
{
    if (!xs)
        return xseg_fail(NULL, XSEG_ERR_INVALID_ARG, "xseg_check: allocator is NULL");
    xseg_status st = xseg_check_fork(xs, "xseg_check");
    if (st != XSEG_OK)
        return st;
    xlock_lock(&xs->lock);
    st = walk(xs);
    xlock_unlock(&xs->lock);
    for (int t = 1; st == XSEG_OK && t < XSEG_MAX_TAGS; t++) { /* its tags' allocators */
        xseg_t *c = atomic_load(&xs->tags[t]);
        if (c)
            st = xseg_check(c);
    }
    return st;
}
