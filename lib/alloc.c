/* alloc.c: the block allocator over the arena: best fit with splitting and
 * coalescing, per-stream free indexes plus a neutral one, the LRU of cached
 * free blocks, growth under caps / GC / release thresholds, and reclaim.
 * Called with xs->lock held. */
#include <stdlib.h>
#include <string.h>

#include "debug.h"
#include "internal.h"

/* ---- block records ---- */

void *xseg_calloc_lines(size_t bytes)
{
    size_t sz = (bytes + XSEG_BLOCK_ALIGN - 1) & ~(size_t)(XSEG_BLOCK_ALIGN - 1);
    if (!sz)
        sz = XSEG_BLOCK_ALIGN;
    void *p = aligned_alloc(XSEG_BLOCK_ALIGN, sz);
    if (p)
        memset(p, 0, sz);
    return p;
}

xblock *xblock_new(xseg_t *xs)
{
    xblock *b = xs->spare_blocks;
    if (b) {
        xs->spare_blocks = b->fnext;
        memset(b, 0, offsetof(xblock, gen));
        return b;
    }
    return xseg_calloc_lines(sizeof *b);
}

void xblock_put(xseg_t *xs, xblock *b)
{
    b->flags = 0; /* a stale pointer to a spare record never reads as free */
    b->fnext = xs->spare_blocks;
    xs->spare_blocks = b;
}

/* Copy a block record but its generation word, which thread caches may
 * read at any time (tcache.c). */
static void copy_block(xblock *dst, const xblock *src)
{
    memcpy(dst, src, offsetof(xblock, gen));
}

/* ---- LRU of cached free blocks (oldest at the head) ---- */

static void lru_remove(xseg_t *xs, xblock *b)
{
    if (!(b->flags & XB_LRU))
        return;
    xlist_remove(&xs->lru, &b->lru);
    b->flags &= ~XB_LRU;
}

static void lru_push(xseg_t *xs, xblock *b)
{
    xlist_push_back(&xs->lru, &b->lru);
    b->flags |= XB_LRU;
}

/* Put r where b stands in the LRU (r inherits b's age). */
static void lru_replace(xseg_t *xs, xblock *b, xblock *r)
{
    xlist_replace(&xs->lru, &b->lru, &r->lru);
    r->flags |= XB_LRU;
    b->flags &= ~XB_LRU;
}

/* ---- free indexes ---- */

static xfreeidx *index_of(xseg_t *xs, xblock *b)
{
    return b->owner ? &b->owner->idx : &xs->neutral;
}

/* An epoch means something only to the stream that stamped it: a neutral
 * block carries none, so neutral space merged into a stream's block (by
 * absorb, a carve, or a stretch) never hands that stream an epoch of
 * another stream that it may never reach (reclaim would wait on it for
 * ever, and trim(0) could not return the memory). */
static void free_insert(xseg_t *xs, xblock *b)
{
    if (!b->owner)
        b->epoch = 0;
    b->flags |= XB_FREE;
    xfi_insert(index_of(xs, b), b);
}

static void free_remove(xseg_t *xs, xblock *b)
{
    xfi_remove(index_of(xs, b), b);
    b->flags &= ~XB_FREE;
}

static int mergeable(const xblock *a, const xblock *b)
{
    return a && b && (a->flags & XB_FREE) && (b->flags & XB_FREE) && a->owner == b->owner;
}

/* Merge free block n into its free predecessor p (p survives). */
static void absorb(xseg_t *xs, xblock *p, xblock *n)
{
    XSEG_ASSERT(p->anext == n && n->aprev == p && p->addr + p->size == n->addr);
    XSEG_ASSERT((p->flags & n->flags & XB_FREE) && p->owner == n->owner);
    int in_lru = (p->flags | n->flags) & XB_LRU;
    free_remove(xs, p);
    free_remove(xs, n);
    lru_remove(xs, p);
    lru_remove(xs, n);
    p->size += n->size;
    p->anext = n->anext;
    if (n->anext)
        n->anext->aprev = p;
    if (n->epoch > p->epoch)
        p->epoch = n->epoch;
    if (n->stamp > p->stamp)
        p->stamp = n->stamp;
    xblock_put(xs, n);
    free_insert(xs, p);
    if (in_lru)
        lru_push(xs, p);
}

/* Insert a block into the free state and merge it with free neighbours of
 * the same owner.  Returns the surviving block. */
static xblock *coalesce(xseg_t *xs, xblock *b, int to_lru)
{
    free_insert(xs, b);
    if (to_lru)
        lru_push(xs, b);
    if (mergeable(b->aprev, b)) {
        xblock *p = b->aprev;
        absorb(xs, p, b);
        b = p;
    }
    if (mergeable(b, b->anext))
        absorb(xs, b, b->anext);
    return b;
}

/* ---- reclaim ---- */

static xblock *make_neutral(xseg_t *xs, xblock *b, int to_lru);

/* ---- release jobs for the reclaim worker (worker.c) ----
 * With a worker running (and under its bound), the whole handles inside a
 * free block the GPU is done with leave the arena's tables at once and their
 * range is carved out as an XB_RELEASING block, out of every index, so that
 * nothing is placed there; the worker unmaps and releases them off the
 * caller's thread.  The memory stays counted in mapped_bytes until it is
 * released, so every peak is honest. */

static void back_to_neutral(xseg_t *xs, xblock *z, int to_lru);
static xblock *carve_at(xseg_t *xs, xblock *b, uintptr_t at, size_t size, xstream *s);

/* job->done: under xs->lock, after the worker's calls. */
static int release_done(xseg_t *xs, xrelease *job)
{
    int again = 0;
    for (uint32_t i = 0; i < job->n; i++) {
        xrel_handle *h = &job->h[i];
        if (h->state == XREL_UNMAP_FAILED && job->tries < 2) {
            h->state = XREL_TODO; /* tried again by the worker */
            again = 1;
            continue;
        }
        if (h->state == XREL_TODO)
            continue; /* settled already */
        if (h->state != XREL_RELEASED)
            xs->wk_failed = h->rc ? h->rc : 1;
        xarena_settle(xs, h);
        h->state = XREL_TODO;
        h->bytes = 0;
    }
    if (again) {
        job->tries++;
        xs->wk_retries++;
        /* settled handles must not be settled twice: drop them */
        uint32_t k = 0;
        for (uint32_t i = 0; i < job->n; i++)
            if (job->h[i].bytes)
                job->h[k++] = job->h[i];
        job->n = k;
        return 0;
    }
    xblock *z = job->z;
    xlist_remove(&xs->releasing, &z->lru);
    xs->wk_jobs++;
    xs->wk_pending--;
    back_to_neutral(xs, z, !xarena_all_unmapped(xs, z->addr, z->addr + z->size));
    return 1; /* stats_shm shows it at the next publication */
}

/* job->done of an old mapping's unmap: the range becomes free space; an
 * unmap that kept failing goes back on the moved list (tried again by the
 * next reclaim, and at destroy). */
static int unmap_done(xseg_t *xs, xrelease *job)
{
    xrel_handle *h = &job->h[0];
    if (h->state == XREL_UNMAP_FAILED && job->tries < 2) {
        h->state = XREL_TODO;
        job->tries++;
        xs->wk_retries++;
        return 0;
    }
    xblock *z = job->z;
    xlist_remove(&xs->releasing, &z->lru);
    xs->wk_unmapping -= z->requested;
    xs->wk_pending--;
    xs->wk_jobs++;
    if (h->state == XREL_RELEASED) {
        xseg_hist(xs, XEV_UNMAP, z->addr, z->requested, NULL);
        back_to_neutral(xs, z, 0);
        return 1;
    }
    xs->wk_failed = h->rc ? h->rc : 1;
    z->flags = XB_MOVED;
    z->owner = NULL;
    z->epoch = 0;
    xs->unmapping_bytes += z->requested;
    xlist_push_back(&xs->moved, &z->lru);
    return 1;
}

/* Hand the old mapping of moved block z (XB_MOVED, off the moved list, the
 * GPU done with it) to the worker; 0 when it cannot take it. */
static int unmap_async(xseg_t *xs, xblock *z)
{
    if (!xs->wk)
        return 0;
    xrelease *job = calloc(1, sizeof *job);
    xrel_handle *h = calloc(1, sizeof *h);
    if (!job || !h) {
        free(job);
        free(h);
        return 0;
    }
    *h = (xrel_handle){z->addr, z->requested, 0, XREL_TODO, 0};
    job->h = h;
    job->n = job->cap = 1;
    job->unmap_only = 1;
    job->z = z;
    job->done = unmap_done;
    z->flags = XB_RELEASING;
    z->owner = NULL; /* the GPU is done with it */
    z->epoch = 0;
    xs->wk_unmapping += z->requested;
    xlist_push_back(&xs->releasing, &z->lru);
    xworker_push(xs, job);
    return 1;
}

/* Hand the whole handles inside free block b (up to `want` bytes) to the
 * worker; returns the bytes handed over (0: none, or no host memory). */
static size_t release_async(xseg_t *xs, xblock *b, size_t want)
{
    xrelease *job = calloc(1, sizeof *job);
    if (!job)
        return 0;
    uintptr_t lo, hi;
    size_t got = xarena_detach_inside(xs, b->addr, b->addr + b->size, want, job, &lo, &hi);
    if (!got) {
        free(job->h);
        free(job);
        return 0;
    }
    xblock *z = carve_at(xs, b, lo, hi - lo, NULL);
    z->flags = XB_RELEASING;
    z->epoch = 0;
    z->requested = 0;
    xlist_push_back(&xs->releasing, &z->lru);
    job->z = z;
    job->done = release_done;
    xworker_push(xs, job);
    return got;
}

/* Release whole handles inside free block b: through the worker when it
 * takes the job (async set by the caller), else here. */
static size_t release_inside(xseg_t *xs, xblock *b, size_t want, int *err)
{
    if (xs->rel_async && (xs->rel_async == XREL_ASYNC_ALL ? xs->wk != NULL : xworker_takes(xs))) {
        size_t got = release_async(xs, b, want);
        if (got)
            return got;
    }
    return xarena_release_inside(xs, b->addr, b->addr + b->size, want, err);
}

/* Unmap whole handles inside a free block (at least `want` bytes, or all)
 * once the GPU is done with it.  A block left with nothing to release
 * leaves the LRU and becomes neutral.  Returns bytes released. */
static size_t reclaim_block(xseg_t *xs, xblock *b, size_t want, int *refused)
{
    int err = 0;
    size_t got = release_inside(xs, b, want, &err);
    *refused = err;
    if (err || (b->flags & XB_RELEASING))
        return got; /* refused, or all sent to the worker */
    if (got >= want && !xarena_all_unmapped(xs, b->addr, b->addr + b->size))
        return got; /* enough: the rest stays cached */
    /* Nothing of it mapped any more (or not enough given): it leaves the
     * LRU and becomes neutral space, which any stream may take, which
     * coalesces with its neighbours and which can be the growth frontier
     * again (premap after a trim). */
    lru_remove(xs, b);
    if (!b->owner)
        return got;
    b = make_neutral(xs, b, 0);
    if (got < want) { /* pages shared with neutral neighbours are whole inside it now */
        got += release_inside(xs, b, want - got, &err);
        *refused = err;
        if (b->flags & XB_RELEASING)
            return got;
    }
    if (!(b->flags & XB_LRU) && !xarena_all_unmapped(xs, b->addr, b->addr + b->size))
        lru_push(xs, b); /* still holds mapped pages: stays reclaimable */
    return got;
}

size_t xseg_reclaim(xseg_t *xs, size_t want, int block)
{
    size_t got = 0;

    if (!xlist_empty(&xs->moved))
        xblk_moved_process(xs, block); /* with a worker: its unmap jobs */
    /* A moved handle whose old mapping the worker has queued (or is
     * unmapping) must not be released here meanwhile: two threads in the
     * driver on one handle corrupted the CUDA driver's own heap on the
     * H200 (a cuMemUnmap on the worker aborting in glibc's free, after a
     * failed growth had moved pages and the OOM retry reclaimed them;
     * docs/design.md).  So the queued unmaps are finished first, as growth
     * does (find_after_drain). */
    if (xs->wk_unmapping)
        xworker_finish_unmaps_locked(xs);
    xlist skipped = {NULL, NULL};
    if (xs->arena.norphans)
        xarena_release_orphans(xs);
    while (got < want && !xlist_empty(&xs->lru)) {
        xblock *b = xblk_of_lru(xlist_first(&xs->lru));
        if (b->owner && !xstream_done(xs, b->owner, b->epoch, block)) {
            lru_remove(xs, b); /* not yet safe: keep its place for later */
            xlist_push_back(&skipped, &b->lru);
            continue;
        }
        int refused = 0;
        got += reclaim_block(xs, b, want - got, &refused);
        if (refused)
            break; /* the driver refused: it stays cached, retried next time */
    }
    /* Put the skipped blocks back at the head, in their order. */
    for (xlist_node *n = xlist_first(&skipped); n; n = xlist_next(n))
        xblk_of_lru(n)->flags |= XB_LRU;
    xlist_splice_front(&xs->lru, &skipped);
    return got;
}

size_t xseg_reclaim_async(xseg_t *xs, size_t want, int block, int unbounded)
{
    xs->rel_async = unbounded ? XREL_ASYNC_ALL : 1;
    size_t got = xseg_reclaim(xs, want, block);
    xs->rel_async = 0;
    return got;
}

/* ---- allocation of arena blocks ---- */

/* Split off the front of free block b so that the rest starts at `at`;
 * the front stays free where it was (index, LRU).  Returns the rest. */
static xblock *split_front(xseg_t *xs, xblock *b, uintptr_t at)
{
    xblock *r = xblock_new(xs);
    if (!r)
        return b;
    free_remove(xs, b);
    copy_block(r, b);
    r->flags = 0;
    r->lru.prev = r->lru.next = NULL;
    r->addr = at;
    r->size = b->addr + b->size - at;
    b->size = at - b->addr;
    r->aprev = b;
    if (b->anext)
        b->anext->aprev = r;
    b->anext = r;
    free_insert(xs, b);
    free_insert(xs, r);
    if (b->flags & XB_LRU)
        lru_push(xs, r); /* the rest may hold cached pages too: keep them reclaimable */
    return r;
}

/* Pages that [at, at + size) touches and no neighbour already touches. */
static size_t new_pages(const xseg_t *xs, const xblock *b, uintptr_t at, size_t size)
{
    size_t p = xs->arena.page;
    uintptr_t first = at & ~(uintptr_t)(p - 1), last = (at + size - 1) & ~(uintptr_t)(p - 1);
    size_t n = (last - first) / p + 1;
    uintptr_t end = b->addr + b->size;
    if (at == b->addr && (at & (p - 1)) && b->aprev)
        n--; /* first page shared with the block before */
    if (at + size == end && (end & (p - 1)) && b->anext && first != last)
        n--; /* last page shared with the block after */
    return n;
}

/* Cost of a placement: pages to map first (driver work and memory), then
 * pages touched that no neighbour shares (fragmentation). */
static size_t place_cost(const xseg_t *xs, const xblock *b, uintptr_t at, size_t size)
{
    size_t unmapped = xarena_unmapped_bytes(xs, at, at + size) >> xs->arena.shift;
    return (unmapped << 24) + new_pages(xs, b, at, size);
}

/* Where in free block b to put `size` bytes.  placement:start (default)
 * takes its start, as PyTorch does: the rest stays one free block after
 * the new one, and a workload that repeats itself finds its blocks where
 * they were.  But a block of whole pages goes up to the first page
 * boundary when it fits there, so that it touches only its own pages
 * (16 MiB from an unaligned start: 9 pages, from a boundary 8).
 * placement:pages takes the start (packing against the block before), the
 * end (packing against the block after) or the first page boundary,
 * whichever costs least (ties: the start). */
static uintptr_t place(const xseg_t *xs, const xblock *b, size_t size)
{
    size_t p = xs->arena.page;
    uintptr_t best = b->addr, end = b->addr + b->size;
    uintptr_t up = (best + p - 1) & ~(uintptr_t)(p - 1); /* the first page boundary */
    if (b->size == size)
        return best;
    if (xs->conf.placement == XSEG_PLACE_START)
        return size >= p && !(size & (p - 1)) && up + size <= end ? up : best;
    size_t cost = place_cost(xs, b, best, size);
    uintptr_t cand[2] = {up, end - size};
    for (int i = 0; i < 2; i++) {
        if (cand[i] < b->addr || cand[i] + size > end || cand[i] == best)
            continue;
        size_t c = place_cost(xs, b, cand[i], size);
        if (c < cost) {
            cost = c;
            best = cand[i];
        }
    }
    return best;
}

/* Take `size` bytes from free block b (at its placement) for owner s. */
static xblock *carve_at(xseg_t *xs, xblock *b, uintptr_t at, size_t size, xstream *s)
{
    XSEG_ASSERT((b->flags & XB_FREE) && at >= b->addr && at + size <= b->addr + b->size);
    if (at != b->addr)
        b = split_front(xs, b, at);
    free_remove(xs, b);
    if (b->size - size >= XSEG_MIN_BLOCK) {
        xblock *r = xblock_new(xs);
        if (r) {
            copy_block(r, b);
            r->flags = 0;
            r->addr = b->addr + size;
            r->size = b->size - size;
            r->aprev = b;
            if (b->anext)
                b->anext->aprev = r;
            b->anext = r;
            b->size = size;
            if (b->flags & XB_LRU)
                lru_replace(xs, b, r);
            free_insert(xs, r);
        }
    }
    lru_remove(xs, b);
    b->owner = s;
    b->flags = 0;
    return b;
}

/* Free cached block b becomes neutral space (merged with its neutral
 * neighbours; its epoch goes, see free_insert); returns the merged block. */
static xblock *make_neutral(xseg_t *xs, xblock *b, int to_lru)
{
    free_remove(xs, b);
    lru_remove(xs, b);
    b->owner = NULL;
    b->epoch = 0;
    return coalesce(xs, b, to_lru);
}

/* The tightest cached block of another stream that fits, if the GPU is done
 * with it (checked without waiting), becomes neutral space: reusing it costs
 * no driver call where mapping new memory would.  Returns the (merged)
 * neutral block and in *at the adopted block's address. */
static xblock *adopt(xseg_t *xs, xstream *s, size_t size, uintptr_t *at)
{
    xblock *best = NULL;
    for (xstream *t = xs->all_streams; t; t = t->next_all) {
        if (t == s || !t->idx.count)
            continue;
        xblock *c = xfi_find(&t->idx, size, SIZE_MAX);
        if (c && (!best || c->size < best->size))
            best = c;
    }
    if (!best || !xstream_done(xs, best->owner, best->epoch, 0))
        return NULL;
    *at = best->addr;
    return make_neutral(xs, best, 1);
}

/* A free block of s just before neutral block n can be extended into n. */
static xblock *extend_into(xseg_t *xs, xblock *n, size_t size, xstream *s)
{
    xblock *f = n->aprev;
    if (!f || !(f->flags & XB_FREE) || f->owner != s || f->size >= size ||
        place(xs, f, size) != f->addr)
        return NULL;
    size_t take = size - f->size;
    if (n->size < take)
        return NULL;
    free_remove(xs, f);
    lru_remove(xs, f);
    free_remove(xs, n);
    if (n->size - take < XSEG_MIN_BLOCK) {
        take = n->size;
        f->anext = n->anext;
        if (n->anext)
            n->anext->aprev = f;
        xblock_put(xs, n);
    } else {
        n->addr += take;
        n->size -= take;
        free_insert(xs, n);
    }
    f->size += take;
    f->flags = 0;
    return f;
}

/* ---- stretching a cached block into neutral space ----
 * When no cached block of the stream fits, a large one may still hold most
 * of what the request needs.  The request is then placed over it and over
 * the neutral free space beside it: its mapped pages are reused in place,
 * and only the rest is mapped (or moved).  Otherwise the request lands in
 * unmapped neutral space, and all of it is mapped or moved there. */

#define XSEG_STRETCH_SCAN 8

static int neutral_free(const xblock *b)
{
    return b && (b->flags & XB_FREE) && !b->owner;
}

/* The better start, by unmapped bytes, of a region of `size` bytes (larger
 * than c) over cached block c and the neutral free space on either side;
 * *need gets its unmapped bytes.  0: not enough room. */
static uintptr_t stretch_at(const xseg_t *xs, const xblock *c, size_t size, size_t *need)
{
    const xblock *p = neutral_free(c->aprev) ? c->aprev : NULL;
    const xblock *n = neutral_free(c->anext) ? c->anext : NULL;
    size_t before = p ? p->size : 0, after = n ? n->size : 0, extra = size - c->size;
    if (before + after < extra)
        return 0;
    uintptr_t cand[2] = {c->addr - (extra > after ? extra - after : 0),
                         c->addr - (extra < before ? extra : before)};
    uintptr_t best = 0;
    for (int i = 0; i < 2; i++) {
        size_t u = xarena_unmapped_bytes(xs, cand[i], cand[i] + size);
        if (!best || u < *need) {
            best = cand[i];
            *need = u;
        }
    }
    return best;
}

/* The stream's large cached block that, stretched, needs the fewest
 * unmapped bytes, if fewer than `beat`; it is merged with the neutral
 * space beside it, and *at gets the placement, *epoch its epoch. */
static xblock *stretch(xseg_t *xs, xstream *s, size_t size, size_t beat, uintptr_t *at,
                       uint64_t *epoch)
{
    xblock *top[XSEG_STRETCH_SCAN], *best = NULL;
    size_t k = xfi_top(&s->idx, top, XSEG_STRETCH_SCAN);
    for (size_t i = 0; i < k; i++) {
        size_t need = 0;
        uintptr_t a = top[i]->size < size ? stretch_at(xs, top[i], size, &need) : 0;
        if (a && need < beat) {
            best = top[i];
            beat = need;
            *at = a;
        }
    }
    if (!best)
        return NULL;
    *epoch = best->epoch; /* the new block of s covers all of it */
    return make_neutral(xs, best, best->flags & XB_LRU);
}

/* Does placing `size` bytes in cached block b map fewer new pages than in
 * the tighter neutral block n?  Then b wins: memory already mapped is
 * reused in place rather than moved or mapped anew. */
static int fewer_new_pages(const xseg_t *xs, const xblock *b, const xblock *n, size_t size)
{
    uintptr_t pb = place(xs, b, size), pn = place(xs, n, size);
    return xarena_unmapped_bytes(xs, pb, pb + size) < xarena_unmapped_bytes(xs, pn, pn + size);
}

/* ---- find_block: an ordered list of strategies over one fit record ----
 * The candidates are the stream's tightest cached block (within
 * max_split_size) and the tightest neutral block, which is tighter than
 * the cached one when there is one.  Each strategy either takes a block,
 * fills the result and returns 1, or declines (0) without changing
 * anything; the first that takes wins. */

typedef struct xfit {
    xstream *s;      /* the request: its stream */
    size_t size;     /* and its size (rounded) */
    xblock *own;     /* candidate: the tightest cached block of s, or NULL */
    xblock *neutral; /* candidate: the tightest neutral block (tighter than own), or NULL */
    xblock *block;   /* result: the block taken, owned by s, out of every index */
    xstream *from;   /* whose cached memory it was (NULL: neutral space) */
    uint64_t epoch;  /* from's epoch on that memory (0 when from is NULL) */
    uintptr_t at;    /* where in the free block it was placed */
} xfit;

static int take(xseg_t *xs, xfit *f, xblock *free_blk, uintptr_t at, xstream *from,
                uint64_t epoch)
{
    f->at = at;
    f->from = from;
    f->epoch = epoch;
    f->block = carve_at(xs, free_blk, at, f->size, f->s);
    return 1;
}

/* 1. The stream's own cached block, unless the neutral block (tighter:
 * filling holes between live blocks keeps their pages full) needs no more
 * new pages.  A cached block wins a tie of sizes (the neutral search stops
 * below its size): it is mapped already. */
static int fit_own(xseg_t *xs, xfit *f)
{
    xblock *b = f->own;
    if (!b || (f->neutral && !fewer_new_pages(xs, b, f->neutral, f->size)))
        return 0;
    return take(xs, f, b, place(xs, b, f->size), f->s, b->epoch);
}

/* 2. No cached block of s, and the neutral space would need mapping: a
 * cached block of another stream that the GPU is done with (see adopt). */
static int fit_adopt(xseg_t *xs, xfit *f)
{
    xblock *n = f->neutral;
    uintptr_t at = 0;
    if (f->own || (n && xarena_all_mapped(xs, n->addr, n->addr + f->size)))
        return 0;
    xblock *a = adopt(xs, f->s, f->size, &at);
    return a && take(xs, f, a, at, NULL, 0);
}

/* 3. No cached block of s fits: a larger one stretched into the neutral
 * space beside it, if that maps fewer bytes than the neutral block. */
static int fit_stretch(xseg_t *xs, xfit *f)
{
    xblock *n = f->neutral;
    size_t beat = SIZE_MAX;
    uintptr_t at = 0;
    uint64_t epoch = 0;
    if (f->own || !xs->conf.caching)
        return 0;
    if (n) {
        uintptr_t pn = place(xs, n, f->size);
        beat = xarena_unmapped_bytes(xs, pn, pn + f->size);
    }
    xblock *m = beat ? stretch(xs, f->s, f->size, beat, &at, &epoch) : NULL;
    if (!m)
        return 0;
    take(xs, f, m, at, f->s, epoch);
    f->block->epoch = epoch; /* it covers the stretched block: its epoch, no other */
    return 1;
}

/* 4. No cached block of s: a free block of s just before the neutral block,
 * extended into it (see extend_into). */
static int fit_extend(xseg_t *xs, xfit *f)
{
    xblock *e = f->own || !f->neutral ? NULL : extend_into(xs, f->neutral, f->size, f->s);
    if (!e)
        return 0;
    e->owner = f->s;
    f->block = e;
    f->at = e->addr;
    f->from = f->s;
    f->epoch = e->epoch;
    return 1;
}

/* 5. The neutral block needs new pages, while the reserve mapped ahead at
 * the growth frontier (premap) holds the request mapped: the reserve. */
static int fit_reserve(xseg_t *xs, xfit *f)
{
    xblock *r = xs->reserve, *n = f->neutral;
    if (!r || !n || n == r || !(r->flags & XB_FREE) || r->owner || r->size < f->size ||
        r->addr + r->size != xs->arena.base + xs->arena.size ||
        !xarena_all_mapped(xs, r->addr, r->addr + f->size))
        return 0;
    uintptr_t pn = place(xs, n, f->size);
    if (xarena_all_mapped(xs, pn, pn + f->size))
        return 0;
    return take(xs, f, r, r->addr, NULL, 0);
}

/* 6. The neutral block. */
static int fit_neutral(xseg_t *xs, xfit *f)
{
    xblock *n = f->neutral;
    return n && take(xs, f, n, place(xs, n, f->size), NULL, 0);
}

static int (*const fit_strategies[])(xseg_t *, xfit *) = {
    fit_own, fit_adopt, fit_stretch, fit_extend, fit_reserve, fit_neutral,
};

/* The candidates of f's request (page alignment needs no padding: every
 * block found holds the request at its placement). */
static void fit_candidates(xseg_t *xs, xfit *f)
{
    size_t mss = xs->conf.max_split_size;
    size_t max = f->size <= mss ? mss : SIZE_MAX;
    xblock *b = xs->conf.caching ? xfi_find(&f->s->idx, f->size, max) : NULL;
    f->own = b;
    f->neutral = NULL;
    if (!b || b->size != f->size)
        f->neutral = xfi_find(&xs->neutral, f->size, b ? b->size - 1 : SIZE_MAX);
}

/* Fill f's result from its request (f->s, f->size); NULL: no room. */
static xblock *find_block(xseg_t *xs, xfit *f)
{
    f->block = NULL;
    f->from = NULL;
    f->epoch = 0;
    f->at = 0;
    fit_candidates(xs, f);
    for (size_t i = 0; i < sizeof fit_strategies / sizeof *fit_strategies; i++)
        if (fit_strategies[i](xs, f))
            return f->block;
    return NULL;
}

static size_t round_page(const xseg_t *xs, size_t v)
{
    size_t p = xs->arena.page;
    return v > SIZE_MAX - p ? SIZE_MAX : (v + p - 1) / p * p;
}

/* What the release threshold lets be mapped now (SIZE_MAX: no limit).
 * The slack counts in whole pages (rounded down): below a page's worth of
 * peak x release_slack it adds nothing, so small allocators keep the
 * strict policy. */
size_t xblk_release_limit(const xseg_t *xs)
{
    size_t rt = xs->conf.release_threshold;
    if (rt == XSEG_SIZE_UNLIMITED)
        return SIZE_MAX;
    if (rt == XSEG_SIZE_AUTO) {
        size_t pk = xseg_budget(xs);
        if (xs->arena_used > pk)
            pk = xs->arena_used;
        size_t lim = round_page(xs, pk), extra = (size_t)((double)pk * xs->conf.release_slack);
        extra += xs->gov.extra; /* what the slack governor grants (slack.c) */
        extra -= extra % xs->arena.page;
        return lim > SIZE_MAX - extra ? SIZE_MAX : lim + extra;
    }
    return xs->arena_used > SIZE_MAX - rt ? SIZE_MAX : round_page(xs, xs->arena_used) + rt;
}

/* Before mapping `need` more bytes: enforce the cap, then the GC and
 * release thresholds by reclaiming cached memory. */
static xseg_status make_room(xseg_t *xs, size_t need, size_t request)
{
    size_t after = xs->mapped.cur + need;
    if (xfam_over_cap(xs, need)) { /* the cap counts every tag's memory */
        size_t cap = xfam_cap(xs);
        xseg_reclaim(xs, xfam_mapped(xs) + need - cap, 1);
        after = xs->mapped.cur + need;
        if (xfam_over_cap(xs, need)) {
            char b1[32], b2[32], b3[32];
            size_t others = xfam_mapped(xs) - xs->mapped.cur;
            return xseg_fail(xs, XSEG_ERR_OOM,
                             "xseg: cap reached: request of %zu bytes needs %s more mapped, "
                             "cap %s%s%s", request, xseg_fmt_size(need, b1, sizeof b1),
                             xseg_fmt_size(cap, b2, sizeof b2),
                             others ? ", of which other tags map " : "",
                             others ? xseg_fmt_size(others, b3, sizeof b3) : "");
        }
    }
    if (xs->conf.gc_threshold > 0 && xs->cap != SIZE_MAX) {
        size_t gc = (size_t)(xs->conf.gc_threshold * (double)xs->cap);
        if (after > gc) {
            xs->gc_runs++;
            xseg_reclaim(xs, after - gc, 0);
            after = xs->mapped.cur + need;
        }
    }
    size_t limit = xblk_release_limit(xs);
    if (limit == SIZE_MAX)
        return XSEG_OK;
    /* Released here, not by the worker: memory still on its way back while
     * this growth maps more would raise the peak (measured: docs/config.md,
     * reclaim).  The worker takes the old mappings of moved handles. */
    if (after > limit)
        after -= xseg_reclaim(xs, after - limit, 0);
    if (after > limit && xs->conf.release_wait) {
        /* What is left is cached memory the GPU may still use: wait for
         * it rather than go over the threshold. */
        xseg_reclaim(xs, after - limit, 1);
    }
    return XSEG_OK;
}

static xblock *frontier_after(const xseg_t *xs, const xblock *b);

/* ---- splitting large handles ----
 * A large handle that the new block b only partly covers is split (see
 * xarena_split_edges) when every other block it backs is free space the GPU
 * is done with.  Those blocks may be several: free blocks of different
 * owners (a stream's cache, neutral space) do not merge. */

/* The range [*hs, *he) of the handle behind page p if it is larger than a
 * page and backs pages outside [pa, pb], the pages block b touches. */
static int straddling(const xarena *ar, size_t p, size_t pa, size_t pb, uintptr_t *hs,
                      uintptr_t *he)
{
    uint32_t h = ar->page_handle[p];
    if (!h || ar->handles[h].npages == 1)
        return 0;
    size_t first = ar->handles[h].first_page, n = ar->handles[h].npages;
    *hs = ar->base + ((uintptr_t)first << ar->shift);
    *he = *hs + ((uintptr_t)n << ar->shift);
    return first < pa || first + n > pb + 1;
}

/* Is every block but b that overlaps [hs, he) free, and, when `idle`, done
 * with by the GPU (with release_wait, waited for)?  The walk stays inside
 * one handle's range. */
static int others_free(xseg_t *xs, const xblock *b, uintptr_t hs, uintptr_t he, int idle)
{
    for (int after = 0; after < 2; after++) {
        const xblock *o = after ? b->anext : b->aprev;
        while (o && (after ? o->addr < he : o->addr + o->size > hs)) {
            if (!(o->flags & XB_FREE))
                return 0;
            if (idle && o->owner && !xstream_done(xs, o->owner, o->epoch, xs->conf.release_wait))
                return 0;
            o = after ? o->anext : o->aprev;
        }
    }
    return 1;
}

/* Which edges of block b a split could cut, from the layout alone (no GPU
 * query): can[i] for the start (0) and the end (1), the handle's range in
 * hs[i], he[i].  Returns whether either can. */
static int split_layout(xseg_t *xs, const xblock *b, int can[2], uintptr_t hs[2], uintptr_t he[2])
{
    xarena *ar = &xs->arena;
    uintptr_t a = b->addr, e = b->addr + b->size;
    size_t pa = (a - ar->base) >> ar->shift, pb = (e - 1 - ar->base) >> ar->shift;
    const xblock *r = frontier_after(xs, b);
    for (int i = 0; i < 2; i++)
        can[i] = straddling(ar, i ? pb : pa, pa, pb, &hs[i], &he[i]) &&
                 /* a premapped run reaching into the reserve serves the growth after b */
                 !(r && he[i] > r->addr && xarena_premapped(xs, i ? pb : pa)) &&
                 !(i && can[0] && hs[1] == hs[0]) && /* the same handle at both edges */
                 others_free(xs, b, hs[i], he[i], 0);
    return can[0] || can[1];
}

/* The layout decides first whether a split is possible at all; only then
 * does xseg ask (or, with release_wait, wait for) the GPU: for b's old
 * contents, then for the other blocks. */
static void split_large(xseg_t *xs, xblock *b, xstream *from, uint64_t epoch)
{
    uintptr_t a = b->addr, e = b->addr + b->size, hs[2], he[2];
    int can[2];
    if (!split_layout(xs, b, can, hs, he))
        return;
    if (from && !xstream_done(xs, from, epoch, xs->conf.release_wait))
        return;
    int err = 0;
    for (int i = 0; i < 2; i++)
        if (can[i] && others_free(xs, b, hs[i], he[i], 1))
            xarena_split_edges(xs, a, e, hs[i] < a ? hs[i] : a, he[i] > e ? he[i] : e, &err);
}

/* ---- moving cached memory to where it is needed ----
 * A growth over the cap or the release threshold first takes the physical
 * handles of cached blocks of the same stream (or neutral ones) and maps
 * them under the new block: no new memory, no create/release.  Stream order
 * makes this safe at once even while the GPU still runs work that used the
 * old place: the new block's work on that stream runs after it.  The old
 * mapping stays until the GPU is done with it (an XB_MOVED block, out of
 * every index), then it is unmapped and the range becomes free space. */

/* A block carved out of free space goes back to it as neutral space. */
static void back_to_neutral(xseg_t *xs, xblock *z, int to_lru)
{
    z->flags = 0;
    z->owner = NULL;
    z->epoch = 0;
    z->requested = 0;
    coalesce(xs, z, to_lru);
}

/* The old range [lo, hi) of handles moved out of free block d. */
static void retire_old(xseg_t *xs, xblock *d, uintptr_t lo, uintptr_t hi)
{
    xstream *o = d->owner;
    uint64_t epoch = d->epoch;
    int idle = !o || xstream_done(xs, o, epoch, 0);
    if (idle && !xs->wk && xarena_unmap_old(xs, lo, hi) == XDRV_SUCCESS)
        return;
    xblock *z = carve_at(xs, d, lo, hi - lo, o);
    if (z->addr != lo) { /* no block record for the split: wait instead */
        if (o)
            xstream_done(xs, o, epoch, 1);
        /* A refused unmap here leaves [lo, hi) mapped under free space: a
         * later map there fails (reported), nothing is aliased silently. */
        xarena_unmap_old(xs, lo, hi);
        back_to_neutral(xs, z, 1);
        return;
    }
    z->flags = XB_MOVED;
    z->epoch = epoch;
    z->requested = hi - lo; /* the old mapping (z may be a little larger) */
    if (idle && unmap_async(xs, z))
        return; /* the worker unmaps it */
    xs->unmapping_bytes += hi - lo;
    xlist_push_front(&xs->moved, &z->lru);
}

/* Move up to `want` bytes of cached handles under the unmapped pages of b. */
static size_t move_pages(xseg_t *xs, xblock *b, size_t want)
{
    size_t moved = 0, before;
    do {
        before = moved;
        for (xblock *d = xblk_of_lru(xlist_first(&xs->lru)), *next; d && moved < want;
             d = next) {
            next = xblk_of_lru(xlist_next(&d->lru));
            if (d->owner && d->owner != b->owner)
                continue;
            uintptr_t lo, hi;
            size_t m = xarena_move(xs, d->addr, d->addr + d->size, b->addr, b->addr + b->size,
                                   want - moved, &lo, &hi);
            if (m) {
                moved += m;
                xs->moved_bytes += m;
                retire_old(xs, d, lo, hi);
            }
        }
    } while (moved > before && moved < want);
    return moved;
}

/* Unmap the old places of moved handles once the GPU is done with them
 * (waiting for it when `block`). */
void xblk_moved_process(xseg_t *xs, int block)
{
    for (xlist_node *n = xlist_first(&xs->moved), *next; n; n = next) {
        xblock *z = xblk_of_lru(n);
        next = xlist_next(n);
        if (z->owner && !xstream_done(xs, z->owner, z->epoch, block))
            continue;
        if (xs->wk) { /* the worker unmaps it */
            xlist_remove(&xs->moved, n);
            xs->unmapping_bytes -= z->requested;
            if (unmap_async(xs, z))
                continue;
            xs->unmapping_bytes += z->requested; /* no host memory: here */
            xlist_push_front(&xs->moved, n);
        }
        if (xarena_unmap_old(xs, z->addr, z->addr + z->requested) == XDRV_SUCCESS) {
            xlist_remove(&xs->moved, n);
            xs->unmapping_bytes -= z->requested;
            back_to_neutral(xs, z, 0);
        }
    }
}

/* At destroy: the old mappings go (the GPU is done with everything then). */
void xblk_moved_fini(xseg_t *xs, int call_driver)
{
    for (xlist_node *n = call_driver ? xlist_first(&xs->moved) : NULL; n; n = xlist_next(n))
        xarena_unmap_old(xs, xblk_of_lru(n)->addr, xblk_of_lru(n)->addr + xblk_of_lru(n)->requested);
    xlist_init(&xs->moved);
    xs->unmapping_bytes = 0;
}

/* Map what block b lacks; `steady`: b is no new peak of allocated bytes,
 * so what it maps is mapped again (the slack governor counts it). */
static xseg_status ensure_mapped(xseg_t *xs, xblock *b, size_t request, int steady)
{
    if (xarena_all_mapped(xs, b->addr, b->addr + b->size))
        return XSEG_OK; /* the common case: a cached block */
    size_t need = xarena_unmapped_bytes(xs, b->addr, b->addr + b->size);
    if (!need)
        return XSEG_OK;
    if (steady)
        xs->gov.remap += need;
    if (!xlist_empty(&xs->moved))
        xblk_moved_process(xs, 0);
    size_t limit = xblk_release_limit(xs);
    if (xs->cap < limit)
        limit = xs->cap;
    if (xs->mapped.cur + need > limit && xs->conf.caching) {
        if (xs->shrinker.over_threshold) /* deferred frees, kept slabs: may then move */
            xs->shrinker.over_threshold(xs);
        need -= move_pages(xs, b, xs->mapped.cur + need - limit);
        if (!need)
            return XSEG_OK;
    }
    xseg_status st = make_room(xs, need, request);
    if (st != XSEG_OK)
        return st;
    return xarena_ensure(xs, b->addr, b->addr + b->size, request);
}

/* Before new memory is mapped, the blocks other threads hold in their
 * caches for the same stream go back to the allocator: they may serve this
 * request, and held blocks would otherwise count as live when the cache is
 * measured against the peak (release_threshold:auto).  The block found
 * first is put back.  Other streams' held blocks stay: taking them made
 * threads on streams of their own (a server's workers) take turns
 * flushing each other, each flush turning cached blocks into free memory
 * that the next growth released, so every thread missed its cache and
 * mapped again, for good (16 threads x 64 MiB pairs: 13 M pairs/s on the
 * H200; docs/performance.md). */
static xblock *find_after_flush(xseg_t *xs, xfit *f)
{
    xblock *b = f->block;
    if (!xs->tc_on || xarena_all_mapped(xs, b->addr, b->addr + b->size) || !xs->shrinker.held ||
        !xs->shrinker.held(xs, f->s->handle))
        return b;
    if (!f->from)
        b->owner = NULL; /* it came from neutral space */
    b->epoch = f->from ? f->epoch : 0; /* what its old contents wait for, on its owner */
    coalesce(xs, b, 1);
    xs->shrinker.flush(xs, f->s->handle);
    return find_block(xs, f);
}

/* ---- premap: the growth frontier mapped ahead ----
 * When growth is sequential (XSEG_PREMAP_STREAK allocations in a row at
 * the arena's frontier, where the free space after the block runs to the
 * arena's end), the block maps, with its own pages, the pages after it in
 * the fewest large handles: the reserve.  The next growths find their pages
 * mapped there (fit_reserve) and call no driver function, and sequential
 * growth maps one handle per reserve instead of one per page.  The reserve
 * is memory over the live bytes: premap:auto holds at most 1/128 of the
 * peak of allocated bytes, or 1/64 of a long streak's growth when that is
 * more (4 MiB at least, 1 GiB at most), premap:SIZE at
 * most SIZE, within the cap and at most that over the release threshold;
 * it is cached memory like any other (reclaim and trim give it back).
 * Growth that is not sequential (holes filled between live blocks) gets no
 * reserve: there it was taken and given back again (docs/config.md). */

#define XSEG_PREMAP_MIN ((size_t)4 << 20)
/* Consecutive allocations at the frontier before premap maps ahead: only
 * growth that is sequential gets a reserve. */
#define XSEG_PREMAP_STREAK 32
#define XSEG_PREMAP_MAX ((size_t)1 << 30)
/* From this streak on, a refill is one handle (see premap_after), and the
 * budget is at least 1/XSEG_PREMAP_STREAK_DIV of what the streak grew the
 * allocated bytes by (not of the bytes it allocated: 2000 streams that
 * each took 3 MiB at the frontier and gave it back grew nothing): a
 * fresh allocator's peak grows with the streak itself, so a budget from the
 * peak alone starts small, and 10,000 x 2 MiB took 765 handles (each one
 * create, map and set_access, and one unmap and release when given back)
 * where this takes 462 (host model, docs/config.md "premap").  What it may
 * leave mapped past a streak's end is at most that budget, and the next
 * growth takes it. */
#define XSEG_PREMAP_WHOLE 256
#define XSEG_PREMAP_STREAK_DIV 64

/* The most that may be mapped ahead now (0: premap is off). */
size_t xseg_premap_budget(const xseg_t *xs)
{
    size_t c = xs->conf.premap;
    if (c == XSEG_PREMAP_OFF || !xs->conf.caching)
        return 0;
    if (c == XSEG_SIZE_AUTO) {
        c = xseg_budget(xs) / 128;
        size_t grown = xs->arena_used > xs->streak_base ? xs->arena_used - xs->streak_base : 0;
        if (xs->streak >= XSEG_PREMAP_WHOLE && grown / XSEG_PREMAP_STREAK_DIV > c)
            c = grown / XSEG_PREMAP_STREAK_DIV;
        c = c < XSEG_PREMAP_MIN ? XSEG_PREMAP_MIN : c > XSEG_PREMAP_MAX ? XSEG_PREMAP_MAX : c;
    }
    return c / xs->arena.page * xs->arena.page;
}

/* The trailing free block after b, when it is neutral and runs to the
 * arena's end (b stands at the growth frontier); NULL otherwise. */
static xblock *frontier_after(const xseg_t *xs, const xblock *b)
{
    xblock *r = b->anext;
    return neutral_free(r) && r->addr + r->size == xs->arena.base + xs->arena.size ? r : NULL;
}

/* Map ahead of block b when it grew the frontier: up to the budget (less
 * what is mapped there already), within the cap.  A failure is no error:
 * the reserve is an optimisation. */
static void premap_after(xseg_t *xs, xblock *b)
{
    xblock *r = frontier_after(xs, b);
    size_t budget = xseg_premap_budget(xs), p = xs->arena.page;
    if (!r || !budget)
        return;
    xs->reserve = r;
    uintptr_t lo = (r->addr + p - 1) & ~(uintptr_t)(p - 1);
    if (lo >= r->addr + r->size)
        return;
    size_t room = r->addr + r->size - lo;
    size_t ahead = budget < room ? budget : room;
    ahead = ahead / p * p;
    if (!ahead)
        return;
    size_t need = xarena_unmapped_bytes(xs, lo, lo + ahead);
    if (need < ahead / 4 * 3)
        return; /* a quarter left: map again when it runs lower */
    if (xfam_over_cap(xs, need))
        return;
    size_t limit = xblk_release_limit(xs);
    if (limit != SIZE_MAX && xs->mapped.cur + need > limit + budget)
        return; /* the reserve is bounded: at most the budget over the threshold */
    size_t before = xs->mapped.cur;
    if (xarena_premap(xs, lo, lo + ahead, xs->streak >= XSEG_PREMAP_WHOLE) != XSEG_OK)
        xseg_clear_error(); /* the allocation itself succeeded */
    xs->premapped += xs->mapped.cur - before;
    if (xs->mapped.cur > before && !(r->flags & XB_LRU))
        lru_push(xs, r); /* cached memory: reclaim and trim find it */
}

/* Must the worker's queued unmaps be finished before block b is taken?
 * When b needs new pages: the growth may meet the cap, the GC or the
 * release threshold with a reclaim, and even when it does not, the search
 * run again once the old ranges are free space again places it better
 * (host model, embed_bert: 1.012-1.014 against 1.015-1.042 when only
 * growth that reclaims waited).  And when the layout allows a split of a
 * large handle b only partly covers.  A block already mapped that no split
 * touches (a cached block, the common case) needs neither. */
static int may_release(xseg_t *xs, const xblock *b)
{
    uintptr_t hs[2], he[2];
    int can[2];
    return !xarena_all_mapped(xs, b->addr, b->addr + b->size) ||
           split_layout(xs, b, can, hs, he);
}

/* A handle released while the worker has not yet unmapped its old mapping
 * (from a move) keeps its memory until that unmap: the driver frees
 * physical memory at the last unmap, and mapped_bytes would no longer be
 * the device's figure (measured on the H200: docs/performance.md).  So
 * before an allocation that may release handles (may_release), the block
 * found goes back, the queued unmaps are finished (those not started on
 * this thread, without giving up the lock), and the search runs again.  A
 * cached block goes on while the worker unmaps: waiting there made the
 * caller pay for every unmap it had handed over, plus two thread
 * hand-offs (docs/benchmarks.md, the H200's serve_paged_kv). */
static xblock *find_after_drain(xseg_t *xs, xfit *f)
{
    xblock *b = f->block;
    if (!xs->wk_unmapping || !may_release(xs, b))
        return b;
    if (!f->from)
        b->owner = NULL;
    b->epoch = f->from ? f->epoch : 0;
    coalesce(xs, b, 1);
    xworker_finish_unmaps_locked(xs);
    return find_block(xs, f);
}

xseg_status xblk_alloc(xseg_t *xs, xstream *s, size_t size, size_t request, xblock **out)
{
    xworker_settle_locked(xs); /* what the worker has done goes back to free space */
    xfit f = {.s = s, .size = size};
    xblock *b = find_block(xs, &f);
    if (b)
        b = find_after_flush(xs, &f);
    if (b)
        b = find_after_drain(xs, &f);
    if (!b) {
        char b1[32];
        return xseg_fail(xs, XSEG_ERR_VA_EXHAUSTED,
                         "xseg: no free virtual range of %zu bytes in the %s arena; "
                         "raise va_size", size, xseg_fmt_size(xs->arena.size, b1, sizeof b1));
    }
    xs->arena_used += b->size;
    int steady = xs->arena_used <= xs->budget_peak;
    if (!steady)
        xs->budget_peak = xs->arena_used;
    if (!xs->wk_unmapping) /* a split releases handles: not while old mappings wait */
        split_large(xs, b, f.from, f.epoch);
    xseg_status st = ensure_mapped(xs, b, request, steady);
    if (st != XSEG_OK) {
        xs->arena_used -= b->size;
        if (xarena_unmapped_bytes(xs, b->addr, b->addr + b->size) ==
            round_page(xs, b->size))
            b->owner = NULL; /* never used by the GPU */
        b->epoch = b->owner ? b->owner->epoch : 0;
        coalesce(xs, b, 1);
        return st;
    }
    xslack_note(xs, b->size);
    if (frontier_after(xs, b)) {
        if (!xs->streak++)
            xs->streak_base = xs->arena_used - b->size;
        if (xs->streak >= XSEG_PREMAP_STREAK)
            premap_after(xs, b);
    } else {
        xs->streak = 0;
    }
    *out = b;
    return XSEG_OK;
}

void xblk_neutralize(xseg_t *xs, xstream *s)
{
    xblock *b;
    while ((b = xfi_find(&s->idx, XSEG_MIN_BLOCK, SIZE_MAX)) != NULL)
        make_neutral(xs, b, b->flags & XB_LRU);
}

void xblk_free(xseg_t *xs, xblock *b)
{
    xworker_settle_locked(xs); /* before b is touched: b is live, no settle merges it */
    XSEG_ASSERT(!(b->flags & (XB_FREE | XB_LRU | XB_MOVED)) && xs->arena_used >= b->size);
    xs->arena_used -= b->size;
    if (b->owner && b->owner->retired)
        b->owner = NULL; /* its stream's work is known to be done */
    b->epoch = b->owner ? b->owner->epoch : 0;
    b->stamp = ++xs->stamp;
    int refused, now = xs->conf.release_threshold == XSEG_RELEASE_NOW; /* release_threshold:0 */
    int release = !xs->conf.caching || now; /* released at once, not cached */
    if (release && xs->wk_unmapping)
        xworker_finish_unmaps_locked(xs); /* as xseg_reclaim: b may hold a moved handle */
    b = coalesce(xs, b, 1);
    if (release &&
        (!b->owner || xstream_done(xs, b->owner, b->epoch, !xs->conf.caching || xs->conf.release_wait)))
    {
        xs->rel_async = 1;
        reclaim_block(xs, b, SIZE_MAX, &refused); /* a refusal leaves it cached */
        xs->rel_async = 0;
    }
}
