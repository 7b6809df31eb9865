/* tcache.c: per-thread caches in front of the allocator's lock.  A block a
 * thread frees goes into that thread's bin for its (stream, size) and is
 * handed out again by the same thread's next request of that size on that
 * stream, with no lock but the cache's own (uncontended) one.
 *
 * Invariants:
 *  - A block in a bin is still allocated in the allocator's own structures
 *    (live map, arena); its generation word has the low bit set ("held"), so
 *    the global path rejects a second free of it as a double free.
 *  - A thread remembers the live allocations it got (ptr -> tag, size,
 *    generation).  Its fast free trusts an entry only while the block's
 *    generation word still equals the remembered one: any global free or
 *    re-allocation changes it, so stale entries fall back to the global path.
 *    Block records and slab metadata are never freed while the allocator
 *    lives, so reading a generation word is always safe.
 *  - Counters: the global counters count held blocks as allocated; each cache
 *    keeps the corrections and its own part of the monotone counters (calls,
 *    totals), written under the cache lock.  tc_fold moves them into the
 *    allocator's counters (xs->lock and the cache lock held) whenever the
 *    allocator's lock meets the cache: every flush (trim, growth, thread
 *    exit) and every global allocation of the thread; nothing is lost when
 *    a thread exits.  xtc_adjust_stats adds the live caches' parts, so a
 *    stats read is exact and monotone counters never go back.
 *  - requested_bytes: a cache hit may re-serve a block for another request
 *    size of its class (the block's request is rewritten), so a cache's
 *    correction req_adj is (requests of its hits) - (requests of its
 *    frees) since its last fold, of either sign, and the allocator's own
 *    requested.cur (true value - sum of req_adj) may lie below the true
 *    value, even below 0 for a moment (a larger re-served request freed by
 *    another thread before the fold).  Only sums are ever shown (stats
 *    reads add the parts; snapshots and peak resets flush first); peaks
 *    compare signed (xcnt_add), and tc_fold and stats reads raise the peak
 *    to the exact value, so a peak never wraps and is never below current.
 * Lock order: g_tc_lock -> xs->lock -> cache lock.  The fast path takes only
 * the cache lock. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define TC_BINS 8
#define TC_DEPTH 4
#define TC_SLOTS 8          /* allocators a thread caches for */
#define TC_MAP 512          /* remembered live allocations (power of two) */
#define TC_MAX_BYTES ((size_t)64 << 20)

typedef struct tc_entry {
    uintptr_t addr, tag;
    _Atomic uint64_t *genp;
    uint64_t gen;           /* generation when remembered (even) */
    size_t rounded, req;    /* block size; caller's request */
    void *stream;
} tc_entry;

typedef struct tc_bin {
    void *stream;
    size_t rounded;
    uint32_t n;
    tc_entry e[TC_DEPTH];
} tc_bin;

struct xtc {
    atomic_flag busy;
    xseg_t *xs;             /* NULL once the allocator is destroyed */
    uint64_t xs_id;
    struct xtc *next;       /* in xs's registry */
    size_t held_bytes;
    tc_bin *last_bin;       /* the bin used last (checked first) */
    tc_bin bins[TC_BINS];
    tc_entry map[TC_MAP];   /* addr == 0: empty */
    uint32_t map_count;
    /* corrections to the global counters, read by xtc_adjust_stats, and
     * this thread's part of the monotone ones since the last tc_fold: calls,
     * and hits' bytes, count and requests (allocated / active / requested
     * totals) */
    _Atomic int64_t held_b, held_n, req_adj;
    _Atomic uint64_t allocs, frees, hit_b, hit_n, hit_req;
};

static pthread_mutex_t g_tc_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_key_t g_tc_key;
static pthread_once_t g_tc_once = PTHREAD_ONCE_INIT;
/* initial-exec: a plain %fs-relative access, not a __tls_get_addr call */
static _Thread_local xtc *tl_tc[TC_SLOTS] __attribute__((tls_model("initial-exec")));

/* Counters are written only under the cache lock: single writer, so a
 * relaxed load and store (plain moves) instead of a locked add. */
static inline void cadd(_Atomic int64_t *c, int64_t v)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + v,
                          memory_order_relaxed);
}

static inline void uadd(_Atomic uint64_t *c, uint64_t v)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + v,
                          memory_order_relaxed);
}

/* Read a part and zero it (cache lock held: single writer). */
static inline uint64_t utake(_Atomic uint64_t *c)
{
    uint64_t v = atomic_load_explicit(c, memory_order_relaxed);
    atomic_store_explicit(c, 0, memory_order_relaxed);
    return v;
}

static void tc_lock(xtc *tc)
{
    while (atomic_flag_test_and_set_explicit(&tc->busy, memory_order_acquire))
        xlock_pause();
}

static void tc_unlock(xtc *tc)
{
    atomic_flag_clear_explicit(&tc->busy, memory_order_release);
}

static _Thread_local xtc *tl_last __attribute__((tls_model("initial-exec")));

static xtc *tc_find(const xseg_t *xs)
{
    xtc *tc = tl_last;
    if (tc && tc->xs_id == xs->id)
        return tc;
    for (int i = 0; i < TC_SLOTS; i++)
        if (tl_tc[i] && tl_tc[i]->xs_id == xs->id)
            return tl_last = tl_tc[i];
    return NULL;
}

/* ---- remembered live allocations (open addressing, dropped when full) ----
 * A fixed table of whole entries (no malloc on the hot path), hashed and
 * shifted back on deletion by ptrmap.h's rules. */

static inline size_t map_slot(uintptr_t addr)
{
    return xseg_ptrmap_home(addr, 4, TC_MAP - 1);
}

static void map_put(xtc *tc, const tc_entry *e)
{
    if (tc->map_count * 2 >= TC_MAP) { /* only a cache: forget everything */
        memset(tc->map, 0, sizeof tc->map);
        tc->map_count = 0;
    }
    size_t i = map_slot(e->addr);
    while (tc->map[i].addr && tc->map[i].addr != e->addr)
        i = (i + 1) & (TC_MAP - 1);
    if (!tc->map[i].addr)
        tc->map_count++;
    tc->map[i] = *e;
}

/* Remove and return the entry of addr (backward-shift deletion). */
static int map_take(xtc *tc, uintptr_t addr, tc_entry *out)
{
    size_t i = map_slot(addr);
    while (tc->map[i].addr != addr) {
        if (!tc->map[i].addr)
            return 0;
        i = (i + 1) & (TC_MAP - 1);
    }
    *out = tc->map[i];
    for (size_t j = i;;) {
        j = (j + 1) & (TC_MAP - 1);
        if (!tc->map[j].addr)
            break;
        if (xseg_ptrmap_movable(i, map_slot(tc->map[j].addr), j)) {
            tc->map[i] = tc->map[j];
            i = j;
        }
    }
    tc->map[i].addr = 0;
    tc->map_count--;
    return 1;
}

/* ---- bins ---- */

static tc_bin *bin_for(xtc *tc, void *stream, size_t rounded, int create)
{
    tc_bin *last = tc->last_bin;
    if (last && last->stream == stream && last->rounded == rounded && (last->n || create))
        return last;
    tc_bin *empty = NULL;
    for (int i = 0; i < TC_BINS; i++) {
        tc_bin *b = &tc->bins[i];
        if (b->n && b->stream == stream && b->rounded == rounded)
            return tc->last_bin = b;
        if (!b->n && !empty)
            empty = b;
    }
    if (!create || !empty)
        return NULL;
    empty->stream = stream;
    empty->rounded = rounded;
    return tc->last_bin = empty;
}

/* The allocator's own record of the request.  Written under the cache
 * lock while the block is this thread's (held or just handed out), read by
 * the global path only for live blocks and by flush under the cache lock.
 * A snapshot reads it under xs->lock while this thread may rewrite it, so
 * both sides use relaxed atomics (the figure is either request; TSan's
 * stress run caught the plain write, 2026-12-07). */
static void set_requested(const tc_entry *e, size_t size)
{
    if (e->tag & 1) {
        xslab *sl = (xslab *)(e->tag & ~(uintptr_t)1);
        __atomic_store_n(&sl->req[(e->addr - sl->blk->addr) / sl->slot_size], (uint32_t)size,
                         __ATOMIC_RELAXED);
    } else {
        __atomic_store_n(&((xblock *)e->tag)->requested, size, __ATOMIC_RELAXED);
    }
}

/* ---- fast paths (no allocator lock) ---- */

int xtc_alloc(xseg_t *xs, size_t rounded, size_t size, void *stream, void **out)
{
    xtc *tc = tc_find(xs);
    if (!tc)
        return 0;
    tc_lock(tc);
    tc_bin *b = tc->xs ? bin_for(tc, stream, rounded, 0) : NULL;
    if (!b) {
        tc_unlock(tc);
        return 0;
    }
    tc_entry e = b->e[--b->n];
    atomic_store_explicit(e.genp, e.gen, memory_order_relaxed); /* no longer held */
    e.req = size;
    set_requested(&e, size); /* what xseg_block_size and a global free read */
    map_put(tc, &e);
    tc->held_bytes -= e.rounded;
    cadd(&tc->held_b, -(int64_t)e.rounded);
    cadd(&tc->held_n, -1);
    cadd(&tc->req_adj, (int64_t)size);
    uadd(&tc->allocs, 1);
    uadd(&tc->hit_b, e.rounded);
    uadd(&tc->hit_n, 1);
    uadd(&tc->hit_req, size);
    tc_unlock(tc);
    *out = (void *)e.addr;
    return 1;
}

int xtc_free(xseg_t *xs, void *ptr)
{
    xtc *tc = tc_find(xs);
    if (!tc || atomic_load_explicit(&xs->nuses, memory_order_relaxed))
        return 0;
    tc_lock(tc);
    tc_entry e;
    if (!tc->xs || !map_take(tc, (uintptr_t)ptr, &e)) {
        tc_unlock(tc);
        return 0;
    }
    tc_bin *b = NULL;
    if (atomic_load_explicit(e.genp, memory_order_relaxed) == e.gen &&
        tc->held_bytes + e.rounded <= TC_MAX_BYTES)
        b = bin_for(tc, e.stream, e.rounded, 1);
    if (!b || b->n == TC_DEPTH) {
        tc_unlock(tc); /* stale, full or too large: the global path decides */
        return 0;
    }
    atomic_store_explicit(e.genp, e.gen | 1, memory_order_relaxed); /* held */
    b->e[b->n++] = e;
    tc->held_bytes += e.rounded;
    cadd(&tc->held_b, (int64_t)e.rounded);
    cadd(&tc->held_n, 1);
    cadd(&tc->req_adj, -(int64_t)e.req);
    uadd(&tc->frees, 1);
    tc_unlock(tc);
    return 1;
}

/* ---- slow paths (allocator lock held unless stated) ---- */

/* Move tc's parts into the allocator's counters (cache lock held too).  The
 * held blocks' requests that req_adj carried are subtracted now (flush adds
 * each back before the global free subtracts it again).  A larger request
 * re-served by a hit reaches requested.cur here: the peak follows. */
static void tc_fold(xseg_t *xs, xtc *tc)
{
    xs->requested.cur += (uint64_t)atomic_load_explicit(&tc->req_adj, memory_order_relaxed);
    atomic_store_explicit(&tc->req_adj, 0, memory_order_relaxed);
    if ((int64_t)xs->requested.cur > (int64_t)xs->requested.peak)
        xs->requested.peak = xs->requested.cur;
    xs->alloc_calls += utake(&tc->allocs);
    xs->free_calls += utake(&tc->frees);
    xs->allocated.total += utake(&tc->hit_b);
    xs->active.total += utake(&tc->hit_n);
    xs->requested.total += utake(&tc->hit_req);
}

void xtc_note(xseg_t *xs, uintptr_t addr, uintptr_t tag, _Atomic uint64_t *genp, uint64_t gen,
              size_t rounded, size_t req, void *stream)
{
    xtc *tc = tc_find(xs);
    if (!tc)
        return;
    tc_entry e = {addr, tag, genp, gen, rounded, req, stream};
    tc_lock(tc);
    if (tc->xs) {
        map_put(tc, &e);
        tc_fold(xs, tc); /* bounds how long the allocator's figures lag */
    }
    tc_unlock(tc);
}

/* Give the held blocks of tc for `stream` (all of them when `all`) back to
 * the allocator and fold tc's counter parts in (xs->lock held).  The fold
 * already subtracted the held blocks' requests: each is added back just
 * before the global free subtracts it again, so that it is subtracted
 * once. */
static void flush_bins(xseg_t *xs, xtc *tc, void *stream, int all)
{
    tc_lock(tc);
    tc_fold(xs, tc);
    for (int i = 0; i < TC_BINS; i++) {
        tc_bin *b = &tc->bins[i];
        if (!all && b->stream != stream)
            continue;
        for (uint32_t k = 0; k < b->n; k++) { /* oldest first, for the LRU */
            tc_entry e = b->e[k];
            atomic_store_explicit(e.genp, e.gen, memory_order_relaxed);
            xs->requested.cur += xseg_requested_of(e.addr, e.tag);
            tc->held_bytes -= e.rounded;
            cadd(&tc->held_b, -(int64_t)e.rounded);
            cadd(&tc->held_n, -1);
            xseg_free_locked(xs, e.addr); /* no stats_shm with thread caches */
        }
        b->n = 0;
    }
    tc_unlock(tc);
}

static void flush(xseg_t *xs, xtc *tc)
{
    flush_bins(xs, tc, NULL, 1);
}

void xtc_flush_own(xseg_t *xs)
{
    xtc *tc = tc_find(xs);
    if (tc && tc->held_bytes)
        flush(xs, tc);
}

void xtc_flush_all(xseg_t *xs)
{
    for (xtc *tc = xs->tcs; tc; tc = tc->next)
        flush(xs, tc);
}

void xtc_flush_for(xseg_t *xs, void *stream)
{
    for (xtc *tc = xs->tcs; tc; tc = tc->next)
        flush_bins(xs, tc, stream, 0);
}

int xtc_held_for(xseg_t *xs, void *stream)
{
    for (xtc *tc = xs->tcs; tc; tc = tc->next) {
        int held = 0;
        tc_lock(tc);
        for (int i = 0; i < TC_BINS && !held; i++)
            held = tc->bins[i].n && tc->bins[i].stream == stream;
        tc_unlock(tc);
        if (held)
            return 1;
    }
    return 0;
}

/* The live caches' parts, each read under its cache lock (one consistent
 * state per thread; with xs->lock held no block moves between threads, so
 * the sum is exact). */
void xtc_adjust_stats(xseg_t *xs, xseg_stats *s)
{
    for (xtc *tc = xs->tcs; tc; tc = tc->next) {
        tc_lock(tc);
        s->allocated_bytes.current -= (uint64_t)atomic_load(&tc->held_b);
        s->active_blocks.current -= (uint64_t)atomic_load(&tc->held_n);
        s->requested_bytes.current += (uint64_t)atomic_load(&tc->req_adj);
        s->alloc_calls += atomic_load(&tc->allocs);
        s->free_calls += atomic_load(&tc->frees);
        s->allocated_bytes.total += atomic_load(&tc->hit_b);
        s->active_blocks.total += atomic_load(&tc->hit_n);
        s->requested_bytes.total += atomic_load(&tc->hit_req);
        tc_unlock(tc);
    }
}

/* ---- registration ---- */

static void unregister(xseg_t *xs, xtc *tc)
{
    for (xtc **p = (xtc **)&xs->tcs; *p; p = &(*p)->next)
        if (*p == tc) {
            *p = tc->next;
            break;
        }
}

/* Thread exit: hand back what this thread holds, then forget its caches. */
static void on_thread_exit(void *unused)
{
    (void)unused;
    pthread_mutex_lock(&g_tc_lock);
    for (int i = 0; i < TC_SLOTS; i++) {
        xtc *tc = tl_tc[i];
        if (!tc)
            continue;
        tl_tc[i] = NULL;
        tl_last = NULL;
        xseg_t *xs = tc->xs;
        if (xs) {
            xlock_lock(&xs->lock);
            flush(xs, tc);
            unregister(xs, tc);
            xlock_unlock(&xs->lock);
        }
        free(tc);
    }
    pthread_mutex_unlock(&g_tc_lock);
}

/* g_tc_lock is held across fork() (process.c's handler, which exists
 * before any allocator does), so a child never inherits it locked by
 * another thread. */
void xtc_fork_lock(int take)
{
    if (take)
        pthread_mutex_lock(&g_tc_lock);
    else
        pthread_mutex_unlock(&g_tc_lock);
}

/* The key for the exit destructor. */
static void make_key(void)
{
    pthread_key_create(&g_tc_key, on_thread_exit);
}

/* Called without xs->lock, before the thread's first global allocation. */
void xtc_attach(xseg_t *xs)
{
    if (!xs->tc_on || tc_find(xs))
        return;
    int slot = -1;
    for (int i = 0; i < TC_SLOTS && slot < 0; i++)
        if (!tl_tc[i] || !tl_tc[i]->xs)
            slot = i;
    if (slot < 0)
        return; /* this thread already caches for many allocators */
    pthread_once(&g_tc_once, make_key);
    xtc *tc = xseg_calloc_lines(sizeof *tc);
    if (!tc)
        return;
    atomic_flag_clear(&tc->busy);
    tc->xs = xs;
    tc->xs_id = xs->id;
    pthread_mutex_lock(&g_tc_lock);
    xtc *old = tl_tc[slot];
    if (old) { /* its allocator was destroyed: nothing left to hand back */
        if (tl_last == old)
            tl_last = NULL;
        free(old);
    }
    xlock_lock(&xs->lock);
    tc->next = xs->tcs;
    xs->tcs = tc;
    xlock_unlock(&xs->lock);
    tl_tc[slot] = tc;
    pthread_mutex_unlock(&g_tc_lock);
    pthread_setspecific(g_tc_key, tc); /* any non-NULL value runs the destructor */
}

/* Allocator destroy: detach every cache (their threads free them).  Takes
 * g_tc_lock then xs->lock itself. */
void xtc_detach_all(xseg_t *xs)
{
    pthread_mutex_lock(&g_tc_lock);
    xlock_lock(&xs->lock);
    for (xtc *tc = xs->tcs; tc; tc = tc->next) {
        tc_lock(tc);
        tc->xs = NULL;
        memset(tc->bins, 0, sizeof tc->bins);
        tc->held_bytes = 0;
        tc_unlock(tc);
    }
    xs->tcs = NULL;
    xlock_unlock(&xs->lock);
    pthread_mutex_unlock(&g_tc_lock);
}
