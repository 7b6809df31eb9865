/* test_host_driver.c: the host driver backend (lib/driver_host.c) against
 * the driver contract: maps, access, faults, capacity, hole punching,
 * invalid operations without side effects, events under stream holds,
 * counters, many handles and many contexts. */
#include <check.h>
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "driver.h"
#include "driver_host.h"

#define G ((size_t)2 << 20)
#define MIB ((size_t)1 << 20)

static const xseg_driver *D = &xseg_driver_host;

static void *ctx_new(size_t capacity)
{
    void *ctx = NULL;
    char err[256] = "";
    ck_assert_int_eq(D->init(&ctx, 0, capacity, err, sizeof(err)), XDRV_SUCCESS);
    ck_assert_ptr_nonnull(ctx);
    return ctx;
}

/* Does touching p (read or write) kill a child?  Normally by SIGSEGV; under
 * a sanitizer, whose handler may stay, by its non-zero exit. */
static int faults(volatile char *p, int write)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL);
        signal(SIGBUS, SIG_DFL);
        if (write)
            *p = 1;
        else
            (void)*p;
        _exit(0);
    }
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    if (WIFSIGNALED(st))
        return WTERMSIG(st) == SIGSEGV || WTERMSIG(st) == SIGBUS;
    return WIFEXITED(st) && WEXITSTATUS(st) != 0;
}

static int counts_same(const xseg_host_counts *a, const xseg_host_counts *b)
{
    return memcmp(a, b, sizeof(*a)) == 0;
}

static xseg_host_counts counts(void *ctx)
{
    xseg_host_counts c;
    xseg_host_counts_of(ctx, &c);
    return c;
}

static xseg_host_counts gcounts(void)
{
    xseg_host_counts c;
    xseg_host_counts_global(&c);
    return c;
}

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    ck_assert_ptr_nonnull(d);
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

/* The fd of the (single) host memfd of this process, or -1. */
static int find_memfd(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int found = -1;
    while ((e = readdir(d))) {
        char path[300], link[256];
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(path, link, sizeof(link) - 1);
        if (n <= 0)
            continue;
        link[n] = 0;
        if (strncmp(link, "/memfd:xseg-host", 16) == 0)
            found = atoi(e->d_name);
    }
    closedir(d);
    return found;
}

static void fill(uintptr_t va, size_t size, unsigned seed)
{
    uint32_t *p = (uint32_t *)va;
    for (size_t i = 0; i < size / 4; i += 1024)
        p[i] = seed * 2654435761u + (uint32_t)i;
}

static int check_fill(uintptr_t va, size_t size, unsigned seed)
{
    const uint32_t *p = (const uint32_t *)va;
    for (size_t i = 0; i < size / 4; i += 1024)
        if (p[i] != seed * 2654435761u + (uint32_t)i)
            return 0;
    return 1;
}

static int all_zero(uintptr_t va, size_t size)
{
    const uint64_t *p = (const uint64_t *)va;
    for (size_t i = 0; i < size / 8; i++)
        if (p[i])
            return 0;
    return 1;
}

/* reserve + create + map + set_access of one handle of `size` at va+off */
static uint64_t map_new(void *ctx, uintptr_t va, size_t size)
{
    uint64_t h = 0;
    ck_assert_int_eq(D->create(ctx, size, &h), XDRV_SUCCESS);
    ck_assert_int_eq(D->map(ctx, va, size, h), XDRV_SUCCESS);
    ck_assert_int_eq(D->set_access(ctx, va, size), XDRV_SUCCESS);
    return h;
}

static void unmap_release(void *ctx, uintptr_t va, size_t size, uint64_t h)
{
    ck_assert_int_eq(D->unmap(ctx, va, size), XDRV_SUCCESS);
    ck_assert_int_eq(D->release(ctx, h), XDRV_SUCCESS);
}

/* ---- init ------------------------------------------------------------------ */

START_TEST(t_init)
{
    xseg_host_counts g0 = gcounts();
    void *ctx = (void *)0x1;
    char err[256] = "";
    ck_assert_int_eq(D->init(&ctx, 1, 64 * MIB, err, sizeof(err)), XDRV_INVALID_DEVICE);
    ck_assert_ptr_eq(ctx, (void *)0x1);
    ck_assert_ptr_nonnull(strstr(err, "device 1"));
    ck_assert_int_eq(D->init(&ctx, -1, 64 * MIB, err, sizeof(err)), XDRV_INVALID_DEVICE);
    ck_assert_int_eq(D->init(&ctx, 0, 0, err, sizeof(err)), XDRV_INVALID_VALUE);
    ck_assert_int_eq(D->init(&ctx, 1, 64 * MIB, NULL, 0), XDRV_INVALID_DEVICE);
    xseg_host_counts g1 = gcounts();
    ck_assert(counts_same(&g0, &g1));

    ctx = ctx_new(64 * MIB);
    size_t gran = 0, fr = 0, tot = 0;
    ck_assert_str_eq(D->name, "host");
    ck_assert_int_eq(D->granularity(ctx, &gran), XDRV_SUCCESS);
    ck_assert_uint_eq(gran, G);
    ck_assert_int_eq(D->mem_info(ctx, &fr, &tot), XDRV_SUCCESS);
    ck_assert_uint_eq(fr, 64 * MIB);
    ck_assert_uint_eq(tot, 64 * MIB);
    ck_assert_uint_eq(counts(ctx).capacity, 64 * MIB);
    D->fini(ctx);
}
END_TEST

START_TEST(t_error_names)
{
    ck_assert_str_eq(D->error_name(XDRV_SUCCESS), "CUDA_SUCCESS");
    ck_assert_str_eq(D->error_name(XDRV_OUT_OF_MEMORY), "CUDA_ERROR_OUT_OF_MEMORY");
    ck_assert_str_eq(D->error_name(XDRV_INVALID_HANDLE), "CUDA_ERROR_INVALID_HANDLE");
    ck_assert_str_eq(D->error_name(XDRV_NOT_READY), "CUDA_ERROR_NOT_READY");
    ck_assert_str_eq(xseg_drv_code_name(XDRV_INVALID_DEVICE), "CUDA_ERROR_INVALID_DEVICE");
    ck_assert_str_eq(xseg_drv_code_name(XDRV_UNKNOWN), "CUDA_ERROR_UNKNOWN");
    ck_assert_ptr_nonnull(xseg_drv_code_name(12345));
    ck_assert_ptr_nonnull(xseg_drv_code_name(-1));
}
END_TEST

/* ---- reserve / map / access ---------------------------------------------------- */

START_TEST(t_reserve_aligned)
{
    void *ctx = ctx_new(64 * MIB);
    uintptr_t va[8];
    for (int i = 0; i < 8; i++) {
        ck_assert_int_eq(D->reserve(ctx, (size_t)(i + 1) * G, &va[i]), XDRV_SUCCESS);
        ck_assert_uint_eq(va[i] % G, 0);
        ck_assert(faults((char *)va[i], 0));
    }
    ck_assert_uint_eq(counts(ctx).reservations, 8);
    ck_assert_uint_eq(counts(ctx).reserved_bytes, 36 * G);
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 8; j++)
            ck_assert(i == j || va[i] + (size_t)(i + 1) * G <= va[j] ||
                      va[j] + (size_t)(j + 1) * G <= va[i]);
    for (int i = 7; i >= 0; i--)
        ck_assert_int_eq(D->address_free(ctx, va[i], (size_t)(i + 1) * G), XDRV_SUCCESS);
    ck_assert_uint_eq(counts(ctx).reservations, 0);
    ck_assert_uint_eq(counts(ctx).reserved_bytes, 0);
    D->fini(ctx);
}
END_TEST

START_TEST(t_map_access)
{
    void *ctx = ctx_new(64 * MIB);
    uintptr_t va;
    uint64_t h;
    ck_assert_int_eq(D->reserve(ctx, 4 * G, &va), XDRV_SUCCESS);
    ck_assert_int_eq(D->create(ctx, 2 * G, &h), XDRV_SUCCESS);
    ck_assert_int_eq(D->map(ctx, va + G, 2 * G, h), XDRV_SUCCESS);
    /* fresh mapping: inaccessible until set_access */
    ck_assert(!xseg_host_is_accessible(ctx, va + G));
    ck_assert(faults((char *)(va + G), 0));
    ck_assert(faults((char *)(va + 2 * G + 5), 1));
    ck_assert_int_eq(D->set_access(ctx, va + G, 2 * G), XDRV_SUCCESS);
    ck_assert(xseg_host_is_accessible(ctx, va + G));
    ck_assert(xseg_host_is_accessible(ctx, va + 3 * G - 1));
    ck_assert(!xseg_host_is_accessible(ctx, va));
    ck_assert(!xseg_host_is_accessible(ctx, va + 3 * G));
    ck_assert(faults((char *)va, 0));
    ck_assert(faults((char *)(va + 3 * G), 1));
    fill(va + G, 2 * G, 7);
    ck_assert(check_fill(va + G, 2 * G, 7));
    xseg_host_counts c = counts(ctx);
    ck_assert_uint_eq(c.handles, 1);
    ck_assert_uint_eq(c.handle_bytes, 2 * G);
    ck_assert_uint_eq(c.mappings, 1);
    ck_assert_uint_eq(c.mapped_bytes, 2 * G);
    size_t fr, tot;
    ck_assert_int_eq(D->mem_info(ctx, &fr, &tot), XDRV_SUCCESS);
    ck_assert_uint_eq(fr, 64 * MIB - 2 * G);
    /* unmapped memory faults again, the reservation stays */
    ck_assert_int_eq(D->unmap(ctx, va + G, 2 * G), XDRV_SUCCESS);
    ck_assert(!xseg_host_is_accessible(ctx, va + G));
    ck_assert(faults((char *)(va + G), 0));
    ck_assert(faults((char *)(va + 2 * G), 1));
    ck_assert_uint_eq(counts(ctx).mappings, 0);
    ck_assert_uint_eq(counts(ctx).reservations, 1);
    ck_assert_int_eq(D->release(ctx, h), XDRV_SUCCESS);
    ck_assert_int_eq(D->address_free(ctx, va, 4 * G), XDRV_SUCCESS);
    xseg_host_counts zero = {0};
    zero.capacity = 64 * MIB;
    c = counts(ctx);
    ck_assert(counts_same(&c, &zero));
    D->fini(ctx);
}
END_TEST

START_TEST(t_shared_data)
{
    void *ctx = ctx_new(64 * MIB);
    uintptr_t va;
    ck_assert_int_eq(D->reserve(ctx, 8 * G, &va), XDRV_SUCCESS);
    uint64_t h = map_new(ctx, va, 2 * G);
    fill(va, 2 * G, 1);
    /* a second view of the same handle shares the memory */
    ck_assert_int_eq(D->map(ctx, va + 4 * G, 2 * G, h), XDRV_SUCCESS);
    ck_assert_int_eq(D->set_access(ctx, va + 4 * G, 2 * G), XDRV_SUCCESS);
    ck_assert(check_fill(va + 4 * G, 2 * G, 1));
    fill(va + 4 * G, 2 * G, 2);
    ck_assert(check_fill(va, 2 * G, 2));
    ck_assert_uint_eq(counts(ctx).mappings, 2);
    ck_assert_uint_eq(counts(ctx).handles, 1);
    /* unmap both, map elsewhere: the data is still there */
    ck_assert_int_eq(D->unmap(ctx, va, 2 * G), XDRV_SUCCESS);
    ck_assert_int_eq(D->unmap(ctx, va + 4 * G, 2 * G), XDRV_SUCCESS);
    ck_assert_int_eq(D->map(ctx, va + 2 * G, 2 * G, h), XDRV_SUCCESS);
    ck_assert_int_eq(D->set_access(ctx, va + 2 * G, 2 * G), XDRV_SUCCESS);
    ck_assert(check_fill(va + 2 * G, 2 * G, 2));
    /* two handles stay distinct */
    uint64_t h2 = map_new(ctx, va + 6 * G, 2 * G);
    ck_assert(all_zero(va + 6 * G, 2 * G));
    fill(va + 6 * G, 2 * G, 3);
    ck_assert(check_fill(va + 2 * G, 2 * G, 2));
    unmap_release(ctx, va + 2 * G, 2 * G, h);
    unmap_release(ctx, va + 6 * G, 2 * G, h2);
    ck_assert_int_eq(D->address_free(ctx, va, 8 * G), XDRV_SUCCESS);
    D->fini(ctx);
}
END_TEST

START_TEST(t_capacity)
{
    void *ctx = ctx_new(4 * G);
    uintptr_t va;
    uint64_t h[5], spare = 77;
    ck_assert_int_eq(D->reserve(ctx, 8 * G, &va), XDRV_SUCCESS);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(D->create(ctx, G, &h[i]), XDRV_SUCCESS);
    xseg_host_counts c0 = counts(ctx);
    ck_assert_int_eq(D->create(ctx, G, &spare), XDRV_OUT_OF_MEMORY);
    ck_assert_uint_eq(spare, 77);
    xseg_host_counts c1 = counts(ctx);
    ck_assert(counts_same(&c0, &c1));
    size_t fr, tot;
    ck_assert_int_eq(D->mem_info(ctx, &fr, &tot), XDRV_SUCCESS);
    ck_assert_uint_eq(fr, 0);
    ck_assert_uint_eq(tot, 4 * G);
    /* recovers after release */
    ck_assert_int_eq(D->release(ctx, h[1]), XDRV_SUCCESS);
    ck_assert_int_eq(D->create(ctx, 2 * G, &h[4]), XDRV_OUT_OF_MEMORY);
    ck_assert_int_eq(D->create(ctx, G, &h[1]), XDRV_SUCCESS);
    ck_assert_int_eq(D->release(ctx, h[2]), XDRV_SUCCESS);
    ck_assert_int_eq(D->release(ctx, h[3]), XDRV_SUCCESS);
    ck_assert_int_eq(D->create(ctx, 2 * G, &h[4]), XDRV_SUCCESS);
    ck_assert_int_eq(D->map(ctx, va, 2 * G, h[4]), XDRV_SUCCESS);
    ck_assert_int_eq(D->set_access(ctx, va, 2 * G), XDRV_SUCCESS);
    fill(va, 2 * G, 5);
    ck_assert(check_fill(va, 2 * G, 5));
    ck_assert_int_eq(D->create(ctx, G, &spare), XDRV_OUT_OF_MEMORY);
    unmap_release(ctx, va, 2 * G, h[4]);
    ck_assert_int_eq(D->release(ctx, h[0]), XDRV_SUCCESS);
    ck_assert_int_eq(D->release(ctx, h[1]), XDRV_SUCCESS);
    ck_assert_uint_eq(counts(ctx).handle_bytes, 0);
    ck_assert_int_eq(D->address_free(ctx, va, 8 * G), XDRV_SUCCESS);
    D->fini(ctx);
}
END_TEST

/* Release gives the memory back (st_blocks of the memfd) and a recycled
 * range reads as zeros. */
START_TEST(t_punch_hole)
{
    void *ctx = ctx_new(16 * MIB);
    int fd = find_memfd();
    ck_assert_int_ge(fd, 0);
    uintptr_t va;
    struct stat st;
    ck_assert_int_eq(D->reserve(ctx, 2 * G, &va), XDRV_SUCCESS);
    uint64_t h = map_new(ctx, va, 2 * G);
    memset((void *)va, 0xab, 2 * G);
    ck_assert_int_eq(fstat(fd, &st), 0);
    ck_assert_int_ge((long long)st.st_blocks * 512, (long long)(2 * G));
    unmap_release(ctx, va, 2 * G, h);
    ck_assert_int_eq(fstat(fd, &st), 0);
    ck_assert_int_eq(st.st_blocks, 0);
    h = map_new(ctx, va, 2 * G);
    ck_assert(all_zero(va, 2 * G));
    unmap_release(ctx, va, 2 * G, h);
    ck_assert_int_eq(D->address_free(ctx, va, 2 * G), XDRV_SUCCESS);
    D->fini(ctx);
}
END_TEST

/* ---- invalid operations: an error and no effect ------------------------------------ */

#define EXPECT_NOOP(ctx, call, code)                                \
    do {                                                            \
        xseg_host_counts b_ = counts(ctx), g_ = gcounts();          \
        ck_assert_int_eq((call), (code));                           \
        xseg_host_counts a_ = counts(ctx), ga_ = gcounts();         \
        ck_assert(counts_same(&a_, &b_));                           \
        ck_assert(counts_same(&ga_, &g_));                          \
    } while (0)

START_TEST(t_invalid_reserve_create)
{
    void *ctx = ctx_new(16 * MIB);
    uintptr_t va = 0;
    uint64_t h;
    EXPECT_NOOP(ctx, D->reserve(ctx, 0, &va), XDRV_INVALID_VALUE);
    EXPECT_NOOP(ctx, D->reserve(ctx, G + 4096, &va), XDRV_INVALID_VALUE);
    EXPECT_NOOP(ctx, D->reserve(ctx, SIZE_MAX & ~(G - 1), &va), XDRV_INVALID_VALUE);
    EXPECT_NOOP(ctx, D->create(ctx, 0, &h), XDRV_INVALID_VALUE);
    EXPECT_NOOP(ctx, D->create(ctx, G / 2, &h), XDRV_INVALID_VALUE);
    EXPECT_NOOP(ctx, D->create(ctx, 10 * G, &h), XDRV_OUT_OF_MEMORY);
    EXPECT_NOOP(ctx, D->release(ctx, 0), XDRV_INVALID_HANDLE);
    EXPECT_NOOP(ctx, D->release(ctx, 12345), XDRV_INVALID_HANDLE);
    EXPECT_NOOP(ctx, D->release(ctx, UINT64_MAX), XDRV_INVALID_HANDLE);
    ck_assert_int_eq(D->create(ctx, G, &h), XDRV_SUCCESS);
    ck_assert_int_eq(D->release(ctx, h), XDRV_SUCCESS);
    EXPECT_NOOP(ctx, D->release(ctx, h), XDRV_INVALID_HANDLE);
    /* a recycled slot gets a new id: the stale one stays invalid */
    uint64_t h2;
    ck_assert_int_eq(D->create(ctx, G, &h2), XDRV_SUCCESS);
    ck_assert(h2 != h);
    EXPECT_NOOP(ctx, D->release(ctx, h), XDRV_INVALID_HANDLE);
    ck_assert_int_eq(D->release(ctx, h2), XDRV_SUCCESS);
    D->fini(ctx);
}
END_TEST

START_TEST(t_invalid_map)
{
    void *ctx = ctx_new(32 * MIB);
    uintptr_t va, gone;
    uint64_t h1, h2, dead;
    ck_assert_int_eq(D->reserve(ctx, 4 * G, &va), XDRV_SUCCESS);
    ck_assert_int_eq(D->reserve(ctx, 2 * G, &gone), XDRV_SUCCESS);
    ck_assert_int_eq(D->address_free(ctx, gone, 2 * G), XDRV_SUCCESS);
    ck_assert_int_eq(D->create(ctx, 2 * G, &h1), XDRV_SUCCESS);
    ck_assert_int_eq(D->create(ctx, G, &h2), XDRV_SUCCESS);
    ck_assert_int_eq(D->create(ctx, G, &dead), XDRV_SUCCESS);
    ck_assert_int_eq(D->release(ctx, dead), XDRV_SUCCESS);
    EXPECT_NOOP(ctx, D->map(ctx, va, G, h1), XDRV_INVALID_VALUE);      /* wrong size */
    EXPECT_NOOP(ctx, D->map(ctx, va, 4 * G, h1), XDRV_INVALID_VALUE);
    EXPECT_NOOP(ctx, D->map(ctx, va + 4096, 2 * G, h1), XDRV_INVALID_VALUE);
    EXPECT_NOOP(ctx, D->map(ctx, va + 3 * G, 2 * G, h1), XDRV_INVALID_VALUE); /* past end */
    EXPECT_NOOP(ctx, D->map(ctx, gone, 2 * G, h1), XDRV_INVALID_VALUE); /* unreserved */
    EXPECT_NOOP(ctx, D->map(ctx, va, G, dead), XDRV_INVALID_HANDLE);
    EXPECT_NOOP(ctx, D->map(ctx, va, G, 999), XDRV_INVALID_HANDLE);
    ck_assert_int_eq(D->map(ctx, va + G, 2 * G, h1), XDRV_SUCCESS);
    ck_assert_int_eq(D->set_access(ctx, va + G, 2 * G), XDRV_SUCCESS);
    fill(va + G, 2 * G, 9);
    EXPECT_NOOP(ctx, D->map(ctx, va + G, 2 * G, h1), XDRV_INVALID_VALUE); /* twice */
    EXPECT_NOOP(ctx, D->map(ctx, va + 2 * G, G, h2), XDRV_INVALID_VALUE); /* overlap */
    EXPECT_NOOP(ctx, D->map(ctx, va, 2 * G, h1), XDRV_INVALID_VALUE);     /* overlap */
    EXPECT_NOOP(ctx, D->set_access(ctx, va, 2 * G), XDRV_INVALID_VALUE);  /* half mapped */
    EXPECT_NOOP(ctx, D->set_access(ctx, va + 3 * G, G), XDRV_INVALID_VALUE);
    EXPECT_NOOP(ctx, D->unmap(ctx, va + G, G), XDRV_INVALID_VALUE);       /* partial */
    EXPECT_NOOP(ctx, D->unmap(ctx, va + 2 * G, G), XDRV_INVALID_VALUE);   /* partial */
    EXPECT_NOOP(ctx, D->unmap(ctx, va, 3 * G), XDRV_INVALID_VALUE);       /* + unmapped */
    EXPECT_NOOP(ctx, D->unmap(ctx, va + G, 3 * G), XDRV_INVALID_VALUE);   /* + unmapped */
    EXPECT_NOOP(ctx, D->unmap(ctx, va + G + 4096, 2 * G), XDRV_INVALID_VALUE);
    EXPECT_NOOP(ctx, D->address_free(ctx, va, 4 * G), XDRV_INVALID_VALUE); /* still mapped */
    EXPECT_NOOP(ctx, D->address_free(ctx, va, 2 * G), XDRV_INVALID_VALUE); /* wrong size */
    EXPECT_NOOP(ctx, D->address_free(ctx, va + G, 3 * G), XDRV_INVALID_VALUE);
    /* nothing changed: the data is still there and accessible */
    ck_assert(xseg_host_is_accessible(ctx, va + G));
    ck_assert(check_fill(va + G, 2 * G, 9));
    /* adjacent maps unmap in one call */
    ck_assert_int_eq(D->map(ctx, va + 3 * G, G, h2), XDRV_SUCCESS);
    ck_assert_int_eq(D->set_access(ctx, va + G, 3 * G), XDRV_SUCCESS);
    ck_assert_int_eq(D->unmap(ctx, va + G, 3 * G), XDRV_SUCCESS);
    ck_assert_uint_eq(counts(ctx).mappings, 0);
    ck_assert(faults((char *)(va + 3 * G), 0));
    ck_assert_int_eq(D->release(ctx, h1), XDRV_SUCCESS);
    ck_assert_int_eq(D->release(ctx, h2), XDRV_SUCCESS);
    ck_assert_int_eq(D->address_free(ctx, va, 4 * G), XDRV_SUCCESS);
    D->fini(ctx);
}
END_TEST

/* CUDA allows releasing a mapped handle: the memory lives until unmapped. */
START_TEST(t_release_mapped)
{
    void *ctx = ctx_new(8 * MIB);
    uintptr_t va;
    uint64_t h, h2;
    ck_assert_int_eq(D->reserve(ctx, 4 * G, &va), XDRV_SUCCESS);
    h = map_new(ctx, va, G);
    ck_assert_int_eq(D->map(ctx, va + 2 * G, G, h), XDRV_SUCCESS);
    fill(va, G, 4);
    ck_assert_int_eq(D->release(ctx, h), XDRV_SUCCESS);
    ck_assert_int_eq(D->release(ctx, h), XDRV_INVALID_HANDLE);
    ck_assert_int_eq(D->map(ctx, va + G, G, h), XDRV_INVALID_HANDLE);
    ck_assert(check_fill(va, G, 4));
    ck_assert_uint_eq(counts(ctx).handle_bytes, G); /* still held */
    ck_assert_int_eq(D->unmap(ctx, va, G), XDRV_SUCCESS);
    ck_assert_uint_eq(counts(ctx).handle_bytes, G); /* one map left */
    ck_assert_int_eq(D->set_access(ctx, va + 2 * G, G), XDRV_SUCCESS);
    ck_assert(check_fill(va + 2 * G, G, 4));
    ck_assert_int_eq(D->unmap(ctx, va + 2 * G, G), XDRV_SUCCESS);
    ck_assert_uint_eq(counts(ctx).handle_bytes, 0);
    ck_assert_uint_eq(counts(ctx).handles, 0);
    h2 = map_new(ctx, va, G); /* the recycled range was punched */
    ck_assert(all_zero(va, G));
    unmap_release(ctx, va, G, h2);
    ck_assert_int_eq(D->address_free(ctx, va, 4 * G), XDRV_SUCCESS);
    D->fini(ctx);
}
END_TEST

/* ---- scale ----------------------------------------------------------------------- */

START_TEST(t_many_handles)
{
    enum { N = 5000 };
    int fds0 = count_fds();
    void *ctx = ctx_new((size_t)N * G);
    uintptr_t va;
    static uint64_t h[N];
    ck_assert_int_eq(count_fds(), fds0 + 1);
    ck_assert_int_eq(D->reserve(ctx, (size_t)N * G, &va), XDRV_SUCCESS);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(D->create(ctx, G, &h[i]), XDRV_SUCCESS);
        ck_assert_int_eq(D->map(ctx, va + (size_t)i * G, G, h[i]), XDRV_SUCCESS);
    }
    ck_assert_int_eq(count_fds(), fds0 + 1);
    ck_assert_int_eq(D->set_access(ctx, va, (size_t)N * G), XDRV_SUCCESS);
    for (int i = 0; i < N; i++)
        *(int *)(va + (size_t)i * G + 64) = i;
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(*(int *)(va + (size_t)i * G + 64), i);
    xseg_host_counts c = counts(ctx);
    ck_assert_uint_eq(c.handles, N);
    ck_assert_uint_eq(c.mappings, N);
    ck_assert_uint_eq(c.mapped_bytes, (size_t)N * G);
    /* one unmap covering all N maps, releases in a scattered order */
    ck_assert_int_eq(D->unmap(ctx, va, (size_t)N * G), XDRV_SUCCESS);
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(D->release(ctx, h[(i * 7919) % N]), XDRV_SUCCESS);
    /* recycling: create them all again, capacity exactly full */
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(D->create(ctx, G, &h[i]), XDRV_SUCCESS);
    uint64_t spare = 5;
    ck_assert_int_eq(D->create(ctx, G, &spare), XDRV_OUT_OF_MEMORY);
    ck_assert_uint_eq(spare, 5);
    for (int i = N - 1; i >= 0; i--)
        ck_assert_int_eq(D->release(ctx, h[i]), XDRV_SUCCESS);
    ck_assert_int_eq(D->address_free(ctx, va, (size_t)N * G), XDRV_SUCCESS);
    D->fini(ctx);
    ck_assert_int_eq(count_fds(), fds0);
}
END_TEST

START_TEST(t_many_contexts)
{
    enum { N = 64 };
    int fds0 = count_fds();
    xseg_host_counts g0 = gcounts();
    void *ctx[N];
    uintptr_t va[N];
    for (int i = 0; i < N; i++) {
        ctx[i] = ctx_new(8 * MIB);
        ck_assert_int_eq(D->reserve(ctx[i], 2 * G, &va[i]), XDRV_SUCCESS);
        map_new(ctx[i], va[i], G);
        *(int *)va[i] = i;
    }
    xseg_host_counts g = gcounts();
    ck_assert_uint_eq(g.handles, g0.handles + N);
    ck_assert_uint_eq(g.mapped_bytes, g0.mapped_bytes + N * G);
    ck_assert_uint_eq(g.reserved_bytes, g0.reserved_bytes + 2 * N * G);
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(*(int *)va[i], i);
    for (int i = 0; i < N; i++)
        D->fini(ctx[i]); /* leaves everything to fini */
    g = gcounts();
    ck_assert(counts_same(&g, &g0));
    ck_assert_int_eq(count_fds(), fds0);
}
END_TEST

/* Random maps/unmaps of 1..4 granules against a model of the granules. */
START_TEST(t_map_churn)
{
    enum { P = 256, STEPS = 3000 };
    void *ctx = ctx_new((size_t)P * G);
    uintptr_t va;
    static int start[P], len[P], acc[P]; /* model: per granule, map start or -1 */
    static uint64_t hd[P];
    uint64_t x = 88172645463325252ULL;
    ck_assert_int_eq(D->reserve(ctx, (size_t)P * G, &va), XDRV_SUCCESS);
    for (int i = 0; i < P; i++)
        start[i] = -1;
    for (int s = 0; s < STEPS; s++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int p = (int)(x % P), n = 1 + (int)((x >> 20) % 4);
        if (start[p] >= 0) { /* unmap the map covering p */
            int b = start[p], m = len[b];
            ck_assert_int_eq(D->unmap(ctx, va + (size_t)b * G, (size_t)m * G), XDRV_SUCCESS);
            ck_assert_int_eq(D->release(ctx, hd[b]), XDRV_SUCCESS);
            for (int i = b; i < b + m; i++)
                start[i] = -1;
            continue;
        }
        int fits = p + n <= P;
        for (int i = p; fits && i < p + n; i++)
            fits = start[i] < 0;
        uint64_t h;
        ck_assert_int_eq(D->create(ctx, (size_t)n * G, &h), XDRV_SUCCESS);
        int rc = D->map(ctx, va + (size_t)p * G, (size_t)n * G, h);
        ck_assert_int_eq(rc, (fits ? XDRV_SUCCESS : XDRV_INVALID_VALUE));
        if (!fits) {
            ck_assert_int_eq(D->release(ctx, h), XDRV_SUCCESS);
            continue;
        }
        acc[p] = (int)(x & 1);
        if (acc[p])
            ck_assert_int_eq(D->set_access(ctx, va + (size_t)p * G, (size_t)n * G), XDRV_SUCCESS);
        hd[p] = h;
        len[p] = n;
        for (int i = p; i < p + n; i++)
            start[i] = p;
        for (int i = 0; i < P; i++)
            ck_assert_int_eq(xseg_host_is_accessible(ctx, va + (size_t)i * G + 99),
                             start[i] >= 0 && acc[start[i]]);
    }
    size_t mapped = 0;
    for (int i = 0; i < P; i++)
        mapped += start[i] >= 0;
    ck_assert_uint_eq(counts(ctx).mapped_bytes, mapped * G);
    ck_assert_uint_eq(counts(ctx).handle_bytes, mapped * G);
    for (int i = 0; i < P; i++) /* accessible maps hold real memory */
        if (start[i] >= 0 && acc[start[i]])
            *(volatile char *)(va + (size_t)i * G) = 1;
    D->fini(ctx);
}
END_TEST

/* ---- events ----------------------------------------------------------------------- */

START_TEST(t_events)
{
    void *ctx = ctx_new(8 * MIB);
    void *s = (void *)0x1000, *t = (void *)0x2000;
    void *e1, *e2, *e3;
    ck_assert_int_eq(D->event_create(ctx, &e1), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_create(ctx, &e2), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_create(ctx, &e3), XDRV_SUCCESS);
    ck_assert_uint_eq(counts(ctx).events, 3);
    ck_assert_int_eq(D->event_query(ctx, e1), XDRV_SUCCESS); /* never recorded */
    ck_assert_int_eq(D->event_record(ctx, e1, s), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_query(ctx, e1), XDRV_SUCCESS);
    /* held: pending until the hold is lifted; other streams unaffected */
    xseg_host_hold_stream(ctx, s, 1);
    ck_assert_int_eq(D->event_record(ctx, e1, s), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_record(ctx, e2, t), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_record(ctx, e3, NULL), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_query(ctx, e1), XDRV_NOT_READY);
    ck_assert_int_eq(D->event_query(ctx, e1), XDRV_NOT_READY);
    ck_assert_int_eq(D->event_query(ctx, e2), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_query(ctx, e3), XDRV_SUCCESS);
    xseg_host_hold_stream(ctx, s, 0);
    ck_assert_int_eq(D->event_query(ctx, e1), XDRV_SUCCESS);
    ck_assert_uint_eq(xseg_host_sync_count(ctx), 0);
    /* the NULL stream can be held too; event_sync completes up to the event */
    xseg_host_hold_stream(ctx, NULL, 1);
    ck_assert_int_eq(D->event_record(ctx, e1, NULL), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_record(ctx, e2, NULL), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_query(ctx, e1), XDRV_NOT_READY);
    ck_assert_int_eq(D->event_sync(ctx, e1), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_query(ctx, e1), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_query(ctx, e2), XDRV_NOT_READY);
    ck_assert_uint_eq(xseg_host_sync_count(ctx), 1);
    ck_assert_int_eq(D->stream_sync(ctx, NULL), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_query(ctx, e2), XDRV_SUCCESS);
    ck_assert_uint_eq(xseg_host_sync_count(ctx), 2);
    /* still held: a re-recorded event is pending again */
    ck_assert_int_eq(D->event_record(ctx, e2, NULL), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_query(ctx, e2), XDRV_NOT_READY);
    ck_assert_int_eq(D->stream_sync(ctx, t), XDRV_SUCCESS); /* other stream */
    ck_assert_int_eq(D->event_query(ctx, e2), XDRV_NOT_READY);
    /* re-recording on a free stream completes it */
    ck_assert_int_eq(D->event_record(ctx, e2, t), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_query(ctx, e2), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_sync(ctx, e2), XDRV_SUCCESS);
    ck_assert_uint_eq(xseg_host_sync_count(ctx), 4);
    xseg_host_hold_stream(ctx, NULL, 0);
    ck_assert_int_eq(D->event_destroy(ctx, e1), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_destroy(ctx, e2), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_query(ctx, NULL), XDRV_INVALID_HANDLE);
    ck_assert_uint_eq(counts(ctx).events, 1);
    D->fini(ctx); /* e3 left for fini */
}
END_TEST

START_TEST(t_event_lag)
{
    void *ctx = ctx_new(8 * MIB);
    void *s = (void *)0x1000, *t = (void *)0x2000;
    void *e1, *e2;
    ck_assert_int_eq(D->event_create(ctx, &e1), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_create(ctx, &e2), XDRV_SUCCESS);
    xseg_host_set_event_lag(ctx, 3);
    /* complete after 3 queries */
    ck_assert_int_eq(D->event_record(ctx, e1, s), XDRV_SUCCESS);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(D->event_query(ctx, e1), XDRV_NOT_READY);
    ck_assert_int_eq(D->event_query(ctx, e1), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_query(ctx, e1), XDRV_SUCCESS);
    /* event_sync completes at once */
    ck_assert_int_eq(D->event_record(ctx, e1, s), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_sync(ctx, e1), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_query(ctx, e1), XDRV_SUCCESS);
    /* stream_sync completes that stream's events only */
    ck_assert_int_eq(D->event_record(ctx, e1, s), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_record(ctx, e2, t), XDRV_SUCCESS);
    ck_assert_int_eq(D->stream_sync(ctx, s), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_query(ctx, e1), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_query(ctx, e2), XDRV_NOT_READY);
    /* lag 0: complete when recorded again */
    xseg_host_set_event_lag(ctx, 0);
    ck_assert_int_eq(D->event_record(ctx, e2, t), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_query(ctx, e2), XDRV_SUCCESS);
    D->fini(ctx);
}
END_TEST

START_TEST(t_event_other_ctx)
{
    void *a = ctx_new(8 * MIB), *b = ctx_new(8 * MIB), *e;
    ck_assert_int_eq(D->event_create(a, &e), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_record(b, e, NULL), XDRV_INVALID_HANDLE);
    ck_assert_int_eq(D->event_destroy(b, e), XDRV_INVALID_HANDLE);
    ck_assert_int_eq(D->event_destroy(a, e), XDRV_SUCCESS);
    D->fini(a);
    D->fini(b);
}
END_TEST

/* ---- counters and threads ------------------------------------------------------------ */

START_TEST(t_fini_releases_all)
{
    xseg_host_counts g0 = gcounts();
    int fds0 = count_fds();
    void *ctx = ctx_new(64 * MIB), *e;
    uintptr_t va;
    uint64_t h, spare;
    ck_assert_int_eq(D->reserve(ctx, 8 * G, &va), XDRV_SUCCESS);
    map_new(ctx, va, 2 * G);
    h = map_new(ctx, va + 4 * G, G);
    ck_assert_int_eq(D->release(ctx, h), XDRV_SUCCESS); /* zombie */
    ck_assert_int_eq(D->create(ctx, 4 * G, &spare), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_create(ctx, &e), XDRV_SUCCESS);
    xseg_host_hold_stream(ctx, NULL, 1);
    ck_assert_int_eq(D->event_record(ctx, e, NULL), XDRV_SUCCESS);
    xseg_host_counts g = gcounts();
    ck_assert_uint_eq(g.handles, g0.handles + 3);
    ck_assert_uint_eq(g.events, g0.events + 1);
    D->fini(ctx);
    g = gcounts();
    ck_assert(counts_same(&g, &g0));
    ck_assert_int_eq(count_fds(), fds0);
}
END_TEST

typedef struct toggler {
    void *ctx;
    atomic_int stop;
    long rounds;
} toggler;

static void *toggle_main(void *arg)
{
    toggler *t = arg;
    xseg_host_counts c, g;
    while (!t->stop) {
        xseg_host_hold_stream(t->ctx, (void *)0x10, (int)(t->rounds & 1));
        xseg_host_counts_of(t->ctx, &c);
        xseg_host_counts_global(&g);
        (void)xseg_host_is_accessible(t->ctx, 0);
        (void)xseg_host_sync_count(t->ctx);
        t->rounds++;
    }
    return NULL;
}

START_TEST(t_threads)
{
    void *ctx = ctx_new(64 * MIB), *e;
    uintptr_t va;
    toggler t = {ctx, 0, 0};
    pthread_t th;
    ck_assert_int_eq(D->reserve(ctx, 8 * G, &va), XDRV_SUCCESS);
    ck_assert_int_eq(D->event_create(ctx, &e), XDRV_SUCCESS);
    ck_assert_int_eq(pthread_create(&th, NULL, toggle_main, &t), 0);
    for (int i = 0; i < 2000; i++) {
        size_t off = (size_t)(i % 4) * 2 * G;
        uint64_t h = map_new(ctx, va + off, G);
        ck_assert(xseg_host_is_accessible(ctx, va + off));
        ck_assert_int_eq(D->event_record(ctx, e, (void *)0x10), XDRV_SUCCESS);
        int q = D->event_query(ctx, e);
        ck_assert(q == XDRV_SUCCESS || q == XDRV_NOT_READY);
        ck_assert_int_eq(D->event_sync(ctx, e), XDRV_SUCCESS);
        ck_assert_int_eq(D->event_query(ctx, e), XDRV_SUCCESS);
        unmap_release(ctx, va + off, G, h);
    }
    t.stop = 1;
    pthread_join(th, NULL);
    ck_assert_uint_eq(xseg_host_sync_count(ctx), 2000);
    ck_assert_uint_eq(counts(ctx).mappings, 0);
    D->fini(ctx);
}
END_TEST

static Suite *host_driver_suite(void)
{
    Suite *s = suite_create("host_driver");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, t_init);
    tcase_add_test(tc, t_error_names);
    tcase_add_test(tc, t_reserve_aligned);
    tcase_add_test(tc, t_map_access);
    tcase_add_test(tc, t_shared_data);
    tcase_add_test(tc, t_capacity);
    tcase_add_test(tc, t_punch_hole);
    tcase_add_test(tc, t_invalid_reserve_create);
    tcase_add_test(tc, t_invalid_map);
    tcase_add_test(tc, t_release_mapped);
    tcase_add_test(tc, t_many_handles);
    tcase_add_test(tc, t_many_contexts);
    tcase_add_test(tc, t_map_churn);
    tcase_add_test(tc, t_events);
    tcase_add_test(tc, t_event_lag);
    tcase_add_test(tc, t_event_other_ctx);
    tcase_add_test(tc, t_fini_releases_all);
    tcase_add_test(tc, t_threads);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(host_driver_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed != 0;
}
