/* trace.c: loads an xseg-trace v1 file: pulls text from a byte source into
 * a buffer sized to the input (small for small inputs, doubling while reads
 * fill it, up to 1 MiB chunks), cuts it into lines, hands each to the parser
 * and the builder, and turns any failure into an xseg_trace_error naming the
 * line. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "trace_internal.h"

#define CHUNK ((size_t)1 << 20)
#define BUF_MAX (CHUNK + XSEG_TRACE_MAX_LINE + 1)
#define BUF_MIN ((size_t)64)
#define BUF_FILE ((size_t)64 << 10)   /* first buffer for a file */

typedef struct loader {
    trace_source src;
    trace_builder b;
    const char *name;
    uint64_t line;
    int in_comment;      /* skipping the rest of an over-long comment */
    xseg_trace_error *err;
    char *buf;
    size_t cap;          /* bytes at buf */
    size_t hint;         /* input size + 1 when known, else 0 */
} loader;

const char *xseg_trace_status_name(xseg_trace_status status)
{
    switch (status) {
    case XSEG_TRACE_OK: return "ok";
    case XSEG_TRACE_ERR_IO: return "I/O error";
    case XSEG_TRACE_ERR_FORMAT: return "format error";
    case XSEG_TRACE_ERR_NOMEM: return "out of memory";
    case XSEG_TRACE_ERR_INVALID_ARG: return "invalid argument";
    }
    return "unknown status";
}

static xseg_trace_status fail(xseg_trace_error *err, xseg_trace_status status,
                              uint64_t line, const char *fmt, ...)
{
    va_list ap;
    if (!err)
        return status;
    err->status = status;
    err->line = line;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return status;
}

static xseg_trace_status line_error(loader *L, const char *s, size_t n, const char *what)
{
    char q[256];
    trace_quote_line(s, n, q, sizeof q);
    return fail(L->err, XSEG_TRACE_ERR_FORMAT, L->line, "%s:%llu: %s: \"%s\"", L->name,
                (unsigned long long)L->line, what, q);
}

static xseg_trace_status do_line(loader *L, const char *s, size_t n)
{
    char what[256];
    trace_line l;
    int rc;
    if (++L->line > XSEG_TRACE_MAX_LINES)
        return line_error(L, s, n, "too many lines");
    if (n > XSEG_TRACE_MAX_LINE && s[0] != '#') {
        snprintf(what, sizeof what, "line too long (%zu bytes, maximum %d)", n,
                 XSEG_TRACE_MAX_LINE);
        return line_error(L, s, n, what);
    }
    rc = trace_parse_line(s, n, L->line, &l, what, sizeof what);
    if (rc == TRACE_LINE_BAD)
        return line_error(L, s, n, what);
    rc = rc == TRACE_LINE_SKIP ? trace_builder_skip(&L->b, (uint32_t)L->line)
                               : trace_builder_add(&L->b, &l, (uint32_t)L->line, what,
                                                   sizeof what);
    if (rc == TRACE_BUILD_NOMEM)
        return fail(L->err, XSEG_TRACE_ERR_NOMEM, L->line, "%s:%llu: out of memory",
                    L->name, (unsigned long long)L->line);
    return rc == TRACE_BUILD_OK ? XSEG_TRACE_OK : line_error(L, s, n, what);
}

/* Process the complete lines of buf[0, have); returns the bytes consumed. */
static xseg_trace_status do_lines(loader *L, size_t have, size_t *used)
{
    const char *p = L->buf, *end = L->buf + have, *nl;
    xseg_trace_status st = XSEG_TRACE_OK;
    while (st == XSEG_TRACE_OK && (nl = memchr(p, '\n', (size_t)(end - p))) != NULL) {
        st = do_line(L, p, (size_t)(nl - p));
        p = nl + 1;
    }
    *used = (size_t)(p - L->buf);
    return st;
}

static xseg_trace_status read_error(loader *L)
{
    return fail(L->err, XSEG_TRACE_ERR_IO, 0, "%s: %s (after line %llu)", L->name,
                L->src.msg, (unsigned long long)L->line);
}

static xseg_trace_status too_long(loader *L, const char *s, size_t n)
{
    char what[96];
    L->line++;
    snprintf(what, sizeof what, "line too long (more than %d bytes)", XSEG_TRACE_MAX_LINE);
    return line_error(L, s, n, what);
}

static xseg_trace_status end_comment(loader *L)
{
    L->in_comment = 0;
    if (++L->line > XSEG_TRACE_MAX_LINES)
        return fail(L->err, XSEG_TRACE_ERR_FORMAT, L->line, "%s: too many lines", L->name);
    if (trace_builder_skip(&L->b, (uint32_t)L->line) != TRACE_BUILD_OK)
        return fail(L->err, XSEG_TRACE_ERR_NOMEM, L->line, "%s: out of memory", L->name);
    return XSEG_TRACE_OK;
}

/* Inside a comment longer than a line may be: drop text up to its newline. */
static xseg_trace_status skip_comment(loader *L, size_t *have)
{
    char *nl = memchr(L->buf, '\n', *have);
    size_t used;
    if (!nl)
        return *have = 0, XSEG_TRACE_OK;
    used = (size_t)(nl - L->buf) + 1;
    *have -= used;
    memmove(L->buf, nl + 1, *have);
    return end_comment(L);
}

/* A partial line left over: keep it, or start skipping a long comment. */
static xseg_trace_status keep_rest(loader *L, size_t used, size_t *have)
{
    *have -= used;
    if (*have > XSEG_TRACE_MAX_LINE && L->buf[used] != '#')
        return too_long(L, L->buf + used, *have);
    if (*have > XSEG_TRACE_MAX_LINE)
        return L->in_comment = 1, *have = 0, XSEG_TRACE_OK;
    memmove(L->buf, L->buf + used, *have);
    return XSEG_TRACE_OK;
}

/* Double the buffer (up to BUF_MAX) when the last read filled it.  A
 * partial line never exceeds XSEG_TRACE_MAX_LINE bytes (keep_rest), so a
 * buffer of BUF_MAX always has room left. */
static int make_room(loader *L, size_t have, int filled)
{
    size_t cap = L->cap * 2 < BUF_MAX ? L->cap * 2 : BUF_MAX;
    char *p;
    if ((!filled && have < L->cap) || cap <= L->cap)
        return 0;
    p = realloc(L->buf, cap);
    if (!p)
        return -1;
    L->buf = p;
    L->cap = cap;
    return 0;
}

static xseg_trace_status read_all(loader *L)
{
    size_t have = 0, used;
    int filled = 0;
    xseg_trace_status st;
    for (;;) {
        long got;
        if (make_room(L, have, filled) != 0)
            return fail(L->err, XSEG_TRACE_ERR_NOMEM, L->line, "%s: out of memory", L->name);
        got = L->src.read(&L->src, L->buf + have, L->cap - have);
        if (got < 0)
            return read_error(L);
        if (got == 0)
            break;
        filled = (size_t)got == L->cap - have;
        have += (size_t)got;
        if (L->in_comment && (st = skip_comment(L, &have)) != XSEG_TRACE_OK)
            return st;
        if (L->in_comment)
            continue;
        if ((st = do_lines(L, have, &used)) != XSEG_TRACE_OK ||
            (st = keep_rest(L, used, &have)) != XSEG_TRACE_OK)
            return st;
    }
    if (L->in_comment)
        return end_comment(L);
    return have > 0 ? do_line(L, L->buf, have) : XSEG_TRACE_OK;
}

/* First buffer: the whole input when it is in memory and small, else
 * BUF_FILE (a file's size is not known before it is decompressed). */
static size_t first_cap(const loader *L)
{
    size_t want = L->hint ? L->hint : BUF_FILE;
    if (want < BUF_MIN)
        return BUF_MIN;
    return want < BUF_FILE ? want : BUF_FILE;
}

static xseg_trace_status load(loader *L, xseg_trace **out)
{
    xseg_trace_status st = XSEG_TRACE_ERR_NOMEM;
    L->cap = first_cap(L);
    L->buf = malloc(L->cap);
    if (!L->buf || trace_builder_init(&L->b, L->name) != TRACE_BUILD_OK) {
        free(L->buf);
        L->src.close(&L->src);
        return fail(L->err, st, 0, "%s: out of memory", L->name);
    }
    st = read_all(L);
    L->src.close(&L->src);
    free(L->buf);
    if (st != XSEG_TRACE_OK) {
        trace_builder_discard(&L->b);
        return st;
    }
    *out = trace_builder_finish(&L->b, L->line);
    return XSEG_TRACE_OK;
}

static xseg_trace_status start(xseg_trace **out, xseg_trace_error *err, const void *arg)
{
    if (err)
        memset(err, 0, sizeof *err);
    if (!out)
        return fail(err, XSEG_TRACE_ERR_INVALID_ARG, 0, "NULL output pointer");
    *out = NULL;
    if (!arg)
        return fail(err, XSEG_TRACE_ERR_INVALID_ARG, 0, "NULL trace path or text");
    return XSEG_TRACE_OK;
}

xseg_trace_status xseg_trace_load_with(const char *path, xseg_trace_reader reader,
                                       xseg_trace **out, xseg_trace_error *err)
{
    loader L = { .name = path, .err = err };
    xseg_trace_status st = start(out, err, path);
    if (st != XSEG_TRACE_OK)
        return st;
    if (trace_source_open(&L.src, path, reader, &st) != 0)
        return fail(err, st, 0, "%s: %s", path, L.src.msg);
    return load(&L, out);
}

xseg_trace_status xseg_trace_load(const char *path, xseg_trace **out, xseg_trace_error *err)
{
    return xseg_trace_load_with(path, XSEG_TRACE_READ_AUTO, out, err);
}

xseg_trace_status xseg_trace_parse(const char *text, size_t len, const char *name,
                                   xseg_trace **out, xseg_trace_error *err)
{
    loader L = { .name = name ? name : "(memory)", .err = err,
                 .hint = len < BUF_FILE ? len + 1 : BUF_FILE };
    xseg_trace_status st = start(out, err, text ? (const void *)text : (len ? NULL : ""));
    if (st != XSEG_TRACE_OK)
        return st;
    trace_source_memory(&L.src, text, len);
    return load(&L, out);
}

void xseg_trace_free(xseg_trace *t)
{
    if (!t)
        return;
    free(t->name);
    free(t->events);
    free(t->ids);
    free(t->streams);
    free(t->skipped_lines);
    free(t);
}

uint64_t xseg_trace_line_of(const xseg_trace *t, size_t index)
{
    uint64_t line;
    if (!t || index >= t->nevents)
        return 0;
    line = (uint64_t)index + 1;
    for (size_t k = 0; k < t->nskipped && t->skipped_lines[k] <= line; k++)
        line++;
    return line;
}

uint64_t xseg_trace_stream_of(const xseg_trace *t, const xseg_trace_event *e)
{
    return t && e && e->stream < t->nstreams ? t->streams[e->stream] : 0;
}
