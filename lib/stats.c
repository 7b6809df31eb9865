/* stats.c: fills the versioned xseg_stats struct and renders it as JSON. */
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "textbuf.h"

static xseg_counter pub(const xcnt *c)
{
    return (xseg_counter){c->cur, c->peak, c->total};
}

/* A thread cache's hit may re-serve a block for a larger request before the
 * allocator's own counter sees it: the exact value read now raises the
 * peak, so a peak is never below its current. */
static void raise_peak(xcnt *c, xseg_counter *shown)
{
    if (shown->current > shown->peak) {
        shown->peak = shown->current;
        c->peak = shown->current;
    }
}

static uint64_t largest_free(const xseg_t *xs)
{
    size_t m = xfi_largest(&xs->neutral);
    for (const xstream *s = xs->all_streams; s; s = s->next_all) {
        size_t l = xfi_largest(&s->idx);
        if (l > m)
            m = l;
    }
    return m;
}

void xseg_fill_stats(xseg_t *xs, xseg_stats *st)
{
    xseg_stats s;
    memset(&s, 0, sizeof s);
    s.size = sizeof s;
    s.version = XSEG_STATS_VERSION;
    s.device = xs->device;
    s.allocated_bytes = pub(&xs->allocated);
    s.requested_bytes = pub(&xs->requested);
    s.active_blocks = pub(&xs->active);
    s.reserved_va_bytes = pub(&xs->va);
    s.mapped_bytes = pub(&xs->mapped);
    s.alloc_calls = xs->alloc_calls;
    s.free_calls = xs->free_calls;
    xtc_adjust_stats(xs, &s); /* the live thread caches' parts (tcache.c) */
    raise_peak(&xs->allocated, &s.allocated_bytes);
    raise_peak(&xs->requested, &s.requested_bytes);
    raise_peak(&xs->active, &s.active_blocks);
    uint64_t alloc = s.allocated_bytes.current;
    uint64_t cached = xs->mapped.cur > alloc ? xs->mapped.cur - alloc : 0;
    if (cached > xs->cached_peak)
        xs->cached_peak = cached;
    s.cached_bytes = (xseg_counter){cached, xs->cached_peak, xs->released + cached};
    s.segments = pub(&xs->segments);
    s.handles = pub(&xs->handles);
    memcpy(s.driver_calls, xs->drv_calls, sizeof s.driver_calls);
    s.driver_errors = xs->drv_errors;
    s.alloc_retries = xs->retries;
    s.ooms = xs->ooms;
    s.syncs = xs->syncs;
    s.gc_runs = xs->gc_runs;
    s.trims = xs->trims;
    s.released_bytes = xs->released;
    s.deferred_frees = xs->deferred;
    s.largest_free_block = largest_free(xs);
    s.mapped_cap = xs->cap == SIZE_MAX ? 0 : xs->cap;
    s.device_total = xs->dev_total;
    s.page_size = xs->arena.page;
    s.moved_bytes = xs->moved_bytes;
    s.unmapping_bytes = xs->unmapping_bytes;
    size_t n = st->size < sizeof s ? st->size : sizeof s;
    memcpy(st, &s, n);
    st->size = (uint32_t)n;
}

static void jcounter(xtb *j, const char *name, const xseg_counter *c)
{
    xtb_put(j, "\"%s\":{\"current\":%llu,\"peak\":%llu,\"total\":%llu},", name,
         (unsigned long long)c->current, (unsigned long long)c->peak,
         (unsigned long long)c->total);
}

static void jnum(xtb *j, const char *name, uint64_t v, int last)
{
    xtb_put(j, "\"%s\":%llu%s", name, (unsigned long long)v, last ? "" : ",");
}

size_t xseg_render_json(const xseg_stats *s, const char *backend, char *buf, size_t cap)
{
    xtb j = {buf, cap, 0};
    xtb_put(&j, "{\"version\":%u,\"device\":%d,\"backend\":\"%s\",", s->version, s->device, backend);
    jcounter(&j, "allocated_bytes", &s->allocated_bytes);
    jcounter(&j, "requested_bytes", &s->requested_bytes);
    jcounter(&j, "active_blocks", &s->active_blocks);
    jcounter(&j, "reserved_va_bytes", &s->reserved_va_bytes);
    jcounter(&j, "mapped_bytes", &s->mapped_bytes);
    jcounter(&j, "cached_bytes", &s->cached_bytes);
    jcounter(&j, "segments", &s->segments);
    jcounter(&j, "handles", &s->handles);
    xtb_put(&j, "\"driver_calls\":{");
    for (int i = 0; i < XSEG_OP_COUNT; i++)
        jnum(&j, xseg_op_name((xseg_op)i), s->driver_calls[i], i == XSEG_OP_COUNT - 1);
    xtb_put(&j, "},");
    jnum(&j, "driver_errors", s->driver_errors, 0);
    jnum(&j, "alloc_calls", s->alloc_calls, 0);
    jnum(&j, "free_calls", s->free_calls, 0);
    jnum(&j, "alloc_retries", s->alloc_retries, 0);
    jnum(&j, "ooms", s->ooms, 0);
    jnum(&j, "syncs", s->syncs, 0);
    jnum(&j, "gc_runs", s->gc_runs, 0);
    jnum(&j, "trims", s->trims, 0);
    jnum(&j, "released_bytes", s->released_bytes, 0);
    jnum(&j, "deferred_frees", s->deferred_frees, 0);
    jnum(&j, "largest_free_block", s->largest_free_block, 0);
    jnum(&j, "mapped_cap", s->mapped_cap, 0);
    jnum(&j, "device_total", s->device_total, 0);
    jnum(&j, "page_size", s->page_size, 0);
    jnum(&j, "moved_bytes", s->moved_bytes, 0);
    jnum(&j, "unmapping_bytes", s->unmapping_bytes, 1);
    xtb_put(&j, "}");
    return j.len;
}
