/* render_json.c: one xseg-top sample as JSON (--once --json), for scripts:
 * every process and its allocators with all published counters, their tags
 * (the "tags" entries of xseg_stats_json, rendered by the library's own
 * code) and rates when the sample had a previous one to compare with. */
#include "textbuf.h"
#include "top.h"
#include "xseg.h"

typedef unsigned long long ull;

static void jstr(FILE *out, const char *s)
{
    fputc('"', out);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c < 0x20)
            fprintf(out, "\\u%04x", c);
        else if (c >= 0x80) /* not known to be UTF-8 */
            fputc('?', out);
        else
            fputc(c, out);
    }
    fputc('"', out);
}

static void jnum(FILE *out, const char *name, uint64_t v)
{
    fprintf(out, ",\"%s\":%llu", name, (ull)v);
}

static void counters(FILE *out, const top_alloc *a)
{
    static const struct { const char *name; unsigned f; } f[] = {
        {"allocated_bytes", XSF_ALLOCATED}, {"allocated_peak_bytes", XSF_ALLOCATED_PEAK},
        {"requested_bytes", XSF_REQUESTED}, {"active_blocks", XSF_ACTIVE},
        {"mapped_bytes", XSF_MAPPED},       {"mapped_peak_bytes", XSF_MAPPED_PEAK},
        {"cap_bytes", XSF_CAP},             {"device_total_bytes", XSF_DEVICE_TOTAL},
        {"page_size", XSF_PAGE_SIZE},       {"reserved_va_bytes", XSF_VA},
        {"segments", XSF_SEGMENTS},         {"handles", XSF_HANDLES},
        {"alloc_calls", XSF_ALLOC_CALLS},   {"free_calls", XSF_FREE_CALLS},
        {"ooms", XSF_OOMS},                 {"alloc_retries", XSF_RETRIES},
        {"trims", XSF_TRIMS},               {"gc_runs", XSF_GC_RUNS},
        {"syncs", XSF_SYNCS},               {"released_bytes", XSF_RELEASED},
        {"driver_errors", XSF_DRIVER_ERRORS}, {"deferred_frees", XSF_DEFERRED},
        {"updates", XSF_UPDATES},           {"created_unix_ns", XSF_CREATED_NS},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        jnum(out, f[i].name, a->v[f[i].f]);
    jnum(out, "cached_bytes", top_cached(a));
    fprintf(out, ",\"frag_ratio\":%.4f,\"driver_calls\":{", top_frag(a));
    for (unsigned k = 0; k < XSEG_OP_COUNT && k < XSEG_SHM_OPS; k++)
        fprintf(out, "%s\"%s\":%llu", k ? "," : "", xseg_op_name((xseg_op)k),
                (ull)a->v[XSF_DRV + k]);
    fputc('}', out);
}

static void rates(FILE *out, const top_alloc *a)
{
    if (!a->has_rates) {
        fputs(",\"rates\":null", out);
        return;
    }
    fprintf(out, ",\"rates\":{\"alloc_per_s\":%.3f,\"free_per_s\":%.3f,\"oom_per_s\":%.3f,"
                 "\"driver_calls_per_s\":{",
            a->alloc_rate, a->free_rate, a->oom_rate);
    for (unsigned k = 0; k < XSEG_OP_COUNT && k < XSEG_SHM_OPS; k++)
        fprintf(out, "%s\"%s\":%.3f", k ? "," : "", xseg_op_name((xseg_op)k), a->drv_rate[k]);
    fputs("}}", out);
}

/* "tags": the library's renderer (tag_fields.h); [] when none is shown. */
static void tags(FILE *out, const top_alloc *a)
{
    char buf[XSEG_SHM_TAGS * 640];
    xtb j = {buf, sizeof buf, 0};
    xtags_json(&j, a->tags, a->ntags);
    if (!a->ntags || j.len >= sizeof buf) /* the rows' names are bounded: never too long */
        fputs(",\"tags\":[]", out);
    else
        fwrite(buf, 1, j.len, out);
    fprintf(out, ",\"tags_busy\":%u", a->tags_busy);
}

static void allocator(FILE *out, const top_alloc *a)
{
    char b[9];
    fprintf(out, "{\"slot\":%u,\"generation\":%llu,\"device\":%d,\"backend\":", a->slot,
            (ull)a->v[XSF_GENERATION], (int)(int64_t)a->v[XSF_DEVICE]);
    jstr(out, top_backend(a, b));
    fprintf(out, ",\"busy\":%s", a->busy ? "true" : "false");
    counters(out, a);
    tags(out, a);
    rates(out, a);
    fputc('}', out);
}

static void process(FILE *out, const top_sample *s, const top_proc *p)
{
    fprintf(out, "{\"pid\":%d,\"comm\":", p->pid);
    jstr(out, p->comm);
    fprintf(out, ",\"start_ticks\":%llu,\"created_unix_ns\":%llu,\"dropped\":%u,\"allocators\":[",
            (ull)p->start_ticks, (ull)p->created_ns, p->dropped);
    for (size_t k = 0; k < p->count; k++) {
        fputs(k ? ",\n  " : "\n  ", out);
        allocator(out, &s->a[p->first + k]);
    }
    fputs("]}", out);
}

void top_render_json(FILE *out, const top_sample *s, const top_opts *o)
{
    fprintf(out, "{\"time_unix_ns\":%llu,\"dir\":", (ull)s->real_ns);
    jstr(out, o->dir);
    fprintf(out, ",\"stale_removed\":%u,\"unreadable\":%u,\"processes\":[", s->stale_removed,
            s->unreadable);
    for (size_t i = 0; i < s->np; i++) {
        fputs(i ? ",\n" : "\n", out);
        process(out, s, &s->p[i]);
    }
    fputs("]}\n", out);
}
