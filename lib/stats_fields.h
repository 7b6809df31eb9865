/* stats_fields.h: the one list of the fields of struct xseg_stats
 * (include/xseg.h), in the struct's order, with every fact about each field
 * that a renderer or a copy needs.  It drives the struct fill (stats.c, where
 * a field is a plain copy of an allocator counter), the JSON text (stats.c),
 * the Prometheus families (prom.c, for the library and xseg-top alike), the
 * shm record copy (shm_format.h), and the checks: static asserts below that
 * the list and the hand-written struct agree field by field (offset and
 * size), tests/test_lists.c (docs/stats.md names every field, the JSON has
 * every field, the Prometheus text every family) and
 * tools/python/tests/test_struct.py (the ctypes mirror has these fields in
 * this order; it reads this file, so keep one X( entry a line start).
 *
 * XSEG_STATS_FIELDS(X, P) expands X once per field:
 *   X(kind, field, json, how, src, shm, proms)
 * kind:  U32 / I32  a header word (uint32_t / int32_t)
 *        COUNTER    an xseg_counter: current, peak, total
 *        OPS        uint64_t[XSEG_OP_COUNT]: a monotone counter per driver op
 *        GAUGE      a uint64_t that moves both ways
 *        MONO       a uint64_t counter that only grows
 * json:  its key in xseg_stats_json, 0 when not rendered there (version and
 *        device are rendered first, with "backend", the others in order)
 * how:   xs: xseg_fill_stats copies it from the allocator's member `src`
 *        (an xcnt for COUNTER, a uint64_t otherwise); calc: computed by hand
 *        there (src is 0); share: the family's sharing state's figures
 *        (xshare_stats, share.c), filled where the family's stats are read
 *        (api.c), 0 in what xseg_fill_stats alone gives (src is 0)
 * shm:   the xseg_shm_record field (XSF_*) of its first word, for
 *        xseg_shm_stats_copy; -1 when the copy leaves it alone
 * proms: zero or more P(order, member, style, type, name, help): a
 *        Prometheus family of xseg_stats_prometheus_render, `order` its
 *        place in the text (after xseg_info, which is no stats field),
 *        `member` the uint64_t it shows, `style` one (one sample), inf0
 *        (one sample, 0 shown as +Inf) or ops (one sample per driver op,
 *        with an op label), `type` gauge or counter.
 */
#ifndef XSEG_STATS_FIELDS_H
#define XSEG_STATS_FIELDS_H

#include <stddef.h>

#include "xseg.h"

/* clang-format off */
#define XSEG_STATS_FIELDS(X, P) \
X(U32, size, 0, calc, 0, -1, ) \
X(U32, version, "version", calc, 0, -1, ) \
X(I32, device, "device", calc, 0, -1, ) \
X(U32, reserved0, 0, calc, 0, -1, ) \
X(COUNTER, allocated_bytes, "allocated_bytes", xs, allocated, XSF_ALLOCATED, \
  P(0, allocated_bytes.current, one, gauge, "xseg_allocated_bytes", \
    "Bytes of live allocations (rounded block sizes).") \
  P(1, allocated_bytes.peak, one, gauge, "xseg_allocated_peak_bytes", \
    "Highest xseg_allocated_bytes since creation or the last peak reset.") \
  P(17, allocated_bytes.total, one, counter, "xseg_alloc_bytes_total", \
    "Bytes handed out by successful allocations (rounded block sizes).")) \
X(COUNTER, requested_bytes, "requested_bytes", xs, requested, XSF_REQUESTED, \
  P(2, requested_bytes.current, one, gauge, "xseg_requested_bytes", \
    "Bytes of live allocations as requested by callers.") \
  P(3, requested_bytes.peak, one, gauge, "xseg_requested_peak_bytes", \
    "Highest xseg_requested_bytes since creation or the last peak reset.")) \
X(COUNTER, active_blocks, "active_blocks", xs, active, XSF_ACTIVE, \
  P(4, active_blocks.current, one, gauge, "xseg_active_blocks", "Live allocations.") \
  P(5, active_blocks.peak, one, gauge, "xseg_active_peak_blocks", \
    "Highest number of live allocations since creation or the last peak reset.") \
  P(16, active_blocks.total, one, counter, "xseg_allocations_total", \
    "Successful allocations.")) \
X(COUNTER, reserved_va_bytes, "reserved_va_bytes", xs, va, XSF_VA, \
  P(10, reserved_va_bytes.current, one, gauge, "xseg_reserved_va_bytes", \
    "Virtual address space reserved.")) \
X(COUNTER, mapped_bytes, "mapped_bytes", xs, mapped, XSF_MAPPED, \
  P(6, mapped_bytes.current, one, gauge, "xseg_mapped_bytes", \
    "Physical device memory mapped (taken from the device), live and cached.") \
  P(7, mapped_bytes.peak, one, gauge, "xseg_mapped_peak_bytes", \
    "Highest xseg_mapped_bytes since creation or the last peak reset.") \
  P(18, mapped_bytes.total, one, counter, "xseg_map_bytes_total", \
    "Physical bytes ever mapped.")) \
X(COUNTER, cached_bytes, "cached_bytes", calc, 0, XSF_CACHED, \
  P(8, cached_bytes.current, one, gauge, "xseg_cached_bytes", \
    "Mapped memory not allocated: cached for reuse (mapped minus allocated).") \
  P(9, cached_bytes.peak, one, gauge, "xseg_cached_peak_bytes", \
    "Highest xseg_cached_bytes seen since creation or the last peak reset.")) \
X(COUNTER, segments, "segments", xs, segments, XSF_SEGMENTS, \
  P(11, segments.current, one, gauge, "xseg_segments", "Virtual address reservations.")) \
X(COUNTER, handles, "handles", xs, handles, XSF_HANDLES, \
  P(12, handles.current, one, gauge, "xseg_handles", "Physical memory handles mapped.")) \
X(OPS, driver_calls, "driver_calls", calc, 0, XSF_DRV, \
  P(32, driver_calls, ops, counter, "xseg_driver_calls_total", "Driver calls by operation.")) \
X(MONO, driver_errors, "driver_errors", xs, drv_errors, XSF_DRIVER_ERRORS, \
  P(28, driver_errors, one, counter, "xseg_driver_errors_total", "Driver calls that failed.")) \
X(MONO, alloc_calls, "alloc_calls", xs, alloc_calls, XSF_ALLOC_CALLS, \
  P(20, alloc_calls, one, counter, "xseg_alloc_calls_total", "Calls to xseg_alloc.")) \
X(MONO, free_calls, "free_calls", xs, free_calls, XSF_FREE_CALLS, \
  P(21, free_calls, one, counter, "xseg_free_calls_total", "Calls to xseg_free.")) \
X(MONO, alloc_retries, "alloc_retries", xs, retries, XSF_RETRIES, \
  P(22, alloc_retries, one, counter, "xseg_alloc_retries_total", \
    "Allocation attempts retried after reclaiming memory.")) \
X(MONO, ooms, "ooms", xs, ooms, XSF_OOMS, \
  P(23, ooms, one, counter, "xseg_ooms_total", "Allocations that failed out of memory.")) \
X(MONO, syncs, "syncs", xs, syncs, XSF_SYNCS, \
  P(24, syncs, one, counter, "xseg_syncs_total", "Event or stream synchronisations waited on.")) \
X(MONO, gc_runs, "gc_runs", xs, gc_runs, XSF_GC_RUNS, \
  P(25, gc_runs, one, counter, "xseg_gc_runs_total", "Garbage collections near the cap.")) \
X(MONO, trims, "trims", xs, trims, XSF_TRIMS, \
  P(26, trims, one, counter, "xseg_trims_total", "Calls to xseg_trim.")) \
X(MONO, released_bytes, "released_bytes", xs, released, XSF_RELEASED, \
  P(19, released_bytes, one, counter, "xseg_released_bytes_total", \
    "Physical bytes unmapped and released back to the device.")) \
X(MONO, deferred_frees, "deferred_frees", xs, deferred, XSF_DEFERRED, \
  P(27, deferred_frees, one, counter, "xseg_deferred_frees_total", \
    "Frees held back by record_stream events.")) \
X(GAUGE, largest_free_block, "largest_free_block", calc, 0, XSF_LARGEST_FREE, \
  P(13, largest_free_block, one, gauge, "xseg_largest_free_block_bytes", \
    "Largest free block of virtual address space.")) \
X(GAUGE, mapped_cap, "mapped_cap", calc, 0, XSF_CAP, \
  P(31, mapped_cap, inf0, gauge, "xseg_mapped_cap_bytes", \
    "Cap on mapped bytes in force (+Inf: no cap).")) \
X(GAUGE, device_total, "device_total", xs, dev_total, XSF_DEVICE_TOTAL, \
  P(14, device_total, one, gauge, "xseg_device_total_bytes", \
    "Device memory size per the driver.")) \
X(GAUGE, page_size, "page_size", calc, 0, XSF_PAGE_SIZE, \
  P(15, page_size, one, gauge, "xseg_page_size_bytes", "Mapping granularity in force.")) \
X(MONO, moved_bytes, "moved_bytes", xs, moved_bytes, XSF_MOVED, \
  P(29, moved_bytes, one, counter, "xseg_moved_bytes_total", \
    "Bytes of cached handles moved under new blocks instead of new memory.")) \
X(GAUGE, unmapping_bytes, "unmapping_bytes", xs, unmapping_bytes, XSF_UNMAPPING, \
  P(30, unmapping_bytes, one, gauge, "xseg_unmapping_bytes", \
    "Old mappings of moved handles waiting for the GPU before they are unmapped.")) \
X(MONO, driver_calls_worker, "driver_calls_worker", calc, 0, XSF_DRV_CALLS_WORKER, \
  P(33, driver_calls_worker, one, counter, "xseg_driver_calls_worker_total", \
    "Driver calls made by the reclaim worker thread (also in xseg_driver_calls_total).")) \
X(MONO, driver_ns_caller, "driver_ns_caller", calc, 0, XSF_DRV_NS_CALLER, \
  P(34, driver_ns_caller, one, counter, "xseg_driver_caller_nanoseconds_total", \
    "Time spent in driver calls on the callers' threads.")) \
X(MONO, driver_ns_worker, "driver_ns_worker", calc, 0, XSF_DRV_NS_WORKER, \
  P(35, driver_ns_worker, one, counter, "xseg_driver_worker_nanoseconds_total", \
    "Time spent in driver calls on the reclaim worker's thread.")) \
X(MONO, worker_jobs, "worker_jobs", xs, wk_jobs, XSF_WORKER_JOBS, \
  P(36, worker_jobs, one, counter, "xseg_worker_jobs_total", \
    "Release and unmap jobs the reclaim worker finished.")) \
X(GAUGE, worker_bytes, "worker_bytes", calc, 0, XSF_WORKER_BYTES, \
  P(37, worker_bytes, one, gauge, "xseg_worker_bytes", \
    "Bytes handed to the reclaim worker and not yet given back: memory being released (in xseg_mapped_bytes) and old mappings being unmapped.")) \
X(COUNTER, dedicated_bytes, "dedicated_bytes", share, 0, -1, \
  P(38, dedicated_bytes.current, one, gauge, "xseg_dedicated_bytes", \
    "Device memory of live dedicated (registrable, exportable) blocks, outside the cached arena: not in xseg_mapped_bytes; the cap counts it.") \
  P(39, dedicated_bytes.peak, one, gauge, "xseg_dedicated_peak_bytes", \
    "Highest xseg_dedicated_bytes since creation or the last peak reset.") \
  P(40, dedicated_bytes.total, one, counter, "xseg_dedicated_alloc_bytes_total", \
    "Bytes handed out as dedicated blocks (whole granules).")) \
X(COUNTER, imported_bytes, "imported_bytes", share, 0, -1, \
  P(41, imported_bytes.current, one, gauge, "xseg_imported_bytes", \
    "Bytes of blocks imported from other processes and mapped here (their exporters' memory).")) \
X(GAUGE, release_budget, "release_budget", calc, 0, XSF_RELEASE_BUDGET, \
  P(42, release_budget, one, gauge, "xseg_release_budget_bytes", \
    "Live bytes release_threshold:auto counts on: the peak allocated since creation or the last trim, or expected_peak when higher.")) \
X(GAUGE, slack_granted, "slack_granted", calc, 0, XSF_SLACK_GRANTED, \
  P(43, slack_granted, one, gauge, "xseg_slack_granted_bytes", \
    "Bytes the slack governor (release_slack_max) lets the cache keep mapped over release_slack's share of the release budget."))
/* clang-format on */

/* Number of uint64_t words of a kind (0: a header word, not copied). */
#define XSEG_SF_WORDS_U32 0
#define XSEG_SF_WORDS_I32 0
#define XSEG_SF_WORDS_COUNTER 3
#define XSEG_SF_WORDS_OPS XSEG_OP_COUNT
#define XSEG_SF_WORDS_GAUGE 1
#define XSEG_SF_WORDS_MONO 1

#define XSEG_SF_NOTHING(...)
#define XSEG_SF_ONE(...) +1
#define XSEG_SF_PROMS_(kind, f, json, how, src, shm, proms) proms

/* How many fields and Prometheus families the list has. */
enum {
    XSEG_STATS_NFIELDS = 0 XSEG_STATS_FIELDS(XSEG_SF_ONE, XSEG_SF_NOTHING),
    XSEG_STATS_NFAMILIES = 0 XSEG_STATS_FIELDS(XSEG_SF_PROMS_, XSEG_SF_ONE)
};

/* ---- the list and the hand-written struct agree, field by field -------- */

/* The struct that the list describes, for comparison only.  (A typedef per
 * field, since OPS' type is an array.) */
#define XSEG_SF_TYPEDEF(kind, f, ...) typedef XSEG_SF_ARR_##kind(xseg_sf_t_##f);
#define XSEG_SF_ARR_U32(n) uint32_t n
#define XSEG_SF_ARR_I32(n) int32_t n
#define XSEG_SF_ARR_COUNTER(n) xseg_counter n
#define XSEG_SF_ARR_OPS(n) uint64_t n[XSEG_OP_COUNT]
#define XSEG_SF_ARR_GAUGE(n) uint64_t n
#define XSEG_SF_ARR_MONO(n) uint64_t n
XSEG_STATS_FIELDS(XSEG_SF_TYPEDEF, XSEG_SF_NOTHING)
#define XSEG_SF_MEMBER(kind, f, ...) xseg_sf_t_##f f;
typedef struct xseg_stats_listed {
    XSEG_STATS_FIELDS(XSEG_SF_MEMBER, XSEG_SF_NOTHING)
} xseg_stats_listed;
#define XSEG_SF_ASSERT(kind, f, ...)                                                     \
    _Static_assert(offsetof(xseg_stats_listed, f) == offsetof(xseg_stats, f) &&          \
                       sizeof(((xseg_stats_listed *)0)->f) == sizeof(((xseg_stats *)0)->f), \
                   "stats_fields.h: " #f " is not where xseg_stats has it");
XSEG_STATS_FIELDS(XSEG_SF_ASSERT, XSEG_SF_NOTHING)
_Static_assert(sizeof(xseg_stats_listed) == sizeof(xseg_stats),
               "stats_fields.h: a field of xseg_stats is missing from the list");

#endif
