/* test_driver_contract.c: one driver-contract suite (lib/driver.h) run over
 * every driver table, in the spirit of RMM's one test suite over every
 * memory resource: the same test functions are added to one TCase per
 * fixture, whose setup selects the driver through the globals below.
 *
 * Fixtures: "host" (xseg_driver_host), "fault" (tests/support_fault.c's
 * wrapper with nothing armed: it must answer exactly what the host backend
 * answers, fire nothing and count every call) and "cuda"
 * (xseg_driver_cuda_ptr, only when xseg_cuda_available(): otherwise that
 * fixture alone is skipped, with a note on stderr).
 *
 * What every fixture is held to: granularity, reserve / address_free,
 * create / map / set_access / unmap / release in the contract's order,
 * several maps under one set_access and one unmap, a handle mapped twice,
 * release of a mapped handle, events (record / query / sync / destroy,
 * stream_sync), mem_info, error names, out of memory past the capacity,
 * operations from a fresh thread, a random map churn, and failed calls
 * that have no effect.  Where a fixture can observe more it does: on a
 * host backend context (host, fault) memory is checked from the CPU
 * (inaccessible until set_access, data shared between views), the
 * backend's counters prove "no effect" and the exact XDRV code is asserted;
 * on cuda a failure must be a failure and the later calls must still work.
 * Misuse that only the host backend promises to catch (stale or made-up
 * handles, ranges outside any reservation) runs on the "strict" fixtures.
 *
 * Backend-specific behaviour stays in test_host_driver.c (memfd slots and
 * holes, simulated capacity, held streams and event lag, counters, fini of
 * live objects, threads) and test_cuda_driver.c.  CUDA cannot be used in a
 * child forked after cuInit, so the cuda fixture runs in its own runner
 * with CK_NOFORK; host and fault follow CK_FORK (forked by default). */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#ifndef RUNNING_ON_VALGRIND
#define RUNNING_ON_VALGRIND 0
#endif

#include "driver.h"
#include "driver_cuda.h"
#include "driver_host.h"
#include "support_common.h"
#include "support_fault.h"

#define MIB ((size_t)1 << 20)

/* One driver under test. */
typedef struct fixture {
    const char *name;
    const xseg_driver *drv;
    size_t capacity; /* init's capacity (simulated memory; cuda ignores it) */
    int host;        /* ctx is a host backend context: counters, CPU access, exact codes */
    int strict;      /* refuses every misuse, also made-up handles and stray ranges */
    int fault;       /* the fault wrapper: nothing may fire, every call counted */
} fixture;

static fixture k_host = {"host", &xseg_driver_host, 1024 * MIB, 1, 1, 0};
static fixture k_fault = {"fault", &fault_driver, 1024 * MIB, 1, 1, 1};
static fixture k_cuda = {"cuda", NULL, 0, 0, 0, 0};

/* The fixture of the running test, its table, its context, granularity. */
static const fixture *F;
static const xseg_driver *D;
static void *C;
static size_t G;
static xseg_host_counts g_global0; /* host fixtures: process counters at setup */

/* ---- fixtures ------------------------------------------------------------ */

static xseg_host_counts gcounts(void)
{
    xseg_host_counts c;
    xseg_host_counts_global(&c);
    return c;
}

static xseg_host_counts counts(void)
{
    xseg_host_counts c;
    xseg_host_counts_of(C, &c);
    return c;
}

static int counts_same(const xseg_host_counts *a, const xseg_host_counts *b)
{
    return memcmp(a, b, sizeof *a) == 0;
}

static int device_count(void)
{
    return F->host ? 1 : xseg_cuda_device_count();
}

static void setup_with(const fixture *f)
{
    char err[256] = "";
    F = f;
    D = f->drv;
    C = NULL;
    if (f->fault)
        fault_reset();
    if (f->host)
        g_global0 = gcounts();
    ck_assert_msg(D->init(&C, 0, f->capacity, err, sizeof err) == XDRV_SUCCESS,
                  "%s: init: %s", f->name, err);
    ck_assert_ptr_nonnull(C);
    ck_assert_int_eq(D->granularity(C, &G), XDRV_SUCCESS);
}

static void setup_host(void) { setup_with(&k_host); }
static void setup_fault(void) { setup_with(&k_fault); }
static void setup_cuda(void) { setup_with(&k_cuda); }

/* fini; on a host context everything it held is gone from the process
 * counters; the fault wrapper fired nothing, counted calls, saw the fini. */
static void teardown(void)
{
    if (C == NULL)
        return;
    D->fini(C);
    C = NULL;
    if (F->host) {
        xseg_host_counts g = gcounts();
        ck_assert_msg(counts_same(&g, &g_global0), "%s: fini left host objects", F->name);
    }
    if (F->fault) {
        xseg_host_counts left;
        uint64_t calls = 0;
        for (int op = 0; op < FAULT_NOPS; op++)
            calls += fault_calls(op);
        ck_assert_uint_eq(fault_fired(), 0);
        ck_assert_uint_gt(calls, 1);
        ck_assert_int_eq(fault_fini_counts(&left), 1);
    }
}

/* ---- helpers --------------------------------------------------------------- */

/* A failed call: the exact code on a host context (exact: on every
 * fixture), any failure elsewhere; on a host context the context's and the
 * process's counters are unchanged. */
#define FAILS_(call, code, exact)                                                    \
    do {                                                                             \
        xseg_host_counts b_ = {0}, gb_ = {0}, a_ = {0}, ga_ = {0};                   \
        if (F->host)                                                                 \
            b_ = counts(), gb_ = gcounts();                                          \
        int rc_ = (call);                                                            \
        if (F->host || (exact))                                                      \
            ck_assert_msg(rc_ == (code), "%s: %s = %d (%s), expected %s", F->name,   \
                          #call, rc_, D->error_name(rc_), #code);                    \
        else                                                                         \
            ck_assert_msg(rc_ != XDRV_SUCCESS, "%s: %s succeeded", F->name, #call);  \
        if (F->host) {                                                               \
            a_ = counts(), ga_ = gcounts();                                          \
            ck_assert_msg(counts_same(&a_, &b_) && counts_same(&ga_, &gb_),          \
                          "%s: failed %s changed the backend", F->name, #call);      \
        }                                                                            \
    } while (0)
#define FAILS(call, host_code) FAILS_(call, host_code, 0)
#define FAILS_EXACT(call, code) FAILS_(call, code, 1)

#define OK(call) ck_assert_msg((call) == XDRV_SUCCESS, "%s: %s failed", F->name, #call)

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

/* Host contexts: the page at va is (not) usable from the CPU. */
static void cpu_usable(uintptr_t va, int yes)
{
    if (!F->host)
        return;
    ck_assert_int_eq(xseg_host_is_accessible(C, va), yes);
    ck_assert_int_eq(faults((volatile char *)va, 0), !yes);
}

/* create + map + set_access of one handle of `size` at va */
static uint64_t map_new(uintptr_t va, size_t size)
{
    uint64_t h = 0;
    OK(D->create(C, size, &h));
    OK(D->map(C, va, size, h));
    OK(D->set_access(C, va, size));
    return h;
}

static void unmap_release(uintptr_t va, size_t size, uint64_t h)
{
    OK(D->unmap(C, va, size));
    OK(D->release(C, h));
}

/* ---- init, granularity, names ------------------------------------------------ */

START_TEST(c_init_errors)
{
    int n = device_count();
    void *c2 = (void *)0x1;
    char err[256] = "", want[32];
    xseg_host_counts g0 = gcounts();

    snprintf(want, sizeof want, "device %d", n);
    ck_assert_int_eq(D->init(&c2, n, F->capacity, err, sizeof err), XDRV_INVALID_DEVICE);
    ck_assert_ptr_eq(c2, (void *)0x1);
    ck_assert_msg(strstr(err, want) != NULL, "%s: message '%s' names no '%s'", F->name, err, want);
    err[0] = '\0';
    ck_assert_int_eq(D->init(&c2, -1, F->capacity, err, sizeof err), XDRV_INVALID_DEVICE);
    ck_assert_ptr_eq(c2, (void *)0x1);
    ck_assert_str_ne(err, "");
    ck_assert_int_eq(D->init(&c2, n, F->capacity, NULL, 0), XDRV_INVALID_DEVICE);
    ck_assert_int_eq(D->init(NULL, 0, F->capacity, err, sizeof err), XDRV_INVALID_VALUE);
    ck_assert_ptr_eq(c2, (void *)0x1);
    if (F->host) {
        xseg_host_counts g1 = gcounts();
        ck_assert(counts_same(&g0, &g1));
    }
}
END_TEST

/* A power of two; the same on a second context of the device, whose fini
 * leaves the first one working. */
START_TEST(c_granularity)
{
    char err[256] = "";
    void *c2 = NULL;
    size_t g2 = 0, f = 0, t = 0;
    uintptr_t va = 0;

    ck_assert_uint_gt(G, 0);
    ck_assert_uint_eq(G & (G - 1), 0);
    ck_assert_int_eq(D->granularity(C, NULL), XDRV_INVALID_VALUE);
    ck_assert_msg(D->init(&c2, 0, F->capacity, err, sizeof err) == XDRV_SUCCESS, "init: %s", err);
    ck_assert_ptr_nonnull(c2);
    ck_assert_int_eq(D->granularity(c2, &g2), XDRV_SUCCESS);
    ck_assert_uint_eq(g2, G);
    D->fini(c2);
    OK(D->mem_info(C, &f, &t));
    ck_assert_uint_gt(t, 0);
    OK(D->reserve(C, G, &va));
    OK(D->address_free(C, va, G));
}
END_TEST

START_TEST(c_error_names)
{
    ck_assert_str_eq(D->error_name(XDRV_SUCCESS), "CUDA_SUCCESS");
    ck_assert_str_eq(D->error_name(XDRV_INVALID_VALUE), "CUDA_ERROR_INVALID_VALUE");
    ck_assert_str_eq(D->error_name(XDRV_OUT_OF_MEMORY), "CUDA_ERROR_OUT_OF_MEMORY");
    ck_assert_str_eq(D->error_name(XDRV_INVALID_HANDLE), "CUDA_ERROR_INVALID_HANDLE");
    ck_assert_str_eq(D->error_name(XDRV_NOT_READY), "CUDA_ERROR_NOT_READY");
    ck_assert_str_eq(D->error_name(XDRV_INVALID_DEVICE), "CUDA_ERROR_INVALID_DEVICE");
    ck_assert_ptr_nonnull(D->error_name(123456));
    ck_assert_ptr_nonnull(D->error_name(-1));
}
END_TEST

/* ---- reserve / map / access ------------------------------------------------------ */

START_TEST(c_reserve)
{
    uintptr_t va[8];
    for (int i = 0; i < 8; i++) {
        OK(D->reserve(C, (size_t)(i + 1) * G, &va[i]));
        ck_assert_uint_ne(va[i], 0);
        ck_assert_uint_eq(va[i] % G, 0);
        cpu_usable(va[i], 0);
    }
    if (F->host) {
        ck_assert_uint_eq(counts().reservations, 8);
        ck_assert_uint_eq(counts().reserved_bytes, 36 * G);
    }
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 8; j++)
            ck_assert(i == j || va[i] + (size_t)(i + 1) * G <= va[j] ||
                      va[j] + (size_t)(j + 1) * G <= va[i]);
    for (int i = 7; i >= 0; i--)
        OK(D->address_free(C, va[i], (size_t)(i + 1) * G));
    if (F->host) {
        xseg_host_counts c = counts(), zero = {0};
        zero.capacity = F->capacity;
        ck_assert(counts_same(&c, &zero));
    }
}
END_TEST

/* The contract's order: reserve, create, map, set_access, unmap, release,
 * address_free.  A fresh map is inaccessible until set_access, only the
 * mapped range becomes accessible, and an unmapped range is again. */
START_TEST(c_map_order)
{
    uintptr_t va = 0;
    uint64_t h = 0;

    OK(D->reserve(C, 4 * G, &va));
    OK(D->create(C, 2 * G, &h));
    OK(D->map(C, va + G, 2 * G, h));
    cpu_usable(va + G, 0);
    if (F->host)
        ck_assert(faults((volatile char *)(va + 2 * G + 5), 1));
    OK(D->set_access(C, va + G, 2 * G));
    cpu_usable(va + G, 1);
    cpu_usable(va + 3 * G - 4096, 1);
    cpu_usable(va, 0);
    cpu_usable(va + 3 * G, 0);
    if (F->host) {
        ck_assert(faults((volatile char *)(va + 3 * G), 1));
        t_fill_words(va + G, 2 * G, 7);
        ck_assert(t_check_words(va + G, 2 * G, 7));
        xseg_host_counts c = counts();
        ck_assert_uint_eq(c.handles, 1);
        ck_assert_uint_eq(c.handle_bytes, 2 * G);
        ck_assert_uint_eq(c.mappings, 1);
        ck_assert_uint_eq(c.mapped_bytes, 2 * G);
    }
    OK(D->unmap(C, va + G, 2 * G));
    cpu_usable(va + G, 0);
    if (F->host) {
        ck_assert(faults((volatile char *)(va + 2 * G), 1));
        ck_assert_uint_eq(counts().mappings, 0);
        ck_assert_uint_eq(counts().reservations, 1);
    }
    /* the reservation stays: the handle maps again there */
    OK(D->map(C, va, 2 * G, h));
    OK(D->set_access(C, va, 2 * G));
    if (F->host)
        ck_assert(t_check_words(va, 2 * G, 7));
    OK(D->unmap(C, va, 2 * G));
    OK(D->release(C, h));
    OK(D->address_free(C, va, 4 * G));
    if (F->host) {
        xseg_host_counts c = counts(), zero = {0};
        zero.capacity = F->capacity;
        ck_assert(counts_same(&c, &zero));
    }
}
END_TEST

/* One handle mapped at two addresses: both views are the same memory; the
 * data survives unmapping both and mapping elsewhere; handles are distinct. */
START_TEST(c_two_views)
{
    uintptr_t va = 0;
    OK(D->reserve(C, 8 * G, &va));
    uint64_t h = map_new(va, 2 * G);
    if (F->host)
        t_fill_words(va, 2 * G, 1);
    OK(D->map(C, va + 4 * G, 2 * G, h));
    OK(D->set_access(C, va + 4 * G, 2 * G));
    if (F->host) {
        ck_assert(t_check_words(va + 4 * G, 2 * G, 1));
        t_fill_words(va + 4 * G, 2 * G, 2);
        ck_assert(t_check_words(va, 2 * G, 2));
        ck_assert_uint_eq(counts().mappings, 2);
        ck_assert_uint_eq(counts().handles, 1);
    }
    OK(D->unmap(C, va, 2 * G));
    OK(D->unmap(C, va + 4 * G, 2 * G));
    OK(D->map(C, va + 2 * G, 2 * G, h));
    OK(D->set_access(C, va + 2 * G, 2 * G));
    if (F->host)
        ck_assert(t_check_words(va + 2 * G, 2 * G, 2));
    uint64_t h2 = map_new(va + 6 * G, 2 * G);
    ck_assert(h2 != h);
    if (F->host) {
        ck_assert(t_all_zero(va + 6 * G, 2 * G));
        t_fill_words(va + 6 * G, 2 * G, 3);
        ck_assert(t_check_words(va + 2 * G, 2 * G, 2));
    }
    unmap_release(va + 2 * G, 2 * G, h);
    unmap_release(va + 6 * G, 2 * G, h2);
    OK(D->address_free(C, va, 8 * G));
}
END_TEST

/* Adjacent maps of N handles: one set_access and one unmap cover them all
 * (unmap may cover several whole maps); releases in a scattered order. */
START_TEST(c_maps_one_unmap)
{
    enum { N = 16 };
    uintptr_t va = 0;
    uint64_t h[N];

    OK(D->reserve(C, N * G, &va));
    for (int i = 0; i < N; i++) {
        OK(D->create(C, G, &h[i]));
        OK(D->map(C, va + (size_t)i * G, G, h[i]));
    }
    OK(D->set_access(C, va, N * G));
    if (F->host) {
        for (int i = 0; i < N; i++)
            *(int *)(va + (size_t)i * G + 64) = i;
        for (int i = 0; i < N; i++)
            ck_assert_int_eq(*(int *)(va + (size_t)i * G + 64), i);
        ck_assert_uint_eq(counts().mappings, N);
        ck_assert_uint_eq(counts().mapped_bytes, N * G);
    }
    OK(D->unmap(C, va, N * G));
    cpu_usable(va + (N - 1) * G, 0);
    for (int i = 0; i < N; i++)
        OK(D->release(C, h[(i * 7) % N]));
    OK(D->address_free(C, va, N * G));
}
END_TEST

/* CUDA allows releasing a mapped handle: the memory lives until the last
 * map of it is gone (xseg itself always unmaps first). */
START_TEST(c_release_mapped)
{
    uintptr_t va = 0;
    OK(D->reserve(C, 4 * G, &va));
    uint64_t h = map_new(va, G);
    OK(D->map(C, va + 2 * G, G, h));
    if (F->host)
        t_fill_words(va, G, 4);
    OK(D->release(C, h));
    if (F->strict) {
        FAILS(D->release(C, h), XDRV_INVALID_HANDLE);
        FAILS(D->map(C, va + G, G, h), XDRV_INVALID_HANDLE);
    }
    if (F->host) {
        ck_assert(t_check_words(va, G, 4));
        ck_assert_uint_eq(counts().handle_bytes, G); /* still held */
    }
    OK(D->unmap(C, va, G));
    if (F->host)
        ck_assert_uint_eq(counts().handle_bytes, G); /* one map left */
    OK(D->set_access(C, va + 2 * G, G));
    if (F->host)
        ck_assert(t_check_words(va + 2 * G, G, 4));
    OK(D->unmap(C, va + 2 * G, G));
    if (F->host) {
        ck_assert_uint_eq(counts().handle_bytes, 0);
        ck_assert_uint_eq(counts().handles, 0);
    }
    uint64_t h2 = map_new(va, G);
    if (F->host)
        ck_assert(t_all_zero(va, G)); /* the range was given back, not reused dirty */
    unmap_release(va, G, h2);
    OK(D->address_free(C, va, 4 * G));
}
END_TEST

/* ---- failures have no effect --------------------------------------------------- */

/* Sizes and addresses off the granularity, maps that do not fit: refused,
 * and afterwards everything works as if they had not been tried. */
START_TEST(c_invalid_sizes)
{
    uintptr_t va = 0, va2 = 0;
    uint64_t h = 0, h2 = 0, h3 = 0;

    FAILS_EXACT(D->reserve(C, 0, &va), XDRV_INVALID_VALUE);
    FAILS_EXACT(D->reserve(C, G + 4096, &va), XDRV_INVALID_VALUE);
    FAILS_EXACT(D->reserve(C, G + 1, &va), XDRV_INVALID_VALUE);
    FAILS_EXACT(D->reserve(C, G, NULL), XDRV_INVALID_VALUE);
    FAILS_EXACT(D->create(C, 0, &h), XDRV_INVALID_VALUE);
    FAILS_EXACT(D->create(C, G / 2, &h), XDRV_INVALID_VALUE);
    FAILS_EXACT(D->create(C, G, NULL), XDRV_INVALID_VALUE);
    OK(D->reserve(C, 4 * G, &va));
    OK(D->create(C, 2 * G, &h));
    OK(D->create(C, G, &h2));
    FAILS_EXACT(D->map(C, va, G / 2, h), XDRV_INVALID_VALUE);            /* unaligned size */
    FAILS_EXACT(D->map(C, va + 4096, 2 * G, h), XDRV_INVALID_VALUE);     /* unaligned address */
    FAILS(D->map(C, va, 2 * G, h2), XDRV_INVALID_VALUE);           /* larger than the handle */
    FAILS_EXACT(D->set_access(C, va, G / 2), XDRV_INVALID_VALUE);
    FAILS_EXACT(D->unmap(C, va, G + 1), XDRV_INVALID_VALUE);
    FAILS_EXACT(D->address_free(C, va, 0), XDRV_INVALID_VALUE);
    FAILS_EXACT(D->address_free(C, va + 4096, 4 * G), XDRV_INVALID_VALUE);
    OK(D->map(C, va + G, 2 * G, h));
    OK(D->set_access(C, va + G, 2 * G));
    if (F->host)
        t_fill_words(va + G, 2 * G, 9);
    FAILS(D->map(C, va + G, G, h2), XDRV_INVALID_VALUE);           /* already mapped */
    FAILS(D->map(C, va + 2 * G, G, h2), XDRV_INVALID_VALUE);       /* overlaps */
    FAILS(D->set_access(C, va, 2 * G), XDRV_INVALID_VALUE);        /* half mapped */
    FAILS(D->set_access(C, va + 3 * G, G), XDRV_INVALID_VALUE);    /* not mapped */
    FAILS(D->unmap(C, va + G, G), XDRV_INVALID_VALUE);             /* part of a map */
    FAILS(D->unmap(C, va + 2 * G, G), XDRV_INVALID_VALUE);         /* part of a map */
    FAILS_EXACT(D->unmap(C, va + G + 4096, 2 * G), XDRV_INVALID_VALUE);
    /* nothing changed: the map holds its data, the other handle maps once */
    if (F->host) {
        ck_assert(xseg_host_is_accessible(C, va + G));
        ck_assert(t_check_words(va + G, 2 * G, 9));
    }
    OK(D->map(C, va + 3 * G, G, h2));
    OK(D->create(C, G, &h3));
    FAILS(D->map(C, va + 3 * G, G, h3), XDRV_INVALID_VALUE);       /* already mapped */
    OK(D->release(C, h3));
    OK(D->set_access(C, va + G, 3 * G));
    OK(D->unmap(C, va + G, 3 * G));
    OK(D->release(C, h));
    OK(D->release(C, h2));
    /* a second reservation is untouched by the first's failures */
    OK(D->reserve(C, 2 * G, &va2));
    OK(D->address_free(C, va2, 2 * G));
    OK(D->address_free(C, va, 4 * G));
}
END_TEST

/* Misuse the host backend promises to refuse (CUDA's answers to these are
 * its own): made-up, released and recycled handle ids, ranges outside a
 * reservation, address_free of a mapped or partly given range. */
START_TEST(c_invalid_handles_ranges)
{
    uintptr_t va = 0, gone = 0;
    uint64_t h1 = 0, h2 = 0, dead = 0, h = 0;

    FAILS(D->reserve(C, SIZE_MAX & ~(G - 1), &va), XDRV_INVALID_VALUE);
    FAILS(D->release(C, 0), XDRV_INVALID_HANDLE);
    FAILS(D->release(C, 12345), XDRV_INVALID_HANDLE);
    FAILS(D->release(C, UINT64_MAX), XDRV_INVALID_HANDLE);
    OK(D->create(C, G, &h));
    OK(D->release(C, h));
    FAILS(D->release(C, h), XDRV_INVALID_HANDLE);
    /* a recycled slot gets a new id: the stale one stays invalid */
    OK(D->create(C, G, &h2));
    ck_assert(h2 != h);
    FAILS(D->release(C, h), XDRV_INVALID_HANDLE);
    OK(D->release(C, h2));

    OK(D->reserve(C, 4 * G, &va));
    OK(D->reserve(C, 2 * G, &gone));
    OK(D->address_free(C, gone, 2 * G));
    OK(D->create(C, 2 * G, &h1));
    OK(D->create(C, G, &h2));
    OK(D->create(C, G, &dead));
    OK(D->release(C, dead));
    FAILS(D->map(C, va, G, h1), XDRV_INVALID_VALUE);              /* smaller than the handle */
    FAILS(D->map(C, va, 4 * G, h1), XDRV_INVALID_VALUE);
    FAILS(D->map(C, va + 3 * G, 2 * G, h1), XDRV_INVALID_VALUE);  /* past the end */
    FAILS(D->map(C, gone, 2 * G, h1), XDRV_INVALID_VALUE);        /* given back */
    FAILS(D->map(C, va, G, dead), XDRV_INVALID_HANDLE);
    FAILS(D->map(C, va, G, 999), XDRV_INVALID_HANDLE);
    OK(D->map(C, va + G, 2 * G, h1));
    OK(D->set_access(C, va + G, 2 * G));
    FAILS(D->map(C, va + G, 2 * G, h1), XDRV_INVALID_VALUE);      /* the same map twice */
    FAILS(D->map(C, va, 2 * G, h1), XDRV_INVALID_VALUE);          /* overlaps */
    FAILS(D->unmap(C, va + G, 3 * G), XDRV_INVALID_VALUE);        /* + unmapped */
    FAILS(D->unmap(C, va, 3 * G), XDRV_INVALID_VALUE);            /* CUDA unmaps this */
    FAILS(D->set_access(C, gone, G), XDRV_INVALID_VALUE);
    FAILS(D->unmap(C, gone, G), XDRV_INVALID_VALUE);
    FAILS(D->address_free(C, va, 4 * G), XDRV_INVALID_VALUE);     /* still mapped */
    FAILS(D->address_free(C, va, 2 * G), XDRV_INVALID_VALUE);     /* wrong size */
    FAILS(D->address_free(C, va + G, 3 * G), XDRV_INVALID_VALUE);
    FAILS(D->address_free(C, gone, 2 * G), XDRV_INVALID_VALUE);   /* twice */
    ck_assert(xseg_host_is_accessible(C, va + G));
    OK(D->unmap(C, va + G, 2 * G));
    OK(D->release(C, h1));
    OK(D->release(C, h2));
    OK(D->address_free(C, va, 4 * G));
}
END_TEST

/* A create past the device's memory fails with OUT_OF_MEMORY, writes no
 * handle and changes nothing; a create that fits still works. */
START_TEST(c_out_of_memory)
{
    size_t f = 0, t = 0, f2 = 0, t2 = 0;
    uint64_t spare = 77, h = 0;

    OK(D->mem_info(C, &f, &t));
    size_t big = (t / G + 1) * G;
    FAILS_EXACT(D->create(C, big, &spare), XDRV_OUT_OF_MEMORY);
    ck_assert_uint_eq(spare, 77);
    if (F->host) {
        FAILS(D->create(C, (f / G + 1) * G, &spare), XDRV_OUT_OF_MEMORY);
        ck_assert_uint_eq(spare, 77);
    }
    OK(D->mem_info(C, &f2, &t2));
    ck_assert_uint_eq(t2, t);
    OK(D->create(C, G, &h));
    OK(D->release(C, h));
}
END_TEST

/* free <= total; creating and mapping s bytes lowers free by s (exactly on
 * simulated memory; within s/8 on a device others may use), total stays;
 * releasing gives it back. */
START_TEST(c_mem_info)
{
    size_t f0 = 0, t0 = 0, f1 = 0, t1 = 0, f2 = 0, t2 = 0;
    uintptr_t va = 0;
    uint64_t h = 0;

    OK(D->mem_info(C, &f0, &t0));
    ck_assert_uint_gt(t0, 0);
    ck_assert_uint_le(f0, t0);
    size_t s = 512 * MIB < f0 / 4 ? 512 * MIB : f0 / 4;
    s = s / G * G;
    ck_assert_uint_gt(s, 0);
    size_t tol = F->host ? 0 : s / 8;
    if (F->host) {
        ck_assert_uint_eq(t0, F->capacity);
        ck_assert_uint_eq(f0, F->capacity);
    }
    OK(D->reserve(C, s, &va));
    OK(D->create(C, s, &h));
    OK(D->map(C, va, s, h));
    OK(D->set_access(C, va, s));
    OK(D->mem_info(C, &f1, &t1));
    ck_assert_uint_eq(t1, t0);
    ck_assert_msg(f1 + s - tol <= f0 && f1 + s + tol >= f0,
                  "%s: free %zu -> %zu while %zu bytes are mapped", F->name, f0, f1, s);
    unmap_release(va, s, h);
    OK(D->address_free(C, va, s));
    OK(D->mem_info(C, &f2, &t2));
    ck_assert_uint_eq(t2, t0);
    ck_assert_msg(f2 + tol >= f0 && f2 <= f0 + tol, "%s: free %zu before, %zu after release",
                  F->name, f0, f2);
}
END_TEST

/* ---- events ------------------------------------------------------------------------ */

/* Never recorded: complete.  Recorded (many times) on the NULL stream:
 * complete or pending; complete after event_sync or stream_sync. */
START_TEST(c_events)
{
    void *e[3];
    for (int i = 0; i < 3; i++) {
        OK(D->event_create(C, &e[i]));
        ck_assert_ptr_nonnull(e[i]);
    }
    ck_assert(e[0] != e[1] && e[1] != e[2] && e[0] != e[2]);
    if (F->host)
        ck_assert_uint_eq(counts().events, 3);
    OK(D->event_query(C, e[0]));
    for (int round = 0; round < 3; round++) {
        OK(D->event_record(C, e[0], NULL));
        int q = D->event_query(C, e[0]);
        ck_assert_msg(q == XDRV_SUCCESS || q == XDRV_NOT_READY, "%s: query: %d", F->name, q);
        OK(D->event_sync(C, e[0]));
        OK(D->event_query(C, e[0]));
    }
    OK(D->event_record(C, e[1], NULL));
    OK(D->event_record(C, e[2], NULL));
    OK(D->stream_sync(C, NULL));
    OK(D->event_query(C, e[1]));
    OK(D->event_query(C, e[2]));
    OK(D->event_sync(C, e[1])); /* complete already: returns at once */
    for (int i = 0; i < 3; i++)
        OK(D->event_destroy(C, e[i]));
    if (F->host)
        ck_assert_uint_eq(counts().events, 0);
    OK(D->stream_sync(C, NULL)); /* nothing recorded */
}
END_TEST

START_TEST(c_bad_events)
{
    FAILS_EXACT(D->event_create(C, NULL), XDRV_INVALID_VALUE);
    FAILS_EXACT(D->event_record(C, NULL, NULL), XDRV_INVALID_HANDLE);
    FAILS_EXACT(D->event_query(C, NULL), XDRV_INVALID_HANDLE);
    FAILS_EXACT(D->event_sync(C, NULL), XDRV_INVALID_HANDLE);
    FAILS_EXACT(D->event_destroy(C, NULL), XDRV_INVALID_HANDLE);
}
END_TEST

/* Strict fixtures: a pointer that is no event of this context. */
START_TEST(c_stale_events)
{
    uint64_t junk[64] = {0};
    FAILS(D->event_record(C, junk, NULL), XDRV_INVALID_HANDLE);
    FAILS(D->event_query(C, junk), XDRV_INVALID_HANDLE);
    FAILS(D->event_sync(C, junk), XDRV_INVALID_HANDLE);
    FAILS(D->event_destroy(C, junk), XDRV_INVALID_HANDLE);
}
END_TEST

/* ---- threads, churn ------------------------------------------------------------------ */

/* Every operation from a thread that never used the driver before (CUDA: no
 * current context on it). */
struct thread_result {
    int mem_info, reserve, create, map, access, unmap, release, address_free;
    int ev_create, ev_record, ev_sync, ev_destroy, stream_sync;
};

static void *fresh_thread(void *arg)
{
    struct thread_result *r = arg;
    size_t f = 0, t = 0;
    uintptr_t va = 0;
    uint64_t h = 0;
    void *ev = NULL;

    r->mem_info = D->mem_info(C, &f, &t);
    r->reserve = D->reserve(C, G, &va);
    r->create = D->create(C, G, &h);
    r->map = D->map(C, va, G, h);
    r->access = D->set_access(C, va, G);
    r->unmap = D->unmap(C, va, G);
    r->release = D->release(C, h);
    r->address_free = D->address_free(C, va, G);
    r->ev_create = D->event_create(C, &ev);
    r->ev_record = D->event_record(C, ev, NULL);
    r->ev_sync = D->event_sync(C, ev);
    r->ev_destroy = D->event_destroy(C, ev);
    r->stream_sync = D->stream_sync(C, NULL);
    return NULL;
}

START_TEST(c_fresh_thread)
{
    struct thread_result r;
    pthread_t t;
    memset(&r, 0xff, sizeof r);
    ck_assert_int_eq(pthread_create(&t, NULL, fresh_thread, &r), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_int_eq(r.mem_info, XDRV_SUCCESS);
    ck_assert_int_eq(r.reserve, XDRV_SUCCESS);
    ck_assert_int_eq(r.create, XDRV_SUCCESS);
    ck_assert_int_eq(r.map, XDRV_SUCCESS);
    ck_assert_int_eq(r.access, XDRV_SUCCESS);
    ck_assert_int_eq(r.unmap, XDRV_SUCCESS);
    ck_assert_int_eq(r.release, XDRV_SUCCESS);
    ck_assert_int_eq(r.address_free, XDRV_SUCCESS);
    ck_assert_int_eq(r.ev_create, XDRV_SUCCESS);
    ck_assert_int_eq(r.ev_record, XDRV_SUCCESS);
    ck_assert_int_eq(r.ev_sync, XDRV_SUCCESS);
    ck_assert_int_eq(r.ev_destroy, XDRV_SUCCESS);
    ck_assert_int_eq(r.stream_sync, XDRV_SUCCESS);
}
END_TEST

/* Random maps and unmaps of 1..4 granules against a model of the granules:
 * a map that overlaps a live one fails (strict fixtures also try maps that
 * run past the reservation), an unmap takes a whole map.  Host contexts
 * check every granule's accessibility against the model at every step. */
START_TEST(c_map_churn)
{
    enum { P = 256 };
    int steps = RUNNING_ON_VALGRIND ? 400 : 3000;
    uintptr_t va = 0;
    static int start[P], len[P], acc[P]; /* model: per granule, its map's start or -1 */
    static uint64_t hd[P];
    uint64_t x = 88172645463325252ULL;

    OK(D->reserve(C, (size_t)P * G, &va));
    for (int i = 0; i < P; i++)
        start[i] = -1;
    for (int s = 0; s < steps; s++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int p = (int)(x % P), n = 1 + (int)((x >> 20) % 4);
        if (start[p] >= 0) { /* unmap the map covering p */
            int b = start[p], m = len[b];
            unmap_release(va + (size_t)b * G, (size_t)m * G, hd[b]);
            for (int i = b; i < b + m; i++)
                start[i] = -1;
            continue;
        }
        if (!F->strict && p + n > P)
            n = P - p;
        int fits = p + n <= P;
        for (int i = p; fits && i < p + n; i++)
            fits = start[i] < 0;
        uint64_t h = 0;
        OK(D->create(C, (size_t)n * G, &h));
        if (!fits) {
            FAILS(D->map(C, va + (size_t)p * G, (size_t)n * G, h), XDRV_INVALID_VALUE);
            OK(D->release(C, h));
            continue;
        }
        OK(D->map(C, va + (size_t)p * G, (size_t)n * G, h));
        acc[p] = (int)(x & 1);
        if (acc[p])
            OK(D->set_access(C, va + (size_t)p * G, (size_t)n * G));
        hd[p] = h;
        len[p] = n;
        for (int i = p; i < p + n; i++)
            start[i] = p;
        for (int i = 0; F->host && i < P; i++)
            ck_assert_int_eq(xseg_host_is_accessible(C, va + (size_t)i * G + 99),
                             start[i] >= 0 && acc[start[i]]);
    }
    size_t mapped = 0;
    for (int i = 0; i < P; i++)
        mapped += start[i] >= 0;
    if (F->host) {
        ck_assert_uint_eq(counts().mapped_bytes, mapped * G);
        ck_assert_uint_eq(counts().handle_bytes, mapped * G);
        for (int i = 0; i < P; i++) /* accessible maps hold real memory */
            if (start[i] >= 0 && acc[start[i]])
                *(volatile char *)(va + (size_t)i * G) = 1;
    }
    for (int i = 0; i < P; i++) /* give everything back in the contract's order */
        if (start[i] == i)
            unmap_release(va + (size_t)i * G, (size_t)len[i] * G, hd[i]);
    OK(D->address_free(C, va, (size_t)P * G));
    if (F->host) {
        xseg_host_counts c = counts(), zero = {0};
        zero.capacity = F->capacity;
        ck_assert(counts_same(&c, &zero));
    }
}
END_TEST

/* ---- driver-independent ------------------------------------------------------------- */

START_TEST(c_code_names)
{
    ck_assert_str_eq(xseg_drv_code_name(XDRV_SUCCESS), "CUDA_SUCCESS");
    ck_assert_str_eq(xseg_drv_code_name(XDRV_INVALID_DEVICE), "CUDA_ERROR_INVALID_DEVICE");
    ck_assert_str_eq(xseg_drv_code_name(XDRV_NOT_READY), "CUDA_ERROR_NOT_READY");
    ck_assert_str_eq(xseg_drv_code_name(XDRV_UNKNOWN), "CUDA_ERROR_UNKNOWN");
    ck_assert_ptr_nonnull(xseg_drv_code_name(12345));
    ck_assert_ptr_nonnull(xseg_drv_code_name(-1));
    /* the fault wrapper names codes as the table it wraps does */
    ck_assert_ptr_eq(fault_driver.error_name, xseg_driver_host.error_name);
}
END_TEST

/* ---- suites --------------------------------------------------------------------------- */

/* The contract's tests on one fixture. */
static TCase *fixture_tcase(const fixture *f, void (*setup)(void))
{
    TCase *tc = tcase_create(f->name);
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, c_init_errors);
    tcase_add_test(tc, c_granularity);
    tcase_add_test(tc, c_error_names);
    tcase_add_test(tc, c_reserve);
    tcase_add_test(tc, c_map_order);
    tcase_add_test(tc, c_two_views);
    tcase_add_test(tc, c_maps_one_unmap);
    tcase_add_test(tc, c_release_mapped);
    tcase_add_test(tc, c_invalid_sizes);
    tcase_add_test(tc, c_out_of_memory);
    tcase_add_test(tc, c_mem_info);
    tcase_add_test(tc, c_events);
    tcase_add_test(tc, c_bad_events);
    tcase_add_test(tc, c_fresh_thread);
    tcase_add_test(tc, c_map_churn);
    if (f->strict) {
        tcase_add_test(tc, c_invalid_handles_ranges);
        tcase_add_test(tc, c_stale_events);
    }
    return tc;
}

static int run(Suite *s, int nofork)
{
    SRunner *sr = srunner_create(s);
    if (nofork)
        srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed;
}

int main(void)
{
    Suite *s = suite_create("driver_contract");
    TCase *common = tcase_create("common");
    tcase_add_test(common, c_code_names);
    suite_add_tcase(s, common);
    suite_add_tcase(s, fixture_tcase(&k_host, setup_host));
    suite_add_tcase(s, fixture_tcase(&k_fault, setup_fault));
    int failed = run(s, 0);

    /* CUDA cannot be used in a child forked after cuInit (which the
     * availability probe calls): its own runner, in this process. */
    k_cuda.drv = xseg_driver_cuda_ptr;
    if (k_cuda.drv == NULL || !xseg_cuda_available()) {
        fprintf(stderr, "test_driver_contract: cuda fixture SKIPPED: %s\n",
                k_cuda.drv == NULL ? "built without the CUDA toolkit" : "no usable CUDA device");
    } else {
        Suite *sc = suite_create("driver_contract_cuda");
        suite_add_tcase(sc, fixture_tcase(&k_cuda, setup_cuda));
        failed += run(sc, 1);
    }
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
