/* test_fault.c: every driver failure injected.  Each scenario (growth,
 * growth into holes, shrink, trim, GC, OOM retry, cross-stream deferred
 * free, destroy with live memory, ...) first runs clean to count the driver
 * calls per operation; then it is rerun once per injection point (op, N,
 * error code, once / from N on).  After each run: every failing call gave
 * a clear error, the allocator's books match the driver's, the allocator
 * still works, everything cached can be trimmed, destroy gives everything
 * back (nothing left in the driver at fini) and the process-wide host
 * counters return to their baseline; with checking on (tools/ci/debug),
 * xseg_check passes after every operation.  Prints the number of points. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "support_common.h"
#include "support_fault.h"

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)
#define MAXP 256
#define S(n) ((void *)(uintptr_t)(n))

/* ---- one run of a scenario ---- */

typedef struct run {
    xseg_t *xs;
    int clean;            /* no injection: expectations are checked */
    void *p[MAXP];        /* live allocations */
    size_t size[MAXP];
    unsigned seed[MAXP];
    int held[8];
    unsigned next_seed;
    int failed;           /* calls that reported an error */
    char why[512];        /* first violation, "" if none */
} run;

typedef struct scenario {
    const char *name;
    const char *conf;
    int keeps_live;       /* ends with live allocations (destroy frees them) */
    void (*steps)(run *r);
} scenario;

static void violation(run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void violation(run *r, const char *fmt, ...)
{
    if (r->why[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->why, sizeof r->why, fmt, ap);
    va_end(ap);
}

/* The allocator's invariants after an operation (xseg_check, when checking
 * is on: tools/ci/debug), injected failures included. */
static void verify(run *r, const char *after)
{
    const char *m = t_check_failed(r->xs);
    if (*m)
        violation(r, "xseg_check after %s: %s", after, m);
}

/* A failing call must say why; a driver error must name the code. */
static void check_error(run *r, const char *what, xseg_status st)
{
    const char *m = xseg_last_error();
    if (st == XSEG_OK)
        return;
    r->failed++;
    if (!m[0])
        violation(r, "%s failed with %s but xseg_last_error() is empty", what, xseg_strerror(st));
    if (st == XSEG_ERR_DRIVER && !strstr(m, "CUDA_ERROR_"))
        violation(r, "%s: driver error message names no code: %s", what, m);
}

/* ---- data patterns: written at alloc, checked at free ---- */

static unsigned char pat(unsigned seed, size_t off)
{
    return (unsigned char)((seed * 2654435761u) ^ (off >> 9) ^ (off * 31));
}

static void pattern_one(run *r, unsigned char *p, size_t off, unsigned seed, int write,
                        size_t size)
{
    if (write)
        p[off] = pat(seed, off);
    else if (p[off] != pat(seed, off))
        violation(r, "data corrupted at %p + %zu (block of %zu bytes)", (void *)p, off, size);
}

/* Every 64 KiB and the last byte. */
static void pattern_each(run *r, unsigned char *p, size_t size, unsigned seed, int write)
{
    for (size_t off = 0; off < size; off += 64 * KIB)
        pattern_one(r, p, off, seed, write, size);
    pattern_one(r, p, size - 1, seed, write, size);
}

/* ---- steps ---- */

enum { OK = 0, MAYFAIL = 1, MUSTFAIL = 2 };

static int slot_of(run *r, void *p)
{
    for (int i = 0; i < MAXP; i++)
        if (r->p[i] == p)
            return i;
    return -1;
}

static void *r_alloc(run *r, size_t size, void *stream, int expect)
{
    void *p = NULL;
    xseg_status st = xseg_alloc(r->xs, size, stream, &p);
    check_error(r, "xseg_alloc", st);
    verify(r, "xseg_alloc");
    if (st != XSEG_OK && st != XSEG_ERR_OOM && st != XSEG_ERR_DRIVER)
        violation(r, "xseg_alloc(%zu) returned %s", size, xseg_strerror(st));
    if (r->clean && expect == OK && st != XSEG_OK)
        violation(r, "clean run: xseg_alloc(%zu) failed: %s", size, xseg_last_error());
    if (r->clean && expect == MUSTFAIL && st == XSEG_OK)
        violation(r, "clean run: xseg_alloc(%zu) should fail", size);
    if (st != XSEG_OK)
        return NULL;
    if (!p)
        violation(r, "xseg_alloc(%zu) succeeded with NULL", size);
    int i = slot_of(r, NULL);
    ck_assert_int_ge(i, 0);
    r->p[i] = p;
    r->size[i] = size;
    r->seed[i] = ++r->next_seed;
    pattern_each(r, p, size, r->seed[i], 1);
    return p;
}

static void r_free(run *r, void *p)
{
    int i = p ? slot_of(r, p) : -1;
    if (i < 0)
        return;
    pattern_each(r, p, r->size[i], r->seed[i], 0);
    xseg_status st = xseg_free(r->xs, p);
    if (st != XSEG_OK)
        violation(r, "xseg_free(%p) of a live block returned %s: %s", p, xseg_strerror(st),
                  xseg_last_error());
    verify(r, "xseg_free");
    r->p[i] = NULL;
}

static void r_free_all(run *r)
{
    for (int i = 0; i < MAXP; i++)
        r_free(r, r->p[i]);
}

static void r_record(run *r, void *p, void *stream)
{
    if (!p)
        return;
    xseg_status st = xseg_record_stream(r->xs, p, stream);
    check_error(r, "xseg_record_stream", st);
    verify(r, "xseg_record_stream");
    if (st != XSEG_OK && st != XSEG_ERR_OOM)
        violation(r, "xseg_record_stream returned %s", xseg_strerror(st));
}

static void r_trim(run *r, size_t keep)
{
    size_t rel = 0;
    xseg_status st = xseg_trim(r->xs, keep, &rel);
    check_error(r, "xseg_trim", st);
    verify(r, "xseg_trim");
    if (st != XSEG_OK && st != XSEG_ERR_DRIVER)
        violation(r, "xseg_trim returned %s", xseg_strerror(st));
}

static void r_hold(run *r, int stream, int on)
{
    xseg_host_hold_stream(r->xs->dctx, S(stream), on);
    r->held[stream] = on;
    verify(r, "a stream held or let go");
}

static void r_stats(run *r)
{
    xseg_stats st = {.size = sizeof st};
    char buf[4096];
    size_t len = 0;
    if (xseg_get_stats(r->xs, &st) != XSEG_OK)
        violation(r, "xseg_get_stats failed: %s", xseg_last_error());
    xseg_status s = xseg_stats_json(r->xs, buf, sizeof buf, &len);
    if (s != XSEG_OK && s != XSEG_ERR_BUFFER_TOO_SMALL)
        violation(r, "xseg_stats_json failed: %s", xseg_last_error());
}

/* ---- scenarios: each frees what it allocated unless keeps_live ---- */

static void sc_growth(run *r)
{
    void *a = r_alloc(r, 1000, S(1), OK), *b = r_alloc(r, 3 * MIB, S(1), OK);
    void *c = r_alloc(r, 20 * MIB, S(1), OK), *d = r_alloc(r, 300 * MIB, S(1), OK);
    void *e = r_alloc(r, 200 * KIB, S(1), OK);
    r_free(r, b);
    r_free(r, d);
    void *f = r_alloc(r, 10 * MIB, S(1), OK); /* reuses d's large handles: split */
    r_stats(r);
    r_free(r, a);
    r_free(r, c);
    r_free(r, e);
    r_free(r, f);
}

static void sc_holes(run *r)
{
    void *a = r_alloc(r, 6 * MIB, S(1), OK), *b = r_alloc(r, 6 * MIB, S(1), OK);
    void *c = r_alloc(r, 6 * MIB, S(1), OK);
    r_free(r, b);
    r_trim(r, 0); /* b's inner pages unmapped: a hole between a and c */
    void *d = r_alloc(r, 4 * MIB, S(2), OK);
    void *e = r_alloc(r, 8 * MIB, S(1), OK);
    r_free_all(r);
    (void)a, (void)c, (void)d, (void)e;
}

static void sc_shrink(run *r)
{
    for (int i = 0; i < 3; i++) {
        void *a = r_alloc(r, 16 * MIB, S(1), OK), *b = r_alloc(r, 8 * MIB, S(2), OK);
        r_free(r, a);
        r_free(r, b);
    }
    void *c = r_alloc(r, 40 * MIB, S(1), OK); /* over the release threshold */
    r_free(r, c);
}

static void sc_nocache(run *r)
{
    void *a = r_alloc(r, 5 * MIB, S(1), OK), *b = r_alloc(r, 3000, S(1), OK);
    void *c = r_alloc(r, 1 * MIB, S(2), OK);
    r_free(r, a);
    r_free(r, b);
    void *d = r_alloc(r, 7 * MIB, S(2), OK);
    r_free(r, c);
    r_free(r, d);
}

static void sc_trim(run *r)
{
    void *p[4];
    for (int i = 0; i < 4; i++)
        p[i] = r_alloc(r, 10 * MIB, S(1 + i % 2), OK);
    for (int i = 0; i < 3; i++)
        r_free(r, p[i]);
    r_trim(r, 10 * MIB);
    r_trim(r, 0);
    r_free(r, p[3]);
    r_trim(r, 0);
}

static void sc_gc(run *r)
{
    void *a = r_alloc(r, 30 * MIB, S(1), OK), *b = r_alloc(r, 30 * MIB, S(1), OK);
    r_free(r, a);
    r_free(r, b);
    r_hold(r, 3, 1);
    void *c = r_alloc(r, 40 * MIB, S(3), OK); /* over the GC threshold: reclaims s1 */
    r_free(r, c);
    void *d = r_alloc(r, 60 * MIB, S(2), OK); /* s3 busy: the cap makes it wait */
    r_hold(r, 3, 0);
    r_free(r, d);
}

static void sc_oom_retry(run *r)
{
    void *a = r_alloc(r, 40 * MIB, S(1), OK);
    r_free(r, a);
    void *b = r_alloc(r, 40 * MIB, S(2), OK); /* cap: reclaims s1's cache */
    void *c = r_alloc(r, 40 * MIB, S(1), MUSTFAIL); /* over the cap */
    r_free(r, b);
    r_free(r, c);
}

/* The cached block's stream is busy: no adoption, the cap makes the
 * reclaim wait for the stream (event sync) and release its pages. */
static void sc_oom_wait(run *r)
{
    r_hold(r, 1, 1);
    void *a = r_alloc(r, 40 * MIB, S(1), OK);
    r_free(r, a);
    void *b = r_alloc(r, 40 * MIB, S(2), OK);
    r_hold(r, 1, 0);
    void *c = r_alloc(r, 40 * MIB, S(1), MUSTFAIL);
    r_free(r, b);
    r_free(r, c);
}

static void sc_device_oom(run *r)
{
    void *a = r_alloc(r, 40 * MIB, S(1), OK);
    r_free(r, a);
    void *b = r_alloc(r, 40 * MIB, S(2), OK); /* the driver is full: retry ladder */
    void *c = r_alloc(r, 40 * MIB, S(1), MUSTFAIL);
    r_free(r, b);
    r_free(r, c);
}

static void sc_deferred(run *r)
{
    r_hold(r, 2, 1);
    void *p = r_alloc(r, 4 * MIB, S(1), OK), *x = r_alloc(r, 2 * KIB, S(1), OK);
    r_record(r, p, S(2));
    r_record(r, x, S(2));
    r_free(r, p); /* deferred: s2 still busy */
    r_free(r, x);
    void *q = r_alloc(r, 4 * MIB, S(1), OK);
    r_trim(r, 0); /* waits for s2 (event sync) */
    r_hold(r, 2, 0);
    void *s = r_alloc(r, 4 * MIB, S(1), OK);
    r_free(r, q);
    r_free(r, s);
}

static void sc_deferred_release(run *r)
{
    r_hold(r, 2, 1);
    void *p = r_alloc(r, 8 * MIB, S(1), OK);
    r_record(r, p, S(2));
    r_record(r, p, S(3));
    r_free(r, p);
    r_hold(r, 2, 0); /* the GPU finished: the next alloc completes the free */
    void *q = r_alloc(r, 8 * MIB, S(1), OK);
    r_free(r, q);
}

static void sc_destroy_live(run *r)
{
    r_hold(r, 2, 1);
    void *p = r_alloc(r, 5 * MIB, S(1), OK), *x = r_alloc(r, 1000, S(1), OK);
    void *q = r_alloc(r, 3 * MIB, S(2), OK);
    r_record(r, q, S(1));
    r_free(r, q); /* left pending */
    r_trim(r, 64 * MIB);
    (void)p, (void)x;
}

static void sc_handles(run *r)
{
    void *a = r_alloc(r, 3 * MIB, S(1), OK), *b = r_alloc(r, 3 * MIB, S(1), OK);
    r_free(r, a);
    r_trim(r, 0);
    void *c = r_alloc(r, 12 * MIB, S(2), OK);
    r_free(r, b);
    r_trim(r, 0);
    r_free(r, c);
}

static void sc_small(run *r)
{
    void *p[48];
    for (int i = 0; i < 48; i++)
        p[i] = r_alloc(r, 512 + (size_t)i * 700, S(1 + i % 3), OK);
    for (int i = 0; i < 48; i += 2)
        r_free(r, p[i]);
    r_trim(r, 0);
    for (int i = 1; i < 48; i += 2)
        r_free(r, p[i]);
}

static const scenario scenarios[] = {
    {"growth", "", 0, sc_growth},
    {"holes", "", 0, sc_holes},
    {"shrink", "release_threshold:0", 0, sc_shrink},
    {"nocache", "caching:off", 0, sc_nocache},
    {"trim", "", 0, sc_trim},
    {"gc", "max_mapped:96MB,gc_threshold:0.5", 0, sc_gc},
    {"oom_retry", "max_mapped:64MB", 0, sc_oom_retry},
    {"oom_wait", "max_mapped:64MB", 0, sc_oom_wait},
    {"device_oom", "host_capacity:64MB,release_threshold:unlimited", 0, sc_device_oom},
    {"deferred", "", 0, sc_deferred},
    {"deferred_release", "", 0, sc_deferred_release},
    {"destroy_live", "", 1, sc_destroy_live},
    {"handles", "handle_size:8MB", 0, sc_handles},
    {"small", "", 0, sc_small},
};
#define NSCEN ((int)(sizeof scenarios / sizeof scenarios[0]))

/* ---- checks after the scenario (injection paused) ---- */

static xseg_host_counts g_base;

static int counts_zero(const xseg_host_counts *c)
{
    return !c->reservations && !c->reserved_bytes && !c->handles && !c->handle_bytes &&
           !c->mappings && !c->mapped_bytes && !c->events;
}

static const char *counts_str(const xseg_host_counts *c, char *buf, size_t len)
{
    snprintf(buf, len, "%zu reservations, %zu handles (%zu B), %zu maps (%zu B), %zu events",
             c->reservations, c->handles, c->handle_bytes, c->mappings, c->mapped_bytes,
             c->events);
    return buf;
}

/* The allocator's books must match what the driver holds for it. */
static void check_books(run *r, const char *when)
{
    xseg_stats st = {.size = sizeof st};
    xseg_host_counts c;
    char b[256];
    xseg_get_stats(r->xs, &st);
    xseg_host_counts_of(r->xs->dctx, &c);
    /* handles moved to a new place keep their old mapping until the GPU is
     * done with it (alloc.c: move_pages): the driver maps them twice */
    if (c.mapped_bytes != st.mapped_bytes.current + st.unmapping_bytes ||
        c.handle_bytes < st.mapped_bytes.current ||
        c.handles != st.handles.current || c.reservations != st.segments.current)
        violation(r, "%s: the allocator counts %llu B mapped in %llu handles, %llu segments; "
                  "the driver holds %s", when, (unsigned long long)st.mapped_bytes.current,
                  (unsigned long long)st.handles.current, (unsigned long long)st.segments.current,
                  counts_str(&c, b, sizeof b));
    verify(r, when);
}

/* Fresh allocations of every kind work once the driver behaves. */
static void check_usable(run *r)
{
    int clean = r->clean;
    r->clean = 1;
    void *a = r_alloc(r, 1000, NULL, OK), *b = r_alloc(r, 5 * MIB, NULL, OK);
    void *c = r_alloc(r, 24 * MIB, S(4), OK);
    r_free(r, a);
    r_free(r, b);
    r_free(r, c);
    r->clean = clean;
}

/* With nothing live, trim(0) gives every byte back. */
static void check_trimmable(run *r)
{
    xseg_stats st = {.size = sizeof st};
    xseg_host_counts c;
    char b[256];
    r_free_all(r);
    for (int i = 0; i < 8; i++)
        if (r->held[i])
            r_hold(r, i, 0);
    r_trim(r, 0);
    xseg_get_stats(r->xs, &st);
    xseg_host_counts_of(r->xs->dctx, &c);
    if (st.mapped_bytes.current || st.handles.current || c.mapped_bytes || c.handles)
        violation(r, "after freeing everything and trim(0): %llu B still mapped; driver holds %s",
                  (unsigned long long)st.mapped_bytes.current, counts_str(&c, b, sizeof b));
}

/* ---- one run ---- */

typedef struct tally {
    uint64_t runs, points, recovered, reported, destroy_points, destroy_leftovers, violations;
    int clean_failed;     /* errors the scenario meets without injection (expected OOMs) */
} tally;

typedef struct inject {
    int op, code;
    uint64_t nth;
    fault_mode mode;
} inject;

static void check_create_failure(run *r, xseg_status st)
{
    check_error(r, "xseg_create", st);
    if (r->clean)
        violation(r, "clean run: xseg_create failed: %s", xseg_last_error());
    if (st != XSEG_ERR_DRIVER && st != XSEG_ERR_NO_DEVICE && st != XSEG_ERR_VA_EXHAUSTED &&
        st != XSEG_ERR_OOM)
        violation(r, "xseg_create returned %s", xseg_strerror(st));
    if (r->xs)
        violation(r, "xseg_create failed but set *out");
}

/* Returns 1 if the fault fired inside xseg_destroy. */
static int destroy_and_check(run *r, tally *t)
{
    xseg_host_counts fc;
    char b[256];
    uint64_t before = fault_fired();
    xseg_status st = xseg_destroy(r->xs);
    int in_destroy = fault_fired() > before;
    if (st != XSEG_OK)
        check_error(r, "xseg_destroy", st);
    if (!fault_fini_counts(&fc))
        violation(r, "xseg_destroy did not close the driver context");
    else if (!counts_zero(&fc) && (!in_destroy || getenv("XSEG_FAULT_STRICT_DESTROY")))
        violation(r, "xseg_destroy left in the driver: %s", counts_str(&fc, b, sizeof b));
    t->destroy_leftovers += in_destroy && !counts_zero(&fc);
    return in_destroy;
}

static void run_one(const scenario *sc, const inject *in, tally *t)
{
    run r = {.clean = in == NULL};
    int in_destroy = 0;
    xseg_host_counts g;
    char b[256];
    fault_reset();
    if (in)
        fault_arm(in->op, in->nth, in->code, in->mode);
    xseg_status st = xseg_create_with_driver(&r.xs, 0, sc->conf, &fault_driver);
    if (st != XSEG_OK) {
        check_create_failure(&r, st);
    } else {
        sc->steps(&r);
        fault_pause(1);
        check_books(&r, "after the scenario");
        check_usable(&r);
        if (!sc->keeps_live)
            check_trimmable(&r);
        check_books(&r, "after the checks");
        fault_pause(0);
        in_destroy = destroy_and_check(&r, t);
    }
    xseg_host_counts_global(&g);
    if (memcmp(&g, &g_base, sizeof g))
        violation(&r, "process-wide host counters off their baseline: %s",
                  counts_str(&g, b, sizeof b));
    t->runs++;
    if (in && fault_fired()) {
        t->points++;
        t->destroy_points += in_destroy;
        t->recovered += !in_destroy && r.failed <= t->clean_failed;
        t->reported += !in_destroy && r.failed > t->clean_failed;
    } else if (!in) {
        t->clean_failed = r.failed;
    }
    if (!r.why[0])
        return;
    char msg[1024];
    snprintf(msg, sizeof msg, "scenario %s (conf \"%s\"), %s call %llu failing (%s, %s): %s",
             sc->name, sc->conf, in ? fault_op_name(in->op) : "no",
             in ? (unsigned long long)in->nth : 0ULL, in ? xseg_drv_code_name(in->code) : "-",
             in && in->mode == FAULT_FROM ? "and every later one" : "once", r.why);
    t->violations++;
    if (!getenv("XSEG_FAULT_KEEP_GOING"))
        ck_abort_msg("%s", msg);
    printf("VIOLATION: %s\n", msg);
}

/* ---- every injection point of a scenario ---- */

/* XSEG_FAULT_STRIDE=k runs every k-th point only (slow tools: valgrind). */
static uint64_t stride(void)
{
    const char *s = getenv("XSEG_FAULT_STRIDE");
    long v = s ? atol(s) : 1;
    return v > 1 ? (uint64_t)v : 1;
}

static void run_scenario(const scenario *sc, tally *t)
{
    uint64_t calls[FAULT_NOPS], k = stride(), seq = 0;
    run_one(sc, NULL, t);
    for (int op = 0; op < FAULT_NOPS; op++)
        calls[op] = fault_calls(op);
    for (int op = 0; op < FAULT_NOPS; op++) {
        int codes[4], nc = fault_codes(op, codes, 4);
        for (uint64_t n = 1; n <= calls[op]; n++)
            for (int c = 0; c < nc; c++)
                for (int m = 0; m < 2; m++) {
                    inject in = {op, codes[c], n, (fault_mode)m};
                    if (seq++ % k == 0)
                        run_one(sc, &in, t);
                }
    }
    char line[512];
    int pos = snprintf(line, sizeof line, "fault: %-17s %5llu points; calls:", sc->name,
                       (unsigned long long)t->points);
    for (int op = 0; op < FAULT_NOPS; op++)
        if (calls[op] && pos < (int)sizeof line)
            pos += snprintf(line + pos, sizeof line - (size_t)pos, " %s %llu", fault_op_name(op),
                            (unsigned long long)calls[op]);
    printf("%s\n", line);
}

START_TEST(test_every_injection_point)
{
    tally all = {0};
    xseg_host_counts_global(&g_base);
    for (int i = 0; i < NSCEN; i++) {
        tally t = {0};
        run_scenario(&scenarios[i], &t);
        all.runs += t.runs;
        all.points += t.points;
        all.recovered += t.recovered;
        all.reported += t.reported;
        all.destroy_points += t.destroy_points;
        all.destroy_leftovers += t.destroy_leftovers;
        all.violations += t.violations;
    }
    printf("fault: %d scenarios, %llu runs, %llu injection points exercised: %llu reported "
           "a clear error, %llu recovered transparently; %llu in destroy, %llu of which left "
           "items to the driver's fini\n",
           NSCEN, (unsigned long long)all.runs, (unsigned long long)all.points,
           (unsigned long long)all.reported, (unsigned long long)all.recovered,
           (unsigned long long)all.destroy_points, (unsigned long long)all.destroy_leftovers);
    ck_assert_uint_gt(all.points, 0);
    ck_assert_msg(all.violations == 0, "%llu runs broke the rules (see VIOLATION lines)",
                  (unsigned long long)all.violations);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("fault");
    TCase *tc = tcase_create("inject");
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, test_every_injection_point);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
