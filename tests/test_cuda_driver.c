/* test_cuda_driver.c: the CUDA backend (lib/driver_cuda.c) on a real GPU:
 * granularity, the reserve/create/map/set_access/unmap/release/address_free
 * round trip, mem_info accounting, events on the NULL stream, a thread with
 * no current context, and error codes for bad input.
 *
 * Without a usable GPU (no libcuda.so.1, no device, or a build without the
 * toolkit) it exits 77, which ctest reports as SKIPPED (SKIP_RETURN_CODE).
 * The suite runs CK_NOFORK: CUDA cannot be used in a child forked after the
 * parent has initialised it (the availability probe calls cuInit). */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"
#include "driver_cuda.h"

#define SKIP_RC 77
#define MIB ((size_t)1 << 20)

static const xseg_driver *D;
static void *C;
static size_t G;

static void setup(void)
{
    char err[256] = "";

    D = xseg_driver_cuda_ptr;
    ck_assert_ptr_nonnull(D);
    ck_assert_msg(D->init(&C, 0, 0, err, sizeof err) == XDRV_SUCCESS, "init: %s", err);
    ck_assert_int_eq(D->granularity(C, &G), XDRV_SUCCESS);
}

static void teardown(void)
{
    if (C != NULL)
        D->fini(C);
    C = NULL;
}

static size_t round_up(size_t n, size_t g)
{
    return (n + g - 1) / g * g;
}

START_TEST(test_granularity)
{
    ck_assert_uint_gt(G, 0);
    ck_assert_uint_eq(G & (G - 1), 0);
    ck_assert_int_eq(D->granularity(C, NULL), XDRV_INVALID_VALUE);
    ck_assert_int_gt(xseg_cuda_device_count(), 0);
    ck_assert_str_eq(D->name, "cuda");
}
END_TEST

START_TEST(test_round_trip)
{
    uintptr_t va = 0;
    uint64_t h = 0;

    ck_assert_int_eq(D->reserve(C, 4 * G, &va), XDRV_SUCCESS);
    ck_assert_uint_ne(va, 0);
    ck_assert_uint_eq(va % G, 0);
    ck_assert_int_eq(D->create(C, 2 * G, &h), XDRV_SUCCESS);
    ck_assert_int_eq(D->map(C, va + G, 2 * G, h), XDRV_SUCCESS);
    ck_assert_int_eq(D->set_access(C, va + G, 2 * G), XDRV_SUCCESS);
    ck_assert_int_eq(D->unmap(C, va + G, 2 * G), XDRV_SUCCESS);
    ck_assert_int_eq(D->release(C, h), XDRV_SUCCESS);
    ck_assert_int_eq(D->address_free(C, va, 4 * G), XDRV_SUCCESS);
}
END_TEST

/* Two adjacent maps: one set_access and one unmap cover both (the
 * contract lets unmap cover several whole maps). */
START_TEST(test_two_maps_one_unmap)
{
    uintptr_t va = 0;
    uint64_t h1 = 0, h2 = 0;

    ck_assert_int_eq(D->reserve(C, 2 * G, &va), XDRV_SUCCESS);
    ck_assert_int_eq(D->create(C, G, &h1), XDRV_SUCCESS);
    ck_assert_int_eq(D->create(C, G, &h2), XDRV_SUCCESS);
    ck_assert_int_eq(D->map(C, va, G, h1), XDRV_SUCCESS);
    ck_assert_int_eq(D->map(C, va + G, G, h2), XDRV_SUCCESS);
    ck_assert_int_eq(D->set_access(C, va, 2 * G), XDRV_SUCCESS);
    ck_assert_int_eq(D->unmap(C, va, 2 * G), XDRV_SUCCESS);
    ck_assert_int_eq(D->release(C, h1), XDRV_SUCCESS);
    ck_assert_int_eq(D->release(C, h2), XDRV_SUCCESS);
    ck_assert_int_eq(D->address_free(C, va, 2 * G), XDRV_SUCCESS);
}
END_TEST

START_TEST(test_mem_info)
{
    size_t s = round_up(512 * MIB, G), tol = s / 8;
    size_t free0 = 0, total0 = 0, free1 = 0, total1 = 0, free2 = 0;
    uintptr_t va = 0;
    uint64_t h = 0;

    ck_assert_int_eq(D->mem_info(C, &free0, &total0), XDRV_SUCCESS);
    ck_assert_uint_gt(total0, 0);
    ck_assert_uint_le(free0, total0);
    ck_assert_int_eq(D->reserve(C, s, &va), XDRV_SUCCESS);
    ck_assert_int_eq(D->create(C, s, &h), XDRV_SUCCESS);
    ck_assert_int_eq(D->map(C, va, s, h), XDRV_SUCCESS);
    ck_assert_int_eq(D->set_access(C, va, s), XDRV_SUCCESS);
    ck_assert_int_eq(D->mem_info(C, &free1, &total1), XDRV_SUCCESS);
    ck_assert_uint_eq(total1, total0);
    ck_assert_msg(free1 + s - tol <= free0 && free1 + s + tol >= free0,
                  "free %zu -> %zu while %zu bytes are mapped", free0, free1, s);
    ck_assert_int_eq(D->unmap(C, va, s), XDRV_SUCCESS);
    ck_assert_int_eq(D->release(C, h), XDRV_SUCCESS);
    ck_assert_int_eq(D->address_free(C, va, s), XDRV_SUCCESS);
    ck_assert_int_eq(D->mem_info(C, &free2, NULL), XDRV_SUCCESS);
    ck_assert_msg(free2 + tol >= free0, "free %zu before, %zu after release", free0, free2);
}
END_TEST

START_TEST(test_event_null_stream)
{
    void *ev = NULL;
    int q;

    ck_assert_int_eq(D->event_create(C, &ev), XDRV_SUCCESS);
    ck_assert_ptr_nonnull(ev);
    ck_assert_int_eq(D->event_record(C, ev, NULL), XDRV_SUCCESS);
    q = D->event_query(C, ev);
    ck_assert_msg(q == XDRV_SUCCESS || q == XDRV_NOT_READY, "query: %d", q);
    ck_assert_int_eq(D->event_sync(C, ev), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_query(C, ev), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_record(C, ev, NULL), XDRV_SUCCESS);
    ck_assert_int_eq(D->stream_sync(C, NULL), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_query(C, ev), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_destroy(C, ev), XDRV_SUCCESS);
}
END_TEST

START_TEST(test_bad_sizes)
{
    uintptr_t va = 0;
    uint64_t h = 0, h2 = 0;

    ck_assert_int_ne(D->reserve(C, 0, &va), XDRV_SUCCESS);
    ck_assert_int_ne(D->reserve(C, G + 1, &va), XDRV_SUCCESS);
    ck_assert_int_ne(D->create(C, 0, &h), XDRV_SUCCESS);
    ck_assert_int_ne(D->create(C, G / 2, &h), XDRV_SUCCESS);
    ck_assert_int_eq(D->reserve(C, 2 * G, &va), XDRV_SUCCESS);
    ck_assert_int_eq(D->create(C, G, &h), XDRV_SUCCESS);
    ck_assert_int_ne(D->map(C, va, G / 2, h), XDRV_SUCCESS);     /* unaligned size */
    ck_assert_int_ne(D->map(C, va + 4096, G, h), XDRV_SUCCESS);  /* unaligned address */
    ck_assert_int_ne(D->map(C, va, 2 * G, h), XDRV_SUCCESS);     /* larger than the handle */
    ck_assert_int_ne(D->set_access(C, va, G / 2), XDRV_SUCCESS);
    ck_assert_int_ne(D->unmap(C, va, G + 1), XDRV_SUCCESS);
    ck_assert_int_ne(D->address_free(C, va, 0), XDRV_SUCCESS);
    /* The failures had no effect: the handle still maps once. */
    ck_assert_int_eq(D->map(C, va, G, h), XDRV_SUCCESS);
    ck_assert_int_eq(D->create(C, G, &h2), XDRV_SUCCESS);
    ck_assert_int_ne(D->map(C, va, G, h2), XDRV_SUCCESS);        /* already mapped */
    ck_assert_int_eq(D->release(C, h2), XDRV_SUCCESS);
    ck_assert_int_eq(D->set_access(C, va, G), XDRV_SUCCESS);
    ck_assert_int_eq(D->unmap(C, va, G), XDRV_SUCCESS);
    ck_assert_int_eq(D->release(C, h), XDRV_SUCCESS);
    ck_assert_int_eq(D->address_free(C, va, 2 * G), XDRV_SUCCESS);
}
END_TEST

START_TEST(test_bad_events)
{
    ck_assert_int_eq(D->event_create(C, NULL), XDRV_INVALID_VALUE);
    ck_assert_int_eq(D->event_record(C, NULL, NULL), XDRV_INVALID_HANDLE);
    ck_assert_int_eq(D->event_query(C, NULL), XDRV_INVALID_HANDLE);
    ck_assert_int_eq(D->event_sync(C, NULL), XDRV_INVALID_HANDLE);
    ck_assert_int_eq(D->event_destroy(C, NULL), XDRV_INVALID_HANDLE);
}
END_TEST

START_TEST(test_error_names)
{
    ck_assert_str_eq(D->error_name(XDRV_SUCCESS), "CUDA_SUCCESS");
    ck_assert_str_eq(D->error_name(XDRV_OUT_OF_MEMORY), "CUDA_ERROR_OUT_OF_MEMORY");
    ck_assert_str_eq(D->error_name(XDRV_NOT_READY), "CUDA_ERROR_NOT_READY");
    ck_assert_str_eq(D->error_name(XDRV_INVALID_VALUE), "CUDA_ERROR_INVALID_VALUE");
    ck_assert_ptr_nonnull(D->error_name(123456));
}
END_TEST

START_TEST(test_bad_device)
{
    char err[256] = "";
    void *c2 = NULL;
    int n = xseg_cuda_device_count();

    ck_assert_int_eq(D->init(&c2, n, 0, err, sizeof err), XDRV_INVALID_DEVICE);
    ck_assert_ptr_null(c2);
    ck_assert_msg(strstr(err, "out of range") != NULL, "message: %s", err);
    err[0] = '\0';
    ck_assert_int_eq(D->init(&c2, -1, 0, err, sizeof err), XDRV_INVALID_DEVICE);
    ck_assert_ptr_null(c2);
    ck_assert_str_ne(err, "");
    ck_assert_int_eq(D->init(&c2, n, 0, NULL, 0), XDRV_INVALID_DEVICE);
}
END_TEST

/* A second context on the same device shares the retained primary context;
 * closing it leaves the first one working. */
START_TEST(test_second_ctx)
{
    char err[256] = "";
    void *c2 = NULL;
    size_t g2 = 0, f = 0;

    ck_assert_msg(D->init(&c2, 0, 0, err, sizeof err) == XDRV_SUCCESS, "init: %s", err);
    ck_assert_int_eq(D->granularity(c2, &g2), XDRV_SUCCESS);
    ck_assert_uint_eq(g2, G);
    D->fini(c2);
    ck_assert_int_eq(D->mem_info(C, &f, NULL), XDRV_SUCCESS);
    ck_assert_uint_gt(f, 0);
}
END_TEST

/* Operations from a thread that has no current context. */
struct thread_result {
    int mem_info, reserve, create, map, access, unmap, release, address_free;
    int ev_create, ev_record, ev_sync, ev_destroy;
};

static void *fresh_thread(void *arg)
{
    struct thread_result *r = arg;
    size_t f = 0;
    uintptr_t va = 0;
    uint64_t h = 0;
    void *ev = NULL;

    r->mem_info = D->mem_info(C, &f, NULL);
    r->reserve = D->reserve(C, G, &va);
    r->create = D->create(C, G, &h);
    r->map = D->map(C, va, G, h);
    r->access = D->set_access(C, va, G);
    r->unmap = D->unmap(C, va, G);
    r->release = D->release(C, h);
    r->address_free = D->address_free(C, va, G);
    r->ev_create = D->event_create(C, &ev);
    r->ev_record = D->event_record(C, ev, NULL);
    r->ev_sync = D->event_sync(C, ev);
    r->ev_destroy = D->event_destroy(C, ev);
    return NULL;
}

START_TEST(test_fresh_thread)
{
    struct thread_result r;
    pthread_t t;

    memset(&r, 0xff, sizeof r);
    ck_assert_int_eq(pthread_create(&t, NULL, fresh_thread, &r), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_int_eq(r.mem_info, XDRV_SUCCESS);
    ck_assert_int_eq(r.reserve, XDRV_SUCCESS);
    ck_assert_int_eq(r.create, XDRV_SUCCESS);
    ck_assert_int_eq(r.map, XDRV_SUCCESS);
    ck_assert_int_eq(r.access, XDRV_SUCCESS);
    ck_assert_int_eq(r.unmap, XDRV_SUCCESS);
    ck_assert_int_eq(r.release, XDRV_SUCCESS);
    ck_assert_int_eq(r.address_free, XDRV_SUCCESS);
    ck_assert_int_eq(r.ev_create, XDRV_SUCCESS);
    ck_assert_int_eq(r.ev_record, XDRV_SUCCESS);
    ck_assert_int_eq(r.ev_sync, XDRV_SUCCESS);
    ck_assert_int_eq(r.ev_destroy, XDRV_SUCCESS);
}
END_TEST

static Suite *cuda_driver_suite(void)
{
    Suite *s = suite_create("cuda_driver");
    TCase *tc = tcase_create("driver");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_granularity);
    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_two_maps_one_unmap);
    tcase_add_test(tc, test_mem_info);
    tcase_add_test(tc, test_event_null_stream);
    tcase_add_test(tc, test_bad_sizes);
    tcase_add_test(tc, test_bad_events);
    tcase_add_test(tc, test_error_names);
    tcase_add_test(tc, test_bad_device);
    tcase_add_test(tc, test_second_ctx);
    tcase_add_test(tc, test_fresh_thread);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr;
    int failed;

    if (!xseg_cuda_available()) {
        fprintf(stderr, "test_cuda_driver: SKIPPED: no usable CUDA device\n");
        return SKIP_RC;
    }
    sr = srunner_create(cuda_driver_suite());
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
