/* main.c: xseg-record: replays an allocation trace through an xseg
 * allocator with monitoring on and writes what the monitoring calls give:
 * a snapshot (at the peak of live bytes, at the end, or after event N), the
 * event history, the stats as JSON and as Prometheus text.  With --pace it
 * slows down so that xseg-top can watch it live (stats_shm). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "record.h"
#include "xseg.h"

typedef struct opts {
    const char *trace, *conf, *snapshot, *history, *stats, *prom;
    long snapshot_at;      /* -1: peak, -2: end, else event index */
    unsigned history_size;
    unsigned pace_us;      /* sleep after every 1000 events */
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
          "                      peak), end, or an event index\n"
          "  --history FILE      write xseg_history_json output (adds history:N)\n"
          "  --history-size N    events the ring keeps (default 1000000)\n"
          "  --stats FILE        write xseg_stats_json output at the end\n"
          "  --prometheus FILE   write xseg_stats_prometheus output at the end\n"
          "  --pace US           sleep US microseconds after every 1000 events\n"
          "  --free-at-end       free what is still live at the end\n"
          "  --quiet             no summary line\n",
          out);
}

static int parse(int argc, char **argv, opts *o)
{
    *o = (opts){.conf = "backend:host", .snapshot_at = -1, .history_size = 1000000};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int used = 1;
        if (!strcmp(a, "--conf") && v)
            o->conf = v;
        else if (!strcmp(a, "--snapshot") && v)
            o->snapshot = v;
        else if (!strcmp(a, "--snapshot-at") && v)
            o->snapshot_at = !strcmp(v, "peak") ? -1 : !strcmp(v, "end") ? -2 : atol(v);
        else if (!strcmp(a, "--history") && v)
            o->history = v;
        else if (!strcmp(a, "--history-size") && v)
            o->history_size = (unsigned)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--stats") && v)
            o->stats = v;
        else if (!strcmp(a, "--prometheus") && v)
            o->prom = v;
        else if (!strcmp(a, "--pace") && v)
            o->pace_us = (unsigned)strtoul(v, NULL, 10);
        else
            used = 0;
        if (used) {
            i++;
            continue;
        }
        if (!strcmp(a, "--free-at-end"))
            o->free_at_end = 1;
        else if (!strcmp(a, "--quiet"))
            o->quiet = 1;
        else if (a[0] != '-' && !o->trace)
            o->trace = a;
        else
            return -1;
    }
    return o->trace ? 0 : -1;
}

static int dump(xseg_t *xs, dump_fn fn, const char *path, const char *what)
{
    size_t len = 0;
    fn(xs, NULL, 0, &len);
    char *buf = malloc(len + 1);
    xseg_status st = buf ? fn(xs, buf, len + 1, &len) : XSEG_ERR_OOM;
    FILE *f = st == XSEG_OK ? fopen(path, "w") : NULL;
    int ok = f && fwrite(buf, 1, len, f) == len && fputc('\n', f) != EOF;
    if (f && fclose(f) != 0)
        ok = 0;
    if (!ok)
        fprintf(stderr, "xseg-record: writing the %s to %s failed: %s\n", what, path,
                st == XSEG_OK ? "I/O error" : xseg_last_error());
    free(buf);
    return ok ? 0 : 1;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct run {
    void **ptr;
    uint64_t ooms;
    int failed;
} run;

static void step(xseg_t *xs, run *r, const rec_event *e)
{
    if (e->is_free) {
        if (r->ptr[e->slot] && xseg_free(xs, r->ptr[e->slot]) != XSEG_OK)
            r->failed = 1;
        r->ptr[e->slot] = NULL;
        return;
    }
    xseg_status st = xseg_alloc(xs, e->bytes, (void *)(uintptr_t)e->stream, &r->ptr[e->slot]);
    if (st == XSEG_ERR_OOM)
        r->ooms++;
    else if (st != XSEG_OK)
        r->failed = 1;
}

static int replay(xseg_t *xs, const rec_trace *t, const opts *o, run *r)
{
    int rc = 0;
    size_t at = o->snapshot_at == -1 ? t->peak_index : (size_t)o->snapshot_at;
    for (size_t i = 0; i < t->n && !r->failed; i++) {
        step(xs, r, &t->ev[i]);
        if (o->snapshot && o->snapshot_at != -2 && i == at)
            rc |= dump(xs, xseg_snapshot_json, o->snapshot, "snapshot");
        if (o->pace_us && i % 1000 == 999)
            usleep(o->pace_us);
    }
    if (r->failed)
        fprintf(stderr, "xseg-record: replay failed: %s\n", xseg_last_error());
    return rc | r->failed;
}

static void summary(xseg_t *xs, const rec_trace *t, const run *r, double secs)
{
    xseg_stats s = {.size = sizeof s};
    xseg_get_stats(xs, &s);
    double peak = (double)s.requested_bytes.peak;
    fprintf(stderr, "xseg-record: %zu events in %.3f s; peak live %.3f GiB (trace %.3f GiB), "
                    "peak mapped %.3f GiB, ratio %.3f; %llu OOMs; %llu maps, %llu unmaps\n",
            t->n, secs, peak / 1073741824.0, (double)t->peak_live / 1073741824.0,
            (double)s.mapped_bytes.peak / 1073741824.0,
            peak > 0 ? (double)s.mapped_bytes.peak / peak : 0.0, (unsigned long long)r->ooms,
            (unsigned long long)s.driver_calls[XSEG_OP_MAP],
            (unsigned long long)s.driver_calls[XSEG_OP_UNMAP]);
}

static int finish(xseg_t *xs, const rec_trace *t, const opts *o, run *r)
{
    int rc = 0;
    if (o->snapshot && o->snapshot_at == -2)
        rc |= dump(xs, xseg_snapshot_json, o->snapshot, "snapshot");
    if (o->history)
        rc |= dump(xs, xseg_history_json, o->history, "history");
    if (o->stats)
        rc |= dump(xs, xseg_stats_json, o->stats, "stats");
    if (o->prom)
        rc |= dump(xs, xseg_stats_prometheus, o->prom, "Prometheus text");
    for (uint32_t i = 0; o->free_at_end && i < t->nslots; i++)
        if (r->ptr[i])
            xseg_free(xs, r->ptr[i]);
    return rc;
}

int main(int argc, char **argv)
{
    opts o;
    rec_trace t;
    char err[256], conf[1024];
    if (parse(argc, argv, &o) != 0) {
        usage(stderr);
        return 2;
    }
    if (rec_load(o.trace, &t, err, sizeof err) != 0) {
        fprintf(stderr, "xseg-record: %s: %s\n", o.trace, err);
        return 1;
    }
    if (o.history)
        snprintf(conf, sizeof conf, "%s,history:%u", o.conf, o.history_size);
    else
        snprintf(conf, sizeof conf, "%s", o.conf);
    xseg_t *xs = NULL;
    run r = {calloc(t.nslots ? t.nslots : 1, sizeof(void *)), 0, 0};
    if (!r.ptr || xseg_create(&xs, 0, conf) != XSEG_OK) {
        fprintf(stderr, "xseg-record: %s\n", r.ptr ? xseg_last_error() : "out of memory");
        return 1;
    }
    double t0 = now_s();
    int rc = replay(xs, &t, &o, &r);
    double secs = now_s() - t0;
    if (!o.quiet)
        summary(xs, &t, &r, secs);
    rc |= finish(xs, &t, &o, &r);
    xseg_destroy(xs);
    free(r.ptr);
    rec_free(&t);
    return rc;
}
