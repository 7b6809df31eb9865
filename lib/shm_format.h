/* shm_format.h: layout of the live-stats file that the stats_shm key
 * publishes (lib/shm.c writes it; tools/xseg-top and the tests read it),
 * and the lock-free reader.
 *
 * One file per process: $XSEG_SHM_DIR/xseg.<pid> (default /dev/shm), made
 * under a temporary name and renamed into place once complete.  It holds a
 * header and XSEG_SHM_SLOTS records, one per live allocator.  Each record is
 * a seqlock: the writer (always under its allocator's lock, so one writer a
 * record) makes `seq` odd, stores the fields, makes `seq` even again.  A
 * reader copies the fields between two reads of `seq` and retries if they
 * differ or are odd, so it never blocks the writer and never returns a torn
 * record.  Every shared word is a C11 atomic (relaxed stores cost what plain
 * stores cost), so the protocol is data-race free.
 *
 * Compatibility: readers check magic and version; a version bump means the
 * field order changed (version 2 holds every xseg_stats number and the
 * library version).  New fields are only ever appended, and `nfields`
 * tells how many a writer stores.
 *
 * Tag rows (version 5): after its fields, each record has XSEG_SHM_TAGS
 * rows, row t for tag t (0: the memory allocated without a tag), each with
 * the numbers of xseg_tag_stats (tag_fields.h's list) and a seqlock of its
 * own, written under that tag allocator's lock (shm.c: by the parent's
 * update, which takes each tag's lock with a try, never waiting).  A row is
 * used (XST_USED) once the allocator has a tag in use; tags
 * XSEG_SHM_TAGS and above are not published.
 */
#ifndef XSEG_SHM_FORMAT_H
#define XSEG_SHM_FORMAT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

#include "stats_fields.h"
#include "tag_fields.h"
#include "xseg.h"

#define XSEG_SHM_MAGIC 0x314d48534745535full /* "_SEGSHM1", little-endian */
#define XSEG_SHM_VERSION 5u /* 2: every xseg_stats field, library version; 3: the worker's;
                              4: room for 24 driver ops (copies, pinned memory);
                              5: per-tag rows after the fields (tag_rows, tag_fields in
                              the header) */
#define XSEG_SHM_SLOTS 64u
#define XSEG_SHM_PREFIX "xseg."
#define XSEG_SHM_DEFAULT_DIR "/dev/shm"
#define XSEG_SHM_DIR_ENV "XSEG_SHM_DIR"
/* Driver-call counters kept per record (room for XSEG_OP_COUNT to grow). */
#define XSEG_SHM_OPS 24u
/* Tag rows per record: tags 0 .. XSEG_SHM_TAGS - 1. */
#define XSEG_SHM_TAGS 16u

/* Slot states. */
enum { XSEG_SHM_FREE = 0, XSEG_SHM_USED = 1 };

/* Field indices into xseg_shm_record.v: every number of the public
 * xseg_stats, so that a reader renders a record with the library's own
 * renderers (xseg_shm_to_stats below).  Fields marked (fixed) are stored
 * when the slot is claimed; (hot) ones on every update; the others when a
 * driver call, trim, retry, GC run, cap change or peak reset may have moved
 * them (largest_free also on every 64th update). */
enum xseg_shm_field {
    XSF_DEVICE = 0,     /* (fixed) device index */
    XSF_GENERATION,     /* (fixed) claim count of this slot: a new allocator */
    XSF_BACKEND,        /* (fixed) backend name, up to 8 chars, NUL-padded */
    XSF_CREATED_NS,     /* (fixed) CLOCK_REALTIME at creation */
    XSF_DEVICE_TOTAL,   /* (fixed) device memory size */
    XSF_PAGE_SIZE,      /* (fixed) mapping granularity */
    XSF_LIB_VERSION,    /* (fixed) xseg_version(), 16 chars NUL-padded: 2 words */
    XSF_UPDATES = XSF_LIB_VERSION + 2, /* (hot) publications so far */
    XSF_CAP,            /* cap on mapped bytes, 0 = none */
    XSF_ALLOCATED,      /* (hot) live bytes (rounded block sizes) */
    XSF_ALLOCATED_PEAK, /* (hot) */
    XSF_ALLOCATED_TOTAL,/* (hot) */
    XSF_REQUESTED,      /* (hot) live bytes as requested */
    XSF_REQUESTED_PEAK, /* (hot) */
    XSF_REQUESTED_TOTAL,/* (hot) */
    XSF_ACTIVE,         /* (hot) live allocations */
    XSF_ACTIVE_PEAK,    /* (hot) */
    XSF_ACTIVE_TOTAL,   /* (hot) */
    XSF_MAPPED,         /* (hot) physical bytes mapped */
    XSF_MAPPED_PEAK,    /* (hot) */
    XSF_MAPPED_TOTAL,
    XSF_CACHED,         /* (hot) mapped minus allocated */
    XSF_CACHED_PEAK,    /* (hot) */
    XSF_CACHED_TOTAL,   /* (hot) */
    XSF_VA,             /* virtual bytes reserved */
    XSF_VA_PEAK,
    XSF_VA_TOTAL,
    XSF_SEGMENTS,
    XSF_SEGMENTS_PEAK,
    XSF_SEGMENTS_TOTAL,
    XSF_HANDLES,
    XSF_HANDLES_PEAK,
    XSF_HANDLES_TOTAL,
    XSF_ALLOC_CALLS,    /* (hot) */
    XSF_FREE_CALLS,     /* (hot) */
    XSF_OOMS,           /* (hot) */
    XSF_RETRIES,
    XSF_TRIMS,
    XSF_GC_RUNS,
    XSF_SYNCS,
    XSF_RELEASED,       /* physical bytes released, total */
    XSF_DRIVER_ERRORS,
    XSF_DEFERRED,       /* (hot) */
    XSF_LARGEST_FREE,   /* largest free virtual block */
    XSF_MOVED,          /* handle bytes moved, total */
    XSF_UNMAPPING,      /* old mappings of moved handles waiting for the GPU */
    XSF_DRV,            /* XSEG_SHM_OPS counters, indexed by xseg_op */
    XSF_DRV_CALLS_WORKER = XSF_DRV + XSEG_SHM_OPS, /* the reclaim worker's: */
    XSF_DRV_NS_CALLER,
    XSF_DRV_NS_WORKER,
    XSF_WORKER_JOBS,
    XSF_WORKER_BYTES,
    XSF_RELEASE_BUDGET, /* release_threshold:auto's budget (appended: readers of
                           version 5 that know fewer fields still read it) */
    XSF_SLACK_GRANTED,  /* the slack governor's grant (appended, as above) */
    XSF_COUNT
};

/* Field indices into a tag row's v: the numbers of xseg_tag_stats, in
 * tag_fields.h's order (the list names each field's first word). */
enum xseg_shm_tag_field {
    XST_USED = 0,       /* 1: the row holds tag XST_TAG */
    XST_TAG,            /* the tag's id (= the row's index) */
    XST_NAME,           /* its name, XSEG_TAG_NAME_MAX bytes NUL-padded (empty: unknown) */
    XST_ASLEEP = XST_NAME + XSEG_TAG_NAME_MAX / 8,
    XST_MODE,           /* xseg_sleep_mode of the last sleep */
    XST_LIVE,           /* live bytes: current, peak, total */
    XST_MAPPED = XST_LIVE + 3, /* mapped bytes: current, peak, total */
    XST_SLEEPING = XST_MAPPED + 3,
    XST_BACKUP,
    XST_SLEEPS,
    XST_WAKES,
    XST_LAST_SLEEP_NS,
    XST_LAST_WAKE_NS,
    XST_COUNT
};

typedef struct xseg_shm_tag_row {
    _Atomic uint64_t seq;    /* even: stable, odd: being written */
    _Atomic uint64_t v[XST_COUNT];
} xseg_shm_tag_row;

typedef struct xseg_shm_record {
    _Atomic uint32_t state;  /* XSEG_SHM_FREE / XSEG_SHM_USED */
    uint32_t reserved;
    _Atomic uint64_t seq;    /* even: stable, odd: being written */
    _Atomic uint64_t v[XSF_COUNT];
    uint64_t pad[(64 - (16 + 8 * XSF_COUNT) % 64) % 64 / 8];
    xseg_shm_tag_row tags[XSEG_SHM_TAGS]; /* row t: tag t */
} xseg_shm_record;

typedef struct xseg_shm_header {
    uint64_t magic;
    uint32_t version;
    uint32_t header_size;  /* offset of the first record */
    uint32_t record_size;
    uint32_t nslots;
    uint32_t nfields;
    int32_t pid;
    uint64_t start_ticks;  /* /proc/<pid>/stat starttime: tells pid reuse */
    uint64_t created_ns;   /* CLOCK_REALTIME when the file was made */
    _Atomic uint32_t dropped; /* allocators that found no free slot */
    uint32_t reserved;
    char comm[64];         /* program name */
    uint32_t tag_rows;     /* tag rows per record (XSEG_SHM_TAGS) */
    uint32_t tag_fields;   /* fields per tag row (XST_COUNT) */
    uint64_t pad[8];
} xseg_shm_header;

_Static_assert(sizeof(xseg_shm_header) == 192, "header layout");
_Static_assert(sizeof(xseg_shm_record) % 64 == 0, "records are cache-line sized");
_Static_assert(offsetof(xseg_shm_record, tags) % 64 == 0, "tag rows start a cache line");

#define XSEG_SHM_FILE_SIZE \
    (sizeof(xseg_shm_header) + XSEG_SHM_SLOTS * sizeof(xseg_shm_record))

static inline xseg_shm_record *xseg_shm_slot(void *base, const xseg_shm_header *h, uint32_t i)
{
    return (xseg_shm_record *)((char *)base + h->header_size + (size_t)i * h->record_size);
}

/* 1 when a mapping of `len` bytes holds a header and records this reader
 * understands. */
static inline int xseg_shm_valid(const void *base, size_t len)
{
    const xseg_shm_header *h = (const xseg_shm_header *)base;
    if (len < sizeof *h || h->magic != XSEG_SHM_MAGIC || h->version != XSEG_SHM_VERSION)
        return 0;
    if (h->record_size < sizeof(xseg_shm_record) || h->header_size < sizeof *h ||
        h->nfields < XSF_COUNT || h->nslots > 4096 || h->tag_rows != XSEG_SHM_TAGS ||
        h->tag_fields != XST_COUNT)
        return 0;
    return (size_t)h->header_size + (size_t)h->nslots * h->record_size <= len;
}

/* Copy a record's fields without blocking its writer.  Returns 1 with out
 * filled, 0 when the slot is free, -1 when every try met a write in
 * progress (the writer died mid-update, or is extremely busy). */
static inline int xseg_shm_read(xseg_shm_record *r, uint64_t out[XSF_COUNT], unsigned tries)
{
    for (unsigned t = 0; t < tries; t++) {
        if (atomic_load_explicit(&r->state, memory_order_acquire) != XSEG_SHM_USED)
            return 0;
        uint64_t s1 = atomic_load_explicit(&r->seq, memory_order_acquire);
        if (s1 & 1)
            continue;
        for (unsigned i = 0; i < XSF_COUNT; i++)
            out[i] = atomic_load_explicit(&r->v[i], memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&r->seq, memory_order_relaxed) == s1)
            return 1;
    }
    return -1;
}

_Static_assert(XSEG_OP_COUNT <= XSEG_SHM_OPS, "every driver operation has a counter");

/* Text stored in `words` fields (XSF_BACKEND: 1, XSF_LIB_VERSION: 2),
 * NUL-terminated in out[8 * words + 1]. */
static inline const char *xseg_shm_text(const uint64_t *v, unsigned words, char *out)
{
    memcpy(out, v, 8u * words);
    out[8u * words] = '\0';
    return out;
}

/* Copy every number of the public stats between a record's fields and an
 * xseg_stats: to_stats 1 fills st's numbers from v; 0 fills v's fields from
 * st (the writer's full publication).  One table for both directions,
 * made from the field list (stats_fields.h). */
static inline void xseg_shm_stats_copy(uint64_t v[XSF_COUNT], xseg_stats *st, int to_stats)
{
    /* every field of stats_fields.h with a record field (shm >= 0) */
#define XSEG_SHM_MAP(kind, f, json, how, src, shm, proms) \
    {offsetof(xseg_stats, f), shm, XSEG_SF_WORDS_##kind},
    static const struct { size_t off; int f; unsigned n; } map[] = {
        XSEG_STATS_FIELDS(XSEG_SHM_MAP, XSEG_SF_NOTHING)};
#undef XSEG_SHM_MAP
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        char *p = (char *)st + map[i].off;
        if (map[i].f < 0)
            continue;
        if (to_stats)
            memcpy(p, &v[map[i].f], 8u * map[i].n);
        else
            memcpy(&v[map[i].f], p, 8u * map[i].n);
    }
}

/* The public stats a record holds: what xseg_get_stats gave at the
 * record's last publication (largest_free_block may be up to 63
 * publications older), for the library's renderers
 * (xseg_stats_prometheus_render). */
static inline void xseg_shm_to_stats(const uint64_t v[XSF_COUNT], xseg_stats *st)
{
    uint64_t copy[XSF_COUNT];
    memcpy(copy, v, sizeof copy);
    memset(st, 0, sizeof *st);
    st->size = sizeof *st;
    st->version = XSEG_STATS_VERSION;
    st->device = (int32_t)(int64_t)v[XSF_DEVICE];
    xseg_shm_stats_copy(copy, st, 1);
}

/* Copy one tag's numbers between a tag row's fields and an xseg_tag_stats:
 * to_stats 1 fills s from v (s is cleared first, its size set); 0 fills v
 * from s (XST_USED is the caller's).  Made from tag_fields.h's list. */
static inline void xseg_shm_tag_copy(uint64_t v[XST_COUNT], xseg_tag_stats *s, int to_stats)
{
    enum { K_U32, K_I32, K_NAME, K_MODE, K_COUNTER, K_GAUGE, K_MONO };
#define XSEG_SHM_TMAP(kind, f, json, row, proms) \
    {offsetof(xseg_tag_stats, f), row, K_##kind, XSEG_TF_WORDS_##kind},
    static const struct { size_t off; int f; int kind; unsigned n; } map[] = {
        XSEG_TAG_FIELDS(XSEG_SHM_TMAP, XSEG_TF_NOTHING)};
#undef XSEG_SHM_TMAP
    if (to_stats) {
        memset(s, 0, sizeof *s);
        s->size = sizeof *s;
    }
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        char *p = (char *)s + map[i].off;
        if (map[i].f < 0)
            continue;
        if (map[i].kind == K_I32 || map[i].kind == K_MODE) { /* an int32_t in a word */
            int32_t x;
            if (to_stats) {
                x = (int32_t)(int64_t)v[map[i].f];
                memcpy(p, &x, sizeof x);
            } else {
                memcpy(&x, p, sizeof x);
                v[map[i].f] = (uint64_t)(int64_t)x;
            }
        } else if (to_stats) {
            memcpy(p, &v[map[i].f], 8u * map[i].n);
        } else {
            memcpy(&v[map[i].f], p, 8u * map[i].n);
        }
    }
    if (to_stats)
        s->name[XSEG_TAG_NAME_MAX - 1] = '\0';
}

/* Copy the used tag rows of a record into out (row order), without
 * blocking their writers: returns how many; a row met mid-write on every
 * try is left out and counted in *busy (may be NULL). */
static inline size_t xseg_shm_read_tags(xseg_shm_record *r, xseg_tag_stats out[XSEG_SHM_TAGS],
                                        unsigned tries, unsigned *busy)
{
    size_t n = 0;
    for (unsigned t = 0; t < XSEG_SHM_TAGS; t++) {
        xseg_shm_tag_row *row = &r->tags[t];
        uint64_t v[XST_COUNT];
        int ok = 0;
        for (unsigned k = 0; k < tries && !ok; k++) {
            uint64_t s1 = atomic_load_explicit(&row->seq, memory_order_acquire);
            if (s1 & 1)
                continue;
            for (unsigned i = 0; i < XST_COUNT; i++)
                v[i] = atomic_load_explicit(&row->v[i], memory_order_relaxed);
            atomic_thread_fence(memory_order_acquire);
            ok = atomic_load_explicit(&row->seq, memory_order_relaxed) == s1;
        }
        if (!ok) {
            if (busy)
                (*busy)++;
            continue;
        }
        if (v[XST_USED] == 1)
            xseg_shm_tag_copy(v, &out[n++], 1);
    }
    return n;
}

/* Start time of a process (field 22 of /proc/<pid>/stat, clock ticks after
 * boot); 0 when unknown.  Together with the pid it names a process.  When
 * `state` is not NULL it receives the state letter (field 3: 'Z' zombie). */
static inline uint64_t xseg_shm_start_ticks(pid_t pid, char *state)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* comm may hold spaces and ')' */
    unsigned long long v = 0;
    if (state && p && p[1] == ' ')
        *state = p[2];
    /* fields after the comm: state (3) ... starttime (22) */
    for (int field = 2; p && field < 22; field++)
        p = strchr(p + 1, ' ');
    if (!p || sscanf(p + 1, "%llu", &v) != 1)
        return 0;
    return v;
}

#endif
