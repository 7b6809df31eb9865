/* freeidx.c: two-level segregated free index of blocks (TLSF-like).
 * First level: floor(log2(size)); second level: 32 linear sub-ranges.
 * Bitmaps locate the next non-empty bucket in O(1); the request's own
 * bucket is searched a few entries deep for an exact or best fit, since
 * real workloads repeat the same sizes. */
#include <string.h>

#include "debug.h"
#include "internal.h"

#define XFI_SCAN 8

static inline void mapping(size_t size, unsigned *fl, unsigned *sl)
{
    unsigned f = 63u - (unsigned)__builtin_clzll((unsigned long long)size);
    *fl = f;
    *sl = f < XSEG_SL_BITS ? 0 : (unsigned)((size >> (f - XSEG_SL_BITS)) & (XSEG_SL_COUNT - 1));
}

void xfi_bucket(size_t size, unsigned *fl, unsigned *sl)
{
    mapping(size, fl, sl);
}

void xfi_init(xfreeidx *f)
{
    memset(f, 0, sizeof *f);
}

void xfi_insert(xfreeidx *f, xblock *b)
{
    unsigned fl, sl;
    XSEG_ASSERT(b->size >= XSEG_MIN_BLOCK && !b->fprev && !b->fnext);
    mapping(b->size, &fl, &sl);
    xblock *h = f->heads[fl][sl];
    XSEG_ASSERT(b != h);
    b->fprev = NULL;
    b->fnext = h;
    if (h)
        h->fprev = b;
    f->heads[fl][sl] = b;
    f->sl_bits[fl] |= 1u << sl;
    f->fl_bits |= 1ull << fl;
    f->count++;
    f->bytes += b->size;
}

void xfi_remove(xfreeidx *f, xblock *b)
{
    unsigned fl, sl;
    mapping(b->size, &fl, &sl);
    XSEG_ASSERT(f->count > 0 && f->bytes >= b->size);
    XSEG_ASSERT(b->fprev ? b->fprev->fnext == b : f->heads[fl][sl] == b);
    XSEG_ASSERT(!b->fnext || b->fnext->fprev == b);
    if (b->fprev)
        b->fprev->fnext = b->fnext;
    else
        f->heads[fl][sl] = b->fnext;
    if (b->fnext)
        b->fnext->fprev = b->fprev;
    b->fprev = b->fnext = NULL;
    if (!f->heads[fl][sl]) {
        f->sl_bits[fl] &= ~(1u << sl);
        if (!f->sl_bits[fl])
            f->fl_bits &= ~(1ull << fl);
    }
    f->count--;
    f->bytes -= b->size;
}

/* Best fit among the first few blocks of the request's own bucket. */
static xblock *scan_bucket(xblock *b, size_t size, size_t max_size)
{
    xblock *best = NULL;
    for (int i = 0; b && i < XFI_SCAN; b = b->fnext, i++) {
        if (b->size < size || b->size > max_size)
            continue;
        if (!best || b->size < best->size || (b->size == best->size && b->addr < best->addr))
            best = b;
        if (b->size == size)
            break;
    }
    return best;
}

xblock *xfi_find(xfreeidx *f, size_t size, size_t max_size)
{
    unsigned fl, sl;
    if (!f->fl_bits)
        return NULL;
    mapping(size, &fl, &sl);
    xblock *b = scan_bucket(f->heads[fl][sl], size, max_size);
    if (b)
        return b;
    /* Every block of a later bucket is larger than `size`. */
    uint32_t sm = sl + 1 < XSEG_SL_COUNT ? f->sl_bits[fl] & (~0u << (sl + 1)) : 0;
    if (!sm) {
        uint64_t fm = fl + 1 < 64 ? f->fl_bits & (~0ull << (fl + 1)) : 0;
        if (!fm)
            return NULL;
        fl = (unsigned)__builtin_ctzll(fm);
        sm = f->sl_bits[fl];
    }
    sl = (unsigned)__builtin_ctz(sm);
    XSEG_ASSERT(f->heads[fl][sl] != NULL);
    return scan_bucket(f->heads[fl][sl], size, max_size);
}

size_t xfi_largest(const xfreeidx *f)
{
    if (!f->fl_bits)
        return 0;
    unsigned fl = 63u - (unsigned)__builtin_clzll(f->fl_bits);
    unsigned sl = 31u - (unsigned)__builtin_clz(f->sl_bits[fl]);
    size_t best = 0;
    for (const xblock *b = f->heads[fl][sl]; b; b = b->fnext)
        if (b->size > best)
            best = b->size;
    return best;
}

size_t xfi_top(const xfreeidx *f, xblock **out, size_t max)
{
    size_t n = 0;
    uint64_t fm = f->fl_bits;
    while (fm && n < max) {
        unsigned fl = 63u - (unsigned)__builtin_clzll(fm);
        uint32_t sm = f->sl_bits[fl];
        while (sm && n < max) {
            unsigned sl = 31u - (unsigned)__builtin_clz(sm);
            for (xblock *b = f->heads[fl][sl]; b && n < max; b = b->fnext)
                out[n++] = b;
            sm &= ~(1u << sl);
        }
        fm &= ~(1ull << fl);
    }
    return n;
}
