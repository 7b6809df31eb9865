/* ptrmap.h: open-addressing hash map from addresses to tagged words, used
 * for live allocations (free and record_stream lookups) and stream states.
 * Linear probing with backward-shift deletion: no tombstones, O(1). */
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
} xseg_ptrmap;

int xseg_ptrmap_init(xseg_ptrmap *m, size_t capacity_hint);
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
