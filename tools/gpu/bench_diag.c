/* bench_diag.c: a diagnostic, not a measurement: a block is allocated and
 * freed on stream A, A's work completes and the program destroys A (which
 * CUDA allows); then another stream allocates the same size again and
 * again.  An allocator that later touches A's handle (to record or query
 * an event for the cached block) uses a dangling stream and may crash;
 * surviving prints {"survived":true}. */
#include "bench.h"

#define DIAG_SIZE ((size_t)64 << 20)

int bench_diag_stream(const bench_alloc *a, const bench_opts *o)
{
    bench_stream dead = bench_stream_new(), live = bench_stream_new();
    void *p, *q[3];

    (void)o;
    if (dead == NULL || live == NULL || (p = a->alloc(DIAG_SIZE, dead)) == NULL)
        return -1;
    a->free(p, DIAG_SIZE, dead);
    bench_stream_sync(dead);
    bench_stream_free(a, dead);
    bench_log("%s: stream destroyed after its block was freed; allocating on another",
              a->name);
    for (int round = 0; round < 4; round++) {
        for (int i = 0; i < 3; i++)
            if ((q[i] = a->alloc(DIAG_SIZE, live)) == NULL)
                return -1;
        for (int i = 0; i < 3; i++)
            a->free(q[i], DIAG_SIZE, live);
    }
    (void)a->release();
    bench_sync();
    bench_stream_free(a, live);
    bench_emit(a, "diag-stream", "\"survived\":true");
    return 0;
}
