/* test_fault_regress.c: the bugs fault injection found, one test each, so
 * that a regression names itself: a handle whose release failed was leaked;
 * a cached block whose unmap was refused could never be trimmed; cached
 * pages left outside the LRU after an adopted block merged with neutral
 * space (OOM under a cap with 41 MB cached); and a slab whose slot the
 * pointer map could not track (host memory) left empty and not kept. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "support_common.h"
#include "support_fault.h"

#define MIB ((size_t)1 << 20)
#define S(n) ((void *)(uintptr_t)(n))

static xseg_t *make(const char *conf)
{
    xseg_t *xs = NULL;
    ck_assert_msg(xseg_create_with_driver(&xs, 0, conf, &fault_driver) == XSEG_OK, "%s",
                  xseg_last_error());
    return xs;
}

static xseg_host_counts counts(xseg_t *xs)
{
    xseg_host_counts c;
    xseg_host_counts_of(xs->dctx, &c);
    return c;
}

static xseg_stats stats(xseg_t *xs)
{
    xseg_stats s = {.size = sizeof s};
    ck_assert_int_eq(xseg_get_stats(xs, &s), XSEG_OK);
    return s;
}

static void destroy_clean(xseg_t *xs)
{
    xseg_host_counts fc;
    fault_disarm();
    ck_assert_int_eq(xseg_destroy(xs), XSEG_OK);
    ck_assert(fault_fini_counts(&fc));
    ck_assert_uint_eq(fc.handles, 0);
    ck_assert_uint_eq(fc.mappings, 0);
    ck_assert_uint_eq(fc.reservations, 0);
}

START_TEST(failed_release_is_retried_not_leaked)
{
    fault_reset();
    xseg_t *xs = make("");
    void *p;
    ck_assert_int_eq(xseg_alloc(xs, 10 * MIB, NULL, &p), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    fault_arm(XSEG_OP_RELEASE, fault_calls(XSEG_OP_RELEASE) + 1, XDRV_INVALID_VALUE, FAULT_ONCE);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK); /* one release refused */
    ck_assert_uint_eq(fault_fired(), 1);
    ck_assert_uint_eq(counts(xs).handles, stats(xs).handles.current); /* still counted */
    ck_assert_uint_eq(counts(xs).handles, 1);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK); /* released now */
    ck_assert_uint_eq(counts(xs).handles, 0);
    ck_assert_uint_eq(stats(xs).handles.current, 0);
    destroy_clean(xs);
}
END_TEST

START_TEST(refused_unmap_stays_trimmable)
{
    fault_reset();
    xseg_t *xs = make("");
    void *p;
    ck_assert_int_eq(xseg_alloc(xs, 10 * MIB, NULL, &p), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    fault_arm(XSEG_OP_UNMAP, fault_calls(XSEG_OP_UNMAP) + 1, XDRV_INVALID_VALUE, FAULT_ONCE);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK); /* refused: stays cached */
    ck_assert_uint_eq(fault_fired(), 1);
    ck_assert_uint_eq(stats(xs).mapped_bytes.current, counts(xs).mapped_bytes);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK);
    ck_assert_uint_eq(stats(xs).mapped_bytes.current, 0);
    ck_assert_uint_eq(counts(xs).mapped_bytes, 0);
    destroy_clean(xs);
}
END_TEST

START_TEST(adopted_block_stays_reclaimable)
{
    fault_reset();
    fault_arm(XSEG_OP_EVENT_CREATE, 1, XDRV_OUT_OF_MEMORY, FAULT_ONCE);
    xseg_t *xs = make("max_mapped:64MB");
    void *a, *b, *c, *p1, *p2, *p3;
    ck_assert_int_eq(xseg_alloc(xs, 40 * MIB, S(1), &a), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, a), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 40 * MIB, S(2), &b), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 40 * MIB, S(1), &c), XSEG_ERR_OOM);
    ck_assert_int_eq(xseg_free(xs, b), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 1000, NULL, &p1), XSEG_OK); /* adopts b's block */
    ck_assert_int_eq(xseg_alloc(xs, 5 * MIB, NULL, &p2), XSEG_OK);
    /* b's 40 MB are cached: they must be reclaimable for this to fit. */
    ck_assert_msg(xseg_alloc(xs, 24 * MIB, S(4), &p3) == XSEG_OK, "%s", xseg_last_error());
    ck_assert_int_eq(xseg_free(xs, p1), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, p2), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, p3), XSEG_OK);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK);
    ck_assert_uint_eq(counts(xs).mapped_bytes, 0);
    destroy_clean(xs);
}
END_TEST

/* The pointer map out of host memory at a small request (ptrmap.h's
 * fail_puts stands in for the failed growth). */
static size_t kept_count(xseg_t *xs)
{
    size_t n = 0;
    for (const xlist_node *l = xlist_first(&xs->kept_slabs); l && n < 100; l = l->next)
        n++;
    return n;
}

/* A new slab whose first slot could not be tracked: nothing is on it, so it
 * is the class's kept slab (or given back), which trim finds on the kept
 * list.  Before, it stayed an empty slab nobody kept, mapped after trim. */
START_TEST(untracked_first_slot_leaves_a_kept_slab)
{
    xseg_t *xs = t_host("thread_cache:off");
    void *p = NULL;
    xs->live.fail_puts = 1000; /* the out-of-memory retries too */
    ck_assert_int_eq(xseg_alloc(xs, 1000, S(1), &p), XSEG_ERR_OOM);
    xs->live.fail_puts = 0;
    /* the report names the cause and says it is host memory, not the device */
    ck_assert_ptr_nonnull(strstr(xseg_last_error(), "cause: xseg: no host memory to track"));
    ck_assert_ptr_nonnull(strstr(xseg_last_error(), "hint: free host memory"));
    t_check_ok(xs);
    ck_assert_uint_eq(kept_count(xs), 1);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK);
    ck_assert_uint_eq(t_stats(xs).mapped_bytes.current, 0);
    ck_assert_int_eq(xseg_alloc(xs, 1000, S(1), &p), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    t_check_ok(xs);
    ck_assert_int_eq(xseg_destroy(xs), XSEG_OK);
}
END_TEST

/* The same on the class's kept slab: it stays kept, on the list once. */
START_TEST(untracked_slot_of_a_kept_slab_keeps_it_once)
{
    xseg_t *xs = t_host("thread_cache:off");
    void *p = NULL;
    ck_assert_int_eq(xseg_alloc(xs, 1000, S(1), &p), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK); /* its slab is kept */
    ck_assert_uint_eq(kept_count(xs), 1);
    xs->live.fail_puts = 1000;
    ck_assert_int_eq(xseg_alloc(xs, 1000, S(1), &p), XSEG_ERR_OOM);
    xs->live.fail_puts = 0;
    ck_assert_uint_eq(kept_count(xs), 1);
    t_check_ok(xs);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK);
    ck_assert_uint_eq(kept_count(xs), 0);
    ck_assert_uint_eq(t_stats(xs).mapped_bytes.current, 0);
    ck_assert_int_eq(xseg_destroy(xs), XSEG_OK);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("fault_regress");
    TCase *tc = tcase_create("regress");
    tcase_add_test(tc, failed_release_is_retried_not_leaked);
    tcase_add_test(tc, refused_unmap_stays_trimmable);
    tcase_add_test(tc, adopted_block_stays_reclaimable);
    tcase_add_test(tc, untracked_first_slot_leaves_a_kept_slab);
    tcase_add_test(tc, untracked_slot_of_a_kept_slab_keeps_it_once);
    suite_add_tcase(s, tc);
    return t_run(s);
}
