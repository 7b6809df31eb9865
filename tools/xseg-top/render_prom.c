/* render_prom.c: one xseg-top sample in the Prometheus text format for
 * node_exporter's textfile collector (--prometheus): the metric names of
 * xseg_stats_prometheus, with `pid`, `process` and `slot` (the
 * allocator's record in its process's file) labels added to `device`,
 * and no timestamps (the collector rejects them). */
#include "top.h"
#include "xseg.h"

typedef unsigned long long ull;

typedef struct tfamily {
    const char *name;
    const char *type;
    unsigned field;
    const char *help;
} tfamily;

static const tfamily families[] = {
    {"xseg_allocated_bytes", "gauge", XSF_ALLOCATED, "Bytes of live allocations (rounded)."},
    {"xseg_allocated_peak_bytes", "gauge", XSF_ALLOCATED_PEAK, "Peak of xseg_allocated_bytes."},
    {"xseg_requested_bytes", "gauge", XSF_REQUESTED, "Bytes of live allocations as requested."},
    {"xseg_active_blocks", "gauge", XSF_ACTIVE, "Live allocations."},
    {"xseg_mapped_bytes", "gauge", XSF_MAPPED, "Physical device memory mapped."},
    {"xseg_mapped_peak_bytes", "gauge", XSF_MAPPED_PEAK, "Peak of xseg_mapped_bytes."},
    {"xseg_reserved_va_bytes", "gauge", XSF_VA, "Virtual address space reserved."},
    {"xseg_handles", "gauge", XSF_HANDLES, "Physical memory handles mapped."},
    {"xseg_device_total_bytes", "gauge", XSF_DEVICE_TOTAL, "Device memory size per the driver."},
    {"xseg_alloc_calls_total", "counter", XSF_ALLOC_CALLS, "Calls to xseg_alloc."},
    {"xseg_free_calls_total", "counter", XSF_FREE_CALLS, "Calls to xseg_free."},
    {"xseg_ooms_total", "counter", XSF_OOMS, "Allocations that failed out of memory."},
    {"xseg_alloc_retries_total", "counter", XSF_RETRIES, "Allocation attempts retried."},
    {"xseg_trims_total", "counter", XSF_TRIMS, "Calls to xseg_trim."},
    {"xseg_gc_runs_total", "counter", XSF_GC_RUNS, "Garbage collections near the cap."},
    {"xseg_released_bytes_total", "counter", XSF_RELEASED, "Physical bytes released."},
    {"xseg_driver_errors_total", "counter", XSF_DRIVER_ERRORS, "Driver calls that failed."},
};

/* Label value: backslash, double quote and newline escaped. */
static void lval(FILE *out, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\' || *s == '"')
            fprintf(out, "\\%c", *s);
        else if (*s == '\n')
            fputs("\\n", out);
        else
            fputc(*s, out);
    }
}

static void labels(FILE *out, const top_proc *p, const top_alloc *a, const char *extra)
{
    fprintf(out, "{pid=\"%d\",process=\"", p->pid);
    lval(out, p->comm);
    fprintf(out, "\",device=\"%d\",slot=\"%u\"%s}", (int)(int64_t)a->v[XSF_DEVICE], a->slot,
            extra);
}

static void each_sample(FILE *out, const top_sample *s, const char *name, unsigned field)
{
    for (size_t i = 0; i < s->np; i++)
        for (size_t k = 0; k < s->p[i].count; k++) {
            const top_alloc *a = &s->a[s->p[i].first + k];
            fputs(name, out);
            labels(out, &s->p[i], a, "");
            fprintf(out, " %llu\n", (ull)a->v[field]);
        }
}

static void cached(FILE *out, const top_sample *s)
{
    fputs("# HELP xseg_cached_bytes Mapped memory not allocated (cached for reuse).\n"
          "# TYPE xseg_cached_bytes gauge\n", out);
    for (size_t i = 0; i < s->np; i++)
        for (size_t k = 0; k < s->p[i].count; k++) {
            const top_alloc *a = &s->a[s->p[i].first + k];
            fputs("xseg_cached_bytes", out);
            labels(out, &s->p[i], a, "");
            fprintf(out, " %llu\n", (ull)top_cached(a));
        }
}

static void cap(FILE *out, const top_sample *s)
{
    fputs("# HELP xseg_mapped_cap_bytes Cap on mapped bytes in force (+Inf: no cap).\n"
          "# TYPE xseg_mapped_cap_bytes gauge\n", out);
    for (size_t i = 0; i < s->np; i++)
        for (size_t k = 0; k < s->p[i].count; k++) {
            const top_alloc *a = &s->a[s->p[i].first + k];
            fputs("xseg_mapped_cap_bytes", out);
            labels(out, &s->p[i], a, "");
            if (a->v[XSF_CAP])
                fprintf(out, " %llu\n", (ull)a->v[XSF_CAP]);
            else
                fputs(" +Inf\n", out);
        }
}

static void driver_calls(FILE *out, const top_sample *s)
{
    fputs("# HELP xseg_driver_calls_total Driver calls by operation.\n"
          "# TYPE xseg_driver_calls_total counter\n", out);
    for (size_t i = 0; i < s->np; i++)
        for (size_t k = 0; k < s->p[i].count; k++)
            for (unsigned op = 0; op < XSEG_OP_COUNT && op < XSEG_SHM_OPS; op++) {
                const top_alloc *a = &s->a[s->p[i].first + k];
                char extra[64];
                snprintf(extra, sizeof extra, ",op=\"%s\"", xseg_op_name((xseg_op)op));
                fputs("xseg_driver_calls_total", out);
                labels(out, &s->p[i], a, extra);
                fprintf(out, " %llu\n", (ull)a->v[XSF_DRV + op]);
            }
}

void top_render_prom(FILE *out, const top_sample *s)
{
    fprintf(out, "# HELP xseg_top_processes Processes publishing xseg stats.\n"
                 "# TYPE xseg_top_processes gauge\nxseg_top_processes %zu\n", s->np);
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) {
        const tfamily *f = &families[i];
        fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", f->name, f->help, f->name, f->type);
        each_sample(out, s, f->name, f->field);
    }
    cached(out, s);
    cap(out, s);
    driver_calls(out, s);
}
