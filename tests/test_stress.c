/* test_stress.c: several threads allocate, free, record streams, trim and
 * read stats on one allocator at once; every block carries a pattern that
 * is checked before it is freed, so overlapping blocks are caught. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "support_common.h"

enum { THREADS = 4, SLOTS = 64, OPS = 20000 };

typedef struct worker {
    xseg_t *xs;
    unsigned seed;
    int id;
    long bad;
    char why[512];        /* first xseg_check failure (checking on) */
} worker;

/* The allocator's invariants after an operation (when checking is on). */
static void verify(worker *w)
{
    const char *m = t_check_failed(w->xs);
    if (!*m)
        return;
    if (!w->why[0])
        snprintf(w->why, sizeof w->why, "%s", m);
    w->bad++;
}

static size_t pick_size(unsigned *seed)
{
    unsigned r = (unsigned)rand_r(seed);
    switch (r % 4) {
    case 0: return 1 + r % 4096;
    case 1: return 1 + r % 200000;
    case 2: return 1 + r % (4 * MiB);
    default: return (1 + r % 8) * 2 * MiB;
    }
}

static void one_op(worker *w, void **p, size_t *n, int i)
{
    void *stream = (void *)(uintptr_t)(1 + (w->id + i) % 3);
    if (p[i]) {
        if (!t_check(p[i], n[i], (uint32_t)(w->id * SLOTS + i)))
            w->bad++;
        if (xseg_free(w->xs, p[i]) != XSEG_OK)
            w->bad++;
        p[i] = NULL;
        return;
    }
    n[i] = pick_size(&w->seed);
    if (xseg_alloc(w->xs, n[i], stream, &p[i]) != XSEG_OK) {
        w->bad++;
        p[i] = NULL;
        return;
    }
    t_fill(p[i], n[i], (uint32_t)(w->id * SLOTS + i));
    if (rand_r(&w->seed) % 8 == 0)
        xseg_record_stream(w->xs, p[i], (void *)(uintptr_t)(100 + w->id));
}

static void *run(void *arg)
{
    worker *w = arg;
    void *p[SLOTS] = {0};
    size_t n[SLOTS] = {0};
    for (int k = 0; k < OPS; k++) {
        one_op(w, p, n, rand_r(&w->seed) % SLOTS);
        verify(w);
        if (k % 997 == 0) {
            xseg_trim(w->xs, (size_t)(rand_r(&w->seed) % 64) * MiB, NULL);
            verify(w);
        }
        if (k % 101 == 0) {
            xseg_stats s = {.size = sizeof s};
            if (xseg_get_stats(w->xs, &s) != XSEG_OK || s.mapped_bytes.current < s.allocated_bytes.current / 2)
                w->bad++;
        }
    }
    for (int i = 0; i < SLOTS; i++)
        if (p[i])
            one_op(w, p, n, i);
    return NULL;
}

START_TEST(threads_keep_data_intact)
{
    xseg_t *xs = t_host(NULL);
    pthread_t th[THREADS];
    worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){.xs = xs, .seed = 1234u + (unsigned)i, .id = i};
        pthread_create(&th[i], NULL, run, &w[i]);
    }
    long bad = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        bad += w[i].bad;
        ck_assert_msg(!w[i].why[0], "thread %d: %s", i, w[i].why);
    }
    ck_assert_int_eq(bad, 0);
    T_CHECK(xs);
    xseg_stats s = t_stats(xs);
    ck_assert_uint_eq(s.active_blocks.current, 0);
    ck_assert_uint_eq(s.allocated_bytes.current, 0);
    ck_assert_uint_ge(s.alloc_calls, THREADS * OPS / 3);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK);
    T_CHECK(xs);
    ck_assert_uint_eq(t_stats(xs).mapped_bytes.current, 0);
    xseg_destroy(xs);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("stress");
    TCase *tc = tcase_create("threads");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, threads_keep_data_intact);
    suite_add_tcase(s, tc);
    return t_run(s);
}
