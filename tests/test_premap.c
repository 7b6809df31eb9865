/* test_premap.c: premap (docs/config.md): growth at the arena's frontier
 * maps ahead in few large handles once it is sequential, bounded by the budget, the cap and the
 * release threshold; the reserve is cached memory that trim gives back;
 * premap:off maps one handle per page as before. */
#include "internal.h"
#include "support_common.h"

#define MiB ((size_t)1 << 20)
#define N 100

/* N sequential 2 MiB allocations; returns the creates they made. */
static uint64_t grow(xseg_t *xs, void **p)
{
    uint64_t c0 = t_stats(xs).driver_calls[XSEG_OP_CREATE];
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(xseg_alloc(xs, 2 * MiB, NULL, &p[i]), XSEG_OK);
        t_fill(p[i], 4096, (uint32_t)i);
    }
    return t_stats(xs).driver_calls[XSEG_OP_CREATE] - c0;
}

static void free_all(xseg_t *xs, void **p)
{
    for (int i = 0; i < N; i++) {
        ck_assert(t_check(p[i], 4096, (uint32_t)i));
        ck_assert_int_eq(xseg_free(xs, p[i]), XSEG_OK);
    }
}

/* Check xs, free p[0..n), trim: nothing stays mapped (the reserve
 * included); destroy. */
static void free_trim_destroy(xseg_t *xs, void **p, int n)
{
    T_CHECK(xs);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(xseg_free(xs, p[i]), XSEG_OK);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK);
    ck_assert_uint_eq(t_stats(xs).mapped_bytes.current, 0);
    xseg_destroy(xs);
}

START_TEST(sequential_growth_maps_few_handles)
{
    xseg_t *xs = t_host("premap:64MB,thread_cache:off");
    void *p[N];
    uint64_t creates = grow(xs, p);
    /* The first XSEG_PREMAP_STREAK - 1 pages one by one (growth is not yet
     * known to be sequential), then 64 MiB runs in powers of two. */
    ck_assert_uint_le(creates, 31 + 8);
    xseg_stats s = t_stats(xs);
    ck_assert_uint_le(s.mapped_bytes.peak, (N * 2 + 64) * MiB); /* the reserve is bounded */
    ck_assert_uint_gt(xs->premapped, 0);
    T_CHECK(xs);
    free_all(xs, p);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK);
    ck_assert_uint_eq(t_stats(xs).mapped_bytes.current, 0); /* reserve included */
    T_CHECK(xs);
    xseg_destroy(xs);
}
END_TEST

/* A long streak: past XSEG_PREMAP_WHOLE allocations each refill is one
 * handle (in powers of two a 48 MiB refill would be two or more). */
START_TEST(a_long_streak_refills_in_one_handle)
{
    enum { LONG = 600, TAIL = 300 };
    xseg_t *xs = t_host("premap:64MB,thread_cache:off");
    static void *p[LONG];
    uint64_t c0 = 0;
    for (int i = 0; i < LONG; i++) {
        if (i == LONG - TAIL)
            c0 = t_stats(xs).driver_calls[XSEG_OP_CREATE];
        ck_assert_int_eq(xseg_alloc(xs, 2 * MiB, NULL, &p[i]), XSEG_OK);
    }
    uint64_t creates = t_stats(xs).driver_calls[XSEG_OP_CREATE] - c0;
    /* A refill comes when a quarter of the 64 MiB is left: one per 24
     * allocations or so, one create each. */
    ck_assert_uint_ge(creates, 1);
    ck_assert_uint_le(creates, TAIL * 2 / 48 + 2);
    ck_assert_uint_le(t_stats(xs).mapped_bytes.peak, (LONG * 2 + 64) * MiB);
    free_trim_destroy(xs, p, LONG);
}
END_TEST

/* A fresh allocator: its peak grows with the streak, so a budget from the
 * peak alone (1/128 of it) starts small and 1500 x 2 MiB took 440 handles;
 * from the 256th allocation on the budget is also 1/64 of the streak's
 * growth (299 handles), and no more than that stays mapped over live. */
START_TEST(a_fresh_streak_sizes_its_reserve_from_itself)
{
    enum { M = 1500 };
    xseg_t *xs = t_host("thread_cache:off"); /* premap:auto */
    static void *p[M];
    for (int i = 0; i < M; i++)
        ck_assert_int_eq(xseg_alloc(xs, 2 * MiB, NULL, &p[i]), XSEG_OK);
    xseg_stats s = t_stats(xs);
    size_t live = (size_t)M * 2 * MiB;
    ck_assert_uint_le(s.driver_calls[XSEG_OP_CREATE], 340);
    ck_assert_uint_le(s.mapped_bytes.peak, live + live / 64 + 4 * MiB);
    free_trim_destroy(xs, p, M);
}
END_TEST

START_TEST(off_maps_a_handle_per_page)
{
    xseg_t *xs = t_host("premap:off,thread_cache:off");
    void *p[N];
    ck_assert_uint_eq(grow(xs, p), N);
    ck_assert_uint_eq(t_stats(xs).mapped_bytes.peak, N * 2 * MiB);
    ck_assert_uint_eq(xs->premapped, 0);
    free_all(xs, p);
    xseg_destroy(xs);
}
END_TEST

START_TEST(the_cap_bounds_the_reserve)
{
    xseg_t *xs = t_host("premap:64MB,thread_cache:off,max_mapped:210MB");
    void *p[N];
    grow(xs, p); /* 200 MiB live: the reserve may not pass the cap */
    ck_assert_uint_le(t_stats(xs).mapped_bytes.peak, 210 * MiB);
    T_CHECK(xs);
    free_all(xs, p);
    xseg_destroy(xs);
}
END_TEST

/* Memory a stream used and trim gave back is neutral space again, merged
 * with the free space after it: growth there is at the frontier and gets
 * its reserve (it stayed the stream's, out of reach of premap, and each
 * page was a create of its own: 10,000 x 2 MiB after 40 x 1 GiB took the
 * host model of the H200 384 ms instead of 18). */
START_TEST(a_trimmed_arena_is_the_frontier_again)
{
    xseg_t *xs = t_host("premap:64MB,thread_cache:off");
    void *big[8], *p[N];
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(xseg_alloc(xs, 64 * MiB, NULL, &big[i]), XSEG_OK);
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(xseg_free(xs, big[i]), XSEG_OK);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK);
    ck_assert_uint_eq(t_stats(xs).mapped_bytes.current, 0);
    ck_assert_ptr_null(xs->first_block->owner); /* one neutral free block */
    ck_assert_ptr_null(xs->first_block->anext);
    ck_assert_uint_le(grow(xs, p), 31 + 8);
    ck_assert_uint_gt(xs->premapped, 0);
    T_CHECK(xs);
    free_all(xs, p);
    xseg_destroy(xs);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("premap");
    TCase *tc = tcase_create("premap");
    tcase_add_test(tc, sequential_growth_maps_few_handles);
    tcase_add_test(tc, a_long_streak_refills_in_one_handle);
    tcase_add_test(tc, a_fresh_streak_sizes_its_reserve_from_itself);
    tcase_add_test(tc, off_maps_a_handle_per_page);
    tcase_add_test(tc, the_cap_bounds_the_reserve);
    tcase_add_test(tc, a_trimmed_arena_is_the_frontier_again);
    suite_add_tcase(s, tc);
    return t_run(s);
}
