/* test_alloc.c: the block allocator on the host backend: data integrity,
 * growth and shrink (seen in the backend's mapping state and by touching
 * memory), split and coalesce, small size classes, rounding, stats. */
#include <stdlib.h>
#include <string.h>

#include "driver_host.h"
#include "support_common.h"

START_TEST(sizes_hold_patterns)
{
    xseg_t *xs = t_host(NULL);
    static const size_t sizes[] = {1, 100, 512, 513, 4097, 65536, 70000, MiB, 3 * MiB + 7,
                                   64 * MiB, 130 * MiB + 5};
    enum { N = sizeof sizes / sizeof sizes[0] };
    void *p[N];
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(xseg_alloc(xs, sizes[i], NULL, &p[i]), XSEG_OK);
        ck_assert_msg(((uintptr_t)p[i] & 511) == 0, "allocation not 512-aligned");
        t_fill(p[i], sizes[i], (uint32_t)i);
    }
    for (int i = 0; i < N; i++)
        ck_assert_msg(t_check(p[i], sizes[i], (uint32_t)i), "block %d corrupted", i);
    xseg_stats s = t_stats(xs);
    ck_assert_uint_eq(s.active_blocks.current, N);
    size_t req = 0;
    for (int i = 0; i < N; i++)
        req += sizes[i];
    ck_assert_uint_eq(s.requested_bytes.current, req);
    ck_assert_uint_ge(s.allocated_bytes.current, req);
    ck_assert_uint_ge(s.mapped_bytes.current, s.allocated_bytes.current);
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(xseg_free(xs, p[i]), XSEG_OK);
    s = t_stats(xs);
    ck_assert_uint_eq(s.active_blocks.current, 0);
    ck_assert_uint_eq(s.allocated_bytes.current, 0);
    ck_assert_uint_eq(s.requested_bytes.current, 0);
    ck_assert_uint_eq(s.requested_bytes.peak, req);
    xseg_destroy(xs);
}
END_TEST

START_TEST(grows_and_shrinks)
{
    xseg_t *xs = t_host(NULL);
    void *h = t_host_ctx(xs);
    void *p;
    xseg_stats s0 = t_stats(xs);
    ck_assert_uint_eq(s0.mapped_bytes.current, 0);
    ck_assert_int_eq(xseg_alloc(xs, 10 * MiB, NULL, &p), XSEG_OK);
    xseg_stats s = t_stats(xs);
    ck_assert_uint_eq(s.mapped_bytes.current, 10 * MiB);
    xseg_host_counts c;
    xseg_host_counts_of(h, &c);
    ck_assert_uint_eq(c.mapped_bytes, 10 * MiB);
    ck_assert(xseg_host_is_accessible(h, (uintptr_t)p));
    t_fill(p, 10 * MiB, 7);
    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    /* Cached: still mapped, and reused at the same address. */
    s = t_stats(xs);
    ck_assert_uint_eq(s.mapped_bytes.current, 10 * MiB);
    ck_assert_uint_eq(s.cached_bytes.current, 10 * MiB);
    void *q;
    ck_assert_int_eq(xseg_alloc(xs, 10 * MiB, NULL, &q), XSEG_OK);
    ck_assert_ptr_eq(p, q);
    ck_assert_int_eq(t_stats(xs).driver_calls[XSEG_OP_MAP], s.driver_calls[XSEG_OP_MAP]);
    ck_assert_int_eq(xseg_free(xs, q), XSEG_OK);
    size_t rel = 0;
    ck_assert_int_eq(xseg_trim(xs, 0, &rel), XSEG_OK);
    ck_assert_uint_eq(rel, 10 * MiB);
    s = t_stats(xs);
    ck_assert_uint_eq(s.mapped_bytes.current, 0);
    ck_assert_uint_eq(s.handles.current, 0);
    ck_assert_uint_eq(s.released_bytes, 10 * MiB);
    xseg_host_counts_of(h, &c);
    ck_assert_uint_eq(c.mapped_bytes, 0);
    ck_assert_uint_eq(c.handles, 0);
    ck_assert(t_faults(p));
    xseg_destroy(xs);
}
END_TEST

START_TEST(shrink_keeps_neighbours)
{
    xseg_t *xs = t_host(NULL);
    void *h = t_host_ctx(xs);
    void *a, *b, *c;
    ck_assert_int_eq(xseg_alloc(xs, 4 * MiB, NULL, &a), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 4 * MiB, NULL, &b), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 4 * MiB, NULL, &c), XSEG_OK);
    ck_assert_ptr_eq((char *)a + 4 * MiB, b);
    ck_assert_ptr_eq((char *)b + 4 * MiB, c);
    t_fill(a, 4 * MiB, 1);
    t_fill(c, 4 * MiB, 3);
    ck_assert_int_eq(xseg_free(xs, b), XSEG_OK);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK);
    ck_assert(!xseg_host_is_accessible(h, (uintptr_t)b));
    ck_assert(!xseg_host_is_accessible(h, (uintptr_t)b + 2 * MiB));
    ck_assert(t_faults(b));
    ck_assert(!t_faults(a) && !t_faults(c));
    ck_assert(t_check(a, 4 * MiB, 1));
    ck_assert(t_check(c, 4 * MiB, 3));
    ck_assert_uint_eq(t_stats(xs).mapped_bytes.current, 8 * MiB);
    /* The hole is mapped again when reused. */
    void *d;
    ck_assert_int_eq(xseg_alloc(xs, 4 * MiB, NULL, &d), XSEG_OK);
    ck_assert_ptr_eq(d, b);
    t_fill(d, 4 * MiB, 4);
    ck_assert(t_check(d, 4 * MiB, 4));
    ck_assert_uint_eq(t_stats(xs).mapped_bytes.current, 12 * MiB);
    xseg_destroy(xs);
}
END_TEST

START_TEST(split_and_coalesce)
{
    xseg_t *xs = t_host(NULL);
    void *a, *b, *c, *d;
    ck_assert_int_eq(xseg_alloc(xs, 8 * MiB, NULL, &a), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, a), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 4 * MiB, NULL, &b), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 4 * MiB, NULL, &c), XSEG_OK);
    ck_assert_ptr_eq(b, a);                       /* split: front part */
    ck_assert_ptr_eq(c, (char *)a + 4 * MiB);    /* then the remainder */
    ck_assert_uint_eq(t_stats(xs).mapped_bytes.current, 8 * MiB);
    ck_assert_int_eq(xseg_free(xs, b), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, c), XSEG_OK);
    /* Coalesced back into one 8 MiB block, reused whole. */
    ck_assert_uint_ge(t_stats(xs).largest_free_block, 8 * MiB);
    ck_assert_int_eq(xseg_alloc(xs, 8 * MiB, NULL, &d), XSEG_OK);
    ck_assert_ptr_eq(d, a);
    ck_assert_uint_eq(t_stats(xs).mapped_bytes.current, 8 * MiB);
    xseg_destroy(xs);
}
END_TEST

START_TEST(small_classes)
{
    xseg_t *xs = t_host(NULL);
    enum { N = 3000 };
    void **p = calloc(N, sizeof *p);
    for (int i = 0; i < N; i++) {
        size_t n = 1 + (size_t)(i * 37 % 60000);
        ck_assert_int_eq(xseg_alloc(xs, n, NULL, &p[i]), XSEG_OK);
        t_fill(p[i], n, (uint32_t)i);
    }
    for (int i = 0; i < N; i++) {
        size_t n = 1 + (size_t)(i * 37 % 60000), r, q;
        ck_assert_int_eq(xseg_block_size(xs, p[i], &r, &q), XSEG_OK);
        ck_assert_uint_eq(q, n);
        ck_assert_uint_ge(r, n);
        ck_assert_uint_eq(r % 512, 0);
        ck_assert_uint_le(r, n + n / 4 + 512); /* classes waste at most 25% */
        ck_assert_msg(t_check(p[i], n, (uint32_t)i), "slot %d corrupted", i);
    }
    /* Freed slots are reused by the same stream. */
    void *first = p[0], *again;
    ck_assert_int_eq(xseg_free(xs, p[0]), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 1, NULL, &again), XSEG_OK);
    ck_assert_ptr_eq(again, first);
    p[0] = again;
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(xseg_free(xs, p[i]), XSEG_OK);
    ck_assert_uint_eq(t_stats(xs).allocated_bytes.current, 0);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK);
    ck_assert_uint_eq(t_stats(xs).mapped_bytes.current, 0);
    free(p);
    xseg_destroy(xs);
}
END_TEST

START_TEST(rounding_power2_divisions)
{
    xseg_t *xs = t_host("roundup_power2_divisions:4");
    void *p;
    size_t r;
    ck_assert_int_eq(xseg_alloc(xs, 9 * MiB, NULL, &p), XSEG_OK);
    ck_assert_int_eq(xseg_block_size(xs, p, &r, NULL), XSEG_OK);
    ck_assert_uint_eq(r, 10 * MiB); /* 8 MiB .. 16 MiB in steps of 2 MiB */
    xseg_destroy(xs);
    xs = t_host(NULL);
    ck_assert_int_eq(xseg_alloc(xs, 9 * MiB + 1, NULL, &p), XSEG_OK);
    ck_assert_int_eq(xseg_block_size(xs, p, &r, NULL), XSEG_OK);
    ck_assert_uint_eq(r, 9 * MiB + 512);
    xseg_destroy(xs);
}
END_TEST

START_TEST(max_split_size_keeps_large_blocks)
{
    xseg_t *xs = t_host("max_split_size:32MB");
    void *big, *small;
    ck_assert_int_eq(xseg_alloc(xs, 64 * MiB, NULL, &big), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, big), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 2 * MiB, NULL, &small), XSEG_OK);
    ck_assert_msg((char *)small < (char *)big || (char *)small >= (char *)big + 64 * MiB,
                  "a request under max_split_size split the cached 64 MiB block");
    xseg_destroy(xs);
    xs = t_host(NULL);
    ck_assert_int_eq(xseg_alloc(xs, 64 * MiB, NULL, &big), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, big), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 2 * MiB, NULL, &small), XSEG_OK);
    ck_assert_ptr_eq(small, big);
    xseg_destroy(xs);
}
END_TEST

START_TEST(caching_off_returns_memory)
{
    xseg_t *xs = t_host("caching:off");
    void *p, *q;
    ck_assert_int_eq(xseg_alloc(xs, 6 * MiB, NULL, &p), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 1000, NULL, &q), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, q), XSEG_OK);
    xseg_stats s = t_stats(xs);
    ck_assert_uint_eq(s.mapped_bytes.current, 0);
    ck_assert_uint_eq(s.driver_calls[XSEG_OP_UNMAP] > 0, 1);
    ck_assert(t_faults(p));
    xseg_destroy(xs);
}
END_TEST

START_TEST(stats_json_and_peaks)
{
    xseg_t *xs = t_host(NULL);
    void *p;
    ck_assert_int_eq(xseg_alloc(xs, 5 * MiB, NULL, &p), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    xseg_stats s = t_stats(xs);
    ck_assert_uint_eq(s.version, XSEG_STATS_VERSION);
    ck_assert_uint_eq(s.size, sizeof s);
    ck_assert_uint_eq(s.allocated_bytes.peak, 5 * MiB);
    ck_assert_uint_eq(s.allocated_bytes.total, 5 * MiB);
    ck_assert_uint_eq(s.alloc_calls, 1);
    ck_assert_uint_eq(s.free_calls, 1);
    ck_assert_uint_eq(s.segments.current, 1);
    ck_assert_uint_ge(s.reserved_va_bytes.current, s.mapped_bytes.current);
    ck_assert_uint_eq(s.page_size, 2 * MiB);
    ck_assert_int_eq(xseg_reset_peak(xs), XSEG_OK);
    ck_assert_uint_eq(t_stats(xs).allocated_bytes.peak, 0);
    size_t need = 0;
    char tiny[8];
    ck_assert_int_eq(xseg_stats_json(xs, tiny, sizeof tiny, &need), XSEG_ERR_BUFFER_TOO_SMALL);
    ck_assert_uint_gt(need, 100);
    char *buf = malloc(need + 1);
    ck_assert_int_eq(xseg_stats_json(xs, buf, need + 1, NULL), XSEG_OK);
    ck_assert_uint_eq(strlen(buf), need);
    ck_assert(buf[0] == '{' && buf[need - 1] == '}');
    ck_assert_ptr_nonnull(strstr(buf, "\"mapped_bytes\":{\"current\":6291456"));
    ck_assert_ptr_nonnull(strstr(buf, "\"backend\":\"host\""));
    ck_assert_ptr_nonnull(strstr(buf, "\"map\":"));
    free(buf);
    /* An older, smaller struct gets only its prefix. */
    xseg_stats small = {.size = 64};
    ck_assert_int_eq(xseg_get_stats(xs, &small), XSEG_OK);
    ck_assert_uint_eq(small.size, 64);
    xseg_destroy(xs);
}
END_TEST

START_TEST(default_allocator)
{
    xseg_t *a, *b;
    ck_assert_int_eq(xseg_set_default_conf("backend:host,host_capacity:1GB"), XSEG_OK);
    ck_assert_int_eq(xseg_default(0, &a), XSEG_OK);
    ck_assert_int_eq(xseg_default(0, &b), XSEG_OK);
    ck_assert_ptr_eq(a, b);
    ck_assert_str_eq(xseg_backend_name(a), "host");
    ck_assert_int_eq(xseg_set_default_conf("backend:host"), XSEG_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(xseg_last_error(), "already exists"));
    ck_assert_int_eq(xseg_default(-1, &a), XSEG_ERR_NO_DEVICE);
    ck_assert_int_eq(xseg_default(1000, &a), XSEG_ERR_NO_DEVICE);
    /* Another allocator on the same device coexists with the default. */
    xseg_t *c = t_host(NULL);
    void *p, *q;
    ck_assert_int_eq(xseg_alloc(b, MiB, NULL, &p), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(c, MiB, NULL, &q), XSEG_OK);
    ck_assert_ptr_ne(p, q);
    ck_assert_int_eq(xseg_free(c, p), XSEG_ERR_INVALID_POINTER);
    ck_assert_int_eq(xseg_free(b, p), XSEG_OK);
    ck_assert_int_eq(xseg_free(c, q), XSEG_OK);
    xseg_destroy(c);
}
END_TEST

START_TEST(conf_errors_at_create)
{
    xseg_t *xs = (xseg_t *)1;
    ck_assert_int_eq(xseg_create(&xs, 0, "backend:host,bogus:1"), XSEG_ERR_CONFIG);
    ck_assert_ptr_null(xs);
    ck_assert_ptr_nonnull(strstr(xseg_last_error(), "bogus"));
    setenv("XSEG_CONF", "page_size:3MB", 1);
    ck_assert_int_eq(xseg_create(&xs, 0, NULL), XSEG_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(xseg_last_error(), "XSEG_CONF"));
    setenv("XSEG_CONF", "backend:host,page_size:4MB", 1);
    ck_assert_int_eq(xseg_create(&xs, 0, NULL), XSEG_OK);
    ck_assert_uint_eq(t_stats(xs).page_size, 4 * MiB);
    xseg_destroy(xs);
    unsetenv("XSEG_CONF");
    ck_assert_int_eq(xseg_create(&xs, 0, "backend:host,page_size:1MB"), XSEG_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(xseg_last_error(), "granularity"));
    ck_assert_int_eq(xseg_create(&xs, 1, "backend:host"), XSEG_ERR_NO_DEVICE);
    ck_assert_int_eq(xseg_create(NULL, 0, "backend:host"), XSEG_ERR_INVALID_ARG);
}
END_TEST

START_TEST(cuda_backend_absent)
{
    xseg_t *xs = NULL;
    xseg_status st = xseg_create(&xs, 0, "backend:cuda");
    if (st == XSEG_OK) { /* a machine with a GPU: nothing to check here */
        xseg_destroy(xs);
        return;
    }
    ck_assert_int_eq(st, XSEG_ERR_NO_BACKEND);
    ck_assert_ptr_nonnull(strstr(xseg_last_error(), "backend:host"));
    /* auto falls back to the host backend */
    ck_assert_int_eq(xseg_create(&xs, 0, "backend:auto,host_capacity:1GB"), XSEG_OK);
    ck_assert_str_eq(xseg_backend_name(xs), "host");
    xseg_destroy(xs);
}
END_TEST

START_TEST(destroy_releases_everything)
{
    xseg_host_counts base, c;
    xseg_host_counts_global(&base);
    xseg_t *xs = t_host(NULL);
    void *p[20];
    for (int i = 0; i < 20; i++)
        ck_assert_int_eq(xseg_alloc(xs, (size_t)(i + 1) * 300000, (void *)(uintptr_t)(i % 3), &p[i]),
                         XSEG_OK);
    for (int i = 0; i < 20; i += 2)
        ck_assert_int_eq(xseg_free(xs, p[i]), XSEG_OK);
    ck_assert_int_eq(xseg_destroy(xs), XSEG_OK);
    xseg_host_counts_global(&c);
    ck_assert_uint_eq(c.reservations, base.reservations);
    ck_assert_uint_eq(c.handles, base.handles);
    ck_assert_uint_eq(c.mappings, base.mappings);
    ck_assert_uint_eq(c.events, base.events);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("alloc");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, sizes_hold_patterns);
    tcase_add_test(tc, grows_and_shrinks);
    tcase_add_test(tc, shrink_keeps_neighbours);
    tcase_add_test(tc, split_and_coalesce);
    tcase_add_test(tc, small_classes);
    tcase_add_test(tc, rounding_power2_divisions);
    tcase_add_test(tc, max_split_size_keeps_large_blocks);
    tcase_add_test(tc, caching_off_returns_memory);
    tcase_add_test(tc, stats_json_and_peaks);
    tcase_add_test(tc, default_allocator);
    tcase_add_test(tc, conf_errors_at_create);
    tcase_add_test(tc, cuda_backend_absent);
    tcase_add_test(tc, destroy_releases_everything);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return t_run(suite());
}
