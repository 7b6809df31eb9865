/* test_regress_counters.c: regression tests of issue 19, defects 2 and 3:
 * the statistics with thread caches (the default).  A cache hit that
 * re-serves a block for another request size of its class must not leave
 * requested_bytes wrong once the thread exits (it wrapped: peak
 * 18446744073709551217); alloc_calls / free_calls and every *.total must
 * count cache hits and never decrease when a thread exits (they fell from
 * 1000 to 1), in xseg_get_stats and in the Prometheus text. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support_common.h"

#define S1 ((void *)(uintptr_t)0x1001)
/* Far above anything these tests allocate: a wrapped counter is above it. */
#define SANE ((uint64_t)1 << 40)

typedef struct worker {
    xseg_t *xs;
    size_t first, second; /* requests: first is freed into the cache */
    int rounds;           /* alloc/free pairs through the cache */
    void *out;            /* handed to the main thread (second request) */
    pthread_barrier_t *bar; /* when set: waited on twice before exiting */
    int rc;
} worker;

/* alloc `first`, free it (held in this thread's cache), then `rounds`
 * alloc/free pairs and one alloc of `second` that stays live for main. */
static void *work(void *v)
{
    worker *w = v;
    void *p, *q;
    w->rc = xseg_alloc(w->xs, w->first, S1, &p);
    if (w->rc == XSEG_OK)
        w->rc = xseg_free(w->xs, p);
    for (int i = 0; i < w->rounds && w->rc == XSEG_OK; i++) {
        w->rc = xseg_alloc(w->xs, w->first, S1, &q);
        if (w->rc == XSEG_OK)
            w->rc = xseg_free(w->xs, q);
    }
    if (w->rc == XSEG_OK && w->second)
        w->rc = xseg_alloc(w->xs, w->second, S1, &w->out);
    if (w->bar) {
        pthread_barrier_wait(w->bar); /* 1: done */
        pthread_barrier_wait(w->bar); /* 2: main has read the stats; exit */
    }
    return NULL;
}

static void run_worker(worker *w)
{
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, work, w), 0);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_msg(w->rc == XSEG_OK, "worker: %s", xseg_last_error());
}

static void check_sane(const xseg_stats *s, const char *when)
{
    const xseg_counter *c[] = {&s->allocated_bytes, &s->requested_bytes, &s->active_blocks};
    const char *name[] = {"allocated_bytes", "requested_bytes", "active_blocks"};
    for (int i = 0; i < 3; i++) {
        ck_assert_msg(c[i]->current < SANE && c[i]->peak < SANE,
                      "%s: %s current %llu peak %llu (wrapped)", when, name[i],
                      (unsigned long long)c[i]->current, (unsigned long long)c[i]->peak);
        ck_assert_msg(c[i]->peak >= c[i]->current && c[i]->total >= c[i]->current,
                      "%s: %s current %llu above peak %llu or total %llu (negative freed)",
                      when, name[i], (unsigned long long)c[i]->current,
                      (unsigned long long)c[i]->peak, (unsigned long long)c[i]->total);
    }
}

/* (a) The reproducer: a hit with a smaller request (1000 -> 600) on a
 * thread that exits, the block freed by the main thread. */
START_TEST(requested_after_smaller_hit_and_exit)
{
    xseg_t *xs = t_host(NULL);
    worker w = {.xs = xs, .first = 1000, .second = 600};
    run_worker(&w);
    xseg_stats s = t_stats(xs);
    check_sane(&s, "after the thread exit");
    ck_assert_uint_eq(s.requested_bytes.current, 600);
    ck_assert_uint_eq(s.active_blocks.current, 1);
    size_t req = 0;
    ck_assert_int_eq(xseg_block_size(xs, w.out, NULL, &req), XSEG_OK);
    ck_assert_uint_eq(req, 600);
    ck_assert_int_eq(xseg_free(xs, w.out), XSEG_OK);
    s = t_stats(xs);
    check_sane(&s, "nothing live");
    ck_assert_uint_eq(s.requested_bytes.current, 0);
    ck_assert_uint_eq(s.allocated_bytes.current, 0);
    ck_assert_uint_eq(s.active_blocks.current, 0);
    ck_assert_uint_le(s.requested_bytes.peak, 1600);
    ck_assert_uint_ge(s.requested_bytes.total, 1600);
    xseg_destroy(xs);
}
END_TEST

/* (a) The other way round (600 -> 1000): the counter went below zero and
 * the next allocation made the peak 2^64 - 400. */
START_TEST(requested_after_larger_hit_and_exit)
{
    xseg_t *xs = t_host(NULL);
    worker w = {.xs = xs, .first = 600, .second = 1000};
    run_worker(&w);
    xseg_stats s = t_stats(xs);
    check_sane(&s, "after the thread exit");
    ck_assert_uint_eq(s.requested_bytes.current, 1000);
    ck_assert_int_eq(xseg_free(xs, w.out), XSEG_OK);
    s = t_stats(xs);
    check_sane(&s, "nothing live");
    ck_assert_uint_eq(s.requested_bytes.current, 0);
    void *p;
    ck_assert_int_eq(xseg_alloc(xs, 700, S1, &p), XSEG_OK);
    s = t_stats(xs);
    check_sane(&s, "one live");
    ck_assert_uint_eq(s.requested_bytes.current, 700);
    ck_assert_uint_le(s.requested_bytes.peak, 1600);
    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    ck_assert_uint_eq(t_stats(xs).requested_bytes.current, 0);
    xseg_destroy(xs);
}
END_TEST

/* (a) Several threads re-serve blocks of one class with varying requests
 * and hand some to each other; stats read meanwhile never wrap, and
 * everything is back to 0 once the threads have exited. */
#define MIX_THREADS 4
#define MIX_ROUNDS 1500
#define MIX_SLOTS 8

typedef struct mix {
    xseg_t *xs;
    pthread_mutex_t lock;
    void *shared[MIX_SLOTS]; /* allocations handed between threads */
    _Atomic int rc;
} mix;

typedef struct mix_arg {
    mix *m;
    unsigned seed;
} mix_arg;

static unsigned rnd(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return *s >> 8;
}

static void *mix_thread(void *v)
{
    mix_arg *a = v;
    mix *m = a->m;
    void *own[4] = {0};
    for (int i = 0; i < MIX_ROUNDS; i++) {
        unsigned r = rnd(&a->seed), k = r % 4;
        if (own[k]) {
            void *give = own[k];
            own[k] = NULL;
            if ((r >> 4) % 3 == 0) { /* hand it to whichever thread comes next */
                pthread_mutex_lock(&m->lock);
                unsigned slot = (r >> 6) % MIX_SLOTS;
                void *old = m->shared[slot];
                m->shared[slot] = give;
                pthread_mutex_unlock(&m->lock);
                give = old;
            }
            if (give && xseg_free(m->xs, give) != XSEG_OK)
                m->rc = 1;
        } else if (xseg_alloc(m->xs, 513 + (r >> 8) % 512, S1, &own[k]) != XSEG_OK) {
            m->rc = 2;
        }
    }
    for (int k = 0; k < 4; k++)
        if (own[k] && xseg_free(m->xs, own[k]) != XSEG_OK)
            m->rc = 3;
    return NULL;
}

START_TEST(requested_exact_after_mixed_threads_exit)
{
    mix m = {.xs = t_host(NULL)};
    pthread_mutex_init(&m.lock, NULL);
    pthread_t th[MIX_THREADS];
    mix_arg arg[MIX_THREADS];
    for (int i = 0; i < MIX_THREADS; i++) {
        arg[i] = (mix_arg){&m, 7u + 131u * (unsigned)i};
        ck_assert_int_eq(pthread_create(&th[i], NULL, mix_thread, &arg[i]), 0);
    }
    for (int i = 0; i < 20; i++) { /* reads while the threads run */
        xseg_stats s = t_stats(m.xs);
        check_sane(&s, "while threads run");
    }
    for (int i = 0; i < MIX_THREADS; i++)
        ck_assert_int_eq(pthread_join(th[i], NULL), 0);
    ck_assert_int_eq(m.rc, 0);
    xseg_stats s = t_stats(m.xs);
    check_sane(&s, "threads exited");
    uint64_t live = 0;
    for (int i = 0; i < MIX_SLOTS; i++)
        if (m.shared[i]) {
            size_t req;
            ck_assert_int_eq(xseg_block_size(m.xs, m.shared[i], NULL, &req), XSEG_OK);
            live += req;
        }
    ck_assert_uint_eq(s.requested_bytes.current, live);
    for (int i = 0; i < MIX_SLOTS; i++)
        if (m.shared[i])
            ck_assert_int_eq(xseg_free(m.xs, m.shared[i]), XSEG_OK);
    s = t_stats(m.xs);
    check_sane(&s, "nothing live");
    ck_assert_uint_eq(s.requested_bytes.current, 0);
    ck_assert_uint_eq(s.allocated_bytes.current, 0);
    ck_assert_uint_eq(s.active_blocks.current, 0);
    ck_assert_uint_le(s.requested_bytes.peak, MiB); /* some 40 blocks of 1 KiB at most */
    pthread_mutex_destroy(&m.lock);
    xseg_destroy(m.xs);
}
END_TEST

/* ---- (b) monotone counters across a thread exit ---- */

/* Every number of xseg_stats that only ever grows. */
static void check_monotone(const xseg_stats *a, const xseg_stats *b, const char *when)
{
    const xseg_counter *ca[] = {&a->allocated_bytes, &a->requested_bytes, &a->active_blocks,
                                &a->reserved_va_bytes, &a->mapped_bytes, &a->cached_bytes,
                                &a->segments, &a->handles};
    const xseg_counter *cb[] = {&b->allocated_bytes, &b->requested_bytes, &b->active_blocks,
                                &b->reserved_va_bytes, &b->mapped_bytes, &b->cached_bytes,
                                &b->segments, &b->handles};
    const char *cn[] = {"allocated_bytes", "requested_bytes", "active_blocks",
                        "reserved_va_bytes", "mapped_bytes", "cached_bytes", "segments",
                        "handles"};
    for (int i = 0; i < 8; i++)
        ck_assert_msg(cb[i]->total >= ca[i]->total, "%s: %s.total %llu -> %llu", when, cn[i],
                      (unsigned long long)ca[i]->total, (unsigned long long)cb[i]->total);
#define MONO(f)                                                                         \
    ck_assert_msg(b->f >= a->f, "%s: " #f " %llu -> %llu", when, (unsigned long long)a->f, \
                  (unsigned long long)b->f)
    MONO(alloc_calls);
    MONO(free_calls);
    MONO(driver_errors);
    MONO(alloc_retries);
    MONO(ooms);
    MONO(syncs);
    MONO(gc_runs);
    MONO(trims);
    MONO(released_bytes);
    MONO(deferred_frees);
    MONO(moved_bytes);
    for (int i = 0; i < XSEG_OP_COUNT; i++)
        MONO(driver_calls[i]);
#undef MONO
}

START_TEST(counters_monotone_across_thread_exit)
{
    xseg_t *xs = t_host(NULL);
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, 2);
    worker w = {.xs = xs, .first = 3000, .rounds = 999, .bar = &bar};
    xseg_stats s0 = t_stats(xs);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, work, &w), 0);
    pthread_barrier_wait(&bar); /* its 1000 alloc/free pairs are done */
    ck_assert_msg(w.rc == XSEG_OK, "worker: %s", xseg_last_error());
    xseg_stats s1 = t_stats(xs); /* while it lives, holding its cached block */
    ck_assert_uint_eq(s1.active_blocks.current, 0);
    pthread_barrier_wait(&bar);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    xseg_stats s2 = t_stats(xs);
    check_monotone(&s0, &s1, "thread alive");
    check_monotone(&s1, &s2, "thread exit");
    check_sane(&s1, "thread alive");
    check_sane(&s2, "thread exited");
    ck_assert_uint_ge(s1.alloc_calls, 1000);
    ck_assert_uint_ge(s1.free_calls, 1000);
    ck_assert_uint_ge(s2.alloc_calls, 1000);
    ck_assert_uint_ge(s2.free_calls, 1000);
    ck_assert_uint_ge(s2.active_blocks.total, 1000);
    ck_assert_uint_ge(s2.allocated_bytes.total, 1000 * 3072);
    ck_assert_uint_ge(s2.requested_bytes.total, 1000 * 3000);
    ck_assert_uint_eq(s2.active_blocks.current, 0);
    ck_assert_uint_eq(s2.requested_bytes.current, 0);
    /* the main thread's own cache hits count the same way */
    void *p;
    for (int i = 0; i < 10; i++) {
        ck_assert_int_eq(xseg_alloc(xs, 3000, S1, &p), XSEG_OK);
        ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    }
    xseg_stats s3 = t_stats(xs);
    check_monotone(&s2, &s3, "main thread");
    ck_assert_uint_ge(s3.alloc_calls, s2.alloc_calls + 10);
    ck_assert_uint_ge(s3.active_blocks.total, s2.active_blocks.total + 10);
    pthread_barrier_destroy(&bar);
    xseg_destroy(xs);
}
END_TEST

/* ---- (c) Prometheus counters across thread exits ---- */

#define PROM_MAX 256

typedef struct prom {
    int n;
    char key[PROM_MAX][160]; /* metric name with its labels */
    unsigned long long val[PROM_MAX];
} prom;

/* The `*_total` samples of xseg_stats_prometheus. */
static void prom_read(xseg_t *xs, prom *out)
{
    static char buf[1 << 16];
    size_t len = 0;
    ck_assert_int_eq(xseg_stats_prometheus(xs, buf, sizeof buf, &len), XSEG_OK);
    ck_assert_uint_lt(len, sizeof buf);
    out->n = 0;
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#')
            continue;
        char *sp = strrchr(line, ' ');
        ck_assert_ptr_nonnull(sp);
        *sp = '\0';
        size_t name_len = strcspn(line, "{");
        if (name_len < 6 || strncmp(line + name_len - 6, "_total", 6) != 0)
            continue;
        ck_assert_int_lt(out->n, PROM_MAX);
        ck_assert_uint_lt(strlen(line), sizeof out->key[0]);
        char *end;
        unsigned long long v = strtoull(sp + 1, &end, 10);
        ck_assert_msg(*end == '\0', "counter %s: value '%s'", line, sp + 1);
        strcpy(out->key[out->n], line);
        out->val[out->n++] = v;
    }
}

static unsigned long long prom_get(const prom *p, const char *key)
{
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->key[i], key))
            return p->val[i];
    ck_abort_msg("no sample %s", key);
    return 0;
}

static void prom_monotone(const prom *a, const prom *b, const char *when)
{
    for (int i = 0; i < a->n; i++) {
        int found = 0;
        for (int j = 0; j < b->n; j++)
            if (!strcmp(a->key[i], b->key[j])) {
                found = 1;
                ck_assert_msg(b->val[j] >= a->val[i], "%s: counter %s decreased: %llu -> %llu",
                              when, a->key[i], a->val[i], b->val[j]);
            }
        ck_assert_msg(found, "%s: counter %s disappeared", when, a->key[i]);
    }
}

START_TEST(prometheus_counters_monotone_across_thread_exits)
{
    xseg_t *xs = t_host(NULL);
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, 2);
    prom *before = malloc(sizeof *before), *after = malloc(sizeof *after);
    ck_assert_ptr_nonnull(before);
    ck_assert_ptr_nonnull(after);
    prom_read(xs, after);
    ck_assert_int_ge(after->n, 10);
    for (int t = 0; t < 3; t++) { /* three threads, one after another */
        worker w = {.xs = xs, .first = 2000 + 1000 * (size_t)t, .second = 1500 + 1000 * (size_t)t,
                    .rounds = 499, .bar = &bar};
        pthread_t th;
        ck_assert_int_eq(pthread_create(&th, NULL, work, &w), 0);
        pthread_barrier_wait(&bar);
        ck_assert_msg(w.rc == XSEG_OK, "worker: %s", xseg_last_error());
        prom_read(xs, before);
        prom_monotone(after, before, "thread alive");
        pthread_barrier_wait(&bar);
        ck_assert_int_eq(pthread_join(th, NULL), 0);
        prom_read(xs, after);
        prom_monotone(before, after, "thread exit");
        ck_assert_int_eq(xseg_free(xs, w.out), XSEG_OK);
        prom_read(xs, before);
        prom_monotone(after, before, "free of its block");
        memcpy(after, before, sizeof *after);
    }
    ck_assert_uint_ge(prom_get(after, "xseg_alloc_calls_total{device=\"0\"}"), 3 * 501);
    ck_assert_uint_ge(prom_get(after, "xseg_free_calls_total{device=\"0\"}"), 3 * 501);
    ck_assert_uint_ge(prom_get(after, "xseg_allocations_total{device=\"0\"}"), 3 * 501);
    free(before);
    free(after);
    pthread_barrier_destroy(&bar);
    xseg_destroy(xs);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("regress_counters");
    TCase *tc = tcase_create("counters");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, requested_after_smaller_hit_and_exit);
    tcase_add_test(tc, requested_after_larger_hit_and_exit);
    tcase_add_test(tc, requested_exact_after_mixed_threads_exit);
    tcase_add_test(tc, counters_monotone_across_thread_exit);
    tcase_add_test(tc, prometheus_counters_monotone_across_thread_exits);
    suite_add_tcase(s, tc);
    return t_run(s);
}
