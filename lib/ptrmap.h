/* ptrmap.h: the library's one open-addressing hash map, from 64-bit keys
 * (addresses or integers) to 64-bit words: live allocations (free and
 * record_stream lookups), stream states, the host backend's page, size and
 * stream maps, and the trace reader's id maps.  Linear probing with
 * backward-shift deletion: no tombstones, O(1).  A zeroed map is a valid
 * empty one (integer keys); its table comes with the first put. */
#ifndef XSEG_PTRMAP_H
#define XSEG_PTRMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct xseg_ptrmap {
    uintptr_t *keys;   /* 0 = empty slot; key 0 is stored out of line */
    uintptr_t *vals;
    size_t mask;       /* capacity - 1 (capacity is a power of two) */
    size_t count;
    int has_zero;      /* key 0 (the NULL stream) present */
    uintptr_t zero_val;
    unsigned shift;    /* low key bits dropped before hashing: 4 for addresses */
    unsigned fail_puts; /* tests: the next this many puts of a new key fail as a
                           growth without host memory would (map unchanged) */
} xseg_ptrmap;

/* The hashing and deletion rules, shared with tables of larger entries that
 * probe the same way (tcache.c's fixed per-thread table of live blocks). */
static inline size_t xseg_ptrmap_home(uintptr_t key, unsigned shift, size_t mask)
{
    return (size_t)(((uint64_t)(key >> shift) * 0x9E3779B97F4A7C15ull) >> 20) & mask;
}

/* Backward-shift deletion: may the entry at j, whose home slot is `home`,
 * move back into the hole at `hole`?  (Not when home lies cyclically in
 * (hole, j].) */
static inline int xseg_ptrmap_movable(size_t hole, size_t home, size_t j)
{
    return hole <= j ? (home <= hole || home > j) : (home <= hole && home > j);
}

/* A map of addresses (16-byte aligned: their low 4 bits do not hash). */
int xseg_ptrmap_init(xseg_ptrmap *m, size_t capacity_hint);
/* A map of integer keys (every bit hashes); same as a zeroed map. */
int xseg_ptrmap_init_ints(xseg_ptrmap *m, size_t capacity_hint);
/* Room for `extra` new keys: the next that many puts cannot fail.  0 or -1. */
int xseg_ptrmap_reserve(xseg_ptrmap *m, size_t extra);
void xseg_ptrmap_fini(xseg_ptrmap *m);
/* Returns 0, or -1 when memory for growth is missing (map unchanged). */
int xseg_ptrmap_put(xseg_ptrmap *m, uintptr_t key, uintptr_t val);
/* 1 and *val when found, 0 otherwise. */
int xseg_ptrmap_get(const xseg_ptrmap *m, uintptr_t key, uintptr_t *val);
/* 1 and *val (may be NULL) when found and removed, 0 otherwise. */
int xseg_ptrmap_del(xseg_ptrmap *m, uintptr_t key, uintptr_t *val);
/* Calls fn for each entry (no modification during the walk). */
void xseg_ptrmap_each(const xseg_ptrmap *m, void (*fn)(uintptr_t, uintptr_t, void *), void *arg);

#endif
