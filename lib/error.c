/* error.c: status strings, driver-op names, and the thread-local detailed
 * message of the last failing call (xseg_last_error). */
#include <stdio.h>

#include "internal.h"

static _Thread_local char last_error[768];
static _Thread_local unsigned error_gen;

const char *xseg_strerror(xseg_status st)
{
    switch (st) {
    case XSEG_OK: return "success";
    case XSEG_ERR_INVALID_ARG: return "invalid argument";
    case XSEG_ERR_CONFIG: return "invalid configuration";
    case XSEG_ERR_OOM: return "out of memory";
    case XSEG_ERR_SIZE: return "request too large";
    case XSEG_ERR_INVALID_POINTER: return "pointer not allocated by this allocator";
    case XSEG_ERR_INTERIOR_POINTER: return "pointer inside an allocation, not at its start";
    case XSEG_ERR_DOUBLE_FREE: return "pointer already freed";
    case XSEG_ERR_DRIVER: return "driver error";
    case XSEG_ERR_NO_BACKEND: return "backend not available";
    case XSEG_ERR_NO_DEVICE: return "no such device";
    case XSEG_ERR_FORKED: return "allocator used in a forked child";
    case XSEG_ERR_VA_EXHAUSTED: return "virtual address range exhausted";
    case XSEG_ERR_BUFFER_TOO_SMALL: return "buffer too small";
    case XSEG_ERR_INTERNAL: return "internal error";
    case XSEG_ERR_ASLEEP: return "the tag's memory is asleep";
    case XSEG_ERR_STATE: return "not possible in the current state";
    }
    return "unknown status";
}

const char *xseg_op_name(xseg_op op)
{
    static const char *const names[XSEG_OP_COUNT] = {
        "reserve", "address_free", "create", "release", "map", "unmap", "set_access",
        "mem_info", "event_create", "event_record", "event_query", "event_sync",
        "event_destroy", "stream_sync", "host_alloc", "host_free", "copy_to_host",
        "copy_to_device", "copy_wait", "export", "import"};
    return (unsigned)op < XSEG_OP_COUNT ? names[op] : "unknown";
}

const char *xseg_last_error(void)
{
    return last_error;
}

void xseg_clear_error(void)
{
    last_error[0] = '\0';
}

unsigned xseg_error_gen(void)
{
    return error_gen;
}

xseg_status xseg_fail(xseg_t *xs, xseg_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    error_gen++;
    if (xs && xs->conf.verbose)
        fprintf(stderr, "%s\n", last_error);
    return st;
}

const char *xseg_fmt_size(uint64_t v, char *buf, size_t len)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double d = (double)v;
    int u = 0;
    while (d >= 1024.0 && u < 5) {
        d /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%llu B", (unsigned long long)v);
    else
        snprintf(buf, len, "%.2f %s", d, unit[u]);
    return buf;
}
