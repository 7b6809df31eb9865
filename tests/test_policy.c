/* test_policy.c: stream-ordered reuse and record_stream deferral, out of
 * memory with retry and its message, caps, GC and release thresholds,
 * trim, on the host backend (events held pending through its controls). */
#include <string.h>

#include "driver_host.h"
#include "support_common.h"

#define S1 ((void *)(uintptr_t)0x1001)
#define S2 ((void *)(uintptr_t)0x1002)

START_TEST(same_stream_reuses_at_once)
{
    xseg_t *xs = t_host(NULL);
    void *p, *q, *r;
    ck_assert_int_eq(xseg_alloc(xs, 8 * MiB, S1, &p), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    xseg_host_hold_stream(t_host_ctx(xs), S1, 1); /* S1's kernels still running */
    ck_assert_int_eq(xseg_alloc(xs, 8 * MiB, S2, &q), XSEG_OK);
    ck_assert_ptr_ne(p, q); /* another stream never gets S1's block while S1 is busy */
    ck_assert_int_eq(xseg_alloc(xs, 8 * MiB, S1, &r), XSEG_OK);
    ck_assert_ptr_eq(p, r); /* S1 itself reuses it at once */
    xseg_host_hold_stream(t_host_ctx(xs), S1, 0);
    /* small slots too */
    void *a, *b;
    ck_assert_int_eq(xseg_alloc(xs, 700, S1, &a), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, a), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 700, S2, &b), XSEG_OK);
    ck_assert_ptr_ne(a, b);
    ck_assert_int_eq(xseg_free(xs, b), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 700, S1, &b), XSEG_OK);
    ck_assert_ptr_eq(a, b);
    xseg_destroy(xs);
}
END_TEST

static void deferred_case(size_t size)
{
    xseg_t *xs = t_host(NULL);
    void *h = t_host_ctx(xs);
    void *p, *q, *r;
    ck_assert_int_eq(xseg_alloc(xs, size, S1, &p), XSEG_OK);
    ck_assert_int_eq(xseg_record_stream(xs, p, S2), XSEG_OK);
    ck_assert_int_eq(xseg_record_stream(xs, p, S1), XSEG_OK); /* own stream: no-op */
    xseg_host_hold_stream(h, S2, 1); /* a kernel on S2 still uses p */
    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, p), XSEG_ERR_DOUBLE_FREE);
    ck_assert_uint_eq(t_stats(xs).deferred_frees, 1);
    ck_assert_int_eq(xseg_alloc(xs, size, S1, &q), XSEG_OK);
    ck_assert_ptr_ne(p, q); /* not reused while S2's event is pending */
    ck_assert_int_eq(xseg_free(xs, q), XSEG_OK);
    xseg_host_hold_stream(h, S2, 0); /* the kernel finished */
    ck_assert_int_eq(xseg_alloc(xs, size, S1, &r), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, size, S1, &q), XSEG_OK);
    ck_assert_msg(r == p || q == p, "block not reused after the event completed");
    xseg_destroy(xs);
}

START_TEST(record_stream_defers_large)
{
    deferred_case(8 * MiB);
}
END_TEST

START_TEST(record_stream_defers_small)
{
    deferred_case(1000);
}
END_TEST

START_TEST(trim_waits_for_pending_uses)
{
    xseg_t *xs = t_host(NULL);
    void *h = t_host_ctx(xs);
    void *p;
    ck_assert_int_eq(xseg_alloc(xs, 4 * MiB, S1, &p), XSEG_OK);
    ck_assert_int_eq(xseg_record_stream(xs, p, S2), XSEG_OK);
    xseg_host_hold_stream(h, S2, 1);
    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    uint64_t syncs = xseg_host_sync_count(h);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK); /* waits on S2's event */
    ck_assert_uint_gt(xseg_host_sync_count(h), syncs);
    ck_assert_uint_eq(t_stats(xs).mapped_bytes.current, 0);
    ck_assert(t_faults(p));
    xseg_host_hold_stream(h, S2, 0);
    xseg_destroy(xs);
}
END_TEST

START_TEST(oom_reports_numbers_and_recovers)
{
    xseg_t *xs = t_host("host_capacity:64MB");
    void *a, *b;
    ck_assert_int_eq(xseg_alloc(xs, 40 * MiB, S1, &a), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 40 * MiB, S1, &b), XSEG_ERR_OOM);
    ck_assert_ptr_null(b);
    const char *m = xseg_last_error();
    ck_assert_msg(strstr(m, "requested 40.00 MiB") && strstr(m, "in use 40.00 MiB") &&
                      strstr(m, "mapped 40.00 MiB") && strstr(m, "cached") && strstr(m, "cap") &&
                      strstr(m, "device free 24.00 MiB"),
                  "message lacks numbers: %s", m);
    xseg_stats s = t_stats(xs);
    ck_assert_uint_eq(s.ooms, 1);
    ck_assert_uint_eq(s.alloc_retries, 2); /* alloc_retries:3 = two more attempts */
    ck_assert_uint_eq(s.mapped_bytes.current, 40 * MiB); /* failed attempt left nothing */
    ck_assert_uint_eq(s.allocated_bytes.current, 40 * MiB);
    ck_assert_int_eq(xseg_free(xs, a), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 40 * MiB, S1, &b), XSEG_OK);
    xseg_destroy(xs);
}
END_TEST

START_TEST(oom_retry_reclaims_other_streams_cache)
{
    /* release_wait:off, so that the wait comes from the retry ladder */
    xseg_t *xs = t_host("host_capacity:64MB,release_wait:off");
    void *h = t_host_ctx(xs);
    void *a, *b;
    ck_assert_int_eq(xseg_alloc(xs, 48 * MiB, S1, &a), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, a), XSEG_OK); /* cached for S1 */
    xseg_host_hold_stream(h, S1, 1);             /* S1 still busy */
    uint64_t syncs = xseg_host_sync_count(h);
    ck_assert_int_eq(xseg_alloc(xs, 48 * MiB, S2, &b), XSEG_OK);
    xseg_stats s = t_stats(xs);
    ck_assert_uint_ge(s.alloc_retries, 1);
    ck_assert_uint_gt(xseg_host_sync_count(h), syncs); /* waited for S1 first */
    ck_assert_uint_eq(s.mapped_bytes.current, 48 * MiB);
    xseg_host_hold_stream(h, S1, 0);
    xseg_destroy(xs);
    /* With one attempt only, the same request fails. */
    xs = t_host("host_capacity:64MB,alloc_retries:1,release_wait:off");
    h = t_host_ctx(xs);
    ck_assert_int_eq(xseg_alloc(xs, 48 * MiB, S1, &a), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, a), XSEG_OK);
    xseg_host_hold_stream(h, S1, 1);
    ck_assert_int_eq(xseg_alloc(xs, 48 * MiB, S2, &b), XSEG_ERR_OOM);
    xseg_host_hold_stream(h, S1, 0);
    ck_assert_uint_eq(t_stats(xs).alloc_retries, 0);
    xseg_destroy(xs);
}
END_TEST

START_TEST(caps_hold)
{
    xseg_t *xs = t_host("max_mapped:32MB");
    void *a, *b;
    ck_assert_int_eq(xseg_alloc(xs, 30 * MiB, S1, &a), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 4 * MiB, S1, &b), XSEG_ERR_OOM);
    ck_assert_ptr_nonnull(strstr(xseg_last_error(), "cap 32.00 MiB"));
    ck_assert_uint_eq(t_stats(xs).mapped_cap, 32 * MiB);
    ck_assert_uint_le(t_stats(xs).mapped_bytes.peak, 32 * MiB);
    ck_assert_int_eq(xseg_free(xs, a), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 32 * MiB, S2, &b), XSEG_OK); /* cache reclaimed */
    ck_assert_uint_le(t_stats(xs).mapped_bytes.peak, 32 * MiB);
    xseg_destroy(xs);
    xs = t_host("host_capacity:64MB,memory_fraction:0.5");
    ck_assert_uint_eq(t_stats(xs).mapped_cap, 32 * MiB);
    ck_assert_int_eq(xseg_alloc(xs, 34 * MiB, S1, &a), XSEG_ERR_OOM);
    ck_assert_int_eq(xseg_alloc(xs, 32 * MiB, S1, &a), XSEG_OK);
    xseg_destroy(xs);
}
END_TEST

START_TEST(gc_threshold_releases_oldest)
{
    xseg_t *xs = t_host("max_mapped:64MB,gc_threshold:0.5,release_threshold:unlimited");
    void *a, *b, *c;
    ck_assert_int_eq(xseg_alloc(xs, 12 * MiB, S1, &a), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 2 * MiB, S1, &c), XSEG_OK); /* keeps a, b apart */
    ck_assert_int_eq(xseg_alloc(xs, 12 * MiB, S1, &b), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, a), XSEG_OK);                 /* oldest */
    ck_assert_int_eq(xseg_free(xs, b), XSEG_OK);
    ck_assert_uint_eq(t_stats(xs).mapped_bytes.current, 26 * MiB);
    void *d;
    ck_assert_int_eq(xseg_alloc(xs, 16 * MiB, S2, &d), XSEG_OK); /* 42 MiB > 32: GC */
    xseg_stats s = t_stats(xs);
    ck_assert_uint_eq(s.gc_runs, 1);
    /* 42 - 32 = 10 MiB released, from the oldest free block (a); b kept */
    ck_assert_uint_eq(s.mapped_bytes.current, 32 * MiB);
    ck_assert_uint_eq(s.released_bytes, 10 * MiB);
    ck_assert(t_faults(a));
    ck_assert(!t_faults((char *)a + 10 * MiB));
    ck_assert(!t_faults(b));
    xseg_destroy(xs);
}
END_TEST

/* 32 MiB cached for S1, then 40 MiB on S2: too large to adopt S1's block,
 * so 40 MiB are mapped and the threshold decides what stays cached.  Both
 * in `tag` (-1: untagged); returns the mapped bytes of the allocator that
 * served them (the 40 MiB block stays live). */
static size_t cross_stream(xseg_t *xs, int tag)
{
    void *a, *b;
    if (tag < 0) {
        ck_assert_int_eq(xseg_alloc(xs, 32 * MiB, S1, &a), XSEG_OK);
        ck_assert_int_eq(xseg_free(xs, a), XSEG_OK);
        ck_assert_int_eq(xseg_alloc(xs, 40 * MiB, S2, &b), XSEG_OK);
        return t_stats(xs).mapped_bytes.current;
    }
    ck_assert_int_eq(xseg_alloc_tagged(xs, 32 * MiB, S1, tag, &a), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, a), XSEG_OK);
    ck_assert_int_eq(xseg_alloc_tagged(xs, 40 * MiB, S2, tag, &b), XSEG_OK);
    xseg_tag_stats ts = {.size = sizeof ts};
    ck_assert_int_eq(xseg_tag_stats_get(xs, tag, &ts), XSEG_OK);
    return ts.mapped_bytes.current;
}

static size_t mapped_after_cross_stream(const char *conf)
{
    xseg_t *xs = t_host(conf);
    size_t m = cross_stream(xs, -1);
    xseg_destroy(xs);
    return m;
}

START_TEST(release_thresholds)
{
    /* auto: mapped stays under the peak live bytes (40 MiB) */
    ck_assert_uint_eq(mapped_after_cross_stream(NULL), 40 * MiB);
    ck_assert_uint_eq(mapped_after_cross_stream("release_threshold:unlimited"), 72 * MiB);
    ck_assert_uint_eq(mapped_after_cross_stream("release_threshold:8MB"), 48 * MiB);
    ck_assert_uint_eq(mapped_after_cross_stream("release_threshold:0"), 40 * MiB);
    /* auto with slack: up to the peak live bytes x 1.5 = 60 MiB stays mapped */
    ck_assert_uint_eq(mapped_after_cross_stream("release_slack:0.5"), 60 * MiB);
    ck_assert_uint_eq(mapped_after_cross_stream("release_slack:0.9"), 72 * MiB);
}
END_TEST

/* 100 MiB used and freed, then cross_stream's pattern: with the earlier
 * peak as the budget its 72 MiB stay mapped; a trim between the two
 * restarts the budget, and the second pattern releases at its own peak
 * (40 MiB), as in a fresh allocator. */
static size_t mapped_after_earlier_peak(int trim_between)
{
    xseg_t *xs = t_host(NULL);
    void *big;
    ck_assert_int_eq(xseg_alloc(xs, 100 * MiB, S1, &big), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, big), XSEG_OK);
    ck_assert_uint_eq(t_stats(xs).release_budget, 100 * MiB);
    if (trim_between) {
        ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK);
        ck_assert_uint_eq(t_stats(xs).mapped_bytes.current, 0);
        ck_assert_uint_eq(t_stats(xs).release_budget, 0); /* nothing allocated, nothing kept */
    }
    size_t m = cross_stream(xs, -1);
    ck_assert_uint_eq(t_stats(xs).release_budget, trim_between ? 40 * MiB : 100 * MiB);
    xseg_destroy(xs);
    return m;
}

START_TEST(trim_restarts_the_release_budget)
{
    ck_assert_uint_eq(mapped_after_earlier_peak(0), 100 * MiB); /* the 100 MiB stay cached */
    ck_assert_uint_eq(mapped_after_earlier_peak(1), 40 * MiB);
}
END_TEST

/* expected_peak: release_threshold:auto counts on it from the start, and
 * again after a trim; a tag's allocator does not (the hint is for the
 * program as a whole). */
START_TEST(expected_peak_is_the_budget_from_the_start)
{
    ck_assert_uint_eq(mapped_after_cross_stream("expected_peak:100MB"), 72 * MiB);
    ck_assert_uint_eq(mapped_after_cross_stream("expected_peak:64MB"), 64 * MiB);
    ck_assert_uint_eq(mapped_after_cross_stream("expected_peak:8MB"), 40 * MiB); /* below: as auto */
    xseg_t *xs = t_host("expected_peak:100MB");
    void *a;
    ck_assert_int_eq(xseg_alloc(xs, 80 * MiB, S1, &a), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, a), XSEG_OK);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK);
    ck_assert_uint_eq(t_stats(xs).release_budget, 100 * MiB); /* the hint outlives the trim */
    ck_assert_uint_eq(cross_stream(xs, -1), 72 * MiB);
    int tag;
    ck_assert_int_eq(xseg_tag_id("expected_peak_test", &tag), XSEG_OK);
    ck_assert_uint_eq(cross_stream(xs, tag), 40 * MiB); /* the tag releases at its own peak */
    xseg_destroy(xs);
}
END_TEST

/* xseg_set_expected_peak: the key at run time, and 0 clears it (the
 * conf's too). */
static size_t mapped_after_hint_at_run_time(const char *conf, size_t hint)
{
    xseg_t *xs = t_host(conf);
    ck_assert_int_eq(xseg_set_expected_peak(xs, hint), XSEG_OK);
    size_t m = cross_stream(xs, -1);
    xseg_destroy(xs);
    return m;
}

START_TEST(expected_peak_set_at_run_time)
{
    ck_assert_uint_eq(mapped_after_hint_at_run_time(NULL, 100 * MiB), 72 * MiB);
    ck_assert_uint_eq(mapped_after_hint_at_run_time(NULL, 0), 40 * MiB);
    ck_assert_uint_eq(mapped_after_hint_at_run_time("expected_peak:100MB", 0), 40 * MiB);
}
END_TEST

/* placement:start (default) carves from the start of the chosen free block,
 * so the rest stays one block; the next request follows it. */
START_TEST(placement_start_packs_in_order)
{
    xseg_t *xs = t_host(NULL);
    void *a, *x, *p, *q;
    ck_assert_int_eq(xseg_alloc(xs, 32 * MiB, S1, &a), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, MiB, S1, &x), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, a), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 3 * MiB + 4096, S1, &p), XSEG_OK);
    ck_assert_ptr_eq(p, a);
    ck_assert_int_eq(xseg_alloc(xs, 5 * MiB, S1, &q), XSEG_OK);
    ck_assert_ptr_eq((char *)q, (char *)a + 3 * MiB + 4096);
    ck_assert_uint_eq(t_stats(xs).largest_free_block >= 23 * MiB, 1);
    xseg_destroy(xs);
}
END_TEST

/* A block of whole pages starts on a page boundary when that saves a page
 * (16 MiB: 8 pages, not 9); other sizes stay at the start of the free
 * block.  Once its neighbours are gone only its own 8 pages stay mapped. */
START_TEST(placement_start_aligns_whole_pages)
{
    xseg_t *xs = t_host(NULL);
    void *a, *r, *q;
    ck_assert_int_eq(xseg_alloc(xs, 3 * MiB + 4096, S1, &a), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 5 * MiB, S1, &r), XSEG_OK);
    ck_assert_ptr_eq((char *)r, (char *)a + 3 * MiB + 4096);
    ck_assert_int_eq(xseg_alloc(xs, 16 * MiB, S1, &q), XSEG_OK);
    ck_assert_ptr_eq((char *)q, (char *)a + 10 * MiB);
    ck_assert_int_eq(xseg_free(xs, a), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, r), XSEG_OK);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK);
    ck_assert_uint_eq(t_stats(xs).mapped_bytes.current, 16 * MiB);
    ck_assert(!t_faults(q) && !t_faults((char *)q + 16 * MiB - 1));
    xseg_destroy(xs);
}
END_TEST

/* 300 MiB in one request: auto maps it with 256+32+8+4 MiB handles,
 * handle_size:page with one 2 MiB handle per page, 32MB with 9 of 32 MiB
 * then 8+4 MiB. */
static uint64_t handles_for_300mib(const char *conf)
{
    xseg_t *xs = t_host(conf);
    void *p;
    ck_assert_int_eq(xseg_alloc(xs, 300 * MiB, S1, &p), XSEG_OK);
    uint64_t n = t_stats(xs).handles.current;
    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    xseg_destroy(xs);
    return n;
}

START_TEST(handle_size_sets_handles)
{
    ck_assert_uint_eq(handles_for_300mib(NULL), 4);
    ck_assert_uint_eq(handles_for_300mib("handle_size:page"), 150);
    ck_assert_uint_eq(handles_for_300mib("handle_size:32MB"), 9 + 2);
}
END_TEST

/* The GPU still uses S1's cached 32 MiB when S2 needs 40 MiB: with
 * release_wait (the default) xseg waits for S1 and unmaps its block, so
 * mapped memory stays at the peak of live bytes; without, it maps over. */
static size_t mapped_while_busy(const char *conf, uint64_t *waits)
{
    xseg_t *xs = t_host(conf);
    void *h = t_host_ctx(xs);
    void *a, *b;
    ck_assert_int_eq(xseg_alloc(xs, 32 * MiB, S1, &a), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, a), XSEG_OK);
    xseg_host_hold_stream(h, S1, 1);
    uint64_t syncs = xseg_host_sync_count(h);
    ck_assert_int_eq(xseg_alloc(xs, 40 * MiB, S2, &b), XSEG_OK);
    *waits = xseg_host_sync_count(h) - syncs;
    size_t m = t_stats(xs).mapped_bytes.peak;
    ck_assert(!t_faults(b) && !t_faults((char *)b + 40 * MiB - 1));
    xseg_host_hold_stream(h, S1, 0);
    xseg_destroy(xs);
    return m;
}

START_TEST(release_waits_for_the_gpu)
{
    uint64_t waits;
    ck_assert_uint_eq(mapped_while_busy(NULL, &waits), 40 * MiB);
    ck_assert_uint_eq(waits, 1);
    ck_assert_uint_eq(mapped_while_busy("release_wait:off", &waits), 72 * MiB);
    ck_assert_uint_eq(waits, 0);
    /* the same with a lagging GPU (host_event_lag) instead of a held stream */
    xseg_t *xs = t_host("host_event_lag:1000");
    void *a, *b;
    ck_assert_int_eq(xseg_alloc(xs, 32 * MiB, S1, &a), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, a), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 40 * MiB, S2, &b), XSEG_OK);
    ck_assert_uint_eq(t_stats(xs).mapped_bytes.peak, 40 * MiB);
    ck_assert_uint_ge(t_stats(xs).syncs, 1);
    xseg_destroy(xs);
}
END_TEST

/* Over the release threshold, a growth takes the pages of the stream's
 * cached blocks (moving their handles) instead of new memory, without
 * waiting for the GPU; the old range is unmapped once the GPU is done. */
START_TEST(growth_moves_cached_pages)
{
    xseg_t *xs = t_host(NULL);
    void *h = t_host_ctx(xs);
    void *a, *x, *b, *c;
    ck_assert_int_eq(xseg_alloc(xs, 32 * MiB, S1, &a), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, MiB, S1, &x), XSEG_OK); /* keeps a's place apart */
    ck_assert_int_eq(xseg_free(xs, a), XSEG_OK);
    xseg_host_hold_stream(h, S1, 1); /* the GPU still runs a's work */
    uint64_t syncs = xseg_host_sync_count(h), creates = t_stats(xs).driver_calls[XSEG_OP_CREATE];
    ck_assert_int_eq(xseg_alloc(xs, 40 * MiB, S1, &b), XSEG_OK);
    ck_assert_msg((char *)b >= (char *)a + 32 * MiB, "b reused a's range");
    xseg_stats st = t_stats(xs);
    ck_assert_uint_eq(xseg_host_sync_count(h), syncs); /* no wait */
    ck_assert_uint_eq(st.mapped_bytes.peak, 34 * MiB + 8 * MiB); /* 16 pages moved */
    ck_assert_uint_eq(st.driver_calls[XSEG_OP_CREATE] - creates, 4); /* 8 MiB new */
    t_fill(b, 40 * MiB, 3);
    ck_assert(t_check(b, 40 * MiB, 3));
    ck_assert(!t_faults(a)); /* old mapping kept while the GPU may use it */
    ck_assert_uint_eq(st.moved_bytes, 32 * MiB);
    ck_assert_uint_eq(st.unmapping_bytes, 32 * MiB);
    static char snap[1 << 20];
    ck_assert_int_eq(xseg_snapshot_json(xs, snap, sizeof snap, NULL), XSEG_OK);
    ck_assert_ptr_nonnull(strstr(snap, "\"state\":\"unmapping\""));
    ck_assert_int_eq(xseg_alloc(xs, 30 * MiB, S1, &c), XSEG_OK);
    ck_assert_msg((char *)c + 30 * MiB <= (char *)a || (char *)c >= (char *)a + 32 * MiB,
                  "a range still mapped to b's memory was handed out");
    ck_assert_int_eq(xseg_free(xs, c), XSEG_OK);
    xseg_host_hold_stream(h, S1, 0);
    ck_assert_int_eq(xseg_trim(xs, SIZE_MAX, NULL), XSEG_OK); /* GPU done: old range goes */
    ck_assert_uint_eq(t_stats(xs).unmapping_bytes, 0);
    ck_assert_uint_eq(t_stats(xs).moved_bytes, 32 * MiB);
    ck_assert_int_eq(xseg_snapshot_json(xs, snap, sizeof snap, NULL), XSEG_OK);
    ck_assert_ptr_null(strstr(snap, "unmapping"));
    ck_assert(t_faults(a));
    ck_assert(t_check(b, 40 * MiB, 3));
    ck_assert_int_eq(xseg_free(xs, b), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, x), XSEG_OK);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK);
    ck_assert_uint_eq(t_stats(xs).mapped_bytes.current, 0);
    xseg_destroy(xs);
}
END_TEST

/* A request larger than every cached block of its stream is placed over
 * the largest one and the neutral space beside it ("stretch"): the cached
 * pages are reused in place, only the rest is mapped, nothing is moved and
 * nothing waits for the GPU (same stream). */
START_TEST(growth_stretches_cached_block)
{
    xseg_t *xs = t_host(NULL);
    void *h = t_host_ctx(xs);
    void *g, *a, *x, *b;
    ck_assert_int_eq(xseg_alloc(xs, 16 * MiB, S1, &g), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 32 * MiB, S1, &a), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, MiB, S1, &x), XSEG_OK); /* live after a */
    ck_assert_ptr_eq((char *)a, (char *)g + 16 * MiB);
    ck_assert_int_eq(xseg_free(xs, g), XSEG_OK);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK); /* g's range: neutral, unmapped */
    t_fill(a, 32 * MiB, 5);
    ck_assert_int_eq(xseg_free(xs, a), XSEG_OK);
    xseg_host_hold_stream(h, S1, 1);
    xseg_stats s0 = t_stats(xs);
    uint64_t syncs = xseg_host_sync_count(h);
    ck_assert_int_eq(xseg_alloc(xs, 40 * MiB, S1, &b), XSEG_OK);
    ck_assert_ptr_eq((char *)b, (char *)a - 8 * MiB); /* a's pages under b's tail */
    xseg_stats s1 = t_stats(xs);
    ck_assert_uint_eq(s1.mapped_bytes.current - s0.mapped_bytes.current, 8 * MiB);
    ck_assert_uint_eq(s1.moved_bytes, s0.moved_bytes);
    ck_assert_uint_eq(xseg_host_sync_count(h), syncs);
    ck_assert(t_check(a, 32 * MiB, 5)); /* reused in place: same memory */
    t_fill(b, 40 * MiB, 6);
    ck_assert(t_check(b, 40 * MiB, 6));
    xseg_host_hold_stream(h, S1, 0);
    ck_assert_int_eq(xseg_free(xs, b), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, x), XSEG_OK);
    xseg_destroy(xs);
}
END_TEST

/* 300 MiB on S1 (handles 256+32+8+4 MiB) freed; then, while the GPU still
 * runs its work (no split possible now), l1 and l2 of 100 MiB each carved
 * from it, both inside the 256 MiB handle.  q[0..2]: event queries before
 * l1, after l1, after l2. */
static xseg_t *two_inside_a_handle(void **a, void **l1, void **l2, uint64_t q[3])
{
    xseg_t *xs = t_host("release_wait:off,host_capacity:8GB");
    ck_assert_int_eq(xseg_alloc(xs, 300 * MiB, S1, a), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, *a), XSEG_OK);
    xseg_host_hold_stream(t_host_ctx(xs), S1, 1);
    q[0] = t_stats(xs).driver_calls[XSEG_OP_EVENT_QUERY];
    ck_assert_int_eq(xseg_alloc(xs, 100 * MiB, S1, l1), XSEG_OK);
    q[1] = t_stats(xs).driver_calls[XSEG_OP_EVENT_QUERY];
    ck_assert_int_eq(xseg_alloc(xs, 100 * MiB, S1, l2), XSEG_OK);
    q[2] = t_stats(xs).driver_calls[XSEG_OP_EVENT_QUERY];
    ck_assert_ptr_eq(*l1, *a);
    ck_assert_ptr_eq((char *)*l2, (char *)*a + 100 * MiB);
    return xs;
}

/* Carving part of a cached block that a large handle backs asks whether
 * the GPU is done (to split the handle) only when every other block the
 * handle backs is free: one that also backs a live block can never be
 * split, so nothing is queried or waited for. */
START_TEST(split_checks_gpu_only_when_possible)
{
    void *a, *l1, *l2;
    uint64_t q[3];
    xseg_t *xs = two_inside_a_handle(&a, &l1, &l2, q);
    ck_assert_uint_gt(q[1], q[0]); /* l1: a split was possible, the GPU was asked */
    ck_assert_uint_eq(q[2], q[1]); /* l2: the handle also backs l1 (live) */
    t_fill(l2, 100 * MiB, 7);
    ck_assert(t_check(l2, 100 * MiB, 7));
    xseg_host_hold_stream(t_host_ctx(xs), S1, 0);
    ck_assert_int_eq(xseg_free(xs, l1), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, l2), XSEG_OK);
    xseg_destroy(xs);
}
END_TEST

/* A large handle may back free blocks of several owners (a stream's cache,
 * another's, neutral space), which do not merge: it is split when all of
 * them are free and idle, not only b's immediate neighbours. */
START_TEST(split_spans_free_blocks_of_several_owners)
{
    void *a, *l1, *l2, *m, *b;
    uint64_t q[3];
    xseg_t *xs = two_inside_a_handle(&a, &l1, &l2, q);
    void *h = t_host_ctx(xs);
    ck_assert_int_eq(xseg_free(xs, l1), XSEG_OK);
    xseg_host_hold_stream(h, S1, 0);
    ck_assert_int_eq(xseg_alloc(xs, 90 * MiB, S2, &m), XSEG_OK); /* adopts l1's place */
    ck_assert_ptr_eq(m, a);
    ck_assert_int_eq(xseg_free(xs, l2), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, m), XSEG_OK);
    /* [0, 90) S2's cache, [90, 100) neutral, [100, 300) S1's cache */
    xseg_stats s0 = t_stats(xs);
    ck_assert_uint_eq(s0.mapped_bytes.current, 300 * MiB);
    ck_assert_int_eq(xseg_alloc(xs, 50 * MiB, S1, &b), XSEG_OK);
    ck_assert_msg((char *)b >= (char *)a + 100 * MiB && (char *)b < (char *)a + 256 * MiB,
                  "b not carved from S1's cache over the handle");
    xseg_stats s1 = t_stats(xs);
    ck_assert_uint_eq(s1.driver_calls[XSEG_OP_RELEASE] - s0.driver_calls[XSEG_OP_RELEASE], 1);
    ck_assert_uint_lt(s1.mapped_bytes.current, 300 * MiB - 150 * MiB); /* only b's pages again */
    t_fill(b, 50 * MiB, 8);
    ck_assert(t_check(b, 50 * MiB, 8));
    ck_assert_int_eq(xseg_free(xs, b), XSEG_OK);
    xseg_destroy(xs);
}
END_TEST

START_TEST(other_streams_idle_cache_is_adopted)
{
    xseg_t *xs = t_host("release_threshold:unlimited");
    void *h = t_host_ctx(xs);
    void *a, *b, *c;
    ck_assert_int_eq(xseg_alloc(xs, 32 * MiB, S1, &a), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, a), XSEG_OK);
    xseg_host_hold_stream(h, S1, 1); /* S1 busy: its block cannot move */
    ck_assert_int_eq(xseg_alloc(xs, 16 * MiB, S2, &b), XSEG_OK);
    ck_assert_msg((char *)b >= (char *)a + 32 * MiB || (char *)b + 16 * MiB <= (char *)a,
                  "took a block of a busy stream");
    ck_assert_uint_eq(t_stats(xs).mapped_bytes.current, 48 * MiB);
    xseg_host_hold_stream(h, S1, 0); /* S1 done: its cached block is reused, no mapping */
    uint64_t maps = t_stats(xs).driver_calls[XSEG_OP_MAP];
    ck_assert_int_eq(xseg_alloc(xs, 16 * MiB, S2, &c), XSEG_OK);
    ck_assert_msg((char *)c >= (char *)a && (char *)c < (char *)a + 32 * MiB,
                  "idle cached block of S1 not adopted");
    ck_assert_uint_eq(t_stats(xs).driver_calls[XSEG_OP_MAP], maps);
    ck_assert_uint_eq(t_stats(xs).mapped_bytes.current, 48 * MiB);
    xseg_destroy(xs);
}
END_TEST

START_TEST(trim_keeps_requested_cache)
{
    xseg_t *xs = t_host(NULL);
    void *p[4];
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(xseg_alloc(xs, 8 * MiB, S1, &p[i]), XSEG_OK);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(xseg_free(xs, p[i]), XSEG_OK);
    size_t rel = 0;
    ck_assert_int_eq(xseg_trim(xs, 8 * MiB, &rel), XSEG_OK);
    xseg_stats s = t_stats(xs);
    ck_assert_uint_le(s.mapped_bytes.current, 8 * MiB);
    ck_assert_uint_eq(rel, 32 * MiB - s.mapped_bytes.current);
    ck_assert_uint_eq(s.trims, 1);
    xseg_destroy(xs);
}
END_TEST

START_TEST(retired_stream_is_never_touched)
{
    xseg_t *xs = t_host(NULL);
    void *h = t_host_ctx(xs);
    void *p, *q, *r;
    ck_assert_int_eq(xseg_alloc(xs, 8 * MiB, S1, &p), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 4 * MiB, S1, &q), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    xseg_host_hold_stream(h, S1, 1);
    uint64_t syncs = xseg_host_sync_count(h);
    ck_assert_int_eq(xseg_stream_retire(xs, S1), XSEG_OK); /* waits for S1 */
    ck_assert_uint_gt(xseg_host_sync_count(h), syncs);
    xseg_stats s0 = t_stats(xs);
    /* S1's cached block serves S2 at once; freeing q and trimming touch no event */
    ck_assert_int_eq(xseg_alloc(xs, 8 * MiB, S2, &r), XSEG_OK);
    ck_assert_ptr_eq(r, p);
    ck_assert_int_eq(xseg_free(xs, q), XSEG_OK);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK);
    xseg_stats s1 = t_stats(xs);
    ck_assert_uint_eq(s1.driver_calls[XSEG_OP_EVENT_RECORD], s0.driver_calls[XSEG_OP_EVENT_RECORD]);
    ck_assert_uint_eq(s1.mapped_bytes.current, 8 * MiB);
    ck_assert_int_eq(xseg_stream_retire(xs, (void *)0x999), XSEG_OK); /* unknown: no-op */
    xseg_host_hold_stream(h, S1, 0);
    xseg_destroy(xs);
}
END_TEST

/* Empty slabs kept for reuse (one per class and stream) go back to free
 * space when a growth is over the release threshold: three slabs, each at
 * the head of a page whose rest is cached, pinned three pages that no
 * growth could move or release (cuda_churn's sequence: 54 such slabs, 5
 * pages at its live peak).  Dropped first, the pages they free are moved
 * under the growth. */
START_TEST(growth_drops_kept_empty_slabs)
{
    xseg_t *xs = t_host("thread_cache:off");
    static const size_t smalls[3] = {1000, 5000, 20000}; /* three classes */
    static char snap[1 << 20];
    void *sm[3], *fill[3], *g, *again;
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(xseg_alloc(xs, smalls[i], S1, &sm[i]), XSEG_OK);
        ck_assert_msg((uintptr_t)sm[i] % (2 * MiB) == 0, "slab %d not at a page's head", i);
        void *probe; /* placed at the slab's end: the rest of the page is filled */
        ck_assert_int_eq(xseg_alloc(xs, MiB, S1, &probe), XSEG_OK);
        size_t slab = (size_t)((char *)probe - (char *)sm[i]);
        ck_assert_uint_lt(slab, MiB);
        ck_assert_int_eq(xseg_free(xs, probe), XSEG_OK);
        ck_assert_int_eq(xseg_alloc(xs, 2 * MiB - slab, S1, &fill[i]), XSEG_OK);
        ck_assert_ptr_eq(fill[i], probe);
    }
    ck_assert_uint_eq(t_stats(xs).mapped_bytes.current, 6 * MiB);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(xseg_free(xs, sm[i]), XSEG_OK);
        ck_assert_int_eq(xseg_free(xs, fill[i]), XSEG_OK);
    }
    ck_assert_int_eq(xseg_snapshot_json(xs, snap, sizeof snap, NULL), XSEG_OK);
    ck_assert_ptr_nonnull(strstr(snap, "\"state\":\"slab\"")); /* kept */
    xseg_stats s0 = t_stats(xs);
    ck_assert_int_eq(xseg_alloc(xs, 6 * MiB, S1, &g), XSEG_OK);
    xseg_stats s1 = t_stats(xs);
    ck_assert_int_eq(xseg_snapshot_json(xs, snap, sizeof snap, NULL), XSEG_OK);
    ck_assert_ptr_null(strstr(snap, "\"state\":\"slab\"")); /* the slabs went */
    ck_assert_uint_eq(s1.moved_bytes - s0.moved_bytes, 4 * MiB);
    ck_assert_uint_eq(s1.mapped_bytes.current, 8 * MiB); /* 12 MiB with the slabs kept */
    t_fill(g, 6 * MiB, 7);
    ck_assert_int_eq(xseg_alloc(xs, smalls[0], S1, &again), XSEG_OK); /* a slab again */
    memset(again, 1, smalls[0]);
    ck_assert(t_check(g, 6 * MiB, 7));
    ck_assert_int_eq(xseg_free(xs, again), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, g), XSEG_OK);
    xseg_destroy(xs);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("policy");
    TCase *tc = tcase_create("streams");
    tcase_add_test(tc, same_stream_reuses_at_once);
    tcase_add_test(tc, record_stream_defers_large);
    tcase_add_test(tc, record_stream_defers_small);
    tcase_add_test(tc, trim_waits_for_pending_uses);
    tcase_add_test(tc, retired_stream_is_never_touched);
    suite_add_tcase(s, tc);
    tc = tcase_create("memory");
    tcase_add_test(tc, oom_reports_numbers_and_recovers);
    tcase_add_test(tc, oom_retry_reclaims_other_streams_cache);
    tcase_add_test(tc, caps_hold);
    tcase_add_test(tc, gc_threshold_releases_oldest);
    tcase_add_test(tc, release_thresholds);
    tcase_add_test(tc, trim_restarts_the_release_budget);
    tcase_add_test(tc, expected_peak_is_the_budget_from_the_start);
    tcase_add_test(tc, expected_peak_set_at_run_time);
    tcase_add_test(tc, release_waits_for_the_gpu);
    tcase_add_test(tc, growth_moves_cached_pages);
    tcase_add_test(tc, growth_stretches_cached_block);
    tcase_add_test(tc, placement_start_packs_in_order);
    tcase_add_test(tc, placement_start_aligns_whole_pages);
    tcase_add_test(tc, handle_size_sets_handles);
    tcase_add_test(tc, split_checks_gpu_only_when_possible);
    tcase_add_test(tc, split_spans_free_blocks_of_several_owners);
    tcase_add_test(tc, other_streams_idle_cache_is_adopted);
    tcase_add_test(tc, trim_keeps_requested_cache);
    tcase_add_test(tc, growth_drops_kept_empty_slabs);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return t_run(suite());
}
