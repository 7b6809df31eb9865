/* test_alloc.c: the block allocator on the host backend: data integrity,
 * growth and shrink (seen in the backend's mapping state and by touching
 * memory), split and coalesce, small size classes, rounding, stats, and
 * the pointer query xseg_block_range (interior pointers, freed and foreign
 * ones, dedicated and tagged blocks, a churn checked against a list). */
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

/* small_size up to its maximum (1 MiB): classes above a slab's largest
 * size (256 KiB) get slabs of one slot (they had none: a crash). */
START_TEST(small_classes_up_to_one_mib)
{
    xseg_t *xs = t_host("small_size:1MB");
    static const size_t sizes[] = {200 * 1024, 300 * 1024, 700 * 1024, 1000 * 1024, MiB};
    enum { N = sizeof sizes / sizeof sizes[0] };
    void *p[2 * N];
    for (int i = 0; i < 2 * N; i++) {
        size_t n = sizes[i % N], r, q;
        ck_assert_int_eq(xseg_alloc(xs, n, NULL, &p[i]), XSEG_OK);
        ck_assert_int_eq(xseg_block_size(xs, p[i], &r, &q), XSEG_OK);
        ck_assert_uint_eq(q, n);
        ck_assert_uint_ge(r, n);
        ck_assert_uint_le(r, n + n / 4 + 512);
        t_fill(p[i], n, (uint32_t)i);
    }
    for (int i = 0; i < 2 * N; i++)
        ck_assert_msg(t_check(p[i], sizes[i % N], (uint32_t)i), "block %d corrupted", i);
    ck_assert_int_eq(xseg_check(xs), XSEG_OK);
    for (int i = 0; i < 2 * N; i++)
        ck_assert_int_eq(xseg_free(xs, p[i]), XSEG_OK);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK);
    ck_assert_uint_eq(t_stats(xs).mapped_bytes.current, 0);
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

/* ---- xseg_block_range: the live allocation holding a pointer ---- */

/* xseg_block_range(xs, q) must give (base, rounded, requested). */
static void range_is(xseg_t *xs, const void *q, const void *base, size_t rounded, size_t requested)
{
    void *b = NULL;
    size_t r = 0, n = 0;
    ck_assert_msg(xseg_block_range(xs, q, &b, &r, &n) == XSEG_OK, "%p: %s", q, xseg_last_error());
    ck_assert_msg(b == base && r == rounded && n == requested,
                  "%p: base %p rounded %zu requested %zu, expected %p %zu %zu", q, b, r, n, base,
                  rounded, requested);
}

/* No live allocation holds q, or (`not_base`) another one than not_base. */
static void range_not(xseg_t *xs, const void *q, const void *not_base)
{
    void *b = NULL;
    xseg_status st = xseg_block_range(xs, q, &b, NULL, NULL);
    if (not_base && st == XSEG_OK)
        ck_assert_msg(b != not_base, "%p: still in the allocation at %p", q, not_base);
    else
        ck_assert_msg(st == XSEG_ERR_INVALID_POINTER, "%p: status %d (%s)", q, (int)st,
                      xseg_last_error());
}

/* Starts, interior pointers, the first and last byte of a small slot, a
 * block and a large block: the allocation's start and both sizes; one past
 * the end is another allocation or none. */
START_TEST(block_range_interior)
{
    xseg_t *xs = t_host(NULL);
    static const size_t sizes[] = {1, 700, 5000, 65536 + 3, MiB, 3 * MiB + 7, 40 * MiB + 1};
    enum { N = sizeof sizes / sizeof sizes[0] };
    void *p[N];
    size_t r[N];
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(xseg_alloc(xs, sizes[i], NULL, &p[i]), XSEG_OK);
        ck_assert_int_eq(xseg_block_size(xs, p[i], &r[i], NULL), XSEG_OK);
    }
    for (int i = 0; i < N; i++) {
        char *c = p[i];
        range_is(xs, c, c, r[i], sizes[i]);
        range_is(xs, c + sizes[i] / 2, c, r[i], sizes[i]);
        range_is(xs, c + sizes[i] - 1, c, r[i], sizes[i]);
        range_is(xs, c + r[i] - 1, c, r[i], sizes[i]); /* the rounding is the block's too */
        range_not(xs, c + r[i], c);
    }
    void *b = (void *)1;
    size_t q = 7;
    ck_assert_int_eq(xseg_block_range(xs, (char *)p[5] + 12345, &b, NULL, &q), XSEG_OK);
    ck_assert_ptr_eq(b, p[5]);
    ck_assert_uint_eq(q, sizes[5]);
    ck_assert_int_eq(xseg_block_range(xs, (char *)p[5] + 1, NULL, NULL, NULL), XSEG_OK);
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(xseg_free(xs, p[i]), XSEG_OK);
    xseg_destroy(xs);
}
END_TEST

/* A freed block (held in a thread cache or given back), free space, a
 * foreign pointer, another allocator's, NULL: XSEG_ERR_INVALID_POINTER
 * with a message; an allocation that takes a freed place is found. */
START_TEST(block_range_freed_and_foreign)
{
    xseg_t *xs = t_host(NULL), *other = t_host(NULL);
    void *a, *b, *c, *o;
    ck_assert_int_eq(xseg_alloc(xs, 4 * MiB, NULL, &a), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 2 * MiB, NULL, &b), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 1000, NULL, &c), XSEG_OK);
    range_is(xs, (char *)a + MiB, a, 4 * MiB, 4 * MiB); /* a snapshot with a in it */
    ck_assert_int_eq(xseg_free(xs, a), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, c), XSEG_OK);
    range_not(xs, a, NULL);
    ck_assert_ptr_nonnull(strstr(xseg_last_error(), "no live allocation"));
    range_not(xs, (char *)a + MiB, NULL);
    range_not(xs, (char *)c + 10, NULL);
    range_is(xs, (char *)b + 5, b, 2 * MiB, 2 * MiB);
    int on_stack;
    range_not(xs, &on_stack, NULL);
    ck_assert_ptr_nonnull(strstr(xseg_last_error(), "not allocated by this allocator"));
    ck_assert_int_eq(xseg_alloc(other, 4096, NULL, &o), XSEG_OK);
    range_not(xs, (char *)o + 1, NULL);
    ck_assert_int_eq(xseg_block_range(xs, NULL, NULL, NULL, NULL), XSEG_ERR_INVALID_ARG);
    ck_assert_int_eq(xseg_block_range(NULL, b, NULL, NULL, NULL), XSEG_ERR_INVALID_ARG);
    void *a2, *a3;
    ck_assert_int_eq(xseg_alloc(xs, MiB, NULL, &a2), XSEG_OK); /* a's place, smaller */
    ck_assert_int_eq(xseg_alloc(xs, 3 * MiB, NULL, &a3), XSEG_OK);
    size_t r2, r3;
    ck_assert_int_eq(xseg_block_size(xs, a2, &r2, NULL), XSEG_OK);
    ck_assert_int_eq(xseg_block_size(xs, a3, &r3, NULL), XSEG_OK);
    range_is(xs, (char *)a2 + r2 - 1, a2, r2, MiB);
    range_is(xs, (char *)a3 + MiB, a3, r3, 3 * MiB);
    ck_assert_int_eq(xseg_free(other, o), XSEG_OK);
    xseg_destroy(other);
    xseg_destroy(xs);
}
END_TEST

/* A dedicated block (registrable_min, outside the arena): its start, an
 * interior pointer and its last byte; its freed range is nobody's. */
START_TEST(block_range_dedicated)
{
    xseg_t *xs = t_host("host_capacity:256MB,registrable_min:16MB");
    void *d, *s;
    size_t r;
    ck_assert_int_eq(xseg_alloc(xs, 20 * MiB + 3, NULL, &d), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, MiB, NULL, &s), XSEG_OK);
    ck_assert_int_eq(xseg_block_size(xs, d, &r, NULL), XSEG_OK);
    ck_assert_uint_ge(r, 20 * MiB + 3);
    range_is(xs, d, d, r, 20 * MiB + 3);
    range_is(xs, (char *)d + 7 * MiB + 1, d, r, 20 * MiB + 3);
    range_is(xs, (char *)d + r - 1, d, r, 20 * MiB + 3);
    range_not(xs, (char *)d + r, d);
    range_is(xs, (char *)s + 1, s, MiB, MiB);
    ck_assert_int_eq(xseg_free(xs, d), XSEG_OK);
    range_not(xs, (char *)d + MiB, NULL);
    ck_assert_int_eq(xseg_free(xs, s), XSEG_OK);
    xseg_destroy(xs);
}
END_TEST

/* A tag's allocation is found through the parent allocator. */
START_TEST(block_range_tagged)
{
    xseg_t *xs = t_host(NULL);
    int tag;
    void *p;
    ck_assert_int_eq(xseg_tag_id("range_test", &tag), XSEG_OK);
    ck_assert_int_eq(xseg_alloc_tagged(xs, 5 * MiB, NULL, tag, &p), XSEG_OK);
    range_is(xs, (char *)p + 3 * MiB, p, 5 * MiB, 5 * MiB);
    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    range_not(xs, (char *)p + 3 * MiB, NULL);
    xseg_destroy(xs);
}
END_TEST

/* Churn against a list of the live allocations: after each step, probes
 * around random allocations (before, inside, at the last byte, past the
 * end) answer what the list says, so a stale snapshot never shows. */
typedef struct live_ent {
    char *p;
    size_t n, r;
} live_ent;

static const live_ent *oracle(const live_ent *l, int n, const char *q)
{
    for (int i = 0; i < n; i++)
        if (q >= l[i].p && q < l[i].p + l[i].r)
            return &l[i];
    return NULL;
}

static void probe(xseg_t *xs, const live_ent *l, int n, const char *q)
{
    const live_ent *want = oracle(l, n, q);
    if (want)
        range_is(xs, q, want->p, want->r, want->n);
    else
        range_not(xs, q, NULL);
}

START_TEST(block_range_churn_matches_list)
{
    enum { MAXL = 64 };
    xseg_t *xs = t_host(NULL);
    live_ent l[MAXL];
    int n = 0;
    unsigned long long s = 0x9e3779b97f4a7c15ull;
    for (int step = 0; step < 3000; step++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        if (n == MAXL || (n > 0 && s % 3 == 0)) {
            int k = (int)((s >> 8) % (unsigned)n);
            ck_assert_int_eq(xseg_free(xs, l[k].p), XSEG_OK);
            l[k] = l[--n];
        } else {
            size_t sz = ((size_t)1 << ((s >> 12) % 24)) + (size_t)((s >> 40) % 5000);
            void *p;
            ck_assert_int_eq(xseg_alloc(xs, sz, NULL, &p), XSEG_OK);
            l[n] = (live_ent){p, sz, 0};
            ck_assert_int_eq(xseg_block_size(xs, p, &l[n].r, NULL), XSEG_OK);
            n++;
        }
        for (int j = 0; n && j < 6; j++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            const live_ent *e = &l[(s >> 5) % (unsigned)n];
            size_t off = (size_t)((s >> 20) % (e->r * 2));
            probe(xs, l, n, e->p - e->r / 2 + off);
            probe(xs, l, n, e->p + e->r - 1);
            probe(xs, l, n, e->p + e->r);
        }
    }
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(xseg_free(xs, l[i].p), XSEG_OK);
    xseg_destroy(xs);
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
    tcase_add_test(tc, small_classes_up_to_one_mib);
    tcase_add_test(tc, rounding_power2_divisions);
    tcase_add_test(tc, max_split_size_keeps_large_blocks);
    tcase_add_test(tc, caching_off_returns_memory);
    tcase_add_test(tc, stats_json_and_peaks);
    tcase_add_test(tc, default_allocator);
    tcase_add_test(tc, conf_errors_at_create);
    tcase_add_test(tc, cuda_backend_absent);
    tcase_add_test(tc, destroy_releases_everything);
    suite_add_tcase(s, tc);
    TCase *range = tcase_create("block_range");
    tcase_set_timeout(range, 60);
    tcase_add_test(range, block_range_interior);
    tcase_add_test(range, block_range_freed_and_foreign);
    tcase_add_test(range, block_range_dedicated);
    tcase_add_test(range, block_range_tagged);
    tcase_add_test(range, block_range_churn_matches_list);
    suite_add_tcase(s, range);
    return s;
}

int main(void)
{
    return t_run(suite());
}
