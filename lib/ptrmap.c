/* ptrmap.c: the hash map (see ptrmap.h). */
#include "ptrmap.h"

#include <stdlib.h>

static inline size_t slot_of(const xseg_ptrmap *m, uintptr_t key)
{
    return xseg_ptrmap_home(key, m->shift, m->mask);
}

/* A table of at least 2 * need slots (64 at least): 0 or -1. */
static int table_new(xseg_ptrmap *m, size_t need, unsigned shift)
{
    size_t cap = 64;
    if (need > SIZE_MAX / 4 / sizeof(uintptr_t))
        return -1;
    while (cap < need * 2)
        cap <<= 1;
    m->keys = calloc(cap, sizeof(uintptr_t));
    m->vals = calloc(cap, sizeof(uintptr_t));
    if (!m->keys || !m->vals) {
        free(m->keys);
        free(m->vals);
        m->keys = m->vals = NULL;
        return -1;
    }
    m->mask = cap - 1;
    m->count = 0;
    m->has_zero = 0;
    m->zero_val = 0;
    m->shift = shift;
    m->fail_puts = 0;
    return 0;
}

int xseg_ptrmap_init(xseg_ptrmap *m, size_t hint)
{
    return table_new(m, hint, 4);
}

int xseg_ptrmap_init_ints(xseg_ptrmap *m, size_t hint)
{
    return table_new(m, hint, 0);
}

void xseg_ptrmap_fini(xseg_ptrmap *m)
{
    free(m->keys);
    free(m->vals);
    m->keys = m->vals = NULL;
    m->mask = 0;
    m->count = 0;
    m->has_zero = 0;
}

static void insert_raw(xseg_ptrmap *m, uintptr_t key, uintptr_t val)
{
    size_t i = slot_of(m, key);
    while (m->keys[i] && m->keys[i] != key)
        i = (i + 1) & m->mask;
    if (!m->keys[i])
        m->count++;
    m->keys[i] = key;
    m->vals[i] = val;
}

/* Rehash into a table of at least 2 * need slots; map unchanged on -1. */
static int grow(xseg_ptrmap *m, size_t need)
{
    xseg_ptrmap n;
    if (table_new(&n, need, m->shift) != 0)
        return -1;
    for (size_t i = 0; m->keys && i <= m->mask; i++)
        if (m->keys[i])
            insert_raw(&n, m->keys[i], m->vals[i]);
    free(m->keys);
    free(m->vals);
    m->keys = n.keys;
    m->vals = n.vals;
    m->mask = n.mask;
    m->count = n.count;
    return 0;
}

int xseg_ptrmap_reserve(xseg_ptrmap *m, size_t extra)
{
    size_t need = m->count + extra;
    if (need < m->count)
        return -1;
    if (m->keys && need * 2 <= m->mask + 1)
        return 0;
    return grow(m, need);
}

int xseg_ptrmap_put(xseg_ptrmap *m, uintptr_t key, uintptr_t val)
{
    if (key == 0) {
        m->has_zero = 1;
        m->zero_val = val;
        return 0;
    }
    uintptr_t old;
    if (m->fail_puts && !xseg_ptrmap_get(m, key, &old)) {
        m->fail_puts--; /* a test's: as if the growth found no host memory */
        return -1;
    }
    if (!m->keys || ((m->count + 1) * 2 > m->mask + 1 && !xseg_ptrmap_get(m, key, &old)))
        if (grow(m, m->keys ? m->mask + 1 : 0) != 0)
            return -1;
    insert_raw(m, key, val);
    return 0;
}

int xseg_ptrmap_get(const xseg_ptrmap *m, uintptr_t key, uintptr_t *val)
{
    if (key == 0) {
        if (m->has_zero && val)
            *val = m->zero_val;
        return m->has_zero;
    }
    if (!m->keys)
        return 0;
    size_t i = slot_of(m, key);
    for (;;) {
        uintptr_t k = m->keys[i];
        if (k == key) {
            if (val)
                *val = m->vals[i];
            return 1;
        }
        if (!k)
            return 0;
        i = (i + 1) & m->mask;
    }
}
/* Backward-shift deletion keeps every probe chain unbroken. */
static void remove_at(xseg_ptrmap *m, size_t i)
{
    size_t j = i;
    for (;;) {
        j = (j + 1) & m->mask;
        if (!m->keys[j])
            break;
        if (xseg_ptrmap_movable(i, slot_of(m, m->keys[j]), j)) {
            m->keys[i] = m->keys[j];
            m->vals[i] = m->vals[j];
            i = j;
        }
    }
    m->keys[i] = 0;
    m->vals[i] = 0;
    m->count--;
}

int xseg_ptrmap_del(xseg_ptrmap *m, uintptr_t key, uintptr_t *val)
{
    if (key == 0) {
        if (!m->has_zero)
            return 0;
        if (val)
            *val = m->zero_val;
        m->has_zero = 0;
        return 1;
    }
    if (!m->keys)
        return 0;
    size_t i = slot_of(m, key);
    for (;;) {
        uintptr_t k = m->keys[i];
        if (!k)
            return 0;
        if (k == key) {
            if (val)
                *val = m->vals[i];
            remove_at(m, i);
            return 1;
        }
        i = (i + 1) & m->mask;
    }
}

void xseg_ptrmap_each(const xseg_ptrmap *m, void (*fn)(uintptr_t, uintptr_t, void *), void *arg)
{
    if (m->has_zero)
        fn(0, m->zero_val, arg);
    for (size_t i = 0; m->keys && i <= m->mask; i++)
        if (m->keys[i])
            fn(m->keys[i], m->vals[i], arg);
}
