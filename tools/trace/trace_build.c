/* trace_build.c: builds an xseg_trace from parsed lines: remaps ids to dense
 * slots (a stack of released slots, reused last-in first-out), remaps stream
 * numbers to indices, checks that every free matches a live allocation and
 * every allocation an id not live, and tracks the live bytes and their peak. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "trace_internal.h"

static int grow(void *pp, size_t *cap, size_t need, size_t elem)
{
    void **p = pp;
    size_t n = *cap ? *cap : 16; /* then doubling: small inputs stay small */
    void *q;
    if (need <= *cap)
        return 0;
    while (n < need)
        n *= 2;
    q = realloc(*p, n * elem);
    if (!q)
        return -1;
    *p = q;
    *cap = n;
    return 0;
}

int trace_builder_init(trace_builder *b, const char *name)
{
    memset(b, 0, sizeof *b);
    b->t = calloc(1, sizeof *b->t);
    if (!b->t)
        return TRACE_BUILD_NOMEM;
    b->t->name = strdup(name ? name : "(trace)");
    b->last_stream = TRACE_ID_EMPTY;
    if (!b->t->name || xseg_ptrmap_init_ints(&b->ids, 0) != 0 ||
        xseg_ptrmap_init_ints(&b->streams, 0) != 0) {
        trace_builder_discard(b);
        return TRACE_BUILD_NOMEM;
    }
    return TRACE_BUILD_OK;
}

static int push_event(trace_builder *b, xseg_trace_event ev, uint64_t id)
{
    xseg_trace *t = b->t;
    size_t cap = b->cap_events;
    if (t->nevents == cap) {
        if (grow(&t->events, &b->cap_events, cap + 1, sizeof *t->events) != 0 ||
            grow(&t->ids, &cap, cap + 1, sizeof *t->ids) != 0)
            return TRACE_BUILD_NOMEM;
    }
    t->events[t->nevents] = ev;
    t->ids[t->nevents++] = id;
    return TRACE_BUILD_OK;
}

static int stream_index(trace_builder *b, uint64_t stream, uint16_t *idx,
                        char *msg, size_t len)
{
    xseg_trace *t = b->t;
    uintptr_t v;
    if (stream == b->last_stream)
        return *idx = b->last_stream_index, TRACE_BUILD_OK;
    if (!xseg_ptrmap_get(&b->streams, stream, &v)) {
        if (t->nstreams >= XSEG_TRACE_MAX_STREAMS)
            return snprintf(msg, len, "more than %d distinct streams",
                            XSEG_TRACE_MAX_STREAMS), TRACE_BUILD_BAD;
        if (grow(&t->streams, &b->cap_streams, t->nstreams + 1, sizeof *t->streams) != 0 ||
            xseg_ptrmap_put(&b->streams, stream, t->nstreams) != 0)
            return TRACE_BUILD_NOMEM;
        v = t->nstreams;
        t->streams[t->nstreams++] = stream;
    }
    b->last_stream = stream;
    b->last_stream_index = (uint16_t)v;
    *idx = (uint16_t)v;
    return TRACE_BUILD_OK;
}

static int take_slot(trace_builder *b, uint32_t *slot)
{
    xseg_trace *t = b->t;
    size_t cap;
    if (b->nfree_slots > 0)
        return *slot = b->free_slots[--b->nfree_slots], TRACE_BUILD_OK;
    cap = b->cap_slots;
    if (grow(&b->slot_bytes, &b->cap_slots, t->nslots + 1, sizeof *b->slot_bytes) != 0 ||
        grow(&b->slot_stream, &cap, t->nslots + 1, sizeof *b->slot_stream) != 0)
        return TRACE_BUILD_NOMEM;
    *slot = t->nslots++;
    return TRACE_BUILD_OK;
}

static int add_live(trace_builder *b, uint64_t bytes, char *msg, size_t len)
{
    if (__builtin_add_overflow(b->live_bytes, bytes, &b->live_bytes))
        return snprintf(msg, len, "live bytes overflow 64 bits"), TRACE_BUILD_BAD;
    if (b->live_bytes > b->t->peak_live_bytes)
        b->t->peak_live_bytes = b->live_bytes;
    b->t->total_alloc_bytes += bytes;
    return TRACE_BUILD_OK;
}

static int add_alloc(trace_builder *b, const trace_line *l, uint32_t lineno,
                     char *msg, size_t len)
{
    int rc;
    uint16_t sidx;
    uint32_t slot;
    uintptr_t v;
    if (xseg_ptrmap_get(&b->ids, l->id, &v))
        return snprintf(msg, len, "alloc of id %llu that is already live (allocated at line %u)",
                        (unsigned long long)l->id, (unsigned)(v >> 32)), TRACE_BUILD_BAD;
    if ((rc = stream_index(b, l->stream, &sidx, msg, len)) != 0 ||
        (rc = add_live(b, l->bytes, msg, len)) != 0 || (rc = take_slot(b, &slot)) != 0)
        return rc;
    if (xseg_ptrmap_put(&b->ids, l->id, (uintptr_t)lineno << 32 | slot) != 0)
        return TRACE_BUILD_NOMEM;
    b->slot_bytes[slot] = l->bytes;
    b->slot_stream[slot] = sidx;
    b->t->nallocs++;
    return push_event(b, (xseg_trace_event){ l->bytes, slot, sidx, XSEG_TRACE_ALLOC, 0 },
                      l->id);
}

static int release_slot(trace_builder *b, uint32_t slot)
{
    if (grow(&b->free_slots, &b->cap_free_slots, b->nfree_slots + 1,
             sizeof *b->free_slots) != 0)
        return TRACE_BUILD_NOMEM;
    b->free_slots[b->nfree_slots++] = slot;
    return TRACE_BUILD_OK;
}

/* A free of an id that is not live: never allocated, or freed before. */
static int bad_free(trace_builder *b, uint64_t id, char *msg, size_t len)
{
    const xseg_trace *t = b->t;
    size_t i = t->nevents;
    while (i > 0 && t->ids[i - 1] != id)
        i--;
    if (i == 0)
        return snprintf(msg, len, "free of unknown id %llu (never allocated)",
                        (unsigned long long)id), TRACE_BUILD_BAD;
    return snprintf(msg, len, "free of id %llu that is not live (already freed at line %llu)",
                    (unsigned long long)id,
                    (unsigned long long)xseg_trace_line_of(t, i - 1)), TRACE_BUILD_BAD;
}

static int add_free(trace_builder *b, const trace_line *l, char *msg, size_t len)
{
    uintptr_t v;
    uint32_t slot;
    if (!xseg_ptrmap_get(&b->ids, l->id, &v))
        return bad_free(b, l->id, msg, len);
    slot = (uint32_t)v;
    if (release_slot(b, slot) != 0)
        return TRACE_BUILD_NOMEM;
    xseg_ptrmap_del(&b->ids, l->id, NULL);
    b->live_bytes -= b->slot_bytes[slot];
    b->t->nfrees++;
    return push_event(b, (xseg_trace_event){ b->slot_bytes[slot], slot,
                                             b->slot_stream[slot], XSEG_TRACE_FREE, 0 },
                      l->id);
}

int trace_builder_add(trace_builder *b, const trace_line *l, uint32_t lineno,
                      char *msg, size_t len)
{
    if (l->op == XSEG_TRACE_ALLOC)
        return add_alloc(b, l, lineno, msg, len);
    return add_free(b, l, msg, len);
}

int trace_builder_skip(trace_builder *b, uint32_t lineno)
{
    xseg_trace *t = b->t;
    if (grow(&t->skipped_lines, &b->cap_skipped, t->nskipped + 1,
             sizeof *t->skipped_lines) != 0)
        return TRACE_BUILD_NOMEM;
    t->skipped_lines[t->nskipped++] = lineno;
    return TRACE_BUILD_OK;
}

static void release_work(trace_builder *b)
{
    xseg_ptrmap_fini(&b->ids);
    xseg_ptrmap_fini(&b->streams);
    free(b->free_slots);
    free(b->slot_bytes);
    free(b->slot_stream);
    b->free_slots = NULL;
    b->slot_bytes = NULL;
    b->slot_stream = NULL;
}

xseg_trace *trace_builder_finish(trace_builder *b, uint64_t nlines)
{
    xseg_trace *t = b->t;
    release_work(b);
    t->nlines = nlines;
    t->live_at_end = t->nallocs - t->nfrees;
    t->live_bytes_at_end = b->live_bytes;
    b->t = NULL;
    return t;
}

void trace_builder_discard(trace_builder *b)
{
    release_work(b);
    xseg_trace_free(b->t);
    b->t = NULL;
}
