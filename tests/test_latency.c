/* test_latency.c: the host backend's latency model (conf
 * host_driver_latency, driver_host.h's xseg_host_set_latency) and the
 * public driver time (xseg_driver_time): under h200 every create, map,
 * set_access, unmap and release lasts at least its modelled time, and
 * the caller-side driver time counts it; calls of two threads take turns
 * on one timeline; off parses and changes no call;
 * bad values are refused naming the key.  Lower bounds only: no test
 * asserts that anything is fast. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "driver.h"
#include "driver_host.h"
#include "support_common.h"

#define S1 ((void *)(uintptr_t)0x1001)

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t caller_ns(xseg_t *xs, xseg_op op)
{
    uint64_t ns = 0;
    ck_assert_int_eq(xseg_driver_time(xs, XSEG_SIDE_CALLER, op, &ns), XSEG_OK);
    return ns;
}

/* Growth by 16 pages of 2 MiB, then giving them back at once: each page
 * is created, mapped, made accessible, unmapped and released once, so the
 * model's time is at least 16 x each figure. */
START_TEST(h200_calls_take_the_modelled_time)
{
    const xseg_host_latency *m = &xseg_host_latency_h200;
    /* every handle is one 2 MiB page: one call (or handle) and one unit each */
    uint64_t create = m->create.call_ns + m->create.per_2mib_ns;
    uint64_t map = m->map.call_ns + m->map.per_2mib_ns;
    uint64_t access = m->set_access.call_ns + m->set_access.per_2mib_ns;
    uint64_t unmap = m->unmap.call_ns + m->unmap.per_2mib_ns;
    uint64_t release = m->release.call_ns + m->release.per_2mib_ns;
    ck_assert_uint_ge(access, 24000); /* the figures are there at all */
    xseg_t *xs = t_host("host_driver_latency:h200,handle_size:page,release_threshold:0,"
                        "thread_cache:off");
    void *p;
    uint64_t t0 = mono_ns();
    ck_assert_int_eq(xseg_alloc(xs, 32 * MiB, S1, &p), XSEG_OK);
    uint64_t grow = mono_ns() - t0;
    xseg_stats s = t_stats(xs);
    uint64_t pages = s.mapped_bytes.current / (2 * MiB);
    ck_assert_uint_ge(pages, 16);
    uint64_t model_grow = pages * (create + map + access);
    ck_assert_msg(grow >= model_grow, "growth by %llu pages took %llu ns < model %llu ns",
                  (unsigned long long)pages, (unsigned long long)grow,
                  (unsigned long long)model_grow);
    ck_assert_uint_ge(caller_ns(xs, XSEG_OP_CREATE), pages * create);
    ck_assert_uint_ge(caller_ns(xs, XSEG_OP_MAP), pages * map);
    ck_assert_uint_ge(caller_ns(xs, XSEG_OP_SET_ACCESS), pages * access);
    ck_assert_uint_ge(caller_ns(xs, XSEG_OP_COUNT), model_grow);

    t0 = mono_ns();
    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK);
    uint64_t give = mono_ns() - t0;
    ck_assert_uint_eq(t_stats(xs).mapped_bytes.current, 0);
    uint64_t model_give = pages * (unmap + release);
    ck_assert_msg(give >= model_give, "giving %llu pages back took %llu ns < model %llu ns",
                  (unsigned long long)pages, (unsigned long long)give,
                  (unsigned long long)model_give);
    ck_assert_uint_ge(caller_ns(xs, XSEG_OP_UNMAP), pages * unmap);
    ck_assert_uint_ge(caller_ns(xs, XSEG_OP_RELEASE), pages * release);
    ck_assert_uint_ge(caller_ns(xs, XSEG_OP_COUNT), model_grow + model_give);
    xseg_destroy(xs);
}
END_TEST

/* The backend alone: an 8 MiB handle's calls cost one call and 4 units;
 * set_access and unmap over two adjacent handles cost two handles. */
START_TEST(backend_charges_per_call_handle_and_2mib)
{
    const xseg_driver *d = &xseg_driver_host;
    const xseg_host_cost k = {100000, 100000};
    xseg_host_latency lat = {k, k, k, k, k};
    void *ctx = NULL;
    char err[256];
    ck_assert_int_eq(d->init(&ctx, 0, 64 * MiB, err, sizeof err), XDRV_SUCCESS);
    ck_assert(d->caps & XDRV_CAP_LATENCY_MODEL);
    xseg_host_set_latency(ctx, &lat);
    uintptr_t va;
    uint64_t h, h2;
    ck_assert_int_eq(d->reserve(ctx, 16 * MiB, &va), XDRV_SUCCESS);
    uint64_t t[5], t0 = mono_ns();
    ck_assert_int_eq(d->create(ctx, 8 * MiB, &h), XDRV_SUCCESS);
    t[0] = mono_ns() - t0, t0 = mono_ns();
    ck_assert_int_eq(d->map(ctx, va, 8 * MiB, h), XDRV_SUCCESS);
    t[1] = mono_ns() - t0, t0 = mono_ns();
    ck_assert_int_eq(d->set_access(ctx, va, 8 * MiB), XDRV_SUCCESS);
    t[2] = mono_ns() - t0, t0 = mono_ns();
    ck_assert_int_eq(d->unmap(ctx, va, 8 * MiB), XDRV_SUCCESS);
    t[3] = mono_ns() - t0, t0 = mono_ns();
    ck_assert_int_eq(d->release(ctx, h), XDRV_SUCCESS);
    t[4] = mono_ns() - t0;
    for (int i = 0; i < 5; i++)
        ck_assert_msg(t[i] >= 5 * 100000, "call %d took %llu ns < 100 us + 4 x 100 us", i,
                      (unsigned long long)t[i]);
    /* per handle: two 2 MiB handles side by side, one call over both */
    const xseg_host_cost per_handle = {400000, 0}, none = {0, 0};
    xseg_host_latency lat2 = {none, none, none, per_handle, per_handle};
    xseg_host_set_latency(ctx, &lat2);
    ck_assert_int_eq(d->create(ctx, 2 * MiB, &h), XDRV_SUCCESS);
    ck_assert_int_eq(d->create(ctx, 2 * MiB, &h2), XDRV_SUCCESS);
    ck_assert_int_eq(d->map(ctx, va, 2 * MiB, h), XDRV_SUCCESS);
    ck_assert_int_eq(d->map(ctx, va + 2 * MiB, 2 * MiB, h2), XDRV_SUCCESS);
    t0 = mono_ns();
    ck_assert_int_eq(d->set_access(ctx, va, 4 * MiB), XDRV_SUCCESS);
    t[0] = mono_ns() - t0, t0 = mono_ns();
    ck_assert_int_eq(d->unmap(ctx, va, 4 * MiB), XDRV_SUCCESS);
    t[1] = mono_ns() - t0;
    ck_assert_msg(t[0] >= 800000 && t[1] >= 800000,
                  "set_access / unmap over 2 handles took %llu / %llu ns < 2 x 400 us",
                  (unsigned long long)t[0], (unsigned long long)t[1]);
    xseg_host_set_latency(ctx, NULL);
    ck_assert_int_eq(d->release(ctx, h), XDRV_SUCCESS);
    ck_assert_int_eq(d->release(ctx, h2), XDRV_SUCCESS);
    ck_assert_int_eq(d->release(ctx, h), XDRV_INVALID_HANDLE);
    ck_assert_int_eq(d->address_free(ctx, va, 16 * MiB), XDRV_SUCCESS);
    d->fini(ctx);
}
END_TEST

/* Timed calls take turns, as in the CUDA driver: two threads, each with a
 * context of its own, each creating N handles of 1 ms, last at least 2 x N
 * ms together (side by side they would take N). */
enum { TURNS = 10 };

static void *create_in_turn(void *arg)
{
    const xseg_driver *d = &xseg_driver_host;
    void *ctx = arg;
    uint64_t h[TURNS];
    for (int i = 0; i < TURNS; i++)
        if (d->create(ctx, 2 * MiB, &h[i]) != XDRV_SUCCESS)
            return (void *)1;
    for (int i = 0; i < TURNS; i++)
        if (d->release(ctx, h[i]) != XDRV_SUCCESS)
            return (void *)1;
    return NULL;
}

START_TEST(calls_of_two_threads_take_turns)
{
    const xseg_driver *d = &xseg_driver_host;
    const xseg_host_cost ms = {1000000, 0}, none = {0, 0};
    xseg_host_latency lat = {ms, none, none, none, none};
    void *ctx[2];
    pthread_t t[2];
    char err[256];
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(d->init(&ctx[i], 0, 64 * MiB, err, sizeof err), XDRV_SUCCESS);
        xseg_host_set_latency(ctx[i], &lat);
    }
    uint64_t t0 = mono_ns();
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, create_in_turn, ctx[i]), 0);
    for (int i = 0; i < 2; i++) {
        void *r;
        ck_assert_int_eq(pthread_join(t[i], &r), 0);
        ck_assert_ptr_null(r);
    }
    uint64_t took = mono_ns() - t0;
    ck_assert_msg(took >= 2u * TURNS * 1000000u, "2 x %d creates of 1 ms on two threads took "
                  "%llu ns: they overlapped", TURNS, (unsigned long long)took);
    for (int i = 0; i < 2; i++)
        d->fini(ctx[i]);
}
END_TEST

/* A fixed sequence's driver calls and peak, for comparing confs. */
static xseg_stats run_sequence(const char *extra)
{
    xseg_t *xs = t_host(extra);
    void *p[8];
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(xseg_alloc(xs, (size_t)(i + 1) * 3 * MiB, S1, &p[i]), XSEG_OK);
    for (int i = 0; i < 8; i += 2)
        ck_assert_int_eq(xseg_free(xs, p[i]), XSEG_OK);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK);
    for (int i = 1; i < 8; i += 2)
        ck_assert_int_eq(xseg_free(xs, p[i]), XSEG_OK);
    xseg_stats s = t_stats(xs);
    xseg_destroy(xs);
    return s;
}

START_TEST(off_parses_and_changes_nothing)
{
    xseg_stats a = run_sequence(NULL);
    xseg_stats b = run_sequence("host_driver_latency:off");
    xseg_stats c = run_sequence("host_driver_latency:OFF,host_driver_latency:h200,"
                                "host_driver_latency:off");
    for (int op = 0; op < XSEG_OP_COUNT; op++) {
        ck_assert_uint_eq(a.driver_calls[op], b.driver_calls[op]);
        ck_assert_uint_eq(a.driver_calls[op], c.driver_calls[op]);
    }
    ck_assert_uint_eq(a.mapped_bytes.peak, b.mapped_bytes.peak);
    ck_assert_uint_eq(a.handles.peak, b.handles.peak);
    /* h200 changes the time only, never the calls */
    xseg_stats d = run_sequence("host_driver_latency:h200");
    for (int op = 0; op < XSEG_OP_COUNT; op++)
        ck_assert_uint_eq(a.driver_calls[op], d.driver_calls[op]);
    ck_assert_uint_eq(a.mapped_bytes.peak, d.mapped_bytes.peak);
}
END_TEST

START_TEST(bad_values_name_the_key)
{
    const char *bad[] = {"host_driver_latency:h100", "host_driver_latency:on",
                         "host_driver_latency:", "host_driver_latency:1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char conf[128];
        snprintf(conf, sizeof conf, "backend:host,%s", bad[i]);
        xseg_t *xs = NULL;
        ck_assert_int_eq(xseg_create(&xs, 0, conf), XSEG_ERR_CONFIG);
        ck_assert_ptr_null(xs);
        ck_assert_msg(strstr(xseg_last_error(), "host_driver_latency") != NULL,
                      "%s: message does not name the key: %s", bad[i], xseg_last_error());
    }
}
END_TEST

START_TEST(driver_time_checks_its_arguments)
{
    xseg_t *xs = t_host(NULL);
    uint64_t ns = 7;
    ck_assert_int_eq(xseg_driver_time(xs, XSEG_SIDE_CALLER, XSEG_OP_MAP, NULL),
                     XSEG_ERR_INVALID_ARG);
    ck_assert_int_eq(xseg_driver_time(xs, (xseg_side)2, XSEG_OP_MAP, &ns), XSEG_ERR_INVALID_ARG);
    ck_assert_int_eq(xseg_driver_time(xs, XSEG_SIDE_CALLER, (xseg_op)(XSEG_OP_COUNT + 1), &ns),
                     XSEG_ERR_INVALID_ARG);
    ck_assert_uint_eq(ns, 7);
    ck_assert_int_eq(xseg_driver_time(NULL, XSEG_SIDE_CALLER, XSEG_OP_MAP, &ns),
                     XSEG_ERR_INVALID_ARG);
    /* the total is the sum over the ops */
    void *p;
    ck_assert_int_eq(xseg_alloc(xs, 4 * MiB, S1, &p), XSEG_OK);
    uint64_t sum = 0;
    for (int op = 0; op < XSEG_OP_COUNT; op++)
        sum += caller_ns(xs, (xseg_op)op);
    ck_assert_uint_eq(caller_ns(xs, XSEG_OP_COUNT), sum);
    ck_assert_uint_gt(sum, 0);
    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    xseg_destroy(xs);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("latency");
    TCase *tc = tcase_create("latency");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, h200_calls_take_the_modelled_time);
    tcase_add_test(tc, backend_charges_per_call_handle_and_2mib);
    tcase_add_test(tc, calls_of_two_threads_take_turns);
    tcase_add_test(tc, off_parses_and_changes_nothing);
    tcase_add_test(tc, bad_values_name_the_key);
    tcase_add_test(tc, driver_time_checks_its_arguments);
    suite_add_tcase(s, tc);
    return t_run(s);
}
