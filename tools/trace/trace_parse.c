/* trace_parse.c: parses one line of an xseg-trace v1 file by hand (no
 * sscanf): splits the fields, checks the op and field count, converts the
 * numbers with overflow checks, and says precisely what is wrong. */
#include <stdio.h>
#include <string.h>
#include "trace_internal.h"

#define MAX_FIELDS 5

typedef struct span {
    const char *p;
    size_t n;
} span;

static const char *const alloc_fields[] = { "op", "id", "bytes", "stream" };

void trace_quote_line(const char *s, size_t n, char *out, size_t len)
{
    size_t o = 0, limit = n > 96 ? 96 : n;
    for (size_t i = 0; i < limit && o + 5 < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            o += (size_t)snprintf(out + o, len - o, "\\%c", c);
        else if (c < 0x20 || c >= 0x7f)
            o += (size_t)snprintf(out + o, len - o, "\\x%02x", c);
        else
            out[o++] = (char)c;
    }
    if (limit < n && o + 4 < len)
        o += (size_t)snprintf(out + o, len - o, "...");
    out[o < len ? o : len - 1] = '\0';
}

static int bad_number(span f, const char *field, const char *fmt, char *msg, size_t len)
{
    char q[64];
    trace_quote_line(f.p, f.n, q, sizeof q);
    snprintf(msg, len, fmt, field, q);
    return -1;
}

static int parse_u64(span f, const char *field, uint64_t max, uint64_t *out,
                     char *msg, size_t len)
{
    uint64_t v = 0;
    if (f.n == 0)
        return snprintf(msg, len, "empty %s field", field), -1;
    if (f.p[0] == '-')
        return bad_number(f, field, "negative %s '%s'", msg, len);
    for (size_t i = 0; i < f.n; i++) {
        unsigned d = (unsigned)(unsigned char)f.p[i] - '0';
        if (d > 9)
            return bad_number(f, field, "non-numeric %s '%s'", msg, len);
        if (v > (UINT64_MAX - d) / 10)
            return bad_number(f, field, "%s '%s' overflows 64 bits", msg, len);
        v = v * 10 + d;
    }
    if (v > max)
        return snprintf(msg, len, "%s %llu is too large (maximum %llu)", field,
                        (unsigned long long)v, (unsigned long long)max), -1;
    *out = v;
    return 0;
}

static size_t split_fields(const char *s, size_t n, span *f)
{
    size_t nf = 0, start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && s[i] != ',')
            continue;
        if (nf < MAX_FIELDS)
            f[nf] = (span){ s + start, i - start };
        nf++;
        start = i + 1;
    }
    return nf;
}

static int check_op(span op, char *msg, size_t len)
{
    char q[64];
    if (op.n == 1 && (op.p[0] == 'a' || op.p[0] == 'f'))
        return op.p[0] == 'a' ? XSEG_TRACE_ALLOC : XSEG_TRACE_FREE;
    trace_quote_line(op.p, op.n, q, sizeof q);
    snprintf(msg, len, "unknown op '%s' (expected 'a', 'f' or '#')", q);
    return -1;
}

static int check_count(int op, size_t nf, char *msg, size_t len)
{
    size_t want = op == XSEG_TRACE_ALLOC ? 4 : 2;
    const char *form = op == XSEG_TRACE_ALLOC ? "a,<id>,<bytes>,<stream>" : "f,<id>";
    if (nf < want)
        return snprintf(msg, len, "missing %s field (expected %s)",
                        alloc_fields[nf], form), -1;
    if (nf > want)
        return snprintf(msg, len, "too many fields: %zu (expected %s)", nf, form), -1;
    return 0;
}

static int parse_event(const char *s, size_t n, trace_line *out, char *msg, size_t len)
{
    span f[MAX_FIELDS];
    size_t nf = split_fields(s, n, f);
    int op = check_op(f[0], msg, len);
    if (op < 0 || check_count(op, nf, msg, len) != 0)
        return TRACE_LINE_BAD;
    out->op = op;
    if (parse_u64(f[1], "id", XSEG_TRACE_MAX_ID, &out->id, msg, len) != 0)
        return TRACE_LINE_BAD;
    if (op == XSEG_TRACE_FREE)
        return TRACE_LINE_EVENT;
    if (parse_u64(f[2], "bytes", XSEG_TRACE_MAX_BYTES, &out->bytes, msg, len) != 0 ||
        parse_u64(f[3], "stream", XSEG_TRACE_MAX_ID, &out->stream, msg, len) != 0)
        return TRACE_LINE_BAD;
    if (out->bytes == 0)
        return snprintf(msg, len, "zero bytes requested"), TRACE_LINE_BAD;
    return TRACE_LINE_EVENT;
}

/* "# xseg-trace vN" on line 1: only version 1 is understood. */
static int check_header(const char *s, size_t n, char *msg, size_t len)
{
    static const char tag[] = "# xseg-trace v";
    size_t t = sizeof tag - 1;
    if (n < t || memcmp(s, tag, t) != 0)
        return 0;
    if (n > t && s[t] == '1' && (n == t + 1 || s[t + 1] < '0' || s[t + 1] > '9'))
        return 0;
    snprintf(msg, len, "unsupported trace format version (this reader knows xseg-trace v1)");
    return -1;
}

int trace_parse_line(const char *s, size_t n, uint64_t lineno, trace_line *out,
                     char *msg, size_t len)
{
    const char *nul;
    if (n > 0 && s[n - 1] == '\r')
        n--;
    nul = memchr(s, '\0', n);
    if (nul)
        return snprintf(msg, len, "embedded NUL byte at column %zu",
                        (size_t)(nul - s) + 1), TRACE_LINE_BAD;
    if (n == 0)
        return TRACE_LINE_SKIP;
    if (s[0] == '#')
        return lineno == 1 && check_header(s, n, msg, len) != 0 ? TRACE_LINE_BAD
                                                                 : TRACE_LINE_SKIP;
    return parse_event(s, n, out, msg, len);
}
