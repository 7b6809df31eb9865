/* fuzz_trace.c: libFuzzer target for the trace reader (xseg_trace_parse,
 * the parser behind xseg-replay and xseg-record) and, through it, the
 * allocator: any bytes as trace text.  A parsed trace must be
 * self-consistent (events, slots, streams, counts); a rejected one must name
 * a line in a NUL-terminated message.  Small valid traces are then replayed
 * through a host allocator with pattern verification: no overlap, no error
 * but OOM, and destroy returns the driver to its baseline. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "driver_host.h"
#include "replay.h"
#include "trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_trace(const xseg_trace *t)
{
    size_t allocs = 0, frees = 0;
    if (t->nevents != t->nallocs + t->nfrees)
        abort();
    for (size_t i = 0; i < t->nevents; i++) {
        const xseg_trace_event *e = &t->events[i];
        if (e->slot >= t->nslots || e->stream >= t->nstreams || e->op > XSEG_TRACE_FREE)
            abort();
        allocs += e->op == XSEG_TRACE_ALLOC;
        frees += e->op == XSEG_TRACE_FREE;
        if (xseg_trace_line_of(t, i) == 0 || xseg_trace_line_of(t, i) > t->nlines)
            abort();
    }
    if (allocs != t->nallocs || frees != t->nfrees || t->live_at_end != allocs - frees)
        abort();
}

static void replay_small(const xseg_trace *t)
{
    if (t->nevents > 256 || t->peak_live_bytes > ((uint64_t)256 << 20))
        return;
    xseg_host_counts base, end;
    xseg_host_counts_global(&base);
    xseg_t *xs = NULL;
    if (xseg_create(&xs, 0, "backend:host,host_capacity:512MB") != XSEG_OK)
        abort();
    xseg_replay_opts o = {.verify = 1, .free_at_end = 1};
    xseg_replay_result *r = calloc(1, sizeof *r);
    xseg_status st = xseg_replay_run(xs, t, &o, r);
    if (r->corrupted || (st != XSEG_OK && st != XSEG_ERR_OOM && st != XSEG_ERR_SIZE &&
                         st != XSEG_ERR_VA_EXHAUSTED))
        abort();
    free(r);
    xseg_destroy(xs);
    xseg_host_counts_global(&end);
    if (memcmp(&base, &end, sizeof base))
        abort(); /* destroy gave everything back */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    xseg_trace *t = NULL;
    xseg_trace_error err;
    memset(&err, 0x55, sizeof err);
    xseg_trace_status st = xseg_trace_parse((const char *)data, size, "fuzz", &t, &err);
    if (st == XSEG_TRACE_OK) {
        if (!t)
            abort();
        check_trace(t);
        replay_small(t);
        xseg_trace_free(t);
        return 0;
    }
    if (t || (st != XSEG_TRACE_ERR_FORMAT && st != XSEG_TRACE_ERR_NOMEM) ||
        !memchr(err.message, '\0', sizeof err.message) || !err.message[0])
        abort();
    if (st == XSEG_TRACE_ERR_FORMAT && err.line == 0)
        abort(); /* a format error names its line */
    return 0;
}
