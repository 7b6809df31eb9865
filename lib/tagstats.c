/* tagstats.c: the per-tag stats of an allocator's family for the monitoring
 * outputs: which tags are shown (tag_fields.h: tag 0 and the tags in use,
 * once one is), each read with xseg_tag_stats_get (tags.c, under that tag
 * allocator's own lock, one at a time), and their JSON, driven by the list
 * of tag_fields.h: the "tags" array of xseg_stats_json, also used by
 * xseg-top --json for the rows it reads from stats_shm. */
#include <string.h>

#include "internal.h"
#include "tag_fields.h"
#include "textbuf.h"

typedef unsigned long long ull;

size_t xtags_collect(xseg_t *xs, xseg_tag_stats out[XSEG_MAX_TAGS])
{
    if (xs->parent)
        xs = xs->parent;
    if (!atomic_load_explicit(&xs->ntags, memory_order_acquire))
        return 0; /* no tag's allocator: only the default's memory */
    size_t n = 0;
    for (int t = 0; t < XSEG_MAX_TAGS && xseg_tag_name(t); t++) {
        memset(&out[n], 0, sizeof out[n]);
        out[n].size = sizeof out[n];
        if (xseg_tag_stats_get(xs, t, &out[n]) == XSEG_OK)
            n++;
    }
    return xseg_tags_shown(out, n);
}

/* A name as a JSON string: quote, backslash and control bytes escaped (a
 * name read from another process's record may hold anything). */
static void jname(xtb *j, const char *s, size_t max)
{
    xtb_put(j, "\"");
    for (size_t i = 0; i < max && s[i]; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            xtb_put(j, "\\%c", c);
        else if (c < 0x20 || c >= 0x7f)
            xtb_put(j, "\\u%04x", c);
        else
            xtb_put(j, "%c", c);
    }
    xtb_put(j, "\"");
}

enum { TF_U32, TF_I32, TF_NAME, TF_MODE, TF_COUNTER, TF_GAUGE, TF_MONO };

#define TAG_ROW(kind, f, json, row, proms) {TF_##kind, json, offsetof(xseg_tag_stats, f)},
static const struct trow {
    int kind;
    const char *name;
    size_t off;
} tag_rows[] = {XSEG_TAG_FIELDS(TAG_ROW, XSEG_TF_NOTHING)};

static void tfield(xtb *j, const struct trow *r, const char *p, int first)
{
    xtb_put(j, "%s\"%s\":", first ? "" : ",", r->name);
    if (r->kind == TF_I32) {
        xtb_put(j, "%d", *(const int32_t *)(const void *)p);
    } else if (r->kind == TF_NAME) {
        jname(j, p, XSEG_TAG_NAME_MAX);
    } else if (r->kind == TF_MODE) {
        int32_t m = *(const int32_t *)(const void *)p;
        xtb_put(j, "\"%s\"", m == XSEG_SLEEP_BACKUP ? "backup" : "discard");
    } else if (r->kind == TF_COUNTER) {
        const xseg_counter *c = (const void *)p;
        xtb_put(j, "{\"current\":%llu,\"peak\":%llu,\"total\":%llu}", (ull)c->current,
                (ull)c->peak, (ull)c->total);
    } else {
        xtb_put(j, "%llu", (ull) * (const uint64_t *)(const void *)p);
    }
}

void xtags_json(xtb *j, const xseg_tag_stats *t, size_t n)
{
    if (!n)
        return;
    xtb_put(j, ",\"tags\":[");
    for (size_t i = 0; i < n; i++) {
        xtb_put(j, "%s{", i ? "," : "");
        int first = 1;
        for (size_t k = 0; k < sizeof tag_rows / sizeof tag_rows[0]; k++)
            if (tag_rows[k].name) {
                tfield(j, &tag_rows[k], (const char *)&t[i] + tag_rows[k].off, first);
                first = 0;
            }
        xtb_put(j, "}");
    }
    xtb_put(j, "]");
}

size_t xtags_stats_json(xseg_t *xs, const xseg_stats *st, char *buf, size_t cap)
{
    xseg_tag_stats tags[XSEG_MAX_TAGS];
    size_t nt = xtags_collect(xs, tags);
    size_t n = xseg_render_json(st, xdrv_name(xs), buf, cap);
    if (!nt || n == 0)
        return n;
    /* the tags go before the closing brace, which is written again */
    xtb j = {buf, cap, n - 1};
    xtags_json(&j, tags, nt);
    xtb_put(&j, "}");
    if (cap && j.len >= cap)
        buf[cap - 1] = '\0';
    return j.len;
}
