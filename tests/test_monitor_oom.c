/* test_monitor_oom.c: the out-of-memory report (lib/api.c): the message
 * and the xseg_set_oom_callback callback carry the numbers (requested,
 * live, mapped, cached, cap, largest free block, device free) and a hint at
 * the config key that would help. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xseg.h"
#include "support_common.h"

#define MIB ((size_t)1 << 20)

typedef struct seen {
    int calls;
    xseg_oom_info info;
    char hint[256], message[768];
    void *user;
} seen;

static void on_oom(const xseg_oom_info *info, void *user)
{
    seen *s = user;
    s->calls++;
    s->info = *info;
    s->user = user;
    snprintf(s->hint, sizeof s->hint, "%s", info->hint ? info->hint : "");
    snprintf(s->message, sizeof s->message, "%s", info->message ? info->message : "");
}

static xseg_t *make(const char *conf)
{
    xseg_t *xs = NULL;
    ck_assert_msg(xseg_create(&xs, 0, conf) == XSEG_OK, "%s", xseg_last_error());
    return xs;
}

static xseg_stats stats(xseg_t *xs)
{
    xseg_stats s = {.size = sizeof s};
    ck_assert_int_eq(xseg_get_stats(xs, &s), XSEG_OK);
    return s;
}

/* Over the cap: the hint names the cap keys. */
START_TEST(t_cap)
{
    xseg_t *xs = make("backend:host,host_capacity:1GB,max_mapped:64MB");
    seen s = {0};
    ck_assert_int_eq(xseg_set_oom_callback(xs, on_oom, &s), XSEG_OK);
    void *a, *b, *c;
    ck_assert_int_eq(xseg_alloc(xs, 40 * MIB, NULL, &a), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 10 * MIB, NULL, &b), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, b), XSEG_OK); /* 10 MiB cached */
    ck_assert_int_eq(xseg_alloc(xs, 40 * MIB, NULL, &c), XSEG_ERR_OOM);
    ck_assert_ptr_null(c);
    ck_assert_int_eq(s.calls, 1);
    ck_assert_ptr_eq(s.user, &s);
    xseg_stats st = stats(xs);
    ck_assert_int_eq(s.info.device, 0);
    ck_assert_uint_eq(s.info.requested, 40 * MIB);
    ck_assert_uint_eq(s.info.live, 40 * MIB);
    ck_assert_uint_eq(s.info.live, st.allocated_bytes.current);
    ck_assert_uint_eq(s.info.mapped, st.mapped_bytes.current);
    ck_assert_uint_eq(s.info.cached, s.info.mapped - s.info.live);
    ck_assert_uint_eq(s.info.cap, 64 * MIB);
    ck_assert_uint_gt(s.info.largest_free, 40 * MIB); /* virtual space is not the problem */
    ck_assert_uint_gt(s.info.device_free, 512 * MIB); /* the device is not full either */
    ck_assert_uint_le(s.info.device_free, 1024 * MIB);
    ck_assert_ptr_nonnull(strstr(s.hint, "max_mapped"));
    ck_assert_ptr_nonnull(strstr(s.hint, "memory_fraction"));
    /* the message: same text as xseg_last_error, with every number */
    ck_assert_str_eq(s.message, xseg_last_error());
    ck_assert_ptr_nonnull(strstr(s.message, "out of memory on device 0"));
    ck_assert_ptr_nonnull(strstr(s.message, "requested 40.00 MiB (41943040 B)"));
    ck_assert_ptr_nonnull(strstr(s.message, "in use 40.00 MiB"));
    ck_assert_ptr_nonnull(strstr(s.message, "cap 64.00 MiB"));
    ck_assert_ptr_nonnull(strstr(s.message, "largest free block"));
    ck_assert_ptr_nonnull(strstr(s.message, "device free"));
    ck_assert_ptr_nonnull(strstr(s.message, "hint: raise max_mapped"));
    ck_assert_uint_eq(st.ooms, 1);
    ck_assert_uint_eq(st.mapped_cap, 64 * MIB);
    xseg_destroy(xs);
}
END_TEST

/* The device itself is full (no cap): no cap key in the hint. */
START_TEST(t_device_full)
{
    xseg_t *xs = make("backend:host,host_capacity:64MB");
    seen s = {0};
    ck_assert_int_eq(xseg_set_oom_callback(xs, on_oom, &s), XSEG_OK);
    void *a, *b;
    ck_assert_int_eq(xseg_alloc(xs, 48 * MIB, NULL, &a), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 48 * MIB, NULL, &b), XSEG_ERR_OOM);
    ck_assert_int_eq(s.calls, 1);
    ck_assert_uint_eq(s.info.requested, 48 * MIB);
    ck_assert_uint_eq(s.info.live, 48 * MIB);
    ck_assert_uint_eq(s.info.cap, 0);
    ck_assert_uint_lt(s.info.device_free, 48 * MIB);
    ck_assert_uint_ge(s.info.mapped, 48 * MIB);
    ck_assert_ptr_null(strstr(s.hint, "max_mapped"));
    ck_assert_ptr_nonnull(strstr(s.hint, "xseg_trim"));
    ck_assert_ptr_nonnull(strstr(s.message, "cap none"));
    ck_assert_ptr_nonnull(strstr(xseg_last_error(), "hint: free memory"));
    xseg_destroy(xs);
}
END_TEST

/* Every OOM calls back; NULL removes the callback; the allocator goes on. */
START_TEST(t_every_and_remove)
{
    xseg_t *xs = make("backend:host,host_capacity:1GB,max_mapped:16MB");
    seen s = {0};
    void *p;
    ck_assert_int_eq(xseg_set_oom_callback(xs, on_oom, &s), XSEG_OK);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(xseg_alloc(xs, 32 * MIB, NULL, &p), XSEG_ERR_OOM);
    ck_assert_int_eq(s.calls, 3);
    ck_assert_int_eq(xseg_set_oom_callback(xs, NULL, NULL), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 32 * MIB, NULL, &p), XSEG_ERR_OOM);
    ck_assert_int_eq(s.calls, 3);
    ck_assert_uint_eq(stats(xs).ooms, 4);
    ck_assert_int_eq(xseg_alloc(xs, 8 * MIB, NULL, &p), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    ck_assert_int_eq(xseg_set_oom_callback(NULL, on_oom, &s), XSEG_ERR_INVALID_ARG);
    xseg_destroy(xs);
}
END_TEST

/* Other failures are not OOMs: no callback. */
START_TEST(t_not_for_other_errors)
{
    xseg_t *xs = make("backend:host,host_capacity:64MB,va_size:64MB");
    seen s = {0};
    void *p;
    ck_assert_int_eq(xseg_set_oom_callback(xs, on_oom, &s), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 0, NULL, &p), XSEG_ERR_INVALID_ARG);
    ck_assert_int_eq(xseg_alloc(xs, 128 * MIB, NULL, &p), XSEG_ERR_SIZE);
    ck_assert_int_eq(xseg_free(xs, (void *)0x1000), XSEG_ERR_INVALID_POINTER);
    ck_assert_int_eq(s.calls, 0);
    xseg_destroy(xs);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("monitor_oom");
    TCase *tc = tcase_create("oom");
    tcase_add_test(tc, t_cap);
    tcase_add_test(tc, t_device_full);
    tcase_add_test(tc, t_every_and_remove);
    tcase_add_test(tc, t_not_for_other_errors);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return t_run(suite());
}
