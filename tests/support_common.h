/* support_common.h: helpers shared by the Check suites: host allocators,
 * data patterns written into live blocks, fault probing, stats access. */
#ifndef XSEG_SUPPORT_COMMON_H
#define XSEG_SUPPORT_COMMON_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "xseg.h"

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

/* A host-backend allocator with `extra` conf appended (may be NULL). */
xseg_t *t_host(const char *extra);
/* Stats snapshot (asserts success). */
xseg_stats t_stats(xseg_t *xs);
/* Host backend context of an allocator (for driver_host.h controls). */
void *t_host_ctx(xseg_t *xs);

/* Write a pattern derived from `seed` at the head, the tail and every
 * 64 KiB of [p, p + n); check it; both touch the memory. */
void t_fill(void *p, size_t n, uint32_t seed);
int t_check(const void *p, size_t n, uint32_t seed);

/* 1 if reading the byte at p faults (SIGSEGV/SIGBUS), 0 if it reads. */
int t_faults(const void *p);

/* Run a Check suite with CK_NORMAL output; returns the process exit code. */
int t_run(Suite *s);

#endif
