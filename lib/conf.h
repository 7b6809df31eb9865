/* conf.h: the configuration: the list of keys with their defaults, and the
 * "key:value,..." parser (XSEG_CONF).  Every key is documented in
 * docs/config.md. */
#ifndef XSEG_CONF_H
#define XSEG_CONF_H

#include <stddef.h>
#include <stdint.h>
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

/* host_driver_latency: the host backend's driver calls take no extra time,
 * or the time of the CUDA driver's calls on an H200 (driver_host.h). */
enum { XSEG_LATENCY_OFF = 0, XSEG_LATENCY_H200 = 1 };

/* premap: auto (0, the default), off (stored as 1 byte); a size is the
 * most that may be mapped ahead of demand. */
#define XSEG_PREMAP_OFF ((size_t)1)

/* reclaim: who makes the driver calls nobody waits for (auto: the worker
 * on the cuda backend, the caller on host, whose calls cost little). */
enum { XSEG_RECLAIM_AUTO = 0, XSEG_RECLAIM_SYNC = 1, XSEG_RECLAIM_WORKER = 2 };

/* Where a request goes inside the free block chosen for it. */
enum { XSEG_PLACE_START = 0, XSEG_PLACE_PAGES = 1 };

/* shareable: the handle type of dedicated blocks (docs/sharing.md). */
enum { XSEG_SHARE_OFF = 0, XSEG_SHARE_FD = 1, XSEG_SHARE_FABRIC = 2, XSEG_SHARE_AUTO = 3 };
/* peer_access:all (every device but the allocator's own). */
#define XSEG_PEERS_ALL (~(uint64_t)0)

#define XSEG_CONF_KIB ((size_t)1 << 10)
#define XSEG_CONF_MIB ((size_t)1 << 20)
#define XSEG_CONF_BOOL "on, off, true, false, 1 or 0"

/* The one list of the keys, in docs/config.md's order.  It makes the struct
 * (a field per key, same name), the defaults (xseg_conf_defaults) and the
 * parser's table (conf.c); tests/test_lists.c checks that docs/config.md
 * documents every key, tools/fuzz/fuzz_conf.c compares and range-checks
 * every field through it.
 *   X(key, C type, default, parse, min, max, accepted values)
 * parse names conf.c's parse_<parse> function; min and max are the range of
 * the parse functions that use one (0 otherwise). */
/* clang-format off */
#define XSEG_CONF_KEYS(X) \
X(backend, xseg_backend_kind, XSEG_BACKEND_AUTO, backend, 0, 0, \
  "one of auto, cuda, host") \
/* 0 = driver granularity */ \
X(page_size, size_t, 0, pow2_auto, 4 * XSEG_CONF_KIB, 0, \
  "auto, 0, or a power-of-two size >= 4KB such as 2MB") \
/* 0 = auto heuristic, XSEG_HANDLE_PAGE = page */ \
X(handle_size, size_t, 0, handle, 4 * XSEG_CONF_KIB, 0, \
  "auto, 0, page, or a power-of-two size >= 4KB such as 2MB or 32MB") \
/* 0 = auto (4 x device memory) */ \
X(va_size, size_t, 0, size_auto, 0, 0, "auto, 0, or a size such as 512GB or 1TB") \
/* 0 = no cap */ \
X(max_mapped, size_t, 0, cap, 0, 0, "a size such as 512MB or 40GB, or none or 0 for no cap") \
/* 0 = no cap, (0,1] */ \
X(memory_fraction, double, 0.0, fraction, 0, 0, \
  "a real number in (0, 1] such as 0.9, or 0 for no cap") \
/* 0 = off, (0,1) of the cap */ \
X(gc_threshold, double, 0.0, threshold, 0, 0, "a real number in [0, 1) such as 0.8, 0 = off") \
/* XSEG_SIZE_AUTO = peak-live policy, XSEG_SIZE_UNLIMITED = never release */ \
X(release_threshold, size_t, XSEG_SIZE_AUTO, release, 0, 0, \
  "auto, unlimited, none, or a size such as 0, 512MB or 4GB") \
/* attempts before OOM */ \
X(alloc_retries, unsigned, 3, count, 1, 16, "an integer from 1 to 16") \
/* XSEG_SIZE_UNLIMITED = no limit */ \
X(max_split_size, size_t, XSEG_SIZE_UNLIMITED, split, XSEG_CONF_MIB, 0, \
  "unlimited, none, or a size >= 1MB such as 256MB") \
/* 0 = off; else 1..64, power of two */ \
X(roundup_power2_divisions, unsigned, 0, divisions, 0, 64, \
  "0 (off) or a power of two from 1 to 64") \
/* 1 (on) / 0 (off) */ \
X(caching, int, 1, bool, 0, 0, XSEG_CONF_BOOL) \
/* simulated memory of the host backend */ \
X(host_capacity, size_t, XSEG_DEFAULT_HOST_CAPACITY, size_range, 4 * XSEG_CONF_MIB, \
  XSEG_HOST_CAPACITY_MAX, "a size from 4MB to 1048576TB (2^60 bytes) such as 64GB") \
/* largest request served from size classes */ \
X(small_size, size_t, 64 * XSEG_CONF_KIB, size_range, 512, XSEG_CONF_MIB, \
  "a size from 512B to 1MB such as 64KB") \
/* 1 prints errors to stderr */ \
X(verbose, int, 0, bool, 0, 0, XSEG_CONF_BOOL) \
/* publish live stats in /dev/shm */ \
X(stats_shm, int, 0, bool, 0, 0, XSEG_CONF_BOOL) \
/* ring buffer of last N events, 0 = off */ \
X(history, unsigned, 0, count, 0, 1000000, "an integer from 0 to 1000000") \
/* per-thread caches */ \
X(thread_cache, int, 1, bool, 0, 0, XSEG_CONF_BOOL) \
/* wait for the GPU rather than map over the release threshold */ \
X(release_wait, int, 1, bool, 0, 0, XSEG_CONF_BOOL) \
/* host events complete after N queries */ \
X(host_event_lag, unsigned, 0, count, 0, 1000000, "an integer from 0 to 1000000") \
/* auto threshold = peak live x (1 + this), in whole pages */ \
X(release_slack, double, 0.006, threshold, 0, 0, "a real number in [0, 1) such as 0.01") \
/* the slack governor (slack.c) may raise release_slack up to this (0: off) */ \
X(release_slack_max, double, 0, threshold, 0, 0, "a real number in [0, 1) such as 0.2") \
/* 0 = none: release_threshold:auto's budget starts at this many live bytes */ \
X(expected_peak, size_t, 0, cap, 0, 0, "none or 0 (off), or a size such as 40GB") \
/* XSEG_PLACE_START / XSEG_PLACE_PAGES */ \
X(placement, int, XSEG_PLACE_START, placement, 0, 0, "start or pages") \
/* XSEG_LATENCY_OFF / XSEG_LATENCY_H200 */ \
X(host_driver_latency, int, XSEG_LATENCY_OFF, latency, 0, 0, "off or h200") \
/* XSEG_SIZE_AUTO, XSEG_PREMAP_OFF, or the most mapped ahead */ \
X(premap, size_t, XSEG_SIZE_AUTO, premap, 0, 0, "auto, off, or a size such as 64MB") \
/* XSEG_RECLAIM_SYNC / XSEG_RECLAIM_WORKER */ \
X(reclaim, int, XSEG_RECLAIM_AUTO, reclaim, 0, 0, "auto, sync or worker") \
/* XSEG_SIZE_AUTO, or the most the worker may hold in flight */ \
X(reclaim_inflight, size_t, XSEG_SIZE_AUTO, size_auto, 0, 0, \
  "auto, 0, or a size such as 256MB") \
/* sharing (docs/sharing.md): XSEG_SHARE_*, the handle type of dedicated blocks */ \
X(shareable, int, XSEG_SHARE_AUTO, shareable, 0, 0, "off, fd, fabric or auto") \
/* bit d: device d has access to every mapping; XSEG_PEERS_ALL: every device */ \
X(peer_access, uint64_t, 0, peers, 0, 0, \
  "none, all, or device numbers 0 to 62 joined by + such as 1+3") \
/* 0 = off: requests of at least this size get a dedicated block */ \
X(registrable_min, size_t, 0, cap, 0, 0, "none or 0 (off), or a size such as 256MB")
/* clang-format on */

#define XSEG_CONF_MEMBER(key, type, ...) type key;
typedef struct xseg_conf {
    XSEG_CONF_KEYS(XSEG_CONF_MEMBER)
} xseg_conf;

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
