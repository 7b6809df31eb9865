/* bench_growth.c: growth and release: COUNT fresh allocations of SIZE
 * (the allocator holds nothing cached), then freeing them all and giving
 * the memory back to the device (the contender's release: trim,
 * emptyCache, pool trim).  Each phase ends with a synchronisation and is
 * timed whole; cuMemGetInfo before, in between and after shows that the
 * memory was really taken and really returned.  REPS repetitions; the
 * median and the first (coldest) are reported.  --case NAME runs one case
 * alone: its first repetition is then a fresh allocator's. */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define REPS 3
#define GIB ((size_t)1 << 30)
#define MIB ((size_t)1 << 20)

typedef struct growth_case {
    const char *name;
    size_t size;
    int count;
} growth_case;

static const growth_case k_cases[] = {
    {"1GiBx40", GIB, 40},
    {"2MiBx10000", 2 * MIB, 10000},
};

/* One repetition's measurements. */
typedef struct growth_rep {
    double alloc_s, free_s, release_s;
    double taken, left; /* bytes: device drop after the allocations, after release */
} growth_rep;

static void free_all(const bench_alloc *a, void **p, int n, size_t size, bench_stream s)
{
    for (int i = 0; i < n; i++)
        a->free(p[i], size, s);
}

static int growth_once(const bench_alloc *a, const growth_case *c, void **p, bench_stream s,
                       growth_rep *r)
{
    double t0, t1, t2, t3;
    size_t base;

    bench_sync();
    base = bench_dev_free();
    t0 = bench_now();
    for (int i = 0; i < c->count; i++) {
        if ((p[i] = a->alloc(c->size, s)) == NULL) {
            bench_log("%s: growth %s failed at %d: %s", a->name, c->name, i, a->last_error());
            free_all(a, p, i, c->size, s);
            (void)a->release();
            return -1;
        }
    }
    bench_stream_sync(s);
    t1 = bench_now();
    r->taken = (double)base - (double)bench_dev_free();
    t2 = bench_now();
    free_all(a, p, c->count, c->size, s);
    bench_stream_sync(s);
    t3 = bench_now();
    if (a->release() != 0)
        bench_log("%s: release failed: %s", a->name, a->last_error());
    bench_sync();
    r->release_s = bench_now() - t3;
    r->alloc_s = t1 - t0;
    r->free_s = t3 - t2;
    r->left = (double)base - (double)bench_dev_free();
    return 0;
}

static double med_of(const growth_rep *r, size_t off)
{
    double v[REPS];

    for (int i = 0; i < REPS; i++)
        v[i] = *(const double *)((const char *)&r[i] + off);
    return bench_median(v, REPS);
}

static void growth_report(const bench_alloc *a, const growth_case *c, const growth_rep *r,
                          const char *drv)
{
    double gib = (double)c->size * c->count / (double)GIB;
    double al = med_of(r, offsetof(growth_rep, alloc_s));
    double fr = med_of(r, offsetof(growth_rep, free_s));
    double re = med_of(r, offsetof(growth_rep, release_s));
    double left = 0;

    for (int i = 0; i < REPS; i++)
        left = r[i].left > left ? r[i].left : left;
    bench_emit(a, "growth", "\"case\":\"%s\",\"size\":%zu,\"count\":%d,\"gib\":%.3f,"
               "\"alloc_ms\":%.3f,\"free_ms\":%.3f,\"release_ms\":%.3f,\"giveback_ms\":%.3f,"
               "\"alloc_gib_s\":%.1f,\"giveback_gib_s\":%.1f,\"first_alloc_ms\":%.3f,"
               "\"first_giveback_ms\":%.3f,\"taken_gib\":%.3f,\"left_after_release_mib\":%.1f%s",
               c->name, c->size, c->count, gib, al * 1e3, fr * 1e3, re * 1e3, (fr + re) * 1e3,
               gib / al, gib / (fr + re), r[0].alloc_s * 1e3,
               (r[0].free_s + r[0].release_s) * 1e3, r[0].taken / (double)GIB,
               left / (double)MIB, drv);
}

int bench_growth(const bench_alloc *a, const bench_opts *o)
{
    bench_stream s = bench_stream_new();
    int rc = 0;

    for (size_t k = 0; k < sizeof k_cases / sizeof k_cases[0]; k++) {
        const growth_case *c = &k_cases[k];
        if (o->gcase && strcmp(o->gcase, c->name) != 0)
            continue; /* --case: this one alone, on an allocator that saw no other */
        void **p = calloc((size_t)c->count, sizeof *p);
        growth_rep r[REPS];
        uint64_t since[BENCH_MAX_OPS] = {0};
        char drv[1024] = "";
        int ok = p != NULL;

        bench_drv_delta(a, since, drv, sizeof drv);
        for (int i = 0; ok && i < REPS; i++) {
            ok = growth_once(a, c, p, s, &r[i]) == 0;
            if (i == 0) /* driver calls of the first grow + give back */
                bench_drv_delta(a, since, drv, sizeof drv);
        }
        if (ok)
            growth_report(a, c, r, drv);
        rc |= ok ? 0 : -1;
        free(p);
    }
    bench_stream_free(a, s);
    return rc;
}
