/* trace_read.c: loads an `xseg-trace v1` file ("a,<id>,<bytes>,<stream>" /
 * "f,<id>" lines, '#' comments; plain or gzip through `gzip -dc`) into a
 * rec_trace: ids become dense slots via an open-addressing id map, and the
 * event where requested live bytes peak is noted. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "record.h"

typedef struct idmap {
    uint64_t *keys;  /* id + 1, 0 = empty */
    uint32_t *vals;
    size_t mask, count;
    uint32_t *free_slots;
    size_t nfree, free_cap;
    uint32_t next_slot;
    uint64_t *slot_bytes; /* requested bytes live in each slot */
    size_t slot_cap;
} idmap;

static size_t hash(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (size_t)k;
}

static int map_grow(idmap *m)
{
    size_t cap = m->mask ? (m->mask + 1) * 2 : 1024;
    uint64_t *k = calloc(cap, sizeof *k);
    uint32_t *v = calloc(cap, sizeof *v);
    if (!k || !v) {
        free(k);
        free(v);
        return -1;
    }
    for (size_t i = 0; m->mask && i <= m->mask; i++)
        if (m->keys[i]) {
            size_t j = hash(m->keys[i]) & (cap - 1);
            while (k[j])
                j = (j + 1) & (cap - 1);
            k[j] = m->keys[i];
            v[j] = m->vals[i];
        }
    free(m->keys);
    free(m->vals);
    m->keys = k;
    m->vals = v;
    m->mask = cap - 1;
    return 0;
}

static size_t map_find(const idmap *m, uint64_t key)
{
    size_t j = hash(key) & m->mask;
    while (m->keys[j] && m->keys[j] != key)
        j = (j + 1) & m->mask;
    return j;
}

/* Backward-shift deletion keeps probe chains intact without tombstones. */
static void map_del(idmap *m, size_t j)
{
    size_t i = j;
    m->keys[j] = 0;
    for (;;) {
        i = (i + 1) & m->mask;
        if (!m->keys[i])
            break;
        size_t home = hash(m->keys[i]) & m->mask;
        if (((i - home) & m->mask) >= ((i - j) & m->mask)) {
            m->keys[j] = m->keys[i];
            m->vals[j] = m->vals[i];
            m->keys[i] = 0;
            j = i;
        }
    }
    m->count--;
}

static void *grow(void *p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return p;
    size_t c = *cap ? *cap * 2 : 1024;
    while (c < need)
        c *= 2;
    void *q = realloc(p, c * size);
    if (q)
        *cap = c;
    return q;
}

static int push(rec_trace *t, rec_event e)
{
    rec_event *n = grow(t->ev, &t->cap, t->n + 1, sizeof *n);
    if (!n)
        return -1;
    t->ev = n;
    t->ev[t->n++] = e;
    return 0;
}

static uint32_t slot_take(idmap *m)
{
    if (m->nfree)
        return m->free_slots[--m->nfree];
    return m->next_slot++;
}

typedef struct loader {
    rec_trace *t;
    idmap m;
    uint64_t live;
    char *err;
    size_t errlen;
    unsigned long line;
} loader;

static int fail(loader *l, const char *what, const char *text)
{
    snprintf(l->err, l->errlen, "line %lu: %s: \"%.80s\"", l->line, what, text);
    return -1;
}

static int on_alloc(loader *l, uint64_t id, uint64_t bytes, uint64_t stream, const char *text)
{
    idmap *m = &l->m;
    if ((m->count + 1) * 2 > m->mask + 1 && map_grow(m) != 0)
        return fail(l, "out of memory", text);
    size_t j = map_find(m, id + 1);
    if (m->keys[j])
        return fail(l, "id allocated twice", text);
    uint32_t slot = slot_take(m);
    uint64_t *sb = grow(m->slot_bytes, &m->slot_cap, (size_t)slot + 1, sizeof *sb);
    if (!sb)
        return fail(l, "out of memory", text);
    m->slot_bytes = sb;
    sb[slot] = bytes;
    m->keys[j] = id + 1;
    m->vals[j] = slot;
    m->count++;
    l->live += bytes;
    if (l->live > l->t->peak_live) {
        l->t->peak_live = l->live;
        l->t->peak_index = l->t->n;
    }
    return push(l->t, (rec_event){bytes, stream, slot, 0});
}

static int on_free(loader *l, uint64_t id, const char *text)
{
    idmap *m = &l->m;
    size_t j = m->mask ? map_find(m, id + 1) : 0;
    if (!m->mask || !m->keys[j])
        return fail(l, "free of an id that is not live", text);
    uint32_t slot = m->vals[j];
    map_del(m, j);
    uint32_t *fs = grow(m->free_slots, &m->free_cap, m->nfree + 1, sizeof *fs);
    if (!fs)
        return fail(l, "out of memory", text);
    m->free_slots = fs;
    fs[m->nfree++] = slot;
    l->live -= m->slot_bytes[slot];
    return push(l->t, (rec_event){0, 0, slot, 1});
}

static int parse_line(loader *l, const char *s)
{
    unsigned long long id, bytes, stream;
    char tail;
    if (s[0] == '#' || s[0] == '\n' || s[0] == '\0')
        return 0;
    if (sscanf(s, "a,%llu,%llu,%llu%c", &id, &bytes, &stream, &tail) >= 3 && bytes)
        return on_alloc(l, id, bytes, stream, s);
    if (sscanf(s, "f,%llu%c", &id, &tail) >= 1)
        return on_free(l, id, s);
    return fail(l, "not an xseg-trace v1 line", s);
}

static FILE *open_trace(const char *path, int *piped)
{
    unsigned char magic[2] = {0, 0};
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t n = fread(magic, 1, 2, f);
    *piped = n == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
    if (!*piped) {
        rewind(f);
        return f;
    }
    fclose(f);
    setenv("XSEG_RECORD_TRACE", path, 1); /* no shell quoting of the path */
    return popen("gzip -dc -- \"$XSEG_RECORD_TRACE\"", "r");
}

static void map_free(idmap *m)
{
    free(m->keys);
    free(m->vals);
    free(m->free_slots);
    free(m->slot_bytes);
}

int rec_load(const char *path, rec_trace *t, char *err, size_t errlen)
{
    int piped = 0, rc = 0;
    memset(t, 0, sizeof *t);
    FILE *f = open_trace(path, &piped);
    if (!f) {
        snprintf(err, errlen, "cannot open %s", path);
        return -1;
    }
    loader l = {.t = t, .err = err, .errlen = errlen};
    char line[4096];
    while (rc == 0 && fgets(line, sizeof line, f)) {
        l.line++;
        rc = parse_line(&l, line);
    }
    int st = piped ? pclose(f) : fclose(f);
    if (rc == 0 && st != 0) {
        snprintf(err, errlen, "reading %s failed", path);
        rc = -1;
    }
    t->nslots = l.m.next_slot;
    map_free(&l.m);
    if (rc != 0)
        rec_free(t);
    return rc;
}

void rec_free(rec_trace *t)
{
    free(t->ev);
    memset(t, 0, sizeof *t);
}
