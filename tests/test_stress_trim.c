/* test_stress_trim.c: issue 19, defect 1.  One allocator through rounds of
 * a random workload: 4 threads allocate and free mixed sizes (slab classes
 * to 12 MiB, sizes that repeat, so thread caches hit and hold blocks) on
 * streams they share and on one of their own, record_stream on another
 * shared stream (its epoch runs far ahead), and trim now and then, on a GPU
 * that runs behind the CPU (host backend, host_event_lag: events stay
 * pending) under a cap.  A round is phases between barriers; in each, a
 * thread works or frees some blocks into its cache and idles holding them
 * while the others grow.  Every round ends with all threads joined and
 * everything freed; then trim(0) must leave nothing mapped, and the whole
 * cap must be allocatable again (no OOM with 0 B in use).  Seeded
 * (XSEG_STRESS_SEED); XSEG_STRESS_ROUNDS rounds, default 30, 6 under
 * valgrind or ThreadSanitizer.  Interleavings still vary from run to run:
 * each round checks its end state whatever they were.  The knobs below
 * (-D) are for exploring other mixes. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "driver_host.h"
#include "support_common.h"

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif
#ifndef RUNNING_ON_VALGRIND
#define RUNNING_ON_VALGRIND 0
#endif
#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif
#ifndef UNDER_TSAN
#define UNDER_TSAN 0
#endif

#define THREADS 4
#define SHARED 3          /* streams all threads use */
#ifndef LIVE
#define LIVE 24           /* live blocks per thread at most */
#endif
#ifndef PHASES
#define PHASES 40         /* per round */
#endif
#ifndef OPS
#define OPS 40            /* operations per thread per working phase */
#endif
#ifndef IDLE
#define IDLE 2            /* a thread idles in one phase out of IDLE */
#endif
#ifndef WARMUP
#define WARMUP 1000       /* frees used on the USED stream first */
#endif
#ifndef CAP_MB
#define CAP_MB 160
#endif
#ifndef LAG
#define LAG "6"
#endif
#define CAP ((size_t)CAP_MB * MiB)
#define STR_(x) #x
#define STR(x) STR_(x)
#define CONF "host_capacity:1GB,max_mapped:" STR(CAP_MB) "MB,host_event_lag:" LAG

typedef struct worker {
    xseg_t *xs;
    unsigned seed;
    int id;
    long allocs, frees, records, trims, ooms;
    pthread_barrier_t *bar;
    int bad;              /* first unexpected status, 0 = none */
    char what[160];
} worker;

/* A quarter of the allocations on the thread's own stream, the rest on the
 * shared ones.  Uses (record_stream) go to shared streams but the first:
 * their epochs run far ahead of the first's and of the threads' own. */
/* Streams: three shared by the threads and one per thread.  The first
 * shared one gets most allocations, the third every use (record_stream),
 * so its epoch runs far ahead of the others'. */
static void *stream_of(const worker *w, unsigned r)
{
    r %= 16;
    if (r < 4)
        return (void *)(uintptr_t)(0x100 + w->id);
    return (void *)(uintptr_t)(r < 14 ? 1 : r < 15 ? 2 : 3);
}

#define USED ((void *)(uintptr_t)3)

static size_t pick_size(unsigned *seed)
{
    /* Real workloads repeat their sizes: thread caches hit, and hold. */
#ifndef MENU
#define MENU 700, 3000, 60000, 900000, 2 * MiB, 3 * MiB + 5000, 5 * MiB, 6 * MiB, 8 * MiB, 12 * MiB
#endif
    static const size_t menu[] = {MENU};
    unsigned r = (unsigned)rand_r(seed);
    return menu[r % (sizeof menu / sizeof menu[0])] - (r >> 20) % 256;
}

static void note_bad(worker *w, xseg_status st, const char *op)
{
    if (!w->bad) {
        w->bad = (int)st;
        snprintf(w->what, sizeof w->what, "%s: %d %s", op, (int)st, xseg_last_error());
    }
}

/* The allocator's invariants after an operation (when checking is on). */
static void verify(worker *w, const char *op)
{
    const char *m = t_check_failed(w->xs);
    if (*m && !w->bad) {
        w->bad = XSEG_ERR_INTERNAL;
        snprintf(w->what, sizeof w->what, "xseg_check after %s: %s", op, m);
    }
}

static void drop(worker *w, void **live, int *n, int i)
{
    xseg_status st = xseg_free(w->xs, live[i]);
    if (st != XSEG_OK)
        note_bad(w, st, "free");
    verify(w, "free");
    w->frees++;
    live[i] = live[--*n];
}

/* One random operation: trim, free (after a record_stream, sometimes), or
 * alloc. */
static void step(worker *w, void **live, int *n)
{
    unsigned r = (unsigned)rand_r(&w->seed);
    if (r % 64 == 0) {
        xseg_status st = xseg_trim(w->xs, (size_t)(rand_r(&w->seed) % 4) * 8 * MiB, NULL);
        if (st != XSEG_OK)
            note_bad(w, st, "trim");
        verify(w, "trim");
        w->trims++;
    } else if (*n && (*n == LIVE || r % 2)) {
        int i = rand_r(&w->seed) % *n;
        if (rand_r(&w->seed) % 2 == 0) {
            xseg_status st = xseg_record_stream(w->xs, live[i],
                                                USED);
            if (st != XSEG_OK)
                note_bad(w, st, "record_stream");
            w->records++;
        }
        drop(w, live, n, i);
    } else {
        xseg_status st = xseg_alloc(w->xs, pick_size(&w->seed), stream_of(w, r >> 8),
                                    &live[*n]);
        if (st == XSEG_OK) {
            (*n)++;
            w->allocs++;
        } else if (st == XSEG_ERR_OOM) {
            w->ooms++; /* the cap is shared by 4 threads: may happen */
        } else {
            note_bad(w, st, "alloc");
        }
        verify(w, "alloc");
    }
}

/* Phases separated by a barrier: in each, a thread either works or frees
 * some of its blocks (into its cache, which it then holds) and idles while
 * the others grow, as a data loader or a waiting rank does. */
static void *work(void *arg)
{
    worker *w = arg;
    void *live[LIVE];
    int n = 0;
    for (int ph = 0; ph < PHASES; ph++) {
        if (rand_r(&w->seed) % IDLE == 0) {
            for (int k = rand_r(&w->seed) % (n + 1); k > 0 && !w->bad; k--)
                drop(w, live, &n, rand_r(&w->seed) % n);
        } else {
            for (int op = 0; op < OPS && !w->bad; op++)
                step(w, live, &n);
        }
        pthread_barrier_wait(w->bar);
    }
    while (n)
        drop(w, live, &n, n - 1);
    return NULL;
}

/* One round; returns bytes left mapped after trim(0), and in *oom whether
 * the cap could not be allocated again (its message in msg). */
static size_t round_of(xseg_t *xs, unsigned seed, int *oom, char *msg, size_t len, long *ops)
{
    worker w[THREADS] = {{0}};
    pthread_t th[THREADS];
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, THREADS);
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){.xs = xs, .seed = seed * 7919u + (unsigned)i, .id = i, .bar = &bar};
        ck_assert_int_eq(pthread_create(&th[i], NULL, work, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        ck_assert_msg(!w[i].bad, "seed %u, thread %d: %s", seed, i, w[i].what);
        *ops += w[i].allocs + w[i].frees + w[i].records + w[i].trims;
    }
    pthread_barrier_destroy(&bar);
    xseg_stats s = t_stats(xs);
    ck_assert_uint_eq(s.allocated_bytes.current, 0);
    T_CHECK(xs);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK);
    T_CHECK(xs);
    size_t left = t_stats(xs).mapped_bytes.current;
    /* The whole cap again, in four blocks on four streams. */
    void *p[4] = {NULL};
    *oom = 0;
    for (int i = 0; i < 4 && !*oom; i++) {
        xseg_status st = xseg_alloc(xs, CAP / 4, (void *)(uintptr_t)(0x200 + i), &p[i]);
        if (st != XSEG_OK) {
            *oom = 1;
            snprintf(msg, len, "block %d of %zu B: %s", i, CAP / 4, xseg_last_error());
        }
    }
    for (int i = 0; i < 4; i++)
        if (p[i])
            ck_assert_int_eq(xseg_free(xs, p[i]), XSEG_OK);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK);
    T_CHECK(xs);
    return left;
}

static long env_long(const char *name, long dflt)
{
    const char *s = getenv(name);
    return s && *s ? atol(s) : dflt;
}

START_TEST(every_round_trims_to_nothing)
{
    long rounds = env_long("XSEG_STRESS_ROUNDS", RUNNING_ON_VALGRIND || UNDER_TSAN ? 6 : 30);
    unsigned base = (unsigned)env_long("XSEG_STRESS_SEED", 19);
    int stuck = 0, ooms = 0;
    long ops = 0;
    char first[512] = "";
    xseg_t *xs = t_host(CONF);
    /* A process that has run a while: the epochs of the streams that get
     * uses are ahead of the others' (each free used on a stream records an
     * event there). */
    for (int i = 0; i < WARMUP; i++) {
        void *p;
        ck_assert_int_eq(xseg_alloc(xs, 1 * MiB, (void *)(uintptr_t)0x300, &p), XSEG_OK);
        ck_assert_int_eq(xseg_record_stream(xs, p, USED), XSEG_OK);
        ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    }
    for (long r = 0; r < rounds; r++) {
        int oom = 0;
        char msg[400] = "";
        size_t left = round_of(xs, base + (unsigned)r, &oom, msg, sizeof msg, &ops);
        if (left || oom) {
            stuck += left != 0;
            ooms += oom;
            if (!first[0])
                snprintf(first, sizeof first, "seed %u: %zu B mapped after trim(0)%s%s",
                         base + (unsigned)r, left, oom ? "; cap not allocatable: " : "", msg);
        }
    }
    xseg_destroy(xs);
    printf("stress_trim: %ld rounds, %ld operations, %d left memory mapped, %d could not "
           "allocate the cap\n", rounds, ops, stuck, ooms);
    ck_assert_msg(!stuck && !ooms, "%d of %ld rounds left memory mapped after trim(0) with "
                  "nothing allocated, %d could not allocate the cap; first: %s",
                  stuck, rounds, ooms, first);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("stress_trim");
    TCase *tc = tcase_create("rounds");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, every_round_trims_to_nothing);
    suite_add_tcase(s, tc);
    return t_run(s);
}
