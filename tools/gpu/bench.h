/* bench.h: the pieces of the GPU allocator benchmark (tools/gpu/) shared
 * between its files: the allocator interface that every contender
 * implements, the tests, timing and result output (one JSON object a line
 * on stdout, gathered by tools/gpu/report.py). */
#ifndef XSEG_BENCH_H
#define XSEG_BENCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef void *bench_stream; /* cudaStream_t; NULL: the legacy default stream */

/* One contender.  alloc returns NULL on failure (message in last_error). */
typedef struct bench_alloc {
    const char *name;
    const char *desc;
    int (*init)(char *err, size_t len);
    void *(*alloc)(size_t n, bench_stream s);
    void (*free)(void *p, size_t n, bench_stream s);
    /* Give every cached byte back to the device; 0 on success. */
    int (*release)(void);
    const char *(*last_error)(void);
    /* The allocator's own peak of memory held (0: it does not say). */
    uint64_t (*own_peak)(void);
    /* Driver calls so far by kind (xseg only; NULL elsewhere): fills up to
     * n counters and their names, returns how many. */
    size_t (*drv_calls)(uint64_t *count, const char **name, size_t n);
    /* Called before a stream it has seen is destroyed (NULL: nothing). */
    void (*stream_retire)(bench_stream s);
} bench_alloc;

#define BENCH_MAX_OPS 32

extern const bench_alloc bench_xseg;
extern const bench_alloc bench_xseg_keep; /* release_threshold:unlimited */
extern const bench_alloc bench_async;
extern const bench_alloc bench_cudamalloc;
extern const bench_alloc bench_torch;     /* native caching allocator */
extern const bench_alloc bench_torch_exp; /* the same, expandable_segments:True */

/* Options of one run. */
typedef struct bench_opts {
    const char *trace;    /* replay: trace file */
    double budget_s;      /* replay: stop after this long (0: no limit) */
    int sample_in_timed;  /* replay: read cuMemGetInfo in the timed pass */
    int threads;          /* hot: threads for the threaded part */
    int threads_only;     /* hot: skip the one-thread part */
    const char *gcase;    /* growth: run only this case (NULL: all, in order) */
} bench_opts;

int bench_hot(const bench_alloc *a, const bench_opts *o);
int bench_growth(const bench_alloc *a, const bench_opts *o);
int bench_replay(const bench_alloc *a, const bench_opts *o);
/* Diagnostic: blocks cached for a stream that the program then destroyed
 * (allowed once its work is done) must not crash a later allocation. */
int bench_diag_stream(const bench_alloc *a, const bench_opts *o);

/* ---- helpers (bench_util.c) ---- */
double bench_now(void);                  /* seconds, monotonic */
size_t bench_dev_free(void);             /* cudaMemGetInfo free bytes */
int bench_sync(void);                    /* cudaDeviceSynchronize, 0 on success */
bench_stream bench_stream_new(void);     /* non-blocking stream, NULL on failure */
/* Destroy a stream, letting the allocator forget it first (stream_retire). */
void bench_stream_free(const bench_alloc *a, bench_stream s);
int bench_stream_sync(bench_stream s);
const char *bench_cuda_error(void);      /* last runtime error's string */
double bench_median(double *v, size_t n);
/* One result: {"alloc":..., "test":..., <fields>} where fields is the
 * inside of a JSON object ("\"k\":1,\"m\":2"), printed on stdout. */
void bench_emit(const bench_alloc *a, const char *test, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void bench_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void bench_env(void);                    /* one "env" record: GPU, driver, runtime */
/* Driver calls since `since` as JSON fields ("\"drv_map\":12,..."), or ""
 * for contenders that do not count them; `since` is then updated. */
const char *bench_drv_delta(const bench_alloc *a, uint64_t *since, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* XSEG_BENCH_H */
