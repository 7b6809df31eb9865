/* test_slack.c: the slack governor (release_slack_max, lib/slack.c) on the
 * host backend: off by default; a steady churn (a ring of tensors of mixed
 * sizes, the oldest freed first) raises its grant, within its bound, and
 * cuts the maps the churn costs; a grant the cache fills stays, an unused
 * one shrinks, a trim drops it; a pattern that repeats from the cache
 * raises nothing. */
#include "support_common.h"

#define S1 ((void *)(uintptr_t)0x1001)
#define RING_LIVE 64
#define RING_SIZES 1024

typedef struct {
    uint64_t maps_late; /* map calls in the last half of the passes */
    xseg_stats end;     /* the stats after the last pass */
} ring_result;

static ring_result run_ring(xseg_t *xs, unsigned passes)
{
    void *live[RING_LIVE] = {0};
    ring_result r = {0};
    uint64_t maps_half = 0;
    for (unsigned n = 0; n < passes * RING_SIZES; n++) {
        if (n == passes / 2 * RING_SIZES)
            maps_half = t_stats(xs).driver_calls[XSEG_OP_MAP];
        unsigned slot = n % RING_LIVE;
        if (live[slot])
            ck_assert_int_eq(xseg_free(xs, live[slot]), XSEG_OK);
        ck_assert_int_eq(xseg_alloc(xs, t_ring_size(n % RING_SIZES), S1, &live[slot]), XSEG_OK);
    }
    r.end = t_stats(xs);
    r.maps_late = r.end.driver_calls[XSEG_OP_MAP] - maps_half;
    for (unsigned i = 0; i < RING_LIVE; i++)
        ck_assert_int_eq(xseg_free(xs, live[i]), XSEG_OK);
    return r;
}

START_TEST(off_by_default)
{
    xseg_t *xs = t_host("host_capacity:4GB");
    ring_result r = run_ring(xs, 4);
    ck_assert_uint_eq(r.end.slack_granted, 0);
    xseg_destroy(xs);
}
END_TEST

/* 0.3: room enough for this ring to stop churning (0.2 is not, under
 * reclaim:sync, the host backend's default). */
START_TEST(steady_churn_raises_the_grant_within_its_bound)
{
    xseg_t *off = t_host("host_capacity:4GB");
    ring_result a = run_ring(off, 8);
    xseg_destroy(off);
    xseg_t *xs = t_host("host_capacity:4GB,release_slack_max:0.3");
    ring_result b = run_ring(xs, 8);
    uint64_t budget = b.end.release_budget, max = (uint64_t)(0.3 * (double)budget);
    /* the same peak of live bytes, but for the slabs' and blocks' rounding */
    ck_assert_uint_lt(budget > a.end.release_budget ? budget - a.end.release_budget
                                                    : a.end.release_budget - budget, budget / 100);
    /* mapped stays within the budget plus the grant's bound, and a page's rounding */
    ck_assert_uint_le(b.end.mapped_bytes.peak, budget + max + 2 * b.end.page_size);
    ck_assert_uint_gt(b.end.mapped_bytes.peak, a.end.mapped_bytes.peak); /* memory for calls */
    ck_assert_msg(b.maps_late * 10 < a.maps_late, "maps in the late passes: %llu with the "
                  "governor, %llu without", (unsigned long long)b.maps_late,
                  (unsigned long long)a.maps_late);
    /* the churn stopped, and the grant the cache fills stays */
    ck_assert_uint_gt(b.end.slack_granted, max / 2);
    ck_assert_uint_le(b.end.slack_granted, max);
    t_check_ok(xs);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK);
    ck_assert_uint_eq(t_stats(xs).slack_granted, 0); /* a trim drops it */
    xseg_destroy(xs);
}
END_TEST

/* A bound above what the ring needs: the first raise grants more than the
 * cache comes to hold, and quiet windows take the unused part back, an
 * eighth at a time, until the cache fills all but the top eighth. */
START_TEST(an_unused_grant_shrinks)
{
    xseg_t *xs = t_host("host_capacity:4GB,release_slack_max:0.5");
    ring_result r = run_ring(xs, 8);
    uint64_t budget = r.end.release_budget;
    uint64_t base = budget + (uint64_t)(0.006 * (double)budget); /* release_slack's default */
    uint64_t held = r.end.mapped_bytes.current - base, g = r.end.slack_granted;
    ck_assert_uint_gt(r.end.mapped_bytes.current, base);
    ck_assert_uint_ge(g + r.end.page_size, held);        /* the grant covers what is held */
    ck_assert_msg(g - held < g / 8 + r.end.page_size, "granted %llu, held over the slack %llu",
                  (unsigned long long)g, (unsigned long long)held);
    xseg_destroy(xs);
}
END_TEST

/* The same sizes allocated and freed together, pass after pass: every pass
 * after the first comes from the cache, nothing is mapped again. */
START_TEST(a_pattern_served_by_the_cache_raises_nothing)
{
    xseg_t *xs = t_host("host_capacity:4GB,release_slack_max:0.2");
    void *p[RING_LIVE];
    for (unsigned pass = 0; pass < 40; pass++) {
        for (unsigned i = 0; i < RING_LIVE; i++)
            ck_assert_int_eq(xseg_alloc(xs, t_ring_size(i), S1, &p[i]), XSEG_OK);
        for (unsigned i = 0; i < RING_LIVE; i++)
            ck_assert_int_eq(xseg_free(xs, p[i]), XSEG_OK);
    }
    ck_assert_uint_eq(t_stats(xs).slack_granted, 0);
    xseg_destroy(xs);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("slack");
    TCase *tc = tcase_create("governor");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, off_by_default);
    tcase_add_test(tc, steady_churn_raises_the_grant_within_its_bound);
    tcase_add_test(tc, an_unused_grant_shrinks);
    tcase_add_test(tc, a_pattern_served_by_the_cache_raises_nothing);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return t_run(suite());
}
