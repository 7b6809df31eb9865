/* main.c: xseg-monbench: what monitoring costs on the hot path.  Times
 * alloc+free pairs (512 B: the size-class path; 1 MiB: the block path) on
 * allocators that differ only in the monitoring keys (stats_shm off / on,
 * history on, and stats_shm with another process's-worth of reader polling
 * the record without pause), interleaving them round by round so that drift
 * hits every configuration alike; prints the median ns per pair. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "shm_format.h"
#include "xseg.h"

#define NCONF 5

/* stats_shm and history turn the thread caches off (every call must go
 * through the allocator), so "thread_cache:off" is the baseline that shows
 * what publishing itself costs. */
static const char *const conf_name[NCONF] = {"off", "off, thread_cache:off", "stats_shm:on",
                                             "history:10000", "stats_shm:on + busy reader"};
static const char *const conf_text[NCONF] = {"", ",thread_cache:off", ",stats_shm:on",
                                             ",history:10000", ",stats_shm:on"};

static atomic_int g_stop;

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* ns per alloc+free pair over `pairs` pairs (each pair frees at once). */
static double time_pairs(xseg_t *xs, size_t size, long pairs)
{
    void *p;
    double t0 = now_ns();
    for (long i = 0; i < pairs; i++) {
        if (xseg_alloc(xs, size, NULL, &p) != XSEG_OK || xseg_free(xs, p) != XSEG_OK) {
            fprintf(stderr, "xseg-monbench: %s\n", xseg_last_error());
            exit(1);
        }
    }
    return (now_ns() - t0) / (double)pairs;
}

/* A reader copying every used record of this process's file without pause:
 * the worst case for the writer's cache lines. */
static void *reader(void *arg)
{
    const char *path = arg;
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fclose(f);
    int fd = open(path, 0);
    void *base = mmap(NULL, XSEG_SHM_FILE_SIZE, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED)
        return NULL;
    const xseg_shm_header *h = base;
    uint64_t v[XSF_COUNT];
    unsigned long reads = 0;
    while (!atomic_load(&g_stop))
        for (uint32_t i = 0; i < h->nslots && i < 4; i++)
            reads += xseg_shm_read(xseg_shm_slot(base, h, i), v, 100) == 1;
    munmap(base, XSEG_SHM_FILE_SIZE);
    return (void *)reads;
}

static void bench_size(size_t size, int rounds, long pairs)
{
    xseg_t *xs[NCONF];
    double t[NCONF][rounds];
    char conf[256], path[512];
    for (int c = 0; c < NCONF; c++) {
        snprintf(conf, sizeof conf, "backend:host%s", conf_text[c]);
        if (xseg_create(&xs[c], 0, conf) != XSEG_OK) {
            fprintf(stderr, "xseg-monbench: %s\n", xseg_last_error());
            exit(1);
        }
        time_pairs(xs[c], size, pairs); /* warm up: map the memory once */
    }
    const char *dir = getenv(XSEG_SHM_DIR_ENV);
    snprintf(path, sizeof path, "%s/" XSEG_SHM_PREFIX "%d", dir && *dir ? dir : XSEG_SHM_DEFAULT_DIR,
             (int)getpid());
    for (int r = 0; r < rounds; r++)
        for (int c = 0; c < NCONF; c++) {
            pthread_t th;
            int busy = c == NCONF - 1;
            atomic_store(&g_stop, 0);
            if (busy)
                pthread_create(&th, NULL, reader, path);
            t[c][r] = time_pairs(xs[c], size, pairs);
            atomic_store(&g_stop, 1);
            if (busy)
                pthread_join(th, NULL);
        }
    for (int c = 0; c < NCONF; c++) {
        qsort(t[c], (size_t)rounds, sizeof(double), cmp);
        printf("| %7zu B | %-28s | %8.1f | %8.1f | %+7.1f |\n", size, conf_name[c],
               t[c][rounds / 2], t[c][rounds / 10], t[c][rounds / 2] - t[0][rounds / 2]);
        xseg_destroy(xs[c]);
    }
}

static const char k_help[] =
    "usage: xseg-monbench [ROUNDS (>=3, default 31)] [PAIRS per round (default 20000)]\n"
    "\n"
    "What monitoring costs on the hot path: times alloc+free pairs (512 B, the\n"
    "size-class path; 1 MiB, the block path) on host-backend allocators that\n"
    "differ only in the monitoring keys (off; off without thread caches;\n"
    "stats_shm:on; history:10000; stats_shm:on with a reader polling the\n"
    "record without pause), interleaved round by round,\n"
    "and prints the median and p10 ns per pair and the difference to 'off'\n"
    "(docs/monitoring.md, \"Cost on the hot path\").\n";

int main(int argc, char **argv)
{
    if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        fputs(k_help, stdout);
        return 0;
    }
    int rounds = argc > 1 ? atoi(argv[1]) : 31;
    long pairs = argc > 2 ? atol(argv[2]) : 20000;
    if (rounds < 3 || pairs < 1) {
        fputs(k_help, stderr);
        return 2;
    }
    printf("alloc+free pairs on the host backend: %d rounds of %ld pairs, ns per pair\n\n",
           rounds, pairs);
    printf("| size      | monitoring                   |   median |      p10 | vs off  |\n");
    printf("|-----------|------------------------------|----------|----------|---------|\n");
    bench_size(512, rounds, pairs);
    bench_size((size_t)1 << 20, rounds, pairs);
    return 0;
}
