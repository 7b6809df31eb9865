/* stats.c: fills the versioned xseg_stats struct and renders it as JSON,
 * both driven by the field list of stats_fields.h. */
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "stats_fields.h"
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

/* The largest free block of any free index (neutral and every stream's):
 * a walk over the streams, so callers on frequent paths ration it. */
uint64_t xseg_largest_free(const xseg_t *xs)
{
    size_t m = xfi_largest(&xs->neutral);
    for (const xstream *s = xs->all_streams; s; s = s->next_all) {
        size_t l = xfi_largest(&s->idx);
        if (l > m)
            m = l;
    }
    return m;
}

/* The fields that are a plain copy of an allocator member (how = xs in
 * stats_fields.h): an xcnt for a COUNTER, a uint64_t otherwise. */
#define FILL_xs(kind, f, src) FILL_##kind(f, src)
#define FILL_calc(kind, f, src)
#define FILL_share(kind, f, src) /* api.c, from xshare_stats (share.c) */
#define FILL_COUNTER(f, src) s->f = pub(&xs->src);
#define FILL_GAUGE(f, src) s->f = xs->src;
#define FILL_MONO(f, src) s->f = xs->src;
#define FILL(kind, f, json, how, src, shm, proms) FILL_##how(kind, f, src)

static void fill_copies(const xseg_t *xs, xseg_stats *s)
{
    XSEG_STATS_FIELDS(FILL, XSEG_SF_NOTHING)
}

void xseg_fill_stats(xseg_t *xs, xseg_stats *st)
{
    xseg_stats s;
    memset(&s, 0, sizeof s);
    s.size = sizeof s;
    s.version = XSEG_STATS_VERSION;
    s.device = xs->device;
    fill_copies(xs, &s);
    xtc_adjust_stats(xs, &s); /* the live thread caches' parts (tcache.c) */
    raise_peak(&xs->allocated, &s.allocated_bytes);
    raise_peak(&xs->requested, &s.requested_bytes);
    raise_peak(&xs->active, &s.active_blocks);
    uint64_t alloc = s.allocated_bytes.current;
    uint64_t cached = xs->mapped.cur > alloc ? xs->mapped.cur - alloc : 0;
    if (cached > xs->cached_peak)
        xs->cached_peak = cached;
    s.cached_bytes = (xseg_counter){cached, xs->cached_peak, xs->released + cached};
    memcpy(s.driver_calls, xs->drv_calls, sizeof s.driver_calls);
    s.largest_free_block = xseg_largest_free(xs);
    s.mapped_cap = xs->cap == SIZE_MAX ? 0 : xs->cap;
    s.page_size = xs->arena.page;
    s.driver_calls_worker = xs->drvb.calls_side[XDRV_SIDE_WORKER];
    s.driver_ns_caller = xdrv_ns(xs, XDRV_SIDE_CALLER, XSEG_OP_COUNT);
    s.driver_ns_worker = xdrv_ns(xs, XDRV_SIDE_WORKER, XSEG_OP_COUNT);
    s.worker_bytes = xs->releasing_bytes + xs->wk_unmapping;
    s.release_budget = xseg_budget(xs);
    s.slack_granted = xs->gov.extra;
    size_t n = st->size < sizeof s ? st->size : sizeof s;
    memcpy(st, &s, n);
    st->size = (uint32_t)n;
}

enum { SF_U32, SF_I32, SF_COUNTER, SF_OPS, SF_GAUGE, SF_MONO };

/* One field of the JSON body, after a comma. */
static void jfield(xtb *j, int kind, const char *name, const void *p)
{
    const uint64_t *v = p;
    if (kind == SF_COUNTER) {
        const xseg_counter *c = p;
        xtb_put(j, ",\"%s\":{\"current\":%llu,\"peak\":%llu,\"total\":%llu}", name,
                (unsigned long long)c->current, (unsigned long long)c->peak,
                (unsigned long long)c->total);
    } else if (kind == SF_OPS) {
        xtb_put(j, ",\"%s\":{", name);
        for (int i = 0; i < XSEG_OP_COUNT; i++)
            xtb_put(j, "%s\"%s\":%llu", i ? "," : "", xseg_op_name((xseg_op)i),
                    (unsigned long long)v[i]);
        xtb_put(j, "}");
    } else {
        xtb_put(j, ",\"%s\":%llu", name, (unsigned long long)*v);
    }
}

/* The body's fields in order: every field with a JSON key, but the header's
 * (version, device), which come first with "backend". */
#define JSON_ROW(kind, f, json, how, src, shm, proms) \
    {SF_##kind, json, offsetof(xseg_stats, f)},
static const struct jrow {
    int kind;
    const char *name;
    size_t off;
} json_rows[] = {XSEG_STATS_FIELDS(JSON_ROW, XSEG_SF_NOTHING)};

size_t xseg_render_json(const xseg_stats *s, const char *backend, char *buf, size_t cap)
{
    xtb j = {buf, cap, 0};
    xtb_put(&j, "{\"version\":%u,\"device\":%d,\"backend\":\"%s\"", s->version, s->device,
            backend);
    for (size_t i = 0; i < sizeof json_rows / sizeof json_rows[0]; i++)
        if (json_rows[i].name && json_rows[i].kind != SF_U32 && json_rows[i].kind != SF_I32)
            jfield(&j, json_rows[i].kind, json_rows[i].name, (const char *)s + json_rows[i].off);
    xtb_put(&j, "}");
    return j.len;
}

/* ---- a family's stats (an allocator and its tags', tags.c) ---- */

#define ADD_U32(f)
#define ADD_I32(f)
#define ADD_COUNTER(f)                          \
    into->f.current += from->f.current;         \
    into->f.peak += from->f.peak;               \
    into->f.total += from->f.total;
#define ADD_OPS(f)                              \
    for (int i = 0; i < XSEG_OP_COUNT; i++)     \
        into->f[i] += from->f[i];
#define ADD_GAUGE(f) into->f += from->f;
#define ADD_MONO(f) into->f += from->f;
#define ADD(kind, f, json, how, src, shm, proms) ADD_##kind(f)

void xseg_stats_add(xseg_stats *into, const xseg_stats *from)
{
    uint64_t largest = into->largest_free_block, cap = into->mapped_cap;
    uint64_t total = into->device_total, page = into->page_size;
    XSEG_STATS_FIELDS(ADD, XSEG_SF_NOTHING)
    into->largest_free_block = largest > from->largest_free_block ? largest
                                                                  : from->largest_free_block;
    into->mapped_cap = cap;
    into->device_total = total;
    into->page_size = page;
}
