/* bench_replay.c: trace replay (tools/trace reader, `xseg-trace v1`): every
 * allocation and free of a recorded workload, in order, through one
 * contender.  Pass 1 is timed and reads nothing else; after it everything
 * is freed and released, and pass 2 replays again reading cuMemGetInfo
 * after every allocation: the largest drop from the free memory measured
 * at start (before any allocation) is the peak device memory the
 * contender took.  A contender too slow for two passes (o->sample_in_timed)
 * does one sampled, timed pass; o->budget_s stops a pass early (reported
 * as partial, with the time extrapolated to the whole trace).
 * The allocator's own peak (own_peak: xseg's mapped_bytes.peak, PyTorch's
 * reserved peak, the pool's reserved high watermark) is read right after
 * the timed pass, before anything is freed: each process starts fresh, so
 * that is the timed pass's peak.  The sampled pass is no substitute for
 * it: until xseg_trim restarted release_threshold:auto's budget, xseg's
 * second pass started knowing the trace's peak and held less (since then
 * the two passes are the same workload; docs/benchmarks.md, "How the
 * memory is measured"); report.py takes the larger of the two. */
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "trace.h"

typedef struct pass_result {
    double secs;
    size_t done;          /* events replayed */
    uint64_t peak_live;   /* requested bytes, over the replayed events */
    double peak_drop;     /* bytes, when sampled */
    uint64_t ooms;
    char first_error[256];
} pass_result;

typedef struct replay_ctx {
    const bench_alloc *a;
    const xseg_trace *t;
    bench_stream *streams; /* per stream index; number 0: the legacy stream */
    void **ptr;            /* per slot */
    size_t base_free;      /* free device memory at start */
} replay_ctx;

static void note_drop(const replay_ctx *c, pass_result *r)
{
    double drop = (double)c->base_free - (double)bench_dev_free();

    if (drop > r->peak_drop)
        r->peak_drop = drop;
}

static void do_alloc(const replay_ctx *c, const xseg_trace_event *e, pass_result *r)
{
    void *p = c->a->alloc(e->bytes ? e->bytes : 1, c->streams[e->stream]);

    if (p == NULL && r->ooms++ == 0)
        strncpy(r->first_error, c->a->last_error(), sizeof r->first_error - 1);
    c->ptr[e->slot] = p;
}

static void do_free(const replay_ctx *c, const xseg_trace_event *e)
{
    if (c->ptr[e->slot] != NULL)
        c->a->free(c->ptr[e->slot], e->bytes, c->streams[e->stream]);
    c->ptr[e->slot] = NULL;
}

static void run_pass(const replay_ctx *c, int sample, double budget, pass_result *r)
{
    uint64_t live = 0;
    double t0 = bench_now();
    size_t i;

    memset(r, 0, sizeof *r);
    for (i = 0; i < c->t->nevents; i++) {
        const xseg_trace_event *e = &c->t->events[i];

        if (e->op == XSEG_TRACE_ALLOC) {
            do_alloc(c, e, r);
            live += e->bytes;
            r->peak_live = live > r->peak_live ? live : r->peak_live;
            if (sample)
                note_drop(c, r);
        } else {
            do_free(c, e);
            live -= e->bytes;
        }
        if (budget > 0 && (i & 1023) == 0 && bench_now() - t0 > budget)
            break;
    }
    bench_sync();
    r->secs = bench_now() - t0;
    r->done = i < c->t->nevents ? i + 1 : i;
}

/* Free what is live, give everything back; returns bytes still taken. */
static double clean_up(const replay_ctx *c)
{
    for (uint32_t s = 0; s < c->t->nslots; s++)
        if (c->ptr[s] != NULL) {
            c->a->free(c->ptr[s], 0, NULL);
            c->ptr[s] = NULL;
        }
    bench_sync();
    if (c->a->release() != 0)
        bench_log("%s: release failed: %s", c->a->name, c->a->last_error());
    bench_sync();
    return (double)c->base_free - (double)bench_dev_free();
}

static const char *short_name(const char *path)
{
    const char *s = strrchr(path, '/');

    return s != NULL ? s + 1 : path;
}

static void report(const replay_ctx *c, const pass_result *tp, const pass_result *sp,
                   double left, uint64_t own, const char *drv)
{
    int partial = tp->done < c->t->nevents;
    double full_s = tp->secs * (double)c->t->nevents / (double)(tp->done ? tp->done : 1);
    uint64_t live = partial ? tp->peak_live : c->t->peak_live_bytes;

    bench_emit(c->a, "replay", "\"trace\":\"%s\",\"events\":%zu,\"events_done\":%zu,"
               "\"partial\":%s,\"replay_s\":%.4f,\"replay_s_full\":%.4f,\"sampled_in_timed\":%s,"
               "\"sampled_pass_s\":%.4f,\"peak_live_bytes\":%llu,\"peak_device_bytes\":%.0f,"
               "\"ratio\":%.4f,\"own_peak_bytes\":%llu,\"own_peak_pass\":\"timed\",\"ooms\":%llu,"
               "\"left_after_release_mib\":%.1f,\"first_error\":\"%s\"%s",
               short_name(c->t->name), c->t->nevents, tp->done, partial ? "true" : "false",
               tp->secs, full_s, tp == sp ? "true" : "false", sp->secs,
               (unsigned long long)live, sp->peak_drop,
               live ? sp->peak_drop / (double)live : 0.0,
               (unsigned long long)own, (unsigned long long)(tp->ooms + sp->ooms),
               left / 1048576.0, tp->ooms ? "OOM (see log)" : sp->ooms ? "OOM (see log)" : "", drv);
    if (tp->ooms || sp->ooms)
        bench_log("%s: %s: first failure: %s", c->a->name, short_name(c->t->name),
                  tp->ooms ? tp->first_error : sp->first_error);
}

static int make_streams(replay_ctx *c)
{
    c->streams = calloc(c->t->nstreams ? c->t->nstreams : 1, sizeof *c->streams);
    c->ptr = calloc(c->t->nslots ? c->t->nslots : 1, sizeof *c->ptr);
    if (c->streams == NULL || c->ptr == NULL)
        return -1;
    for (size_t i = 0; i < c->t->nstreams; i++)
        if (c->t->streams[i] != 0 && (c->streams[i] = bench_stream_new()) == NULL)
            return -1;
    return 0;
}

static void drop_streams(replay_ctx *c)
{
    for (size_t i = 0; c->streams != NULL && i < c->t->nstreams; i++)
        bench_stream_free(c->a, c->streams[i]);
    free(c->streams);
    free(c->ptr);
}

static int replay_trace(replay_ctx *c, const bench_opts *o)
{
    pass_result tp, sp;
    uint64_t since[BENCH_MAX_OPS] = {0};
    char drv[1024] = "";
    double left;
    uint64_t own;

    if (make_streams(c) != 0) {
        bench_log("replay: no memory or streams");
        drop_streams(c);
        return -1;
    }
    c->base_free = bench_dev_free();
    bench_drv_delta(c->a, since, drv, sizeof drv);
    run_pass(c, o->sample_in_timed, o->budget_s, &tp);
    bench_drv_delta(c->a, since, drv, sizeof drv); /* the timed pass's driver calls */
    own = c->a->own_peak(); /* the timed pass's peak: nothing ran before it */
    left = clean_up(c);
    if (!o->sample_in_timed) {
        run_pass(c, 1, o->budget_s, &sp);
        left = clean_up(c);
    }
    report(c, &tp, o->sample_in_timed ? &tp : &sp, left, own, drv);
    drop_streams(c);
    return 0;
}

int bench_replay(const bench_alloc *a, const bench_opts *o)
{
    xseg_trace *t = NULL;
    xseg_trace_error err;
    double t0 = bench_now();
    replay_ctx c;
    int rc;

    if (o->trace == NULL) {
        bench_log("replay needs --trace FILE");
        return -1;
    }
    if (xseg_trace_load(o->trace, &t, &err) != XSEG_TRACE_OK) {
        bench_log("loading %s: %s", o->trace, err.message);
        return -1;
    }
    bench_log("%s: %zu events loaded in %.2f s", short_name(o->trace), t->nevents,
              bench_now() - t0);
    memset(&c, 0, sizeof c);
    c.a = a;
    c.t = t;
    rc = replay_trace(&c, o);
    xseg_trace_free(t);
    return rc;
}
