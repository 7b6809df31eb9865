/* xseg-bench: CPU-side benchmark of the allocator's hot path (cached alloc +
 * free pairs), alone and with many threads, and of growth and release;
 * any backend (host where no GPU).  Prints a table or JSON. */
#define _GNU_SOURCE
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "xseg.h"

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

enum { BATCHES = 31, PAIRS = 20000 };

/* Median over batches of the mean ns per alloc+free pair. */
static double hot_pairs(xseg_t *xs, size_t size, void *stream, int batches, int pairs)
{
    double t[BATCHES];
    void *p;
    for (int i = 0; i < 100; i++) { /* warm: the block is cached afterwards */
        if (xseg_alloc(xs, size, stream, &p) != XSEG_OK)
            return -1;
        xseg_free(xs, p);
    }
    for (int b = 0; b < batches; b++) {
        double t0 = now_ns();
        for (int i = 0; i < pairs; i++) {
            xseg_alloc(xs, size, stream, &p);
            xseg_free(xs, p);
        }
        t[b] = (now_ns() - t0) / pairs;
    }
    qsort(t, (size_t)batches, sizeof t[0], cmp_double);
    return t[batches / 2];
}

typedef struct thread_arg {
    xseg_t *xs;
    size_t size;
    double ns;
    pthread_barrier_t *bar;
    int id;
    int own_stream; /* a token of its own (host backend) or the default stream */
} thread_arg;

static void *thread_main(void *v)
{
    thread_arg *a = v;
    pthread_barrier_wait(a->bar);
    void *stream = a->own_stream ? (void *)(uintptr_t)(a->id + 1) : NULL;
    a->ns = hot_pairs(a->xs, a->size, stream, 11, PAIRS / 4);
    return NULL;
}

/* Median ns per pair per thread, and aggregate pairs per second. */
static void hot_threads(xseg_t *xs, size_t size, int n, int own, double *ns, double *rate)
{
    pthread_t th[256];
    thread_arg a[256];
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)n);
    for (int i = 0; i < n; i++) {
        a[i] = (thread_arg){xs, size, 0, &bar, i, own};
        pthread_create(&th[i], NULL, thread_main, &a[i]);
    }
    double sum = 0, v[256];
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        v[i] = a[i].ns;
        sum += 1e9 / a[i].ns;
    }
    qsort(v, (size_t)n, sizeof v[0], cmp_double);
    *ns = v[n / 2];
    *rate = sum;
    pthread_barrier_destroy(&bar);
}

/* Time `count` fresh allocations of `size`, then the give-back: the frees
 * and xseg_trim_start(0) on this thread (the caller's part), then
 * xseg_trim(0), which waits for the worker to have released it all (the
 * whole give-back).  Without a worker, trim_start does it all. */
typedef struct growth_ms {
    double grow, giveback_caller, giveback_all;
} growth_ms;

static int growth(xseg_t *xs, size_t size, int count, growth_ms *ms)
{
    void **p = calloc((size_t)count, sizeof *p);
    double t0 = now_ns();
    for (int i = 0; i < count; i++)
        if (xseg_alloc(xs, size, NULL, &p[i]) != XSEG_OK) {
            fprintf(stderr, "xseg-bench: growth: %s\n", xseg_last_error());
            free(p);
            return -1;
        }
    double t1 = now_ns();
    for (int i = 0; i < count; i++)
        xseg_free(xs, p[i]);
    xseg_trim_start(xs, 0, NULL);
    double t2 = now_ns();
    xseg_trim(xs, 0, NULL);
    double t3 = now_ns();
    ms->grow = (t1 - t0) / 1e6;
    ms->giveback_caller = (t2 - t1) / 1e6;
    ms->giveback_all = (t3 - t1) / 1e6;
    free(p);
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: xseg-bench [--threads N] [--conf STR] [--json] [--skip-growth]\n"
            "Measures xseg's hot path (median ns per cached alloc+free pair of 512 B,\n"
            "1 MiB and 64 MiB, one thread, then N threads each on its own stream; on\n"
            "the cuda backend all on the default stream, since a stream there must be a\n"
            "real one: tools/gpu/bench_hot.c makes them) and\n"
            "growth/release (40 x 1 GiB and 10000 x 2 MiB fresh allocations, then the\n"
            "give-back: frees and xseg_trim_start on the caller, then xseg_trim until the\n"
            "memory is back; the caller's part is shown apart).  The backend comes from\n"
            "--conf or XSEG_CONF (auto: host where no GPU).  Example: xseg-bench --threads 16 --conf backend:host,host_capacity:64GB\n");
}

int main(int argc, char **argv)
{
    int threads = 16, json = 0, skip_growth = 0;
    const char *conf = NULL;
    static const struct option opts[] = {{"threads", 1, 0, 't'}, {"conf", 1, 0, 'c'},
                                         {"json", 0, 0, 'j'}, {"skip-growth", 0, 0, 's'},
                                         {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    for (int c; (c = getopt_long(argc, argv, "t:c:jsh", opts, NULL)) != -1;) {
        switch (c) {
        case 't': threads = atoi(optarg); break;
        case 'c': conf = optarg; break;
        case 'j': json = 1; break;
        case 's': skip_growth = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (threads < 1 || threads > 256) {
        fprintf(stderr, "xseg-bench: --threads must be 1..256\n");
        return 2;
    }
    xseg_t *xs;
    if (xseg_create(&xs, 0, conf) != XSEG_OK) {
        fprintf(stderr, "xseg-bench: %s\n", xseg_last_error());
        return 1;
    }
    static const size_t sizes[3] = {512, 1 << 20, 64 << 20};
    static const char *const names[3] = {"512B", "1MiB", "64MiB"};
    double one[3], many[3], rate[3];
    /* Stream tokens stand for streams on the host backend only: the cuda
     * backend records events on them (a made-up one crashed the driver). */
    int own = strcmp(xseg_backend_name(xs), "host") == 0;
    for (int i = 0; i < 3; i++) {
        one[i] = hot_pairs(xs, sizes[i], NULL, BATCHES, PAIRS);
        hot_threads(xs, sizes[i], threads, own, &many[i], &rate[i]);
    }
    xseg_trim(xs, 0, NULL);
    growth_ms g1 = {0}, g2 = {0};
    if (!skip_growth && (growth(xs, (size_t)1 << 30, 40, &g1) ||
                         growth(xs, (size_t)2 << 20, 10000, &g2)))
        return 1;
    if (json) {
        printf("{\"backend\":\"%s\",\"threads\":%d,\"streams\":\"%s\",\"hot\":[",
               xseg_backend_name(xs), threads, own ? "own" : "default");
        for (int i = 0; i < 3; i++)
            printf("%s{\"size\":%zu,\"ns_per_pair_1t\":%.1f,\"ns_per_pair_per_thread\":%.1f,"
                   "\"pairs_per_s_aggregate\":%.0f}", i ? "," : "", sizes[i], one[i], many[i],
                   rate[i]);
        printf("],\"growth\":{\"gib40_ms\":%.2f,\"gib40_release_ms\":%.2f,"
               "\"gib40_giveback_caller_ms\":%.2f,\"mib2x10000_ms\":%.2f,"
               "\"mib2x10000_release_ms\":%.2f,\"mib2x10000_giveback_caller_ms\":%.2f}}\n",
               g1.grow, g1.giveback_all, g1.giveback_caller, g2.grow, g2.giveback_all,
               g2.giveback_caller);
    } else {
        printf("backend %s, %d threads, %s\n", xseg_backend_name(xs), threads,
               own ? "each on its own stream" : "all on the default stream");
        printf("%-6s %14s %22s %22s\n", "size", "1 thread ns", "per-thread ns (N thr)",
               "aggregate pairs/s");
        for (int i = 0; i < 3; i++)
            printf("%-6s %14.1f %22.1f %22.0f\n", names[i], one[i], many[i], rate[i]);
        if (!skip_growth)
            printf("growth: 40 x 1 GiB %.2f ms, give-back %.2f ms (caller %.2f); 10000 x 2 MiB "
                   "%.2f ms, give-back %.2f ms (caller %.2f)\n", g1.grow, g1.giveback_all,
                   g1.giveback_caller, g2.grow, g2.giveback_all, g2.giveback_caller);
    }
    xseg_destroy(xs);
    return 0;
}
