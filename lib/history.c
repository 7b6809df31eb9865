/* history.c: the ring buffer of the last N allocator events (conf key
 * history) and its JSON rendering.  Recording an event is O(1): one clock
 * read and one fixed-size entry written over the oldest. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "internal.h"
#include "textbuf.h"

typedef struct xhent {
    uint64_t t_ns;      /* since the allocator was created (monotonic) */
    uint64_t addr;
    uint64_t size;
    uint64_t stream;
    uint64_t live;      /* allocated bytes after the event */
    uint64_t mapped;    /* mapped bytes after the event */
    uint32_t kind;
    uint32_t reserved;
} xhent;

typedef struct xhist {
    uint64_t cap;
    uint64_t count;     /* events ever recorded */
    uint64_t t0_mono;
    uint64_t t0_real;
    xhent e[];
} xhist;

static const char *const kind_name[] = {"alloc", "free", "map", "unmap", "trim", "oom"};

static uint64_t now_ns(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

xseg_status xseg_hist_init(xseg_t *xs)
{
    uint64_t n = xs->conf.history;
    xhist *h = calloc(1, sizeof *h + n * sizeof(xhent));
    if (!h)
        return xseg_fail(xs, XSEG_ERR_OOM, "xseg: no host memory for a history of %llu events",
                         (unsigned long long)n);
    h->cap = n;
    h->t0_mono = now_ns(CLOCK_MONOTONIC);
    h->t0_real = now_ns(CLOCK_REALTIME);
    xs->hist = h;
    return XSEG_OK;
}

void xseg_hist_fini(xseg_t *xs)
{
    free(xs->hist);
    xs->hist = NULL;
}

void xseg_hist_add(xseg_t *xs, xev_kind kind, uintptr_t addr, size_t size, void *stream)
{
    xhist *h = xs->hist;
    xhent *e = &h->e[h->count % h->cap];
    uint64_t mapped = xs->mapped.cur;
    /* The unmap hook runs before the mapped counter drops. */
    if (kind == XEV_UNMAP && mapped >= size)
        mapped -= size;
    *e = (xhent){now_ns(CLOCK_MONOTONIC) - h->t0_mono, addr, size, (uintptr_t)stream,
                 xs->allocated.cur, mapped, (uint32_t)kind, 0};
    h->count++;
}

/* ---- JSON ---- */

static void render_event(xtb *b, const xhent *e, uint64_t seq, int last)
{
    xtb_put(b, "{\"seq\":%llu,\"t_ns\":%llu,\"kind\":\"%s\",\"addr\":%llu,\"size\":%llu,"
            "\"stream\":%llu,\"live\":%llu,\"mapped\":%llu}%s\n",
         (unsigned long long)seq, (unsigned long long)e->t_ns,
         e->kind < sizeof kind_name / sizeof kind_name[0] ? kind_name[e->kind] : "unknown",
         (unsigned long long)e->addr, (unsigned long long)e->size,
         (unsigned long long)e->stream, (unsigned long long)e->live,
         (unsigned long long)e->mapped, last ? "" : ",");
}

void xseg_hist_render(const xseg_t *xs, const char *backend, xtb *b)
{
    const xhist *h = xs->hist;
    uint64_t n = h->count < h->cap ? h->count : h->cap, first = h->count - n;
    xtb_put(b, "{\"version\":1,\"device\":%d,\"backend\":\"%s\",\"capacity\":%llu,"
            "\"recorded\":%llu,\"dropped\":%llu,\"start_unix_ns\":%llu,\"page_size\":%zu,"
            "\"cap\":%llu,\"live\":%llu,\"mapped\":%llu,\"events\":[\n",
         xs->device, backend, (unsigned long long)h->cap, (unsigned long long)h->count,
         (unsigned long long)first, (unsigned long long)h->t0_real, xs->arena.page,
         (unsigned long long)(xs->cap == SIZE_MAX ? 0 : xs->cap),
         (unsigned long long)xs->allocated.cur, (unsigned long long)xs->mapped.cur);
    for (uint64_t i = first; i < h->count; i++)
        render_event(b, &h->e[i % h->cap], i, i + 1 == h->count);
    xtb_put(b, "]}");
}
