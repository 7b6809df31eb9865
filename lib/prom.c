/* prom.c: the stats in the Prometheus text exposition format (version
 * 0.0.4): a HELP and a TYPE line per metric family, base units (bytes),
 * `_bytes` / `_total` suffixes, and a `device` label on every sample, for a
 * server to add to its own /metrics.  Driven by one table of families
 * (made from the field list, stats_fields.h), for
 * one allocator (xseg_stats_prometheus) or many with extra labels
 * (xseg_stats_prometheus_render: xseg-top renders every published record
 * with it, so both texts have the same families and HELP lines).  The
 * per-tag families (tag_fields.h's list) follow, one sample per tag shown
 * with a `tag` label after `device`, when some source has tags in use. */
#include <stddef.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "stats_fields.h"
#include "tag_fields.h"
#include "textbuf.h"

typedef unsigned long long ull;

/* How a family shows its member (stats_fields.h's style). */
enum { STYLE_one, STYLE_inf0, STYLE_ops, STYLE_i32, STYLE_sec };

typedef struct pfamily {
    const char *name;
    const char *type; /* "gauge" or "counter" */
    size_t off;       /* of a uint64_t (ops: of the first) in xseg_stats;
                         of the member in xseg_tag_stats for a tag family */
    int style;
    const char *help;
} pfamily;

/* Every family of stats_fields.h, at its place in the text. */
#define FAMILY(order, member, style, type, name, help) \
    [order] = {name, #type, offsetof(xseg_stats, member), STYLE_##style, help},
static const pfamily families[XSEG_STATS_NFAMILIES] = {
    XSEG_STATS_FIELDS(XSEG_SF_PROMS_, FAMILY)};
/* Every tag family of tag_fields.h, in list order. */
#define TFAMILY(member, style, type, name, help) \
    {name, #type, offsetof(xseg_tag_stats, member), STYLE_##style, help},
static const pfamily tag_families[XSEG_TAG_NFAMILIES] = {
    XSEG_TAG_FIELDS(XSEG_TF_PROMS_, TFAMILY)};
/* The orders are 0 .. n-1, each once (an order >= n does not compile). */
#define ORDER(order, ...) +(order)
#define ORDER2(order, ...) +(order) * (order)
_Static_assert(0 XSEG_STATS_FIELDS(XSEG_SF_PROMS_, ORDER) ==
                   XSEG_STATS_NFAMILIES * (XSEG_STATS_NFAMILIES - 1) / 2 &&
               0 XSEG_STATS_FIELDS(XSEG_SF_PROMS_, ORDER2) ==
                   (XSEG_STATS_NFAMILIES - 1) * XSEG_STATS_NFAMILIES *
                       (2 * XSEG_STATS_NFAMILIES - 1) / 6,
               "stats_fields.h: the Prometheus orders are not 0 .. n-1, each once");

static uint64_t field(const xseg_stats *s, size_t off)
{
    return *(const uint64_t *)(const void *)((const char *)s + off);
}

/* A source checked and with its stats copied whole (an older caller's
 * shorter struct reads as zeros past its size). */
typedef struct psrc {
    xseg_stats st;
    const xseg_prom_source *src;
    const xseg_tag_stats *tags; /* the tags shown, for the tag families */
    size_t ntags;
} psrc;

/* Length of the valid UTF-8 sequence at s (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF), 0 when the bytes are not one. */
static size_t utf8_seq(const unsigned char *s)
{
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    size_t n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    unsigned lo = 0x80, hi = 0xbf; /* the allowed range of the second byte */
    if (c == 0xe0)
        lo = 0xa0;
    else if (c == 0xed)
        hi = 0x9f;
    else if (c == 0xf0)
        lo = 0x90;
    else if (c == 0xf4)
        hi = 0x8f;
    if (n && (s[1] < lo || s[1] > hi))
        return 0;
    for (size_t i = 2; i < n; i++)
        if (s[i] < 0x80 || s[i] > 0xbf)
            return 0;
    return n;
}

/* A label value: backslash, double quote and newline escaped, each byte
 * that is not part of valid UTF-8 replaced by U+FFFD, so the text is always
 * valid UTF-8 whatever bytes a process name holds. */
static void label_value(xtb *b, const char *v)
{
    const unsigned char *s = (const unsigned char *)(v ? v : "");
    while (*s) {
        size_t n = utf8_seq(s);
        if (*s == '\\' || *s == '"')
            xtb_put(b, "\\%c", *s);
        else if (*s == '\n')
            xtb_put(b, "\\n");
        else if (n)
            xtb_put(b, "%.*s", (int)n, (const char *)s);
        else
            xtb_put(b, "\xef\xbf\xbd");
        s += n ? n : 1;
    }
}

/* `name{extra labels,device="N"` (the caller adds its own labels and `}`). */
static void open_sample(xtb *b, const char *name, const psrc *p)
{
    xtb_put(b, "%s{", name);
    for (size_t i = 0; i < p->src->nlabels; i++) {
        xtb_put(b, "%s=\"", p->src->label_names[i]);
        label_value(b, p->src->label_values[i]);
        xtb_put(b, "\",");
    }
    xtb_put(b, "device=\"%d\"", p->st.device);
}

/* The value of a one-sample family: 0 is +Inf for inf0 (no cap). */
static void value(xtb *b, const pfamily *f, uint64_t v)
{
    if (f->style == STYLE_inf0 && v == 0)
        xtb_put(b, "} +Inf\n");
    else
        xtb_put(b, "} %llu\n", (ull)v);
}

static void family(xtb *b, const pfamily *f, const psrc *p, size_t n)
{
    xtb_put(b, "# HELP %s %s\n# TYPE %s %s\n", f->name, f->help, f->name, f->type);
    for (size_t i = 0; i < n; i++) {
        if (f->style != STYLE_ops) {
            open_sample(b, f->name, &p[i]);
            value(b, f, field(&p[i].st, f->off));
            continue;
        }
        for (int op = 0; op < XSEG_OP_COUNT; op++) {
            open_sample(b, f->name, &p[i]);
            xtb_put(b, ",op=\"%s\"} %llu\n", xseg_op_name((xseg_op)op),
                    (ull)field(&p[i].st, f->off + (size_t)op * sizeof(uint64_t)));
        }
    }
}

/* One sample per tag of every source: `name{labels,device="N",tag="T"} v`;
 * a tag whose name is unknown (a record written without it) is labelled by
 * its id. */
static void tag_family(xtb *b, const pfamily *f, const psrc *p, size_t n)
{
    xtb_put(b, "# HELP %s %s\n# TYPE %s %s\n", f->name, f->help, f->name, f->type);
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < p[i].ntags; k++) {
            const xseg_tag_stats *t = &p[i].tags[k];
            const char *m = (const char *)t + f->off;
            char name[XSEG_TAG_NAME_MAX + 1];
            snprintf(name, sizeof name, "%.*s", XSEG_TAG_NAME_MAX, t->name);
            if (!name[0])
                snprintf(name, sizeof name, "%d", t->tag);
            open_sample(b, f->name, &p[i]);
            xtb_put(b, ",tag=\"");
            label_value(b, name);
            if (f->style == STYLE_i32)
                xtb_put(b, "\"} %d\n", *(const int32_t *)(const void *)m);
            else if (f->style == STYLE_sec)
                xtb_put(b, "\"} %.9f\n", (double)*(const uint64_t *)(const void *)m / 1e9);
            else
                xtb_put(b, "\"} %llu\n", (ull) * (const uint64_t *)(const void *)m);
        }
}

static void info_family(xtb *b, const psrc *p, size_t n)
{
    xtb_put(b, "# HELP xseg_info Allocator information (always 1).\n# TYPE xseg_info gauge\n");
    for (size_t i = 0; i < n; i++) {
        const xseg_prom_source *s = p[i].src;
        open_sample(b, "xseg_info", &p[i]);
        xtb_put(b, ",backend=\"");
        label_value(b, s->backend);
        xtb_put(b, "\",version=\"");
        label_value(b, s->version ? s->version : xseg_version());
        xtb_put(b, "\"} 1\n");
    }
}

static size_t render(const psrc *p, size_t n, char *buf, size_t cap)
{
    xtb b = {buf, cap, 0};
    info_family(&b, p, n);
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        family(&b, &families[i], p, n);
    size_t tags = 0;
    for (size_t i = 0; i < n; i++)
        tags += p[i].ntags;
    for (size_t i = 0; tags && i < sizeof tag_families / sizeof tag_families[0]; i++)
        tag_family(&b, &tag_families[i], p, n);
    if (cap)
        buf[b.len < cap ? b.len : cap - 1] = '\0';
    return b.len;
}

/* Store the length, and fail when the text and its NUL did not fit. */
static xseg_status finish(xseg_t *xs, const char *who, size_t n, size_t cap, size_t *len)
{
    if (len)
        *len = n;
    if (n + 1 > cap)
        return xseg_fail(xs, XSEG_ERR_BUFFER_TOO_SMALL, "%s: %zu bytes needed, buffer has %zu",
                         who, n + 1, cap);
    return XSEG_OK;
}

xseg_status xseg_stats_prometheus(xseg_t *xs, char *buf, size_t cap, size_t *len)
{
    if (!xs)
        return xseg_fail(NULL, XSEG_ERR_INVALID_ARG, "xseg_stats_prometheus: allocator is NULL");
    if (!buf && cap)
        return xseg_fail(xs, XSEG_ERR_INVALID_ARG, "xseg_stats_prometheus: buf is NULL");
    xseg_stats st = {.size = sizeof st};
    xseg_status rc = xseg_get_stats(xs, &st);
    if (rc != XSEG_OK)
        return rc;
    xseg_tag_stats tags[XSEG_MAX_TAGS];
    size_t nt = xtags_collect(xs, tags);
    xseg_prom_source src = {&st, xseg_backend_name(xs), NULL, 0, NULL, NULL};
    psrc p = {st, &src, tags, nt};
    return finish(xs, "xseg_stats_prometheus", render(&p, 1, buf, cap), cap, len);
}

static int label_name_ok(const char *s)
{
    static const char *const reserved[] = {"device", "op", "backend", "version", "tag"};
    if (!s || !*s || (s[0] == '_' && s[1] == '_') || (s[0] >= '0' && s[0] <= '9'))
        return 0;
    for (const char *c = s; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '_'))
            return 0;
    for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++)
        if (strcmp(s, reserved[i]) == 0)
            return 0;
    return 1;
}

/* Check source i and copy its stats into p (NULL: check only). */
static xseg_status take_source(const xseg_prom_source *s, size_t i, psrc *p)
{
    const char *who = "xseg_stats_prometheus_render";
    if (!s->stats || s->stats->size < offsetof(xseg_stats, allocated_bytes))
        return xseg_fail(NULL, XSEG_ERR_INVALID_ARG, "%s: source %zu has %s", who, i,
                         s->stats ? "a stats size under 16" : "no stats");
    if (s->nlabels > XSEG_PROM_MAX_LABELS || (s->nlabels && (!s->label_names || !s->label_values)))
        return xseg_fail(NULL, XSEG_ERR_INVALID_ARG,
                         "%s: source %zu has %zu labels (at most %d, names and values given)",
                         who, i, s->nlabels, XSEG_PROM_MAX_LABELS);
    for (size_t k = 0; k < s->nlabels; k++)
        if (!label_name_ok(s->label_names[k]))
            return xseg_fail(NULL, XSEG_ERR_INVALID_ARG,
                             "%s: source %zu, label %zu: name '%s' is not [a-zA-Z_][a-zA-Z0-9_]* "
                             "or is reserved (device, op, backend, version, tag, __*)",
                             who, i, k, s->label_names[k] ? s->label_names[k] : "(null)");
    if (p) {
        size_t sz = s->stats->size < sizeof p->st ? s->stats->size : sizeof p->st;
        memset(&p->st, 0, sizeof p->st);
        memcpy(&p->st, s->stats, sz);
        p->src = s;
    }
    return XSEG_OK;
}

xseg_status xseg_stats_prometheus_render(const xseg_prom_source *src, size_t n, char *buf,
                                         size_t cap, size_t *len)
{
    return xseg_prom_render_tags(src, NULL, NULL, n, buf, cap, len);
}

xseg_status xseg_prom_render_tags(const xseg_prom_source *src, const xseg_tag_stats *const *tags,
                                  const size_t *ntags, size_t n, char *buf, size_t cap,
                                  size_t *len)
{
    if ((!src && n) || (!buf && cap) || (!tags != !ntags))
        return xseg_fail(NULL, XSEG_ERR_INVALID_ARG, "xseg_stats_prometheus_render: %s is NULL",
                         !tags != !ntags ? (tags ? "ntags" : "tags")
                         : buf || !cap   ? "src"
                                         : "buf");
    for (size_t i = 0; i < n; i++) {
        xseg_status rc = take_source(&src[i], i, NULL);
        if (rc != XSEG_OK)
            return rc;
    }
    psrc *p = n ? calloc(n, sizeof *p) : NULL;
    if (n && !p)
        return xseg_fail(NULL, XSEG_ERR_OOM,
                         "xseg_stats_prometheus_render: no host memory for %zu sources", n);
    for (size_t i = 0; i < n; i++) {
        take_source(&src[i], i, &p[i]);
        if (tags && tags[i]) {
            p[i].tags = tags[i];
            p[i].ntags = ntags[i];
        }
    }
    size_t need = render(p, n, buf, cap);
    free(p);
    return finish(NULL, "xseg_stats_prometheus_render", need, cap, len);
}
