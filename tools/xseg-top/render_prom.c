/* render_prom.c: one xseg-top sample in the Prometheus text format for
 * node_exporter's textfile collector (--prometheus).  The families, HELP
 * lines and values are the library's own (its renderer on the xseg_stats
 * each record holds and on the record's tag rows, whose families carry a
 * `tag` label), with `pid`, `process` and `slot` (the allocator's record in
 * its process's file) labels before `device`, plus xseg_top_processes; no
 * timestamps (the collector rejects them).  The library escapes label
 * values and replaces bytes that are not UTF-8. */
#include <stdlib.h>

#include "top.h"
#include "xseg.h"

#define NLABELS 3

/* Stats and label texts of every allocator of the sample. */
typedef struct prom_rows {
    xseg_stats *st;
    xseg_prom_source *src;
    const xseg_tag_stats **tags; /* each allocator's tag rows */
    size_t *ntags;
    char (*text)[3][32];  /* pid, slot, backend */
    char (*version)[17];
} prom_rows;

static const char *const g_names[NLABELS] = {"pid", "process", "slot"};

static void rows_free(prom_rows *r)
{
    free(r->st);
    free(r->src);
    free(r->tags);
    free(r->ntags);
    free(r->text);
    free(r->version);
}

static int rows_alloc(prom_rows *r, size_t n)
{
    size_t m = n ? n : 1;
    r->st = calloc(m, sizeof *r->st);
    r->src = calloc(m, sizeof *r->src);
    r->tags = calloc(m, sizeof *r->tags);
    r->ntags = calloc(m, sizeof *r->ntags);
    r->text = calloc(m, sizeof *r->text);
    r->version = calloc(m, sizeof *r->version);
    return r->st && r->src && r->tags && r->ntags && r->text && r->version ? 0 : -1;
}

/* Fill row k from process p's allocator a; values[] holds its labels. */
static void fill_row(prom_rows *r, size_t k, const top_proc *p, const top_alloc *a,
                     const char **values)
{
    xseg_shm_to_stats(a->v, &r->st[k]);
    snprintf(r->text[k][0], sizeof r->text[k][0], "%d", p->pid);
    snprintf(r->text[k][1], sizeof r->text[k][1], "%u", a->slot);
    char b[9];
    snprintf(r->text[k][2], sizeof r->text[k][2], "%s", top_backend(a, b));
    xseg_shm_text(&a->v[XSF_LIB_VERSION], 2, r->version[k]);
    values[0] = r->text[k][0];
    values[1] = p->comm;
    values[2] = r->text[k][1];
    r->src[k] = (xseg_prom_source){&r->st[k], r->text[k][2], r->version[k], NLABELS, g_names,
                                   values};
    r->tags[k] = a->tags;
    r->ntags[k] = a->ntags;
}

static int render(FILE *out, const prom_rows *r, size_t n)
{
    size_t len = 0;
    xseg_status rc = xseg_prom_render_tags(r->src, r->tags, r->ntags, n, NULL, 0, &len);
    char *buf = rc == XSEG_ERR_BUFFER_TOO_SMALL ? malloc(len + 1) : NULL;
    if (buf)
        rc = xseg_prom_render_tags(r->src, r->tags, r->ntags, n, buf, len + 1, &len);
    if (rc == XSEG_OK)
        fwrite(buf, 1, len, out);
    else
        fprintf(stderr, "xseg-top: %s\n", buf ? xseg_last_error() : "no memory for the text");
    free(buf);
    return rc == XSEG_OK ? 0 : -1;
}

int top_render_prom(FILE *out, const top_sample *s)
{
    fprintf(out, "# HELP xseg_top_processes Processes publishing xseg stats.\n"
                 "# TYPE xseg_top_processes gauge\nxseg_top_processes %zu\n", s->np);
    prom_rows r = {0};
    const char **values = calloc(s->na ? s->na * NLABELS : 1, sizeof *values);
    int rc = -1;
    if (values && rows_alloc(&r, s->na) == 0) {
        size_t k = 0;
        for (size_t i = 0; i < s->np; i++)
            for (size_t j = 0; j < s->p[i].count && k < s->na; j++, k++)
                fill_row(&r, k, &s->p[i], &s->a[s->p[i].first + j], values + k * NLABELS);
        rc = render(out, &r, k);
    } else {
        fprintf(stderr, "xseg-top: no memory for %zu allocators\n", s->na);
    }
    rows_free(&r);
    free(values);
    return rc;
}
