/* xseg.h: the one public header of libxseg, an expandable-segments caching
 * allocator for GPU memory built on CUDA virtual memory management.
 *
 * Conventions, stated once:
 *  - Every function returns an xseg_status; XSEG_OK (0) is success.  On any
 *    other status, xseg_last_error() returns a readable, thread-local message
 *    that names the numbers involved, and the allocator's state is unchanged.
 *  - The library never aborts, never exits and never prints unless the
 *    configuration asks it to (key `verbose`).
 *  - All functions taking an xseg_t are thread-safe.
 *  - Streams are CUDA streams (CUstream / cudaStream_t) passed as void *;
 *    NULL is the legacy default stream.  On the host backend they are opaque
 *    tokens.
 */
#ifndef XSEG_H
#define XSEG_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define XSEG_VERSION_MAJOR 0
#define XSEG_VERSION_MINOR 1
#define XSEG_VERSION_PATCH 0
#define XSEG_VERSION_STRING "0.1.0"

#if defined(XSEG_STATIC_DEFINE)
#define XSEG_API
#elif defined(XSEG_BUILDING)
#define XSEG_API __attribute__((visibility("default")))
#else
#define XSEG_API
#endif

/* Stable status codes: values never change once released. */
typedef enum xseg_status {
    XSEG_OK = 0,
    XSEG_ERR_INVALID_ARG = 1,     /* NULL, size 0, out-of-range argument */
    XSEG_ERR_CONFIG = 2,          /* unknown key or bad value in the conf */
    XSEG_ERR_OOM = 3,             /* out of device memory or over the cap */
    XSEG_ERR_SIZE = 4,            /* request larger than any possible block */
    XSEG_ERR_INVALID_POINTER = 5, /* pointer not handed out by this allocator */
    XSEG_ERR_INTERIOR_POINTER = 6,/* pointer inside a live block, not its start */
    XSEG_ERR_DOUBLE_FREE = 7,     /* pointer already freed */
    XSEG_ERR_DRIVER = 8,          /* the driver failed (code in the message) */
    XSEG_ERR_NO_BACKEND = 9,      /* requested backend unavailable */
    XSEG_ERR_NO_DEVICE = 10,      /* device index invalid or no device */
    XSEG_ERR_FORKED = 11,         /* used in a child process after fork() */
    XSEG_ERR_VA_EXHAUSTED = 12,   /* the virtual range has no room left */
    XSEG_ERR_BUFFER_TOO_SMALL = 13,
    XSEG_ERR_INTERNAL = 14,
    XSEG_ERR_ASLEEP = 15,         /* the memory of this tag is asleep (xseg_sleep) */
    XSEG_ERR_STATE = 16           /* not possible in the current state (wake of a tag
                                     that is awake, sleep during a graph capture, ...) */
} xseg_status;

/* Driver operations, as counted in xseg_stats.driver_calls. */
typedef enum xseg_op {
    XSEG_OP_RESERVE = 0,
    XSEG_OP_ADDRESS_FREE,
    XSEG_OP_CREATE,
    XSEG_OP_RELEASE,
    XSEG_OP_MAP,
    XSEG_OP_UNMAP,
    XSEG_OP_SET_ACCESS,
    XSEG_OP_MEM_INFO,
    XSEG_OP_EVENT_CREATE,
    XSEG_OP_EVENT_RECORD,
    XSEG_OP_EVENT_QUERY,
    XSEG_OP_EVENT_SYNC,
    XSEG_OP_EVENT_DESTROY,
    XSEG_OP_STREAM_SYNC,
    XSEG_OP_HOST_ALLOC,      /* pinned host memory for sleep's backups */
    XSEG_OP_HOST_FREE,
    XSEG_OP_COPY_TO_HOST,    /* asynchronous copies of sleep and wake */
    XSEG_OP_COPY_TO_DEVICE,
    XSEG_OP_COPY_WAIT,       /* wait for the copies issued */
    XSEG_OP_EXPORT,          /* a handle exported as a descriptor (docs/sharing.md) */
    XSEG_OP_IMPORT,          /* a handle imported from a descriptor */
    XSEG_OP_COUNT
} xseg_op;

typedef struct xseg xseg_t;

/* current: now; peak: highest since creation or the last peak reset;
 * total: cumulative amount ever added (bytes or count). */
typedef struct xseg_counter {
    uint64_t current;
    uint64_t peak;
    uint64_t total;
} xseg_counter;

#define XSEG_STATS_VERSION 1

typedef struct xseg_stats {
    uint32_t size;    /* caller sets sizeof(xseg_stats) */
    uint32_t version; /* filled: XSEG_STATS_VERSION */
    int32_t device;
    uint32_t reserved0;
    xseg_counter allocated_bytes;   /* rounded block sizes of live allocations */
    xseg_counter requested_bytes;   /* sizes callers asked for */
    xseg_counter active_blocks;     /* live allocations */
    xseg_counter reserved_va_bytes; /* virtual address space reserved */
    xseg_counter mapped_bytes;      /* physical memory mapped (taken from device) */
    xseg_counter cached_bytes;      /* mapped but not allocated */
    xseg_counter segments;          /* virtual reservations */
    xseg_counter handles;           /* physical handles */
    uint64_t driver_calls[XSEG_OP_COUNT];
    uint64_t driver_errors;
    uint64_t alloc_calls;
    uint64_t free_calls;
    uint64_t alloc_retries;
    uint64_t ooms;
    uint64_t syncs;            /* event / stream synchronisations waited on */
    uint64_t gc_runs;
    uint64_t trims;
    uint64_t released_bytes;   /* physical bytes unmapped and released, total */
    uint64_t deferred_frees;   /* frees held back by record_stream events */
    uint64_t largest_free_block; /* largest free virtual block (bytes) */
    uint64_t mapped_cap;       /* cap on mapped bytes in force (0: none) */
    uint64_t device_total;     /* device memory size per the driver */
    uint64_t page_size;        /* mapping granularity in force */
    /* Growth over the release threshold or the cap moves the handles of
     * cached blocks under the new block (docs/design.md): */
    uint64_t moved_bytes;      /* handle bytes moved so, total */
    uint64_t unmapping_bytes;  /* old mappings of moved handles waiting for the GPU */
    /* The reclaim worker (reclaim:worker, docs/config.md): */
    uint64_t driver_calls_worker; /* driver calls it made (also in driver_calls) */
    uint64_t driver_ns_caller;    /* ns in driver calls on the callers' threads */
    uint64_t driver_ns_worker;    /* ns in driver calls on the worker's thread */
    uint64_t worker_jobs;         /* release and unmap jobs it finished */
    uint64_t worker_bytes;        /* handed to it, not yet given back */
    /* Sharing (docs/sharing.md): memory mapped outside the cached arena,
     * so in none of the figures above (mapped_bytes is the arena's): */
    xseg_counter dedicated_bytes; /* dedicated blocks, whole granules (the cap counts them) */
    xseg_counter imported_bytes;  /* blocks imported from other processes (not charged) */
    /* release_threshold:auto (docs/config.md): the live bytes it counts on,
     * the peak allocated since creation or the last trim, or expected_peak
     * when that is higher (summed over the family's tags): */
    uint64_t release_budget;
    /* What the slack governor lets the cache keep over release_slack's
     * share of that budget (release_slack_max; summed over the tags): */
    uint64_t slack_granted;
} xseg_stats;

/* Static information. */
XSEG_API const char *xseg_version(void);
XSEG_API const char *xseg_strerror(xseg_status status);
XSEG_API const char *xseg_op_name(xseg_op op);
/* The detailed message of the last failing call on this thread ("" if none). */
XSEG_API const char *xseg_last_error(void);

/* Create an allocator for `device`.  conf: "key:value,..." (docs/config.md);
 * NULL means the XSEG_CONF environment variable (unset or empty: defaults). */
XSEG_API xseg_status xseg_create(xseg_t **out, int device, const char *conf);
/* Destroy: unmaps and releases everything; live allocations become invalid. */
XSEG_API xseg_status xseg_destroy(xseg_t *xs);

/* Allocate `size` bytes for use on `stream`.  A block freed on the same
 * stream is reused at once; blocks of other streams only once the GPU is
 * done with them. */
XSEG_API xseg_status xseg_alloc(xseg_t *xs, size_t size, void *stream, void **out);
XSEG_API xseg_status xseg_free(xseg_t *xs, void *ptr);
/* Mark that `ptr` is also used on `stream`: at free, its reuse waits for an
 * event recorded on that stream. */
XSEG_API xseg_status xseg_record_stream(xseg_t *xs, void *ptr, void *stream);
/* Before destroying a stream that was passed to this allocator: waits for
 * the work queued on it, makes its cached blocks reusable by every stream,
 * and never touches the stream again (a later stream with the same handle
 * is a new stream).  Without it, xseg may record an event on the stream
 * later, which the CUDA driver does not allow once it is destroyed. */
XSEG_API xseg_status xseg_stream_retire(xseg_t *xs, void *stream);
/* Size of the block behind a live pointer (rounded) and as requested. */
XSEG_API xseg_status xseg_block_size(xseg_t *xs, const void *ptr, size_t *rounded,
                                     size_t *requested);
/* The live allocation that holds `ptr`, which may point at its start or at
 * any byte inside (an interior pointer, its last byte): *base receives its
 * start, *rounded and *requested its sizes as xseg_block_size gives them
 * (each may be NULL).  A tag's allocation or a dedicated block of xs's
 * family counts too.  XSEG_ERR_INVALID_POINTER, with a message, when no
 * live allocation holds it (freed, free space, another allocator's).
 * Starts are found in O(1), interior pointers in O(log blocks) (lib/query.c). */
XSEG_API xseg_status xseg_block_range(xseg_t *xs, const void *ptr, void **base, size_t *rounded,
                                      size_t *requested);

/* Give cached free memory back to the device, keeping at most `keep` cached
 * bytes mapped; waits (on events) for the GPU where needed.  *released (may
 * be NULL) receives the number of physical bytes released.  With a reclaim
 * worker it first waits for the worker's queue, then releases the rest on
 * the calling thread (one thread in the driver at a time is the fastest).
 * It also restarts release_threshold:auto's budget from what is left (the
 * bytes allocated now plus the cache kept): later growth releases at the
 * new workload's own peak, not at an earlier, larger one. */
XSEG_API xseg_status xseg_trim(xseg_t *xs, size_t keep, size_t *released);
/* xseg_trim without the wait for the memory to be back: the whole handles
 * of cached memory beyond `keep` go to the reclaim worker (reclaim:worker),
 * whatever reclaim_inflight says, and the call returns; the worker unmaps
 * and releases them while the caller goes on.  The memory stays counted in
 * mapped_bytes until it is released (xseg_trim waits for that).  *queued
 * (may be NULL) receives the bytes handed over or released here.  Without
 * a worker (reclaim:sync) it is xseg_trim.  docs/config.md, reclaim. */
XSEG_API xseg_status xseg_trim_start(xseg_t *xs, size_t keep, size_t *queued);

XSEG_API xseg_status xseg_get_stats(xseg_t *xs, xseg_stats *out);
XSEG_API xseg_status xseg_reset_peak(xseg_t *xs);
/* The conf key expected_peak at run time: release_threshold:auto counts on
 * at least `bytes` live bytes from now on (0: no hint), for a program that
 * learns its peak as it runs (a server's profile pass, a training job's
 * first step; then xseg_trim so that the layout starts again with it).
 * Applies to the allocator's default tag (docs/config.md, expected_peak). */
XSEG_API xseg_status xseg_set_expected_peak(xseg_t *xs, size_t bytes);
/* Where a driver call was made from: the thread of an entry point (the
 * caller, who waits for it) or the allocator's worker thread. */
typedef enum xseg_side { XSEG_SIDE_CALLER = 0, XSEG_SIDE_WORKER = 1 } xseg_side;
/* *ns receives the nanoseconds spent in driver calls of `op` made from
 * `side` since the allocator was created (op XSEG_OP_COUNT: every op).
 * docs/stats.md. */
XSEG_API xseg_status xseg_driver_time(xseg_t *xs, xseg_side side, xseg_op op, uint64_t *ns);
/* Walk the allocator's internal invariants under its lock (block list,
 * free indexes, LRU, live map, slabs, page bitmap vs handle table,
 * counters, thread-cache held bits): XSEG_OK, or XSEG_ERR_INTERNAL with
 * xseg_last_error() naming the broken invariant and the block (address,
 * size).  Linear in blocks and pages: for tests and debugging, in every
 * build; changes nothing. */
XSEG_API xseg_status xseg_check(xseg_t *xs);
/* Render the stats as JSON into buf (NUL-terminated).  *len receives the
 * length needed without the NUL; XSEG_ERR_BUFFER_TOO_SMALL if cap is short. */
XSEG_API xseg_status xseg_stats_json(xseg_t *xs, char *buf, size_t cap, size_t *len);

/* The process-wide allocator of `device`, created on first use from
 * XSEG_CONF.  Never destroyed: it stays valid until the process ends (exit
 * handlers and static destructors may still use it), and xseg_destroy
 * refuses it with XSEG_ERR_INVALID_ARG. */
XSEG_API xseg_status xseg_default(int device, xseg_t **out);

/* Name of the backend in use ("cuda" or "host"). */
XSEG_API const char *xseg_backend_name(const xseg_t *xs);

/* ---- Monitoring (docs/monitoring.md) ---- */

/* Prometheus text exposition format (HELP/TYPE lines, base units, a
 * device label), for a server's own /metrics.  Same buffer rules as
 * xseg_stats_json. */
XSEG_API xseg_status xseg_stats_prometheus(xseg_t *xs, char *buf, size_t cap, size_t *len);
/* One allocator's stats for xseg_stats_prometheus_render, with labels put
 * before `device` on each of its samples (xseg-top: pid, process, slot). */
typedef struct xseg_prom_source {
    const xseg_stats *stats;  /* its size field tells how much of it is there */
    const char *backend;      /* xseg_info's backend label; NULL: "" */
    const char *version;      /* xseg_info's version label; NULL: xseg_version() */
    size_t nlabels;           /* at most XSEG_PROM_MAX_LABELS */
    const char *const *label_names;  /* [a-zA-Z_][a-zA-Z0-9_]*, not device/op/backend/version */
    const char *const *label_values; /* any bytes: escaped, invalid UTF-8 becomes U+FFFD */
} xseg_prom_source;
#define XSEG_PROM_MAX_LABELS 8
/* The text of xseg_stats_prometheus for n allocators at once: each family's
 * HELP and TYPE lines once, then one sample per source (n = 0: the comment
 * lines alone).  xseg_stats_prometheus(xs) is this for one source without
 * labels.  Same buffer rules as xseg_stats_json. */
XSEG_API xseg_status xseg_stats_prometheus_render(const xseg_prom_source *src, size_t n,
                                                  char *buf, size_t cap, size_t *len);
/* Every segment (mapped and unmapped ranges, handles) and every block
 * (address, size, requested size, state, stream) as JSON. */
XSEG_API xseg_status xseg_snapshot_json(xseg_t *xs, char *buf, size_t cap, size_t *len);
/* The last N events (conf key history:N) as JSON, oldest first. */
XSEG_API xseg_status xseg_history_json(xseg_t *xs, char *buf, size_t cap, size_t *len);

/* Numbers at an out-of-memory failure. */
typedef struct xseg_oom_info {
    int device;
    size_t requested;
    size_t live;          /* allocated bytes */
    size_t mapped;
    size_t cached;
    size_t cap;           /* 0: no cap */
    size_t largest_free;  /* largest free virtual block */
    size_t device_free;   /* per the driver */
    const char *hint;     /* the config key that would help */
    const char *message;  /* the full message (also in xseg_last_error) */
} xseg_oom_info;
typedef void (*xseg_oom_callback)(const xseg_oom_info *info, void *user);
/* Called (under the allocator's lock: do not call back into xs) on every
 * out-of-memory failure.  NULL removes it. */
XSEG_API xseg_status xseg_set_oom_callback(xseg_t *xs, xseg_oom_callback cb, void *user);

/* ---- PyTorch CUDAPluggableAllocator entry points (docs/pytorch.md) ----
 * Each serves the process-wide allocator of `device` (xseg_default).  They
 * cannot return a status: the hooks clear xseg_last_error() on entry, and
 * failures return NULL / do nothing and leave the message there. */
XSEG_API void *xseg_torch_alloc(size_t size, int device, void *stream);
XSEG_API void xseg_torch_free(void *ptr, size_t size, int device, void *stream);
XSEG_API void xseg_torch_init(int device_count);
XSEG_API void xseg_torch_reset(void);
XSEG_API void xseg_torch_memory_fraction(double fraction, int device);
XSEG_API void xseg_torch_record_stream(void *ptr, void *stream);
/* CUDA graph private pools (PyTorch MempoolId_t, passed by value): during a
 * capture every allocation of `device` comes from a pool that never unmaps
 * or hands its memory to others.  `filter` (a std::function) is ignored. */
typedef struct xseg_torch_pool_id {
    uint64_t first, second;
} xseg_torch_pool_id;
XSEG_API void xseg_torch_begin_pool(int device, xseg_torch_pool_id id, void *filter);
XSEG_API void xseg_torch_end_pool(int device, xseg_torch_pool_id id);
XSEG_API void xseg_torch_release_pool(int device, xseg_torch_pool_id id);
/* The graph pools of `device` (-1: all devices), for monitoring. */
typedef struct xseg_torch_pools_info {
    size_t pools;         /* pools alive */
    size_t in_use;        /* of those, pools a graph (or the capture) still uses */
    size_t failed;        /* pools whose allocator could not be created */
    size_t mapped_bytes;  /* device memory the pools hold */
    size_t live_blocks;   /* pool allocations not yet freed */
    size_t live_bytes;    /* their requested bytes */
} xseg_torch_pools_info;
XSEG_API xseg_status xseg_torch_pools(int device, xseg_torch_pools_info *out);
/* Set the process-wide allocators' conf before first use (NULL: XSEG_CONF). */
XSEG_API xseg_status xseg_set_default_conf(const char *conf);

/* ---- Tags, sleep and wake (docs/sleep.md) ----
 * A tag names a kind of memory ("weights", "kv", ...).  Tags are process
 * wide: tag 0 is "default" (untagged memory); others are registered by name
 * and numbered 1 .. XSEG_MAX_TAGS - 1.  Each thread has a stack of tags; an
 * allocation takes the tag on top (0 when empty), or the one passed to
 * xseg_alloc_tagged.  The blocks of each tag live in their own virtual range
 * of the allocator, so no page holds two tags' memory.
 * xseg_sleep gives back the physical memory under a tag's blocks, live ones
 * included, and keeps their addresses: pointers, and CUDA graphs captured
 * with them, stay valid.  xseg_wake maps memory at the same addresses again
 * (and restores the contents a backup sleep saved).  Between the two, the
 * tag's allocations fail with XSEG_ERR_ASLEEP, its frees work (the memory is
 * simply dropped), and a kernel touching its memory faults. */
#define XSEG_MAX_TAGS 32
#define XSEG_TAG_NAME_MAX 32 /* with the NUL */
typedef enum xseg_sleep_mode {
    XSEG_SLEEP_DISCARD = 0,  /* contents lost (KV caches, scratch) */
    XSEG_SLEEP_BACKUP = 1    /* contents copied to pinned host memory and back */
} xseg_sleep_mode;
/* The id of tag `name` ([A-Za-z0-9_.:-], 1..31 chars), registered on first
 * use; "default" is 0. */
XSEG_API xseg_status xseg_tag_id(const char *name, int *tag);
/* Name of a registered tag, NULL if none. */
XSEG_API const char *xseg_tag_name(int tag);
/* The calling thread's tag stack (depth at most 64). */
XSEG_API xseg_status xseg_tag_push(int tag);
XSEG_API xseg_status xseg_tag_pop(void);
XSEG_API int xseg_tag_current(void);
/* xseg_alloc with an explicit tag (the thread's stack is ignored). */
XSEG_API xseg_status xseg_alloc_tagged(xseg_t *xs, size_t size, void *stream, int tag,
                                       void **out);
/* The tag of a live allocation. */
XSEG_API xseg_status xseg_tag_of(xseg_t *xs, const void *ptr, int *tag);
/* Put the memory of `ntags` tags to sleep: wait for the GPU work queued on
 * every stream that used it (a synchronisation of each such stream, no device sync), copy live contents to
 * host memory (XSEG_SLEEP_BACKUP), then unmap and release every physical
 * handle of those tags, cached memory included.  All or nothing: on failure
 * the tags are awake as before.  A tag already asleep is XSEG_ERR_STATE. */
XSEG_API xseg_status xseg_sleep(xseg_t *xs, const int *tags, size_t ntags, xseg_sleep_mode mode);
/* Wake them: map memory under every live block again and restore backups.
 * On failure (out of memory, cap, driver) the tags stay asleep, nothing is
 * mapped for them and nothing is lost: the call can be made again. */
XSEG_API xseg_status xseg_wake(xseg_t *xs, const int *tags, size_t ntags);
typedef struct xseg_tag_stats {
    uint32_t size;             /* caller sets sizeof(xseg_tag_stats) */
    int32_t tag;
    char name[XSEG_TAG_NAME_MAX];
    int32_t asleep;            /* 0 awake, 1 asleep */
    int32_t mode;              /* xseg_sleep_mode of the last sleep */
    xseg_counter live_bytes;   /* allocated (rounded) bytes of the tag's blocks */
    xseg_counter mapped_bytes; /* physical memory mapped for the tag */
    uint64_t sleeping_bytes;   /* live bytes whose memory is given back now */
    uint64_t backup_bytes;     /* host bytes holding their contents (backup) */
    uint64_t sleeps, wakes;
    uint64_t last_sleep_ns, last_wake_ns; /* duration of the last of each */
} xseg_tag_stats;
/* Stats of one tag of xs (a tag xs never used reads zero). */
XSEG_API xseg_status xseg_tag_stats_get(xseg_t *xs, int tag, xseg_tag_stats *out);
/* Sleep and wake for PyTorch: tags (by name, registered on first use) of
 * the process-wide allocator of `device`; the name "graphs" stands for
 * every CUDA-graph private pool of the device (xseg_torch_begin_pool),
 * which sleeps and wakes like a tag.  All or nothing, as xseg_sleep. */
XSEG_API xseg_status xseg_torch_sleep(int device, const char *const *tags, size_t ntags,
                                      xseg_sleep_mode mode);
XSEG_API xseg_status xseg_torch_wake(int device, const char *const *tags, size_t ntags);

/* ---- Other frameworks and the preload library (docs/preload.md) ----
 * CuPy's CFunctionAllocator (cupy.cuda.memory.CFunctionAllocator, through
 * xseg.cupy_allocator() in Python): the process-wide allocator of `device`
 * (xseg_default); `param` is the stream the memory is used on (NULL: the
 * legacy default stream).  As the PyTorch hooks: xseg_last_error() is
 * cleared on entry, failures return NULL / do nothing and leave a message. */
XSEG_API void *xseg_cupy_malloc(void *param, size_t size, int device);
XSEG_API void xseg_cupy_free(void *param, void *ptr, int device);
/* The process-wide allocator (xseg_default) whose reserved range holds
 * `ptr`, live or not, and its device (may be NULL); creates nothing, takes
 * no lock.  XSEG_ERR_INVALID_POINTER when none does: then the pointer did
 * not come from xseg. */
XSEG_API xseg_status xseg_default_owner(const void *ptr, xseg_t **out, int *device);

/* ---- Out-of-memory handler: free memory and retry (issue 16) ----
 * Called when an allocation of xs has failed with XSEG_ERR_OOM after the
 * retry ladder (conf alloc_retries), and after the xseg_oom_callback.  The
 * allocator's lock is NOT held: the handler may free memory (xseg_free,
 * xseg_trim, a server's cache eviction) and may allocate.  It returns
 * nonzero to ask for one more attempt of the failed allocation, 0 to let it
 * fail.  Per thread, the handler is not re-entered: an allocation of xs that
 * runs out of memory inside the handler fails at once (no deadlock, no
 * recursion), and the retry after the handler does not call it again.  When
 * the handler declines, or the retry fails, the call returns XSEG_ERR_OOM with
 * the message of the last failure.  NULL removes it, and so does
 * xseg_destroy(xs); at most 64 allocators have one at a time
 * (XSEG_ERR_INVALID_ARG beyond). */
typedef int (*xseg_oom_handler)(xseg_t *xs, size_t requested, void *user);
XSEG_API xseg_status xseg_set_oom_handler(xseg_t *xs, xseg_oom_handler fn, void *user);

/* ---- Sharing (docs/sharing.md) ----
 * Ordinary allocations live in the cached arena: their pages are shared
 * with neighbouring blocks and reused after free, so they are never
 * exported.  A *dedicated* block has a virtual range and one physical
 * handle of its own, of whole registration granules: NCCL
 * (ncclCommRegister) and dmabuf (cuMemGetHandleForAddressRange) accept it,
 * and when the conf's `shareable` gives a handle type it can be exported to
 * other processes.  It is never cached: its free waits for the streams that
 * used it, unmaps it and gives the exporter's reference back, so its pages
 * are never reused while another process maps them (the memory lives until
 * the last importer unmaps it).  Dedicated blocks come from
 * xseg_alloc_registrable, or from xseg_alloc for requests of at least the
 * conf's `registrable_min`; xseg_free frees them. */
#define XSEG_EXPORT_MAGIC 0x58534558u /* "XSEX" */
#define XSEG_EXPORT_VERSION 1u
#define XSEG_EXPORT_MAX_PIECES 8      /* handles one description can carry */
/* One handle of an exported block: `size` bytes mapped at `offset` bytes
 * into the block, behind descriptor fd. */
typedef struct xseg_export_piece {
    int32_t fd;
    uint32_t reserved;
    uint64_t offset;
    uint64_t size;
} xseg_export_piece;
/* A self-contained description of an exported block.  Its descriptors
 * (pieces and token) belong to whoever holds the description: close them
 * with xseg_export_close once sent or imported. */
typedef struct xseg_export_desc {
    uint32_t magic;          /* XSEG_EXPORT_MAGIC */
    uint32_t version;        /* XSEG_EXPORT_VERSION */
    int32_t device;          /* the exporter's device ordinal */
    int32_t pid;             /* the exporter's process */
    uint8_t uuid[16];        /* the device's identity (ordinals differ between processes) */
    uint64_t size;           /* bytes mapped: the sum of the pieces, whole granules */
    uint64_t requested;      /* bytes the allocation asked for (<= size) */
    uint64_t nonce;          /* random, per exported block: the token slot holds it while
                                the block lives; the exporter's free clears it */
    uint32_t handle_type;    /* 1: POSIX file descriptor */
    uint32_t npieces;        /* 1 .. XSEG_EXPORT_MAX_PIECES */
    int32_t token_fd;        /* the exporter's token file (see nonce) */
    uint32_t token_slot;     /* the 8-byte slot of this block in it */
    uint64_t check;          /* checksum of the fields above and the pieces' offsets and
                                sizes (not the descriptors' numbers) */
    xseg_export_piece pieces[XSEG_EXPORT_MAX_PIECES];
} xseg_export_desc;
/* A dedicated block of at least `size` bytes for `stream` (rounded to the
 * registration granularity; one physical handle). */
XSEG_API xseg_status xseg_alloc_registrable(xseg_t *xs, size_t size, void *stream, void **out);
/* Describe the dedicated block at ptr (its start) for another process:
 * descriptors duplicated for the description.  Refused for ordinary
 * allocations and when the block's handle is not shareable (`shareable`). */
XSEG_API xseg_status xseg_export(xseg_t *xs, const void *ptr, xseg_export_desc *desc);
/* Close the descriptors of a description (sets them to -1). */
XSEG_API void xseg_export_close(xseg_export_desc *desc);
/* Send / receive a description over a connected Unix socket (SCM_RIGHTS
 * carries the descriptors; received ones replace the numbers in desc). */
XSEG_API xseg_status xseg_send_export(int sock, const xseg_export_desc *desc);
XSEG_API xseg_status xseg_recv_export(int sock, xseg_export_desc *desc);
/* Map an exported block read-write at a new address of this process (its
 * own virtual range, with access for the device and the peers of
 * `peer_access`).  Refused, with nothing mapped: a forged or damaged
 * description, a block its exporter has freed, another device, a block
 * already imported by this allocator.  The descriptors stay the caller's. */
XSEG_API xseg_status xseg_import(xseg_t *xs, const xseg_export_desc *desc, void **out);
/* Unmap an imported block (its memory lives on while others map it). */
XSEG_API xseg_status xseg_unimport(xseg_t *xs, void *ptr);
/* Give `device` read-write access to every mapping of the allocator (its
 * tags', dedicated and imported blocks) and to every later one. */
XSEG_API xseg_status xseg_enable_peer(xseg_t *xs, int device);
typedef struct xseg_share_stats {
    uint32_t size;             /* caller sets sizeof(xseg_share_stats) */
    uint32_t handle_types;     /* types of new dedicated handles (1: fd, 2: fabric) */
    uint64_t peers;            /* bit d: device d has access to new mappings */
    xseg_counter dedicated_blocks, dedicated_bytes; /* mapped whole granules */
    xseg_counter imported_blocks, imported_bytes;
    uint64_t exports;          /* descriptions made */
    uint64_t exported_live;    /* dedicated blocks exported and not yet freed */
    uint64_t refused_imports;  /* imports refused (bad descriptions) */
    char why[160];             /* why handle_types is what it is (shareable:auto's fallback) */
} xseg_share_stats;
XSEG_API xseg_status xseg_share_stats_get(xseg_t *xs, xseg_share_stats *out);

#ifdef __cplusplus
}
#endif
#endif /* XSEG_H */
