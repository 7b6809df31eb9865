/* test_drv_layer.c: the driver layer (lib/drv.h) itself: its fault hook
 * makes a call fail counted and without reaching the driver; time is
 * accumulated per operation on the calling thread's side; capabilities
 * come from the backend's table; the libcuda symbol list answers by name. */
#include <string.h>

#include "driver_cuda.h"
#include "driver_host.h"
#include "internal.h"
#include "support_common.h"
#include "support_fault.h"

static int g_hook_calls;

/* Fail every map with XDRV_OUT_OF_MEMORY; count what the hook sees. */
static int fail_maps(void *user, int op)
{
    g_hook_calls++;
    return op == *(const int *)user ? XDRV_OUT_OF_MEMORY : XDRV_SUCCESS;
}

START_TEST(hook_fails_a_call_counted_without_the_driver)
{
    xseg_t *xs = t_host("host_capacity:256MB");
    xseg_host_counts before, after;
    xseg_host_counts_of(t_host_ctx(xs), &before);
    xseg_stats s0 = t_stats(xs);
    static const int map_op = XSEG_OP_MAP;
    g_hook_calls = 0;
    xdrv_set_fault_hook(fail_maps, (void *)&map_op);
    void *p = NULL;
    xseg_status st = xseg_alloc(xs, 4 * MiB, NULL, &p);
    xdrv_set_fault_hook(NULL, NULL);
    ck_assert_int_eq(st, XSEG_ERR_OOM);
    ck_assert_int_gt(g_hook_calls, 0);
    xseg_stats s1 = t_stats(xs);
    ck_assert_uint_gt(s1.driver_calls[XSEG_OP_MAP], s0.driver_calls[XSEG_OP_MAP]);
    ck_assert_uint_gt(s1.driver_errors, s0.driver_errors);
    xseg_host_counts_of(t_host_ctx(xs), &after);
    ck_assert_uint_eq(after.mapped_bytes, before.mapped_bytes); /* the driver never mapped */
    ck_assert_int_eq(xseg_alloc(xs, 4 * MiB, NULL, &p), XSEG_OK); /* hook gone: maps again */
    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    xseg_destroy(xs);
}
END_TEST

START_TEST(time_is_kept_per_op_and_side)
{
    xseg_t *xs = t_host("host_capacity:256MB");
    void *p = NULL;
    ck_assert_int_eq(xseg_alloc(xs, 4 * MiB, NULL, &p), XSEG_OK);
    ck_assert_uint_gt(xs->drvb.calls_side[XDRV_SIDE_CALLER], 0);
    ck_assert_uint_eq(xs->drvb.calls_side[XDRV_SIDE_WORKER], 0);
    ck_assert_uint_gt(xdrv_ns(xs, XDRV_SIDE_CALLER, XSEG_OP_MAP), 0);
    ck_assert_uint_ge(xdrv_ns(xs, XDRV_SIDE_CALLER, XSEG_OP_COUNT),
                      xdrv_ns(xs, XDRV_SIDE_CALLER, XSEG_OP_MAP));
    ck_assert_uint_eq(xdrv_ns(xs, XDRV_SIDE_WORKER, XSEG_OP_COUNT), 0);
    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    xdrv_side old = xdrv_side_set(XDRV_SIDE_WORKER);
    ck_assert_int_eq(old, XDRV_SIDE_CALLER);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK); /* unmaps on the worker side */
    xdrv_side_set(old);
    ck_assert_uint_eq(xs->drvb.calls_side[XDRV_SIDE_WORKER], 0); /* the worker's own until folded */
    xdrv_fold_worker(xs);
    ck_assert_uint_gt(xs->drvb.calls_side[XDRV_SIDE_WORKER], 0);
    ck_assert_uint_gt(xdrv_ns(xs, XDRV_SIDE_WORKER, XSEG_OP_UNMAP), 0);
    xseg_destroy(xs);
}
END_TEST

START_TEST(caps_come_from_the_table)
{
    xseg_t *xs = t_host(NULL);
    ck_assert(xdrv_has(xs, XDRV_CAP_EVENT_LAG));
    ck_assert(xdrv_has(xs, XDRV_CAP_SIMULATED_CAPACITY));
    ck_assert_str_eq(xdrv_name(xs), "host");
    ck_assert_str_eq(xdrv_error_name(xs, XDRV_OUT_OF_MEMORY), xseg_drv_code_name(XDRV_OUT_OF_MEMORY));
    xseg_destroy(xs);
    ck_assert_uint_eq(fault_driver.caps, 0); /* a wrapper claims nothing it was not given */
}
END_TEST

START_TEST(cuda_symbols_by_name)
{
    ck_assert_ptr_null(xseg_cuda_sym("cuNoSuchEntryPoint"));
    ck_assert_ptr_null(xseg_cuda_sym(NULL));
    void *sync = xseg_cuda_sym("cuCtxSynchronize");
    if (xseg_cuda_available()) {
        ck_assert_ptr_nonnull(sync);
        ck_assert_ptr_nonnull(xseg_cuda_sym("cuThreadExchangeStreamCaptureMode"));
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("drv_layer");
    TCase *tc = tcase_create("drv");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, hook_fails_a_call_counted_without_the_driver);
    tcase_add_test(tc, time_is_kept_per_op_and_side);
    tcase_add_test(tc, caps_come_from_the_table);
    tcase_add_test(tc, cuda_symbols_by_name);
    suite_add_tcase(s, tc);
    return t_run(s);
}
