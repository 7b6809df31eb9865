/* support_fault.h: a fault-injecting driver for tests.  `fault_driver` wraps
 * the host backend (xseg_driver_host) and counts every call per operation;
 * armed, it makes the Nth call of one operation fail (or every call from
 * the Nth on) with a given XDRV_* code, before the real driver runs, so a
 * failed call has no effect, as the driver contract says.  Pass it to
 * xseg_create_with_driver().  Contexts are the host backend's own, so
 * xseg_host_counts_of() and xseg_host_hold_stream() work on xs->dctx.
 * State is process-wide and guarded by a mutex (thread-safe). */
#ifndef XSEG_SUPPORT_FAULT_H
#define XSEG_SUPPORT_FAULT_H

#include <stddef.h>
#include <stdint.h>

#include "driver.h"
#include "driver_host.h"
#include "xseg.h"

/* Operations: the xseg_op values, plus init and granularity. */
enum { FAULT_OP_INIT = XSEG_OP_COUNT, FAULT_OP_GRANULARITY, FAULT_NOPS };

typedef enum fault_mode {
    FAULT_ONCE = 0, /* only the Nth call fails */
    FAULT_FROM = 1  /* the Nth call and every later one fail */
} fault_mode;

extern const xseg_driver fault_driver;

/* Counters to zero, disarmed, not paused, no fini recorded. */
void fault_reset(void);
/* Fail the nth (1-based, counted since the last reset) call of op. */
void fault_arm(int op, uint64_t nth, int code, fault_mode mode);
void fault_disarm(void);
/* While paused, calls go through uncounted and never fail. */
void fault_pause(int paused);
uint64_t fault_calls(int op);
/* Failures injected since the last reset. */
uint64_t fault_fired(void);
const char *fault_op_name(int op);
/* The codes the real driver returns when op fails (at most max). */
int fault_codes(int op, int *codes, int max);
/* What the allocator left in the driver when it called fini (the host
 * counters of the context just before the real fini).  1 if a fini ran
 * since the last reset. */
int fault_fini_counts(xseg_host_counts *out);

#endif /* XSEG_SUPPORT_FAULT_H */
