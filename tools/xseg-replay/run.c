/* run.c: one trace's run in xseg-replay: loads it (timed), replays it
 * --repeat times, each through a fresh allocator, and keeps the fastest
 * result; a failure stops the repeats and is described for the report.
 * --peak-snapshot: the first replay keeps the allocator at its mapped peak
 * (peak.h) in the report, for main.c to write.  --expected-peak: each
 * allocator gets the trace's peak of live bytes as its hint. */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "run.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static xseg_status create(const replay_cli *c, xseg_t **xs)
{
    return xseg_create(xs, c->device, c->conf);
}

int run_check_allocator(const replay_cli *c)
{
    xseg_t *xs = NULL;
    xseg_status st = create(c, &xs);
    if (st == XSEG_OK)
        return xseg_destroy(xs), 0;
    fprintf(stderr, "xseg-replay: cannot create an allocator on device %d with %s%s%s: %s: %s\n",
            c->device, c->conf ? "conf '" : "XSEG_CONF", c->conf ? c->conf : "",
            c->conf ? "'" : "", xseg_strerror(st), xseg_last_error());
    return st == XSEG_ERR_CONFIG ? 2 : 1;
}

static int load(const char *path, replay_report *rep)
{
    double t0 = now();
    if (xseg_trace_load(path, &rep->trace, &rep->load_error) != XSEG_TRACE_OK) {
        snprintf(rep->error, sizeof rep->error, "%s", rep->load_error.message);
        rep->stage = "load";
        return rep->failed = 1, -1;
    }
    rep->load_seconds = now() - t0;
    return 0;
}

static void see_peak(void *arg, xseg_t *xs, uint64_t live_bytes)
{
    xseg_peak_see(arg, xs, (size_t)live_bytes, 0);
}

/* One replay through a fresh allocator into *r, its driver time into ns;
 * peak: where to keep the allocator at its mapped peak, or NULL. */
static int replay_once(const replay_cli *c, replay_report *rep, xseg_replay_result *r,
                       uint64_t ns[2][XSEG_OP_COUNT], xseg_peak *peak)
{
    xseg_replay_opts opts = { c->verify, 1, peak ? see_peak : NULL, peak };
    xseg_t *xs = NULL;
    xseg_status st;
    memset(r, 0, sizeof *r);
    st = create(c, &xs);
    if (st != XSEG_OK) {
        r->status = st;
        rep->stage = "allocator";
        snprintf(rep->error, sizeof rep->error, "%s: cannot create an allocator: %s: %s",
                 rep->path, xseg_strerror(st), xseg_last_error());
        return rep->failed = 1, -1;
    }
    snprintf(rep->backend, sizeof rep->backend, "%s", xseg_backend_name(xs));
    if (c->expected_peak) /* cannot fail on an allocator just made */
        (void)xseg_set_expected_peak(xs, (size_t)rep->trace->peak_live_bytes);
    st = xseg_replay_run(xs, rep->trace, &opts, r);
    xseg_replay_driver_ns(xs, ns);
    xseg_destroy(xs);
    if (st == XSEG_OK)
        return 0;
    snprintf(rep->error, sizeof rep->error, "%s: replay failed: %s", rep->path,
             r->error_message);
    rep->stage = "replay";
    return rep->failed = 1, -1;
}

int run_trace(const replay_cli *c, const char *path, replay_report *rep)
{
    static xseg_replay_result r; /* large: kept off the stack */
    uint64_t ns[2][XSEG_OP_COUNT];
    memset(rep, 0, sizeof *rep);
    rep->path = path;
    if (load(path, rep) != 0)
        return -1;
    for (int i = 0; i < c->repeat; i++) {
        memset(ns, 0, sizeof ns);
        int rc = replay_once(c, rep, &r, ns, i == 0 && c->peak_path ? &rep->peak : NULL);
        if (i == 0)
            rep->peak_mapped = r.peak_mapped_bytes;
        rep->repeats++;
        if (rc != 0 || i == 0 || r.seconds < rep->result.seconds) {
            rep->result = r;
            memcpy(rep->driver_ns, ns, sizeof ns);
        }
        if (rc != 0)
            return -1;
    }
    return 0;
}

void run_report_free(replay_report *rep)
{
    xseg_trace_free(rep->trace);
    rep->trace = NULL;
    xseg_peak_clear(&rep->peak);
}
