/* two_models.c: a server that holds two models on one GPU and swaps them
 * by sleep and wake (docs/sleep.md), written against include/xseg.h only.
 *
 * Each "model" is a set of weight blocks under a tag of its own
 * ("model_a", "model_b"); a request's KV cache is allocated under "kv".
 * Only one model is awake at a time: a swap puts the active model to sleep
 * in backup mode (its contents go to pinned host memory, its device memory
 * goes back to the driver, its addresses stay reserved), discards the KV
 * cache, and wakes the other model at the same addresses.  Requests
 * alternate between the models, so every request but the first swaps.
 *
 * Checked on every swap (exit 1 at the first failure, with the library's
 * message): the sleeping model maps nothing and the allocator's mapped
 * bytes drop by at least its size; an allocation in the sleeping tag fails
 * with XSEG_ERR_ASLEEP; after wake, every weight pointer is still a block
 * of its tag and, on the host backend, holds the bytes written at load.
 *
 *   two_models [--requests N] [--blocks N] [--block-mib N] [--conf CONF]
 * Without --conf the allocator reads XSEG_CONF; XSEG_CONF=backend:host runs
 * it without a GPU (ctest example_two_models does). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "xseg.h"

#define MAX_BLOCKS 64
#define MiB ((size_t)1 << 20)

typedef struct model {
    const char *name;
    int tag;
    int nblocks;
    size_t block;
    void *w[MAX_BLOCKS];
    uint64_t seed;
} model;

static int g_host; /* device memory is host memory: contents can be checked */

static int fail(const char *what)
{
    fprintf(stderr, "two_models: %s: %s\n", what, xseg_last_error());
    return 1;
}

#define CALL(expr, what)                                                                          \
    do {                                                                                          \
        if ((expr) != XSEG_OK)                                                                    \
            return fail(what);                                                                    \
    } while (0)

static double ms_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) * 1e3 + (double)(t.tv_nsec - t0->tv_nsec) / 1e6;
}

/* ---- contents: HOST BACKEND ONLY ----
 * On the host backend device memory is ordinary host memory, so the weights
 * are written and read through the pointer.  On a GPU (cuda backend) a
 * server would cudaMemcpy or launch kernels here; the example then skips
 * the content checks (it does not link the CUDA runtime). */
static void fill(void *p, size_t n, uint64_t seed)
{
    uint64_t *w = p;
    for (size_t i = 0; i < n / 8; i++)
        w[i] = (seed * 0x9E3779B97F4A7C15u) ^ i;
}

static int intact(const void *p, size_t n, uint64_t seed)
{
    const uint64_t *w = p;
    for (size_t i = 0; i < n / 8; i++)
        if (w[i] != ((seed * 0x9E3779B97F4A7C15u) ^ i))
            return 0;
    return 1;
}
/* ---- end of the host-only part ---- */

static uint64_t mapped(xseg_t *xs)
{
    xseg_stats s = {.size = sizeof s};
    return xseg_get_stats(xs, &s) == XSEG_OK ? s.mapped_bytes.current : 0;
}

static int tag_stats(xseg_t *xs, int tag, xseg_tag_stats *t)
{
    t->size = sizeof *t;
    CALL(xseg_tag_stats_get(xs, tag, t), "xseg_tag_stats_get");
    return 0;
}

/* Load: allocate the weights under the model's tag and write them. */
static int load(xseg_t *xs, model *m)
{
    CALL(xseg_tag_id(m->name, &m->tag), m->name);
    CALL(xseg_tag_push(m->tag), "xseg_tag_push"); /* xseg_alloc takes the thread's tag */
    for (int i = 0; i < m->nblocks; i++) {
        if (xseg_alloc(xs, m->block, NULL, &m->w[i]) != XSEG_OK) {
            fail("loading a weight block");
            xseg_tag_pop();
            return 1;
        }
        if (g_host)
            fill(m->w[i], m->block, m->seed + (uint64_t)i);
    }
    CALL(xseg_tag_pop(), "xseg_tag_pop");
    printf("loaded %s: %d x %zu MiB under tag %d, mapped %.1f MiB\n", m->name, m->nblocks,
           m->block / MiB, m->tag, (double)mapped(xs) / MiB);
    return 0;
}

/* The weights are where they were, in the model's tag, with their bytes. */
static int check_weights(xseg_t *xs, const model *m)
{
    for (int i = 0; i < m->nblocks; i++) {
        int tag = -1;
        CALL(xseg_tag_of(xs, m->w[i], &tag), "xseg_tag_of on a weight block");
        if (tag != m->tag) {
            fprintf(stderr, "two_models: %s block %d at %p is in tag %d, not %d\n", m->name, i,
                    m->w[i], tag, m->tag);
            return 1;
        }
        if (g_host && !intact(m->w[i], m->block, m->seed + (uint64_t)i)) {
            fprintf(stderr, "two_models: %s block %d at %p lost its contents\n", m->name, i,
                    m->w[i]);
            return 1;
        }
    }
    return 0;
}

/* Sleep `from` (backup) and the KV cache (discard); check what sleep gave. */
static int put_to_sleep(xseg_t *xs, const model *from, int kv)
{
    uint64_t before = mapped(xs), bytes = (uint64_t)from->nblocks * from->block;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CALL(xseg_sleep(xs, &from->tag, 1, XSEG_SLEEP_BACKUP), "xseg_sleep (backup)");
    CALL(xseg_sleep(xs, &kv, 1, XSEG_SLEEP_DISCARD), "xseg_sleep (discard)");
    double ms = ms_since(&t0);
    uint64_t after = mapped(xs);
    xseg_tag_stats t;
    if (tag_stats(xs, from->tag, &t))
        return 1;
    printf("  sleep %-7s %7.2f ms  mapped %7.1f -> %7.1f MiB  (backup %.1f MiB)\n", from->name,
           ms, (double)before / MiB, (double)after / MiB, (double)t.backup_bytes / MiB);
    if (!t.asleep || t.mapped_bytes.current != 0 || t.backup_bytes < bytes ||
        after + bytes > before) {
        fprintf(stderr, "two_models: after sleep %s: asleep %d, its mapped %llu (want 0), "
                "backup %llu (want >= %llu), allocator mapped %llu -> %llu (want a drop of "
                ">= %llu)\n", from->name, t.asleep, (unsigned long long)t.mapped_bytes.current,
                (unsigned long long)t.backup_bytes, (unsigned long long)bytes,
                (unsigned long long)before, (unsigned long long)after,
                (unsigned long long)bytes);
        return 1;
    }
    void *p = NULL; /* a sleeping tag refuses allocations */
    xseg_status st = xseg_alloc_tagged(xs, MiB, NULL, from->tag, &p);
    if (st != XSEG_ERR_ASLEEP) {
        fprintf(stderr, "two_models: allocating in sleeping %s gave %s, not XSEG_ERR_ASLEEP\n",
                from->name, xseg_strerror(st));
        return 1;
    }
    return 0;
}

/* Wake `to` and the KV cache at their addresses; backups come back. */
static int wake(xseg_t *xs, const model *to, int kv)
{
    uint64_t before = mapped(xs);
    int tags[2] = {to->tag, kv};
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CALL(xseg_wake(xs, tags, 2), "xseg_wake");
    double ms = ms_since(&t0);
    printf("  wake  %-7s %7.2f ms  mapped %7.1f -> %7.1f MiB\n", to->name, ms,
           (double)before / MiB, (double)mapped(xs) / MiB);
    return check_weights(xs, to);
}

/* One request: a KV cache under "kv", a "forward pass" reading the
 * weights into it, freed at the end. */
static int serve(xseg_t *xs, const model *m, int kv, int r)
{
    void *cache = NULL;
    CALL(xseg_alloc_tagged(xs, m->block, NULL, kv, &cache), "allocating the KV cache");
    if (g_host) { /* host only, as fill() */
        memcpy(cache, m->w[r % m->nblocks], m->block);
        if (memcmp(cache, m->w[r % m->nblocks], m->block) != 0) {
            fprintf(stderr, "two_models: request %d: KV cache differs from the weights\n", r);
            return 1;
        }
    }
    CALL(xseg_free(xs, cache), "freeing the KV cache");
    printf("request %d served by %s\n", r, m->name);
    return 0;
}

static int run(xseg_t *xs, model *models, int requests)
{
    int kv = 0;
    CALL(xseg_tag_id("kv", &kv), "xseg_tag_id(kv)");
    for (int i = 0; i < 2; i++)
        if (load(xs, &models[i]))
            return 1;
    const model *active = &models[0];
    if (put_to_sleep(xs, &models[1], kv)) /* model_b waits asleep (kv, unused, too) */
        return 1;
    CALL(xseg_wake(xs, &kv, 1), "xseg_wake(kv)");
    for (int r = 0; r < requests; r++) {
        const model *m = &models[r % 2];
        if (m != active) {
            printf("swap %s -> %s\n", active->name, m->name);
            if (put_to_sleep(xs, active, kv) || wake(xs, m, kv))
                return 1;
            active = m;
        }
        if (serve(xs, m, kv, r))
            return 1;
    }
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: two_models [--requests N] [--blocks N] [--block-mib N] [--conf CONF]\n"
               "Two models (weight blocks under tags model_a, model_b) share one device;\n"
               "requests alternate between them, and each swap sleeps the active model\n"
               "(backup) and the KV cache (discard), then wakes the other.  Prints the\n"
               "time of each sleep and wake and the allocator's mapped bytes; exits 1 at\n"
               "the first check that fails.  Contents are checked on the host backend.\n"
               "  --requests N   requests to serve (default 6)\n"
               "  --blocks N     weight blocks per model, 1..%d (default 6)\n"
               "  --block-mib N  MiB per block (default 8)\n"
               "  --conf CONF    xseg conf (default: $XSEG_CONF; backend:host needs no GPU)\n",
            MAX_BLOCKS);
}

int main(int argc, char **argv)
{
    int requests = 6, blocks = 6, block_mib = 8;
    const char *conf = NULL;
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!v) {
            usage(stderr);
            return 2;
        }
        if (!strcmp(a, "--requests"))
            requests = atoi(v);
        else if (!strcmp(a, "--blocks"))
            blocks = atoi(v);
        else if (!strcmp(a, "--block-mib"))
            block_mib = atoi(v);
        else if (!strcmp(a, "--conf"))
            conf = v;
        else {
            usage(stderr);
            return 2;
        }
    }
    if (requests < 1 || blocks < 1 || blocks > MAX_BLOCKS || block_mib < 1) {
        usage(stderr);
        return 2;
    }
    xseg_t *xs = NULL;
    if (xseg_create(&xs, 0, conf) != XSEG_OK)
        return fail("xseg_create");
    g_host = strcmp(xseg_backend_name(xs), "host") == 0;
    printf("backend %s: contents %s\n", xseg_backend_name(xs),
           g_host ? "checked" : "not checked (GPU memory; see fill())");
    model models[2] = {{.name = "model_a", .seed = 1000}, {.name = "model_b", .seed = 2000}};
    for (int i = 0; i < 2; i++) {
        models[i].nblocks = blocks;
        models[i].block = (size_t)block_mib * MiB;
    }
    int rc = run(xs, models, requests);
    /* One model is asleep here: freeing its blocks works (they are dropped). */
    for (int i = 0; i < 2 && rc == 0; i++)
        for (int b = 0; b < blocks; b++)
            if (xseg_free(xs, models[i].w[b]) != XSEG_OK)
                rc = fail("freeing a weight block");
    if (xseg_destroy(xs) != XSEG_OK)
        rc = fail("xseg_destroy");
    printf("%s\n", rc ? "FAILED" : "ok: every swap kept the weights and their addresses");
    return rc;
}
