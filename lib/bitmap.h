/* bitmap.h: word-at-a-time bit range helpers for the page mapping state. */
#ifndef XSEG_BITMAP_H
#define XSEG_BITMAP_H

#include <stddef.h>
#include <stdint.h>

/* Mask of bits [lo, hi) within one 64-bit word, 0 <= lo < hi <= 64. */
static inline uint64_t xbm_mask(size_t lo, size_t hi)
{
    uint64_t m = hi >= 64 ? ~0ull : ((1ull << hi) - 1);
    return m & ~((1ull << lo) - 1);
}

/* Number of set bits in [p0, p1). */
static inline size_t xbm_count(const uint64_t *w, size_t p0, size_t p1)
{
    size_t n = 0;
    while (p0 < p1) {
        size_t wi = p0 >> 6, lo = p0 & 63;
        size_t hi = (p1 - (p0 - lo)) >= 64 ? 64 : p1 - (p0 - lo);
        n += (size_t)__builtin_popcountll(w[wi] & xbm_mask(lo, hi));
        p0 += hi - lo;
    }
    return n;
}

/* First bit in [p, end) whose value is `val`, or end. */
static inline size_t xbm_next(const uint64_t *w, size_t p, size_t end, int val)
{
    while (p < end) {
        size_t wi = p >> 6, lo = p & 63;
        uint64_t x = (val ? w[wi] : ~w[wi]) & xbm_mask(lo, 64);
        if (x) {
            size_t r = (wi << 6) + (size_t)__builtin_ctzll(x);
            return r < end ? r : end;
        }
        p = (wi + 1) << 6;
    }
    return end;
}

static inline void xbm_set(uint64_t *w, size_t p0, size_t p1, int val)
{
    while (p0 < p1) {
        size_t wi = p0 >> 6, lo = p0 & 63;
        size_t hi = (p1 - (p0 - lo)) >= 64 ? 64 : p1 - (p0 - lo);
        if (val)
            w[wi] |= xbm_mask(lo, hi);
        else
            w[wi] &= ~xbm_mask(lo, hi);
        p0 += hi - lo;
    }
}

#endif
