/* render_text.c: xseg-top's terminal view: a summary line, then one row
 * per allocator (process, device, live / mapped / cached bytes, cap, peaks,
 * fragmentation, call and driver rates), like top; under an allocator with
 * tags in use, one row per tag (live, mapped, peaks, sleeping and backup
 * bytes, awake or asleep, sleeps and wakes). */
#include <string.h>
#include <time.h>

#include "top.h"

static void header(FILE *out, const top_sample *s, const top_opts *o)
{
    char when[32];
    time_t t = (time_t)(s->real_ns / 1000000000u);
    struct tm tm;
    localtime_r(&t, &tm);
    strftime(when, sizeof when, "%H:%M:%S", &tm);
    uint64_t live = 0, mapped = 0;
    for (size_t i = 0; i < s->na; i++) { /* a record's numbers are its tag 0's */
        live += s->a[i].v[XSF_ALLOCATED];
        mapped += s->a[i].v[XSF_MAPPED];
        for (size_t k = 0; k < s->a[i].ntags; k++)
            if (s->a[i].tags[k].tag != 0) {
                live += s->a[i].tags[k].live_bytes.current;
                mapped += s->a[i].tags[k].mapped_bytes.current;
            }
    }
    char l[16], m[16];
    fprintf(out, "xseg-top - %s  %zu process%s, %zu allocator%s  live %s  mapped %s  (%s)\n",
            when, s->np, s->np == 1 ? "" : "es", s->na, s->na == 1 ? "" : "s",
            top_size(live, l, sizeof l), top_size(mapped, m, sizeof m), o->dir);
    if (s->stale_removed || s->unreadable)
        fprintf(out, "removed %u file%s of dead processes; %u unreadable\n", s->stale_removed,
                s->stale_removed == 1 ? "" : "s", s->unreadable);
    fprintf(out, "\n%7s %-12s %3s %-4s %7s %7s %7s %7s %7s %7s %6s %9s %9s %7s %7s %7s %4s\n",
            "PID", "COMMAND", "DEV", "BACK", "LIVE", "LIVE^", "MAPPED", "MAPPED^", "CACHED", "CAP",
            "FRAG", "ALLOC/s", "FREE/s", "MAP/s", "UNMAP/s", "DRV/s", "OOM");
}

static void rate_col(FILE *out, int width, int has, double v)
{
    if (has)
        fprintf(out, " %*.0f", width, v);
    else
        fprintf(out, " %*s", width, "-");
}

static void row(FILE *out, const top_proc *p, const top_alloc *a)
{
    char b[9], s[6][16];
    const uint64_t *v = a->v;
    double drv = 0;
    for (unsigned k = 0; k < XSEG_SHM_OPS; k++)
        drv += a->drv_rate[k];
    fprintf(out, "%7d %-12.12s %3d %-4.4s %7s %7s %7s %7s %7s %7s", p->pid, p->comm,
            (int)(int64_t)v[XSF_DEVICE], top_backend(a, b),
            top_size(v[XSF_ALLOCATED], s[0], 16), top_size(v[XSF_ALLOCATED_PEAK], s[1], 16),
            top_size(v[XSF_MAPPED], s[2], 16), top_size(v[XSF_MAPPED_PEAK], s[3], 16),
            top_size(top_cached(a), s[4], 16),
            v[XSF_CAP] ? top_size(v[XSF_CAP], s[5], 16) : "none");
    if (v[XSF_ALLOCATED])
        fprintf(out, " %5.2fx", top_frag(a));
    else
        fprintf(out, " %6s", "-");
    rate_col(out, 9, a->has_rates, a->alloc_rate);
    rate_col(out, 9, a->has_rates, a->free_rate);
    rate_col(out, 7, a->has_rates, a->drv_rate[XSEG_OP_MAP]);
    rate_col(out, 7, a->has_rates, a->drv_rate[XSEG_OP_UNMAP]);
    rate_col(out, 7, a->has_rates, drv);
    fprintf(out, " %4llu%s\n", (unsigned long long)v[XSF_OOMS], a->busy ? " (busy)" : "");
}

/* The tag rows under an allocator's row. */
static void tag_rows(FILE *out, const top_alloc *a)
{
    if (!a->ntags && !a->tags_busy)
        return;
    fprintf(out, "%12s%-20s %7s %7s %7s %7s %8s %7s %6s %5s  %s\n", "", "TAG", "LIVE", "LIVE^",
            "MAPPED", "MAPPED^", "SLEEPING", "BACKUP", "SLEEPS", "WAKES", "STATE");
    for (size_t k = 0; k < a->ntags; k++) {
        const xseg_tag_stats *t = &a->tags[k];
        char n[XSEG_TAG_NAME_MAX + 1], z[6][16];
        fprintf(out, "%12s%-20.20s %7s %7s %7s %7s %8s %7s %6llu %5llu  %s\n", "",
                top_tag_name(t, n), top_size(t->live_bytes.current, z[0], 16),
                top_size(t->live_bytes.peak, z[1], 16), top_size(t->mapped_bytes.current, z[2], 16),
                top_size(t->mapped_bytes.peak, z[3], 16), top_size(t->sleeping_bytes, z[4], 16),
                top_size(t->backup_bytes, z[5], 16), (unsigned long long)t->sleeps,
                (unsigned long long)t->wakes,
                !t->asleep ? "awake"
                : t->mode == XSEG_SLEEP_BACKUP ? "asleep (backup)"
                                               : "asleep (discard)");
    }
    if (a->tags_busy)
        fprintf(out, "%12s(%u tag row%s busy: not shown)\n", "", a->tags_busy,
                a->tags_busy == 1 ? "" : "s");
}

void top_render_text(FILE *out, const top_sample *s, const top_opts *o)
{
    header(out, s, o);
    for (size_t i = 0; i < s->np; i++) {
        const top_proc *p = &s->p[i];
        for (size_t k = 0; k < p->count; k++) {
            row(out, p, &s->a[p->first + k]);
            tag_rows(out, &s->a[p->first + k]);
        }
        if (p->dropped)
            fprintf(out, "%7d %-12.12s (%u more allocator%s not shown: no free slot)\n", p->pid,
                    p->comm, p->dropped, p->dropped == 1 ? "" : "s");
    }
    if (!s->np)
        fprintf(out, "(no process publishes xseg stats: create allocators with stats_shm:on)\n");
}
