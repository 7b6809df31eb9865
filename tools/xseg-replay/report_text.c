/* report_text.c: xseg-replay's human-readable output: one table row per
 * trace, with the driver calls by kind and trace facts below it. */
#include <string.h>
#include "report.h"

const char *report_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash && slash[1] ? slash + 1 : path;
}

/* Decimal units, as the trace README: 2.80 GB. */
static const char *human(double v, const char *unit, char *buf, size_t len)
{
    static const char *const prefix[] = { "", "K", "M", "G", "T", "P" };
    int i = 0;
    while (v >= 1000.0 && i < 5) {
        v /= 1000.0;
        i++;
    }
    if (i == 0)
        snprintf(buf, len, "%.0f%s%s", v, unit[0] ? " " : "", unit);
    else
        snprintf(buf, len, "%.2f %s%s", v, prefix[i], unit);
    return buf;
}

void report_text_header(FILE *f, int w)
{
    fprintf(f, "%-*s %9s %9s %10s %10s %11s %6s %12s  %s\n", w, "trace", "events",
            "seconds", "events/s", "peak live", "peak mapped", "ratio", "map+unmap/1k",
            "backend");
}

/* The ops called at least once, "op N, op N", or "none". */
static void calls_by_op(FILE *f, const uint64_t calls[XSEG_OP_COUNT])
{
    int any = 0;
    for (int op = 0; op < XSEG_OP_COUNT; op++) {
        if (!calls[op])
            continue;
        fprintf(f, "%s %s %llu", any ? "," : "", xseg_op_name((xseg_op)op),
                (unsigned long long)calls[op]);
        any = 1;
    }
    if (!any)
        fprintf(f, " none");
}

static void driver_calls(FILE *f, const xseg_replay_result *r)
{
    fprintf(f, "  driver calls:");
    calls_by_op(f, r->driver_calls);
    fprintf(f, "\n  second half (from event %llu):", (unsigned long long)r->half_event);
    calls_by_op(f, r->second_half_calls);
    fprintf(f, "; caller driver time %.3f s\n", (double)r->second_half_caller_ns * 1e-9);
    if (r->stats.slack_granted) /* release_slack_max (docs/config.md) */
        fprintf(f, "  slack governor: %.2f MB granted over release_slack, %.4f of the budget\n",
                (double)r->stats.slack_granted / 1e6,
                (double)r->stats.slack_granted / (double)r->stats.release_budget);
}

static void driver_time(FILE *f, const replay_report *rep)
{
    uint64_t sum[2] = {0, 0};
    for (int s = 0; s < 2; s++)
        for (int op = 0; op < XSEG_OP_COUNT; op++)
            sum[s] += rep->driver_ns[s][op];
    fprintf(f, "  driver time: caller %.3f s, worker %.3f s\n", (double)sum[0] * 1e-9,
            (double)sum[1] * 1e-9);
}

static void facts(FILE *f, const replay_report *rep)
{
    const xseg_trace *t = rep->trace;
    const xseg_replay_result *r = &rep->result;
    fprintf(f, "  trace: %zu allocs, %zu frees, %u live at most, %zu stream%s, "
            "loaded in %.3f s; OOMs %llu", t->nallocs, t->nfrees, t->nslots, t->nstreams,
            t->nstreams == 1 ? "" : "s", rep->load_seconds, (unsigned long long)r->ooms);
    if (r->verified_blocks)
        fprintf(f, "; verified %llu blocks", (unsigned long long)r->verified_blocks);
    if (rep->repeats > 1)
        fprintf(f, "; best of %d", rep->repeats);
    fprintf(f, "\n");
}

void report_text(FILE *f, const replay_report *rep, int w)
{
    const xseg_replay_result *r = &rep->result;
    char rate[32], live[32], mapped[32];
    if (!rep->trace) {
        fprintf(f, "%-*s   not loaded (see the error)\n", w, report_name(rep->path));
        return;
    }
    fprintf(f, "%-*s %9llu %9.3f %10s %10s %11s %6.3f %12.2f  %s%s\n", w,
            report_name(rep->path), (unsigned long long)r->events, r->seconds,
            human(r->events_per_s, "", rate, sizeof rate),
            human((double)r->peak_live_bytes, "B", live, sizeof live),
            human((double)r->peak_mapped_bytes, "B", mapped, sizeof mapped), r->frag_ratio,
            r->map_unmap_per_1000, rep->backend[0] ? rep->backend : "-",
            rep->failed ? "  FAILED" : "");
    driver_calls(f, r);
    driver_time(f, rep);
    facts(f, rep);
}
