/* test_plugin.c: the PyTorch CUDAPluggableAllocator entry points
 * (lib/plugin.c) on the host backend: alloc/free through the process-wide
 * allocator, size 0 and NULL, bad devices and pointers, record_stream,
 * empty_cache (reset), memory fraction, init, CUDA graph pools (routing,
 * reuse inside a pool, lifetime across release and reset), threads,
 * dedicated blocks (share.c) freed through them. */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support_common.h"

#define HOST_CONF "backend:host,host_capacity:1GB"
#define S1 ((void *)0x101)
#define S2 ((void *)0x202)

static xseg_t *dflt(void)
{
    xseg_t *xs = NULL;
    ck_assert_msg(xseg_default(0, &xs) == XSEG_OK, "xseg_default: %s", xseg_last_error());
    return xs;
}

static xseg_stats dstats(void)
{
    return t_stats(dflt());
}

static int error_has(const char *word)
{
    return strstr(xseg_last_error(), word) != NULL;
}

START_TEST(alloc_and_free)
{
    xseg_stats a = dstats();
    void *p = xseg_torch_alloc(1000, 0, S1);
    ck_assert_msg(p != NULL, "%s", xseg_last_error());
    t_fill(p, 1000, 7);
    ck_assert(t_check(p, 1000, 7));
    xseg_stats b = dstats();
    ck_assert_uint_eq(b.active_blocks.current, a.active_blocks.current + 1);
    ck_assert_uint_eq(b.requested_bytes.current, a.requested_bytes.current + 1000);
    xseg_torch_free(p, 1000, 0, S1);
    xseg_stats c = dstats();
    ck_assert_uint_eq(c.active_blocks.current, a.active_blocks.current);
    ck_assert_uint_eq(c.free_calls, a.free_calls + 1);
}
END_TEST

START_TEST(size_zero_is_null_without_error)
{
    ck_assert_ptr_null(xseg_torch_alloc(16, -1, NULL)); /* leaves an error */
    ck_assert_str_ne(xseg_last_error(), "");
    ck_assert_ptr_null(xseg_torch_alloc(0, 0, S1));
    ck_assert_str_eq(xseg_last_error(), "");
}
END_TEST

START_TEST(free_null_is_a_no_op)
{
    xseg_stats a = dstats();
    xseg_torch_free(NULL, 0, 0, S1);
    xseg_torch_free(NULL, 128, 3, NULL);
    ck_assert_uint_eq(dstats().free_calls, a.free_calls);
}
END_TEST

START_TEST(bad_devices)
{
    ck_assert_ptr_null(xseg_torch_alloc(16, -1, NULL));
    ck_assert_msg(error_has("device -1"), "%s", xseg_last_error());
    ck_assert_ptr_null(xseg_torch_alloc(16, 64, NULL));
    ck_assert_msg(error_has("device 64"), "%s", xseg_last_error());
    ck_assert_ptr_null(xseg_torch_alloc(16, 1, NULL)); /* host backend: device 0 only */
    ck_assert_str_ne(xseg_last_error(), "");
    xseg_torch_memory_fraction(0.5, -2);
    ck_assert_msg(error_has("device -2"), "%s", xseg_last_error());
}
END_TEST

START_TEST(free_finds_the_owner_whatever_the_device)
{
    void *p = xseg_torch_alloc(4096, 0, S1);
    ck_assert_ptr_nonnull(p);
    xseg_stats a = dstats();
    xseg_torch_free(p, 4096, 5, S1);
    ck_assert_uint_eq(dstats().active_blocks.current, a.active_blocks.current - 1);
}
END_TEST

START_TEST(bad_pointers)
{
    int local;
    xseg_torch_free(&local, 4, 0, NULL);
    ck_assert_msg(error_has("not allocated by xseg"), "%s", xseg_last_error());
    void *p = xseg_torch_alloc(1 << 20, 0, S1);
    ck_assert_ptr_nonnull(p);
    xseg_torch_free(p, 1 << 20, 0, S1);
    xseg_torch_free(p, 1 << 20, 0, S1);
    ck_assert_msg(error_has("double free"), "%s", xseg_last_error());
    xseg_torch_record_stream(&local, S2);
    ck_assert_msg(error_has("not allocated by xseg"), "%s", xseg_last_error());
    xseg_torch_record_stream(NULL, S2);
    ck_assert_msg(error_has("NULL"), "%s", xseg_last_error());
}
END_TEST

START_TEST(reset_releases_cached_memory)
{
    void *p = xseg_torch_alloc(64 * MiB, 0, S1);
    ck_assert_ptr_nonnull(p);
    xseg_torch_free(p, 64 * MiB, 0, S1);
    xseg_stats a = dstats();
    ck_assert_uint_ge(a.cached_bytes.current, 64 * MiB);
    xseg_torch_reset();
    xseg_stats b = dstats();
    ck_assert_uint_eq(b.mapped_bytes.current, 0);
    ck_assert_uint_eq(b.trims, a.trims + 1);
    ck_assert_uint_ge(b.released_bytes, a.released_bytes + 64 * MiB);
}
END_TEST

START_TEST(reset_keeps_live_memory)
{
    void *p = xseg_torch_alloc(8 * MiB, 0, S1);
    ck_assert_ptr_nonnull(p);
    t_fill(p, 8 * MiB, 3);
    xseg_torch_reset();
    ck_assert(t_check(p, 8 * MiB, 3));
    ck_assert_uint_ge(dstats().mapped_bytes.current, 8 * MiB);
    xseg_torch_free(p, 8 * MiB, 0, S1);
}
END_TEST

START_TEST(record_stream_defers_the_free)
{
    void *p = xseg_torch_alloc(2 * MiB, 0, S1);
    ck_assert_ptr_nonnull(p);
    xseg_stats a = dstats();
    xseg_torch_record_stream(p, S2);
    ck_assert_str_eq(xseg_last_error(), "");
    xseg_torch_free(p, 2 * MiB, 0, S1);
    xseg_stats b = dstats();
    ck_assert_uint_eq(b.deferred_frees, a.deferred_frees + 1);
    ck_assert_uint_eq(b.active_blocks.current, a.active_blocks.current - 1);
    xseg_torch_reset(); /* waits for the use on S2, then releases */
    ck_assert_uint_eq(dstats().mapped_bytes.current, 0);
}
END_TEST

START_TEST(memory_fraction_caps_mapped_memory)
{
    xseg_stats a = dstats();
    xseg_torch_memory_fraction(0.25, 0);
    ck_assert_str_eq(xseg_last_error(), "");
    ck_assert_uint_eq(dstats().mapped_cap, a.device_total / 4);
    ck_assert_ptr_null(xseg_torch_alloc(512 * MiB, 0, S1));
    ck_assert_msg(error_has("out of memory"), "%s", xseg_last_error());
    void *p = xseg_torch_alloc(128 * MiB, 0, S1);
    ck_assert_ptr_nonnull(p);
    xseg_torch_free(p, 128 * MiB, 0, S1);
    xseg_torch_memory_fraction(1.5, 0);
    ck_assert_msg(error_has("not in [0, 1]"), "%s", xseg_last_error());
    xseg_torch_memory_fraction(NAN, 0);
    ck_assert_msg(error_has("not in [0, 1]"), "%s", xseg_last_error());
    ck_assert_uint_eq(dstats().mapped_cap, a.device_total / 4);
    xseg_torch_memory_fraction(0.0, 0); /* 0: no cap, as the conf key */
    ck_assert_uint_eq(dstats().mapped_cap, 0);
    p = xseg_torch_alloc(512 * MiB, 0, S1);
    ck_assert_ptr_nonnull(p);
    xseg_torch_free(p, 512 * MiB, 0, S1);
}
END_TEST

START_TEST(init_checks_the_count)
{
    xseg_torch_init(8);
    ck_assert_str_eq(xseg_last_error(), "");
    xseg_torch_init(-1);
    ck_assert_msg(error_has("-1 devices"), "%s", xseg_last_error());
    xseg_torch_init(65);
    ck_assert_msg(error_has("at most 64"), "%s", xseg_last_error());
}
END_TEST

/* Freeing p again tells whether its pool still exists: a double free
 * while it does, "not allocated by xseg" once it is destroyed. */
static int pool_alive(void *freed)
{
    xseg_torch_free(freed, 0, 0, S1);
    if (error_has("double free"))
        return 1;
    ck_assert_msg(error_has("not allocated by xseg"), "%s", xseg_last_error());
    return 0;
}

static xseg_torch_pools_info pools_of(int device)
{
    xseg_torch_pools_info i;
    ck_assert_int_eq(xseg_torch_pools(device, &i), XSEG_OK);
    return i;
}

START_TEST(graph_pool_routes_and_reuses)
{
    xseg_torch_pool_id id = {7, 0};
    xseg_stats a = dstats();
    xseg_torch_begin_pool(0, id, NULL);
    void *p = xseg_torch_alloc(4 * MiB, 0, S1);
    ck_assert_msg(p != NULL, "%s", xseg_last_error());
    ck_assert_uint_eq(dstats().alloc_calls, a.alloc_calls); /* not the default */
    t_fill(p, 4 * MiB, 11);
    xseg_torch_free(p, 4 * MiB, 0, S1);
    void *q = xseg_torch_alloc(4 * MiB, 0, S1);
    ck_assert_ptr_eq(q, p); /* same stream, inside the capture: reused */
    xseg_torch_end_pool(0, id);
    void *r = xseg_torch_alloc(4 * MiB, 0, S1);
    ck_assert_ptr_nonnull(r);
    ck_assert_uint_eq(dstats().alloc_calls, a.alloc_calls + 1);
    xseg_torch_free(q, 4 * MiB, 0, S1); /* after the capture: back to the pool */
    ck_assert_uint_eq(dstats().free_calls, a.free_calls);
    void *s = xseg_torch_alloc(4 * MiB, 0, S1);
    ck_assert_ptr_ne(s, q); /* the graph's memory is not handed out */
    xseg_torch_free(r, 4 * MiB, 0, S1);
    xseg_torch_free(s, 4 * MiB, 0, S1);
    xseg_torch_reset();
    ck_assert(pool_alive(q)); /* the graph still lives */
    xseg_torch_release_pool(0, id);
    xseg_torch_reset();
    ck_assert(!pool_alive(q));
}
END_TEST

START_TEST(graph_pool_outlives_release_while_blocks_live)
{
    xseg_torch_pool_id id = {0, 3};
    xseg_torch_begin_pool(0, id, NULL);
    void *p = xseg_torch_alloc(MiB, 0, S1);
    void *q = xseg_torch_alloc(100, 0, S1);
    ck_assert_ptr_nonnull(p);
    ck_assert_ptr_nonnull(q);
    t_fill(p, MiB, 5);
    xseg_torch_end_pool(0, id);
    xseg_torch_release_pool(0, id);
    xseg_torch_reset();
    ck_assert(t_check(p, MiB, 5));
    xseg_torch_free(p, MiB, 0, S1);
    ck_assert_str_eq(xseg_last_error(), "");
    ck_assert(pool_alive(p));
    xseg_torch_free(q, 100, 0, S1);
    xseg_torch_reset();
    ck_assert(!pool_alive(p));
}
END_TEST

START_TEST(graph_pool_shared_by_two_captures)
{
    xseg_torch_pool_id id = {9, 0};
    void *p[2];
    for (int i = 0; i < 2; i++) {
        xseg_torch_begin_pool(0, id, NULL);
        p[i] = xseg_torch_alloc(2 * MiB, 0, S1);
        ck_assert_ptr_nonnull(p[i]);
        xseg_torch_free(p[i], 2 * MiB, 0, S1);
        xseg_torch_end_pool(0, id);
    }
    ck_assert_ptr_eq(p[0], p[1]); /* the second graph reuses the first's memory */
    xseg_torch_release_pool(0, id);
    xseg_torch_reset();
    ck_assert(pool_alive(p[0]));
    xseg_torch_release_pool(0, id);
    xseg_torch_reset();
    ck_assert(!pool_alive(p[0]));
}
END_TEST

START_TEST(graph_pool_end_of_another_id_is_ignored)
{
    xseg_torch_pool_id id = {4, 0}, other = {5, 0};
    xseg_stats a = dstats();
    xseg_torch_begin_pool(0, id, NULL);
    xseg_torch_end_pool(0, other);
    void *p = xseg_torch_alloc(MiB, 0, S1);
    ck_assert_uint_eq(dstats().alloc_calls, a.alloc_calls); /* still capturing */
    xseg_torch_end_pool(0, id);
    xseg_torch_free(p, MiB, 0, S1);
    xseg_torch_release_pool(0, id);
    xseg_torch_release_pool(0, other); /* unknown: nothing happens */
    xseg_torch_reset();
    ck_assert(!pool_alive(p));
}
END_TEST

START_TEST(graph_pool_that_cannot_be_created)
{
    const char *old = getenv("XSEG_CONF");
    char keep[256];
    snprintf(keep, sizeof keep, "%s", old ? old : "");
    setenv("XSEG_CONF", "bogus:1", 1);
    xseg_torch_pool_id id = {12, 0};
    xseg_torch_begin_pool(0, id, NULL);
    setenv("XSEG_CONF", keep, 1);
    ck_assert_ptr_null(xseg_torch_alloc(MiB, 0, S1));
    ck_assert_msg(error_has("could not be created: xseg conf: unknown key \"bogus\""), "%s",
                  xseg_last_error());
    ck_assert_uint_eq(pools_of(0).failed, 1);
    xseg_torch_end_pool(0, id);
    void *p = xseg_torch_alloc(MiB, 0, S1);
    ck_assert_ptr_nonnull(p);
    xseg_torch_free(p, MiB, 0, S1);
    xseg_torch_release_pool(0, id);
    xseg_torch_reset();
}
END_TEST

START_TEST(graph_pools_are_reported)
{
    xseg_torch_pool_id id = {21, 0};
    xseg_torch_pools_info i = pools_of(0);
    ck_assert_uint_eq(i.pools, 0);
    xseg_torch_begin_pool(0, id, NULL);
    void *p = xseg_torch_alloc(3 * MiB, 0, S1);
    ck_assert_ptr_nonnull(p);
    i = pools_of(0);
    ck_assert_uint_eq(i.pools, 1);
    ck_assert_uint_eq(i.in_use, 1);
    ck_assert_uint_eq(i.live_blocks, 1);
    ck_assert_uint_eq(i.live_bytes, 3 * MiB);
    ck_assert_uint_ge(i.mapped_bytes, 3 * MiB);
    ck_assert_uint_eq(pools_of(1).pools, 0); /* another device */
    ck_assert_uint_eq(pools_of(-1).pools, 1);
    xseg_torch_end_pool(0, id);
    xseg_torch_free(p, 3 * MiB, 0, S1);
    i = pools_of(0);
    ck_assert_uint_eq(i.in_use, 1); /* the graph lives */
    ck_assert_uint_eq(i.live_blocks, 0);
    ck_assert_uint_ge(i.mapped_bytes, 3 * MiB); /* kept for replays */
    xseg_torch_release_pool(0, id);
    i = pools_of(0);
    ck_assert_uint_eq(i.pools, 1); /* until the next empty_cache */
    ck_assert_uint_eq(i.in_use, 0);
    xseg_torch_reset();
    i = pools_of(0);
    ck_assert_uint_eq(i.pools, 0);
    ck_assert_uint_eq(i.mapped_bytes, 0);
    ck_assert_int_eq(xseg_torch_pools(64, &i), XSEG_ERR_NO_DEVICE);
    ck_assert_int_eq(xseg_torch_pools(0, NULL), XSEG_ERR_INVALID_ARG);
}
END_TEST

START_TEST(graph_pool_hooks_check_the_device)
{
    xseg_torch_pool_id id = {1, 0};
    xseg_torch_begin_pool(-1, id, NULL);
    ck_assert_msg(error_has("device -1"), "%s", xseg_last_error());
    xseg_torch_end_pool(64, id);
    ck_assert_msg(error_has("device 64"), "%s", xseg_last_error());
    xseg_torch_release_pool(99, id);
    ck_assert_msg(error_has("device 99"), "%s", xseg_last_error());
}
END_TEST

#define NTHREADS 4
#define ROUNDS 2000

static void *churn(void *arg)
{
    uintptr_t t = (uintptr_t)arg;
    void *stream = (void *)(0x1000 + t);
    void *live[16] = {0};
    uint32_t x = (uint32_t)t * 2654435761u + 1;
    for (int i = 0; i < ROUNDS; i++) {
        x = x * 1664525u + 1013904223u;
        int k = (int)(x >> 28);
        size_t size = ((size_t)(x >> 8) & 0xFFFFF) + 1;
        if (live[k]) {
            xseg_torch_free(live[k], 0, 0, stream);
            live[k] = NULL;
        } else {
            live[k] = xseg_torch_alloc(size, 0, stream);
            if (!live[k])
                return (void *)1;
        }
    }
    for (int k = 0; k < 16; k++)
        if (live[k])
            xseg_torch_free(live[k], 0, 0, stream);
    return NULL;
}

START_TEST(threads)
{
    xseg_stats a = dstats();
    pthread_t th[NTHREADS];
    for (uintptr_t i = 0; i < NTHREADS; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, churn, (void *)i), 0);
    for (int i = 0; i < NTHREADS; i++) {
        void *ret = (void *)1;
        ck_assert_int_eq(pthread_join(th[i], &ret), 0);
        ck_assert_ptr_null(ret);
    }
    xseg_stats b = dstats();
    ck_assert_uint_eq(b.active_blocks.current, a.active_blocks.current);
    ck_assert_uint_eq(b.allocated_bytes.current, a.allocated_bytes.current);
}
END_TEST

/* A dedicated block (share.c: outside the arena, as registrable_min makes
 * them) is found by the entry points: its free released nothing before
 * (xseg_torch_free said "not allocated by xseg"), and the native module's
 * torch IPC shares exactly these blocks. */
START_TEST(dedicated_blocks_are_found)
{
    xseg_t *xs = dflt();
    xseg_share_stats a = {.size = sizeof a}, b = {.size = sizeof b}, c = {.size = sizeof c};
    ck_assert_int_eq(xseg_share_stats_get(xs, &a), XSEG_OK);
    void *p = NULL;
    ck_assert_int_eq(xseg_alloc_registrable(xs, (size_t)4 << 20, S1, &p), XSEG_OK);
    ck_assert_int_eq(xseg_share_stats_get(xs, &b), XSEG_OK);
    ck_assert_uint_eq(b.dedicated_blocks.current, a.dedicated_blocks.current + 1);
    xseg_torch_record_stream(p, S2);
    ck_assert_str_eq(xseg_last_error(), "");
    xseg_torch_free(p, 0, -1, NULL);
    ck_assert_msg(!strcmp(xseg_last_error(), ""), "%s", xseg_last_error());
    ck_assert_int_eq(xseg_share_stats_get(xs, &c), XSEG_OK);
    ck_assert_uint_eq(c.dedicated_blocks.current, a.dedicated_blocks.current);
    ck_assert_uint_eq(c.dedicated_bytes.current, a.dedicated_bytes.current);
}
END_TEST

static Suite *plugin_suite(void)
{
    Suite *s = suite_create("plugin");
    TCase *c = tcase_create("entry_points");
    tcase_add_test(c, alloc_and_free);
    tcase_add_test(c, size_zero_is_null_without_error);
    tcase_add_test(c, free_null_is_a_no_op);
    tcase_add_test(c, bad_devices);
    tcase_add_test(c, free_finds_the_owner_whatever_the_device);
    tcase_add_test(c, bad_pointers);
    tcase_add_test(c, reset_releases_cached_memory);
    tcase_add_test(c, reset_keeps_live_memory);
    tcase_add_test(c, record_stream_defers_the_free);
    tcase_add_test(c, memory_fraction_caps_mapped_memory);
    tcase_add_test(c, init_checks_the_count);
    tcase_add_test(c, threads);
    tcase_add_test(c, dedicated_blocks_are_found);
    suite_add_tcase(s, c);
    TCase *g = tcase_create("graph_pools");
    tcase_add_test(g, graph_pool_routes_and_reuses);
    tcase_add_test(g, graph_pool_outlives_release_while_blocks_live);
    tcase_add_test(g, graph_pool_shared_by_two_captures);
    tcase_add_test(g, graph_pool_end_of_another_id_is_ignored);
    tcase_add_test(g, graph_pool_that_cannot_be_created);
    tcase_add_test(g, graph_pool_hooks_check_the_device);
    tcase_add_test(g, graph_pools_are_reported);
    suite_add_tcase(s, g);
    return s;
}

int main(void)
{
    /* Graph pools read XSEG_CONF; the default allocators the default conf. */
    setenv("XSEG_CONF", HOST_CONF, 1);
    if (xseg_set_default_conf(HOST_CONF) != XSEG_OK) {
        fprintf(stderr, "xseg_set_default_conf: %s\n", xseg_last_error());
        return EXIT_FAILURE;
    }
    return t_run(plugin_suite());
}
