/* replay.c: the replay engine: drives an allocator with a loaded trace,
 * keeping live pointers in a slot-indexed array (no hashing per event),
 * times the trace events, and fills an xseg_replay_result from the trace and
 * the allocator's stats. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "replay.h"
#include "replay_verify.h"

typedef struct replay {
    xseg_t *xs;
    const xseg_trace *t;
    const xseg_replay_opts *o;
    xseg_replay_result *r;
    void **ptrs;     /* live pointer of each slot (NULL: none / OOM) */
    void **streams;  /* stream pointer of each stream index */
    uint64_t live;   /* requested bytes live (for after_alloc) */
    uint64_t half_calls[XSEG_OP_COUNT]; /* driver calls before the second half */
    uint64_t half_caller_ns;            /* the caller's driver time then */
} replay;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Record the first error; later ones are dropped. */
static void record_error(replay *R, size_t i, xseg_status st, const char *what)
{
    xseg_replay_result *r = R->r;
    const xseg_trace_event *e = i < R->t->nevents ? &R->t->events[i] : NULL;
    if (r->status != XSEG_OK)
        return;
    r->status = st;
    r->error_event = i;
    r->error_line = xseg_trace_line_of(R->t, i);
    if (!e) {
        r->error_line = 0;
        snprintf(r->error_message, sizeof r->error_message, "%s", what);
        return;
    }
    snprintf(r->error_message, sizeof r->error_message,
             "event %zu (line %llu: %s id %llu, %llu bytes, stream %llu): %s", i,
             (unsigned long long)r->error_line, e->op == XSEG_TRACE_ALLOC ? "alloc" : "free",
             (unsigned long long)R->t->ids[i], (unsigned long long)e->bytes,
             (unsigned long long)xseg_trace_stream_of(R->t, e), what);
}

static void record_status(replay *R, size_t i, xseg_status st)
{
    char what[512];
    snprintf(what, sizeof what, "%s: %s", xseg_strerror(st), xseg_last_error());
    record_error(R, i, st, what);
}

static int check_block(replay *R, size_t i, void *p, uint64_t bytes, uint64_t id)
{
    replay_mismatch m;
    char what[384];
    if (replay_verify_check(p, bytes, id, &m) == 0)
        return R->r->verified_blocks++, 0;
    snprintf(what, sizeof what,
             "verify: block %p of id %llu corrupted at offset %llu (expected 0x%02x, "
             "found 0x%02x): overlapping blocks", p, (unsigned long long)id,
             (unsigned long long)m.offset, m.expected, m.found);
    record_error(R, i, XSEG_ERR_INTERNAL, what);
    R->r->corrupted = 1;
    return -1;
}

static int do_alloc(replay *R, size_t i, const xseg_trace_event *e)
{
    void **slot = &R->ptrs[e->slot];
    xseg_status st = xseg_alloc(R->xs, (size_t)e->bytes, R->streams[e->stream], slot);
    if (st == XSEG_ERR_OOM) {
        R->r->ooms++;
        *slot = NULL;
        record_status(R, i, st);
        return 0;
    }
    if (st != XSEG_OK)
        return *slot = NULL, record_status(R, i, st), -1;
    if (R->o->verify)
        replay_verify_write(*slot, e->bytes, R->t->ids[i]);
    R->live += e->bytes;
    if (R->o->after_alloc)
        R->o->after_alloc(R->o->arg, R->xs, R->live);
    return 0;
}

static int do_free(replay *R, size_t i, const xseg_trace_event *e)
{
    void *p = R->ptrs[e->slot];
    xseg_status st;
    if (!p)
        return 0; /* its allocation failed with OOM */
    if (R->o->verify && check_block(R, i, p, e->bytes, R->t->ids[i]) != 0)
        return -1;
    R->ptrs[e->slot] = NULL;
    R->live -= e->bytes;
    st = xseg_free(R->xs, p);
    if (st != XSEG_OK)
        return record_status(R, i, st), -1;
    return 0;
}

void xseg_replay_driver_ns(xseg_t *xs, uint64_t ns[2][XSEG_OP_COUNT])
{
    for (int side = 0; side < 2; side++)
        for (int op = 0; op < XSEG_OP_COUNT; op++)
            if (xseg_driver_time(xs, (xseg_side)side, (xseg_op)op, &ns[side][op]) != XSEG_OK)
                ns[side][op] = 0;
}

/* The caller's driver time so far, all ops. */
static uint64_t caller_ns(xseg_t *xs)
{
    uint64_t ns[2][XSEG_OP_COUNT], sum = 0;
    xseg_replay_driver_ns(xs, ns);
    for (int op = 0; op < XSEG_OP_COUNT; op++)
        sum += ns[XSEG_SIDE_CALLER][op];
    return sum;
}

/* Where the second half of the trace starts: the driver's counters then. */
static void mark_half(replay *R)
{
    xseg_stats st = { .size = sizeof st };
    if (xseg_get_stats(R->xs, &st) == XSEG_OK)
        memcpy(R->half_calls, st.driver_calls, sizeof R->half_calls);
    R->half_caller_ns = caller_ns(R->xs);
}

static void run_events(replay *R)
{
    const xseg_trace *t = R->t;
    size_t i, half = t->nevents / 2;
    double t0 = now();
    R->r->half_event = half;
    for (i = 0; i < t->nevents; i++) {
        const xseg_trace_event *e = &t->events[i];
        if (i == half)
            mark_half(R);
        int rc = e->op == XSEG_TRACE_ALLOC ? do_alloc(R, i, e) : do_free(R, i, e);
        if (rc != 0)
            break;
    }
    R->r->seconds = now() - t0;
    R->r->events = i;
}

/* For each slot, the index of the last alloc event that took it. */
static size_t *last_allocs(const xseg_trace *t)
{
    size_t *at = calloc(t->nslots + 1, sizeof *at);
    for (size_t i = 0; at && i < t->nevents; i++)
        if (t->events[i].op == XSEG_TRACE_ALLOC)
            at[t->events[i].slot] = i;
    return at;
}

/* Free one block left live at the end (event a: its allocation). */
static int free_one(replay *R, uint32_t s, size_t a)
{
    void *p = R->ptrs[s];
    xseg_status st;
    char what[512];
    R->ptrs[s] = NULL;
    if (R->o->verify &&
        check_block(R, a, p, R->t->events[a].bytes, R->t->ids[a]) != 0)
        return -1;
    st = xseg_free(R->xs, p);
    if (st != XSEG_OK) {
        snprintf(what, sizeof what, "free at end: %s: %s", xseg_strerror(st),
                 xseg_last_error());
        return record_error(R, a, st, what), -1;
    }
    R->r->freed_at_end++;
    return 0;
}

static void free_rest(replay *R)
{
    size_t *at = last_allocs(R->t);
    if (!at)
        return record_error(R, R->t->nevents, XSEG_ERR_INTERNAL, "out of host memory");
    for (uint32_t s = 0; s < R->t->nslots; s++)
        if (R->ptrs[s] && free_one(R, s, at[s]) != 0)
            break;
    free(at);
}

static void fill_result(replay *R)
{
    xseg_replay_result *r = R->r;
    xseg_status st;
    r->stats.size = sizeof r->stats;
    st = xseg_get_stats(R->xs, &r->stats);
    if (st != XSEG_OK)
        record_status(R, R->t->nevents, st);
    r->peak_live_bytes = R->t->peak_live_bytes;
    r->peak_mapped_bytes = r->stats.mapped_bytes.peak;
    r->frag_ratio = r->peak_live_bytes
                        ? (double)r->peak_mapped_bytes / (double)r->peak_live_bytes : 0.0;
    memcpy(r->driver_calls, r->stats.driver_calls, sizeof r->driver_calls);
    r->maps = r->driver_calls[XSEG_OP_MAP];
    r->unmaps = r->driver_calls[XSEG_OP_UNMAP];
    r->map_unmap_per_1000 =
        r->events ? (double)(r->maps + r->unmaps) * 1000.0 / (double)r->events : 0.0;
    r->events_per_s = r->seconds > 0 ? (double)r->events / r->seconds : 0.0;
    if (r->events <= r->half_event)
        return; /* stopped before the second half */
    for (int op = 0; op < XSEG_OP_COUNT; op++)
        r->second_half_calls[op] = r->driver_calls[op] - R->half_calls[op];
    r->second_half_caller_ns = caller_ns(R->xs) - R->half_caller_ns;
}

/* On a GPU backend a stream number is used as a CUstream handle: only 0
 * (default), 1 (legacy) and 2 (per-thread) are valid without creating one. */
static int check_streams(replay *R, const char *backend)
{
    char what[200];
    if (backend && strcmp(backend, "host") == 0)
        return 0;
    for (size_t k = 0; k < R->t->nstreams; k++) {
        if (R->t->streams[k] <= 2)
            continue;
        snprintf(what, sizeof what, "the trace uses stream %llu, not a valid CUDA stream "
                 "handle on the %s backend (only 0, 1, 2 are): replay it on the host backend",
                 (unsigned long long)R->t->streams[k], backend ? backend : "unknown");
        return record_error(R, R->t->nevents, XSEG_ERR_INVALID_ARG, what), -1;
    }
    return 0;
}

static int check_verify(replay *R, const char *backend)
{
    char what[160];
    if (!R->o->verify || (backend && strcmp(backend, "host") == 0))
        return 0;
    snprintf(what, sizeof what, "verify needs CPU-accessible memory (the host backend); "
             "this allocator uses the %s backend", backend ? backend : "unknown");
    return record_error(R, R->t->nevents, XSEG_ERR_INVALID_ARG, what), -1;
}

static int prepare(replay *R)
{
    const char *backend = xseg_backend_name(R->xs);
    R->ptrs = calloc(R->t->nslots + 1, sizeof *R->ptrs);
    R->streams = calloc(R->t->nstreams + 1, sizeof *R->streams);
    if (!R->ptrs || !R->streams)
        return record_error(R, R->t->nevents, XSEG_ERR_INTERNAL, "out of host memory"), -1;
    for (size_t k = 0; k < R->t->nstreams; k++)
        R->streams[k] = (void *)(uintptr_t)R->t->streams[k];
    if (check_verify(R, backend) != 0 || check_streams(R, backend) != 0)
        return -1;
    return 0;
}

xseg_status xseg_replay_run(xseg_t *xs, const xseg_trace *t, const xseg_replay_opts *opts,
                            xseg_replay_result *r)
{
    static const xseg_replay_opts defaults = { 0, 0, NULL, NULL };
    replay R = { xs, t, opts ? opts : &defaults, r, NULL, NULL, 0, {0}, 0 };
    if (!r)
        return XSEG_ERR_INVALID_ARG;
    memset(r, 0, sizeof *r);
    if (!xs || !t) {
        snprintf(r->error_message, sizeof r->error_message, "NULL allocator or trace");
        return r->status = XSEG_ERR_INVALID_ARG;
    }
    if (prepare(&R) == 0) {
        run_events(&R);
        fill_result(&R);
        if (R.o->free_at_end && (r->status == XSEG_OK || r->status == XSEG_ERR_OOM))
            free_rest(&R);
    }
    free(R.ptrs);
    free(R.streams);
    return r->status;
}
