/* test_host_driver.c: what only the host backend (lib/driver_host.c) does:
 * its name, granularity and capacity check, simulated capacity filled
 * exactly, memfd hole punching and slot recycling, one memfd for many
 * handles, many contexts in the process counters, events under stream
 * holds and event lag, events of another context, fini of live objects,
 * the test controls from another thread.  The driver contract itself
 * (reserve, map order, access before set_access, two views of a handle,
 * release while mapped, failures without effect, events, mem_info, out of
 * memory, map churn, ...) is test_driver_contract.c's, run there over the
 * host, fault and cuda drivers alike. */
#include <check.h>
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "driver.h"
#include "driver_host.h"
#include "support_common.h"

#define G ((size_t)2 << 20)
#define MIB ((size_t)1 << 20)

static const xseg_driver *D = &xseg_driver_host;

static void *ctx_new(size_t capacity)
{
    void *ctx = NULL;
    char err[256] = "";
    ck_assert_int_eq(D->init(&ctx, 0, capacity, err, sizeof(err)), XDRV_SUCCESS);
    ck_assert_ptr_nonnull(ctx);
    return ctx;
}

static int counts_same(const xseg_host_counts *a, const xseg_host_counts *b)
{
    return memcmp(a, b, sizeof(*a)) == 0;
}

static xseg_host_counts counts(void *ctx)
{
    xseg_host_counts c;
    xseg_host_counts_of(ctx, &c);
    return c;
}

static xseg_host_counts gcounts(void)
{
    xseg_host_counts c;
    xseg_host_counts_global(&c);
    return c;
}

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    ck_assert_ptr_nonnull(d);
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

/* The fd of the (single) host memfd of this process, or -1. */
static int find_memfd(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int found = -1;
    while ((e = readdir(d))) {
        char path[300], link[256];
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(path, link, sizeof(link) - 1);
        if (n <= 0)
            continue;
        link[n] = 0;
        if (strncmp(link, "/memfd:xseg-host", 16) == 0)
            found = atoi(e->d_name);
    }
    closedir(d);
    return found;
}

/* reserve + create + map + set_access of one handle of `size` at va+off */
static uint64_t map_new(void *ctx, uintptr_t va, size_t size)
{
    uint64_t h = 0;
    ck_assert_int_eq(D->create(ctx, size, &h), XDRV_SUCCESS);
    ck_assert_int_eq(D->map(ctx, va, size, h), XDRV_SUCCESS);
    ck_assert_int_eq(D->set_access(ctx, va, size), XDRV_SUCCESS);
    return h;
}

static void unmap_release(void *ctx, uintptr_t va, size_t size, uint64_t h)
{
    ck_assert_int_eq(D->unmap(ctx, va, size), XDRV_SUCCESS);
    ck_assert_int_eq(D->release(ctx, h), XDRV_SUCCESS);
}

/* ---- init ------------------------------------------------------------------ */

/* Only device 0 (bad devices: test_driver_contract.c); capacity 0 is
 * refused; granularity 2 MiB; mem_info reports the simulated capacity. */
START_TEST(t_init)
{
    xseg_host_counts g0 = gcounts();
    void *ctx = (void *)0x1;
    char err[256] = "";
    ck_assert_int_eq(D->init(&ctx, 0, 0, err, sizeof(err)), XDRV_INVALID_VALUE);
    ck_assert_ptr_eq(ctx, (void *)0x1);
    ck_assert_ptr_nonnull(strstr(err, "capacity is 0"));
    ck_assert_int_eq(D->init(&ctx, 0, 0, NULL, 0), XDRV_INVALID_VALUE);
    xseg_host_counts g1 = gcounts();
    ck_assert(counts_same(&g0, &g1));

    ctx = ctx_new(64 * MIB);
    size_t gran = 0, fr = 0, tot = 0;
    ck_assert_str_eq(D->name, "host");
    ck_assert_int_eq(D->granularity(ctx, &gran), XDRV_SUCCESS);
    ck_assert_uint_eq(gran, G);
    ck_assert_int_eq(D->mem_info(ctx, &fr, &tot), XDRV_SUCCESS);
    ck_assert_uint_eq(fr, 64 * MIB);
    ck_assert_uint_eq(tot, 64 * MIB);
    ck_assert_uint_eq(counts(ctx).capacity, 64 * MIB);
    D->fini(ctx);
}
END_TEST

/* ---- capacity and the memfd ---------------------------------------------------- */

/* The simulated capacity fills exactly; a refused create changes nothing;
 * capacity comes back with each release. */
START_TEST(t_capacity)
{
    void *ctx = ctx_new(4 * G);
    uintptr_t va;
    uint64_t h[5], spare = 77;
    ck_assert_int_eq(D->reserve(ctx, 8 * G, &va), XDRV_SUCCESS);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(D->create(ctx, G, &h[i]), XDRV_SUCCESS);
    xseg_host_counts c0 = counts(ctx);
    ck_assert_int_eq(D->create(ctx, G, &spare), XDRV_OUT_OF_MEMORY);
    ck_assert_uint_eq(spare, 77);
    xseg_host_counts c1 = counts(ctx);
    ck_assert(counts_same(&c0, &c1));
    size_t fr, tot;
    ck_assert_int_eq(D->mem_info(ctx, &fr, &tot), XDRV_SUCCESS);
    ck_assert_uint_eq(fr, 0);
    ck_assert_uint_eq(tot, 4 * G);
    /* recovers after release */
    ck_assert_int_eq(D->release(ctx, h[1]), XDRV_SUCCESS);
    ck_assert_int_eq(D->create(ctx, 2 * G, &h[4]), XDRV_OUT_OF_MEMORY);
    ck_assert_int_eq(D->create(ctx, G, &h[1]), XDRV_SUCCESS);
    ck_assert_int_eq(D->release(ctx, h[2]), XDRV_SUCCESS);
    ck_assert_int_eq(D->release(ctx, h[3]), XDRV_SUCCESS);
    ck_assert_int_eq(D->create(ctx, 2 * G, &h[4]), XDRV_SUCCESS);
    ck_assert_int_eq(D->map(ctx, va, 2 * G, h[4]), XDRV_SUCCESS);
    ck_assert_int_eq(D->set_access(ctx, va, 2 * G), XDRV_SUCCESS);
    t_fill_words(va, 2 * G, 5);
    ck_assert(t_check_words(va, 2 * G, 5));
    ck_assert_int_eq(D->create(ctx, G, &spare), XDRV_OUT_OF_MEMORY);
    unmap_release(ctx, va, 2 * G, h[4]);
    ck_assert_int_eq(D->release(ctx, h[0]), XDRV_SUCCESS);
    ck_assert_int_eq(D->release(ctx, h[1]), XDRV_SUCCESS);
    ck_assert_uint_eq(counts(ctx).handle_bytes, 0);
    ck_assert_int_eq(D->address_free(ctx, va, 8 * G), XDRV_SUCCESS);
    D->fini(ctx);
}
END_TEST

/* Release gives the memory back (st_blocks of the memfd) and a recycled
 * range reads as zeros. */
START_TEST(t_punch_hole)
{
    void *ctx = ctx_new(16 * MIB);
    int fd = find_memfd();
    ck_assert_int_ge(fd, 0);
    uintptr_t va;
    struct stat st;
    ck_assert_int_eq(D->reserve(ctx, 2 * G, &va), XDRV_SUCCESS);
    uint64_t h = map_new(ctx, va, 2 * G);
    memset((void *)va, 0xab, 2 * G);
    ck_assert_int_eq(fstat(fd, &st), 0);
    ck_assert_int_ge((long long)st.st_blocks * 512, (long long)(2 * G));
    unmap_release(ctx, va, 2 * G, h);
    ck_assert_int_eq(fstat(fd, &st), 0);
    ck_assert_int_eq(st.st_blocks, 0);
    h = map_new(ctx, va, 2 * G);
    ck_assert(t_all_zero(va, 2 * G));
    unmap_release(ctx, va, 2 * G, h);
    ck_assert_int_eq(D->address_free(ctx, va, 2 * G), XDRV_SUCCESS);
    D->fini(ctx);
}
END_TEST

/* ---- scale ----------------------------------------------------------------------- */

START_TEST(t_many_handles)
{
    enum { N = 5000 };
    int fds0 = count_fds();
    void *ctx = ctx_new((size_t)N * G);
    uintptr_t va;
    static uint64_t h[N];
    ck_assert_int_eq(count_fds(), fds0 + 1);
    ck_assert_int_eq(D->reserve(ctx, (size_t)N * G, &va), XDRV_SUCCESS);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(D->create(ctx, G, &h[i]), XDRV_SUCCESS);
        ck_assert_int_eq(D->map(ctx, va + (size_t)i * G, G, h[i]), XDRV_SUCCESS);
    }
    ck_assert_int_eq(count_fds(), fds0 + 1);
    ck_assert_int_eq(D->set_access(ctx, va, (size_t)N * G), XDRV_SUCCESS);
    for (int i = 0; i < N; i++)
        *(int *)(va + (size_t)i * G + 64) = i;
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(*(int *)(va + (size_t)i * G + 64), i);
    xseg_host_counts c = counts(ctx);
    ck_assert_uint_eq(c.handles, N);
    ck_assert_uint_eq(c.mappings, N);
    ck_assert_uint_eq(c.mapped_bytes, (size_t)N * G);
    /* one unmap covering all N maps, releases in a scattered order */
    ck_assert_int_eq(D->unmap(ctx, va, (size_t)N * G), XDRV_SUCCESS);
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(D->release(ctx, h[(i * 7919) % N]), XDRV_SUCCESS);
    /* recycling: create them all again, capacity exactly full */
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(D->create(ctx, G, &h[i]), XDRV_SUCCESS);
    uint64_t spare = 5;
    ck_assert_int_eq(D->create(ctx, G, &spare), XDRV_OUT_OF_MEMORY);
    ck_assert_uint_eq(spare, 5);
    for (int i = N - 1; i >= 0; i--)
        ck_assert_int_eq(D->release(ctx, h[i]), XDRV_SUCCESS);
    ck_assert_int_eq(D->address_free(ctx, va, (size_t)N * G), XDRV_SUCCESS);
    D->fini(ctx);
    ck_assert_int_eq(count_fds(), fds0);
}
END_TEST

START_TEST(t_many_contexts)
{
    enum { N = 64 };
    int fds0 = count_fds();
    xseg_host_counts g0 = gcounts();
    void *ctx[N];
    uintptr_t va[N];
    for (int i = 0; i < N; i++) {
        ctx[i] = ctx_new(8 * MIB);
        ck_assert_int_eq(D->reserve(ctx[i], 2 * G, &va[i]), XDRV_SUCCESS);
        map_new(ctx[i], va[i], G);
        *(int *)va[i] = i;
    }
    xseg_host_counts g = gcounts();
    ck_assert_uint_eq(g.handles, g0.handles + N);
    ck_assert_uint_eq(g.mapped_bytes, g0.mapped_bytes + N * G);
    ck_assert_uint_eq(g.reserved_bytes, g0.reserved_bytes + 2 * N * G);
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(*(int *)va[i], i);
    for (int i = 0; i < N; i++)
        D->fini(ctx[i]); /* leaves everything to fini */
    g = gcounts();
    ck_assert(counts_same(&g, &g0));
    ck_assert_int_eq(count_fds(), fds0);
}
END_TEST

/* ---- events ----------------------------------------------------------------------- */

START_TEST(t_events)
{
    void *ctx = ctx_new(8 * MIB);
    void *s = (void *)0x1000, *t = (void *)0x2000;
    void *e1, *e2, *e3;
    ck_assert_int_eq(D->event_create(ctx, &e1), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_create(ctx, &e2), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_create(ctx, &e3), XDRV_SUCCESS);
    ck_assert_uint_eq(counts(ctx).events, 3);
    ck_assert_int_eq(D->event_query(ctx, e1), XDRV_SUCCESS); /* never recorded */
    ck_assert_int_eq(D->event_record(ctx, e1, s), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_query(ctx, e1), XDRV_SUCCESS);
    /* held: pending until the hold is lifted; other streams unaffected */
    xseg_host_hold_stream(ctx, s, 1);
    ck_assert_int_eq(D->event_record(ctx, e1, s), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_record(ctx, e2, t), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_record(ctx, e3, NULL), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_query(ctx, e1), XDRV_NOT_READY);
    ck_assert_int_eq(D->event_query(ctx, e1), XDRV_NOT_READY);
    ck_assert_int_eq(D->event_query(ctx, e2), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_query(ctx, e3), XDRV_SUCCESS);
    xseg_host_hold_stream(ctx, s, 0);
    ck_assert_int_eq(D->event_query(ctx, e1), XDRV_SUCCESS);
    ck_assert_uint_eq(xseg_host_sync_count(ctx), 0);
    /* the NULL stream can be held too; event_sync completes up to the event */
    xseg_host_hold_stream(ctx, NULL, 1);
    ck_assert_int_eq(D->event_record(ctx, e1, NULL), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_record(ctx, e2, NULL), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_query(ctx, e1), XDRV_NOT_READY);
    ck_assert_int_eq(D->event_sync(ctx, e1), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_query(ctx, e1), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_query(ctx, e2), XDRV_NOT_READY);
    ck_assert_uint_eq(xseg_host_sync_count(ctx), 1);
    ck_assert_int_eq(D->stream_sync(ctx, NULL), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_query(ctx, e2), XDRV_SUCCESS);
    ck_assert_uint_eq(xseg_host_sync_count(ctx), 2);
    /* still held: a re-recorded event is pending again */
    ck_assert_int_eq(D->event_record(ctx, e2, NULL), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_query(ctx, e2), XDRV_NOT_READY);
    ck_assert_int_eq(D->stream_sync(ctx, t), XDRV_SUCCESS); /* other stream */
    ck_assert_int_eq(D->event_query(ctx, e2), XDRV_NOT_READY);
    /* re-recording on a free stream completes it */
    ck_assert_int_eq(D->event_record(ctx, e2, t), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_query(ctx, e2), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_sync(ctx, e2), XDRV_SUCCESS);
    ck_assert_uint_eq(xseg_host_sync_count(ctx), 4);
    xseg_host_hold_stream(ctx, NULL, 0);
    ck_assert_int_eq(D->event_destroy(ctx, e1), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_destroy(ctx, e2), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_query(ctx, NULL), XDRV_INVALID_HANDLE);
    ck_assert_uint_eq(counts(ctx).events, 1);
    D->fini(ctx); /* e3 left for fini */
}
END_TEST

START_TEST(t_event_lag)
{
    void *ctx = ctx_new(8 * MIB);
    void *s = (void *)0x1000, *t = (void *)0x2000;
    void *e1, *e2;
    ck_assert_int_eq(D->event_create(ctx, &e1), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_create(ctx, &e2), XDRV_SUCCESS);
    xseg_host_set_event_lag(ctx, 3);
    /* complete after 3 queries */
    ck_assert_int_eq(D->event_record(ctx, e1, s), XDRV_SUCCESS);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(D->event_query(ctx, e1), XDRV_NOT_READY);
    ck_assert_int_eq(D->event_query(ctx, e1), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_query(ctx, e1), XDRV_SUCCESS);
    /* event_sync completes at once */
    ck_assert_int_eq(D->event_record(ctx, e1, s), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_sync(ctx, e1), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_query(ctx, e1), XDRV_SUCCESS);
    /* stream_sync completes that stream's events only */
    ck_assert_int_eq(D->event_record(ctx, e1, s), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_record(ctx, e2, t), XDRV_SUCCESS);
    ck_assert_int_eq(D->stream_sync(ctx, s), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_query(ctx, e1), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_query(ctx, e2), XDRV_NOT_READY);
    /* lag 0: complete when recorded again */
    xseg_host_set_event_lag(ctx, 0);
    ck_assert_int_eq(D->event_record(ctx, e2, t), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_query(ctx, e2), XDRV_SUCCESS);
    D->fini(ctx);
}
END_TEST

START_TEST(t_event_other_ctx)
{
    void *a = ctx_new(8 * MIB), *b = ctx_new(8 * MIB), *e;
    ck_assert_int_eq(D->event_create(a, &e), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_record(b, e, NULL), XDRV_INVALID_HANDLE);
    ck_assert_int_eq(D->event_destroy(b, e), XDRV_INVALID_HANDLE);
    ck_assert_int_eq(D->event_destroy(a, e), XDRV_SUCCESS);
    D->fini(a);
    D->fini(b);
}
END_TEST

/* ---- counters and threads ------------------------------------------------------------ */

START_TEST(t_fini_releases_all)
{
    xseg_host_counts g0 = gcounts();
    int fds0 = count_fds();
    void *ctx = ctx_new(64 * MIB), *e;
    uintptr_t va;
    uint64_t h, spare;
    ck_assert_int_eq(D->reserve(ctx, 8 * G, &va), XDRV_SUCCESS);
    map_new(ctx, va, 2 * G);
    h = map_new(ctx, va + 4 * G, G);
    ck_assert_int_eq(D->release(ctx, h), XDRV_SUCCESS); /* zombie */
    ck_assert_int_eq(D->create(ctx, 4 * G, &spare), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_create(ctx, &e), XDRV_SUCCESS);
    xseg_host_hold_stream(ctx, NULL, 1);
    ck_assert_int_eq(D->event_record(ctx, e, NULL), XDRV_SUCCESS);
    xseg_host_counts g = gcounts();
    ck_assert_uint_eq(g.handles, g0.handles + 3);
    ck_assert_uint_eq(g.events, g0.events + 1);
    D->fini(ctx);
    g = gcounts();
    ck_assert(counts_same(&g, &g0));
    ck_assert_int_eq(count_fds(), fds0);
}
END_TEST

typedef struct toggler {
    void *ctx;
    atomic_int stop;
    long rounds;
} toggler;

static void *toggle_main(void *arg)
{
    toggler *t = arg;
    xseg_host_counts c, g;
    while (!t->stop) {
        xseg_host_hold_stream(t->ctx, (void *)0x10, (int)(t->rounds & 1));
        xseg_host_counts_of(t->ctx, &c);
        xseg_host_counts_global(&g);
        (void)xseg_host_is_accessible(t->ctx, 0);
        (void)xseg_host_sync_count(t->ctx);
        t->rounds++;
    }
    return NULL;
}

START_TEST(t_threads)
{
    void *ctx = ctx_new(64 * MIB), *e;
    uintptr_t va;
    toggler t = {ctx, 0, 0};
    pthread_t th;
    ck_assert_int_eq(D->reserve(ctx, 8 * G, &va), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_create(ctx, &e), XDRV_SUCCESS);
    ck_assert_int_eq(pthread_create(&th, NULL, toggle_main, &t), 0);
    for (int i = 0; i < 2000; i++) {
        size_t off = (size_t)(i % 4) * 2 * G;
        uint64_t h = map_new(ctx, va + off, G);
        ck_assert(xseg_host_is_accessible(ctx, va + off));
        ck_assert_int_eq(D->event_record(ctx, e, (void *)0x10), XDRV_SUCCESS);
        int q = D->event_query(ctx, e);
        ck_assert(q == XDRV_SUCCESS || q == XDRV_NOT_READY);
        ck_assert_int_eq(D->event_sync(ctx, e), XDRV_SUCCESS);
        ck_assert_int_eq(D->event_query(ctx, e), XDRV_SUCCESS);
        unmap_release(ctx, va + off, G, h);
    }
    t.stop = 1;
    pthread_join(th, NULL);
    ck_assert_uint_eq(xseg_host_sync_count(ctx), 2000);
    ck_assert_uint_eq(counts(ctx).mappings, 0);
    D->fini(ctx);
}
END_TEST

static Suite *host_driver_suite(void)
{
    Suite *s = suite_create("host_driver");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, t_init);
    tcase_add_test(tc, t_capacity);
    tcase_add_test(tc, t_punch_hole);
    tcase_add_test(tc, t_many_handles);
    tcase_add_test(tc, t_many_contexts);
    tcase_add_test(tc, t_events);
    tcase_add_test(tc, t_event_lag);
    tcase_add_test(tc, t_event_other_ctx);
    tcase_add_test(tc, t_fini_releases_all);
    tcase_add_test(tc, t_threads);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(host_driver_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed != 0;
}
