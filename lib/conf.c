/* conf.c: the configuration: defaults and the "key:value,..." parser of
 * XSEG_CONF / xseg_create(), driven by the list of keys (XSEG_CONF_KEYS in
 * conf.h: name, type, default, range) with one small parse function per
 * value type.  Keys are documented in docs/config.md. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "conf.h"

/* Most characters of a value quoted back in an error message. */
#define SHOW_MAX 200

typedef struct conf_key conf_key;

/* Parses v[0..n) into *field; returns NULL or a short reason for failure. */
typedef const char *(*conf_parse_fn)(const char *v, size_t n, void *field,
                                     const conf_key *k);

struct conf_key {
    const char *name;
    conf_parse_fn parse;
    size_t offset;      /* of the field in struct xseg_conf */
    size_t min, max;    /* range, for the types that use one */
    const char *expect; /* what is accepted, for the error message */
};

/* ---- lexical helpers ---------------------------------------------------- */

static int is_space(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' ||
           ch == '\f';
}

static int is_digit(char ch)
{
    return ch >= '0' && ch <= '9';
}

static char lower(char ch)
{
    return (ch >= 'A' && ch <= 'Z') ? (char)(ch - 'A' + 'a') : ch;
}

static void trim(const char **s, size_t *n)
{
    while (*n > 0 && is_space(**s)) {
        (*s)++;
        (*n)--;
    }
    while (*n > 0 && is_space((*s)[*n - 1]))
        (*n)--;
}

/* Case-insensitive comparison of v[0..n) with the whole of word. */
static int word_is(const char *v, size_t n, const char *word)
{
    size_t i;
    if (strlen(word) != n)
        return 0;
    for (i = 0; i < n; i++)
        if (lower(v[i]) != word[i])
            return 0;
    return 1;
}

static int is_pow2(size_t x)
{
    return x != 0 && (x & (x - 1)) == 0;
}

/* ---- number scanners ---------------------------------------------------- */

/* Decimal digits at v[*i..n) into *out; NULL or a reason. */
static const char *scan_digits(const char *v, size_t n, size_t *i, size_t *out)
{
    size_t x = 0, start = *i;
    for (; *i < n && is_digit(v[*i]); (*i)++) {
        size_t d = (size_t)(v[*i] - '0');
        if (x > (SIZE_MAX - d) / 10)
            return "too large";
        x = x * 10 + d;
    }
    if (*i == start)
        return "not a number";
    *out = x;
    return NULL;
}

/* Shift of a binary unit ("", B, K, KB, KiB, ... TiB), or -1. */
static int unit_shift(const char *u, size_t n)
{
    static const struct { const char *name; int shift; } units[] = {
        {"", 0},   {"b", 0},   {"k", 10},  {"kb", 10}, {"kib", 10},
        {"m", 20}, {"mb", 20}, {"mib", 20}, {"g", 30}, {"gb", 30},
        {"gib", 30}, {"t", 40}, {"tb", 40}, {"tib", 40},
    };
    size_t i;
    for (i = 0; i < sizeof units / sizeof units[0]; i++)
        if (word_is(u, n, units[i].name))
            return units[i].shift;
    return -1;
}

/* A size: digits, optional spaces, optional unit.  NULL or a reason. */
static const char *scan_size(const char *v, size_t n, size_t *out)
{
    size_t i = 0, x, digits_end;
    const char *why = scan_digits(v, n, &i, &x);
    int shift;
    if (why)
        return why;
    digits_end = i;
    while (i < n && is_space(v[i]))
        i++;
    if (i > digits_end && i == n)
        return "trailing space";
    shift = unit_shift(v + i, n - i);
    if (shift < 0)
        return "unknown unit";
    if (x > (SIZE_MAX >> shift))
        return "too large";
    *out = x << shift;
    return NULL;
}

/* An unsigned integer without unit. */
static const char *scan_uint(const char *v, size_t n, size_t *out)
{
    size_t i = 0;
    const char *why = scan_digits(v, n, &i, out);
    if (why)
        return why;
    return i == n ? NULL : "not an integer";
}

/* A non-negative decimal real "12", "0.8", ".5" (no sign, no exponent),
 * parsed without the locale: at most 18 digits. */
static const char *scan_real(const char *v, size_t n, double *out)
{
    uint64_t m = 0;
    double scale = 1.0;
    size_t i, digits = 0;
    int dot = 0;
    for (i = 0; i < n; i++) {
        if (v[i] == '.' && !dot) {
            dot = 1;
            continue;
        }
        if (!is_digit(v[i]))
            return "not a number";
        if (++digits > 18)
            return "too many digits";
        m = m * 10 + (uint64_t)(v[i] - '0');
        if (dot)
            scale *= 10.0;
    }
    if (digits == 0)
        return "not a number";
    *out = (double)m / scale;
    return NULL;
}

/* ---- one parse function per value type ---------------------------------- */

static const char *parse_backend(const char *v, size_t n, void *f, const conf_key *k)
{
    (void)k;
    if (word_is(v, n, "auto"))
        *(xseg_backend_kind *)f = XSEG_BACKEND_AUTO;
    else if (word_is(v, n, "cuda"))
        *(xseg_backend_kind *)f = XSEG_BACKEND_CUDA;
    else if (word_is(v, n, "host"))
        *(xseg_backend_kind *)f = XSEG_BACKEND_HOST;
    else
        return "unknown backend";
    return NULL;
}

/* "auto" / 0, or a power of two >= k->min (page_size, handle_size). */
static const char *parse_pow2_auto(const char *v, size_t n, void *f, const conf_key *k)
{
    size_t s = 0;
    const char *why = word_is(v, n, "auto") ? NULL : scan_size(v, n, &s);
    if (why)
        return why;
    if (s != 0 && s < k->min)
        return "too small";
    if (s != 0 && !is_pow2(s))
        return "not a power of two";
    *(size_t *)f = s;
    return NULL;
}

/* "page" (one handle per page), or as parse_pow2_auto (handle_size). */
static const char *parse_handle(const char *v, size_t n, void *f, const conf_key *k)
{
    if (!word_is(v, n, "page"))
        return parse_pow2_auto(v, n, f, k);
    *(size_t *)f = XSEG_HANDLE_PAGE;
    return NULL;
}

/* "auto" / 0, or any size (va_size). */
static const char *parse_size_auto(const char *v, size_t n, void *f, const conf_key *k)
{
    size_t s = 0;
    const char *why = word_is(v, n, "auto") ? NULL : scan_size(v, n, &s);
    (void)k;
    if (why)
        return why;
    *(size_t *)f = s;
    return NULL;
}

/* "none" / "unlimited" / 0 (no cap, stored as 0), or a size (max_mapped). */
static const char *parse_cap(const char *v, size_t n, void *f, const conf_key *k)
{
    size_t s = 0;
    const char *why = NULL;
    (void)k;
    if (!word_is(v, n, "none") && !word_is(v, n, "unlimited"))
        why = scan_size(v, n, &s);
    if (why)
        return why;
    *(size_t *)f = s;
    return NULL;
}

/* A real in [0, 1] (memory_fraction; 0 = no cap). */
static const char *parse_fraction(const char *v, size_t n, void *f, const conf_key *k)
{
    double x;
    const char *why = scan_real(v, n, &x);
    (void)k;
    if (why)
        return why;
    if (x > 1.0)
        return "out of range";
    *(double *)f = x;
    return NULL;
}

/* A real in [0, 1) (gc_threshold; 0 = off). */
static const char *parse_threshold(const char *v, size_t n, void *f, const conf_key *k)
{
    double x;
    const char *why = scan_real(v, n, &x);
    (void)k;
    if (why)
        return why;
    if (x >= 1.0)
        return "out of range";
    *(double *)f = x;
    return NULL;
}

/* "auto", "unlimited" / "none", or a size; a literal 0 becomes 1 byte
 * (release every cached byte) since 0 is XSEG_SIZE_AUTO. */
static const char *parse_release(const char *v, size_t n, void *f, const conf_key *k)
{
    size_t s;
    const char *why;
    (void)k;
    if (word_is(v, n, "auto")) {
        *(size_t *)f = XSEG_SIZE_AUTO;
        return NULL;
    }
    if (word_is(v, n, "unlimited") || word_is(v, n, "none")) {
        *(size_t *)f = XSEG_SIZE_UNLIMITED;
        return NULL;
    }
    if ((why = scan_size(v, n, &s)) != NULL)
        return why;
    *(size_t *)f = s == 0 ? 1 : s;
    return NULL;
}

/* "unlimited" / "none", or a size >= k->min (max_split_size). */
static const char *parse_split(const char *v, size_t n, void *f, const conf_key *k)
{
    size_t s = XSEG_SIZE_UNLIMITED;
    const char *why = NULL;
    if (!word_is(v, n, "unlimited") && !word_is(v, n, "none"))
        why = scan_size(v, n, &s);
    if (why)
        return why;
    if (s < k->min)
        return "too small";
    *(size_t *)f = s;
    return NULL;
}

/* A size in [k->min, k->max] (host_capacity, small_size). */
static const char *parse_size_range(const char *v, size_t n, void *f, const conf_key *k)
{
    size_t s;
    const char *why = scan_size(v, n, &s);
    if (why)
        return why;
    if (s < k->min)
        return "too small";
    if (s > k->max)
        return "too large";
    *(size_t *)f = s;
    return NULL;
}

/* An integer in [k->min, k->max] (alloc_retries, history). */
static const char *parse_count(const char *v, size_t n, void *f, const conf_key *k)
{
    size_t x;
    const char *why = scan_uint(v, n, &x);
    if (why)
        return why;
    if (x < k->min || x > k->max)
        return "out of range";
    *(unsigned *)f = (unsigned)x;
    return NULL;
}

/* 0, or a power of two up to k->max (roundup_power2_divisions). */
static const char *parse_divisions(const char *v, size_t n, void *f, const conf_key *k)
{
    size_t x;
    const char *why = scan_uint(v, n, &x);
    if (why)
        return why;
    if (x > k->max)
        return "out of range";
    if (x != 0 && !is_pow2(x))
        return "not a power of two";
    *(unsigned *)f = (unsigned)x;
    return NULL;
}

/* on|off|true|false|1|0, case-insensitive. */
static const char *parse_bool(const char *v, size_t n, void *f, const conf_key *k)
{
    (void)k;
    if (word_is(v, n, "on") || word_is(v, n, "true") || word_is(v, n, "1"))
        *(int *)f = 1;
    else if (word_is(v, n, "off") || word_is(v, n, "false") || word_is(v, n, "0"))
        *(int *)f = 0;
    else
        return "not a boolean";
    return NULL;
}

static const char *parse_placement(const char *v, size_t n, void *f, const conf_key *k)
{
    (void)k;
    if (word_is(v, n, "start"))
        *(int *)f = XSEG_PLACE_START;
    else if (word_is(v, n, "pages"))
        *(int *)f = XSEG_PLACE_PAGES;
    else
        return "unknown placement";
    return NULL;
}

/* off|h200, case-insensitive (host_driver_latency). */
static const char *parse_latency(const char *v, size_t n, void *f, const conf_key *k)
{
    (void)k;
    if (word_is(v, n, "off"))
        *(int *)f = XSEG_LATENCY_OFF;
    else if (word_is(v, n, "h200"))
        *(int *)f = XSEG_LATENCY_H200;
    else
        return "unknown latency model";
    return NULL;
}

/* auto|off, or a size (premap; 0 is off too). */
static const char *parse_premap(const char *v, size_t n, void *f, const conf_key *k)
{
    size_t s;
    const char *why;
    (void)k;
    if (word_is(v, n, "auto")) {
        *(size_t *)f = XSEG_SIZE_AUTO;
        return NULL;
    }
    if (word_is(v, n, "off") || word_is(v, n, "none")) {
        *(size_t *)f = XSEG_PREMAP_OFF;
        return NULL;
    }
    if ((why = scan_size(v, n, &s)) != NULL)
        return why;
    *(size_t *)f = s <= XSEG_PREMAP_OFF ? XSEG_PREMAP_OFF : s;
    return NULL;
}

/* auto|sync|worker, case-insensitive (reclaim). */
static const char *parse_reclaim(const char *v, size_t n, void *f, const conf_key *k)
{
    (void)k;
    if (word_is(v, n, "auto"))
        *(int *)f = XSEG_RECLAIM_AUTO;
    else if (word_is(v, n, "sync"))
        *(int *)f = XSEG_RECLAIM_SYNC;
    else if (word_is(v, n, "worker"))
        *(int *)f = XSEG_RECLAIM_WORKER;
    else
        return "unknown reclaim mode";
    return NULL;
}

/* off|fd|fabric|auto, case-insensitive (shareable). */
static const char *parse_shareable(const char *v, size_t n, void *f, const conf_key *k)
{
    static const char *const words[] = {"off", "fd", "fabric", "auto"};
    (void)k;
    for (int i = 0; i < 4; i++)
        if (word_is(v, n, words[i])) {
            *(int *)f = i; /* XSEG_SHARE_OFF .. XSEG_SHARE_AUTO */
            return NULL;
        }
    return "unknown handle type";
}

/* none|all, or device numbers 0..62 joined by '+' (peer_access). */
static const char *parse_peers(const char *v, size_t n, void *f, const conf_key *k)
{
    uint64_t mask = 0;
    (void)k;
    if (word_is(v, n, "none") || word_is(v, n, "off")) {
        *(uint64_t *)f = 0;
        return NULL;
    }
    if (word_is(v, n, "all")) {
        *(uint64_t *)f = XSEG_PEERS_ALL;
        return NULL;
    }
    for (size_t i = 0; i < n;) {
        size_t d = 0, start = i;
        const char *why = scan_digits(v, n, &i, &d);
        if (why)
            return why;
        if (i == start || d > 62)
            return "a device number is from 0 to 62";
        mask |= (uint64_t)1 << d;
        if (i < n && v[i] != '+')
            return "devices are joined by +";
        if (i < n && ++i == n)
            return "a device number is missing after +";
    }
    *(uint64_t *)f = mask;
    return NULL;
}

/* ---- the table of keys -------------------------------------------------- */

#define KEY(key, type, def, parse, min, max, expect) \
    {#key, parse_##parse, offsetof(xseg_conf, key), min, max, expect},
static const conf_key conf_keys[] = {XSEG_CONF_KEYS(KEY)};

#define CONF_NKEYS (sizeof conf_keys / sizeof conf_keys[0])

static const conf_key *find_key(const char *name, size_t n)
{
    size_t i;
    for (i = 0; i < CONF_NKEYS; i++)
        if (strlen(conf_keys[i].name) == n && memcmp(conf_keys[i].name, name, n) == 0)
            return &conf_keys[i];
    return NULL;
}

/* ---- error messages ----------------------------------------------------- */

/* Append to err at *pos, never past errlen; always NUL-terminated. */
static void err_add(char *err, size_t errlen, size_t *pos, const char *fmt, ...)
{
    va_list ap;
    int w;
    if (!err || errlen == 0 || *pos >= errlen - 1)
        return;
    va_start(ap, fmt);
    w = vsnprintf(err + *pos, errlen - *pos, fmt, ap);
    va_end(ap);
    if (w > 0)
        *pos = (*pos + (size_t)w < errlen) ? *pos + (size_t)w : errlen - 1;
}

static int show(size_t n)
{
    return (int)(n > SHOW_MAX ? SHOW_MAX : n);
}

static xseg_status bad_value(char *err, size_t errlen, const conf_key *k,
                             const char *v, size_t n, const char *why)
{
    size_t pos = 0;
    err_add(err, errlen, &pos,
            "xseg conf: bad value \"%.*s\" for key \"%s\": expected %s (%s)",
            show(n), v, k->name, k->expect, why);
    return XSEG_ERR_CONFIG;
}

static xseg_status unknown_key(char *err, size_t errlen, const char *key,
                               size_t kn, const char *v, size_t vn)
{
    size_t pos = 0, i;
    err_add(err, errlen, &pos,
            "xseg conf: unknown key \"%.*s\" (value \"%.*s\"): valid keys are ",
            show(kn), key, show(vn), v);
    for (i = 0; i < CONF_NKEYS; i++)
        err_add(err, errlen, &pos, "%s%s", i ? ", " : "", conf_keys[i].name);
    return XSEG_ERR_CONFIG;
}

static xseg_status bad_item(char *err, size_t errlen, const char *what,
                            const char *item, size_t n)
{
    size_t pos = 0;
    err_add(err, errlen, &pos,
            "xseg conf: %s in \"%.*s\": expected key:value, such as max_mapped:40GB",
            what, show(n), item);
    return XSEG_ERR_CONFIG;
}

/* ---- the parser --------------------------------------------------------- */

/* One "key:value" item (may be empty or blank: ignored). */
static xseg_status parse_item(xseg_conf *c, const char *item, size_t n,
                              char *err, size_t errlen)
{
    const char *colon, *v;
    const conf_key *k;
    size_t kn, vn;
    const char *why;
    trim(&item, &n);
    if (n == 0)
        return XSEG_OK;
    colon = memchr(item, ':', n);
    if (!colon)
        return bad_item(err, errlen, "missing ':' after key", item, n);
    kn = (size_t)(colon - item);
    v = colon + 1;
    vn = n - kn - 1;
    trim(&item, &kn);
    trim(&v, &vn);
    if (kn == 0)
        return bad_item(err, errlen, "empty key", item, n);
    if (!(k = find_key(item, kn)))
        return unknown_key(err, errlen, item, kn, v, vn);
    if (vn == 0)
        return bad_value(err, errlen, k, v, vn, "empty");
    why = k->parse(v, vn, (char *)c + k->offset, k);
    return why ? bad_value(err, errlen, k, v, vn, why) : XSEG_OK;
}

/* Checks that involve two keys, on the merged result. */
static xseg_status check_conf(const xseg_conf *c, char *err, size_t errlen)
{
    size_t pos = 0;
    if (c->page_size == 0 || c->handle_size == 0 || c->handle_size == XSEG_HANDLE_PAGE ||
        c->handle_size >= c->page_size)
        return XSEG_OK;
    err_add(err, errlen, &pos,
            "xseg conf: bad value \"%zu\" for key \"handle_size\": expected auto, "
            "page or a power-of-two multiple of page_size (%zu)",
            c->handle_size, c->page_size);
    return XSEG_ERR_CONFIG;
}

#define DEFAULT(key, type, def, ...) c->key = def;

void xseg_conf_defaults(xseg_conf *c)
{
    if (!c)
        return;
    memset(c, 0, sizeof *c);
    XSEG_CONF_KEYS(DEFAULT)
}

xseg_status xseg_conf_parse(xseg_conf *c, const char *text, char *err, size_t errlen)
{
    xseg_conf tmp;
    xseg_status st;
    size_t pos = 0, n;
    if (err && errlen)
        err[0] = '\0';
    if (!c) {
        err_add(err, errlen, &pos, "xseg conf: NULL configuration");
        return XSEG_ERR_INVALID_ARG;
    }
    if (!text)
        return XSEG_OK;
    tmp = *c;
    for (;;) {
        n = strcspn(text, ",");
        if ((st = parse_item(&tmp, text, n, err, errlen)) != XSEG_OK)
            return st;
        if (text[n] == '\0')
            break;
        text += n + 1;
    }
    if ((st = check_conf(&tmp, err, errlen)) != XSEG_OK)
        return st;
    *c = tmp;
    return XSEG_OK;
}

xseg_status xseg_conf_cap(const xseg_conf *c, size_t dev_total, size_t *cap, char *err,
                          size_t errlen)
{
    size_t pos = 0, f;
    *cap = c->max_mapped ? c->max_mapped : SIZE_MAX;
    if (c->memory_fraction <= 0)
        return XSEG_OK;
    f = (size_t)(c->memory_fraction * (double)dev_total);
    if (f == 0) {
        err_add(err, errlen, &pos,
                "xseg conf: bad value \"%g\" for key \"memory_fraction\": the cap it gives "
                "on a device of %zu bytes is 0 bytes; expected 0 (no cap) or a fraction "
                "giving at least 1 byte", c->memory_fraction, dev_total);
        return XSEG_ERR_CONFIG;
    }
    if (f < *cap)
        *cap = f;
    return XSEG_OK;
}

int xseg_parse_size(const char *text, size_t len, size_t *out)
{
    size_t s;
    if (!text || !out || scan_size(text, len, &s) != NULL)
        return -1;
    *out = s;
    return 0;
}
