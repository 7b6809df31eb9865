/* bench_hot.c: the hot path: cached alloc + free pairs of one size on one
 * stream, timed with the monotonic clock; one thread, then N threads each
 * on its own stream.  Per size: warm-up, a calibration that sizes a batch
 * to about 20 ms, then BATCHES batches; the result is the median batch's
 * ns per pair (per thread), and for the threaded part also the aggregate
 * pairs per second (all threads' pairs over the batch's wall time).  The
 * threads warm up too before they calibrate, so that no thread's first
 * allocation (64 MiB: pages mapped under the allocator's lock) sizes the
 * batches.  (The low 64 MiB aggregate that this was first blamed for was
 * xseg's: threads flushing each other's caches, fixed 2026-12-07;
 * docs/benchmarks.md, "Twentieth session".) */
#include <pthread.h>
#include <stdlib.h>

#include "bench.h"

#define BATCHES 15
#define BATCH_S 0.02
#define MAX_THREADS 64

static const size_t k_sizes[] = {512, (size_t)1 << 20, (size_t)64 << 20};

/* Seconds for `pairs` pairs, or -1 when an allocation failed. */
static double run_pairs(const bench_alloc *a, size_t n, bench_stream s, long pairs)
{
    double t0 = bench_now();

    for (long i = 0; i < pairs; i++) {
        void *p = a->alloc(n, s);

        if (p == NULL)
            return -1;
        a->free(p, n, s);
    }
    return bench_now() - t0;
}

static long batch_pairs(double per_pair)
{
    double n = per_pair > 0 ? BATCH_S / per_pair : 200000;

    return n < 10 ? 10 : n > 200000 ? 200000 : (long)n;
}

/* ---- one thread ---- */

static int hot_single(const bench_alloc *a, size_t n, bench_stream s)
{
    double v[BATCHES], t, med;
    long pairs;

    if (run_pairs(a, n, s, 50) < 0 || (t = run_pairs(a, n, s, 50)) < 0) {
        bench_log("%s: hot %zu B failed: %s", a->name, n, a->last_error());
        return -1;
    }
    pairs = batch_pairs(t / 50);
    for (int b = 0; b < BATCHES; b++) {
        if ((t = run_pairs(a, n, s, pairs)) < 0)
            return -1;
        v[b] = t / (double)pairs * 1e9;
    }
    med = bench_median(v, BATCHES); /* sorts v */
    bench_emit(a, "hot", "\"size\":%zu,\"threads\":1,\"pairs_per_batch\":%ld,"
               "\"ns_per_pair\":%.1f,\"ns_min\":%.1f,\"pairs_per_s\":%.0f", n, pairs, med,
               v[0], 1e9 / med);
    return 0;
}

/* ---- N threads, each on its own stream ---- */

typedef struct hot_shared {
    const bench_alloc *a;
    size_t n;
    long pairs;
    int nthreads;
    bench_stream *streams; /* one per thread, alive until the memory is released */
    pthread_barrier_t start, done;
    double secs[BATCHES + 1][MAX_THREADS]; /* row 0: calibration */
    int failed;
} hot_shared;

typedef struct hot_thread {
    hot_shared *sh;
    int id;
} hot_thread;

static void *hot_worker(void *arg)
{
    hot_thread *th = arg;
    hot_shared *sh = th->sh;
    bench_stream s = sh->streams[th->id];

    for (int b = -1; b <= BATCHES; b++) { /* -1: warm-up, 0: calibration */
        pthread_barrier_wait(&sh->start);
        long pairs = b <= 0 ? 50 : sh->pairs;
        double t = s != NULL ? run_pairs(sh->a, sh->n, s, pairs) : -1;
        if (t < 0)
            sh->failed = 1;
        if (b >= 0)
            sh->secs[b][th->id] = t / (double)pairs;
        pthread_barrier_wait(&sh->done);
    }
    return NULL;
}

/* Runs on the main thread between the workers' barriers. */
static void hot_drive(hot_shared *sh, double *wall)
{
    for (int b = -1; b <= BATCHES; b++) {
        pthread_barrier_wait(&sh->start);
        double t0 = bench_now();
        pthread_barrier_wait(&sh->done);
        if (b < 0)
            continue; /* the warm-up: first touches, not timed */
        wall[b] = bench_now() - t0;
        if (b == 0) { /* calibrate on the slowest thread */
            double worst = 0;
            for (int i = 0; i < sh->nthreads; i++)
                worst = sh->secs[0][i] > worst ? sh->secs[0][i] : worst;
            sh->pairs = batch_pairs(worst);
        }
    }
}

static void hot_report(const bench_alloc *a, hot_shared *sh, double *wall, const char *drv)
{
    double per[BATCHES * MAX_THREADS], agg[BATCHES];
    size_t k = 0;

    for (int b = 1; b <= BATCHES; b++) {
        for (int i = 0; i < sh->nthreads; i++)
            per[k++] = sh->secs[b][i] * 1e9;
        agg[b - 1] = (double)sh->pairs * sh->nthreads / wall[b];
    }
    bench_emit(a, "hot", "\"size\":%zu,\"threads\":%d,\"pairs_per_batch\":%ld,"
               "\"ns_per_pair\":%.1f,\"pairs_per_s\":%.0f%s", sh->n, sh->nthreads, sh->pairs,
               bench_median(per, k), bench_median(agg, BATCHES), drv);
}

static int hot_threads(const bench_alloc *a, size_t n, int nthreads, bench_stream *streams)
{
    static hot_shared sh;
    pthread_t tid[MAX_THREADS];
    hot_thread th[MAX_THREADS];
    double wall[BATCHES + 1];
    uint64_t since[BENCH_MAX_OPS] = {0};
    char drv[1024];

    sh.a = a;
    sh.n = n;
    sh.nthreads = nthreads;
    sh.streams = streams;
    sh.failed = 0;
    pthread_barrier_init(&sh.start, NULL, (unsigned)nthreads + 1);
    pthread_barrier_init(&sh.done, NULL, (unsigned)nthreads + 1);
    for (int i = 0; i < nthreads; i++) {
        th[i].sh = &sh;
        th[i].id = i;
        pthread_create(&tid[i], NULL, hot_worker, &th[i]);
    }
    bench_drv_delta(a, since, drv, sizeof drv);
    hot_drive(&sh, wall);
    for (int i = 0; i < nthreads; i++)
        pthread_join(tid[i], NULL);
    bench_drv_delta(a, since, drv, sizeof drv); /* driver calls of this size's run */
    pthread_barrier_destroy(&sh.start);
    pthread_barrier_destroy(&sh.done);
    if (sh.failed) {
        bench_log("%s: hot %zu B x %d threads failed: %s", a->name, n, nthreads,
                  a->last_error());
        return -1;
    }
    hot_report(a, &sh, wall, drv);
    return 0;
}

/* The streams outlive every block cached for them: they are destroyed only
 * after the contender has given its memory back (an allocator may still
 * touch the stream of a cached block, e.g. to record an event). */
int bench_hot(const bench_alloc *a, const bench_opts *o)
{
    int nt = o->threads < 1 ? 16 : o->threads > MAX_THREADS ? MAX_THREADS : o->threads;
    bench_stream s[MAX_THREADS + 1] = {0};
    int rc = 0;

    for (int i = 0; i <= nt; i++)
        if ((s[i] = bench_stream_new()) == NULL) {
            bench_log("stream creation failed: %s", bench_cuda_error());
            return -1;
        }
    for (size_t i = 0; o->threads_only == 0 && i < sizeof k_sizes / sizeof k_sizes[0]; i++)
        rc |= hot_single(a, k_sizes[i], s[nt]);
    for (size_t i = 0; i < sizeof k_sizes / sizeof k_sizes[0]; i++)
        rc |= hot_threads(a, k_sizes[i], nt, s);
    (void)a->release();
    bench_sync();
    for (int i = 0; i <= nt; i++)
        bench_stream_free(a, s[i]);
    return rc;
}
