/* trace_idmap.c: the id -> slot map of the trace reader: open addressing
 * with linear probing and backward-shift removal, so that it holds only the
 * live ids and stays small and cache-resident. */
#include <stdlib.h>
#include "trace_internal.h"

static size_t idmap_hash(uint64_t id, size_t cap)
{
    id ^= id >> 33;
    id *= 0xff51afd7ed558ccdULL;
    id ^= id >> 33;
    id *= 0xc4ceb9fe1a85ec53ULL;
    id ^= id >> 33;
    return (size_t)id & (cap - 1);
}

static trace_idmap_entry *idmap_alloc_table(size_t cap)
{
    trace_idmap_entry *tab = malloc(cap * sizeof *tab);
    if (!tab)
        return NULL;
    for (size_t i = 0; i < cap; i++)
        tab[i].id = TRACE_ID_EMPTY;
    return tab;
}

int trace_idmap_init(trace_idmap *m, size_t hint)
{
    size_t cap = 16; /* small inputs stay small; insert doubles it */
    while (cap < hint * 2 && cap < ((size_t)1 << 40))
        cap <<= 1;
    m->tab = idmap_alloc_table(cap);
    m->cap = m->tab ? cap : 0;
    m->used = 0;
    return m->tab ? 0 : -1;
}

void trace_idmap_fini(trace_idmap *m)
{
    free(m->tab);
    m->tab = NULL;
    m->cap = m->used = 0;
}

static trace_idmap_entry *idmap_probe(const trace_idmap *m, uint64_t id)
{
    size_t i = idmap_hash(id, m->cap);
    while (m->tab[i].id != id && m->tab[i].id != TRACE_ID_EMPTY)
        i = (i + 1) & (m->cap - 1);
    return &m->tab[i];
}

trace_idmap_entry *trace_idmap_find(const trace_idmap *m, uint64_t id)
{
    trace_idmap_entry *e = idmap_probe(m, id);
    return e->id == id ? e : NULL;
}

static int idmap_grow(trace_idmap *m)
{
    trace_idmap old = *m;
    trace_idmap_entry *tab = idmap_alloc_table(old.cap * 2);
    if (!tab)
        return -1;
    m->tab = tab;
    m->cap = old.cap * 2;
    for (size_t i = 0; i < old.cap; i++)
        if (old.tab[i].id != TRACE_ID_EMPTY)
            *idmap_probe(m, old.tab[i].id) = old.tab[i];
    free(old.tab);
    return 0;
}

trace_idmap_entry *trace_idmap_insert(trace_idmap *m, uint64_t id, int *added)
{
    trace_idmap_entry *e = idmap_probe(m, id);
    *added = 0;
    if (e->id == id)
        return e;
    if ((m->used + 1) * 2 > m->cap) {
        if (idmap_grow(m) != 0)
            return NULL;
        e = idmap_probe(m, id);
    }
    e->id = id;
    e->slot = TRACE_SLOT_DEAD;
    e->line = 0;
    m->used++;
    *added = 1;
    return e;
}

static int between(size_t home, size_t hole, size_t j)
{
    /* 1 when `home` lies cyclically in (hole, j]: the entry at j may not
     * move back to hole. */
    return hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
}

void trace_idmap_remove(trace_idmap *m, trace_idmap_entry *e)
{
    size_t mask = m->cap - 1, hole = (size_t)(e - m->tab), j = hole;
    for (;;) {
        j = (j + 1) & mask;
        if (m->tab[j].id == TRACE_ID_EMPTY)
            break;
        if (between(idmap_hash(m->tab[j].id, m->cap), hole, j))
            continue;
        m->tab[hole] = m->tab[j];
        hole = j;
    }
    m->tab[hole].id = TRACE_ID_EMPTY;
    m->used--;
}
