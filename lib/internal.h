/* internal.h: the allocator's data structures, shared by the lib/ files
 * that implement it.  The files' layer order is declared once, in the
 * layers block of docs/design.md (entry points, process and lifecycle,
 * monitoring, thread caches, free core, diagnostics, small, blocks and
 * streams, free index, arena, drv.c, backends, utilities); a file calls
 * only its own layer and those below, and tools/ci/layers checks that on
 * the built objects.  Everything here is protected by xseg_t.lock unless noted. */
#ifndef XSEG_INTERNAL_H
#define XSEG_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "conf.h"
#include "lock.h"
#include "driver.h"
#include "drv.h"
#include "list.h"
#include "ptrmap.h"
#include "xseg.h"

#define XSEG_MIN_BLOCK 512u
#define XSEG_FL_COUNT 64
#define XSEG_SL_BITS 5
#define XSEG_SL_COUNT (1u << XSEG_SL_BITS)
#define XSEG_MAX_CLASSES 64
/* Requests of this size or more get handles larger than a page (auto). */
#define XSEG_BIG_REQUEST ((size_t)256 << 20)

struct xstream;
struct xslab;

enum {
    XB_FREE = 1u << 0,    /* in a free index */
    XB_LRU = 1u << 1,     /* in the LRU of cached blocks */
    XB_SLAB = 1u << 2,    /* holds a slab of small size classes */
    XB_PENDING = 1u << 3, /* freed, waiting on record_stream events */
    XB_USES = 1u << 4,    /* has record_stream uses (in xs->uses) */
    XB_MOVED = 1u << 5,   /* its handles moved away; the old mapping waits for the
                             GPU before it is unmapped (xs->moved list) */
    XB_RELEASING = 1u << 6 /* its handles are being unmapped and released by the
                              reclaim worker (xs->releasing list, worker.c) */
};

/* A range of the virtual arena: free, allocated, or a slab.  A record owns
 * its 128 bytes (xblock_new): thread caches on many cores write their own
 * blocks' gen and requested at once, and records sharing a cache line (or
 * the line pair a core prefetches) made every such write a transfer. */
#define XSEG_BLOCK_ALIGN 128

/* Zeroed host memory that shares no 128-byte line with any other
 * allocation: for what one thread writes while others write beside it
 * (block records, a slab's per-slot words, a thread cache). */
void *xseg_calloc_lines(size_t bytes);

typedef struct xblock {
    _Alignas(XSEG_BLOCK_ALIGN) uintptr_t addr;
    size_t size;
    struct xblock *aprev, *anext; /* address order */
    struct xblock *fprev, *fnext; /* free-index bucket */
    xlist_node lru;               /* in xs->lru (oldest first) or xs->moved */
    struct xstream *owner;        /* stream; NULL = neutral (no pending GPU use) */
    size_t requested;
    uint64_t epoch;               /* owner's epoch when freed */
    uint64_t stamp;               /* free order, for the LRU and snapshots */
    uint32_t flags;
    struct xslab *slab;
    /* Generation of the allocation (even; low bit: held in a thread cache;
     * 0: not allocated).  Last field: xblock_new keeps it out of its memset,
     * since thread caches may read it at any time (tcache.c). */
    _Atomic uint64_t gen;
} xblock;

/* The block of an LRU or moved-list node (NULL for NULL). */
static inline xblock *xblk_of_lru(const xlist_node *n)
{
    return n ? XLIST_ENTRY(n, xblock, lru) : NULL;
}

/* Two-level segregated free index (TLSF-like): O(1) good-fit search. */
typedef struct xfreeidx {
    uint64_t fl_bits;
    uint32_t sl_bits[XSEG_FL_COUNT];
    xblock *heads[XSEG_FL_COUNT][XSEG_SL_COUNT];
    size_t count;
    size_t bytes;
} xfreeidx;

/* A slab: one arena block cut into equal slots of one size class. */
typedef struct xslab {
    xblock *blk;
    xlist_node link;            /* in the owner's partial list of its class */
    struct xstream *owner;
    uint32_t cls, slot_size, nslots, nfree;
    uint32_t free_head;         /* first free slot, nslots = none */
    uint32_t *next_free;        /* free list links */
    uint32_t *req;              /* requested size per slot (0 = free) */
    _Atomic uint64_t *gen;      /* generation per slot, as xblock.gen */
    struct xslab *spare_next;   /* in xs->spare_slabs[cls] (metadata is recycled) */
    xlist_node kept;            /* in xs->kept_slabs while it is an empty slab kept */
    int listed, is_kept;
} xslab;

/* Per-stream state: its free blocks, its slabs and its event epochs. */
typedef struct xstream {
    void *handle;
    xfreeidx idx;
    xlist partial[XSEG_MAX_CLASSES]; /* per class: slabs with free slots (xslab.link) */
    uint64_t epoch;        /* current epoch: frees are stamped with it */
    uint64_t done;         /* every epoch <= done has completed on the GPU */
    void *event;           /* our reusable event on this stream */
    uint64_t ev_epoch;     /* epoch the event was recorded for, 0 = none */
    int retired;           /* xseg_stream_retire: all its work is done */
    int gone;              /* retired by the application: its handle is never
                              named to the driver again (streams.c) */
    int mark;              /* reachability, when gone states are collected */
    struct xstream *next_all; /* in xs->all_streams, or xs->gone_streams */
} xstream;

/* Wait record for a block or slot freed while used on other streams. */
typedef struct xuse {
    xstream *s;
    uint64_t epoch;
} xuse;

typedef struct xuses {
    uint32_t n, cap;
    xuse u[];
} xuses;

typedef struct xpending {
    struct xpending *next;
    uintptr_t addr;       /* user address */
    uintptr_t tag;        /* live-map value: xblock*, or xslab* | 1 */
    xuses *uses;
} xpending;

/* One physical handle mapped into the arena. */
typedef struct xhandle {
    uint64_t drv;
    uint32_t first_page;
    uint32_t npages;
    uint32_t flags;       /* XH_* */
} xhandle;

/* A handle mapped ahead of demand as one run (premap): never split to page
 * grain while partly used; released whole once wholly inside free space. */
#define XH_PREMAP 1u

/* A handle handed to the reclaim worker: out of the arena's tables, still
 * counted in mapped and handles until the job is done. */
typedef struct xrel_handle {
    uintptr_t va;
    size_t bytes;
    uint64_t drv;
    int state;            /* XREL_*: what the worker did */
    int rc;               /* the failed call's code */
} xrel_handle;

enum { XREL_TODO = 0, XREL_RELEASED, XREL_UNMAP_FAILED, XREL_RELEASE_FAILED };

/* A release job: the handles inside one carved-out block. */
typedef struct xrelease {
    struct xrelease *next;
    struct xblock *z;     /* XB_RELEASING, out of every index */
    int unmap_only;       /* the old mapping of moved handles: unmap, no release */
    uint32_t n, cap, tries;
    uint64_t seq;         /* the order queued: unmap jobs settle in it */
    size_t bytes;
    xrel_handle *h;
    /* Under xs->lock, after the worker's driver calls: settles the job;
     * returns 1 when it is finished (then freed by the worker), 0 to be
     * tried again (alloc.c). */
    int (*done)(xseg_t *xs, struct xrelease *job);
} xrelease;

/* The virtual arena and its page mapping state. */
typedef struct xarena {
    uintptr_t base;
    size_t size;
    size_t page;          /* mapping granularity */
    unsigned shift;       /* log2(page) */
    size_t npages;
    uint32_t *page_handle;/* page -> handle index + 1, 0 = unmapped */
    uint64_t *mapped_bits;
    xhandle *handles;     /* index 0 unused */
    uint32_t *handle_free;/* stack of free indices */
    uint32_t nhandles, handle_cap, nfree_handles;
    uint64_t *orphans;    /* unmapped handles whose release failed: retried */
    uint32_t norphans, orphan_cap;
} xarena;

typedef struct xcounter_internal {
    uint64_t cur, peak, total;
} xcnt;

struct xseg {
    xlock lock;
    int device;
    unsigned fork_gen;
    xseg_conf conf;
    const xseg_driver *drv;
    void *dctx;
    size_t dev_total;
    size_t cap;           /* cap on mapped bytes, SIZE_MAX = none */
    size_t max_handle;    /* largest handle (auto policy) */
    xarena arena;
    xfreeidx neutral;     /* free blocks with no pending GPU use */
    xlist lru;            /* cached free blocks (xblock.lru), oldest first */
    uint64_t stamp;
    xseg_ptrmap live;     /* user address -> xblock* or (xslab* | 1) */
    xseg_ptrmap streams;  /* stream handle -> xstream* */
    xseg_ptrmap uses;     /* user address -> xuses* */
    xstream *last_stream;
    xstream *all_streams;
    xstream *gone_streams; /* retired states still referred to (streams.c) */
    size_t ngone, gone_floor;
    xpending *pend_head, *pend_tail;
    xlist moved;          /* XB_MOVED blocks (xblock.lru) */
    size_t unmapping_bytes;   /* their old mappings (the driver maps these twice) */
    uint64_t moved_bytes;     /* bytes of handles ever moved */
    xblock *spare_blocks; /* recycled block records */
    xblock *first_block;  /* block at the arena's base (never merged away) */
    uint32_t nclasses;
    uint32_t class_size[XSEG_MAX_CLASSES];
    uint8_t *class_of;    /* (size + 511) >> 9 -> class */
    size_t arena_used;    /* bytes of allocated arena blocks (incl. slabs) */
    /* statistics */
    xcnt allocated, requested, active, mapped, handles, segments, va;
    uint64_t cached_peak;
    uint64_t drv_calls[XSEG_OP_COUNT];
    xdrv_book drvb;       /* driver layer: time per op and side (drv.c) */
    uint64_t drv_errors, alloc_calls, free_calls, retries, ooms, syncs;
    int last_drv_rc;      /* code of the last failed driver call */
    uint64_t gc_runs, trims, released, deferred;
    uint64_t budget_peak; /* peak allocated bytes since creation or the last trim:
                           * the release threshold's budget (alloc.c xblk_release_limit) */
    struct {              /* the slack governor (slack.c) */
        size_t extra;     /* bytes granted over release_slack's share of the budget */
        size_t alloc;     /* bytes allocated in the current window */
        size_t remap;     /* of those, bytes mapped again (not new growth) */
        uint32_t quiet;   /* quiet windows that left the grant's top eighth unused */
        uint32_t hist;    /* bit i: window i back remapped over the tolerance */
        size_t start;     /* the budget when the window began */
    } gov;
    /* reclaim worker (worker.c) */
    struct xworker *wk;   /* NULL: none (reclaim:sync, or not started) */
    xlist releasing;      /* XB_RELEASING blocks (xblock.lru) */
    size_t releasing_bytes;   /* their handles' bytes, still in mapped */
    size_t releasing_handles; /* and count, still in handles */
    uint64_t wk_jobs, wk_retries; /* jobs done, unmaps tried again */
    size_t wk_pending;    /* jobs queued or running */
    size_t wk_unmapping;  /* old mappings of moved handles the worker unmaps */
    int wk_failed;        /* a job failed for good since xseg_trim last said so */
    int rel_async;        /* set while a reclaim may hand releases to the worker
                             (XREL_ASYNC_ALL: whatever reclaim_inflight says) */
    xblock *reserve;      /* hint: the free block at the growth frontier holding
                             pages mapped ahead (premap); checked before use */
    uint64_t premapped;   /* bytes mapped ahead of demand, total */
    uint32_t streak;      /* consecutive allocations at the growth frontier */
    size_t streak_base;   /* arena_used before the streak's first allocation */
    /* monitoring (history.c, shm.c) */
    void *hist;           /* event ring buffer, NULL when history is off */
    void *shm;            /* live-stats publication, NULL when stats_shm is off */
    xseg_oom_callback oom_cb;
    void *oom_user;
    /* thread caches (tcache.c) */
    uint64_t id;          /* unique per allocator in the process */
    int tc_on;
    struct xtc *tcs;      /* registry of the threads' caches */
    /* Memory held above the block allocator, which growth asks for before it
     * maps more (a shrinker, as in the kernel): set by lifecycle.c to the
     * thread caches' functions; the one call that goes up the layers, and it
     * goes through these pointers. */
    struct {
        /* 1 when something above holds blocks for this stream */
        int (*held)(xseg_t *xs, void *stream);
        void (*flush)(xseg_t *xs, void *stream); /* give them back (frees under the lock) */
        /* growth over the release threshold: what the layers above hold goes
         * back first (free.c, xseg_over_threshold) */
        void (*over_threshold)(xseg_t *xs);
    } shrinker;
    uint64_t gen_next;    /* last generation handed out */
    atomic_int nuses;     /* record_stream uses live: thread caches step aside */
    xslab *spare_slabs[XSEG_MAX_CLASSES]; /* recycled slab metadata, per class:
                                           * a new slab takes its class's in O(1) */
    xlist kept_slabs;     /* empty slabs kept for reuse (xslab.kept): growth over
                           * the release threshold gives them back first */
    /* tags (tags.c): each tag's memory is an allocator of its own */
    char *conf_text;      /* the conf it was made with (its tags' start from it) */
    int drv_shared;       /* the driver context is the parent's (drv.c) */
    int tag;              /* the tag it serves: 0 for an allocator made by xseg_create */
    struct xseg *parent;  /* a tag's allocator: the one it belongs to; else NULL */
    struct xseg *_Atomic tags[XSEG_MAX_TAGS]; /* each tag's allocator (index 0 unused) */
    atomic_int ntags;     /* tags' allocators made: 0 keeps the hot path plain */
    /* The family (an allocator and its tags') shares one cap: read without
     * the locks, so atomics, kept in the parent (xfam_*). */
    atomic_size_t fam_mapped; /* mapped bytes of the whole family */
    atomic_size_t fam_cap;    /* the cap in force (SIZE_MAX: none) */
    /* sleep (sleep.c) */
    atomic_int asleep;    /* 1 while its memory sleeps: allocations fail */
    int sleep_mode;       /* xseg_sleep_mode of the last sleep */
    int sleep_whole;      /* sleep keeps every mapped page, not only live
                             blocks (a CUDA-graph pool: sleep.c) */
    uint64_t *sl_bits;    /* the pages mapped at sleep when sleep_whole */
    struct xbackup *bk;   /* the live blocks backed up, address order */
    size_t bk_n, bk_cap, bk_bytes;
    void *bk_host;        /* pinned backup buffer, kept for the next sleep */
    size_t bk_host_cap;
    uint64_t sleeps, wakes, last_sleep_ns, last_wake_ns;
    /* sharing (share.c): dedicated, exported and imported blocks, peers;
     * made at create (xshare_setup), in a family's parent only */
    struct xshare *share;
    /* pointer queries (query.c): a sorted snapshot of the allocated blocks,
     * taken on demand; one malloc'd object that teardown frees */
    struct xqsnap *qsnap;
};

/* ---- tcache.c (see its header comment for the invariants) ---- */
typedef struct xtc xtc;
int xtc_alloc(xseg_t *xs, size_t rounded, size_t size, void *stream, void **out);
int xtc_free(xseg_t *xs, void *ptr);
void xtc_attach(xseg_t *xs);
void xtc_note(xseg_t *xs, uintptr_t addr, uintptr_t tag, _Atomic uint64_t *genp, uint64_t gen,
              size_t rounded, size_t req, void *stream);
void xtc_flush_own(xseg_t *xs);
void xtc_flush_all(xseg_t *xs);
/* Growth's shrinker (xs->lock held): 1 when some thread's cache holds a
 * block for `stream`; give those blocks back (other streams' stay). */
int xtc_held_for(xseg_t *xs, void *stream);
void xtc_flush_for(xseg_t *xs, void *stream);
void xtc_adjust_stats(xseg_t *xs, xseg_stats *s);
void xtc_detach_all(xseg_t *xs);
/* The thread caches' fork lock (process.c's handler takes it: 1, gives it
 * back: 0). */
void xtc_fork_lock(int take);
/* Requested size recorded for a live slot (small.c). */
uint32_t xsmall_requested(const xslab *sl, uintptr_t addr);
/* The request recorded for a live allocation (block or slot); atomic, as
 * its thread cache may rewrite it meanwhile (tcache.c, set_requested). */
static inline size_t xseg_requested_of(uintptr_t addr, uintptr_t tag)
{
    if (tag & 1)
        return xsmall_requested((const xslab *)(tag & ~(uintptr_t)1), addr);
    return __atomic_load_n(&((const xblock *)tag)->requested, __ATOMIC_RELAXED);
}

/* The generation word of a live allocation. */
static inline _Atomic uint64_t *xseg_gen_of(uintptr_t addr, uintptr_t tag)
{
    if (tag & 1) {
        xslab *sl = (xslab *)(tag & ~(uintptr_t)1);
        return &sl->gen[(addr - sl->blk->addr) / sl->slot_size];
    }
    return &((xblock *)tag)->gen;
}

/* The stream a live allocation (block or slot) was allocated on. */
static inline xstream *xseg_owner_of(uintptr_t tag)
{
    return (tag & 1) ? ((xslab *)(tag & ~(uintptr_t)1))->owner : ((xblock *)tag)->owner;
}

/* Block (or slot) size and request of a live allocation. */
static inline void xseg_sizes_of(uintptr_t addr, uintptr_t tag, size_t *block, size_t *req)
{
    *block = (tag & 1) ? ((const xslab *)(tag & ~(uintptr_t)1))->slot_size
                       : ((const xblock *)tag)->size;
    *req = xseg_requested_of(addr, tag);
}

/* The live-map value of addr, unless it is free or held in a thread cache. */
static inline int xseg_live_tag(xseg_t *xs, uintptr_t addr, uintptr_t *tag)
{
    if (!xseg_ptrmap_get(&xs->live, addr, tag))
        return 0;
    return !(atomic_load_explicit(xseg_gen_of(addr, *tag), memory_order_relaxed) & 1);
}

/* A request rounded as the allocator serves it: to XSEG_MIN_BLOCK, then,
 * above small_size, to roundup_power2_divisions steps of its power of two. */
static inline size_t xseg_round_size(const xseg_t *xs, size_t size)
{
    size_t r = (size + XSEG_MIN_BLOCK - 1) & ~(size_t)(XSEG_MIN_BLOCK - 1);
    unsigned div = xs->conf.roundup_power2_divisions;
    if (div > 1 && r > xs->conf.small_size) {
        size_t p = (size_t)1 << (63 - __builtin_clzll((unsigned long long)r));
        size_t step = p / div;
        if (step >= XSEG_MIN_BLOCK)
            r = (r + step - 1) / step * step;
    }
    return r;
}

/* ---- free.c: the free core (xs->lock held) ---- */
/* Global free of a live user address (not counted in free_calls; the
 * caller publishes to stats_shm). */
xseg_status xseg_free_locked(xseg_t *xs, uintptr_t addr);
/* Free a user address for real (after any pending uses completed). */
void xseg_release_user(xseg_t *xs, uintptr_t addr, uintptr_t tag);
/* Complete pending frees whose events are done (all, waiting, if block). */
void xpending_process(xseg_t *xs, int block);
void xseg_over_threshold(xseg_t *xs);
/* xseg_stream_retire: wait, detach, settle; collect gone states now and
 * then. */
void xseg_retire_stream(xseg_t *xs, xstream *s);
/* Settle gone streams whose work is done (waiting if block), then free the
 * states nothing refers to. */
void xseg_collect_streams(xseg_t *xs, int block);
/* Release every empty slab (trim, the retry ladder). */
void xseg_drop_empty_slabs(xseg_t *xs);

/* ---- diag.c: diagnostics that walk the block list (xs->lock held) ---- */
/* Why ptr is not live: foreign, interior or freed (the status and message). */
xseg_status xdiag_bad_pointer(xseg_t *xs, const void *ptr, const char *what);
/* Out-of-memory: counts it, sets the message with its hint (quoting
 * `stats`, filled by the caller, and `cause`, the last attempt's own
 * message, or NULL), calls the callback; returns XSEG_ERR_OOM. */
xseg_status xdiag_oom_report(xseg_t *xs, size_t size, const xseg_stats *stats,
                             const char *cause);

/* ---- monitoring hooks (history.c, shm.c), called with the lock held ---- */
typedef enum xev_kind {
    XEV_ALLOC = 0, XEV_FREE, XEV_MAP, XEV_UNMAP, XEV_TRIM, XEV_OOM
} xev_kind;
void xseg_hist_add(xseg_t *xs, xev_kind kind, uintptr_t addr, size_t size, void *stream);
static inline void xseg_hist(xseg_t *xs, xev_kind kind, uintptr_t addr, size_t size, void *stream)
{
    if (xs->hist)
        xseg_hist_add(xs, kind, addr, size, stream);
}
void xseg_shm_update(xseg_t *xs);
static inline void xseg_shm(xseg_t *xs)
{
    if (xs->shm)
        xseg_shm_update(xs);
}
/* Set up / tear down history and stats_shm per the conf (shm.c), and the
 * history ring alone (history.c). */
xseg_status xseg_monitor_init(xseg_t *xs);
void xseg_monitor_fini(xseg_t *xs);
xseg_status xseg_hist_init(xseg_t *xs);
void xseg_hist_fini(xseg_t *xs);
/* The history as JSON (the body of xseg_history_json), with the lock held. */
struct xtb;
void xseg_hist_render(const xseg_t *xs, const char *backend, struct xtb *b);

/* ---- process.c: process-wide state ---- */
#define XSEG_MAX_DEVICES 64 /* default allocators: devices 0..63 */
/* Bumped in the child at every fork(). */
extern atomic_uint xseg_fork_gen_now;
/* 1 when xs was created before a fork() and this is the child. */
static inline int xseg_forked(const xseg_t *xs)
{
    return xs->fork_gen != atomic_load_explicit(&xseg_fork_gen_now, memory_order_relaxed);
}
/* XSEG_OK, or XSEG_ERR_FORKED with a message when xseg_forked(xs).  Entry
 * points call it before taking xs->lock, which a parent's thread may have
 * held at the fork. */
xseg_status xseg_check_fork(xseg_t *xs, const char *what);
/* fork(): the process-wide locks held across it (process.c says the
 * order).  xseg_fork_init registers the one handler once; each *_fork_lock
 * takes (1) or gives back (0) its file's lock. */
void xseg_fork_init(void);
void xshm_fork_lock(int take);
/* The PyTorch graph pools' lock (plugin.c), held across fork(). */
void xproc_pool_lock(void);
void xproc_pool_unlock(void);
/* The device registry: the device whose default allocator xs is (-1: none);
 * a device's default allocator if it exists (NULL otherwise, never created
 * here); the default allocator whose range holds ptr, `device`'s first. */
int xproc_default_device(const xseg_t *xs);
xseg_t *xproc_default_peek(int device);
xseg_t *xproc_default_owning(int device, const void *ptr);
/* The out-of-memory handlers' table (xseg_set_oom_handler): set xs's
 * handler (fn NULL: remove it; 0 when the table is full); find the handler
 * of xs or of the allocator whose tag xs serves (0: none). */
#define XPROC_OOM_HANDLERS 64
typedef struct xproc_oom {
    xseg_t *xs;
    xseg_oom_handler fn;
    void *user;
} xproc_oom;
int xproc_oom_set(xseg_t *xs, xseg_oom_handler fn, void *user);
int xproc_oom_find(xseg_t *xs, xproc_oom *out);

/* ---- tags.c ---- */
/* The calling thread's tag (top of its stack, 0 when empty). */
extern _Thread_local int xseg_tls_tag;
/* The allocator of `tag` of xs's family (xs's parent's when xs is a tag's),
 * made on first use when `make`; *out NULL when it does not exist. */
xseg_status xtag_get(xseg_t *xs, int tag, int make, xseg_t **out, const char *what);
/* Add every tag's allocator's figures to a parent's stats. */
void xtag_stats_add(xseg_t *xs, xseg_stats *s);
/* xseg_alloc on this very allocator, ignoring the thread's tag (api.c). */
xseg_status xapi_alloc(xseg_t *xs, size_t size, void *stream, void **out);
static inline int xseg_in_range(const xseg_t *xs, uintptr_t p)
{
    return p - xs->arena.base < xs->arena.size;
}
/* The allocator of xs's family whose range holds p: xs, or one of its
 * tags' (a short walk, only once tags exist); NULL if none. */
static inline xseg_t *xseg_range_owner(xseg_t *xs, uintptr_t p)
{
    if (xseg_in_range(xs, p))
        return xs;
    if (!atomic_load_explicit(&xs->ntags, memory_order_relaxed))
        return NULL;
    for (int t = 1; t < XSEG_MAX_TAGS; t++) {
        xseg_t *c = atomic_load_explicit(&xs->tags[t], memory_order_acquire);
        if (c && xseg_in_range(c, p))
            return c;
    }
    return NULL;
}

/* ---- sleep.c: sleep and wake of one allocator (xs->lock not held) ---- */
xseg_status xsleep_sleep(xseg_t *xs, xseg_sleep_mode mode);
xseg_status xsleep_wake(xseg_t *xs);
/* The sleep part of a tag's stats (asleep, mode, live, mapped, ...). */
void xsleep_fill(xseg_t *xs, xseg_tag_stats *out);
/* Free the backup buffer and records (driver call only if call_driver). */
void xsleep_fini(xseg_t *xs, int call_driver);

/* ---- share.c: dedicated blocks, export and import, peers (docs/sharing.md) ----
 * Each takes the family parent's lock itself (xs->lock not held).  The
 * xseg_* entry points of the Sharing section are api.c's, after the fork
 * check.  Setup resolves `shareable` and applies `peer_access` (0 or a
 * status). */
xseg_status xshare_setup(xseg_t *xs);
void xshare_fini(xseg_t *xs, int call_driver);
/* The dedicated and imported counters' peaks (xseg_reset_peak). */
void xshare_reset_peak(xseg_t *xs);
xseg_status xshare_alloc(xseg_t *xs, size_t size, void *stream, void **out);
/* 1 if ptr starts a live dedicated block of xs's family (takes its lock:
 * not for a parent's allocator in a forked child). */
int xshare_holds(xseg_t *xs, const void *ptr);
/* 1 when ptr is a dedicated block of xs's family: then *st is the outcome
 * of freeing it / recording the stream / its sizes; 0: not one (nothing done). */
int xshare_free(xseg_t *xs, void *ptr, xseg_status *st);
int xshare_record_stream(xseg_t *xs, void *ptr, void *stream, xseg_status *st);
int xshare_block_size(xseg_t *xs, const void *ptr, size_t *rounded, size_t *requested,
                      xseg_status *st);
/* 1 when a live dedicated block of xs's family holds ptr (its start or any
 * byte inside): *base, *rounded, *requested (each may be NULL) are set; 0:
 * none (query.c's xseg_block_range). */
int xshare_block_range(xseg_t *xs, const void *ptr, uintptr_t *base, size_t *rounded,
                       size_t *requested);
xseg_status xshare_export(xseg_t *xs, const void *ptr, xseg_export_desc *desc);
xseg_status xshare_import(xseg_t *xs, const xseg_export_desc *desc, void **out);
xseg_status xshare_unimport(xseg_t *xs, void *ptr);
xseg_status xshare_enable_peer(xseg_t *xs, int device);
xseg_status xshare_stats(xseg_t *xs, xseg_share_stats *out);

/* ---- lifecycle.c: construction and teardown ---- */
/* Build an allocator (fork_gen: the generation it belongs to). */
xseg_status xlife_create(xseg_t **out, int device, const char *conf, const xseg_driver *drv,
                         unsigned fork_gen);
/* The allocator of `tag` for parent: the parent's conf and open driver,
 * its own virtual range, no worker and no monitoring of its own. */
xseg_status xlife_create_tag(xseg_t *parent, int tag, xseg_t **out);
/* Free it; driver calls only if call_driver (not in a forked child). */
xseg_status xlife_destroy(xseg_t *xs, int call_driver);

/* Create an allocator over a given driver table (fault injection in tests). */
xseg_status xseg_create_with_driver(xseg_t **out, int device, const char *conf,
                                    const xseg_driver *drv);

/* ---- error.c ---- */
xseg_status xseg_fail(xseg_t *xs, xseg_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void xseg_clear_error(void);
/* Counts this thread's xseg_fail calls: a caller compares two readings to
 * learn whether the message was written in between. */
unsigned xseg_error_gen(void);
/* Human-readable size ("1.50 GiB") into a caller buffer. */
const char *xseg_fmt_size(uint64_t bytes, char *buf, size_t len);

/* ---- counters ---- */
/* The peak compares signed: requested.cur may lie below 0 for a moment
 * while a thread cache's part is not folded in (tcache.c), and must not
 * become a peak of 2^64 - n. */
static inline void xcnt_add(xcnt *c, uint64_t v)
{
    c->cur += v;
    c->total += v;
    if ((int64_t)c->cur > (int64_t)c->peak)
        c->peak = c->cur;
}
static inline void xcnt_sub(xcnt *c, uint64_t v) { c->cur -= v; }

/* ---- the family's mapped bytes and cap (an allocator and its tags') ---- */
static inline xseg_t *xfam(xseg_t *xs) { return xs->parent ? xs->parent : xs; }

/* ---- the slack governor (slack.c) ---- */
/* What release_threshold may leave mapped now, the governor's grant
 * included (SIZE_MAX: no limit; alloc.c). */
size_t xblk_release_limit(const xseg_t *xs);
void xslack_note(xseg_t *xs, size_t bytes);
void xslack_reset(xseg_t *xs);

/* The live bytes release_threshold:auto counts on (alloc.c xblk_release_limit;
 * premap and the worker's bound scale with it): the peak allocated since
 * creation or the last trim, or the program's expected_peak when that is
 * higher (the default tag's allocator only: the hint is for the program,
 * and a tag's allocator keeps its own peak). */
static inline size_t xseg_budget(const xseg_t *xs)
{
    size_t hint = xs->parent ? 0 : xs->conf.expected_peak;
    return xs->budget_peak > hint ? (size_t)xs->budget_peak : hint;
}
static inline void xmapped_add(xseg_t *xs, size_t bytes)
{
    xcnt_add(&xs->mapped, bytes);
    atomic_fetch_add_explicit(&xfam(xs)->fam_mapped, bytes, memory_order_relaxed);
}
static inline void xmapped_sub(xseg_t *xs, size_t bytes)
{
    xcnt_sub(&xs->mapped, bytes);
    atomic_fetch_sub_explicit(&xfam(xs)->fam_mapped, bytes, memory_order_relaxed);
}
/* The cap of xs's family (SIZE_MAX: none) and what the family maps. */
static inline size_t xfam_cap(xseg_t *xs)
{
    return atomic_load_explicit(&xfam(xs)->fam_cap, memory_order_relaxed);
}
static inline size_t xfam_mapped(xseg_t *xs)
{
    return atomic_load_explicit(&xfam(xs)->fam_mapped, memory_order_relaxed);
}
/* 1 when mapping `need` more bytes would take the family over its cap. */
static inline int xfam_over_cap(xseg_t *xs, size_t need)
{
    size_t cap = xfam_cap(xs);
    return cap != SIZE_MAX && xfam_mapped(xs) + need > cap;
}

/* ---- worker.c: the reclaim worker (its own thread, xseg-reclaim) ---- */
/* Start it (reclaim:worker); XSEG_OK or a status with a message. */
xseg_status xworker_start(xseg_t *xs);
/* Stop and join it, then run what is queued on this thread (call_driver:
 * else the jobs are dropped, a forked child's case).  No xs->lock held. */
void xworker_stop(xseg_t *xs, int call_driver);
/* 1 when a release job may be queued now (a worker runs and what is in
 * flight is under its bound); xs->lock held. */
int xworker_takes(const xseg_t *xs);
/* Queue a job (xs->lock held). */
void xworker_push(xseg_t *xs, xrelease *job);
/* Wait until the worker has nothing queued or running, and settle what it
 * did.  Called with xs->lock held: gives it up while waiting and takes it
 * again (the worker itself never takes xs->lock). */
void xworker_drain_locked(xseg_t *xs);
/* Settle the jobs the worker has finished (its done list), xs->lock held. */
void xworker_settle_locked(xseg_t *xs);
/* Run the queued unmaps the worker has not started on this thread and wait
 * for the one it is running, xs->lock held (growth and splits call it). */
void xworker_finish_unmaps_locked(xseg_t *xs);
/* For the tests: while `on`, the worker, woken, waits before it takes the
 * queue (a thread the scheduler has not run yet); and the drains waiting
 * for the worker now. */
void xworker_test_stall(xseg_t *xs, int on);
int xworker_test_drains(xseg_t *xs);

/* ---- freeidx.c ---- */
void xfi_init(xfreeidx *f);
void xfi_insert(xfreeidx *f, xblock *b);
void xfi_remove(xfreeidx *f, xblock *b);
xblock *xfi_find(xfreeidx *f, size_t size, size_t max_size);
size_t xfi_largest(const xfreeidx *f);
/* The bucket (first and second level) a block of `size` belongs in. */
void xfi_bucket(size_t size, unsigned *fl, unsigned *sl);
/* Up to `max` blocks from the largest buckets down (largest bucket first,
 * unordered within a bucket).  Off the hot path: growth only. */
size_t xfi_top(const xfreeidx *f, xblock **out, size_t max);

/* ---- arena.c ---- */
xseg_status xarena_init(xseg_t *xs, size_t va_size);
void xarena_fini(xseg_t *xs, int call_driver);
/* Make every page under [a, b) mapped and accessible. */
xseg_status xarena_ensure(xseg_t *xs, uintptr_t a, uintptr_t b, size_t request);
/* Map [a, b) again at wake: large handles whatever handle_size says. */
xseg_status xarena_ensure_wake(xseg_t *xs, uintptr_t a, uintptr_t b);
/* The same for a run mapped ahead of demand, flagged XH_PREMAP: the
 * fewest handles in powers of two of pages, or (whole) one handle, up to
 * max_handle. */
xseg_status xarena_premap(xseg_t *xs, uintptr_t a, uintptr_t b, int whole);
/* 1 when the handle behind page p (mapped) was mapped ahead (XH_PREMAP). */
int xarena_premapped(const xseg_t *xs, size_t p);
/* A large handle reaching outside an allocation [a, b) into free space
 * [lo, hi) is released, so that only the pages the allocation needs are
 * mapped again, at page grain. */
void xarena_split_edges(xseg_t *xs, uintptr_t a, uintptr_t b, uintptr_t lo, uintptr_t hi, int *err);
/* 1 when every page under [a, b) is mapped (no bit counting). */
int xarena_all_mapped(const xseg_t *xs, uintptr_t a, uintptr_t b);
/* 1 when no page under [a, b) is mapped. */
int xarena_all_unmapped(const xseg_t *xs, uintptr_t a, uintptr_t b);
/* Bytes of pages under [a, b) not yet mapped. */
size_t xarena_unmapped_bytes(const xseg_t *xs, uintptr_t a, uintptr_t b);
/* Unmap and release the handles lying wholly inside [a, b), lowest first,
 * until at least `limit` bytes are released.  Returns bytes. */
size_t xarena_release_inside(xseg_t *xs, uintptr_t a, uintptr_t b, size_t limit, int *err);
/* Take the whole handles inside [a, b) out of the tables into job (lowest
 * first, until `limit` bytes); [*lo, *hi) gets the pages they span.  They
 * stay counted in mapped and handles (releasing_*).  Returns bytes. */
size_t xarena_detach_inside(xseg_t *xs, uintptr_t a, uintptr_t b, size_t limit, xrelease *job,
                            uintptr_t *lo, uintptr_t *hi);
/* Settle a job's handle: released (uncounted), its release failed (an
 * orphan), or its unmap failed (back into the tables: still mapped). */
void xarena_settle(xseg_t *xs, const xrel_handle *h);
/* Release again the handles whose release failed (kept, never leaked). */
void xarena_release_orphans(xseg_t *xs);
void xblk_moved_process(xseg_t *xs, int block);
void xblk_moved_fini(xseg_t *xs, int call_driver);
/* Move whole handles from the mapped run at the start of [sa, sb) to the
 * unmapped pages of [da, db) (map at the new place and set access; the old
 * mapping stays until xarena_unmap_old), at most `max` bytes, in order,
 * stopping at the first that does not fit.  [*lo, *hi) receives the old
 * range moved.  Returns bytes moved (mapped bytes are unchanged). */
size_t xarena_move(xseg_t *xs, uintptr_t sa, uintptr_t sb, uintptr_t da, uintptr_t db, size_t max,
                   uintptr_t *lo, uintptr_t *hi);
/* Unmap the old mapping of moved handles ([lo, hi), page aligned). */
int xarena_unmap_old(xseg_t *xs, uintptr_t lo, uintptr_t hi);

/* ---- streams.c ---- */
xstream *xstream_get(xseg_t *xs, void *handle);
/* 1 when the GPU is done with work on s up to `epoch`; waits if `block`. */
int xstream_done(xseg_t *xs, xstream *s, uint64_t epoch, int block);
void xstreams_fini(xseg_t *xs, int call_driver);
/* Wait for the stream's work, then detach it (xseg_stream_retire); returns
 * 1 when it is to be settled now (free.c). */
int xstream_retire_begin(xseg_t *xs, xstream *s);
/* The stream side of settling a gone stream whose work is done, before
 * (event) and after (uses, moved blocks) free.c gives its blocks back. */
void xstream_settle_begin(xseg_t *xs, xstream *s);
void xstream_settle_end(xseg_t *xs, xstream *s);
/* Free the states of gone streams nothing refers to any more. */
void xstreams_sweep(xseg_t *xs);
/* Stream states held: live streams plus retired ones not yet freed. */
size_t xstreams_count(const xseg_t *xs);
xseg_status xuses_add(xseg_t *xs, uintptr_t addr, xstream *s);
/* Move a freed user allocation with uses to the pending list. */
xseg_status xpending_add(xseg_t *xs, uintptr_t addr, uintptr_t tag, xuses *u);

/* ---- blocks (alloc.c) ---- */
xblock *xblock_new(xseg_t *xs);
void xblock_put(xseg_t *xs, xblock *b);
/* Allocate an arena block of `size` for stream s (mapped, accessible). */
xseg_status xblk_alloc(xseg_t *xs, xstream *s, size_t size, size_t request, xblock **out);
/* Return an arena block to the free state (coalescing). */
void xblk_free(xseg_t *xs, xblock *b);
/* Make every cached free block of s neutral (its GPU work is done). */
void xblk_neutralize(xseg_t *xs, xstream *s);
/* Reclaim cached memory: release up to `want` bytes (SIZE_MAX: all).  With
 * block, waits on events; otherwise only reclaims blocks already safe. */
size_t xseg_reclaim(xseg_t *xs, size_t want, int block);
/* The same, handing the releases to the reclaim worker when it runs
 * (releases the caller need not wait for): within reclaim_inflight, or all
 * of them when `unbounded` (xseg_trim_start). */
#define XREL_ASYNC_ALL 2 /* xs->rel_async: the worker takes every release */
size_t xseg_reclaim_async(xseg_t *xs, size_t want, int block, int unbounded);
/* The most that premap may map ahead now (0: off). */
size_t xseg_premap_budget(const xseg_t *xs);

/* ---- small.c ---- */
int xsmall_init(xseg_t *xs);
void xsmall_fini(xseg_t *xs);
static inline int xsmall_class(const xseg_t *xs, size_t size)
{
    if (size > xs->conf.small_size || !xs->conf.caching)
        return -1;
    return xs->class_of[(size + 511) >> 9];
}
xseg_status xsmall_alloc(xseg_t *xs, xstream *s, int cls, size_t size, void **out);
void xsmall_free(xseg_t *xs, xslab *slab, uintptr_t addr);
/* Release the empty slabs of a retired stream whose work is done. */
void xsmall_drop_stream(xseg_t *xs, xstream *s);
void xsmall_drop_kept(xseg_t *xs);

/* ---- stats.c ---- */
void xseg_fill_stats(xseg_t *xs, xseg_stats *st);
/* Largest block of any free index (stats.c; a walk over the streams). */
uint64_t xseg_largest_free(const xseg_t *xs);
/* Add `from`'s figures to `into` (a family's stats: counters, calls and
 * bytes add up; peaks add up too, an upper bound of the family's peak;
 * the largest free block is the larger; cap, device and page stay). */
void xseg_stats_add(xseg_stats *into, const xseg_stats *from);
/* JSON of a stats struct into buf; returns the length needed (no NUL). */
size_t xseg_render_json(const xseg_stats *s, const char *backend, char *buf, size_t cap);

#endif
