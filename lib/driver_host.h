/* driver_host.h: controls and counters of the host backend, for tests and
 * tools.  The backend itself is the table xseg_driver_host (driver.h). */
#ifndef XSEG_DRIVER_HOST_H
#define XSEG_DRIVER_HOST_H

#include <stddef.h>
#include <stdint.h>

typedef struct xseg_host_counts {
    size_t reservations;    /* live VA reservations */
    size_t reserved_bytes;
    size_t handles;         /* live physical handles */
    size_t handle_bytes;    /* bytes of live handles (capacity in use) */
    size_t mappings;        /* live maps */
    size_t mapped_bytes;
    size_t events;          /* live events */
    size_t capacity;        /* simulated device memory (0 for the global sum) */
    size_t shared;          /* of the handles: shareable ones (a memfd each, create_as) */
    size_t imported;        /* of the handles: imported ones (import_fd; not in handle_bytes) */
    size_t overlaps;        /* calls that began while another thread's unmap or release
                               of the same handle had not ended (latency included): the
                               CUDA driver corrupts its own heap then; 0 is the contract */
} xseg_host_counts;

/* Counters of one backend context, and of all contexts of the process. */
void xseg_host_counts_of(void *ctx, xseg_host_counts *out);
void xseg_host_counts_global(xseg_host_counts *out);

/* Hold a stream: events recorded on it while held stay pending (the GPU is
 * "still busy") until the hold is lifted.  event_sync and stream_sync on a
 * held stream complete its events, as waiting for the GPU would. */
void xseg_host_hold_stream(void *ctx, void *stream, int hold);

/* A GPU running behind the CPU: from now on, an event recorded on any
 * stream completes only after it has been queried `lag` times (conf
 * host_event_lag); event_sync completes it at once.  0: events complete
 * when recorded (unless their stream is held). */
void xseg_host_set_event_lag(void *ctx, unsigned lag);

/* A latency model (conf host_driver_latency).  A successful call costs
 *   create, map, release:  call_ns + per_2mib_ns x 2 MiB units of its size
 *                          (the handle's size for release),
 *   set_access, unmap:     call_ns x the handles mapped in its range
 *                          + per_2mib_ns x 2 MiB units of the range,
 * (units rounded up; at least one handle): the call lasts at least that
 * long, its own work included, the rest spent spinning on CLOCK_MONOTONIC
 * after the context's lock is given back.  Timed calls take turns: one
 * that comes in while another thread's (of any context) has not ended
 * starts when that one ends, as in the CUDA driver.  All zero: calls take
 * only their real time. */
typedef struct xseg_host_cost {
    uint32_t call_ns;     /* per call, or per handle (set_access, unmap) */
    uint32_t per_2mib_ns; /* per 2 MiB of the call's size */
} xseg_host_cost;

typedef struct xseg_host_latency {
    xseg_host_cost create, release, map, unmap, set_access;
} xseg_host_latency;

/* Fitted to the project's reference measurements of the CUDA driver on an
 * H200 (per call on a 2 MiB / 20 MiB / 512 MiB handle; one set_access or
 * unmap over 512 handles of 2 MiB): on a 2 MiB handle create 8.7 us, map
 * 1.3 us, set_access 25.0 us, unmap 18.1 us, release 11.1 us. */
extern const xseg_host_latency xseg_host_latency_h200;

/* Use `lat` (copied; NULL: none) for the context's calls from now on. */
void xseg_host_set_latency(void *ctx, const xseg_host_latency *lat);

/* 1 if the page at va is mapped and accessible, 0 otherwise. */
int xseg_host_is_accessible(void *ctx, uintptr_t va);

/* Devices with access to the granule at va (bit d: device d; 0: no
 * access).  Device 0 is the context's; 1..7 are simulated peers
 * (set_peers). */
uint64_t xseg_host_access_mask(void *ctx, uintptr_t va);

/* Number of syncs (event_sync + stream_sync) the context performed. */
uint64_t xseg_host_sync_count(void *ctx);

/* Register the backend's fork handler (its counter lock held across fork())
 * if not yet done; process.c's fork module registers its own after it. */
void xhost_fork_init(void);

#endif
