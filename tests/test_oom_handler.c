/* test_oom_handler.c: xseg_set_oom_handler on the host backend (issue 16):
 * a handler that frees memory gets its allocation retried and served; one
 * that frees nothing, or declines, leaves XSEG_ERR_OOM with the original
 * message; one that allocates (recursively) inside itself neither deadlocks
 * nor recurses; a handler is called once per failed call; removal works,
 * and xseg_destroy removes it;
 * a tag's allocation (one cap for the family) finds its parent's handler. */
#include <check.h>
#include <string.h>

#include "support_common.h"

#define CAP "max_mapped:64MB,thread_cache:off,premap:off"

typedef struct hstate {
    int calls;
    size_t requested;
    xseg_t *seen;
    void *victim;   /* freed by the handler when not NULL */
    int answer;     /* what the handler returns */
    int nested;     /* allocate inside the handler this many bytes (MiB) */
    xseg_status nested_st;
    void *nested_ptr;
} hstate;

static int handler(xseg_t *xs, size_t requested, void *user)
{
    hstate *h = user;
    h->calls++;
    h->requested = requested;
    h->seen = xs;
    if (h->victim) {
        xseg_status fst = xseg_free(xs, h->victim); /* the lock is not held */
        ck_assert_msg(fst == XSEG_OK, "free in the handler: %s", xseg_last_error());
        h->victim = NULL;
        ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK); /* back under the family's cap */
    }
    if (h->nested)
        h->nested_st = xseg_alloc(xs, (size_t)h->nested * MiB, NULL, &h->nested_ptr);
    return h->answer;
}

START_TEST(a_handler_that_frees_gets_a_retry)
{
    xseg_t *xs = t_host(CAP);
    void *a = NULL, *b = NULL;
    ck_assert_int_eq(xseg_alloc(xs, 48 * MiB, NULL, &a), XSEG_OK);
    hstate h = {.victim = a, .answer = 1};
    ck_assert_int_eq(xseg_set_oom_handler(xs, handler, &h), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 40 * MiB, NULL, &b), XSEG_OK);
    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq(h.calls, 1);
    ck_assert_uint_eq(h.requested, 40 * MiB);
    ck_assert_ptr_eq(h.seen, xs);
    ck_assert_uint_eq(t_stats(xs).active_blocks.current, 1);
    ck_assert_str_eq(t_check_failed(xs), "");
    ck_assert_int_eq(xseg_free(xs, b), XSEG_OK);
    ck_assert_int_eq(xseg_set_oom_handler(xs, NULL, NULL), XSEG_OK);
    xseg_destroy(xs);
}
END_TEST

START_TEST(a_handler_that_frees_nothing_leaves_the_oom)
{
    xseg_t *xs = t_host(CAP);
    void *a = NULL, *b = NULL;
    ck_assert_int_eq(xseg_alloc(xs, 48 * MiB, NULL, &a), XSEG_OK);
    hstate h = {.answer = 1}; /* asks for a retry, frees nothing */
    ck_assert_int_eq(xseg_set_oom_handler(xs, handler, &h), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 40 * MiB, NULL, &b), XSEG_ERR_OOM);
    ck_assert_ptr_null(b);
    ck_assert_int_eq(h.calls, 1); /* the retry does not call it again */
    ck_assert_ptr_nonnull(strstr(xseg_last_error(), "out of memory"));
    h.answer = 0; /* declines: the first message, saying so */
    ck_assert_int_eq(xseg_alloc(xs, 40 * MiB, NULL, &b), XSEG_ERR_OOM);
    ck_assert_int_eq(h.calls, 2);
    ck_assert_ptr_nonnull(strstr(xseg_last_error(), "out of memory"));
    ck_assert_ptr_nonnull(strstr(xseg_last_error(), "did not ask for a retry"));
    ck_assert_int_eq(xseg_free(xs, a), XSEG_OK);
    ck_assert_int_eq(xseg_set_oom_handler(xs, NULL, NULL), XSEG_OK);
    xseg_destroy(xs);
}
END_TEST

START_TEST(allocating_inside_the_handler_does_not_deadlock)
{
    xseg_t *xs = t_host(CAP);
    void *a = NULL, *b = NULL;
    ck_assert_int_eq(xseg_alloc(xs, 48 * MiB, NULL, &a), XSEG_OK);
    /* nested allocation that fits: served (the lock is free) */
    hstate h = {.answer = 0, .nested = 4};
    ck_assert_int_eq(xseg_set_oom_handler(xs, handler, &h), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 40 * MiB, NULL, &b), XSEG_ERR_OOM);
    ck_assert_int_eq(h.nested_st, XSEG_OK);
    ck_assert_ptr_nonnull(h.nested_ptr);
    ck_assert_int_eq(xseg_free(xs, h.nested_ptr), XSEG_OK);
    /* nested allocation that does not fit: fails at once, no recursion */
    hstate g = {.answer = 1, .nested = 40};
    ck_assert_int_eq(xseg_set_oom_handler(xs, handler, &g), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 40 * MiB, NULL, &b), XSEG_ERR_OOM);
    ck_assert_int_eq(g.calls, 1);
    ck_assert_int_eq(g.nested_st, XSEG_ERR_OOM);
    ck_assert_uint_eq(t_stats(xs).active_blocks.current, 1);
    ck_assert_int_eq(xseg_free(xs, a), XSEG_OK);
    ck_assert_int_eq(xseg_set_oom_handler(xs, NULL, NULL), XSEG_OK);
    xseg_destroy(xs);
}
END_TEST

START_TEST(removed_handler_is_not_called)
{
    xseg_t *xs = t_host(CAP);
    void *a = NULL, *b = NULL;
    ck_assert_int_eq(xseg_alloc(xs, 48 * MiB, NULL, &a), XSEG_OK);
    hstate h = {.answer = 1};
    ck_assert_int_eq(xseg_set_oom_handler(xs, handler, &h), XSEG_OK);
    ck_assert_int_eq(xseg_set_oom_handler(xs, NULL, NULL), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 40 * MiB, NULL, &b), XSEG_ERR_OOM);
    ck_assert_int_eq(h.calls, 0);
    ck_assert_int_eq(xseg_set_oom_handler(NULL, handler, &h), XSEG_ERR_INVALID_ARG);
    ck_assert_int_eq(xseg_free(xs, a), XSEG_OK);
    xseg_destroy(xs);
}
END_TEST

/* xseg_destroy removes the handler: an allocator made later (malloc often
 * gives it the destroyed one's address) does not inherit it. */
START_TEST(destroy_removes_the_handler)
{
    xseg_t *xs = t_host(CAP);
    hstate h = {.answer = 0};
    ck_assert_int_eq(xseg_set_oom_handler(xs, handler, &h), XSEG_OK);
    ck_assert_int_eq(xseg_destroy(xs), XSEG_OK);
    xseg_t *again = t_host(CAP);
    void *a = NULL, *b = NULL;
    ck_assert_int_eq(xseg_alloc(again, 48 * MiB, NULL, &a), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(again, 40 * MiB, NULL, &b), XSEG_ERR_OOM);
    ck_assert_msg(h.calls == 0, "the destroyed allocator's handler ran for %p (%s address)",
                  (void *)again, again == xs ? "the same" : "another");
    ck_assert_int_eq(xseg_free(again, a), XSEG_OK);
    xseg_destroy(again);
}
END_TEST

START_TEST(a_tags_allocation_uses_the_parents_handler)
{
    xseg_t *xs = t_host(CAP);
    int kv = 0;
    void *a = NULL, *b = NULL;
    ck_assert_int_eq(xseg_tag_id("oomh_kv", &kv), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 48 * MiB, NULL, &a), XSEG_OK); /* untagged, same cap */
    hstate h = {.victim = a, .answer = 1};
    ck_assert_int_eq(xseg_set_oom_handler(xs, handler, &h), XSEG_OK);
    ck_assert_int_eq(xseg_alloc_tagged(xs, 40 * MiB, NULL, kv, &b), XSEG_OK);
    ck_assert_int_eq(h.calls, 1);
    ck_assert_ptr_eq(h.seen, xs);
    ck_assert_int_eq(xseg_free(xs, b), XSEG_OK);
    ck_assert_int_eq(xseg_set_oom_handler(xs, NULL, NULL), XSEG_OK);
    xseg_destroy(xs);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("oom_handler");
    TCase *tc = tcase_create("oom_handler");
    tcase_add_test(tc, a_handler_that_frees_gets_a_retry);
    tcase_add_test(tc, a_handler_that_frees_nothing_leaves_the_oom);
    tcase_add_test(tc, allocating_inside_the_handler_does_not_deadlock);
    tcase_add_test(tc, removed_handler_is_not_called);
    tcase_add_test(tc, a_tags_allocation_uses_the_parents_handler);
    tcase_add_test(tc, destroy_removes_the_handler);
    suite_add_tcase(s, tc);
    return t_run(s);
}
