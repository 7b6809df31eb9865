/* test_tcache.c: the per-thread caches in front of the allocator's lock:
 * same-thread reuse, stats that count held blocks as free, double frees of
 * held blocks, frees from other threads, flushes by trim, growth (the
 * growing stream's blocks only), thread exit and destroy. */
#include <pthread.h>
#include <string.h>

#include "driver_host.h"
#include "support_common.h"

#define S1 ((void *)(uintptr_t)0x1001)

START_TEST(same_thread_reuse_and_stats)
{
    xseg_t *xs = t_host(NULL);
    void *p, *q;
    ck_assert_int_eq(xseg_alloc(xs, 3 * MiB, S1, &p), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    xseg_stats s = t_stats(xs);
    ck_assert_uint_eq(s.allocated_bytes.current, 0);
    ck_assert_uint_eq(s.requested_bytes.current, 0);
    ck_assert_uint_eq(s.active_blocks.current, 0);
    ck_assert_uint_eq(s.cached_bytes.current, s.mapped_bytes.current);
    for (int i = 0; i < 1000; i++) {
        ck_assert_int_eq(xseg_alloc(xs, 3 * MiB - 100, S1, &q), XSEG_OK);
        ck_assert_ptr_eq(p, q);
        ck_assert_int_eq(xseg_free(xs, q), XSEG_OK);
    }
    ck_assert_int_eq(xseg_alloc(xs, 3 * MiB - 100, S1, &q), XSEG_OK);
    s = t_stats(xs);
    ck_assert_uint_eq(s.requested_bytes.current, 3 * MiB - 100);
    ck_assert_uint_eq(s.allocated_bytes.current, 3 * MiB);
    ck_assert_uint_eq(s.active_blocks.current, 1);
    ck_assert_uint_eq(s.alloc_calls, 1002);
    ck_assert_uint_eq(s.free_calls, 1001);
    ck_assert_int_eq(xseg_free(xs, q), XSEG_OK);
    xseg_destroy(xs);
}
END_TEST

START_TEST(double_free_of_held_block)
{
    xseg_t *xs = t_host(NULL);
    void *p, *small;
    ck_assert_int_eq(xseg_alloc(xs, 5 * MiB, S1, &p), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 2000, S1, &small), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, small), XSEG_OK);
    xseg_stats before = t_stats(xs);
    ck_assert_int_eq(xseg_free(xs, p), XSEG_ERR_DOUBLE_FREE);
    ck_assert_int_eq(xseg_free(xs, small), XSEG_ERR_DOUBLE_FREE);
    ck_assert_int_eq(xseg_block_size(xs, p, NULL, NULL), XSEG_ERR_DOUBLE_FREE);
    ck_assert_int_eq(xseg_record_stream(xs, small, NULL), XSEG_ERR_DOUBLE_FREE);
    xseg_stats after = t_stats(xs);
    ck_assert_uint_eq(after.allocated_bytes.current, before.allocated_bytes.current);
    ck_assert_uint_eq(after.active_blocks.current, before.active_blocks.current);
    /* and the held blocks are handed out exactly once */
    void *a, *b;
    ck_assert_int_eq(xseg_alloc(xs, 5 * MiB, S1, &a), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 5 * MiB, S1, &b), XSEG_OK);
    ck_assert_ptr_ne(a, b);
    xseg_destroy(xs);
}
END_TEST

typedef struct handoff {
    xseg_t *xs;
    void *p;
    size_t n;
    pthread_barrier_t bar;
    int rc;
} handoff;

static void *free_it(void *v)
{
    handoff *h = v;
    h->rc = xseg_free(h->xs, h->p);
    return NULL;
}

START_TEST(free_from_another_thread)
{
    xseg_t *xs = t_host(NULL);
    handoff h = {.xs = xs, .n = 7 * MiB};
    ck_assert_int_eq(xseg_alloc(xs, h.n, S1, &h.p), XSEG_OK);
    void *orig = h.p;
    t_fill(h.p, h.n, 9);
    pthread_t th;
    pthread_create(&th, NULL, free_it, &h);
    pthread_join(th, NULL);
    ck_assert_int_eq(h.rc, XSEG_OK);
    ck_assert_uint_eq(t_stats(xs).active_blocks.current, 0);
    /* This thread still remembers orig: the stale entry must not be trusted.
     * Re-allocate it, free it from the other thread again, then here. */
    void *q;
    ck_assert_int_eq(xseg_alloc(xs, h.n, S1, &q), XSEG_OK);
    ck_assert_ptr_eq(q, orig);
    ck_assert_int_eq(xseg_free(xs, q), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, q), XSEG_ERR_DOUBLE_FREE);
    ck_assert_uint_eq(t_stats(xs).active_blocks.current, 0);
    xseg_destroy(xs);
}
END_TEST

static void *alloc_free_wait(void *v)
{
    handoff *h = v;
    void *p;
    h->rc = xseg_alloc(h->xs, h->n, S1, &p);
    if (h->rc == XSEG_OK)
        h->rc = xseg_free(h->xs, p); /* held in this thread's cache */
    h->p = p;
    pthread_barrier_wait(&h->bar); /* 1: cached */
    pthread_barrier_wait(&h->bar); /* 2: main thread has trimmed / destroyed */
    return NULL;
}

START_TEST(trim_flushes_other_threads)
{
    xseg_t *xs = t_host(NULL);
    handoff h = {.xs = xs, .n = 6 * MiB};
    pthread_barrier_init(&h.bar, NULL, 2);
    pthread_t th;
    pthread_create(&th, NULL, alloc_free_wait, &h);
    pthread_barrier_wait(&h.bar);
    ck_assert_int_eq(h.rc, XSEG_OK);
    ck_assert_uint_eq(t_stats(xs).mapped_bytes.current, 6 * MiB);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK);
    ck_assert_uint_eq(t_stats(xs).mapped_bytes.current, 0);
    ck_assert(t_faults(h.p));
    pthread_barrier_wait(&h.bar);
    pthread_join(th, NULL);
    pthread_barrier_destroy(&h.bar);
    xseg_destroy(xs);
}
END_TEST

/* Another thread's cached 6 MiB block is handed back, and reused, before
 * this thread maps new memory. */
START_TEST(growth_takes_other_threads_caches_first)
{
    xseg_t *xs = t_host(NULL);
    handoff h = {.xs = xs, .n = 6 * MiB};
    pthread_barrier_init(&h.bar, NULL, 2);
    pthread_t th;
    pthread_create(&th, NULL, alloc_free_wait, &h);
    pthread_barrier_wait(&h.bar); /* the other thread holds its block */
    void *p;
    ck_assert_int_eq(xseg_alloc(xs, 6 * MiB, S1, &p), XSEG_OK);
    ck_assert_ptr_eq(p, h.p);
    xseg_stats s = t_stats(xs);
    ck_assert_uint_eq(s.mapped_bytes.current, 6 * MiB);
    ck_assert_uint_eq(s.driver_calls[XSEG_OP_MAP], 3); /* the first block's pages only */
    pthread_barrier_wait(&h.bar);
    pthread_join(th, NULL);
    pthread_barrier_destroy(&h.bar);
    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    xseg_destroy(xs);
}
END_TEST

/* Threads on streams of their own (a server's workers), each allocating
 * and freeing one size in rounds: once each has its block, the rounds run
 * from the caches and map nothing.  Until 2026-12-07 a growth flushed every
 * thread's cache, the flushed blocks became free memory that the next
 * growth released, and the threads took turns flushing each other for
 * good (about one map per thread per round). */
#define OWN_THREADS 4
#define OWN_ROUNDS 12

typedef struct own_stream {
    xseg_t *xs;
    pthread_barrier_t *bar;
    void *stream;
    int rc;
} own_stream;

static void *pairs_in_rounds(void *v)
{
    own_stream *o = v;
    for (int r = 0; r < OWN_ROUNDS; r++) {
        pthread_barrier_wait(o->bar);
        for (int i = 0; i < 100 && o->rc == XSEG_OK; i++) {
            void *p;
            o->rc = xseg_alloc(o->xs, 6 * MiB, o->stream, &p);
            if (o->rc == XSEG_OK)
                o->rc = xseg_free(o->xs, p);
        }
        pthread_barrier_wait(o->bar);
    }
    return NULL;
}

START_TEST(threads_on_their_own_streams_keep_their_caches)
{
    xseg_t *xs = t_host(NULL);
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, OWN_THREADS + 1);
    pthread_t th[OWN_THREADS];
    own_stream o[OWN_THREADS];
    for (int i = 0; i < OWN_THREADS; i++) {
        o[i] = (own_stream){.xs = xs, .bar = &bar, .stream = (void *)(uintptr_t)(0x2000 + i)};
        pthread_create(&th[i], NULL, pairs_in_rounds, &o[i]);
    }
    uint64_t maps = 0;
    for (int r = 0; r < OWN_ROUNDS; r++) {
        pthread_barrier_wait(&bar);
        pthread_barrier_wait(&bar);
        if (r == 1) /* every thread has had its block for a round */
            maps = t_stats(xs).driver_calls[XSEG_OP_MAP];
    }
    for (int i = 0; i < OWN_THREADS; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(o[i].rc, XSEG_OK);
    }
    pthread_barrier_destroy(&bar);
    xseg_stats s = t_stats(xs);
    ck_assert_uint_eq(s.driver_calls[XSEG_OP_MAP], maps);
    ck_assert_uint_eq(s.mapped_bytes.peak, OWN_THREADS * 6 * MiB);
    xseg_destroy(xs);
}
END_TEST

START_TEST(destroy_while_a_thread_holds_blocks)
{
    xseg_host_counts base, c;
    xseg_host_counts_global(&base);
    xseg_t *xs = t_host(NULL);
    handoff h = {.xs = xs, .n = 1000};
    pthread_barrier_init(&h.bar, NULL, 2);
    pthread_t th;
    pthread_create(&th, NULL, alloc_free_wait, &h);
    pthread_barrier_wait(&h.bar);
    ck_assert_int_eq(xseg_destroy(xs), XSEG_OK);
    pthread_barrier_wait(&h.bar); /* the thread exits after the destroy */
    pthread_join(th, NULL);
    pthread_barrier_destroy(&h.bar);
    xseg_host_counts_global(&c);
    ck_assert_uint_eq(c.handles, base.handles);
    ck_assert_uint_eq(c.mappings, base.mappings);
}
END_TEST

static void *alloc_free_exit(void *v)
{
    handoff *h = v;
    void *p;
    h->rc = xseg_alloc(h->xs, h->n, S1, &p);
    if (h->rc == XSEG_OK)
        h->rc = xseg_free(h->xs, p);
    return NULL;
}

START_TEST(thread_exit_flushes)
{
    xseg_t *xs = t_host(NULL);
    handoff h = {.xs = xs, .n = 4 * MiB};
    pthread_t th;
    pthread_create(&th, NULL, alloc_free_exit, &h);
    pthread_join(th, NULL);
    ck_assert_int_eq(h.rc, XSEG_OK);
    xseg_stats s = t_stats(xs);
    ck_assert_uint_eq(s.active_blocks.current, 0);
    ck_assert_uint_eq(s.allocated_bytes.current, 0);
    /* the block is an ordinary cached block again: this thread reuses it */
    void *p;
    ck_assert_int_eq(xseg_alloc(xs, 4 * MiB, S1, &p), XSEG_OK);
    ck_assert_uint_eq(t_stats(xs).mapped_bytes.current, 4 * MiB);
    xseg_destroy(xs);
}
END_TEST

START_TEST(record_stream_bypasses_the_cache)
{
    xseg_t *xs = t_host(NULL);
    void *h = t_host_ctx(xs);
    void *p, *q;
    ck_assert_int_eq(xseg_alloc(xs, 2 * MiB, S1, &p), XSEG_OK);
    ck_assert_int_eq(xseg_record_stream(xs, p, (void *)0x2002), XSEG_OK);
    xseg_host_hold_stream(h, (void *)0x2002, 1);
    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    ck_assert_uint_eq(t_stats(xs).deferred_frees, 1);
    ck_assert_int_eq(xseg_alloc(xs, 2 * MiB, S1, &q), XSEG_OK);
    ck_assert_ptr_ne(p, q); /* not handed out while the other stream is busy */
    xseg_host_hold_stream(h, (void *)0x2002, 0);
    xseg_destroy(xs);
}
END_TEST

START_TEST(thread_cache_off)
{
    xseg_t *xs = t_host("thread_cache:off");
    void *p;
    ck_assert_int_eq(xseg_alloc(xs, 3 * MiB, S1, &p), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, p), XSEG_ERR_DOUBLE_FREE);
    ck_assert_uint_eq(t_stats(xs).allocated_bytes.current, 0);
    xseg_destroy(xs);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tcache");
    TCase *tc = tcase_create("cache");
    tcase_add_test(tc, same_thread_reuse_and_stats);
    tcase_add_test(tc, double_free_of_held_block);
    tcase_add_test(tc, free_from_another_thread);
    tcase_add_test(tc, trim_flushes_other_threads);
    tcase_add_test(tc, growth_takes_other_threads_caches_first);
    tcase_add_test(tc, threads_on_their_own_streams_keep_their_caches);
    tcase_add_test(tc, destroy_while_a_thread_holds_blocks);
    tcase_add_test(tc, thread_exit_flushes);
    tcase_add_test(tc, record_stream_bypasses_the_cache);
    tcase_add_test(tc, thread_cache_off);
    suite_add_tcase(s, tc);
    return t_run(s);
}
