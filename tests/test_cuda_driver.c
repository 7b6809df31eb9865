/* test_cuda_driver.c: what only the CUDA backend (lib/driver_cuda.c) does,
 * on a real GPU: its name and capabilities, the device count and the range
 * an out-of-range device is told, init ignoring the capacity, mem_info with
 * one output left NULL, and two contexts of one device sharing the retained
 * primary context.  The driver contract itself (round trip, maps, events,
 * mem_info, bad sizes, a fresh thread, ...) is test_driver_contract.c's,
 * run there over the host, fault and cuda drivers alike.
 *
 * Without a usable GPU (no libcuda.so.1, no device, or a build without the
 * toolkit) it exits 77, which ctest reports as SKIPPED (SKIP_RETURN_CODE).
 * The suite runs CK_NOFORK: CUDA cannot be used in a child forked after the
 * parent has initialised it (the availability probe calls cuInit). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"
#include "driver_cuda.h"

#define SKIP_RC 77

static const xseg_driver *D;
static void *C;
static size_t G;

/* capacity 0: the host backend refuses it, cuda ignores it */
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

START_TEST(test_identity)
{
    ck_assert_str_eq(D->name, "cuda");
    ck_assert_int_gt(xseg_cuda_device_count(), 0);
    ck_assert_uint_eq(D->caps & (XDRV_CAP_EVENT_LAG | XDRV_CAP_SIMULATED_CAPACITY), 0);
}
END_TEST

START_TEST(test_bad_device)
{
    char err[256] = "", want[64];
    void *c2 = NULL;
    int n = xseg_cuda_device_count();

    ck_assert_int_eq(D->init(&c2, n, 0, err, sizeof err), XDRV_INVALID_DEVICE);
    ck_assert_ptr_null(c2);
    snprintf(want, sizeof want, "valid 0..%d", n - 1);
    ck_assert_msg(strstr(err, "out of range") != NULL && strstr(err, want) != NULL,
                  "message: %s", err);
}
END_TEST

/* Either output of mem_info may be NULL on cuda (cuMemGetInfo's outputs are
 * copied only when asked for). */
START_TEST(test_mem_info_one_output)
{
    size_t f = 0, t = 0;

    ck_assert_int_eq(D->mem_info(C, &f, NULL), XDRV_SUCCESS);
    ck_assert_int_eq(D->mem_info(C, NULL, &t), XDRV_SUCCESS);
    ck_assert_uint_gt(t, 0);
    ck_assert_uint_le(f, t);
}
END_TEST

/* A second context of device 0 retains the same primary context: an event
 * created through one is recorded, waited on and destroyed through the
 * other, and closing the second leaves the first working. */
START_TEST(test_shared_primary)
{
    char err[256] = "";
    void *c2 = NULL, *ev = NULL;
    size_t f = 0, t = 0;

    ck_assert_msg(D->init(&c2, 0, 0, err, sizeof err) == XDRV_SUCCESS, "init: %s", err);
    ck_assert_int_eq(D->event_create(C, &ev), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_record(c2, ev, NULL), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_sync(c2, ev), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_query(C, ev), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_destroy(c2, ev), XDRV_SUCCESS);
    D->fini(c2);
    ck_assert_int_eq(D->mem_info(C, &f, &t), XDRV_SUCCESS);
    ck_assert_uint_gt(t, 0);
}
END_TEST

static Suite *cuda_driver_suite(void)
{
    Suite *s = suite_create("cuda_driver");
    TCase *tc = tcase_create("cuda_only");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_identity);
    tcase_add_test(tc, test_bad_device);
    tcase_add_test(tc, test_mem_info_one_output);
    tcase_add_test(tc, test_shared_primary);
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
