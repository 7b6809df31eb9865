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

/* 1 if the page at va is mapped and accessible, 0 otherwise. */
int xseg_host_is_accessible(void *ctx, uintptr_t va);

/* Number of syncs (event_sync + stream_sync) the context performed. */
uint64_t xseg_host_sync_count(void *ctx);

/* Register the backend's fork handler (its counter lock held across fork())
 * if not yet done; process.c's fork module registers its own after it. */
void xhost_fork_init(void);

#endif
