/* bench_main.c: the GPU allocator benchmark's command line:
 *     bench --alloc xseg|async|torch|torch-exp|cudamalloc|xseg-keep
 *           --test env|hot|growth|replay|diag-stream [--trace FILE]
 *           [--threads N] [--threads-only] [--budget SECONDS] [--sample-in-timed]
 *           [--case NAME]  (growth: one case alone, 1GiBx40 or 2MiBx10000)
 * One contender and one test per process, so that every contender starts
 * from a fresh device context and reads its own baseline.  Results go to
 * stdout as JSON lines, messages to stderr.  Exit status 0, 1 (the test
 * failed) or 2 (usage, or the contender could not start). */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static const bench_alloc *const k_allocs[] = {
    &bench_xseg, &bench_async, &bench_torch, &bench_torch_exp, &bench_cudamalloc,
    &bench_xseg_keep,
};

static const bench_alloc *find_alloc(const char *name)
{
    for (size_t i = 0; i < sizeof k_allocs / sizeof k_allocs[0]; i++)
        if (strcmp(k_allocs[i]->name, name) == 0)
            return k_allocs[i];
    return NULL;
}

static int usage(void)
{
    fprintf(stderr, "usage: bench --alloc xseg|async|torch|torch-exp|cudamalloc|xseg-keep "
                    "--test env|hot|growth|replay|diag-stream [--trace FILE] [--threads N] "
                    "[--threads-only] [--budget SECONDS] [--sample-in-timed]\n"
                    "             [--case 1GiBx40|2MiBx10000]\n");
    return 2;
}

static int parse(int argc, char **argv, const char **alloc, const char **test, bench_opts *o)
{
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

        if (strcmp(k, "--sample-in-timed") == 0 || strcmp(k, "--threads-only") == 0) {
            *(k[2] == 's' ? &o->sample_in_timed : &o->threads_only) = 1;
            continue;
        }
        if (v == NULL)
            return -1;
        i++;
        if (strcmp(k, "--alloc") == 0)
            *alloc = v;
        else if (strcmp(k, "--test") == 0)
            *test = v;
        else if (strcmp(k, "--trace") == 0)
            o->trace = v;
        else if (strcmp(k, "--threads") == 0)
            o->threads = atoi(v);
        else if (strcmp(k, "--budget") == 0)
            o->budget_s = atof(v);
        else if (strcmp(k, "--case") == 0)
            o->gcase = v;
        else
            return -1;
    }
    return *test != NULL ? 0 : -1;
}

static int run_test(const bench_alloc *a, const char *test, const bench_opts *o)
{
    if (strcmp(test, "hot") == 0)
        return bench_hot(a, o);
    if (strcmp(test, "growth") == 0)
        return bench_growth(a, o);
    if (strcmp(test, "replay") == 0)
        return bench_replay(a, o);
    if (strcmp(test, "diag-stream") == 0)
        return bench_diag_stream(a, o);
    return -2;
}

int main(int argc, char **argv)
{
    const char *alloc = "xseg", *test = NULL;
    bench_opts o = {NULL, 0, 0, 16, 0, NULL};
    const bench_alloc *a;
    char err[512] = "";
    int rc;

    if (parse(argc, argv, &alloc, &test, &o) != 0 || (a = find_alloc(alloc)) == NULL)
        return usage();
    if (cudaSetDevice(0) != cudaSuccess || cudaFree(0) != cudaSuccess) {
        fprintf(stderr, "bench: no CUDA device: %s\n", bench_cuda_error());
        return 2;
    }
    if (strcmp(test, "env") == 0) {
        bench_env();
        return 0;
    }
    if (a->init(err, sizeof err) != 0) {
        fprintf(stderr, "bench: %s could not start: %s\n", a->name, err);
        printf("{\"alloc\":\"%s\",\"test\":\"%s\",\"error\":\"could not start\"}\n", a->name,
               test);
        return 2;
    }
    rc = run_test(a, test, &o);
    if (rc == -2)
        return usage();
    return rc == 0 ? 0 : 1;
}
