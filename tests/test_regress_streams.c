/* test_regress_streams.c: issue 19, defects 4 and 5: retired streams.
 * After xseg_stream_retire(xs, S) no driver call names S again (the
 * application destroys S then; on a GPU an event recorded on it is an error),
 * the uses recorded on S before retire are still waited for, and a retired
 * stream's state and slabs are given back once nothing refers to it.  A
 * recording driver wraps the host backend and counts every call that names a
 * retired stream (event_record, stream_sync); it can also fail the waits of
 * retire, to check that the event recorded at retire is then kept and waited
 * on before the memory is reused. */
#include <stdio.h>
#include <string.h>

#include "driver_host.h"
#include "internal.h"
#include "support_common.h"

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif
#ifndef RUNNING_ON_VALGRIND
#define RUNNING_ON_VALGRIND 0
#endif

#define S1 ((void *)(uintptr_t)0x1001)
#define S2 ((void *)(uintptr_t)0x2002)
#define S3 ((void *)(uintptr_t)0x3003)

/* Stream states the allocator holds.  Weak, so that this file also builds
 * against a library without the accessor (there every state stays in the
 * list of streams, retired or not). */
size_t xstreams_count(const xseg_t *xs) __attribute__((weak));

static size_t states(const xseg_t *xs)
{
    if (xstreams_count)
        return xstreams_count(xs);
    size_t n = 0;
    for (const xstream *s = xs->all_streams; s; s = s->next_all)
        n++;
    return n;
}

/* ---- the recording driver ---- */

#define MAX_GONE 4
static void *g_gone[MAX_GONE]; /* streams retired so far */
static int g_ngone;
static int g_named;            /* driver calls that named a retired stream */
static int g_fail_waits;       /* event_sync and stream_sync fail */

static void named(void *stream)
{
    for (int i = 0; i < g_ngone; i++)
        if (g_gone[i] == stream)
            g_named++;
}

static int rec_event_record(void *ctx, void *ev, void *stream)
{
    named(stream);
    return xseg_driver_host.event_record(ctx, ev, stream);
}

static int rec_event_sync(void *ctx, void *ev)
{
    return g_fail_waits ? XDRV_UNKNOWN : xseg_driver_host.event_sync(ctx, ev);
}

static int rec_stream_sync(void *ctx, void *stream)
{
    named(stream);
    return g_fail_waits ? XDRV_UNKNOWN : xseg_driver_host.stream_sync(ctx, stream);
}

static xseg_driver g_rec;

static xseg_t *rec_host(void)
{
    g_rec = xseg_driver_host;
    g_rec.event_record = rec_event_record;
    g_rec.event_sync = rec_event_sync;
    g_rec.stream_sync = rec_stream_sync;
    g_ngone = g_named = g_fail_waits = 0;
    xseg_t *xs = NULL;
    xseg_status st = xseg_create_with_driver(&xs, 0, "backend:host,host_capacity:1GB", &g_rec);
    ck_assert_msg(st == XSEG_OK, "create: %s", xseg_last_error());
    return xs;
}

/* Retire `stream`; from now on the recording driver watches for it. */
static void retire(xseg_t *xs, void *stream)
{
    ck_assert_int_eq(xseg_stream_retire(xs, stream), XSEG_OK);
    ck_assert_int_lt(g_ngone, MAX_GONE);
    g_gone[g_ngone++] = stream;
}

/* Defect 4, the reproducer: record_stream on S2, retire S2, free. */
START_TEST(free_after_retire_names_no_retired_stream)
{
    xseg_t *xs = rec_host();
    void *h = t_host_ctx(xs);
    void *p, *small, *q, *r;
    ck_assert_int_eq(xseg_alloc(xs, 1 * MiB, S1, &p), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 3000, S1, &small), XSEG_OK);
    ck_assert_int_eq(xseg_record_stream(xs, p, S2), XSEG_OK);
    ck_assert_int_eq(xseg_record_stream(xs, small, S2), XSEG_OK);
    xseg_host_hold_stream(h, S2, 1); /* the GPU is still busy on S2 */
    uint64_t syncs = xseg_host_sync_count(h);
    retire(xs, S2); /* waits for S2: the uses are complete now */
    ck_assert_uint_gt(xseg_host_sync_count(h), syncs);
    /* ... the application destroys S2 here ... */
    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, small), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 1 * MiB, S1, &q), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 3000, S1, &r), XSEG_OK);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK);
    ck_assert_int_eq(g_named, 0);
    ck_assert_ptr_eq(q, p); /* reused: the retire-time wait covered the use */
    ck_assert_ptr_eq(r, small);
    ck_assert_int_eq(xseg_free(xs, q), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, r), XSEG_OK);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK);
    ck_assert_uint_eq(t_stats(xs).mapped_bytes.current, 0);
    ck_assert_uint_eq(states(xs), 1); /* S1 only */
    ck_assert_int_eq(g_named, 0);
    xseg_host_hold_stream(h, S2, 0);
    xseg_destroy(xs);
}
END_TEST

/* Defect 4, when retire cannot wait: the event it recorded on S2 is kept
 * and the freed block is reused only once that event has completed; still
 * no call names S2 after retire. */
START_TEST(failed_retire_wait_keeps_the_retire_event)
{
    xseg_t *xs = rec_host();
    void *h = t_host_ctx(xs);
    void *p, *q, *r, *own, *o2;
    ck_assert_int_eq(xseg_alloc(xs, 1 * MiB, S1, &p), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 2 * MiB, S2, &own), XSEG_OK);
    ck_assert_int_eq(xseg_record_stream(xs, p, S2), XSEG_OK);
    xseg_host_hold_stream(h, S2, 1);
    g_fail_waits = 1;
    ck_assert_int_eq(xseg_stream_retire(xs, S2), XSEG_OK);
    g_fail_waits = 0;
    g_gone[g_ngone++] = S2;
    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, own), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 1 * MiB, S1, &q), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 2 * MiB, S1, &o2), XSEG_OK);
    ck_assert_ptr_ne(q, p); /* S2's work on them is not known to be done */
    ck_assert_ptr_ne(o2, own);
    ck_assert_int_eq(g_named, 0);
    xseg_stats s = t_stats(xs);
    ck_assert_uint_eq(s.allocated_bytes.current, 3 * MiB);
    ck_assert_uint_eq(s.deferred_frees, 1);
    ck_assert_int_eq(xseg_free(xs, o2), XSEG_OK);
    xseg_host_hold_stream(h, S2, 0); /* the GPU finishes S2's work */
    ck_assert_int_eq(xseg_alloc(xs, 1 * MiB, S1, &r), XSEG_OK);
    ck_assert_ptr_eq(r, p); /* the retire-time event completed */
    ck_assert_int_eq(xseg_free(xs, q), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, r), XSEG_OK);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK);
    ck_assert_uint_eq(t_stats(xs).mapped_bytes.current, 0);
    ck_assert_uint_eq(states(xs), 1);
    ck_assert_int_eq(g_named, 0);
    xseg_destroy(xs);
}
END_TEST

/* A stream retired while blocks allocated on it are live: its state stays
 * while they do (frees, snapshots and record_stream still reach it) and
 * goes at the first trim after the last of them is freed. */
START_TEST(state_kept_while_referenced)
{
    xseg_t *xs = rec_host();
    void *big, *small, *other;
    char buf[8192];
    size_t len;
    ck_assert_int_eq(xseg_alloc(xs, 2 * MiB, S2, &big), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 1000, S2, &small), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 1 * MiB, S1, &other), XSEG_OK);
    ck_assert_int_eq(xseg_record_stream(xs, other, S3), XSEG_OK);
    retire(xs, S2);
    retire(xs, S3);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK);
    ck_assert_uint_eq(states(xs), 2); /* S1, and S2 under its live blocks */
    ck_assert_int_eq(xseg_snapshot_json(xs, buf, sizeof buf, &len), XSEG_OK);
    ck_assert_ptr_nonnull(strstr(buf, "\"stream\":8194")); /* S2 = 0x2002 */
    ck_assert_int_eq(xseg_record_stream(xs, big, S1), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, big), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, small), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, other), XSEG_OK);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK);
    ck_assert_int_eq(g_named, 0);
    ck_assert_uint_eq(t_stats(xs).mapped_bytes.current, 0);
    ck_assert_uint_eq(states(xs), 1);
    xseg_destroy(xs);
}
END_TEST

/* Defect 5: many streams, each allocating small and large, freeing, then
 * retired.  The memory and the states of the retired ones come back. */
static void churn(const char *conf)
{
    xseg_t *xs = t_host(conf);
    int n = RUNNING_ON_VALGRIND ? 300 : 2000;
    size_t most_states = 0;
    uint64_t most_mapped = 0;
    for (int i = 0; i < n; i++) {
        void *s = (void *)(uintptr_t)(0x100000 + i), *a, *b;
        ck_assert_int_eq(xseg_alloc(xs, 4096, s, &a), XSEG_OK);
        ck_assert_int_eq(xseg_alloc(xs, 3 * MiB, s, &b), XSEG_OK);
        ck_assert_int_eq(xseg_free(xs, a), XSEG_OK);
        ck_assert_int_eq(xseg_free(xs, b), XSEG_OK);
        ck_assert_int_eq(xseg_stream_retire(xs, s), XSEG_OK);
        size_t k = states(xs);
        uint64_t m = t_stats(xs).mapped_bytes.current;
        most_states = k > most_states ? k : most_states;
        most_mapped = m > most_mapped ? m : most_mapped;
    }
    /* Bounds, not exact figures: a retired state lives until the next
     * collection, an empty slab until its stream is retired. */
    ck_assert_msg(most_states <= 64, "%s: %zu stream states held for %d streams", conf,
                  most_states, n);
    ck_assert_msg(most_mapped <= 16 * MiB, "%s: %llu B mapped with at most 3 MiB live", conf,
                  (unsigned long long)most_mapped);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK);
    xseg_stats st = t_stats(xs);
    ck_assert_uint_eq(st.mapped_bytes.current, 0);
    ck_assert_uint_eq(st.allocated_bytes.current, 0);
    ck_assert_uint_eq(states(xs), 0);
    xseg_destroy(xs);
}

START_TEST(retired_streams_give_back_state_and_slabs)
{
    churn("thread_cache:1");
    churn("thread_cache:0");
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("regress_streams");
    TCase *tc = tcase_create("retire");
    tcase_add_test(tc, free_after_retire_names_no_retired_stream);
    tcase_add_test(tc, failed_retire_wait_keeps_the_retire_event);
    tcase_add_test(tc, state_kept_while_referenced);
    tcase_add_test(tc, retired_streams_give_back_state_and_slabs);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return t_run(suite());
}
