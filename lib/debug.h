/* debug.h: XSEG_ASSERT, the library's assertion, active only in debug
 * builds (cmake -DXSEG_DEBUG=ON defines XSEG_DEBUG for the library).
 *
 * In a debug build a false assertion prints the expression, file and line
 * to stderr and aborts: a debug build exists to stop at the first broken
 * invariant, where the state still shows what broke it.  In a release build
 * XSEG_ASSERT evaluates nothing (the expression is only type-checked) and
 * never prints or aborts, so an assertion may sit on a hot path and must
 * have no side effects.  xseg_check (check.c) is the walker over the whole
 * state, in every build. */
#ifndef XSEG_DEBUG_H
#define XSEG_DEBUG_H

#ifdef XSEG_DEBUG
#include <stdio.h>
#include <stdlib.h>

__attribute__((noreturn, cold)) static inline void xseg_assert_fail(const char *expr,
                                                                   const char *file, int line)
{
    fprintf(stderr, "xseg: assertion failed: %s (%s:%d)\n", expr, file, line);
    abort();
}

#define XSEG_ASSERT(e) ((e) ? (void)0 : xseg_assert_fail(#e, __FILE__, __LINE__))
#define XSEG_DEBUG_ON 1
#else
#define XSEG_ASSERT(e) ((void)sizeof(!(e)))
#define XSEG_DEBUG_ON 0
#endif

#endif
