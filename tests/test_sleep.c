/* test_sleep.c: tags, sleep and wake (issue 14, docs/sleep.md) on the host
 * backend.  The tag registry (names, "default" = 0, bad names, a full
 * registry), the thread's tag stack; tagged memory in a virtual range of its
 * own, found through the parent's handle, counted in the parent's stats;
 * sleep in discard mode (memory given back to the driver, addresses kept,
 * other tags untouched, allocations of the sleeping tag refused, frees
 * working, wake mapping again) and in backup mode (contents restored, slabs
 * included, blocks freed while asleep skipped, the pinned buffer reused, 20
 * cycles without a leak); thread caches never handing out sleeping memory;
 * every driver call of sleep and wake failing in turn (the tag is always
 * wholly awake or wholly asleep, and a retry works); the cap on wake; fork
 * and destroy while asleep; threads allocating while another tag sleeps and
 * wakes.  The registry is process-wide: tests never assume which ids earlier
 * tests took (under CK_FORK=no they share one process). */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "driver_host.h"
#include "internal.h"
#include "support_common.h"
#include "support_fault.h"

#define S(n) ((void *)(uintptr_t)(n))

/* ---- helpers ---- */

static int tag(const char *name)
{
    int t = -1;
    ck_assert_msg(xseg_tag_id(name, &t) == XSEG_OK, "xseg_tag_id(%s): %s", name,
                  xseg_last_error());
    ck_assert_int_gt(t, 0);
    return t;
}

static xseg_tag_stats tstats(xseg_t *xs, int t)
{
    xseg_tag_stats s = {.size = sizeof s};
    ck_assert_msg(xseg_tag_stats_get(xs, t, &s) == XSEG_OK, "%s", xseg_last_error());
    return s;
}

static xseg_host_counts hcounts(xseg_t *xs)
{
    xseg_host_counts c;
    xseg_host_counts_of(t_host_ctx(xs), &c);
    return c;
}

static size_t rounded(xseg_t *xs, void *p)
{
    size_t r = 0;
    ck_assert_msg(xseg_block_size(xs, p, &r, NULL) == XSEG_OK, "%s", xseg_last_error());
    return r;
}

static int tag_of(xseg_t *xs, void *p)
{
    int t = -1;
    ck_assert_msg(xseg_tag_of(xs, p, &t) == XSEG_OK, "xseg_tag_of(%p): %s", p,
                  xseg_last_error());
    return t;
}

static void *alloc_t(xseg_t *xs, size_t n, void *stream, int t)
{
    void *p = NULL;
    ck_assert_msg(xseg_alloc_tagged(xs, n, stream, t, &p) == XSEG_OK,
                  "alloc of %zu bytes, tag %d: %s", n, t, xseg_last_error());
    return p;
}

static void *alloc_u(xseg_t *xs, size_t n, void *stream)
{
    void *p = NULL;
    ck_assert_msg(xseg_alloc(xs, n, stream, &p) == XSEG_OK, "alloc of %zu bytes: %s", n,
                  xseg_last_error());
    return p;
}

static void xsleep(xseg_t *xs, int t, xseg_sleep_mode mode)
{
    ck_assert_msg(xseg_sleep(xs, &t, 1, mode) == XSEG_OK, "sleep of tag %d: %s", t,
                  xseg_last_error());
}

static void xwake(xseg_t *xs, int t)
{
    ck_assert_msg(xseg_wake(xs, &t, 1) == XSEG_OK, "wake of tag %d: %s", t, xseg_last_error());
}

/* The whole family's invariants, whether or not checking is on. */
static void check_ok(xseg_t *xs, const char *after)
{
    ck_assert_msg(xseg_check(xs) == XSEG_OK, "xseg_check after %s: %s", after,
                  xseg_last_error());
}

/* The family's mapped bytes (parent's stats) are the driver's. */
static void books_match_driver(xseg_t *xs)
{
    xseg_host_counts c = hcounts(xs);
    xseg_stats s = t_stats(xs);
    ck_assert_uint_eq(s.mapped_bytes.current, c.mapped_bytes);
    ck_assert_uint_eq(s.handles.current, c.handles);
}

/* The pages [first, last] of a block. */
static void pages_of(void *p, size_t n, size_t page, uintptr_t *a, uintptr_t *b)
{
    *a = (uintptr_t)p / page;
    *b = ((uintptr_t)p + n - 1) / page;
}

/* ---- the registry and the thread's stack ---- */

START_TEST(default_is_zero_and_names_register)
{
    int fresh = !getenv("CK_FORK") || strcmp(getenv("CK_FORK"), "no") != 0;
    if (fresh) /* Check forks a process per test: an earlier test's names are gone */
        ck_assert_msg(xseg_tag_name(1) == NULL, "tag 1 is \"%s\" at the start of a test",
                      xseg_tag_name(1));
    int t = -1;
    ck_assert_int_eq(xseg_tag_id("default", &t), XSEG_OK);
    ck_assert_int_eq(t, 0);
    ck_assert_str_eq(xseg_tag_name(0), "default");
    int w = tag("weights"), k = tag("kv");
    ck_assert_int_ne(w, k);
    ck_assert_int_eq(tag("weights"), w); /* found, not registered again */
    ck_assert_int_eq(tag("kv"), k);
    ck_assert_str_eq(xseg_tag_name(w), "weights");
    ck_assert_str_eq(xseg_tag_name(k), "kv");
    if (fresh) {
        ck_assert_int_eq(w, 1);
        ck_assert_int_eq(k, 2);
    }
    ck_assert_ptr_null(xseg_tag_name(-1));
    ck_assert_ptr_null(xseg_tag_name(XSEG_MAX_TAGS));
    char longest[XSEG_TAG_NAME_MAX];
    memset(longest, 'z', sizeof longest - 1);
    longest[sizeof longest - 1] = 0;
    ck_assert_str_eq(xseg_tag_name(tag(longest)), longest);
    ck_assert_int_gt(tag("A-z_0.9:x"), 0);
}
END_TEST

START_TEST(bad_names_are_refused)
{
    int t = 77;
    char too_long[XSEG_TAG_NAME_MAX + 1];
    memset(too_long, 'a', sizeof too_long - 1);
    too_long[sizeof too_long - 1] = 0;
    const char *bad[] = {"", too_long, "a b", "x/y", "tab\t", "caf\xc3\xa9", "semi;colon",
                         "new\nline"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ck_assert_msg(xseg_tag_id(bad[i], &t) == XSEG_ERR_INVALID_ARG, "name #%zu accepted", i);
        ck_assert_ptr_nonnull(strstr(xseg_last_error(), "[A-Za-z0-9_.:-]"));
        ck_assert_int_eq(t, 77); /* untouched */
    }
    ck_assert_int_eq(xseg_tag_id(NULL, &t), XSEG_ERR_INVALID_ARG);
    ck_assert_int_eq(xseg_tag_id("fine", NULL), XSEG_ERR_INVALID_ARG);
    for (int i = 0; i < XSEG_MAX_TAGS; i++) /* nothing bad was registered */
        if (xseg_tag_name(i))
            ck_assert_int_eq(strpbrk(xseg_tag_name(i), " /\t;\n") != NULL, 0);
}
END_TEST

/* In a child of its own (the registry is process-wide and cannot shrink):
 * every id is handed out once, then a clear refusal; names stay found. */
static int fill_registry(void)
{
    int bad = 0, first = -1, t, n;
    char name[32];
    for (n = 0; n < 2 * XSEG_MAX_TAGS; n++) {
        snprintf(name, sizeof name, "fill%d", n);
        if (xseg_tag_id(name, &t) != XSEG_OK)
            break;
        if (first < 0)
            first = t;
        bad += t != first + n; /* consecutive ids */
    }
    bad += t != XSEG_MAX_TAGS - 1 || first < 1;     /* the last id given is the last one */
    bad += xseg_tag_id(name, &t) != XSEG_ERR_INVALID_ARG;
    bad += strstr(xseg_last_error(), "no room") == NULL;
    bad += xseg_tag_id("fill0", &t) != XSEG_OK || t != first; /* full: still found */
    bad += xseg_tag_id("default", &t) != XSEG_OK || t != 0;
    bad += xseg_tag_name(XSEG_MAX_TAGS - 1) == NULL;
    bad += xseg_tag_push(XSEG_MAX_TAGS - 1) != XSEG_OK || xseg_tag_pop() != XSEG_OK;
    return bad;
}

START_TEST(a_full_registry_says_so)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0)
        _exit(fill_registry());
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child: %d checks failed (status %d)",
                  WEXITSTATUS(st), st);
}
END_TEST

static void *other_thread_tag(void *arg)
{
    (void)arg;
    return (void *)(intptr_t)xseg_tag_current();
}

START_TEST(the_stack_pushes_and_pops)
{
    int a = tag("stack_a"), b = tag("stack_b");
    ck_assert_int_eq(xseg_tag_current(), 0);
    ck_assert_int_eq(xseg_tag_pop(), XSEG_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(xseg_last_error(), "empty"));
    ck_assert_int_eq(xseg_tag_push(a), XSEG_OK);
    ck_assert_int_eq(xseg_tag_current(), a);
    ck_assert_int_eq(xseg_tag_push(b), XSEG_OK);
    ck_assert_int_eq(xseg_tag_current(), b);
    ck_assert_int_eq(xseg_tag_push(0), XSEG_OK); /* "default" may be pushed too */
    ck_assert_int_eq(xseg_tag_current(), 0);
    /* Unregistered tags are refused and change nothing. */
    int unreg[] = {-1, XSEG_MAX_TAGS, 1 << 20, XSEG_MAX_TAGS - 1};
    for (size_t i = 0; i < 4; i++) {
        if (xseg_tag_name(unreg[i]))
            continue; /* registered by an earlier test of this process */
        ck_assert_int_eq(xseg_tag_push(unreg[i]), XSEG_ERR_INVALID_ARG);
        ck_assert_int_eq(xseg_tag_current(), 0);
    }
    /* Another thread has a stack of its own. */
    pthread_t th;
    void *seen = S(99);
    ck_assert_int_eq(pthread_create(&th, NULL, other_thread_tag, NULL), 0);
    ck_assert_int_eq(pthread_join(th, &seen), 0);
    ck_assert_ptr_eq(seen, S(0));
    ck_assert_int_eq(xseg_tag_pop(), XSEG_OK);
    ck_assert_int_eq(xseg_tag_current(), b);
    ck_assert_int_eq(xseg_tag_pop(), XSEG_OK);
    ck_assert_int_eq(xseg_tag_current(), a);
    ck_assert_int_eq(xseg_tag_pop(), XSEG_OK);
    ck_assert_int_eq(xseg_tag_current(), 0);
    ck_assert_int_eq(xseg_tag_pop(), XSEG_ERR_STATE);
    /* 64 deep, not 65. */
    int depth = 0;
    while (xseg_tag_push(depth % 2 ? a : b) == XSEG_OK)
        depth++;
    ck_assert_int_eq(depth, 64);
    ck_assert_ptr_nonnull(strstr(xseg_last_error(), "full"));
    ck_assert_int_eq(xseg_tag_current(), a); /* the 64th push (depth 63) was a */
    while (depth--)
        ck_assert_int_eq(xseg_tag_pop(), XSEG_OK);
    ck_assert_int_eq(xseg_tag_current(), 0);
}
END_TEST

/* ---- tagged allocation ---- */

START_TEST(tagged_memory_has_a_range_of_its_own)
{
    xseg_t *xs = t_host(NULL);
    int w = tag("weights");
    size_t page = t_stats(xs).page_size;
    void *u = alloc_u(xs, 4 * MiB, NULL), *us = alloc_u(xs, 3000, NULL);
    ck_assert_int_eq(xseg_tag_push(w), XSEG_OK);
    void *p = alloc_u(xs, 8 * MiB, NULL), *ps = alloc_u(xs, 3000, NULL);
    ck_assert_int_eq(xseg_tag_pop(), XSEG_OK);
    void *q = alloc_t(xs, 5 * MiB + 7, S(3), w);
    void *u2 = alloc_u(xs, 1 * MiB, NULL); /* the stack is empty again: untagged */
    T_CHECK(xs);
    void *tagged[] = {p, ps, q}, *plain[] = {u, us, u2};
    size_t tn[] = {8 * MiB, 3000, 5 * MiB + 7}, un[] = {4 * MiB, 3000, 1 * MiB};
    for (int i = 0; i < 3; i++) {
        t_fill(tagged[i], tn[i], (uint32_t)i);
        t_fill(plain[i], un[i], (uint32_t)(10 + i));
        ck_assert_int_eq(tag_of(xs, tagged[i]), w);
        ck_assert_int_eq(tag_of(xs, plain[i]), 0);
    }
    /* Its own allocator and range, disjoint from the parent's. */
    xseg_t *c = atomic_load(&xs->tags[w]);
    ck_assert_ptr_nonnull(c);
    ck_assert(c->arena.base + c->arena.size <= xs->arena.base ||
              xs->arena.base + xs->arena.size <= c->arena.base);
    for (int i = 0; i < 3; i++) {
        ck_assert(xseg_in_range(c, (uintptr_t)tagged[i]));
        ck_assert(xseg_in_range(xs, (uintptr_t)plain[i]));
        for (int j = 0; j < 3; j++) { /* no page holds both */
            uintptr_t a0, a1, b0, b1;
            pages_of(tagged[i], tn[i], page, &a0, &a1);
            pages_of(plain[j], un[j], page, &b0, &b1);
            ck_assert_msg(a1 < b0 || b1 < a0, "tagged block %d and untagged %d share a page", i,
                          j);
        }
    }
    /* Size, record_stream and stats through the parent's handle. */
    size_t r = 0, req = 0;
    ck_assert_int_eq(xseg_block_size(xs, q, &r, &req), XSEG_OK);
    ck_assert_uint_eq(req, 5 * MiB + 7);
    ck_assert_uint_ge(r, req);
    ck_assert_int_eq(xseg_record_stream(xs, p, S(9)), XSEG_OK);
    size_t live_t = 0, live_all = 0;
    for (int i = 0; i < 3; i++) {
        live_t += rounded(xs, tagged[i]);
        live_all += rounded(xs, tagged[i]) + rounded(xs, plain[i]);
    }
    xseg_tag_stats ts = tstats(xs, w);
    ck_assert_int_eq(ts.tag, w);
    ck_assert_str_eq(ts.name, "weights");
    ck_assert_int_eq(ts.asleep, 0);
    ck_assert_uint_eq(ts.live_bytes.current, live_t);
    ck_assert_uint_ge(ts.mapped_bytes.current, 13 * MiB);
    xseg_stats s = t_stats(xs);
    ck_assert_uint_eq(s.allocated_bytes.current, live_all);
    ck_assert_uint_gt(s.mapped_bytes.current, ts.mapped_bytes.current); /* the parent's too */
    ck_assert_uint_ge(s.mapped_bytes.current, ts.mapped_bytes.current + 5 * MiB);
    books_match_driver(xs);
    /* Bad pointers and tags. */
    int t = 5;
    ck_assert_int_eq(xseg_tag_of(xs, (char *)q + 8, &t), XSEG_ERR_INTERIOR_POINTER);
    ck_assert_int_eq(xseg_tag_of(xs, S(4096), &t), XSEG_ERR_INVALID_POINTER);
    ck_assert_int_eq(xseg_tag_of(xs, p, NULL), XSEG_ERR_INVALID_ARG);
    void *z = S(1);
    ck_assert_int_eq(xseg_alloc_tagged(xs, 4096, NULL, -1, &z), XSEG_ERR_INVALID_ARG);
    ck_assert_ptr_null(z);
    ck_assert_int_eq(xseg_alloc_tagged(xs, 4096, NULL, XSEG_MAX_TAGS, &z), XSEG_ERR_INVALID_ARG);
    ck_assert_int_eq(xseg_alloc_tagged(NULL, 4096, NULL, w, &z), XSEG_ERR_INVALID_ARG);
    xseg_tag_stats bad = {.size = sizeof bad};
    ck_assert_int_eq(xseg_tag_stats_get(xs, -3, &bad), XSEG_ERR_INVALID_ARG);
    bad.size = 0;
    ck_assert_int_eq(xseg_tag_stats_get(xs, w, &bad), XSEG_ERR_INVALID_ARG);
    /* A registered tag this allocator never used reads zero. */
    int unused = tag("never_used_here");
    xseg_tag_stats un_s = tstats(xs, unused);
    ck_assert_str_eq(un_s.name, "never_used_here");
    ck_assert_uint_eq(un_s.live_bytes.current + un_s.mapped_bytes.current + un_s.sleeps, 0);
    T_CHECK(xs);
    /* Frees through the parent; contents were never disturbed. */
    for (int i = 0; i < 3; i++) {
        ck_assert(t_check(tagged[i], tn[i], (uint32_t)i));
        ck_assert(t_check(plain[i], un[i], (uint32_t)(10 + i)));
        ck_assert_int_eq(xseg_free(xs, tagged[i]), XSEG_OK);
        T_CHECK(xs);
        ck_assert_int_eq(xseg_free(xs, plain[i]), XSEG_OK);
        T_CHECK(xs);
    }
    ck_assert_int_eq(xseg_tag_of(xs, p, &t), XSEG_ERR_DOUBLE_FREE);
    ck_assert_int_eq(xseg_free(xs, p), XSEG_ERR_DOUBLE_FREE);
    ck_assert_uint_eq(tstats(xs, w).live_bytes.current, 0);
    ck_assert_uint_eq(t_stats(xs).allocated_bytes.current, 0);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK); /* the tags' caches too */
    ck_assert_uint_eq(hcounts(xs).mapped_bytes, 0);
    ck_assert_uint_eq(tstats(xs, w).mapped_bytes.current, 0);
    check_ok(xs, "trim");
    ck_assert_int_eq(xseg_destroy(xs), XSEG_OK);
}
END_TEST

/* ---- sleep: discard ---- */

START_TEST(discard_gives_memory_back_and_keeps_addresses)
{
    xseg_t *xs = t_host(NULL);
    int k = tag("kv"), w = tag("weights"), never = tag("never_slept");
    void *kb = alloc_t(xs, 8 * MiB, S(1), k), *ks = alloc_t(xs, 3000, NULL, k);
    void *kc = alloc_t(xs, 2 * MiB, NULL, k);
    ck_assert_int_eq(xseg_free(xs, alloc_t(xs, 4 * MiB, NULL, k)), XSEG_OK); /* cached */
    void *wb = alloc_t(xs, 6 * MiB, NULL, w), *ub = alloc_u(xs, 4 * MiB, NULL);
    t_fill(kb, 8 * MiB, 1);
    t_fill(ks, 3000, 2);
    t_fill(kc, 2 * MiB, 3);
    t_fill(wb, 6 * MiB, 4);
    t_fill(ub, 4 * MiB, 5);
    xseg_host_counts h0 = hcounts(xs);
    xseg_tag_stats k0 = tstats(xs, k);
    size_t w_mapped = tstats(xs, w).mapped_bytes.current;
    ck_assert_uint_ge(k0.mapped_bytes.current, 14 * MiB);
    xsleep(xs, k, XSEG_SLEEP_DISCARD);
    T_CHECK(xs);
    /* Given back to the driver: the tag's handles and mappings are gone. */
    xseg_tag_stats k1 = tstats(xs, k);
    ck_assert_int_eq(k1.asleep, 1);
    ck_assert_int_eq(k1.mode, XSEG_SLEEP_DISCARD);
    ck_assert_uint_eq(k1.mapped_bytes.current, 0);
    ck_assert_uint_eq(k1.live_bytes.current, k0.live_bytes.current);
    ck_assert_uint_ge(k1.sleeping_bytes, k0.live_bytes.current); /* slabs whole */
    ck_assert_uint_lt(k1.sleeping_bytes, k0.live_bytes.current + 4 * MiB);
    ck_assert_uint_eq(k1.backup_bytes, 0);
    ck_assert_uint_eq(k1.sleeps, 1);
    xseg_host_counts h1 = hcounts(xs);
    ck_assert_uint_eq(h1.mapped_bytes, h0.mapped_bytes - k0.mapped_bytes.current);
    ck_assert_uint_eq(h1.handle_bytes, h0.handle_bytes - k0.mapped_bytes.current);
    ck_assert_uint_lt(h1.handles, h0.handles);
    ck_assert_uint_eq(tstats(xs, w).mapped_bytes.current, w_mapped);
    books_match_driver(xs);
    /* Its memory faults; the others' keep memory and contents. */
    ck_assert(t_faults(kb));
    ck_assert(t_faults((char *)kb + 8 * MiB - 1));
    ck_assert(t_faults(ks));
    ck_assert(t_faults(kc));
    ck_assert(!t_faults(wb) && t_check(wb, 6 * MiB, 4));
    ck_assert(!t_faults(ub) && t_check(ub, 4 * MiB, 5));
    /* The pointers are still its blocks. */
    ck_assert_int_eq(tag_of(xs, kb), k);
    ck_assert_uint_ge(rounded(xs, kb), 8 * MiB);
    /* Its allocations are refused, by tag and by the stack; others work. */
    void *z = S(1);
    ck_assert_int_eq(xseg_alloc_tagged(xs, 1 * MiB, NULL, k, &z), XSEG_ERR_ASLEEP);
    ck_assert_ptr_null(z);
    ck_assert_ptr_nonnull(strstr(xseg_last_error(), "asleep"));
    ck_assert_ptr_nonnull(strstr(xseg_last_error(), "\"kv\""));
    ck_assert_int_eq(xseg_tag_push(k), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 100, NULL, &z), XSEG_ERR_ASLEEP);
    ck_assert_int_eq(xseg_tag_pop(), XSEG_OK);
    void *w2 = alloc_t(xs, 2 * MiB, NULL, w), *u2 = alloc_u(xs, 2 * MiB, NULL);
    t_fill(w2, 2 * MiB, 6);
    t_fill(u2, 2 * MiB, 7);
    ck_assert(t_check(w2, 2 * MiB, 6) && t_check(u2, 2 * MiB, 7));
    /* Frees of sleeping memory work; record_stream too. */
    ck_assert_int_eq(xseg_free(xs, kc), XSEG_OK);
    ck_assert_int_eq(xseg_record_stream(xs, kb, S(2)), XSEG_OK);
    T_CHECK(xs);
    ck_assert_uint_eq(tstats(xs, k).mapped_bytes.current, 0);
    /* Wrong states. */
    int kk[2] = {k, k};
    ck_assert_int_eq(xseg_sleep(xs, &k, 1, XSEG_SLEEP_DISCARD), XSEG_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(xseg_last_error(), "asleep"));
    ck_assert_int_eq(xseg_sleep(xs, &k, 1, XSEG_SLEEP_BACKUP), XSEG_ERR_STATE);
    ck_assert_int_eq(xseg_wake(xs, &never, 1), XSEG_ERR_STATE);
    ck_assert_int_eq(xseg_wake(xs, kk, 2), XSEG_ERR_INVALID_ARG);
    ck_assert_uint_eq(tstats(xs, k).sleeps, 1);
    /* Wake: mapped under the live blocks again, at the same addresses. */
    xwake(xs, k);
    T_CHECK(xs);
    xseg_tag_stats k2 = tstats(xs, k);
    ck_assert_int_eq(k2.asleep, 0);
    ck_assert_uint_eq(k2.wakes, 1);
    ck_assert_uint_eq(k2.sleeping_bytes, 0);
    ck_assert_uint_ge(k2.mapped_bytes.current, 8 * MiB);
    ck_assert_uint_le(k2.mapped_bytes.current, k0.mapped_bytes.current);
    ck_assert(!t_faults(kb) && !t_faults(ks));
    t_fill(kb, 8 * MiB, 11);
    t_fill(ks, 3000, 12);
    ck_assert(t_check(kb, 8 * MiB, 11) && t_check(ks, 3000, 12));
    ck_assert(t_check(wb, 6 * MiB, 4) && t_check(ub, 4 * MiB, 5));
    books_match_driver(xs);
    ck_assert_int_eq(xseg_wake(xs, &k, 1), XSEG_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(xseg_last_error(), "awake"));
    /* It allocates again. */
    void *k3 = alloc_t(xs, 1 * MiB, NULL, k);
    t_fill(k3, 1 * MiB, 13);
    ck_assert(t_check(k3, 1 * MiB, 13));
    void *all[] = {kb, ks, k3, wb, ub, w2, u2};
    for (int i = 0; i < 7; i++)
        ck_assert_int_eq(xseg_free(xs, all[i]), XSEG_OK);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK);
    ck_assert_uint_eq(hcounts(xs).mapped_bytes, 0);
    ck_assert_uint_eq(hcounts(xs).handles, 0);
    check_ok(xs, "the end");
    ck_assert_int_eq(xseg_destroy(xs), XSEG_OK);
}
END_TEST

START_TEST(bad_arguments_and_several_tags)
{
    xseg_t *xs = t_host(NULL);
    int a = tag("sa"), b = tag("sb");
    void *pa = alloc_t(xs, 3 * MiB, NULL, a), *pb = alloc_t(xs, 5 * MiB, NULL, b);
    t_fill(pa, 3 * MiB, 1);
    t_fill(pb, 5 * MiB, 2);
    int ab[2] = {a, b}, aa[2] = {a, a}, bogus[2] = {a, -4};
    ck_assert_int_eq(xseg_sleep(NULL, ab, 2, XSEG_SLEEP_BACKUP), XSEG_ERR_INVALID_ARG);
    ck_assert_int_eq(xseg_sleep(xs, NULL, 1, XSEG_SLEEP_BACKUP), XSEG_ERR_INVALID_ARG);
    ck_assert_int_eq(xseg_sleep(xs, ab, 0, XSEG_SLEEP_BACKUP), XSEG_ERR_INVALID_ARG);
    ck_assert_int_eq(xseg_sleep(xs, ab, XSEG_MAX_TAGS + 1, XSEG_SLEEP_BACKUP),
                     XSEG_ERR_INVALID_ARG);
    ck_assert_int_eq(xseg_sleep(xs, ab, 2, (xseg_sleep_mode)7), XSEG_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(xseg_last_error(), "mode 7"));
    ck_assert_int_eq(xseg_sleep(xs, aa, 2, XSEG_SLEEP_BACKUP), XSEG_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(xseg_last_error(), "twice"));
    ck_assert_int_eq(xseg_sleep(xs, bogus, 2, XSEG_SLEEP_BACKUP), XSEG_ERR_INVALID_ARG);
    ck_assert_int_eq(xseg_wake(NULL, ab, 2), XSEG_ERR_INVALID_ARG);
    ck_assert_int_eq(xseg_wake(xs, NULL, 2), XSEG_ERR_INVALID_ARG);
    ck_assert_int_eq(tstats(xs, a).asleep + tstats(xs, b).asleep, 0); /* nothing slept */
    /* Two at once. */
    ck_assert_int_eq(xseg_sleep(xs, ab, 2, XSEG_SLEEP_BACKUP), XSEG_OK);
    ck_assert(tstats(xs, a).asleep && tstats(xs, b).asleep);
    ck_assert(t_faults(pa) && t_faults(pb));
    T_CHECK(xs);
    ck_assert_int_eq(xseg_wake(xs, ab, 2), XSEG_OK);
    ck_assert(t_check(pa, 3 * MiB, 1) && t_check(pb, 5 * MiB, 2));
    /* All or nothing on a wrong state: b asleep, so {a, b} changes nothing. */
    xsleep(xs, b, XSEG_SLEEP_BACKUP);
    ck_assert_int_eq(xseg_sleep(xs, ab, 2, XSEG_SLEEP_BACKUP), XSEG_ERR_STATE);
    ck_assert_int_eq(tstats(xs, a).asleep, 0);
    ck_assert(!t_faults(pa));
    ck_assert_int_eq(xseg_wake(xs, ab, 2), XSEG_ERR_STATE); /* a is awake */
    ck_assert_int_eq(tstats(xs, b).asleep, 1);
    xwake(xs, b);
    ck_assert(t_check(pb, 5 * MiB, 2));
    /* "default" (tag 0) sleeps too: the parent's own memory. */
    void *u = alloc_u(xs, 2 * MiB, NULL);
    t_fill(u, 2 * MiB, 3);
    int zero = 0;
    ck_assert_int_eq(xseg_sleep(xs, &zero, 1, XSEG_SLEEP_BACKUP), XSEG_OK);
    ck_assert(t_faults(u) && !t_faults(pa));
    void *z;
    ck_assert_int_eq(xseg_alloc(xs, 4096, NULL, &z), XSEG_ERR_ASLEEP);
    T_CHECK(xs);
    ck_assert_int_eq(xseg_wake(xs, &zero, 1), XSEG_OK);
    ck_assert(t_check(u, 2 * MiB, 3));
    check_ok(xs, "wake of tag 0");
    ck_assert_int_eq(xseg_free(xs, u), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, pa), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, pb), XSEG_OK);
    ck_assert_int_eq(xseg_destroy(xs), XSEG_OK);
}
END_TEST

/* ---- sleep: backup ---- */

#define NB 20

typedef struct blocks {
    void *p[NB];
    size_t n[NB];
    int live[NB];
    int count;
} blocks;

/* NB blocks of sizes across slabs (< 64 KiB), small and large ones, on
 * two streams. */
static void make_blocks(xseg_t *xs, int t, blocks *B, uint32_t seed)
{
    static const size_t sizes[] = {100, 1000, 3000, 8000, 40 << 10, 63 << 10, (64 << 10) + 1,
                                   1 << 20, (3 << 20) + 5, 6 << 20};
    memset(B, 0, sizeof *B);
    for (int i = 0; i < NB; i++) {
        size_t n = sizes[i % 10] + (i >= 10 && i % 10 < 4 ? 8 : 0); /* second row: other classes */
        B->p[i] = alloc_t(xs, n, i % 3 ? NULL : S(1), t);
        B->n[i] = n;
        B->live[i] = 1;
        t_fill(B->p[i], n, seed + (uint32_t)i);
    }
    B->count = NB;
}

/* Eight blocks, 100 B to 2 MiB (three slabs), for tests that copy them
 * many times. */
static void make_light_blocks(xseg_t *xs, int t, blocks *B, uint32_t seed)
{
    static const size_t sizes[] = {100, 3000, 1 << 20, 40 << 10, 120, (1 << 20) + 5, 2500,
                                   (2 << 20) + 3};
    memset(B, 0, sizeof *B);
    for (int i = 0; i < 8; i++) {
        B->p[i] = alloc_t(xs, sizes[i], i % 3 ? NULL : S(1), t);
        B->n[i] = sizes[i];
        B->live[i] = 1;
        t_fill(B->p[i], sizes[i], seed + (uint32_t)i);
    }
    B->count = 8;
}

static void free_block(xseg_t *xs, blocks *B, int i)
{
    ck_assert_int_eq(xseg_free(xs, B->p[i]), XSEG_OK);
    B->live[i] = 0;
}

static int blocks_intact(const blocks *B, uint32_t seed)
{
    for (int i = 0; i < B->count; i++)
        if (B->live[i] && !t_check(B->p[i], B->n[i], seed + (uint32_t)i))
            return i + 1;
    return 0;
}

static int blocks_all_fault(const blocks *B)
{
    for (int i = 0; i < B->count; i++)
        if (B->live[i] && !t_faults(B->p[i]))
            return 0;
    return 1;
}

START_TEST(backup_restores_contents)
{
    xseg_t *xs = t_host("thread_cache:off"); /* frees while asleep reach the allocator */
    int w = tag("weights"), o = tag("other");
    blocks B;
    make_blocks(xs, w, &B, 100);
    void *op = alloc_t(xs, 3 * MiB, NULL, o);
    t_fill(op, 3 * MiB, 9);
    free_block(xs, &B, 5); /* before: cached */
    free_block(xs, &B, 12);
    void *gone = alloc_t(xs, 8 * MiB, NULL, w); /* freed while asleep */
    size_t live = tstats(xs, w).live_bytes.current;
    xsleep(xs, w, XSEG_SLEEP_BACKUP);
    T_CHECK(xs);
    xseg_tag_stats s1 = tstats(xs, w);
    ck_assert_int_eq(s1.mode, XSEG_SLEEP_BACKUP);
    ck_assert_uint_eq(s1.mapped_bytes.current, 0);
    ck_assert_uint_ge(s1.backup_bytes, live); /* slabs whole */
    ck_assert_uint_eq(s1.sleeping_bytes, s1.backup_bytes);
    ck_assert(blocks_all_fault(&B));
    ck_assert(t_faults(gone));
    ck_assert(t_check(op, 3 * MiB, 9));
    books_match_driver(xs);
    ck_assert_int_eq(xseg_free(xs, gone), XSEG_OK);
    free_block(xs, &B, 3);  /* a slab slot */
    free_block(xs, &B, 19); /* 6 MiB */
    T_CHECK(xs);
    xwake(xs, w);
    T_CHECK(xs);
    int bad = blocks_intact(&B, 100);
    ck_assert_msg(bad == 0, "block %d (%zu bytes) not restored", bad - 1,
                  bad ? B.n[bad - 1] : 0);
    /* The freed 8 MiB block was skipped: nothing mapped in its middle. */
    ck_assert(t_faults((char *)gone + 4 * MiB));
    ck_assert(t_faults((char *)B.p[19] + 3 * MiB));
    ck_assert_uint_eq(tstats(xs, w).backup_bytes, 0); /* awake: none held */
    /* A second cycle reuses the pinned buffer. */
    uint64_t ha = t_stats(xs).driver_calls[XSEG_OP_HOST_ALLOC];
    ck_assert_uint_eq(ha, 1);
    for (int i = 0; i < B.count; i++)
        if (B.live[i])
            t_fill(B.p[i], B.n[i], 200 + (uint32_t)i);
    xsleep(xs, w, XSEG_SLEEP_BACKUP);
    xwake(xs, w);
    ck_assert_int_eq(blocks_intact(&B, 200), 0);
    ck_assert_uint_eq(t_stats(xs).driver_calls[XSEG_OP_HOST_ALLOC], ha);
    ck_assert_uint_eq(t_stats(xs).driver_calls[XSEG_OP_HOST_FREE], 0);
    /* 20 cycles: the same mapped figure and driver counts after each. */
    xseg_host_counts h = hcounts(xs);
    size_t mapped = tstats(xs, w).mapped_bytes.current;
    for (int c = 0; c < 20; c++) {
        xsleep(xs, w, XSEG_SLEEP_BACKUP);
        ck_assert_uint_eq(hcounts(xs).handle_bytes, h.handle_bytes - mapped);
        xwake(xs, w);
        ck_assert_uint_eq(tstats(xs, w).mapped_bytes.current, mapped);
        xseg_host_counts hc = hcounts(xs);
        ck_assert_uint_eq(hc.handles, h.handles);
        ck_assert_uint_eq(hc.handle_bytes, h.handle_bytes);
        ck_assert_uint_eq(hc.mapped_bytes, h.mapped_bytes);
        ck_assert_uint_eq(hc.mappings, h.mappings);
        ck_assert_int_eq(blocks_intact(&B, 200), 0);
        T_CHECK(xs);
    }
    xseg_tag_stats s2 = tstats(xs, w);
    ck_assert_uint_eq(s2.sleeps, 22);
    ck_assert_uint_eq(s2.wakes, 22);
    ck_assert_uint_eq(t_stats(xs).driver_calls[XSEG_OP_HOST_ALLOC], ha);
    ck_assert(t_check(op, 3 * MiB, 9));
    /* After a backup sleep, a discard sleep restores nothing, and a backup
     * one later restores again. */
    xsleep(xs, w, XSEG_SLEEP_DISCARD);
    xwake(xs, w);
    for (int i = 0; i < B.count; i++)
        if (B.live[i])
            t_fill(B.p[i], B.n[i], 300 + (uint32_t)i);
    xsleep(xs, w, XSEG_SLEEP_BACKUP);
    xwake(xs, w);
    ck_assert_int_eq(blocks_intact(&B, 300), 0);
    for (int i = 0; i < B.count; i++)
        if (B.live[i])
            free_block(xs, &B, i);
    ck_assert_int_eq(xseg_free(xs, op), XSEG_OK);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK);
    ck_assert_uint_eq(hcounts(xs).handles, 0);
    check_ok(xs, "the end");
    ck_assert_int_eq(xseg_destroy(xs), XSEG_OK);
}
END_TEST

/* A CUDA-graph pool sleeps whole (plugin.c sets sleep_whole): its graphs
 * replay into blocks freed during the capture, so its cached pages come
 * back too, with their contents in backup mode. */
START_TEST(a_pool_sleeps_whole_with_its_cache)
{
    xseg_t *xs = t_host("thread_cache:off,release_threshold:unlimited");
    xs->sleep_whole = 1;
    void *a = alloc_u(xs, 5 * MiB, NULL), *b = alloc_u(xs, 3 * MiB, NULL);
    t_fill(a, 5 * MiB, 41);
    t_fill(b, 3 * MiB, 42);
    ck_assert_int_eq(xseg_free(xs, b), XSEG_OK); /* cached, still mapped */
    size_t mapped = t_stats(xs).mapped_bytes.current;
    ck_assert_int_eq(xsleep_sleep(xs, XSEG_SLEEP_BACKUP), XSEG_OK);
    ck_assert_uint_eq(t_stats(xs).mapped_bytes.current, 0);
    ck_assert(t_faults(a) && t_faults(b));
    ck_assert_int_eq(xsleep_wake(xs), XSEG_OK);
    ck_assert_uint_eq(t_stats(xs).mapped_bytes.current, mapped);
    ck_assert(t_check(a, 5 * MiB, 41));
    ck_assert(t_check(b, 3 * MiB, 42)); /* the freed block's contents too */
    /* discard: the same pages come back, contents lost */
    ck_assert_int_eq(xsleep_sleep(xs, XSEG_SLEEP_DISCARD), XSEG_OK);
    ck_assert_int_eq(xsleep_wake(xs), XSEG_OK);
    ck_assert_uint_eq(t_stats(xs).mapped_bytes.current, mapped);
    ck_assert(!t_faults(b) && !t_faults((char *)b + 3 * MiB - 1));
    T_CHECK(xs);
    /* An allocator that does not sleep whole drops the cached block. */
    xs->sleep_whole = 0;
    t_fill(a, 5 * MiB, 43); /* (the discard lost it) */
    ck_assert_int_eq(xsleep_sleep(xs, XSEG_SLEEP_BACKUP), XSEG_OK);
    ck_assert_int_eq(xsleep_wake(xs), XSEG_OK);
    ck_assert(t_check(a, 5 * MiB, 43));
    ck_assert(t_faults((char *)b + 2 * MiB));
    ck_assert_int_eq(xseg_free(xs, a), XSEG_OK);
    check_ok(xs, "the end");
    ck_assert_int_eq(xseg_destroy(xs), XSEG_OK);
}
END_TEST

/* Wake maps large handles even under handle_size:page (one create per
 * run, not per page).  A handle is released whole, so a block freed after
 * the wake gives back only the handles that lie inside it (which depends
 * on where the runs start: docs/sleep.md); once every block over the
 * runs is freed, trim gives all of it back and nothing is lost. */
START_TEST(wake_maps_large_handles_released_whole)
{
    xseg_t *xs = t_host("handle_size:page,thread_cache:off,release_threshold:0");
    int w = tag("paged");
    blocks B;
    make_blocks(xs, w, &B, 500);
    size_t pages = tstats(xs, w).mapped_bytes.current / xs->arena.page;
    xsleep(xs, w, XSEG_SLEEP_BACKUP);
    uint64_t c0 = t_stats(xs).driver_calls[XSEG_OP_CREATE];
    xwake(xs, w);
    uint64_t creates = t_stats(xs).driver_calls[XSEG_OP_CREATE] - c0;
    ck_assert_msg(creates * 4 <= pages, "wake made %llu handles for %zu pages",
                  (unsigned long long)creates, pages);
    ck_assert_int_eq(blocks_intact(&B, 500), 0);
    size_t before = tstats(xs, w).mapped_bytes.current;
    free_block(xs, &B, 19); /* 6 MiB, inside a large handle */
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK);
    ck_assert_uint_le(tstats(xs, w).mapped_bytes.current, before);
    ck_assert_int_eq(blocks_intact(&B, 500), 0);
    books_match_driver(xs);
    check_ok(xs, "after one free");
    for (int i = 0; i < B.count; i++)
        if (B.live[i])
            free_block(xs, &B, i);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK);
    ck_assert_uint_eq(tstats(xs, w).mapped_bytes.current, 0);
    ck_assert(t_faults((char *)B.p[19] + 3 * MiB));
    books_match_driver(xs);
    check_ok(xs, "after every free");
    ck_assert_int_eq(xseg_destroy(xs), XSEG_OK);
}
END_TEST

/* ---- thread caches ---- */

START_TEST(thread_cache_hits_never_hand_out_sleeping_memory)
{
    xseg_t *xs = t_host("thread_cache:on");
    ck_assert(xs->tc_on);
    int t = tag("cached");
    for (int i = 0; i < 50; i++) { /* warm the thread cache */
        void *a = alloc_t(xs, 1 * MiB, NULL, t), *b = alloc_t(xs, 4096, NULL, t);
        ck_assert_int_eq(xseg_free(xs, a), XSEG_OK);
        ck_assert_int_eq(xseg_free(xs, b), XSEG_OK);
    }
    xseg_t *c = atomic_load(&xs->tags[t]);
    ck_assert(c->tc_on);
    void *p = alloc_t(xs, 1 * MiB, NULL, t), *q = alloc_t(xs, 4096, NULL, t);
    void *held = alloc_t(xs, 2 * MiB, NULL, t), *big = alloc_t(xs, 6 * MiB, NULL, t);
    ck_assert_int_eq(xseg_free(xs, held), XSEG_OK); /* held by this thread's cache */
    xsleep(xs, t, XSEG_SLEEP_DISCARD);
    T_CHECK(xs);
    void *z = S(1);
    ck_assert_int_eq(xseg_alloc_tagged(xs, 2 * MiB, NULL, t, &z), XSEG_ERR_ASLEEP);
    ck_assert_ptr_null(z);
    /* Frees while asleep must not feed a cache hit of sleeping memory. */
    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, q), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, big), XSEG_OK);
    /* (Failures are collected and the allocator destroyed first: under
     * CK_FORK=no a failed test must not keep its address space.) */
    char why[256] = "";
    void *z1 = NULL, *z2 = NULL, *z3 = NULL;
    xseg_status s1 = xseg_alloc_tagged(xs, 1 * MiB, NULL, t, &z1);
    xseg_status s2 = xseg_alloc_tagged(xs, 4096, NULL, t, &z2);
    ck_assert_int_eq(xseg_tag_push(t), XSEG_OK);
    xseg_status s3 = xseg_alloc(xs, 1 * MiB, NULL, &z3);
    ck_assert_int_eq(xseg_tag_pop(), XSEG_OK);
    if (s1 != XSEG_ERR_ASLEEP || s2 != XSEG_ERR_ASLEEP || s3 != XSEG_ERR_ASLEEP)
        snprintf(why, sizeof why, "allocations of the sleeping tag: statuses %d %d %d, not "
                 "XSEG_ERR_ASLEEP (%d); 1 MiB at %p %s", s1, s2, s3, XSEG_ERR_ASLEEP, z1,
                 z1 && t_faults(z1) ? "(sleeping memory)" : "");
    T_CHECK(xs);
    xwake(xs, t);
    /* The blocks freed while asleep were dropped, not mapped again. */
    if (!why[0] && !t_faults((char *)big + 3 * MiB))
        snprintf(why, sizeof why, "a block freed while asleep was mapped again at wake");
    if (why[0]) {
        xseg_destroy(xs);
        ck_abort_msg("%s", why);
    }
    ck_assert_uint_eq(tstats(xs, t).live_bytes.current, 0);
    for (int i = 0; i < 20; i++) { /* awake, every block handed out is mapped */
        void *a = alloc_t(xs, 1 * MiB, NULL, t), *b = alloc_t(xs, 4096, NULL, t);
        ck_assert(!t_faults(a) && !t_faults(b));
        t_fill(a, 1 * MiB, (uint32_t)i);
        t_fill(b, 4096, (uint32_t)i);
        ck_assert_int_eq(xseg_free(xs, a), XSEG_OK);
        ck_assert_int_eq(xseg_free(xs, b), XSEG_OK);
    }
    T_CHECK(xs);
    ck_assert_uint_eq(tstats(xs, t).live_bytes.current, 0);
    ck_assert_int_eq(xseg_destroy(xs), XSEG_OK);
}
END_TEST

/* Another thread's cache holds a block when the tag sleeps. */
typedef struct tc_arg {
    xseg_t *xs;
    int t;
    pthread_barrier_t *bar;
    xseg_status asleep_st;
    int hit_sleeping, awake_ok;
} tc_arg;

static void *tc_thread(void *arg)
{
    tc_arg *a = arg;
    for (int i = 0; i < 10; i++) {
        void *p = NULL;
        if (xseg_alloc_tagged(a->xs, 1 * MiB, NULL, a->t, &p) == XSEG_OK)
            xseg_free(a->xs, p); /* the last one stays in this thread's cache */
    }
    pthread_barrier_wait(a->bar); /* main sleeps the tag */
    pthread_barrier_wait(a->bar);
    void *p = NULL;
    a->asleep_st = xseg_alloc_tagged(a->xs, 1 * MiB, NULL, a->t, &p);
    a->hit_sleeping = a->asleep_st == XSEG_OK;
    if (p)
        xseg_free(a->xs, p);
    pthread_barrier_wait(a->bar); /* main wakes it */
    pthread_barrier_wait(a->bar);
    p = NULL;
    if (xseg_alloc_tagged(a->xs, 1 * MiB, NULL, a->t, &p) == XSEG_OK) {
        a->awake_ok = !t_faults(p);
        xseg_free(a->xs, p);
    }
    return NULL;
}

START_TEST(another_threads_cache_is_emptied_by_sleep)
{
    xseg_t *xs = t_host("thread_cache:on");
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, 2);
    tc_arg a = {.xs = xs, .t = tag("cached"), .bar = &bar};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, tc_thread, &a), 0);
    pthread_barrier_wait(&bar);
    xsleep(xs, a.t, XSEG_SLEEP_DISCARD);
    ck_assert_uint_eq(hcounts(xs).handles, 0);
    pthread_barrier_wait(&bar);
    pthread_barrier_wait(&bar);
    xwake(xs, a.t);
    pthread_barrier_wait(&bar);
    pthread_join(th, NULL);
    pthread_barrier_destroy(&bar);
    ck_assert_msg(!a.hit_sleeping, "the other thread's cache handed out sleeping memory");
    ck_assert_int_eq(a.asleep_st, XSEG_ERR_ASLEEP);
    ck_assert(a.awake_ok);
    check_ok(xs, "threads");
    ck_assert_int_eq(xseg_destroy(xs), XSEG_OK);
}
END_TEST

/* ---- the cap ---- */

START_TEST(a_wake_over_the_cap_fails_and_stays_asleep)
{
    xseg_t *xs = t_host("max_mapped:64MB");
    int t = tag("weights");
    void *p = alloc_t(xs, 32 * MiB, NULL, t);
    t_fill(p, 32 * MiB, 1);
    xsleep(xs, t, XSEG_SLEEP_BACKUP);
    void *u = alloc_u(xs, 48 * MiB, NULL); /* room while it sleeps */
    t_fill(u, 48 * MiB, 2);
    ck_assert_int_eq(xseg_wake(xs, &t, 1), XSEG_ERR_OOM);
    ck_assert_ptr_nonnull(strstr(xseg_last_error(), "cap"));
    ck_assert_ptr_nonnull(strstr(xseg_last_error(), "asleep"));
    xseg_tag_stats s = tstats(xs, t);
    ck_assert_int_eq(s.asleep, 1);
    ck_assert_uint_eq(s.mapped_bytes.current, 0);
    ck_assert(t_faults(p));
    check_ok(xs, "a wake over the cap");
    books_match_driver(xs);
    ck_assert(t_check(u, 48 * MiB, 2));
    /* Freed (cached) memory of another tag is given back for the wake. */
    ck_assert_int_eq(xseg_free(xs, u), XSEG_OK);
    xwake(xs, t);
    ck_assert(t_check(p, 32 * MiB, 1));
    ck_assert_uint_le(t_stats(xs).mapped_bytes.current, 64 * MiB);
    check_ok(xs, "the wake");
    /* And the other way: the woken tag now holds the room. */
    void *z;
    ck_assert_int_eq(xseg_alloc(xs, 48 * MiB, NULL, &z), XSEG_ERR_OOM);
    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    ck_assert_int_eq(xseg_destroy(xs), XSEG_OK);
}
END_TEST

/* ---- fork and destroy while asleep ---- */

/* What a child abandons by design (no driver call may touch the parent's
 * memory): the inherited driver context and the tag's pinned backup buffer
 * (plain malloc on the host backend).  Kept reachable for leak checkers. */
static void *volatile g_abandoned, *volatile g_abandoned_backup;

static int child_of_sleeper(xseg_t *xs, int t, void *p)
{
    int bad = 0, tt;
    void *z;
    xseg_tag_stats s = {.size = sizeof s};
    xseg_status st[] = {
        xseg_sleep(xs, &t, 1, XSEG_SLEEP_BACKUP), xseg_wake(xs, &t, 1),
        xseg_alloc_tagged(xs, 4096, NULL, t, &z), xseg_tag_of(xs, p, &tt),
        xseg_tag_stats_get(xs, t, &s), xseg_free(xs, p)};
    for (size_t i = 0; i < sizeof st / sizeof *st; i++)
        if (st[i] != XSEG_ERR_FORKED) {
            fprintf(stderr, "child: call %zu returned %d, not XSEG_ERR_FORKED\n", i, st[i]);
            bad++;
        }
    int again = t;
    bad += xseg_wake(xs, &again, 1) != XSEG_ERR_FORKED || !strstr(xseg_last_error(), "fork");
    bad += !t_faults(p); /* still asleep here too */
    g_abandoned = t_host_ctx(xs);
    g_abandoned_backup = atomic_load(&xs->tags[t])->bk_host;
    bad += xseg_destroy(xs) != XSEG_OK; /* bookkeeping only */
    return bad;
}

START_TEST(fork_while_asleep)
{
    xseg_t *xs = t_host(NULL);
    int t = tag("kv");
    void *p = alloc_t(xs, 4 * MiB, NULL, t);
    t_fill(p, 4 * MiB, 5);
    xsleep(xs, t, XSEG_SLEEP_BACKUP);
    xseg_host_counts h = hcounts(xs);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0)
        _exit(child_of_sleeper(xs, t, p));
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child: %d failures (status %d)",
                  WEXITSTATUS(st), st);
    /* The parent's memory and books are its own. */
    xseg_host_counts h2 = hcounts(xs);
    ck_assert_uint_eq(h2.handles, h.handles);
    ck_assert_uint_eq(h2.mapped_bytes, h.mapped_bytes);
    xwake(xs, t);
    ck_assert(t_check(p, 4 * MiB, 5));
    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    ck_assert_int_eq(xseg_destroy(xs), XSEG_OK);
}
END_TEST

/* A thread registering names while the process forks: the child still
 * registers and makes tags' allocators (the registry lock is not inherited
 * held). */
static void *register_loop(void *arg)
{
    int *stop = arg, t;
    char name[32];
    for (unsigned i = 0; !__atomic_load_n(stop, __ATOMIC_ACQUIRE); i++) {
        snprintf(name, sizeof name, "loop%u", i % 4);
        (void)xseg_tag_id(name, &t);
    }
    return NULL;
}

static int child_registers(void)
{
    int t = -1, bad = 0;
    alarm(10); /* a lock inherited held: SIGALRM */
    bad += xseg_tag_id("in_child", &t) != XSEG_OK;
    xseg_t *mine = NULL;
    bad += xseg_create(&mine, 0, "backend:host") != XSEG_OK;
    void *p = NULL;
    if (mine && xseg_alloc_tagged(mine, 4096, NULL, t, &p) == XSEG_OK)
        bad += xseg_free(mine, p) != XSEG_OK;
    else
        bad++;
    if (mine)
        bad += xseg_destroy(mine) != XSEG_OK;
    return bad;
}

START_TEST(fork_while_a_thread_registers)
{
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
    /* As test_fork's fork_during_traffic: the sanitizers' runtimes are not
     * fork-safe with another thread running; the plain build runs this. */
    printf("test_sleep: fork while a thread registers skipped under a sanitizer\n");
    return;
#endif
    int stop = 0;
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, register_loop, &stop), 0);
    for (int i = 0; i < 40; i++) {
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            signal(SIGALRM, SIG_DFL);
            _exit(child_registers());
        }
        int st = 0;
        ck_assert_int_eq(waitpid(pid, &st, 0), pid);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "fork %d: child %s %d", i,
                      WIFEXITED(st) ? "failed" : "killed by signal",
                      WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    }
    __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
    pthread_join(th, NULL);
}
END_TEST

static xseg_t *fault_xs(const char *conf)
{
    xseg_t *xs = NULL;
    ck_assert_msg(xseg_create_with_driver(&xs, 0, conf, &fault_driver) == XSEG_OK, "%s",
                  xseg_last_error());
    return xs;
}

static void assert_nothing_left(const char *when)
{
    xseg_host_counts c;
    ck_assert_msg(fault_fini_counts(&c), "%s: no fini of the driver", when);
    ck_assert_msg(c.handles == 0 && c.mappings == 0 && c.mapped_bytes == 0,
                  "%s: %zu handles, %zu mappings left at fini", when, c.handles, c.mappings);
}

START_TEST(destroy_while_asleep_leaks_nothing)
{
    for (int mode = 0; mode < 2; mode++) {
        fault_reset();
        xseg_t *xs = fault_xs("");
        int t = tag("kv"), o = tag("weights");
        blocks B;
        make_blocks(xs, t, &B, 1);
        void *op = alloc_t(xs, 2 * MiB, NULL, o);
        (void)op;
        xsleep(xs, t, (xseg_sleep_mode)mode);
        ck_assert_int_eq(xseg_destroy(xs), XSEG_OK); /* live blocks, asleep, and a buffer */
        assert_nothing_left(mode ? "destroy after a backup sleep" : "after a discard sleep");
    }
}
END_TEST

/* ---- every driver call of sleep and wake fails in turn ---- */

enum { SC_SLEEP_DISCARD, SC_SLEEP_BACKUP, SC_SLEEP_GROW, SC_WAKE_DISCARD, SC_WAKE_BACKUP,
       SC_COUNT };
static const char *const sc_name[SC_COUNT] = {"sleep discard", "sleep backup",
                                              "sleep backup, buffer grows", "wake after discard",
                                              "wake after backup"};

typedef struct fx {
    xseg_t *xs;
    int t, o;
    blocks B;
    void *op, *up;
    int backup, wake;
} fx;

static void fx_setup(fx *f, int sc)
{
    memset(f, 0, sizeof *f);
    f->backup = sc == SC_SLEEP_BACKUP || sc == SC_SLEEP_GROW || sc == SC_WAKE_BACKUP;
    f->wake = sc >= SC_WAKE_DISCARD;
    fault_reset();
    f->xs = fault_xs("");
    f->t = tag("faulty");
    f->o = tag("bystander");
    make_light_blocks(f->xs, f->t, &f->B, 50);
    free_block(f->xs, &f->B, 5); /* cached */
    f->op = alloc_t(f->xs, 3 * MiB, NULL, f->o);
    f->up = alloc_u(f->xs, 2 * MiB, S(2));
    t_fill(f->op, 3 * MiB, 7);
    t_fill(f->up, 2 * MiB, 8);
    if (sc == SC_SLEEP_GROW) { /* a first cycle, then more than its buffer holds */
        xsleep(f->xs, f->t, XSEG_SLEEP_BACKUP);
        xwake(f->xs, f->t);
        void *big = alloc_t(f->xs, 64 * MiB, NULL, f->t);
        f->B.p[5] = big;
        f->B.n[5] = 64 * MiB;
        f->B.live[5] = 1;
        t_fill(big, 64 * MiB, 50 + 5);
    }
    if (f->wake) {
        xsleep(f->xs, f->t, f->backup ? XSEG_SLEEP_BACKUP : XSEG_SLEEP_DISCARD);
        free_block(f->xs, &f->B, 2); /* freed while asleep: 1 MiB and a slab slot */
        free_block(f->xs, &f->B, 4);
    }
}

static void fx_teardown(fx *f, const char *what)
{
    for (int i = 0; i < f->B.count; i++)
        if (f->B.live[i])
            free_block(f->xs, &f->B, i);
    ck_assert_int_eq(xseg_free(f->xs, f->op), XSEG_OK);
    ck_assert_int_eq(xseg_free(f->xs, f->up), XSEG_OK);
    check_ok(f->xs, what);
    ck_assert_int_eq(xseg_destroy(f->xs), XSEG_OK);
    assert_nothing_left(what);
}

/* The tag is wholly asleep or wholly awake, the books match, contents are
 * kept where the mode keeps them, and the retry works. */
static void fx_verify(fx *f, xseg_status st, const char *what)
{
    ck_assert_msg(xseg_check(f->xs) == XSEG_OK, "%s: xseg_check: %s", what, xseg_last_error());
    books_match_driver(f->xs);
    ck_assert_msg(t_check(f->op, 3 * MiB, 7) && t_check(f->up, 2 * MiB, 8),
                  "%s: another tag's memory changed", what);
    xseg_tag_stats s = tstats(f->xs, f->t);
    xseg_sleep_mode mode = f->backup ? XSEG_SLEEP_BACKUP : XSEG_SLEEP_DISCARD;
    if (st == XSEG_OK)
        ck_assert_msg(s.asleep == !f->wake, "%s: succeeded but the tag is %s", what,
                      s.asleep ? "asleep" : "awake");
    if (s.asleep) {
        ck_assert_msg(s.mapped_bytes.current == 0, "%s: asleep with %llu bytes mapped", what,
                      (unsigned long long)s.mapped_bytes.current);
        ck_assert_msg(blocks_all_fault(&f->B), "%s: asleep but a block reads", what);
        xseg_status w = xseg_wake(f->xs, &f->t, 1);
        ck_assert_msg(w == XSEG_OK, "%s: the retried wake failed: %s", what, xseg_last_error());
    } else {
        for (int i = 0; i < f->B.count; i++)
            ck_assert_msg(!f->B.live[i] || !t_faults(f->B.p[i]),
                          "%s: awake but block %d faults", what, i);
        if (f->backup)
            ck_assert_msg(blocks_intact(&f->B, 50) == 0, "%s: awake, contents lost", what);
        if (st != XSEG_OK) { /* a failed sleep: sleep again, then wake */
            xseg_status s2 = xseg_sleep(f->xs, &f->t, 1, mode);
            ck_assert_msg(s2 == XSEG_OK, "%s: the retried sleep failed: %s", what,
                          xseg_last_error());
        }
        if (!f->wake)
            xwake(f->xs, f->t);
    }
    if (f->backup) {
        int bad = blocks_intact(&f->B, 50);
        ck_assert_msg(bad == 0, "%s: block %d not restored after the retry", what, bad - 1);
    }
    ck_assert_msg(xseg_check(f->xs) == XSEG_OK, "%s, after the retry: %s", what,
                  xseg_last_error());
    ck_assert_int_eq(tstats(f->xs, f->t).asleep, 0);
}

/* One run: the nth call of op (from the call) fails; 1 if it fired. */
static int fx_run(int sc, int op, int code, fault_mode fm, uint64_t nth)
{
    char what[256];
    snprintf(what, sizeof what, "%s: %s call %llu fails with %d%s", sc_name[sc],
             fault_op_name(op), (unsigned long long)nth, code, fm == FAULT_FROM ? " and on" : "");
    fx f;
    fx_setup(&f, sc);
    uint64_t fired0 = fault_fired();
    fault_arm(op, fault_calls(op) + nth, code, fm);
    xseg_status st = f.wake ? xseg_wake(f.xs, &f.t, 1)
                            : xseg_sleep(f.xs, &f.t, 1,
                                         f.backup ? XSEG_SLEEP_BACKUP : XSEG_SLEEP_DISCARD);
    int fired = fault_fired() > fired0;
    fault_disarm();
    if (st != XSEG_OK) {
        ck_assert_msg(fired, "%s: failed (%d) with nothing injected: %s", what, st,
                      xseg_last_error());
        ck_assert_msg(xseg_last_error()[0], "%s: failed without a message", what);
        ck_assert_msg(st != XSEG_ERR_DRIVER || strstr(xseg_last_error(), "CUDA_ERROR_"),
                      "%s: the message names no driver code: %s", what, xseg_last_error());
    }
    fx_verify(&f, st, what);
    fx_teardown(&f, what);
    return fired;
}

#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1 /* the fault runs are single-threaded: fewer of them there */
#else
#define UNDER_TSAN 0
#endif

static const int g_ops[] = {XSEG_OP_STREAM_SYNC, XSEG_OP_HOST_ALLOC,    XSEG_OP_HOST_FREE,
                            XSEG_OP_COPY_TO_HOST, XSEG_OP_COPY_TO_DEVICE, XSEG_OP_COPY_WAIT,
                            XSEG_OP_UNMAP,       XSEG_OP_RELEASE,       XSEG_OP_CREATE,
                            XSEG_OP_MAP,         XSEG_OP_SET_ACCESS,    XSEG_OP_EVENT_SYNC};

START_TEST(every_driver_call_may_fail)
{
    int sc = _i;
    uint64_t points = 0, fired = 0;
    const char *e = getenv("XSEG_FAULT_STRIDE"); /* every Nth call only (valgrind) */
    uint64_t stride = e && atoi(e) > 0 ? (uint64_t)atoi(e) : 1;
    for (size_t k = 0; k < sizeof g_ops / sizeof *g_ops; k++) {
        int op = g_ops[k], codes[4];
        if (sc == SC_SLEEP_GROW && op != XSEG_OP_HOST_ALLOC && op != XSEG_OP_HOST_FREE)
            continue; /* the others as in SC_SLEEP_BACKUP, with less to copy */
        int nc = UNDER_TSAN ? 1 : fault_codes(op, codes, 4);
        if (UNDER_TSAN)
            fault_codes(op, codes, 1);
        for (int c = 0; c < nc; c++)
            for (int fm = 0; fm < (sc == SC_SLEEP_GROW || UNDER_TSAN ? 1 : 2); fm++)
                for (uint64_t n = 1;; n += stride) {
                    ck_assert_msg(n < 400, "%s: %s still fires at call %llu", sc_name[sc],
                                  fault_op_name(op), (unsigned long long)n);
                    points++;
                    if (!fx_run(sc, op, codes[c], (fault_mode)fm, n))
                        break;
                    fired++;
                }
    }
    /* Each scenario reaches the calls it makes. */
    ck_assert_uint_ge(fired, sc == SC_SLEEP_GROW || UNDER_TSAN || stride > 1 ? 2 : 10);
    printf("test_sleep: %s: %llu injection points, %llu fired\n", sc_name[sc],
           (unsigned long long)points, (unsigned long long)fired);
}
END_TEST

/* Two failures in one sleep: every release fails (nothing given back), and
 * the mapping back fails too: the tag ends asleep with nothing mapped, the
 * handles kept for release, and a wake restores everything. */
static int g_fail_ops; /* bit per op */

static int fail_ops_hook(void *user, int op)
{
    (void)user;
    return (__atomic_load_n(&g_fail_ops, __ATOMIC_SEQ_CST) >> op) & 1 ? XDRV_OUT_OF_MEMORY
                                                                        : XDRV_SUCCESS;
}

START_TEST(a_failed_sleep_whose_undo_fails_too)
{
    fault_reset();
    xseg_t *xs = fault_xs("");
    int t = tag("faulty");
    blocks B;
    make_blocks(xs, t, &B, 70);
    __atomic_store_n(&g_fail_ops, (1 << XSEG_OP_RELEASE) | (1 << XSEG_OP_CREATE),
                     __ATOMIC_SEQ_CST);
    xdrv_set_fault_hook(fail_ops_hook, NULL);
    int t1 = t;
    xseg_status st = xseg_sleep(xs, &t1, 1, XSEG_SLEEP_BACKUP);
    xdrv_set_fault_hook(NULL, NULL);
    ck_assert_int_ne(st, XSEG_OK);
    xseg_tag_stats s = tstats(xs, t);
    ck_assert_msg(s.asleep == 1 && s.mapped_bytes.current == 0, "asleep %d, mapped %llu",
                  s.asleep, (unsigned long long)s.mapped_bytes.current);
    check_ok(xs, "the double failure");
    xwake(xs, t);
    ck_assert_int_eq(blocks_intact(&B, 70), 0);
    check_ok(xs, "the wake");
    /* Only unmapping fails: the sleep undoes itself, contents kept. */
    __atomic_store_n(&g_fail_ops, 1 << XSEG_OP_UNMAP, __ATOMIC_SEQ_CST);
    xdrv_set_fault_hook(fail_ops_hook, NULL);
    st = xseg_sleep(xs, &t1, 1, XSEG_SLEEP_DISCARD);
    xdrv_set_fault_hook(NULL, NULL);
    ck_assert_int_eq(st, XSEG_ERR_DRIVER);
    ck_assert_int_eq(tstats(xs, t).asleep, 0);
    ck_assert_int_eq(blocks_intact(&B, 70), 0); /* nothing was unmapped */
    check_ok(xs, "a failed unmap");
    for (int i = 0; i < B.count; i++)
        free_block(xs, &B, i);
    ck_assert_int_eq(xseg_destroy(xs), XSEG_OK);
    assert_nothing_left("a_failed_sleep_whose_undo_fails_too");
}
END_TEST

/* ---- threads ---- */

typedef struct th_arg {
    xseg_t *xs;
    int t, id, sleeper;
    int *stop;
    char why[200];
} th_arg;

static void *worker(void *arg)
{
    th_arg *a = arg;
    void *live[8] = {0};
    size_t n[8] = {0};
    unsigned r = 12345u + (unsigned)a->id * 7919u;
    for (int it = 0; it < 400 && !a->why[0]; it++) {
        int i = it % 8;
        if (live[i]) {
            if (!t_check(live[i], n[i], (uint32_t)(a->id * 1000 + i)))
                snprintf(a->why, sizeof a->why, "thread %d: block %d corrupted", a->id, i);
            xseg_free(a->xs, live[i]);
            live[i] = NULL;
        }
        r = r * 1103515245u + 12345u;
        n[i] = (r >> 8) % 3 ? 64 + (r >> 12) % 60000 : 1 * MiB + (r >> 12) % (3 * MiB);
        xseg_status st = xseg_alloc_tagged(a->xs, n[i], NULL, a->t, &live[i]);
        if (st != XSEG_OK) {
            snprintf(a->why, sizeof a->why, "thread %d: alloc failed: %s", a->id,
                     xseg_last_error());
            break;
        }
        t_fill(live[i], n[i], (uint32_t)(a->id * 1000 + i));
    }
    for (int i = 0; i < 8; i++)
        if (live[i])
            xseg_free(a->xs, live[i]);
    return NULL;
}

/* Allocates and frees the sleeping tag without touching it. */
static void *sleepy_user(void *arg)
{
    th_arg *a = arg;
    void *live[4] = {0};
    for (int it = 0; !__atomic_load_n(a->stop, __ATOMIC_ACQUIRE); it++) {
        int i = it % 4;
        if (live[i])
            xseg_free(a->xs, live[i]);
        live[i] = NULL;
        xseg_status st = xseg_alloc_tagged(a->xs, it % 2 ? 5000 : 2 * MiB, NULL, a->t, &live[i]);
        if (st != XSEG_OK && st != XSEG_ERR_ASLEEP) {
            snprintf(a->why, sizeof a->why, "sleepy user: status %d: %s", st, xseg_last_error());
            break;
        }
    }
    for (int i = 0; i < 4; i++)
        if (live[i])
            xseg_free(a->xs, live[i]);
    return NULL;
}

typedef struct sleeper_arg {
    xseg_t *xs;
    int t;
    blocks *B;
    char why[300];
} sleeper_arg;

static void *sleeper(void *arg)
{
    sleeper_arg *a = arg;
    for (int c = 0; c < 50 && !a->why[0]; c++) {
        int t = a->t;
        if (xseg_sleep(a->xs, &t, 1, XSEG_SLEEP_BACKUP) != XSEG_OK ||
            xseg_wake(a->xs, &t, 1) != XSEG_OK)
            snprintf(a->why, sizeof a->why, "cycle %d: %s", c, xseg_last_error());
        else if (blocks_intact(a->B, 90))
            snprintf(a->why, sizeof a->why, "cycle %d: contents lost", c);
    }
    return NULL;
}

START_TEST(threads_allocate_while_a_tag_sleeps_and_wakes)
{
    xseg_t *xs = t_host(NULL);
    int sl = tag("sleeping"), tags[4] = {tag("th_a"), tag("th_b"), 0, tag("th_a")};
    blocks B;
    make_light_blocks(xs, sl, &B, 90);
    int stop = 0;
    th_arg wa[5];
    pthread_t th[6];
    for (int i = 0; i < 5; i++) {
        wa[i] = (th_arg){.xs = xs, .t = i < 4 ? tags[i] : sl, .id = i, .stop = &stop};
        ck_assert_int_eq(pthread_create(&th[i], NULL, i < 4 ? worker : sleepy_user, &wa[i]), 0);
    }
    sleeper_arg sa = {.xs = xs, .t = sl, .B = &B};
    ck_assert_int_eq(pthread_create(&th[5], NULL, sleeper, &sa), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    pthread_join(th[5], NULL);
    __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
    pthread_join(th[4], NULL);
    for (int i = 0; i < 5; i++)
        ck_assert_msg(!wa[i].why[0], "%s", wa[i].why);
    ck_assert_msg(!sa.why[0], "sleeper: %s", sa.why);
    check_ok(xs, "the threads");
    ck_assert_uint_eq(tstats(xs, sl).sleeps, 50);
    ck_assert_int_eq(blocks_intact(&B, 90), 0);
    books_match_driver(xs);
    for (int i = 0; i < B.count; i++)
        free_block(xs, &B, i);
    xseg_stats s = t_stats(xs);
    ck_assert_uint_eq(s.allocated_bytes.current, 0);
    ck_assert_int_eq(xseg_destroy(xs), XSEG_OK);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sleep");
    TCase *tags = tcase_create("tags");
    tcase_add_test(tags, bad_names_are_refused);
    tcase_add_test(tags, default_is_zero_and_names_register);
    tcase_add_test(tags, a_full_registry_says_so);
    tcase_add_test(tags, the_stack_pushes_and_pops);
    tcase_add_test(tags, tagged_memory_has_a_range_of_its_own);
    suite_add_tcase(s, tags);
    TCase *sl = tcase_create("sleep");
    tcase_set_timeout(sl, 120);
    tcase_add_test(sl, discard_gives_memory_back_and_keeps_addresses);
    tcase_add_test(sl, bad_arguments_and_several_tags);
    tcase_add_test(sl, backup_restores_contents);
    tcase_add_test(sl, a_pool_sleeps_whole_with_its_cache);
    tcase_add_test(sl, wake_maps_large_handles_released_whole);
    tcase_add_test(sl, thread_cache_hits_never_hand_out_sleeping_memory);
    tcase_add_test(sl, another_threads_cache_is_emptied_by_sleep);
    tcase_add_test(sl, a_wake_over_the_cap_fails_and_stays_asleep);
    tcase_add_test(sl, fork_while_asleep);
    tcase_add_test(sl, fork_while_a_thread_registers);
    tcase_add_test(sl, destroy_while_asleep_leaks_nothing);
    tcase_add_test(sl, a_failed_sleep_whose_undo_fails_too);
    tcase_add_test(sl, threads_allocate_while_a_tag_sleeps_and_wakes);
    suite_add_tcase(s, sl);
    TCase *fl = tcase_create("faults");
    tcase_set_timeout(fl, 300);
    tcase_add_loop_test(fl, every_driver_call_may_fail, 0, SC_COUNT);
    suite_add_tcase(s, fl);
    return t_run(s);
}
