/* support_common.h: helpers shared by the Check suites: host allocators,
 * data patterns written into live blocks, fault probing, stats access. */
#ifndef XSEG_SUPPORT_COMMON_H
#define XSEG_SUPPORT_COMMON_H

#include <check.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "xseg.h"

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

/* A host-backend allocator with `extra` conf appended (may be NULL). */
xseg_t *t_host(const char *extra);
/* Stats snapshot (asserts success). */
xseg_stats t_stats(xseg_t *xs);
/* xseg_check passes (whether or not checking is on), or the test fails
 * with its message. */
void t_check_ok(xseg_t *xs);
/* Host backend context of an allocator (for driver_host.h controls). */
void *t_host_ctx(xseg_t *xs);

/* Write a pattern derived from `seed` at the head, the tail and every
 * 64 KiB of [p, p + n); check it; both touch the memory. */
void t_fill(void *p, size_t n, uint32_t seed);
int t_check(const void *p, size_t n, uint32_t seed);

/* Driver-level patterns over a mapped range: a word from `seed` every
 * 4 KiB (write, check), and whether every byte reads 0. */
void t_fill_words(uintptr_t va, size_t size, unsigned seed);
int t_check_words(uintptr_t va, size_t size, unsigned seed);
int t_all_zero(uintptr_t va, size_t size);

/* The i-th size of a fixed sequence, log-uniform from 512 B to 32 MiB: a
 * ring of live tensors of mixed sizes (test_slack, test_replay_json). */
size_t t_ring_size(unsigned i);

/* 1 if reading the byte at p faults (SIGSEGV/SIGBUS), 0 if it reads. */
int t_faults(const void *p);

/* Run a program (argv[0], the path) with stdout to /dev/null and stderr into
 * the file errpath; returns its exit status, or 128 + the signal that ended
 * it, and copies at most errcap - 1 bytes of its stderr into err. */
int t_spawn(char *const argv[], const char *errpath, char *err, size_t errcap);

/* Run a Check suite with CK_NORMAL output; returns the process exit code. */
int t_run(Suite *s);

/* xseg_check after an operation, when checking is on: in debug builds
 * (XSEG_DEBUG, the tools/ci/debug stage) or with XSEG_TEST_CHECK=1 in the
 * environment.  T_CHECK asserts XSEG_OK; t_check_failed gives the broken
 * invariant's message ("" when fine or off) for suites that collect
 * violations instead of asserting. */
static inline int t_checking(void)
{
#ifdef XSEG_DEBUG
    return 1;
#else
    static _Atomic int on = -1;
    int v = atomic_load_explicit(&on, memory_order_relaxed);
    if (v < 0) {
        const char *e = getenv("XSEG_TEST_CHECK");
        v = e && e[0] == '1' && !e[1];
        atomic_store_explicit(&on, v, memory_order_relaxed);
    }
    return v;
#endif
}
static inline const char *t_check_failed(xseg_t *xs)
{
    return t_checking() && xseg_check(xs) != XSEG_OK ? xseg_last_error() : "";
}
#define T_CHECK(xs)                                                                  \
    do {                                                                             \
        if (t_checking())                                                            \
            ck_assert_msg(xseg_check(xs) == XSEG_OK, "%s", xseg_last_error());      \
    } while (0)

#endif
