/* test_regress_epoch.c: issue 19, defect 1.  With thread caches, a cached
 * block of stream S stretched into neutral space used to take that space's
 * epoch, an epoch of another stream T far ahead of S's; when the growth
 * then flushed the other threads' caches, the block went back to S's free
 * index with T's epoch, and reclaim waited for an epoch S never reaches:
 * trim(0) left memory mapped with nothing allocated, and the OOM ladder
 * failed with 0 B in use.  Deterministic (barriers, no timing): the
 * scenario of the hostile-testing reproducer trim_stuck_epoch.c (issue 19).  The block walk
 * checks the invariant itself: a neutral free block carries no epoch and a
 * stream's free block none beyond the stream's own. */
#include <pthread.h>

#include "internal.h"
#include "support_common.h"

#define S ((void *)(uintptr_t)1)
#define T ((void *)(uintptr_t)2)
#define U ((void *)(uintptr_t)3)

typedef struct helper_arg {
    xseg_t *xs;
    pthread_barrier_t bar;
    int st_alloc, st_free;
} helper_arg;

/* A second thread: allocates X (6 MiB on S), frees it into its own cache,
 * and stays alive (holding X) while the main thread grows. */
static void *helper(void *a)
{
    helper_arg *h = a;
    void *x = NULL;
    h->st_alloc = xseg_alloc(h->xs, 6 * MiB, S, &x);
    pthread_barrier_wait(&h->bar);
    pthread_barrier_wait(&h->bar);
    h->st_free = xseg_free(h->xs, x);
    pthread_barrier_wait(&h->bar);
    pthread_barrier_wait(&h->bar);
    return NULL;
}

/* Every free block: neutral ones carry no epoch, a stream's no epoch its
 * stream has not reached. */
static void check_epochs(xseg_t *xs)
{
    xlock_lock(&xs->lock);
    for (const xblock *b = xs->first_block; b; b = b->anext) {
        if (!(b->flags & XB_FREE))
            continue;
        if (!b->owner)
            ck_assert_msg(b->epoch == 0, "neutral free block at +%zu (%zu B) carries epoch %llu",
                          (size_t)(b->addr - xs->arena.base), b->size,
                          (unsigned long long)b->epoch);
        else
            ck_assert_msg(b->epoch <= b->owner->epoch,
                          "free block at +%zu (%zu B) of stream %p carries epoch %llu, "
                          "its stream is at %llu", (size_t)(b->addr - xs->arena.base), b->size,
                          b->owner->handle, (unsigned long long)b->epoch,
                          (unsigned long long)b->owner->epoch);
    }
    xlock_unlock(&xs->lock);
}

/* The scenario, up to the point where everything is free again (nothing
 * allocated, every thread joined); `check`: the epochs on the way. */
static xseg_t *scenario(int check)
{
    xseg_t *xs = t_host("host_capacity:1GB,max_mapped:24MB");
    void *p, *q, *y, *z;
    /* T's epoch runs ahead: 200 frees on U used on T. */
    for (int i = 0; i < 200; i++) {
        ck_assert_int_eq(xseg_alloc(xs, 1 * MiB, U, &p), XSEG_OK);
        ck_assert_int_eq(xseg_record_stream(xs, p, T), XSEG_OK);
        ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    }
    helper_arg h = {.xs = xs};
    pthread_t th;
    pthread_barrier_init(&h.bar, NULL, 2);
    ck_assert_int_eq(pthread_create(&th, NULL, helper, &h), 0);
    pthread_barrier_wait(&h.bar);                      /* X allocated, live */
    ck_assert_int_eq(h.st_alloc, XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 4 * MiB, S, &y), XSEG_OK); /* Y after X */
    ck_assert_int_eq(xseg_alloc(xs, 2 * MiB, U, &z), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 8 * MiB, T, &q), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, q), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, z), XSEG_OK);
    /* T's block becomes neutral space (it used to keep T's epoch). */
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK);
    if (check)
        check_epochs(xs);
    ck_assert_int_eq(xseg_free(xs, y), XSEG_OK);        /* Y: in this thread's cache */
    pthread_barrier_wait(&h.bar);
    pthread_barrier_wait(&h.bar);                      /* X: in the helper's cache */
    ck_assert_int_eq(h.st_free, XSEG_OK);
    /* Stretches Y into the neutral space; the growth flushes the caches. */
    ck_assert_int_eq(xseg_alloc(xs, 6 * MiB, S, &p), XSEG_OK);
    if (check)
        check_epochs(xs);
    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    pthread_barrier_wait(&h.bar);
    pthread_join(th, NULL);
    pthread_barrier_destroy(&h.bar);
    if (check)
        check_epochs(xs);
    ck_assert_uint_eq(t_stats(xs).allocated_bytes.current, 0);
    return xs;
}

START_TEST(trim_returns_everything_after_a_stretch)
{
    xseg_t *xs = scenario(0);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK);
    xseg_stats s = t_stats(xs);
    ck_assert_msg(s.mapped_bytes.current == 0,
                  "nothing allocated, yet %llu bytes stay mapped after trim(0)",
                  (unsigned long long)s.mapped_bytes.current);
    void *p;
    xseg_status st = xseg_alloc(xs, 16 * MiB, (void *)9, &p);
    ck_assert_msg(st == XSEG_OK, "16 MiB under max_mapped:24MB with nothing allocated: %s",
                  xseg_last_error());
    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    xseg_destroy(xs);
}
END_TEST

/* No trim: the cap path and the OOM ladder alone must find the memory. */
START_TEST(oom_ladder_returns_everything_after_a_stretch)
{
    xseg_t *xs = scenario(0);
    void *p;
    xseg_status st = xseg_alloc(xs, 20 * MiB, (void *)9, &p);
    ck_assert_msg(st == XSEG_OK, "20 MiB under max_mapped:24MB with nothing allocated: %s",
                  xseg_last_error());
    ck_assert_uint_le(t_stats(xs).mapped_bytes.current, 24 * MiB);
    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    xseg_destroy(xs);
}
END_TEST

/* The cause itself, at each step: no free block holds a foreign epoch. */
START_TEST(free_blocks_carry_only_their_streams_epochs)
{
    xseg_t *xs = scenario(1);
    xseg_destroy(xs);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("regress_epoch");
    TCase *tc = tcase_create("epoch");
    tcase_add_test(tc, trim_returns_everything_after_a_stretch);
    tcase_add_test(tc, oom_ladder_returns_everything_after_a_stretch);
    tcase_add_test(tc, free_blocks_carry_only_their_streams_epochs);
    suite_add_tcase(s, tc);
    return t_run(s);
}
