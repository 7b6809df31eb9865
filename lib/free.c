/* free.c: the free core, below the entry points (api.c) and the thread
 * caches (tcache.c), above the block allocator, the slabs and the streams:
 * the global free of a live user address, the release of a user block or
 * slot once its stream uses are done, the processing of the deferred frees
 * waiting on record_stream events, and what a retired stream gives back
 * (its cached blocks and empty slabs become everyone's; its state is freed
 * once nothing refers to it).  Called with xs->lock held. */
#include <stdlib.h>

#include "internal.h"

/* Real release of a user allocation (its stream uses, if any, are done). */
void xseg_release_user(xseg_t *xs, uintptr_t addr, uintptr_t tag)
{
    if (tag & 1)
        xsmall_free(xs, (xslab *)(tag & ~(uintptr_t)1), addr);
    else
        xblk_free(xs, (xblock *)tag);
}

/* A freed allocation used on other streams waits in the pending list; with
 * no memory for its entry, it waits for those streams now. */
static uintptr_t defer_uses(xseg_t *xs, uintptr_t addr, uintptr_t tag)
{
    uintptr_t u = 0;
    if (!xs->uses.count || !xseg_ptrmap_del(&xs->uses, addr, &u))
        return 0;
    atomic_store_explicit(&xs->nuses, (int)xs->uses.count, memory_order_relaxed);
    if (xpending_add(xs, addr, tag, (xuses *)u) == XSEG_OK)
        return u;
    for (uint32_t i = 0; i < ((xuses *)u)->n; i++) /* no memory: wait now */
        xstream_done(xs, ((xuses *)u)->u[i].s, ((xuses *)u)->u[i].s->epoch, 1);
    free((void *)u);
    return 0;
}

xseg_status xseg_free_locked(xseg_t *xs, uintptr_t addr)
{
    uintptr_t tag = 0;
    if (!xseg_live_tag(xs, addr, &tag))
        return xdiag_bad_pointer(xs, (void *)addr, "xseg_free");
    xseg_ptrmap_del(&xs->live, addr, NULL);
    atomic_store_explicit(xseg_gen_of(addr, tag), 0, memory_order_relaxed);
    size_t block, req;
    xseg_sizes_of(addr, tag, &block, &req);
    xcnt_sub(&xs->allocated, block);
    xcnt_sub(&xs->requested, req);
    xcnt_sub(&xs->active, 1);
    uintptr_t u = defer_uses(xs, addr, tag);
    void *stream = xseg_owner_of(tag)->handle;
    if (!u)
        xseg_release_user(xs, addr, tag);
    xseg_hist(xs, XEV_FREE, addr, req, stream);
    return XSEG_OK; /* the caller publishes (xseg_shm) */
}

static int uses_done(xseg_t *xs, xuses *u, int block)
{
    for (uint32_t i = 0; i < u->n; i++) {
        xstream *s = u->u[i].s;
        uint64_t e = u->u[i].epoch ? u->u[i].epoch : s->epoch;
        if (!xstream_done(xs, s, e, block))
            return 0;
    }
    return 1;
}

void xpending_process(xseg_t *xs, int block)
{
    xpending **pp = &xs->pend_head, *last = NULL;
    while (*pp) {
        xpending *p = *pp;
        if (!uses_done(xs, p->uses, block)) {
            last = p;
            pp = &p->next;
            continue;
        }
        *pp = p->next;
        uintptr_t addr = p->addr, tag = p->tag;
        free(p->uses);
        free(p);
        xseg_release_user(xs, addr, tag);
    }
    xs->pend_tail = last;
}

/* ---- retired streams: blocks and slabs, around the stream side ---- */

/* A gone stream's work is complete: its event goes, its cached blocks and
 * empty slabs become everyone's, its uses are forgotten. */
static void settle(xseg_t *xs, xstream *s)
{
    xstream_settle_begin(xs, s);
    xblk_neutralize(xs, s);
    xsmall_drop_stream(xs, s);
    xstream_settle_end(xs, s);
}

void xseg_collect_streams(xseg_t *xs, int block)
{
    for (xstream *g = xs->gone_streams; g; g = g->next_all)
        if (!g->retired && xstream_done(xs, g, g->epoch, block))
            settle(xs, g);
    xstreams_sweep(xs);
}

void xseg_retire_stream(xseg_t *xs, xstream *s)
{
    if (xstream_retire_begin(xs, s))
        settle(xs, s);
    if (xs->ngone >= 2 * xs->gone_floor + 16)
        xseg_collect_streams(xs, 0);
}

/* A growth over the release threshold (alloc.c, through the shrinker)
 * first takes back what is held above the blocks: the deferred frees
 * (record_stream), waiting for their streams' events when release_wait is
 * on, as the threshold waits for cached blocks, so that their pages can be
 * moved under the growth; then the empty slabs kept for reuse.  On
 * cuda_churn under the preload library (asynchronous frees become
 * record_stream uses) with a GPU running behind, the deferred blocks were
 * what held the mapped peak 4% over live (docs/performance.md). */
void xseg_over_threshold(xseg_t *xs)
{
    if (xs->pend_head)
        xpending_process(xs, xs->conf.release_wait);
    xsmall_drop_kept(xs);
}

/* Retired streams are settled and collected first (waiting for their
 * retire-time events): their slabs are already gone then.  Every other
 * empty slab is a kept one (small.c). */
void xseg_drop_empty_slabs(xseg_t *xs)
{
    xseg_collect_streams(xs, 1);
    xsmall_drop_kept(xs);
}
