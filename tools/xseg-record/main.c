/* main.c: xseg-record: replays an allocation trace through an xseg
 * allocator with monitoring on and writes what the monitoring calls give:
 * a snapshot (at the peak of live bytes, at the end, or after event N), the
 * event history, the stats as JSON and as Prometheus text.  With --pace it
 * slows down so that xseg-top can watch it live (stats_shm).  The trace is
 * read by the project's trace reader (tools/trace, as xseg-replay does).
 * Exit status: 0 success; 1 the trace could not be read or replayed or an
 * output not written (the first error is the one printed); 2 usage error. */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "trace.h"
#include "xseg.h"

#define PACE_MAX_US 10000000UL  /* --pace: at most 10 s per 1000 events */
#define HISTORY_MAX 1000000UL   /* --history-size: the range of conf key history */

enum { SNAP_PEAK = -1, SNAP_END = -2 };
enum { RUN = 0, DONE = 1, USAGE = 2 };

typedef struct opts {
    const char *trace, *conf, *snapshot, *history, *stats, *prom;
    long long snapshot_at;      /* SNAP_PEAK, SNAP_END, else event index */
    unsigned long history_size;
    unsigned long pace_us;      /* sleep after every 1000 events */
    int free_at_end, quiet;
} opts;

typedef xseg_status (*dump_fn)(xseg_t *, char *, size_t, size_t *);

static void usage(FILE *out)
{
    fputs("usage: xseg-record TRACE [options]\n"
          "  Replays an xseg-trace v1 file (plain or .gz) with monitoring on.\n"
          "  --conf STR          allocator conf (default backend:host)\n"
          "  --snapshot FILE     write xseg_snapshot_json output\n"
          "  --snapshot-at WHEN  peak (default: after the event where live bytes\n"
          "                      peak), end, or an event index (0 to events-1)\n"
          "  --history FILE      write xseg_history_json output (adds history:N)\n"
          "  --history-size N    events the ring keeps, 1 to 1000000 (default 1000000)\n"
          "  --stats FILE        write xseg_stats_json output at the end\n"
          "  --prometheus FILE   write xseg_stats_prometheus output at the end\n"
          "  --pace US           sleep US microseconds (0 to 10000000) after\n"
          "                      every 1000 events\n"
          "  --free-at-end       free what is still live at the end\n"
          "  --quiet             no summary line\n"
          "  -h, --help          print this text and exit\n"
          "Exit status: 0 success; 1 the trace could not be read or replayed, or an\n"
          "output could not be written; 2 usage error.\n",
          out);
}

static int usage_error(const char *fmt, ...)
{
    va_list ap;
    fputs("xseg-record: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\nTry 'xseg-record --help' for more information.\n", stderr);
    return USAGE;
}

/* Digits only (no sign, space or suffix), no overflow, within [min, max]. */
static int parse_ulong(const char *s, unsigned long min, unsigned long max,
                       unsigned long *out)
{
    unsigned long v = 0;
    if (!*s)
        return -1;
    for (; *s; s++) {
        unsigned d = (unsigned)(unsigned char)*s - '0';
        if (d > 9 || v > (ULONG_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    if (v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

static int bad_value(const char *opt, const char *v, const char *expected)
{
    return usage_error("bad value '%s' for %s: expected %s", v, opt, expected);
}

static int set_snapshot_at(opts *o, const char *v)
{
    unsigned long n;
    if (!strcmp(v, "peak"))
        return o->snapshot_at = SNAP_PEAK, RUN;
    if (!strcmp(v, "end"))
        return o->snapshot_at = SNAP_END, RUN;
    if (parse_ulong(v, 0, (unsigned long)LLONG_MAX, &n) != 0)
        return bad_value("--snapshot-at", v, "peak, end or an event index (an integer >= 0)");
    o->snapshot_at = (long long)n;
    return RUN;
}

/* An option taking a value: RUN when `a` is one and was applied, -1 when it
 * is not one, USAGE on a bad value. */
static int value_option(opts *o, const char *a, const char *v)
{
    static const char *const names[] = { "--conf", "--snapshot", "--snapshot-at",
                                         "--history", "--history-size", "--stats",
                                         "--prometheus", "--pace" };
    const char **strs[] = { &o->conf, &o->snapshot, NULL, &o->history,
                            NULL, &o->stats, &o->prom, NULL };
    size_t k = 0;
    while (k < sizeof names / sizeof *names && strcmp(a, names[k]) != 0)
        k++;
    if (k == sizeof names / sizeof *names)
        return -1;
    if (!v)
        return usage_error("option '%s' needs a value", a);
    if (strs[k])
        return *strs[k] = v, RUN;
    if (!strcmp(a, "--snapshot-at"))
        return set_snapshot_at(o, v);
    if (!strcmp(a, "--history-size"))
        return parse_ulong(v, 1, HISTORY_MAX, &o->history_size) != 0
                   ? bad_value(a, v, "an integer from 1 to 1000000")
                   : RUN;
    return parse_ulong(v, 0, PACE_MAX_US, &o->pace_us) != 0
               ? bad_value(a, v, "microseconds, an integer from 0 to 10000000")
               : RUN;
}

static int flag_or_trace(opts *o, const char *a)
{
    if (!strcmp(a, "--free-at-end"))
        return o->free_at_end = 1, RUN;
    if (!strcmp(a, "--quiet"))
        return o->quiet = 1, RUN;
    if (!strcmp(a, "-h") || !strcmp(a, "--help"))
        return usage(stdout), DONE;
    if (a[0] == '-')
        return usage_error("unknown option '%s'", a);
    if (o->trace)
        return usage_error("more than one trace given ('%s' and '%s')", o->trace, a);
    o->trace = a;
    return RUN;
}

static int parse(int argc, char **argv, opts *o)
{
    *o = (opts){ .conf = "backend:host", .snapshot_at = SNAP_PEAK,
                 .history_size = HISTORY_MAX };
    for (int i = 1; i < argc; i++) {
        int rc = value_option(o, argv[i], i + 1 < argc ? argv[i + 1] : NULL);
        if (rc == RUN)
            i++;
        else if (rc < 0)
            rc = flag_or_trace(o, argv[i]);
        if (rc != RUN)
            return rc;
    }
    return o->trace ? RUN : usage_error("no trace given");
}

/* ---- outputs ---------------------------------------------------------- */

static int dump(xseg_t *xs, dump_fn fn, const char *path, const char *what)
{
    size_t len = 0;
    char *buf;
    FILE *f;
    xseg_status st = fn(xs, NULL, 0, &len);
    if (st != XSEG_OK && st != XSEG_ERR_BUFFER_TOO_SMALL)
        return fprintf(stderr, "xseg-record: the %s: %s\n", what, xseg_last_error()), 1;
    buf = malloc(len + 1);
    if (!buf)
        return fprintf(stderr, "xseg-record: the %s: out of memory (%zu bytes)\n", what,
                       len + 1), 1;
    if (fn(xs, buf, len + 1, &len) != XSEG_OK) {
        fprintf(stderr, "xseg-record: the %s: %s\n", what, xseg_last_error());
        return free(buf), 1;
    }
    f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "xseg-record: writing the %s to %s: %s\n", what, path, strerror(errno));
        return free(buf), 1;
    }
    int ok = fwrite(buf, 1, len, f) == len && fputc('\n', f) != EOF;
    int e = errno;
    if (fclose(f) != 0 && ok)
        ok = 0, e = errno;
    free(buf);
    if (!ok)
        fprintf(stderr, "xseg-record: writing the %s to %s: %s\n", what, path, strerror(e));
    return ok ? 0 : 1;
}

/* ---- replay ----------------------------------------------------------- */

typedef struct run {
    void **ptr;            /* by slot */
    uint64_t ooms;
    int failed;            /* 1: stop, the message is printed */
} run;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The event after which the trace's requested live bytes peak (first). */
static size_t peak_index(const xseg_trace *t)
{
    uint64_t live = 0, peak = 0;
    size_t at = 0;
    for (size_t i = 0; i < t->nevents; i++) {
        const xseg_trace_event *e = &t->events[i];
        live = e->op == XSEG_TRACE_ALLOC ? live + e->bytes : live - e->bytes;
        if (live > peak)
            peak = live, at = i;
    }
    return at;
}

/* Print the error of event i at once: nothing after it may replace it. */
static void step_failed(const xseg_trace *t, run *r, size_t i)
{
    fprintf(stderr, "xseg-record: %s:%llu: replay failed at event %zu: %s\n", t->name,
            (unsigned long long)xseg_trace_line_of(t, i), i, xseg_last_error());
    r->failed = 1;
}

static void step(xseg_t *xs, const xseg_trace *t, run *r, size_t i)
{
    const xseg_trace_event *e = &t->events[i];
    void **p = &r->ptr[e->slot];
    xseg_status st;
    if (e->op == XSEG_TRACE_FREE) {
        st = *p ? xseg_free(xs, *p) : XSEG_OK; /* NULL: its alloc hit OOM */
        *p = NULL;
        if (st != XSEG_OK)
            step_failed(t, r, i);
        return;
    }
    st = xseg_alloc(xs, (size_t)e->bytes, (void *)(uintptr_t)xseg_trace_stream_of(t, e), p);
    if (st == XSEG_ERR_OOM)
        r->ooms++;
    else if (st != XSEG_OK)
        step_failed(t, r, i);
}

static void pace(unsigned long us)
{
    struct timespec ts = { (time_t)(us / 1000000), (long)(us % 1000000) * 1000 };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static int replay(xseg_t *xs, const xseg_trace *t, const opts *o, run *r)
{
    size_t at = o->snapshot_at == SNAP_PEAK ? peak_index(t) : (size_t)o->snapshot_at;
    int snap = o->snapshot && o->snapshot_at != SNAP_END;
    for (size_t i = 0; i < t->nevents && !r->failed; i++) {
        step(xs, t, r, i);
        if (!r->failed && snap && i == at && dump(xs, xseg_snapshot_json, o->snapshot,
                                                  "snapshot") != 0)
            r->failed = 1;
        if (o->pace_us && i % 1000 == 999)
            pace(o->pace_us);
    }
    return r->failed;
}

static void summary(xseg_t *xs, const xseg_trace *t, const run *r, double secs)
{
    xseg_stats s = {.size = sizeof s};
    xseg_get_stats(xs, &s);
    double peak = (double)s.requested_bytes.peak;
    fprintf(stderr, "xseg-record: %zu events in %.3f s; peak live %.3f GiB (trace %.3f GiB), "
                    "peak mapped %.3f GiB, ratio %.3f; %llu OOMs; %llu maps, %llu unmaps\n",
            t->nevents, secs, peak / 1073741824.0,
            (double)t->peak_live_bytes / 1073741824.0,
            (double)s.mapped_bytes.peak / 1073741824.0,
            peak > 0 ? (double)s.mapped_bytes.peak / peak : 0.0, (unsigned long long)r->ooms,
            (unsigned long long)s.driver_calls[XSEG_OP_MAP],
            (unsigned long long)s.driver_calls[XSEG_OP_UNMAP]);
}

/* The dumps at the end; stops at the first that fails. */
static int finish(xseg_t *xs, const xseg_trace *t, const opts *o, run *r)
{
    if ((o->snapshot && o->snapshot_at == SNAP_END &&
         dump(xs, xseg_snapshot_json, o->snapshot, "snapshot") != 0) ||
        (o->history && dump(xs, xseg_history_json, o->history, "history") != 0) ||
        (o->stats && dump(xs, xseg_stats_json, o->stats, "stats") != 0) ||
        (o->prom && dump(xs, xseg_stats_prometheus, o->prom, "Prometheus text") != 0))
        return 1;
    for (uint32_t i = 0; o->free_at_end && i < t->nslots; i++)
        if (r->ptr[i] && xseg_free(xs, r->ptr[i]) != XSEG_OK)
            return fprintf(stderr, "xseg-record: freeing at the end: %s\n",
                           xseg_last_error()), 1;
    return 0;
}

/* The conf with history:N added when --history is given (NULL: no memory). */
static char *make_conf(const opts *o)
{
    size_t n = strlen(o->conf) + 32;
    char *conf = malloc(n);
    if (conf && o->history)
        snprintf(conf, n, "%s%shistory:%lu", o->conf, o->conf[0] ? "," : "", o->history_size);
    else if (conf)
        snprintf(conf, n, "%s", o->conf);
    return conf;
}

static int record(const opts *o, const xseg_trace *t)
{
    char *conf = make_conf(o);
    run r = { calloc(t->nslots ? t->nslots : 1, sizeof(void *)), 0, 0 };
    xseg_t *xs = NULL;
    int rc = 1;
    if (!conf || !r.ptr)
        fprintf(stderr, "xseg-record: out of memory\n");
    else if (xseg_create(&xs, 0, conf) != XSEG_OK)
        fprintf(stderr, "xseg-record: %s\n", xseg_last_error());
    else {
        double t0 = now_s();
        rc = replay(xs, t, o, &r);
        if (!rc && !o->quiet)
            summary(xs, t, &r, now_s() - t0);
        if (!rc)
            rc = finish(xs, t, o, &r);
        xseg_destroy(xs);
    }
    free(r.ptr);
    free(conf);
    return rc;
}

int main(int argc, char **argv)
{
    opts o;
    xseg_trace *t = NULL;
    xseg_trace_error err;
    int rc = parse(argc, argv, &o);
    if (rc != RUN)
        return rc == DONE ? 0 : USAGE;
    if (xseg_trace_load(o.trace, &t, &err) != XSEG_TRACE_OK) {
        fprintf(stderr, "xseg-record: %s\n", err.message);
        return 1;
    }
    if (o.snapshot_at >= 0 && (size_t)o.snapshot_at >= t->nevents) {
        usage_error("bad value '%lld' for --snapshot-at: beyond the trace (%s has %zu events, "
                    "indices from 0)", o.snapshot_at, t->name, t->nevents);
        rc = USAGE;
    } else
        rc = record(&o, t);
    xseg_trace_free(t);
    return rc;
}
