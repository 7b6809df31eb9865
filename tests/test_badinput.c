/* test_badinput.c: every bad input of the public API returns a clear status
 * and message and leaves the allocator's state (stats, live data) as it
 * was. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "support_common.h"

/* A live large block and a live small slot, with patterns. */
typedef struct fixture {
    xseg_t *xs;
    void *big, *small;
    xseg_stats before;
} fixture;

static fixture setup(void)
{
    fixture f = {.xs = t_host(NULL)};
    ck_assert_int_eq(xseg_alloc(f.xs, 6 * MiB, NULL, &f.big), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(f.xs, 3000, NULL, &f.small), XSEG_OK);
    t_fill(f.big, 6 * MiB, 1);
    t_fill(f.small, 3000, 2);
    f.before = t_stats(f.xs);
    return f;
}

/* Nothing changed but the call counters. */
static void unchanged(fixture *f)
{
    xseg_stats s = t_stats(f->xs);
    ck_assert_uint_eq(s.allocated_bytes.current, f->before.allocated_bytes.current);
    ck_assert_uint_eq(s.requested_bytes.current, f->before.requested_bytes.current);
    ck_assert_uint_eq(s.active_blocks.current, f->before.active_blocks.current);
    ck_assert_uint_eq(s.mapped_bytes.current, f->before.mapped_bytes.current);
    ck_assert(t_check(f->big, 6 * MiB, 1));
    ck_assert(t_check(f->small, 3000, 2));
    ck_assert_str_ne(xseg_last_error(), "");
}

static void teardown(fixture *f)
{
    ck_assert_int_eq(xseg_free(f->xs, f->big), XSEG_OK);
    ck_assert_int_eq(xseg_free(f->xs, f->small), XSEG_OK);
    ck_assert_int_eq(xseg_destroy(f->xs), XSEG_OK);
}

START_TEST(foreign_pointers)
{
    fixture f = setup();
    int on_stack;
    void *heap = malloc(64);
    ck_assert_int_eq(xseg_free(f.xs, &on_stack), XSEG_ERR_INVALID_POINTER);
    ck_assert_ptr_nonnull(strstr(xseg_last_error(), "not allocated by this allocator"));
    ck_assert_int_eq(xseg_free(f.xs, heap), XSEG_ERR_INVALID_POINTER);
    ck_assert_int_eq(xseg_free(f.xs, (void *)(uintptr_t)8), XSEG_ERR_INVALID_POINTER);
    ck_assert_int_eq(xseg_free(f.xs, NULL), XSEG_ERR_INVALID_ARG);
    xseg_t *other = t_host(NULL);
    void *o;
    ck_assert_int_eq(xseg_alloc(other, 4096, NULL, &o), XSEG_OK);
    ck_assert_int_eq(xseg_free(f.xs, o), XSEG_ERR_INVALID_POINTER);
    ck_assert_int_eq(xseg_record_stream(f.xs, o, NULL), XSEG_ERR_INVALID_POINTER);
    ck_assert_int_eq(xseg_free(other, o), XSEG_OK);
    xseg_destroy(other);
    free(heap);
    unchanged(&f);
    teardown(&f);
}
END_TEST

START_TEST(interior_pointers)
{
    fixture f = setup();
    ck_assert_int_eq(xseg_free(f.xs, (char *)f.big + 512), XSEG_ERR_INTERIOR_POINTER);
    ck_assert_ptr_nonnull(strstr(xseg_last_error(), "inside a live allocation"));
    ck_assert_int_eq(xseg_free(f.xs, (char *)f.big + 5 * MiB + 1), XSEG_ERR_INTERIOR_POINTER);
    ck_assert_int_eq(xseg_free(f.xs, (char *)f.small + 1), XSEG_ERR_INTERIOR_POINTER);
    size_t r;
    ck_assert_int_eq(xseg_block_size(f.xs, (char *)f.small + 100, &r, NULL),
                     XSEG_ERR_INTERIOR_POINTER);
    ck_assert_int_eq(xseg_record_stream(f.xs, (char *)f.big + 4096, NULL),
                     XSEG_ERR_INTERIOR_POINTER);
    unchanged(&f);
    teardown(&f);
}
END_TEST

START_TEST(double_frees)
{
    fixture f = setup();
    void *p, *q;
    ck_assert_int_eq(xseg_alloc(f.xs, 3 * MiB, NULL, &p), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(f.xs, 700, NULL, &q), XSEG_OK);
    ck_assert_int_eq(xseg_free(f.xs, p), XSEG_OK);
    ck_assert_int_eq(xseg_free(f.xs, q), XSEG_OK);
    f.before = t_stats(f.xs);
    ck_assert_int_eq(xseg_free(f.xs, p), XSEG_ERR_DOUBLE_FREE);
    ck_assert_ptr_nonnull(strstr(xseg_last_error(), "already freed"));
    ck_assert_int_eq(xseg_free(f.xs, q), XSEG_ERR_DOUBLE_FREE);
    ck_assert_int_eq(xseg_block_size(f.xs, p, NULL, NULL), XSEG_ERR_DOUBLE_FREE);
    unchanged(&f);
    teardown(&f);
}
END_TEST

START_TEST(bad_sizes)
{
    fixture f = setup();
    void *p = (void *)1;
    ck_assert_int_eq(xseg_alloc(f.xs, 0, NULL, &p), XSEG_ERR_INVALID_ARG);
    ck_assert_ptr_null(p);
    ck_assert_ptr_nonnull(strstr(xseg_last_error(), "size is 0"));
    static const size_t huge[] = {SIZE_MAX, SIZE_MAX - 1, SIZE_MAX / 2, (size_t)1 << 62,
                                  SIZE_MAX - 4095};
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
        ck_assert_int_eq(xseg_alloc(f.xs, huge[i], NULL, &p), XSEG_ERR_SIZE);
        ck_assert_ptr_nonnull(strstr(xseg_last_error(), "exceeds"));
    }
    /* Within the virtual range but beyond the simulated memory: OOM. */
    ck_assert_int_eq(xseg_alloc(f.xs, t_stats(f.xs).device_total + GiB, NULL, &p), XSEG_ERR_OOM);
    ck_assert_ptr_nonnull(strstr(xseg_last_error(), "out of memory"));
    ck_assert_int_eq(xseg_alloc(f.xs, 1, NULL, &p), XSEG_OK);
    ck_assert_int_eq(xseg_free(f.xs, p), XSEG_OK);
    f.before = t_stats(f.xs);
    unchanged(&f);
    teardown(&f);
}
END_TEST

START_TEST(null_arguments)
{
    fixture f = setup();
    void *p;
    xseg_stats s = {.size = sizeof s};
    ck_assert_int_eq(xseg_alloc(NULL, 10, NULL, &p), XSEG_ERR_INVALID_ARG);
    ck_assert_int_eq(xseg_alloc(f.xs, 10, NULL, NULL), XSEG_ERR_INVALID_ARG);
    ck_assert_int_eq(xseg_free(NULL, f.big), XSEG_ERR_INVALID_ARG);
    ck_assert_int_eq(xseg_record_stream(NULL, f.big, NULL), XSEG_ERR_INVALID_ARG);
    ck_assert_int_eq(xseg_record_stream(f.xs, NULL, NULL), XSEG_ERR_INVALID_ARG);
    ck_assert_int_eq(xseg_block_size(f.xs, NULL, NULL, NULL), XSEG_ERR_INVALID_ARG);
    ck_assert_int_eq(xseg_trim(NULL, 0, NULL), XSEG_ERR_INVALID_ARG);
    ck_assert_int_eq(xseg_get_stats(NULL, &s), XSEG_ERR_INVALID_ARG);
    ck_assert_int_eq(xseg_get_stats(f.xs, NULL), XSEG_ERR_INVALID_ARG);
    xseg_stats zero = {.size = 0};
    ck_assert_int_eq(xseg_get_stats(f.xs, &zero), XSEG_ERR_INVALID_ARG);
    ck_assert_int_eq(xseg_stats_json(f.xs, NULL, 10, NULL), XSEG_ERR_INVALID_ARG);
    size_t need = 0;
    ck_assert_int_eq(xseg_stats_json(f.xs, NULL, 0, &need), XSEG_ERR_BUFFER_TOO_SMALL);
    ck_assert_uint_gt(need, 0);
    ck_assert_int_eq(xseg_reset_peak(NULL), XSEG_ERR_INVALID_ARG);
    ck_assert_int_eq(xseg_set_expected_peak(NULL, 1), XSEG_ERR_INVALID_ARG);
    ck_assert_int_eq(xseg_destroy(NULL), XSEG_ERR_INVALID_ARG);
    ck_assert_int_eq(xseg_default(0, NULL), XSEG_ERR_INVALID_ARG);
    ck_assert_str_eq(xseg_backend_name(NULL), "none");
    unchanged(&f);
    teardown(&f);
}
END_TEST

START_TEST(status_strings)
{
    for (int st = XSEG_OK; st <= XSEG_ERR_INTERNAL; st++) {
        const char *m = xseg_strerror((xseg_status)st);
        ck_assert_ptr_nonnull(m);
        ck_assert_str_ne(m, "unknown status");
    }
    ck_assert_str_eq(xseg_strerror((xseg_status)999), "unknown status");
    for (int op = 0; op < XSEG_OP_COUNT; op++)
        ck_assert_str_ne(xseg_op_name((xseg_op)op), "unknown");
    ck_assert_str_eq(xseg_op_name(XSEG_OP_COUNT), "unknown");
    ck_assert_str_eq(xseg_version(), XSEG_VERSION_STRING);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("badinput");
    TCase *tc = tcase_create("api");
    tcase_add_test(tc, foreign_pointers);
    tcase_add_test(tc, interior_pointers);
    tcase_add_test(tc, double_frees);
    tcase_add_test(tc, bad_sizes);
    tcase_add_test(tc, null_arguments);
    tcase_add_test(tc, status_strings);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return t_run(suite());
}
