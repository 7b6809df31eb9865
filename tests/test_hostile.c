/* test_hostile.c: hostile callers.  Thousands of generated config strings
 * through xseg_create; random frees of live, interior, freed, foreign and
 * other allocators' pointers checked against a model; sizes at the limits
 * of the virtual range; exact-size output buffers (an overflow trips the
 * sanitizers); NULLs and bogus values on every entry point.  Each never
 * crashes, reports a clear status and message, and leaves the allocator's
 * state and data as they were (with checking on, xseg_check after every
 * operation: tools/ci/debug).  Prints how many bad inputs were tried.
 * (Malformed trace files for xseg-replay: test_hostile_trace.c.) */
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "support_common.h"

#define KiB ((size_t)1 << 10)

/* ---- a small deterministic PRNG (xorshift64*) ---- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

static size_t below(size_t n)
{
    return n ? (size_t)(rnd() % n) : 0;
}

static long env_long(const char *name, long dflt)
{
    const char *s = getenv(name);
    return s && *s ? atol(s) : dflt;
}

/* ---- generated configuration strings ---- */

static const char *const keys[] = {
    "backend", "page_size", "handle_size", "va_size", "max_mapped", "memory_fraction",
    "gc_threshold", "release_threshold", "alloc_retries", "max_split_size",
    "roundup_power2_divisions", "caching", "host_capacity", "small_size", "verbose",
    "stats_shm", "history", "Verbose", "expandable_segments", "page-size", "", "x",
    "max_mapped ", " va_size", "backend\t", "caching:", "historyy"};
static const char *const words[] = {
    "auto", "none", "unlimited", "on", "off", "true", "false", "1", "0", "cuda", "host",
    "HOST", "Auto", "ON", "yes", "", " ", "-1", "+1", "0x10", "1e3", "1.5", ".5", "0.",
    "0.8", "1.0", "1.000000000000000001", "0.9999999999999999999", "nan", "inf", "-0",
    "99999999999999999999", "18446744073709551615", "18446744073709551616", "16777216TB",
    "17179869183GB", "4KB", "2MB", "2 MB", "2MB ", "64KB", "1MB", "512", "511", "4MB", "8MB",
    "1GB", "2GB", "64GB", "1TB", "12PB", "12MBx", "3KiB", "3kib", "7T", "2mib", "16"};
static const char *const units[] = {"", "B", "K", "KB", "KiB", "M", "MB", "MiB", "G", "GB",
                                    "GiB", "T", "TB", "TiB", "PB", "b", "kb", "x", " MB"};

static void append(char *buf, size_t cap, size_t *pos, const char *s)
{
    size_t n = strlen(s);
    if (*pos + n >= cap)
        n = cap - 1 - *pos;
    memcpy(buf + *pos, s, n);
    *pos += n;
    buf[*pos] = '\0';
}

/* Bytes 1..255, so no early NUL: separators, spaces and high bytes too. */
static void junk(char *buf, size_t cap, size_t *pos)
{
    size_t n = 1 + below(24);
    for (size_t i = 0; i < n && *pos + 1 < cap; i++)
        buf[(*pos)++] = (char)(1 + below(255));
    buf[*pos] = '\0';
}

static void value(char *buf, size_t cap, size_t *pos)
{
    char num[64];
    switch (below(4)) {
    case 0:
        append(buf, cap, pos, words[below(sizeof words / sizeof words[0])]);
        break;
    case 1: /* a number with a unit, small enough to be usable mostly */
        snprintf(num, sizeof num, "%llu", (unsigned long long)(rnd() >> (40 + below(24))));
        append(buf, cap, pos, num);
        append(buf, cap, pos, units[below(sizeof units / sizeof units[0])]);
        break;
    case 2:
        snprintf(num, sizeof num, "0.%llu", (unsigned long long)below(1000000));
        append(buf, cap, pos, num);
        break;
    default:
        junk(buf, cap, pos);
    }
}

/* A plausible value for valid key k (keys[0..16]): most such confs work. */
static const char *good_value(size_t k)
{
    static const char *const sizes[] = {"auto", "0", "2MB", "4MB", "8MB", "64MB", "1GB",
                                        "none", "unlimited", "512KB", "16GB", "3GB"};
    static const char *const reals[] = {"0", "0.5", "0.8", "0.99", "1", ".25"};
    static const char *const counts[] = {"0", "1", "2", "3", "4", "8", "16", "64", "100"};
    static const char *const bools[] = {"on", "off", "true", "false", "1", "0"};
    static const char *const backends[] = {"host", "auto", "HOST"};
    switch (k) {
    case 0: return backends[below(3)];
    case 5: case 6: return reals[below(6)];
    case 8: case 10: case 16: return counts[below(9)];
    case 11: case 14: case 15: return bools[below(6)];
    default: return sizes[below(12)];
    }
}

/* "item,item,..." of 0..6 items: key:value, odd separators, junk. */
static void gen_conf(char *buf, size_t cap)
{
    size_t pos = 0, items = below(7);
    buf[0] = '\0';
    if (below(4))
        append(buf, cap, &pos, "backend:host,");
    for (size_t i = 0; i < items; i++) {
        if (i)
            append(buf, cap, &pos, below(8) ? "," : (below(2) ? ",," : " , "));
        if (below(12) == 0) {
            junk(buf, cap, &pos);
            continue;
        }
        if (below(2)) { /* plausible */
            size_t k = below(17);
            append(buf, cap, &pos, keys[k]);
            append(buf, cap, &pos, ":");
            append(buf, cap, &pos, good_value(k));
            continue;
        }
        append(buf, cap, &pos, keys[below(sizeof keys / sizeof keys[0])]);
        append(buf, cap, &pos, below(10) ? ":" : (below(2) ? "::" : " : "));
        value(buf, cap, &pos);
    }
}

static int create_status_ok(xseg_status st)
{
    return st == XSEG_OK || st == XSEG_ERR_CONFIG || st == XSEG_ERR_NO_BACKEND ||
           st == XSEG_ERR_NO_DEVICE || st == XSEG_ERR_VA_EXHAUSTED || st == XSEG_ERR_OOM ||
           st == XSEG_ERR_DRIVER;
}

/* A conf that created an allocator must give a working one. */
static void exercise(xseg_t *xs, const char *conf)
{
    void *p = NULL, *q = NULL;
    xseg_status st = xseg_alloc(xs, 1000, NULL, &p);
    /* A one-page va_size leaves no room: XSEG_ERR_SIZE (docs/reliability.md). */
    int tiny = xs->arena.size <= xs->arena.page;
    ck_assert_msg(st == XSEG_OK || st == XSEG_ERR_OOM || st == XSEG_ERR_VA_EXHAUSTED ||
                  (tiny && st == XSEG_ERR_SIZE), "conf \"%s\": alloc: %s", conf,
                  xseg_last_error());
    T_CHECK(xs);
    if (xseg_alloc(xs, 3 * MiB, (void *)1, &q) == XSEG_OK) {
        T_CHECK(xs);
        ck_assert_int_eq(xseg_free(xs, q), XSEG_OK);
    }
    T_CHECK(xs);
    if (p)
        ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    T_CHECK(xs);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK);
    T_CHECK(xs);
}

START_TEST(generated_confs)
{
    long n = env_long("XSEG_HOSTILE_CONFS", 5000), ok = 0, rejected = 0;
    char conf[256];
    for (long i = 0; i < n; i++) {
        gen_conf(conf, sizeof conf);
        xseg_t *xs = (xseg_t *)1;
        xseg_status st = xseg_create(&xs, 0, conf);
        ck_assert_msg(create_status_ok(st), "conf \"%s\": status %d", conf, st);
        if (st != XSEG_OK) {
            size_t len = strlen(xseg_last_error());
            ck_assert_msg(len > 0 && len < 768, "conf \"%s\": no message", conf);
            ck_assert_ptr_null(xs);
            rejected++;
        } else {
            exercise(xs, conf);
            ck_assert_int_eq(xseg_destroy(xs), XSEG_OK);
            ok++;
        }
        /* The same text through the other entry point: the same verdict. */
        if (xseg_set_default_conf(conf) != XSEG_OK)
            ck_assert_msg(st == XSEG_ERR_CONFIG, "conf \"%s\" rejected by "
                          "xseg_set_default_conf but not by xseg_create", conf);
    }
    printf("hostile: %ld generated config strings: %ld created an allocator, %ld rejected "
           "with a message\n", n, ok, rejected);
}
END_TEST

/* ---- pointers: random frees checked against a model ---- */

#define LIVE_MAX 96
#define FREED_MAX 64

typedef struct model {
    xseg_t *xs, *other;
    void *live[LIVE_MAX];
    size_t rounded[LIVE_MAX], size[LIVE_MAX];
    void *freed[FREED_MAX];
    size_t nfreed;
    void *foreign;        /* a live block of the other allocator */
    long tried;
} model;

static size_t random_size(void)
{
    switch (below(4)) {
    case 0: return 1 + below(600);
    case 1: return 512 + below(64 * KiB);
    case 2: return 64 * KiB + below(2 * MiB);
    default: return 2 * MiB + below(6 * MiB);
    }
}

static void m_alloc(model *m, int i)
{
    size_t r = 0;
    m->size[i] = random_size();
    ck_assert_int_eq(xseg_alloc(m->xs, m->size[i], NULL, &m->live[i]), XSEG_OK);
    ck_assert_int_eq(xseg_block_size(m->xs, m->live[i], &r, NULL), XSEG_OK);
    ck_assert_uint_ge(r, m->size[i]);
    m->rounded[i] = r;
    t_fill(m->live[i], m->size[i], (uint32_t)i + 1);
}

static void m_free(model *m, int i)
{
    ck_assert(t_check(m->live[i], m->size[i], (uint32_t)i + 1));
    ck_assert_int_eq(xseg_free(m->xs, m->live[i]), XSEG_OK);
    m->freed[m->nfreed++ % FREED_MAX] = m->live[i];
    m->live[i] = NULL;
}

/* What the allocator must say about p, or XSEG_OK when p is a live start. */
static xseg_status expected(const model *m, uintptr_t p)
{
    for (int i = 0; i < LIVE_MAX; i++) {
        uintptr_t a = (uintptr_t)m->live[i];
        if (a && p == a)
            return XSEG_OK;
        if (a && p > a && p < a + m->rounded[i])
            return XSEG_ERR_INTERIOR_POINTER;
    }
    const xarena *ar = &m->xs->arena;
    if (p < ar->base || p >= ar->base + ar->size)
        return XSEG_ERR_INVALID_POINTER;
    return XSEG_ERR_DOUBLE_FREE;
}

static uintptr_t hostile_pointer(model *m)
{
    int i = (int)below(LIVE_MAX);
    uintptr_t a = (uintptr_t)m->live[i];
    const xarena *ar = &m->xs->arena;
    static int on_stack;
    switch (below(9)) {
    case 0: return m->nfreed ? (uintptr_t)m->freed[below(m->nfreed < FREED_MAX ? m->nfreed : FREED_MAX)] : 1;
    case 1: return a ? a + 1 + below(m->rounded[i] - 1) : ar->base;
    case 2: return a ? a + m->rounded[i] : ar->base + ar->size;
    case 3: return (uintptr_t)m->foreign + below(2) * 512;
    case 4: return ar->base + below(ar->size);
    case 5: return ar->base + below(ar->size / 512) * 512;
    case 6: return below(2) ? ar->base - 1 - below(4096) : ar->base + ar->size + below(4096);
    case 7: return below(2) ? (uintptr_t)&on_stack : (uintptr_t)rnd();
    default: return below(2) ? UINTPTR_MAX - below(4096) : 1 + below(4096);
    }
}

static void try_hostile(model *m)
{
    uintptr_t p = hostile_pointer(m);
    xseg_status want = expected(m, p);
    if (want == XSEG_OK || p == 0)
        return; /* a valid pointer by chance */
    size_t r = 0;
    ck_assert_int_eq(xseg_block_size(m->xs, (void *)p, &r, NULL), want);
    ck_assert_int_eq(xseg_record_stream(m->xs, (void *)p, (void *)7), want);
    ck_assert_int_eq(xseg_free(m->xs, (void *)p), want);
    ck_assert_str_ne(xseg_last_error(), "");
    m->tried += 3;
}

static void check_books(model *m)
{
    size_t bytes = 0, n = 0;
    for (int i = 0; i < LIVE_MAX; i++)
        if (m->live[i]) {
            bytes += m->rounded[i];
            n++;
            ck_assert(t_check(m->live[i], m->size[i], (uint32_t)i + 1));
        }
    xseg_stats s = t_stats(m->xs);
    ck_assert_uint_eq(s.active_blocks.current, n);
    ck_assert_uint_eq(s.allocated_bytes.current, bytes);
}

START_TEST(random_bad_frees)
{
    model m = {.xs = t_host(NULL), .other = t_host(NULL)};
    long ops = env_long("XSEG_HOSTILE_OPS", 20000);
    ck_assert_int_eq(xseg_alloc(m.other, 5000, NULL, &m.foreign), XSEG_OK);
    for (long k = 0; k < ops; k++) {
        int i = (int)below(LIVE_MAX);
        if (below(3) == 0)
            try_hostile(&m);
        else if (m.live[i])
            m_free(&m, i);
        else
            m_alloc(&m, i);
        T_CHECK(m.xs);
        if (k % 1000 == 0)
            check_books(&m);
    }
    check_books(&m);
    for (int i = 0; i < LIVE_MAX; i++)
        if (m.live[i])
            m_free(&m, i);
    ck_assert_int_eq(xseg_free(m.other, m.foreign), XSEG_OK);
    xseg_destroy(m.other);
    xseg_destroy(m.xs);
    printf("hostile: %ld bad pointers tried (free, record_stream, block_size) among %ld "
           "operations\n", m.tried, ops);
}
END_TEST

/* ---- sizes at the limits of a small virtual range ---- */

START_TEST(sizes_at_the_limits)
{
    xseg_t *xs = t_host("va_size:64MB,host_capacity:1GB");
    size_t va = xs->arena.size, page = xs->arena.page;
    void *p = (void *)1, *q;
    ck_assert_uint_eq(va, 64 * MiB);
    static const size_t too_big[] = {64 * MiB - 2 * MiB + 1, 64 * MiB, 64 * MiB + 1,
                                     SIZE_MAX, SIZE_MAX - 511, SIZE_MAX / 2 + 1};
    for (size_t i = 0; i < sizeof too_big / sizeof too_big[0]; i++) {
        ck_assert_int_eq(xseg_alloc(xs, too_big[i], NULL, &p), XSEG_ERR_SIZE);
        ck_assert_ptr_null(p);
        ck_assert_ptr_nonnull(strstr(xseg_last_error(), "va_size"));
    }
    ck_assert_int_eq(xseg_alloc(xs, va - page, NULL, &p), XSEG_OK);
    t_fill(p, va - page, 9);
    ck_assert(t_check(p, va - page, 9));
    xseg_status st = xseg_alloc(xs, 4 * MiB, NULL, &q);
    ck_assert_msg(st == XSEG_ERR_VA_EXHAUSTED || st == XSEG_ERR_OOM, "%s", xseg_last_error());
    ck_assert_ptr_null(q);
    ck_assert_str_ne(xseg_last_error(), "");
    T_CHECK(xs);
    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    T_CHECK(xs);
    static const size_t small[] = {1, 2, 511, 512, 513, 4095, 4096, 4097, 65535, 65536, 65537};
    for (size_t i = 0; i < sizeof small / sizeof small[0]; i++) {
        ck_assert_int_eq(xseg_alloc(xs, small[i], (void *)(uintptr_t)i, &p), XSEG_OK);
        t_fill(p, small[i], (uint32_t)i);
        size_t r = 0, req = 0;
        ck_assert_int_eq(xseg_block_size(xs, p, &r, &req), XSEG_OK);
        ck_assert_uint_eq(req, small[i]);
        ck_assert_uint_ge(r, small[i]);
        ck_assert(t_check(p, small[i], (uint32_t)i));
        T_CHECK(xs);
        ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
        T_CHECK(xs);
    }
    ck_assert_int_eq(xseg_alloc(xs, 0, NULL, &p), XSEG_ERR_INVALID_ARG);
    xseg_destroy(xs);
}
END_TEST

/* ---- output buffers of every size (exact heap buffers) ---- */

typedef xseg_status (*render_fn)(xseg_t *, char *, size_t, size_t *);

static void every_cap(xseg_t *xs, render_fn fn, const char *name)
{
    size_t need = 0, len = 0;
    ck_assert_int_eq(fn(xs, NULL, 0, &need), XSEG_ERR_BUFFER_TOO_SMALL);
    ck_assert_msg(need > 0, "%s: no length", name);
    size_t caps[] = {1, 2, 3, need / 2, need - 1, need, need + 1, need + 100};
    for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++) {
        size_t cap = caps[i] ? caps[i] : 1;
        char *buf = malloc(cap);
        xseg_status st = fn(xs, buf, cap, &len);
        ck_assert_uint_eq(len, need);
        if (cap > need) {
            ck_assert_int_eq(st, XSEG_OK);
            ck_assert_uint_eq(strlen(buf), need);
        } else {
            ck_assert_msg(st == XSEG_ERR_BUFFER_TOO_SMALL, "%s cap %zu: %d", name, cap, st);
            ck_assert_ptr_nonnull(strstr(xseg_last_error(), "needed"));
        }
        free(buf);
    }
    ck_assert_int_eq(fn(xs, NULL, 5, &len), XSEG_ERR_INVALID_ARG);
    ck_assert_int_eq(fn(NULL, NULL, 0, &len), XSEG_ERR_INVALID_ARG);
}

START_TEST(output_buffers)
{
    xseg_t *xs = t_host("history:64");
    void *p[8];
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(xseg_alloc(xs, (size_t)(i + 1) * 300 * KiB, (void *)(uintptr_t)(i % 3), &p[i]), XSEG_OK);
    for (int i = 0; i < 8; i += 2)
        ck_assert_int_eq(xseg_free(xs, p[i]), XSEG_OK);
    every_cap(xs, xseg_stats_json, "xseg_stats_json");
    every_cap(xs, xseg_stats_prometheus, "xseg_stats_prometheus");
    every_cap(xs, xseg_snapshot_json, "xseg_snapshot_json");
    every_cap(xs, xseg_history_json, "xseg_history_json");
    T_CHECK(xs);
    /* A stats struct shorter than today's: only `size` bytes are written. */
    uint32_t *small = malloc(8);
    small[0] = 8;
    ck_assert_int_eq(xseg_get_stats(xs, (xseg_stats *)small), XSEG_OK);
    ck_assert_uint_eq(small[0], 8);
    ck_assert_uint_eq(small[1], XSEG_STATS_VERSION);
    free(small);
    small = malloc(4);
    small[0] = 4;
    ck_assert_int_eq(xseg_get_stats(xs, (xseg_stats *)small), XSEG_ERR_INVALID_ARG);
    free(small);
    for (int i = 1; i < 8; i += 2)
        ck_assert_int_eq(xseg_free(xs, p[i]), XSEG_OK);
    xseg_destroy(xs);
}
END_TEST

/* ---- NULLs and bogus values on the other entry points ---- */

START_TEST(nulls_and_bogus_values)
{
    xseg_t *xs = (xseg_t *)1;
    ck_assert_int_eq(xseg_create(NULL, 0, "backend:host"), XSEG_ERR_INVALID_ARG);
    static const int devices[] = {-1, 1, 63, 64, INT_MAX, INT_MIN};
    for (size_t i = 0; i < sizeof devices / sizeof devices[0]; i++) {
        ck_assert_int_eq(xseg_create(&xs, devices[i], "backend:host"), XSEG_ERR_NO_DEVICE);
        ck_assert_ptr_null(xs);
        ck_assert_str_ne(xseg_last_error(), "");
        xseg_t *d = (xseg_t *)1;
        ck_assert_int_ne(xseg_default(devices[i] < 0 || devices[i] >= 64 ? devices[i] : 64, &d), XSEG_OK);
    }
    if (!xseg_cuda_available()) /* on a GPU machine backend:cuda works */
        ck_assert_int_eq(xseg_create(&xs, 0, "backend:cuda"), XSEG_ERR_NO_BACKEND);
    ck_assert_int_eq(xseg_set_oom_callback(NULL, NULL, NULL), XSEG_ERR_INVALID_ARG);
    xs = t_host(NULL);
    ck_assert_int_eq(xseg_set_oom_callback(xs, NULL, NULL), XSEG_OK);
    ck_assert_int_eq(xseg_history_json(xs, NULL, 0, NULL), XSEG_ERR_INVALID_ARG); /* history off */
    ck_assert_str_ne(xseg_last_error(), "");
    size_t r = 1;
    ck_assert_int_eq(xseg_trim(xs, SIZE_MAX, &r), XSEG_OK);
    ck_assert_uint_eq(r, 0);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK);
    ck_assert_int_eq(xseg_reset_peak(xs), XSEG_OK);
    void *p;
    ck_assert_int_eq(xseg_alloc(xs, 4096, (void *)UINTPTR_MAX, &p), XSEG_OK);
    ck_assert_int_eq(xseg_block_size(xs, p, NULL, NULL), XSEG_OK);
    ck_assert_int_eq(xseg_record_stream(xs, p, (void *)UINTPTR_MAX), XSEG_OK);
    ck_assert_int_eq(xseg_record_stream(xs, p, NULL), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    T_CHECK(xs);
    ck_assert_int_eq(xseg_record_stream(xs, p, NULL), XSEG_ERR_DOUBLE_FREE);
    T_CHECK(xs);
    ck_assert_str_eq(xseg_op_name((xseg_op)-1), "unknown");
    ck_assert_str_eq(xseg_strerror((xseg_status)-1), "unknown status");
    xseg_destroy(xs);
}
END_TEST

/* The PyTorch entry points cannot return a status: no crash, a message. */
START_TEST(torch_entry_points)
{
    int on_stack = 0;
    ck_assert_ptr_null(xseg_torch_alloc(SIZE_MAX, 0, NULL));
    ck_assert_str_ne(xseg_last_error(), "");
    ck_assert_ptr_null(xseg_torch_alloc(100, -1, NULL));
    ck_assert_ptr_null(xseg_torch_alloc(100, 1 << 20, NULL));
    xseg_torch_free(NULL, 0, 0, NULL);
    xseg_torch_free(&on_stack, 4, 0, NULL);
    ck_assert_str_ne(xseg_last_error(), "");
    xseg_torch_free((void *)1, 4, -7, NULL);
    xseg_torch_record_stream(NULL, NULL);
    xseg_torch_record_stream(&on_stack, (void *)3);
    xseg_torch_memory_fraction(-1.0, 0);
    xseg_torch_memory_fraction(2.0, 0);
    xseg_torch_memory_fraction(0.0 / 0.0, 0);
    xseg_torch_memory_fraction(0.5, -1);
    xseg_torch_init(-5);
    void *p = xseg_torch_alloc(1000, 0, NULL);
    ck_assert_ptr_nonnull(p);
    xseg_torch_free(p, 1000, 0, NULL);
    xseg_torch_free(p, 1000, 0, NULL); /* double free: reported, ignored */
    ck_assert_str_ne(xseg_last_error(), "");
    xseg_torch_reset();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("hostile");
    TCase *tc = tcase_create("inputs");
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, generated_confs);
    tcase_add_test(tc, random_bad_frees);
    tcase_add_test(tc, sizes_at_the_limits);
    tcase_add_test(tc, output_buffers);
    tcase_add_test(tc, nulls_and_bogus_values);
    tcase_add_test(tc, torch_entry_points);
    suite_add_tcase(s, tc);
    return t_run(s);
}
