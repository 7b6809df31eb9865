/* snapshot.c: JSON dump of the allocator's memory layout: the segment with
 * its mapped and unmapped ranges and its physical handles, and every block
 * in address order (address, size, requested size, state, stream; slabs
 * with their live slots).  An allocator with tags has one segment per tag
 * allocator of its family (its own first, as tag 0), each segment and
 * block naming its tag; the totals are the family's.  Walks everything
 * under the locks (the parent's, then each tag's, the one order allowed):
 * for debugging and pictures (tools/xseg-viz), not for the hot path. */
#include <stdio.h>

#include "bitmap.h"
#include "internal.h"
#include "textbuf.h"


typedef unsigned long long ull;

/* Runs of pages whose mapped bit is `val`, as [address, length] pairs. */
static void render_runs(xtb *b, const xarena *ar, int val)
{
    size_t p = xbm_next(ar->mapped_bits, 0, ar->npages, val);
    const char *sep = "";
    while (p < ar->npages) {
        size_t q = xbm_next(ar->mapped_bits, p, ar->npages, !val);
        xtb_put(b, "%s[%llu,%llu]", sep, (ull)(ar->base + (p << ar->shift)),
             (ull)((q - p) << ar->shift));
        sep = ",";
        p = q < ar->npages ? xbm_next(ar->mapped_bits, q, ar->npages, val) : q;
    }
}

static void render_handles(xtb *b, const xarena *ar)
{
    size_t p = xbm_next(ar->mapped_bits, 0, ar->npages, 1);
    const char *sep = "";
    while (p < ar->npages) {
        const xhandle *h = &ar->handles[ar->page_handle[p]];
        size_t end = (size_t)h->first_page + h->npages;
        xtb_put(b, "%s{\"addr\":%llu,\"size\":%llu,\"handle\":%llu}", sep,
             (ull)(ar->base + ((uintptr_t)h->first_page << ar->shift)),
             (ull)((size_t)h->npages << ar->shift), (ull)h->drv);
        sep = ",\n";
        p = end < ar->npages ? xbm_next(ar->mapped_bits, end, ar->npages, 1) : end;
    }
}

static int page_mapped(const xarena *ar, size_t p)
{
    return (int)((ar->mapped_bits[p >> 6] >> (p & 63)) & 1);
}

/* Bytes of [a, b) that lie in mapped pages. */
static size_t block_mapped(const xarena *ar, uintptr_t a, uintptr_t b)
{
    size_t p0 = (a - ar->base) >> ar->shift, p1 = (b - 1 - ar->base) >> ar->shift;
    if (p0 == p1)
        return page_mapped(ar, p0) ? b - a : 0;
    uintptr_t end0 = ar->base + ((p0 + 1) << ar->shift), start1 = ar->base + (p1 << ar->shift);
    size_t m = page_mapped(ar, p0) ? end0 - a : 0;
    m += page_mapped(ar, p1) ? b - start1 : 0;
    return m + (xbm_count(ar->mapped_bits, p0 + 1, p1) << ar->shift);
}

static const char *state_of(const xseg_t *xs, const xblock *b)
{
    uintptr_t v;
    if (b->flags & XB_SLAB)
        return "slab";
    if (b->flags & XB_FREE)
        return "free";
    if (b->flags & XB_MOVED)
        return "unmapping";
    if (b->flags & XB_RELEASING)
        return "releasing";
    return xseg_ptrmap_get(&xs->live, b->addr, &v) ? "allocated" : "pending";
}

static void render_slots(xtb *b, const xslab *sl)
{
    const char *sep = "";
    xtb_put(b, ",\"slot_size\":%u,\"slots\":%u,\"used\":%u,\"live\":[", sl->slot_size, sl->nslots,
         sl->nslots - sl->nfree);
    for (uint32_t i = 0; i < sl->nslots; i++) {
        uintptr_t a = sl->blk->addr + (uintptr_t)i * sl->slot_size;
        uint32_t req = xsmall_requested(sl, a);
        if (req) {
            xtb_put(b, "%s[%llu,%u]", sep, (ull)a, req);
            sep = ",";
        }
    }
    xtb_put(b, "]");
}

static void render_block(xtb *b, const xseg_t *xs, const xblock *k, const char *sep, int tag)
{
    const char *state = state_of(xs, k);
    const xstream *s = k->slab ? k->slab->owner : k->owner;
    xtb_put(b, "%s{\"addr\":%llu,\"size\":%llu,\"requested\":%llu,\"state\":\"%s\",\"stream\":",
         sep, (ull)k->addr, (ull)k->size, (ull)((k->flags & (XB_FREE | XB_SLAB | XB_MOVED | XB_RELEASING)) ? 0 : xseg_requested_of(k->addr, (uintptr_t)k)),
         state);
    if (s)
        xtb_put(b, "%llu", (ull)(uintptr_t)s->handle);
    else
        xtb_put(b, "null");
    xtb_put(b, ",\"mapped\":%llu,\"tag\":%d",
            (ull)block_mapped(&xs->arena, k->addr, k->addr + k->size), tag);
    if (k->flags & XB_SLAB)
        render_slots(b, k->slab);
    xtb_put(b, "}");
}

/* An allocator of the family and its tag. */
typedef struct member {
    xseg_t *xs;
    int tag;
} member;

/* xs (tag 0) and the allocators of its tags, tag order; the count. */
static size_t family_of(xseg_t *xs, member m[XSEG_MAX_TAGS])
{
    size_t n = 0;
    m[n++] = (member){xs, 0};
    for (int t = 1; t < XSEG_MAX_TAGS; t++) {
        xseg_t *c = atomic_load_explicit(&xs->tags[t], memory_order_acquire);
        if (c)
            m[n++] = (member){c, t};
    }
    return n;
}

static void render_segment(xtb *b, const member *m, const char *sep)
{
    const xseg_t *xs = m->xs;
    const xarena *ar = &xs->arena;
    const char *name = xseg_tag_name(m->tag);
    xtb_put(b, "%s{\"base\":%llu,\"size\":%llu,\"mapped_bytes\":%llu,\"tag\":%d,"
            "\"tag_name\":\"%s\",\"asleep\":%d,\"allocated\":%llu,\"mapped\":[",
            sep, (ull)ar->base, (ull)ar->size, (ull)xs->mapped.cur, m->tag, name ? name : "",
            atomic_load(&xs->asleep), (ull)xs->allocated.cur);
    render_runs(b, ar, 1);
    xtb_put(b, "],\n\"unmapped\":[");
    render_runs(b, ar, 0);
    xtb_put(b, "],\n\"handles\":[\n");
    render_handles(b, ar);
    xtb_put(b, "],\n\"blocks\":[\n");
    const char *bsep = "";
    for (const xblock *k = xs->first_block; k; k = k->anext, bsep = ",\n")
        render_block(b, xs, k, bsep, m->tag);
    xtb_put(b, "]}");
}

static void render(xtb *b, const member *m, size_t n)
{
    const xseg_t *xs = m[0].xs;
    uint64_t alloc = 0, req = 0, active = 0, mapped = 0, cached = 0;
    for (size_t i = 0; i < n; i++) {
        const xseg_t *c = m[i].xs;
        alloc += c->allocated.cur;
        req += c->requested.cur;
        active += c->active.cur;
        mapped += c->mapped.cur;
        cached += c->mapped.cur > c->allocated.cur ? c->mapped.cur - c->allocated.cur : 0;
    }
    xtb_put(b, "{\"version\":1,\"device\":%d,\"backend\":\"%s\",\"page_size\":%llu,"
            "\"allocated\":%llu,\"requested\":%llu,\"active\":%llu,\"mapped\":%llu,"
            "\"cached\":%llu,\"cap\":%llu,\"device_total\":%llu,\"segments\":[\n",
            xs->device, xdrv_name(xs), (ull)xs->arena.page, (ull)alloc, (ull)req, (ull)active,
            (ull)mapped, (ull)cached, (ull)(xs->cap == SIZE_MAX ? 0 : xs->cap),
            (ull)xs->dev_total);
    const char *sep = "";
    for (size_t i = 0; i < n; i++)
        if (m[i].xs->arena.base) {
            render_segment(b, &m[i], sep);
            sep = ",\n";
        }
    xtb_put(b, "]}");
}

xseg_status xseg_snapshot_json(xseg_t *xs, char *buf, size_t cap, size_t *len)
{
    if (!xs)
        return xseg_fail(NULL, XSEG_ERR_INVALID_ARG, "xseg_snapshot_json: allocator is NULL");
    if (xseg_check_fork(xs, "xseg_snapshot_json") != XSEG_OK)
        return XSEG_ERR_FORKED;
    if (!buf && cap)
        return xseg_fail(xs, XSEG_ERR_INVALID_ARG, "xseg_snapshot_json: buf is NULL");
    xtb b = {buf, cap, 0};
    member m[XSEG_MAX_TAGS];
    size_t n = family_of(xs->parent ? xs->parent : xs, m);
    for (size_t i = 0; i < n; i++) { /* the parent first, then its tags */
        xlock_lock(&m[i].xs->lock);
        xtc_flush_all(m[i].xs); /* blocks held in thread caches are shown free */
    }
    render(&b, m, n);
    for (size_t i = n; i-- > 0;)
        xlock_unlock(&m[i].xs->lock);
    if (len)
        *len = b.len;
    if (b.len + 1 > cap)
        return xseg_fail(xs, XSEG_ERR_BUFFER_TOO_SMALL,
                         "xseg_snapshot_json: %zu bytes needed, buffer has %zu", b.len + 1, cap);
    return XSEG_OK;
}
