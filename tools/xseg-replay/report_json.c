/* report_json.c: xseg-replay's JSON output: one object per trace with the
 * measurements, the driver calls by kind and the error, if any; and the
 * line of --peak-snapshot. */
#include <string.h>
#include "report.h"

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", f);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

void report_peak_json(FILE *f, const replay_report *rep)
{
    if (!rep->peak.snap)
        return;
    fputs("{\"trace\":", f);
    json_string(f, rep->path);
    xseg_peak_write(f, &rep->peak, (size_t)rep->peak_mapped);
}

static void key(FILE *f, const char *k)
{
    fprintf(f, ",\"%s\":", k);
}

static void u64(FILE *f, const char *k, uint64_t v)
{
    key(f, k);
    fprintf(f, "%llu", (unsigned long long)v);
}

static void num(FILE *f, const char *k, double v)
{
    key(f, k);
    fprintf(f, "%.6g", v);
}

static void trace_facts(FILE *f, const xseg_trace *t, double load_seconds)
{
    u64(f, "trace_events", t->nevents);
    u64(f, "allocs", t->nallocs);
    u64(f, "frees", t->nfrees);
    u64(f, "max_live_blocks", t->nslots);
    u64(f, "streams", t->nstreams);
    u64(f, "live_at_end", t->live_at_end);
    num(f, "load_seconds", load_seconds);
}

static void calls_by_op(FILE *f, const char *name, const uint64_t calls[XSEG_OP_COUNT])
{
    key(f, name);
    fputc('{', f);
    for (int op = 0; op < XSEG_OP_COUNT; op++)
        fprintf(f, "%s\"%s\":%llu", op ? "," : "", xseg_op_name((xseg_op)op),
                (unsigned long long)calls[op]);
    fputc('}', f);
}

/* The second half of the trace: its first event, driver calls, caller time. */
static void second_half(FILE *f, const xseg_replay_result *r)
{
    key(f, "second_half");
    fputc('{', f);
    fprintf(f, "\"from_event\":%llu", (unsigned long long)r->half_event);
    calls_by_op(f, "driver_calls", r->second_half_calls);
    u64(f, "caller_ns", r->second_half_caller_ns);
    fputc('}', f);
}

/* Driver time: totals per side, then per side and op (keys with "_ns":
 * tools/replay-figures leaves timings out of its comparison). */
static void driver_time(FILE *f, const replay_report *rep)
{
    static const char *const side[2] = {"caller", "worker"};
    uint64_t sum[2] = {0, 0};
    for (int s = 0; s < 2; s++)
        for (int op = 0; op < XSEG_OP_COUNT; op++)
            sum[s] += rep->driver_ns[s][op];
    u64(f, "driver_caller_ns", sum[0]);
    u64(f, "driver_worker_ns", sum[1]);
    key(f, "driver_ns_by_op");
    fputc('{', f);
    for (int s = 0; s < 2; s++) {
        fprintf(f, "%s\"%s\":{", s ? "," : "", side[s]);
        for (int op = 0; op < XSEG_OP_COUNT; op++)
            fprintf(f, "%s\"%s\":%llu", op ? "," : "", xseg_op_name((xseg_op)op),
                    (unsigned long long)rep->driver_ns[s][op]);
        fputc('}', f);
    }
    fputc('}', f);
}

static void measurements(FILE *f, const replay_report *rep)
{
    const xseg_replay_result *r = &rep->result;
    u64(f, "events", r->events);
    num(f, "seconds", r->seconds);
    num(f, "events_per_s", r->events_per_s);
    u64(f, "repeats", (uint64_t)rep->repeats);
    u64(f, "peak_live_bytes", r->peak_live_bytes);
    u64(f, "peak_mapped_bytes", r->peak_mapped_bytes);
    num(f, "ratio", r->frag_ratio);
    u64(f, "maps", r->maps);
    u64(f, "unmaps", r->unmaps);
    num(f, "map_unmap_per_1000_events", r->map_unmap_per_1000);
    calls_by_op(f, "driver_calls", r->driver_calls);
    driver_time(f, rep);
    second_half(f, r);
    u64(f, "syncs", r->stats.syncs);
    u64(f, "moved_bytes", r->stats.moved_bytes);
    u64(f, "slack_granted", r->stats.slack_granted);
    u64(f, "ooms", r->ooms);
    u64(f, "freed_at_end", r->freed_at_end);
    u64(f, "verified_blocks", r->verified_blocks);
}

static void string_or_null(FILE *f, const char *k, const char *v)
{
    key(f, k);
    if (v)
        json_string(f, v);
    else
        fputs("null", f);
}

static void load_error(FILE *f, const replay_report *rep)
{
    json_string(f, xseg_trace_status_name(rep->load_error.status));
    u64(f, "code", (uint64_t)rep->load_error.status);
    if (rep->load_error.line)
        u64(f, "line", rep->load_error.line);
}

static void replay_error(FILE *f, const replay_report *rep)
{
    const xseg_replay_result *r = &rep->result;
    json_string(f, xseg_strerror(r->status));
    u64(f, "code", (uint64_t)r->status);
    if (r->error_line) {
        u64(f, "event", r->error_event);
        u64(f, "line", r->error_line);
    }
    key(f, "corrupted");
    fputs(r->corrupted ? "true" : "false", f);
}

static void error(FILE *f, const replay_report *rep)
{
    key(f, "error");
    if (!rep->failed) {
        fputs("null", f);
        return;
    }
    fputs("{\"stage\":", f);
    json_string(f, rep->stage);
    fputs(",\"status\":", f);
    if (rep->trace)
        replay_error(f, rep);
    else
        load_error(f, rep);
    key(f, "message");
    json_string(f, rep->error);
    fputc('}', f);
}

void report_json(FILE *f, const replay_report *rep, const replay_cli *c)
{
    fputs("{\"trace\":", f);
    json_string(f, rep->path);
    fprintf(f, ",\"ok\":%s", rep->failed ? "false" : "true");
    string_or_null(f, "backend", rep->backend[0] ? rep->backend : NULL);
    u64(f, "device", (uint64_t)c->device);
    string_or_null(f, "conf", c->conf);
    fprintf(f, ",\"verify\":%s", c->verify ? "true" : "false");
    if (c->expected_peak && rep->trace)
        u64(f, "expected_peak", rep->trace->peak_live_bytes);
    if (rep->trace) {
        trace_facts(f, rep->trace, rep->load_seconds);
        measurements(f, rep);
    }
    error(f, rep);
    fputc('}', f);
}
