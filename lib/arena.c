/* arena.c: the expandable segment: one virtual reservation per allocator,
 * with physical handles mapped into it on demand and released again when
 * whole handles lie inside free space.  Tracks which pages are mapped
 * (bitmap) and which handle backs each page. */
#include <stdlib.h>
#include <string.h>

#include "bitmap.h"
#include "internal.h"

static size_t pow2_floor(size_t x)
{
    return x ? (size_t)1 << (63 - __builtin_clzll((unsigned long long)x)) : 0;
}

/* va_size, rounded up to whole pages, needs more pages than the page table
 * holds (2^32 - 2) or more bytes than a size_t: a conf error naming the key
 * the value came from (va_size, or host_capacity through the automatic
 * va_size) and page_size. */
static xseg_status va_too_large(xseg_t *xs, size_t va_size, size_t page)
{
    size_t most = SIZE_MAX / page < UINT32_MAX - 1 ? SIZE_MAX / page : UINT32_MAX - 1;
    if (xs->conf.va_size)
        return xseg_fail(xs, XSEG_ERR_CONFIG,
                         "xseg conf: bad value \"%zu\" for key \"va_size\": too large for "
                         "page_size %zu: at most %zu bytes (%zu x page_size)",
                         va_size, page, most * page, most);
    return xseg_fail(xs, XSEG_ERR_CONFIG,
                     "xseg conf: the automatic va_size (4 x device memory: %zu bytes; "
                     "host_capacity on the host backend) is too large for page_size %zu: "
                     "set key \"va_size\" to at most %zu bytes", va_size, page, most * page);
}

xseg_status xarena_init(xseg_t *xs, size_t va_size)
{
    xarena *ar = &xs->arena;
    size_t gran = 0;
    int rc = xdrv_granularity(xs, &gran);
    if (rc != XDRV_SUCCESS || gran == 0)
        return xseg_fail(xs, XSEG_ERR_DRIVER, "xseg: cannot read the allocation granularity (%s)",
                         xdrv_error_name(xs, rc));
    size_t page = xs->conf.page_size ? xs->conf.page_size : gran;
    if (page % gran)
        return xseg_fail(xs, XSEG_ERR_CONFIG,
                         "xseg conf: page_size %zu is not a multiple of the driver's granularity %zu",
                         page, gran);
    ar->page = page;
    ar->shift = (unsigned)__builtin_ctzll(page);
    size_t npages = va_size / page + (va_size % page != 0);
    if (npages >= UINT32_MAX || npages > SIZE_MAX / page)
        return va_too_large(xs, va_size, page);
    ar->npages = npages;
    ar->size = npages * page;
    ar->page_handle = calloc(ar->npages, sizeof(uint32_t));
    ar->mapped_bits = calloc((ar->npages + 63) / 64, sizeof(uint64_t));
    if (!ar->page_handle || !ar->mapped_bits)
        return xseg_fail(xs, XSEG_ERR_OOM, "xseg: no host memory for the page table of %zu pages",
                         ar->npages);
    rc = xdrv_reserve(xs, ar->size, &ar->base);
    if (rc != XDRV_SUCCESS)
        return xseg_fail(xs, rc == XDRV_OUT_OF_MEMORY ? XSEG_ERR_VA_EXHAUSTED : XSEG_ERR_DRIVER,
                         "xseg: reserving %zu bytes of virtual address space (%s %zu rounded up "
                         "to whole pages of page_size %zu) failed (%s); lower va_size%s",
                         ar->size, xs->conf.va_size ? "va_size" : "the automatic va_size",
                         va_size, page, xdrv_error_name(xs, rc),
                         xs->conf.va_size ? "" : " (4 x device memory: host_capacity on host)");
    xcnt_add(&xs->va, ar->size);
    xcnt_add(&xs->segments, 1);
    return XSEG_OK;
}

static xhandle *handle_at(xarena *ar, size_t page)
{
    return &ar->handles[ar->page_handle[page]];
}

static uint32_t handle_slot(xarena *ar)
{
    if (ar->nfree_handles)
        return ar->handle_free[--ar->nfree_handles];
    if (ar->nhandles + 1 >= ar->handle_cap) {
        uint32_t cap = ar->handle_cap ? ar->handle_cap * 2 : 256;
        xhandle *h = realloc(ar->handles, cap * sizeof *h);
        if (!h)
            return 0;
        ar->handles = h;
        uint32_t *f = realloc(ar->handle_free, cap * sizeof *f);
        if (!f)
            return 0;
        ar->handle_free = f;
        ar->handle_cap = cap;
    }
    return ++ar->nhandles; /* index 0 means "unmapped" */
}

static void handle_slot_put(xarena *ar, uint32_t i)
{
    ar->handle_free[ar->nfree_handles++] = i;
}

/* Pages per handle for a run, from the configured or automatic policy:
 * large requests get large handles (fast to map), small ones page-sized
 * handles (fine-grained release); little memory left shrinks them. */
static size_t handle_pages(const xseg_t *xs, size_t request, size_t remaining)
{
    const xarena *ar = &xs->arena;
    size_t want;
    if (xs->conf.handle_size == XSEG_HANDLE_PAGE) {
        want = 1;
    } else if (xs->conf.handle_size) {
        want = xs->conf.handle_size >> ar->shift;
    } else {
        size_t big = XSEG_BIG_REQUEST;
        want = request >= big ? pow2_floor(request) >> ar->shift : 1;
        if (want > (xs->max_handle >> ar->shift))
            want = xs->max_handle >> ar->shift;
        size_t limit = xs->cap != SIZE_MAX ? xs->cap : xs->dev_total;
        size_t left = limit > xs->mapped.cur ? limit - xs->mapped.cur : 0;
        size_t lp = pow2_floor((left / 8) >> ar->shift);
        if (want > lp)
            want = lp;
    }
    if (want < 1)
        want = 1;
    size_t r = pow2_floor(remaining);
    return want < r ? want : r;
}

static void unmap_release_run(xseg_t *xs, size_t p0, size_t p1, int *err);

/* A handle whose release failed is kept and released again later (next
 * reclaim, destroy): never forgotten, so never leaked.  It still counts
 * in xs->handles until then. */
static void orphan_keep(xseg_t *xs, uint64_t h)
{
    xarena *ar = &xs->arena;
    if (ar->norphans == ar->orphan_cap) {
        uint32_t cap = ar->orphan_cap ? ar->orphan_cap * 2 : 8;
        uint64_t *o = realloc(ar->orphans, cap * sizeof *o);
        if (!o)
            return; /* no host memory: nothing better to do */
        ar->orphans = o;
        ar->orphan_cap = cap;
    }
    ar->orphans[ar->norphans++] = h;
}

void xarena_release_orphans(xseg_t *xs)
{
    xarena *ar = &xs->arena;
    uint32_t kept = 0;
    for (uint32_t i = 0; i < ar->norphans; i++) {
        uint64_t h = ar->orphans[i];
        if (xdrv_release(xs, h) == XDRV_SUCCESS)
            xcnt_sub(&xs->handles, 1);
        else
            ar->orphans[kept++] = h;
    }
    ar->norphans = kept;
}

/* The largest power of two of pages that fits `remaining`, at most
 * `most_bytes` (0: no bound). */
static size_t pages_upto(const xseg_t *xs, size_t most_bytes, size_t remaining)
{
    size_t most = most_bytes >> xs->arena.shift;
    size_t r = pow2_floor(remaining);
    return most && r > most ? pow2_floor(most) : r;
}

/* Pages per handle of a premapped run: up to max_handle, in powers of two
 * (MAP_PREMAP: the tail can go back apart), or all of it in one handle
 * (MAP_PREMAP_WHOLE: the driver takes any multiple of the granularity, and
 * one handle is one create, one map and one handle to give access to). */
static size_t premap_pages(const xseg_t *xs, size_t remaining, int whole)
{
    size_t most = xs->max_handle >> xs->arena.shift;
    if (!whole)
        return pages_upto(xs, xs->max_handle, remaining);
    return most && remaining > most ? most : remaining;
}

/* Pages per handle when live memory is mapped again at wake (sleep.c):
 * large handles whatever handle_size says (up to 1 GiB, or max_handle
 * when larger), since the whole run is wanted at once.  A handle goes
 * back whole: a block freed later gives back the handles inside it, and
 * the rest once the blocks around it go too (docs/sleep.md). */
static size_t wake_pages(const xseg_t *xs, size_t remaining)
{
    size_t gib = (size_t)1 << 30;
    return pages_upto(xs, xs->max_handle > gib ? xs->max_handle : gib, remaining);
}

enum { MAP_DEMAND, MAP_PREMAP, MAP_PREMAP_WHOLE, MAP_WAKE };

/* Map pages [p0, p1), all unmapped, then one set_access over the run.
 * how: MAP_DEMAND (handle_pages), MAP_PREMAP or MAP_PREMAP_WHOLE (a run
 * mapped ahead of demand: premap_pages, XH_PREMAP) or MAP_WAKE
 * (wake_pages). */
static xseg_status map_run(xseg_t *xs, size_t p0, size_t p1, size_t request, int how)
{
    xarena *ar = &xs->arena;
    size_t p = p0;
    int rc = XDRV_SUCCESS, premap = how == MAP_PREMAP || how == MAP_PREMAP_WHOLE;
    xseg_op failed = XSEG_OP_CREATE;
    while (p < p1) {
        size_t n = premap ? premap_pages(xs, p1 - p, how == MAP_PREMAP_WHOLE)
                   : how == MAP_WAKE ? wake_pages(xs, p1 - p)
                                     : handle_pages(xs, request, p1 - p);
        size_t bytes = n << ar->shift;
        uint32_t slot = handle_slot(ar);
        if (!slot) {
            rc = XDRV_OUT_OF_MEMORY;
            break;
        }
        uint64_t h = 0;
        rc = xdrv_create(xs, bytes, &h);
        if (rc != XDRV_SUCCESS) {
            handle_slot_put(ar, slot);
            break;
        }
        uintptr_t va = ar->base + (p << ar->shift);
        rc = xdrv_map(xs, va, bytes, h);
        if (rc != XDRV_SUCCESS) {
            failed = XSEG_OP_MAP;
            if (xdrv_release(xs, h) != XDRV_SUCCESS) {
                xcnt_add(&xs->handles, 1);
                orphan_keep(xs, h);
            }
            handle_slot_put(ar, slot);
            break;
        }
        ar->handles[slot] = (xhandle){h, (uint32_t)p, (uint32_t)n, premap ? XH_PREMAP : 0};
        for (size_t i = p; i < p + n; i++)
            ar->page_handle[i] = slot;
        xbm_set(ar->mapped_bits, p, p + n, 1);
        xmapped_add(xs, bytes);
        xcnt_add(&xs->handles, 1);
        xseg_hist(xs, XEV_MAP, va, bytes, NULL);
        p += n;
    }
    if (rc == XDRV_SUCCESS && p > p0) {
        uintptr_t va = ar->base + (p0 << ar->shift);
        rc = xdrv_set_access(xs, va, (p1 - p0) << ar->shift);
        failed = XSEG_OP_SET_ACCESS;
    }
    if (rc == XDRV_SUCCESS)
        return XSEG_OK;
    int err = 0;
    unmap_release_run(xs, p0, p, &err); /* undo this run: nothing leaks */
    char b1[32], b2[32];
    return xseg_fail(xs, rc == XDRV_OUT_OF_MEMORY ? XSEG_ERR_OOM : XSEG_ERR_DRIVER,
                     "xseg: %s failed (%s) mapping %s for a request of %zu bytes; mapped %s",
                     xseg_op_name(failed), xdrv_error_name(xs, rc),
                     xseg_fmt_size((p1 - p0) << ar->shift, b1, sizeof b1), request,
                     xseg_fmt_size(xs->mapped.cur, b2, sizeof b2));
}

static xseg_status ensure_runs(xseg_t *xs, uintptr_t a, uintptr_t b, size_t request, int how)
{
    xarena *ar = &xs->arena;
    size_t p0 = (a - ar->base) >> ar->shift;
    size_t p1 = ((b - 1 - ar->base) >> ar->shift) + 1;
    size_t p = xbm_next(ar->mapped_bits, p0, p1, 0);
    while (p < p1) {
        size_t q = xbm_next(ar->mapped_bits, p, p1, 1);
        xseg_status st = map_run(xs, p, q, request, how);
        if (st != XSEG_OK)
            return st;
        p = xbm_next(ar->mapped_bits, q, p1, 0);
    }
    return XSEG_OK;
}

xseg_status xarena_ensure(xseg_t *xs, uintptr_t a, uintptr_t b, size_t request)
{
    return ensure_runs(xs, a, b, request, MAP_DEMAND);
}

xseg_status xarena_ensure_wake(xseg_t *xs, uintptr_t a, uintptr_t b)
{
    return ensure_runs(xs, a, b, b - a, MAP_WAKE);
}

xseg_status xarena_premap(xseg_t *xs, uintptr_t a, uintptr_t b, int whole)
{
    return ensure_runs(xs, a, b, b - a, whole ? MAP_PREMAP_WHOLE : MAP_PREMAP);
}

int xarena_premapped(const xseg_t *xs, size_t p)
{
    const xarena *ar = &xs->arena;
    return ar->page_handle[p] && (ar->handles[ar->page_handle[p]].flags & XH_PREMAP);
}

int xarena_all_mapped(const xseg_t *xs, uintptr_t a, uintptr_t b)
{
    const xarena *ar = &xs->arena;
    size_t p0 = (a - ar->base) >> ar->shift;
    size_t p1 = ((b - 1 - ar->base) >> ar->shift) + 1;
    return xbm_next(ar->mapped_bits, p0, p1, 0) == p1;
}

int xarena_all_unmapped(const xseg_t *xs, uintptr_t a, uintptr_t b)
{
    const xarena *ar = &xs->arena;
    size_t p0 = (a - ar->base) >> ar->shift;
    size_t p1 = ((b - 1 - ar->base) >> ar->shift) + 1;
    return xbm_next(ar->mapped_bits, p0, p1, 1) == p1;
}

size_t xarena_unmapped_bytes(const xseg_t *xs, uintptr_t a, uintptr_t b)
{
    const xarena *ar = &xs->arena;
    size_t p0 = (a - ar->base) >> ar->shift;
    size_t p1 = ((b - 1 - ar->base) >> ar->shift) + 1;
    return ((p1 - p0) - xbm_count(ar->mapped_bits, p0, p1)) << ar->shift;
}

/* Unmap the whole handles covering pages [p0, p1) in one call, release them. */
static void unmap_release_run(xseg_t *xs, size_t p0, size_t p1, int *err)
{
    xarena *ar = &xs->arena;
    if (p1 <= p0)
        return;
    uintptr_t va = ar->base + (p0 << ar->shift);
    int rc = xdrv_unmap(xs, va, (p1 - p0) << ar->shift);
    if (rc != XDRV_SUCCESS) {
        *err = rc;
        return; /* still mapped: state stays consistent, retried later */
    }
    xseg_hist(xs, XEV_UNMAP, va, (p1 - p0) << ar->shift, NULL);
    size_t p = p0;
    while (p < p1) {
        uint32_t slot = ar->page_handle[p];
        xhandle h = ar->handles[slot];
        size_t bytes = (size_t)h.npages << ar->shift;
        rc = xdrv_release(xs, h.drv);
        if (rc != XDRV_SUCCESS) {
            *err = rc;
            orphan_keep(xs, h.drv);
        } else {
            xcnt_sub(&xs->handles, 1);
        }
        memset(&ar->page_handle[p], 0, h.npages * sizeof(uint32_t));
        handle_slot_put(ar, slot);
        xmapped_sub(xs, bytes);
        xs->released += bytes;
        p += h.npages;
    }
    xbm_set(ar->mapped_bits, p0, p1, 0);
}

size_t xarena_release_inside(xseg_t *xs, uintptr_t a, uintptr_t b, size_t limit, int *err)
{
    xarena *ar = &xs->arena;
    size_t q0 = ((a - ar->base) + ar->page - 1) >> ar->shift;
    size_t q1 = (b - ar->base) >> ar->shift;
    size_t before = xs->mapped.cur, run0 = 0, run1 = 0;
    size_t p = q0 < q1 ? xbm_next(ar->mapped_bits, q0, q1, 1) : q1, taken = 0;
    while (p < q1 && taken < limit) {
        xhandle *h = handle_at(ar, p);
        size_t end = (size_t)h->first_page + h->npages;
        if (h->first_page >= q0 && end <= q1) {
            if (run1 != h->first_page) {
                unmap_release_run(xs, run0, run1, err);
                run0 = h->first_page;
            }
            run1 = end;
            taken += (size_t)h->npages << ar->shift;
        }
        p = end < q1 ? xbm_next(ar->mapped_bits, end, q1, 1) : q1;
    }
    unmap_release_run(xs, run0, run1, err);
    return before - xs->mapped.cur;
}

/* Release the handle backing page p if it is larger than a page, reaches
 * outside [a, b), and lies wholly inside [lo, hi). */
static void split_one(xseg_t *xs, size_t p, uintptr_t a, uintptr_t b, uintptr_t lo, uintptr_t hi,
                      int *err)
{
    xarena *ar = &xs->arena;
    if (!ar->page_handle[p])
        return;
    xhandle *h = handle_at(ar, p);
    uintptr_t hs = ar->base + ((uintptr_t)h->first_page << ar->shift);
    uintptr_t he = hs + ((uintptr_t)h->npages << ar->shift);
    uintptr_t ps = ar->base + (((a - ar->base) >> ar->shift) << ar->shift);
    uintptr_t pe = ar->base + ((((b - 1 - ar->base) >> ar->shift) + 1) << ar->shift);
    if (h->npages > 1 && (hs < ps || he > pe) && hs >= lo && he <= hi)
        unmap_release_run(xs, h->first_page, (size_t)h->first_page + h->npages, err);
}

void xarena_split_edges(xseg_t *xs, uintptr_t a, uintptr_t b, uintptr_t lo, uintptr_t hi, int *err)
{
    xarena *ar = &xs->arena;
    split_one(xs, (a - ar->base) >> ar->shift, a, b, lo, hi, err);
    split_one(xs, (b - 1 - ar->base) >> ar->shift, a, b, lo, hi, err);
}

/* ---- moving handles (alloc.c: move_pages) ---- */

/* Map handle `slot` at page t as well: map, then set access. */
static int map_again(xseg_t *xs, uint32_t slot, size_t t)
{
    xarena *ar = &xs->arena;
    xhandle *h = &ar->handles[slot];
    uintptr_t va = ar->base + (t << ar->shift);
    size_t bytes = (size_t)h->npages << ar->shift;
    int rc = xdrv_map(xs, va, bytes, h->drv);
    if (rc != XDRV_SUCCESS)
        return rc;
    rc = xdrv_set_access(xs, va, bytes);
    if (rc != XDRV_SUCCESS)
        xdrv_unmap(xs, va, bytes);
    return rc;
}

/* Page t, at or after *cur in [.., p1), starting n unmapped pages; SIZE_MAX
 * if none. */
static size_t room_for(const xarena *ar, size_t *cur, size_t p1, size_t n)
{
    while (*cur < p1) {
        size_t t = xbm_next(ar->mapped_bits, *cur, p1, 0);
        size_t e = t < p1 ? xbm_next(ar->mapped_bits, t, p1, 1) : p1;
        if (e - t >= n)
            return t;
        *cur = e;
    }
    return SIZE_MAX;
}

size_t xarena_move(xseg_t *xs, uintptr_t sa, uintptr_t sb, uintptr_t da, uintptr_t db, size_t max,
                   uintptr_t *lo, uintptr_t *hi)
{
    xarena *ar = &xs->arena;
    size_t q0 = ((sa - ar->base) + ar->page - 1) >> ar->shift, q1 = (sb - ar->base) >> ar->shift;
    size_t cur = (da - ar->base) >> ar->shift, p1 = ((db - 1 - ar->base) >> ar->shift) + 1;
    size_t q = q0 < q1 ? xbm_next(ar->mapped_bits, q0, q1, 1) : q1, moved = 0;
    while (q < q1) { /* skip handles that reach outside [q0, q1) */
        const xhandle *h = handle_at(ar, q);
        if (h->first_page >= q0 && (size_t)h->first_page + h->npages <= q1)
            break;
        size_t end = (size_t)h->first_page + h->npages;
        q = end < q1 ? xbm_next(ar->mapped_bits, end, q1, 1) : q1;
    }
    size_t start = q;
    while (q < q1 && ar->page_handle[q]) {
        uint32_t slot = ar->page_handle[q];
        xhandle *h = &ar->handles[slot];
        size_t n = h->npages;
        if (h->first_page != q || q + n > q1 || (n << ar->shift) > max - moved)
            break;
        size_t t = room_for(ar, &cur, p1, n);
        if (t == SIZE_MAX || map_again(xs, slot, t) != XDRV_SUCCESS)
            break;
        h->first_page = (uint32_t)t;
        for (size_t i = 0; i < n; i++) {
            ar->page_handle[t + i] = slot;
            ar->page_handle[q + i] = 0;
        }
        xbm_set(ar->mapped_bits, t, t + n, 1);
        xbm_set(ar->mapped_bits, q, q + n, 0);
        moved += n << ar->shift;
        q += n;
    }
    *lo = ar->base + (start << ar->shift);
    *hi = ar->base + (q << ar->shift);
    return moved;
}

int xarena_unmap_old(xseg_t *xs, uintptr_t lo, uintptr_t hi)
{
    return xdrv_unmap(xs, lo, hi - lo);
}

void xarena_fini(xseg_t *xs, int call_driver)
{
    xarena *ar = &xs->arena;
    if (call_driver && ar->base) {
        int err = 0;
        size_t p = xbm_next(ar->mapped_bits, 0, ar->npages, 1);
        while (p < ar->npages) {
            xhandle *h = handle_at(ar, p);
            size_t end = (size_t)h->first_page + h->npages;
            unmap_release_run(xs, h->first_page, end, &err);
            p = xbm_next(ar->mapped_bits, end, ar->npages, 1);
        }
        xarena_release_orphans(xs);
        xdrv_address_free(xs, ar->base, ar->size);
    }
    if (ar->base) {
        xcnt_sub(&xs->va, ar->size);
        xcnt_sub(&xs->segments, 1);
    }
    free(ar->page_handle);
    free(ar->mapped_bits);
    free(ar->handles);
    free(ar->handle_free);
    free(ar->orphans);
    memset(ar, 0, sizeof *ar);
}

/* ---- release jobs of the reclaim worker (alloc.c builds them) ---- */

static int job_add(xrelease *job, uintptr_t va, size_t bytes, uint64_t drv)
{
    if (job->n == job->cap) {
        uint32_t cap = job->cap ? job->cap * 2 : 8;
        xrel_handle *h = realloc(job->h, cap * sizeof *h);
        if (!h)
            return 0;
        job->h = h;
        job->cap = cap;
    }
    job->h[job->n++] = (xrel_handle){va, bytes, drv, XREL_TODO, 0};
    job->bytes += bytes;
    return 1;
}

size_t xarena_detach_inside(xseg_t *xs, uintptr_t a, uintptr_t b, size_t limit, xrelease *job,
                            uintptr_t *lo, uintptr_t *hi)
{
    xarena *ar = &xs->arena;
    size_t q0 = ((a - ar->base) + ar->page - 1) >> ar->shift;
    size_t q1 = (b - ar->base) >> ar->shift;
    size_t p = q0 < q1 ? xbm_next(ar->mapped_bits, q0, q1, 1) : q1, taken = 0;
    size_t first = q1, last = q1;
    while (p < q1 && taken < limit) {
        uint32_t slot = ar->page_handle[p];
        xhandle h = ar->handles[slot];
        size_t end = (size_t)h.first_page + h.npages;
        if (h.first_page >= q0 && end <= q1) {
            size_t bytes = (size_t)h.npages << ar->shift;
            if (!job_add(job, ar->base + ((uintptr_t)h.first_page << ar->shift), bytes, h.drv))
                break; /* no host memory: the rest stays mapped */
            memset(&ar->page_handle[h.first_page], 0, h.npages * sizeof(uint32_t));
            xbm_set(ar->mapped_bits, h.first_page, end, 0);
            handle_slot_put(ar, slot);
            xs->releasing_bytes += bytes;
            xs->releasing_handles++;
            if (first == q1)
                first = h.first_page;
            last = end;
            taken += bytes;
        }
        p = end < q1 ? xbm_next(ar->mapped_bits, end, q1, 1) : q1;
    }
    *lo = ar->base + ((uintptr_t)first << ar->shift);
    *hi = ar->base + ((uintptr_t)last << ar->shift);
    return taken;
}

/* Put a handle whose unmap failed back into the tables (still mapped). */
static void attach_again(xseg_t *xs, const xrel_handle *r)
{
    xarena *ar = &xs->arena;
    size_t p = (r->va - ar->base) >> ar->shift, n = r->bytes >> ar->shift;
    uint32_t slot = handle_slot(ar);
    if (!slot) { /* no host memory for the table: keep it for release at least */
        orphan_keep(xs, r->drv);
        xmapped_sub(xs, r->bytes);
        return;
    }
    ar->handles[slot] = (xhandle){r->drv, (uint32_t)p, (uint32_t)n, 0};
    for (size_t i = p; i < p + n; i++)
        ar->page_handle[i] = slot;
    xbm_set(ar->mapped_bits, p, p + n, 1);
}

void xarena_settle(xseg_t *xs, const xrel_handle *r)
{
    xs->releasing_bytes -= r->bytes;
    xs->releasing_handles--;
    if (r->state == XREL_UNMAP_FAILED) {
        attach_again(xs, r);
        return;
    }
    xseg_hist(xs, XEV_UNMAP, r->va, r->bytes, NULL);
    if (r->state == XREL_RELEASED)
        xcnt_sub(&xs->handles, 1);
    else
        orphan_keep(xs, r->drv); /* counted in handles until released */
    xmapped_sub(xs, r->bytes);
    xs->released += r->bytes;
}
