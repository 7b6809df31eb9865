/* test_stress_threads.c: many threads on one allocator for a bounded time
 * (XSEG_STRESS_SECONDS, default 2; XSEG_STRESS_THREADS, default 8): random
 * alloc, free (often of another thread's block), record_stream, trim,
 * stats, JSON renderings and block_size, while a "GPU" thread holds and
 * releases streams so that frees wait on events.  Every block carries a
 * pattern written by its allocating thread and checked by whichever thread
 * frees it.  Invariants are checked on the way; at the end everything is
 * freed, trimmed and destroyed back to the driver's baseline.  Three
 * phases: a capped conf with GC and history, the defaults, and the reclaim
 * worker under the cap.  Meant to run
 * under ThreadSanitizer too (tools/ci/tsan-stress).  Prints its figures. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "driver_host.h"
#include "internal.h"
#include "support_common.h"

#define SLOTS 512
#define STREAMS 4

enum { OP_ALLOC, OP_FREE, OP_RECORD, OP_TRIM, OP_STATS, OP_JSON, OP_SIZE, OP_OOM, OP_N };
static const char *const op_names[OP_N] = {"alloc", "free", "record_stream", "trim", "stats",
                                           "json", "block_size", "oom"};

typedef struct entry {
    void *p;
    size_t n;
    uint32_t seed;
} entry;

typedef struct shared {
    xseg_t *xs;
    _Atomic(entry *) slot[SLOTS];
    atomic_int stop;
    atomic_long bad;
    size_t cap;            /* max_mapped in force, 0: none */
    char first_bad[256];
    pthread_mutex_t bad_lock;
} shared;

typedef struct worker {
    shared *sh;
    unsigned seed;
    int id;
    long ops[OP_N];
} worker;

static void bad(shared *sh, const char *what)
{
    pthread_mutex_lock(&sh->bad_lock);
    if (!sh->first_bad[0])
        snprintf(sh->first_bad, sizeof sh->first_bad, "%s (%s)", what, xseg_last_error());
    pthread_mutex_unlock(&sh->bad_lock);
    atomic_fetch_add(&sh->bad, 1);
}

/* The allocator's invariants after an operation (when checking is on). */
static void verify(shared *sh)
{
    if (*t_check_failed(sh->xs))
        bad(sh, "xseg_check");
}

static size_t pick_size(unsigned *seed)
{
    unsigned r = (unsigned)rand_r(seed);
    switch (r % 5) {
    case 0: return 1 + r % 2048;
    case 1: return 1 + r % (64 << 10);
    case 2: return 1 + r % (1 << 20);
    case 3: return 1 + r % (4 * MiB);
    default: return (1 + r % 4) * 2 * MiB + r % 4096;
    }
}

static void *stream_of(unsigned r)
{
    return (void *)(uintptr_t)(r % (STREAMS + 1)); /* NULL is one of them */
}

static void release_entry(worker *w, entry *e)
{
    if (!t_check(e->p, e->n, e->seed))
        bad(w->sh, "pattern changed under a live block");
    if (xseg_free(w->sh->xs, e->p) != XSEG_OK)
        bad(w->sh, "free of a live block failed");
    free(e);
    w->ops[OP_FREE]++;
}

static void do_alloc(worker *w, int i)
{
    entry *e = malloc(sizeof *e);
    e->n = pick_size(&w->seed);
    e->seed = (uint32_t)rand_r(&w->seed);
    xseg_status st = xseg_alloc(w->sh->xs, e->n, stream_of((unsigned)rand_r(&w->seed)), &e->p);
    if (st != XSEG_OK) {
        if (st != XSEG_ERR_OOM)
            bad(w->sh, "alloc failed other than by OOM");
        w->ops[OP_OOM]++;
        free(e);
        return;
    }
    t_fill(e->p, e->n, e->seed);
    w->ops[OP_ALLOC]++;
    entry *old = atomic_exchange(&w->sh->slot[i], e);
    if (old) /* another thread filled it meanwhile */
        release_entry(w, old);
}

static void do_slot(worker *w)
{
    int i = rand_r(&w->seed) % SLOTS;
    entry *e = atomic_exchange(&w->sh->slot[i], NULL);
    if (!e) {
        do_alloc(w, i);
        return;
    }
    if (rand_r(&w->seed) % 4 == 0) {
        if (xseg_record_stream(w->sh->xs, e->p, stream_of((unsigned)rand_r(&w->seed))) != XSEG_OK)
            bad(w->sh, "record_stream of a live block failed");
        w->ops[OP_RECORD]++;
    }
    if (rand_r(&w->seed) % 8 == 0) {
        size_t r = 0, q = 0;
        if (xseg_block_size(w->sh->xs, e->p, &r, &q) != XSEG_OK || q != e->n || r < q)
            bad(w->sh, "block_size of a live block is wrong");
        w->ops[OP_SIZE]++;
    }
    release_entry(w, e);
}

static void check_stats(worker *w)
{
    xseg_stats s = {.size = sizeof s};
    if (xseg_get_stats(w->sh->xs, &s) != XSEG_OK)
        bad(w->sh, "get_stats failed");
    else if (s.allocated_bytes.current > s.mapped_bytes.current)
        bad(w->sh, "more bytes allocated than mapped");
    else if (w->sh->cap && s.mapped_bytes.current > w->sh->cap)
        bad(w->sh, "mapped bytes over the cap");
    w->ops[OP_STATS]++;
}

static void do_misc(worker *w)
{
    unsigned r = (unsigned)rand_r(&w->seed) % 16;
    char buf[512];
    size_t len;
    if (r == 0) {
        if (xseg_trim(w->sh->xs, (size_t)(rand_r(&w->seed) % 64) * MiB, NULL) != XSEG_OK)
            bad(w->sh, "trim failed");
        w->ops[OP_TRIM]++;
    } else if (r < 4) {
        xseg_status st = r == 1 ? xseg_stats_json(w->sh->xs, buf, sizeof buf, &len)
                       : r == 2 ? xseg_snapshot_json(w->sh->xs, buf, sizeof buf, &len)
                                : xseg_history_json(w->sh->xs, buf, sizeof buf, &len);
        if (st != XSEG_OK && st != XSEG_ERR_BUFFER_TOO_SMALL && st != XSEG_ERR_INVALID_ARG)
            bad(w->sh, "a JSON rendering failed");
        w->ops[OP_JSON]++;
    } else {
        check_stats(w);
    }
}

static void *work(void *arg)
{
    worker *w = arg;
    while (!atomic_load_explicit(&w->sh->stop, memory_order_relaxed)) {
        for (int k = 0; k < 64; k++) {
            do_slot(w);
            verify(w->sh);
        }
        do_misc(w);
        verify(w->sh);
    }
    return NULL;
}

/* The "GPU": streams stay busy (events pending) for a while, then finish. */
static void *gpu(void *arg)
{
    shared *sh = arg;
    unsigned seed = 7;
    void *ctx = t_host_ctx(sh->xs);
    while (!atomic_load(&sh->stop)) {
        xseg_host_hold_stream(ctx, stream_of((unsigned)rand_r(&seed)), rand_r(&seed) % 2);
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    for (unsigned s = 0; s <= STREAMS; s++)
        xseg_host_hold_stream(ctx, stream_of(s), 0);
    return NULL;
}

static long env_long(const char *name, long dflt)
{
    const char *s = getenv(name);
    return s && *s ? atol(s) : dflt;
}

static void run_phase(const char *conf, size_t cap, double seconds, int nthreads, long *total)
{
    shared *sh = calloc(1, sizeof *sh);
    sh->xs = t_host(conf);
    sh->cap = cap;
    pthread_mutex_init(&sh->bad_lock, NULL);
    worker *w = calloc((size_t)nthreads, sizeof *w);
    pthread_t *th = calloc((size_t)nthreads + 1, sizeof *th);
    for (int i = 0; i < nthreads; i++) {
        w[i] = (worker){.sh = sh, .seed = 1000u + (unsigned)i, .id = i};
        pthread_create(&th[i], NULL, work, &w[i]);
    }
    pthread_create(&th[nthreads], NULL, gpu, sh);
    struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    nanosleep(&ts, NULL);
    atomic_store(&sh->stop, 1);
    for (int i = 0; i <= nthreads; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < SLOTS; i++)
        if (sh->slot[i])
            release_entry(&w[0], sh->slot[i]);
    for (int i = 0; i < nthreads; i++)
        for (int k = 0; k < OP_N; k++)
            total[k] += w[i].ops[k];
    ck_assert_msg(atomic_load(&sh->bad) == 0, "conf \"%s\": %ld bad results; first: %s", conf,
                  atomic_load(&sh->bad), sh->first_bad);
    xseg_stats s = t_stats(sh->xs);
    ck_assert_uint_eq(s.active_blocks.current, 0);
    ck_assert_uint_eq(s.allocated_bytes.current, 0);
    T_CHECK(sh->xs);
    ck_assert_int_eq(xseg_trim(sh->xs, 0, NULL), XSEG_OK);
    T_CHECK(sh->xs);
    ck_assert_uint_eq(t_stats(sh->xs).mapped_bytes.current, 0);
    if (strstr(conf, "reclaim:worker"))
        ck_assert_msg(sh->xs->wk_jobs > 0, "conf \"%s\": the worker ran no job", conf);
    ck_assert_int_eq(xseg_destroy(sh->xs), XSEG_OK);
    free(th);
    free(w);
    free(sh);
}

START_TEST(threads_for_a_bounded_time)
{
    double seconds = (double)env_long("XSEG_STRESS_SECONDS", 2);
    int nthreads = (int)env_long("XSEG_STRESS_THREADS", 8);
    long total[OP_N] = {0}, all = 0;
    xseg_host_counts base, end;
    xseg_host_counts_global(&base);
    run_phase("max_mapped:768MB,gc_threshold:0.6,history:256", 768 * MiB, seconds / 3,
              nthreads, total);
    run_phase("", 0, seconds / 3, nthreads, total);
    /* The reclaim worker (the GPU's default) under the cap: moves queue
     * unmaps, trims drain its queue while growths take unmaps off it, the
     * out-of-memory ladder waits for it (a trim once waited for good: a
     * lost wake-up, docs/design.md). */
    run_phase("reclaim:worker,max_mapped:768MB,gc_threshold:0.6", 768 * MiB, seconds / 3,
              nthreads, total);
    xseg_host_counts_global(&end);
    ck_assert(memcmp(&base, &end, sizeof base) == 0);
    char line[512];
    int pos = 0;
    for (int k = 0; k < OP_N; k++) {
        all += k == OP_OOM ? 0 : total[k];
        pos += snprintf(line + pos, sizeof line - (size_t)pos, " %s %ld", op_names[k], total[k]);
    }
    printf("stress: %d threads + 1 stream-holding thread, %.0f s, %ld operations:%s; "
           "patterns verified, no corruption\n", nthreads, seconds, all, line);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("stress_threads");
    TCase *tc = tcase_create("threads");
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, threads_for_a_bounded_time);
    suite_add_tcase(s, tc);
    return t_run(s);
}
