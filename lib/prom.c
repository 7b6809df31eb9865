/* prom.c: the stats in the Prometheus text exposition format (version
 * 0.0.4): a HELP and a TYPE line per metric family, base units (bytes),
 * `_bytes` / `_total` suffixes, and a `device` label on every sample, for a
 * server to add to its own /metrics.  Driven by a table of families. */
#include <stddef.h>
#include <stdio.h>

#include "internal.h"
#include "textbuf.h"

typedef unsigned long long ull;

#define F(field) offsetof(xseg_stats, field)
#define CUR(field) offsetof(xseg_stats, field) + offsetof(xseg_counter, current)
#define PEAK(field) offsetof(xseg_stats, field) + offsetof(xseg_counter, peak)
#define TOTAL(field) offsetof(xseg_stats, field) + offsetof(xseg_counter, total)

typedef struct pfamily {
    const char *name;
    const char *type; /* "gauge" or "counter" */
    size_t off;       /* of a uint64_t in xseg_stats */
    const char *help;
} pfamily;

static const pfamily families[] = {
    {"xseg_allocated_bytes", "gauge", CUR(allocated_bytes),
     "Bytes of live allocations (rounded block sizes)."},
    {"xseg_allocated_peak_bytes", "gauge", PEAK(allocated_bytes),
     "Highest xseg_allocated_bytes since creation or the last peak reset."},
    {"xseg_requested_bytes", "gauge", CUR(requested_bytes),
     "Bytes of live allocations as requested by callers."},
    {"xseg_requested_peak_bytes", "gauge", PEAK(requested_bytes),
     "Highest xseg_requested_bytes since creation or the last peak reset."},
    {"xseg_active_blocks", "gauge", CUR(active_blocks), "Live allocations."},
    {"xseg_active_peak_blocks", "gauge", PEAK(active_blocks),
     "Highest number of live allocations since creation or the last peak reset."},
    {"xseg_mapped_bytes", "gauge", CUR(mapped_bytes),
     "Physical device memory mapped (taken from the device), live and cached."},
    {"xseg_mapped_peak_bytes", "gauge", PEAK(mapped_bytes),
     "Highest xseg_mapped_bytes since creation or the last peak reset."},
    {"xseg_cached_bytes", "gauge", CUR(cached_bytes),
     "Mapped memory not allocated: cached for reuse (mapped minus allocated)."},
    {"xseg_cached_peak_bytes", "gauge", PEAK(cached_bytes),
     "Highest xseg_cached_bytes seen since creation or the last peak reset."},
    {"xseg_reserved_va_bytes", "gauge", CUR(reserved_va_bytes),
     "Virtual address space reserved."},
    {"xseg_segments", "gauge", CUR(segments), "Virtual address reservations."},
    {"xseg_handles", "gauge", CUR(handles), "Physical memory handles mapped."},
    {"xseg_largest_free_block_bytes", "gauge", F(largest_free_block),
     "Largest free block of virtual address space."},
    {"xseg_device_total_bytes", "gauge", F(device_total), "Device memory size per the driver."},
    {"xseg_page_size_bytes", "gauge", F(page_size), "Mapping granularity in force."},
    {"xseg_allocations_total", "counter", TOTAL(active_blocks), "Successful allocations."},
    {"xseg_alloc_bytes_total", "counter", TOTAL(allocated_bytes),
     "Bytes handed out by successful allocations (rounded block sizes)."},
    {"xseg_map_bytes_total", "counter", TOTAL(mapped_bytes),
     "Physical bytes ever mapped."},
    {"xseg_released_bytes_total", "counter", F(released_bytes),
     "Physical bytes unmapped and released back to the device."},
    {"xseg_alloc_calls_total", "counter", F(alloc_calls), "Calls to xseg_alloc."},
    {"xseg_free_calls_total", "counter", F(free_calls), "Calls to xseg_free."},
    {"xseg_alloc_retries_total", "counter", F(alloc_retries),
     "Allocation attempts retried after reclaiming memory."},
    {"xseg_ooms_total", "counter", F(ooms), "Allocations that failed out of memory."},
    {"xseg_syncs_total", "counter", F(syncs), "Event or stream synchronisations waited on."},
    {"xseg_gc_runs_total", "counter", F(gc_runs), "Garbage collections near the cap."},
    {"xseg_trims_total", "counter", F(trims), "Calls to xseg_trim."},
    {"xseg_deferred_frees_total", "counter", F(deferred_frees),
     "Frees held back by record_stream events."},
    {"xseg_driver_errors_total", "counter", F(driver_errors), "Driver calls that failed."},
    {"xseg_moved_bytes_total", "counter", F(moved_bytes),
     "Bytes of cached handles moved under new blocks instead of new memory."},
    {"xseg_unmapping_bytes", "gauge", F(unmapping_bytes),
     "Old mappings of moved handles waiting for the GPU before they are unmapped."},
};

static uint64_t field(const xseg_stats *s, size_t off)
{
    return *(const uint64_t *)(const void *)((const char *)s + off);
}

static void family(xtb *b, const pfamily *f, const xseg_stats *s)
{
    xtb_put(b, "# HELP %s %s\n# TYPE %s %s\n%s{device=\"%d\"} %llu\n", f->name, f->help, f->name,
         f->type, f->name, s->device, (ull)field(s, f->off));
}

static void cap_family(xtb *b, const xseg_stats *s)
{
    xtb_put(b, "# HELP xseg_mapped_cap_bytes Cap on mapped bytes in force (+Inf: no cap).\n"
            "# TYPE xseg_mapped_cap_bytes gauge\n");
    if (s->mapped_cap)
        xtb_put(b, "xseg_mapped_cap_bytes{device=\"%d\"} %llu\n", s->device, (ull)s->mapped_cap);
    else
        xtb_put(b, "xseg_mapped_cap_bytes{device=\"%d\"} +Inf\n", s->device);
}

static void driver_family(xtb *b, const xseg_stats *s)
{
    xtb_put(b, "# HELP xseg_driver_calls_total Driver calls by operation.\n"
            "# TYPE xseg_driver_calls_total counter\n");
    for (int i = 0; i < XSEG_OP_COUNT; i++)
        xtb_put(b, "xseg_driver_calls_total{device=\"%d\",op=\"%s\"} %llu\n", s->device,
             xseg_op_name((xseg_op)i), (ull)s->driver_calls[i]);
}

static void info_family(xtb *b, const xseg_stats *s, const char *backend)
{
    xtb_put(b, "# HELP xseg_info Allocator information (always 1).\n# TYPE xseg_info gauge\n"
            "xseg_info{device=\"%d\",backend=\"%s\",version=\"%s\"} 1\n",
         s->device, backend, xseg_version());
}

size_t xseg_render_prometheus(const xseg_stats *s, const char *backend, char *buf, size_t cap);
size_t xseg_render_prometheus(const xseg_stats *s, const char *backend, char *buf, size_t cap)
{
    xtb b = {buf, cap, 0};
    info_family(&b, s, backend);
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        family(&b, &families[i], s);
    cap_family(&b, s);
    driver_family(&b, s);
    if (cap)
        buf[b.len < cap ? b.len : cap - 1] = '\0';
    return b.len;
}

xseg_status xseg_stats_prometheus(xseg_t *xs, char *buf, size_t cap, size_t *len)
{
    if (!xs)
        return xseg_fail(NULL, XSEG_ERR_INVALID_ARG, "xseg_stats_prometheus: allocator is NULL");
    if (!buf && cap)
        return xseg_fail(xs, XSEG_ERR_INVALID_ARG, "xseg_stats_prometheus: buf is NULL");
    xseg_stats st = {.size = sizeof st};
    xseg_status rc = xseg_get_stats(xs, &st);
    if (rc != XSEG_OK)
        return rc;
    size_t n = xseg_render_prometheus(&st, xseg_backend_name(xs), buf, cap);
    if (len)
        *len = n;
    if (n + 1 > cap)
        return xseg_fail(xs, XSEG_ERR_BUFFER_TOO_SMALL,
                         "xseg_stats_prometheus: %zu bytes needed, buffer has %zu", n + 1, cap);
    return XSEG_OK;
}
