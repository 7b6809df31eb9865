/* conf.h: the configuration: defaults and the "key:value,..." parser
 * (XSEG_CONF).  Every key is documented in docs/config.md. */
#ifndef XSEG_CONF_H
#define XSEG_CONF_H

#include <stddef.h>
#include "xseg.h"

typedef enum xseg_backend_kind {
    XSEG_BACKEND_AUTO = 0,
    XSEG_BACKEND_CUDA,
    XSEG_BACKEND_HOST
} xseg_backend_kind;

/* Default host_capacity.  A build for a tool with a small address space
 * (valgrind: 64 GB for the whole client, while the automatic va_size is 4x
 * this) may lower it: -DXSEG_DEFAULT_HOST_CAPACITY='((size_t)4 << 30)'. */
#ifndef XSEG_DEFAULT_HOST_CAPACITY
#define XSEG_DEFAULT_HOST_CAPACITY ((size_t)64 << 30)
#endif

#define XSEG_SIZE_AUTO ((size_t)0)
#define XSEG_SIZE_UNLIMITED ((size_t)-1)
#define XSEG_HANDLE_PAGE ((size_t)1) /* handle_size:page: one handle per page */
/* release_threshold:0 (stored as 1 byte, since 0 is auto): freed memory is
 * released at once, at the free (docs/config.md). */
#define XSEG_RELEASE_NOW ((size_t)1)
/* Largest host_capacity: 4 x this (the automatic va_size) still fits in a
 * size_t and the memfd's off_t, with room to round up to whole pages. */
#define XSEG_HOST_CAPACITY_MAX ((size_t)1 << 60)

typedef struct xseg_conf {
    xseg_backend_kind backend;   /* backend: auto|cuda|host (auto) */
    size_t page_size;            /* page_size: 0 = driver granularity */
    size_t handle_size;          /* handle_size: 0 = auto heuristic, XSEG_HANDLE_PAGE = page */
    size_t va_size;              /* va_size: 0 = auto (4 x device memory) */
    size_t max_mapped;           /* max_mapped: 0 = no cap */
    double memory_fraction;      /* memory_fraction: 0 = no cap, (0,1] */
    double gc_threshold;         /* gc_threshold: 0 = off, (0,1) of the cap */
    size_t release_threshold;    /* release_threshold: XSEG_SIZE_AUTO = peak-live policy,
                                    XSEG_SIZE_UNLIMITED = never release */
    unsigned alloc_retries;      /* alloc_retries: attempts before OOM (>=1), default 3 */
    size_t max_split_size;       /* max_split_size: XSEG_SIZE_UNLIMITED = no limit */
    unsigned roundup_power2_divisions; /* 0 = off; else 1..64, power of two */
    int caching;                 /* caching: 1 (on) / 0 (off) */
    size_t host_capacity;        /* host_capacity: simulated memory, default 64GB */
    size_t small_size;           /* small_size: largest request served from size classes */
    int verbose;                 /* verbose: 1 prints errors to stderr */
    int stats_shm;               /* stats_shm: publish live stats in /dev/shm */
    unsigned history;            /* history: ring buffer of last N events, 0 = off */
    int thread_cache;            /* thread_cache: per-thread caches (on) */
    int release_wait;            /* release_wait: wait for the GPU rather than map over
                                    the release threshold (on) */
    unsigned host_event_lag;     /* host_event_lag: host events complete after N queries */
    double release_slack;        /* release_slack: auto threshold = peak live x (1 + this) */
    int placement;               /* placement: XSEG_PLACE_START / XSEG_PLACE_PAGES */
} xseg_conf;

/* Where a request goes inside the free block chosen for it. */
enum { XSEG_PLACE_START = 0, XSEG_PLACE_PAGES = 1 };

/* Fill the defaults. */
void xseg_conf_defaults(xseg_conf *c);

/* Parse "key:value,key:value" on top of *c.  NULL or "" is valid (no
 * change).  On error returns XSEG_ERR_CONFIG, writes a message naming the key
 * and the value into err, and leaves *c unchanged. */
xseg_status xseg_conf_parse(xseg_conf *c, const char *text, char *err, size_t errlen);

/* The cap on mapped bytes that c gives on a device of dev_total bytes:
 * max_mapped, memory_fraction x dev_total, the smaller; SIZE_MAX = no cap.
 * A memory_fraction whose cap computes to 0 bytes is XSEG_ERR_CONFIG (a
 * message naming the key in err): 0 would read as "no cap" everywhere. */
xseg_status xseg_conf_cap(const xseg_conf *c, size_t dev_total, size_t *cap, char *err,
                          size_t errlen);

/* Parse a size with optional binary unit: 512, 512B, 512KB, 2MB, 40GB, 1TB
 * (also KiB/MiB/GiB/TiB, K/M/G/T; case-insensitive).  0 on success. */
int xseg_parse_size(const char *text, size_t len, size_t *out);

#endif
