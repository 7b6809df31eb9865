/* lock.h: the allocator's lock: a futex-based mutex ("Futexes Are Tricky",
 * Drepper, mutex 3) that spins briefly before sleeping.  Most critical
 * sections it guards are short (a free-index search, a split, a coalesce:
 * tens to hundreds of nanoseconds), so a waiter usually gets the lock while
 * spinning.  Some are long: the lock is held across driver calls (create,
 * map, set_access, unmap, release), event queries and, on the cap, the OOM
 * retry ladder and trim, event and stream synchronisations that wait for
 * the GPU; a waiter then sleeps in the kernel after XLOCK_SPINS pauses
 * rather than spinning through them.  Uncontended lock and unlock are one
 * atomic instruction each. */
#ifndef XSEG_LOCK_H
#define XSEG_LOCK_H

#include <linux/futex.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef struct xlock {
    atomic_int state; /* 0 free, 1 locked, 2 locked and maybe waiters */
} xlock;

#define XLOCK_SPINS 200

static inline void xlock_init(xlock *l)
{
    atomic_init(&l->state, 0);
}

static inline void xlock_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static inline int xlock_try(xlock *l)
{
    int c = 0;
    return atomic_compare_exchange_strong_explicit(&l->state, &c, 1, memory_order_acquire,
                                                   memory_order_relaxed);
}

static void xlock_slow(xlock *l)
{
    for (int i = 0; i < XLOCK_SPINS; i++) {
        if (atomic_load_explicit(&l->state, memory_order_relaxed) == 0 && xlock_try(l))
            return;
        xlock_pause();
    }
    while (atomic_exchange_explicit(&l->state, 2, memory_order_acquire) != 0)
        syscall(SYS_futex, &l->state, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
}

static inline void xlock_lock(xlock *l)
{
    if (!xlock_try(l))
        xlock_slow(l);
}

static inline void xlock_unlock(xlock *l)
{
    if (atomic_fetch_sub_explicit(&l->state, 1, memory_order_release) != 1) {
        atomic_store_explicit(&l->state, 0, memory_order_release);
        syscall(SYS_futex, &l->state, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    }
}

#endif
